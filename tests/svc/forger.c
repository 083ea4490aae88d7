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
 * With the argument "hello" (tests/netns/svc_forger.sh hello, the services
 * run --secure encrypt without a secret) the forger sends HELLOS of the
 * sealed wire's HELLOs instead, each from a fresh port with a fresh X25519
 * key pair, the right mode and the check it computes (without a secret it
 * is computable), asking for an answer, HELLO_GAP_US apart; rank 0 starts
 * the job once the first HELLO_READY are out, so the real services key each
 * other while it goes on. It then prints how many it sent, in how long.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#define PROVE_SILENCE 5u /* s: rel's dead state (3 s after a keepalive probe at 0.5 s) + slack */
#define HELLOS        4000u
#define HELLO_READY   2500u
#define HELLO_GAP_US  1000u
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

/* wire_seal.c's HELLO: magic, version, flags (ask), compact key, check. */
#define FH_MAGIC   0x6b6e6c75u
#define FH_VERSION 1u
#define FH_ASK     0x1u
#define FH_LEN     (4u + 2u + ULN_SEAL_PUB_COMPACT + 8u)

/* One HELLO with a fresh key pair from a fresh port. */
static void hello(const struct sockaddr_in *to, enum uln_seal_cipher cipher)
{
    struct uln_seal_store st;
    struct uln_seal_pub me;
    uint8_t b[FH_LEN];
    uint32_t magic = FH_MAGIC;
    if (uln_seal_store_open(&st, ULN_SEAL_ENCRYPT, cipher, NULL, 1, 1) != 0) DIE("seal store\n");
    uln_seal_store_publish(&st, &me);
    memcpy(b, &magic, 4);
    b[4] = FH_VERSION;
    b[5] = FH_ASK;
    if (uln_seal_pub_compact(&me, b + 6) != 0) DIE("compact\n");
    memcpy(b + 6 + ULN_SEAL_PUB_COMPACT, me.check, sizeof me.check);
    uln_seal_store_close(&st);
    int fd = fresh_socket();
    (void)!sendto(fd, b, sizeof b, 0, (const struct sockaddr *)to, sizeof *to);
    close(fd);
}

static double secs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The HELLO forger: ready after HELLO_READY, then the rest, then says how
 * many in how long (from the first) and sleeps until killed. */
static void hello_forger(const struct sockaddr_in *to, int out)
{
    enum uln_seal_cipher cipher;
    if (uln_seal_cipher_local(&cipher) != 0) DIE("cipher\n");
    double t0 = secs();
    for (unsigned i = 0; i < HELLOS; i++) {
        hello(to, cipher);
        if (i + 1 == HELLO_READY) {
            (void)!write(out, "forger: hellos started\n", 23);
            close(out);
        }
        usleep(HELLO_GAP_US);
    }
    printf("forger: hellos %u in %.2f s\n", HELLOS, secs() - t0);
    fflush(stdout);
    for (;;)
        pause();
}

/* The forger, a child of rank 0: says "ready" on out once the blind and
 * proving rounds are done, then sprays until killed. */
static void forger(int out, bool hellos)
{
    const char *ip = getenv("ULNTEST_HOST_1");
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(7475)};
    if (!ip || inet_pton(AF_INET, ip, &to.sin_addr) != 1) DIE("no ULNTEST_HOST_1\n");
    if (hellos) hello_forger(&to, out);
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

/* N NAPs to each of ranks 1 and 3, interleaved. */
static void send_all(struct uln_ep *ep, struct uln_cq *cq, int me)
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
        drain(cq, &done);
        if (rc == -EAGAIN) uln_cq_wait(cq, 10);
    }
    while (done < 2 * N) {
        drain(cq, &done);
        if (done < 2 * N) uln_cq_wait(cq, 10);
    }
    free(all);
}

/* N from each of ranks 0 and 2, each in order, data checked. */
static void recv_all(struct uln_cq *cq)
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
        fill(want, next[e.peer], e.peer);
        if (memcmp(e.data, want, LEN)) DIE("NAP %u from %d: wrong data\n", next[e.peer], e.peer);
        next[e.peer]++;
        uln_cqe_release(cq, &e);
    }
}

int main(int argc, char **argv)
{
    bool hellos = argc > 1 && !strcmp(argv[1], "hello");
    int r = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "-1");
    pid_t child = -1;
    if (r == 0) { /* before ulnet: the forger's sockets are its own */
        int p[2];
        if (pipe(p)) DIE("pipe\n");
        child = fork();
        if (child < 0) DIE("fork\n");
        if (child == 0) {
            close(p[0]);
            forger(p[1], hellos);
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
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_size(ctx) != 4) DIE("run with 4 ranks\n");
    if (r == 1) {
        printf("forger: netns %s\n", getenv("ULNTEST_NETNS") ? getenv("ULNTEST_NETNS") : "?");
        fflush(stdout);
    }
    if (r == 0 || r == 2)
        send_all(ep, cq, r);
    else
        recv_all(cq);
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
