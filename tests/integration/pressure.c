/*
 * pressure - full queues push back with -EAGAIN and never lose anything.
 *
 *   pressure sq    (run with ULN_SQ_DEPTH=8)
 *     Rank 1 does not poll for a while. Rank 0 posts PUTs, without polling,
 *     until uln_put returns -EAGAIN; then drains and checks that every
 *     accepted PUT completes exactly once (and the refused post never does)
 *     and that rank 1 finds every PUT's data. Then the same with NAPs. A
 *     send queue that silently drops or double-completes under pressure is
 *     the classic bug this catches.
 *
 *   pressure ring  (run with ULN_RING_BYTES=16384 ULN_NAP_MAX=4096; the ring
 *                   must hold two of the largest NAPs)
 *     Rank 1 sleeps without polling while rank 0 streams thousands of NAPs
 *     into a receive ring that holds a few dozen: rank 0 must be held back
 *     (retrying on -EAGAIN), not have its NAPs dropped or overwritten, and
 *     all of them must arrive, in order, once rank 1 starts polling.
 */
#include "common.h"

#define SLEEP_MS  800
#define NAPSZ     256
#define MAXNAPS   8192
#define PUTSZ     4096
#define NPAGES    1024
#define MAXPUTS   100000
#define RING_NAPS 4000
#define RING_SZ   512
#define MAGIC_END 0x454e44454e44ull

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

struct marker {
    uint64_t magic, phase, count;
};

static uint64_t put_seed(void)
{
    return pat_seed(0, 70, 0);
}
static uint64_t nap_seed(uint64_t seq)
{
    return pat_seed(0, 71, seq);
}

/* Post a small control NAP, retrying on -EAGAIN (nothing else is in flight). */
static void post_ctl(int peer, const void *buf, size_t len, uint64_t ud)
{
    int rc;
    double deadline = t_now() + 30;
    while ((rc = uln_nap(ep, peer, buf, len, ud, 0)) == -EAGAIN) {
        CHECKF(t_now() < deadline, "control NAP still -EAGAIN after 30 s");
        int w = uln_cq_wait(cq, 5);
        CHECK(w == 0 || w == -ETIMEDOUT);
    }
    CHECK_OK(rc);
}

/* Wait for our control NAP's completion and the peer's answer. */
static void ctl_roundtrip(int peer, uint64_t ud, uint64_t phase)
{
    bool sent = false, got = false;
    while (!sent || !got) {
        struct uln_cqe e = t_cq_take1(cq, 30000, "control NAP and answer");
        CHECK_CQE(&e, e.status == 0 && e.peer == peer);
        if (e.op == ULN_OP_NAP) {
            CHECK_CQE(&e, e.user_data == ud && !sent);
            sent = true;
        } else {
            struct marker m;
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == sizeof m && !got);
            memcpy(&m, e.data, sizeof m);
            CHECK(m.magic == MAGIC_END && m.phase == phase);
            t_release(cq, &e);
            got = true;
        }
    }
}

/* Drain exactly n completions of `op` with user_data in [base, base + n). */
static void drain(uint64_t base, uint64_t n, int op, uint64_t refused_ud, const char *what)
{
    uint8_t *seen = calloc(n ? n : 1, 1);
    CHECK(seen != NULL);
    uint64_t got = 0;
    double last = t_now();
    while (got < n) {
        struct uln_cqe ev[16];
        int r = uln_cq_poll(cq, ev, 16);
        CHECK(r >= 0);
        for (int i = 0; i < r; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->user_data != refused_ud); /* -EAGAIN: nothing was posted */
            CHECK_CQE(e, e->status == 0 && e->op == op && e->peer == 1);
            CHECK_CQE(e, e->user_data >= base && e->user_data < base + n);
            CHECKF(!seen[e->user_data - base], "%s: %#" PRIx64 " completed twice", what,
                   e->user_data);
            seen[e->user_data - base] = 1;
            got++;
        }
        if (r > 0) {
            last = t_now();
        } else {
            CHECKF(t_now() - last < 30, "%s: %" PRIu64 " of %" PRIu64 " completions after 30 s",
                   what, got, n);
            int w = uln_cq_wait(cq, 10);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    t_passed += n;
    free(seen);
}

static void sq_sender(const uint64_t *keys)
{
    CHECKF(J.info.sq_depth == 8, "ULN_SQ_DEPTH=8 but info.sq_depth=%u", J.info.sq_depth);
    uint8_t *src = t_xmalloc((size_t)NPAGES * PUTSZ);
    pat_fill(src, (size_t)NPAGES * PUTSZ, put_seed(), 0);
    struct uln_counters c0, c1;
    CHECK_OK(uln_counters_get(J.ctx, &c0));

    /* Phase 1: PUTs until -EAGAIN; nobody polls. */
    double t0 = t_now();
    uint64_t p = 0;
    int rc;
    for (;;) {
        uint64_t pg = p % NPAGES;
        int kind = (int)(pg & 1);
        rc = uln_put(ep, 1, src + pg * PUTSZ, PUTSZ, keys[kind], pg * PUTSZ, 0x10000000 + p, 0);
        if (rc != 0) break;
        CHECKF(++p < MAXPUTS, "%d PUTs accepted without polling and no -EAGAIN (sq_depth 8)",
               MAXPUTS);
    }
    double t_eagain = t_now() - t0;
    CHECK_RC(rc, -EAGAIN);
    printf("rank0: %" PRIu64 " PUTs accepted, then -EAGAIN after %.0f ms\n", p, t_eagain * 1e3);
    CHECK(p >= 1);
    CHECKF(t_eagain * 1e3 < SLEEP_MS * 0.75,
           "-EAGAIN came only after %.0f ms: rank 1 may have started polling", t_eagain * 1e3);
    drain(0x10000000, p, ULN_OP_PUT, 0x10000000 + p, "PUTs accepted before -EAGAIN");
    struct marker m1 = {MAGIC_END, 1, p};
    post_ctl(1, &m1, sizeof m1, 0xe1);
    ctl_roundtrip(1, 0xe1, 1);

    /* Phase 2: NAPs until -EAGAIN; rank 1 sleeps again. */
    uint8_t *naps = t_xmalloc((size_t)MAXNAPS * NAPSZ);
    uint64_t a = 0;
    t0 = t_now();
    for (;;) {
        uint8_t *b = naps + a * NAPSZ;
        memcpy(b, &a, 8);
        pat_fill(b + 8, NAPSZ - 8, nap_seed(a), 8);
        rc = uln_nap(ep, 1, b, NAPSZ, 0x20000000 + a, 0);
        if (rc != 0) break;
        CHECKF(++a < MAXNAPS, "%d NAPs accepted without polling and no -EAGAIN", MAXNAPS);
    }
    t_eagain = t_now() - t0;
    CHECK_RC(rc, -EAGAIN);
    printf("rank0: %" PRIu64 " NAPs accepted, then -EAGAIN after %.0f ms\n", a, t_eagain * 1e3);
    CHECK(a >= 1);
    CHECKF(t_eagain * 1e3 < SLEEP_MS * 0.75,
           "-EAGAIN came only after %.0f ms: rank 1 may have started polling", t_eagain * 1e3);
    drain(0x20000000, a, ULN_OP_NAP, 0x20000000 + a, "NAPs accepted before -EAGAIN");
    struct marker m2 = {MAGIC_END, 2, a};
    post_ctl(1, &m2, sizeof m2, 0xe2);
    ctl_roundtrip(1, 0xe2, 2);

    CHECK_OK(uln_counters_get(J.ctx, &c1));
    CHECKF(c1.eagain - c0.eagain >= 2, "eagain counter grew by %" PRIu64, c1.eagain - c0.eagain);
    free(naps);
    free(src);
}

static void sq_receiver(struct t_region *reg)
{
    t_sleep_ms(SLEEP_MS); /* not polling: rank 0's queue fills */
    struct uln_cqe e = t_cq_take1(cq, 60000, "end of PUT phase");
    struct marker m;
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == sizeof m);
    memcpy(&m, e.data, sizeof m);
    t_release(cq, &e);
    CHECK(m.magic == MAGIC_END && m.phase == 1);
    /* Every page some accepted PUT wrote holds its data (a NAP posted after
     * the PUTs is delivered after their data). */
    uint64_t pages = m.count < NPAGES ? m.count : NPAGES;
    for (uint64_t pg = 0; pg < pages; pg++)
        CHECK_PAT((uint8_t *)reg[pg & 1].buf + pg * PUTSZ, PUTSZ, put_seed(), pg * PUTSZ,
                  "page %" PRIu64 " of the PUTs accepted before -EAGAIN", pg);
    struct marker ack = {MAGIC_END, 1, 0};
    post_ctl(0, &ack, sizeof ack, 0xa1);
    e = t_cq_take1(cq, 30000, "ack completion");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);

    t_sleep_ms(SLEEP_MS);
    uint64_t seq = 0;
    for (;;) {
        e = t_cq_take1(cq, 60000, "NAPs of phase 2");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.peer == 0);
        if (e.len == sizeof m) {
            memcpy(&m, e.data, sizeof m);
            t_release(cq, &e);
            break;
        }
        uint64_t s;
        CHECK_CQE(&e, e.len == NAPSZ);
        memcpy(&s, e.data, 8);
        CHECKF(s == seq, "NAP seq %" PRIu64 ", expected %" PRIu64, s, seq);
        CHECK_PAT((const uint8_t *)e.data + 8, NAPSZ - 8, nap_seed(s), 8, "NAP %" PRIu64, s);
        t_release(cq, &e);
        seq++;
    }
    CHECK(m.magic == MAGIC_END && m.phase == 2);
    CHECKF(m.count == seq, "rank 0 had %" PRIu64 " NAPs accepted, %" PRIu64 " arrived", m.count,
           seq);
    struct marker ack2 = {MAGIC_END, 2, 0};
    post_ctl(0, &ack2, sizeof ack2, 0xa2);
    e = t_cq_take1(cq, 30000, "ack completion");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
}

static void ring_sender(void)
{
    CHECKF(J.info.ring_bytes == 16384, "ULN_RING_BYTES=16384 but info.ring_bytes=%u",
           J.info.ring_bytes);
    CHECKF(J.info.nap_max == 4096, "ULN_NAP_MAX=4096 but info.nap_max=%u", J.info.nap_max);
    uint8_t *buf = t_xmalloc((size_t)RING_NAPS * RING_SZ);
    for (uint64_t s = 0; s < RING_NAPS; s++) {
        memcpy(buf + s * RING_SZ, &s, 8);
        pat_fill(buf + s * RING_SZ + 8, RING_SZ - 8, nap_seed(s), 8);
    }
    uint8_t *seen = calloc(RING_NAPS, 1);
    CHECK(seen != NULL);
    uint64_t posted = 0, done = 0, eagain = 0;
    double t0 = t_now(), last = t0;
    bool sampled = false;
    while (done < RING_NAPS) {
        while (posted < RING_NAPS) {
            int rc = uln_nap(ep, 1, buf + posted * RING_SZ, RING_SZ, posted, 0);
            if (rc == -EAGAIN) {
                eagain++;
                break;
            }
            CHECK_OK(rc);
            posted++;
        }
        struct uln_cqe ev[16];
        int r = uln_cq_poll(cq, ev, 16);
        CHECK(r >= 0);
        for (int i = 0; i < r; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_NAP && e->peer == 1);
            CHECK_CQE(e, e->user_data < posted && !seen[e->user_data]);
            seen[e->user_data] = 1;
            done++;
        }
        if (r > 0) last = t_now();
        CHECKF(t_now() - last < 30, "ring sender: %" PRIu64 " of %d NAPs complete after 30 s", done,
               RING_NAPS);
        if (!sampled && t_now() - t0 > SLEEP_MS / 2 / 1000.0) {
            /* Rank 1 has not polled yet: what completed must fit in its ring,
             * and over udp (a NAP completes when it leaves) in the packets
             * its credit lets it hold beyond the ring: at most the window. */
            sampled = true;
            uint64_t cap = J.info.ring_bytes / RING_SZ + J.info.sq_depth;
            if (!(J.info.caps_all & ULN_CAP_RINGS)) cap += J.info.udp_window;
            printf("rank0: while rank 1 sleeps: %" PRIu64 " posted, %" PRIu64
                   " completed (ring holds about %u)\n",
                   posted, done, J.info.ring_bytes / RING_SZ);
            CHECKF(done < RING_NAPS && done <= cap,
                   "%" PRIu64 " NAPs of %d bytes completed into a %u-byte ring nobody reads", done,
                   RING_SZ, J.info.ring_bytes);
        }
        if (r == 0) {
            int w = uln_cq_wait(cq, 2);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    CHECK(sampled);
    t_passed += RING_NAPS;
    printf("rank0: %d NAPs through a %u-byte ring in %.2f s, %" PRIu64 " -EAGAIN\n", RING_NAPS,
           J.info.ring_bytes, t_now() - t0, eagain);
    struct uln_cqe e = t_cq_take1(cq, 60000, "rank 1's count");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == 8);
    uint64_t n;
    memcpy(&n, e.data, 8);
    CHECK(n == RING_NAPS);
    t_release(cq, &e);
    free(seen);
    free(buf);
}

static void ring_receiver(void)
{
    struct uln_counters c0, c1;
    CHECK_OK(uln_counters_get(J.ctx, &c0));
    t_sleep_ms(SLEEP_MS);
    for (uint64_t seq = 0; seq < RING_NAPS; seq++) {
        struct uln_cqe e = t_cq_take1(cq, 30000, "the stream through the small ring");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.peer == 0);
        CHECK_CQE(&e, e.len == RING_SZ);
        uint64_t s;
        memcpy(&s, e.data, 8);
        CHECKF(s == seq, "NAP seq %" PRIu64 ", expected %" PRIu64, s, seq);
        CHECK_PAT((const uint8_t *)e.data + 8, RING_SZ - 8, nap_seed(seq), 8, "NAP %" PRIu64, seq);
        t_release(cq, &e);
    }
    t_cq_expect_empty(cq, 100, "after the last NAP");
    CHECK_OK(uln_counters_get(J.ctx, &c1));
    CHECK(c1.naps_received - c0.naps_received == RING_NAPS);
    CHECK(c1.malformed == c0.malformed);
    static uint64_t n = RING_NAPS;
    post_ctl(0, &n, sizeof n, 0xc);
    struct uln_cqe e = t_cq_take1(cq, 30000, "count NAP completion");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    t_open(&J, 2);
    bool sq = strcmp(mode, "sq") == 0;
    CHECKF(sq || strcmp(mode, "ring") == 0, "usage: pressure sq|ring (got '%s')", mode);
    /* A small CQ too: the engine must hold completions back, not overrun it. */
    CHECK_OK(uln_cq_open(J.ctx, 16, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS];
    uint64_t mine[T_NKINDS] = {0}, all[2 * T_NKINDS];
    if (sq && J.rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&J, &reg[k], k, (size_t)NPAGES * PUTSZ, ULN_ACCESS_REMOTE_WRITE);
            memset(reg[k].buf, 0, (size_t)NPAGES * PUTSZ);
            mine[k] = reg[k].key;
        }
    t_exchange(&J, ep, cq, mine, T_NKINDS, all);

    if (sq) {
        if (J.rank == 0)
            sq_sender(all + T_NKINDS);
        else
            sq_receiver(reg);
    } else {
        if (J.rank == 0)
            ring_sender();
        else
            ring_receiver();
    }
    t_barrier(&J);
    if (sq && J.rank == 1)
        for (int k = 0; k < T_NKINDS; k++)
            t_region_free(&J, &reg[k]);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
