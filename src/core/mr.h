/*
 * mr.h - memory: the key table peers read, the hazard protocol with
 * uln_mr_dereg, refusals, regions and uln_mem_alloc blocks (mr.c).
 */
#ifndef ULN_CORE_MR_H
#define ULN_CORE_MR_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ulnet.h"
#include "core/base.h"
#include "core/inbox.h"
#include "core/transport.h"

struct uln_ctx;

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

/* mr.c */
void uln_mr_close_all(struct uln_ctx *ctx);
int uln_mem_lookup(struct uln_ctx *ctx, const void *addr, size_t len, int *fd, uint64_t *off,
                   uint64_t *fd_len);
/* Own table, target side: hold the hazard slot while checking and copying. */
int uln_key_enter(struct uln_ctx *ctx, int ep_index, uint64_t key, uint64_t off, uint64_t len,
                  unsigned need, uint8_t **where, struct uln_stats *st);
void uln_key_leave(struct uln_ctx *ctx, int ep_index);

#endif
