/* ulnperf's latency family (--test lat): ping-pong over NAPs and PUTs, and
 * GETs and fetch-adds one at a time, between ranks 0 and 1. */
#include "perf.h"

/* Wait for the next data NAP (returned unreleased). On rank 1 it returns false
 * instead when rank 0 ended the phase: control messages land in the inbox as
 * the CQs are polled, so noticing costs one comparison. */
static inline bool wait_nap(struct perf *pf, struct uln_cqe *out, size_t size)
{
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "the next NAP"};
    for (;;) {
        int n = perf_poll(pf, ev, POLL_BATCH);
        if (n < 0) die(pf, "uln_cq_poll: %s", uln_strerror(n));
        int got = -1;
        for (int i = 0; i < n; i++) {
            if (ev[i].ep == pf->ep_idx && ev[i].op == ULN_OP_NAP_RECV && !ev[i].status && got < 0)
                got = i;
            else
                handle_other(pf, &ev[i]);
        }
        if (got >= 0) {
            *out = ev[got];
            if (out->len != size) {
                release(pf, out);
                die(pf, "received a NAP of %" PRIu64 " B, expected %zu", out->len, size);
            }
            return true;
        }
        if (pf->rank == 1 && ctl_pending(pf)) return false;
        stall_tick(pf, &st);
    }
}

/* Ping-pong over NAPs. Sends are ULN_SILENT: the payload never changes during a
 * phase, so nothing waits for a send completion and none has to be polled. */
static uint64_t nap_lat(struct perf *pf, const struct phase *p, uint64_t *samples)
{
    struct uln_cqe e;
    uint64_t i = 0;
    if (pf->rank == 0) {
        uint64_t t0 = ticks(pf), t = t0;
        while (go_on(p, i, t0, t)) {
            post_retry(pf, p->op, p->size, i, ULN_SILENT);
            wait_nap(pf, &e, p->size);
            release(pf, &e);
            uint64_t t1 = ticks(pf);
            samples[i++] = t1 - t;
            t = t1;
        }
    } else {
        while (wait_nap(pf, &e, p->size)) {
            post_retry(pf, p->op, p->size, i++, ULN_SILENT); /* answer first, then free the slot */
            release(pf, &e);
        }
    }
    return i;
}

/* Ping-pong over PUTs into each other's region; each side spins on the counter
 * in its own memory. Polling in the spin both drives our own PUT (the engine
 * moves data inside uln_cq_poll) and reports a failed ULN_SILENT PUT. */
static uint64_t put_lat(struct perf *pf, const struct phase *p, uint64_t *samples)
{
    size_t size = p->size;
    unsigned w = ctr_width(size);
    uint64_t mask = ctr_mask(w);
    const volatile uint8_t *mine = (const volatile uint8_t *)pf->tgt + size - w;
    uint8_t *src = (uint8_t *)pf->loc + size - w;
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "the peer's PUT"};
    uint64_t t0 = ticks(pf), t = t0, i;
    for (i = 1;; i++) {
        if (pf->rank == 0) {
            if (!go_on(p, i - 1, t0, t)) break;
            ctr_write(src, w, i);
            post_retry(pf, OP_PUT, size, i, ULN_SILENT);
        }
        while (ctr_read(mine, w) != (i & mask)) {
            int k = perf_poll(pf, ev, POLL_BATCH);
            if (k < 0) die(pf, "uln_cq_poll: %s", uln_strerror(k));
            for (int j = 0; j < k; j++)
                handle_other(pf, &ev[j]);
            /* Rank 0 ends only after our last answer landed: no PUT is lost. */
            if (pf->rank == 1 && ctl_pending(pf)) return i - 1;
            stall_tick(pf, &st);
        }
        stall_reset(&st);
        if (pf->rank == 0) {
            uint64_t t1 = ticks(pf);
            samples[i - 1] = t1 - t;
            t = t1;
        } else {
            ctr_write(src, w, i);
            post_retry(pf, OP_PUT, size, i, ULN_SILENT);
        }
    }
    return i - 1;
}

/* A GET or an atomic: each a round trip of its own, posted when the last one
 * completed. */
static uint64_t get_lat(struct perf *pf, const struct phase *p, uint64_t *samples)
{
    struct stall st = {.what = p->op == OP_GET ? "a GET completion" : "an atomic's completion"};
    uint64_t t0 = ticks(pf), t = t0, i = 0;
    unsigned flags = pf->opt->now ? ULN_NOW : 0;
    while (go_on(p, i, t0, t)) {
        /* With ULN_NOW an op done in the call is done: nothing to wait for. */
        if (post_retry(pf, p->op, p->size, i, flags) == 0)
            wait_own(pf, done_op[p->op], i, p->size, &st);
        uint64_t t1 = ticks(pf);
        samples[i++] = t1 - t;
        t = t1;
    }
    return i;
}

static uint64_t lat_role(struct perf *pf, const struct phase *p, uint64_t *samples,
                         uint64_t *elapsed, struct ctl_msg *done)
{
    if (is_nap(p->op)) return nap_lat(pf, p, samples);
    if (p->op == OP_PUT) return put_lat(pf, p, samples);
    return pf->rank == 0 ? get_lat(pf, p, samples) : 0;
}

/* Both sides: the counter a PUT ping-pong watches starts at 0. */
static void lat_setup(struct perf *pf, const struct phase *p)
{
    if (p->op == OP_PUT)
        ctr_write((uint8_t *)pf->tgt + p->size - ctr_width(p->size), ctr_width(p->size), 0);
}

static void lat_plan(struct perf *pf, struct plan *pl, int t)
{
    static const unsigned once = 0;
    plan_sizes(pf, pl, t, &once, 1);
}

/* Median and p99 of one point; one-way time for ping-pongs, as a GET is
 * already a round trip. */
static void lat_point(struct perf *pf, const struct point *pt)
{
    int op = pt->op;
    size_t size = pt->size;
    struct phase p = {.op = op, .test = T_LAT, .size = size, .window = pf->opt->window};
    snprintf(pf->where, sizeof pf->where, "%s %s %zu B", op_names[op], "lat", size);
    uint64_t elapsed = 0, t50, t99;
    struct ctl_msg done;
    uint64_t n = measure_two(pf, &p, point_ms(pf), &elapsed, &done);
    /* The mean as well: a peer that reports its mean (ucx_perftest's
     * "average") is compared with this one. Summed before med_p99 reorders. */
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += (double)pf->samples[i];
    med_p99(pf->samples, n, &t50, &t99);
    bool rt = op == OP_GET || op == OP_ATOMIC; /* a round trip by nature */
    double div = rt ? 1000.0 : 2000.0;
    double med = ticks_to_ns(pf, (double)t50) / div;
    double p99 = ticks_to_ns(pf, (double)t99) / div;
    double avg = n ? ticks_to_ns(pf, sum / (double)n) / div : 0;
    bool now = rt && pf->opt->now;
    table_row(pf, op, now ? "lat(now)" : rt ? "lat(rt)" : "lat", size, med, p99, 0, 0, n, NULL);
    csv_row(pf, op, now ? "lat_now" : "lat", size, med, "us");
    csv_row(pf, op, now ? "lat_now_p99" : "lat_p99", size, p99, "us");
    csv_row(pf, op, now ? "lat_now_avg" : "lat_avg", size, avg, "us");
}

const struct perf_family perf_latency = {
    .name = "latency",
    .plan = lat_plan,
    .point = lat_point,
    .setup = lat_setup,
    .role = lat_role,
};
