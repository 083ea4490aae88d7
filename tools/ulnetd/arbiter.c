/*
 * arbiter.c - fair shares of the service's work between processes
 * (docs/service.md, "Fair shares"), as cHPP's arbiter shares its device
 * between functions: weighted deficit round robin (Shreedhar and
 * Varghese's DRR) over the processes with work, then plain round robin
 * over each process's endpoints.
 *
 * Work is counted in bytes: a message's bytes in its queue (what the
 * service copies or sends), and for a GET the bytes it answers. Each round
 * a process with work gets weight x ARB_QUANTUM bytes more of credit and
 * takes messages while its credit lasts (the last one may overdraw it: the
 * debt is paid next round). A process whose queues are empty keeps no
 * credit (DRR's rule: idle time is not saved up) but keeps its debt, and
 * one held back by a full target ring or wire keeps at most one round's,
 * so it cannot burst past the others later, and goes on with its turn when it can (the pass
 * starts with it), without a fresh quantum: so where the wire between two
 * hosts is the bottleneck, the processes sending across it still share it
 * by weight. Every process with work takes at least one message a round: a
 * low weight is slow, never starved.
 *
 * The weight is the process's own setting (ULN_SERVICE_WEIGHT, asked at
 * attach), capped by the service's rule for it: its uid's (--weight UID:W)
 * first, else the one for the deepest cgroup it is in (--weight /PATH:W,
 * the cgroup v2 path, for a slice of jobs), else *:W; no rule: no cap
 * below ULN_SVC_WEIGHT_MAX. The uid is the kernel's word (SO_PEERCRED) and
 * the cgroup the kernel's file for that pid, read at attach, so a process
 * cannot claim another's cap.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "ulnetd.h"

#define ARB_QUANTUM 65536u     /* bytes per unit of weight per round */
#define ARB_BATCH   (2u << 20) /* bytes of work per call, in rounds, unless d->arb_batch */

int arbiter_rule(struct ulnetd *d, const char *spec)
{
    const char *colon = strchr(spec, ':');
    char *end;
    struct weight_rule r = {0};
    if (!colon || d->n_weights == ULN_SVC_WEIGHT_RULES) goto bad;
    if (colon - spec == 1 && spec[0] == '*')
        r.any = true;
    else if (spec[0] == '/') {
        size_t n = (size_t)(colon - spec);
        if (n >= sizeof r.cgroup) goto bad;
        memcpy(r.cgroup, spec, n);
        /* "/a/b/" is "/a/b": a path's prefix is matched by whole names. */
        while (n > 1 && r.cgroup[n - 1] == '/')
            r.cgroup[--n] = 0;
    } else {
        unsigned long uid = strtoul(spec, &end, 10);
        if (end != colon || colon == spec || uid > 0xfffffffful) goto bad;
        r.uid = (uid_t)uid;
    }
    unsigned long w = strtoul(colon + 1, &end, 10);
    if (*end || end == colon + 1 || w < 1 || w > ULN_SVC_WEIGHT_MAX) goto bad;
    r.max = (uint32_t)w;
    d->weights[d->n_weights++] = r;
    return 0;
bad:
    fprintf(stderr,
            "ulnetd: --weight %s: want UID:W, /CGROUP:W or *:W, W in 1..%u (at most %u rules)\n",
            spec, ULN_SVC_WEIGHT_MAX, ULN_SVC_WEIGHT_RULES);
    return -1;
}

void arbiter_cgroup_of(pid_t pid, char *out, size_t room)
{
    char path[64], line[ULN_SVC_CGROUP_MAX + 8];
    out[0] = 0;
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue; /* cgroup v2's unified line */
        line[strcspn(line, "\n")] = 0;
        snprintf(out, room, "%s", line + 3);
        break;
    }
    fclose(f);
}

/* cg is rule's cgroup or under it: whole names ("/a/b" is under "/a",
 * "/ab" is not). The rule's depth in names (0: "/"), or -2: not. */
static int cgroup_depth(const char *rule, const char *cg)
{
    size_t n = strlen(rule);
    if (!cg[0] || strncmp(rule, cg, n) || (n > 1 && cg[n] && cg[n] != '/')) return -2;
    int depth = 0;
    for (size_t i = 1; i < n; i++)
        depth += rule[i] == '/';
    return n > 1 ? depth + 1 : 0;
}

uint32_t arbiter_weight(const struct ulnetd *d, uid_t uid, const char *cgroup, uint32_t asked)
{
    uint32_t cap = ULN_SVC_WEIGHT_MAX;
    int best = -2; /* -2: none; -1: *:W; 0 and more: a cgroup's depth; 1 << 30: the uid's */
    for (unsigned i = 0; i < d->n_weights; i++) {
        const struct weight_rule *r = &d->weights[i];
        int k = r->any          ? -1
                : r->cgroup[0]  ? cgroup_depth(r->cgroup, cgroup)
                : r->uid == uid ? 1 << 30
                                : -2;
        if (k > best || (k == best && k > -2)) /* the more specific, or the later */
            best = k, cap = r->max;
    }
    uint32_t w = asked ? asked : 1;
    if (w > ULN_SVC_WEIGHT_MAX) w = ULN_SVC_WEIGHT_MAX;
    return w < cap ? w : cap;
}

static bool client_has_work(const struct client *c)
{
    return !queues_empty(c);
}

/* c takes messages from its endpoints in turn while its credit lasts: the
 * work it moved. */
static uint64_t client_turn(struct ulnetd *d, struct client *c, bool *blocked)
{
    uint64_t moved = 0;
    unsigned idle = 0; /* endpoints looked at in a row that gave nothing */
    while (c->deficit > 0 && idle < ULN_SVC_MAX_EPS) {
        unsigned e = c->next_ep;
        c->next_ep = (e + 1) % ULN_SVC_MAX_EPS;
        struct queue *q = c->queues[e];
        uint64_t work = q ? queue_step(d, c, q, blocked) : 0;
        if (!work) {
            idle++;
            continue;
        }
        idle = 0;
        moved += work;
        c->deficit -= (int64_t)work;
        c->moved_msgs++;
        c->moved_bytes += work;
    }
    return moved;
}

/* One pass over the processes: the work moved; *owed: one with work was
 * still in debt. */
static uint64_t arbiter_pass(struct ulnetd *d, bool *blocked, bool *owed)
{
    uint64_t moved = 0;
    unsigned n = d->n_clients, resume = n;
    for (unsigned k = 0; k < n; k++) {
        /* Turns accept nobody, but a client may end: each slot read afresh. */
        unsigned slot = (d->arb_next + k) % n;
        struct client *c = d->clients[slot];
        if (!c) continue;
        if (!client_has_work(c)) {
            /* Idle: it saves no credit, but a debt stays to be paid (a
             * queue emptied by the message that overdrew it would else
             * take a message a turn, however large: weight 1's 16 KiB
             * beside 32 KiB PUT pieces took 15 % where 10 % was due). */
            if (c->deficit > 0) c->deficit = 0;
            c->in_turn = false;
            continue;
        }
        int64_t quantum = (int64_t)(c->weight ? c->weight : 1) * ARB_QUANTUM;
        if (!c->in_turn) { /* a turn's quantum once, however many calls it spans */
            c->deficit += quantum;
            if (c->deficit <= 0) {
                *owed = true; /* a large message overdrew it: it pays first */
                continue;
            }
            c->in_turn = true;
        }
        bool stopped = false;
        moved += client_turn(d, c, &stopped);
        *blocked |= stopped;
        if (!client_has_work(c)) {
            if (c->deficit > 0) c->deficit = 0;
            c->in_turn = false;
        } else if (c->deficit <= 0 || !stopped) {
            c->in_turn = false; /* its turn is over */
        } else {
            /* Held back (the wire to its peer's host full, a target ring
             * full) with its quantum not spent: the next pass starts with
             * it, and it goes on with what is left, no more. Had it a fresh
             * quantum each call, and the next pass started further on,
             * then on a wire that takes a message or two between calls
             * every process would take a message in turn, whatever its
             * weight. The others still move after it (a full ring holds
             * back only its process). */
            if (c->deficit > quantum) c->deficit = quantum;
            if (resume == n) resume = slot;
        }
    }
    /* Next pass: at the first one held back in its turn, else where this
     * one started, as DRR's rounds go (each turn spends its quantum). */
    if (resume < n) d->arb_next = resume;
    return moved;
}

bool arbiter_round(struct ulnetd *d, bool *blocked)
{
    /* Rounds until nothing moves or a batch of work is done: one round a
     * call would hand a lone bulk sender a quantum per turn of the service's
     * loop (its timers, doorbells and wire between each). A round in which
     * every process with work is still paying a debt moves nothing, but is
     * not idle: the next pays a quantum more (a bounded number of rounds,
     * the largest message over the smallest quantum). */
    uint64_t batch = d->arb_batch ? d->arb_batch : ARB_BATCH, done = 0;
    for (;;) {
        bool owed = false;
        uint64_t moved = arbiter_pass(d, blocked, &owed);
        done += moved;
        if ((!moved && !owed) || done >= batch) return done > 0;
    }
}
