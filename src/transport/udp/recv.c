/*
 * recv.c - the UDP transport's receiving: datagrams read from the link,
 * placed on arrival (PUT, GET data) or handed to the engine in order through
 * our inbox rings; the receive pool shared by the peers that send to us.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "transport/udp/priv.h"
#include "core/probe.h"

/* ---- receiving ---------------------------------------------------------------- */

/* Place a PUT fragment where it says; the whole operation is checked, so a
 * refused PUT writes no byte (as on the ring path). */
static int place_put(struct uln_ep *ep, const struct pkt_hdr *h, const struct pkt_put_ext *x,
                     const uint8_t *data, uint32_t n)
{
    if (h->offset < x->op_offset || h->offset - x->op_offset > x->op_len ||
        n > x->op_len - (h->offset - x->op_offset)) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return -EPROTO;
    }
    uint8_t *where;
    int rc = uln_key_enter(ep->ctx, ep->index, h->key, x->op_offset, x->op_len,
                           ULN_ACCESS_REMOTE_WRITE, &where, &ep->stats);
    if (rc) return rc;
    if (n) memcpy(where + (h->offset - x->op_offset), data, n);
    uln_key_leave(ep->ctx, ep->index);
    return 0;
}

static struct uln_refused_put refusal(const struct pkt_hdr *h, const struct pkt_put_ext *x,
                                      int32_t status)
{
    return (struct uln_refused_put){.valid = true,
                                    .op_id = x->op_id,
                                    .key = h->key,
                                    .op_offset = x->op_offset,
                                    .op_len = x->op_len,
                                    .status = status};
}

/* A new data packet (in order or ahead of it): place what can be placed now,
 * keep what must wait for its turn. Returns true if the pool buffer is kept. */
static bool arrive(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq,
                   const struct uln_link_rx *rx, uint32_t share, const struct pkt_hdr *h,
                   unsigned elen)
{
    struct rx_slot *s = &up->rx[seq & up->mask];
    const uint8_t *payload = rx->buf + sizeof *h + elen;
    uint32_t n = rx->len - (uint32_t)(sizeof *h + elen);
    s->h = *h;
    memcpy(s->ext, rx->buf + sizeof *h, elen);
    s->status = 0;
    s->held = false;
    s->rel_held = true;
    switch (h->vt & 15) {
    case PKT_PUT: {
        struct pkt_put_ext x = {0};
        memcpy(&x, s->ext, elen);
        /* The rest of a refused PUT is refused without looking (or counting)
         * again: one refusal per operation, as on the ring path. */
        if (uln_refused_is(&up->refused_seen, x.op_id, h->key, x.op_offset, x.op_len)) {
            s->status = up->refused_seen.status;
            break;
        }
        s->status = place_put(ep, h, &x, payload, n);
        if (s->status) up->refused_seen = refusal(h, &x, s->status);
        break;
    }
    case PKT_GET_RESP: {
        struct pkt_get_resp_ext x;
        memcpy(&x, s->ext, sizeof x);
        uln_engine_get_data(ep, up->rank, h->key, h->offset, x.status, payload, x.status ? 0 : n);
        break;
    }
    case PKT_ACK: /* its turn needs the header alone (s->h): no buffer held */
        break;
    default: /* NAP, GET_REQ, ATOMIC_REQ: their order matters; keep the bytes */
        s->held = true;
        udp_ep(ep)->held++;
        s->handle = rx->handle;
        s->share = share; /* counted by uln_udp_rx_datagram */
        s->payload = payload;
        s->len = n;
        return true;
    }
    /* Placed: the pool buffer goes back now, whatever the order. rel's count
     * of it stays until its turn (deliver_pending): the slot still holds
     * what that turn needs, and rel must not lend the slot to a later seq. */
    return false;
}

static bool put_done(struct uln_ep *ep, struct uln_udp_peer *up, uint64_t op_id, uint64_t imm,
                     uint64_t off, uint64_t len, int32_t status, uint32_t flags)
{
    struct uln_put_done *d = uln_inbox_feed_reserve(&up->feed, 0, sizeof *d);
    if (!d) return false;
    *d = (struct uln_put_done){.op_id = op_id,
                               .imm = imm,
                               .op_offset = off,
                               .op_len = len,
                               .status = status,
                               .flags = flags,
                               .life = ep->peers[up->rank].life};
    uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_PUT_DONE, sizeof *d);
    return true;
}

/* Give up a NAP half assembled in the ring: the consumer skips a PAD. */
static void nap_abandon(struct uln_udp_peer *up)
{
    if (!up->nap_dst) return;
    uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_PAD, up->nap_total);
    up->nap_dst = NULL;
}

/* Hand one in-order packet to the engine. False: no room in the ring yet. */
static bool deliver_one(struct uln_ep *ep, struct uln_udp_peer *up, struct rx_slot *s)
{
    const struct pkt_hdr *h = &s->h;
    switch (h->vt & 15) {
    case PKT_NAP: {
        uint64_t total = h->key, off = h->offset;
        bool last = h->flags & PKT_LAST;
        if (off == 0) {
            nap_abandon(up);
            if (total > ep->ctx->p.nap_max || s->len > total || (last && s->len != total)) {
                ULN_COUNT(&ep->stats, malformed, 1);
                return true;
            }
            uint8_t *dst = uln_inbox_feed_reserve(&up->feed, 0, (uint32_t)total);
            if (!dst) return false; /* the application has not released enough */
            up->nap_dst = dst;
            up->nap_total = (uint32_t)total;
            up->nap_got = 0;
        } else if (!up->nap_dst || off != up->nap_got || total != up->nap_total ||
                   s->len > total - off) {
            ULN_COUNT(&ep->stats, malformed, 1);
            nap_abandon(up);
            return true;
        }
        if (s->len) memcpy(up->nap_dst + off, s->payload, s->len);
        up->nap_got += s->len;
        if (!last) return true;
        if (up->nap_got != up->nap_total) {
            ULN_COUNT(&ep->stats, malformed, 1);
            nap_abandon(up);
            return true;
        }
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_NAP, up->nap_total);
        ULN_PROBE(ULN_P_FED);
        up->nap_dst = NULL;
        return true;
    }
    case PKT_ACK: {
        if (up->nap_dst) nap_abandon(up);
        struct uln_ack *a = uln_inbox_feed_reserve(&up->feed, 0, sizeof *a);
        if (!a) return false;
        *a = (struct uln_ack){.op_id = h->key, .status = (int32_t)(int64_t)h->offset};
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_ACK, sizeof *a);
        return true;
    }
    case PKT_GET_REQ: {
        struct pkt_get_req_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_get_req *r = uln_inbox_feed_reserve(&up->feed, 1, sizeof *r);
        if (!r) return false;
        *r = (struct uln_get_req){
            .key = h->key, .offset = h->offset, .len = x.len, .op_id = x.op_id};
        uln_inbox_feed_commit(&up->feed, 1, ULN_MSG_GET_REQ, sizeof *r);
        return true;
    }
    case PKT_ATOMIC_REQ: {
        struct pkt_atomic_req_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_atomic_req *r = uln_inbox_feed_reserve(&up->feed, 1, sizeof *r);
        if (!r) return false;
        *r = (struct uln_atomic_req){.key = h->key,
                                     .offset = h->offset,
                                     .op_id = x.op_id,
                                     .operand = x.operand,
                                     .compare = x.compare,
                                     .op = x.op,
                                     .width = x.width};
        uln_inbox_feed_commit(&up->feed, 1, ULN_MSG_ATOMIC_REQ, sizeof *r);
        return true;
    }
    case PKT_ATOMIC_RESP: {
        if (up->nap_dst) nap_abandon(up);
        struct pkt_atomic_resp_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_atomic_resp *a = uln_inbox_feed_reserve(&up->feed, 0, sizeof *a);
        if (!a) return false;
        *a = (struct uln_atomic_resp){.op_id = h->key, .old = h->offset, .status = x.status};
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_ATOMIC_RESP, sizeof *a);
        return true;
    }
    case PKT_PUT: {
        struct pkt_put_ext x = {0};
        memcpy(&x, s->ext, ext_len(PKT_PUT, h->flags));
        bool last = h->flags & PKT_LAST;
        if (s->status) {
            /* Refused: say so once per operation (as the ring path does). */
            if (uln_refused_is(&up->refused_sent, x.op_id, h->key, x.op_offset, x.op_len))
                return true;
            if (!put_done(ep, up, x.op_id, 0, x.op_offset, x.op_len, s->status, 0)) return false;
            up->refused_sent = refusal(h, &x, s->status);
        } else if (last) {
            /* Every earlier fragment has come up in order, so all are placed. */
            uint32_t fl = (h->flags & PKT_IMM) ? ULN_FRAG_IMM : 0;
            if (!put_done(ep, up, x.op_id, x.imm, x.op_offset, x.op_len, 0, fl)) return false;
        } else {
            return true;
        }
        return true;
    }
    default: /* GET_RESP: placed on arrival */
        return true;
    }
}

/* Give back what a receive slot holds: its pool buffer, and its place in
 * rel's window. */
static void slot_free(struct uln_ep *ep, struct uln_udp_peer *up, struct rx_slot *s)
{
    if (s->held) uln_udp_rx_release(udp_ep(ep), s), udp_ep(ep)->held--;
    if (s->rel_held) uln_rel_rx_release(&up->rel, 1, udp_ep(ep)->now);
    s->held = s->rel_held = false;
}

static void deliver_pending(struct uln_ep *ep, struct uln_udp_peer *up)
{
    while (up->pend_n) {
        struct rx_slot *s = &up->rx[up->pend_seq & up->mask];
        if (!deliver_one(ep, up, s)) break;
        slot_free(ep, up, s);
        up->pend_seq++;
        up->pend_n--;
    }
}

/* Drop every held packet and half-assembled NAP (a reset or a death). */
void uln_udp_drop_held(struct uln_ep *ep, struct uln_udp_peer *up)
{
    for (uint32_t i = 0; i <= up->mask; i++)
        slot_free(ep, up, &up->rx[i]);
    up->pend_n = 0;
    nap_abandon(up);
    up->refused_seen = up->refused_sent = (struct uln_refused_put){0};
}

static void after_verdict(struct uln_ep *ep, struct uln_udp_peer *up, int v)
{
    switch (v) {
    case ULN_REL_RX_DUP:
        ULN_COUNT(&ep->stats, duplicates, 1);
        break;
    case ULN_REL_RX_STALE:
        ULN_COUNT(&ep->stats, stale, 1);
        break;
    case ULN_REL_RX_INVALID:
    case ULN_REL_RX_OUT_OF_WINDOW: /* past the credit we gave: no honest sender does it */
        ULN_COUNT(&ep->stats, malformed, 1);
        break;
    case ULN_REL_RX_RESET:
        uln_udp_void_peer(ep, up, -ECONNRESET);
        break;
    default:
        break;
    }
}

static void rx_ctrl(struct uln_ep *ep, struct uln_udp_peer *up, const struct pkt_hdr *h,
                    const struct pkt_ctrl_body *b)
{
    if (h->key != ep->ctx->job_key) {
        ULN_COUNT(&ep->stats, refused_job, 1);
        return;
    }
    if (b->rank != uln_peer_ident(ep->ctx, up->rank) ||
        (h->flags & (ULN_REL_DATA | ULN_REL_RETX))) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return;
    }
    struct uln_rel_pkt p = {.src_epoch = h->seq,
                            .dst_epoch = b->dst_epoch,
                            .flags = (uint16_t)(h->flags & ULN_REL_FLAGS),
                            .fb = {.ack = h->ack,
                                   .lose = b->lose,
                                   .sack = h->offset,
                                   .sack_off = b->sack_off,
                                   .credit = h->credit,
                                   .reorder = b->reorder,
                                   .dup = h->tag}};
    after_verdict(ep, up, uln_rel_rx(&up->rel, &p, udp_ep(ep)->now));
    drain_acked(up);
}

/* One packet: a datagram, or a part of a bundle (share: 1 + the bundle's
 * share of the buffer, 0: none; later: not the bundle's first packet).
 * Returns true if its buffer is kept for later. */
static bool rx_one(struct uln_ep *ep, const struct uln_link_rx *rx, uint32_t share, bool later)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    struct pkt_hdr h;
    if (rx->len < sizeof h) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    memcpy(&h, rx->buf, sizeof h);
    unsigned type = h.vt & 15;
    int elen = ext_len(type, h.flags);
    /* A header that disagrees with its datagram about the length may have
     * been cut from a GRO run at a wrong place: nothing in it is trusted. */
    if ((h.vt >> 4) != PKT_VERSION || elen < 0 || rx->len < sizeof h + (unsigned)elen ||
        h.len != rx->len) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    int32_t io_peer = rx->peer >= 0 ? rx->peer : uln_udp_link_peer_of(ep, rx);
    if (io_peer >= 0 && ue->rank_of_id[io_peer] < 0) io_peer = uln_udp_link_peer_of(ep, rx);
    if (io_peer < 0 && type == PKT_CTRL) io_peer = uln_udp_link_peer_hello(ep, rx, &h);
    if (io_peer < 0) {
        ULN_COUNT(&ep->stats, refused_job, 1); /* not a rank of this job, nor a peer */
        return false;
    }
    int rank = ue->rank_of_id[io_peer];
    struct pkt_ctrl_body b; /* a control packet's body (ext_len checked its length) */
    if (type == PKT_CTRL) {
        memcpy(&b, rx->buf + sizeof h, sizeof b);
        rank = uln_udp_ctrl_sender(ep, io_peer, rank, rx, &h, &b);
    }
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return false;
    if (up->dead) {
        ULN_COUNT(&ep->stats, stale, 1);
        return false;
    }
    if (type == PKT_CTRL) {
        rx_ctrl(ep, up, &h, &b);
        return false;
    }
    if (!(h.flags & ULN_REL_DATA) || (h.flags & (ULN_REL_LOSE | ULN_REL_PROBE))) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    struct uln_rel *r = &up->rel;
    if (uln_rel_state(r) != ULN_REL_OPEN ||
        h.tag != conn_tag(ep->ctx->job_key, r->peer_epoch, r->local_epoch)) {
        /* Another job, or a life of either side that is over. */
        ULN_COUNT(&ep->stats, stale, 1);
        return false;
    }
    if (uln_msg_packet(type)->ordered && type != PKT_ACK && (int32_t)(h.seq - r->rcv_cum) > 0 &&
        ue->held >= ue->pool_bufs / 2) {
        /* A packet ahead of order that would have to wait in a pool buffer,
         * with half the pool already waiting: drop it before rel counts it,
         * as if the link had lost it (it will be resent; rel is told, so
         * that the resends come one round trip apart, not one timeout).
         * Holding it could leave no buffer for the very packet that fills
         * the hole. Only ahead: a copy of a seq we have costs no buffer,
         * and rel answers it - dropped here, a sender whose ACK was lost
         * would resend it into silence until it declared us dead. */
        uln_rel_rx_dropped(r, h.seq);
        ULN_COUNT(&ep->stats, pkts_dropped, 1);
        return false;
    }
    struct uln_rel_pkt p = {.src_epoch = r->peer_epoch,
                            .dst_epoch = r->local_epoch,
                            .seq = h.seq,
                            .flags =
                                (uint16_t)(h.flags & (ULN_REL_DATA | ULN_REL_FB | ULN_REL_RETX))};
    if (h.flags & ULN_REL_FB) p.fb = (struct uln_rel_fb){.ack = h.ack, .credit = h.credit};
    if (later) p.flags |= ULN_REL_SAME_DGRAM; /* feedback paced by datagrams */
    int v = uln_rel_rx(r, &p, ue->now);
    drain_acked(up);
    ULN_PROBE(ULN_P_REL);
    bool kept = false;
    if (v == ULN_REL_RX_DELIVER || v == ULN_REL_RX_HOLD) {
        uln_udp_sender_seen(ep, up);
        kept = arrive(ep, up, h.seq, rx, share, &h, (unsigned)elen);
        if (v == ULN_REL_RX_DELIVER) {
            if (up->pend_n == 0) up->pend_seq = h.seq;
            up->pend_n++;
            uint32_t seq;
            while (uln_rel_rx_next(r, &seq))
                up->pend_n++; /* consecutive: the held ones right after it */
            deliver_pending(ep, up);
        }
    } else {
        after_verdict(ep, up, v);
    }
    return kept;
}

/* One datagram: a packet, or a bundle (uln_udp_bundle_small, uln_udp_bundle_answers): packets
 * with PKT_MORE, each as long as its header says, then the last, which must
 * end where the datagram does (rx_one). Each is whole, with its own header
 * and seq, taken in the order sent. A packet that waits for its turn keeps
 * its bundle's buffer through a share, counted here before it is taken and
 * given back if it did not keep it. Returns true if the buffer is kept for
 * later. */
bool uln_udp_rx_datagram(struct uln_ep *ep, const struct uln_link_rx *rx)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ULN_COUNT(&ep->stats, pkts_received, 1);
    if (rx->len < sizeof(struct pkt_hdr) || !(rx->buf[1] & PKT_MORE))
        return rx_one(ep, rx, 0, false);
    uint32_t sh = uln_udp_share_open(ue, rx->handle);
    if (!sh) { /* cannot happen: a share per buffer the link lends */
        ULN_COUNT(&ep->stats, pkts_dropped, 1);
        return false;
    }
    struct uln_link_rx part = *rx;
    for (;;) {
        struct uln_link_rx one = part;
        bool more = part.len >= sizeof(struct pkt_hdr) && (part.buf[1] & PKT_MORE);
        if (more) {
            struct pkt_hdr h;
            memcpy(&h, part.buf, sizeof h);
            if (h.len < sizeof h || h.len > part.len - (uint32_t)sizeof h) {
                /* Shorter than a header, or no whole header after it: the
                 * rest of the datagram cannot be cut. Those before stand. */
                ULN_COUNT(&ep->stats, malformed, 1);
                break;
            }
            one.len = h.len;
        }
        ue->shares[sh - 1].refs++;
        if (!rx_one(ep, &one, sh, part.buf != rx->buf)) ue->shares[sh - 1].refs--;
        if (!more) break;
        part.buf += one.len;
        part.len -= one.len;
    }
    uln_udp_share_put(ue, sh); /* ours: the buffer goes back when no packet of it waits */
    return true;
}

/* Incast: many peers sending to one endpoint share its receive pool, and rel
 * gives each credit for what its own buffers hold. So that every packet a
 * peer is given credit for finds a pool buffer, the credit of the peers that
 * send to us lately adds up to at most half the pool - the half that the
 * drop rule in rx_one lets wait out of order; the rest is for packets that
 * come in order and for the link's reads. Credit a peer already has is not
 * taken back (rel's edge never moves back), so a sender joining the incast
 * may overfill the pool for a round trip: the drop rule stays as a counted
 * backstop (pkts_dropped). A peer quiet for ULN_UDP_ACTIVE_NS gives its
 * share back: a second, not less - on a loaded host a sender stalls for
 * tens of ms, and each time one leaves and comes back, the others' raised
 * credit overfills the pool for a round trip. */
#define ULN_UDP_ACTIVE_NS 1000000000u
#define ULN_UDP_SHARE_MIN 4u /* rel's smallest window: below it a sender stalls */
uint32_t uln_udp_pool_share(const struct uln_udp_ep *ue, unsigned senders)
{
    uint32_t share = ue->pool_bufs / 2 / (senders ? senders : 1);
    return share < ULN_UDP_SHARE_MIN ? ULN_UDP_SHARE_MIN : share;
}

/* The number of active senders changed: every peer gets its new share. */
void uln_udp_pool_reshare(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    uint32_t share = uln_udp_pool_share(ue, ue->n_active);
    for (int i = 0; i < ue->n_live; i++)
        uln_rel_rx_limit(&udp_peer(ep, ue->live[i])->rel, share, ue->now);
}

/* New data from up: a peer that was quiet joins the senders. */
void uln_udp_sender_seen(struct uln_ep *ep, struct uln_udp_peer *up)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    up->rx_last = ue->now;
    if (up->rx_active) return;
    up->rx_active = true;
    ue->n_active++;
    uln_udp_pool_reshare(ep);
}

/* A sender quiet for ULN_UDP_ACTIVE_NS leaves the senders (progress_tx). */
bool uln_udp_sender_quiet(struct uln_udp_ep *ue, struct uln_udp_peer *up)
{
    if (!up->rx_active || ue->now - up->rx_last < ULN_UDP_ACTIVE_NS) return false;
    up->rx_active = false;
    ue->n_active--;
    return true;
}

/* Until a UDP peer has been met (a job whose peers are all on this host, or
 * none has spoken yet), a read of the socket is a system call that finds
 * nothing and costs more than a whole round trip over shm, which every
 * progress pass would pay, with two clock reads (slow in a VM) besides. Then
 * read it when ULN_UDP_QUIET_RX_NS have passed on the coarse clock (a read
 * of the vDSO's data, no timer: so at most once per tick, 1-4 ms), and at
 * the first pass after a sleep (poll_setup), when the socket may be why it
 * woke. Time, not a count of passes: passes can be milliseconds apart (a
 * barrier's idle slices), and a peer that hears nothing for ULN_UDP_DEAD_MS
 * gives us up. A first packet waits in the socket buffer a tick at most.
 * Meanwhile the engine calls us on one pass in ULN_QUIET_PASSES only
 * (progress_tx says we are quiet), which spares the other passes the calls
 * and the clock. */
#define ULN_UDP_QUIET_RX_NS 100000u
static bool rx_quiet_skip(struct uln_udp_ep *ue)
{
    if (ue->n_live) return false;
    uint64_t now = uln_coarse_ns();
    if (now < ue->rx_quiet_next) return true;
    ue->rx_quiet_next = now + ULN_UDP_QUIET_RX_NS;
    return false;
}

void uln_udp_progress_rx(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now_read = false;
    uln_udp_solo_check(ep, ue);
    if (rx_quiet_skip(ue)) return;
    ue->in_pass = true; /* until progress_tx */
    /* A poll or wait ends a burst of posts, and the answers held for one. */
    if (ue->nbatch) uln_udp_flush(ep);
    /* Deliveries that waited for ring room (the application released NAPs). */
    for (int i = 0; i < ue->n_live; i++) {
        struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (!up->pend_n) continue;
        if (!ue->now_read) pass_clock(ue);
        deliver_pending(ep, up);
    }
    for (int round = 0; round < 4; round++) {
        ULN_PROBE(ULN_P_READ);
        int n = uln_link_recv(ue->io, ue->rxv, ULN_LINK_BATCH);
        if (n <= 0) {
            ULN_PROBE(ULN_P_EMPTY);
            break;
        }
        ULN_PROBE(ULN_P_RX);
        /* The read's own time, not the pass's: the flush above can sit in
         * sendmmsg for milliseconds on a loaded host (the peer runs and
         * answers meanwhile), and feedback stamped before it gave RTT
         * samples of ~70 ns, a min_rtt that made every acknowledged
         * retransmission look like a delivery (RACK) and the window's
         * floor nothing. */
        pass_clock(ue);
        ue->rx_any = ue->now;
        for (int i = 0; i < n; i++)
            if (!uln_udp_rx_datagram(ep, &ue->rxv[i]))
                uln_link_rx_release(ue->io, ue->rxv[i].handle);
        if (ULN_UNLIKELY(ue->solo_open)) uln_udp_solo_back(ep); /* the quiet spell is over */
        /* A short batch means the socket is (nearly) drained: one more empty
         * system call would only add latency. A GRO read returns one run of
         * ~44 datagrams, so "short" is well below that. */
        if (n < 16) break;
    }
}
