/*
 * get_cross - two ranks GET from each other at the same time, with many large
 * GETs outstanding on both sides.
 *
 * When GETs are served through the rings (ULN_SHM_DIRECT=0, and for malloc'd
 * memory without process_vm_readv) each rank must keep serving its peer's reads
 * while it waits for its own: a rank that only drives its own requests, or a
 * ring that fills with requests in both directions, deadlocks here. Each GET
 * lands in its own slot of the destination buffer with canary gaps between
 * slots; the data is checked against the owner's pattern at the source offset.
 *
 *   get_cross            two rounds of 150 GETs, 16 MiB down to a few bytes
 *   get_cross N LEN      one round of N GETs of LEN bytes each: with a send queue
 *                        deep enough to hold them all, more requests are in
 *                        flight than the target's request ring holds, which
 *                        must slow the initiator, never stall delivery
 */
#include "common.h"

#define REGION (64u << 20)
#define GAP    64
#define CANARY 0x3c
#define ROUNDS 2

/* The deep variant's shape (argv), 0: the default mix. */
static int deep_n;
static uint64_t deep_len;

struct g {
    int kind;
    uint64_t roff, len, loff;
};

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

static uint64_t src_seed(int owner, int kind)
{
    return pat_seed(owner, 80, (uint64_t)kind);
}

static int build(struct g *gs, int round, int initiator, uint64_t *total)
{
    uint64_t rng = 0x600d + (uint64_t)round * 1000 + (uint64_t)initiator;
    int n = 0;
    uint64_t loff = GAP;
    for (int i = 0; i < (deep_n ? deep_n : 150); i++) {
        struct g *x = &gs[n++];
        x->kind = (int)(t_rand(&rng) & 1);
        if (deep_n)
            x->len = deep_len;
        else if (i < 2)
            x->len = (16u << 20) + (uint64_t)i;
        else if (i < 20)
            x->len = (1u << 20) + t_rand(&rng) % 4096;
        else
            x->len = t_rand(&rng) % 65536;
        x->roff = t_rand(&rng) % (REGION - x->len + 1);
        x->loff = loff;
        loff += x->len + GAP;
    }
    *total = loff;
    return n;
}

int main(int argc, char **argv)
{
    if (argc == 3) {
        deep_n = atoi(argv[1]);
        deep_len = strtoull(argv[2], NULL, 0);
    }
    t_open(&J, 2);
    CHECKF(deep_n >= 0 && deep_len <= REGION, "usage: get_cross [N LEN<=%u]", REGION);
    int peer = 1 - J.rank;
    CHECK_OK(uln_cq_open(J.ctx, 512, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS];
    uint64_t mine[T_NKINDS], all[2 * T_NKINDS];
    for (int k = 0; k < T_NKINDS; k++) {
        t_region_new(&J, &reg[k], k, REGION, ULN_ACCESS_REMOTE_READ);
        pat_fill(reg[k].buf, REGION, src_seed(J.rank, k), 0);
        mine[k] = reg[k].key;
    }
    t_exchange(&J, ep, cq, mine, T_NKINDS, all);
    const uint64_t *keys = all + (size_t)peer * T_NKINDS;

    struct g *gs = t_xmalloc(sizeof *gs * (size_t)(deep_n ? deep_n : 150));
    for (int round = 0; round < (deep_n ? 1 : ROUNDS); round++) {
        uint64_t total;
        int n = build(gs, round, J.rank, &total);
        uint8_t *dst = t_xmalloc(total);
        memset(dst, CANARY, total);
        uint8_t *seen = calloc((size_t)n, 1);
        CHECK(seen != NULL);
        t_barrier(&J); /* both start at once */
        double t0 = t_now(), last = t0;
        int posted = 0, done = 0, max_out = 0;
        bool peer_done = false;
        while (done < n) {
            while (posted < n) {
                struct g *x = &gs[posted];
                int rc = uln_get(ep, peer, dst + x->loff, x->len, keys[x->kind], x->roff,
                                 (uint64_t)posted, 0);
                if (rc == -EAGAIN) break;
                CHECKF(rc == 0, "GET %d: %d (%s)", posted, rc, t_errname(rc));
                posted++;
            }
            if (posted - done > max_out) max_out = posted - done;
            struct uln_cqe ev[32];
            int r = uln_cq_poll(cq, ev, 32);
            CHECK(r >= 0);
            for (int i = 0; i < r; i++) {
                struct uln_cqe *e = &ev[i];
                if (e->op == ULN_OP_NAP_RECV) { /* the peer finished first */
                    CHECK_CQE(e, e->status == 0 && e->peer == peer && !peer_done);
                    t_release(cq, e);
                    peer_done = true;
                    continue;
                }
                CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_GET && e->peer == peer);
                CHECK_CQE(e, e->user_data < (uint64_t)posted && !seen[e->user_data]);
                CHECK_CQE(e, e->len == gs[e->user_data].len);
                seen[e->user_data] = 1;
                done++;
            }
            if (r > 0) {
                last = t_now();
            } else {
                CHECKF(t_now() - last < 30,
                       "round %d: %d of %d GETs done, nothing for 30 s (deadlock?)", round, done,
                       n);
                int w = uln_cq_wait(cq, 5);
                CHECK(w == 0 || w == -ETIMEDOUT);
            }
        }
        double dt = t_now() - t0;
        for (int i = 0; i < n; i++) {
            struct g *x = &gs[i];
            CHECK_PAT(dst + x->loff, x->len, src_seed(peer, x->kind), x->roff,
                      "round %d GET %d (%s, roff %" PRIu64 ", len %" PRIu64 ")", round, i,
                      t_kind_name(x->kind), x->roff, x->len);
            CHECK_BYTES(dst + x->loff - GAP, GAP, CANARY, "gap before GET %d", i);
        }
        CHECK_BYTES(dst + total - GAP, GAP, CANARY, "gap after the last GET");
        printf("rank%d: round %d: %d GETs (%.1f MiB, up to %d outstanding) in %.2f s\n", J.rank,
               round, n, total / 1048576.0, max_out, dt);
        CHECK(max_out > 1);
        free(seen);
        free(dst);
        /* Keep serving the peer's GETs until it is done too: only then is a
         * barrier (which does not drive progress) safe. */
        static uint64_t note;
        note = (uint64_t)round;
        CHECK_OK(uln_nap(ep, peer, &note, 8, 0xd0, 0));
        bool sent = false, got = peer_done;
        while (!sent || !got) {
            struct uln_cqe e = t_cq_take1(cq, 60000, "peer's end-of-round note");
            CHECK_CQE(&e, e.status == 0 && e.peer == peer);
            if (e.op == ULN_OP_NAP) {
                sent = true;
            } else {
                CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && !got);
                t_release(cq, &e);
                got = true;
            }
        }
    }
    free(gs);
    /* Only read: the sources must be intact. */
    for (int k = 0; k < T_NKINDS; k++)
        CHECK_PAT(reg[k].buf, REGION, src_seed(J.rank, k), 0, "GET source %s", t_kind_name(k));
    t_barrier(&J);
    for (int k = 0; k < T_NKINDS; k++)
        t_region_free(&J, &reg[k]);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
