/*
 * ops.c - the UDP transport's ops (core/transport.h), as the registry sees them.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>

#include "transport/udp/priv.h"

/* ---- the transport's ops ---------------------------------------------------------- */

/* Every peer whose address it could learn (uln_udp_learn), on this host
 * or another: a datagram through the kernel's stack. */
static int uln_udp_reaches(const struct uln_ctx *ctx, int peer)
{
    const struct uln_udp *u = udp_of(ctx);
    return u && u->remote && u->remote[peer] == UDP_REMOTE ? ULN_TP_COST_NETWORK : 0;
}

static const char *const udp_aliases[] = {"xdp", NULL}; /* ULN_LINK=xdp under udp */

static void uln_udp_query(const struct uln_ctx *ctx, struct uln_info *info)
{
    for (int p = 0; p < ctx->size; p++)
        info->udp_peers += ctx->peer_tp[p] == &uln_tp_udp;
    const struct uln_udp *u = udp_of(ctx);
    if (u && u->link_kind[0]) info->link = u->link_kind;
}

/* uln_query_key's "udp.*": its settings in force, the link, its peers. */
static int uln_udp_info(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen, char *val,
                        size_t vlen)
{
    const struct uln_udp_params *up = udp_params(ctx);
    const struct uln_udp *u = udp_of(ctx);
    int peers = 0, n;
    for (int p = 0; ctx->peer_tp && p < ctx->size; p++)
        peers += ctx->peer_tp[p] == &uln_tp_udp;
    switch (i) {
    case 0:
        snprintf(key, klen, "open"); /* needed in this context (bound its ports) */
        n = snprintf(val, vlen, "%d", u != NULL);
        break;
    case 1:
        snprintf(key, klen, "window");
        n = snprintf(val, vlen, "%u", up->window);
        break;
    case 2:
        snprintf(key, klen, "dead_ms");
        n = snprintf(val, vlen, "%u", up->dead_ms);
        break;
    case 3:
        snprintf(key, klen, "mtu"); /* 0: the interface's */
        n = snprintf(val, vlen, "%u", up->mtu);
        break;
    case 4:
        snprintf(key, klen, "peers");
        n = snprintf(val, vlen, "%d", peers);
        break;
    case 5: /* the link the endpoints took ("" before one opened) */
        snprintf(key, klen, "link");
        n = snprintf(val, vlen, "%s", u ? u->link_kind : "");
        break;
    case 6: /* why the link asked for (or auto's) was not had */
        snprintf(key, klen, "link_why");
        n = snprintf(val, vlen, "%s", u ? u->xdp_why : "");
        break;
    default:
        return -ENOENT;
    }
    return n < 0 ? -EINVAL : 0;
}

/* After the engine committed packets: a GET request to an idle peer leaves at
 * once (uln_udp_commit said so); answers go at the end of the pass, together. */
static void uln_udp_kick(struct uln_ep *ep, int peer)
{
    (void)peer; /* one batch for all peers of the endpoint */
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue->kick_now) return;
    ue->kick_now = false;
    uln_udp_flush(ep);
}

const struct uln_transport_ops uln_tp_udp = {
    .name = "udp",
    .aliases = udp_aliases,
    .caps = ULN_TP_CAP_TARGET_CPU,
    .slot_bytes = sizeof(struct udp_addr),
    .id = ULN_TPID_UDP,
    .settings = &uln_udp_settings,
    .open = uln_udp_open,
    .choose = uln_udp_choose,
    .learn = uln_udp_learn,
    .addr_pack = uln_udp_addr_pack,
    .addr_unpack = uln_udp_addr_unpack,
    .addr_str = uln_udp_addr_str,
    .short_bytes = 7,
    .short_seal_bytes = ULN_SEAL_PUB_COMPACT,
    .short_pack = uln_udp_short_pack,
    .short_unpack = uln_udp_short_unpack,
    .close = uln_udp_close,
    .reaches = uln_udp_reaches,
    .query = uln_udp_query,
    .info = uln_udp_info,
    .ep_open = uln_udp_ep_open,
    .ep_close = uln_udp_ep_close,
    .connect = uln_udp_attach,
    .reserve = uln_udp_reserve,
    .commit = uln_udp_commit,
    .send_nap = uln_udp_nap,
    .send_put = uln_udp_put,
    .serve_get = uln_udp_serve_get,
    .kick = uln_udp_kick,
    .peer_dead = uln_udp_peer_dead,
    .peer_watch = uln_udp_peer_watch,
    .frag_max = uln_udp_frag_max,
    .progress_rx = uln_udp_progress_rx,
    .progress_tx = uln_udp_progress_tx,
    .busy = uln_udp_busy,
    .wait_fds = uln_udp_poll_setup,
};
