/*
 * fuzz_common.h - what both fuzz targets share: a real two-rank job inside
 * this one process, guarded memory, posting from input bytes, and the checks
 * run after every input.
 *
 * The job. A bootstrap board for two ranks (as ulnrun makes it); rank 1 is
 * opened on a thread (uln_open waits for every rank), rank 0 on the caller's,
 * both with the real uln_open. Rank 0 is the process under attack: it has one
 * CQ, one endpoint and four regions. Rank 1 is a real context too, so that
 * everything rank 0 reads about it (its board slot, its inbox, its UDP
 * address) is what a real peer publishes - but nothing ever polls it: the
 * harness speaks for rank 1, and the bytes it sends in rank 1's name come
 * from the fuzz input.
 *
 * Opening a pair costs ~1 ms (two inboxes, sockets, receive pools), so the
 * pair is opened once per process and reused; each target resets what its
 * inputs can change (fz_begin/fz_end in the targets): every input starts
 * from the same state, so a crash found by one input reproduces alone.
 *
 * Memory. Every buffer the library may write for the peer - the four regions
 * and the GET destination - sits between guard bytes. Read-only and
 * deregistered regions must keep their pattern byte for byte; writable ones
 * get it back after each input. Any byte written outside, or into what must
 * stay, aborts with a message (libFuzzer saves the input).
 */
#ifndef ULN_FUZZ_COMMON_H
#define ULN_FUZZ_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/board.h"
#include "core/internal.h"
#include "rel/rel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef unsigned long long ULLONG; /* for printf */

#define FZ_RLEN      4096u  /* each region */
#define FZ_GUARD     64u    /* guard bytes either side of every buffer */
#define FZ_GUARD_VAL 0xeeu  /* what they hold */
#define FZ_SRC_LEN   16384u /* our PUT/NAP source */
#define FZ_GET_LEN   4096u  /* our GET destination */
#define FZ_NAP_MAX   4096u
#define FZ_RING      16384u /* small: inputs reach a full ring and its wrap */
#define FZ_SQ        16u
#define FZ_CQ        64u

enum { FZ_RW, FZ_RO, FZ_WO, FZ_STALE, FZ_NREG };

/* Record kinds and modifier bits of both targets' inputs (see the targets). */
#define FZ_M_POLL 0x80u /* drive progress after this record */

struct fz {
    bool open;
    int board_fd;
    uint64_t job;
    struct uln_ctx *ctx[2];
    struct uln_cq *cq;
    struct uln_ep *ep;
    uint8_t *reg_mem[FZ_NREG]; /* guard, region, guard */
    uint8_t *reg_ref[FZ_NREG]; /* what reg_mem must hold between inputs */
    struct uln_mr *mr[FZ_NREG];
    uint64_t keys[FZ_NREG];
    uint8_t *src, *src_ref;
    uint8_t *get_mem, *get_ref; /* guard, GET destination, guard */
    uint64_t op_base;           /* sq position of the first op of this input */
    bool hold_naps;             /* keep NAP_RECV entries (a slow application) */
    struct uln_cqe held[FZ_CQ];
    unsigned n_held;
};

static struct fz F;

static _Noreturn __attribute__((format(printf, 1, 2))) void fz_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz invariant broken: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static uint8_t *fz_region(unsigned r)
{
    return F.reg_mem[r] + FZ_GUARD;
}

static void fz_same(const uint8_t *mem, const uint8_t *ref, size_t len, size_t data_len,
                    const char *what)
{
    if (!memcmp(mem, ref, len)) return;
    size_t i = 0;
    while (mem[i] == ref[i])
        i++;
    if (i < FZ_GUARD)
        fz_die("%s: guard byte %zu before it was written (%#x)", what, FZ_GUARD - i, mem[i]);
    if (i >= FZ_GUARD + data_len)
        fz_die("%s: guard byte %zu after it was written (%#x)", what, i - FZ_GUARD - data_len,
               mem[i]);
    fz_die("%s: byte %zu changed from %#x to %#x", what, i - FZ_GUARD, ref[i], mem[i]);
}

/* After every input: nothing outside the regions moved, the regions that
 * must not change did not, and the writable ones start the next input as
 * they were. Each buffer is compared with a reference copy. */
static void fz_memory_check(void)
{
    static const char *names[] = {"read-write region", "read-only region", "write-only region",
                                  "deregistered region"};
    const size_t all = FZ_RLEN + 2 * FZ_GUARD, tail = FZ_GUARD + FZ_RLEN;
    for (unsigned r = 0; r < FZ_NREG; r++) {
        if (r == FZ_RO || r == FZ_STALE) {
            fz_same(F.reg_mem[r], F.reg_ref[r], all, FZ_RLEN, names[r]);
            continue;
        }
        fz_same(F.reg_mem[r], F.reg_ref[r], FZ_GUARD, FZ_RLEN, names[r]);
        fz_same(F.reg_mem[r] + tail, F.reg_ref[r] + tail, FZ_GUARD, 0, names[r]);
        memcpy(F.reg_mem[r], F.reg_ref[r], all);
    }
    /* Only the GET destination itself may change. */
    const size_t gtail = FZ_GUARD + FZ_GET_LEN;
    fz_same(F.get_mem, F.get_ref, FZ_GUARD, FZ_GET_LEN, "GET destination");
    fz_same(F.get_mem + gtail, F.get_ref + gtail, FZ_GUARD, 0, "GET destination");
    fz_same(F.src, F.src_ref, FZ_SRC_LEN, FZ_SRC_LEN, "PUT/NAP source");
}

/* FZ_VERBOSE=1: rank 0's counters after each input (to see what a seed or a
 * found input does). */
static inline void fz_report(void)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FZ_VERBOSE") != NULL;
    if (!verbose) return;
    struct uln_counters c;
    uln_counters_get(F.ctx[0], &c);
    fprintf(stderr,
            "naps_sent %llu naps_received %llu puts %llu gets %llu bytes_put %llu bytes_got %llu "
            "refused_key %llu refused_bounds %llu refused_access %llu refused_job %llu "
            "malformed %llu pkts_received %llu duplicates %llu stale %llu pkts_dropped %llu "
            "atomics %llu atomics_served %llu refused_align %llu sq %llu ops\n",
            (ULLONG)c.naps_sent, (ULLONG)c.naps_received, (ULLONG)c.puts, (ULLONG)c.gets,
            (ULLONG)c.bytes_put, (ULLONG)c.bytes_got, (ULLONG)c.refused_key,
            (ULLONG)c.refused_bounds, (ULLONG)c.refused_access, (ULLONG)c.refused_job,
            (ULLONG)c.malformed, (ULLONG)c.pkts_received, (ULLONG)c.duplicates, (ULLONG)c.stale,
            (ULLONG)c.pkts_dropped, (ULLONG)c.atomics, (ULLONG)c.atomics_served,
            (ULLONG)c.refused_align, (ULLONG)(F.ep->sq_tail - F.op_base));
}

/* ---- the job -------------------------------------------------------------------- */

static void fz_config(struct uln_config *c, int rank)
{
    uln_config_init(c);
    c->rank = rank;
    c->size = 2;
    c->job_key = F.job;
    c->boot_fd = F.board_fd;
    c->max_eps = 1;
    c->ring_bytes = FZ_RING;
    c->nap_max = FZ_NAP_MAX;
    c->sq_depth = FZ_SQ;
    c->max_regions = 8;
}

static void *fz_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) fz_die("malloc(%zu)", n);
    return p;
}

static void *fz_open_rank1(void *arg)
{
    struct uln_config c;
    fz_config(&c, 1);
    int rc = uln_open(&c, &F.ctx[1]);
    if (rc) fz_die("rank 1: uln_open: %s", uln_strerror(rc));
    return arg;
}

static void fz_close(void)
{
    if (!F.open) return;
    uln_close(F.ctx[0]); /* closes the endpoint, the CQ, deregisters */
    uln_close(F.ctx[1]);
    close(F.board_fd);
    for (unsigned r = 0; r < FZ_NREG; r++)
        free(F.reg_mem[r]), free(F.reg_ref[r]);
    free(F.src), free(F.src_ref);
    free(F.get_mem), free(F.get_ref);
    memset(&F, 0, sizeof F);
}

/* Open the pair: transport "udp" (rank 1 reached over UDP) or "shm".
 * shm_direct 0 makes rank 0's own PUT/GET go through the rings, so answers
 * to them come back as ring messages (the path packet transports take). */
static void fz_open(const char *transport, int shm_direct)
{
    memset(&F, 0, sizeof F);
    setenv("ULN_TRANSPORT", transport, 1);
    /* Rank 1 never reads its socket: rank 0's datagrams are dropped before
     * the kernel (the fault injector), which saves a system call per packet
     * and leaves everything above the socket as it is. */
    setenv("ULN_FAULT", "drop=1", 1);
    setenv("ULN_UDP_MTU", "1500", 1); /* NAPs of several packets */
    setenv("ULN_UDP_WINDOW", "16", 1);
    /* Doorbells are named by job key and rank: a job key of its own per
     * process, so fuzzers may run side by side. */
    F.job = 0x66757a7a00000000ull ^ (uint64_t)getpid();
    F.board_fd = uln_board_create(2);
    if (F.board_fd < 0) fz_die("uln_board_create: %s", uln_strerror(F.board_fd));
    pthread_t t;
    if (pthread_create(&t, NULL, fz_open_rank1, NULL)) fz_die("pthread_create");
    struct uln_config c;
    fz_config(&c, 0);
    c.shm_direct = shm_direct;
    int rc = uln_open(&c, &F.ctx[0]);
    if (rc) fz_die("rank 0: uln_open: %s", uln_strerror(rc));
    pthread_join(t, NULL);
    struct uln_ctx *ctx = F.ctx[0];
    if ((rc = uln_cq_open(ctx, FZ_CQ, &F.cq)) || (rc = uln_ep_open(ctx, F.cq, F.cq, &F.ep)))
        fz_die("cq/ep open: %s", uln_strerror(rc));
    /* Only the read-write region allows atomics: an atomic on any other is
     * refused and must leave it as it was. */
    static const unsigned acc[FZ_NREG] = {
        ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC,
        ULN_ACCESS_REMOTE_READ, ULN_ACCESS_REMOTE_WRITE,
        ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC};
    for (unsigned r = 0; r < FZ_NREG; r++) {
        F.reg_mem[r] = fz_alloc(FZ_RLEN + 2 * FZ_GUARD);
        F.reg_ref[r] = fz_alloc(FZ_RLEN + 2 * FZ_GUARD);
        memset(F.reg_ref[r], FZ_GUARD_VAL, FZ_RLEN + 2 * FZ_GUARD);
        for (size_t i = 0; i < FZ_RLEN; i++)
            F.reg_ref[r][FZ_GUARD + i] = (uint8_t)(i * 131u + r * 29u + (i >> 8) * 7u + 1u);
        memcpy(F.reg_mem[r], F.reg_ref[r], FZ_RLEN + 2 * FZ_GUARD);
        rc = uln_mr_reg(ctx, fz_region(r), FZ_RLEN, acc[r], &F.mr[r]);
        if (rc) fz_die("uln_mr_reg: %s", uln_strerror(rc));
        F.keys[r] = uln_mr_key(F.mr[r]);
    }
    /* A key that was good once: what a peer may still hold. */
    uln_mr_dereg(F.mr[FZ_STALE]);
    F.mr[FZ_STALE] = NULL;
    F.src = fz_alloc(FZ_SRC_LEN);
    F.src_ref = fz_alloc(FZ_SRC_LEN);
    for (size_t i = 0; i < FZ_SRC_LEN; i++)
        F.src_ref[i] = (uint8_t)(i * 7u + 3u);
    memcpy(F.src, F.src_ref, FZ_SRC_LEN);
    F.get_mem = fz_alloc(FZ_GET_LEN + 2 * FZ_GUARD);
    F.get_ref = fz_alloc(FZ_GET_LEN + 2 * FZ_GUARD);
    memset(F.get_ref, FZ_GUARD_VAL, FZ_GET_LEN + 2 * FZ_GUARD);
    memcpy(F.get_mem, F.get_ref, FZ_GET_LEN + 2 * FZ_GUARD);
    F.open = true;
    atexit(fz_close); /* a clean close: the leak checker then sees real leaks only */
}

/* ---- completions ------------------------------------------------------------------- */

/* What every entry must satisfy, whatever the input. */
static void fz_cqe_check(const struct uln_cqe *e, bool remote_checked)
{
    /* ulnet.h: a status is 0 or a negative errno, whatever a peer says. */
    if (e->status > 0 || e->status < -4095) fz_die("entry with status %d", e->status);
    if (e->op == ULN_OP_NAP_RECV) {
        const struct uln_ring_cons *c = &F.ep->peers[1].in[0];
        const uint8_t *d = e->data;
        if (e->peer != 1) fz_die("NAP_RECV from rank %d", e->peer);
        if (e->len > FZ_NAP_MAX) fz_die("NAP_RECV of %llu bytes > nap_max", (ULLONG)e->len);
        if (d < c->cells || d + e->len > c->cells + c->mask + 1)
            fz_die("NAP_RECV data outside its ring");
    } else if (e->op == ULN_OP_PUT_REMOTE) {
        /* Over UDP the target checked the whole operation against the
         * region before raising it. Over shm a peer that placed data itself
         * only reports it (PUT_NOTIFY names no region to check against). */
        if (remote_checked && (e->offset > FZ_RLEN || e->len > FZ_RLEN - e->offset))
            fz_die("PUT_REMOTE names [%llu, +%llu), outside every region", (ULLONG)e->offset,
                   (ULLONG)e->len);
    } else if (e->op == ULN_OP_ATOMIC) {
        if (e->status == 0 && e->len != 4 && e->len != 8)
            fz_die("ATOMIC completion of %llu bytes", (ULLONG)e->len);
    } else if (e->op < ULN_OP_NAP || e->op > ULN_OP_ATOMIC) {
        fz_die("entry with op %u", e->op);
    }
}

/* One progress pass; every entry is checked, and released unless the input
 * plays a slow application. */
static void fz_poll(bool remote_checked)
{
    struct uln_cqe e[16];
    int n = uln_cq_poll(F.cq, e, 16);
    if (n < 0) fz_die("uln_cq_poll: %s", uln_strerror(n));
    for (int i = 0; i < n; i++) {
        fz_cqe_check(&e[i], remote_checked);
        if (!(e[i].flags & ULN_CQE_MUST_RELEASE)) continue;
        if (F.hold_naps && F.n_held < FZ_CQ) {
            F.held[F.n_held++] = e[i];
            continue;
        }
        int rc = uln_cqe_release(F.cq, &e[i]);
        if (rc) fz_die("uln_cqe_release: %s", uln_strerror(rc));
    }
}

static inline void fz_release_held(void)
{
    for (unsigned i = 0; i < F.n_held; i++)
        uln_cqe_release(F.cq, &F.held[i]);
    F.n_held = 0;
    F.hold_naps = false;
}

/* ---- posting from input bytes ----------------------------------------------------- */

/* The next record of an input: a 4-byte head (kind, modifier bits, 16-bit
 * little-endian length) and its bytes, cut short at the input's end. False
 * when no whole head is left. */
struct fz_record {
    uint8_t kind, mods;
    const uint8_t *b;
    size_t n;
};

static inline bool fz_next_record(const uint8_t *data, size_t size, size_t *at, struct fz_record *r)
{
    if (*at + 4 > size) return false;
    r->kind = data[*at];
    r->mods = data[*at + 1];
    r->n = (size_t)data[*at + 2] | (size_t)data[*at + 3] << 8;
    *at += 4;
    if (r->n > size - *at) r->n = size - *at;
    r->b = data + *at;
    *at += r->n;
    return true;
}

static uint64_t fz_le(const uint8_t *b, size_t n, size_t at, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes && at + i < n; i++)
        v |= (uint64_t)b[at + i] << (8 * i);
    return v;
}

/* The list form of a NAP, PUT or GET (uln_napv, uln_putv, uln_put_immv,
 * uln_getv): len bytes at buf cut into segs pieces (0..ULN_IOV_MAX, one
 * past it refused at post), uneven, zero-length ones among them. */
static inline void fz_post_list(unsigned op, unsigned segs, uint8_t *buf, uint64_t len,
                                uint64_t rkey, uint64_t roff, unsigned flags)
{
    struct iovec v[ULN_IOV_MAX + 1];
    uint64_t at = 0;
    for (unsigned i = 0; i < segs; i++) {
        uint64_t end = i + 1 == segs ? len : len * (i + 1) * (i + 1) / (segs * segs);
        v[i] = (struct iovec){buf + at, end - at};
        at = end;
    }
    const struct iovec *iov = segs ? v : NULL;
    if (op == 0)
        uln_napv(F.ep, 1, iov, (int)segs, 0x100, flags);
    else if (op == 1)
        uln_putv(F.ep, 1, iov, (int)segs, rkey, roff, 0x200, flags);
    else if (op == 2)
        uln_put_immv(F.ep, 1, iov, (int)segs, rkey, roff, 0x1111, 0x300, flags);
    else
        uln_getv(F.ep, 1, iov, (int)segs, rkey, roff, 0x400, flags & ULN_SILENT);
}

/* An operation of ours to rank 1: b[0] op and flags, b[1..2] length, b[3..10]
 * remote offset, b[11..18] remote key; with b[19], a NAP, PUT or GET goes as
 * a list of b[19] % (ULN_IOV_MAX + 2) segments (fz_post_list). Its answers
 * come from the input. An atomic takes its op from the length (1 + len % 11:
 * 11 is one past the last, refused at post), its width from bit 8 (4, else
 * 8), and fetches into the GET destination. */
static inline void fz_post(const uint8_t *b, size_t n)
{
    if (n == 0) return;
    unsigned op = b[0] % 6, flags = 0;
    if (b[0] & 0x80) flags |= ULN_SILENT;
    if (b[0] & 0x40) flags |= ULN_INLINE;
    uint64_t len = fz_le(b, n, 1, 2), roff = fz_le(b, n, 3, 8), rkey = fz_le(b, n, 11, 8);
    uint8_t *dst = F.get_mem + FZ_GUARD;
    if (n > 19 && op <= 3) {
        const uint64_t max[4] = {FZ_NAP_MAX, FZ_SRC_LEN, FZ_SRC_LEN, FZ_GET_LEN};
        fz_post_list(op, b[19] % (ULN_IOV_MAX + 2), op == 3 ? dst : F.src, len % (max[op] + 1),
                     rkey, roff, flags);
        return;
    }
    switch (op) {
    case 0:
        uln_nap(F.ep, 1, F.src, len % (FZ_NAP_MAX + 1), 0x100, flags);
        break;
    case 1:
        uln_put(F.ep, 1, F.src, len % (FZ_SRC_LEN + 1), rkey, roff, 0x200, flags);
        break;
    case 2:
        uln_put_imm(F.ep, 1, F.src, len % (FZ_SRC_LEN + 1), rkey, roff, 0x1111, 0x300, flags);
        break;
    case 3:
        uln_get(F.ep, 1, dst, len % (FZ_GET_LEN + 1), rkey, roff, 0x400, flags & ULN_SILENT);
        break;
    case 4:
        uln_ep_flush(F.ep, 0x500);
        break;
    default:
        uln_atomic(F.ep, 1, 1 + (unsigned)(len % 11), (len & 0x100) ? 4 : 8, rkey, roff,
                   0x0102030405060708ull, roff, dst, 0x600, flags);
        break;
    }
}

/* Wait (bounded) until every operation of ours is retired: an operation that
 * never completes is a hang the fuzzer must report. */
static inline void fz_drain_ops(bool remote_checked, const char *after)
{
    for (int i = 0; i < 20000 && F.ep->sq_head != F.ep->sq_tail; i++)
        fz_poll(remote_checked);
    if (F.ep->sq_head != F.ep->sq_tail)
        fz_die("%llu operations never completed after %s", (ULLONG)(F.ep->sq_tail - F.ep->sq_head),
               after);
}

#endif
