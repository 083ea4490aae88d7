/* ulnperf: phases (one exchange CMD -> READY -> run -> FIN -> DONE between rank
 * 0 and the others) and rank 0's plan of points, whatever the scenario; the
 * scenario families fill in what happens inside. */
#include "perf.h"

#include <stdlib.h>

/* Does rank 0's role do the FIN/DONE exchange itself? (For NAP streams the
 * FIN carries the count while the last messages are still in flight.) */
static bool fin_inside(const struct phase *p)
{
    return p->test == T_BIBW ||
           ((p->test == T_BW || p->test == T_RATE || p->test == T_FAIR) && is_nap(p->op));
}

/* Rank 0, after DONE: what rank 1 reported, and what we can check ourselves. */
static void phase_verify(struct perf *pf, const struct phase *p, uint64_t n,
                         const struct ctl_msg *done)
{
    const struct perf_family *fam = perf_family(p->test);
    if (!done->a) die(pf, "data check failed at rank 1: %.*s", (int)sizeof done->text, done->text);
    if ((p->test == T_BW || p->test == T_RATE || p->test == T_FAIR) && is_nap(p->op) &&
        (done->iters != n || done->b != n * p->size))
        die(pf, "rank 1 confirms %" PRIu64 " NAPs and %" PRIu64 " B; sent %" PRIu64 " and %" PRIu64,
            done->iters, done->b, n, n * p->size);
    const char *what = "";
    long bad = fam->check ? fam->check(pf, p, &what) : -1;
    if (bad >= 0) die(pf, "data check failed: %s wrong at offset %ld", what, bad);
}

/* Rank 0: one phase with rank 1 end to end; returns the number of iterations
 * (samples in pf->samples where the family takes them). */
uint64_t phase0(struct perf *pf, struct phase *p, uint64_t *elapsed, struct ctl_msg *done)
{
    const struct perf_family *fam = perf_family(p->test);
    /* Set up our side before telling the peer: once it is READY, data flows. */
    if (fam->setup) fam->setup(pf, p);
    struct ctl_msg m = {.op = (uint32_t)p->op,
                        .test = (uint32_t)p->test,
                        .size = p->size,
                        .window = p->window,
                        .pattern = p->pattern,
                        .variant = p->variant};
    ctl_send(pf, CTL_CMD, &m);
    struct ctl_msg r = ctl_recv(pf, CTL_READY);
    p->key = r.key;
    *done = (struct ctl_msg){0};
    uint64_t n = fam->role(pf, p, pf->samples, elapsed, done);
    if (!fin_inside(p)) {
        struct ctl_msg f = {.iters = n};
        ctl_send(pf, CTL_FIN, &f);
        *done = ctl_recv(pf, CTL_DONE);
    }
    phase_verify(pf, p, n, done);
    return n;
}

double point_ms(const struct perf *pf)
{
    return pf->opt->point_ms ? pf->opt->point_ms : pf->opt->quick ? 2.0 : 100.0;
}

/* lat, bw, bibw and rate: a warm-up phase and the measured one, each of about
 * ms (or --iters); returns the measured phase's iterations. */
uint64_t measure_two(struct perf *pf, struct phase *p, double ms, uint64_t *elapsed,
                     struct ctl_msg *done)
{
    const struct perf_opts *o = pf->opt;
    bool lat = p->test == T_LAT;
    /* Warm-up: faults in the peer's mapping of our pages, warms caches and
     * the translation cache; its results are thrown away. */
    if (o->iters) {
        p->min_iters = p->max_iters = o->iters / 10 > 1000 ? 1000
                                      : o->iters / 10      ? o->iters / 10
                                                           : 1;
    } else {
        p->min_iters = lat ? 2 : p->window;
        p->max_iters = lat ? LAT_MAX_ITERS : BW_MAX_ITERS;
        p->budget = (uint64_t)(ms * (o->quick ? 0.25 : 0.15) * 1e6 * pf->tm.ticks_per_ns);
    }
    p->pattern = next_pattern(pf);
    phase0(pf, p, elapsed, done);

    if (o->iters) {
        p->min_iters = p->max_iters = o->iters;
    } else {
        p->min_iters = lat ? 10 : p->window;
        p->budget = (uint64_t)(ms * 1e6 * pf->tm.ticks_per_ns);
    }
    p->pattern = next_pattern(pf);
    return phase0(pf, p, elapsed, done);
}

/* A phase rank 0 may have asked of this rank? */
static bool phase_valid(const struct perf *pf, const struct ctl_msg *m)
{
    /* Ranks 2.. take part in the many-to-one tests only. */
    bool load = m->test == T_LOAD || m->test == T_INCAST,
         nap = m->op == OP_NAP || m->op == OP_NAP_INLINE;
    return !(m->op >= NOPS || m->test >= NTESTS || !m->size || (pf->rank >= 2 && !load) ||
             (!load && !nap && m->size > pf->buf_len) || (nap && m->size > pf->info.nap_max) ||
             (m->test == T_LOAD && m->size < 16) || (m->test == T_INCAST && m->size < 8));
}

/* Ranks >= 1: one phase rank 0 asked for in m. */
static void serve_phase(struct perf *pf, const struct ctl_msg *m)
{
    struct phase p = {.op = (int)m->op,
                      .test = (int)m->test,
                      .size = m->size,
                      .window = (unsigned)m->window,
                      .pattern = m->pattern,
                      .variant = m->variant,
                      .rate = m->rate,
                      .max_iters = UINT64_MAX};
    const struct perf_family *fam = perf_family(p.test);
    snprintf(pf->where, sizeof pf->where, "%s %s %zu B", op_names[p.op], test_names[p.test],
             p.size);
    if (fam->setup) fam->setup(pf, &p);
    struct ctl_msg r = {.a = 1};
    if (fam->serve) {
        fam->serve(pf, &p, &r);
    } else {
        ctl_send(pf, CTL_READY, &r);
        fam->role(pf, &p, NULL, NULL, &r);
    }
    ctl_recv(pf, CTL_FIN);
    const char *what = "";
    long bad = fam->check ? fam->check(pf, &p, &what) : -1;
    if (bad >= 0) {
        r.a = 0;
        snprintf(r.text, sizeof r.text, "%s wrong at offset %ld", what, bad);
    }
    ctl_send_to(pf, 0, CTL_DONE, &r);
    pf->where[0] = 0;
}

/* Ranks >= 1: serve phases until QUIT. */
void serve(struct perf *pf)
{
    for (;;) {
        struct ctl_msg m = ctl_recv(pf, 0);
        if (m.type == CTL_QUIT) return;
        if (m.type != CTL_CMD)
            die(pf, "control message %s from rank 0, expected CMD or QUIT", ctl_name(m.type));
        if (!phase_valid(pf, &m))
            die(pf, "bad phase from rank 0: op %u test %u size %" PRIu64, m.op, m.test, m.size);
        serve_phase(pf, &m);
    }
}

/* ------------------------------------------------------------------------- */
/* The plan (rank 0)                                                          */
/* ------------------------------------------------------------------------- */

static bool size_ok(const struct perf *pf, int op, int test, size_t s)
{
    if (test == T_RATE && s > pf->opt->rate_max) return false;
    if (test == T_CACHE && is_nap(op)) return false;
    if (op == OP_ATOMIC) return (test == T_LAT || test == T_RATE) && s == 8;
    if (op == OP_NAP) return s <= pf->info.nap_max;
    if (op == OP_NAP_INLINE) return s <= pf->info.inline_max && s <= pf->info.nap_max;
    return true;
}

void plan_add(struct perf *pf, struct plan *pl, int test, int op, size_t size, unsigned arg)
{
    struct point *p = realloc(pl->pt, (size_t)(pl->n + 1) * sizeof *p);
    if (!p) die(pf, "out of memory");
    pl->pt = p;
    pl->pt[pl->n++] = (struct point){test, op, size, arg};
}

/* Every selected op at every size that fits it, each size once per args[i]
 * (rate: the windows; cache: cold and warm). */
void plan_sizes(struct perf *pf, struct plan *pl, int t, const unsigned *args, int nargs)
{
    const struct perf_opts *o = pf->opt;
    for (int op = 0; op < NOPS; op++) {
        if (!(o->ops >> op & 1)) continue;
        bool any = false;
        for (int i = 0; i < o->nsizes; i++) {
            if (!size_ok(pf, op, t, o->sizes[i])) continue;
            any = true;
            for (int a = 0; a < nargs; a++)
                plan_add(pf, pl, t, op, o->sizes[i], args[a]);
        }
        bool never = (t == T_CACHE && is_nap(op)) || (op == OP_ATOMIC && t != T_LAT && t != T_RATE);
        if (!any && !never)
            fprintf(pf->out.hdr, "# %s %s: skipped, no size fits (nap_max %u, inline_max %u%s%s)\n",
                    op_names[op], test_names[t], pf->info.nap_max, pf->info.inline_max,
                    t == T_RATE ? ", --rate-max" : "", op == OP_ATOMIC ? ", atomic: 8" : "");
    }
}

static void make_plan(struct perf *pf, struct plan *pl)
{
    for (int t = 0; t < NTESTS; t++) {
        if (!(pf->opt->tests >> t & 1)) continue;
        const struct perf_family *fam = perf_family(t);
        const char *why = fam->skip ? fam->skip(pf, t) : NULL;
        /* cache and fair post their own single-buffer PUT/GETs. */
        if (!why && pf->opt->iov && (t == T_CACHE || t == T_FAIR))
            why = "--iov measures lat, bw, bibw and rate";
        if (why) {
            fprintf(pf->out.hdr, "# %s: skipped (%s)\n", test_names[t], why);
            continue;
        }
        fam->plan(pf, pl, t);
    }
}

/* What the progress line says of a point, and of its group. */
static void point_label(const struct perf *pf, const struct point *pt, char *label, char *group,
                        size_t n)
{
    char sz[32];
    size_str(pt->size, sz, sizeof sz);
    if (pt->test == T_LOAD && pt->arg)
        snprintf(label, n, "load %u%%", pt->arg);
    else if (pt->test == T_LOAD)
        snprintf(label, n, "load peak");
    else if (pt->test == T_RATE)
        snprintf(label, n, "%s rate w=%u %s B", op_names[pt->op], pt->arg, sz);
    else if (pt->test == T_CACHE)
        snprintf(label, n, "%s cache %s %s B", op_names[pt->op], pt->arg ? "cold" : "warm", sz);
    else
        snprintf(label, n, "%s %s %s B", op_names[pt->op], test_names[pt->test], sz);
    if (pt->test == T_LOAD || pt->test == T_INCAST)
        snprintf(group, n, "%s, %d sender%s", test_names[pt->test], pf->size - 1,
                 pf->size > 2 ? "s" : "");
    else
        snprintf(group, n, "%s %s", op_names[pt->op], test_names[pt->test]);
}

static void section_head(struct perf *pf, const struct point *pt)
{
    const struct perf_family *fam = perf_family(pt->test);
    if (!fam->section) {
        table_head(pf);
        if (!pf->opt->csv_stdout) fflush(pf->out.hdr);
        return;
    }
    if (!pf->opt->csv_stdout) progress_clear(pf);
    fam->section(pf, pt);
    fflush(pf->out.hdr);
}

/* Rank 0: every point of the plan, each by its family. */
void drive(struct perf *pf)
{
    struct plan pl = {0};
    make_plan(pf, &pl);
    for (int i = 0; i < pl.n; i++) {
        const struct point *pt = &pl.pt[i], *prev = i ? &pl.pt[i - 1] : NULL;
        bool new_section = !prev || pt->test != prev->test;
        bool first = new_section || (pt->op != prev->op && pt->test != T_LOAD);
        if (new_section) section_head(pf, pt);
        char label[96], group[96];
        point_label(pf, pt, label, group, sizeof label);
        progress(pf, i, pl.n, label, first ? group : NULL);
        perf_family(pt->test)->point(pf, pt);
        pf->where[0] = 0;
    }
    progress_clear(pf);
    free(pl.pt);
}
