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
 * 64, at most DEPTH; 64 PUTs of 64 KiB are past a flow's 2 MiB of credit,
 * 8 are not).
 *
 * Over time: SVC_FAIR_SECS=S counts for S seconds instead of a window of
 * PUTs, and SVC_FAIR_INTERVAL=T (seconds, default 0.5) prints each
 * interval's shares and Jain's index of the shares over their weights'
 * (1: exactly by weight). SVC_FAIR_WEIGHTS=1,2,3,4 gives sender i (rank
 * 2i) the i-th weight (default 1 + i; e.g. 1,1,1,1 for equal shares). Four
 * senders across two hosts: --ranks 8 (ranks 0, 2, 4, 6 on host 0); the
 * ranks that are neither sleep in uln_cq_wait until the end. A sender
 * that can neither post nor complete sleeps in uln_cq_wait (SVC_FAIR_POLL=1:
 * it polls, and on fewer CPUs than senders its CPU share decides).
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
#define DEPTH    256u /* PUTs a sender may keep outstanding (SVC_FAIR_DEPTH, default 64) */
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

/* Sender rank r's weight: SVC_FAIR_WEIGHTS' (r / 2)-th, else 1 + r / 2. */
static unsigned weight_of(int r)
{
    const char *s = getenv("SVC_FAIR_WEIGHTS");
    unsigned w = 1u + (unsigned)r / 2;
    for (int i = 0; s && *s; i++) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s) break;
        if (i == r / 2) return v >= 1 && v <= 64 ? (unsigned)v : w;
        s = *end == ',' ? end + 1 : end;
    }
    return w;
}

/* Jain's index of the shares x over the weights' shares: (sum y)^2 /
 * (n sum y^2), y = x / the weight's share; 1 when every y is equal. */
static double jain(const uint64_t *x, const unsigned *w, int n)
{
    double sx = 0, sy = 0, syy = 0;
    unsigned sw = 0;
    for (int i = 0; i < n; i++)
        sx += (double)x[i], sw += w[i];
    if (sx == 0) return 0;
    for (int i = 0; i < n; i++) {
        double y = ((double)x[i] / sx) / ((double)w[i] / sw);
        sy += y, syy += y * y;
    }
    return sy * sy / (n * syy);
}

static void sender(struct uln_ep *ep, struct uln_cq *cq, int rank)
{
    uint64_t key;
    if (nap_from(cq, &key, sizeof key) != 1) DIE("rank %d: no key\n", rank);
    uint8_t *bufs = malloc((size_t)DEPTH * SLOT);
    uint64_t depth = getenv("SVC_FAIR_DEPTH") ? strtoull(getenv("SVC_FAIR_DEPTH"), NULL, 10) : 64;
    if (depth == 0 || depth > DEPTH) depth = DEPTH;
    /* Asleep in uln_cq_wait when it can do nothing, as an application
     * blocks in its wait; SVC_FAIR_POLL=1: polls, and on a machine with
     * fewer CPUs than senders the CPU scheduler's shares decide. */
    bool wait = !getenv("SVC_FAIR_POLL") || !atoi(getenv("SVC_FAIR_POLL"));
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
        if (n == 0 && wait) { /* nothing to post or complete: asleep until a completion */
            int rc = uln_cq_wait(cq, 10);
            if (rc && rc != -ETIMEDOUT && rc != -EAGAIN)
                DIE("rank %d: wait: %s\n", rank, uln_strerror(rc));
            continue;
        }
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
    unsigned wt[MAXS];
    for (int s = 0; s < ns; s++)
        wt[s] = weight_of(who[s]);
    double secs_want = getenv("SVC_FAIR_SECS") ? atof(getenv("SVC_FAIR_SECS")) : 0;
    double step = getenv("SVC_FAIR_INTERVAL") ? atof(getenv("SVC_FAIR_INTERVAL")) : 0.5;
    if (step <= 0) step = 0.5;
    uint64_t base[MAXS], now[MAXS], prev[MAXS], sum = 0;
    bool counting = false;
    double t0 = 0, tl = 0, end = now_s() + 300;
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
            counting = true, t0 = tl = now_s();
            memcpy(base, now, sizeof base);
            memcpy(prev, now, sizeof prev);
        }
        if (counting && now_s() - tl >= step) { /* this interval's shares */
            uint64_t d[MAXS], dsum = 0;
            for (int s = 0; s < ns; s++)
                d[s] = now[s] - prev[s], dsum += d[s];
            printf("fair: t %5.2f s:", now_s() - t0);
            for (int s = 0; s < ns; s++)
                printf(" %5.1f", dsum ? 100.0 * (double)d[s] / (double)dsum : 0.0);
            printf(" %% (%.2f GB/s) jain %.3f\n", (double)dsum * SLOT / (now_s() - tl) / 1e9,
                   jain(d, wt, ns));
            fflush(stdout); /* seen as it goes (bench/svc_fair samples the CPU then) */
            memcpy(prev, now, sizeof prev);
            tl = now_s();
        }
        if (counting && (secs_want > 0 ? now_s() - t0 >= secs_want : sum >= window)) break;
        if (now_s() > end) DIE("no window within 300 s\n");
    }
    double secs = now_s() - t0;
    static const uint8_t stop = 1;
    for (int s = 0; s < ns; s++)
        nap_to(ep, cq, who[s], &stop, 1);
    unsigned wsum = 0;
    uint64_t moved[MAXS] = {0};
    for (int s = 0; s < ns; s++)
        wsum += wt[s], moved[s] = now[s] - base[s];
    printf("fair: %d senders, a window of %llu PUTs of %u KiB in %.2f s (%.2f GB/s), jain %.3f\n",
           ns, (unsigned long long)sum, SLOT >> 10, secs, (double)sum * SLOT / secs / 1e9,
           jain(moved, wt, ns));
    for (int s = 0; s < ns; s++)
        printf("fair: rank %d weight %u: %llu PUTs, share %.1f %% (weight's %.1f %%)\n", who[s],
               wt[s], (unsigned long long)moved[s], 100.0 * (double)moved[s] / (double)sum,
               100.0 * wt[s] / wsum);
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
    for (int r = 2; r < size; r++) /* the idle ranks sleep until now */
        if (!is_sender(r, size)) nap_to(ep, cq, r, &stop, 1);
    uln_mr_dereg(mr);
    free((void *)region);
}

int main(int argc, char **argv)
{
    uint64_t window = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000;
    const char *rs = getenv("ULN_RANK"), *ss = getenv("ULN_SIZE");
    int r = rs ? atoi(rs) : 0, size = ss ? atoi(ss) : 0;
    char w[16];
    snprintf(w, sizeof w, "%u", is_sender(r, size) ? weight_of(r) : 1u);
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
    else { /* asleep (uln_cq_wait) until the target's word: no CPU of ours */
        uint8_t stop;
        nap_from(cq, &stop, 1);
    }
    uln_barrier(ctx, 300000);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
