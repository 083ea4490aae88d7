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
 * Then a first contact: C (this program, "intro") inserts A by A's sealed
 * short address (ULN_ADDR_SHORT_SEALED: the public key in 60 bytes) and NAPs
 * it; A never inserted C, so it learns C from that first datagram's
 * introduction (link_seal.h), and answers it. Before C starts, a forged
 * introduction reaches A's port (C's would-be public key, a made-up tag):
 * refused, counted, nothing delivered, and C's real one still gets in.
 * The mode is ULN_SECURE's (the ctest cases: auth, encrypt).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "../peers/peer_proc.h"

#define SIZE (256u << 10)

static const char *prog; /* argv[0] */

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

/* C: inserts A (whose short sealed address it reads) and NAPs it first; A
 * knew nothing of C. */
static int intro_main(int in, int out)
{
    struct node c;
    CHECK_EQ(node_open(&c), 0);
    struct hello a;
    read_hello(in, &a);
    CHECK_EQ(a.addr_len, (uint32_t)ULN_ADDR_SHORT_SEALED);
    int pa;
    CHECK_EQ(uln_peer_insert(c.ctx, a.addr, a.addr_len, 0, &pa), 0);
    nap(&c, pa, "introduced");
    expect_nap(&c, "welcome");
    CHECK_EQ(refused(&c), 0);
    nap(&c, pa, "bye");
    uint8_t done = 1;
    if (write(out, &done, 1) != 1) exit(2);
    node_close(&c);
    return summary();
}

/* A datagram to the udp port in A's address text ("udp 1.2.3.4:5+n") that
 * claims an introduction: a valid sealing state (the one in bytes pub, 33 of
 * them) and endpoint 0, then a trailer whose counter has the introduction's
 * bit, whose length is right and whose tag is made up. */
static void send_forged_intro(struct node *a, const uint8_t *pub)
{
    uint8_t ad[ULN_ADDR_MAX];
    size_t alen = sizeof ad;
    char text[256], ip[64];
    unsigned port;
    CHECK_EQ(uln_addr(a->ctx, ad, &alen), 0);
    CHECK(uln_addr_str(ad, alen, text, sizeof text) > 0);
    const char *u = strstr(text, "udp ");
    CHECK(u && sscanf(u, "udp %63[0-9.]:%u", ip, &port) == 2);
    uint8_t d[64 + 35 + 26] = {0};
    memset(d, 0x5a, 64);         /* what would be a header and payload */
    memcpy(d + 64, pub, 33);     /* the state, as an introduction has it */
    d[64 + 33] = d[64 + 34] = 0; /* endpoint 0 */
    uint8_t *t = d + 64 + 35;
    t[0] = 1, t[7] = 0x80;              /* counter 1, introduced */
    t[8] = (uint8_t)sizeof d, t[9] = 0; /* the whole datagram's length */
    memset(t + 10, 0xa5, 16);           /* a tag no key gives */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    CHECK_EQ(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(fd >= 0);
    CHECK_EQ(sendto(fd, d, sizeof d, 0, (struct sockaddr *)&sa, sizeof sa), (ssize_t)sizeof d);
    close(fd);
}

/* A learns C from its introduction; a forged one before it is refused. */
static void first_contact(struct node *a)
{
    uint64_t was = refused(a);
    int to, from;
    struct hello h;
    hello_make(a, &h);
    /* the forged introduction carries A's own compact state (the short
     * address's last 33 bytes): well formed, so only the tag refuses it */
    h.addr_len = ULN_ADDR_SHORT_SEALED;
    size_t len = h.addr_len;
    CHECK_EQ(uln_addr(a->ctx, h.addr, &len), 0);
    CHECK_EQ(len, (size_t)ULN_ADDR_SHORT_SEALED);
    send_forged_intro(a, h.addr + ULN_ADDR_SHORT_SEALED - 33);
    pid_t pid = peer_proc_start(prog, "intro", 0, &to, &from);
    if (write(to, &h, sizeof h) != (ssize_t)sizeof h) exit(2);
    struct uln_cqe e = take(a, ULN_OP_NAP_RECV);
    CHECK_EQ(e.len, sizeof "introduced");
    CHECK(!memcmp(e.data, "introduced", e.len));
    int pc = e.peer;
    uln_cqe_release(a->cq, &e);
    /* the forged one came first on A's socket: refused and counted by now */
    CHECK_EQ(refused(a), was + 1);
    nap(a, pc, "welcome");
    expect_nap(a, "bye");
    uint8_t done;
    CHECK_EQ(read(from, &done, 1), 1);
    CHECK_EQ(peer_proc_reap(pid), 0);
    CHECK_EQ(refused(a), was + 1);
    fprintf(stderr,
            "nojob: a first contact introduced and answered; a forged introduction refused\n");
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
    prog = argv[0];
    if (argc == 4 && !strcmp(argv[1], "peer")) return peer_main(atoi(argv[2]), atoi(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "intro")) return intro_main(atoi(argv[2]), atoi(argv[3]));
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

    first_contact(&a);
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
    printf("nojob (%s): A and B sealed, every byte; C introduced, a forgery refused; off, the "
           "other mode and a secret refused\n",
           mode);
    return summary();
}
