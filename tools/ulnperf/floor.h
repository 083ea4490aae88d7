/* ulnperf: the cache-line floor judged from its batch times, and its header
 * lines. Pure (no timing, no job), so tests/unit/test_perf_floor.c drives it
 * with made-up batches. */
#ifndef ULNPERF_FLOOR_H
#define ULNPERF_FLOOR_H

#include <stdbool.h>
#include <stdio.h>

/* A median batch over this many times the best: the floor is unsure. */
#define FLOOR_UNSURE_RATIO 1.5

struct line_floor {
    double best_us;   /* the fastest batch, one-way: the floor; -1 when none */
    double median_us; /* the median batch */
    bool reliable;    /* median_us <= FLOOR_UNSURE_RATIO * best_us */
};

/* The floor from n > 0 batch times (us one-way each; batch_us is sorted in
 * place); n <= 0 gives best_us -1, not reliable. */
struct line_floor floor_judge(double *batch_us, int n);

/* Rank 0's header line for the floor measured at the start between cpu and
 * peer_cpu (nothing when there is none). */
void floor_print_start(FILE *f, const struct line_floor *fl, int cpu, int peer_cpu);

/* The line for the floor measured again at the end, beside the start's. */
void floor_print_end(FILE *f, const struct line_floor *end, const struct line_floor *start);

#endif
