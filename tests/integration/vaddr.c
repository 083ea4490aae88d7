/*
 * vaddr.c - regions addressed by the owner's virtual addresses (ULN_MR_VADDR)
 * between two real ranks, on both kinds of target memory.
 *
 * Rank 0 registers a region with ULN_MR_VADDR (and one without, the same
 * memory) and hands out its key and address. Rank 1 then, by address:
 *   - PUTs and GETs of sizes from 0 to past a chunk, at addresses across the
 *     region, each checked byte for byte (the queued path through the rings
 *     included);
 *   - a PUT with immediate data: the target's completion names the address;
 *   - fetch-adds and a compare-and-swap on words inside it;
 *   - refusals: an offset (small number) is not an address, below the base,
 *     past the end, wrapping, misaligned, each its errno and no byte written;
 *   - the plain region over the same memory still takes offsets.
 */
#include "common.h"

#define LEN (300 * 1024) /* past a chunk: a PUT of it is queued and chunked */

struct vctx {
    struct t_job job;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static int op_sync(struct vctx *c, int op, void *buf, size_t len, uint64_t key, uint64_t at)
{
    int rc = op == ULN_OP_PUT ? uln_put(c->ep, 0, buf, len, key, at, 0x7a, 0)
                              : uln_get(c->ep, 0, buf, len, key, at, 0x7a, 0);
    if (rc) return rc;
    struct uln_cqe e = t_cq_take1(c->cq, 30000, op == ULN_OP_PUT ? "a PUT" : "a GET");
    CHECK_CQE(&e, e.op == op && e.user_data == 0x7a);
    return e.status;
}

static int atomic_sync(struct vctx *c, unsigned op, unsigned width, uint64_t key, uint64_t at,
                       uint64_t v, uint64_t cmp, uint64_t *old)
{
    CHECK_OK(uln_atomic(c->ep, 0, op, width, key, at, v, cmp, old, 0xa7, 0));
    struct uln_cqe e = t_cq_take1(c->cq, 30000, "an atomic");
    CHECK_CQE(&e, e.op == ULN_OP_ATOMIC && e.user_data == 0xa7);
    return e.status;
}

/* Rank 1: PUT then GET back every size at addresses spread over the region. */
static void put_get(struct vctx *c, uint64_t key, uint64_t base)
{
    static const size_t sizes[] = {0, 1, 7, 64, 4093, 65536, LEN / 2, LEN};
    uint8_t *out = t_xmalloc(LEN), *in = t_xmalloc(LEN);
    uint64_t seed = 0x7addull;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i], at = n == LEN ? 0 : t_rand(&seed) % (LEN - n);
        for (size_t k = 0; k < n; k++)
            out[k] = (uint8_t)(i * 31 + k);
        CHECK_OK(op_sync(c, ULN_OP_PUT, out, n, key, base + at));
        memset(in, 0xee, LEN);
        CHECK_OK(op_sync(c, ULN_OP_GET, in, n, key, base + at));
        CHECKF(!memcmp(in, out, n), "%zu bytes at address base+%zu came back changed", n, at);
    }
    free(out);
    free(in);
}

/* Rank 1: atomics by address, and the refusals. */
static void atomics(struct vctx *c, uint64_t key, uint64_t base)
{
    uint64_t old = 0;
    CHECK_OK(op_sync(c, ULN_OP_PUT, &old, 8, key, base + 64)); /* the word starts at 0 */
    for (uint64_t i = 0; i < 100; i++) {
        CHECK_OK(atomic_sync(c, ULN_ATOMIC_ADD, 8, key, base + 64, 3, 0, &old));
        CHECKF(old == 3 * i, "fetch-add %llu fetched %llu", (unsigned long long)i,
               (unsigned long long)old);
    }
    uint32_t w = 0;
    CHECK_OK(op_sync(c, ULN_OP_PUT, &w, 4, key, base + 72));
    CHECK_OK(atomic_sync(c, ULN_ATOMIC_CSWAP, 4, key, base + 72, 9, 0, &old));
    CHECK_OK(op_sync(c, ULN_OP_GET, &w, 4, key, base + 72));
    CHECK(w == 9 && (uint32_t)old == 0);
    CHECK_RC(atomic_sync(c, ULN_ATOMIC_ADD, 8, key, base + 4, 1, 0, &old), -EDOM);
    CHECK_RC(atomic_sync(c, ULN_ATOMIC_ADD, 8, key, 64, 1, 0, &old), -ERANGE); /* an offset */
    CHECK_RC(atomic_sync(c, ULN_ATOMIC_ADD, 8, key, base - 8, 1, 0, &old), -ERANGE);
    CHECK_RC(atomic_sync(c, ULN_ATOMIC_ADD, 8, key, base + LEN, 1, 0, &old), -ERANGE);
    CHECK_RC(atomic_sync(c, ULN_ATOMIC_ADD, 4, key, base + LEN - 2, 1, 0, &old), -ERANGE);
}

static void refused(struct vctx *c, uint64_t key, uint64_t base)
{
    uint8_t b[16] = {0x5a};
    CHECK_RC(op_sync(c, ULN_OP_PUT, b, 16, key, 0), -ERANGE); /* an offset, not an address */
    CHECK_RC(op_sync(c, ULN_OP_PUT, b, 16, key, base - 1), -ERANGE);
    CHECK_RC(op_sync(c, ULN_OP_PUT, b, 16, key, base + LEN - 8), -ERANGE);
    CHECK_RC(op_sync(c, ULN_OP_GET, b, 16, key, base + LEN + 1), -ERANGE);
    CHECK_RC(op_sync(c, ULN_OP_GET, b, 16, key, ~0ull - 4), -ERANGE);
    CHECK_RC(op_sync(c, ULN_OP_GET, b, 0, key, base + LEN), 0); /* empty, at the end */
}

/* Rank 1: a PUT with immediate data; rank 0's completion carries the address. */
static void imm(struct vctx *c, uint64_t key, uint64_t base)
{
    uint8_t b[32];
    memset(b, 0x3c, sizeof b);
    CHECK_OK(uln_put_imm(c->ep, 0, b, sizeof b, key, base + 128, 0x1, 0x1d, 0));
    struct uln_cqe e = t_cq_take1(c->cq, 30000, "a PUT with immediate data");
    CHECK_CQE(&e, e.op == ULN_OP_PUT && e.status == 0);
}

static void run_kind(struct vctx *c, int kind)
{
    int rank = c->job.rank;
    struct t_region r, plain;
    uint64_t mine[3] = {0}, all[6];
    if (rank == 0) {
        unsigned acc = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC;
        t_region_new(&c->job, &r, kind, LEN, acc | ULN_MR_VADDR);
        memset(r.buf, 0, LEN);
        CHECK_OK(uln_mr_reg(c->job.ctx, r.buf, LEN, acc, &plain.mr));
        mine[0] = r.key;
        mine[1] = (uint64_t)(uintptr_t)r.buf;
        mine[2] = uln_mr_key(plain.mr);
    }
    t_exchange(&c->job, c->ep, c->cq, mine, 3, all);
    if (rank == 1) {
        uint64_t key = all[0], base = all[1];
        put_get(c, key, base);
        atomics(c, key, base);
        refused(c, key, base);
        imm(c, key, base);
        uint64_t v = 0; /* the plain key, same memory: offsets */
        CHECK_OK(op_sync(c, ULN_OP_GET, &v, 8, all[2], 64));
        CHECKF(v == 300, "the word by offset is %llu, expected 300", (unsigned long long)v);
        CHECK_RC(op_sync(c, ULN_OP_GET, &v, 8, all[2], base + 64), -ERANGE);
    } else {
        struct uln_cqe e = t_cq_take1(c->cq, 30000, "the remote completion");
        CHECK_CQE(&e, e.op == ULN_OP_PUT_REMOTE && e.imm == 0x1 && e.len == 32);
        CHECKF(e.offset == mine[1] + 128, "the remote completion names %#llx, not the address",
               (unsigned long long)e.offset);
    }
    t_barrier(&c->job);
    if (rank == 0) {
        uint8_t *p = r.buf;
        CHECK_BYTES(p + 128, 32, 0x3c, "%s: the PUT with immediate data", t_kind_name(kind));
        CHECK_OK(uln_mr_dereg(plain.mr));
        t_region_free(&c->job, &r);
    }
    t_barrier(&c->job);
}

int main(void)
{
    struct vctx c;
    t_open(&c.job, 2);
    CHECK_OK(uln_cq_open(c.job.ctx, 4096, &c.cq));
    CHECK_OK(uln_ep_open(c.job.ctx, c.cq, c.cq, &c.ep));
    t_barrier(&c.job);
    for (int k = 0; k < T_NKINDS; k++)
        run_kind(&c, k);
    return t_finish(&c.job);
}
