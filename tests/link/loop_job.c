/*
 * loop_job.c - ulnet traffic over a link added the way any link is: the
 * tests' own in-memory link (loop.c; ULN_LINK=loop), under the UDP transport
 * and its reliability, with nothing else of the library changed for it.
 *
 * One process, two contexts of no job (ULN_TRANSPORT=udp, ULN_LINK=loop),
 * each inserting the other. B sends A NAPs of every size class (one packet,
 * several, empty) with a sequence number and a pattern: A must get each
 * exactly once, in order, intact. Then PUT and GET of a region larger than
 * a packet: the bytes land and come back whole; a PUT with a bad key is
 * refused and writes nothing. The loop link's own count says the datagrams
 * went through it (a socket link under it would have moved none). Also: an
 * unknown ULN_LINK fails uln_open, and ULN_TRANSPORT=xdp with ULN_LINK=udp
 * is refused (xdp is ULN_LINK=xdp).
 */
#include "../integration/common.h"

uint64_t uln_link_loop_moved(void); /* loop.c */

#define NAPS     300
#define NAP_MAX  5000 /* several 1472-byte datagrams */
#define REGION   (256u * 1024u)
#define DEADLINE 20.0

struct side {
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
};

static int side_open(struct side *s)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    cfg.transport = "udp";
    int rc = uln_open(&cfg, &s->ctx);
    if (rc) return rc;
    CHECK_OK(uln_cq_open(s->ctx, 1024, &s->cq));
    CHECK_OK(uln_ep_open(s->ctx, s->cq, s->cq, &s->ep));
    return 0;
}

static int insert(struct side *s, const struct side *of)
{
    uint8_t a[ULN_ADDR_MAX];
    size_t len = sizeof a;
    CHECK_OK(uln_addr(of->ctx, a, &len));
    int peer = -1;
    CHECK_OK(uln_peer_insert(s->ctx, a, len, 0, &peer));
    return peer;
}

static size_t nap_len(int i)
{
    return i % 7 == 0 ? 0 : (size_t)(i * 977u) % NAP_MAX;
}

static uint8_t pat(int i, size_t k)
{
    return (uint8_t)(i * 31u + k * 7u + 1u);
}

/* Poll both until the op with user_data `want` completes on `on` (its
 * status; on NULL: one pass over both, 0), meanwhile handing every received
 * NAP to check_nap. */
static int got_naps;
static void check_nap(const struct uln_cqe *e)
{
    int i = got_naps++;
    size_t n = nap_len(i);
    CHECK_CQE(e, e->len == n + sizeof(int));
    int seq = -1;
    if (e->len >= sizeof seq) memcpy(&seq, e->data, sizeof seq);
    CHECKF(seq == i, "NAP %d came as the %dth: out of order, lost or twice", seq, i);
    const uint8_t *d = (const uint8_t *)e->data + sizeof seq;
    size_t bad = 0;
    for (size_t k = 0; k < n && e->len == n + sizeof(int); k++)
        bad += d[k] != pat(i, k);
    CHECKF(bad == 0, "NAP %d: %zu bytes differ", i, bad);
}

static int pump(struct side *a, struct side *b, struct side *on, uint64_t want)
{
    double until = t_now() + DEADLINE;
    while (t_now() < until) {
        struct side *s[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            struct uln_cqe e;
            while (uln_cq_poll(s[k]->cq, &e, 1) > 0) {
                if (e.op == ULN_OP_NAP_RECV) {
                    check_nap(&e);
                    CHECK_OK(uln_cqe_release(s[k]->cq, &e));
                } else if (s[k] == on && e.user_data == want) {
                    return e.status;
                } else {
                    CHECK_CQE(&e, e.status == 0);
                }
            }
        }
        if (!on) return 0;
    }
    CHECKF(0, "user_data %#llx did not complete in %.0f s", (unsigned long long)want, DEADLINE);
    return -ETIMEDOUT;
}

int main(void)
{
    /* The link's name is checked at uln_open, against the links this ulnet has. */
    struct side bad;
    setenv("ULN_LINK", "nosuchlink", 1);
    CHECK_RC(side_open(&bad), -EINVAL);
    setenv("ULN_LINK", "udp", 1);
    setenv("ULN_TRANSPORT", "xdp", 1);
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    CHECK_RC(uln_open(&cfg, &bad.ctx), -EINVAL);
    unsetenv("ULN_TRANSPORT");

    setenv("ULN_LINK", "loop", 1);
    struct side A, B;
    CHECK_OK(side_open(&A));
    CHECK_OK(side_open(&B));
    int a_at_b = insert(&B, &A);
    int b_at_a = insert(&A, &B);
    uint64_t moved0 = uln_link_loop_moved();

    /* NAPs B -> A: exactly once, in order, intact. */
    static uint8_t buf[NAPS][sizeof(int) + NAP_MAX];
    for (int i = 0; i < NAPS; i++) {
        size_t n = nap_len(i);
        memcpy(buf[i], &i, sizeof i);
        for (size_t k = 0; k < n; k++)
            buf[i][sizeof i + k] = pat(i, k);
        int rc;
        double until = t_now() + DEADLINE;
        while ((rc = uln_nap(B.ep, a_at_b, buf[i], sizeof i + n, 1000 + (uint64_t)i, 0)) ==
                   -EAGAIN &&
               t_now() < until)
            pump(&A, &B, NULL, 0); /* make room: nothing is waited for */
        CHECK_OK(rc);
    }
    CHECK_OK(pump(&A, &B, &B, 1000 + NAPS - 1));
    double until = t_now() + DEADLINE;
    while (got_naps < NAPS && t_now() < until)
        pump(&A, &B, NULL, 0);
    CHECKF(got_naps == NAPS, "A got %d NAPs of %d", got_naps, NAPS);

    /* PUT and GET B -> A's region, larger than a datagram. */
    uint8_t *region = calloc(1, REGION), *src = malloc(REGION), *back = calloc(1, REGION);
    CHECK(region && src && back);
    for (size_t k = 0; k < REGION; k++)
        src[k] = (uint8_t)(k * 13u + 5u);
    struct uln_mr *mr;
    CHECK_OK(
        uln_mr_reg(A.ctx, region, REGION, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr));
    uint64_t key = uln_mr_key(mr);
    CHECK_OK(uln_put(B.ep, a_at_b, src, REGION, key, 0, 1, 0));
    CHECK_OK(pump(&A, &B, &B, 1));
    CHECKF(!memcmp(region, src, REGION), "the PUT's bytes differ at A");
    CHECK_OK(uln_get(B.ep, a_at_b, back, REGION, key, 0, 2, 0));
    CHECK_OK(pump(&A, &B, &B, 2));
    CHECKF(!memcmp(back, src, REGION), "the GET's bytes differ at B");
    /* A bad key: refused, and not a byte written. */
    memset(region, 0, REGION);
    CHECK_OK(uln_put(B.ep, a_at_b, src, 4096, key ^ 1, 0, 3, 0));
    int st = pump(&A, &B, &B, 3);
    CHECKF(st < 0, "a PUT with a bad key completed with %d", st);
    size_t written = 0;
    for (size_t k = 0; k < REGION; k++)
        written += region[k] != 0;
    CHECKF(written == 0, "a refused PUT wrote %zu bytes", written);
    (void)b_at_a;

    uint64_t moved = uln_link_loop_moved() - moved0;
    printf("loop link: %llu datagrams moved for %d NAPs, %u B PUT and GET\n",
           (unsigned long long)moved, NAPS, REGION);
    CHECKF(moved >= NAPS + 2 * (REGION / 1472), "only %llu datagrams went over the loop link",
           (unsigned long long)moved);

    CHECK_OK(uln_mr_dereg(mr));
    CHECK_OK(uln_ep_close(A.ep));
    CHECK_OK(uln_ep_close(B.ep));
    CHECK_OK(uln_close(A.ctx));
    CHECK_OK(uln_close(B.ctx));
    free(region);
    free(src);
    free(back);
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
