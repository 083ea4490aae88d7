/*
 * kill_stream.c - every kind of operation through the services, all pairs,
 * while a process or a service is killed under it (tests/netns/svc_kill.sh).
 *
 * Ranks on hosts (rank r on host r % HOSTS, as run_job.sh places them),
 * ULN_TRANSPORT=svc. Each rank's region is uln_mem_alloc memory, so the
 * target's service places, answers and applies (the target need not poll).
 * A round is, towards every peer in turn and each waited for: a PUT of a
 * pattern of (me, peer, round) into my slot of the peer's region, a GET of it
 * back (compared byte for byte), a fetch-add on my word there (its old value
 * must be the count of my earlier adds: exactly once) and a NAP of a pattern
 * of (me, sequence), which the peer checks in order, exactly once.
 *
 *   svc_kill_stream rounds N
 *       N rounds, then "done" each way, every peer's N NAPs counted, and a
 *       barrier: a clean job.
 *   svc_kill_stream until HOSTS DEAD_HOST [KILLED_RANK]
 *       Rounds until every peer that must die has: each peer behind the
 *       service of DEAD_HOST (all of them when that is this rank's own host;
 *       -1: none) and KILLED_RANK. The script kills them after every rank
 *       printed "streaming". An operation on such a peer must end with
 *       -ECONNRESET - its completion or its post - within the bound, never
 *       hang; after that nothing more goes to it. Any other error, or a
 *       survivor reset, fails. The survivors then end with each other: a
 *       "done" NAP each way once every operation to that peer completed.
 *
 * Prints "rank R streaming" after its first whole round, "rank R: peer P
 * reset after T s" per peer, "rank R: ok" at the end.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ulnet.h"

#define SLOT      (32u << 10) /* each source's part of a region (PUT/GET) */
#define NAP_LEN   64u
#define BOUND_S   60.0 /* an operation's completion at most (a hang fails) */
#define STREAM_S  150.0
#define MAX_RANKS 64
#define DONE      0xd0d0d0d0d0d0d0d0ull
#define DIE(...)                                                                                   \
    (fprintf(stderr, "rank %d: kill_stream: ", me), fprintf(stderr, __VA_ARGS__), exit(1))

enum { ALIVE, RESET, FINISHED };

static int me, n;
static struct uln_ep *ep;
static struct uln_cq *cq;
static int state[MAX_RANKS];
static bool must_die[MAX_RANKS], done_from[MAX_RANKS];
static uint64_t nap_seq_in[MAX_RANKS], nap_seq_out[MAX_RANKS], adds[MAX_RANKS];
static double t_start, t_first_reset;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint8_t pat(uint64_t a, uint64_t b, uint64_t i)
{
    return (uint8_t)(a * 131 + b * 29 + i * 7 + 1);
}

static void mark_reset(int p, int status)
{
    if (status != -ECONNRESET)
        DIE("an operation on rank %d ended with %d (%s), not -ECONNRESET\n", p, status,
            uln_strerror(status));
    if (!must_die[p]) DIE("rank %d, which nothing killed, was reset\n", p);
    if (state[p] == RESET) return;
    state[p] = RESET;
    if (t_first_reset == 0) t_first_reset = now_s();
    printf("rank %d: peer %d reset after %.2f s\n", me, p, now_s() - t_first_reset);
    fflush(stdout);
}

/* A received NAP: data in order from its source, or a survivor's "done". */
static void nap_in(const struct uln_cqe *e)
{
    int p = e->peer;
    if (p < 0 || p >= n || p == me) DIE("a NAP from rank %d\n", p);
    uint64_t w;
    if (e->len == sizeof w) {
        memcpy(&w, e->data, sizeof w);
        if (w != DONE) DIE("a short NAP from %d\n", p);
        done_from[p] = true;
        return;
    }
    if (e->len != NAP_LEN) DIE("a NAP of %llu B from %d\n", (unsigned long long)e->len, p);
    const uint8_t *d = e->data;
    uint64_t seq = nap_seq_in[p]++;
    for (uint32_t i = 0; i < NAP_LEN; i++)
        if (d[i] != pat((uint64_t)p, seq, i))
            DIE("NAP %llu from %d: byte %u wrong (lost, doubled or out of order)\n",
                (unsigned long long)seq, p, i);
}

/* Until the completion tagged tag arrives (its status, or 1 when it is a
 * peer's reset found by another completion), taking every other one. */
static int wait_for(uint64_t tag, int peer)
{
    double end = now_s() + BOUND_S;
    for (;;) {
        struct uln_cqe e;
        int got = uln_cq_poll(cq, &e, 1);
        if (got < 0) DIE("cq_poll: %s\n", uln_strerror(got));
        if (got == 0) {
            if (now_s() > end)
                DIE("no completion from rank %d within %.0f s: a hang\n", peer, BOUND_S);
            uln_cq_wait(cq, 50);
            continue;
        }
        if (e.op == ULN_OP_NAP_RECV) {
            nap_in(&e);
            uln_cqe_release(cq, &e);
            continue;
        }
        if (e.user_data == tag) return e.status;
        DIE("a completion (op %u, tag %llx) nobody waits for\n", e.op,
            (unsigned long long)e.user_data);
    }
}

/* One posted operation to p, waited for. False: p was reset (by the post
 * or the completion). */
static bool op_done(int p, int rc, uint64_t tag)
{
    if (rc == 0) rc = wait_for(tag, p);
    if (rc == 0) return true;
    mark_reset(p, rc);
    return false;
}

static void round_to(int p, uint64_t round, const uint64_t *keys, uint8_t *src, uint8_t *dst)
{
    uint64_t roff = (uint64_t)me * SLOT;
    uint64_t tag = ((uint64_t)p << 32) | (round & 0xffffffu) << 4;
    for (uint32_t i = 0; i < SLOT; i++)
        src[i] = pat((uint64_t)me * 64 + (uint64_t)p, round, i);
    memset(dst, 0, SLOT);
    if (!op_done(p, uln_put(ep, p, src, SLOT, keys[p], roff, tag | 1, 0), tag | 1)) return;
    if (!op_done(p, uln_get(ep, p, dst, SLOT, keys[p], roff, tag | 2, 0), tag | 2)) return;
    if (memcmp(src, dst, SLOT))
        DIE("GET from %d, round %llu: not what was PUT\n", p, (unsigned long long)round);
    uint64_t old = ~0ull;
    uint64_t woff = (uint64_t)n * SLOT + (uint64_t)me * 8;
    if (!op_done(p, uln_atomic(ep, p, ULN_ATOMIC_ADD, 8, keys[p], woff, 1, 0, &old, tag | 3, 0),
                 tag | 3))
        return;
    if (old != adds[p])
        DIE("fetch-add on %d: old %llu, expected %llu\n", p, (unsigned long long)old,
            (unsigned long long)adds[p]);
    adds[p]++;
    uint8_t nap[NAP_LEN];
    for (uint32_t i = 0; i < NAP_LEN; i++)
        nap[i] = pat((uint64_t)me, nap_seq_out[p], i);
    if (!op_done(p, uln_nap(ep, p, nap, NAP_LEN, tag | 4, 0), tag | 4)) return;
    nap_seq_out[p]++;
}

static bool all_dead(void)
{
    for (int p = 0; p < n; p++)
        if (must_die[p] && state[p] != RESET) return false;
    return true;
}

int main(int argc, char **argv)
{
    bool until = argc >= 4 && !strcmp(argv[1], "until");
    long rounds = argc == 3 && !strcmp(argv[1], "rounds") ? atol(argv[2]) : 0;
    if (!until && rounds <= 0) {
        fprintf(stderr, "usage: svc_kill_stream rounds N | until HOSTS DEAD_HOST [KILLED_RANK]\n");
        return 2;
    }
    struct uln_ctx *ctx;
    if (uln_open(NULL, &ctx)) DIE("open\n");
    me = uln_rank(ctx);
    n = uln_size(ctx);
    if (n < 2 || n > MAX_RANKS) DIE("%d ranks\n", n);
    if (until) {
        int hosts = atoi(argv[2]), dead = atoi(argv[3]), killed = argc > 4 ? atoi(argv[4]) : -1;
        for (int p = 0; p < n; p++)
            must_die[p] = p != me &&
                          ((dead >= 0 && (me % hosts == dead || p % hosts == dead)) || p == killed);
    }
    if (uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep)) DIE("cq/ep\n");
    size_t len = (size_t)n * SLOT + (size_t)n * 8;
    void *mem;
    struct uln_mr *mr;
    if (uln_mem_alloc(ctx, len, &mem)) DIE("mem_alloc\n");
    memset(mem, 0, len);
    if (uln_mr_reg(ctx, mem, len,
                   ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC,
                   &mr))
        DIE("mr_reg\n");
    uint64_t key = uln_mr_key(mr), keys[MAX_RANKS];
    int rc = uln_allgather(ep, &key, sizeof key, keys, 30000);
    if (rc) DIE("allgather: %s\n", uln_strerror(rc));
    uint8_t *src = malloc(SLOT), *dst = malloc(SLOT);
    if (!src || !dst) DIE("malloc\n");
    t_start = now_s();
    for (uint64_t round = 0;; round++) {
        for (int k = 1; k < n; k++) {
            int p = (me + k) % n;
            if (state[p] == ALIVE) round_to(p, round, keys, src, dst);
        }
        if (round == 0) {
            printf("rank %d streaming\n", me);
            fflush(stdout);
        }
        if (!until && round + 1 >= (uint64_t)rounds) break;
        if (until && all_dead()) break;
        if (until && now_s() - t_start > STREAM_S)
            DIE("still streaming after %.0f s: no reset came\n", STREAM_S);
    }
    /* Every operation of mine completed: tell each survivor, then serve
     * (poll) until each has told me, so nobody's last round finds a survivor
     * gone. NAPs arrive in order: a peer's "done" comes after all its data. */
    uint64_t done = DONE;
    for (int p = 0; p < n; p++)
        if (p != me && state[p] == ALIVE) {
            if (!op_done(p, uln_nap(ep, p, &done, sizeof done, 5, 0), 5)) DIE("done to %d\n", p);
            state[p] = FINISHED;
        }
    for (int p = 0; p < n; p++) {
        double end = now_s() + BOUND_S;
        while (state[p] == FINISHED && !done_from[p]) {
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) == 1) {
                if (e.op != ULN_OP_NAP_RECV) DIE("a completion (op %u) after the end\n", e.op);
                nap_in(&e);
                uln_cqe_release(cq, &e);
            } else if (now_s() > end)
                DIE("no \"done\" from rank %d within %.0f s\n", p, BOUND_S);
            else
                uln_cq_wait(cq, 50);
        }
    }
    /* A clean job: each peer's NAPs all here, once each (nap_in checked the
     * order); and nobody leaves before every "done" arrived. */
    for (int p = 0; p < n && !until; p++)
        if (p != me && nap_seq_in[p] != (uint64_t)rounds)
            DIE("%llu NAPs from rank %d, not %ld\n", (unsigned long long)nap_seq_in[p], p, rounds);
    if (!until && (rc = uln_barrier(ctx, 60000))) DIE("barrier: %s\n", uln_strerror(rc));
    for (int p = 0; p < n; p++)
        if (p != me && state[p] != RESET && nap_seq_in[p] == 0) DIE("no NAP from rank %d\n", p);
    printf("rank %d: ok\n", me);
    fflush(stdout);
    /* The services (and this process's gone peers) refuse what is left: the
     * process ends by exiting, as a killed one's peers do. */
    free(src);
    free(dst);
    uln_mr_dereg(mr);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return 0;
}
