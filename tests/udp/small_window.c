/*
 * small_window.c - loss at a small window is repaired by fast retransmission,
 * not by timeouts, and costs a bounded number of packets.
 *
 *   ULN_TRANSPORT=udp ULN_UDP_WINDOW=W ULN_FAULT=drop=0.05,seed=S ulnrun -n N small_window [bursts]
 *
 * Ranks 1..N-1 each send `bursts` bursts of one window of 64 B NAPs into
 * rank 0, and after each burst drive their endpoint until rank 0 has
 * acknowledged all of it. So every burst ends a flight: bundled, a burst is
 * a few datagrams, and when the last of them is lost nothing later arrives
 * to show it - no LOSE, no SACK past it. Before the tail probe (rel.c,
 * on_tlp) only the retransmission timer found such a tail, one packet per
 * expiry and each a backoff later (a resend gives no RTT sample to end it):
 * at a window of 64, a 20-packet bundle lost at a stream's end took 20 s.
 *
 * Rank 0 checks every message (sender, index in order, bytes: exactly once)
 * and then sums the senders' rel counters (a test hook: uln_udp_conn_get):
 *   - most repairs are fast: retransmissions after a timeout are at most
 *     half of those after LOSE, SACK or the tail probe (tx_fast + tx_tlp),
 *     and at most one per five flights;
 *   - the repair is bounded: packets sent again are at most half the packets
 *     sent (no blind resending of whole flights).
 * Counts, not times: the machine may be loaded.
 */
#include "../integration/common.h"

#include "core/internal.h"
#include "rel/rel.h"

#define MSG 64

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

struct msg {
    uint32_t sender, burst, index, pad_;
    uint8_t bytes[MSG - 16];
};

/* What a sender reports at the end: its rel counters towards rank 0. */
struct report {
    uint64_t tx_data, tx_resend, tx_fast, tx_tlp, tx_pto, tx_timeout, rto_fired;
};

static void take_completions(int *done)
{
    struct uln_cqe e[64];
    int n = uln_cq_poll(cq, e, 64);
    CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
    for (int i = 0; i < n; i++) {
        CHECK_CQE(&e[i], e[i].op == ULN_OP_NAP && e[i].status == 0);
        (*done)++;
    }
}

static void post_nap(const void *buf, uint32_t len, int *done)
{
    int rc;
    while ((rc = uln_nap(ep, 0, buf, len, 1, ULN_INLINE)) == -EAGAIN)
        take_completions(done);
    CHECKF(rc == 0, "uln_nap: %s", t_errname(rc));
}

static void sender(int bursts, uint32_t burst_len)
{
    static struct msg m;
    int posted = 0, done = 0;
    for (int b = 0; b < bursts; b++) {
        for (uint32_t i = 0; i < burst_len; i++) {
            m.sender = (uint32_t)J.rank;
            m.burst = (uint32_t)b;
            m.index = i;
            pat_fill(m.bytes, sizeof m.bytes, pat_seed(J.rank, b, i), 0);
            post_nap(&m, sizeof m, &done);
            posted++;
        }
        /* The flight ends here: wait until rank 0 has all of it. */
        for (;;) {
            take_completions(&done);
            struct uln_udp_conn c;
            CHECK_OK(uln_udp_conn_get(ep, 0, &c));
            CHECKF(c.state != ULN_REL_DEAD && !c.dead, "rank 0 found dead (state %d)", c.state);
            if (done == posted && c.snd_una == c.snd_nxt) break;
            uln_cq_wait(cq, 1);
        }
    }
    struct uln_udp_conn c;
    CHECK_OK(uln_udp_conn_get(ep, 0, &c));
    const struct uln_rel_stats *st = &c.rel;
    struct report r = {st->tx_data, st->tx_resend,  st->tx_fast,  st->tx_tlp,
                       st->tx_pto,  st->tx_timeout, st->rto_fired};
    post_nap(&r, sizeof r, &done);
    posted++;
    while (done < posted) {
        take_completions(&done);
        if (done < posted) uln_cq_wait(cq, 10);
    }
}

static void receiver(int bursts, uint32_t burst_len)
{
    int senders = J.size - 1, reports = 0;
    uint32_t *next = calloc((size_t)J.size, sizeof *next);
    CHECK(next);
    struct report sum = {0};
    long left = (long)senders * bursts * burst_len;
    while (left > 0 || reports < senders) {
        struct uln_cqe e = t_cq_take1(cq, 60000, "the senders' NAPs");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.peer > 0 && e.peer < J.size);
        if (e.len == sizeof(struct report)) {
            struct report r;
            memcpy(&r, e.data, sizeof r);
            t_release(cq, &e);
            CHECKF(next[e.peer] == (uint32_t)bursts * burst_len,
                   "rank %d reported after %u of its messages", e.peer, next[e.peer]);
            printf("rank0: rank %d: sent %" PRIu64 ", again %" PRIu64 " (fast %" PRIu64
                   ", tail probe %" PRIu64 ", probe %" PRIu64 ", timeout %" PRIu64
                   "); timer expiries %" PRIu64 "\n",
                   e.peer, r.tx_data, r.tx_resend, r.tx_fast, r.tx_tlp, r.tx_pto, r.tx_timeout,
                   r.rto_fired);
            sum.tx_data += r.tx_data;
            sum.tx_resend += r.tx_resend;
            sum.tx_fast += r.tx_fast;
            sum.tx_tlp += r.tx_tlp;
            sum.tx_timeout += r.tx_timeout;
            reports++;
            continue;
        }
        CHECK_CQE(&e, e.len == MSG);
        struct msg m;
        memcpy(&m, e.data, sizeof m);
        t_release(cq, &e);
        uint32_t want = next[e.peer], b = want / burst_len, i = want % burst_len;
        CHECKF(m.sender == (uint32_t)e.peer && m.burst == b && m.index == i &&
                   want < (uint32_t)bursts * burst_len,
               "from rank %d came sender %u's message %u of burst %u, expected %u of burst "
               "%u: lost, duplicated or out of order",
               e.peer, m.sender, m.index, m.burst, i, b);
        CHECK_PAT(m.bytes, sizeof m.bytes, pat_seed(e.peer, (int)b, i), 0,
                  "message %u of burst %u from rank %d", i, b, e.peer);
        next[e.peer]++;
        left--;
    }
    free(next);
    struct uln_counters k;
    CHECK_OK(uln_counters_get(J.ctx, &k));
    printf("rank0: %d senders x %d bursts of %u NAPs, in order, exactly once; %" PRIu64
           " sent, %" PRIu64 " again: %" PRIu64 " fast, %" PRIu64 " by the tail probe, %" PRIu64
           " by timeout; malformed %" PRIu64 "\n",
           senders, bursts, burst_len, sum.tx_data, sum.tx_resend, sum.tx_fast, sum.tx_tlp,
           sum.tx_timeout, k.malformed);
    /* Half, not less: a probe lost too, or a receiver descheduled past the
     * timeout on a loaded machine (ASan, ctest -j2), is the timer's; at a
     * window of 4 that was 10 timeouts against 38 fast and probe resends
     * in one run of 120 flights. Before the tail probe: 47-58 against 3-6. */
    CHECKF(sum.tx_timeout * 2 <= sum.tx_fast + sum.tx_tlp,
           "%" PRIu64 " packets resent by timeout against %" PRIu64 " fast and %" PRIu64
           " by the tail probe: loss waits for the timer",
           sum.tx_timeout, sum.tx_fast, sum.tx_tlp);
    /* Every flight ends in a tail; one in twenty loses it, one in twenty
     * loses its last ACK. Before the tail probe each such flight waited for
     * the timer, a 64-packet one for a timer expiry per lost packet (77
     * timeouts in 120 flights at a window of 64, 53 at 4); now only a probe
     * lost too leaves it to the timer. */
    long flights = (long)senders * bursts;
    CHECKF(sum.tx_timeout * 5 <= (uint64_t)flights,
           "%" PRIu64 " packets resent by timeout in %ld flights: lost tails wait for the timer",
           sum.tx_timeout, flights);
    CHECKF(sum.tx_resend * 2 <= sum.tx_data,
           "%" PRIu64 " packets sent again for %" PRIu64 " sent: repair is not bounded",
           sum.tx_resend, sum.tx_data);
    CHECK(k.malformed == 0);
}

int main(int argc, char **argv)
{
    int bursts = argc > 1 ? atoi(argv[1]) : 40;
    t_open(&J, 0);
    CHECKF(J.size >= 2 && J.info.udp_peers == J.size - 1,
           "this test wants 2 or more ranks, all over udp (ULN_TRANSPORT=udp)");
    /* A burst is one window: each one fills it and ends a flight. */
    uint32_t burst_len = J.info.udp_window;
    CHECK_OK(uln_cq_open(J.ctx, 4096, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    if (J.rank == 0)
        receiver(bursts, burst_len);
    else
        sender(bursts, burst_len);
    return t_finish(&J);
}
