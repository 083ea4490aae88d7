/*
 * shm.c - the shared-memory transport: processes on one host.
 *
 * A peer on this host is reached through its inbox (core/inbox.h): we map
 * its memfd, found through the bootstrap board (pid + descriptor number) at
 * /proc/<pid>/fd/<n>, and write our messages straight into the rings it
 * keeps for us; its doorbell (core/doorbell.h) wakes it if it sleeps. A dead
 * peer's memory stays valid while we map it, and its pidfd tells us it died.
 *
 * One-sided PUT/GET ("direct"): the initiator checks the target's key table
 * itself (MyVIA's user-level TLB: a read-only view) and copies with plain
 * loads/stores into a mapping of the target's region (memory from
 * uln_mem_alloc) or with process_vm_readv/writev (other memory). A hazard slot
 * tells the owner's uln_mr_dereg that somebody is inside a region.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/copy.h"
#include "transport/transports.h"
#include "boot/addr.h"

#define TCACHE_WAYS 64u /* translation cache entries per peer (direct-mapped) */

/* What a rank publishes on the board. */
struct shm_addr {
    int32_t inbox_fd;
    uint32_t pad_;
    uint64_t inbox_bytes; /* 0: unknown (an address from uln_addr): the object's size */
    uint64_t host;        /* uln_host_id: equal ones can map each other's inbox */
};

/* A mapped peer region: PNI's translation cache. Each endpoint has its own
 * per peer (struct uln_ep_peer), so endpoints driven by different threads
 * share nothing on this path. */
struct uln_tcache {
    uint64_t key;
    uint8_t *map; /* mmap of the memfd range */
    size_t map_len;
    uint8_t *base; /* region offset 0 */
};

struct shm_peer {
    uint8_t *inbox; /* NULL until attached */
    size_t inbox_len;
    struct uln_inbox_hdr *hdr;
    pid_t pid;
    int pidfd;
    /* Set once, by whichever thread's poll of the pidfd sees the exit first;
     * read without ordering: it only turns later operations into errors. */
    _Atomic bool dead;
    _Atomic bool cma_refused; /* any thread may find out */
    struct uln_bell_addr bell;
};

/* ---- settings ------------------------------------------------------------- */

struct shm_params { /* the block of uln_shm_settings */
    int direct;     /* ULN_SHM_DIRECT */
    int cma;        /* ULN_SHM_CMA */
};

static const struct uln_setting shm_table[] = {
    {"ULN_SHM_DIRECT", "1", 0, 1, "0: PUT/GET through the rings, placed by the target",
     ULN_SEC_MEMORY},
    {"ULN_SHM_CMA", "1", 0, 1, "0: never use process_vm_readv/writev", ULN_SEC_MEMORY},
};

static int shm_resolve(const struct uln_config *cfg, void *block)
{
    struct shm_params *sp = block;
    int rc = uln_setting_switch("ULN_SHM_DIRECT", cfg->shm_direct, &sp->direct);
    rc |= uln_setting_switch("ULN_SHM_CMA", cfg->shm_cma, &sp->cma);
    return rc;
}

/* uln_config_query's: as asked (uln_query's says whether CMA works). */
static void shm_info(const void *block, struct uln_info *info)
{
    const struct shm_params *sp = block;
    info->shm_direct = sp->direct;
    info->shm_cma = sp->cma;
}

static const struct uln_settings_group shm_settings = {
    .name = "shm",
    .table = shm_table,
    .n = sizeof shm_table / sizeof shm_table[0],
    .block_bytes = sizeof(struct shm_params),
    .resolve = shm_resolve,
    .info = shm_info,
};

static const struct shm_params *shm_params(const struct uln_ctx *ctx)
{
    return uln_params_block(&ctx->p, &shm_settings);
}

/* ---- context ---------------------------------------------------------------- */

struct uln_shm { /* ctx->tp_ctx[ULN_TPID_SHM] */
    bool direct; /* ULN_SHM_DIRECT: here, where the direct path reads it */
    _Atomic bool cma_ok;
    _Atomic bool cma_warned;
    struct shm_peer *peers;
    pthread_mutex_t attach_lock;
};

static inline struct uln_shm *shm_of(const struct uln_ctx *ctx)
{
    return ctx->tp_ctx[ULN_TPID_SHM];
}

/* Every peer this process reaches over shared memory holds one descriptor
 * here for as long as the job lasts (its pidfd: how we notice its death), and
 * opening its inbox takes one more for a moment. A rank that talks to most of
 * a job of 1000 or more would hit the usual soft limit of 1024 descriptors
 * and fail with -EMFILE: raise the soft limit, within the hard one, to the
 * job's size plus the 1024 the application had. Jobs that fit leave the
 * limit as it was. */
static void nofile_raise(int rank, int size)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)size + 256, want = (rlim_t)size + 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return;
    rlim_t to = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    if (to > rl.rlim_cur) {
        rl.rlim_cur = to;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (to < need && rank == 0)
        fprintf(stderr,
                "ulnet: RLIMIT_NOFILE allows %llu descriptors, a rank of this %d-rank job may need "
                "%llu: reaching more peers than that fails with -EMFILE (ulimit -Hn)\n",
                (unsigned long long)to, size, (unsigned long long)need);
}

static int uln_shm_open(struct uln_ctx *ctx, void *slot_addr, size_t slot_len)
{
    struct uln_shm *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    pthread_mutex_init(&s->attach_lock, NULL);
    ctx->tp_ctx[ULN_TPID_SHM] = s;
    nofile_raise(ctx->rank, ctx->size);
    s->peers = calloc((size_t)ctx->size, sizeof *s->peers);
    if (!s->peers) return -ENOMEM;
    for (int i = 0; i < ctx->size; i++)
        s->peers[i].pidfd = -1;

    /* Can we reach other processes' memory with process_vm_*? Only a real peer
     * can tell (see direct_cma); start hopeful unless told not to. */
    s->cma_ok = shm_params(ctx)->cma != 0;
    s->direct = shm_params(ctx)->direct != 0;

    struct shm_addr addr = {
        .inbox_fd = ctx->inbox->fd, .inbox_bytes = ctx->inbox->len, .host = uln_host_id()};
    if (slot_len < sizeof addr) return -EINVAL;
    memcpy(slot_addr, &addr, sizeof addr);
    return 0;
}

static bool uln_shm_cma_ok(const struct uln_ctx *ctx)
{
    return shm_of(ctx)->cma_ok;
}

static void tcache_drop(struct uln_tcache *t)
{
    if (t->map) munmap(t->map, t->map_len);
    memset(t, 0, sizeof *t);
}

static void uln_shm_close(struct uln_ctx *ctx)
{
    struct uln_shm *s = shm_of(ctx);
    if (!s) return;
    if (s->peers) {
        for (int i = 0; i < ctx->size; i++) {
            struct shm_peer *pp = &s->peers[i];
            if (pp->inbox && pp->inbox != ctx->inbox->base) munmap(pp->inbox, pp->inbox_len);
            if (pp->pidfd >= 0) close(pp->pidfd);
        }
        free(s->peers);
    }
    pthread_mutex_destroy(&s->attach_lock);
    free(s);
    ctx->tp_ctx[ULN_TPID_SHM] = NULL;
}

static int attach_locked(struct uln_ctx *ctx, int peer)
{
    struct uln_shm *s = shm_of(ctx);
    struct shm_peer *pp = &s->peers[peer];
    int32_t pid;
    const struct shm_addr *a = uln_tp_part(uln_boot_peer(&ctx->boot, peer, &pid), ULN_TPID_SHM);
    if (!a) return -ECONNRESET;
    const struct uln_peer_rec *rec = &ctx->peer_recs[peer];

    if (uln_peer_is_self(ctx, peer)) {
        pp->inbox = ctx->inbox->base;
        pp->inbox_len = ctx->inbox->len;
    } else {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)a->inbox_fd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == ENOENT || e == ESRCH) return -ECONNRESET; /* the peer is gone */
            fprintf(stderr, "ulnet: rank %d cannot open rank %d's inbox: %s\n", ctx->rank, peer,
                    strerror(e));
            return -e;
        }
        struct stat st;
        uint64_t bytes = a->inbox_bytes;
        if (fstat(fd, &st) == 0 && bytes == 0) bytes = (uint64_t)st.st_size;
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != bytes || bytes < 4096) {
            close(fd);
            return -EPROTO;
        }
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd); /* the mapping keeps the object alive */
        if (m == MAP_FAILED) return -errno;
        pp->inbox = m;
        pp->inbox_len = bytes;
    }
    struct uln_inbox_hdr *h = (struct uln_inbox_hdr *)pp->inbox;
    if (!uln_inbox_hdr_ok(ctx, h, rec->rank, pp->inbox_len)) {
        fprintf(stderr, "ulnet: rank %d's inbox does not match ours (different settings?)\n", peer);
        if (pp->inbox != ctx->inbox->base) munmap(pp->inbox, pp->inbox_len);
        pp->inbox = NULL;
        return -EPROTO;
    }
    if (h->job_key != rec->key) { /* another job, or another life of the peer */
        ULN_COUNT(&ctx->stats, refused_job, 1);
        if (pp->inbox != ctx->inbox->base) munmap(pp->inbox, pp->inbox_len);
        pp->inbox = NULL;
        return -EPERM;
    }
    if (pp->inbox != ctx->inbox->base) {
        /* The key table is the owner's to write: peers get a read-only view, so
         * a stray store in a peer cannot forge a key. */
        mprotect(pp->inbox + h->keys_off, h->hazards_off - h->keys_off, PROT_READ);
        /* Tell the owner we may enter its regions from now on. A seq_cst RMW
         * before any store to our hazard slot there: an owner that clears a
         * key and then reads this map (uln_mr_dereg) sees our bit if we can
         * have seen the key live. */
        if (!ctx->no_job) uln_inbox_mark(uln_inbox_attached_at(pp->inbox, h), ctx->rank);
    }
    pp->pid = pid;
    pp->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    uln_doorbell_addr(&pp->bell, rec->key, rec->rank);
    /* Release: other threads that see hdr set see the whole peer entry. */
    __atomic_store_n(&pp->hdr, h, __ATOMIC_RELEASE);
    return 0;
}

static int uln_shm_attach(struct uln_ctx *ctx, int peer)
{
    struct uln_shm *s = shm_of(ctx);
    struct shm_peer *pp = &s->peers[peer];
    /* Acquire: pairs with the release at the end of attach_locked. */
    if (ULN_LIKELY(__atomic_load_n(&pp->hdr, __ATOMIC_ACQUIRE) != NULL))
        return atomic_load_explicit(&pp->dead, memory_order_relaxed) ? -ECONNRESET : 0;
    pthread_mutex_lock(&s->attach_lock);
    int rc = pp->hdr ? 0 : attach_locked(ctx, peer);
    pthread_mutex_unlock(&s->attach_lock);
    return rc;
}

static bool uln_shm_peer_dead(struct uln_ctx *ctx, int peer)
{
    struct shm_peer *pp = &shm_of(ctx)->peers[peer];
    if (atomic_load_explicit(&pp->dead, memory_order_relaxed)) return true;
    if (uln_peer_is_self(ctx, peer) || pp->pidfd < 0) return false;
    struct pollfd pf = {.fd = pp->pidfd, .events = POLLIN};
    if (poll(&pf, 1, 0) != 1) return false; /* a pidfd is readable once its process exits */
    /* Its memory stays mapped here (the mappings hold the objects), so a late
     * access cannot fault; from now on operations on it fail instead. */
    if (!atomic_exchange(&pp->dead, true)) atomic_fetch_add(&ctx->stats.peers_dead, 1);
    return true;
}

static void uln_shm_wake(struct uln_ctx *ctx, int peer)
{
    struct shm_peer *pp = &shm_of(ctx)->peers[peer];
    uln_doorbell_ring(ctx, &pp->hdr->sleepers, &pp->bell);
}

/* ---- direct PUT/GET --------------------------------------------------------- */

/* May we announce ourselves in the owner h's hazard slots with a plain
 * store? Only if its dereg fences with membarrier and our process is
 * registered for it (mr.c has the argument). */
static inline bool hz_light(const struct uln_ctx *ctx, const struct uln_inbox_hdr *h)
{
    return ctx->hz_light && h->dereg_fence;
}

static void uln_shm_peer_free(struct uln_ep *ep, struct uln_ep_peer *epp)
{
    (void)ep;
    struct uln_tcache *tc = epp->tp_peer;
    epp->tp_peer = NULL;
    epp->win = (struct uln_rkey_win){0}; /* it may point into a mapping below */
    if (!tc) return;
    for (unsigned w = 0; w < TCACHE_WAYS; w++)
        tcache_drop(&tc[w]);
    free(tc);
}

/* The cache is the endpoint's state for the peer (pp->tp_peer), made on the
 * first direct access that needs it. */
static uint8_t *tcache_lookup(struct uln_ep_peer *epp, struct shm_peer *pp,
                              const struct uln_key_entry *e, uint64_t key, struct uln_stats *st)
{
    if (!epp->tp_peer) {
        epp->tp_peer = calloc(TCACHE_WAYS, sizeof(struct uln_tcache));
        if (!epp->tp_peer) return NULL;
    }
    struct uln_tcache *t =
        &((struct uln_tcache *)epp->tp_peer)[(key >> ULN_KEY_INDEX_SHIFT) % TCACHE_WAYS];
    if (ULN_LIKELY(t->key == key)) {
        ULN_COUNT(st, cache_hits, 1);
        return t->base;
    }
    /* Miss: map the region's memfd (first touch costs open + mmap + faults). */
    ULN_COUNT(st, cache_misses, 1);
    if (t->key && epp->win.key == t->key) epp->win.key = 0; /* its mapping goes */
    tcache_drop(t);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pp->pid, (int)e->memfd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st_;
    uint64_t page = 4096, start = e->memfd_off & ~(page - 1);
    size_t len = (size_t)(e->memfd_off + e->len - start);
    if (fstat(fd, &st_) != 0 || (uint64_t)st_.st_size != e->memfd_len ||
        e->memfd_off + e->len > (uint64_t)st_.st_size) {
        close(fd);
        return NULL;
    }
    void *m = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start) : NULL;
    close(fd);
    if (m == MAP_FAILED) return NULL;
    t->key = key;
    t->map = m;
    t->map_len = len;
    t->base = (uint8_t *)m + (e->memfd_off - start);
    return t->base;
}

/* process_vm_* takes the local segments as they are: one system call for
 * the whole list, unless the kernel moves less (then on from there). */
static int direct_cma(struct uln_ctx *ctx, struct shm_peer *pp, bool write,
                      const struct iovec *local, int nlocal, uint64_t raddr, uint64_t len)
{
    struct uln_shm *s = shm_of(ctx);
    struct iovec rest[ULN_IOV_MAX];
    const struct iovec *l = local;
    int nl = nlocal;
    uint64_t done = 0;
    while (done < len) {
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = write ? process_vm_writev(pp->pid, l, (unsigned long)nl, &r, 1, 0)
                          : process_vm_readv(pp->pid, l, (unsigned long)nl, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == ESRCH) return -ECONNRESET;
            if (errno == EPERM || errno == ENOSYS || errno == EACCES) {
                int e = errno;
                /* Exchange: said exactly once, whichever thread finds out first. */
                if (!atomic_exchange(&s->cma_warned, true))
                    fprintf(stderr,
                            "ulnet: the kernel refuses process_vm_%sv (%s): PUT/GET to memory not "
                            "from uln_mem_alloc now goes through the rings (two copies)\n",
                            write ? "write" : "read", strerror(e));
                s->cma_ok = false;
                pp->cma_refused = true;
                return ULN_NO_DIRECT;
            }
            return -errno; /* EFAULT: the owner registered memory it no longer has */
        }
        if (n == 0) return -EFAULT;
        done += (uint64_t)n;
        if (done < len) { /* a short transfer: the segments from where it stopped */
            nl = uln_iov_slice(local, nlocal, done, len - done, rest, ULN_IOV_MAX);
            l = rest;
        }
    }
    return 0;
}

/* The endpoint's window (internal.h) onto region e, at base (a mapping of
 * the translation cache, or our own memory): filled under our hazard, with
 * e's key checked live, so the copy is the entry. */
static void win_fill(struct uln_rkey_win *w, uint64_t key, const struct uln_key_entry *e,
                     _Atomic uint32_t *hz, uint8_t *base, bool mapped, struct shm_peer *pp,
                     uint32_t idx, bool light)
{
    w->key = key;
    w->live = &e->key;
    w->hz = hz;
    w->base = base;
    w->dead = &pp->dead;
    w->idx = idx;
    w->light = light;
    w->mapped = mapped;
    w->entry.addr = e->addr;
    w->entry.len = e->len;
    w->entry.access = e->access;
}

static int shm_direct_access(struct uln_ep *ep, int peer, bool write, const struct iovec *local,
                             int nlocal, uint64_t len, uint64_t span, uint64_t rkey, uint64_t roff)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_shm *s = shm_of(ctx);
    struct shm_peer *pp = &s->peers[peer];
    struct uln_inbox_hdr *h = pp->hdr;
    uint64_t idx = rkey >> ULN_KEY_INDEX_SHIFT;
    int rc;

    /* ULN_SHM_DIRECT=0: PUT/GET go through the rings, placed by the target. */
    if (ULN_UNLIKELY(!s->direct)) return ULN_NO_DIRECT;
    /* A peer known dead gets no more writes: its memory is still mapped (no
     * fault), but "visible at the target" would be a lie. */
    if (ULN_UNLIKELY(atomic_load_explicit(&pp->dead, memory_order_relaxed))) return -ECONNRESET;
    /* Direct accesses to a dead peer's mapped memory would go on "succeeding"
     * forever and never stall, so nothing else would look: ask the pidfd every
     * 1024th time (one poll, well under a nanosecond per operation). */
    if (ULN_UNLIKELY((++ep->peers[peer].direct_ops & 1023) == 0) && uln_shm_peer_dead(ctx, peer))
        return -ECONNRESET;

    if (idx >= h->max_regions) {
        rc = -ENOKEY;
        uln_count_refusal_at(h, rc); /* the owner's memory was refused: its count */
        return rc;
    }
    const struct uln_key_entry *e = (const struct uln_key_entry *)(pp->inbox + h->keys_off) + idx;
    struct uln_ep_peer *epp = &ep->peers[peer];
    _Atomic uint32_t *hz = uln_inbox_hazard_at(pp->inbox, h, epp->me_there, epp->dst_ep);
    bool light = uln_hazard_light(hz_light(ctx, h), e);

    /* Announce, then check (the hazard protocol with uln_mr_dereg): either
     * the owner sees us inside, or we see the key gone. While we are inside,
     * the entry cannot change. */
    uint64_t live = uln_hazard_enter(hz, (uint32_t)idx, light, &e->key);
    rc = uln_key_check(e, live, rkey, &roff, span,
                       write ? ULN_ACCESS_REMOTE_WRITE : ULN_ACCESS_REMOTE_READ);
    if (rc) {
        uln_count_refusal_at(h, rc);
        goto out;
    }
    if (len == 0) goto out; /* checked, nothing to move (there may be no segment) */
    /* Where the region is in our address space: ourselves, or a peer's memfd
     * mapped through the translation cache. NULL: not mappable here. */
    uint8_t *base = NULL;
    if (uln_peer_is_self(ctx, peer))
        base = (uint8_t *)(uintptr_t)e->addr;
    else if (e->memfd >= 0)
        base = tcache_lookup(&ep->peers[peer], pp, e, rkey, &ep->stats);
    if (ULN_LIKELY(base != NULL)) {
        uint8_t *at = base + roff;
        /* A contiguous PUT or GET, the common case, is one copy; a list is
         * gathered or scattered segment by segment (iov.h). */
        bool stream = epp->streaming || span >= ULN_COPY_STREAM_MIN; /* copy.h */
        if (ULN_LIKELY(nlocal == 1) && write) {
            /* Fenced before the hazard is left: once we are out, the owner
             * may deregister the region and reuse its memory. */
            if (uln_copy_big(at, local->iov_base, len, stream)) {
                epp->streaming = true;
                uln_copy_fence();
            }
        } else if (ULN_LIKELY(nlocal == 1)) {
            epp->streaming |= uln_copy_big(local->iov_base, at, len, stream); /* fenced: below */
        } else if (write)
            uln_iov_gather(at, local, nlocal);
        else
            uln_iov_scatter(local, nlocal, at);
        /* The next access with this key may skip all of the above but the
         * hazard and the key load (ep.c). */
        if (epp->win.key != rkey)
            win_fill(&epp->win, rkey, e, hz, base, !uln_peer_is_self(ctx, peer), pp, (uint32_t)idx,
                     light);
        goto out;
    }
    /* Plain memory, or a memfd we could not map: process_vm_* */
    if (!s->cma_ok || pp->cma_refused) {
        rc = ULN_NO_DIRECT;
        goto out;
    }
    rc = direct_cma(ctx, pp, write, local, nlocal, e->addr + roff, len);
out:
    uln_hazard_leave(hz);
    return rc;
}

/* A direct PUT or GET (the transport's direct op; engine.c moves a large one
 * in chunks, span = what is left of it, and nothing else of this endpoint
 * between them). An operation that streams, streams to its end. A GET's
 * streaming stores land in our own buffer, which nothing reads before the
 * operation completes: one fence when it ends here (its last chunk, or the
 * refusal or the switch to the rings that ends it) rather than one per
 * chunk, which waits for the chunk to reach memory. */
static int uln_shm_direct(struct uln_ep *ep, int peer, bool write, const struct iovec *local,
                          int nlocal, uint64_t len, uint64_t span, uint64_t rkey, uint64_t roff)
{
    int rc = shm_direct_access(ep, peer, write, local, nlocal, len, span, rkey, roff);
    struct uln_ep_peer *epp = &ep->peers[peer];
    if (ULN_UNLIKELY(epp->streaming) && (rc != 0 || len == span)) {
        uln_copy_fence(); /* a PUT's are fenced already: this one costs nothing */
        epp->streaming = false;
    }
    return rc;
}

/* An atomic on the peer's word, with a CPU atomic on our mapping of it (the
 * same physical word the owner and every other peer use). Only memory from
 * uln_mem_alloc (and our own) is mapped: other memory is reached with
 * process_vm_* only, which cannot be atomic, so the owner applies those
 * (ULN_NO_DIRECT: the ring path). Checked and counted as uln_shm_direct. */
static int uln_shm_atomic(struct uln_ep *ep, int peer, const struct uln_atomic_req *r,
                          uint64_t *old)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_shm *s = shm_of(ctx);
    struct shm_peer *pp = &s->peers[peer];
    struct uln_inbox_hdr *h = pp->hdr;
    uint64_t idx = r->key >> ULN_KEY_INDEX_SHIFT;
    if (ULN_UNLIKELY(!s->direct)) return ULN_NO_DIRECT;
    if (ULN_UNLIKELY(atomic_load_explicit(&pp->dead, memory_order_relaxed))) return -ECONNRESET;
    if (ULN_UNLIKELY((++ep->peers[peer].direct_ops & 1023) == 0) && uln_shm_peer_dead(ctx, peer))
        return -ECONNRESET;
    if (idx >= h->max_regions) {
        uln_count_refusal_at(h, -ENOKEY);
        return -ENOKEY;
    }
    const struct uln_key_entry *e = (const struct uln_key_entry *)(pp->inbox + h->keys_off) + idx;
    struct uln_ep_peer *epp = &ep->peers[peer];
    _Atomic uint32_t *hz = uln_inbox_hazard_at(pp->inbox, h, epp->me_there, epp->dst_ep);
    bool light = uln_hazard_light(hz_light(ctx, h), e);
    /* The hazard protocol of uln_shm_direct (with uln_mr_dereg). */
    uint64_t live = uln_hazard_enter(hz, (uint32_t)idx, light, &e->key);
    uint64_t off = r->offset; /* an address for a ULN_MR_VADDR region: made an offset */
    int rc = uln_key_check(e, live, r->key, &off, r->width, ULN_ACCESS_REMOTE_ATOMIC);
    /* Natural alignment in the owner's address space; a mapping keeps the
     * offset within the page, so the word is aligned alike here. */
    if (rc == 0 && ((e->addr + off) & (r->width - 1u))) rc = -EDOM;
    if (rc) {
        uln_count_refusal_at(h, rc);
        goto out;
    }
    uint8_t *base = NULL;
    if (uln_peer_is_self(ctx, peer))
        base = (uint8_t *)(uintptr_t)e->addr;
    else if (e->memfd >= 0)
        base = tcache_lookup(&ep->peers[peer], pp, e, r->key, &ep->stats);
    if (!base) {
        rc = ULN_NO_DIRECT;
        goto out;
    }
    *old = uln_atomic_apply(base + off, r);
    if (epp->win.key != r->key) /* the next atomic or PUT with this key: ep.c */
        win_fill(&epp->win, r->key, e, hz, base, !uln_peer_is_self(ctx, peer), pp, (uint32_t)idx,
                 light);
out:
    uln_hazard_leave(hz);
    return rc;
}

/* ---- the transport's ops ------------------------------------------------------ */

/* First use of peer from ep: map its inbox, and point the endpoint's
 * producer side at the rings it keeps for us and at its active maps. */
static int uln_shm_connect(struct uln_ep *ep, int peer)
{
    struct uln_ctx *ctx = ep->ctx;
    int rc = uln_shm_attach(ctx, peer);
    if (rc) return rc;
    struct shm_peer *sp = &shm_of(ctx)->peers[peer];
    struct uln_ep_peer *pp = &ep->peers[peer];
    if ((uint32_t)pp->dst_ep >= sp->hdr->max_eps) return -EADDRNOTAVAIL;
    if (ctx->no_job && pp->me_there < 0) {
        /* Our slot there: claimed for this endpoint of this life of ours, or
         * found if the peer inserted us first (inbox.h). */
        uint8_t me[ULN_ADDR_MAX];
        size_t me_len = sizeof me;
        int slot = uln_addr(ctx, me, &me_len);
        if (slot == 0)
            slot = uln_inbox_claim(sp->inbox, sp->hdr, ctx->job_key, ep->index, (int)getpid(), me,
                                   me_len);
        if (slot < 0) return slot;
        /* Seq_cst RMW before our first hazard store there, as for a job's
         * attach: its uln_mr_dereg then sees we may be inside a region. */
        if (sp->inbox != ctx->inbox->base)
            uln_inbox_mark(uln_inbox_attached_at(sp->inbox, sp->hdr), slot);
        pp->me_there = slot;
    }
    const struct uln_ring_pos *pos = ctx->ep_slots[ep->index].pos;
    for (int ch = 0; ch < 2; ch++) {
        struct uln_ring_prod *o = &pp->out[ch];
        uln_ring_prod_init(o, uln_inbox_ring_at(sp->inbox, sp->hdr, pp->me_there, pp->dst_ep, ch),
                           uln_inbox_ring_bytes(ch, &ctx->p));
        /* An earlier life of our endpoint wrote here: go on where it
         * stopped (the consumer may not have taken all of it). */
        if (pos && pos[peer].out[ch] > o->tail) o->tail = pos[peer].out[ch];
        pp->act_map[ch] = uln_inbox_active_at(sp->inbox, sp->hdr, ch, pp->dst_ep);
        pp->out_life[ch] =
            0; /* a mark goes first unless the peer's endpoint is in its first life */
    }
    pp->act_gen = &sp->hdr->act_gen;
    pp->life_at = &sp->hdr->ep_life[pp->dst_ep];
    /* Acquire: as in engine.c's out_reserve. Nothing of ours waits on it yet. */
    pp->dst_life = atomic_load_explicit(pp->life_at, memory_order_acquire);
    return 0;
}

static void uln_shm_kick(struct uln_ep *ep, int peer)
{
    uln_shm_wake(ep->ctx, peer);
}

static bool uln_shm_dead(struct uln_ctx *ctx, struct uln_ep *ep, int peer)
{
    (void)ep; /* a process's death: the same for every endpoint */
    return uln_shm_peer_dead(ctx, peer);
}

static int uln_shm_choose(struct uln_ctx *ctx)
{
    (void)ctx; /* every rank's inbox is on the board */
    return 0;
}

/* Every peer whose board slot we can read: the fallback when no transport
 * claims a peer better (one host, or ULN_TRANSPORT=shm). With no job, a peer
 * on this host only (its address says where it runs). */
/* Ourselves, and every peer whose inbox is on this host (its part of the
 * board slot says so): a store into mapped memory. */
static int uln_shm_reaches(const struct uln_ctx *ctx, int peer)
{
    if (uln_peer_is_self(ctx, peer)) return ULN_TP_COST_MEMORY;
    int32_t pid;
    const struct shm_addr *a = uln_tp_part(uln_boot_peer(&ctx->boot, peer, &pid), ULN_TPID_SHM);
    return a && a->host == uln_host_id() && a->inbox_fd >= 0 ? ULN_TP_COST_MEMORY : 0;
}

/* uln_addr's part: the inbox's descriptor number (the host is in the
 * address's header). */
static size_t uln_shm_addr_pack(const struct uln_ctx *ctx, uint8_t *out, size_t room)
{
    int32_t fd = ctx->inbox->fd;
    if (room < 4) return 0;
    memcpy(out, &fd, 4);
    return 4;
}

static int uln_shm_addr_unpack(const uint8_t *in, size_t len, uint64_t host, void *slot,
                               size_t slot_len)
{
    struct shm_addr a = {.inbox_bytes = 0, .host = host};
    if (len != 4 || slot_len < sizeof a) return -EADDRNOTAVAIL;
    memcpy(&a.inbox_fd, in, 4);
    if (a.inbox_fd < 0) return -EADDRNOTAVAIL;
    memcpy(slot, &a, sizeof a);
    return 0;
}

/* The short form's part: the descriptor's low 16 bits (a short address
 * stands for none wider). */
static int uln_shm_short_pack(const uint8_t *part, size_t len, uint8_t *out)
{
    if (len != 4 || part[2] || part[3]) return -ENOSPC;
    memcpy(out, part, 2);
    return 2;
}

static size_t uln_shm_short_unpack(const uint8_t *in, bool sealed, uint8_t *out, size_t room)
{
    (void)sealed; /* shared memory is never sealed: the same part either way */
    if (room < 4) return 0;
    memcpy(out, in, 2);
    out[2] = out[3] = 0;
    return 4;
}

static int uln_shm_addr_str(const uint8_t *in, size_t len, char *out, size_t room)
{
    int32_t fd;
    memcpy(&fd, in, 4);
    return snprintf(out, room, "inbox fd %d", (int)fd); /* of the address's pid */
}

static void uln_shm_query(const struct uln_ctx *ctx, struct uln_info *info)
{
    info->shm_direct = shm_params(ctx)->direct;
    info->shm_cma = shm_params(ctx)->cma && uln_shm_cma_ok(ctx);
}

/* uln_query_key's "shm.*". */
static int uln_shm_info(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen, char *val,
                        size_t vlen)
{
    const struct uln_shm *s = shm_of(ctx);
    int peers = 0;
    for (int p = 0; ctx->peer_tp && p < ctx->size; p++)
        peers += p != ctx->rank && ctx->peer_tp[p] == &uln_tp_shm;
    switch (i) {
    case 0: /* ULN_SHM_DIRECT */
        snprintf(key, klen, "direct");
        return snprintf(val, vlen, "%d", s && s->direct) < 0 ? -EINVAL : 0;
    case 1: /* ULN_SHM_CMA, and whether the kernel lets us */
        snprintf(key, klen, "cma");
        return snprintf(val, vlen, "%d", s && uln_shm_cma_ok(ctx)) < 0 ? -EINVAL : 0;
    case 2:
        snprintf(key, klen, "peers");
        return snprintf(val, vlen, "%d", peers) < 0 ? -EINVAL : 0;
    default:
        return -ENOENT;
    }
}

/* ULN_SHM_DIRECT=0: PUT/GET take the rings, placed by the target's CPU. */
static unsigned uln_shm_caps_in_force(const struct uln_ctx *ctx)
{
    return shm_of(ctx)->direct ? uln_tp_shm.caps : uln_tp_shm.caps & ~ULN_TP_CAP_DIRECT_RMA;
}

static uint32_t uln_shm_frag_max(struct uln_ep *ep, int peer)
{
    (void)peer;
    return ep->ctx->p.frag_max;
}

const struct uln_transport_ops uln_tp_shm = {
    .name = "shm",
    .caps = ULN_TP_CAP_DIRECT_RMA | ULN_TP_CAP_RINGS,
    .slot_bytes = sizeof(struct shm_addr),
    .id = ULN_TPID_SHM,
    .settings = &shm_settings,
    .open = uln_shm_open,
    .choose = uln_shm_choose,
    /* no .learn: shm finds everything it needs on the board slot at connect */
    .addr_pack = uln_shm_addr_pack,
    .addr_unpack = uln_shm_addr_unpack,
    .addr_str = uln_shm_addr_str,
    .short_bytes = 2,
    .short_pack = uln_shm_short_pack,
    .short_unpack = uln_shm_short_unpack,
    .close = uln_shm_close,
    .reaches = uln_shm_reaches,
    .query = uln_shm_query,
    .caps_in_force = uln_shm_caps_in_force,
    .info = uln_shm_info,
    .peer_free = uln_shm_peer_free,
    .connect = uln_shm_connect,
    .direct = uln_shm_direct,
    .atomic = uln_shm_atomic,
    .kick = uln_shm_kick,
    .peer_dead = uln_shm_dead,
    .frag_max = uln_shm_frag_max,
};
