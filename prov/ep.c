/*
 * ep.c - RDM endpoints: binding, enabling (the ulnet endpoint is opened then,
 * once the CQs are known), names, cancel, options, and the life of the
 * operations they post.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"

#define ULNFI_MAX_RECV  8192
#define ULNFI_MAX_UNEXP 16384

/* Lives of endpoint indices, process-wide (one ulnet context per process):
 * each enable takes the next, so a name kept from an earlier endpoint at the
 * same index (2^16 - 1 lives ago at the nearest) does not reach this one.
 * Relaxed: only distinctness matters, not order with anything else. */
static _Atomic uint32_t ep_lives;

static uint16_t next_gen(void)
{
    uint16_t g;
    while (!(g = (uint16_t)(atomic_fetch_add_explicit(&ep_lives, 1, memory_order_relaxed) + 1)))
        ; /* 0 is no life: names of endpoints never carry it */
    return g;
}

/* An EAGER or RTS for another life of this index: ulnet delivers what peers
 * post to the index, and a peer that kept a closed endpoint's name posts to
 * whichever endpoint holds the index now. Refused and counted; a rendezvous
 * sender waits for an ACK, so it gets one that fails its send. */
bool ulnfi_ep_stale(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h, const void *p,
                    size_t plen)
{
    if (h->dgen == ep->gen) return false;
    if (!ep->stale_refused++)
        FI_INFO(&ulnfi_prov, FI_LOG_EP_DATA,
                "endpoint %d (life %u): refused a message for its life %u (a stale name)\n",
                ep->index, (unsigned)ep->gen, (unsigned)h->dgen);
    const struct ulnfi_rts *rts = p;
    if (h->pkt == ULNFI_PKT_RTS && plen >= sizeof(rts->cookie)) {
        struct ulnfi_hdr a = {.pkt = ULNFI_PKT_ACK,
                              .flags = ULNFI_HF_ERR | ULNFI_HF_STALE,
                              .seq = ep->tx_seq[peer],
                              .data = rts->cookie};
        if (!uln_nap(ep->uep, peer, &a, sizeof(a), 0, ULN_INLINE | ULN_SILENT)) ep->tx_seq[peer]++;
    }
    return true;
}

void ulnfi_op_set_local(struct ulnfi_op *op, const struct iovec *iov, size_t count, size_t len,
                        bool inject)
{
    if (inject) {
        ulnfi_copy_from_iov(op->buf, iov, count, len);
        op->liov[0] = (struct iovec){op->buf, len};
        op->nliov = 1;
        return;
    }
    op->nliov = (uint32_t)count;
    for (size_t i = 0; i < count; i++)
        op->liov[i] = iov[i];
}

ssize_t ulnfi_op_begin(struct ulnfi_ep *ep, fi_addr_t dest, size_t buf_len, int *peer,
                       struct ulnfi_op **op)
{
    ulnfi_lock(ep->dom);
    ssize_t rc = ep->enabled ? ulnfi_av_peer(ep, dest, peer) : -FI_EOPBADSTATE;
    *op = rc ? NULL : ulnfi_op_get(ep, buf_len);
    if (!rc && !*op) rc = -FI_ENOMEM;
    if (rc) ulnfi_unlock(ep->dom);
    return rc;
}

struct ulnfi_op *ulnfi_op_get(struct ulnfi_ep *ep, size_t buf_len)
{
    struct ulnfi_op *op = ep->free_ops;
    if (op)
        ep->free_ops = op->next;
    else if (!(op = calloc(1, sizeof(*op))))
        return NULL;
    uint8_t *buf = op->buf;
    size_t cap = op->buf_len;
    if (buf_len > cap) {
        free(buf);
        buf = malloc(buf_len);
        cap = buf ? buf_len : 0;
        if (!buf) {
            op->buf = NULL;
            op->buf_len = 0;
            op->next = ep->free_ops;
            ep->free_ops = op;
            return NULL;
        }
    }
    memset(op, 0, offsetof(struct ulnfi_op, buf_len));
    op->buf = buf;
    op->buf_len = cap;
    op->ep = ep;
    return op;
}

void ulnfi_op_put(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    op->next = ep->free_ops;
    ep->free_ops = op;
}

void ulnfi_retry_add(struct ulnfi_ep *ep, struct ulnfi_op *op)
{
    op->next = NULL;
    if (ep->retry_tail)
        ep->retry_tail->next = op;
    else
        ep->retry_head = op;
    ep->retry_tail = op;
}

static struct ulnfi_cntr *op_cntr(const struct ulnfi_op *op)
{
    switch (op->kind) {
    case ULNFI_OP_READ:
        return op->ep->rd_cntr;
    case ULNFI_OP_WRITE:
        return op->ep->wr_cntr;
    case ULNFI_OP_ATOMIC: /* fi_cntr(3): fetching atomics are reads, the others writes */
        return op->flags & FI_READ ? op->ep->rd_cntr : op->ep->wr_cntr;
    default:
        return op->ep->tx_cntr;
    }
}

/* A send, rendezvous send, read or write is over: report and recycle. */
void ulnfi_op_complete(struct ulnfi_op *op)
{
    struct ulnfi_ep *ep = op->ep;
    if (op->kind == ULNFI_OP_CM) { /* no completion, no counter: the provider's own */
        ulnfi_op_put(op);
        return;
    }
    if (op->kind == ULNFI_OP_RNDV_RECV ||
        ((op->kind == ULNFI_OP_READ || op->kind == ULNFI_OP_WRITE || op->kind == ULNFI_OP_ATOMIC) &&
         !op->status && op->done < op->len)) {
        ulnfi_op_advance(op); /* more pieces to post */
        return;
    }
    for (uint32_t i = 0; i < op->nmr; i++)
        uln_mr_dereg(op->mrs[i]);
    op->nmr = 0;
    if (!op->status && ep->info->caps & FI_RMA_EVENT &&
        (op->kind == ULNFI_OP_READ || op->kind == ULNFI_OP_WRITE || op->kind == ULNFI_OP_ATOMIC))
        ulnfi_rma_event_tx(op);
    if (op->status) {
        if (ep->tx_cq)
            ulnfi_cq_put_err(ep->tx_cq, op->context, op->flags, 0, 0, op->tag, 0,
                             -ulnfi_errno(op->status), op->status, FI_ADDR_NOTAVAIL);
        ulnfi_cntr_inc_err(op_cntr(op));
    } else {
        if (op->report && ep->tx_cq)
            ulnfi_cq_put(ep->tx_cq, op->context, op->flags, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL);
        ulnfi_cntr_inc(op_cntr(op));
    }
    ulnfi_op_put(op);
}

/* Report a receive: success, truncation (FI_ETRUNC with olen) or failure. */
void ulnfi_recv_report(struct ulnfi_ep *ep, const struct ulnfi_match_recv *r, uint64_t flags,
                       size_t len, size_t olen, uint64_t data, uint64_t tag, fi_addr_t src,
                       void *buf, int status)
{
    if (!status && olen) status = -FI_ETRUNC;
    if (status) {
        int fierr = status == -FI_ETRUNC ? FI_ETRUNC : -ulnfi_errno(status);
        int perr = status == -FI_ETRUNC ? 0 : status;
        if (ep->rx_cq)
            ulnfi_cq_put_err(ep->rx_cq, r->context, flags, len, data, tag, olen, fierr, perr, src);
        ulnfi_cntr_inc_err(ep->rx_cntr);
        return;
    }
    bool report = !ep->rx_selective || (r->flags & FI_COMPLETION);
    if (report && ep->rx_cq) ulnfi_cq_put(ep->rx_cq, r->context, flags, len, buf, data, tag, src);
    ulnfi_cntr_inc(ep->rx_cntr);
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    /* a passive endpoint's takes its EQ after fi_setname enabled it
     * (cm.c): requests are not taken before fi_listen anyway */
    if (ep->enabled && !(ep->pep && bfid->fclass == FI_CLASS_EQ)) return -FI_EOPBADSTATE;
    switch (bfid->fclass) {
    case FI_CLASS_AV: {
        if (ep->av) return -FI_EINVAL; /* FI_EP_MSG: its own */
        ep->av = ulnfi_container(bfid, struct ulnfi_av, av.fid);
        if (ep->av->dom != ep->dom) return -FI_EINVAL;
        ep->av->refs++;
        return 0;
    }
    case FI_CLASS_CQ: {
        struct ulnfi_cq *cq = ulnfi_container(bfid, struct ulnfi_cq, cq.fid);
        if (flags & ~(uint64_t)(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))
            return -FI_EBADFLAGS;
        if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EBADFLAGS;
        if ((flags & FI_TRANSMIT && ep->tx_cq) || (flags & FI_RECV && ep->rx_cq)) return -FI_EINVAL;
        if (flags & FI_TRANSMIT) {
            ep->tx_cq = cq;
            ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
            cq->refs++;
        }
        if (flags & FI_RECV) {
            ep->rx_cq = cq;
            ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
            cq->refs++;
        }
        return 0;
    }
    case FI_CLASS_CNTR: {
        struct ulnfi_cntr *c = ulnfi_container(bfid, struct ulnfi_cntr, cntr.fid);
        const uint64_t ok =
            FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        if (!flags || (flags & ~ok)) return -FI_EBADFLAGS;
        struct ulnfi_cntr **slot[] = {&ep->tx_cntr, &ep->rx_cntr,  &ep->rd_cntr,
                                      &ep->wr_cntr, &ep->rrd_cntr, &ep->rwr_cntr};
        const uint64_t bit[] = {FI_SEND,  FI_RECV,        FI_READ,
                                FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE};
        for (int i = 0; i < 6; i++)
            if (flags & bit[i]) {
                if (*slot[i]) (*slot[i])->refs--;
                *slot[i] = c;
                c->refs++;
            }
        return 0;
    }
    case FI_CLASS_EQ: { /* an RDM endpoint raises no events, but the EQ is bound */
        struct ulnfi_eq *eq = ulnfi_container(bfid, struct ulnfi_eq, eq.fid);
        if (ep->type == FI_EP_MSG) { /* its connection events come in as eq is read */
            ulnfi_cm_unbind(ep);
            int rc = ulnfi_cm_bind(ep, eq);
            if (rc) return rc;
        }
        if (ep->eq) ulnfi_eq_ref(ep->eq, -1);
        ep->eq = eq;
        ulnfi_eq_ref(eq, 1);
        return 0;
    }
    case FI_CLASS_SRX_CTX: { /* receives are posted there, for all its endpoints */
        struct ulnfi_ep *srx = ulnfi_container(bfid, struct ulnfi_ep, ep.fid);
        if (ep->srx || srx->dom != ep->dom || ep->is_srx) return -FI_EINVAL;
        ep->srx = srx;
        ep->mt = srx->mt;
        ep->mm = srx->mm;
        srx->srx_refs++;
        return 0;
    }
    case FI_CLASS_STX_CTX: /* each endpoint sends on its own ulnet endpoint anyway */
        if (ep->stx) return -FI_EINVAL;
        ep->stx = ulnfi_container(bfid, struct fid_stx, fid);
        return 0;
    default:
        return -FI_EINVAL;
    }
}

/* What fi_getname gives and the name service publishes; ulen: the room for
 * ulnet's address (less than a full one: its short form, uln_addr). */
static int make_name(struct ulnfi_ep *ep, struct ulnfi_addr *a, size_t ulen);
int ulnfi_ep_name(struct ulnfi_ep *ep, struct ulnfi_addr *a)
{
    return make_name(ep, a, sizeof(a->uaddr));
}

static int make_name(struct ulnfi_ep *ep, struct ulnfi_addr *a, size_t ulen)
{
    *a = (struct ulnfi_addr){.magic = ULNFI_ADDR_MAGIC,
                             .version = ULNFI_ADDR_VERSION,
                             .ep = (uint8_t)ep->index,
                             .gen = ep->gen};
    int rc = uln_addr(ep->dom->ctx, a->uaddr, &ulen);
    if (rc == -ENOSPC) return -FI_ETOOSMALL;
    if (rc) return ulnfi_errno(rc);
    a->ulen = (uint8_t)ulen;
    return 0;
}

/* An endpoint named by a socket address (av_sockaddr.c) is found there: the
 * info's source, or any address and a port the system picks. */
static int publish_sa(struct ulnfi_ep *ep, const struct ulnfi_addr *name)
{
    const struct fi_info *fi = ep->info;
    struct sockaddr_storage ss = {0};
    socklen_t len = fi->src_addr && fi->src_addrlen >= sizeof(struct sockaddr_in)
                        ? ulnfi_sa_len(fi->src_addr)
                        : 0;
    if (len && len <= fi->src_addrlen) {
        memcpy(&ss, fi->src_addr, len);
    } else if (fi->addr_format == FI_SOCKADDR_IN6) {
        ss.ss_family = AF_INET6; /* in6addr_any, port 0 */
        len = sizeof(struct sockaddr_in6);
    } else {
        ss.ss_family = AF_INET;
        len = sizeof(struct sockaddr_in);
    }
    return ulnfi_names_start_sa(ep, (struct sockaddr *)&ss, len, name);
}

static int ep_enable(struct ulnfi_ep *ep)
{
    struct ulnfi_domain *d = ep->dom;
    if (ep->enabled) return 0;
    if (ep->sep) { /* a scalable endpoint's context: its AV */
        int rc = ulnfi_sep_ctx_enable(ep);
        if (rc) return rc;
    }
    if (!ep->av) return -FI_ENOAV;
    if (!ep->tx_cq && !ep->rx_cq && !ep->tx_cntr && !ep->rx_cntr) return -FI_ENOCQ;
    ep->utx_cq = ep->tx_cq;
    ep->urx_cq = ep->rx_cq;
    /* Each ulnet CQ an endpoint reports to costs a progress pass of it in
     * every domain poll. Completions reach their fi_cq through the provider's
     * own dispatch whichever ulnet CQ brings them, so both directions share
     * one when a CQ cannot be waited on (FI_WAIT_NONE: fi_cq(3) forbids
     * fi_cq_sread on it), as fi_pingpong's transmit CQ: its uln_cq stays
     * without endpoints and progress skips it. */
    if (ep->tx_cq && ep->rx_cq && ep->tx_cq != ep->rx_cq) {
        if (ep->tx_cq->wait_obj == FI_WAIT_NONE)
            ep->utx_cq = ep->rx_cq;
        else if (ep->rx_cq->wait_obj == FI_WAIT_NONE)
            ep->urx_cq = ep->tx_cq;
    }
    struct uln_cq *tx = ep->utx_cq ? ep->utx_cq->ucq : NULL;
    struct uln_cq *rx = ep->urx_cq ? ep->urx_cq->ucq : NULL;
    if (!tx || !rx) {
        int rc = uln_cq_open(d->ctx, 1024, &ep->own_cq);
        if (rc) return ulnfi_errno(rc);
        if (!tx) tx = ep->own_cq;
        if (!rx) rx = ep->own_cq;
    }
    ep->tx_seq = calloc((size_t)d->size, sizeof(uint32_t));
    ep->rx_seq = calloc((size_t)d->size, sizeof(uint32_t));
    if (!ep->tx_seq || !ep->rx_seq) return -FI_ENOMEM;
    int rc = uln_ep_open(d->ctx, tx, rx, &ep->uep);
    if (rc) return ulnfi_errno(rc);
    ep->index = uln_ep_index(ep->uep);
    if (ep->index >= ULNFI_MAX_EPS_FI) {
        uln_ep_close(ep->uep);
        ep->uep = NULL;
        return -FI_ENOSPC;
    }
    ep->gen = next_gen();
    if (ep->sep && (rc = ulnfi_sep_ctx_placed(ep))) {
        uln_ep_close(ep->uep);
        ep->uep = NULL;
        return rc;
    }
    const struct ulnfi_addr *src = ep->info->src_addr;
    /* a connected endpoint is reached through its connection, not looked
     * up: only a passive endpoint's publishes (its address is the pep's or
     * the one fi_setname gave, which the pep may still hold) */
    bool sa = ulnfi_sa_format(ep->info->addr_format) && (ep->type != FI_EP_MSG || ep->pep);
    if (sa || (src && ep->info->src_addrlen == ULNFI_NAME_FULL && src->flags & ULNFI_AF_SVC)) {
        struct ulnfi_addr name;
        rc = make_name(ep, &name, sizeof(name.uaddr));
        if (!rc) rc = sa ? publish_sa(ep, &name) : ulnfi_names_start(ep, src, &name);
        if (rc) {
            uln_ep_close(ep->uep);
            ep->uep = NULL;
            return rc;
        }
    }
    d->eps[ep->index] = ep;
    d->live[d->nlive++] = ep;
    if (ep->utx_cq) ep->utx_cq->drivers++;
    if (ep->urx_cq && ep->urx_cq != ep->utx_cq) ep->urx_cq->drivers++;
    ep->enabled = true;
    return 0;
}

int ulnfi_ep_enable(struct ulnfi_ep *ep)
{
    ulnfi_lock(ep->dom);
    int rc = ep_enable(ep);
    ulnfi_unlock(ep->dom);
    return rc;
}

static int ep_control(struct fid *fid, int command, void *arg)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    switch (command) {
    case FI_ENABLE:
        return ulnfi_ep_enable(ep);
    case FI_ALIAS:
        return ulnfi_alias_open(ep, arg);
    case FI_GETOPSFLAG: {
        uint64_t *f = arg;
        if (*f & FI_TRANSMIT)
            *f = ep->tx_op_flags;
        else if (*f & FI_RECV)
            *f = ep->rx_op_flags;
        else
            return -FI_EINVAL;
        return 0;
    }
    case FI_SETOPSFLAG: {
        uint64_t *f = arg;
        if (*f & FI_TRANSMIT)
            ep->tx_op_flags = *f & ~(uint64_t)FI_TRANSMIT;
        else if (*f & FI_RECV)
            ep->rx_op_flags = *f & ~(uint64_t)FI_RECV;
        else
            return -FI_EINVAL;
        return 0;
    }
    default:
        return -FI_ENOSYS;
    }
}

static void drain_matcher(struct ulnfi_match *m)
{
    struct ulnfi_match_recv *r;
    struct ulnfi_match_msg *msg;
    while ((r = ulnfi_match_recv_pop(m)))
        ulnfi_match_recv_free(m, r);
    while ((msg = ulnfi_match_msg_pop(m))) {
        free(msg->payload);
        ulnfi_match_msg_free(m, msg);
    }
    ulnfi_match_fini(m);
}

static int ep_close(struct fid *fid)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    struct ulnfi_domain *d = ep->dom;
    if (ep->is_srx && ep->srx_refs) return -FI_EBUSY; /* its endpoints close first */
    if (ep->aliases) return -FI_EBUSY;                /* and its aliases (alias.c) */
    ulnfi_names_stop(ep); /* first: a client must not learn a name about to go */
    ulnfi_lock(d);
    if (ep->uep) {
        /* ulnet completes what is outstanding with -ECANCELED: let progress
         * hand those to their operations while the endpoint still stands. */
        uln_ep_close(ep->uep);
        ulnfi_progress(d);
        d->eps[ep->index] = NULL;
        for (int i = 0; i < d->nlive; i++)
            if (d->live[i] == ep) d->live[i] = d->live[--d->nlive];
        if (ep->utx_cq) ep->utx_cq->drivers--;
        if (ep->urx_cq && ep->urx_cq != ep->utx_cq) ep->urx_cq->drivers--;
    }
    /* What no ulnet completion will bring back: sends waiting for an ACK, and
     * transfers waiting for send-queue room. */
    for (uint32_t i = 0; i < ULNFI_RNDV_SLOTS; i++) {
        struct ulnfi_op *op = ep->rndv_slot[i];
        if (!op) continue;
        for (uint32_t k = 0; k < op->nmr; k++)
            uln_mr_dereg(op->mrs[k]);
        free(op->buf);
        free(op);
    }
    while (ep->retry_head) {
        struct ulnfi_op *op = ep->retry_head;
        ep->retry_head = op->next;
        free(op->buf);
        free(op);
    }
    ep->retry_tail = NULL;
    ulnfi_trigger_drop(ep); /* never fired: their counters did not get there */
    while (ep->held_head) { /* messages held in the ring: dropped with it */
        struct ulnfi_held *e = ep->held_head;
        ep->held_head = e->next;
        if (e->c.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(e->ucq, &e->c);
        free(e);
    }
    ep->held_tail = NULL;
    drain_matcher(&ep->mtag);
    drain_matcher(&ep->mmsg);
    d->refs--;
    ulnfi_unlock(d);
    if (ep->own_cq) uln_cq_close(ep->own_cq);
    struct ulnfi_cntr *cs[] = {ep->tx_cntr, ep->rx_cntr,  ep->rd_cntr,
                               ep->wr_cntr, ep->rrd_cntr, ep->rwr_cntr};
    for (int i = 0; i < 6; i++)
        if (cs[i]) cs[i]->refs--;
    if (ep->tx_cq) ep->tx_cq->refs--;
    if (ep->rx_cq) ep->rx_cq->refs--;
    if (ep->av) ep->av->refs--;
    if (ep->srx) ep->srx->srx_refs--;
    if (ep->sep) ulnfi_sep_ctx_closed(ep);
    if (ep->own_av) fi_close(&ep->av->av.fid);
    ulnfi_cm_unbind(ep);
    ulnfi_connreq_put(ep->connreq); /* not accepted */
    if (ep->eq) ulnfi_eq_ref(ep->eq, -1);
    while (ep->free_ops) {
        struct ulnfi_op *op = ep->free_ops;
        ep->free_ops = op->next;
        free(op->buf);
        free(op);
    }
    free(ep->tx_seq);
    free(ep->rx_seq);
    fi_freeinfo(ep->info);
    free(ep);
    return 0;
}

static struct fi_ops ep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ep_close,
    .bind = ep_bind,
    .control = ep_control,
    .ops_open = ulnfi_no_ops_open,
};

static ssize_t ep_cancel(fid_t fid, void *context)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    ulnfi_lock(ep->dom);
    struct ulnfi_match *ms[] = {ep->mt, ep->mm};
    for (int i = 0; i < 2; i++) {
        struct ulnfi_match_recv *r = ulnfi_match_cancel(ms[i], context);
        if (!r) continue;
        uint64_t fl = FI_RECV | (i == 0 ? FI_TAGGED : FI_MSG);
        if (ep->rx_cq)
            ulnfi_cq_put_err(ep->rx_cq, r->context, fl, 0, 0, r->tag, 0, FI_ECANCELED, 0,
                             FI_ADDR_NOTAVAIL);
        ulnfi_match_recv_free(ms[i], r);
        ulnfi_unlock(ep->dom);
        return 0;
    }
    ulnfi_unlock(ep->dom);
    return -FI_ENOENT; /* nothing posted with that context: too late, or never */
}

static int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
    if (optname == FI_OPT_CM_DATA_SIZE && ep->type == FI_EP_MSG)
        return ulnfi_cm_getopt(ep, optname, optval, optlen);
    if (optname != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
    if (*optlen < sizeof(size_t)) return -FI_ETOOSMALL;
    *(size_t *)optval = ep->mm->min_multi_recv;
    *optlen = sizeof(size_t);
    return 0;
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
    struct ulnfi_ep *ep = ulnfi_container(fid, struct ulnfi_ep, ep.fid);
    if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
    if (optname != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
    if (optlen != sizeof(size_t)) return -FI_EINVAL;
    ulnfi_match_set_min_multi_recv(ep->mm, *(const size_t *)optval);
    ulnfi_match_set_min_multi_recv(ep->mt, *(const size_t *)optval);
    return 0;
}

static int no_ctx(struct fid_ep *sep, int index, void *attr, struct fid_ep **out, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t tx_left(struct fid_ep *fep)
{
    struct ulnfi_ep *ep = ulnfi_container(fep, struct ulnfi_ep, ep);
    return (ssize_t)ep->dom->uinfo.sq_depth;
}
static ssize_t rx_left(struct fid_ep *fep)
{
    return ULNFI_MAX_RECV;
}

static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = ep_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = (void *)no_ctx,
    .rx_ctx = (void *)no_ctx,
    .rx_size_left = rx_left,
    .tx_size_left = tx_left,
};

static int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
    return ulnfi_ep_getname(ulnfi_container(fid, struct ulnfi_ep, ep.fid), addr, addrlen);
}

int ulnfi_ep_getname(struct ulnfi_ep *ep, void *addr, size_t *addrlen)
{
    /* The endpoint index is ulnet's, known once the endpoint is enabled. */
    if (!ep->enabled) return -FI_EOPBADSTATE;
    if (ulnfi_sa_format(ep->info->addr_format)) {
        if (ep->type == FI_EP_MSG && !ep->pep) return ulnfi_sa_src(ep, addr, addrlen);
        return ulnfi_names_bound(ep, addr, addrlen);
    }
    /* fi_getname(3): too small a room is -FI_ETOOSMALL with the length
     * needed, the full name's; a room of 32 bytes or more that is too small
     * for it takes the short name where there is one, and a room of 64 the
     * sealed short one under ULN_SECURE (names.h). */
    struct ulnfi_addr a;
    size_t room = *addrlen;
    int rc = make_name(ep, &a, sizeof(a.uaddr));
    if (rc) return rc;
    *addrlen = ulnfi_name_len(&a);
    size_t short_room = (room < ULNFI_NAME_SHORT_SEALED ? room : ULNFI_NAME_SHORT_SEALED);
    if (room < *addrlen && room >= ULNFI_NAME_SHORT &&
        make_name(ep, &a, short_room - ULNFI_SHORT_HDR) != 0)
        return -FI_ETOOSMALL;
    size_t n = ulnfi_name_put(&a, addr, room);
    if (!n) return -FI_ETOOSMALL;
    *addrlen = n;
    return 0;
}

static int ep_setname(fid_t fid, void *addr, size_t addrlen)
{
    return ulnfi_ep_setname(ulnfi_container(fid, struct ulnfi_ep, ep.fid), addr, addrlen);
}

/* fi_setname(3), before the endpoint is enabled: the socket address it is
 * to be found at (FI_SOCKADDR_IN*: av_sockaddr.c). ulnet names are made by
 * ulnet, not chosen, so other formats have none to set. */
int ulnfi_ep_setname(struct ulnfi_ep *ep, const void *addr, size_t addrlen)
{
    if (!ulnfi_sa_format(ep->info->addr_format)) return -FI_ENOSYS;
    socklen_t len = addr && addrlen >= sizeof(struct sockaddr_in) ? ulnfi_sa_len(addr) : 0;
    if (!len || len > addrlen) return -FI_EINVAL;
    if (ep->info->addr_format == FI_SOCKADDR_IN && len != sizeof(struct sockaddr_in))
        return -FI_EINVAL;
    if (ep->info->addr_format == FI_SOCKADDR_IN6 && len != sizeof(struct sockaddr_in6))
        return -FI_EINVAL;
    void *a = malloc(len);
    if (!a) return -FI_ENOMEM;
    memcpy(a, addr, len);
    ulnfi_lock(ep->dom);
    int rc = ep->enabled ? -FI_EOPBADSTATE : 0; /* published already */
    if (!rc) {
        free(ep->info->src_addr);
        ep->info->src_addr = a;
        ep->info->src_addrlen = len;
    }
    ulnfi_unlock(ep->dom);
    if (rc) free(a);
    return rc;
}

/* A connected endpoint's socket address: its info's source (the passive
 * endpoint's for one accepted, fi_setname's, or its pep's). */
int ulnfi_sa_src(const struct ulnfi_ep *ep, void *addr, size_t *addrlen)
{
    const struct fi_info *fi = ep->info;
    socklen_t len = fi->src_addr && fi->src_addrlen >= sizeof(struct sockaddr_in)
                        ? ulnfi_sa_len(fi->src_addr)
                        : 0;
    if (!len || len > fi->src_addrlen) return -FI_EADDRNOTAVAIL; /* none given */
    size_t room = *addrlen;
    *addrlen = len;
    if (room < len) return -FI_ETOOSMALL;
    memcpy(addr, fi->src_addr, len);
    return 0;
}
static int ep_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
    return -FI_ENOSYS;
}
static int ep_connect(struct fid_ep *ep, const void *addr, const void *param, size_t len)
{
    return -FI_ENOSYS;
}
static int ep_listen(struct fid_pep *pep)
{
    return -FI_ENOSYS;
}
static int ep_accept(struct fid_ep *ep, const void *param, size_t len)
{
    return -FI_ENOSYS;
}
static int ep_reject(struct fid_pep *pep, fid_t h, const void *param, size_t len)
{
    return -FI_ENOSYS;
}
static int ep_shutdown(struct fid_ep *ep, uint64_t flags)
{
    return -FI_ENOSYS;
}
static int ep_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc,
                   void *context)
{
    return -FI_ENOSYS;
}

static struct fi_ops_cm cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = ep_setname,
    .getname = ep_getname,
    .getpeer = ep_getpeer,
    .connect = ep_connect,
    .listen = ep_listen,
    .accept = ep_accept,
    .reject = ep_reject,
    .shutdown = ep_shutdown,
    .join = ep_join,
};

/* An endpoint opened from a passive endpoint's info handle takes over the
 * passive endpoint's socket address (fi_endpoint(3)), as its source. */
static void take_pep_name(struct ulnfi_ep *ep, struct fid *pep)
{
    struct sockaddr_storage ss;
    size_t len = sizeof(ss);
    if (!ulnfi_sa_format(ep->info->addr_format) || fi_getname(pep, &ss, &len)) return;
    void *a = malloc(len);
    if (!a) return; /* the info's own source stays */
    memcpy(a, &ss, len);
    free(ep->info->src_addr);
    ep->info->src_addr = a;
    ep->info->src_addrlen = len;
}

int ulnfi_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
                  void *context)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    enum fi_ep_type type = info && info->ep_attr ? info->ep_attr->type : FI_EP_RDM;
    if (type == FI_EP_UNSPEC) type = FI_EP_RDM;
    if (!info || (type != FI_EP_RDM && type != FI_EP_MSG && type != FI_EP_DGRAM)) return -FI_EINVAL;
    if (info->domain_attr && info->domain_attr->name && strcmp(info->domain_attr->name, ULNFI_NAME))
        return -FI_EINVAL;
    struct ulnfi_ep *ep = calloc(1, sizeof(*ep));
    if (!ep) return -FI_ENOMEM;
    ep->info = fi_dupinfo(info);
    bool directed = info->caps & FI_DIRECTED_RECV;
    if (!ep->info || ulnfi_match_init(&ep->mtag, ULNFI_MAX_RECV, ULNFI_MAX_UNEXP, directed, 0)) {
        fi_freeinfo(ep->info);
        free(ep);
        return -FI_ENOMEM;
    }
    if (ulnfi_match_init(&ep->mmsg, ULNFI_MAX_RECV, ULNFI_MAX_UNEXP, directed, 0)) {
        ulnfi_match_fini(&ep->mtag);
        fi_freeinfo(ep->info);
        free(ep);
        return -FI_ENOMEM;
    }
    ep->dom = d;
    ep->mt = &ep->mtag;
    ep->mm = &ep->mmsg;
    ep->type = type;
    ep->conn = FI_ADDR_NOTAVAIL;
    if (type == FI_EP_MSG) {
        /* its one peer (and, connecting, the passive endpoint) in an AV of its own */
        struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 2};
        struct fid_av *fav;
        if (ulnfi_av_open(domain, &aa, &fav, NULL)) {
            drain_matcher(&ep->mtag);
            drain_matcher(&ep->mmsg);
            fi_freeinfo(ep->info);
            free(ep);
            return -FI_ENOMEM;
        }
        ep->av = ulnfi_container(fav, struct ulnfi_av, av);
        ep->av->refs++;
        ep->own_av = true;
        /* A removed peer's traffic waits unread until it is inserted again
         * (ulnet.h), and a client learns its server endpoint only from that
         * endpoint's ACCEPT: were the peer removed when an earlier
         * connection to the same endpoint index closed, the next ACCEPT
         * would wait forever. So connections leave their peers inserted
         * (a later insert of the same peer takes the same id). */
        ep->av->keep_peers = true;
        if (info->handle && info->handle->fclass == FI_CLASS_CONNREQ) {
            ep->connreq = info->handle; /* fi_accept answers it */
            ulnfi_connreq_hold(ep->connreq);
            ep->info->handle = NULL;
        } else if (info->handle && info->handle->fclass == FI_CLASS_PEP) {
            take_pep_name(ep, info->handle); /* fi_endpoint(3): its address */
            ep->info->handle = NULL;
        }
    }
    ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
    ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
    ep->inline_max = d->uinfo.inline_max;
    ep->eager_max = d->uinfo.nap_max - sizeof(struct ulnfi_hdr);
    size_t rmin = 0;
    ep->rndv_min = ep->eager_max + 1; /* the measured switch-over: docs/provider.md */
    if (fi_param_get_size_t(&ulnfi_prov, "rndv_min", &rmin) == FI_SUCCESS && rmin &&
        rmin < ep->rndv_min)
        ep->rndv_min = rmin;
    ep->ep.fid.fclass = FI_CLASS_EP;
    ep->ep.fid.context = context;
    ep->ep.fid.ops = &ep_fi_ops;
    ep->ep.ops = &ep_ops;
    ep->ep.cm = type == FI_EP_MSG ? &ulnfi_cm_ops : &cm_ops;
    ep->ep.msg = &ulnfi_msg_ops;
    ep->ep.tagged = &ulnfi_tagged_ops;
    ep->ep.rma = &ulnfi_rma_ops;
    ep->ep.atomic = &ulnfi_atomic_ops;
    ulnfi_lock(d);
    d->refs++;
    ulnfi_unlock(d);
    *out = &ep->ep;
    return 0;
}

/* ---- shared contexts (fi_endpoint(3)) ---------------------------------------------------- */

/* A shared receive context: an endpoint object with matchers and no ulnet
 * endpoint. Endpoints bound to it match what arrives at them against its
 * receives, and report to their own CQs; a receive posted onto a message
 * waiting there is completed by the endpoint it arrived at (msg.c). */
int ulnfi_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **out,
                   void *context)
{
    struct fi_info *info = fi_allocinfo();
    if (!info) return -FI_ENOMEM;
    info->ep_attr->type = FI_EP_RDM;
    info->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    if (attr) {
        info->caps = attr->caps & ~(uint64_t)FI_DIRECTED_RECV; /* sources are per endpoint */
        info->rx_attr->op_flags = attr->op_flags;
    }
    struct fid_ep *fep;
    int rc = ulnfi_ep_open(domain, info, &fep, context);
    fi_freeinfo(info);
    if (rc) return rc;
    struct ulnfi_ep *srx = ulnfi_container(fep, struct ulnfi_ep, ep);
    srx->is_srx = true;
    srx->ep.fid.fclass = FI_CLASS_SRX_CTX;
    *out = fep;
    return 0;
}

static int stx_close(struct fid *fid)
{
    free(fid);
    return 0;
}

static struct fi_ops stx_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = stx_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

/* A shared transmit context. ulnet endpoints are cheap and each endpoint
 * transmits on its own: one bound to the context sends, completes and
 * orders exactly as it would alone, which is all fi_endpoint(3) promises of
 * a shared one (operations of one endpoint in order). So the context is a
 * handle to bind, holding no queue. */
int ulnfi_stx_open(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **out,
                   void *context)
{
    struct fid_stx *stx = calloc(1, sizeof(*stx));
    if (!stx) return -FI_ENOMEM;
    stx->fid.fclass = FI_CLASS_STX_CTX;
    stx->fid.context = context;
    stx->fid.ops = &stx_fi_ops;
    *out = stx;
    return 0;
}
