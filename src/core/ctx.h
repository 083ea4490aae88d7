/*
 * ctx.h - the context: what it holds (its settings, the bootstrap's state,
 * its inbox and transports, regions, endpoints, peers), the gate of every
 * entry point, and the calls of ctx.c, peer.c and progress.c.
 */
#ifndef ULN_CORE_CTX_H
#define ULN_CORE_CTX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ulnet.h"
#include "core/base.h"
#include "core/doorbell.h"
#include "core/mr.h"
#include "core/params.h"
#include "core/transport.h"
#include "boot/boot.h"

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

    /* The bootstrap's own state (boot/boot.h): the directory of members'
     * addresses; rank, size, job_key and no_job above and below are its. */
    struct uln_boot boot;

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
    struct uln_svc *svc;        /* transport/svc/attach.c: the host's ulnetd; NULL: none */
    char svc_why[200];          /* attached to it, or why not: one line (uln_diag_service) */
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

#endif
