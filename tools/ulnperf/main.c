/*
 * ulnperf - the benchmark suite of ulnet: the papers' experiments, per primitive.
 *
 *   ulnrun -n N [--timeout S] ulnperf [options]      (ulnperf -h for the options)
 *   mpirun -n N ulnperf [options]                     (or any PMIx launcher: srun --mpi=pmix)
 *
 * Scenarios (--test), each from its family's file: lat (lat.c); bw, bibw and
 * rate (stream.c) between ranks 0 and 1; cache (cache.c: cold vs warm
 * translation) from rank 0 into rank 1; fair (fair.c: 8 endpoints of rank 0
 * sharing one interface towards rank 1); load (load.c: ranks 1..N-1 all
 * sending to rank 0 at a paced rate); incast (incast.c: ranks 1..N-1 streaming
 * NAPs into rank 0 as fast as they can, every one checked). A job may have
 * more than 2 ranks: only load and incast use them, the others sleep in uln_cq_wait meanwhile. The
 * rest is common: the job (job.c), phases and the plan (phase.c), control messages (ctl.c),
 * buffers, time, statistics, CPUs and output. Plots are made from the CSV, by bench/plot.
 */
#include "perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Which family runs which test. */
static const struct perf_family *const families[NTESTS] = {
    [T_LAT] = &perf_latency, [T_BW] = &perf_stream,     [T_BIBW] = &perf_stream,
    [T_RATE] = &perf_stream, [T_CACHE] = &perf_cache,   [T_FAIR] = &perf_fair,
    [T_LOAD] = &perf_load,   [T_INCAST] = &perf_incast,
};

const struct perf_family *perf_family(int test)
{
    return families[test];
}

int main(int argc, char **argv)
{
    /* The rank is needed before uln_open (CPU pinning): ulnrun's or ULN_ROOT's
     * ULN_RANK, or under mpirun or srun --mpi=pmix the PMIx server's PMIX_RANK
     * (the library then joins through PMIx). */
    const char *re = getenv("ULN_RANK");
    if (!re || !*re) re = getenv("PMIX_RANK");
    if (re && !*re) re = NULL;
    int env_rank = re ? atoi(re) : 0;
    char who[32] = "";
    if (re) snprintf(who, sizeof who, "rank %d: ", env_rank);
    struct perf_opts opt;
    /* Usage errors, help and version: once per job, by rank 0. The other
     * ranks stay silent and wait half a second before failing (as uln_open
     * does on a bad setting), so that a launcher ending the job at the first
     * failure does not cut rank 0 short. */
    int pr = perf_parse_args(&opt, argc, argv, who, env_rank == 0);
    if (pr == 1 && env_rank == 0) perf_usage(stdout);
    if (pr == 2 && env_rank == 0) printf("ulnperf (ulnet) %s\n", uln_version(NULL));
    if (pr < 0 && env_rank != 0) usleep(500 * 1000);
    if (pr) return pr > 0 ? 0 : 2;
    if (!re) {
        fprintf(stderr, "ulnperf: ULN_RANK is not set; start it with: ulnrun -n 2 ulnperf (or "
                        "mpirun -n 2 ulnperf)\n");
        return 2;
    }
    struct perf pf = {.opt = &opt,
                      .rank = env_rank,
                      .tm.ticks_per_ns = 1.0,
                      .pattern_seed = 0x1234567,
                      .load_cpu_note = "CPU placement unknown"};
    return perf_job_run(&pf);
}
