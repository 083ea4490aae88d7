/*
 * passive_target - does the shm mode the test asked for really decide who
 * moves the data?
 *
 * Rank 1 sleeps without calling ulnet at all while rank 0 PUTs into and GETs
 * from its regions of both memory kinds. By the header's progress rules:
 *   - on the direct path (mapped uln_mem_alloc memory; malloc'd memory when
 *     process_vm_readv/writev works) PUT and GET complete without the target
 *     calling ulnet at all;
 *   - on the ring path (ULN_SHM_DIRECT=0 for everything, ULN_SHM_CMA=0 for
 *     malloc'd memory) the target places/serves the data, and since a PUT's
 *     completion means the data is visible at the target, nothing can complete
 *     before rank 1 polls.
 * Over UDP the target's CPU always does the work: nothing completes while it
 * sleeps unless it runs a progress thread (ULN_PROGRESS=thread), and then all
 * of it does.
 * If ULN_SHM_DIRECT=0 were only reported by uln_query but not obeyed, every
 * "nodirect" case of this suite would silently test the direct path again;
 * this test is what tells. After rank 1 wakes up everything completes and the
 * data is checked.
 */
#include "common.h"

#define SLEEP_MS  700
#define WINDOW_MS 300
#define LEN       65536u
#define RLEN      (1u << 20)
#define GOFF      (512u << 10)

static struct t_job J;

static uint64_t rseed(int kind)
{
    return pat_seed(1, 130, (uint64_t)kind);
}
static uint64_t pseed(int kind)
{
    return pat_seed(0, 131, (uint64_t)kind);
}

int main(void)
{
    t_open(&J, 2);
    /* One endpoint per operation: completions of one endpoint may retire in
     * order, so a PUT stuck on the ring path must not hide a finished GET. */
    struct uln_cq *cq;
    struct uln_ep *eps[4], *ep;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    for (int i = 0; i < 4; i++)
        CHECK_OK(uln_ep_open(J.ctx, cq, cq, &eps[i]));
    ep = eps[0];
    struct t_region reg[T_NKINDS];
    uint64_t mine[T_NKINDS] = {0}, all[2 * T_NKINDS];
    if (J.rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&J, &reg[k], k, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
            pat_fill(reg[k].buf, RLEN, rseed(k), 0);
            mine[k] = reg[k].key;
        }
    t_exchange(&J, ep, cq, mine, T_NKINDS, all);

    if (J.rank == 1) {
        t_sleep_ms(SLEEP_MS); /* no ulnet call at all meanwhile */
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 0's done NAP");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV);
        t_release(cq, &e);
        for (int k = 0; k < T_NKINDS; k++) {
            CHECK_PAT(reg[k].buf, LEN, pseed(k), 0, "PUT into %s memory", t_kind_name(k));
            CHECK_PAT((uint8_t *)reg[k].buf + LEN, RLEN - LEN, rseed(k), LEN,
                      "rest of the %s region", t_kind_name(k));
        }
    } else {
        const uint64_t *keys = all + T_NKINDS;
        uint8_t *src[T_NKINDS], *dst[T_NKINDS];
        double t0 = t_now();
        for (int k = 0; k < T_NKINDS; k++) {
            src[k] = t_xmalloc(LEN);
            dst[k] = t_xmalloc(LEN);
            pat_fill(src[k], LEN, pseed(k), 0);
            memset(dst[k], 0, LEN);
            CHECK_OK(uln_put(eps[k], 1, src[k], LEN, keys[k], 0, 10 + (uint64_t)k, 0));
            CHECK_OK(uln_get(eps[2 + k], 1, dst[k], LEN, keys[k], GOFF, 20 + (uint64_t)k, 0));
        }
        /* ops done while rank 1 certainly sleeps: [put shm, put malloc, get shm, get malloc] */
        int early[4] = {0}, got = 0;
        while (got < 4 && t_now() - t0 < WINDOW_MS / 1000.0) {
            struct uln_cqe e;
            int n = uln_cq_poll(cq, &e, 1);
            CHECK(n >= 0);
            if (n == 0) {
                int w = uln_cq_wait(cq, 5);
                CHECK(w == 0 || w == -ETIMEDOUT);
                continue;
            }
            CHECK_CQE(&e, e.status == 0);
            int idx = (int)(e.user_data / 10 - 1) * 2 + (int)(e.user_data % 10);
            CHECK(idx >= 0 && idx < 4 && !early[idx]);
            early[idx] = 1;
            got++;
        }
        CHECKF(t_now() - t0 < SLEEP_MS / 1000.0 * 0.8,
               "the observation window overran into rank 1's polling (%.0f ms)",
               (t_now() - t0) * 1e3);
        struct uln_info after;
        CHECK_OK(uln_query(J.ctx, &after)); /* shm_cma may have turned out not to work */
        /* Done while the target slept: on the direct path, or where its
         * progress thread serves what its CPU would have to (rings, UDP). */
        struct t_expect x = t_expect_of(&J, &after);
        const bool *direct = x.done_while_away;
        printf("rank0: shm_direct=%d shm_cma=%d; done while the target slept: PUT shm %d, PUT "
               "malloc %d, GET shm %d, GET malloc %d\n",
               J.info.shm_direct, after.shm_cma, early[0], early[1], early[2], early[3]);
        for (int k = 0; k < T_NKINDS; k++)
            for (int op = 0; op < 2; op++) {
                int i = op * 2 + k;
                if (direct[k])
                    CHECKF(early[i],
                           "%s %s memory: direct path, yet not done in %d ms while "
                           "the target slept",
                           op ? "GET from" : "PUT into", t_kind_name(k), WINDOW_MS);
                else
                    CHECKF(!early[i],
                           "%s %s memory completed while the target slept, but with "
                           "shm_direct=%d shm_cma=%d it must go through the rings and be "
                           "placed by the target",
                           op ? "GET from" : "PUT into", t_kind_name(k), J.info.shm_direct,
                           after.shm_cma);
            }
        while (got < 4) {
            struct uln_cqe e = t_cq_take1(cq, 30000, "the PUTs and GETs once rank 1 polls");
            CHECK_CQE(&e, e.status == 0);
            got++;
        }
        for (int k = 0; k < T_NKINDS; k++)
            CHECK_PAT(dst[k], LEN, rseed(k), GOFF, "GET from %s memory", t_kind_name(k));
        static uint64_t done = 1;
        CHECK_OK(uln_nap(ep, 1, &done, 8, 99, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "done NAP completion");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
        for (int k = 0; k < T_NKINDS; k++) {
            free(src[k]);
            free(dst[k]);
        }
    }
    t_barrier(&J);
    if (J.rank == 1)
        for (int k = 0; k < T_NKINDS; k++)
            t_region_free(&J, &reg[k]);
    for (int i = 0; i < 4; i++)
        CHECK_OK(uln_ep_close(eps[i]));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
