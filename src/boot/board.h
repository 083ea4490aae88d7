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

#define ULN_BOARD_MAGIC      0x756c6e626f617264ull /* "ulnboard" */
#define ULN_BOARD_SLOT_BYTES 256u
#define ULN_BOARD_MAX_RANKS  4096u

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

static inline size_t uln_board_bytes(unsigned nranks)
{
    return 4096 + (size_t)nranks * ULN_BOARD_SLOT_BYTES;
}

/* Create a zeroed board for nranks ranks; returns an fd without close-on-exec,
 * or -errno. Internal: ulnrun links the static library to reach it. */
int uln_board_create(unsigned nranks);

#endif
