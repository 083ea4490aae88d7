/*
 * passive.c - one-sided operations into a process that does not call ulnet:
 * the service places the PUTs, answers the GETs and applies the atomics.
 *
 * Two ranks. Rank 1 registers LEN bytes of memory from uln_mem_alloc (the
 * service maps it: PUT and GET copy through the mapping, atomics on the
 * mapped word) and LEN bytes of malloc'd memory (process_vm_*), sends rank 0
 * the keys and its pid, and then
 *   passive         calls pause() until rank 0 ends it with SIGUSR1;
 *   passive SECS    sleeps SECS seconds, then waits in ulnet for rank 0's
 *                   last word (the figure: bench/svc_sleeper.sh).
 * Rank 0, on uln_mem_alloc memory: PUTs 16 MiB, GETs it back in four pieces,
 * does 1000 fetch-adds on one word (64 in flight: every value fetched
 * distinct, the word up by exactly 1000) - timed together, "figure" - then
 * the same PUT and GET on the malloc'd memory, compare-and-swaps (one that
 * matches, one that does not and writes nothing), and the refusals: a bad
 * key, a PUT, a GET and an atomic past the end, a misaligned atomic
 * (-ENOKEY, -ERANGE, -EDOM, as the direct paths give). Every completion
 * has a 60 s bound (a hang, not a timing). In pause mode it then reads the
 * target's CPU time (the ranks share a pid namespace: one host, or
 * network-namespace hosts), which must be its start-up's alone, and prints
 * "passive: ok". Run on one host (passive.sh) and across two
 * (netns.svc_passive): there the target's service serves what arrives over
 * the wire.
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
#define FADDS    1000u
#define WINDOW   64u
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

/* Rank 1: register, tell rank 0, then never call ulnet (or only after secs). */
static void target(struct uln_ctx *ctx, struct uln_ep *ep, struct uln_cq *cq, int secs)
{
    uint8_t *plain = malloc(LEN);
    void *mem;
    struct uln_mr *mp, *mm;
    if (!plain || uln_mem_alloc(ctx, LEN, &mem)) DIE("memory\n");
    memset(plain, 0, LEN);
    memset(mem, 0, LEN);
    if (uln_mr_reg(ctx, plain, LEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mp) ||
        uln_mr_reg(ctx, mem, LEN,
                   ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC,
                   &mm))
        DIE("reg\n");
    signal(SIGUSR1, end_target);
    uint64_t msg[3] = {uln_mr_key(mp), uln_mr_key(mm), (uint64_t)getpid()};
    if (uln_nap(ep, 0, msg, sizeof msg, 1, 0)) DIE("nap\n");
    struct uln_cqe e = take(cq);
    if (e.status) DIE("nap: %d\n", e.status);
    if (secs < 0)
        for (;;)
            pause(); /* never calls ulnet again */
    struct timespec t = {.tv_sec = secs};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;      /* asleep, no ulnet call: a progress thread may run */
    for (;;) { /* now in ulnet: until rank 0's last word */
        e = take(cq);
        if (e.op == ULN_OP_NAP_RECV) break;
    }
    uln_cqe_release(cq, &e);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    exit(0);
}

/* PUT buf into the region, GET it back in four pieces (two meeting at an
 * odd offset), every byte checked: failures. */
static int put_get(struct uln_ep *ep, struct uln_cq *cq, const uint8_t *buf, uint8_t *back,
                   uint64_t key, const char *kind, double *t_put, double *t_get)
{
    int fails = 0;
    double t0 = now_s();
    if (uln_put(ep, 1, buf, LEN, key, 0, 1, 0)) DIE("put\n");
    fails += expect(cq, 1, 0, "PUT 16 MiB");
    static const uint32_t at[5] = {0, LEN / 4, LEN / 2 + 3, 3 * (LEN / 4), LEN};
    memset(back, 0, LEN);
    double t1 = now_s(); /* back's pages are in: the GET's time is the GET's */
    for (int q = 0; q < 4; q++) {
        uint32_t off = at[q], n = at[q + 1] - at[q];
        if (uln_get(ep, 1, back + off, n, key, off, 10 + q, 0)) DIE("get\n");
        fails += expect(cq, 10 + (uint64_t)q, 0, "GET");
    }
    *t_put = t1 - t0;
    *t_get = now_s() - t1;
    for (uint32_t i = 0; i < LEN; i++)
        if (buf[i] != back[i]) {
            fprintf(stderr, "passive: %s: the data read back differs from byte %u on\n", kind, i);
            return fails + 1;
        }
    return fails;
}

static int atomic_post(struct uln_ep *ep, unsigned op, uint64_t key, uint64_t off, uint64_t v,
                       uint64_t cmp, uint64_t *res, uint64_t ud)
{
    return uln_atomic(ep, 1, op, 8, key, off, v, cmp, res, ud, 0);
}

/* FADDS fetch-adds of 1 on the word at offset 0 (it holds `first`), WINDOW
 * in flight: each value first .. first + FADDS - 1 fetched once. Failures. */
static int fadds(struct uln_ep *ep, struct uln_cq *cq, uint64_t key, uint64_t first)
{
    static uint64_t res[FADDS];
    static uint8_t seen[FADDS];
    uint32_t posted = 0, done = 0;
    int fails = 0;
    memset(seen, 0, sizeof seen);
    while (done < FADDS) {
        while (posted < FADDS && posted - done < WINDOW) {
            int rc = atomic_post(ep, ULN_ATOMIC_ADD, key, 0, 1, 0, &res[posted], 100 + posted);
            if (rc == -EAGAIN) break;
            if (rc) DIE("atomic: %d\n", rc);
            posted++;
        }
        struct uln_cqe e = take(cq);
        if (e.status || e.op != ULN_OP_ATOMIC || e.user_data < 100 || e.user_data >= 100 + FADDS) {
            fprintf(stderr, "passive: fetch-add %llu: status %d\n", (unsigned long long)e.user_data,
                    e.status);
            fails++;
        } else {
            uint64_t v = res[e.user_data - 100] - first;
            if (v >= FADDS || seen[v]++) {
                fprintf(stderr, "passive: fetch-add fetched %llu twice or out of range\n",
                        (unsigned long long)(v + first));
                fails++;
            }
        }
        done++;
    }
    return fails;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : -1;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 1024, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    if (uln_rank(ctx) == 1) target(ctx, ep, cq, secs);
    uint8_t *buf = malloc(LEN), *back = malloc(LEN);
    if (!buf || !back) DIE("malloc\n");
    struct uln_cqe e = take(cq);
    uint64_t msg[3];
    if (e.op != ULN_OP_NAP_RECV || e.len != sizeof msg) DIE("no keys\n");
    memcpy(msg, e.data, sizeof msg);
    uln_cqe_release(cq, &e);
    uint64_t kp = msg[0], km = msg[1];
    pid_t pid = (pid_t)msg[2];
    for (uint32_t i = 0; i < LEN; i++)
        buf[i] = (uint8_t)(i * 7 + (i >> 12));
    memset(back, 0, LEN); /* its pages in before anything is timed */
    int fails = 0;
    double t0 = now_s(), mp, mg, pp, pg;
    /* The figure: PUT, GET and the fetch-adds on uln_mem_alloc memory. */
    fails += put_get(ep, cq, buf, back, km, "uln_mem_alloc", &mp, &mg);
    uint64_t first;
    memcpy(&first, buf, sizeof first);
    double t1 = now_s();
    fails += fadds(ep, cq, km, first);
    double t2 = now_s();
    fails += put_get(ep, cq, buf, back, kp, "malloc", &pp, &pg);
    /* CAS: one that matches, one that does not (nothing written). */
    uint64_t old = 0, word = 0;
    if (atomic_post(ep, ULN_ATOMIC_CSWAP, km, 0, 42, first + FADDS, &old, 30)) DIE("cas\n");
    fails += expect(cq, 30, 0, "CAS");
    if (old != first + FADDS) {
        fprintf(stderr, "passive: the word held %llu after the fetch-adds, expected %llu\n",
                (unsigned long long)old, (unsigned long long)(first + FADDS));
        fails++;
    }
    if (atomic_post(ep, ULN_ATOMIC_CSWAP, km, 0, 7, 0, &old, 31)) DIE("cas\n");
    fails += expect(cq, 31, 0, "CAS that fails");
    if (uln_get(ep, 1, &word, 8, km, 0, 32, 0)) DIE("get\n");
    fails += expect(cq, 32, 0, "GET of the word");
    if (old != 42 || word != 42) {
        fprintf(stderr, "passive: CAS: fetched %llu, word %llu; expected 42, 42\n",
                (unsigned long long)old, (unsigned long long)word);
        fails++;
    }
    /* Refused, writing nothing. */
    if (uln_put(ep, 1, buf, 64, kp ^ 0x5555, 0, 20, 0)) DIE("put\n");
    fails += expect(cq, 20, -ENOKEY, "PUT with a bad key");
    if (uln_put(ep, 1, buf, 64, kp, LEN - 32, 21, 0)) DIE("put\n");
    fails += expect(cq, 21, -ERANGE, "PUT past the end");
    if (uln_get(ep, 1, back, 64, km, LEN, 22, 0)) DIE("get\n");
    fails += expect(cq, 22, -ERANGE, "GET past the end");
    if (atomic_post(ep, ULN_ATOMIC_ADD, km, LEN, 1, 0, &old, 23)) DIE("atomic\n");
    fails += expect(cq, 23, -ERANGE, "atomic past the end");
    if (atomic_post(ep, ULN_ATOMIC_ADD, km, 4, 1, 0, &old, 24)) DIE("atomic\n");
    fails += expect(cq, 24, -EDOM, "atomic misaligned");
    printf("passive: uln_mem_alloc: PUT 16 MiB %.3f s, GET 16 MiB %.3f s, %u fetch-adds %.3f s;"
           " figure %.3f s\n",
           mp, mg, FADDS, t2 - t1, t2 - t0);
    printf("passive: malloc: PUT 16 MiB %.3f s, GET 16 MiB %.3f s\n", pp, pg);
    printf("passive: target pid %d, initiator pid %d\n", (int)pid, (int)getpid());
    if (secs < 0) {
        /* Asleep the whole time, it used only its start-up's CPU
         * (registering and clearing 32 MiB: a few ticks, more under ASan):
         * the copies and atomics were the service's. A target that served
         * them itself would not have slept. */
        long ticks = cpu_ticks(pid), hz = sysconf(_SC_CLK_TCK);
        printf("passive: the target's CPU time: %ld ticks of 1/%ld s\n", ticks, hz);
        if (ticks < 0 || ticks > hz / 2) {
            fprintf(stderr, "passive: the target's CPU time %ld ticks (limit %ld)\n", ticks,
                    hz / 2);
            fails++;
        }
        kill(pid, SIGUSR1);
    } else {
        uint32_t bye = 0;
        if (uln_nap(ep, 1, &bye, sizeof bye, 2, 0)) DIE("nap\n");
        fails += expect(cq, 2, 0, "the last word");
    }
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
