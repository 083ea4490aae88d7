/*
 * atomic.c - FI_ATOMIC: fi_atomic, fi_fetch_atomic, fi_compare_atomic (and
 * their v/msg/inject forms) onto uln_atomic, and the valid queries.
 *
 * Only what ulnet does exactly is offered: 32- and 64-bit integers with
 * FI_SUM (wrapping add), FI_MIN/FI_MAX (signed or unsigned by datatype),
 * FI_BOR/FI_BAND/FI_BXOR, FI_ATOMIC_WRITE (a swap whose old value is
 * dropped), FI_ATOMIC_READ (a fetch-or of 0: it writes the word's own value
 * back, atomically) and FI_CSWAP. FI_FLOAT and FI_DOUBLE only with
 * FI_ATOMIC_READ and FI_ATOMIC_WRITE, which move bits and compute nothing.
 * Everything else (8/16/128-bit, FI_PROD, the logical ops, FI_CSWAP_NE..GT,
 * FI_MSWAP, arithmetic on floats) has no single ulnet atomic, and emulating
 * it with a compare-and-swap loop from here would not be atomic against
 * other initiators: -FI_EOPNOTSUPP.
 *
 * An operation on count elements posts one uln_atomic per element and makes
 * one libfabric completion when all are done (ULNFI_ATOMIC_MAX of them at
 * most, what the valid calls report). Operands and compares are copied into
 * the operation when it is posted, so the caller's buffers are free at once
 * (FI_INJECT or not); results go straight into the caller's result buffers,
 * which ulnet writes before the completion. A ulnet atomic completes when it
 * was applied at the target: FI_DELIVERY_COMPLETE, whatever was asked.
 */
#include <errno.h>
#include <string.h>

#include "ulnfi.h"

#define ULNFI_ATOMIC_MAX 64 /* elements per operation */

enum kind { BASE, FETCH, COMPARE };

/* Bytes of one element of dt for op, or 0: ulnet cannot do op on dt. */
static unsigned dt_width(enum fi_datatype dt, enum fi_op op)
{
    switch (dt) {
    case FI_INT32:
    case FI_UINT32:
        return 4;
    case FI_INT64:
    case FI_UINT64:
        return 8;
    case FI_FLOAT: /* bits moved, nothing computed */
        return op == FI_ATOMIC_READ || op == FI_ATOMIC_WRITE ? 4 : 0;
    case FI_DOUBLE:
        return op == FI_ATOMIC_READ || op == FI_ATOMIC_WRITE ? 8 : 0;
    default:
        return 0;
    }
}

/* The ulnet op for (dt, op) in calls of kind k, or 0: not offered. */
static unsigned map_op(enum fi_datatype dt, enum fi_op op, enum kind k, unsigned *width)
{
    *width = dt_width(dt, op);
    if (!*width) return 0;
    bool sign = dt == FI_INT32 || dt == FI_INT64;
    if (k == COMPARE) return op == FI_CSWAP ? ULN_ATOMIC_CSWAP : 0;
    switch (op) {
    case FI_SUM:
        return ULN_ATOMIC_ADD;
    case FI_MIN:
        return sign ? ULN_ATOMIC_SMIN : ULN_ATOMIC_MIN;
    case FI_MAX:
        return sign ? ULN_ATOMIC_SMAX : ULN_ATOMIC_MAX;
    case FI_BOR:
        return ULN_ATOMIC_OR;
    case FI_BAND:
        return ULN_ATOMIC_AND;
    case FI_BXOR:
        return ULN_ATOMIC_XOR;
    case FI_ATOMIC_WRITE:
        return ULN_ATOMIC_SWAP;
    case FI_ATOMIC_READ: /* result[i] = addr[i]: a fetch only */
        return k == FETCH ? ULN_ATOMIC_OR : 0;
    default:
        return 0;
    }
}

static int valid(enum fi_datatype dt, enum fi_op op, enum kind k, size_t *count)
{
    unsigned w;
    if (!map_op(dt, op, k, &w)) return -FI_EOPNOTSUPP;
    if (count) *count = ULNFI_ATOMIC_MAX;
    return 0;
}

int ulnfi_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
                       struct fi_atomic_attr *attr, uint64_t flags)
{
    if (flags & ~(uint64_t)(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC | FI_TAGGED)) return -FI_EBADFLAGS;
    if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)) return -FI_EINVAL;
    if (flags & FI_TAGGED) return -FI_EOPNOTSUPP; /* atomics into tagged receive buffers */
    enum kind k = flags & FI_FETCH_ATOMIC ? FETCH : flags & FI_COMPARE_ATOMIC ? COMPARE : BASE;
    size_t count;
    int rc = valid(datatype, op, k, &count);
    if (rc) return rc;
    if (attr) *attr = (struct fi_atomic_attr){.count = count, .size = dt_width(datatype, op)};
    return 0;
}

/* Where byte off of an iov list is (the caller checked the lengths). */
static uint8_t *iov_at(const struct iovec *iov, uint32_t n, uint64_t off)
{
    for (uint32_t i = 0; i < n; i++) {
        if (off < iov[i].iov_len) return (uint8_t *)iov[i].iov_base + off;
        off -= iov[i].iov_len;
    }
    return NULL;
}

/* The remote segment and address of byte off of the operation's target. */
static const struct ulnfi_rseg *remote_at(const struct ulnfi_op *op, uint64_t off, uint64_t *addr)
{
    for (uint32_t i = 0; i < op->nrseg; i++) {
        if (off < op->rseg[i].len) {
            *addr = op->rseg[i].off + off;
            return &op->rseg[i];
        }
        off -= op->rseg[i].len;
    }
    return NULL;
}

static uint64_t load(const uint8_t *p, unsigned width)
{
    uint32_t v4;
    uint64_t v8;
    if (width == 4) {
        memcpy(&v4, p, 4);
        return v4;
    }
    memcpy(&v8, p, 8);
    return v8;
}

int ulnfi_atomic_advance(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    unsigned w = op->awidth;
    uint64_t bytes = op->len * w;
    while (op->done < op->len && !op->status) {
        uint64_t b = op->done * w, addr = 0;
        const struct ulnfi_rseg *s = remote_at(op, b, &addr);
        uint64_t v = load(op->buf + b, w), cmp = load(op->buf + bytes + b, w);
        void *res = op->nres ? iov_at(op->res, op->nres, b) : NULL;
        /* FI_FENCE holds the first element back until what came before is done;
         * the rest follow it in order (ulnet orders atomics to one peer). */
        unsigned fl = op->done == 0 && op->afence ? ULN_FENCE : 0;
        int rc =
            uln_atomic(ep->uep, op->peer, op->aop, w, s->key, addr, v, cmp, res, (uintptr_t)op, fl);
        if (rc == -EAGAIN) return -FI_EAGAIN;
        if (rc) {
            op->status = rc;
            break;
        }
        op->pending++;
        op->done++;
    }
    return 0;
}

/* What one atomic call asks for, whichever of the nine entry points. */
struct areq {
    const struct fi_msg_atomic *m;
    const struct fi_ioc *cmp, *res;
    size_t ncmp, nres;
    uint64_t flags;
    enum kind k;
    bool inject; /* fi_inject_atomic: no completion */
};

/* Elements in an ioc list; SIZE_MAX when one entry alone is too many, so
 * that no sum of counts can wrap around to a small one. */
static size_t ioc_count(const struct fi_ioc *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].count > ULNFI_ATOMIC_MAX) return SIZE_MAX;
        c += v[i].count;
    }
    return c;
}

/* The checks that need no endpoint state: 0, or -FI_E*. */
static int areq_check(const struct areq *r, unsigned *uop, unsigned *w, size_t *count)
{
    const struct fi_msg_atomic *m = r->m;
    if (!(*uop = map_op(m->datatype, m->op, r->k, w))) return -FI_EOPNOTSUPP;
    if (r->flags & FI_TAGGED) return -FI_EOPNOTSUPP;
    if (r->flags & FI_REMOTE_CQ_DATA) return -FI_EBADFLAGS; /* ulnet atomics carry no data */
    if (m->iov_count > ULNFI_IOV_LIMIT || m->rma_iov_count > ULNFI_IOV_LIMIT || !m->rma_iov_count ||
        r->ncmp > ULNFI_IOV_LIMIT || r->nres > ULNFI_IOV_LIMIT)
        return -FI_EINVAL;
    size_t n = 0;
    for (size_t i = 0; i < m->rma_iov_count; i++) {
        if (m->rma_iov[i].count > ULNFI_ATOMIC_MAX) return -FI_EINVAL; /* and no wrap-around */
        n += m->rma_iov[i].count;
    }
    *count = n;
    if (!n || n > ULNFI_ATOMIC_MAX) return -FI_EINVAL;
    bool no_operand = r->k == FETCH && m->op == FI_ATOMIC_READ; /* buf ignored, may be NULL */
    if (!no_operand && ioc_count(m->msg_iov, m->iov_count) != n) return -FI_EINVAL;
    if (r->k != BASE && ioc_count(r->res, r->nres) != n) return -FI_EINVAL;
    if (r->k == COMPARE && ioc_count(r->cmp, r->ncmp) != n) return -FI_EINVAL;
    return 0;
}

/* Copy the elements of an ioc list into dst (w bytes each). */
static void gather(uint8_t *dst, const struct fi_ioc *v, size_t n, unsigned w)
{
    for (size_t i = 0; i < n; i++) {
        memcpy(dst, v[i].addr, v[i].count * w);
        dst += v[i].count * w;
    }
}

static void op_fill(struct ulnfi_op *op, const struct areq *r, unsigned uop, unsigned w, size_t n)
{
    const struct fi_msg_atomic *m = r->m;
    struct ulnfi_ep *ep = op->ep;
    op->kind = ULNFI_OP_ATOMIC;
    op->context = m->context;
    op->flags = FI_ATOMIC | (r->k == BASE ? FI_WRITE : FI_READ);
    op->report = !r->inject && (!ep->tx_selective || (r->flags & FI_COMPLETION));
    op->afence = r->flags & FI_FENCE;
    op->aop = (uint8_t)uop;
    op->awidth = (uint8_t)w;
    op->len = n;
    op->nrseg = (uint32_t)m->rma_iov_count;
    for (size_t i = 0; i < m->rma_iov_count; i++)
        op->rseg[i] =
            (struct ulnfi_rseg){m->rma_iov[i].key, m->rma_iov[i].addr, m->rma_iov[i].count * w};
    memset(op->buf, 0, 2 * n * w);
    if (!(r->k == FETCH && m->op == FI_ATOMIC_READ)) gather(op->buf, m->msg_iov, m->iov_count, w);
    if (r->k == COMPARE) gather(op->buf + n * w, r->cmp, r->ncmp, w);
    op->nres = (uint32_t)r->nres;
    for (size_t i = 0; i < r->nres; i++)
        op->res[i] = (struct iovec){r->res[i].addr, r->res[i].count * w};
}

static ssize_t atomic_post(struct ulnfi_ep *ep, const struct areq *r)
{
    unsigned uop, w;
    size_t n;
    ssize_t rc = areq_check(r, &uop, &w, &n);
    struct ulnfi_cntr *trig = NULL;
    uint64_t trig_at = 0;
    if (!rc) rc = ulnfi_trigger_of(ep, r->m->context, r->flags, &trig, &trig_at);
    if (rc) return rc;
    struct ulnfi_domain *d = ep->dom;
    int peer;
    struct ulnfi_op *op;
    rc = ulnfi_op_begin(ep, r->m->addr, 2 * n * w, &peer, &op);
    if (rc) return rc;
    op->peer = peer;
    op_fill(op, r, uop, w, n);
    if (trig) {
        ulnfi_trigger_park(op, trig, trig_at); /* trigger.c posts it */
        ulnfi_unlock(d);
        return 0;
    }
    rc = ulnfi_atomic_advance(op);
    if (rc == -FI_EAGAIN && !op->pending) {
        ulnfi_progress(d);
        rc = ulnfi_atomic_advance(op);
    }
    if (rc == -FI_EAGAIN && op->pending) rc = 0; /* the rest goes on in progress */
    if (rc) {
        ulnfi_op_put(op); /* nothing posted: the caller tries again */
    } else if (!op->pending) {
        ulnfi_op_complete(op); /* refused at the first post (bad op, peer) */
    }
    ulnfi_unlock(d);
    return rc;
}

#define EP(fep) ulnfi_ep_of(fep) /* itself, or what an alias stands for */

/* fi_msg_atomic for the single-buffer and vector forms. */
#define MSG(iov_, cnt_, dest_, rma_, dt_, op_, ctx_)                                               \
    (struct fi_msg_atomic)                                                                         \
    {                                                                                              \
        .msg_iov = (iov_), .iov_count = (cnt_), .addr = (dest_), .rma_iov = (rma_),                \
        .rma_iov_count = 1, .datatype = (dt_), .op = (op_), .context = (ctx_)                      \
    }

static ssize_t a_write(struct fid_ep *fep, const void *buf, size_t count, void *desc,
                       fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                       enum fi_op op, void *context)
{
    struct fi_ioc v = {(void *)buf, count};
    struct fi_rma_ioc rv = {addr, count, key};
    struct fi_msg_atomic m = MSG(&v, 1, dest, &rv, dt, op, context);
    return atomic_post(EP(fep), &(struct areq){.m = &m, .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_writev(struct fid_ep *fep, const struct fi_ioc *iov, void **desc, size_t count,
                        fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                        enum fi_op op, void *context)
{
    struct fi_rma_ioc rv = {addr, ioc_count(iov, count), key};
    struct fi_msg_atomic m = MSG(iov, count, dest, &rv, dt, op, context);
    return atomic_post(EP(fep), &(struct areq){.m = &m, .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_writemsg(struct fid_ep *fep, const struct fi_msg_atomic *m, uint64_t flags)
{
    return atomic_post(EP(fep), &(struct areq){.m = m, .flags = flags});
}
static ssize_t a_inject(struct fid_ep *fep, const void *buf, size_t count, fi_addr_t dest,
                        uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op)
{
    struct fi_ioc v = {(void *)buf, count};
    struct fi_rma_ioc rv = {addr, count, key};
    struct fi_msg_atomic m = MSG(&v, 1, dest, &rv, dt, op, NULL);
    return atomic_post(EP(fep), &(struct areq){.m = &m, .flags = FI_INJECT, .inject = true});
}

static ssize_t a_readwrite(struct fid_ep *fep, const void *buf, size_t count, void *desc,
                           void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
                           uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
    struct fi_ioc v = {(void *)buf, count}, rs = {result, count};
    struct fi_rma_ioc rv = {addr, count, key};
    struct fi_msg_atomic m = MSG(&v, 1, dest, &rv, dt, op, context);
    return atomic_post(
        EP(fep),
        &(struct areq){.m = &m, .res = &rs, .nres = 1, .k = FETCH, .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_readwritev(struct fid_ep *fep, const struct fi_ioc *iov, void **desc, size_t count,
                            struct fi_ioc *resultv, void **result_desc, size_t result_count,
                            fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                            enum fi_op op, void *context)
{
    struct fi_rma_ioc rv = {addr, ioc_count(resultv, result_count), key};
    struct fi_msg_atomic m = MSG(iov, count, dest, &rv, dt, op, context);
    return atomic_post(EP(fep), &(struct areq){.m = &m,
                                               .res = resultv,
                                               .nres = result_count,
                                               .k = FETCH,
                                               .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_readwritemsg(struct fid_ep *fep, const struct fi_msg_atomic *m,
                              struct fi_ioc *resultv, void **result_desc, size_t result_count,
                              uint64_t flags)
{
    return atomic_post(
        EP(fep),
        &(struct areq){.m = m, .res = resultv, .nres = result_count, .k = FETCH, .flags = flags});
}

static ssize_t a_compwrite(struct fid_ep *fep, const void *buf, size_t count, void *desc,
                           const void *compare, void *compare_desc, void *result, void *result_desc,
                           fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                           enum fi_op op, void *context)
{
    struct fi_ioc v = {(void *)buf, count}, c = {(void *)compare, count}, rs = {result, count};
    struct fi_rma_ioc rv = {addr, count, key};
    struct fi_msg_atomic m = MSG(&v, 1, dest, &rv, dt, op, context);
    return atomic_post(EP(fep), &(struct areq){.m = &m,
                                               .cmp = &c,
                                               .ncmp = 1,
                                               .res = &rs,
                                               .nres = 1,
                                               .k = COMPARE,
                                               .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_compwritev(struct fid_ep *fep, const struct fi_ioc *iov, void **desc, size_t count,
                            const struct fi_ioc *comparev, void **compare_desc,
                            size_t compare_count, struct fi_ioc *resultv, void **result_desc,
                            size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
                            enum fi_datatype dt, enum fi_op op, void *context)
{
    struct fi_rma_ioc rv = {addr, ioc_count(iov, count), key};
    struct fi_msg_atomic m = MSG(iov, count, dest, &rv, dt, op, context);
    return atomic_post(EP(fep), &(struct areq){.m = &m,
                                               .cmp = comparev,
                                               .ncmp = compare_count,
                                               .res = resultv,
                                               .nres = result_count,
                                               .k = COMPARE,
                                               .flags = ulnfi_tx_flags(fep)});
}
static ssize_t a_compwritemsg(struct fid_ep *fep, const struct fi_msg_atomic *m,
                              const struct fi_ioc *comparev, void **compare_desc,
                              size_t compare_count, struct fi_ioc *resultv, void **result_desc,
                              size_t result_count, uint64_t flags)
{
    return atomic_post(EP(fep), &(struct areq){.m = m,
                                               .cmp = comparev,
                                               .ncmp = compare_count,
                                               .res = resultv,
                                               .nres = result_count,
                                               .k = COMPARE,
                                               .flags = flags});
}

static int a_writevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return valid(dt, op, BASE, count);
}
static int a_readwritevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return valid(dt, op, FETCH, count);
}
static int a_compwritevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
    return valid(dt, op, COMPARE, count);
}

struct fi_ops_atomic ulnfi_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = a_write,
    .writev = a_writev,
    .writemsg = a_writemsg,
    .inject = a_inject,
    .readwrite = a_readwrite,
    .readwritev = a_readwritev,
    .readwritemsg = a_readwritemsg,
    .compwrite = a_compwrite,
    .compwritev = a_compwritev,
    .compwritemsg = a_compwritemsg,
    .writevalid = a_writevalid,
    .readwritevalid = a_readwritevalid,
    .compwritevalid = a_compwritevalid,
};
