/*
 * restart.c - what we owe a peer's earlier life never goes to its next one
 * (docs/protocol.md, "Connection lives").
 *
 * Two ranks under ulnrun, ULN_TRANSPORT=udp. A restarted process counts its
 * op ids from the start again, so its new operations reuse the ids of its old
 * life's. Rank 1 plays that: the last packets of its life are GET requests
 * for rank 0's "old" bytes, crafted (uln_udp_send_seq) with exactly the op
 * ids its engine hands out next; then it starts a new life
 * (uln_udp_peer_restart) and posts real GETs, which get those ids, of rank
 * 0's "new" bytes. Rank 0 does not poll meanwhile, so it reads the old life's
 * requests and then the new life's hello in one pass. The requests must be
 * dropped with the old life: served, their answers would complete the new
 * GETs with the old bytes.
 */
#include "../integration/common.h"
#include "../fuzz/udp_wire.h"

#include "core/internal.h"
#include "rel/rel.h"

#define N     8 /* GETs of each life */
#define PIECE 8
#define OLD   0xaa
#define NEW   0xbb

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

static uint64_t share_key(void)
{
    uint64_t key = 0;
    if (J.rank == 0) {
        uint8_t *region;
        struct uln_mr *mr;
        CHECK_OK(uln_mem_alloc(J.ctx, 4096, (void **)&region));
        memset(region, OLD, N * PIECE);
        memset(region + N * PIECE, NEW, N * PIECE);
        CHECK_OK(uln_mr_reg(J.ctx, region, 4096, ULN_ACCESS_REMOTE_READ, &mr));
        key = uln_mr_key(mr);
        CHECK_OK(uln_nap(ep, 1, &key, sizeof key, 0, ULN_SILENT | ULN_INLINE));
    } else {
        struct uln_cqe e = t_cq_take1(cq, 10000, "rank 0's key");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == sizeof key);
        memcpy(&key, e.data, sizeof key);
        t_release(cq, &e);
    }
    return key;
}

/* The old life's last packets: GET requests of the old bytes, with the op ids
 * the next N operations will get. */
static void old_requests(uint64_t key, uint64_t first_op)
{
    for (int i = 0; i < N; i++) {
        uint8_t pkt[128];
        struct uw_hdr h = {.vt = uw_vt(UW_GET_REQ), .key = key, .offset = (uint64_t)i * PIECE};
        struct uw_get_req_ext x = {.len = PIECE, .op_id = first_op + (uint64_t)i};
        size_t n = uw_build(pkt, &h, &x, sizeof x, NULL, 0);
        int rc;
        double deadline = t_now() + 20;
        while ((rc = uln_udp_send_seq(ep, 0, pkt, n)) == -EAGAIN && t_now() < deadline)
            uln_cq_poll(cq, NULL, 0);
        CHECK_OK(rc);
    }
}

static void restarting(uint64_t key)
{
    uint64_t first_op = ep->sq_tail; /* the op id the next post gets (ep.c) */
    old_requests(key, first_op);
    CHECK_OK(uln_udp_peer_restart(ep, 0, 0));
    static uint8_t dst[N * PIECE];
    memset(dst, 0, sizeof dst);
    for (int i = 0; i < N; i++)
        CHECK_OK(
            uln_get(ep, 0, dst + i * PIECE, PIECE, key, (uint64_t)(N + i) * PIECE, (uint64_t)i, 0));
    CHECKF(ep->sq_tail == first_op + N,
           "the new GETs took op ids %" PRIu64 "..%" PRIu64 ", the old requests named %" PRIu64
           "..",
           ep->sq_tail - N, ep->sq_tail - 1, first_op);
    for (int k = 0; k < N; k++) {
        struct uln_cqe e = t_cq_take1(cq, 20000, "the new life's GETs");
        CHECK_CQE(&e, e.op == ULN_OP_GET && e.status == 0 && e.user_data < N);
        const uint8_t *got = dst + e.user_data * PIECE;
        for (int b = 0; b < PIECE; b++)
            CHECKF(got[b] == NEW,
                   "GET %" PRIu64 " of the new life got byte %#x, not %#x: an "
                   "answer to the old life's request with its op id",
                   e.user_data, got[b], NEW);
    }
    uint64_t done = 1;
    CHECK_OK(uln_nap(ep, 0, &done, sizeof done, 0, ULN_SILENT | ULN_INLINE));
}

/* Rank 0: asleep while rank 1's old life ends and its new one starts, then
 * serving until rank 1 says it is done. */
static void target(void)
{
    t_sleep_ms(500);
    struct uln_cqe e = t_cq_take1(cq, 30000, "rank 1's done");
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == sizeof(uint64_t));
    t_release(cq, &e);
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    printf("rank0: rank 1 restarted; %" PRIu64 " packets of its earlier life dropped as stale\n",
           c.stale);
}

int main(void)
{
    t_open(&J, 2);
    CHECKF(J.info.udp_peers == 1, "this test needs ULN_TRANSPORT=udp");
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    uint64_t key = share_key();
    t_barrier(&J);
    if (J.rank == 1)
        restarting(key);
    else
        target();
    return t_finish(&J);
}
