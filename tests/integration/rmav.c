/*
 * rmav - uln_putv, uln_getv and uln_put_immv: a gather or scatter list of up
 * to ULN_IOV_MAX local segments against one remote range, on every transport.
 *
 * Rank 0 is the target: two regions (uln_mem_alloc and malloc'd memory, which
 * travel different ways) and two one-way ones (read-only, write-only). Rank 1
 * runs every case: totals 0, 1, 7, 4 KiB, 64 KiB, 1 MiB and `big`, in 1, 2, 3
 * and 16 segments of uneven sizes with zero-length ones in between (some with
 * a NULL base), each segment in its own place with canary bytes around it.
 *   putv:     the remote window is poisoned, the list written, the window read
 *             back whole with a plain uln_get: the pattern, and the canaries
 *             each side untouched.
 *   put_immv: the same, and the target checks on its PUT_REMOTE (imm = the
 *             case) that the bytes are there, in its own memory, before it
 *             answers.
 *   getv:     the remote range holds the pattern; it must land in the
 *             segments in order, the canaries between them untouched.
 * A list of no segments is a 0-byte op. Then bursts of gathered ops posted without polling (they
 * wait in the send queue with their segments, -EAGAIN met and retried), ULN_SILENT, and the
 * refusals: a bad key, out of bounds and without the right complete once with
 * the status the contiguous call gets, and move no byte; too many segments, a
 * NULL base with a length and ULN_INLINE where it cannot be are refused at
 * post with no completion.
 *
 * usage: rmav [big (bytes, default 64 MiB)]
 */
#include "common.h"

#define GUARD  4096
#define CANARY 0xa5
#define NSIZES 7
#define NSEGS  4

enum { OP_PUTV, OP_PUT_IMMV, OP_GETV, NOPS };
static const char *opname[] = {"putv", "put_immv", "getv"};

static struct t_job J;
static size_t big;
static struct uln_ep *ep;
static struct uln_cq *scq, *rcq;
static uint64_t keys[2][5]; /* per rank: shm, malloc, read-only, write-only, count */

struct vcase {
    int op, kind, n;
    size_t total;
    uint64_t roff;
    struct iovec iov[ULN_IOV_MAX];
};

static size_t size_of(int i)
{
    const size_t s[NSIZES] = {0, 1, 7, 4096, 65536, 1 << 20, 0};
    return i == NSIZES - 1 ? big : s[i];
}

/* Case id: its op, memory kind, total and segment count, all from the id so
 * the target can rebuild it from the imm of a PUT_REMOTE. */
static void case_shape(uint64_t id, struct vcase *c)
{
    const int segs[NSEGS] = {1, 2, 3, ULN_IOV_MAX};
    c->op = (int)(id % NOPS);
    c->n = segs[id / NOPS % NSEGS];
    c->total = size_of((int)(id / NOPS / NSEGS % NSIZES));
    c->kind = (int)(id / NOPS / NSEGS / NSIZES % T_NKINDS);
    c->roff = GUARD + pat_mix(id) % 4096;
}

static uint64_t ncases(void)
{
    return (uint64_t)NOPS * NSEGS * NSIZES * T_NKINDS;
}

/* Cut c->total into c->n uneven segments inside arena, GUARD apart: every
 * third one empty (NULL base every other time), the rest cut at random. */
static void case_cut(uint64_t id, struct vcase *c, uint8_t *arena)
{
    uint64_t h = pat_mix(id ^ 0xc0ffee);
    size_t left = c->total, at = GUARD;
    for (int i = 0; i < c->n; i++) {
        size_t take = left;
        if (i < c->n - 1)
            take = (i % 3 == 1) ? 0 : (size_t)(pat_mix(h + (uint64_t)i) % (left / 2 + 2));
        if (take > left) take = left;
        c->iov[i] = (struct iovec){arena + at, take};
        if (!take && (h >> i & 1)) c->iov[i].iov_base = NULL;
        at += take + GUARD;
        left -= take;
    }
}

static size_t arena_len(void)
{
    return big + (ULN_IOV_MAX + 1) * GUARD;
}

/* One op posted and its one completion awaited. */
static int run_op(int op, const struct iovec *iov, int n, uint64_t key, uint64_t roff, uint64_t imm,
                  uint64_t len, uint64_t ud)
{
    /* Nothing else is queued: no -EAGAIN. */
    CHECK_OK(op == OP_GETV   ? uln_getv(ep, 0, iov, n, key, roff, ud, 0)
             : op == OP_PUTV ? uln_putv(ep, 0, iov, n, key, roff, ud, 0)
                             : uln_put_immv(ep, 0, iov, n, key, roff, imm, ud, 0));
    struct uln_cqe e = t_cq_take1(scq, 120000, opname[op]);
    CHECK_CQE(&e, e.op == (op == OP_GETV ? ULN_OP_GET : ULN_OP_PUT) && e.user_data == ud &&
                      e.len == (e.status ? 0 : len) && e.peer == 0);
    return e.status;
}

/* A plain PUT or GET of the target's window, to set it up or read it back. */
static void plain(bool write, void *buf, size_t len, uint64_t key, uint64_t roff)
{
    int rc = write ? uln_put(ep, 0, buf, len, key, roff, 7, 0)
                   : uln_get(ep, 0, buf, len, key, roff, 7, 0);
    CHECK_OK(rc);
    struct uln_cqe e = t_cq_take1(scq, 120000, "a plain PUT/GET");
    CHECK_CQE(&e, e.status == 0 && e.user_data == 7);
}

/* The target's window [roff - GUARD, roff + total + GUARD) in win. */
static void window_fill(uint8_t *win, size_t total, uint64_t seed, bool poison)
{
    memset(win, CANARY, GUARD);
    pat_fill_x(win + GUARD, total, seed, 0, poison);
    memset(win + GUARD + total, CANARY, GUARD);
}

static void window_check(const uint8_t *win, size_t total, uint64_t seed, uint64_t id)
{
    CHECK_BYTES(win, GUARD, CANARY, "case %llu: before the range", (unsigned long long)id);
    CHECK_PAT(win + GUARD, total, seed, 0, "case %llu: the range", (unsigned long long)id);
    CHECK_BYTES(win + GUARD + total, GUARD, CANARY, "case %llu: after the range",
                (unsigned long long)id);
}

static void run_case(uint64_t id, uint8_t *arena, uint8_t *win)
{
    struct vcase c;
    case_shape(id, &c);
    case_cut(id, &c, arena);
    uint64_t key = keys[0][c.kind], seed = pat_seed(1, c.op, id);
    size_t wlen = c.total + 2 * GUARD;
    memset(arena, CANARY, arena_len());
    if (c.op == OP_GETV) {
        window_fill(win, c.total, seed, false);
        plain(true, win, wlen, key, c.roff - GUARD);
        CHECK_OK(run_op(c.op, c.iov, c.n, key, c.roff, 0, c.total, id));
        /* The segments in order hold the range; every byte between them is
         * still the canary. */
        size_t at = 0, gap = 0;
        for (int i = 0; i < c.n; i++) {
            if (c.iov[i].iov_len)
                CHECK_PAT(c.iov[i].iov_base, c.iov[i].iov_len, seed, at, "case %llu: segment %d",
                          (unsigned long long)id, i);
            at += c.iov[i].iov_len;
            gap += c.iov[i].iov_len + GUARD;
            CHECK_BYTES(arena + gap - (c.iov[i].iov_len + GUARD), GUARD, CANARY,
                        "case %llu: before segment %d", (unsigned long long)id, i);
        }
        CHECK_BYTES(arena + gap, GUARD, CANARY, "case %llu: after the last segment",
                    (unsigned long long)id);
        return;
    }
    size_t at = 0;
    for (int i = 0; i < c.n; i++) {
        if (c.iov[i].iov_len) pat_fill(c.iov[i].iov_base, c.iov[i].iov_len, seed, at);
        at += c.iov[i].iov_len;
    }
    window_fill(win, c.total, seed, true);
    plain(true, win, wlen, key, c.roff - GUARD);
    CHECK_OK(run_op(c.op, c.iov, c.n, key, c.roff, id, c.total, id));
    if (c.op == OP_PUT_IMMV) { /* the target checked it in place */
        struct uln_cqe e = t_cq_take1(rcq, 120000, "the target's word on a put_immv");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8 && !memcmp(e.data, &id, 8));
        t_release(rcq, &e);
    }
    memset(win, 0, wlen);
    plain(false, win, wlen, key, c.roff - GUARD);
    window_check(win, c.total, seed, id);
}

/* A list of no segments (iov NULL, iovcnt 0) is a 0-byte op: one good
 * completion of 0 bytes on every kind of memory, and the poisoned window
 * around its offset unchanged. */
static void no_segments(uint8_t *win)
{
    const size_t wlen = 64 + 2 * GUARD;
    uint8_t *was = t_xmalloc(wlen);
    for (int kind = 0; kind < T_NKINDS; kind++)
        for (int op = OP_PUTV; op <= OP_GETV; op += OP_GETV - OP_PUTV) {
            uint64_t key = keys[0][kind];
            window_fill(win, 64, pat_seed(1, 7, (uint64_t)kind), true);
            memcpy(was, win, wlen);
            plain(true, win, wlen, key, 0);
            CHECK_OK(run_op(op, NULL, 0, key, GUARD, 0, 0, 0x0e));
            memset(win, 0, wlen);
            plain(false, win, wlen, key, 0);
            CHECKF(!memcmp(win, was, wlen), "%s of no segments changed the %s window", opname[op],
                   t_kind_name(kind));
        }
    free(was);
}

/* Target: each PUT_REMOTE is checked in our own memory and answered. */
static void target(uint8_t *base[2])
{
    for (;;) {
        struct uln_cqe e = t_cq_take1(rcq, 600000, "a put_immv or the end");
        if (e.op == ULN_OP_NAP_RECV) { /* the end */
            t_release(rcq, &e);
            return;
        }
        CHECK_CQE(&e, e.op == ULN_OP_PUT_REMOTE && e.peer == 1 && e.imm < ncases());
        struct vcase c;
        case_shape(e.imm, &c);
        CHECK_CQE(&e, c.op == OP_PUT_IMMV && e.len == c.total && e.offset == c.roff);
        CHECK_PAT(base[c.kind] + c.roff, c.total, pat_seed(1, c.op, e.imm), 0,
                  "put_immv case %llu at the target", (unsigned long long)e.imm);
        uint64_t id = e.imm;
        CHECK_OK(uln_nap(ep, 1, &id, 8, 0, ULN_INLINE | ULN_SILENT));
    }
}

/* One completion of a burst: good, and after the one before it (entries
 * complete in posting order). */
static void burst_take(const struct uln_cqe *e, size_t each, int64_t *last)
{
    CHECK_CQE(e, e->status == 0 && e->len == each && e->user_data % 5 != 4 &&
                     (int64_t)e->user_data > *last);
    *last = (int64_t)e->user_data;
}

/* Post one gathered op of a burst, polling while the send queue is full. */
static void burst_post(bool get, const struct iovec *v, int n, uint64_t key, uint64_t roff,
                       uint64_t ud, unsigned fl, size_t each, int *done, int64_t *last)
{
    int rc;
    while ((rc = get ? uln_getv(ep, 0, v, n, key, roff, ud, fl)
                     : uln_putv(ep, 0, v, n, key, roff, ud, fl)) == -EAGAIN) {
        struct uln_cqe e;
        if (uln_cq_poll(scq, &e, 1) == 1) {
            burst_take(&e, each, last);
            (*done)++;
        }
    }
    CHECK_OK(rc);
}

/* Bursts: up to 3 x sq_depth gathered ops posted without waiting (most queue
 * with their segments in the side table), every one checked after; a putv
 * burst is read back by a getv posted at once with ULN_FENCE, which must see
 * every PUT before it. */
static void bursts(uint8_t *arena, uint8_t *win)
{
    const int seg = 1000;
    const size_t each = 11 * seg; /* 11 segments, 1000 bytes each, some empty */
    int nb = (int)J.info.sq_depth * 3;
    if ((size_t)nb * each > big) nb = (int)(big / each);
    const size_t all = (size_t)nb * each;
    uint64_t key = keys[0][T_KIND_MALLOC], seed = pat_seed(1, 9, 0);
    for (int round = 0; round < 2; round++) {
        bool get = round == 1;
        uint8_t *src = arena + GUARD;
        memset(src, CANARY, all);
        memset(win, CANARY, all);
        if (get) {
            pat_fill(win, all, seed, 0);
            plain(true, win, all, key, GUARD);
        } else {
            pat_fill(src, all, seed, 0);
        }
        int posted = 0, done = 0;
        int64_t last = -1;
        for (int b = 0; b < nb; b++) {
            struct iovec v[ULN_IOV_MAX];
            int n = 0;
            for (int i = 0; i < 11; i++) {
                if (i % 4 == 2) v[n++] = (struct iovec){NULL, 0};
                v[n++] = (struct iovec){src + (size_t)b * each + (size_t)i * seg, seg};
            }
            unsigned fl = b % 5 == 4 ? ULN_SILENT : 0;
            burst_post(get, v, n, key, GUARD + (uint64_t)b * each, (uint64_t)b, fl, each, &done,
                       &last);
            if (!fl) posted++;
        }
        if (!get) { /* fenced: starts once every PUT above is done */
            struct iovec back[3] = {{win, all / 2}, {NULL, 0}, {win + all / 2, all - all / 2}};
            /* While the send queue is full, what completes are the PUTs
             * above (each bytes), never this GET, not posted yet. */
            burst_post(true, back, 3, key, GUARD, (uint64_t)nb, ULN_FENCE, each, &done, &last);
        }
        while (done < posted) {
            struct uln_cqe e = t_cq_take1(scq, 120000, "a burst's completion");
            burst_take(&e, each, &last);
            done++;
        }
        if (get) {
            /* Every 5th getv is silent, the last one too (nb = 95 here):
             * the completions above say nothing of a silent op posted after
             * them. A flush completes once every op before it has, as a
             * user of silent ops must wait. */
            CHECK_OK(uln_ep_flush(ep, (uint64_t)nb));
            struct uln_cqe e = t_cq_take1(scq, 120000, "the flush after the getv bursts");
            CHECK_CQE(&e, e.op == ULN_OP_FLUSH && e.status == 0 && e.user_data == (uint64_t)nb);
            CHECK_PAT(src, all, seed, 0, "getv bursts");
        } else {
            struct uln_cqe e = t_cq_take1(scq, 120000, "the fenced getv");
            CHECK_CQE(&e, e.op == ULN_OP_GET && e.status == 0 && e.len == all &&
                              e.user_data == (uint64_t)nb);
            CHECK_PAT(win, all, seed, 0, "putv bursts, read back by a fenced getv");
        }
    }
}

/* A refused op: one completion, with the contiguous call's status. */
static void refused(int op, uint64_t key, uint64_t roff, size_t total, int want)
{
    uint8_t *b = t_xmalloc(total);
    memset(b, 0x3c, total);
    struct iovec v[3] = {{b, total / 3}, {NULL, 0}, {b + total / 3, total - total / 3}};
    int st = run_op(op, v, 3, key, roff, 1, total, 0xbad);
    CHECKF(st == want, "%s refused with %d (%s), the contiguous call with %d (%s)", opname[op], st,
           t_errname(st), want, t_errname(want));
    if (op == OP_GETV) CHECK_BYTES(b, total, 0x3c, "a refused getv's segments");
    free(b);
}

static int contiguous(int op, uint64_t key, uint64_t roff, size_t total)
{
    uint8_t *b = t_xmalloc(total);
    memset(b, 0x3c, total);
    int rc = op == OP_GETV   ? uln_get(ep, 0, b, total, key, roff, 0xc, 0)
             : op == OP_PUTV ? uln_put(ep, 0, b, total, key, roff, 0xc, 0)
                             : uln_put_imm(ep, 0, b, total, key, roff, 5, 0xc, 0);
    CHECK_OK(rc);
    struct uln_cqe e = t_cq_take1(scq, 60000, "a contiguous refusal");
    free(b);
    CHECKF(e.status < 0, "the contiguous %s was not refused", opname[op]);
    return e.status;
}

/* What the refused ops might hit: read now, compared after. */
struct snap {
    uint64_t key, off;
    uint8_t *was;
};

static void snap_take(struct snap *sn, uint64_t key, uint64_t off, size_t len)
{
    *sn = (struct snap){key, off, t_xmalloc(len)};
    plain(false, sn->was, len, key, off);
}

static void snap_check(struct snap *sn, size_t len)
{
    uint8_t *now = t_xmalloc(len);
    plain(false, now, len, sn->key, sn->off);
    size_t d = 0;
    while (d < len && now[d] == sn->was[d])
        d++;
    CHECKF(d == len, "a refused op changed byte %zu at offset %llu", d,
           (unsigned long long)sn->off);
    free(now);
    free(sn->was);
}

static void refusals(size_t rlen)
{
    const size_t span = 250000;
    struct snap sn[3];
    snap_take(&sn[0], keys[0][T_KIND_SHM], 0, span);
    snap_take(&sn[1], keys[0][T_KIND_SHM], rlen - span, span);
    snap_take(&sn[2], keys[0][2], 0, span);
    uint8_t b[64];
    struct iovec many[ULN_IOV_MAX + 1];
    for (int i = 0; i <= ULN_IOV_MAX; i++)
        many[i] = (struct iovec){b, 1};
    uint64_t k = keys[0][T_KIND_SHM];
    CHECK_RC(uln_putv(ep, 0, many, ULN_IOV_MAX + 1, k, 0, 0, 0), -EINVAL);
    CHECK_RC(uln_getv(ep, 0, many, ULN_IOV_MAX + 1, k, 0, 0, 0), -EINVAL);
    CHECK_RC(uln_put_immv(ep, 0, many, -1, k, 0, 0, 0, 0), -EINVAL);
    CHECK_RC(uln_getv(ep, 0, NULL, 2, k, 0, 0, 0), -EINVAL);
    struct iovec null_base[3] = {{b, 1}, {NULL, 0}, {NULL, 4}};
    CHECK_RC(uln_putv(ep, 0, null_base, 3, k, 0, 0, 0), -EINVAL);
    CHECK_RC(uln_getv(ep, 0, null_base, 3, k, 0, 0, 0), -EINVAL);
    CHECK_RC(uln_getv(ep, 0, many, 2, k, 0, 0, ULN_INLINE), -EMSGSIZE);
    uint8_t *over = t_xmalloc(J.info.inline_max + 1);
    struct iovec inl[2] = {{over, J.info.inline_max}, {b, 1}};
    CHECK_RC(uln_putv(ep, 0, inl, 2, k, 0, 0, ULN_INLINE), -EMSGSIZE);
    free(over);
    CHECK_RC(uln_putv(ep, J.size, many, 2, k, 0, 0, 0), -EINVAL);
    t_cq_expect_empty(scq, 100, "refused at post: no completion");

    const size_t sz[2] = {100, 200000}; /* gathered at post, and not */
    for (int op = 0; op < NOPS; op++)
        for (int s = 0; s < 2; s++) {
            bool get = op == OP_GETV;
            struct {
                uint64_t key, roff;
            } bad[] = {{k ^ 0x5a5a5a, 0},
                       {k, rlen - sz[s] + 1},
                       {k, rlen + 10},
                       {keys[0][get ? 3 : 2], 0}};
            for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                refused(op, bad[i].key, bad[i].roff, sz[s],
                        contiguous(op, bad[i].key, bad[i].roff, sz[s]));
        }
    for (int i = 0; i < 3; i++)
        snap_check(&sn[i], span);
}

static void initiator(size_t rlen)
{
    uint8_t *arena = t_xmalloc(arena_len()), *win = t_xmalloc(big + 2 * GUARD + 4096);
    for (uint64_t id = 0; id < ncases(); id++)
        run_case(id, arena, win);
    no_segments(win);
    bursts(arena, win);
    refusals(rlen);
    free(arena);
    free(win);
    uint64_t end = 0;
    CHECK_OK(uln_nap(ep, 0, &end, 8, 0, ULN_INLINE | ULN_SILENT));
}

int main(int argc, char **argv)
{
    big = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
    if (big < 400000) big = 400000; /* the bursts' room */
    t_open(&J, 2);
    /* Keys go over an endpoint of their own (t_exchange wants one CQ); the
     * ops' completions and the target's answers on separate CQs. The ops'
     * endpoint first: where only the first endpoint gets the fast link
     * (AF_XDP: one socket per queue), it is the one that carries them. */
    struct uln_cq *xcq;
    struct uln_ep *xep;
    CHECK_OK(uln_cq_open(J.ctx, 4096, &scq));
    CHECK_OK(uln_cq_open(J.ctx, 4096, &rcq));
    CHECK_OK(uln_ep_open(J.ctx, scq, rcq, &ep));
    CHECK_OK(uln_cq_open(J.ctx, 64, &xcq));
    CHECK_OK(uln_ep_open(J.ctx, xcq, xcq, &xep));
    size_t rlen = big + 2 * GUARD + 4096;
    struct t_region r[4] = {{0}};
    uint64_t mine[5] = {0};
    if (J.rank == 0) {
        const unsigned rw = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE;
        t_region_new(&J, &r[0], T_KIND_SHM, rlen, rw);
        t_region_new(&J, &r[1], T_KIND_MALLOC, rlen, rw);
        t_region_new(&J, &r[2], T_KIND_MALLOC, rlen, ULN_ACCESS_REMOTE_READ);
        t_region_new(&J, &r[3], T_KIND_SHM, rlen, ULN_ACCESS_REMOTE_WRITE);
        for (int i = 0; i < 4; i++)
            mine[i] = r[i].key;
    }
    t_exchange(&J, xep, xcq, mine, 5, &keys[0][0]);
    if (J.rank == 0) {
        uint8_t *base[2] = {r[0].buf, r[1].buf};
        target(base);
    } else {
        initiator(rlen);
    }
    t_barrier(&J);
    for (int i = 0; i < 4; i++)
        if (r[i].mr) t_region_free(&J, &r[i]);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_ep_close(xep));
    CHECK_OK(uln_cq_close(rcq));
    CHECK_OK(uln_cq_close(scq));
    CHECK_OK(uln_cq_close(xcq));
    return t_finish(&J);
}
