/*
 * probe.c - the log behind ULN_PROBE (probe.h); empty unless ULN_PROBES.
 */
#include "core/probe.h"

#ifdef ULN_PROBES
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"

#define PROBE_MAX (1u << 22) /* stamps kept: the first 4 M of a run */

struct probe_ev {
    uint64_t tsc;
    uint32_t point;
};

/* The log is made before main when ULN_PROBE_OUT is set (else every stamp
 * returns at once), so no two threads ever race to make it; each stamp takes
 * its place by an atomic add, so a process with a progress thread logs both
 * threads' stamps without losing or overrunning any (their order in the log
 * is that of the adds). What a read leaves for the RX that follows it is the
 * reading thread's own. */
static struct probe_ev *probe_log;
static _Atomic uint32_t probe_n;
static uint64_t probe_tsc0, probe_ns0;
static _Thread_local uint64_t probe_read, probe_read_prev; /* the last two reads' calls */
static _Thread_local uint64_t probe_empty;                 /* the last empty read's return */

static void probe_dump(void)
{
    uint64_t tsc1 = uln_tsc(), ns1 = uln_now_ns();
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", getenv("ULN_PROBE_OUT"), (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    /* Ticks per ns over the whole run: the table's unit. */
    fprintf(f, "tsc_per_ns %.6f\n", (double)(tsc1 - probe_tsc0) / (double)(ns1 - probe_ns0));
    uint32_t n = atomic_load(&probe_n);
    for (uint32_t i = 0; i < n && i < PROBE_MAX; i++)
        fprintf(f, "%u %llu\n", probe_log[i].point, (unsigned long long)probe_log[i].tsc);
    fclose(f);
}

__attribute__((constructor)) static void probe_init(void)
{
    if (!getenv("ULN_PROBE_OUT")) return;
    probe_log = calloc(PROBE_MAX, sizeof *probe_log);
    if (!probe_log) return;
    probe_tsc0 = uln_tsc();
    probe_ns0 = uln_now_ns();
    atexit(probe_dump);
}

/* Room for k stamps: where they go, or NULL when the log is full. */
static struct probe_ev *probe_room(uint32_t k)
{
    uint32_t i = atomic_fetch_add_explicit(&probe_n, k, memory_order_relaxed);
    return i + k <= PROBE_MAX ? &probe_log[i] : NULL;
}

void uln_probe_hit(enum uln_probe_point p)
{
    if (!probe_log) return;
    uint64_t t = uln_tsc();
    if (p == ULN_P_EMPTY) {
        probe_empty = t;
        return;
    }
    if (p == ULN_P_READ) {
        probe_read_prev = probe_read;
        probe_read = t;
        return;
    }
    bool rx = p == ULN_P_RX;
    struct probe_ev *e = probe_room(rx ? 4 : 1);
    if (!e) return;
    if (rx) {
        *e++ = (struct probe_ev){probe_read_prev, ULN_P_READ_PREV};
        *e++ = (struct probe_ev){probe_empty, ULN_P_EMPTY};
        *e++ = (struct probe_ev){probe_read, ULN_P_READ};
    }
    *e = (struct probe_ev){t, (uint32_t)p};
}
#endif
