/* ulnperf: the job around the scenarios. Pinning, the library, endpoints and
 * buffers, the HELLO exchange, rank 0's header, and the orderly end. */
#include "perf.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where each rank is pinned, gathered from the HELLOs. */
struct pins {
    int cpu, ncpu, peer_cpu; /* ours, CPUs allowed, the one rank 1 gets */
    int rcpu[MAX_RANKS], rncpu[MAX_RANKS];
    uint64_t machine, peer_machine; /* machine_id: ours, the other of ranks 0, 1 */
    struct line_floor floor;        /* rank 0: cache-line floor at the start (best_us -1: none) */
};

/* Pin before uln_open so anything the library starts inherits the CPU. */
static void job_pin(struct perf *pf, struct pins *pn)
{
    int cpus[CPU_SETSIZE];
    int nallowed = allowed_cpus(cpus, CPU_SETSIZE);
    pn->peer_cpu = nallowed >= 2 ? cpu_for_rank(1, cpus, nallowed) : -1;
    pn->ncpu = 0;
    pn->cpu = pin_self(pf->rank, &pn->ncpu);
    /* Until the HELLOs say where rank 1 runs, a rank with one CPU may share
     * it with its peer (one CPU in all): spinning must let the peer run. */
    pf->yield = pn->ncpu < 2;
    pn->machine = pn->peer_machine = machine_id();
    pn->floor = floor_judge(NULL, 0);
}

/* The library, and what it says it runs. Returns 0 or an exit code. */
static int job_open(struct perf *pf)
{
    const struct perf_opts *o = pf->opt;
    int rc = uln_open(NULL, &pf->ctx);
    if (rc) {
        fprintf(stderr, "ulnperf: rank %d: uln_open: %s\n", pf->rank, uln_strerror(rc));
        return 1;
    }
    if (uln_rank(pf->ctx) != pf->rank)
        die(pf, "uln_rank %d but ULN_RANK=%d", uln_rank(pf->ctx), pf->rank);
    pf->size = uln_size(pf->ctx);
    if (pf->size < 2 || pf->size > MAX_RANKS)
        die(pf, "needs 2 to %d ranks (ulnrun -n N), job has %d", MAX_RANKS, pf->size);
    pf->peer = pf->rank == 0 ? 1 : 0;
    /* Ranks that share CPUs (load senders) must not spin while they wait. */
    pf->sleep_wait = pf->rank >= 1 && pf->size > 2;
    if ((rc = uln_query(pf->ctx, &pf->info))) die(pf, "uln_query: %s", uln_strerror(rc));
    if (o->transport && strcmp(pf->info.transport, o->transport))
        die(pf,
            "asked for transport %s (ULN_TRANSPORT=%s), but the library runs %s: this build has "
            "no %s transport",
            o->transport, o->transport, pf->info.transport, o->transport);
    if (pf->info.nap_max < sizeof(struct ctl_msg))
        die(pf, "nap_max %u is below the %zu B control messages", pf->info.nap_max,
            sizeof(struct ctl_msg));
    return 0;
}

/* Which link carries udp's packets is known once the endpoints are open:
 * the measured endpoint is opened first, so it is the one that has AF_XDP
 * when any has (the control endpoint then takes the socket link, one AF_XDP
 * socket per queue). The CSV names such figures "xdp". */
static void job_link(struct perf *pf)
{
    int rc;
    if ((rc = uln_query(pf->ctx, &pf->info))) die(pf, "uln_query: %s", uln_strerror(rc));
    const char *t = pf->info.transport;
    bool xdp = pf->info.link && !strcmp(pf->info.link, "xdp");
    snprintf(pf->csv_tp, sizeof pf->csv_tp, "%s",
             !xdp                    ? t
             : !strcmp(t, "udp")     ? "xdp"
             : !strcmp(t, "shm+udp") ? "shm+xdp"
                                     : t);
}

/* The CQ of the measured endpoints (data, fair's) and the control endpoint's. */
static void job_endpoints(struct perf *pf)
{
    const struct perf_opts *o = pf->opt;
    int rc;
    /* Room for a full window, a full receive ring of small NAPs and control;
     * the engine holds work back rather than overrun the CQ anyway. */
    for (unsigned entries = 4096;; entries /= 2) {
        rc = uln_cq_open(pf->ctx, entries, &pf->cq);
        if (!rc) break;
        if (rc != -EINVAL || entries <= 64)
            die(pf, "uln_cq_open(%u): %s", entries, uln_strerror(rc));
    }
    if ((rc = uln_cq_open(pf->ctx, 4 * INBOX, &pf->ctl_cq)))
        die(pf, "uln_cq_open (control): %s", uln_strerror(rc));
    if ((rc = uln_ep_open(pf->ctx, pf->cq, pf->cq, &pf->ep)) ||
        (rc = uln_ep_open(pf->ctx, pf->ctl_cq, pf->ctl_cq, &pf->ctl)))
        die(pf, "uln_ep_open: %s", uln_strerror(rc));
    pf->ep_idx = uln_ep_index(pf->ep);
    pf->ctl_idx = uln_ep_index(pf->ctl);
    job_link(pf);
    if (!(o->tests >> T_FAIR & 1) || pf->rank > 1) return;
    /* Opened by ranks 0 and 1 alike: the i-th endpoint talks to the i-th. */
    if (2 + o->fair_eps > pf->info.max_eps)
        die(pf, "fair needs %u endpoints besides the 2 of ulnperf, max_eps is %u (ULN_MAX_EPS)",
            o->fair_eps, pf->info.max_eps);
    for (unsigned i = 0; i < o->fair_eps; i++) {
        if ((rc = uln_ep_open(pf->ctx, pf->cq, pf->cq, &pf->fair[i])))
            die(pf, "uln_ep_open (fair endpoint %u): %s", i, uln_strerror(rc));
        if (i && uln_ep_index(pf->fair[i]) != pf->fair_idx0 + (int)i)
            die(pf, "fair endpoints are not numbered in order");
        if (!i) pf->fair_idx0 = uln_ep_index(pf->fair[i]);
    }
    pf->nfair = (int)o->fair_eps;
}

/* Ranks 0 and 1: the PUT/GET regions, as large as the largest point needs. */
static void job_regions(struct perf *pf)
{
    const struct perf_opts *o = pf->opt;
    size_t maxs = 0;
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > maxs) maxs = o->sizes[i];
    bool pg = o->ops & (1u << OP_PUT | 1u << OP_GET | 1u << OP_ATOMIC),
         fair = o->tests >> T_FAIR & 1;
    unsigned big = 1u << T_LAT | 1u << T_BW | 1u << T_BIBW | 1u << T_RATE | 1u << T_CACHE;
    pf->buf_len = 4096;
    if (pg && (o->tests & big) && maxs > pf->buf_len) pf->buf_len = maxs;
    if (pg && fair && o->fair_eps * o->fair_size > pf->buf_len)
        pf->buf_len = o->fair_eps * o->fair_size;
    pf->buf_len = (pf->buf_len + 4095) & ~(size_t)4095;
    pf->tgt = buf_alloc(pf, pf->buf_len);
    pf->loc = buf_alloc(pf, pf->buf_len);
    int rc = uln_mr_reg(pf->ctx, pf->tgt, pf->buf_len,
                        ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC,
                        &pf->mr);
    if (rc) die(pf, "uln_mr_reg(%zu B): %s", pf->buf_len, uln_strerror(rc));
}

static void job_buffers(struct perf *pf)
{
    const struct perf_opts *o = pf->opt;
    if (pf->rank <= 1) job_regions(pf);
    pf->napbuf = aligned_alloc(64, ((size_t)pf->info.nap_max + 64) & ~(size_t)63);
    if (!pf->napbuf) die(pf, "out of memory");
    memset(pf->napbuf, 0x5a, pf->info.nap_max);
    if (pf->rank >= 1 && (o->tests >> T_LOAD & 1) && o->load_size > pf->info.inline_max &&
        o->load_size <= pf->info.nap_max) {
        pf->load_pool = aligned_alloc(64, (LOAD_CAP * o->load_size + 63) & ~(size_t)63);
        if (!pf->load_pool) die(pf, "out of memory");
        memset(pf->load_pool, 0x3c, LOAD_CAP * o->load_size);
    }
}

static void job_barrier(struct perf *pf, const char *what)
{
    int rc = uln_barrier(pf->ctx, 60000);
    if (rc) die(pf, "%s: %s", what, uln_strerror(rc));
}

/* Do ranks 0 and 1 run on one machine's CPUs (or is either unknown)? */
static bool same_machine(const struct pins *pn)
{
    return !pn->machine || !pn->peer_machine || pn->machine == pn->peer_machine;
}

/* HELLO: ranks 0 and 1 exchange their region keys; everyone tells rank 0
 * where it is pinned. */
static void job_hello(struct perf *pf, struct pins *pn)
{
    struct ctl_msg h = {.a = pf->mr ? uln_mr_key(pf->mr) : 0,
                        .b = pf->buf_len,
                        .key = pn->machine,
                        .cpu = pn->cpu,
                        .ncpu = pn->ncpu};
    snprintf(h.text, sizeof h.text, "%s", pf->opt->malloc_mem ? "malloc" : "ulnet");
    pn->rcpu[pf->rank] = pn->cpu, pn->rncpu[pf->rank] = pn->ncpu;
    if (pf->rank <= 1) ctl_send(pf, CTL_HELLO, &h);
    if (pf->rank >= 2) ctl_send_to(pf, 0, CTL_HELLO, &h);
    for (int k = 0; k < (pf->rank == 0 ? pf->size - 1 : pf->rank == 1 ? 1 : 0); k++) {
        struct ctl_msg ph = ctl_recv(pf, CTL_HELLO);
        if (ph.src < 0 || ph.src >= pf->size) die(pf, "HELLO from rank %d", ph.src);
        pn->rcpu[ph.src] = ph.cpu, pn->rncpu[ph.src] = ph.ncpu;
        if (ph.src > 1) continue;
        pf->peer_key = ph.a;
        pn->peer_machine = ph.key;
        if (ph.b != pf->buf_len || strcmp(ph.text, h.text))
            die(pf,
                "ranks 0 and 1 disagree on buffers (%" PRIu64 " B %s vs %zu B %s): same options?",
                ph.b, ph.text, pf->buf_len, h.text);
        /* Now we know: yield only if the two share a CPU (or either is
         * unpinned). Ranks alone on one CPU each, as under taskset -c N per
         * rank or mpirun --bind-to core, spin: a yield per empty poll would
         * be a system call in every measured wait. CPU 3 of two machines
         * is two CPUs; of two namespaces on one machine, one. */
        pf->yield = pn->cpu < 0 || ph.cpu < 0 || (same_machine(pn) && pn->cpu == ph.cpu);
    }
}

/* Rank 0: where the output goes, and the CSV's header line. */
static void job_output(struct perf *pf)
{
    const struct perf_opts *o = pf->opt;
    pf->out.hdr = o->csv_stdout ? stderr : stdout;
    pf->out.tty = isatty(2);
    if (o->csv_stdout)
        pf->out.csv = stdout;
    else if (o->csv_path && !(pf->out.csv = fopen(o->csv_path, "w")))
        die(pf, "cannot write %s: %s", o->csv_path, strerror(errno));
    if (pf->out.csv) fprintf(pf->out.csv, "transport,op,test,size,value,unit\n");
}

/* Rank 0's '#' lines on where every rank runs. */
static void job_header_pins(struct perf *pf, const struct pins *pn)
{
    FILE *hdr = pf->out.hdr;
    char p[96];
    describe_pin(p, sizeof p, 0, pn->cpu, pn->ncpu);
    bool distinct =
        pn->cpu >= 0 && pn->rcpu[1] >= 0 && (pn->cpu != pn->rcpu[1] || !same_machine(pn));
    fprintf(hdr, distinct ? "# pinned: %s" : "# NOT pinned to distinct CPUs: %s", p);
    for (int r = 1; r < pf->size; r++) {
        describe_pin(p, sizeof p, r, pn->rcpu[r], pn->rncpu[r]);
        fprintf(hdr, ", %s", p);
    }
    fprintf(hdr, "%s\n",
            !distinct && pf->yield ? " (spin loops yield; numbers are not meaningful)" : "");
    if (pf->size == 3)
        fprintf(hdr, "# rank 2 takes part in load and incast only, asleep otherwise\n");
    else if (pf->size > 3)
        fprintf(hdr, "# ranks 2..%d take part in load and incast only, asleep otherwise\n",
                pf->size - 1);
    note_load_cpus(pf, pn->rcpu, pn->cpu);
}

/* Rank 0's header: the library's figures, pinning, the floor, the timer. */
static void job_header(struct perf *pf, const struct pins *pn)
{
    const struct perf_opts *o = pf->opt;
    const struct uln_info *in = &pf->info;
    FILE *hdr = pf->out.hdr;
    fprintf(hdr,
            "# ulnperf: transport=%s%s%s nap_max=%u inline_max=%u shm_direct=%d shm_cma=%d "
            "sq_depth=%u ring_bytes=%u chunk_bytes=%u ranks=%d\n",
            in->transport, in->link ? " link=" : "", in->link ? in->link : "", in->nap_max,
            in->inline_max, in->shm_direct, in->shm_cma, in->sq_depth, in->ring_bytes,
            in->chunk_bytes, pf->size);
    job_header_pins(pf, pn);
    floor_print_start(hdr, &pn->floor, pn->cpu, pn->peer_cpu);
    if (pn->floor.best_us > 0 && pf->out.csv)
        fprintf(pf->out.csv, "platform,cacheline,lat,64,%.4f,us\n", pn->floor.best_us);
    if (pf->tm.use_tsc)
        fprintf(hdr, "# timer: rdtsc at %.3f GHz (calibrated against CLOCK_MONOTONIC)\n",
                pf->tm.ticks_per_ns);
    else
        fprintf(hdr, "# timer: clock_gettime(CLOCK_MONOTONIC)\n");
    fprintf(hdr,
            "# mem=%s window=%u %s; lat: nap/nap-inline/put one-way = RTT/2, "
            "get, atomic = the whole operation (a round trip)\n",
            o->malloc_mem ? "malloc (aligned_alloc + uln_mr_reg)" : "ulnet (uln_mem_alloc)",
            o->window,
            o->iters   ? "fixed iterations"
            : o->quick ? "quick"
                       : "~100 ms per point");
    fflush(hdr);
}

/* Rank 0: the header, every point, then QUIT to everyone. */
static void job_drive(struct perf *pf, const struct pins *pn)
{
    const struct perf_opts *o = pf->opt;
    job_output(pf);
    job_header(pf, pn);
    pf->samples =
        malloc(sizeof *pf->samples * (o->iters > LAT_MAX_ITERS ? o->iters : LAT_MAX_ITERS));
    if (!pf->samples) die(pf, "out of memory");
    /* Faulted in now, not inside a measured phase: a fault every 512 samples
     * costs microseconds (tens in a VM whose host backs the page only then),
     * and at a few tens of ns per operation that was a third of the time of
     * the first point. Not memset 0, which compilers may turn into calloc. */
    memset(pf->samples, 0xff,
           sizeof *pf->samples * (o->iters > LAT_MAX_ITERS ? o->iters : LAT_MAX_ITERS));
    drive(pf);
    struct ctl_msg q = {0};
    for (int r = 1; r < pf->size; r++)
        ctl_send_to(pf, r, CTL_QUIT, &q);
    free(pf->samples);
    pf->samples = NULL;
}

/* The end: the peer may still be inside our memory until both get to the
 * barrier; then the floor again, the CSV closed, and everything released. */
static void job_close(struct perf *pf, const struct pins *pn)
{
    int rc;
    ctl_drain(pf);
    job_barrier(pf, "final uln_barrier");
    /* The floor again, with the others asleep: the host may have moved our
     * CPUs during the run. */
    if (pn->floor.best_us > 0) {
        struct line_floor end = line_floor(pf, pn->peer_cpu);
        floor_print_end(pf->out.hdr, &end, &pn->floor);
        if (pf->out.csv)
            fprintf(pf->out.csv, "platform,cacheline,lat_end,64,%.4f,us\n", end.best_us);
    }
    if (pf->rank == 0 && pf->out.csv && pf->out.csv != stdout && fclose(pf->out.csv))
        die(pf, "writing %s: %s", pf->opt->csv_path, strerror(errno));
    job_barrier(pf, "uln_barrier");
    pf->ctl = NULL; /* from here a failure is not worth an ABORT message */
    if (pf->mr && (rc = uln_mr_dereg(pf->mr))) die(pf, "uln_mr_dereg: %s", uln_strerror(rc));
    buf_free(pf, pf->tgt);
    buf_free(pf, pf->loc);
    free(pf->napbuf);
    free(pf->load_pool);
    if ((rc = uln_close(pf->ctx))) die(pf, "uln_close: %s", uln_strerror(rc));
}

/* The whole job of this rank, pf->rank and pf->opt set. Returns the exit code
 * (failures past uln_open exit through die). */
int perf_job_run(struct perf *pf)
{
    struct pins pn;
    /* The library picks its transport from the environment. */
    if (pf->opt->transport && setenv("ULN_TRANSPORT", pf->opt->transport, 1)) {
        fprintf(stderr, "ulnperf: setenv: %s\n", strerror(errno));
        return 1;
    }
    job_pin(pf, &pn);
    int rc = job_open(pf);
    if (rc) return rc;
    timer_init(pf, pf->opt->quick ? 5 : 20);
    job_endpoints(pf);
    job_buffers(pf);
    /* Every rank has opened its endpoints before anyone sends. */
    job_barrier(pf, "uln_barrier");
    /* The others sleep in a second barrier (a futex: off their CPUs) while
     * rank 0 measures the cache-line floor between the two pinned CPUs. */
    if (pf->rank == 0 && pn.cpu >= 0 && pn.peer_cpu >= 0 && pn.peer_cpu != pn.cpu)
        pn.floor = line_floor(pf, pn.peer_cpu);
    job_barrier(pf, "uln_barrier");
    job_hello(pf, &pn);
    if (pf->rank == 0)
        job_drive(pf, &pn);
    else
        serve(pf);
    job_close(pf, &pn);
    return 0;
}
