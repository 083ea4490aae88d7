/*
 * flows.c - the table of the wire's flows (flows.h): a chained hash of
 * (job, source, destination, endpoint, channel), nodes that never move (the
 * busy list points at them), a flow's backlog, and the weighted turns in
 * which the backlogs are taken.
 */
#include <stdlib.h>
#include <string.h>

#include "flows.h"

static unsigned hash(uint64_t job_key, uint32_t src, uint32_t dst, uint16_t ep, uint8_t ch)
{
    uint64_t h = job_key * 0x9e3779b97f4a7c15ull;
    h ^= ((uint64_t)src << 32 | dst) * 0xc2b2ae3d27d4eb4full;
    h ^= ((uint64_t)ep << 8 | ch) * 0x165667b19e3779f9ull;
    return (unsigned)(h ^ h >> 29);
}

static bool grow(struct flows *fs)
{
    unsigned nb = fs->nb ? 2 * fs->nb : 256;
    struct flow **b = calloc(nb, sizeof *b);
    if (!b) return false;
    for (unsigned i = 0; i < fs->nb; i++)
        for (struct flow *f = fs->b[i], *next; f; f = next) {
            next = f->next;
            unsigned k = hash(f->job_key, f->src, f->dst, f->ep, f->ch) & (nb - 1);
            f->next = b[k];
            b[k] = f;
        }
    free(fs->b);
    fs->b = b;
    fs->nb = nb;
    return true;
}

struct flow *flow_get(struct flows *fs, uint64_t job_key, uint32_t src, uint32_t dst, uint16_t ep,
                      uint8_t ch, bool make)
{
    unsigned h = hash(job_key, src, dst, ep, ch);
    for (struct flow *f = fs->nb ? fs->b[h & (fs->nb - 1)] : NULL; f; f = f->next)
        if (f->job_key == job_key && f->src == src && f->dst == dst && f->ep == ep && f->ch == ch)
            return f;
    if (!make || ((fs->n + 1 > fs->nb / 2 || !fs->nb) && !grow(fs))) return NULL;
    struct flow *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    *f = (struct flow){.job_key = job_key, .src = src, .dst = dst, .ep = ep, .ch = ch};
    unsigned k = h & (fs->nb - 1);
    f->next = fs->b[k];
    fs->b[k] = f;
    fs->n++;
    return f;
}

bool flow_hold(struct flows *fs, struct flow *f, const uint8_t *b, uint32_t len, uint64_t cost)
{
    struct pending *p = malloc(sizeof *p + len);
    if (!p) return false;
    p->next = NULL;
    p->len = len;
    p->owed = 0;
    p->cost = cost;
    memcpy(p->bytes, b, len);
    if (f->tail)
        f->tail->next = p;
    else
        f->head = p;
    f->tail = p;
    f->held += cost;
    if (!f->listed) {
        f->listed = true;
        f->next_busy = fs->busy;
        fs->busy = f;
        /* Back from idle, it starts at the present: time it had nothing
         * waiting is not saved up (the fair queue's rule, as DRR's). */
        if (f->tag < fs->vtime) f->tag = fs->vtime;
    }
    return true;
}

/* Virtual time per byte of weight 1: cost x STEP / weight is a unit a byte
 * or more for weights up to 64, and u64 lasts 2^58 bytes of a flow. */
#define FLOW_VSTEP 64u

void flow_charge(struct flows *fs, struct flow *f, uint64_t cost)
{
    /* Start-time fair queueing: the message's start tag is the flow's
     * time, or the present if the flow was idle; the clock reads the last
     * start tag served. A flow of weight w advances 1/w as fast, so among
     * flows that stay backlogged each takes bytes in proportion to w. */
    if (f->tag < fs->vtime) f->tag = fs->vtime;
    fs->vtime = f->tag;
    f->tag += cost * FLOW_VSTEP / (f->weight ? f->weight : 1u);
}

/* The listed flow of the least time not refused in this call, or NULL. */
static struct flow *least(const struct flows *fs)
{
    struct flow *best = NULL;
    for (struct flow *f = fs->busy; f; f = f->next_busy)
        if (!f->stuck && f->head && (!best || f->tag < best->tag)) best = f;
    return best;
}

bool flows_pump(struct flows *fs, flow_take_fn *take, void *arg)
{
    /* One message at a time to the least time: the targets that take are
     * shared by weight, and a target that refuses (its ring full, its
     * process stopped) holds back only the flows into it - each tried once
     * a call, then passed over, keeping its time, so it is first when the
     * room comes. O(busy flows) a message: backlogs are the exception. */
    bool moved = false;
    for (struct flow *f; (f = least(fs));) {
        struct pending *p = f->head;
        if (!take(arg, f, p->bytes, p->len)) {
            f->stuck = true;
            continue;
        }
        f->head = p->next;
        if (!f->head) f->tail = NULL;
        f->held -= p->cost;
        flow_charge(fs, f, p->cost);
        free(p);
        moved = true;
    }
    for (struct flow **pf = &fs->busy; *pf;) {
        struct flow *f = *pf;
        f->stuck = false;
        if (f->head) {
            pf = &f->next_busy;
            continue;
        }
        f->listed = false;
        *pf = f->next_busy;
    }
    return moved;
}

static void drop_backlog(struct flow *f)
{
    while (f->head) {
        struct pending *p = f->head;
        f->head = p->next;
        free(p);
    }
    f->tail = NULL;
    f->held = 0;
}

void flows_forget(struct flows *fs, const struct remote *r)
{
    for (unsigned i = 0; i < fs->nb; i++)
        for (struct flow *f = fs->b[i]; f; f = f->next)
            if (f->r == r) {
                drop_backlog(f);
                f->sent = f->credit = f->taken = f->said = 0;
                f->tag = 0;
            }
}

/* Every flow pred(f, arg) names goes: out of the busy list, its backlog
 * and its entry freed. */
static void drop_if(struct flows *fs, bool (*pred)(const struct flow *, const void *),
                    const void *arg)
{
    for (struct flow **pf = &fs->busy; *pf;)
        if (pred(*pf, arg)) {
            (*pf)->listed = false;
            *pf = (*pf)->next_busy;
        } else
            pf = &(*pf)->next_busy;
    for (unsigned i = 0; i < fs->nb; i++)
        for (struct flow **pf = &fs->b[i]; *pf;) {
            struct flow *f = *pf;
            if (!pred(f, arg)) {
                pf = &f->next;
                continue;
            }
            *pf = f->next;
            drop_backlog(f);
            free(f);
            fs->n--;
        }
}

static bool over(const struct flow *f, const void *r)
{
    return f->r == r;
}

void flows_drop(struct flows *fs, const struct remote *r)
{
    drop_if(fs, over, r);
}

struct of_rank {
    uint64_t job_key;
    uint32_t rank;
    bool src;
};

static bool of_rank(const struct flow *f, const void *arg)
{
    const struct of_rank *k = arg;
    return f->job_key == k->job_key && (k->src ? f->src : f->dst) == k->rank;
}

void flows_drop_rank(struct flows *fs, uint64_t job_key, uint32_t rank, bool src)
{
    struct of_rank k = {.job_key = job_key, .rank = rank, .src = src};
    drop_if(fs, of_rank, &k);
}

void flows_free(struct flows *fs)
{
    for (unsigned i = 0; i < fs->nb; i++)
        for (struct flow *f = fs->b[i], *next; f; f = next) {
            next = f->next;
            drop_backlog(f);
            free(f);
        }
    free(fs->b);
    *fs = (struct flows){0};
}
