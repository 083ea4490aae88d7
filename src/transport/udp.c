/*
 * udp.c - the UDP transport: the engine's messages as datagrams between hosts,
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
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "transport/transports.h"
#include "boot/addr.h"
#include "boot/root.h"
#include "rel/rel.h"
#include "transport/link_udp.h"
#include "transport/udp_ctx.h"

/* ---- wire format (docs/protocol.md) -------------------------------------- */

#define PKT_VERSION 2u /* 2: every header says its packet's length */
/* A packet's type is its engine message's (wire.h's table); PUT carries
 * PUT_FRAG's. CTRL is rel's own and never reaches the engine. */
enum {
    PKT_NAP = ULN_MSG_NAP,
    PKT_PUT = ULN_MSG_PUT_FRAG,
    PKT_GET_REQ = ULN_MSG_GET_REQ,
    PKT_GET_RESP = ULN_MSG_GET_RESP,
    PKT_ACK = ULN_MSG_ACK,
    PKT_CTRL = 7,
    PKT_ATOMIC_REQ = ULN_MSG_ATOMIC_REQ,
    PKT_ATOMIC_RESP = ULN_MSG_ATOMIC_RESP,
};
_Static_assert(PKT_NAP == 1 && PKT_PUT == 2 && PKT_GET_REQ == 4 && PKT_GET_RESP == 5 &&
                   PKT_ACK == 6 && PKT_ATOMIC_REQ == 8 && PKT_ATOMIC_RESP == 9,
               "the wire's type numbers (docs/protocol.md)");
/* flags: the low five bits are rel's (ULN_REL_DATA, FB, LOSE, PROBE, RETX) */
#define PKT_LAST 0x20u /* NAP, PUT: last packet of the message */
#define PKT_IMM  0x40u /* PUT with LAST: raise PUT_REMOTE with imm at the target */
/* MORE: another packet follows in the same datagram (a bundle), at len */
#define PKT_MORE 0x80u

/* Every packet starts with these 36 bytes, little-endian. */
struct pkt_hdr {
    uint8_t vt;            /* version << 4 | type */
    uint8_t flags;         /* PKT_* and ULN_REL_* */
    uint16_t credit;       /* piggybacked (ULN_REL_FB): receiver takes seqs before ack + credit */
    uint32_t tag;          /* data: job key and both lives, hashed; ctrl: unused */
    uint32_t seq;          /* data: sequence number; ctrl: the sender's epoch */
    uint32_t ack;          /* with ULN_REL_FB: every seq before it arrived */
    uint64_t key;          /* PUT, GET_REQ, ATOMIC_REQ: region key; NAP: message length;
                              GET_RESP, ACK, ATOMIC_RESP: the initiator's op id; ctrl: the
                              job key */
    uint64_t offset;       /* PUT, GET_REQ, ATOMIC_REQ: offset in the region; NAP, GET_RESP:
                              offset in the message; ACK: status; ATOMIC_RESP: the old
                              value; ctrl: SACK bitmap */
    uint32_t len;          /* this packet's bytes: header, extension, data. Where the
                              next packet of a bundle starts, and where a datagram ends
                              in a GRO run read without the kernel's segment size */
} __attribute__((packed)); /* 36, not 40: a bundle of 8 B NAPs holds 33 of them in
                              a 1500-byte MTU rather than 30. Always copied in and
                              out with memcpy, so alignment never matters. */
_Static_assert(sizeof(struct pkt_hdr) == 36, "the header is 36 bytes");

struct pkt_put_ext { /* PUT: the whole operation, for the all-or-nothing check */
    uint64_t op_id, op_offset, op_len;
    uint64_t imm; /* only with PKT_IMM */
};
struct pkt_get_req_ext {
    uint64_t len, op_id;
};
struct pkt_get_resp_ext {
    int32_t status; /* nonzero: refused, no data */
    uint32_t pad_;
};
struct pkt_atomic_req_ext {
    uint64_t op_id, operand, compare;
    uint8_t op, width; /* enum uln_atomic_op; 4 or 8 */
    uint8_t pad_[6];
};
struct pkt_atomic_resp_ext {
    int32_t status; /* nonzero: refused, the word was not touched */
    uint32_t pad_;
};
struct pkt_ctrl_body { /* hello, feedback, probe */
    uint32_t dst_epoch;
    uint32_t lose;
    uint16_t sack_off, reorder;
    int32_t rank; /* the sender's rank, checked against its address */
};

#define EXT_MAX   32u
#define HDR_SPACE 68u /* header + the largest extension */
/* A batch entry's header room: an ACK that rides in front of the packet
 * (bundle_answers), then the packet's own header and extension. */
#define LEAD_SPACE ((unsigned)sizeof(struct pkt_hdr))
#define ROW_SPACE  (LEAD_SPACE + HDR_SPACE)

_Static_assert(sizeof(struct pkt_put_ext) == 32 && offsetof(struct pkt_put_ext, imm) == 24,
               "PUT's extension as wire.h's table has it");
_Static_assert(sizeof(struct pkt_get_req_ext) == 16 && sizeof(struct pkt_get_resp_ext) == 8,
               "GET's extensions as wire.h's table has them");
_Static_assert(sizeof(struct pkt_atomic_req_ext) == 32 && sizeof(struct pkt_atomic_resp_ext) == 8,
               "the atomics' extensions as wire.h's table has them");

/* The extension a packet of this type and flags carries; -1: no such type. */
static int ext_len(unsigned type, unsigned flags)
{
    if (type == PKT_CTRL) return (int)sizeof(struct pkt_ctrl_body);
    const struct uln_msg_desc *d = uln_msg_packet(type);
    if (!d) return -1;
    return (flags & PKT_IMM) ? d->ext_imm : d->ext;
}

/* Bundles: small packets to one peer, next to each other in a batch, leave
 * in one datagram, each whole with its own header and seq; all but the last
 * carry PKT_MORE, and each header's len says where the next one starts.
 * Per datagram, not per packet, is what a link and both kernels pay (an
 * AF_XDP frame on veth ~3 us). */
#define BUNDLE_PKT_MAX 256u  /* a packet this small may join a bundle (it is copied) */
#define BUNDLE_MAX     2048u /* a bundle's bytes at most (and the link's payload_max) */
#define BUNDLE_BUFS    32u   /* bundles per endpoint at once: a batch of 64 makes 32 */

/* Where the datagram at buf (avail bytes, maybe a GRO run of several) ends,
 * as its headers say: the packets of a bundle, each len long, to the first
 * without PKT_MORE. 0 if they do not say it within avail. The socket link
 * cuts a run read without the kernel's segment size by it (link_udp.h). */
static uint32_t dgram_len(const uint8_t *buf, uint32_t avail)
{
    uint32_t at = 0;
    for (;;) {
        struct pkt_hdr h;
        if (avail - at < sizeof h) return 0;
        memcpy(&h, buf + at, sizeof h);
        if (h.len < sizeof h || h.len > avail - at) return 0;
        at += h.len;
        if (!(h.flags & PKT_MORE)) return at;
    }
}

/* A data packet names its connection in 32 bits: the job key and both lives.
 * A packet of another job, or of an earlier life of either side, fails it. */
static inline uint32_t conn_tag(uint64_t job, uint32_t src_epoch, uint32_t dst_epoch)
{
    return (uint32_t)mix64(job ^ ((uint64_t)src_epoch << 32 | dst_epoch));
}

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
    uint32_t buf1;        /* 1 + the tx_mem buffer the slot holds (slot_mem); 0: none */
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
    unsigned n_active;  /* peers sending to us lately: they share the pool (pool_share) */
    int *rank_of_id, *id_of_rank;
    int *live; /* ranks with peer state, for timers */
    int n_live;
    uint64_t now;
    uint64_t rx_quiet_next;          /* no peer met: the socket's next read (progress_rx) */
    uint8_t hello[1 + ULN_ADDR_MAX]; /* no job: our endpoint index and address (send_ctrl) */
    uint32_t hello_len;
    uint64_t posted_at; /* when a post last queued a packet: answers may wait for the next */
    unsigned nbatch;
    bool batch_data;   /* the batch holds more than answers (engine ACKs, feedback) */
    bool answers_held; /* ... and the last pass left them there (hold_answers) */
    bool kick_now;     /* the packet just committed went to an idle peer (uln_udp_kick) */
    bool in_pass;      /* inside a progress pass (progress_rx to progress_tx) */
    bool now_read;     /* ... and now was read in it: fresh (pass_clock) */
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
    return u && u->remote && u->remote[peer] == UDP_REMOTE;
}

static void uln_udp_progress_rx(struct uln_ep *ep);
static void uln_udp_progress_tx(struct uln_ep *ep);

/* ---- bundles' buffers --------------------------------------------------------- */

/* Sending: BUNDLE_BUFS buffers a batch's bundles are copied into. Receiving:
 * a share per buffer the link may have lent us (its pool, and a batch being
 * read), so that a bundle is never refused for want of one. */
static int bundles_init(struct uln_udp_ep *ue)
{
    unsigned n = ue->pool_bufs + ULN_LINK_BATCH;
    ue->bundle_mem = malloc((size_t)BUNDLE_BUFS * BUNDLE_MAX);
    ue->shares = malloc(n * sizeof *ue->shares);
    ue->share_free = malloc(n * sizeof *ue->share_free);
    if (!ue->bundle_mem || !ue->shares || !ue->share_free) return -ENOMEM;
    for (unsigned i = 0; i < BUNDLE_BUFS; i++)
        ue->bundle_free[ue->n_bundle_free++] = (uint8_t)(BUNDLE_BUFS - 1 - i);
    for (unsigned i = 0; i < n; i++)
        ue->share_free[ue->n_share_free++] = n - 1 - i;
    for (unsigned i = 0; i < ULN_LINK_BATCH; i++)
        ue->batch_bundle[i] = -1;
    return 0;
}

/* A share of the link buffer handle, counted once for the caller; 0 when
 * none is free. */
static uint32_t share_open(struct uln_udp_ep *ue, uint32_t handle)
{
    if (ue->n_share_free == 0) return 0;
    uint32_t i = ue->share_free[--ue->n_share_free];
    ue->shares[i] = (struct rx_share){.handle = handle, .refs = 1};
    return i + 1;
}

static void share_put(struct uln_udp_ep *ue, uint32_t sh)
{
    struct rx_share *x = &ue->shares[sh - 1];
    if (--x->refs) return;
    uln_link_rx_release(ue->io, x->handle);
    ue->share_free[ue->n_share_free++] = sh - 1;
}

/* Give back the buffer a receive slot holds: its own, or its count in a
 * bundle's. */
static void rx_release(struct uln_udp_ep *ue, struct rx_slot *s)
{
    if (s->share)
        share_put(ue, s->share);
    else
        uln_link_rx_release(ue->io, s->handle);
    s->share = 0;
}

/* ---- endpoint ------------------------------------------------------------------- */

static void peer_sockaddr(const struct udp_addr *a, unsigned ep_index, struct sockaddr_storage *ss,
                          socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, a->ip, 4);
        in->sin_port = htons((uint16_t)(a->port + ep_index));
        *len = sizeof *in;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, a->ip, 16);
        in6->sin6_port = htons((uint16_t)(a->port + ep_index));
        *len = sizeof *in6;
    }
}

/* The socket address of peer's endpoint we talk to. */
static void dst_sockaddr(const struct uln_ep *ep, int peer, struct sockaddr_storage *ss,
                         socklen_t *len)
{
    peer_sockaddr(&udp_of(ep->ctx)->addrs[peer], (unsigned)ep->peers[peer].dst_ep, ss, len);
}

/* Put peer into the link's table: its id there. -ENOENT: udp does not
 * reach it (yet: a context with no job learns peers as they are inserted). */
static int link_peer(struct uln_ep *ep, int peer)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (ue->id_of_rank[peer] >= 0) return ue->id_of_rank[peer];
    if (!udp_remote(ep->ctx, peer)) return -ENOENT;
    struct sockaddr_storage ss;
    socklen_t len;
    dst_sockaddr(ep, peer, &ss, &len);
    int id = uln_link_add_peer(ue->io, (struct sockaddr *)&ss, len);
    /* With no job: another life at the same socket address (a restart on the
     * same ports, or a forged or stale address). We send through its entry,
     * but what comes from there stays the other's until a packet says it is
     * ours (ctrl_sender). */
    bool shared = id == -EEXIST;
    if (shared) id = uln_link_find_peer(ue->io, (struct sockaddr *)&ss, len);
    if (id < 0) return id;
    ue->id_of_rank[peer] = id;
    if (!shared) ue->rank_of_id[id] = peer;
    return id;
}

/* Did the datagram come from the socket address of peer's endpoint we talk
 * to (a peer udp reaches)? */
static bool sent_by(struct uln_ep *ep, int peer, const struct uln_link_rx *rx)
{
    socklen_t alen;
    const void *a = uln_link_rx_addr(udp_ep(ep)->io, rx->handle, &alen);
    if (!a || !udp_remote(ep->ctx, peer)) return false;
    struct sockaddr_storage ss;
    socklen_t len;
    dst_sockaddr(ep, peer, &ss, &len);
    return len == alen && !memcmp(&ss, a, len);
}

/* A datagram from a source not in the link's table: with no job, a peer
 * inserted since this endpoint opened, sending before we sent to it. The
 * peers whose endpoint address it is are few; this runs once per peer. */
static int link_peer_of(struct uln_ep *ep, const struct uln_link_rx *rx)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!ctx->no_job) return -1;
    for (int p = 1; p < ctx->size; p++)
        if (udp_ep(ep)->id_of_rank[p] < 0 && sent_by(ep, p, rx)) return link_peer(ep, p);
    return -1;
}

/* With no job, a control packet from a source we do not know may carry its
 * sender's address (send_ctrl): a peer that inserted us before we inserted
 * it. If the packet shows our key and the address names its very source,
 * the peer is learnt (peer.c) and gets the id uln_peer_insert will give. */
static int link_peer_hello(struct uln_ep *ep, const struct uln_link_rx *rx, const struct pkt_hdr *h)
{
    struct uln_ctx *ctx = ep->ctx;
    size_t at = sizeof *h + sizeof(struct pkt_ctrl_body);
    if (!ctx->no_job || h->key != ctx->job_key || rx->len < at + 2) return -1;
    const uint8_t *hello = rx->buf + at;
    size_t alen = rx->len - at - 1;
    int p = uln_peer_learn_addr(ctx, hello + 1, alen, hello[0]);
    if (p < 0 || !sent_by(ep, p, rx)) return -1; /* not its own address */
    return link_peer(ep, p);
}

/* With no job, a control packet from the socket address of rank r that
 * names another sender (its ident, the low bits of its key): a later life
 * of r at the same ports, inserted (sharing r's link entry, or not linked
 * yet) or saying hello. If it shows our key, it has proved itself: it
 * supersedes r there, and the packet is its. Else r (the caller refuses
 * the packet). */
static int ctrl_sender(struct uln_ep *ep, int32_t io_peer, int r, const struct uln_link_rx *rx,
                       const struct pkt_hdr *h, const struct pkt_ctrl_body *b)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!ctx->no_job || r < 0 || b->rank == uln_peer_ident(ctx, r) || h->key != ctx->job_key)
        return r;
    struct uln_udp_ep *ue = udp_ep(ep);
    int p = -1;
    for (int q = 1; q < ctx->size && p < 0; q++)
        if (q != r && uln_peer_ident(ctx, q) == b->rank && udp_remote(ctx, q) &&
            (ue->id_of_rank[q] == io_peer || (ue->id_of_rank[q] < 0 && sent_by(ep, q, rx))))
            p = q;
    size_t at = sizeof *h + sizeof *b;
    if (p < 0 && rx->len >= at + 2) { /* not inserted: learnt from its hello */
        int q = uln_peer_learn_addr(ctx, rx->buf + at + 1, rx->len - at - 1, rx->buf[at]);
        if (q > 0 && q != r && uln_peer_ident(ctx, q) == b->rank && sent_by(ep, q, rx)) p = q;
    }
    if (p < 0) return r;
    if (ue->id_of_rank[p] < 0) ue->id_of_rank[p] = io_peer;
    uln_udp_supersede_older(ep, p);
    return ue->rank_of_id[io_peer] == p ? p : r;
}

static int uln_udp_ep_open(struct uln_ep *ep)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_udp *u = udp_of(ctx);
    if (!u || (unsigned)ep->index >= u->nfds || u->fds[ep->index] < 0) return 0;
    struct uln_udp_ep *ue = calloc(1, sizeof *ue);
    if (!ue) return -ENOMEM;
    ep->tp_ep[ULN_TPID_UDP] = ue;
    int n = ctx->size;
    ue->rank_of_id = malloc((size_t)n * sizeof(int));
    ue->id_of_rank = malloc((size_t)n * sizeof(int));
    ue->live = malloc((size_t)n * sizeof(int));
    if (!ue->rank_of_id || !ue->id_of_rank || !ue->live) return -ENOMEM;
    /* The index's socket stays the context's: the link gets its own
     * descriptor of it, so every life of the index has the same port (the
     * one peers know) and a closed life's packets stay refusable there. */
    int fd = fcntl(u->fds[ep->index], F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct uln_link_udp_cfg cfg = {.adopt = true,
                                   .fd = fd,
                                   .mtu = ctx->p.udp_mtu,
                                   .rx_bufs =
                                       2 * ctx->p.udp_window < 512 ? 512 : 2 * ctx->p.udp_window,
                                   .max_peers = (unsigned)n,
                                   .no_gro = !ctx->p.udp_gro,
                                   .dgram_len = dgram_len,
                                   .fault = ctx->p.fault};
    int rc = uln_udp_link_open(ctx, &cfg, &ue->io); /* udp_ctx.c: AF_XDP or the socket */
    if (rc) return rc;
    ue->pool_bufs = cfg.rx_bufs;
    if (bundles_init(ue) != 0) return -ENOMEM;
    /* uln_ep_open holds the context lock here: the context's generator is ours. */
    u->rng = mix64(u->rng + 0x9e3779b97f4a7c15ull);
    ue->rng = u->rng;
    if (ctx->no_job) {
        size_t alen = ULN_ADDR_MAX;
        if (uln_addr(ctx, ue->hello + 1, &alen) == 0) {
            ue->hello[0] = (uint8_t)ep->index;
            ue->hello_len = (uint32_t)(1 + alen);
        }
    }
    ue->payload_max = uln_link_payload_max(ue->io);
    ue->stride = (ue->payload_max + 63u) & ~63u;
    ue->window = ctx->p.udp_window;
    for (int p = 0; p < n; p++)
        ue->id_of_rank[p] = ue->rank_of_id[p] = -1;
    for (int p = 0; p < n; p++)
        if ((rc = link_peer(ep, p)) < 0 && rc != -ENOENT) return rc;
    return 0;
}

static void peer_free(struct uln_udp_ep *ue, struct uln_udp_peer *up)
{
    for (uint32_t i = 0; i <= up->mask; i++)
        if (up->rx[i].held) rx_release(ue, &up->rx[i]);
    uln_rel_fini(&up->rel);
    free(up->tx);
    free(up->tx_mem);
    free(up->tx_free);
    free(up->rx);
    free(up);
}

/* Closing: what we sent has completed locally but may not have arrived (a NAP
 * completes when it leaves). Like a TCP close, stay a while to resend until
 * every peer has acknowledged it, and tell every peer what we received so it
 * need not wait for us. Bounded: 2 s or ULN_UDP_DEAD_MS, whichever is less. */
static void linger(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    uint64_t ms = ep->ctx->p.udp_dead_ms < 2000 ? ep->ctx->p.udp_dead_ms : 2000;
    uint64_t until = uln_now_ns() + ms * 1000000u;
    for (int i = 0; i < ue->n_live; i++)
        uln_rel_want_fb(&udp_peer(ep, ue->live[i])->rel);
    for (;;) {
        uln_udp_progress_rx(ep);
        uln_udp_progress_tx(ep);
        bool waiting = ue->nbatch > 0;
        for (int i = 0; i < ue->n_live; i++) {
            struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
            waiting |= !up->dead && uln_rel_state(&up->rel) == ULN_REL_OPEN &&
                       uln_rel_tx_in_flight(&up->rel) > 0;
        }
        if (!waiting || uln_now_ns() >= until) break;
        uln_link_wait(ue->io, 1);
    }
}

static void uln_udp_ep_close(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return;
    if (ue->io) linger(ep);
    for (int p = 0; ep->peers && p < ep->ctx->size; p++) {
        struct uln_udp_peer *up = udp_peer(ep, p);
        if (!up) continue;
        /* What we fed the engine and it never took belongs to this life
         * only: the next one starts after it (ep.c). */
        for (int ch = 0; ch < 2; ch++)
            uln_ep_ring_drop(ep, p, ch, up->feed.prod[ch].tail);
        peer_free(ue, up);
        ep->peers[p].tp_peer = NULL;
    }
    uln_link_close(ue->io);
    free(ue->bundle_mem);
    free(ue->shares);
    free(ue->share_free);
    free(ue->rank_of_id);
    free(ue->id_of_rank);
    free(ue->live);
    free(ue);
    ep->tp_ep[ULN_TPID_UDP] = NULL;
}

static void rel_cfg(const struct uln_ep *ep, struct uln_rel_cfg *cfg)
{
    uln_rel_cfg_default(cfg);
    cfg->window = udp_ep(ep)->window;
    /* The congestion window counts datagram bytes; its bound is what the
     * send slots hold (window x payload_max: docs/limits.md). */
    cfg->mss = udp_ep(ep)->payload_max;
    cfg->dead_after = (uint64_t)ep->ctx->p.udp_dead_ms * 1000000u;
}

/* A life of ours for a peer: random, nonzero (it is also our first seq). */
static uint32_t new_epoch(struct uln_udp_ep *ue)
{
    uint32_t epoch = 0;
    while (epoch == 0) {
        ue->rng = mix64(ue->rng + 0x9e3779b97f4a7c15ull);
        epoch = (uint32_t)ue->rng;
    }
    return epoch;
}

/* Incast: many peers sending to one endpoint share its receive pool, and rel
 * gives each credit for what its own buffers hold. So that every packet a
 * peer is given credit for finds a pool buffer, the credit of the peers that
 * send to us lately adds up to at most half the pool - the half that the
 * drop rule in rx_one lets wait out of order; the rest is for packets that
 * come in order and for the link's reads. Credit a peer already has is not
 * taken back (rel's edge never moves back), so a sender joining the incast
 * may overfill the pool for a round trip: the drop rule stays as a counted
 * backstop (pkts_dropped). A peer quiet for ULN_UDP_ACTIVE_NS gives its
 * share back: a second, not less - on a loaded host a sender stalls for
 * tens of ms, and each time one leaves and comes back, the others' raised
 * credit overfills the pool for a round trip. */
#define ULN_UDP_ACTIVE_NS 1000000000u
#define ULN_UDP_SHARE_MIN 4u /* rel's smallest window: below it a sender stalls */
static uint32_t pool_share(const struct uln_udp_ep *ue, unsigned senders)
{
    uint32_t share = ue->pool_bufs / 2 / (senders ? senders : 1);
    return share < ULN_UDP_SHARE_MIN ? ULN_UDP_SHARE_MIN : share;
}

/* The number of active senders changed: every peer gets its new share. */
static void pool_reshare(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    uint32_t share = pool_share(ue, ue->n_active);
    for (int i = 0; i < ue->n_live; i++)
        uln_rel_rx_limit(&udp_peer(ep, ue->live[i])->rel, share, ue->now);
}

/* New data from up: a peer that was quiet joins the senders. */
static void sender_seen(struct uln_ep *ep, struct uln_udp_peer *up)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    up->rx_last = ue->now;
    if (up->rx_active) return;
    up->rx_active = true;
    ue->n_active++;
    pool_reshare(ep);
}

/* A sender quiet for ULN_UDP_ACTIVE_NS leaves the senders (progress_tx). */
static bool sender_quiet(struct uln_udp_ep *ue, struct uln_udp_peer *up)
{
    if (!up->rx_active || ue->now - up->rx_last < ULN_UDP_ACTIVE_NS) return false;
    up->rx_active = false;
    ue->n_active--;
    return true;
}

/* The state for one peer, made on first contact in either direction. */
static struct uln_udp_peer *peer_get(struct uln_ep *ep, int rank)
{
    struct uln_ep_peer *pp = &ep->peers[rank];
    if (ULN_LIKELY(udp_peer(ep, rank) != NULL)) return udp_peer(ep, rank);
    struct uln_ctx *ctx = ep->ctx;
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || link_peer(ep, rank) < 0) return NULL;
    struct uln_udp_peer *up = calloc(1, sizeof *up);
    if (!up) return NULL;
    struct uln_rel_cfg cfg;
    rel_cfg(ep, &cfg);
    uint32_t epoch = new_epoch(ue);
    up->rank = rank;
    up->io_id = ue->id_of_rank[rank];
    up->mask = cfg.window - 1;
    up->tx = calloc(cfg.window, sizeof *up->tx);
    up->rx = calloc(cfg.window, sizeof *up->rx);
    /* Untouched buffer memory costs no RAM: the pages come as buffers are
     * first taken (slot_mem), lowest first. */
    up->tx_mem = malloc((size_t)cfg.window * ue->stride);
    up->tx_free = malloc(cfg.window * sizeof *up->tx_free);
    if (!up->tx || !up->rx || !up->tx_mem || !up->tx_free ||
        uln_rel_init(&up->rel, &cfg, epoch, uln_now_ns()) != 0) {
        free(up->tx);
        free(up->rx);
        free(up->tx_mem);
        free(up->tx_free);
        free(up);
        return NULL;
    }
    for (uint32_t i = 0; i < cfg.window; i++)
        up->tx_free[up->n_free++] = cfg.window - 1 - i;
    uln_inbox_feed_init(&up->feed, ctx, rank, ep->index);
    pp->tp_peer = up;
    ue->live[ue->n_live++] = rank;
    uln_tp_busy(ep, &uln_tp_udp); /* timers from now on: every pass */
    /* A peer just met counts as a sender until it has been quiet a while: the
     * first feedback gives it credit, and credit given is not taken back, so
     * peers met together (an incast starting) must not each be promised the
     * pool they will share. */
    ue->now = uln_now_ns();
    sender_seen(ep, up);
    return up;
}

static int uln_udp_attach(struct uln_ep *ep, int peer)
{
    if (udp_of(ep->ctx)->remote[peer] == UDP_SUPERSEDED) return -ECONNRESET;
    struct uln_udp_peer *up = peer_get(ep, peer);
    if (!up) return udp_ep(ep) ? -ENOMEM : -EHOSTUNREACH;
    return up->dead ? -ECONNRESET : 0;
}

static bool uln_udp_peer_dead(struct uln_ctx *ctx, struct uln_ep *ep, int peer)
{
    (void)ctx;
    if (!ep) return false; /* no process of ours maps a remote peer's memory */
    struct uln_udp_peer *up = udp_peer(ep, peer);
    return up && up->dead;
}

static uint32_t uln_udp_frag_max(struct uln_ep *ep, int peer)
{
    (void)peer;
    return udp_ep(ep)->payload_max - (uint32_t)sizeof(struct pkt_hdr) -
           (uint32_t)sizeof(struct pkt_get_resp_ext);
}

/* ---- sending ------------------------------------------------------------------ */

/* Move batch entry from to slot to, its header row (or bundle buffer) with it. */
static void batch_move(struct uln_udp_ep *ue, unsigned to, unsigned from)
{
    ue->batch[to] = ue->batch[from];
    ue->batch_region[to] = ue->batch_region[from];
    ue->batch_bundle[to] = ue->batch_bundle[from];
    ue->batch_bundle[from] = -1;
    if (ue->batch_bundle[to] >= 0) return; /* its bytes are in its bundle buffer */
    size_t at = (size_t)((uint8_t *)ue->batch[from].iov[0].iov_base - ue->scratch[from]);
    memcpy(ue->scratch[to], ue->scratch[from], ROW_SPACE);
    ue->batch[to].iov[0].iov_base = ue->scratch[to] + at;
}

/* Is batch entry i a lone ACK (the header alone, no bundle yet)? */
static bool batch_lone_ack(const struct uln_udp_ep *ue, unsigned i)
{
    const struct uln_link_pkt *p = &ue->batch[i];
    const uint8_t *h = p->iov[0].iov_base;
    return p->niov == 1 && p->iov[0].iov_len == sizeof(struct pkt_hdr) && (h[0] & 15) == PKT_ACK &&
           h == ue->scratch[i] + LEAD_SPACE;
}

/* An ACK followed in the batch by another packet to the same peer rides in
 * front of it, in one datagram: a PUT's answer and the application's reply
 * cross the wire (and both kernels) once, not twice. The ACK keeps its own
 * header and seq; PKT_MORE says a packet follows (rx_datagram splits it).
 */
static void bundle_answers(struct uln_udp_ep *ue)
{
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch; r++) {
        struct uln_link_pkt *next = &ue->batch[r + 1];
        if (r + 1 < ue->nbatch && batch_lone_ack(ue, r) && next->peer == ue->batch[r].peer &&
            next->iov[0].iov_base == ue->scratch[r + 1] + LEAD_SPACE &&
            LEAD_SPACE + uln_link_pkt_len(next) <= ue->payload_max) {
            uint8_t *lead = ue->scratch[r + 1];
            memcpy(lead, ue->scratch[r] + LEAD_SPACE, LEAD_SPACE);
            lead[1] |= PKT_MORE; /* flags: the second byte */
            next->iov[0].iov_base = lead;
            next->iov[0].iov_len += LEAD_SPACE;
            continue; /* entry r is now part of r + 1 */
        }
        if (w != r) batch_move(ue, w, r);
        w++;
    }
    ue->nbatch = w;
}

/* Batch entry i as it is, not yet in a bundle: its header row, then data. */
static bool batch_plain(const struct uln_udp_ep *ue, unsigned i)
{
    return ue->batch_bundle[i] < 0 && !ue->batch_region[i] &&
           ue->batch[i].iov[0].iov_base == ue->scratch[i] + LEAD_SPACE;
}

/* Copy entries r..e-1 into one datagram in bundle buffer b: every packet
 * but the last marked PKT_MORE. It takes entry r's place. */
static void bundle_make(struct uln_udp_ep *ue, unsigned r, unsigned e, unsigned b)
{
    uint8_t *mem = ue->bundle_mem + (size_t)b * BUNDLE_MAX, *at = mem;
    for (unsigned i = r; i < e; i++) {
        const struct uln_link_pkt *p = &ue->batch[i];
        uint8_t *start = at;
        for (uint32_t k = 0; k < p->niov; k++) {
            memcpy(at, p->iov[k].iov_base, p->iov[k].iov_len);
            at += p->iov[k].iov_len;
        }
        if (i + 1 < e) start[1] |= PKT_MORE; /* flags: the second byte */
    }
    struct uln_link_pkt *d = &ue->batch[r];
    d->niov = 1;
    d->iov[0] = (struct iovec){mem, (size_t)(at - mem)};
    ue->batch_bundle[r] = (int8_t)b;
}

/* Small packets to one peer, next to each other in the batch, leave in one
 * datagram (a bundle). */
static void bundle_small(struct uln_udp_ep *ue)
{
    unsigned cap = ue->payload_max < BUNDLE_MAX ? ue->payload_max : BUNDLE_MAX;
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch;) {
        unsigned e = r, bytes = 0;
        while (e < ue->nbatch && batch_plain(ue, e) && ue->batch[e].peer == ue->batch[r].peer) {
            uint32_t len = uln_link_pkt_len(&ue->batch[e]);
            if (len > BUNDLE_PKT_MAX || bytes + len > cap) break;
            bytes += len;
            e++;
        }
        if (e - r >= 2 && ue->n_bundle_free) {
            bundle_make(ue, r, e, ue->bundle_free[--ue->n_bundle_free]);
            if (w != r) batch_move(ue, w, r);
            w++;
            r = e;
            continue;
        }
        if (w != r) batch_move(ue, w, r);
        w++;
        r++;
    }
    ue->nbatch = w;
}

/* Entries 0..n-1 have gone: their bundle buffers are free again. */
static void bundles_sent(struct uln_udp_ep *ue, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (ue->batch_bundle[i] >= 0) {
            ue->bundle_free[ue->n_bundle_free++] = (uint8_t)ue->batch_bundle[i];
            ue->batch_bundle[i] = -1;
        }
}

/* A progress pass reads the clock where it first needs the time (a read
 * that brought datagrams, a batch sent, a packet reserved) and not at all
 * when it finds nothing to do: one read per empty pass (progress_tx's, for
 * the timers), not two. A read costs ~23 ns in this VM, a tenth of the
 * empty recvfrom the pass is mostly made of. progress_tx takes the pass's
 * time as it is when the pass read it: at most the pass's own work old
 * (the engine serves and issues a chunk between rx and tx, ~20 us at worst),
 * well inside the timers' resolution (ack_delay 50 us, rto at least 200 us),
 * and the stamps of what it sends (resends, feedback) give no RTT sample. */
static inline void pass_clock(struct uln_udp_ep *ue)
{
    ue->now = uln_now_ns();
    ue->now_read = true;
}

static void uln_udp_flush(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || ue->nbatch == 0) return;
    bundle_small(ue);
    bundle_answers(ue);
    int n = uln_link_send(ue->io, ue->batch, ue->nbatch);
    if (n < 0) {
        /* A malformed packet of ours: a bug, but never a hang. Count and drop
         * the batch; rel resends what mattered. */
        ULN_COUNT(&ep->stats, malformed, 1);
        n = (int)ue->nbatch;
    }
    ULN_COUNT(&ep->stats, pkts_sent, (unsigned)n);
    bundles_sent(ue, (unsigned)n);
    if (ue->in_pass) pass_clock(ue); /* the next packets' stamps (uln_udp_reserve) */
    /* What the socket could not take now waits at the front for next time. */
    unsigned left = ue->nbatch - (unsigned)n;
    if (left == 0) ue->batch_data = ue->answers_held = false;
    for (unsigned i = 0; i < left; i++)
        batch_move(ue, i, (unsigned)n + i);
    ue->nbatch = left;
}

/* Answers (the engine's ACKs, rel's feedback) made while the application is
 * exchanging messages wait in the batch for its next post, to leave in the
 * same system call (ulnet.h, "When packets leave"). "Exchanging" is a post
 * within this long: a ping-pong's round trip between hosts is well inside. */
#define ANSWER_HOLD_NS 200000u
#ifdef ULN_TEST_HOOKS
/* Tests set it (uln_udp_test_answer_hold) to check the rule without racing
 * the clock. */
static uint64_t answer_hold_ns = ANSWER_HOLD_NS;
void uln_udp_test_answer_hold(uint64_t ns)
{
    answer_hold_ns = ns ? ns : ANSWER_HOLD_NS;
}
#else
#define answer_hold_ns ANSWER_HOLD_NS
#endif

/* End of a progress pass: may the batch stay for the next post or pass? Only
 * answers, only while the application posts, and only for one pass. */
static bool hold_answers(const struct uln_udp_ep *ue)
{
    return ue->nbatch && !ue->batch_data && !ue->answers_held &&
           ue->now - ue->posted_at < answer_hold_ns;
}

/* A post's packets are queued. They leave now if the peer had nothing in
 * flight (a lone message never waits for a poll) or if held answers wait to
 * ride with them; else they wait until the burst fills the batch or the next
 * progress pass, and a burst of posts becomes one system call. */
static void post_sent(struct uln_ep *ep, bool lone)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->posted_at = ue->now;
    if (lone || ue->answers_held) uln_udp_flush(ep);
}

/* Room in the batch for n more packets, flushing if needed. */
static bool batch_room(struct uln_ep *ep, unsigned n)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (ue->nbatch + n > ULN_LINK_BATCH) uln_udp_flush(ep);
    return ue->nbatch + n <= ULN_LINK_BATCH;
}

/* Write packet p's length into its header (the first iovec's start). */
static void pkt_len_set(struct uln_link_pkt *p)
{
    uint32_t n = uln_link_pkt_len(p);
    memcpy((uint8_t *)p->iov[0].iov_base + offsetof(struct pkt_hdr, len), &n, sizeof n);
}

/* Queue one packet: the header from h/ext, then data. NULL when the socket
 * is full (as if lost: rel resends), else the packet, for a second piece. */
static struct uln_link_pkt *queue_pkt(struct uln_ep *ep, int io_id, const struct pkt_hdr *h,
                                      const void *ext, unsigned elen, const void *data,
                                      uint32_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!batch_room(ep, 1)) return NULL;
    unsigned type = h->vt & 15;
    if (type != PKT_ACK && type != PKT_CTRL) ue->batch_data = true;
    unsigned i = ue->nbatch++;
    /* The batch leaves at the next pass at the latest: not a quiet one. Quiet
     * is only said with the batch empty, so its first packet is enough. */
    if (i == 0) uln_tp_busy(ep, &uln_tp_udp);
    uint8_t *row = ue->scratch[i] + LEAD_SPACE; /* room before it for a riding ACK */
    memcpy(row, h, sizeof *h);
    if (elen) memcpy(row + sizeof *h, ext, elen);
    struct uln_link_pkt *p = &ue->batch[i];
    ue->batch_region[i] = false;
    ue->batch_bundle[i] = -1;
    p->peer = io_id;
    p->niov = 1;
    p->iov[0] = (struct iovec){row, sizeof *h + elen};
    if (len) p->iov[p->niov++] = (struct iovec){(void *)(uintptr_t)data, len};
    pkt_len_set(p);
    return p;
}

static void send_ctrl(struct uln_ep *ep, struct uln_udp_peer *up, const struct uln_rel_pkt *p)
{
    struct pkt_hdr h = {.vt = PKT_VERSION << 4 | PKT_CTRL,
                        .flags = (uint8_t)(p->flags & (ULN_REL_FB | ULN_REL_LOSE | ULN_REL_PROBE)),
                        .credit = p->fb.credit,
                        .seq = p->src_epoch,
                        .ack = p->fb.ack,
                        .key = ep->ctx->peer_recs[up->rank].key, /* what it expects */
                        .offset = p->fb.sack};
    struct pkt_ctrl_body b = {.dst_epoch = p->dst_epoch,
                              .lose = p->fb.lose,
                              .sack_off = p->fb.sack_off,
                              .reorder = p->fb.reorder,
                              .rank = uln_self_ident(ep->ctx)};
    /* With no job, our address rides along: the peer may not have inserted
     * us yet, and learns us from it (link_peer_hello). */
    struct uln_udp_ep *ue = udp_ep(ep);
    queue_pkt(ep, up->io_id, &h, &b, sizeof b, ue->hello, ue->hello_len);
}

/* A GET answer sent from our region is sent again (its first send is over,
 * and the key with it): copy the data now, under the key, into the slot's
 * own buffer, where it stays for any later resend. A region gone meanwhile
 * makes this piece a refusal (no data), which fails the GET. */
static uint8_t *slot_mem(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq);

static void region_copy(struct uln_ep *ep, struct uln_udp_peer *up, struct tx_slot *t, uint32_t seq)
{
    uint8_t *where;
    t->region = false;
    int rc = uln_key_enter(ep->ctx, ep->index, t->rkey, t->roff, t->len, ULN_ACCESS_REMOTE_READ,
                           &where, &ep->stats);
    if (rc) {
        struct pkt_get_resp_ext x = {.status = rc};
        memcpy(t->ext, &x, sizeof x);
        t->len = 0;
        return;
    }
    uint8_t *mem = slot_mem(ep, up, seq);
    if (t->len) memcpy(mem, where, t->len);
    uln_key_leave(ep->ctx, ep->index);
    t->data = mem;
}

/* (Re)send the data packet in slot t with rel's fields from p. */
static void send_data(struct uln_ep *ep, struct uln_udp_peer *up, struct tx_slot *t,
                      const struct uln_rel_pkt *p)
{
    if (t->region && !t->data) region_copy(ep, up, t, p->seq);
    struct pkt_hdr h = t->h;
    uint32_t len = t->len;
    if (t->user && (p->flags & ULN_REL_RETX) && !uln_engine_op_open(ep, t->op_id)) {
        /* The PUT is over: either the target placed every fragment (so it has
         * this one and will drop it as a duplicate) or it failed. The user's
         * buffer is theirs again and may be gone: resend the header only. */
        len = 0;
    }
    h.flags = (uint8_t)((h.flags & (PKT_LAST | PKT_IMM)) |
                        (p->flags & (ULN_REL_DATA | ULN_REL_FB | ULN_REL_RETX)));
    h.tag = conn_tag(ep->ctx->peer_recs[up->rank].key, p->src_epoch, p->dst_epoch);
    h.seq = p->seq;
    if (p->flags & ULN_REL_FB) {
        h.ack = p->fb.ack;
        h.credit = p->fb.credit;
    }
    struct uln_link_pkt *q = queue_pkt(ep, up->io_id, &h, t->ext, t->ext_len, t->data, len);
    if (q && len && t->len2) { /* len 0: the header only, as above */
        q->iov[q->niov++] = (struct iovec){(void *)(uintptr_t)t->data2, t->len2};
        pkt_len_set(q);
    }
    if (q) udp_ep(ep)->batch_region[q - udp_ep(ep)->batch] = t->region;
    /* A data header has room for the cumulative ACK and credit only: a LOSE
     * report (and the SACK bitmap with it) goes in a control packet of its own. */
    if (p->flags & ULN_REL_LOSE) send_ctrl(ep, up, p);
}

/* A slot is free again, and its buffer (if it took one) with it. */
static void tx_slot_clear(struct uln_udp_peer *up, struct tx_slot *t)
{
    t->used = false;
    t->data = NULL;
    if (t->buf1) up->tx_free[up->n_free++] = t->buf1 - 1;
    t->buf1 = 0;
}

/* Slots the peer has acknowledged are free again. */
static void drain_acked(struct uln_udp_peer *up)
{
    uint32_t seq;
    while (uln_rel_tx_next_acked(&up->rel, &seq))
        tx_slot_clear(up, &up->tx[seq & up->mask]);
}

/* Take the next sequence number for slot memory already filled; t gets the
 * message's own header fields from the caller. */
static struct tx_slot *assign(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t bytes,
                              struct uln_rel_pkt *p)
{
    if (uln_rel_tx_assign(&up->rel, udp_ep(ep)->now, bytes, p) != 0)
        return NULL; /* checked before */
    struct tx_slot *t = &up->tx[p->seq & up->mask];
    memset(&t->h, 0, sizeof t->h);
    t->ext_len = 0;
    t->used = true;
    t->user = false;
    t->region = false;
    t->data = NULL;
    t->len = 0;
    t->len2 = 0;
    return t;
}

/* The buffer of the slot of seq, taken now if it has none: there are as
 * many buffers as slots, so one is always free for a free slot. */
static uint8_t *slot_mem(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq)
{
    struct tx_slot *t = &up->tx[seq & up->mask];
    if (!t->buf1) t->buf1 = 1 + up->tx_free[--up->n_free];
    return up->tx_mem + (size_t)(t->buf1 - 1) * udp_ep(ep)->stride;
}

/* Can n packets go to this peer now? Otherwise the endpoint is blocked. */
static bool can_send(struct uln_ep *ep, struct uln_udp_peer *up, unsigned n)
{
    drain_acked(up);
    if (batch_room(ep, n) && uln_rel_tx_ready(&up->rel, udp_ep(ep)->now, n)) return true;
    ep->blocked = true;
    return false;
}

/* Inside a progress pass the clock is read at the socket read when
 * datagrams came, and again after every batch sent (uln_udp_flush), so the
 * stamps of packets the pass makes (GET data served, ACKs) are as close to
 * their send as a read of their own would be: one read per batch, not per
 * packet (pass_clock). A clock read costs ~25-50 ns in a VM, a tenth of the
 * time a served GET spends per packet. */
static void *uln_udp_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    if (!udp_ep(ep)->in_pass || !udp_ep(ep)->now_read) pass_clock(udp_ep(ep));
    if (!up || up->dead || len > udp_ep(ep)->stride || !can_send(ep, up, 1)) return NULL;
    return slot_mem(ep, up,
                    uln_rel_tx_next_seq(&up->rel)); /* the seq uln_rel_tx_assign gives next */
}

/* Send what the engine wrote into the reserved slot, as a packet. */
static void uln_udp_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags,
                           uint32_t len)
{
    (void)flags;
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    struct uln_rel_pkt p;
    const uint8_t *m = slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
    if (type == ULN_MSG_GET_REQ) {
        /* A post's packet (ACK and ATOMIC_RESP answer a peer): the kick that
         * follows applies post_sent's rule. */
        ue->posted_at = ue->now;
        ue->kick_now |= uln_rel_tx_in_flight(&up->rel) == 0 || ue->answers_held;
    }
    struct tx_slot *t = assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + len, &p);
    if (!t) return;
    /* The packet type and extension are the table's; the two header fields
     * and the extension's contents are each message's own. */
    const struct uln_msg_desc *d = uln_msg_packet(type);
    if (d) {
        t->h.vt = (uint8_t)(PKT_VERSION << 4 | type);
        t->ext_len = d->ext;
    }
    switch (type) {
    case ULN_MSG_ACK: {
        const struct uln_ack *a = (const void *)m;
        t->h.key = a->op_id;
        t->h.offset = (uint64_t)(int64_t)a->status;
        break;
    }
    case ULN_MSG_GET_REQ: {
        const struct uln_get_req *r = (const void *)m;
        struct pkt_get_req_ext x = {.len = r->len, .op_id = r->op_id};
        t->h.key = r->key;
        t->h.offset = r->offset;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    case ULN_MSG_ATOMIC_REQ: {
        const struct uln_atomic_req *r = (const void *)m;
        struct pkt_atomic_req_ext x = {.op_id = r->op_id,
                                       .operand = r->operand,
                                       .compare = r->compare,
                                       .op = r->op,
                                       .width = r->width};
        t->h.key = r->key;
        t->h.offset = r->offset;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    case ULN_MSG_ATOMIC_RESP: {
        /* Kept in the slot until acknowledged: a resend carries the same old
         * value, and the op is never applied again for it. */
        const struct uln_atomic_resp *a = (const void *)m;
        struct pkt_atomic_resp_ext x = {.status = a->status};
        t->h.key = a->op_id;
        t->h.offset = a->old;
        memcpy(t->ext, &x, sizeof x);
        break;
    }
    default:
        /* PUT_NOTIFY, PUT_FRAG, NAP and GET_RESP (uln_udp_serve_get) never
         * take this path over UDP. */
        memset(&t->h, 0, sizeof t->h);
        t->ext_len = 0;
        ULN_COUNT(&ep->stats, malformed, 1);
        break;
    }
    send_data(ep, up, t, &p);
}

static bool uln_udp_nap(struct uln_ep *ep, int peer, const void *buf, uint32_t len)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now = uln_now_ns();
    uint32_t cap = ue->payload_max - (uint32_t)sizeof(struct pkt_hdr);
    uint32_t n = len ? (len + cap - 1) / cap : 1;
    /* All packets of a NAP go together, on consecutive seqs: the receiver
     * assembles them in its ring in order, with nothing in between. */
    if (!up || up->dead || !can_send(ep, up, n)) return false;
    bool lone = uln_rel_tx_in_flight(&up->rel) == 0;
    uint64_t off = 0;
    uint32_t unlimited = 0; /* the NAP goes whole: the window was checked for all n */
    struct uln_frag fc = uln_frag_start(&off, len, cap, &unlimited);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = uln_frag_next(&fc);
        uint8_t *mem = slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
        struct uln_rel_pkt p;
        struct tx_slot *t = assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + k, &p);
        if (!t) return false; /* cannot happen after can_send */
        if (k) memcpy(mem, (const uint8_t *)buf + off, k);
        t->h = (struct pkt_hdr){.vt = PKT_VERSION << 4 | PKT_NAP,
                                .flags = i + 1 == n ? PKT_LAST : 0,
                                .key = len,
                                .offset = off};
        t->data = mem;
        t->len = k;
        send_data(ep, up, t, &p);
        uln_frag_take(&fc, k);
    }
    post_sent(ep, lone);
    return true;
}

/* The data of PUT s's next fragment, n bytes. Zero copy: the packet gathers
 * straight from the user's buffer, which stays theirs-but-untouchable until
 * the PUT completes (at the ACK), in one piece or two (a packet's iovec
 * takes the header and two). A fragment over more of uln_putv's segments is
 * gathered into the slot's own memory (kept for resends like a NAP's). */
static void put_data(struct uln_ep *ep, struct uln_udp_peer *up, const struct uln_sqe *s,
                     struct tx_slot *t, uint32_t seq, uint32_t n)
{
    struct iovec one, part[ULN_LINK_IOV_MAX - 1];
    const struct iovec *local;
    int nlocal = uln_sqe_local(ep, s, &one, &local);
    int k = uln_iov_slice(local, nlocal, s->issued, n, part, ULN_LINK_IOV_MAX - 1);
    t->len = n;
    if (k < 0) {
        uint8_t *mem = slot_mem(ep, up, seq);
        uln_iov_to_flat(mem, local, nlocal, s->issued, n);
        t->data = mem;
        return;
    }
    t->user = true;
    t->op_id = s->op_id;
    t->data = k ? part[0].iov_base : NULL;
    t->len = k ? (uint32_t)part[0].iov_len : 0;
    if (k == 2) {
        t->data2 = part[1].iov_base;
        t->len2 = (uint32_t)part[1].iov_len;
    }
}

static bool uln_udp_put(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget)
{
    struct uln_udp_peer *up = udp_peer(ep, s->peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now = uln_now_ns();
    uint32_t cap = ue->payload_max - (uint32_t)sizeof(struct pkt_hdr) - EXT_MAX;
    bool sent_last = false, lone = up && uln_rel_tx_in_flight(&up->rel) == 0;
    struct uln_frag fc = uln_frag_start(&s->issued, s->len, cap, budget);
    do {
        if (!up || up->dead || !can_send(ep, up, 1)) break;
        uint32_t n = uln_frag_next(&fc);
        bool last = uln_frag_last(&fc, n);
        struct uln_rel_pkt p;
        struct tx_slot *t = assign(ep, up, (uint32_t)sizeof(struct pkt_hdr) + EXT_MAX + n, &p);
        if (!t) break;
        uint8_t fl = last ? PKT_LAST : 0;
        if (last && (s->flags & ULN_REMOTE_CQ)) fl |= PKT_IMM;
        t->h = (struct pkt_hdr){.vt = PKT_VERSION << 4 | PKT_PUT,
                                .flags = fl,
                                .key = s->rkey,
                                .offset = s->roff + s->issued};
        struct pkt_put_ext x = {
            .op_id = s->op_id, .op_offset = s->roff, .op_len = s->len, .imm = s->imm};
        t->ext_len = (uint8_t)ext_len(PKT_PUT, fl);
        memcpy(t->ext, &x, t->ext_len);
        put_data(ep, up, s, t, p.seq, n);
        send_data(ep, up, t, &p);
        uln_frag_take(&fc, n);
        sent_last = last;
    } while (!sent_last && *budget > 0);
    post_sent(ep, lone);
    return sent_last;
}

/* A batch entry the socket did not take whose data is in the region: drop
 * it before the key goes (rel sends it again, copied then: region_copy). */
static void batch_drop_region(struct uln_udp_ep *ue)
{
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch; r++) {
        if (ue->batch_region[r]) continue;
        if (w != r) batch_move(ue, w, r);
        w++;
    }
    ue->nbatch = w;
}

/* GET answers of at least this many bytes go from the region straight into
 * the packets (uln_udp_serve_get); smaller ones are copied into send slots,
 * so that many of them share a batch instead of each sending its own. */
#define GET_ZC_MIN 65536u

/* Answer GET request r with the data of our region. A large one goes
 * straight into the packets: the kernel copies it from the region as it
 * copies a PUT's from the user's buffer, with no copy into send slots (that
 * copy was 7 % of a serving rank's time at 1 MiB); the key is then held
 * from the check until the batch carrying the pieces has gone to the
 * kernel, and the slots keep where the data is (region_copy, for a resend).
 * A refusal is one answer with the status and no data, as on the ring
 * path. */
static bool uln_udp_serve_get(struct uln_ep *ep, int peer, const struct uln_get_req *r,
                              uint64_t *sent, uint32_t *budget)
{
    struct uln_udp_peer *up = udp_peer(ep, peer);
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!up || up->dead || !can_send(ep, up, 1)) return false;
    uint8_t *where;
    int rc = uln_key_enter(ep->ctx, ep->index, r->key, r->offset, r->len, ULN_ACCESS_REMOTE_READ,
                           &where, &ep->stats);
    bool zc = rc == 0 && r->len >= GET_ZC_MIN;
    struct uln_frag fc = uln_frag_start(sent, r->len, uln_udp_frag_max(ep, peer), budget);
    uint32_t first = uln_rel_tx_next_seq(&up->rel), k = 0;
    bool done = false;
    do {
        uint32_t n = rc ? 0 : uln_frag_next(&fc);
        struct uln_rel_pkt p;
        struct tx_slot *t = assign(ep, up, (uint32_t)(sizeof(struct pkt_hdr) + EXT_MAX) + n, &p);
        if (!t) break; /* cannot happen after can_send */
        struct pkt_get_resp_ext x = {.status = rc};
        t->h = (struct pkt_hdr){
            .vt = PKT_VERSION << 4 | PKT_GET_RESP, .key = r->op_id, .offset = *sent};
        t->ext_len = sizeof x;
        memcpy(t->ext, &x, sizeof x);
        t->len = n;
        if (zc) {
            t->region = true;
            t->rkey = r->key;
            t->roff = r->offset + *sent;
            t->data = where + *sent;
        } else if (n) {
            uint8_t *mem = slot_mem(ep, up, p.seq);
            memcpy(mem, where + *sent, n); /* kept in the slot for resends */
            t->data = mem;
        }
        send_data(ep, up, t, &p);
        k++;
        uln_frag_take(&fc, n);
        done = rc != 0 || *sent == r->len;
    } while (!done && *budget > 0 && can_send(ep, up, 1));
    if (rc) return done;
    if (zc) {
        uln_udp_flush(ep);
        batch_drop_region(ue);
    }
    uln_key_leave(ep->ctx, ep->index);
    if (zc)
        for (uint32_t i = 0; i < k; i++) /* the region is no longer ours to read */
            up->tx[(first + i) & up->mask].data = NULL;
    return done;
}

/* ---- receiving ---------------------------------------------------------------- */

/* Place a PUT fragment where it says; the whole operation is checked, so a
 * refused PUT writes no byte (as on the ring path). */
static int place_put(struct uln_ep *ep, const struct pkt_hdr *h, const struct pkt_put_ext *x,
                     const uint8_t *data, uint32_t n)
{
    if (h->offset < x->op_offset || h->offset - x->op_offset > x->op_len ||
        n > x->op_len - (h->offset - x->op_offset)) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return -EPROTO;
    }
    uint8_t *where;
    int rc = uln_key_enter(ep->ctx, ep->index, h->key, x->op_offset, x->op_len,
                           ULN_ACCESS_REMOTE_WRITE, &where, &ep->stats);
    if (rc) return rc;
    if (n) memcpy(where + (h->offset - x->op_offset), data, n);
    uln_key_leave(ep->ctx, ep->index);
    return 0;
}

static struct uln_refused_put refusal(const struct pkt_hdr *h, const struct pkt_put_ext *x,
                                      int32_t status)
{
    return (struct uln_refused_put){.valid = true,
                                    .op_id = x->op_id,
                                    .key = h->key,
                                    .op_offset = x->op_offset,
                                    .op_len = x->op_len,
                                    .status = status};
}

/* A new data packet (in order or ahead of it): place what can be placed now,
 * keep what must wait for its turn. Returns true if the pool buffer is kept. */
static bool arrive(struct uln_ep *ep, struct uln_udp_peer *up, uint32_t seq,
                   const struct uln_link_rx *rx, uint32_t share, const struct pkt_hdr *h,
                   unsigned elen)
{
    struct rx_slot *s = &up->rx[seq & up->mask];
    const uint8_t *payload = rx->buf + sizeof *h + elen;
    uint32_t n = rx->len - (uint32_t)(sizeof *h + elen);
    s->h = *h;
    memcpy(s->ext, rx->buf + sizeof *h, elen);
    s->status = 0;
    s->held = false;
    s->rel_held = true;
    switch (h->vt & 15) {
    case PKT_PUT: {
        struct pkt_put_ext x = {0};
        memcpy(&x, s->ext, elen);
        /* The rest of a refused PUT is refused without looking (or counting)
         * again: one refusal per operation, as on the ring path. */
        if (uln_refused_is(&up->refused_seen, x.op_id, h->key, x.op_offset, x.op_len)) {
            s->status = up->refused_seen.status;
            break;
        }
        s->status = place_put(ep, h, &x, payload, n);
        if (s->status) up->refused_seen = refusal(h, &x, s->status);
        break;
    }
    case PKT_GET_RESP: {
        struct pkt_get_resp_ext x;
        memcpy(&x, s->ext, sizeof x);
        uln_engine_get_data(ep, up->rank, h->key, h->offset, x.status, payload, x.status ? 0 : n);
        break;
    }
    case PKT_ACK: /* its turn needs the header alone (s->h): no buffer held */
        break;
    default: /* NAP, GET_REQ, ATOMIC_REQ: their order matters; keep the bytes */
        s->held = true;
        udp_ep(ep)->held++;
        s->handle = rx->handle;
        s->share = share; /* counted by rx_datagram */
        s->payload = payload;
        s->len = n;
        return true;
    }
    /* Placed: the pool buffer goes back now, whatever the order. rel's count
     * of it stays until its turn (deliver_pending): the slot still holds
     * what that turn needs, and rel must not lend the slot to a later seq. */
    return false;
}

static bool put_done(struct uln_ep *ep, struct uln_udp_peer *up, uint64_t op_id, uint64_t imm,
                     uint64_t off, uint64_t len, int32_t status, uint32_t flags)
{
    struct uln_put_done *d = uln_inbox_feed_reserve(&up->feed, 0, sizeof *d);
    if (!d) return false;
    *d = (struct uln_put_done){.op_id = op_id,
                               .imm = imm,
                               .op_offset = off,
                               .op_len = len,
                               .status = status,
                               .flags = flags,
                               .life = ep->peers[up->rank].life};
    uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_PUT_DONE, sizeof *d);
    return true;
}

/* Give up a NAP half assembled in the ring: the consumer skips a PAD. */
static void nap_abandon(struct uln_udp_peer *up)
{
    if (!up->nap_dst) return;
    uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_PAD, up->nap_total);
    up->nap_dst = NULL;
}

/* Hand one in-order packet to the engine. False: no room in the ring yet. */
static bool deliver_one(struct uln_ep *ep, struct uln_udp_peer *up, struct rx_slot *s)
{
    const struct pkt_hdr *h = &s->h;
    switch (h->vt & 15) {
    case PKT_NAP: {
        uint64_t total = h->key, off = h->offset;
        bool last = h->flags & PKT_LAST;
        if (off == 0) {
            nap_abandon(up);
            if (total > ep->ctx->p.nap_max || s->len > total || (last && s->len != total)) {
                ULN_COUNT(&ep->stats, malformed, 1);
                return true;
            }
            uint8_t *dst = uln_inbox_feed_reserve(&up->feed, 0, (uint32_t)total);
            if (!dst) return false; /* the application has not released enough */
            up->nap_dst = dst;
            up->nap_total = (uint32_t)total;
            up->nap_got = 0;
        } else if (!up->nap_dst || off != up->nap_got || total != up->nap_total ||
                   s->len > total - off) {
            ULN_COUNT(&ep->stats, malformed, 1);
            nap_abandon(up);
            return true;
        }
        if (s->len) memcpy(up->nap_dst + off, s->payload, s->len);
        up->nap_got += s->len;
        if (!last) return true;
        if (up->nap_got != up->nap_total) {
            ULN_COUNT(&ep->stats, malformed, 1);
            nap_abandon(up);
            return true;
        }
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_NAP, up->nap_total);
        up->nap_dst = NULL;
        return true;
    }
    case PKT_ACK: {
        if (up->nap_dst) nap_abandon(up);
        struct uln_ack *a = uln_inbox_feed_reserve(&up->feed, 0, sizeof *a);
        if (!a) return false;
        *a = (struct uln_ack){.op_id = h->key, .status = (int32_t)(int64_t)h->offset};
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_ACK, sizeof *a);
        return true;
    }
    case PKT_GET_REQ: {
        struct pkt_get_req_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_get_req *r = uln_inbox_feed_reserve(&up->feed, 1, sizeof *r);
        if (!r) return false;
        *r = (struct uln_get_req){
            .key = h->key, .offset = h->offset, .len = x.len, .op_id = x.op_id};
        uln_inbox_feed_commit(&up->feed, 1, ULN_MSG_GET_REQ, sizeof *r);
        return true;
    }
    case PKT_ATOMIC_REQ: {
        struct pkt_atomic_req_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_atomic_req *r = uln_inbox_feed_reserve(&up->feed, 1, sizeof *r);
        if (!r) return false;
        *r = (struct uln_atomic_req){.key = h->key,
                                     .offset = h->offset,
                                     .op_id = x.op_id,
                                     .operand = x.operand,
                                     .compare = x.compare,
                                     .op = x.op,
                                     .width = x.width};
        uln_inbox_feed_commit(&up->feed, 1, ULN_MSG_ATOMIC_REQ, sizeof *r);
        return true;
    }
    case PKT_ATOMIC_RESP: {
        if (up->nap_dst) nap_abandon(up);
        struct pkt_atomic_resp_ext x;
        memcpy(&x, s->ext, sizeof x);
        struct uln_atomic_resp *a = uln_inbox_feed_reserve(&up->feed, 0, sizeof *a);
        if (!a) return false;
        *a = (struct uln_atomic_resp){.op_id = h->key, .old = h->offset, .status = x.status};
        uln_inbox_feed_commit(&up->feed, 0, ULN_MSG_ATOMIC_RESP, sizeof *a);
        return true;
    }
    case PKT_PUT: {
        struct pkt_put_ext x = {0};
        memcpy(&x, s->ext, ext_len(PKT_PUT, h->flags));
        bool last = h->flags & PKT_LAST;
        if (s->status) {
            /* Refused: say so once per operation (as the ring path does). */
            if (uln_refused_is(&up->refused_sent, x.op_id, h->key, x.op_offset, x.op_len))
                return true;
            if (!put_done(ep, up, x.op_id, 0, x.op_offset, x.op_len, s->status, 0)) return false;
            up->refused_sent = refusal(h, &x, s->status);
        } else if (last) {
            /* Every earlier fragment has come up in order, so all are placed. */
            uint32_t fl = (h->flags & PKT_IMM) ? ULN_FRAG_IMM : 0;
            if (!put_done(ep, up, x.op_id, x.imm, x.op_offset, x.op_len, 0, fl)) return false;
        } else {
            return true;
        }
        return true;
    }
    default: /* GET_RESP: placed on arrival */
        return true;
    }
}

/* Give back what a receive slot holds: its pool buffer, and its place in
 * rel's window. */
static void slot_free(struct uln_ep *ep, struct uln_udp_peer *up, struct rx_slot *s)
{
    if (s->held) rx_release(udp_ep(ep), s), udp_ep(ep)->held--;
    if (s->rel_held) uln_rel_rx_release(&up->rel, 1, udp_ep(ep)->now);
    s->held = s->rel_held = false;
}

static void deliver_pending(struct uln_ep *ep, struct uln_udp_peer *up)
{
    while (up->pend_n) {
        struct rx_slot *s = &up->rx[up->pend_seq & up->mask];
        if (!deliver_one(ep, up, s)) break;
        slot_free(ep, up, s);
        up->pend_seq++;
        up->pend_n--;
    }
}

/* Drop every held packet and half-assembled NAP (a reset or a death). */
static void drop_held(struct uln_ep *ep, struct uln_udp_peer *up)
{
    for (uint32_t i = 0; i <= up->mask; i++)
        slot_free(ep, up, &up->rx[i]);
    up->pend_n = 0;
    nap_abandon(up);
    up->refused_seen = up->refused_sent = (struct uln_refused_put){0};
}

/* The peer started a new life (or died): what was in flight between the old
 * lives is void. Operations on it fail; sends are forgotten. */
static void void_peer(struct uln_ep *ep, struct uln_udp_peer *up, int status)
{
    uln_engine_fail_peer(ep, up->rank, status);
    uln_engine_forget_peer(ep, up->rank);
    drain_acked(up);
    for (uint32_t i = 0; i <= up->mask; i++)
        tx_slot_clear(up, &up->tx[i]);
    drop_held(ep, up);
}

static void go_dead(struct uln_ep *ep, struct uln_udp_peer *up)
{
    up->dead = true;
    ep->peers[up->rank].out_ready = false; /* posts now fail at issue time */
    ULN_COUNT(&ep->stats, peers_dead, 1);
    void_peer(ep, up, -ECONNRESET);
}

void uln_udp_supersede(struct uln_ep *ep, int old, int now)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return;
    struct uln_udp_peer *up = udp_peer(ep, old);
    if (up && !up->dead) go_dead(ep, up);
    ep->peers[old].out_ready = false;
    int id = ue->id_of_rank[old];
    if (id < 0) return;
    /* The link's entry names the old life's socket address: the new life's
     * if it is the same endpoint (it may have sent through it already,
     * link_peer), else nobody's (a datagram from it is looked up again,
     * link_peer_of). */
    ue->id_of_rank[old] = -1;
    bool same = ep->peers[old].dst_ep == ep->peers[now].dst_ep &&
                (ue->id_of_rank[now] < 0 || ue->id_of_rank[now] == id);
    ue->rank_of_id[id] = same ? now : -1;
    if (same) {
        ue->id_of_rank[now] = id;
        struct uln_udp_peer *un = udp_peer(ep, now);
        if (un) un->io_id = id;
    }
}

static void after_verdict(struct uln_ep *ep, struct uln_udp_peer *up, int v)
{
    switch (v) {
    case ULN_REL_RX_DUP:
        ULN_COUNT(&ep->stats, duplicates, 1);
        break;
    case ULN_REL_RX_STALE:
        ULN_COUNT(&ep->stats, stale, 1);
        break;
    case ULN_REL_RX_INVALID:
    case ULN_REL_RX_OUT_OF_WINDOW: /* past the credit we gave: no honest sender does it */
        ULN_COUNT(&ep->stats, malformed, 1);
        break;
    case ULN_REL_RX_RESET:
        void_peer(ep, up, -ECONNRESET);
        break;
    default:
        break;
    }
}

static void rx_ctrl(struct uln_ep *ep, struct uln_udp_peer *up, const struct pkt_hdr *h,
                    const struct pkt_ctrl_body *b)
{
    if (h->key != ep->ctx->job_key) {
        ULN_COUNT(&ep->stats, refused_job, 1);
        return;
    }
    if (b->rank != uln_peer_ident(ep->ctx, up->rank) ||
        (h->flags & (ULN_REL_DATA | ULN_REL_RETX))) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return;
    }
    struct uln_rel_pkt p = {.src_epoch = h->seq,
                            .dst_epoch = b->dst_epoch,
                            .flags = (uint16_t)(h->flags & ULN_REL_FLAGS),
                            .fb = {.ack = h->ack,
                                   .lose = b->lose,
                                   .sack = h->offset,
                                   .sack_off = b->sack_off,
                                   .credit = h->credit,
                                   .reorder = b->reorder}};
    after_verdict(ep, up, uln_rel_rx(&up->rel, &p, udp_ep(ep)->now));
    drain_acked(up);
}

/* One packet: a datagram, or a part of a bundle (share: 1 + the bundle's
 * share of the buffer, 0: none; later: not the bundle's first packet).
 * Returns true if its buffer is kept for later. */
static bool rx_one(struct uln_ep *ep, const struct uln_link_rx *rx, uint32_t share, bool later)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    struct pkt_hdr h;
    if (rx->len < sizeof h) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    memcpy(&h, rx->buf, sizeof h);
    unsigned type = h.vt & 15;
    int elen = ext_len(type, h.flags);
    /* A header that disagrees with its datagram about the length may have
     * been cut from a GRO run at a wrong place: nothing in it is trusted. */
    if ((h.vt >> 4) != PKT_VERSION || elen < 0 || rx->len < sizeof h + (unsigned)elen ||
        h.len != rx->len) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    int32_t io_peer = rx->peer >= 0 ? rx->peer : link_peer_of(ep, rx);
    if (io_peer >= 0 && ue->rank_of_id[io_peer] < 0) io_peer = link_peer_of(ep, rx);
    if (io_peer < 0 && type == PKT_CTRL) io_peer = link_peer_hello(ep, rx, &h);
    if (io_peer < 0) {
        ULN_COUNT(&ep->stats, refused_job, 1); /* not a rank of this job, nor a peer */
        return false;
    }
    int rank = ue->rank_of_id[io_peer];
    struct pkt_ctrl_body b; /* a control packet's body (ext_len checked its length) */
    if (type == PKT_CTRL) {
        memcpy(&b, rx->buf + sizeof h, sizeof b);
        rank = ctrl_sender(ep, io_peer, rank, rx, &h, &b);
    }
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return false;
    if (up->dead) {
        ULN_COUNT(&ep->stats, stale, 1);
        return false;
    }
    if (type == PKT_CTRL) {
        rx_ctrl(ep, up, &h, &b);
        return false;
    }
    if (!(h.flags & ULN_REL_DATA) || (h.flags & (ULN_REL_LOSE | ULN_REL_PROBE))) {
        ULN_COUNT(&ep->stats, malformed, 1);
        return false;
    }
    struct uln_rel *r = &up->rel;
    if (uln_rel_state(r) != ULN_REL_OPEN ||
        h.tag != conn_tag(ep->ctx->job_key, r->peer_epoch, r->local_epoch)) {
        /* Another job, or a life of either side that is over. */
        ULN_COUNT(&ep->stats, stale, 1);
        return false;
    }
    if (uln_msg_packet(type)->ordered && type != PKT_ACK && (int32_t)(h.seq - r->rcv_cum) > 0 &&
        ue->held >= ue->pool_bufs / 2) {
        /* A packet ahead of order that would have to wait in a pool buffer,
         * with half the pool already waiting: drop it before rel counts it,
         * as if the link had lost it (it will be resent; rel is told, so
         * that the resends come one round trip apart, not one timeout).
         * Holding it could leave no buffer for the very packet that fills
         * the hole. Only ahead: a copy of a seq we have costs no buffer,
         * and rel answers it - dropped here, a sender whose ACK was lost
         * would resend it into silence until it declared us dead. */
        uln_rel_rx_dropped(r, h.seq);
        ULN_COUNT(&ep->stats, pkts_dropped, 1);
        return false;
    }
    struct uln_rel_pkt p = {.src_epoch = r->peer_epoch,
                            .dst_epoch = r->local_epoch,
                            .seq = h.seq,
                            .flags =
                                (uint16_t)(h.flags & (ULN_REL_DATA | ULN_REL_FB | ULN_REL_RETX))};
    if (h.flags & ULN_REL_FB) p.fb = (struct uln_rel_fb){.ack = h.ack, .credit = h.credit};
    if (later) p.flags |= ULN_REL_SAME_DGRAM; /* feedback paced by datagrams */
    int v = uln_rel_rx(r, &p, ue->now);
    drain_acked(up);
    bool kept = false;
    if (v == ULN_REL_RX_DELIVER || v == ULN_REL_RX_HOLD) {
        sender_seen(ep, up);
        kept = arrive(ep, up, h.seq, rx, share, &h, (unsigned)elen);
        if (v == ULN_REL_RX_DELIVER) {
            if (up->pend_n == 0) up->pend_seq = h.seq;
            up->pend_n++;
            uint32_t seq;
            while (uln_rel_rx_next(r, &seq))
                up->pend_n++; /* consecutive: the held ones right after it */
            deliver_pending(ep, up);
        }
    } else {
        after_verdict(ep, up, v);
    }
    return kept;
}

/* One datagram: a packet, or a bundle (bundle_small, bundle_answers): packets
 * with PKT_MORE, each as long as its header says, then the last, which must
 * end where the datagram does (rx_one). Each is whole, with its own header
 * and seq, taken in the order sent. A packet that waits for its turn keeps
 * its bundle's buffer through a share, counted here before it is taken and
 * given back if it did not keep it. Returns true if the buffer is kept for
 * later. */
static bool rx_datagram(struct uln_ep *ep, const struct uln_link_rx *rx)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ULN_COUNT(&ep->stats, pkts_received, 1);
    if (rx->len < sizeof(struct pkt_hdr) || !(rx->buf[1] & PKT_MORE))
        return rx_one(ep, rx, 0, false);
    uint32_t sh = share_open(ue, rx->handle);
    if (!sh) { /* cannot happen: a share per buffer the link lends */
        ULN_COUNT(&ep->stats, pkts_dropped, 1);
        return false;
    }
    struct uln_link_rx part = *rx;
    for (;;) {
        struct uln_link_rx one = part;
        bool more = part.len >= sizeof(struct pkt_hdr) && (part.buf[1] & PKT_MORE);
        if (more) {
            struct pkt_hdr h;
            memcpy(&h, part.buf, sizeof h);
            if (h.len < sizeof h || h.len > part.len - (uint32_t)sizeof h) {
                /* Shorter than a header, or no whole header after it: the
                 * rest of the datagram cannot be cut. Those before stand. */
                ULN_COUNT(&ep->stats, malformed, 1);
                break;
            }
            one.len = h.len;
        }
        ue->shares[sh - 1].refs++;
        if (!rx_one(ep, &one, sh, part.buf != rx->buf)) ue->shares[sh - 1].refs--;
        if (!more) break;
        part.buf += one.len;
        part.len -= one.len;
    }
    share_put(ue, sh); /* ours: the buffer goes back when no packet of it waits */
    return true;
}

/* Until a UDP peer has been met (a job whose peers are all on this host, or
 * none has spoken yet), a read of the socket is a system call that finds
 * nothing and costs more than a whole round trip over shm, which every
 * progress pass would pay, with two clock reads (slow in a VM) besides. Then
 * read it when ULN_UDP_QUIET_RX_NS have passed on the coarse clock (a read
 * of the vDSO's data, no timer: so at most once per tick, 1-4 ms), and at
 * the first pass after a sleep (poll_setup), when the socket may be why it
 * woke. Time, not a count of passes: passes can be milliseconds apart (a
 * barrier's idle slices), and a peer that hears nothing for ULN_UDP_DEAD_MS
 * gives us up. A first packet waits in the socket buffer a tick at most.
 * Meanwhile the engine calls us on one pass in ULN_QUIET_PASSES only
 * (progress_tx says we are quiet), which spares the other passes the calls
 * and the clock. */
#define ULN_UDP_QUIET_RX_NS 100000u
static bool rx_quiet_skip(struct uln_udp_ep *ue)
{
    if (ue->n_live) return false;
    uint64_t now = uln_coarse_ns();
    if (now < ue->rx_quiet_next) return true;
    ue->rx_quiet_next = now + ULN_UDP_QUIET_RX_NS;
    return false;
}

static void uln_udp_progress_rx(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->now_read = false;
    if (rx_quiet_skip(ue)) return;
    ue->in_pass = true; /* until progress_tx */
    /* A poll or wait ends a burst of posts, and the answers held for one. */
    uln_udp_flush(ep);
    /* Deliveries that waited for ring room (the application released NAPs). */
    for (int i = 0; i < ue->n_live; i++) {
        struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (!up->pend_n) continue;
        if (!ue->now_read) pass_clock(ue);
        deliver_pending(ep, up);
    }
    for (int round = 0; round < 4; round++) {
        int n = uln_link_recv(ue->io, ue->rxv, ULN_LINK_BATCH);
        if (n <= 0) break;
        /* The read's own time, not the pass's: the flush above can sit in
         * sendmmsg for milliseconds on a loaded host (the peer runs and
         * answers meanwhile), and feedback stamped before it gave RTT
         * samples of ~70 ns, a min_rtt that made every acknowledged
         * retransmission look like a delivery (RACK) and the window's
         * floor nothing. */
        pass_clock(ue);
        for (int i = 0; i < n; i++)
            if (!rx_datagram(ep, &ue->rxv[i])) uln_link_rx_release(ue->io, ue->rxv[i].handle);
        /* A short batch means the socket is (nearly) drained: one more empty
         * system call would only add latency. A GRO read returns one run of
         * ~44 datagrams, so "short" is well below that. */
        if (n < 16) break;
    }
}

/* ---- timers, resends, feedback ---------------------------------------------------- */

static void uln_udp_progress_tx(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    bool fresh = ue->now_read;
    ue->in_pass = ue->now_read = false; /* posts after the pass read the clock again */
    if (!ue->n_live && !ue->nbatch) {
        /* No peer met: no timer, nothing to send, only a first packet to
         * look out for (rx_quiet_skip), which a pass in ULN_QUIET_PASSES
         * does as well as every one. */
        uln_tp_quiet(ep, &uln_tp_udp);
        return;
    }
    if (!fresh) ue->now = uln_now_ns();
    bool reshare = false;
    for (int i = 0; i < ue->n_live; i++) {
        struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        reshare |= sender_quiet(ue, up);
        if (up->dead) continue;
        drain_acked(up);
        /* Nothing due (rel.h's contract: call in by the deadline): tick,
         * resend and ctrl would each find that again. A NAP's arrival owes
         * an ACK only after ack_delay, so the reply's path skips them. Not a
         * peer rel found dead in another call (a post's tx_ready, a read):
         * its deadline is "never", and the tick below is what gives it up. */
        if (uln_rel_state(&up->rel) != ULN_REL_DEAD && ue->now < uln_rel_next_deadline(&up->rel))
            continue;
        if (uln_rel_tick(&up->rel, ue->now) == ULN_REL_DEAD) {
            go_dead(ep, up);
            continue;
        }
        struct uln_rel_pkt p;
        while (uln_rel_tx_next_resend(&up->rel, ue->now, &p)) {
            struct tx_slot *t = &up->tx[p.seq & up->mask];
            if (!t->used) continue;
            send_data(ep, up, t, &p);
            ULN_COUNT(&ep->stats, retransmits, 1);
        }
        if (uln_rel_ctrl(&up->rel, ue->now, &p)) send_ctrl(ep, up, &p);
    }
    if (reshare) pool_reshare(ep); /* its window updates go at the next pass */
    if (hold_answers(ue))
        ue->answers_held = true; /* the next post, or the next pass, sends them */
    else
        uln_udp_flush(ep);
}

static bool uln_udp_busy(const struct uln_ep *ep)
{
    const struct uln_udp_ep *ue = udp_ep(ep);
    for (int i = 0; ue && i < ue->n_live; i++) {
        const struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (!up->dead && (uln_rel_tx_in_flight(&up->rel) || up->pend_n)) return true;
    }
    return ue && ue->nbatch;
}

/* What uln_cq_wait sleeps on for this endpoint: its link's sockets, and at
 * most until the earliest timer of its peers. */
static int uln_udp_poll_setup(struct uln_ep *ep, int *fds, int max, int *timeout_ms)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    int n = uln_link_fds(ue->io, fds, max);
    ue->rx_quiet_next = 0;        /* after the sleep, read what woke us (rx_quiet_skip) */
    uln_tp_busy(ep, &uln_tp_udp); /* ... in the first pass */
    uint64_t now = uln_now_ns(), next = UINT64_MAX;
    for (int i = 0; i < ue->n_live; i++) {
        const struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (up->dead) continue;
        uint64_t d = uln_rel_next_deadline(&up->rel);
        if (d < next) next = d;
        if (up->pend_n) next = now + 1000000; /* waiting for ring room: look again soon */
    }
    if (ue->nbatch) next = now; /* held packets go at the next pass */
    if (next != UINT64_MAX) {
        uint64_t ms = next <= now ? 0 : (next - now + 999999) / 1000000;
        if (ms < (uint64_t)*timeout_ms) *timeout_ms = (int)ms;
    }
    return n;
}

/* ---- for tests and fuzzing ---------------------------------------------------------
 * Not used by the library itself: they let tests (tests/forged, tests/fuzz) put
 * crafted bytes through the real receive path, and crafted packets on the wire
 * from a rank's real socket. Built only into the tests' library (ULN_TEST_HOOKS),
 * never into the shipped ones. */
#ifdef ULN_TEST_HOOKS

int uln_udp_rx_inject(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return -ENOTCONN;
    if (len > UINT32_MAX) return -EMSGSIZE;
    int32_t id = rank >= 0 && rank < ep->ctx->size ? ue->id_of_rank[rank] : -1;
    struct uln_link_rx rx;
    int rc = uln_link_rx_lend(ue->io, id, buf, (uint32_t)len, &rx);
    if (rc) return rc;
    ue->now = uln_now_ns();
    if (!rx_datagram(ep, &rx)) uln_link_rx_release(ue->io, rx.handle);
    return 0;
}

int uln_udp_conn_get(struct uln_ep *ep, int rank, struct uln_udp_conn *c)
{
    memset(c, 0, sizeof *c);
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    const struct uln_udp_peer *up = udp_peer(ep, rank);
    if (!up) return -ENOENT;
    const struct uln_rel *r = &up->rel;
    uint64_t job = ep->ctx->job_key, peer_key = ep->ctx->peer_recs[rank].key;
    *c = (struct uln_udp_conn){.state = uln_rel_state(r),
                               .dead = up->dead,
                               .local_epoch = r->local_epoch,
                               .peer_epoch = r->peer_epoch,
                               .tag_in = conn_tag(job, r->peer_epoch, r->local_epoch),
                               .tag_out = conn_tag(peer_key, r->local_epoch, r->peer_epoch),
                               .rcv_next = r->rcv_cum,
                               .snd_una = r->snd_una,
                               .snd_nxt = r->snd_nxt,
                               .snd_edge = r->snd_edge,
                               .rx_limit = r->rx_limit,
                               .rcv_edge = r->adv_edge,
                               .rel = r->stats};
    return 0;
}

int uln_udp_peer_restart(struct uln_ep *ep, int rank, uint32_t epoch)
{
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return -EHOSTUNREACH;
    struct uln_rel fresh;
    struct uln_rel_cfg cfg;
    rel_cfg(ep, &cfg);
    if (epoch == 0) epoch = new_epoch(udp_ep(ep));
    if (uln_rel_init(&fresh, &cfg, epoch, uln_now_ns()) != 0) return -ENOMEM;
    /* As after a death: what was in flight with the old life is void. */
    void_peer(ep, up, -ECONNRESET);
    uln_rel_fini(&up->rel);
    up->rel = fresh;
    up->dead = false;
    uln_rel_rx_limit(&up->rel, pool_share(udp_ep(ep), udp_ep(ep)->n_active), uln_now_ns());
    return 0;
}

int uln_udp_ep_addr(struct uln_ep *ep, int rank, struct sockaddr_storage *ss, socklen_t *len)
{
    struct uln_udp *u = udp_of(ep->ctx);
    if (!udp_ep(ep) || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    if (rank == ep->ctx->rank) return uln_link_local(udp_ep(ep)->io, ss, len);
    if (!udp_remote(ep->ctx, rank)) return -EINVAL;
    (void)u;
    dst_sockaddr(ep, rank, ss, len);
    return 0;
}

int uln_udp_send_raw(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || rank < 0 || rank >= ep->ctx->size || ue->id_of_rank[rank] < 0) return -EINVAL;
    uln_udp_flush(ep); /* what was queued before goes first */
    struct uln_link_pkt p = {.peer = ue->id_of_rank[rank], .niov = 1};
    p.iov[0] = (struct iovec){(void *)(uintptr_t)buf, len};
    int n = uln_link_send(ue->io, &p, 1);
    return n < 0 ? n : n == 1 ? 0 : -EAGAIN;
}

int uln_udp_send_seq(struct uln_ep *ep, int rank, const void *buf, size_t len)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue || rank < 0 || rank >= ep->ctx->size) return -EINVAL;
    struct uln_udp_peer *up = peer_get(ep, rank);
    if (!up) return -EHOSTUNREACH;
    if (up->dead) return -ECONNRESET;
    if (len < sizeof(struct pkt_hdr) || len > ue->payload_max) return -EMSGSIZE;
    ue->now = uln_now_ns();
    if (!can_send(ep, up, 1)) return -EAGAIN;
    struct pkt_hdr h;
    memcpy(&h, buf, sizeof h);
    int el = ext_len(h.vt & 15, h.flags);
    if (el < 0 || len < sizeof h + (unsigned)el) el = 0; /* the rest is all payload */
    uint32_t n = (uint32_t)(len - sizeof h - (unsigned)el);
    uint8_t *mem = slot_mem(ep, up, uln_rel_tx_next_seq(&up->rel));
    struct uln_rel_pkt p;
    struct tx_slot *t = assign(ep, up, (uint32_t)len, &p);
    if (!t) return -EAGAIN;
    t->h = h;
    memcpy(t->ext, (const uint8_t *)buf + sizeof h, (unsigned)el);
    t->ext_len = (uint8_t)el;
    if (n) memcpy(mem, (const uint8_t *)buf + sizeof h + el, n);
    t->data = mem; /* kept in the slot, so it is resent if lost */
    t->len = n;
    send_data(ep, up, t, &p);
    uln_udp_flush(ep);
    return 0;
}
#endif /* ULN_TEST_HOOKS */

/* ---- the transport's ops ---------------------------------------------------------- */

static int uln_udp_reaches(const struct uln_ctx *ctx, int peer)
{
    return udp_remote(ctx, peer) ? 2 : 0; /* better than shm for whom it claims */
}

static void uln_udp_query(const struct uln_ctx *ctx, struct uln_info *info)
{
    info->udp_window = ctx->p.udp_window;
    info->udp_dead_ms = ctx->p.udp_dead_ms;
    for (int p = 0; p < ctx->size; p++)
        info->udp_peers += ctx->peer_tp[p] == &uln_tp_udp;
}

/* After the engine committed packets: a GET request to an idle peer leaves at
 * once (uln_udp_commit said so); answers go at the end of the pass, together. */
static void uln_udp_kick(struct uln_ep *ep, int peer)
{
    (void)peer; /* one batch for all peers of the endpoint */
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue->kick_now) return;
    ue->kick_now = false;
    uln_udp_flush(ep);
}

const struct uln_transport_ops uln_tp_udp = {
    .name = "udp",
    .caps = ULN_TP_CAP_TARGET_CPU,
    .id = ULN_TPID_UDP,
    .open = uln_udp_open,
    .choose = uln_udp_choose,
    .learn = uln_udp_learn,
    .addr_pack = uln_udp_addr_pack,
    .addr_unpack = uln_udp_addr_unpack,
    .addr_str = uln_udp_addr_str,
    .close = uln_udp_close,
    .reaches = uln_udp_reaches,
    .query = uln_udp_query,
    .ep_open = uln_udp_ep_open,
    .ep_close = uln_udp_ep_close,
    .connect = uln_udp_attach,
    .reserve = uln_udp_reserve,
    .commit = uln_udp_commit,
    .send_nap = uln_udp_nap,
    .send_put = uln_udp_put,
    .serve_get = uln_udp_serve_get,
    .kick = uln_udp_kick,
    .peer_dead = uln_udp_peer_dead,
    .frag_max = uln_udp_frag_max,
    .progress_rx = uln_udp_progress_rx,
    .progress_tx = uln_udp_progress_tx,
    .busy = uln_udp_busy,
    .wait_fds = uln_udp_poll_setup,
};
