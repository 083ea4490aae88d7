/*
 * match.h - the provider's tag-matching engine: posted receives against
 * arriving messages, in order, as fi_tagged(3) and fi_msg(3) ask.
 *
 * A pure module: no I/O, no libfabric objects, no locks. The provider keeps
 * two matchers per endpoint (tagged receives, untagged messages; untagged is
 * the same machinery with tag 0) and calls them under its endpoint lock:
 * nothing in here is thread-safe.
 *
 * Each matcher holds two queues, each in order:
 *   - posted receives, in posting order;
 *   - unexpected messages (arrived before any receive matched), in arrival order.
 * A message matches a receive when ((msg.tag ^ recv.tag) & ~recv.ignore) == 0
 * and, if the matcher does directed receive (FI_DIRECTED_RECV), recv.src is
 * FI_ADDR_UNSPEC or equals msg.src. The FIRST matching entry wins in both
 * directions, which is what MPI's non-overtaking rule rests on. Exact
 * receives and messages are also hashed by (source, tag), so matching them is
 * O(1) with the same result (match.c says how order is kept).
 *
 * Memory: every entry comes from two fixed pools allocated once by
 * ulnfi_match_init (no malloc per message). An entry handed to the provider
 * (a hit) still counts against its pool until the provider frees it, so the
 * pools bound both queued and in-flight work; a full pool is -FI_EAGAIN.
 *
 * Return values: functions return 0 or a positive ULNFI_MATCH_* code, or a
 * negative libfabric error (-FI_EAGAIN, -FI_EINVAL, -FI_ENOMSG, -FI_ENOMEM).
 */
#ifndef ULNFI_MATCH_H
#define ULNFI_MATCH_H

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Largest iov list of one receive: the provider's rx_attr->iov_limit. */
#define ULNFI_MATCH_IOV_MAX 4

/* Hash buckets of each queue (a power of two; tests shrink it to force
 * collisions; one value per binary). Exact receives and messages go to
 * buckets by (source, tag). */
#ifndef ULNFI_MATCH_BUCKETS
#define ULNFI_MATCH_BUCKETS 128
#endif
/* A receive ignoring at most this many tag bits makes them leave the key. */
#define ULNFI_MATCH_LEARN_BITS 4

/* Positive results (errors are negative -FI_* codes). */
enum {
    ULNFI_MATCH_QUEUED = 0, /* post: the receive is (still) posted; no message for it */
    ULNFI_MATCH_FOUND = 1,  /* a receive and a message met: see struct ulnfi_match_hit */
    ULNFI_MATCH_NONE = 0,   /* arrive: no posted receive matches; queue it as unexpected */
};

/* Intrusive doubly linked list node; private to the matcher. */
struct ulnfi_match_link {
    struct ulnfi_match_link *prev, *next;
};

/*
 * A receive. The provider fills the public fields of one on its stack and
 * passes it to ulnfi_match_post, which copies them (iov and desc: the first
 * iov_count entries; the rest need not be set) into a pool entry; every
 * struct ulnfi_match_recv * the matcher hands back is such an entry, valid
 * until the provider gives it to ulnfi_match_recv_free.
 */
struct ulnfi_match_recv {
    /* public, set by the provider before ulnfi_match_post */
    fi_addr_t src;   /* FI_ADDR_UNSPEC: any source (always, without directed receive) */
    uint64_t tag;    /* untagged matcher: 0 */
    uint64_t ignore; /* bits of tag that do not take part in matching */
    void *context;   /* the application's op context; the FI_CLAIM key; fi_cancel's key */
    uint64_t flags;  /* FI_MULTI_RECV, FI_PEEK, FI_CLAIM, FI_DISCARD, FI_COMPLETION, ... */
    struct iovec iov[ULNFI_MATCH_IOV_MAX];
    void *desc[ULNFI_MATCH_IOV_MAX]; /* opaque to the matcher */
    size_t iov_count;                /* 0..ULNFI_MATCH_IOV_MAX */
    void *owner;                     /* opaque slot for the provider (e.g. its endpoint) */
    /* set by the matcher */
    size_t len;       /* sum of iov[].iov_len */
    size_t used;      /* FI_MULTI_RECV: bytes of the buffer already given to messages */
    size_t min_multi; /* FI_MULTI_RECV: min_multi_recv when it was posted */
    uint64_t seq;     /* posting sequence (see the note on hashing in match.c) */
    /* private */
    struct ulnfi_match_link link;  /* in m->posted */
    struct ulnfi_match_link blink; /* in its bucket of m->rbucket, or in m->wild */
    bool exact;                    /* no ignore bit in the key, and a source if directed */
    int state;
};

/*
 * An unexpected message. The provider fills the public fields of one on its
 * stack for ulnfi_match_arrive and, on ULNFI_MATCH_NONE, ulnfi_match_unexp,
 * which copies it into a pool entry, valid until ulnfi_match_msg_free.
 */
struct ulnfi_match_msg {
    /* public, set by the provider */
    fi_addr_t src; /* the sender as the AV knows it */
    uint64_t tag;  /* untagged matcher: 0 */
    uint64_t data; /* remote CQ data, when has_data */
    bool has_data; /* FI_REMOTE_CQ_DATA came with it */
    size_t len;    /* the whole message's length (eager or rendezvous) */
    void *payload; /* opaque: eager bytes the provider copied, or a rendezvous handle */
    void *owner;   /* opaque slot for the provider */
    /* set by the matcher */
    uint64_t seq;  /* arrival sequence */
    void *claimed; /* the FI_PEEK|FI_CLAIM context that claimed it, or NULL */
    /* private */
    struct ulnfi_match_link link;  /* in m->unexp */
    struct ulnfi_match_link blink; /* in its bucket of m->ubucket */
    int state;
};

/*
 * Where a receive and a message met.
 *   recv:  the receive (a pool entry; never NULL on ULNFI_MATCH_FOUND).
 *   msg:   post/pull: the unexpected message (a pool entry); arrive: NULL
 *          (the message is the one the provider passed in).
 *   offset, space: the message's data goes to byte `offset` of the receive's
 *          buffer (the iov list seen as one byte range), which has `space`
 *          bytes for it: 0 and recv->len, except for FI_MULTI_RECV slices.
 *          ulnfi_match_trunc(msg len, space, &olen) gives the bytes to copy.
 *   recv_done: the receive is no longer posted: the provider owns it and
 *          frees it after its completion. For FI_MULTI_RECV this is the slice
 *          that released the buffer: write the FI_MULTI_RECV completion flag.
 *          False only for a FI_MULTI_RECV slice whose buffer stays posted
 *          (then recv stays the matcher's: do not free it).
 *   msg_taken: msg is out of the unexpected queue: the provider owns it,
 *          releases its payload and calls ulnfi_match_msg_free. False for
 *          FI_PEEK (and FI_PEEK|FI_CLAIM): msg stays queued, valid until the
 *          next call that changes this matcher.
 */
struct ulnfi_match_hit {
    struct ulnfi_match_recv *recv;
    struct ulnfi_match_msg *msg;
    size_t offset;
    size_t space;
    bool recv_done;
    bool msg_taken;
};

/* Counters, for the provider's diagnostics. */
struct ulnfi_match_stats {
    uint64_t posted, arrived, unexpected; /* receives posted, messages arrived, queued unexp */
    uint64_t full_recv, full_unexp;       /* -FI_EAGAIN: a pool was empty */
    uint64_t invalid;                     /* -FI_EINVAL: bad flags, iov, double free */
    uint64_t rehash;                      /* bits taken out of the hash key */
};

struct ulnfi_match {
    struct ulnfi_match_link posted; /* list head: receives in posting order */
    struct ulnfi_match_link unexp;  /* list head: messages in arrival order */
    struct ulnfi_match_link wild;   /* posted receives that are not exact, in order */
    struct ulnfi_match_link rbucket[ULNFI_MATCH_BUCKETS]; /* exact receives, in order */
    struct ulnfi_match_link ubucket[ULNFI_MATCH_BUCKETS]; /* messages, in order */
    struct ulnfi_match_recv *recv_pool;                   /* max_recv entries */
    struct ulnfi_match_msg *msg_pool;                     /* max_unexp entries */
    struct ulnfi_match_recv *recv_free; /* free entries, chained through link.next */
    struct ulnfi_match_msg *msg_free;
    size_t max_recv, max_unexp;
    size_t n_posted, n_unexp;   /* entries in each queue */
    size_t min_multi_recv;      /* FI_OPT_MIN_MULTI_RECV for receives posted from now on */
    bool directed;              /* FI_DIRECTED_RECV: a receive's src takes part */
    uint64_t key_mask;          /* tag bits that make the hash key (match.c) */
    uint64_t recv_seq, msg_seq; /* next posting / arrival sequence */
    struct ulnfi_match_stats stats;
};

/*
 * Sets up an empty matcher whose pools hold max_recv receives and max_unexp
 * unexpected messages (each >= 1). directed: the endpoint has FI_DIRECTED_RECV.
 * Returns 0, -FI_EINVAL, or -FI_ENOMEM (the only allocation of the module).
 * The queue heads point at themselves: do not copy or move *m once set up.
 * flags of receives are op flags only: FI_CLAIM shares its bit with the
 * FI_DIRECTED_RECV capability, so never merge capabilities into them.
 */
int ulnfi_match_init(struct ulnfi_match *m, size_t max_recv, size_t max_unexp, bool directed,
                     size_t min_multi_recv);

/* Frees the pools. Drain both queues first (ulnfi_match_recv_pop /
 * ulnfi_match_msg_pop): their payloads and contexts are the provider's. */
void ulnfi_match_fini(struct ulnfi_match *m);

/* FI_OPT_MIN_MULTI_RECV: applies to receives posted after the call. */
void ulnfi_match_set_min_multi_recv(struct ulnfi_match *m, size_t min);

/*
 * A receive is posted (fi_recv*, fi_trecv*; flags already merged with the
 * endpoint's op_flags). r is copied; the copy is hit->recv.
 *   plain / FI_MULTI_RECV: takes the first unexpected message in arrival order
 *       that matches and is not claimed -> ULNFI_MATCH_FOUND (msg_taken).
 *       Otherwise the receive is queued -> ULNFI_MATCH_QUEUED, hit->recv set
 *       (the provider may keep it, e.g. in its fi_context). A FI_MULTI_RECV
 *       receive that found a message is posted too unless recv_done: call
 *       ulnfi_match_pull until it returns ULNFI_MATCH_QUEUED or recv_done.
 *   FI_PEEK: finds the first unclaimed match without taking it ->
 *       ULNFI_MATCH_FOUND with !msg_taken, or -FI_ENOMSG. Never queued.
 *   FI_PEEK|FI_CLAIM: the same, and the message is marked claimed by
 *       r->context: other receives and peeks skip it from now on.
 *   FI_PEEK|FI_DISCARD (with or without FI_CLAIM): finds, takes it
 *       (msg_taken: the provider drops its payload), or -FI_ENOMSG.
 *   FI_CLAIM (no FI_PEEK): takes exactly the message claimed with this
 *       context (tag and source are not looked at) -> FOUND (msg_taken), or
 *       -FI_ENOMSG if none. With FI_DISCARD: the same; the provider drops it.
 * On FOUND or QUEUED hit->recv is a pool entry: the provider frees it when
 * hit->recv_done, after its completion (or after fi_cancel takes it).
 * Errors: -FI_EAGAIN no free receive entry; -FI_EINVAL iov_count too large,
 * FI_DISCARD without FI_PEEK or FI_CLAIM, FI_MULTI_RECV with FI_PEEK/FI_CLAIM.
 */
int ulnfi_match_post(struct ulnfi_match *m, const struct ulnfi_match_recv *r,
                     struct ulnfi_match_hit *hit);

/*
 * ulnfi_match_post in two steps, for a provider that fills the entry in place
 * rather than copying one built on its stack (a receive is posted for every
 * message): ulnfi_match_recv_alloc takes a free entry (NULL when the pool is
 * empty: -FI_EAGAIN), the provider sets its public fields (iov and desc: the
 * first iov_count), and ulnfi_match_post_entry posts it with the same results
 * as ulnfi_match_post. On an error the entry is back in the pool; an entry
 * that did not come from ulnfi_match_recv_alloc (or was posted already: its
 * state field says so) is -FI_EINVAL, nothing done. Every entry taken must be posted: only that
 * gives it back or queues it.
 */
struct ulnfi_match_recv *ulnfi_match_recv_alloc(struct ulnfi_match *m);
int ulnfi_match_post_entry(struct ulnfi_match *m, struct ulnfi_match_recv *e,
                           struct ulnfi_match_hit *hit);

/*
 * For a posted FI_MULTI_RECV receive r (from a hit with !recv_done): takes
 * the next unexpected message that matches it and carves the next slice ->
 * ULNFI_MATCH_FOUND, or ULNFI_MATCH_QUEUED when none (r stays posted).
 * -FI_EINVAL if r is not a posted receive.
 */
int ulnfi_match_pull(struct ulnfi_match *m, struct ulnfi_match_recv *r,
                     struct ulnfi_match_hit *hit);

/*
 * A message arrived (only src, tag and len of msg are read). The first posted
 * receive in posting order that matches -> ULNFI_MATCH_FOUND: hit->recv, with
 * hit->msg NULL. A plain receive is taken out (recv_done). A FI_MULTI_RECV
 * receive gives a slice [offset, offset + space) with space = min(len, room
 * left); the buffer is released (taken out, recv_done) once the room left is
 * below its min_multi (or is 0). No match -> ULNFI_MATCH_NONE: the provider
 * queues the message with ulnfi_match_unexp (it may first copy eager bytes
 * and set payload). Ordering: no receive may be posted between the two calls.
 */
int ulnfi_match_arrive(struct ulnfi_match *m, const struct ulnfi_match_msg *msg,
                       struct ulnfi_match_hit *hit);

/*
 * Appends msg (copied) to the unexpected queue; *out is the entry. -FI_EAGAIN
 * when the pool is full: the message was not queued, and the provider must
 * hold back this and later messages of the matcher (or fail them) so that
 * order is kept.
 */
int ulnfi_match_unexp(struct ulnfi_match *m, const struct ulnfi_match_msg *msg,
                      struct ulnfi_match_msg **out);

/*
 * The AV learnt addresses: every queued message whose src is
 * FI_ADDR_NOTAVAIL (it came from a peer the AV did not hold yet) asks
 * src_of for its address now, and takes it unless that is FI_ADDR_NOTAVAIL
 * still. A receive directed at the new address then matches it, in arrival
 * order with the peer's later messages. Returns how many still have none.
 */
size_t ulnfi_match_resolve(struct ulnfi_match *m,
                           fi_addr_t (*src_of)(const struct ulnfi_match_msg *msg, void *arg),
                           void *arg);

/* The AV forgot src (fi_av_remove): queued messages from it have no
 * address until resolve gives them one. Returns how many. */
size_t ulnfi_match_forget(struct ulnfi_match *m, fi_addr_t src);

/* fi_cancel: takes out the first posted receive whose context is context and
 * returns it (the provider completes it with FI_ECANCELED, then frees it), or
 * NULL if none is posted. */
struct ulnfi_match_recv *ulnfi_match_cancel(struct ulnfi_match *m, void *context);

/* Endpoint close: take out the oldest posted receive / unexpected message
 * (NULL when the queue is empty); loop until NULL. The provider completes the
 * receives with FI_ECANCELED and frees them, and drops the messages' payloads. */
struct ulnfi_match_recv *ulnfi_match_recv_pop(struct ulnfi_match *m);
struct ulnfi_match_msg *ulnfi_match_msg_pop(struct ulnfi_match *m);

/* Give entries the provider owns back to their pool. -FI_EINVAL (counted,
 * nothing done) for an entry that is not the provider's: still queued, free
 * already, or of another matcher. */
int ulnfi_match_recv_free(struct ulnfi_match *m, struct ulnfi_match_recv *r);
int ulnfi_match_msg_free(struct ulnfi_match *m, struct ulnfi_match_msg *msg);

/*
 * Truncation (the provider's decision, computed here): a message of msg_len
 * bytes into space bytes. Returns the bytes to copy; *olen is the overflow
 * (msg_len - space) for FI_ETRUNC, 0 when the message fits.
 */
static inline size_t ulnfi_match_trunc(size_t msg_len, size_t space, size_t *olen)
{
    *olen = msg_len > space ? msg_len - space : 0;
    return msg_len > space ? space : msg_len;
}

/* Does a message (src, tag) match receive r under matcher m's rules? */
static inline bool ulnfi_match_test(const struct ulnfi_match *m, const struct ulnfi_match_recv *r,
                                    fi_addr_t src, uint64_t tag)
{
    if (((tag ^ r->tag) & ~r->ignore) != 0) return false;
    return !m->directed || r->src == FI_ADDR_UNSPEC || r->src == src;
}

#endif
