/*
 * priv.h - the UDP transport's private header: its state, and the functions
 * its files share. The files: proto.h (the wire format), ctx.c (a context's
 * sockets and addresses), ep.c, peer.c, send.c, recv.c, bundle.c, timer.c,
 * hooks.c (tests only), ops.c (the transport's ops).
 *
 * The UDP transport: the engine's messages as datagrams between hosts,
 * made reliable and ordered by the rel state machine (src/rel), moved by the
 * link under it (link.h). docs/protocol.md has the wire format.
 *
 * Each endpoint index has its own UDP socket, on port base + index of the
 * rank's published address, so endpoints driven by different threads share
 * nothing. Per (endpoint, peer) there is one rel machine: one sequence space
 * for everything the endpoint sends that peer.
 *
 * Sending. The engine writes small messages (ACK, GET request, atomics) into
 * a send slot of ours (uln_udp_reserve/commit), where they stay until the
 * peer acknowledges them, for retransmission. NAPs are copied into slots too
 * (so a NAP completes at once, as over shm). PUT fragments are sent straight
 * from the user's buffer (iovec, no copy): the PUT completes only when the
 * target acknowledges it, so that memory stays valid for any resend. GET
 * data is served by this transport itself (uln_udp_serve_get): small answers
 * copied into slots, large ones straight from the region under its key.
 *
 * Receiving. PUT fragments and GET data are placed where their header says the
 * moment they arrive, in any order - no reassembly copy. Everything whose
 * order matters (NAPs, ACKs, GET requests, and a PUT's "all placed" point) is
 * handed to the engine in sequence order by writing ring messages into our own
 * inbox rings for that peer (uln_inbox_feed), the same rings a peer on this
 * host would write.
 * From there the engine's ring code takes over unchanged: NAP completions
 * point into the ring until uln_cqe_release, and a full ring holds delivery
 * back, which shrinks the credit we advertise (STOP) instead of dropping.
 */
#ifndef ULN_TRANSPORT_UDP_PRIV_H
#define ULN_TRANSPORT_UDP_PRIV_H

#include "core/internal.h"
#include "transport/transports.h"
#include "rel/rel.h"
#include "link/udp/link_udp.h"
#include "transport/udp/ctx.h"
#include "transport/udp/proto.h"

/* ---- state ------------------------------------------------------------------- */

struct tx_slot {
    struct pkt_hdr h; /* the message's own fields; rel's are filled at each send */
    uint8_t ext[EXT_MAX];
    uint8_t ext_len;
    bool used;
    bool user;   /* data is the user's PUT buffer (op_id names the PUT) */
    bool region; /* GET data sent from our region (uln_udp_serve_get): data is
                    valid only while the key is held; a resend copies it */
    uint64_t op_id;
    const uint8_t *data; /* our slot memory, or the user's PUT buffer */
    uint32_t len;
    uint32_t len2;        /* a PUT fragment over two of uln_putv's segments: */
    const uint8_t *data2; /* ... the second piece, after data */
    uint32_t buf1;        /* 1 + the tx_mem buffer the slot holds (uln_udp_slot_mem); 0: none */
    uint64_t rkey, roff;  /* with region: where the data is, for a resend */
};

struct rx_slot {
    struct pkt_hdr h;
    uint8_t ext[EXT_MAX];
    int32_t status;  /* PUT: result of placing it */
    bool held;       /* a pool buffer is kept until delivery */
    bool rel_held;   /* rel counts a receive buffer for it */
    uint32_t handle; /* with held */
    uint32_t share;  /* with held: 1 + the share (a bundle's buffer) it counts in; 0: none */
    const uint8_t *payload;
    uint32_t len;
};

struct uln_udp_peer {
    int rank, io_id;
    bool dead, listed;
    struct uln_rel rel;
    uint32_t mask;
    struct tx_slot *tx;
    /* Buffers for messages we may have to send again, one stride each, as
     * many as slots. A slot takes one only when its packet's bytes are ours
     * to keep (not a PUT's user buffer), from a LIFO stack: the pages touched
     * are the most ever held at once - what the congestion window asked of
     * this peer - not the window of slots the sequence numbers go round. */
    uint8_t *tx_mem;
    uint32_t *tx_free, n_free;
    struct rx_slot *rx;
    uint32_t pend_seq, pend_n;  /* in order from rel, not yet handed to the engine */
    struct uln_inbox_feed feed; /* in-order messages to the engine, through our inbox */
    uint8_t *nap_dst;           /* a NAP of several packets being assembled in the ring */
    uint32_t nap_total, nap_got;
    struct uln_refused_put refused_seen; /* the PUT last refused on arrival */
    struct uln_refused_put refused_sent; /* ... whose refusal was handed on */
    uint64_t rx_last;                    /* when its last new data packet came */
    bool rx_active;                      /* it sends to us: it has a share of the pool */
};

struct uln_udp_ep {
    struct uln_link *io;
    unsigned payload_max, stride;
    uint32_t window;    /* rel window for each peer */
    uint64_t rng;       /* epochs of new peer lives: per endpoint, so threads share nothing */
    unsigned pool_bufs; /* the io's receive pool, shared by all peers */
    unsigned held;      /* pool buffers we hold for packets waiting for their turn */
    unsigned n_active;  /* peers sending to us lately: they share the pool (uln_udp_pool_share) */
    int *rank_of_id, *id_of_rank;
    int *live; /* ranks with peer state, for timers */
    int n_live;
    uint64_t now;
    uint64_t rx_quiet_next; /* no peer met: the socket's next read (progress_rx) */
    uint8_t
        hello[1 + ULN_ADDR_MAX]; /* no job: our endpoint index and address (uln_udp_send_ctrl) */
    uint32_t hello_len;
    uint64_t posted_at; /* when a post last queued a packet: answers may wait for the next */
    unsigned nbatch;
    bool batch_data;     /* the batch holds more than answers (engine ACKs, feedback) */
    bool answers_held;   /* ... and the last pass left them there (hold_answers) */
    bool kick_now;       /* the packet just committed went to an idle peer (uln_udp_kick) */
    bool solo;           /* no job: the link may connect to a lone peer (uln_udp_solo_check) */
    bool solo_open;      /* ... and is not now: a quiet spell, or a sleep (uln_udp_solo_open) */
    uint64_t rx_any;     /* the now of the last read that brought datagrams */
    bool in_pass;        /* inside a progress pass (progress_rx to progress_tx) */
    bool now_read;       /* ... and now was read in it: fresh (pass_clock) */
    uint64_t timers_now; /* the now progress_tx's timers last ran with (idle_pass) */
    uint64_t timers_tsc; /* ... uln_tsc() when it was read */
    int timers_live;     /* ... and n_live then */
    struct uln_link_pkt batch[ULN_LINK_BATCH];
    bool batch_region[ULN_LINK_BATCH];   /* its data is in a region under a key held now */
    int8_t batch_bundle[ULN_LINK_BATCH]; /* the bundle buffer it is in; -1: none */
    uint8_t scratch[ULN_LINK_BATCH][ROW_SPACE];
    uint8_t *bundle_mem; /* BUNDLE_BUFS x BUNDLE_MAX */
    uint8_t bundle_free[BUNDLE_BUFS];
    unsigned n_bundle_free;
    struct uln_link_rx rxv[ULN_LINK_BATCH];
    /* A received bundle's buffer is shared by those of its packets that wait
     * for their turn: released to the link when the last of them goes. */
    struct rx_share {
        uint32_t handle, refs;
    } * shares;
    uint32_t *share_free;
    unsigned n_share_free;
};

static inline struct uln_udp_ep *udp_ep(const struct uln_ep *ep)
{
    return ep->tp_ep[ULN_TPID_UDP];
}

/* Our state for rank, if UDP carries it and we have met it. */
static inline struct uln_udp_peer *udp_peer(const struct uln_ep *ep, int rank)
{
    const struct uln_ep_peer *pp = &ep->peers[rank];
    return pp->tp == &uln_tp_udp ? pp->tp_peer : NULL;
}

static inline bool udp_remote(const struct uln_ctx *ctx, int peer)
{
    const struct uln_udp *u = udp_of(ctx);
    return u && u->remote && u->remote[peer] == UDP_REMOTE && ctx->peer_tp &&
           ctx->peer_tp[peer] == &uln_tp_udp;
}

/* A progress pass reads the clock where it first needs the time (a read
 * that brought datagrams, a batch sent, a packet reserved) and not at all
 * when it finds nothing to do: progress_tx reads it for the timers only
 * when the last read is older than a few microseconds (idle_pass). A read
 * costs ~25 ns in this VM, a tenth of the empty recvfrom the pass is mostly
 * made of. progress_tx takes the pass's time as it is when the pass read
 * it: at most the pass's own work old
 * (the engine serves and issues a chunk between rx and tx, ~20 us at worst),
 * well inside the timers' resolution (ack_delay 50 us, rto at least 200 us),
 * and the stamps of what it sends (resends, feedback) give no RTT sample. */
static inline void pass_clock(struct uln_udp_ep *ue)
{
    ue->now = uln_now_ns();
    ue->now_read = true;
}

/* bundle.c (bundles: datagrams of small packets; shares of received buffers) */
int uln_udp_bundles_init(struct uln_udp_ep *ue);
uint32_t uln_udp_share_open(struct uln_udp_ep *ue, uint32_t handle);
void uln_udp_share_put(struct uln_udp_ep *ue, uint32_t sh);
void uln_udp_rx_release(struct uln_udp_ep *ue, struct rx_slot *s);
void uln_udp_batch_move(struct uln_udp_ep *ue, unsigned to, unsigned from);
void uln_udp_bundle_answers(struct uln_udp_ep *ue);
void uln_udp_bundle_small(struct uln_udp_ep *ue);
void uln_udp_bundles_sent(struct uln_udp_ep *ue, unsigned n);

/* ep.c (an endpoint's life and its link's peer table) */
void uln_udp_dst_sockaddr(const struct uln_ep *ep, int peer, struct sockaddr_storage *ss,
                          socklen_t *len);
int uln_udp_link_peer(struct uln_ep *ep, int peer);
int uln_udp_link_peer_of(struct uln_ep *ep, const struct uln_link_rx *rx);
int uln_udp_link_peer_hello(struct uln_ep *ep, const struct uln_link_rx *rx,
                            const struct pkt_hdr *h);
int uln_udp_ctrl_sender(struct uln_ep *ep, int32_t io_peer, int r, const struct uln_link_rx *rx,
                        const struct pkt_hdr *h, const struct pkt_ctrl_body *b);
int uln_udp_ep_open(struct uln_ep *ep);
void uln_udp_solo_end(struct uln_ep *ep);
void uln_udp_solo_open(struct uln_ep *ep);
void uln_udp_solo_back(struct uln_ep *ep);
void uln_udp_ep_close(struct uln_ep *ep);

/* peer.c (a peer's life: its rel machine and slots, death, a later life) */
void uln_udp_rel_cfg(const struct uln_ep *ep, struct uln_rel_cfg *cfg);
uint32_t uln_udp_new_epoch(struct uln_udp_ep *ue);
struct uln_udp_peer *uln_udp_peer_make(struct uln_ep *ep, int rank);
int uln_udp_attach(struct uln_ep *ep, int peer);
bool uln_udp_peer_dead(struct uln_ctx *ctx, struct uln_ep *ep, int peer);
void uln_udp_peer_watch(struct uln_ep *ep, int peer);
uint32_t uln_udp_frag_max(struct uln_ep *ep, int peer);
void uln_udp_void_peer(struct uln_ep *ep, struct uln_udp_peer *up, int status);
void uln_udp_go_dead(struct uln_ep *ep, struct uln_udp_peer *up);

/* send.c (sending: the batch, send slots, NAP, PUT, GET answers) */
void uln_udp_flush(struct uln_ep *ep);
void uln_udp_send_ctrl(struct uln_ep *ep, struct uln_udp_peer *up, const struct uln_rel_pkt *p);
void uln_udp_send_data(struct uln_ep *ep, struct uln_udp_peer *up, struct tx_slot *t,
                       const struct uln_rel_pkt *p);
struct tx_slot *uln_udp_assign(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t bytes,
                               struct uln_rel_pkt *p);
uint8_t *uln_udp_slot_mem(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq);
bool uln_udp_can_send(struct uln_ep *ep, struct uln_udp_peer *up, unsigned n);
void *uln_udp_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len);
void uln_udp_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags, uint32_t len);
bool uln_udp_nap(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint32_t len);
bool uln_udp_put(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget);
bool uln_udp_serve_get(struct uln_ep *ep, int peer, const struct uln_get_req *r, uint64_t *sent,
                       uint32_t *budget);

/* recv.c (receiving: placing, delivering in order, the shared pool) */
void uln_udp_drop_held(struct uln_ep *ep, struct uln_udp_peer *up);
bool uln_udp_rx_datagram(struct uln_ep *ep, const struct uln_link_rx *rx);
uint32_t uln_udp_pool_share(const struct uln_udp_ep *ue, unsigned senders);
void uln_udp_pool_reshare(struct uln_ep *ep);
void uln_udp_sender_seen(struct uln_ep *ep, struct uln_udp_peer *up);
bool uln_udp_sender_quiet(struct uln_udp_ep *ue, struct uln_udp_peer *up);
void uln_udp_progress_rx(struct uln_ep *ep);

/* timer.c (timers, resends, feedback; what a wait sleeps on) */
void uln_udp_progress_tx(struct uln_ep *ep);
bool uln_udp_busy(const struct uln_ep *ep);
int uln_udp_poll_setup(struct uln_ep *ep, int *fds, int max, int *timeout_ms);

/* With no job, the socket is connected while the context knows one remote
 * peer (uln_udp_ep_open): a second one, inserted by another thread, ends
 * that at this endpoint's next pass. */
static inline void uln_udp_solo_check(struct uln_ep *ep, struct uln_udp_ep *ue)
{
    if (ULN_UNLIKELY(ue->solo) &&
        atomic_load_explicit(&udp_of(ep->ctx)->n_remote, memory_order_relaxed) > 1)
        uln_udp_solo_end(ep);
}

/* The state for one peer, made on first contact in either direction. */
static inline struct uln_udp_peer *peer_get(struct uln_ep *ep, int rank)
{
    struct uln_udp_peer *up = udp_peer(ep, rank);
    return ULN_LIKELY(up != NULL) ? up : uln_udp_peer_make(ep, rank);
}

/* A slot is free again, and its buffer (if it took one) with it. */
static inline void tx_slot_clear(struct uln_udp_peer *up, struct tx_slot *t)
{
    t->used = false;
    t->data = NULL;
    if (t->buf1) up->tx_free[up->n_free++] = t->buf1 - 1;
    t->buf1 = 0;
}

/* Slots the peer has acknowledged are free again. */
static inline void drain_acked(struct uln_udp_peer *up)
{
    uint32_t seq;
    while (uln_rel_tx_next_acked(&up->rel, &seq))
        tx_slot_clear(up, &up->tx[seq & up->mask]);
}

#endif
