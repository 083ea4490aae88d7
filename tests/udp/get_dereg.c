/*
 * get_dereg.c - a region deregistered while a large GET from it is being
 * answered over udp, with packets lost.
 *
 * A GET of at least 64 KiB is answered straight from the target's region:
 * the kernel reads the data from it while the target holds the key, and a
 * piece sent again later is read afresh under the key (udp/send.c: serve_get,
 * region_copy). This checks what a user relies on when a region goes away
 * mid-answer: the GET either completes with every byte right or fails with
 * -ENOKEY, and nothing is read from the memory once uln_mr_dereg returned.
 *
 * Two ranks over udp, 1500-byte packets (ULN_UDP_MTU); rank 1, the target,
 * loses a fifth of its packets each way (ULN_FAULT, its own), so pieces are
 * sent again. A first round, not deregistered, counts an answer's pieces.
 * Then each round rank 1 registers a fresh malloc'd region of LEN bytes,
 * rank 0 GETs all of it, and rank 1 deregisters once it has sent some of
 * the answer (even rounds: the rest of the answer is refused) or every
 * piece once (odd rounds, told by the sequence numbers the answer took, a
 * test hook: only resends of lost pieces are left, and each must be refused,
 * not read from the memory), overwrites the memory with FILL and frees it.
 * A resend that read it would deliver FILL where the pattern belongs, and
 * the GET would complete with it. Rounds of both kinds must end with the
 * refusal, or their path went untested.
 */
#include "../integration/common.h"

#include "core/internal.h"

#define LEN    (1u << 20)
#define ROUNDS 12
#define FILL   0xee
#define SOME   100 /* packets rank 1 sends before it deregisters, even rounds */

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static uint32_t pieces; /* an answer's: counted in the first round */

/* Packets rank 1 sent (the context's count: every datagram). */
static uint64_t pkts_sent(void)
{
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    return c.pkts_sent;
}

/* The next sequence number towards rank 0: one per packet sent the first
 * time, none for a resend. */
static uint32_t snd_nxt(void)
{
    struct uln_udp_conn c;
    CHECK_OK(uln_udp_conn_get(ep, 0, &c));
    return c.snd_nxt;
}

static uint64_t take_word(const char *what)
{
    struct uln_cqe e = t_cq_take1(cq, 60000, what);
    uint64_t v;
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.len == sizeof v);
    memcpy(&v, e.data, sizeof v);
    t_release(cq, &e);
    return v;
}

static void send_word(int peer, uint64_t v)
{
    CHECK_OK(uln_nap(ep, peer, &v, sizeof v, 0, ULN_SILENT | ULN_INLINE));
}

/* Rank 1: a region, its key to rank 0, then dereg and free it mid-answer
 * (round -1: once the GET is over, counting its pieces). */
static void target(int round)
{
    uint8_t *mem = t_xmalloc(LEN);
    pat_fill(mem, LEN, pat_seed(1, 7, (uint64_t)round), 0);
    struct uln_mr *mr;
    CHECK_OK(uln_mr_reg(J.ctx, mem, LEN, ULN_ACCESS_REMOTE_READ, &mr));
    uint64_t before = pkts_sent();
    uint32_t seq = snd_nxt() + 1; /* the answer's first: after the key's NAP */
    send_word(0, uln_mr_key(mr));
    if (round < 0) { /* the GET is over: every piece went once */
        CHECK(take_word("rank 0's outcome") == (uint64_t)round);
        pieces = snd_nxt() - seq;
        CHECK_OK(uln_mr_dereg(mr));
        free(mem);
        return;
    }
    double deadline = t_now() + 30;
    while (round % 2 ? snd_nxt() - seq < pieces : pkts_sent() - before < SOME) {
        CHECKF(t_now() < deadline,
               "round %d: the GET was not being answered (%u of %u pieces sent, %llu packets)",
               round, snd_nxt() - seq, pieces, (unsigned long long)(pkts_sent() - before));
        CHECK(uln_cq_poll(cq, NULL, 0) >= 0);
    }
    CHECK_OK(uln_mr_dereg(mr));
    memset(mem, FILL, LEN); /* what a resend that read it would deliver */
    free(mem);
    CHECK(take_word("rank 0's outcome") == (uint64_t)round);
}

/* Rank 0: the GET's outcome, 1 when refused. Round -1 counts the pieces. */
static int initiator(int round, uint8_t *buf)
{
    uint64_t key = take_word("rank 1's key");
    memset(buf, 0, LEN);
    CHECK_OK(uln_get(ep, 1, buf, LEN, key, 0, (uint64_t)round, 0));
    struct uln_cqe e = t_cq_take1(cq, 120000, "the GET's completion");
    CHECK_CQE(&e, e.op == ULN_OP_GET && e.user_data == (uint64_t)round);
    CHECKF(e.status == 0 || e.status == -ENOKEY, "round %d: the GET ended with %s", round,
           t_errname(e.status));
    if (e.status == 0) CHECK_PAT(buf, LEN, pat_seed(1, 7, (uint64_t)round), 0, "round %d", round);
    send_word(1, (uint64_t)round);
    return e.status != 0;
}

int main(void)
{
    /* Rank 1's packets only: the loss is the target's, whose pieces are sent
     * again. ULN_RANK is the launcher's, read before the context opens. */
    if (t_env_int("ULN_RANK", -1) == 1) setenv("ULN_FAULT", "drop=0.2,seed=5", 1);
    t_open(&J, 2);
    CHECKF(J.info.udp_peers == 1, "this test needs ULN_TRANSPORT=udp");
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    uint8_t *buf = J.rank == 0 ? t_xmalloc(LEN) : NULL;
    /* Contact first: rank 1's connection must exist for snd_nxt(). */
    if (J.rank == 0)
        send_word(1, 0);
    else
        CHECK(take_word("rank 0's hello") == 0);
    int refused[2] = {0, 0};
    if (J.rank == 1)
        target(-1);
    else
        CHECK(initiator(-1, buf) == 0);
    for (int r = 0; r < ROUNDS; r++) {
        if (J.rank == 1)
            target(r);
        else
            refused[r % 2] += initiator(r, buf);
    }
    if (J.rank == 0) {
        printf("rank0: GETs refused, the others intact: %d of %d mid-answer, %d of %d with only "
               "resends left\n",
               refused[0], ROUNDS / 2, refused[1], ROUNDS / 2);
        CHECKF(refused[0] > 0 && refused[1] > 0,
               "a kind of round never met the deregistration: its path went untested");
    }
    free(buf);
    t_barrier(&J);
    return t_finish(&J);
}
