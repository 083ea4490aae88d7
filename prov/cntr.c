/*
 * cntr.c - counters: success and error counts bumped by progress; reading
 * one drives progress like fi_cq_read does.
 */
#include <stdlib.h>
#include <time.h>

#include "ulnfi.h"

void ulnfi_cntr_inc(struct ulnfi_cntr *c)
{
    if (c) c->value++;
}
void ulnfi_cntr_inc_err(struct ulnfi_cntr *c)
{
    if (c) c->err++;
}

static uint64_t cntr_read(struct fid_cntr *fc)
{
    struct ulnfi_cntr *c = ulnfi_container(fc, struct ulnfi_cntr, cntr);
    ulnfi_lock(c->dom);
    ulnfi_progress(c->dom);
    uint64_t v = c->value;
    ulnfi_unlock(c->dom);
    return v;
}

static uint64_t cntr_readerr(struct fid_cntr *fc)
{
    struct ulnfi_cntr *c = ulnfi_container(fc, struct ulnfi_cntr, cntr);
    ulnfi_lock(c->dom);
    ulnfi_progress(c->dom);
    uint64_t v = c->err;
    ulnfi_unlock(c->dom);
    return v;
}

/* fi_poll(3): a counter is an event when it moved since fi_poll named it or
 * the application set or added to it; so these leave it seen. */
#define SETTER(name, field, op)                                                                    \
    static int name(struct fid_cntr *fc, uint64_t v)                                               \
    {                                                                                              \
        struct ulnfi_cntr *c = ulnfi_container(fc, struct ulnfi_cntr, cntr);                       \
        ulnfi_lock(c->dom);                                                                        \
        c->field op v;                                                                             \
        c->seen_value = c->value;                                                                  \
        c->seen_err = c->err;                                                                      \
        ulnfi_unlock(c->dom);                                                                      \
        return 0;                                                                                  \
    }
SETTER(cntr_add, value, +=)
SETTER(cntr_set, value, =)
SETTER(cntr_adderr, err, +=)
SETTER(cntr_seterr, err, =)

/* Progress until the counter reaches threshold; an error count that moves
 * ends the wait with -FI_EAVAIL (fi_cntr(3)). */
static int cntr_wait(struct fid_cntr *fc, uint64_t threshold, int timeout)
{
    struct ulnfi_cntr *c = ulnfi_container(fc, struct ulnfi_cntr, cntr);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t err0 = c->err;
    for (;;) {
        ulnfi_lock(c->dom);
        ulnfi_progress(c->dom);
        uint64_t v = c->value, e = c->err;
        ulnfi_unlock(c->dom);
        if (v >= threshold) return 0;
        if (e != err0) return -FI_EAVAIL;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (timeout >= 0 && el >= timeout) return -FI_ETIMEDOUT;
    }
}

static struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr),
    .read = cntr_read,
    .readerr = cntr_readerr,
    .add = cntr_add,
    .set = cntr_set,
    .wait = cntr_wait,
    .adderr = cntr_adderr,
    .seterr = cntr_seterr,
};

static int cntr_close(struct fid *fid)
{
    struct ulnfi_cntr *c = ulnfi_container(fid, struct ulnfi_cntr, cntr.fid);
    if (c->refs) return -FI_EBUSY;
    c->dom->refs--;
    free(c);
    return 0;
}

static struct fi_ops cntr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cntr_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

int ulnfi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **out,
                    void *context)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    if (attr && attr->events != FI_CNTR_EVENTS_COMP) return -FI_EINVAL;
    if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
        return -FI_ENOSYS;
    struct ulnfi_cntr *c = calloc(1, sizeof(*c));
    if (!c) return -FI_ENOMEM;
    c->dom = d;
    c->cntr.fid.fclass = FI_CLASS_CNTR;
    c->cntr.fid.context = context;
    c->cntr.fid.ops = &cntr_fi_ops;
    c->cntr.ops = &cntr_ops;
    d->refs++;
    *out = &c->cntr;
    return 0;
}
