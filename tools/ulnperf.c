/*
 * ulnperf - the benchmark suite of ulnet: the papers' experiments, per primitive.
 *
 *   ulnrun -n N [--timeout S] ulnperf [options]      (ulnperf -h for the options)
 *   mpirun -n N ulnperf [options]                     (or any PMIx launcher: srun --mpi=pmix)
 *   ulnperf --plot DIR --peer-csv FILE...             (plots only, from saved CSVs)
 *
 * Scenarios (--test): lat, bw, bibw and rate between ranks 0 and 1; cache (cold
 * vs warm translation) from rank 0 into rank 1; fair (8 endpoints of rank 0
 * sharing one interface towards rank 1); load (ranks 1..N-1 all sending to rank
 * 0 at a paced rate). A job may have more than 2 ranks: only load uses them,
 * the others sleep in uln_cq_wait meanwhile.
 *
 * Rank 0 drives and measures; the others learn every step from control
 * messages. The control traffic uses its own endpoint (the second one each rank
 * opens) so data NAPs carry no header and need no demultiplexing, while one CQ
 * serves every endpoint: whichever loop a rank is in, polling that CQ drives all
 * of its work (the shm_direct=0 and refused-CMA paths need the target to make
 * progress) and notices a peer's ABORT.
 *
 * Every measurement point is two "phases" (CMD -> READY -> run -> FIN -> DONE),
 * a warm-up and the measured one. Rank 0 ends each when its time budget is
 * spent (or after --iters), so every point takes about the same time whatever
 * the message size, and the other ranks never need an iteration count.
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
#include <sys/stat.h>
#include <sys/wait.h>
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
enum { T_LAT, T_BW, T_BIBW, T_RATE, T_CACHE, T_FAIR, T_LOAD, NTESTS };
static const char *const test_names[NTESTS] = {"lat",   "bw",   "bibw", "rate",
                                               "cache", "fair", "load"};

#define MAX_SIZES   64
#define MAX_WINDOWS 16
#define MAX_LEVELS  32
#define MAX_PEERCSV 16
#define MAX_FAIR    32
/* The bw test's message rate is only interesting where per-message cost
 * dominates. */
#define BW_RATE_MAX_SIZE 65536u

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
    double point_ms;               /* 0: default for the mode */
    unsigned windows[MAX_WINDOWS]; /* rate */
    int nwindows;
    size_t rate_max;
    size_t load_size;
    unsigned levels[MAX_LEVELS]; /* load: offered load, % of the measured peak */
    int nlevels;
    unsigned fair_eps;
    size_t fair_size;
    double fair_ms;
    const char *transport;
    const char *plot_dir;
    const char *peer_csv[MAX_PEERCSV];
    int npeer;
} opt = {.window = 32, .rate_max = 64, .load_size = 64, .fair_eps = 8, .fair_size = 65536};

static void usage(FILE *f)
{
    fprintf(f, "usage: ulnrun -n N [--timeout S] ulnperf [options]     (N >= 2)\n"
               "       ulnperf --plot DIR --peer-csv FILE [--peer-csv FILE...]  (plot saved CSVs)\n"
               "Measures ulnet's primitives (NAP, NAP inline, PUT, GET) on this host.\n"
               "  --test LIST     lat,bw,bibw,rate,cache,fair,load or all (default all)\n"
               "                    lat   one-way latency (median, p99), ranks 0 and 1\n"
               "                    bw    bandwidth rank 0 -> 1, --window outstanding\n"
               "                    bibw  both ranks stream at each other at once\n"
               "                    rate  message rate with 1..W outstanding (--windows)\n"
               "                    cache PUT/GET to a region never touched (translation\n"
               "                          cache miss: open + mmap + page faults) vs warm\n"
               "                    fair  --fair-eps endpoints of rank 0 share the interface;\n"
               "                          each one's share over time, Jain's index\n"
               "                    load  ranks 1..N-1 send paced NAPs to rank 0: latency\n"
               "                          vs offered load (run with ulnrun -n 4 or more)\n"
               "  --op LIST       nap,nap-inline,put,get or all (default all)\n"
               "  --sizes SPEC    a-b: a, the powers of two between, b; or a list a,b,c\n"
               "                  (K/M suffixes; default 1-16M; nap stops at nap_max,\n"
               "                  nap-inline at inline_max)\n"
               "  --iters N       measured iterations per point (default: adapt so each\n"
               "                  point takes ~100 ms)\n"
               "  --window W      operations outstanding in bw/bibw/fair (default 32)\n"
               "  --windows LIST  rate: outstanding operations (default 1,2,4,8,64)\n"
               "  --rate-max S    rate: largest message size (default 64)\n"
               "  --load-size S   load: NAP payload (default 64, at least 16)\n"
               "  --load-levels L load: offered load in %% of the measured peak\n"
               "                  (default 10,20,...,100)\n"
               "  --fair-eps N    fair: endpoints (default 8)\n"
               "  --fair-size S   fair: message size (default 64K; NAP: at most nap_max)\n"
               "  --fair-ms T     fair: length of the run (default 10 points)\n"
               "  --mem KIND      ulnet: PUT/GET buffers from uln_mem_alloc (peers map them)\n"
               "                  malloc: aligned_alloc + uln_mr_reg (peers use CMA)\n"
               "  --transport T   ask the library for transport T (sets ULN_TRANSPORT) and\n"
               "                  fail plainly if it runs another\n"
               "  --quick         a few ms per point (smoke test)\n"
               "  --point-ms T    time budget of one point, ms\n"
               "  --csv           CSV on stdout instead of the table\n"
               "  --csv=FILE      table on stdout and CSV into FILE\n"
               "  --plot DIR      after the run, PNG and SVG plots into DIR (needs gnuplot)\n"
               "  --peer-csv FILE rows (same columns) of a peer or another run to draw on\n"
               "                  the same axes; may be repeated\n"
               "  -h, --help      this text\n"
               "Latency: nap, nap-inline and put report one-way time (RTT/2, ping-pong);\n"
               "get reports the full GET time, which is a round trip by nature.\n"
               "CSV columns: transport,op,test,size,value,unit (see docs/benchmarks.md).\n");
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

/* "1,2,4" -> numbers in [lo, hi]; returns the count or -1. */
static int parse_uints(const char *spec, unsigned *out, int max, unsigned lo, unsigned hi)
{
    int n = 0;
    const char *p = spec;
    for (;;) {
        char *e;
        errno = 0;
        unsigned long v = strtoul(p, &e, 10);
        if (errno || e == p || v < lo || v > hi || n == max || (*e && *e != ',')) return -1;
        out[n++] = (unsigned)v;
        if (!*e) return n;
        p = e + 1;
    }
}

static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_uint(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;
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
        const char *e;
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
            char *x;
            opt.iters = strtoull(v, &x, 10);
            if (*x || !opt.iters) goto bad;
        } else if (!strcmp(a, "--window")) {
            unsigned w;
            if (parse_uints(v, &w, 1, 1, 65536) != 1) goto bad;
            opt.window = w;
        } else if (!strcmp(a, "--windows")) {
            if ((opt.nwindows = parse_uints(v, opt.windows, MAX_WINDOWS, 1, 65536)) < 0) goto bad;
        } else if (!strcmp(a, "--rate-max")) {
            if (!(opt.rate_max = parse_size(v, &e)) || *e) goto bad;
        } else if (!strcmp(a, "--load-size")) {
            if ((opt.load_size = parse_size(v, &e)) < 16 || *e) goto bad;
        } else if (!strcmp(a, "--load-levels")) {
            if ((opt.nlevels = parse_uints(v, opt.levels, MAX_LEVELS, 1, 100)) < 0) goto bad;
        } else if (!strcmp(a, "--fair-eps")) {
            if (parse_uints(v, &opt.fair_eps, 1, 1, MAX_FAIR) != 1) goto bad;
        } else if (!strcmp(a, "--fair-size")) {
            if (!(opt.fair_size = parse_size(v, &e)) || *e) goto bad;
        } else if (!strcmp(a, "--fair-ms")) {
            char *x;
            opt.fair_ms = strtod(v, &x);
            if (*x || !(opt.fair_ms >= 1)) goto bad;
        } else if (!strcmp(a, "--point-ms")) {
            char *x;
            opt.point_ms = strtod(v, &x);
            if (*x || !(opt.point_ms > 0)) goto bad;
        } else if (!strcmp(a, "--mem")) {
            if (!strcmp(v, "malloc"))
                opt.malloc_mem = true;
            else if (strcmp(v, "ulnet"))
                goto bad;
        } else if (!strcmp(a, "--transport")) {
            opt.transport = v;
        } else if (!strcmp(a, "--plot")) {
            /* The directory goes into gnuplot scripts between single quotes. */
            if (strchr(v, '\'')) goto bad;
            opt.plot_dir = v;
        } else if (!strcmp(a, "--peer-csv")) {
            if (opt.npeer == MAX_PEERCSV) goto bad;
            opt.peer_csv[opt.npeer++] = v;
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
    if (!opt.nwindows) opt.nwindows = parse_uints("1,2,4,8,64", opt.windows, MAX_WINDOWS, 1, 64);
    qsort(opt.windows, (size_t)opt.nwindows, sizeof opt.windows[0], cmp_uint);
    if (!opt.nlevels)
        opt.nlevels = parse_uints("10,20,30,40,50,60,70,80,90,100", opt.levels, MAX_LEVELS, 1, 100);
    qsort(opt.levels, (size_t)opt.nlevels, sizeof opt.levels[0], cmp_uint);
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
    CTL_CMD,   /* rank 0 -> others: run a phase */
    CTL_READY, /* -> rank 0: prepared (load: wait for GO) */
    CTL_FIN,   /* rank 0 -> others: phase over, check what you have */
    CTL_DONE,  /* -> rank 0: result of the check */
    CTL_QUIT,
    CTL_ABORT, /* either way: I am failing, text says why */
    CTL_GO,    /* rank 0 -> load senders: start now */
    CTL_REKEY, /* rank 0 -> 1 (cache): register the region afresh */
    CTL_KEY,   /* rank 1 -> 0 (cache): its new key */
    CTL_NTYPES
};
static const char *const ctl_names[CTL_NTYPES] = {"?",    "HELLO", "CMD", "READY", "FIN", "DONE",
                                                  "QUIT", "ABORT", "GO",  "REKEY", "KEY"};
#define CTL_MAGIC 0x6c6e7066u /* "fpnl" */

struct ctl_msg {
    uint32_t magic, type;
    uint32_t op, test;
    uint64_t size, iters, window, pattern;
    uint64_t a, b;     /* HELLO: key, region length; DONE: data ok, bytes received */
    uint64_t key;      /* cache: the region's key */
    double rate;       /* load: messages per second per sender, 0: as fast as it can */
    int32_t cpu, ncpu; /* HELLO: pinning result (cpu or -errno), CPUs allowed */
    int32_t src;       /* set on receipt: the rank that sent it */
    uint32_t variant;  /* cache: 1 cold, 0 warm */
    char text[96];
};

#define CTL_SLOTS  8
#define INBOX      128
#define POLL_BATCH 16
#define BIBW_BATCH 1024
#define STALL_S    15 /* no op takes seconds; a longer wait is a hang */

static struct {
    int rank, size;
    int peer; /* rank 0 <-> 1; load senders -> 0 */
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep, *ctl;
    struct uln_ep *fair[MAX_FAIR];
    int ep_idx, ctl_idx, fair_idx0, nfair;
    struct uln_info info;
    void *tgt, *loc; /* PUT/GET: remote target region, local source/destination */
    size_t buf_len;
    struct uln_mr *mr;
    uint64_t peer_key;
    void *napbuf;
    bool yield;      /* both ranks may share a CPU: spinning must let the other run */
    bool sleep_wait; /* wait for control messages in uln_cq_wait, not spinning */
    bool dying, peer_aborted;
    char where[96];
    struct ctl_msg slot[CTL_SLOTS];
    bool slot_busy[CTL_SLOTS];
    struct ctl_msg inbox[INBOX];
    unsigned in_head, in_tail;
} g = {.rank = -1};

static void ctl_send_raw(int peer, const struct ctl_msg *m, bool best_effort);

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
    /* Tell rank 0 (or, from rank 0, everyone), so the job fails at once with
     * the reason instead of stalling. */
    if (!g.dying && !g.peer_aborted && g.ctl) {
        g.dying = true;
        struct ctl_msg m = {.magic = CTL_MAGIC, .type = CTL_ABORT};
        snprintf(m.text, sizeof m.text, "%.*s", (int)sizeof m.text - 1, msg);
        for (int r = 0; r < g.size; r++)
            if (r != g.rank && (g.rank == 0 || r == 0)) ctl_send_raw(r, &m, true);
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

/* Poll once (which drives progress); the stall clock restarts when anything
 * came and ticks when nothing did. */
static int poll_some(struct uln_cqe *ev, int max, struct stall *st)
{
    int k = uln_cq_poll(g.cq, ev, max);
    if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
    if (k)
        stall_reset(st);
    else
        stall_tick(st);
    return k;
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
        m.src = e->peer;
        if (m.type == CTL_ABORT) {
            g.peer_aborted = true;
            die("rank %d failed: %.*s", e->peer, (int)sizeof m.text, m.text);
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

/* Poll once; count this endpoint's successful NAP send completions and hand
 * everything else on. Returns how many entries came. */
static int poll_count_naps(struct uln_cqe *ev, uint64_t *completed)
{
    int k = uln_cq_poll(g.cq, ev, POLL_BATCH);
    if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
    for (int j = 0; j < k; j++) {
        if (ev[j].ep == g.ep_idx && ev[j].op == ULN_OP_NAP && !ev[j].status)
            (*completed)++;
        else
            handle_other(&ev[j]);
    }
    return k;
}

/* Wait (spin, then sleep) at most a millisecond for the CQ. */
static void wait_1ms(void)
{
    int rc = uln_cq_wait(g.cq, 1);
    if (rc && rc != -ETIMEDOUT) die("uln_cq_wait: %s", uln_strerror(rc));
}

/* Poll until our operation `id` of kind `want` completes with `size` bytes;
 * everything else that completes meanwhile is handled on the way. */
static void wait_own(int want, uint64_t id, size_t size, struct stall *st)
{
    struct uln_cqe ev[POLL_BATCH];
    for (bool done = false; !done;) {
        int k = uln_cq_poll(g.cq, ev, POLL_BATCH);
        if (k < 0) die("uln_cq_poll: %s", uln_strerror(k));
        for (int j = 0; j < k; j++) {
            if (ev[j].ep == g.ep_idx && ev[j].op == want && !ev[j].status &&
                ev[j].user_data == id) {
                if (ev[j].len != size)
                    die("%s completion says %" PRIu64 " B, expected %zu", op_str(want), ev[j].len,
                        size);
                done = true;
            } else {
                handle_other(&ev[j]);
            }
        }
        if (!done) stall_tick(st);
    }
    stall_reset(st);
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
static void ctl_send_raw(int peer, const struct ctl_msg *m, bool best_effort)
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
        int rc = uln_nap(g.ctl, peer, &g.slot[s], sizeof *m, (uint64_t)s, 0);
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

static void ctl_send_to(int peer, uint32_t type, struct ctl_msg *m)
{
    m->magic = CTL_MAGIC;
    m->type = type;
    ctl_send_raw(peer, m, false);
}

static void ctl_send(uint32_t type, struct ctl_msg *m)
{
    ctl_send_to(g.peer, type, m);
}

static bool ctl_pending(void)
{
    return g.in_head != g.in_tail;
}

static const struct ctl_msg *ctl_peek(void)
{
    return ctl_pending() ? &g.inbox[g.in_head % INBOX] : NULL;
}

static const char *ctl_name(uint32_t type)
{
    return type < CTL_NTYPES ? ctl_names[type] : "?";
}

static struct ctl_msg ctl_recv(uint32_t type)
{
    char what[64];
    snprintf(what, sizeof what, "control message %s from a peer", ctl_name(type));
    /* The other ranks wait for rank 0 as long as a phase lasts (FIN) or a point
     * is reported (CMD); rank 0 has its own limits, ulnrun --timeout the rest. */
    struct stall st = {.what = g.rank == 0 ? what : NULL};
    while (!ctl_pending()) {
        if (pump()) continue;
        if (g.sleep_wait) {
            /* Off the CPU: other ranks may share it. */
            int rc = uln_cq_wait(g.cq, 100);
            if (rc && rc != -ETIMEDOUT) die("uln_cq_wait: %s", uln_strerror(rc));
        } else {
            stall_tick(&st);
        }
    }
    struct ctl_msg m = g.inbox[g.in_head++ % INBOX];
    if (type && m.type != type)
        die("control message %s from rank %d, expected %s", ctl_name(m.type), m.src,
            ctl_name(type));
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
    int peer = g.peer;
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
    uint64_t key;     /* cache: the region to reach */
    unsigned variant; /* cache: 1 cold, 0 warm */
    double rate;      /* load: messages per second per sender, 0: unpaced */
};

static inline bool is_nap(int op)
{
    return op == OP_NAP || op == OP_NAP_INLINE;
}

static inline bool is_fair_ep(int ep)
{
    return ep >= g.fair_idx0 && ep < g.fair_idx0 + g.nfair;
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
    struct stall st = {.what = "a GET completion"};
    uint64_t t0 = ticks(), t = t0, i = 0;
    while (go_on(p, i, t0, t)) {
        post_retry(OP_GET, p->size, i, 0);
        wait_own(ULN_OP_GET, i, p->size, &st);
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
        int k = poll_some(ev, POLL_BATCH, &st);
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
        int k = poll_some(ev, 64, &st);
        for (int j = 0; j < k; j++) {
            /* bw's NAPs come on the data endpoint, fair's on the fair ones. */
            if ((ev[j].ep == g.ep_idx || is_fair_ep(ev[j].ep)) && ev[j].op == ULN_OP_NAP_RECV &&
                !ev[j].status) {
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
    }
    if (got != n) die("received %" PRIu64 " NAPs, rank 0 sent %" PRIu64, got, n);
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
static uint64_t bibw_role(const struct phase *p, uint64_t *elapsed, struct ctl_msg *done)
{
    /* Ask for more entries than we have operations outstanding: uln_cq_poll
     * skips progress when `max` entries are already waiting, and with send
     * completions arriving as fast as we post (the doorbell fast path) a small
     * batch would never let it take the peer's NAPs while we stream. */
    static struct uln_cqe ev[BIBW_BATCH];
    int batch = p->window * 2 < BIBW_BATCH ? (int)p->window * 2 : BIBW_BATCH;
    if (batch < 64) batch = 64;
    struct stall st = {.what = "bibw completions"};
    uint64_t posted = 0, completed = 0, got = 0, bytes = 0, expect = 0;
    uint16_t want = done_op[p->op];
    bool nap = is_nap(p->op), more = true, have_done = false;
    /* Rank 1 starts on rank 0's GO, which comes when rank 0 listens for its
     * data; rank 0's NAPs may arrive before the GO does. */
    bool started = g.rank == 0;
    long bad = -1;
    char why[96] = "";
    uint64_t t0 = ticks();
    for (;;) {
        if (!started && ctl_pending()) started = ctl_recv(CTL_GO).type == CTL_GO;
        if (more && g.rank == 0 && !go_on(p, posted, t0, ticks())) {
            more = false;
            struct ctl_msg f = {.iters = posted};
            ctl_send(CTL_FIN, &f);
        } else if (more && started && g.rank != 0 && posted >= p->window && ctl_pending()) {
            /* At least a window's worth each way, however short the phase:
             * then both sides have data to check. */
            const struct ctl_msg *f = ctl_peek();
            if (f->type != CTL_FIN) die("control message %s during bibw", ctl_name(f->type));
            more = false;
            expect = f->iters; /* left in the inbox: serve() takes it */
        }
        while (more && started && posted - completed < p->window && posted < p->max_iters) {
            int rc = post(p->op, p->size, posted, 0);
            if (rc == -EAGAIN) break;
            if (rc) die("posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
            posted++;
        }
        int k = poll_some(ev, batch, &st);
        for (int j = 0; j < k; j++) {
            struct uln_cqe *e = &ev[j];
            if (e->ep == g.ep_idx && !e->status && e->op == want) {
                if (e->len != p->size)
                    die("%s completion says %" PRIu64 " B, expected %zu", op_str(want), e->len,
                        p->size);
                completed++;
            } else if (nap && e->ep == g.ep_idx && !e->status && e->op == ULN_OP_NAP_RECV) {
                if (e->len != p->size) {
                    release(e);
                    die("received a NAP of %" PRIu64 " B, expected %zu", e->len, p->size);
                }
                got++;
                if ((got == 1 || !(got & 255)) && bad < 0 &&
                    (bad = marks_check(e->data, p->size, p->pattern)) >= 0)
                    snprintf(why, sizeof why, "NAP %" PRIu64 ": wrong byte at %ld", got, bad);
                bytes += e->len;
                release(e);
            } else {
                handle_other(e);
            }
        }
        if (g.rank == 0 && !more && !have_done && ctl_pending()) {
            *done = ctl_recv(CTL_DONE);
            have_done = true;
            expect = done->iters;
        }
        if (!more && completed == posted && (!nap || got == expect) && (g.rank != 0 || have_done))
            break;
    }
    if (g.rank == 0) {
        *elapsed = ticks() - t0;
        if (bad >= 0) die("data check failed: %s", why);
    } else {
        done->a = bad < 0;
        done->b = bytes;
        done->iters = posted;
        if (bad >= 0) snprintf(done->text, sizeof done->text, "%s", why);
    }
    return posted;
}

/* cache, rank 0: one operation at a time, timed from post to completion. Cold:
 * before each one rank 1 registers the region afresh (REKEY -> KEY, outside
 * the timing), so its key is one this process has never seen and the
 * translation cache misses: the first access opens the target's memory
 * object, maps the region and faults its pages in. Warm: the same key every
 * time, the mapping already in the cache. */
/* The library's counters around the timed operations of the last cache_run. */
static struct uln_counters cache_c0, cache_c1;

static void counters(struct uln_counters *c)
{
    int rc = uln_counters_get(g.ctx, c);
    if (rc) die("uln_counters_get: %s", uln_strerror(rc));
}

static uint64_t cache_run(const struct phase *p, uint64_t *samples)
{
    struct stall st = {.what = "a cache-test completion"};
    uint16_t want = done_op[p->op];
    uint64_t key = p->key, t0 = ticks(), t = t0, i = 0;
    /* Warm: the region is registered afresh for every phase, so its first
     * operation (i = 0) maps it, untimed: it restarts the loop below. */
    bool first_untimed = !p->variant;
    counters(&cache_c0);
    while (go_on(p, i, t0, t)) {
        if (p->variant) {
            struct ctl_msg m = {0};
            ctl_send(CTL_REKEY, &m);
            key = ctl_recv(CTL_KEY).key;
        }
        uint64_t s = ticks();
        int rc = p->op == OP_PUT ? uln_put(g.ep, g.peer, g.loc, p->size, key, 0, i, 0)
                                 : uln_get(g.ep, g.peer, g.loc, p->size, key, 0, i, 0);
        if (rc) die("posting %s of %zu B: %s", op_names[p->op], p->size, uln_strerror(rc));
        wait_own(want, i, p->size, &st);
        t = ticks();
        samples[i++] = t - s;
        stall_reset(&st);
        if (first_untimed) {
            first_untimed = false;
            i = 0;
            counters(&cache_c0);
            t0 = t = ticks();
        }
    }
    counters(&cache_c1);
    return i;
}

/* Wait until a control message is in the inbox, without taking it. */
static void ctl_wait(void)
{
    while (!ctl_pending()) {
        if (pump()) continue;
        if (g.sleep_wait) {
            int rc = uln_cq_wait(g.cq, 100);
            if (rc && rc != -ETIMEDOUT) die("uln_cq_wait: %s", uln_strerror(rc));
        } else if (g.yield) {
            sched_yield();
        }
    }
}

static struct uln_mr *cache_reg(size_t size)
{
    struct uln_mr *mr;
    int rc = uln_mr_reg(g.ctx, g.tgt, size, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr);
    if (rc) die("uln_mr_reg (cache region, %zu B): %s", size, uln_strerror(rc));
    return mr;
}

/* cache, rank 1: a new registration of the same memory for every REKEY, until
 * rank 0's FIN (left in the inbox for serve()). */
static void cache_serve(struct uln_mr **mr, size_t size)
{
    for (;;) {
        ctl_wait();
        if (ctl_peek()->type == CTL_FIN) return;
        ctl_recv(CTL_REKEY);
        int rc = uln_mr_dereg(*mr);
        if (rc) die("uln_mr_dereg (cache region): %s", uln_strerror(rc));
        *mr = cache_reg(size);
        struct ctl_msg k = {.key = uln_mr_key(*mr)};
        ctl_send(CTL_KEY, &k);
    }
}

/* fair, rank 0: every one of g.nfair endpoints keeps `window` operations of
 * `size` outstanding to rank 1; the bytes each has completed are sampled every
 * sample_ticks. The endpoints share one CQ, so the library's engine decides who
 * moves next; our posting loop starts one endpoint further each pass so that it
 * favours none itself. */
#define FAIR_MAX_SAMPLES 1000
static uint64_t fair_samp[FAIR_MAX_SAMPLES][MAX_FAIR];
static double fair_samp_t[FAIR_MAX_SAMPLES]; /* ms since the start */

struct fair_out {
    unsigned nsamp;
    uint64_t total[MAX_FAIR]; /* bytes per endpoint when posting stopped */
    uint64_t elapsed;         /* ticks, start to the end of posting */
};

static int fair_post(const struct phase *p, unsigned i, uint64_t ud)
{
    size_t off = (size_t)i * p->size;
    switch (p->op) {
    case OP_NAP:
        return uln_nap(g.fair[i], g.peer, g.napbuf, p->size, ud, 0);
    case OP_PUT:
        return uln_put(g.fair[i], g.peer, (uint8_t *)g.loc + off, p->size, g.peer_key, off, ud, 0);
    default:
        return uln_get(g.fair[i], g.peer, (uint8_t *)g.loc + off, p->size, g.peer_key, off, ud, 0);
    }
}

static uint64_t fair_run(const struct phase *p, uint64_t sample_ticks, struct fair_out *o)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "fair completions"};
    unsigned n = (unsigned)g.nfair, first = 0;
    uint64_t posted[MAX_FAIR] = {0}, completed[MAX_FAIR] = {0}, bytes[MAX_FAIR] = {0};
    uint64_t total = 0, outstanding = 0;
    uint16_t want = done_op[p->op];
    bool more = true;
    uint64_t t0 = ticks(), next = t0 + sample_ticks;
    o->nsamp = 0;
    while (more || outstanding) {
        uint64_t now = ticks();
        if (more && now >= next && o->nsamp < FAIR_MAX_SAMPLES) {
            memcpy(fair_samp[o->nsamp], bytes, sizeof bytes);
            fair_samp_t[o->nsamp++] = ticks_to_ns((double)(now - t0)) / 1e6;
            next += sample_ticks;
        }
        if (more && now - t0 >= p->budget) {
            more = false;
            o->elapsed = now - t0;
            memcpy(o->total, bytes, sizeof bytes);
            if (is_nap(p->op)) {
                struct ctl_msg f = {.iters = total};
                ctl_send(CTL_FIN, &f);
            }
        }
        for (unsigned k = 0; more && k < n; k++) {
            unsigned i = (first + k) % n;
            while (posted[i] - completed[i] < p->window) {
                int rc = fair_post(p, i, posted[i]);
                if (rc == -EAGAIN) break;
                if (rc) die("posting %s on endpoint %u: %s", op_names[p->op], i, uln_strerror(rc));
                posted[i]++, outstanding++, total++;
            }
        }
        first = first + 1 == n ? 0 : first + 1;
        int k = poll_some(ev, 64, &st);
        for (int j = 0; j < k; j++) {
            if (is_fair_ep(ev[j].ep) && ev[j].op == want && !ev[j].status) {
                unsigned i = (unsigned)(ev[j].ep - g.fair_idx0);
                completed[i]++, outstanding--;
                bytes[i] += ev[j].len;
            } else {
                handle_other(&ev[j]);
            }
        }
    }
    return total;
}

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

static void load_recv(uint64_t budget_ns, size_t size, uint64_t *samples, uint64_t cap,
                      struct load_out *o)
{
    struct uln_cqe ev[64];
    struct stall st = {.what = "load NAPs"};
    int senders = g.size - 1, dones = 0;
    uint64_t n = 0, n_fin = 0, t_fin = 0, expect = UINT64_MAX, sent = 0;
    bool fin = false;
    uint64_t sink = 0;
    struct ctl_msg go = {0};
    uint64_t t0 = mono_ns();
    for (int r = 1; r < g.size; r++)
        ctl_send_to(r, CTL_GO, &go);
    while (!fin || n < expect) {
        int k = poll_some(ev, 64, &st);
        for (int j = 0; j < k; j++) {
            const struct uln_cqe *e = &ev[j];
            if (e->ep == g.ep_idx && e->op == ULN_OP_NAP_RECV && !e->status) {
                if (e->len != size) {
                    release(e);
                    die("load: a NAP of %" PRIu64 " B from rank %d, expected %zu", e->len, e->peer,
                        size);
                }
                uint64_t stamp, w;
                memcpy(&stamp, e->data, 8);
                for (size_t b = 8; b + 8 <= size; b += 8) {
                    memcpy(&w, (const uint8_t *)e->data + b, 8);
                    sink += w;
                }
                uint64_t now = mono_ns();
                samples[n++ % cap] = now > stamp ? now - stamp : 0;
                release(e);
            } else {
                handle_other(e);
            }
        }
        if (!fin && mono_ns() - t0 >= budget_ns) {
            fin = true;
            t_fin = mono_ns();
            n_fin = n;
            struct ctl_msg f = {0};
            for (int r = 1; r < g.size; r++)
                ctl_send_to(r, CTL_FIN, &f);
        }
        while (fin && dones < senders && ctl_pending()) {
            struct ctl_msg d = ctl_recv(CTL_DONE);
            sent += d.iters;
            if (++dones == senders) expect = sent;
        }
    }
    if (n != expect) die("load: received %" PRIu64 " NAPs, the senders posted %" PRIu64, n, expect);
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
#define LOAD_CAP        128 /* sends in flight per sender, well under sq_depth */
#define LOAD_QUANTUM_NS 50000u

static uint8_t *load_pool;

static void load_send(const struct phase *p, struct ctl_msg *done)
{
    struct uln_cqe ev[POLL_BATCH];
    size_t size = p->size;
    bool inl = size <= g.info.inline_max;
    double per_ns = p->rate / 1e9;
    uint64_t sent = 0, completed = 0;
    ctl_recv(CTL_GO);
    uint64_t t0 = mono_ns();
    for (;;) {
        if (ctl_pending()) {
            if (ctl_peek()->type != CTL_FIN)
                die("control message %s during load", ctl_name(ctl_peek()->type));
            break; /* FIN, left in the inbox for serve() */
        }
        uint64_t now = mono_ns();
        uint64_t due = per_ns > 0 ? (uint64_t)((double)(now - t0) * per_ns) + 1 : UINT64_MAX;
        bool blocked = false;
        while (sent < due && sent - completed < LOAD_CAP) {
            /* Inline NAPs are copied at post time; others need their own buffer
             * until the completion, one per send in flight. */
            uint8_t *b = inl ? g.napbuf : load_pool + (sent % LOAD_CAP) * size;
            uint64_t ts = mono_ns();
            memcpy(b, &ts, 8);
            memcpy(b + 8, &sent, 8);
            int rc = uln_nap(g.ep, 0, b, size, sent, inl ? ULN_INLINE : 0);
            if (rc == -EAGAIN) {
                blocked = true;
                break;
            }
            if (rc) die("load: posting a NAP: %s", uln_strerror(rc));
            sent++;
        }
        blocked |= sent - completed >= LOAD_CAP;
        int k = poll_count_naps(ev, &completed);
        if (k) continue;
        if (blocked || sent != completed) {
            wait_1ms();
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
        int k = poll_count_naps(ev, &completed);
        if (!k) {
            wait_1ms();
            stall_tick(&st);
        }
    }
    done->iters = sent;
    done->a = 1;
}

/* ------------------------------------------------------------------------- */
/* Phases                                                                     */
/* ------------------------------------------------------------------------- */

/* Both sides of a test, set up before the data flows: marks the receiver (or
 * a GET's initiator) checks afterwards, counters a ping-pong watches. */
static void phase_setup(const struct phase *p)
{
    bool r0 = g.rank == 0;
    switch (p->test) {
    case T_LAT:
        if (p->op == OP_PUT)
            ctr_write((uint8_t *)g.tgt + p->size - ctr_width(p->size), ctr_width(p->size), 0);
        break;
    case T_BW:
    case T_RATE:
        if (is_nap(p->op) && r0) marks_set(g.napbuf, p->size, p->pattern, false);
        if (p->op == OP_PUT) marks_set(r0 ? g.loc : g.tgt, p->size, p->pattern, !r0);
        if (p->op == OP_GET) marks_set(r0 ? g.loc : g.tgt, p->size, p->pattern, r0);
        break;
    case T_BIBW:
        /* Each side both the initiator and the target of the other's traffic. */
        if (is_nap(p->op)) marks_set(g.napbuf, p->size, p->pattern, false);
        if (p->op == OP_PUT) {
            marks_set(g.loc, p->size, p->pattern, false);
            marks_set(g.tgt, p->size, p->pattern, true);
        }
        if (p->op == OP_GET) {
            marks_set(g.tgt, p->size, p->pattern, false);
            marks_set(g.loc, p->size, p->pattern, true);
        }
        break;
    case T_FAIR:
        if (is_nap(p->op) && r0) marks_set(g.napbuf, p->size, p->pattern, false);
        break;
    default:
        break;
    }
}

/* After FIN: what this side can check of the data it was given. Returns the
 * offset of the first wrong byte or -1; *what names the buffer. */
static long phase_check(const struct phase *p, const char **what)
{
    bool r0 = g.rank == 0;
    *what = "";
    if ((p->test == T_BW || p->test == T_RATE) && p->op == OP_PUT && !r0)
        return *what = "PUT target", marks_check(g.tgt, p->size, p->pattern);
    if ((p->test == T_BW || p->test == T_RATE) && p->op == OP_GET && r0)
        return *what = "GET destination", marks_check(g.loc, p->size, p->pattern);
    if (p->test == T_BIBW && p->op == OP_PUT)
        return *what = "PUT target", marks_check(g.tgt, p->size, p->pattern);
    if (p->test == T_BIBW && p->op == OP_GET)
        return *what = "GET destination", marks_check(g.loc, p->size, p->pattern);
    return -1;
}

/* Does run_role on rank 0 do the FIN/DONE exchange itself? (For NAP streams
 * the FIN carries the count while the last messages are still in flight.) */
static bool fin_inside(const struct phase *p)
{
    return p->test == T_BIBW ||
           ((p->test == T_BW || p->test == T_RATE || p->test == T_FAIR) && is_nap(p->op));
}

/* What both ranks do between READY and FIN. Rank 0 returns the number of
 * iterations; for bw, *elapsed (and for NAP bw the DONE it already took). */
static uint64_t run_role(const struct phase *p, uint64_t *samples, uint64_t *elapsed,
                         struct ctl_msg *done)
{
    switch (p->test) {
    case T_LAT:
        if (is_nap(p->op)) return nap_lat(p, samples);
        if (p->op == OP_PUT) return put_lat(p, samples);
        return g.rank == 0 ? get_lat(p, samples) : 0;
    case T_BIBW:
        return bibw_role(p, elapsed, done);
    case T_BW:
    case T_RATE:
    case T_FAIR: /* rank 0's side of fair is fair_run, called by measure_fair */
        if (g.rank == 0) return bw_sender(p, elapsed, done);
        if (is_nap(p->op)) nap_bw_receiver(p, done);
        return 0;
    case T_CACHE:
        return g.rank == 0 ? cache_run(p, samples) : 0;
    default:
        die("run_role: test %d", p->test);
    }
}

/* Rank 0: one phase with rank 1 end to end; returns the number of iterations.
 * fo: fair's results (only for T_FAIR). */
static uint64_t phase0(struct phase *p, uint64_t *samples, uint64_t *elapsed, struct ctl_msg *done,
                       uint64_t sample_ticks, struct fair_out *fo)
{
    /* Set up our side before telling the peer: once it is READY, data flows. */
    phase_setup(p);
    struct ctl_msg m = {.op = (uint32_t)p->op,
                        .test = (uint32_t)p->test,
                        .size = p->size,
                        .window = p->window,
                        .pattern = p->pattern,
                        .variant = p->variant};
    ctl_send(CTL_CMD, &m);
    struct ctl_msg r = ctl_recv(CTL_READY);
    p->key = r.key;
    /* bibw: rank 1 sends too, and must not before we listen for its data. */
    if (p->test == T_BIBW) ctl_send(CTL_GO, &r);
    *done = (struct ctl_msg){0};
    uint64_t n =
        p->test == T_FAIR ? fair_run(p, sample_ticks, fo) : run_role(p, samples, elapsed, done);
    if (p->test == T_FAIR && is_nap(p->op)) *done = ctl_recv(CTL_DONE);
    if (!fin_inside(p)) {
        struct ctl_msg f = {.iters = n};
        ctl_send(CTL_FIN, &f);
        *done = ctl_recv(CTL_DONE);
    }
    if (!done->a) die("data check failed at rank 1: %.*s", (int)sizeof done->text, done->text);
    if ((p->test == T_BW || p->test == T_RATE || p->test == T_FAIR) && is_nap(p->op) &&
        (done->iters != n || done->b != n * p->size))
        die("rank 1 confirms %" PRIu64 " NAPs and %" PRIu64 " B; sent %" PRIu64 " and %" PRIu64,
            done->iters, done->b, n, n * p->size);
    const char *what;
    long bad = phase_check(p, &what);
    if (bad >= 0) die("data check failed: %s wrong at offset %ld", what, bad);
    return n;
}

/* Ranks >= 1: serve phases until QUIT. */
static void serve(void)
{
    for (;;) {
        struct ctl_msg m = ctl_recv(0);
        if (m.type == CTL_QUIT) return;
        if (m.type != CTL_CMD)
            die("control message %s from rank 0, expected CMD or QUIT", ctl_name(m.type));
        struct phase p = {.op = (int)m.op,
                          .test = (int)m.test,
                          .size = m.size,
                          .window = (unsigned)m.window,
                          .pattern = m.pattern,
                          .variant = m.variant,
                          .rate = m.rate,
                          .max_iters = UINT64_MAX};
        bool load = p.test == T_LOAD;
        if (m.op >= NOPS || m.test >= NTESTS || !p.size || (g.rank >= 2 && !load) ||
            (!load && !is_nap(p.op) && p.size > g.buf_len) ||
            (is_nap(p.op) && p.size > g.info.nap_max) || (load && p.size < 16))
            die("bad phase from rank 0: op %u test %u size %" PRIu64, m.op, m.test, m.size);
        snprintf(g.where, sizeof g.where, "%s %s %zu B", op_names[p.op], test_names[p.test],
                 p.size);
        phase_setup(&p);
        struct uln_mr *cmr = NULL;
        struct ctl_msg r = {.a = 1};
        if (p.test == T_CACHE) r.key = uln_mr_key(cmr = cache_reg(p.size));
        ctl_send(CTL_READY, &r);
        if (p.test == T_CACHE)
            cache_serve(&cmr, p.size);
        else if (load)
            load_send(&p, &r);
        else
            run_role(&p, NULL, NULL, &r);
        ctl_recv(CTL_FIN);
        if (cmr) {
            int rc = uln_mr_dereg(cmr);
            if (rc) die("uln_mr_dereg (cache region): %s", uln_strerror(rc));
        }
        const char *what;
        long bad = phase_check(&p, &what);
        if (bad >= 0) {
            r.a = 0;
            snprintf(r.text, sizeof r.text, "%s wrong at offset %ld", what, bad);
        }
        ctl_send_to(0, CTL_DONE, &r);
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

/* label: this point; group: its scenario/op, printed once per group when
 * stderr is not a terminal (a log), rather than once per point. */
static void progress(int done, int total, const char *label, const char *group)
{
    if (progress_tty) {
        fprintf(stderr, "\r\033[K[%3d/%d] %s", done + 1, total, label);
        progress_shown = true;
    } else if (group) {
        fprintf(stderr, "ulnperf: [%3d/%d] %s\n", done + 1, total, group);
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

/* Every row also stays in memory for --plot. */
struct row {
    char tr[24], op[24], test[32], unit[16];
    double size, value;
};
static struct row *rows;
static size_t nrows, rows_cap;

static void row_add(const char *tr, const char *op, const char *test, double size, double value,
                    const char *unit)
{
    if (nrows == rows_cap) {
        size_t c = rows_cap ? 2 * rows_cap : 1024;
        struct row *r = realloc(rows, c * sizeof *r);
        if (!r) return; /* plots are a convenience: the CSV is complete anyway */
        rows = r, rows_cap = c;
    }
    struct row *r = &rows[nrows++];
    snprintf(r->tr, sizeof r->tr, "%s", tr);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->test, sizeof r->test, "%s", test);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->size = size, r->value = value;
}

static void csv_row_s(const char *op, const char *test, uint64_t size, double value,
                      const char *unit)
{
    if (csv) {
        fprintf(csv, "%s,%s,%s,%" PRIu64 ",%.6g,%s\n", g.info.transport, op, test, size, value,
                unit);
        fflush(csv);
    }
    if (opt.plot_dir) row_add(g.info.transport, op, test, (double)size, value, unit);
}

static void csv_row(int op, const char *test, size_t size, double value, const char *unit)
{
    csv_row_s(op_names[op], test, size, value, unit);
}

static void table_head(void)
{
    if (opt.csv_stdout) return;
    progress_clear();
    printf("%-10s %-10s %6s %12s %12s %10s %10s %10s  %s\n", "op", "test", "size", "median_us",
           "p99_us", "GB/s", "Mmsg/s", "iters", "note");
}

static void table_row(int op, const char *test, size_t size, double med, double p99, double gbs,
                      double mmsg, uint64_t iters, const char *note)
{
    if (opt.csv_stdout) return;
    char sz[32], a[16] = "", b[16] = "", c[16] = "", d[16] = "";
    if (med > 0) snprintf(a, sizeof a, "%.3f", med);
    if (p99 > 0) snprintf(b, sizeof b, "%.3f", p99);
    if (gbs > 0) snprintf(c, sizeof c, "%.3f", gbs);
    if (mmsg > 0) snprintf(d, sizeof d, "%.3f", mmsg);
    progress_clear();
    printf("%-10s %-10s %6s %12s %12s %10s %10s %10" PRIu64 "  %s\n", op_names[op], test,
           size_str(size, sz, sizeof sz), a, b, c, d, iters, note ? note : "");
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

/* Median and p99 of n samples (reorders them). */
static void med_p99(uint64_t *s, uint64_t n, uint64_t *med, uint64_t *p99)
{
    long i99 = (long)ceil(0.99 * (double)n) - 1;
    if (i99 < 0) i99 = 0;
    /* p99 first: it leaves the i99+1 smallest in front, median among them. */
    *p99 = select_k(s, (long)n, i99);
    *med = select_k(s, i99 + 1, (long)n / 2);
}

/* ------------------------------------------------------------------------- */
/* Driving the points (rank 0)                                                */
/* ------------------------------------------------------------------------- */

#define LAT_MAX_ITERS 2000000u /* 16 MB of samples: ~0.1 s at the fastest op */
#define BW_MAX_ITERS  1000000000u

static uint64_t *samples;

static double point_ms(void)
{
    return opt.point_ms ? opt.point_ms : opt.quick ? 2.0 : 100.0;
}

/* lat, bw, bibw and rate: a warm-up phase and the measured one. */
static void measure(int op, int test, size_t size, unsigned window)
{
    /* A rate point needs far fewer messages than a bandwidth point to be
     * precise: millions per second. */
    double ms = point_ms() * (test == T_RATE ? 0.3 : 1.0);
    struct phase p = {.op = op, .test = test, .size = size, .window = window};
    char tname[32];
    if (test == T_RATE)
        snprintf(tname, sizeof tname, "rate_w%u", window);
    else
        snprintf(tname, sizeof tname, "%s", test_names[test]);
    snprintf(g.where, sizeof g.where, "%s %s %zu B", op_names[op], tname, size);
    bool lat = test == T_LAT;
    uint64_t lo = lat ? 10 : window;
    uint64_t hi = lat ? LAT_MAX_ITERS : BW_MAX_ITERS;
    uint64_t elapsed = 0;
    struct ctl_msg done;

    /* Warm-up: faults in the peer's mapping of our pages, warms caches and
     * the translation cache; its results are thrown away. */
    if (opt.iters) {
        p.min_iters = p.max_iters = opt.iters / 10 > 1000 ? 1000
                                    : opt.iters / 10      ? opt.iters / 10
                                                          : 1;
    } else {
        p.min_iters = lat ? 2 : window;
        p.max_iters = hi;
        p.budget = (uint64_t)(ms * (opt.quick ? 0.25 : 0.15) * 1e6 * ticks_per_ns);
    }
    p.pattern = next_pattern();
    phase0(&p, samples, &elapsed, &done, 0, NULL);

    if (opt.iters) {
        p.min_iters = p.max_iters = opt.iters;
    } else {
        p.min_iters = lo;
        p.budget = (uint64_t)(ms * 1e6 * ticks_per_ns);
    }
    p.pattern = next_pattern();
    uint64_t n = phase0(&p, samples, &elapsed, &done, 0, NULL);

    if (lat) {
        uint64_t t50, t99;
        med_p99(samples, n, &t50, &t99);
        /* One-way time for ping-pongs; a GET is already a round trip. */
        double div = op == OP_GET ? 1000.0 : 2000.0;
        double med = ticks_to_ns((double)t50) / div;
        double p99 = ticks_to_ns((double)t99) / div;
        table_row(op, op == OP_GET ? "lat(rt)" : "lat", size, med, p99, 0, 0, n, NULL);
        csv_row(op, "lat", size, med, "us");
        csv_row(op, "lat_p99", size, p99, "us");
        return;
    }
    /* bibw: both directions' messages over rank 0's time. */
    uint64_t msgs = test == T_BIBW ? n + done.iters : n;
    double ns = ticks_to_ns((double)elapsed);
    double gbs = (double)msgs * (double)size / ns; /* bytes per ns = GB/s */
    double mmsg = (double)msgs / ns * 1e3;
    char tl[32], note[64] = "";
    if (test == T_RATE) snprintf(tl, sizeof tl, "rate w=%u", window);
    if (test == T_BIBW)
        snprintf(note, sizeof note, "%" PRIu64 " + %" PRIu64 " messages", n, done.iters);
    table_row(op, test == T_RATE ? tl : tname, size, 0, 0, test == T_RATE ? 0 : gbs,
              size <= BW_RATE_MAX_SIZE || test == T_RATE ? mmsg : 0, msgs, note);
    if (test == T_RATE) {
        csv_row(op, tname, size, mmsg, "Mmsg/s");
    } else {
        csv_row(op, tname, size, gbs, "GB/s");
        if (test == T_BW && size <= BW_RATE_MAX_SIZE) csv_row(op, "bw_rate", size, mmsg, "Mmsg/s");
    }
}

/* cache: cold (variant 1) or warm (0) translation, PUT or GET; the library's
 * own counters say which case was measured. */
static void measure_cache(int op, size_t size, unsigned variant)
{
    double ms = point_ms() * 0.5;
    const char *state = variant ? "cold" : "warm";
    struct phase p = {.op = op, .test = T_CACHE, .size = size, .window = 1, .variant = variant};
    snprintf(g.where, sizeof g.where, "%s cache %s %zu B", op_names[op], state, size);
    struct ctl_msg done;
    uint64_t elapsed = 0;
    /* Warm-up: a few operations, so the warm case starts with the region
     * mapped and both cases start with warm code and stacks. */
    p.min_iters = p.max_iters = 3;
    phase0(&p, samples, &elapsed, &done, 0, NULL);
    if (opt.iters) {
        p.min_iters = p.max_iters = opt.iters;
    } else {
        p.min_iters = 5;
        p.max_iters = LAT_MAX_ITERS;
        p.budget = (uint64_t)(ms * 1e6 * ticks_per_ns);
    }
    uint64_t n = phase0(&p, samples, &elapsed, &done, 0, NULL);
    double miss = (double)(cache_c1.cache_misses - cache_c0.cache_misses) / (double)n;
    double hit = (double)(cache_c1.cache_hits - cache_c0.cache_hits) / (double)n;
    uint64_t t50, t99;
    med_p99(samples, n, &t50, &t99);
    double med = ticks_to_ns((double)t50) / 1000.0, p99 = ticks_to_ns((double)t99) / 1000.0;
    double gbs = (double)size / (med * 1000.0);
    char tl[32], note[64];
    snprintf(tl, sizeof tl, "cache:%s", state);
    snprintf(note, sizeof note, "misses/op %.2f hits/op %.2f", miss, hit);
    table_row(op, tl, size, med, p99, gbs, 0, n, note);
    char t[32];
    snprintf(t, sizeof t, "cache_%s", state);
    csv_row(op, t, size, med, "us");
    snprintf(t, sizeof t, "cache_%s_p99", state);
    csv_row(op, t, size, p99, "us");
    snprintf(t, sizeof t, "cache_%s_bw", state);
    csv_row(op, t, size, gbs, "GB/s");
    snprintf(t, sizeof t, "cache_%s_miss", state);
    csv_row(op, t, size, miss, "miss/op");
}

/* Jain's fairness index of x[0..n): 1 when all are equal, 1/n when one has all. */
static double jain(const double *x, unsigned n)
{
    double s = 0, s2 = 0;
    for (unsigned i = 0; i < n; i++)
        s += x[i], s2 += x[i] * x[i];
    return s2 > 0 ? s * s / ((double)n * s2) : 0;
}

static double fair_run_ms(void)
{
    return opt.fair_ms ? opt.fair_ms : 10 * point_ms();
}

static unsigned fair_sample_ms(void)
{
    unsigned s = (unsigned)lround(fair_run_ms() / 100);
    return s ? s : 1;
}

static size_t fair_size(int op)
{
    return is_nap(op) && opt.fair_size > g.info.nap_max ? g.info.nap_max : opt.fair_size;
}

static void measure_fair(int op)
{
    size_t size = fair_size(op);
    unsigned n = (unsigned)g.nfair, sms = fair_sample_ms();
    struct phase p = {.op = op, .test = T_FAIR, .size = size, .window = opt.window};
    if (p.window > g.info.sq_depth) p.window = g.info.sq_depth;
    snprintf(g.where, sizeof g.where, "%s fair %zu B", op_names[op], size);
    struct ctl_msg done;
    struct fair_out fo;
    uint64_t sample_ticks = (uint64_t)(sms * 1e6 * ticks_per_ns);
    p.pattern = next_pattern();
    p.budget = (uint64_t)(fair_run_ms() * 0.1 * 1e6 * ticks_per_ns); /* warm-up */
    phase0(&p, NULL, NULL, &done, sample_ticks, &fo);
    p.pattern = next_pattern();
    p.budget = (uint64_t)(fair_run_ms() * 1e6 * ticks_per_ns);
    uint64_t msgs = phase0(&p, NULL, NULL, &done, sample_ticks, &fo);

    double tot[MAX_FAIR], sum = 0, lo = 1, hi = 0, x[MAX_FAIR];
    for (unsigned i = 0; i < n; i++)
        sum += tot[i] = (double)fo.total[i];
    for (unsigned i = 0; i < n; i++) {
        double s = sum > 0 ? tot[i] / sum : 0;
        lo = s < lo ? s : lo, hi = s > hi ? s : hi;
    }
    double ji = jain(tot, n), gbs = sum / ticks_to_ns((double)fo.elapsed);
    /* Per sample: each endpoint's share of what moved in that interval. */
    double jmin = 1;
    unsigned used = 0;
    for (unsigned k = 0; k < fo.nsamp; k++) {
        double dsum = 0;
        for (unsigned i = 0; i < n; i++)
            dsum += x[i] = (double)(fair_samp[k][i] - (k ? fair_samp[k - 1][i] : 0));
        if (dsum <= 0) continue; /* nothing completed in that interval (a preemption) */
        uint64_t t = (uint64_t)(k + 1) * sms;
        double j = jain(x, n);
        jmin = j < jmin ? j : jmin, used++;
        csv_row(op, "fair_jain", t, j, "jain");
        for (unsigned i = 0; i < n; i++) {
            char name[24];
            snprintf(name, sizeof name, "fair_ep%u", i);
            csv_row(op, name, t, x[i] / dsum, "share");
        }
    }
    char tl[32], note[160];
    snprintf(tl, sizeof tl, "fair:%u", n);
    int w = snprintf(note, sizeof note, "jain %.4f, share %.3f..%.3f, worst %u ms: jain %.3f", ji,
                     lo, hi, sms, used ? jmin : 0);
    (void)w;
    table_row(op, tl, size, 0, 0, gbs, (double)msgs / ticks_to_ns((double)fo.elapsed) * 1e3, msgs,
              note);
    csv_row(op, "fair", size, ji, "jain");
    csv_row(op, "fair_bw", size, gbs, "GB/s");
}

/* What the senders' CPUs are (set at start-up from the HELLOs). */
static char load_cpu_note[256] = "CPU placement unknown";

/* load: first the peak (every sender as fast as it can), then each level as a
 * percentage of that peak, split evenly over the senders. */
static double load_peak; /* messages per second, all senders together */

static void load_point(unsigned level)
{
    size_t size = opt.load_size;
    int senders = g.size - 1;
    double rate = level ? load_peak * level / 100.0 / senders : 0;
    uint64_t budget_ns = (uint64_t)(point_ms() * 2 * 1e6);
    snprintf(g.where, sizeof g.where, "load %u%% %zu B", level, size);
    struct ctl_msg m = {.op = OP_NAP, .test = T_LOAD, .size = size, .rate = rate};
    for (int r = 1; r < g.size; r++)
        ctl_send_to(r, CTL_CMD, &m);
    for (int r = 1; r < g.size; r++)
        ctl_recv(CTL_READY);
    struct load_out o;
    load_recv(budget_ns, size, samples, LAT_MAX_ITERS, &o);
    uint64_t ns = o.n < LAT_MAX_ITERS ? o.n : LAT_MAX_ITERS;
    uint64_t t50 = 0, t99 = 0;
    if (ns) med_p99(samples, ns, &t50, &t99);
    double med = (double)t50 / 1000.0, p99 = (double)t99 / 1000.0;
    double acc = (double)o.n_fin / o.secs; /* messages per second received */
    if (!level) load_peak = acc;
    if (!opt.csv_stdout) {
        progress_clear();
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
        csv_row_s(op, "load_peak", size, acc / 1e6, "Mmsg/s");
        csv_row_s(op, "load_peak_lat", size, med, "us");
        csv_row_s(op, "load_peak_p99", size, p99, "us");
    } else {
        csv_row_s(op, "load", level, med, "us");
        csv_row_s(op, "load_p99", level, p99, "us");
        csv_row_s(op, "load_offered", level, rate * senders / 1e6, "Mmsg/s");
        csv_row_s(op, "load_accepted", level, acc / 1e6, "Mmsg/s");
    }
}

static bool size_ok(int op, int test, size_t s)
{
    if (test == T_RATE && s > opt.rate_max) return false;
    if (test == T_CACHE && is_nap(op)) return false;
    if (op == OP_NAP) return s <= g.info.nap_max;
    if (op == OP_NAP_INLINE) return s <= g.info.inline_max && s <= g.info.nap_max;
    return true;
}

struct point {
    int test, op;
    size_t size;
    unsigned arg; /* rate: window; cache: 1 cold / 0 warm; load: level (0: peak) */
};

static struct point *plan;
static int nplan;

static void plan_add(int test, int op, size_t size, unsigned arg)
{
    struct point *p = realloc(plan, (size_t)(nplan + 1) * sizeof *p);
    if (!p) die("out of memory");
    plan = p;
    plan[nplan++] = (struct point){test, op, size, arg};
}

/* Why a scenario cannot run with these options, or NULL. */
static const char *test_skip(int t)
{
    if (t == T_CACHE && opt.malloc_mem)
        return "--mem malloc: peers reach such memory with process_vm_*, no translation cache";
    if (t == T_CACHE && !g.info.shm_direct)
        return "shm_direct=0: PUT/GET go through the rings, no translation cache";
    if (t == T_LOAD && opt.load_size > g.info.nap_max) return "--load-size is above nap_max";
    return NULL;
}

static void make_plan(void)
{
    for (int t = 0; t < NTESTS; t++) {
        if (!(opt.tests >> t & 1)) continue;
        const char *why = test_skip(t);
        if (why) {
            fprintf(hdr, "# %s: skipped (%s)\n", test_names[t], why);
            continue;
        }
        if (t == T_LOAD) {
            plan_add(t, OP_NAP, opt.load_size, 0);
            for (int l = 0; l < opt.nlevels; l++)
                plan_add(t, OP_NAP, opt.load_size, opt.levels[l]);
            continue;
        }
        for (int op = 0; op < NOPS; op++) {
            if (!(opt.ops >> op & 1)) continue;
            if (t == T_FAIR) {
                /* nap-inline streams are the same NAPs, only smaller. */
                if (op != OP_NAP_INLINE) plan_add(t, op, fair_size(op), 0);
                continue;
            }
            bool any = false;
            for (int i = 0; i < opt.nsizes; i++) {
                size_t s = opt.sizes[i];
                if (!size_ok(op, t, s)) continue;
                any = true;
                if (t == T_RATE)
                    for (int w = 0; w < opt.nwindows; w++)
                        plan_add(t, op, s, opt.windows[w]);
                else if (t == T_CACHE)
                    plan_add(t, op, s, 1), plan_add(t, op, s, 0);
                else
                    plan_add(t, op, s, 0);
            }
            if (!any && !(t == T_CACHE && is_nap(op)))
                fprintf(hdr, "# %s %s: skipped, no size fits (nap_max %u, inline_max %u%s)\n",
                        op_names[op], test_names[t], g.info.nap_max, g.info.inline_max,
                        t == T_RATE ? ", --rate-max" : "");
        }
    }
}

static void section_head(const struct point *pt)
{
    if (opt.csv_stdout) {
        if (pt->test == T_LOAD || pt->test == T_FAIR) goto note;
        return;
    }
    progress_clear();
note:
    if (pt->test == T_LOAD) {
        int senders = g.size - 1;
        char who[32] = "rank 1";
        if (senders > 1) snprintf(who, sizeof who, "ranks 1..%d", senders);
        fprintf(hdr,
                "# load: %d sender%s (%s) -> rank 0, NAP %zu B%s, %.0f ms per level; "
                "latency = receive time - the sender's post time (CLOCK_MONOTONIC)\n",
                senders, senders > 1 ? "s" : "", who, opt.load_size,
                opt.load_size <= g.info.inline_max ? " inline" : "", point_ms() * 2);
        fprintf(hdr, "# load: %s\n", load_cpu_note);
        if (!opt.csv_stdout)
            printf("%-8s %14s %15s %12s %12s %10s\n", "offered", "offered_Mmsg/s",
                   "accepted_Mmsg/s", "median_us", "p99_us", "messages");
    } else if (pt->test == T_FAIR) {
        fprintf(hdr,
                "# fair: %d endpoints of rank 0, one CQ, %u operations outstanding each, %.0f "
                "ms, sampled every %u ms (shares over time: CSV rows fair_ep*, fair_jain)\n",
                g.nfair, opt.window > g.info.sq_depth ? g.info.sq_depth : opt.window, fair_run_ms(),
                fair_sample_ms());
        if (!opt.csv_stdout) table_head();
    } else {
        table_head();
    }
    fflush(hdr);
}

static void drive(void)
{
    make_plan();
    for (int i = 0; i < nplan; i++) {
        const struct point *pt = &plan[i];
        bool first =
            !i || pt->test != plan[i - 1].test || (pt->op != plan[i - 1].op && pt->test != T_LOAD);
        bool new_section = !i || pt->test != plan[i - 1].test;
        if (new_section) section_head(pt);
        char label[96], group[96], sz[32];
        size_str(pt->size, sz, sizeof sz);
        if (pt->test == T_LOAD && pt->arg)
            snprintf(label, sizeof label, "load %u%%", pt->arg);
        else if (pt->test == T_LOAD)
            snprintf(label, sizeof label, "load peak");
        else if (pt->test == T_RATE)
            snprintf(label, sizeof label, "%s rate w=%u %s B", op_names[pt->op], pt->arg, sz);
        else if (pt->test == T_CACHE)
            snprintf(label, sizeof label, "%s cache %s %s B", op_names[pt->op],
                     pt->arg ? "cold" : "warm", sz);
        else
            snprintf(label, sizeof label, "%s %s %s B", op_names[pt->op], test_names[pt->test], sz);
        if (pt->test == T_LOAD)
            snprintf(group, sizeof group, "load, %d sender%s", g.size - 1, g.size > 2 ? "s" : "");
        else
            snprintf(group, sizeof group, "%s %s", op_names[pt->op], test_names[pt->test]);
        progress(i, nplan, label, first ? group : NULL);
        switch (pt->test) {
        case T_CACHE:
            measure_cache(pt->op, pt->size, pt->arg);
            break;
        case T_FAIR:
            measure_fair(pt->op);
            break;
        case T_LOAD:
            load_point(pt->arg);
            break;
        default:
            measure(pt->op, pt->test, pt->size, pt->test == T_RATE ? pt->arg : opt.window);
        }
        g.where[0] = 0;
    }
    progress_clear();
}

/* ------------------------------------------------------------------------- */
/* Plots: gnuplot scripts, run by gnuplot as an external program               */
/* ------------------------------------------------------------------------- */

/* Rows from a CSV of the same columns (another run, or a peer's figures that
 * bench/compare wrote). Returns the number of rows taken, or -errno. */
static int load_csv_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -errno;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char *fld[6], *save = NULL;
        int k = 0;
        line[strcspn(line, "\r\n")] = 0;
        for (char *t = strtok_r(line, ",", &save); t && k < 6; t = strtok_r(NULL, ",", &save))
            fld[k++] = t;
        if (k < 6 || !strcmp(fld[0], "transport") || !strcmp(fld[0], "platform")) continue;
        char *e1, *e2;
        double size = strtod(fld[3], &e1), value = strtod(fld[4], &e2);
        if (*e1 || *e2 || e1 == fld[3] || e2 == fld[4]) continue;
        row_add(fld[0], fld[1], fld[2], size, value, fld[5]);
        n++;
    }
    fclose(f);
    return n;
}

static bool is_ulnet_tr(const char *tr)
{
    return !strcmp(tr, "shm") || !strcmp(tr, "udp") ||
           (g.info.transport && !strcmp(tr, g.info.transport));
}

struct plotspec {
    const char *name, *title, *xlabel, *ylabel;
    bool logx, logy, xbytes;
    const char *tests[2]; /* rows with one of these tests ... */
    const char *prefix;   /* ... or whose test starts with this */
    bool x_from_test;     /* x is the number after the prefix (rate: the window) */
    double only_size;     /* only rows of this size (0: any) */
    const char *op, *tr;  /* only this op / transport (NULL: any) */
    const char *y2test;   /* drawn on the second axis (fair: Jain's index) */
};

static bool plot_match(const struct plotspec *ps, const struct row *r)
{
    if (ps->op && strcmp(r->op, ps->op)) return false;
    if (ps->tr && strcmp(r->tr, ps->tr)) return false;
    if (ps->only_size && r->size != ps->only_size) return false;
    if (ps->prefix) return !strncmp(r->test, ps->prefix, strlen(ps->prefix));
    for (int i = 0; i < 2; i++)
        if (ps->tests[i] && !strcmp(r->test, ps->tests[i])) return true;
    return false;
}

static void plot_key(const struct plotspec *ps, const struct row *r, char *key, size_t n)
{
    if (ps->x_from_test)
        snprintf(key, n, "%s|%s|%g", r->tr, r->op, r->size);
    else
        snprintf(key, n, "%s|%s|%s", r->tr, r->op, r->test);
}

static double plot_x(const struct plotspec *ps, const struct row *r)
{
    return ps->x_from_test ? atof(r->test + strlen(ps->prefix)) : r->size;
}

static void plot_title(const struct plotspec *ps, const struct row *r, char *t, size_t n)
{
    char who[40];
    if (is_ulnet_tr(r->tr))
        snprintf(who, sizeof who, "ulnet/%s", r->tr);
    else
        snprintf(who, sizeof who, "%s", r->tr);
    if (ps->prefix && !ps->x_from_test) /* fair: one series per endpoint */
        snprintf(t, n, "%s", r->test + strlen(ps->prefix) - 2);
    else if (ps->tests[1])
        snprintf(t, n, "%s %s %s", who, r->op, r->test);
    else
        snprintf(t, n, "%s %s", who, r->op);
}

static int cmp_xy(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Writes DIR/NAME.gp: data blocks and the commands for NAME.png and
 * NAME.svg. Returns false when no row matches (no plot). */
static bool plot_script(const struct plotspec *ps, const char *dir)
{
    enum { MAXS = 64 };
    char keys[MAXS][96];
    int first[MAXS], ns = 0;
    for (size_t i = 0; i < nrows; i++) {
        if (!plot_match(ps, &rows[i])) continue;
        char k[96];
        plot_key(ps, &rows[i], k, sizeof k);
        int s = 0;
        while (s < ns && strcmp(keys[s], k))
            s++;
        if (s == ns && ns < MAXS) {
            snprintf(keys[ns], sizeof keys[ns], "%s", k);
            first[ns++] = (int)i;
        }
    }
    if (!ns) return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.gp", dir, ps->name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "ulnperf: --plot: cannot write %s: %s\n", path, strerror(errno));
        return false;
    }
    fprintf(f, "# made by ulnperf --plot; render with: gnuplot %s.gp\n", ps->name);
    double *xy = malloc(nrows * 2 * sizeof *xy);
    for (int s = 0; s <= ns && xy; s++) {
        /* s == ns: the second-axis series, if any */
        size_t m = 0;
        for (size_t i = 0; i < nrows; i++) {
            const struct row *r = &rows[i];
            if (s < ns) {
                char k[96];
                if (!plot_match(ps, r)) continue;
                plot_key(ps, r, k, sizeof k);
                if (strcmp(k, keys[s])) continue;
            } else if (!ps->y2test || strcmp(r->test, ps->y2test) ||
                       (ps->op && strcmp(r->op, ps->op)) || (ps->tr && strcmp(r->tr, ps->tr))) {
                continue;
            }
            xy[2 * m] = plot_x(ps, r), xy[2 * m + 1] = r->value, m++;
        }
        if (s == ns && !m) break;
        qsort(xy, m, 2 * sizeof *xy, cmp_xy);
        fprintf(f, "$d%d << EOD\n", s);
        for (size_t i = 0; i < m; i++)
            fprintf(f, "%.9g %.9g\n", xy[2 * i], xy[2 * i + 1]);
        fprintf(f, "EOD\n");
    }
    bool y2 = false;
    if (xy && ps->y2test)
        for (size_t i = 0; i < nrows && !y2; i++)
            y2 = !strcmp(rows[i].test, ps->y2test) && (!ps->op || !strcmp(rows[i].op, ps->op)) &&
                 (!ps->tr || !strcmp(rows[i].tr, ps->tr));
    free(xy);
    fprintf(f, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n", ps->title, ps->xlabel,
            ps->ylabel);
    fprintf(f, "set grid\nset key outside right top\n");
    if (ps->logx) fprintf(f, "set logscale x 2\n");
    if (ps->xbytes) fprintf(f, "set xtics 1,8\nset format x '%%.0b%%B'\n");
    if (ps->logy) fprintf(f, "set logscale y 10\n");
    if (y2) {
        /* Shares on a scale where equal ones sit mid-plot, the index on the
         * right from 0 to 1: "converging to equal" reads at a glance. */
        fprintf(f, "set y2label \"Jain's index\"\nset y2range [0:1.05]\nset y2tics 0.1\n");
        fprintf(f, "set yrange [0:%g]\nset ytics nomirror\n", ns > 1 ? 2.5 / ns : 1.0);
    }
    /* PNG first, then the same plot again as SVG. The PNG through libgd
     * (palette colours, no antialiasing): a tenth of the size of a cairo one,
     * small enough to commit; the SVG is there for quality. */
    fprintf(f, "set terminal png size 900,500 noenhanced\nset output '%s/%s.png'\n", dir, ps->name);
    fprintf(f, "plot ");
    for (int s = 0; s < ns; s++) {
        char t[96];
        plot_title(ps, &rows[first[s]], t, sizeof t);
        for (char *c = t; *c; c++)
            if (*c == '\'') *c = '`';
        /* Peers dashed with open points, ulnet solid with filled ones: the
         * two families stay apart at a glance (libgd draws no dashes). */
        bool peer = !is_ulnet_tr(rows[first[s]].tr);
        /* Our own colours: gnuplot's default cycle repeats after 8 series. */
        static const char *const colour[] = {"#9400d3", "#009e73", "#56b4e9", "#e69f00",
                                             "#0072b2", "#d55e00", "#cc79a7", "#000000",
                                             "#7f7f7f", "#b8860b", "#228b22", "#dc143c"};
        fprintf(f, "%s$d%d using 1:2 with %s%s lc rgb '%s' title '%s'", s ? ", \\\n     " : "", s,
                y2     ? "lines lw 1"
                : peer ? "linespoints lw 2 pt 6 ps 1"
                       : "linespoints lw 2 pt 7 ps 0.8",
                peer ? " dt 2" : "", colour[s % 12], t);
    }
    if (y2)
        fprintf(f,
                ", \\\n     $d%d using 1:2 axes x1y2 with lines lw 3 lc 'gray20' dt 2 title "
                "\"Jain's index\"",
                ns);
    fprintf(f, "\n");
    fprintf(f,
            "set terminal svg size 960,540 noenhanced font 'sans,10' background '#ffffff'\n"
            "set output '%s/%s.svg'\nreplot\nunset output\n",
            dir, ps->name);
    fclose(f);
    return true;
}

static bool in_path(const char *prog)
{
    const char *p = getenv("PATH");
    char buf[4096];
    while (p && *p) {
        size_t n = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? p : ".", prog);
        if (!access(buf, X_OK)) return true;
        p += n + (p[n] == ':');
    }
    return false;
}

static int run_gnuplot(const char *dir, const char *name)
{
    char script[4096];
    snprintf(script, sizeof script, "%s/%s.gp", dir, name);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        /* gnuplot's own terminal (the "dumb" default with no display) would
         * print the first plot as text before our PNG command: hide stdout. */
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void make_plots(FILE *out)
{
    const char *dir = opt.plot_dir;
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "ulnperf: --plot: cannot create %s: %s\n", dir, strerror(errno));
        return;
    }
    /* The rate plot shows one message size: 8 B, or the smallest there is. */
    double rsize = 0;
    for (size_t i = 0; i < nrows; i++)
        if (!strncmp(rows[i].test, "rate_w", 6) &&
            (rsize == 0 || rows[i].size == 8 || (rsize != 8 && rows[i].size < rsize)))
            rsize = rows[i].size;
    char rtitle[96];
    snprintf(rtitle, sizeof rtitle, "Message rate vs operations outstanding, %g B messages", rsize);
    struct plotspec specs[16] = {
        {.name = "latency",
         .title = "One-way latency vs payload (median; GET: full round trip)",
         .xlabel = "payload (bytes)",
         .ylabel = "latency (us)",
         .logx = true,
         .logy = true,
         .xbytes = true,
         .tests = {"lat"}},
        {.name = "bandwidth",
         .title = "Bandwidth vs payload (bibw curves: both directions together)",
         .xlabel = "payload (bytes)",
         .ylabel = "GB/s",
         .logx = true,
         .xbytes = true,
         .tests = {"bw", "bibw"}},
        {.name = "rate",
         .title = rtitle,
         .xlabel = "operations outstanding (window)",
         .ylabel = "million messages per second",
         .logx = true,
         .prefix = "rate_w",
         .x_from_test = true,
         .only_size = rsize},
        {.name = "load",
         .title = "Latency vs offered load, N senders into one receiver",
         .xlabel = "offered load (% of the measured peak)",
         .ylabel = "one-way latency (us)",
         .logy = true,
         .tests = {"load", "load_p99"}},
        {.name = "cache",
         .title = "First touch (cold translation) vs warm, one operation at a time",
         .xlabel = "payload (bytes)",
         .ylabel = "time per operation (us)",
         .logx = true,
         .logy = true,
         .xbytes = true,
         .tests = {"cache_cold", "cache_warm"}},
    };
    int nspec = 5;
    /* fair: one plot per (transport, op) that has endpoint shares. */
    static char fnames[8][64], ftitles[8][128], fops[8][24], ftrs[8][24];
    int nf = 0;
    for (size_t i = 0; i < nrows && nf < 8; i++) {
        if (strncmp(rows[i].test, "fair_ep", 7)) continue;
        int k = 0;
        while (k < nf && (strcmp(fops[k], rows[i].op) || strcmp(ftrs[k], rows[i].tr)))
            k++;
        if (k < nf) continue;
        snprintf(fops[nf], sizeof fops[nf], "%s", rows[i].op);
        snprintf(ftrs[nf], sizeof ftrs[nf], "%s", rows[i].tr);
        snprintf(fnames[nf], sizeof fnames[nf], "fair_%s_%s", rows[i].tr, rows[i].op);
        snprintf(ftitles[nf], sizeof ftitles[nf],
                 "Share of each endpoint over time, %s %s streams (sampled)", rows[i].tr,
                 rows[i].op);
        specs[nspec++] = (struct plotspec){.name = fnames[nf],
                                           .title = ftitles[nf],
                                           .xlabel = "time (ms)",
                                           .ylabel = "share of the bytes moved",
                                           .prefix = "fair_ep",
                                           .op = fops[nf],
                                           .tr = ftrs[nf],
                                           .y2test = "fair_jain"};
        nf++;
    }
    bool gp = in_path("gnuplot");
    int made = 0;
    for (int i = 0; i < nspec; i++) {
        if (!plot_script(&specs[i], dir)) continue;
        made++;
        if (!gp) continue;
        int rc = run_gnuplot(dir, specs[i].name);
        if (rc)
            fprintf(stderr, "ulnperf: --plot: gnuplot failed on %s/%s.gp (status %d)\n", dir,
                    specs[i].name, rc);
        else
            fprintf(out, "# plot: %s/%s.png and .svg\n", dir, specs[i].name);
    }
    if (!made)
        fprintf(stderr, "ulnperf: --plot: nothing to plot\n");
    else if (!gp)
        fprintf(stderr,
                "ulnperf: --plot: gnuplot is not installed (Debian: apt-get install gnuplot-nox); "
                "the scripts are in %s/*.gp: run 'gnuplot FILE.gp' there to make the PNG and "
                "SVG files\n",
                dir);
}

/* ------------------------------------------------------------------------- */
/* Set-up                                                                     */
/* ------------------------------------------------------------------------- */

/* The CPUs this process may run on, in order. */
static int allowed_cpus(int *cpus, int max)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set)) return -errno;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

/* The CPU rank r should have: rank 0 (the one that measures, and the load
 * receiver) the first allowed CPU to itself; rank 1 the second, so the two
 * busy-polling ranks of the 2-rank scenarios never share one; further ranks
 * (load senders, which pace by sleeping) spread over the CPUs after the first.
 * -EXDEV: fewer than two CPUs, no pinning. */
static int cpu_for_rank(int rank, const int *cpus, int ncpu)
{
    if (ncpu < 2) return -EXDEV;
    return rank == 0 ? cpus[0] : cpus[1 + (rank - 1) % (ncpu - 1)];
}

/* Returns the CPU, or -errno / -EXDEV (too few). */
static int pin_self(int rank, int *ncpu)
{
    int cpus[CPU_SETSIZE];
    *ncpu = allowed_cpus(cpus, CPU_SETSIZE);
    if (*ncpu < 0) return *ncpu;
    int cpu = cpu_for_rank(rank, cpus, *ncpu);
    if (cpu < 0) return cpu;
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

#define MAX_RANKS 64 /* every HELLO, READY and DONE fits in the control inbox */

/* A job of one rank needs no transport: plot saved CSVs and leave. */
static int plot_only(void)
{
    for (int i = 0; i < opt.npeer; i++) {
        int n = load_csv_file(opt.peer_csv[i]);
        if (n < 0) {
            fprintf(stderr, "ulnperf: cannot read %s: %s\n", opt.peer_csv[i], strerror(-n));
            return 1;
        }
    }
    make_plots(stdout);
    return 0;
}

/* Ranks >= 2 and their CPUs, for the load scenario's header. */
static void note_load_cpus(const int *rcpu, int cpu0)
{
    int senders = g.size - 1, shared0 = 0, unpinned = 0, ncpus = 0, distinct[MAX_RANKS];
    for (int r = 1; r < g.size; r++) {
        if (rcpu[r] < 0) {
            unpinned++;
            continue;
        }
        if (rcpu[r] == cpu0) shared0++;
        int k = 0;
        while (k < ncpus && distinct[k] != rcpu[r])
            k++;
        if (k == ncpus) distinct[ncpus++] = rcpu[r];
    }
    int n = snprintf(load_cpu_note, sizeof load_cpu_note, "%d sender%s on %d CPU%s", senders,
                     senders > 1 ? "s" : "", ncpus, ncpus == 1 ? "" : "s");
    if (unpinned)
        n += snprintf(load_cpu_note + n, sizeof load_cpu_note - (size_t)n, ", %d not pinned",
                      unpinned);
    if (cpu0 >= 0 && !shared0 && !unpinned)
        n += snprintf(load_cpu_note + n, sizeof load_cpu_note - (size_t)n,
                      ", the receiver alone on cpu %d", cpu0);
    if (senders > ncpus || unpinned)
        snprintf(load_cpu_note + n, sizeof load_cpu_note - (size_t)n,
                 "; senders share CPUs: they pace by sleeping and wait in uln_cq_wait, so the "
                 "peak is what their CPUs can post, not what rank 0 can take");
}

int main(int argc, char **argv)
{
    /* The rank is needed before uln_open (CPU pinning): ulnrun's or ULN_ROOT's
     * ULN_RANK, or under mpirun or srun --mpi=pmix the PMIx server's PMIX_RANK
     * (the library then joins through PMIx). */
    const char *re = getenv("ULN_RANK");
    if (!re || !*re) re = getenv("PMIX_RANK");
    if (re && !*re) re = NULL;
    int env_rank = re ? atoi(re) : 0;
    char who[32] = "";
    if (re) snprintf(who, sizeof who, "rank %d: ", env_rank);
    int pr = parse_args(argc, argv, who);
    if (pr > 0 && env_rank == 0) usage(stdout); /* once per job, not per rank */
    if (pr) return pr > 0 ? 0 : 2;
    if (!re) {
        if (opt.plot_dir && opt.npeer) return plot_only();
        fprintf(stderr, "ulnperf: ULN_RANK is not set; start it with: ulnrun -n 2 ulnperf (or "
                        "mpirun -n 2 ulnperf)\n"
                        "         (or plot saved results: ulnperf --plot DIR --peer-csv FILE)\n");
        return 2;
    }
    g.rank = env_rank;
    /* The library picks its transport from the environment. */
    if (opt.transport && setenv("ULN_TRANSPORT", opt.transport, 1)) {
        fprintf(stderr, "ulnperf: setenv: %s\n", strerror(errno));
        return 1;
    }

    /* Pin before uln_open so anything the library starts inherits the CPU. */
    int cpus[CPU_SETSIZE], ncpu = 0;
    int nallowed = allowed_cpus(cpus, CPU_SETSIZE);
    int peer_cpu = nallowed >= 2 ? cpu_for_rank(1, cpus, nallowed) : -1;
    int cpu = pin_self(g.rank, &ncpu);
    g.yield = ncpu < 2;

    int rc = uln_open(NULL, &g.ctx);
    if (rc) {
        fprintf(stderr, "ulnperf: rank %d: uln_open: %s\n", g.rank, uln_strerror(rc));
        return 1;
    }
    if (uln_rank(g.ctx) != g.rank) die("uln_rank %d but ULN_RANK=%d", uln_rank(g.ctx), g.rank);
    g.size = uln_size(g.ctx);
    if (g.size < 2 || g.size > MAX_RANKS)
        die("needs 2 to %d ranks (ulnrun -n N), job has %d", MAX_RANKS, g.size);
    g.peer = g.rank == 0 ? 1 : 0;
    /* Ranks that share CPUs (load senders) must not spin while they wait. */
    g.sleep_wait = g.rank >= 1 && g.size > 2;
    if ((rc = uln_query(g.ctx, &g.info))) die("uln_query: %s", uln_strerror(rc));
    if (opt.transport && strcmp(g.info.transport, opt.transport))
        die("asked for transport %s (ULN_TRANSPORT=%s), but the library runs %s: this build has "
            "no %s transport",
            opt.transport, opt.transport, g.info.transport, opt.transport);
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
    bool fair = opt.tests >> T_FAIR & 1;
    if (fair && g.rank <= 1) {
        /* Opened by ranks 0 and 1 alike: the i-th endpoint talks to the i-th. */
        if (2 + opt.fair_eps > g.info.max_eps)
            die("fair needs %u endpoints besides the 2 of ulnperf, max_eps is %u (ULN_MAX_EPS)",
                opt.fair_eps, g.info.max_eps);
        for (unsigned i = 0; i < opt.fair_eps; i++) {
            if ((rc = uln_ep_open(g.ctx, g.cq, g.cq, &g.fair[i])))
                die("uln_ep_open (fair endpoint %u): %s", i, uln_strerror(rc));
            if (i && uln_ep_index(g.fair[i]) != g.fair_idx0 + (int)i)
                die("fair endpoints are not numbered in order");
            if (!i) g.fair_idx0 = uln_ep_index(g.fair[i]);
        }
        g.nfair = (int)opt.fair_eps;
    }

    if (g.rank <= 1) {
        size_t maxs = 0;
        for (int i = 0; i < opt.nsizes; i++)
            if (opt.sizes[i] > maxs) maxs = opt.sizes[i];
        bool pg = opt.ops & (1u << OP_PUT | 1u << OP_GET);
        unsigned big = 1u << T_LAT | 1u << T_BW | 1u << T_BIBW | 1u << T_RATE | 1u << T_CACHE;
        g.buf_len = 4096;
        if (pg && (opt.tests & big) && maxs > g.buf_len) g.buf_len = maxs;
        if (pg && fair && opt.fair_eps * opt.fair_size > g.buf_len)
            g.buf_len = opt.fair_eps * opt.fair_size;
        g.buf_len = (g.buf_len + 4095) & ~(size_t)4095;
        g.tgt = buf_alloc(g.buf_len);
        g.loc = buf_alloc(g.buf_len);
        if ((rc = uln_mr_reg(g.ctx, g.tgt, g.buf_len,
                             ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &g.mr)))
            die("uln_mr_reg(%zu B): %s", g.buf_len, uln_strerror(rc));
    }
    g.napbuf = aligned_alloc(64, ((size_t)g.info.nap_max + 64) & ~(size_t)63);
    if (!g.napbuf) die("out of memory");
    memset(g.napbuf, 0x5a, g.info.nap_max);
    if (g.rank >= 1 && (opt.tests >> T_LOAD & 1) && opt.load_size > g.info.inline_max &&
        opt.load_size <= g.info.nap_max) {
        load_pool = aligned_alloc(64, (LOAD_CAP * opt.load_size + 63) & ~(size_t)63);
        if (!load_pool) die("out of memory");
        memset(load_pool, 0x3c, LOAD_CAP * opt.load_size);
    }

    /* Every rank has opened its endpoints before anyone sends. */
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));
    /* The others sleep in a second barrier (a futex: off their CPUs) while
     * rank 0 measures the cache-line floor between the two pinned CPUs. */
    double floor_us = -1;
    if (g.rank == 0 && cpu >= 0 && peer_cpu >= 0 && peer_cpu != cpu)
        floor_us = line_floor_us(peer_cpu);
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));

    /* HELLO: ranks 0 and 1 exchange their region keys; everyone tells rank 0
     * where it is pinned. */
    struct ctl_msg h = {.a = g.mr ? uln_mr_key(g.mr) : 0, .b = g.buf_len, .cpu = cpu, .ncpu = ncpu};
    snprintf(h.text, sizeof h.text, "%s", opt.malloc_mem ? "malloc" : "ulnet");
    int rcpu[MAX_RANKS], rncpu[MAX_RANKS];
    rcpu[g.rank] = cpu, rncpu[g.rank] = ncpu;
    if (g.rank <= 1) ctl_send(CTL_HELLO, &h);
    if (g.rank >= 2) ctl_send_to(0, CTL_HELLO, &h);
    for (int k = 0; k < (g.rank == 0 ? g.size - 1 : g.rank == 1 ? 1 : 0); k++) {
        struct ctl_msg ph = ctl_recv(CTL_HELLO);
        if (ph.src < 0 || ph.src >= g.size) die("HELLO from rank %d", ph.src);
        rcpu[ph.src] = ph.cpu, rncpu[ph.src] = ph.ncpu;
        if (ph.src > 1) continue;
        g.peer_key = ph.a;
        if (ph.b != g.buf_len || strcmp(ph.text, h.text))
            die("ranks 0 and 1 disagree on buffers (%" PRIu64 " B %s vs %zu B %s): same options?",
                ph.b, ph.text, g.buf_len, h.text);
        g.yield |= cpu >= 0 && cpu == ph.cpu;
    }

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
                "sq_depth=%u ring_bytes=%u chunk_bytes=%u ranks=%d\n",
                g.info.transport, g.info.nap_max, g.info.inline_max, g.info.shm_direct,
                g.info.shm_cma, g.info.sq_depth, g.info.ring_bytes, g.info.chunk_bytes, g.size);
        char p[96];
        describe_pin(p, sizeof p, 0, cpu, ncpu);
        bool distinct = cpu >= 0 && rcpu[1] >= 0 && cpu != rcpu[1];
        fprintf(hdr, distinct ? "# pinned: %s" : "# NOT pinned to distinct CPUs: %s", p);
        for (int r = 1; r < g.size; r++) {
            describe_pin(p, sizeof p, r, rcpu[r], rncpu[r]);
            fprintf(hdr, ", %s", p);
        }
        fprintf(hdr, "%s\n",
                !distinct && g.yield ? " (spin loops yield; numbers are not meaningful)" : "");
        if (g.size == 3)
            fprintf(hdr, "# rank 2 takes part in load only, asleep in uln_cq_wait otherwise\n");
        else if (g.size > 3)
            fprintf(hdr, "# ranks 2..%d take part in load only, asleep in uln_cq_wait otherwise\n",
                    g.size - 1);
        note_load_cpus(rcpu, cpu);
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
        fflush(hdr);

        samples = malloc(sizeof *samples * (opt.iters > LAT_MAX_ITERS ? opt.iters : LAT_MAX_ITERS));
        if (!samples) die("out of memory");
        drive();
        struct ctl_msg q = {0};
        for (int r = 1; r < g.size; r++)
            ctl_send_to(r, CTL_QUIT, &q);
        free(samples);
    } else {
        serve();
    }

    /* The peer may still be inside our memory until both get here. */
    ctl_drain();
    if ((rc = uln_barrier(g.ctx, 60000))) die("final uln_barrier: %s", uln_strerror(rc));
    /* The floor again, with the others asleep: the host may have moved our
     * CPUs during the run. */
    if (floor_us > 0) {
        double end_us = line_floor_us(peer_cpu);
        fprintf(hdr, "# floor at the end: %.3f us one-way (at the start: %.3f us)\n", end_us,
                floor_us);
        if (csv) fprintf(csv, "platform,cacheline,lat_end,64,%.4f,us\n", end_us);
    }
    if (g.rank == 0 && csv && csv != stdout && fclose(csv))
        die("writing %s: %s", opt.csv_path, strerror(errno));
    if ((rc = uln_barrier(g.ctx, 60000))) die("uln_barrier: %s", uln_strerror(rc));
    g.ctl = NULL; /* from here a failure is not worth an ABORT message */
    if (g.mr && (rc = uln_mr_dereg(g.mr))) die("uln_mr_dereg: %s", uln_strerror(rc));
    buf_free(g.tgt);
    buf_free(g.loc);
    free(g.napbuf);
    free(load_pool);
    if ((rc = uln_close(g.ctx))) die("uln_close: %s", uln_strerror(rc));
    /* Plots last, with the library closed: gnuplot is a child process. */
    if (g.rank == 0 && opt.plot_dir) {
        for (int i = 0; i < opt.npeer; i++)
            if (load_csv_file(opt.peer_csv[i]) < 0)
                fprintf(stderr, "ulnperf: --peer-csv %s: %s\n", opt.peer_csv[i], strerror(errno));
        make_plots(hdr);
    }
    return 0;
}
