/*
 * test_perf_floor.c - ulnperf's cache-line floor judged from made-up batch
 * times (tools/ulnperf/floor.c; no timing here): a quiet machine's batches
 * give the fastest as a floor, trusted, and the header says no latency can
 * be lower; a loaded machine's (most batches descheduled) are flagged
 * UNRELIABLE with the best and the median; the edge at 1.5x; batch order
 * not mattering; no batches, no floor and no line; and the end-of-run line.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "floor.h"

#define NB 200 /* ulnperf's batches */

/* The header lines a floor prints, into buf. */
static const char *start_text(const struct line_floor *fl)
{
    static char buf[1024];
    memset(buf, 0, sizeof buf);
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (!f) return "";
    floor_print_start(f, fl, 0, 1);
    fclose(f);
    return buf;
}

static const char *end_text(const struct line_floor *end, const struct line_floor *start)
{
    static char buf[1024];
    memset(buf, 0, sizeof buf);
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (!f) return "";
    floor_print_end(f, end, start);
    fclose(f);
    return buf;
}

/* Fill b with a shuffled mix: n_slow batches at slow_us, the others spread
 * from fast_us up by at most 10 % (a quiet machine's jitter). */
static void batches(double *b, double fast_us, int n_slow, double slow_us, unsigned seed)
{
    for (int i = 0; i < NB; i++)
        b[i] = i < n_slow ? slow_us + 0.001 * i : fast_us * (1.0 + 0.1 * (i - n_slow) / NB);
    srand(seed);
    for (int i = NB - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        double t = b[i];
        b[i] = b[j];
        b[j] = t;
    }
}

int main(void)
{
    double b[NB];

    /* Quiet: the floor is the fastest batch, and trusted. */
    batches(b, 0.050, 0, 0, 1);
    struct line_floor quiet = floor_judge(b, NB);
    CHECK(quiet.best_us == 0.050);
    CHECK(quiet.median_us > 0.050 && quiet.median_us < 0.056);
    CHECK(quiet.reliable);
    const char *t = start_text(&quiet);
    CHECK(strstr(t, "# floor: a cache line crosses cpu 0 <-> cpu 1 in 0.050 us one-way") != NULL);
    CHECK(strstr(t, "no shared-memory latency here can be lower") != NULL);
    CHECK(strstr(t, "UNRELIABLE") == NULL);

    /* A few descheduled batches (under half) do not move the median. */
    batches(b, 0.050, 40, 2.0, 2);
    struct line_floor few = floor_judge(b, NB);
    CHECK(few.best_us == 0.050 && few.reliable);

    /* Loaded: most batches lost the CPU; one lucky batch is no floor. */
    batches(b, 0.050, 150, 2.0, 3);
    struct line_floor loaded = floor_judge(b, NB);
    CHECK(loaded.best_us == 0.050);
    CHECK(loaded.median_us >= 2.0);
    CHECK(!loaded.reliable);
    t = start_text(&loaded);
    CHECK(strstr(t, "# floor: UNRELIABLE: a cache line crossed cpu 0 <-> cpu 1 in 0.050 us "
                    "one-way at best but 2.") != NULL);
    CHECK(strstr(t, "can be lower") == NULL);

    /* The edge: a median of exactly 1.5x is trusted, a little more is not. */
    for (int i = 0; i < NB; i++)
        b[i] = i == 0 ? 1.0 : 1.5;
    CHECK(floor_judge(b, NB).reliable);
    for (int i = 0; i < NB; i++)
        b[i] = i == 0 ? 1.0 : 1.51;
    CHECK(!floor_judge(b, NB).reliable);

    /* Order does not matter: the same set sorted descending. */
    for (int i = 0; i < NB; i++)
        b[i] = 3.0 - 0.01 * i; /* 3.0 down to 1.01: median 2.0, best 1.01 */
    struct line_floor desc = floor_judge(b, NB);
    CHECK(desc.best_us == 3.0 - 0.01 * (NB - 1));
    CHECK(!desc.reliable);

    /* No batches (the floor could not be measured): no floor, no line. */
    struct line_floor none = floor_judge(NULL, 0);
    CHECK(none.best_us < 0 && !none.reliable);
    CHECK(strcmp(start_text(&none), "") == 0);

    /* The end of the run, beside the start's floor. */
    t = end_text(&quiet, &quiet);
    CHECK(strstr(t, "# floor at the end: 0.050 us one-way (at the start: 0.050 us)\n") != NULL);
    t = end_text(&loaded, &quiet);
    CHECK(strstr(t, ": UNRELIABLE, the machine is busy") != NULL);
    struct line_floor moved = quiet;
    moved.best_us = 0.2;
    t = end_text(&moved, &quiet);
    CHECK(strstr(t, ": it moved during the run") != NULL);
    return summary();
}
