/*
 * nap_order - a long NAP stream arrives exactly once and in order.
 *
 * Ranks 1..N-1 each send `count / (N-1)` NAPs to rank 0 (default count 10^6).
 * Every payload starts with its sequence number and continues with a pattern
 * of (sender, seq); sizes vary from 8 bytes to nap_max, so messages wrap the
 * receive ring at every possible alignment. Odd sequence numbers small enough
 * go with ULN_INLINE and the sender scribbles over the buffer at once.
 *
 * Rank 0 checks, per sender, that sequence numbers come 0, 1, 2, ... with the
 * right length and bytes, and that nothing arrives after the last one. It
 * releases entries in order in some stretches and holds several and releases
 * them shuffled in others: the ring must reuse space in order whatever order
 * the entries come back in, without handing out a slot that is still held.
 * Each sender checks that every NAP completes exactly once.
 *
 * usage: nap_order [count]
 */
#include "common.h"

#define PHASE_LEN 50000 /* messages per in-order / out-of-order stretch */
#define HOLD_MAX  24

static struct t_job J;

static size_t msg_size(int src, uint64_t seq)
{
    uint64_t h = pat_mix(((uint64_t)src << 40) ^ seq ^ 0xabcdef);
    uint32_t nap_max = J.info.nap_max;
    uint32_t mid = nap_max < 4096 ? nap_max : 4096;
    unsigned r = (unsigned)(h % 1024);
    size_t s;
    if (r == 0)
        s = nap_max;
    else if (r < 24)
        s = 8 + (h >> 20) % (mid - 8 + 1);
    else
        s = 8 + (h >> 20) % 249;
    return s < 8 ? 8 : s;
}

static uint64_t msg_seed(int src, uint64_t seq)
{
    return pat_seed(src, 7, seq);
}

static void fill_msg(uint8_t *buf, int src, uint64_t seq, size_t size)
{
    memcpy(buf, &seq, 8);
    pat_fill(buf + 8, size - 8, msg_seed(src, seq), 8);
}

static void sender(struct uln_ep *ep, struct uln_cq *cq, uint64_t count)
{
    uint32_t nslots = J.info.sq_depth * 2;
    uint8_t *pool = t_xmalloc((size_t)nslots * J.info.nap_max);
    uint32_t *freel = t_xmalloc(nslots * sizeof *freel);
    uint32_t nfree = nslots;
    for (uint32_t i = 0; i < nslots; i++)
        freel[i] = i;
    uint8_t *done = calloc(count, 1);
    CHECK(done != NULL);
    uint64_t next = 0, completed = 0, eagain = 0;
    double last = t_now();
    while (completed < count) {
        while (next < count && nfree > 0) {
            size_t size = msg_size(J.rank, next);
            uint32_t slot = freel[--nfree];
            uint8_t *buf = pool + (size_t)slot * J.info.nap_max;
            fill_msg(buf, J.rank, next, size);
            bool inl = (next & 1) && size <= J.info.inline_max;
            uint64_t ud = next | ((uint64_t)(inl ? 0xffffffffu : slot) << 32);
            int rc = uln_nap(ep, 0, buf, size, ud, inl ? ULN_INLINE : 0);
            if (rc == -EAGAIN) {
                freel[nfree++] = slot;
                eagain++;
                break;
            }
            CHECKF(rc == 0, "uln_nap seq %" PRIu64 " size %zu: %d (%s)", next, size, rc,
                   t_errname(rc));
            if (inl) {
                memset(buf, 0xee, size); /* the payload was copied at post time */
                freel[nfree++] = slot;
            }
            next++;
        }
        struct uln_cqe ev[64];
        int n = uln_cq_poll(cq, ev, 64);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_NAP && e->peer == 0 && e->ep == 0);
            uint64_t seq = e->user_data & 0xffffffffu;
            uint32_t slot = (uint32_t)(e->user_data >> 32);
            CHECKF(seq < next && !done[seq],
                   "completion for seq %" PRIu64 " (posted %" PRIu64 ", seen before: %d)", seq,
                   next, seq < count ? done[seq] : -1);
            CHECK_CQE(e, e->len == msg_size(J.rank, seq));
            done[seq] = 1;
            completed++;
            if (slot != 0xffffffffu) freel[nfree++] = slot;
        }
        if (n > 0) {
            last = t_now();
        } else {
            CHECKF(t_now() - last < 30,
                   "sender: no completion for 30 s, %" PRIu64 " of %" PRIu64 " complete, %" PRIu64
                   " posted",
                   completed, count, next);
            if (next == count || nfree == 0) {
                int w = uln_cq_wait(cq, 10);
                CHECK(w == 0 || w == -ETIMEDOUT);
            }
        }
    }
    t_passed += count; /* every message completed exactly once */
    printf("rank%d: sent %" PRIu64 " NAPs (%" PRIu64 " -EAGAIN retries)\n", J.rank, count, eagain);
    free(done);
    free(freel);
    free(pool);
}

static void receiver(struct uln_cq *cq, uint64_t per_sender)
{
    uint64_t *next = calloc((size_t)J.size, sizeof *next);
    CHECK(next != NULL);
    uint64_t total = 0, want = per_sender * (uint64_t)(J.size - 1);
    struct uln_cqe hold[HOLD_MAX];
    int nhold = 0;
    size_t hold_bytes = 0, hold_limit = J.info.ring_bytes / 4;
    uint64_t rng = 0x1234567;
    unsigned long held_batches = 0;
    double last = t_now(), t0 = t_now();
    while (total < want || nhold > 0) {
        struct uln_cqe ev[32];
        int n = uln_cq_poll(cq, ev, 32);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0 && e->op == ULN_OP_NAP_RECV && e->ep == 0);
            CHECK_CQE(e, e->peer >= 1 && e->peer < J.size && e->user_data == 0);
            uint64_t seq;
            CHECK_CQE(e, e->len >= 8 && e->data != NULL);
            memcpy(&seq, e->data, 8);
            CHECKF(seq == next[e->peer], "from rank %d: got seq %" PRIu64 ", expected %" PRIu64,
                   e->peer, seq, next[e->peer]);
            CHECKF(e->len == msg_size(e->peer, seq),
                   "seq %" PRIu64 " from rank %d: len %" PRIu64 ", sent %zu", seq, e->peer, e->len,
                   msg_size(e->peer, seq));
            CHECK_PAT((const uint8_t *)e->data + 8, e->len - 8, msg_seed(e->peer, seq), 8,
                      "seq %" PRIu64 " from rank %d", seq, e->peer);
            next[e->peer]++;
            bool out_of_order = (total / PHASE_LEN) & 1;
            total++;
            if (!out_of_order) {
                CHECK_OK(uln_cqe_release(cq, e));
            } else {
                CHECK_CQE(e, e->flags & ULN_CQE_MUST_RELEASE);
                hold[nhold++] = *e;
                hold_bytes += e->len + 64;
            }
            if (nhold == HOLD_MAX || hold_bytes >= hold_limit) {
                /* Fisher-Yates, then give them back in that order. */
                for (int k = nhold - 1; k > 0; k--) {
                    int r = (int)(t_rand(&rng) % (uint64_t)(k + 1));
                    struct uln_cqe tmp = hold[k];
                    hold[k] = hold[r];
                    hold[r] = tmp;
                }
                for (int k = 0; k < nhold; k++)
                    CHECK_OK(uln_cqe_release(cq, &hold[k]));
                nhold = 0;
                hold_bytes = 0;
                held_batches++;
            }
        }
        if (n > 0) {
            last = t_now();
            continue;
        }
        /* Nothing new: give back what is held (release newest first) so a
         * sender waiting for ring space can go on. */
        for (int k = nhold - 1; k >= 0; k--)
            CHECK_OK(uln_cqe_release(cq, &hold[k]));
        if (nhold) held_batches++;
        nhold = 0;
        hold_bytes = 0;
        CHECKF(t_now() - last < 30, "receiver: nothing for 30 s after %" PRIu64 " of %" PRIu64,
               total, want);
        int w = uln_cq_wait(cq, 10);
        CHECK(w == 0 || w == -ETIMEDOUT);
    }
    double dt = t_now() - t0;
    t_passed += total;
    /* Exactly once: no extra or duplicated message may trail the stream. */
    t_cq_expect_empty(cq, 200, "after the last NAP of the stream");
    printf("rank0: received %" PRIu64 " NAPs in order from %d senders in %.2f s (%.0f msg/s), "
           "%lu out-of-order release batches\n",
           total, J.size - 1, dt, total / dt, held_batches);
    CHECK(held_batches > 0);
    free(next);
}

int main(int argc, char **argv)
{
    uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
    t_open(&J, 0);
    CHECK(J.size >= 2);
    CHECK(J.info.nap_max >= 8);
    uint64_t per_sender = count / (uint64_t)(J.size - 1);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct uln_counters c0, c1;
    CHECK_OK(uln_counters_get(J.ctx, &c0));
    t_barrier(&J);

    if (J.rank == 0)
        receiver(cq, per_sender);
    else
        sender(ep, cq, per_sender);

    CHECK_OK(uln_counters_get(J.ctx, &c1));
    if (J.rank == 0) {
        CHECKF(c1.naps_received - c0.naps_received == per_sender * (uint64_t)(J.size - 1),
               "naps_received grew by %" PRIu64, c1.naps_received - c0.naps_received);
        CHECK(c1.malformed == c0.malformed);
    } else {
        CHECKF(c1.naps_sent - c0.naps_sent == per_sender, "naps_sent grew by %" PRIu64,
               c1.naps_sent - c0.naps_sent);
    }
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
