/* ulnperf's streaming family (--test bw, bibw, rate): rank 0 keeps a window of
 * operations outstanding towards rank 1 (bibw: both at once), for bandwidth
 * and message rate. */
#include "perf.h"

#define BIBW_BATCH 1024

/* --silent: the operations go ULN_SILENT and a flush follows every half
 * window of them, so its completion (user_data: the posts it covers) stands
 * for the batch - how a one-sided user works (put_nbi, then quiet). */
static void bw_flush(struct perf *pf, uint64_t posted, uint64_t *flushed)
{
    int rc = uln_ep_flush(pf->ep, posted);
    if (rc) die(pf, "uln_ep_flush: %s", uln_strerror(rc));
    *flushed = posted;
}

/* Rank 0's side of bw: keep `window` operations outstanding, reposting as they
 * complete, until the budget is spent; then let the window drain. *elapsed is
 * first post to last completion; for NAP, to rank 1's DONE, which confirms
 * that everything arrived (a NAP completion only says it left our buffer).
 * For NAP the FIN (with the count) goes as soon as posting stops, so rank 1
 * knows how many to expect while the last ones are still in flight. */
static uint64_t bw_sender(struct perf *pf, const struct phase *p, uint64_t *elapsed,
                          struct ctl_msg *done)
{
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "bw completions"};
    uint64_t posted = 0, completed = 0, flushed = 0;
    bool silent = pf->opt->silent;
    uint16_t want = silent ? ULN_OP_FLUSH : done_op[p->op];
    uint64_t batch = silent && p->window > 1 ? p->window / 2 : 1;
    bool more = true;
    uint64_t t0 = ticks(pf);
    while (more || completed < posted) {
        /* The clock once per poll, not per post: it would cost as much as a
         * small post. */
        if (more && !go_on(p, posted, t0, ticks(pf))) {
            more = false;
            if (silent && flushed < posted) bw_flush(pf, posted, &flushed);
            if (is_nap(p->op)) {
                struct ctl_msg f = {.iters = posted};
                ctl_send(pf, CTL_FIN, &f);
            }
        }
        while (more && posted - completed < p->window && posted < p->max_iters) {
            int rc = post(pf, p->op, p->size, posted, silent ? ULN_SILENT : 0);
            if (rc == -EAGAIN) break; /* a queue is full: poll below, then post again */
            if (rc) die(pf, "posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
            posted++;
            if (silent && posted - flushed >= batch) bw_flush(pf, posted, &flushed);
        }
        int k = poll_some(pf, ev, POLL_BATCH, &st);
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == pf->ep_idx && ev[j].op == want && !ev[j].status) {
                if (silent) {
                    completed = ev[j].user_data; /* flushes complete in order */
                    continue;
                }
                if (ev[j].len != p->size)
                    die(pf, "%s completion says %" PRIu64 " B, expected %zu", op_str(want),
                        ev[j].len, p->size);
                completed++;
            } else {
                handle_other(pf, &ev[j]);
            }
        }
    }
    if (is_nap(p->op)) *done = ctl_recv(pf, CTL_DONE);
    *elapsed = ticks(pf) - t0;
    return posted;
}

/* Rank 1's side of NAP bw: take and release every message until the count in
 * rank 0's FIN has arrived. The marks are checked on the first, every 256th and
 * the last message: cheap, and still catches misplaced or stale data. */
void nap_bw_receiver(struct perf *pf, const struct phase *p, struct ctl_msg *done)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "bw NAPs"};
    uint64_t got = 0, bytes = 0, n = UINT64_MAX;
    long bad = -1;
    while (got < n) {
        int k = poll_some(pf, ev, 64, &st);
        for (int j = 0; j < k; j++) {
            /* bw's NAPs come on the data endpoint, fair's on the fair ones. */
            if ((ev[j].ep == pf->ep_idx || is_fair_ep(pf, ev[j].ep)) &&
                ev[j].op == ULN_OP_NAP_RECV && !ev[j].status) {
                if (ev[j].len != p->size) {
                    release(pf, &ev[j]);
                    die(pf, "received a NAP of %" PRIu64 " B, expected %zu", ev[j].len, p->size);
                }
                got++;
                if ((got == 1 || !(got & 255) || got == n) && bad < 0 &&
                    (bad = marks_check(ev[j].data, p->size, p->pattern)) >= 0)
                    snprintf(done->text, sizeof done->text, "NAP %" PRIu64 ": wrong byte at %ld",
                             got, bad);
                bytes += ev[j].len;
                release(pf, &ev[j]);
            } else {
                handle_other(pf, &ev[j]);
            }
        }
        if (n == UINT64_MAX && ctl_pending(pf)) {
            const struct ctl_msg *f = &pf->inbox[pf->in_head % INBOX];
            if (f->type != CTL_FIN) die(pf, "control message %u during nap bw", f->type);
            n = f->iters; /* left in the inbox: serve() takes it */
        }
    }
    if (got != n) die(pf, "received %" PRIu64 " NAPs, rank 0 sent %" PRIu64, got, n);
    done->a = bad < 0;
    done->b = bytes;
    done->iters = got;
}

/* bibw: both ranks at once keep `window` operations of their own outstanding
 * and (NAP) take the other's messages as they arrive. Rank 0 stops posting when
 * its budget is spent and sends FIN with its count; rank 1 stops when it sees
 * that FIN, and once its own operations completed and all of rank 0's NAPs
 * arrived, serve() answers DONE with its count. Rank 0's clock runs until it
 * also has all of rank 1's NAPs, so *elapsed covers both directions. */
struct bibw {
    uint64_t posted, completed, got, bytes, expect;
    bool more, have_done;
    /* Rank 1 starts on rank 0's GO, which comes when rank 0 listens for its
     * data; rank 0's NAPs may arrive before the GO does. */
    bool started;
    long bad;
    char why[96];
};

/* Whether to go on posting: rank 0 by its budget, rank 1 by rank 0's FIN. */
static void bibw_steer(struct perf *pf, const struct phase *p, struct bibw *b, uint64_t t0)
{
    if (!b->started && ctl_pending(pf)) b->started = ctl_recv(pf, CTL_GO).type == CTL_GO;
    if (b->more && pf->rank == 0 && !go_on(p, b->posted, t0, ticks(pf))) {
        b->more = false;
        struct ctl_msg f = {.iters = b->posted};
        ctl_send(pf, CTL_FIN, &f);
    } else if (b->more && b->started && pf->rank != 0 && b->posted >= p->window &&
               ctl_pending(pf)) {
        /* At least a window's worth each way, however short the phase:
         * then both sides have data to check. */
        const struct ctl_msg *f = ctl_peek(pf);
        if (f->type != CTL_FIN) die(pf, "control message %s during bibw", ctl_name(f->type));
        b->more = false;
        b->expect = f->iters; /* left in the inbox: serve() takes it */
    }
}

static void bibw_post(struct perf *pf, const struct phase *p, struct bibw *b)
{
    while (b->more && b->started && b->posted - b->completed < p->window &&
           b->posted < p->max_iters) {
        int rc = post(pf, p->op, p->size, b->posted, 0);
        if (rc == -EAGAIN) break;
        if (rc) die(pf, "posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
        b->posted++;
    }
}

/* One completion: ours, the peer's NAP (whose marks we check now and then), or
 * something else. */
static void bibw_take(struct perf *pf, const struct phase *p, struct bibw *b, struct uln_cqe *e)
{
    uint16_t want = done_op[p->op];
    if (e->ep == pf->ep_idx && !e->status && e->op == want) {
        if (e->len != p->size)
            die(pf, "%s completion says %" PRIu64 " B, expected %zu", op_str(want), e->len,
                p->size);
        b->completed++;
    } else if (is_nap(p->op) && e->ep == pf->ep_idx && !e->status && e->op == ULN_OP_NAP_RECV) {
        if (e->len != p->size) {
            release(pf, e);
            die(pf, "received a NAP of %" PRIu64 " B, expected %zu", e->len, p->size);
        }
        b->got++;
        if ((b->got == 1 || !(b->got & 255)) && b->bad < 0 &&
            (b->bad = marks_check(e->data, p->size, p->pattern)) >= 0)
            snprintf(b->why, sizeof b->why, "NAP %" PRIu64 ": wrong byte at %ld", b->got, b->bad);
        b->bytes += e->len;
        release(pf, e);
    } else {
        handle_other(pf, e);
    }
}

static uint64_t bibw_role(struct perf *pf, const struct phase *p, uint64_t *elapsed,
                          struct ctl_msg *done)
{
    /* Ask for more entries than we have operations outstanding: uln_cq_poll
     * skips progress when `max` entries are already waiting, and with send
     * completions arriving as fast as we post (the doorbell fast path) a small
     * batch would never let it take the peer's NAPs while we stream. */
    static struct uln_cqe ev[BIBW_BATCH];
    int batch = p->window * 2 < BIBW_BATCH ? (int)p->window * 2 : BIBW_BATCH;
    if (batch < 64) batch = 64;
    struct stall st = {.what = "bibw completions"};
    struct bibw b = {.more = true, .started = pf->rank == 0, .bad = -1};
    bool nap = is_nap(p->op);
    /* Rank 1 sends too, and must not before we listen for its data. */
    if (pf->rank == 0) ctl_send(pf, CTL_GO, &(struct ctl_msg){0});
    uint64_t t0 = ticks(pf);
    for (;;) {
        bibw_steer(pf, p, &b, t0);
        bibw_post(pf, p, &b);
        int k = poll_some(pf, ev, batch, &st);
        for (int j = 0; j < k; j++)
            bibw_take(pf, p, &b, &ev[j]);
        if (pf->rank == 0 && !b.more && !b.have_done && ctl_pending(pf)) {
            *done = ctl_recv(pf, CTL_DONE);
            b.have_done = true;
            b.expect = done->iters;
        }
        if (!b.more && b.completed == b.posted && (!nap || b.got == b.expect) &&
            (pf->rank != 0 || b.have_done))
            break;
    }
    if (pf->rank == 0) {
        *elapsed = ticks(pf) - t0;
        if (b.bad >= 0) die(pf, "data check failed: %s", b.why);
    } else {
        done->a = b.bad < 0;
        done->b = b.bytes;
        done->iters = b.posted;
        if (b.bad >= 0) snprintf(done->text, sizeof done->text, "%s", b.why);
    }
    return b.posted;
}

static uint64_t stream_role(struct perf *pf, const struct phase *p, uint64_t *samples,
                            uint64_t *elapsed, struct ctl_msg *done)
{
    if (p->test == T_BIBW) return bibw_role(pf, p, elapsed, done);
    if (pf->rank == 0) return bw_sender(pf, p, elapsed, done);
    if (is_nap(p->op)) nap_bw_receiver(pf, p, done);
    return 0;
}

/* Both sides, before the data flows: the marks the receiver (or a GET's
 * initiator) checks afterwards. */
static void stream_setup(struct perf *pf, const struct phase *p)
{
    bool r0 = pf->rank == 0;
    if (p->test != T_BIBW) {
        if (is_nap(p->op) && r0) marks_set(pf->napbuf, p->size, p->pattern, false);
        if (p->op == OP_PUT) marks_set(r0 ? pf->loc : pf->tgt, p->size, p->pattern, !r0);
        if (p->op == OP_GET) marks_set(r0 ? pf->loc : pf->tgt, p->size, p->pattern, r0);
        return;
    }
    /* Each side both the initiator and the target of the other's traffic. */
    if (is_nap(p->op)) marks_set(pf->napbuf, p->size, p->pattern, false);
    if (p->op == OP_PUT) {
        marks_set(pf->loc, p->size, p->pattern, false);
        marks_set(pf->tgt, p->size, p->pattern, true);
    }
    if (p->op == OP_GET) {
        marks_set(pf->tgt, p->size, p->pattern, false);
        marks_set(pf->loc, p->size, p->pattern, true);
    }
}

/* After FIN: the PUT target or GET destination this side was given. */
static long stream_check(struct perf *pf, const struct phase *p, const char **what)
{
    bool r0 = pf->rank == 0, bibw = p->test == T_BIBW;
    if (p->op == OP_PUT && (bibw || !r0))
        return *what = "PUT target", marks_check(pf->tgt, p->size, p->pattern);
    if (p->op == OP_GET && (bibw || r0))
        return *what = "GET destination", marks_check(pf->loc, p->size, p->pattern);
    return -1;
}

static void stream_plan(struct perf *pf, struct plan *pl, int t)
{
    static const unsigned once = 0;
    if (t == T_RATE)
        plan_sizes(pf, pl, t, pf->opt->windows, pf->opt->nwindows);
    else
        plan_sizes(pf, pl, t, &once, 1);
}

/* One point: bandwidth (bw, bibw: both directions' messages over rank 0's
 * time) or message rate. */
static void stream_point(struct perf *pf, const struct point *pt)
{
    int op = pt->op, test = pt->test;
    size_t size = pt->size;
    unsigned window = test == T_RATE ? pt->arg : pf->opt->window;
    /* A rate point needs far fewer messages than a bandwidth point to be
     * precise: millions per second. */
    double ms = point_ms(pf) * (test == T_RATE ? 0.3 : 1.0);
    struct phase p = {.op = op, .test = test, .size = size, .window = window};
    char tname[32], tl[32], note[64] = "";
    const char *sfx = pf->opt->silent && test != T_BIBW ? "_silent" : "";
    if (test == T_RATE)
        snprintf(tname, sizeof tname, "rate_w%u%s", window, sfx);
    else
        snprintf(tname, sizeof tname, "%s%s", test_names[test], sfx);
    snprintf(pf->where, sizeof pf->where, "%s %s %zu B", op_names[op], tname, size);
    uint64_t elapsed = 0;
    struct ctl_msg done;
    uint64_t n = measure_two(pf, &p, ms, &elapsed, &done);
    uint64_t msgs = test == T_BIBW ? n + done.iters : n;
    double ns = ticks_to_ns(pf, (double)elapsed);
    double gbs = (double)msgs * (double)size / ns; /* bytes per ns = GB/s */
    double mmsg = (double)msgs / ns * 1e3;
    if (test == T_RATE) snprintf(tl, sizeof tl, "rate w=%u%s", window, *sfx ? " silent" : "");
    if (test == T_BIBW)
        snprintf(note, sizeof note, "%" PRIu64 " + %" PRIu64 " messages", n, done.iters);
    table_row(pf, op, test == T_RATE ? tl : tname, size, 0, 0, test == T_RATE ? 0 : gbs,
              size <= BW_RATE_MAX_SIZE || test == T_RATE ? mmsg : 0, msgs, note);
    if (test == T_RATE) {
        csv_row(pf, op, tname, size, mmsg, "Mmsg/s");
    } else {
        csv_row(pf, op, tname, size, gbs, "GB/s");
        if (test == T_BW && size <= BW_RATE_MAX_SIZE)
            csv_row(pf, op, *sfx ? "bw_rate_silent" : "bw_rate", size, mmsg, "Mmsg/s");
    }
}

const struct perf_family perf_stream = {
    .name = "stream",
    .plan = stream_plan,
    .point = stream_point,
    .setup = stream_setup,
    .check = stream_check,
    .role = stream_role,
};
