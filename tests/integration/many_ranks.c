/*
 * many_ranks - a job of many ranks: every rank works, with blocking waits,
 * against its ring neighbours and rank 0 (all-to-one), or against every
 * other rank (all-to-all).
 *
 *   ulnrun -n N many_ranks [rounds] [all]
 *
 * Rank r talks to r-1 and r+1 (mod N) and to rank 0; rank 0 so talks to
 * everybody. With "all" every rank talks to every other: N(N-1) pairs, each
 * with its own first contact (over udp a handshake each way), which is what
 * the 64-rank job on 4 namespace hosts runs (tests/netns: 15 peers over shm,
 * 48 over udp per rank); at thousands of ranks on one host that would be
 * millions of first contacts, so the large runs by hand take the ring.
 * Per round, with every peer it talks to, a rank posts a NAP, a
 * PUT with immediate data into its own slot of the peer's region, and a GET
 * of the peer's read area; every size and pattern is derived from (source,
 * target, round), so each side checks every byte without being told. Rank 0
 * takes N-1 NAPs and N-1 PUTs per round and posts 3(N-1) operations: more
 * than a send queue and the CQ hold once N is large, so -EAGAIN and a full CQ
 * are part of the run.
 *
 * Waits are uln_cq_wait (spin, then sleep on the doorbell): N busy-polling
 * ranks on two cores would take turns by the scheduler's time slice. ctest
 * runs 64 ranks; docs/limits.md has the larger counts tried by hand and what
 * bounds them. Rank 0 prints the time of each phase.
 *
 * Memory per peer: every rank prints its VmRSS before it meets any peer
 * (its own buffers already touched), once it has met them all (the key
 * exchange) and after the rounds, and sends the differences to rank 0,
 * which prints the job's figure per peer (docs/limits.md, "Memory per
 * peer").
 */
#include "common.h"

#define SLOT     8192u /* PUT slot per source rank */
#define READ_LEN 8192u /* read area every rank fills for GETs */
#define OP_NAP   210
#define OP_PUT   211
#define OP_READ  212

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

static bool all_to_all; /* "all": every pair talks */

/* Whether a and b exchange traffic: every pair (all_to_all), else ring
 * neighbours, or one of them is rank 0. Symmetric, so each side knows what to
 * expect from the other. */
static bool talks(int a, int b, int n)
{
    if (a == b) return false;
    if (all_to_all) return true;
    return a == 0 || b == 0 || (a + 1) % n == b || (b + 1) % n == a;
}

static uint64_t mix(int src, int dst, int round, int what)
{
    return pat_mix(((uint64_t)(uint32_t)src << 40) ^ ((uint64_t)(uint32_t)dst << 16) ^
                   ((uint64_t)(uint32_t)round << 4) ^ (uint64_t)what);
}
static uint32_t nap_len(int src, int dst, int round)
{
    return (uint32_t)(mix(src, dst, round, 1) % (J.info.nap_max < 2048 ? J.info.nap_max : 2048));
}
static uint32_t put_len(int src, int dst, int round)
{
    return 1 + (uint32_t)(mix(src, dst, round, 2) % SLOT);
}
static uint32_t get_off(int src, int dst, int round)
{
    return (uint32_t)(mix(src, dst, round, 3) % (READ_LEN / 2));
}
static uint32_t get_len(int src, int dst, int round)
{
    return 1 + (uint32_t)(mix(src, dst, round, 4) % (READ_LEN / 2));
}

struct peer_bufs {
    uint8_t nap[2048], put[SLOT], get[READ_LEN];
};

static int n_peers, *peers; /* the ranks this one talks to */
static int *idx_of;         /* rank -> index in peers, -1 */
static struct peer_bufs *bufs;
static uint8_t *region;
static uint64_t *keys; /* by rank */
static int round_no;

/* What is still expected this round. */
static int want_local, want_nap, want_imm;
static uint8_t *got_nap, *got_imm; /* by peer index: each exactly once */

static long vm_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* What the entries belong to: the key exchange and the report are NAPs of
 * their own. */
static enum { PH_KEYS, PH_ROUNDS, PH_REPORT } phase;
static void on_key_entry(const struct uln_cqe *e);
static void on_report_entry(const struct uln_cqe *e);

static void on_entry(const struct uln_cqe *e)
{
    if (phase == PH_KEYS) {
        on_key_entry(e);
        return;
    }
    if (phase == PH_REPORT) {
        on_report_entry(e);
        return;
    }
    CHECK_CQE(e, e->status == 0);
    int p = e->peer, pi = p >= 0 && p < J.size ? idx_of[p] : -1;
    CHECK_CQE(e, pi >= 0);
    switch (e->op) {
    case ULN_OP_NAP:
    case ULN_OP_PUT:
        want_local--;
        break;
    case ULN_OP_GET:
        CHECK_CQE(e, e->len == get_len(J.rank, p, round_no));
        CHECK_PAT(bufs[pi].get, e->len, pat_seed(p, OP_READ, 0), get_off(J.rank, p, round_no),
                  "round %d: GET from rank %d", round_no, p);
        want_local--;
        break;
    case ULN_OP_NAP_RECV:
        CHECK_CQE(e, !got_nap[pi] && e->len == nap_len(p, J.rank, round_no));
        CHECK_PAT(e->data, e->len, pat_seed(p, OP_NAP, (uint64_t)J.rank << 8 | (unsigned)round_no),
                  0, "round %d: NAP from rank %d", round_no, p);
        got_nap[pi] = 1;
        t_release(cq, e);
        want_nap--;
        break;
    case ULN_OP_PUT_REMOTE: {
        uint32_t len = put_len(p, J.rank, round_no);
        uint8_t *slot = region + READ_LEN + (size_t)p * SLOT;
        CHECK_CQE(e, !got_imm[pi] && e->imm == ((uint64_t)round_no << 32 | (uint32_t)p));
        CHECK_CQE(e, e->len == len && e->offset == READ_LEN + (uint64_t)p * SLOT);
        CHECK_PAT(slot, len, pat_seed(p, OP_PUT, (uint64_t)J.rank << 8 | (unsigned)round_no), 0,
                  "round %d: PUT from rank %d", round_no, p);
        memset(slot, 0, len); /* next round's data must be written to pass */
        got_imm[pi] = 1;
        want_imm--;
        break;
    }
    default:
        CHECK_CQE(e, !"unexpected op");
    }
}

/* Take what is there; if nothing, sleep until something comes. */
static void drain(double deadline, const char *what)
{
    struct uln_cqe e[32];
    int n = uln_cq_poll(cq, e, 32);
    CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
    if (n == 0) {
        CHECKF(t_now() < deadline,
               "%s, round %d: still %d local, %d NAPs, %d PUTs from peers to come", what, round_no,
               want_local, want_nap, want_imm);
        int w = uln_cq_wait(cq, 1000);
        CHECKF(w == 0 || w == -ETIMEDOUT, "uln_cq_wait: %s", t_errname(w));
        return;
    }
    for (int i = 0; i < n; i++)
        on_entry(&e[i]);
}

/* Post, taking completions while the send queue is full. */
#define POST(call, deadline)                                                                       \
    do {                                                                                           \
        int rc_;                                                                                   \
        while ((rc_ = (call)) == -EAGAIN)                                                          \
            drain(deadline, "posting");                                                            \
        CHECKF(rc_ == 0, "%s: %s", #call, t_errname(rc_));                                         \
    } while (0)

/* Key exchange: one NAP with the region key to every peer this rank talks
 * to: the first contact with each. */
static int keys_sent, keys_got;

static void on_key_entry(const struct uln_cqe *e)
{
    CHECK_CQE(e, e->status == 0 && e->peer >= 0 && e->peer < J.size && idx_of[e->peer] >= 0);
    if (e->op == ULN_OP_NAP) {
        keys_sent++;
        return;
    }
    CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->len == 8 && keys[e->peer] == 0);
    memcpy(&keys[e->peer], e->data, 8);
    CHECK(keys[e->peer] != 0);
    t_release(cq, e);
    keys_got++;
}

static void exchange_keys(uint64_t mine)
{
    static uint64_t key_msg;
    key_msg = mine;
    phase = PH_KEYS;
    double deadline = t_now() + 60;
    for (int i = 0; i < n_peers; i++)
        POST(uln_nap(ep, peers[i], &key_msg, 8, 0, ULN_INLINE), deadline);
    while (keys_sent < n_peers || keys_got < n_peers) {
        CHECKF(t_now() < deadline, "keys: %d/%d sent, %d/%d received", keys_sent, n_peers, keys_got,
               n_peers);
        drain(deadline, "keys");
    }
    phase = PH_ROUNDS;
}

/* The report: every rank sends rank 0 its VmRSS at the three points (KiB)
 * and how many peers it met. Rank 0 takes the mean over the ranks of each
 * rank's growth per peer. */
struct rss_report {
    int64_t before, met, busy, peers;
};
static int reports_sent, reports_got;
static struct rss_report rss_sum;
static double met_per_peer, busy_per_peer; /* summed over the ranks */

static void rss_add(const struct rss_report *r)
{
    rss_sum.before += r->before;
    rss_sum.met += r->met;
    rss_sum.busy += r->busy;
    met_per_peer += (double)(r->met - r->before) / (double)r->peers;
    busy_per_peer += (double)(r->busy - r->before) / (double)r->peers;
}

static void on_report_entry(const struct uln_cqe *e)
{
    CHECK_CQE(e, e->status == 0);
    if (e->op == ULN_OP_NAP) {
        reports_sent++;
        return;
    }
    CHECK_CQE(e, J.rank == 0 && e->op == ULN_OP_NAP_RECV && e->len == sizeof(struct rss_report));
    struct rss_report r;
    memcpy(&r, e->data, sizeof r);
    t_release(cq, e);
    CHECK_CQE(e, r.peers > 0);
    rss_add(&r);
    reports_got++;
}

static void report_rss(const struct rss_report *mine)
{
    static struct rss_report msg;
    msg = *mine;
    phase = PH_REPORT;
    double deadline = t_now() + 60;
    if (J.rank != 0) {
        POST(uln_nap(ep, 0, &msg, sizeof msg, 0, 0), deadline);
        while (reports_sent < 1)
            drain(deadline, "report");
        return;
    }
    rss_add(&msg);
    while (reports_got < J.size - 1)
        drain(deadline, "reports");
    double n = J.size;
    printf("rank0: memory per peer, mean over %d ranks (%s): %.1f KiB meeting them, "
           "%.1f KiB after the rounds (VmRSS %.0f KiB before, %.0f met, %.0f busy)\n",
           J.size, all_to_all ? "all to all" : "ring and rank 0", met_per_peer / n,
           busy_per_peer / n, (double)rss_sum.before / n, (double)rss_sum.met / n,
           (double)rss_sum.busy / n);
}

int main(int argc, char **argv)
{
    int rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "all"))
            all_to_all = true;
        else
            rounds = atoi(argv[i]);
    }
    double t0 = t_now();
    t_open(&J, 0);
    double t_opened = t_now();
    int n = J.size, me = J.rank;
    CHECKF(n >= 2, "many_ranks needs at least 2 ranks");
    /* Rank 0 handles 5(N-1) entries a round: let the CQ fill up at large N. */
    CHECK_OK(uln_cq_open(J.ctx, 512, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));

    peers = calloc((size_t)n, sizeof *peers);
    idx_of = calloc((size_t)n, sizeof *idx_of);
    keys = calloc((size_t)n, sizeof *keys);
    CHECK(peers && idx_of && keys);
    for (int p = 0; p < n; p++) {
        idx_of[p] = -1;
        if (talks(me, p, n)) {
            idx_of[p] = n_peers;
            peers[n_peers++] = p;
        }
    }
    bufs = calloc((size_t)n_peers, sizeof *bufs);
    got_nap = calloc((size_t)n_peers, 1);
    got_imm = calloc((size_t)n_peers, 1);
    CHECK(bufs && got_nap && got_imm);

    /* Read area, then one PUT slot per rank (pages of slots nobody writes
     * into are never touched: memfd memory is sparse). */
    size_t rlen = READ_LEN + (size_t)n * SLOT;
    CHECK_OK(uln_mem_alloc(J.ctx, rlen, (void **)&region));
    pat_fill(region, READ_LEN, pat_seed(me, OP_READ, 0), 0);
    struct uln_mr *mr;
    CHECK_OK(
        uln_mr_reg(J.ctx, region, rlen, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr));
    /* Our own memory touched before the first reading: what grows after it
     * is what meeting peers and working with them costs. */
    memset(region + READ_LEN, 0, rlen - READ_LEN);
    memset(bufs, 0xee, (size_t)n_peers * sizeof *bufs);
    struct rss_report rss = {.before = vm_rss_kib(), .peers = n_peers};
    exchange_keys(uln_mr_key(mr));
    double t_exch = t_now();
    t_barrier(&J);
    double t_keys = t_now();
    rss.met = vm_rss_kib();

    for (round_no = 0; round_no < rounds; round_no++) {
        double deadline = t_now() + 60;
        want_local = 3 * n_peers;
        want_nap = want_imm = n_peers;
        memset(got_nap, 0, (size_t)n_peers);
        memset(got_imm, 0, (size_t)n_peers);
        for (int i = 0; i < n_peers; i++) {
            int p = peers[i];
            struct peer_bufs *b = &bufs[i];
            uint64_t tag = (uint64_t)p << 8 | (unsigned)round_no;
            uint32_t nl = nap_len(me, p, round_no), pl = put_len(me, p, round_no);
            pat_fill(b->nap, nl, pat_seed(me, OP_NAP, tag), 0);
            pat_fill(b->put, pl, pat_seed(me, OP_PUT, tag), 0);
            uint64_t imm = (uint64_t)round_no << 32 | (uint32_t)me;
            /* Alternate the order, so some GETs queue behind PUTs and some not. */
            if ((i + round_no) & 1)
                POST(uln_get(ep, p, b->get, get_len(me, p, round_no), keys[p],
                             get_off(me, p, round_no), 3, 0),
                     deadline);
            POST(uln_put_imm(ep, p, b->put, pl, keys[p], READ_LEN + (uint64_t)me * SLOT, imm, 2, 0),
                 deadline);
            POST(uln_nap(ep, p, b->nap, nl, 1, 0), deadline);
            if (!((i + round_no) & 1))
                POST(uln_get(ep, p, b->get, get_len(me, p, round_no), keys[p],
                             get_off(me, p, round_no), 3, 0),
                     deadline);
        }
        while (want_local > 0 || want_nap > 0 || want_imm > 0)
            drain(deadline, "round");
        CHECK(want_local == 0 && want_nap == 0 && want_imm == 0);
        t_barrier(&J);
    }
    double t_rounds = t_now();
    rss.busy = vm_rss_kib();
    printf("rank%d: VmRSS %" PRId64 " KiB before meeting its %" PRId64 " peers, %" PRId64
           " KiB having met them, %" PRId64 " KiB after %d rounds\n",
           me, rss.before, rss.peers, rss.met, rss.busy, rounds);
    report_rss(&rss);
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    if (me == 0 || me == n / 2)
        printf("rank%d: %d ranks, %d peers, %d rounds: open %.2f s, keys %.2f s (then barrier %.2f "
               "s), "
               "rounds %.2f s; "
               "eagain %" PRIu64 ", sleeps %" PRIu64 ", pkts_dropped %" PRIu64 "\n",
               me, n, n_peers, rounds, t_opened - t0, t_exch - t_opened, t_keys - t_exch,
               t_rounds - t_keys, c.eagain, c.sleeps, c.pkts_dropped);
    t_barrier(&J);
    CHECK_OK(uln_mr_dereg(mr));
    CHECK_OK(uln_mem_free(J.ctx, region));
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    free(bufs);
    free(got_nap);
    free(got_imm);
    free(peers);
    free(idx_of);
    free(keys);
    return t_finish(&J);
}
