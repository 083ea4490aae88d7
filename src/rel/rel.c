/*
 * rel.c - the reliability state machine (see rel.h and docs/protocol.md).
 *
 * Sequence numbers are 32-bit and wrap: they are compared with serial-number
 * arithmetic (RFC 1982), which is sound because no two seqs in use at once are
 * more than a window (<= 2^15) apart.
 */
#include "rel/rel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Sending-side state of one seq in flight. */
enum { SLOT_FREE = 0, SLOT_INFLIGHT, SLOT_ACKED };
enum { LOST_NO = 0, LOST_FAST, LOST_TIMEOUT, LOST_PTO, LOST_TLP };

struct uln_rel_slot {
    uint64_t tx_time;   /* last (re)transmission */
    uint64_t xmit;      /* its transmission number */
    uint8_t state;      /* SLOT_*; FREE inside [una, nxt): acked and returned */
    uint8_t lost;       /* LOST_*: waiting to be sent again, and why */
    uint8_t probe;      /* a fast retransmission awaits its answer (on_pto) */
    uint8_t timer;      /* a timer sent it last, not yet shown spurious (on_dup) */
    uint16_t retx;      /* times sent again (saturating) */
    uint32_t len;       /* bytes, for the congestion window */
    uint32_t waited;    /* ns from the first transmission to the last (saturating) */
    uint64_t delivered; /* uln_rel.delivered at its first transmission (rate) */
};

/* ------------------------------------------------------------------------- */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------- */

/* a - b as a signed distance; well defined for every input (no signed casts
 * of out-of-range values). */
static inline int64_t sdiff(uint32_t a, uint32_t b)
{
    uint32_t d = a - b;
    return d < 0x80000000u ? (int64_t)d : (int64_t)d - 0x100000000ll;
}
static inline bool seq_lt(uint32_t a, uint32_t b)
{
    return sdiff(a, b) < 0;
}
static inline uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}
static inline uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static inline struct uln_rel_slot *slot(struct uln_rel *r, uint32_t seq)
{
    return &r->slots[seq & r->mask];
}

static inline bool rbit(const struct uln_rel *r, uint32_t seq)
{
    uint32_t i = seq & r->mask;
    return (r->rcv_bits[i / 64] >> (i % 64)) & 1u;
}
static inline void rbit_set(struct uln_rel *r, uint32_t seq)
{
    uint32_t i = seq & r->mask;
    r->rcv_bits[i / 64] |= 1ull << (i % 64);
}
static inline void rbit_clear(struct uln_rel *r, uint32_t seq)
{
    uint32_t i = seq & r->mask;
    r->rcv_bits[i / 64] &= ~(1ull << (i % 64));
}

/* The current timeout: estimate (or rto_init), at least what spurious resends
 * showed (on_dup), doubled per unanswered expiry. */
static uint64_t rto_cur(const struct uln_rel *r)
{
    uint64_t t = max64(r->rto, r->late);
    for (uint32_t i = 0; i < r->backoff && t < r->cfg.rto_max; i++)
        t *= 2;
    return min64(t, r->cfg.rto_max);
}

static uint64_t ctrl_interval(const struct uln_rel *r)
{
    uint64_t t = rto_cur(r);
    for (uint32_t i = 0; i < r->ctrl_backoff && t < r->cfg.rto_max; i++)
        t *= 2;
    return min64(t, r->cfg.rto_max);
}

/* Waiting on the peer: the only time its silence means anything. */
static bool waiting(const struct uln_rel *r)
{
    return r->state == ULN_REL_CONNECTING || r->snd_una != r->snd_nxt || r->probe_out;
}

/* Called just before something is sent that the peer must answer. Silence is
 * counted from the later of this moment and the last packet heard, so a long
 * idle period before a send does not make the peer look dead at once. */
static void start_waiting(struct uln_rel *r)
{
    if (!waiting(r)) r->wait_start = r->now;
}

static uint64_t dead_at(const struct uln_rel *r)
{
    return max64(r->wait_start, r->last_heard) + r->cfg.dead_after;
}

static void tomb_add(struct uln_rel *r, uint32_t epoch)
{
    for (unsigned i = 0; i < 4; i++)
        if (r->tomb[i] == epoch) return;
    r->tomb[r->tomb_next] = epoch;
    r->tomb_next = (r->tomb_next + 1) % 4;
}

static bool in_tomb(const struct uln_rel *r, uint32_t epoch)
{
    for (unsigned i = 0; i < 4; i++)
        if (r->tomb[i] == epoch) return true;
    return false;
}

/* ------------------------------------------------------------------------- */
/* Set-up and connection lives                                                */
/* ------------------------------------------------------------------------- */

/* The caller's share of receive buffers for this peer, within rx_bufs. */
static void rx_set_limit(struct uln_rel *r, uint32_t bufs)
{
    if (bufs == 0) bufs = 1; /* never shut for good: a STOP is the caller's to hold */
    r->rx_limit = bufs < r->cfg.rx_bufs ? bufs : r->cfg.rx_bufs;
    /* Announce freed buffers once a quarter of the share is back: often enough
     * to keep a sender streaming, rarely enough not to send a packet per buffer. */
    r->go_thresh = r->rx_limit / 4 ? r->rx_limit / 4 : 1;
}

void uln_rel_cfg_default(struct uln_rel_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->window = 256;
    cfg->rx_bufs = 0;
    cfg->ack_every = 8;
    cfg->reorder = 3;
    cfg->rto_init = 1000000;          /* 1 ms */
    cfg->rto_min = 200000;            /* 0.2 ms: a LAN round trip is tens of us */
    cfg->rto_max = 1000000000;        /* 1 s */
    cfg->ack_delay = 50000;           /* 50 us, well under rto_min */
    cfg->dead_after = 10000000000ull; /* 10 s */
    cfg->keepalive = 0;
    cfg->mss = 1200;
}

/* A new life of the connection starts with the configured window: what the
 * path showed the last one may not hold (the peer may have moved). */
static void cwnd_reset(struct uln_rel *r, uint32_t isn)
{
    r->cwnd = r->cfg.cwnd_init;
    r->ssthresh = r->cfg.cwnd_max;
    r->in_flight = r->delivered = 0;
    r->bw[0] = r->bw[1] = 0;
    r->bw_at = r->now;
    r->round_end = isn;
    r->round_sent = r->round_lost = 0;
    r->cwnd_grant = 0;
}

/* Forget the sending side: a fresh sequence space starting at our epoch. */
static void tx_reset(struct uln_rel *r)
{
    uint32_t isn = r->local_epoch;
    r->snd_una = r->snd_nxt = r->snd_edge = isn; /* no credit until the peer speaks */
    r->lost_count = 0;
    r->lost_hint = isn;
    r->rack_xmit = r->rack_amb = 0;
    memset(r->slots, 0, sizeof(*r->slots) * (r->mask + 1));
    r->acked_head = r->acked_tail = 0;
    r->tx_blocked = false;
    r->backoff = 0;
    r->rto_at = ULN_REL_NEVER;
    r->pto_at = ULN_REL_NEVER;
    r->tlp_at = ULN_REL_NEVER;
    r->ctrl_at = ULN_REL_NEVER;
    r->ctrl_backoff = 0;
    r->probe_out = false;
    cwnd_reset(r, isn);
}

/* Forget the receiving side: the peer's sequence space starts at its epoch.
 * rx_used is left alone: the caller gives buffers back across lives. */
static void rx_reset(struct uln_rel *r, uint32_t isn)
{
    r->rcv_cum = r->rcv_dlv = r->rcv_high = r->adv_edge = isn;
    r->rcv_last = isn - 1;
    memset(r->rcv_bits, 0, sizeof(uint64_t) * ((r->mask + 1 + 63) / 64));
    r->ack_owed = r->pkts_owed = 0;
    r->ack_due_at = ULN_REL_NEVER;
    r->lose_pending = false;
    r->dup_pending = 0;
    r->drop_hi = isn;
    r->stop_adv = false;
}

/* Start talking to life `epoch` of the peer (first contact or a restart). */
static void adopt(struct uln_rel *r, uint32_t epoch)
{
    if (r->peer_epoch) tomb_add(r, r->peer_epoch);
    r->peer_epoch = epoch;
    r->state = ULN_REL_OPEN;
    tx_reset(r);
    rx_reset(r, epoch);
    r->last_heard = r->now;
    r->fb_now = true; /* tell it our life and give it credit */
}

int uln_rel_init(struct uln_rel *r, const struct uln_rel_cfg *cfg, uint32_t local_epoch,
                 uint64_t now)
{
    memset(r, 0, sizeof(*r));
    struct uln_rel_cfg c = *cfg;
    if (c.window < 4 || c.window > ULN_REL_WINDOW_MAX || (c.window & (c.window - 1)))
        return -EINVAL;
    if (c.rx_bufs == 0) c.rx_bufs = c.window;
    if (c.rx_bufs > c.window) return -EINVAL;
    if (c.ack_every == 0) c.ack_every = 1;
    if (c.ack_every > c.window / 4) c.ack_every = c.window / 4;
    if (c.reorder == 0) c.reorder = 1;
    if (c.reorder > c.window / 2) c.reorder = c.window / 2;
    if (c.rto_min == 0 || c.rto_min > c.rto_max || c.rto_init < c.rto_min ||
        c.rto_init > c.rto_max || c.dead_after == 0 || local_epoch == 0)
        return -EINVAL;
    if (c.mss == 0) c.mss = 1200;
    if (c.cwnd_max == 0) c.cwnd_max = (uint64_t)c.window * c.mss;
    if (c.cwnd_max < c.mss) return -EINVAL; /* not a single packet */
    if (c.cwnd_init == 0) c.cwnd_init = 64ull * c.mss;
    if (c.cwnd_init > c.cwnd_max) c.cwnd_init = c.cwnd_max;

    r->slots = calloc(c.window, sizeof(*r->slots));
    r->acked = calloc(c.window, sizeof(*r->acked));
    r->rcv_bits = calloc((c.window + 63) / 64, sizeof(uint64_t));
    if (!r->slots || !r->acked || !r->rcv_bits) {
        uln_rel_fini(r);
        return -ENOMEM;
    }
    r->cfg = c;
    r->mask = c.window - 1;
    r->local_epoch = local_epoch;
    r->now = now;
    r->rto = c.rto_init;
    r->reorder_tx = r->reorder_rx = c.reorder;
    r->rx_used = 0;
    rx_set_limit(r, c.rx_bufs);
    tx_reset(r);
    rx_reset(r, 0);
    r->state = ULN_REL_CONNECTING;
    r->ctrl_at = now; /* first hello at once */
    r->wait_start = r->last_heard = now;
    return 0;
}

void uln_rel_fini(struct uln_rel *r)
{
    free(r->slots);
    free(r->acked);
    free(r->rcv_bits);
    r->slots = NULL;
    r->acked = NULL;
    r->rcv_bits = NULL;
}

static void go_dead(struct uln_rel *r)
{
    r->state = ULN_REL_DEAD;
    r->stats.deaths++;
    /* Anything still in flight from the dead life must never be taken later. */
    if (r->peer_epoch) tomb_add(r, r->peer_epoch);
    tx_reset(r);
    r->fb_now = false;
    r->ack_owed = r->pkts_owed = 0;
}

/* ------------------------------------------------------------------------- */
/* Timers                                                                     */
/* ------------------------------------------------------------------------- */

static void mark_lost(struct uln_rel *r, uint32_t seq, struct uln_rel_slot *s, int why)
{
    s->lost = (uint8_t)why;
    r->lost_count++;
    /* Only what the receiver's reports show lost is evidence of congestion:
     * a timeout or a probe says the peer went quiet, which on a loaded host
     * is mostly a receiver descheduled, not a queue overflowing. */
    if (why == LOST_FAST) r->round_lost++;
    if (seq_lt(seq, r->lost_hint)) r->lost_hint = seq;
}

/* The retransmission timer expired: the oldest packet unacknowledged for a
 * whole timeout is lost, and only it. A timeout says the peer or the path
 * went quiet, not that the whole flight was lost: a receiver descheduled
 * past the timeout (a loaded host) has the rest waiting in its socket, and
 * resending a window's worth into its backlog is what turns a stall into a
 * collapse. The resend's answer describes the flight, and the order rule
 * (detect_losses) then finds whatever else was really lost, in one round
 * trip when anything beyond it arrived. Nothing timed out (the timer was
 * armed for a packet acknowledged since): re-arm for the oldest one. */
static void on_rto(struct uln_rel *r)
{
    uint64_t now = r->now, rto = rto_cur(r), oldest = ULN_REL_NEVER;
    for (uint32_t q = r->snd_una; q != r->snd_nxt; q++) {
        struct uln_rel_slot *s = slot(r, q);
        if (s->state != SLOT_INFLIGHT || s->lost) continue;
        if (s->tx_time + rto <= now) {
            mark_lost(r, q, s, LOST_TIMEOUT);
            r->stats.rto_fired++;
            r->backoff++; /* exponential backoff until a fresh RTT sample */
            r->rto_at = now + rto_cur(r);
            return;
        }
        oldest = min64(oldest, s->tx_time);
    }
    r->rto_at = oldest == ULN_REL_NEVER ? ULN_REL_NEVER : oldest + rto;
}

/* How long a retransmission waits for its answer before it is sent again: a
 * receiver answers a retransmission at once (rx_data), so two round trips
 * without one mean it was lost. Never above the timeout, never below half
 * rto_min (a LAN round trip measured at tens of us says little about the
 * receiver's scheduling). Before an RTT sample: the timeout. */
static uint64_t pto(const struct uln_rel *r)
{
    if (!r->have_rtt) return rto_cur(r);
    uint64_t t = max64(2 * r->srtt + r->cfg.ack_delay, max64(r->cfg.rto_min / 2, r->late));
    return min64(t, rto_cur(r));
}

/* The probe timer expired: a fast retransmission not answered within pto()
 * is lost, and sent once more. This is the case the order rule cannot see:
 * when the window or the credit is stuck behind a hole whose retransmission
 * was lost, nothing later is sent whose arrival would show it, and without
 * this only the timeout - backed off, and several times longer - would
 * repair it. Once per fast retransmission: a peer that answers nothing is
 * the timeout's business, with its backoff. First transmissions need no
 * probe: LOSE and the order rule find their loss. */
static void on_pto(struct uln_rel *r)
{
    uint64_t now = r->now, wait = pto(r), next = ULN_REL_NEVER;
    for (uint32_t q = r->snd_una; q != r->snd_nxt; q++) {
        struct uln_rel_slot *s = slot(r, q);
        if (s->state != SLOT_INFLIGHT || s->lost || !s->probe) continue;
        if (s->tx_time + wait <= now) {
            s->probe = 0;
            mark_lost(r, q, s, LOST_PTO);
            r->stats.pto_fired++;
        } else {
            next = min64(next, s->tx_time + wait);
        }
    }
    r->pto_at = next;
}

/* The tail probe (RACK-TLP's, RFC 8985): a flight whose last packets are
 * lost - a stream's end, or a flight that used up the credit or the window
 * - leaves nothing later to arrive and show them lost: no LOSE, no SACK past
 * them. Before this only the timeout found them, one packet per expiry and
 * each expiry a backoff later (a resend's ACK gives no RTT sample to end the
 * backoff): a 20-packet bundle lost at the end of a stream took 20 s at a
 * window of 64. So once pto() has passed with packets in flight and neither
 * an ACK nor a new packet since, the newest packet in flight is sent again.
 * Its arrival is the later arrival the tail lacked: the receiver's LOSE and
 * SACK and the order rule (detect_losses: a resent packet reported past the
 * holes is its `maybe` evidence) find every lost packet in one round trip.
 * If everything had arrived and only the ACKs were lost, the receiver
 * answers the copy at once (rx_data).
 * The probe never waits longer than the timeout would (as Linux clamps it):
 * here the timeout is short (rto_min 0.2 ms) and often comes before 2 srtt,
 * so the first expiry of a silence is the probe, and the timeout is armed
 * again behind it - it takes over if the probe goes unanswered. One probe
 * per silence: an ACK that makes progress, or a new packet, arms the next.
 * Not before an RTT sample. */
static void tlp_arm(struct uln_rel *r)
{
    bool tail = r->have_rtt && r->snd_una != r->snd_nxt;
    r->tlp_at = tail ? min64(r->now + pto(r), r->rto_at) : ULN_REL_NEVER;
}

static void on_tlp(struct uln_rel *r)
{
    r->tlp_at = ULN_REL_NEVER;
    if (r->lost_count) return; /* a recovery is under way: its resends bring answers */
    for (uint32_t q = r->snd_nxt; q != r->snd_una;) {
        struct uln_rel_slot *s = slot(r, --q);
        if (s->state != SLOT_INFLIGHT || s->lost) continue;
        mark_lost(r, q, s, LOST_TLP);
        r->rto_at = r->now + rto_cur(r); /* a whole timeout for the probe's answer */
        return;
    }
}

/* How long the floor that spurious resends set (on_dup) holds unchallenged
 * before it halves: a host loaded for a while deschedules the peer again
 * and again, and each spurious resend costs a packet and, worse, a
 * retransmission without an RTT sample; a floor kept too long only slows
 * the repair of a real tail loss, to the delay the peer has shown. */
#define LATE_HOLD 1000000000ull /* 1 s */

static void advance(struct uln_rel *r, uint64_t now)
{
    if (now > r->now) r->now = now;
    if (r->state == ULN_REL_DEAD) return;
    if (r->late && r->now - r->late_at >= LATE_HOLD) {
        r->late = r->late / 2 < r->cfg.rto_min ? 0 : r->late / 2;
        r->late_at = r->now;
    }
    if (waiting(r) && r->now >= dead_at(r)) {
        go_dead(r);
        return;
    }
    if (r->state == ULN_REL_OPEN && r->pto_at != ULN_REL_NEVER && r->now >= r->pto_at) on_pto(r);
    if (r->state == ULN_REL_OPEN && r->now >= r->tlp_at) on_tlp(r);
    if (r->state == ULN_REL_OPEN && r->rto_at != ULN_REL_NEVER && r->now >= r->rto_at) on_rto(r);
    /* Keep-alive: an idle peer is asked once in a while whether it is there. */
    if (r->state == ULN_REL_OPEN && r->cfg.keepalive && !waiting(r) &&
        r->ctrl_at == ULN_REL_NEVER && r->now >= r->last_heard + r->cfg.keepalive)
        r->ctrl_at = r->now;
}

int uln_rel_tick(struct uln_rel *r, uint64_t now)
{
    advance(r, now);
    return r->state;
}

int uln_rel_state(const struct uln_rel *r)
{
    return r->state;
}

void uln_rel_watch(struct uln_rel *r)
{
    /* Waiting already (data or a probe out), or a probe already due: that
     * wait finds a dead peer by itself. */
    if (r->state != ULN_REL_OPEN || waiting(r) || r->ctrl_at != ULN_REL_NEVER) return;
    r->ctrl_at = r->now + rto_cur(r);
    r->stats.watched++;
}

/* Enough new data to acknowledge at once: ack_every datagrams of it, or a
 * quarter window of packets (a bundle's packets owe one ACK between them). */
static bool acks_piled(const struct uln_rel *r)
{
    return r->ack_owed >= r->cfg.ack_every || r->pkts_owed >= r->cfg.window / 4;
}

/* A D-SACK (dup_pending) goes at once and in a control packet, the only one
 * with room for it: its sender judges the peer by how soon it comes (on_dup). */
static bool fb_due(const struct uln_rel *r)
{
    return r->fb_now || r->dup_pending || acks_piled(r) || (r->ack_owed && r->now >= r->ack_due_at);
}

uint64_t uln_rel_next_deadline(const struct uln_rel *r)
{
    if (r->state == ULN_REL_DEAD) return ULN_REL_NEVER;
    uint64_t t = r->ctrl_at;
    if (r->state == ULN_REL_OPEN) {
        if (r->fb_now || r->dup_pending || r->lost_count || acks_piled(r)) return r->now;
        if (r->ack_owed) t = min64(t, r->ack_due_at);
        t = min64(t, min64(r->rto_at, min64(r->pto_at, r->tlp_at)));
        if (r->cfg.keepalive && !waiting(r) && r->ctrl_at == ULN_REL_NEVER)
            t = min64(t, r->last_heard + r->cfg.keepalive);
    }
    if (waiting(r)) t = min64(t, dead_at(r));
    return t;
}

/* ------------------------------------------------------------------------- */
/* Feedback out (receiving side)                                              */
/* ------------------------------------------------------------------------- */

/* Buffers the peer may still fill: its share (rx_limit) less those it holds.
 * A share cut below what is held gives no credit until enough come back. */
static uint32_t rx_free(const struct uln_rel *r)
{
    return r->rx_used < r->rx_limit ? r->rx_limit - r->rx_used : 0;
}

/* The right edge the buffers allow: cum + free buffers, and never so far that
 * two seqs held at once would share a receive slot. */
static uint32_t potential_edge(const struct uln_rel *r)
{
    uint32_t room = r->rcv_dlv + r->mask + 1 - r->rcv_cum, free = rx_free(r);
    return r->rcv_cum + (free < room ? free : room);
}

/* GO (or a plain window update) once enough buffers are back to matter. */
static void go_if_room(struct uln_rel *r)
{
    if (r->state == ULN_REL_OPEN && sdiff(potential_edge(r), r->adv_edge) >= r->go_thresh)
        r->fb_now = true;
}

static void fill_fb(struct uln_rel *r, struct uln_rel_pkt *p)
{
    struct uln_rel_fb *fb = &p->fb;
    memset(fb, 0, sizeof(*fb));
    p->flags |= ULN_REL_FB;
    fb->ack = r->rcv_cum;

    /* Credit as an absolute edge that never moves back: every buffer promised
     * by an earlier (possibly reordered) feedback is still there, because the
     * seqs holding buffers since then all lie below that edge. */
    uint32_t e = potential_edge(r);
    if (seq_lt(r->adv_edge, e)) r->adv_edge = e;
    fb->credit = (uint16_t)(r->adv_edge - r->rcv_cum);
    fb->reorder = (uint16_t)r->reorder_rx;
    if (fb->credit == 0 && !r->stop_adv) r->stats.stop_sent++;
    r->stop_adv = fb->credit == 0;

    /* The bitmap describes 64 seqs exactly (clear = not arrived), ending at
     * the newest arrival (RFC 2018's rule for the first SACK block): in
     * streaming that is the newest seq, in recovery the retransmission that
     * just filled a hole, maybe far below; if that arrival moved the
     * cumulative point, the newest seqs instead. So every arrival is reported
     * by some feedback, and by several (arrivals come in rising seq order), so
     * losing one feedback costs little. */
    if (sdiff(r->rcv_high, r->rcv_cum + 1) > 0) {
        uint32_t end = seq_lt(r->rcv_cum, r->rcv_last) ? r->rcv_last : r->rcv_high - 1;
        uint32_t base = r->rcv_cum + 1;
        if (sdiff(end, base) >= (int64_t)ULN_REL_SACK_BITS) base = end - (ULN_REL_SACK_BITS - 1);
        fb->sack_off = (uint16_t)(base - r->rcv_cum - 1);
        for (uint32_t i = 0; i < ULN_REL_SACK_BITS && seq_lt(base + i, r->rcv_high); i++)
            if (rbit(r, base + i)) fb->sack |= 1ull << i;
    }

    if (r->lose_pending) {
        r->lose_pending = false;
        if (!seq_lt(r->lose_seq, r->rcv_cum) && !rbit(r, r->lose_seq)) {
            p->flags |= ULN_REL_LOSE;
            fb->lose = r->lose_seq;
            r->stats.lose_sent++;
        }
    }
    /* A packet dropped unseen lies past the cumulative point (uln_rel_rx_dropped):
     * the point is a hole a later packet arrived behind, lost by the order rule
     * (or dropped itself). A sender takes a LOSE of a first transmission only, so
     * naming it in every feedback until it arrives resends it once. */
    if (!seq_lt(r->rcv_cum, r->drop_hi)) {
        r->drop_hi = r->rcv_cum; /* past it: nothing dropped is missing (and no wrap) */
    } else if (!(p->flags & ULN_REL_LOSE)) {
        p->flags |= ULN_REL_LOSE;
        fb->lose = r->rcv_cum;
        r->stats.lose_sent++;
    }
    r->ack_owed = r->pkts_owed = 0;
    r->ack_due_at = ULN_REL_NEVER;
    r->fb_now = false;
}

bool uln_rel_ctrl(struct uln_rel *r, uint64_t now, struct uln_rel_pkt *p)
{
    advance(r, now);
    memset(p, 0, sizeof(*p));
    if (r->state == ULN_REL_DEAD) return false;
    p->src_epoch = r->local_epoch;
    if (r->state == ULN_REL_CONNECTING) {
        if (r->now < r->ctrl_at) return false;
        /* Hello, repeated with backoff until the peer answers. */
        r->ctrl_at = r->now + ctrl_interval(r);
        r->ctrl_backoff++;
        r->stats.tx_ctrl++;
        r->stats.tx_hello++;
        return true;
    }
    bool probe = r->now >= r->ctrl_at;
    if (!probe && !fb_due(r)) return false;
    p->dst_epoch = r->peer_epoch;
    fill_fb(r, p);
    if (r->dup_pending) {
        p->fb.dup = r->dup_pending;
        r->dup_pending = 0;
        r->stats.dup_sent++;
    }
    if (probe) {
        start_waiting(r);
        r->probe_out = true;
        p->flags |= ULN_REL_PROBE;
        r->ctrl_at = r->now + ctrl_interval(r);
        r->ctrl_backoff++;
        r->stats.tx_probe++;
    }
    r->stats.tx_ctrl++;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Sending side                                                               */
/* ------------------------------------------------------------------------- */

static void data_hdr(struct uln_rel *r, uint32_t seq, struct uln_rel_pkt *p)
{
    memset(p, 0, sizeof(*p));
    p->src_epoch = r->local_epoch;
    p->dst_epoch = r->peer_epoch;
    p->seq = seq;
    p->flags = ULN_REL_DATA;
    /* Piggyback whatever feedback is owed: in two-way traffic no ACK then
     * needs a packet of its own. */
    if (r->fb_now || r->ack_owed) {
        fill_fb(r, p);
        r->stats.fb_piggy++;
    }
}

static void sent(struct uln_rel *r, struct uln_rel_slot *s)
{
    s->tx_time = r->now;
    s->xmit = ++r->xmit_count;
    r->rto_at = min64(r->rto_at, r->now + rto_cur(r));
}

int uln_rel_tx_assign(struct uln_rel *r, uint64_t now, uint32_t bytes, struct uln_rel_pkt *p)
{
    advance(r, now);
    if (r->state == ULN_REL_DEAD) return -ECONNRESET;
    if (r->state != ULN_REL_OPEN) return -EAGAIN;
    uint32_t seq = r->snd_nxt;
    struct uln_rel_slot *s = slot(r, seq);
    if (seq - r->snd_una > r->mask || s->state != SLOT_FREE) {
        r->stats.blk_window++; /* window full, or the caller has not drained acks */
        return -EAGAIN;
    }
    if (!seq_lt(seq, r->snd_edge)) {
        /* No credit (STOP). With nothing in flight no ACK will come to open
         * it, and the GO may be lost: probe the receiver after a timeout. */
        r->tx_blocked = true;
        r->stats.blk_credit++;
        if (r->snd_una == r->snd_nxt && r->ctrl_at == ULN_REL_NEVER)
            r->ctrl_at = r->now + rto_cur(r);
        return -EAGAIN;
    }
    if (r->cwnd_grant) {
        r->cwnd_grant--; /* a message uln_rel_tx_ready let start goes whole */
    } else if (r->in_flight >= r->cwnd) {
        /* Something is in flight (cwnd >= one packet), so an ACK will come. */
        r->stats.blk_cwnd++;
        return -EAGAIN;
    }
    r->tx_blocked = false;
    start_waiting(r);
    r->snd_nxt = seq + 1;
    s->state = SLOT_INFLIGHT;
    s->lost = LOST_NO;
    s->probe = 0;
    s->timer = 0;
    s->retx = 0;
    s->waited = 0;
    s->len = bytes;
    s->delivered = r->delivered;
    r->in_flight += bytes;
    r->round_sent++;
    sent(r, s);
    tlp_arm(r);
    r->stats.tx_data++;
    data_hdr(r, seq, p);
    return 0;
}

bool uln_rel_tx_next_resend(struct uln_rel *r, uint64_t now, struct uln_rel_pkt *p)
{
    advance(r, now);
    if (r->state != ULN_REL_OPEN || r->lost_count == 0) return false;
    uint32_t q = seq_lt(r->lost_hint, r->snd_una) ? r->snd_una : r->lost_hint;
    for (; q != r->snd_nxt; q++) {
        struct uln_rel_slot *s = slot(r, q);
        if (s->state != SLOT_INFLIGHT || !s->lost) continue;
        s->probe = s->lost == LOST_FAST;
        if (s->lost == LOST_FAST)
            r->stats.tx_fast++;
        else if (s->lost == LOST_PTO)
            r->stats.tx_pto++;
        else if (s->lost == LOST_TLP)
            r->stats.tx_tlp++;
        else
            r->stats.tx_timeout++;
        r->stats.tx_resend++;
        s->lost = LOST_NO;
        r->lost_count--;
        if (s->retx < UINT16_MAX) s->retx++;
        r->lost_hint = q + 1;
        /* Before sent() restamps it: for on_dup, should this resend prove
         * spurious, the time since the first transmission. */
        uint64_t w = s->waited + (r->now - s->tx_time);
        s->waited = w < UINT32_MAX ? (uint32_t)w : UINT32_MAX;
        s->timer = !s->probe; /* TLP, PTO or timeout: the timers' guess */
        sent(r, s);
        if (s->probe) r->pto_at = min64(r->pto_at, r->now + pto(r)); /* its answer is due */
        data_hdr(r, q, p);
        p->flags |= ULN_REL_RETX;
        return true;
    }
    r->lost_count = 0; /* unreachable: every lost mark lies in [hint, nxt) */
    return false;
}

bool uln_rel_tx_next_acked(struct uln_rel *r, uint32_t *seq)
{
    if (r->acked_head == r->acked_tail) return false;
    uint32_t q = r->acked[r->acked_head & r->mask];
    r->acked_head++;
    slot(r, q)->state = SLOT_FREE;
    *seq = q;
    return true;
}

void uln_rel_want_fb(struct uln_rel *r)
{
    if (r->state == ULN_REL_OPEN) r->fb_now = true;
}

uint32_t uln_rel_tx_in_flight(const struct uln_rel *r)
{
    return r->snd_nxt - r->snd_una;
}

uint32_t uln_rel_tx_next_seq(const struct uln_rel *r)
{
    return r->snd_nxt;
}

uint64_t uln_rel_cwnd(const struct uln_rel *r)
{
    return r->cwnd;
}

uint64_t uln_rel_tx_bytes(const struct uln_rel *r)
{
    return r->in_flight;
}

bool uln_rel_tx_ready(struct uln_rel *r, uint64_t now, uint32_t n)
{
    advance(r, now);
    if (r->state != ULN_REL_OPEN || n == 0 || n > r->mask + 1) return false;
    uint32_t seq = r->snd_nxt, last = seq + n - 1;
    if (last - r->snd_una > r->mask) {
        r->stats.blk_window++;
        return false;
    }
    for (uint32_t q = seq; q != last + 1; q++)
        if (slot(r, q)->state != SLOT_FREE) {
            r->stats.blk_window++; /* acks not drained */
            return false;
        }
    if (!seq_lt(last, r->snd_edge)) {
        /* Same bookkeeping as a refused uln_rel_tx_assign: without it a lost
         * GO would never be probed for. */
        r->tx_blocked = true;
        r->stats.blk_credit++;
        if (r->snd_una == r->snd_nxt && r->ctrl_at == ULN_REL_NEVER)
            r->ctrl_at = r->now + rto_cur(r);
        return false;
    }
    if (r->in_flight >= r->cwnd && r->cwnd_grant < n) {
        r->stats.blk_cwnd++;
        return false;
    }
    if (r->cwnd_grant < n) r->cwnd_grant = n; /* the message goes whole, window or not */
    return true;
}

/* ------------------------------------------------------------------------- */
/* Feedback in (sending side)                                                 */
/* ------------------------------------------------------------------------- */

struct ack_note {
    uint64_t sample_xmit; /* newest transmission, sent once, acked by this feedback */
    uint64_t sample_time;
    uint64_t rack_xmit;        /* newest transmission surely delivered */
    uint64_t rack_amb;         /* ... or maybe: a resent packet's, by RACK's rule */
    uint64_t sample_delivered; /* the sample's uln_rel_slot.delivered */
    uint64_t acked_bytes;      /* newly acknowledged by this feedback */
};

static void ack_one(struct uln_rel *r, uint32_t seq, struct ack_note *n)
{
    struct uln_rel_slot *s = slot(r, seq);
    if (s->state != SLOT_INFLIGHT) return;
    s->state = SLOT_ACKED;
    r->acked[r->acked_tail++ & r->mask] = seq;
    r->in_flight -= s->len < r->in_flight ? s->len : r->in_flight;
    r->delivered += s->len;
    n->acked_bytes += s->len;
    if (s->lost) {
        s->lost = LOST_NO;
        r->lost_count--;
    }
    /* Karn: a packet sent more than once gives no RTT sample: its ack does not
     * say which transmission arrived. */
    if (s->retx == 0) {
        if (s->xmit > n->sample_xmit) {
            n->sample_xmit = s->xmit;
            n->sample_time = s->tx_time;
            n->sample_delivered = s->delivered;
        }
        if (s->xmit > n->rack_xmit) n->rack_xmit = s->xmit;
    } else if (r->have_rtt && r->now - s->tx_time >= r->min_rtt && s->xmit > n->rack_amb) {
        /* For loss detection it may say: acked sooner than any round trip
         * after the last transmission, it was an earlier one that arrived;
         * later, it was the last (RACK's rule; min_rtt only shrinks, so early
         * on this errs on the safe side). Without this a lost retransmission
         * waits for the timer whenever the window is stuck behind it - the
         * case where only retransmissions are in flight. But it only may:
         * a receiver descheduled past our timeout acknowledges the original
         * long after the resend (detect_losses says where it counts). */
        n->rack_amb = s->xmit;
    }
}

static void rtt_sample(struct uln_rel *r, uint64_t rtt)
{
    /* Jacobson/Karels, RFC 6298 gains (1/8, 1/4). */
    if (!r->have_rtt || rtt < r->min_rtt) r->min_rtt = rtt;
    if (!r->have_rtt) {
        r->srtt = rtt;
        r->rttvar = rtt / 2;
        r->have_rtt = true;
    } else {
        uint64_t err = r->srtt > rtt ? r->srtt - rtt : rtt - r->srtt;
        r->rttvar = (3 * r->rttvar + err) / 4;
        r->srtt = (7 * r->srtt + rtt) / 8;
    }
    uint64_t rto = r->srtt + 4 * r->rttvar;
    if (rto < r->cfg.rto_min) rto = r->cfg.rto_min;
    if (rto > r->cfg.rto_max) rto = r->cfg.rto_max;
    r->rto = rto;
    r->backoff = 0;
    r->stats.rtt_samples++;
}

/* ------------------------------------------------------------------------- */
/* The congestion window (bytes)                                              */
/* ------------------------------------------------------------------------- */

/* A round whose losses exceed this share of its packets was congestion: a
 * queue overflowing drops a run of packets (half a window in slow start),
 * random loss of a few percent almost never comes near it. BBRv2 reads 2 %
 * as congestion; ulnet's links are LANs with little competing traffic, and
 * the yardstick is 5 % random loss, which must not shrink the window. */
#define ROUND_LOSS_CONGESTED 8u /* lost * 8 > sent: more than 12.5 % */
#define ROUND_LOSS_MIN       2u /* one loss is never congestion */

/* The delivery rate seen at an RTT sample: the bytes acknowledged since the
 * sampled packet left, over the time since. Kept as the maximum of two
 * periods of 10 srtt (at least 1 ms), so it follows a path that slowed. */
static void bw_sample(struct uln_rel *r, uint64_t delivered_then, uint64_t dt)
{
    uint64_t period = max64(10 * r->srtt, 1000000);
    if (r->now - r->bw_at >= period) {
        r->bw[1] = r->bw[0];
        r->bw[0] = 0;
        r->bw_at = r->now;
    }
    if (dt == 0) return;
    /* bytes <= cwnd_max (a 2^32 window of 2^16-byte packets at most): no overflow */
    uint64_t rate = (r->delivered - delivered_then) * 1000000000ull / dt;
    if (rate > r->bw[0]) r->bw[0] = rate;
}

/* The least the window is cut to: the bandwidth-delay product the path has
 * shown (max delivery rate x min RTT), so that a cut never leaves the pipe
 * empty, and at least 4 packets; within cwnd_max. Not more than one BDP: a
 * queue shorter than that would overflow every round at twice it. */
static uint64_t cwnd_floor(const struct uln_rel *r)
{
    uint64_t bw = max64(r->bw[0], r->bw[1]);
    uint64_t bdp = r->have_rtt ? bw / 1000 * r->min_rtt / 1000000 : 0; /* B/s * ns, no overflow */
    uint64_t f = max64(bdp, 4ull * r->cfg.mss);
    return min64(f, r->cfg.cwnd_max);
}

/* Acknowledged bytes open the window: doubling per round trip below
 * ssthresh (slow start), one packet per round trip above (Reno's additive
 * increase), never past cwnd_max. */
static void cwnd_grow(struct uln_rel *r, uint64_t acked)
{
    if (acked == 0) return;
    if (r->cwnd < r->ssthresh)
        r->cwnd += acked;
    else
        r->cwnd += max64((uint64_t)r->cfg.mss * acked / r->cwnd, 1);
    r->cwnd = min64(r->cwnd, r->cfg.cwnd_max);
}

/* Once every packet of a round is acknowledged, judge its losses: a share
 * beyond random loss cuts the window once (x 0.7, CUBIC's beta: gentler
 * than Reno's half on a LAN), never below the floor; otherwise the losses
 * were random and are only repaired. One cut per round, however many losses
 * it had, and none for a timeout alone: on a loaded host a timeout mostly
 * means the receiver was descheduled, not that the path is full. */
static void round_check(struct uln_rel *r)
{
    if (seq_lt(r->snd_una, r->round_end)) return;
    if (r->round_lost >= ROUND_LOSS_MIN &&
        (uint64_t)r->round_lost * ROUND_LOSS_CONGESTED > r->round_sent) {
        r->cwnd = min64(r->cwnd, max64(r->cwnd / 10 * 7, cwnd_floor(r)));
        r->ssthresh = r->cwnd;
        r->stats.cwnd_cuts++;
    } else if (r->round_lost) {
        r->stats.rounds_lossy++;
    }
    r->round_end = r->snd_nxt;
    r->round_sent = r->round_lost = 0;
}

/* Forward acknowledgement by transmission order: once a transmission sent
 * `reorder` later than a packet's last one has arrived, and a feedback shows
 * the packet missing, it is lost. Counting transmissions, not seqs, also
 * catches a lost retransmission. The last transmissions, with fewer than
 * `reorder` after them, are lost once all after them arrived (early
 * retransmit, RFC 5827), so a loss at the tail needs no timeout.
 * Only seqs this feedback describes are judged - its cumulative hole and its
 * bitmap -, never seqs whose arrival it does not report.
 * A resent packet's ACK (rack_amb) may be its original's: a receiver
 * descheduled past our timeout reads the original first, and acknowledges
 * it while the packets sent after it still wait unread in its socket. So
 * that evidence only judges seqs below one the feedback reports arrived
 * (`maybe`): a hole the receiver has seen past. Taken for all, it called
 * every unread packet lost at each such stall (rel_sim_spurious). */
static bool lost_by_order(const struct uln_rel *r, const struct uln_rel_slot *s, bool maybe)
{
    uint64_t need = s->xmit + r->reorder_tx, rack = r->rack_xmit;
    if (maybe && r->rack_amb > rack) rack = r->rack_amb;
    if (need > r->xmit_count) need = r->xmit_count;
    return need <= rack && need > s->xmit;
}

static void judge(struct uln_rel *r, uint32_t q, bool maybe)
{
    struct uln_rel_slot *s = slot(r, q);
    if (s->state == SLOT_INFLIGHT && !s->lost && lost_by_order(r, s, maybe))
        mark_lost(r, q, s, LOST_FAST);
}

static void detect_losses(struct uln_rel *r, const struct uln_rel_fb *fb)
{
    if (r->snd_una == r->snd_nxt) return;
    uint32_t q = fb->ack + 1 + fb->sack_off;
    /* One past the highest seq the feedback reports arrived (on_fb checked
     * it is below snd_nxt); the cumulative hole if none is. */
    uint32_t top = fb->sack ? q + 64 - (uint32_t)__builtin_clzll(fb->sack) : fb->ack;
    judge(r, r->snd_una, seq_lt(r->snd_una, top)); /* == fb->ack: the first missing seq */
    for (uint32_t i = 0; i < ULN_REL_SACK_BITS && seq_lt(q + i, r->snd_nxt); i++)
        if (!((fb->sack >> i) & 1) && !seq_lt(q + i, r->snd_una))
            judge(r, q + i, seq_lt(q + i, top));
}

/* The receiver had seq already when our resend of it came (fb.dup): a
 * timer sent it, and either an ACK was lost or the timer guessed a loss
 * where the peer was only late - on a loaded host, descheduled longer than
 * any round trip we measured, and Karn's rule keeps that delay out of the
 * RTT samples. When the report itself came late, it was the peer: take the
 * delay the packet showed (first transmission to this report, a little more
 * than its real round trip) as a floor of both timers, held a while
 * (LATE_HOLD), so that the peer's next stall of that length costs no resend.
 * Once per resend. */
static void on_dup(struct uln_rel *r, uint32_t q)
{
    if (!seq_lt(q, r->snd_nxt)) {
        r->stats.bad_dup++;
        return;
    }
    if (r->snd_nxt - q > r->mask + 1) return; /* its slot has another seq now */
    struct uln_rel_slot *s = slot(r, q);
    if (!s->timer) return;
    s->timer = 0;
    r->stats.spurious++;
    /* A peer answers a resend it has at once: answered sooner than we had
     * waited for the first transmission, the resend made up for a lost ACK
     * (or one late by less than the timer), and the timer was not to blame;
     * so a lost ACK never raises the floor, which would then grow with every
     * one. Answered later, the peer was away: both copies waited for it. */
    uint64_t since = r->now - s->tx_time;
    if (since <= s->waited) return;
    uint64_t d = min64(s->waited + since, r->cfg.rto_max);
    if (d > r->late) r->late = d;
    r->late_at = r->now;
}

static void on_fb(struct uln_rel *r, const struct uln_rel_fb *fb, unsigned flags)
{
    uint32_t ack = fb->ack;
    /* Validate everything before touching anything: forged or corrupt feedback
     * must never acknowledge a packet that was not received. */
    if (seq_lt(r->snd_nxt, ack)) {
        r->stats.bad_ack++;
        return;
    }
    bool old = seq_lt(ack, r->snd_una);
    if (old && (uint32_t)(r->snd_una - ack) > r->mask + 1) {
        r->stats.fb_old++; /* a feedback from long ago: nothing in it is news */
        return;
    }
    if (fb->credit > ULN_REL_WINDOW_MAX || fb->reorder > ULN_REL_WINDOW_MAX) {
        r->stats.bad_credit++;
        return;
    }
    if (fb->sack) {
        unsigned top = 63 - (unsigned)__builtin_clzll(fb->sack);
        uint32_t hi = ack + 1 + fb->sack_off + top;
        if (!seq_lt(hi, r->snd_nxt)) {
            r->stats.bad_sack++;
            return;
        }
    }
    if ((flags & ULN_REL_LOSE) && (seq_lt(fb->lose, ack) || !seq_lt(fb->lose, r->snd_nxt))) {
        r->stats.bad_lose++;
        return;
    }
    r->stats.fb_rcvd++;

    struct ack_note n = {0, 0, 0, 0, 0, 0};
    bool advanced = false;
    if (!old && ack != r->snd_una) {
        for (uint32_t q = r->snd_una; q != ack; q++)
            ack_one(r, q, &n);
        r->snd_una = ack;
        advanced = true;
    }
    for (uint64_t bits = fb->sack; bits; bits &= bits - 1) {
        uint32_t q = ack + 1 + fb->sack_off + (unsigned)__builtin_ctzll(bits);
        if (!seq_lt(q, r->snd_una)) ack_one(r, q, &n);
    }
    uint32_t edge = ack + fb->credit;
    if (seq_lt(r->snd_edge, edge)) r->snd_edge = edge;

    if ((flags & ULN_REL_LOSE) && !old) {
        /* The receiver saw `reorder` packets past this hole. Only the first
         * transmission is meant: a LOSE can be older than a retransmission,
         * whose own loss detect_losses() finds. */
        struct uln_rel_slot *s = slot(r, fb->lose);
        if (s->state == SLOT_INFLIGHT && !s->lost && s->retx == 0) {
            mark_lost(r, fb->lose, s, LOST_FAST);
            r->stats.lose_rcvd++;
        }
    }
    if (n.sample_xmit) {
        rtt_sample(r, r->now - n.sample_time);
        bw_sample(r, n.sample_delivered, r->now - n.sample_time);
    }
    cwnd_grow(r, n.acked_bytes);
    if (fb->reorder > r->reorder_tx) {
        /* The receiver saw the path reorder this far: wait as long before
         * calling a packet lost (never less again: it is the path's). */
        r->reorder_tx = fb->reorder < (r->mask + 1) / 2 ? fb->reorder : (r->mask + 1) / 2;
    }
    if (n.rack_xmit > r->rack_xmit) r->rack_xmit = n.rack_xmit;
    if (n.rack_amb > r->rack_amb) r->rack_amb = n.rack_amb;
    if (!old) detect_losses(r, fb);
    if (fb->dup) on_dup(r, fb->dup - 1);
    round_check(r);
    if (advanced) {
        /* RFC 6298 5.3: progress restarts the timer. */
        bool any = false;
        for (uint32_t q = r->snd_una; q != r->snd_nxt && !any; q++)
            any = slot(r, q)->state == SLOT_INFLIGHT;
        r->rto_at = any ? r->now + rto_cur(r) : ULN_REL_NEVER;
    }
    if (n.acked_bytes) tlp_arm(r); /* progress: a new silence starts now */
}

/* ------------------------------------------------------------------------- */
/* Receiving side                                                             */
/* ------------------------------------------------------------------------- */

static int rx_data(struct uln_rel *r, uint32_t seq, bool retx, bool same_dgram)
{
    bool arrived = seq_lt(seq, r->rcv_cum) || (seq_lt(seq, r->adv_edge) && rbit(r, seq));
    if (arrived) {
        /* Every seq before the cumulative point arrived, however old. A
         * resent one means the sender missed our ACK: repeat it at once (a
         * duplicate made by the network needs no answer). */
        r->stats.rx_dup++;
        if (retx) {
            r->fb_now = true;
            r->dup_pending = seq + 1; /* the sender's timer fired too soon: say so (on_dup) */
        }
        return ULN_REL_RX_DUP;
    }
    if (!seq_lt(seq, r->adv_edge)) {
        r->stats.rx_oow++;
        return ULN_REL_RX_OUT_OF_WINDOW;
    }
    if (r->rx_used >= r->cfg.rx_bufs) {
        /* Cannot happen with a sender honouring credit: every edge we gave
         * was within rx_bufs, whatever share was cut since (uln_rel_rx_limit). */
        r->stats.rx_nobuf++;
        return ULN_REL_RX_OUT_OF_WINDOW;
    }
    r->rx_used++;
    r->stats.rx_data++;
    rbit_set(r, seq);
    r->rcv_last = seq;

    if (seq_lt(seq, r->rcv_high)) {
        if (retx) {
            /* A retransmission filled its hole: report it at once, so the
             * sender neither waits nor sends it yet again. */
            r->fb_now = true;
        } else {
            /* A first transmission overtaken by later ones: the path
             * reorders this far, so wait this long before calling a hole
             * lost (reordering is a property of the path: never less). */
            uint32_t d = r->rcv_high - seq;
            if (d > r->reorder_rx) r->reorder_rx = d < (r->mask + 1) / 2 ? d : (r->mask + 1) / 2;
        }
    } else {
        uint32_t old_high = r->rcv_high;
        r->rcv_high = seq + 1;
        /* Holes that now have `reorder` arrivals beyond them are lost: name
         * the lowest in a LOSE at once (the sender finds the others from the
         * SACK). */
        uint32_t k = r->reorder_rx;
        for (uint32_t h = old_high - k; h != seq + 1 - k; h++) {
            if (seq_lt(h, r->rcv_cum) || rbit(r, h)) continue;
            if (!r->lose_pending || seq_lt(h, r->lose_seq)) {
                r->lose_pending = true;
                r->lose_seq = h;
            }
            r->fb_now = true;
            break;
        }
    }

    int v = ULN_REL_RX_HOLD;
    if (seq == r->rcv_cum) {
        uint32_t q = seq;
        while (rbit(r, q) && q != r->rcv_high) {
            rbit_clear(r, q);
            q++;
        }
        if (q - seq > 1 && retx) r->fb_now = true; /* recovered: free the sender at once */
        r->rcv_cum = q;
        if (seq == r->rcv_dlv) {
            r->rcv_dlv = seq + 1;
            v = ULN_REL_RX_DELIVER;
        }
    }
    /* One datagram owes one ACK, however many packets it bundled (a later
     * packet of one counts if its first owed none: a duplicate, say). */
    r->pkts_owed++;
    if (r->ack_owed == 0) r->ack_due_at = r->now + r->cfg.ack_delay;
    if (r->ack_owed == 0 || !same_dgram) r->ack_owed++;
    if (r->rx_used == r->rx_limit) r->fb_now = true; /* STOP: the share is full */
    return v;
}

/* A hello from a new life of the peer: adopt it and start both directions over. */
static int restart(struct uln_rel *r, uint32_t epoch)
{
    adopt(r, epoch);
    r->stats.resets++;
    advance(r, r->now);
    return ULN_REL_RX_RESET;
}

int uln_rel_rx(struct uln_rel *r, const struct uln_rel_pkt *p, uint64_t now)
{
    if (now > r->now) r->now = now;
    bool hello = p->dst_epoch == 0;
    if (p->src_epoch == 0 || (p->flags & ~(ULN_REL_FLAGS | ULN_REL_SAME_DGRAM)) ||
        (hello && (p->flags & (ULN_REL_DATA | ULN_REL_FB))) ||
        ((p->flags & ULN_REL_LOSE) && !(p->flags & ULN_REL_FB)) ||
        ((p->flags & ULN_REL_RETX) && !(p->flags & ULN_REL_DATA))) {
        r->stats.malformed++;
        return ULN_REL_RX_INVALID;
    }
    /* Addressed to an earlier life of ours, or sent by a replaced one. */
    if ((!hello && p->dst_epoch != r->local_epoch) || in_tomb(r, p->src_epoch)) {
        r->stats.stale++;
        return ULN_REL_RX_STALE;
    }

    int verdict = ULN_REL_RX_NONE;
    if (r->state == ULN_REL_DEAD) {
        if (!hello) {
            r->stats.dead_drops++;
            return ULN_REL_RX_DEAD;
        }
        /* A new life of the peer (the dead one is in the tomb): start over. */
        return restart(r, p->src_epoch);
    }
    if (r->state == ULN_REL_CONNECTING) {
        /* First contact. A hello from it, or an answer to our hello (it
         * addresses our current life, so it is no leftover). */
        adopt(r, p->src_epoch);
    } else if (p->src_epoch != r->peer_epoch) {
        if (!hello) {
            r->stats.stale++;
            return ULN_REL_RX_STALE;
        }
        /* The peer restarted: its old life and all we had with it are gone. */
        return restart(r, p->src_epoch);
    }

    /* A genuine packet of the current life: the peer is alive. */
    r->last_heard = r->now;
    r->probe_out = false;
    if (hello) {
        r->fb_now = true; /* it has not heard us yet: answer with our life */
    } else {
        if (p->flags & ULN_REL_FB) on_fb(r, &p->fb, p->flags);
        if (p->flags & ULN_REL_PROBE) r->fb_now = true;
        if (p->flags & ULN_REL_DATA)
            verdict = rx_data(r, p->seq, p->flags & ULN_REL_RETX, p->flags & ULN_REL_SAME_DGRAM);
    }
    bool stopped = r->tx_blocked && r->snd_una == r->snd_nxt && !seq_lt(r->snd_nxt, r->snd_edge);
    if (stopped && r->ctrl_at == ULN_REL_NEVER) {
        /* The last ACK emptied the flight and said STOP: nothing will come by
         * itself if the GO is lost, so probe after a timeout (TCP's persist
         * timer), even if the caller does not try to send again. */
        r->ctrl_at = r->now + rto_cur(r);
    } else if (!stopped && r->ctrl_at != ULN_REL_NEVER && !r->probe_out) {
        /* An answered keep-alive, or a persist probe no longer needed. */
        r->ctrl_at = ULN_REL_NEVER;
        r->ctrl_backoff = 0;
    }
    advance(r, r->now);
    return verdict;
}

bool uln_rel_rx_next(struct uln_rel *r, uint32_t *seq)
{
    if (r->state != ULN_REL_OPEN || r->rcv_dlv == r->rcv_cum) return false;
    *seq = r->rcv_dlv++;
    return true;
}

void uln_rel_rx_release(struct uln_rel *r, uint32_t n, uint64_t now)
{
    if (now > r->now) r->now = now;
    if (n > r->rx_used) {
        r->stats.bad_release++;
        n = r->rx_used;
    }
    r->rx_used -= n;
    go_if_room(r);
}

void uln_rel_rx_dropped(struct uln_rel *r, uint32_t seq)
{
    /* Only what the credit allowed and we do not have: anything else says
     * nothing about what is missing (a copy, or a sender beyond its credit). */
    if (r->state != ULN_REL_OPEN || !seq_lt(seq, r->adv_edge) || !seq_lt(r->rcv_cum, seq) ||
        rbit(r, seq))
        return;
    r->stats.rx_dropped++;
    if (seq_lt(r->drop_hi, seq + 1)) r->drop_hi = seq + 1;
}

void uln_rel_rx_limit(struct uln_rel *r, uint32_t bufs, uint64_t now)
{
    if (now > r->now) r->now = now;
    rx_set_limit(r, bufs);
    go_if_room(r);
}
