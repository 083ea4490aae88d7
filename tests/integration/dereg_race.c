/*
 * dereg_race.c - uln_mr_dereg while a peer hammers small PUTs at the region.
 *
 * Small PUTs to the region a peer reached last take the shortest path ulnet
 * has: no translation lookup, a plain store to announce itself where the
 * owner fences with membarrier (mr.c). This checks the one promise that must
 * survive that: once uln_mr_dereg returns, not one byte lands in the region.
 *
 * Each round, rank 1 registers a region (new key; uln_mem_alloc memory on
 * even rounds, which the fast path maps, malloc'd memory on odd ones) and
 * sends the key; rank 0 streams 8-byte PUTs at it (every 4th an atomic
 * add), ULN_SILENT with a flush every few, as fast as it can. After a random
 * pause rank 1 deregisters, fills the region with FILL at once, and keeps
 * checking it while rank 0 is still streaming (rounds 2-3 of every 4 with
 * a ULN_MR_TRANSIENT region, whose dereg leaves the fence to its accessors); rank 0 goes on until
 * the refusals come (-ENOKEY, every one of them), then a while longer, and says it stopped. Any
 * byte not FILL fails the round.
 *
 *   ulnrun -n 2 it_dereg_race [rounds]
 */
#include "common.h"

#define RLEN   4096u
#define FILL   0xa5
#define PAT    0x5a
#define AFTER  1000 /* PUTs posted after the first refusal seen, each refused */
#define MSG_GO 0x47

static struct t_job J;

/* Rank 1: the key of this round's region, to rank 0. */
static void send_key(struct uln_ep *ep, uint64_t key)
{
    CHECK_OK(uln_nap(ep, 0, &key, sizeof key, 0, ULN_INLINE | ULN_SILENT));
}

/* A NAP from the peer (8 bytes: a key, or 1 byte: a tag), serving meanwhile. */
static uint64_t take_nap(struct uln_cq *cq, size_t len)
{
    struct uln_cqe e = t_cq_take1(cq, 60000, "a NAP from the peer");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == len);
    uint64_t v = 0;
    memcpy(&v, e.data, len);
    t_release(cq, &e);
    return v;
}

/* Rank 1's round: register, let the stream run, dereg, watch the region.
 * Returns whether any PUT landed before the dereg. */
static bool owner_round(struct uln_ep *ep, struct uln_cq *cq, int round, uint64_t *rng)
{
    struct t_region reg;
    /* Every other pair of rounds the region is ULN_MR_TRANSIENT: its dereg
     * does not fence, its accessors do. */
    unsigned transient = round / 2 % 2 ? ULN_MR_TRANSIENT : 0;
    t_region_new(&J, &reg, round % 2 ? T_KIND_MALLOC : T_KIND_SHM, RLEN,
                 ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC | transient);
    memset(reg.buf, 0, RLEN);
    send_key(ep, reg.key);
    /* 0 to ~500 us: early deregs race the first PUTs (the window's fill),
     * late ones a stream in full flow. Polling serves ring-path PUTs. */
    double until = t_now() + (double)(t_rand(rng) % 500) * 1e-6;
    while (t_now() < until) {
        struct uln_cqe e;
        CHECK_RC(uln_cq_poll(cq, &e, 1), 0);
    }
    CHECK_OK(uln_mr_dereg(reg.mr));
    /* Nobody writes from here: what landed can be looked at without a race. */
    bool landed = memchr(reg.buf, PAT, RLEN) != NULL;
    memset(reg.buf, FILL, RLEN);
    /* Rank 0 is still posting: look at every byte, again and again, until it
     * says it stopped (its NAP is the only entry our CQ can get). */
    for (;;) {
        CHECK_BYTES(reg.buf, RLEN, FILL, "round %d (%s): region after uln_mr_dereg returned", round,
                    t_kind_name(reg.kind));
        struct uln_cqe e;
        int n = uln_cq_poll(cq, &e, 1);
        CHECK(n >= 0);
        if (n == 0) continue;
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == 1 &&
                          *(const uint8_t *)e.data == MSG_GO);
        t_release(cq, &e);
        break;
    }
    CHECK_BYTES(reg.buf, RLEN, FILL, "round %d (%s): region after the stream stopped", round,
                t_kind_name(reg.kind));
    reg.mr = NULL; /* deregistered above */
    t_region_free(&J, &reg);
    return landed;
}

/* Completions on rank 0's CQ: flushes (user_data FLUSH_MID, FLUSH_END),
 * the PUTs posted to complete (LOUD_BEFORE, LOUD_AFTER: posted before or
 * after we saw the first refusal) and refused ones (-ENOKEY, silent or not:
 * errors always complete). Returns the refusals; *end: FLUSH_END came. */
enum { SILENT = 0, LOUD_BEFORE, LOUD_AFTER, FLUSH_MID, FLUSH_END };

static int drain(struct uln_cq *cq, bool *end)
{
    struct uln_cqe ev[64];
    int n = uln_cq_poll(cq, ev, 64), refused = 0;
    CHECK(n >= 0);
    for (int i = 0; i < n; i++) {
        const struct uln_cqe *e = &ev[i];
        if (e->op == ULN_OP_FLUSH) {
            CHECK_CQE(e,
                      e->status == 0 && (e->user_data == FLUSH_MID || e->user_data == FLUSH_END));
            if (e->user_data == FLUSH_END) *end = true;
            continue;
        }
        CHECK_CQE(e, e->op == ULN_OP_PUT || e->op == ULN_OP_ATOMIC);
        if (e->status == 0) {
            /* Posted once the key was seen dead, it must not succeed. */
            CHECK_CQE(e, e->user_data == LOUD_BEFORE);
        } else {
            CHECK_CQE(e, e->status == -ENOKEY);
            refused++;
        }
    }
    return refused;
}

/* Rank 0's round: PUTs until refused, AFTER more (each refused), then stop.
 * Every 16th PUT completes, the others are silent; a flush every 32. */
static void stream_round(struct uln_ep *ep, struct uln_cq *cq)
{
    uint64_t key = take_nap(cq, 8), v, posted = 0, after = 0;
    memset(&v, PAT, sizeof v);
    bool refused = false, end = false;
    double deadline = t_now() + 30;
    while (after < AFTER) {
        CHECKF(t_now() < deadline, "no -ENOKEY 30 s into the round (%" PRIu64 " posted)", posted);
        bool loud = posted % 16 == 15;
        uint64_t ud = !loud ? SILENT : refused ? LOUD_AFTER : LOUD_BEFORE;
        uint64_t off = (posted * 8) % RLEN;
        unsigned fl = loud ? 0 : ULN_SILENT;
        /* Every 4th op an atomic add: it takes the same window. */
        int rc = posted % 4 == 3
                     ? uln_atomic(ep, 1, ULN_ATOMIC_ADD, 8, key, off, 1, 0, NULL, ud, fl)
                     : uln_put(ep, 1, &v, sizeof v, key, off, ud, fl);
        if (rc != -EAGAIN) {
            CHECK_OK(rc);
            if (refused) after++;
            if (++posted % 32 == 0) CHECK_OK(uln_ep_flush(ep, FLUSH_MID));
        }
        if (drain(cq, &end)) refused = true;
    }
    /* Completions come in posting order: this one comes last. */
    CHECK_OK(uln_ep_flush(ep, FLUSH_END));
    while (!end) {
        CHECKF(t_now() < deadline + 30, "the round's last flush did not complete");
        drain(cq, &end);
    }
    uint8_t go = MSG_GO;
    CHECK_OK(uln_nap(ep, 1, &go, 1, 0, ULN_INLINE | ULN_SILENT));
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int landed = 0;
    for (int r = 0; r < rounds; r++) {
        if (J.rank == 1)
            landed += owner_round(ep, cq, r, &rng);
        else
            stream_round(ep, cq);
    }
    if (J.rank == 1) {
        printf("rank1: %d rounds, %d with PUTs landed before the dereg\n", rounds, landed);
        CHECKF(landed > 0, "no PUT landed in any of %d rounds: the race was never run", rounds);
    }
    return t_finish(&J);
}
