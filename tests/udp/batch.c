/*
 * batch.c - when packets leave over udp (ulnet.h, "When packets leave").
 *
 * Two ranks under ulnrun, ULN_TRANSPORT=udp (loopback). Each counts its own
 * sendmmsg system calls through the link's test hook and checks the rule:
 *   - a NAP to a peer with nothing in flight leaves inside the post;
 *   - a burst of NAPs while packets are in flight makes no system call until
 *     the batch is full (64 packets) or the next poll, which sends it at once,
 *     the small NAPs bundled several to a datagram;
 *   - a target that has not posted lately answers a PUT in the progress pass
 *     that placed it: the initiator's PUT completes while the target sleeps;
 *   - a target that posted lately holds the PUT's ACK for its next post, and
 *     both leave in one system call, as one datagram (the ACK in front).
 *     "Lately" is 200 us of the clock, which a loaded machine can overrun
 *     between a post and the PUT's arrival, so the test widens it through a
 *     hook (uln_udp_test_answer_hold) and asserts the rule in every round.
 * Rank 1 also checks that every NAP arrived, in order.
 */
#include "../integration/common.h"
#include "../fuzz/udp_wire.h"

#include <netinet/udp.h>
#include <sys/socket.h>

#include "core/internal.h"
#include "core/wire.h"
#include "rel/rel.h"
#include "link/link.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define BURST   40
#define BIG     130 /* two full batches and some */
#define ROUNDS  20  /* rounds of the held ACK, each checked */
#define LOG_MAX 65536

void uln_link_udp_test_hook_sendmmsg(int (*fn)(int, struct mmsghdr *, unsigned int, int));

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static unsigned long calls; /* sendmmsg calls made */
static struct {
    unsigned dgrams;  /* datagrams each one carried */
    unsigned pkts;    /* ... and packets in them (a bundle carries several) */
    unsigned acks;    /* ... of them the engine's ACKs (a PUT's answer) */
    unsigned bundled; /* ... of those riding in front of another packet */
} sent[LOG_MAX];

/* A message's UDP_SEGMENT size: 0 if it is one datagram. */
static size_t msg_seg(const struct mmsghdr *m)
{
    struct msghdr *h = (struct msghdr *)&m->msg_hdr;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_SEGMENT) {
            uint16_t seg;
            memcpy(&seg, CMSG_DATA(c), sizeof seg);
            return seg;
        }
    return 0;
}

/* Datagrams in one message: a UDP_SEGMENT run is cut at its segment size. */
static unsigned msg_dgrams(const struct mmsghdr *m)
{
    size_t len = 0;
    for (size_t i = 0; i < m->msg_hdr.msg_iovlen; i++)
        len += m->msg_hdr.msg_iov[i].iov_len;
    struct msghdr *h = (struct msghdr *)&m->msg_hdr;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_SEGMENT) {
            uint16_t seg;
            memcpy(&seg, CMSG_DATA(c), sizeof seg);
            return seg ? (unsigned)((len + seg - 1) / seg) : 1;
        }
    return 1;
}

/* Packets in one datagram: a bundle is cut where its packets' headers say
 * (udp_wire.h, from docs/protocol.md). */
static unsigned dgram_pkts(const uint8_t *p, size_t n)
{
    unsigned k = 1;
    while (n >= 2 * sizeof(struct uw_hdr) && (p[1] & UW_MORE)) {
        size_t len = uw_self_len(p, n);
        if (len == 0 || len + sizeof(struct uw_hdr) > n) break;
        p += len, n -= len, k++;
    }
    return k;
}

/* Packets in one message: its bytes cut into datagrams, each walked. */
static unsigned msg_pkts(const struct mmsghdr *m)
{
    static uint8_t flat[1 << 16];
    size_t len = 0;
    for (size_t i = 0; i < m->msg_hdr.msg_iovlen; i++) {
        const struct iovec *v = &m->msg_hdr.msg_iov[i];
        CHECK(len + v->iov_len <= sizeof flat);
        memcpy(flat + len, v->iov_base, v->iov_len);
        len += v->iov_len;
    }
    size_t seg = msg_seg(m);
    if (seg == 0) seg = len ? len : 1;
    unsigned k = 0;
    for (size_t at = 0; at < len; at += seg)
        k += dgram_pkts(flat + at, len - at < seg ? len - at : seg);
    return k;
}

static int counting_sendmmsg(int fd, struct mmsghdr *m, unsigned int n, int flags)
{
    int r = sendmmsg(fd, m, n, flags);
    unsigned d = 0, a = 0, bundled = 0, pk = 0;
    for (int i = 0; i < r; i++) {
        d += msg_dgrams(&m[i]);
        pk += msg_pkts(&m[i]);
        /* The packet's first byte: version << 4 | type (docs/protocol.md). */
        const uint8_t *b = m[i].msg_hdr.msg_iov[0].iov_base;
        bool ack = m[i].msg_hdr.msg_iov[0].iov_len > 1 && (b[0] & 15) == ULN_MSG_ACK;
        a += ack;
        bundled += ack && (b[1] & UW_MORE);
    }
    sent[calls % LOG_MAX].dgrams = d;
    sent[calls % LOG_MAX].pkts = pk;
    sent[calls % LOG_MAX].acks = a;
    sent[calls % LOG_MAX].bundled = bundled;
    calls++;
    return r;
}

static uint32_t in_flight(int peer)
{
    struct uln_udp_conn c;
    CHECK_OK(uln_udp_conn_get(ep, peer, &c));
    return c.snd_nxt - c.snd_una;
}

/* Poll until the connection is open and everything we posted has gone to
 * peer and been acknowledged. */
static void settle(int peer)
{
    double deadline = t_now() + 10;
    struct uln_cqe e[16];
    struct uln_udp_conn c;
    while (uln_udp_conn_get(ep, peer, &c) != 0 || c.state != ULN_REL_OPEN || in_flight(peer) != 0 ||
           uln_ep_busy(ep)) {
        CHECKF(t_now() < deadline, "%u packets to rank %d never acknowledged", in_flight(peer),
               peer);
        int k = uln_cq_poll(cq, e, 16);
        CHECK(k >= 0);
        for (int i = 0; i < k; i++)
            t_release(cq, &e[i]);
    }
}

static void nap_seq(uint32_t seq)
{
    CHECK_OK(uln_nap(ep, 1, &seq, sizeof seq, 0, ULN_SILENT | ULN_INLINE));
}

/* Rank 0: a lone NAP, a burst, two full batches. */
static void sender(void)
{
    uint32_t seq = 0;
    nap_seq(seq++); /* the first contact: hello, then this NAP */
    settle(1);
    unsigned long c = calls;
    nap_seq(seq++);
    CHECKF(calls == c + 1, "a lone NAP made %lu system calls inside its post", calls - c);
    CHECK(in_flight(1) > 0); /* no poll since: nothing can have been acknowledged */

    c = calls;
    for (int i = 0; i < BURST; i++)
        nap_seq(seq++);
    CHECKF(calls == c, "a burst of %d NAPs made %lu system calls before a poll", BURST, calls - c);
    struct uln_cqe e[16];
    CHECK(uln_cq_poll(cq, e, 16) >= 0);
    CHECKF(calls > c && sent[c % LOG_MAX].pkts >= BURST,
           "the poll after the burst sent %u packets in its first call (%lu calls)",
           calls > c ? sent[c % LOG_MAX].pkts : 0, calls - c);
    CHECKF(sent[c % LOG_MAX].dgrams < sent[c % LOG_MAX].pkts / 8,
           "the burst's %u small NAPs went in %u datagrams: not bundled", sent[c % LOG_MAX].pkts,
           sent[c % LOG_MAX].dgrams);

    settle(1);
    nap_seq(seq++); /* lone: leaves at once, and the rest find it in flight */
    c = calls;
    for (int i = 0; i < BIG; i++)
        nap_seq(seq++);
    CHECKF(calls == c + BIG / ULN_LINK_BATCH,
           "%d NAPs after a lone one made %lu system calls, expected one per full batch", BIG,
           calls - c);
    for (unsigned long k = c; k < calls; k++)
        CHECKF(sent[k % LOG_MAX].pkts == ULN_LINK_BATCH && sent[k % LOG_MAX].dgrams < 8,
               "a full batch carried %u packets in %u datagrams", sent[k % LOG_MAX].pkts,
               sent[k % LOG_MAX].dgrams);
    nap_seq(UINT32_MAX); /* the end */
}

static void receiver(void)
{
    uint32_t want = 0;
    for (;;) {
        struct uln_cqe e = t_cq_take1(cq, 10000, "the sender's NAPs");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.len == sizeof(uint32_t));
        uint32_t got;
        memcpy(&got, e.data, sizeof got);
        t_release(cq, &e);
        if (got == UINT32_MAX) break;
        CHECKF(got == want, "NAP %u arrived where %u was due", got, want);
        want++;
    }
    CHECKF(want == 3 + BURST + BIG, "%u NAPs arrived", want);
}

/* Rank 1 owns the region the PUTs go to; its key goes to rank 0. */
static volatile uint64_t *region;
static struct uln_mr *mr;

static uint64_t key_exchange(void)
{
    uint64_t key = 0;
    if (J.rank == 1) {
        CHECK_OK(uln_mem_alloc(J.ctx, 4096, (void **)&region));
        memset((void *)region, 0, 4096);
        CHECK_OK(uln_mr_reg(J.ctx, (void *)region, 4096, ULN_ACCESS_REMOTE_WRITE, &mr));
        key = uln_mr_key(mr);
        CHECK_OK(uln_nap(ep, 0, &key, sizeof key, 0, ULN_SILENT | ULN_INLINE));
    } else {
        struct uln_cqe e = t_cq_take1(cq, 10000, "rank 1's key");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == sizeof key);
        memcpy(&key, e.data, sizeof key);
        t_release(cq, &e);
    }
    return key;
}

/* Rank 1: poll until the PUT's value is in place. */
static void wait_value(uint64_t v)
{
    double deadline = t_now() + 10;
    struct uln_cqe e[16];
    while (region[0] != v) {
        CHECKF(t_now() < deadline, "PUT of %" PRIu64 " never landed", v);
        CHECK(uln_cq_poll(cq, e, 16) >= 0);
    }
}

static void put_value(uint64_t key, uint64_t v)
{
    static uint64_t src;
    src = v;
    CHECK_OK(uln_put(ep, 1, &src, sizeof src, key, 0, v, 0));
}

/* An idle target answers at once: rank 1 polls only until the data is there,
 * then sleeps; rank 0's PUT must complete meanwhile. */
static void idle_target(uint64_t key)
{
    if (J.rank == 0) {
        put_value(key, 1);
        struct uln_cqe e = t_cq_take1(cq, 2000, "the PUT's completion, the target asleep");
        CHECK_CQE(&e, e.op == ULN_OP_PUT && e.status == 0 && e.user_data == 1);
    } else {
        t_sleep_ms(5); /* nothing posted lately: no reason to hold answers */
        wait_value(1);
        t_sleep_ms(3000); /* longer than rank 0 waits: it must not need us */
    }
    t_barrier(&J);
}

/* Rank 0's view of busy_target's messages: the latest go, reply and PUT
 * completion (the CQ may hold the next round's go before this round's PUT). */
#define REPLY (1ull << 63)
static uint64_t go_seen, reply_seen, put_seen;

static void take_one(void)
{
    struct uln_cqe e = t_cq_take1(cq, 10000, "rank 1's go or reply, or the PUT's completion");
    CHECK_CQE(&e, e.status == 0 && (e.op == ULN_OP_PUT || e.op == ULN_OP_NAP_RECV));
    if (e.op == ULN_OP_PUT) {
        put_seen = e.user_data;
    } else {
        uint64_t v;
        CHECK_CQE(&e, e.len == sizeof v);
        memcpy(&v, e.data, sizeof v);
        if (v & REPLY)
            reply_seen = v & ~REPLY;
        else
            go_seen = v;
    }
    t_release(cq, &e);
}

/* A busy target: rank 1 posts "go" (it is busy now), polls until rank 0's PUT
 * has landed - the pass that places it makes the ACK, and holds it since a
 * post came lately - and posts its reply: ACK and reply leave in one system
 * call, as one datagram (the ACK rides in front of the reply: a bundle). The hold is widened to 10
 * s, so however late the PUT comes (a loaded machine), it comes "lately"; what is checked is the
 * rule, every round. */
static void busy_target(uint64_t key)
{
    if (J.rank == 1) uln_udp_test_answer_hold(10ull * 1000000000u);
    for (uint64_t r = 2; r < 2 + ROUNDS; r++) {
        if (J.rank == 1) {
            CHECK_OK(uln_nap(ep, 0, &r, sizeof r, 0, ULN_SILENT | ULN_INLINE));
            wait_value(r);
            unsigned long c = calls;
            uint64_t v = r | REPLY;
            CHECK_OK(uln_nap(ep, 0, &v, sizeof v, 0, ULN_SILENT | ULN_INLINE));
            CHECKF(calls == c + 1 && sent[c % LOG_MAX].acks == 1,
                   "round %" PRIu64 ": the reply made %lu system calls, the first with %u ACKs; "
                   "expected one, with the PUT's ACK",
                   r, calls - c, calls > c ? sent[c % LOG_MAX].acks : 0);
            CHECKF(sent[c % LOG_MAX].dgrams == 1 && sent[c % LOG_MAX].bundled == 1,
                   "round %" PRIu64 ": the reply went in %u datagrams, %u of them led by the "
                   "ACK; expected one datagram, the ACK in front of the reply",
                   r, sent[c % LOG_MAX].dgrams, sent[c % LOG_MAX].bundled);
        } else {
            while (go_seen < r)
                take_one();
            put_value(key, r);
            while (put_seen < r || reply_seen < r)
                take_one();
            CHECK(put_seen == r && reply_seen == r);
        }
    }
    if (J.rank == 1) uln_udp_test_answer_hold(0);
}

int main(void)
{
    uln_link_udp_test_hook_sendmmsg(counting_sendmmsg);
    t_open(&J, 2);
    CHECKF(J.info.udp_peers == 1, "this test needs ULN_TRANSPORT=udp");
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    if (J.rank == 0)
        sender();
    else
        receiver();
    t_barrier(&J);
    uint64_t key = key_exchange();
    idle_target(key);
    busy_target(key);
    int rc = t_finish(&J);
    return rc;
}
