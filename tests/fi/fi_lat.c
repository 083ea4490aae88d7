/*
 * fi_lat - ping-pong latency and streaming bandwidth through the provider's
 * fi_tsend/fi_trecv, two ranks under ulnrun; used to place the rendezvous
 * switch-over (docs/provider.md). Data are checked at the end of each size.
 * Usage: ulnrun -n 2 fi_lat DIR [sizes...]   (FI_ULNET_RNDV_MIN, FI_LAT_PROV: see docs)
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank;
static struct fid_ep *ep;
static struct fid_cq *cq;
static fi_addr_t peer;

#define OK(call)                                                                                   \
    do {                                                                                           \
        long _r = (long)(call);                                                                    \
        if (_r < 0) {                                                                              \
            fprintf(stderr, "rank %d: %s = %ld (%s)\n", rank, #call, _r, fi_strerror((int)-_r));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void reap(int n)
{
    struct fi_cq_tagged_entry e[16];
    while (n > 0) {
        ssize_t k = fi_cq_read(cq, e, n < 16 ? n : 16);
        if (k == -FI_EAGAIN) continue;
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(cq, &err, 0);
            fprintf(stderr, "rank %d: error %s\n", rank, fi_strerror(err.err));
            exit(1);
        }
        OK(k);
        n -= (int)k;
    }
}

static void send1(const void *b, size_t n, uint64_t tag)
{
    ssize_t r;
    while ((r = fi_tsend(ep, b, n, NULL, peer, tag, NULL)) == -FI_EAGAIN) {
        struct fi_cq_tagged_entry e;
        if (fi_cq_read(cq, &e, 0) < -FI_EAGAIN) break;
    }
    OK(r);
}

static void names(const char *dir, struct fid_av *av)
{
    char name[256], path[512], fin[512];
    size_t len = sizeof(name);
    OK(fi_getname(&ep->fid, name, &len));
    snprintf(path, sizeof(path), "%s/n%d.tmp", dir, rank);
    snprintf(fin, sizeof(fin), "%s/n%d", dir, rank);
    FILE *f = fopen(path, "w");
    fwrite(name, 1, len, f);
    fclose(f);
    rename(path, fin);
    snprintf(path, sizeof(path), "%s/n%d", dir, !rank);
    for (;;) {
        f = fopen(path, "r");
        if (f && fread(name, 1, len, f) == len) break;
        if (f) fclose(f);
        usleep(10000);
    }
    fclose(f);
    OK(fi_av_insert(av, name, 1, &peer, 0, NULL));
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    rank = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "0");
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    /* FI_LAT_PROV=shm: the same measurement over another provider */
    const char *prov = getenv("FI_LAT_PROV");
    hints->fabric_attr->prov_name = strdup(prov ? prov : "ulnet");
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = 1024};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    OK(fi_endpoint(dom, info, &ep, NULL));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep));
    names(argv[1], av);

    size_t def[] = {8,     64,    1024,   4096,    8000,    16384,
                    32768, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
    int nsz = argc > 2 ? argc - 2 : (int)(sizeof(def) / sizeof(def[0]));
    size_t maxsz = 16 << 20;
    uint8_t *s = malloc(maxsz), *r = malloc(maxsz);
    if (!rank) printf("%10s %12s %12s\n", "bytes", "lat_us", "bw_MB/s");
    for (int k = 0; k < nsz; k++) {
        size_t n = argc > 2 ? strtoull(argv[2 + k], NULL, 0) : def[k];
        if (n > maxsz) continue;
        for (size_t i = 0; i < n; i++)
            s[i] = (uint8_t)(i * 7 + n);
        int iters = n < 65536 ? 2000 : n < (1 << 20) ? 200 : 20;
        /* latency: ping-pong, half the round trip */
        double t0 = 0;
        for (int i = -10; i < iters; i++) {
            if (i == 0) t0 = now();
            OK(fi_trecv(ep, r, n, NULL, peer, 1, 0, NULL));
            if (rank == 0) {
                send1(s, n, 1);
                reap(2);
            } else {
                reap(1);
                send1(s, n, 1);
                reap(1);
            }
        }
        double lat = (now() - t0) / iters / 2 * 1e6;
        for (size_t i = 0; i < n; i++)
            if (r[i] != (uint8_t)(i * 7 + n)) {
                fprintf(stderr, "rank %d: byte %zu wrong at size %zu\n", rank, i, n);
                return 1;
            }
        /* bandwidth: a window of 16 from rank 0, one ack back */
        int win = 16, reps = iters / 4 + 1;
        t0 = now();
        for (int i = 0; i < reps; i++) {
            if (rank == 1) {
                for (int w = 0; w < win; w++)
                    OK(fi_trecv(ep, r, n, NULL, peer, 2, 0, NULL));
                reap(win);
                send1(s, 0, 3);
                reap(1);
            } else {
                OK(fi_trecv(ep, NULL, 0, NULL, peer, 3, 0, NULL));
                for (int w = 0; w < win; w++)
                    send1(s, n, 2);
                reap(win + 1);
            }
        }
        double bw = (double)n * win * reps / (now() - t0) / 1e6;
        if (!rank) printf("%10zu %12.2f %12.1f\n", n, lat, bw);
    }
    fi_close(&ep->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return 0;
}
