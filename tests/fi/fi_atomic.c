/*
 * fi_atomic - FI_ATOMIC through the ulnet provider, two ranks under ulnrun:
 *   valid    fi_atomicvalid / fi_fetch_atomicvalid / fi_compare_atomicvalid and
 *            fi_query_atomic answer every (datatype, op) as this file's own
 *            table of what ulnet does exactly says, and an op outside it is
 *            refused by the call itself;
 *   ops      every supported op x datatype x call form (single, v with two
 *            ioc, msg with two remote ioc), several elements, against a
 *            reference computed here: the words the target holds afterwards
 *            (and the bytes around them untouched) and the values fetched;
 *   inject   fi_inject_atomic applies and makes no completion;
 *   count    both ranks do N fetch-adds of 1 on one word of rank 0: it ends
 *            at exactly 2N and every fetched value is distinct;
 *   cswap    compare-and-swap mutual exclusion around a read and a write: a
 *            plain counter ends at exactly 2K;
 *   refused  bad key, out of bounds, misaligned: error entries with the
 *            right FI_E* and ulnet's reason; the counters count them.
 * With "vaddr" (argv[2]) the client asks for FI_MR_VIRT_ADDR and names remote
 * words by the peer's addresses; without, by offsets in its window.
 * Usage: ulnrun -n 2 fi_atomic DIR [vaddr|offset]
 */
#include "fi_common.h"

#include <errno.h>
#include <stdbool.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#define WIN    (1 << 16)
#define NELEM  5  /* elements per op in the ops test */
#define ROUNDS 6  /* cases per (datatype, op, kind): each call form twice */
#define MAXCNT 64 /* what the provider reports as count */
#define N_ADD  10000
#define K_LOCK 300
#define WINDOW 32 /* fetch-adds in flight */

static struct fic fx;
static struct fid_cntr *rd_cntr, *wr_cntr;
static fi_addr_t self;
static uint8_t *win;
static uint64_t pkey, pbase; /* the peer's key and where its window starts for us */
static uint64_t mykey, mybase;
/* ---- completions: one at a time, success or error ------------------------------- */

struct comp {
    void *ctx;
    uint64_t flags;
    int err, prov_errno;
};

static struct comp wait_one(void)
{
    double deadline = fic_now() + 60;
    for (;;) {
        struct fi_cq_tagged_entry e;
        ssize_t n = fi_cq_read(fx.cq, &e, 1);
        if (n == 1) return (struct comp){e.op_context, e.flags, 0, 0};
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(fx.cq, &err, 0));
            return (struct comp){err.op_context, err.flags, err.err, err.prov_errno};
        }
        if (n != -FI_EAGAIN) OK(n);
        if (fic_now() > deadline) {
            fprintf(stderr, "rank %d: no completion\n", rank);
            exit(1);
        }
    }
}

/* The completion of the one operation in flight, which must succeed. */
static void wait_ok(void *ctx)
{
    struct comp c = wait_one();
    if (c.err) {
        fprintf(stderr, "rank %d: error completion %d (%s), prov %d\n", rank, c.err,
                fi_strerror(c.err), c.prov_errno);
        exit(1);
    }
    CHECK(c.ctx == ctx);
}

/* Post with the retry -FI_EAGAIN asks for. Progress by reading a counter:
 * it makes progress as a CQ read does and takes no completion away. */
#define POST(call)                                                                                 \
    do {                                                                                           \
        ssize_t r_;                                                                                \
        while ((r_ = (call)) == -FI_EAGAIN)                                                        \
            (void)fi_cntr_read(wr_cntr);                                                           \
        OK(r_);                                                                                    \
    } while (0)

static void sync_peers(void)
{
    static uint64_t n;
    struct fi_context c1, c2;
    POST(fi_trecv(fx.ep, NULL, 0, NULL, fx.peer, 0x5000 + n, 0, &c1));
    POST(fi_tsend(fx.ep, NULL, 0, NULL, fx.peer, 0x5000 + n, &c2));
    n++;
    for (int i = 0; i < 2; i++)
        CHECK(wait_one().err == 0);
}

static void rma(bool write, void *buf, size_t len, uint64_t off)
{
    struct fi_context c;
    if (write)
        POST(fi_write(fx.ep, buf, len, NULL, fx.peer, pbase + off, pkey, &c));
    else
        POST(fi_read(fx.ep, buf, len, NULL, fx.peer, pbase + off, pkey, &c));
    wait_ok(&c);
}

/* ---- what ulnet does exactly: this test's own table ------------------------------- */

enum kind { BASE, FETCH, COMPARE };

static bool is_int(enum fi_datatype dt)
{
    return dt == FI_INT32 || dt == FI_UINT32 || dt == FI_INT64 || dt == FI_UINT64;
}

static bool supported(enum fi_datatype dt, enum fi_op op, enum kind k)
{
    if (dt == FI_FLOAT || dt == FI_DOUBLE)
        return op == FI_ATOMIC_WRITE ? k != COMPARE : op == FI_ATOMIC_READ && k == FETCH;
    if (!is_int(dt)) return false;
    switch (op) {
    case FI_MIN:
    case FI_MAX:
    case FI_SUM:
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_ATOMIC_WRITE:
        return k != COMPARE;
    case FI_ATOMIC_READ:
        return k == FETCH;
    case FI_CSWAP:
        return k == COMPARE;
    default:
        return false;
    }
}

static unsigned width(enum fi_datatype dt)
{
    return dt == FI_INT32 || dt == FI_UINT32 || dt == FI_FLOAT ? 4 : 8;
}

static void test_valid(void)
{
    for (int dt = FI_INT8; dt <= FI_UINT128; dt++)
        for (int op = FI_MIN; op < FI_ATOMIC_OP_LAST; op++) {
            int (*fn[3])(struct fid_ep *, enum fi_datatype, enum fi_op,
                         size_t *) = {fi_atomicvalid, fi_fetch_atomicvalid, fi_compare_atomicvalid};
            const uint64_t qf[3] = {0, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC};
            for (int k = 0; k < 3; k++) {
                size_t count = 0;
                int rc = fn[k](fx.ep, dt, op, &count);
                struct fi_atomic_attr a = {0};
                int qrc = fi_query_atomic(fx.dom, dt, op, &a, qf[k]);
                if (supported(dt, op, k)) {
                    if (rc || count != MAXCNT || qrc || a.count != MAXCNT || a.size != width(dt))
                        fprintf(stderr, "dt %d op %d kind %d: %d %zu %d %zu %zu\n", dt, op, k, rc,
                                count, qrc, a.count, a.size);
                    CHECK(rc == 0 && count == MAXCNT);
                    CHECK(qrc == 0 && a.count == MAXCNT && a.size == width(dt));
                } else {
                    if (rc != -FI_EOPNOTSUPP || qrc != -FI_EOPNOTSUPP)
                        fprintf(stderr, "dt %d op %d kind %d: %d %d\n", dt, op, k, rc, qrc);
                    CHECK(rc == -FI_EOPNOTSUPP && qrc == -FI_EOPNOTSUPP);
                }
            }
        }
    struct fi_atomic_attr a;
    CHECK(fi_query_atomic(fx.dom, FI_INT64, FI_SUM, &a, FI_TAGGED) == -FI_EOPNOTSUPP);
    CHECK(fi_query_atomic(fx.dom, FI_INT64, FI_CSWAP, &a, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) ==
          -FI_EINVAL);
}

/* ---- every op against a reference ---------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Values that reach the edges: signs, carries, equality. */
static uint64_t pick(uint64_t *s, uint64_t cur)
{
    static const uint64_t edge[] = {
        0, 1, ~0ull, 0x80000000ull, 0x7fffffffull, 0x8000000000000000ull, 0x7fffffffffffffffull};
    uint64_t r = rnd(s);
    if (r % 4 == 0) return cur;
    if (r % 4 == 1) return edge[(r >> 8) % 7];
    return rnd(s);
}

static int64_t sx(uint64_t v, unsigned w)
{
    return w == 4 ? (int32_t)(uint32_t)v : (int64_t)v;
}

/* The word's new value for op (the old one is what a fetch returns). */
static uint64_t ref(enum fi_datatype dt, enum fi_op op, uint64_t old, uint64_t v, uint64_t cmp)
{
    unsigned w = width(dt);
    uint64_t mask = w == 4 ? 0xffffffffull : ~0ull;
    bool sign = dt == FI_INT32 || dt == FI_INT64;
    old &= mask, v &= mask, cmp &= mask;
    bool less = sign ? sx(v, w) < sx(old, w) : v < old;
    switch (op) {
    case FI_MIN:
        return less ? v : old;
    case FI_MAX:
        return !less && v != old ? v : old;
    case FI_SUM:
        return (old + v) & mask;
    case FI_BOR:
        return old | v;
    case FI_BAND:
        return old & v;
    case FI_BXOR:
        return old ^ v;
    case FI_ATOMIC_WRITE:
        return v;
    case FI_CSWAP:
        return old == cmp ? v : old;
    default: /* FI_ATOMIC_READ */
        return old;
    }
}

static void put_w(uint8_t *p, uint64_t v, unsigned w)
{
    if (w == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
    } else {
        memcpy(p, &v, 8);
    }
}
static uint64_t get_w(const uint8_t *p, unsigned w)
{
    uint32_t x;
    uint64_t y;
    if (w == 4) {
        memcpy(&x, p, 4);
        return x;
    }
    memcpy(&y, p, 8);
    return y;
}

#define AREA 128 /* offset of the words the ops test works on (64 bytes) */

/* One op of NELEM elements in call form `form`; res/cmp as the kind needs. */
static void post_form(int form, enum kind k, enum fi_datatype dt, enum fi_op op, uint8_t *buf,
                      uint8_t *cmp, uint8_t *res, void *ctx)
{
    unsigned w = width(dt);
    uint64_t at = pbase + AREA;
    /* two local pieces (2 + 3 elements), two remote ones in the msg form */
    struct fi_ioc iov[2] = {{buf, 2}, {buf + 2 * w, NELEM - 2}};
    struct fi_ioc cv[2] = {{cmp, 2}, {cmp + 2 * w, NELEM - 2}};
    struct fi_ioc rv[2] = {{res, 2}, {res + 2 * w, NELEM - 2}};
    struct fi_rma_ioc rio[2] = {{at, 3, pkey}, {at + 3 * w, NELEM - 3, pkey}};
    struct fi_msg_atomic m = {.msg_iov = iov,
                              .iov_count = 2,
                              .addr = fx.peer,
                              .rma_iov = rio,
                              .rma_iov_count = 2,
                              .datatype = dt,
                              .op = op,
                              .context = ctx};
    if (form == 0) {
        if (k == BASE)
            POST(fi_atomic(fx.ep, buf, NELEM, NULL, fx.peer, at, pkey, dt, op, ctx));
        else if (k == FETCH)
            POST(fi_fetch_atomic(fx.ep, buf, NELEM, NULL, res, NULL, fx.peer, at, pkey, dt, op,
                                 ctx));
        else
            POST(fi_compare_atomic(fx.ep, buf, NELEM, NULL, cmp, NULL, res, NULL, fx.peer, at, pkey,
                                   dt, op, ctx));
    } else if (form == 1) {
        if (k == BASE)
            POST(fi_atomicv(fx.ep, iov, NULL, 2, fx.peer, at, pkey, dt, op, ctx));
        else if (k == FETCH)
            POST(
                fi_fetch_atomicv(fx.ep, iov, NULL, 2, rv, NULL, 2, fx.peer, at, pkey, dt, op, ctx));
        else
            POST(fi_compare_atomicv(fx.ep, iov, NULL, 2, cv, NULL, 2, rv, NULL, 2, fx.peer, at,
                                    pkey, dt, op, ctx));
    } else {
        if (k == BASE)
            POST(fi_atomicmsg(fx.ep, &m, FI_COMPLETION));
        else if (k == FETCH)
            POST(fi_fetch_atomicmsg(fx.ep, &m, rv, NULL, 2, FI_COMPLETION));
        else
            POST(fi_compare_atomicmsg(fx.ep, &m, cv, NULL, 2, rv, NULL, 2, FI_COMPLETION));
    }
}

static void one_case(enum fi_datatype dt, enum fi_op op, enum kind k, int round, uint64_t *seed)
{
    unsigned w = width(dt);
    uint8_t mem[64], want[64], got[64], buf[NELEM * 8], cmp[NELEM * 8], res[NELEM * 8];
    for (int i = 0; i < 64; i++)
        mem[i] = (uint8_t)rnd(seed);
    memcpy(want, mem, 64);
    memset(res, 0xa5, sizeof res);
    for (int i = 0; i < NELEM; i++) {
        uint64_t cur = get_w(mem + i * w, w);
        put_w(buf + i * w, pick(seed, cur), w);
        put_w(cmp + i * w, pick(seed, cur), w);
        put_w(want + i * w, ref(dt, op, cur, get_w(buf + i * w, w), get_w(cmp + i * w, w)), w);
    }
    rma(true, mem, 64, AREA);
    struct fi_context c;
    post_form(round % 3, k, dt, op, buf, cmp, res, &c);
    memset(buf, 0, sizeof buf); /* copied at the post: the caller's to reuse */
    struct comp e = wait_one();
    CHECK(e.err == 0 && e.ctx == &c);
    CHECK(e.flags == (FI_ATOMIC | (k == BASE ? FI_WRITE : FI_READ)));
    rma(false, got, 64, AREA);
    if (memcmp(got, want, 64)) {
        fprintf(stderr, "rank %d: dt %d op %d kind %d form %d: target words differ\n", rank, dt, op,
                k, round % 3);
        failures++;
    }
    if (k == BASE) return;
    for (int i = 0; i < NELEM; i++)
        if (get_w(res + i * w, w) != get_w(mem + i * w, w)) {
            fprintf(stderr, "rank %d: dt %d op %d kind %d: element %d fetched %#llx not %#llx\n",
                    rank, dt, op, k, i, (unsigned long long)get_w(res + i * w, w),
                    (unsigned long long)get_w(mem + i * w, w));
            failures++;
        }
    CHECK(NELEM * w == sizeof res || res[NELEM * w] == 0xa5); /* nothing past the results */
}

static void test_ops(void)
{
    if (rank == 1) {
        uint64_t seed = 0x5eed;
        for (int dt = FI_INT32; dt <= FI_DOUBLE; dt++)
            for (int op = FI_MIN; op < FI_ATOMIC_OP_LAST; op++)
                for (int k = 0; k < 3; k++)
                    if (supported(dt, op, k))
                        for (int r = 0; r < ROUNDS; r++)
                            one_case(dt, op, k, r, &seed);
    }
    sync_peers();
}

/* ---- inject ----------------------------------------------------------------------- */

static void test_inject(void)
{
    if (rank == 1) {
        uint64_t zero = 0, v = 40, old = 0;
        rma(true, &zero, 8, 0);
        POST(fi_inject_atomic(fx.ep, &v, 1, fx.peer, pbase, pkey, FI_UINT64, FI_SUM));
        v = 2; /* the injected operand was copied */
        POST(fi_inject_atomic(fx.ep, &v, 1, fx.peer, pbase, pkey, FI_UINT64, FI_SUM));
        /* atomics to one peer apply in order: the fetch sees both adds, and its
         * completion is the only one */
        struct fi_context c;
        POST(fi_fetch_atomic(fx.ep, &zero, 1, NULL, &old, NULL, fx.peer, pbase, pkey, FI_UINT64,
                             FI_SUM, &c));
        wait_ok(&c);
        CHECK(old == 42);
        struct fi_cq_tagged_entry e;
        CHECK(fi_cq_read(fx.cq, &e, 1) == -FI_EAGAIN);
    }
    sync_peers();
}

/* ---- count: fetch-adds from both ranks on rank 0's word ------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_count(void)
{
    /* the word lives at rank 0: rank 0 reaches it through its own address */
    fi_addr_t dst = rank == 0 ? self : fx.peer;
    uint64_t key = rank == 0 ? mykey : pkey, at = (rank == 0 ? mybase : pbase) + 64;
    if (rank == 0) memset(win + 64, 0, 8);
    sync_peers();
    uint64_t *vals = calloc(2 * N_ADD, 8), one = 1;
    struct fi_context ctx[WINDOW];
    int posted = 0, done = 0, inflight = 0;
    while (done < N_ADD) {
        while (posted < N_ADD && inflight < WINDOW) {
            ssize_t r = fi_fetch_atomic(fx.ep, &one, 1, NULL, &vals[posted], NULL, dst, at, key,
                                        FI_UINT64, FI_SUM, &ctx[posted % WINDOW]);
            if (r == -FI_EAGAIN) break;
            OK(r);
            posted++, inflight++;
        }
        struct fi_cq_tagged_entry e[16];
        ssize_t n = fi_cq_read(fx.cq, e, 16);
        if (n == -FI_EAGAIN) continue;
        if (n < 0) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(fx.cq, &err, 0);
            fprintf(stderr, "rank %d: fetch-add failed: %d prov %d\n", rank, err.err,
                    err.prov_errno);
            exit(1);
        }
        done += (int)n, inflight -= (int)n;
    }
    /* rank 1's values to rank 0, which checks the union */
    struct fi_context c;
    if (rank == 1) {
        POST(fi_tsend(fx.ep, vals, N_ADD * 8, NULL, fx.peer, 0x7777, &c));
        wait_ok(&c);
    } else {
        POST(fi_trecv(fx.ep, vals + N_ADD, N_ADD * 8, NULL, fx.peer, 0x7777, 0, &c));
        wait_ok(&c);
        uint64_t fin = __atomic_load_n((uint64_t *)(win + 64), __ATOMIC_SEQ_CST);
        CHECK(fin == 2 * N_ADD);
        qsort(vals, 2 * N_ADD, 8, cmp_u64);
        size_t bad = 0;
        for (uint64_t i = 0; i < 2 * N_ADD; i++)
            bad += vals[i] != i;
        if (bad) fprintf(stderr, "rank 0: %zu fetched values not distinct/in range\n", bad);
        CHECK(bad == 0);
    }
    free(vals);
    sync_peers();
}

/* ---- cswap: a lock at rank 0 around a read-modify-write of a plain counter ------- */

static uint64_t lock_op(fi_addr_t dst, uint64_t key, uint64_t at, enum fi_op op, uint64_t v,
                        uint64_t cmp)
{
    uint64_t old = ~0ull;
    struct fi_context c;
    if (op == FI_CSWAP)
        POST(fi_compare_atomic(fx.ep, &v, 1, NULL, &cmp, NULL, &old, NULL, dst, at, key, FI_UINT64,
                               FI_CSWAP, &c));
    else
        POST(fi_fetch_atomic(fx.ep, &v, 1, NULL, &old, NULL, dst, at, key, FI_UINT64, op, &c));
    wait_ok(&c);
    return old;
}

static void test_cswap(void)
{
    fi_addr_t dst = rank == 0 ? self : fx.peer;
    uint64_t key = rank == 0 ? mykey : pkey, base = rank == 0 ? mybase : pbase;
    if (rank == 0) memset(win + 256, 0, 16); /* lock word, counter */
    sync_peers();
    for (int i = 0; i < K_LOCK; i++) {
        while (lock_op(dst, key, base + 256, FI_CSWAP, (uint64_t)rank + 1, 0) != 0)
            ;
        uint64_t cnt = 0;
        struct fi_context c;
        POST(fi_read(fx.ep, &cnt, 8, NULL, dst, base + 264, key, &c));
        wait_ok(&c);
        cnt++;
        POST(fi_write(fx.ep, &cnt, 8, NULL, dst, base + 264, key, &c));
        wait_ok(&c); /* the write is at the target before the release */
        CHECK(lock_op(dst, key, base + 256, FI_ATOMIC_WRITE, 0, 0) == (uint64_t)rank + 1);
    }
    sync_peers();
    if (rank == 0) {
        uint64_t cnt;
        memcpy(&cnt, win + 264, 8);
        if (cnt != 2 * K_LOCK) fprintf(stderr, "rank 0: counter %llu\n", (unsigned long long)cnt);
        CHECK(cnt == 2 * K_LOCK);
    }
    sync_peers();
}

/* ---- refused ---------------------------------------------------------------------- */

static void refuse(uint64_t at, uint64_t key, int fi_err, int prov)
{
    uint64_t v = 1, old = 0x5a5a;
    struct fi_context c;
    POST(fi_fetch_atomic(fx.ep, &v, 1, NULL, &old, NULL, fx.peer, at, key, FI_UINT64, FI_SUM, &c));
    struct comp e = wait_one();
    if (e.err != fi_err || e.prov_errno != prov)
        fprintf(stderr, "rank %d: at %#llx: err %d prov %d, expected %d %d\n", rank,
                (unsigned long long)at, e.err, e.prov_errno, fi_err, prov);
    CHECK(e.ctx == &c && e.err == fi_err && e.prov_errno == prov);
    CHECK(e.flags & FI_ATOMIC);
    CHECK(old == 0x5a5a);
    CHECK(strlen(fi_cq_strerror(fx.cq, e.prov_errno, NULL, NULL, 0)) > 0);
}

static void test_refused(void)
{
    if (rank == 1) {
        uint64_t r0 = fi_cntr_read(rd_cntr), e0 = fi_cntr_readerr(rd_cntr);
        refuse(pbase + WIN, pkey, FI_EACCES, -ERANGE);     /* past the end */
        refuse(pbase + WIN - 4, pkey, FI_EACCES, -ERANGE); /* half outside */
        refuse(pbase + 4, pkey, FI_EINVAL, -EDOM);         /* misaligned */
        refuse(pbase, pkey ^ 0x77000000ull, FI_EKEYREJECTED, -ENOKEY);
        if (fx.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
            refuse(0, pkey, FI_EACCES, -ERANGE); /* an offset is not an address */
        CHECK(fi_cntr_read(rd_cntr) == r0);
        uint64_t ne = fi_cntr_readerr(rd_cntr) - e0;
        CHECK(ne == ((fx.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? 5u : 4u));
        /* refused by the call: unsupported op or datatype, too many elements */
        uint64_t v[MAXCNT + 1] = {0}, res[MAXCNT + 1];
        struct fi_context c;
        CHECK(fi_atomic(fx.ep, v, 1, NULL, fx.peer, pbase, pkey, FI_UINT64, FI_PROD, &c) ==
              -FI_EOPNOTSUPP);
        CHECK(fi_atomic(fx.ep, v, 1, NULL, fx.peer, pbase, pkey, FI_INT8, FI_SUM, &c) ==
              -FI_EOPNOTSUPP);
        CHECK(fi_atomic(fx.ep, v, 1, NULL, fx.peer, pbase, pkey, FI_UINT64, FI_ATOMIC_READ, &c) ==
              -FI_EOPNOTSUPP);
        CHECK(fi_fetch_atomic(fx.ep, v, 1, NULL, res, NULL, fx.peer, pbase, pkey, FI_DOUBLE, FI_SUM,
                              &c) == -FI_EOPNOTSUPP);
        CHECK(fi_compare_atomic(fx.ep, v, 1, NULL, v, NULL, res, NULL, fx.peer, pbase, pkey,
                                FI_UINT64, FI_MSWAP, &c) == -FI_EOPNOTSUPP);
        CHECK(fi_atomic(fx.ep, v, MAXCNT + 1, NULL, fx.peer, pbase, pkey, FI_UINT64, FI_SUM, &c) ==
              -FI_EINVAL);
        CHECK(fi_atomic(fx.ep, v, 0, NULL, fx.peer, pbase, pkey, FI_UINT64, FI_SUM, &c) ==
              -FI_EINVAL);
        /* counts whose sum wraps around to a small one */
        struct fi_ioc wrap[2] = {{v, SIZE_MAX}, {v, 2}};
        CHECK(fi_atomicv(fx.ep, wrap, NULL, 2, fx.peer, pbase, pkey, FI_UINT64, FI_SUM, &c) ==
              -FI_EINVAL);
        struct fi_rma_ioc rwrap[2] = {{pbase, SIZE_MAX, pkey}, {pbase, 2, pkey}};
        struct fi_ioc one = {v, 1};
        struct fi_msg_atomic mw = {.msg_iov = &one,
                                   .iov_count = 1,
                                   .addr = fx.peer,
                                   .rma_iov = rwrap,
                                   .rma_iov_count = 2,
                                   .datatype = FI_UINT64,
                                   .op = FI_SUM,
                                   .context = &c};
        CHECK(fi_atomicmsg(fx.ep, &mw, 0) == -FI_EINVAL);
        /* the most elements allowed: one completion for all */
        CHECK(fi_atomic(fx.ep, v, MAXCNT, NULL, fx.peer, pbase + 512, pkey, FI_UINT64, FI_SUM,
                        &c) == 0);
        wait_ok(&c);
        struct fi_cq_tagged_entry e;
        CHECK(fi_cq_read(fx.cq, &e, 1) == -FI_EAGAIN);
    }
    sync_peers();
}

/* What the counters saw: the ops test's fetching and compare atomics as
 * reads, the rest as writes (fi_cntr(3), fi_cq(3): FI_READ / FI_WRITE). */
static void check_counters(uint64_t reads, uint64_t writes)
{
    if (rank != 1) return;
    uint64_t r = fi_cntr_read(rd_cntr), w = fi_cntr_read(wr_cntr);
    if (r != reads || w != writes)
        fprintf(stderr, "rank 1: counters read %llu write %llu, expected %llu %llu\n",
                (unsigned long long)r, (unsigned long long)w, (unsigned long long)reads,
                (unsigned long long)writes);
    CHECK(r == reads && w == writes);
}

static void exchange_keys(struct fid_mr *mr, bool vaddr)
{
    mykey = fi_mr_key(mr);
    mybase = vaddr ? (uintptr_t)win : 0;
    uint64_t mine[2] = {mykey, mybase}, theirs[2];
    struct fi_context cs, cr;
    POST(fi_trecv(fx.ep, theirs, 16, NULL, fx.peer, 0x3333, 0, &cr));
    POST(fi_tsend(fx.ep, mine, 16, NULL, fx.peer, 0x3333, &cs));
    for (int i = 0; i < 2; i++)
        CHECK(wait_one().err == 0);
    pkey = theirs[0];
    pbase = theirs[1];
}

/* ---- rights: a region's access as fi_mr(3) gives it ------------------------------- *
 * "FI_REMOTE_WRITE: the target buffer of an RMA write or atomic operation":
 * every atomic, fetching ones too (as verbs gives REMOTE_ATOMIC with it). A
 * read-only region takes RMA reads and no atomic, refused at the target
 * (FI_EACCES), the word untouched and the fetch buffer too. */
static struct comp atomic_kind(uint64_t key, uint64_t at, int kind, uint64_t v, uint64_t cmp,
                               uint64_t *old)
{
    struct fi_context c;
    if (kind == 0)
        POST(fi_atomic(fx.ep, &v, 1, NULL, fx.peer, at, key, FI_UINT64, FI_SUM, &c));
    else if (kind == 1)
        POST(fi_fetch_atomic(fx.ep, &v, 1, NULL, old, NULL, fx.peer, at, key, FI_UINT64,
                             FI_ATOMIC_READ, &c));
    else
        POST(fi_compare_atomic(fx.ep, &v, 1, NULL, &cmp, NULL, old, NULL, fx.peer, at, key,
                               FI_UINT64, FI_CSWAP, &c));
    struct comp e = wait_one();
    CHECK(e.ctx == &c);
    return e;
}

static void test_rights(bool vaddr)
{
    enum { RW = 4096 };
    uint64_t *wo = aligned_alloc(4096, RW), *ro = aligned_alloc(4096, RW);
    memset(wo, 0, RW);
    memset(ro, 0x11, RW);
    struct fid_mr *mw, *mrd;
    OK(fi_mr_reg(fx.dom, wo, RW, FI_REMOTE_WRITE, 0, 0, 0, &mw, NULL));
    OK(fi_mr_reg(fx.dom, ro, RW, FI_REMOTE_READ, 0, 0, 0, &mrd, NULL));
    uint64_t mine[4] = {fi_mr_key(mw), vaddr ? (uintptr_t)wo : 0, fi_mr_key(mrd),
                        vaddr ? (uintptr_t)ro : 0},
             theirs[4];
    struct fi_context cs, cr;
    POST(fi_trecv(fx.ep, theirs, sizeof theirs, NULL, fx.peer, 0x3334, 0, &cr));
    POST(fi_tsend(fx.ep, mine, sizeof mine, NULL, fx.peer, 0x3334, &cs));
    for (int i = 0; i < 2; i++)
        CHECK(wait_one().err == 0);
    if (rank == 1) {
        /* write-only: word 0 goes 0 -> 1 (sum), read back 1, swapped 1 -> 5 */
        uint64_t old = 0x5a5a;
        CHECK(atomic_kind(theirs[0], theirs[1], 0, 1, 0, &old).err == 0);
        CHECK(atomic_kind(theirs[0], theirs[1], 1, 0, 0, &old).err == 0 && old == 1);
        old = 0x5a5a;
        CHECK(atomic_kind(theirs[0], theirs[1], 2, 5, 1, &old).err == 0 && old == 1);
        for (int kind = 0; kind < 3; kind++) { /* read-only: refused */
            old = 0x5a5a;
            struct comp e = atomic_kind(theirs[2], theirs[3], kind, 9, 0x1111111111111111ull, &old);
            if (e.err != FI_EACCES || e.prov_errno != -EACCES)
                fprintf(stderr, "rank 1: rights kind %d: err %d prov %d\n", kind, e.err,
                        e.prov_errno);
            CHECK(e.err == FI_EACCES && e.prov_errno == -EACCES && old == 0x5a5a);
        }
        /* and what each grants besides */
        uint64_t v = 0x77, got = 0;
        struct fi_context c;
        POST(fi_write(fx.ep, &v, 8, NULL, fx.peer, theirs[1] + 8, theirs[0], &c));
        CHECK(wait_one().err == 0);
        POST(fi_read(fx.ep, &got, 8, NULL, fx.peer, theirs[3], theirs[2], &c));
        CHECK(wait_one().err == 0);
        CHECK(got == 0x1111111111111111ull);
    }
    sync_peers();
    if (rank == 0) CHECK(wo[0] == 5 && wo[1] == 0x77 && ro[0] == 0x1111111111111111ull);
    OK(fi_close(&mw->fid));
    OK(fi_close(&mrd->fid));
    free(wo);
    free(ro);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fi_atomic DIR [vaddr|offset] (under ulnrun -n 2)\n");
        return 2;
    }
    bool vaddr = argc > 2 && !strcmp(argv[2], "vaddr");
    struct fi_info *hints = fic_hints(FI_TAGGED | FI_ATOMIC | FI_RMA, NULL);
    hints->domain_attr->mr_mode = FI_MR_PROV_KEY | (vaddr ? FI_MR_VIRT_ADDR : 0);
    fic_open(&fx, hints, FI_AV_MAP, 0);
    CHECK(fx.info->caps & FI_ATOMIC);
    CHECK(fx.info->tx_attr->caps & FI_ATOMIC);
    CHECK(fx.info->rx_attr->caps & FI_ATOMIC);
    CHECK(!!(fx.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) == vaddr);
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
    OK(fi_cntr_open(fx.dom, &ca, &rd_cntr, NULL));
    OK(fi_cntr_open(fx.dom, &ca, &wr_cntr, NULL));
    OK(fi_ep_bind(fx.ep, &rd_cntr->fid, FI_READ));
    OK(fi_ep_bind(fx.ep, &wr_cntr->fid, FI_WRITE));
    fic_enable(&fx);
    fic_exchange(&fx, argv[1]);
    OK(fi_av_insert(fx.av, fx.name, 1, &self, 0, NULL));
    test_valid();

    win = aligned_alloc(4096, WIN);
    memset(win, 0, WIN);
    struct fid_mr *mr;
    OK(fi_mr_reg(fx.dom, win, WIN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    exchange_keys(mr, vaddr);

    test_ops();
    /* rank 1's reads so far: the ops test's fi_read per case and its fetching
     * and compare atomics; writes: its fi_write per case and base atomics. */
    uint64_t cases[3] = {0};
    for (int dt = FI_INT32; dt <= FI_DOUBLE; dt++)
        for (int op = FI_MIN; op < FI_ATOMIC_OP_LAST; op++)
            for (int k = 0; k < 3; k++)
                cases[k] += supported(dt, op, k) ? ROUNDS : 0;
    uint64_t all = cases[0] + cases[1] + cases[2];
    check_counters(all + cases[1] + cases[2], all + cases[0]);
    test_inject();
    check_counters(all + cases[1] + cases[2] + 1, all + cases[0] + 3);
    test_count();
    test_cswap();
    test_refused();
    test_rights(vaddr);

    OK(fi_close(&mr->fid));
    OK(fi_close(&fx.ep->fid));
    fx.ep = NULL;
    OK(fi_close(&rd_cntr->fid));
    OK(fi_close(&wr_cntr->fid));
    OK(fi_close(&fx.cq->fid));
    OK(fi_close(&fx.av->fid));
    OK(fi_close(&fx.dom->fid));
    OK(fi_close(&fx.fab->fid));
    fi_freeinfo(fx.info);
    fi_freeinfo(fx.hints);
    free(win);
    if (failures) fprintf(stderr, "rank %d: %d checks failed\n", rank, failures);
    return failures ? 1 : 0;
}
