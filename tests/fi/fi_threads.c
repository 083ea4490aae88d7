/*
 * fi_threads - FI_THREAD_SAFE: 4 threads per rank share one endpoint and one
 * CQ, each exchanging its own tagged messages (eager and rendezvous) with its
 * twin thread on the other rank; any thread may read any completion off the
 * CQ and hands it to its owner. Every byte is checked.
 * Usage: ulnrun -n 2 fi_threads DIR
 */
#include "fi_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

static struct fic fx;
static atomic_int thread_failures;

enum { THREADS = 4, ITERS = 100 };
struct op {
    struct fi_context fc; /* first: the op_context libfabric hands back */
    atomic_int done;
};

/* Read a few completions, whoever they are for, and mark them done. */
static void drain(void)
{
    struct fi_cq_tagged_entry e[8];
    ssize_t n = fi_cq_read(fx.cq, e, 8);
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
        while ((rc = fi_trecv(fx.ep, r, max, NULL, fx.peer, tag, 0, &ro.fc)) == -FI_EAGAIN)
            drain();
        if (rc) exit(1);
        while ((rc = fi_tsend(fx.ep, s, n, NULL, fx.peer, tag, &so.fc)) == -FI_EAGAIN)
            drain();
        if (rc) exit(1);
        while (!atomic_load(&so.done) || !atomic_load(&ro.done))
            drain();
        for (size_t k = 0; k < n; k++)
            if (r[k] != (uint8_t)(k + tag * 7 + !rank)) {
                fprintf(stderr, "rank %d thread %d: byte %zu of message %d\n", rank, t, k, i);
                atomic_fetch_add(&thread_failures, 1);
                break;
            }
    }
    free(s);
    free(r);
    return NULL;
}
int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    struct fi_info *hints = fic_hints(FI_TAGGED, NULL);
    hints->domain_attr->threading = FI_THREAD_SAFE;
    fic_open(&fx, hints, FI_AV_MAP, 0);
    fic_enable(&fx);
    fic_exchange(&fx, argv[1]);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    fic_close(&fx);
    printf("rank %d: %d threads x %d exchanges, %s\n", rank, THREADS, ITERS,
           atomic_load(&thread_failures) ? "FAILED" : "ok");
    return atomic_load(&thread_failures) ? 1 : 0;
}
