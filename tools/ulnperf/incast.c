/* ulnperf's incast family (--test incast): ranks 1..N-1 all stream NAPs into
 * rank 0 for a fixed time; the aggregate message rate rank 0 takes, and what
 * each sender got through. Where the UDP transport's receive pool, credit and
 * loss repair are put under pressure (run it with ULN_FAULT for loss).
 *
 * Every NAP's first 8 bytes carry (sender rank << 56 | sequence). NAPs from
 * one endpoint to one peer arrive in the order posted (ulnet.h), so rank 0
 * expects exactly the next sequence of each sender: a lost, duplicated or
 * reordered NAP fails the run, and at the end each sender's count must match
 * what it says it posted. */
#include "perf.h"

#include <stdlib.h>

#define INCAST_MIN_SIZE 8 /* the (rank, sequence) stamp */
#define SEQ_BITS        56
#define SEQ_MASK        ((UINT64_C(1) << SEQ_BITS) - 1)

/* Rank 0's view of one phase. */
struct incast_out {
    uint64_t got[MAX_RANKS];     /* NAPs received from each sender */
    uint64_t got_fin[MAX_RANKS]; /* of those, before FIN */
    double secs;                 /* GO to FIN */
};

static double incast_ms(const struct perf *pf)
{
    return pf->opt->incast_ms ? pf->opt->incast_ms : 3 * point_ms(pf);
}

static unsigned incast_window(const struct perf *pf)
{
    unsigned w = pf->opt->window;
    if (w > LOAD_CAP) w = LOAD_CAP;
    return w > pf->info.sq_depth ? pf->info.sq_depth : w;
}

/* One NAP that came: its stamp must be its sender's next sequence. */
static void incast_take(struct perf *pf, const struct uln_cqe *e, size_t size, struct incast_out *o)
{
    uint64_t stamp;
    if (e->len != size || e->peer <= 0 || e->peer >= pf->size) {
        release(pf, e);
        die(pf, "incast: a NAP of %" PRIu64 " B from rank %d, expected %zu B from ranks 1..%d",
            e->len, e->peer, size, pf->size - 1);
    }
    memcpy(&stamp, e->data, 8);
    release(pf, e);
    uint64_t want = (uint64_t)e->peer << SEQ_BITS | (o->got[e->peer] & SEQ_MASK);
    if (stamp != want)
        die(pf,
            "incast: NAP %" PRIu64 " from rank %d carries rank %" PRIu64 " sequence %" PRIu64
            " (lost, duplicated or out of order)",
            o->got[e->peer], e->peer, stamp >> SEQ_BITS, stamp & SEQ_MASK);
    o->got[e->peer]++;
}

/* FIN to every sender once the budget is spent; their DONEs (each sender's
 * count of NAPs posted) after that. Returns true once all DONEs are in. */
static bool incast_steer(struct perf *pf, uint64_t t0, uint64_t budget_ns, bool *fin,
                         uint64_t *sent, struct incast_out *o)
{
    if (!*fin && mono_ns() - t0 >= budget_ns) {
        *fin = true;
        o->secs = (double)(mono_ns() - t0) / 1e9;
        memcpy(o->got_fin, o->got, sizeof o->got);
        struct ctl_msg f = {0};
        for (int r = 1; r < pf->size; r++)
            ctl_send_to(pf, r, CTL_FIN, &f);
    }
    while (*fin && ctl_pending(pf)) {
        struct ctl_msg d = ctl_recv(pf, CTL_DONE);
        if (d.src <= 0 || d.src >= pf->size || sent[d.src] != UINT64_MAX)
            die(pf, "incast: a DONE from rank %d", d.src);
        sent[d.src] = d.iters;
    }
    for (int r = 1; r < pf->size; r++)
        if (sent[r] == UINT64_MAX) return false;
    return true;
}

static bool incast_all_in(const struct perf *pf, const uint64_t *sent, const struct incast_out *o)
{
    for (int r = 1; r < pf->size; r++)
        if (o->got[r] < sent[r]) return false;
    return true;
}

/* Rank 0: GO to every sender, then take every NAP until each sender's count
 * (from its DONE) has arrived. */
static void incast_recv(struct perf *pf, uint64_t budget_ns, size_t size, struct incast_out *o)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "incast NAPs"};
    uint64_t sent[MAX_RANKS];
    bool fin = false, dones = false;
    *o = (struct incast_out){0};
    for (int r = 0; r < MAX_RANKS; r++)
        sent[r] = UINT64_MAX;
    struct ctl_msg go = {0};
    uint64_t t0 = mono_ns();
    for (int r = 1; r < pf->size; r++)
        ctl_send_to(pf, r, CTL_GO, &go);
    while (!dones || !incast_all_in(pf, sent, o)) {
        int k = poll_some(pf, ev, 64, &st);
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == pf->ep_idx && ev[j].op == ULN_OP_NAP_RECV && !ev[j].status)
                incast_take(pf, &ev[j], size, o);
            else
                handle_other(pf, &ev[j]);
        }
        dones = incast_steer(pf, t0, budget_ns, &fin, sent, o);
    }
    for (int r = 1; r < pf->size; r++)
        if (o->got[r] != sent[r])
            die(pf, "incast: rank %d posted %" PRIu64 " NAPs, %" PRIu64 " arrived", r, sent[r],
                o->got[r]);
}

/* A sender (rank >= 1): after GO, keep `window` NAPs in flight to rank 0
 * until FIN. Inline NAPs are copied at post time; larger ones need their own
 * buffer until their completion, one per NAP in flight. While its NAPs wait
 * for room a sender sleeps in uln_cq_wait: senders may share a CPU. */
static void incast_send(struct perf *pf, const struct phase *p, struct ctl_msg *done)
{
    struct uln_cqe ev[POLL_BATCH];
    size_t size = p->size;
    bool inl = size <= pf->info.inline_max;
    if (!p->window) die(pf, "incast: a window of 0 NAPs from rank 0");
    uint8_t *pool = inl ? NULL : aligned_alloc(64, (p->window * size + 63) & ~(size_t)63);
    if (!inl && !pool) die(pf, "out of memory");
    if (pool) memset(pool, 0x3c, p->window * size);
    uint64_t sent = 0, completed = 0, rank = (uint64_t)pf->rank << SEQ_BITS;
    ctl_recv(pf, CTL_GO);
    while (!ctl_pending(pf)) {
        bool blocked = false;
        while (sent - completed < p->window) {
            uint8_t *b = inl ? pf->napbuf : pool + (sent % p->window) * size;
            uint64_t stamp = rank | (sent & SEQ_MASK);
            memcpy(b, &stamp, 8);
            int rc = uln_nap(pf->ep, 0, b, size, sent, inl ? ULN_INLINE : 0);
            if (rc == -EAGAIN) {
                blocked = true;
                break;
            }
            if (rc) die(pf, "incast: posting a NAP of %zu B: %s", size, uln_strerror(rc));
            sent++;
        }
        if (!poll_count_naps(pf, ev, &completed) && (blocked || sent - completed >= p->window))
            wait_1ms(pf);
    }
    if (ctl_peek(pf)->type != CTL_FIN)
        die(pf, "control message %s during incast", ctl_name(ctl_peek(pf)->type));
    struct stall st = {.what = "incast send completions"};
    while (completed < sent)
        if (!poll_count_naps(pf, ev, &completed)) {
            wait_1ms(pf);
            stall_tick(pf, &st);
        }
    free(pool);
    done->iters = sent;
    done->a = 1;
}

/* Rank 0: one phase, CMD -> READY from every sender -> GO ... FIN -> DONEs. */
static void incast_phase(struct perf *pf, size_t size, double ms, struct incast_out *o)
{
    struct ctl_msg m = {.op = OP_NAP, .test = T_INCAST, .size = size, .window = incast_window(pf)};
    for (int r = 1; r < pf->size; r++)
        ctl_send_to(pf, r, CTL_CMD, &m);
    for (int r = 1; r < pf->size; r++)
        ctl_recv(pf, CTL_READY);
    incast_recv(pf, (uint64_t)(ms * 1e6), size, o);
}

static void incast_point(struct perf *pf, const struct point *pt)
{
    size_t size = pt->size;
    int senders = pf->size - 1;
    struct incast_out o;
    snprintf(pf->where, sizeof pf->where, "nap incast %zu B", size);
    incast_phase(pf, size, incast_ms(pf) * 0.1, &o); /* warm-up: rings, pools, windows */
    incast_phase(pf, size, incast_ms(pf), &o);
    uint64_t n_fin = 0, total = 0;
    for (int r = 1; r <= senders; r++)
        n_fin += o.got_fin[r], total += o.got[r];
    double rate = (double)n_fin / o.secs;
    if (!pf->opt->csv_stdout) {
        char sz[32], per[512] = "";
        size_t at = 0;
        for (int r = 1; r <= senders && at < sizeof per; r++)
            at += (size_t)snprintf(per + at, sizeof per - at, "%s%d:%" PRIu64, r > 1 ? " " : "", r,
                                   o.got[r]);
        progress_clear(pf);
        printf("%8s %7d %9.3f %14.0f %10.3f %12" PRIu64 "  %s\n", size_str(size, sz, sizeof sz),
               senders, o.secs, rate, rate * (double)size / 1e9, total, per);
        fflush(stdout);
    }
    csv_row_s(pf, "nap", "incast", size, rate, "msg/s");
}

/* A sender: READY, then NAPs from GO until FIN. */
static void incast_serve(struct perf *pf, const struct phase *p, struct ctl_msg *ready)
{
    ctl_send(pf, CTL_READY, ready);
    incast_send(pf, p, ready);
}

static void incast_plan(struct perf *pf, struct plan *pl, int t)
{
    bool any = false;
    for (int i = 0; i < pf->opt->nsizes; i++) {
        size_t s = pf->opt->sizes[i];
        if (s < INCAST_MIN_SIZE || s > pf->info.nap_max) continue;
        plan_add(pf, pl, t, OP_NAP, s, 0);
        any = true;
    }
    if (!any)
        fprintf(pf->out.hdr, "# incast: skipped, no size in %u..%u B (the stamp, nap_max)\n",
                INCAST_MIN_SIZE, pf->info.nap_max);
}

static void incast_section(struct perf *pf, const struct point *pt)
{
    int senders = pf->size - 1;
    char who[32] = "rank 1";
    if (senders > 1) snprintf(who, sizeof who, "ranks 1..%d", senders);
    fprintf(pf->out.hdr,
            "# incast: %d sender%s (%s) -> rank 0, NAPs, %u in flight per sender, %.0f ms per "
            "size; every NAP checked (sender, sequence); msg/s = NAPs received by FIN / time\n",
            senders, senders > 1 ? "s" : "", who, incast_window(pf), incast_ms(pf));
    fprintf(pf->out.hdr, "# incast: %s\n", pf->load_cpu_note);
    if (!pf->opt->csv_stdout)
        printf("%8s %7s %9s %14s %10s %12s  %s\n", "size", "senders", "seconds", "msg/s", "GB/s",
               "messages", "per sender (rank:NAPs)");
}

const struct perf_family perf_incast = {
    .name = "incast",
    .plan = incast_plan,
    .section = incast_section,
    .point = incast_point,
    .serve = incast_serve,
};
