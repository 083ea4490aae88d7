/*
 * fuzz_engine_rx.c - fuzz target: arbitrary engine messages in the inbox
 * rings, as a peer on the same host writes them, into the receive side of
 * src/core/engine.c - take_data (NAP, PUT_FRAG placement, PUT_NOTIFY,
 * GET_RESP, ACK, PUT_DONE, ATOMIC_RESP, unknown types) and serve_gets (GET
 * and atomic requests) - on a real context
 * (fuzz_common.h) whose peer, rank 1, is reached over shared memory.
 *
 * Rank 1 is a real context that nobody drives: the harness writes rank 1's
 * rings in rank 0's inbox with the ring code a peer uses (ring.h), and reads
 * and discards what rank 0 writes into rank 1's inbox (ACKs, GET data, our
 * own operations' requests), so rank 0 is never held back by a full ring.
 * Rank 0 runs with shm_direct 0: its own PUTs and GETs go through the rings
 * and wait for answers, which the input may forge.
 *
 * (Over UDP the same messages are written by rank 0's own receive path; the
 * fuzz_udp_rx target covers that way in, PUT_DONE included.)
 *
 * An input is a sequence of records  kind:u8 mods:u8 len:u16le bytes[len]:
 *   kind % 5  0  a message on channel 0 (data): bytes[0] type, bytes[1]
 *                flags, the rest its payload (its length is the message's)
 *             1  the same on channel 1 (GET requests)
 *             2  1 + mods % 8 progress passes
 *             3  post an operation of ours to rank 1 (fz_post)
 *             4  from now on keep NAP_RECV entries (a slow application)
 * mods of a message:
 *   0x10  ACK, GET_RESP, PUT_DONE, ATOMIC_RESP: the op id (first 8 payload
 *         bytes) += this input's first op id
 *   0x20  PUT_FRAG, GET_REQ, ATOMIC_REQ: the key (first 8 payload bytes) :=
 *         region key
 *         (rw, ro, wo, deregistered)[key % 4]
 *   0x80  a progress pass afterwards
 *
 * Per input: the harness answers every operation of ours still waiting (as a
 * peer that refuses it), waits until all completed and everything rank 1
 * wrote was consumed, then checks memory (fz_memory_check).
 */
#include "fuzz_common.h"

static struct uln_ring_prod forge[2]; /* rank 1's rings in rank 0's inbox */
static struct uln_ring_cons sink[2];  /* rank 0's rings in rank 1's inbox */

static void sink_drain(void)
{
    for (int ch = 0; ch < 2; ch++) {
        int bad = 0;
        struct uln_msg *m;
        while ((m = uln_ring_peek(&sink[ch], &bad)))
            uln_ring_release(&sink[ch], m);
        if (bad) fz_die("rank 0 wrote a broken message to rank 1 on channel %d", ch);
    }
}

static void poll_once(void)
{
    fz_poll(false);
    sink_drain();
}

static void setup(void)
{
    fz_open("shm", 0);
    struct uln_ctx *c0 = F.ctx[0], *c1 = F.ctx[1];
    for (int ch = 0; ch < 2; ch++) {
        uint32_t bytes = uln_inbox_ring_bytes(ch, &c0->p);
        uln_ring_prod_init(&forge[ch], uln_inbox_ring_in(c0, 1, 0, ch), bytes);
        uln_ring_cons_init(&sink[ch], uln_inbox_ring_in(c1, 0, 0, ch), bytes);
        /* What rank 1's first message on a channel does: rank 0 polls it
         * (the bit, and the bump that tells rank 0 to look at the bits). */
        uln_inbox_mark_active(uln_inbox_active(c0, ch, 0), &c0->inbox->hdr->act_gen, 1);
    }
}

/* Write one message as rank 1; false if the ring has no room. */
static bool forge_msg(int ch, uint8_t type, uint8_t flags, const uint8_t *p, uint32_t n)
{
    uint8_t *d = uln_ring_reserve(&forge[ch], n);
    if (!d) return false;
    if (n) memcpy(d, p, n);
    uln_ring_commit(&forge[ch], type, flags, n, 0);
    return true;
}

static void message(int ch, unsigned mods, const uint8_t *b, size_t n)
{
    if (n < 2) return;
    uint8_t type = b[0], flags = b[1];
    uint8_t p[65536];
    uint32_t len = (uint32_t)(n - 2);
    memcpy(p, b + 2, len);
    uint64_t first;
    if (len >= 8) {
        memcpy(&first, p, 8);
        if ((mods & 0x10) && (type == ULN_MSG_ACK || type == ULN_MSG_GET_RESP ||
                              type == ULN_MSG_PUT_DONE || type == ULN_MSG_ATOMIC_RESP))
            first += F.op_base;
        if ((mods & 0x20) &&
            (type == ULN_MSG_PUT_FRAG || type == ULN_MSG_GET_REQ || type == ULN_MSG_ATOMIC_REQ))
            first = F.keys[first % FZ_NREG];
        memcpy(p, &first, 8);
    }
    forge_msg(ch, type, flags, p, len); /* a full ring: the message is not sent */
}

/* Answer every operation of ours still waiting with a refusal (an ACK for a
 * PUT, GET data with a status for a GET, ATOMIC_RESP for an atomic: the
 * others are ignored). */
static void refuse_waiting(void)
{
    for (uint64_t pos = F.ep->sq_head; pos != F.ep->sq_tail; pos++) {
        struct uln_ack a = {.op_id = pos, .status = -ECANCELED};
        struct uln_get_resp g = {.op_id = pos, .status = -ECANCELED};
        struct uln_atomic_resp r = {.op_id = pos, .status = -ECANCELED};
        for (int i = 0; i < 1000 && !forge_msg(0, ULN_MSG_ACK, 0, (void *)&a, sizeof a); i++)
            poll_once();
        for (int i = 0; i < 1000 && !forge_msg(0, ULN_MSG_GET_RESP, 0, (void *)&g, sizeof g); i++)
            poll_once();
        for (int i = 0; i < 1000 && !forge_msg(0, ULN_MSG_ATOMIC_RESP, 0, (void *)&r, sizeof r);
             i++)
            poll_once();
    }
}

static void begin(void)
{
    if (!F.open) setup();
    F.op_base = F.ep->sq_tail;
    /* The engine remembers the last refused PUT of a peer by the peer's own
     * op id; the previous input's must not decide this one's. */
    F.ep->peers[1].refused = (struct uln_refused_put){0};
}

static void end(void)
{
    for (int i = 0; i < 4; i++)
        poll_once();
    fz_release_held();
    /* Answer in rounds: an operation queued behind others (a PUT larger than
     * the in-call copy, or one after a full ring) is issued only as the ones
     * ahead of it complete, and an answer that comes before its issue is
     * ignored, as it must be. */
    for (int round = 0; round < 100 && F.ep->sq_head != F.ep->sq_tail; round++) {
        refuse_waiting();
        for (int i = 0; i < 200 && F.ep->sq_head != F.ep->sq_tail; i++)
            poll_once();
    }
    if (F.ep->sq_head != F.ep->sq_tail) fz_die("our operations never completed, all answered");
    /* Everything rank 1 wrote consumed, every GET served, every ACK sent. */
    const struct uln_ep_peer *pp = &F.ep->peers[1];
    for (int i = 0; i < 20000; i++) {
        if (!pp->get_req && pp->ack_head == pp->ack_tail &&
            atomic_load(&forge[0].ctrl->head) == forge[0].tail &&
            atomic_load(&forge[1].ctrl->head) == forge[1].tail)
            break;
        poll_once();
    }
    if (pp->get_req || pp->ack_head != pp->ack_tail) fz_die("rank 0 stopped answering rank 1");
    if (atomic_load(&forge[0].ctrl->head) != forge[0].tail ||
        atomic_load(&forge[1].ctrl->head) != forge[1].tail)
        fz_die("rank 0 stopped taking rank 1's messages");
    fz_memory_check();
    fz_report();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    begin();
    size_t at = 0;
    struct fz_record r;
    while (fz_next_record(data, size, &at, &r)) {
        unsigned kind = r.kind % 5, mods = r.mods;
        const uint8_t *b = r.b;
        size_t n = r.n;
        switch (kind) {
        case 0:
        case 1:
            message((int)kind, mods, b, n);
            break;
        case 2:
            for (unsigned i = 0; i <= mods % 8; i++)
                poll_once();
            break;
        case 3:
            fz_post(b, n);
            break;
        default:
            F.hold_naps = true;
            break;
        }
        if (mods & FZ_M_POLL) poll_once();
    }
    end();
    return 0;
}
