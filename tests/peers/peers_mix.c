/*
 * peers_mix.c - contexts with no job beside each other and beside unrelated
 * processes (issue 11, section 1): two contexts of one process, X and Y
 * (each driven by its own thread), and a third, unrelated process Z, all
 * three learning each other by address. Then a forged address and a stale
 * one, each refused with a clear errno, not a hang.
 *
 *  - Every pair, both ways: a NAP whose text names sender and receiver
 *    (from the id that inserting the sender's address gives), a PUT of a
 *    pattern into the other's region, a GET of the other's own pattern;
 *    every byte checked.
 *  - Forged: Z's address with its key changed (the host, ports and pid
 *    right). uln_peer_insert takes it (the key is only known to Z); a NAP
 *    to it completes with -EPERM (shm: Z's inbox shows another key) or
 *    -ECONNRESET (udp: Z refuses every packet, counted in its refused_job,
 *    until ULN_UDP_DEAD_MS), and Z never delivers it. Traffic to Z's real
 *    id goes on.
 *  - Stale: W lives and ends; its address, inserted afterwards, reaches
 *    nothing: the insert is refused, or a NAP to it completes with an error.
 *    Over udp W's next life comes on the same ports (ULN_UDP_PORT) first, so
 *    the stale address names a live socket: the new life refuses the old
 *    key (counted) and delivers only what was sent to its own address.
 *
 * The transport is the environment's (ctest: shm and udp). With
 * ULNTEST_PEER_EXEC (e.g. "hosts.sh exec h1") Z and W are started through
 * that command, on another namespace host, so X and Y reach them over udp
 * while reaching each other over shm.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "../check.h"
#include "peer_proc.h"

#define REGION   (1 << 20)
#define SLOT     8192         /* PUT from node i lands at i * SLOT */
#define GET_AT   (512 * 1024) /* each node's own pattern, for GETs */
#define PATLEN   4000
#define NODES    3    /* X, Y, Z */
#define STALE_NO 0x5a /* W's role byte */

static const char *names[NODES] = {"X", "Y", "Z"};

struct hello {
    uint8_t addr[ULN_ADDR_MAX];
    uint32_t addr_len;
    uint64_t key;
};

struct node {
    int me;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    uint8_t *mem;
    struct hello hello[NODES]; /* everybody's, ours too */
    int id[NODES];             /* peer ids of the others */
};

static uint8_t pat(int from, int to, size_t i)
{
    return (uint8_t)(from * 37 + to * 11 + i * 7 + (i >> 8));
}

static void node_open(struct node *n, int me)
{
    n->me = me;
    n->ctx = peer_ctx_open();
    CHECK_EQ(uln_cq_open(n->ctx, 1024, &n->cq), 0);
    CHECK_EQ(uln_ep_open(n->ctx, n->cq, n->cq, &n->ep), 0);
    CHECK_EQ(uln_mem_alloc(n->ctx, REGION, (void **)&n->mem), 0);
    CHECK_EQ(uln_mr_reg(n->ctx, n->mem, REGION, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                        &n->mr),
             0);
    for (size_t i = 0; i < PATLEN; i++)
        n->mem[GET_AT + i] = pat(me, me, i);
    struct hello *h = &n->hello[me];
    size_t len = sizeof h->addr;
    CHECK_EQ(uln_addr(n->ctx, h->addr, &len), 0);
    h->addr_len = (uint32_t)len;
    h->key = uln_mr_key(n->mr);
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* One completion of op; NAPs received meanwhile are kept for expect_nap. */
#define KEEP 16
struct kept {
    int peer;
    char text[64];
};
static __thread struct kept kept[KEEP];
static __thread int nkept;

static int forged_seen; /* NAPs sent to a forged or stale address, delivered (Z, W) */

static void keep_nap(struct node *n, const struct uln_cqe *e)
{
    if (e->len == 12 && !memcmp(e->data, "not for you", 12)) forged_seen++;
    if (nkept < KEEP) {
        kept[nkept].peer = e->peer;
        snprintf(kept[nkept].text, sizeof kept[nkept].text, "%.*s", (int)e->len,
                 (const char *)e->data);
        nkept++;
    } else {
        CHECK(!"too many NAPs kept");
    }
    if (e->flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(n->cq, e);
}

static int wait_op(struct node *n, int op, struct uln_cqe *out, int ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct uln_cqe e;
        int k = uln_cq_poll(n->cq, &e, 1);
        if (k == 1) {
            if (e.op == op && op != ULN_OP_NAP_RECV) {
                *out = e;
                return 0;
            }
            if (e.op == ULN_OP_NAP_RECV) keep_nap(n, &e);
            if (op == ULN_OP_NAP_RECV) return 0;
            continue;
        }
        if (ms_since(&t0) > ms) return -ETIMEDOUT;
    }
}

/* A NAP with this text from this peer id (in any order with the others). */
static void expect_nap(struct node *n, int peer, const char *text)
{
    struct uln_cqe e;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        for (int i = 0; i < nkept; i++)
            if (!strcmp(kept[i].text, text)) {
                CHECK_EQ(kept[i].peer, peer);
                kept[i] = kept[--nkept];
                return;
            }
        if (ms_since(&t0) > 20000 || wait_op(n, ULN_OP_NAP_RECV, &e, 20000)) {
            fprintf(stderr, "%s: no NAP \"%s\" from %d; %d others:\n", names[n->me], text, peer,
                    nkept);
            for (int i = 0; i < nkept; i++)
                fprintf(stderr, "  \"%s\" from %d\n", kept[i].text, kept[i].peer);
            struct uln_counters c;
            uln_counters_get(n->ctx, &c);
            fprintf(stderr,
                    "  naps_received %llu stale %llu refused_job %llu malformed %llu dup %llu\n",
                    (unsigned long long)c.naps_received, (unsigned long long)c.stale,
                    (unsigned long long)c.refused_job, (unsigned long long)c.malformed,
                    (unsigned long long)c.duplicates);
            CHECK(!"NAP expected");
            return;
        }
    }
}

static void send_nap(struct node *n, int peer, const char *s)
{
    struct uln_cqe e;
    CHECK_EQ(uln_nap(n->ep, peer, s, strlen(s) + 1, 7, 0), 0);
    CHECK_EQ(wait_op(n, ULN_OP_NAP, &e, 20000), 0);
    CHECK_EQ(e.status, 0);
}

/* Everybody's part, run by X, Y and Z alike once they know all hellos. */
static void exchange(struct node *n)
{
    int me = n->me;
    for (int j = 0; j < NODES; j++)
        if (j != me)
            CHECK_EQ(uln_peer_insert(n->ctx, n->hello[j].addr, n->hello[j].addr_len, 0, &n->id[j]),
                     0);
    char s[64];
    for (int j = 0; j < NODES; j++)
        if (j != me) {
            snprintf(s, sizeof s, "%s to %s", names[me], names[j]);
            send_nap(n, n->id[j], s);
        }
    for (int j = 0; j < NODES; j++)
        if (j != me) {
            snprintf(s, sizeof s, "%s to %s", names[j], names[me]);
            expect_nap(n, n->id[j], s);
        }
    /* PUT our pattern for j into j's slot for us; GET j's own pattern */
    static __thread uint8_t buf[PATLEN];
    for (int j = 0; j < NODES; j++) {
        if (j == me) continue;
        struct uln_cqe e;
        for (size_t i = 0; i < PATLEN; i++)
            buf[i] = pat(me, j, i);
        CHECK_EQ(uln_put(n->ep, n->id[j], buf, PATLEN, n->hello[j].key, (uint64_t)me * SLOT, 1, 0),
                 0);
        CHECK_EQ(wait_op(n, ULN_OP_PUT, &e, 20000), 0);
        CHECK_EQ(e.status, 0);
        memset(buf, 0, sizeof buf);
        CHECK_EQ(uln_get(n->ep, n->id[j], buf, PATLEN, n->hello[j].key, GET_AT, 2, 0), 0);
        CHECK_EQ(wait_op(n, ULN_OP_GET, &e, 20000), 0);
        CHECK_EQ(e.status, 0);
        size_t bad = 0;
        for (size_t i = 0; i < PATLEN; i++)
            bad += buf[i] != pat(j, j, i);
        CHECK_EQ(bad, 0);
        snprintf((char *)buf, sizeof buf, "%s put to %s", names[me], names[j]);
        send_nap(n, n->id[j], (const char *)buf);
    }
    /* what the others PUT here: whole once their NAP behind it came */
    for (int j = 0; j < NODES; j++) {
        if (j == me) continue;
        snprintf(s, sizeof s, "%s put to %s", names[j], names[me]);
        expect_nap(n, n->id[j], s);
        size_t bad = 0;
        for (size_t i = 0; i < PATLEN; i++)
            bad += n->mem[(size_t)j * SLOT + i] != pat(j, me, i);
        CHECK_EQ(bad, 0);
    }
}

/* A send's completion says the NAP left, not that it arrived: over udp it
 * may still need resending, or a handshake first. So a sender keeps
 * driving its context until the receiver says (on a pipe, or in *flag)
 * that it has everything. */
static void drive_until(struct node *n, int fd, atomic_int *flag)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (flag && atomic_load(flag)) return;
        if (fd >= 0) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, 0) == 1) {
                uint8_t b;
                CHECK_EQ(read(fd, &b, 1), 1);
                return;
            }
        }
        if (ms_since(&t0) > 30000) {
            CHECK(!"the receiver never said it had everything");
            return;
        }
        struct uln_cqe e;
        if (uln_cq_poll(n->cq, &e, 1) == 1) {
            if (e.op == ULN_OP_NAP_RECV) keep_nap(n, &e);
        } else {
            uln_cq_wait(n->cq, 2);
        }
    }
}

/* After "bye" from the others: keep answering a little (a udp peer may
 * still wait for our acknowledgement of its last NAP), then close. */
static void linger_close(struct node *n)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ms_since(&t0) < 200)
        uln_cq_wait(n->cq, 10);
    uln_close(n->ctx);
}

/* ---- pipes to the other processes --------------------------------------------- */

static void put_blob(int fd, const void *b, size_t len)
{
    if (write(fd, b, len) != (ssize_t)len) exit(2);
}
static void get_blob(int fd, void *b, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, (char *)b + got, len - got);
        if (k <= 0) exit(2);
        got += (size_t)k;
    }
}

static int refused(struct uln_ctx *ctx)
{
    struct uln_counters c;
    CHECK_EQ(uln_counters_get(ctx, &c), 0);
    return (int)(c.refused_job + c.stale);
}

/* ---- Z: the unrelated process -------------------------------------------------- */

static int z_main(int in, int out)
{
    struct node z = {0};
    node_open(&z, 2);
    put_blob(out, &z.hello[2], sizeof z.hello[2]);
    get_blob(in, &z.hello[0], sizeof z.hello[0]);
    get_blob(in, &z.hello[1], sizeof z.hello[1]);
    exchange(&z);
    /* X tries a forged address of ours meanwhile, then speaks from its real
     * id: that NAP is the first that reaches us, the forged never does. */
    int before = refused(z.ctx);
    expect_nap(&z, z.id[0], "X after the forgery");
    CHECK_EQ(forged_seen, 0);
    int after = refused(z.ctx);
    printf("Z: refused_job + stale %d before the forgery, %d after\n", before, after);
    struct uln_info info;
    CHECK_EQ(uln_query(z.ctx, &info), 0);
    if (info.udp_peers > 0) CHECK(after > before); /* udp: the forger's packets, counted */
    expect_nap(&z, z.id[0], "bye from X");
    expect_nap(&z, z.id[1], "bye from Y");
    uint8_t done = 1;
    put_blob(out, &done, 1); /* X and Y may stop driving us */
    linger_close(&z);
    return summary();
}

/* ---- W: lives, ends; its next life on the same ports ------------------------- */

static int w_main(int in, int out)
{
    struct node w = {0};
    node_open(&w, 2);
    put_blob(out, &w.hello[2], sizeof w.hello[2]);
    uint8_t what;
    get_blob(in, &what, 1);
    if (what == 0) { /* the first life: end now */
        uln_close(w.ctx);
        return summary();
    }
    /* the next life: the first NAP is the one sent to our own address; the
     * ones sent to the old life's never arrive */
    struct uln_cqe e;
    CHECK_EQ(wait_op(&w, ULN_OP_NAP_RECV, &e, 20000), 0);
    CHECK_EQ(nkept, 1);
    if (nkept == 1) CHECK(!strcmp(kept[0].text, "to W's new life"));
    uint8_t done = 1;
    put_blob(out, &done, 1);
    struct uln_info info;
    CHECK_EQ(uln_query(w.ctx, &info), 0);
    int r = refused(w.ctx);
    printf("W: refused_job + stale %d\n", r);
    if (info.udp_peers > 0) CHECK(r > 0); /* the stale key's packets, refused here */
    get_blob(in, &what, 1);               /* X is done with us */
    linger_close(&w);
    return summary();
}

/* ---- X and Y ------------------------------------------------------------------ */

static atomic_int z_done;

static void *y_thread(void *arg)
{
    struct node *y = arg;
    exchange(y);
    expect_nap(y, y->id[0], "bye from X");
    send_nap(y, y->id[2], "bye from Y");
    drive_until(y, -1, &z_done);
    return NULL;
}

/* A NAP to `peer` must complete with a clear error, well within 20 s. */
static int must_fail(struct node *x, int peer, const char *what)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct uln_cqe e = {0};
    CHECK_EQ(uln_nap(x->ep, peer, "not for you", 12, 9, 0), 0);
    int rc = wait_op(x, ULN_OP_NAP, &e, 20000);
    CHECK_EQ(rc, 0);
    printf("X: a NAP to the %s address: %s after %ld ms\n", what,
           rc ? "no completion" : uln_strerror(e.status), ms_since(&t0));
    CHECK(rc == 0 && (e.status == -EPERM || e.status == -ECONNRESET));
    return e.status;
}

static void x_forged(struct node *x)
{
    uint8_t bad[ULN_ADDR_MAX];
    const struct hello *hz = &x->hello[2];
    memcpy(bad, hz->addr, hz->addr_len);
    bad[8] ^= 0x01; /* the key: another life of Z's pid, on Z's ports */
    int p;
    int rc = uln_peer_insert(x->ctx, bad, hz->addr_len, 0, &p);
    CHECK(rc == 0 || rc == -EADDRNOTAVAIL); /* ulnet.h: taken, or refused as forged */
    if (rc == 0) {
        CHECK(p != x->id[2]);
        must_fail(x, p, "forged");
        CHECK_EQ(uln_peer_remove(x->ctx, p), 0);
    }
    send_nap(x, x->id[2], "X after the forgery");
}

static void x_stale(struct node *x, int udp)
{
    int port = udp ? 20000 + (int)(getpid() % 20000) : 0;
    int to, from;
    struct hello old, now;
    pid_t w = peer_proc_start("peers_mix", "w", port, &to, &from);
    get_blob(from, &old, sizeof old);
    uint8_t what = 0;
    put_blob(to, &what, 1);
    CHECK_EQ(peer_proc_reap(w), 0);
    close(to);
    close(from);
    /* the next life first, on the same ports */
    w = peer_proc_start("peers_mix", "w", port, &to, &from);
    get_blob(from, &now, sizeof now);
    what = 1;
    put_blob(to, &what, 1);
    CHECK(memcmp(&old, &now, sizeof old) != 0);
    int p, rc = uln_peer_insert(x->ctx, old.addr, old.addr_len, 0, &p);
    printf("X: inserting the stale address: %s\n", rc ? uln_strerror(rc) : "taken");
    CHECK(rc == 0 || rc == -EHOSTUNREACH || rc == -ECONNRESET);
    if (rc == 0) {
        must_fail(x, p, "stale");
        CHECK_EQ(uln_peer_remove(x->ctx, p), 0);
    }
    int pn;
    CHECK_EQ(uln_peer_insert(x->ctx, now.addr, now.addr_len, 0, &pn), 0);
    CHECK(rc != 0 || pn != p);
    send_nap(x, pn, "to W's new life");
    drive_until(x, from, NULL);
    put_blob(to, &what, 1);
    CHECK_EQ(peer_proc_reap(w), 0);
    close(to);
    close(from);
    CHECK_EQ(uln_peer_remove(x->ctx, pn), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "z")) return z_main(atoi(argv[2]), atoi(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "w")) return w_main(atoi(argv[2]), atoi(argv[3]));
    signal(SIGPIPE, SIG_IGN);
    /* no launcher, even with one's variables around */
    setenv("PMIX_RANK", "0", 1);
    struct node x = {0}, y = {0};
    node_open(&x, 0);
    node_open(&y, 1);
    int to, from;
    pid_t z = peer_proc_start("peers_mix", "z", 0, &to, &from);
    get_blob(from, &x.hello[2], sizeof x.hello[2]);
    put_blob(to, &x.hello[0], sizeof x.hello[0]);
    put_blob(to, &y.hello[1], sizeof y.hello[1]);
    x.hello[1] = y.hello[1];
    y.hello[0] = x.hello[0];
    y.hello[2] = x.hello[2];
    pthread_t ty;
    CHECK_EQ(pthread_create(&ty, NULL, y_thread, &y), 0);
    exchange(&x);
    struct uln_info info;
    CHECK_EQ(uln_query(x.ctx, &info), 0);
    if (getenv("ULNTEST_PEER_EXEC")) CHECK(info.udp_peers >= 1); /* Z on another host */
    x_forged(&x);
    send_nap(&x, x.id[1], "bye from X");
    send_nap(&x, x.id[2], "bye from X");
    drive_until(&x, from, NULL);
    atomic_store(&z_done, 1);
    pthread_join(ty, NULL);
    CHECK_EQ(peer_proc_reap(z), 0);
    close(to);
    close(from);
    uln_close(y.ctx);
    const char *t = getenv("ULN_TRANSPORT");
    x_stale(&x, (t && !strcmp(t, "udp")) || getenv("ULNTEST_PEER_EXEC") != NULL);
    uln_close(x.ctx);
    return summary();
}
