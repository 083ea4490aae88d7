/*
 * incast_drop.c - many udp senders into one receiver under loss: the
 * receive pool's backstop (pkts_dropped) is exercised, and every message
 * still arrives exactly once, in order.
 *
 *   ULN_TRANSPORT=udp ULN_FAULT=drop=0.05,seed=S ulnrun -n N incast_drop [msgs]
 *
 * Ranks 1..N-1 stream msgs NAPs of 64 B each into rank 0. The receiver
 * shares half its receive pool as credit among the peers that sent to it in
 * the last second (src/transport/udp/recv.c, pool_share; docs/protocol.md, "Incast"), so honest
 * senders who stream together cannot fill it. What they can do is come back
 * together after a quiet second: a quiet peer's share is given back, the
 * last ones to go quiet are offered the whole half each, and credit given is
 * never taken back (rel's edge does not move back). Then a packet lost ahead
 * of a sender's stream makes everything behind it wait in the pool, and
 * once half the pool waits, packets ahead of order are dropped (counted in
 * pkts_dropped) and resent: the counted backstop the design keeps. No
 * honest sender exceeds the credit it was given (that would be counted as
 * malformed, which stays 0 here). What was dropped is the tail of each
 * sender's burst, which nothing later shows lost: rel is told of each drop
 * (uln_rel_rx_dropped) and names the hole in a LOSE until they are all back.
 * Before that, each came back by its own timeout, a second apiece, and this
 * test ran for many minutes; the deadline (60 s a cycle) catches that.
 *
 * So: each sender meets rank 0, then stays quiet, driving its endpoint,
 * until its credit towards rank 0 (a test hook: uln_udp_conn_get) is more
 * than twice its fair share of half the pool; then it says so. Rank 0 says
 * "go" to all and stops reading for a moment while they send what their
 * credit allows; losses (ULN_FAULT, at the senders) leave holes, the
 * packets behind them wait, and the pool's half fills. If a run leaves
 * pkts_dropped at 0 (the senders did not get to send while rank 0 slept,
 * on a loaded machine), the whole cycle is run again, up to CYCLES times.
 * Every cycle's every message is checked: sender, index in order, bytes.
 */
#include "../integration/common.h"

#include "core/internal.h"
#include "rel/rel.h"

#define MSG    64
#define CYCLES 4
#define OP_HI  1 /* the sender met rank 0 */
#define OP_GO  2 /* rank 0: send */

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

struct msg {
    uint32_t sender, cycle, index, pad_;
    uint8_t bytes[MSG - 16];
};

static void msg_fill(struct msg *m, int sender, int cycle, uint32_t index)
{
    m->sender = (uint32_t)sender;
    m->cycle = (uint32_t)cycle;
    m->index = index;
    m->pad_ = 0;
    pat_fill(m->bytes, sizeof m->bytes, pat_seed(sender, cycle, index), 0);
}

/* Half the receive pool: what the drop rule lets wait (udp/ep.c: max(512, 2 x
 * the window) buffers). */
static uint32_t pool_half(void)
{
    uint32_t w = J.info.udp_window;
    return (2 * w < 512 ? 512 : 2 * w) / 2;
}

/* Post a NAP, taking completions while the send queue is full; returns the
 * completions taken. */
static int post_nap(int peer, const void *buf, uint32_t len, uint64_t user, uint32_t flags,
                    double deadline)
{
    int done = 0, rc;
    while ((rc = uln_nap(ep, peer, buf, len, user, ULN_INLINE | flags)) == -EAGAIN) {
        struct uln_cqe e[64];
        int n = uln_cq_poll(cq, e, 64);
        CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
        for (int i = 0; i < n; i++) {
            CHECK_CQE(&e[i], e[i].op == ULN_OP_NAP && e[i].status == 0);
            done++;
        }
        if (t_now() >= deadline) {
            struct uln_udp_conn c;
            uln_udp_conn_get(ep, peer, &c);
            struct uln_counters k;
            uln_counters_get(J.ctx, &k);
            CHECKF(t_now() < deadline,
                   "posting to rank %d: the send queue stays full (state %d, snd_una %u, in "
                   "flight %u, credit %u; pkts_sent %" PRIu64 ", retransmits %" PRIu64
                   ", pkts_received %" PRIu64 ")",
                   peer, c.state, c.snd_una, c.snd_nxt - c.snd_una, c.snd_edge - c.snd_nxt,
                   k.pkts_sent, k.retransmits, k.pkts_received);
        }
        if (n == 0) uln_cq_wait(cq, 10);
    }
    CHECKF(rc == 0, "uln_nap to rank %d: %s", peer, t_errname(rc));
    return done;
}

static struct uln_cqe take(const char *what)
{
    return t_cq_take1(cq, 60000, what);
}

/* What a sender's small NAPs to rank 0 say. */
enum { SAY_HELLO = 1, SAY_POKE, SAY_READY };

static void sender(int cycle, int msgs)
{
    uint32_t half = pool_half(), senders = (uint32_t)J.size - 1;
    /* Twice the fair share, within the window; all of them so must add up to
     * more than half the pool. */
    uint32_t want = 2 * half / senders + 1, w = J.info.udp_window;
    if (want > w * 3 / 4) want = w * 3 / 4;
    CHECKF(want * senders > half,
           "%u senders with a window of %u cannot overfill half a pool of %u", senders, w, half);
    double deadline = t_now() + 90;
    uint32_t say = SAY_HELLO;
    int posted = 1, done = post_nap(0, &say, sizeof say, OP_HI, 0, deadline);
    double spoke = t_now();
    /* Quiet, our endpoint driven, until rank 0 has offered us more than our
     * share. Its offer is feedback of its own, sent once: if that is lost
     * (ULN_FAULT drops rank 0's packets too), nothing repeats it until we
     * send - a sender that wants to send probes, and learns it then. So
     * when rank 0 must have had a quiet second since we last spoke and
     * still no offer came, a poke: its answer carries the credit offered
     * (rel's edge never moves back), and rank 0 ignores the poke. */
    struct uln_udp_conn c;
    for (;;) {
        CHECK_OK(uln_udp_conn_get(ep, 0, &c));
        if (c.state == ULN_REL_OPEN && c.snd_edge - c.snd_nxt >= want) break;
        CHECKF(t_now() < deadline, "cycle %d: credit towards rank 0 stays %u, below %u", cycle,
               c.snd_edge - c.snd_nxt, want);
        if (t_now() - spoke > 1.5) {
            static uint32_t poke = SAY_POKE;
            done += post_nap(0, &poke, sizeof poke, OP_HI, 0, deadline);
            posted++;
            spoke = t_now();
        }
        struct uln_cqe e;
        int n = uln_cq_poll(cq, &e, 1);
        CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
        if (n) {
            CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
            done++;
        } else {
            uln_cq_wait(cq, 20);
        }
    }
    uint32_t credit = c.snd_edge - c.snd_nxt;
    static uint32_t ready = SAY_READY;
    done += post_nap(0, &ready, sizeof ready, OP_HI, 0, deadline);
    posted++;
    for (;;) {
        struct uln_cqe e = take("rank 0's go");
        if (e.op == ULN_OP_NAP) {
            CHECK_CQE(&e, e.status == 0);
            done++;
            continue;
        }
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.peer == 0 && e.len == 4);
        t_release(cq, &e);
        break;
    }
    static struct msg m;
    for (int i = 0; i < msgs; i++) {
        msg_fill(&m, J.rank, cycle, (uint32_t)i);
        done += post_nap(0, &m, sizeof m, 3, 0, deadline);
    }
    posted += msgs;
    while (done < posted) {
        struct uln_cqe e = take("our NAPs' completions");
        CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
        done++;
    }
    if (cycle == 0 || J.rank == 1)
        printf("rank%d: cycle %d: credit %u (wanted %u of half a pool of %u) when it said ready\n",
               J.rank, cycle, credit, want, half);
}

/* Rank 0: returns pkts_dropped after the cycle. */
static uint64_t receiver(int cycle, int msgs)
{
    int senders = J.size - 1, ready = 0, met = 0;
    while (ready < senders) {
        struct uln_cqe e = take("the senders' hellos");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.peer > 0 && e.len == 4);
        uint32_t v;
        memcpy(&v, e.data, 4);
        t_release(cq, &e);
        CHECK_CQE(&e, v == SAY_HELLO || v == SAY_POKE || v == SAY_READY);
        met += v == SAY_HELLO;
        ready += v == SAY_READY;
    }
    CHECK(met == senders);
    static uint32_t go = 1; /* silent: rank 0's queue holds only what comes in */
    double deadline = t_now() + 60;
    for (int p = 1; p < J.size; p++)
        post_nap(p, &go, sizeof go, OP_GO, ULN_SILENT, deadline);
    uln_cq_poll(cq, NULL, 0); /* the gos leave now, whatever waits */
    /* Not reading: what the senders' credit allows piles up in the socket. */
    t_sleep_ms(100);
    double t0 = t_now();
    uint32_t *next = calloc((size_t)J.size, sizeof *next);
    CHECK(next);
    long left = (long)senders * msgs;
    while (left > 0) {
        struct uln_cqe e[64];
        int n = uln_cq_poll(cq, e, 64);
        CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
        if (n == 0) {
            if (t_now() >= deadline) {
                for (int p = 1; p < J.size; p++) {
                    struct uln_udp_conn k;
                    uln_udp_conn_get(ep, p, &k);
                    fprintf(stderr, "rank0: from rank %d: %u of %d; state %d rcv_next %u\n", p,
                            next[p], msgs, k.state, k.rcv_next);
                }
                struct uln_counters c;
                uln_counters_get(J.ctx, &c);
                fprintf(stderr, "rank0: pkts_dropped %" PRIu64 ", pkts_received %" PRIu64 "\n",
                        c.pkts_dropped, c.pkts_received);
            }
            CHECKF(t_now() < deadline, "cycle %d: %ld messages still to come", cycle, left);
            uln_cq_wait(cq, 100);
            continue;
        }
        for (int i = 0; i < n; i++) {
            struct uln_cqe *x = &e[i];
            CHECK_CQE(x, x->op == ULN_OP_NAP_RECV && x->len == MSG);
            CHECK_CQE(x, x->peer > 0 && x->peer < J.size);
            struct msg m;
            memcpy(&m, x->data, sizeof m);
            t_release(cq, x);
            uint32_t want = next[x->peer];
            CHECKF(m.sender == (uint32_t)x->peer && m.cycle == (uint32_t)cycle && m.index == want &&
                       want < (uint32_t)msgs,
                   "cycle %d: from rank %d came sender %u's message %u of cycle %u, expected "
                   "message %u: lost, duplicated or out of order",
                   cycle, x->peer, m.sender, m.index, m.cycle, want);
            CHECK_PAT(m.bytes, sizeof m.bytes, pat_seed(x->peer, cycle, want), 0,
                      "cycle %d: message %u from rank %d", cycle, want, x->peer);
            next[x->peer]++;
            left--;
        }
    }
    free(next);
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    printf("rank0: cycle %d: %d x %d NAPs in order, exactly once, in %.2f s; pkts_dropped %" PRIu64
           ", pkts_received %" PRIu64 ", duplicates %" PRIu64 ", malformed %" PRIu64 "\n",
           cycle, senders, msgs, t_now() - t0, c.pkts_dropped, c.pkts_received, c.duplicates,
           c.malformed);
    CHECKF(c.malformed == 0, "%" PRIu64 " packets malformed: a sender beyond its credit?",
           c.malformed);
    return c.pkts_dropped;
}

int main(int argc, char **argv)
{
    int msgs = argc > 1 ? atoi(argv[1]) : 2000;
    t_open(&J, 0);
    CHECKF(J.size >= 3 && J.info.udp_peers == J.size - 1,
           "this test wants 3 or more ranks, all over udp (ULN_TRANSPORT=udp)");
    CHECK_OK(uln_cq_open(J.ctx, 4096, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    uint64_t dropped = 0;
    int cycle = 0;
    for (; cycle < CYCLES; cycle++) {
        if (J.rank == 0)
            dropped = receiver(cycle, msgs);
        else
            sender(cycle, msgs);
        /* Rank 0 tells the senders whether to go again. */
        static uint64_t again;
        if (J.rank == 0) {
            again = dropped == 0 && cycle + 1 < CYCLES;
            for (int p = 1; p < J.size; p++)
                post_nap(p, &again, sizeof again, OP_GO, ULN_SILENT, t_now() + 60);
        } else {
            struct uln_cqe e = take("whether to go again");
            CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.peer == 0 && e.len == sizeof again);
            memcpy(&again, e.data, sizeof again);
            t_release(cq, &e);
        }
        if (!again) break;
    }
    if (J.rank == 0) {
        CHECKF(dropped > 0,
               "pkts_dropped stayed 0 in %d cycles: the senders' returning credit never "
               "overfilled the pool",
               CYCLES);
        printf("rank0: the pool's backstop dropped %" PRIu64 " packets in cycle %d, all resent\n",
               dropped, cycle);
    }
    return t_finish(&J);
}
