/*
 * ring.h - a single-producer/single-consumer ring of variable-length messages
 * in shared memory.
 *
 * The ring is a power-of-two array of 64-byte cells. A message occupies whole
 * consecutive cells and never wraps: when it would, the producer first fills the
 * end of the ring with a PAD message. Its payload is therefore contiguous, so the
 * consumer can hand out a pointer to it in place (a NAP's "no copy" receive).
 *
 * Who writes what (so each cache line has one writer):
 *   - cells: the producer writes a message, the consumer later zeroes the first
 *     word of every cell it gives back (see uln_ring_release);
 *   - ctrl.head: the consumer only: how far the ring has been given back.
 * The producer's own position (tail) is private to it: the consumer finds new
 * messages by the stamp in their first word, so it never reads a shared tail.
 * A one-cell message therefore costs one cache-line transfer.
 *
 * The stamp of a message at absolute byte position pos is a nonzero value
 * derived from pos. A cell the consumer has not been given yet holds 0 (fresh
 * memory, or zeroed when given back), so a stale payload byte pattern can never
 * look like a message.
 */
#ifndef ULN_RING_H
#define ULN_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ULN_CELL           64u
#define ULN_RING_LIKELY(x) __builtin_expect(!!(x), 1)

enum { ULN_MSG_PAD = 0xff, ULN_MSG_RELEASED = 0xfe };

/* Header of every message; payload follows (16 bytes in). */
struct uln_msg {
    _Atomic uint32_t stamp; /* written last by the producer (release) */
    uint16_t cells;         /* cells the message occupies, >= 1 */
    uint8_t type;           /* engine message type, or ULN_MSG_PAD */
    uint8_t flags;
    uint32_t len; /* payload bytes */
    uint32_t aux; /* meaning depends on type */
};
#define ULN_MSG_HDR ((uint32_t)sizeof(struct uln_msg))
_Static_assert(sizeof(struct uln_msg) == 16, "message header is 16 bytes");

/* Shared control block, one cache line, placed right before the cells. */
struct uln_ring_ctrl {
    _Alignas(64) _Atomic uint64_t head; /* bytes given back by the consumer */
    /* Set by a producer that found the ring full; the consumer clears it and
     * wakes the producer when it gives space back. Same line as head, which
     * the consumer writes anyway, so checking it costs the consumer nothing. */
    _Atomic uint32_t prod_waiting;
    uint8_t pad_[52];
};
_Static_assert(sizeof(struct uln_ring_ctrl) == 64, "ring control is one line");

/* Private state of each side. */
struct uln_ring_prod {
    struct uln_ring_ctrl *ctrl;
    uint8_t *cells;
    uint64_t mask; /* bytes - 1 */
    uint64_t tail; /* next byte position to write */
    uint64_t head; /* last head seen: free space without touching the shared line */
};

struct uln_ring_cons {
    struct uln_ring_ctrl *ctrl;
    uint8_t *cells;
    uint64_t mask;
    uint64_t read; /* position of the next message to hand out */
    uint64_t head; /* everything before this is given back */
};

static inline uint32_t uln_ring_stamp(uint64_t pos)
{
    /* Top bit set: never 0, and distinct for 2^31 cells, far more than a ring. */
    return (uint32_t)((pos / ULN_CELL) & 0x7fffffffu) | 0x80000000u;
}

static inline size_t uln_ring_footprint(uint64_t bytes)
{
    return sizeof(struct uln_ring_ctrl) + bytes;
}

static inline void uln_ring_prod_init(struct uln_ring_prod *p, void *base, uint64_t bytes)
{
    p->ctrl = (struct uln_ring_ctrl *)base;
    p->cells = (uint8_t *)base + sizeof(struct uln_ring_ctrl);
    p->mask = bytes - 1;
    /* Acquire: pairs with the consumer's release of head, as in reserve. */
    p->tail = p->head = atomic_load_explicit(&p->ctrl->head, memory_order_acquire);
    /* A producer restarted on a live ring would not know the tail; rings are
     * only ever attached once per job, when head == tail == 0. */
}

static inline void uln_ring_cons_init(struct uln_ring_cons *c, void *base, uint64_t bytes)
{
    c->ctrl = (struct uln_ring_ctrl *)base;
    c->cells = (uint8_t *)base + sizeof(struct uln_ring_ctrl);
    c->mask = bytes - 1;
    /* The consumer is head's only writer and is attached once, before it has
     * given anything back, so head is 0: no need to read it. Not reading
     * matters: an endpoint attaches a consumer for every rank of the job, and
     * in shared memory even a read fault allocates a page, so reading would
     * cost every process two pages per rank and endpoint (8 MiB per endpoint
     * at 1024 ranks) for rings nobody may ever use. */
    c->read = c->head = 0;
}

static inline struct uln_msg *uln_ring_at(uint8_t *cells, uint64_t mask, uint64_t pos)
{
    return (struct uln_msg *)(cells + (pos & mask));
}

static inline int uln_ring_has_room(struct uln_ring_prod *p, uint64_t need)
{
    if (p->tail + need - p->head <= p->mask + 1) return 1;
    /* Acquire: the consumer's reads of the cells it gave back happen before we
     * overwrite them. */
    p->head = atomic_load_explicit(&p->ctrl->head, memory_order_acquire);
    return p->tail + need - p->head <= p->mask + 1;
}

static inline uint32_t uln_ring_cells_for(uint32_t payload)
{
    return (ULN_MSG_HDR + payload + ULN_CELL - 1) / ULN_CELL;
}

/*
 * Reserve room for a message with `payload` bytes. Returns where to write the
 * payload (header at ptr - 16) or NULL when the ring is full. Nothing is visible
 * to the consumer until uln_ring_commit.
 */
static inline void *uln_ring_reserve(struct uln_ring_prod *p, uint32_t payload)
{
    uint64_t bytes = p->mask + 1;
    uint64_t need = (uint64_t)uln_ring_cells_for(payload) * ULN_CELL;
    uint64_t to_end = bytes - (p->tail & p->mask);

    if (need > bytes) return NULL;
    if (need > to_end) {
        /* Wrap: pad the end of the ring so the message stays contiguous. */
        if (!uln_ring_has_room(p, to_end + need)) return NULL;
        struct uln_msg *pad = uln_ring_at(p->cells, p->mask, p->tail);
        pad->cells = (uint16_t)(to_end / ULN_CELL);
        pad->type = ULN_MSG_PAD;
        pad->flags = 0;
        pad->len = 0;
        pad->aux = 0;
        /* Release: the pad's fields are visible before its stamp. */
        atomic_store_explicit(&pad->stamp, uln_ring_stamp(p->tail), memory_order_release);
        p->tail += to_end;
    } else if (!uln_ring_has_room(p, need)) {
        return NULL;
    }
    return (uint8_t *)uln_ring_at(p->cells, p->mask, p->tail) + ULN_MSG_HDR;
}

/* Publish the message reserved last. */
static inline void uln_ring_commit(struct uln_ring_prod *p, uint8_t type, uint8_t flags,
                                   uint32_t len, uint32_t aux)
{
    struct uln_msg *m = uln_ring_at(p->cells, p->mask, p->tail);
    uint32_t cells = uln_ring_cells_for(len);
    m->cells = (uint16_t)cells;
    m->type = type;
    m->flags = flags;
    m->len = len;
    m->aux = aux;
    /* Release: payload and header are visible before the stamp that makes the
     * consumer read them. */
    atomic_store_explicit(&m->stamp, uln_ring_stamp(p->tail), memory_order_release);
    p->tail += (uint64_t)cells * ULN_CELL;
}

/* The header's 16-bit cell count limits any message to 65535 cells: this
 * much payload (4 MiB - 80 B), whatever the ring's size. */
#define ULN_RING_MSG_MAX (65535u * ULN_CELL - ULN_MSG_HDR)

/* Largest payload a ring of `bytes` can carry in one message. The header limits
 * a message to 65535 cells too. */
static inline uint32_t uln_ring_max_payload(uint64_t bytes)
{
    uint64_t cells = bytes / ULN_CELL;
    if (cells > 65535) cells = 65535;
    return (uint32_t)(cells * ULN_CELL - ULN_MSG_HDR);
}

/*
 * Next message, or NULL. Skips (and gives back) PAD messages. Returns NULL, and
 * sets *bad, for a header that cannot be right (the producer is broken).
 * The message stays the consumer's until uln_ring_release.
 */
static inline struct uln_msg *uln_ring_peek(struct uln_ring_cons *c, int *bad);
static inline bool uln_ring_release(struct uln_ring_cons *c, struct uln_msg *m);

static inline struct uln_msg *uln_ring_peek(struct uln_ring_cons *c, int *bad)
{
    for (;;) {
        struct uln_msg *m = uln_ring_at(c->cells, c->mask, c->read);
        /* Acquire: pairs with the producer's release in commit, so the header
         * and payload read below are the ones written before the stamp. */
        if (atomic_load_explicit(&m->stamp, memory_order_acquire) != uln_ring_stamp(c->read))
            return NULL;
        uint64_t room = (c->mask + 1) - (c->read & c->mask);
        if (m->cells == 0 || (uint64_t)m->cells * ULN_CELL > room ||
            (m->type != ULN_MSG_PAD &&
             ULN_MSG_HDR + (uint64_t)m->len > (uint64_t)m->cells * ULN_CELL)) {
            *bad = 1;
            return NULL;
        }
        c->read += (uint64_t)m->cells * ULN_CELL;
        if (m->type != ULN_MSG_PAD) return m;
        uln_ring_release(c, m);
    }
}

/* Give a message back. Messages may be given back in any order; space returns
 * to the producer in ring order. Returns true when space was returned to a
 * producer that is waiting for it (the caller should wake it). */
static inline bool uln_ring_release(struct uln_ring_cons *c, struct uln_msg *m)
{
    m->type = ULN_MSG_RELEASED;
    uint64_t old = c->head;
    while (c->head != c->read) {
        struct uln_msg *h = uln_ring_at(c->cells, c->mask, c->head);
        if (h->type != ULN_MSG_RELEASED) break;
        uint32_t cells = h->cells;
        /* Zero every cell's first word: a cell not yet rewritten must never
         * carry a stamp-like value (see the top of this file). */
        for (uint32_t i = 0; i < cells; i++)
            atomic_store_explicit(&((struct uln_msg *)((uint8_t *)h + i * ULN_CELL))->stamp, 0,
                                  memory_order_relaxed);
        c->head += (uint64_t)cells * ULN_CELL;
    }
    if (c->head == old) return false;
    /* Release: our reads of the messages and the zeroing happen before the
     * producer, acquiring head, writes the cells again. */
    atomic_store_explicit(&c->ctrl->head, c->head, memory_order_release);
    /* No fence between the store and this load: in the rare race where both
     * sides miss each other, the producer's bounded sleep slice recovers. */
    if (ULN_RING_LIKELY(!atomic_load_explicit(&c->ctrl->prod_waiting, memory_order_relaxed)))
        return false;
    atomic_store_explicit(&c->ctrl->prod_waiting, 0, memory_order_relaxed);
    return true;
}

/* The producer found no room: ask the consumer to say when there is. */
static inline void uln_ring_want_room(struct uln_ring_prod *p)
{
    atomic_store_explicit(&p->ctrl->prod_waiting, 1, memory_order_relaxed);
}

#endif
