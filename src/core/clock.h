/*
 * clock.h - ulnet's one clock: CLOCK_MONOTONIC, in nanoseconds for the
 * protocol's timers and the spin/sleep loops, in milliseconds for deadlines
 * and slices the bootstraps and idle waits count in. Monotonic, so a wall
 * clock step (NTP, settimeofday) never fires or stalls a timer.
 */
#ifndef ULN_CLOCK_H
#define ULN_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t uln_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The coarse clock, in nanoseconds: a read of the vDSO's data (~5 ns, no
 * time counter), in steps of the kernel's tick (1-4 ms). For the hot loop's
 * "now and then" (read a quiet socket once a tick), never for a timer. */
static inline uint64_t uln_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int64_t uln_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
