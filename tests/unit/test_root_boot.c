/*
 * test_root_boot.c - bootstrap through rank 0 over TCP (ULN_ROOT=ip:port),
 * with ranks forked from this program and nothing but the environment.
 *
 * Each case forks its ranks, gives each ULN_RANK/ULN_SIZE/ULN_ROOT on a free
 * loopback port, and reads the outcome from the exit status: 0 for success,
 * the errno uln_open failed with, or CHILD_CHECK when a check inside the child
 * failed (it says which on stderr). Every wait has a deadline, so a hang shows
 * up as a failed check, not as a ctest timeout.
 *
 * Ranks on one host talk over shared memory, which works with any board: the
 * exchange below proves the table of addresses arrived intact.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/diag.h"
#include "check.h"

#define CHILD_CHECK 250 /* exit status of a child whose own check failed */
#define NO_EXIT     (-1)

static int port;
static char root_env[64];

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* A port below the kernel's ephemeral range (32768 and up by default) that
 * binds now. One the kernel picked from that range could be handed out again
 * at once as the local port of another test's connection (ctest runs two at
 * a time), and then no rank 0 could listen on it. */
static void fresh_port(void)
{
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        int p = 20000 + (int)(rand_r(&seed) % 12000u);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)p),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd < 0) break;
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (!ok) continue;
        port = p;
        snprintf(root_env, sizeof root_env, "127.0.0.1:%d", port);
        return;
    }
    perror("fresh_port");
    exit(1);
}

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__, __LINE__, #c);   \
            exit(CHILD_CHECK);                                                                     \
        }                                                                                          \
    } while (0)

/* What a child does after uln_open succeeded. */
enum job { RING, BARRIERS, LEAVE, STAY };

struct ring_msg {
    int32_t rank;
    uint32_t pad;
    uint64_t key;
};

/* Every rank sends {rank, job key} to rank+1 and checks what rank-1 sent: all
 * ranks agree on the key, and every address in the table works. */
static void ring(struct uln_ctx *ctx, int rank, int size)
{
    struct uln_cq *cq;
    struct uln_ep *ep;
    REQUIRE(uln_cq_open(ctx, 64, &cq) == 0);
    REQUIRE(uln_ep_open(ctx, cq, cq, &ep) == 0);
    REQUIRE(uln_barrier(ctx, 10000) == 0); /* everybody's endpoint is open */
    struct ring_msg m = {.rank = rank, .key = uln_job_key(ctx)};
    REQUIRE(uln_nap(ep, (rank + 1) % size, &m, sizeof m, 7, ULN_INLINE) == 0);
    int sent = 0, got = 0;
    long long end = now_ms() + 10000;
    while ((!sent || !got) && now_ms() < end) {
        struct uln_cqe e[8];
        if (uln_cq_wait(cq, 100) != 0) continue;
        int n = uln_cq_poll(cq, e, 8);
        REQUIRE(n >= 0);
        for (int i = 0; i < n; i++) {
            REQUIRE(e[i].status == 0);
            if (e[i].op == ULN_OP_NAP) {
                REQUIRE(e[i].user_data == 7);
                sent++;
            } else if (e[i].op == ULN_OP_NAP_RECV) {
                struct ring_msg r;
                REQUIRE(e[i].len == sizeof r);
                memcpy(&r, e[i].data, sizeof r);
                REQUIRE(e[i].peer == (rank + size - 1) % size);
                REQUIRE(r.rank == e[i].peer);
                REQUIRE(r.key == uln_job_key(ctx));
                if (e[i].flags & ULN_CQE_MUST_RELEASE) REQUIRE(uln_cqe_release(cq, &e[i]) == 0);
                got++;
            }
        }
    }
    REQUIRE(sent == 1 && got == 1);
    REQUIRE(uln_barrier(ctx, 10000) == 0); /* nobody leaves while a peer still reads */
}

static int child(int rank, enum job job)
{
    alarm(30); /* last resort: the parent's deadlines come first */
    struct uln_ctx *ctx;
    int rc = uln_open(NULL, &ctx);
    if (rc) exit(-rc);
    int size = uln_size(ctx);
    REQUIRE(uln_rank(ctx) == rank);
    REQUIRE(uln_job_key(ctx) != 0);
    const char *want = getenv("T_KEY");
    if (want) REQUIRE(uln_job_key(ctx) == strtoull(want, NULL, 16));
    REQUIRE(strcmp(uln_diag_boot_mode(ctx), "root") == 0);
    struct sockaddr_storage ss;
    socklen_t len;
    REQUIRE(uln_diag_boot_route(ctx, &ss, &len) == 0);
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    REQUIRE(ss.ss_family == AF_INET && len == sizeof *a);
    REQUIRE(a->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && a->sin_port == 0);

    if (job == RING) {
        ring(ctx, rank, size);
    } else if (job == BARRIERS) {
        /* size 2. Rank 0's first wait times out; its second call must wait for
         * the same barrier, not start another. */
        if (rank == 0) {
            long long t0 = now_ms();
            REQUIRE(uln_barrier(ctx, 200) == -ETIMEDOUT);
            REQUIRE(now_ms() - t0 < 2000);
        } else {
            usleep(800 * 1000);
        }
        REQUIRE(uln_barrier(ctx, 10000) == 0);
        REQUIRE(uln_barrier(ctx, 10000) == 0);
    } else if (job == LEAVE) {
        /* The peer that stays learns of it in its next barrier. */
    } else if (job == STAY) {
        long long t0 = now_ms();
        REQUIRE(uln_barrier(ctx, 10000) == -ECONNRESET);
        REQUIRE(now_ms() - t0 < 5000);
    }
    REQUIRE(uln_close(ctx) == 0);
    return 0;
}

/* Fork a rank; env is extra "NAME=value" settings (NULL-terminated). */
static pid_t spawn(int rank, int size, enum job job, const char *const *env)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    char r[16], n[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(n, sizeof n, "%d", size);
    unsetenv("ULN_BOOT_FD");
    unsetenv("ULN_JOB_KEY");
    setenv("ULN_RANK", r, 1);
    setenv("ULN_SIZE", n, 1);
    setenv("ULN_ROOT", root_env, 1);
    setenv("ULN_BOOT_TIMEOUT", "20", 1);
    for (int i = 0; env && env[i]; i++)
        putenv((char *)env[i]);
    exit(child(rank, job));
}

/* The exit status of pid, or NO_EXIT if it has not ended by deadline (ms). */
static int reap(pid_t pid, long long deadline)
{
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (w < 0 || now_ms() >= deadline) break;
        usleep(5000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return NO_EXIT;
}

/* Whichever of a and b ends first: its status, and *which is that pid. */
static int reap_either(pid_t a, pid_t b, long long deadline, pid_t *which)
{
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == a || w == b) {
            *which = w;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (now_ms() >= deadline) break;
        usleep(5000);
    }
    *which = 0;
    return NO_EXIT;
}

static void case_ring(void)
{
    /* Rank 0 last: the others must keep trying until it listens. */
    enum { N = 4 };
    fresh_port();
    pid_t p[N];
    for (int r = 1; r < N; r++)
        p[r] = spawn(r, N, RING, NULL);
    usleep(300 * 1000);
    p[0] = spawn(0, N, RING, NULL);
    long long end = now_ms() + 25000;
    for (int r = 0; r < N; r++)
        CHECK_EQ(reap(p[r], end), 0);
}

static void case_key_from_one_rank(void)
{
    /* Only rank 1 has a key: the whole job takes it. */
    enum { N = 3 };
    fresh_port();
    static const char *const with[] = {"ULN_JOB_KEY=abc123", "T_KEY=abc123", NULL};
    static const char *const without[] = {"T_KEY=abc123", NULL};
    pid_t p[N];
    p[0] = spawn(0, N, RING, without);
    p[1] = spawn(1, N, RING, with);
    usleep(200 * 1000); /* rank 1's hello first, so the key is known when rank 2 comes */
    p[2] = spawn(2, N, RING, without);
    long long end = now_ms() + 25000;
    for (int r = 0; r < N; r++)
        CHECK_EQ(reap(p[r], end), 0);
}

static void case_single(void)
{
    fresh_port();
    pid_t p = spawn(0, 1, RING, NULL); /* a ring of one: to itself */
    CHECK_EQ(reap(p, now_ms() + 10000), 0);
}

static void case_duplicate_rank(void)
{
    /* Two rank 1s: one is refused at once with EADDRINUSE; rank 2 comes only
     * after that, so rank 0 is still listening when the second one knocks. */
    enum { N = 3 };
    fresh_port();
    pid_t p0 = spawn(0, N, RING, NULL), a = spawn(1, N, RING, NULL), b = spawn(1, N, RING, NULL);
    pid_t which;
    long long t0 = now_ms();
    CHECK_EQ(reap_either(a, b, t0 + 10000, &which), EADDRINUSE);
    CHECK(now_ms() - t0 < 5000);
    pid_t other = which == a ? b : a;
    pid_t p2 = spawn(2, N, RING, NULL);
    long long end = now_ms() + 25000;
    CHECK_EQ(reap(p0, end), 0);
    CHECK_EQ(reap(other, end), 0);
    CHECK_EQ(reap(p2, end), 0);

    /* Two rank 0s: the second cannot listen on the port. */
    fresh_port();
    a = spawn(0, 2, RING, NULL);
    b = spawn(0, 2, RING, NULL);
    t0 = now_ms();
    CHECK_EQ(reap_either(a, b, t0 + 10000, &which), EADDRINUSE);
    other = which == a ? b : a;
    pid_t p1 = spawn(1, 2, RING, NULL);
    end = now_ms() + 25000;
    CHECK_EQ(reap(other, end), 0);
    CHECK_EQ(reap(p1, end), 0);
}

static void case_missing_rank(void)
{
    /* Rank 3 never comes: everybody fails with ETIMEDOUT soon after 2 s. */
    enum { N = 4 };
    static const char *const quick[] = {"ULN_BOOT_TIMEOUT=2", NULL};
    fresh_port();
    pid_t p[N - 1];
    long long t0 = now_ms();
    for (int r = 0; r < N - 1; r++)
        p[r] = spawn(r, N, RING, quick);
    for (int r = 0; r < N - 1; r++)
        CHECK_EQ(reap(p[r], t0 + 10000), ETIMEDOUT);
    CHECK(now_ms() - t0 < 3500);

    /* Rank 0 never comes. */
    static const char *const quicker[] = {"ULN_BOOT_TIMEOUT=1", NULL};
    fresh_port();
    t0 = now_ms();
    pid_t p1 = spawn(1, 2, RING, quicker);
    CHECK_EQ(reap(p1, t0 + 10000), ETIMEDOUT);
    CHECK(now_ms() - t0 < 2500);
}

static void case_refused(void)
{
    /* Rank 2 with another key, then rank 2 with another size: both refused
     * with EINVAL at once, and the job still forms when the right one comes. */
    enum { N = 3 };
    static const char *const key_a[] = {"ULN_JOB_KEY=aaaa", "T_KEY=aaaa", NULL};
    static const char *const key_b[] = {"ULN_JOB_KEY=bbbb", NULL};
    fresh_port();
    pid_t p0 = spawn(0, N, RING, key_a), p1 = spawn(1, N, RING, key_a);
    long long t0 = now_ms();
    CHECK_EQ(reap(spawn(2, N, RING, key_b), t0 + 10000), EINVAL);
    CHECK_EQ(reap(spawn(2, N + 1, RING, key_a), t0 + 10000), EINVAL);
    CHECK(now_ms() - t0 < 5000);
    pid_t p2 = spawn(2, N, RING, key_a);
    long long end = now_ms() + 25000;
    CHECK_EQ(reap(p0, end), 0);
    CHECK_EQ(reap(p1, end), 0);
    CHECK_EQ(reap(p2, end), 0);
}

static int connect_root(void)
{
    long long end = now_ms() + 10000;
    while (now_ms() < end) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        usleep(10000);
    }
    return -1;
}

static void case_garbage(void)
{
    /* Strangers reach rank 0 before any rank does: one sends junk, one sends a
     * few bytes and leaves, one says nothing and stays. None may count. */
    enum { N = 3 };
    fresh_port();
    pid_t p0 = spawn(0, N, RING, NULL);
    int junk = connect_root(), brief = connect_root(), silent = connect_root();
    CHECK(junk >= 0 && brief >= 0 && silent >= 0);
    char buf[200];
    memset(buf, 0xa5, sizeof buf);
    memcpy(buf, "GET / HTTP/1.0\r\n\r\n", 18);
    CHECK(send(junk, buf, sizeof buf, MSG_NOSIGNAL) == (ssize_t)sizeof buf);
    CHECK(send(brief, "ulnroot", 7, MSG_NOSIGNAL) == 7);
    close(brief);
    usleep(100 * 1000);
    pid_t p1 = spawn(1, N, RING, NULL), p2 = spawn(2, N, RING, NULL);
    long long end = now_ms() + 25000;
    CHECK_EQ(reap(p0, end), 0);
    CHECK_EQ(reap(p1, end), 0);
    CHECK_EQ(reap(p2, end), 0);
    /* Rank 0 dropped the junk without an answer. */
    CHECK(recv(junk, buf, sizeof buf, MSG_DONTWAIT) <= 0);
    close(junk);
    close(silent);
}

static void case_barriers(void)
{
    fresh_port();
    pid_t a = spawn(0, 2, BARRIERS, NULL), b = spawn(1, 2, BARRIERS, NULL);
    long long end = now_ms() + 25000;
    CHECK_EQ(reap(a, end), 0);
    CHECK_EQ(reap(b, end), 0);

    /* A peer that leaves: the other's barrier says so, whichever side left. */
    for (int leaver = 0; leaver < 2; leaver++) {
        fresh_port();
        a = spawn(0, 2, leaver == 0 ? LEAVE : STAY, NULL);
        b = spawn(1, 2, leaver == 1 ? LEAVE : STAY, NULL);
        end = now_ms() + 25000;
        CHECK_EQ(reap(a, end), 0);
        CHECK_EQ(reap(b, end), 0);
    }
}

int main(void)
{
    /* In this process: no ULN_ROOT, so a job of one on its own board. */
    unsetenv("ULN_ROOT");
    unsetenv("ULN_BOOT_FD");
    unsetenv("ULN_SIZE");
    unsetenv("ULN_RANK");
    struct uln_ctx *ctx;
    struct sockaddr_storage ss;
    socklen_t len;
    CHECK(uln_open(NULL, &ctx) == 0);
    CHECK(strcmp(uln_diag_boot_mode(ctx), "single") == 0);
    CHECK(uln_diag_boot_route(ctx, &ss, &len) == -ENOENT);
    CHECK(uln_close(ctx) == 0);

    struct {
        const char *name;
        void (*run)(void);
    } cases[] = {
        {"ring of 4, rank 0 last", case_ring}, {"job key from one rank", case_key_from_one_rank},
        {"job of one", case_single},           {"duplicate rank", case_duplicate_rank},
        {"missing rank", case_missing_rank},   {"refused: key, size", case_refused},
        {"garbage clients", case_garbage},     {"barriers", case_barriers},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int before = failed;
        long long t0 = now_ms();
        cases[i].run();
        printf("%-28s %s (%lld ms)\n", cases[i].name, failed == before ? "ok" : "FAILED",
               now_ms() - t0);
        fflush(stdout);
    }
    return summary();
}
