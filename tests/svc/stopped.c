/*
 * stopped.c - a stopped process does not stall another's stream through the
 * service (no head-of-line blocking across processes).
 *
 * Four ranks, ULN_TRANSPORT=svc. Rank 1 prints its pid and "ready"; the
 * script (stopped.sh) stops it with SIGSTOP and then creates the file
 * argv[1]. Rank 0 then streams N NAPs to the stopped rank 1 (its ring and
 * rank 0's queue fill up and stay full), while rank 2 streams N NAPs to
 * rank 3, which must receive every one, in order, data checked, while rank
 * 1 is still stopped: it prints "neighbour done". The script then sends
 * SIGCONT, and rank 1 must receive all of rank 0's NAPs, in order, once.
 *
 * With "answers" after the file name (tests/netns/svc_stopped.sh, across
 * hosts): rank 3 then PUTs into rank 0's memory, each PUT waiting for its
 * completion - rank 0's acknowledgement, which rank 0 sends while its own
 * stream to the stopped rank 1 is held back: every one must complete while
 * rank 1 is still stopped ("answers done"), and the data is checked.
 * Rank 2 starts its stream only once rank 3 has rank 0's key (a NAP from
 * rank 3 says so), so rank 3's first message is that key.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"

#define N        20000u
#define LEN      256u
#define DIE(...) (fprintf(stderr, "stopped: " __VA_ARGS__), exit(1))

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(uint8_t *b, uint32_t seq)
{
    for (uint32_t i = 0; i < LEN; i++)
        b[i] = (uint8_t)(seq * 31 + i);
}

static void send_all(struct uln_ep *ep, struct uln_cq *cq, int peer)
{
    /* Each NAP's buffer stays untouched until its completion (ulnet.h). */
    uint8_t *all = malloc((size_t)N * LEN);
    if (!all) DIE("malloc\n");
    uint32_t done = 0;
    for (uint32_t seq = 0; seq < N; seq++)
        fill(all + (size_t)seq * LEN, seq);
    for (uint32_t seq = 0; seq < N;) {
        int rc = uln_nap(ep, peer, all + (size_t)seq * LEN, LEN, seq, 0);
        if (rc == 0)
            seq++;
        else if (rc != -EAGAIN)
            DIE("nap: %s\n", uln_strerror(rc));
        struct uln_cqe e[64];
        int n = uln_cq_poll(cq, e, 64);
        for (int i = 0; i < n; i++)
            if (e[i].status) DIE("nap completion: %d\n", e[i].status);
        done += (uint32_t)(n > 0 ? n : 0);
        if (rc == -EAGAIN) uln_cq_wait(cq, 10);
    }
    while (done < N) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) == 1) {
            if (e.status) DIE("nap completion: %d\n", e.status);
            done++;
        } else
            uln_cq_wait(cq, 10);
    }
    free(all);
}

/* All N from peer, in order, data checked, within bound_s. */
static int recv_all(struct uln_cq *cq, int peer, double bound_s)
{
    uint8_t want[LEN];
    double end = now_s() + bound_s;
    for (uint32_t seq = 0; seq < N;) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) != 1) {
            if (now_s() > end) DIE("%u of %u NAPs within %.0f s\n", seq, N, bound_s);
            uln_cq_wait(cq, 10);
            continue;
        }
        fill(want, seq);
        if (e.op != ULN_OP_NAP_RECV || e.peer != peer || e.len != LEN || memcmp(e.data, want, LEN))
            DIE("NAP %u from %d: wrong (op %u peer %d len %llu)\n", seq, peer, e.op, e.peer,
                (unsigned long long)e.len);
        uln_cqe_release(cq, &e);
        seq++;
    }
    return 0;
}

#define PUTS     200u
#define PUT_LEN  4096u
#define PUT_SLOT 16u

/* Rank 3: PUTS PUTs into rank 0's region, one at a time, within bound_s. */
static void put_all(struct uln_ep *ep, struct uln_cq *cq, uint64_t key, double bound_s)
{
    static uint8_t src[PUT_LEN];
    double end = now_s() + bound_s;
    for (uint32_t i = 0; i < PUTS; i++) {
        memset(src, (int)(i + 1), sizeof src);
        int rc;
        while ((rc = uln_put(ep, 0, src, PUT_LEN, key, (uint64_t)(i % PUT_SLOT) * PUT_LEN, i, 0)) ==
               -EAGAIN)
            uln_cq_wait(cq, 10);
        if (rc) DIE("put %u: %s\n", i, uln_strerror(rc));
        for (;;) {
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) == 1) {
                if (e.op != ULN_OP_PUT || e.status)
                    DIE("put %u: op %u status %d\n", i, e.op, e.status);
                break;
            }
            if (now_s() > end) DIE("%u of %u PUTs within %.0f s\n", i, PUTS, bound_s);
            uln_cq_wait(cq, 10);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    int r = uln_rank(ctx);
    if (uln_size(ctx) != 4) DIE("run with 4 ranks\n");
    bool answers = argc > 2 && !strcmp(argv[2], "answers");
    uint8_t *region = NULL;
    struct uln_mr *mr = NULL;
    uint64_t key = 0;
    if (answers && r == 0) { /* its key to rank 3 */
        region = calloc(PUT_SLOT, PUT_LEN);
        if (!region || uln_mr_reg(ctx, region, PUT_SLOT * PUT_LEN, ULN_ACCESS_REMOTE_WRITE, &mr))
            DIE("region\n");
        key = uln_mr_key(mr);
        if (uln_nap(ep, 3, &key, sizeof key, 0, 0)) DIE("key nap\n");
        struct uln_cqe e;
        while (uln_cq_poll(cq, &e, 1) != 1)
            uln_cq_wait(cq, 10);
        if (e.status) DIE("key nap: %d\n", e.status);
    }
    if (answers && r == 3) {
        struct uln_cqe e;
        while (uln_cq_poll(cq, &e, 1) != 1)
            uln_cq_wait(cq, 10);
        if (e.op != ULN_OP_NAP_RECV || e.peer != 0 || e.len != sizeof key)
            DIE("key: op %u peer %d len %llu status %d\n", e.op, e.peer, (unsigned long long)e.len,
                e.status);
        memcpy(&key, e.data, sizeof key);
        uln_cqe_release(cq, &e);
        /* Rank 2 streams only after the key is here (else its NAPs could
         * come first): a NAP tells it so, and leaves before any of them. */
        uint8_t go = 1;
        if (uln_nap(ep, 2, &go, 1, 0, 0)) DIE("go nap\n");
        while (uln_cq_poll(cq, &e, 1) != 1)
            uln_cq_wait(cq, 10);
        if (e.op != ULN_OP_NAP || e.status) DIE("go nap: %d\n", e.status);
    }
    if (answers && r == 2) { /* rank 3 has rank 0's key */
        struct uln_cqe e;
        while (uln_cq_poll(cq, &e, 1) != 1)
            uln_cq_wait(cq, 10);
        if (e.op != ULN_OP_NAP_RECV || e.peer != 3) DIE("go: op %u peer %d\n", e.op, e.peer);
        uln_cqe_release(cq, &e);
    }
    if (r == 1) {
        const char *run = getenv("ULNTEST_NETNS"); /* the namespace hosts' run, if any */
        printf("stopped: rank 1 pid %d ready (run %s)\n", (int)getpid(), run ? run : "-");
        fflush(stdout);
    }
    while (access(argv[1], F_OK) != 0) /* rank 1 is stopped by now (the script) */
        usleep(10000);
    if (r == 0 || r == 2) send_all(ep, cq, r + 1);
    if (r == 3) {
        recv_all(cq, 2, 60);
        printf("stopped: neighbour done\n");
        fflush(stdout);
        if (answers) {
            put_all(ep, cq, key, 60);
            printf("stopped: answers done\n");
            fflush(stdout);
        }
    }
    if (r == 1) {
        recv_all(cq, 0, 60); /* after SIGCONT */
        printf("stopped: rank 1 got all after SIGCONT\n");
    }
    if (answers && r == 0) { /* the last PUT of each slot is there */
        for (uint32_t s = 0; s < PUT_SLOT; s++) {
            uint32_t last = (PUTS - 1 - s) / PUT_SLOT * PUT_SLOT + s; /* its last PUT */
            for (uint32_t k = 0; k < PUT_LEN; k++)
                if (region[s * PUT_LEN + k] != (uint8_t)(last + 1)) DIE("slot %u byte %u\n", s, k);
        }
    }
    if (mr) uln_mr_dereg(mr);
    free(region);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
