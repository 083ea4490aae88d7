/*
 * svc_death.c - the service dies under a job (svc_death.sh kills it): every
 * operation to a peer reached through it must end with -ECONNRESET, never
 * hang, and later posts to it must fail too.
 *
 * Two ranks, ULN_TRANSPORT=svc. Rank 1 registers a buffer, sends its key to
 * rank 0 and then sleeps in pause() without ever calling ulnet again, so an
 * atomic on it (applied by its own engine: the service forwards atomics)
 * can never be answered. Rank 0 posts one, prints "posted" (the script then
 * kills the service) and waits, bounded, for its completion.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"

#define DIE(...) (fprintf(stderr, "svc_death: " __VA_ARGS__), exit(1))

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The next completion, within a bound (a hang is a failure). */
static struct uln_cqe take(struct uln_cq *cq, double bound_s)
{
    struct uln_cqe e;
    double end = now_s() + bound_s;
    while (now_s() < end) {
        if (uln_cq_poll(cq, &e, 1) == 1) return e;
        uln_cq_wait(cq, 100);
    }
    DIE("no completion within %.0f s\n", bound_s);
}

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    static char buf[1 << 16];
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 1024, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_rank(ctx) == 1) {
        struct uln_mr *mr;
        if (uln_mr_reg(ctx, buf, sizeof buf, ULN_ACCESS_REMOTE_ATOMIC, &mr)) DIE("reg\n");
        uint64_t key = uln_mr_key(mr);
        if (uln_nap(ep, 0, &key, sizeof key, 1, 0)) DIE("nap\n");
        struct uln_cqe e = take(cq, 30);
        if (e.status) DIE("nap: %d\n", e.status);
        pause(); /* killed by the script at the end */
        return 0;
    }
    struct uln_cqe e = take(cq, 30);
    uint64_t key;
    if (e.op != ULN_OP_NAP_RECV || e.len != sizeof key) DIE("no key\n");
    memcpy(&key, e.data, sizeof key);
    uln_cqe_release(cq, &e);
    static uint64_t old;
    if (uln_atomic(ep, 1, ULN_ATOMIC_ADD, 8, key, 0, 1, 0, &old, 42, 0)) DIE("atomic\n");
    printf("posted\n");
    fflush(stdout);
    double t0 = now_s();
    e = take(cq, 60);
    int fails = 0;
    if (e.user_data != 42 || e.status != -ECONNRESET) {
        fprintf(stderr, "svc_death: the atomic ended with %d (%s), not -ECONNRESET\n", e.status,
                uln_strerror(e.status));
        fails++;
    }
    /* Later posts fail too, at once or by their completion. */
    int rc = uln_nap(ep, 1, buf, 8, 43, 0);
    if (rc == 0) {
        e = take(cq, 60);
        rc = e.status;
    }
    if (rc != -ECONNRESET) {
        fprintf(stderr, "svc_death: a NAP after the death: %d, not -ECONNRESET\n", rc);
        fails++;
    }
    printf("svc_death: the atomic ended %.2f s after the post (the service's death)\n",
           now_s() - t0);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return fails ? 1 : 0;
}
