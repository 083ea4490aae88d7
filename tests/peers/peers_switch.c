/*
 * peers_switch.c - a context with no job whose socket is connected to its
 * one peer (ULN_UDP_CONNECT) meets a second peer mid-stream.
 *
 * Process A inserts B and sends it a NAP: while B streams NAPs to A, A's
 * socket is connected to B (checked in /proc/net/udp*: a row of this
 * process's sockets with a remote address). Halfway, C (which A has not
 * inserted) starts streaming to A too: the kernel drops C's datagrams at
 * A's connected socket. A then inserts C - or, with ULNTEST_STRANGER=1,
 * never does (an Open MPI receive from any source): either way A's socket
 * must end unconnected, and every NAP of B and of C must arrive exactly
 * once, in order, intact (C's dropped ones resent by its reliability
 * layer, and let in by the insert or by A's socket opening up when
 * nothing came for a while). B and C run as other processes (on
 * another namespace host with ULNTEST_PEER_EXEC, peers_hosts.sh); the
 * transport is udp (the ctest cases set it).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "peer_proc.h"

#define NAPS    20000
#define NAP_LEN 64

struct node {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static void node_open(struct node *n)
{
    n->ctx = peer_ctx_open();
    CHECK_EQ(uln_cq_open(n->ctx, 4096, &n->cq), 0);
    CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep), 0);
}

static void put_addr(int fd, struct node *n)
{
    uint8_t a[ULN_ADDR_MAX];
    size_t len = sizeof a;
    CHECK_EQ(uln_addr(n->ctx, a, &len), 0);
    uint32_t l = (uint32_t)len;
    if (write(fd, &l, 4) != 4 || write(fd, a, len) != (ssize_t)len) exit(2);
}

struct addr {
    uint8_t a[ULN_ADDR_MAX];
    uint32_t len;
};

static void get_addr(int fd, struct addr *a)
{
    if (read(fd, &a->len, 4) != 4 || a->len > sizeof a->a ||
        read(fd, a->a, a->len) != (ssize_t)a->len)
        exit(2);
}

static int insert(struct node *n, const struct addr *a)
{
    int p = -1;
    CHECK_EQ(uln_peer_insert(n->ctx, a->a, a->len, 0, &p), 0);
    return p;
}

static int insert_from(int fd, struct node *n)
{
    struct addr a;
    get_addr(fd, &a);
    return insert(n, &a);
}

static void fill(uint8_t *b, char who, uint32_t seq)
{
    memcpy(b, &seq, 4);
    b[4] = (uint8_t)who;
    for (int i = 5; i < NAP_LEN; i++)
        b[i] = (uint8_t)(seq * 31u + (unsigned)i + (unsigned)who);
}

/* Is one of this process's UDP sockets connected? Its sockets' inodes from
 * /proc/self/fd, their rows in /proc/net/udp and udp6 (remote address and
 * port not all zero). */
static bool connected(void)
{
    unsigned long inodes[256];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        char path[300], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k <= 0) continue;
        link[k] = 0;
        if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1) n++;
    }
    closedir(d);
    bool conn = false;
    for (int f = 0; f < 2; f++) {
        FILE *t = fopen(f ? "/proc/net/udp6" : "/proc/net/udp", "r");
        if (!t) continue;
        char line[512];
        while (fgets(line, sizeof line, t)) {
            char rem[64];
            unsigned long ino;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %*s %63s %*s %*s %*s %*s %*s %*s %lu", rem, &ino) != 2) continue;
            bool zero = strspn(rem, "0:") == strlen(rem);
            for (int i = 0; i < n; i++)
                if (inodes[i] == ino && !zero) conn = true;
        }
        fclose(t);
    }
    return conn;
}

/* Take one entry; NAP_RECV entries are checked by the caller. */
static int poll_one(struct node *n, struct uln_cqe *e)
{
    int k = uln_cq_poll(n->cq, e, 1);
    if (k == 1 && e->status != 0) {
        fprintf(stderr, "peers_switch: op %u: %s\n", e->op, uln_strerror(e->status));
        exit(1);
    }
    return k;
}

static bool readable(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) == 1;
}

/* ---- B and C: stream NAPS NAPs to A, then wait for its "done" -------------- */

static int sender_main(int in, int out)
{
    struct node s;
    node_open(&s);
    put_addr(out, &s);
    int pa = insert_from(in, &s); /* A's address comes when A wants our stream */
    char who;
    if (read(in, &who, 1) != 1) exit(2);
    uint8_t b[NAP_LEN];
    uint32_t sent = 0, done = 0;
    bool told = false, over = false;
    while (!over) {
        if (sent < NAPS) {
            fill(b, who, sent);
            int rc = uln_nap(s.ep, pa, b, NAP_LEN, sent, ULN_INLINE);
            CHECK(rc == 0 || rc == -EAGAIN);
            if (rc == 0) sent++;
        }
        if (sent > 0 && !told) { /* A waits for our first NAP to be on its way */
            if (write(out, "s", 1) != 1) exit(2);
            told = true;
        }
        if (readable(in)) { /* A ended before its "done" (A failed): so do we */
            fprintf(stderr, "peers_switch: A went away\n");
            exit(1);
        }
        struct uln_cqe e;
        while (poll_one(&s, &e) == 1) {
            if (e.op == ULN_OP_NAP) done++;
            if (e.op == ULN_OP_NAP_RECV) { /* A's "hi", then its "done" */
                CHECK(e.len == 3 || e.len == 5);
                over = e.len == 5 && !memcmp(e.data, "done", 5);
            }
            if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(s.cq, &e);
        }
    }
    CHECK_EQ(sent, NAPS);
    CHECK_EQ(done, NAPS);
    uln_close(s.ctx);
    return summary();
}

/* ---- A ---------------------------------------------------------------------- */

struct stream {
    int peer;      /* -1: C before A knows its id */
    uint32_t next; /* the sequence number due */
};

/* Receive what comes for up to ms, or until both streams are whole, or (B's
 * only, until) B's has `until`; check it per source: s[0] is B, s[1] C
 * (inserted, or learnt from its first datagram when A never inserts it). */
static void receive(struct node *a, struct stream *s, uint32_t until, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct uln_cqe e;
        if (poll_one(a, &e) == 1) {
            if (e.op == ULN_OP_NAP_RECV && e.len != 3) {
                int i = e.peer == s[0].peer ? 0 : 1;
                if (i == 1 && s[1].peer < 0) s[1].peer = e.peer; /* C, learnt */
                if (e.peer != s[i].peer) {
                    CHECK(!"a NAP from a third peer");
                    exit(1);
                }
                CHECK_EQ(e.len, NAP_LEN);
                uint8_t want[NAP_LEN];
                fill(want, i ? 'C' : 'B', s[i].next);
                if (memcmp(e.data, want, NAP_LEN)) {
                    uint32_t got;
                    memcpy(&got, e.data, 4);
                    fprintf(stderr, "from %c: NAP %u where %u was due\n", i ? 'C' : 'B', got,
                            s[i].next);
                    CHECK(!"a NAP lost, repeated, out of order or altered");
                    exit(1);
                }
                s[i].next++;
            }
            if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(a->cq, &e);
            if (until && s[0].next >= until) return;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if ((s[0].next == NAPS && s[1].next == NAPS) || el > ms) return;
    }
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "sender")) return sender_main(atoi(argv[2]), atoi(argv[3]));
    /* ULNTEST_STRANGER=1: A never inserts C (a receive from any source) */
    bool stranger = getenv("ULNTEST_STRANGER") && !strcmp(getenv("ULNTEST_STRANGER"), "1");
    int bto, bfrom, cto, cfrom;
    pid_t pb = peer_proc_start(argv[0], "sender", 0, &bto, &bfrom);
    pid_t pc = peer_proc_start(argv[0], "sender", 0, &cto, &cfrom);
    struct node a;
    node_open(&a);
    CHECK(!connected()); /* no peer yet */
    struct stream s[2] = {{.peer = insert_from(bfrom, &a)}, {.peer = -1}};
    struct addr ca; /* C's, inserted later (or never) */
    get_addr(cfrom, &ca);

    /* A's NAP makes B its endpoint's one peer; while B streams, the socket
     * is connected to it (between two of B's datagrams more than a quiet
     * spell apart it is not: sampled until seen, while B streams). */
    CHECK_EQ(uln_nap(a.ep, s[0].peer, "hi", 3, 0, ULN_INLINE), 0);
    put_addr(bto, &a);
    if (write(bto, "B", 1) != 1) exit(2);
    bool seen = false;
    for (uint32_t k = 1; k <= 20 && !seen; k++) {
        receive(&a, s, k * 100, 5000);
        seen = connected();
    }
    CHECK(seen);

    /* C streams to A, which has not inserted it: while A's socket is
     * connected to B the kernel drops C's datagrams (C's rel resends). */
    put_addr(cto, &a);
    if (write(cto, "C", 1) != 1) exit(2);
    char go;
    while (!readable(cfrom))
        receive(&a, s, 0, 1);
    CHECK(read(cfrom, &go, 1) == 1 && go == 's');
    receive(&a, s, 0, 50);

    if (!stranger) { /* A inserts C mid-stream: the socket hears every source */
        int pc_id = insert(&a, &ca);
        CHECK(s[1].peer < 0 || s[1].peer == pc_id); /* if learnt already: the same peer */
        s[1].peer = pc_id;
    }
    receive(&a, s, 0, 60000);
    CHECK(!connected());
    CHECK_EQ(s[0].next, NAPS);
    CHECK_EQ(s[1].next, NAPS);
    if (s[0].next != NAPS || s[1].next != NAPS) exit(1);

    CHECK_EQ(uln_nap(a.ep, s[0].peer, "done", 5, 1, 0), 0);
    CHECK_EQ(uln_nap(a.ep, s[1].peer, "done", 5, 1, 0), 0);
    int sends = 0;
    while (sends < 2) { /* the two "done"s have left */
        struct uln_cqe e;
        if (poll_one(&a, &e) == 1) {
            if (e.op == ULN_OP_NAP && e.user_data == 1) sends++;
            if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(a.cq, &e);
        }
    }
    CHECK_EQ(peer_proc_reap(pb), 0);
    CHECK_EQ(peer_proc_reap(pc), 0);
    uln_close(a.ctx);
    printf("peers_switch: %d NAPs from each of two peers (C %s), once and in order\n", NAPS,
           stranger ? "never inserted" : "inserted mid-stream");
    return summary();
}
