/*
 * arbiter.c - the service's arbiter (tools/ulnetd/arbiter.c) on the
 * service's own code, in this process, while its queues are backlogged:
 * the condition the arbiter is for (the service is the bottleneck). The
 * end-to-end picture on this machine (senders slower than the service) is
 * fair.c's and ulnperf's.
 *
 * Three contexts of a job (direct mode: the service here is ours, driven by
 * hand). Ranks 0 and 1 attach with the weights under test and fill their
 * queues with PUTs of CHUNK bytes into rank 2's region (placed by the
 * service with process_vm_writev, as for a sleeping target; ACKs back into
 * the senders' inboxes). Then the service runs round by round:
 *   - weights 1:2: until one queue is empty, rank 1 moved 2x rank 0's bytes
 *     (within 10 %: DRR's exact share, give or take a message a round);
 *   - weights 1:64: rank 0 moves in every round in which it has work (a
 *     low weight is slow, never starved);
 *   - the service's cap for our uid (--weight UID:1) wins over a process
 *     asking 2, *:W applies to other uids only, and per cgroup the deepest
 *     rule a process is in applies (by whole names), ours read at attach;
 * and every PUT is placed: rank 2's region holds the last one's bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ulnet.h"
#include "boot/board.h"
#include "core/internal.h"
#include "core/wire.h"
#include "ulnetd.h"

#define CHUNK    8192u
#define DIE(...) (fprintf(stderr, "svc.arbiter: " __VA_ARGS__), exit(1))

static struct ulnetd D;
static struct uln_ctx *ctx[3];
static int board;
static uint64_t job;
static uint8_t *region;
static uint64_t key;
static struct uln_ring_cons acks[2]; /* rank 2's ring in rank 0's and 1's inbox */

/* Take the ACKs the service wrote for the senders, as their engines would
 * (so that a later attach's producer starts where the ring is empty). */
static void take_acks(void)
{
    for (int r = 0; r < 2; r++) {
        int bad = 0;
        struct uln_msg *m;
        while ((m = uln_ring_peek(&acks[r], &bad))) {
            if (m->type != ULN_MSG_ACK && m->type != ULN_MSG_LIFE)
                DIE("rank %d got a message of type %u\n", r, m->type);
            uln_ring_release(&acks[r], m);
        }
        if (bad) DIE("a broken ring for rank %d\n", r);
    }
}

static void config(struct uln_config *c, int rank)
{
    uln_config_init(c);
    c->rank = rank;
    c->size = 3;
    c->job_key = job;
    c->boot_fd = board;
    c->max_eps = 1;
    c->ring_bytes = 256u << 10; /* a round's ACKs fit (weight 64: a whole queue a round) */
}

static void *open_rank(void *arg)
{
    int r = (int)(intptr_t)arg;
    struct uln_config c;
    config(&c, r);
    int rc = uln_open(&c, &ctx[r]);
    if (rc) DIE("rank %d: uln_open: %s\n", r, uln_strerror(rc));
    return NULL;
}

static void send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(2 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)buf, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        m.msg_control = u.b;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
    }
    if (sendmsg(sock, &m, MSG_NOSIGNAL) != (ssize_t)len) DIE("sendmsg: %s\n", strerror(errno));
}

struct proc {
    struct client *c;
    int sock;
    uint8_t *qmap;
    struct uln_ring_prod p;
};

static void attach(struct proc *pr, int rank, uint32_t weight)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
        DIE("socketpair\n");
    pr->c = client_add(&D, sv[0]);
    pr->sock = sv[1];
    struct uln_ctx *x = ctx[rank];
    struct uln_svc_attach a = {.job_key = job,
                               .rank = (uint32_t)rank,
                               .size = 3,
                               .max_eps = 1,
                               .weight = weight,
                               .inbox_bytes = x->inbox->len};
    uln_svc_hdr_init(&a.h, ULN_SVC_ATTACH, sizeof a, 0);
    send_fds(pr->sock, &a, sizeof a, &x->inbox->fd, 1);
    client_input(&D, pr->c);
    if (!pr->c->attached) DIE("rank %d: attach refused\n", rank);
}

static void add_queue(struct proc *pr)
{
    size_t bytes = ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES);
    int fds[2];
    fds[0] = memfd_create("arbiter-queue", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fds[0] < 0 || ftruncate(fds[0], (off_t)bytes) != 0 ||
        fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        DIE("queue memfd\n");
    fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pr->qmap = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (pr->qmap == MAP_FAILED) DIE("mmap\n");
    struct uln_svc_queue q = {.ep = 0, .ring_bytes = ULN_SVC_RING_BYTES, .bytes = bytes};
    uln_svc_hdr_init(&q.h, ULN_SVC_QUEUE, sizeof q, 0);
    send_fds(pr->sock, &q, sizeof q, fds, 2);
    close(fds[0]);
    close(fds[1]);
    client_input(&D, pr->c);
    if (!pr->c->queues[0]) DIE("queue refused\n");
    uln_ring_prod_init(&pr->p, pr->qmap + 4096, ULN_SVC_RING_BYTES);
}

/* PUTs of CHUNK bytes to rank 2 until the queue is full; their count. */
static unsigned fill(struct proc *pr, int rank)
{
    unsigned n = 0;
    for (;; n++) {
        uint32_t len = (uint32_t)sizeof(struct uln_put_frag) + CHUNK;
        uint8_t *d = uln_ring_reserve(&pr->p, len);
        if (!d) return n;
        struct uln_put_frag f = {.key = key,
                                 .offset = (uint64_t)rank * CHUNK,
                                 .op_id = n,
                                 .op_offset = (uint64_t)rank * CHUNK,
                                 .op_len = CHUNK};
        memcpy(d, &f, sizeof f);
        memset(d + sizeof f, 'a' + rank * 8 + (int)(n % 8), CHUNK);
        uln_ring_commit(&pr->p, ULN_MSG_PUT_FRAG, ULN_FRAG_LAST, len, 2);
    }
}

/* Drop pr from the service (its hang-up) and run it until it is freed. */
static void detach(struct proc *pr)
{
    close(pr->sock);
    client_gone(pr->c, "test over");
    clients_sweep(&D);
    for (int i = 0; i < 1000; i++) {
        bool blocked;
        queues_pump(&D, &blocked);
        take_acks();
    }
    if (pr->qmap) munmap(pr->qmap, ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES));
    memset(pr, 0, sizeof *pr);
}

static void shares(uint32_t w0, uint32_t w1)
{
    struct proc p[2];
    attach(&p[0], 0, w0);
    attach(&p[1], 1, w1);
    add_queue(&p[0]);
    add_queue(&p[1]);
    unsigned n0 = fill(&p[0], 0), n1 = fill(&p[1], 1);
    if (n0 < 32 || n1 < 32) DIE("queues hold %u and %u PUTs only\n", n0, n1);
    unsigned rounds = 0, starved = 0;
    while (!queues_empty(p[0].c) && !queues_empty(p[1].c)) {
        uint64_t before = p[0].c->moved_msgs;
        bool blocked;
        queues_pump(&D, &blocked);
        take_acks();
        if (blocked) DIE("a queue was held back (a full ring): not the case under test\n");
        starved += p[0].c->moved_msgs == before;
        if (++rounds > 100000) DIE("no end\n");
    }
    double ratio = (double)p[1].c->moved_bytes / (double)p[0].c->moved_bytes;
    double want = (double)w1 / (double)w0;
    printf("svc.arbiter: weights %u:%u over %u rounds: %llu and %llu bytes, ratio %.2f\n", w0, w1,
           rounds, (unsigned long long)p[0].c->moved_bytes, (unsigned long long)p[1].c->moved_bytes,
           ratio);
    if (starved) DIE("rank 0 did not move in %u of %u rounds\n", starved, rounds);
    if (w1 <= 8 && (ratio < want * 0.9 || ratio > want * 1.1))
        DIE("weights %u:%u gave %.2f\n", w0, w1, ratio);
    /* The rest placed while both are attached (a process's end leaves
     * what it sent to its target's engine, which nobody runs here). */
    for (unsigned i = 0; !queues_empty(p[0].c) || !queues_empty(p[1].c); i++) {
        bool blocked;
        queues_pump(&D, &blocked);
        take_acks();
        if (i > 100000) DIE("the queues never emptied\n");
    }
    if (p[0].c->moved_msgs != n0 || p[1].c->moved_msgs != n1)
        DIE("moved %llu and %llu PUTs of %u and %u\n", (unsigned long long)p[0].c->moved_msgs,
            (unsigned long long)p[1].c->moved_msgs, n0, n1);
    detach(&p[0]);
    detach(&p[1]);
}

static void caps(void)
{
    char rule[32];
    snprintf(rule, sizeof rule, "%u:1", (unsigned)getuid());
    if (arbiter_rule(&D, "*:3") || arbiter_rule(&D, rule)) DIE("rules refused\n");
    if (!arbiter_rule(&D, "x:1") || !arbiter_rule(&D, "5:0") || !arbiter_rule(&D, "5:65"))
        DIE("bad rules taken\n");
    struct proc p;
    attach(&p, 0, 2);
    if (p.c->weight != 1) DIE("our uid's cap 1: weight %u\n", p.c->weight);
    detach(&p);
    uid_t other = getuid() + 1;
    if (arbiter_weight(&D, other, "", 8) != 3 || arbiter_weight(&D, other, "", 2) != 2 ||
        arbiter_weight(&D, other, "", 0) != 1)
        DIE("*:3 for other uids not applied\n");
    /* Per cgroup: the deepest rule a process is in or under, by whole names;
     * a uid's own rule first, *:W last. */
    D.n_weights = 0;
    if (arbiter_rule(&D, "*:6") || arbiter_rule(&D, "/a:4") || arbiter_rule(&D, "/a/b/:2") ||
        arbiter_rule(&D, "/ab:1"))
        DIE("cgroup rules refused\n");
    if (arbiter_weight(&D, other, "/a/b", 8) != 2 || arbiter_weight(&D, other, "/a/b/c", 8) != 2 ||
        arbiter_weight(&D, other, "/a/c", 8) != 4 || arbiter_weight(&D, other, "/ab", 8) != 1 ||
        arbiter_weight(&D, other, "/x", 8) != 6 || arbiter_weight(&D, other, "", 8) != 6)
        DIE("cgroup rules not applied as they should\n");
    snprintf(rule, sizeof rule, "%u:1", (unsigned)other);
    if (arbiter_rule(&D, rule) || arbiter_weight(&D, other, "/a/b", 8) != 1)
        DIE("a uid's own rule does not come first\n");
    /* Our own cgroup, as the service reads it at attach. */
    char cg[ULN_SVC_CGROUP_MAX];
    arbiter_cgroup_of(getpid(), cg, sizeof cg);
    if (cg[0]) {
        D.n_weights = 0;
        char r2[ULN_SVC_CGROUP_MAX + 8];
        snprintf(r2, sizeof r2, "%s:3", cg);
        if (arbiter_rule(&D, r2)) DIE("rule %s refused\n", r2);
        attach(&p, 0, 5);
        if (p.c->weight != 3 || strcmp(p.c->cgroup, cg))
            DIE("our cgroup %s's cap 3: weight %u (cgroup %s)\n", cg, p.c->weight, p.c->cgroup);
        detach(&p);
    }
    D.n_weights = 0;
    if (arbiter_weight(&D, getuid(), "", 100) != ULN_SVC_WEIGHT_MAX)
        DIE("no cap: not the maximum\n");
    printf("svc.arbiter: caps per uid and cgroup (ours: %s) applied\n", cg[0] ? cg : "unknown");
}

int main(void)
{
    setenv("ULN_SERVICE", "off", 1); /* the service is this process's own */
    setenv("ULN_TRANSPORT", "shm", 1);
    job = 0xa4b17e4000000000ull ^ (uint64_t)getpid();
    board = uln_board_create(3);
    if (board < 0) DIE("board\n");
    pthread_t t[2];
    for (int r = 1; r < 3; r++)
        pthread_create(&t[r - 1], NULL, open_rank, (void *)(intptr_t)r);
    open_rank((void *)0);
    for (int r = 1; r < 3; r++)
        pthread_join(t[r - 1], NULL);
    region = calloc(2, CHUNK);
    struct uln_mr *mr;
    if (!region || uln_mr_reg(ctx[2], region, 2 * CHUNK, ULN_ACCESS_REMOTE_WRITE, &mr))
        DIE("mr_reg\n");
    key = uln_mr_key(mr);

    /* One round per queues_pump: the shares are looked at round by round. */
    D = (struct ulnetd){.listen_fd = -1, .signal_fd = -1, .next_id = 1, .arb_batch = 1};
    D.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    D.bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    for (int r = 0; r < 2; r++)
        uln_ring_cons_init(&acks[r], uln_inbox_ring_in(ctx[r], 2, 0, 0),
                           uln_inbox_ring_bytes(0, &ctx[r]->p));
    struct proc target;
    attach(&target, 2, 1);

    shares(1, 2);
    shares(1, 64);
    caps();
    /* Every PUT placed: each slot holds its sender's last one. */
    for (int r = 0; r < 2; r++)
        for (unsigned i = 0; i < CHUNK; i++)
            if (region[(size_t)r * CHUNK + i] < 'a' + r * 8 ||
                region[(size_t)r * CHUNK + i] > 'a' + r * 8 + 7)
                DIE("rank %d's slot byte %u: %#x\n", r, i, region[(size_t)r * CHUNK + i]);
    detach(&target);
    clients_drop_all(&D);
    uln_mr_dereg(mr);
    for (int r = 0; r < 3; r++)
        uln_close(ctx[r]);
    free(region);
    printf("svc.arbiter: passed\n");
    return 0;
}
