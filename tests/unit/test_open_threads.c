/*
 * test_open_threads.c - two threads of one process open, use and close
 * contexts of no job at the same time, as a libfabric provider beside a
 * library of its own would. Each round both open (one also tries a config
 * that must be refused), exchange addresses, insert each other and swap one
 * NAP, then close. The settings checks inside uln_open keep per-call state:
 * under TSan this shows it is the calling thread's own, and everywhere that a
 * refused config in one thread never spoils the other's open.
 */
#include <ulnet.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <stdio.h>
#include <stdlib.h>

/* Both threads check: a failure ends the process at once (check.h's counters
 * are not shared-safe). */
#define MUST(c)                                                                                    \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c);                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define ROUNDS 20

static pthread_barrier_t meet;
static unsigned char addrs[2][ULN_ADDR_MAX];
static size_t addr_lens[2];

static void open_bad(void)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    cfg.ring_bytes = 3 * 4096; /* not a power of two: refused, said on stderr */
    struct uln_ctx *ctx = NULL;
    MUST(uln_open(&cfg, &ctx) == -EINVAL);
    MUST(ctx == NULL);
}

/* Wait for the one NAP of this round, then give its ring space back. */
static void take_nap(struct uln_cq *cq, int from, unsigned want)
{
    struct uln_cqe e;
    for (long spins = 0; spins < 200000000; spins++) {
        int n = uln_cq_poll(cq, &e, 1);
        MUST(n >= 0);
        if (n == 0) continue;
        if (e.op == ULN_OP_NAP) {
            MUST(e.status == 0);
            continue;
        }
        MUST(e.op == ULN_OP_NAP_RECV);
        MUST(e.peer == from);
        MUST(e.len == sizeof want);
        unsigned got;
        memcpy(&got, e.data, sizeof got);
        MUST(got == want);
        MUST(uln_cqe_release(cq, &e) == 0);
        return;
    }
    MUST(!"no NAP from the other thread's context");
}

static void *side(void *arg)
{
    int me = (int)(long)arg, other = 1 - me;
    for (unsigned round = 0; round < ROUNDS; round++) {
        if (me == 1) open_bad();
        struct uln_config cfg;
        uln_config_init(&cfg);
        cfg.boot = ULN_BOOT_NONE;
        struct uln_ctx *ctx;
        struct uln_cq *cq;
        struct uln_ep *ep;
        MUST(uln_open(&cfg, &ctx) == 0);
        MUST(uln_cq_open(ctx, 64, &cq) == 0);
        MUST(uln_ep_open(ctx, cq, cq, &ep) == 0);
        addr_lens[me] = sizeof addrs[me];
        MUST(uln_addr(ctx, addrs[me], &addr_lens[me]) == 0);
        pthread_barrier_wait(&meet); /* both addresses are written */
        int peer;
        MUST(uln_peer_insert(ctx, addrs[other], addr_lens[other], 0, &peer) == 0);
        unsigned msg = round * 2 + (unsigned)me;
        MUST(uln_nap(ep, peer, &msg, sizeof msg, 1, ULN_INLINE) == 0);
        take_nap(cq, peer, round * 2 + (unsigned)other);
        /* The other side may still be taking ours: close only when both are done. */
        pthread_barrier_wait(&meet);
        MUST(uln_close(ctx) == 0);
    }
    return NULL;
}

int main(void)
{
    pthread_t t[2];
    MUST(pthread_barrier_init(&meet, NULL, 2) == 0);
    for (long i = 0; i < 2; i++)
        MUST(pthread_create(&t[i], NULL, side, (void *)i) == 0);
    for (int i = 0; i < 2; i++)
        MUST(pthread_join(t[i], NULL) == 0);
    pthread_barrier_destroy(&meet);
    printf("%d rounds of two contexts on two threads\n", ROUNDS);
    return 0;
}
