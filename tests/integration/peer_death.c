/*
 * peer_death - a rank dies (kill -9) while the others stream to it: the
 * survivors get error completions for everything aimed at it, within a
 * bounded time, keep working with each other, and exit cleanly.
 *
 * Three ranks, over shared memory (ulnrun --keep-going) or each on its own
 * host over UDP (tests/netns/run_job.sh --expect-status 137); ulnrun without
 * --keep-going ends the whole job at the first death, which rank_kill checks.
 * Rank 2 takes NAPs and serves PUTs/GETs for a moment, then kills itself.
 * Rank 0 keeps a window of NAPs, PUTs and GETs going to rank 2 and to rank 1
 * at once. Once rank 2 is gone:
 *   - every operation on rank 2 completes with -ECONNRESET, none later than
 *     the bound after the death: over shm the process's exit (its pidfd) is
 *     seen within a second; over UDP silence for ULN_UDP_DEAD_MS;
 *   - new operations on rank 2 fail the same way, without hanging: no PUT or
 *     GET posted after a failure was seen succeeds (one posted earlier may:
 *     completions retire in posting order, and a PUT acknowledged on the data
 *     channel may sit behind an older GET the dead rank never served);
 *   - over shm, the accesses that raced with the death touched the dead
 *     rank's memory, which stays mapped: no SIGBUS;
 *   - operations on rank 1 go on succeeding, and their data is checked.
 * Survivors end with a NAP handshake (not a barrier: a barrier needs all).
 */
#include <signal.h>

#include "common.h"

#define LEN    4096
#define RLEN   (1u << 20)
#define WINDOW 16

static struct t_job J;

int main(void)
{
    t_open(&J, 3);
    struct t_expect x = t_expect_of(&J, &J.info); /* all over shm or all over udp */
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    t_region_new(&J, &reg, 0, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    pat_fill(reg.buf, RLEN, pat_seed(J.rank, 150, 0), 0);
    uint64_t mine[1] = {reg.key}, keys[3];
    t_exchange(&J, ep, cq, mine, 1, keys);
    /* How long after the death the first error may come. */
    int dead_ms = x.dead_ms;

    if (J.rank == 2) {
        double t0 = t_now();
        while (t_now() - t0 < 0.3) { /* serve for a while, then die mid-stream */
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) == 1) t_release(cq, &e);
        }
        printf("rank2: dying now\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    if (J.rank == 1) {
        /* Serve until rank 0 says it is done; NAPs from it are counted. */
        for (;;) {
            struct uln_cqe e = t_cq_take1(cq, 60000, "rank 0's NAPs and its done NAP");
            CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV);
            bool done = e.len == 1;
            t_release(cq, &e);
            if (done) break;
        }
        static const uint8_t bye = 2;
        CHECK_OK(uln_nap(ep, 0, &bye, 1, 0, ULN_SILENT));
        t_cq_expect_empty(cq, 100, "after the handshake");
    } else {
        uint8_t *src = t_xmalloc(LEN), *dst = t_xmalloc((size_t)2 * WINDOW * LEN);
        pat_fill(src, LEN, pat_seed(0, 151, 0), 0);
        int inflight[3] = {0};
        uint64_t ok[3] = {0}, failed[3] = {0}, seq = 0;
        uint64_t seq_at_fail = UINT64_MAX; /* operations posted from here on must fail */
        double t0 = t_now(), first_fail = 0, last_fail = 0;
        /* Until every operation on rank 2 has failed and a while after. */
        while (t_now() - t0 < 0.3 + dead_ms / 1000.0 + 3) {
            for (int peer = 1; peer <= 2; peer++) {
                while (inflight[peer] < WINDOW) {
                    uint64_t k = seq++, slot = k % (2 * WINDOW);
                    int op = (int)(k % 3), rc;
                    uint64_t ud = (uint64_t)peer << 56 | (uint64_t)op << 48 | k;
                    if (op == 0)
                        rc = uln_nap(ep, peer, src, 64, ud, 0);
                    else if (op == 1)
                        rc = uln_put(ep, peer, src, LEN, keys[peer], RLEN / 2 + slot * LEN, ud, 0);
                    else
                        rc = uln_get(ep, peer, dst + slot * LEN, LEN, keys[peer], 0, ud, 0);
                    CHECKF(rc == 0 || rc == -EAGAIN, "post to rank %d: %d", peer, rc);
                    if (rc) break;
                    inflight[peer]++;
                }
            }
            struct uln_cqe ev[32];
            int n = uln_cq_poll(cq, ev, 32);
            CHECK(n >= 0);
            for (int i = 0; i < n; i++) {
                struct uln_cqe *e = &ev[i];
                if (e->op == ULN_OP_NAP_RECV) { /* none expected before the handshake */
                    CHECKF(0, "unexpected NAP from rank %d", e->peer);
                }
                int peer = (int)(e->user_data >> 56);
                CHECK_CQE(e, peer == e->peer && (peer == 1 || peer == 2));
                inflight[peer]--;
                if (e->status == 0) {
                    ok[peer]++;
                    /* A NAP completes when it leaves, so one sent before the
                     * death may succeed after a PUT failed; a PUT or GET
                     * posted once the peer was known dead must never. */
                    uint64_t k = e->user_data & ((1ull << 48) - 1);
                    CHECKF(peer == 1 || k < seq_at_fail || (e->user_data >> 48 & 0xff) == 0,
                           "a PUT/GET on rank 2 posted after one had failed succeeded");
                    if (peer == 1 && (int)(e->user_data >> 48 & 0xff) == 2) {
                        uint64_t slot = k % (2 * WINDOW);
                        CHECK_PAT(dst + slot * LEN, LEN, pat_seed(1, 150, 0), 0, "GET from rank 1");
                    }
                } else {
                    CHECK_CQE(e, peer == 2 && e->status == -ECONNRESET);
                    failed[peer]++;
                    if (seq_at_fail == UINT64_MAX) seq_at_fail = seq;
                    if (!first_fail) first_fail = t_now() - t0;
                    last_fail = t_now() - t0;
                }
            }
            if (n == 0) uln_cq_wait(cq, 1);
        }
        printf("rank0: rank 1: %" PRIu64 " ok; rank 2: %" PRIu64 " ok, %" PRIu64
               " failed (first at %.2f s, last at %.2f s, bound %d ms after the death)\n",
               ok[1], ok[2], failed[2], first_fail, last_fail, dead_ms);
        CHECK(ok[2] > 0);     /* it served before it died */
        CHECK(failed[2] > 0); /* and everything after failed */
        CHECKF(first_fail < 0.3 + dead_ms / 1000.0 + 2, "first failure at %.2f s", first_fail);
        CHECKF(ok[1] > 100, "rank 1 did only %" PRIu64 " operations", ok[1]);
        /* Drain what is still in flight to rank 1, then the handshake. */
        while (inflight[1] > 0 || inflight[2] > 0) {
            struct uln_cqe e = t_cq_take1(cq, 30000, "the last operations");
            int peer = (int)(e.user_data >> 56);
            CHECK_CQE(&e, e.status == 0 || (peer == 2 && e.status == -ECONNRESET));
            inflight[peer]--;
        }
        static const uint8_t done = 1;
        CHECK_OK(uln_nap(ep, 1, &done, 1, 0, ULN_SILENT));
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 1's goodbye");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.peer == 1);
        t_release(cq, &e);
        free(src);
        free(dst);
    }
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    if (J.rank == 0) CHECK(c.peers_dead == 1);
    t_region_free(&J, &reg);
    CHECK_OK(uln_close(J.ctx));
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
