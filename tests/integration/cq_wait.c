/*
 * cq_wait - a blocking uln_cq_wait wakes when a peer sends, and times out
 * when nobody does.
 *
 * Rank 1 sleeps in uln_cq_wait(cq, 10000) while rank 0 waits a while and then
 * NAPs (or does a put_imm: with ULN_SHM_DIRECT=0 the sleeping target must be
 * woken to place the data before the entry exists). The wait must return 0
 * soon after the send, not at the 10 s timeout: a lost wakeup is a hang in
 * every real program. During the long waits rank 1 must actually sleep (little
 * CPU; the sleeps counter grows), since 4 ranks share 2 cores. Many short
 * rounds with 0..3 ms delays hit the window between "queue looked empty" and
 * "asleep", where wakeups get lost.
 *
 * A 4 MiB put_imm into malloc'd memory (through the rings with ULN_SHM_CMA=0 or
 * ULN_SHM_DIRECT=0: dozens of ring-fulls of fragments) must also wake the
 * sleeping target for every batch, not only the first: the entry must come
 * well under a second after the send, as on the direct path. Likewise a 4 MiB
 * GET from a rank that waits in uln_cq_wait with nothing to receive.
 *
 * Timeouts: uln_cq_wait(cq, 300) with nothing coming returns -ETIMEDOUT after
 * about 300 ms; uln_cq_wait(cq, 0) polls once and returns at once.
 */
#include "common.h"

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static uint64_t key, big_key;

#define BIG (4u << 20)

/* Rank 0 waits 200 ms, then GETs 4 MiB from rank 1's malloc'd region while
 * rank 1 sits in uln_cq_wait with nothing to receive: on the ring path rank 1
 * serves the GET from inside that wait, and a server blocked on ring space
 * must not nap for long stretches while its peer drains the responses. */
static void big_get_round(uint8_t *dst, struct t_region *big)
{
    t_barrier(&J);
    if (J.rank == 0) {
        t_sleep_ms(200);
        memset(dst, 0, BIG);
        double t0 = t_now();
        CHECK_OK(uln_get(ep, 1, dst, BIG, big_key, 0, 0x6e7, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "the 4 MiB GET's completion");
        double dt = t_now() - t0;
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET && e.user_data == 0x6e7);
        printf("rank0: 4 MiB GET from a waiting rank's malloc'd memory: %.1f ms\n", dt * 1e3);
        CHECK_SOFTF(dt < 1.0, "a 4 MiB GET from a rank waiting in uln_cq_wait took %.0f ms",
                    dt * 1e3);
        CHECK_PAT(dst, BIG, pat_seed(0, 140, 0), 0, "the 4 MiB GET");
        static uint64_t done = 0xd0;
        CHECK_OK(uln_nap(ep, 1, &done, 8, 0xd0, 0));
        e = t_cq_take1(cq, 30000, "done NAP completion");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
        return;
    }
    int rc;
    while ((rc = uln_cq_wait(cq, 10000)) == 0) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) == 1) {
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
            t_release(cq, &e);
            break;
        }
    }
    CHECK_RC(rc, 0);
    (void)big;
}

/* Rank 0 waits 200 ms, then put_imm's 4 MiB into rank 1's malloc'd region;
 * rank 1 sits in one uln_cq_wait meanwhile. */
static void big_round(uint8_t *src, struct t_region *big)
{
    t_barrier(&J);
    if (J.rank == 0) {
        t_sleep_ms(200);
        double t0 = t_now();
        CHECK_OK(uln_put_imm(ep, 1, src, BIG, big_key, 0, 0xb16, 0xb16, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "the 4 MiB put_imm's completion");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT && e.user_data == 0xb16);
        printf("rank0: 4 MiB put_imm into a sleeping rank's malloc'd memory: %.1f ms\n",
               (t_now() - t0) * 1e3);
        return;
    }
    double t0 = t_now();
    int rc;
    while ((rc = uln_cq_wait(cq, 10000)) == 0) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) == 1) {
            CHECK_CQE(&e, e.op == ULN_OP_PUT_REMOTE && e.imm == 0xb16 && e.len == BIG);
            break;
        }
    }
    double dt = t_now() - t0;
    CHECK_RC(rc, 0);
    printf("rank1: woke for the 4 MiB put_imm %.1f ms after starting to wait (sent at 200 ms)\n",
           dt * 1e3);
    CHECK_SOFTF(dt < 1.2,
                "a 4 MiB put_imm sent after 200 ms arrived only after %.0f ms: the "
                "sleeping target is not woken for each batch of fragments",
                dt * 1e3);
    CHECK_PAT(big->buf, BIG, pat_seed(0, 140, 0), 0, "the 4 MiB put_imm");
}

static void round_trip(int delay_ms, bool use_put, bool timed, int round)
{
    static uint64_t payload;
    t_barrier(&J);
    if (J.rank == 0) {
        if (delay_ms) t_sleep_ms(delay_ms);
        payload = 0x1000 + (uint64_t)round;
        if (use_put)
            CHECK_OK(uln_put_imm(ep, 1, &payload, 8, key, 8 * (uint64_t)(round % 64),
                                 0x1000 + (uint64_t)round, (uint64_t)round, 0));
        else
            CHECK_OK(uln_nap(ep, 1, &payload, 8, (uint64_t)round, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "the waking send's completion");
        CHECK_CQE(&e, e.status == 0 && e.user_data == (uint64_t)round);
        return;
    }
    double t0 = t_now(), c0 = t_cpu_now();
    int rc = uln_cq_wait(cq, 10000);
    double dt = t_now() - t0, cpu = t_cpu_now() - c0;
    CHECKF(rc == 0, "round %d (%s after %d ms): uln_cq_wait returned %d (%s) after %.3f s", round,
           use_put ? "put_imm" : "NAP", delay_ms, rc, t_errname(rc), dt);
    CHECKF(dt < delay_ms / 1000.0 + 2.0, "round %d: woke %.3f s after a %d ms delay", round, dt,
           delay_ms);
    if (delay_ms >= 100)
        CHECKF(dt >= delay_ms / 1000.0 * 0.9, "round %d: returned after %.3f s, before the send",
               round, dt);
    struct uln_cqe e;
    int n = uln_cq_poll(cq, &e, 1);
    CHECKF(n == 1, "round %d: uln_cq_wait returned 0 but uln_cq_poll gives %d", round, n);
    CHECK_CQE(&e, e.status == 0 && e.peer == 0);
    if (use_put) {
        CHECK_CQE(&e, e.op == ULN_OP_PUT_REMOTE && e.imm == 0x1000 + (uint64_t)round && e.len == 8);
    } else {
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
        uint64_t v;
        memcpy(&v, e.data, 8);
        CHECK(v == 0x1000 + (uint64_t)round);
        t_release(cq, &e);
    }
    if (timed) {
        printf("rank1: round %d: %s after %d ms woke the wait after %.1f ms, %.1f ms CPU\n", round,
               use_put ? "put_imm" : "NAP", delay_ms, dt * 1e3, cpu * 1e3);
        /* "spin a short while, then sleep": most of a 200 ms wait is asleep. */
        CHECKF(cpu < dt * 0.6, "round %d: %.1f ms CPU during a %.1f ms wait: it spun", round,
               cpu * 1e3, dt * 1e3);
    }
}

static void timeouts(void)
{
    int tmo[] = {300, 50};
    for (int i = 0; i < 2; i++) {
        double t0 = t_now();
        int rc = uln_cq_wait(cq, tmo[i]);
        double dt = t_now() - t0;
        CHECK_RC(rc, -ETIMEDOUT);
        CHECKF(dt >= tmo[i] / 1000.0 * 0.95 && dt < tmo[i] / 1000.0 + 0.5,
               "uln_cq_wait(cq, %d) timed out after %.1f ms", tmo[i], dt * 1e3);
        if (J.rank == 0)
            printf("rank0: uln_cq_wait(cq, %d) -> -ETIMEDOUT after %.1f ms\n", tmo[i], dt * 1e3);
    }
    double t0 = t_now();
    CHECK_RC(uln_cq_wait(cq, 0), -ETIMEDOUT);
    CHECKF(t_now() - t0 < 0.05, "uln_cq_wait(cq, 0) took %.1f ms", (t_now() - t0) * 1e3);
}

int main(void)
{
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg, big;
    uint64_t mine[2] = {0}, all[4];
    if (J.rank == 1) {
        t_region_new(&J, &reg, T_KIND_SHM, 4096, ULN_ACCESS_REMOTE_WRITE);
        t_region_new(&J, &big, T_KIND_MALLOC, BIG,
                     ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        memset(big.buf, 0, BIG);
        mine[0] = reg.key;
        mine[1] = big.key;
    }
    t_exchange(&J, ep, cq, mine, 2, all);
    key = all[2];
    big_key = all[3];
    uint8_t *bigsrc = t_xmalloc(BIG);
    pat_fill(bigsrc, BIG, pat_seed(0, 140, 0), 0);

    struct uln_counters c0, c1;
    CHECK_OK(uln_counters_get(J.ctx, &c0));
    timeouts();
    int round = 0;
    round_trip(200, false, true, round++);
    round_trip(200, true, true, round++);
    CHECK_OK(uln_counters_get(J.ctx, &c1));
    if (J.rank == 1)
        CHECKF(c1.sleeps > c0.sleeps, "two 200 ms waits and the sleeps counter did not grow");

    /* An entry that is already there: wait returns at once. */
    t_barrier(&J);
    if (J.rank == 0) {
        static uint64_t v = 7;
        CHECK_OK(uln_nap(ep, 1, &v, 8, 7, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "NAP completion");
        CHECK_CQE(&e, e.status == 0);
        t_barrier(&J);
    } else {
        t_barrier(&J);
        double t0 = t_now();
        double limit = t0 + 5;
        int rc;
        /* The NAP has completed at rank 0; it may take a moment to show. */
        while ((rc = uln_cq_wait(cq, 1000)) == -ETIMEDOUT && t_now() < limit) {
        }
        CHECK_RC(rc, 0);
        CHECKF(t_now() - t0 < 0.2, "entry already sent, wait took %.1f ms", (t_now() - t0) * 1e3);
        struct uln_cqe e = t_cq_take1(cq, 1000, "the NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
        t_release(cq, &e);
    }

    /* Short, racy delays: each must still wake promptly. */
    uint64_t rng = 42;
    for (int i = 0; i < 40; i++)
        round_trip((int)(t_rand(&rng) % 4), i & 1, false, round++);

    CHECK_OK(uln_counters_get(J.ctx, &c1));
    /* Without a doorbell (UDP) the packet itself wakes the sleeper. */
    if (J.rank == 0 && t_expect_of(&J, &J.info).doorbell)
        CHECKF(c1.wakeups_sent > c0.wakeups_sent,
               "rank 1 slept in uln_cq_wait, yet rank 0 counted no wakeup sent");
    big_round(bigsrc, &big);
    big_get_round(bigsrc, &big); /* reads back what big_round wrote */
    t_barrier(&J);
    timeouts();
    free(bigsrc);
    if (J.rank == 1) {
        t_region_free(&J, &reg);
        t_region_free(&J, &big);
    }
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
