/*
 * ulnet.h - the one public header of ulnet, a user-level network interface.
 *
 * ulnet gives a process what an RDMA NIC gives it, in software: endpoints with
 * bounded send queues, completion queues, registered memory protected by keys,
 * and three primitives:
 *
 *   NAP  eager message (up to ULN_NAP_MAX bytes, see uln_info) delivered into the
 *        receiver's ring; the receive completion points at the data in place.
 *   PUT  one-sided remote write to (peer, key, offset), optionally raising a
 *        completion with 64-bit immediate data at the target.
 *   GET  one-sided remote read from (peer, key, offset).
 *   ATOMIC  one-sided read-modify-write of one 32- or 64-bit word at (peer,
 *        key, offset): add, swap, compare-and-swap, and/or/xor, min/max, the
 *        old value fetched into a local buffer (uln_atomic).
 *
 * Conventions
 *   - Every function that can fail returns 0 (or a count) on success and a
 *     negative errno value on failure. -EAGAIN means "a queue is full: poll the
 *     completion queue and try again"; nothing was posted.
 *   - An operation's outcome is in its completion entry's status: 0 or -errno.
 *     A post with ULN_NOW returns 1 instead when it was done in the call.
 *   - Objects are not internally locked. A context may be shared by threads, but
 *     an endpoint and the completion queues bound to it are driven by one thread
 *     at a time (the thread that polls them). Endpoints that share no CQ can be
 *     driven by different threads concurrently.
 *
 * Status codes (negative errno), one per cause:
 *   -EAGAIN      send queue or completion queue full: poll, then post again
 *   -EINVAL      bad argument (peer out of range, NULL where a buffer is needed,
 *                a setting outside its range)
 *   -EMSGSIZE    NAP longer than nap_max, or ULN_INLINE payload over inline_max
 *   -ENOSPC      a per-process limit is reached: endpoints (max_eps), regions
 *                (max_regions)
 *   -EFAULT      uln_mr_reg: the range is not all mapped memory
 *   -ENOKEY      the region key is unknown at the target, or stale (deregistered)
 *   -ERANGE      offset + length reaches outside the region
 *   -EACCES      the region does not allow that remote access
 *   -EPERM       the packet or peer belongs to another job; or the call is made
 *                in a fork()ed child on its parent's context (see Fork)
 *   -EBADF       the endpoint, CQ or region handle was already closed
 *   -ECONNRESET  the peer died or left
 *   -EMFILE      a peer on this host could not be reached: no descriptor left
 *                (one per peer reached; see docs/limits.md)
 *   -ENOMEM      memory or address space ran out (e.g. mapping a peer's inbox)
 *   -ECANCELED   the endpoint was closed with the operation outstanding
 *   -ETIMEDOUT   a wait ran out of time
 *   -EBUSY       uln_cq_close with endpoints bound, uln_mem_free of registered memory
 *   -EADDRINUSE  a second uln_open in a process started by a launcher: a rank
 *                joins its job once (see uln_open)
 *   -EADDRNOTAVAIL  uln_peer_insert: the address is malformed, forged, or names
 *                an endpoint index it cannot have
 *   -EHOSTUNREACH uln_peer_insert: no transport of ours reaches that address
 *   -EOPNOTSUPP  a job-only call (uln_barrier) on a context with no job
 *   -EDOM        an atomic's word is not naturally aligned in the target's
 *                address space (uln_atomic)
 *   -EDQUOT      uln_ep_open through the host service: the process's queue
 *                memory would pass the service's quota (ulnetd --queue-mem)
 *
 * Limits (each tested at the limit; docs/limits.md has them all and why):
 *   ranks in a job 4096; regions per process max_regions (<= 2^24); endpoints
 *   per process max_eps (<= 64); send queue sq_depth (<= 2^20); CQ entries
 *   <= 2^24; NAP payload nap_max (<= 4194224, one ring message).
 *
 * Addressing
 *   A job has `size` processes, ranks 0..size-1. Each process opens endpoints in
 *   order; the i-th endpoint a process opens (its index, uln_ep_index) talks to
 *   the i-th endpoint of every peer. A remote buffer is never named by a raw
 *   address: it is (peer rank, region key, byte offset in the region), or the
 *   owner's address in it for a region registered with ULN_MR_VADDR.
 *   A context with no job (ULN_BOOT=none, or uln_config.boot) starts with no
 *   peers but itself (peer 0, as rank 0 of a job of one): it learns others
 *   from their addresses (uln_addr, handed over by any means) with
 *   uln_peer_insert, which names one endpoint of that process and returns a
 *   peer id usable with every operation, from any endpoint of ours. See
 *   "Peers by address" below.
 *
 * Ordering
 *   - NAPs from one endpoint to one peer arrive in the order they were posted.
 *   - Operations of one endpoint start in the order they were posted; a NAP or a
 *     remote-completion PUT posted after a PUT to the same peer is delivered only
 *     after that PUT's data is placed.
 *   - A PUT's local completion means its data is visible at the target.
 *   - GET is not ordered after earlier PUTs to the same peer; post uln_ep_flush
 *     and wait for it first when a GET must see them.
 *   - Atomics from one endpoint to one peer are applied in the order they were
 *     posted. Like GET, an atomic is not ordered against the endpoint's PUT,
 *     GET and NAP: post it with ULN_FENCE to apply it after they completed,
 *     or post the later operation with ULN_FENCE to start it after the atomic
 *     completed. An atomic's completion means it was applied at the target.
 *
 * Buffers and handles
 *   Local buffers (the source of a NAP or PUT, the destination of a GET) are
 *   plain memory: they need not be registered, and uln_mr_dereg of a region
 *   does not affect operations that use its memory locally. Like memcpy, ulnet
 *   cannot check that a local pointer is mapped: an unmapped one is undefined.
 *   Registration only grants peers access. A closed endpoint or CQ, and a
 *   deregistered region, keep a small record so that a late call on the handle
 *   returns -EBADF instead of touching freed memory (regions: for the last
 *   1024 deregistrations; older region handles are as invalid as freed ones).
 *
 * Fork
 *   A context belongs to the process that opened it. In a fork()ed child
 *   every call on it returns -EPERM, uln_close included, and changes nothing
 *   the parent uses (rings, sockets, keys are shared with the parent). The
 *   child may uln_open a job of its own. Memory from uln_mem_alloc is a shared
 *   mapping: the child's writes to it are seen by the parent and its peers.
 *   Other registered memory is copy-on-write as usual: the child's writes stay
 *   its own, and peers keep reading and writing the parent's memory.
 *
 * Progress
 *   Work advances inside uln_cq_poll / uln_cq_wait on a CQ bound to the endpoint,
 *   and at post time when the endpoint's send queue was empty (a small operation
 *   is then done before the post returns). Queued work - also ULN_SILENT work -
 *   moves only while the initiator polls. Over shared memory, PUT and GET to
 *   peer-accessible memory, and atomics on memory from uln_mem_alloc, complete
 *   without the target calling ulnet at all.
 *   A NAP to an endpoint index the peer has not opened yet waits in that
 *   endpoint's ring (and, once the ring is full, holds the sender back) until
 *   the peer opens it; call uln_barrier after opening endpoints to avoid this.
 */
#ifndef ULNET_H
#define ULNET_H

#include <errno.h> /* every status is a negative errno: -EAGAIN, -ETIMEDOUT, ... */
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; uln_version() gives the library's. The build
 * checks these against the project's version (CMakeLists.txt). */
#define ULNET_VERSION_MAJOR 0
#define ULNET_VERSION_MINOR 1
#define ULNET_VERSION_PATCH 0
/* One number to compare: ULNET_VERSION >= ULNET_VERSION_NUM(0, 1, 0). */
#define ULNET_VERSION_NUM(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define ULNET_VERSION                                                                              \
    ULNET_VERSION_NUM(ULNET_VERSION_MAJOR, ULNET_VERSION_MINOR, ULNET_VERSION_PATCH)

struct uln_ctx;
struct uln_mr;
struct uln_cq;
struct uln_ep;

/* ------------------------------------------------------------------------- */
/* Context                                                                    */
/* ------------------------------------------------------------------------- */

/*
 * Configuration. A zero field means "default, or the environment variable".
 * uln_open(NULL, ...) takes everything from the environment that ulnrun sets:
 *   ULN_RANK, ULN_SIZE, ULN_JOB_KEY (1-16 hex digits), ULN_BOOT_FD;
 * or ULN_ROOT's, or a PMIx server's (mpirun, srun --mpi=pmix: docs/running.md).
 * Tunables (environment variable in brackets, default after =, range after
 * that; uln_open fails with -EINVAL outside it; in the environment, sizes in
 * bytes take a K, M or G suffix and negative numbers are refused):
 *   ring_bytes   [ULN_RING_BYTES=131072]  NAP ring per (peer, endpoint) pair;
 *                                         a power of two, 4096..2^28
 *   nap_max      [ULN_NAP_MAX=8192]       largest NAP payload, 0..4194224 (a NAP
 *                                         is one ring message of at most 65535
 *                                         64-byte cells); the ring must hold two
 *   sq_depth     [ULN_SQ_DEPTH=256]       send queue entries per endpoint, 1..2^20
 *   chunk_bytes  [ULN_CHUNK_BYTES=131072] largest piece of a queued PUT/GET the
 *                                         engine moves before serving the next
 *                                         endpoint of its CQ, 4096..2^30; an
 *                                         endpoint alone on its CQs, with peers
 *                                         on this host only, moves up to 1 MiB
 *   post_copy_max [ULN_POST_COPY_MAX=65536] a PUT/GET up to this size, posted
 *                                         on an endpoint with nothing queued, is one
 *                                         copy inside the post call (the caller's own
 *                                         time); larger ones are queued, the call
 *                                         moving at most chunk_bytes of them; 0..2^30
 *   max_eps      [ULN_MAX_EPS=16]         endpoints per process, 1..64, counting
 *                                         every endpoint the context ever opens
 *   max_regions  [ULN_MAX_REGIONS=4096]   registered regions at once, 1..2^24
 *   shm_direct   [ULN_SHM_DIRECT=1]       0: PUT/GET through the rings, placed by
 *                                         the target (the path other transports take)
 *   shm_cma      [ULN_SHM_CMA=1]          0: never use process_vm_readv/writev
 *   spin_us      [ULN_SPIN_US=50]         microseconds uln_cq_wait spins before it
 *                                         sleeps, 0..10^6 (-1: environment/default)
 *   transport    [ULN_TRANSPORT=auto]     "auto", "shm", "udp" or "xdp" (NULL:
 *                                         environment/default)
 *   udp_window   [ULN_UDP_WINDOW=1024]    UDP packets in flight per (endpoint,
 *                                         peer), a power of two, 4..32768
 *   udp_dead_ms  [ULN_UDP_DEAD_MS=10000]  a UDP peer silent this long while
 *                                         awaited is dead, 10..3600000
 */
/* uln_config.boot: how a context finds its peers. */
#define ULN_BOOT_AUTO 0 /* ULN_BOOT, else a job: the launcher's, or a job of one */
#define ULN_BOOT_JOB  1 /* a job (ulnrun, ULN_ROOT, PMIx), whatever ULN_BOOT says */
#define ULN_BOOT_NONE 2 /* no job: peers by address only (uln_peer_insert) */

struct uln_config {
    int rank;         /* -1: from the environment */
    int size;         /* 0: from the environment */
    uint64_t job_key; /* 0: from the environment */
    int boot_fd;      /* -1: from the environment */
    uint32_t ring_bytes;
    uint32_t nap_max;
    uint32_t sq_depth;
    uint32_t chunk_bytes;
    uint32_t post_copy_max;
    uint32_t max_eps;
    uint32_t max_regions;
    int shm_direct;        /* -1: environment/default */
    int shm_cma;           /* -1: environment/default */
    int boot;              /* ULN_BOOT_*: 0 = ULN_BOOT=none|job|auto, default a job */
    uint32_t max_peers;    /* no job: peer ids 1..max_peers-1 (ULN_MAX_PEERS=1024, 2..4096) */
    int spin_us;           /* -1: environment/default */
    const char *transport; /* NULL: environment/default; read by uln_open only */
    uint32_t udp_window;
    uint32_t udp_dead_ms;
};

/* Fill *cfg with "everything from the environment". */
void uln_config_init(struct uln_config *cfg);

/* Join the job: attach the transport, publish this process, wait for all peers.
 * Collective: every rank calls it. A job has at most 4096 ranks. In a job of
 * more than ~768 ranks it raises the soft RLIMIT_NOFILE (within the hard one):
 * each peer reached over shared memory holds a descriptor.
 *
 * Besides the bootstrap's and transports' errors, uln_open returns -EINVAL for
 * a bad setting (every ULN_* setting is checked here, and the reason is printed
 * on stderr, by one rank for a setting the whole job shares) and -EADDRINUSE
 * when this process has joined its job already: a rank joins once, so a second
 * uln_open in a process started by a launcher fails, even after uln_close of
 * the first (a job of one, started without a launcher, may open again). An
 * unknown ULN_* variable (a misspelt setting) is not an error: it is
 * named on stderr once per process, with the closest known setting.
 *
 * With ULN_BOOT=none (or cfg->boot = ULN_BOOT_NONE) the context joins no job:
 * it reads no launcher variable (no ulnrun board, no ULN_ROOT, no PMIx even
 * under mpirun), returns at once, and a process may hold any number of such
 * contexts, beside a job's or not, and close and open them again at will. */
int uln_open(const struct uln_config *cfg, struct uln_ctx **ctx);

/* Leave the job and free everything the context owns (regions, CQs, endpoints
 * still open are closed). Not collective; call uln_barrier first if peers may
 * still access this process's memory. */
int uln_close(struct uln_ctx *ctx);

int uln_rank(const struct uln_ctx *ctx);
int uln_size(const struct uln_ctx *ctx);
uint64_t uln_job_key(const struct uln_ctx *ctx);

/* Block until every rank of the job has called uln_barrier the same number of
 * times. While it waits it drives progress on every endpoint of the context
 * (as a blocking MPI call does): over UDP a peer may need this rank to resend
 * a lost packet or answer a GET before it can reach the barrier. So no other
 * thread may be inside ulnet on this context meanwhile, unless ULN_PROGRESS=
 * thread is on (then the progress thread does it). timeout_ms < 0: no
 * timeout. Returns 0, -ETIMEDOUT, or -ECONNRESET when a rank is gone: seen
 * while waiting, promptly (not after the timeout), under ulnrun and ULN_ROOT;
 * a PMIx server reports it its own way. After -ECONNRESET every later barrier
 * fails the same way at once. */
int uln_barrier(struct uln_ctx *ctx, int timeout_ms);

/*
 * uln_allgather: every rank's len bytes to every rank of the job, over the
 * endpoint ep - the exchange of region keys (and addresses) each program
 * otherwise writes by hand. Rank r's bytes land at all + r * len on every
 * rank, this rank's own included (mine may point there). A collective like
 * uln_barrier: every rank calls it with the same len on its endpoint of the
 * same index, and it returns once every rank holds every blob (it ends with
 * a uln_barrier, so a rank that returns may post at once). ep must be idle:
 * an endpoint with operations outstanding (posted, not yet completed) or
 * with completions waiting on its CQs (other than peers' blobs of this very
 * call, already received) is refused with -EBUSY before anything is sent or
 * taken, so nothing is lost; poll them, then call again. Nothing else may
 * arrive during the call: a completion not its own stops it with -EBUSY
 * (-EPROTO for a NAP of another length) and stays on its CQ to be polled.
 * So call it before other traffic, as the examples do after uln_mr_reg:
 *
 *   struct { uint64_t key; uint64_t addr; } me = {uln_mr_key(mr), 0}, all[n];
 *   uln_allgather(ep, &me, sizeof me, all, 10000);
 *
 * len: 1 .. nap_max (uln_query). timeout_ms < 0: no timeout. Returns 0,
 * -EINVAL, -EMSGSIZE (len over nap_max), -EOPNOTSUPP (a context with no
 * job), -ETIMEDOUT, -EPROTO (a rank gave another len), -EBUSY (ep not idle,
 * as above), -EBADF (ep closed), -ECONNRESET (a rank died), or the status of
 * a failed NAP.
 */
int uln_allgather(struct uln_ep *ep, const void *mine, size_t len, void *all, int timeout_ms);

/* ------------------------------------------------------------------------- */
/* Peers by address (contexts with no job; docs/security.md)                  */
/* ------------------------------------------------------------------------- */

/*
 * uln_addr gives this context's address: an opaque byte string of at most
 * ULN_ADDR_MAX bytes, to be copied to other processes by any means (a file, a
 * socket, a PMIx key). It says how to reach us (this host's shared memory
 * through our inbox; our UDP address and ports), carries the context's key -
 * 64 random bits drawn at uln_open, which every packet and inbox access from
 * a peer must show - and so names this life of the context: a restarted
 * process has another key, and is another peer.
 *
 * uln_peer_insert turns (address, endpoint index) into a peer id: operations
 * from ANY endpoint of ours to that id go to that endpoint of that process.
 * Same host: shared memory; else udp. Both sides may insert each other in
 * any order, or only one side may: a peer that sends to us before we insert
 * it is learnt from its contact (its address travels with its first message
 * over shm, with its hello over udp), and its traffic arrives from the id
 * that inserting its address later returns (as libfabric providers deliver
 * from sources not in the AV, and MPI libraries insert peers lazily).
 * Inserting the same (address, index) again returns the same id (counted:
 * it takes as many uln_peer_remove). uln_peer_remove ends the id: posts to
 * it return -EINVAL, its outstanding operations complete with -ECANCELED,
 * and its traffic waits unread until it is inserted again (a peer only
 * learnt from its contact was never inserted: -EINVAL). Our own address is
 * a peer like any other (loopback through shared memory).
 *
 * uln_addr writes the full form when *len leaves room for it. With less room,
 * but at least ULN_ADDR_SHORT bytes, it writes a short form of the same
 * address where one exists - this host's shared memory and an IPv4 UDP
 * address, the common case - for clients that keep an address in a small
 * fixed buffer; else it returns -ENOSPC with the full length in *len. Both
 * forms are accepted everywhere an address is, and name the same peer.
 * Under ULN_SECURE the short form also carries the context's public key:
 * ULN_ADDR_SHORT_SEALED bytes (a libfabric name of 64 bytes holds it); it
 * leaves out which job secret the context holds, so a peer with another
 * secret is not refused at insert, but its every datagram is, and counted.
 *
 * Neither may run while another thread drives an endpoint of the context
 * (like uln_ep_open). Returns 0 or -EINVAL (bad arguments, a context in a
 * job), -EADDRNOTAVAIL (not an address, or an index past the peer's
 * endpoint limit), -EHOSTUNREACH (no transport reaches it), -ENOSPC (max_peers
 * ids in use).
 */
#define ULN_ADDR_MAX          128 /* room for a third part: IPv6, a service, a public key */
#define ULN_ADDR_SHORT        27
#define ULN_ADDR_SHORT_SEALED 60
int uln_addr(const struct uln_ctx *ctx, void *addr, size_t *len); /* in: room, out: length */
int uln_peer_insert(struct uln_ctx *ctx, const void *addr, size_t len, int ep_index, int *peer);
int uln_peer_remove(struct uln_ctx *ctx, int peer);
/* An address as text, for logs and tools: "pid 4242 key 9c0e...f1 host
 * 2b7f...08 shm udp 10.0.0.2:40000+4" (the parts it carries, each transport's
 * way). snprintf's contract: the length the whole text needs, written as far
 * as size allows and always terminated; -EADDRNOTAVAIL for bytes that are not
 * a well-formed address (checked as uln_peer_insert checks them). Needs no
 * context. */
int uln_addr_str(const void *addr, size_t len, char *buf, size_t size);

/* Has the peer died or left, as far as this endpoint can tell? 0, or
 * -ECONNRESET; -EINVAL for a bad peer id. Sends nothing and costs about a
 * system call: shm asks the peer's pidfd; udp says what it found, and finds
 * a peer dead only while something sent to it awaits an answer
 * (ULN_UDP_DEAD_MS), so to watch an idle peer, send it a small NAP now and
 * then. For protocols on top that wait for a peer's answer with nothing of
 * ulnet's outstanding (a rendezvous waiting for its ACK). */
int uln_peer_alive(struct uln_ep *ep, int peer);

/* Limits and mechanisms in force. */
struct uln_info {
    uint32_t nap_max;    /* largest NAP payload, bytes */
    uint32_t inline_max; /* largest payload ULN_INLINE copies at post time */
    uint32_t sq_depth;
    uint32_t ring_bytes;
    uint32_t chunk_bytes;
    uint32_t post_copy_max;
    uint32_t max_eps;
    uint32_t max_regions;
    int shm_direct;        /* PUT/GET done by the initiator on mapped memory */
    int shm_cma;           /* process_vm_readv/writev allowed and working */
    const char *transport; /* "shm": every peer over shared memory; "udp": every other
                              rank over UDP; "shm+udp": both kinds of peer */
    int udp_peers;         /* ranks reached over UDP */
    uint32_t udp_window;   /* packets in flight per (endpoint, peer) */
    uint32_t udp_dead_ms;  /* a peer silent this long while awaited is dead */
    int progress_thread;   /* ULN_PROGRESS=thread: a thread progresses in the background */
    const char *bootstrap; /* how the job was joined: "ulnrun" (the board ulnrun made),
                              "root" (ULN_ROOT), "pmix", "single" (a job of one), or
                              "none" (no job: peers by address) */
    uint32_t max_peers;    /* peer ids are below this (a job: its size) */
    /* What the transports that carry this context's peers can do, ULN_CAP_*
     * bits: every such peer's (caps_all; 0 with no peer) and at least one's
     * (caps_any). Expect from these, not from a transport's name or count:
     * a transport added later says what it does the same way. */
    uint32_t caps_all, caps_any;
    const char *link;      /* what carries the udp transport's packets: "xdp" once an
                              endpoint took the AF_XDP link (ULN_TRANSPORT=xdp or auto),
                              else "udp" (the kernel's UDP socket); NULL with no endpoint
                              on udp yet */
};
/* The initiator moves PUT, GET and atomics itself on memory it maps (over
 * shm, with shm_direct): done in the call, no work at the target. */
#define ULN_CAP_DIRECT_RMA 0x1u
/* The target's progress places PUTs and serves GETs (udp). */
#define ULN_CAP_TARGET_CPU 0x2u
/* Messages go straight into the peer's rings (shm). */
#define ULN_CAP_RINGS 0x4u
int uln_query(const struct uln_ctx *ctx, struct uln_info *info);

/* Each transport's (and its link's) own facts by key, as text: its settings
 * in force, what it found here, its counters - "<transport>.<name>", e.g.
 * "udp.window", "udp.link", "shm.cma". Whatever a transport reports, so a
 * new transport's facts need no new field here (struct uln_info's stay).
 * uln_query_key: the value of key into buf (snprintf's contract: returns the
 * length it needs), -ENOENT for a key no transport of the context has.
 * uln_query_keys: the i-th key (0, 1, ...) and its value, each as
 * uln_query_key writes it; -ENOENT past the last. */
int uln_query_key(const struct uln_ctx *ctx, const char *key, char *buf, size_t len);
int uln_query_keys(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen, char *val,
                   size_t vlen);

/* What uln_open(cfg) would have in force, without opening anything: the
 * settings resolved as uln_open resolves them (cfg's fields, then the ULN_*
 * variables, then the defaults, with the same checks, by the same code), so
 * a library can advertise a context's limits before it opens one (as the
 * libfabric provider's fi_getinfo does). cfg NULL: uln_config_init's. Fills
 * nap_max, inline_max, sq_depth, ring_bytes, chunk_bytes, post_copy_max,
 * max_eps, max_regions, shm_direct, udp_window, udp_dead_ms and
 * progress_thread as uln_query of that context would. What only an open
 * context knows is given as:
 *   shm_cma      the setting (whether the kernel allows it is found at open:
 *                uln_query may then say 0)
 *   transport    NULL (which transports carry peers depends on them)
 *   udp_peers    0
 *   bootstrap    "none" for a context of no job (cfg->boot, ULN_BOOT), else
 *                NULL (how the job is joined is found at open)
 *   max_peers    no job: ULN_MAX_PEERS / cfg->max_peers; a job: 0 (its size)
 * Returns 0, or -EINVAL for a setting uln_open would refuse (or info NULL):
 * the same reason is printed on stderr as uln_open would print, by the same
 * rank, and the call never waits (uln_open's pause for a launcher is its
 * own). An unknown ULN_* variable is named once per process, by whichever
 * of the two calls comes first. It changes nothing uln_open later does, and
 * may be called from any thread, at any time, with contexts open or not. */
int uln_config_query(const struct uln_config *cfg, struct uln_info *info);

/* Counters, for tests and tools: every refused or dropped thing is counted.
 * Each has one meaning on every transport (shm direct, shm through the rings,
 * udp); tests/integration/counters.c checks them at both ends. */
struct uln_counters {
    uint64_t naps_sent;     /* NAPs this process sent (handed to the transport) */
    uint64_t naps_received; /* NAPs that arrived for this process */
    uint64_t puts, gets;    /* this process's PUTs/GETs that succeeded; a refused or
                               failed one is counted nowhere as a put or get */
    uint64_t bytes_put;     /* ... and their bytes */
    uint64_t bytes_got;
    uint64_t eagain;                   /* posts refused: the send queue held sq_depth ops */
    uint64_t refused_key;              /* accesses to THIS process's memory refused, counted at
                                          the owner once per operation, whichever side checked
                                          (over shm the initiator checks and counts it in the
                                          owner's inbox): unknown or stale key */
    uint64_t refused_bounds;           /* ... offset/length outside the region */
    uint64_t refused_access;           /* ... region lacks the right (read/write) */
    uint64_t refused_job;              /* packets or inboxes of another job, refused here */
    uint64_t malformed;                /* messages or packets dropped here as malformed */
    uint64_t cache_hits, cache_misses; /* remote-region translation cache */
    uint64_t sleeps, wakeups_sent;
    uint64_t pkts_sent, pkts_received; /* udp: datagrams */
    uint64_t retransmits;              /* udp: packets sent again (lost or timed out) */
    uint64_t duplicates;               /* udp: packets that arrived twice, dropped */
    uint64_t stale;                    /* udp: packets of a peer's earlier life, dropped */
    uint64_t peers_dead;       /* peers this process found dead, on every transport: shm: the
                                  process exited; udp: silent past udp_dead_ms */
    uint64_t pkts_dropped;     /* udp: ahead of order with no buffer free: dropped, resent */
    uint64_t atomics;          /* this process's atomics that succeeded (as puts, gets) */
    uint64_t atomics_served;   /* atomics this process applied for a peer (the rings, udp);
                                  one done by the initiator on mapped memory is not here */
    uint64_t refused_align;    /* accesses to THIS process's memory refused, as refused_key:
                                  an atomic's word not naturally aligned (-EDOM) */
    uint64_t refused_stale_ep; /* messages for an endpoint's earlier life (sent to an index
                                  before it was closed and opened again), refused here */
    uint64_t refused_auth;     /* udp with ULN_SECURE=auth|encrypt: datagrams whose seal did
                                  not open (forged, altered, cut, replayed, too old, another
                                  key): dropped before anything read them */
};
int uln_counters_get(const struct uln_ctx *ctx, struct uln_counters *out);

/* Human-readable text for a ulnet status (a negative errno), in one style:
 * lower case, no final period, saying what the code means in ulnet (the list
 * of status codes above). A code outside that list gets libc's text in the
 * same style, in a buffer of the calling thread's that the next such call
 * overwrites. */
const char *uln_strerror(int status);

/* The version of the library in use, "MAJOR.MINOR.PATCH" (e.g. "0.1.0"), and
 * ULNET_VERSION_NUM of it. A program built against one header and run with
 * another library can compare the number with ULNET_VERSION. Needs no
 * context. */
const char *uln_version(int *num);

/* ------------------------------------------------------------------------- */
/* Memory                                                                     */
/* ------------------------------------------------------------------------- */

/*
 * Memory from uln_mem_alloc lives in a shared-memory object that peers on this
 * host map once and then read/write with plain loads and stores (one copy, no
 * system call). Other memory can be registered too; peers then reach it with
 * process_vm_readv/writev (one copy, one system call per piece, nothing asked
 * of the owner) or, with ULN_SHM_CMA=0 or where the kernel refuses that,
 * through the rings: the owner's engine copies while ours does, so the owner
 * must poll, but two CPUs copy at user-level speed (a 1 MiB GET from malloc'd
 * memory 41 against 80 us here, docs/provider.md; the libfabric provider
 * chooses this).
 */
int uln_mem_alloc(struct uln_ctx *ctx, size_t len, void **ptr);
int uln_mem_free(struct uln_ctx *ctx, void *ptr);

/* Access rights of a region. Local access is always allowed. */
#define ULN_ACCESS_LOCAL         0x0u
#define ULN_ACCESS_REMOTE_READ   0x1u /* peers may GET from it */
#define ULN_ACCESS_REMOTE_WRITE  0x2u /* peers may PUT into it */
#define ULN_ACCESS_REMOTE_ATOMIC 0x4u /* peers may apply uln_atomic to its words */
/* Not a right but how peers address the region: with ULN_MR_VADDR, the remote
 * offset of a PUT, GET or atomic on it is an address in the owner's address
 * space (addr .. addr+len, as uln_mr_addr there returns), not a byte offset
 * from its start. What libfabric calls FI_MR_VIRT_ADDR: a client that passes
 * around pointers into its peers' buffers needs no base to subtract. Bounds
 * and alignment are checked on the address as on an offset (-ERANGE below
 * addr or past addr+len; -EDOM for a misaligned atomic word). */
#define ULN_MR_VADDR 0x8u
/* Not a right but how long the region lives: registered for one operation
 * or a few (a rendezvous buffer) and deregistered soon after. A region's
 * uln_mr_dereg must know that no peer is still copying from or into it;
 * for most regions peers announce their accesses cheaply and the dereg
 * pays for it with a fence across the machine (a system call that
 * interrupts every CPU running a peer: tens of microseconds in a VM). Peers
 * announce their accesses to a ULN_MR_TRANSIENT region with a full fence
 * of their own instead (a few nanoseconds each), so its dereg is cheap. */
#define ULN_MR_TRANSIENT 0x10u

/* Register [addr, addr+len) with the given rights. The region's key names it to
 * peers; a key is never reused after uln_mr_dereg (a fresh random magic each
 * time), so a stale key is refused. Any length (0 too) of memory that is
 * mapped and stays mapped until uln_mr_dereg. Returns -ENOSPC when max_regions
 * are registered, -EFAULT when part of the range is not mapped, -EINVAL when
 * it wraps around the address space. */
int uln_mr_reg(struct uln_ctx *ctx, void *addr, size_t len, unsigned access, struct uln_mr **mr);
/* Refuse the key from now on, wait until no peer is inside the region, free mr.
 * After it returns no peer reads or writes the memory through ulnet: a peer's
 * PUT or GET still in flight completes there with -ENOKEY (or had completed
 * before). A second call on the same handle returns -EBADF. */
int uln_mr_dereg(struct uln_mr *mr);
uint64_t uln_mr_key(const struct uln_mr *mr);
void *uln_mr_addr(const struct uln_mr *mr);
size_t uln_mr_len(const struct uln_mr *mr);

/* ------------------------------------------------------------------------- */
/* Completion queues                                                          */
/* ------------------------------------------------------------------------- */

enum uln_op {
    ULN_OP_NAP = 1,    /* a NAP this process sent has left its buffer */
    ULN_OP_NAP_RECV,   /* a NAP arrived: data/len/src; release the entry */
    ULN_OP_PUT,        /* a PUT completed: data visible at the target */
    ULN_OP_PUT_REMOTE, /* a peer's PUT with immediate data landed here */
    ULN_OP_GET,        /* a GET completed: data is in the local buffer */
    ULN_OP_FLUSH,      /* every operation posted before the flush completed */
    ULN_OP_ATOMIC,     /* an atomic was applied at the target; the old value is in
                          its result buffer (len: the width, 4 or 8) */
};

struct uln_cqe {
    uint64_t user_data; /* as given when posting (0 for received entries) */
    int32_t status;     /* 0, or -errno: why the operation failed */
    uint16_t op;        /* enum uln_op */
    uint16_t ep;        /* endpoint index */
    int32_t peer;       /* the other rank: target of a send, source of a receive */
    uint32_t flags;     /* ULN_CQE_* */
    uint64_t len;       /* bytes moved (NAP_RECV: payload length) */
    uint64_t imm;       /* PUT_REMOTE: the initiator's immediate data */
    uint64_t offset;    /* PUT_REMOTE: the remote offset the initiator gave (an
                           address for a ULN_MR_VADDR region) */
    const void *data;   /* NAP_RECV: payload in the receive ring, valid until
                           uln_cqe_release */
    uint64_t priv_;     /* internal: how to release the entry */
};

#define ULN_CQE_MUST_RELEASE 0x1u /* hand the entry back with uln_cqe_release */

/* A CQ holds up to `entries` completions (1..2^24, else -EINVAL); the engine
 * never overruns it: work that would complete into a full CQ waits (send
 * completions in the send queue, received NAPs and PUT_REMOTE in the ring). */
int uln_cq_open(struct uln_ctx *ctx, unsigned entries, struct uln_cq **cq);
/* -EBUSY while an endpoint is bound to cq (close the endpoints first); once
 * closed, every call on cq returns -EBADF. */
int uln_cq_close(struct uln_cq *cq);

/* Drive progress of the endpoints bound to cq, then take up to max entries.
 * Returns the number taken (0: none yet) or -errno. A poll that finds
 * entries waiting may hand them over without a progress pass: at most 15
 * such polls in a row when it takes them all, every other one when it
 * leaves some. */
int uln_cq_poll(struct uln_cq *cq, struct uln_cqe *out, int max);

/* Wait until cq has an entry: poll, spin a short while, then sleep until a peer
 * wakes this process. timeout_ms < 0: no timeout; 0: poll once.
 * Returns 0 when an entry is ready, -ETIMEDOUT, -EINTR after uln_cq_wake, or
 * -errno. */
int uln_cq_wait(struct uln_cq *cq, int timeout_ms);

/* End a uln_cq_wait on cq: the one in progress in another thread returns
 * -EINTR at once (woken if it sleeps), or, if none waits, the next one does;
 * wakes before a wait count as one. An entry that is ready is reported
 * first (0), the wake staying for the next wait. Any thread may call it
 * while another drives the CQ (it takes no lock), as fi_cq_signal or
 * ucp_worker_signal. A sleeper on uln_cq_fd is woken too: the descriptor
 * becomes readable, or the next uln_cq_arm returns -EAGAIN. */
int uln_cq_wake(struct uln_cq *cq);

/* Sleeping on a descriptor, with epoll/poll/select beside other work (as
 * FI_WAIT_FD or ucp_worker_get_efd + ucp_worker_arm):
 *   fd = uln_cq_fd(cq);                    once: a descriptor the CQ owns
 *   loop: n = uln_cq_poll(cq, ...);        take what there is
 *         if (!n && uln_cq_arm(cq, &ms) == 0)
 *             poll(fd, POLLIN, ms);        sleep; any call on cq ends it
 * uln_cq_arm makes one progress pass and returns -EAGAIN when entries are
 * ready or work moved (poll again instead of sleeping); 0 when the caller
 * may sleep on fd: a peer that gives the CQ work, or a packet for one of its
 * endpoints, makes fd readable, and so does a timer in fd's set after
 * *timeout_ms, the endpoints' earliest deadline (a resend, a dead peer), so
 * sleeping on fd alone, with no timeout, is safe. fd may be readable
 * with nothing for this CQ (a wake-up for another CQ of the context):
 * poll, then arm again. The set is fixed up at each arm as endpoints are
 * bound and closed. uln_cq_close closes fd. */
int uln_cq_fd(struct uln_cq *cq);
int uln_cq_arm(struct uln_cq *cq, int *timeout_ms);

/* Give a NAP_RECV entry's ring space back (entries with ULN_CQE_MUST_RELEASE).
 * Entries may be released in any order; the ring space is reused in order. */
int uln_cqe_release(struct uln_cq *cq, const struct uln_cqe *cqe);

/* ------------------------------------------------------------------------- */
/* Endpoints and operations                                                   */
/* ------------------------------------------------------------------------- */

/* Open an endpoint at the lowest free index (the number opened before it,
 * until one is closed). Send completions go to send_cq, received NAPs and
 * remote PUT completions to recv_cq (may be the same CQ). -ENOSPC while
 * max_eps endpoints are open. */
int uln_ep_open(struct uln_ctx *ctx, struct uln_cq *send_cq, struct uln_cq *recv_cq,
                struct uln_ep **ep);
/* Close: every outstanding operation gets its completion first, with
 * -ECANCELED (one that had started may have moved part of its data). Then
 * posts, flush and a second close on ep return -EBADF (for the context's
 * next 64 closes; later the handle is as undefined as a freed pointer).
 * The index is free: the next uln_ep_open may begin a new life of it. What
 * peers sent to this life and it did not take is never delivered to a later
 * one: refused and counted (refused_stale_ep); a peer's operations waiting
 * on this life's answer end with -ECONNRESET, as for a dead peer; what
 * peers post later reaches the next life. Received NAP entries of this life
 * are void (uln_cqe_release: -EINVAL). */
int uln_ep_close(struct uln_ep *ep);
int uln_ep_index(const struct uln_ep *ep);

/* Flags for posting */
#define ULN_INLINE                                                                                 \
    0x1u                   /* copy the payload at post time: the buffer is free on return          \
                              (payload <= inline_max) */
#define ULN_SILENT    0x2u /* no completion on success (errors still complete) */
#define ULN_REMOTE_CQ 0x4u /* PUT: also complete at the target (set by uln_put_imm) */
/* Start this operation only after every operation posted before it on the
 * endpoint has completed (its completion is written, or it was ULN_SILENT
 * and succeeded): a GET after PUTs to the same bytes reads what they wrote,
 * without a flush round trip through the application. Later operations wait
 * behind it (issue is in order). On an endpoint with nothing outstanding it
 * costs nothing. */
#define ULN_FENCE 0x8u
/* Complete in the call when it can: if the operation is done before the post
 * returns (PUT, GET or atomic through the direct shm path, a NAP already in
 * the peer's ring or handed to the network), the post returns 1 and writes
 * no completion: the data are in place, an atomic's old value is in *result.
 * Otherwise it returns 0 and completes as usual. A completion in the call
 * (UCX's "immediate completion"; in ulnet "immediate" names only
 * uln_put_imm's 64-bit data): a fetch-add on a peer's mapped word then costs
 * no poll. An
 * error found in the call still completes with its status (the post returns
 * 0), as with ULN_SILENT. */
#define ULN_NOW 0x10u

/*
 * Posting contract, the same on every transport:
 *  - A post returns -EAGAIN exactly when the endpoint's send queue holds
 *    sq_depth operations not yet retired: poll the send CQ (which retires
 *    them), then retry. Nothing else makes a post -EAGAIN.
 *  - A PUT/GET of at most post_copy_max bytes, posted with nothing queued on
 *    a transport that reaches the target's memory (shm), is copied inside the
 *    post call; a larger one takes an entry and moves chunk_bytes per
 *    progress pass (uln_cq_poll/uln_cq_wait), overlapping with computation.
 *    Either way its buffer belongs to ulnet until its completion.
 *  - uln_ep_flush takes no send-queue entry and is never refused for lack
 *    of room (only -ENOMEM): its completion follows every operation posted
 *    before it.
 *
 * When packets leave (udp; over shm a post is visible to the peer at once):
 *  - A post to a peer with nothing in flight (every packet sent to it so
 *    far acknowledged) sends its packets inside the post call: a lone
 *    message never waits for a poll.
 *  - A post while packets to that peer are in flight joins the endpoint's
 *    batch, which leaves in one system call when it is full (64 packets)
 *    or at the endpoint's next progress pass, whichever comes first: a
 *    uln_cq_poll, a uln_cq_wait or uln_barrier that waits, or the progress
 *    thread's next pass (ULN_PROGRESS=thread). A burst of posts followed by
 *    a poll costs one system call, small packets to one peer (a burst of
 *    small NAPs or PUTs) several to a datagram of up to 2 KiB, and
 *    equal-size packets to one peer as one segmentation-offload run. So
 *    poll after a burst, as you must anyway to see its completions; a post
 *    followed by sleep() may wait.
 *  - Answers to a peer (a PUT's acknowledgement, delivery feedback) leave at
 *    the end of the progress pass that made them, except on an endpoint that
 *    posted within the last 200 us: there they wait for its next post (and
 *    go in the same system call) or for its next progress pass, whichever
 *    comes first. An idle target answers at once; a busy one saves a call,
 *    and a PUT's acknowledgement rides in the same datagram as the reply.
 */

/* Send len bytes (0..nap_max) to the peer's endpoint of the same index.
 * Unless ULN_INLINE, buf must stay unchanged until the NAP's completion. */
int uln_nap(struct uln_ep *ep, int peer, const void *buf, size_t len, uint64_t user_data,
            unsigned flags);

/* uln_nap whose payload is the concatenation of iovcnt segments (0..
 * ULN_IOV_MAX; zero-length ones allowed): a header and a user's buffer, say,
 * with no copy into one buffer first. The total is at most nap_max; it is
 * gathered straight into the peer's ring (one copy, as for uln_nap; over udp
 * into the packets). Unless ULN_INLINE, the segments must stay unchanged
 * until the NAP's completion; a total of at most inline_max is gathered at
 * post time anyway. -EINVAL for iovcnt outside 0..ULN_IOV_MAX or a NULL
 * base with a length, -EMSGSIZE past nap_max. */
#define ULN_IOV_MAX 16
int uln_napv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint64_t user_data,
             unsigned flags);

/* Write len bytes from src into the peer's region rkey at roff. src must stay
 * unchanged until the completion (unless ULN_INLINE and len <= inline_max). */
int uln_put(struct uln_ep *ep, int peer, const void *src, size_t len, uint64_t rkey, uint64_t roff,
            uint64_t user_data, unsigned flags);

/* uln_put that also raises a ULN_OP_PUT_REMOTE completion carrying imm on the
 * peer's endpoint (the receive CQ), after the data is visible there. */
int uln_put_imm(struct uln_ep *ep, int peer, const void *src, size_t len, uint64_t rkey,
                uint64_t roff, uint64_t imm, uint64_t user_data, unsigned flags);

/* Read len bytes from the peer's region rkey at roff into dst. */
int uln_get(struct uln_ep *ep, int peer, void *dst, size_t len, uint64_t rkey, uint64_t roff,
            uint64_t user_data, unsigned flags);

/* Gather and scatter lists: uln_put, uln_put_imm and uln_get whose local side
 * is iovcnt segments (0..ULN_IOV_MAX; zero-length ones allowed, with a NULL
 * base too) and whose remote side is one range of their total length at
 * roff. uln_putv writes the concatenation of the segments there; uln_getv
 * reads the range into the segments in order. One operation: the same
 * checks (the whole range against key, bounds and rights: a refused one
 * moves no byte), one completion (len: the total), the same flags, ordering
 * and errors as the call it extends; a total of 0 is a 0-length PUT/GET.
 * The segments must stay unchanged (uln_putv) or untouched (uln_getv) until
 * the completion; the array itself is copied at post. A PUT of at most
 * inline_max in all is gathered at post time, as with ULN_INLINE, which
 * uln_getv refuses (-EMSGSIZE). Extra at post: -EINVAL for iovcnt outside
 * 0..ULN_IOV_MAX or a NULL base with a length. Over shm each segment is
 * copied straight to/from the peer's memory; over udp each packet gathers
 * from (at most two of) the segments and GET data is scattered into them as
 * it arrives, with no copy in between. */
int uln_putv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint64_t rkey,
             uint64_t roff, uint64_t user_data, unsigned flags);
int uln_put_immv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint64_t rkey,
                 uint64_t roff, uint64_t imm, uint64_t user_data, unsigned flags);
int uln_getv(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint64_t rkey,
             uint64_t roff, uint64_t user_data, unsigned flags);

/*
 * Remote atomics. One read-modify-write of the 4- or 8-byte word at (peer,
 * rkey, roff), which the region must allow (ULN_ACCESS_REMOTE_ATOMIC). The
 * word must be naturally aligned in the target's address space (roff
 * aligned to width in memory from uln_mem_alloc, which is page aligned).
 * Every op fetches: when result is not NULL the word's value from before
 * the op is written there (width bytes, as a uint32_t or uint64_t) before
 * the completion (so it must stay valid until then); ULN_ATOMIC_ADD with
 * result NULL is a plain add. For width 4 only the low 32 bits of operand
 * and compare count.
 *
 * Atomicity: an op is atomic against every other ulnet atomic on the same
 * word, from any peer and over any transport at once, and against the
 * owner's own __atomic / <stdatomic.h> operations on it (of the same width):
 * ulnet applies it with a CPU atomic instruction on the word itself, done by
 * the initiator on mapped memory (shm, memory from uln_mem_alloc) or by the
 * target's engine (other memory, ULN_SHM_DIRECT=0, udp) when it progresses.
 * The owner's plain loads and stores of a word peers may be changing race
 * with them, as with any atomic: use __atomic ops on it meanwhile (or read it
 * plainly once a barrier says the peers are done). Each op is sequentially
 * consistent (a full barrier on the target's memory).
 * Over udp a lost or duplicated packet never applies an op twice.
 *
 * Returns 0 or -errno at post: -EINVAL (op or width unknown, peer out of
 * range), -EAGAIN; the completion's status is 0, -ENOKEY, -ERANGE (the word
 * not inside the region), -EACCES (no ULN_ACCESS_REMOTE_ATOMIC), -EDOM (not
 * aligned), -ECONNRESET, -ECANCELED, -EPROTO (the peer's answer was
 * malformed). A refused atomic writes nothing, leaves *result alone, and is
 * counted at the owner (refused_*). ULN_SILENT and ULN_FENCE apply;
 * ULN_INLINE is accepted and means nothing (the operands travel by value).
 */
enum uln_atomic_op {
    ULN_ATOMIC_ADD = 1, /* word += operand (wraps) */
    ULN_ATOMIC_SWAP,    /* word = operand */
    ULN_ATOMIC_CSWAP,   /* if (word == compare) word = operand */
    ULN_ATOMIC_AND,     /* word &= operand */
    ULN_ATOMIC_OR,      /* word |= operand */
    ULN_ATOMIC_XOR,     /* word ^= operand */
    ULN_ATOMIC_MIN,     /* word = min(word, operand), unsigned */
    ULN_ATOMIC_MAX,     /* word = max(word, operand), unsigned */
    ULN_ATOMIC_SMIN,    /* word = min(word, operand), signed (two's complement) */
    ULN_ATOMIC_SMAX,    /* word = max(word, operand), signed */
};
int uln_atomic(struct uln_ep *ep, int peer, unsigned op, unsigned width, uint64_t rkey,
               uint64_t roff, uint64_t operand, uint64_t compare, void *result, uint64_t user_data,
               unsigned flags);

/* Complete (ULN_OP_FLUSH) once every operation posted on ep before it has
 * completed. Takes no send-queue entry: also with the queue full it is
 * accepted (never -EAGAIN), and several flushes complete in posting order. */
int uln_ep_flush(struct uln_ep *ep, uint64_t user_data);

#ifdef __cplusplus
}
#endif
#endif /* ULNET_H */
