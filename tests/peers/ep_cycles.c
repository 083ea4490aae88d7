/*
 * ep_cycles.c - endpoints opened and closed without end: each close frees
 * the index, each open is a new life of it, and a peer talks to every life
 * (NAP, PUT, GET, data checked) with no action of its own. Then a message
 * sent to a life that closes before taking it: the next life never sees it,
 * the owner counts it (refused_stale_ep), and on the rings a PUT waiting on
 * the closed life ends with -ECONNRESET.
 *
 * A (the parent) cycles its endpoint; B (this program again, "peer") is a
 * context with no job that inserted A's endpoint 0 once. ULNTEST_CYCLES sets
 * the number of lives (10^4 by default).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"

struct node {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    uint8_t *mem;
};

struct hello {
    uint8_t addr[ULN_ADDR_MAX];
    uint32_t addr_len;
    uint64_t key;
};

struct msg {
    uint32_t kind, k;
    uint8_t pat[48];
};
enum { M_OPEN = 1, M_REPLY, M_DONE, M_STALE, M_FRESH, M_BYE };

static bool udp_mode(void)
{
    const char *t = getenv("ULN_TRANSPORT");
    return t && !strcmp(t, "udp");
}

static bool ring_mode(void)
{
    const char *d = getenv("ULN_SHM_DIRECT");
    return !udp_mode() && d && !strcmp(d, "0");
}

static void node_open(struct node *n)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    if (uln_open(&cfg, &n->ctx)) exit(2);
    CHECK_EQ(uln_cq_open(n->ctx, 1024, &n->cq), 0);
    CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep), 0);
    CHECK_EQ(uln_mem_alloc(n->ctx, 1 << 16, (void **)&n->mem), 0);
    CHECK_EQ(uln_mr_reg(n->ctx, n->mem, 1 << 16, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                        &n->mr),
             0);
}

static void pattern(uint8_t *p, size_t n, uint32_t k)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(k * 131u + i * 7u + 1u);
}

/* The late PUT's completion (user_data 3), whenever it comes. */
static struct uln_cqe late_put;
static bool late_put_seen;

/* The next completion of op (-1: the late PUT's); received NAPs are
 * copied to *m and released. -ETIMEDOUT after ms. */
static int wait_op(struct node *n, int op, struct uln_cqe *out, struct msg *m, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct uln_cqe e;
        if (uln_cq_poll(n->cq, &e, 1) == 1) {
            if (e.op == ULN_OP_NAP_RECV) {
                if (m && e.len == sizeof *m) memcpy(m, e.data, sizeof *m);
                CHECK_EQ(uln_cqe_release(n->cq, &e), 0);
            }
            if (e.op == ULN_OP_PUT && e.user_data == 3) {
                late_put = e;
                late_put_seen = true;
                if (op < 0) return 0; /* what the caller waits for */
                continue;
            }
            if (e.op == op) {
                *out = e;
                return 0;
            }
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            return -ETIMEDOUT;
        /* Sleep until the peer wakes us: on a busy machine two processes
         * spinning for each other's turn would each wait out a time slice. */
        int rc = uln_cq_wait(n->cq, 100);
        CHECK(rc == 0 || rc == -ETIMEDOUT);
    }
}

static struct msg expect(struct node *n, uint32_t kind, uint32_t k)
{
    struct uln_cqe e;
    struct msg m = {0};
    CHECK_EQ(wait_op(n, ULN_OP_NAP_RECV, &e, &m, 20000), 0);
    CHECK_EQ(m.kind, kind);
    CHECK_EQ(m.k, k);
    uint8_t want[sizeof m.pat];
    pattern(want, sizeof want, k);
    CHECK(!memcmp(m.pat, want, sizeof want));
    return m;
}

static void send(struct node *n, int peer, uint32_t kind, uint32_t k)
{
    struct msg m = {.kind = kind, .k = k};
    pattern(m.pat, sizeof m.pat, k);
    int rc;
    while ((rc = uln_nap(n->ep, peer, &m, sizeof m, 0, ULN_INLINE | ULN_SILENT)) == -EAGAIN)
        uln_cq_wait(n->cq, 0);
    CHECK_EQ(rc, 0);
}

static void put_blob(int fd, const void *b, size_t n)
{
    if (write(fd, b, n) != (ssize_t)n) exit(2);
}
static void get_blob(int fd, void *b, size_t n)
{
    if (read(fd, b, n) != (ssize_t)n) exit(2);
}

static void swap_hello(struct node *n, int to, int from, struct hello *other)
{
    struct hello h = {.key = uln_mr_key(n->mr)};
    size_t len = sizeof h.addr;
    CHECK_EQ(uln_addr(n->ctx, h.addr, &len), 0);
    h.addr_len = (uint32_t)len;
    put_blob(to, &h, sizeof h);
    get_blob(from, other, sizeof *other);
}

#if defined(__SANITIZE_ADDRESS__)
#define CYCLES_DEFAULT 300u /* each life costs 10-50x more under ASan */
#else
#define CYCLES_DEFAULT 10000u
#endif

static uint32_t cycles(void)
{
    const char *c = getenv("ULNTEST_CYCLES");
    return c ? (uint32_t)strtoul(c, NULL, 10) : CYCLES_DEFAULT;
}

/* ---- B: talks to whatever life of A's endpoint 0 is open ------------------------ */

static int peer_main(int in, int out)
{
    struct node b = {0};
    node_open(&b);
    struct hello a;
    swap_hello(&b, out, in, &a);
    int pa;
    CHECK_EQ(uln_peer_insert(b.ctx, a.addr, a.addr_len, 0, &pa), 0);
    uint32_t n = cycles();
    for (uint32_t k = 0; k < n; k++) {
        expect(&b, M_OPEN, k);
        send(&b, pa, M_REPLY, k);
        /* PUT 48 bytes into A's memory, GET them back. */
        uint8_t src[48], back[48] = {0};
        pattern(src, sizeof src, k ^ 0x5a5a);
        uint64_t off = (uint64_t)(k % 64) * 64;
        struct uln_cqe e;
        CHECK_EQ(uln_put(b.ep, pa, src, sizeof src, a.key, off, 1, 0), 0);
        CHECK_EQ(wait_op(&b, ULN_OP_PUT, &e, NULL, 20000), 0);
        CHECK_EQ(e.status, 0);
        CHECK_EQ(uln_get(b.ep, pa, back, sizeof back, a.key, off, 2, 0), 0);
        CHECK_EQ(wait_op(&b, ULN_OP_GET, &e, NULL, 20000), 0);
        CHECK_EQ(e.status, 0);
        CHECK(!memcmp(src, back, sizeof src));
        send(&b, pa, M_DONE, k);
        if (failed) break;
    }
    /* A late message: sent to a life that closes before taking it. */
    expect(&b, M_OPEN, n);
    send(&b, pa, M_REPLY, n);
    char go;
    get_blob(in, &go, 1);
    send(&b, pa, M_STALE, n);
    uint8_t src[64];
    pattern(src, sizeof src, 3);
    if (ring_mode()) /* placed by the target: waits for the closed life's ACK */
        CHECK_EQ(uln_put(b.ep, pa, src, sizeof src, a.key, 8192, 3, 0), 0);
    put_blob(out, "s", 1);
    expect(&b, M_OPEN, n + 1); /* from A's next life */
    send(&b, pa, M_FRESH, n + 1);
    if (ring_mode()) {
        struct uln_cqe e;
        if (!late_put_seen) wait_op(&b, -1, &e, NULL, 20000);
        CHECK(late_put_seen);
        CHECK_EQ(late_put.status, -ECONNRESET);
    }
    expect(&b, M_BYE, n + 1);
    uln_close(b.ctx);
    return summary();
}

/* ---- A: the endpoint that lives again and again --------------------------------- */

static uint64_t stale_count(struct node *a)
{
    struct uln_counters c;
    CHECK_EQ(uln_counters_get(a->ctx, &c), 0);
    return c.refused_stale_ep + (udp_mode() ? c.stale : 0);
}

static void test_cycles(int to, int from)
{
    struct node a = {0};
    node_open(&a);
    CHECK_EQ(uln_ep_close(a.ep), 0);
    struct hello b;
    swap_hello(&a, to, from, &b);
    int pb;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &pb), 0);
    uint32_t n = cycles();
    for (uint32_t k = 0; k < n; k++) {
        CHECK_EQ(uln_ep_open(a.ctx, a.cq, a.cq, &a.ep), 0);
        CHECK_EQ(uln_ep_index(a.ep), 0);
        send(&a, pb, M_OPEN, k);
        expect(&a, M_REPLY, k);
        expect(&a, M_DONE, k);
        uint8_t want[48];
        pattern(want, sizeof want, k ^ 0x5a5a);
        CHECK(!memcmp(a.mem + (k % 64) * 64, want, sizeof want));
        CHECK_EQ(uln_ep_close(a.ep), 0);
        CHECK_EQ(uln_ep_close(a.ep), -EBADF);
        if (failed) break;
    }
    CHECK_EQ(uln_ep_open(a.ctx, a.cq, a.cq, &a.ep), 0);
    send(&a, pb, M_OPEN, n);
    expect(&a, M_REPLY, n);
    /* B sends to this life while it takes nothing; then it closes. */
    uint64_t before = stale_count(&a);
    put_blob(to, "g", 1);
    char s;
    get_blob(from, &s, 1);
    if (udp_mode()) usleep(100 * 1000); /* B's packets reach this life's socket */
    CHECK_EQ(uln_ep_close(a.ep), 0);
    CHECK_EQ(uln_ep_open(a.ctx, a.cq, a.cq, &a.ep), 0);
    CHECK_EQ(uln_ep_index(a.ep), 0);
    send(&a, pb, M_OPEN, n + 1);
    expect(&a, M_FRESH, n + 1); /* and not M_STALE */
    CHECK(stale_count(&a) > before);
    send(&a, pb, M_BYE, n + 1);
    usleep(100 * 1000);
    uln_close(a.ctx);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "peer")) return peer_main(atoi(argv[2]), atoi(argv[3]));
    int p2c[2], c2p[2];
    if (pipe(p2c) || pipe(c2p)) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        char in[16], out[16];
        snprintf(in, sizeof in, "%d", p2c[0]);
        snprintf(out, sizeof out, "%d", c2p[1]);
        execl("/proc/self/exe", "ep_cycles", "peer", in, out, (char *)NULL);
        _exit(127);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    test_cycles(p2c[1], c2p[0]);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t);
    printf("%u lives in %.2f s\n", cycles(),
           (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9);
    return summary();
}
