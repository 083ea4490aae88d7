/*
 * limits - each limit between processes, tested at the limit: the last one
 * that fits is accepted and works, the next is refused with the documented
 * status, and the process goes on working (docs/limits.md). One section per
 * run:
 *
 *   limits regions   (2 ranks) rank 1 registers max_regions regions (half of
 *       them uln_mem_alloc memory, half malloc'd); the next is -ENOSPC. It
 *       deregisters one and registers again: the freed table index comes
 *       back with a new key. Rank 0 PUTs into and GETs from the new region and
 *       the one at the highest index; the old key is -ENOKEY, and so is a key
 *       naming index max_regions.
 *   limits queues    (2 ranks) a send CQ of 16 entries and sq_depth entries:
 *       exactly 16 + sq_depth NAPs are accepted without polling (16 complete
 *       into the CQ, sq_depth wait in the queue behind the full CQ; over UDP,
 *       where NAPs also wait for the peer's first answer, between sq_depth
 *       and that many); the next NAP, PUT and GET are -EAGAIN, a flush is
 *       accepted (it takes no entry). Every accepted NAP, then the flush,
 * completes once, in order, never more than 16 per poll. The receiver's CQ has 4 entries and it
 * does not poll for 300 ms: 64 NAPs and 64 put_imm wait in its ring meanwhile and arrive whole, in
 * order, at most 4 per poll. limits fds       (4 ranks) each peer on this host costs a descriptor:
 *       rank 0 leaves itself room for two, reaches ranks 1 and 2, and its
 *       NAP to rank 3 completes with -EMFILE; with the limit back, the next
 *       NAP to rank 3 goes through. Over UDP peers cost no descriptor: all
 *       three go through.
 *   limits sizes     (2 ranks) a zero-length region takes zero-length access
 *       at offset 0 only; a 1 TiB region (malloc-like memory) and a 64 GiB
 *       uln_mem_alloc region are reached at their last 8 bytes, and one
 *       byte further is -ERANGE.
 */
#include "common.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>

static struct t_job J;
static struct uln_cq *cq; /* control endpoint 0 */
static struct uln_ep *ep;

/* ---- regions ----------------------------------------------------------- */

#define RSLICE 64u

static void test_regions(void)
{
    uint32_t max = J.info.max_regions;
    uint32_t again = 100; /* the index freed and taken again (uln_mem_alloc memory) */
    uint64_t keys[3] = {0}, all[6];
    uint8_t *shm = NULL, *heap = NULL;
    struct uln_mr **mrs = NULL;
    if (J.rank == 1) {
        /* Region i covers slice i/2 of one of the two buffers. */
        size_t half = (size_t)(max + 1) / 2 * RSLICE;
        CHECK_OK(uln_mem_alloc(J.ctx, half, (void **)&shm));
        heap = t_xmalloc(half);
        memset(shm, 0, half);
        memset(heap, 0, half);
        mrs = calloc(max, sizeof *mrs);
        CHECK(mrs != NULL);
        unsigned rw = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE;
        for (uint32_t i = 0; i < max; i++) {
            uint8_t *b = (i % 2 ? heap : shm) + (size_t)(i / 2) * RSLICE;
            CHECK_OK(uln_mr_reg(J.ctx, b, RSLICE, rw, &mrs[i]));
            CHECKF(uln_mr_key(mrs[i]) >> 40 == i, "region %u has table index %llu", i,
                   (unsigned long long)(uln_mr_key(mrs[i]) >> 40));
        }
        struct uln_mr *extra = NULL;
        CHECK_RC(uln_mr_reg(J.ctx, shm, RSLICE, rw, &extra), -ENOSPC);
        CHECK_RC(uln_mr_reg(J.ctx, NULL, 0, rw, &extra), -ENOSPC); /* even an empty one */
        CHECK(extra == NULL);
        keys[2] = uln_mr_key(mrs[again]); /* about to go stale */
        CHECK_OK(uln_mr_dereg(mrs[again]));
        CHECK_OK(uln_mr_reg(J.ctx, shm + (size_t)(again / 2) * RSLICE, RSLICE, rw, &mrs[again]));
        CHECK(uln_mr_key(mrs[again]) >> 40 == again && uln_mr_key(mrs[again]) != keys[2]);
        CHECK_RC(uln_mr_reg(J.ctx, shm, RSLICE, rw, &extra), -ENOSPC); /* full again */
        keys[0] = uln_mr_key(mrs[again]);
        keys[1] = uln_mr_key(mrs[max - 1]);
    }
    t_exchange(&J, ep, cq, keys, 3, all);
    if (J.rank == 0) {
        uint64_t k_again = all[3], k_last = all[4], k_stale = all[5];
        uint64_t k_past = (uint64_t)max << 40 | (k_last & ((1ull << 40) - 1));
        uint8_t out[2][RSLICE], back[2][RSLICE];
        uint64_t ks[2] = {k_again, k_last};
        for (int i = 0; i < 2; i++) {
            pat_fill(out[i], RSLICE, pat_seed(0, 300, (uint64_t)i), 0);
            CHECK_OK(uln_put(ep, 1, out[i], RSLICE, ks[i], 0, 10 + (uint64_t)i, 0));
            struct uln_cqe e = t_cq_take1(cq, 30000, "PUT into a region at the limit");
            CHECK_CQE(&e, e.op == ULN_OP_PUT && e.status == 0);
            CHECK_OK(uln_get(ep, 1, back[i], RSLICE, ks[i], 0, 20 + (uint64_t)i, 0));
            e = t_cq_take1(cq, 30000, "GET from a region at the limit");
            CHECK_CQE(&e, e.op == ULN_OP_GET && e.status == 0);
            CHECK_PAT(back[i], RSLICE, pat_seed(0, 300, (uint64_t)i), 0, "region %d back", i);
        }
        uint64_t bad[2] = {k_stale, k_past};
        static const uint8_t zeros[8];
        for (int i = 0; i < 2; i++) {
            /* Zeros: had the stale key hit the re-registered region, the
             * pattern rank 1 checks there would be broken. */
            CHECK_OK(uln_put(ep, 1, zeros, 8, bad[i], 0, 30 + (uint64_t)i, 0));
            struct uln_cqe e = t_cq_take1(cq, 30000, "PUT with a stale or out-of-table key");
            CHECK_CQE(&e, e.op == ULN_OP_PUT && e.status == -ENOKEY);
        }
        static const uint64_t done = 0xd0e;
        CHECK_OK(uln_nap(ep, 1, &done, 8, 40, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "done NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
    } else {
        /* Keep polling (ring-path placement) until rank 0 is done. */
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 0's done NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
        t_release(cq, &e);
        CHECK_PAT(shm + (size_t)(again / 2) * RSLICE, RSLICE, pat_seed(0, 300, 0), 0,
                  "re-registered region");
        CHECK_PAT(heap + (size_t)((max - 1) / 2) * RSLICE, RSLICE, pat_seed(0, 300, 1), 0,
                  "region at the highest index");
        for (uint32_t i = 0; i < max; i++)
            CHECK_OK(uln_mr_dereg(mrs[i]));
        CHECK_OK(uln_mem_free(J.ctx, shm));
        free(heap);
        free(mrs);
    }
}

/* ---- queues ------------------------------------------------------------ */

#define SEND_CQ 16
#define RECV_CQ 4
#define NBURST  64
#define PUTLEN  256u

static void test_queues(void)
{
    struct uln_cq *scq, *rcq;
    struct uln_ep *qep;
    CHECK_OK(uln_cq_open(J.ctx, SEND_CQ, &scq));
    CHECK_OK(uln_cq_open(J.ctx, RECV_CQ, &rcq));
    CHECK_OK(uln_ep_open(J.ctx, scq, rcq, &qep));
    uint32_t sq = J.info.sq_depth, accepted = SEND_CQ + sq;
    bool acked = t_expect_of(&J, &J.info).nap_acked;
    uint8_t *region = NULL;
    struct uln_mr *mr = NULL;
    uint64_t key = 0, all[2];
    if (J.rank == 1) {
        CHECK_OK(uln_mem_alloc(J.ctx, NBURST * PUTLEN, (void **)&region));
        CHECK_OK(uln_mr_reg(J.ctx, region, NBURST * PUTLEN, ULN_ACCESS_REMOTE_WRITE, &mr));
        key = uln_mr_key(mr);
    }
    t_exchange(&J, ep, cq, &key, 1, all);
    key = all[1];
    struct uln_cqe e[64];

    if (J.rank == 0) {
        static uint64_t msg[5];
        struct uln_counters c0, c1;
        CHECK_OK(uln_counters_get(J.ctx, &c0));
        /* Nothing polled: over shared memory the first 16 complete into the
         * CQ at once and the next sq_depth wait behind it in the send queue,
         * so exactly 16 + sq_depth are accepted. Over UDP a NAP also waits
         * for the peer's first answer, so between sq_depth and that many. */
        uint32_t acc = 0;
        int rc = 0;
        for (; acc <= accepted; acc++) {
            msg[0] = acc;
            msg[1] = 0;
            if ((rc = uln_nap(qep, 1, msg, 40, acc, ULN_INLINE)) != 0) break;
        }
        CHECK_RC(rc, -EAGAIN);
        if (acked)
            CHECKF(acc >= sq && acc <= accepted, "%u NAPs accepted, sq_depth %u", acc, sq);
        else
            CHECKF(acc == accepted, "%u NAPs accepted, expected %u + %u", acc, SEND_CQ, sq);
        accepted = acc;
        CHECK_RC(uln_nap(qep, 1, msg, 40, 9999, ULN_INLINE), -EAGAIN);
        CHECK_RC(uln_put(qep, 1, msg, 8, key, 0, 9999, 0), -EAGAIN);
        CHECK_RC(uln_get(qep, 1, msg, 8, key, 0, 9999, 0), -EAGAIN);
        /* A flush takes no send-queue entry: accepted, and completed after
         * every NAP before it (ulnet.h, the posting contract). */
        CHECK_OK(uln_ep_flush(qep, 9999));
        CHECK_OK(uln_counters_get(J.ctx, &c1));
        CHECK(c1.eagain >= c0.eagain + 4);
        uint32_t got = 0;
        double deadline = t_now() + 30;
        while (got < accepted + 1) {
            int n = uln_cq_poll(scq, e, 64);
            CHECKF(n >= 0 && n <= SEND_CQ, "a %d-entry CQ gave %d entries", SEND_CQ, n);
            for (int i = 0; i < n; i++, got++)
                if (got == accepted)
                    CHECK_CQE(&e[i], e[i].op == ULN_OP_FLUSH && e[i].status == 0 &&
                                         e[i].user_data == 9999);
                else
                    CHECK_CQE(&e[i],
                              e[i].op == ULN_OP_NAP && e[i].status == 0 && e[i].user_data == got);
            if (n == 0) {
                CHECKF(t_now() < deadline, "%u of %u NAP completions", got, accepted);
                int w = uln_cq_wait(scq, 50);
                CHECK(w == 0 || w == -ETIMEDOUT);
            }
        }
        t_cq_expect_empty(scq, 100, "no completion of a refused post");
        /* The queue works again: the burst for the receiver's small CQ. */
        static uint8_t src[NBURST][PUTLEN];
        for (uint32_t i = 0; i < NBURST; i++) {
            pat_fill(src[i], PUTLEN, pat_seed(0, 310, i), 0);
            msg[0] = accepted + i;
            msg[1] = accepted; /* the receiver learns how many to expect */
            while ((rc = uln_nap(qep, 1, msg, 40, 0, ULN_INLINE | ULN_SILENT)) == -EAGAIN)
                uln_cq_wait(scq, 1);
            CHECK_OK(rc);
            while ((rc = uln_put_imm(qep, 1, src[i], PUTLEN, key, (uint64_t)i * PUTLEN, i, 0,
                                     ULN_SILENT)) == -EAGAIN)
                uln_cq_wait(scq, 1);
            CHECK_OK(rc);
        }
        CHECK_OK(uln_ep_flush(qep, 77));
        struct uln_cqe f = t_cq_take1(scq, 30000, "flush after the burst");
        CHECK_CQE(&f, f.op == ULN_OP_FLUSH && f.status == 0 && f.user_data == 77);
    } else {
        /* Do not poll for a while: rank 0's NAPs and PUT notifications wait in
         * our ring, not in a CQ that has room for 4. */
        t_sleep_ms(300);
        uint32_t naps = 0, imms = 0, want_naps = UINT32_MAX;
        double deadline = t_now() + 30;
        while (naps < want_naps || imms < NBURST) {
            int n = uln_cq_poll(rcq, e, 64);
            CHECKF(n >= 0 && n <= RECV_CQ, "a %d-entry CQ gave %d entries", RECV_CQ, n);
            for (int i = 0; i < n; i++) {
                CHECK_CQE(&e[i], e[i].status == 0 && e[i].peer == 0);
                if (e[i].op == ULN_OP_NAP_RECV) {
                    uint64_t v[2];
                    CHECK_CQE(&e[i], e[i].len == 40);
                    memcpy(v, e[i].data, 16);
                    CHECKF(v[0] == naps, "NAP %" PRIu64 " arrived as number %u", v[0], naps);
                    if (v[1]) want_naps = (uint32_t)v[1] + NBURST;
                    naps++;
                    CHECK_OK(uln_cqe_release(rcq, &e[i]));
                } else {
                    CHECK_CQE(&e[i], e[i].op == ULN_OP_PUT_REMOTE && e[i].imm == imms &&
                                         e[i].len == PUTLEN && e[i].offset == imms * PUTLEN);
                    CHECK_PAT(region + (size_t)imms * PUTLEN, PUTLEN, pat_seed(0, 310, imms), 0,
                              "put_imm %u", imms);
                    imms++;
                }
            }
            if (n == 0) {
                CHECKF(t_now() < deadline, "%u of %u NAPs, %u of %d put_imm", naps, want_naps, imms,
                       NBURST);
                int w = uln_cq_wait(rcq, 50);
                CHECK(w == 0 || w == -ETIMEDOUT);
            }
        }
        t_cq_expect_empty(rcq, 100, "nothing more than was sent");
    }
    t_barrier(&J);
    CHECK_OK(uln_ep_close(qep));
    CHECK_OK(uln_cq_close(scq));
    CHECK_OK(uln_cq_close(rcq));
    if (mr) CHECK_OK(uln_mr_dereg(mr));
    if (region) CHECK_OK(uln_mem_free(J.ctx, region));
}

/* ---- descriptors -------------------------------------------------------- */

/* The soft limit that leaves exactly `room` descriptors free: a descriptor
 * takes the lowest free number, and that number must be below the limit. */
static rlim_t limit_leaving(int room)
{
    static bool used[65536];
    memset(used, 0, sizeof used);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && atoi(de->d_name) != dirfd(d) && atoi(de->d_name) < 65536)
            used[atoi(de->d_name)] = true;
    closedir(d);
    int free_seen = 0;
    for (int fd = 0; fd < 65536; fd++)
        if (!used[fd] && ++free_seen == room) return (rlim_t)fd + 1;
    CHECK(!"no room below 65536");
    return 0;
}

static void test_fds(void)
{
    CHECKF(J.size == 4, "limits fds wants 4 ranks");
    bool fd_per_peer = t_expect_of(&J, &J.info).fd_per_peer;
    if (J.rank == 0) {
        struct rlimit old, rl;
        CHECK_OK(getrlimit(RLIMIT_NOFILE, &old));
        rl = old;
        rl.rlim_cur = limit_leaving(2); /* room for two peers (a pidfd each) */
        CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
        static const uint64_t first = 1, second = 2;
        for (int p = 1; p < 4; p++)
            CHECK_OK(uln_nap(ep, p, &first, 8, (uint64_t)p, 0));
        struct uln_cqe e[3];
        t_cq_take(cq, e, 3, 30000, "NAPs to three new peers");
        for (int i = 0; i < 3; i++) {
            int want = e[i].peer == 3 && fd_per_peer ? -EMFILE : 0;
            CHECK_CQE(&e[i], e[i].op == ULN_OP_NAP && (int)e[i].user_data == e[i].peer &&
                                 e[i].status == want);
        }
        CHECK_OK(setrlimit(RLIMIT_NOFILE, &old));
        CHECK_OK(uln_nap(ep, 3, &second, 8, 4, 0));
        struct uln_cqe s = t_cq_take1(cq, 30000, "NAP to rank 3 with the limit back");
        CHECK_CQE(&s, s.op == ULN_OP_NAP && s.status == 0 && s.peer == 3);
    } else {
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 0's NAP");
        uint64_t v;
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8 && e.peer == 0);
        memcpy(&v, e.data, 8);
        /* Rank 3 gets only the second NAP if reaching it took a descriptor. */
        CHECKF(v == (J.rank == 3 && fd_per_peer ? 2u : 1u), "rank %d got NAP %" PRIu64, J.rank, v);
        t_release(cq, &e);
        if (J.rank == 3 && !fd_per_peer) {
            e = t_cq_take1(cq, 30000, "rank 0's second NAP");
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
            t_release(cq, &e);
        }
        t_cq_expect_empty(cq, 100, "one NAP per peer");
    }
}

/* ---- region sizes --------------------------------------------------------- */

#define TIB (1ull << 40)
#define GIB (1ull << 30)

static void test_sizes(void)
{
    uint64_t keys[3] = {0}, all[6];
    struct uln_mr *mr[3] = {0};
    uint8_t *plain = NULL, *mapped = NULL;
    if (J.rank == 1) {
        unsigned rw = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE;
        plain = mmap(NULL, TIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
        CHECKF(plain != MAP_FAILED, "mmap of 1 TiB (MAP_NORESERVE): %s", strerror(errno));
        CHECK_OK(uln_mem_alloc(J.ctx, 64 * GIB, (void **)&mapped));
        CHECK_OK(uln_mr_reg(J.ctx, NULL, 0, rw, &mr[0]));
        CHECK_OK(uln_mr_reg(J.ctx, plain, TIB, rw, &mr[1]));
        CHECK_OK(uln_mr_reg(J.ctx, mapped, 64 * GIB, rw, &mr[2]));
        for (int i = 0; i < 3; i++)
            keys[i] = uln_mr_key(mr[i]);
    }
    t_exchange(&J, ep, cq, keys, 3, all);
    if (J.rank == 0) {
        struct op {
            bool put;
            int reg;
            uint64_t off, len;
            int want;
        } ops[] = {
            {true, 0, 0, 0, 0},
            {false, 0, 0, 0, 0},
            {true, 0, 0, 1, -ERANGE},
            {false, 0, 1, 0, -ERANGE},
            {true, 1, TIB - 8, 8, 0},
            {false, 1, TIB - 8, 8, 0},
            {true, 1, TIB - 7, 8, -ERANGE},
            {false, 1, TIB, 1, -ERANGE},
            {true, 2, 64 * GIB - 8, 8, 0},
            {false, 2, 64 * GIB - 8, 8, 0},
            {true, 2, 64 * GIB - 7, 8, -ERANGE},
            {false, 2, 64 * GIB + 1, 0, -ERANGE},
        };
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            uint64_t w = 0x5151000000000000ull | i, r = 0;
            uint64_t key = all[3 + ops[i].reg];
            if (ops[i].put)
                CHECK_OK(uln_put(ep, 1, &w, ops[i].len, key, ops[i].off, i, 0));
            else
                CHECK_OK(uln_get(ep, 1, &r, ops[i].len, key, ops[i].off, i, 0));
            struct uln_cqe e = t_cq_take1(cq, 30000, "access at a region's end");
            CHECK_CQE(&e, e.user_data == i && e.status == ops[i].want);
            /* A GET after a PUT to the same place reads what the PUT wrote. */
            if (!ops[i].put && ops[i].want == 0 && ops[i].len == 8)
                CHECKF(r == (0x5151000000000000ull | (i - 1)), "GET %zu read %#" PRIx64, i, r);
        }
        static const uint64_t done = 0xd0e;
        CHECK_OK(uln_nap(ep, 1, &done, 8, 99, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "done NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
    } else {
        struct uln_cqe e = t_cq_take1(cq, 30000, "rank 0's done NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 8);
        t_release(cq, &e);
        uint64_t v;
        memcpy(&v, plain + TIB - 8, 8);
        CHECKF(v == (0x5151000000000000ull | 4), "last 8 bytes of 1 TiB: %#" PRIx64, v);
        memcpy(&v, mapped + 64 * GIB - 8, 8);
        CHECKF(v == (0x5151000000000000ull | 8), "last 8 bytes of 64 GiB: %#" PRIx64, v);
        for (int i = 0; i < 3; i++)
            CHECK_OK(uln_mr_dereg(mr[i]));
        CHECK_OK(uln_mem_free(J.ctx, mapped));
        munmap(plain, TIB);
    }
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    t_open(&J, 0);
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    if (!strcmp(what, "regions"))
        test_regions();
    else if (!strcmp(what, "queues"))
        test_queues();
    else if (!strcmp(what, "fds"))
        test_fds();
    else if (!strcmp(what, "sizes"))
        test_sizes();
    else
        CHECKF(0, "usage: limits regions|queues|fds|sizes (got '%s')", what);
    t_barrier(&J);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
