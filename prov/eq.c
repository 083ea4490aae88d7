/*
 * eq.c - event queues: the connection events of FI_EP_MSG endpoints and
 * passive endpoints bound to them (cm.c, moved in as the EQ is read), and
 * what the application writes (fi_eq_write). An RDM endpoint raises none.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "ulnfi.h"

static void ev_free(struct ulnfi_eqev *e)
{
    if (e->event == FI_CONNREQ && !e->is_err && e->len >= sizeof(struct fi_eq_cm_entry)) {
        /* never read: the request's info (and handle) go with it */
        struct fi_eq_cm_entry ent;
        memcpy(&ent, e->data, sizeof(ent));
        if (ent.info) ulnfi_connreq_put(ent.info->handle);
        fi_freeinfo(ent.info);
    }
    free(e);
}

static void ev_append(struct ulnfi_eq *eq, struct ulnfi_eqev *e)
{
    pthread_mutex_lock(&eq->lock);
    if (eq->tail)
        eq->tail->next = e;
    else
        eq->head = e;
    eq->tail = e;
    if (eq->efd >= 0) { /* FI_WAIT_FD: readable while events wait */
        uint64_t one = 1;
        if (write(eq->efd, &one, sizeof(one)) < 0) { /* a full counter is readable anyway */
        }
    }
    pthread_mutex_unlock(&eq->lock);
}

int ulnfi_eq_post(struct ulnfi_eq *eq, uint32_t event, const void *entry, size_t len)
{
    struct ulnfi_eqev *e = calloc(1, sizeof(*e) + len);
    if (!e) return -FI_ENOMEM;
    e->event = event;
    e->len = len;
    memcpy(e->data, entry, len);
    ev_append(eq, e);
    return 0;
}

/* fi_eq(3): an error event, its connection data (a rejection's) as err_data. */
int ulnfi_eq_post_err(struct ulnfi_eq *eq, fid_t fid, int err, const void *data, size_t len)
{
    struct ulnfi_eqev *e = calloc(1, sizeof(*e) + len);
    if (!e) return -FI_ENOMEM;
    e->is_err = true;
    e->errent.fid = fid;
    e->errent.err = err;
    e->len = len;
    memcpy(e->data, data, len);
    ev_append(eq, e);
    return 0;
}

static ssize_t eq_read(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    struct ulnfi_eq *eq = ulnfi_container(feq, struct ulnfi_eq, eq);
    pthread_mutex_lock(&eq->lock);
    ulnfi_cm_poll(eq);
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
            free(e); /* a CONNREQ's info is the reader's now */
        }
    }
    pthread_mutex_unlock(&eq->lock);
    return rc;
}

static ssize_t eq_readerr(struct fid_eq *feq, struct fi_eq_err_entry *buf, uint64_t flags)
{
    struct ulnfi_eq *eq = ulnfi_container(feq, struct ulnfi_eq, eq);
    pthread_mutex_lock(&eq->lock);
    ulnfi_cm_poll(eq);
    struct ulnfi_eqev *e = eq->head;
    ssize_t rc = -FI_EAGAIN;
    if (e && e->is_err) {
        /* fi_eq(3) since 1.5: err_data into the caller's buffer when it gives
         * one (err_data_size), else ours, good until the next readerr */
        void *ud = buf->err_data;
        size_t usz = buf->err_data_size;
        *buf = e->errent;
        if (usz) {
            size_t n = e->len < usz ? e->len : usz;
            if (n) memcpy(ud, e->data, n);
            buf->err_data = ud;
            buf->err_data_size = n;
        } else if (e->len) {
            free(eq->err_data);
            eq->err_data = malloc(e->len);
            if (eq->err_data) memcpy(eq->err_data, e->data, e->len);
            buf->err_data = eq->err_data;
            buf->err_data_size = eq->err_data ? e->len : 0;
        } else {
            buf->err_data = NULL;
            buf->err_data_size = 0;
        }
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
    int rc = ulnfi_eq_post(eq, event, buf, len);
    return rc ? rc : (ssize_t)len;
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
        ev_free(e);
    }
    free(eq->err_data);
    if (eq->fd >= 0) close(eq->fd);
    if (eq->efd >= 0) close(eq->efd);
    pthread_mutex_destroy(&eq->lock);
    free(eq);
    return 0;
}

/* FI_WAIT_FD: the descriptor is an epoll set of an eventfd, written as events
 * are queued, and the ulnet CQ descriptors of the bound endpoints (added by
 * fi_trywait, which arms them): a connection message arriving at one makes
 * it readable, though its event is made only when the EQ is read. */
static int eq_control(struct fid *fid, int command, void *arg)
{
    struct ulnfi_eq *eq = ulnfi_container(fid, struct ulnfi_eq, eq.fid);
    if (command != FI_GETWAIT) return -FI_ENOSYS;
    if (eq->wait_obj != FI_WAIT_FD) return -FI_ENODATA;
    if (!arg) return -FI_EINVAL;
    *(int *)arg = eq->fd;
    return 0;
}

static void watch(struct ulnfi_eq *eq, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(eq->fd, EPOLL_CTL_ADD, fd, &ev) && errno != EEXIST)
        FI_WARN(&ulnfi_prov, FI_LOG_EQ, "epoll_ctl: %s\n", strerror(errno));
}

/* fi_trywait(3) on an EQ: -FI_EAGAIN while events wait, else 0 once every
 * bound endpoint's ulnet CQ is armed and in the set. */
int ulnfi_eq_trywait(struct fid *fid)
{
    struct ulnfi_eq *eq = ulnfi_container(fid, struct ulnfi_eq, eq.fid);
    if (eq->wait_obj != FI_WAIT_FD) return -FI_EINVAL;
    pthread_mutex_lock(&eq->lock);
    ulnfi_cm_poll(eq);
    int rc = eq->head ? -FI_EAGAIN : 0;
    if (!rc) { /* empty: drain the eventfd, then arm */
        uint64_t n;
        if (read(eq->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) rc = -errno;
    }
    for (int i = 0; !rc && i < eq->ncm; i++) {
        struct ulnfi_ep *ep = eq->cm_eps[i];
        ulnfi_lock(ep->dom);
        struct uln_cq *ucq = !ep->enabled ? NULL : ep->urx_cq ? ep->urx_cq->ucq : ep->own_cq;
        int ms;
        if (ucq) {
            int fd = uln_cq_fd(ucq);
            if (fd >= 0) watch(eq, fd);
            if (uln_cq_arm(ucq, &ms) == -EAGAIN) rc = -FI_EAGAIN;
        }
        ulnfi_unlock(ep->dom);
    }
    pthread_mutex_unlock(&eq->lock);
    return rc;
}

static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = ulnfi_no_bind,
    .control = eq_control,
    .ops_open = ulnfi_no_ops_open,
};

int ulnfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out,
                  void *context)
{
    if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
        attr->wait_obj != FI_WAIT_FD)
        return -FI_ENOSYS;
    struct ulnfi_eq *eq = calloc(1, sizeof(*eq));
    if (!eq) return -FI_ENOMEM;
    eq->wait_obj = attr ? attr->wait_obj : FI_WAIT_NONE;
    eq->fd = eq->efd = -1;
    if (eq->wait_obj == FI_WAIT_FD) {
        eq->fd = epoll_create1(EPOLL_CLOEXEC);
        eq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (eq->fd < 0 || eq->efd < 0) {
            if (eq->fd >= 0) close(eq->fd);
            if (eq->efd >= 0) close(eq->efd);
            free(eq);
            return -FI_EMFILE;
        }
        watch(eq, eq->efd);
    }
    /* recursive: a read progresses the bound endpoints (cm.c), which post here */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&eq->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    eq->fab = ulnfi_container(fabric, struct ulnfi_fabric, fab);
    eq->eq.fid.fclass = FI_CLASS_EQ;
    eq->eq.fid.context = context;
    eq->eq.fid.ops = &eq_fi_ops;
    eq->eq.ops = &eq_ops;
    *out = &eq->eq;
    return 0;
}
