/*
 * ep.h - endpoints and completion queues: the send queue, what an endpoint
 * knows of each peer, the CQ ring, and the calls of ep.c, engine.c, cq.c and
 * atomic.c.
 */
#ifndef ULN_CORE_EP_H
#define ULN_CORE_EP_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "ulnet.h"
#include "core/base.h"
#include "core/ctx.h"
#include "core/inbox.h"
#include "core/iov.h"
#include "core/ring.h"
#include "core/transport.h"
#include "core/wire.h"

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

/* ep.c: uln_close frees the structs that closed endpoints kept. */
void uln_ep_free_closed(struct uln_ctx *ctx);
/* ep.c: the closing endpoint gives back everything in its ring from src on
 * channel ch up to position upto (a packet transport: where it fed the ring
 * for that peer), counting the messages nobody took as refused_stale_ep. */
void uln_ep_ring_drop(struct uln_ep *ep, int src, int ch, uint64_t upto);

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

/* engine.c: the endpoint's transports, all of them */
bool uln_ep_busy(struct uln_ep *ep); /* work that waits on a peer, ours or a transport's */
int uln_ep_wait_fds(struct uln_ep *ep, int *fds, int max, int *timeout_ms);

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

#endif
