/*
 * cq.c - completion queues: a ring of libfabric entries filled by progress,
 * an error list read by fi_cq_readerr, and the uln_cq its endpoints' ulnet
 * completions go to (so fi_cq_sread sleeps in uln_cq_wait).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ulnfi.h"
#include "core/probe.h"

/* The ring never overflows the application: it grows. ulnet itself holds
 * back work once a uln_cq is full, but receives and rendezvous steps add
 * entries the uln_cq did not count. ulnfi_cq_put (ulnfi.h, inline: it runs
 * for every completion) calls this once the ring is full. */
int ulnfi_cq_grow(struct ulnfi_cq *cq)
{
    size_t cap = cq->cap * 2;
    struct ulnfi_cqent *r = malloc(cap * sizeof(*r));
    if (!r) {
        cq->overflow++;
        return -FI_ENOMEM;
    }
    for (size_t i = 0; i < cq->count; i++)
        r[i] = cq->ring[(cq->head + i) % cq->cap];
    free(cq->ring);
    cq->ring = r;
    cq->cap = cap;
    cq->head = 0;
    return 0;
}

void ulnfi_cq_put_err(struct ulnfi_cq *cq, void *context, uint64_t flags, size_t len, uint64_t data,
                      uint64_t tag, size_t olen, int fi_err, int prov_errno, fi_addr_t src)
{
    struct ulnfi_cqerr *e = calloc(1, sizeof(*e));
    if (!e) {
        cq->overflow++;
        return;
    }
    e->e.op_context = context;
    e->e.flags = flags;
    e->e.len = len;
    e->e.data = data;
    e->e.tag = tag;
    e->e.olen = olen;
    e->e.err = fi_err;
    e->e.prov_errno = prov_errno;
    e->src = src;
    if (cq->err_tail)
        cq->err_tail->next = e;
    else
        cq->err_head = e;
    cq->err_tail = e;
}

static void copy_out(const struct ulnfi_cq *cq, void *buf, size_t i, const struct ulnfi_cqent *s)
{
    switch (cq->format) {
    case FI_CQ_FORMAT_CONTEXT: {
        struct fi_cq_entry *d = (struct fi_cq_entry *)buf + i;
        d->op_context = s->e.op_context;
        break;
    }
    case FI_CQ_FORMAT_MSG: {
        struct fi_cq_msg_entry *d = (struct fi_cq_msg_entry *)buf + i;
        d->op_context = s->e.op_context;
        d->flags = s->e.flags;
        d->len = s->e.len;
        break;
    }
    case FI_CQ_FORMAT_DATA: {
        struct fi_cq_data_entry *d = (struct fi_cq_data_entry *)buf + i;
        d->op_context = s->e.op_context;
        d->flags = s->e.flags;
        d->len = s->e.len;
        d->buf = s->e.buf;
        d->data = s->e.data;
        break;
    }
    default:
        ((struct fi_cq_tagged_entry *)buf)[i] = s->e;
        break;
    }
}

static ssize_t take(struct ulnfi_cq *cq, void *buf, size_t count, fi_addr_t *src)
{
    if (cq->err_head) return -FI_EAVAIL;
    size_t n = 0;
    for (; n < count && cq->count; n++) {
        const struct ulnfi_cqent *e = &cq->ring[cq->head];
        copy_out(cq, buf, n, e);
        if (src) src[n] = e->src;
        cq->head = cq->head + 1 == cq->cap ? 0 : cq->head + 1;
        cq->count--;
    }
    return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t cq_readfrom(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src)
{
    struct ulnfi_cq *cq = ulnfi_container(fcq, struct ulnfi_cq, cq);
    ulnfi_lock(cq->dom);
    if (!cq->count) ulnfi_progress(cq->dom);
    ssize_t n = take(cq, buf, count, src);
    ulnfi_unlock(cq->dom);
    if (n > 0) ULN_PROBE(ULN_P_FI_CQ);
    return n;
}

static ssize_t cq_read(struct fid_cq *fcq, void *buf, size_t count)
{
    return cq_readfrom(fcq, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *fcq, struct fi_cq_err_entry *buf, uint64_t flags)
{
    struct ulnfi_cq *cq = ulnfi_container(fcq, struct ulnfi_cq, cq);
    ulnfi_lock(cq->dom);
    struct ulnfi_cqerr *e = cq->err_head;
    if (!e) {
        ulnfi_unlock(cq->dom);
        return -FI_EAGAIN;
    }
    cq->err_head = e->next;
    if (!cq->err_head) cq->err_tail = NULL;
    ulnfi_unlock(cq->dom);
    /* fi_cq(3), API >= 1.5: err_data may be the caller's buffer; ulnet has
     * no error data beyond prov_errno, so it is left alone and none is said
     * to be there. A caller of an older API has no err_data_size: its entry
     * ends before it, and nothing past that is written. */
    void *err_data = buf->err_data;
    if (FI_VERSION_GE(cq->dom->fab->fab.api_version, FI_VERSION(1, 5))) {
        *buf = e->e;
        buf->err_data = err_data;
        buf->err_data_size = 0;
    } else {
        memcpy(buf, &e->e, offsetof(struct fi_cq_err_entry, err_data_size));
        buf->err_data = NULL;
    }
    free(e);
    return 1;
}

/* Sleep in uln_cq_wait between progress passes. With a single ulnet CQ in the
 * domain the wait covers everything; with several, the others are looked at
 * every millisecond. fi_cq(3): "It is invalid for applications to call these
 * functions if the CQ has been configured with a wait object of FI_WAIT_NONE"
 * - refused (-FI_EINVAL) at once, never a sleep nothing is meant to end. */
static ssize_t cq_sreadfrom(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src,
                            const void *cond, int timeout)
{
    struct ulnfi_cq *cq = ulnfi_container(fcq, struct ulnfi_cq, cq);
    if (cq->wait_obj == FI_WAIT_NONE) return -FI_EINVAL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n = cq_readfrom(fcq, buf, count, src);
        if (n != -FI_EAGAIN) return n;
        int left = -1;
        if (timeout >= 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
            if (el >= timeout) return -FI_EAGAIN;
            left = timeout - (int)el;
        }
        ulnfi_lock(cq->dom);
        /* Under a lock other threads wait for, never sleep long in it. */
        bool alone = cq->dom->ncqs == 1 && !cq->dom->locking;
        int slice = alone ? left : (left < 0 || left > 1 ? 1 : left);
        int rc = uln_cq_wait(cq->ucq, slice);
        ulnfi_unlock(cq->dom);
        if (rc == -EINTR) return -FI_EAGAIN; /* fi_cq_signal */
        if (rc && rc != -ETIMEDOUT) return ulnfi_errno(rc);
    }
}

static ssize_t cq_sread(struct fid_cq *fcq, void *buf, size_t count, const void *cond, int timeout)
{
    return cq_sreadfrom(fcq, buf, count, NULL, cond, timeout);
}

/* fi_cq(3): unblock a thread in fi_cq_sread (the next one if none sleeps
 * yet); only for a CQ with a wait object. It takes no lock and touches only
 * ulnet's wake flag and doorbell, so it may come from another thread under
 * FI_THREAD_DOMAIN too: the sleeper's uln_cq_wait returns -EINTR at once,
 * and a sleeper on the FI_WAIT_FD descriptor finds it readable. */
static int cq_signal(struct fid_cq *fcq)
{
    struct ulnfi_cq *cq = ulnfi_container(fcq, struct ulnfi_cq, cq);
    if (cq->wait_obj == FI_WAIT_NONE) return -FI_EINVAL;
    return ulnfi_errno(uln_cq_wake(cq->ucq));
}

static const char *cq_strerror(struct fid_cq *fcq, int prov_errno, const void *err_data, char *buf,
                               size_t len)
{
    return ulnfi_strerror(prov_errno, buf, len);
}

static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

static int cq_close(struct fid *fid)
{
    struct ulnfi_cq *cq = ulnfi_container(fid, struct ulnfi_cq, cq.fid);
    struct ulnfi_domain *d = cq->dom;
    if (cq->refs) return -FI_EBUSY;
    ulnfi_lock(d);
    for (int i = 0; i < d->ncqs; i++)
        if (d->cqs[i] == cq) d->cqs[i] = d->cqs[--d->ncqs];
    d->refs--;
    ulnfi_unlock(d);
    if (cq->wait_set) ulnfi_wait_del(cq->wait_set, cq);
    uln_cq_close(cq->ucq);
    while (cq->err_head) {
        struct ulnfi_cqerr *e = cq->err_head;
        cq->err_head = e->next;
        free(e);
    }
    free(cq->ring);
    free(cq);
    return 0;
}

/* FI_GETWAIT on an FI_WAIT_FD CQ: ulnet's descriptor for the CQ (uln_cq_fd),
 * to poll after fi_trywait says so. */
static int cq_control(struct fid *fid, int command, void *arg)
{
    struct ulnfi_cq *cq = ulnfi_container(fid, struct ulnfi_cq, cq.fid);
    if (command != FI_GETWAIT) return -FI_ENOSYS;
    if (cq->wait_obj != FI_WAIT_FD) return -FI_ENODATA;
    if (!arg) return -FI_EINVAL;
    *(int *)arg = cq->fd;
    return 0;
}

/* fi_trywait(3) for one CQ: -FI_EAGAIN while it has completions, or ulnet
 * has work for it (read it instead of sleeping); else the CQ is armed and
 * its descriptor will become readable. */
int ulnfi_cq_trywait(struct fid *fid)
{
    if (fid->fclass != FI_CLASS_CQ) return -FI_EINVAL;
    struct ulnfi_cq *cq = ulnfi_container(fid, struct ulnfi_cq, cq.fid);
    if (cq->wait_obj != FI_WAIT_FD) return -FI_EINVAL;
    ulnfi_lock(cq->dom);
    int ms, rc = cq->count || cq->err_head ? -EAGAIN : uln_cq_arm(cq->ucq, &ms);
    ulnfi_unlock(cq->dom);
    return rc == -EAGAIN ? -FI_EAGAIN : rc ? ulnfi_errno(rc) : 0;
}

static struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cq_close,
    .bind = ulnfi_no_bind,
    .control = cq_control,
    .ops_open = ulnfi_no_ops_open,
};

int ulnfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out,
                  void *context)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    if (!attr) return -FI_EINVAL;
    if (attr->format > FI_CQ_FORMAT_TAGGED) return -FI_EINVAL;
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
        attr->wait_obj != FI_WAIT_FD && attr->wait_obj != FI_WAIT_SET)
        return -FI_ENOSYS; /* FI_WAIT_MUTEX_COND, FI_WAIT_YIELD: docs/provider.md */
    if (attr->wait_obj == FI_WAIT_SET && !attr->wait_set) return -FI_EINVAL;
    if (attr->flags & FI_AFFINITY) return -FI_ENOSYS;
    if (attr->wait_cond != FI_CQ_COND_NONE) return -FI_ENOSYS;
    if (d->ncqs == (int)(sizeof(d->cqs) / sizeof(d->cqs[0]))) return -FI_ENOSPC;
    struct ulnfi_cq *cq = calloc(1, sizeof(*cq));
    if (!cq) return -FI_ENOMEM;
    cq->cap = attr->size ? attr->size : ULNFI_CQ_DEFAULT;
    cq->ring = malloc(cq->cap * sizeof(*cq->ring));
    unsigned ulen = cq->cap > (1u << 24) ? (1u << 24) : (unsigned)cq->cap;
    int rc = cq->ring ? uln_cq_open(d->ctx, ulen < 64 ? 64 : ulen, &cq->ucq) : -ENOMEM;
    if (rc) {
        free(cq->ring);
        free(cq);
        return ulnfi_errno(rc);
    }
    cq->dom = d;
    cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
    cq->wait_obj = attr->wait_obj;
    cq->fd = -1;
    if (cq->wait_obj == FI_WAIT_FD && (cq->fd = uln_cq_fd(cq->ucq)) < 0) {
        rc = cq->fd;
        uln_cq_close(cq->ucq);
        free(cq->ring);
        free(cq);
        return ulnfi_errno(rc);
    }
    cq->cq.fid.fclass = FI_CLASS_CQ;
    cq->cq.fid.context = context;
    cq->cq.fid.ops = &cq_fi_ops;
    cq->cq.ops = &cq_ops;
    if (cq->wait_obj ==
        FI_WAIT_SET) { /* before the domain lock: fi_wait takes it inside the set's */
        rc = ulnfi_wait_add(attr->wait_set, cq);
        if (rc) {
            uln_cq_close(cq->ucq);
            free(cq->ring);
            free(cq);
            return rc;
        }
        cq->wait_set = attr->wait_set;
    }
    ulnfi_lock(d);
    d->cqs[d->ncqs++] = cq;
    d->refs++;
    ulnfi_unlock(d);
    *out = &cq->cq;
    return 0;
}
