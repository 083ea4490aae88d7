/*
 * poll.c - poll sets (fi_poll(3)): CQs and counters of one domain looked at
 * together. fi_poll drives the domain's progress once, then names each CQ
 * that holds an entry (or an error) and each counter whose counts moved
 * since it was last named, set or added to.
 */
#include <stdlib.h>

#include "ulnfi.h"

struct ulnfi_poll {
    struct fid_poll poll;
    struct ulnfi_domain *dom;
    struct fid **fids; /* members, in the order added */
    size_t n, cap;
};

static int *member_refs(struct fid *f)
{
    if (f->fclass == FI_CLASS_CQ) return &ulnfi_container(f, struct ulnfi_cq, cq.fid)->refs;
    return &ulnfi_container(f, struct ulnfi_cntr, cntr.fid)->refs;
}

/* A CQ with something to read; a counter that moved (and is now seen). */
static bool has_event(struct fid *f)
{
    if (f->fclass == FI_CLASS_CQ) {
        struct ulnfi_cq *cq = ulnfi_container(f, struct ulnfi_cq, cq.fid);
        return cq->count || cq->err_head;
    }
    struct ulnfi_cntr *c = ulnfi_container(f, struct ulnfi_cntr, cntr.fid);
    if (c->value == c->seen_value && c->err == c->seen_err) return false;
    c->seen_value = c->value;
    c->seen_err = c->err;
    return true;
}

static int poll_poll(struct fid_poll *fp, void **context, int count)
{
    struct ulnfi_poll *ps = ulnfi_container(fp, struct ulnfi_poll, poll);
    if (count < 0 || (count && !context)) return -FI_EINVAL;
    ulnfi_lock(ps->dom);
    ulnfi_progress(ps->dom);
    int n = 0;
    for (size_t i = 0; i < ps->n && n < count; i++)
        if (has_event(ps->fids[i])) context[n++] = ps->fids[i]->context;
    ulnfi_unlock(ps->dom);
    return n;
}

static int poll_add(struct fid_poll *fp, struct fid *f, uint64_t flags)
{
    struct ulnfi_poll *ps = ulnfi_container(fp, struct ulnfi_poll, poll);
    if (flags || !f || (f->fclass != FI_CLASS_CQ && f->fclass != FI_CLASS_CNTR)) return -FI_EINVAL;
    struct ulnfi_domain *owner = f->fclass == FI_CLASS_CQ
                                     ? ulnfi_container(f, struct ulnfi_cq, cq.fid)->dom
                                     : ulnfi_container(f, struct ulnfi_cntr, cntr.fid)->dom;
    if (owner != ps->dom) return -FI_EINVAL;
    ulnfi_lock(ps->dom);
    int rc = 0;
    for (size_t i = 0; i < ps->n; i++)
        if (ps->fids[i] == f) rc = -FI_EALREADY;
    if (!rc && ps->n == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 4;
        struct fid **a = realloc(ps->fids, cap * sizeof(*a));
        if (a) {
            ps->fids = a;
            ps->cap = cap;
        } else {
            rc = -FI_ENOMEM;
        }
    }
    if (!rc) {
        ps->fids[ps->n++] = f;
        ++*member_refs(f); /* a CQ or counter in a set cannot close */
    }
    ulnfi_unlock(ps->dom);
    return rc;
}

static int poll_del(struct fid_poll *fp, struct fid *f, uint64_t flags)
{
    struct ulnfi_poll *ps = ulnfi_container(fp, struct ulnfi_poll, poll);
    if (flags) return -FI_EINVAL;
    ulnfi_lock(ps->dom);
    int rc = -FI_EINVAL;
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->fids[i] != f) continue;
        --*member_refs(f);
        for (size_t k = i + 1; k < ps->n; k++) /* keep the order added */
            ps->fids[k - 1] = ps->fids[k];
        ps->n--;
        rc = 0;
        break;
    }
    ulnfi_unlock(ps->dom);
    return rc;
}

static struct fi_ops_poll poll_ops = {
    .size = sizeof(struct fi_ops_poll),
    .poll = poll_poll,
    .poll_add = poll_add,
    .poll_del = poll_del,
};

/* Members still in the set leave it with it. */
static int poll_close(struct fid *fid)
{
    struct ulnfi_poll *ps = ulnfi_container(fid, struct ulnfi_poll, poll.fid);
    ulnfi_lock(ps->dom);
    for (size_t i = 0; i < ps->n; i++)
        --*member_refs(ps->fids[i]);
    ps->dom->refs--;
    ulnfi_unlock(ps->dom);
    free(ps->fids);
    free(ps);
    return 0;
}

static struct fi_ops poll_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = poll_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

int ulnfi_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **out)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    if (!out || (attr && attr->flags)) return -FI_EINVAL;
    struct ulnfi_poll *ps = calloc(1, sizeof(*ps));
    if (!ps) return -FI_ENOMEM;
    ps->dom = d;
    ps->poll.fid.fclass = FI_CLASS_POLL;
    ps->poll.fid.ops = &poll_fi_ops;
    ps->poll.ops = &poll_ops;
    d->refs++;
    *out = &ps->poll;
    return 0;
}
