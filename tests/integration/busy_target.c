/*
 * busy_target - one-sided operations complete while the target computes.
 *
 * Rank 1 computes for 2 s without calling ulnet at all (a busy loop, not a
 * sleep: its CPU is taken). Meanwhile rank 0 PUTs into and GETs from rank 1's
 * regions, sizes 1 B .. 1 MiB, and checks each completion arrives before the
 * 2 s are up. That is what ULN_PROGRESS=thread is for: over UDP the target's
 * CPU places PUTs and serves GETs, and without the thread nobody would until
 * rank 1 called ulnet again (so too over shared memory through the rings,
 * ULN_SHM_DIRECT=0). Run without the thread, the test expects the opposite
 * there (not everything completes while the target computes), so it also
 * checks that the thread, not luck, did the work; on the direct path rank 0
 * moves the data itself and everything completes in time either way.
 * Afterwards every byte is checked on both sides.
 */
#include "common.h"

#define COMPUTE_MS 2000
#define RLEN       (4u << 20)
#define NOPS       24

static struct t_job J;

static uint64_t rseed(void)
{
    return pat_seed(1, 140, 0);
}
static uint64_t pseed(int i)
{
    return pat_seed(0, 141, (uint64_t)i);
}

/* Operation i: a size from 1 B to 1 MiB, PUTs to the first half of the
 * region, GETs from the second. */
static size_t op_len(int i)
{
    return (size_t)1 << ((i * 7) % 21);
}
static uint64_t op_off(int i)
{
    return (uint64_t)i * (RLEN / 2 / NOPS);
}

int main(void)
{
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    uint64_t mine[1] = {0}, all[2];
    if (J.rank == 1) {
        t_region_new(&J, &reg, 0, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        pat_fill(reg.buf, RLEN, rseed(), 0);
        mine[0] = reg.key;
    }
    t_exchange(&J, ep, cq, mine, 1, all);
    /* Rank 1's region is uln_mem_alloc memory: whether its CPU is needed, and
     * whether the work gets done while it computes, depends on the mode. */
    struct t_expect want = t_expect_of(&J, &J.info);
    bool thread = J.info.progress_thread;

    if (J.rank == 1) {
        uln_barrier(J.ctx, 60000); /* rank 0 posts only once we compute */
        double t0 = t_now();
        volatile uint64_t x = 1;
        while (t_now() - t0 < COMPUTE_MS / 1000.0)
            for (int i = 0; i < 100000; i++)
                x = x * 6364136223846793005ull + 1442695040888963407ull;
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 0's done NAP");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV);
        t_release(cq, &e);
        for (int i = 0; i < NOPS; i++)
            CHECK_PAT((uint8_t *)reg.buf + op_off(i), op_len(i), pseed(i), 0, "PUT %d", i);
        CHECK_PAT((uint8_t *)reg.buf + RLEN / 2, RLEN / 2, rseed(), RLEN / 2,
                  "GET half of the region, only read");
    } else {
        uint64_t key = all[1];
        uint8_t *src = t_xmalloc(RLEN / 2), *dst = t_xmalloc(RLEN / 2);
        for (int i = 0; i < NOPS; i++)
            pat_fill(src + op_off(i), op_len(i), pseed(i), 0);
        memset(dst, 0, RLEN / 2);
        uln_barrier(J.ctx, 60000);
        double t0 = t_now();
        int posted = 0, done = 0, early = 0;
        double last = 0;
        while (done < 2 * NOPS) {
            if (posted < 2 * NOPS) {
                int i = posted / 2;
                int rc = posted % 2 ? uln_get(ep, 1, dst + op_off(i), op_len(i), key,
                                              RLEN / 2 + op_off(i), 2 * (uint64_t)i + 1, 0)
                                    : uln_put(ep, 1, src + op_off(i), op_len(i), key, op_off(i),
                                              2 * (uint64_t)i, 0);
                CHECK(rc == 0 || rc == -EAGAIN);
                if (rc == 0) posted++;
            }
            struct uln_cqe e;
            int n = uln_cq_poll(cq, &e, 1);
            CHECK(n >= 0);
            if (n == 0) {
                if (t_now() - t0 > 30)
                    t_fail(__FILE__, __LINE__, "progress", "30 s, %d done", done);
                if (posted == 2 * NOPS) uln_cq_wait(cq, 5);
                continue;
            }
            CHECK_CQE(&e, e.status == 0);
            done++;
            last = t_now() - t0;
            if (last < COMPUTE_MS / 1000.0 * 0.9) early++;
        }
        printf("rank0: transport=%s progress_thread=%d: %d of %d PUT/GET done while rank 1 "
               "computed (last at %.0f ms)\n",
               J.info.transport, thread, early, 2 * NOPS, last * 1e3);
        if (want.done_while_away[T_KIND_SHM])
            CHECKF(early == 2 * NOPS, "%s, yet only %d of %d done in time",
                   want.target_cpu[T_KIND_SHM] ? "progress thread on" : "direct path", early,
                   2 * NOPS);
        else
            CHECKF(early < 2 * NOPS,
                   "the target's CPU is needed and it has no progress thread, yet all done "
                   "while it computed");
        for (int i = 0; i < NOPS; i++)
            CHECK_PAT(dst + op_off(i), op_len(i), rseed(), RLEN / 2 + op_off(i), "GET %d", i);
        static uint64_t fin = 1;
        CHECK_OK(uln_nap(ep, 1, &fin, sizeof fin, 0, ULN_SILENT));
        free(src);
        free(dst);
    }
    if (J.rank == 1) t_region_free(&J, &reg);
    return t_finish(&J);
}
