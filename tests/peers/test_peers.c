/*
 * test_peers.c - contexts with no job (ULN_BOOT=none): unrelated processes
 * that find each other by address (uln_addr, uln_peer_insert), as libfabric
 * clients and client-server programs do.
 *
 * The parent is process A; it starts process B (this program again, "peer")
 * with no launcher variable at all, and the two swap addresses over a pipe
 * pair. The transport is whatever the environment says (the ctest cases run
 * shm, shm through the rings, and udp; peers.hosts* start B on another
 * namespace host, so A reaches it over udp). Every byte is checked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "peer_proc.h"

struct node {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep[2];
    struct uln_mr *mr;
    uint8_t *mem;
};

static void node_open(struct node *n, int eps)
{
    n->ctx = peer_ctx_open();
    CHECK_EQ(uln_cq_open(n->ctx, 1024, &n->cq), 0);
    for (int i = 0; i < eps; i++)
        CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep[i]), 0);
    CHECK_EQ(uln_mem_alloc(n->ctx, 1 << 20, (void **)&n->mem), 0);
    CHECK_EQ(uln_mr_reg(n->ctx, n->mem, 1 << 20, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                        &n->mr),
             0);
}

/* Another context of this process whose peers need it to progress while we
 * wait (over udp a handshake needs both sides): uln_cq_wait with timeout 0
 * drives it without taking its entries. */
static struct node *also;

/* Wait for one completion of op (others are released and ignored). */
static int wait_op(struct node *n, int op, struct uln_cqe *out, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct uln_cqe e;
        if (also && also != n) uln_cq_wait(also->cq, 0);
        int k = uln_cq_poll(n->cq, &e, 1);
        if (k == 1) {
            if (e.op == op) {
                *out = e;
                return 0;
            }
            if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(n->cq, &e);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            return -ETIMEDOUT;
    }
}

/* Receive a NAP and check it says `want`; release it. Returns its source. */
static int expect_nap(struct node *n, const char *want, int ep_index)
{
    struct uln_cqe e = {0};
    CHECK_EQ(wait_op(n, ULN_OP_NAP_RECV, &e, 20000), 0);
    CHECK_EQ(e.len, strlen(want) + 1);
    CHECK_EQ(e.ep, ep_index);
    CHECK(e.data && !memcmp(e.data, want, strlen(want) + 1));
    if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(n->cq, &e);
    return e.peer;
}

/* The same, sleeping on uln_cq_fd between polls (as an event loop would);
 * returns how often it slept. */
static int expect_nap_fd(struct node *n, const char *want)
{
    int fd = uln_cq_fd(n->cq), slept = 0;
    CHECK(fd >= 0);
    for (int i = 0; i < 100000; i++) {
        struct uln_cqe e;
        int k = uln_cq_poll(n->cq, &e, 1);
        if (k == 1 && e.op == ULN_OP_NAP_RECV) {
            CHECK(!memcmp(e.data, want, strlen(want) + 1));
            uln_cqe_release(n->cq, &e);
            return slept;
        }
        int ms;
        int rc = uln_cq_arm(n->cq, &ms);
        CHECK(rc == 0 || rc == -EAGAIN);
        if (rc == 0) {
            CHECK(ms >= 0 && ms <= 100);
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            poll(&pf, 1, ms);
            slept++;
        }
    }
    CHECK(!"no NAP while sleeping on the descriptor");
    return slept;
}

static void send_nap(struct node *n, int ep, int peer, const char *s)
{
    struct uln_cqe e;
    CHECK_EQ(uln_nap(n->ep[ep], peer, s, strlen(s) + 1, 7, ULN_INLINE), 0);
    CHECK_EQ(wait_op(n, ULN_OP_NAP, &e, 20000), 0);
    CHECK_EQ(e.status, 0);
}

/* A's and B's exchange: lengths then bytes, over pipes. */
static void put_blob(int fd, const void *b, size_t n)
{
    uint32_t len = (uint32_t)n;
    if (write(fd, &len, 4) != 4 || write(fd, b, n) != (ssize_t)n) exit(2);
}
static size_t get_blob(int fd, void *b, size_t room)
{
    uint32_t len;
    if (read(fd, &len, 4) != 4 || len > room || read(fd, b, len) != (ssize_t)len) exit(2);
    return len;
}

struct hello {
    uint8_t addr[ULN_ADDR_MAX];
    uint32_t addr_len;
    uint64_t key;
};

static void say_hello(int fd, struct node *n)
{
    struct hello h = {.key = uln_mr_key(n->mr)};
    size_t len = sizeof h.addr;
    CHECK_EQ(uln_addr(n->ctx, h.addr, &len), 0);
    h.addr_len = (uint32_t)len;
    put_blob(fd, &h, sizeof h);
}

/* ---- B: the other process --------------------------------------------------- */

static int peer_main(int in, int out)
{
    struct node b = {0};
    node_open(&b, 1);
    say_hello(out, &b);
    struct hello a;
    get_blob(in, &a, sizeof a);
    /* B inserts A's endpoint 1 and speaks first, before A has inserted B:
     * A must learn B from it and deliver it, not lose it. */
    int pa1, pa0;
    CHECK_EQ(uln_peer_insert(b.ctx, a.addr, a.addr_len, 1, &pa1), 0);
    CHECK_EQ(uln_peer_insert(b.ctx, a.addr, a.addr_len, 0, &pa0), 0);
    CHECK(pa0 != pa1);
    send_nap(&b, 0, pa1, "first, before A knew B");
    expect_nap(&b, "A ep0 to B", 0);
    /* Echo what A PUT into our memory back to its endpoint 0, then GET
     * from A's memory and NAP that back. */
    expect_nap(&b, "put done", 0);
    send_nap(&b, 0, pa0, (const char *)b.mem);
    struct uln_cqe e;
    char got[64] = {0};
    CHECK_EQ(uln_get(b.ep[0], pa0, got, 32, a.key, 4096, 9, 0), 0);
    CHECK_EQ(wait_op(&b, ULN_OP_GET, &e, 20000), 0);
    CHECK_EQ(e.status, 0);
    send_nap(&b, 0, pa0, got);
    /* A removes and re-inserts us: traffic goes on. */
    expect_nap(&b, "after re-insert", 0);
    usleep(300 * 1000); /* A is asleep on its descriptor by now */
    send_nap(&b, 0, pa0, "B still here");
    expect_nap(&b, "bye", 0);
    uln_close(b.ctx);
    return summary();
}

/* B's next life: the same program started again, a new context key. */
static int peer2_main(int in, int out)
{
    struct node b = {0};
    node_open(&b, 1);
    say_hello(out, &b);
    struct hello a;
    get_blob(in, &a, sizeof a);
    int pa0;
    CHECK_EQ(uln_peer_insert(b.ctx, a.addr, a.addr_len, 0, &pa0), 0);
    send_nap(&b, 0, pa0, "B's next life");
    expect_nap(&b, "bye again", 0);
    uln_close(b.ctx);
    return summary();
}

/* ---- A -------------------------------------------------------------------------- */

static void test_two_processes(void)
{
    struct node a = {0};
    node_open(&a, 2);
    int to, from;
    pid_t pid = peer_proc_start("test_peers", "peer", 0, &to, &from);
    say_hello(to, &a);
    struct hello b;
    get_blob(from, &b, sizeof b);
    /* B speaks first: its NAP arrives although we never inserted B (as MPI
     * libraries add peers lazily, on first send), from the id that inserting
     * B's address gives afterwards. */
    int first = expect_nap(&a, "first, before A knew B", 1);
    int pb;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &pb), 0);
    CHECK_EQ(pb, first);
    if (getenv("ULNTEST_PEER_EXEC")) { /* B on another host: over udp */
        struct uln_info info;
        CHECK_EQ(uln_query(a.ctx, &info), 0);
        CHECK(info.udp_peers >= 1);
    }
    int again;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &again), 0);
    CHECK_EQ(again, pb); /* the same id, counted twice */
    CHECK_EQ(uln_peer_remove(a.ctx, again), 0);
    send_nap(&a, 0, pb, "A ep0 to B");
    /* PUT into B's memory; B echoes it. */
    struct uln_cqe e;
    const char *msg = "written by A's PUT";
    CHECK_EQ(uln_put(a.ep[0], pb, msg, strlen(msg) + 1, b.key, 0, 3, 0), 0);
    CHECK_EQ(wait_op(&a, ULN_OP_PUT, &e, 20000), 0);
    CHECK_EQ(e.status, 0);
    strcpy((char *)a.mem + 4096, "read by B's GET");
    send_nap(&a, 0, pb, "put done");
    expect_nap(&a, msg, 0);
    expect_nap(&a, "read by B's GET", 0);
    /* A bad key is refused, and counted. */
    CHECK_EQ(uln_put(a.ep[0], pb, msg, 4, b.key ^ 0x10, 0, 4, 0), 0);
    CHECK_EQ(wait_op(&a, ULN_OP_PUT, &e, 20000), 0);
    CHECK_EQ(e.status, -ENOKEY);
    /* Remove, post fails, insert again: the same id, traffic goes on. */
    CHECK_EQ(uln_peer_remove(a.ctx, pb), 0);
    CHECK_EQ(uln_nap(a.ep[0], pb, "x", 2, 0, ULN_INLINE), -EINVAL);
    CHECK_EQ(uln_peer_remove(a.ctx, pb), -EINVAL);
    int pb2;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &pb2), 0);
    CHECK_EQ(pb2, pb);
    send_nap(&a, 0, pb, "after re-insert");
    CHECK(expect_nap_fd(&a, "B still here") > 0); /* it slept, and was woken */
    send_nap(&a, 0, pb, "bye");
    CHECK_EQ(peer_proc_reap(pid), 0);
    if (!getenv("ULNTEST_RESTART_FIRST")) {
        /* B is gone: its address is stale. An operation to it fails, it does not
         * hang (shm: the process is gone; udp: silent past ULN_UDP_DEAD_MS). */
        CHECK_EQ(uln_nap(a.ep[0], pb, "late", 5, 0, ULN_INLINE), 0);
        int st = 0;
        for (int i = 0; i < 3 && st == 0; i++) {
            CHECK_EQ(wait_op(&a, ULN_OP_NAP, &e, 20000), 0);
            st = e.status;
            if (!st) uln_nap(a.ep[0], pb, "late", 5, 0, ULN_INLINE);
        }
        /* A NAP may complete on leaving, and over shm a PUT to mapped memory
         * asks whether its owner lives only every 1024th time: within a few
         * thousand PUTs one must fail. */
        st = 0;
        for (int i = 0; i < 5000 && st == 0; i++) {
            CHECK_EQ(uln_put(a.ep[0], pb, msg, 4, b.key, 0, 5, 0), 0);
            CHECK_EQ(wait_op(&a, ULN_OP_PUT, &e, 30000), 0);
            st = e.status;
        }
        CHECK(st == -ECONNRESET || st == -ENOKEY); /* gone, or closed cleanly first */
    }
    close(to);
    close(from);

    /* B starts again (with ULN_UDP_PORT set, on the same ports): a new key,
     * so a new peer; the old id stays dead. */
    pid = peer_proc_start("test_peers", "peer2", 0, &to, &from);
    say_hello(to, &a);
    get_blob(from, &b, sizeof b);
    int pnew;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &pnew), 0);
    CHECK(pnew != pb);
    expect_nap(&a, "B's next life", 0);
    send_nap(&a, 0, pnew, "bye again");
    CHECK_EQ(uln_put(a.ep[0], pb, msg, 4, b.key, 0, 6, 0), 0);
    CHECK_EQ(wait_op(&a, ULN_OP_PUT, &e, 30000), 0);
    CHECK(e.status == -ECONNRESET || e.status == -ENOKEY);
    CHECK_EQ(peer_proc_reap(pid), 0);
    close(to);
    close(from);
    uln_close(a.ctx);
}

/* Two contexts in one process talk to each other (and to themselves). */
static void test_two_contexts(void)
{
    struct node x = {0}, y = {0};
    node_open(&x, 1);
    node_open(&y, 1);
    uint8_t ax[ULN_ADDR_MAX], ay[ULN_ADDR_MAX];
    size_t lx = sizeof ax, ly = sizeof ay, small = 3;
    CHECK_EQ(uln_addr(x.ctx, ax, &lx), 0);
    CHECK_EQ(uln_addr(y.ctx, ay, &ly), 0);
    CHECK_EQ(uln_addr(x.ctx, ax, &small), -ENOSPC);
    CHECK_EQ(small, lx);
    int py, px, self;
    CHECK_EQ(uln_peer_insert(x.ctx, ay, ly, 0, &py), 0);
    CHECK_EQ(uln_peer_insert(y.ctx, ax, lx, 0, &px), 0);
    CHECK_EQ(uln_peer_insert(x.ctx, ax, lx, 0, &self), 0);
    CHECK(py != self && py > 0 && self > 0);
    also = &y; /* x's waits drive y; y's drive x */
    send_nap(&x, 0, py, "x to y");
    expect_nap(&y, "x to y", 0);
    also = &x;
    send_nap(&y, 0, px, "y to x");
    also = &y;
    expect_nap(&x, "y to x", 0);
    send_nap(&x, 0, self, "x to itself");
    expect_nap(&x, "x to itself", 0);
    struct uln_info info;
    CHECK_EQ(uln_query(x.ctx, &info), 0);
    CHECK(!strcmp(info.bootstrap, "none"));
    CHECK_EQ(uln_barrier(x.ctx, 0), -EOPNOTSUPP);
    also = NULL;
    uln_close(y.ctx);
    /* Close and open again, many times: each a new life with a new key. */
    for (int i = 0; i < 20; i++) {
        struct node z = {0};
        node_open(&z, 1);
        uint8_t az[ULN_ADDR_MAX];
        size_t lz = sizeof az;
        CHECK_EQ(uln_addr(z.ctx, az, &lz), 0);
        CHECK(memcmp(az, ay, lz) != 0);
        uln_close(z.ctx);
    }
    uln_close(x.ctx);
}

/* The short form (a room too small for the full one): the same peer as the
 * full form, the same text, and malformed ones refused. */
static void test_short_form(struct node *x, const uint8_t *a, size_t len)
{
    uint8_t s[ULN_ADDR_MAX], bad[ULN_ADDR_MAX];
    size_t slen = ULN_ADDR_SHORT - 1;
    CHECK_EQ(uln_addr(x->ctx, s, &slen), -ENOSPC); /* no form fits */
    CHECK_EQ(slen, len);
    slen = ULN_ADDR_SHORT;
    CHECK_EQ(uln_addr(x->ctx, s, &slen), 0); /* this host's shm and IPv4 udp: it exists */
    CHECK_EQ(slen, (size_t)ULN_ADDR_SHORT);
    CHECK(slen < len);
    char ts[256], tl[256];
    CHECK(uln_addr_str(s, slen, ts, sizeof ts) > 0);
    CHECK(uln_addr_str(a, len, tl, sizeof tl) > 0);
    CHECK_EQ(strcmp(ts, tl), 0);
    int ps, pl;
    CHECK_EQ(uln_peer_insert(x->ctx, s, slen, 1, &ps), 0);
    CHECK_EQ(uln_peer_insert(x->ctx, a, len, 1, &pl), 0);
    CHECK_EQ(ps, pl);
    CHECK_EQ(uln_peer_remove(x->ctx, ps), 0);
    CHECK_EQ(uln_peer_remove(x->ctx, pl), 0);
    CHECK_EQ(uln_peer_remove(x->ctx, pl), -EINVAL); /* two inserts, two removes */
    int p;
    CHECK_EQ(uln_peer_insert(x->ctx, s, slen - 1, 0, &p), -EADDRNOTAVAIL); /* cut short */
    memcpy(bad, s, slen);
    memset(bad + 4, 0, 8); /* key 0 */
    CHECK_EQ(uln_peer_insert(x->ctx, bad, slen, 0, &p), -EADDRNOTAVAIL);
    memcpy(bad, s, slen);
    bad[1] = bad[2] = bad[3] = 0; /* pid 0 */
    CHECK_EQ(uln_peer_insert(x->ctx, bad, slen, 0, &p), -EADDRNOTAVAIL);
    memcpy(bad, s, slen);
    bad[20] = 0; /* a udp port count of 0 */
    CHECK_EQ(uln_peer_insert(x->ctx, bad, slen, 0, &p), -EADDRNOTAVAIL);
    CHECK_EQ(uln_addr_str(bad, slen, ts, sizeof ts), -EADDRNOTAVAIL);
}

/* Malformed and forged addresses; many inserts. */
static void test_addresses(void)
{
    struct node x = {0};
    node_open(&x, 1);
    uint8_t a[ULN_ADDR_MAX];
    size_t len = sizeof a;
    CHECK_EQ(uln_addr(x.ctx, a, &len), 0);
    int p;
    uint8_t bad[ULN_ADDR_MAX];
    memcpy(bad, a, len);
    bad[0] ^= 1; /* magic */
    CHECK_EQ(uln_peer_insert(x.ctx, bad, len, 0, &p), -EADDRNOTAVAIL);
    CHECK_EQ(uln_peer_insert(x.ctx, a, len - 1, 0, &p), -EADDRNOTAVAIL); /* cut short */
    memcpy(bad, a, len);
    bad[25] = 200; /* a part longer than the address */
    CHECK_EQ(uln_peer_insert(x.ctx, bad, len, 0, &p), -EADDRNOTAVAIL);
    memset(bad + 8, 0, 8); /* key 0 */
    memcpy(bad, a, 8);
    CHECK_EQ(uln_peer_insert(x.ctx, bad, len, 0, &p), -EADDRNOTAVAIL);
    CHECK_EQ(uln_peer_insert(x.ctx, a, len, 64, &p), -EINVAL);
    test_short_form(&x, a, len);
    /* A forged key with our own pid and inbox: the inbox says otherwise, so
     * nothing is sent and the refusal is counted. */
    memcpy(bad, a, len);
    bad[9] ^= 0x40;
    int forged;
    CHECK_EQ(uln_peer_insert(x.ctx, bad, len, 0, &forged), 0);
    struct uln_cqe e;
    if (getenv("ULN_TRANSPORT") == NULL) { /* over udp it would only time out */
        CHECK_EQ(uln_nap(x.ep[0], forged, "no", 3, 0, ULN_INLINE), 0);
        CHECK_EQ(wait_op(&x, ULN_OP_NAP, &e, 20000), 0);
        CHECK_EQ(e.status, -EPERM);
    }
    CHECK_EQ(uln_peer_remove(x.ctx, forged), 0);
    /* 1000 peers (addresses of lives that never were): distinct ids, all
     * removable. */
    static int ids[1000];
    int ok = 0;
    for (int i = 0; i < 1000; i++) {
        memcpy(bad, a, len);
        uint64_t k = 0x1000 + (uint64_t)i;
        memcpy(bad + 8, &k, 8);
        ok += uln_peer_insert(x.ctx, bad, len, 0, &ids[i]) == 0;
    }
    CHECK_EQ(ok, 1000);
    int distinct = 1;
    for (int i = 1; i < 1000; i++)
        distinct &= ids[i] != ids[i - 1];
    CHECK(distinct);
    int removed = 0;
    for (int i = 0; i < 1000; i++)
        removed += uln_peer_remove(x.ctx, ids[i]) == 0;
    CHECK_EQ(removed, 1000);
    uln_close(x.ctx);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "peer")) return peer_main(atoi(argv[2]), atoi(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "peer2")) return peer2_main(atoi(argv[2]), atoi(argv[3]));
    signal(SIGPIPE, SIG_IGN);
    /* ULNTEST_RESTART_FIRST: B's next life comes on B's ports (ULN_UDP_PORT)
     * before B is found dead, so it is the new life that ends the old. */
    if (getenv("ULNTEST_RESTART_FIRST")) {
        char port[16];
        snprintf(port, sizeof port, "%d", 20000 + getpid() % 20000);
        setenv("ULN_UDP_PORT", port, 1);
    }
    /* No launcher: the test must also hold when one's variables are around. */
    setenv("PMIX_RANK", "0", 1);
    test_addresses();
    test_two_contexts();
    test_two_processes();
    return summary();
}
