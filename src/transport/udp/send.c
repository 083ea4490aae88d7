/*
 * send.c - the UDP transport's sending: the batch a progress pass or a post
 * sends, send slots kept for resends, and the engine's messages as packets
 * (reserve/commit, NAP, PUT, GET answers).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "transport/udp/priv.h"
#include "core/probe.h"

void uln_udp_flush(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || ue->nbatch == 0) return;
    uln_udp_bundle_small(ue);
    uln_udp_bundle_answers(ue);
    int n = uln_link_send(ue->io, ue->batch, ue->nbatch);
    if (n < 0) {
        /* A malformed packet of ours: a bug, but never a hang. Count and drop
         * the batch; rel resends what mattered. */
        ULN_COUNT(&ep->stats, malformed, 1);
        n = (int)ue->nbatch;
    }
    ULN_COUNT(&ep->stats, pkts_sent, (unsigned)n);
    uln_udp_bundles_sent(ue, (unsigned)n);
    if (ue->in_pass) pass_clock(ue); /* the next packets' stamps (uln_udp_reserve) */
    /* What the socket could not take now waits at the front for next time. */
    unsigned left = ue->nbatch - (unsigned)n;
    if (left == 0) ue->batch_data = ue->answers_held = false;
    for (unsigned i = 0; i < left; i++)
        uln_udp_batch_move(ue, i, (unsigned)n + i);
    ue->nbatch = left;
}

/* A post's packets are queued. They leave now if the peer had nothing in
 * flight (a lone message never waits for a poll) or if held answers wait to
 * ride with them; else they wait until the burst fills the batch or the next
 * progress pass, and a burst of posts becomes one system call. */
static void post_sent(struct uln_ep *ep, bool lone)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->posted_at = ue->now;
    if (lone || ue->answers_held) uln_udp_flush(ep);
}

/* Room in the batch for n more packets, flushing if needed. */
static bool batch_room(struct uln_ep *ep, unsigned n)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (ue->nbatch + n > ULN_LINK_BATCH) uln_udp_flush(ep);
    return ue->nbatch + n <= ULN_LINK_BATCH;
}

/* Write packet p's length into its header (the first iovec's start). */
static void pkt_len_set(struct uln_link_pkt *p)
{
    uint32_t n = uln_link_pkt_len(p);
    memcpy((uint8_t *)p->iov[0].iov_base + offsetof(struct pkt_hdr, len), &n, sizeof n);
}

/* Queue one packet: the header from h/ext, then data. NULL when the socket
 * is full (as if lost: rel resends), else the packet, for a second piece. */
static struct uln_link_pkt *queue_pkt(struct uln_ep *ep, int io_id, const struct pkt_hdr *h,
                                      const void *ext, unsigned elen, const void *data,
                                      uint32_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!batch_room(ep, 1)) return NULL;
    unsigned type = h->vt & 15;
    if (type != PKT_ACK && type != PKT_CTRL) ue->batch_data = true;
    unsigned i = ue->nbatch++;
    /* The batch leaves at the next pass at the latest: not a quiet one. Quiet
     * is only said with the batch empty, so its first packet is enough. */
    if (i == 0) uln_tp_busy(ep, &uln_tp_udp);
    uint8_t *row = ue->scratch[i] + LEAD_SPACE; /* room before it for a riding ACK */
    memcpy(row, h, sizeof *h);
    if (elen) memcpy(row + sizeof *h, ext, elen);
    struct uln_link_pkt *p = &ue->batch[i];
    ue->batch_region[i] = false;
    ue->batch_bundle[i] = -1;
    p->peer = io_id;
    p->niov = 1;
    p->iov[0] = (struct iovec){row, sizeof *h + elen};
    if (len) p->iov[p->niov++] = (struct iovec){(void *)(uintptr_t)data, len};
    pkt_len_set(p);
    return p;
}

void uln_udp_send_ctrl(struct uln_ep *ep, struct uln_udp_peer *up, const struct uln_rel_pkt *p)
{
    struct pkt_hdr h = {.vt = PKT_VERSION << 4 | PKT_CTRL,
                        .flags = (uint8_t)(p->flags & (ULN_REL_FB | ULN_REL_LOSE | ULN_REL_PROBE)),
                        .credit = p->fb.credit,
                        .tag = p->fb.dup, /* rel's D-SACK: only control packets carry it */
                        .seq = p->src_epoch,
                        .ack = p->fb.ack,
                        .key = ep->ctx->peer_recs[up->rank].key, /* what it expects */
                        .offset = p->fb.sack};
    struct pkt_ctrl_body b = {.dst_epoch = p->dst_epoch,
                              .lose = p->fb.lose,
                              .sack_off = p->fb.sack_off,
                              .reorder = p->fb.reorder,
                              .rank = uln_self_ident(ep->ctx)};
    /* With no job, our address rides along: the peer may not have inserted
     * us yet, and learns us from it (uln_udp_link_peer_hello). */
    struct uln_udp_ep *ue = udp_ep(ep);
    queue_pkt(ep, up->io_id, &h, &b, sizeof b, ue->hello, ue->hello_len);
}

/* A GET answer sent from our region is sent again (its first send is over,
 * and the key with it): copy the data now, under the key, into the slot's
 * own buffer, where it stays for any later resend. A region gone meanwhile
 * makes this piece a refusal (no data), which fails the GET. */
static void region_copy(struct uln_ep *ep, struct uln_udp_peer *up, struct tx_slot *t, uint32_t seq)
{
    uint8_t *where;
    t->region = false;
    int rc = uln_key_enter(ep->ctx, ep->index, t->rkey, t->roff, t->len, ULN_ACCESS_REMOTE_READ,
                           &where, &ep->stats);
    if (rc) {
        struct pkt_get_resp_ext x = {.status = rc};
        memcpy(t->ext, &x, sizeof x);
        t->len = 0;
        return;
    }
    uint8_t *mem = uln_udp_slot_mem(ep, up, seq);
    if (t->len) memcpy(mem, where, t->len);
    uln_key_leave(ep->ctx, ep->index);
    t->data = mem;
}

/* (Re)send the data packet in slot t with rel's fields from p. */
void uln_udp_send_data(struct uln_ep *ep, struct uln_udp_peer *up, struct tx_slot *t,
                       const struct uln_rel_pkt *p)
{
    if (t->region && !t->data) region_copy(ep, up, t, p->seq);
    struct pkt_hdr h = t->h;
    uint32_t len = t->len;
    if (t->user && (p->flags & ULN_REL_RETX) && !uln_engine_op_open(ep, t->op_id)) {
        /* The PUT is over: either the target placed every fragment (so it has
         * this one and will drop it as a duplicate) or it failed. The user's
         * buffer is theirs again and may be gone: resend the header only. */
        len = 0;
    }
    h.flags = (uint8_t)((h.flags & (PKT_LAST | PKT_IMM)) |
                        (p->flags & (ULN_REL_DATA | ULN_REL_FB | ULN_REL_RETX)));
    h.tag = conn_tag(ep->ctx->peer_recs[up->rank].key, p->src_epoch, p->dst_epoch);
    h.seq = p->seq;
    if (p->flags & ULN_REL_FB) {
        h.ack = p->fb.ack;
        h.credit = p->fb.credit;
    }
    struct uln_link_pkt *q = queue_pkt(ep, up->io_id, &h, t->ext, t->ext_len, t->data, len);
    if (q && len && t->len2) { /* len 0: the header only, as above */
        q->iov[q->niov++] = (struct iovec){(void *)(uintptr_t)t->data2, t->len2};
        pkt_len_set(q);
    }
    if (q) udp_ep(ep)->batch_region[q - udp_ep(ep)->batch] = t->region;
    /* A data header has room for the cumulative ACK and credit only: a LOSE
     * report (and the SACK bitmap with it) goes in a control packet of its own. */
    if (p->flags & ULN_REL_LOSE) uln_udp_send_ctrl(ep, up, p);
}

/* Take the next sequence number for slot memory already filled; t gets the
 * message's own header fields from the caller. */
struct tx_slot *uln_udp_assign(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t bytes,
                               struct uln_rel_pkt *p)
{
    if (uln_rel_tx_assign(&up->rel, udp_ep(ep)->now, bytes, p) != 0)
        return NULL; /* checked before */
    struct tx_slot *t = &up->tx[p->seq & up->mask];
    memset(&t->h, 0, sizeof t->h);
    t->ext_len = 0;
    t->used = true;
    t->user = false;
    t->region = false;
    t->data = NULL;
    t->len = 0;
    t->len2 = 0;
    return t;
}

/* The buffer of the slot of seq, taken now if it has none: there are as
 * many buffers as slots, so one is always free for a free slot. */
uint8_t *uln_udp_slot_mem(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq)
{
    struct tx_slot *t = &up->tx[seq & up->mask];
    if (!t->buf1) t->buf1 = 1 + up->tx_free[--up->n_free];
    return up->tx_mem + (size_t)(t->buf1 - 1) * udp_ep(ep)->stride;
}

/* Can n packets go to this peer now? Otherwise the endpoint is blocked. */
bool uln_udp_can_send(struct uln_ep *ep, struct uln_udp_peer *up, unsigned n)
{
    drain_acked(up);
    if (batch_room(ep, n) && uln_rel_tx_ready(&up->rel, udp_ep(ep)->now, n)) return true;
    ep->blocked = true;
    return false;
}

/* Inside a progress pass the clock is read at the socket read when
 * datagrams came, and again after every batch sent (uln_udp_flush), so the
 * stamps of packets the pass makes (GET data served, ACKs) are as close to
 * their send as a read of their own would be: one read per batch, not per
 * packet (pass_clock). A clock read costs ~25-50 ns in a VM, a tenth of the
 * time a served GET spends per packet. */
void *uln_udp_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    if (!udp_ep(ep)->in_pass || !udp_ep(ep)->now_read) pass_clock(udp_ep(ep));
    if (!up || up->dead || len > udp_ep(ep)->stride || !uln_udp_can_send(ep, up, 1)) return NULL;
    return uln_udp_slot_mem(
        ep, up, uln_rel_tx_next_seq(&up->rel)); /* the seq uln_rel_tx_assign gives next */
}

/* Send what the engine wrote into the reserved slot, as a packet. */
void uln_udp_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags, uint32_t len)
{
    (void)flags;
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    struct uln_rel_pkt p;
    const uint8_t *m = uln_udp_slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
    if (type == ULN_MSG_GET_REQ) {
        /* A post's packet (ACK and ATOMIC_RESP answer a peer): the kick that
         * follows applies post_sent's rule. */
        ue->posted_at = ue->now;
        ue->kick_now |= uln_rel_tx_in_flight(&up->rel) == 0 || ue->answers_held;
    }
    struct tx_slot *t = uln_udp_assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + len, &p);
    if (!t) return;
    /* The packet type and extension are the table's; the two header fields
     * and the extension's contents are each message's own. */
    const struct uln_msg_desc *d = uln_msg_packet(type);
    if (d) {
        t->h.vt = (uint8_t)(PKT_VERSION << 4 | type);
        t->ext_len = d->ext;
    }
    switch (type) {
    case ULN_MSG_ACK: {
        const struct uln_ack *a = (const void *)m;
        t->h.key = a->op_id;
        t->h.offset = (uint64_t)(int64_t)a->status;
        break;
    }
    case ULN_MSG_GET_REQ: {
        const struct uln_get_req *r = (const void *)m;
        struct pkt_get_req_ext x = {.len = r->len, .op_id = r->op_id};
        t->h.key = r->key;
        t->h.offset = r->offset;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    case ULN_MSG_ATOMIC_REQ: {
        const struct uln_atomic_req *r = (const void *)m;
        struct pkt_atomic_req_ext x = {.op_id = r->op_id,
                                       .operand = r->operand,
                                       .compare = r->compare,
                                       .op = r->op,
                                       .width = r->width};
        t->h.key = r->key;
        t->h.offset = r->offset;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    case ULN_MSG_ATOMIC_RESP: {
        /* Kept in the slot until acknowledged: a resend carries the same old
         * value, and the op is never applied again for it. */
        const struct uln_atomic_resp *a = (const void *)m;
        struct pkt_atomic_resp_ext x = {.status = a->status};
        t->h.key = a->op_id;
        t->h.offset = a->old;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    default:
        /* PUT_NOTIFY, PUT_FRAG, NAP and GET_RESP (uln_udp_serve_get) never
         * take this path over UDP. */
        memset(&t->h, 0, sizeof t->h);
        t->ext_len = 0;
        ULN_COUNT(&ep->stats, malformed, 1);
        break;
    }
    uln_udp_send_data(ep, up, t, &p);
}

bool uln_udp_nap(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint32_t len)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now = uln_now_ns();
    uint32_t cap = ue->payload_max - (uint32_t)sizeof(struct pkt_hdr);
    uint32_t n = len ? (len + cap - 1) / cap : 1;
    /* All packets of a NAP go together, on consecutive seqs: the receiver
     * assembles them in its ring in order, with nothing in between. */
    if (!up || up->dead || !uln_udp_can_send(ep, up, n)) return false;
    bool lone = uln_rel_tx_in_flight(&up->rel) == 0;
    uint64_t off = 0;
    uint32_t unlimited = 0; /* the NAP goes whole: the window was checked for all n */
    struct uln_frag fc = uln_frag_start(&off, len, cap, &unlimited);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = uln_frag_next(&fc);
        uint8_t *mem = uln_udp_slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
        struct uln_rel_pkt p;
        struct tx_slot *t = uln_udp_assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + k, &p);
        if (!t) return false; /* cannot happen after uln_udp_can_send */
        /* The one copy: the caller's bytes into the slot kept for resends. */
        if (k && iovcnt == 1)
            memcpy(mem, (const uint8_t *)iov[0].iov_base + off, k);
        else if (k)
            uln_iov_to_flat(mem, iov, iovcnt, off, k);
        t->h = (struct pkt_hdr){.vt = PKT_VERSION << 4 | PKT_NAP,
                                .flags = i + 1 == n ? PKT_LAST : 0,
                                .key = len,
                                .offset = off};
        t->data = mem;
        t->len = k;
        uln_udp_send_data(ep, up, t, &p);
        uln_frag_take(&fc, k);
    }
    ULN_PROBE(ULN_P_BUILT);
    post_sent(ep, lone);
    return true;
}

/* The data of PUT s's next fragment, n bytes. Zero copy: the packet gathers
 * straight from the user's buffer, which stays theirs-but-untouchable until
 * the PUT completes (at the ACK), in one piece or two (a packet's iovec
 * takes the header and two). A fragment over more of uln_putv's segments is
 * gathered into the slot's own memory (kept for resends like a NAP's). */
static void put_data(struct uln_ep *ep, struct uln_udp_peer *up, const struct uln_sqe *s,
                     struct tx_slot *t, uint32_t seq, uint32_t n)
{
    struct iovec one, part[ULN_LINK_IOV_MAX - 1];
    const struct iovec *local;
    int nlocal = uln_sqe_local(ep, s, &one, &local);
    int k = uln_iov_slice(local, nlocal, s->issued, n, part, ULN_LINK_IOV_MAX - 1);
    t->len = n;
    if (k < 0) {
        uint8_t *mem = uln_udp_slot_mem(ep, up, seq);
        uln_iov_to_flat(mem, local, nlocal, s->issued, n);
        t->data = mem;
        return;
    }
    t->user = true;
    t->op_id = s->op_id;
    t->data = k ? part[0].iov_base : NULL;
    t->len = k ? (uint32_t)part[0].iov_len : 0;
    if (k == 2) {
        t->data2 = part[1].iov_base;
        t->len2 = (uint32_t)part[1].iov_len;
    }
}

bool uln_udp_put(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget)
{
    struct uln_udp_peer *up = udp_peer(ep, s->peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now = uln_now_ns();
    uint32_t cap = ue->payload_max - (uint32_t)sizeof(struct pkt_hdr) - EXT_MAX;
    bool sent_last = false, lone = up && uln_rel_tx_in_flight(&up->rel) == 0;
    struct uln_frag fc = uln_frag_start(&s->issued, s->len, cap, budget);
    do {
        if (!up || up->dead || !uln_udp_can_send(ep, up, 1)) break;
        uint32_t n = uln_frag_next(&fc);
        bool last = uln_frag_last(&fc, n);
        struct uln_rel_pkt p;
        struct tx_slot *t =
            uln_udp_assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + EXT_MAX + n, &p);
        if (!t) break;
        uint8_t fl = last ? PKT_LAST : 0;
        if (last && (s->flags & ULN_REMOTE_CQ)) fl |= PKT_IMM;
        t->h = (struct pkt_hdr){.vt = PKT_VERSION << 4 | PKT_PUT,
                                .flags = fl,
                                .key = s->rkey,
                                .offset = s->roff + s->issued};
        struct pkt_put_ext x = {
            .op_id = s->op_id, .op_offset = s->roff, .op_len = s->len, .imm = s->imm};
        t->ext_len = (uint8_t)ext_len(PKT_PUT, fl);
        memcpy(t->ext, &x, t->ext_len);
        put_data(ep, up, s, t, p.seq, n);
        uln_udp_send_data(ep, up, t, &p);
        uln_frag_take(&fc, n);
        sent_last = last;
    } while (!sent_last && *budget > 0);
    post_sent(ep, lone);
    return sent_last;
}

/* A batch entry the socket did not take whose data is in the region: drop
 * it before the key goes (rel sends it again, copied then: region_copy). */
static void batch_drop_region(struct uln_udp_ep *ue)
{
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch; r++) {
        if (ue->batch_region[r]) continue;
        if (w != r) uln_udp_batch_move(ue, w, r);
        w++;
    }
    ue->nbatch = w;
}

/* GET answers of at least this many bytes go from the region straight into
 * the packets (uln_udp_serve_get); smaller ones are copied into send slots,
 * so that many of them share a batch instead of each sending its own. */
#define GET_ZC_MIN 65536u

/* Answer GET request r with the data of our region. A large one goes
 * straight into the packets: the kernel copies it from the region as it
 * copies a PUT's from the user's buffer, with no copy into send slots (that
 * copy was 7 % of a serving rank's time at 1 MiB); the key is then held
 * from the check until the batch carrying the pieces has gone to the
 * kernel, and the slots keep where the data is (region_copy, for a resend).
 * A refusal is one answer with the status and no data, as on the ring
 * path. */
bool uln_udp_serve_get(struct uln_ep *ep, int peer, const struct uln_get_req *r, uint64_t *sent,
                       uint32_t *budget)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!up || up->dead || !uln_udp_can_send(ep, up, 1)) return false;
    uint8_t *where;
    int rc = uln_key_enter(ep->ctx, ep->index, r->key, r->offset, r->len, ULN_ACCESS_REMOTE_READ,
                           &where, &ep->stats);
    bool zc = rc == 0 && r->len >= GET_ZC_MIN;
    struct uln_frag fc = uln_frag_start(sent, r->len, uln_udp_frag_max(ep, peer), budget);
    uint32_t first = uln_rel_tx_next_seq(&up->rel), k = 0;
    bool done = false;
    do {
        uint32_t n = rc ? 0 : uln_frag_next(&fc);
        struct uln_rel_pkt p;
        struct tx_slot *t =
            uln_udp_assign(ep, up, (uint32_t)(sizeof(struct pkt_hdr) + EXT_MAX) + n, &p);
        if (!t) break; /* cannot happen after uln_udp_can_send */
        struct pkt_get_resp_ext x = {.status = rc};
        t->h = (struct pkt_hdr){
            .vt = PKT_VERSION << 4 | PKT_GET_RESP, .key = r->op_id, .offset = *sent};
        t->ext_len = sizeof x;
        memcpy(t->ext, &x, sizeof x);
        t->len = n;
        if (zc) {
            t->region = true;
            t->rkey = r->key;
            t->roff = r->offset + *sent;
            t->data = where + *sent;
        } else if (n) {
            uint8_t *mem = uln_udp_slot_mem(ep, up, p.seq);
            memcpy(mem, where + *sent, n); /* kept in the slot for resends */
            t->data = mem;
        }
        uln_udp_send_data(ep, up, t, &p);
        k++;
        uln_frag_take(&fc, n);
        done = rc != 0 || *sent == r->len;
    } while (!done && *budget > 0 && uln_udp_can_send(ep, up, 1));
    if (rc) return done;
    if (zc) {
        uln_udp_flush(ep);
        batch_drop_region(ue);
    }
    uln_key_leave(ep->ctx, ep->index);
    if (zc)
        for (uint32_t i = 0; i < k; i++) /* the region is no longer ours to read */
            up->tx[(first + i) & up->mask].data = NULL;
    return done;
}
