/* ulnperf's load family (--test load): ranks 1..N-1 send paced NAPs to rank
 * 0; latency against the offered load. */
#include "perf.h"

/* load, rank 0: take every NAP from every sender, read it all (a receiver
 * that never looks at its data would flatter the numbers), and time it by the
 * sender's stamp: latency = now - the CLOCK_MONOTONIC time at which the sender
 * posted it (one clock for all CPUs, unlike a TSC on some machines). The
 * latest `cap` samples are kept. At the end of the budget FIN goes to every
 * sender; each answers DONE with its count once its sends have completed. */
struct load_out {
    uint64_t n;      /* samples taken (all messages) */
    uint64_t n_fin;  /* messages received before FIN */
    double secs;     /* GO to FIN */
    double sent_fin; /* messages the senders had posted by FIN (from DONE) */
};

static void load_recv(struct perf *pf, uint64_t budget_ns, size_t size, uint64_t *samples,
                      uint64_t cap, struct load_out *o)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "load NAPs"};
    int senders = pf->size - 1, dones = 0;
    uint64_t n = 0, n_fin = 0, t_fin = 0, expect = UINT64_MAX, sent = 0;
    bool fin = false;
    uint64_t sink = 0;
    struct ctl_msg go = {0};
    uint64_t t0 = mono_ns();
    for (int r = 1; r < pf->size; r++)
        ctl_send_to(pf, r, CTL_GO, &go);
    while (!fin || n < expect) {
        int k = poll_some(pf, ev, 64, &st);
        for (int j = 0; j < k; j++) {
            const struct uln_cqe *e = &ev[j];
            if (e->ep == pf->ep_idx && e->op == ULN_OP_NAP_RECV && !e->status) {
                if (e->len != size) {
                    release(pf, e);
                    die(pf, "load: a NAP of %" PRIu64 " B from rank %d, expected %zu", e->len,
                        e->peer, size);
                }
                uint64_t stamp, w;
                memcpy(&stamp, e->data, 8);
                for (size_t b = 8; b + 8 <= size; b += 8) {
                    memcpy(&w, (const uint8_t *)e->data + b, 8);
                    sink += w;
                }
                uint64_t now = mono_ns();
                samples[n++ % cap] = now > stamp ? now - stamp : 0;
                release(pf, e);
            } else {
                handle_other(pf, e);
            }
        }
        if (!fin && mono_ns() - t0 >= budget_ns) {
            fin = true;
            t_fin = mono_ns();
            n_fin = n;
            struct ctl_msg f = {0};
            for (int r = 1; r < pf->size; r++)
                ctl_send_to(pf, r, CTL_FIN, &f);
        }
        while (fin && dones < senders && ctl_pending(pf)) {
            struct ctl_msg d = ctl_recv(pf, CTL_DONE);
            sent += d.iters;
            if (++dones == senders) expect = sent;
        }
    }
    if (n != expect)
        die(pf, "load: received %" PRIu64 " NAPs, the senders posted %" PRIu64, n, expect);
    __asm__ volatile("" : : "r"(sink));
    o->n = n;
    o->n_fin = n_fin;
    o->secs = (double)(t_fin - t0) / 1e9;
}

/* load, a sender (rank >= 1): after GO, post NAPs to rank 0 at p->rate per
 * second (0: as fast as it can) until FIN, each stamped with the time it is
 * posted. Pacing sleeps (clock_nanosleep) instead of spinning, and at least
 * LOAD_QUANTUM_NS at a time, because the senders may share one CPU: a spinning
 * sender would take it from the others. At high rates the messages due during
 * a sleep then go out as one burst. While its NAPs wait for ring space a sender
 * waits in uln_cq_wait, which drives them and sleeps until rank 0 frees room. */
#define LOAD_QUANTUM_NS 50000u

static void load_send(struct perf *pf, const struct phase *p, struct ctl_msg *done)
{
    struct uln_cqe ev[POLL_BATCH];
    size_t size = p->size;
    bool inl = size <= pf->info.inline_max;
    double per_ns = p->rate / 1e9;
    uint64_t sent = 0, completed = 0;
    ctl_recv(pf, CTL_GO);
    uint64_t t0 = mono_ns();
    for (;;) {
        if (ctl_pending(pf)) {
            if (ctl_peek(pf)->type != CTL_FIN)
                die(pf, "control message %s during load", ctl_name(ctl_peek(pf)->type));
            break; /* FIN, left in the inbox for serve(pf) */
        }
        uint64_t now = mono_ns();
        uint64_t due = per_ns > 0 ? (uint64_t)((double)(now - t0) * per_ns) + 1 : UINT64_MAX;
        bool blocked = false;
        while (sent < due && sent - completed < LOAD_CAP) {
            /* Inline NAPs are copied at post time; others need their own buffer
             * until the completion, one per send in flight. */
            uint8_t *b = inl ? pf->napbuf : pf->load_pool + (sent % LOAD_CAP) * size;
            uint64_t ts = mono_ns();
            memcpy(b, &ts, 8);
            memcpy(b + 8, &sent, 8);
            int rc = uln_nap(pf->ep, 0, b, size, sent, inl ? ULN_INLINE : 0);
            if (rc == -EAGAIN) {
                blocked = true;
                break;
            }
            if (rc) die(pf, "load: posting a NAP: %s", uln_strerror(rc));
            sent++;
        }
        blocked |= sent - completed >= LOAD_CAP;
        int k = poll_count_naps(pf, ev, &completed);
        if (k) continue;
        if (blocked || sent != completed) {
            wait_1ms(pf);
        } else if (per_ns > 0) {
            uint64_t next = t0 + (uint64_t)((double)sent / per_ns);
            now = mono_ns();
            if (next < now + LOAD_QUANTUM_NS) next = now + LOAD_QUANTUM_NS;
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000u),
                                  .tv_nsec = (long)(next % 1000000000u)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
    }
    struct stall st = {.what = "load send completions"};
    while (completed < sent) {
        int k = poll_count_naps(pf, ev, &completed);
        if (!k) {
            wait_1ms(pf);
            stall_tick(pf, &st);
        }
    }
    done->iters = sent;
    done->a = 1;
}

/* load: first the peak (every sender as fast as it can), then each level as a
 * percentage of that peak, split evenly over the senders. */
static void load_point(struct perf *pf, const struct point *pt)
{
    unsigned level = pt->arg;
    size_t size = pf->opt->load_size;
    int senders = pf->size - 1;
    double rate = level ? pf->load_peak * level / 100.0 / senders : 0;
    uint64_t budget_ns = (uint64_t)(point_ms(pf) * 2 * 1e6);
    snprintf(pf->where, sizeof pf->where, "load %u%% %zu B", level, size);
    struct ctl_msg m = {.op = OP_NAP, .test = T_LOAD, .size = size, .rate = rate};
    for (int r = 1; r < pf->size; r++)
        ctl_send_to(pf, r, CTL_CMD, &m);
    for (int r = 1; r < pf->size; r++)
        ctl_recv(pf, CTL_READY);
    struct load_out o;
    load_recv(pf, budget_ns, size, pf->samples, LAT_MAX_ITERS, &o);
    uint64_t ns = o.n < LAT_MAX_ITERS ? o.n : LAT_MAX_ITERS;
    uint64_t t50 = 0, t99 = 0;
    if (ns) med_p99(pf->samples, ns, &t50, &t99);
    double med = (double)t50 / 1000.0, p99 = (double)t99 / 1000.0;
    double acc = (double)o.n_fin / o.secs; /* messages per second received */
    if (!level) pf->load_peak = acc;
    if (!pf->opt->csv_stdout) {
        progress_clear(pf);
        char lv[16];
        snprintf(lv, sizeof lv, level ? "%u%%" : "peak", level);
        printf("%-8s %14.3f %15.3f %12.3f %12.3f %10" PRIu64 "\n", lv,
               level ? rate * senders / 1e6 : acc / 1e6, acc / 1e6, med, p99, o.n);
        fflush(stdout);
    }
    /* The op names the number of senders ("nap-3s"): runs with different
     * numbers of senders can then share one CSV or plot. */
    char op[24];
    snprintf(op, sizeof op, "nap-%ds", senders);
    if (!level) {
        csv_row_s(pf, op, "load_peak", size, acc / 1e6, "Mmsg/s");
        csv_row_s(pf, op, "load_peak_lat", size, med, "us");
        csv_row_s(pf, op, "load_peak_p99", size, p99, "us");
    } else {
        csv_row_s(pf, op, "load", level, med, "us");
        csv_row_s(pf, op, "load_p99", level, p99, "us");
        csv_row_s(pf, op, "load_offered", level, rate * senders / 1e6, "Mmsg/s");
        csv_row_s(pf, op, "load_accepted", level, acc / 1e6, "Mmsg/s");
    }
}

/* A sender: READY, then NAPs from GO until FIN. */
static void load_serve(struct perf *pf, const struct phase *p, struct ctl_msg *ready)
{
    ctl_send(pf, CTL_READY, ready);
    load_send(pf, p, ready);
}

static const char *load_skip(struct perf *pf, int t)
{
    return pf->opt->load_size > pf->info.nap_max ? "--load-size is above nap_max" : NULL;
}

static void load_plan(struct perf *pf, struct plan *pl, int t)
{
    plan_add(pf, pl, t, OP_NAP, pf->opt->load_size, 0);
    for (int l = 0; l < pf->opt->nlevels; l++)
        plan_add(pf, pl, t, OP_NAP, pf->opt->load_size, pf->opt->levels[l]);
}

static void load_section(struct perf *pf, const struct point *pt)
{
    const struct perf_opts *o = pf->opt;
    int senders = pf->size - 1;
    char who[32] = "rank 1";
    if (senders > 1) snprintf(who, sizeof who, "ranks 1..%d", senders);
    fprintf(pf->out.hdr,
            "# load: %d sender%s (%s) -> rank 0, NAP %zu B%s, %.0f ms per level; "
            "latency = receive time - the sender's post time (CLOCK_MONOTONIC)\n",
            senders, senders > 1 ? "s" : "", who, o->load_size,
            o->load_size <= pf->info.inline_max ? " inline" : "", point_ms(pf) * 2);
    fprintf(pf->out.hdr, "# load: %s\n", pf->load_cpu_note);
    if (!o->csv_stdout)
        printf("%-8s %14s %15s %12s %12s %10s\n", "offered", "offered_Mmsg/s", "accepted_Mmsg/s",
               "median_us", "p99_us", "messages");
}

const struct perf_family perf_load = {
    .name = "load",
    .skip = load_skip,
    .plan = load_plan,
    .section = load_section,
    .point = load_point,
    .serve = load_serve,
};
