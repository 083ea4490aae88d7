/*
 * passive.c - one-sided operations into a process that sleeps in pause()
 * the whole time: the service places the PUTs and answers the GETs.
 *
 * Two ranks, ULN_TRANSPORT=svc. Rank 1 registers LEN bytes of plain memory,
 * sends rank 0 the key and its pid, and calls pause() (passive.sh kills it
 * until rank 0 ends it with SIGUSR1). Rank 0 PUTs a pattern, GETs it back
 * in pieces and checks every byte, and checks that a bad key and a range
 * past the end are refused (-ENOKEY, -ERANGE) - all within a bound, with the
 * target never calling ulnet. Then it reads the target's CPU time (the
 * ranks share a pid namespace: one host, or network-namespace hosts),
 * which must be its start-up's alone, and prints "passive: ok".
 * Run on one host (passive.sh) and across two (netns.svc_passive): there
 * the target's service places what arrives over the wire.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"

#define LEN      (16u << 20)
#define DIE(...) (fprintf(stderr, "passive: " __VA_ARGS__), exit(1))

/* The target's CPU time (user + system) in clock ticks, or -1. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

static void end_target(int sig)
{
    (void)sig;
    _exit(0);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct uln_cqe take(struct uln_cq *cq)
{
    struct uln_cqe e;
    double end = now_s() + 60; /* a bound on a hang, not a timing */
    while (now_s() < end) {
        if (uln_cq_poll(cq, &e, 1) == 1) return e;
        uln_cq_wait(cq, 100);
    }
    DIE("no completion within 60 s\n");
}

static int expect(struct uln_cq *cq, uint64_t ud, int status, const char *what)
{
    struct uln_cqe e = take(cq);
    if (e.user_data == ud && e.status == status) return 0;
    fprintf(stderr, "passive: %s: completion %llu status %d (%s), expected %d\n", what,
            (unsigned long long)e.user_data, e.status, uln_strerror(e.status), status);
    return 1;
}

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    uint8_t *buf = malloc(LEN), *back = malloc(LEN);
    if (!buf || !back) DIE("malloc\n");
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 1024, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_rank(ctx) == 1) {
        struct uln_mr *mr;
        memset(buf, 0, LEN);
        if (uln_mr_reg(ctx, buf, LEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr))
            DIE("reg\n");
        signal(SIGUSR1, end_target);
        uint64_t msg[2] = {uln_mr_key(mr), (uint64_t)getpid()};
        if (uln_nap(ep, 0, msg, sizeof msg, 1, 0)) DIE("nap\n");
        struct uln_cqe e = take(cq);
        if (e.status) DIE("nap: %d\n", e.status);
        for (;;)
            pause(); /* never calls ulnet again */
    }
    struct uln_cqe e = take(cq);
    uint64_t msg[2];
    if (e.op != ULN_OP_NAP_RECV || e.len != sizeof msg) DIE("no key\n");
    memcpy(msg, e.data, sizeof msg);
    uln_cqe_release(cq, &e);
    uint64_t key = msg[0];
    for (uint32_t i = 0; i < LEN; i++)
        buf[i] = (uint8_t)(i * 7 + (i >> 12));
    int fails = 0;
    double t0 = now_s();
    if (uln_put(ep, 1, buf, LEN, key, 0, 1, 0)) DIE("put\n");
    fails += expect(cq, 1, 0, "PUT 16 MiB");
    double t1 = now_s();
    /* Back in four GETs of about a quarter each, two meeting at an odd offset. */
    static const uint32_t at[5] = {0, LEN / 4, LEN / 2 + 3, 3 * (LEN / 4), LEN};
    for (int q = 0; q < 4; q++) {
        uint32_t off = at[q], n = at[q + 1] - at[q];
        if (uln_get(ep, 1, back + off, n, key, off, 10 + q, 0)) DIE("get\n");
        fails += expect(cq, 10 + (uint64_t)q, 0, "GET");
    }
    double t2 = now_s();
    fails += memcmp(buf, back, LEN) != 0;
    for (uint32_t i = 0; i < LEN; i++)
        if (buf[i] != back[i]) {
            fprintf(stderr, "passive: the data read back differs from byte %u on\n", i);
            break;
        }
    /* Refused, writing nothing. */
    if (uln_put(ep, 1, buf, 64, key ^ 0x5555, 0, 20, 0)) DIE("put\n");
    fails += expect(cq, 20, -ENOKEY, "PUT with a bad key");
    if (uln_put(ep, 1, buf, 64, key, LEN - 32, 21, 0)) DIE("put\n");
    fails += expect(cq, 21, -ERANGE, "PUT past the end");
    if (uln_get(ep, 1, back, 64, key, LEN, 22, 0)) DIE("get\n");
    fails += expect(cq, 22, -ERANGE, "GET past the end");
    pid_t target = (pid_t)msg[1];
    long ticks = cpu_ticks(target), hz = sysconf(_SC_CLK_TCK);
    printf("passive: PUT 16 MiB %.3f s, GET 16 MiB %.3f s, target pid %d, initiator pid %d\n",
           t1 - t0, t2 - t1, (int)target, (int)getpid());
    /* Asleep the whole time, it used only its start-up's CPU (registering
     * and clearing 16 MiB: a few ticks, more under ASan): the copies were
     * the service's. A target that served them itself would not have slept. */
    printf("passive: the target's CPU time: %ld ticks of 1/%ld s\n", ticks, hz);
    if (ticks < 0 || ticks > hz / 2) {
        fprintf(stderr, "passive: the target's CPU time %ld ticks (limit %ld)\n", ticks, hz / 2);
        fails++;
    }
    kill(target, SIGUSR1);
    /* Closed before "ok": a close that hangs, or leaks (ASan), fails the case. */
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    free(buf);
    free(back);
    if (!fails) printf("passive: ok\n");
    fflush(stdout);
    return fails ? 1 : 0;
}
