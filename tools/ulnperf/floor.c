/* ulnperf: the cache-line floor judged from its batch times (floor.h). The
 * rounds are timed in batches: a batch in which either thread was
 * descheduled (a loaded machine) is slow, so the floor is the fastest batch,
 * and a median far above it says the machine was busy and the floor is not
 * to be trusted - the best may be luck and the rest the machine's load, not
 * a cache line's time. */
#include "floor.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct line_floor floor_judge(double *batch_us, int n)
{
    if (n <= 0) return (struct line_floor){.best_us = -1, .median_us = -1, .reliable = false};
    qsort(batch_us, (size_t)n, sizeof batch_us[0], cmp_double);
    struct line_floor fl = {.best_us = batch_us[0], .median_us = batch_us[n / 2]};
    fl.reliable = fl.best_us > 0 && fl.median_us <= FLOOR_UNSURE_RATIO * fl.best_us;
    return fl;
}

void floor_print_start(FILE *f, const struct line_floor *fl, int cpu, int peer_cpu)
{
    if (fl->best_us <= 0) return;
    if (!fl->reliable)
        fprintf(f,
                "# floor: UNRELIABLE: a cache line crossed cpu %d <-> cpu %d in %.3f us one-way "
                "at best but %.3f us in the median batch: the machine is busy, so neither the "
                "floor nor the latencies below are a bound here\n",
                cpu, peer_cpu, fl->best_us, fl->median_us);
    else
        fprintf(f,
                "# floor: a cache line crosses cpu %d <-> cpu %d in %.3f us one-way "
                "(no shared-memory latency here can be lower)\n",
                cpu, peer_cpu, fl->best_us);
}

void floor_print_end(FILE *f, const struct line_floor *end, const struct line_floor *start)
{
    /* Moved by more than half: the host placed the CPUs elsewhere, or the
     * load changed; the run's figures belong to neither floor. */
    bool moved = end->best_us > FLOOR_UNSURE_RATIO * start->best_us ||
                 start->best_us > FLOOR_UNSURE_RATIO * end->best_us;
    fprintf(f, "# floor at the end: %.3f us one-way (at the start: %.3f us)%s\n", end->best_us,
            start->best_us,
            !end->reliable ? ": UNRELIABLE, the machine is busy"
            : moved        ? ": it moved during the run, compare these figures with care"
                           : "");
}
