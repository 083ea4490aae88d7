/*
 * msg.c - FI_MSG, and the send/receive machinery FI_TAGGED shares: eager
 * messages in one NAP behind a 24-byte header, rendezvous above the eager
 * limit (rndv.c), and the receive side that matches what arrives.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"
#include "core/probe.h"

static uint64_t op_class(bool tagged)
{
    return tagged ? FI_TAGGED : FI_MSG;
}

/* A message's bytes, copied in line when they are 8 to 16 (the small
 * messages latency is measured with: two overlapping words) rather than
 * through memcpy's call and its dispatch on the size; n may be 0 with NULL
 * pointers (a zero-byte message), which memcpy may not be given. */
static inline void copy_msg(void *dst, const void *src, size_t n)
{
    if (n - 8 <= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, (const uint8_t *)src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy((uint8_t *)dst + n - 8, &b, 8);
    } else if (n) {
        memcpy(dst, src, n);
    }
}

/* Post one eager NAP: header and payload copied together (ulnet's NAP takes
 * one buffer), inline in the send queue when small enough. */
static ssize_t send_eager(struct ulnfi_ep *ep, int peer, const struct iovec *iov, size_t count,
                          size_t len, struct ulnfi_hdr *h, struct ulnfi_op *op, bool inject)
{
    size_t total = sizeof(*h) + len;
    int rc;
    if (total <= ep->inline_max) {
        uint8_t b[256];
        memcpy(b, h, sizeof(*h));
        /* one buffer, the common case: no walk of the list */
        if (count == 1) {
            copy_msg(b + sizeof(*h), iov[0].iov_base, len);
        } else {
            ulnfi_copy_from_iov(b + sizeof(*h), iov, count, len);
        }
        unsigned fl = ULN_INLINE | (op ? 0 : ULN_SILENT);
        rc = uln_nap(ep->uep, peer, b, total, (uintptr_t)op, fl);
    } else if (!inject) {
        /* The caller's buffers stay theirs until the completion (fi_msg(3)):
         * ulnet gathers header and payload into the peer's ring, one copy. */
        memcpy(op->buf, h, sizeof(*h));
        struct iovec v[1 + ULNFI_IOV_LIMIT];
        v[0] = (struct iovec){op->buf, sizeof(*h)};
        memcpy(v + 1, iov, count * sizeof(*iov));
        rc = uln_napv(ep->uep, peer, v, (int)(1 + count), (uintptr_t)op, 0);
    } else {
        memcpy(op->buf, h, sizeof(*h));
        ulnfi_copy_from_iov(op->buf + sizeof(*h), iov, count, len);
        rc = uln_nap(ep->uep, peer, op->buf, total, (uintptr_t)op, 0);
    }
    return rc;
}

static ssize_t send_locked(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, size_t len,
                           fi_addr_t dest, uint64_t tag, uint64_t data, void *context,
                           uint64_t flags, bool tagged);

/* A triggered send (fi_trigger(3)): its arguments kept - the iov array is
 * the caller's only during the call, the buffers until the completion, an
 * FI_INJECT's data only during the call (copied) - and parked on the
 * endpoint until its counter reaches the threshold (trigger.c). Its header,
 * sequence number and protocol are chosen when it fires, so it goes in
 * order with what is sent then. */
static ssize_t send_park(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, size_t len,
                         fi_addr_t dest, uint64_t tag, uint64_t data, void *context, uint64_t flags,
                         bool tagged)
{
    struct ulnfi_cntr *trig;
    uint64_t at = 0;
    ssize_t rc = ulnfi_trigger_of(ep, context, flags, &trig, &at);
    if (rc) return rc;
    bool inject = flags & FI_INJECT;
    struct ulnfi_domain *d = ep->dom;
    int peer;
    struct ulnfi_op *op;
    rc = ulnfi_op_begin(ep, dest, inject ? len : 0, &peer, &op);
    if (rc) return rc;
    op->kind = ULNFI_OP_TSEND;
    op->context = context;
    op->src = dest;
    op->tag = tag;
    op->data = data;
    op->len = len;
    op->trig_flags = flags & ~(uint64_t)FI_TRIGGER;
    op->trig_tagged = tagged;
    ulnfi_op_set_local(op, iov, count, len, inject);
    ulnfi_trigger_park(op, trig, at);
    ulnfi_unlock(d);
    return 0;
}

ssize_t ulnfi_send_fire(struct ulnfi_op *op)
{
    return send_locked(op->ep, op->liov, op->nliov, op->len, op->src, op->tag, op->data,
                       op->context, op->trig_flags, op->trig_tagged);
}

ssize_t ulnfi_send(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, fi_addr_t dest,
                   uint64_t tag, uint64_t data, void *context, uint64_t flags, bool tagged)
{
    ULN_PROBE(ULN_P_FI_SEND);
    if (count > ULNFI_IOV_LIMIT || (count && !iov)) return -FI_EINVAL;
    size_t len = count == 1 ? iov[0].iov_len : ulnfi_iov_len(iov, count);
    bool inject = flags & FI_INJECT;
    if (inject && len > ep->eager_max) return -FI_EINVAL;
    if (ep->type == FI_EP_DGRAM && len > ep->eager_max) return -FI_EMSGSIZE; /* one NAP */
    if (flags & FI_TRIGGER)
        return send_park(ep, iov, count, len, dest, tag, data, context, flags, tagged);
    struct ulnfi_domain *d = ep->dom;
    ulnfi_lock(d);
    ssize_t rc = ep->enabled
                     ? send_locked(ep, iov, count, len, dest, tag, data, context, flags, tagged)
                     : -FI_EOPBADSTATE;
    ulnfi_unlock(d);
    return rc;
}

/* Under the domain lock, the endpoint enabled. */
static ssize_t send_locked(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, size_t len,
                           fi_addr_t dest, uint64_t tag, uint64_t data, void *context,
                           uint64_t flags, bool tagged)
{
    struct ulnfi_domain *d = ep->dom;
    bool inject = flags & FI_INJECT, silent = flags & ULNFI_INJECT_CALL;
    int peer;
    ssize_t rc = ulnfi_av_peer(ep, dest, &peer);
    if (rc) return rc;
    struct ulnfi_hdr h = {.pkt = ULNFI_PKT_EAGER,
                          .flags = (tagged ? ULNFI_HF_TAGGED : 0) |
                                   (flags & FI_REMOTE_CQ_DATA ? ULNFI_HF_DATA : 0),
                          .dgen = ulnfi_av_gen(ep, dest),
                          .seq = ep->tx_seq[peer],
                          .tag = tag,
                          .data = data};
    /* FI_DELIVERY_COMPLETE: an eager send completes when its NAP left, so
     * such a send goes by rendezvous at any size, whose ACK says the data is
     * in the receive buffer (fi_cq(3)); from a copy when FI_INJECT frees the
     * caller's buffer at return. */
    bool deliver = (flags & FI_DELIVERY_COMPLETE) && !silent;
    bool rndv = deliver || (len >= ep->rndv_min && !inject);
    size_t total = sizeof(h) + len;
    /* An fi_inject with no counter to bump needs no completion at all. */
    bool need_op = rndv || !silent || ep->tx_cntr || total > ep->inline_max;
    struct ulnfi_op *op = NULL;
    if (need_op) {
        size_t own = rndv ? (inject ? len : 0) : (total > ep->inline_max ? total : 0);
        op = ulnfi_op_get(ep, own);
        if (!op) return -FI_ENOMEM;
        op->kind = rndv ? ULNFI_OP_RNDV_SEND : ULNFI_OP_SEND;
        op->context = context;
        op->flags = FI_SEND | op_class(tagged);
        op->report = !silent && (!ep->tx_selective || (flags & FI_COMPLETION));
        op->tag = tag;
        op->len = len;
        op->peer = peer;
        op->pending = 1;
    }
    if (rndv) {
        struct iovec copy = {op->buf, len};
        if (inject) {
            ulnfi_copy_from_iov(op->buf, iov, count, len);
            iov = &copy;
            count = 1;
        }
        rc = ulnfi_rndv_send(ep, peer, iov, count, &h, op);
    } else {
        rc = send_eager(ep, peer, iov, count, len, &h, op, inject);
        if (rc == -EAGAIN) {
            /* make room for the next try: completions free send-queue entries */
            ulnfi_progress(d);
            rc = send_eager(ep, peer, iov, count, len, &h, op, inject);
        }
        if (rc) rc = ulnfi_errno((int)rc);
    }
    if (rc) {
        if (op) ulnfi_op_put(op);
    } else {
        ep->tx_seq[peer]++;
    }
    return rc;
}

/* A rendezvous request met its receive: read the data (rndv.c). */
static void start_rndv(struct ulnfi_ep *ep, struct ulnfi_match *m, struct ulnfi_match_hit *hit,
                       const struct ulnfi_match_msg *msg, const struct ulnfi_rts *rts, int peer)
{
    struct ulnfi_match_recv *r = hit->recv;
    uint64_t fl = FI_RECV | op_class(m == ep->mt) | (msg->has_data ? FI_REMOTE_CQ_DATA : 0);
    struct ulnfi_op *op = ulnfi_op_get(ep, 0);
    if (!op) {
        ulnfi_recv_report(ep, r, fl, 0, 0, msg->data, msg->tag, msg->src, NULL, -ENOMEM);
        if (hit->recv_done) ulnfi_match_recv_free(m, r);
        return;
    }
    op->kind = ULNFI_OP_RNDV_RECV;
    op->m = m;
    op->mrecv = r;
    op->recv_done = hit->recv_done;
    op->peer = peer;
    op->flags = fl;
    op->tag = msg->tag;
    op->data = msg->data;
    op->src = msg->src;
    op->context = r->context;
    op->loff = hit->offset;
    op->len = ulnfi_match_trunc(msg->len, hit->space, &op->olen);
    op->cookie = rts->cookie;
    op->nrseg = rts->nseg;
    for (uint32_t i = 0; i < rts->nseg; i++)
        op->rseg[i] = (struct ulnfi_rseg){rts->seg[i].key, 0, rts->seg[i].len};
    op->nliov = (uint32_t)r->iov_count;
    for (size_t i = 0; i < r->iov_count; i++)
        op->liov[i] = r->iov[i];
    ulnfi_rndv_recv(ep, op); /* frees r once done */
}

/* Deliver an unexpected message to the receive that took it. */
static void take_unexp(struct ulnfi_ep *rep, struct ulnfi_match *m, struct ulnfi_match_hit *hit)
{
    struct ulnfi_match_msg *msg = hit->msg;
    struct ulnfi_match_recv *r = hit->recv;
    struct ulnfi_unexp *u = msg->payload;
    bool tagged = m == rep->mt;
    /* The endpoint it arrived at reports it and reads or answers its sender:
     * rep may be a shared receive context, which has no ulnet endpoint. */
    struct ulnfi_ep *ep = rep->dom->eps[u->ep_index];
    if (!ep || ep->gen != u->ep_gen || !ep->uep) {
        /* that endpoint closed: its message went with it, and the receive
         * is posted again (onto the next message, or queued) */
        FI_INFO(&ulnfi_prov, FI_LOG_EP_DATA, "a message of a closed endpoint dropped\n");
        free(u);
        ulnfi_match_msg_free(m, msg);
        if (!hit->recv_done) return; /* a multi-receive buffer stays posted */
        struct ulnfi_match_hit again;
        if (ulnfi_match_post_entry(m, r, &again) == ULNFI_MATCH_FOUND) take_unexp(rep, m, &again);
        return;
    }
    uint64_t fl = FI_RECV | op_class(tagged) | (msg->has_data ? FI_REMOTE_CQ_DATA : 0);
    if (r->flags & FI_PEEK && !(r->flags & FI_DISCARD)) {
        /* FI_PEEK: say what is there, leave it (claimed or not). */
        ulnfi_recv_report(ep, r, fl, msg->len, 0, msg->data, msg->tag, msg->src, NULL, 0);
        ulnfi_match_recv_free(m, r);
        return;
    }
    if (r->flags & FI_DISCARD) {
        ulnfi_recv_report(ep, r, fl, 0, 0, msg->data, msg->tag, msg->src, NULL, 0);
        if (u->pkt == ULNFI_PKT_RTS) {
            /* the sender waits for its ACK: tell it the data was not read */
            struct ulnfi_hdr a = {.pkt = ULNFI_PKT_ACK, .data = u->rts.cookie};
            a.seq = ep->tx_seq[u->peer]++;
            uln_nap(ep->uep, u->peer, &a, sizeof(a), 0, ULN_INLINE | ULN_SILENT);
        }
    } else if (u->pkt == ULNFI_PKT_EAGER) {
        size_t olen, n = ulnfi_match_trunc(msg->len, hit->space, &olen);
        ulnfi_copy_to_iov(r->iov, r->iov_count, hit->offset, u->bytes, n);
        void *buf = r->flags & FI_MULTI_RECV ? (uint8_t *)r->iov[0].iov_base + hit->offset : NULL;
        if (hit->recv_done && r->flags & FI_MULTI_RECV) fl |= FI_MULTI_RECV;
        ulnfi_recv_report(ep, r, fl, n, olen, msg->data, msg->tag, msg->src, buf, 0);
    } else {
        start_rndv(ep, m, hit, msg, &u->rts, u->peer);
        free(u);
        ulnfi_match_msg_free(m, msg);
        return;
    }
    free(u);
    ulnfi_match_msg_free(m, msg);
    if (hit->recv_done) ulnfi_match_recv_free(m, r);
}

ssize_t ulnfi_recv(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, fi_addr_t src,
                   uint64_t tag, uint64_t ignore, void *context, uint64_t flags, bool tagged)
{
    if (count > ULNFI_IOV_LIMIT || (count && !iov)) return -FI_EINVAL;
    if ((flags & FI_MULTI_RECV) && tagged) return -FI_EINVAL;
    struct ulnfi_match *m = tagged ? ep->mt : ep->mm;
    struct ulnfi_match_hit hit;
    ulnfi_lock(ep->dom);
    if (!ep->enabled && !ep->is_srx) {
        ulnfi_unlock(ep->dom);
        return -FI_EOPBADSTATE;
    }
    /* Let what has arrived be matched first: a peek must see it. */
    if (flags & (FI_PEEK | FI_CLAIM)) ulnfi_progress(ep->dom);
    /* The matcher's entry filled in place, field by field: a copy built on
     * the stack first, or an initializer, would move or zero all four cache
     * lines of it for every receive; the matcher reads only what is set. */
    struct ulnfi_match_recv *r = ulnfi_match_recv_alloc(m);
    if (!r) {
        ulnfi_unlock(ep->dom);
        return -FI_EAGAIN;
    }
    r->src = ep->info->caps & FI_DIRECTED_RECV ? src : FI_ADDR_UNSPEC;
    r->tag = tag;
    r->ignore = ignore;
    r->context = context;
    r->flags = flags;
    r->iov_count = count;
    r->owner = ep;
    if (count == 1) { /* by hand: gcc makes the loop two calls (memmove, memset) */
        r->iov[0] = iov[0];
        r->desc[0] = NULL;
    } else {
        for (size_t i = 0; i < count; i++) {
            r->iov[i] = iov[i];
            r->desc[i] = NULL;
        }
    }
    int rc = ulnfi_match_post_entry(m, r, &hit);
    if (rc == -FI_ENOMSG) {
        /* fi_tagged(3): a peek (or claim) that finds nothing completes with FI_ENOMSG */
        if (ep->rx_cq)
            ulnfi_cq_put_err(ep->rx_cq, context, FI_RECV | op_class(tagged), 0, 0, tag, 0,
                             FI_ENOMSG, 0, FI_ADDR_NOTAVAIL);
        rc = 0;
    } else if (rc == ULNFI_MATCH_FOUND) {
        take_unexp(ep, m, &hit);
        while (!hit.recv_done && (flags & FI_MULTI_RECV) &&
               ulnfi_match_pull(m, hit.recv, &hit) == ULNFI_MATCH_FOUND)
            take_unexp(ep, m, &hit);
        rc = 0;
    }
    ulnfi_unlock(ep->dom);
    return rc;
}

/* An eager message met a posted receive: copy it out of the ring. */
static void deliver_eager(struct ulnfi_ep *ep, struct ulnfi_match *m, struct ulnfi_match_hit *hit,
                          const struct ulnfi_match_msg *msg, const void *payload)
{
    struct ulnfi_match_recv *r = hit->recv;
    size_t olen, n = ulnfi_match_trunc(msg->len, hit->space, &olen);
    /* One buffer, the common case: the slice [offset, offset + space) lies
     * inside it, so copy straight from the ring with no walk of the list. */
    if (r->iov_count == 1) {
        copy_msg((uint8_t *)r->iov[0].iov_base + hit->offset, payload, n);
    } else {
        ulnfi_copy_to_iov(r->iov, r->iov_count, hit->offset, payload, n);
    }
    uint64_t fl = FI_RECV | op_class(m == ep->mt) | (msg->has_data ? FI_REMOTE_CQ_DATA : 0);
    void *buf = r->flags & FI_MULTI_RECV ? (uint8_t *)r->iov[0].iov_base + hit->offset : NULL;
    if (hit->recv_done && r->flags & FI_MULTI_RECV) fl |= FI_MULTI_RECV;
    if (olen) {
        ulnfi_recv_report(ep, r, fl, n, olen, msg->data, msg->tag, msg->src, buf, 0);
    } else {
        /* Delivered whole, the case on every message's path: the entry is
         * written here, as ulnfi_recv_report would, without the call and
         * its error branches. */
        if (ep->rx_cq && (!ep->rx_selective || (r->flags & FI_COMPLETION)))
            ulnfi_cq_put(ep->rx_cq, r->context, fl, n, buf, msg->data, msg->tag, msg->src);
        ulnfi_cntr_inc(ep->rx_cntr);
    }
    if (hit->recv_done) ulnfi_match_recv_free(m, r);
}

/* Returns false when the message could not be queued as unexpected (the
 * matcher's pool is full): the caller holds it in the ring and tries again. */
static bool arrive(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h, const void *p,
                   size_t plen)
{
    bool tagged = h->flags & ULNFI_HF_TAGGED;
    struct ulnfi_match *m = tagged ? ep->mt : ep->mm;
    const struct ulnfi_rts *rts = p;
    bool is_rts = h->pkt == ULNFI_PKT_RTS;
    if (is_rts && (plen < offsetof(struct ulnfi_rts, seg) || rts->nseg > ULNFI_RNDV_SEGS))
        return true; /* malformed: dropped */
    /* Field by field: an initializer would zero the matcher's private half
     * too, for every message; ulnfi_match_unexp sets that half itself. */
    struct ulnfi_match_msg msg;
    msg.src = ulnfi_av_src(ep->av, peer);
    msg.tag = tagged ? h->tag : 0;
    msg.data = h->data;
    msg.has_data = h->flags & ULNFI_HF_DATA;
    msg.len = is_rts ? rts->len : plen;
    msg.payload = msg.owner = NULL;
    struct ulnfi_match_hit hit;
    if (ulnfi_match_arrive(m, &msg, &hit) == ULNFI_MATCH_FOUND) {
        if (!is_rts)
            deliver_eager(ep, m, &hit, &msg, p);
        else
            start_rndv(ep, m, &hit, &msg, rts, peer);
        return true;
    }
    size_t sz = sizeof(struct ulnfi_unexp) + (is_rts ? 0 : plen);
    struct ulnfi_unexp *u = malloc(sz);
    if (!u) return false;
    u->pkt = h->pkt;
    u->peer = peer;
    u->ep_index = ep->index;
    u->ep_gen = ep->gen;
    if (is_rts)
        u->rts = *rts;
    else
        memcpy(u->bytes, p, plen);
    msg.payload = u;
    struct ulnfi_match_msg *out;
    if (ulnfi_match_unexp(m, &msg, &out)) {
        free(u);
        ep->unexp_held++;
        return false;
    }
    /* A peer may send before the application inserts it (Open MPI inserts
     * peers at first use): its messages wait with no address until the AV
     * gives them one (ulnfi_rx_resolve), else a receive directed at that
     * address would never see them. */
    if (msg.src == FI_ADDR_NOTAVAIL) ep->unexp_unknown++;
    return true;
}

static fi_addr_t unexp_src(const struct ulnfi_match_msg *msg, void *av)
{
    const struct ulnfi_unexp *u = msg->payload;
    return ulnfi_av_src(av, u->peer);
}

/* The AV removed src: what waits from it is from nobody the AV knows, until
 * that peer is inserted again (then resolve names it anew). */
void ulnfi_rx_forget(struct ulnfi_ep *ep, fi_addr_t src)
{
    ep->unexp_unknown += ulnfi_match_forget(ep->mt, src) + ulnfi_match_forget(ep->mm, src);
}

void ulnfi_rx_resolve(struct ulnfi_ep *ep)
{
    if (!ep->unexp_unknown) return;
    ep->unexp_unknown = ulnfi_match_resolve(ep->mt, unexp_src, ep->av) +
                        ulnfi_match_resolve(ep->mm, unexp_src, ep->av);
}

static bool valid(const struct ulnfi_ep *ep, const struct uln_cqe *c)
{
    return c->len >= sizeof(struct ulnfi_hdr) && c->peer >= 0 && c->peer < ep->dom->size;
}

/* One received NAP; false: it must stay in the ring for now (see hold).
 * taken: an ACK or PING already acted on (take_control): only its sequence
 * number is checked, in order with the messages around it. */
static bool rx_one(struct ulnfi_ep *ep, const struct uln_cqe *c, bool taken)
{
    const struct ulnfi_hdr *h = c->data;
    if (!valid(ep, c)) return true;
    uint32_t seq = ep->rx_seq[c->peer];
    if (h->seq != seq) ep->seq_errors++;
    ep->rx_seq[c->peer] = h->seq + 1;
    if (taken) return true;
    const void *p = (const uint8_t *)c->data + sizeof(*h);
    size_t plen = c->len - sizeof(*h);
    bool msg = h->pkt == ULNFI_PKT_EAGER || h->pkt == ULNFI_PKT_RTS;
    if (h->pkt == ULNFI_PKT_ACK) {
        ulnfi_rndv_ack(ep, c->peer, h);
    } else if (h->pkt == ULNFI_PKT_CM) {
        ulnfi_cm_rx(ep, c->peer, h, p, plen);
    } else if (h->pkt == ULNFI_PKT_RMA_EV) {
        ulnfi_rma_event_rx(ep, p, plen);
    } else if (msg && !ulnfi_ep_stale(ep, c->peer, h, p, plen) &&
               !arrive(ep, c->peer, h, p, plen)) {
        ep->rx_seq[c->peer] = seq; /* it comes again */
        return false;
    }
    return true;
}

/* With the unexpected queue full, a message stays in ulnet's ring (its entry
 * unreleased) and so do all after it, in order: the ring fills and ulnet
 * holds the senders back. Nothing is dropped; receives posted later drain
 * the queue and ulnfi_rx_retry takes the held ones. */
static void hold(struct ulnfi_ep *ep, const struct uln_cqe *c, struct uln_cq *ucq, bool taken)
{
    struct ulnfi_held *e = malloc(sizeof(*e));
    if (!e) { /* out of memory: the message is lost, and said so */
        FI_WARN(&ulnfi_prov, FI_LOG_EP_DATA, "no memory to hold a message: dropped\n");
        if (c->flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(ucq, c);
        return;
    }
    if (!ep->held_head)
        FI_INFO(&ulnfi_prov, FI_LOG_EP_DATA, "unexpected queue full: messages wait in the ring\n");
    e->next = NULL;
    e->c = *c;
    e->ucq = ucq;
    e->taken = taken;
    if (ep->held_tail)
        ep->held_tail->next = e;
    else
        ep->held_head = e;
    ep->held_tail = e;
}

/* Behind held messages, an ACK (or PING) is acted on at once: it needs no
 * receive, and the application may wait for the send it completes before it
 * posts the receives that would drain the held ones. It keeps its place in
 * the held list, for the sequence check and the ring's release. */
static bool take_control(struct ulnfi_ep *ep, const struct uln_cqe *c)
{
    const struct ulnfi_hdr *h = c->data;
    if (!valid(ep, c)) return false;
    if (h->pkt == ULNFI_PKT_ACK)
        ulnfi_rndv_ack(ep, c->peer, h);
    else if (h->pkt != ULNFI_PKT_PING)
        return false;
    return true;
}

void ulnfi_rx_nap(struct ulnfi_ep *ep, const struct uln_cqe *c, struct uln_cq *ucq)
{
    if (ep->held_head) {
        hold(ep, c, ucq, take_control(ep, c));
        return;
    }
    if (!rx_one(ep, c, false)) {
        hold(ep, c, ucq, false);
        return;
    }
    if (c->flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(ucq, c);
}

void ulnfi_rx_retry(struct ulnfi_ep *ep)
{
    while (ep->held_head && rx_one(ep, &ep->held_head->c, ep->held_head->taken)) {
        struct ulnfi_held *e = ep->held_head;
        ep->held_head = e->next;
        if (!ep->held_head) ep->held_tail = NULL;
        if (e->c.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(e->ucq, &e->c);
        free(e);
    }
}

static ssize_t msg_recv(struct fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t src,
                        void *context)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    struct iovec iov = {buf, len};
    return ulnfi_recv(ep, &iov, 1, src, 0, 0, context, ulnfi_rx_flags(fep), false);
}
static ssize_t msg_recvv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                         fi_addr_t src, void *context)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    return ulnfi_recv(ep, iov, count, src, 0, 0, context, ulnfi_rx_flags(fep), false);
}
static ssize_t msg_recvmsg(struct fid_ep *fep, const struct fi_msg *msg, uint64_t flags)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    return ulnfi_recv(ep, msg->msg_iov, msg->iov_count, msg->addr, 0, 0, msg->context, flags,
                      false);
}
static ssize_t msg_send(struct fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                        void *context)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(ep, &iov, 1, dest, 0, 0, context, ulnfi_tx_flags(fep), false);
}
static ssize_t msg_sendv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                         fi_addr_t dest, void *context)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    return ulnfi_send(ep, iov, count, dest, 0, 0, context, ulnfi_tx_flags(fep), false);
}
static ssize_t msg_sendmsg(struct fid_ep *fep, const struct fi_msg *msg, uint64_t flags)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    return ulnfi_send(ep, msg->msg_iov, msg->iov_count, msg->addr, 0, msg->data, msg->context,
                      flags & ~ULNFI_INJECT_CALL, false);
}
static ssize_t msg_inject(struct fid_ep *fep, const void *buf, size_t len, fi_addr_t dest)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(ep, &iov, 1, dest, 0, 0, NULL, FI_INJECT | ULNFI_INJECT_CALL, false);
}
static ssize_t msg_senddata(struct fid_ep *fep, const void *buf, size_t len, void *desc,
                            uint64_t data, fi_addr_t dest, void *context)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(ep, &iov, 1, dest, 0, data, context, ulnfi_tx_flags(fep) | FI_REMOTE_CQ_DATA,
                      false);
}
static ssize_t msg_injectdata(struct fid_ep *fep, const void *buf, size_t len, uint64_t data,
                              fi_addr_t dest)
{
    struct ulnfi_ep *ep = ulnfi_ep_of(fep);
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(ep, &iov, 1, dest, 0, data, NULL,
                      FI_INJECT | ULNFI_INJECT_CALL | FI_REMOTE_CQ_DATA, false);
}

struct fi_ops_msg ulnfi_msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = msg_recv,
    .recvv = msg_recvv,
    .recvmsg = msg_recvmsg,
    .send = msg_send,
    .sendv = msg_sendv,
    .sendmsg = msg_sendmsg,
    .inject = msg_inject,
    .senddata = msg_senddata,
    .injectdata = msg_injectdata,
};
