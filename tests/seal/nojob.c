/*
 * nojob.c - ULN_SECURE between contexts with no job (ULN_BOOT=none): two
 * processes that swap addresses (uln_addr, which then carries the sealing
 * state) and insert each other, over udp.
 *
 * A (the parent) and B (this program again, "peer") each insert the other
 * before either sends: A NAPs B, PUTs 256 KiB of a pattern into B's region
 * and NAPs "done"; B checks the NAPs and every byte of its region, and
 * answers. Neither refuses a datagram (refused_auth 0: each first datagram
 * of a peer opened, its pair made on arrival). Then A opens contexts that do
 * not fit - ULN_SECURE=off, the other sealed mode, a job secret - and each
 * insert between them and A fails with -EPROTO, either way round.
 * The mode is ULN_SECURE's (the ctest cases: auth, encrypt).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "../peers/peer_proc.h"

#define SIZE (256u << 10)

struct node {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    uint8_t *mem;
};

static int node_open(struct node *n)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    int rc = uln_open(&cfg, &n->ctx);
    if (rc) return rc;
    CHECK_EQ(uln_cq_open(n->ctx, 1024, &n->cq), 0);
    CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep), 0);
    CHECK_EQ(uln_mem_alloc(n->ctx, SIZE, (void **)&n->mem), 0);
    CHECK_EQ(uln_mr_reg(n->ctx, n->mem, SIZE, ULN_ACCESS_REMOTE_WRITE, &n->mr), 0);
    return 0;
}

static void node_close(struct node *n)
{
    CHECK_EQ(uln_mr_dereg(n->mr), 0);
    CHECK_EQ(uln_mem_free(n->ctx, n->mem), 0);
    CHECK_EQ(uln_ep_close(n->ep), 0);
    CHECK_EQ(uln_cq_close(n->cq), 0);
    CHECK_EQ(uln_close(n->ctx), 0);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The next completion of op (sends complete on the CQ too), status 0. */
static struct uln_cqe take(struct node *n, int op)
{
    double end = now() + 30;
    for (;;) {
        struct uln_cqe e;
        int k = uln_cq_poll(n->cq, &e, 1);
        CHECK(k >= 0);
        if (k == 1) {
            CHECK_EQ(e.status, 0);
            if (e.op == op) return e;
            if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(n->cq, &e);
            continue;
        }
        if (now() > end) {
            fprintf(stderr, "nojob: no completion of op %d in 30 s\n", op);
            exit(1); /* a dead peer: an error, not a hang */
        }
        uln_cq_wait(n->cq, 20);
    }
}

static void expect_nap(struct node *n, const char *want)
{
    struct uln_cqe e = take(n, ULN_OP_NAP_RECV);
    CHECK_EQ(e.len, strlen(want) + 1);
    CHECK(!memcmp(e.data, want, e.len));
    uln_cqe_release(n->cq, &e);
}

static void nap(struct node *n, int peer, const char *s)
{
    CHECK_EQ(uln_nap(n->ep, peer, s, strlen(s) + 1, 7, 0), 0);
    take(n, ULN_OP_NAP);
}

struct hello {
    uint8_t addr[ULN_ADDR_MAX];
    uint32_t addr_len;
    uint64_t key;
};

static void hello_make(struct node *n, struct hello *h)
{
    memset(h, 0, sizeof *h);
    size_t len = sizeof h->addr;
    CHECK_EQ(uln_addr(n->ctx, h->addr, &len), 0);
    h->addr_len = (uint32_t)len;
    h->key = uln_mr_key(n->mr);
}

static void send_hello(int fd, struct node *n)
{
    struct hello h;
    hello_make(n, &h);
    if (write(fd, &h, sizeof h) != (ssize_t)sizeof h) exit(2);
}

static void read_hello(int fd, struct hello *h)
{
    if (read(fd, h, sizeof *h) != (ssize_t)sizeof *h) exit(2);
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131u + (i >> 9));
}

static uint64_t refused(struct node *n)
{
    struct uln_counters c;
    CHECK_EQ(uln_counters_get(n->ctx, &c), 0);
    return c.refused_auth;
}

static int peer_main(int in, int out)
{
    struct node b;
    CHECK_EQ(node_open(&b), 0);
    memset(b.mem, 0, SIZE);
    struct hello a;
    read_hello(in, &a);
    int pa;
    CHECK_EQ(uln_peer_insert(b.ctx, a.addr, a.addr_len, 0, &pa), 0);
    send_hello(out, &b); /* A sends only now: we know it */
    expect_nap(&b, "sealed, from A");
    expect_nap(&b, "done");
    for (size_t i = 0; i < SIZE; i++)
        CHECK_EQ(b.mem[i], pattern(i));
    nap(&b, (int)pa, "B has every byte");
    CHECK_EQ(refused(&b), 0);
    expect_nap(&b, "bye"); /* A has our answer: we may go */
    node_close(&b);
    return summary();
}

/* A context of another mode or secret: its address and A's refused either
 * way round. */
static void mismatch(struct node *a, const char *mode, const char *secret_file)
{
    char *was_mode = getenv("ULN_SECURE") ? strdup(getenv("ULN_SECURE")) : NULL;
    setenv("ULN_SECURE", mode, 1);
    if (secret_file) setenv("ULN_SECRET_FILE", secret_file, 1);
    struct node c;
    CHECK_EQ(node_open(&c), 0);
    if (was_mode) setenv("ULN_SECURE", was_mode, 1);
    unsetenv("ULN_SECRET_FILE");
    free(was_mode);
    struct hello ha, hc;
    hello_make(a, &ha);
    hello_make(&c, &hc);
    int p;
    fprintf(stderr, "nojob: ULN_SECURE=%s%s: refused as ulnet says:\n", mode,
            secret_file ? " with a secret" : "");
    CHECK_EQ(uln_peer_insert(a->ctx, hc.addr, hc.addr_len, 0, &p), -EPROTO);
    CHECK_EQ(uln_peer_insert(c.ctx, ha.addr, ha.addr_len, 0, &p), -EPROTO);
    node_close(&c);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "peer")) return peer_main(atoi(argv[2]), atoi(argv[3]));
    const char *mode = getenv("ULN_SECURE");
    CHECK(mode && (!strcmp(mode, "auth") || !strcmp(mode, "encrypt")));
    struct node a;
    CHECK_EQ(node_open(&a), 0);
    int to, from;
    pid_t pid = peer_proc_start(argv[0], "peer", 0, &to, &from);
    send_hello(to, &a);
    struct hello b;
    read_hello(from, &b);
    int pb;
    CHECK_EQ(uln_peer_insert(a.ctx, b.addr, b.addr_len, 0, &pb), 0);

    nap(&a, (int)pb, "sealed, from A");
    uint8_t *src = malloc(SIZE);
    CHECK(src != NULL);
    for (size_t i = 0; i < SIZE; i++)
        src[i] = pattern(i);
    CHECK_EQ(uln_put(a.ep, (int)pb, src, SIZE, b.key, 0, 1, 0), 0);
    take(&a, ULN_OP_PUT); /* visible at B */
    nap(&a, (int)pb, "done");
    expect_nap(&a, "B has every byte");
    nap(&a, (int)pb, "bye");
    CHECK_EQ(peer_proc_reap(pid), 0);
    CHECK_EQ(refused(&a), 0);
    free(src);

    mismatch(&a, "off", NULL);
    mismatch(&a, strcmp(mode, "auth") ? "auth" : "encrypt", NULL);
    char secret[] = "uln-nojob-secret-XXXXXX"; /* mkstemp: 0600, ours; in the test's directory */
    int fd = mkstemp(secret);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "a job secret of more than sixteen bytes", 39), 39);
    close(fd);
    mismatch(&a, mode, secret);
    unlink(secret);
    node_close(&a);
    printf("nojob (%s): A and B sealed, every byte; off, the other mode and a secret refused\n",
           mode);
    return summary();
}
