/*
 * flows.c - the receiving service's weighted turns between flows
 * (tools/ulnetd/flows.c, flows_pump), on its own code, while the flows are
 * backlogged: the condition the turns are for (a target that takes less than
 * arrives, so its credit - and its senders' rates - follow what it takes).
 *
 * Target A is a room shared by the flows into it that takes ROOM bytes a
 * call, as the service's own shared rooms do (the wire's out-queue to a
 * remote service, through which the answers to placed PUTs go): a message
 * is taken while any room is left (it may overrun it). Four flows into it,
 * weights 1:2:3:4, each with a backlog of messages of its own sizes (so
 * shares are bytes, not messages):
 *   - over the calls until one backlog is gone, each flow took within 5 %
 *     of its weight's share of A's bytes (10/20/30/40 %);
 *   - flow 5 into target B (which takes everything) beside them: all of its
 *     backlog is taken in the first call, while A is full (A holds back
 *     only the flows into it);
 *   - a weight-4 flow into A that was idle, then backlogged, takes its
 *     share of the next calls (4/14 within 5 %), not a burst for the time
 *     it was idle;
 *   - every flow's messages are taken in order, exactly once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows.h"

#define ROOM     (64u << 10) /* target A's bytes a call */
#define NFLOWS   6           /* 0..3 into A (weights 1..4), 4 into B, 5 into A (weight 4, late) */
#define DIE(...) (fprintf(stderr, "svc.flows: " __VA_ARGS__), exit(1))

struct msg { /* what the test puts in a held message's first bytes */
    unsigned target, flow;
    unsigned long seq;
};

struct world {
    uint64_t room[2];           /* per target: bytes it still takes in this call */
    uint64_t taken[NFLOWS];     /* bytes taken per flow */
    unsigned long next[NFLOWS]; /* the seq each flow's next message must have */
};

static bool take(void *arg, struct flow *f, const uint8_t *b, uint32_t len)
{
    struct world *w = arg;
    struct msg m;
    memcpy(&m, b, sizeof m);
    if (m.flow != f->src) DIE("flow %u was given flow %u's message\n", f->src, m.flow);
    if (!w->room[m.target]) return false;
    if (m.seq != w->next[m.flow])
        DIE("flow %u: message %lu taken, %lu due\n", m.flow, m.seq, w->next[m.flow]);
    w->next[m.flow]++;
    w->room[m.target] -= len < w->room[m.target] ? len : w->room[m.target];
    w->taken[m.flow] += len;
    return true;
}

/* Message i of flow k: its own sizes, 1 to 16 KiB. */
static uint32_t size_of(unsigned k, unsigned long i)
{
    return 1024u + (uint32_t)((i * 7919u + k * 104729u) % (15u << 10));
}

static void fill(struct flows *fs, struct flow *f, unsigned target, unsigned long from,
                 unsigned long n)
{
    static uint8_t buf[16u << 10];
    for (unsigned long i = from; i < from + n; i++) {
        struct msg m = {.target = target, .flow = f->src, .seq = i};
        uint32_t len = size_of(f->src, i);
        memcpy(buf, &m, sizeof m);
        if (!flow_hold(fs, f, buf, len, len)) DIE("no memory\n");
    }
}

static void check_share(const char *what, const uint64_t *taken, const unsigned *flows,
                        const unsigned *weights, unsigned n)
{
    uint64_t sum = 0;
    unsigned wsum = 0;
    for (unsigned i = 0; i < n; i++)
        sum += taken[i], wsum += weights[i];
    for (unsigned i = 0; i < n; i++) {
        double share = (double)taken[i] / (double)sum, want = (double)weights[i] / wsum;
        printf("svc.flows: %s: flow %u weight %u took %.1f %% (weight's %.1f %%)\n", what, flows[i],
               weights[i], 100 * share, 100 * want);
        if (share < want * 0.95 || share > want * 1.05)
            DIE("%s: flow %u's share is off its weight's by more than 5 %%\n", what, flows[i]);
    }
}

int main(void)
{
    struct flows fs = {0};
    struct world w = {0};
    struct flow *f[NFLOWS];
    static const unsigned target[NFLOWS] = {0, 0, 0, 0, 1, 0};
    for (unsigned k = 0; k < NFLOWS; k++) {
        f[k] = flow_get(&fs, 42, k, 99, 0, 0, true);
        if (!f[k]) DIE("no memory\n");
        f[k]->weight = (uint8_t)(k < 4 ? k + 1 : k == 4 ? 1 : 4);
    }
    /* Phase 1: flows 0..3 into A and 4 into B, backlogged. */
    for (unsigned k = 0; k < 5; k++)
        fill(&fs, f[k], target[k], 0, 2000);
    unsigned calls = 0;
    for (;;) {
        w.room[0] = ROOM;
        w.room[1] = ~0ull;
        bool moved = flows_pump(&fs, take, &w);
        calls++;
        if (calls == 1 && f[4]->head) DIE("flow 4 into B was held behind target A\n");
        if (!moved) DIE("nothing moved in call %u\n", calls);
        bool gone = false;
        for (unsigned k = 0; k < 4; k++)
            gone |= !f[k]->head;
        if (gone) break;
    }
    static const unsigned flows_a[4] = {0, 1, 2, 3}, w_a[4] = {1, 2, 3, 4};
    check_share("1:2:3:4 into A", w.taken, flows_a, w_a, 4);
    printf("svc.flows: %u calls of %u KiB\n", calls, ROOM >> 10);

    /* Phase 2: flow 5 (weight 4, idle until now) joins flows 0..3; what
     * remains of them is topped up so all stay backlogged. */
    for (unsigned k = 0; k < 4; k++) {
        unsigned long have = 0;
        for (struct pending *p = f[k]->head; p; p = p->next)
            have++;
        fill(&fs, f[k], 0, w.next[k] + have, 1000);
    }
    fill(&fs, f[5], 0, 0, 1000);
    uint64_t base[NFLOWS];
    memcpy(base, w.taken, sizeof base);
    for (unsigned c = 0; c < 100; c++) {
        w.room[0] = ROOM;
        w.room[1] = ~0ull;
        if (!flows_pump(&fs, take, &w)) DIE("nothing moved in phase 2\n");
        for (unsigned k = 0; k < 6; k++)
            if (target[k] == 0 && !f[k]->head) DIE("flow %u ran dry in phase 2\n", k);
    }
    uint64_t d[5];
    for (unsigned k = 0; k < 4; k++)
        d[k] = w.taken[k] - base[k];
    d[4] = w.taken[5] - base[5];
    static const unsigned flows_b[5] = {0, 1, 2, 3, 5}, w_b[5] = {1, 2, 3, 4, 4};
    check_share("a late weight-4 flow joins", d, flows_b, w_b, 5);
    flows_free(&fs);
    printf("svc.flows: ok\n");
    return 0;
}
