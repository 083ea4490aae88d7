/*
 * progress.c - the optional progress thread (ULN_PROGRESS=thread).
 *
 * Over UDP a PUT or GET needs the target's CPU: someone there must take the
 * packets, place the data and answer. Without this thread that happens only
 * inside the application's ulnet calls, so a target that computes without
 * calling ulnet holds its initiators up (and, past ULN_UDP_DEAD_MS, looks
 * dead to them). The thread makes one-sided operations complete while the
 * application computes.
 *
 * It sleeps in poll() on every endpoint's socket and on the shared-memory
 * doorbell, never longer than the earliest protocol timer, so an idle job
 * costs no CPU. When something arrives it takes the context's big lock, runs
 * one progress pass over every endpoint, and wakes application threads
 * sleeping in uln_cq_wait if that pass completed anything. The application's
 * calls take the same lock (uln_api_lock), so the engine still sees one
 * thread at a time.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

static void *progress_main(void *arg)
{
    struct uln_ctx *ctx = arg;
    while (!atomic_load_explicit(&ctx->progress_stop, memory_order_acquire)) {
        int fds[64], n_fds = 0, timeout = 100;
        bool produced = false, busy = false;
        /* Announce the sleep before the last look, as uln_cq_wait does, so a
         * peer on this host rings the doorbell for what it sends meanwhile. */
        uln_doorbell_sleep_begin(ctx);
        pthread_mutex_lock(&ctx->big_lock);
        for (unsigned i = 0; i < ctx->n_eps; i++) {
            struct uln_ep *ep = ctx->eps[i];
            if (!ep) continue;
            uint64_t before = ep->send_cq->tail + ep->recv_cq->tail;
            uln_engine_progress(ep);
            produced |= ep->send_cq->tail + ep->recv_cq->tail != before;
            busy |= uln_ep_busy(ep);
            n_fds += uln_ep_wait_fds(ep, &fds[n_fds], 64 - n_fds, &timeout);
        }
        pthread_mutex_unlock(&ctx->big_lock);
        if (produced) uln_doorbell_wake_self(ctx);
        /* Work waiting on a peer (a full ring, a window): look again soon. */
        if (busy && timeout > 1) timeout = 1;
        if (!produced) uln_doorbell_sleep(ctx, fds, n_fds, timeout);
        uln_doorbell_sleep_end(ctx);
    }
    return NULL;
}

int uln_progress_start(struct uln_ctx *ctx)
{
    atomic_store(&ctx->progress_stop, 0);
    ctx->progress_on = true;
    int rc = pthread_create(&ctx->progress_tid, NULL, progress_main, ctx);
    if (rc) {
        ctx->progress_on = false;
        fprintf(stderr, "ulnet: cannot start the progress thread: %s\n", strerror(rc));
        return -rc;
    }
    return 0;
}

void uln_progress_stop(struct uln_ctx *ctx)
{
    if (!ctx->progress_on) return;
    /* Release: pairs with the thread's acquire; it sees the stop within one
     * sleep slice (at most 100 ms), or at once if something wakes it. */
    atomic_store_explicit(&ctx->progress_stop, 1, memory_order_release);
    uln_doorbell_wake_self(ctx);
    pthread_join(ctx->progress_tid, NULL);
    ctx->progress_on = false;
}

/* Everything a pass can move: our own queue, completions, messages taken or
 * served, packets in. Equal before and after a pass: it did nothing. */
static uint64_t ep_activity(const struct uln_ep *ep)
{
    return ep->sq_head + ep->sq_issue + ep->send_cq->tail + ep->recv_cq->tail + ep->taken +
           atomic_load_explicit(&ep->stats.pkts_received, memory_order_relaxed);
}

/* The longest idle slice: all ranks of a job may sit in a barrier on one
 * host, so keep their wake-ups together near 8000 a second or fewer. */
static uint32_t idle_cap_ms(const struct uln_ctx *ctx)
{
    uint32_t cap = (uint32_t)ctx->size / 8;
    return cap < 32 ? 32 : cap > 256 ? 256 : cap;
}

/* A wait that has had no idle pass yet, or none for a while: it starts over
 * at 1 ms slices. */
static bool idle_fresh(const struct uln_ctx *ctx, int64_t now)
{
    return ctx->idle_ms == 0 || now - ctx->idle_last_ms > 2 * (int64_t)idle_cap_ms(ctx);
}

void uln_progress_idle(struct uln_ctx *ctx)
{
    if (ctx->progress_on) return; /* the thread is on it */
    /* The endpoints' own threads are, by the thread rule, not inside ulnet
     * during a collective call such as uln_barrier (header: uln_barrier). */
    bool active = false;
    for (unsigned i = 0; i < ctx->n_eps; i++) {
        struct uln_ep *ep = ctx->eps[i];
        if (!ep) continue;
        uint64_t before = ep_activity(ep);
        uln_engine_progress(ep);
        active |= ep_activity(ep) != before || uln_ep_busy(ep);
    }
    /* A peer that needs us (a ring-path PUT to place, a GET to serve, a NAP
     * holding its ring, a UDP packet to acknowledge) shows up as activity and
     * brings the 1 ms slices back; a new wait (the last pass was long ago)
     * starts at 1 ms too. */
    int64_t now = uln_now_ms();
    bool fresh = idle_fresh(ctx, now);
    ctx->idle_last_ms = now;
    uint32_t cap = idle_cap_ms(ctx);
    if (active || fresh)
        ctx->idle_ms = 1;
    else
        ctx->idle_ms = ctx->idle_ms * 2 < cap ? ctx->idle_ms * 2 : cap;
}

int uln_progress_idle_ms(const struct uln_ctx *ctx)
{
    if (ctx->progress_on) return (int)idle_cap_ms(ctx); /* the thread serves the peers */
    if (idle_fresh(ctx, uln_now_ms())) return 1;
    return (int)ctx->idle_ms;
}
