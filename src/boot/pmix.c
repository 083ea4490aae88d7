/*
 * pmix.c - join a job through the PMIx server that started this process
 * (contract in pmix.h).
 *
 * A PMIx server (Open MPI's mpirun/orted, Slurm's srun --mpi=pmix, PRRTE) already
 * knows every rank of the job and can move small data between them, so ulnet
 * needs neither ulnrun's board nor a rendezvous of its own:
 *
 *   uln_boot_init      PMIx_Init: namespace and rank; PMIX_JOB_SIZE; job key
 *   uln_boot_publish   PMIx_Put(slot) + PMIx_Commit, then PMIx_Fence_nb with
 *                      PMIX_COLLECT_DATA is started
 *   uln_boot_wait_all  the fence completes; one PMIx_Get per peer fills a
 *                      private board (board.h's layout)
 *   uln_barrier        PMIx_Fence_nb without data
 *
 * Fences are non-blocking so the caller's thread keeps driving the endpoints
 * (the core's idle hook) while it waits, and can give up at its deadline. A fence
 * that was given up on is not started again: the next barrier waits for the
 * same one, as root.c counts its barriers.
 *
 * The PMIx client library is reference counted: an MPI library in the same
 * process may have called PMIx_Init before us, and our PMIx_Finalize leaves it
 * its connection.
 */
#define _GNU_SOURCE
#include "boot/pmix.h"
#include "boot/root.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "boot/board.h"

bool uln_pmix_started(void)
{
    /* Every PMIx server gives its clients their identity in these variables
     * (with the server's address). PMIx_Init is not simply tried: without them
     * it would look for a system-wide server or start a singleton, which costs
     * every single-process program time and may leave a connection behind. */
    const char *ns = getenv("PMIX_NAMESPACE"), *rank = getenv("PMIX_RANK");
    return (ns && *ns) || (rank && *rank);
}

uint64_t uln_pmix_job_key(const char *nspace)
{
    /* FNV-1a over a fixed prefix and the namespace, then a 64-bit finaliser so
     * namespaces that differ in one character (Open MPI numbers its jobs, Slurm
     * its steps) differ in about half the key's bits. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = "ulnet/pmix:"; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    for (const char *s = nspace; s && *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1; /* 0 means "no key" everywhere else */
}

#ifndef ULN_HAVE_PMIX

/* Built without PMIx (ULN_PMIX=OFF, or no pmix.pc at configure time). */
bool uln_pmix_built(void)
{
    return false;
}
int uln_pmix_init(struct uln_boot *boot, long rank, long size, uint64_t key, int timeout_s)
{
    return -ENOTSUP;
}
int uln_pmix_publish(struct uln_boot *boot, const void *addr, size_t len)
{
    return -ENOTSUP;
}
int uln_pmix_wait_all(struct uln_boot *boot, int timeout_ms)
{
    return -ENOTSUP;
}
int uln_pmix_barrier(struct uln_boot *boot, int timeout_ms)
{
    return -ENOTSUP;
}
void uln_pmix_fini(struct uln_boot *boot) {}

#else

#include <limits.h>
#include <linux/futex.h>
#include <pmix.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SLOT_WIRE ULN_BOARD_SLOT_WIRE /* pid (big-endian) + address, as root.c's */

struct uln_pmix {
    pmix_proc_t me;
    char key[32];  /* "ulnet.slot.<n>": the n-th context this process opened */
    int timeout_s; /* ULN_BOOT_TIMEOUT */
    int64_t boot_deadline;
    bool inited, published, have_table, info_loaded;
    pmix_info_t collect; /* PMIX_COLLECT_DATA = true, for the address fence */
    uint32_t fences;     /* fences started */
    /* Written by PMIx's progress thread in fence_done. */
    _Atomic uint32_t fences_done; /* futex word */
    _Atomic int fence_status;     /* the last completed fence's */
};

/* Contexts opened in PMIx mode by this process: each publishes under its own
 * key, so a second uln_open never reads the first one's addresses. Every rank
 * opens its contexts in the same order (uln_open is collective). */
static _Atomic unsigned pmix_opens;

bool uln_pmix_built(void)
{
    return true;
}

/* A PMIx status as a ulnet one: a fence that timed out is -ETIMEDOUT; any
 * other failure means the server gave up on the job (a rank died, the server
 * went away): the job is broken, as when a rank is lost in ULN_ROOT mode. */
static int errno_of(pmix_status_t st)
{
    if (st == PMIX_SUCCESS) return 0;
    return st == PMIX_ERR_TIMEOUT ? -ETIMEDOUT : -ECONNRESET;
}

/* PMIx's progress thread calls this when a fence completes. */
static void fence_done(pmix_status_t st, void *cbdata)
{
    struct uln_pmix *P = cbdata;
    atomic_store_explicit(&P->fence_status, st, memory_order_relaxed);
    /* Release: the status is visible to whoever sees the count move. */
    atomic_fetch_add_explicit(&P->fences_done, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&P->fences_done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static int fence_start(struct uln_boot *boot, bool collect)
{
    struct uln_pmix *P = boot->pmix;
    /* NULL procs: every process of our namespace, i.e. the job. */
    pmix_status_t st =
        PMIx_Fence_nb(NULL, 0, collect ? &P->collect : NULL, collect ? 1 : 0, fence_done, P);
    if (st == PMIX_OPERATION_SUCCEEDED) {
        /* Done on the spot; PMIx calls no callback then. */
        P->fences++;
        fence_done(PMIX_SUCCESS, P);
        return 0;
    }
    if (st != PMIX_SUCCESS) {
        fprintf(stderr, "ulnet: rank %d: PMIx_Fence_nb failed: %s\n", boot->rank,
                PMIx_Error_string(st));
        return errno_of(st);
    }
    P->fences++;
    return 0;
}

/* Wait until every fence started has completed, or deadline_ms passes. With
 * drive, keep the endpoints moving in 1 ms slices (over UDP a peer may need
 * this rank to resend or answer before it can reach the fence). */
static int fence_wait(struct uln_boot *boot, int64_t deadline_ms, bool drive)
{
    struct uln_pmix *P = boot->pmix;
    for (;;) {
        uint32_t done = atomic_load_explicit(&P->fences_done, memory_order_acquire);
        if (done == P->fences)
            return errno_of(atomic_load_explicit(&P->fence_status, memory_order_relaxed));
        int64_t left = deadline_ms - uln_boot_now_ms();
        if (left <= 0) return -ETIMEDOUT;
        int ms = drive ? uln_boot_slice(deadline_ms) : left < 100 ? (int)left : 100;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        syscall(SYS_futex, (uint32_t *)&P->fences_done, FUTEX_WAIT_PRIVATE, done, &ts, NULL, 0);
        if (drive) uln_boot_idle(boot);
    }
}

/* A slot from its wire form (pid big-endian, then the address): ready. */
static void slot_fill(struct uln_board_slot *s, const uint8_t *w)
{
    memcpy(uln_board_slot_wire(s), w, ULN_BOARD_SLOT_WIRE);
    uln_board_slot_ready_wire(s);
}

/* A number PMIx hands back, of whichever integer type the server chose. */
static bool value_number(const pmix_value_t *v, uint64_t *out)
{
    switch (v->type) {
    case PMIX_UINT32:
        *out = v->data.uint32;
        return true;
    case PMIX_UINT64:
        *out = v->data.uint64;
        return true;
    case PMIX_UINT:
        *out = v->data.uint;
        return true;
    case PMIX_SIZE:
        *out = v->data.size;
        return true;
    case PMIX_UINT16:
        *out = v->data.uint16;
        return true;
    case PMIX_INT:
        *out = v->data.integer < 0 ? 0 : (uint64_t)v->data.integer;
        return v->data.integer >= 0;
    case PMIX_INT32:
        *out = v->data.int32 < 0 ? 0 : (uint64_t)v->data.int32;
        return v->data.int32 >= 0;
    case PMIX_INT64:
        *out = v->data.int64 < 0 ? 0 : (uint64_t)v->data.int64;
        return v->data.int64 >= 0;
    default:
        return false;
    }
}

int uln_pmix_init(struct uln_boot *boot, long rank, long size, uint64_t key, int timeout_s)
{
    struct uln_pmix *P = calloc(1, sizeof *P);
    if (!P) return -ENOMEM;
    boot->pmix = P;
    P->timeout_s = timeout_s;
    P->boot_deadline = uln_boot_now_ms() + (int64_t)timeout_s * 1000;

    pmix_status_t st = PMIx_Init(&P->me, NULL, 0);
    if (st != PMIX_SUCCESS) {
        /* Most likely the variables were inherited from a launcher further up
         * and no server waits for us: say how to get past it. */
        const char *ns = getenv("PMIX_NAMESPACE"), *r = getenv("PMIX_RANK");
        fprintf(stderr,
                "ulnet: PMIX_NAMESPACE=%s PMIX_RANK=%s say a PMIx server started us, but "
                "PMIx_Init failed: %s (unset them, or set ULN_ROOT)\n",
                ns ? ns : "", r ? r : "", PMIx_Error_string(st));
        return -ECONNREFUSED;
    }
    P->inited = true;

    pmix_proc_t job;
    PMIX_PROC_LOAD(&job, P->me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = NULL;
    uint64_t n = 0;
    st = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
    bool ok = st == PMIX_SUCCESS && v && value_number(v, &n);
    if (v) PMIX_VALUE_RELEASE(v);
    if (!ok) {
        fprintf(stderr, "ulnet: PMIx gives no job size (PMIX_JOB_SIZE): %s\n",
                PMIx_Error_string(st));
        return -EPROTO;
    }
    if (n < 1 || n > ULN_BOARD_MAX_RANKS || P->me.rank >= n) {
        fprintf(stderr, "ulnet: PMIx job of %llu ranks (this is rank %u): ulnet takes 1..%u\n",
                (unsigned long long)n, P->me.rank, ULN_BOARD_MAX_RANKS);
        return -EINVAL;
    }
    /* Settings given on top of PMIx must describe the same job. */
    if ((rank >= 0 && rank != (long)P->me.rank) || (size > 0 && size != (long)n)) {
        fprintf(stderr,
                "ulnet: ULN_RANK/ULN_SIZE (%ld/%ld) contradict PMIx's rank %u of %llu; unset "
                "them, or set ULN_ROOT to bootstrap without PMIx\n",
                rank, size, P->me.rank, (unsigned long long)n);
        return -EINVAL;
    }
    boot->rank = (int)P->me.rank;
    boot->size = (int)n;
    boot->job_key = key ? key : uln_pmix_job_key(P->me.nspace);
    snprintf(P->key, sizeof P->key, "ulnet.slot.%u", atomic_fetch_add(&pmix_opens, 1));
    bool yes = true;
    PMIX_INFO_LOAD(&P->collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    P->info_loaded = true;

    /* The table of addresses goes in a private board (boot.c). */
    return uln_boot_private_board(boot, (unsigned)n);
}

int uln_pmix_publish(struct uln_boot *boot, const void *addr, size_t len)
{
    struct uln_pmix *P = boot->pmix;
    uint8_t w[SLOT_WIRE] = {0};
    if (len > SLOT_WIRE - 4) return -EINVAL;
    if (P->published) {
        fprintf(stderr, "ulnet: rank %d published twice\n", boot->rank);
        return -EADDRINUSE;
    }
    uint32_t pid = (uint32_t)getpid();
    w[0] = (uint8_t)(pid >> 24), w[1] = (uint8_t)(pid >> 16), w[2] = (uint8_t)(pid >> 8);
    w[3] = (uint8_t)pid;
    memcpy(w + 4, addr, len);

    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)w; /* PMIx_Put copies it */
    v.data.bo.size = sizeof w;
    pmix_status_t st = PMIx_Put(PMIX_GLOBAL, P->key, &v);
    if (st == PMIX_SUCCESS) st = PMIx_Commit();
    if (st != PMIX_SUCCESS) {
        fprintf(stderr, "ulnet: rank %d: PMIx_Put/PMIx_Commit of our address failed: %s\n",
                boot->rank, PMIx_Error_string(st));
        return errno_of(st);
    }
    P->published = true;
    slot_fill(uln_board_slot(boot->board, boot->rank), w);
    /* The fence that spreads everybody's slot; uln_pmix_wait_all waits for it. */
    return fence_start(boot, true);
}

int uln_pmix_wait_all(struct uln_boot *boot, int timeout_ms)
{
    struct uln_pmix *P = boot->pmix;
    if (!P->published) return -EINVAL;
    if (P->have_table) return 0;
    /* Never past ULN_BOOT_TIMEOUT, whatever the caller allows. */
    int64_t deadline = P->boot_deadline;
    if (timeout_ms >= 0 && uln_boot_now_ms() + timeout_ms < deadline)
        deadline = uln_boot_now_ms() + timeout_ms;
    int rc = fence_wait(boot, deadline, false);
    if (rc == -ETIMEDOUT) {
        fprintf(stderr,
                "ulnet: rank %d: bootstrap timed out after %d s in the PMIx fence: a rank of job "
                "%s has not called uln_open\n",
                boot->rank, P->timeout_s, P->me.nspace);
        return rc;
    }
    if (rc) {
        fprintf(stderr, "ulnet: rank %d: the PMIx fence of job %s failed: %s\n", boot->rank,
                P->me.nspace,
                PMIx_Error_string(atomic_load_explicit(&P->fence_status, memory_order_relaxed)));
        return rc;
    }

    /* Everybody's slot is at our PMIx server now. IMMEDIATE: a rank that put
     * nothing (it is not a ulnet program) is an error at once, not a wait for
     * data that never comes; TIMEOUT bounds the rest. */
    pmix_info_t info[2];
    bool yes = true;
    int secs = (int)((deadline - uln_boot_now_ms() + 999) / 1000);
    if (secs < 1) secs = 1;
    PMIX_INFO_LOAD(&info[0], PMIX_IMMEDIATE, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    for (int r = 0; r < boot->size && !rc; r++) {
        if (r == boot->rank) continue;
        pmix_proc_t peer;
        PMIX_PROC_LOAD(&peer, P->me.nspace, (pmix_rank_t)r);
        pmix_value_t *v = NULL;
        pmix_status_t st = PMIx_Get(&peer, P->key, info, 2, &v);
        if (st == PMIX_SUCCESS && v && v->type == PMIX_BYTE_OBJECT &&
            v->data.bo.size == SLOT_WIRE) {
            slot_fill(uln_board_slot(boot->board, r), (const uint8_t *)v->data.bo.bytes);
        } else {
            fprintf(stderr,
                    "ulnet: rank %d: no ulnet address from rank %d through PMIx (%s): does every "
                    "rank of the job call uln_open?\n",
                    boot->rank, r,
                    st != PMIX_SUCCESS ? PMIx_Error_string(st) : "not a ulnet board slot");
            rc = st == PMIX_ERR_TIMEOUT ? -ETIMEDOUT : -EPROTO;
        }
        if (v) PMIX_VALUE_RELEASE(v);
    }
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (!rc) P->have_table = true;
    return rc;
}

int uln_pmix_barrier(struct uln_boot *boot, int timeout_ms)
{
    struct uln_pmix *P = boot->pmix;
    if (!P->have_table) return -EINVAL; /* not joined yet (uln_open did not finish) */
    if (boot->size == 1) return 0;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : uln_boot_now_ms() + timeout_ms;
    /* Counted: a call after a timeout waits for the fence it started instead
     * of entering a second one the others would match against the first. */
    if (atomic_load_explicit(&P->fences_done, memory_order_acquire) == P->fences) {
        int rc = fence_start(boot, false);
        if (rc) return rc;
    }
    int rc = fence_wait(boot, deadline, true);
    if (rc && rc != -ETIMEDOUT)
        fprintf(stderr, "ulnet: rank %d: PMIx fence of job %s failed in a barrier: %s\n",
                boot->rank, P->me.nspace,
                PMIx_Error_string(atomic_load_explicit(&P->fence_status, memory_order_relaxed)));
    return rc;
}

void uln_pmix_fini(struct uln_boot *boot)
{
    struct uln_pmix *P = boot->pmix;
    if (!P) return;
    bool pending = atomic_load_explicit(&P->fences_done, memory_order_acquire) != P->fences;
    if (P->inited) PMIx_Finalize(NULL, 0);
    if (P->info_loaded) PMIX_INFO_DESTRUCT(&P->collect);
    /* A fence we gave up on still holds P as its callback's argument; after
     * PMIx_Finalize no callback should come, but a few bytes are not worth
     * the risk of one writing into freed memory. */
    if (!pending) free(P);
    boot->pmix = NULL;
}

#endif /* ULN_HAVE_PMIX */
