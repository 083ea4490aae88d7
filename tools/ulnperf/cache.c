/* ulnperf's translation-cache family (--test cache): PUT and GET from rank 0
 * into rank 1, to a region never touched (cold) and to a mapped one (warm). */
#include "perf.h"

/* cache, rank 0: one operation at a time, timed from post to completion. Cold:
 * before each one rank 1 registers the region afresh (REKEY -> KEY, outside
 * the timing), so its key is one this process has never seen and the
 * translation cache misses: the first access opens the target's memory
 * object, maps the region and faults its pages in. Warm: the same key every
 * time, the mapping already in the cache. */
static void counters(struct perf *pf, struct uln_counters *c)
{
    int rc = uln_counters_get(pf->ctx, c);
    if (rc) die(pf, "uln_counters_get: %s", uln_strerror(rc));
}

static uint64_t cache_run(struct perf *pf, const struct phase *p, uint64_t *samples)
{
    struct stall st = {.what = "a cache-test completion"};
    uint16_t want = done_op[p->op];
    uint64_t key = p->key, t0 = ticks(pf), t = t0, i = 0;
    /* Warm: the region is registered afresh for every phase, so its first
     * operation (i = 0) maps it, untimed: it restarts the loop below. */
    bool first_untimed = !p->variant;
    counters(pf, &pf->cache_c0);
    while (go_on(p, i, t0, t)) {
        if (p->variant) {
            struct ctl_msg m = {0};
            ctl_send(pf, CTL_REKEY, &m);
            key = ctl_recv(pf, CTL_KEY).key;
        }
        uint64_t s = ticks(pf);
        int rc = p->op == OP_PUT ? uln_put(pf->ep, pf->peer, pf->loc, p->size, key, 0, i, 0)
                                 : uln_get(pf->ep, pf->peer, pf->loc, p->size, key, 0, i, 0);
        if (rc) die(pf, "posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
        wait_own(pf, want, i, p->size, &st);
        t = ticks(pf);
        samples[i++] = t - s;
        stall_reset(&st);
        if (first_untimed) {
            first_untimed = false;
            i = 0;
            counters(pf, &pf->cache_c0);
            t0 = t = ticks(pf);
        }
    }
    counters(pf, &pf->cache_c1);
    return i;
}

static struct uln_mr *cache_reg(struct perf *pf, size_t size)
{
    struct uln_mr *mr;
    int rc =
        uln_mr_reg(pf->ctx, pf->tgt, size, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr);
    if (rc) die(pf, "uln_mr_reg (cache region, %zu B): %s", size, uln_strerror(rc));
    return mr;
}

/* cache, rank 1: a new registration of the same memory for every REKEY, until
 * rank 0's FIN (left in the inbox for serve()). */
static void cache_rekey(struct perf *pf, struct uln_mr **mr, size_t size)
{
    for (;;) {
        ctl_wait(pf);
        if (ctl_peek(pf)->type == CTL_FIN) return;
        ctl_recv(pf, CTL_REKEY);
        int rc = uln_mr_dereg(*mr);
        if (rc) die(pf, "uln_mr_dereg (cache region): %s", uln_strerror(rc));
        *mr = cache_reg(pf, size);
        struct ctl_msg k = {.key = uln_mr_key(*mr)};
        ctl_send(pf, CTL_KEY, &k);
    }
}

/* cache: cold (variant 1) or warm (0) translation, PUT or GET; the library's
 * own counters say which case was measured. */
static void cache_point(struct perf *pf, const struct point *pt)
{
    int op = pt->op;
    size_t size = pt->size;
    unsigned variant = pt->arg;
    double ms = point_ms(pf) * 0.5;
    const char *state = variant ? "cold" : "warm";
    struct phase p = {.op = op, .test = T_CACHE, .size = size, .window = 1, .variant = variant};
    snprintf(pf->where, sizeof pf->where, "%s cache %s %zu B", op_names[op], state, size);
    struct ctl_msg done;
    uint64_t elapsed = 0;
    /* Warm-up: a few operations, so the warm case starts with the region
     * mapped and both cases start with warm code and stacks. */
    p.min_iters = p.max_iters = 3;
    phase0(pf, &p, &elapsed, &done);
    if (pf->opt->iters) {
        p.min_iters = p.max_iters = pf->opt->iters;
    } else {
        p.min_iters = 5;
        p.max_iters = LAT_MAX_ITERS;
        p.budget = (uint64_t)(ms * 1e6 * pf->tm.ticks_per_ns);
    }
    uint64_t n = phase0(pf, &p, &elapsed, &done);
    double miss = (double)(pf->cache_c1.cache_misses - pf->cache_c0.cache_misses) / (double)n;
    double hit = (double)(pf->cache_c1.cache_hits - pf->cache_c0.cache_hits) / (double)n;
    uint64_t t50, t99;
    med_p99(pf->samples, n, &t50, &t99);
    double med = ticks_to_ns(pf, (double)t50) / 1000.0, p99 = ticks_to_ns(pf, (double)t99) / 1000.0;
    double gbs = (double)size / (med * 1000.0);
    char tl[32], note[64];
    snprintf(tl, sizeof tl, "cache:%s", state);
    snprintf(note, sizeof note, "misses/op %.2f hits/op %.2f", miss, hit);
    table_row(pf, op, tl, size, med, p99, gbs, 0, n, note);
    char t[32];
    snprintf(t, sizeof t, "cache_%s", state);
    csv_row(pf, op, t, size, med, "us");
    snprintf(t, sizeof t, "cache_%s_p99", state);
    csv_row(pf, op, t, size, p99, "us");
    snprintf(t, sizeof t, "cache_%s_bw", state);
    csv_row(pf, op, t, size, gbs, "GB/s");
    snprintf(t, sizeof t, "cache_%s_miss", state);
    csv_row(pf, op, t, size, miss, "miss/op");
}

static uint64_t cache_role(struct perf *pf, const struct phase *p, uint64_t *samples,
                           uint64_t *elapsed, struct ctl_msg *done)
{
    return cache_run(pf, p, samples);
}

/* Rank 1: a region of its own for the phase, registered afresh on request. */
static void cache_serve(struct perf *pf, const struct phase *p, struct ctl_msg *ready)
{
    struct uln_mr *mr = cache_reg(pf, p->size);
    ready->key = uln_mr_key(mr);
    ctl_send(pf, CTL_READY, ready);
    cache_rekey(pf, &mr, p->size);
    int rc = uln_mr_dereg(mr);
    if (rc) die(pf, "uln_mr_dereg (cache region): %s", uln_strerror(rc));
}

static const char *cache_skip(struct perf *pf, int t)
{
    if (pf->opt->malloc_mem)
        return "--mem malloc: peers reach such memory with process_vm_*, no translation cache";
    if (!pf->info.shm_direct)
        return "shm_direct=0: PUT/GET go through the rings, no translation cache";
    return NULL;
}

static void cache_plan(struct perf *pf, struct plan *pl, int t)
{
    static const unsigned cold_warm[] = {1, 0};
    plan_sizes(pf, pl, t, cold_warm, 2);
}

const struct perf_family perf_cache = {
    .name = "cache",
    .skip = cache_skip,
    .plan = cache_plan,
    .point = cache_point,
    .role = cache_role,
    .serve = cache_serve,
};
