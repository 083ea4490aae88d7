/*
 * engine.c - the software NIC: it moves work from send queues onto the wire,
 * places what arrives, and writes completions.
 *
 * It runs inside uln_cq_poll/uln_cq_wait (and once at post time when the send
 * queue was empty: the papers' "doorbell" with nothing ahead of it). One pass
 * over an endpoint:
 *
 *   1. receive: for each peer, round robin, take messages from its channel-0
 *      ring (NAPs, ring-path PUT fragments, notifications, GET data, ACKs) and
 *      serve GET requests from its channel-1 ring;
 *   2. issue: start queued operations in order, at most chunk_bytes of copying
 *      per pass, so one huge PUT cannot hold other endpoints back;
 *   3. retire: completed operations, oldest first, become completion entries.
 *
 * Two paths for PUT and GET. Direct: the initiator checks the target's key
 * table and copies itself (a transport with ULN_TP_CAP_DIRECT_RMA) - nothing
 * for the target to do. Ring: the
 * target does it (PUT_FRAG / GET_REQ messages, wire.h) - the path for memory
 * the initiator cannot reach, and the one packet transports take.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/probe.h"

#define RECV_BATCH 64 /* messages per ring per pass: bounded work per peer */

static inline struct uln_sqe *sqe_at(struct uln_ep *ep, uint64_t pos)
{
    return &ep->sq[pos % ep->sq_depth];
}

/* GET requests the target's request ring always has room for. The
 * initiator keeps no more ring-path GETs outstanding per peer than that, so
 * a request never waits for room at the target. Over the rings that is
 * merely what the ring enforces anyway; over a packet transport, where the
 * target feeds its own ring in sequence order, a request finding the ring
 * full would hold up every later packet of the stream (the ACKs and
 * GET data the two sides wait for), and crossed GETs would deadlock. A
 * message never wraps (a PAD fills the ring's end), so up to cells - 1 cells
 * of each round may be lost to padding. */
static inline uint32_t get_credit(void)
{
    const uint32_t cells = ULN_REQ_RING_BYTES / ULN_CELL;
    /* GET and atomic requests share the ring and the credit: count the larger. */
    const uint32_t req = sizeof(struct uln_atomic_req) > sizeof(struct uln_get_req)
                             ? (uint32_t)sizeof(struct uln_atomic_req)
                             : (uint32_t)sizeof(struct uln_get_req);
    const uint32_t per = uln_ring_cells_for(req);
    return (cells - (per - 1)) / per;
}

static inline void sqe_finish(struct uln_ep *ep, struct uln_sqe *s, int status)
{
    if (s->holds_credit) { /* a ring-path GET or atomic: its request is served or void */
        ep->peers[s->peer].gets_out--;
        if (s->op == ULN_OP_ATOMIC) ep->peers[s->peer].atomics_out--;
        s->holds_credit = 0;
    }
    s->status = status;
    s->state = SQE_DONE;
}

/* Reach the peer on first use (its transport connects). */
static int out_rings(struct uln_ep *ep, int peer, struct uln_ep_peer **out)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    if (ULN_UNLIKELY(!pp->out_ready)) {
        int rc = pp->tp->connect(ep, peer);
        if (rc) return rc;
        pp->out_ready = true;
    }
    *out = pp;
    return 0;
}

static bool out_rings_ready(struct uln_ep *ep, int peer)
{
    struct uln_ep_peer *pp;
    return out_rings(ep, peer, &pp) == 0;
}

/* Operations to peer that an earlier life of its endpoint was to answer (or
 * was being sent, fragment by fragment) end with -ECONNRESET, as when the
 * peer dies: that life will not answer, and the next one refuses what was
 * sent to the earlier one. Operations not yet started go to the new life. */
static void peer_life_over(struct uln_ep *ep, int peer, uint32_t life)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    pp->dst_life = life;
    for (uint64_t pos = ep->sq_head; pos != ep->sq_tail; pos++) {
        struct uln_sqe *s = sqe_at(ep, pos);
        if (s->peer == peer &&
            (s->state == SQE_WAIT || (s->state == SQE_QUEUED && s->ring_path && s->issued > 0)))
            sqe_finish(ep, s, -ECONNRESET);
    }
}

/* The peer's endpoint began another life since we last wrote this ring:
 * mark the ring for it first (ULN_MSG_LIFE), so its consumer tells what
 * follows from what an earlier life left unread. False: no room for the
 * mark, or the life changed under waiting operations, which just failed:
 * the caller retries on its next pass (the one it was sending may be among
 * them). */
static bool out_life_mark(struct uln_ep *ep, int peer, int ch, uint32_t life)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    bool over = life != pp->dst_life;
    if (over) peer_life_over(ep, peer, life);
    if (!uln_ring_reserve(&pp->out[ch], 0)) return false;
    uln_ring_commit(&pp->out[ch], ULN_MSG_LIFE, 0, 0, life);
    pp->out_life[ch] = life;
    return !over;
}

/* Room for a message to the peer, or NULL: then the endpoint is blocked on that
 * peer (a busy sleeper wakes in short slices) and the consumer is asked to
 * wake us when it gives space back. A transport with rings in the peer's
 * inbox is written here, inline; others reserve their own way. */
static void *out_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    if (!(pp->tp->caps & ULN_TP_CAP_RINGS)) return pp->tp->reserve(ep, peer, ch, len);
    if (ULN_UNLIKELY(!pp->announced[ch])) {
        uln_inbox_mark_active(pp->act_map[ch], pp->act_gen, pp->me_there); /* it polls us */
        pp->announced[ch] = true;
    }
    /* Acquire: pairs with the owner's release at uln_ep_close. A line that
     * changes only then, so every producer keeps it cached. */
    uint32_t life = atomic_load_explicit(pp->life_at, memory_order_acquire);
    void *d = ULN_UNLIKELY(life != pp->out_life[ch]) && !out_life_mark(ep, peer, ch, life)
                  ? NULL
                  : uln_ring_reserve(&pp->out[ch], len);
    if (ULN_UNLIKELY(!d)) {
        ep->blocked = true;
        uln_ring_want_room(&pp->out[ch]);
    }
    return d;
}

/* Send what out_reserve gave room for. */
static inline void out_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags,
                              uint32_t len)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    if (ULN_LIKELY(pp->tp->caps & ULN_TP_CAP_RINGS))
        uln_ring_commit(&pp->out[ch], type, flags, len, 0);
    else
        pp->tp->commit(ep, peer, ch, type, flags, len);
}

/* The doorbell after sending: a sleeping peer on this host is woken; packets
 * for a remote one leave now. */
static inline void peer_wake(struct uln_ep *ep, int peer)
{
    ep->peers[peer].tp->kick(ep, peer);
}

/* Give a received message back; wake its producer if it waits for room. (When
 * the peer does not write our rings itself, the producer is our own receive
 * path, which looks again every pass.) */
void uln_engine_release(struct uln_ep *ep, int src, struct uln_ring_cons *c, struct uln_msg *m)
{
    if (ULN_LIKELY(!uln_ring_release(c, m))) return;
    const struct uln_transport_ops *tp = ep->peers[src].tp;
    if ((tp->caps & ULN_TP_CAP_RINGS) && out_rings_ready(ep, src))
        peer_wake(ep, src);
    else if (tp->room)
        tp->room(ep, src); /* a producer of its own (the host service) waits */
}

/* ---- fast path: the doorbell with nothing ahead ------------------------------- */

/* Put one NAP into the peer's ring. False when the ring is full (the caller
 * queues or retries; out_reserve has asked the consumer to wake us). */
static bool nap_send(struct uln_ep *ep, int peer, const void *buf, uint32_t len)
{
    const struct uln_transport_ops *tp = ep->peers[peer].tp;
    if (ULN_UNLIKELY(tp->send_nap != NULL)) {
        struct iovec one = {(void *)(uintptr_t)buf, len};
        if (!tp->send_nap(ep, peer, &one, 1, len)) return false;
        ULN_COUNT(&ep->stats, naps_sent, 1);
        return true;
    }
    void *dst = out_reserve(ep, peer, 0, len);
    if (!dst) return false;         /* the receiver's ring is full: its credits hold us back */
    if (len) memcpy(dst, buf, len); /* buf may be NULL when len is 0 */
    out_commit(ep, peer, 0, ULN_MSG_NAP, 0, len);
    peer_wake(ep, peer);
    ULN_COUNT(&ep->stats, naps_sent, 1);
    return true;
}

/* A NAP whose payload is several segments (uln_napv): gathered straight into
 * the peer's ring, or into the packets of a transport that sends NAPs its own
 * way: one copy, as for a NAP. */
static bool nap_sendv(struct uln_ep *ep, int peer, const struct iovec *iov, int n, uint32_t len)
{
    const struct uln_transport_ops *tp = ep->peers[peer].tp;
    if (ULN_UNLIKELY(tp->send_nap != NULL)) {
        if (!tp->send_nap(ep, peer, iov, n, len)) return false;
        ULN_COUNT(&ep->stats, naps_sent, 1);
        return true;
    }
    uint8_t *dst = out_reserve(ep, peer, 0, len);
    if (!dst) return false; /* the receiver's ring is full: its credits hold us back */
    uln_iov_gather(dst, iov, n);
    out_commit(ep, peer, 0, ULN_MSG_NAP, 0, len);
    peer_wake(ep, peer);
    ULN_COUNT(&ep->stats, naps_sent, 1);
    return true;
}

int uln_engine_napv_now(struct uln_ep *ep, int peer, const struct iovec *iov, int n, uint32_t len)
{
    if (ULN_UNLIKELY(!ep->peers[peer].out_ready)) return 1;
    return nap_sendv(ep, peer, iov, n, len) ? 0 : 1;
}

/* Send a NAP at once, without a send-queue entry. Returns 0 when it went, 1
 * when it has to be queued (first use of the peer, or its ring is full). */
int uln_engine_nap_now(struct uln_ep *ep, int peer, const void *buf, uint32_t len)
{
    if (ULN_UNLIKELY(!ep->peers[peer].out_ready)) return 1;
    return nap_send(ep, peer, buf, len) ? 0 : 1;
}

/* A PUT or GET straight to/from mapped memory at once. Returns its status
 * (0 or -errno), or 1 when it has to be queued (the ring path, first use of
 * the peer, or more than one chunk). */
int uln_engine_rdma_now(struct uln_ep *ep, bool write, int peer, const struct iovec *local,
                        int nlocal, uint64_t len, uint64_t rkey, uint64_t roff)
{
    struct uln_ctx *ctx = ep->ctx;
    const struct uln_ep_peer *pp = &ep->peers[peer];
    if (ULN_UNLIKELY(!pp->out_ready || len > ctx->p.post_copy_max ||
                     !(pp->tp->caps & ULN_TP_CAP_DIRECT_RMA)))
        return 1;
    int rc = pp->tp->direct(ep, peer, write, local, nlocal, len, len, rkey, roff);
    if (ULN_UNLIKELY(rc == ULN_NO_DIRECT)) return 1;
    if (rc == 0) uln_count_rdma(&ep->stats, write, len);
    return rc;
}

/* An atomic straight on the peer's mapped word at once. Returns its status
 * (0 or -errno), or 1 when it has to be queued (the target must apply it,
 * first use of the peer, or earlier atomics to it still on the ring path). */
int uln_engine_atomic_now(struct uln_ep *ep, int peer, const struct uln_atomic_req *r, void *result)
{
    const struct uln_ep_peer *pp = &ep->peers[peer];
    if (ULN_UNLIKELY(!pp->out_ready || !pp->tp->atomic || pp->atomics_out)) return 1;
    uint64_t old;
    int rc = pp->tp->atomic(ep, peer, r, &old);
    if (ULN_UNLIKELY(rc == ULN_NO_DIRECT)) return 1;
    if (rc == 0) {
        uln_atomic_result(result, r->width, old);
        ULN_COUNT(&ep->stats, atomics, 1);
    }
    return rc;
}

/* ---- issue ----------------------------------------------------------------- */

static bool issue_nap(struct uln_ep *ep, struct uln_sqe *s)
{
    struct uln_ep_peer *pp;
    int rc = out_rings(ep, s->peer, &pp); /* first contact: attach */
    if (rc) {
        sqe_finish(ep, s, rc);
        return true;
    }
    bool sent = s->gather
                    ? nap_sendv(ep, s->peer, uln_sqe_iov(ep, s), (int)s->niov, (uint32_t)s->len)
                    : nap_send(ep, s->peer, s->src, (uint32_t)s->len);
    if (!sent) return false;
    sqe_finish(ep, s, 0);
    return true;
}

/* Copy as much of a PUT or GET as the budget allows, straight to/from the
 * target's memory. Returns true when this operation needs no more of the
 * direct path (done, failed, or switched to the ring path). */
static bool issue_direct(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget)
{
    bool write = s->op == ULN_OP_PUT;
    struct iovec one, part[ULN_IOV_MAX];
    const struct iovec *local;
    int nlocal = uln_sqe_local(ep, s, &one, &local);
    uint32_t left = *budget;
    do {
        uint64_t n = s->len - s->issued;
        if (n > left) n = left;
        /* This chunk's part of the segments: no more of them than the whole. */
        int k = uln_iov_slice(local, nlocal, s->issued, n, part, ULN_IOV_MAX);
        /* The key is checked for all that is left, not just this chunk: a
         * PUT or GET that would run past the region's end moves no byte. */
        int rc = ep->peers[s->peer].tp->direct(ep, s->peer, write, part, k, n, s->len - s->issued,
                                               s->rkey, s->roff + s->issued);
        if (rc == ULN_NO_DIRECT) {
            s->ring_path = 1;
            break;
        }
        if (rc) {
            sqe_finish(ep, s, rc);
            break;
        }
        s->issued += n;
        left -= (uint32_t)n;
    } while (s->issued < s->len && left != 0);
    *budget = left;
    return s->issued == s->len || s->ring_path || s->state == SQE_DONE;
}

static bool issue_put(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget)
{
    struct uln_ep_peer *pp;
    int rc = out_rings(ep, s->peer, &pp);
    if (rc) {
        sqe_finish(ep, s, rc);
        return true;
    }
    if (pp->tp->caps & ULN_TP_CAP_TARGET_CPU) {
        /* The target places the fragments: the ring path's protocol, sent
         * the transport's way (packets straight from the user's buffer). */
        s->ring_path = 1; /* a refusal may come back while fragments still go */
        if (!pp->tp->send_put(ep, s, budget)) return false;
        s->state = SQE_WAIT; /* counted when the target's ACK says it landed */
        return true;
    }
    if (!s->ring_path && !s->notified) {
        if (!issue_direct(ep, s, budget)) return false; /* budget used up: next pass */
        if (s->state == SQE_DONE) return true;          /* refused */
    }
    if (!s->ring_path) {
        if (s->flags & ULN_REMOTE_CQ) {
            /* The data is in place; now raise the target's completion (S-Flag).
             * Same ring as NAPs, so it is also ordered after earlier NAPs. */
            struct uln_put_notify *n = out_reserve(ep, s->peer, 0, sizeof *n);
            if (!n) return false;
            *n = (struct uln_put_notify){.imm = s->imm, .offset = s->roff, .len = s->len};
            out_commit(ep, s->peer, 0, ULN_MSG_PUT_NOTIFY, 0, sizeof *n);
            peer_wake(ep, s->peer);
            s->notified = 1;
        }
        uln_count_rdma(&ep->stats, true, s->len);
        sqe_finish(ep, s, 0);
        return true;
    }

    /* Ring path: fragments that carry their own (key, offset), placed by the
     * target, which answers the last one with an ACK. */
    struct uln_frag fc = uln_frag_start(&s->issued, s->len, pp->tp->frag_max(ep, s->peer), budget);
    bool sent = false, full = false;
    for (;;) {
        uint32_t n = uln_frag_next(&fc);
        struct uln_put_frag *f = out_reserve(ep, s->peer, 0, (uint32_t)(sizeof *f + n));
        if (!f) {
            full = true;
            break;
        }
        bool last = uln_frag_last(&fc, n);
        *f = (struct uln_put_frag){.key = s->rkey,
                                   .offset = s->roff + s->issued,
                                   .op_id = s->op_id,
                                   .imm = s->imm,
                                   .op_offset = s->roff,
                                   .op_len = s->len};
        if (s->gather)
            uln_iov_to_flat(f + 1, uln_sqe_iov(ep, s), s->niov, s->issued, n);
        else if (n)
            memcpy(f + 1, (const uint8_t *)s->src + s->issued, n);
        uint8_t fl = last ? ULN_FRAG_LAST : 0;
        if (last && (s->flags & ULN_REMOTE_CQ)) fl |= ULN_FRAG_IMM;
        out_commit(ep, s->peer, 0, ULN_MSG_PUT_FRAG, fl, (uint32_t)(sizeof *f + n));
        sent = true;
        uln_frag_take(&fc, n);
        if (last || *budget == 0) break;
    }
    /* Announce what went out, also when the ring filled up part way. */
    if (sent) peer_wake(ep, s->peer);
    if (full || s->issued < s->len) return false;
    s->state = SQE_WAIT; /* counted when the target's ACK says it landed */
    return true;
}

static bool issue_get(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget)
{
    struct uln_ep_peer *pp;
    int rc = out_rings(ep, s->peer, &pp);
    if (rc) {
        sqe_finish(ep, s, rc);
        return true;
    }
    if (!(pp->tp->caps & ULN_TP_CAP_DIRECT_RMA)) s->ring_path = 1; /* the target serves it */
    if (!s->ring_path) {
        if (!issue_direct(ep, s, budget)) return false;
        if (s->state == SQE_DONE) return true;
        if (!s->ring_path) {
            uln_count_rdma(&ep->stats, false, s->len);
            sqe_finish(ep, s, 0);
            return true;
        }
    }
    /* Ring path: one request on channel 1 for what is left; the data comes back
     * as GET_RESP messages on the peer's channel 0. */
    if (pp->gets_out >= get_credit()) {
        ep->blocked = true; /* a GET's answer gives the credit back */
        return false;
    }
    /* Where the data goes, for a transport whose service places it (one
     * buffer only: a gathered GET's segments come back through the ring). */
    bool place = pp->tp->get_placed && !s->gather;
    uint32_t len =
        (uint32_t)(sizeof(struct uln_get_req) + (place ? sizeof(struct uln_get_dst) : 0));
    struct uln_get_req *r = out_reserve(ep, s->peer, 1, len);
    if (!r) return false;
    *r = (struct uln_get_req){.key = s->rkey,
                              .offset = s->roff + s->issued,
                              .len = s->len - s->issued,
                              .op_id = s->op_id};
    if (place) {
        struct uln_get_dst d = {.addr = (uint64_t)(uintptr_t)s->dst + s->issued, .len = r->len};
        memcpy(r + 1, &d, sizeof d);
    }
    out_commit(ep, s->peer, 1, ULN_MSG_GET_REQ, 0, len);
    pp->gets_out++;
    s->holds_credit = 1;
    peer_wake(ep, s->peer);
    s->state = SQE_WAIT; /* counted when all its data arrived */
    return true;
}

static struct uln_atomic_req atomic_req_of(const struct uln_sqe *s)
{
    return (struct uln_atomic_req){.key = s->rkey,
                                   .offset = s->roff,
                                   .op_id = s->op_id,
                                   .operand = s->imm,
                                   .compare = s->compare,
                                   .op = s->aop,
                                   .width = s->width};
}

/* An atomic: on the mapped word if the transport can, else one request on
 * channel 1 (it shares the GETs' credit), answered by ATOMIC_RESP. */
static bool issue_atomic(struct uln_ep *ep, struct uln_sqe *s)
{
    struct uln_ep_peer *pp;
    int rc = out_rings(ep, s->peer, &pp);
    if (rc) {
        sqe_finish(ep, s, rc);
        return true;
    }
    struct uln_atomic_req req = atomic_req_of(s);
    if (pp->tp->atomic && !pp->atomics_out) {
        uint64_t old;
        rc = pp->tp->atomic(ep, s->peer, &req, &old);
        if (rc != ULN_NO_DIRECT) {
            if (rc == 0) {
                uln_atomic_result(s->dst, s->width, old);
                ULN_COUNT(&ep->stats, atomics, 1);
            }
            sqe_finish(ep, s, rc);
            return true;
        }
    }
    s->ring_path = 1;
    if (pp->gets_out >= get_credit()) {
        ep->blocked = true; /* an answer gives the credit back */
        return false;
    }
    struct uln_atomic_req *r = out_reserve(ep, s->peer, 1, sizeof *r);
    if (!r) return false;
    *r = req;
    out_commit(ep, s->peer, 1, ULN_MSG_ATOMIC_REQ, 0, sizeof *r);
    pp->gets_out++;
    pp->atomics_out++;
    s->holds_credit = 1;
    peer_wake(ep, s->peer);
    s->state = SQE_WAIT; /* counted when its answer comes */
    return true;
}

/* Start queued operations in order until the budget (bytes) is spent or one
 * has to wait for room. */
void uln_engine_issue(struct uln_ep *ep, uint32_t budget)
{
    while (ep->sq_issue != ep->sq_tail) {
        struct uln_sqe *s = sqe_at(ep, ep->sq_issue);
        bool moved = true;
        /* ULN_FENCE: start only once every earlier entry is done and
         * retired (retiring needs CQ room: a full CQ holds it as it holds
         * any completion). Issue is in order, so all later ones wait too. */
        if (ULN_UNLIKELY(s->flags & ULN_FENCE) && s->state == SQE_QUEUED &&
            ep->sq_head != ep->sq_issue) {
            uln_engine_retire(ep);
            if (ep->sq_head != ep->sq_issue) break;
        }
        if (s->state == SQE_QUEUED) {
            switch (s->op) {
            case ULN_OP_NAP:
                moved = issue_nap(ep, s);
                break;
            case ULN_OP_PUT:
                moved = issue_put(ep, s, &budget);
                break;
            case ULN_OP_GET:
                moved = issue_get(ep, s, &budget);
                break;
            case ULN_OP_ATOMIC:
                moved = issue_atomic(ep, s);
                break;
            default:
                sqe_finish(ep, s, 0); /* no other op takes an entry */
                break;
            }
        }
        if (!moved) break;
        ep->sq_issue++;
        if (budget == 0) break;
    }
}

/* The flush marker at the front, if it waits for nothing more: every entry
 * before its position has retired. */
static inline struct uln_flush_mark *flush_due(struct uln_ep *ep)
{
    if (ULN_LIKELY(ep->fl_head == ep->fl_tail)) return NULL;
    struct uln_flush_mark *f = &ep->fl[ep->fl_head % ep->fl_cap];
    return f->pos == ep->sq_head ? f : NULL;
}

void uln_engine_retire(struct uln_ep *ep)
{
    struct uln_cq *cq = ep->send_cq;
    for (;;) {
        struct uln_flush_mark *f = flush_due(ep);
        if (ULN_UNLIKELY(f != NULL)) {
            if (uln_cq_room(cq) == 0) break;
            uln_cq_complete(cq, ep->index, ULN_OP_FLUSH, ep->ctx->rank, 0, f->user_data, f->status);
            ep->fl_head++;
            continue;
        }
        if (ep->sq_head == ep->sq_issue) break;
        struct uln_sqe *s = sqe_at(ep, ep->sq_head);
        if (s->state != SQE_DONE) break;
        if (!(s->flags & ULN_SILENT) || s->status != 0) {
            if (uln_cq_room(cq) == 0) break; /* never overrun the CQ: wait for a poll */
            uln_cq_complete(cq, ep->index, s->op, s->peer, s->len, s->user_data, s->status);
        }
        s->state = SQE_FREE;
        ep->sq_head++;
    }
}

bool uln_engine_busy(const struct uln_ep *ep)
{
    return ep->sq_head != ep->sq_tail || ep->fl_head != ep->fl_tail || ep->blocked;
}

void uln_engine_fail_peer(struct uln_ep *ep, int peer, int status)
{
    for (uint64_t pos = ep->sq_head; pos != ep->sq_tail; pos++) {
        struct uln_sqe *s = sqe_at(ep, pos);
        if (s->peer == peer && (s->state == SQE_QUEUED || s->state == SQE_WAIT))
            sqe_finish(ep, s, status);
    }
}

void uln_engine_forget_peer(struct uln_ep *ep, int peer)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    pp->ack_head = pp->ack_tail;
    if (pp->get_req) uln_engine_release(ep, peer, &pp->in[1], pp->get_req);
    pp->get_req = NULL;
    int bad = 0;
    for (struct uln_msg *m; (m = uln_ring_peek(&pp->in[1], &bad)) != NULL;)
        uln_engine_release(ep, peer, &pp->in[1], m);
    /* Channel 0 keeps the old life's NAPs (they came before it ended) in
     * order: its PUT_DONEs are told apart by the life they carry. */
    pp->life++;
}

/* ---- receive ----------------------------------------------------------------- */

static bool ack_queue(struct uln_ep *ep, struct uln_ep_peer *pp, uint64_t op_id, int status)
{
    if (!pp->acks) {
        pp->ack_cap = 2 * ep->sq_depth;
        pp->acks = calloc(pp->ack_cap, sizeof *pp->acks);
        if (!pp->acks) return false;
    }
    if (pp->ack_tail - pp->ack_head == pp->ack_cap) return false;
    pp->acks[pp->ack_tail++ % pp->ack_cap] = (struct uln_ack){.op_id = op_id, .status = status};
    return true;
}

static bool ack_room(struct uln_ep_peer *pp)
{
    return !pp->acks || pp->ack_tail - pp->ack_head < pp->ack_cap;
}

static void ack_flush(struct uln_ep *ep, int peer, struct uln_ep_peer *pp)
{
    struct uln_ep_peer *o;
    if (pp->ack_head == pp->ack_tail || out_rings(ep, peer, &o)) return;
    while (pp->ack_head != pp->ack_tail) {
        struct uln_ack *a = out_reserve(ep, peer, 0, sizeof *a);
        if (!a) break;
        *a = pp->acks[pp->ack_head++ % pp->ack_cap];
        out_commit(ep, peer, 0, ULN_MSG_ACK, 0, sizeof *a);
    }
    (void)o;
    peer_wake(ep, peer);
}

static void malformed(struct uln_ep *ep)
{
    ULN_COUNT(&ep->stats, malformed, 1);
}

/* A status a peer sends in an answer becomes the status of our completion,
 * which ulnet.h promises is 0 or a negative errno. Anything else is a
 * malformed answer, and the operation fails with -EPROTO. */
static int32_t peer_status(struct uln_ep *ep, int32_t status)
{
    if (status <= 0 && status >= -4095) return status;
    malformed(ep);
    return -EPROTO;
}

/* The operation an answer from src names, if it can still take one: waiting
 * for it, or (a refusal of a long PUT) still sending fragments. Only the peer
 * it went to may answer it; another peer's answer would complete it with that
 * peer's status, or write that peer's bytes into the GET's buffer. */
static struct uln_sqe *waiting_op(struct uln_ep *ep, int src, uint64_t op_id, uint8_t op)
{
    if (op_id < ep->sq_head || op_id >= ep->sq_tail) return NULL;
    struct uln_sqe *s = sqe_at(ep, op_id);
    bool open = s->state == SQE_WAIT || (s->state == SQE_QUEUED && s->ring_path);
    if (s->op_id != op_id || s->op != op || !open) return NULL;
    if (s->peer != src) {
        malformed(ep);
        return NULL;
    }
    return s;
}

bool uln_engine_complete(struct uln_ep *ep, int peer, uint64_t op_id, uint8_t op, int32_t status)
{
    struct uln_sqe *s = waiting_op(ep, peer, op_id, op);
    if (!s) return false;
    /* puts/bytes_put count operations that succeeded, on every path. */
    if (status == 0 && op == ULN_OP_PUT) uln_count_rdma(&ep->stats, true, s->len);
    sqe_finish(ep, s, status);
    return true;
}

/* Is operation op_id still waiting for its answer (so its buffers are still
 * the engine's)? */
bool uln_engine_op_open(struct uln_ep *ep, uint64_t op_id)
{
    if (op_id < ep->sq_head || op_id >= ep->sq_tail) return false;
    struct uln_sqe *s = sqe_at(ep, op_id);
    return s->op_id == op_id && (s->state == SQE_WAIT || s->state == SQE_QUEUED);
}

/* The target's completion of a PUT with immediate data (the caller made sure
 * of room in the receive CQ). */
static void put_remote(struct uln_ep *ep, int src, uint64_t len, uint64_t imm, uint64_t offset)
{
    *uln_cq_push(ep->recv_cq) = (struct uln_cqe){.op = ULN_OP_PUT_REMOTE,
                                                 .ep = (uint16_t)ep->index,
                                                 .peer = src,
                                                 .len = len,
                                                 .imm = imm,
                                                 .offset = offset};
}

static void place_put_frag(struct uln_ep *ep, int src, struct uln_ep_peer *pp, struct uln_msg *m)
{
    const struct uln_put_frag *f = (const void *)(m + 1);
    if (m->len < sizeof *f) return malformed(ep);
    uint64_t n = m->len - sizeof *f;
    if (uln_refused_is(&pp->refused, f->op_id, f->key, f->op_offset, f->op_len))
        return; /* the rest of a refused PUT: answered already */
    /* The fragment must lie inside its operation... */
    if (f->offset < f->op_offset || f->offset - f->op_offset > f->op_len ||
        n > f->op_len - (f->offset - f->op_offset))
        return malformed(ep);
    /* ...and the whole operation inside the region: a PUT that is refused writes
     * nothing, not its first fragments. */
    uint8_t *where;
    int rc = uln_key_enter(ep->ctx, ep->index, f->key, f->op_offset, f->op_len,
                           ULN_ACCESS_REMOTE_WRITE, &where, &ep->stats);
    if (rc) {
        pp->refused = (struct uln_refused_put){.valid = true,
                                               .op_id = f->op_id,
                                               .key = f->key,
                                               .op_offset = f->op_offset,
                                               .op_len = f->op_len,
                                               .status = rc};
        ack_queue(ep, pp, f->op_id, rc);
        return;
    }
    /* n == 0: a zero-length region may sit at NULL, and memcpy must not get it. */
    if (n) memcpy(where + (f->offset - f->op_offset), f + 1, n);
    uln_key_leave(ep->ctx, ep->index);
    if (!(m->flags & ULN_FRAG_LAST)) return;
    ack_queue(ep, pp, f->op_id, 0);
    if (m->flags & ULN_FRAG_IMM) {
        put_remote(ep, src, f->op_len, f->imm, f->op_offset);
    }
}

/* GET data (or its refusal) from src for our operation op_id, to go at
 * op_offset of what was asked; from the rings, or placed on arrival by a
 * packet transport. */
void uln_engine_get_data(struct uln_ep *ep, int src, uint64_t op_id, uint64_t op_offset,
                         int32_t status, const void *data, uint64_t n)
{
    struct uln_sqe *s = waiting_op(ep, src, op_id, ULN_OP_GET);
    if (!s) return; /* answer to an operation that already failed */
    uint64_t want = s->len - s->issued;
    if (status) return sqe_finish(ep, s, peer_status(ep, status));
    if (op_offset > want || n > want - op_offset) {
        malformed(ep);
        return sqe_finish(ep, s, -EPROTO);
    }
    if (s->gather) /* uln_getv: scattered into the segments as it comes */
        uln_iov_from_flat(uln_sqe_iov(ep, s), s->niov, s->issued + op_offset, data, n);
    else if (n)
        memcpy((uint8_t *)s->dst + s->issued + op_offset, data, n);
    s->received += n;
    if (s->received >= want) {
        uln_count_rdma(&ep->stats, false, s->len);
        sqe_finish(ep, s, 0);
    }
}

/* GET op_id's data is all in its buffer: src's service placed n bytes
 * there (ULN_RESP_PLACED), or refused it (status). */
static void get_placed(struct uln_ep *ep, int src, uint64_t op_id, int32_t status, uint64_t n)
{
    struct uln_sqe *s = waiting_op(ep, src, op_id, ULN_OP_GET);
    if (!s) return; /* it failed already (the peer was given up) */
    if (status) return sqe_finish(ep, s, peer_status(ep, status));
    if (s->gather || s->received || n != s->len - s->issued) {
        malformed(ep);
        return sqe_finish(ep, s, -EPROTO);
    }
    s->received = n;
    uln_count_rdma(&ep->stats, false, s->len);
    sqe_finish(ep, s, 0);
}

static void take_get_resp(struct uln_ep *ep, int src, struct uln_msg *m)
{
    const struct uln_get_resp *r = (const void *)(m + 1);
    if (m->len < sizeof *r) return malformed(ep);
    if (m->flags & ULN_RESP_PLACED) {
        /* Only our own service may say so: a peer's transport that places. */
        if (!ep->peers[src].tp || !ep->peers[src].tp->get_placed || m->len != sizeof *r)
            return malformed(ep);
        return get_placed(ep, src, r->op_id, r->status, r->op_offset);
    }
    uln_engine_get_data(ep, src, r->op_id, r->op_offset, r->status, r + 1, m->len - sizeof *r);
}

/* The answer to one of our ring-path atomics: applied (the old value), or
 * refused. */
static void take_atomic_resp(struct uln_ep *ep, int src, struct uln_msg *m)
{
    const struct uln_atomic_resp *r = (const void *)(m + 1);
    if (m->len < sizeof *r) return malformed(ep);
    struct uln_sqe *s = waiting_op(ep, src, r->op_id, ULN_OP_ATOMIC);
    if (!s) return; /* it failed already (the peer was given up) */
    int32_t st = peer_status(ep, r->status);
    if (st == 0) {
        uln_atomic_result(s->dst, s->width, r->old);
        ULN_COUNT(&ep->stats, atomics, 1);
    }
    sqe_finish(ep, s, st);
}

/* A message in our ring from src that is a life mark, or follows one for an
 * earlier life of our endpoint: the mark says whether what follows is ours;
 * an earlier life's message is refused, counted, and given back. True if m
 * was one of them (and released). */
static bool life_take(struct uln_ep *ep, int src, int ch, struct uln_msg *m)
{
    struct uln_ep_peer *pp = &ep->peers[src];
    if (m->type == ULN_MSG_LIFE)
        pp->in_stale[ch] = m->aux != ep->life;
    else if (pp->in_stale[ch])
        ULN_COUNT(&ep->stats, refused_stale_ep, 1);
    else
        return false;
    uln_engine_release(ep, src, &pp->in[ch], m);
    return true;
}

/* Handle one channel-0 message. The caller has made sure the receive CQ and
 * the ACK queue have room. Returns true if the message was released. */
static bool take_data(struct uln_ep *ep, int src, struct uln_ep_peer *pp, struct uln_msg *m)
{
    switch (m->type) {
    case ULN_MSG_NAP: {
        /* No sender posts more than nap_max (the UDP path refuses more too):
         * the application may size its buffers by uln_info's nap_max. */
        if (m->len > ep->ctx->p.nap_max) {
            malformed(ep);
            break;
        }
        /* Zero copy: the entry points into the ring until uln_cqe_release. */
        struct uln_cqe *c = uln_cq_push(ep->recv_cq);
        *c = (struct uln_cqe){.op = ULN_OP_NAP_RECV,
                              .ep = (uint16_t)ep->index,
                              .peer = src,
                              .flags = ULN_CQE_MUST_RELEASE,
                              .len = m->len,
                              .data = m + 1,
                              /* m is cell-aligned: the low bits tell this life's
                               * entries from an earlier one's (cq.c) */
                              .priv_ = (uint64_t)(uintptr_t)m | (ep->life & (ULN_CELL - 1))};
        ULN_COUNT(&ep->stats, naps_received, 1);
        ULN_PROBE(ULN_P_CQE);
        return false;
    }
    case ULN_MSG_PUT_FRAG:
        place_put_frag(ep, src, pp, m);
        break;
    case ULN_MSG_PUT_NOTIFY: {
        const struct uln_put_notify *n = (const void *)(m + 1);
        if (m->len < sizeof *n) {
            malformed(ep);
            break;
        }
        put_remote(ep, src, n->len, n->imm, n->offset);
        break;
    }
    case ULN_MSG_GET_RESP:
        take_get_resp(ep, src, m);
        break;
    case ULN_MSG_ATOMIC_RESP:
        take_atomic_resp(ep, src, m);
        break;
    case ULN_MSG_PUT_DONE: {
        /* Written by our own receive path (a transport without rings in our
         * inbox): all of a PUT is placed (or it was refused). Answer the
         * initiator, and raise PUT_REMOTE if asked. */
        const struct uln_put_done *d = (const void *)(m + 1);
        if (m->len < sizeof *d || (pp->tp->caps & ULN_TP_CAP_RINGS)) { /* a peer forged it */
            malformed(ep);
            break;
        }
        if (d->life != pp->life) break; /* owed to a life of the peer that ended */
        ack_queue(ep, pp, d->op_id, d->status);
        if (d->status == 0 && (d->flags & ULN_FRAG_IMM))
            put_remote(ep, src, d->op_len, d->imm, d->op_offset);
        break;
    }
    case ULN_MSG_ACK: {
        const struct uln_ack *a = (const void *)(m + 1);
        if (m->len >= sizeof *a)
            uln_engine_complete(ep, src, a->op_id, ULN_OP_PUT, peer_status(ep, a->status));
        break;
    }
    default:
        malformed(ep);
        break;
    }
    uln_engine_release(ep, src, &pp->in[0], m);
    return true;
}

/* An atomic request from src, in its turn among src's requests: applied
 * once, here, and answered. The answer's room is reserved first, so a
 * request is never applied and then left to be applied again. False: no
 * room to answer yet (the request stays in the ring). */
static bool serve_atomic(struct uln_ep *ep, int src, struct uln_msg *m)
{
    struct uln_atomic_resp *a = out_reserve(ep, src, 0, sizeof *a);
    if (!a) return false;
    uln_atomic_serve(ep, (const struct uln_atomic_req *)(m + 1), a);
    out_commit(ep, src, 0, ULN_MSG_ATOMIC_RESP, 0, sizeof *a);
    peer_wake(ep, src);
    ep->taken++;
    return true;
}

/* Serve GET and atomic requests from src, in order: answer with data from our
 * own regions, at most *budget bytes this pass. A request stays in the ring until fully answered,
 * so the request ring itself limits how much the peer can ask at once. */
static void serve_gets(struct uln_ep *ep, int src, struct uln_ep_peer *pp, uint32_t *budget)
{
    struct uln_ctx *ctx = ep->ctx;
    uint32_t frag_max = pp->tp->frag_max(ep, src);
    for (;;) {
        if (!pp->get_req) {
            int bad = 0;
            struct uln_msg *m = uln_ring_peek(&pp->in[1], &bad);
            if (bad) malformed(ep);
            if (!m) return;
            if (ULN_UNLIKELY(m->type == ULN_MSG_LIFE || pp->in_stale[1]) &&
                life_take(ep, src, 1, m))
                continue;
            bool atomic = m->type == ULN_MSG_ATOMIC_REQ;
            if (atomic ? m->len != sizeof(struct uln_atomic_req)
                       : m->type != ULN_MSG_GET_REQ || m->len != sizeof(struct uln_get_req)) {
                malformed(ep);
                uln_engine_release(ep, src, &pp->in[1], m);
                continue;
            }
            pp->get_req = m;
            pp->get_sent = 0;
        }
        struct uln_ep_peer *o;
        if (out_rings(ep, src, &o)) return;
        if (pp->get_req->type == ULN_MSG_ATOMIC_REQ) {
            if (!serve_atomic(ep, src, pp->get_req)) return; /* no room to answer yet */
            uln_engine_release(ep, src, &pp->in[1], pp->get_req);
            pp->get_req = NULL;
            continue;
        }
        const struct uln_get_req *r = (const void *)(pp->get_req + 1);
        bool finished = false;
        if (pp->tp->serve_get) {
            uint64_t before = pp->get_sent;
            finished = pp->tp->serve_get(ep, src, r, &pp->get_sent, budget);
            if (finished || pp->get_sent != before) ep->taken++;
            if (!finished) return;
            uln_engine_release(ep, src, &pp->in[1], pp->get_req);
            pp->get_req = NULL;
            continue;
        }
        struct uln_frag fc = uln_frag_start(&pp->get_sent, r->len, frag_max, budget);
        do {
            uint32_t n = uln_frag_next(&fc);
            struct uln_get_resp *g = out_reserve(ep, src, 0, (uint32_t)(sizeof *g + n));
            if (!g) break;
            /* Check the whole request every time (not just this piece): a GET
             * that is refused delivers no bytes, and a region deregistered
             * half way stops the answer there. */
            uint8_t *where;
            int rc = uln_key_enter(ctx, ep->index, r->key, r->offset, r->len,
                                   ULN_ACCESS_REMOTE_READ, &where, &ep->stats);
            *g = (struct uln_get_resp){.op_id = r->op_id, .op_offset = pp->get_sent, .status = rc};
            if (rc == 0) {
                if (n) memcpy(g + 1, where + pp->get_sent, n); /* where may be NULL if n == 0 */
                uln_key_leave(ctx, ep->index);
            } else {
                n = 0;
            }
            out_commit(ep, src, 0, ULN_MSG_GET_RESP, 0, (uint32_t)(sizeof *g + n));
            uln_frag_take(&fc, n);
            ep->taken++;
            finished = rc != 0 || pp->get_sent == r->len;
        } while (!finished && *budget > 0);
        peer_wake(ep, src);
        if (!finished) return;
        uln_engine_release(ep, src, &pp->in[1], pp->get_req);
        pp->get_req = NULL;
    }
}

/* Peers whose ring on channel ch has ever carried a message to us: the
 * bitmap only grows, and changes rarely, so the list is rebuilt only then.
 * gen and agen: the generations refresh_lists read, before the words. */
static void refresh_active(struct uln_ep *ep, int ch, uint32_t gen, uint32_t agen)
{
    _Atomic uint64_t *map = ep->act_map[ch];
    struct uln_ctx *ctx = ep->ctx;
    bool changed = ep->peers_gen != gen;                  /* a peer inserted or removed */
    if (!changed && agen == ep->act_gen_seen[ch]) return; /* no new bit on this channel */
    ep->act_gen_seen[ch] = agen;
    for (size_t w = 0; w < ep->act_words; w++) {
        /* Acquire: pairs with the producer's RMW in uln_inbox_mark. */
        uint64_t v = atomic_load_explicit(&map[w], memory_order_acquire);
        if (v != ep->act_seen[ch][w]) {
            ep->act_seen[ch][w] = v;
            changed = true;
        }
    }
    if (ULN_LIKELY(!changed)) return;
    int n = 0, size = ctx->size;
    for (int src = 0; src < size; src++) {
        if (!(ep->act_seen[ch][src / 64] >> (src % 64) & 1)) continue;
        /* A peer with no job that wrote to us before we knew it: learn it
         * from its claim (a removed peer is not learnt again: its messages
         * wait in the ring until the application inserts it). */
        if (!uln_peer_is_live(ctx, src) && (!ctx->no_job || uln_peer_learn_slot(ctx, src) != 0))
            continue;
        ep->act_list[ch][n++] = src;
    }
    ep->n_act[ch] = n;
}

/* Both channels' lists, with one look at the two generations for the common
 * case that neither moved (an idle pass: a poll a spinning rank makes between
 * reads of a flag). Both channels are rebuilt from the same two loads, so the
 * peer generation recorded covers both lists. */
static inline void refresh_lists(struct uln_ep *ep)
{
    /* Acquire: pairs with set_live's release (peer.c): a peer's records are
     * written before we see its generation. */
    uint32_t gen = atomic_load_explicit(&ep->ctx->peers_gen, memory_order_acquire);
    /* Acquire: pairs with the producer's RMW in uln_inbox_mark_active; read
     * before the words, so a bit set while we read them brings us back. */
    uint32_t agen = atomic_load_explicit(ep->act_gen, memory_order_acquire);
    if (ULN_LIKELY(gen == ep->peers_gen && agen == ep->act_gen_seen[0] &&
                   agen == ep->act_gen_seen[1]))
        return;
    refresh_active(ep, 0, gen, agen);
    refresh_active(ep, 1, gen, agen);
    ep->peers_gen = gen; /* both lists rebuilt */
}

static void progress_recv(struct uln_ep *ep, uint32_t *budget)
{
    refresh_lists(ep);
    /* Round robin: start one peer further each pass. */
    int n = ep->n_act[0];
    unsigned start = ep->rr_peer < (unsigned)n ? ep->rr_peer : 0;
    for (int k = 0, i = (int)start; k < n; k++, i = i + 1 == n ? 0 : i + 1) {
        int src = ep->act_list[0][i];
        struct uln_ep_peer *pp = &ep->peers[src];
        for (int b = 0; b < RECV_BATCH; b++) {
            /* Everything below may need one receive-CQ entry and one ACK slot;
             * without them the message waits in the ring (which holds the
             * sender back) rather than being lost. */
            if (uln_cq_room(ep->recv_cq) == 0 || !ack_room(pp)) break;
            int bad = 0;
            struct uln_msg *m = uln_ring_peek(&pp->in[0], &bad);
            if (ULN_UNLIKELY(bad)) malformed(ep);
            if (!m) break;
            if (ULN_UNLIKELY(m->type == ULN_MSG_LIFE || pp->in_stale[0]) &&
                life_take(ep, src, 0, m))
                continue;
            take_data(ep, src, pp, m);
            ep->taken++;
        }
        ack_flush(ep, src, pp);
    }
    for (int k = 0; k < ep->n_act[1] && *budget; k++) {
        int src = ep->act_list[1][k];
        serve_gets(ep, src, &ep->peers[src], budget);
    }
    ep->rr_peer = start + 1;
}

/* Work that waits on a peer's answer while nothing is sent to it: has its
 * endpoint begun another life meanwhile (so the answer will never come)? */
static void check_life(struct uln_ep *ep, int peer)
{
    struct uln_ep_peer *pp = &ep->peers[peer];
    if (!pp->out_ready || !(pp->tp->caps & ULN_TP_CAP_RINGS)) return;
    /* Acquire: as in out_reserve. */
    uint32_t life = atomic_load_explicit(pp->life_at, memory_order_acquire);
    if (life != pp->dst_life) peer_life_over(ep, peer, life);
}

static void check_peers(struct uln_ep *ep)
{
    for (uint64_t pos = ep->sq_head; pos != ep->sq_tail; pos++) {
        struct uln_sqe *s = sqe_at(ep, pos);
        if (s->state == SQE_WAIT) check_life(ep, s->peer);
        if ((s->state != SQE_QUEUED && s->state != SQE_WAIT) || s->peer == ep->ctx->rank)
            continue; /* done, or on ourselves: no peer to lose */
        const struct uln_transport_ops *tp = ep->peers[s->peer].tp;
        if (s->state == SQE_WAIT && tp->peer_watch) tp->peer_watch(ep, s->peer);
        if (tp->peer_dead(ep->ctx, ep, s->peer)) {
            /* Later posts take the slow path, where the connect check fails
             * them at once (a transport does the same when it gives a peer up). */
            ep->peers[s->peer].out_ready = false;
            uln_engine_fail_peer(ep, s->peer, -ECONNRESET);
        }
    }
}

/* What a pass may issue for an endpoint alone: its CQs drive no other
 * endpoint, and no packet transport's socket waits to be read (the kernel
 * drops what does not fit). chunk_bytes is the turn each endpoint of a CQ
 * gets; with nobody to take turns with, a pass per 128 KiB only costs: shm
 * GET 1 / 4 MiB (ulnperf, three interleaved rounds) 47.6-48.4 / 47.2-47.5
 * GB/s in 128 KiB passes, 49.2-49.9 / 47.7-50.1 in 1 MiB ones. A peer's
 * message to this endpoint may wait that long (about 20 us), as it would
 * behind one large copy anywhere (UCX moves a GET whole). */
#define ALONE_BYTES (1u << 20)

static inline uint32_t issue_budget(const struct uln_ep *ep)
{
    uint32_t chunk = ep->ctx->p.chunk_bytes;
    bool alone = ep->send_cq->n_eps == 1 && ep->recv_cq->n_eps == 1 && ep->n_tp_prog == 0;
    return alone && chunk < ALONE_BYTES ? ALONE_BYTES : chunk;
}

/* Do the transports' hooks run in this pass? Always, unless every one of
 * them is quiet: then on one pass in ULN_QUIET_PASSES. One compare per pass
 * (a quiet transport beside a busy one is called as well: it finds nothing). */
static inline bool tp_due(struct uln_ep *ep)
{
    return ep->tp_quiet != ep->tp_prog_ids || ++ep->passes % ULN_QUIET_PASSES == 0;
}

void uln_engine_progress(struct uln_ep *ep)
{
    /* Serving peers' GETs gets one chunk, issuing our own work one turn. */
    uint32_t serve_budget = ep->ctx->p.chunk_bytes;
    ep->blocked = false;
    bool tp = tp_due(ep);
    for (int i = 0; tp && i < ep->n_tp_prog; i++)
        ep->tp_prog[i]->progress_rx(ep); /* packets in: placed, or into our rings */
    progress_recv(ep, &serve_budget);
    if (ep->sq_head != ep->sq_tail || ep->fl_head != ep->fl_tail) {
        uint64_t before = ep->sq_issue;
        uln_engine_issue(ep, issue_budget(ep));
        uln_engine_retire(ep);
        /* Work that has not moved for a while may be waiting on a dead peer. */
        if (uln_engine_busy(ep) && ep->sq_issue == before && ++ep->stalled % 4096 == 0)
            check_peers(ep);
    }
    /* A transport made busy since (a post met a peer, a packet was queued)
     * runs now, not 64 passes later. */
    tp = tp || ep->tp_quiet != ep->tp_prog_ids;
    for (int i = 0; tp && i < ep->n_tp_prog; i++)
        ep->tp_prog[i]->progress_tx(ep); /* timers, resends, feedback; send the batch */
}

bool uln_ep_busy(struct uln_ep *ep)
{
    if (uln_engine_busy(ep)) return true;
    for (int i = 0; i < ep->n_tp_prog; i++)
        if (ep->tp_prog[i]->busy(ep)) return true;
    return false;
}

int uln_ep_wait_fds(struct uln_ep *ep, int *fds, int max, int *timeout_ms)
{
    int n = 0;
    for (int i = 0; i < ep->n_tp_prog && n < max; i++)
        n += ep->tp_prog[i]->wait_fds(ep, &fds[n], max - n, timeout_ms);
    return n;
}
