/*
 * flood.c - one process floods a host pair through the services while
 * another's NAPs still move (docs/service.md, "Between services": shares
 * of the out-queue).
 *
 * Four ranks on two namespace hosts (run_job.sh --svc): rank r on host
 * r % 2, so ranks 0 and 2 share host 0's service and the wire to host 1.
 * Rank 0 streams PUTs of PUT_LEN into rank 1's region with up to DEPTH
 * outstanding, as fast as the services take them, until rank 2 tells it to
 * stop. Meanwhile rank 2 plays PINGS NAP ping-pongs with rank 3 (data
 * checked) behind that flood, and prints their round trips (median, 90th
 * percentile, worst: a measurement, not asserted), and counts the flood's
 * progress meanwhile: the PUTs rank 0 completed during each round trip (a
 * count rank 0 keeps in shared memory on their host). Then it stops rank
 * 0, which waits for its PUTs and tells rank 1 how many there were; rank 1
 * checks the last PUT of every slot of its region. The job passes only if
 * the ping-pongs finished while the flood was still running (rank 0 still
 * had PUTs outstanding when the stop came), the flood moved during them,
 * the NAPs' slow-down stayed within its bound - on average a round trip
 * while rank 0 completed at most DEPTH PUTs (8 MiB, the most it has in
 * flight at once: a NAP that waited behind the flood's stream instead of
 * beside it would see more) - and every byte is right.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"

#define PUT_LEN  (256u << 10)
#define SLOTS    16u
#define DEPTH    32u
#define PINGS    2000u
#define PING_LEN 64u
#define DIE(...) (fprintf(stderr, "flood: " __VA_ARGS__), exit(1))

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The flood's progress where the pinger beside it on host 0 reads it: PUTs
 * completed so far (a page of /dev/shm named by the job, which the hosts'
 * network namespaces share). Relaxed: a count read now and then. */
static _Atomic uint64_t *flood_count;

static void count_open(struct uln_ctx *ctx)
{
    char name[64];
    snprintf(name, sizeof name, "/ulnet-flood-%016llx", (unsigned long long)uln_job_key(ctx));
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) DIE("shm %s\n", name);
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) DIE("mmap\n");
    flood_count = p;
}

static void count_close(struct uln_ctx *ctx)
{
    char name[64];
    snprintf(name, sizeof name, "/ulnet-flood-%016llx", (unsigned long long)uln_job_key(ctx));
    munmap((void *)flood_count, 4096);
    shm_unlink(name); /* the second of the two finds it gone */
}

static uint32_t naps_sent, naps_done; /* this rank's NAPs and their completions */

/* The next completion other than a NAP of ours leaving (waiting for it). */
static void next(struct uln_cq *cq, struct uln_cqe *e)
{
    for (;;) {
        while (uln_cq_poll(cq, e, 1) != 1)
            uln_cq_wait(cq, 10);
        if (e->op != ULN_OP_NAP) return;
        if (e->status) DIE("nap completion: %s\n", uln_strerror(e->status));
        naps_done++;
    }
}

static void nap_wait(struct uln_ep *ep, struct uln_cq *cq, int peer, const void *b, uint32_t len)
{
    int rc;
    while ((rc = uln_nap(ep, peer, b, len, 0, 0)) == -EAGAIN)
        uln_cq_wait(cq, 1);
    if (rc) DIE("nap to %d: %s\n", peer, uln_strerror(rc));
    naps_sent++;
}

static void flood(struct uln_ep *ep, struct uln_cq *cq)
{
    struct uln_cqe e;
    next(cq, &e); /* rank 1's key */
    uint64_t key;
    if (e.op != ULN_OP_NAP_RECV || e.peer != 1 || e.len != sizeof key) DIE("key\n");
    memcpy(&key, e.data, sizeof key);
    uln_cqe_release(cq, &e);
    uint8_t *src = malloc((size_t)SLOTS * PUT_LEN);
    if (!src) DIE("malloc\n");
    uint32_t posted = 0, done = 0;
    bool stop = false;
    while (!stop) {
        if (posted - done < DEPTH) {
            uint32_t s = posted % SLOTS;
            memset(src + (size_t)s * PUT_LEN, (int)(posted % 251 + 1), PUT_LEN);
            int rc = uln_put(ep, 1, src + (size_t)s * PUT_LEN, PUT_LEN, key, (uint64_t)s * PUT_LEN,
                             posted, 0);
            if (rc == 0)
                posted++;
            else if (rc != -EAGAIN)
                DIE("put: %s\n", uln_strerror(rc));
        }
        struct uln_cqe c[16];
        int n = uln_cq_poll(cq, c, 16);
        for (int i = 0; i < n; i++) {
            if (c[i].op == ULN_OP_NAP_RECV && c[i].peer == 2) {
                stop = true;
                uln_cqe_release(cq, &c[i]);
                continue;
            }
            if (c[i].op != ULN_OP_PUT || c[i].status)
                DIE("put completion: op %u status %d\n", c[i].op, c[i].status);
            /* A slot is written again only after its PUT completed: DEPTH < SLOTS * 2
             * keeps at most two in flight per slot, in order on one flow. */
            done++;
            atomic_store_explicit(flood_count, done, memory_order_relaxed);
        }
        if (n <= 0 && posted - done >= DEPTH) uln_cq_wait(cq, 1);
    }
    uint32_t outstanding = posted - done;
    while (done < posted) {
        struct uln_cqe c;
        next(cq, &c);
        if (c.op != ULN_OP_PUT || c.status)
            DIE("put completion: op %u status %d\n", c.op, c.status);
        done++;
    }
    printf("flood: rank 0 PUT %u x %u KiB, %u outstanding when stopped\n", posted, PUT_LEN >> 10,
           outstanding);
    if (outstanding == 0) DIE("the flood was not running when the ping-pongs ended\n");
    nap_wait(ep, cq, 1, &posted, sizeof posted);
    free(src);
}

static void target(struct uln_ctx *ctx, struct uln_ep *ep, struct uln_cq *cq)
{
    uint8_t *region = calloc(SLOTS, PUT_LEN);
    struct uln_mr *mr;
    if (!region || uln_mr_reg(ctx, region, (size_t)SLOTS * PUT_LEN, ULN_ACCESS_REMOTE_WRITE, &mr))
        DIE("region\n");
    uint64_t key = uln_mr_key(mr);
    nap_wait(ep, cq, 0, &key, sizeof key);
    uint32_t posted = 0;
    for (bool got = false; !got;) {
        struct uln_cqe e;
        next(cq, &e);
        if (e.op != ULN_OP_NAP_RECV || e.peer != 0 || e.len != sizeof posted) DIE("count\n");
        memcpy(&posted, e.data, sizeof posted);
        uln_cqe_release(cq, &e);
        got = true;
    }
    for (uint32_t s = 0; s < SLOTS && s < posted; s++) {
        uint32_t last = (posted - 1 - s) / SLOTS * SLOTS + s;
        for (uint32_t k = 0; k < PUT_LEN; k++)
            if (region[(size_t)s * PUT_LEN + k] != (uint8_t)(last % 251 + 1))
                DIE("slot %u byte %u: %u, want PUT %u's\n", s, k, region[(size_t)s * PUT_LEN + k],
                    last);
    }
    printf("flood: rank 1 checked %u PUTs' last writes\n", posted);
    uln_mr_dereg(mr);
    free(region);
}

static void pinger(struct uln_ep *ep, struct uln_cq *cq)
{
    static double rtt[PINGS], ahead[PINGS];
    uint8_t b[PING_LEN];
    uint64_t first = atomic_load_explicit(flood_count, memory_order_relaxed);
    for (uint32_t i = 0; i < PINGS; i++) {
        memset(b, (int)(i % 253), sizeof b);
        double t0 = now_us();
        uint64_t c0 = atomic_load_explicit(flood_count, memory_order_relaxed);
        nap_wait(ep, cq, 3, b, sizeof b);
        for (bool back = false; !back;) {
            struct uln_cqe e;
            next(cq, &e);
            if (e.op != ULN_OP_NAP_RECV || e.peer != 3 || e.len != PING_LEN ||
                memcmp(e.data, b, PING_LEN))
                DIE("pong %u: wrong\n", i);
            uln_cqe_release(cq, &e);
            back = true;
        }
        rtt[i] = now_us() - t0;
        ahead[i] = (double)(atomic_load_explicit(flood_count, memory_order_relaxed) - c0);
    }
    uint64_t total = atomic_load_explicit(flood_count, memory_order_relaxed) - first;
    qsort(rtt, PINGS, sizeof rtt[0], cmp);
    qsort(ahead, PINGS, sizeof ahead[0], cmp);
    printf("flood: rank 2 %u NAP round trips behind the flood: median %.0f us, p90 %.0f us, "
           "max %.0f us\n",
           PINGS, rtt[PINGS / 2], rtt[PINGS * 9 / 10], rtt[PINGS - 1]);
    printf("flood: rank 0's PUTs completed meanwhile: %llu; per round trip median %.0f, p90 "
           "%.0f, max %.0f\n",
           (unsigned long long)total, ahead[PINGS / 2], ahead[PINGS * 9 / 10], ahead[PINGS - 1]);
    if (total == 0) DIE("the flood did not move during the ping-pongs\n");
    if (total > (uint64_t)PINGS * DEPTH)
        DIE("the NAPs waited behind the flood: %llu PUTs during %u round trips\n",
            (unsigned long long)total, PINGS);
    uint8_t stop = 1;
    nap_wait(ep, cq, 0, &stop, 1);
}

static void ponger(struct uln_ep *ep, struct uln_cq *cq)
{
    for (uint32_t i = 0; i < PINGS;) {
        struct uln_cqe e;
        next(cq, &e);
        if (e.op != ULN_OP_NAP_RECV || e.peer != 2 || e.len != PING_LEN) DIE("ping %u\n", i);
        uint8_t b[PING_LEN];
        memcpy(b, e.data, PING_LEN);
        uln_cqe_release(cq, &e);
        nap_wait(ep, cq, 2, b, sizeof b);
        i++;
    }
}

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_size(ctx) != 4) DIE("run with 4 ranks\n");
    if (uln_rank(ctx) % 2 == 0) count_open(ctx);
    switch (uln_rank(ctx)) {
    case 0:
        flood(ep, cq);
        break;
    case 1:
        target(ctx, ep, cq);
        break;
    case 2:
        pinger(ep, cq);
        break;
    default:
        ponger(ep, cq);
        break;
    }
    /* Every NAP this rank sent has left before it closes. */
    while (naps_done < naps_sent) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) != 1) {
            uln_cq_wait(cq, 10);
            continue;
        }
        if (e.op != ULN_OP_NAP || e.status) DIE("at the end: op %u status %d\n", e.op, e.status);
        naps_done++;
    }
    if (uln_rank(ctx) % 2 == 0) count_close(ctx);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
