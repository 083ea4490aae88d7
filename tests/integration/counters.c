/*
 * counters - every counter of a PUT/GET means the same on every transport
 * (ulnet.h, struct uln_counters).
 *
 * Rank 1 owns regions of both kinds of memory: read-write, read-only and
 * write-only. Rank 0 makes refused accesses of each kind (an unknown key,
 * out of bounds, without the right), PUT and GET alike, then NGOOD good PUTs
 * and GETs of GLEN bytes. Then each rank checks its own counters' growth:
 *   rank 0 (the initiator): puts, gets, bytes_put, bytes_got count exactly
 *     the good ones (a refused PUT is no put), refused_* did not grow;
 *   rank 1 (the owner): refused_key, refused_bounds, refused_access grew by
 *     exactly the refusals of its memory, puts and gets not at all.
 */
#include "common.h"

#define RLEN  65536u
#define GLEN  3000u
#define NGOOD 20

enum { R_RW, R_RO, R_WO, NREG };
static const unsigned racc[NREG] = {ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                                    ULN_ACCESS_REMOTE_READ, ULN_ACCESS_REMOTE_WRITE};

static struct t_job J;
static struct uln_ep *ep;
static struct uln_cq *cq;

/* Post one operation and wait for its completion; its status. */
static int op1(bool put, void *buf, size_t len, uint64_t key, uint64_t off)
{
    CHECK_OK(put ? uln_put(ep, 1, buf, len, key, off, 0x77, 0)
                 : uln_get(ep, 1, buf, len, key, off, 0x77, 0));
    struct uln_cqe e = t_cq_take1(cq, 30000, put ? "a PUT" : "a GET");
    CHECK_CQE(&e, e.user_data == 0x77 && e.op == (put ? ULN_OP_PUT : ULN_OP_GET));
    return e.status;
}

static void initiator(const uint64_t *keys)
{
    uint8_t *buf = t_xmalloc(RLEN + 64);
    pat_fill(buf, RLEN + 64, pat_seed(0, 700, 0), 0);
    struct uln_counters a, b;
    CHECK_OK(uln_counters_get(J.ctx, &a));
    uint64_t refusals[3] = {0};
    for (int kind = 0; kind < T_NKINDS; kind++) {
        const uint64_t *k = keys + kind * NREG;
        uint64_t bogus = k[R_RW] ^ 0x5a5a5a; /* the right index, a wrong magic */
        for (int put = 0; put < 2; put++) {
            CHECK_RC(op1(put, buf, 64, bogus, 0), -ENOKEY);
            CHECK_RC(op1(put, buf, 64, k[R_RW], RLEN - 10), -ERANGE);
            CHECK_RC(op1(put, buf, RLEN + 1, k[R_RW], 0), -ERANGE);
            CHECK_RC(op1(put, buf, 64, k[put ? R_RO : R_WO], 0), -EACCES);
            refusals[0] += 1, refusals[1] += 2, refusals[2] += 1;
        }
        /* A refused PUT of many fragments is one refusal. */
        CHECK_RC(op1(true, buf, RLEN, k[R_RO], 0), -EACCES);
        refusals[2]++;
    }
    uint64_t good = 0;
    for (int i = 0; i < NGOOD; i++) {
        int kind = i % T_NKINDS;
        uint64_t off = (uint64_t)i * 97;
        CHECK_OK(op1(true, buf + i, GLEN, keys[kind * NREG + R_RW], off));
        CHECK_OK(op1(false, buf + RLEN / 2, GLEN, keys[kind * NREG + R_RW], off));
        CHECK(!memcmp(buf + RLEN / 2, buf + i, GLEN));
        good++;
    }
    CHECK_OK(uln_counters_get(J.ctx, &b));
    printf("rank0: puts %" PRIu64 " gets %" PRIu64 " bytes_put %" PRIu64 " bytes_got %" PRIu64
           " refused %" PRIu64 "/%" PRIu64 "/%" PRIu64 "\n",
           b.puts - a.puts, b.gets - a.gets, b.bytes_put - a.bytes_put, b.bytes_got - a.bytes_got,
           b.refused_key - a.refused_key, b.refused_bounds - a.refused_bounds,
           b.refused_access - a.refused_access);
    CHECKF(b.puts - a.puts == good && b.gets - a.gets == good,
           "puts +%" PRIu64 ", gets +%" PRIu64 " for %" PRIu64 " good ones of each",
           b.puts - a.puts, b.gets - a.gets, good);
    CHECK(b.bytes_put - a.bytes_put == good * GLEN && b.bytes_got - a.bytes_got == good * GLEN);
    CHECK(b.refused_key == a.refused_key && b.refused_bounds == a.refused_bounds &&
          b.refused_access == a.refused_access);
    /* Tell the owner what to expect. */
    CHECK_OK(uln_nap(ep, 1, refusals, sizeof refusals, 0x99, 0));
    struct uln_cqe e = t_cq_take1(cq, 30000, "the NAP with the refusal counts");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
    free(buf);
}

static void owner(const struct uln_counters *a)
{
    struct uln_cqe e = t_cq_take1(cq, 60000, "rank 0's refusal counts");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == 24);
    uint64_t want[3];
    memcpy(want, e.data, sizeof want);
    t_release(cq, &e);
    struct uln_counters b;
    CHECK_OK(uln_counters_get(J.ctx, &b));
    uint64_t got[3] = {b.refused_key - a->refused_key, b.refused_bounds - a->refused_bounds,
                       b.refused_access - a->refused_access};
    static const char *cn[] = {"refused_key", "refused_bounds", "refused_access"};
    for (int c = 0; c < 3; c++) {
        printf("rank1: %s +%" PRIu64 " (%" PRIu64 " refusals of this rank's memory)\n", cn[c],
               got[c], want[c]);
        CHECKF(got[c] == want[c], "%s grew by %" PRIu64 " for %" PRIu64 " refusals", cn[c], got[c],
               want[c]);
    }
    CHECK(b.puts == a->puts && b.gets == a->gets && b.bytes_put == a->bytes_put &&
          b.bytes_got == a->bytes_got);
}

int main(void)
{
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS][NREG];
    uint64_t mine[T_NKINDS * NREG], keys[2 * T_NKINDS * NREG];
    for (int kind = 0; kind < T_NKINDS; kind++)
        for (int r = 0; r < NREG; r++) {
            t_region_new(&J, &reg[kind][r], kind, RLEN, racc[r]);
            mine[kind * NREG + r] = reg[kind][r].key;
        }
    t_exchange(&J, ep, cq, mine, T_NKINDS * NREG, keys);
    struct uln_counters a;
    CHECK_OK(uln_counters_get(J.ctx, &a)); /* before rank 0 starts: the exchange ended */
    t_barrier(&J);
    if (J.rank == 0)
        initiator(keys + T_NKINDS * NREG);
    else
        owner(&a);
    t_barrier(&J);
    for (int kind = 0; kind < T_NKINDS; kind++)
        for (int r = 0; r < NREG; r++)
            t_region_free(&J, &reg[kind][r]);
    return t_finish(&J);
}
