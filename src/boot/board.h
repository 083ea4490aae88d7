/*
 * The bootstrap board: how processes started by ulnrun on one host find each
 * other. ulnrun creates an anonymous shared-memory object (memfd) sized by
 * uln_board_bytes(n), zero-filled, and leaves it open in every rank under the
 * number given in ULN_BOOT_FD. Because the object has no name, nothing can be
 * left behind in /dev/shm however the job ends.
 *
 * Each rank writes its slot (its address: pid and the descriptor numbers of its
 * own shared objects) and then counts itself in; everybody waits on a futex
 * until all have arrived. The same counters serve uln_barrier.
 */
#ifndef ULN_BOOT_BOARD_H
#define ULN_BOOT_BOARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "boot/boot.h"

#define ULN_BOARD_MAGIC      0x756c6e626f617264ull /* "ulnboard" */
#define ULN_BOARD_SLOT_BYTES 256u
#define ULN_BOARD_MAX_RANKS  ULN_BOOT_MAX_RANKS

struct uln_board_hdr {
    uint64_t magic;             /* written by the creator */
    uint32_t nranks;            /* written by the creator */
    uint32_t slot_bytes;        /* written by the creator */
    _Atomic uint32_t arrived;   /* ranks that have published their slot */
    _Atomic uint32_t bar_count; /* ranks inside the current barrier */
    _Atomic uint32_t bar_gen;   /* barrier generation: futex word */
    uint32_t pad_;
};

/* One rank's published address: opaque to the board, filled by the transport. */
struct uln_board_slot {
    _Atomic uint32_t ready; /* 1 once the rest of the slot is written (release) */
    int32_t pid;
    uint8_t addr[ULN_BOARD_SLOT_BYTES - 8];
};

_Static_assert(sizeof(((struct uln_board_slot *)0)->addr) == ULN_BOOT_ADDR_BYTES,
               "boot.h's address size is a slot's");

static inline size_t uln_board_bytes(unsigned nranks)
{
    return 4096 + (size_t)nranks * ULN_BOARD_SLOT_BYTES;
}

/* Rank r's slot; r < nranks is the caller's to check. */
static inline struct uln_board_slot *uln_board_slot(struct uln_board_hdr *b, int r)
{
    return (struct uln_board_slot *)((uint8_t *)b + 4096 + (size_t)r * ULN_BOARD_SLOT_BYTES);
}

/* A slot's wire form, as the bootstraps that carry slots between hosts
 * (root.c, pmix.c) send it: the pid big-endian, then the address. It sits
 * where the slot's pid and address do, so it is received in place. */
#define ULN_BOARD_SLOT_WIRE (ULN_BOARD_SLOT_BYTES - 4u)
_Static_assert(offsetof(struct uln_board_slot, pid) == 4 &&
                   offsetof(struct uln_board_slot, addr) == 8,
               "a slot after `ready` is pid + address, as on the wire");

static inline uint8_t *uln_board_slot_wire(struct uln_board_slot *s)
{
    return (uint8_t *)s + offsetof(struct uln_board_slot, pid);
}

/* A slot whose wire form is in place: the pid in host order, and visible. */
static inline void uln_board_slot_ready_wire(struct uln_board_slot *s)
{
    const uint8_t *w = uln_board_slot_wire(s);
    s->pid = (int32_t)((uint32_t)w[0] << 24 | (uint32_t)w[1] << 16 | (uint32_t)w[2] << 8 | w[3]);
    /* Release: pairs with the acquire in uln_boot_peer - the pid and address
     * are written before a reader can see the slot ready. */
    atomic_store_explicit(&s->ready, 1, memory_order_release);
}

/* Create a zeroed board for nranks ranks; returns an fd without close-on-exec,
 * or -errno. Internal: ulnrun links the static library to reach it. */
int uln_board_create(unsigned nranks);

#endif
