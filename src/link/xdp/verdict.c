/*
 * verdict.c - where AF_XDP is worth having (ULN_LINK=auto): the interface
 * that owns an address, and whether its driver runs AF_XDP zero-copy; and
 * the AF_XDP link's stand-ins in a build without it.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"

/* ------------------------------------------------------------------------- */
/* ULN_TRANSPORT=auto: where AF_XDP is worth having                           */
/* ------------------------------------------------------------------------- */

/* Drivers that can run AF_XDP zero-copy (they implement ndo_xsk_wakeup), by
 * the name ETHTOOL_GDRVINFO gives (stmmac says st_gmac). Anywhere else AF_XDP
 * is copy mode: every frame an skb of its own inside sendto. Runs sent by
 * UDP_SEGMENT take most of that away, but on veth the XDP program itself
 * still costs bulk data 1.5-2x the socket link's CPU a datagram (docs/xdp.md,
 * "Two paths") for 0.7x its latency; auto keeps the socket link there. The
 * list only lets auto try: a zero-copy bind must still succeed. */
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

static int driver_verdict(const char *ifname, const char *drv, char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof(zc_drivers) / sizeof(zc_drivers[0]); i++) {
        if (strcmp(drv, zc_drivers[i])) continue;
        if (uln_link_xdp_built()) return 0;
        snprintf(why, whylen,
                 "%s (%s): zero-copy AF_XDP could be had, but this ulnet was built without "
                 "libxdp/libbpf/clang",
                 ifname, drv);
        return -EOPNOTSUPP;
    }
    snprintf(why, whylen,
             "%s (%s): no zero-copy AF_XDP; in copy mode it gains latency but bulk costs more "
             "than the socket link's GSO/GRO (ULN_LINK=xdp forces it)",
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

int uln_link_xdp_auto_verdict(const char *ifname, char *why, size_t whylen)
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
        rc = driver_verdict(ifname, drv, why, whylen);
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

#else /* ULN_HAVE_XDP */

bool uln_link_xdp_built(void)
{
    return true;
}

#endif /* ULN_HAVE_XDP */
