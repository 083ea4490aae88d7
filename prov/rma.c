/*
 * rma.c - FI_RMA: fi_read/fi_write/fi_writedata onto ulnet GET/PUT/PUT_IMM.
 * Keys are ulnet region keys; the remote address is a byte offset in the
 * region or, with FI_MR_VIRT_ADDR, an address ulnet turns into one (mr.c).
 * A transfer of several local or remote pieces is a cursor walked by
 * ulnfi_xfer_advance, which rendezvous receives use as well: one ulnet
 * operation per remote piece, the local pieces under it a gather list
 * (uln_putv/uln_getv), so one remote range is checked, moved and refused
 * as a whole, as a contiguous fi_write is.
 */
#include <errno.h>
#include <string.h>

#include "ulnfi.h"

/* FI_RMA_EVENT, under the domain lock: an RMA onto us ended. The endpoint's
 * remote counters count it (fi_cntr(3)); a write with data was counted as
 * its data arrived. So do the counters bound to the region it targeted. */
void ulnfi_rma_event_rx(struct ulnfi_ep *ep, const void *p, size_t plen)
{
    struct ulnfi_rma_ev ev;
    if (plen < sizeof(ev)) return; /* malformed: dropped */
    memcpy(&ev, p, sizeof(ev));
    ulnfi_mr_event(ep->dom, ev.key, ev.what);
    if (ev.what & ULNFI_EV_COUNTED) return;
    if (ev.what & ULNFI_EV_WRITE) ulnfi_cntr_inc(ep->rwr_cntr);
    if (ev.what & ULNFI_EV_READ) ulnfi_cntr_inc(ep->rrd_cntr);
}

/* Under the domain lock: op (a read, write or atomic) completed; tell its
 * target, silently (the notice is the provider's own). The target cannot
 * see a PUT or GET land: only a NAP tells it. */
void ulnfi_rma_event_tx(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    size_t total = sizeof(struct ulnfi_hdr) + sizeof(struct ulnfi_rma_ev);
    struct ulnfi_op *n = ulnfi_op_get(ep, total);
    if (!n) return;
    struct ulnfi_hdr h = {.pkt = ULNFI_PKT_RMA_EV, .seq = ep->tx_seq[op->peer]};
    struct ulnfi_rma_ev ev = {.key = op->nrseg ? op->rseg[0].key : 0};
    if (op->kind == ULNFI_OP_READ)
        ev.what = ULNFI_EV_READ;
    else if (op->kind == ULNFI_OP_WRITE)
        ev.what = ULNFI_EV_WRITE | (op->has_imm ? ULNFI_EV_COUNTED : 0);
    else /* fi_cntr(3): fetching atomics count as reads, the others as writes */
        ev.what = op->flags & FI_READ ? ULNFI_EV_READ : ULNFI_EV_WRITE;
    n->kind = ULNFI_OP_CM;
    n->pending = 1;
    memcpy(n->buf, &h, sizeof(h));
    memcpy(n->buf + sizeof(h), &ev, sizeof(ev));
    if (!uln_nap(ep->uep, op->peer, n->buf, total, (uintptr_t)n, 0)) {
        ep->tx_seq[op->peer]++;
    } else { /* the send queue is full: the notice is lost, and said so */
        FI_WARN(&ulnfi_prov, FI_LOG_EP_DATA, "send queue full: an FI_RMA_EVENT notice lost\n");
        ulnfi_op_put(n);
    }
}

/* Where byte off of the local iov list is, and how much follows it there. */
static uint8_t *local_at(const struct ulnfi_op *op, uint64_t off, uint64_t *room)
{
    for (uint32_t i = 0; i < op->nliov; i++) {
        if (off < op->liov[i].iov_len) {
            *room = op->liov[i].iov_len - off;
            return (uint8_t *)op->liov[i].iov_base + off;
        }
        off -= op->liov[i].iov_len;
    }
    *room = 0;
    return NULL;
}

static int post_piece(struct ulnfi_op *op, uint8_t *p, uint64_t n, const struct ulnfi_rseg *s,
                      bool last)
{
    struct ulnfi_ep *ep = op->ep;
    uint64_t roff = s->off + op->cur_soff;
    if (op->kind != ULNFI_OP_WRITE)
        return uln_get(ep->uep, op->peer, p, n, s->key, roff, (uintptr_t)op, 0);
    if (last && op->has_imm)
        return uln_put_imm(ep->uep, op->peer, p, n, s->key, roff, op->data, (uintptr_t)op, 0);
    return uln_put(ep->uep, op->peer, p, n, s->key, roff, (uintptr_t)op, 0);
}

/* Several local pieces into one remote range: ulnet's gather list, one
 * operation and one completion (uln_putv, uln_getv, uln_put_immv). */
static int post_pieces(struct ulnfi_op *op, const struct iovec *v, int k, uint64_t n,
                       const struct ulnfi_rseg *s, bool last)
{
    if (k == 1) return post_piece(op, v[0].iov_base, n, s, last);
    struct ulnfi_ep *ep = op->ep;
    uint64_t roff = s->off + op->cur_soff;
    if (op->kind != ULNFI_OP_WRITE)
        return uln_getv(ep->uep, op->peer, v, k, s->key, roff, (uintptr_t)op, 0);
    if (last && op->has_imm)
        return uln_put_immv(ep->uep, op->peer, v, k, s->key, roff, op->data, (uintptr_t)op, 0);
    return uln_putv(ep->uep, op->peer, v, k, s->key, roff, (uintptr_t)op, 0);
}

/* The local pieces from the cursor on that fill the rest of remote segment
 * s (or of the transfer), at most ULN_IOV_MAX of them, in v: their count
 * (0: the local side ends first), their bytes in *n. */
static int gather_local(const struct ulnfi_op *op, const struct ulnfi_rseg *s, struct iovec *v,
                        uint64_t *n)
{
    uint64_t want = s->len - op->cur_soff, got = 0;
    if (want > op->len - op->done) want = op->len - op->done;
    int k = 0;
    while (got < want && k < ULN_IOV_MAX) {
        uint64_t room;
        uint8_t *p = local_at(op, op->loff + op->done + got, &room);
        if (!p) break;
        if (room > want - got) room = want - got;
        v[k++] = (struct iovec){p, room};
        got += room;
    }
    *n = got;
    return k;
}

/* Post what is left of op: one ulnet operation per remote segment, its
 * local side gathered (a remote segment longer than ULN_IOV_MAX local
 * pieces takes more than one). */
int ulnfi_xfer_advance(struct ulnfi_op *op)
{
    if (op->kind == ULNFI_OP_ATOMIC) return ulnfi_atomic_advance(op); /* elements, not bytes */
    while (op->done < op->len && !op->status) {
        while (op->cur_seg < op->nrseg && op->cur_soff == op->rseg[op->cur_seg].len) {
            op->cur_seg++;
            op->cur_soff = 0;
        }
        struct iovec v[ULN_IOV_MAX];
        uint64_t n = 0;
        int k = op->cur_seg == op->nrseg ? 0 : gather_local(op, &op->rseg[op->cur_seg], v, &n);
        if (k == 0) {
            op->status = -EINVAL; /* the two sides' lengths disagree */
            break;
        }
        const struct ulnfi_rseg *s = &op->rseg[op->cur_seg];
        int rc = post_pieces(op, v, k, n, s, op->done + n == op->len);
        if (rc == -EAGAIN) return -FI_EAGAIN;
        if (rc) {
            op->status = rc;
            break;
        }
        op->pending++;
        op->done += n;
        op->cur_soff += n;
    }
    return 0;
}

static ssize_t rma(struct ulnfi_ep *ep, bool write, const struct iovec *iov, size_t count,
                   fi_addr_t addr, const struct fi_rma_iov *riov, size_t rcount, uint64_t data,
                   void *context, uint64_t flags)
{
    if (count > ULNFI_IOV_LIMIT || rcount > ULNFI_IOV_LIMIT || !rcount) return -FI_EINVAL;
    size_t len = ulnfi_iov_len(iov, count), rlen = 0;
    for (size_t i = 0; i < rcount; i++)
        rlen += riov[i].len;
    if (len != rlen) return -FI_EINVAL;
    bool inject = write && (flags & FI_INJECT);
    if (inject && len > ep->eager_max) return -FI_EINVAL;
    struct ulnfi_cntr *trig;
    uint64_t trig_at = 0;
    ssize_t rc = ulnfi_trigger_of(ep, context, flags, &trig, &trig_at);
    if (rc) return rc;
    if (trig && !len) return -FI_ENOSYS; /* a triggered write of no bytes is not built ahead */
    struct ulnfi_domain *d = ep->dom;
    int peer;
    struct ulnfi_op *op;
    rc = ulnfi_op_begin(ep, addr, inject ? len : 0, &peer, &op);
    if (rc) return rc;
    op->kind = write ? ULNFI_OP_WRITE : ULNFI_OP_READ;
    op->peer = peer;
    op->context = context;
    op->flags = FI_RMA | (write ? FI_WRITE : FI_READ);
    op->report = !(flags & ULNFI_INJECT_CALL) && (!ep->tx_selective || (flags & FI_COMPLETION));
    op->has_imm = write && (flags & FI_REMOTE_CQ_DATA);
    op->data = data;
    op->len = len;
    op->nrseg = (uint32_t)rcount;
    for (size_t i = 0; i < rcount; i++)
        op->rseg[i] = (struct ulnfi_rseg){riov[i].key, riov[i].addr, riov[i].len};
    ulnfi_op_set_local(op, iov, count, len, inject);
    if (trig) {
        ulnfi_trigger_park(op, trig, trig_at); /* trigger.c posts it */
        ulnfi_unlock(d);
        return 0;
    }
    if (!len && op->has_imm) {
        /* nothing to move, but the target must see the data */
        rc = uln_put_imm(ep->uep, peer, NULL, 0, riov[0].key, riov[0].addr, data, (uintptr_t)op, 0);
        if (!rc) op->pending = 1;
        rc = ulnfi_errno((int)rc);
    } else {
        rc = ulnfi_xfer_advance(op);
        if (rc == -FI_EAGAIN && !op->pending) {
            ulnfi_progress(d);
            rc = ulnfi_xfer_advance(op);
        }
        if (rc == -FI_EAGAIN && op->pending) rc = 0; /* the rest goes on in progress */
    }
    if (rc) {
        ulnfi_op_put(op);
    } else if (!op->pending) {
        ulnfi_op_complete(op); /* 0 bytes, or an error found before any post */
    }
    ulnfi_unlock(d);
    return rc;
}

#define EP(fep) ulnfi_ep_of(fep) /* itself, or what an alias stands for */

static ssize_t r_read(struct fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t src,
                      uint64_t addr, uint64_t key, void *context)
{
    struct iovec iov = {buf, len};
    struct fi_rma_iov r = {addr, len, key};
    return rma(EP(fep), false, &iov, 1, src, &r, 1, 0, context, ulnfi_tx_flags(fep));
}
static ssize_t r_readv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
    struct fi_rma_iov r = {addr, ulnfi_iov_len(iov, count), key};
    return rma(EP(fep), false, iov, count, src, &r, 1, 0, context, ulnfi_tx_flags(fep));
}
static ssize_t r_readmsg(struct fid_ep *fep, const struct fi_msg_rma *m, uint64_t flags)
{
    return rma(EP(fep), false, m->msg_iov, m->iov_count, m->addr, m->rma_iov, m->rma_iov_count, 0,
               m->context, flags & ~ULNFI_INJECT_CALL);
}
static ssize_t r_write(struct fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                       uint64_t addr, uint64_t key, void *context)
{
    struct iovec iov = {(void *)buf, len};
    struct fi_rma_iov r = {addr, len, key};
    return rma(EP(fep), true, &iov, 1, dest, &r, 1, 0, context, ulnfi_tx_flags(fep));
}
static ssize_t r_writev(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                        fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
    struct fi_rma_iov r = {addr, ulnfi_iov_len(iov, count), key};
    return rma(EP(fep), true, iov, count, dest, &r, 1, 0, context, ulnfi_tx_flags(fep));
}
static ssize_t r_writemsg(struct fid_ep *fep, const struct fi_msg_rma *m, uint64_t flags)
{
    return rma(EP(fep), true, m->msg_iov, m->iov_count, m->addr, m->rma_iov, m->rma_iov_count,
               m->data, m->context, flags & ~ULNFI_INJECT_CALL);
}
static ssize_t r_inject(struct fid_ep *fep, const void *buf, size_t len, fi_addr_t dest,
                        uint64_t addr, uint64_t key)
{
    struct iovec iov = {(void *)buf, len};
    struct fi_rma_iov r = {addr, len, key};
    return rma(EP(fep), true, &iov, 1, dest, &r, 1, 0, NULL, FI_INJECT | ULNFI_INJECT_CALL);
}
static ssize_t r_writedata(struct fid_ep *fep, const void *buf, size_t len, void *desc,
                           uint64_t data, fi_addr_t dest, uint64_t addr, uint64_t key,
                           void *context)
{
    struct iovec iov = {(void *)buf, len};
    struct fi_rma_iov r = {addr, len, key};
    return rma(EP(fep), true, &iov, 1, dest, &r, 1, data, context,
               ulnfi_tx_flags(fep) | FI_REMOTE_CQ_DATA);
}
static ssize_t r_injectdata(struct fid_ep *fep, const void *buf, size_t len, uint64_t data,
                            fi_addr_t dest, uint64_t addr, uint64_t key)
{
    struct iovec iov = {(void *)buf, len};
    struct fi_rma_iov r = {addr, len, key};
    return rma(EP(fep), true, &iov, 1, dest, &r, 1, data, NULL,
               FI_INJECT | ULNFI_INJECT_CALL | FI_REMOTE_CQ_DATA);
}

struct fi_ops_rma ulnfi_rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = r_read,
    .readv = r_readv,
    .readmsg = r_readmsg,
    .write = r_write,
    .writev = r_writev,
    .writemsg = r_writemsg,
    .inject = r_inject,
    .writedata = r_writedata,
    .injectdata = r_injectdata,
};
