/*
 * rel.h - ulnet's reliability layer: the lightweight protocol (after
 * HPCL/Ethernet) that turns a lossy packet link such as UDP into a reliable,
 * in-order one. See docs/protocol.md for the protocol itself.
 *
 * This is a pure state machine: no sockets, no clock reads, no callbacks, no
 * allocation after uln_rel_init, one thread. One struct uln_rel per peer
 * carries both directions. Time comes in as `now` (nanoseconds, any origin,
 * never going backwards; an earlier value is treated as the latest one seen).
 * The caller asks what to do and does it:
 *
 *   sending    uln_rel_tx_assign       -> a new seq and its header: send it
 *              uln_rel_tx_next_resend  -> a seq to send again and its header
 *              uln_rel_tx_next_acked   -> a seq the peer has: free its slot
 *   receiving  uln_rel_rx              -> what to do with an arrived packet
 *              uln_rel_rx_next         -> a held packet whose turn has come
 *              uln_rel_rx_release      -> receive buffers given back
 *              uln_rel_rx_limit        -> this peer's share of shared buffers
 *              uln_rel_rx_dropped      -> a packet dropped for want of a buffer
 *   control    uln_rel_ctrl            -> a packet without data to send now
 *                                         (hello, ACK/LOSE/STOP/GO, probe)
 *   time       uln_rel_next_deadline   -> when to call in again at the latest
 *
 * The caller keeps the bytes of data packet `seq` in its own slot
 * seq & (window - 1) from uln_rel_tx_assign until uln_rel_tx_next_acked
 * returns seq; uln_rel_tx_assign never hands out a slot whose previous
 * packet has not been returned that way. Out-of-order arrivals (ULN_REL_RX_HOLD)
 * are kept in a receive slot seq & (window - 1) until uln_rel_rx_next returns
 * their seq - or placed at once when their order does not matter (PUT
 * fragments) - so that order-sensitive messages (NAPs) are delivered exactly
 * once and in sequence order.
 *
 * Packets are described by struct uln_rel_pkt; the transport maps it onto its
 * wire header. Feedback (struct uln_rel_fb) is separable: it rides alone in a
 * control packet or piggybacked on a data packet.
 *
 * After ULN_REL_RX_RESET (the peer restarted) or once the state is
 * ULN_REL_DEAD, every data packet not yet returned by uln_rel_tx_next_acked is
 * void (fail its operation with -ECONNRESET and clear its slot) and every held
 * received packet is void (drop it). Receive buffers are still given back with
 * uln_rel_rx_release as usual: their accounting survives resets.
 */
#ifndef ULN_REL_H
#define ULN_REL_H

#include <stdbool.h>
#include <stdint.h>

#define ULN_REL_WINDOW_MAX 32768u /* offsets in feedback are 16-bit */
#define ULN_REL_SACK_BITS  64u
#define ULN_REL_NEVER      UINT64_MAX /* "no deadline" */

struct uln_rel_cfg {
    uint32_t window;    /* packets in flight per direction: power of two, 4..32768 */
    uint32_t rx_bufs;   /* packets this side holds for the peer (out of order, or
                           delivered and not yet released); <= window; 0: window */
    uint32_t ack_every; /* an ACK goes at the latest after this many datagrams of new
                           packets, or a quarter window of packets */
    uint32_t reorder;   /* packets seen beyond a hole before it counts as lost, at
                           first: it grows to the reordering the path shows */
    uint64_t rto_init;  /* retransmission timeout before the first RTT sample, ns */
    uint64_t rto_min;   /* bounds of the timeout, backoff included, ns */
    uint64_t rto_max;
    uint64_t ack_delay;  /* longest an ACK is held back, ns */
    uint64_t dead_after; /* silence while waiting on the peer that makes it dead, ns */
    uint64_t keepalive;  /* idle silence after which a probe goes, ns; 0: never */
    /* The congestion window, in bytes (the caller says each packet's size).
     * It starts at cwnd_init, grows as data is acknowledged and is cut when a
     * round trip loses more than random loss would (see docs/protocol.md),
     * never below the bandwidth-delay product the path has shown, never
     * above cwnd_max: the bytes the caller keeps for the peer. */
    uint32_t mss;       /* bytes of a full packet: growth step and smallest window */
    uint64_t cwnd_max;  /* 0: window * mss */
    uint64_t cwnd_init; /* 0: min(cwnd_max, 64 * mss) */
};

/* window 256, rx_bufs = window, ack_every 8, reorder 3, rto 1 ms (0.2 ms..1 s),
 * ack_delay 50 us, dead_after 10 s, keepalive off, mss 1200, cwnd_max and
 * cwnd_init from them. */
void uln_rel_cfg_default(struct uln_rel_cfg *cfg);

/* Packet flags: the part of a packet header this layer owns. */
#define ULN_REL_DATA  0x1u  /* seq is valid: a data packet */
#define ULN_REL_FB    0x2u  /* fb is valid: feedback attached */
#define ULN_REL_LOSE  0x4u  /* with FB: fb.lose names a packet the receiver lost */
#define ULN_REL_PROBE 0x8u  /* answer with feedback at once */
#define ULN_REL_RETX  0x10u /* with DATA: this is a retransmission */
#define ULN_REL_FLAGS 0x1fu
/* Not on the wire: with DATA, the packet came in the same datagram as the one
 * before it (a bundle), so it owes no ACK of its own: feedback is paced by
 * datagrams, as the link's cost is (ack_every). */
#define ULN_REL_SAME_DGRAM 0x20u

/* Feedback from the receiving side of a peer to its sending side. */
struct uln_rel_fb {
    uint32_t ack;      /* cumulative: every seq before ack has arrived */
    uint32_t lose;     /* with ULN_REL_LOSE: this seq is lost, send it again */
    uint64_t sack;     /* bit i: seq ack + 1 + sack_off + i has arrived */
    uint16_t sack_off; /* where the sack bitmap starts, after ack + 1 */
    uint16_t credit;   /* the receiver takes seqs before ack + credit; 0 = STOP */
    uint16_t reorder;  /* how far the receiver saw the path reorder, in seqs */
    uint32_t dup;      /* 1 + a seq that arrived again, by a resend, after it had
                          arrived (a D-SACK, RFC 2883); 0: none. Control packets
                          only (uln_rel_ctrl): a hint, lost with them */
};

/* What one packet carries for this layer. dst_epoch 0 makes it a hello: the
 * sender does not know the receiver's life yet; a hello carries no data and
 * no feedback. */
struct uln_rel_pkt {
    uint32_t src_epoch; /* the sender's life */
    uint32_t dst_epoch; /* the receiver's life as the sender knows it; 0: hello */
    uint32_t seq;       /* with ULN_REL_DATA */
    uint16_t flags;     /* ULN_REL_* */
    struct uln_rel_fb fb;
};

enum uln_rel_state {
    ULN_REL_CONNECTING = 1, /* sending hellos, no data yet */
    ULN_REL_OPEN,
    ULN_REL_DEAD, /* the peer stayed silent for dead_after while awaited */
};

/* What to do with an arrived packet (its data part, when it has one). */
enum uln_rel_verdict {
    ULN_REL_RX_NONE = 0,      /* no data in it (feedback, hello, probe): done */
    ULN_REL_RX_DELIVER,       /* new data, next in order: deliver it now, then
                                 drain uln_rel_rx_next */
    ULN_REL_RX_HOLD,          /* new data ahead of order: keep it in slot
                                 seq & (window-1) (or place it now if order does
                                 not matter); uln_rel_rx_next returns its seq */
    ULN_REL_RX_DUP,           /* data that already arrived: drop it */
    ULN_REL_RX_OUT_OF_WINDOW, /* data outside the receive window: drop it */
    ULN_REL_RX_STALE,         /* from or for an earlier life of a side: drop it;
                                 nothing changed */
    ULN_REL_RX_RESET,         /* the peer restarted: void everything (see top);
                                 the connection goes on with its new life */
    ULN_REL_RX_INVALID,       /* malformed: drop it; nothing changed */
    ULN_REL_RX_DEAD,          /* the connection is dead: drop it */
};

/* Everything refused or repaired is counted. */
struct uln_rel_stats {
    /* sending side */
    uint64_t tx_data;      /* first transmissions */
    uint64_t tx_resend;    /* retransmissions (tx_fast + tx_pto + tx_tlp + tx_timeout) */
    uint64_t tx_fast;      /* ... after LOSE or a SACK gap */
    uint64_t tx_pto;       /* ... of a retransmission left unanswered (probe timer) */
    uint64_t tx_tlp;       /* ... of the newest packet after a silence (tail probe) */
    uint64_t tx_timeout;   /* ... after the retransmission timer */
    uint64_t tx_ctrl;      /* control packets (hellos, feedback, probes) */
    uint64_t tx_hello;     /* ... of which hellos */
    uint64_t tx_probe;     /* ... of which probes */
    uint64_t watched;      /* questions asked for by uln_rel_watch (a probe follows) */
    uint64_t fb_piggy;     /* feedback piggybacked on data packets */
    uint64_t fb_rcvd;      /* feedback accepted */
    uint64_t fb_old;       /* feedback older than the window, ignored */
    uint64_t lose_rcvd;    /* LOSE reports that marked a packet lost */
    uint64_t rto_fired;    /* timer expiries that found a packet to resend */
    uint64_t pto_fired;    /* retransmissions the probe timer found lost */
    uint64_t spurious;     /* timer resends the receiver had already (fb.dup): each
                              raised the timers' floor to the delay it showed */
    uint64_t rtt_samples;  /* Karn: only from packets sent once */
    uint64_t cwnd_cuts;    /* rounds whose loss said congestion: the window cut */
    uint64_t rounds_lossy; /* rounds with a loss that did not say congestion */
    uint64_t blk_cwnd;     /* uln_rel_tx_assign refused: the congestion window */
    uint64_t blk_window;   /* ... the window of slots (or slots not yet drained) */
    uint64_t blk_credit;   /* ... the receiver's credit */
    /* receiving side */
    uint64_t rx_data;    /* new data packets taken */
    uint64_t rx_dup;     /* duplicates dropped */
    uint64_t rx_oow;     /* outside the window or the credit, dropped */
    uint64_t rx_nobuf;   /* no receive buffer (a sender ignoring STOP), dropped */
    uint64_t lose_sent;  /* LOSE reports sent */
    uint64_t rx_dropped; /* data the caller dropped for want of a buffer (uln_rel_rx_dropped) */
    uint64_t stop_sent;  /* feedback advertising no credit (STOP) */
    uint64_t dup_sent;   /* resends reported as duplicates (fb.dup) */
    /* untrusted input */
    uint64_t stale;       /* packets from or for an earlier life */
    uint64_t malformed;   /* impossible flag combinations */
    uint64_t bad_ack;     /* cumulative ack beyond what was sent */
    uint64_t bad_sack;    /* sack bits beyond what was sent */
    uint64_t bad_lose;    /* LOSE outside what is in flight */
    uint64_t bad_credit;  /* credit or reorder beyond any window */
    uint64_t bad_dup;     /* fb.dup beyond what was sent (ignored, the rest taken) */
    uint64_t bad_release; /* more receive buffers released than taken */
    uint64_t dead_drops;  /* packets that arrived after DEAD */
    /* connection */
    uint64_t resets; /* peer restarts */
    uint64_t deaths;
};

struct uln_rel_slot; /* private */

/* Embed it anywhere; the fields are private: use the functions. */
struct uln_rel {
    struct uln_rel_cfg cfg;
    int state;
    uint32_t mask; /* window - 1 */
    uint32_t local_epoch, peer_epoch;
    uint32_t tomb[4]; /* peer lives replaced or dead: their packets are stale */
    uint32_t tomb_next;
    uint64_t now; /* latest time seen */

    /* sending side: seqs [snd_una, snd_nxt) are in flight */
    uint32_t snd_una, snd_nxt;
    uint32_t snd_edge; /* the receiver takes seqs before this (its credit) */
    uint32_t lost_count, lost_hint;
    uint64_t xmit_count; /* every (re)transmission gets the next number */
    uint64_t rack_xmit;  /* newest transmission known to have arrived */
    uint64_t rack_amb;   /* ... or maybe: a resent packet's (detect_losses) */
    uint32_t reorder_tx; /* loss threshold in transmissions, adapted */
    struct uln_rel_slot *slots;
    uint32_t *acked; /* seqs acknowledged, not yet returned to the caller */
    uint32_t acked_head, acked_tail;
    bool tx_blocked; /* the caller wanted to send and the credit said no */
    bool have_rtt;
    uint32_t backoff;
    uint64_t srtt, rttvar, min_rtt, rto, rto_at;
    uint64_t late, late_at; /* the timers' floor from spurious resends (on_dup), since */
    /* congestion window, bytes (docs/protocol.md, "Congestion") */
    uint64_t cwnd, ssthresh, in_flight; /* in_flight: sent, not acknowledged */
    uint64_t delivered;                 /* bytes acknowledged, ever */
    uint64_t bw[2], bw_at;              /* delivery rate, bytes/s: max of two periods */
    uint32_t round_end;                 /* a round ends when this seq is acknowledged */
    uint32_t round_sent, round_lost;    /* packets of this round */
    uint32_t cwnd_grant;                /* packets uln_rel_tx_ready promised */
    uint64_t pto_at;                    /* a retransmission's answer is overdue (probe timer) */
    uint64_t tlp_at;                    /* silence after the flight's tail: probe it (on_tlp) */
    uint64_t ctrl_at;                   /* next hello (CONNECTING) or probe (OPEN) */
    uint32_t ctrl_backoff;
    bool probe_out;
    uint64_t wait_start, last_heard; /* for the dead-peer rule */

    /* receiving side: all seqs before rcv_cum arrived; [rcv_dlv, rcv_cum) are
     * held, in order, not yet returned by uln_rel_rx_next */
    uint32_t rcv_cum, rcv_dlv;
    uint32_t rcv_high; /* one past the highest seq that arrived */
    uint32_t rcv_last; /* the seq that arrived last */
    uint32_t adv_edge; /* highest right edge ever advertised */
    uint32_t rx_used;  /* receive buffers the peer's packets hold */
    uint32_t rx_limit; /* ... at most, for new credit (uln_rel_rx_limit) */
    uint32_t go_thresh;
    uint32_t reorder_rx; /* LOSE threshold in seqs, adapted */
    uint64_t *rcv_bits;  /* arrived, for seqs >= rcv_cum */
    uint32_t ack_owed;   /* datagrams with new data since the last feedback */
    uint32_t pkts_owed;  /* ... and their packets */
    uint64_t ack_due_at;
    uint32_t dup_pending; /* fb.dup for the next control packet */
    bool fb_now, lose_pending, stop_adv;
    uint32_t lose_seq;
    uint32_t drop_hi; /* one past the highest seq dropped unseen (uln_rel_rx_dropped) */

    struct uln_rel_stats stats;
};

/* Allocates the per-slot state once. local_epoch: this side's life, random and
 * nonzero; it is also the first sequence number this side sends. Returns 0,
 * -EINVAL or -ENOMEM. */
int uln_rel_init(struct uln_rel *r, const struct uln_rel_cfg *cfg, uint32_t local_epoch,
                 uint64_t now);
void uln_rel_fini(struct uln_rel *r);

/* Run the timers (retransmission, dead peer); returns enum uln_rel_state.
 * Every function taking `now` does this too. */
int uln_rel_tick(struct uln_rel *r, uint64_t now);
int uln_rel_state(const struct uln_rel *r);

/* The layer above awaits an answer from the peer (a GET's data, the ACK of a
 * PUT's placement, an atomic's result) though nothing of ours is
 * unacknowledged: the peer took our request and owes the answer. Silence
 * then means nothing to rel by itself, so a peer that died right after
 * acknowledging would never be found dead. This asks it, after one timeout,
 * whether it lives (a probe, repeated with backoff): its silence from then on
 * makes it dead after dead_after like any other wait. A peer heard meanwhile
 * cancels the question; call again while the answer is still owed. */
void uln_rel_watch(struct uln_rel *r);

/* The latest time the caller must call in (tick, ctrl, next_resend) even if no
 * packet arrives; <= now: there is work now; ULN_REL_NEVER: none. */
uint64_t uln_rel_next_deadline(const struct uln_rel *r);

/* ------------------------------------------------------------------------- */
/* Sending side                                                               */
/* ------------------------------------------------------------------------- */

/* Take the next sequence number for a new data packet of `bytes` bytes (what
 * the congestion window counts) and fill its header (feedback may be
 * piggybacked). The caller must send it now; a packet it fails to send counts
 * as lost and is recovered like one.
 * Returns 0, -EAGAIN (window full, congestion window full, no credit - STOP -,
 * a slot not yet returned by uln_rel_tx_next_acked, or still connecting) or
 * -ECONNRESET (dead). */
int uln_rel_tx_assign(struct uln_rel *r, uint64_t now, uint32_t bytes, struct uln_rel_pkt *p);

/* A packet to send again now (lost: LOSE, SACK gap, or timeout), lowest seq
 * first; fills its header. Call until it returns false. */
bool uln_rel_tx_next_resend(struct uln_rel *r, uint64_t now, struct uln_rel_pkt *p);

/* A seq the peer has acknowledged (cumulatively or selectively), each exactly
 * once: its slot may be freed. Call until it returns false. */
bool uln_rel_tx_next_acked(struct uln_rel *r, uint32_t *seq);

/* Whether the next n uln_rel_tx_assign calls would all succeed now: for a
 * message that must go as n packets or not at all. The congestion window
 * lets a message start while it has room, and go whole. A "no" for want of
 * credit arms the persist probe, as a refused uln_rel_tx_assign does. */
bool uln_rel_tx_ready(struct uln_rel *r, uint64_t now, uint32_t n);

/* Ask for feedback to go at the next uln_rel_ctrl, due or not: before the
 * caller goes quiet (closing), so the peer need not wait for a delayed ACK. */
void uln_rel_want_fb(struct uln_rel *r);

/* Packets sent and not yet acknowledged cumulatively. */
uint32_t uln_rel_tx_in_flight(const struct uln_rel *r);

/* The congestion window and the bytes in flight (not yet acknowledged,
 * cumulatively or selectively), in bytes. */
uint64_t uln_rel_cwnd(const struct uln_rel *r);
uint64_t uln_rel_tx_bytes(const struct uln_rel *r);

/* The seq the next uln_rel_tx_assign hands out: the caller writes that
 * packet's bytes into its slot seq & (window - 1) before asking for it. */
uint32_t uln_rel_tx_next_seq(const struct uln_rel *r);

/* ------------------------------------------------------------------------- */
/* Control                                                                    */
/* ------------------------------------------------------------------------- */

/* If a packet without data must go now (hello, ACK/LOSE/STOP/GO feedback,
 * probe), fill it and return true. */
bool uln_rel_ctrl(struct uln_rel *r, uint64_t now, struct uln_rel_pkt *p);

/* ------------------------------------------------------------------------- */
/* Receiving side                                                             */
/* ------------------------------------------------------------------------- */

/* An arrived packet (already checked for integrity by the transport). Its
 * feedback, if any, is taken in; the verdict is about its data. A new data
 * packet (DELIVER or HOLD) takes one receive buffer. */
int uln_rel_rx(struct uln_rel *r, const struct uln_rel_pkt *p, uint64_t now);

/* The next held packet whose turn has come, in order. Call after every
 * uln_rel_rx until it returns false. */
bool uln_rel_rx_next(struct uln_rel *r, uint32_t *seq);

/* n receive buffers are free again (a packet was consumed or dropped). */
void uln_rel_rx_release(struct uln_rel *r, uint32_t n, uint64_t now);

/* The caller's receive buffers are shared by several peers: from now on give
 * this one credit for at most `bufs` held at once (1..rx_bufs; rx_bufs at
 * init). Credit already given is never taken back (the edge does not move
 * back), so a cut takes effect as the peer's held buffers come back; a raise
 * that opens a quarter of the share sends a window update at once. */
void uln_rel_rx_limit(struct uln_rel *r, uint32_t bufs, uint64_t now);

/* The caller dropped data packet seq of this connection (its tag checked)
 * before uln_rel_rx saw it, for want of a buffer to hold it ahead of order:
 * to the sender it is lost, and it will be sent again. But a sender that
 * streamed into such drops has every packet after the first one dropped
 * unanswered and, its credit spent on them, sends nothing new whose arrival
 * would show them lost: it would resend them one per timeout, each timeout
 * backed off (a second apiece). So while a seq dropped this way lies past
 * the cumulative point, every feedback names that point in a LOSE: each
 * resend that fills it brings the next one's at once. */
void uln_rel_rx_dropped(struct uln_rel *r, uint32_t seq);

#endif
