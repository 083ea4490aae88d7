/*
 * boot.c - join a job on this host through the bootstrap board (board.h):
 * publish our address, wait for everybody, and barriers.
 *
 * The board is shared memory, so waiting is a futex on its counters: no
 * sockets, no files. Without ULN_BOOT_FD but with ULN_ROOT, the ranks meet over
 * TCP at rank 0 instead (root.c), which works across hosts and needs no
 * launcher. With neither, a process started by a PMIx server (mpirun, srun
 * --mpi=pmix) joins through PMIx (pmix.c). Otherwise the process is a job of
 * one and makes its own board.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "boot/board.h"
#include "boot/pmix.h"
#include "boot/root.h"

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    /* Not FUTEX_PRIVATE: the word is in memory shared between processes. */
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* Who we are: the core's uln_boot_want, as this file refines it. */
struct boot_id {
    long rank, size, fd;
    uint64_t key;
};

/* A task of a multi-task srun step with no PMIx (--mpi=none, pmi2) would run
 * as one of many jobs of one without a word: task 0 says so, once per step. */
static void srun_alone_warn(void)
{
    const char *id = getenv("SLURM_PROCID"), *n = getenv("SLURM_STEP_NUM_TASKS");
    if (!n) n = getenv("SLURM_NTASKS");
    if (!id || strcmp(id, "0") != 0 || !n || atol(n) < 2) return;
    fprintf(stderr,
            "ulnet: srun started %s tasks with no PMIx server: each is a job of one. "
            "Use srun --mpi=pmix%s, or ULN_ROOT with SLURM_PROCID and SLURM_NTASKS "
            "(docs/running.md, Under srun)\n",
            n, uln_pmix_built() ? "" : " with a ulnet built with PMIx");
}

/* Not started by a launcher: a job of one, on a board of our own. */
static int boot_alone(struct uln_boot *boot, struct boot_id *id, bool pmix)
{
    if (id->size > 1) {
        fprintf(stderr,
                "ulnet: ULN_SIZE=%ld but neither ULN_BOOT_FD nor ULN_ROOT%s; start ranks with "
                "ulnrun, or set ULN_ROOT=ip:port\n",
                id->size, uln_pmix_built() ? " nor a PMIx server" : "");
        return -EINVAL;
    }
    if (pmix)
        /* Each rank would think it is alone: say so rather than let a
         * multi-rank job run as many jobs of one without a word. */
        fprintf(stderr, "ulnet: started by a PMIx server, but this ulnet was built without "
                        "PMIx: a job of one (set ULN_ROOT to join the others)\n");
    else
        srun_alone_warn();
    id->rank = 0;
    id->size = 1;
    id->fd = uln_board_create(1);
    if (id->fd < 0) return (int)id->fd;
    fcntl((int)id->fd, F_SETFD, FD_CLOEXEC); /* private to us: keep it out of exec'd programs */
    boot->board_fd = (int)id->fd;            /* ours to close */
    if (id->key == 0 && getentropy(&id->key, sizeof id->key) != 0) return -errno;
    if (id->key == 0) id->key = 1;
    return 0;
}

/* Map the board at id->fd and check it is the job's. */
static int map_board(struct uln_boot *boot, const struct boot_id *id)
{
    struct stat st;
    if (fstat((int)id->fd, &st) != 0) return -errno;
    size_t len = uln_board_bytes((unsigned)id->size);
    if ((size_t)st.st_size < len) {
        fprintf(stderr, "ulnet: bootstrap board too small for %ld ranks\n", id->size);
        return -EINVAL;
    }
    void *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, (int)id->fd, 0);
    if (b == MAP_FAILED) return -errno;
    boot->board = b;
    boot->board_len = len;
    if (boot->board->magic != ULN_BOARD_MAGIC || boot->board->nranks != (uint32_t)id->size) {
        fprintf(stderr, "ulnet: bootstrap board does not match ULN_SIZE=%ld\n", id->size);
        return -EINVAL;
    }
    return 0;
}

/* No job: a private board with a slot per peer id, ours in slot 0; the
 * others are filled by uln_peer_insert from the addresses it is given. The
 * key is this context's own, fresh at every open: it names this life. */
static int boot_none(struct uln_boot *boot, unsigned max_peers)
{
    int rc = uln_boot_private_board(boot, max_peers);
    if (rc) return rc;
    boot->no_job = true;
    boot->rank = 0;
    boot->size = (int)max_peers;
    do
        if (getentropy(&boot->job_key, sizeof boot->job_key) != 0) return -errno;
    while (boot->job_key == 0);
    return 0;
}

int uln_boot_init(struct uln_boot *boot, const struct uln_boot_want *w)
{
    boot->board_fd = -1;
    if (w->no_job) return boot_none(boot, w->max_peers);
    struct boot_id id = {w->rank, w->size, w->fd, w->key};
    int rc;
    const char *root = w->root;
    bool pmix = id.fd < 0 && !root && uln_pmix_started();
    int timeout_s = w->timeout_s;
    /* ULN_BOOT_FD wins: a board from ulnrun is the cheaper way on one host.
     * ULN_ROOT then, as it is set on purpose, where PMIx's variables may only
     * have been inherited from a launcher further up. */
    if (id.fd < 0 && root) return uln_root_init(boot, root, id.rank, id.size, id.key, timeout_s);
    if (pmix && uln_pmix_built()) return uln_pmix_init(boot, id.rank, id.size, id.key, timeout_s);

    if (id.fd < 0 && (rc = boot_alone(boot, &id, pmix)) != 0) return rc;
    if (id.rank < 0 || id.size <= 0 || id.key == 0) {
        fprintf(stderr, "ulnet: ULN_BOOT_FD set but ULN_RANK/ULN_SIZE/ULN_JOB_KEY missing\n");
        return -EINVAL;
    }
    if (id.rank >= id.size) return -EINVAL;
    if ((rc = map_board(boot, &id)) != 0) return rc;
    boot->rank = (int)id.rank;
    boot->size = (int)id.size;
    boot->job_key = id.key;
    return 0;
}

int uln_boot_publish(struct uln_boot *boot, const void *addr, size_t len)
{
    if (boot->root) return uln_root_publish(boot, addr, len);
    if (boot->pmix) return uln_pmix_publish(boot, addr, len);
    struct uln_board_slot *s = uln_board_slot(boot->board, boot->rank);
    if (boot->no_job) { /* our slot of a private board: nobody else reads it */
        if (len > sizeof s->addr) return -EINVAL;
        memcpy(s->addr, addr, len);
        s->pid = (int32_t)getpid();
        atomic_store_explicit(&s->ready, 1, memory_order_release);
        return 0;
    }
    if (len > sizeof s->addr) return -EINVAL;
    if (atomic_load_explicit(&s->ready, memory_order_acquire)) {
        fprintf(stderr, "ulnet: rank %d joined twice (or two processes have that rank)\n",
                boot->rank);
        return -EADDRINUSE;
    }
    memcpy(s->addr, addr, len);
    s->pid = getpid();
    /* Release: the address is written before a peer can see the slot ready. */
    atomic_store_explicit(&s->ready, 1, memory_order_release);
    if (atomic_fetch_add(&boot->board->arrived, 1) + 1 == (uint32_t)boot->size)
        futex(&boot->board->arrived, FUTEX_WAKE, INT_MAX, NULL);
    return 0;
}

static int wait_change(_Atomic uint32_t *w, uint32_t seen, const struct timespec *deadline)
{
    struct timespec now, left;
    if (deadline) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        left.tv_sec = deadline->tv_sec - now.tv_sec;
        left.tv_nsec = deadline->tv_nsec - now.tv_nsec;
        if (left.tv_nsec < 0) left.tv_sec--, left.tv_nsec += 1000000000;
        if (left.tv_sec < 0) return -ETIMEDOUT;
    }
    if (futex(w, FUTEX_WAIT, seen, deadline ? &left : NULL) != 0 && errno == ETIMEDOUT)
        return -ETIMEDOUT;
    return 0;
}

static struct timespec *deadline_in(int timeout_ms, struct timespec *ts)
{
    if (timeout_ms < 0) return NULL;
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) ts->tv_sec++, ts->tv_nsec -= 1000000000;
    return ts;
}

int uln_boot_wait_all(struct uln_boot *boot, int timeout_ms)
{
    if (boot->no_job) return 0; /* nobody to wait for */
    if (boot->root) return uln_root_wait_all(boot, timeout_ms);
    if (boot->pmix) return uln_pmix_wait_all(boot, timeout_ms);
    struct timespec ts, *dl = deadline_in(timeout_ms, &ts);
    for (;;) {
        uint32_t n = atomic_load_explicit(&boot->board->arrived, memory_order_acquire);
        if (n >= (uint32_t)boot->size) return 0;
        int rc = wait_change(&boot->board->arrived, n, dl);
        if (rc) return rc;
    }
}

const void *uln_boot_peer(const struct uln_boot *boot, int peer, int32_t *pid)
{
    struct uln_board_slot *s = uln_board_slot(boot->board, peer);
    /* Acquire: pairs with the release in uln_boot_publish (and
     * uln_boot_slot_set, uln_board_slot_ready_wire). */
    if (!atomic_load_explicit(&s->ready, memory_order_acquire)) return NULL;
    *pid = s->pid;
    return s->addr;
}

int uln_boot_slot_set(struct uln_boot *boot, int peer, int32_t pid, const void *addr, size_t len)
{
    if (!boot->no_job || peer < 0 || peer >= boot->size || len > ULN_BOOT_ADDR_BYTES)
        return -EINVAL;
    struct uln_board_slot *s = uln_board_slot(boot->board, peer);
    atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
    if (!addr) return 0; /* cleared: a peer that could not be learnt */
    s->pid = pid;
    memcpy(s->addr, addr, len);
    memset(s->addr + len, 0, sizeof s->addr - len);
    /* Release: pairs with uln_boot_peer's acquire (a transport's lookup). */
    atomic_store_explicit(&s->ready, 1, memory_order_release);
    return 0;
}

int uln_boot_slice(int64_t deadline_ms)
{
    int64_t now = uln_boot_now_ms();
    if (deadline_ms <= now) return 0;
    return deadline_ms - now < 1 ? (int)(deadline_ms - now) : 1;
}

/* Has the process behind rank exited? Every rank on a board runs on this
 * host, so its pid names it: a pidfd cannot be opened once the process is
 * reaped (ESRCH) and reads as ready once it has exited and not yet been. */
static bool rank_gone(struct uln_boot *boot, int rank)
{
    int32_t pid;
    if (rank == boot->rank || !uln_boot_peer(boot, rank, &pid) || pid <= 0) return false;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) return errno == ESRCH;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    bool gone = poll(&pf, 1, 0) == 1;
    close(fd);
    return gone;
}

/* A member that died never arrives: look for one while waiting, a few ranks
 * per look (round robin from *next), so a waiter costs O(1) syscalls per
 * look however large the job and a death is seen within size/8 looks. */
static bool member_dead(struct uln_boot *boot, unsigned *next)
{
    unsigned n = boot->size < 8 ? (unsigned)boot->size : 8;
    for (unsigned k = 0; k < n; k++, *next = (*next + 1) % (unsigned)boot->size)
        if (rank_gone(boot, (int)*next)) {
            /* Let the transport reaching it know (shm: it marks the peer
             * dead and counts it in peers_dead, once). */
            if (boot->hooks.peer_dead) boot->hooks.peer_dead(boot->hooks.arg, (int)*next);
            return true;
        }
    return false;
}

int uln_boot_barrier(struct uln_boot *boot, int timeout_ms)
{
    if (boot->no_job) return -EOPNOTSUPP; /* no members to wait for */
    if (boot->root) return uln_root_barrier(boot, timeout_ms);
    if (boot->pmix) return uln_pmix_barrier(boot, timeout_ms);
    struct uln_board_hdr *b = boot->board;
    /* A member is dead: no barrier of this job can complete again, and
     * counting in once more would release the survivors' current one. */
    if (boot->bar_broken) return -ECONNRESET;
    struct timespec ts, *dl = deadline_in(timeout_ms, &ts);
    /* Sense reversal by generation: read the generation before counting in, so
     * the last arrival's bump is never missed. */
    uint32_t gen = atomic_load_explicit(&b->bar_gen, memory_order_acquire);
    if (atomic_fetch_add(&b->bar_count, 1) + 1 == (uint32_t)boot->size) {
        atomic_store(&b->bar_count, 0); /* reset before releasing the others */
        atomic_fetch_add(&b->bar_gen, 1);
        futex(&b->bar_gen, FUTEX_WAKE, INT_MAX, NULL);
        return 0;
    }
    unsigned next = 0;
    int64_t look = uln_boot_now_ms();
    while (atomic_load_explicit(&b->bar_gen, memory_order_acquire) == gen) {
        /* Wait in short slices and keep the endpoints moving in between: over
         * UDP a peer may need this rank to resend or answer before it can
         * arrive here (the core's idle hook). The slices grow while there is
         * nothing to do: hundreds of waiting ranks must not starve the few
         * still working (its idle_ms). */
        struct timespec slice;
        clock_gettime(CLOCK_MONOTONIC, &slice);
        slice.tv_nsec += (long)uln_boot_idle_ms(boot) * 1000000;
        if (slice.tv_nsec >= 1000000000) slice.tv_sec++, slice.tv_nsec -= 1000000000;
        bool last = dl && (slice.tv_sec > dl->tv_sec ||
                           (slice.tv_sec == dl->tv_sec && slice.tv_nsec >= dl->tv_nsec));
        int rc = wait_change(&b->bar_gen, gen, last ? dl : &slice);
        if (rc == -ETIMEDOUT && !last) {
            uln_boot_idle(boot);
            /* Every 100 ms: a dead member fails the barrier (-ECONNRESET)
             * rather than holding the others for their whole timeout. */
            if (uln_boot_now_ms() - look >= 100) {
                look = uln_boot_now_ms();
                /* A member that released the barrier and then exited is not
                 * a failure: look at the generation again after the death. */
                if (member_dead(boot, &next) &&
                    atomic_load_explicit(&b->bar_gen, memory_order_acquire) == gen) {
                    boot->bar_broken = true;
                    return -ECONNRESET;
                }
            }
            continue;
        }
        if (rc) {
            /* Leave the count as it is: a timed-out barrier has broken the job's
             * collective state; callers treat it as fatal. */
            return rc;
        }
    }
    return 0;
}

int uln_boot_private_board(struct uln_boot *boot, unsigned nranks)
{
    /* Private anonymous memory: nobody else maps it, so no futex or fd. */
    size_t len = uln_board_bytes(nranks);
    void *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return -errno;
    boot->board = b;
    boot->board_len = len;
    boot->board_fd = -1;
    boot->board->magic = ULN_BOARD_MAGIC;
    boot->board->nranks = nranks;
    boot->board->slot_bytes = ULN_BOARD_SLOT_BYTES;
    return 0;
}

void uln_boot_fini(struct uln_boot *boot)
{
    uln_root_fini(boot);
    uln_pmix_fini(boot);
    if (boot->board) munmap(boot->board, boot->board_len);
    if (boot->board_fd >= 0) close(boot->board_fd);
    boot->board = NULL;
}

const char *uln_boot_mode(const struct uln_boot *boot)
{
    /* board_fd is open only on a board we made ourselves (a job of one). */
    if (boot->no_job) return "none";
    return boot->root ? "root" : boot->pmix ? "pmix" : boot->board_fd >= 0 ? "single" : "ulnrun";
}
