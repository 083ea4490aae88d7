/*
 * inbox.h - the process's inbox: one anonymous shared-memory object (memfd)
 * holding everything a peer needs to reach this process, whatever carries
 * its bytes:
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
 *   claims_off      per source slot: who writes it (a context with no job: its
 *                   peers claim slots themselves, see uln_inbox_claim)
 *   rings_off       per (source slot, endpoint): channel-0 ring, channel-1 ring.
 *                   In a job a slot is a rank, and rank r's endpoint i writes
 *                   the rings of our endpoint i; with no job a slot is one
 *                   (process life, endpoint) of a peer, writing to any of ours
 *
 * A peer on this host maps the whole object and writes the rings itself
 * (transport/shm.c); a packet transport's receive path writes the same rings
 * for its peers through uln_inbox_deliver_*, so the engine reads every peer's
 * messages the same way. The accessors taking (base, hdr) work on any mapped
 * inbox, ours or a peer's; those taking ctx on ours.
 */
#ifndef ULN_INBOX_H
#define ULN_INBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ulnet.h" /* ULN_ADDR_MAX */
#include "core/ring.h"
#include "core/wire.h"

struct uln_ctx;
struct uln_params;

#define ULN_INBOX_MAGIC   0x756c6e657473686dull /* "ulnetshm" */
#define ULN_INBOX_VERSION 7u                    /* 7: claims hold ULN_ADDR_MAX = 128 */

struct uln_inbox_hdr {
    uint64_t magic, job_key;
    uint32_t version, rank, size, max_eps;
    uint32_t ring_bytes, req_ring_bytes, max_regions, pad0_;
    uint64_t keys_off, hazards_off, active_off, rings_off, pair_stride, total;
    uint64_t claims_off;
    int32_t pid;
    /* 1: our uln_mr_dereg issues membarrier(GLOBAL_EXPEDITED) between
     * clearing a key and reading the hazard slots, so a peer registered for
     * it may announce itself with a plain store (mr.c). Set before the
     * inbox is published, never changed. */
    int32_t dereg_fence;
    _Alignas(64) _Atomic uint32_t sleepers; /* own line: read by every producer (doorbell.c) */
    uint8_t pad2_[60];
    /* Accesses to our memory that an initiator on this host checked itself
     * on our key table (the direct path) and refused: counted here, at the
     * owner, as the ring path counts at the target (uln_counters: refused_*
     * means "to this process's memory" on every transport). Key, bounds,
     * access, alignment (an atomic's word). Peers add with a relaxed fetch_add: many writers, so it
     * must be an atomic RMW, and nothing is ordered by it (a statistic). */
    _Alignas(64) _Atomic uint64_t refused[4];
    /* Bumped after each bit newly set in an active bitmap (uln_inbox_mark_active):
     * an endpoint whose last look saw the same value skips reading its bitmaps,
     * which with no job is max_peers / 64 words per channel, every pass. Own line:
     * written a few times per peer in a life, read by every pass. */
    _Alignas(64) _Atomic uint32_t act_gen;
    /* Each endpoint index's life (struct uln_ep_slot): lives ended so far,
     * so the life that is open, or the next one. Written by the owner at
     * uln_ep_close (release), read by every producer before it writes to the
     * index (acquire, engine.c: out_reserve): read-mostly lines of their own. */
    _Alignas(64) _Atomic uint32_t ep_life[64];
};
_Static_assert(sizeof(struct uln_inbox_hdr) <= 4096, "header fits its page");

struct uln_inbox {
    int fd;
    uint8_t *base;
    size_t len;
    struct uln_inbox_hdr *hdr;
};

/* A slot's owner, in a context with no job. ident is written once, by a
 * compare-and-swap from 0: whoever comes first for an (owner key, endpoint)
 * - the inbox's owner inserting that peer, or the peer itself mapping the
 * inbox - takes the slot, and the other finds it, so both sides agree on
 * one slot with no message between them. */
struct uln_inbox_claim {
    _Atomic uint64_t ident; /* 0: free; else uln_inbox_ident(key, ep) */
    uint64_t key;           /* the writer's context key */
    int32_t ep;             /* the writer's endpoint index */
    int32_t pid;            /* the writer's pid; 0: not on this host (udp) */
    _Atomic uint32_t ready; /* 1 once addr is written (release): the owner may learn
                               the writer from it before inserting it (peer.c) */
    uint8_t addr_len;
    uint8_t pad0_[3];
    uint8_t addr[ULN_ADDR_MAX]; /* the writer's uln_addr */
    uint8_t pad1_[32];
};
_Static_assert(sizeof(struct uln_inbox_claim) == 192, "three cache lines per slot");

static inline uint64_t uln_inbox_ident(uint64_t key, int ep)
{
    uint64_t x = key ^ ((uint64_t)(uint32_t)ep + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x | 1; /* never 0, the free mark */
}

/* The slot of inbox (base, h) for (key, ep): found, or claimed now. Slot 0
 * is the owner's own and never given out. -ENOSPC: every slot is taken. */
int uln_inbox_claim(uint8_t *base, const struct uln_inbox_hdr *h, uint64_t key, int ep, int pid,
                    const void *addr, size_t addr_len);

/* Make this process's inbox (ctx->inbox, ctx->keys). */
int uln_inbox_open(struct uln_ctx *ctx);
void uln_inbox_close(struct uln_ctx *ctx);

/* Is a mapped peer inbox of len bytes, claiming to be rank's, laid out so
 * that every address computed from its header stays inside the mapping, with
 * settings that match ours? (The job key is checked apart: its refusal is
 * counted.) */
bool uln_inbox_hdr_ok(const struct uln_ctx *ctx, const struct uln_inbox_hdr *h, int rank,
                      size_t len);
/* The part of that which needs no context: the header is an inbox's, of
 * this version, and every address computed from it stays inside len bytes
 * (the service checks a process's inbox with it at attach). */
bool uln_inbox_layout_ok(const struct uln_inbox_hdr *h, size_t len);
struct uln_inbox_claim *uln_inbox_claim_at(uint8_t *base, const struct uln_inbox_hdr *h, int slot);

uint32_t uln_inbox_ring_bytes(int ch, const struct uln_params *p);
void *uln_inbox_ring_at(uint8_t *base, const struct uln_inbox_hdr *h, int src, int ep, int ch);
_Atomic uint32_t *uln_inbox_hazard_at(uint8_t *base, const struct uln_inbox_hdr *h, int src,
                                      int ep);
_Atomic uint64_t *uln_inbox_active_at(uint8_t *base, const struct uln_inbox_hdr *h, int ch, int ep);
_Atomic uint64_t *uln_inbox_attached_at(uint8_t *base, const struct uln_inbox_hdr *h);

/* Ours: the ring src writes to our endpoint ep on channel ch, the hazard slot
 * of (src, ep), the active bitmap of (ch, ep), the peers that mapped us. */
void *uln_inbox_ring_in(struct uln_ctx *ctx, int src, int ep, int ch);
_Atomic uint32_t *uln_inbox_hazard(struct uln_ctx *ctx, int src, int ep);
_Atomic uint64_t *uln_inbox_active(struct uln_ctx *ctx, int ch, int ep);
_Atomic uint64_t *uln_inbox_attached(struct uln_ctx *ctx);

/* Set rank's bit in an active (or attached) bitmap. A seq_cst RMW: the bit is
 * visible before any message that follows it and before the doorbell check
 * (doorbell.c), so the owner's next poll visits the ring. */
static inline void uln_inbox_mark(_Atomic uint64_t *map, int rank)
{
    atomic_fetch_or(&map[rank / 64], 1ull << (rank % 64));
}

/* The same for an active bitmap, and then, if the bit is new, the bump of
 * the inbox's act_gen (seq_cst RMW, after the bit's: an owner that sees the
 * new act_gen with its acquire load sees the bit; one that still sees the
 * old value looks again at its next pass, before it can see the message
 * that follows, which it finds only by visiting the ring). */
static inline void uln_inbox_mark_active(_Atomic uint64_t *map, _Atomic uint32_t *gen, int rank)
{
    uint64_t bit = 1ull << (rank % 64);
    if (!(atomic_fetch_or(&map[rank / 64], bit) & bit)) atomic_fetch_add(gen, 1);
}

/* A packet transport's way in: it hands the engine the messages whose order
 * matters by writing them, in order, into our own inbox rings for that peer
 * (the rings a peer on this host would write), so the engine's ring code
 * serves both alike. One feed per (endpoint, peer); its owner is the
 * endpoint's thread, the only producer of those rings. */
struct uln_inbox_feed {
    struct uln_ring_prod prod[2];
    _Atomic uint64_t *active[2]; /* our active bitmaps of that endpoint */
    _Atomic uint32_t *act_gen;   /* our inbox's */
    int src;
    bool marked[2];
    uint32_t life; /* of the endpoint: the ULN_MSG_LIFE mark that goes first */
    bool life_sent[2];
};
void uln_inbox_feed_init(struct uln_inbox_feed *f, struct uln_ctx *ctx, int src, int ep);
/* Room for a message of len bytes on channel ch, or NULL (the engine has not
 * taken enough yet: try again later, the ring holds the sender back). */
static inline void *uln_inbox_feed_reserve(struct uln_inbox_feed *f, int ch, uint32_t len)
{
    if (__builtin_expect(!f->life_sent[ch], 0)) {
        /* What an earlier life of the endpoint left is not ours (ep.c). */
        if (!uln_ring_reserve(&f->prod[ch], 0)) return NULL;
        uln_ring_commit(&f->prod[ch], ULN_MSG_LIFE, 0, 0, f->life);
        f->life_sent[ch] = true;
    }
    return uln_ring_reserve(&f->prod[ch], len);
}
/* Publish the reserved message; the first one of a channel also makes the
 * engine poll that ring from now on. */
static inline void uln_inbox_feed_commit(struct uln_inbox_feed *f, int ch, uint8_t type,
                                         uint32_t len)
{
    uln_ring_commit(&f->prod[ch], type, 0, len, 0);
    if (__builtin_expect(!f->marked[ch], 0)) {
        uln_inbox_mark_active(f->active[ch], f->act_gen, f->src);
        f->marked[ch] = true;
    }
}

#endif
