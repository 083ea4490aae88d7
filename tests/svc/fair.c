/*
 * fair.c - shares between processes through the service, measured (not a
 * test: where the service is not the bottleneck the senders' own speed
 * decides; svc.arbiter asserts the arbiter itself). Run as a job through
 * the services, e.g. across two namespace hosts:
 *
 *   tests/netns/run_job.sh --hosts 2 --ranks 4 --svc build/ulnetd -- \
 *       build/tests/svc/svc_fair [WINDOW]
 *
 * Rank 1 is the target: it registers a region, sends its key to the
 * senders and then sleeps (the PUTs into it are the services' work). The
 * senders are the other ranks on rank 0's host (r % 2 == 0 with two hosts:
 * ranks 0 and 2), each asking weight 1 + r / 2 (ULN_SERVICE_WEIGHT, before
 * uln_open), each PUTting SLOT bytes again and again into its own slot,
 * the PUT's number in its last 8 bytes. Once every sender is past WARM the
 * target counts the next WINDOW PUTs and prints each sender's share beside
 * its weight's; then it stops them and checks each slot holds its sender's
 * last PUT intact. Other ranks do nothing. Across hosts the target's
 * service places the PUTs from the other host while the target sleeps.
 * SVC_FAIR_DEPTH=N: each sender keeps at most N PUTs outstanding (default
 * and at most DEPTH; 64 PUTs of 64 KiB are past a flow's 2 MiB of credit,
 * 8 are not).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"

#define SLOT     (64u << 10)
#define WARM     100u
#define DEPTH    64u /* PUTs a sender keeps outstanding at most (SVC_FAIR_DEPTH: fewer) */
#define MAXS     8
#define DIE(...) (fprintf(stderr, "fair: " __VA_ARGS__), exit(1))

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(uint8_t *b, uint64_t seq, int rank)
{
    for (uint32_t i = 0; i + 8 < SLOT; i += 4) {
        uint32_t v = (uint32_t)seq * 2654435761u + i + (uint32_t)rank * 7919u;
        memcpy(b + i, &v, 4);
    }
    memcpy(b + SLOT - 8, &seq, 8);
}

static void nap_to(struct uln_ep *ep, struct uln_cq *cq, int peer, const void *b, size_t n)
{
    int rc;
    while ((rc = uln_nap(ep, peer, b, n, 0, 0)) == -EAGAIN)
        uln_cq_wait(cq, 1);
    if (rc) DIE("nap to %d: %s\n", peer, uln_strerror(rc));
}

static int nap_from(struct uln_cq *cq, void *out, size_t n)
{
    double end = now_s() + 120;
    for (;;) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) != 1) {
            if (now_s() > end) DIE("no NAP within 120 s\n");
            uln_cq_wait(cq, 10);
            continue;
        }
        if (e.status) DIE("completion: %s\n", uln_strerror(e.status));
        if (e.op != ULN_OP_NAP_RECV) continue;
        if (e.len != n) DIE("a NAP of %llu bytes from %d\n", (unsigned long long)e.len, e.peer);
        memcpy(out, e.data, n);
        uln_cqe_release(cq, &e);
        return e.peer;
    }
}

static int is_sender(int r, int size)
{
    return r % 2 == 0 && r / 2 < MAXS && r < size;
}

static void sender(struct uln_ep *ep, struct uln_cq *cq, int rank)
{
    uint64_t key;
    if (nap_from(cq, &key, sizeof key) != 1) DIE("rank %d: no key\n", rank);
    uint8_t *bufs = malloc((size_t)DEPTH * SLOT);
    uint64_t depth =
        getenv("SVC_FAIR_DEPTH") ? strtoull(getenv("SVC_FAIR_DEPTH"), NULL, 10) : DEPTH;
    if (depth == 0 || depth > DEPTH) depth = DEPTH;
    if (!bufs) DIE("malloc\n");
    uint64_t posted = 0, done = 0;
    bool stop = false;
    double end = now_s() + 300;
    while (!stop || done < posted) {
        while (!stop && posted - done < depth) {
            uint8_t *b = bufs + (posted % DEPTH) * SLOT;
            fill(b, posted, rank);
            int rc = uln_put(ep, 1, b, SLOT, key, (uint64_t)(rank / 2) * SLOT, posted, 0);
            if (rc == -EAGAIN) break;
            if (rc) DIE("rank %d: put: %s\n", rank, uln_strerror(rc));
            posted++;
        }
        struct uln_cqe e[64];
        int n = uln_cq_poll(cq, e, 64);
        if (n < 0) DIE("poll: %s\n", uln_strerror(n));
        for (int i = 0; i < n; i++) {
            if (e[i].status) DIE("rank %d: completion: %s\n", rank, uln_strerror(e[i].status));
            if (e[i].op == ULN_OP_NAP_RECV) {
                stop = true;
                uln_cqe_release(cq, &e[i]);
            } else if (e[i].op == ULN_OP_PUT)
                done++;
        }
        if (now_s() > end) DIE("rank %d: no end within 300 s\n", rank);
    }
    uint64_t last = posted - 1;
    nap_to(ep, cq, 1, &last, sizeof last);
    free(bufs);
}

static void target(struct uln_ep *ep, struct uln_cq *cq, struct uln_ctx *ctx, uint64_t window)
{
    int size = uln_size(ctx), ns = 0, who[MAXS];
    for (int r = 0; r < size; r++)
        if (is_sender(r, size)) who[ns++] = r;
    volatile uint8_t *region = calloc((size_t)ns, SLOT);
    struct uln_mr *mr;
    if (!region || uln_mr_reg(ctx, (void *)region, (size_t)ns * SLOT, ULN_ACCESS_REMOTE_WRITE, &mr))
        DIE("mr_reg\n");
    uint64_t key = uln_mr_key(mr);
    for (int s = 0; s < ns; s++)
        nap_to(ep, cq, who[s], &key, sizeof key);
    uint64_t base[MAXS], now[MAXS], sum = 0;
    bool counting = false;
    double t0 = 0, end = now_s() + 300;
    for (;;) {
        usleep(2000);
        bool warm = true;
        sum = 0;
        for (int s = 0; s < ns; s++) {
            now[s] = *(const volatile uint64_t *)(region + (size_t)(s + 1) * SLOT - 8);
            warm &= now[s] >= WARM;
            sum += counting ? now[s] - base[s] : 0;
        }
        if (!counting && warm) {
            counting = true, t0 = now_s();
            memcpy(base, now, sizeof base);
        }
        if (counting && sum >= window) break;
        if (now_s() > end) DIE("no window within 300 s\n");
    }
    double secs = now_s() - t0;
    static const uint8_t stop = 1;
    for (int s = 0; s < ns; s++)
        nap_to(ep, cq, who[s], &stop, 1);
    unsigned wsum = 0;
    for (int s = 0; s < ns; s++)
        wsum += 1u + (unsigned)who[s] / 2;
    printf("fair: %d senders, a window of %llu PUTs of %u KiB in %.2f s (%.2f GB/s)\n", ns,
           (unsigned long long)sum, SLOT >> 10, secs, (double)sum * SLOT / secs / 1e9);
    for (int s = 0; s < ns; s++)
        printf("fair: rank %d weight %u: %llu PUTs, share %.1f %% (weight's %.1f %%)\n", who[s],
               1u + (unsigned)who[s] / 2, (unsigned long long)(now[s] - base[s]),
               100.0 * (double)(now[s] - base[s]) / (double)sum,
               100.0 * (1u + (unsigned)who[s] / 2) / wsum);
    fflush(stdout);
    uint8_t *want = malloc(SLOT);
    for (int got = 0; got < ns; got++) {
        uint64_t last;
        int p = nap_from(cq, &last, sizeof last);
        int s = 0;
        while (s < ns && who[s] != p)
            s++;
        if (s == ns) DIE("an end from rank %d\n", p);
        fill(want, last, p);
        if (memcmp((const uint8_t *)region + (size_t)s * SLOT, want, SLOT))
            DIE("rank %d's slot does not hold its last PUT\n", p);
    }
    free(want);
    uln_mr_dereg(mr);
    free((void *)region);
}

int main(int argc, char **argv)
{
    uint64_t window = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000;
    const char *rs = getenv("ULN_RANK"), *ss = getenv("ULN_SIZE");
    int r = rs ? atoi(rs) : 0, size = ss ? atoi(ss) : 0;
    char w[16];
    snprintf(w, sizeof w, "%d", is_sender(r, size) ? 1 + r / 2 : 1);
    setenv("ULN_SERVICE_WEIGHT", w, 1);
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_size(ctx) < 3) DIE("run with 3 ranks or more\n");
    if (uln_rank(ctx) == 1)
        target(ep, cq, ctx, window);
    else if (is_sender(uln_rank(ctx), uln_size(ctx)))
        sender(ep, cq, uln_rank(ctx));
    uln_barrier(ctx, 300000);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
