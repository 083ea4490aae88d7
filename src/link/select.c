/*
 * select.c - where the link under an endpoint is chosen (link/select.h):
 * AF_XDP where it is asked for, or where auto finds a driver that runs it
 * zero-copy, else the socket link; then the fault injector around
 * whichever came, once.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/internal.h"
#include "link/fault.h"
#include "link/select.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"
#include "transport/udp/ctx.h"

/* ---- the link under an endpoint ------------------------------------------------ */

/* AF_XDP on the endpoint's address and port (the socket's), in copy mode
 * `copy`. 0 or -errno, why saying what stood in the way. */
static int open_xdp(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, enum uln_xdp_copy copy,
                    struct uln_link **out, char *why, size_t whylen)
{
    struct uln_link_xdp_cfg xc = {.fd = cfg->fd,
                                  .queue = ctx->p.xdp_queue,
                                  .copy = copy,
                                  .hook = (enum uln_xdp_hook)ctx->p.xdp_hook,
                                  .mtu = cfg->mtu,
                                  .rx_bufs = cfg->rx_bufs,
                                  .max_peers = cfg->max_peers};
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(cfg->fd, (struct sockaddr *)&ss, &len) < 0) {
        int e = errno;
        snprintf(why, whylen, "getsockname: %s", strerror(e));
        return -e;
    }
    if (ss.ss_family == AF_INET) memcpy(&xc.local, &ss, sizeof xc.local);
    return uln_link_xdp_open(&xc, out, why, whylen);
}

/* ULN_TRANSPORT=auto: AF_XDP where it can be zero-copy, else the socket
 * link (docs/xdp.md says why copy mode does not pay). *loud: AF_XDP was for
 * this interface and did not come (refused, or not built), so the reason is
 * worth a line on stderr. An interface that is simply not one for AF_XDP
 * (veth, virtio_net: auto's own choice), loopback or the any address is the
 * socket link's by nature: a line there would be printed by every process
 * of every job and libfabric client, for nothing to fix; ulninfo has it. */
static int open_auto(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, struct uln_link **out,
                     char *why, size_t whylen, bool *loud)
{
    struct sockaddr_in in;
    socklen_t len = sizeof in;
    char ifname[IF_NAMESIZE];
    *loud = false;
    if (getsockname(cfg->fd, (struct sockaddr *)&in, &len) < 0 || len != sizeof in ||
        in.sin_family != AF_INET || in.sin_addr.s_addr == htonl(INADDR_ANY) ||
        ntohl(in.sin_addr.s_addr) >> 24 == 127 ||
        uln_link_xdp_iface_of(in.sin_addr.s_addr, ifname, sizeof ifname)) {
        snprintf(why, whylen, "not bound to an IPv4 address of an interface");
        return -EOPNOTSUPP;
    }
    int rc = uln_link_xdp_auto_verdict(ifname, why, whylen);
    *loud = rc != -ENOENT;
    return rc ? rc : open_xdp(ctx, cfg, ULN_XDP_ZEROCOPY, out, why, whylen);
}

/* AF_XDP as ULN_TRANSPORT asks (xdp: forced; auto: where zero-copy), else
 * -errno with why. An auto that failed once is not tried again in this
 * context: every endpoint would meet the same obstacle (or a busy queue). */
static int open_xdp_as_asked(struct uln_ctx *ctx, struct uln_udp *u,
                             const struct uln_link_udp_cfg *cfg, struct uln_link **out)
{
    char why[sizeof u->xdp_why];
    bool loud = true;
    int rc = -EOPNOTSUPP;
    if (ctx->p.xdp)
        rc = open_xdp(ctx, cfg, (enum uln_xdp_copy)ctx->p.xdp_mode, out, why, sizeof why);
    else if (ctx->p.transport != ULN_TP_AUTO)
        return -EOPNOTSUPP;
    else if (u->xdp_why[0])
        return -EOPNOTSUPP;
    else
        rc = open_auto(ctx, cfg, out, why, sizeof why, &loud);
    if (!rc) {
        struct uln_link_info in;
        uln_link_info(*out, &in);
        snprintf(u->link_kind, sizeof u->link_kind, "xdp");
        snprintf(u->xdp_mode, sizeof u->xdp_mode, "%s", in.xdp_mode);
        return 0;
    }
    /* Once per context: every endpoint meets the same obstacle. */
    if (!u->xdp_why[0] && loud)
        fprintf(stderr, "ulnet: %s: %s; using udp\n", ctx->p.xdp ? "xdp" : "auto", why);
    snprintf(u->xdp_why, sizeof u->xdp_why, "%s", why);
    return rc;
}

int uln_link_select_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg,
                         struct uln_link **out)
{
    struct uln_udp *u = udp_of(ctx);
    int rc = open_xdp_as_asked(ctx, u, cfg, out);
    if (rc) {
        rc = uln_link_udp_open(cfg, out);
        if (rc) return rc;
        if (strcmp(u->link_kind, "xdp")) snprintf(u->link_kind, sizeof u->link_kind, "udp");
    }
    /* The fault injector wraps whichever link came, here and nowhere else
     * (ULN_FAULT: ctx.c checked the spec at uln_open). It decides each
     * packet's fate before the link gathers the survivors into GSO runs, so
     * a run carries only packets meant to leave, and loss is measured on the
     * path jobs really take. */
    char why[128];
    rc = uln_link_fault_wrap(ctx->p.fault, out, why, sizeof why);
    if (rc == -EINVAL) fprintf(stderr, "ulnet: fault spec '%s': %s\n", ctx->p.fault, why);
    return rc;
}
