/*
 * threads.c - the header's threading promise: endpoints that share no CQ may
 * be driven by different threads at once. On each rank two threads each drive
 * their own endpoint and CQ (PUT, GET and NAP to the same peer, into both
 * kinds of memory), while a third registers and deregisters regions and reads
 * counters. Data must be right; built under TSan too, where a data race in
 * the library fails the run.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>

#define SLICE      65536
#define ITERS      400
#define NAPS_EVERY 4

static struct t_job J;
static uint64_t peer_keys[2]; /* the peer's regions: [0] uln_mem_alloc, [1] malloc */

static void *initiator(void *arg)
{
    (void)arg;
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    int k = uln_ep_index(ep); /* 1 or 2: talks to the peer's endpoint k */
    uint8_t *src = t_xmalloc(SLICE), *dst = t_xmalloc(SLICE);
    int naps = 0;
    for (int i = 0; i < ITERS; i++) {
        int kind = i % 2;
        size_t len = 1 + (size_t)(i * 977) % SLICE;
        uint64_t seed = pat_seed(k, i, 9);
        pat_fill(src, len, seed, 0);
        CHECK_OK(uln_put(ep, 1, src, len, peer_keys[kind], (uint64_t)(k - 1) * SLICE, 1, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "PUT from a thread");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT);
        memset(dst, 0, len);
        CHECK_OK(uln_get(ep, 1, dst, len, peer_keys[kind], (uint64_t)(k - 1) * SLICE, 2, 0));
        e = t_cq_take1(cq, 30000, "GET from a thread");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET);
        CHECK_PAT(dst, len, seed, 0, "thread of endpoint %d, iteration %d", k, i);
        if (i % NAPS_EVERY == 0) {
            uint32_t v = (uint32_t)i;
            CHECK_OK(uln_nap(ep, 1, &v, sizeof v, 3, ULN_INLINE));
            e = t_cq_take1(cq, 30000, "NAP from a thread");
            CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
            naps++;
        }
    }
    uint32_t done = UINT32_MAX;
    CHECK_OK(uln_nap(ep, 1, &done, sizeof done, 4, ULN_INLINE));
    struct uln_cqe e = t_cq_take1(cq, 30000, "last NAP");
    CHECK_CQE(&e, e.status == 0);
    free(src);
    free(dst);
    return NULL;
}

/* The target's threads: the ring path needs them to make progress; they also
 * check that each endpoint's NAPs arrive in order. */
static void *target(void *arg)
{
    (void)arg;
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    uint32_t expect = 0;
    for (;;) {
        struct uln_cqe e = t_cq_take1(cq, 60000, "a NAP from the initiator's thread");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 4);
        uint32_t v;
        memcpy(&v, e.data, 4);
        t_release(cq, &e);
        if (v == UINT32_MAX) break;
        CHECKF(v == expect, "endpoint %d: NAP %u, expected %u", uln_ep_index(ep), v, expect);
        expect += NAPS_EVERY;
    }
    return NULL;
}

static _Atomic int stop;

/* Registration and counters from a third thread, all the while. */
static void *churn(void *arg)
{
    (void)arg;
    void *mem;
    CHECK_OK(uln_mem_alloc(J.ctx, 1 << 16, &mem));
    while (!atomic_load(&stop)) {
        struct uln_mr *mr;
        CHECK_OK(uln_mr_reg(J.ctx, mem, 1 << 16, ULN_ACCESS_REMOTE_READ, &mr));
        struct uln_counters c;
        CHECK_OK(uln_counters_get(J.ctx, &c));
        CHECK_OK(uln_mr_dereg(mr));
    }
    CHECK_OK(uln_mem_free(J.ctx, mem));
    return NULL;
}

int main(void)
{
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep0;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep0)); /* index 0: set-up only */
    struct t_region r[2];
    t_region_new(&J, &r[0], T_KIND_SHM, 2 * SLICE,
                 ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    t_region_new(&J, &r[1], T_KIND_MALLOC, 2 * SLICE,
                 ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    uint64_t mine[2] = {r[0].key, r[1].key}, all[4];
    t_exchange(&J, ep0, cq, mine, 2, all);
    peer_keys[0] = all[(1 - J.rank) * 2];
    peer_keys[1] = all[(1 - J.rank) * 2 + 1];

    pthread_t t[3];
    void *(*body)(void *) = J.rank == 0 ? initiator : target;
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, body, NULL) == 0);
    CHECK(pthread_create(&t[2], NULL, churn, NULL) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(t[2], NULL);
    t_barrier(&J);
    t_region_free(&J, &r[0]);
    t_region_free(&J, &r[1]);
    return t_finish(&J);
}
