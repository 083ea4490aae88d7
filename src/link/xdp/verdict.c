/*
 * verdict.c - where AF_XDP is worth having (ULN_LINK=auto): the interface
 * that owns an address, and whether its driver runs AF_XDP zero-copy; and
 * the AF_XDP link's stand-ins in a build without it.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CAP_BPF
#define CAP_BPF 39 /* Linux 5.8; before it, CAP_SYS_ADMIN loads programs */
#endif

/* ------------------------------------------------------------------------- */
/* ULN_TRANSPORT=auto: where AF_XDP is worth having                           */
/* ------------------------------------------------------------------------- */

/* Drivers that can run AF_XDP zero-copy (they implement ndo_xsk_wakeup), by
 * the name ETHTOOL_GDRVINFO gives (stmmac says st_gmac). Anywhere else AF_XDP
 * is copy mode: every frame an skb of its own inside sendto. Runs sent by
 * UDP_SEGMENT take most of that away, but on veth the XDP program itself
 * still costs bulk data 1.5-2x the socket link's CPU a datagram (docs/xdp.md,
 * "Two paths"): measured, 0.6x its latency and 1.5x its small-message rate,
 * but 0.8-0.9x its bandwidth at 1-4 MiB; auto keeps the socket link there
 * unless ULN_XDP_AUTO=copy says latency is what counts. The list only lets
 * auto try: a zero-copy bind must still succeed. */
static const char *const zc_drivers[] = {"i40e",      "ice",     "ixgbe",  "igb",   "igc",
                                         "mlx5_core", "st_gmac", "stmmac", "tsnep", "gve"};

int uln_link_xdp_iface_of(uint32_t ip, char *ifname, size_t len)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0) return -errno;
    int rc = -ENODEV;
    for (struct ifaddrs *i = ifs; i && rc; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == ip)
            rc = 0, snprintf(ifname, len, "%s", i->ifa_name);
    freeifaddrs(ifs);
    return rc;
}

static int driver_verdict(const char *ifname, const char *drv, bool copy, char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof(zc_drivers) / sizeof(zc_drivers[0]); i++) {
        if (strcmp(drv, zc_drivers[i])) continue;
        if (uln_link_xdp_built()) {
            snprintf(why, whylen, "%s (%s) runs AF_XDP zero-copy", ifname, drv);
            return 0;
        }
        snprintf(why, whylen,
                 "%s (%s): zero-copy AF_XDP could be had, but this ulnet was built without "
                 "libxdp/libbpf/clang",
                 ifname, drv);
        return -EOPNOTSUPP;
    }
    if (copy && uln_link_xdp_built()) {
        snprintf(why, whylen, "%s (%s): copy mode, as ULN_XDP_AUTO=copy asks", ifname, drv);
        return 0;
    }
    snprintf(why, whylen,
             "%s (%s): no zero-copy AF_XDP; in copy mode it gains latency but loses bulk "
             "bandwidth to the socket link's GSO/GRO (ULN_XDP_AUTO=copy or ULN_LINK=xdp take it)",
             ifname, drv);
    return -ENOENT;
}

/* The interface's driver as it names itself (ETHTOOL_GDRVINFO), through any
 * IPv4 socket fd: 0, or -errno with drv "". */
int uln_xdp_driver_of(int fd, const char *ifname, char drv[DRV_NAME_LEN])
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    struct ethtool_drvinfo di = {.cmd = ETHTOOL_GDRVINFO};
    _Static_assert(sizeof(di.driver) == DRV_NAME_LEN, "ethtool's driver name");
    ifr.ifr_data = (void *)&di;
    drv[0] = '\0';
    if (ioctl(fd, SIOCETHTOOL, &ifr) < 0) return -errno;
    memcpy(drv, di.driver, DRV_NAME_LEN);
    drv[DRV_NAME_LEN - 1] = '\0';
    return 0;
}

/* Whether this process may attach an XDP program and bind AF_XDP sockets:
 * CAP_NET_ADMIN, and CAP_BPF or CAP_SYS_ADMIN (its effective set). */
static bool privileged(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) < 0) return true; /* cannot tell: let the open say */
#define HAS(c) ((d[(c) / 32].effective >> ((c) % 32)) & 1u)
    return HAS(CAP_NET_ADMIN) && (HAS(CAP_BPF) || HAS(CAP_SYS_ADMIN));
#undef HAS
}

int uln_link_xdp_auto_verdict(const char *ifname, bool copy, char *why, size_t whylen)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "%s: cannot ask its driver: %s", ifname, strerror(e));
        return -e;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    char drv[DRV_NAME_LEN];
    int rc;
    if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0 || ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
        snprintf(why, whylen, "%s: not an Ethernet interface", ifname);
        rc = -ENOENT;
    } else if ((rc = uln_xdp_driver_of(fd, ifname, drv)) < 0) {
        /* A driver that does not name itself is on no list of ours. */
        snprintf(why, whylen, "%s: its driver does not say its name (ETHTOOL_GDRVINFO: %s)", ifname,
                 strerror(-rc));
        rc = -ENOENT;
    } else {
        rc = driver_verdict(ifname, drv, copy, why, whylen);
        /* Where auto would try AF_XDP: not without the privilege, which
         * ulninfo says as well as the open would. */
        if (rc == 0 && !privileged()) {
            snprintf(why, whylen, "%s (%s): no privilege (CAP_NET_ADMIN and CAP_BPF)", ifname, drv);
            rc = -EPERM;
        }
    }
    close(fd);
    return rc;
}

#ifndef ULN_HAVE_XDP

bool uln_link_xdp_built(void)
{
    return false;
}

int uln_link_xdp_open(const struct uln_link_xdp_cfg *cfg, struct uln_link **out, char *why,
                      size_t whylen)
{
    (void)cfg;
    *out = NULL;
    snprintf(why, whylen, "this ulnet was built without libxdp/libbpf/clang");
    return -EOPNOTSUPP;
}

int uln_link_xdp_reap(int ifindex)
{
    (void)ifindex;
    return 0;
}

#else /* ULN_HAVE_XDP */

bool uln_link_xdp_built(void)
{
    return true;
}

#endif /* ULN_HAVE_XDP */
