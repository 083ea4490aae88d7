/*
 * internal.h - the objects behind the public handles, shared by src/ files.
 *
 * Reading order for a newcomer: ring.h (the shared-memory queue), wire.h (what
 * travels in it), inbox.h (where the rings live), this file, ep.c (posting),
 * engine.c (progress: the "NIC"), transport.h (the seam every transport plugs
 * into; transport/shm.c is the first), mr.c (regions and keys), cq.c, ctx.c.
 */
#ifndef ULN_INTERNAL_H
#define ULN_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <time.h>

#include "ulnet.h"
#include "core/clock.h"
#include "core/diag.h"
#include "core/doorbell.h"
#include "core/frag.h"
#include "core/inbox.h"
#include "core/iov.h"
#include "core/params.h"
#include "core/ring.h"
#include "core/transport.h"
#include "core/wire.h"

struct uln_board_hdr; /* boot/board.h: the bootstrap board, the core only holds it */

#define ULN_EXPORT      __attribute__((visibility("default")))
#define ULN_LIKELY(x)   __builtin_expect(!!(x), 1)
#define ULN_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define ULN_INLINE_MAX      128u   /* payload bytes kept inside a send-queue entry */
#define ULN_REQ_RING_BYTES  16384u /* channel-1 ring (GET requests) */
#define ULN_KEY_INDEX_SHIFT 40     /* key = index << 40 | 40-bit random magic */
#define ULN_KEY_MAGIC_MASK  ((1ull << ULN_KEY_INDEX_SHIFT) - 1)
#define ULN_NO_DIRECT       1 /* ops->direct: use the rings instead */

/* Statistics: each counter has one writer thread, so a relaxed load+store is
 * enough (no locked instruction on the data path) and readers see whole values. */
#define ULN_COUNT(p, field, n)                                                                     \
    atomic_store_explicit(&(p)->field,                                                             \
                          atomic_load_explicit(&(p)->field, memory_order_relaxed) + (n),           \
                          memory_order_relaxed)

struct uln_stats {
    _Atomic uint64_t naps_sent, naps_received, puts, gets, bytes_put, bytes_got, eagain;
    _Atomic uint64_t refused_key, refused_bounds, refused_access, refused_job, malformed;
    _Atomic uint64_t cache_hits, cache_misses, sleeps, wakeups_sent;
    _Atomic uint64_t pkts_sent, pkts_received, retransmits, duplicates, stale, peers_dead;
    _Atomic uint64_t pkts_dropped, atomics, atomics_served, refused_align;
    _Atomic uint64_t refused_stale_ep, refused_auth;
};

/* struct uln_params, the context's settings: core/params.h. */

/* ---- key table: one 64-byte entry per region, in shared memory ---------- */
struct uln_key_entry {
    _Atomic uint64_t key; /* the live key; 0 = no region. Written last (release) */
    uint64_t addr;        /* start in the owner's address space */
    uint64_t len;
    uint32_t access;    /* ULN_ACCESS_* */
    int32_t memfd;      /* owner's descriptor of the backing memfd, -1: plain memory */
    uint64_t memfd_off; /* where the region starts in that memfd */
    uint64_t memfd_len; /* the memfd's size */
    uint64_t pad_[2];
};
_Static_assert(sizeof(struct uln_key_entry) == 64, "key entry is one cache line");

/* Check an access of [*off, *off+len) with rights `need` against a snapshot of
 * entry e. Pure: writes nothing but *off. A ULN_MR_VADDR region is addressed
 * by the owner's addresses: *off comes in as one and leaves as the offset in
 * the region, so every caller (direct path, rings, udp) translates alike. */
static inline int uln_key_check(const struct uln_key_entry *e, uint64_t live_key, uint64_t key,
                                uint64_t *off, uint64_t len, unsigned need)
{
    if (key == 0 || live_key != key) return -ENOKEY;
    uint64_t o = *off;
    if (e->access & ULN_MR_VADDR) {
        if (o < e->addr) return -ERANGE; /* below the region: no wrap-around */
        o -= e->addr;
    }
    if (o > e->len || len > e->len - o) return -ERANGE; /* no overflow */
    if ((e->access & need) != need) return -EACCES;
    *off = o;
    return 0;
}

/* May an accessor announce itself with a plain store for entry e? Only where
 * the owner fences at dereg (fence_ok: uln_hazard_enter's light) and the
 * region is not ULN_MR_TRANSIENT, whose dereg does not fence. Read before
 * the hazard store, so possibly of a later registration in e: then the key
 * the caller holds is gone from e, the check after the hazard refuses, and
 * the mode did not matter (mr.c). */
static inline bool uln_hazard_light(bool fence_ok, const struct uln_key_entry *e)
{
    return fence_ok && !(__atomic_load_n(&e->access, __ATOMIC_RELAXED) & ULN_MR_TRANSIENT);
}

/* The accessor's half of the hazard protocol with uln_mr_dereg (mr.c has
 * the whole argument): name region idx in our hazard slot (idx + 1), then
 * read its live key. Either the owner sees us inside or we see the key gone.
 * light: the owner follows its key clear with a membarrier that acts as a
 * full fence in this thread, so a plain store suffices here; otherwise the
 * store is seq_cst (a full fence of our own, the classic Dekker). */
static inline uint64_t uln_hazard_enter(_Atomic uint32_t *hz, uint32_t idx, bool light,
                                        const _Atomic uint64_t *live)
{
    if (ULN_LIKELY(light)) {
        atomic_store_explicit(hz, idx + 1, memory_order_relaxed);
        /* Only the compiler is kept from moving the key load above the store;
         * the CPU may still (its store buffer): the owner's membarrier covers
         * that. */
        atomic_signal_fence(memory_order_seq_cst);
    } else {
        atomic_store_explicit(hz, idx + 1, memory_order_seq_cst);
    }
    /* Seq_cst: the load of the Dekker pair; it also acquires the entry's
     * fields, written before the key's release store (uln_mr_reg). */
    return atomic_load_explicit(live, memory_order_seq_cst);
}

/* Release: our access to the region is complete before the owner, reading
 * the slot, may reuse the memory. */
static inline void uln_hazard_leave(_Atomic uint32_t *hz)
{
    atomic_store_explicit(hz, 0, memory_order_release);
}

/* One PUT or GET done (every path: direct, the window, the ring, udp). */
static inline void uln_count_rdma(struct uln_stats *s, bool write, uint64_t len)
{
    if (write) {
        ULN_COUNT(s, puts, 1);
        ULN_COUNT(s, bytes_put, len);
    } else {
        ULN_COUNT(s, gets, 1);
        ULN_COUNT(s, bytes_got, len);
    }
}

static inline void uln_count_refusal(struct uln_stats *s, int rc)
{
    if (rc == -ENOKEY)
        ULN_COUNT(s, refused_key, 1);
    else if (rc == -ERANGE)
        ULN_COUNT(s, refused_bounds, 1);
    else if (rc == -EACCES)
        ULN_COUNT(s, refused_access, 1);
    else if (rc == -EDOM)
        ULN_COUNT(s, refused_align, 1);
}

/* A refusal the initiator found on the owner's key table (the direct path):
 * counted in the owner's inbox header, where uln_counters_get finds it. */
static inline void uln_count_refusal_at(struct uln_inbox_hdr *owner, int rc)
{
    int i = rc == -ENOKEY ? 0 : rc == -ERANGE ? 1 : rc == -EACCES ? 2 : rc == -EDOM ? 3 : -1;
    if (i >= 0) atomic_fetch_add_explicit(&owner->refused[i], 1, memory_order_relaxed);
}

/* The PUT of a peer refused last: its other fragments are refused without
 * looking (or counting) again, one refusal per operation. valid, not a
 * reserved op id: every op id a peer can send is a real one. An operation is
 * its op id with the key and range every fragment repeats: a packet reusing
 * the op id for another key or range is another operation (a broken or
 * forging peer), checked and counted on its own. */
struct uln_refused_put {
    bool valid;
    uint64_t op_id, key, op_offset, op_len;
    int32_t status;
};

static inline bool uln_refused_is(const struct uln_refused_put *r, uint64_t op_id, uint64_t key,
                                  uint64_t op_offset, uint64_t op_len)
{
    return r->valid && r->op_id == op_id && r->key == key && r->op_offset == op_offset &&
           r->op_len == op_len;
}

/* ---- objects -------------------------------------------------------------- */

struct uln_mem { /* a block from uln_mem_alloc */
    struct uln_mem *next;
    void *base;
    size_t len;
    int fd;
};

struct uln_mr {
    struct uln_ctx *ctx;
    bool dead; /* deregistered: kept a while so a second dereg is caught (mr.c) */
    void *addr;
    size_t len;
    unsigned access;
    uint32_t index;
    uint64_t key;
    void *tp_state[ULN_TP_MAX]; /* each transport's mem_reg state (transport.h) */
};

struct uln_root;
struct uln_pmix;

/* ---- endpoint indices and their lives (core/ep.c) -------------------------- */

/* Where one life of an endpoint index left its rings with one peer, so the
 * next life goes on from there: the rings stay where they are (in our inbox
 * and in the peer's), and a producer or consumer restarted on a live ring
 * must know its position. in: how far we consumed the peer's rings to us
 * (all of it given back); out: how far we wrote, into the peer's rings (shm)
 * or, for a peer reached by packets, into our own rings fed for it. */
struct uln_ring_pos {
    uint64_t in[2], out[2];
};

/* One endpoint index, across its lives. A life begins at uln_ep_open and
 * ends at uln_ep_close; its number is the count of lives before it, also
 * published in our inbox header (ep_life) where peers on this host read it. */
struct uln_ep_slot {
    uint32_t life;
    bool taken;               /* an endpoint holds the index (or is still closing) */
    struct uln_ring_pos *pos; /* by peer; NULL until the index's first close */
};

/* ---- peers (core/peer.c) --------------------------------------------------- */

/* What the context knows of a peer id. In a job, peer p is rank p (filled at
 * uln_open, ep -1); in a context with no job, an id is a slot of our inbox,
 * claimed for one (process life, endpoint) by whoever came first: our
 * uln_peer_insert, or that endpoint mapping our inbox to write to us. */
enum { ULN_PEER_FREE = 0, ULN_PEER_LIVE, ULN_PEER_REMOVED };
struct uln_peer_rec {
    uint64_t key;  /* its context's key (in a job: the job key); its inbox and packets carry it */
    int32_t rank;  /* its own number for itself: its rank; 0 in a context with no job */
    int32_t ep;    /* the endpoint index the id names; -1: the sender's own (a job) */
    uint32_t refs; /* uln_peer_insert calls not yet undone */
    uint8_t state; /* ULN_PEER_* */
};

struct uln_ctx {
    int rank, size;
    uint64_t job_key;
    struct uln_params p;
    pthread_mutex_t lock; /* regions, memory blocks, endpoint and CQ lists */

    /* bootstrap board */
    struct uln_board_hdr *board;
    size_t board_len;
    int board_fd;
    struct uln_root *root; /* boot/root.c: the TCP rendezvous when ULN_ROOT is set */
    struct uln_pmix *pmix; /* boot/pmix.c: started by a PMIx server (mpirun, srun) */
    bool bar_broken;       /* a board barrier saw a member dead: every later one fails */

    struct uln_inbox *inbox;                  /* core/inbox.c: what peers reach us through */
    int bell_fd;                              /* core/doorbell.c: our doorbell socket */
    struct uln_bell_addr bell_self;           /* ... and its address */
    void *tp_ctx[ULN_TP_MAX];                 /* each transport's context state (transport.h) */
    const struct uln_transport_ops **peer_tp; /* by rank: the transport reaching it */
    char tp_names[32];                        /* uln_query's transport string */
    pthread_mutex_t big_lock; /* ULN_PROGRESS=thread: every entry point and the thread */
    pthread_t progress_tid;
    _Atomic int progress_stop;
    bool progress_on;
    unsigned fork_gen;          /* uln_fork_gen when opened: differs in a forked child */
    uint32_t idle_ms;           /* uln_progress_idle: sleep before the next idle pass */
    int64_t idle_last_ms;       /* ... and when the last one ran */
    struct uln_key_entry *keys; /* this process's key table (in its inbox) */
    struct uln_mr **regions;    /* by key index */
    uint32_t region_hint;
    uint64_t key_rand[32]; /* kernel random bytes for region keys, under lock (mr.c) */
    uint32_t key_rand_left;
    struct uln_mem *mems;
    struct uln_mr **mr_grave; /* deregistered handles, oldest freed first (mr.c) */
    uint32_t grave_head, grave_n;

    /* This process is registered for membarrier(GLOBAL_EXPEDITED) (ctx.c):
     * where the owner fences too (its inbox header says so), our hazard
     * announcements may be plain stores (uln_hazard_enter). */
    bool hz_light;
    bool no_job;                    /* ULN_BOOT=none: peers come from uln_peer_insert */
    struct uln_peer_rec *peer_recs; /* by peer id (core/peer.c) */
    /* Peer ids whose traffic the engine takes (all of a job's; inserted ones
     * otherwise), and a generation that changes with it so endpoints rebuild
     * their lists. Written by uln_peer_insert/remove, read by the engine:
     * the same thread, or apart in time (the rule in ulnet.h). */
    _Atomic uint64_t *peer_live;
    _Atomic uint32_t peers_gen;
    struct uln_ep **eps;          /* open endpoints by index (NULL once closed) */
    unsigned n_eps;               /* indices below this may be open */
    struct uln_ep_slot *ep_slots; /* by index (max_eps), made at the first uln_ep_open */
    struct uln_ep *closed_eps;    /* closed ones, newest first, kept so late calls get -EBADF */
    unsigned n_closed;            /* ... at most ULN_EP_GRAVE of them (ep.c) */
    struct uln_cq *cqs;           /* every CQ, open or closed, so uln_close can free them */
    struct uln_stats stats;       /* for things not owned by one endpoint */
};

struct uln_flush_mark {
    uint64_t pos; /* complete once every entry before this one retired */
    uint64_t user_data;
    int32_t status; /* -ECANCELED when the endpoint closes */
};

enum uln_sqe_state { SQE_FREE = 0, SQE_QUEUED, SQE_WAIT, SQE_DONE };

struct uln_sqe {
    uint8_t op;               /* enum uln_op */
    uint8_t state;            /* enum uln_sqe_state */
    uint8_t ring_path : 1;    /* this PUT/GET goes through the rings */
    uint8_t holds_credit : 1; /* a ring-path GET counted in its peer's gets_out */
    uint8_t gather : 1;       /* the local side is ep->sq_iov[its slot] (uln_napv,
                                 uln_putv, uln_getv), not src/dst */
    uint8_t notified;         /* direct PUT with imm: notification sent */
    uint8_t aop, width;       /* ATOMIC: enum uln_atomic_op, 4 or 8 */
    uint8_t niov;             /* gather: its segments */
    uint32_t flags;
    int32_t peer;
    int32_t status;
    uint64_t len;
    uint64_t issued;   /* bytes handed on (copied, or sent as fragments) */
    uint64_t received; /* ring-path GET: bytes arrived */
    const void *src;
    void *dst;                                  /* GET: the buffer; ATOMIC: the result, or NULL */
    uint64_t rkey, roff, imm, user_data, op_id; /* ATOMIC: imm is the operand */
    uint64_t compare;                           /* ATOMIC: ULN_ATOMIC_CSWAP's */
    uint8_t inl[ULN_INLINE_MAX];
};

/* The last region an endpoint reached directly at a peer, unpacked (as
 * UCX's unpacked rkey): where its live key is, our hazard slot there, where
 * the region is mapped here, and its entry's fields as they were. Filled by
 * the transport after a direct access through a mapping succeeded (shm.c),
 * emptied when that mapping goes. A copy of a live entry stays true while
 * the entry's key is that key: the owner changes an entry only after
 * clearing its key and waiting out our hazard (mr.c), and a new region gets
 * a new key. So every use re-reads the live key under the hazard, and only
 * that: the window is a cache, the key load is the check. */
struct uln_rkey_win {
    uint64_t key;                 /* 0: empty */
    const _Atomic uint64_t *live; /* the entry's key, in the owner's table */
    _Atomic uint32_t *hz;         /* our hazard slot at the owner */
    uint8_t *base;                /* region offset 0, in our address space */
    const _Atomic bool *dead;     /* the transport's "this peer died" */
    uint32_t idx;                 /* the entry's table index */
    bool light;                   /* uln_hazard_enter's */
    bool mapped;                  /* base is a translation cache entry's (not our own memory) */
    /* addr, len and access as they were (key unused): what uln_key_check reads. */
    struct uln_key_entry entry;
};

/* What an endpoint keeps per peer. */
struct uln_ep_peer {
    const struct uln_transport_ops *tp; /* the transport reaching it (ctx->peer_tp) */
    void *tp_peer;                      /* that transport's own state for it */
    struct uln_ring_prod out[2];        /* ULN_TP_CAP_RINGS: into the peer's inbox: ch 0, 1 */
    _Atomic uint64_t *act_map[2];       /* ... the peer's active maps our bit goes in */
    _Atomic uint32_t *act_gen;          /* ... and the act_gen of the peer's inbox */
    struct uln_ring_cons in[2];         /* from the peer, in our inbox */
    bool out_ready;                     /* connected */
    int32_t me_there;                   /* our number at the peer: our rank in a job, else
                                           the slot of its inbox we claimed (shm.c) */
    int32_t dst_ep;                     /* the peer's endpoint index we talk to */
    /* ULN_TP_CAP_RINGS: the life of the peer's endpoint dst_ep, as its inbox
     * header says it (life_at), as our waiting operations knew it (dst_life),
     * and as the last ULN_MSG_LIFE mark we wrote in each ring (out_life). */
    _Atomic uint32_t *life_at;
    uint32_t dst_life, out_life[2];
    bool in_stale[2];     /* messages in our ring from it belong to an earlier life of ours */
    bool announced[2];    /* our bit is set in act_map[ch] */
    uint32_t direct_ops;  /* direct PUT/GETs to this peer: every 1024th checks it lives */
    bool streaming;       /* the direct PUT/GET under way streams (shm.c, copy.h) */
    uint32_t gets_out;    /* our ring-path GETs and atomics the peer has not finished: each
                             request sits in its request ring until served (engine.c:
                             get_credit) */
    uint32_t atomics_out; /* ... of them atomics: while any is out, later ones take the
                             ring path too, so one endpoint's are applied in order */
    /* The last region reached directly (ep.c: the fast path). */
    struct uln_rkey_win win;
    /* Ring-path target side. */
    struct uln_refused_put refused; /* a PUT already answered with an error */
    struct uln_msg *get_req;        /* GET or atomic request being served (in the ring) */
    uint64_t get_sent;              /* bytes of it answered so far */
    struct uln_ack *acks;           /* answers waiting for room on channel 0 */
    uint32_t life;                  /* the peer's lives we have seen end (uln_engine_forget_peer) */
    uint32_t ack_head, ack_tail, ack_cap;
};

struct uln_ep {
    struct uln_ctx *ctx;
    int index;
    uint32_t life;              /* of the index: lives before this one (struct uln_ep_slot) */
    bool closed;                /* its queues are freed; calls on it return -EBADF */
    struct uln_ep *next_closed; /* in ctx->closed_eps */
    struct uln_cq *send_cq, *recv_cq;
    struct uln_sqe *sq;
    uint32_t sq_depth;
    /* uln_napv, uln_putv, uln_getv: a queued op's segments, ULN_IOV_MAX per
     * send-queue slot (made at the first one). */
    struct iovec *sq_iov;
    uint64_t sq_head;  /* oldest entry not yet retired */
    uint64_t sq_issue; /* oldest entry not yet fully issued */
    uint64_t sq_tail;  /* next free entry; op_id of an entry = its position */
    struct uln_ep_peer *peers;
    unsigned rr_peer;
    uint32_t peers_gen; /* ctx->peers_gen when act_list was built */
    /* Peers that have used our rings, per channel (from the active bitmaps). */
    _Atomic uint64_t *act_map[2]; /* the bitmaps, in our inbox */
    uint64_t *act_seen[2];        /* their words as last seen */
    _Atomic uint32_t *act_gen;    /* our inbox's: bumped when a bit is set */
    uint32_t act_gen_seen[2];     /* its value at the last look, per channel */
    size_t act_words;
    int *act_list[2];
    int n_act[2];
    uint32_t stalled; /* passes in which queued work did not move */
    uint64_t taken;   /* messages taken from our rings, GET pieces served: a
                         rank idle in uln_barrier watches it (progress.c) */
    bool blocked;     /* this pass found a peer's ring full */
    /* Flushes take no send-queue entry (so a full queue never refuses one):
     * each is a marker naming the queue position it waits for, completed
     * when sq_head reaches it (engine.c: uln_engine_retire). A ring that
     * doubles when full: flushes posted while others wait chain behind them. */
    struct uln_flush_mark *fl;
    uint32_t fl_cap;
    uint64_t fl_head, fl_tail;
    struct uln_stats stats;
    void *tp_ep[ULN_TP_MAX]; /* each transport's endpoint state (transport.h) */
    const struct uln_transport_ops *tp_prog[ULN_TP_MAX]; /* those that progress */
    int n_tp_prog;
    /* Bit ops->id: the transport has nothing to do (transport.h, "quiet").
     * When all of tp_prog are (tp_quiet == tp_prog_ids), their hooks run on
     * one pass in ULN_QUIET_PASSES (engine.c). */
    uint32_t tp_quiet, tp_prog_ids;
    uint32_t passes; /* progress passes with every transport quiet */
};

/* A transport has nothing to do on ep, or has again (transport.h, "quiet").
 * Plain stores: the endpoint's thread is the only one that runs its
 * progress and its transports' hooks (the thread rule). */
static inline void uln_tp_quiet(struct uln_ep *ep, const struct uln_transport_ops *tp)
{
    ep->tp_quiet |= 1u << tp->id;
}

static inline void uln_tp_busy(struct uln_ep *ep, const struct uln_transport_ops *tp)
{
    ep->tp_quiet &= ~(1u << tp->id);
}

/* Does ULN_TRANSPORT name tp (so that it carries every peer it reaches)?
 * No: auto, or another one. */
static inline bool uln_tp_named(const struct uln_ctx *ctx, const struct uln_transport_ops *tp)
{
    return tp && ctx->p.transport == (int)tp->id;
}

/* ULN_TRANSPORT=auto: the library chooses (every transport open where it may
 * be needed, and links by their cost). */
static inline bool uln_tp_auto(const struct uln_ctx *ctx)
{
    return ctx->p.transport < 0;
}

struct uln_cq {
    struct uln_ctx *ctx;
    bool closed; /* its ring is freed; calls on it return -EBADF */
    struct uln_cq *next;
    struct uln_cqe *ring;
    uint32_t entries;
    uint64_t head, tail;
    struct uln_ep *eps[64]; /* endpoints whose progress this CQ drives */
    unsigned n_eps, rr;
    unsigned ready_polls;   /* polls that took every entry waiting (cq.c) */
    unsigned backlog_polls; /* polls that left entries waiting (cq.c) */
    int efd;                /* uln_cq_fd's epoll set, -1 until asked for */
    int tfd;                /* ... and the timer in it (uln_cq_arm) */
    bool armed;             /* uln_cq_arm announced a sleep: the next call ends it */
    int efd_fds[66];        /* what the set holds: doorbell, timer, the endpoints' sockets */
    int n_efd_fds;
    _Atomic int woken; /* uln_cq_wake: the next (or current) uln_cq_wait returns -EINTR */
};

/* ---- functions shared between files -------------------------------------- */

/* The segments of queued op s (s->gather): its slot's part of ep->sq_iov. */
static inline struct iovec *uln_sqe_iov(const struct uln_ep *ep, const struct uln_sqe *s)
{
    return &ep->sq_iov[(size_t)(s - ep->sq) * ULN_IOV_MAX];
}

/* The local side of PUT or GET s as a segment list: its segments (uln_putv,
 * uln_getv), or its one buffer in *one. Returns the count. */
static inline int uln_sqe_local(const struct uln_ep *ep, const struct uln_sqe *s, struct iovec *one,
                                const struct iovec **iov)
{
    if (s->gather) {
        *iov = uln_sqe_iov(ep, s);
        return s->niov;
    }
    *one = (struct iovec){s->op == ULN_OP_PUT ? (void *)(uintptr_t)s->src : s->dst, s->len};
    *iov = one;
    return 1;
}

/* ULN_PROGRESS=thread: the progress thread and the application's calls take
 * turns on the context's big lock. Without the thread this is one predictable
 * branch: the thread rule (one thread drives an endpoint and its CQs) makes
 * the lock unnecessary. progress_on is set before uln_open returns and cleared
 * after the thread is joined, so reading it needs no ordering. */
static inline void uln_api_lock(struct uln_ctx *ctx)
{
    if (ULN_UNLIKELY(ctx->progress_on)) pthread_mutex_lock(&ctx->big_lock);
}

/* Bumped in the child of every fork() (ctx.c, pthread_atfork). A context the
 * parent opened is the parent's: the child shares its rings, sockets and
 * mapped memory, so any use from the child would corrupt the parent's state
 * (two producers on one ring). Written only while the child is still
 * single-threaded, before it returns from fork. */
extern unsigned uln_fork_gen;

/* Was ctx opened by another process, the parent of this fork()ed one? Every
 * entry point refuses such a context with -EPERM. */
static inline bool uln_ctx_forked(const struct uln_ctx *ctx)
{
    return ULN_UNLIKELY(ctx->fork_gen != uln_fork_gen);
}

/* An entry point's gate: -EPERM in a forked child, else the big lock (if the
 * progress thread runs). Two loads and one predictable branch otherwise. */
static inline int uln_api_enter(struct uln_ctx *ctx)
{
    if (uln_ctx_forked(ctx)) return -EPERM;
    uln_api_lock(ctx);
    return 0;
}
static inline void uln_api_unlock(struct uln_ctx *ctx)
{
    if (ULN_UNLIKELY(ctx->progress_on)) pthread_mutex_unlock(&ctx->big_lock);
}

/* params.c: the environment variables ulnet reads (ulninfo prints them).
 * The settings table (struct uln_setting, uln_settings): core/diag.h. */

/* ep.c: uln_close frees the structs that closed endpoints kept. */
void uln_ep_free_closed(struct uln_ctx *ctx);
/* ep.c: the closing endpoint gives back everything in its ring from src on
 * channel ch up to position upto (a packet transport: where it fed the ring
 * for that peer), counting the messages nobody took as refused_stale_ep. */
void uln_ep_ring_drop(struct uln_ep *ep, int src, int ch, uint64_t upto);

/* progress.c */
int uln_progress_start(struct uln_ctx *ctx);
void uln_progress_stop(struct uln_ctx *ctx);
/* While a rank blocks in ulnet outside its CQs (uln_barrier): one pass over
 * every endpoint, unless the progress thread does that anyway. */
void uln_progress_idle(struct uln_ctx *ctx);
/* How long to wait before the next idle pass: 1 ms while passes find work
 * (or work is pending), doubling while they find none up to a cap that
 * grows with the job (32 ms, up to 256 ms at 2048 ranks and more), so
 * thousands of ranks waiting in a barrier do not wake 1000 times a second
 * each and starve the few that still work. */
int uln_progress_idle_ms(const struct uln_ctx *ctx);
/* Milliseconds to wait before the next idle pass, bounded by deadline_ms
 * (CLOCK_MONOTONIC ms; INT64_MAX: none). */
int uln_progress_slice(int64_t deadline_ms);

/* cq.c */
static inline uint32_t uln_cq_room(const struct uln_cq *cq)
{
    return cq->entries - (uint32_t)(cq->tail - cq->head);
}
static inline struct uln_cqe *uln_cq_push(struct uln_cq *cq)
{
    return &cq->ring[cq->tail++ % cq->entries];
}
/* The completion of one of our operations (the caller made sure of room). */
static inline void uln_cq_complete(struct uln_cq *cq, int ep_index, uint8_t op, int peer,
                                   uint64_t len, uint64_t user_data, int status)
{
    *uln_cq_push(cq) = (struct uln_cqe){.user_data = user_data,
                                        .status = status,
                                        .op = op,
                                        .ep = (uint16_t)ep_index,
                                        .peer = peer,
                                        .len = status ? 0 : len};
}
void uln_cq_unbind(struct uln_cq *cq, struct uln_ep *ep);
/* The i-th entry waiting in cq (0: the one uln_cq_poll takes next), copied
 * and left there: 1, or 0 when fewer wait, -EBADF on a closed cq. No progress
 * pass. For a call that takes only completions of its own (allgather.c). */
int uln_cq_peek(struct uln_cq *cq, uint64_t i, struct uln_cqe *out);
void uln_cq_close_all(struct uln_ctx *ctx);

/* engine.c */
void uln_engine_progress(struct uln_ep *ep);
void uln_engine_issue(struct uln_ep *ep, uint32_t budget);
void uln_engine_retire(struct uln_ep *ep);
int uln_engine_nap_now(struct uln_ep *ep, int peer, const void *buf, uint32_t len);
int uln_engine_napv_now(struct uln_ep *ep, int peer, const struct iovec *iov, int n, uint32_t len);
int uln_engine_rdma_now(struct uln_ep *ep, bool write, int peer, const struct iovec *local,
                        int nlocal, uint64_t len, uint64_t rkey, uint64_t roff);
bool uln_engine_busy(const struct uln_ep *ep); /* work that waits on a peer */
/* Operations posted on ep whose completions have not yet been made: queued
 * or in flight (sq_head..sq_tail), flushes waiting (fl_head..fl_tail). */
static inline bool uln_ep_outstanding(const struct uln_ep *ep)
{
    return ep->sq_head != ep->sq_tail || ep->fl_head != ep->fl_tail;
}
void uln_engine_fail_peer(struct uln_ep *ep, int peer, int status);
/* The peer's life ended (a packet transport saw its next one, or its death):
 * drop what we owe that life - queued ACKs, the GET or atomic being served,
 * the requests in our ring, PUT_DONEs not yet answered - so that no answer of
 * ours completes an operation of the next life that reuses its op id. */
void uln_engine_forget_peer(struct uln_ep *ep, int peer);
void uln_engine_release(struct uln_ep *ep, int src, struct uln_ring_cons *c, struct uln_msg *m);

/* atomic.c */
/* Is (op, width) an atomic ulnet knows? In line: every post asks. */
static inline bool uln_atomic_valid(unsigned op, unsigned width)
{
    return op >= ULN_ATOMIC_ADD && op <= ULN_ATOMIC_SMAX && (width == 4 || width == 8);
}
/* Apply r's op to the word (naturally aligned, width r->width): the value
 * before it. */
uint64_t uln_atomic_apply(void *word, const struct uln_atomic_req *r);
/* Target side: check r against our own key table, apply it, answer in *out.
 * Counts refusals and what it served. */
void uln_atomic_serve(struct uln_ep *ep, const struct uln_atomic_req *r,
                      struct uln_atomic_resp *out);
/* Initiator side: the old value into the result buffer (in line: the
 * window's fetch-add writes it on every op). */
static inline void uln_atomic_result(void *result, unsigned width, uint64_t old)
{
    if (!result) return;
    if (width == 4) {
        uint32_t v = (uint32_t)old;
        memcpy(result, &v, 4); /* the caller's buffer need not be aligned */
    } else {
        memcpy(result, &old, 8);
    }
}
/* engine.c */
int uln_engine_atomic_now(struct uln_ep *ep, int peer, const struct uln_atomic_req *r,
                          void *result);

/* mr.c */
void uln_mr_close_all(struct uln_ctx *ctx);
int uln_mem_lookup(struct uln_ctx *ctx, const void *addr, size_t len, int *fd, uint64_t *off,
                   uint64_t *fd_len);
/* Own table, target side: hold the hazard slot while checking and copying. */
int uln_key_enter(struct uln_ctx *ctx, int ep_index, uint64_t key, uint64_t off, uint64_t len,
                  unsigned need, uint8_t **where, struct uln_stats *st);
void uln_key_leave(struct uln_ctx *ctx, int ep_index);

/* engine.c: the endpoint's transports, all of them */
bool uln_ep_busy(struct uln_ep *ep); /* work that waits on a peer, ours or a transport's */
int uln_ep_wait_fds(struct uln_ep *ep, int *fds, int max, int *timeout_ms);

#ifdef ULN_TEST_HOOKS
#include "rel/rel.h"
/* src/transport/udp/hooks.c, for tests and fuzzing only (the library never calls them; built only
 * with ULN_TEST_HOOKS): crafted bytes through the real receive path, crafted
 * packets from a rank's real socket. */
struct uln_udp_conn {
    int state; /* enum uln_rel_state */
    bool dead;
    uint32_t local_epoch, peer_epoch;
    uint32_t tag_in;   /* the tag the peer's data packets to us must carry */
    uint32_t tag_out;  /* ... ours to it */
    uint32_t rcv_next; /* the next seq from the peer in order */
    uint32_t snd_una, snd_nxt;
    uint32_t snd_edge; /* the peer takes our seqs before this: its credit */
    uint32_t rx_limit; /* the share of our receive pool it may fill (pool_share) */
    uint32_t rcv_edge; /* it may send seqs before this: the credit we gave it */
    /* rel's counters for this peer: how each lost packet was found (tx_fast,
     * tx_pto, tx_timeout), what held the sender back (blk_*), ... */
    struct uln_rel_stats rel;
};
/* Run one datagram through the receive path as if the endpoint's socket had
 * received it from rank (a rank not reached over UDP, or -1: from an address
 * that is not a member). 0, or -errno if it could not be lent a buffer. */
int uln_udp_rx_inject(struct uln_ep *ep, int rank, const void *buf, size_t len);
/* The connection with rank as it stands: -ENOENT before any contact. */
int uln_udp_conn_get(struct uln_ep *ep, int rank, struct uln_udp_conn *c);
/* The counters of the link under ep (link.h: what each path carried). */
struct uln_link_stats;
int uln_udp_link_stats(struct uln_ep *ep, struct uln_link_stats *st);
/* Start a new life of ours towards rank (epoch 0: a random one), as the
 * protocol's reconnect does: what was in flight is void, ops fail with
 * -ECONNRESET, the peer sees a restart. */
int uln_udp_peer_restart(struct uln_ep *ep, int rank, uint32_t epoch);
/* How long after a post an endpoint holds its answers for the next one
 * (ulnet.h, "When packets leave"); 0: the library's own 200 us. Process-wide. */
void uln_udp_test_answer_hold(uint64_t ns);
/* The UDP address of rank's endpoint of this index (our own: where it is
 * bound). */
int uln_udp_ep_addr(struct uln_ep *ep, int rank, struct sockaddr_storage *ss, socklen_t *len);
/* Send buf as one datagram from the endpoint's socket to rank's, outside the
 * sequence space (no seq, tag or feedback is filled in). */
int uln_udp_send_raw(struct uln_ep *ep, int rank, const void *buf, size_t len);
/* Send buf (a whole packet: header, extension, payload) as the next data
 * packet of the stream to rank: seq, tag, rel's flags and feedback are filled
 * in, the rest is sent as given, and resent until acknowledged. */
int uln_udp_send_seq(struct uln_ep *ep, int rank, const void *buf, size_t len);
#endif
bool uln_engine_op_open(struct uln_ep *ep, uint64_t op_id);
/* For a transport whose operations complete later (transport.h): operation
 * op_id (an op of kind op, posted on ep to peer and handed to the transport)
 * is over with status (0, or -errno), and its buffers are the user's again;
 * its completion goes to the CQ as the engine retires it, in order. False
 * when no such operation waits: an answer from another peer, of another
 * kind, or twice - ignored (the engine's ring path counts a wrong peer
 * malformed). The engine's own ACKs come this way. From ep's progress. */
bool uln_engine_complete(struct uln_ep *ep, int peer, uint64_t op_id, uint8_t op, int32_t status);
void uln_engine_get_data(struct uln_ep *ep, int src, uint64_t op_id, uint64_t op_offset,
                         int32_t status, const void *data, uint64_t n);

/* peer.c */
int uln_peers_open(struct uln_ctx *ctx); /* a job's records; after transports choose */
void uln_peers_close(struct uln_ctx *ctx);
/* Our number as the peer's packets name us: our rank, or our key's low bits. */
static inline int32_t uln_self_ident(const struct uln_ctx *ctx)
{
    return ctx->no_job ? (int32_t)(uint32_t)ctx->job_key : ctx->rank;
}
/* ... and the peer's, as its packets must say it. */
static inline int32_t uln_peer_ident(const struct uln_ctx *ctx, int peer)
{
    const struct uln_peer_rec *r = &ctx->peer_recs[peer];
    return ctx->no_job ? (int32_t)(uint32_t)r->key : r->rank;
}
static inline bool uln_peer_is_live(const struct uln_ctx *ctx, int peer)
{
    return atomic_load_explicit(&ctx->peer_live[peer / 64], memory_order_relaxed) >> (peer % 64) &
           1;
}
/* A peer that reached us before we inserted it: learn it from the address
 * it left in its claim of our inbox slot (shm), or sent with its hello
 * (udp); it gets the id uln_peer_insert will give. 0 / the id, or -errno. */
int uln_peer_learn_slot(struct uln_ctx *ctx, int slot);
int uln_peer_learn_addr(struct uln_ctx *ctx, const void *addr, size_t len, int ep_index);
/* Is peer this very context (a job: our rank; else our key)? */
static inline bool uln_peer_is_self(const struct uln_ctx *ctx, int peer)
{
    return ctx->no_job ? ctx->peer_recs[peer].key == ctx->job_key : peer == ctx->rank;
}

/* boot.c */
int uln_boot_init(struct uln_ctx *ctx, const struct uln_config *cfg);
int uln_boot_publish(struct uln_ctx *ctx, const void *addr, size_t len);
int uln_boot_wait_all(struct uln_ctx *ctx, int timeout_ms);
const void *uln_boot_peer(struct uln_ctx *ctx, int peer, int32_t *pid);
void uln_boot_fini(struct uln_ctx *ctx);

#endif
