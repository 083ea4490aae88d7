/*
 * probe.c - the log behind ULN_PROBE (probe.h); empty unless ULN_PROBES.
 */
#include "core/probe.h"

#ifdef ULN_PROBES
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"

#define PROBE_MAX (1u << 22) /* stamps kept: the first 4 M of a run */

struct probe_ev {
    uint64_t tsc;
    uint32_t point;
};

static struct probe_ev *probe_log;
static uint32_t probe_n;
static uint64_t probe_passes;
static uint64_t probe_tsc0, probe_ns0;
static uint64_t probe_read, probe_read_prev; /* the last two reads' calls */
static uint64_t probe_empty;                 /* the last empty read's return */

static void probe_dump(void)
{
    const char *out = getenv("ULN_PROBE_OUT");
    if (!out || !probe_log) return;
    uint64_t tsc1 = uln_tsc(), ns1 = uln_now_ns();
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", out, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    /* Ticks per ns over the whole run: the table's unit. */
    fprintf(f, "tsc_per_ns %.6f passes %llu\n",
            (double)(tsc1 - probe_tsc0) / (double)(ns1 - probe_ns0),
            (unsigned long long)probe_passes);
    for (uint32_t i = 0; i < probe_n; i++)
        fprintf(f, "%u %llu\n", probe_log[i].point, (unsigned long long)probe_log[i].tsc);
    fclose(f);
}

void uln_probe_hit(enum uln_probe_point p)
{
    if (p == ULN_P_PASS) { /* counted only: no stamp to pay for in every pass */
        probe_passes++;
        return;
    }
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
    if (!probe_log) {
        probe_log = calloc(PROBE_MAX, sizeof *probe_log);
        if (!probe_log) return;
        probe_tsc0 = uln_tsc();
        probe_ns0 = uln_now_ns();
        atexit(probe_dump);
    }
    if (p == ULN_P_RX && probe_n + 3 < PROBE_MAX) {
        probe_log[probe_n++] = (struct probe_ev){probe_read_prev, ULN_P_READ_PREV};
        probe_log[probe_n++] = (struct probe_ev){probe_empty, ULN_P_EMPTY};
        probe_log[probe_n++] = (struct probe_ev){probe_read, ULN_P_READ};
    }
    if (probe_n < PROBE_MAX) probe_log[probe_n++] = (struct probe_ev){t, (uint32_t)p};
}
#endif
