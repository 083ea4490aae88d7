/*
 * contract - the posting contract is the same on every transport (ulnet.h,
 * "Posting contract"; docs/limits.md).
 *
 * Part "flush": -EAGAIN means exactly that the send queue holds sq_depth
 * operations not yet retired, and a flush is still accepted then. Rank 0
 * opens a send CQ of CQ_SMALL entries and posts PUTs without polling: the
 * first ones may complete into the CQ (inside the post call, on shm), then
 * the CQ is full, nothing more can retire, and the queue fills. The post
 * that finds it full gets -EAGAIN: by then between sq_depth and
 * sq_depth + CQ_SMALL PUTs were accepted. Then NFLUSH flushes are posted (no
 * -EAGAIN), the CQ is drained: every PUT completes, then the flushes, in
 * posting order, after all of them; a GET reads every PUT's bytes.
 *
 * Part "fence": PUTs of several sizes (one of several chunks) to a region,
 * then a ULN_FENCE GET of the same bytes, without waiting for the PUTs:
 * the GET reads what they wrote, ITERS times. And a fenced PUT on an idle
 * endpoint takes the same path as any other: on shm with direct access, a
 * fenced PUT to this rank's own region is done when uln_put returns.
 */
#include "common.h"

#define CQ_SMALL 4
#define PLEN     4096u
#define NFLUSH   3
#define ITERS    300
#define FLEN     (3u << 20) /* several chunks at the default chunk_bytes */

static struct t_job J;

/* Serve the peer (ring path, udp) until it says it is done. */
static void serve(struct uln_ep *ep, struct uln_cq *cq)
{
    for (;;) {
        struct uln_cqe e = t_cq_take1(cq, 120000, "rank 0's done NAP");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.peer == 0);
        t_release(cq, &e);
        break;
    }
    (void)ep;
}

static void say_done(struct uln_ep *ep, struct uln_cq *cq)
{
    static const uint8_t done = 1;
    CHECK_OK(uln_nap(ep, 1, &done, 1, 0xd0e, 0));
    struct uln_cqe e = t_cq_take1(cq, 30000, "the done NAP");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP && e.user_data == 0xd0e);
}

static void part_flush(uint64_t key, struct uln_ep *ep, struct uln_cq *scq)
{
    uint32_t depth = J.info.sq_depth, max = depth + CQ_SMALL + 1;
    uint8_t *src = t_xmalloc((size_t)max * PLEN);
    pat_fill(src, (size_t)max * PLEN, pat_seed(0, 600, 0), 0);
    uint32_t accepted = 0;
    int rc;
    while ((rc = uln_put(ep, 1, src + (size_t)accepted * PLEN, PLEN, key, (uint64_t)accepted * PLEN,
                         accepted, 0)) == 0) {
        accepted++;
        CHECKF(accepted < max, "%u PUTs accepted without polling (sq_depth %u, CQ %u)", accepted,
               depth, CQ_SMALL);
    }
    CHECKF(rc == -EAGAIN, "post on a full queue: %d (%s)", rc, t_errname(rc));
    CHECKF(accepted >= depth && accepted <= depth + CQ_SMALL,
           "-EAGAIN after %u PUTs (sq_depth %u, CQ %u)", accepted, depth, CQ_SMALL);
    printf("rank0: -EAGAIN after %u PUTs (sq_depth %u, send CQ %u)\n", accepted, depth, CQ_SMALL);
    /* The queue is full: flushes are accepted all the same. */
    for (int f = 0; f < NFLUSH; f++)
        CHECK_OK(uln_ep_flush(ep, 0xf100 + (uint64_t)f));
    uint32_t puts = 0;
    int flushes = 0;
    while (flushes < NFLUSH) {
        struct uln_cqe e = t_cq_take1(scq, 60000, "the PUTs and flushes");
        CHECK_CQE(&e, e.status == 0);
        if (e.op == ULN_OP_FLUSH) {
            CHECK_CQE(&e, e.user_data == 0xf100 + (uint64_t)flushes);
            CHECKF(puts == accepted, "flush %d completed after %u of %u PUTs", flushes, puts,
                   accepted);
            flushes++;
        } else {
            CHECK_CQE(&e, e.op == ULN_OP_PUT && e.user_data == puts && flushes == 0);
            puts++;
        }
    }
    t_cq_expect_empty(scq, 50, "after the flushes");
    /* What the PUTs wrote is there. */
    uint8_t *back = t_xmalloc((size_t)accepted * PLEN);
    CHECK_OK(uln_get(ep, 1, back, (size_t)accepted * PLEN, key, 0, 0x6e7, ULN_FENCE));
    struct uln_cqe e = t_cq_take1(scq, 60000, "the GET after the flushes");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET);
    CHECK_PAT(back, (size_t)accepted * PLEN, pat_seed(0, 600, 0), 0, "the PUTs before the flush");
    free(back);
    free(src);
}

static void part_fence(uint64_t key, struct uln_ep *ep, struct uln_cq *cq)
{
    static const uint32_t sizes[] = {8, 200, 4096, 65536, FLEN};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint8_t *src = t_xmalloc((size_t)NS * FLEN), *dst = t_xmalloc(FLEN);
    for (int it = 0; it < ITERS; it++) {
        /* Each iteration rewrites the first bytes of the region with sizes
         * that vary, so the GET would read an earlier iteration's bytes (or
         * a mix) if it ran ahead of the PUTs. */
        uint32_t last = (uint32_t)it % NS, len = sizes[last];
        if (it % 10 != 9 && len == FLEN) last = 2, len = sizes[2]; /* the big one now and then */
        for (uint32_t k = 0; k <= last; k++) {
            uint8_t *s = src + (size_t)k * FLEN;
            pat_fill(s, sizes[k], pat_seed(0, 610 + (int)k, (uint64_t)it), 0);
            CHECK_OK(uln_put(ep, 1, s, sizes[k], key, 0, 0x100 + k, ULN_SILENT));
        }
        memset(dst, 0, len);
        CHECK_OK(uln_get(ep, 1, dst, len, key, 0, 0x6e7, ULN_FENCE));
        struct uln_cqe e = t_cq_take1(cq, 60000, "the fenced GET");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET && e.user_data == 0x6e7);
        CHECK_PAT(dst, len, pat_seed(0, 610 + (int)last, (uint64_t)it), 0,
                  "iteration %d: fenced GET of %u bytes after %u PUTs", it, len, last + 1);
    }
    printf("rank0: %d fenced GETs read what the PUTs before them wrote\n", ITERS);
    free(src);
    free(dst);
}

/* On an idle endpoint a fenced PUT is the doorbell fast path like any other:
 * to this rank's own shared memory, done before uln_put returns. */
static void part_fence_idle(struct uln_ep *ep, struct uln_cq *cq)
{
    struct t_region own;
    t_region_new(&J, &own, T_KIND_SHM, 4096, ULN_ACCESS_REMOTE_WRITE);
    memset(own.buf, 0, 4096);
    uint64_t v = 0x0123456789abcdefull;
    CHECK_OK(uln_put(ep, J.rank, &v, 8, own.key, 64, 0xfe, ULN_FENCE));
    bool direct = J.info.caps_all & ULN_CAP_DIRECT_RMA;
    if (direct) CHECKF(!memcmp((uint8_t *)own.buf + 64, &v, 8), "fenced PUT not done in the call");
    struct uln_cqe e = t_cq_take1(cq, 30000, "the fenced PUT on an idle endpoint");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT && e.user_data == 0xfe);
    CHECK(!memcmp((uint8_t *)own.buf + 64, &v, 8));
    t_region_free(&J, &own);
}

int main(int argc, char **argv)
{
    t_open(&J, 2);
    CHECKF(argc == 2 && (!strcmp(argv[1], "flush") || !strcmp(argv[1], "fence")),
           "usage: contract flush|fence");
    bool flush = !strcmp(argv[1], "flush");
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[2];
    size_t rlen = flush ? (size_t)(J.info.sq_depth + CQ_SMALL + 1) * PLEN : FLEN;
    for (int k = 0; k < 2; k++)
        t_region_new(&J, &reg[k], k, rlen, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    uint64_t mine[2] = {reg[0].key, reg[1].key}, keys[4];
    t_exchange(&J, ep, cq, mine, 2, keys);
    /* The flush part's endpoints, one per kind of memory: rank 0's with a
     * send CQ of CQ_SMALL; rank 1's (the same index: the ring path serves a
     * peer's endpoint from ours) driven by its one CQ. */
    struct uln_cq *scq = NULL, *rcq = NULL;
    struct uln_ep *fep[2] = {NULL, NULL};
    if (flush) {
        if (J.rank == 0) {
            CHECK_OK(uln_cq_open(J.ctx, CQ_SMALL, &scq));
            CHECK_OK(uln_cq_open(J.ctx, 64, &rcq));
        }
        for (int k = 0; k < 2; k++)
            CHECK_OK(J.rank == 0 ? uln_ep_open(J.ctx, scq, rcq, &fep[k])
                                 : uln_ep_open(J.ctx, cq, cq, &fep[k]));
        t_barrier(&J);
    }
    if (J.rank == 1) {
        serve(ep, cq);
    } else {
        for (int k = 0; k < 2; k++) {
            if (flush)
                part_flush(keys[2 + k], fep[k], scq);
            else
                part_fence(keys[2 + k], ep, cq);
        }
        if (!flush) part_fence_idle(ep, cq);
        say_done(ep, cq);
    }
    t_barrier(&J);
    for (int k = 0; k < 2; k++) {
        if (fep[k]) CHECK_OK(uln_ep_close(fep[k]));
        t_region_free(&J, &reg[k]);
    }
    return t_finish(&J);
}
