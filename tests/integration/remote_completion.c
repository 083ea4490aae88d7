/*
 * remote_completion - uln_put_imm raises ULN_OP_PUT_REMOTE at the target with
 * the right imm, offset, len and peer, and the data is already visible when the
 * entry is seen (that is what lets a target consume a PUT without any other
 * message). Also the ordering rule a target relies on: a remote-completion PUT
 * or a NAP posted after a plain PUT to the same peer is delivered only after the
 * plain PUT's data is placed.
 *
 * Each endpoint has a separate send CQ and receive CQ, so the test also checks
 * that PUT_REMOTE and NAP_RECV entries land on the receive CQ and local
 * completions on the send CQ.
 *
 * Phase A: rank 0 posts many put_imm of random length (0 .. 1 MiB) to random
 * non-overlapping places in rank 1's regions of both kinds, with imm values
 * including 0 and UINT64_MAX, some ULN_SILENT (no local completion, remote one
 * still due). Rank 1 checks each entry against the table both sides derive
 * from the same seed, exactly once each, and that the gaps between the
 * destinations stay untouched.
 * Phase B: a large plain PUT followed at once by a zero-length put_imm (or a
 * NAP): when the target sees the second, the first must be all there.
 */
#include "common.h"

#define NPUT       300
#define REGION     (48u << 20)
#define BIG        (8u << 20)
#define CANARY     0x5a
#define NROUNDS_B  8
#define IMM_B_BASE 0xb0b0000000000000ull

static struct t_job J;
static struct uln_cq *scq, *rcq;
static struct uln_ep *ep;

struct put_desc {
    int kind;
    uint64_t off, len, imm;
    bool silent;
};
static struct put_desc tab[NPUT];

static void build_table(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    uint64_t next_off[T_NKINDS] = {5, 3};
    for (int k = 0; k < NPUT; k++) {
        struct put_desc *d = &tab[k];
        d->kind = (int)(t_rand(&rng) & 1);
        uint64_t r = t_rand(&rng) % 100;
        if (k < 3 || r < 5)
            d->len = 0;
        else if (r < 15)
            d->len = 1 + t_rand(&rng) % (1u << 20);
        else
            d->len = 1 + t_rand(&rng) % 65536;
        d->off = next_off[d->kind];
        next_off[d->kind] += d->len + 1 + t_rand(&rng) % 13;
        CHECK(next_off[d->kind] <= REGION);
        d->imm = k == 0 ? 0 : k == 1 ? UINT64_MAX : t_rand(&rng);
        for (int i = 0; i < k; i++) /* imm identifies the PUT at the target */
            if (tab[i].imm == d->imm) d->imm ^= 0x1234;
        d->silent = k % 7 == 3;
    }
}

static uint64_t seed_a(int kind)
{
    return pat_seed(0, 31, (uint64_t)kind);
}
static uint64_t seed_b(int i)
{
    return pat_seed(0, 32, (uint64_t)i);
}

static void initiator(const uint64_t *keys)
{
    /* The source of each put_imm is the same range of a buffer that holds the
     * whole expected region image, so all may be in flight at once. */
    uint8_t *img[T_NKINDS];
    for (int k = 0; k < T_NKINDS; k++) {
        img[k] = t_xmalloc(REGION);
        pat_fill(img[k], REGION, seed_a(k), 0);
    }
    int posted = 0, completed = 0, want = 0;
    uint8_t seen[NPUT] = {0};
    while (posted < NPUT || completed < want) {
        while (posted < NPUT) {
            struct put_desc *d = &tab[posted];
            int rc = uln_put_imm(ep, 1, img[d->kind] + d->off, d->len, keys[d->kind], d->off,
                                 d->imm, (uint64_t)posted, d->silent ? ULN_SILENT : 0);
            if (rc == -EAGAIN) break;
            CHECKF(rc == 0, "put_imm %d: %d (%s)", posted, rc, t_errname(rc));
            if (!d->silent) want++;
            posted++;
        }
        struct uln_cqe ev[16];
        int n = uln_cq_poll(scq, ev, 16);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_PUT && e->peer == 1 && e->ep == 0);
            CHECK_CQE(e, e->user_data < (uint64_t)posted && !seen[e->user_data]);
            CHECK_CQE(e, !tab[e->user_data].silent); /* ULN_SILENT: no completion */
            CHECK_CQE(e, e->len == tab[e->user_data].len);
            seen[e->user_data] = 1;
            completed++;
        }
        if (n == 0) {
            int w = uln_cq_wait(scq, 20);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    /* The receive CQ must hold nothing but the target's "phase A ok". */
    struct uln_cqe a = t_cq_take1(rcq, 30000, "phase A ack");
    CHECK_CQE(&a, a.op == ULN_OP_NAP_RECV && a.peer == 1 && a.len == 8);
    uint64_t v;
    memcpy(&v, a.data, 8);
    CHECK(v == NPUT);
    t_release(rcq, &a);
    t_cq_expect_empty(scq, 50, "send CQ after phase A (silent PUTs must not complete)");

    /* Phase B */
    uint8_t *big = t_xmalloc(BIG + NROUNDS_B);
    for (int i = 0; i < NROUNDS_B; i++) {
        size_t size = BIG + (size_t)i;
        int kind = i & 1;
        pat_fill(big, size, seed_b(i), 0);
        CHECK_OK(uln_put(ep, 1, big, size, keys[2 + kind], 0, 100 + (uint64_t)i, 0));
        static uint64_t note;
        note = (uint64_t)i;
        if (i < NROUNDS_B / 2)
            CHECK_OK(uln_put_imm(ep, 1, big, 0, keys[2 + kind], 0, IMM_B_BASE + (uint64_t)i,
                                 200 + (uint64_t)i, 0));
        else
            CHECK_OK(uln_nap(ep, 1, &note, sizeof note, 200 + (uint64_t)i, 0));
        struct uln_cqe c[2];
        t_cq_take(scq, c, 2, 30000, "phase B PUT + marker completions");
        for (int k = 0; k < 2; k++)
            CHECK_CQE(&c[k], c[k].status == 0 && (c[k].user_data == 100 + (uint64_t)i ||
                                                  c[k].user_data == 200 + (uint64_t)i));
        CHECK(c[0].user_data != c[1].user_data);
        struct uln_cqe ack = t_cq_take1(rcq, 30000, "phase B ack");
        CHECK_CQE(&ack, ack.op == ULN_OP_NAP_RECV && ack.peer == 1 && ack.len == 8);
        memcpy(&v, ack.data, 8);
        CHECK(v == (uint64_t)i);
        t_release(rcq, &ack);
    }
    free(big);
    for (int k = 0; k < T_NKINDS; k++)
        free(img[k]);
}

static void target_ack(uint64_t v)
{
    static uint64_t slot[4];
    static unsigned n;
    uint64_t *p = &slot[n++ % 4];
    *p = v;
    CHECK_OK(uln_nap(ep, 0, p, sizeof *p, v, 0));
    struct uln_cqe c = t_cq_take1(scq, 30000, "ack NAP completion");
    CHECK_CQE(&c, c.status == 0 && c.op == ULN_OP_NAP);
}

static void target(struct t_region *ra, struct t_region *rb)
{
    uint8_t seen[NPUT] = {0};
    int got = 0;
    double last = t_now();
    while (got < NPUT) {
        struct uln_cqe e;
        int n = uln_cq_poll(rcq, &e, 1);
        CHECK(n >= 0);
        if (n == 0) {
            CHECKF(t_now() - last < 30, "target: %d of %d PUT_REMOTE entries after 30 s", got,
                   NPUT);
            int w = uln_cq_wait(rcq, 20);
            CHECK(w == 0 || w == -ETIMEDOUT);
            continue;
        }
        last = t_now();
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT_REMOTE);
        CHECK_CQE(&e, e.peer == 0 && e.ep == 0 && e.user_data == 0);
        int k;
        for (k = 0; k < NPUT; k++)
            if (tab[k].imm == e.imm) break;
        CHECK_CQE(&e, k < NPUT);
        CHECKF(!seen[k], "PUT_REMOTE for put %d twice", k);
        seen[k] = 1;
        struct put_desc *d = &tab[k];
        CHECK_CQE(&e, e.offset == d->off);
        CHECK_CQE(&e, e.len == d->len);
        CHECK_PAT((uint8_t *)ra[d->kind].buf + d->off, d->len, seed_a(d->kind), d->off,
                  "put_imm %d (%s, off %" PRIu64 ", len %" PRIu64 ") when its entry is seen", k,
                  t_kind_name(d->kind), d->off, d->len);
        got++;
    }
    t_passed += NPUT;
    /* Gaps between the destinations are untouched. */
    for (int kind = 0; kind < T_NKINDS; kind++) {
        uint64_t pos = 0;
        for (int k = 0; k < NPUT; k++) {
            if (tab[k].kind != kind) continue;
            CHECK_BYTES((uint8_t *)ra[kind].buf + pos, tab[k].off - pos, CANARY,
                        "gap before put %d in %s region", k, t_kind_name(kind));
            pos = tab[k].off + tab[k].len;
        }
        CHECK_BYTES((uint8_t *)ra[kind].buf + pos, REGION - pos, CANARY, "tail of %s region",
                    t_kind_name(kind));
    }
    target_ack(NPUT);

    for (int i = 0; i < NROUNDS_B; i++) {
        struct uln_cqe e = t_cq_take1(rcq, 30000, "phase B marker");
        CHECK_CQE(&e, e.status == 0 && e.peer == 0);
        if (i < NROUNDS_B / 2) {
            CHECK_CQE(&e, e.op == ULN_OP_PUT_REMOTE && e.imm == IMM_B_BASE + (uint64_t)i &&
                              e.len == 0 && e.offset == 0);
        } else {
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
            uint64_t v;
            memcpy(&v, e.data, 8);
            CHECK(v == (uint64_t)i);
            t_release(rcq, &e);
        }
        CHECK_PAT(rb[i & 1].buf, BIG + (size_t)i, seed_b(i), 0,
                  "round %d: %u MiB PUT into %s must be placed before the %s behind it", i,
                  BIG >> 20, t_kind_name(i & 1), i < NROUNDS_B / 2 ? "put_imm" : "NAP");
        target_ack((uint64_t)i);
    }
}

int main(void)
{
    t_open(&J, 2);
    build_table();
    CHECK_OK(uln_cq_open(J.ctx, 512, &scq));
    CHECK_OK(uln_cq_open(J.ctx, 512, &rcq));
    CHECK_OK(uln_ep_open(J.ctx, scq, rcq, &ep));

    struct t_region ra[T_NKINDS], rb[T_NKINDS];
    uint64_t mine[4] = {0}, keys[8];
    if (J.rank == 1) {
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&J, &ra[k], k, REGION, ULN_ACCESS_REMOTE_WRITE);
            memset(ra[k].buf, CANARY, REGION);
            t_region_new(&J, &rb[k], k, BIG + NROUNDS_B, ULN_ACCESS_REMOTE_WRITE);
            memset(rb[k].buf, CANARY, BIG + NROUNDS_B);
            mine[k] = ra[k].key;
            mine[2 + k] = rb[k].key;
        }
    }
    /* Key exchange without t_exchange: here NAPs complete on scq and arrive on
     * rcq. */
    if (J.rank == 1) {
        CHECK_OK(uln_nap(ep, 0, mine, sizeof mine, 1, 0));
        struct uln_cqe c = t_cq_take1(scq, 30000, "key NAP completion");
        CHECK_CQE(&c, c.status == 0 && c.op == ULN_OP_NAP && c.user_data == 1);
    } else {
        struct uln_cqe c = t_cq_take1(rcq, 30000, "keys from rank 1");
        CHECK_CQE(&c, c.status == 0 && c.op == ULN_OP_NAP_RECV && c.len == sizeof mine);
        memcpy(keys, c.data, sizeof mine);
        t_release(rcq, &c);
    }
    t_barrier(&J);

    if (J.rank == 0)
        initiator(keys);
    else
        target(ra, rb);

    t_cq_expect_empty(rcq, 50, "receive CQ at the end");
    t_cq_expect_empty(scq, 50, "send CQ at the end");
    t_barrier(&J);
    if (J.rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_free(&J, &ra[k]);
            t_region_free(&J, &rb[k]);
        }
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(scq));
    CHECK_OK(uln_cq_close(rcq));
    return t_finish(&J);
}
