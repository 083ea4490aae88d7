/*
 * fairness - one huge PUT must not starve other endpoints.
 *
 * Rank 0 posts a 256 MiB PUT on endpoint 0, then ping-pongs small NAPs with
 * rank 1 on endpoint 1. Both endpoints share one CQ on each rank, so a single
 * uln_cq_poll drives both: the engine must move the PUT in chunk_bytes pieces
 * and serve endpoint 1 between them. Several ping-pong round trips have to
 * complete before the PUT's completion arrives; an engine that copies the whole
 * PUT in one go lets none through. Done for both kinds of target memory, then
 * the PUT's data is checked.
 *
 * Then alone: an endpoint that is the only one of its CQ takes bigger turns
 * (engine.c: ALONE_BYTES) but still not the whole PUT: rank 1 pings the very
 * endpoint that moves it, rank 0 answers from another endpoint on a CQ of
 * its own, and several pings must be taken before the PUT completes.
 */
#include "common.h"

#define BIG       (256u << 20)
#define MIN_TRIPS 3
#define PING      0x50494e47u
#define STOP      0x53544f50u
#define CHECKMSG  0x43484bu

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep0, *ep1;

struct msg {
    uint32_t magic, seq;
};

static uint64_t big_seed(int kind)
{
    return pat_seed(0, 90, (uint64_t)kind);
}

static void initiator(int kind, uint64_t key, uint8_t *src)
{
    static struct msg ping[2], stop, chk;
    pat_fill(src, BIG, big_seed(kind), 0);
    t_barrier(&J);
    double t0 = t_now();
    CHECK_OK(uln_put(ep0, 1, src, BIG, key, 0, 0xb16, 0));
    uint32_t trips = 0, trips_before = 0;
    bool put_done = false, ping_out = true;
    int sends_out = 1;
    ping[0] = (struct msg){PING, 0};
    CHECK_OK(uln_nap(ep1, 1, &ping[0], sizeof ping[0], 0x9000, 0));
    double t_put = 0, last = t_now();
    while (!put_done || ping_out || sends_out) {
        struct uln_cqe ev[16];
        int n = uln_cq_poll(cq, ev, 16);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->peer == 1);
            if (e->op == ULN_OP_PUT) {
                CHECK_CQE(e, e->user_data == 0xb16 && e->ep == 0 && e->len == BIG && !put_done);
                put_done = true;
                trips_before = trips;
                t_put = t_now() - t0;
            } else if (e->op == ULN_OP_NAP) {
                CHECK_CQE(e, e->ep == 1 && sends_out > 0);
                sends_out--;
            } else {
                struct msg m;
                CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->ep == 1 && e->len == sizeof m);
                memcpy(&m, e->data, sizeof m);
                t_release(cq, e);
                CHECK(m.magic == PING && m.seq == trips && ping_out);
                trips++;
                ping_out = false;
                if (!put_done) {
                    struct msg *p = &ping[trips & 1]; /* the other slot may still be in flight */
                    *p = (struct msg){PING, trips};
                    CHECK_OK(uln_nap(ep1, 1, p, sizeof *p, 0x9000 + trips, 0));
                    ping_out = true;
                    sends_out++;
                }
            }
        }
        if (n > 0) last = t_now();
        CHECKF(t_now() - last < 30, "fairness: stuck (put_done %d, %u trips)", put_done, trips);
    }
    printf("rank0: %u MiB PUT into %s memory took %.1f ms; %u NAP round trips completed on "
           "endpoint 1 meanwhile\n",
           BIG >> 20, t_kind_name(kind), t_put * 1e3, trips_before);
    CHECKF(trips_before >= MIN_TRIPS,
           "only %u ping-pongs on endpoint 1 completed before the %u MiB PUT on endpoint 0 "
           "(want >= %d): one endpoint starves the other",
           trips_before, BIG >> 20, MIN_TRIPS);
    stop = (struct msg){STOP, trips};
    chk = (struct msg){CHECKMSG, (uint32_t)kind};
    CHECK_OK(uln_nap(ep1, 1, &stop, sizeof stop, 0x5, 0));
    CHECK_OK(uln_nap(ep0, 1, &chk, sizeof chk, 0x6, 0));
    struct uln_cqe e[3];
    t_cq_take(cq, e, 3, 60000, "stop/check completions and rank 1's verdict");
    int naps = 0, recv = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_CQE(&e[i], e[i].status == 0);
        if (e[i].op == ULN_OP_NAP) {
            naps++;
        } else {
            CHECK_CQE(&e[i], e[i].op == ULN_OP_NAP_RECV && e[i].ep == 0);
            t_release(cq, &e[i]);
            recv++;
        }
    }
    CHECK(naps == 2 && recv == 1);
}

static void target(int kind, struct t_region *r)
{
    static struct msg pong[64], verdict;
    unsigned slot = 0;
    int sends_out = 0;
    bool stopped = false, checked = false;
    t_barrier(&J);
    double last = t_now();
    while (!stopped || !checked || sends_out) {
        struct uln_cqe ev[16];
        int n = uln_cq_poll(cq, ev, 16);
        CHECK(n >= 0);
        if (n == 0) {
            CHECKF(t_now() - last < 30, "fairness target: stuck");
            int w = uln_cq_wait(cq, 5);
            CHECK(w == 0 || w == -ETIMEDOUT);
            continue;
        }
        last = t_now();
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->peer == 0);
            if (e->op == ULN_OP_NAP) {
                sends_out--;
                continue;
            }
            struct msg m;
            CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->len == sizeof m);
            memcpy(&m, e->data, sizeof m);
            t_release(cq, e);
            if (m.magic == PING) {
                CHECK_CQE(e, e->ep == 1);
                struct msg *p = &pong[slot++ % 64];
                *p = m;
                CHECK_OK(uln_nap(ep1, 0, p, sizeof *p, 0x7000 + m.seq, 0));
                sends_out++;
            } else if (m.magic == STOP) {
                CHECK_CQE(e, e->ep == 1);
                stopped = true;
            } else {
                CHECK_CQE(e, e->ep == 0 && m.magic == CHECKMSG && m.seq == (uint32_t)kind);
                CHECK_PAT(r->buf, BIG, big_seed(kind), 0, "the %u MiB PUT into %s memory",
                          BIG >> 20, t_kind_name(kind));
                verdict = (struct msg){CHECKMSG, 1};
                CHECK_OK(uln_nap(ep0, 0, &verdict, sizeof verdict, 0x8, 0));
                sends_out++;
                checked = true;
            }
        }
    }
}

/* ---- alone ---------------------------------------------------------------- */

static void alone_initiator(struct uln_cq *cq0, struct uln_cq *cq1, uint64_t key, uint8_t *src)
{
    static struct msg pong[64], stop;
    pat_fill(src, BIG, big_seed(T_NKINDS), 0);
    t_barrier(&J);
    CHECK_OK(uln_put(ep0, 1, src, BIG, key, 0, 0xb16, 0));
    uint32_t pings = 0, pings_before = 0;
    int sends_out = 0;
    bool put_done = false, checked = false;
    double last = t_now();
    while (!checked || sends_out) {
        struct uln_cqe ev[16];
        int n = uln_cq_poll(cq0, ev, 16); /* the PUT, pings, rank 1's verdict: endpoint 0 */
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->peer == 1 && e->ep == 0);
            if (e->op == ULN_OP_PUT) {
                CHECK_CQE(e, e->user_data == 0xb16 && !put_done);
                put_done = true;
                pings_before = pings;
                stop = (struct msg){STOP, pings};
                CHECK_OK(uln_nap(ep1, 1, &stop, sizeof stop, 0x5, 0));
                sends_out++;
                continue;
            }
            struct msg m;
            CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->len == sizeof m);
            memcpy(&m, e->data, sizeof m);
            t_release(cq0, e);
            if (m.magic == CHECKMSG) { /* rank 1 found the PUT's data intact */
                CHECK(put_done && m.seq == 1);
                checked = true;
            } else if (!put_done) {
                CHECK(m.magic == PING && m.seq == pings);
                struct msg *p = &pong[pings++ % 64];
                *p = m;
                CHECK_OK(uln_nap(ep1, 1, p, sizeof *p, 0x7000 + m.seq, 0));
                sends_out++;
            } /* else a ping that crossed the stop: not answered */
        }
        int k = uln_cq_poll(cq1, ev, 16); /* our answers leaving endpoint 1 */
        CHECK(k >= 0);
        for (int i = 0; i < k; i++)
            CHECK_CQE(&ev[i], ev[i].status == 0 && ev[i].op == ULN_OP_NAP && ev[i].ep == 1);
        sends_out -= k;
        if (n + k > 0) last = t_now();
        CHECKF(t_now() - last < 30, "alone: stuck (put_done %d, %u pings)", put_done, pings);
    }
    printf("rank0: alone: %u pings taken by the endpoint of a %u MiB PUT before it completed\n",
           pings_before, BIG >> 20);
    CHECKF(pings_before >= MIN_TRIPS,
           "only %u pings taken before the %u MiB PUT on the same endpoint (want >= %d): "
           "an endpoint alone on its CQ starves its own receive side",
           pings_before, BIG >> 20, MIN_TRIPS);
}

static void alone_target(struct uln_cq *cq0, struct uln_cq *cq1, struct t_region *r)
{
    static struct msg ping[64], verdict;
    uint32_t seq = 0;
    int sends_out = 1;
    bool stopped = false;
    t_barrier(&J);
    ping[0] = (struct msg){PING, 0};
    CHECK_OK(uln_nap(ep0, 0, &ping[0], sizeof ping[0], 0x9000, 0));
    double last = t_now();
    while (!stopped || sends_out) {
        struct uln_cqe ev[16];
        int n = uln_cq_poll(cq0, ev, 16); /* our pings and the verdict leaving */
        CHECK(n >= 0);
        for (int i = 0; i < n; i++)
            CHECK_CQE(&ev[i], ev[i].status == 0 && ev[i].op == ULN_OP_NAP && ev[i].ep == 0);
        sends_out -= n;
        int k = uln_cq_poll(cq1, ev, 16); /* rank 0's answers, then its stop */
        CHECK(k >= 0);
        for (int i = 0; i < k; i++) {
            struct uln_cqe *e = &ev[i];
            struct msg m;
            CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_NAP_RECV && e->ep == 1 &&
                             e->len == sizeof m);
            memcpy(&m, e->data, sizeof m);
            t_release(cq1, e);
            if (m.magic == STOP) {
                CHECK_PAT(r->buf, BIG, big_seed(T_NKINDS), 0, "the %u MiB PUT, alone", BIG >> 20);
                verdict = (struct msg){CHECKMSG, 1};
                CHECK_OK(uln_nap(ep0, 0, &verdict, sizeof verdict, 0x8, 0));
                sends_out++;
                stopped = true;
            } else {
                CHECK(m.magic == PING && m.seq == seq && !stopped);
                struct msg *p = &ping[++seq % 64];
                *p = (struct msg){PING, seq};
                CHECK_OK(uln_nap(ep0, 0, p, sizeof *p, 0x9000 + seq, 0));
                sends_out++;
            }
        }
        if (n + k > 0) last = t_now();
        CHECKF(t_now() - last < 30, "alone target: stuck (%u pings)", seq);
    }
}

/* Endpoints 0 and 1 again (new lives of the indices), each on a CQ of its
 * own. Both ranks open them before either sends: what reaches an index
 * before its owner opened it again belongs to the old life and is refused
 * (ulnet.h: uln_ep_close). */
static void run_alone(uint8_t *src)
{
    struct uln_cq *cq0, *cq1;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq0));
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq1));
    CHECK_OK(uln_ep_open(J.ctx, cq0, cq0, &ep0));
    CHECK_OK(uln_ep_open(J.ctx, cq1, cq1, &ep1));
    struct t_region r;
    uint64_t mine = 0, all[2];
    if (J.rank == 1) {
        t_region_new(&J, &r, T_KIND_SHM, BIG, ULN_ACCESS_REMOTE_WRITE);
        memset(r.buf, 0, BIG);
        mine = r.key;
    }
    t_barrier(&J); /* both lives open */
    t_exchange(&J, ep0, cq0, &mine, 1, all);
    if (J.rank == 0)
        alone_initiator(cq0, cq1, all[1], src);
    else
        alone_target(cq0, cq1, &r);
    t_barrier(&J);
    if (J.rank == 1) t_region_free(&J, &r);
    CHECK_OK(uln_ep_close(ep0));
    CHECK_OK(uln_ep_close(ep1));
    CHECK_OK(uln_cq_close(cq0));
    CHECK_OK(uln_cq_close(cq1));
}

int main(void)
{
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep0));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep1));
    if (J.rank == 0) printf("rank0: chunk_bytes=%u\n", J.info.chunk_bytes);
    uint8_t *src = J.rank == 0 ? t_xmalloc(BIG) : NULL;
    for (int kind = 0; kind < T_NKINDS; kind++) {
        struct t_region r;
        uint64_t mine = 0, all[2];
        if (J.rank == 1) {
            t_region_new(&J, &r, kind, BIG, ULN_ACCESS_REMOTE_WRITE);
            memset(r.buf, 0, BIG); /* fault the pages in now, not inside the PUT */
            mine = r.key;
        }
        t_exchange(&J, ep0, cq, &mine, 1, all);
        if (J.rank == 0)
            initiator(kind, all[1], src);
        else
            target(kind, &r);
        t_barrier(&J);
        if (J.rank == 1) t_region_free(&J, &r);
    }
    CHECK_OK(uln_ep_close(ep0));
    CHECK_OK(uln_ep_close(ep1));
    CHECK_OK(uln_cq_close(cq));
    run_alone(src);
    free(src);
    return t_finish(&J);
}
