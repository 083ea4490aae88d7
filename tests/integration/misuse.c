/*
 * misuse - wrong arguments are refused at post time with the documented
 * status, post nothing, and leave the endpoint working.
 *
 *   peer out of range (-1, size, size + 1, INT_MAX, INT_MIN) on NAP, PUT,
 *   put_imm and GET                                       -> -EINVAL
 *   NULL buffer with a non-zero length                    -> -EINVAL
 *   NAP of nap_max + 1 bytes, and of SIZE_MAX bytes       -> -EMSGSIZE
 *   ULN_INLINE NAP of inline_max + 1 bytes                -> -EMSGSIZE
 * A library that checks these after queueing, or not at all, crashes or
 * corrupts a peer instead. Afterwards no completion may show up on either
 * rank, and NAPs of exactly nap_max bytes and ULN_INLINE NAPs of exactly
 * inline_max bytes (the boundaries) go through intact.
 */
#include "common.h"

#include <limits.h>

static struct t_job J;

int main(void)
{
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    uint64_t mine = 0, all[2];
    if (J.rank == 1)
        t_region_new(&J, &reg, T_KIND_SHM, 65536, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    else
        t_region_new(&J, &reg, T_KIND_MALLOC, 4096, ULN_ACCESS_REMOTE_READ);
    mine = reg.key;
    t_exchange(&J, ep, cq, &mine, 1, all);
    uint64_t key = all[1];
    uint32_t nap_max = J.info.nap_max, inline_max = J.info.inline_max;
    size_t blen = (size_t)nap_max + 64;
    uint8_t *buf = t_xmalloc(blen);
    pat_fill(buf, blen, pat_seed(J.rank, 120, 0), 0);

    /* Error strings: one per status, none NULL or empty. */
    const int codes[] = {-EAGAIN, -EINVAL,     -EMSGSIZE,  -ENOKEY,    -ERANGE, -EACCES,
                         -EPERM,  -ECONNRESET, -ECANCELED, -ETIMEDOUT, -EBADF,  -EBUSY};
    const int ncodes = (int)(sizeof codes / sizeof codes[0]);
    for (int i = 0; i < ncodes; i++) {
        const char *s = uln_strerror(codes[i]);
        CHECKF(s && *s, "uln_strerror(%s)", t_errname(codes[i]));
        for (int k = 0; k < i; k++)
            CHECKF(strcmp(s, uln_strerror(codes[k])) != 0, "uln_strerror(%s) == uln_strerror(%s)",
                   t_errname(codes[i]), t_errname(codes[k]));
    }
    CHECK(uln_strerror(0) != NULL);

    struct uln_counters c0;
    CHECK_OK(uln_counters_get(J.ctx, &c0));
    if (J.rank == 0) {
        const int bad_peers[] = {-1, J.size, J.size + 1, INT_MAX, INT_MIN};
        for (size_t i = 0; i < sizeof bad_peers / sizeof bad_peers[0]; i++) {
            int p = bad_peers[i];
            CHECK_RC(uln_nap(ep, p, buf, 8, 1, 0), -EINVAL);
            CHECK_RC(uln_nap(ep, p, buf, 8, 1, ULN_INLINE), -EINVAL);
            CHECK_RC(uln_put(ep, p, buf, 8, key, 0, 2, 0), -EINVAL);
            CHECK_RC(uln_put_imm(ep, p, buf, 8, key, 0, 9, 3, 0), -EINVAL);
            CHECK_RC(uln_get(ep, p, buf, 8, key, 0, 4, 0), -EINVAL);
        }
        CHECK_RC(uln_nap(ep, 1, NULL, 8, 5, 0), -EINVAL);
        CHECK_RC(uln_put(ep, 1, NULL, 8, key, 0, 6, 0), -EINVAL);
        CHECK_RC(uln_put_imm(ep, 1, NULL, 8, key, 0, 9, 7, 0), -EINVAL);
        CHECK_RC(uln_get(ep, 1, NULL, 8, key, 0, 8, 0), -EINVAL);

        CHECK_RC(uln_nap(ep, 1, buf, (size_t)nap_max + 1, 10, 0), -EMSGSIZE);
        CHECK_RC(uln_nap(ep, 1, buf, (size_t)nap_max + 1, 10, ULN_INLINE), -EMSGSIZE);
        CHECK_RC(uln_nap(ep, 1, buf, SIZE_MAX, 11, 0), -EMSGSIZE);
        CHECK_RC(uln_nap(ep, 1, buf, (size_t)inline_max + 1, 12, ULN_INLINE), -EMSGSIZE);
        CHECK_RC(uln_nap(ep, 1, buf, (size_t)UINT32_MAX + 1, 13, ULN_INLINE), -EMSGSIZE);

        /* Nothing was posted: no completion turns up. */
        t_cq_expect_empty(cq, 200, "after refused posts");
        struct uln_counters c;
        CHECK_OK(uln_counters_get(J.ctx, &c));
        CHECK(c.naps_sent == c0.naps_sent && c.puts == c0.puts && c.gets == c0.gets);

        /* The boundaries themselves are fine. */
        CHECK_OK(uln_nap(ep, 1, buf, nap_max, 20, 0));
        CHECK_OK(uln_nap(ep, 1, buf, inline_max, 21, ULN_INLINE));
        struct uln_cqe e[2];
        t_cq_take(cq, e, 2, 30000, "the boundary NAPs' completions");
        for (int i = 0; i < 2; i++)
            CHECK_CQE(&e[i], e[i].status == 0 && e[i].op == ULN_OP_NAP);
        CHECK(e[0].user_data + e[1].user_data == 41);
        /* ... and PUT/GET still work on this endpoint. */
        CHECK_OK(uln_put(ep, 1, buf, 4096, key, 100, 22, 0));
        struct uln_cqe p = t_cq_take1(cq, 30000, "PUT after misuse");
        CHECK_CQE(&p, p.status == 0 && p.op == ULN_OP_PUT && p.user_data == 22);
        uint8_t back[4096];
        CHECK_OK(uln_get(ep, 1, back, 4096, key, 100, 23, 0));
        p = t_cq_take1(cq, 30000, "GET after misuse");
        CHECK_CQE(&p, p.status == 0 && p.op == ULN_OP_GET && p.user_data == 23);
        CHECK_PAT(back, 4096, pat_seed(0, 120, 0), 0, "PUT/GET round trip after misuse");
        static uint64_t done = 0xd0;
        CHECK_OK(uln_nap(ep, 1, &done, 8, 24, 0));
        p = t_cq_take1(cq, 30000, "done NAP");
        CHECK_CQE(&p, p.status == 0 && p.op == ULN_OP_NAP && p.user_data == 24);
    } else {
        struct uln_cqe e[2];
        t_cq_take(cq, e, 2, 30000, "the two boundary NAPs");
        uint64_t want_len[2] = {nap_max, inline_max};
        for (int i = 0; i < 2; i++) {
            CHECK_CQE(&e[i], e[i].status == 0 && e[i].op == ULN_OP_NAP_RECV && e[i].peer == 0);
            CHECK_CQE(&e[i], e[i].len == want_len[i]);
            CHECK_PAT(e[i].data, e[i].len, pat_seed(0, 120, 0), 0, "boundary NAP %d", i);
        }
        for (int i = 1; i >= 0; i--)
            t_release(cq, &e[i]);
        /* Keep polling (PUT/GET placement with ULN_SHM_DIRECT=0) until rank 0
         * is done; no refused post may ever show up here. */
        struct uln_cqe d = t_cq_take1(cq, 30000, "rank 0's done NAP");
        CHECK_CQE(&d, d.status == 0 && d.op == ULN_OP_NAP_RECV && d.len == 8);
        t_release(cq, &d);
        t_cq_expect_empty(cq, 100, "receiver: only the boundary NAPs arrive");
    }
    t_barrier(&J);
    t_region_free(&J, &reg);
    free(buf);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
