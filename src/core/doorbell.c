/*
 * doorbell.c - sleeping and waking (doorbell.h).
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

void uln_doorbell_addr(struct uln_bell_addr *a, uint64_t job, int rank)
{
    memset(a, 0, sizeof *a);
    a->sa.sun_family = AF_UNIX;
    /* Leading NUL: the abstract namespace, which has no file to leave behind. */
    int n = snprintf(a->sa.sun_path + 1, sizeof a->sa.sun_path - 1, "ulnet.%016llx.%d",
                     (unsigned long long)job, rank);
    a->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int uln_doorbell_open(struct uln_ctx *ctx)
{
    ctx->bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ctx->bell_fd < 0) return -errno;
    uln_doorbell_addr(&ctx->bell_self, ctx->job_key, ctx->rank);
    if (bind(ctx->bell_fd, (struct sockaddr *)&ctx->bell_self.sa, ctx->bell_self.len) != 0) {
        int e = errno;
        fprintf(stderr, "ulnet: rank %d: doorbell: %s\n", ctx->rank, strerror(e));
        return -e;
    }
    return 0;
}

void uln_doorbell_close(struct uln_ctx *ctx)
{
    if (ctx->bell_fd >= 0) close(ctx->bell_fd);
    ctx->bell_fd = -1;
}

static _Atomic uint32_t *own_sleepers(struct uln_ctx *ctx)
{
    return &ctx->inbox->hdr->sleepers;
}

void uln_doorbell_ring(struct uln_ctx *ctx, _Atomic uint32_t *sleepers,
                       const struct uln_bell_addr *a)
{
    /* Full fence: our message stores must be ordered before we read the peer's
     * sleepers count, pairing with the fence in uln_doorbell_sleep_begin
     * (Dekker): either it sees our message on its last look, or we see it
     * asleep. */
    atomic_thread_fence(memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(sleepers, memory_order_relaxed) == 0, 1)) return;
    char b = 1;
    /* Non-blocking: a full socket means the peer has wake-ups pending anyway. */
    if (sendto(ctx->bell_fd, &b, 1, MSG_DONTWAIT, (const struct sockaddr *)&a->sa, a->len) == 1)
        ULN_COUNT(&ctx->stats, wakeups_sent, 1);
}

/* The progress thread has completed something sleepers in uln_cq_wait may be
 * waiting for. */
void uln_doorbell_wake_self(struct uln_ctx *ctx)
{
    atomic_thread_fence(memory_order_seq_cst); /* as in uln_doorbell_ring */
    if (atomic_load_explicit(own_sleepers(ctx), memory_order_relaxed) == 0) return;
    char b = 1;
    sendto(ctx->bell_fd, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&ctx->bell_self.sa,
           ctx->bell_self.len);
}

void uln_doorbell_sleep_begin(struct uln_ctx *ctx)
{
    atomic_fetch_add_explicit(own_sleepers(ctx), 1, memory_order_relaxed);
    /* Full fence: announce before the caller's last look at the rings. */
    atomic_thread_fence(memory_order_seq_cst);
}

void uln_doorbell_sleep_end(struct uln_ctx *ctx)
{
    /* The last sleeper drains the doorbell: another one (a CQ armed with
     * uln_cq_arm while a thread waits in uln_cq_wait) may still need it
     * readable to wake. */
    if (atomic_fetch_sub_explicit(own_sleepers(ctx), 1, memory_order_relaxed) != 1) return;
    char buf[64];
    while (recv(ctx->bell_fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

int uln_doorbell_sleep(struct uln_ctx *ctx, const int *fds, int n_fds, int timeout_ms)
{
    /* The doorbell first, then any sockets of packet transports: whichever
     * has something wakes us. */
    struct pollfd pf[1 + 64];
    if (n_fds > 64) n_fds = 64;
    pf[0] = (struct pollfd){.fd = ctx->bell_fd, .events = POLLIN};
    for (int i = 0; i < n_fds; i++)
        pf[1 + i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    ULN_COUNT(&ctx->stats, sleeps, 1);
    int n = poll(pf, (nfds_t)(1 + n_fds), timeout_ms);
    return n > 0 ? 0 : -ETIMEDOUT;
}
