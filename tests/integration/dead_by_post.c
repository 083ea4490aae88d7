/*
 * dead_by_post - a peer that dies while we are away from ulnet (not polling)
 * is found dead by our next post rather than by a poll, and everything on it
 * still fails with -ECONNRESET, within a bound: no hang.
 *
 * Two ranks (ulnrun --keep-going). Rank 1 exchanges keys and kills itself.
 * Rank 0 PUTs to it (the PUT waits for an answer that never comes), then
 * sleeps past the bound in which silence makes a peer dead (over udp
 * ULN_UDP_DEAD_MS; over shm its pidfd) without polling, then posts a NAP and
 * a second PUT. Both PUTs fail; the NAP fails, or completes as it leaves. Over udp that post is the
 * first call to see the deadline pass; the peer must still be given up at the next poll, which once
 * waited for a timer that a dead peer no longer has.
 */
#include <signal.h>
#include <unistd.h>

#include "common.h"

#define LEN 4096

static struct t_job J;

int main(void)
{
    t_open(&J, 2);
    struct t_expect x = t_expect_of(&J, &J.info);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    t_region_new(&J, &reg, 0, LEN, ULN_ACCESS_REMOTE_WRITE);
    uint64_t mine[1] = {reg.key}, keys[2];
    t_exchange(&J, ep, cq, mine, 1, keys);
    if (J.rank == 1) {
        printf("rank1: dying now\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    static uint8_t src[LEN];
    usleep(200000); /* rank 1 is gone */
    CHECK_OK(uln_put(ep, 1, src, LEN, keys[1], 0, 1, 0));
    usleep((useconds_t)x.dead_ms * 1500); /* away from ulnet past the bound */
    double t0 = t_now();
    int rc = uln_nap(ep, 1, src, 8, 2, 0);
    CHECKF(rc == 0 || rc == -ECONNRESET, "NAP to the dead rank: %s", t_errname(rc));
    int want = rc == 0 ? 3 : 2;
    rc = uln_put(ep, 1, src, LEN, keys[1], 0, 3, 0);
    CHECKF(rc == 0 || rc == -ECONNRESET, "PUT to the dead rank: %s", t_errname(rc));
    if (rc) want--;
    for (int i = 0; i < want; i++) {
        struct uln_cqe e = t_cq_take1(cq, 5000, "a failure for each operation on the dead rank");
        /* A NAP completes when it leaves: over shm into the dead rank's
         * ring, before the death is seen (as in peer_death). */
        CHECK_CQE(&e, e.peer == 1 && (e.status == -ECONNRESET || (e.user_data == 2 && !e.status)));
    }
    printf("rank0: %d operations completed within %.2f s of the post\n", want, t_now() - t0);
    t_cq_expect_empty(cq, 100, "after the failures");
    /* The survivor ends as any program does: its close must not wait on
     * the dead rank (over AF_XDP the close is also what detaches the XDP
     * program from the interface). */
    CHECK_OK(uln_close(J.ctx));
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
