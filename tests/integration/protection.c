/*
 * protection - remote accesses that must be refused are refused, with the
 * documented status, without writing a byte, and counted.
 *
 * A region key is the only protection a process has against its peers, so each
 * way of getting it wrong is tried against both kinds of memory (mapped
 * uln_mem_alloc memory, where the initiator itself would do the copy, and
 * malloc'd memory reached by process_vm_writev or through the rings):
 *   -ENOKEY: a random key, key 0, the initiator's own key, a deregistered
 *            (stale) key, also after the same memory was registered again;
 *   -ERANGE: offset at/after the end, a range that straddles the end, a
 *            length one past the region, roff = UINT64_MAX - 3 (offset + len
 *            wraps), roff = 2^63, a 1 MiB PUT whose first 64 KiB would fit;
 *   -EACCES: GET from a write-only region, PUT/put_imm to a read-only one.
 * Some are posted ULN_SILENT: errors still complete. After every refusal a good
 * PUT + GET must work. Rank 1 checks at the end that every region still holds
 * its original bytes and that no refused put_imm raised PUT_REMOTE; the
 * refused_* counters of rank 1 (the owner) must have grown by exactly the
 * number of refusals of each kind, and rank 0's not at all.
 */
#include "common.h"

#define RLEN   65536u
#define BIG    (1u << 20)
#define CANARY 0xc3

enum { R_RW, R_WO, R_RO, R_STALE, R_GOOD, NREG };
static const char *rname[] = {"read-write", "write-only", "read-only", "stale", "good"};
static const unsigned racc[] = {ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                                ULN_ACCESS_REMOTE_WRITE, ULN_ACCESS_REMOTE_READ,
                                ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                                ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE};

/* key selectors beyond the region indexes */
enum { K_RANDOM = 100, K_ZERO, K_OWN, K_REREG };
enum { O_PUT, O_PUT_IMM, O_GET };
enum { C_KEY, C_BOUNDS, C_ACCESS };

struct bad {
    int op, key;
    uint64_t roff, len;
    unsigned flags;
    int want, cls;
};

static const struct bad bads[] = {
    {O_PUT, K_RANDOM, 0, 64, 0, -ENOKEY, C_KEY},
    {O_GET, K_RANDOM, 0, 64, 0, -ENOKEY, C_KEY},
    {O_PUT_IMM, K_RANDOM, 0, 64, 0, -ENOKEY, C_KEY},
    {O_PUT, K_RANDOM, 0, BIG, 0, -ENOKEY, C_KEY},
    {O_PUT, K_ZERO, 0, 64, 0, -ENOKEY, C_KEY},
    {O_GET, K_OWN, 0, 64, 0, -ENOKEY, C_KEY},
    {O_PUT, R_STALE, 0, 64, 0, -ENOKEY, C_KEY},
    {O_GET, R_STALE, 0, 64, 0, -ENOKEY, C_KEY},
    {O_PUT_IMM, R_STALE, 0, 64, 0, -ENOKEY, C_KEY},
    {O_PUT, R_STALE, 0, RLEN, 0, -ENOKEY, C_KEY},
    {O_PUT, K_RANDOM, 0, 64, ULN_SILENT, -ENOKEY, C_KEY},
    {O_PUT, R_RW, RLEN, 1, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, RLEN - 10, 11, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, RLEN + 4096, 1, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, UINT64_MAX - 3, 8, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, 1ull << 63, 64, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, 0, RLEN + 1, 0, -ERANGE, C_BOUNDS},
    {O_PUT, R_RW, 0, BIG, 0, -ERANGE, C_BOUNDS},
    {O_PUT_IMM, R_RW, UINT64_MAX - 3, 8, 0, -ERANGE, C_BOUNDS},
    {O_GET, R_RW, RLEN, 1, 0, -ERANGE, C_BOUNDS},
    {O_GET, R_RW, RLEN - 1, 2, 0, -ERANGE, C_BOUNDS},
    {O_GET, R_RW, UINT64_MAX - 3, 8, 0, -ERANGE, C_BOUNDS},
    {O_GET, R_RW, 0, RLEN + 1, 0, -ERANGE, C_BOUNDS},
    {O_GET, R_RW, 0, BIG, ULN_SILENT, -ERANGE, C_BOUNDS},
    {O_GET, R_WO, 0, 64, 0, -EACCES, C_ACCESS},
    {O_GET, R_WO, 0, RLEN, 0, -EACCES, C_ACCESS},
    {O_PUT, R_RO, 0, 64, 0, -EACCES, C_ACCESS},
    {O_PUT, R_RO, 0, RLEN, 0, -EACCES, C_ACCESS},
    {O_PUT_IMM, R_RO, 8, 8, 0, -EACCES, C_ACCESS},
    {O_GET, R_WO, 0, 64, ULN_SILENT, -EACCES, C_ACCESS},
};
#define NBAD ((int)(sizeof bads / sizeof bads[0]))

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
/* keys[kind * NREG + r] of rank 1's regions; own/rereg keys */
static uint64_t keys[T_NKINDS * NREG], own_key, rereg_key[T_NKINDS];

static uint64_t region_seed(int kind, int r)
{
    return pat_seed(1, 40 + r, (uint64_t)kind);
}
static uint64_t good_seed(int i)
{
    return pat_seed(0, 50, (uint64_t)i);
}

static const char *ename(int e)
{
    return t_errname(e);
}

static void check_counters(const struct uln_counters *a, const struct uln_counters *b,
                           const struct uln_counters *ra, const struct uln_counters *rb,
                           const uint64_t want[3])
{
    uint64_t ini[3] = {b->refused_key - a->refused_key, b->refused_bounds - a->refused_bounds,
                       b->refused_access - a->refused_access};
    uint64_t tgt[3] = {rb->refused_key - ra->refused_key, rb->refused_bounds - ra->refused_bounds,
                       rb->refused_access - ra->refused_access};
    static const char *cn[] = {"refused_key", "refused_bounds", "refused_access"};
    for (int c = 0; c < 3; c++) {
        uint64_t got = ini[c] + tgt[c];
        printf("rank0: %s: %" PRIu64 " refusals, counted %" PRIu64 " at the initiator + %" PRIu64
               " at the target\n",
               cn[c], want[c], ini[c], tgt[c]);
        /* refused_* count accesses to this process's memory, at the owner,
         * once per operation, on every transport (ulnet.h: uln_counters). */
        CHECKF(ini[c] == 0 && tgt[c] == want[c] && got == want[c],
               "%s grew by %" PRIu64 " at the initiator + %" PRIu64 " at the target for %" PRIu64
               " refusals",
               cn[c], ini[c], tgt[c], want[c]);
    }
}

/* A good PUT then GET of 64 bytes in the "good" region: refusals must not
 * leave the endpoint (or the path to that peer) broken. */
static void good_roundtrip(int i, int kind, uint8_t *buf)
{
    uint64_t off = (uint64_t)(i * 67) % (RLEN - 64);
    pat_fill(buf, 64, good_seed(i), 0);
    CHECK_OK(uln_put(ep, 1, buf, 64, keys[kind * NREG + R_GOOD], off, 0x600d, 0));
    struct uln_cqe c = t_cq_take1(cq, 30000, "good PUT after a refusal");
    CHECK_CQE(&c, c.status == 0 && c.op == ULN_OP_PUT && c.user_data == 0x600d);
    memset(buf, 0, 64);
    CHECK_OK(uln_get(ep, 1, buf, 64, keys[kind * NREG + R_GOOD], off, 0x600e, 0));
    c = t_cq_take1(cq, 30000, "good GET after a refusal");
    CHECK_CQE(&c, c.status == 0 && c.op == ULN_OP_GET && c.user_data == 0x600e);
    CHECK_PAT(buf, 64, good_seed(i), 0, "good PUT/GET round trip %d after a refusal", i);
}

static void initiator(void)
{
    uint8_t *src = t_xmalloc(BIG + 64);
    uint8_t *dst = t_xmalloc(BIG + 64);
    uint8_t small[64];
    pat_fill(src, BIG + 64, pat_seed(0, 60, 0), 0);
    memset(dst, CANARY, BIG + 64);
    uint64_t rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20) ^ 0x1234567;
    uint64_t want[3] = {0, 0, 0};
    struct uln_counters c0, c1, r0, r1;
    CHECK_OK(uln_counters_get(J.ctx, &c0));
    int n = 0;
    for (int kind = 0; kind < T_NKINDS; kind++) {
        for (int b = 0; b < NBAD; b++, n++) {
            const struct bad *x = &bads[b];
            uint64_t key;
            switch (x->key) {
            case K_RANDOM:
                do
                    key = t_rand(&rng);
                while (key == 0 || key == own_key || key == rereg_key[0] ||
                       key == rereg_key[1]); /* regions' keys are checked below */
                for (int i = 0; i < T_NKINDS * NREG; i++)
                    CHECK(key != keys[i]);
                break;
            case K_ZERO:
                key = 0;
                break;
            case K_OWN:
                key = own_key;
                break;
            default:
                key = keys[kind * NREG + x->key];
            }
            int rc;
            uint64_t ud = 0xbad0000u + (uint64_t)n;
            if (x->op == O_PUT)
                rc = uln_put(ep, 1, src, x->len, key, x->roff, ud, x->flags);
            else if (x->op == O_PUT_IMM)
                rc = uln_put_imm(ep, 1, src, x->len, key, x->roff, 0xbadbad, ud, x->flags);
            else
                rc = uln_get(ep, 1, dst, x->len, key, x->roff, ud, x->flags);
            CHECKF(rc == 0,
                   "posting bad op %d (%s kind): %d (%s); the error belongs in the "
                   "completion",
                   b, t_kind_name(kind), rc, ename(rc));
            struct uln_cqe e = t_cq_take1(cq, 30000, "error completion of a refused op");
            CHECKF(e.status == x->want && e.user_data == ud && e.peer == 1,
                   "bad op %d (%s, %s region %s, roff %#" PRIx64 ", len %" PRIu64
                   "%s): status %d (%s), expected %d (%s); user_data %#" PRIx64 " peer %d",
                   b,
                   x->op == O_PUT   ? "PUT"
                   : x->op == O_GET ? "GET"
                                    : "PUT_IMM",
                   t_kind_name(kind), x->key < NREG ? rname[x->key] : "-", x->roff, x->len,
                   x->flags & ULN_SILENT ? ", silent" : "", e.status, ename(e.status), x->want,
                   ename(x->want), e.user_data, e.peer);
            CHECK_CQE(&e, e.op == (x->op == O_GET ? ULN_OP_GET : ULN_OP_PUT));
            want[x->cls]++;
            if (x->op == O_GET)
                CHECK_BYTES(dst, BIG + 64, CANARY, "GET destination after refused bad op %d", b);
            good_roundtrip(n, kind, small);
        }
    }
    /* Same memory, registered again: the new key works, the old one does not. */
    for (int kind = 0; kind < T_NKINDS; kind++) {
        CHECK(rereg_key[kind] != keys[kind * NREG + R_STALE]);
        pat_fill(small, 64, pat_seed(0, 61, (uint64_t)kind), 0);
        CHECK_OK(uln_put(ep, 1, small, 64, rereg_key[kind], 100, 0x4e3, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "PUT with the re-registered key");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT);
        CHECK_OK(uln_put(ep, 1, small, 64, keys[kind * NREG + R_STALE], 100, 0x4e4, 0));
        e = t_cq_take1(cq, 30000, "PUT with the stale key after re-registration");
        CHECK_CQE(&e, e.status == -ENOKEY && e.op == ULN_OP_PUT);
        want[C_KEY]++;
    }
    /* One good put_imm: the only PUT_REMOTE rank 1 may ever see. */
    CHECK_OK(uln_put_imm(ep, 1, small, 8, keys[R_GOOD], 0, 0x900d, 0x900d, 0));
    struct uln_cqe e = t_cq_take1(cq, 30000, "good put_imm");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT);
    CHECK_OK(uln_counters_get(J.ctx, &c1));

    static uint64_t done = 0xd0d0;
    CHECK_OK(uln_nap(ep, 1, &done, sizeof done, 0xd0d0, 0));
    bool sent = false, got = false;
    while (!sent || !got) {
        e = t_cq_take1(cq, 30000, "done NAP completion and rank 1's counters");
        CHECK_CQE(&e, e.status == 0);
        if (e.op == ULN_OP_NAP) {
            sent = true;
        } else {
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 2 * sizeof(struct uln_counters));
            memcpy(&r0, e.data, sizeof r0);
            memcpy(&r1, (const uint8_t *)e.data + sizeof r0, sizeof r1);
            t_release(cq, &e);
            got = true;
        }
    }
    check_counters(&c0, &c1, &r0, &r1, want);
    free(src);
    free(dst);
}

/* cnt[0]: the counters before rank 0 could start (see main). */
static void target(struct t_region (*reg)[NREG], struct t_region *rereg, struct uln_counters cnt[2])
{
    int remote = 0;
    for (;;) {
        struct uln_cqe e = t_cq_take1(cq, 120000, "rank 0's done NAP");
        CHECK_CQE(&e, e.status == 0 && e.peer == 0);
        if (e.op == ULN_OP_PUT_REMOTE) {
            /* Only the good one; a refused put_imm must raise nothing. */
            CHECK_CQE(&e, e.imm == 0x900d && e.len == 8 && e.offset == 0 && remote == 0);
            remote++;
            continue;
        }
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
        t_release(cq, &e);
        break;
    }
    CHECK(remote == 1);
    CHECK_OK(uln_counters_get(J.ctx, &cnt[1]));
    for (int kind = 0; kind < T_NKINDS; kind++) {
        for (int r = 0; r < NREG; r++) {
            if (r == R_GOOD) continue;
            const uint8_t *b = r == R_STALE ? rereg[kind].buf : reg[kind][r].buf;
            if (r == R_STALE) {
                CHECK_PAT(b, 100, region_seed(kind, r), 0, "stale %s region", t_kind_name(kind));
                CHECK_PAT(b + 100, 64, pat_seed(0, 61, (uint64_t)kind), 0,
                          "re-registered %s region: the good PUT", t_kind_name(kind));
                CHECK_PAT(b + 164, RLEN - 164, region_seed(kind, r), 164, "stale %s region",
                          t_kind_name(kind));
            } else {
                CHECK_PAT(b, RLEN, region_seed(kind, r), 0,
                          "%s %s region must be unchanged after refused accesses", rname[r],
                          t_kind_name(kind));
            }
        }
    }
    CHECK_OK(uln_nap(ep, 0, cnt, 2 * sizeof cnt[0], 0xc0, 0));
    struct uln_cqe e = t_cq_take1(cq, 30000, "counters NAP completion");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP);
}

int main(void)
{
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS][NREG], rereg[T_NKINDS], own;
    uint64_t mine[T_NKINDS * NREG + 1] = {0}, all[2 * (T_NKINDS * NREG + 1)];
    if (J.rank == 1) {
        for (int kind = 0; kind < T_NKINDS; kind++)
            for (int r = 0; r < NREG; r++) {
                t_region_new(&J, &reg[kind][r], kind, RLEN, racc[r]);
                pat_fill(reg[kind][r].buf, RLEN, region_seed(kind, r), 0);
                mine[kind * NREG + r] = reg[kind][r].key;
            }
    } else {
        t_region_new(&J, &own, T_KIND_SHM, RLEN, racc[R_RW]);
        mine[T_NKINDS * NREG] = own.key;
    }
    t_exchange(&J, ep, cq, mine, T_NKINDS * NREG + 1, all);
    memcpy(keys, all + (T_NKINDS * NREG + 1), sizeof keys);
    own_key = all[T_NKINDS * NREG];

    /* Make the stale keys stale, keeping the memory, and register the same
     * memory again. */
    uint64_t rk[T_NKINDS] = {0}, allrk[2 * T_NKINDS];
    if (J.rank == 1) {
        for (int kind = 0; kind < T_NKINDS; kind++) {
            struct t_region *s = &reg[kind][R_STALE];
            CHECK_OK(uln_mr_dereg(s->mr));
            s->mr = NULL;
            rereg[kind] = *s;
            CHECK_OK(uln_mr_reg(J.ctx, s->buf, RLEN, racc[R_STALE], &rereg[kind].mr));
            rereg[kind].key = rk[kind] = uln_mr_key(rereg[kind].mr);
            CHECKF(rk[kind] != s->key, "re-registering the same memory reused key %#" PRIx64,
                   rk[kind]);
        }
    }
    /* Rank 1's counters before the exchange that lets rank 0 start: over shm
     * with direct access rank 0 counts its refusals in rank 1's counters
     * itself, possibly before rank 1 would get round to reading them. */
    struct uln_counters cnt[2];
    CHECK_OK(uln_counters_get(J.ctx, &cnt[0]));
    t_exchange(&J, ep, cq, rk, T_NKINDS, allrk);
    memcpy(rereg_key, allrk + T_NKINDS, sizeof rereg_key);

    if (J.rank == 0)
        initiator();
    else
        target(reg, rereg, cnt);

    t_barrier(&J);
    if (J.rank == 1) {
        for (int kind = 0; kind < T_NKINDS; kind++) {
            for (int r = 0; r < NREG; r++)
                if (r != R_STALE) t_region_free(&J, &reg[kind][r]);
            t_region_free(&J, &rereg[kind]);
        }
    } else {
        t_region_free(&J, &own);
    }
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
