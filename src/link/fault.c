/*
 * fault.c - the fault injector (fault.h): a link in front of any
 * other one that drops, duplicates and reorders what is sent through it.
 *
 * Its decisions come from a splitmix64 stream, three draws per packet
 * whatever the outcome, and are committed only for packets the inner link
 * took: a send cut short by a full link rewinds the stream, so the faults
 * depend on the sequence of packets alone, not on when the socket happened
 * to fill. A reordered packet is copied aside (the caller's memory is its own
 * again once send returns) and goes right after the next packet sent to the
 * same peer, or at its delay bound.
 */
#define _GNU_SOURCE
#include "link/fault.h"
#include "core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Held-back packets of the reorder fault; with P(reorder) <= 0.5 more than a
 * few are rarely held at once. */
#define HOLD_SLOTS 16u
/* Entries of one batch: each packet and its duplicate, then every held
 * packet and its duplicate once. */
#define TX_ENTS (2u * ULN_LINK_BATCH + 2u * HOLD_SLOTS)

/* A held-back packet: HELD waits for a later packet to its peer (or the delay
 * bound); QUEUED is in the batch being sent; READY must go first in the next
 * batch, because what it had to follow went out and then the link filled. */
enum { HOLD_FREE = 0, HOLD_HELD, HOLD_QUEUED, HOLD_READY };

struct hold {
    uint8_t *data;
    uint64_t at;     /* when it was held, ns */
    uint64_t ticket; /* HELD: release order; READY: send order */
    uint32_t len;
    int32_t peer;
    uint8_t state;  /* HOLD_* */
    uint8_t copies; /* still to send: 2 for a held duplicate */
    uint8_t sent;   /* copies sent so far; the second one is the duplicate */
    uint8_t late;   /* released by the delay bound */
};

/* What a batch entry sends. */
enum { ENT_PKT, ENT_DUP, ENT_HOLD };
struct ent {
    uint8_t kind;
    uint32_t idx; /* packet index or hold slot */
    uint32_t len;
};

/* Per packet of a batch. */
enum { OUT_SEND = 0, OUT_DROP, OUT_HELD, OUT_NOHOLD };
struct pkt_fate {
    uint64_t rng; /* the stream before this packet's draws */
    uint32_t pos; /* entries queued before it */
    int32_t slot; /* OUT_HELD: its hold slot */
    uint8_t out;  /* OUT_* */
};

struct link_fault {
    struct uln_link base;
    struct uln_link *in;
    struct uln_link_fault f;
    uint64_t thr_drop, thr_dup, thr_reorder; /* probabilities scaled to 2^53 */
    uint64_t rng;
    struct uln_link_stats st; /* the fault_* counters */
    struct hold hold[HOLD_SLOTS];
    unsigned nheld;
    unsigned npeers; /* ids the inner link handed out: to check packets up front */
    uint64_t ticket;
    uint8_t *hold_mem;
    struct ent ents[TX_ENTS];
    struct uln_link_pkt out[TX_ENTS];
    struct pkt_fate fate[ULN_LINK_BATCH];
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* P in [0, 1] as a threshold on 53-bit draws: 1.0 always hits, 0 never. */
static uint64_t prob_thr(double p)
{
    return (uint64_t)(p * 9007199254740992.0);
}
static bool hit(uint64_t draw, uint64_t thr)
{
    return (draw >> 11) < thr;
}

/* ------------------------------------------------------------------------- */
/* Fault spec                                                                 */
/* ------------------------------------------------------------------------- */

static int fault_err(char *err, size_t errlen, const char *fmt, const char *what, size_t wlen)
{
    if (errlen) snprintf(err, errlen, fmt, (int)wlen, what);
    return -EINVAL;
}

/* A probability: "0.02" or "2%", in [0, 1]. -EDOM: not a number at all. */
static int parse_prob(const char *buf, double *out)
{
    if (buf[0] == '-' || buf[0] == '+' || buf[0] == ' ') return -EINVAL;
    char *rest;
    errno = 0;
    double v = strtod(buf, &rest);
    if (rest == buf || errno) return -EDOM;
    if (*rest == '%') {
        v /= 100.0;
        rest++;
    }
    if (*rest || !(v >= 0.0 && v <= 1.0)) return -EINVAL;
    *out = v;
    return 0;
}

static int parse_uint(const char *buf, unsigned long long *out)
{
    if (buf[0] < '0' || buf[0] > '9') return -EINVAL;
    char *rest;
    errno = 0;
    *out = strtoull(buf, &rest, 0);
    return rest == buf || *rest || errno ? -EINVAL : 0;
}

enum { K_DROP, K_DUP, K_REORDER, K_DELAY, K_SEED, K_N };

/* Key k's value (item = "key=value", n bytes, for messages). */
static int set_value(struct uln_link_fault *f, int k, const char *buf, const char *item, size_t n,
                     char *err, size_t errlen)
{
    if (k <= K_REORDER) {
        double *d[] = {&f->drop, &f->dup, &f->reorder};
        int rc = parse_prob(buf, d[k]);
        if (rc == -EDOM) return fault_err(err, errlen, "'%.*s': not a number", item, n);
        if (rc == 0) return 0;
        return fault_err(err, errlen, "'%.*s': a probability in [0, 1] or 0%%..100%%", item, n);
    }
    unsigned long long v;
    if (parse_uint(buf, &v) < 0)
        return fault_err(err, errlen, "'%.*s': not an unsigned integer", item, n);
    if (k == K_SEED) {
        f->seed = v;
        return 0;
    }
    if (v > 10000000ull) return fault_err(err, errlen, "'%.*s': at most 10000000 us", item, n);
    f->delay_us = v;
    return 0;
}

/* One "key=value" item of n bytes; *seen: the keys given so far. */
static int parse_item(struct uln_link_fault *f, const char *p, size_t n, unsigned *seen, char *err,
                      size_t errlen)
{
    static const char *const keys[K_N] = {"drop", "dup", "reorder", "delay", "seed"};
    const char *eq = memchr(p, '=', n);
    if (n == 0) return fault_err(err, errlen, "empty item%.*s (stray comma?)", "", 0);
    if (!eq) return fault_err(err, errlen, "'%.*s' is not key=value", p, n);
    size_t klen = (size_t)(eq - p), vlen = n - klen - 1;
    int k = -1;
    for (int i = 0; i < K_N; i++)
        if (strlen(keys[i]) == klen && !memcmp(p, keys[i], klen)) k = i;
    if (k < 0)
        return fault_err(err, errlen, "unknown key '%.*s' (drop, dup, reorder, delay, seed)", p,
                         klen);
    if (*seen & (1u << k)) return fault_err(err, errlen, "'%.*s' given twice", p, klen);
    *seen |= 1u << k;
    if (vlen == 0 || vlen >= 64) return fault_err(err, errlen, "'%.*s' needs a value", p, n);
    char buf[64];
    memcpy(buf, eq + 1, vlen);
    buf[vlen] = '\0';
    return set_value(f, k, buf, p, n, err, errlen);
}

int uln_link_fault_parse(const char *spec, struct uln_link_fault *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    f->delay_us = 1000;
    f->seed = 1;
    if (errlen) err[0] = '\0';
    if (!spec) return 0;
    unsigned seen = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int rc = parse_item(f, p, n, &seen, err, errlen);
        if (rc) return rc;
        p = end ? end + 1 : p + n;
        if (end && !*p) return fault_err(err, errlen, "trailing comma%.*s", "", 0);
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Sending                                                                    */
/* ------------------------------------------------------------------------- */

static unsigned add_ent(struct link_fault *lf, unsigned ne, int kind, uint32_t idx, uint32_t len)
{
    lf->ents[ne] = (struct ent){.kind = (uint8_t)kind, .idx = idx, .len = len};
    return ne + 1;
}

/* Queue held packet h (every copy it still has to send). */
static unsigned queue_hold(struct link_fault *lf, unsigned ne, unsigned h)
{
    lf->hold[h].state = HOLD_QUEUED;
    for (unsigned c = 0; c < lf->hold[h].copies; c++)
        ne = add_ent(lf, ne, ENT_HOLD, h, lf->hold[h].len);
    return ne;
}

/* Queue, in order, the held packets in state `state` that match: READY ones
 * all; HELD ones to `peer`, or (peer < 0) those past the delay bound. */
static unsigned queue_held(struct link_fault *lf, unsigned ne, int state, int32_t peer,
                           uint64_t now)
{
    uint64_t bound = lf->f.delay_us * 1000u;
    for (;;) {
        int best = -1;
        for (unsigned h = 0; h < HOLD_SLOTS; h++) {
            const struct hold *x = &lf->hold[h];
            if (x->state != state) continue;
            if (state == HOLD_HELD && (peer >= 0 ? x->peer != peer : now - x->at < bound)) continue;
            if (best < 0 || x->ticket < lf->hold[best].ticket) best = (int)h;
        }
        if (best < 0) return ne;
        if (state == HOLD_HELD && peer < 0) lf->hold[best].late = 1;
        ne = queue_hold(lf, ne, (unsigned)best);
    }
}

static int free_slot(const struct link_fault *lf)
{
    for (unsigned h = 0; h < HOLD_SLOTS; h++)
        if (lf->hold[h].state == HOLD_FREE) return (int)h;
    return -1;
}

static void copy_pkt(uint8_t *dst, const struct uln_link_pkt *p)
{
    size_t off = 0;
    for (uint32_t j = 0; j < p->niov; j++) {
        memcpy(dst + off, p->iov[j].iov_base, p->iov[j].iov_len);
        off += p->iov[j].iov_len;
    }
}

/* Hold packet p back (a copy), in free slot h. */
static void hold_pkt(struct link_fault *lf, unsigned h, const struct uln_link_pkt *p, bool dup,
                     uint64_t now)
{
    struct hold *x = &lf->hold[h];
    copy_pkt(x->data, p);
    *x = (struct hold){.data = x->data,
                       .at = now,
                       .ticket = ++lf->ticket,
                       .len = uln_link_pkt_len(p),
                       .peer = p->peer,
                       .state = HOLD_HELD,
                       .copies = dup ? 2 : 1};
    lf->nheld++;
}

/* Packet i's fate, drawn: its entries (itself, its duplicate, the held
 * packets it releases) are queued from ne on; returns the new ne. */
static unsigned decide(struct link_fault *lf, const struct uln_link_pkt *pkts, unsigned i,
                       unsigned ne, uint64_t *now)
{
    struct pkt_fate *ft = &lf->fate[i];
    *ft = (struct pkt_fate){.rng = lf->rng, .pos = ne, .slot = -1, .out = OUT_SEND};
    /* Three draws whatever the outcome: packet k's fate depends on k alone. */
    uint64_t d_drop = splitmix64(&lf->rng), d_dup = splitmix64(&lf->rng);
    uint64_t d_reo = splitmix64(&lf->rng);
    if (hit(d_drop, lf->thr_drop)) {
        ft->out = OUT_DROP;
        return ne;
    }
    bool dup = hit(d_dup, lf->thr_dup);
    if (hit(d_reo, lf->thr_reorder)) {
        int h = free_slot(lf);
        ft->out = OUT_NOHOLD;
        if (h >= 0) {
            if (!*now) *now = uln_now_ns();
            hold_pkt(lf, (unsigned)h, &pkts[i], dup, *now);
            ft->out = OUT_HELD;
            ft->slot = h;
            return ne;
        }
    }
    uint32_t len = uln_link_pkt_len(&pkts[i]);
    ne = add_ent(lf, ne, ENT_PKT, i, len);
    if (dup) ne = add_ent(lf, ne, ENT_DUP, i, len);
    if (lf->nheld) ne = queue_held(lf, ne, HOLD_HELD, pkts[i].peer, *now);
    return ne;
}

/* Entry e as a packet for the inner link. */
static void ent_pkt(struct link_fault *lf, unsigned e, const struct uln_link_pkt *pkts)
{
    const struct ent *en = &lf->ents[e];
    if (en->kind != ENT_HOLD) {
        lf->out[e] = pkts[en->idx];
        return;
    }
    const struct hold *h = &lf->hold[en->idx];
    lf->out[e] = (struct uln_link_pkt){.peer = h->peer, .niov = 1};
    lf->out[e].iov[0] = (struct iovec){.iov_base = h->data, .iov_len = h->len};
}

/* How many packets are committed: packet u is if its own entry went (its
 * entry is at pos), or, with no entry of its own (dropped, held), if
 * everything before it went. The rest are undone: the stream rewound to the
 * first of them (the same packets will get the same draws), their holds
 * freed. */
static unsigned commit(struct link_fault *lf, unsigned n, unsigned done)
{
    unsigned u = 0;
    while (u < n &&
           (lf->fate[u].out == OUT_DROP || lf->fate[u].out == OUT_HELD ? lf->fate[u].pos <= done
                                                                       : lf->fate[u].pos < done))
        u++;
    if (u < n) lf->rng = lf->fate[u].rng;
    for (unsigned i = 0; i < n; i++) {
        const struct pkt_fate *ft = &lf->fate[i];
        if (i >= u) {
            if (ft->out == OUT_HELD) {
                lf->hold[ft->slot].state = HOLD_FREE;
                lf->nheld--;
            }
            continue;
        }
        lf->st.fault_drop += ft->out == OUT_DROP;
        lf->st.fault_reorder += ft->out == OUT_HELD;
        lf->st.fault_nohold += ft->out == OUT_NOHOLD;
    }
    return u;
}

/* A held packet's entry went: one copy fewer to send. */
static void hold_sent(struct link_fault *lf, struct hold *x)
{
    x->copies--;
    lf->st.fault_dup += ++x->sent == 2;
    if (!x->copies) {
        lf->st.fault_late += x->late;
        x->state = HOLD_FREE;
        lf->nheld--;
    }
}

/* The duplicate of a committed packet did not go: keep a copy to lead the
 * next batch, or lose it if every slot is taken. */
static void dup_later(struct link_fault *lf, const struct ent *en, const struct uln_link_pkt *pkts,
                      uint64_t ticket)
{
    int h = free_slot(lf);
    if (h < 0) {
        lf->st.fault_nohold++;
        return;
    }
    struct hold *d = &lf->hold[h];
    copy_pkt(d->data, &pkts[en->idx]);
    *d = (struct hold){.data = d->data,
                       .ticket = ticket,
                       .len = en->len,
                       .peer = pkts[en->idx].peer,
                       .state = HOLD_READY,
                       .copies = 1,
                       .sent = 1};
    lf->nheld++;
}

/* After a send of ne entries of which `done` went, `end` being the entries
 * of committed packets: count what went, and make what belongs to committed
 * packets but did not go READY to lead the next batch, so the sequence on
 * the wire is the one an emptier link would have produced. */
static void settle(struct link_fault *lf, const struct uln_link_pkt *pkts, unsigned ne,
                   unsigned done, unsigned end)
{
    uint64_t ready = 0;
    for (unsigned e = 0; e < ne; e++) {
        const struct ent *en = &lf->ents[e];
        struct hold *x = en->kind == ENT_HOLD ? &lf->hold[en->idx] : NULL;
        if (e < done) {
            lf->st.fault_dup += en->kind == ENT_DUP;
            if (x) hold_sent(lf, x);
        } else if (e < end) {
            if (x && x->state == HOLD_QUEUED) {
                x->state = HOLD_READY;
                x->ticket = ++ready;
            } else if (en->kind == ENT_DUP) {
                dup_later(lf, en, pkts, ++ready);
            }
        } else if (x && x->state == HOLD_QUEUED) {
            x->state = HOLD_HELD; /* what it waited for did not go: wait on */
        }
    }
}

/* One batch (up to ULN_LINK_BATCH packets, maybe none) through the
 * injector: what is ready or due first, then each packet's entries; the
 * inner link sends them. Returns how many packets were consumed; *again:
 * the inner link is full. */
static unsigned send_batch(struct link_fault *lf, const struct uln_link_pkt *pkts, unsigned n,
                           bool *again)
{
    unsigned ne = 0;
    uint64_t now = 0;
    if (lf->nheld) {
        now = uln_now_ns();
        ne = queue_held(lf, ne, HOLD_READY, -1, now);
        ne = queue_held(lf, ne, HOLD_HELD, -1, now);
    }
    for (unsigned i = 0; i < n; i++)
        ne = decide(lf, pkts, i, ne, &now);
    for (unsigned e = 0; e < ne; e++)
        ent_pkt(lf, e, pkts);
    int r = ne ? uln_link_send(lf->in, lf->out, ne) : 0;
    /* r < 0 cannot be (every entry was checked): taken as "full", it undoes
     * the batch. */
    unsigned done = r > 0 ? (unsigned)r : 0;
    *again = done < ne;
    unsigned u = commit(lf, n, done);
    settle(lf, pkts, ne, done, u < n ? lf->fate[u].pos : ne);
    return u;
}

static int fault_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct link_fault *lf = (struct link_fault *)l;
    for (unsigned i = 0; i < n; i++) {
        const struct uln_link_pkt *p = &pkts[i];
        if (p->peer < 0 || (unsigned)p->peer >= lf->npeers || p->niov == 0 ||
            p->niov > ULN_LINK_IOV_WIRE)
            return -EINVAL;
        if (uln_link_pkt_len(p) > l->payload_max) return -EMSGSIZE;
    }
    unsigned done = 0;
    bool again = false;
    do {
        unsigned k = n - done > ULN_LINK_BATCH ? ULN_LINK_BATCH : n - done;
        done += send_batch(lf, pkts + done, k, &again);
    } while (done < n && !again);
    return (int)done;
}

static int fault_flush(struct uln_link *l)
{
    struct link_fault *lf = (struct link_fault *)l;
    if (!lf->nheld) return 0;
    bool again = false;
    send_batch(lf, NULL, 0, &again);
    return (int)lf->nheld;
}

/* ------------------------------------------------------------------------- */
/* The rest passes through                                                    */
/* ------------------------------------------------------------------------- */

static struct uln_link *inner(const struct uln_link *l)
{
    return ((const struct link_fault *)l)->in;
}

static int fault_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    fault_flush(l); /* held packets whose time has come go, whoever calls */
    return uln_link_recv(inner(l), out, max);
}

static int fault_rx_release(struct uln_link *l, uint32_t handle)
{
    return uln_link_rx_release(inner(l), handle);
}

static const void *fault_rx_addr(const struct uln_link *l, uint32_t handle, socklen_t *len)
{
    return uln_link_rx_addr(inner(l), handle, len);
}

#ifdef ULN_TEST_HOOKS
static int fault_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                         struct uln_link_rx *out)
{
    return uln_link_rx_lend(inner(l), peer, buf, len, out);
}
#endif

static int fault_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct link_fault *lf = (struct link_fault *)l;
    int id = uln_link_add_peer(lf->in, addr, len);
    if (id >= 0 && (unsigned)id >= lf->npeers) lf->npeers = (unsigned)id + 1;
    return id;
}

static int fault_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    return uln_link_set_peer(inner(l), peer, addr, len);
}

static int fault_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    return uln_link_find_peer(inner(l), addr, len);
}

static int fault_fds(const struct uln_link *l, int *fds, int max)
{
    return uln_link_fds(inner(l), fds, max);
}

/* When the next held packet is due (now for READY ones); UINT64_MAX: none. */
static uint64_t next_due(const struct link_fault *lf, uint64_t now)
{
    uint64_t due = UINT64_MAX;
    for (unsigned h = 0; h < HOLD_SLOTS; h++) {
        const struct hold *x = &lf->hold[h];
        if (x->state == HOLD_READY) return now;
        if (x->state == HOLD_HELD && x->at + lf->f.delay_us * 1000u < due)
            due = x->at + lf->f.delay_us * 1000u;
    }
    return due;
}

/* Sleep no longer than the next held packet may wait, then let it go. */
static int fault_wait(struct uln_link *l, int timeout_ms)
{
    struct link_fault *lf = (struct link_fault *)l;
    if (lf->nheld) {
        uint64_t now = uln_now_ns(), due = next_due(lf, now);
        int ms = due <= now ? 0 : (int)((due - now + 999999u) / 1000000u);
        if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = ms;
    }
    int r = uln_link_wait(lf->in, timeout_ms);
    fault_flush(l);
    return r;
}

static int fault_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    return uln_link_local(inner(l), ss, len);
}

static void fault_info(const struct uln_link *l, struct uln_link_info *info)
{
    uln_link_info(inner(l), info);
    info->fault = true;
}

static void fault_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    const struct link_fault *lf = (const struct link_fault *)l;
    uln_link_stats(lf->in, st);
    st->fault_drop = lf->st.fault_drop;
    st->fault_dup = lf->st.fault_dup;
    st->fault_reorder = lf->st.fault_reorder;
    st->fault_late = lf->st.fault_late;
    st->fault_nohold = lf->st.fault_nohold;
}

static void fault_close(struct uln_link *l)
{
    struct link_fault *lf = (struct link_fault *)l;
    uln_link_close(lf->in);
    free(lf->hold_mem);
    free(lf);
}

static void fault_one_peer(struct uln_link *l, bool on)
{
    uln_link_one_peer(((struct link_fault *)l)->in, on);
}

static const struct uln_link_ops fault_ops = {
    .send = fault_send,
    .flush = fault_flush,
    .recv = fault_recv,
    .rx_release = fault_rx_release,
    .rx_addr = fault_rx_addr,
#ifdef ULN_TEST_HOOKS
    .rx_lend = fault_rx_lend,
#endif
    .add_peer = fault_add_peer,
    .set_peer = fault_set_peer,
    .find_peer = fault_find_peer,
    .fds = fault_fds,
    .wait = fault_wait,
    .local = fault_local,
    .info = fault_info,
    .stats = fault_stats,
    .close = fault_close,
    .one_peer = fault_one_peer,
};

int uln_link_fault_open(struct uln_link *in, const struct uln_link_fault *f, struct uln_link **out)
{
    struct link_fault *lf = calloc(1, sizeof(*lf));
    size_t stride = ((size_t)in->payload_max + 63u) & ~(size_t)63u;
    if (lf && f->reorder > 0) lf->hold_mem = malloc(HOLD_SLOTS * stride);
    if (!lf || (f->reorder > 0 && !lf->hold_mem)) {
        free(lf);
        uln_link_close(in);
        return -ENOMEM;
    }
    lf->base = (struct uln_link){.ops = &fault_ops, .payload_max = in->payload_max};
    lf->in = in;
    lf->f = *f;
    lf->thr_drop = prob_thr(f->drop);
    lf->thr_dup = prob_thr(f->dup);
    lf->thr_reorder = prob_thr(f->reorder);
    lf->rng = f->seed;
    for (unsigned i = 0; i < HOLD_SLOTS; i++)
        lf->hold[i].data = lf->hold_mem ? lf->hold_mem + (size_t)i * stride : NULL;
    *out = &lf->base;
    return 0;
}

int uln_link_fault_wrap(const char *spec, struct uln_link **link, char *err, size_t errlen)
{
    struct uln_link_fault f;
    int rc = uln_link_fault_parse(spec, &f, err, errlen);
    if (rc == 0 && !uln_link_fault_any(&f)) return 0;
    if (rc == 0) return uln_link_fault_open(*link, &f, link); /* closes it on failure */
    uln_link_close(*link);
    *link = NULL;
    return rc;
}
