/*
 * link.c - the service's link (docs/service.md, "Between services"): a link
 * of src/link on the wire's address, chosen by --link as ULN_LINK chooses an
 * endpoint's. xdp: AF_XDP (zero-copy where the driver can, else copy mode);
 * auto: AF_XDP only where its driver runs it zero-copy (the verdict of
 * ULN_LINK=auto); udp, or when AF_XDP does not come: the socket link, with
 * GSO and GRO. --if names the interface the address must be on.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ulnetd.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"

#define LINK_RX_BUFS 512u /* datagrams lent at once: the wire gives each back at once */

static int bound_socket(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (const struct sockaddr *)sa, sizeof *sa) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* AF_XDP on fd's address: 0 (the link owns fd) or -errno with why. auto: only
 * where the interface's driver runs it zero-copy. */
static int open_xdp(const struct ulnetd *d, const struct sockaddr_in *sa, int fd, bool autom,
                    struct uln_link **out, char *why, size_t whylen)
{
    char ifname[IF_NAMESIZE];
    if (sa->sin_addr.s_addr == htonl(INADDR_ANY) ||
        uln_link_xdp_iface_of(sa->sin_addr.s_addr, ifname, sizeof ifname)) {
        snprintf(why, whylen, "not an IPv4 address of an interface");
        return -EOPNOTSUPP;
    }
    if (autom) {
        int rc = uln_link_xdp_auto_verdict(ifname, false, why, whylen);
        if (rc) return rc;
    }
    struct uln_link_xdp_cfg xc = {.local = *sa,
                                  .fd = fd,
                                  .copy = autom ? ULN_XDP_ZEROCOPY : ULN_XDP_COPY_AUTO,
                                  .rx_bufs = LINK_RX_BUFS,
                                  .hook = (enum uln_xdp_hook)d->xdp_hook,
                                  .gso_run = 4}; /* ULN_XDP_GSO_RUN's default */
    return uln_link_xdp_open(&xc, out, why, whylen);
}

/* The address must be on --if's interface, when it is given. */
static int check_iface(const struct ulnetd *d, const struct sockaddr_in *sa)
{
    char ifname[IF_NAMESIZE] = "";
    if (!d->iface[0]) return 0;
    if (uln_link_xdp_iface_of(sa->sin_addr.s_addr, ifname, sizeof ifname) == 0 &&
        !strcmp(ifname, d->iface))
        return 0;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip);
    fprintf(stderr, "ulnetd: --addr %s is not an address of --if %s%s%s\n", ip, d->iface,
            ifname[0] ? " but of " : "", ifname);
    return -EINVAL;
}

static int open_plain(struct ulnetd *d, const struct sockaddr_in *sa, struct uln_link **out)
{
    if (check_iface(d, sa)) return -EINVAL;
    int fd = bound_socket(sa);
    if (fd < 0) return fd;
    char why[sizeof d->link_why] = "";
    bool want_xdp = !strcmp(d->link, "xdp"), autom = !strcmp(d->link, "auto");
    if (want_xdp || autom) {
        /* Before the link: the reaper keeps none of its memory (reaper.c). */
        if (reaper_start(d) != 0)
            fprintf(stderr, "ulnetd: no reaper: a kill -9 leaves the XDP program until the "
                            "next ulnet process here\n");
        int rc = open_xdp(d, sa, fd, autom, out, why, sizeof why);
        if (rc == 0) {
            snprintf(d->link_kind, sizeof d->link_kind, "xdp");
            char ifname[IF_NAMESIZE] = "";
            uln_link_xdp_iface_of(sa->sin_addr.s_addr, ifname, sizeof ifname);
            reaper_armed(d, (int)if_nametoindex(ifname)); /* 0: the reaper ends */
            return 0;
        }
        reaper_stop(d);
        /* As ULN_LINK: asked for and refused is worth a line; auto's "not an
         * interface for it" is auto's own choice (--status says it). */
        if (want_xdp || rc != -ENOENT)
            fprintf(stderr, "ulnetd: --link %s: %s; using udp\n", d->link, why);
        snprintf(d->link_why, sizeof d->link_why, "%s", why);
    }
    struct uln_link_udp_cfg uc = {.adopt = true, .fd = fd, .rx_bufs = LINK_RX_BUFS};
    int rc = uln_link_udp_open(&uc, out);
    if (rc) return rc; /* the service ends; fd may be closed by the link already */
    snprintf(d->link_kind, sizeof d->link_kind, "udp");
    return 0;
}

/* --secure: the sealing goes around whichever link came (wire_seal.c). */
int wire_link_open(struct ulnetd *d, const struct sockaddr_in *sa, struct uln_link **out)
{
    int rc = open_plain(d, sa, out);
    if (rc || !d->secure) return rc;
    if ((rc = wire_seal_wrap(d, out)) != 0) uln_link_close(*out);
    return rc;
}
