/*
 * quiet.c - a transport with nothing to do is called on one pass in
 * ULN_QUIET_PASSES (transport.h, "quiet"), and ends that itself as soon as
 * it has something: the engine's side of the rule, counted.
 *
 * One process, two contexts of no job, ULN_TRANSPORT=udp (so each opens the
 * UDP transport and they reach each other over loopback). The engine's
 * calls into A's transport are counted by wrapping its progress hooks (a
 * copy of the ops table with counting hooks, put in ep->tp_prog):
 *   1. A alone, no peer met: 64 x 100 empty polls call progress_rx about 100
 *      times, not 6400 (before the rule, every pass);
 *   2. B inserts A and sends it a NAP: A, still quiet, takes it within a
 *      bounded number of polls (the first packet of a peer is looked for);
 *   3. A has met a peer (it has timers now): every poll calls both hooks.
 */
#include "../integration/common.h"

#include "core/internal.h"

#define BEAT   ((int)ULN_QUIET_PASSES)
#define ROUNDS 100

static const struct uln_transport_ops *real;
static struct uln_transport_ops counted;
static unsigned long rx_calls, tx_calls;

static void count_rx(struct uln_ep *ep)
{
    rx_calls++;
    real->progress_rx(ep);
}

static void count_tx(struct uln_ep *ep)
{
    tx_calls++;
    real->progress_tx(ep);
}

struct side {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static void side_open(struct side *s)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    cfg.transport = "udp";
    CHECK_OK(uln_open(&cfg, &s->ctx));
    CHECK_OK(uln_cq_open(s->ctx, 64, &s->cq));
    CHECK_OK(uln_ep_open(s->ctx, s->cq, s->cq, &s->ep));
}

static int insert(struct side *s, const struct side *of)
{
    uint8_t a[ULN_ADDR_MAX];
    size_t len = sizeof a;
    CHECK_OK(uln_addr(of->ctx, a, &len));
    int peer;
    CHECK_OK(uln_peer_insert(s->ctx, a, len, 0, &peer));
    return peer;
}

int main(void)
{
    struct side A, B;
    side_open(&A);
    side_open(&B);

    /* A's UDP transport, the only one that progresses on it, counted. */
    CHECKF(A.ep->n_tp_prog == 1, "A progresses %d transports, want 1 (udp)", A.ep->n_tp_prog);
    real = A.ep->tp_prog[0];
    counted = *real;
    counted.progress_rx = count_rx;
    counted.progress_tx = count_tx;
    A.ep->tp_prog[0] = &counted;

    /* 1. Nothing met: one pass in BEAT runs the hooks (the first pass too:
     * nothing is quiet until the transport has said so). */
    struct uln_cqe e;
    for (int i = 0; i < BEAT * ROUNDS; i++)
        CHECK_RC(uln_cq_poll(A.cq, &e, 1), 0);
    printf("alone: %d polls, progress_rx %lu, progress_tx %lu\n", BEAT * ROUNDS, rx_calls,
           tx_calls);
    CHECKF(rx_calls >= ROUNDS && rx_calls <= ROUNDS + 2,
           "alone: progress_rx ran %lu times in %d polls, want one in %d", rx_calls, BEAT * ROUNDS,
           BEAT);
    CHECKF(tx_calls == rx_calls, "alone: progress_tx %lu, progress_rx %lu", tx_calls, rx_calls);

    /* 2. A peer's first NAP reaches quiet A. */
    int a_at_b = insert(&B, &A);
    uint64_t v = 0x9e3779b97f4a7c15ull;
    CHECK_OK(uln_nap(B.ep, a_at_b, &v, sizeof v, 1, 0));
    double until = t_now() + 10;
    int got = 0, polls = 0;
    while (!got && t_now() < until) {
        struct uln_cqe be;
        while (uln_cq_poll(B.cq, &be, 1) > 0)
            CHECK_CQE(&be, be.status == 0);
        got = uln_cq_poll(A.cq, &e, 1);
        CHECK(got >= 0);
        polls++;
    }
    CHECKF(got == 1, "A never took B's first NAP (%d polls in 10 s)", polls);
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == sizeof v && !memcmp(e.data, &v, sizeof v));
    if (e.flags & ULN_CQE_MUST_RELEASE) CHECK_OK(uln_cqe_release(A.cq, &e));
    printf("first NAP taken after %d polls\n", polls);

    /* 3. A has met B: timers to keep, so both hooks run on every pass. */
    unsigned long rx0 = rx_calls, tx0 = tx_calls;
    for (int i = 0; i < BEAT * 4; i++)
        uln_cq_poll(A.cq, &e, 1);
    CHECKF(rx_calls - rx0 == BEAT * 4 && tx_calls - tx0 == BEAT * 4,
           "with a peer: %lu and %lu hook calls in %d polls, want every one", rx_calls - rx0,
           tx_calls - tx0, BEAT * 4);

    A.ep->tp_prog[0] = real; /* before the endpoint's close calls into it */
    CHECK_OK(uln_close(A.ctx));
    CHECK_OK(uln_close(B.ctx));
    printf("quiet transports: all checks passed\n");
    return 0;
}
