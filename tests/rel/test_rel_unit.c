/*
 * test_rel_unit.c - the reliability state machine, case by case, with packets
 * carried by hand between two machines on a virtual clock: handshake, one
 * loss -> LOSE -> one fast retransmit, a lost tail found by the tail probe,
 * packets the caller dropped unseen resent one round trip apart, timeout
 * backoff, Karn's rule, delayed ACK, STOP/GO and the persist probe, learnt
 * reordering, window full, sequence wrap, duplicates, stale epochs, peer
 * restart, dead peer, keep-alive, forged feedback and malformed packets.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "rel/rel.h"

#define US  1000ull
#define MS  1000000ull
#define PKT 1000u /* bytes of a data packet, for the congestion window */

static uint64_t T = 1000 * MS; /* virtual time; not 0, to catch "0 = unset" slips */

static void cfg_base(struct uln_rel_cfg *c)
{
    uln_rel_cfg_default(c);
    c->window = 16;
    c->ack_every = 4;
    c->rto_init = 1 * MS;
    c->rto_min = 1 * MS;
    c->rto_max = 8 * MS;
    c->ack_delay = 50 * US;
    c->dead_after = 1000 * MS;
}

/* Carry every control packet `from` wants to send now to `to`. */
static int flush_ctrl(struct uln_rel *from, struct uln_rel *to)
{
    struct uln_rel_pkt p;
    int n = 0;
    while (uln_rel_ctrl(from, T, &p) && n < 8) {
        uln_rel_rx(to, &p, T);
        n++;
    }
    return n;
}

static void connect_pair(struct uln_rel *a, struct uln_rel *b)
{
    for (int i = 0; i < 4; i++) {
        flush_ctrl(a, b);
        flush_ctrl(b, a);
    }
}

static void open_pair(struct uln_rel *a, struct uln_rel *b, const struct uln_rel_cfg *ca,
                      const struct uln_rel_cfg *cb, uint32_t ea, uint32_t eb)
{
    CHECK(uln_rel_init(a, ca, ea, T) == 0);
    CHECK(uln_rel_init(b, cb, eb, T) == 0);
    connect_pair(a, b);
    CHECK(uln_rel_state(a) == ULN_REL_OPEN);
    CHECK(uln_rel_state(b) == ULN_REL_OPEN);
}

static void test_init_and_handshake(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p, d;
    cfg_base(&c);
    c.window = 12; /* not a power of two */
    CHECK(uln_rel_init(&a, &c, 1, T) == -EINVAL);
    cfg_base(&c);
    CHECK(uln_rel_init(&a, &c, 0, T) == -EINVAL); /* epoch 0 means "unknown" */

    CHECK(uln_rel_init(&a, &c, 0x1111, T) == 0);
    CHECK(uln_rel_init(&b, &c, 0x2222, T) == 0);
    CHECK(uln_rel_state(&a) == ULN_REL_CONNECTING);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* no data before the handshake */
    CHECK(uln_rel_ctrl(&a, T, &p));                      /* hello at once */
    CHECK(p.dst_epoch == 0 && p.src_epoch == 0x1111 && p.flags == 0);
    CHECK(!uln_rel_ctrl(&a, T, &p)); /* then not again before a timeout */
    CHECK_EQ(uln_rel_next_deadline(&a), T + 1 * MS);

    /* The hello is lost; the next one, a timeout later, arrives. */
    T += 1 * MS;
    CHECK(uln_rel_ctrl(&a, T, &p));
    CHECK_EQ(uln_rel_next_deadline(&a), T + 2 * MS); /* hellos back off */
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_NONE);
    CHECK(uln_rel_state(&b) == ULN_REL_OPEN); /* b knows a's life now */
    CHECK(uln_rel_ctrl(&b, T, &p));           /* and answers at once */
    CHECK(p.dst_epoch == 0x1111 && (p.flags & ULN_REL_FB) && p.fb.credit == 16);
    CHECK(uln_rel_rx(&a, &p, T) == ULN_REL_RX_NONE);
    CHECK(uln_rel_state(&a) == ULN_REL_OPEN);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);       /* a has b's credit */
    CHECK_EQ(p.seq, 0x1111);                             /* first seq = own epoch */
    CHECK(uln_rel_tx_assign(&b, T, PKT, &d) == -EAGAIN); /* b has no credit yet */
    CHECK(p.flags & ULN_REL_FB); /* a's answer rides on its first data packet */
    CHECK(!uln_rel_ctrl(&a, T, &d));
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_tx_assign(&b, T, PKT, &p) == 0);
    CHECK_EQ(p.seq, 0x2222);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_loss_lose_fast_retransmit(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[10], p;
    const uint32_t ea = 0xa0000000u, eb = 0xb0000000u;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, eb);
    for (int i = 0; i < 10; i++) {
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
        CHECK_EQ(d[i].seq, ea + (uint32_t)i);
    }
    T += 10 * US;
    int lose_seen = 0;
    for (int i = 0; i < 10; i++) {
        if (i == 3) continue; /* lost */
        int v = uln_rel_rx(&b, &d[i], T);
        CHECK(v == (i < 3 ? ULN_REL_RX_DELIVER : ULN_REL_RX_HOLD));
        uint32_t s;
        CHECK(!uln_rel_rx_next(&b, &s));
        while (uln_rel_ctrl(&b, T, &p)) {
            if (p.flags & ULN_REL_LOSE) {
                lose_seen++;
                CHECK_EQ(p.fb.lose, ea + 3);
                CHECK(i == 6); /* after `reorder` (3) arrivals past the hole */
            }
            CHECK_EQ(p.fb.ack, ea + (i < 3 ? (uint32_t)i + 1 : 3));
            uln_rel_rx(&a, &p, T);
        }
    }
    CHECK_EQ(lose_seen, 1);
    CHECK_EQ(b.stats.lose_sent, 1);
    CHECK_EQ(a.stats.lose_rcvd, 1);
    /* Exactly the lost packet is sent again, at once (no timeout). */
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, ea + 3);
    CHECK(p.flags & ULN_REL_RETX);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(a.stats.tx_fast, 1);
    CHECK_EQ(a.stats.tx_timeout, 0);
    /* It fills the hole; the held packets come out in order. */
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uint32_t s, want = ea + 4;
    while (uln_rel_rx_next(&b, &s))
        CHECK_EQ(s, want++);
    CHECK_EQ(want, ea + 10);
    CHECK(uln_rel_ctrl(&b, T, &p)); /* hole filled: ACK at once */
    CHECK_EQ(p.fb.ack, ea + 10);
    uln_rel_rx(&a, &p, T);
    /* Every seq is returned as acknowledged exactly once. */
    int seen[10] = {0}, n = 0;
    while (uln_rel_tx_next_acked(&a, &s)) {
        CHECK(s - ea < 10);
        if (s - ea < 10) seen[s - ea]++;
        n++;
    }
    CHECK_EQ(n, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(seen[i], 1);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* The receiver's caller dropped packets unseen for want of a buffer
 * (uln_rel_rx_dropped: the UDP transport's pool backstop) behind a lost one. The sender
 * spent its credit on them, so nothing later arrives to show them lost: each
 * feedback names the cumulative point in a LOSE while a dropped seq lies past
 * it, and every one is resent fast, one round trip apart - no timeout. */
static void test_dropped_unseen(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[10], p;
    const uint32_t ea = 0xa0000000u, eb = 0xb0000000u;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, eb);
    for (int i = 0; i < 10; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    T += 10 * US;
    for (int i = 0; i < 10; i++) {
        if (i == 2) continue; /* lost by the link */
        if (i >= 6) {
            uln_rel_rx_dropped(&b, d[i].seq); /* no buffer to hold it */
            continue;
        }
        CHECK(uln_rel_rx(&b, &d[i], T) == (i < 2 ? ULN_REL_RX_DELIVER : ULN_REL_RX_HOLD));
        uint32_t s;
        while (uln_rel_rx_next(&b, &s)) {
        }
    }
    /* Not counted: at or below the cumulative point, beyond the credit, or
     * a seq that arrived. */
    uln_rel_rx_dropped(&b, ea + 1);
    uln_rel_rx_dropped(&b, ea + 2 + 16);
    uln_rel_rx_dropped(&b, ea + 4);
    CHECK_EQ(b.stats.rx_dropped, 4);
    CHECK_EQ(flush_ctrl(&b, &a), 1);
    CHECK_EQ(a.stats.lose_rcvd, 1); /* 2, by the order rule */
    uint32_t want = ea + 2;
    for (int round = 0; round < 5; round++) {
        CHECK(uln_rel_tx_next_resend(&a, T, &p));
        CHECK_EQ(p.seq, want);
        CHECK(!uln_rel_tx_next_resend(&a, T, &p) || p.seq != want);
        T += 10 * US;
        CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
        uint32_t s;
        while (uln_rel_rx_next(&b, &s)) {
        }
        want = round == 0 ? ea + 6 : want + 1;
        T += 60 * US; /* the ACK's delay */
        CHECK(uln_rel_ctrl(&b, T, &p));
        CHECK_EQ(p.fb.ack, want);
        CHECK(want == ea + 10 ? !(p.flags & ULN_REL_LOSE)
                              : (p.flags & ULN_REL_LOSE) && p.fb.lose == want);
        uln_rel_rx(&a, &p, T);
    }
    CHECK_EQ(want, ea + 10);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    CHECK_EQ(a.stats.tx_fast, 5);
    CHECK_EQ(a.stats.tx_timeout, 0);
    /* Past the dropped ones: feedback names nothing. */
    CHECK(!uln_rel_ctrl(&b, T, &p) || !(p.flags & ULN_REL_LOSE));
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_timeout_backoff(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    cfg_base(&c); /* rto 1 ms, max 8 ms */
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    uint64_t t0 = T;
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(uln_rel_next_deadline(&a), t0 + 1 * MS);
    /* Resends at 1, 3, 7, 15, 23, 31 ms: the timeout doubles, then stays at max. */
    uint64_t at[] = {1, 3, 7, 15, 23, 31}, next[] = {3, 7, 15, 23, 31, 39};
    for (int k = 0; k < 6; k++) {
        T = t0 + at[k] * MS - 1;
        CHECK(!uln_rel_tx_next_resend(&a, T, &p));
        T++;
        CHECK(uln_rel_tx_next_resend(&a, T, &p));
        CHECK_EQ(p.seq, 0x100);
        CHECK(!uln_rel_tx_next_resend(&a, T, &p));
        CHECK_EQ(uln_rel_next_deadline(&a), t0 + next[k] * MS);
    }
    CHECK_EQ(a.stats.tx_timeout, 6);
    CHECK_EQ(a.stats.rto_fired, 6);
    CHECK_EQ(a.stats.tx_fast, 0);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* The window is stuck behind a hole and the hole's fast retransmission is
 * lost too: nothing later is sent whose arrival would show it, so the probe
 * timer sends it again after pto (two round trips, here rto_min / 2), not
 * the retransmission timer. */
static void test_lost_retransmission_blocked(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[16], p;
    const uint32_t ea = 0x7ffffff8u, eb = 0x100; /* across the sign bit */
    cfg_base(&c);                                /* window 16, rto 1 ms */
    open_pair(&a, &b, &c, &c, ea, eb);
    for (int i = 0; i < 16; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* window and credit full */
    T += 10 * US;
    for (int i = 0; i < 16; i++)
        if (i != 3) uln_rel_rx(&b, &d[i], T);
    flush_ctrl(&b, &a); /* ACK 0..2, SACK 4..15, LOSE 3; an RTT sample of 10 us */
    CHECK_EQ(a.stats.lose_rcvd, 1);
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, ea + 3);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p)); /* ... and it is lost */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    uint64_t t_retx = T;
    /* srtt 10 us: pto = max(2 srtt + ack_delay, rto_min / 2) = 500 us. */
    CHECK_EQ(uln_rel_next_deadline(&a), t_retx + 500 * US);
    T = t_retx + 500 * US - 1;
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    T++;
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, ea + 3);
    CHECK(p.flags & ULN_REL_RETX);
    CHECK_EQ(a.stats.tx_pto, 1);
    CHECK_EQ(a.stats.tx_timeout, 0);
    CHECK_EQ(a.stats.rto_fired, 0);
    /* This one arrives: the receiver answers at once, the window opens. */
    T += 10 * US;
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    uint32_t s;
    while (uln_rel_rx_next(&b, &s))
        ;
    uln_rel_rx_release(&b, 16, T);
    flush_ctrl(&b, &a);
    while (uln_rel_tx_next_acked(&a, &s))
        ;
    /* A probe goes once per fast retransmission: a silent peer is left to
     * the timeout and its backoff. */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &d[0]) == 0);
    for (int i = 0; i < 3; i++) {
        T += 2 * MS;
        while (uln_rel_tx_next_resend(&a, T, &p))
            ;
    }
    CHECK_EQ(a.stats.tx_pto, 1);
    CHECK(a.stats.rto_fired >= 2);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* The last packets of a flight are lost: nothing later arrives to show it,
 * no LOSE, no SACK past them. The tail probe sends the newest again after
 * pto; its arrival shows the holes, and all of them are fast-retransmitted
 * in one round trip. Before, the timer found them one per expiry, each a
 * backoff later. */
static void test_tail_probe(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[12], p;
    const uint32_t ea = 0x3000, eb = 0x4000;
    cfg_base(&c); /* window 16, rto 1 ms, rto_min 1 ms */
    open_pair(&a, &b, &c, &c, ea, eb);
    /* An RTT sample first (10 us): no probe goes before one. */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(a.tlp_at, ULN_REL_NEVER);
    T += 10 * US;
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uln_rel_want_fb(&b);
    flush_ctrl(&b, &a);
    CHECK_EQ(a.stats.rtt_samples, 1);
    /* 12 packets; the first 4 arrive, the last 8 are lost. */
    for (int i = 0; i < 12; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    T += 10 * US;
    for (int i = 0; i < 4; i++)
        uln_rel_rx(&b, &d[i], T);
    flush_ctrl(&b, &a); /* ACK through d[3]: progress, the probe is armed */
    CHECK_EQ(uln_rel_tx_in_flight(&a), 8);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    /* pto = max(2 srtt + ack_delay, rto_min / 2) = 500 us, before the 1 ms timeout. */
    uint64_t t_ack = T;
    CHECK_EQ(uln_rel_next_deadline(&a), t_ack + 500 * US);
    T = t_ack + 500 * US - 1;
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    T++;
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, d[11].seq); /* the newest, not the oldest */
    CHECK(p.flags & ULN_REL_RETX);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(a.stats.tx_tlp, 1);
    CHECK_EQ(a.rto_at, T + 1 * MS); /* the timeout waits a whole one behind it */
    /* It arrives: the receiver names the first hole (LOSE) and SACKs it; the
     * order rule finds the rest. */
    T += 10 * US;
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_HOLD);
    flush_ctrl(&b, &a);
    CHECK_EQ(a.stats.lose_rcvd, 1);
    uint32_t want = d[4].seq;
    while (uln_rel_tx_next_resend(&a, T, &p)) {
        CHECK_EQ(p.seq, want++);
        CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER); /* in order now */
    }
    CHECK_EQ(want, d[11].seq); /* 4..10 resent, each once */
    CHECK_EQ(a.stats.tx_fast, 7);
    CHECK_EQ(a.stats.tx_timeout, 0);
    CHECK_EQ(a.stats.rto_fired, 0);
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    CHECK_EQ(a.tlp_at, ULN_REL_NEVER); /* nothing in flight: nothing to probe */
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* A timeout says the receiver went quiet (descheduled, say), not that the
 * whole flight was lost: only the oldest packet is sent again; the answer to
 * it shows the rest arrived. */
static void test_timeout_resends_oldest(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[8], p;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 8; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    T += 1 * MS; /* the receiver has not run for a whole timeout */
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, 0x100);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(a.stats.tx_timeout, 1);
    CHECK_EQ(a.stats.rto_fired, 1);
    /* It runs: the flight and then the resend (a duplicate, answered at once). */
    T += 10 * US;
    for (int i = 0; i < 8; i++)
        uln_rel_rx(&b, &d[i], T);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DUP);
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(a.stats.tx_resend, 1);
    CHECK_EQ(b.stats.rx_dup, 1);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* Several senders share one receiver's buffers: a cut share gives no new
 * credit until the held packets come back, never takes back credit given
 * (the edge does not move back), and a raise opens the window at once. */
static void test_rx_limit(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[16], p;
    cfg_base(&c); /* window 16 */
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 8; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    uln_rel_rx_limit(&b, 4, T); /* 8 in flight under the old edge (16) */
    T += 10 * US;
    for (int i = 1; i < 8; i++) /* 0 lost: 7 held */
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_HOLD);
    CHECK_EQ(b.stats.rx_nobuf, 0); /* credit given is honoured */
    flush_ctrl(&b, &a);
    CHECK_EQ(a.snd_edge, 0x100u + 16); /* no more than before */
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, 0x100);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uint32_t s;
    while (uln_rel_rx_next(&b, &s))
        ;
    uln_rel_rx_release(&b, 8, T);
    flush_ctrl(&b, &a);
    CHECK_EQ(a.snd_edge, 0x100u + 16); /* cum 8 + share 4 = 12: still 16 */
    for (int i = 8; i < 16; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    for (int i = 8; i < 16; i++)
        uln_rel_rx(&b, &d[i], T);
    uln_rel_rx_release(&b, 6, T); /* 2 held: cum 16 + (4 - 2) */
    flush_ctrl(&b, &a);
    CHECK_EQ(a.snd_edge, 0x100u + 18);
    uln_rel_rx_limit(&b, 16, T);    /* the other senders went quiet */
    CHECK(uln_rel_ctrl(&b, T, &p)); /* a window update at once */
    CHECK_EQ(p.fb.ack + p.fb.credit, 0x100u + 16 + 14);
    uln_rel_rx_limit(&b, 0, T); /* clamped to 1: never shut for good */
    CHECK_EQ(b.rx_limit, 1);
    uln_rel_rx_limit(&b, 100, T); /* clamped to rx_bufs */
    CHECK_EQ(b.rx_limit, 16);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_karn(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p, f;
    cfg_base(&c);
    c.rto_min = 100 * US;
    c.rto_max = 1000 * MS;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    T += 1 * MS; /* first transmission lost; timeout */
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    T += 10 * US;
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uln_rel_rx_release(&b, 1, T);
    T += 50 * US;
    CHECK(uln_rel_ctrl(&b, T, &f));
    uln_rel_rx(&a, &f, T);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    CHECK_EQ(a.stats.rtt_samples, 0); /* acked, but sent twice: no sample */
    /* The backed-off timeout stays until a clean sample: 2 ms now. */
    uint64_t t1 = T;
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(uln_rel_next_deadline(&a), t1 + 2 * MS);
    T += 50 * US;
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uln_rel_rx_release(&b, 1, T);
    T += 50 * US; /* delayed ACK */
    CHECK(uln_rel_ctrl(&b, T, &f));
    uln_rel_rx(&a, &f, T);
    CHECK_EQ(a.stats.rtt_samples, 1);
    /* srtt 100 us, rttvar 50 us: rto = 100 + 4 * 50 = 300 us, backoff gone.
     * The tail probe comes first: 2 srtt + ack_delay = 250 us. */
    uint64_t t2 = T;
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(a.rto_at, t2 + 300 * US);
    CHECK_EQ(uln_rel_next_deadline(&a), t2 + 250 * US);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_delayed_ack(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[5], p;
    cfg_base(&c); /* ack_every 4, ack_delay 50 us */
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 5; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    uint64_t t0 = T;
    CHECK(uln_rel_rx(&b, &d[0], T) == ULN_REL_RX_DELIVER);
    CHECK(!uln_rel_ctrl(&b, T, &p));
    CHECK_EQ(uln_rel_next_deadline(&b), t0 + 50 * US);
    T = t0 + 50 * US - 1;
    CHECK(!uln_rel_ctrl(&b, T, &p));
    T++;
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK_EQ(p.fb.ack, 0x101);
    CHECK(!(p.flags & ULN_REL_LOSE));
    /* Every ack_every packets an ACK goes at once. */
    for (int i = 1; i < 5; i++) {
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER);
        bool due = uln_rel_ctrl(&b, T, &p);
        CHECK(due == (i == 4));
        if (due) CHECK_EQ(p.fb.ack, 0x105);
    }
    /* Data going the other way carries the owed ACK: no ACK packet needed. */
    uln_rel_rx_release(&b, 5, T);
    CHECK(uln_rel_rx(&b, &d[0], T) == ULN_REL_RX_DUP); /* makes an ACK owed */
    CHECK(uln_rel_tx_assign(&b, T, PKT, &p) == 0);
    CHECK((p.flags & ULN_REL_DATA) && (p.flags & ULN_REL_FB));
    CHECK_EQ(p.fb.ack, 0x105);
    CHECK(!uln_rel_ctrl(&b, T, &p));
    CHECK_EQ(b.stats.fb_piggy, 1);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* Packets that came in one datagram (ULN_REL_SAME_DGRAM after its first)
 * owe one ACK between them: with ack_every 4 an ACK goes at once after 4
 * datagrams, not 4 packets; a quarter window of packets forces one anyway. */
static void test_bundled_ack(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[26], p;
    cfg_base(&c); /* ack_every 4 */
    c.window = 64;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 10; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    for (int i = 0; i < 9; i++) { /* three datagrams of three */
        if (i % 3) d[i].flags |= ULN_REL_SAME_DGRAM;
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER);
        CHECK(!uln_rel_ctrl(&b, T, &p));
    }
    CHECK(uln_rel_rx(&b, &d[9], T) == ULN_REL_RX_DELIVER); /* the fourth datagram */
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK_EQ(p.fb.ack, 0x10a);
    uln_rel_rx(&a, &p, T);
    uln_rel_rx_release(&b, 10, T);
    for (int i = 10; i < 26; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    for (int i = 10; i < 26; i++) { /* one datagram of 16: a quarter window */
        if (i > 10) d[i].flags |= ULN_REL_SAME_DGRAM;
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER);
        CHECK(uln_rel_ctrl(&b, T, &p) == (i == 25));
    }
    CHECK_EQ(p.fb.ack, 0x11a);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_stop_go(void)
{
    struct uln_rel_cfg ca, cb;
    struct uln_rel a, b;
    struct uln_rel_pkt d[8], p;
    cfg_base(&ca);
    cfg_base(&cb);
    cb.rx_bufs = 4;
    open_pair(&a, &b, &ca, &cb, 0x100, 0x200);
    for (int i = 0; i < 4; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* b's credit is 4 */
    CHECK_EQ(uln_rel_next_deadline(&a), T + 1 * MS);     /* in flight: the timer, no probe */
    for (int i = 0; i < 4; i++)
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER); /* app keeps them */
    CHECK(uln_rel_ctrl(&b, T, &p));                            /* buffers full: STOP at once */
    CHECK_EQ(p.fb.credit, 0);
    CHECK_EQ(b.stats.stop_sent, 1);
    T += 100 * US;
    uln_rel_rx(&a, &p, T);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    /* Nothing in flight and stopped: a probe is due a timeout later, even if
     * the caller does not try to send again. */
    CHECK_EQ(uln_rel_next_deadline(&a), T + 1 * MS);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* stopped */
    /* Space returns: GO. */
    T += 10 * US;
    uln_rel_rx_release(&b, 4, T);
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK_EQ(p.fb.credit, 4);
    uln_rel_rx(&a, &p, T);
    for (int i = 0; i < 4; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    for (int i = 0; i < 4; i++)
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_ctrl(&b, T, &p)); /* STOP again */
    CHECK_EQ(p.fb.credit, 0);
    uln_rel_rx(&a, &p, T);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    /* This time the GO is lost: the sender probes after a timeout. */
    uint64_t t0 = T;
    uln_rel_rx_release(&b, 4, T);
    CHECK(uln_rel_ctrl(&b, T, &p)); /* the GO, dropped */
    CHECK_EQ(uln_rel_next_deadline(&a), t0 + 1 * MS);
    T = t0 + 1 * MS;
    CHECK(uln_rel_ctrl(&a, T, &p));
    CHECK(p.flags & ULN_REL_PROBE);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_NONE);
    CHECK(uln_rel_ctrl(&b, T, &p)); /* the probe is answered at once */
    CHECK_EQ(p.fb.credit, 4);
    uln_rel_rx(&a, &p, T);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(a.stats.tx_probe, 1);
    /* A sender ignoring STOP gets nothing in. */
    struct uln_rel_pkt x = p;
    x.seq += 10;
    CHECK(uln_rel_rx(&b, &x, T) == ULN_REL_RX_OUT_OF_WINDOW);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* A late first transmission teaches the receiver how far the path reorders;
 * both ends then wait that long before calling a hole lost. */
static void test_reordering(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[14], p;
    const uint32_t ea = 0x100;
    cfg_base(&c); /* reorder 3, window 16 */
    c.ack_every = 1;
    open_pair(&a, &b, &c, &c, ea, 0x200);
    for (int i = 0; i < 14; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    T += 50 * US; /* round trip 50 us */
    int order[] = {0, 2, 3, 4, 5};
    for (int i = 0; i < 5; i++) {
        uln_rel_rx(&b, &d[order[i]], T);
        flush_ctrl(&b, &a);
    }
    /* 1 looked lost (3 beyond it): resent, needlessly. */
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, ea + 1);
    struct uln_rel_pkt resent = p;
    T += 10 * US; /* acked too soon for the resend: the original arrived */
    CHECK(uln_rel_rx(&b, &d[1], T) == ULN_REL_RX_DELIVER); /* the original, late */
    CHECK_EQ(b.reorder_rx, 5);                             /* overtaken by 2..5 */
    flush_ctrl(&b, &a);
    CHECK_EQ(a.reorder_tx, 5);
    /* Now 7 is missing: 4 arrivals beyond it are not yet enough... */
    int more[] = {6, 8, 9, 10, 11};
    for (int i = 0; i < 5; i++) {
        uln_rel_rx(&b, &d[more[i]], T);
        while (uln_rel_ctrl(&b, T, &p)) {
            CHECK(!(p.flags & ULN_REL_LOSE));
            uln_rel_rx(&a, &p, T);
        }
        CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    }
    /* ...the fifth is. */
    uln_rel_rx(&b, &d[12], T);
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK((p.flags & ULN_REL_LOSE) && p.fb.lose == ea + 7);
    uln_rel_rx(&a, &p, T);
    CHECK(uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(p.seq, ea + 7);
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    /* The needless resend of 1 turns up at last: a duplicate, re-ACKed. */
    CHECK(uln_rel_rx(&b, &resent, T) == ULN_REL_RX_DUP);
    CHECK(uln_rel_ctrl(&b, T, &p));
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_window_full(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[8], p;
    cfg_base(&c);
    c.window = 8;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 8; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 8);
    for (int i = 0; i < 8; i++) {
        CHECK(uln_rel_rx(&b, &d[i], T) == ULN_REL_RX_DELIVER);
        uln_rel_rx_release(&b, 1, T);
    }
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    /* Acked, but the slots were not handed back yet: still no new seq. */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    uint32_t s;
    int n = 0;
    while (uln_rel_tx_next_acked(&a, &s))
        n++;
    CHECK_EQ(n, 8);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(p.seq, 0x108);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* A small lossy exchange across the 2^32 wrap: every 5th first transmission is
 * dropped, every ACK goes through. */
static void test_wrap(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    const uint32_t ea = 0xffffffe0u;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, 0x5);
    uint32_t sent = 0, got = 0, want = ea;
    bool wrapped = false;
    for (int round = 0; round < 2000 && (got < 100 || uln_rel_tx_in_flight(&a)); round++) {
        T += 10 * US;
        while (uln_rel_tx_next_resend(&a, T, &p))
            if (uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER) {
                CHECK_EQ(p.seq, want);
                want++, got++;
                uln_rel_rx_release(&b, 1, T);
            }
        while (sent < 100 && uln_rel_tx_assign(&a, T, PKT, &p) == 0) {
            if (p.seq < 0x10) wrapped = true;
            if (sent++ % 5 == 4) continue; /* dropped */
            int v = uln_rel_rx(&b, &p, T);
            if (v == ULN_REL_RX_DELIVER) {
                CHECK_EQ(p.seq, want);
                want++, got++;
                uln_rel_rx_release(&b, 1, T);
            }
        }
        uint32_t s;
        while (uln_rel_rx_next(&b, &s)) {
            CHECK_EQ(s, want);
            want++, got++;
            uln_rel_rx_release(&b, 1, T);
        }
        flush_ctrl(&b, &a);
        while (uln_rel_tx_next_acked(&a, &s)) {
        }
    }
    CHECK_EQ(got, 100);
    CHECK_EQ(want, ea + 100);
    CHECK(wrapped);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    CHECK(a.stats.tx_fast > 0);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_duplicates(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[3], p;
    uint32_t s;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    for (int i = 0; i < 3; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_rx(&b, &d[0], T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_rx(&b, &d[2], T) == ULN_REL_RX_HOLD);
    flush_ctrl(&b, &a);
    CHECK(uln_rel_rx(&b, &d[2], T) == ULN_REL_RX_DUP); /* held already */
    CHECK(!uln_rel_ctrl(&b, T, &p)); /* a copy made by the network needs no answer */
    struct uln_rel_pkt r0 = d[0];
    r0.flags |= ULN_REL_RETX;
    CHECK(uln_rel_rx(&b, &r0, T) == ULN_REL_RX_DUP); /* delivered already, resent */
    CHECK(uln_rel_ctrl(&b, T, &p));                  /* the sender missed our ACK: again, at once */
    CHECK(uln_rel_rx(&b, &d[1], T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_rx(&b, &d[1], T) == ULN_REL_RX_DUP); /* before rx_next too */
    CHECK(uln_rel_rx_next(&b, &s));
    CHECK_EQ(s, 0x102);
    CHECK(!uln_rel_rx_next(&b, &s));
    CHECK(uln_rel_rx(&b, &d[2], T) == ULN_REL_RX_DUP);
    CHECK_EQ(b.stats.rx_dup, 4);
    /* However old: everything before the cumulative point arrived. */
    struct uln_rel_pkt old = d[0];
    old.seq -= 100000;
    CHECK(uln_rel_rx(&b, &old, T) == ULN_REL_RX_DUP);
    CHECK_EQ(b.stats.rx_data, 3);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_stale_and_restart(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[3], old_b, p;
    uint32_t s;
    const uint32_t ea = 0xa, eb1 = 0xb1, eb2 = 0xb2;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, eb1);
    for (int i = 0; i < 3; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK(uln_rel_tx_assign(&b, T, PKT, &old_b) == 0);
    CHECK(uln_rel_rx(&b, &d[0], T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_rx(&b, &d[1], T) == ULN_REL_RX_DELIVER);
    T += c.ack_delay;
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 1);

    /* Packets addressed to another life of a, or from a life b never had. */
    struct uln_rel_pkt x = old_b;
    x.dst_epoch = ea + 1;
    uint64_t cum_before = a.stats.rx_data;
    CHECK(uln_rel_rx(&a, &x, T) == ULN_REL_RX_STALE);
    x = old_b;
    x.src_epoch = 0x777;
    CHECK(uln_rel_rx(&a, &x, T) == ULN_REL_RX_STALE);
    CHECK_EQ(a.stats.stale, 2);
    CHECK_EQ(a.stats.rx_data, cum_before);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 1);

    /* b restarts with a new life; its hello resets a. */
    uln_rel_fini(&b);
    T += 5 * MS;
    CHECK(uln_rel_init(&b, &c, eb2, T) == 0);
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK(uln_rel_rx(&a, &p, T) == ULN_REL_RX_RESET);
    CHECK_EQ(a.stats.resets, 1);
    CHECK_EQ(uln_rel_tx_in_flight(&a), 0);
    int acked = 0;
    while (uln_rel_tx_next_acked(&a, &s))
        acked++;
    CHECK(acked <= 2); /* only what the old life really acknowledged */
    CHECK(!uln_rel_rx_next(&a, &s));
    /* Leftovers of the old lives are rejected on both sides. */
    CHECK(uln_rel_rx(&a, &old_b, T) == ULN_REL_RX_STALE); /* from b's old life */
    flush_ctrl(&a, &b);
    flush_ctrl(&b, &a);
    CHECK(uln_rel_state(&b) == ULN_REL_OPEN);
    CHECK(uln_rel_rx(&b, &d[2], T) == ULN_REL_RX_STALE); /* for b's old life */
    /* And the new lives talk from the start of their sequence spaces. */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK_EQ(p.seq, ea);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    CHECK(uln_rel_tx_assign(&b, T, PKT, &p) == 0);
    CHECK_EQ(p.seq, eb2);
    CHECK(uln_rel_rx(&a, &p, T) == ULN_REL_RX_DELIVER);
    /* A late duplicate hello of the old life does not reset again. */
    struct uln_rel_pkt h = {.src_epoch = eb1};
    CHECK(uln_rel_rx(&a, &h, T) == ULN_REL_RX_STALE);
    CHECK_EQ(a.stats.resets, 1);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_dead(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    uint32_t s;
    cfg_base(&c); /* dead_after 1 s */
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    /* Idle and silent: never dead, however long. */
    T += 10 * c.dead_after;
    CHECK(uln_rel_tick(&a, T) == ULN_REL_OPEN);
    CHECK(uln_rel_tick(&b, T) == ULN_REL_OPEN);
    /* Outstanding and unanswered: dead exactly dead_after after the send. */
    uint64_t t0 = T;
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    while (T < t0 + c.dead_after - 1) {
        T = uln_rel_next_deadline(&a);
        if (T > t0 + c.dead_after - 1) T = t0 + c.dead_after - 1;
        while (uln_rel_tx_next_resend(&a, T, &p)) {
        }
        CHECK(uln_rel_tick(&a, T) == ULN_REL_OPEN);
    }
    CHECK_EQ(uln_rel_next_deadline(&a), t0 + c.dead_after);
    T = t0 + c.dead_after;
    CHECK(uln_rel_tick(&a, T) == ULN_REL_DEAD);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -ECONNRESET);
    CHECK(!uln_rel_tx_next_acked(&a, &s));
    CHECK(!uln_rel_ctrl(&a, T, &p));
    CHECK_EQ(uln_rel_next_deadline(&a), ULN_REL_NEVER);
    CHECK_EQ(a.stats.deaths, 1);
    /* The dead life's packets are dropped... */
    CHECK(uln_rel_tx_assign(&b, T, PKT, &p) == 0);
    CHECK(uln_rel_rx(&a, &p, T) == ULN_REL_RX_STALE);
    /* ...and a new life of the peer revives the connection. */
    uln_rel_fini(&b);
    CHECK(uln_rel_init(&b, &c, 0x300, T) == 0);
    CHECK(uln_rel_ctrl(&b, T, &p));
    CHECK(uln_rel_rx(&a, &p, T) == ULN_REL_RX_RESET);
    connect_pair(&a, &b);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    uln_rel_fini(&a);
    uln_rel_fini(&b);

    /* Nobody answers the hellos: dead after dead_after, not before. */
    uint64_t t1 = T;
    CHECK(uln_rel_init(&a, &c, 0x400, T) == 0);
    while (uln_rel_ctrl(&a, T, &p)) {
    }
    CHECK(uln_rel_tick(&a, t1 + c.dead_after - 1) == ULN_REL_CONNECTING);
    CHECK(uln_rel_tick(&a, t1 + c.dead_after) == ULN_REL_DEAD);
    uln_rel_fini(&a);

    /* A stopped receiver that answers probes is alive, however long. */
    struct uln_rel_cfg cb = c;
    cb.rx_bufs = 1;
    open_pair(&a, &b, &c, &cb, 0x500, 0x600);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER); /* never released */
    flush_ctrl(&b, &a);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    uint64_t t2 = T;
    while (T < t2 + 3 * c.dead_after) {
        T = uln_rel_next_deadline(&a);
        flush_ctrl(&a, &b);
        flush_ctrl(&b, &a);
        CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN);
    }
    CHECK(uln_rel_tick(&a, T) == ULN_REL_OPEN);
    CHECK(a.stats.tx_probe >= 3);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_keepalive(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    cfg_base(&c);
    c.keepalive = 20 * MS;
    c.dead_after = 100 * MS;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    uint64_t t0 = T;
    CHECK_EQ(uln_rel_next_deadline(&a), t0 + 20 * MS);
    T = t0 + 20 * MS;
    CHECK(uln_rel_ctrl(&a, T, &p));
    CHECK(p.flags & ULN_REL_PROBE);
    uln_rel_rx(&b, &p, T);
    flush_ctrl(&b, &a); /* answered */
    CHECK(!a.probe_out);
    /* Now the peer vanishes: probes go unanswered, dead after dead_after. */
    uint64_t t1 = T;
    int probes = 0;
    for (;;) {
        uint64_t d = uln_rel_next_deadline(&a);
        if (d == ULN_REL_NEVER) break;
        T = d;
        if (uln_rel_ctrl(&a, T, &p)) probes++;
        if (uln_rel_tick(&a, T) == ULN_REL_DEAD) break;
    }
    CHECK(uln_rel_state(&a) == ULN_REL_DEAD);
    CHECK_EQ(T, t1 + 20 * MS + 100 * MS); /* first probe at +20, then 100 ms silence */
    CHECK(probes >= 3);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* The layer above awaits an answer the peer owes (it acknowledged a GET's
 * request, then died): without uln_rel_watch nothing is outstanding and the
 * silence means nothing; with it a probe goes after a timeout and the peer's
 * silence from the probe on makes it dead after dead_after. A live peer's
 * answer to the probe ends the question. */
static void test_watch(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    uint32_t s;
    cfg_base(&c);
    c.dead_after = 100 * MS;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    /* The request goes and is acknowledged: nothing outstanding. */
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == 0);
    CHECK(uln_rel_rx(&b, &p, T) == ULN_REL_RX_DELIVER);
    T += 1 * MS;
    flush_ctrl(&b, &a);
    CHECK(uln_rel_tx_next_acked(&a, &s));
    CHECK_EQ(uln_rel_next_deadline(&a), ULN_REL_NEVER);
    /* A live peer: the watch's probe is answered, the question ends. */
    uln_rel_watch(&a);
    CHECK_EQ(a.stats.watched, 1);
    uint64_t d = uln_rel_next_deadline(&a);
    CHECK(d > T && d != ULN_REL_NEVER);
    T = d;
    CHECK(uln_rel_ctrl(&a, T, &p));
    CHECK(p.flags & ULN_REL_PROBE);
    uln_rel_rx(&b, &p, T);
    flush_ctrl(&b, &a);
    CHECK(!a.probe_out);
    CHECK_EQ(uln_rel_next_deadline(&a), ULN_REL_NEVER);
    uln_rel_watch(&a);
    uln_rel_watch(&a); /* a second call before the probe asks nothing more */
    CHECK_EQ(a.stats.watched, 2);
    /* Now the peer is gone: dead dead_after after the probe, not before. */
    T = uln_rel_next_deadline(&a);
    uint64_t t1 = T;
    CHECK(uln_rel_ctrl(&a, T, &p));
    for (;;) {
        d = uln_rel_next_deadline(&a);
        CHECK(d != ULN_REL_NEVER);
        T = d;
        while (uln_rel_ctrl(&a, T, &p)) {
        }
        if (uln_rel_tick(&a, T) == ULN_REL_DEAD) break;
        CHECK(T < t1 + c.dead_after);
    }
    CHECK_EQ(T, t1 + c.dead_after);
    CHECK(a.stats.tx_probe >= 3);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

static void test_forged(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt d[4], p;
    uint32_t s;
    const uint32_t ea = 0xfffffffeu, eb = 0x200; /* across the wrap, too */
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, eb);
    for (int i = 0; i < 4; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    struct uln_rel_pkt f = {.src_epoch = eb, .dst_epoch = ea, .flags = ULN_REL_FB};
    f.fb.ack = ea;
    f.fb.credit = 16;

    struct uln_rel_pkt x = f;
    x.fb.ack = ea + 10; /* beyond what was sent */
    uln_rel_rx(&a, &x, T);
    x.fb.ack = ea + 4 + 0x40000000u;
    uln_rel_rx(&a, &x, T);
    CHECK_EQ(a.stats.bad_ack, 2);
    x = f;
    x.fb.sack = 1ull << 20; /* ea + 21: never sent */
    uln_rel_rx(&a, &x, T);
    x.fb.sack = 1;
    x.fb.sack_off = 60000;
    uln_rel_rx(&a, &x, T);
    CHECK_EQ(a.stats.bad_sack, 2);
    x = f;
    x.flags |= ULN_REL_LOSE;
    x.fb.lose = ea + 1000000;
    uln_rel_rx(&a, &x, T);
    x.fb.lose = ea - 5; /* before the cumulative ack */
    uln_rel_rx(&a, &x, T);
    CHECK_EQ(a.stats.bad_lose, 2);
    x = f;
    x.fb.credit = 60000;
    uln_rel_rx(&a, &x, T);
    x = f;
    x.fb.reorder = 40000;
    uln_rel_rx(&a, &x, T);
    CHECK_EQ(a.stats.bad_credit, 2);
    CHECK_EQ(a.reorder_tx, 3);
    x = f;
    x.fb.ack = ea - 1000; /* from long ago (or forged): ignored */
    uln_rel_rx(&a, &x, T);
    CHECK_EQ(a.stats.fb_old, 1);
    /* None of that freed or resent anything. */
    CHECK(!uln_rel_tx_next_acked(&a, &s));
    CHECK(!uln_rel_tx_next_resend(&a, T, &p));
    CHECK_EQ(uln_rel_tx_in_flight(&a), 4);
    /* A genuine selective ack frees exactly its packet. */
    x = f;
    x.fb.sack = 1; /* ea + 1 */
    uln_rel_rx(&a, &x, T);
    CHECK(uln_rel_tx_next_acked(&a, &s));
    CHECK_EQ(s, ea + 1);
    CHECK(!uln_rel_tx_next_acked(&a, &s));

    /* Malformed packets change nothing either. */
    struct uln_rel_pkt m = {.src_epoch = eb, .dst_epoch = 0, .flags = ULN_REL_DATA};
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_INVALID); /* hello with data */
    m = d[0];
    m.flags |= ULN_REL_LOSE; /* LOSE without feedback */
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_INVALID);
    m = d[0];
    m.flags |= 0x100;
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_INVALID);
    m = d[0];
    m.src_epoch = 0;
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_INVALID);
    CHECK_EQ(b.stats.malformed, 4);
    CHECK_EQ(b.stats.rx_data, 0);
    m = d[0];
    m.flags = ULN_REL_RETX; /* retransmission of nothing */
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_INVALID);
    CHECK_EQ(b.stats.malformed, 5);
    /* Data beyond the credit. */
    m = d[0];
    m.seq = ea + 5000;
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_OUT_OF_WINDOW);
    m.seq = ea + 16; /* just past the edge b advertised */
    CHECK(uln_rel_rx(&b, &m, T) == ULN_REL_RX_OUT_OF_WINDOW);
    CHECK_EQ(b.stats.rx_oow, 2);
    CHECK_EQ(b.stats.rx_data, 0);
    /* More buffers given back than taken. */
    CHECK(uln_rel_rx(&b, &d[0], T) == ULN_REL_RX_DELIVER);
    uln_rel_rx_release(&b, 5, T);
    CHECK_EQ(b.stats.bad_release, 1);
    CHECK_EQ(b.rx_used, 0);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* Random packets - right or wrong epochs, any flags, fields near the live
 * values or anywhere - thrown at a live pair under the sanitizers: nothing
 * crashes, a seq is returned as acknowledged only if it was sent and only
 * once, and data is delivered exactly once, in seq order. */
static uint64_t fz = 0x243f6a8885a308d3ull;
static uint64_t frand(void)
{
    fz ^= fz << 13;
    fz ^= fz >> 7;
    fz ^= fz << 17;
    return fz;
}

static uint32_t near(uint32_t v)
{
    switch (frand() % 4) {
    case 0:
        return (uint32_t)frand();
    case 1:
        return v + (uint32_t)(frand() % 64) - 32;
    default:
        return v + (uint32_t)(frand() % 8);
    }
}

static void test_fuzz(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p;
    const uint32_t ea = 0xfffffff0u, eb = 0xb0b;
    cfg_base(&c);
    open_pair(&a, &b, &c, &c, ea, eb);
    uint8_t acked[4096] = {0};
    uint32_t sent = 0, expect = ea, seq, peer = eb; /* the life a talks to */
    bool broken = false;
    int resets = 0;
    for (int i = 0; i < 200000 && !broken; i++) {
        T += frand() % (20 * US);
        if (frand() % 4 == 0 && sent < 4096 && uln_rel_tx_assign(&a, T, PKT, &p) == 0) {
            broken |= p.seq != ea + sent;
            sent++;
        }
        while (uln_rel_tx_next_resend(&a, T, &p))
            broken |= p.seq - ea >= sent;
        while (uln_rel_ctrl(&a, T, &p)) {
        }
        /* A packet to a, as if from b: feedback mostly. */
        struct uln_rel_pkt f;
        memset(&f, 0, sizeof(f));
        unsigned e = (unsigned)(frand() % 8);
        f.src_epoch = e < 5 ? peer : e == 5 ? peer + 1 : (uint32_t)frand();
        f.dst_epoch = e < 6 ? ea : (uint32_t)frand();
        if (frand() % 256 == 0) f.dst_epoch = 0; /* a hello: maybe a restart */
        f.flags = (uint16_t)(frand() % 8 ? frand() % 32 : frand() % 64);
        f.seq = near(eb);
        f.fb.ack = near(a.snd_una);
        f.fb.sack = frand() % 2 ? frand() : frand() & 0xff;
        f.fb.sack_off = (uint16_t)(frand() % 3 ? frand() % 8 : frand());
        f.fb.lose = near(a.snd_una);
        f.fb.credit = (uint16_t)(frand() % 3 ? frand() % 32 : frand());
        f.fb.reorder = (uint16_t)(frand() % 3 ? frand() % 8 : frand());
        int v = uln_rel_rx(&a, &f, T);
        broken |= v < ULN_REL_RX_NONE || v > ULN_REL_RX_DEAD;
        if (v == ULN_REL_RX_RESET) {
            /* A hello from a new life: a legal restart. Everything void. */
            resets++;
            peer = f.src_epoch;
            sent = 0;
            memset(acked, 0, sizeof(acked));
            broken |= uln_rel_tx_next_acked(&a, &seq) || uln_rel_tx_in_flight(&a) != 0;
        }
        while (uln_rel_tx_next_acked(&a, &seq)) {
            uint32_t k = seq - ea;
            broken |= k >= sent || acked[k]++;
        }
        /* A data packet to b, as if from a. */
        f.src_epoch = e < 6 ? ea : (uint32_t)frand();
        f.dst_epoch = e < 6 ? eb : (uint32_t)frand();
        f.flags = (uint16_t)(ULN_REL_DATA | (frand() % 2 ? ULN_REL_RETX : 0));
        f.seq = near(b.rcv_cum);
        v = uln_rel_rx(&b, &f, T);
        if (v == ULN_REL_RX_DELIVER) broken |= f.seq != expect++;
        while (uln_rel_rx_next(&b, &seq))
            broken |= seq != expect++;
        uln_rel_rx_release(&b, (uint32_t)(frand() % 3), T);
        while (uln_rel_ctrl(&b, T, &p)) { /* moves b's advertised edge on */
        }
    }
    CHECK(!broken);
    printf("fuzz: %d resets; a refused %llu acks, %llu sacks, %llu LOSEs, %llu credits, "
           "%llu stale, %llu malformed; b took %llu packets\n",
           resets, (unsigned long long)a.stats.bad_ack, (unsigned long long)a.stats.bad_sack,
           (unsigned long long)a.stats.bad_lose, (unsigned long long)a.stats.bad_credit,
           (unsigned long long)a.stats.stale, (unsigned long long)a.stats.malformed,
           (unsigned long long)b.stats.rx_data);
    CHECK(a.stats.bad_ack > 0 && a.stats.bad_sack > 0 && a.stats.bad_lose > 0);
    CHECK(a.stats.stale > 0 && a.stats.malformed > 0 && resets > 0);
    CHECK(b.stats.rx_data > 1000);
    uln_rel_fini(&a);
    uln_rel_fini(&b);
}

/* The congestion window in bytes: assign stops once the bytes in flight
 * reach it, an acknowledgement (selective too) frees its bytes and grows
 * it, and tx_ready lets a message that starts within it go whole. */
static void test_cwnd(void)
{
    struct uln_rel_cfg c;
    struct uln_rel a, b;
    struct uln_rel_pkt p, d[16];
    cfg_base(&c);
    c.mss = PKT;
    c.cwnd_init = 3 * PKT;
    open_pair(&a, &b, &c, &c, 0x100, 0x200);
    CHECK_EQ(uln_rel_cwnd(&a), 3 * PKT);
    for (int i = 0; i < 3; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK_EQ(uln_rel_tx_bytes(&a), 3 * PKT);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* the window, not the slots */
    CHECK_EQ(a.stats.blk_cwnd, 1);
    CHECK(!uln_rel_tx_ready(&a, T, 1));

    /* The second arrives, the first not yet: SACK frees its bytes. */
    T += 100 * US;
    uln_rel_rx(&b, &d[1], T);
    uln_rel_want_fb(&b);
    flush_ctrl(&b, &a);
    CHECK_EQ(uln_rel_tx_bytes(&a), 2 * PKT);
    CHECK_EQ(uln_rel_cwnd(&a), 4 * PKT); /* slow start: + the bytes acknowledged */
    uint32_t seq;
    while (uln_rel_tx_next_acked(&a, &seq))
        ;
    /* 2 KB of 4 in flight: a message of 5 packets may start, and goes whole. */
    CHECK(uln_rel_tx_ready(&a, T, 5));
    for (int i = 3; i < 8; i++)
        CHECK(uln_rel_tx_assign(&a, T, PKT, &d[i]) == 0);
    CHECK_EQ(uln_rel_tx_bytes(&a), 7 * PKT);
    CHECK(uln_rel_tx_assign(&a, T, PKT, &p) == -EAGAIN); /* the grant is spent */
    CHECK(uln_rel_tx_bytes(&a) <= a.cfg.cwnd_max);
    uln_rel_fini(&a);
    uln_rel_fini(&b);

    /* Bounds: cwnd_max below one packet is refused; cwnd_init above it is cut. */
    cfg_base(&c);
    c.mss = PKT;
    c.cwnd_max = PKT - 1;
    CHECK(uln_rel_init(&a, &c, 1, T) == -EINVAL);
    c.cwnd_max = 8 * PKT;
    c.cwnd_init = 100 * PKT;
    CHECK(uln_rel_init(&a, &c, 1, T) == 0);
    CHECK_EQ(uln_rel_cwnd(&a), 8 * PKT);
    uln_rel_fini(&a);
}

int main(void)
{
    test_init_and_handshake();
    test_loss_lose_fast_retransmit();
    test_dropped_unseen();
    test_timeout_backoff();
    test_lost_retransmission_blocked();
    test_timeout_resends_oldest();
    test_tail_probe();
    test_rx_limit();
    test_karn();
    test_delayed_ack();
    test_bundled_ack();
    test_stop_go();
    test_reordering();
    test_window_full();
    test_cwnd();
    test_wrap();
    test_duplicates();
    test_stale_and_restart();
    test_dead();
    test_keepalive();
    test_watch();
    test_forged();
    test_fuzz();
    return summary();
}
