/*
 * get_place - GETs of every size, 1 B to 16 MiB, into each kind of
 * destination, the data checked and the bytes around it untouched.
 *
 * Through the host services (ULN_TRANSPORT=svc, two hosts) the initiator's
 * service writes the data straight into the destination the initiator
 * posted (docs/service.md, "GET data placed"): into its mapping of
 * uln_mem_alloc memory the process registered, else with
 * process_vm_writev. So the destinations here are malloc'd memory,
 * registered uln_mem_alloc memory and unregistered uln_mem_alloc memory,
 * each with guard bytes before and after that must stay as they were, at
 * an odd offset; the sources both kinds of memory; both ranks GET from each
 * other at once. Any transport runs it (the data checks hold everywhere).
 *
 * With the argument "unmapped" (through the services, the peer on another
 * host: there the data never passes through this process) also: a GET into memory unmapped before
 * the data came ends with -EFAULT (the service's write fails; it is counted and the service goes
 * on), one unmapped while in flight ends with 0 or -EFAULT (never a hang, never a crash), and GETs
 * after both are whole again.
 */
#include <sys/mman.h>

#include "common.h"

#define MAX        (16u << 20)
#define GUARD      64u
#define GUARD_BYTE 0xa5
#define NDST       3 /* malloc'd, uln_mem_alloc registered, uln_mem_alloc not */

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

static uint64_t src_seed(int owner, int kind)
{
    return pat_seed(owner, 91, (uint64_t)kind);
}

/* The sizes: 1..9, then around every power of two up to MAX. */
static int sizes(uint64_t *out)
{
    int n = 0;
    for (uint64_t s = 1; s <= 9; s++)
        out[n++] = s;
    for (uint64_t p = 16; p <= MAX; p <<= 1) {
        out[n++] = p - 1;
        out[n++] = p;
        if (p < MAX) out[n++] = p + 1;
    }
    return n;
}

/* Wait for n GET completions from peer, each of len bytes (user_data its
 * index); their statuses into st. */
static void take(int peer, int n, uint64_t len, int *st, const char *what)
{
    for (int i = 0; i < n; i++) {
        struct uln_cqe e = t_cq_take1(cq, 60000, what);
        CHECK_CQE(&e, e.op == ULN_OP_GET && e.user_data < (uint64_t)n && e.peer == peer);
        CHECK_CQE(&e, e.status != 0 || e.len == len);
        st[e.user_data] = e.status;
    }
}

static void sweep(int peer, const uint64_t *keys)
{
    static uint64_t sz[80];
    int nsz = sizes(sz);
    size_t room = MAX + 2 * GUARD + 8;
    uint8_t *dst[NDST];
    struct uln_mr *mr = NULL;
    dst[0] = t_xmalloc(room);
    CHECK_OK(uln_mem_alloc(J.ctx, room, (void **)&dst[1]));
    CHECK_OK(uln_mr_reg(J.ctx, dst[1], room, ULN_ACCESS_REMOTE_WRITE, &mr));
    CHECK_OK(uln_mem_alloc(J.ctx, room, (void **)&dst[2]));
    uint64_t rng = 0x91ace + (uint64_t)J.rank;
    for (int i = 0; i < nsz; i++) {
        uint64_t len = sz[i], at = GUARD + (uint64_t)(i % 8);
        int kind = i % T_NKINDS;
        uint64_t roff = t_rand(&rng) % (MAX + 4096 - len + 1);
        for (int d = 0; d < NDST; d++) {
            memset(dst[d], GUARD_BYTE, at + len + GUARD);
            CHECK_OK(uln_get(ep, peer, dst[d] + at, len, keys[kind], roff, (uint64_t)d, 0));
        }
        int st[NDST];
        take(peer, NDST, len, st, "a GET of the sweep");
        for (int d = 0; d < NDST; d++) {
            CHECKF(st[d] == 0, "GET of %" PRIu64 " B into destination %d: %d (%s)", len, d, st[d],
                   t_errname(st[d]));
            CHECK_BYTES(dst[d], at, GUARD_BYTE, "before a GET of %" PRIu64 " B (dst %d)", len, d);
            CHECK_PAT(dst[d] + at, len, src_seed(peer, kind), roff,
                      "GET of %" PRIu64 " B from %s memory into destination %d", len,
                      t_kind_name(kind), d);
            CHECK_BYTES(dst[d] + at + len, GUARD, GUARD_BYTE,
                        "after a GET of %" PRIu64 " B (dst %d)", len, d);
        }
    }
    CHECK_OK(uln_mr_dereg(mr));
    CHECK_OK(uln_mem_free(J.ctx, dst[2]));
    CHECK_OK(uln_mem_free(J.ctx, dst[1]));
    free(dst[0]);
}

/* Through the services: destinations that are gone. */
static void unmapped(int peer, const uint64_t *keys)
{
    size_t len = 1u << 20;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    CHECK_OK(munmap(p, len)); /* gone before the GET is even posted */
    CHECK_OK(uln_get(ep, peer, p, len, keys[T_KIND_MALLOC], 0, 0, 0));
    int st[1];
    take(peer, 1, len, st, "a GET into unmapped memory");
    CHECKF(st[0] == -EFAULT, "GET into unmapped memory: %d (%s), not -EFAULT", st[0],
           t_errname(st[0]));

    len = MAX;
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    CHECK_OK(uln_get(ep, peer, p, len, keys[T_KIND_SHM], 0, 0, 0));
    CHECK_OK(munmap(p, len)); /* while its data is on its way */
    take(peer, 1, len, st, "a GET whose destination went in flight");
    CHECKF(st[0] == 0 || st[0] == -EFAULT, "GET unmapped in flight: %d (%s)", st[0],
           t_errname(st[0]));

    /* The service lives and places whole again. */
    uint8_t *q = t_xmalloc(len);
    CHECK_OK(uln_get(ep, peer, q, len, keys[T_KIND_SHM], 4096, 0, 0));
    take(peer, 1, len, st, "a GET after them");
    CHECK(st[0] == 0);
    CHECK_PAT(q, len, src_seed(peer, T_KIND_SHM), 4096, "the GET after the unmapped ones");
    free(q);
}

int main(int argc, char **argv)
{
    t_open(&J, 2);
    int peer = 1 - J.rank;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg[T_NKINDS];
    uint64_t mine[T_NKINDS], all[2 * T_NKINDS];
    for (int k = 0; k < T_NKINDS; k++) {
        t_region_new(&J, &reg[k], k, MAX + 4096, ULN_ACCESS_REMOTE_READ);
        pat_fill(reg[k].buf, MAX + 4096, src_seed(J.rank, k), 0);
        mine[k] = reg[k].key;
    }
    t_exchange(&J, ep, cq, mine, T_NKINDS, all);
    const uint64_t *keys = all + (size_t)peer * T_NKINDS;
    sweep(peer, keys);
    if (argc > 1 && !strcmp(argv[1], "unmapped")) unmapped(peer, keys);
    t_barrier(&J); /* the peer may still GET from our regions until here */
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    for (int k = 0; k < T_NKINDS; k++)
        t_region_free(&J, &reg[k]);
    return t_finish(&J);
}
