/* ulnperf: errors, spinning, completions and the control messages between the
 * ranks. */
#include "perf.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>

static const char *const ctl_names[CTL_NTYPES] = {"?",    "HELLO", "CMD", "READY", "FIN", "DONE",
                                                  "QUIT", "ABORT", "GO",  "REKEY", "KEY"};

void die(struct perf *pf, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    progress_clear(pf);
    fprintf(stderr, "ulnperf: rank %d: %s%s%s\n", pf->rank, pf->where[0] ? pf->where : "",
            pf->where[0] ? ": " : "", msg);
    fflush(stdout);
    /* Tell rank 0 (or, from rank 0, everyone), so the job fails at once with
     * the reason instead of stalling. */
    if (!pf->dying && !pf->peer_aborted && pf->ctl) {
        pf->dying = true;
        struct ctl_msg m = {.magic = CTL_MAGIC, .type = CTL_ABORT};
        snprintf(m.text, sizeof m.text, "%.*s", (int)sizeof m.text - 1, msg);
        for (int r = 0; r < pf->size; r++)
            if (r != pf->rank && (pf->rank == 0 || r == 0)) ctl_send_raw(pf, r, &m, true);
    }
    exit(1);
}

const char *op_str(unsigned op)
{
    static const char *const n[] = {"?",          "NAP", "NAP_RECV", "PUT",
                                    "PUT_REMOTE", "GET", "FLUSH",    "ATOMIC"};
    return op < sizeof n / sizeof n[0] ? n[op] : "?";
}

/* The CQ an entry came from. */
static struct uln_cq *cq_of(const struct perf *pf, const struct uln_cqe *e)
{
    return e->ep == pf->ctl_idx ? pf->ctl_cq : pf->cq;
}

/* Control first, for at most half of max: a data CQ that always has max
 * entries waiting (a receiver under incast) must not keep the control
 * endpoint from ever being polled, and so from sending and taking FIN. */
static int poll_both(struct perf *pf, struct uln_cqe *ev, int max)
{
    int k = uln_cq_poll(pf->ctl_cq, ev, max > 1 ? max / 2 : max);
    if (k < 0 || k == max) return k;
    int n = uln_cq_poll(pf->cq, ev + k, max - k);
    return n < 0 ? n : k + n;
}

/* The hot loops' poll: the measured endpoints' CQ, and every CTL_POLL_EVERY
 * calls the control CQ as well. */
int perf_poll(struct perf *pf, struct uln_cqe *ev, int max)
{
    if (++pf->polls % CTL_POLL_EVERY) return uln_cq_poll(pf->cq, ev, max);
    return poll_both(pf, ev, max);
}

int poll_some(struct perf *pf, struct uln_cqe *ev, int max, struct stall *st)
{
    int k = perf_poll(pf, ev, max);
    if (k < 0) die(pf, "uln_cq_poll: %s", uln_strerror(k));
    if (k)
        stall_reset(st);
    else
        stall_tick(pf, st);
    return k;
}

/* ------------------------------------------------------------------------- */
/* Completion handling and control messages                                   */
/* ------------------------------------------------------------------------- */

static void check_status(struct perf *pf, const struct uln_cqe *e)
{
    if (e->status)
        die(pf, "%s completion failed: %s (status %d, ep %u, peer %d)", op_str(e->op),
            uln_strerror(e->status), e->status, e->ep, e->peer);
}

void release(struct perf *pf, const struct uln_cqe *e)
{
    if (e->flags & ULN_CQE_MUST_RELEASE) {
        int rc = uln_cqe_release(cq_of(pf, e), e);
        if (rc) die(pf, "uln_cqe_release: %s", uln_strerror(rc));
    }
}

/* Anything a hot loop does not expect: control traffic or a failure. */
void handle_other(struct perf *pf, const struct uln_cqe *e)
{
    check_status(pf, e);
    if (e->ep == pf->ctl_idx && e->op == ULN_OP_NAP_RECV) {
        struct ctl_msg m;
        if (e->len != sizeof m) {
            release(pf, e);
            die(pf, "control message of %" PRIu64 " bytes, expected %zu", e->len, sizeof m);
        }
        memcpy(&m, e->data, sizeof m);
        release(pf, e);
        if (m.magic != CTL_MAGIC) die(pf, "control message with bad magic %#x", m.magic);
        m.src = e->peer;
        if (m.type == CTL_ABORT) {
            pf->peer_aborted = true;
            die(pf, "rank %d failed: %.*s", e->peer, (int)sizeof m.text, m.text);
        }
        if (pf->in_tail - pf->in_head >= INBOX) die(pf, "control inbox overflow");
        pf->inbox[pf->in_tail++ % INBOX] = m;
        return;
    }
    if (e->ep == pf->ctl_idx && e->op == ULN_OP_NAP) {
        if (e->user_data >= CTL_SLOTS)
            die(pf, "control send completion with bad user_data %" PRIu64, e->user_data);
        pf->slot_busy[e->user_data] = false;
        return;
    }
    if (e->op == ULN_OP_NAP_RECV) release(pf, e);
    die(pf, "unexpected completion: op %s ep %u peer %d len %" PRIu64, op_str(e->op), e->ep,
        e->peer, e->len);
}

/* Poll once; count this endpoint's successful NAP send completions and hand
 * everything else on. Returns how many entries came. */
int poll_count_naps(struct perf *pf, struct uln_cqe *ev, uint64_t *completed)
{
    int k = perf_poll(pf, ev, POLL_BATCH);
    if (k < 0) die(pf, "uln_cq_poll: %s", uln_strerror(k));
    for (int j = 0; j < k; j++) {
        if (ev[j].ep == pf->ep_idx && ev[j].op == ULN_OP_NAP && !ev[j].status)
            (*completed)++;
        else
            handle_other(pf, &ev[j]);
    }
    return k;
}

/* Wait (spin, then sleep) at most a millisecond for the CQ. */
void wait_1ms(struct perf *pf)
{
    int rc = uln_cq_wait(pf->cq, 1);
    if (rc && rc != -ETIMEDOUT) die(pf, "uln_cq_wait: %s", uln_strerror(rc));
}

/* Poll until our operation `id` of kind `want` completes with `size` bytes;
 * everything else that completes meanwhile is handled on the way. */
void wait_own(struct perf *pf, int want, uint64_t id, size_t size, struct stall *st)
{
    struct uln_cqe ev[POLL_BATCH];
    for (bool done = false; !done;) {
        int k = perf_poll(pf, ev, POLL_BATCH);
        if (k < 0) die(pf, "uln_cq_poll: %s", uln_strerror(k));
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == pf->ep_idx && ev[j].op == want && !ev[j].status &&
                ev[j].user_data == id) {
                if (ev[j].len != size)
                    die(pf, "%s completion says %" PRIu64 " B, expected %zu", op_str(want),
                        ev[j].len, size);
                done = true;
            } else {
                handle_other(pf, &ev[j]);
            }
        }
        if (!done) stall_tick(pf, st);
    }
    stall_reset(st);
}

/* Waiting for control: both CQs each time. */
int pump(struct perf *pf)
{
    struct uln_cqe ev[POLL_BATCH];
    int n = poll_both(pf, ev, POLL_BATCH);
    if (n < 0) die(pf, "uln_cq_poll: %s", uln_strerror(n));
    for (int i = 0; i < n; i++)
        handle_other(pf, &ev[i]);
    return n;
}

/* Control messages go as ordinary (copied) NAPs from a small pool of buffers
 * that a send completion frees: nothing assumes inline_max is large enough. */
void ctl_send_raw(struct perf *pf, int peer, const struct ctl_msg *m, bool best_effort)
{
    struct stall st = {.what = "a free control buffer"};
    int s;
    for (;;) {
        for (s = 0; s < CTL_SLOTS && pf->slot_busy[s]; s++)
            ;
        if (s < CTL_SLOTS) break;
        if (best_effort) return;
        pump(pf);
        stall_tick(pf, &st);
    }
    pf->slot[s] = *m;
    pf->slot_busy[s] = true;
    st.what = "room to post a control message";
    for (uint64_t tries = 0;; tries++) {
        int rc = uln_nap(pf->ctl, peer, &pf->slot[s], sizeof *m, (uint64_t)s, 0);
        if (rc == 0) break;
        if (rc != -EAGAIN || (best_effort && tries > 1000)) {
            if (best_effort) return;
            die(pf, "uln_nap (control): %s", uln_strerror(rc));
        }
        if (best_effort) {
            struct uln_cqe ev[POLL_BATCH];
            int n = poll_both(pf, ev, POLL_BATCH);
            for (int i = 0; i < n; i++)
                if (ev[i].op == ULN_OP_NAP_RECV) uln_cqe_release(cq_of(pf, &ev[i]), &ev[i]);
        } else {
            pump(pf);
            stall_tick(pf, &st);
        }
    }
    if (best_effort) { /* dying: give the message ~100 ms to leave, then go */
        uint64_t t0 = mono_ns();
        struct uln_cqe ev[POLL_BATCH];
        while (pf->slot_busy[s] && mono_ns() - t0 < 100000000u) {
            int n = poll_both(pf, ev, POLL_BATCH);
            for (int i = 0; i < n; i++)
                if (ev[i].ep == pf->ctl_idx && ev[i].op == ULN_OP_NAP &&
                    ev[i].user_data == (uint64_t)s)
                    pf->slot_busy[s] = false;
                else if (ev[i].op == ULN_OP_NAP_RECV)
                    uln_cqe_release(cq_of(pf, &ev[i]), &ev[i]);
        }
    }
}

void ctl_send_to(struct perf *pf, int peer, uint32_t type, struct ctl_msg *m)
{
    m->magic = CTL_MAGIC;
    m->type = type;
    ctl_send_raw(pf, peer, m, false);
}

void ctl_send(struct perf *pf, uint32_t type, struct ctl_msg *m)
{
    ctl_send_to(pf, pf->peer, type, m);
}

const char *ctl_name(uint32_t type)
{
    return type < CTL_NTYPES ? ctl_names[type] : "?";
}

/* Sleep until either CQ has work, at most timeout_ms: arm both (a progress
 * pass each; -EAGAIN: something is ready, do not sleep) and poll their
 * descriptors, as ulnet.h shows for a CQ beside other work. */
static void wait_both(struct perf *pf, int timeout_ms)
{
    struct pollfd fds[2] = {{.fd = uln_cq_fd(pf->cq), .events = POLLIN},
                            {.fd = uln_cq_fd(pf->ctl_cq), .events = POLLIN}};
    int ms[2] = {timeout_ms, timeout_ms};
    for (int i = 0; i < 2; i++) {
        if (fds[i].fd < 0) die(pf, "uln_cq_fd: %s", uln_strerror(fds[i].fd));
        int rc = uln_cq_arm(i ? pf->ctl_cq : pf->cq, &ms[i]);
        if (rc == -EAGAIN) return;
        if (rc) die(pf, "uln_cq_arm: %s", uln_strerror(rc));
    }
    int t = timeout_ms;
    for (int i = 0; i < 2; i++)
        if (ms[i] >= 0 && (t < 0 || ms[i] < t)) t = ms[i];
    if (poll(fds, 2, t) < 0 && errno != EINTR) die(pf, "poll: %s", strerror(errno));
}

struct ctl_msg ctl_recv(struct perf *pf, uint32_t type)
{
    char what[64];
    snprintf(what, sizeof what, "control message %s from a peer", ctl_name(type));
    /* The other ranks wait for rank 0 as long as a phase lasts (FIN) or a point
     * is reported (CMD); rank 0 has its own limits, ulnrun --timeout the rest. */
    struct stall st = {.what = pf->rank == 0 ? what : NULL};
    while (!ctl_pending(pf)) {
        if (pump(pf)) continue;
        if (pf->sleep_wait) {
            wait_both(pf, 100); /* off the CPU: other ranks may share it */
        } else {
            stall_tick(pf, &st);
        }
    }
    struct ctl_msg m = pf->inbox[pf->in_head++ % INBOX];
    if (type && m.type != type)
        die(pf, "control message %s from rank %d, expected %s", ctl_name(m.type), m.src,
            ctl_name(type));
    return m;
}

void ctl_drain(struct perf *pf)
{
    struct stall st = {.what = "control send completions"};
    for (;;) {
        bool busy = false;
        for (int s = 0; s < CTL_SLOTS; s++)
            busy |= pf->slot_busy[s];
        if (!busy) return;
        if (!pump(pf)) stall_tick(pf, &st);
    }
}

/* Wait until a control message is in the inbox, without taking it. */
void ctl_wait(struct perf *pf)
{
    while (!ctl_pending(pf)) {
        if (pump(pf)) continue;
        if (pf->sleep_wait) {
            wait_both(pf, 100);
        } else if (pf->yield) {
            sched_yield();
        }
    }
}
