/*
 * quota.c - the service's quota on a process's queue memory (ulnetd
 * --queue-mem; docs/service.md, "Quotas"). quota.sh starts the service
 * with room for one endpoint's queue per process.
 *
 * Two ranks, ULN_TRANSPORT=svc. Each opens an endpoint (its queue fits),
 * then a second one: refused with -EDQUOT, a clear error at uln_ep_open,
 * and nothing else of the process or its neighbour harmed. Each then closes
 * and reopens its endpoint CHURN times (each new life's queue replaces the
 * last at the service: the quota is not eaten, nor the service's memory
 * and descriptors); rank 0 prints "churned" and waits for the file argv[1]
 * (the script counts the service's descriptors meanwhile). Then rank 0
 * sends N NAPs to rank 1, which gets each once, in order, data intact.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ulnet.h"

#define N        2000u
#define LEN      200u
#define CHURN    24
#define DIE(...) (fprintf(stderr, "quota: " __VA_ARGS__), exit(1))

static void fill(uint8_t *b, uint32_t seq)
{
    for (uint32_t i = 0; i < LEN; i++)
        b[i] = (uint8_t)(seq * 13 + i * 7);
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep, *more;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq)) DIE("open\n");
    int r = uln_rank(ctx), rc;
    if (uln_size(ctx) != 2) DIE("run with 2 ranks\n");
    if ((rc = uln_ep_open(ctx, cq, cq, &ep)))
        DIE("rank %d: first endpoint: %s\n", r, uln_strerror(rc));
    rc = uln_ep_open(ctx, cq, cq, &more);
    if (rc != -EDQUOT)
        DIE("rank %d: a second endpoint past the quota: %s, not -EDQUOT\n", r, uln_strerror(rc));
    printf("quota: rank %d: second endpoint refused: %s\n", r, uln_strerror(rc));
    for (int i = 0; i < CHURN; i++) {
        uln_ep_close(ep);
        if ((rc = uln_ep_open(ctx, cq, cq, &ep)))
            DIE("rank %d: reopen %d: %s\n", r, i, uln_strerror(rc));
    }
    if (r == 0) {
        printf("quota: churned\n");
        fflush(stdout);
        while (access(argv[1], F_OK) != 0)
            usleep(10000);
    }
    if (uln_barrier(ctx, 60000)) DIE("barrier\n");
    uint8_t want[LEN];
    if (r == 0) {
        /* Each NAP's buffer stays untouched until its completion (ulnet.h). */
        uint8_t *all = malloc((size_t)N * LEN);
        if (!all) DIE("malloc\n");
        for (uint32_t seq = 0; seq < N; seq++)
            fill(all + (size_t)seq * LEN, seq);
        for (uint32_t seq = 0, done = 0; done < N;) {
            if (seq < N) {
                rc = uln_nap(ep, 1, all + (size_t)seq * LEN, LEN, seq, 0);
                if (rc == 0)
                    seq++;
                else if (rc != -EAGAIN)
                    DIE("nap: %s\n", uln_strerror(rc));
            }
            struct uln_cqe e;
            while (uln_cq_poll(cq, &e, 1) == 1) {
                if (e.status) DIE("nap completion: %s\n", uln_strerror(e.status));
                done++;
            }
        }
        free(all);
    } else {
        for (uint32_t seq = 0; seq < N;) {
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) != 1) {
                uln_cq_wait(cq, 100);
                continue;
            }
            fill(want, seq);
            if (e.op != ULN_OP_NAP_RECV || e.peer != 0 || e.len != LEN || memcmp(e.data, want, LEN))
                DIE("NAP %u: wrong\n", seq);
            uln_cqe_release(cq, &e);
            seq++;
        }
        printf("quota: rank 1 got all %u NAPs\n", N);
    }
    if (uln_barrier(ctx, 60000)) DIE("barrier\n");
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
