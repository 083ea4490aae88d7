/*
 * counter.c - a shared counter: one 64-bit word in rank 0's memory that every
 * rank bumps with remote fetch-and-add (uln_atomic), keeping up to WINDOW
 * adds in flight. Each fetched value is a ticket no other rank gets: each
 * rank checks that its own are distinct and below size * N, and adds their
 * sum to a second word; rank 0 checks that the counter ends at exactly
 * size * N and that the sums add up to 0 + 1 + ... + (size * N - 1).
 *
 *   cc counter.c $(pkg-config --cflags --libs ulnet) -o counter
 *   ulnrun -n 4 ./counter [N]
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ulnet.h>

#define WINDOW 32 /* fetch-adds in flight per rank */

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s: %s\n", #x, uln_strerror(rc_));                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Our tickets, sorted: distinct and below all (= size * N)? */
static int tickets_ok(uint64_t *t, long n, uint64_t all)
{
    qsort(t, (size_t)n, sizeof *t, by_value);
    for (long i = 0; i < n; i++)
        if (t[i] >= all || (i && t[i] == t[i - 1])) return 0;
    return 1;
}

/* n fetch-adds of 1; each ticket (the value before our add) lands in
 * tickets[i], which belongs to ulnet until the add's completion. Returns the
 * largest ticket we drew. */
static uint64_t draw(struct uln_ep *ep, struct uln_cq *cq, uint64_t key, long n, uint64_t *tickets)
{
    long posted = 0, done = 0;
    uint64_t top = 0;
    while (done < n) {
        while (posted < n && posted - done < WINDOW) {
            int rc = uln_atomic(ep, 0, ULN_ATOMIC_ADD, 8, key, 0, 1, 0, &tickets[posted],
                                (uint64_t)posted, 0);
            if (rc == -EAGAIN) break; /* send queue full: poll first */
            TRY(rc);
            posted++;
        }
        struct uln_cqe e[WINDOW];
        int got = uln_cq_poll(cq, e, WINDOW);
        TRY(got);
        for (int i = 0; i < got; i++) {
            TRY(e[i].status);
            uint64_t t = tickets[e[i].user_data];
            if (t > top) top = t;
        }
        done += got;
        if (got == 0) TRY(uln_cq_wait(cq, 10000));
    }
    return top;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr = NULL;
    uint64_t *counter = NULL, key = 0;

    TRY(uln_open(NULL, &ctx));
    int me = uln_rank(ctx), size = uln_size(ctx);
    TRY(uln_cq_open(ctx, 256, &cq));
    TRY(uln_ep_open(ctx, cq, cq, &ep));
    if (me == 0) {
        /* Memory from uln_mem_alloc: peers on this host apply their adds to
         * it directly, with the CPU's own atomic instruction. */
        TRY(uln_mem_alloc(ctx, 4096, (void **)&counter));
        counter[0] = counter[1] = 0; /* the counter, the sum of the tickets */
        TRY(uln_mr_reg(ctx, counter, 16, ULN_ACCESS_REMOTE_ATOMIC, &mr));
        key = uln_mr_key(mr);
    }
    /* Rank 0 owns the counter: every rank's key to every rank (the others
     * give 0), rank 0's kept. */
    uint64_t *keys = malloc((size_t)size * sizeof *keys);
    if (!keys) return 1;
    TRY(uln_allgather(ep, &key, sizeof key, keys, 10000));
    key = keys[0];
    free(keys);

    uint64_t *tickets = malloc((size_t)n * sizeof *tickets);
    if (!tickets) return 1;
    uint64_t top = draw(ep, cq, key, n, tickets), all = (uint64_t)size * (uint64_t)n, sum = 0;
    printf("rank %d drew %ld tickets, the highest %llu\n", me, n, (unsigned long long)top);
    int status = tickets_ok(tickets, n, all) ? 0 : 1;
    if (status)
        fprintf(stderr, "rank %d: a ticket twice, or past %llu\n", me, (unsigned long long)all);
    for (long i = 0; i < n; i++)
        sum += tickets[i];
    free(tickets);
    uint64_t old; /* the sum's old value: not needed, but an atomic fetches */
    TRY(uln_atomic(ep, 0, ULN_ATOMIC_ADD, 8, key, 8, sum, 0, &old, 0, 0));
    struct uln_cqe e;
    while (uln_cq_poll(cq, &e, 1) == 0)
        TRY(uln_cq_wait(cq, 10000));
    TRY(e.status);

    TRY(uln_barrier(ctx, 60000)); /* every add is applied */
    if (me == 0) {
        /* Our own view of the words: atomic, like the peers' adds. */
        uint64_t v = __atomic_load_n(&counter[0], __ATOMIC_SEQ_CST);
        uint64_t s = __atomic_load_n(&counter[1], __ATOMIC_SEQ_CST), want = all * (all - 1) / 2;
        printf("counter = %llu (expected %llu), tickets add up to %llu (expected %llu)\n",
               (unsigned long long)v, (unsigned long long)all, (unsigned long long)s,
               (unsigned long long)want);
        if (v != all || s != want) status = 1;
        uln_mr_dereg(mr);
        uln_mem_free(ctx, counter);
    }
    uln_close(ctx);
    return status;
}
