/*
 * ulnperf - latency and bandwidth of NAP, PUT and GET between two ranks.
 *
 *   ulnrun -n 2 [--timeout S] ulnperf [options]      (ulnperf -h for the options)
 *
 * Rank 0 drives and measures; rank 1 is a slave that learns every step from
 * control messages. The control traffic uses its own endpoint (the second one
 * each rank opens) so data NAPs carry no header and need no demultiplexing,
 * while one CQ serves both endpoints: whichever loop a rank is in, polling that
 * CQ drives all of its work (the shm_direct=0 and refused-CMA paths need the
 * target to make progress) and notices a peer's ABORT.
 *
 * Every measurement point is two "phases" (CMD -> READY -> run -> FIN -> DONE),
 * a warm-up and the measured one. Rank 0 ends each when its time budget is
 * spent (or after --iters), so every point takes about the same time whatever
 * the message size, and rank 1 never needs an iteration count.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

#include "ulnet.h"

/* ------------------------------------------------------------------------- */
/* Options                                                                    */
/* ------------------------------------------------------------------------- */

enum { OP_NAP, OP_NAP_INLINE, OP_PUT, OP_GET, NOPS };
static const char *const op_names[NOPS] = {"nap", "nap-inline", "put", "get"};
enum { T_LAT, T_BW, NTESTS };
static const char *const test_names[NTESTS] = {"lat", "bw"};

#define MAX_SIZES        64
#define DEFAULT_MAX_SIZE (16u << 20)
/* Rate (messages/s) is only interesting where per-message cost dominates. */
#define RATE_MAX_SIZE 65536u

static struct {
    unsigned ops;   /* bit per OP_* */
    unsigned tests; /* bit per T_* */
    size_t sizes[MAX_SIZES];
    int nsizes;
    bool quick;
    uint64_t iters; /* 0: adapt to the time budget */
    unsigned window;
    bool malloc_mem;
    bool csv_stdout;
    const char *csv_path;
    double point_ms; /* 0: default for the mode */
} opt = {.window = 32};

static void usage(FILE *f)
{
    fprintf(f, "usage: ulnrun -n 2 [--timeout S] ulnperf [options]\n"
               "Measures NAP/PUT/GET latency and bandwidth between rank 0 and rank 1.\n"
               "  --op LIST       nap,nap-inline,put,get or all (default all)\n"
               "  --test LIST     lat,bw or all (default all)\n"
               "  --sizes SPEC    a-b: a, the powers of two between, b; or a list a,b,c\n"
               "                  (K/M suffixes; default 1-16M; nap stops at nap_max,\n"
               "                  nap-inline at inline_max)\n"
               "  --iters N       measured iterations per point (default: adapt so each\n"
               "                  point takes ~100 ms)\n"
               "  --window W      operations outstanding in bw tests (default 32)\n"
               "  --mem KIND      ulnet: PUT/GET buffers from uln_mem_alloc (peers map them)\n"
               "                  malloc: aligned_alloc + uln_mr_reg (peers use CMA)\n"
               "  --quick         a few ms per point (smoke test)\n"
               "  --point-ms T    time budget of one point, ms\n"
               "  --csv           CSV on stdout instead of the table\n"
               "  --csv=FILE      table on stdout and CSV into FILE\n"
               "  -h, --help      this text\n"
               "Latency: nap, nap-inline and put report one-way time (RTT/2, ping-pong);\n"
               "get reports the full GET time, which is a round trip by nature.\n");
}

/* "16M", "4K", "100" -> bytes; 0 on a malformed number. */
static size_t parse_size(const char *s, const char **end)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || e == s) return 0;
    if (*e == 'K' || *e == 'k')
        v <<= 10, e++;
    else if (*e == 'M' || *e == 'm')
        v <<= 20, e++;
    else if (*e == 'G' || *e == 'g')
        v <<= 30, e++;
    *end = e;
    return (size_t)v;
}

static int add_size(size_t s)
{
    if (opt.nsizes >= MAX_SIZES) return -1;
    for (int i = 0; i < opt.nsizes; i++)
        if (opt.sizes[i] == s) return 0;
    opt.sizes[opt.nsizes++] = s;
    return 0;
}

static int parse_sizes(const char *spec)
{
    const char *p = spec, *e;
    size_t a = parse_size(p, &e);
    if (a && *e == '-') {
        size_t b = parse_size(e + 1, &e);
        if (!b || *e || b < a) return -1;
        if (add_size(a)) return -1;
        for (size_t s = 1; s < b; s <<= 1)
            if (s > a && add_size(s)) return -1;
        return add_size(b);
    }
    for (;;) {
        size_t s = parse_size(p, &e);
        if (!s || (*e && *e != ',') || add_size(s)) return -1;
        if (!*e) break;
        p = e + 1;
    }
    return 0;
}

static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

/* Comma list of names -> bit mask; "all" selects everything. */
static int parse_list(const char *arg, const char *const *names, int n, unsigned *mask)
{
    char buf[256];
    if (strlen(arg) >= sizeof buf) return -1;
    strcpy(buf, arg);
    *mask = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "all")) {
            *mask = (1u << n) - 1;
            continue;
        }
        int i = 0;
        while (i < n && strcmp(t, names[i]))
            i++;
        if (i == n) return -1;
        *mask |= 1u << i;
    }
    return *mask ? 0 : -1;
}

/* Returns 0 to go on, 1 to exit successfully (help), -1 on a usage error. */
static int parse_args(int argc, char **argv, const char *who)
{
    opt.ops = (1u << NOPS) - 1;
    opt.tests = (1u << NTESTS) - 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool used_v = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "--quick")) {
            opt.quick = true, used_v = false;
        } else if (!strcmp(a, "--csv")) {
            opt.csv_stdout = true, used_v = false;
        } else if (!strncmp(a, "--csv=", 6) && a[6]) {
            opt.csv_path = a + 6, used_v = false;
        } else if (!v) {
            goto bad;
        } else if (!strcmp(a, "--op")) {
            if (parse_list(v, op_names, NOPS, &opt.ops)) goto bad;
        } else if (!strcmp(a, "--test")) {
            if (parse_list(v, test_names, NTESTS, &opt.tests)) goto bad;
        } else if (!strcmp(a, "--sizes")) {
            opt.nsizes = 0;
            if (parse_sizes(v)) goto bad;
        } else if (!strcmp(a, "--iters")) {
            char *e;
            opt.iters = strtoull(v, &e, 10);
            if (*e || !opt.iters) goto bad;
        } else if (!strcmp(a, "--window")) {
            char *e;
            unsigned long w = strtoul(v, &e, 10);
            if (*e || !w || w > 65536) goto bad;
            opt.window = (unsigned)w;
        } else if (!strcmp(a, "--point-ms")) {
            char *e;
            opt.point_ms = strtod(v, &e);
            if (*e || !(opt.point_ms > 0)) goto bad;
        } else if (!strcmp(a, "--mem")) {
            if (!strcmp(v, "malloc"))
                opt.malloc_mem = true;
            else if (strcmp(v, "ulnet"))
                goto bad;
        } else {
            goto bad;
        }
        if (used_v) i++;
        continue;
    bad:
        /* Every rank reports it: ulnrun ends the job as soon as one rank exits,
         * possibly before a chosen "reporting" rank got to print. */
        fprintf(stderr, "ulnperf: %sbad option or value: %s%s%s (ulnperf -h for help)\n", who, a,
                v && used_v ? " " : "", v && used_v ? v : "");
        return -1;
    }
    if (!opt.nsizes) parse_sizes("1-16M");
    qsort(opt.sizes, (size_t)opt.nsizes, sizeof opt.sizes[0], cmp_size);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Time                                                                       */
/* ------------------------------------------------------------------------- */

static bool use_tsc;
static double ticks_per_ns = 1.0; /* 1 when ticks are clock_gettime nanoseconds */

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* rdtscp rather than rdtsc: it waits for earlier instructions, so a sample is
 * not taken before the load that saw the reply has retired. */
static inline uint64_t ticks(void)
{
#if HAVE_TSC
    if (use_tsc) {
        unsigned aux;
        return __rdtscp(&aux);
    }
#endif
    return mono_ns();
}

static inline double ticks_to_ns(double t)
{
    return t / ticks_per_ns;
}

#if HAVE_TSC
/* A (clock, TSC) pair read close together: a preemption between the two reads
 * would skew the calibration, so retry until the TSC reads around the clock
 * are near (2000 cycles is < 1 us at any plausible rate), and take their mean. */
static void tsc_pair(uint64_t *ns, uint64_t *tsc)
{
    for (int i = 0;; i++) {
        uint64_t a = __rdtsc();
        *ns = mono_ns();
        uint64_t b = __rdtsc();
        *tsc = a + (b - a) / 2;
        if (b - a < 2000 || i == 100) return;
    }
}
#endif

/* The TSC is only a clock if its rate is constant (constant_tsc); otherwise
 * fall back to clock_gettime, which costs ~20 ns a call through the vDSO. */
static void timer_init(unsigned calib_ms)
{
#if HAVE_TSC
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    bool constant = false;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            constant = strstr(line, " constant_tsc") != NULL;
            break;
        }
    if (f) fclose(f);
    if (!constant) return;
    uint64_t n0, c0, n1, c1;
    tsc_pair(&n0, &c0);
    do
        tsc_pair(&n1, &c1);
    while (n1 - n0 < (uint64_t)calib_ms * 1000000u);
    double r = (double)(c1 - c0) / (double)(n1 - n0);
    if (r > 0.05 && r < 100) { /* a plausible 50 MHz .. 100 GHz */
        ticks_per_ns = r;
        use_tsc = true;
    }
#else
    (void)calib_ms;
#endif
}

/* ------------------------------------------------------------------------- */
/* State, errors                                                              */
/* ------------------------------------------------------------------------- */

enum ctl_type {
    CTL_HELLO = 1,
    CTL_CMD,   /* rank 0 -> 1: run a phase */
    CTL_READY, /* rank 1 -> 0: prepared, go */
    CTL_FIN,   /* rank 0 -> 1: phase over, check what you have */
    CTL_DONE,  /* rank 1 -> 0: result of the check */
    CTL_QUIT,
    CTL_ABORT, /* either way: I am failing, text says why */
};
#define CTL_MAGIC 0x6c6e7066u /* "fpnl" */

struct ctl_msg {
    uint32_t magic, type;
    uint32_t op, test;
    uint64_t size, iters, window, pattern;
    uint64_t a, b;     /* HELLO: key, region length; DONE: data ok, bytes received */
    int32_t cpu, ncpu; /* HELLO: pinning result (cpu or -errno), CPUs allowed */
    char text[96];
};

#define CTL_SLOTS  8
#define INBOX      16
#define POLL_BATCH 16
#define STALL_S    15 /* no op takes seconds; a longer wait is a hang */

static struct {
    int rank;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep, *ctl;
    int ep_idx, ctl_idx;
    struct uln_info info;
    void *tgt, *loc; /* PUT/GET: remote target region, local source/destination */
    size_t buf_len;
    struct uln_mr *mr;
    uint64_t peer_key;
    void *napbuf;
    bool yield; /* both ranks may share a CPU: spinning must let the other run */
    bool dying, peer_aborted;
    char where[96];
    struct ctl_msg slot[CTL_SLOTS];
    bool slot_busy[CTL_SLOTS];
    struct ctl_msg inbox[INBOX];
    unsigned in_head, in_tail;
} g = {.rank = -1};

static void ctl_send_raw(const struct ctl_msg *m, bool best_effort);

static void progress_clear(void);

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    progress_clear();
    fprintf(stderr, "ulnperf: rank %d: %s%s%s\n", g.rank, g.where[0] ? g.where : "",
            g.where[0] ? ": " : "", msg);
    fflush(stdout);
    /* Tell the peer, so it fails at once with the reason instead of stalling. */
    if (!g.dying && !g.peer_aborted && g.ctl) {
        g.dying = true;
        struct ctl_msg m = {.magic = CTL_MAGIC, .type = CTL_ABORT};
        snprintf(m.text, sizeof m.text, "%.*s", (int)sizeof m.text - 1, msg);
        ctl_send_raw(&m, true);
    }
    exit(1);
}

static const char *op_str(unsigned op)
{
    static const char *const n[] = {"?", "NAP", "NAP_RECV", "PUT", "PUT_REMOTE", "GET", "FLUSH"};
    return op < sizeof n / sizeof n[0] ? n[op] : "?";
}

/* Spinning: yields when the ranks share a CPU, and turns a hang into an error
 * that says what was awaited (unless `what` is NULL: no limit). The clock is
 * read every 1024 spins only. */
struct stall {
    uint64_t start;
    uint32_t spins;
    const char *what;
};

static inline void stall_tick(struct stall *s)
{
    if (g.yield) sched_yield();
    if (++s->spins & 1023 || !s->what) return;
    uint64_t now = mono_ns();
    if (!s->start)
        s->start = now;
    else if (now - s->start > (uint64_t)STALL_S * 1000000000u)
        die("no progress for %d s waiting for %s", STALL_S, s->what);
}

/* Something moved: the next wait starts afresh. */
static inline void stall_reset(struct stall *s)
{
    s->spins = 0;
    s->start = 0;
}

/* ------------------------------------------------------------------------- */
/* Completion handling and control messages                                   */
/* ------------------------------------------------------------------------- */

static void check_status(const struct uln_cqe *e)
{
    if (e->status)
        die("%s completion failed: %s (status %d, ep %u, peer %d)", op_str(e->op),
            uln_strerror(e->status), e->status, e->ep, e->peer);
}

static void release(const struct uln_cqe *e)
{
    if (e->flags & ULN_CQE_MUST_RELEASE) {
        int rc = uln_cqe_release(g.cq, e);
        if (rc) die("uln_cqe_release: %s", uln_strerror(rc));
    }
}

/* Anything a hot loop does not expect: control traffic or a failure. */
static void handle_other(const struct uln_cqe *e)
{
    check_status(e);
    if (e->ep == g.ctl_idx && e->op == ULN_OP_NAP_RECV) {
        struct ctl_msg m;
        if (e->len != sizeof m) {
            release(e);
            die("control message of %" PRIu64 " bytes, expected %zu", e->len, sizeof m);
        }
        memcpy(&m, e->data, sizeof m);
        release(e);
        if (m.magic != CTL_MAGIC) die("control message with bad magic %#x", m.magic);
        if (m.type == CTL_ABORT) {
            g.peer_aborted = true;
            die("peer failed: %.*s", (int)sizeof m.text, m.text);
        }
        if (g.in_tail - g.in_head >= INBOX) die("control inbox overflow");
        g.inbox[g.in_tail++ % INBOX] = m;
        return;
    }
    if (e->ep == g.ctl_idx && e->op == ULN_OP_NAP) {
        if (e->user_data >= CTL_SLOTS)
            die("control send completion with bad user_data %" PRIu64, e->user_data);
        g.slot_busy[e->user_data] = false;
        return;
    }
    if (e->op == ULN_OP_NAP_RECV) release(e);
    die("unexpected completion: op %s ep %u peer %d len %" PRIu64, op_str(e->op), e->ep, e->peer,
        e->len);
}

static int pump(void)
{
    struct uln_cqe ev[POLL_BATCH];
    int n = uln_cq_poll(g.cq, ev, POLL_BATCH);
    if (n < 0) die("uln_cq_poll: %s", uln_strerror(n));
    for (int i = 0; i < n; i++)
        handle_other(&ev[i]);
    return n;
}

/* Control messages go as ordinary (copied) NAPs from a small pool of buffers
 * that a send completion frees: nothing assumes inline_max is large enough. */
static void ctl_send_raw(const struct ctl_msg *m, bool best_effort)
{
    struct stall st = {.what = "a free control buffer"};
    int s;
    for (;;) {
        for (s = 0; s < CTL_SLOTS && g.slot_busy[s]; s++)
            ;
        if (s < CTL_SLOTS) break;
        if (best_effort) return;
        pump();
        stall_tick(&st);
    }
    g.slot[s] = *m;
    g.slot_busy[s] = true;
    st.what = "room to post a control message";
    for (uint64_t tries = 0;; tries++) {
        int rc = uln_nap(g.ctl, 1 - g.rank, &g.slot[s], sizeof *m, (uint64_t)s, 0);
        if (rc == 0) break;
        if (rc != -EAGAIN || (best_effort && tries > 1000)) {
            if (best_effort) return;
            die("uln_nap (control): %s", uln_strerror(rc));
        }
        if (best_effort) {
            struct uln_cqe ev[POLL_BATCH];
            uln_cq_poll(g.cq, ev, POLL_BATCH);
        } else {
            pump();
            stall_tick(&st);
        }
    }
    if (best_effort) { /* dying: give the message ~100 ms to leave, then go */
        uint64_t t0 = mono_ns();
        struct uln_cqe ev[POLL_BATCH];
        while (g.slot_busy[s] && mono_ns() - t0 < 100000000u) {
            int n = uln_cq_poll(g.cq, ev, POLL_BATCH);
            for (int i = 0; i < n; i++)
                if (ev[i].ep == g.ctl_idx && ev[i].op == ULN_OP_NAP &&
                    ev[i].user_data == (uint64_t)s)
                    g.slot_busy[s] = false;
                else if (ev[i].op == ULN_OP_NAP_RECV)
                    uln_cqe_release(g.cq, &ev[i]);
        }
    }
}

static void ctl_send(uint32_t type, struct ctl_msg *m)
{
    m->magic = CTL_MAGIC;
    m->type = type;
    ctl_send_raw(m, false);
}

static bool ctl_pending(void)
{
    return g.in_head != g.in_tail;
}

static struct ctl_msg ctl_recv(uint32_t type)
{
    static const char *const names[] = {"?",   "HELLO", "CMD",  "READY",
                                        "FIN", "DONE",  "QUIT", "ABORT"};
    char what[64];
    snprintf(what, sizeof what, "control message %s from the peer",
             type < sizeof names / sizeof names[0] ? names[type] : "?");
    /* Rank 1 waits for rank 0 as long as a phase lasts (FIN) or a point is
     * reported (CMD); rank 0 has its own limits, ulnrun --timeout the rest. */
    struct stall st = {.what = g.rank == 0 ? what : NULL};
    while (!ctl_pending()) {
        if (!pump()) stall_tick(&st);
    }
    struct ctl_msg m = g.inbox[g.in_head++ % INBOX];
    if (type && m.type != type)
        die("control message %u from the peer, expected %u (%s)", m.type, type,
            type < sizeof names / sizeof names[0] ? names[type] : "?");
    return m;
}

static void ctl_drain(void)
{
    struct stall st = {.what = "control send completions"};
    for (;;) {
        bool busy = false;
        for (int s = 0; s < CTL_SLOTS; s++)
            busy |= g.slot_busy[s];
        if (!busy) return;
        if (!pump()) stall_tick(&st);
    }
}

/* ------------------------------------------------------------------------- */
/* Buffers: iteration counters and data marks                                 */
/* ------------------------------------------------------------------------- */

/* PUT latency: the last min(size, 8) bytes carry the iteration number, so the
 * receiver learns the PUT landed by watching its own memory (like put_lat in
 * ucx_perftest). Byte by byte, so any size and alignment work; a narrow field
 * wraps, which is fine because consecutive values always differ. */
static inline unsigned ctr_width(size_t size)
{
    return size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
}

static inline uint64_t ctr_mask(unsigned w)
{
    return w >= 8 ? ~0ull : (1ull << (8 * w)) - 1;
}

static inline void ctr_write(uint8_t *p, unsigned w, uint64_t v)
{
    for (unsigned i = 0; i < w; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t ctr_read(const volatile uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < w; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Bandwidth data check: the first and last 8 bytes of a message carry bytes
 * derived from a per-phase pattern. Checking 16 bytes per point costs nothing
 * and still catches wrong offsets, stale data and truncation. */
static inline uint8_t mark_byte(uint64_t pat, size_t j)
{
    return (uint8_t)((pat >> (8 * (j & 7))) ^ (j * 0x9d));
}

static void marks_set(uint8_t *b, size_t size, uint64_t pat, bool inverted)
{
    size_t k = size < 8 ? size : 8;
    for (size_t j = 0; j < k; j++) {
        b[j] = (uint8_t)(mark_byte(pat, j) ^ (inverted ? 0xff : 0));
        size_t t = size - k + j;
        b[t] = (uint8_t)(mark_byte(pat, t) ^ (inverted ? 0xff : 0));
    }
}

/* Returns the offset of the first wrong byte, or -1. */
static long marks_check(const uint8_t *b, size_t size, uint64_t pat)
{
    size_t k = size < 8 ? size : 8;
    for (size_t j = 0; j < k; j++) {
        if (b[j] != mark_byte(pat, j)) return (long)j;
        size_t t = size - k + j;
        if (b[t] != mark_byte(pat, t)) return (long)t;
    }
    return -1;
}

static uint64_t next_pattern(void)
{
    static uint64_t x = 0x1234567;
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------- */
/* Posting                                                                    */
/* ------------------------------------------------------------------------- */

static inline int post(int op, size_t size, uint64_t ud, unsigned flags)
{
    int peer = 1 - g.rank;
    switch (op) {
    case OP_NAP:
        return uln_nap(g.ep, peer, g.napbuf, size, ud, flags);
    case OP_NAP_INLINE:
        return uln_nap(g.ep, peer, g.napbuf, size, ud, flags | ULN_INLINE);
    case OP_PUT:
        return uln_put(g.ep, peer, g.loc, size, g.peer_key, 0, ud, flags);
    default:
        return uln_get(g.ep, peer, g.loc, size, g.peer_key, 0, ud, flags);
    }
}

/* Post, polling while a queue is full. Only for loops where nothing but errors
 * and control traffic can complete in the meantime. */
static void post_retry(int op, size_t size, uint64_t ud, unsigned flags)
{
    struct stall st = {.what = "room in the send queue"};
    for (;;) {
        int rc = post(op, size, ud, flags);
        if (rc == 0) return;
        if (rc != -EAGAIN) die("posting %s of %zu B: %s", op_names[op], size, uln_strerror(rc));
        if (!pump()) stall_tick(&st);
    }
}

static const uint16_t done_op[NOPS] = {ULN_OP_NAP, ULN_OP_NAP, ULN_OP_PUT, ULN_OP_GET};

/* ------------------------------------------------------------------------- */
/* The measured loops                                                         */
/* ------------------------------------------------------------------------- */

/* A phase ends when rank 0 says so (FIN): when its time budget is spent, or
 * after a fixed count with --iters. So rank 1 needs no count it could disagree
 * on, and a point takes its budget however fast the operation is and however
 * noisy the machine (an estimate from a warm-up is easily fooled by one
 * preemption). */
struct phase {
    int op, test;
    size_t size;
    uint64_t min_iters, max_iters; /* rank 0: at least / at most this many */
    uint64_t budget;               /* rank 0: ticks after which to stop; 0: count only */
    unsigned window;
    uint64_t pattern;
};

static inline bool is_nap(int op)
{
    return op == OP_NAP || op == OP_NAP_INLINE;
}

/* Rank 0: start iteration i (0-based) at time now? */
static inline bool go_on(const struct phase *p, uint64_t i, uint64_t t0, uint64_t now)
{
    if (i >= p->max_iters) return false;
    if (i < p->min_iters || !p->budget) return true;
    return now - t0 < p->budget;
}

/* Wait for the next data NAP (returned unreleased). On rank 1 it returns false
 * instead when rank 0 ended the phase: control messages land in the inbox as
 * the CQ is polled, so noticing costs one comparison. */
static inline bool wait_nap(struct uln_cqe *out, size_t size)
{
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "the next NAP"};
    for (;;) {
        int n = uln_cq_poll(g.cq, ev, POLL_BATCH);
        if (n < 0) die("uln_cq_poll: %s", uln_strerror(n));
        int got = -1;
        for (int i = 0; i < n; i++) {
            if (ev[i].ep == g.ep_idx && ev[i].op == ULN_OP_NAP_RECV && !ev[i].status && got < 0)
                got = i;
            else
                handle_other(&ev[i]);
        }
        if (got >= 0) {
            *out = ev[got];
            if (out->len != size) {
                release(out);
                die("received a NAP of %" PRIu64 " B, expected %zu", out->len, size);
            }
            return true;
        }
        if (g.rank == 1 && ctl_pending()) return false;
        stall_tick(&st);
    }
}

/* Ping-pong over NAPs. Sends are ULN_SILENT: the payload never changes during a
 * phase, so nothing waits for a send completion and none has to be polled. */
static uint64_t nap_lat(const struct phase *p, uint64_t *samples)
{
    struct uln_cqe e;
    uint64_t i = 0;
    if (g.rank == 0) {
        uint64_t t0 = ticks(), t = t0;
        while (go_on(p, i, t0, t)) {
            post_retry(p->op, p->size, i, ULN_SILENT);
            wait_nap(&e, p->size);
            release(&e);
            uint64_t t1 = ticks();
            samples[i++] = t1 - t;
            t = t1;
        }
    } else {
        while (wait_nap(&e, p->size)) {
            post_retry(p->op, p->size, i++, ULN_SILENT); /* answer first, then free the slot */
            release(&e);
        }
    }
    return i;
}

/* Ping-pong over PUTs into each other's region; each side spins on the counter
 * in its own memory. Polling in the spin both drives our own PUT (the engine
 * moves data inside uln_cq_poll) and reports a failed ULN_SILENT PUT. */
static uint64_t put_lat(const struct phase *p, uint64_t *samples)
{
    size_t size = p->size;
    unsigned w = ctr_width(size);
    uint64_t mask = ctr_mask(w);
    const volatile uint8_t *mine = (const volatile uint8_t *)g.tgt + size - w;
    uint8_t *src = (uint8_t *)g.loc + size - w;
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "the peer's PUT"};
    uint64_t t0 = ticks(), t = t0, i;
    for (i = 1;; i++) {
        if (g.rank == 0) {
            if (!go_on(p, i - 1, t0, t)) break;
            ctr_write(src, w, i);
            post_retry(OP_PUT, size, i, ULN_SILENT);
        }
        while (ctr_read(mine, w) != (i & mask)) {
            int k = uln_cq_poll(g.cq, ev, POLL_BATCH);
            if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
            for (int j = 0; j < k; j++)
                handle_other(&ev[j]);
            /* Rank 0 ends only after our last answer landed: no PUT is lost. */
            if (g.rank == 1 && ctl_pending()) return i - 1;
            stall_tick(&st);
        }
        stall_reset(&st);
        if (g.rank == 0) {
            uint64_t t1 = ticks();
            samples[i - 1] = t1 - t;
            t = t1;
        } else {
            ctr_write(src, w, i);
            post_retry(OP_PUT, size, i, ULN_SILENT);
        }
    }
    return i - 1;
}

static uint64_t get_lat(const struct phase *p, uint64_t *samples)
{
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "a GET completion"};
    uint64_t t0 = ticks(), t = t0, i = 0;
    while (go_on(p, i, t0, t)) {
        post_retry(OP_GET, p->size, i, 0);
        for (bool done = false; !done;) {
            int k = uln_cq_poll(g.cq, ev, POLL_BATCH);
            if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
            for (int j = 0; j < k; j++) {
                if (ev[j].ep == g.ep_idx && ev[j].op == ULN_OP_GET && !ev[j].status &&
                    ev[j].user_data == i) {
                    if (ev[j].len != p->size)
                        die("GET completion says %" PRIu64 " B, expected %zu", ev[j].len, p->size);
                    done = true;
                } else {
                    handle_other(&ev[j]);
                }
            }
            if (!done) stall_tick(&st);
        }
        stall_reset(&st);
        uint64_t t1 = ticks();
        samples[i++] = t1 - t;
        t = t1;
    }
    return i;
}

/* Rank 0's side of bw: keep `window` operations outstanding, reposting as they
 * complete, until the budget is spent; then let the window drain. *elapsed is
 * first post to last completion; for NAP, to rank 1's DONE, which confirms
 * that everything arrived (a NAP completion only says it left our buffer).
 * For NAP the FIN (with the count) goes as soon as posting stops, so rank 1
 * knows how many to expect while the last ones are still in flight. */
static uint64_t bw_sender(const struct phase *p, uint64_t *elapsed, struct ctl_msg *done)
{
    struct uln_cqe ev[POLL_BATCH];
    struct stall st = {.what = "bw completions"};
    uint64_t posted = 0, completed = 0;
    uint16_t want = done_op[p->op];
    bool more = true;
    uint64_t t0 = ticks();
    while (more || completed < posted) {
        /* The clock once per poll, not per post: it would cost as much as a
         * small post. */
        if (more && !go_on(p, posted, t0, ticks())) {
            more = false;
            if (is_nap(p->op)) {
                struct ctl_msg f = {.iters = posted};
                ctl_send(CTL_FIN, &f);
            }
        }
        while (more && posted - completed < p->window && posted < p->max_iters) {
            int rc = post(p->op, p->size, posted, 0);
            if (rc == -EAGAIN) break; /* a queue is full: poll below, then post again */
            if (rc) die("posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
            posted++;
        }
        int k = uln_cq_poll(g.cq, ev, POLL_BATCH);
        if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == g.ep_idx && ev[j].op == want && !ev[j].status) {
                if (ev[j].len != p->size)
                    die("%s completion says %" PRIu64 " B, expected %zu", op_str(want), ev[j].len,
                        p->size);
                completed++;
            } else {
                handle_other(&ev[j]);
            }
        }
        if (k)
            stall_reset(&st);
        else
            stall_tick(&st);
    }
    if (is_nap(p->op)) *done = ctl_recv(CTL_DONE);
    *elapsed = ticks() - t0;
    return posted;
}

/* Rank 1's side of NAP bw: take and release every message until the count in
 * rank 0's FIN has arrived. The marks are checked on the first, every 256th and
 * the last message: cheap, and still catches misplaced or stale data. */
static void nap_bw_receiver(const struct phase *p, struct ctl_msg *done)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "bw NAPs"};
    uint64_t got = 0, bytes = 0, n = UINT64_MAX;
    long bad = -1;
    while (got < n) {
        int k = uln_cq_poll(g.cq, ev, 64);
        if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == g.ep_idx && ev[j].op == ULN_OP_NAP_RECV && !ev[j].status) {
                if (ev[j].len != p->size) {
                    release(&ev[j]);
                    die("received a NAP of %" PRIu64 " B, expected %zu", ev[j].len, p->size);
                }
                got++;
                if ((got == 1 || !(got & 255) || got == n) && bad < 0 &&
                    (bad = marks_check(ev[j].data, p->size, p->pattern)) >= 0)
                    snprintf(done->text, sizeof done->text, "NAP %" PRIu64 ": wrong byte at %ld",
                             got, bad);
                bytes += ev[j].len;
                release(&ev[j]);
            } else {
                handle_other(&ev[j]);
            }
        }
        if (n == UINT64_MAX && ctl_pending()) {
            const struct ctl_msg *f = &g.inbox[g.in_head % INBOX];
            if (f->type != CTL_FIN) die("control message %u during nap bw", f->type);
            n = f->iters; /* left in the inbox: serve() takes it */
        }
        if (k)
            stall_reset(&st);
        else
            stall_tick(&st);
    }
    if (got != n) die("received %" PRIu64 " NAPs, rank 0 sent %" PRIu64, got, n);
    done->a = bad < 0;
    done->b = bytes;
    done->iters = got;
}

/* ------------------------------------------------------------------------- */
/* Phases                                                                     */
/* ------------------------------------------------------------------------- */

/* What both ranks do between READY and FIN. Rank 0 returns the number of
 * iterations; for bw, *elapsed (and for NAP bw the DONE it already took). */
static uint64_t run_role(const struct phase *p, uint64_t *samples, uint64_t *elapsed,
                         struct ctl_msg *done)
{
    if (p->test == T_LAT) {
        if (is_nap(p->op)) return nap_lat(p, samples);
        if (p->op == OP_PUT) return put_lat(p, samples);
        return g.rank == 0 ? get_lat(p, samples) : 0;
    }
    if (g.rank == 0) return bw_sender(p, elapsed, done);
    if (is_nap(p->op)) nap_bw_receiver(p, done);
    return 0;
}

/* Rank 0: one phase end to end; returns the number of iterations. */
static uint64_t phase0(const struct phase *p, uint64_t *samples, uint64_t *elapsed)
{
    /* Set up our side before telling the peer: once it is READY, data flows. */
    if (p->test == T_LAT && p->op == OP_PUT)
        ctr_write((uint8_t *)g.tgt + p->size - ctr_width(p->size), ctr_width(p->size), 0);
    if (p->test == T_BW) {
        if (is_nap(p->op))
            marks_set(g.napbuf, p->size, p->pattern, false);
        else if (p->op == OP_PUT)
            marks_set(g.loc, p->size, p->pattern, false);
        else
            marks_set(g.loc, p->size, p->pattern, true); /* a GET must overwrite them */
    }
    struct ctl_msg m = {.op = (uint32_t)p->op,
                        .test = (uint32_t)p->test,
                        .size = p->size,
                        .window = p->window,
                        .pattern = p->pattern};
    ctl_send(CTL_CMD, &m);
    ctl_recv(CTL_READY);
    struct ctl_msg done = {0};
    uint64_t n = run_role(p, samples, elapsed, &done);
    if (!(p->test == T_BW && is_nap(p->op))) {
        struct ctl_msg f = {.iters = n};
        ctl_send(CTL_FIN, &f);
        done = ctl_recv(CTL_DONE);
    }
    if (!done.a) die("data check failed at rank 1: %.*s", (int)sizeof done.text, done.text);
    if (p->test == T_BW && is_nap(p->op) && (done.iters != n || done.b != n * p->size))
        die("rank 1 confirms %" PRIu64 " NAPs and %" PRIu64 " B; sent %" PRIu64 " and %" PRIu64,
            done.iters, done.b, n, n * p->size);
    if (p->test == T_BW && p->op == OP_GET) {
        long bad = marks_check(g.loc, p->size, p->pattern);
        if (bad >= 0) die("data check failed: GET destination wrong at offset %ld", bad);
    }
    return n;
}

/* Rank 1: serve phases until QUIT. */
static void serve(void)
{
    for (;;) {
        struct ctl_msg m = ctl_recv(0);
        if (m.type == CTL_QUIT) return;
        if (m.type != CTL_CMD) die("control message %u from rank 0, expected CMD or QUIT", m.type);
        struct phase p = {.op = (int)m.op,
                          .test = (int)m.test,
                          .size = m.size,
                          .window = (unsigned)m.window,
                          .pattern = m.pattern};
        if (m.op >= NOPS || m.test >= NTESTS || !p.size || (!is_nap(p.op) && p.size > g.buf_len) ||
            (is_nap(p.op) && p.size > g.info.nap_max))
            die("bad phase from rank 0: op %u test %u size %" PRIu64, m.op, m.test, m.size);
        snprintf(g.where, sizeof g.where, "%s %s %zu B", op_names[p.op], test_names[p.test],
                 p.size);
        if (p.test == T_LAT && p.op == OP_PUT)
            ctr_write((uint8_t *)g.tgt + p.size - ctr_width(p.size), ctr_width(p.size), 0);
        if (p.test == T_BW && p.op == OP_PUT)
            marks_set(g.tgt, p.size, p.pattern, true); /* the PUTs must overwrite them */
        if (p.test == T_BW && p.op == OP_GET) marks_set(g.tgt, p.size, p.pattern, false);
        struct ctl_msg r = {.a = 1};
        ctl_send(CTL_READY, &r);
        run_role(&p, NULL, NULL, &r);
        ctl_recv(CTL_FIN);
        if (p.test == T_BW && p.op == OP_PUT) {
            long bad = marks_check(g.tgt, p.size, p.pattern);
            if (bad >= 0) {
                r.a = 0;
                snprintf(r.text, sizeof r.text, "PUT target wrong at offset %ld", bad);
            }
        }
        ctl_send(CTL_DONE, &r);
        g.where[0] = 0;
    }
}

/* ------------------------------------------------------------------------- */
/* Output                                                                     */
/* ------------------------------------------------------------------------- */

static FILE *csv;
static FILE *hdr; /* where '#' lines go: stdout with the table, stderr with CSV */
static bool progress_tty, progress_shown;

static void progress_clear(void)
{
    if (progress_shown) {
        fputs("\r\033[K", stderr);
        progress_shown = false;
    }
}

static void progress(int done, int total, int op, int test, size_t size, bool first, size_t last)
{
    if (progress_tty) {
        fprintf(stderr, "\r\033[K[%3d/%d] %s %s %zu B", done + 1, total, op_names[op],
                test_names[test], size);
        progress_shown = true;
    } else if (first) {
        /* Not a terminal (a log): one line per op/test rather than per point. */
        fprintf(stderr, "ulnperf: [%3d/%d] %s %s %zu..%zu B\n", done + 1, total, op_names[op],
                test_names[test], size, last);
    }
    fflush(stderr);
}

static const char *size_str(size_t s, char *buf, size_t n)
{
    if (s >= (1u << 20) && !(s & ((1u << 20) - 1)))
        snprintf(buf, n, "%zuM", s >> 20);
    else if (s >= 1024 && !(s & 1023))
        snprintf(buf, n, "%zuK", s >> 10);
    else
        snprintf(buf, n, "%zu", s);
    return buf;
}

static void csv_row(int op, const char *test, size_t size, double value, const char *unit)
{
    if (csv) {
        fprintf(csv, "%s,%s,%s,%zu,%.6g,%s\n", g.info.transport, op_names[op], test, size, value,
                unit);
        fflush(csv);
    }
}

static void table_row(int op, int test, size_t size, double med, double p99, double gbs,
                      double mmsg, uint64_t iters)
{
    if (opt.csv_stdout) return;
    char sz[32], a[16] = "", b[16] = "", c[16] = "", d[16] = "";
    if (test == T_LAT) {
        snprintf(a, sizeof a, "%.3f", med);
        snprintf(b, sizeof b, "%.3f", p99);
    } else {
        snprintf(c, sizeof c, "%.3f", gbs);
        if (size <= RATE_MAX_SIZE) snprintf(d, sizeof d, "%.3f", mmsg);
    }
    progress_clear();
    printf("%-10s %-7s %6s %12s %12s %10s %10s %10" PRIu64 "\n", op_names[op],
           test == T_LAT ? (op == OP_GET ? "lat(rt)" : "lat") : "bw", size_str(size, sz, sizeof sz),
           a, b, c, d, iters);
    fflush(stdout);
}

/* Moves the k-th smallest of a[0..n) to a[k], with only smaller-or-equal
 * values before it (quickselect). O(n): sorting a million samples per point
 * would add a visible pause to every small-message point. */
static uint64_t select_k(uint64_t *a, long n, long k)
{
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        uint64_t pv = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pv)
                i++;
            while (a[j] > pv)
                j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        /* Now a[lo..j] <= pv, a[i..hi] >= pv and anything between equals pv. */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return a[k];
}

/* ------------------------------------------------------------------------- */
/* Driving the points (rank 0)                                                */
/* ------------------------------------------------------------------------- */

#define LAT_MAX_ITERS 2000000u /* 16 MB of samples: ~0.1 s at the fastest op */
#define BW_MAX_ITERS  1000000000u

static uint64_t *samples;

static void measure(int op, int test, size_t size)
{
    double ms = opt.point_ms ? opt.point_ms : opt.quick ? 2.0 : 100.0;
    struct phase p = {.op = op, .test = test, .size = size, .window = opt.window};
    snprintf(g.where, sizeof g.where, "%s %s %zu B", op_names[op], test_names[test], size);
    uint64_t lo = test == T_LAT ? 10 : opt.window;
    uint64_t hi = test == T_LAT ? LAT_MAX_ITERS : BW_MAX_ITERS;
    uint64_t elapsed = 0;

    /* Warm-up: faults in the peer's mapping of our pages, warms caches and
     * the translation cache; its results are thrown away. */
    if (opt.iters) {
        p.min_iters = p.max_iters = opt.iters / 10 > 1000 ? 1000
                                    : opt.iters / 10      ? opt.iters / 10
                                                          : 1;
    } else {
        p.min_iters = test == T_LAT ? 2 : opt.window;
        p.max_iters = hi;
        p.budget = (uint64_t)(ms * (opt.quick ? 0.25 : 0.15) * 1e6 * ticks_per_ns);
    }
    p.pattern = next_pattern();
    phase0(&p, samples, &elapsed);

    if (opt.iters) {
        p.min_iters = p.max_iters = opt.iters;
    } else {
        p.min_iters = lo;
        p.budget = (uint64_t)(ms * 1e6 * ticks_per_ns);
    }
    p.pattern = next_pattern();
    uint64_t n = phase0(&p, samples, &elapsed);

    if (test == T_LAT) {
        long i99 = (long)ceil(0.99 * (double)n) - 1;
        if (i99 < 0) i99 = 0;
        /* p99 first: it leaves the i99+1 smallest in front, median among them. */
        uint64_t t99 = select_k(samples, (long)n, i99);
        uint64_t t50 = select_k(samples, i99 + 1, (long)n / 2);
        /* One-way time for ping-pongs; a GET is already a round trip. */
        double div = op == OP_GET ? 1000.0 : 2000.0;
        double med = ticks_to_ns((double)t50) / div;
        double p99 = ticks_to_ns((double)t99) / div;
        table_row(op, test, size, med, p99, 0, 0, n);
        csv_row(op, "lat", size, med, "us");
        csv_row(op, "lat_p99", size, p99, "us");
    } else {
        double ns = ticks_to_ns((double)elapsed);
        double gbs = (double)n * (double)size / ns; /* bytes per ns = GB/s */
        double mmsg = (double)n / ns * 1e3;
        table_row(op, test, size, 0, 0, gbs, mmsg, n);
        csv_row(op, "bw", size, gbs, "GB/s");
        if (size <= RATE_MAX_SIZE) csv_row(op, "rate", size, mmsg, "Mmsg/s");
    }
    g.where[0] = 0;
}

static bool size_ok(int op, size_t s)
{
    if (op == OP_NAP) return s <= g.info.nap_max;
    if (op == OP_NAP_INLINE) return s <= g.info.inline_max && s <= g.info.nap_max;
    return true;
}

static void drive(void)
{
    int total = 0, done = 0;
    for (int op = 0; op < NOPS; op++)
        for (int t = 0; t < NTESTS; t++)
            for (int i = 0; i < opt.nsizes; i++)
                total += (opt.ops >> op & 1) && (opt.tests >> t & 1) && size_ok(op, opt.sizes[i]);
    for (int op = 0; op < NOPS; op++) {
        if (!(opt.ops >> op & 1)) continue;
        size_t last = 0;
        for (int i = 0; i < opt.nsizes; i++)
            if (size_ok(op, opt.sizes[i])) last = opt.sizes[i];
        if (!last) {
            fprintf(hdr, "# %s: skipped, no size fits (nap_max %u, inline_max %u)\n", op_names[op],
                    g.info.nap_max, g.info.inline_max);
            continue;
        }
        for (int t = 0; t < NTESTS; t++) {
            if (!(opt.tests >> t & 1)) continue;
            bool first = true;
            for (int i = 0; i < opt.nsizes; i++) {
                size_t s = opt.sizes[i];
                if (!size_ok(op, s)) continue;
                progress(done, total, op, t, s, first, last);
                first = false;
                measure(op, t, s);
                done++;
            }
        }
    }
    progress_clear();
}

/* ------------------------------------------------------------------------- */
/* Set-up                                                                     */
/* ------------------------------------------------------------------------- */

/* Rank r pins itself to the r-th CPU it may run on, so the two busy-polling
 * ranks never share a CPU. Returns the CPU, or -errno / -EXDEV (too few). */
static int pin_self(int rank, int *ncpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set)) return -errno;
    *ncpu = CPU_COUNT(&set);
    if (*ncpu < 2 || rank >= *ncpu) return -EXDEV;
    int cpu = -1;
    for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && k++ == rank) {
            cpu = c;
            break;
        }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one)) return -errno;
    return cpu;
}

/* The floor under any shared-memory latency here: one cache line bouncing
 * between two CPUs. It moves with where the host places our virtual CPUs
 * (on this kind of machine, one core complex or two), so every report says
 * what it was when the report was made. */
struct floor_arg {
    _Alignas(64) _Atomic uint64_t line;
    int cpu;
    uint64_t rounds;
};

static void *floor_peer(void *p)
{
    struct floor_arg *a = p;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(a->cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    for (uint64_t i = 0; i < a->rounds; i++) {
        while (atomic_load_explicit(&a->line, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&a->line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

/* One-way time in us for a cache line between our CPU and cpu, or -1. */
static double line_floor_us(int cpu)
{
    static struct floor_arg a;
    a.cpu = cpu;
    a.rounds = opt.quick ? 20000 : 200000;
    atomic_store(&a.line, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, floor_peer, &a)) return -1;
    /* Let the thread reach its CPU before timing. */
    for (int w = 0; w < 1000; w++)
        sched_yield();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 0; i < a.rounds; i++) {
        atomic_store_explicit(&a.line, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&a.line, memory_order_acquire) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    return ns / (2.0 * (double)a.rounds) / 1000.0;
}

static void describe_pin(char *buf, size_t n, int rank, int cpu, int ncpu)
{
    if (cpu >= 0)
        snprintf(buf, n, "rank %d -> cpu %d", rank, cpu);
    else if (cpu == -EXDEV)
        snprintf(buf, n, "rank %d not pinned (%d CPU%s allowed)", rank, ncpu, ncpu == 1 ? "" : "s");
    else
        snprintf(buf, n, "rank %d not pinned (sched_setaffinity: %s)", rank, strerror(-cpu));
}

static void *buf_alloc(size_t len)
{
    void *p = NULL;
    if (opt.malloc_mem) {
        p = aligned_alloc(4096, len);
        if (!p) die("aligned_alloc(%zu): out of memory", len);
    } else {
        int rc = uln_mem_alloc(g.ctx, len, &p);
        if (rc) die("uln_mem_alloc(%zu): %s", len, uln_strerror(rc));
    }
    /* Fault the pages in now rather than inside the first measured phase. */
    memset(p, 0, len);
    return p;
}

static void buf_free(void *p)
{
    if (!p) return;
    if (opt.malloc_mem)
        free(p);
    else
        uln_mem_free(g.ctx, p);
}

int main(int argc, char **argv)
{
    const char *re = getenv("ULN_RANK");
    int env_rank = re ? atoi(re) : 0;
    char who[32] = "";
    if (re) snprintf(who, sizeof who, "rank %d: ", env_rank);
    int pr = parse_args(argc, argv, who);
    if (pr > 0 && env_rank == 0) usage(stdout); /* once per job, not per rank */
    if (pr) return pr > 0 ? 0 : 2;
    if (!re) {
        fprintf(stderr, "ulnperf: ULN_RANK is not set; start it with: ulnrun -n 2 ulnperf\n");
        return 2;
    }
    g.rank = env_rank;

    /* Pin before uln_open so anything the library starts inherits the CPU. */
    int ncpu = 0, peer_cpu = -1;
    {
        /* Rank 1 will pin itself to the second CPU we may use (pin_self). */
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &set) && k++ == 1) {
                    peer_cpu = c;
                    break;
                }
    }
    int cpu = pin_self(g.rank, &ncpu);
    g.yield = ncpu < 2;

    int rc = uln_open(NULL, &g.ctx);
    if (rc) {
        fprintf(stderr, "ulnperf: rank %d: uln_open: %s\n", g.rank, uln_strerror(rc));
        return 1;
    }
    if (uln_rank(g.ctx) != g.rank) die("uln_rank %d but ULN_RANK=%d", uln_rank(g.ctx), g.rank);
    if (uln_size(g.ctx) != 2)
        die("needs exactly 2 ranks (ulnrun -n 2), job has %d", uln_size(g.ctx));
    if ((rc = uln_query(g.ctx, &g.info))) die("uln_query: %s", uln_strerror(rc));
    if (g.info.nap_max < sizeof(struct ctl_msg))
        die("nap_max %u is below the %zu B control messages", g.info.nap_max,
            sizeof(struct ctl_msg));
    timer_init(opt.quick ? 5 : 20);

    /* Room for a full window, a full receive ring of small NAPs and control;
     * the engine holds work back rather than overrun the CQ anyway. */
    for (unsigned entries = 4096;; entries /= 2) {
        rc = uln_cq_open(g.ctx, entries, &g.cq);
        if (!rc) break;
        if (rc != -EINVAL || entries <= 64) die("uln_cq_open(%u): %s", entries, uln_strerror(rc));
    }
    if ((rc = uln_ep_open(g.ctx, g.cq, g.cq, &g.ep)) ||
        (rc = uln_ep_open(g.ctx, g.cq, g.cq, &g.ctl)))
        die("uln_ep_open: %s", uln_strerror(rc));
    g.ep_idx = uln_ep_index(g.ep);
    g.ctl_idx = uln_ep_index(g.ctl);

    size_t maxs = 0;
    for (int i = 0; i < opt.nsizes; i++)
        if (opt.sizes[i] > maxs) maxs = opt.sizes[i];
    g.buf_len = (opt.ops & (1u << OP_PUT | 1u << OP_GET)) ? maxs : 4096;
    g.buf_len = (g.buf_len + 4095) & ~(size_t)4095;
    g.tgt = buf_alloc(g.buf_len);
    g.loc = buf_alloc(g.buf_len);
    if ((rc = uln_mr_reg(g.ctx, g.tgt, g.buf_len, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                         &g.mr)))
        die("uln_mr_reg(%zu B): %s", g.buf_len, uln_strerror(rc));
    g.napbuf = aligned_alloc(64, ((size_t)g.info.nap_max + 64) & ~(size_t)63);
    if (!g.napbuf) die("out of memory");
    memset(g.napbuf, 0x5a, g.info.nap_max);

    /* Both ranks have opened their endpoints before anyone sends. */
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));
    /* Rank 1 sleeps in a second barrier (a futex: off its CPU) while rank 0
     * measures the cache-line floor between the two pinned CPUs. */
    double floor_us = -1;
    if (g.rank == 0 && cpu >= 0 && peer_cpu >= 0 && peer_cpu != cpu)
        floor_us = line_floor_us(peer_cpu);
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));
    struct ctl_msg h = {.a = uln_mr_key(g.mr), .b = g.buf_len, .cpu = cpu, .ncpu = ncpu};
    snprintf(h.text, sizeof h.text, "%s", opt.malloc_mem ? "malloc" : "ulnet");
    ctl_send(CTL_HELLO, &h);
    struct ctl_msg ph = ctl_recv(CTL_HELLO);
    g.peer_key = ph.a;
    if (ph.b != g.buf_len || strcmp(ph.text, h.text))
        die("the ranks disagree on buffers (%" PRIu64 " B %s vs %zu B %s): same options?", ph.b,
            ph.text, g.buf_len, h.text);
    g.yield |= cpu >= 0 && cpu == ph.cpu;

    if (g.rank == 0) {
        hdr = opt.csv_stdout ? stderr : stdout;
        progress_tty = isatty(2);
        if (opt.csv_stdout)
            csv = stdout;
        else if (opt.csv_path && !(csv = fopen(opt.csv_path, "w")))
            die("cannot write %s: %s", opt.csv_path, strerror(errno));
        if (csv) fprintf(csv, "transport,op,test,size,value,unit\n");

        fprintf(hdr,
                "# ulnperf: transport=%s nap_max=%u inline_max=%u shm_direct=%d shm_cma=%d "
                "sq_depth=%u ring_bytes=%u chunk_bytes=%u\n",
                g.info.transport, g.info.nap_max, g.info.inline_max, g.info.shm_direct,
                g.info.shm_cma, g.info.sq_depth, g.info.ring_bytes, g.info.chunk_bytes);
        char p0[96], p1[96];
        describe_pin(p0, sizeof p0, 0, cpu, ncpu);
        describe_pin(p1, sizeof p1, 1, ph.cpu, ph.ncpu);
        if (cpu >= 0 && ph.cpu >= 0 && cpu != ph.cpu)
            fprintf(hdr, "# pinned: %s, %s\n", p0, p1);
        else
            fprintf(hdr, "# NOT pinned to distinct CPUs: %s, %s%s\n", p0, p1,
                    g.yield ? " (spin loops yield; numbers are not meaningful)" : "");
        if (floor_us > 0) {
            fprintf(hdr,
                    "# floor: a cache line crosses cpu %d <-> cpu %d in %.3f us one-way "
                    "(no shared-memory latency here can be lower)\n",
                    cpu, peer_cpu, floor_us);
            if (csv) fprintf(csv, "platform,cacheline,lat,64,%.4f,us\n", floor_us);
        }
        if (use_tsc)
            fprintf(hdr, "# timer: rdtsc at %.3f GHz (calibrated against CLOCK_MONOTONIC)\n",
                    ticks_per_ns);
        else
            fprintf(hdr, "# timer: clock_gettime(CLOCK_MONOTONIC)\n");
        fprintf(hdr,
                "# mem=%s window=%u %s; lat: nap/nap-inline/put one-way = RTT/2, "
                "get = full GET time (a round trip)\n",
                opt.malloc_mem ? "malloc (aligned_alloc + uln_mr_reg)" : "ulnet (uln_mem_alloc)",
                opt.window,
                opt.iters   ? "fixed iterations"
                : opt.quick ? "quick"
                            : "~100 ms per point");
        if (!opt.csv_stdout)
            printf("%-10s %-7s %6s %12s %12s %10s %10s %10s\n", "op", "test", "size", "median_us",
                   "p99_us", "GB/s", "Mmsg/s", "iters");
        fflush(hdr);

        samples = malloc(sizeof *samples * (opt.iters > LAT_MAX_ITERS ? opt.iters : LAT_MAX_ITERS));
        if (!samples) die("out of memory");
        drive();
        struct ctl_msg q = {0};
        ctl_send(CTL_QUIT, &q);
        if (csv && csv != stdout && fclose(csv))
            die("writing %s: %s", opt.csv_path, strerror(errno));
        free(samples);
    } else {
        serve();
    }

    /* The peer may still be inside our memory until both get here. */
    ctl_drain();
    if ((rc = uln_barrier(g.ctx, 60000))) die("final uln_barrier: %s", uln_strerror(rc));
    /* The floor again, with rank 1 asleep: the host may have moved our CPUs
     * during the run. */
    if (floor_us > 0) {
        double end_us = line_floor_us(peer_cpu);
        fprintf(hdr, "# floor at the end: %.3f us one-way (at the start: %.3f us)\n", end_us,
                floor_us);
    }
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));
    g.ctl = NULL; /* from here a failure is not worth an ABORT message */
    if ((rc = uln_mr_dereg(g.mr))) die("uln_mr_dereg: %s", uln_strerror(rc));
    buf_free(g.tgt);
    buf_free(g.loc);
    free(g.napbuf);
    if ((rc = uln_close(g.ctx))) die("uln_close: %s", uln_strerror(rc));
    return 0;
}
