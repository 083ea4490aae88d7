/*
 * transport.h - the seam between the core and the transports.
 *
 * The core (ctx, ep, engine, cq, progress, mr) never names a transport: each
 * peer of an endpoint holds the ops of the one that reaches it
 * (ep->peers[p].tp, chosen once per context in ctx.c), and the engine calls
 * through them only where the work is the transport's own. What a transport
 * can do is said by capability bits the engine tests inline, so the fast path
 * of a transport that writes the peer's rings itself (ULN_TP_CAP_RINGS) costs
 * no call beyond the doorbell. Like UCT's iface ops and libfabric's provider
 * ops: a table per transport, optional entries NULL.
 *
 * Threads: the context ops run under uln_open/uln_close; the endpoint ops on
 * the endpoint's thread (the thread rule), so a transport keeps its
 * endpoint state unlocked.
 */
#ifndef ULN_TRANSPORT_H
#define ULN_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct uln_ctx;
struct uln_ep;
struct uln_ep_peer;
struct uln_sqe;
struct uln_info;
struct uln_atomic_req;
struct uln_get_req;
struct uln_settings_group;

/* PUT/GET copy straight to/from the target's memory (ops->direct), with no
 * work for the target. */
#define ULN_TP_CAP_DIRECT_RMA 0x1u
/* Every PUT/GET needs the target's CPU: the target places and serves them
 * (the ring path's protocol); ops->send_put sends a PUT's fragments. */
#define ULN_TP_CAP_TARGET_CPU 0x2u
/* Messages go straight into the rings of the peer's inbox that connect
 * mapped (pp->out): the engine writes them itself, and only the peer writes
 * the rings we read from it (it must be woken when we give room back). */
#define ULN_TP_CAP_RINGS 0x4u
/* uln_info's ULN_CAP_* are these very bits (uln_query reports them). */
_Static_assert(ULN_TP_CAP_DIRECT_RMA == ULN_CAP_DIRECT_RMA &&
                   ULN_TP_CAP_TARGET_CPU == ULN_CAP_TARGET_CPU && ULN_TP_CAP_RINGS == ULN_CAP_RINGS,
               "uln_info's capability bits are the transports'");

#define ULN_TP_MAX 8 /* transports built in, at most (uln_transports) */

/* The scale of reaches()'s costs: a store into mapped memory and a doorbell;
 * a datagram through the kernel's stack to another host. */
#define ULN_TP_COST_MEMORY  500
#define ULN_TP_COST_NETWORK 10000

/* A registered region as the transports' memory hooks see it (mr.c). */
struct uln_tp_region {
    void *addr;
    size_t len;
    unsigned access; /* ULN_ACCESS_* and ULN_MR_* */
    uint64_t key;    /* what peers will name it by; live only once every transport took it */
    uint32_t index;  /* its entry in our key table (key >> ULN_KEY_INDEX_SHIFT) */
    int memfd;       /* the uln_mem_alloc block it lies in (our descriptor), -1: other memory */
    uint64_t memfd_off, memfd_len; /* where in that block it starts; the block's size */
};

struct uln_transport_ops {
    const char *name; /* as uln_query's transport string says it; ULN_TRANSPORT=<name> */
    /* Optional, NULL-terminated: other names ULN_TRANSPORT may give it (udp:
     * "xdp", which is udp with ULN_LINK=xdp). */
    const char *const *aliases;
    unsigned caps; /* ULN_TP_CAP_* */
    /* Its service writes GET data straight into the initiator's buffer:
     * GET requests carry a struct uln_get_dst (wire.h), and a GET_RESP with
     * ULN_RESP_PLACED completes one whose bytes are all there. Not a cap:
     * nothing a user asks about (uln_info's caps are those bits). */
    bool get_placed;
    unsigned id; /* its place in uln_transports: ctx->tp_ctx[id], ep->tp_ep[id] */
    /* Its part of a rank's board slot: what open publishes there, what
     * addr_unpack fills, what it reads of a peer's slot (uln_tp_part). The
     * registry places the parts (uln_tp_slot_off): no transport knows
     * where another's is. */
    unsigned slot_bytes;
    /* Optional: its settings (core/params.h: table, parameter block, how
     * to read them), and through them its links'. Checked at every uln_open
     * whether the transport is used or not; read with uln_params_block. */
    const struct uln_settings_group *settings;

    /* -- context -- */
    /* Before our address is published: set up what the context needs and
     * write how peers reach us into its part of the board slot (slot,
     * slot_bytes long). A transport not needed in this job keeps no state and
     * reaches nobody. 0 or -errno. */
    int (*open)(struct uln_ctx *ctx, void *slot, size_t slot_len);
    /* Once every rank's address is known: make the per-peer tables (ctx->size
     * entries); learn is then called for every peer on the board. */
    int (*choose)(struct uln_ctx *ctx);
    /* Optional: peer's board slot is filled (at uln_open in a job; by
     * uln_peer_insert, or a peer's first contact, otherwise): learn how to
     * reach it. A peer id is never given to another peer (inbox.h: slots are
     * never freed). 0 or -errno. */
    int (*learn)(struct uln_ctx *ctx, int peer);
    /* uln_addr's parts (peer.c): write our part of this context's address,
     * compactly, into out (at most room bytes); 0 bytes: nothing to say. */
    size_t (*addr_pack)(const struct uln_ctx *ctx, uint8_t *out, size_t room);
    /* ... and turn a peer's part back into its part of a board slot. host is
     * the peer's uln_host_id. 0, or -EADDRNOTAVAIL if malformed. */
    int (*addr_unpack)(const uint8_t *in, size_t len, uint64_t host, void *slot, size_t slot_len);
    /* ... and say what a (well-formed, unpacked without error) part holds,
     * for people: snprintf's contract. */
    int (*addr_str)(const uint8_t *in, size_t len, char *out, size_t room);
    /* Optional: its part in the short address form (ulnet.h, ULN_ADDR_SHORT;
     * peer.c), short_bytes long. The short form holds these parts in id
     * order, and stands for a full address with exactly those parts.
     * short_pack: the part (len bytes, as addr_pack wrote it) at out, in
     * short_bytes, or in short_bytes + short_seal_bytes when it carries
     * sealing state (ULN_SECURE: the sealed short form, ULN_ADDR_SHORT_SEALED);
     * the bytes written, or -ENOSPC when it has no short form (a value too
     * wide, another family). short_unpack: the short bytes at in (sealed: the
     * longer ones) back into the full part at out (room bytes); its length,
     * or 0 if it does not fit or is malformed. */
    unsigned short_bytes, short_seal_bytes;
    int (*short_pack)(const uint8_t *part, size_t len, uint8_t *out);
    size_t (*short_unpack)(const uint8_t *in, bool sealed, uint8_t *out, size_t room);
    void (*close)(struct uln_ctx *ctx); /* also after a failed open */
    /* Whether it reaches peer, and at what cost: 0 not at all, else about
     * what a small message to it takes one way, in nanoseconds (the order of
     * magnitude is what counts: ULN_TP_COST_*). Each transport says its own,
     * knowing no other: the cheapest carries the peer (ties: registry
     * order), unless ULN_TRANSPORT names one (uln_tp_named), which then
     * carries every peer it reaches. */
    int (*reaches)(const struct uln_ctx *ctx, int peer);
    /* Its part of uln_query (counters of its peers, its settings). */
    void (*query)(const struct uln_ctx *ctx, struct uln_info *info);
    /* Optional: its i-th fact for uln_query_key (0, 1, ...): its name,
     * without the transport's (the core adds "<name>."), into key and its
     * value as text into val (each snprintf's contract); -ENOENT past the
     * last. Its settings in force, what it found, its counters. */
    int (*info)(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen, char *val,
                size_t vlen);
    /* Optional: what of caps its settings leave it in this context (a path
     * turned off); NULL: caps. For uln_query's caps_all and caps_any. */
    unsigned (*caps_in_force)(const struct uln_ctx *ctx);

    /* -- memory (optional; as UCX's md mem_reg / mem_dereg) --
     * A transport that must tell someone of a region (a host service that
     * places into it, a device's translation table) does it here. mr.c calls
     * mem_reg of every transport open in the context (one that kept state:
     * ctx->tp_ctx[id] set) at uln_mr_reg, in registry order, under the
     * context lock (so: no ulnet call from it) and before the key is live: no
     * peer can use the key until every transport took the region. *state:
     * the transport's own per-region state, handed back to mem_dereg. 0, or
     * -errno: uln_mr_reg fails with it, and the transports that took the
     * region already are given mem_dereg (in reverse order), so nothing of it
     * stays anywhere. */
    int (*mem_reg)(struct uln_ctx *ctx, const struct uln_tp_region *r, void **state);
    /* At uln_mr_dereg (and uln_close, for the regions left), in reverse
     * registry order: after the key is gone and no peer of this host is
     * inside the region any more, before the memory is the user's again.
     * It cannot fail: what the transport cannot undo it must make harmless
     * (a service's late packet for the region is refused by the key check).
     * There is no rkey_pack / rkey_unpack: a remote key is one 64-bit number
     * every transport carries as it is (table index and magic, checked at
     * the target's key table by whoever touches the memory); what else a
     * transport needs of a region stays at the target, in *state, found by
     * the key's index. */
    void (*mem_dereg)(struct uln_ctx *ctx, const struct uln_tp_region *r, void *state);

    /* -- endpoint -- */
    /* Per-endpoint state in ep->tp_ep[id] (NULL: none needed). 0 or -errno. */
    int (*ep_open)(struct uln_ep *ep);
    /* Called when ep->tp_ep[id] is set, before any peer_free: it may free
     * (and clear) pp->tp_peer itself when that needs the endpoint state. */
    void (*ep_close)(struct uln_ep *ep);
    /* Optional: free what pp->tp_peer still holds (the endpoint closes). */
    void (*peer_free)(struct uln_ep *ep, struct uln_ep_peer *pp);

    /* -- a peer -- */
    /* First use of peer from this endpoint: reach it (map its inbox, make
     * the connection state). 0, or -errno: operations to it fail with that.
     * With ULN_TP_CAP_RINGS it fills pp->out, pp->act_map and pp->act_gen. */
    int (*connect)(struct uln_ep *ep, int peer);
    /* Without ULN_TP_CAP_RINGS: room for a message of len bytes on channel
     * ch to peer, or NULL (no room now: the transport set ep->blocked), then
     * send it. commit must follow a successful reserve at once. */
    void *(*reserve)(struct uln_ep *ep, int peer, int ch, uint32_t len);
    void (*commit)(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags, uint32_t len);
    /* Optional: send a whole NAP its own way (several packets on consecutive
     * sequence numbers). Its len bytes are iov[0..iovcnt) concatenated (one
     * buffer for uln_nap, uln_napv's segments): gathered straight into what
     * the transport sends, so a NAP is copied once either way. False: no room
     * now, try again. */
    bool (*send_nap)(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt,
                     uint32_t len);
    /* Operations a transport completes later (when the target says so, or a
     * device does): it keeps the op_id of what it was handed (s->op_id) and
     * calls uln_engine_complete(ep, peer, op_id, op, status) from its
     * progress; until then the user's buffers stay the transport's to read.
     * The engine's ACK (which udp feeds into our rings) completes PUTs
     * through the same call. */
    /* With ULN_TP_CAP_TARGET_CPU: send what the budget allows of PUT s as
     * fragments the target places. True when its last fragment has gone. */
    bool (*send_put)(struct uln_ep *ep, struct uln_sqe *s, uint32_t *budget);
    /* Optional: answer GET request r from peer itself, with the data of our
     * region put on the wire without a copy into send slots, at most what
     * the budget allows (*sent: bytes answered so far, advanced). It checks
     * the key (uln_key_enter) and answers a refusal itself. True when the
     * answer is complete (every byte sent, or refused); false: more later
     * (budget spent, or no room now: the transport set ep->blocked). */
    bool (*serve_get)(struct uln_ep *ep, int peer, const struct uln_get_req *r, uint64_t *sent,
                      uint32_t *budget);
    /* With ULN_TP_CAP_DIRECT_RMA: copy len bytes between the local segments
     * (nlocal of them, len in all, empty ones with any base among them: one
     * for uln_put/uln_get) and the
     * peer's region (rkey, roff) now, once the key allows span >= len bytes
     * from roff (the rest of the operation: one that would run past the end
     * moves no byte, not even its first chunks). 0, -errno, or ULN_NO_DIRECT:
     * not this way (the operation takes the ring path). */
    int (*direct)(struct uln_ep *ep, int peer, bool write, const struct iovec *local, int nlocal,
                  uint64_t len, uint64_t span, uint64_t rkey, uint64_t roff);
    /* Optional, with ULN_TP_CAP_DIRECT_RMA: apply atomic r to the peer's
     * word now, with a CPU atomic on the mapped word, the old value into
     * *old. 0, -errno, or ULN_NO_DIRECT: not this way (the target's engine
     * applies it: the ring path). */
    int (*atomic)(struct uln_ep *ep, int peer, const struct uln_atomic_req *r, uint64_t *old);
    /* After sending to peer: make it see what was sent (ring its doorbell,
     * send the batched packets). */
    void (*kick)(struct uln_ep *ep, int peer);
    /* Optional, without ULN_TP_CAP_RINGS: we gave back room in a ring of
     * ours that someone other than our own receive path writes for peer
     * (the host service), and that producer asked to be told. */
    void (*room)(struct uln_ep *ep, int peer);
    /* Has peer died? ep NULL: the process (a peer that mapped our inbox),
     * not one endpoint's connection. */
    bool (*peer_dead)(struct uln_ctx *ctx, struct uln_ep *ep, int peer);
    /* Optional: ep's operations on peer wait for its answer and have not
     * moved for a while (engine.c: check_peers). A transport that finds
     * deaths by silence makes sure this wait counts as one (udp: rel asks
     * the peer whether it lives), so that a peer that took a request and
     * died is found dead instead of awaited forever. */
    void (*peer_watch)(struct uln_ep *ep, int peer);
    /* Largest data part of one GET_RESP or PUT_FRAG message to peer. */
    uint32_t (*frag_max)(struct uln_ep *ep, int peer);

    /* -- endpoint progress (optional: only transports with ep state) --
     * A transport with nothing to do on an endpoint (no peer met, nothing
     * queued: only the first packet of a peer to look out for) says so with
     * uln_tp_quiet (internal.h). While every progressing transport is
     * quiet, the engine runs their progress_rx and progress_tx on one pass
     * in ULN_QUIET_PASSES and spares the others the calls. A transport ends
     * its quiet itself (uln_tp_busy) as soon as it has a peer or queues a
     * packet, and before a sleep (wait_fds), so the first pass after waking
     * looks at what woke it. */
    void (*progress_rx)(struct uln_ep *ep); /* before the engine reads the rings */
    void (*progress_tx)(struct uln_ep *ep); /* after it issued: timers, resends */
    bool (*busy)(const struct uln_ep *ep);  /* work waiting on a peer */
    /* What a sleeper waits on besides the doorbell: up to max fds into fds
     * (how many), and *timeout_ms lowered to its earliest timer. For one
     * poll() per sleep; a CQ's epoll set (uln_cq_fd) keeps them, at the
     * kernel's cost of a wake-up callback per packet they receive. */
    int (*wait_fds)(struct uln_ep *ep, int *fds, int max, int *timeout_ms);
};

/* One pass in this many runs a quiet transport's hooks (internal.h:
 * uln_tp_quiet). 64 empty passes take a few microseconds; a first packet
 * waits in the socket that much longer at most. */
#define ULN_QUIET_PASSES 64u

/* Every transport built in, NULL-terminated (transport/transports.c). */
extern const struct uln_transport_ops *const uln_transports[];

/* ctx.c: open every transport, then give each peer the one reaching it
 * best. */
int uln_transports_open(struct uln_ctx *ctx, void *slot, size_t slot_len);
/* Where transport id's part of a board slot starts: after the parts of those
 * before it in uln_transports, each on 8-byte words of its own: a slot is read
 * once per peer, so its parts need no cache lines of their own, and packed they
 * leave room in the slot (ULN_BOARD_SLOT_BYTES) for the next transport's. */
size_t uln_tp_slot_off(unsigned id);
/* Transport id's part of a peer's board slot (NULL: none). */
static inline const void *uln_tp_part(const void *slot, unsigned id)
{
    return slot ? (const uint8_t *)slot + uln_tp_slot_off(id) : NULL;
}
int uln_transports_choose(struct uln_ctx *ctx);
/* A peer's board slot changed (uln_peer_insert): every transport learns it and
 * the best one is given the peer (ctx->peer_tp). 0 or -EHOSTUNREACH. */
int uln_transports_learn(struct uln_ctx *ctx, int peer);
void uln_transports_close(struct uln_ctx *ctx);

#endif
