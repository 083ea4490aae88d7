/*
 * memprobe - what a rank's memory costs, for bench/memory.
 *
 *   ulnrun -n N memprobe [naps_per_ring]
 *
 * Each rank reads its own /proc/self/smaps_rollup three times: before
 * uln_open ("start"), after uln_open and one endpoint ("open"), and after it
 * has been busy with every peer ("busy"): NAPs filling each ring it sends on
 * naps_per_ring times over (default 2), then twice the UDP window of small
 * NAPs, then a PUT and a GET of 64 KiB each way, so every page of every ring
 * the job uses has been written at least once and a UDP window has been full:
 * the steady state of an all-to-all job. Each rank prints
 *
 *   mem <rank> <phase> rss <KiB> pss <KiB> anon <KiB> shmem <KiB>
 *
 * PSS counts a shared page once across the processes that map it, so the
 * ranks' PSS sums to the job's memory. Waits are blocking (uln_cq_wait).
 */
#include "../integration/common.h"

#define NAP_BYTES 4096u
#define RDMA      65536u

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static int want_recv, got_recv, outstanding;

struct mem {
    long rss, pss, anon, shmem;
};

static struct mem mem_now(void)
{
    struct mem m = {-1, -1, -1, -1};
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        sscanf(line, "Rss: %ld", &m.rss);
        sscanf(line, "Pss: %ld", &m.pss);
        sscanf(line, "Pss_Anon: %ld", &m.anon);
        sscanf(line, "Pss_Shmem: %ld", &m.shmem);
    }
    if (f) fclose(f);
    return m;
}

static void mem_print(int rank, const char *phase, struct mem m)
{
    printf("mem %d %s rss %ld pss %ld anon %ld shmem %ld\n", rank, phase, m.rss, m.pss, m.anon,
           m.shmem);
}

static void take_some(void)
{
    struct uln_cqe e[64];
    int n = uln_cq_poll(cq, e, 64);
    CHECK(n >= 0);
    if (n == 0) {
        int w = uln_cq_wait(cq, 1000);
        CHECK(w == 0 || w == -ETIMEDOUT);
    }
    for (int i = 0; i < n; i++) {
        CHECK_CQE(&e[i], e[i].status == 0);
        if (e[i].op == ULN_OP_NAP_RECV) {
            got_recv++;
            t_release(cq, &e[i]);
        } else {
            outstanding--;
        }
    }
}

#define POST(call)                                                                                 \
    do {                                                                                           \
        int prc_;                                                                                  \
        while ((prc_ = (call)) == -EAGAIN)                                                         \
            take_some();                                                                           \
        CHECK_OK(prc_);                                                                            \
        outstanding++;                                                                             \
    } while (0)

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct mem start = mem_now();
    t_open(&J, 0);
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    int n = J.size, me = J.rank;
    uint8_t *region;
    struct uln_mr *mr;
    size_t rlen = 2 * RDMA; /* the same size at any N: only ulnet's memory grows with N */
    CHECK_OK(uln_mem_alloc(J.ctx, rlen, (void **)&region));
    memset(region, 0x5a, rlen);
    CHECK_OK(
        uln_mr_reg(J.ctx, region, rlen, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr));
    uint64_t key = uln_mr_key(mr), *keys = calloc((size_t)n, 8);
    CHECK(keys != NULL);
    struct mem opened = mem_now();
    t_exchange(&J, ep, cq, &key, 1, keys);

    /* A ring of ring_bytes holds ring_bytes / (NAP_BYTES + 64) such NAPs. */
    uint32_t nap = NAP_BYTES < J.info.nap_max ? NAP_BYTES : J.info.nap_max;
    int per_peer = rounds * (int)(J.info.ring_bytes / (nap + 64)) + 1;
    want_recv = per_peer * (n - 1);
    static uint8_t buf[NAP_BYTES];
    memset(buf, 0xa5, sizeof buf);
    uint8_t *put_src = t_xmalloc(RDMA), *get_dst = t_xmalloc(RDMA);
    memset(put_src, 0x3c, RDMA);
    for (int k = 0; k < per_peer; k++)
        for (int d = 1; d < n; d++)
            POST(uln_nap(ep, (me + d) % n, buf, nap, 0, 0));
    /* Then bursts of small NAPs, twice the UDP window per peer, so a UDP
     * peer's window of packets in flight is used whole. */
    int burst = 2 * (int)J.info.udp_window;
    for (int k = 0; k < burst; k++)
        for (int d = 1; d < n; d++)
            POST(uln_nap(ep, (me + d) % n, buf, 64, 0, ULN_INLINE));
    want_recv += burst * (n - 1);
    for (int d = 1; d < n; d++) {
        int p = (me + d) % n;
        /* Everybody writes the first 64 KiB and reads the second: the
         * region does not grow with the job, only ulnet's memory does. */
        POST(uln_put(ep, p, put_src, RDMA, keys[p], 0, 1, 0));
        POST(uln_get(ep, p, get_dst, RDMA, keys[p], RDMA, 2, 0));
    }
    double deadline = t_now() + 120;
    while (outstanding > 0 || got_recv < want_recv) {
        CHECKF(t_now() < deadline, "%d operations and %d of %d NAPs outstanding", outstanding,
               want_recv - got_recv, want_recv);
        take_some();
    }
    t_barrier(&J);
    struct mem busy = mem_now();
    mem_print(me, "start", start);
    mem_print(me, "open", opened);
    mem_print(me, "busy", busy);
    t_barrier(&J);
    CHECK_OK(uln_mr_dereg(mr));
    CHECK_OK(uln_mem_free(J.ctx, region));
    free(put_src);
    free(get_dst);
    free(keys);
    return t_finish(&J);
}
