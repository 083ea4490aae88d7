/*
 * flush_multi_ep - uln_ep_flush, several endpoints with their own CQs, and
 * uln_cq_poll taking many entries at once.
 *
 * poll: rank 0 sends 40 NAPs; rank 1, once they are all sent, takes them with
 *   uln_cq_poll(cq, out, 16): never more than max (sentinel entries after
 *   out[max-1] stay untouched), more than one at a time, all 40 in order.
 * flush: rank 0 posts big and small PUTs, a GET, a NAP and ULN_SILENT PUTs,
 *   then uln_ep_flush. The FLUSH entry must come after every earlier
 *   operation's entry, and a GET posted after the flush completed must see
 *   the silent PUTs' data (GET is not ordered after PUTs; flush is how a
 *   program makes it so). A flush with nothing outstanding completes too.
 * endpoints: 4 more endpoints on each rank, each with its own CQ. NAPs and
 *   put_imm on endpoint i arrive at the peer's endpoint i, on its CQ only, and
 *   local completions appear only on the CQ of the endpoint that posted.
 */
#include "common.h"

#define NPOLL  40
#define PMAX   16
#define NEP    4
#define REGION (32u << 20)
#define SILENT 8
#define SILSZ  65536u
#define SILOFF (24u << 20)
#define GETOFF (20u << 20)
#define GETSZ  (4u << 20)
#define DONE   0xd0d0d0d0u

static struct t_job J;
static struct uln_cq *cq0, *cqs[NEP + 1];
static struct uln_ep *ep0, *eps[NEP + 1];

static uint64_t region_seed(int kind)
{
    return pat_seed(1, 110, (uint64_t)kind);
}

static void part_poll(void)
{
    static uint64_t payload[NPOLL];
    if (J.rank == 0) {
        for (int i = 0; i < NPOLL; i++) {
            payload[i] = 0x5000 + (uint64_t)i;
            CHECK_OK(uln_nap(ep0, 1, &payload[i], 8, (uint64_t)i, 0));
        }
        struct uln_cqe e[NPOLL];
        t_cq_take(cq0, e, NPOLL, 30000, "40 NAP completions");
        for (int i = 0; i < NPOLL; i++)
            CHECK_CQE(&e[i], e[i].status == 0 && e[i].op == ULN_OP_NAP);
        t_barrier(&J);
        return;
    }
    t_barrier(&J); /* all 40 are sent */
    struct uln_cqe out[PMAX + 4];
    int got = 0, biggest = 0;
    double deadline = t_now() + 30;
    while (got < NPOLL) {
        memset(out, 0xee, sizeof out);
        int n = uln_cq_poll(cq0, out, PMAX);
        CHECKF(n >= 0 && n <= PMAX, "uln_cq_poll(max %d) returned %d", PMAX, n);
        for (int k = PMAX; k < PMAX + 4; k++)
            CHECK_BYTES(&out[k], sizeof out[k], 0xee, "out[%d] after a poll with max %d", k, PMAX);
        for (int k = 0; k < n; k++) {
            CHECK_CQE(&out[k], out[k].status == 0 && out[k].op == ULN_OP_NAP_RECV &&
                                   out[k].len == 8 && out[k].ep == 0);
            uint64_t v;
            memcpy(&v, out[k].data, 8);
            CHECKF(v == 0x5000 + (uint64_t)got, "NAP %d carries %#" PRIx64, got, v);
            got++;
        }
        /* release only after the whole batch was read: entries stay valid */
        for (int k = 0; k < n; k++)
            t_release(cq0, &out[k]);
        if (n > biggest) biggest = n;
        if (n == 0) {
            CHECKF(t_now() < deadline, "only %d of %d NAPs after 30 s", got, NPOLL);
            int w = uln_cq_wait(cq0, 10);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    printf("rank1: %d NAPs taken with max %d, at most %d per poll\n", NPOLL, PMAX, biggest);
    CHECKF(biggest > 1, "40 NAPs waiting and uln_cq_poll(max %d) never returned more than 1", PMAX);
}

static void part_flush(const uint64_t *keys)
{
    uint8_t *big = t_xmalloc((16u << 20) + 8);
    uint8_t *mid = t_xmalloc(1u << 20);
    uint8_t *sil = t_xmalloc(SILENT * SILSZ);
    uint8_t *gdst = t_xmalloc(GETSZ > SILENT * SILSZ ? GETSZ : SILENT * SILSZ);
    static uint64_t note = 42;
    for (int it = 0; it < 5; it++) {
        size_t bsz = (16u << 20) + (size_t)it;
        pat_fill(big, bsz, pat_seed(0, 111, (uint64_t)it), 0);
        pat_fill(mid, 1u << 20, pat_seed(0, 112, (uint64_t)it), 0);
        for (int k = 0; k < SILENT; k++)
            pat_fill(sil + k * SILSZ, SILSZ, pat_seed(0, 113, (uint64_t)(it * SILENT + k)), 0);
        CHECK_OK(uln_put(ep0, 1, big, bsz, keys[0], 0, 1, 0));
        CHECK_OK(uln_put(ep0, 1, mid, 1u << 20, keys[1], 0, 2, 0));
        CHECK_OK(uln_get(ep0, 1, gdst, GETSZ, keys[0], GETOFF, 3, 0));
        CHECK_OK(uln_nap(ep0, 1, &note, 8, 4, 0));
        for (int k = 0; k < SILENT; k++)
            CHECK_OK(uln_put(ep0, 1, sil + k * SILSZ, SILSZ, keys[1], SILOFF + k * SILSZ,
                             100 + (uint64_t)k, ULN_SILENT));
        CHECK_OK(uln_ep_flush(ep0, 0xf1));
        bool seen[5] = {false};
        for (;;) {
            struct uln_cqe e = t_cq_take1(cq0, 60000, "operations before the flush");
            CHECK_CQE(&e, e.status == 0 && e.ep == 0);
            if (e.op == ULN_OP_FLUSH) {
                CHECK_CQE(&e, e.user_data == 0xf1);
                CHECKF(seen[1] && seen[2] && seen[3] && seen[4],
                       "FLUSH completed before earlier ops (PUT %d PUT %d GET %d NAP %d)", seen[1],
                       seen[2], seen[3], seen[4]);
                break;
            }
            CHECK_CQE(&e, e.user_data >= 1 && e.user_data <= 4 && !seen[e.user_data]);
            static const int op[] = {0, ULN_OP_PUT, ULN_OP_PUT, ULN_OP_GET, ULN_OP_NAP};
            CHECK_CQE(&e, e.op == op[e.user_data]);
            seen[e.user_data] = true;
        }
        CHECK_PAT(gdst, GETSZ, region_seed(0), GETOFF, "GET before the flush, iteration %d", it);
        /* The flush is done: a GET now sees the silent PUTs. */
        memset(gdst, 0, SILENT * SILSZ);
        CHECK_OK(uln_get(ep0, 1, gdst, SILENT * SILSZ, keys[1], SILOFF, 5, 0));
        struct uln_cqe e = t_cq_take1(cq0, 30000, "GET after the flush");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET && e.user_data == 5);
        for (int k = 0; k < SILENT; k++)
            CHECK_PAT(gdst + k * SILSZ, SILSZ, pat_seed(0, 113, (uint64_t)(it * SILENT + k)), 0,
                      "iteration %d: silent PUT %d read back after the flush", it, k);
        /* And the big PUT is whole (its own completion said so already). */
        CHECK_OK(uln_get(ep0, 1, gdst, GETSZ, keys[0], bsz - GETSZ, 6, 0));
        e = t_cq_take1(cq0, 30000, "GET of the big PUT's tail");
        CHECK_CQE(&e, e.status == 0 && e.user_data == 6);
        CHECK_PAT(gdst, GETSZ, pat_seed(0, 111, (uint64_t)it), bsz - GETSZ,
                  "iteration %d: tail of the big PUT", it);
    }
    /* Nothing outstanding: the flush completes anyway. */
    CHECK_OK(uln_ep_flush(ep0, 0xf2));
    struct uln_cqe e = t_cq_take1(cq0, 30000, "flush with nothing outstanding");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_FLUSH && e.user_data == 0xf2);
    free(big);
    free(mid);
    free(sil);
    free(gdst);
}

static void part_eps_initiator(const uint64_t *keys)
{
    static uint64_t val[NEP + 1];
    for (int i = 1; i <= NEP; i++) {
        val[i] = (uint64_t)i;
        CHECK_OK(uln_nap(eps[i], 1, &val[i], 8, 0xa00 + (uint64_t)i, 0));
        CHECK_OK(uln_put_imm(eps[i], 1, &val[i], 8, keys[2], 64 * (uint64_t)i, 0xe0 + (uint64_t)i,
                             0xb00 + (uint64_t)i, 0));
    }
    for (int i = 1; i <= NEP; i++) {
        struct uln_cqe e[3];
        t_cq_take(cqs[i], e, 3, 30000, "2 local completions and a reply on this endpoint's CQ");
        int nap = 0, put = 0, reply = 0;
        for (int k = 0; k < 3; k++) {
            CHECK_CQE(&e[k], e[k].status == 0 && e[k].ep == (uint16_t)i && e[k].peer == 1);
            if (e[k].op == ULN_OP_NAP) {
                CHECK_CQE(&e[k], e[k].user_data == 0xa00 + (uint64_t)i);
                nap++;
            } else if (e[k].op == ULN_OP_PUT) {
                CHECK_CQE(&e[k], e[k].user_data == 0xb00 + (uint64_t)i);
                put++;
            } else {
                CHECK_CQE(&e[k], e[k].op == ULN_OP_NAP_RECV && e[k].len == 8);
                uint64_t v;
                memcpy(&v, e[k].data, 8);
                CHECK(v == 100 + (uint64_t)i);
                t_release(cqs[i], &e[k]);
                reply++;
            }
        }
        CHECK(nap == 1 && put == 1 && reply == 1);
    }
}

/* Rank 1: serve parts flush and endpoints until rank 0 says done. */
static void responder(struct t_region *b)
{
    static uint64_t reply[NEP + 1];
    int naps = 0, remotes = 0, sends = 0;
    bool done = false;
    double last = t_now();
    while (!done || naps < NEP || remotes < NEP || sends > 0) {
        int any = 0;
        for (int i = 0; i <= NEP; i++) {
            struct uln_cq *q = i == 0 ? cq0 : cqs[i];
            struct uln_cqe ev[8];
            int n = uln_cq_poll(q, ev, 8);
            CHECK(n >= 0);
            any += n;
            for (int k = 0; k < n; k++) {
                struct uln_cqe *e = &ev[k];
                CHECK_CQE(e, e->status == 0 && e->peer == 0 && e->ep == (uint16_t)i);
                if (e->op == ULN_OP_NAP) {
                    sends--;
                } else if (e->op == ULN_OP_PUT_REMOTE) {
                    CHECK_CQE(e, i > 0 && e->imm == 0xe0 + (uint64_t)i &&
                                     e->offset == 64 * (uint64_t)i && e->len == 8);
                    uint64_t v;
                    memcpy(&v, (uint8_t *)b->buf + 64 * i, 8);
                    CHECK(v == (uint64_t)i);
                    remotes++;
                } else {
                    CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->len == 8);
                    uint64_t v;
                    memcpy(&v, e->data, 8);
                    t_release(q, e);
                    if (i == 0) {
                        if (v == DONE)
                            done = true;
                        else
                            CHECK(v == 42); /* part flush's NAP */
                    } else {
                        CHECK(v == (uint64_t)i);
                        reply[i] = 100 + (uint64_t)i;
                        CHECK_OK(uln_nap(eps[i], 0, &reply[i], 8, (uint64_t)i, 0));
                        sends++;
                        naps++;
                    }
                }
            }
        }
        if (any) {
            last = t_now();
        } else {
            CHECKF(t_now() - last < 60, "responder idle for 60 s (done %d, %d NAPs, %d remotes)",
                   done, naps, remotes);
            int w = uln_cq_wait(cq0, 1);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    CHECK(naps == NEP && remotes == NEP);
}

int main(void)
{
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq0));
    CHECK_OK(uln_ep_open(J.ctx, cq0, cq0, &ep0));
    for (int i = 1; i <= NEP; i++) {
        CHECK_OK(uln_cq_open(J.ctx, 64, &cqs[i]));
        CHECK_OK(uln_ep_open(J.ctx, cqs[i], cqs[i], &eps[i]));
        CHECK(uln_ep_index(eps[i]) == i);
    }
    struct t_region reg[T_NKINDS], b;
    uint64_t mine[3] = {0}, all[6];
    if (J.rank == 1) {
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&J, &reg[k], k, REGION, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
            pat_fill(reg[k].buf, REGION, region_seed(k), 0);
            mine[k] = reg[k].key;
        }
        t_region_new(&J, &b, T_KIND_MALLOC, 4096, ULN_ACCESS_REMOTE_WRITE);
        memset(b.buf, 0, 4096);
        mine[2] = b.key;
    }
    t_exchange(&J, ep0, cq0, mine, 3, all);

    part_poll();
    if (J.rank == 0) {
        part_flush(all + 3);
        part_eps_initiator(all + 3);
        static uint64_t done = DONE;
        CHECK_OK(uln_nap(ep0, 1, &done, 8, 0xd, 0));
        struct uln_cqe e = t_cq_take1(cq0, 30000, "done NAP completion");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
    } else {
        responder(&b);
    }
    for (int i = 1; i <= NEP; i++)
        t_cq_expect_empty(cqs[i], 20, "an endpoint's CQ at the end");
    t_cq_expect_empty(cq0, 20, "endpoint 0's CQ at the end");
    t_barrier(&J);
    if (J.rank == 1) {
        for (int k = 0; k < T_NKINDS; k++)
            t_region_free(&J, &reg[k]);
        t_region_free(&J, &b);
    }
    for (int i = 1; i <= NEP; i++) {
        CHECK_OK(uln_ep_close(eps[i]));
        CHECK_OK(uln_cq_close(cqs[i]));
    }
    CHECK_OK(uln_ep_close(ep0));
    CHECK_OK(uln_cq_close(cq0));
    return t_finish(&J);
}
