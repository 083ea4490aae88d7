/* ulnperf's fairness family (--test fair): --fair-eps endpoints of rank 0
 * share one interface (and one CQ) towards rank 1; each one's share of the
 * bytes over time, and Jain's index. */
#include "perf.h"

#include <math.h>
#include <stdlib.h>

/* fair, rank 0: every one of pf->nfair endpoints keeps `window` operations of
 * `size` outstanding to rank 1; the bytes each has completed are sampled every
 * sample_ticks. The endpoints share one CQ, so the library's engine decides who
 * moves next; our posting loop starts one endpoint further each pass so that it
 * favours none itself. */
#define FAIR_MAX_SAMPLES 1000

struct fair_out {
    unsigned nsamp;
    uint64_t samp[FAIR_MAX_SAMPLES][MAX_FAIR]; /* bytes per endpoint at each sample */
    uint64_t total[MAX_FAIR];                  /* bytes per endpoint when posting stopped */
    uint64_t elapsed;                          /* ticks, start to the end of posting */
};

struct fair_run {
    uint64_t posted[MAX_FAIR], completed[MAX_FAIR], bytes[MAX_FAIR];
    uint64_t total, outstanding, t0, next;
    unsigned first;
    bool more;
};

static int fair_post(struct perf *pf, const struct phase *p, unsigned i, uint64_t ud)
{
    size_t off = (size_t)i * p->size;
    switch (p->op) {
    case OP_NAP:
        return uln_nap(pf->fair[i], pf->peer, pf->napbuf, p->size, ud, 0);
    case OP_PUT:
        return uln_put(pf->fair[i], pf->peer, (uint8_t *)pf->loc + off, p->size, pf->peer_key, off,
                       ud, 0);
    default:
        return uln_get(pf->fair[i], pf->peer, (uint8_t *)pf->loc + off, p->size, pf->peer_key, off,
                       ud, 0);
    }
}

/* Sample the bytes moved so far when due; at the end of the budget, stop
 * posting (and tell rank 1 how many NAPs to expect). */
static void fair_clock(struct perf *pf, const struct phase *p, struct fair_run *r,
                       struct fair_out *o)
{
    uint64_t now = ticks(pf);
    if (r->more && now >= r->next && o->nsamp < FAIR_MAX_SAMPLES) {
        memcpy(o->samp[o->nsamp++], r->bytes, sizeof r->bytes);
        r->next += p->sample_ticks;
    }
    if (r->more && now - r->t0 >= p->budget) {
        r->more = false;
        o->elapsed = now - r->t0;
        memcpy(o->total, r->bytes, sizeof r->bytes);
        if (is_nap(p->op)) {
            struct ctl_msg f = {.iters = r->total};
            ctl_send(pf, CTL_FIN, &f);
        }
    }
}

static void fair_post_all(struct perf *pf, const struct phase *p, struct fair_run *r)
{
    unsigned n = (unsigned)pf->nfair;
    for (unsigned k = 0; r->more && k < n; k++) {
        unsigned i = (r->first + k) % n;
        while (r->posted[i] - r->completed[i] < p->window) {
            int rc = fair_post(pf, p, i, r->posted[i]);
            if (rc == -EAGAIN) break;
            if (rc) die(pf, "posting %s on endpoint %u: %s", op_names[p->op], i, uln_strerror(rc));
            r->posted[i]++, r->outstanding++, r->total++;
        }
    }
    r->first = r->first + 1 == n ? 0 : r->first + 1;
}

static uint64_t fair_run(struct perf *pf, const struct phase *p, struct fair_out *o)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "fair completions"};
    uint16_t want = done_op[p->op];
    struct fair_run r = {.more = true, .t0 = ticks(pf)};
    r.next = r.t0 + p->sample_ticks;
    o->nsamp = 0;
    while (r.more || r.outstanding) {
        fair_clock(pf, p, &r, o);
        fair_post_all(pf, p, &r);
        int k = poll_some(pf, ev, 64, &st);
        for (int j = 0; j < k; j++) {
            if (is_fair_ep(pf, ev[j].ep) && ev[j].op == want && !ev[j].status) {
                unsigned i = (unsigned)(ev[j].ep - pf->fair_idx0);
                r.completed[i]++, r.outstanding--;
                r.bytes[i] += ev[j].len;
            } else {
                handle_other(pf, &ev[j]);
            }
        }
    }
    return r.total;
}

/* Rank 0 streams from every endpoint; rank 1 takes NAPs like bw's receiver
 * (PUT and GET need nothing of it). */
static uint64_t fair_role(struct perf *pf, const struct phase *p, uint64_t *samples,
                          uint64_t *elapsed, struct ctl_msg *done)
{
    if (pf->rank != 0) {
        if (is_nap(p->op)) nap_bw_receiver(pf, p, done);
        return 0;
    }
    uint64_t n = fair_run(pf, p, p->fair);
    if (is_nap(p->op)) *done = ctl_recv(pf, CTL_DONE);
    return n;
}

static void fair_setup(struct perf *pf, const struct phase *p)
{
    if (is_nap(p->op) && pf->rank == 0) marks_set(pf->napbuf, p->size, p->pattern, false);
}

static double fair_run_ms(struct perf *pf)
{
    return pf->opt->fair_ms ? pf->opt->fair_ms : 10 * point_ms(pf);
}

static unsigned fair_sample_ms(struct perf *pf)
{
    unsigned s = (unsigned)lround(fair_run_ms(pf) / 100);
    return s ? s : 1;
}

static size_t fair_size(struct perf *pf, int op)
{
    return is_nap(op) && pf->opt->fair_size > pf->info.nap_max ? pf->info.nap_max
                                                               : pf->opt->fair_size;
}

/* Per sample: each endpoint's share of what moved in that interval, as CSV
 * rows; returns the worst sample's index (1 with none). */
static double fair_samples(struct perf *pf, int op, const struct fair_out *fo, unsigned *used)
{
    unsigned n = (unsigned)pf->nfair, sms = fair_sample_ms(pf);
    double jmin = 1, x[MAX_FAIR];
    *used = 0;
    for (unsigned k = 0; k < fo->nsamp; k++) {
        double dsum = 0;
        for (unsigned i = 0; i < n; i++)
            dsum += x[i] = (double)(fo->samp[k][i] - (k ? fo->samp[k - 1][i] : 0));
        if (dsum <= 0) continue; /* nothing completed in that interval (a preemption) */
        uint64_t t = (uint64_t)(k + 1) * sms;
        double j = jain(x, n);
        jmin = j < jmin ? j : jmin, (*used)++;
        csv_row(pf, op, "fair_jain", t, j, "jain");
        for (unsigned i = 0; i < n; i++) {
            char name[24];
            snprintf(name, sizeof name, "fair_ep%u", i);
            csv_row(pf, op, name, t, x[i] / dsum, "share");
        }
    }
    return jmin;
}

/* The whole run: each endpoint's share of all bytes, the index over them. */
static void fair_report(struct perf *pf, int op, size_t size, uint64_t msgs,
                        const struct fair_out *fo)
{
    unsigned n = (unsigned)pf->nfair, used;
    double tot[MAX_FAIR], sum = 0, lo = 1, hi = 0;
    for (unsigned i = 0; i < n; i++)
        sum += tot[i] = (double)fo->total[i];
    for (unsigned i = 0; i < n; i++) {
        double s = sum > 0 ? tot[i] / sum : 0;
        lo = s < lo ? s : lo, hi = s > hi ? s : hi;
    }
    double ji = jain(tot, n), gbs = sum / ticks_to_ns(pf, (double)fo->elapsed);
    double jmin = fair_samples(pf, op, fo, &used);
    char tl[32], note[160];
    snprintf(tl, sizeof tl, "fair:%u", n);
    snprintf(note, sizeof note, "jain %.4f, share %.3f..%.3f, worst %u ms: jain %.3f", ji, lo, hi,
             fair_sample_ms(pf), used ? jmin : 0);
    table_row(pf, op, tl, size, 0, 0, gbs,
              (double)msgs / ticks_to_ns(pf, (double)fo->elapsed) * 1e3, msgs, note);
    csv_row(pf, op, "fair", size, ji, "jain");
    csv_row(pf, op, "fair_bw", size, gbs, "GB/s");
}

static void fair_point(struct perf *pf, const struct point *pt)
{
    int op = pt->op;
    size_t size = fair_size(pf, op);
    struct fair_out *fo = malloc(sizeof *fo);
    if (!fo) die(pf, "out of memory");
    struct phase p = {
        .op = op, .test = T_FAIR, .size = size, .window = pf->opt->window, .fair = fo};
    if (p.window > pf->info.sq_depth) p.window = pf->info.sq_depth;
    snprintf(pf->where, sizeof pf->where, "%s fair %zu B", op_names[op], size);
    struct ctl_msg done;
    p.sample_ticks = (uint64_t)(fair_sample_ms(pf) * 1e6 * pf->tm.ticks_per_ns);
    p.pattern = next_pattern(pf);
    p.budget = (uint64_t)(fair_run_ms(pf) * 0.1 * 1e6 * pf->tm.ticks_per_ns); /* warm-up */
    phase0(pf, &p, NULL, &done);
    p.pattern = next_pattern(pf);
    p.budget = (uint64_t)(fair_run_ms(pf) * 1e6 * pf->tm.ticks_per_ns);
    uint64_t msgs = phase0(pf, &p, NULL, &done);
    fair_report(pf, op, size, msgs, fo);
    free(fo);
}

static void fair_section(struct perf *pf, const struct point *pt)
{
    fprintf(pf->out.hdr,
            "# fair: %d endpoints of rank 0, one CQ, %u operations outstanding each, %.0f "
            "ms, sampled every %u ms (shares over time: CSV rows fair_ep*, fair_jain)\n",
            pf->nfair, pf->opt->window > pf->info.sq_depth ? pf->info.sq_depth : pf->opt->window,
            fair_run_ms(pf), fair_sample_ms(pf));
    if (!pf->opt->csv_stdout) table_head(pf);
}

static void fair_plan(struct perf *pf, struct plan *pl, int t)
{
    for (int op = 0; op < NOPS; op++)
        /* nap-inline streams are the same NAPs, only smaller. */
        if (pf->opt->ops >> op & 1 && op != OP_NAP_INLINE && op != OP_ATOMIC)
            plan_add(pf, pl, t, op, fair_size(pf, op), 0);
}

const struct perf_family perf_fair = {
    .name = "fair",
    .plan = fair_plan,
    .section = fair_section,
    .point = fair_point,
    .setup = fair_setup,
    .role = fair_role,
};
