/*
 * allgather - uln_allgather: every rank's blob reaches every rank intact, at
 * its rank's place, on every transport; again and again on the same endpoint
 * (rounds back to back, so a fast rank's next round meets a slow rank's
 * current one); separate CQs for sends and receives; and the refusals.
 *
 * Rank r's blob in round k is len bytes of pat(r, k) with len drawn per
 * round from 1 up to nap_max (the same on every rank: from k alone), small
 * ones with ULN_INLINE's size and large ones that must wait for their send
 * completions. Every byte of every rank's slot is checked, and the bytes
 * past the last slot are untouched.
 *
 * An endpoint not idle is refused with -EBUSY before anything is sent, and
 * loses nothing: a NAP to itself outstanding, or its completions waiting on
 * the CQs, are all still there to be polled after the refusal (payload
 * intact), and the next call succeeds.
 *
 * usage: allgather [rounds]
 */
#include "common.h"

static struct t_job J;

static unsigned char pat(int rank, int round, size_t i)
{
    return (unsigned char)(pat_mix(((uint64_t)rank << 40) ^ ((uint64_t)round << 20) ^ i) & 0xff);
}

static size_t round_len(int k)
{
    uint64_t h = pat_mix((uint64_t)k * 7919u + 1);
    switch (h % 4) {
    case 0:
        return 8; /* a key: the common case */
    case 1:
        return J.info.nap_max;
    default:
        return 1 + (h >> 8) % J.info.nap_max;
    }
}

static void one_round(struct uln_ep *ep, int k)
{
    size_t len = round_len(k), n = (size_t)J.size;
    unsigned char *mine = malloc(len), *all = malloc(n * len + 64);
    CHECK(mine && all);
    for (size_t i = 0; i < len; i++)
        mine[i] = pat(J.rank, k, i);
    memset(all, 0xa5, n * len + 64);
    CHECK_OK(uln_allgather(ep, mine, len, all, 60000));
    for (int r = 0; r < J.size; r++)
        for (size_t i = 0; i < len; i++)
            CHECKF(all[(size_t)r * len + i] == pat(r, k, i),
                   "round %d (len %zu): rank %d's byte %zu is %#x, not %#x", k, len, r, i,
                   all[(size_t)r * len + i], pat(r, k, i));
    for (size_t i = 0; i < 64; i++)
        CHECKF(all[n * len + i] == 0xa5, "round %d: a byte past the last slot was written", k);
    free(mine);
    free(all);
}

/* Poll until the NAP to ourselves (user_data 77, 5 bytes) has completed on
 * both sides; every completion must be one of those two, payload intact. */
static void take_self_nap(struct uln_cq *scq, struct uln_cq *rcq, const unsigned char *sent)
{
    bool sent_done = false, recv_done = false;
    for (int spins = 0; !(sent_done && recv_done); spins++) {
        CHECKF(spins < 1000000, "the NAP to ourselves never completed on both sides");
        struct uln_cq *cqs[2] = {scq, rcq};
        for (int i = 0; i < (scq == rcq ? 1 : 2); i++) {
            struct uln_cqe e;
            int n = uln_cq_poll(cqs[i], &e, 1);
            CHECK(n >= 0);
            if (n == 0) continue;
            CHECK_OK(e.status);
            if (e.op == ULN_OP_NAP) {
                CHECKF(e.user_data == 77 && !sent_done, "a send completion not ours (%#llx)",
                       (unsigned long long)e.user_data);
                sent_done = true;
            } else {
                CHECKF(e.op == ULN_OP_NAP_RECV && !recv_done && e.peer == J.rank && e.len == 5,
                       "an unexpected completion: op %u peer %d len %llu", e.op, e.peer,
                       (unsigned long long)e.len);
                CHECK(memcmp(e.data, sent, 5) == 0);
                CHECK_OK(uln_cqe_release(cqs[i], &e));
                recv_done = true;
            }
        }
    }
}

/* The refusal of an endpoint that is not idle, and that it loses nothing. */
static void busy_refused(struct uln_ep *ep, struct uln_cq *cq, struct uln_ep *ep2,
                         struct uln_cq *scq, struct uln_cq *rcq)
{
    static const unsigned char msg[5] = {'u', 'l', 'n', '!', 0x5a};
    uint64_t keys[4096];
    unsigned char b[8] = {0};

    /* A NAP to ourselves just posted: outstanding, or already completed
     * into the CQ (shared memory completes a post at once). */
    CHECK_OK(uln_nap(ep, J.rank, msg, sizeof msg, 77, 0));
    CHECK_RC(uln_allgather(ep, b, 8, keys, 1000), -EBUSY);
    take_self_nap(cq, cq, msg);

    /* Its completions waiting on both of ep2's CQs, none taken yet. */
    CHECK_OK(uln_nap(ep2, J.rank, msg, sizeof msg, 77, 0));
    CHECK_OK(uln_cq_wait(scq, 10000));
    CHECK_OK(uln_cq_wait(rcq, 10000));
    CHECK_RC(uln_allgather(ep2, b, 8, keys, 1000), -EBUSY);
    CHECK_RC(uln_allgather(ep2, b, 8, keys, 1000), -EBUSY); /* and again: still there */
    take_self_nap(scq, rcq, msg);

    /* No rank sent anything while refused; now every call succeeds. */
    t_barrier(&J);
    for (int i = 0; i < 2; i++) {
        struct uln_ep *e = i ? ep2 : ep;
        keys[J.rank] = 0x2000u + (uint64_t)J.rank + (uint64_t)i;
        CHECK_OK(uln_allgather(e, &keys[J.rank], sizeof keys[0], keys, 60000));
        for (int r = 0; r < J.size; r++)
            CHECKF(keys[r] == 0x2000u + (uint64_t)r + (uint64_t)i,
                   "after the refusal: rank %d's key is %#llx", r, (unsigned long long)keys[r]);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    t_open(&J, 0);
    struct uln_cq *cq, *scq, *rcq;
    struct uln_ep *ep, *ep2;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    /* Endpoint index 1: sends and receives on CQs of their own. */
    CHECK_OK(uln_cq_open(J.ctx, 64, &scq));
    CHECK_OK(uln_cq_open(J.ctx, 64, &rcq));
    CHECK_OK(uln_ep_open(J.ctx, scq, rcq, &ep2));
    t_barrier(&J);

    for (int k = 0; k < rounds; k++)
        one_round(k % 3 == 2 ? ep2 : ep, k);

    /* The blob may be given in place, from this rank's own slot. */
    uint64_t keys[4096];
    keys[J.rank] = 0x1000u + (uint64_t)J.rank;
    CHECK_OK(uln_allgather(ep, &keys[J.rank], sizeof keys[0], keys, 60000));
    for (int r = 0; r < J.size; r++)
        CHECKF(keys[r] == 0x1000u + (uint64_t)r, "in place: rank %d's key is %#llx", r,
               (unsigned long long)keys[r]);

    busy_refused(ep, cq, ep2, scq, rcq);

    /* Refusals, each before anything is sent (so every rank makes them). */
    unsigned char b[8] = {0};
    unsigned char *big = malloc((size_t)J.info.nap_max + 1);
    CHECK(big != NULL);
    CHECK_RC(uln_allgather(ep, b, 0, keys, 1000), -EINVAL);
    CHECK_RC(uln_allgather(ep, NULL, 8, keys, 1000), -EINVAL);
    CHECK_RC(uln_allgather(ep, b, 8, NULL, 1000), -EINVAL);
    CHECK_RC(uln_allgather(NULL, b, 8, keys, 1000), -EINVAL);
    if (J.size > 1) {
        unsigned char *all = malloc(((size_t)J.info.nap_max + 1) * (size_t)J.size);
        CHECK(all != NULL);
        CHECK_RC(uln_allgather(ep, big, (size_t)J.info.nap_max + 1, all, 1000), -EMSGSIZE);
        free(all);
    }
    free(big);
    return t_finish(&J);
}
