/*
 * atomic.c - remote atomics: the table of operations, and the target's side
 * of the ring path.
 *
 * Every atomic, whoever applies it, is one CPU atomic instruction (or a
 * compare-and-swap loop for min/max) on the word itself: the initiator on a
 * mapping of the target's memory (shm, memory from uln_mem_alloc), or the
 * target's engine on its own memory (the ring path, udp). So ops on one word
 * arriving by different transports at once are atomic against each other
 * and against the owner's own __atomic operations on it, with no lock and
 * no owner thread to serialise them.
 */
#include "core/internal.h"

/* The value min/max would store: true when v should replace old. */
static bool minmax_wins(unsigned op, uint64_t old, uint64_t v, unsigned width)
{
    int64_t so = width == 4 ? (int32_t)(uint32_t)old : (int64_t)old;
    int64_t sv = width == 4 ? (int32_t)(uint32_t)v : (int64_t)v;
    switch (op) {
    case ULN_ATOMIC_MIN:
        return v < old;
    case ULN_ATOMIC_MAX:
        return v > old;
    case ULN_ATOMIC_SMIN:
        return sv < so;
    default: /* ULN_ATOMIC_SMAX */
        return sv > so;
    }
}

/*
 * Memory order: seq_cst on every op. Atomicity alone needs only relaxed, but
 * a lock built on CSWAP/SWAP protects data the initiator then reads and
 * writes with GET/PUT (examples/lock.c): the acquiring op must not let later
 * accesses to the target's memory move before it, nor the releasing one let
 * earlier ones move after it. seq_cst gives both and orders ops on
 * different words the same for every observer; on x86 every locked
 * instruction is a full barrier, so it costs nothing over acq_rel there.
 */
#define ORD __ATOMIC_SEQ_CST

/* One op on a word of type T: the same body for both widths, so the 4- and
 * 8-byte cases cannot drift apart. */
#define DEFINE_APPLY(name, T)                                                                      \
    static uint64_t name(T *w, unsigned op, T v, T cmp)                                            \
    {                                                                                              \
        switch (op) {                                                                              \
        case ULN_ATOMIC_ADD:                                                                       \
            return __atomic_fetch_add(w, v, ORD);                                                  \
        case ULN_ATOMIC_SWAP:                                                                      \
            return __atomic_exchange_n(w, v, ORD);                                                 \
        case ULN_ATOMIC_CSWAP:                                                                     \
            /* On failure cmp receives the value found: the old value either way. */               \
            __atomic_compare_exchange_n(w, &cmp, v, false, ORD, ORD);                              \
            return cmp;                                                                            \
        case ULN_ATOMIC_AND:                                                                       \
            return __atomic_fetch_and(w, v, ORD);                                                  \
        case ULN_ATOMIC_OR:                                                                        \
            return __atomic_fetch_or(w, v, ORD);                                                   \
        case ULN_ATOMIC_XOR:                                                                       \
            return __atomic_fetch_xor(w, v, ORD);                                                  \
        default: { /* min/max: no instruction; CAS until the word holds the winner */              \
            T old = __atomic_load_n(w, ORD);                                                       \
            while (minmax_wins(op, old, v, sizeof(T)) &&                                           \
                   !__atomic_compare_exchange_n(w, &old, v, true, ORD, ORD))                       \
                ;                                                                                  \
            return old;                                                                            \
        }                                                                                          \
        }                                                                                          \
    }

DEFINE_APPLY(apply32, uint32_t)
DEFINE_APPLY(apply64, uint64_t)

uint64_t uln_atomic_apply(void *word, const struct uln_atomic_req *r)
{
    if (r->width == 4) return apply32(word, r->op, (uint32_t)r->operand, (uint32_t)r->compare);
    return apply64(word, r->op, r->operand, r->compare);
}

/* A request a peer sent: anything but a known op and width is malformed,
 * not a refusal of our memory. */
static int check_req(struct uln_ep *ep, const struct uln_atomic_req *r)
{
    if (uln_atomic_valid(r->op, r->width)) return 0;
    ULN_COUNT(&ep->stats, malformed, 1);
    return -EPROTO;
}

void uln_atomic_serve(struct uln_ep *ep, const struct uln_atomic_req *r,
                      struct uln_atomic_resp *out)
{
    *out = (struct uln_atomic_resp){.op_id = r->op_id};
    int rc = check_req(ep, r);
    if (rc) {
        out->status = rc;
        return;
    }
    uint8_t *where;
    rc = uln_key_enter(ep->ctx, ep->index, r->key, r->offset, r->width, ULN_ACCESS_REMOTE_ATOMIC,
                       &where, &ep->stats);
    if (rc) {
        out->status = rc; /* counted by uln_key_enter */
        return;
    }
    if ((uintptr_t)where & (r->width - 1u)) {
        rc = -EDOM;
        uln_count_refusal(&ep->stats, rc);
    } else {
        out->old = uln_atomic_apply(where, r);
        ULN_COUNT(&ep->stats, atomics_served, 1);
    }
    uln_key_leave(ep->ctx, ep->index);
    out->status = rc;
}
