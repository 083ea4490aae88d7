/*
 * cq.c - completion queues.
 *
 * A CQ is a private ring of completion entries plus the list of endpoints
 * whose progress it drives: polling a CQ is what makes the "NIC" (engine.c)
 * run. The engine never writes into a full CQ; work that would complete waits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/probe.h"

/* End the sleep uln_cq_arm announced (any call on the CQ does). */
static void cq_disarm(struct uln_cq *cq)
{
    if (!cq->armed) return;
    cq->armed = false;
    uln_doorbell_sleep_end(cq->ctx);
    uint64_t ticks;
    if (read(cq->tfd, &ticks, sizeof ticks) < 0) { /* EAGAIN: the timer had not fired */
    }
}

ULN_EXPORT int uln_cq_open(struct uln_ctx *ctx, unsigned entries, struct uln_cq **out)
{
    if (!ctx || !out || entries == 0 || entries > (1u << 24)) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM;
    struct uln_cq *cq = calloc(1, sizeof *cq);
    if (!cq) return -ENOMEM;
    cq->ring = calloc(entries, sizeof *cq->ring);
    if (!cq->ring) {
        free(cq);
        return -ENOMEM;
    }
    cq->ctx = ctx;
    cq->entries = entries;
    cq->efd = cq->tfd = -1;
    pthread_mutex_lock(&ctx->lock);
    cq->next = ctx->cqs;
    ctx->cqs = cq;
    pthread_mutex_unlock(&ctx->lock);
    *out = cq;
    return 0;
}

/* Closing frees the entries but keeps the small struct, marked closed, in the
 * context's list until uln_close: a poll, wait, release or close that comes
 * late then gets -EBADF instead of touching freed memory. */
ULN_EXPORT int uln_cq_close(struct uln_cq *cq)
{
    if (!cq) return -EINVAL;
    struct uln_ctx *ctx = cq->ctx;
    if (uln_ctx_forked(ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    if (cq->n_eps) return -EBUSY; /* close its endpoints first */
    cq_disarm(cq);
    pthread_mutex_lock(&ctx->lock);
    if (cq->efd >= 0) close(cq->efd);
    if (cq->tfd >= 0) close(cq->tfd);
    cq->efd = cq->tfd = -1;
    cq->closed = true;
    free(cq->ring);
    cq->ring = NULL;
    cq->head = cq->tail = 0;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

void uln_cq_close_all(struct uln_ctx *ctx)
{
    while (ctx->cqs) {
        struct uln_cq *cq = ctx->cqs;
        ctx->cqs = cq->next;
        cq_disarm(cq);
        if (cq->efd >= 0) close(cq->efd);
        if (cq->tfd >= 0) close(cq->tfd);
        free(cq->ring);
        free(cq);
    }
}

void uln_cq_unbind(struct uln_cq *cq, struct uln_ep *ep)
{
    for (unsigned i = 0; i < cq->n_eps; i++)
        if (cq->eps[i] == ep) {
            cq->eps[i] = cq->eps[--cq->n_eps];
            return;
        }
}

/* Polls in a row that may take waiting entries without a progress pass:
 * when they take every entry waiting, and when entries are left over. */
#define CQ_READY_POLLS   16u
#define CQ_BACKLOG_POLLS 2u

static void cq_progress(struct uln_cq *cq)
{
    /* Round robin over the endpoints, starting one further each time, so that
     * one busy endpoint cannot keep the others waiting. */
    unsigned n = cq->n_eps, i = cq->rr < n ? cq->rr : 0;
    for (unsigned k = 0; k < n; k++, i = i + 1 == n ? 0 : i + 1)
        uln_engine_progress(cq->eps[i]);
    cq->rr = i + 1;
}

ULN_EXPORT int uln_cq_poll(struct uln_cq *cq, struct uln_cqe *out, int max)
{
    if (ULN_UNLIKELY(!cq || (!out && max > 0) || max < 0)) return -EINVAL;
    int rc = uln_api_enter(cq->ctx);
    if (ULN_UNLIKELY(rc)) return rc;
    if (ULN_UNLIKELY(cq->closed)) {
        uln_api_unlock(cq->ctx);
        return -EBADF;
    }
    if (ULN_UNLIKELY(cq->armed)) cq_disarm(cq);
    /* Entries waiting (the fast path completes posts straight into the CQ):
     * hand them over without a progress pass, the one cost a post-then-poll
     * loop would otherwise pay each time - but not always, or a rank that
     * keeps posting would never take its peers' messages or serve their
     * requests. A poll that takes every entry waiting progresses every
     * CQ_READY_POLLS-th time; one that leaves entries (the rank posts faster
     * than it polls) every CQ_BACKLOG_POLLS-th time. A pass ends a burst of
     * posts over udp (ulnet.h, "When packets leave"): with a pass per such
     * poll, a loop keeping 64 NAPs outstanding and taking 16 completions a
     * poll sent 16 NAPs a datagram where up to 36 fit, at half the rate it
     * had with 16 outstanding (docs/xdp.md). Every 4th made it 1.7-2.5x;
     * every 2nd 1.6-1.7x, but keeps a receiver working through a backlog
     * answering often enough to repair loss (incast under 5 % loss 76-89 %
     * of lossless, against 47-60 % with every 4th). An empty CQ, and a poll that takes
     * nothing (max 0: a call for progress alone), always progress. */
    uint64_t waiting = cq->tail - cq->head;
    bool pass = waiting == 0 || max == 0 ||
                (waiting > (uint64_t)max ? ++cq->backlog_polls % CQ_BACKLOG_POLLS == 0
                                         : ++cq->ready_polls % CQ_READY_POLLS == 0);
    if (pass) cq_progress(cq);
    int n = 0;
    while (n < max && cq->head != cq->tail)
        out[n++] = cq->ring[cq->head++ % cq->entries];
    uln_api_unlock(cq->ctx);
    if (n) ULN_PROBE(ULN_P_POLL);
    return n;
}

int uln_cq_peek(struct uln_cq *cq, uint64_t i, struct uln_cqe *out)
{
    int rc = uln_api_enter(cq->ctx);
    if (rc) return rc;
    if (cq->closed)
        rc = -EBADF;
    else if (cq->tail - cq->head > i) {
        *out = cq->ring[(cq->head + i) % cq->entries];
        rc = 1;
    }
    uln_api_unlock(cq->ctx);
    return rc;
}

/* One progress pass; true if the CQ has entries. */
static bool cq_step(struct uln_cq *cq)
{
    uln_api_lock(cq->ctx);
    bool has = cq->tail != cq->head;
    if (!has) {
        cq_progress(cq);
        has = cq->tail != cq->head;
    }
    uln_api_unlock(cq->ctx);
    return has;
}

static bool cq_busy(struct uln_cq *cq)
{
    for (unsigned i = 0; i < cq->n_eps; i++)
        if (uln_ep_busy(cq->eps[i])) return true;
    return false;
}

ULN_EXPORT int uln_cq_wait(struct uln_cq *cq, int timeout_ms)
{
    if (!cq) return -EINVAL;
    struct uln_ctx *ctx = cq->ctx;
    if (uln_ctx_forked(ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    uint64_t start = uln_now_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;
    uint64_t spin_until = start + (uint64_t)ctx->p.spin_us * 1000u;
    cq_disarm(cq);

    for (;;) {
        /* Spin first: waking a sleeping process costs microseconds. */
        for (unsigned i = 0;; i++) {
            if (cq_step(cq)) return 0;
            if ((i & 63) == 0) {
                if (atomic_exchange(&cq->woken, 0)) return -EINTR;
                uint64_t t = uln_now_ns();
                if (t >= deadline) return -ETIMEDOUT;
                if (t >= spin_until) break;
            }
        }
        /* Announce the sleep, then look once more (see uln_doorbell_ring);
         * uln_cq_wake pairs with the announcement the same way. */
        uln_doorbell_sleep_begin(ctx);
        if (cq_step(cq)) {
            uln_doorbell_sleep_end(ctx);
            return 0;
        }
        if (atomic_exchange(&cq->woken, 0)) {
            uln_doorbell_sleep_end(ctx);
            return -EINTR;
        }
        uint64_t t = uln_now_ns();
        if (t >= deadline) {
            uln_doorbell_sleep_end(ctx);
            return -ETIMEDOUT;
        }
        uint64_t left_ms = deadline == UINT64_MAX ? 1000 : (deadline - t + 999999) / 1000000;
        /* A producer blocked on a peer's full ring is woken by that peer when
         * it gives space back, but the two sides do not fence against each
         * other there (ring.h): sleep in short slices while blocked, so a
         * missed wake-up costs at most a millisecond, never a hang. Idle:
         * long slices, still bounded so dead peers are noticed. */
        uln_api_lock(ctx);
        int slice = cq_busy(cq) ? 1 : 100;
        if (left_ms < (uint64_t)slice) slice = (int)left_ms;
        /* Endpoints of packet transports also wake on their sockets, and sleep
         * no longer than their earliest timer (resend, delayed ACK, dead peer). */
        int fds[64], n_fds = 0;
        for (unsigned i = 0; i < cq->n_eps; i++)
            n_fds += uln_ep_wait_fds(cq->eps[i], &fds[n_fds], 64 - n_fds, &slice);
        uln_api_unlock(ctx);
        uln_doorbell_sleep(ctx, fds, n_fds, slice);
        uln_doorbell_sleep_end(ctx);
        spin_until = uln_now_ns() + (uint64_t)ctx->p.spin_us * 1000u / 4;
    }
}

/* Any thread: set the flag, then ring our own doorbell if anybody sleeps
 * (a Dekker pair with uln_doorbell_sleep_begin and the look that follows
 * it in uln_cq_wait: either the sleeper sees the flag, or we see it
 * counted and ring). A ring meant for this CQ may wake another CQ's sleeper
 * too, which looks and sleeps again, as after any doorbell. */
ULN_EXPORT int uln_cq_wake(struct uln_cq *cq)
{
    if (!cq) return -EINVAL;
    if (uln_ctx_forked(cq->ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    atomic_store(&cq->woken, 1);
    uln_doorbell_wake_self(cq->ctx);
    return 0;
}

ULN_EXPORT int uln_cqe_release(struct uln_cq *cq, const struct uln_cqe *cqe)
{
    if (!cq || !cqe) return -EINVAL;
    if (uln_ctx_forked(cq->ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    if (!(cqe->flags & ULN_CQE_MUST_RELEASE)) return 0;
    if (cqe->peer < 0 || cqe->peer >= cq->ctx->size) return -EINVAL;
    /* The entry came from this CQ, so its endpoint is bound to it. Look there,
     * not in the context's table: the CQ's list belongs to the thread driving
     * it, while other threads may be opening endpoints in the context. */
    struct uln_ep *ep = NULL;
    for (unsigned i = 0; i < cq->n_eps; i++)
        if (cq->eps[i]->index == cqe->ep) ep = cq->eps[i];
    if (!ep) return -EINVAL;
    /* An entry of an earlier life of the index: its space was given back
     * when that life closed. */
    if ((cqe->priv_ & (ULN_CELL - 1)) != (ep->life & (ULN_CELL - 1))) return -EINVAL;
    struct uln_msg *m = (struct uln_msg *)(uintptr_t)(cqe->priv_ & ~(uint64_t)(ULN_CELL - 1));
    struct uln_ring_cons *c = &ep->peers[cqe->peer].in[0];
    /* The entry must point into that ring, at a message we handed out. */
    if ((uint8_t *)m < c->cells || (uint8_t *)m >= c->cells + c->mask + 1 || m->type != ULN_MSG_NAP)
        return -EINVAL;
    uln_api_lock(cq->ctx);
    uln_engine_release(ep, cqe->peer, c, m);
    uln_api_unlock(cq->ctx);
    return 0;
}

/* ---- sleeping on a descriptor (uln_cq_fd, uln_cq_arm) ------------------------- */

/* The doorbell and the sockets of the CQ's endpoints, in the CQ's epoll set.
 * The set is brought up to date at each arm: endpoints come and go, and a
 * closed socket leaves an epoll set by itself. */
static int efd_sync(struct uln_cq *cq, int *timeout_ms)
{
    int fds[66], n = 0;
    fds[n++] = cq->ctx->bell_fd;
    fds[n++] = cq->tfd;
    for (unsigned i = 0; i < cq->n_eps; i++)
        n += uln_ep_wait_fds(cq->eps[i], &fds[n], 66 - n, timeout_ms);
    for (int i = 0; i < n; i++) {
        bool known = false;
        for (int k = 0; k < cq->n_efd_fds && !known; k++)
            known = cq->efd_fds[k] == fds[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (!known && epoll_ctl(cq->efd, EPOLL_CTL_ADD, fds[i], &ev) != 0 && errno != EEXIST)
            return -errno;
    }
    for (int k = 0; k < cq->n_efd_fds; k++) {
        bool still = false;
        for (int i = 0; i < n && !still; i++)
            still = cq->efd_fds[k] == fds[i];
        if (!still) epoll_ctl(cq->efd, EPOLL_CTL_DEL, cq->efd_fds[k], NULL);
    }
    memcpy(cq->efd_fds, fds, (size_t)n * sizeof(int));
    cq->n_efd_fds = n;
    return 0;
}

ULN_EXPORT int uln_cq_fd(struct uln_cq *cq)
{
    if (!cq) return -EINVAL;
    if (uln_ctx_forked(cq->ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    pthread_mutex_lock(&cq->ctx->lock);
    if (cq->efd < 0) {
        /* The set, and a timer in it: a sleeper on fd alone wakes when a
         * transport's timer is due (uln_cq_arm sets it), so a caller that
         * ignores the timeout still never misses a resend. */
        cq->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        cq->efd = cq->tfd >= 0 ? epoll_create1(EPOLL_CLOEXEC) : -1;
        if (cq->efd < 0 && cq->tfd >= 0) {
            close(cq->tfd);
            cq->tfd = -1;
        }
    }
    int fd = cq->efd >= 0 ? cq->efd : -errno;
    pthread_mutex_unlock(&cq->ctx->lock);
    return fd;
}

ULN_EXPORT int uln_cq_arm(struct uln_cq *cq, int *timeout_ms)
{
    if (!cq || !timeout_ms) return -EINVAL;
    struct uln_ctx *ctx = cq->ctx;
    if (uln_ctx_forked(ctx)) return -EPERM;
    if (cq->closed) return -EBADF;
    if (cq->efd < 0) return -EINVAL; /* uln_cq_fd first */
    cq_disarm(cq);
    if (cq_step(cq) || atomic_exchange(&cq->woken, 0)) return -EAGAIN;
    /* Announce the sleep, then look once more (uln_doorbell_ring): from now
     * on a peer that gives us work rings our doorbell, which is in the set,
     * and so does uln_cq_wake. */
    uln_doorbell_sleep_begin(ctx);
    cq->armed = true;
    if (cq_step(cq) || atomic_exchange(&cq->woken, 0)) {
        cq_disarm(cq);
        return -EAGAIN;
    }
    uln_api_lock(ctx);
    /* As uln_cq_wait: short slices while blocked on a peer's ring, else the
     * transports' earliest timer, and never past 100 ms (dead peers). */
    int slice = cq_busy(cq) ? 1 : 100;
    int rc = efd_sync(cq, &slice);
    uln_api_unlock(ctx);
    struct itimerspec its = {
        .it_value = {.tv_sec = slice / 1000, .tv_nsec = (long)(slice % 1000) * 1000000 + 1}};
    if (!rc && timerfd_settime(cq->tfd, 0, &its, NULL) != 0) rc = -errno;
    if (rc) {
        cq_disarm(cq);
        return rc;
    }
    *timeout_ms = slice;
    return 0;
}
