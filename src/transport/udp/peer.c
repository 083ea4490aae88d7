/*
 * peer.c - the UDP transport's peers: a peer's life (its rel machine, send
 * and receive slots), made on first contact; its death; a later life at the
 * same address superseding it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/udp/priv.h"

void uln_udp_rel_cfg(const struct uln_ep *ep, struct uln_rel_cfg *cfg)
{
    uln_rel_cfg_default(cfg);
    cfg->window = udp_ep(ep)->window;
    /* The congestion window counts datagram bytes; its bound is what the
     * send slots hold (window x payload_max: docs/limits.md). */
    cfg->mss = udp_ep(ep)->payload_max;
    cfg->dead_after = (uint64_t)udp_params(ep->ctx)->dead_ms * 1000000u;
}

/* A life of ours for a peer: random, nonzero (it is also our first seq). */
uint32_t uln_udp_new_epoch(struct uln_udp_ep *ue)
{
    uint32_t epoch = 0;
    while (epoch == 0) {
        ue->rng = mix64(ue->rng + 0x9e3779b97f4a7c15ull);
        epoch = (uint32_t)ue->rng;
    }
    return epoch;
}

/* The state for one peer, made on first contact in either direction. */
struct uln_udp_peer *uln_udp_peer_make(struct uln_ep *ep, int rank)
{
    struct uln_ep_peer *pp = &ep->peers[rank];
    if (ULN_LIKELY(udp_peer(ep, rank) != NULL)) return udp_peer(ep, rank);
    struct uln_ctx *ctx = ep->ctx;
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || uln_udp_link_peer(ep, rank) < 0) return NULL;
    struct uln_udp_peer *up = calloc(1, sizeof *up);
    if (!up) return NULL;
    struct uln_rel_cfg cfg;
    uln_udp_rel_cfg(ep, &cfg);
    uint32_t epoch = uln_udp_new_epoch(ue);
    up->rank = rank;
    up->io_id = ue->id_of_rank[rank];
    up->mask = cfg.window - 1;
    up->tx = calloc(cfg.window, sizeof *up->tx);
    up->rx = calloc(cfg.window, sizeof *up->rx);
    /* Untouched buffer memory costs no RAM: the pages come as buffers are
     * first taken (uln_udp_slot_mem), lowest first. */
    up->tx_mem = malloc((size_t)cfg.window * ue->stride);
    up->tx_free = malloc(cfg.window * sizeof *up->tx_free);
    if (!up->tx || !up->rx || !up->tx_mem || !up->tx_free ||
        uln_rel_init(&up->rel, &cfg, epoch, uln_now_ns()) != 0) {
        free(up->tx);
        free(up->rx);
        free(up->tx_mem);
        free(up->tx_free);
        free(up);
        return NULL;
    }
    for (uint32_t i = 0; i < cfg.window; i++)
        up->tx_free[up->n_free++] = cfg.window - 1 - i;
    uln_inbox_feed_init(&up->feed, ctx, rank, ep->index);
    pp->tp_peer = up;
    ue->live[ue->n_live++] = rank;
    uln_tp_busy(ep, &uln_tp_udp); /* timers from now on: every pass */
    /* A peer just met counts as a sender until it has been quiet a while: the
     * first feedback gives it credit, and credit given is not taken back, so
     * peers met together (an incast starting) must not each be promised the
     * pool they will share. */
    ue->now = uln_now_ns();
    uln_udp_sender_seen(ep, up);
    return up;
}

int uln_udp_attach(struct uln_ep *ep, int peer)
{
    if (udp_of(ep->ctx)->remote[peer] == UDP_SUPERSEDED) return -ECONNRESET;
    struct uln_udp_peer *up = peer_get(ep, peer);
    if (!up) return udp_ep(ep) ? -ENOMEM : -EHOSTUNREACH;
    return up->dead ? -ECONNRESET : 0;
}

bool uln_udp_peer_dead(struct uln_ctx *ctx, struct uln_ep *ep, int peer)
{
    (void)ctx;
    if (!ep) return false; /* no process of ours maps a remote peer's memory */
    struct uln_udp_peer *up = udp_peer(ep, peer);
    return up && up->dead;
}

void uln_udp_peer_watch(struct uln_ep *ep, int peer)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    if (!up || up->dead) return;
    uln_rel_watch(&up->rel);
    uln_tp_busy(ep, &uln_tp_udp); /* its timers run in the next pass */
}

uint32_t uln_udp_frag_max(struct uln_ep *ep, int peer)
{
    (void)peer;
    return udp_ep(ep)->payload_max - (uint32_t)sizeof(struct pkt_hdr) -
           (uint32_t)sizeof(struct pkt_get_resp_ext);
}

/* The peer started a new life (or died): what was in flight between the old
 * lives is void. Operations on it fail; sends are forgotten. */
void uln_udp_void_peer(struct uln_ep *ep, struct uln_udp_peer *up, int status)
{
    uln_engine_fail_peer(ep, up->rank, status);
    uln_engine_forget_peer(ep, up->rank);
    drain_acked(up);
    for (uint32_t i = 0; i <= up->mask; i++)
        tx_slot_clear(up, &up->tx[i]);
    uln_udp_drop_held(ep, up);
}

void uln_udp_go_dead(struct uln_ep *ep, struct uln_udp_peer *up)
{
    up->dead = true;
    ep->peers[up->rank].out_ready = false; /* posts now fail at issue time */
    ULN_COUNT(&ep->stats, peers_dead, 1);
    uln_udp_void_peer(ep, up, -ECONNRESET);
}

void uln_udp_supersede(struct uln_ep *ep, int old, int now)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return;
    struct uln_udp_peer *up = udp_peer(ep, old);
    if (up && !up->dead) uln_udp_go_dead(ep, up);
    ep->peers[old].out_ready = false;
    int id = ue->id_of_rank[old];
    if (id < 0) return;
    /* The link's entry names the old life's socket address: the new life's
     * if it is the same endpoint (it may have sent through it already,
     * uln_udp_link_peer), else nobody's (a datagram from it is looked up again,
     * uln_udp_link_peer_of). */
    ue->id_of_rank[old] = -1;
    bool same = ep->peers[old].dst_ep == ep->peers[now].dst_ep &&
                (ue->id_of_rank[now] < 0 || ue->id_of_rank[now] == id);
    ue->rank_of_id[id] = same ? now : -1;
    if (same) {
        ue->id_of_rank[now] = id;
        struct uln_udp_peer *un = udp_peer(ep, now);
        if (un) un->io_id = id;
    }
}
