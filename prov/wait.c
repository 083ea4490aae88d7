/*
 * wait.c - wait sets (fi_wait_open, FI_WAIT_SET): CQs opened with one are
 * waited on together by fi_wait, which returns once any of them holds a
 * completion or an error.
 *
 * fi_wait drives progress itself (FI_PROGRESS_MANUAL: nothing else would)
 * and sleeps between passes; it never blocks in the kernel on one CQ while
 * another's peer is what moves.
 */
#include <stdlib.h>
#include <time.h>

#include "ulnfi.h"

#define ULNFI_WAIT_MAX    64
#define ULNFI_WAIT_NAP_NS 20000 /* between passes: short against a round trip's tens of us */

struct ulnfi_wait {
    struct fid_wait wait;
    pthread_mutex_t lock;
    struct ulnfi_cq *cqs[ULNFI_WAIT_MAX];
    int ncqs;
};

int ulnfi_wait_add(struct fid_wait *w, struct ulnfi_cq *cq)
{
    struct ulnfi_wait *ws = ulnfi_container(w, struct ulnfi_wait, wait);
    pthread_mutex_lock(&ws->lock);
    int rc = ws->ncqs < ULNFI_WAIT_MAX ? 0 : -FI_ENOSPC;
    if (!rc) ws->cqs[ws->ncqs++] = cq;
    pthread_mutex_unlock(&ws->lock);
    return rc;
}

void ulnfi_wait_del(struct fid_wait *w, struct ulnfi_cq *cq)
{
    struct ulnfi_wait *ws = ulnfi_container(w, struct ulnfi_wait, wait);
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < ws->ncqs; i++)
        if (ws->cqs[i] == cq) ws->cqs[i] = ws->cqs[--ws->ncqs];
    pthread_mutex_unlock(&ws->lock);
}

/* One progress pass of each member's domain: does any hold something? */
static bool ready(struct ulnfi_wait *ws)
{
    bool any = false;
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < ws->ncqs && !any; i++) {
        struct ulnfi_cq *cq = ws->cqs[i];
        ulnfi_lock(cq->dom);
        ulnfi_progress(cq->dom);
        any = cq->count || cq->err_head;
        ulnfi_unlock(cq->dom);
    }
    pthread_mutex_unlock(&ws->lock);
    return any;
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* fi_wait(3): 0 once a member has something, -FI_ETIMEDOUT after timeout
 * ms (negative: none). */
static int wait_wait(struct fid_wait *w, int timeout)
{
    struct ulnfi_wait *ws = ulnfi_container(w, struct ulnfi_wait, wait);
    int64_t until = timeout >= 0 ? now_ms() + timeout : 0;
    for (;;) {
        if (ready(ws)) return 0;
        if (timeout >= 0 && now_ms() >= until) return -FI_ETIMEDOUT;
        struct timespec nap = {0, ULNFI_WAIT_NAP_NS};
        nanosleep(&nap, NULL);
    }
}

static int wait_close(struct fid *fid)
{
    struct ulnfi_wait *ws = ulnfi_container(fid, struct ulnfi_wait, wait.fid);
    pthread_mutex_lock(&ws->lock);
    int busy = ws->ncqs;
    pthread_mutex_unlock(&ws->lock);
    if (busy) return -FI_EBUSY; /* fi_wait(3): members close first */
    pthread_mutex_destroy(&ws->lock);
    free(ws);
    return 0;
}

static struct fi_ops wait_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = wait_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

static struct fi_ops_wait wait_ops = {
    .size = sizeof(struct fi_ops_wait),
    .wait = wait_wait,
};

int ulnfi_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **out)
{
    if (!attr || attr->flags) return -FI_EINVAL;
    if (attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS; /* no descriptor to give */
    struct ulnfi_wait *ws = calloc(1, sizeof(*ws));
    if (!ws) return -FI_ENOMEM;
    pthread_mutex_init(&ws->lock, NULL);
    ws->wait.fid.fclass = FI_CLASS_WAIT;
    ws->wait.fid.ops = &wait_fi_ops;
    ws->wait.ops = &wait_ops;
    *out = &ws->wait;
    return 0;
}
