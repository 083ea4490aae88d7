/*
 * atomics.c - remote atomics (uln_atomic) between real ranks.
 *
 *   count N   every rank does N fetch-adds of 1 on one word of rank 0, rank 0
 *             also N of its own __atomic_fetch_add on it: the word ends at
 *             exactly size*N + N and every fetched value is distinct (each in
 *             0..size*N+N-1, none twice). Once on memory from uln_mem_alloc,
 *             once on malloc'd memory (which the owner's engine applies).
 *   cas K     compare-and-swap mutual exclusion: K times per rank, take a lock
 *             word, GET a plain counter, PUT it + 1, release: the counter ends
 *             at size*K (a lost update would show).
 *   ops       every op at both widths against a reference computed here, one
 *             at a time and in bursts posted at once (applied in posting
 *             order); ULN_FENCE after a PUT, before a GET and before a NAP.
 *   refused   key, bounds, rights, alignment: each its errno, nothing written,
 *             result untouched, counted once at the owner; bad op/width at post.
 *   now N     count, posted with ULN_NOW: a fetch-add done in the call returns 1
 *             with its old value already fetched and writes no completion; one
 *             that is not returns 0 and completes. Where the initiators work
 *             on the mapped word (shm direct, uln_mem_alloc) every one is done
 *             in the call; a refused one still completes with its error.
 */
#include "common.h"

#define WINDOW    64     /* atomics in flight per rank */
#define FENCE_LEN 262144 /* a PUT of more than one chunk: it is queued */

struct ctx3 {
    struct t_job job;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static void setup(struct ctx3 *c)
{
    t_open(&c->job, 0);
    CHECK_OK(uln_cq_open(c->job.ctx, 4096, &c->cq));
    CHECK_OK(uln_ep_open(c->job.ctx, c->cq, c->cq, &c->ep));
    t_barrier(&c->job);
}

/* Post one atomic, polling while the send queue is full. */
static void post(struct ctx3 *c, int peer, unsigned op, unsigned width, uint64_t key, uint64_t off,
                 uint64_t operand, uint64_t compare, void *result, uint64_t ud, unsigned flags)
{
    double deadline = t_now() + 60;
    for (;;) {
        int rc = uln_atomic(c->ep, peer, op, width, key, off, operand, compare, result, ud, flags);
        if (rc == 0) return;
        CHECK_RC(rc, -EAGAIN);
        CHECKF(t_now() < deadline, "send queue stays full");
        struct uln_cqe e;
        CHECK(uln_cq_poll(c->cq, &e, 0) >= 0);
    }
}

/* Post one atomic and wait for its completion: its status. */
static int atomic_sync(struct ctx3 *c, int peer, unsigned op, unsigned width, uint64_t key,
                       uint64_t off, uint64_t operand, uint64_t compare, void *result)
{
    post(c, peer, op, width, key, off, operand, compare, result, 0xa70, 0);
    struct uln_cqe e = t_cq_take1(c->cq, 30000, "an atomic");
    CHECK_CQE(&e, e.op == ULN_OP_ATOMIC && e.user_data == 0xa70 && e.peer == peer);
    CHECK_CQE(&e, e.status != 0 || e.len == width);
    return e.status;
}

static void rdma_sync(struct ctx3 *c, bool put, int peer, void *buf, size_t len, uint64_t key,
                      uint64_t off)
{
    if (put)
        CHECK_OK(uln_put(c->ep, peer, buf, len, key, off, 0x9e7, 0));
    else
        CHECK_OK(uln_get(c->ep, peer, buf, len, key, off, 0x9e7, 0));
    struct uln_cqe e = t_cq_take1(c->cq, 30000, put ? "a PUT" : "a GET");
    CHECK_CQE(&e, e.status == 0 && e.op == (put ? ULN_OP_PUT : ULN_OP_GET));
}

/* ---- count ---------------------------------------------------------------- */

/* Where each rank's fetched values go in rank 0's collection region: rank
 * r's uln_atomic ones at r*n, rank 0's own __atomic ones after all of them. */
static void count_collect(struct ctx3 *c, uint64_t n, uint64_t *vals, uint64_t *all, uint64_t akey)
{
    int rank = c->job.rank, size = c->job.size;
    if (rank == 0) {
        memcpy(all, vals, n * 8);
        memcpy(all + (uint64_t)size * n, vals + n, n * 8);
    } else {
        rdma_sync(c, true, 0, vals, n * 8, akey, (uint64_t)rank * n * 8);
    }
    t_barrier(&c->job);
}

static void count_check(uint64_t fin, const uint64_t *all, uint64_t total)
{
    CHECKF(fin == total, "the word is %llu after %llu fetch-adds", (unsigned long long)fin,
           (unsigned long long)total);
    uint8_t *seen = calloc(total, 1);
    CHECK(seen != NULL);
    uint64_t bad = 0, twice = 0;
    for (uint64_t i = 0; i < total; i++) {
        if (all[i] >= total)
            bad++;
        else if (seen[all[i]]++)
            twice++;
    }
    CHECKF(bad == 0 && twice == 0, "%llu fetched values out of range, %llu seen twice",
           (unsigned long long)bad, (unsigned long long)twice);
    free(seen);
}

/* n fetch-adds of 1 on rank 0's word, WINDOW in flight; rank 0 meanwhile
 * also does n of its own with __atomic_fetch_add on the word (own != NULL),
 * one per pass. */
static uint64_t count_run(struct ctx3 *c, uint64_t n, uint64_t wkey, uint64_t *vals, uint64_t *own,
                          unsigned flags)
{
    uint64_t posted = 0, done = 0, mine = 0, now = 0;
    while (done < n || (own && mine < n)) {
        while (posted < n && posted - done < WINDOW) {
            int rc = uln_atomic(c->ep, 0, ULN_ATOMIC_ADD, 8, wkey, 0, 1, 0, &vals[posted], posted,
                                flags);
            if (rc == -EAGAIN) break;
            CHECKF(rc == 0 || (rc == 1 && (flags & ULN_NOW)), "uln_atomic: %d", rc);
            posted++;
            if (rc == 1) { /* done in the call: no completion comes */
                done++;
                now++;
            }
        }
        if (own && mine < n) {
            vals[n + mine] = __atomic_fetch_add(own, 1, __ATOMIC_SEQ_CST);
            mine++;
        }
        struct uln_cqe e[WINDOW];
        int r = uln_cq_poll(c->cq, e, WINDOW);
        CHECK(r >= 0);
        for (int i = 0; i < r; i++)
            CHECK_CQE(&e[i], e[i].status == 0 && e[i].op == ULN_OP_ATOMIC && e[i].len == 8 &&
                                 e[i].user_data < n);
        done += (uint64_t)r;
        if (r == 0 && posted - done == WINDOW && !(own && mine < n)) {
            int w = uln_cq_wait(c->cq, 100);
            CHECK(w == 0 || w == -ETIMEDOUT);
        }
    }
    return now;
}

static void test_count(struct ctx3 *c, uint64_t n, int kind, unsigned flags)
{
    int rank = c->job.rank, size = c->job.size;
    uint64_t total = (uint64_t)size * n + n; /* rank 0 adds n more itself */
    struct t_region word, all;
    uint64_t keys[2] = {0, 0};
    uint64_t *peer_keys = t_xmalloc((size_t)size * 2 * 8);
    if (rank == 0) {
        t_region_new(&c->job, &word, kind, 64, ULN_ACCESS_REMOTE_ATOMIC);
        t_region_new(&c->job, &all, T_KIND_SHM, total * 8, ULN_ACCESS_REMOTE_WRITE);
        memset(word.buf, 0, 64);
        keys[0] = word.key;
        keys[1] = all.key;
    }
    /* Read before the exchange: its closing barrier lets the peers go first,
     * and rank 0 serves their first atomics while it still waits in it. */
    struct uln_counters before, after;
    CHECK_OK(uln_counters_get(c->job.ctx, &before));
    t_exchange(&c->job, c->ep, c->cq, keys, 2, peer_keys);
    uint64_t *vals = t_xmalloc(2 * n * 8);
    double t0 = t_now();
    uint64_t now = count_run(c, n, peer_keys[0], vals, rank == 0 ? word.buf : NULL, flags);
    /* Done in the call where the initiator applies it itself: a peer on
     * this host, direct, on memory it maps (all but the odd one that found
     * the queue busy); never where the owner's engine must. Rank 0 reaches
     * its own word directly in every mode: no claim about it. */
    bool mapped = (c->job.info.caps_all & ULN_CAP_DIRECT_RMA) && kind == T_KIND_SHM;
    if ((flags & ULN_NOW) && rank != 0)
        CHECKF(mapped ? now >= n - n / 16 : now == 0,
               "%llu of %llu fetch-adds done in the call (%s)", (unsigned long long)now,
               (unsigned long long)n, mapped ? "all expected" : "none");
    CHECK_OK(uln_counters_get(c->job.ctx, &after));
    CHECKF(after.atomics - before.atomics == n, "atomics counted %llu, expected %llu",
           (unsigned long long)(after.atomics - before.atomics), (unsigned long long)n);
    if (rank == 0)
        printf("rank0: %s: %llu fetch-adds per rank in %.2f s\n", t_kind_name(kind),
               (unsigned long long)n, t_now() - t0);
    count_collect(c, n, vals, rank == 0 ? all.buf : NULL, peer_keys[1]);
    CHECK_OK(uln_counters_get(c->job.ctx, &after)); /* all served: after the barrier */
    if (rank == 0) {
        /* Who applied them: the owner's engine for memory a peer cannot map
         * (malloc'd), through the rings, or over udp; else the initiators. */
        int udp = c->job.info.udp_peers, shm = size - 1 - udp;
        bool shm_by_target = !c->job.info.shm_direct || kind == T_KIND_MALLOC;
        uint64_t least = (uint64_t)(udp + (shm_by_target ? shm : 0)) * n;
        uint64_t served = after.atomics_served - before.atomics_served;
        CHECKF(served >= least, "rank 0 applied %llu atomics itself, at least %llu expected",
               (unsigned long long)served, (unsigned long long)least);
        if (least == 0) /* every peer on this host worked on the mapped word */
            CHECKF(served == 0, "rank 0 applied %llu atomics, initiators should have",
                   (unsigned long long)served);
        /* Under ULN_FAULT the requests did arrive twice (and were dropped). */
        if (getenv("ULN_FAULT"))
            CHECKF(after.duplicates > before.duplicates && after.retransmits > before.retransmits,
                   "no duplicate or resend seen: the faults were not injected");
        count_check(__atomic_load_n((uint64_t *)word.buf, __ATOMIC_SEQ_CST), all.buf, total);
        /* The word beside it is untouched. */
        CHECK(((uint64_t *)word.buf)[1] == 0);
    }
    free(vals);
    free(peer_keys);
    t_barrier(&c->job);
    if (rank == 0) {
        t_region_free(&c->job, &word);
        t_region_free(&c->job, &all);
    }
}

/* ---- cas: mutual exclusion -------------------------------------------------- */

static void test_cas(struct ctx3 *c, int iters)
{
    int rank = c->job.rank, size = c->job.size;
    struct t_region lock, data;
    uint64_t keys[2] = {0, 0};
    uint64_t *pk = t_xmalloc((size_t)size * 2 * 8);
    if (rank == 0) {
        t_region_new(&c->job, &lock, T_KIND_SHM, 8, ULN_ACCESS_REMOTE_ATOMIC);
        t_region_new(&c->job, &data, T_KIND_MALLOC, 8,
                     ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        memset(lock.buf, 0, 8);
        memset(data.buf, 0, 8);
        keys[0] = lock.key;
        keys[1] = data.key;
    }
    t_exchange(&c->job, c->ep, c->cq, keys, 2, pk);
    uint64_t spins = 0;
    for (int i = 0; i < iters; i++) {
        uint64_t old = 1;
        while (old != 0) { /* take it: 0 -> rank + 1 */
            CHECK_OK(atomic_sync(c, 0, ULN_ATOMIC_CSWAP, 8, pk[0], 0, (uint64_t)rank + 1, 0, &old));
            CHECKF(old <= (uint64_t)size, "the lock word holds %llu", (unsigned long long)old);
            CHECKF(old != (uint64_t)rank + 1, "rank %d took the lock twice", rank);
            spins += old != 0;
        }
        /* The critical section: a read-modify-write no atomic protects. */
        uint64_t v;
        rdma_sync(c, false, 0, &v, 8, pk[1], 0);
        v++;
        rdma_sync(c, true, 0, &v, 8, pk[1], 0); /* complete: visible at rank 0 */
        CHECK_OK(atomic_sync(c, 0, ULN_ATOMIC_SWAP, 8, pk[0], 0, 0, 0, &old));
        CHECKF(old == (uint64_t)rank + 1, "released a lock word holding %llu",
               (unsigned long long)old);
    }
    t_barrier(&c->job);
    if (rank == 0) {
        uint64_t v = *(volatile uint64_t *)data.buf;
        CHECKF(v == (uint64_t)size * (uint64_t)iters, "counter %llu, expected %llu",
               (unsigned long long)v, (unsigned long long)size * (uint64_t)iters);
        printf("rank0: %d critical sections, %llu failed attempts here\n", size * iters,
               (unsigned long long)spins);
        t_region_free(&c->job, &lock);
        t_region_free(&c->job, &data);
    }
    free(pk);
    t_barrier(&c->job);
}

/* ---- ops: every op and width against a reference ---------------------------- */

static uint64_t ref_apply(uint64_t *w, unsigned op, unsigned width, uint64_t v, uint64_t cmp)
{
    uint64_t mask = width == 4 ? 0xffffffffull : ~0ull;
    uint64_t old = *w & mask, nw = old;
    v &= mask;
    cmp &= mask;
    int64_t so = width == 4 ? (int32_t)(uint32_t)old : (int64_t)old;
    int64_t sv = width == 4 ? (int32_t)(uint32_t)v : (int64_t)v;
    switch (op) {
    case ULN_ATOMIC_ADD:
        nw = old + v;
        break;
    case ULN_ATOMIC_SWAP:
        nw = v;
        break;
    case ULN_ATOMIC_CSWAP:
        nw = old == cmp ? v : old;
        break;
    case ULN_ATOMIC_AND:
        nw = old & v;
        break;
    case ULN_ATOMIC_OR:
        nw = old | v;
        break;
    case ULN_ATOMIC_XOR:
        nw = old ^ v;
        break;
    case ULN_ATOMIC_MIN:
        nw = v < old ? v : old;
        break;
    case ULN_ATOMIC_MAX:
        nw = v > old ? v : old;
        break;
    case ULN_ATOMIC_SMIN:
        nw = sv < so ? v : old;
        break;
    case ULN_ATOMIC_SMAX:
        nw = sv > so ? v : old;
        break;
    }
    *w = nw & mask;
    return old;
}

/* Operands that reach the edges: signs, carries, equal values. */
static uint64_t pick(uint64_t *seed, uint64_t cur)
{
    switch (t_rand(seed) % 6) {
    case 0:
        return cur; /* a CSWAP that matches, a min/max tie */
    case 1:
        return 0;
    case 2:
        return ~0ull;
    case 3:
        return 0x80000000ull;
    case 4:
        return 0x8000000000000000ull | (t_rand(seed) & 0xff);
    default:
        return t_rand(seed);
    }
}

static void ops_kind(struct ctx3 *c, int kind, uint64_t key, int iters)
{
    /* Words at offsets 0 (8 bytes), 8 and 12 (4 bytes each), 16 (8 bytes). */
    uint64_t ref[4] = {0, 0, 0, 0};
    const uint64_t offs[4] = {0, 8, 12, 16};
    const unsigned widths[4] = {8, 4, 4, 8};
    uint64_t seed = 0x0a70a70a7ull + (uint64_t)kind;
    for (int i = 0; i < iters; i++) {
        int w = (int)(t_rand(&seed) % 4);
        unsigned op = ULN_ATOMIC_ADD + (unsigned)(t_rand(&seed) % 10);
        uint64_t v = pick(&seed, ref[w]), cmp = pick(&seed, ref[w]);
        uint64_t want = ref_apply(&ref[w], op, widths[w], v, cmp);
        uint64_t got = 0xdeadbeefdeadbeefull;
        CHECK_OK(atomic_sync(c, 0, op, widths[w], key, offs[w], v, cmp, &got));
        if (widths[w] == 4) /* only the low 4 bytes are written */
            CHECKF((got >> 32) == 0xdeadbeefull, "a 32-bit result wrote 8 bytes");
        uint64_t g = widths[w] == 4 ? (uint32_t)got : got;
        CHECKF(g == want, "%s: op %u width %u at %llu: fetched %#llx, expected %#llx",
               t_kind_name(kind), op, widths[w], (unsigned long long)offs[w], (unsigned long long)g,
               (unsigned long long)want);
    }
    /* The words as the target holds them, and the one past them untouched. */
    uint8_t mem[32];
    rdma_sync(c, false, 0, mem, 32, key, 0);
    for (int k = 24; k < 32; k++)
        CHECKF(mem[k] == 0, "%s: byte %d past the words written", t_kind_name(kind), k);
    for (int w = 0; w < 4; w++) {
        uint64_t v = 0;
        memcpy(&v, mem + offs[w], widths[w]);
        CHECKF(v == ref[w], "%s: word %d is %#llx, expected %#llx", t_kind_name(kind), w,
               (unsigned long long)v, (unsigned long long)ref[w]);
    }
}

/* Atomics from one endpoint to one peer apply in the order posted: bursts of
 * ORDER_BURST random ops on four words, posted without waiting for any, fetch
 * exactly what applying them one by one in posting order gives. The words
 * sit past ops_kind's (offset 32 on). */
#define ORDER_BURST 48
static void order_kind(struct ctx3 *c, int kind, uint64_t key, int bursts)
{
    uint64_t ref[4] = {0, 0, 0, 0}, got[ORDER_BURST], want[ORDER_BURST];
    const uint64_t offs[4] = {32, 40, 44, 48};
    const unsigned widths[4] = {8, 4, 4, 8};
    unsigned wof[ORDER_BURST];
    uint64_t seed = 0x0bde70bde7ull + (uint64_t)kind;
    for (int b = 0; b < bursts; b++) {
        for (int i = 0; i < ORDER_BURST; i++) {
            unsigned w = (unsigned)(t_rand(&seed) % 4);
            unsigned op = ULN_ATOMIC_ADD + (unsigned)(t_rand(&seed) % 10);
            uint64_t v = pick(&seed, ref[w]), cmp = pick(&seed, ref[w]);
            want[i] = ref_apply(&ref[w], op, widths[w], v, cmp);
            wof[i] = w;
            got[i] = 0;
            post(c, 0, op, widths[w], key, offs[w], v, cmp, &got[i], 0x0de0 + (uint64_t)i, 0);
        }
        struct uln_cqe e[ORDER_BURST];
        t_cq_take(c->cq, e, ORDER_BURST, 30000, "a burst of atomics");
        for (int i = 0; i < ORDER_BURST; i++)
            CHECK_CQE(&e[i], e[i].status == 0 && e[i].op == ULN_OP_ATOMIC &&
                                 e[i].user_data - 0x0de0 < ORDER_BURST);
        for (int i = 0; i < ORDER_BURST; i++) {
            uint64_t g = widths[wof[i]] == 4 ? (uint32_t)got[i] : got[i];
            CHECKF(g == want[i], "%s: burst %d, op %d of it fetched %#llx; in posting order %#llx",
                   t_kind_name(kind), b, i, (unsigned long long)g, (unsigned long long)want[i]);
        }
    }
}

/* ULN_FENCE on a NAP after an atomic (ulnet.h, "Ordering"): the NAP starts
 * once the atomic was applied, so the target, taking the NAP, already sees
 * the add - on every kind of memory, also where the target's engine applies
 * it (a silent add: no completion of its own to wait for). Rank 1 sends,
 * rank 0 checks the word at FENCE_NAP_OFF of its region. */
#define FENCE_NAP_OFF 64
#define FENCE_NAPS    50
static void fence_nap_send(struct ctx3 *c, uint64_t key)
{
    uint64_t old = 0;
    CHECK_OK(atomic_sync(c, 0, ULN_ATOMIC_SWAP, 8, key, FENCE_NAP_OFF, 0, 0, &old));
    for (uint32_t i = 0; i < FENCE_NAPS; i++) {
        post(c, 0, ULN_ATOMIC_ADD, 8, key, FENCE_NAP_OFF, 1, 0, NULL, 0, ULN_SILENT);
        double deadline = t_now() + 60;
        int rc;
        while ((rc = uln_nap(c->ep, 0, &i, sizeof i, 0, ULN_INLINE | ULN_SILENT | ULN_FENCE)) ==
               -EAGAIN) {
            CHECKF(t_now() < deadline, "send queue stays full");
            struct uln_cqe e;
            CHECK(uln_cq_poll(c->cq, &e, 0) >= 0);
        }
        CHECK_OK(rc);
    }
}

static void fence_nap_recv(struct ctx3 *c, int kind, const struct t_region *r)
{
    const uint64_t *word =
        (const uint64_t *)(const void *)((const uint8_t *)r->buf + FENCE_NAP_OFF);
    for (uint32_t i = 0; i < FENCE_NAPS; i++) {
        /* The first after rank 1's ops on every kind before it. */
        struct uln_cqe e = t_cq_take1(c->cq, i ? 30000 : 120000, "a fenced NAP");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == sizeof i);
        uint32_t n = 0;
        memcpy(&n, e.data, sizeof n);
        t_release(c->cq, &e);
        uint64_t v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        CHECKF(n == i && v >= i + 1 && v <= FENCE_NAPS,
               "%s: fenced NAP %u (expected %u) found the word at %llu, expected %u..%u",
               t_kind_name(kind), n, i, (unsigned long long)v, i + 1, FENCE_NAPS);
    }
}

/* ULN_FENCE orders atomics against PUT and GET: a fenced atomic after a
 * large PUT (queued, chunked, over the rings placed by the target) fetches
 * what the PUT wrote; a silent add after it is applied in order; a fenced GET
 * after them reads their sum. */
static void fence_kind(struct ctx3 *c, int kind, uint64_t key, size_t len)
{
    uint64_t *buf = t_xmalloc(len);
    uint64_t at = len - 8;
    for (int i = 0; i < 30; i++) {
        uint64_t v = 1000 * (uint64_t)i + (uint64_t)kind, r = 0, w = 0;
        for (size_t k = 0; k < len / 8; k++)
            buf[k] = v;
        CHECK_OK(uln_put(c->ep, 0, buf, len, key, 0, 1, 0));
        post(c, 0, ULN_ATOMIC_ADD, 8, key, at, 1, 0, &r, 2, ULN_FENCE);
        post(c, 0, ULN_ATOMIC_ADD, 8, key, at, 5, 0, NULL, 3, ULN_SILENT);
        CHECK_OK(uln_get(c->ep, 0, &w, 8, key, at, 4, ULN_FENCE));
        struct uln_cqe e[3];
        const uint64_t want[3] = {1, 2, 4}; /* in posting order; the silent add has none */
        t_cq_take(c->cq, e, 3, 30000, "PUT, fenced atomic, fenced GET");
        for (int k = 0; k < 3; k++)
            CHECK_CQE(&e[k], e[k].status == 0 && e[k].user_data == want[k]);
        CHECKF(r == v, "%s: the fenced atomic fetched %llu, the PUT wrote %llu", t_kind_name(kind),
               (unsigned long long)r, (unsigned long long)v);
        CHECKF(w == v + 6, "%s: the fenced GET read %llu, expected %llu", t_kind_name(kind),
               (unsigned long long)w, (unsigned long long)v + 6);
    }
    free(buf);
}

static void test_ops(struct ctx3 *c, int iters)
{
    int rank = c->job.rank, size = c->job.size;
    struct t_region r[T_NKINDS];
    uint64_t keys[T_NKINDS] = {0};
    uint64_t *pk = t_xmalloc((size_t)size * T_NKINDS * 8);
    if (rank == 0)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&c->job, &r[k], k, FENCE_LEN,
                         ULN_ACCESS_REMOTE_ATOMIC | ULN_ACCESS_REMOTE_READ |
                             ULN_ACCESS_REMOTE_WRITE);
            memset(r[k].buf, 0, FENCE_LEN);
            keys[k] = r[k].key;
        }
    t_exchange(&c->job, c->ep, c->cq, keys, T_NKINDS, pk);
    if (rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            ops_kind(c, k, pk[k], iters);
            order_kind(c, k, pk[k], iters / ORDER_BURST + 1);
            fence_kind(c, k, pk[k], FENCE_LEN);
            fence_nap_send(c, pk[k]);
        }
    if (rank == 0)
        for (int k = 0; k < T_NKINDS; k++)
            fence_nap_recv(c, k, &r[k]);
    t_barrier(&c->job);
    if (rank == 0)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_free(&c->job, &r[k]);
        }
    free(pk);
    t_barrier(&c->job);
}

/* ---- refused ------------------------------------------------------------------ */

/* One refused atomic: its status, the word and result untouched, and the
 * owner's counter (read by the owner after a barrier) up by one. */
static void refuse_one(struct ctx3 *c, unsigned width, uint64_t key, uint64_t off, int want)
{
    uint64_t res = 0x5a5a5a5a5a5a5a5aull;
    int st = atomic_sync(c, 0, ULN_ATOMIC_ADD, width, key, off, 1, 0, &res);
    CHECKF(st == want, "width %u off %llu: status %d (%s), expected %s", width,
           (unsigned long long)off, st, t_errname(st), t_errname(want));
    CHECK(res == 0x5a5a5a5a5a5a5a5aull);
}

static void test_refused(struct ctx3 *c)
{
    int rank = c->job.rank, size = c->job.size;
    struct t_region r[T_NKINDS], ro;
    uint64_t keys[T_NKINDS + 2] = {0};
    uint64_t *pk = t_xmalloc((size_t)size * (T_NKINDS + 2) * 8);
    if (rank == 0) {
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&c->job, &r[k], k, 64, ULN_ACCESS_REMOTE_ATOMIC);
            memset(r[k].buf, 0x11, 64);
            keys[k] = r[k].key;
        }
        /* No atomic right: read and write are not enough. */
        t_region_new(&c->job, &ro, T_KIND_SHM, 64,
                     ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        memset(ro.buf, 0x11, 64);
        keys[T_NKINDS] = ro.key;
        /* A key that was live once: stale. */
        struct t_region gone;
        t_region_new(&c->job, &gone, T_KIND_SHM, 64, ULN_ACCESS_REMOTE_ATOMIC);
        keys[T_NKINDS + 1] = gone.key;
        t_region_free(&c->job, &gone);
    }
    t_exchange(&c->job, c->ep, c->cq, keys, T_NKINDS + 2, pk);
    struct uln_counters before, after;
    CHECK_OK(uln_counters_get(c->job.ctx, &before));
    t_barrier(&c->job);
    if (rank == 1) {
        /* Refused at post, by nobody's memory: not counted at the owner. */
        CHECK_RC(uln_atomic(c->ep, 0, 0, 8, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        CHECK_RC(uln_atomic(c->ep, 0, ULN_ATOMIC_SMAX + 1, 8, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        CHECK_RC(uln_atomic(c->ep, 0, ULN_ATOMIC_ADD, 2, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        CHECK_RC(uln_atomic(c->ep, 0, ULN_ATOMIC_ADD, 16, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        CHECK_RC(uln_atomic(c->ep, 0, ULN_ATOMIC_ADD | 0x100, 8, pk[0], 0, 1, 0, NULL, 0, 0),
                 -EINVAL);
        CHECK_RC(uln_atomic(c->ep, size, ULN_ATOMIC_ADD, 8, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        CHECK_RC(uln_atomic(NULL, 0, ULN_ATOMIC_ADD, 8, pk[0], 0, 1, 0, NULL, 0, 0), -EINVAL);
        for (int k = 0; k < T_NKINDS; k++) {
            refuse_one(c, 8, pk[k], 4, -EDOM);    /* misaligned */
            refuse_one(c, 4, pk[k], 2, -EDOM);    /* misaligned */
            refuse_one(c, 8, pk[k], 60, -ERANGE); /* half outside */
            refuse_one(c, 4, pk[k], 64, -ERANGE); /* wholly outside */
            refuse_one(c, 8, pk[k], ~0ull - 3, -ERANGE);
            refuse_one(c, 8, pk[k] ^ 1, 0, -ENOKEY); /* a forged magic */
        }
        refuse_one(c, 8, pk[T_NKINDS], 0, -EACCES);
        refuse_one(c, 8, pk[T_NKINDS + 1], 0, -ENOKEY);
        refuse_one(c, 8, 0, 0, -ENOKEY);
    }
    t_barrier(&c->job);
    CHECK_OK(uln_counters_get(c->job.ctx, &after));
    if (rank == 0) {
        uint64_t nk = 2 * T_NKINDS, nr = 3 * T_NKINDS;
        CHECKF(after.refused_align - before.refused_align == nk, "refused_align +%llu",
               (unsigned long long)(after.refused_align - before.refused_align));
        CHECKF(after.refused_bounds - before.refused_bounds == nr, "refused_bounds +%llu",
               (unsigned long long)(after.refused_bounds - before.refused_bounds));
        CHECKF(after.refused_key - before.refused_key == T_NKINDS + 2, "refused_key +%llu",
               (unsigned long long)(after.refused_key - before.refused_key));
        CHECKF(after.refused_access - before.refused_access == 1, "refused_access +%llu",
               (unsigned long long)(after.refused_access - before.refused_access));
        for (int k = 0; k < T_NKINDS; k++) {
            CHECK_BYTES(r[k].buf, 64, 0x11, "%s region after refused atomics", t_kind_name(k));
            t_region_free(&c->job, &r[k]);
        }
        CHECK_BYTES(ro.buf, 64, 0x11, "region without the atomic right");
        t_region_free(&c->job, &ro);
    }
    if (rank == 1) CHECK(after.atomics == before.atomics); /* none of them succeeded */
    free(pk);
    t_barrier(&c->job);
}

/* ---- passive: who applies an atomic ----------------------------------------- */

/* Rank 1 sleeps without calling ulnet while rank 0 fetch-adds on its words:
 * on mapped memory (uln_mem_alloc, shm direct) the initiator applies it, so
 * it completes meanwhile; on malloc'd memory, through the rings and over udp
 * the target's engine must, so it cannot (unless a progress thread runs).
 * The mapped one is posted first: completions retire in order. */
static void test_passive(struct ctx3 *c)
{
    int rank = c->job.rank;
    struct t_region r[T_NKINDS];
    uint64_t keys[T_NKINDS] = {0}, pk[2 * T_NKINDS];
    if (rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            t_region_new(&c->job, &r[k], k, 64, ULN_ACCESS_REMOTE_ATOMIC);
            memset(r[k].buf, 0, 64);
            keys[k] = r[k].key;
        }
    t_exchange(&c->job, c->ep, c->cq, keys, T_NKINDS, pk);
    if (rank == 1) {
        t_sleep_ms(700); /* no ulnet call meanwhile */
    } else {
        uint64_t old[T_NKINDS];
        bool early[T_NKINDS] = {false};
        for (int k = 0; k < T_NKINDS; k++)
            post(c, 1, ULN_ATOMIC_ADD, 8, pk[T_NKINDS + k], 8, 7, 0, &old[k], (uint64_t)k, 0);
        double t0 = t_now();
        int got = 0;
        while (got < T_NKINDS && t_now() - t0 < 0.3) {
            struct uln_cqe e;
            int n = uln_cq_poll(c->cq, &e, 1);
            CHECK(n >= 0);
            if (n == 1) {
                CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_ATOMIC && e.user_data < T_NKINDS);
                early[e.user_data] = true;
                got++;
            } else {
                CHECK(uln_cq_wait(c->cq, 5) != -EBADF);
            }
        }
        CHECKF(t_now() - t0 < 0.55, "the window overran into rank 1's polling");
        bool thread = c->job.info.progress_thread;
        bool direct = c->job.info.caps_all & ULN_CAP_DIRECT_RMA;
        printf("rank0: done while the target slept: mapped %d, malloc %d\n", early[0], early[1]);
        CHECKF(early[T_KIND_SHM] == (direct || thread), "atomic on mapped memory: %s",
               early[T_KIND_SHM] ? "done by a sleeping target" : "not done by the initiator");
        CHECKF(early[T_KIND_MALLOC] == thread,
               "atomic on malloc'd memory %s while the target slept",
               early[T_KIND_MALLOC] ? "applied" : "not applied");
        for (; got < T_NKINDS; got++) {
            struct uln_cqe e = t_cq_take1(c->cq, 30000, "the atomics once rank 1 polls");
            CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_ATOMIC);
        }
        for (int k = 0; k < T_NKINDS; k++)
            CHECK(old[k] == 0);
    }
    t_barrier(&c->job);
    if (rank == 1)
        for (int k = 0; k < T_NKINDS; k++) {
            CHECK(((uint64_t *)r[k].buf)[1] == 7);
            t_region_free(&c->job, &r[k]);
        }
    t_barrier(&c->job);
}

/* ULN_NOW does not hide an error: a fetch-add with a stale key returns 0 and
 * completes with -ENOKEY, its result untouched. */
static void test_now_refused(struct ctx3 *c)
{
    int rank = c->job.rank, size = c->job.size;
    uint64_t key = 0, *pk = t_xmalloc((size_t)size * 8);
    if (rank == 0) {
        struct t_region gone;
        t_region_new(&c->job, &gone, T_KIND_SHM, 64, ULN_ACCESS_REMOTE_ATOMIC);
        key = gone.key;
        t_region_free(&c->job, &gone);
    }
    t_exchange(&c->job, c->ep, c->cq, &key, 1, pk);
    if (rank != 0) {
        uint64_t res = 0x5a5a5a5a5a5a5a5aull;
        CHECK_OK(uln_atomic(c->ep, 0, ULN_ATOMIC_ADD, 8, pk[0], 0, 1, 0, &res, 0x40e, ULN_NOW));
        struct uln_cqe e = t_cq_take1(c->cq, 30000, "a refused ULN_NOW atomic");
        CHECK_CQE(&e, e.op == ULN_OP_ATOMIC && e.user_data == 0x40e && e.status == -ENOKEY);
        CHECK(res == 0x5a5a5a5a5a5a5a5aull);
    }
    free(pk);
    t_barrier(&c->job);
}

int main(int argc, char **argv)
{
    struct ctx3 c;
    setup(&c);
    const char *what = argc > 1 ? argv[1] : "count";
    long n = argc > 2 ? atol(argv[2]) : 1000;
    if (!strcmp(what, "count")) {
        test_count(&c, (uint64_t)n, T_KIND_SHM, 0);
        test_count(&c, (uint64_t)n, T_KIND_MALLOC, 0);
    } else if (!strcmp(what, "now")) {
        test_count(&c, (uint64_t)n, T_KIND_SHM, ULN_NOW);
        test_count(&c, (uint64_t)n, T_KIND_MALLOC, ULN_NOW);
        test_now_refused(&c);
    } else if (!strcmp(what, "cas")) {
        test_cas(&c, (int)n);
    } else if (!strcmp(what, "ops")) {
        test_ops(&c, (int)n);
    } else if (!strcmp(what, "passive")) {
        CHECK(c.job.size == 2);
        test_passive(&c);
    } else if (!strcmp(what, "refused")) {
        CHECK(c.job.size >= 2);
        test_refused(&c);
    } else {
        t_fail(__FILE__, __LINE__, "arguments", "unknown test %s", what);
    }
    CHECK_OK(uln_ep_close(c.ep));
    t_barrier(&c.job);
    CHECK_OK(uln_cq_close(c.cq));
    return t_finish(&c.job);
}
