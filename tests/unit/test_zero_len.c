/*
 * test_zero_len.c - zero-length operations in a job of one: NULL buffers are
 * allowed with length 0, the key, bounds (offset == region length is fine)
 * and rights are still checked, and every operation completes once. Under
 * UBSan this also proves no memcpy is handed a NULL pointer.
 */
#include <ulnet.h>

#include <errno.h>

#include "check.h"

static int take(struct uln_cq *cq, struct uln_cqe *e, int want)
{
    int got = 0;
    for (int spins = 0; spins < 1000000 && got < want; spins++) {
        int n = uln_cq_poll(cq, e + got, want - got);
        if (n < 0) return n;
        got += n;
    }
    return got;
}

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr, *ro;
    void *mem;
    CHECK(uln_open(NULL, &ctx) == 0);
    CHECK(uln_cq_open(ctx, 16, &cq) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    CHECK(uln_mem_alloc(ctx, 4096, &mem) == 0);
    CHECK(uln_mr_reg(ctx, mem, 4096, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr) == 0);
    CHECK(uln_mr_reg(ctx, mem, 4096, ULN_ACCESS_REMOTE_READ, &ro) == 0);
    uint64_t k = uln_mr_key(mr);

    for (int round = 0; round < 2; round++) { /* the queued path first, then the fast path */
        struct uln_cqe e[8];
        CHECK(uln_nap(ep, 0, NULL, 0, 1, 0) == 0);
        CHECK(uln_put(ep, 0, NULL, 0, k, 4096, 2, 0) == 0); /* empty, at the end: fine */
        CHECK(uln_get(ep, 0, NULL, 0, k, 0, 3, 0) == 0);
        CHECK(uln_put(ep, 0, NULL, 0, k, 4097, 4, 0) == 0);           /* past the end */
        CHECK(uln_put(ep, 0, NULL, 0, uln_mr_key(ro), 0, 5, 0) == 0); /* no write right */
        CHECK(uln_get(ep, 0, NULL, 0, k ^ 1, 0, 6, 0) == 0);          /* wrong key */
        CHECK(take(cq, e, 7) == 7);
        int seen = 0;
        for (int i = 0; i < 7; i++) {
            int want = 0;
            switch (e[i].user_data) {
            case 4:
                want = -ERANGE;
                break;
            case 5:
                want = -EACCES;
                break;
            case 6:
                want = -ENOKEY;
                break;
            }
            CHECK(e[i].status == want);
            CHECK(e[i].len == 0);
            seen |= 1 << (e[i].op == ULN_OP_NAP_RECV ? 0 : (int)e[i].user_data);
            if (e[i].op == ULN_OP_NAP_RECV) CHECK(uln_cqe_release(cq, &e[i]) == 0);
        }
        CHECK(seen == 0x7f); /* each exactly once (plus the received NAP) */
    }
    CHECK(uln_mr_dereg(ro) == 0);
    CHECK(uln_mr_dereg(mr) == 0);
    CHECK(uln_close(ctx) == 0);
    return summary();
}
