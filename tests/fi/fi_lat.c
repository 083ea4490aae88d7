/*
 * fi_lat - ping-pong latency and streaming bandwidth through the provider's
 * fi_tsend/fi_trecv, two ranks under ulnrun; used to place the rendezvous
 * switch-over (docs/provider.md). Data are checked at the end of each size.
 * lat_us is the median one-way time (half a round trip) of samples of 10
 * round trips (1 from 64 KiB), best_us the least.
 * Usage: ulnrun -n 2 fi_lat DIR [sizes...]
 *   (FI_ULNET_RNDV_MIN, FI_LAT_PROV, FI_LAT_INJECT: see docs/provider.md)
 *        FI_LAT_SELF=N fi_lat [size]
 *   one process, no launcher: N round trips between two endpoints (each in its
 *   own domain) through one-process loopback. Under callgrind
 *   (--toggle-collect=self_loop) the instructions per round trip are the same
 *   run after run, however loaded the machine: how the provider's own cost is
 *   compared before and after a change (docs/provider.md, Performance).
 *   FI_LAT_MSG=1 there: fi_pingpong's shape instead, fi_recv and
 *   fi_inject/fi_send (untagged) with a transmit and a receive CQ.
 *   FI_LAT_EMPTY=1 there: then N reads of an empty CQ, the step a client's
 *   wait loop repeats (--toggle-collect=empty_loop counts one).
 *   FI_LAT_SAFE=1 (both modes): an FI_THREAD_SAFE domain, as fi_pingpong's
 *   hints leave it, instead of FI_THREAD_DOMAIN (a lock in every call).
 */
#include <stdbool.h>

#include "fi_common.h"

static struct fic fx;

static enum fi_threading threading(void)
{
    const char *v = getenv("FI_LAT_SAFE");
    return v && atoi(v) ? FI_THREAD_SAFE : FI_THREAD_DOMAIN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void reap(int n)
{
    struct fi_cq_tagged_entry e[16];
    while (n > 0) {
        ssize_t k = fi_cq_read(fx.cq, e, n < 16 ? n : 16);
        if (k == -FI_EAGAIN) continue;
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(fx.cq, &err, 0);
            fprintf(stderr, "rank %d: error %s\n", rank, fi_strerror(err.err));
            exit(1);
        }
        OK(k);
        n -= (int)k;
    }
}

/* FI_LAT_INJECT=1: messages up to the inject size go by fi_tinject, as Open
 * MPI's ofi MTL sends them, with no send completion. Returns the completions
 * the send will bring (0 or 1). */
static bool use_inject;
static int send1(const void *b, size_t n, uint64_t tag)
{
    bool inj = use_inject && n <= fx.info->tx_attr->inject_size;
    ssize_t r;
    for (;;) {
        r = inj ? fi_tinject(fx.ep, b, n, fx.peer, tag)
                : fi_tsend(fx.ep, b, n, NULL, fx.peer, tag, NULL);
        if (r != -FI_EAGAIN) break;
        struct fi_cq_tagged_entry e;
        if (fi_cq_read(fx.cq, &e, 0) < -FI_EAGAIN) break;
    }
    OK(r);
    return inj ? 0 : 1;
}

/* FI_LAT_SELF: a completion on f's CQ, whatever it is. */
static void self_reap(struct fic *f, int n)
{
    struct fi_cq_tagged_entry e[4];
    while (n > 0) {
        ssize_t k = fi_cq_read(f->cq, e, 4);
        if (k == -FI_EAGAIN) continue;
        OK(k);
        n -= (int)k;
    }
}

/* FI_LAT_MSG: fi_pingpong's shape, untagged, each endpoint with its own
 * transmit CQ (f->cq takes the receives) */
static bool use_msg;
static struct fid_cq *tx_cq[2];

/* One message from `from` to `to`, the receive posted first (progress is
 * per domain, and a rendezvous send completes only once the receiver has
 * read it). */
static void self_one(struct fic *from, struct fic *to, int k, uint8_t *s, uint8_t *r, size_t len)
{
    /* as send1: inject only what fits the inject size */
    bool inj = use_inject && len <= from->info->tx_attr->inject_size;
    if (use_msg) {
        OK(fi_recv(to->ep, r, len, NULL, to->peer, NULL));
        if (inj)
            OK(fi_inject(from->ep, s, len, from->peer));
        else
            OK(fi_send(from->ep, s, len, NULL, from->peer, NULL));
        self_reap(to, 1);
        if (!inj) {
            struct fi_cq_entry e;
            while (fi_cq_read(tx_cq[k], &e, 1) == -FI_EAGAIN)
                ;
        }
        return;
    }
    OK(fi_trecv(to->ep, r, len, NULL, to->peer, 1, 0, NULL));
    if (inj)
        OK(fi_tinject(from->ep, s, len, from->peer, 1));
    else
        OK(fi_tsend(from->ep, s, len, NULL, from->peer, 1, NULL));
    self_reap(to, 1);
    if (!inj) self_reap(from, 1);
}

/* FI_LAT_EMPTY: n reads of an empty CQ, the step a client's wait loop
 * repeats until a completion comes. Not inlined: callgrind's
 * --toggle-collect names it. */
__attribute__((noinline)) void empty_loop(struct fic *f, int n)
{
    struct fi_cq_tagged_entry e[4];
    for (int i = 0; i < n; i++)
        if (fi_cq_read(f->cq, e, 4) != -FI_EAGAIN) {
            fprintf(stderr, "empty: a completion where none was due\n");
            exit(1);
        }
}

/* n round trips of len bytes from a to b and back; each side posts its
 * receive first, as fi_lat's ranks do. Not inlined: callgrind's
 * --toggle-collect names it. */
__attribute__((noinline)) void self_loop(struct fic *a, struct fic *b, int n, uint8_t *s,
                                         uint8_t *r, size_t len)
{
    struct fic *side[2] = {a, b};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++)
            self_one(side[k], side[!k], k, s, r, len);
}

static int self_main(int n, size_t len)
{
    static struct fic a, b;
    struct fic *f[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        struct fi_info *hints = fic_hints(use_msg ? FI_MSG : FI_TAGGED, getenv("FI_LAT_PROV"));
        hints->domain_attr->threading = threading();
        fic_open(f[k], hints, FI_AV_MAP, 1024);
        if (use_msg) {
            struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
            OK(fi_cq_open(f[k]->dom, &ca, &tx_cq[k], NULL));
            OK(fi_ep_bind(f[k]->ep, &f[k]->av->fid, 0));
            OK(fi_ep_bind(f[k]->ep, &tx_cq[k]->fid, FI_TRANSMIT));
            OK(fi_ep_bind(f[k]->ep, &f[k]->cq->fid, FI_RECV));
            OK(fi_enable(f[k]->ep));
        } else {
            fic_enable(f[k]);
        }
        f[k]->namelen = sizeof(f[k]->name);
        OK(fi_getname(&f[k]->ep->fid, f[k]->name, &f[k]->namelen));
    }
    for (int k = 0; k < 2; k++)
        OK(fi_av_insert(f[k]->av, f[!k]->name, 1, &f[k]->peer, 0, NULL));
    uint8_t *s = calloc(1, len + 1), *r = calloc(1, len + 1);
    for (size_t i = 0; i < len; i++)
        s[i] = (uint8_t)(i * 7 + len);
    self_loop(&a, &b, 100, s, r, len); /* warm up: first-use paths out of the count */
    double t0 = fic_now();
    self_loop(&a, &b, n, s, r, len);
    double us = (fic_now() - t0) / n * 1e6;
    if (len && memcmp(s, r, len)) {
        fprintf(stderr, "self: data wrong\n");
        return 1;
    }
    printf("%zu B: %d round trips in one process, %.3f us each\n", len, n, us);
    if (getenv("FI_LAT_EMPTY")) {
        empty_loop(&a, 100); /* warm up, as above */
        t0 = fic_now();
        empty_loop(&a, n);
        printf("empty fi_cq_read: %d in %.3f us each\n", n, (fic_now() - t0) / n * 1e6);
    }
    for (int k = 0; k < 2; k++) {
        if (!tx_cq[k]) {
            fic_close(f[k]);
            continue;
        }
        /* fic_close's order, with the transmit CQ after the endpoint */
        OK(fi_close(&f[k]->ep->fid));
        OK(fi_close(&tx_cq[k]->fid));
        OK(fi_close(&f[k]->cq->fid));
        OK(fi_close(&f[k]->av->fid));
        OK(fi_close(&f[k]->dom->fid));
        OK(fi_close(&f[k]->fab->fid));
        fi_freeinfo(f[k]->info);
        fi_freeinfo(f[k]->hints);
    }
    free(s);
    free(r);
    return 0;
}

int main(int argc, char **argv)
{
    use_inject = getenv("FI_LAT_INJECT") && atoi(getenv("FI_LAT_INJECT"));
    use_msg = getenv("FI_LAT_MSG") && atoi(getenv("FI_LAT_MSG"));
    if (getenv("FI_LAT_SELF"))
        return self_main(atoi(getenv("FI_LAT_SELF")), argc > 1 ? strtoull(argv[1], NULL, 0) : 8);
    if (argc < 2) return 2;
    /* FI_LAT_PROV=shm: the same measurement over another provider */
    struct fi_info *hints = fic_hints(FI_TAGGED, getenv("FI_LAT_PROV"));
    hints->domain_attr->threading = threading();
    fic_open(&fx, hints, FI_AV_MAP, 1024);
    fic_enable(&fx);
    fic_exchange(&fx, argv[1]);

    size_t def[] = {8,     64,    1024,   4096,    8000,    16384,
                    32768, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
    int nsz = argc > 2 ? argc - 2 : (int)(sizeof(def) / sizeof(def[0]));
    size_t maxsz = 16 << 20;
    uint8_t *s = malloc(maxsz), *r = malloc(maxsz);
    if (!rank) printf("%10s %12s %12s %12s\n", "bytes", "lat_us", "best_us", "bw_MB/s");
    for (int k = 0; k < nsz; k++) {
        size_t n = argc > 2 ? strtoull(argv[2 + k], NULL, 0) : def[k];
        if (n > maxsz) continue;
        for (size_t i = 0; i < n; i++)
            s[i] = (uint8_t)(i * 7 + n);
        int iters = n < 65536 ? 2000 : n < (1 << 20) ? 200 : 20;
        /* latency: ping-pong, half the round trip; the median and the best
         * of samples of `per` round trips (few clock reads: in a VM one costs
         * tens of ns), which a machine shared with other jobs moves far less
         * than the mean */
        int per = n < 65536 ? 10 : 1, samples = iters / per;
        double *rt = malloc((size_t)samples * sizeof(*rt));
        for (int i = -1; i < samples; i++) {
            double t0 = fic_now();
            for (int j = 0; j < per; j++) {
                OK(fi_trecv(fx.ep, r, n, NULL, fx.peer, 1, 0, NULL));
                if (rank == 0) {
                    reap(1 + send1(s, n, 1));
                } else {
                    reap(1);
                    reap(send1(s, n, 1));
                }
            }
            if (i >= 0) rt[i] = (fic_now() - t0) / per / 2 * 1e6;
        }
        qsort(rt, (size_t)samples, sizeof(*rt), cmp_double);
        double lat = rt[samples / 2], best = rt[0];
        free(rt);
        for (size_t i = 0; i < n; i++)
            if (r[i] != (uint8_t)(i * 7 + n)) {
                fprintf(stderr, "rank %d: byte %zu wrong at size %zu\n", rank, i, n);
                return 1;
            }
        /* bandwidth: a window of 16 from rank 0, one ack back */
        int win = 16, reps = iters / 4 + 1;
        double t0 = fic_now();
        for (int i = 0; i < reps; i++) {
            if (rank == 1) {
                for (int w = 0; w < win; w++)
                    OK(fi_trecv(fx.ep, r, n, NULL, fx.peer, 2, 0, NULL));
                reap(win);
                reap(send1(s, 0, 3));
            } else {
                OK(fi_trecv(fx.ep, NULL, 0, NULL, fx.peer, 3, 0, NULL));
                int c = 1;
                for (int w = 0; w < win; w++)
                    c += send1(s, n, 2);
                reap(c);
            }
        }
        double bw = (double)n * win * reps / (fic_now() - t0) / 1e6;
        if (!rank) printf("%10zu %12.3f %12.3f %12.1f\n", n, lat, best, bw);
    }
    fic_close(&fx);
    return 0;
}
