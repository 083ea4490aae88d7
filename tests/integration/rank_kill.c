/*
 * rank_kill - a rank dies by SIGKILL in the middle of a PUT/NAP stream.
 *
 * Run as a 3-rank job under expect_status: every rank streams PUTs (64 KiB,
 * into both kinds of memory) and NAPs to both others; rank 2 kills itself
 * with operations outstanding. The job must end with ulnrun's status 137
 * (128 + SIGKILL, the first failing rank's status), well before ulnrun's
 * timeout, with no rank left behind. A rank that dies must not wedge its
 * peers in a way the launcher cannot clean up, and the job status must say
 * what happened.
 *
 * The survivors never exit on their own (that could race with rank 2's
 * death for "first failing rank"): when they see an error completion
 * (ideally -ECONNRESET) they report it and sleep until ulnrun ends them.
 */
#include "common.h"

#include <signal.h>

#define REGION  (16u << 20)
#define PUTSZ   65536u
#define NAPSZ   1024u
#define KILL_MS 300
#define SLOTS   256

static struct t_job J;

static _Noreturn void linger(const char *why)
{
    fprintf(stderr, "rank %d: %s; waiting for ulnrun to end the job\n", J.rank, why);
    for (int i = 0; i < 600; i++)
        t_sleep_ms(100);
    fprintf(stderr, "rank %d: still alive 60 s later: ulnrun did not end the job\n", J.rank);
    exit(3);
}

int main(void)
{
    t_open(&J, 3);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS];
    uint64_t mine[T_NKINDS], keys[3 * T_NKINDS];
    for (int k = 0; k < T_NKINDS; k++) {
        t_region_new(&J, &reg[k], k, REGION, ULN_ACCESS_REMOTE_WRITE);
        mine[k] = reg[k].key;
    }
    t_exchange(&J, ep, cq, mine, T_NKINDS, keys);

    uint8_t *src = t_xmalloc(PUTSZ);
    pat_fill(src, PUTSZ, pat_seed(J.rank, 95, 0), 0);
    uint8_t *naps = t_xmalloc((size_t)SLOTS * NAPSZ);
    memset(naps, J.rank, (size_t)SLOTS * NAPSZ);

    double t0 = t_now();
    uint64_t posted = 0, completed = 0, received = 0;
    while (t_now() - t0 < 20) {
        int peer = (J.rank + 1 + (int)(posted & 1)) % 3;
        int rc = -EAGAIN;
        /* Outstanding operations stay under SLOTS / 2, so a NAP slot is never
         * reused while in flight. */
        if (posted - completed >= SLOTS / 2)
            rc = -EAGAIN;
        else if (posted % 3 == 2)
            rc = uln_nap(ep, peer, naps + (posted % SLOTS) * NAPSZ, NAPSZ, posted, 0);
        else
            rc = uln_put(ep, peer, src, PUTSZ, keys[peer * T_NKINDS + (int)(posted % 2)],
                         (posted * PUTSZ) % REGION, posted, 0);
        if (rc == 0)
            posted++;
        else if (rc != -EAGAIN && J.rank != 2) {
            char why[128];
            snprintf(why, sizeof why, "posting to rank %d returned %d (%s)", peer, rc,
                     t_errname(rc));
            linger(why);
        }
        if (J.rank == 2 && t_now() - t0 > KILL_MS / 1000.0) {
            /* Die with work in flight: a few more large PUTs first, unpolled. */
            for (int i = 0; i < 8; i++)
                if (uln_put(ep, i & 1, src, PUTSZ, keys[(i & 1) * T_NKINDS + (i & 2 ? 1 : 0)], 0,
                            1u << 30, 0) == 0)
                    posted++;
            fprintf(stderr, "rank 2: SIGKILL myself with %" PRIu64 " operations outstanding\n",
                    posted - completed);
            raise(SIGKILL);
        }
        struct uln_cqe ev[32];
        int n = uln_cq_poll(cq, ev, 32);
        if (n < 0 && J.rank != 2) {
            char why[128];
            snprintf(why, sizeof why, "uln_cq_poll returned %d (%s)", n, t_errname(n));
            linger(why);
        }
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            if (e->status != 0) {
                char why[160];
                snprintf(why, sizeof why, "%s to/from rank %d completed with %d (%s)",
                         t_opname(e->op), e->peer, e->status, t_errname(e->status));
                linger(why);
            }
            if (e->op == ULN_OP_NAP_RECV) {
                received++;
                t_release(cq, e);
            } else {
                completed++;
            }
        }
        if (n == 0 && rc == -EAGAIN) {
            int w = uln_cq_wait(cq, 5);
            if (w != 0 && w != -ETIMEDOUT) {
                char why[128];
                snprintf(why, sizeof why, "uln_cq_wait returned %d (%s)", w, t_errname(w));
                linger(why);
            }
        }
    }
    char why[160];
    snprintf(why, sizeof why,
             "streamed 20 s (%" PRIu64 " posted, %" PRIu64 " completed, %" PRIu64
             " received) without an error after rank 2 died",
             posted, completed, received);
    linger(why);
}
