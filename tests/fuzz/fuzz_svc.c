/*
 * fuzz_svc.c - fuzz target: what a process, or another host's service, can
 * hand the host service (tools/ulnetd, docs/service.md): the messages on
 * its unix socket (ATTACH with its inbox, QUEUE with a queue's memory and
 * doorbell, ROUTE, STATUS, anything else), the bytes of an endpoint's queue
 * ring (well-formed messages with arbitrary payloads, and raw bytes over the
 * ring's cells), and datagrams on the wire between services - on the
 * service's own code (clients.c, queues.c, serve.c, wire.c, status.c) run
 * in this process, between two real contexts of a job (fuzz_common.h).
 *
 * Rank 0 is the target: attached to the service once (a well-formed
 * attach), with its guarded regions; the service writes into its inbox and
 * places PUTs and serves GETs in its memory, and its engine takes what the
 * service wrote (over udp, whose packets the fault injector drops: its
 * answers reach nobody, and a new life towards rank 1 at the input's end
 * frees what waits for acknowledgements). Rank 1 is the untrusted process: each input connects it
 * anew and sends what the input says; at the input's end it hangs up, the
 * service drains and forgets it, and rank 1's inbox rings are drained (so
 * that the next input's service side starts where the last one left them).
 *
 * An input is a sequence of records  kind:u8 mods:u8 len:u16le bytes[len]:
 *   kind % 8  0  ATTACH: bytes over a valid attach of rank 1; mods 0x01 the
 *                header, 0x02 job key, rank, size and inbox size made valid
 *                again; (mods >> 2) % 4 the descriptor: rank 1's inbox, an
 *                unsealed memfd of its size, rank 0's inbox, none
 *             1  QUEUE: bytes over a valid queue message for endpoint
 *                bytes[0] % 2; mods 0x01 header valid again; 0x02 the
 *                memory unsealed, 0x04 of the wrong size, 0x08 the doorbell
 *                not an eventfd
 *             2  ROUTE: bytes over a route of rank 0 to our wire peer; mods
 *                0x01 header valid again
 *             3  bytes as a message, with (mods % 3) memfds
 *             4  a queue ring message of endpoint mods & 1: bytes[0] type,
 *                [1] flags, [2..5] aux, the rest its payload; mods 0x02 aux
 *                := rank 0 on channel bytes[2] & 1; 0x04 PUT_FRAG, GET_REQ,
 *                ATOMIC_REQ: key := region key (rw, ro, wo, stale)[key % 4];
 *                0x08 the bytes raw over the ring at its tail, stamp and
 *                all (0x10: the right stamp put in)
 *             5  a wire datagram from another service: bytes over the
 *                wire header, then its chunks; mods 0x01 magic and version
 *                valid; 0x02 epochs: ours, and the service's as learnt; 0x04
 *                a data packet with the next sequence number; 0x08 the rest
 *                is one message in one chunk (FIRST|LAST) whose job key :=
 *                the job's, dst rank := bytes[0] % 2, len := its payload's;
 *                0x10 with 0x08, key := region key as in 4
 *             6  1 + mods % 8 passes of the service's loop and rank 0's engine
 *             7  STATUS
 *   mods 0x80  a pass afterwards
 *
 * Its corpus starts from hand-made inputs (corpus/fuzz_svc/base-*: attach,
 * queue and NAP; PUT, refused PUT, GET, atomic and STATUS; ROUTE and the
 * wire's hello and messages; a broken ring; raw records), kept by
 * run.sh --seeds, which rewrites only seed-* from gen_seeds.c.
 *
 * Invariants: nothing outside rank 0's regions changes, read-only regions
 * stay (fz_memory_check); a dead process's queues drain and it is freed
 * (bounded); the sanitizers' (ASan, UBSan, leaks).
 */
#include "fuzz_common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "rel/rel.h"
#include "ulnetd.h"

/* wire.c's header, chunk and message (docs/service.md, "Between services"). */
struct fz_wire_hdr {
    uint32_t magic;
    uint16_t version, rflags;
    uint32_t src_epoch, dst_epoch, seq, ack, lose;
    uint16_t sack_off, credit, reorder, pad_;
    uint64_t sack;
};
struct fz_wire_chunk { /* a piece of a message: len bytes follow */
    uint32_t len;
    uint16_t flags; /* FZ_CHUNK_FIRST: it starts with its svc_wire; LAST: it ends */
    uint16_t pad_;
};
#define FZ_CHUNK_FIRST 1u
#define FZ_CHUNK_LAST  2u
struct fz_svc_wire {
    uint8_t type, ch;
    uint16_t flags;
    uint32_t len;
    uint64_t job_key;
    uint32_t src_rank, dst_rank;
    uint16_t src_ep, dst_ep;
    uint32_t aux;
};
#define FZ_WIRE_MAGIC   0x756c6e77u
#define FZ_WIRE_VERSION 2u

static struct {
    struct ulnetd d;
    bool up;
    struct client *target; /* rank 0, attached once */
    int target_sock;
    int peer_fd; /* another host's service, to the wire */
    struct sockaddr_in wire_sa, peer_sa;
    uint32_t svc_epoch, our_epoch, next_seq;
    /* per input: rank 1's connection and its queues */
    int sock;
    struct client *c;
    int qfd[2], pending_ep;
    uint8_t *qmap[2];
    struct uln_ring_prod qp[2];
    bool qok[2];
    struct uln_ring_cons sink[2]; /* rank 1's rings from rank 0's side */
} S;

static void svc_pass(void)
{
    bool blocked, moved = wire_input(&S.d);
    moved |= queues_pump(&S.d, &blocked);
    (void)wire_tick(&S.d, &moved);
    clients_sweep(&S.d);
    fz_poll(false);
    /* Learn the service's life from what it sends us (hellos, feedback). */
    uint8_t buf[65536];
    ssize_t n;
    while ((n = recv(S.peer_fd, buf, sizeof buf, MSG_DONTWAIT)) >= (ssize_t)sizeof(uint32_t) * 4) {
        struct fz_wire_hdr h;
        if ((size_t)n < sizeof h) continue;
        memcpy(&h, buf, sizeof h);
        if (h.magic == FZ_WIRE_MAGIC) S.svc_epoch = h.src_epoch;
    }
    for (int ch = 0; ch < 2; ch++) {
        int bad = 0;
        struct uln_msg *m;
        while ((m = uln_ring_peek(&S.sink[ch], &bad)))
            uln_ring_release(&S.sink[ch], m);
        if (bad) fz_die("the service wrote a broken message into rank 1's ring %d", ch);
    }
}

static void send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } u;
    struct iovec iov = {(void *)buf, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof u);
        m.msg_control = u.b;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
    }
    (void)!sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Rank 1's connection is still open at the service (a malformed message
 * ends it, and the service's sweep frees it). */
static bool client_open(void)
{
    for (unsigned k = 0; S.c && k < S.d.n_clients; k++)
        if (S.d.clients[k] == S.c) return S.c->fd >= 0 && !S.c->gone;
    S.c = NULL;
    return false;
}

/* The service takes what rank 1 sent; then rank 1 reads the answers. */
static void deliver(void)
{
    if (client_open()) client_input(&S.d, S.c);
    uint8_t buf[ULN_SVC_MSG_MAX];
    ssize_t n;
    while ((n = recv(S.sock, buf, sizeof buf, MSG_DONTWAIT)) >=
           (ssize_t)sizeof(struct uln_svc_hdr)) {
        struct uln_svc_hdr h;
        memcpy(&h, buf, sizeof h);
        if (h.type == ULN_SVC_QUEUE_OK && S.pending_ep >= 0 && S.qmap[S.pending_ep]) {
            int e = S.pending_ep;
            uln_ring_prod_init(&S.qp[e], S.qmap[e] + 4096, ULN_SVC_RING_BYTES);
            S.qok[e] = true;
        }
    }
    S.pending_ep = -1;
}

static int memfd_of(size_t bytes, bool seal)
{
    int fd = memfd_create("fz-svc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) fz_die("memfd: %s", strerror(errno));
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) fz_die("seal");
    return fd;
}

static void attach_target(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
        fz_die("socketpair");
    S.target = client_add(&S.d, sv[0]);
    S.target_sock = sv[1];
    struct uln_ctx *x = F.ctx[0];
    struct uln_svc_attach a = {
        .job_key = x->job_key, .rank = 0, .size = 2, .max_eps = 1, .inbox_bytes = x->inbox->len};
    uln_svc_hdr_init(&a.h, ULN_SVC_ATTACH, sizeof a, 0);
    send_fds(sv[1], &a, sizeof a, &x->inbox->fd, 1);
    client_input(&S.d, S.target);
    if (!S.target || !S.target->attached) fz_die("the target's valid attach was refused");
}

/* At exit, before fz_close: rank 0's rings from rank 1 were written by the
 * service, not by the udp receive path its endpoint's close expects (that
 * walks them up to udp's own feed position), so the contexts are left as
 * they are (still reachable: no leak reported). */
static void leave_open(void)
{
    F.open = false;
}

static void setup(void)
{
    setenv("ULN_SERVICE", "off", 1); /* the contexts are direct: this service is ours */
    fz_open("udp", 1);
    S.d = (struct ulnetd){.listen_fd = -1, .signal_fd = -1, .next_id = 1};
    snprintf(S.d.path, sizeof S.d.path, "@fuzz");
    snprintf(S.d.link, sizeof S.d.link, "udp"); /* the socket link on loopback */
    S.d.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    S.d.bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    S.d.host_id = 1;
    /* The wire on a loopback port of its own (fuzzers may run side by side). */
    for (unsigned i = 0; i < 200 && !S.d.wire; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%u",
                 20000u + ((unsigned)getpid() * 7u + i) % 40000u);
        (void)wire_open(&S.d, addr);
    }
    if (!S.d.wire) fz_die("no loopback port for the wire");
    S.wire_sa = (struct sockaddr_in){
        .sin_family = AF_INET, .sin_port = htons(S.d.wire_port), .sin_addr.s_addr = S.d.wire_ip};
    S.peer_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    S.peer_sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t sl = sizeof S.peer_sa;
    if (bind(S.peer_fd, (struct sockaddr *)&S.peer_sa, sl) != 0 ||
        getsockname(S.peer_fd, (struct sockaddr *)&S.peer_sa, &sl) != 0)
        fz_die("peer socket");
    struct uln_ctx *c1 = F.ctx[1];
    for (int ch = 0; ch < 2; ch++)
        uln_ring_cons_init(&S.sink[ch], uln_inbox_ring_in(c1, 0, 0, ch),
                           uln_inbox_ring_bytes(ch, &c1->p));
    attach_target();
    atexit(leave_open);
    S.our_epoch = 0x10000;
    S.up = true;
}

static void input_begin(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
        fz_die("socketpair");
    S.c = client_add(&S.d, sv[0]);
    if (!S.c) fz_die("client_add");
    S.sock = sv[1];
    S.pending_ep = -1;
    /* A new life towards the service per input: it voids the last one's. */
    S.our_epoch++;
    S.next_seq = S.our_epoch;
}

static void input_end(void)
{
    close(S.sock);
    if (client_open()) client_gone(S.c, "input ended");
    S.c = NULL;
    for (int i = 0; i < 10000; i++) {
        /* Rank 0's answers to rank 1 (to the atomics the service forwards
         * to its engine) go over udp into the fault injector: nobody
         * acknowledges them, so a new life of rank 0's side towards rank 1
         * empties its window, as rank 1's acknowledgements would. */
        if (i % 64 == 63) uln_udp_peer_restart(F.ep, 1, 0);
        svc_pass();
        bool left = false;
        for (unsigned k = 0; k < S.d.n_clients; k++)
            left |= S.d.clients[k] && S.d.clients[k] != S.target;
        if (!left) break;
        if (i == 9999) fz_die("a dead process's queues never drained");
    }
    for (int e = 0; e < 2; e++) {
        if (S.qmap[e]) munmap(S.qmap[e], ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES));
        if (S.qfd[e] > 0) close(S.qfd[e]);
        S.qmap[e] = NULL;
        S.qfd[e] = 0;
        S.qok[e] = false;
    }
    for (int i = 0; i < 4; i++)
        svc_pass();
    fz_memory_check();
    if (getenv("FZ_VERBOSE")) { /* what a seed or a found input does */
        const struct counters *k = &S.d.c;
        fprintf(stderr,
                "attached %llu refused %llu malformed %llu forwarded %llu unroutable %llu "
                "served %llu refused_ops %llu wire_tx %llu wire_rx %llu\n",
                (ULLONG)k->attached, (ULLONG)k->refused, (ULLONG)k->malformed, (ULLONG)k->forwarded,
                (ULLONG)k->unroutable, (ULLONG)k->served, (ULLONG)k->refused_ops,
                (ULLONG)k->wire_tx, (ULLONG)k->wire_rx);
        fz_report();
    }
}

static void overlay(void *msg, size_t size, const uint8_t *b, size_t n)
{
    memcpy(msg, b, n < size ? n : size);
}

static void rec_attach(unsigned mods, const uint8_t *b, size_t n)
{
    struct uln_ctx *x = F.ctx[1];
    struct uln_svc_attach a, ok = {
                                 .job_key = x->job_key,
                                 .rank = 1,
                                 .size = 2,
                                 .max_eps = 1,
                                 .inbox_bytes = x->inbox->len,
                             };
    uln_svc_hdr_init(&ok.h, ULN_SVC_ATTACH, sizeof ok, 0);
    a = ok;
    overlay(&a, sizeof a, b, n);
    if (mods & 0x01) a.h = ok.h;
    if (mods & 0x02) {
        a.job_key = ok.job_key, a.rank = 1, a.size = 2;
        a.inbox_bytes = ok.inbox_bytes;
    }
    int fd = -1, nfds = 1;
    switch ((mods >> 2) % 4) {
    case 0:
        fd = x->inbox->fd;
        break;
    case 1:
        fd = memfd_of(x->inbox->len, false);
        break;
    case 2:
        fd = F.ctx[0]->inbox->fd;
        break;
    default:
        nfds = 0;
        break;
    }
    send_fds(S.sock, &a, sizeof a, &fd, nfds);
    if ((mods >> 2) % 4 == 1) close(fd);
    deliver();
}

static void rec_queue(unsigned mods, const uint8_t *b, size_t n)
{
    int e = n ? b[0] % 2 : 0;
    size_t bytes = ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES);
    struct uln_svc_queue q,
        ok = {.ep = (uint32_t)e, .ring_bytes = ULN_SVC_RING_BYTES, .bytes = bytes};
    uln_svc_hdr_init(&ok.h, ULN_SVC_QUEUE, sizeof ok, 0);
    q = ok;
    if (n > 1) overlay(&q, sizeof q, b + 1, n - 1);
    if (mods & 0x01) q.h = ok.h;
    int fds[2];
    fds[0] = memfd_of(mods & 0x04 ? bytes / 2 : bytes, !(mods & 0x02));
    fds[1] = mods & 0x08 ? memfd_of(8, true) : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    /* What a well-behaved process keeps: its queue's memory, to write. */
    if (!(mods & 0x04)) {
        if (S.qmap[e]) munmap(S.qmap[e], bytes), close(S.qfd[e]);
        S.qok[e] = false;
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
        if (m == MAP_FAILED) fz_die("mmap");
        S.qmap[e] = m;
        S.qfd[e] = dup(fds[0]);
        S.pending_ep = e;
    }
    send_fds(S.sock, &q, sizeof q, fds, 2);
    close(fds[0]);
    close(fds[1]);
    deliver();
}

static void rec_route(unsigned mods, const uint8_t *b, size_t n)
{
    struct uln_svc_route r,
        ok = {.rank = 0, .ip = S.peer_sa.sin_addr.s_addr, .port = ntohs(S.peer_sa.sin_port)};
    uln_svc_hdr_init(&ok.h, ULN_SVC_ROUTE, sizeof ok, 0);
    r = ok;
    overlay(&r, sizeof r, b, n);
    if (mods & 0x01) r.h = ok.h;
    send_fds(S.sock, &r, sizeof r, NULL, 0);
    deliver();
}

static void rec_raw(unsigned mods, const uint8_t *b, size_t n)
{
    int fds[2] = {-1, -1}, k = (int)(mods % 3);
    for (int i = 0; i < k; i++)
        fds[i] = memfd_of(4096, true);
    send_fds(S.sock, b, n, fds, k);
    for (int i = 0; i < k; i++)
        close(fds[i]);
    deliver();
}

static void patch_key(uint8_t type, uint8_t *p, size_t n)
{
    if (n < 8 ||
        (type != ULN_MSG_PUT_FRAG && type != ULN_MSG_GET_REQ && type != ULN_MSG_ATOMIC_REQ))
        return;
    uint64_t k;
    memcpy(&k, p, 8);
    k = F.keys[k % FZ_NREG];
    memcpy(p, &k, 8);
}

static void rec_ring(unsigned mods, const uint8_t *b, size_t n)
{
    int e = mods & 1;
    if (!S.qok[e]) return;
    struct uln_ring_prod *p = &S.qp[e];
    if (mods & 0x08) {
        /* Raw bytes over the cells at the tail: a producer that breaks the
         * ring's rules. Within the ring (it wraps like the cells). */
        for (size_t i = 0; i < n; i++)
            p->cells[(p->tail + i) & p->mask] = b[i];
        if ((mods & 0x10) && n >= 4) {
            uint32_t st = uln_ring_stamp(p->tail);
            memcpy(p->cells + (p->tail & p->mask), &st, 4);
        }
        return;
    }
    if (n < 6) return;
    uint8_t type = b[0], flags = b[1];
    uint32_t aux;
    memcpy(&aux, b + 2, 4);
    if (mods & 0x02) aux = 0 | (b[2] & 1 ? ULN_SVC_AUX_CH : 0);
    uint32_t len = (uint32_t)(n - 6);
    uint8_t *d = uln_ring_reserve(p, len);
    if (!d) return; /* full: the service holds it back */
    memcpy(d, b + 6, len);
    if (mods & 0x04) patch_key(type, d, len);
    uln_ring_commit(p, type, flags, len, aux);
}

static void rec_wire(unsigned mods, const uint8_t *b, size_t n)
{
    uint8_t buf[9000];
    struct fz_wire_hdr h = {0};
    struct fz_wire_chunk c = {0};
    struct fz_svc_wire m = {0};
    const size_t hl = sizeof h, cl = sizeof c, ml = sizeof m;
    size_t len = n > sizeof buf - cl ? sizeof buf - cl : n;
    memset(buf, 0, sizeof buf);
    memcpy(buf, b, len);
    if (len < hl) len = hl;
    memcpy(&h, buf, hl);
    if (mods & 0x01) h.magic = FZ_WIRE_MAGIC, h.version = FZ_WIRE_VERSION;
    if (mods & 0x02) h.src_epoch = S.our_epoch, h.dst_epoch = S.svc_epoch;
    if (mods & 0x04) h.rflags |= ULN_REL_DATA, h.seq = S.next_seq++;
    memcpy(buf, &h, hl);
    if (mods & 0x08) {
        /* One whole message in one chunk: the bytes after the header are
         * its svc_wire and payload, a chunk header put in front. */
        if (len < hl + ml) len = hl + ml;
        memmove(buf + hl + cl, buf + hl, len - hl);
        c.len = (uint32_t)(len - hl);
        c.flags = FZ_CHUNK_FIRST | FZ_CHUNK_LAST;
        memcpy(buf + hl, &c, cl);
        len += cl;
        memcpy(&m, buf + hl + cl, ml);
        m.job_key = F.job;
        m.dst_rank = n ? b[0] % 2 : 0;
        m.src_rank = 1 - m.dst_rank;
        m.len = (uint32_t)(len - hl - cl - ml);
        memcpy(buf + hl + cl, &m, ml);
        if (mods & 0x10) patch_key(m.type, buf + hl + cl + ml, len - hl - cl - ml);
    }
    (void)!sendto(S.peer_fd, buf, len, 0, (struct sockaddr *)&S.wire_sa, sizeof S.wire_sa);
    (void)wire_input(&S.d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!S.up) setup();
    input_begin();
    size_t at = 0;
    struct fz_record r;
    while (fz_next_record(data, size, &at, &r)) {
        switch (r.kind % 8) {
        case 0:
            rec_attach(r.mods, r.b, r.n);
            break;
        case 1:
            rec_queue(r.mods, r.b, r.n);
            break;
        case 2:
            rec_route(r.mods, r.b, r.n);
            break;
        case 3:
            rec_raw(r.mods, r.b, r.n);
            break;
        case 4:
            rec_ring(r.mods, r.b, r.n);
            break;
        case 5:
            rec_wire(r.mods, r.b, r.n);
            break;
        case 6:
            for (unsigned i = 0; i <= r.mods % 8u; i++)
                svc_pass();
            break;
        default: {
            struct uln_svc_hdr h;
            uln_svc_hdr_init(&h, ULN_SVC_STATUS, sizeof h, 0);
            send_fds(S.sock, &h, sizeof h, NULL, 0);
            deliver();
            char text[4096];
            (void)status_text(&S.d, text, sizeof text);
            break;
        }
        }
        if (r.mods & 0x80) svc_pass();
    }
    input_end();
    return 0;
}
