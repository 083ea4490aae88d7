/*
 * test_progress.c - polling drives progress even when the CQ already holds
 * more entries than one poll takes. A rank that keeps posting (its fast-path
 * completions land straight in the CQ) must still take its peers' messages;
 * here the peer is the process itself, so nothing depends on timing. A poll
 * that takes every entry waiting may skip progress (cq.c), a few times in a
 * row only.
 */
#include <ulnet.h>

#include "check.h"

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK(uln_open(NULL, &ctx) == 0);
    CHECK(uln_cq_open(ctx, 1024, &cq) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    char msg[8] = "progress";
    int received = 0, sent = 0;
    struct uln_cqe e[16];
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 32; i++)
            if (uln_nap(ep, 0, msg, sizeof msg, 0, 0) == 0) sent++;
        int n = uln_cq_poll(cq, e, 16); /* one poll per 32 posts: entries pile up */
        CHECK(n >= 0);
        for (int j = 0; j < n; j++)
            if (e[j].op == ULN_OP_NAP_RECV) {
                received++;
                CHECK(uln_cqe_release(cq, &e[j]) == 0);
            }
    }
    CHECK(sent == 320);
    CHECK(received > 0); /* 0 if a poll with >= max entries waiting skips progress */
    /* A poll that takes every entry waiting may skip the progress pass, but
     * not for ever: one post and one poll at a time still takes messages. */
    int before = received;
    for (int round = 0; round < 64; round++) {
        if (uln_nap(ep, 0, msg, sizeof msg, 0, 0) == 0) sent++;
        int n = uln_cq_poll(cq, e, 1);
        CHECK(n >= 0);
        if (n == 1 && e[0].op == ULN_OP_NAP_RECV) {
            received++;
            CHECK(uln_cqe_release(cq, &e[0]) == 0);
        }
    }
    CHECK(received > before);
    CHECK(uln_close(ctx) == 0);
    return summary();
}
