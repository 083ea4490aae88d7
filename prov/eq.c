/*
 * eq.c - event queues. An RDM endpoint of ulnet raises no connection events;
 * the EQ carries what the application writes (fi_eq_write) and is what an
 * AV or endpoint may be bound to.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ulnfi.h"

static ssize_t eq_read(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    struct ulnfi_eq *eq = ulnfi_container(feq, struct ulnfi_eq, eq);
    pthread_mutex_lock(&eq->lock);
    struct ulnfi_eqev *e = eq->head;
    ssize_t rc;
    if (!e)
        rc = -FI_EAGAIN;
    else if (e->is_err)
        rc = -FI_EAVAIL;
    else if (len < e->len)
        rc = -FI_ETOOSMALL;
    else {
        *event = e->event;
        memcpy(buf, e->data, e->len);
        rc = (ssize_t)e->len;
        if (!(flags & FI_PEEK)) {
            eq->head = e->next;
            if (!eq->head) eq->tail = NULL;
            free(e);
        }
    }
    pthread_mutex_unlock(&eq->lock);
    return rc;
}

static ssize_t eq_readerr(struct fid_eq *feq, struct fi_eq_err_entry *buf, uint64_t flags)
{
    struct ulnfi_eq *eq = ulnfi_container(feq, struct ulnfi_eq, eq);
    pthread_mutex_lock(&eq->lock);
    struct ulnfi_eqev *e = eq->head;
    ssize_t rc = -FI_EAGAIN;
    if (e && e->is_err) {
        *buf = e->errent;
        rc = sizeof(*buf);
        if (!(flags & FI_PEEK)) {
            eq->head = e->next;
            if (!eq->head) eq->tail = NULL;
            free(e);
        }
    }
    pthread_mutex_unlock(&eq->lock);
    return rc;
}

static ssize_t eq_write(struct fid_eq *feq, uint32_t event, const void *buf, size_t len,
                        uint64_t flags)
{
    struct ulnfi_eq *eq = ulnfi_container(feq, struct ulnfi_eq, eq);
    struct ulnfi_eqev *e = calloc(1, sizeof(*e) + len);
    if (!e) return -FI_ENOMEM;
    e->event = event;
    e->len = len;
    memcpy(e->data, buf, len);
    pthread_mutex_lock(&eq->lock);
    if (eq->tail)
        eq->tail->next = e;
    else
        eq->head = e;
    eq->tail = e;
    pthread_mutex_unlock(&eq->lock);
    return (ssize_t)len;
}

static ssize_t eq_sread(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, int timeout,
                        uint64_t flags)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t rc = eq_read(feq, event, buf, len, flags);
        if (rc != -FI_EAGAIN) return rc;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (timeout >= 0 && el >= timeout) return -FI_EAGAIN;
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
}

static const char *eq_strerror(struct fid_eq *feq, int prov_errno, const void *err_data, char *buf,
                               size_t len)
{
    return ulnfi_strerror(prov_errno, buf, len);
}

static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

void ulnfi_eq_ref(struct ulnfi_eq *eq, int delta)
{
    pthread_mutex_lock(&eq->lock);
    eq->refs += delta;
    pthread_mutex_unlock(&eq->lock);
}

/* fi_eq(3): an EQ still bound to an object does not close (-FI_EBUSY). */
static int eq_close(struct fid *fid)
{
    struct ulnfi_eq *eq = ulnfi_container(fid, struct ulnfi_eq, eq.fid);
    pthread_mutex_lock(&eq->lock);
    int busy = eq->refs;
    pthread_mutex_unlock(&eq->lock);
    if (busy) return -FI_EBUSY;
    while (eq->head) {
        struct ulnfi_eqev *e = eq->head;
        eq->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&eq->lock);
    free(eq);
    return 0;
}

static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

int ulnfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out,
                  void *context)
{
    if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
        return -FI_ENOSYS;
    struct ulnfi_eq *eq = calloc(1, sizeof(*eq));
    if (!eq) return -FI_ENOMEM;
    pthread_mutex_init(&eq->lock, NULL);
    eq->fab = ulnfi_container(fabric, struct ulnfi_fabric, fab);
    eq->eq.fid.fclass = FI_CLASS_EQ;
    eq->eq.fid.context = context;
    eq->eq.fid.ops = &eq_fi_ops;
    eq->eq.ops = &eq_ops;
    *out = &eq->eq;
    return 0;
}
