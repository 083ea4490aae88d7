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
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define ULN_HAVE_TSC 1
#endif

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

/* The CPU's time-stamp counter (~10 ns a read in this VM, against ~25 ns
 * for uln_now_ns's vDSO read), for one question only: "have fewer than
 * ULN_TSC_FRESH ns passed since I last read uln_now_ns?". Its rate is not
 * calibrated: every x86 CPU that runs ulnet ticks it at 1 GHz or more, so
 * ULN_TSC_FRESH ticks are at most as many nanoseconds (3.9 us at this VM's
 * 2.6 GHz). A counter that went back (another CPU, a migrated VM) answers
 * "no": read the clock. 0 where there is none (the caller then always
 * reads the clock). */
#define ULN_TSC_FRESH 10000u
static inline uint64_t uln_tsc(void)
{
#ifdef ULN_HAVE_TSC
    return __rdtsc();
#else
    return 0;
#endif
}

static inline int64_t uln_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
