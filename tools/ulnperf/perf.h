/*
 * ulnperf's parts, shared by its files: the options, the job's context (one
 * struct perf, passed to every function that needs the job), the control
 * protocol between the ranks, and what the scenario families plug in.
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
#ifndef ULNPERF_PERF_H
#define ULNPERF_PERF_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

#include "floor.h"
#include "ulnet.h"

/* ------------------------------------------------------------------------- */
/* Options (options.c)                                                        */
/* ------------------------------------------------------------------------- */

enum { OP_NAP, OP_NAP_INLINE, OP_PUT, OP_GET, OP_ATOMIC, NOPS };
enum { T_LAT, T_BW, T_BIBW, T_RATE, T_CACHE, T_FAIR, T_LOAD, T_INCAST, NTESTS };
extern const char *const op_names[NOPS];
extern const char *const test_names[NTESTS];

#define MAX_SIZES   64
#define MAX_WINDOWS 16
#define MAX_LEVELS  32
#define MAX_FAIR    32
#define MAX_RANKS   64 /* every HELLO, READY and DONE fits in the control inbox */
/* The bw test's message rate is only interesting where per-message cost
 * dominates. */
#define BW_RATE_MAX_SIZE 65536u
#define LAT_MAX_ITERS    2000000u /* 16 MB of samples: ~0.1 s at the fastest op */
#define BW_MAX_ITERS     1000000000u
#define LOAD_CAP         128 /* load: sends in flight per sender, well under sq_depth */

struct perf_opts {
    unsigned ops;   /* bit per OP_* */
    unsigned tests; /* bit per T_* */
    size_t sizes[MAX_SIZES];
    int nsizes;
    bool quick;
    uint64_t iters; /* 0: adapt to the time budget */
    unsigned window;
    bool silent; /* bw, rate: ULN_SILENT posts, a flush per half window */
    bool now;    /* lat of get/atomic: ULN_NOW posts (tests lat_now, lat_now_p99) */
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
    double incast_ms; /* incast: length of a size's run; 0: 3 points */
    const char *transport;
    unsigned iov; /* PUT/GET: 0 one buffer, else uln_putv/uln_getv of this many segments */
};

void perf_usage(FILE *f);
int perf_parse_args(struct perf_opts *o, int argc, char **argv, const char *who, bool report);

/* ------------------------------------------------------------------------- */
/* The control protocol                                                       */
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
#define CTL_MAGIC 0x6c6e7066u /* "fpnl" */

struct ctl_msg {
    uint32_t magic, type;
    uint32_t op, test;
    uint64_t size, iters, window, pattern;
    uint64_t a, b;     /* HELLO: key, region length; DONE: data ok, bytes received */
    uint64_t key;      /* cache: the region's key; HELLO: the sender's machine_id */
    double rate;       /* load: messages per second per sender, 0: as fast as it can */
    int32_t cpu, ncpu; /* HELLO: pinning result (cpu or -errno), CPUs allowed */
    int32_t src;       /* set on receipt: the rank that sent it */
    uint32_t variant;  /* cache: 1 cold, 0 warm */
    char text[96];
};

#define CTL_SLOTS  8
#define INBOX      128
#define POLL_BATCH 16
/* The control endpoint has a CQ of its own, which the hot loops poll only
 * every CTL_POLL_EVERY polls: over udp each endpoint is a socket, and reading
 * a second one in every pass would put a system call into every measured
 * wait (and half of one into every latency point) that no user of one
 * endpoint pays. A control message waits a few passes at most. */
#define CTL_POLL_EVERY 16
#define STALL_S        15 /* no op takes seconds; a longer wait is a hang */

/* ------------------------------------------------------------------------- */
/* The job's context                                                          */
/* ------------------------------------------------------------------------- */

struct perf {
    const struct perf_opts *opt;
    int rank, size;
    int peer; /* rank 0 <-> 1; load senders -> 0 */
    struct uln_ctx *ctx;
    struct uln_cq *cq;     /* the measured endpoints' completions */
    struct uln_cq *ctl_cq; /* the control endpoint's, looked at every CTL_POLL_EVERY polls */
    unsigned polls;        /* perf_poll calls: every CTL_POLL_EVERY-th takes ctl_cq too */
    struct uln_ep *ep, *ctl;
    struct uln_ep *fair[MAX_FAIR];
    int ep_idx, ctl_idx, fair_idx0, nfair;
    struct uln_info info;
    char csv_tp[16]; /* the CSV's transport column: info.transport, with "xdp" for the
                        udp of a measured endpoint on the AF_XDP link */
    void *tgt, *loc; /* PUT/GET: remote target region, local source/destination */
    size_t buf_len;
    struct uln_mr *mr;
    uint64_t peer_key;
    void *napbuf;
    uint8_t *load_pool; /* load senders: buffers of NAPs above inline_max */
    bool yield;         /* both ranks may share a CPU: spinning must let the other run */
    bool sleep_wait;    /* wait for control messages in uln_cq_wait, not spinning */
    bool dying, peer_aborted;
    char where[96];
    struct ctl_msg slot[CTL_SLOTS];
    bool slot_busy[CTL_SLOTS];
    struct ctl_msg inbox[INBOX];
    unsigned in_head, in_tail;
    struct {
        bool use_tsc;
        double ticks_per_ns; /* 1 when ticks are clock_gettime nanoseconds */
    } tm;
    uint64_t pattern_seed;
    /* --iov: pf->loc cut into opt->iov equal segments for a message of
     * iov_size bytes (made again when the size changes). */
    struct iovec iov[ULN_IOV_MAX];
    size_t iov_size;
    /* Rank 0 only. */
    struct {
        FILE *csv;
        FILE *hdr; /* where '#' lines go: stdout with the table, stderr with CSV */
        bool tty, shown;
    } out;
    uint64_t *samples;
    /* The library's counters around the timed operations of the last cache run. */
    struct uln_counters cache_c0, cache_c1;
    double load_peak;        /* messages per second, all senders together */
    char load_cpu_note[256]; /* what the senders' CPUs are (from the HELLOs) */
};

/* ------------------------------------------------------------------------- */
/* Time (timer.c)                                                             */
/* ------------------------------------------------------------------------- */

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* rdtscp rather than rdtsc: it waits for earlier instructions, so a sample is
 * not taken before the load that saw the reply has retired. */
static inline uint64_t ticks(const struct perf *pf)
{
#if HAVE_TSC
    if (pf->tm.use_tsc) {
        unsigned aux;
        return __rdtscp(&aux);
    }
#endif
    return mono_ns();
}

static inline double ticks_to_ns(const struct perf *pf, double t)
{
    return t / pf->tm.ticks_per_ns;
}

void timer_init(struct perf *pf, unsigned calib_ms);

/* ------------------------------------------------------------------------- */
/* Errors, spinning, completions and control messages (ctl.c)                 */
/* ------------------------------------------------------------------------- */

void __attribute__((noreturn, format(printf, 2, 3))) die(struct perf *pf, const char *fmt, ...);
const char *op_str(unsigned op);
const char *ctl_name(uint32_t type);

/* Spinning: yields when the ranks share a CPU, and turns a hang into an error
 * that says what was awaited (unless `what` is NULL: no limit). The clock is
 * read every 1024 spins only. */
struct stall {
    uint64_t start;
    uint32_t spins;
    const char *what;
};

static inline void stall_tick(struct perf *pf, struct stall *s)
{
    if (pf->yield) sched_yield();
    if (++s->spins & 1023 || !s->what) return;
    uint64_t now = mono_ns();
    if (!s->start)
        s->start = now;
    else if (now - s->start > (uint64_t)STALL_S * 1000000000u)
        die(pf, "no progress for %d s waiting for %s", STALL_S, s->what);
}

/* Something moved: the next wait starts afresh. */
static inline void stall_reset(struct stall *s)
{
    s->spins = 0;
    s->start = 0;
}

int perf_poll(struct perf *pf, struct uln_cqe *ev, int max);
int poll_some(struct perf *pf, struct uln_cqe *ev, int max, struct stall *st);
void release(struct perf *pf, const struct uln_cqe *e);
void handle_other(struct perf *pf, const struct uln_cqe *e);
int poll_count_naps(struct perf *pf, struct uln_cqe *ev, uint64_t *completed);
void wait_1ms(struct perf *pf);
void wait_own(struct perf *pf, int want, uint64_t id, size_t size, struct stall *st);
int pump(struct perf *pf);
void ctl_send_raw(struct perf *pf, int peer, const struct ctl_msg *m, bool best_effort);
void ctl_send_to(struct perf *pf, int peer, uint32_t type, struct ctl_msg *m);
void ctl_send(struct perf *pf, uint32_t type, struct ctl_msg *m);
struct ctl_msg ctl_recv(struct perf *pf, uint32_t type);
void ctl_wait(struct perf *pf);
void ctl_drain(struct perf *pf);

static inline bool ctl_pending(const struct perf *pf)
{
    return pf->in_head != pf->in_tail;
}

static inline const struct ctl_msg *ctl_peek(const struct perf *pf)
{
    return ctl_pending(pf) ? &pf->inbox[pf->in_head % INBOX] : NULL;
}

/* ------------------------------------------------------------------------- */
/* Buffers, data marks and posting (buffers.c)                                */
/* ------------------------------------------------------------------------- */

/* PUT latency: the last min(size, 8) bytes carry the iteration number, so the
 * receiver learns the PUT landed by watching its own memory (like put_lat in
 * ucx_perftest). A narrow field wraps, which is fine because consecutive
 * values always differ. */
static inline unsigned ctr_width(size_t size)
{
    return size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
}

static inline uint64_t ctr_mask(unsigned w)
{
    return w >= 8 ? ~0ull : (1ull << (8 * w)) - 1;
}

/* The counter is written and read as one word of w bytes (at any
 * alignment), as an application writes and reads a flag: byte by byte it
 * cost the round trip ~10-15 ns (eight loads per look; eight stores that
 * the PUT's 8-byte load of the source cannot forward from, so it waits for
 * them to reach the cache). Little-endian: the low w bytes of v. */
static inline void ctr_write(uint8_t *p, unsigned w, uint64_t v)
{
    switch (w) {
    case 8:
        memcpy(p, &v, 8);
        break;
    case 4:
        memcpy(p, &v, 4);
        break;
    case 2:
        memcpy(p, &v, 2);
        break;
    default:
        memcpy(p, &v, 1);
        break;
    }
}

/* A fresh load each call: the compiler barrier keeps it from reusing an
 * earlier value (the memory changes under it, written by the peer's PUT). */
static inline uint64_t ctr_read(const volatile uint8_t *p, unsigned w)
{
    const void *q = (const void *)(uintptr_t)p;
    uint64_t v = 0;
    __asm__ volatile("" ::: "memory");
    switch (w) {
    case 8:
        memcpy(&v, q, 8);
        break;
    case 4:
        memcpy(&v, q, 4);
        break;
    case 2:
        memcpy(&v, q, 2);
        break;
    default:
        memcpy(&v, q, 1);
        break;
    }
    return v;
}

void marks_set(uint8_t *b, size_t size, uint64_t pat, bool inverted);
long marks_check(const uint8_t *b, size_t size, uint64_t pat);
uint64_t next_pattern(struct perf *pf);
void *buf_alloc(struct perf *pf, size_t len);
void buf_free(struct perf *pf, void *p);
int post_retry(struct perf *pf, int op, size_t size, uint64_t ud, unsigned flags);

extern const uint16_t done_op[NOPS];

const struct iovec *iov_cut(struct perf *pf, size_t size);

static inline int post(struct perf *pf, int op, size_t size, uint64_t ud, unsigned flags)
{
    int peer = pf->peer;
    int n = (int)pf->opt->iov;
    if (n && (op == OP_PUT || op == OP_GET)) {
        const struct iovec *v = pf->iov_size == size ? pf->iov : iov_cut(pf, size);
        return op == OP_PUT ? uln_putv(pf->ep, peer, v, n, pf->peer_key, 0, ud, flags)
                            : uln_getv(pf->ep, peer, v, n, pf->peer_key, 0, ud, flags);
    }
    switch (op) {
    case OP_NAP:
        return uln_nap(pf->ep, peer, pf->napbuf, size, ud, flags);
    case OP_NAP_INLINE:
        return uln_nap(pf->ep, peer, pf->napbuf, size, ud, flags | ULN_INLINE);
    case OP_PUT:
        return uln_put(pf->ep, peer, pf->loc, size, pf->peer_key, 0, ud, flags);
    case OP_GET:
        return uln_get(pf->ep, peer, pf->loc, size, pf->peer_key, 0, ud, flags);
    default: /* a fetch-add of 1 on the peer's first word (size is always 8) */
        return uln_atomic(pf->ep, peer, ULN_ATOMIC_ADD, 8, pf->peer_key, 0, 1, 0, pf->loc, ud,
                          flags);
    }
}

static inline bool is_nap(int op)
{
    return op == OP_NAP || op == OP_NAP_INLINE;
}

static inline bool is_fair_ep(const struct perf *pf, int ep)
{
    return ep >= pf->fair_idx0 && ep < pf->fair_idx0 + pf->nfair;
}

/* ------------------------------------------------------------------------- */
/* Statistics (stats.c), output (output.c), CPUs (pin.c)                      */
/* ------------------------------------------------------------------------- */

void med_p99(uint64_t *s, uint64_t n, uint64_t *med, uint64_t *p99);
double jain(const double *x, unsigned n);

void progress_clear(struct perf *pf);
void progress(struct perf *pf, int done, int total, const char *label, const char *group);
const char *size_str(size_t s, char *buf, size_t n);
void csv_row_s(struct perf *pf, const char *op, const char *test, uint64_t size, double value,
               const char *unit);
void csv_row(struct perf *pf, int op, const char *test, size_t size, double value,
             const char *unit);
void table_head(struct perf *pf);
void table_row(struct perf *pf, int op, const char *test, size_t size, double med, double p99,
               double gbs, double mmsg, uint64_t iters, const char *note);

int allowed_cpus(int *cpus, int max);
int cpu_for_rank(int rank, const int *cpus, int ncpu);
int pin_self(int rank, int *ncpu);
uint64_t machine_id(void);
struct line_floor line_floor(struct perf *pf, int cpu);
void describe_pin(char *buf, size_t n, int rank, int cpu, int ncpu);
void note_load_cpus(struct perf *pf, const int *rcpu, int cpu0);

/* ------------------------------------------------------------------------- */
/* Phases and points (phase.c)                                                */
/* ------------------------------------------------------------------------- */

struct fair_out;

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
    uint64_t key;          /* cache: the region to reach */
    unsigned variant;      /* cache: 1 cold, 0 warm */
    double rate;           /* load: messages per second per sender, 0: unpaced */
    uint64_t sample_ticks; /* fair, rank 0: sampling interval */
    struct fair_out *fair; /* fair, rank 0: where the samples go */
};

/* Rank 0: start iteration i (0-based) at time now? */
static inline bool go_on(const struct phase *p, uint64_t i, uint64_t t0, uint64_t now)
{
    if (i >= p->max_iters) return false;
    if (i < p->min_iters || !p->budget) return true;
    return now - t0 < p->budget;
}

/* One measurement point of rank 0's plan. */
struct point {
    int test, op;
    size_t size;
    unsigned arg; /* rate: window; cache: 1 cold / 0 warm; load: level (0: peak) */
};

struct plan {
    struct point *pt;
    int n;
};

void plan_add(struct perf *pf, struct plan *pl, int test, int op, size_t size, unsigned arg);
void plan_sizes(struct perf *pf, struct plan *pl, int test, const unsigned *args, int nargs);
double point_ms(const struct perf *pf);
uint64_t phase0(struct perf *pf, struct phase *p, uint64_t *elapsed, struct ctl_msg *done);
uint64_t measure_two(struct perf *pf, struct phase *p, double ms, uint64_t *elapsed,
                     struct ctl_msg *done);
void serve(struct perf *pf);
void drive(struct perf *pf);

/* ------------------------------------------------------------------------- */
/* Scenario families: one file each, found by test through perf_family()      */
/* ------------------------------------------------------------------------- */

struct perf_family {
    const char *name;
    /* Why test t cannot run with these options, or NULL (NULL: always runs). */
    const char *(*skip)(struct perf *pf, int t);
    /* Rank 0: append test t's points to the plan. */
    void (*plan)(struct perf *pf, struct plan *pl, int t);
    /* Rank 0: the lines before a test's first point (NULL: the table's head). */
    void (*section)(struct perf *pf, const struct point *pt);
    /* Rank 0: measure one point and report it. */
    void (*point)(struct perf *pf, const struct point *pt);
    /* Both sides of a phase, before the data flows: marks, counters (or NULL). */
    void (*setup)(struct perf *pf, const struct phase *p);
    /* After FIN: the offset of the first wrong byte of this side's data, or -1
     * (NULL: nothing to check); *what names the buffer. */
    long (*check)(struct perf *pf, const struct phase *p, const char **what);
    /* What a rank does between READY and FIN. Rank 0 returns the number of
     * iterations and, where the family has them, *elapsed and the DONE it took
     * itself. */
    uint64_t (*role)(struct perf *pf, const struct phase *p, uint64_t *samples, uint64_t *elapsed,
                     struct ctl_msg *done);
    /* Ranks >= 1 from READY (which it sends) until FIN is in the inbox; NULL:
     * send READY and run role. */
    void (*serve)(struct perf *pf, const struct phase *p, struct ctl_msg *ready);
};

extern const struct perf_family perf_latency; /* lat.c: lat */
extern const struct perf_family perf_stream;  /* stream.c: bw, bibw, rate */
extern const struct perf_family perf_cache;   /* cache.c: cache */
extern const struct perf_family perf_fair;    /* fair.c: fair */
extern const struct perf_family perf_load;    /* load.c: load */
extern const struct perf_family perf_incast;  /* incast.c: incast */

const struct perf_family *perf_family(int test); /* main.c */

/* Shared between families: stream's NAP receiver also serves fair's NAPs. */
void nap_bw_receiver(struct perf *pf, const struct phase *p, struct ctl_msg *done);

/* ------------------------------------------------------------------------- */
/* The job (job.c)                                                            */
/* ------------------------------------------------------------------------- */

int perf_job_run(struct perf *pf);

#endif
