/*
 * common.h - helpers shared by the integration tests (real ranks under ulnrun).
 *
 * Every test program is started as `ulnrun -n N prog args`; a failed CHECK
 * prints where and why, prints the rank's summary and exits non-zero, so ulnrun
 * ends the whole job at once instead of leaving the peers waiting for a rank
 * that is gone. Waits on completion queues always have a deadline and say what
 * they were waiting for: a lost completion must show up as a message, not as a
 * ctest timeout with no clue.
 */
#ifndef ULN_IT_COMMON_H
#define ULN_IT_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ulnet.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Checks and the per-rank summary                                            */
/* ------------------------------------------------------------------------- */

static int t_rank = -1;
/* Atomic: tests with threads count checks from several at once. */
static _Atomic unsigned long t_passed, t_failed;

static inline void t_summary(unsigned long failed)
{
    /* "rankN: X passed, Y failed" is the closing line CI reads. */
    printf("rank%d: %lu passed, %lu failed\n", t_rank, t_passed, failed);
    fflush(stdout);
}

static inline _Noreturn __attribute__((format(printf, 4, 5))) void
t_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    fflush(stdout);
    fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s", t_rank, file, line, expr);
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(" -- ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    fflush(stderr);
    t_summary(t_failed + 1);
    exit(1);
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (expr)                                                                                  \
            t_passed++;                                                                            \
        else                                                                                       \
            t_fail(__FILE__, __LINE__, #expr, NULL);                                               \
    } while (0)

/* CHECK with an explanation (printf format) printed on failure. */
#define CHECKF(expr, ...)                                                                          \
    do {                                                                                           \
        if (expr)                                                                                  \
            t_passed++;                                                                            \
        else                                                                                       \
            t_fail(__FILE__, __LINE__, #expr, __VA_ARGS__);                                        \
    } while (0)

/* A check whose failure does not stop the rank (the protocol can go on, e.g. a
 * transfer that was correct but far too slow): reported now, and the rank
 * exits non-zero in t_finish. Lets one run show several independent faults. */
#define CHECK_SOFTF(expr, ...)                                                                     \
    do {                                                                                           \
        if (expr) {                                                                                \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            fflush(stdout);                                                                        \
            fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s -- ", t_rank, __FILE__, __LINE__,    \
                    #expr);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* A call that returns a status: shows what it returned, by name. */
#define CHECK_RC(call, want)                                                                       \
    do {                                                                                           \
        long rc_ = (long)(call);                                                                   \
        long want_ = (long)(want);                                                                 \
        if (rc_ == want_)                                                                          \
            t_passed++;                                                                            \
        else                                                                                       \
            t_fail(__FILE__, __LINE__, #call, "returned %ld (%s), expected %ld (%s)", rc_,         \
                   t_errname((int)rc_), want_, t_errname((int)want_));                             \
    } while (0)

#define CHECK_OK(call) CHECK_RC(call, 0)

/* Symbolic name of a (negative) errno: the test output should say -ENOKEY,
 * not -126, so a wrong status code is obvious at a glance. */
static inline const char *t_errname(int rc)
{
    switch (rc) {
    case 0:
        return "0";
    case -EAGAIN:
        return "-EAGAIN";
    case -EINVAL:
        return "-EINVAL";
    case -EMSGSIZE:
        return "-EMSGSIZE";
    case -ENOKEY:
        return "-ENOKEY";
    case -ERANGE:
        return "-ERANGE";
    case -EACCES:
        return "-EACCES";
    case -EPERM:
        return "-EPERM";
    case -ECONNRESET:
        return "-ECONNRESET";
    case -ECANCELED:
        return "-ECANCELED";
    case -ETIMEDOUT:
        return "-ETIMEDOUT";
    case -ENOMEM:
        return "-ENOMEM";
    case -EFAULT:
        return "-EFAULT";
    case -ENOSPC:
        return "-ENOSPC";
    case -EBADF:
        return "-EBADF";
    case -EMFILE:
        return "-EMFILE";
    case -EBUSY:
        return "-EBUSY";
    case -EDOM:
        return "-EDOM";
    case -EPROTO:
        return "-EPROTO";
    default:
        return rc < 0 ? "-E?" : "positive";
    }
}

static inline const char *t_opname(int op)
{
    switch (op) {
    case ULN_OP_NAP:
        return "NAP";
    case ULN_OP_NAP_RECV:
        return "NAP_RECV";
    case ULN_OP_PUT:
        return "PUT";
    case ULN_OP_PUT_REMOTE:
        return "PUT_REMOTE";
    case ULN_OP_GET:
        return "GET";
    case ULN_OP_FLUSH:
        return "FLUSH";
    case ULN_OP_ATOMIC:
        return "ATOMIC";
    default:
        return "?";
    }
}

static inline void t_print_cqe(FILE *f, const char *prefix, const struct uln_cqe *e)
{
    fprintf(f,
            "%s{op=%s status=%d(%s) ep=%u peer=%d user_data=%#" PRIx64 " len=%" PRIu64
            " imm=%#" PRIx64 " offset=%" PRIu64 " flags=%#x}\n",
            prefix, t_opname(e->op), e->status, t_errname(e->status), e->ep, e->peer, e->user_data,
            e->len, e->imm, e->offset, e->flags);
}

#define CHECK_CQE(e, expr)                                                                         \
    do {                                                                                           \
        if (expr) {                                                                                \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_print_cqe(stderr, "offending entry: ", (e));                                         \
            t_fail(__FILE__, __LINE__, #expr, NULL);                                               \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------- */
/* Time                                                                       */
/* ------------------------------------------------------------------------- */

static inline double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double t_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void t_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------- */
/* Opening the job                                                            */
/* ------------------------------------------------------------------------- */

struct t_job {
    struct uln_ctx *ctx;
    int rank, size;
    struct uln_info info;
};

static inline int t_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Open the job from ulnrun's environment and check that the shm mode the ctest
 * case asked for (ULN_SHM_CMA=0 / ULN_SHM_DIRECT=0) is really in force: a mode
 * silently ignored would make the three ctest cases one test run three times. */
static inline void t_open(struct t_job *job, int want_size)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The rank the launcher gave: ulnrun's and ULN_ROOT's ULN_RANK, or the
     * PMIx server's PMIX_RANK (tests/mpirun) - uln_open must agree with it. */
    t_rank = t_env_int("ULN_RANK", t_env_int("PMIX_RANK", -1));
    CHECK_OK(uln_open(NULL, &job->ctx));
    job->rank = uln_rank(job->ctx);
    job->size = uln_size(job->ctx);
    CHECK(job->rank == t_rank);
    t_rank = job->rank;
    if (want_size > 0)
        CHECKF(job->size == want_size, "this test wants %d ranks, got %d", want_size, job->size);
    CHECK_OK(uln_query(job->ctx, &job->info));
    if (t_env_int("ULN_SHM_DIRECT", 1) == 0)
        CHECKF(job->info.shm_direct == 0, "ULN_SHM_DIRECT=0 but info.shm_direct=%d",
               job->info.shm_direct);
    else
        CHECKF(job->info.shm_direct == 1, "default shm_direct should be 1, info says %d",
               job->info.shm_direct);
    if (t_env_int("ULN_SHM_CMA", 1) == 0)
        CHECKF(job->info.shm_cma == 0, "ULN_SHM_CMA=0 but info.shm_cma=%d", job->info.shm_cma);
    /* The transport asked for is the transport used. */
    const char *tp = getenv("ULN_TRANSPORT");
    if (tp && !strcmp(tp, "udp"))
        CHECKF(job->info.udp_peers == job->size - 1, "ULN_TRANSPORT=udp but %d of %d peers on udp",
               job->info.udp_peers, job->size - 1);
    else if (getenv("ULNTEST_IT_EXPECT_UDP_PEERS"))
        CHECKF(job->info.udp_peers == t_env_int("ULNTEST_IT_EXPECT_UDP_PEERS", -1),
               "%d peers on udp, expected %d (the others share this host)", job->info.udp_peers,
               t_env_int("ULNTEST_IT_EXPECT_UDP_PEERS", -1));
    else if (!getenv("ULN_ROOT"))
        CHECKF(job->info.udp_peers == 0, "one host, no ULN_TRANSPORT, yet %d peers on udp",
               job->info.udp_peers);
    CHECK(job->info.nap_max > 0);
    CHECK(job->info.sq_depth > 0);
    /* The bootstrap a launcher must have led to (tests/mpirun: pmix), as the
     * library reports it (uln_info.bootstrap, which ulninfo prints). */
    const char *boot = job->info.bootstrap;
    CHECK(boot != NULL);
    if (getenv("ULNTEST_IT_EXPECT_BOOT"))
        CHECKF(!strcmp(boot, getenv("ULNTEST_IT_EXPECT_BOOT")), "bootstrap %s, expected %s", boot,
               getenv("ULNTEST_IT_EXPECT_BOOT"));
    if (job->rank == 0)
        printf("rank0: size=%d boot=%s transport=%s shm_direct=%d shm_cma=%d nap_max=%u "
               "inline_max=%u sq_depth=%u ring_bytes=%u chunk_bytes=%u\n",
               job->size, boot, job->info.transport ? job->info.transport : "(null)",
               job->info.shm_direct, job->info.shm_cma, job->info.nap_max, job->info.inline_max,
               job->info.sq_depth, job->info.ring_bytes, job->info.chunk_bytes);
}

/* Barrier with a deadline. uln_barrier drives every endpoint while it waits,
 * so a peer that needs this rank (a resend, a GET, ring-path PUT data) is
 * served meanwhile. */
static inline void t_barrier(struct t_job *job)
{
    CHECK_OK(uln_barrier(job->ctx, 60000));
}

/* Barrier, close, summary: the normal end of every rank (non-zero if a soft
 * check failed). */
static inline int t_finish(struct t_job *job)
{
    t_barrier(job);
    CHECK_OK(uln_close(job->ctx));
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------- */
/* Completion queues                                                          */
/* ------------------------------------------------------------------------- */

/* Take exactly n entries from cq into out[0..n), waiting (uln_cq_wait: spins,
 * then sleeps, which matters with 4 ranks on 2 cores) until timeout_ms has
 * passed; then fail saying what was awaited and how many came. */
static inline void t_cq_take(struct uln_cq *cq, struct uln_cqe *out, int n, int timeout_ms,
                             const char *what)
{
    double deadline = t_now() + timeout_ms / 1000.0;
    int got = 0;
    while (got < n) {
        int r = uln_cq_poll(cq, out + got, n - got);
        CHECKF(r >= 0 && r <= n - got, "uln_cq_poll returned %d (%s) waiting for %s", r,
               t_errname(r), what);
        got += r;
        if (got == n) break;
        if (t_now() > deadline)
            t_fail(__FILE__, __LINE__, "completion deadline",
                   "waited %d ms for %s: got %d of %d entries", timeout_ms, what, got, n);
        if (r == 0) {
            int w = uln_cq_wait(cq, 50);
            CHECKF(w == 0 || w == -ETIMEDOUT, "uln_cq_wait returned %d (%s) waiting for %s", w,
                   t_errname(w), what);
        }
    }
}

static inline struct uln_cqe t_cq_take1(struct uln_cq *cq, int timeout_ms, const char *what)
{
    struct uln_cqe e;
    t_cq_take(cq, &e, 1, timeout_ms, what);
    return e;
}

/* Assert that nothing at all arrives on cq for ms milliseconds: "exactly once"
 * also means no duplicate shows up late. */
static inline void t_cq_expect_empty(struct uln_cq *cq, int ms, const char *what)
{
    double deadline = t_now() + ms / 1000.0;
    do {
        struct uln_cqe e;
        int r = uln_cq_poll(cq, &e, 1);
        if (r != 0) {
            if (r > 0) t_print_cqe(stderr, "unexpected entry: ", &e);
            t_fail(__FILE__, __LINE__, "cq stays empty", "%s: uln_cq_poll returned %d", what, r);
        }
        int w = uln_cq_wait(cq, 10);
        CHECKF(w == 0 || w == -ETIMEDOUT, "uln_cq_wait: %d", w);
    } while (t_now() < deadline);
    t_passed++;
}

static inline void t_release(struct uln_cq *cq, const struct uln_cqe *e)
{
    if (e->flags & ULN_CQE_MUST_RELEASE) CHECK_OK(uln_cqe_release(cq, e));
}

/* ------------------------------------------------------------------------- */
/* Data patterns                                                              */
/* ------------------------------------------------------------------------- */

/* Byte o of a pattern is byte (o % 8) of a 64-bit hash of (seed, o / 8); the
 * seed is made from (rank, op, tag). So a byte placed at the wrong offset, a
 * chunk of the wrong transfer or data from the wrong peer does not match,
 * unlike with memset-style fills where misplaced bytes look right. */
static inline uint64_t pat_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t pat_seed(int rank, int op, uint64_t tag)
{
    return pat_mix(((uint64_t)(uint32_t)rank << 48) ^ ((uint64_t)(uint16_t)op << 32) ^
                   pat_mix(tag + 0x51ed270b27a5f3c1ull));
}

static inline uint64_t pat_word(uint64_t seed, uint64_t w)
{
    return pat_mix(seed + w * 0x9e3779b97f4a7c15ull);
}

static inline uint8_t pat_byte(uint64_t seed, uint64_t o)
{
    uint64_t w = pat_word(seed, o >> 3);
    uint8_t b[8];
    memcpy(b, &w, 8);
    return b[o & 7];
}

/* Fill buf[0..len) with the pattern bytes for offsets base..base+len; with
 * invert, with their complement (a poison that differs from the expected data
 * in every byte, so an unwritten byte can never pass for a written one). */
static inline void pat_fill_x(void *buf, size_t len, uint64_t seed, uint64_t base, bool invert)
{
    uint8_t *p = buf;
    uint64_t x = invert ? ~0ull : 0;
    size_t i = 0;
    while (i < len && ((base + i) & 7)) {
        p[i] = pat_byte(seed, base + i) ^ (uint8_t)x;
        i++;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pat_word(seed, (base + i) >> 3) ^ x;
        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++)
        p[i] = pat_byte(seed, base + i) ^ (uint8_t)x;
}

static inline void pat_fill(void *buf, size_t len, uint64_t seed, uint64_t base)
{
    pat_fill_x(buf, len, seed, base, false);
}

static inline void pat_poison(void *buf, size_t len, uint64_t seed, uint64_t base)
{
    pat_fill_x(buf, len, seed, base, true);
}

/* Index of the first byte that differs from the pattern, or SIZE_MAX. */
static inline size_t pat_find_diff(const void *buf, size_t len, uint64_t seed, uint64_t base)
{
    const uint8_t *p = buf;
    size_t i = 0;
    while (i < len && ((base + i) & 7)) {
        if (p[i] != pat_byte(seed, base + i)) return i;
        i++;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pat_word(seed, (base + i) >> 3), g;
        memcpy(&g, p + i, 8);
        if (g != w) {
            for (size_t k = i; k < i + 8; k++)
                if (p[k] != pat_byte(seed, base + k)) return k;
        }
    }
    for (; i < len; i++)
        if (p[i] != pat_byte(seed, base + i)) return i;
    return SIZE_MAX;
}

/* Index of the first byte != val, or SIZE_MAX. */
static inline size_t byte_find_diff(const void *buf, size_t len, uint8_t val)
{
    const uint8_t *p = buf;
    uint64_t v8 = 0x0101010101010101ull * val;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t g;
        memcpy(&g, p + i, 8);
        if (g != v8) break;
    }
    for (; i < len; i++)
        if (p[i] != val) return i;
    return SIZE_MAX;
}

#define CHECK_PAT(buf, len, seed, base, ...)                                                       \
    do {                                                                                           \
        size_t d_ = pat_find_diff((buf), (len), (seed), (base));                                   \
        if (d_ == SIZE_MAX) {                                                                      \
            t_passed++;                                                                            \
        } else {                                                                                   \
            char m_[256];                                                                          \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            t_fail(__FILE__, __LINE__, "data matches pattern",                                     \
                   "%s: first bad byte at %zu of %zu: got %#x, expected %#x", m_, d_,              \
                   (size_t)(len), ((const uint8_t *)(buf))[d_],                                    \
                   pat_byte((seed), (uint64_t)(base) + d_));                                       \
        }                                                                                          \
    } while (0)

#define CHECK_BYTES(buf, len, val, ...)                                                            \
    do {                                                                                           \
        size_t d_ = byte_find_diff((buf), (len), (val));                                           \
        if (d_ == SIZE_MAX) {                                                                      \
            t_passed++;                                                                            \
        } else {                                                                                   \
            char m_[256];                                                                          \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            t_fail(__FILE__, __LINE__, "bytes untouched",                                          \
                   "%s: byte %zu of %zu is %#x, expected %#x", m_, d_, (size_t)(len),              \
                   ((const uint8_t *)(buf))[d_], (unsigned)(val));                                 \
        }                                                                                          \
    } while (0)

/* Deterministic PRNG (xorshift64*), so both sides of a test can derive the same
 * sequence of sizes and offsets without sending it. */
static inline uint64_t t_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* ------------------------------------------------------------------------- */
/* Memory                                                                     */
/* ------------------------------------------------------------------------- */

/* The two kinds of target memory: a peer reaches uln_mem_alloc memory by plain
 * loads/stores on a shared mapping, malloc'd memory by process_vm_readv/writev
 * or through the rings; both must behave the same. */
enum t_kind { T_KIND_SHM = 0, T_KIND_MALLOC = 1, T_NKINDS = 2 };

static inline const char *t_kind_name(int kind)
{
    return kind == T_KIND_SHM ? "uln_mem_alloc" : "malloc";
}

struct t_region {
    int kind;
    void *buf;
    size_t len;
    struct uln_mr *mr;
    uint64_t key;
};

static inline void t_region_new(struct t_job *job, struct t_region *r, int kind, size_t len,
                                unsigned access)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->len = len;
    if (kind == T_KIND_SHM) {
        CHECK_OK(uln_mem_alloc(job->ctx, len, &r->buf));
    } else {
        r->buf = malloc(len ? len : 1);
        CHECK(r->buf != NULL);
    }
    CHECK(r->buf != NULL);
    CHECK_OK(uln_mr_reg(job->ctx, r->buf, len, access, &r->mr));
    r->key = uln_mr_key(r->mr);
    CHECK(uln_mr_addr(r->mr) == r->buf);
    CHECK(uln_mr_len(r->mr) == len);
}

static inline void t_region_free(struct t_job *job, struct t_region *r)
{
    if (r->mr) CHECK_OK(uln_mr_dereg(r->mr));
    if (r->kind == T_KIND_SHM)
        CHECK_OK(uln_mem_free(job->ctx, r->buf));
    else
        free(r->buf);
    memset(r, 0, sizeof *r);
}

static inline void *t_xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    CHECK(p != NULL);
    return p;
}

/* ------------------------------------------------------------------------- */
/* What to expect of the mechanism                                            */
/* ------------------------------------------------------------------------- */

/* What a test may expect of the way its operations are carried. Tests decide
 * from these, never from the transport's name or the number of UDP peers; the
 * fields are derived from what uln_query reports here and nowhere else, so a
 * change in what the library reports (capability bits) is a change to
 * t_expect_of alone. Job-wide: a test that uses them reaches every peer the
 * same way, which t_expect_of checks. */
struct t_expect {
    /* A PUT or GET on a peer's memory of kind k needs the target's CPU: the
     * data is placed or fetched by the target (its rings, its UDP endpoint),
     * not moved by the initiator itself (mapped memory, process_vm_*). */
    bool target_cpu[T_NKINDS];
    /* ... and still completes while the target's application is away from
     * ulnet (computing, sleeping): it needs no target CPU, or the target's
     * progress thread gives it (the job runs with one setting everywhere). */
    bool done_while_away[T_NKINDS];
    /* A rank asleep in uln_cq_wait is woken by a doorbell the sender rings
     * (counted in wakeups_sent), not by the data's own arrival. */
    bool doorbell;
    /* Reaching a peer for the first time costs a descriptor (its pidfd), so
     * at the descriptor limit a first NAP to it fails with -EMFILE. */
    bool fd_per_peer;
    /* A NAP completes only once the peer acknowledges it, not as soon as it
     * is in the peer's ring: so the first ones wait for the peer's answer. */
    bool nap_acked;
    /* How long after a peer's death the operations on it may take to fail. */
    int dead_ms;
};

static inline struct t_expect t_expect_of(const struct t_job *job, const struct uln_info *info)
{
    /* Today the mechanism shows only as shm_direct, shm_cma and the number of
     * peers over UDP (whose endpoint places everything, like the rings). */
    bool udp = info->udp_peers > 0;
    CHECKF(info->udp_peers == 0 || info->udp_peers == job->size - 1,
           "expectations are job-wide: run this test all over shm or all over udp (%d of %d "
           "peers on udp)",
           info->udp_peers, job->size - 1);
    struct t_expect x = {.doorbell = !udp,
                         .fd_per_peer = !udp,
                         .nap_acked = udp,
                         .dead_ms = udp ? (int)info->udp_dead_ms : 1000};
    x.target_cpu[T_KIND_SHM] = udp || !info->shm_direct;
    x.target_cpu[T_KIND_MALLOC] = udp || !info->shm_direct || !info->shm_cma;
    for (int k = 0; k < T_NKINDS; k++)
        x.done_while_away[k] = !x.target_cpu[k] || info->progress_thread;
    return x;
}

/* ------------------------------------------------------------------------- */
/* Key exchange                                                               */
/* ------------------------------------------------------------------------- */

/* All-to-all exchange of `cnt` 64-bit values over NAPs on ep: all[p * cnt + i]
 * is peer p's value i (this rank's own values copied in). Needs ep to carry no
 * other traffic meanwhile; ends with a barrier so no rank's next traffic can
 * mix into a peer's exchange. */
static inline void t_exchange(struct t_job *job, struct uln_ep *ep, struct uln_cq *cq,
                              const uint64_t *mine, int cnt, uint64_t *all)
{
    size_t bytes = (size_t)cnt * 8;
    memcpy(all + (size_t)job->rank * cnt, mine, bytes);
    int sent = 0, recvd = 0, done = 0;
    unsigned char *seen = calloc((size_t)job->size, 1);
    CHECK(seen != NULL);
    for (int p = 0; p < job->size; p++) {
        if (p == job->rank) continue;
        CHECK_OK(uln_nap(ep, p, mine, bytes, 0x6b657900u + (unsigned)p, 0));
        sent++;
    }
    double deadline = t_now() + 60;
    while (done < sent || recvd < job->size - 1) {
        struct uln_cqe e;
        int r = uln_cq_poll(cq, &e, 1);
        CHECK(r >= 0);
        if (r == 0) {
            CHECKF(t_now() < deadline, "key exchange: %d/%d sent, %d/%d received", done, sent,
                   recvd, job->size - 1);
            int w = uln_cq_wait(cq, 50);
            CHECK(w == 0 || w == -ETIMEDOUT);
            continue;
        }
        CHECK_CQE(&e, e.status == 0);
        if (e.op == ULN_OP_NAP) {
            done++;
        } else {
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV);
            CHECK_CQE(&e,
                      e.len == bytes && e.peer >= 0 && e.peer < job->size && e.peer != job->rank);
            CHECKF(!seen[e.peer], "two key messages from rank %d", e.peer);
            seen[e.peer] = 1;
            memcpy(all + (size_t)e.peer * cnt, e.data, bytes);
            recvd++;
            t_release(cq, &e);
        }
    }
    free(seen);
    t_barrier(job);
}

#endif
