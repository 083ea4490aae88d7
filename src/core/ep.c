/*
 * ep.c - endpoints and posting. An endpoint is the papers' queue pair: a
 * bounded send queue (posting = writing a descriptor and ringing the doorbell)
 * plus, per peer, the rings its messages arrive in.
 *
 * Posting never blocks and never drops: a full send queue is -EAGAIN. When the
 * queue was empty the engine starts the new operation at once, so a small NAP
 * or PUT is on its way before uln_nap/uln_put returns.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/probe.h"

/* Closed endpoints kept so that a late call on one gets -EBADF: the newest
 * ULN_EP_GRAVE of them. Indices are reused, so without a bound an
 * application that opens and closes endpoints without end would keep them
 * all; a handle closed longer ago than that is as undefined as a freed
 * pointer (as mr.c's deregistered regions). */
#define ULN_EP_GRAVE 64u

/* op_id = send-queue position: each life of an index starts its positions
 * here, so an answer to an earlier life's operation (a GET's data, an ACK
 * late in a peer's ring) names no operation of this one. */
#define ULN_EP_LIFE_SHIFT 40

void uln_ep_ring_drop(struct uln_ep *ep, int src, int ch, uint64_t upto)
{
    struct uln_ring_cons *c = &ep->peers[src].in[ch];
    uint64_t nobody = 0;
    /* Sent to this life but never taken: walked by the cell counts their
     * producer (ourselves, for a packet transport) wrote. */
    while (c->read != upto) {
        struct uln_msg *m = uln_ring_at(c->cells, c->mask, c->read);
        uint64_t room = (c->mask + 1) - (c->read & c->mask);
        if (m->cells == 0 || (uint64_t)m->cells * ULN_CELL > room) break;
        if (m->type != ULN_MSG_PAD && m->type != ULN_MSG_LIFE) nobody++;
        c->read += (uint64_t)m->cells * ULN_CELL;
    }
    if (nobody) ULN_COUNT(&ep->stats, refused_stale_ep, nobody);
    if (c->head == c->read) return; /* untouched: its pages stay unallocated */
    /* Everything read is given back, taken or not (NAPs the application
     * still holds, a GET being served): zero each cell's first word, the
     * ring's rule for cells given back (ring.h). */
    for (uint64_t pos = c->head; pos != c->read; pos += ULN_CELL)
        atomic_store_explicit(&uln_ring_at(c->cells, c->mask, pos)->stamp, 0, memory_order_relaxed);
    c->head = c->read;
    /* Release: the zeroing is done before the producer, acquiring head,
     * writes those cells again. */
    atomic_store_explicit(&c->ctrl->head, c->head, memory_order_release);
}

/* A closing life leaves its rings where the next one finds them. False:
 * no memory to keep them, and the index is retired for good. */
static bool ep_rings_save(struct uln_ep *ep, struct uln_ep_slot *slot)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!slot->pos && !(slot->pos = calloc((size_t)ctx->size, sizeof *slot->pos))) return false;
    for (int p = 0; p < ctx->size; p++) {
        struct uln_ep_peer *pp = &ep->peers[p];
        for (int ch = 0; ch < 2; ch++) {
            uln_ep_ring_drop(ep, p, ch, pp->in[ch].read);
            slot->pos[p].in[ch] = pp->in[ch].read;
            /* A life that never wrote to p leaves the earlier life's mark. */
            if (pp->out_ready && (pp->tp->caps & ULN_TP_CAP_RINGS))
                slot->pos[p].out[ch] = pp->out[ch].tail;
        }
    }
    return true;
}

/* What a closed endpoint counted stays in the context's counters. Other
 * threads may count in ctx->stats meanwhile: an RMW, relaxed (statistics
 * order nothing). */
static void ep_stats_fold(struct uln_ep *ep)
{
    _Atomic uint64_t *from = (_Atomic uint64_t *)&ep->stats;
    _Atomic uint64_t *to = (_Atomic uint64_t *)&ep->ctx->stats;
    for (size_t i = 0; i < sizeof ep->stats / sizeof *from; i++)
        atomic_fetch_add_explicit(&to[i], atomic_load_explicit(&from[i], memory_order_relaxed),
                                  memory_order_relaxed);
}

/* Everything an endpoint owns but the struct itself, which a closed endpoint
 * keeps a while (ULN_EP_GRAVE). Closing (not a failed open): the rings are
 * left for the index's next life, which then begins for peers. */
static void ep_free_parts(struct uln_ep *ep, bool closing)
{
    struct uln_ctx *ctx = ep->ctx;
    for (unsigned id = 0; uln_transports[id]; id++)
        if (ep->tp_ep[id]) uln_transports[id]->ep_close(ep);
    if (closing) {
        struct uln_ep_slot *slot = &ctx->ep_slots[ep->index];
        bool kept = ep_rings_save(ep, slot);
        ep_stats_fold(ep);
        slot->life++;
        /* Release: our ring positions given back (ctrl->head) are visible to
         * a producer that sees the new life. */
        atomic_store_explicit(&ctx->inbox->hdr->ep_life[ep->index], slot->life,
                              memory_order_release);
        pthread_mutex_lock(&ctx->lock);
        slot->taken = !kept;
        pthread_mutex_unlock(&ctx->lock);
    }
    for (int i = 0; ep->peers && i < ctx->size; i++) {
        struct uln_ep_peer *pp = &ep->peers[i];
        free(pp->acks);
        if (pp->tp_peer && pp->tp->peer_free) pp->tp->peer_free(ep, pp);
    }
    for (int ch = 0; ch < 2; ch++) {
        free(ep->act_seen[ch]);
        free(ep->act_list[ch]);
    }
    free(ep->peers);
    free(ep->sq);
    free(ep->fl);
    free(ep->sq_iov);
    ep->sq_iov = NULL;
    ep->peers = NULL;
    ep->sq = NULL;
    ep->fl = NULL;
}

static void ep_free(struct uln_ep *ep)
{
    ep_free_parts(ep, false);
    free(ep);
}

/* uln_close: the structs of closed endpoints, and what indices kept. */
void uln_ep_free_closed(struct uln_ctx *ctx)
{
    while (ctx->closed_eps) {
        struct uln_ep *ep = ctx->closed_eps;
        ctx->closed_eps = ep->next_closed;
        free(ep);
    }
    ctx->n_closed = 0;
    for (unsigned i = 0; ctx->ep_slots && i < ctx->p.max_eps; i++)
        free(ctx->ep_slots[i].pos);
    free(ctx->ep_slots);
    ctx->ep_slots = NULL;
}

/* Keep a closed endpoint's struct (called with ctx->lock held). */
static void ep_bury(struct uln_ctx *ctx, struct uln_ep *ep)
{
    ep->next_closed = ctx->closed_eps;
    ctx->closed_eps = ep;
    if (++ctx->n_closed <= ULN_EP_GRAVE) return;
    struct uln_ep **last = &ctx->closed_eps;
    while ((*last)->next_closed)
        last = &(*last)->next_closed;
    free(*last); /* the oldest goes for good */
    *last = NULL;
    ctx->n_closed--;
}

/* The lowest free index (called with ctx->lock held), or -ENOSPC. */
static int ep_index_take(struct uln_ctx *ctx)
{
    if (!ctx->ep_slots && !(ctx->ep_slots = calloc(ctx->p.max_eps, sizeof *ctx->ep_slots)))
        return -ENOMEM;
    for (unsigned i = 0; i < ctx->p.max_eps; i++)
        if (!ctx->ep_slots[i].taken) {
            ctx->ep_slots[i].taken = true;
            if (i >= ctx->n_eps) ctx->n_eps = i + 1;
            return (int)i;
        }
    return -ENOSPC;
}

/* Our side of the rings from every peer, where the index's last life left
 * them. A peer writing our rings itself may still have messages in them
 * for an earlier life: they are refused until its ULN_MSG_LIFE mark for
 * this one (engine.c). Rings we feed ourselves were emptied at close, and
 * their feed marks them too (inbox.h). */
static void ep_rings_attach(struct uln_ep *ep)
{
    struct uln_ctx *ctx = ep->ctx;
    const struct uln_ring_pos *pos = ctx->ep_slots[ep->index].pos;
    for (int src = 0; src < ctx->size; src++)
        for (int ch = 0; ch < 2; ch++) {
            struct uln_ring_cons *c = &ep->peers[src].in[ch];
            uln_ring_cons_init(c, uln_inbox_ring_in(ctx, src, ep->index, ch),
                               uln_inbox_ring_bytes(ch, &ctx->p));
            if (!pos) continue;
            c->read = c->head = pos[src].in[ch];
            ep->peers[src].in_stale[ch] = true;
        }
}

static int ep_open(struct uln_ctx *ctx, struct uln_cq *send_cq, struct uln_cq *recv_cq,
                   struct uln_ep **out);

ULN_EXPORT int uln_ep_open(struct uln_ctx *ctx, struct uln_cq *send_cq, struct uln_cq *recv_cq,
                           struct uln_ep **out)
{
    if (!ctx) return -EINVAL;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    rc = ep_open(ctx, send_cq, recv_cq, out);
    uln_api_unlock(ctx);
    return rc;
}

/* Each transport's endpoint state; those that keep some and progress their
 * own way are driven by every pass over the endpoint (engine.c). */
static int ep_open_transports(struct uln_ep *ep)
{
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *tp = uln_transports[id];
        if (!tp->ep_open) continue;
        int rc = tp->ep_open(ep);
        if (rc) return rc;
        if (ep->tp_ep[id] && tp->progress_rx) {
            ep->tp_prog[ep->n_tp_prog++] = tp;
            ep->tp_prog_ids |= 1u << id;
        }
    }
    return 0;
}

static int ep_open(struct uln_ctx *ctx, struct uln_cq *send_cq, struct uln_cq *recv_cq,
                   struct uln_ep **out)
{
    if (!ctx || !send_cq || !recv_cq || !out) return -EINVAL;
    if (send_cq->ctx != ctx || recv_cq->ctx != ctx) return -EINVAL;
    if (send_cq->closed || recv_cq->closed) return -EBADF;
    struct uln_ep *ep = calloc(1, sizeof *ep);
    if (!ep) return -ENOMEM;
    ep->ctx = ctx;
    ep->send_cq = send_cq;
    ep->recv_cq = recv_cq;
    ep->sq_depth = ctx->p.sq_depth;
    ep->sq = calloc(ep->sq_depth, sizeof *ep->sq);
    ep->peers = calloc((size_t)ctx->size, sizeof *ep->peers);
    if (!ep->sq || !ep->peers) goto nomem;
    ep->act_words = ((size_t)ctx->size + 63) / 64;
    for (int ch = 0; ch < 2; ch++) {
        ep->act_seen[ch] = calloc(ep->act_words, sizeof(uint64_t));
        ep->act_list[ch] = calloc((size_t)ctx->size, sizeof(int));
        if (!ep->act_seen[ch] || !ep->act_list[ch]) goto nomem;
    }

    pthread_mutex_lock(&ctx->lock);
    unsigned n_bind = send_cq == recv_cq ? 1 : 2;
    int idx =
        send_cq->n_eps + 1 > 64 || recv_cq->n_eps + n_bind > 65 ? -ENOSPC : ep_index_take(ctx);
    if (idx < 0) {
        pthread_mutex_unlock(&ctx->lock);
        ep_free(ep);
        return idx;
    }
    /* A closed endpoint's index is free again: this is a new life of it,
     * which peers tell apart from the earlier ones (ep_rings_attach). */
    ep->index = idx;
    ep->life = ctx->ep_slots[idx].life;
    ep->sq_head = ep->sq_issue = ep->sq_tail = (uint64_t)ep->life << ULN_EP_LIFE_SHIFT;
    for (int ch = 0; ch < 2; ch++)
        ep->act_map[ch] = uln_inbox_active(ctx, ch, ep->index);
    /* act_gen_seen starts at 0: act_gen is 0 only while no bit was ever set. */
    ep->act_gen = &ctx->inbox->hdr->act_gen;
    ep_rings_attach(ep);
    for (int p = 0; p < ctx->size; p++) {
        struct uln_ep_peer *pp = &ep->peers[p];
        int32_t dst = ctx->peer_recs[p].ep;
        pp->tp = ctx->peer_tp[p];
        pp->dst_ep = dst < 0 ? ep->index : dst; /* a job: the same index */
        pp->me_there = ctx->no_job ? -1 : ctx->rank;
    }
    int rc = ep_open_transports(ep);
    if (rc) {
        ctx->ep_slots[idx].taken = false;
        pthread_mutex_unlock(&ctx->lock);
        ep_free(ep);
        return rc;
    }
    ctx->eps[ep->index] = ep;
    send_cq->eps[send_cq->n_eps++] = ep;
    if (recv_cq != send_cq) recv_cq->eps[recv_cq->n_eps++] = ep;
    pthread_mutex_unlock(&ctx->lock);
    *out = ep;
    return 0;
nomem:
    ep_free(ep);
    return -ENOMEM;
}

static int ep_close(struct uln_ep *ep);

ULN_EXPORT int uln_ep_close(struct uln_ep *ep)
{
    if (!ep) return -EINVAL;
    struct uln_ctx *ctx = ep->ctx;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    rc = ep->closed ? -EBADF : ep_close(ep);
    uln_api_unlock(ctx);
    return rc;
}

static int ep_close(struct uln_ep *ep)
{
    struct uln_ctx *ctx = ep->ctx;
    /* Outstanding work completes with -ECANCELED where the CQ has room. */
    for (uint64_t pos = ep->sq_head; pos != ep->sq_tail; pos++) {
        struct uln_sqe *s = &ep->sq[pos % ep->sq_depth];
        if (s->state == SQE_QUEUED || s->state == SQE_WAIT) {
            s->status = -ECANCELED;
            s->state = SQE_DONE;
        }
    }
    for (uint64_t i = ep->fl_head; i != ep->fl_tail; i++)
        ep->fl[i % ep->fl_cap].status = -ECANCELED;
    ep->sq_issue = ep->sq_tail;
    uln_engine_retire(ep);
    pthread_mutex_lock(&ctx->lock);
    ctx->eps[ep->index] = NULL;
    uln_cq_unbind(ep->send_cq, ep);
    if (ep->recv_cq != ep->send_cq) uln_cq_unbind(ep->recv_cq, ep);
    ep->closed = true;
    pthread_mutex_unlock(&ctx->lock);
    ep_free_parts(ep, true); /* the index is free once this life is over */
    pthread_mutex_lock(&ctx->lock);
    ep_bury(ctx, ep);
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

ULN_EXPORT int uln_ep_index(const struct uln_ep *ep)
{
    return ep ? ep->index : -EINVAL;
}

/* Take the next send-queue entry, or NULL when the queue is full. */
/* The next send-queue entry, for op to peer, its common fields set; NULL
 * (counted) when the queue holds sq_depth entries. */
static struct uln_sqe *sq_take(struct uln_ep *ep, uint8_t op, int peer, uint64_t len,
                               uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(ep->sq_tail - ep->sq_head == ep->sq_depth)) {
        /* Completed work may only be waiting to be retired. */
        uln_engine_retire(ep);
        if (ep->sq_tail - ep->sq_head == ep->sq_depth) {
            ULN_COUNT(&ep->stats, eagain, 1);
            return NULL;
        }
    }
    struct uln_sqe *s = &ep->sq[ep->sq_tail % ep->sq_depth];
    s->state = SQE_QUEUED;
    s->ring_path = 0; /* until the transport says no direct path (engine.c) */
    s->holds_credit = 0;
    s->gather = 0;
    s->notified = 0;
    s->issued = 0;
    s->received = 0;
    s->status = 0;
    s->op_id = ep->sq_tail;
    s->op = op;
    s->flags = flags;
    s->peer = peer;
    s->len = len;
    s->user_data = user_data;
    return s;
}

/* The doorbell: the entry is queued; if nothing was ahead of it, start it now. */
static int sq_ring(struct uln_ep *ep)
{
    bool first = ep->sq_issue == ep->sq_tail;
    ep->sq_tail++;
    if (first) {
        uln_engine_issue(ep, ep->ctx->p.chunk_bytes);
        uln_engine_retire(ep);
    }
    return 0;
}

/* The fast path may run when nothing at all is queued (so completions stay in
 * posting order: no op and no flush marker waits) and the send CQ has room for
 * the entry it may write. A fenced op takes it too: with nothing queued,
 * everything before it has completed, so ULN_FENCE costs nothing here. */
static inline bool fast_ok(struct uln_ep *ep)
{
    return ep->sq_head == ep->sq_tail && ep->fl_head == ep->fl_tail && uln_cq_room(ep->send_cq) > 0;
}

/* Complete an operation done on the fast path: an entry unless ULN_SILENT
 * (errors always complete). fast_ok() made sure there is room. */
static inline int complete_now(struct uln_ep *ep, uint8_t op, int peer, uint64_t len,
                               uint64_t user_data, unsigned flags, int status)
{
    /* ULN_NOW: the caller learns of the success from the return value (1)
     * instead of an entry; ULN_SILENT: not at all. */
    if (ULN_LIKELY(status == 0 && (flags & (ULN_SILENT | ULN_NOW))))
        return (flags & ULN_NOW) ? 1 : 0;
    uln_cq_complete(ep->send_cq, ep->index, op, peer, len, user_data, status);
    return 0;
}

static int check_peer(struct uln_ep *ep, int peer)
{
    return peer >= 0 && peer < ep->ctx->size && uln_peer_is_live(ep->ctx, peer) ? 0 : -EINVAL;
}

static int nap_post(struct uln_ep *ep, int peer, const void *buf, size_t len, uint64_t user_data,
                    unsigned flags)
{
    if (ULN_UNLIKELY(!ep || check_peer(ep, peer) || (!buf && len))) return -EINVAL;
    if (ULN_UNLIKELY(len > ep->ctx->p.nap_max)) return -EMSGSIZE;
    if (ULN_UNLIKELY((flags & ULN_INLINE) && len > ULN_INLINE_MAX)) return -EMSGSIZE;
    if (fast_ok(ep) && uln_engine_nap_now(ep, peer, buf, (uint32_t)len) == 0)
        return complete_now(ep, ULN_OP_NAP, peer, len, user_data, flags, 0);
    struct uln_sqe *s = sq_take(ep, ULN_OP_NAP, peer, len, user_data, flags);
    if (ULN_UNLIKELY(!s)) return -EAGAIN;
    if (flags & ULN_INLINE) {
        /* NAP-immediate: the payload travels in the descriptor. */
        if (len) memcpy(s->inl, buf, len);
        s->src = s->inl;
    } else {
        s->src = buf;
    }
    return sq_ring(ep);
}

/* The side table of queued ops' segments, made at the first gathered op
 * that has to queue (before its entry is taken: a failure takes none). */
static int sq_iov_alloc(struct uln_ep *ep)
{
    if (ULN_LIKELY(ep->sq_iov != NULL)) return 0;
    ep->sq_iov = calloc((size_t)ep->sq_depth * ULN_IOV_MAX, sizeof(struct iovec));
    return ep->sq_iov ? 0 : -ENOMEM;
}

/* Entry s takes its local side from the segments (kept in its slot: the
 * caller's array is theirs again when the post returns). */
static void sqe_set_iov(struct uln_ep *ep, struct uln_sqe *s, const struct iovec *iov, int n)
{
    s->gather = 1;
    s->niov = (uint8_t)n;
    if (n) memcpy(uln_sqe_iov(ep, s), iov, (size_t)n * sizeof(*iov));
}

/* uln_napv: a small payload is gathered at once (as ULN_INLINE), a larger
 * one straight into the ring when it can go now, else its segments wait in
 * the send queue's side table (the caller's buffers, as for uln_nap). */
static int napv_post(struct uln_ep *ep, int peer, const struct iovec *iov, int n,
                     uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(!ep || check_peer(ep, peer) || n < 0 || n > ULN_IOV_MAX || (n && !iov)))
        return -EINVAL;
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_base && iov[i].iov_len) return -EINVAL;
        if (iov[i].iov_len > ep->ctx->p.nap_max) return -EMSGSIZE;
        len += iov[i].iov_len;
    }
    if (ULN_UNLIKELY(len > ep->ctx->p.nap_max)) return -EMSGSIZE;
    if (ULN_UNLIKELY((flags & ULN_INLINE) && len > ULN_INLINE_MAX)) return -EMSGSIZE;
    if (n == 1) return nap_post(ep, peer, iov[0].iov_base, len, user_data, flags);
    if (len <= ULN_INLINE_MAX) {
        uint8_t b[ULN_INLINE_MAX];
        uln_iov_gather(b, iov, n);
        return nap_post(ep, peer, b, len, user_data, flags | ULN_INLINE);
    }
    if (fast_ok(ep) && uln_engine_napv_now(ep, peer, iov, n, (uint32_t)len) == 0)
        return complete_now(ep, ULN_OP_NAP, peer, len, user_data, flags, 0);
    if (ULN_UNLIKELY(sq_iov_alloc(ep))) return -ENOMEM;
    struct uln_sqe *s = sq_take(ep, ULN_OP_NAP, peer, len, user_data, flags);
    if (ULN_UNLIKELY(!s)) return -EAGAIN;
    sqe_set_iov(ep, s, iov, n);
    return sq_ring(ep);
}

/* memcpy, with 8 to 16 bytes (a word, a pair of them: the common small
 * PUT) moved by two overlapping 8-byte loads and stores in line, as memcpy
 * does itself once past its call and its dispatch on the size. */
static inline void copy_small(void *dst, const void *src, size_t len)
{
    if (ULN_LIKELY(len - 8 <= 8)) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, (const uint8_t *)src + len - 8, 8);
        memcpy(dst, &a, 8);
        memcpy((uint8_t *)dst + len - 8, &b, 8);
    } else {
        memcpy(dst, src, len);
    }
}

/* A PUT or GET to the region the endpoint reached last at this peer
 * (struct uln_rkey_win): the hazard, the live key and the same check as the
 * full path (uln_key_check on the entry as it was while that key lived).
 * 0: *at is where the len bytes at roff are in our address space, the
 * hazard held until win_close; 1 when it is not for here (another region,
 * nothing or too much to copy, every 1024th access, which asks whether the
 * peer lives, or a check failed): the full path then decides, refuses and
 * counts, so a refusal costs nothing here. */
static inline __attribute__((always_inline)) int win_open(struct uln_ep *ep, struct uln_ep_peer *pp,
                                                          bool write, uint64_t len, uint64_t rkey,
                                                          uint64_t roff, uint8_t **at)
{
    struct uln_rkey_win *w = &pp->win;
    /* Key 0 is no key, and an empty window's key: never through here. */
    if (ULN_UNLIKELY(rkey != w->key || rkey == 0 || len - 1 >= ep->ctx->p.post_copy_max ||
                     ((pp->direct_ops + 1) & 1023) == 0 || !pp->out_ready ||
                     atomic_load_explicit(w->dead, memory_order_relaxed)))
        return 1;
    uint64_t live = uln_hazard_enter(w->hz, w->idx, w->light, w->live);
    uint64_t off = roff;
    if (ULN_UNLIKELY(uln_key_check(&w->entry, live, rkey, &off, len,
                                   write ? ULN_ACCESS_REMOTE_WRITE : ULN_ACCESS_REMOTE_READ))) {
        uln_hazard_leave(w->hz);
        return 1;
    }
    *at = w->base + off;
    return 0;
}

/* The copy is done: the hazard goes, the access counts. */
static inline __attribute__((always_inline)) void
win_close(struct uln_ep *ep, struct uln_ep_peer *pp, bool write, uint64_t len)
{
    uln_hazard_leave(pp->win.hz);
    pp->direct_ops++;
    ULN_COUNT(&ep->stats, cache_hits, pp->win.mapped); /* the translation cache's front */
    uln_count_rdma(&ep->stats, write, len);
}

/* A PUT or GET of one buffer through the window: 0 when done, 1 when not
 * for here (win_open). */
static inline __attribute__((always_inline)) int rdma_win(struct uln_ep *ep, struct uln_ep_peer *pp,
                                                          bool write, void *buf, size_t len,
                                                          uint64_t rkey, uint64_t roff)
{
    uint8_t *at;
    if (win_open(ep, pp, write, len, rkey, roff, &at)) return 1;
    if (write)
        copy_small(at, buf, len);
    else
        copy_small(buf, at, len);
    win_close(ep, pp, write, len);
    return 0;
}

/* uln_putv/uln_getv through the window: the list's len bytes checked as
 * one range, as the full path checks them, then gathered or scattered. */
static int rdma_winv(struct uln_ep *ep, struct uln_ep_peer *pp, bool write, const struct iovec *iov,
                     int n, uint64_t len, uint64_t rkey, uint64_t roff)
{
    uint8_t *at;
    if (win_open(ep, pp, write, len, rkey, roff, &at)) return 1;
    if (write)
        uln_iov_gather(at, iov, n);
    else
        uln_iov_scatter(iov, n, at);
    win_close(ep, pp, write, len);
    return 0;
}

static int post_rdma_slow(struct uln_ep *ep, uint8_t op, int peer, void *buf, size_t len,
                          uint64_t rkey, uint64_t roff, uint64_t imm, uint64_t user_data,
                          unsigned flags);

/* Callers made sure ep is an endpoint. Inlined into each exported post, so
 * that a PUT or GET through the window passes its arguments once: the rest
 * is post_rdma_slow. */
static inline __attribute__((always_inline)) int post_rdma(struct uln_ep *ep, uint8_t op, int peer,
                                                           void *buf, size_t len, uint64_t rkey,
                                                           uint64_t roff, uint64_t imm,
                                                           uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(check_peer(ep, peer) || (!buf && len))) return -EINVAL;
    if (ULN_UNLIKELY((flags & ULN_INLINE) && (op != ULN_OP_PUT || len > ULN_INLINE_MAX)))
        return -EMSGSIZE;
    if (!(flags & ULN_REMOTE_CQ) && fast_ok(ep) &&
        rdma_win(ep, &ep->peers[peer], op == ULN_OP_PUT, buf, len, rkey, roff) == 0)
        return complete_now(ep, op, peer, len, user_data, flags, 0);
    return post_rdma_slow(ep, op, peer, buf, len, rkey, roff, imm, user_data, flags);
}

/* Everything but the window: the full direct path, or the send queue. */
static int post_rdma_slow(struct uln_ep *ep, uint8_t op, int peer, void *buf, size_t len,
                          uint64_t rkey, uint64_t roff, uint64_t imm, uint64_t user_data,
                          unsigned flags)
{
    if (!(flags & ULN_REMOTE_CQ) && fast_ok(ep)) {
        struct iovec one = {buf, len};
        int rc =
            uln_engine_rdma_now(ep, op == ULN_OP_PUT, peer, &one, len ? 1 : 0, len, rkey, roff);
        if (rc <= 0) return complete_now(ep, op, peer, len, user_data, flags, rc);
    }
    struct uln_sqe *s = sq_take(ep, op, peer, len, user_data, flags);
    if (ULN_UNLIKELY(!s)) return -EAGAIN;
    s->rkey = rkey;
    s->roff = roff;
    s->imm = imm;
    if (flags & ULN_INLINE) {
        if (len) memcpy(s->inl, buf, len);
        s->src = s->inl;
    } else if (op == ULN_OP_PUT) {
        s->src = buf;
    } else {
        s->dst = buf;
    }
    return sq_ring(ep);
}

/* uln_putv, uln_getv, uln_put_immv: the checks and paths of post_rdma with
 * the local side in segments. One segment (or none) is post_rdma itself; a
 * PUT small enough is gathered at once and goes as ULN_INLINE; otherwise the
 * fast path moves the whole list now (through the window, or the full
 * direct path: process_vm_* takes it as it is), or the segments wait in the
 * send queue's side table. */
static int post_rdmav(struct uln_ep *ep, uint8_t op, int peer, const struct iovec *iov, int n,
                      uint64_t rkey, uint64_t roff, uint64_t imm, uint64_t user_data,
                      unsigned flags)
{
    uint64_t len;
    if (ULN_UNLIKELY(check_peer(ep, peer) || n < 0 || n > ULN_IOV_MAX || (n && !iov) ||
                     !uln_iov_total(iov, n, &len)))
        return -EINVAL;
    if (n <= 1)
        return post_rdma(ep, op, peer, n ? iov[0].iov_base : NULL, len, rkey, roff, imm, user_data,
                         flags);
    if (ULN_UNLIKELY((flags & ULN_INLINE) && (op != ULN_OP_PUT || len > ULN_INLINE_MAX)))
        return -EMSGSIZE;
    if (op == ULN_OP_PUT && len <= ULN_INLINE_MAX) {
        uint8_t b[ULN_INLINE_MAX];
        uln_iov_gather(b, iov, n);
        return post_rdma(ep, op, peer, b, len, rkey, roff, imm, user_data, flags | ULN_INLINE);
    }
    if (!(flags & ULN_REMOTE_CQ) && fast_ok(ep)) {
        if (rdma_winv(ep, &ep->peers[peer], op == ULN_OP_PUT, iov, n, len, rkey, roff) == 0)
            return complete_now(ep, op, peer, len, user_data, flags, 0);
        int rc = uln_engine_rdma_now(ep, op == ULN_OP_PUT, peer, iov, n, len, rkey, roff);
        if (rc <= 0) return complete_now(ep, op, peer, len, user_data, flags, rc);
    }
    if (ULN_UNLIKELY(sq_iov_alloc(ep))) return -ENOMEM;
    struct uln_sqe *s = sq_take(ep, op, peer, len, user_data, flags);
    if (ULN_UNLIKELY(!s)) return -EAGAIN;
    s->rkey = rkey;
    s->roff = roff;
    s->imm = imm;
    s->src = NULL;
    s->dst = NULL;
    sqe_set_iov(ep, s, iov, n);
    return sq_ring(ep);
}

/* The exported posts: the progress thread's lock around the work, if any. */
ULN_EXPORT int uln_nap(struct uln_ep *ep, int peer, const void *buf, size_t len, uint64_t user_data,
                       unsigned flags)
{
    if (ULN_UNLIKELY(!ep)) return -EINVAL;
    ULN_PROBE(ULN_P_POST);
    int rc = uln_api_enter(ep->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    rc = ULN_UNLIKELY(ep->closed) ? -EBADF : nap_post(ep, peer, buf, len, user_data, flags);
    uln_api_unlock(ep->ctx);
    return rc;
}

ULN_EXPORT int uln_napv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt,
                        uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(!ep)) return -EINVAL;
    int rc = uln_api_enter(ep->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    rc = ULN_UNLIKELY(ep->closed) ? -EBADF : napv_post(ep, peer, iov, iovcnt, user_data, flags);
    uln_api_unlock(ep->ctx);
    return rc;
}

/* Inlined as post_rdma: in uln_put, op and flags are known. */
static inline __attribute__((always_inline)) int
post_locked(struct uln_ep *ep, uint8_t op, int peer, void *buf, size_t len, uint64_t rkey,
            uint64_t roff, uint64_t imm, uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(!ep)) return -EINVAL;
    int rc = uln_api_enter(ep->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    rc = ULN_UNLIKELY(ep->closed)
             ? -EBADF
             : post_rdma(ep, op, peer, buf, len, rkey, roff, imm, user_data, flags);
    uln_api_unlock(ep->ctx);
    return rc;
}

static int postv_locked(struct uln_ep *ep, uint8_t op, int peer, const struct iovec *iov, int n,
                        uint64_t rkey, uint64_t roff, uint64_t imm, uint64_t user_data,
                        unsigned flags)
{
    if (ULN_UNLIKELY(!ep)) return -EINVAL;
    int rc = uln_api_enter(ep->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    rc = ULN_UNLIKELY(ep->closed)
             ? -EBADF
             : post_rdmav(ep, op, peer, iov, n, rkey, roff, imm, user_data, flags);
    uln_api_unlock(ep->ctx);
    return rc;
}

ULN_EXPORT int uln_putv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt,
                        uint64_t rkey, uint64_t roff, uint64_t user_data, unsigned flags)
{
    return postv_locked(ep, ULN_OP_PUT, peer, iov, iovcnt, rkey, roff, 0, user_data,
                        flags & ~ULN_REMOTE_CQ);
}

ULN_EXPORT int uln_put_immv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt,
                            uint64_t rkey, uint64_t roff, uint64_t imm, uint64_t user_data,
                            unsigned flags)
{
    return postv_locked(ep, ULN_OP_PUT, peer, iov, iovcnt, rkey, roff, imm, user_data,
                        flags | ULN_REMOTE_CQ);
}

ULN_EXPORT int uln_getv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt,
                        uint64_t rkey, uint64_t roff, uint64_t user_data, unsigned flags)
{
    return postv_locked(ep, ULN_OP_GET, peer, iov, iovcnt, rkey, roff, 0, user_data, flags);
}

ULN_EXPORT int uln_put(struct uln_ep *ep, int peer, const void *src, size_t len, uint64_t rkey,
                       uint64_t roff, uint64_t user_data, unsigned flags)
{
    return post_locked(ep, ULN_OP_PUT, peer, (void *)(uintptr_t)src, len, rkey, roff, 0, user_data,
                       flags & ~ULN_REMOTE_CQ);
}

ULN_EXPORT int uln_put_imm(struct uln_ep *ep, int peer, const void *src, size_t len, uint64_t rkey,
                           uint64_t roff, uint64_t imm, uint64_t user_data, unsigned flags)
{
    return post_locked(ep, ULN_OP_PUT, peer, (void *)(uintptr_t)src, len, rkey, roff, imm,
                       user_data, flags | ULN_REMOTE_CQ);
}

ULN_EXPORT int uln_get(struct uln_ep *ep, int peer, void *dst, size_t len, uint64_t rkey,
                       uint64_t roff, uint64_t user_data, unsigned flags)
{
    return post_locked(ep, ULN_OP_GET, peer, dst, len, rkey, roff, 0, user_data, flags);
}

/* Apply the op to the word at w. A fetch-add of a 64-bit word (counters,
 * tickets: the common atomic) in line; the others through the table
 * (atomic.c), whose memory order this shares: seq_cst, argued there. */
static inline uint64_t atomic_apply_at(uint8_t *w, unsigned op, unsigned width, uint64_t operand,
                                       uint64_t compare)
{
    if (ULN_LIKELY(op == ULN_ATOMIC_ADD) && ULN_LIKELY(width == 8))
        return __atomic_fetch_add((uint64_t *)(void *)w, operand, __ATOMIC_SEQ_CST);
    struct uln_atomic_req r = {
        .operand = operand, .compare = compare, .op = (uint8_t)op, .width = (uint8_t)width};
    return uln_atomic_apply(w, &r);
}

/* An atomic through the window, as rdma_win: the hazard, the live key,
 * uln_key_check on the copy with the atomic's right, and the word's natural
 * alignment in the owner's address space (as the transport's atomic op).
 * 0 when applied; 1: the full path (which refuses and counts), also while
 * ring-path atomics to the peer are out (engine.c: they apply in order).
 * The arguments come as scalars, never as a struct in memory: a struct's
 * op and width written as two words and compared as one would stall the
 * load on store forwarding, every op. */
static inline __attribute__((always_inline)) int
atomic_win(struct uln_ep *ep, struct uln_ep_peer *pp, unsigned op, unsigned width, uint64_t key,
           uint64_t roff, uint64_t operand, uint64_t compare, void *result)
{
    struct uln_rkey_win *w = &pp->win;
    if (ULN_UNLIKELY(key != w->key || key == 0 || pp->atomics_out ||
                     ((pp->direct_ops + 1) & 1023) == 0 || !pp->out_ready ||
                     atomic_load_explicit(w->dead, memory_order_relaxed)))
        return 1;
    uint64_t live = uln_hazard_enter(w->hz, w->idx, w->light, w->live);
    uint64_t off = roff;
    if (ULN_UNLIKELY(uln_key_check(&w->entry, live, key, &off, width, ULN_ACCESS_REMOTE_ATOMIC) ||
                     ((w->entry.addr + off) & (width - 1u)))) {
        uln_hazard_leave(w->hz);
        return 1;
    }
    uint64_t old = atomic_apply_at(w->base + off, op, width, operand, compare);
    uln_hazard_leave(w->hz);
    pp->direct_ops++;
    uln_atomic_result(result, width, old);
    ULN_COUNT(&ep->stats, cache_hits, w->mapped);
    ULN_COUNT(&ep->stats, atomics, 1);
    return 0;
}

/* Out of line, and given the arguments by value: in uln_atomic, or given
 * their address, it would make every op pay its stack frame. */
static __attribute__((noinline)) int atomic_post_slow(struct uln_ep *ep, int peer, unsigned op,
                                                      unsigned width, uint64_t key, uint64_t roff,
                                                      uint64_t operand, uint64_t compare,
                                                      void *result, uint64_t user_data,
                                                      unsigned flags);

/* An atomic takes the fast path like a small PUT: on mapped memory with
 * nothing queued it is applied inside the post call. In line in
 * uln_atomic, as post_rdma in uln_put: the window's op costs no call. */
static inline __attribute__((always_inline)) int
atomic_post(struct uln_ep *ep, int peer, unsigned op, unsigned width, uint64_t key, uint64_t roff,
            uint64_t operand, uint64_t compare, void *result, uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(check_peer(ep, peer) || !uln_atomic_valid(op, width))) return -EINVAL;
    if (fast_ok(ep) &&
        atomic_win(ep, &ep->peers[peer], op, width, key, roff, operand, compare, result) == 0)
        return complete_now(ep, ULN_OP_ATOMIC, peer, width, user_data, flags, 0);
    return atomic_post_slow(ep, peer, op, width, key, roff, operand, compare, result, user_data,
                            flags);
}

/* Everything but the window: the transport's direct op, or the send queue. */
static __attribute__((noinline)) int atomic_post_slow(struct uln_ep *ep, int peer, unsigned op,
                                                      unsigned width, uint64_t key, uint64_t roff,
                                                      uint64_t operand, uint64_t compare,
                                                      void *result, uint64_t user_data,
                                                      unsigned flags)
{
    struct uln_atomic_req r = {.key = key,
                               .offset = roff,
                               .operand = operand,
                               .compare = compare,
                               .op = (uint8_t)op,
                               .width = (uint8_t)width};
    if (fast_ok(ep)) {
        int rc = uln_engine_atomic_now(ep, peer, &r, result);
        if (rc <= 0) return complete_now(ep, ULN_OP_ATOMIC, peer, width, user_data, flags, rc);
    }
    struct uln_sqe *s = sq_take(ep, ULN_OP_ATOMIC, peer, width, user_data,
                                flags & ~(unsigned)(ULN_INLINE | ULN_REMOTE_CQ));
    if (ULN_UNLIKELY(!s)) return -EAGAIN;
    s->rkey = key;
    s->roff = roff;
    s->imm = operand;
    s->compare = compare;
    s->aop = r.op;
    s->width = r.width;
    s->dst = result;
    return sq_ring(ep);
}

ULN_EXPORT int uln_atomic(struct uln_ep *ep, int peer, unsigned op, unsigned width, uint64_t rkey,
                          uint64_t roff, uint64_t operand, uint64_t compare, void *result,
                          uint64_t user_data, unsigned flags)
{
    if (ULN_UNLIKELY(!ep)) return -EINVAL;
    int rc = uln_api_enter(ep->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    /* op and width stay unsigned until uln_atomic_valid passed them: a
     * value above 255 is refused, never truncated into a known one. */
    rc = ULN_UNLIKELY(ep->closed) ? -EBADF
                                  : atomic_post(ep, peer, op, width, rkey, roff, operand, compare,
                                                result, user_data, flags);
    uln_api_unlock(ep->ctx);
    return rc;
}

static int flush_post(struct uln_ep *ep, uint64_t user_data);

ULN_EXPORT int uln_ep_flush(struct uln_ep *ep, uint64_t user_data)
{
    if (!ep) return -EINVAL;
    int rc = uln_api_enter(ep->ctx);
    if (rc) return rc;
    rc = ep->closed ? -EBADF : flush_post(ep, user_data);
    uln_api_unlock(ep->ctx);
    return rc;
}

/* Room for one more flush marker: the ring doubles (kept in order). */
static int flush_room(struct uln_ep *ep)
{
    if (ep->fl_tail - ep->fl_head < ep->fl_cap) return 0;
    uint32_t cap = ep->fl_cap ? 2 * ep->fl_cap : 8;
    struct uln_flush_mark *fl = malloc((size_t)cap * sizeof *fl);
    if (!fl) return -ENOMEM;
    uint64_t n = ep->fl_tail - ep->fl_head;
    for (uint64_t i = 0; i < n; i++)
        fl[i] = ep->fl[(ep->fl_head + i) % ep->fl_cap];
    free(ep->fl);
    ep->fl = fl;
    ep->fl_cap = cap;
    ep->fl_head = 0;
    ep->fl_tail = n;
    return 0;
}

/* A flush takes no send-queue entry, so it is never refused for lack of room
 * there (the contract in ulnet.h): it becomes a marker at the queue's tail,
 * completed by the engine once sq_head passes that point. With nothing
 * queued or waiting it completes at once. */
static int flush_post(struct uln_ep *ep, uint64_t user_data)
{
    if (fast_ok(ep)) {
        uln_cq_complete(ep->send_cq, ep->index, ULN_OP_FLUSH, ep->ctx->rank, 0, user_data, 0);
        return 0;
    }
    int rc = flush_room(ep);
    if (rc) return rc;
    ep->fl[ep->fl_tail++ % ep->fl_cap] =
        (struct uln_flush_mark){.pos = ep->sq_tail, .user_data = user_data};
    uln_engine_retire(ep); /* everything before it may have completed already */
    return 0;
}

ULN_EXPORT int uln_peer_alive(struct uln_ep *ep, int peer)
{
    if (!ep) return -EINVAL;
    struct uln_ctx *ctx = ep->ctx;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    if (ep->closed || check_peer(ep, peer)) {
        uln_api_unlock(ctx);
        return ep->closed ? -EBADF : -EINVAL;
    }
    const struct uln_ep_peer *pp = &ep->peers[peer];
    rc = !uln_peer_is_self(ctx, peer) && pp->tp->peer_dead(ctx, ep, peer) ? -ECONNRESET : 0;
    uln_api_unlock(ctx);
    return rc;
}
