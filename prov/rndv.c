/*
 * rndv.c - rendezvous for messages above the eager limit: the sender
 * registers its buffer and sends a request (RTS) over NAP; the receiver,
 * once the request matched a receive, GETs the data straight into the
 * receive buffer (one copy, no bounce buffer) and sends an ACK NAP back; the
 * ACK completes the send and frees the registrations.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "ulnfi.h"

static int slot_get(struct ulnfi_ep *ep, struct ulnfi_op *op)
{
    for (uint32_t i = 0; i < ULNFI_RNDV_SLOTS; i++) {
        uint32_t s = (ep->rndv_next + i) % ULNFI_RNDV_SLOTS;
        if (!ep->rndv_slot[s]) {
            ep->rndv_slot[s] = op;
            ep->rndv_next = s + 1;
            ep->rndv_out++;
            op->slot = s;
            op->ping_at = 0;
            return 0;
        }
    }
    return -FI_EAGAIN;
}

static void slot_put(struct ulnfi_ep *ep, struct ulnfi_op *op)
{
    ep->rndv_slot[op->slot] = NULL;
    ep->rndv_out--;
    ep->rndv_gen[op->slot]++; /* a late or forged ACK for the old use is refused */
}

static void unregister(struct ulnfi_op *op)
{
    for (uint32_t i = 0; i < op->nmr; i++)
        uln_mr_dereg(op->mrs[i]);
    op->nmr = 0;
}

ssize_t ulnfi_rndv_send(struct ulnfi_ep *ep, int peer, const struct iovec *iov, size_t count,
                        struct ulnfi_hdr *hdr, struct ulnfi_op *op)
{
    struct {
        struct ulnfi_hdr h;
        struct ulnfi_rts r;
    } pkt;
    memset(&pkt, 0, sizeof(pkt));
    for (size_t i = 0; i < count; i++) {
        if (!iov[i].iov_len) continue;
        int rc = uln_mr_reg(ep->dom->ctx, iov[i].iov_base, iov[i].iov_len,
                            ULN_ACCESS_REMOTE_READ | ULN_MR_TRANSIENT, &op->mrs[op->nmr]);
        if (rc) {
            unregister(op);
            return ulnfi_errno(rc);
        }
        pkt.r.seg[pkt.r.nseg].key = uln_mr_key(op->mrs[op->nmr]);
        pkt.r.seg[pkt.r.nseg].len = iov[i].iov_len;
        pkt.r.nseg++;
        op->nmr++;
    }
    if (slot_get(ep, op)) {
        unregister(op);
        return -FI_EAGAIN;
    }
    hdr->pkt = ULNFI_PKT_RTS;
    pkt.h = *hdr;
    pkt.r.cookie = op->slot | (uint64_t)ep->rndv_gen[op->slot] << 32;
    pkt.r.len = op->len;
    size_t n = sizeof(pkt.h) + offsetof(struct ulnfi_rts, seg) + pkt.r.nseg * sizeof(pkt.r.seg[0]);
    /* two events finish the send: the request's own completion, the ACK */
    op->pending = 2;
    int rc = uln_nap(ep->uep, peer, &pkt, n, (uintptr_t)op, ULN_INLINE);
    if (rc == -EAGAIN) {
        ulnfi_progress(ep->dom);
        rc = uln_nap(ep->uep, peer, &pkt, n, (uintptr_t)op, ULN_INLINE);
    }
    if (rc) {
        slot_put(ep, op);
        unregister(op);
        return ulnfi_errno(rc);
    }
    return 0;
}

/* The request NAP failed: no ACK will come. */
void ulnfi_rndv_send_failed(struct ulnfi_op *op)
{
    slot_put(op->ep, op);
    op->pending = 1;
}

void ulnfi_rndv_ack(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h)
{
    uint32_t s = (uint32_t)h->data, gen = (uint32_t)(h->data >> 32);
    if (s >= ULNFI_RNDV_SLOTS) return;
    struct ulnfi_op *op = ep->rndv_slot[s];
    if (!op || ep->rndv_gen[s] != gen || op->peer != peer) return;
    slot_put(ep, op);
    /* STALE: the request named an endpoint closed since, as if its peer had died */
    if (h->flags & ULNFI_HF_ERR && !op->status)
        op->status = h->flags & ULNFI_HF_STALE ? -ECONNRESET : -EIO;
    if (--op->pending == 0) ulnfi_op_complete(op);
}

static int send_ack(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    struct ulnfi_hdr a = {.pkt = ULNFI_PKT_ACK,
                          .flags = op->status ? ULNFI_HF_ERR : 0,
                          .seq = ep->tx_seq[op->peer],
                          .data = op->cookie};
    int rc = uln_nap(ep->uep, op->peer, &a, sizeof(a), 0, ULN_INLINE | ULN_SILENT);
    if (!rc) ep->tx_seq[op->peer]++;
    return rc;
}

/* Receiver: post GETs, then ACK and report. Called again by progress as the
 * GETs complete and when the send queue had no room. */
static void recv_advance(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    if (!op->status && op->done < op->len) {
        int rc = ulnfi_xfer_advance(op);
        if (rc == -FI_EAGAIN && !op->pending) ulnfi_retry_add(ep, op);
    }
    if (op->pending || (!op->status && op->done < op->len)) return;
    if (!op->acked) {
        /* a dead sender needs no answer */
        int rc = op->status == -ECONNRESET ? 0 : send_ack(op);
        if (rc == -EAGAIN) {
            ulnfi_retry_add(ep, op);
            return;
        }
        op->acked = true;
    }
    struct ulnfi_match_recv *r = op->mrecv;
    void *buf = r->flags & FI_MULTI_RECV ? (uint8_t *)r->iov[0].iov_base + op->loff : NULL;
    uint64_t fl = op->flags | (op->recv_done && r->flags & FI_MULTI_RECV ? FI_MULTI_RECV : 0);
    ulnfi_recv_report(ep, r, fl, op->done, op->olen, op->data, op->tag, op->src, buf, op->status);
    if (op->recv_done) ulnfi_match_recv_free(op->m, r);
    ulnfi_op_put(op);
}

void ulnfi_rndv_recv(struct ulnfi_ep *ep, struct ulnfi_op *op)
{
    recv_advance(op);
}

void ulnfi_op_advance(struct ulnfi_op *op)
{
    if (op->kind == ULNFI_OP_RNDV_RECV) {
        recv_advance(op);
        return;
    }
    if (!op->status && op->done < op->len) {
        int rc = ulnfi_xfer_advance(op);
        if (rc == -FI_EAGAIN && !op->pending) {
            ulnfi_retry_add(op->ep, op);
            return;
        }
    }
    if (!op->pending) ulnfi_op_complete(op);
}

/* ---- a receiver that dies before it ACKs ------------------------------------ */

#define ULNFI_WATCH_MS 200  /* how often waiting sends look at their peers */
#define ULNFI_PING_MS  1000 /* how often each pings its peer meanwhile */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A send whose request went (pending 1: only the ACK is missing) waits on
 * the receiver alone, with nothing of ulnet's outstanding, so ulnet would
 * never tell it the receiver died. Ask ulnet (uln_peer_alive: shm's pidfd),
 * and ping the peer now and then so that udp, which finds a peer dead only
 * while it awaits an answer, watches it too. */
void ulnfi_rndv_watch(struct ulnfi_ep *ep)
{
    uint64_t now = now_ns();
    if (now < ep->rndv_watch_at) return;
    ep->rndv_watch_at = now + ULNFI_WATCH_MS * 1000000ull;
    for (uint32_t s = 0; s < ULNFI_RNDV_SLOTS && ep->rndv_out; s++) {
        struct ulnfi_op *op = ep->rndv_slot[s];
        if (!op || op->pending != 1) continue;
        if (uln_peer_alive(ep->uep, op->peer) == -ECONNRESET) {
            slot_put(ep, op);
            if (!op->status) op->status = -ECONNRESET;
            op->pending = 0;
            ulnfi_op_complete(op);
            continue;
        }
        if (now < op->ping_at) continue;
        op->ping_at = now + ULNFI_PING_MS * 1000000ull;
        struct ulnfi_hdr p = {.pkt = ULNFI_PKT_PING, .seq = ep->tx_seq[op->peer]};
        if (uln_nap(ep->uep, op->peer, &p, sizeof(p), 0, ULN_INLINE | ULN_SILENT) == 0)
            ep->tx_seq[op->peer]++;
    }
}
