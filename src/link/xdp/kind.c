/*
 * kind.c - the AF_XDP link as select.c knows it (link/select.h): opened on
 * the endpoint's bound socket with the ULN_XDP_* settings, when ULN_LINK
 * names it or when auto finds a driver that runs it zero-copy.
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
#include "link/select.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"
#include "link/xdp/settings.h"

/* AF_XDP on the endpoint's address and port (the socket's), in copy mode
 * `copy`. 0 or -errno, why saying what stood in the way. */
static int open_xdp(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, enum uln_xdp_copy copy,
                    struct uln_link **out, char *why, size_t whylen)
{
    const struct uln_xdp_params *xp = uln_params_block(&ctx->p, &uln_link_xdp_settings);
    struct uln_link_xdp_cfg xc = {.fd = cfg->fd,
                                  .queue = xp->queue,
                                  .gso_run = xp->gso_run,
                                  .copy = copy,
                                  .hook = (enum uln_xdp_hook)xp->hook,
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

/* ULN_LINK=auto: AF_XDP where it can be zero-copy (or, ULN_XDP_AUTO=copy,
 * on any Ethernet driver, in copy mode where it has no zero-copy), else the
 * socket link (docs/xdp.md says why copy mode does not pay for bulk). *loud: AF_XDP was for
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
    const struct uln_xdp_params *xp = uln_params_block(&ctx->p, &uln_link_xdp_settings);
    int rc = uln_link_xdp_auto_verdict(ifname, xp->auto_copy == 1, why, whylen);
    *loud = rc != -ENOENT;
    if (rc) return rc;
    return open_xdp(ctx, cfg, xp->auto_copy == 1 ? ULN_XDP_COPY_AUTO : ULN_XDP_ZEROCOPY, out, why,
                    whylen);
}

/* Asked (ULN_LINK=xdp, or its alias ULN_TRANSPORT=xdp): in the copy mode
 * ULN_XDP_MODE says, every reason it did not come worth a line. auto: only
 * where zero-copy. */
static int xdp_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, bool asked,
                    struct uln_link **out, char *why, size_t whylen, bool *loud)
{
    const struct uln_xdp_params *xp = uln_params_block(&ctx->p, &uln_link_xdp_settings);
    *loud = true;
    if (asked) return open_xdp(ctx, cfg, (enum uln_xdp_copy)xp->mode, out, why, whylen);
    return open_auto(ctx, cfg, out, why, whylen, loud);
}

/* Cheaper than the socket link where it opens (docs/xdp.md: a NAP's latency
 * 0.72x, zero-copy's bandwidth): auto tries it first. */
const struct uln_link_kind uln_link_kind_xdp = {
    .name = "xdp", .settings = &uln_link_xdp_settings, .cost = 10, .open = xdp_open};
