/*
 * hooks.c - the UDP transport's test hooks (ULN_TEST_HOOKS only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/udp/priv.h"

/* ---- for tests and fuzzing ---------------------------------------------------------
 * Not used by the library itself: they let tests (tests/forged, tests/fuzz) put
 * crafted bytes through the real receive path, and crafted packets on the wire
 * from a rank's real socket. Built only into the tests' library (ULN_TEST_HOOKS),
 * never into the shipped ones. */
#ifdef ULN_TEST_HOOKS

int uln_udp_rx_inject(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return -ENOTCONN;
    if (len > UINT32_MAX) return -EMSGSIZE;
    int32_t id = rank >= 0 && rank < ep->ctx->size ? ue->id_of_rank[rank] : -1;
    struct uln_link_rx rx;
    int rc = uln_link_rx_lend(ue->io, id, buf, (uint32_t)len, &rx);
    if (rc) return rc;
    ue->now = uln_now_ns();
    if (!uln_udp_rx_datagram(ep, &rx)) uln_link_rx_release(ue->io, rx.handle);
    return 0;
}

int uln_udp_link_stats(struct uln_ep *ep, struct uln_link_stats *st)
{
    memset(st, 0, sizeof *st);
    const struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || !ue->io) return -EINVAL;
    uln_link_stats(ue->io, st);
    return 0;
}

int uln_udp_conn_get(struct uln_ep *ep, int rank, struct uln_udp_conn *c)
{
    memset(c, 0, sizeof *c);
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    const struct uln_udp_peer *up = udp_peer(ep, rank);
    if (!up) return -ENOENT;
    const struct uln_rel *r = &up->rel;
    uint64_t job = ep->ctx->job_key, peer_key = ep->ctx->peer_recs[rank].key;
    *c = (struct uln_udp_conn){.state = uln_rel_state(r),
                               .dead = up->dead,
                               .local_epoch = r->local_epoch,
                               .peer_epoch = r->peer_epoch,
                               .tag_in = conn_tag(job, r->peer_epoch, r->local_epoch),
                               .tag_out = conn_tag(peer_key, r->local_epoch, r->peer_epoch),
                               .rcv_next = r->rcv_cum,
                               .snd_una = r->snd_una,
                               .snd_nxt = r->snd_nxt,
                               .snd_edge = r->snd_edge,
                               .rx_limit = r->rx_limit,
                               .rcv_edge = r->adv_edge,
                               .rel = r->stats};
    return 0;
}

int uln_udp_peer_restart(struct uln_ep *ep, int rank, uint32_t epoch)
{
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return -EHOSTUNREACH;
    struct uln_rel fresh;
    struct uln_rel_cfg cfg;
    uln_udp_rel_cfg(ep, &cfg);
    if (epoch == 0) epoch = uln_udp_new_epoch(udp_ep(ep));
    if (uln_rel_init(&fresh, &cfg, epoch, uln_now_ns()) != 0) return -ENOMEM;
    /* As after a death: what was in flight with the old life is void. */
    uln_udp_void_peer(ep, up, -ECONNRESET);
    uln_rel_fini(&up->rel);
    up->rel = fresh;
    up->dead = false;
    uln_rel_rx_limit(&up->rel, uln_udp_pool_share(udp_ep(ep), udp_ep(ep)->n_active), uln_now_ns());
    return 0;
}

int uln_udp_ep_addr(struct uln_ep *ep, int rank, struct sockaddr_storage *ss, socklen_t *len)
{
    struct uln_udp *u = udp_of(ep->ctx);
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    if (rank == ep->ctx->rank) return uln_link_local(udp_ep(ep)->io, ss, len);
    if (!udp_remote(ep->ctx, rank)) return -EINVAL;
    (void)u;
    uln_udp_dst_sockaddr(ep, rank, ss, len);
    return 0;
}

int uln_udp_send_raw(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || rank < 0 || rank >= ep->ctx->size || ue->id_of_rank[rank] < 0) return -EINVAL;
    uln_udp_flush(ep); /* what was queued before goes first */
    struct uln_link_pkt p = {.peer = ue->id_of_rank[rank], .niov = 1};
    p.iov[0] = (struct iovec){(void *)(uintptr_t)buf, len};
    int n = uln_link_send(ue->io, &p, 1);
    return n < 0 ? n : n == 1 ? 0 : -EAGAIN;
}

int uln_udp_send_seq(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return -EHOSTUNREACH;
    if (up->dead) return -ECONNRESET;
    if (len < sizeof(struct pkt_hdr) || len > ue->payload_max) return -EMSGSIZE;
    ue->now = uln_now_ns();
    if (!uln_udp_can_send(ep, up, 1)) return -EAGAIN;
    struct pkt_hdr h;
    memcpy(&h, buf, sizeof h);
    int el = ext_len(h.vt & 15, h.flags);
    if (el < 0 || len < sizeof h + (unsigned)el) el = 0; /* the rest is all payload */
    uint32_t n = (uint32_t)(len - sizeof h - (unsigned)el);
    uint8_t *mem = uln_udp_slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
    struct uln_rel_pkt p;
    struct tx_slot *t = uln_udp_assign(ep, up, (uint32_t)len, &p);
    if (!t) return -EAGAIN;
    t->h = h;
    memcpy(t->ext, (const uint8_t *)buf + sizeof h, (unsigned)el);
    t->ext_len = (uint8_t)el;
    if (n) memcpy(mem, (const uint8_t *)buf + sizeof h + el, n);
    t->data = mem; /* kept in the slot, so it is resent if lost */
    t->len = n;
    uln_udp_send_data(ep, up, t, &p);
    uln_udp_flush(ep);
    return 0;
}
#endif /* ULN_TEST_HOOKS */
