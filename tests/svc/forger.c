/*
 * forger.c - a forger on the wire between services (docs/service.md,
 * "Between services": unknown sources) while a job runs through them.
 *
 * Four ranks on two namespace hosts (tests/netns/svc_forger.sh runs it
 * with run_job.sh --svc): rank r on host r % 2. Rank 0 first starts a forger
 * on its host that sends wire datagrams with the right magic and version to
 * host 1's service from BLIND fresh ports (a hello and a data packet each,
 * addressed to lives it guesses), then from PROVE ports takes the service's
 * answer and sends back a packet addressed to the life the answer named (so
 * those addresses are proven and get state, up to the service's bound), and
 * then goes on spraying from fresh ports until the job ends. Only then do the
 * ranks meet: ranks 0 and 2 stream N NAPs each to ranks 1 and 3 on host 1,
 * whose service may meet host 0's as an unknown source (its ranks only
 * receive), beside the forger's, and every NAP must arrive, in order, data checked. Rank 1 prints
 * its namespace run so the script can ask host 1's service for --status while the forger runs;
 * after the stream the ranks stay PROVE_SILENCE s more so that the proven
 * but silent forged sources die and are freed.
 *
 * With the arguments "hello RATE" (tests/netns/svc_forger.sh hello, the
 * services run --secure encrypt without a secret) the forger floods both
 * services with the sealed wire's HELLOs instead, RATE a second each (so
 * neither keys the other through the answer to its own ask, which is not
 * limited) for HELLO_S seconds, from spoofed sources: a raw socket writes
 * each from one of SPOOF_IPS addresses of the hosts' subnet that no host
 * has, and a random port, paced one by one (not in bursts), so the services'
 * answers and cookies go nowhere. Each carries one of POOL X25519 keys, the
 * right mode and the check it computes (without a secret it is computable),
 * a fresh nonce, and asks for an answer; one in FORGED_COOKIE carries a
 * cookie it made up, and one in FORGED_COOKIE of those to host 0 is a
 * COOKIE as if from host 1's service, for a nonce it made up. Rank 0 starts
 * the job once HELLO_READY_S of it are out, so the real services key each
 * other under it; ranks 1 and 3 print how long their first NAP took to
 * arrive (the services' keying is in it), and the forger how many HELLOs it
 * sent, in how long. With "flood RATE SECONDS IP" it floods the service at
 * IP alone so, and nothing else (tests/netns/svc_seal_restart.sh).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seal/link_seal.h"
#include "ulnet.h"

#define N             20000u
#define LEN           128u
#define BLIND         3000u
#define PROVE         64u
#define PROVE_SILENCE 5u   /* s: rel's dead state (3 s after a keepalive probe at 0.5 s) + slack */
#define HELLO_S       6.0  /* s of flood */
#define HELLO_READY_S 1.0  /* s of it before the job starts */
#define POOL          256u /* key pairs the flood's HELLOs carry */
#define SPOOF_IPS     4u   /* .250 .. .253 of the hosts' /24 */
#define BATCH         64u
#define FORGED_COOKIE 8u /* one HELLO in this many carries a made-up cookie */
#define DIE(...)      (fprintf(stderr, "forger: " __VA_ARGS__), exit(1))

/* wire.c's header (docs/service.md, "Between services"). */
struct fw_hdr {
    uint32_t magic;
    uint16_t version, rflags;
    uint32_t src_epoch, dst_epoch, seq, ack, lose;
    uint16_t sack_off, credit, reorder, wflags;
    uint64_t sack;
};
#define FW_MAGIC   0x756c6e77u
#define FW_VERSION 3u /* wire.c's WIRE_VERSION */
#define FW_DATA    0x1u

static uint32_t rnd(void)
{
    uint32_t v = 0;
    while (getrandom(&v, sizeof v, 0) != sizeof v)
        ;
    return v ? v : 1;
}

static int fresh_socket(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) DIE("socket: %s\n", strerror(errno));
    return fd;
}

/* A hello and a data packet with guessed lives from a fresh port. */
static void blind(const struct sockaddr_in *to)
{
    int fd = fresh_socket();
    uint8_t pkt[sizeof(struct fw_hdr) + 64];
    memset(pkt, 0xa5, sizeof pkt);
    struct fw_hdr h = {.magic = FW_MAGIC, .version = FW_VERSION, .src_epoch = rnd()};
    memcpy(pkt, &h, sizeof h);
    (void)!sendto(fd, pkt, sizeof h, 0, (const struct sockaddr *)to, sizeof *to);
    h.dst_epoch = rnd();
    h.rflags = FW_DATA;
    memcpy(pkt, &h, sizeof h);
    (void)!sendto(fd, pkt, sizeof pkt, 0, (const struct sockaddr *)to, sizeof *to);
    close(fd);
}

/* From a fresh port: a hello, the service's answer, a packet addressed to
 * the life it named. The socket stays open (its address stays proven) and
 * silent. True if the service answered. */
static bool prove(const struct sockaddr_in *to, int *keep)
{
    int fd = fresh_socket();
    *keep = fd;
    struct fw_hdr h = {.magic = FW_MAGIC, .version = FW_VERSION, .src_epoch = rnd()};
    (void)!sendto(fd, &h, sizeof h, 0, (const struct sockaddr *)to, sizeof *to);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct fw_hdr a;
    if (poll(&p, 1, 200) != 1 || recv(fd, &a, sizeof a, 0) != (ssize_t)sizeof a ||
        a.magic != FW_MAGIC)
        return false;
    h.dst_epoch = a.src_epoch;
    (void)!sendto(fd, &h, sizeof h, 0, (const struct sockaddr *)to, sizeof *to);
    return true;
}

/* wire_seal.c's HELLO: magic, version, flags (ask), compact key, check,
 * nonce, cookie (none: zeros). */
#define FH_MAGIC    0x6b6e6c75u
#define FH_VERSION  2u
#define FH_ASK      0x1u
#define FH_COOKIE   0x2u
#define FC_FLAG     0x4u /* a COOKIE: magic, version, flags, nonce, cookie */
#define FC_LEN      (6u + 8u + 16u)
#define FH_AT_NONCE (6u + ULN_SEAL_PUB_COMPACT + 8u)
#define FH_LEN      (FH_AT_NONCE + 8u + 16u)

/* A HELLO with a fresh key pair into b. */
static void hello_make(uint8_t b[FH_LEN], enum uln_seal_cipher cipher)
{
    struct uln_seal_store st;
    struct uln_seal_pub me;
    uint32_t magic = FH_MAGIC;
    if (uln_seal_store_open(&st, ULN_SEAL_ENCRYPT, cipher, NULL, 1, 1) != 0) DIE("seal store\n");
    uln_seal_store_publish(&st, &me);
    memset(b, 0, FH_LEN);
    memcpy(b, &magic, 4);
    b[4] = FH_VERSION;
    b[5] = FH_ASK;
    if (uln_seal_pub_compact(&me, b + 6) != 0) DIE("compact\n");
    memcpy(b + 6 + ULN_SEAL_PUB_COMPACT, me.check, sizeof me.check);
    uln_seal_store_close(&st);
}

static double secs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One flood datagram: IP and UDP headers from a spoofed source, a HELLO
 * of the pool with nonce i. UDP's checksum 0: none (IPv4 allows it). */
struct spoofed {
    struct iphdr ip;
    struct udphdr udp;
    uint8_t hello[FH_LEN];
} __attribute__((packed));

static void spoof(struct spoofed *d, const struct sockaddr_in *to, const uint8_t *hello, uint64_t i)
{
    uint32_t r = rnd();
    memset(d, 0, sizeof *d);
    d->ip.version = 4;
    d->ip.ihl = 5;
    d->ip.ttl = 64;
    d->ip.protocol = IPPROTO_UDP;
    d->ip.tot_len = htons(sizeof *d); /* the kernel fills id and checksum */
    d->ip.saddr = htonl((ntohl(to->sin_addr.s_addr) & ~0xffu) | (250u + (uint32_t)i % SPOOF_IPS));
    d->ip.daddr = to->sin_addr.s_addr;
    d->udp.source = htons((uint16_t)(1024u + r % 64000u));
    d->udp.dest = to->sin_port;
    d->udp.len = htons(sizeof d->udp + FH_LEN);
    memcpy(d->hello, hello, FH_LEN);
    memcpy(d->hello + FH_AT_NONCE, &i, sizeof i);
    if (i / 2 % FORGED_COOKIE == 0) { /* a made-up cookie: refused, counted */
        d->hello[5] |= FH_COOKIE;
        memcpy(d->hello + FH_AT_NONCE + 8, &r, sizeof r);
        memcpy(d->hello + FH_AT_NONCE + 12, &i, sizeof i);
    }
}

/* A made-up COOKIE to host 0's service as if from host 1's (the answer to
 * its ask under the flood, but for a nonce it did not send): ignored. */
static void spoof_cookie(struct spoofed *d, const struct sockaddr_in *from,
                         const struct sockaddr_in *to, uint64_t i)
{
    uint32_t magic = FH_MAGIC, r = rnd();
    memset(d, 0, sizeof *d);
    d->ip.version = 4;
    d->ip.ihl = 5;
    d->ip.ttl = 64;
    d->ip.protocol = IPPROTO_UDP;
    d->ip.tot_len = htons(sizeof d->ip + sizeof d->udp + FC_LEN);
    d->ip.saddr = from->sin_addr.s_addr;
    d->ip.daddr = to->sin_addr.s_addr;
    d->udp.source = from->sin_port;
    d->udp.dest = to->sin_port;
    d->udp.len = htons(sizeof d->udp + FC_LEN);
    memcpy(d->hello, &magic, 4);
    d->hello[4] = FH_VERSION;
    d->hello[5] = FC_FLAG;
    memcpy(d->hello + 6, &i, sizeof i);  /* a nonce */
    memcpy(d->hello + 14, &r, sizeof r); /* a cookie */
    memcpy(d->hello + 18, &i, sizeof i);
}

/* The HELLO flood: RATE a second (0: none), paced by the clock in batches;
 * says "ready" on out after HELLO_READY_S, then how many in how long, and
 * sleeps until killed. */
static void hello_forger(const struct sockaddr_in *to, const struct sockaddr_in *back, int out,
                         unsigned rate, double for_s)
{
    enum uln_seal_cipher cipher;
    if (uln_seal_cipher_local(&cipher) != 0) DIE("cipher\n");
    static uint8_t pool[POOL][FH_LEN];
    for (unsigned k = 0; k < POOL; k++)
        hello_make(pool[k], cipher);
    int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW); /* IP_HDRINCL implied */
    (void)prctl(PR_SET_TIMERSLACK, 1ul, 0, 0, 0); /* sleeps of microseconds: even pacing */
    if (fd < 0) DIE("raw socket: %s\n", strerror(errno));
    static struct spoofed d[BATCH];
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    double t0 = secs(), t;
    uint64_t sent = 0;
    bool ready = false;
    const unsigned services = back ? 2 : 1;
    while ((t = secs() - t0) < for_s) {
        if (!ready && t >= HELLO_READY_S && out >= 0) {
            (void)!write(out, "forger: hellos started\n", 23);
            close(out);
            ready = true;
        }
        uint64_t due = (uint64_t)(t * rate * services); /* RATE at each service */
        while (sent < due) {
            unsigned n = due - sent < BATCH ? (unsigned)(due - sent) : BATCH;
            for (unsigned k = 0; k < n; k++) {
                uint64_t i = sent + k;
                const struct sockaddr_in *at = back && i % 2 ? back : to;
                if (back && i % (2 * FORGED_COOKIE) == 1)
                    spoof_cookie(&d[k], to, back, i);
                else
                    spoof(&d[k], at, pool[i % POOL], i);
                iov[k] = (struct iovec){&d[k], ntohs(d[k].ip.tot_len)};
                m[k] = (struct mmsghdr){.msg_hdr = {.msg_name = (void *)at,
                                                    .msg_namelen = sizeof *to,
                                                    .msg_iov = &iov[k],
                                                    .msg_iovlen = 1}};
            }
            int k = sendmmsg(fd, m, n, 0);
            if (k <= 0) {
                if (k < 0 && errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
                    DIE("sendmmsg: %s\n", strerror(errno));
                break; /* full: the next tick */
            }
            sent += (unsigned)k;
        }
        /* Till the next one is due: a flood as even as the clock allows (a
         * gapped one lets a real HELLO win the bucket's tokens in its gaps). */
        double next = t0 + (double)(sent + 1) / (rate ? (double)services * rate : 1000.0);
        struct timespec at = {.tv_sec = (time_t)next,
                              .tv_nsec = (long)((next - (double)(time_t)next) * 1e9)};
        (void)clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
    }
    if (!ready && out >= 0) {
        (void)!write(out, "forger: hellos started\n", 23);
        close(out);
    }
    printf("forger: hellos %llu in %.2f s\n", (unsigned long long)sent, secs() - t0);
    fflush(stdout);
    close(fd);
}

/* The forger, a child of rank 0: says "ready" on out once the blind and
 * proving rounds are done, then sprays until killed. */
static void forger(int out, bool hellos, unsigned rate)
{
    const char *ip = getenv("ULNTEST_HOST_1"), *ip0 = getenv("ULNTEST_HOST_0");
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(7475)}, back = to;
    if (!ip || inet_pton(AF_INET, ip, &to.sin_addr) != 1) DIE("no ULNTEST_HOST_1\n");
    if (hellos && (!ip0 || inet_pton(AF_INET, ip0, &back.sin_addr) != 1))
        DIE("no ULNTEST_HOST_0\n");
    if (hellos) {
        hello_forger(&to, &back, out, rate, HELLO_S);
        for (;;)
            pause();
    }
    for (unsigned i = 0; i < BLIND; i++)
        blind(&to);
    int keep[PROVE];
    unsigned proved = 0;
    for (unsigned i = 0; i < PROVE; i++)
        proved += prove(&to, &keep[i]);
    char msg[96];
    int n = snprintf(msg, sizeof msg, "forger: blind %u proved %u of %u\n", BLIND, proved, PROVE);
    (void)!write(out, msg, (size_t)n);
    close(out);
    for (;;) {
        blind(&to);
        usleep(200);
    }
}

static void fill(uint8_t *b, uint32_t seq, int from)
{
    for (uint32_t i = 0; i < LEN; i++)
        b[i] = (uint8_t)(seq * 31 + i + (uint32_t)from * 7);
}

static void drain(struct uln_cq *cq, uint32_t *done)
{
    struct uln_cqe e[64];
    int n = uln_cq_poll(cq, e, 64);
    for (int i = 0; i < n; i++)
        if (e[i].status) DIE("nap completion: %s\n", uln_strerror(e[i].status));
    *done += (uint32_t)(n > 0 ? n : 0);
}

/* N NAPs to each of ranks 1 and 3, interleaved; says how long after t0
 * (before uln_open) the first completed: the services' keying is in it. */
static void send_all(struct uln_ep *ep, struct uln_cq *cq, int me, double t0)
{
    uint8_t *all = malloc((size_t)N * LEN);
    if (!all) DIE("malloc\n");
    for (uint32_t seq = 0; seq < N; seq++)
        fill(all + (size_t)seq * LEN, seq, me);
    uint32_t done = 0;
    for (uint32_t k = 0; k < 2 * N;) {
        int rc = uln_nap(ep, k % 2 ? 3 : 1, all + (size_t)(k / 2) * LEN, LEN, k / 2, 0);
        if (rc == 0)
            k++;
        else if (rc != -EAGAIN)
            DIE("nap: %s\n", uln_strerror(rc));
        uint32_t before = done;
        drain(cq, &done);
        if (!before && done) {
            printf("forger: rank %d first NAP done in %.3f s\n", me, secs() - t0);
            fflush(stdout);
        }
        if (rc == -EAGAIN) uln_cq_wait(cq, 10);
    }
    while (done < 2 * N) {
        drain(cq, &done);
        if (done < 2 * N) uln_cq_wait(cq, 10);
    }
    free(all);
}

/* N from each of ranks 0 and 2, each in order, data checked; says how
 * long after t0 (before uln_open) the first arrived: no datagram crosses
 * between the services before they keyed each other. */
static void recv_all(struct uln_cq *cq, int me, double t0)
{
    uint32_t next[4] = {0};
    uint8_t want[LEN];
    while (next[0] < N || next[2] < N) {
        struct uln_cqe e;
        if (uln_cq_poll(cq, &e, 1) != 1) {
            uln_cq_wait(cq, 10);
            continue;
        }
        if (e.op != ULN_OP_NAP_RECV || (e.peer != 0 && e.peer != 2) || e.len != LEN)
            DIE("unexpected completion op %u peer %d len %llu\n", e.op, e.peer,
                (unsigned long long)e.len);
        if (!next[0] && !next[2]) {
            printf("forger: rank %d first NAP in %.3f s\n", me, secs() - t0);
            fflush(stdout);
        }
        fill(want, next[e.peer], e.peer);
        if (memcmp(e.data, want, LEN)) DIE("NAP %u from %d: wrong data\n", next[e.peer], e.peer);
        next[e.peer]++;
        uln_cqe_release(cq, &e);
    }
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "flood")) { /* flood RATE SECONDS IP: that alone */
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(7475)};
        if (inet_pton(AF_INET, argv[4], &to.sin_addr) != 1) DIE("flood: not an address\n");
        hello_forger(&to, NULL, -1, (unsigned)strtoul(argv[2], NULL, 10), atof(argv[3]));
        return 0;
    }
    bool hellos = argc > 1 && !strcmp(argv[1], "hello");
    unsigned rate = hellos && argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 1000u;
    int r = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "-1");
    pid_t child = -1;
    if (r == 0) { /* before ulnet: the forger's sockets are its own */
        int p[2];
        if (pipe(p)) DIE("pipe\n");
        child = fork();
        if (child < 0) DIE("fork\n");
        if (child == 0) {
            close(p[0]);
            forger(p[1], hellos, rate);
        }
        close(p[1]);
        char msg[96] = {0};
        if (read(p[0], msg, sizeof msg - 1) <= 0) DIE("the forger ended early\n");
        close(p[0]);
        fputs(msg, stdout);
        fflush(stdout);
    }
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    double t0 = secs();
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_size(ctx) != 4) DIE("run with 4 ranks\n");
    if (r == 1) {
        printf("forger: netns %s\n", getenv("ULNTEST_NETNS") ? getenv("ULNTEST_NETNS") : "?");
        fflush(stdout);
    }
    if (r == 0 || r == 2)
        send_all(ep, cq, r, t0);
    else
        recv_all(cq, r, t0);
    printf("forger: rank %d stream done\n", r);
    fflush(stdout);
    sleep(PROVE_SILENCE); /* the proven forged sources fall silent and are freed */
    if (r == 1) {
        printf("forger: rank 1 done\n");
        fflush(stdout);
        sleep(3); /* the script reads --status meanwhile */
    }
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
