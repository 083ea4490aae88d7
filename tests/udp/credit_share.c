/*
 * credit_share.c - a receiver's pool shared out as credit among the peers
 * that send to it (src/transport/udp/recv.c, pool_share; docs/protocol.md, "Incast"), and
 * shared out again as senders leave and come back.
 *
 *   ULN_TRANSPORT=udp ULN_UDP_WINDOW=256 ULN_FAULT=drop=0.05,seed=S ulnrun -n 5 credit_share [msgs]
 *
 * Four senders stream 64 B NAPs into rank 0, whose pool holds
 * max(512, 2 x window) datagrams; half of it is shared: each active sender's
 * share is pool / 2 / senders. Loss (ULN_FAULT) leaves holes, so packets
 * wait in the pool and the shares are used. Rank 0 drives three phases:
 *   1. all four stream: each share is pool/2/4;
 *   2. ranks 1 and 2 stop; once they have been quiet for the library's
 *      second, ranks 3 and 4 are re-shared pool/2/2 - and use more than
 *      the old share;
 *   3. rank 1 comes back: it joins, and 1, 3 and 4 get pool/2/3.
 * After every batch of completions rank 0 reads each connection (a test
 * hook: uln_udp_conn_get) and checks, for each sender, that the credit it
 * was given past what arrived in order (rcv_edge - rcv_next) is at most its
 * share, and that the active senders' credit adds up to at most half the
 * pool. Credit given is never taken back, so after a share is cut these
 * checks start once the peer's stream has passed the edge it had then.
 * At the end: every message arrived once, in order, intact; rel saw no
 * packet beyond the credit it gave (rx_oow, rx_nobuf); the pool's backstop
 * (pkts_dropped) never fired while the senders kept to their shares
 * (phases 1 and 2). A quiet sender is re-shared along with the active ones,
 * so one coming back (phase 3) may hold credit from the larger share it was
 * given while quiet, which the others' credit does not leave room for: it
 * counts from when its stream has passed that credit, and what the
 * backstop dropped meanwhile is reported, not checked.
 */
#include "../integration/common.h"

#include "core/internal.h"
#include "rel/rel.h"

#define MSG     64
#define SENDERS 4
#define END     0xe4du

enum { CMD_GO = 1, CMD_STOP, CMD_FINISH };

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

struct msg {
    uint32_t sender, index;
    uint8_t bytes[MSG - 8];
};
struct end {
    uint32_t magic, count;
};

/* ---- senders ---------------------------------------------------------------- */

static bool take_sender_cqes(uint32_t *cmd)
{
    struct uln_cqe e[64];
    int n = uln_cq_poll(cq, e, 64);
    CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
    bool got = false;
    for (int i = 0; i < n; i++) {
        if (e[i].op == ULN_OP_NAP) {
            CHECK_CQE(&e[i], e[i].status == 0);
            continue;
        }
        CHECK_CQE(&e[i], e[i].op == ULN_OP_NAP_RECV && e[i].peer == 0 && e[i].len == 4);
        memcpy(cmd, e[i].data, 4);
        t_release(cq, &e[i]);
        got = true;
    }
    return got || n > 0;
}

static void sender(void)
{
    static struct msg m;
    bool streaming = false;
    uint32_t index = 0;
    for (;;) {
        uint32_t cmd = 0;
        bool busy = take_sender_cqes(&cmd);
        if (cmd == CMD_FINISH) break;
        if (cmd == CMD_GO) streaming = true;
        if (cmd == CMD_STOP) {
            streaming = false;
            static struct end e;
            e = (struct end){END, index};
            int rc;
            while ((rc = uln_nap(ep, 0, &e, sizeof e, 2, ULN_INLINE)) == -EAGAIN)
                take_sender_cqes(&cmd);
            CHECKF(rc == 0, "uln_nap: %s", t_errname(rc));
        }
        if (streaming) {
            m.sender = (uint32_t)J.rank;
            m.index = index;
            pat_fill(m.bytes, sizeof m.bytes, pat_seed(J.rank, 0, index), 0);
            int rc = uln_nap(ep, 0, &m, sizeof m, 1, ULN_INLINE);
            if (rc == 0) {
                index++;
                continue;
            }
            CHECKF(rc == -EAGAIN, "uln_nap: %s", t_errname(rc));
        }
        if (!busy) uln_cq_wait(cq, streaming ? 1 : 10);
    }
}

/* ---- rank 0 ----------------------------------------------------------------- */

static uint32_t pool_half, window;
static uint32_t next[SENDERS + 1];   /* the next index expected from each sender */
static uint32_t ended[SENDERS + 1];  /* 1 + the count an END said; 0: none since GO */
static bool active[SENDERS + 1];     /* streaming in this phase (ours to say) */
static uint32_t settle[SENDERS + 1]; /* its checks start once rcv_next passes this */
static bool settled[SENDERS + 1];
static uint32_t last_limit[SENDERS + 1];
static uint32_t max_credit[SENDERS + 1]; /* this phase, once settled */
static uint32_t held_at_go[SENDERS + 1]; /* credit it held when told to go */
static long checks;

static void cmd(int peer, uint32_t c)
{
    static uint32_t v[SENDERS + 1];
    v[peer] = c;
    int rc;
    while ((rc = uln_nap(ep, peer, &v[peer], 4, 3, ULN_INLINE | ULN_SILENT)) == -EAGAIN)
        uln_cq_poll(cq, NULL, 0);
    CHECKF(rc == 0, "uln_nap to rank %d: %s", peer, t_errname(rc));
    if (c == CMD_GO) {
        /* Credit it was given while quiet is still its to use (rel never
         * takes credit back): it counts once its stream has passed it. */
        struct uln_udp_conn k;
        if (uln_udp_conn_get(ep, peer, &k) == 0) {
            settle[peer] = k.rcv_edge;
            settled[peer] = false;
            held_at_go[peer] = k.rcv_edge - k.rcv_next;
        }
        ended[peer] = 0;
    }
    active[peer] = c == CMD_GO;
}

static uint32_t share_of(unsigned senders)
{
    uint32_t s = pool_half / senders;
    return s < window ? s : window; /* rel never gives more than its window */
}

/* Read every connection: each sender's credit within its share. */
static void check_credit(void)
{
    uint32_t sum = 0;
    for (int p = 1; p <= SENDERS; p++) {
        struct uln_udp_conn c;
        if (uln_udp_conn_get(ep, p, &c) != 0) continue;
        if (c.rx_limit != last_limit[p]) {
            /* Re-shared (or first seen): a cut takes effect as the credit
             * given before is used up, and the share may have changed more
             * than once since the last look. */
            settle[p] = c.rcv_edge;
            settled[p] = false;
            last_limit[p] = c.rx_limit;
        }
        if (!settled[p] && (int32_t)(c.rcv_next - settle[p]) >= 0) settled[p] = true;
        uint32_t credit = c.rcv_edge - c.rcv_next;
        CHECKF(c.rel.rx_oow == 0 && c.rel.rx_nobuf == 0,
               "rank %d sent %" PRIu64 " packets beyond its credit, %" PRIu64 " found no buffer", p,
               c.rel.rx_oow, c.rel.rx_nobuf);
        if (!settled[p]) continue;
        CHECKF(credit <= c.rx_limit, "rank %d holds credit for %u packets, its share is %u", p,
               credit, c.rx_limit);
        if (credit > max_credit[p]) max_credit[p] = credit;
        if (active[p]) sum += credit;
        checks++;
    }
    CHECKF(sum <= pool_half, "the active senders hold credit for %u packets, half the pool is %u",
           sum, pool_half);
}

static void receive(double deadline, const char *what)
{
    struct uln_cqe e[64];
    int n = uln_cq_poll(cq, e, 64);
    CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
    for (int i = 0; i < n; i++) {
        struct uln_cqe *x = &e[i];
        if (x->op == ULN_OP_NAP) continue; /* our commands leave silently */
        CHECK_CQE(x, x->op == ULN_OP_NAP_RECV && x->peer >= 1 && x->peer <= SENDERS);
        int p = x->peer;
        if (x->len == sizeof(struct end)) {
            struct end en;
            memcpy(&en, x->data, sizeof en);
            t_release(cq, x);
            CHECK_CQE(x, en.magic == END);
            ended[p] = en.count + 1;
            continue;
        }
        CHECK_CQE(x, x->len == MSG);
        struct msg m;
        memcpy(&m, x->data, sizeof m);
        t_release(cq, x);
        CHECKF(m.sender == (uint32_t)p && m.index == next[p],
               "from rank %d came sender %u's message %u, expected %u: lost, duplicated or out "
               "of order",
               p, m.sender, m.index, next[p]);
        CHECK_PAT(m.bytes, sizeof m.bytes, pat_seed(p, 0, m.index), 0, "message %u from rank %d",
                  m.index, p);
        next[p]++;
    }
    check_credit();
    CHECKF(t_now() < deadline, "waiting for %s", what);
    if (n == 0) uln_cq_wait(cq, 1);
}

/* Receive until each sender in `who` has sent `more` messages more. */
static void stream(const int *who, int nwho, uint32_t more, const char *what)
{
    uint32_t until[SENDERS + 1];
    for (int i = 0; i < nwho; i++)
        until[who[i]] = next[who[i]] + more;
    double deadline = t_now() + 60;
    for (bool done = false; !done;) {
        receive(deadline, what);
        done = true;
        for (int i = 0; i < nwho; i++)
            done &= next[who[i]] >= until[who[i]];
    }
}

/* Stop a sender and receive until its last message is in. */
static void stop(int p)
{
    cmd(p, CMD_STOP);
    double deadline = t_now() + 60;
    while (!ended[p] || next[p] < ended[p] - 1)
        receive(deadline, "a stopped sender's last messages");
    CHECK(next[p] == ended[p] - 1);
}

/* Receive until the given senders' shares are `share`. */
static void await_share(const int *who, int nwho, uint32_t share, const char *what)
{
    double deadline = t_now() + 60;
    for (bool done = false; !done;) {
        receive(deadline, what);
        done = true;
        for (int i = 0; i < nwho; i++)
            done &= last_limit[who[i]] == share;
    }
}

static uint64_t dropped(void)
{
    struct uln_counters k;
    CHECK_OK(uln_counters_get(J.ctx, &k));
    CHECK(k.malformed == 0);
    return k.pkts_dropped;
}

static void receiver(uint32_t msgs)
{
    window = J.info.udp_window;
    pool_half = (2 * window < 512 ? 512 : 2 * window) / 2;
    CHECKF(pool_half / SENDERS < window,
           "a window of %u: four senders' shares of %u would not bind", window, pool_half);
    /* All four met at once, so none is promised the pool the others share. */
    for (int p = 1; p <= SENDERS; p++)
        cmd(p, CMD_GO);
    const int all[] = {1, 2, 3, 4}, pair[] = {3, 4}, three[] = {1, 3, 4};

    await_share(all, 4, share_of(4), "the first shares");
    memset(max_credit, 0, sizeof max_credit);
    stream(all, 4, msgs, "phase 1: four senders");
    uint32_t max1 = 0;
    for (int p = 1; p <= SENDERS; p++)
        max1 = max_credit[p] > max1 ? max_credit[p] : max1;
    printf("rank0: phase 1: 4 senders, shares %u of half a pool of %u, largest credit seen %u\n",
           share_of(4), pool_half, max1);

    stop(1);
    stop(2);
    /* Quiet for a second, they leave the senders: 3 and 4 share the half. */
    await_share(pair, 2, share_of(2), "phase 2: the quiet senders' shares given back");
    memset(max_credit, 0, sizeof max_credit);
    stream(pair, 2, msgs, "phase 2: two senders");
    uint32_t max2 = max_credit[3] > max_credit[4] ? max_credit[3] : max_credit[4];
    printf("rank0: phase 2: 2 senders, shares %u, largest credit seen %u\n", share_of(2), max2);
    CHECKF(max2 > share_of(4), "the remaining senders never held more than the old share (%u)",
           share_of(4));
    uint64_t dropped_shared = dropped();
    CHECKF(dropped_shared == 0,
           "the pool's backstop dropped %" PRIu64 " packets while every sender kept its share",
           dropped_shared);

    cmd(1, CMD_GO);
    await_share(three, 3, share_of(3), "phase 3: rank 1 joins again");
    memset(max_credit, 0, sizeof max_credit);
    stream(three, 3, msgs, "phase 3: three senders");
    printf("rank0: phase 3: 3 senders, shares %u, largest credits seen %u, %u, %u; rank 1 came "
           "back holding credit for %u (given while quiet)\n",
           share_of(3), max_credit[1], max_credit[3], max_credit[4], held_at_go[1]);

    stop(1);
    stop(3);
    stop(4);
    for (int p = 1; p <= SENDERS; p++)
        cmd(p, CMD_FINISH);
    uint64_t d = dropped();
    printf("rank0: %u, %u, %u, %u messages from ranks 1-4, each once, in order, intact; %ld "
           "credit checks; pkts_dropped %" PRIu64 " (phase 3: a returning sender's old credit)\n",
           next[1], next[2], next[3], next[4], checks, d);
    CHECK(checks > 0);
}

int main(int argc, char **argv)
{
    uint32_t msgs = argc > 1 ? (uint32_t)atoi(argv[1]) : 3000;
    t_open(&J, 0);
    CHECKF(J.size == SENDERS + 1 && J.info.udp_peers == J.size - 1,
           "this test wants %d ranks, all over udp (ULN_TRANSPORT=udp)", SENDERS + 1);
    CHECK_OK(uln_cq_open(J.ctx, 4096, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    if (J.rank == 0)
        receiver(msgs);
    else
        sender();
    return t_finish(&J);
}
