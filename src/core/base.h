/*
 * base.h - what every object of the core shares: hints, limits, and the
 * statistics each endpoint and context count (core/internal.h includes it).
 */
#ifndef ULN_CORE_BASE_H
#define ULN_CORE_BASE_H

#include <stdatomic.h>
#include <stdint.h>

#define ULN_EXPORT      __attribute__((visibility("default")))
#define ULN_LIKELY(x)   __builtin_expect(!!(x), 1)
#define ULN_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define ULN_INLINE_MAX      128u   /* payload bytes kept inside a send-queue entry */
#define ULN_REQ_RING_BYTES  16384u /* channel-1 ring (GET requests) */
#define ULN_KEY_INDEX_SHIFT 40     /* key = index << 40 | 40-bit random magic */
#define ULN_KEY_MAGIC_MASK  ((1ull << ULN_KEY_INDEX_SHIFT) - 1)
#define ULN_NO_DIRECT       1 /* ops->direct: use the rings instead */

/* Statistics: each counter has one writer thread, so a relaxed load+store is
 * enough (no locked instruction on the data path) and readers see whole values. */
#define ULN_COUNT(p, field, n)                                                                     \
    atomic_store_explicit(&(p)->field,                                                             \
                          atomic_load_explicit(&(p)->field, memory_order_relaxed) + (n),           \
                          memory_order_relaxed)

struct uln_stats {
    _Atomic uint64_t naps_sent, naps_received, puts, gets, bytes_put, bytes_got, eagain;
    _Atomic uint64_t refused_key, refused_bounds, refused_access, refused_job, malformed;
    _Atomic uint64_t cache_hits, cache_misses, sleeps, wakeups_sent;
    _Atomic uint64_t pkts_sent, pkts_received, retransmits, duplicates, stale, peers_dead;
    _Atomic uint64_t pkts_dropped, atomics, atomics_served, refused_align;
    _Atomic uint64_t refused_stale_ep, refused_auth;
};

#endif
