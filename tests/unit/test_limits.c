/*
 * test_limits.c - the limits a process sets itself, in a job of one, each at
 * its largest accepted value and one past it (docs/limits.md): the value that
 * fits is accepted and works, the next is refused with the documented code,
 * and the process goes on. Limits between processes (regions seen by a peer,
 * endpoints, queues, descriptors) are in tests/integration/limits.c.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

static struct uln_config cfg_with(uint32_t ring, uint32_t nap, uint32_t sq, uint32_t eps,
                                  uint32_t regions)
{
    struct uln_config c;
    uln_config_init(&c);
    c.ring_bytes = ring;
    c.nap_max = nap;
    c.sq_depth = sq;
    c.max_eps = eps;
    c.max_regions = regions;
    return c;
}

/* Open with cfg: expect `want`; on success check that the value took. */
static struct uln_ctx *open_expect(const struct uln_config *c, int want, int line)
{
    struct uln_ctx *ctx = NULL;
    int rc = uln_open(c, &ctx);
    if (rc != want) {
        failed++;
        fprintf(stderr, "%s:%d: uln_open returned %d, expected %d\n", __FILE__, line, rc, want);
        if (rc == 0) uln_close(ctx);
        return NULL;
    }
    passed++;
    return rc == 0 ? ctx : NULL;
}
#define OPEN_EXPECT(c, want) open_expect(c, want, __LINE__)

static void pattern(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, n - i < 8 ? n - i : 8);
    }
}

static int take(struct uln_cq *cq, struct uln_cqe *e, int want)
{
    int got = 0;
    for (long spins = 0; spins < 10000000 && got < want; spins++) {
        int n = uln_cq_poll(cq, e + got, want - got);
        if (n < 0) return n;
        got += n;
    }
    return got;
}

/* Settings: the largest of each is accepted, the next refused. */
static void test_settings(void)
{
    struct uln_config c;
    struct uln_ctx *ctx;
    struct uln_info info;

    c = cfg_with(1u << 28, 0, 0, 0, 0); /* largest ring */
    if ((ctx = OPEN_EXPECT(&c, 0))) {
        CHECK(uln_query(ctx, &info) == 0 && info.ring_bytes == 1u << 28);
        uln_close(ctx);
    }
    c = cfg_with(1u << 29, 0, 0, 0, 0);
    OPEN_EXPECT(&c, -EINVAL);
    c = cfg_with((1u << 28) - 4096, 0, 0, 0, 0); /* not a power of two */
    OPEN_EXPECT(&c, -EINVAL);
    /* The ring must hold two of the largest NAPs: 8192 B NAPs (the default)
     * need 2 x 8256 B. */
    c = cfg_with(16384, 0, 0, 0, 0);
    OPEN_EXPECT(&c, -EINVAL);
    c = cfg_with(32768, 0, 0, 0, 0);
    if ((ctx = OPEN_EXPECT(&c, 0))) uln_close(ctx);

    c = cfg_with(0, 0, 1u << 20, 0, 0); /* deepest send queue */
    if ((ctx = OPEN_EXPECT(&c, 0))) {
        CHECK(uln_query(ctx, &info) == 0 && info.sq_depth == 1u << 20);
        uln_close(ctx);
    }
    c = cfg_with(0, 0, (1u << 20) + 1, 0, 0);
    OPEN_EXPECT(&c, -EINVAL);

    c = cfg_with(0, 0, 0, 0, 1u << 24); /* most regions */
    if ((ctx = OPEN_EXPECT(&c, 0))) {
        CHECK(uln_query(ctx, &info) == 0 && info.max_regions == 1u << 24);
        uln_close(ctx);
    }
    c = cfg_with(0, 0, 0, 0, (1u << 24) + 1);
    OPEN_EXPECT(&c, -EINVAL);

    c = cfg_with(0, 0, 0, 65, 0);
    OPEN_EXPECT(&c, -EINVAL);

    uln_config_init(&c);
    c.chunk_bytes = 1u << 30;
    c.post_copy_max = 1u << 30;
    if ((ctx = OPEN_EXPECT(&c, 0))) uln_close(ctx);
    c.chunk_bytes = (1u << 30) + 1;
    OPEN_EXPECT(&c, -EINVAL);
    c.chunk_bytes = 0;
    c.post_copy_max = (1u << 30) + 1;
    OPEN_EXPECT(&c, -EINVAL);

    /* From the environment, the same bounds. */
    uln_config_init(&c);
    setenv("ULN_UDP_WINDOW", "65536", 1);
    OPEN_EXPECT(&c, -EINVAL);
    setenv("ULN_UDP_WINDOW", "32768", 1);
    if ((ctx = OPEN_EXPECT(&c, 0))) uln_close(ctx);
    unsetenv("ULN_UDP_WINDOW");
    setenv("ULN_MAX_EPS", "65", 1);
    OPEN_EXPECT(&c, -EINVAL);
    unsetenv("ULN_MAX_EPS");
    /* Ranks: ULN_SIZE above the board's 4096 is refused before anything is
     * set up (4096 ranks themselves: docs/limits.md, run by hand). */
    setenv("ULN_SIZE", "4097", 1);
    setenv("ULN_RANK", "0", 1);
    OPEN_EXPECT(&c, -EINVAL);
    unsetenv("ULN_SIZE");
    unsetenv("ULN_RANK");
}

/* The largest NAP: one ring message of 65535 cells (4 MiB - 80 B), in the
 * smallest ring that holds two, 8 MiB. It goes through whole; one byte more
 * is not a valid setting whatever the ring, and a 4 MiB ring cannot take it. */
#define NAP_LIMIT (65535u * 64 - 16)
static void test_nap_max(void)
{
    struct uln_config c = cfg_with(1u << 23, NAP_LIMIT, 0, 0, 0);
    struct uln_ctx *ctx = OPEN_EXPECT(&c, 0);
    c.nap_max = NAP_LIMIT + 1;
    OPEN_EXPECT(&c, -EINVAL);
    c.ring_bytes = 1u << 28;
    OPEN_EXPECT(&c, -EINVAL);
    c = cfg_with(1u << 22, NAP_LIMIT, 0, 0, 0);
    OPEN_EXPECT(&c, -EINVAL);
    if (!ctx) return;
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK(uln_cq_open(ctx, 8, &cq) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    size_t n = NAP_LIMIT;
    uint8_t *buf = malloc(n + 1);
    CHECK(buf != NULL);
    pattern(buf, n + 1, 26);
    CHECK(uln_nap(ep, 0, buf, n + 1, 1, 0) == -EMSGSIZE);
    CHECK(uln_nap(ep, 0, buf, n, 2, 0) == 0);
    struct uln_cqe e[2];
    CHECK(take(cq, e, 2) == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(e[i].status == 0);
        if (e[i].op == ULN_OP_NAP_RECV) {
            CHECK(e[i].len == n && memcmp(e[i].data, buf, n) == 0);
            CHECK(uln_cqe_release(cq, &e[i]) == 0);
        } else {
            CHECK(e[i].op == ULN_OP_NAP && e[i].user_data == 2);
        }
    }
    free(buf);
    uln_close(ctx);
}

/* A NAP of v from ep to ourselves: both its entries (sent, received) come,
 * from that endpoint, and the payload is v. */
static void nap_to_self(struct uln_ep *ep, struct uln_cq *cq, uint64_t v)
{
    struct uln_cqe e[2];
    CHECK(uln_nap(ep, 0, &v, sizeof v, 7, ULN_INLINE) == 0);
    CHECK(take(cq, e, 2) == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(e[i].status == 0 && e[i].ep == uln_ep_index(ep));
        if (e[i].op == ULN_OP_NAP_RECV) {
            CHECK(e[i].len == 8 && memcmp(e[i].data, &v, 8) == 0);
            CHECK(uln_cqe_release(cq, &e[i]) == 0);
        }
    }
}

/* 64 endpoints (the most a context takes, and a CQ drives) on one CQ; the
 * 65th is refused. Closing one frees its index: the next open takes it (a
 * new life of endpoint 10, which works), and the one after is refused again. */
static void test_eps(void)
{
    struct uln_config c = cfg_with(0, 0, 0, 64, 0);
    struct uln_ctx *ctx = OPEN_EXPECT(&c, 0);
    if (!ctx) return;
    struct uln_cq *cq;
    struct uln_ep *ep[65];
    CHECK(uln_cq_open(ctx, 256, &cq) == 0);
    for (int i = 0; i < 64; i++) {
        CHECK(uln_ep_open(ctx, cq, cq, &ep[i]) == 0);
        CHECK(uln_ep_index(ep[i]) == i);
    }
    CHECK(uln_ep_open(ctx, cq, cq, &ep[64]) == -ENOSPC);
    nap_to_self(ep[63], cq, 0x63); /* the last one works */
    CHECK(uln_ep_close(ep[10]) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep[10]) == 0);
    CHECK(uln_ep_index(ep[10]) == 10);
    CHECK(uln_ep_open(ctx, cq, cq, &ep[64]) == -ENOSPC);
    nap_to_self(ep[10], cq, 0x10); /* and so does the new life */
    CHECK(uln_close(ctx) == 0);
}

/* A CQ of 2^24 entries is the largest; one more, or none, is refused. */
static void test_cq(void)
{
    struct uln_ctx *ctx;
    CHECK(uln_open(NULL, &ctx) == 0);
    struct uln_cq *cq;
    CHECK(uln_cq_open(ctx, 0, &cq) == -EINVAL);
    CHECK(uln_cq_open(ctx, (1u << 24) + 1, &cq) == -EINVAL);
    CHECK(uln_cq_open(ctx, 1u << 24, &cq) == 0);
    struct uln_ep *ep;
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    CHECK(uln_nap(ep, 0, NULL, 0, 1, 0) == 0);
    struct uln_cqe e[2];
    CHECK(take(cq, e, 2) == 2);
    for (int i = 0; i < 2; i++)
        if (e[i].op == ULN_OP_NAP_RECV) CHECK(uln_cqe_release(cq, &e[i]) == 0);
    CHECK(uln_close(ctx) == 0);
}

/* Regions: any length the address space holds (the key names a table
 * index, offsets are 64-bit: nothing in the encoding limits the size), but
 * only memory that is mapped, and no range that wraps around. */
static void test_region_sizes(void)
{
    struct uln_ctx *ctx;
    CHECK(uln_open(NULL, &ctx) == 0);
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    CHECK(uln_cq_open(ctx, 16, &cq) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    unsigned rw = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    /* Zero length, even at NULL: allowed, and empty. */
    CHECK(uln_mr_reg(ctx, NULL, 0, rw, &mr) == 0);
    CHECK(uln_mr_len(mr) == 0);
    CHECK(uln_mr_dereg(mr) == 0);

    /* A hole in the middle: -EFAULT, and so is memory past the end. */
    uint8_t *m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    CHECK(munmap(m + page, page) == 0);
    CHECK(uln_mr_reg(ctx, m, 3 * page, rw, &mr) == -EFAULT);
    CHECK(uln_mr_reg(ctx, m + 100, page, rw, &mr) == -EFAULT);
    CHECK(uln_mr_reg(ctx, m + 100, page - 100, rw, &mr) == 0); /* up to the hole: fine */
    CHECK(uln_mr_dereg(mr) == 0);
    CHECK(uln_mr_reg(ctx, m, SIZE_MAX, rw, &mr) == -EINVAL); /* wraps */
    CHECK(uln_mr_reg(ctx, m + 2 * page, SIZE_MAX - (uintptr_t)(m + 2 * page) + 1, rw, &mr) ==
          -EINVAL);
    munmap(m, page);
    munmap(m + 2 * page, page);

    /* 1 TiB of reserved address space: registered, and its last byte is
     * reached; one past it is -ERANGE, an offset near 2^64 too. */
    size_t big = 1ull << 40;
    uint8_t *b =
        mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b == MAP_FAILED) {
        fprintf(stderr, "note: no 1 TiB mapping here, region size test skipped\n");
    } else {
        CHECK(uln_mr_reg(ctx, b, big, rw, &mr) == 0);
        uint64_t key = uln_mr_key(mr), w = 0x1122334455667788ull, r = 0;
        CHECK(uln_put(ep, 0, &w, 8, key, big - 8, 1, 0) == 0);
        CHECK(uln_get(ep, 0, &r, 8, key, big - 8, 2, 0) == 0);
        CHECK(uln_put(ep, 0, &w, 8, key, big - 7, 3, 0) == 0);
        CHECK(uln_get(ep, 0, &r, 8, key, UINT64_MAX - 3, 4, 0) == 0);
        struct uln_cqe e[4];
        CHECK(take(cq, e, 4) == 4);
        for (int i = 0; i < 4; i++)
            CHECK(e[i].status == (e[i].user_data <= 2 ? 0 : -ERANGE));
        CHECK(r == w && memcmp(b + big - 8, &w, 8) == 0);
        CHECK(uln_mr_dereg(mr) == 0);
        munmap(b, big);
    }
    CHECK(uln_close(ctx) == 0);
}

/* The fields for settings that were environment-only (spin_us, transport,
 * udp_window, udp_dead_ms): a field wins over the variable, an unset one
 * leaves it to the variable, a bad one is refused. */
static void test_config_fields(void)
{
    struct uln_config c;
    struct uln_ctx *ctx;
    struct uln_info info;
    setenv("ULN_UDP_WINDOW", "64", 1);
    setenv("ULN_UDP_DEAD_MS", "700", 1);
    setenv("ULN_TRANSPORT", "bogus", 1);
    uln_config_init(&c);
    CHECK(c.spin_us == -1 && c.transport == NULL && c.udp_window == 0 && c.udp_dead_ms == 0);
    c.udp_window = 256;
    c.udp_dead_ms = 1500;
    c.transport = "shm";
    c.spin_us = 0;
    if ((ctx = OPEN_EXPECT(&c, 0))) {
        CHECK(uln_query(ctx, &info) == 0 && info.udp_window == 256 && info.udp_dead_ms == 1500);
        uln_close(ctx);
    }
    c.udp_window = 0; /* the environment's */
    c.udp_dead_ms = 0;
    if ((ctx = OPEN_EXPECT(&c, 0))) {
        CHECK(uln_query(ctx, &info) == 0 && info.udp_window == 64 && info.udp_dead_ms == 700);
        uln_close(ctx);
    }
    c.transport = NULL; /* ULN_TRANSPORT=bogus now counts */
    OPEN_EXPECT(&c, -EINVAL);
    unsetenv("ULN_TRANSPORT");
    c.transport = "udp-ish";
    OPEN_EXPECT(&c, -EINVAL);
    c.transport = NULL;
    c.udp_window = 100; /* not a power of two */
    OPEN_EXPECT(&c, -EINVAL);
    c.udp_window = 0;
    c.spin_us = 1000001;
    OPEN_EXPECT(&c, -EINVAL);
    c.spin_us = 1000000;
    if ((ctx = OPEN_EXPECT(&c, 0))) uln_close(ctx);
    unsetenv("ULN_UDP_WINDOW");
    unsetenv("ULN_UDP_DEAD_MS");
}

int main(void)
{
    test_settings();
    test_config_fields();
    test_nap_max();
    test_eps();
    test_cq();
    test_region_sizes();
    return summary();
}
