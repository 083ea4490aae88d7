/*
 * shm.c - the shared-memory transport: processes on one host.
 *
 * Each process owns one "inbox": an anonymous shared-memory object (memfd)
 * holding everything peers need to reach it:
 *
 *   +0              header (layout, job key, sleepers count)
 *   keys_off        key table, one 64-byte entry per region  (peers: read-only)
 *   hazards_off     one line per (peer, endpoint): "I am inside region i"
 *   active_off      per (channel, endpoint): bitmap of peers that have used
 *                   that ring, so a poll visits only those (set once per peer);
 *                   then one bitmap of the peers that have mapped this inbox:
 *                   only they can be inside a region, so uln_mr_dereg reads
 *                   only their hazard slots (reading them all would cost every
 *                   process size x max_eps lines, and in shared memory even a
 *                   read of an untouched page allocates it)
 *   rings_off       per (source rank, endpoint): channel-0 ring, channel-1 ring
 *
 * Peers find it through the bootstrap board (pid + descriptor number) and map
 * it with /proc/<pid>/fd/<n>. It has no name, so nothing is left behind however
 * a process dies, and a dead peer's memory stays valid while we map it (no
 * SIGBUS: nobody ever shrinks it).
 *
 * Sleeping: a process about to sleep counts itself in `sleepers` and waits on
 * its doorbell, a datagram socket in the abstract namespace (no file either).
 * A producer that publishes a message checks the count and, only if nonzero,
 * rings the doorbell. The doorbell is a socket, not a futex, so that a later
 * transport can sleep on its own sockets and the doorbell at once.
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

#include "core/internal.h"

#define SHM_MAGIC   0x756c6e657473686dull /* "ulnetshm" */
#define SHM_VERSION 2u                    /* 2: the attached bitmap after the active ones */
#define TCACHE_WAYS 64u                   /* translation cache entries per peer (direct-mapped) */

struct shm_hdr {
    uint64_t magic, job_key;
    uint32_t version, rank, size, max_eps;
    uint32_t ring_bytes, req_ring_bytes, max_regions, pad0_;
    uint64_t keys_off, hazards_off, active_off, rings_off, pair_stride, total;
    int32_t pid, pad1_;
    _Alignas(64) _Atomic uint32_t sleepers; /* own line: read by every producer */
    uint8_t pad2_[60];
};
_Static_assert(sizeof(struct shm_hdr) <= 4096, "header fits its page");

/* What a rank publishes on the board. */
struct shm_addr {
    int32_t inbox_fd;
    uint32_t pad_;
    uint64_t inbox_bytes;
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
    struct shm_hdr *hdr;
    pid_t pid;
    int pidfd;
    /* Set once, by whichever thread's poll of the pidfd sees the exit first;
     * read without ordering: it only turns later operations into errors. */
    _Atomic bool dead;
    _Atomic bool cma_refused; /* any thread may find out */
    struct sockaddr_un bell;
    socklen_t bell_len;
};

struct uln_shm {
    int fd;
    uint8_t *inbox;
    size_t len;
    struct shm_hdr *hdr;
    int bell; /* doorbell socket */
    _Atomic bool cma_ok;
    _Atomic bool cma_warned;
    struct shm_peer *peers;
    pthread_mutex_t attach_lock;
};

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) & ~(a - 1);
}

static size_t active_words(int size)
{
    return ((size_t)size + 63) / 64;
}

static _Atomic uint64_t *active_map(uint8_t *inbox, const struct shm_hdr *h, int ch, int ep)
{
    return (_Atomic uint64_t *)(inbox + h->active_off) +
           ((size_t)ch * h->max_eps + (size_t)ep) * active_words((int)h->size);
}

_Atomic uint64_t *uln_shm_active(struct uln_ctx *ctx, int ch, int ep)
{
    return active_map(ctx->shm->inbox, ctx->shm->hdr, ch, ep);
}

/* The attached bitmap sits where a third channel's first map would. */
static _Atomic uint64_t *attached_map(uint8_t *inbox, const struct shm_hdr *h)
{
    return active_map(inbox, h, 2, 0);
}

_Atomic uint64_t *uln_shm_attached(struct uln_ctx *ctx)
{
    return attached_map(ctx->shm->inbox, ctx->shm->hdr);
}

void uln_shm_announce(struct uln_ctx *ctx, int peer, int ch, int ep)
{
    struct shm_peer *pp = &ctx->shm->peers[peer];
    /* Once per (peer, channel, endpoint), before our first message on that ring:
     * from then on the peer's polls visit it. A seq_cst RMW, so the bit is
     * visible before that message and before the doorbell check. */
    atomic_fetch_or(&active_map(pp->inbox, pp->hdr, ch, ep)[ctx->rank / 64],
                    1ull << (ctx->rank % 64));
}

uint32_t uln_shm_ring_bytes(int ch, const struct uln_params *p)
{
    return ch == 0 ? p->ring_bytes : ULN_REQ_RING_BYTES;
}

static void bell_name(struct sockaddr_un *a, socklen_t *len, uint64_t job, int rank)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* Leading NUL: the abstract namespace, which has no file to leave behind. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ulnet.%016llx.%d",
                     (unsigned long long)job, rank);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
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

int uln_shm_open(struct uln_ctx *ctx, void *slot_addr, size_t slot_len)
{
    const struct uln_params *p = &ctx->p;
    struct uln_shm *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->fd = -1;
    s->bell = -1;
    pthread_mutex_init(&s->attach_lock, NULL);
    ctx->shm = s;
    nofile_raise(ctx->rank, ctx->size);

    size_t keys_off = 4096;
    size_t hazards_off = align_up(keys_off + (size_t)p->max_regions * 64, 4096);
    size_t active_off = align_up(hazards_off + (size_t)ctx->size * p->max_eps * 64, 4096);
    size_t active_len = (2 * (size_t)p->max_eps + 1) * active_words(ctx->size) * 8;
    size_t rings_off = align_up(active_off + active_len, 4096);
    size_t stride =
        align_up(uln_ring_footprint(p->ring_bytes) + uln_ring_footprint(ULN_REQ_RING_BYTES), 4096);
    size_t total = rings_off + stride * (size_t)ctx->size * p->max_eps;

    s->fd = memfd_create("ulnet-inbox", MFD_CLOEXEC);
    if (s->fd < 0) return -errno;
    /* Sparse: pages cost memory only once a peer actually uses a ring. */
    if (ftruncate(s->fd, (off_t)total) != 0) return -errno;
    s->inbox = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->inbox == MAP_FAILED) {
        s->inbox = NULL;
        return -errno;
    }
    s->len = total;
    s->hdr = (struct shm_hdr *)s->inbox;
    *s->hdr = (struct shm_hdr){.magic = SHM_MAGIC,
                               .job_key = ctx->job_key,
                               .version = SHM_VERSION,
                               .rank = (uint32_t)ctx->rank,
                               .size = (uint32_t)ctx->size,
                               .max_eps = p->max_eps,
                               .ring_bytes = p->ring_bytes,
                               .req_ring_bytes = ULN_REQ_RING_BYTES,
                               .max_regions = p->max_regions,
                               .keys_off = keys_off,
                               .hazards_off = hazards_off,
                               .active_off = active_off,
                               .rings_off = rings_off,
                               .pair_stride = stride,
                               .total = total,
                               .pid = getpid()};
    ctx->keys = (struct uln_key_entry *)(s->inbox + keys_off);

    s->bell = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->bell < 0) return -errno;
    struct sockaddr_un a;
    socklen_t alen;
    bell_name(&a, &alen, ctx->job_key, ctx->rank);
    if (bind(s->bell, (struct sockaddr *)&a, alen) != 0) {
        int e = errno;
        fprintf(stderr, "ulnet: rank %d: doorbell: %s\n", ctx->rank, strerror(e));
        return -e;
    }

    s->peers = calloc((size_t)ctx->size, sizeof *s->peers);
    if (!s->peers) return -ENOMEM;
    for (int i = 0; i < ctx->size; i++)
        s->peers[i].pidfd = -1;

    /* Can we reach other processes' memory with process_vm_*? Only a real peer
     * can tell (see direct_cma); start hopeful unless told not to. */
    s->cma_ok = p->shm_cma != 0;

    struct shm_addr addr = {.inbox_fd = s->fd, .inbox_bytes = total};
    if (slot_len < sizeof addr) return -EINVAL;
    memcpy(slot_addr, &addr, sizeof addr);
    return 0;
}

bool uln_shm_cma_ok(const struct uln_ctx *ctx)
{
    return ctx->shm->cma_ok;
}

static void tcache_drop(struct uln_tcache *t)
{
    if (t->map) munmap(t->map, t->map_len);
    memset(t, 0, sizeof *t);
}

void uln_shm_close(struct uln_ctx *ctx)
{
    struct uln_shm *s = ctx->shm;
    if (!s) return;
    if (s->peers) {
        for (int i = 0; i < ctx->size; i++) {
            struct shm_peer *pp = &s->peers[i];
            if (pp->inbox && pp->inbox != s->inbox) munmap(pp->inbox, pp->inbox_len);
            if (pp->pidfd >= 0) close(pp->pidfd);
        }
        free(s->peers);
    }
    if (s->inbox) munmap(s->inbox, s->len);
    if (s->fd >= 0) close(s->fd);
    if (s->bell >= 0) close(s->bell);
    pthread_mutex_destroy(&s->attach_lock);
    free(s);
    ctx->shm = NULL;
    ctx->keys = NULL;
}

static int attach_locked(struct uln_ctx *ctx, int peer)
{
    struct uln_shm *s = ctx->shm;
    struct shm_peer *pp = &s->peers[peer];
    int32_t pid;
    const struct shm_addr *a = uln_boot_peer(ctx, peer, &pid);
    if (!a) return -ECONNRESET;

    if (peer == ctx->rank) {
        pp->inbox = s->inbox;
        pp->inbox_len = s->len;
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
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != a->inbox_bytes) {
            close(fd);
            return -EPROTO;
        }
        void *m = mmap(NULL, a->inbox_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd); /* the mapping keeps the object alive */
        if (m == MAP_FAILED) return -errno;
        pp->inbox = m;
        pp->inbox_len = a->inbox_bytes;
    }
    struct shm_hdr *h = (struct shm_hdr *)pp->inbox;
    /* Everything we will compute addresses from must stay inside the mapping. */
    uint64_t want_stride =
        uln_ring_footprint(h->ring_bytes) + uln_ring_footprint(ULN_REQ_RING_BYTES);
    bool layout_ok = h->keys_off >= sizeof *h && h->max_regions <= (1u << 24) && h->max_eps <= 64 &&
                     h->keys_off + (uint64_t)h->max_regions * 64 <= h->hazards_off &&
                     h->hazards_off + (uint64_t)h->size * h->max_eps * 64 <= h->active_off &&
                     h->active_off + 8ull * (2ull * h->max_eps + 1) * active_words((int)h->size) <=
                         h->rings_off &&
                     h->pair_stride >= want_stride &&
                     h->rings_off + h->pair_stride * h->size * h->max_eps <= h->total &&
                     h->req_ring_bytes == ULN_REQ_RING_BYTES && h->keys_off % 4096 == 0 &&
                     h->hazards_off % 4096 == 0;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->rank != (uint32_t)peer ||
        h->size != (uint32_t)ctx->size || h->total != pp->inbox_len || !layout_ok ||
        h->max_eps < ctx->p.max_eps || h->ring_bytes != ctx->p.ring_bytes) {
        fprintf(stderr, "ulnet: rank %d's inbox does not match ours (different settings?)\n", peer);
        if (pp->inbox != s->inbox) munmap(pp->inbox, pp->inbox_len);
        pp->inbox = NULL;
        return -EPROTO;
    }
    if (h->job_key != ctx->job_key) {
        ULN_COUNT(&ctx->stats, refused_job, 1);
        if (pp->inbox != s->inbox) munmap(pp->inbox, pp->inbox_len);
        pp->inbox = NULL;
        return -EPERM;
    }
    if (pp->inbox != s->inbox) {
        /* The key table is the owner's to write: peers get a read-only view, so
         * a stray store in a peer cannot forge a key. */
        mprotect(pp->inbox + h->keys_off, h->hazards_off - h->keys_off, PROT_READ);
        /* Tell the owner we may enter its regions from now on. A seq_cst RMW
         * before any store to our hazard slot there: an owner that clears a
         * key and then reads this map (uln_mr_dereg) sees our bit if we can
         * have seen the key live. */
        atomic_fetch_or(&attached_map(pp->inbox, h)[ctx->rank / 64], 1ull << (ctx->rank % 64));
    }
    pp->pid = pid;
    pp->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    bell_name(&pp->bell, &pp->bell_len, ctx->job_key, peer);
    /* Release: other threads that see hdr set see the whole peer entry. */
    __atomic_store_n(&pp->hdr, h, __ATOMIC_RELEASE);
    return 0;
}

int uln_shm_attach(struct uln_ctx *ctx, int peer)
{
    struct uln_shm *s = ctx->shm;
    struct shm_peer *pp = &s->peers[peer];
    /* Acquire: pairs with the release at the end of attach_locked. */
    if (ULN_LIKELY(__atomic_load_n(&pp->hdr, __ATOMIC_ACQUIRE) != NULL))
        return atomic_load_explicit(&pp->dead, memory_order_relaxed) ? -ECONNRESET : 0;
    pthread_mutex_lock(&s->attach_lock);
    int rc = pp->hdr ? 0 : attach_locked(ctx, peer);
    pthread_mutex_unlock(&s->attach_lock);
    return rc;
}

static uint8_t *pair_base(uint8_t *inbox, const struct shm_hdr *h, int src, int ep)
{
    return inbox + h->rings_off + h->pair_stride * ((size_t)src * h->max_eps + (size_t)ep);
}

void *uln_shm_ring_in(struct uln_ctx *ctx, int src, int ep, int ch)
{
    uint8_t *b = pair_base(ctx->shm->inbox, ctx->shm->hdr, src, ep);
    return ch == 0 ? b : b + uln_ring_footprint(ctx->p.ring_bytes);
}

void *uln_shm_ring_out(struct uln_ctx *ctx, int dst, int ep, int ch)
{
    struct shm_peer *pp = &ctx->shm->peers[dst];
    uint8_t *b = pair_base(pp->inbox, pp->hdr, ctx->rank, ep);
    return ch == 0 ? b : b + uln_ring_footprint(pp->hdr->ring_bytes);
}

_Atomic uint32_t *uln_shm_hazard(struct uln_ctx *ctx, int src, int ep)
{
    struct uln_shm *s = ctx->shm;
    return (_Atomic uint32_t *)(s->inbox + s->hdr->hazards_off +
                                64 * ((size_t)src * s->hdr->max_eps + (size_t)ep));
}

bool uln_shm_peer_dead(struct uln_ctx *ctx, int peer)
{
    struct shm_peer *pp = &ctx->shm->peers[peer];
    if (atomic_load_explicit(&pp->dead, memory_order_relaxed)) return true;
    if (peer == ctx->rank || pp->pidfd < 0) return false;
    struct pollfd pf = {.fd = pp->pidfd, .events = POLLIN};
    if (poll(&pf, 1, 0) != 1) return false; /* a pidfd is readable once its process exits */
    /* Its memory stays mapped here (the mappings hold the objects), so a late
     * access cannot fault; from now on operations on it fail instead. */
    if (!atomic_exchange(&pp->dead, true)) atomic_fetch_add(&ctx->stats.peers_dead, 1);
    return true;
}

/* ---- sleeping and waking -------------------------------------------------- */

void uln_shm_wake(struct uln_ctx *ctx, int peer)
{
    struct shm_peer *pp = &ctx->shm->peers[peer];
    /* Full fence: our message stores must be ordered before we read the peer's
     * sleepers count, pairing with the fence in uln_shm_sleep_begin (Dekker):
     * either it sees our message on its last look, or we see it asleep. */
    atomic_thread_fence(memory_order_seq_cst);
    if (ULN_LIKELY(atomic_load_explicit(&pp->hdr->sleepers, memory_order_relaxed) == 0)) return;
    char b = 1;
    /* Non-blocking: a full socket means the peer has wake-ups pending anyway. */
    if (sendto(ctx->shm->bell, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&pp->bell, pp->bell_len) ==
        1)
        ULN_COUNT(&ctx->stats, wakeups_sent, 1);
}

/* Wake threads of this process sleeping in uln_cq_wait: the progress thread
 * has completed something they may be waiting for. */
void uln_shm_wake_self(struct uln_ctx *ctx)
{
    atomic_thread_fence(memory_order_seq_cst); /* as in uln_shm_wake */
    if (atomic_load_explicit(&ctx->shm->hdr->sleepers, memory_order_relaxed) == 0) return;
    struct sockaddr_un a;
    socklen_t alen;
    bell_name(&a, &alen, ctx->job_key, ctx->rank);
    char b = 1;
    sendto(ctx->shm->bell, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&a, alen);
}

void uln_shm_sleep_begin(struct uln_ctx *ctx)
{
    atomic_fetch_add_explicit(&ctx->shm->hdr->sleepers, 1, memory_order_relaxed);
    /* Full fence: announce before the caller's last look at the rings. */
    atomic_thread_fence(memory_order_seq_cst);
}

void uln_shm_sleep_end(struct uln_ctx *ctx)
{
    atomic_fetch_sub_explicit(&ctx->shm->hdr->sleepers, 1, memory_order_relaxed);
    char buf[64];
    while (recv(ctx->shm->bell, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

int uln_shm_sleep(struct uln_ctx *ctx, const int *fds, int n_fds, int timeout_ms)
{
    /* The doorbell first, then any sockets of packet transports: whichever
     * has something wakes us. */
    struct pollfd pf[1 + 64];
    if (n_fds > 64) n_fds = 64;
    pf[0] = (struct pollfd){.fd = ctx->shm->bell, .events = POLLIN};
    for (int i = 0; i < n_fds; i++)
        pf[1 + i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    ULN_COUNT(&ctx->stats, sleeps, 1);
    int n = poll(pf, (nfds_t)(1 + n_fds), timeout_ms);
    return n > 0 ? 0 : -ETIMEDOUT;
}

/* ---- direct PUT/GET --------------------------------------------------------- */

void uln_shm_tcache_free(struct uln_tcache *tc)
{
    if (!tc) return;
    for (unsigned w = 0; w < TCACHE_WAYS; w++)
        tcache_drop(&tc[w]);
    free(tc);
}

static uint8_t *tcache_lookup(struct uln_tcache **tcp, struct shm_peer *pp,
                              const struct uln_key_entry *e, uint64_t key, struct uln_stats *st)
{
    if (!*tcp) {
        *tcp = calloc(TCACHE_WAYS, sizeof **tcp);
        if (!*tcp) return NULL;
    }
    struct uln_tcache *t = &(*tcp)[(key >> ULN_KEY_INDEX_SHIFT) % TCACHE_WAYS];
    if (ULN_LIKELY(t->key == key)) {
        ULN_COUNT(st, cache_hits, 1);
        return t->base;
    }
    /* Miss: map the region's memfd (first touch costs open + mmap + faults). */
    ULN_COUNT(st, cache_misses, 1);
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

static int direct_cma(struct uln_ctx *ctx, struct shm_peer *pp, bool write, void *local,
                      uint64_t raddr, uint64_t len)
{
    struct uln_shm *s = ctx->shm;
    while (len) {
        struct iovec l = {.iov_base = local, .iov_len = len};
        struct iovec r = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = len};
        ssize_t n = write ? process_vm_writev(pp->pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pp->pid, &l, 1, &r, 1, 0);
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
        local = (uint8_t *)local + n;
        raddr += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int uln_shm_direct(struct uln_ep *ep, int peer, bool write, void *local, uint64_t len,
                   uint64_t rkey, uint64_t roff)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_shm *s = ctx->shm;
    struct shm_peer *pp = &s->peers[peer];
    struct shm_hdr *h = pp->hdr;
    uint64_t idx = rkey >> ULN_KEY_INDEX_SHIFT;
    int rc;

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
        uln_count_refusal(&ep->stats, rc);
        return rc;
    }
    const struct uln_key_entry *e = (const struct uln_key_entry *)(pp->inbox + h->keys_off) + idx;
    _Atomic uint32_t *hz =
        (_Atomic uint32_t *)(pp->inbox + h->hazards_off +
                             64 * ((size_t)ctx->rank * h->max_eps + (size_t)ep->index));

    /* Seq_cst store then seq_cst load (Dekker with uln_mr_dereg, which clears
     * the key and then reads the hazards): either the owner sees us inside, or
     * we see the key gone. While we are inside, the entry cannot change. */
    atomic_store_explicit(hz, (uint32_t)idx + 1, memory_order_seq_cst);
    uint64_t live = atomic_load_explicit(&e->key, memory_order_seq_cst);
    rc = uln_key_check(e, live, rkey, roff, len,
                       write ? ULN_ACCESS_REMOTE_WRITE : ULN_ACCESS_REMOTE_READ);
    if (rc) {
        uln_count_refusal(&ep->stats, rc);
        goto out;
    }
    if (len == 0) goto out; /* checked, nothing to move (local may be NULL) */
    /* Where the region is in our address space: ourselves, or a peer's memfd
     * mapped through the translation cache. NULL: not mappable here. */
    uint8_t *base = NULL;
    if (peer == ctx->rank)
        base = (uint8_t *)(uintptr_t)e->addr;
    else if (e->memfd >= 0)
        base = tcache_lookup(&ep->peers[peer].tcache, pp, e, rkey, &ep->stats);
    if (ULN_LIKELY(base != NULL)) {
        if (write)
            memcpy(base + roff, local, len);
        else
            memcpy(local, base + roff, len);
        goto out;
    }
    /* Plain memory, or a memfd we could not map: process_vm_* */
    if (!s->cma_ok || pp->cma_refused) {
        rc = ULN_NO_DIRECT;
        goto out;
    }
    rc = direct_cma(ctx, pp, write, local, e->addr + roff, len);
out:
    /* Release: our copy is complete before the owner may reuse the memory. */
    atomic_store_explicit(hz, 0, memory_order_release);
    return rc;
}
