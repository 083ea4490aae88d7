/*
 * long_addr.c - an address with a third part: room for it (ULN_ADDR_MAX)
 * everywhere an address travels. The tests' transport (probe.c) adds a
 * 60-byte part to the addresses of the contexts opened while it is armed,
 * so they are longer than the 56 bytes ulnet once had room for (as an IPv6
 * udp part, a service's or a public key will make them).
 *
 * One process, two contexts of no job, over shm and then over udp. uln_addr
 * refuses too small a buffer with the full length, and gives the address in
 * ULN_ADDR_MAX; uln_addr_str names the part. B inserts A and sends it NAPs
 * before A has inserted B: A learns B from the address B left where it
 * contacts A (its inbox claim over shm, its hello over udp), so B's NAPs
 * arrive exactly once, in order, intact, from the id A's later insert of B
 * returns; then A answers B.
 */
#include "../integration/common.h"

#include "probe.h"

#define NAPS     20
#define PART     60
#define DEADLINE 20.0

struct side {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static void side_open(struct side *s, const char *transport)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    cfg.transport = transport;
    CHECK_OK(uln_open(&cfg, &s->ctx));
    CHECK_OK(uln_cq_open(s->ctx, 256, &s->cq));
    CHECK_OK(uln_ep_open(s->ctx, s->cq, s->cq, &s->ep));
}

static void side_close(struct side *s)
{
    CHECK_OK(uln_ep_close(s->ep));
    CHECK_OK(uln_cq_close(s->cq));
    CHECK_OK(uln_close(s->ctx));
}

/* The next completion on s (polling t too, for its progress). */
static struct uln_cqe next_on(struct side *s, struct side *t)
{
    struct uln_cqe e = {0};
    double until = t_now() + DEADLINE;
    while (t_now() < until) {
        if (uln_cq_poll(s->cq, &e, 1) > 0) return e;
        struct uln_cqe o;
        if (uln_cq_poll(t->cq, &o, 1) > 0) CHECK_CQE(&o, o.status == 0 && o.op == ULN_OP_NAP);
    }
    CHECKF(0, "no completion in %.0f s", DEADLINE);
    return e;
}

static void run(const char *transport)
{
    uln_probe_addr_part(PART);
    uln_probe_arm(true);
    struct side A, B;
    side_open(&A, transport);
    side_open(&B, transport);
    uln_probe_arm(false);

    uint8_t a[ULN_ADDR_MAX], small[56];
    size_t alen = sizeof small;
    CHECK_RC(uln_addr(A.ctx, small, &alen), -ENOSPC);
    CHECKF(alen > 56 && alen <= ULN_ADDR_MAX, "the full length said: %zu", alen);
    size_t want = alen;
    alen = sizeof a;
    CHECK_OK(uln_addr(A.ctx, a, &alen));
    CHECK(alen == want);
    char text[256];
    CHECK(uln_addr_str(a, alen, text, sizeof text) > 0);
    CHECKF(strstr(text, "probe 60 B") != NULL, "uln_addr_str: %s", text);
    printf("%s: a %zu-byte address: %s\n", transport, alen, text);

    int a_at_b = -1, b_at_a = -1;
    CHECK_OK(uln_peer_insert(B.ctx, a, alen, 0, &a_at_b));
    int from = -1;
    for (int i = 0; i < NAPS; i++) {
        char m[64];
        int n = snprintf(m, sizeof m, "nap %d over %s", i, transport);
        int rc;
        double until = t_now() + DEADLINE;
        while ((rc = uln_nap(B.ep, a_at_b, m, (uint32_t)n + 1, (uint64_t)i, 0)) == -EAGAIN &&
               t_now() < until)
            uln_cq_poll(B.cq, NULL, 0);
        CHECK_OK(rc);
        struct uln_cqe e = next_on(&A, &B);
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0);
        CHECKF(e.len == (uint64_t)n + 1 && !memcmp(e.data, m, (size_t)n + 1),
               "NAP %d: not what was sent", i);
        if (i == 0) from = e.peer;
        CHECKF(e.peer == from, "NAP %d from peer %d, the first from %d", i, e.peer, from);
        CHECK_OK(uln_cqe_release(A.cq, &e));
    }
    uint8_t b[ULN_ADDR_MAX];
    size_t blen = sizeof b;
    CHECK_OK(uln_addr(B.ctx, b, &blen));
    CHECK_OK(uln_peer_insert(A.ctx, b, blen, 0, &b_at_a));
    CHECKF(b_at_a == from, "B learnt as %d, inserted as %d", from, b_at_a);
    CHECK_OK(uln_nap(A.ep, b_at_a, "back", 5, 99, 0));
    struct uln_cqe e = next_on(&B, &A);
    while (e.op == ULN_OP_NAP) /* B's own sends completing */
        e = next_on(&B, &A);
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 5 && !memcmp(e.data, "back", 5));
    CHECK(e.peer == a_at_b);
    CHECK_OK(uln_cqe_release(B.cq, &e));
    side_close(&A);
    side_close(&B);
}

int main(void)
{
    run("shm");
    run("udp");
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
