/*
 * test_rel_sim.c - two reliability state machines over a simulated lossy link,
 * on a virtual clock (no sockets, no sleeping): seeded drop, duplication,
 * reordering, jitter and corruption (caught by a CRC32, so it is loss). Two
 * "applications" stream numbered messages both ways at once; each message
 * must arrive exactly once and in order, its slot bookkeeping must never go
 * wrong, and no side may ever see feedback it has to reject.
 *
 *   test_rel_sim <scenario> [messages]
 *     drop     10^6 messages each way, 10 % drop, sequence numbers wrapping
 *     mixed    10^6 each way, 10 % drop + 5 % dup + reordering + jitter + 1 % corruption
 *     slow     consumers that stall now and then: STOP/GO and probes at work
 *     window   the smallest (4) and a large (1024) window under loss and reordering
 *     shape    packets sent per message: < 1.1 at 1 % loss (selective repeat),
 *              exactly 1 at 0 % with under 1 ACK per 4 data packets
 *     stuck    5 % loss behind a small window and credit: fast repair, few timeouts
 *     cwnd     the congestion window on a 1 GB/s link of 200 us round trip: grows
 *              to the bandwidth-delay product, shrinks when a short queue
 *              overflows, holds under 5 % random loss, never passes cwnd_max
 *     spurious no loss, a receiver descheduled past the sender's timeout that
 *              then reads its backlog 64 packets a pass: no fast retransmit,
 *              and the timers learn the stalls from the receiver's D-SACKs
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rel/rel.h"

#define US        1000ull
#define MS        1000000ull
#define NONE      UINT64_MAX
#define MSG_BYTES 1000u /* bytes of a message packet, for the congestion window */

/* ------------------------------------------------------------------------- */
/* Randomness and the wire                                                    */
/* ------------------------------------------------------------------------- */

static uint64_t rng;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static bool chance(double p)
{
    return p > 0 && (double)(rnd() >> 11) * 0x1.0p-53 < p;
}

static uint32_t crc_table[256];
static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}
static uint32_t crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* A test-only encoding of struct uln_rel_pkt plus the message number. */
#define WIRE_MAX 64
#define PUT(v)                                                                                     \
    do {                                                                                           \
        memcpy(w + n, &(v), sizeof(v));                                                            \
        n += sizeof(v);                                                                            \
    } while (0)
#define GET(v)                                                                                     \
    do {                                                                                           \
        memcpy(&(v), w + n, sizeof(v));                                                            \
        n += sizeof(v);                                                                            \
    } while (0)

static size_t encode(const struct uln_rel_pkt *p, uint64_t msg, uint8_t *w)
{
    size_t n = 0;
    PUT(p->src_epoch);
    PUT(p->dst_epoch);
    PUT(p->flags);
    if (p->flags & ULN_REL_DATA) {
        PUT(p->seq);
        PUT(msg);
    }
    if (p->flags & ULN_REL_FB) {
        PUT(p->fb.ack);
        PUT(p->fb.lose);
        PUT(p->fb.sack);
        PUT(p->fb.sack_off);
        PUT(p->fb.credit);
        PUT(p->fb.reorder);
    }
    /* rel's D-SACK rides in control packets only, as on ulnet's wire. */
    if (!(p->flags & ULN_REL_DATA)) PUT(p->fb.dup);
    uint32_t c = crc32(w, n);
    PUT(c);
    return n;
}

static bool decode(const uint8_t *w, size_t len, struct uln_rel_pkt *p, uint64_t *msg)
{
    size_t n = 0;
    uint32_t c;
    if (len < 14 || crc32(w, len - 4) != (memcpy(&c, w + len - 4, 4), c)) return false;
    memset(p, 0, sizeof(*p));
    GET(p->src_epoch);
    GET(p->dst_epoch);
    GET(p->flags);
    if (p->flags & ULN_REL_DATA) {
        GET(p->seq);
        GET(*msg);
    }
    if (p->flags & ULN_REL_FB) {
        GET(p->fb.ack);
        GET(p->fb.lose);
        GET(p->fb.sack);
        GET(p->fb.sack_off);
        GET(p->fb.credit);
        GET(p->fb.reorder);
    }
    /* rel's D-SACK rides in control packets only, as on ulnet's wire. */
    if (!(p->flags & ULN_REL_DATA)) GET(p->fb.dup);
    return n + 4 == len;
}

/* ------------------------------------------------------------------------- */
/* The link: a heap of packets ordered by arrival time                        */
/* ------------------------------------------------------------------------- */

struct flying {
    uint64_t at, order;
    uint8_t to, len;
    uint8_t b[WIRE_MAX];
};

#define HEAP_MAX (1u << 16)
static struct flying *heap;
static uint32_t heap_n;
static uint64_t heap_order;

static bool fly_before(const struct flying *a, const struct flying *b)
{
    return a->at != b->at ? a->at < b->at : a->order < b->order;
}

static void heap_push(const struct flying *f)
{
    if (heap_n == HEAP_MAX) {
        CHECK(!"link heap overflow");
        return;
    }
    uint32_t i = heap_n++;
    while (i && fly_before(f, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = *f;
}

static void heap_pop(struct flying *out)
{
    *out = heap[0];
    struct flying last = heap[--heap_n];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= heap_n) break;
        if (c + 1 < heap_n && fly_before(&heap[c + 1], &heap[c])) c++;
        if (!fly_before(&heap[c], &last)) break;
        heap[i] = heap[c];
        i = c;
    }
    if (heap_n) heap[i] = last;
}

/* ------------------------------------------------------------------------- */
/* Scenario, sides, applications                                              */
/* ------------------------------------------------------------------------- */

struct scenario {
    const char *name;
    uint64_t msgs[2]; /* messages side 0 / side 1 sends */
    double drop, dup, reorder, corrupt;
    uint64_t lat, jitter, reorder_extra, gap; /* ns */
    uint32_t queue_max; /* packets waiting for the link beyond this are dropped (0: no limit) */
    uint32_t window, rx_bufs;
    uint32_t epoch[2];
    double stall_p; /* chance per consumed message that the consumer stalls */
    uint64_t stall_len;
    /* Side 1 descheduled for desched_len every desched_every (0: never): it
     * neither reads, nor sends, nor runs its timers; what arrives meanwhile
     * waits in its socket, read pass_batch packets a pass, pass_gap apart. */
    uint64_t desched_every, desched_len, pass_gap;
    uint32_t pass_batch;
    uint64_t seed;
};

struct side {
    struct uln_rel r;
    uint32_t isn, peer_isn;
    uint64_t n_send, next_msg, n_acked;
    uint64_t *tx_msg; /* message in each send slot, NONE when free */
    uint64_t expect;  /* next message due in order */
    uint64_t *held;   /* out-of-order message in each receive slot */
    uint64_t unreleased, stall_until;
    uint64_t link_busy;
    uint64_t sent_pkts, corrupt_drops, bad_verdicts, bookkeeping_errors;
    uint64_t queue_drops;                      /* the link's queue was full (queue_max) */
    uint64_t tx_bytes_max;                     /* most bytes in flight at once */
    uint64_t cwnd_min, cwnd_last;              /* the congestion window after the first tenth */
    uint64_t wake_at, next_desched, next_pass; /* descheduling (scenario.desched_*) */
    struct flying *sock;                       /* arrived, not yet read: a FIFO */
    uint32_t sock_head, sock_tail;
};

static const struct scenario *sc;
static struct side sides[2];
static uint64_t now;

static void transmit(int from, const struct uln_rel_pkt *p, uint64_t msg)
{
    struct side *s = &sides[from];
    struct flying f;
    s->sent_pkts++;
    f.to = (uint8_t)(1 - from);
    f.len = (uint8_t)encode(p, msg, f.b);
    uint64_t depart = (now > s->link_busy ? now : s->link_busy) + sc->gap;
    if (sc->queue_max && depart - now > (uint64_t)sc->queue_max * sc->gap) {
        s->queue_drops++; /* drop-tail: the queue before the link is full */
        return;
    }
    s->link_busy = depart;
    int copies = chance(sc->dup) ? 2 : 1;
    if (chance(sc->drop)) copies--;
    for (int i = 0; i < copies; i++) {
        struct flying g = f;
        g.at = depart + sc->lat + (sc->jitter ? rnd() % sc->jitter : 0) +
               (chance(sc->reorder) ? sc->reorder_extra : 0);
        g.order = heap_order++;
        if (chance(sc->corrupt)) {
            uint32_t bit = (uint32_t)(rnd() % (g.len * 8u));
            g.b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        heap_push(&g);
    }
}

static void consume(struct side *s)
{
    if (sc->stall_p > 0) {
        if (now < s->stall_until) {
            s->unreleased++;
            return;
        }
        if (chance(sc->stall_p)) s->stall_until = now + sc->stall_len;
    }
    uln_rel_rx_release(&s->r, 1, now);
}

static void take_in_order(struct side *s, uint64_t msg, uint32_t seq)
{
    if (msg != s->expect || seq != s->peer_isn + (uint32_t)msg) s->bookkeeping_errors++;
    s->expect++;
    consume(s);
}

static void drain_acked(struct side *s)
{
    uint32_t seq;
    while (uln_rel_tx_next_acked(&s->r, &seq)) {
        uint64_t *m = &s->tx_msg[seq & s->r.mask];
        if (*m == NONE || (uint32_t)*m != seq - s->isn) s->bookkeeping_errors++;
        *m = NONE;
        s->n_acked++;
    }
}

static void arrive(const struct flying *f)
{
    struct side *s = &sides[f->to];
    struct uln_rel_pkt p;
    uint64_t msg = NONE;
    if (!decode(f->b, f->len, &p, &msg)) {
        s->corrupt_drops++;
        return;
    }
    int v = uln_rel_rx(&s->r, &p, now);
    switch (v) {
    case ULN_REL_RX_DELIVER:
        take_in_order(s, msg, p.seq);
        break;
    case ULN_REL_RX_HOLD: {
        uint64_t *h = &s->held[p.seq & s->r.mask];
        if (*h != NONE || (uint32_t)msg != p.seq - s->peer_isn) s->bookkeeping_errors++;
        *h = msg;
        break;
    }
    case ULN_REL_RX_NONE:
    case ULN_REL_RX_DUP:
        break;
    default: /* OUT_OF_WINDOW included: a sender honouring credit never causes it */
        s->bad_verdicts++;
        break;
    }
    uint32_t seq;
    while (uln_rel_rx_next(&s->r, &seq)) {
        uint64_t *h = &s->held[seq & s->r.mask];
        uint64_t m = *h;
        *h = NONE;
        take_in_order(s, m, seq);
    }
    drain_acked(s);
}

/* The window's bounds, seen after every send. */
static void watch_cwnd(struct side *s)
{
    uint64_t b = uln_rel_tx_bytes(&s->r), w = uln_rel_cwnd(&s->r);
    if (b > s->tx_bytes_max) s->tx_bytes_max = b;
    if (s->next_msg > s->n_send / 10 && w < s->cwnd_min) s->cwnd_min = w;
    s->cwnd_last = w;
}

static void service(int i)
{
    struct side *s = &sides[i];
    struct uln_rel_pkt p;
    if (s->unreleased && now >= s->stall_until) {
        uln_rel_rx_release(&s->r, (uint32_t)s->unreleased, now);
        s->unreleased = 0;
    }
    if (uln_rel_tick(&s->r, now) != ULN_REL_OPEN && s->r.state != ULN_REL_CONNECTING) return;
    while (uln_rel_tx_next_resend(&s->r, now, &p)) {
        uint64_t m = s->tx_msg[p.seq & s->r.mask];
        if (m == NONE) s->bookkeeping_errors++;
        transmit(i, &p, m);
    }
    while (s->next_msg < s->n_send && uln_rel_tx_assign(&s->r, now, MSG_BYTES, &p) == 0) {
        uint64_t *m = &s->tx_msg[p.seq & s->r.mask];
        if (*m != NONE || p.seq != s->isn + (uint32_t)s->next_msg) s->bookkeeping_errors++;
        *m = s->next_msg++;
        transmit(i, &p, *m);
    }
    watch_cwnd(s);
    for (int k = 0; k < 4 && uln_rel_ctrl(&s->r, now, &p); k++)
        transmit(i, &p, NONE);
}

/* Descheduling (scenario.desched_*): a side that is not running. */
static bool awake(struct side *s)
{
    if (now >= s->next_desched) {
        s->wake_at = now + sc->desched_len;
        s->next_desched = now + sc->desched_every;
    }
    return now >= s->wake_at;
}

/* Arrivals wait in the receiver's socket, in order, until it reads them. */
static void sock_push(const struct flying *f)
{
    struct side *s = &sides[f->to];
    if (s->sock_tail - s->sock_head == HEAP_MAX) {
        CHECK(!"socket overflow");
        return;
    }
    s->sock[s->sock_tail++ % HEAP_MAX] = *f;
    if (s->next_pass == NONE) s->next_pass = now;
}

/* A pass: one batch read (recvmmsg) and handled, the next pass_gap later. */
static void sock_read(struct side *s)
{
    if (!s->sock || s->sock_head == s->sock_tail || now < s->next_pass) return;
    for (uint32_t k = 0; k < sc->pass_batch && s->sock_head != s->sock_tail; k++)
        arrive(&s->sock[s->sock_head++ % HEAP_MAX]);
    s->next_pass = s->sock_head == s->sock_tail ? NONE : now + sc->pass_gap;
}

/* When the side must be looked at next: its timers only while it runs. */
static uint64_t desched_deadline(struct side *s)
{
    if (now < s->wake_at) return s->wake_at;
    uint64_t d = uln_rel_next_deadline(&s->r);
    if (s->next_pass < d) d = s->next_pass < now ? now : s->next_pass;
    if (s->next_desched < d) d = s->next_desched;
    return d;
}

static bool finished(void)
{
    for (int i = 0; i < 2; i++)
        if (sides[i].n_acked != sides[i].n_send || sides[1 - i].expect != sides[i].n_send)
            return false;
    return true;
}

struct result {
    uint64_t sim_ns;
    double wall_s;
    struct uln_rel_stats st[2];
    uint64_t sent_pkts[2];
    uint64_t queue_drops, tx_bytes_max, cwnd_min, cwnd_last; /* side 0's */
};

static bool run(const struct scenario *scn, struct result *res)
{
    sc = scn;
    rng = scn->seed;
    heap_n = 0;
    heap_order = 0;
    now = 0;
    struct uln_rel_cfg cfg;
    uln_rel_cfg_default(&cfg);
    cfg.window = scn->window;
    cfg.rx_bufs = scn->rx_bufs;
    cfg.mss = MSG_BYTES;
    for (int i = 0; i < 2; i++) {
        struct side *s = &sides[i];
        memset(s, 0, sizeof(*s));
        s->isn = scn->epoch[i];
        s->peer_isn = scn->epoch[1 - i];
        s->n_send = scn->msgs[i];
        s->cwnd_min = UINT64_MAX;
        s->next_desched = s->next_pass = NONE;
        s->sock = scn->desched_every ? malloc(HEAP_MAX * sizeof(*s->sock)) : NULL;
        s->tx_msg = malloc(scn->window * sizeof(uint64_t));
        s->held = malloc(scn->window * sizeof(uint64_t));
        for (uint32_t k = 0; k < scn->window; k++)
            s->tx_msg[k] = s->held[k] = NONE;
        CHECK(uln_rel_init(&s->r, &cfg, scn->epoch[i], now) == 0);
    }
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    uint64_t stuck = 0;
    bool ok = true;
    sides[1].next_desched = scn->desched_every ? scn->desched_every : NONE;
    while (!finished()) {
        uint64_t t = heap_n ? heap[0].at : NONE;
        for (int i = 0; i < 2; i++) {
            uint64_t d = desched_deadline(&sides[i]);
            if (d < t) t = d;
            if (sides[i].unreleased && sides[i].stall_until < t) t = sides[i].stall_until;
        }
        if (t == NONE) {
            fprintf(stderr, "%s: nothing scheduled and not finished\n", scn->name);
            ok = false;
            break;
        }
        if (t > now) {
            now = t;
            stuck = 0;
        } else if (++stuck > 1000) {
            fprintf(stderr, "%s: no progress at t=%" PRIu64 "\n", scn->name, now);
            ok = false;
            break;
        }
        while (heap_n && heap[0].at <= now) {
            struct flying f;
            heap_pop(&f);
            if (scn->desched_every)
                sock_push(&f);
            else
                arrive(&f);
        }
        for (int i = 0; i < 2; i++)
            if (awake(&sides[i])) {
                sock_read(&sides[i]);
                service(i);
            }
        if (sides[0].r.state == ULN_REL_DEAD || sides[1].r.state == ULN_REL_DEAD) {
            fprintf(stderr, "%s: a side declared the other dead\n", scn->name);
            ok = false;
            break;
        }
        if (now > 600000 * MS) {
            fprintf(stderr, "%s: virtual time ran out\n", scn->name);
            ok = false;
            break;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    res->sim_ns = now;
    res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) * 1e-9;
    CHECK(ok);
    for (int i = 0; i < 2; i++) {
        struct side *s = &sides[i];
        const struct uln_rel_stats *st = &s->r.stats;
        res->st[i] = *st;
        res->sent_pkts[i] = s->sent_pkts;
        if (i == 0) {
            res->queue_drops = s->queue_drops;
            res->tx_bytes_max = s->tx_bytes_max;
            res->cwnd_min = s->cwnd_min;
            res->cwnd_last = s->cwnd_last;
        }
        /* The memory bound: never more bytes in flight than cwnd_max. */
        CHECK(s->tx_bytes_max <= s->r.cfg.cwnd_max);
        CHECK_EQ(sides[1 - i].expect, s->n_send); /* all arrived, once, in order */
        CHECK_EQ(s->n_acked, s->n_send);
        CHECK_EQ(s->bookkeeping_errors, 0);
        CHECK_EQ(s->bad_verdicts, 0);
        /* The peer is honest: nothing it sends may be refused. */
        CHECK_EQ(st->bad_ack + st->bad_sack + st->bad_lose + st->bad_credit + st->malformed +
                     st->stale + st->rx_nobuf + st->rx_oow + st->bad_release + st->resets,
                 0);
        double per_msg = s->n_send ? (double)(st->tx_data + st->tx_resend) / (double)s->n_send : 0;
        printf("  %-7s side %d: %8" PRIu64 " msgs  data %8" PRIu64 "  resent %7" PRIu64
               " (fast %7" PRIu64 ", timeout %5" PRIu64 ")  ctrl %7" PRIu64 "  piggy %7" PRIu64
               "  stop %4" PRIu64 "  probe %3" PRIu64 "  dup-in %6" PRIu64 "  crc-drop %5" PRIu64
               "  sent/msg %.4f\n",
               scn->name, i, s->n_send, st->tx_data, st->tx_resend, st->tx_fast, st->tx_timeout,
               st->tx_ctrl, st->fb_piggy, st->stop_sent, st->tx_probe, st->rx_dup, s->corrupt_drops,
               per_msg);
        uln_rel_fini(&s->r);
        free(s->tx_msg);
        free(s->held);
        free(s->sock);
    }
    printf("  %-7s %.1f ms simulated, %.2f s wall\n", scn->name, (double)res->sim_ns / 1e6,
           res->wall_s);
    return ok;
}

/* ------------------------------------------------------------------------- */
/* Scenarios                                                                  */
/* ------------------------------------------------------------------------- */

static uint64_t scale = 1000000;

static struct scenario base(const char *name)
{
    struct scenario s;
    memset(&s, 0, sizeof(s));
    s.name = name;
    s.msgs[0] = s.msgs[1] = scale;
    s.lat = 5 * US;
    s.gap = 100; /* 10 M packets/s per direction */
    s.window = 256;
    s.epoch[0] = 0x1234567u;
    s.epoch[1] = 0x89abcdefu;
    s.seed = 42;
    return s;
}

static void sc_drop(void)
{
    struct scenario s = base("drop");
    s.drop = 0.10;
    /* Both sequence spaces wrap mid-stream. */
    s.epoch[0] = 0xffffffffu - (uint32_t)(scale / 3);
    s.epoch[1] = 0xffffffffu - (uint32_t)(scale / 2);
    struct result r;
    run(&s, &r);
}

static void sc_mixed(void)
{
    struct scenario s = base("mixed");
    s.drop = 0.10;
    s.dup = 0.05;
    s.reorder = 0.05;
    s.reorder_extra = 20 * US;
    s.jitter = 10 * US;
    s.corrupt = 0.01;
    s.seed = 7;
    struct result r;
    run(&s, &r);
    CHECK(r.st[0].rx_dup > 0 && r.st[1].rx_dup > 0); /* duplicates were suppressed */
}

static void sc_slow(void)
{
    struct scenario s = base("slow");
    s.msgs[0] = s.msgs[1] = scale / 5;
    s.drop = 0.02;
    s.jitter = 2 * US;
    s.window = 128;
    s.rx_bufs = 64;
    s.stall_p = 1.0 / 3000;
    s.stall_len = 3 * MS;
    s.seed = 3;
    struct result r;
    run(&s, &r);
    CHECK(r.st[0].stop_sent > 0 && r.st[1].stop_sent > 0); /* STOP/GO happened */
}

static void sc_window(void)
{
    struct scenario s = base("win4");
    s.msgs[0] = s.msgs[1] = scale / 10;
    s.window = 4;
    s.drop = 0.10;
    s.jitter = 3 * US;
    s.reorder = 0.02;
    s.reorder_extra = 10 * US;
    s.seed = 11;
    struct result r;
    run(&s, &r);
    s = base("win1024");
    s.msgs[0] = s.msgs[1] = scale / 2;
    s.window = 1024;
    s.drop = 0.10;
    s.dup = 0.02;
    s.jitter = 5 * US;
    s.reorder = 0.02;
    s.reorder_extra = 30 * US;
    s.seed = 12;
    run(&s, &r);
}

static void sc_shape(void)
{
    struct scenario s = base("loss1");
    s.msgs[1] = 0; /* one way: the other side only acknowledges */
    s.drop = 0.01;
    s.seed = 5;
    struct result r;
    run(&s, &r);
    double sent = (double)(r.st[0].tx_data + r.st[0].tx_resend) / (double)s.msgs[0];
    printf("  loss1   data packets per message %.4f (selective repeat; go-back-N would "
           "resend a window per loss)\n",
           sent);
    CHECK(sent < 1.1);

    s = base("loss0");
    s.msgs[1] = 0;
    s.seed = 6;
    run(&s, &r);
    double acks = (double)r.st[1].tx_ctrl / (double)r.st[0].tx_data;
    printf("  loss0   data packets per message %.4f, ACK packets per data packet %.4f\n",
           (double)(r.st[0].tx_data + r.st[0].tx_resend) / (double)s.msgs[0], acks);
    CHECK_EQ(r.st[0].tx_data, s.msgs[0]);
    CHECK_EQ(r.st[0].tx_resend, 0);
    CHECK(acks < 0.25);
}

/* Incast's loss: one way, 5 % of every packet lost (data and feedback), the
 * sender held by a small window and the receiver's credit, so that it is
 * stuck behind nearly every hole. Loss must be repaired by LOSE, the order
 * rule and the probe of a lost fast retransmission - not by timeouts, each
 * of which costs the whole link several round trips. */
static void sc_stuck(void)
{
    struct scenario s = base("stuck");
    s.msgs[0] = scale / 5;
    s.msgs[1] = 0;
    s.drop = 0.05;
    s.jitter = 2 * US;
    s.window = 32;
    s.rx_bufs = 32;
    s.seed = 13;
    struct result r;
    run(&s, &r);
    const struct uln_rel_stats *st = &r.st[0];
    printf("  stuck   %" PRIu64 " resent: fast %" PRIu64 ", probe %" PRIu64 ", tail probe %" PRIu64
           ", timeout %" PRIu64 " (%" PRIu64 " expiries)\n",
           st->tx_resend, st->tx_fast, st->tx_pto, st->tx_tlp, st->tx_timeout, st->rto_fired);
    /* A timeout is left for a hole whose fast retransmission and probe were
     * both lost, or whose every report was: well under 1 % of the holes. */
    CHECK(st->rto_fired * 100 < st->tx_fast);
}

/* The congestion window on a 1 GB/s link (1000 B packets, 1 us apart) with
 * a 200 us round trip: a bandwidth-delay product of 200 KB, 200 packets;
 * 1024 slots, so cwnd_max is 1 MB and only the window in bytes keeps the
 * flight near what the path holds. */
static struct scenario cwnd_link(const char *name)
{
    struct scenario s = base(name);
    s.msgs[0] = scale / 5;
    s.msgs[1] = 0;
    s.lat = 100 * US;
    s.gap = 1 * US;
    s.window = 1024;
    return s;
}

#define BDP_BYTES (200ull * MSG_BYTES)

static double link_share(const struct scenario *s, const struct result *r)
{
    return (double)(s->msgs[0] * s->gap) / (double)r->sim_ns;
}

static void sc_cwnd(void)
{
    struct result r;
    /* Grows: from 64 packets (cwnd_init) to the BDP and more, the link full. */
    struct scenario s = cwnd_link("grow");
    run(&s, &r);
    printf("  grow    cwnd %" PRIu64 " B at the end, least %" PRIu64 " B; link %.3f full\n",
           r.cwnd_last, r.cwnd_min, link_share(&s, &r));
    CHECK(r.cwnd_min >= BDP_BYTES);
    CHECK(link_share(&s, &r) > 0.9);
    CHECK_EQ(r.st[0].cwnd_cuts, 0);

    /* Shrinks: a queue of 50 packets before the link. Without the window in
     * bytes the whole 1 MB flight would pile into it and 4 in 5 packets sent
     * would be dropped, round after round. */
    s = cwnd_link("congest");
    s.queue_max = 50;
    run(&s, &r);
    double lost = (double)r.queue_drops / (double)s.msgs[0];
    printf("  congest cwnd %" PRIu64 " B at the end (cwnd_max %u B), %" PRIu64
           " cuts, %.4f of the packets dropped at the queue; link %.3f full\n",
           r.cwnd_last, s.window * MSG_BYTES, r.st[0].cwnd_cuts, lost, link_share(&s, &r));
    CHECK(r.st[0].cwnd_cuts > 0);
    CHECK(r.cwnd_last < (uint64_t)s.window * MSG_BYTES / 2);
    CHECK(lost < 0.08);
    CHECK(link_share(&s, &r) > 0.7);

    /* Holds: 5 % of all packets lost at random (data and feedback), no
     * queue. The window never goes below the BDP the path shows, and the
     * link stays busy. */
    s = cwnd_link("random");
    s.drop = 0.05;
    run(&s, &r);
    printf("  random  cwnd %" PRIu64 " B at the end, least %" PRIu64 " B; %" PRIu64
           " cuts, %" PRIu64 " lossy rounds; link %.3f full (%.3f at most)\n",
           r.cwnd_last, r.cwnd_min, r.st[0].cwnd_cuts, r.st[0].rounds_lossy, link_share(&s, &r),
           0.95);
    /* The floor is the delivery rate the path showed x its least RTT; with 5 %
     * of the packets lost, what is delivered is 95 % of the link's rate. */
    CHECK(r.cwnd_min >= BDP_BYTES / 100 * 95);
    CHECK(link_share(&s, &r) > 0.78);
}

/* No loss, but the receiver descheduled for 2 ms every 10 ms, as on a loaded
 * host: the sender's timer fires and resends the oldest packet, while the
 * originals wait in the receiver's socket. The receiver then reads its backlog
 * a batch a pass, and acknowledges each: the ACK of the resent packet is the
 * original's (it came first), so it says nothing of what was sent after the
 * resend, and the packets still unread must not be called lost. The timer's
 * resends cannot be told from losses; a fast retransmit can, so there must be
 * none. */
static void sc_spurious(void)
{
    struct scenario s = base("spurious");
    s.msgs[0] = scale / 10;
    s.msgs[1] = 0;
    s.window = 1024;
    s.gap = 1 * US; /* 1 M packets/s: a 2 ms stall leaves the window waiting */
    s.desched_every = 10 * MS;
    s.desched_len = 2 * MS;
    s.pass_batch = 64;
    s.pass_gap = 20 * US;
    s.seed = 17;
    struct result r;
    run(&s, &r);
    const struct uln_rel_stats *st = &r.st[0];
    printf("  spurious %" PRIu64 " resent: fast %" PRIu64 ", probe %" PRIu64 ", tail probe %" PRIu64
           ", timeout %" PRIu64 "; %" PRIu64 " duplicates at the receiver\n",
           st->tx_resend, st->tx_fast, st->tx_pto, st->tx_tlp, st->tx_timeout, r.st[1].rx_dup);
    /* The case arose: a timer fired during a stall (the tail probe, which
     * comes first; the timeout behind it if the probe went unanswered). */
    CHECK(st->rto_fired + st->tx_tlp > 0);
    CHECK_EQ(st->tx_fast, 0);
    CHECK_EQ(st->tx_pto, 0);
    /* The receiver named the timer's resends it had already (D-SACK), and
     * the timers learnt the stall from them: a stall every 10 ms, but only
     * the first ones cost a resend (without: one per stall, 11). */
    CHECK(st->spurious > 0);
    CHECK(r.st[1].dup_sent > 0);
    printf("  spurious: %" PRIu64 " named by the receiver over %" PRIu64 " stalls\n", st->spurious,
           r.sim_ns / s.desched_every);
    CHECK(st->tx_tlp + st->tx_timeout <= 3);
}

int main(int argc, char **argv)
{
    crc_init();
    heap = malloc(HEAP_MAX * sizeof(*heap));
    const char *which = argc > 1 ? argv[1] : "all";
    if (argc > 2) scale = strtoull(argv[2], NULL, 0);
    bool all = !strcmp(which, "all"), any = false;
    struct {
        const char *name;
        void (*fn)(void);
    } t[] = {{"drop", sc_drop}, {"stuck", sc_stuck},      {"mixed", sc_mixed},
             {"slow", sc_slow}, {"window", sc_window},    {"shape", sc_shape},
             {"cwnd", sc_cwnd}, {"spurious", sc_spurious}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (all || !strcmp(which, t[i].name)) {
            printf("%s:\n", t[i].name);
            t[i].fn();
            any = true;
        }
    if (!any) {
        fprintf(stderr, "unknown scenario %s\n", which);
        failed++;
    }
    free(heap);
    return summary();
}
