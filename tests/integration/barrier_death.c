/*
 * barrier_death - a member of the job dies before a barrier: the survivors'
 * uln_barrier fails with -ECONNRESET within a few seconds, not after its
 * whole timeout (nor never, without one), on every transport.
 *
 * Three ranks under ulnrun --keep-going. After uln_open all three exchange a
 * NAP (so every path is connected); then rank 2 kills itself and ranks 0 and
 * 1 enter a barrier with a 60 s timeout (the first round) and then one with
 * none (the second): each must fail with -ECONNRESET within BOUND seconds.
 * ulnrun reports the death's 137.
 */
#include <signal.h>

#include "common.h"

#define BOUND 5.0

static struct t_job J;

int main(void)
{
    t_open(&J, 3);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    uint64_t mine[1] = {(uint64_t)J.rank}, all[3];
    t_exchange(&J, ep, cq, mine, 1, all);
    if (J.rank == 2) {
        printf("rank2: dying now\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    for (int round = 0; round < 2; round++) {
        double t0 = t_now();
        int rc = uln_barrier(J.ctx, round == 0 ? 60000 : -1);
        double took = t_now() - t0;
        printf("rank%d: barrier %d with a dead member: %s after %.2f s\n", J.rank, round,
               t_errname(rc), took);
        CHECKF(rc == -ECONNRESET, "barrier with a dead member returned %d (%s)", rc, t_errname(rc));
        CHECKF(took < BOUND, "barrier took %.2f s to see the death", took);
    }
    /* Where every peer shares our rings (shm) the barrier told the
     * transport, which counts the death once (a packet transport finds a
     * peer dead by its silence, when it awaits something). */
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    if (J.info.caps_all & ULN_CAP_RINGS)
        CHECKF(c.peers_dead == 1, "peers_dead %" PRIu64 " after one death", c.peers_dead);
    CHECK_OK(uln_close(J.ctx));
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
