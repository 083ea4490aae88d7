/*
 * byaddr.c - contexts with no job (ULN_BOOT=none, as the libfabric provider
 * opens them) across namespace hosts through their services
 * (byaddr_hosts.sh: ULN_TRANSPORT=svc, ULN_SERVICE=required).
 *
 * X (host 0) starts Y (host 1); they swap addresses and memory keys over
 * pipes. Y does not insert X at first: it learns X from X's first NAP, as
 * from a udp peer's hello, answers that peer id, and its later insert of
 * X's address gives the same id. X sends NAPS NAPs (each its sequence
 * number and a pattern; Y checks them in order, exactly once, intact),
 * PUTs a pattern into Y's memory and GETs it back (both sides check every
 * byte), and a PUT with a bad key is refused. The service's check that a
 * sender is the one its peer id names is svc_byaddr_check's (byaddr_check.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "../peers/peer_proc.h"

#define NAPS 20000u
#define MEM  (1u << 20)
#define BULK (256u << 10)

struct hello {
    uint8_t addr[ULN_ADDR_MAX];
    size_t len;
    uint64_t key;
};

struct node {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    uint8_t *mem;
    struct hello me;
};

static void node_open(struct node *n)
{
    n->ctx = peer_ctx_open();
    CHECK_EQ(uln_cq_open(n->ctx, 4096, &n->cq), 0);
    CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep), 0);
    CHECK_EQ(uln_mem_alloc(n->ctx, MEM, (void **)&n->mem), 0);
    CHECK_EQ(
        uln_mr_reg(n->ctx, n->mem, MEM, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &n->mr),
        0);
    n->me.len = sizeof n->me.addr;
    CHECK_EQ(uln_addr(n->ctx, n->me.addr, &n->me.len), 0);
    n->me.key = uln_mr_key(n->mr);
}

static void put_blob(int fd, const void *b, size_t len)
{
    CHECK_EQ(write(fd, b, len), (ssize_t)len);
}

static void get_blob(int fd, void *b, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (uint8_t *)b + got, len - got);
        if (r <= 0) exit(3);
        got += (size_t)r;
    }
}

static uint8_t pat(uint32_t seq, size_t i)
{
    return (uint8_t)(seq * 131u + i * 7u + 1u);
}

/* The next completion (NAP sends' are skipped unless op asks for them):
 * 0, or -ETIMEDOUT after ms without one. */
static int next(struct node *n, int op, struct uln_cqe *e, int ms)
{
    for (int waited = 0; waited < ms;) {
        while (uln_cq_poll(n->cq, e, 1) == 1) {
            if (e->op == op) return 0;
            if (e->op == ULN_OP_NAP_RECV) {
                fprintf(stderr, "unexpected NAP from peer %d\n", e->peer);
                exit(4);
            }
            CHECK_EQ(e->status, 0); /* a NAP sent: it left */
        }
        uln_cq_wait(n->cq, 100);
        waited += 100;
    }
    return -ETIMEDOUT;
}

static void nap(struct node *n, int peer, const void *b, size_t len)
{
    int rc;
    struct uln_cqe e;
    while ((rc = uln_nap(n->ep, peer, b, len, 0, ULN_INLINE)) == -EAGAIN)
        if (uln_cq_poll(n->cq, &e, 1) == 1) CHECK(e.op == ULN_OP_NAP && e.status == 0);
    CHECK_EQ(rc, 0);
}

/* ---- Y: learns X from its first NAP ----------------------------------------- */
static int y_main(int in, int out)
{
    struct node y;
    node_open(&y);
    struct hello x;
    get_blob(in, &x, sizeof x);
    put_blob(out, &y.me, sizeof y.me);
    struct uln_cqe e;
    int px = -1;
    for (uint32_t i = 0; i < NAPS; i++) {
        CHECK_EQ(next(&y, ULN_OP_NAP_RECV, &e, 20000), 0);
        uint32_t seq;
        CHECK(e.len >= 8 && e.len <= 64);
        memcpy(&seq, e.data, 4);
        CHECK_EQ(seq, i); /* in order, none lost, none twice */
        if (px < 0) px = e.peer;
        CHECK_EQ(e.peer, px);
        for (size_t k = 4; k < e.len; k++)
            if (((const uint8_t *)e.data)[k] != pat(seq, k)) CHECK(!"NAP payload intact");
        uln_cqe_release(y.cq, &e);
        if (i == 0) nap(&y, px, "learnt", 7); /* the learnt id reaches X */
    }
    int pi;
    CHECK_EQ(uln_peer_insert(y.ctx, x.addr, x.len, 0, &pi), 0);
    CHECK_EQ(pi, px); /* the same id: nothing between us lost or repeated */
    nap(&y, px, "naps ok", 8);
    /* X's PUT lands while we only wait on the pipe (the service places it). */
    char c;
    get_blob(in, &c, 1);
    int bad = 0;
    for (size_t k = 0; k < BULK; k++)
        bad += y.mem[k] != pat(7, k);
    put_blob(out, &bad, sizeof bad);
    get_blob(in, &c, 1);
    CHECK_EQ(next(&y, ULN_OP_NAP_RECV, &e, 20000), 0);
    CHECK_EQ(e.peer, px);
    CHECK(e.len == 4 && !memcmp(e.data, "end", 4));
    uln_cqe_release(y.cq, &e);
    CHECK_EQ(uln_close(y.ctx), 0);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "y")) return y_main(atoi(argv[2]), atoi(argv[3]));
    struct node x;
    node_open(&x);
    int to, from;
    pid_t ypid = peer_proc_start(argv[0], "y", 0, &to, &from);
    put_blob(to, &x.me, sizeof x.me);
    struct hello y;
    get_blob(from, &y, sizeof y);
    int py;
    CHECK_EQ(uln_peer_insert(x.ctx, y.addr, y.len, 0, &py), 0);
    uint8_t b[64];
    for (uint32_t i = 0; i < NAPS; i++) {
        size_t len = 8 + i % 57;
        memcpy(b, &i, 4);
        for (size_t k = 4; k < len; k++)
            b[k] = pat(i, k);
        nap(&x, py, b, len);
    }
    struct uln_cqe e;
    const char *want[] = {"learnt", "naps ok"};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(next(&x, ULN_OP_NAP_RECV, &e, 20000), 0);
        CHECK_EQ(e.peer, py);
        CHECK(e.len == strlen(want[k]) + 1 && !memcmp(e.data, want[k], e.len));
        uln_cqe_release(x.cq, &e);
    }
    /* PUT a pattern, GET it back; Y checks its memory too. */
    uint8_t *src = malloc(BULK), *dst = malloc(BULK);
    for (size_t k = 0; k < BULK; k++)
        src[k] = pat(7, k);
    memset(dst, 0, BULK);
    CHECK_EQ(uln_put(x.ep, py, src, BULK, y.key, 0, 1, 0), 0);
    CHECK_EQ(next(&x, ULN_OP_PUT, &e, 30000), 0);
    CHECK_EQ(e.status, 0);
    CHECK_EQ(uln_get(x.ep, py, dst, BULK, y.key, 0, 2, 0), 0);
    CHECK_EQ(next(&x, ULN_OP_GET, &e, 30000), 0);
    CHECK_EQ(e.status, 0);
    CHECK(!memcmp(src, dst, BULK));
    /* A bad key is refused, as on every path. */
    CHECK_EQ(uln_put(x.ep, py, src, 64, y.key ^ 0x10, 0, 3, 0), 0);
    CHECK_EQ(next(&x, ULN_OP_PUT, &e, 30000), 0);
    CHECK_EQ(e.status, -ENOKEY);
    put_blob(to, "p", 1);
    int bad = -1;
    get_blob(from, &bad, sizeof bad);
    CHECK_EQ(bad, 0);
    put_blob(to, "e", 1);
    nap(&x, py, "end", 4);
    CHECK_EQ(peer_proc_reap(ypid), 0);
    free(src);
    free(dst);
    CHECK_EQ(uln_close(x.ctx), 0);
    printf("byaddr: %u NAPs in order, PUT/GET %u KiB checked\n", NAPS, BULK >> 10);
    return summary();
}
