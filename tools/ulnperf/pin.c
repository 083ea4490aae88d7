/* ulnperf: where the ranks run, one CPU each, and the floor under any
 * shared-memory latency between two of them. */
#include "perf.h"

#include <pthread.h>
#include <stdatomic.h>

/* Which machine's CPUs these are: a hash of the kernel's boot id, the same
 * for every process of one running kernel (network namespaces included,
 * which share the CPUs) and different on another machine, where CPU 0 is
 * not our CPU 0. 0: unknown. */
uint64_t machine_id(void)
{
    char id[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return 0;
    size_t n = fread(id, 1, sizeof id - 1, f);
    fclose(f);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)id[i]) * 0x100000001b3ull;
    return n ? h : 0;
}

/* The CPUs this process may run on, in order. */
int allowed_cpus(int *cpus, int max)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set)) return -errno;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

/* The CPU rank r should have: rank 0 (the one that measures, and the load
 * receiver) the first allowed CPU to itself; rank 1 the second, so the two
 * busy-polling ranks of the 2-rank scenarios never share one; further ranks
 * (load senders, which pace by sleeping) spread over the CPUs after the first.
 * -EXDEV: fewer than two CPUs, no pinning. */
int cpu_for_rank(int rank, const int *cpus, int ncpu)
{
    if (ncpu < 2) return -EXDEV;
    return rank == 0 ? cpus[0] : cpus[1 + (rank - 1) % (ncpu - 1)];
}

/* Returns the CPU (the only one allowed, if so), or -errno. */
int pin_self(int rank, int *ncpu)
{
    int cpus[CPU_SETSIZE];
    *ncpu = allowed_cpus(cpus, CPU_SETSIZE);
    if (*ncpu < 0) return *ncpu;
    if (*ncpu == 1) return cpus[0]; /* pinned already (taskset, mpirun --bind-to core) */
    int cpu = cpu_for_rank(rank, cpus, *ncpu);
    if (cpu < 0) return cpu;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one)) return -errno;
    return cpu;
}

/* The floor under any shared-memory latency here: one cache line bouncing
 * between two CPUs. It moves with where the host places our virtual CPUs
 * (on this kind of machine, one core complex or two), so every report says
 * what it was when the report was made. */
struct floor_arg {
    _Alignas(64) _Atomic uint64_t line;
    int cpu;
    uint64_t rounds;
};

static void *floor_peer(void *p)
{
    struct floor_arg *a = p;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(a->cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    for (uint64_t i = 0; i < a->rounds; i++) {
        while (atomic_load_explicit(&a->line, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&a->line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

/* One-way time in us for a cache line between our CPU and cpu, timed in
 * batches and judged by floor_judge (floor.c); best_us -1 when it could not
 * be measured. */
struct line_floor line_floor(struct perf *pf, int cpu)
{
    enum { BATCH = 1000 };
    struct floor_arg a = {.cpu = cpu, .rounds = pf->opt->quick ? 20000 : 200000};
    int nb = (int)(a.rounds / BATCH);
    double batch_us[200];
    atomic_store(&a.line, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, floor_peer, &a)) return floor_judge(batch_us, 0);
    /* Let the thread reach its CPU before timing. */
    for (int w = 0; w < 1000; w++)
        sched_yield();
    for (int b = 0; b < nb; b++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (uint64_t i = (uint64_t)b * BATCH; i < (uint64_t)(b + 1) * BATCH; i++) {
            atomic_store_explicit(&a.line, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&a.line, memory_order_acquire) != 2 * i + 2) {
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        batch_us[b] = ns / (2.0 * BATCH) / 1000.0;
    }
    pthread_join(t, NULL);
    return floor_judge(batch_us, nb);
}

void describe_pin(char *buf, size_t n, int rank, int cpu, int ncpu)
{
    if (cpu >= 0)
        snprintf(buf, n, "rank %d -> cpu %d%s", rank, cpu, ncpu == 1 ? " (the one allowed)" : "");
    else
        snprintf(buf, n, "rank %d not pinned (sched_setaffinity: %s)", rank, strerror(-cpu));
}

/* Ranks >= 2 and their CPUs, for the load scenario's header. */
void note_load_cpus(struct perf *pf, const int *rcpu, int cpu0)
{
    int senders = pf->size - 1, shared0 = 0, unpinned = 0, ncpus = 0, distinct[MAX_RANKS];
    for (int r = 1; r < pf->size; r++) {
        if (rcpu[r] < 0) {
            unpinned++;
            continue;
        }
        if (rcpu[r] == cpu0) shared0++;
        int k = 0;
        while (k < ncpus && distinct[k] != rcpu[r])
            k++;
        if (k == ncpus) distinct[ncpus++] = rcpu[r];
    }
    int n = snprintf(pf->load_cpu_note, sizeof pf->load_cpu_note, "%d sender%s on %d CPU%s",
                     senders, senders > 1 ? "s" : "", ncpus, ncpus == 1 ? "" : "s");
    if (unpinned)
        n += snprintf(pf->load_cpu_note + n, sizeof pf->load_cpu_note - (size_t)n,
                      ", %d not pinned", unpinned);
    if (cpu0 >= 0 && !shared0 && !unpinned)
        n += snprintf(pf->load_cpu_note + n, sizeof pf->load_cpu_note - (size_t)n,
                      ", the receiver alone on cpu %d", cpu0);
    if (senders > ncpus || unpinned)
        snprintf(pf->load_cpu_note + n, sizeof pf->load_cpu_note - (size_t)n,
                 "; senders share CPUs: they pace by sleeping and wait in uln_cq_wait, so the "
                 "peak is what their CPUs can post, not what rank 0 can take");
}
