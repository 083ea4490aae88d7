/*
 * fi_threads - FI_THREAD_SAFE: 4 threads per rank share one endpoint and one
 * CQ, each exchanging its own tagged messages (eager and rendezvous) with its
 * twin thread on the other rank; any thread may read any completion off the
 * CQ and hands it to its owner. Every byte is checked.
 * Usage: ulnrun -n 2 fi_threads DIR
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static fi_addr_t peer;
static atomic_int failures;

enum { THREADS = 4, ITERS = 100 };
struct op {
    struct fi_context fc; /* first: the op_context libfabric hands back */
    atomic_int done;
};

/* Read a few completions, whoever they are for, and mark them done. */
static void drain(void)
{
    struct fi_cq_tagged_entry e[8];
    ssize_t n = fi_cq_read(cq, e, 8);
    if (n == -FI_EAGAIN) return;
    if (n < 0) {
        fprintf(stderr, "rank %d: fi_cq_read %zd\n", rank, n);
        exit(1);
    }
    for (ssize_t i = 0; i < n; i++)
        atomic_store(&((struct op *)e[i].op_context)->done, 1);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    size_t max = 20000;
    uint8_t *s = malloc(max), *r = malloc(max);
    for (int i = 0; i < ITERS; i++) {
        size_t n = i % 3 == 0 ? 20000 : (size_t)(i % 200); /* rendezvous now and then */
        uint64_t tag = (uint64_t)t << 32 | (uint64_t)i;
        for (size_t k = 0; k < n; k++)
            s[k] = (uint8_t)(k + tag * 7 + rank);
        struct op so = {0}, ro = {0};
        ssize_t rc;
        while ((rc = fi_trecv(ep, r, max, NULL, peer, tag, 0, &ro.fc)) == -FI_EAGAIN)
            drain();
        if (rc) exit(1);
        while ((rc = fi_tsend(ep, s, n, NULL, peer, tag, &so.fc)) == -FI_EAGAIN)
            drain();
        if (rc) exit(1);
        while (!atomic_load(&so.done) || !atomic_load(&ro.done))
            drain();
        for (size_t k = 0; k < n; k++)
            if (r[k] != (uint8_t)(k + tag * 7 + !rank)) {
                fprintf(stderr, "rank %d thread %d: byte %zu of message %d\n", rank, t, k, i);
                atomic_fetch_add(&failures, 1);
                break;
            }
    }
    free(s);
    free(r);
    return NULL;
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        long _r = (long)(call);                                                                    \
        if (_r < 0) {                                                                              \
            fprintf(stderr, "rank %d: %s = %ld (%s)\n", rank, #call, _r, fi_strerror((int)-_r));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    rank = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "0");
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup("ulnet");
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    OK(fi_endpoint(dom, info, &ep, NULL));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep));
    char name[128], path[512], fin[512];
    size_t len = sizeof(name);
    OK(fi_getname(&ep->fid, name, &len));
    snprintf(path, sizeof(path), "%s/n%d.tmp", argv[1], rank);
    snprintf(fin, sizeof(fin), "%s/n%d", argv[1], rank);
    FILE *f = fopen(path, "w");
    fwrite(name, 1, len, f);
    fclose(f);
    rename(path, fin);
    snprintf(path, sizeof(path), "%s/n%d", argv[1], !rank);
    for (;;) {
        f = fopen(path, "r");
        if (f && fread(name, 1, len, f) == len) break;
        if (f) fclose(f);
        usleep(10000);
    }
    fclose(f);
    OK(fi_av_insert(av, name, 1, &peer, 0, NULL));
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("rank %d: %d threads x %d exchanges, %s\n", rank, THREADS, ITERS,
           atomic_load(&failures) ? "FAILED" : "ok");
    return atomic_load(&failures) ? 1 : 0;
}
