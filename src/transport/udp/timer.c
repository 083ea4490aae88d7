/*
 * timer.c - the UDP transport's timers: resends, feedback, deaths at the
 * end of each progress pass; what uln_cq_wait sleeps on.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "transport/udp/priv.h"

/* Answers (the engine's ACKs, rel's feedback) made while the application is
 * exchanging messages wait in the batch for its next post, to leave in the
 * same system call (ulnet.h, "When packets leave"). "Exchanging" is a post
 * within this long: a ping-pong's round trip between hosts is well inside. */
#define ANSWER_HOLD_NS 200000u
#ifdef ULN_TEST_HOOKS
/* Tests set it (uln_udp_test_answer_hold) to check the rule without racing
 * the clock. */
static uint64_t answer_hold_ns = ANSWER_HOLD_NS;
void uln_udp_test_answer_hold(uint64_t ns)
{
    answer_hold_ns = ns ? ns : ANSWER_HOLD_NS;
}
#else
#define answer_hold_ns ANSWER_HOLD_NS
#endif

/* End of a progress pass: may the batch stay for the next post or pass? Only
 * answers, only while the application posts, and only for one pass. */
static bool hold_answers(const struct uln_udp_ep *ue)
{
    return ue->nbatch && !ue->batch_data && !ue->answers_held &&
           ue->now - ue->posted_at < answer_hold_ns;
}

/* ---- timers, resends, feedback ---------------------------------------------------- */

/* A pass that found nothing (no datagram, nothing to send, no post or new
 * peer since the timers last ran: now is what they ran with) ending less
 * than ULN_TSC_FRESH ns (10 us) after the timers' last clock read: they
 * would find what they found then, so they are left for a later pass. A
 * spinning poll makes such passes back to back (0.3-0.6 us each, an empty
 * recvfrom mostly); this spares most of them the clock read (~25 ns in a VM)
 * and the walk over the peers, and delays a timer by 10 us at most, inside
 * its resolution (ack_delay 50 us, rto at least 200 us). */
static bool idle_pass(struct uln_udp_ep *ue)
{
#ifdef ULN_HAVE_TSC
    if (ue->nbatch || ue->now != ue->timers_now || ue->n_live != ue->timers_live) return false;
    return uln_tsc() - ue->timers_tsc < ULN_TSC_FRESH;
#else
    (void)ue;
    return false;
#endif
}

/* Solo (ep.c, uln_udp_solo_open): how long nothing must come before the
 * socket hears every source again. A stranger's resend gets in at most
 * this and its own backoff later; a peer that pauses longer pays a
 * connect() (~2 us) when it speaks again. */
#define ULN_UDP_SOLO_QUIET_NS 1000000u

void uln_udp_progress_tx(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    bool fresh = ue->now_read;
    ue->in_pass = ue->now_read = false; /* posts after the pass read the clock again */
    if (!ue->n_live && !ue->nbatch) {
        /* No peer met: no timer, nothing to send, only a first packet to
         * look out for (rx_quiet_skip), which a pass in ULN_QUIET_PASSES
         * does as well as every one. */
        uln_tp_quiet(ep, &uln_tp_udp);
        return;
    }
    if (!fresh) {
        if (idle_pass(ue)) return;
        ue->now = uln_now_ns();
        ue->timers_tsc = uln_tsc();
    }
    ue->timers_now = ue->now;
    ue->timers_live = ue->n_live;
    if (ULN_UNLIKELY(ue->solo) && !ue->solo_open && ue->now - ue->rx_any > ULN_UDP_SOLO_QUIET_NS)
        uln_udp_solo_open(ep); /* nothing comes: hear every source (ep.c) */
    bool reshare = false;
    for (int i = 0; i < ue->n_live; i++) {
        struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        reshare |= uln_udp_sender_quiet(ue, up);
        if (up->dead) continue;
        drain_acked(up);
        /* Nothing due (rel.h's contract: call in by the deadline): tick,
         * resend and ctrl would each find that again. A NAP's arrival owes
         * an ACK only after ack_delay, so the reply's path skips them. Not a
         * peer rel found dead in another call (a post's tx_ready, a read):
         * its deadline is "never", and the tick below is what gives it up. */
        if (uln_rel_state(&up->rel) != ULN_REL_DEAD && ue->now < uln_rel_next_deadline(&up->rel))
            continue;
        if (uln_rel_tick(&up->rel, ue->now) == ULN_REL_DEAD) {
            uln_udp_go_dead(ep, up);
            continue;
        }
        struct uln_rel_pkt p;
        while (uln_rel_tx_next_resend(&up->rel, ue->now, &p)) {
            struct tx_slot *t = &up->tx[p.seq & up->mask];
            if (!t->used) continue;
            uln_udp_send_data(ep, up, t, &p);
            ULN_COUNT(&ep->stats, retransmits, 1);
        }
        if (uln_rel_ctrl(&up->rel, ue->now, &p)) uln_udp_send_ctrl(ep, up, &p);
    }
    if (reshare) uln_udp_pool_reshare(ep); /* its window updates go at the next pass */
    if (hold_answers(ue))
        ue->answers_held = true; /* the next post, or the next pass, sends them */
    else
        uln_udp_flush(ep);
}

bool uln_udp_busy(const struct uln_ep *ep)
{
    const struct uln_udp_ep *ue = udp_ep(ep);
    for (int i = 0; ue && i < ue->n_live; i++) {
        const struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (!up->dead && (uln_rel_tx_in_flight(&up->rel) || up->pend_n)) return true;
    }
    return ue && ue->nbatch;
}

/* What uln_cq_wait sleeps on for this endpoint: its link's sockets, and at
 * most until the earliest timer of its peers. */
int uln_udp_poll_setup(struct uln_ep *ep, int *fds, int max, int *timeout_ms)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    int n = uln_link_fds(ue->io, fds, max);
    if (ue->solo && !ue->solo_open) uln_udp_solo_open(ep); /* a sleeper hears every source */
    ue->rx_quiet_next = 0;        /* after the sleep, read what woke us (rx_quiet_skip) */
    uln_tp_busy(ep, &uln_tp_udp); /* ... in the first pass */
    uint64_t now = uln_now_ns(), next = UINT64_MAX;
    for (int i = 0; i < ue->n_live; i++) {
        const struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
        if (up->dead) continue;
        uint64_t d = uln_rel_next_deadline(&up->rel);
        if (d < next) next = d;
        if (up->pend_n) next = now + 1000000; /* waiting for ring room: look again soon */
    }
    if (ue->nbatch) next = now; /* held packets go at the next pass */
    if (next != UINT64_MAX) {
        uint64_t ms = next <= now ? 0 : (next - now + 999999) / 1000000;
        if (ms < (uint64_t)*timeout_ms) *timeout_ms = (int)ms;
    }
    return n;
}
