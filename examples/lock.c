/*
 * lock.c - a distributed lock: one 64-bit word in rank 0's memory, taken
 * with remote compare-and-swap (0 -> my rank + 1) and given back with a
 * swap to 0. A rank that finds the lock held backs off, doubling its wait up
 * to a cap, so a crowd of waiters does not flood the owner.
 *
 * The lock guards a plain counter beside it, updated with a GET and a PUT
 * (a read-modify-write no atomic protects): without the lock, two ranks
 * could read the same value and one increment would be lost. Rank 0 checks
 * that the counter ends at exactly size * N.
 *
 *   cc lock.c $(pkg-config --cflags --libs ulnet) -o lock
 *   ulnrun -n 4 ./lock [N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ulnet.h>

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s: %s\n", #x, uln_strerror(rc_));                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct lock {
    struct uln_ep *ep;
    struct uln_cq *cq;
    uint64_t key; /* rank 0's region: the lock word at 0, the counter at 8 */
    uint64_t me;  /* our rank + 1: what the lock word holds while we have it */
};

/* Wait for the one operation we have in flight; its status. */
static int complete(struct lock *l)
{
    struct uln_cqe e;
    for (;;) {
        int n = uln_cq_poll(l->cq, &e, 1);
        if (n < 0) return n;
        if (n == 1) return e.status;
        TRY(uln_cq_wait(l->cq, 10000));
    }
}

static void backoff(unsigned *ns)
{
    struct timespec ts = {0, (long)*ns};
    nanosleep(&ts, NULL);
    if (*ns < 256000) *ns *= 2; /* up to a quarter of a millisecond */
}

static void lock_take(struct lock *l)
{
    unsigned wait_ns = 1000;
    for (;;) {
        uint64_t old;
        TRY(uln_atomic(l->ep, 0, ULN_ATOMIC_CSWAP, 8, l->key, 0, l->me, 0, &old, 0, 0));
        TRY(complete(l));
        if (old == 0) return; /* it was free, and is ours now */
        backoff(&wait_ns);
    }
}

/* The release must come after the critical section's PUT has landed: we
 * waited for its completion, which means it is visible at rank 0. */
static void lock_give(struct lock *l)
{
    uint64_t old;
    TRY(uln_atomic(l->ep, 0, ULN_ATOMIC_SWAP, 8, l->key, 0, 0, 0, &old, 0, 0));
    TRY(complete(l));
    if (old != l->me) {
        fprintf(stderr, "rank %llu gave back a lock held by %llu\n", (unsigned long long)l->me - 1,
                (unsigned long long)old - 1);
        exit(1);
    }
}

/* The critical section: counter = counter + 1, with a GET and a PUT. */
static void bump(struct lock *l)
{
    uint64_t v;
    TRY(uln_get(l->ep, 0, &v, sizeof v, l->key, 8, 0, 0));
    TRY(complete(l));
    v++;
    TRY(uln_put(l->ep, 0, &v, sizeof v, l->key, 8, 0, 0));
    TRY(complete(l));
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct uln_ctx *ctx;
    struct uln_mr *mr = NULL;
    uint64_t *words = NULL, key = 0;
    struct lock l;

    TRY(uln_open(NULL, &ctx));
    int me = uln_rank(ctx), size = uln_size(ctx);
    l.me = (uint64_t)me + 1;
    TRY(uln_cq_open(ctx, 16, &l.cq));
    TRY(uln_ep_open(ctx, l.cq, l.cq, &l.ep));
    if (me == 0) {
        TRY(uln_mem_alloc(ctx, 4096, (void **)&words));
        words[0] = words[1] = 0;
        TRY(uln_mr_reg(ctx, words, 16,
                       ULN_ACCESS_REMOTE_ATOMIC | ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                       &mr));
        key = uln_mr_key(mr);
    }
    /* Every rank's key to every rank (the others give 0); rank 0's is the lock's. */
    uint64_t *keys = malloc((size_t)size * sizeof *keys);
    if (!keys) return 1;
    TRY(uln_allgather(l.ep, &key, sizeof key, keys, 10000));
    l.key = keys[0];
    free(keys);

    for (long i = 0; i < n; i++) {
        lock_take(&l);
        bump(&l);
        lock_give(&l);
    }
    printf("rank %d: %ld critical sections\n", me, n);

    TRY(uln_barrier(ctx, 60000));
    int status = 0;
    if (me == 0) {
        uint64_t v = words[1];
        printf("counter = %llu (expected %llu)\n", (unsigned long long)v,
               (unsigned long long)size * (unsigned long long)n);
        status = v == (uint64_t)size * (uint64_t)n ? 0 : 1;
        uln_mr_dereg(mr);
        uln_mem_free(ctx, words);
    }
    uln_close(ctx);
    return status;
}
