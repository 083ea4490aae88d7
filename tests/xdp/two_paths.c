/*
 * two_paths.c - the AF_XDP link's two paths carry one stream (docs/xdp.md,
 * "Two paths"). Rank 0 interleaves PUTs of 16-256 KiB, whose fragments
 * leave in runs by the bound UDP socket (UDP_SEGMENT), with small NAPs,
 * which leave as AF_XDP frames (as do the ACKs both ways). Rank 1 checks
 * every NAP arrives once and in order and, once the last NAP (sent after
 * every PUT completed) is in, that every PUT's bytes are in place.
 *
 * Then both ranks' counters, in this clean run (no loss injected): rank 0's
 * link sent runs and frames both, and no packet was resent for a gap in the
 * sequence or reported missing (rel's tx_fast, lose_sent): the sequence
 * numbers span both paths, and what reaches the receiver in another order
 * than it left must not read as loss. The receiving link delivered every
 * frame after the socket's datagrams that passed its XDP program before it
 * (rx_order_held says how often a frame had to wait for them), and none
 * waited in vain (rx_order_gaps 0: no passed datagram went missing); and
 * every datagram after the frames redirected before it, which the kernel
 * may put on the ring only at the end of its batch (rx_ring_late says how
 * often the socket waited for them; rx_ring_gaps how often it gave up). No
 * packet arrived twice but by a resend: each rank's duplicates are at most
 * the resends its peer made (by the timers, which a loaded machine fires:
 * a rank descheduled for longer than the retransmission timeout). Every
 * resend is printed by its cause.
 *
 * usage: two_paths [rounds]   (default 300)
 */
#include "../integration/common.h"

#include "core/internal.h"
#include "rel/rel.h"
#include "link/link.h"

#define REGION  (4u << 20)
#define PUT_MIN (16u << 10)
#define PUT_MAX (256u << 10)
#define NAPS    3 /* after each PUT */
#define SEED    0x7e0

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;

/* The i-th PUT's length and offset, the same on both ranks. */
static void put_of(uint64_t *rng, uint64_t *len, uint64_t *off)
{
    *len = PUT_MIN + t_rand(rng) % (PUT_MAX - PUT_MIN + 1);
    *off = t_rand(rng) % (REGION - *len + 1);
}

static size_t nap_len(uint64_t seq)
{
    return 8 + (size_t)(pat_mix(seq ^ SEED) % 120);
}

/* Completions until `want` of ours are in (NAPs and PUTs sent). */
static void reap(uint64_t *done, uint64_t want)
{
    double t0 = t_now();
    while (*done < want) {
        struct uln_cqe e[64];
        int r = uln_cq_poll(cq, e, 64);
        CHECK(r >= 0);
        for (int i = 0; i < r; i++) {
            CHECK_CQE(&e[i], e[i].status == 0 && (e[i].op == ULN_OP_PUT || e[i].op == ULN_OP_NAP));
            t_release(cq, &e[i]);
        }
        *done += (uint64_t)r;
        CHECKF(t_now() - t0 < 60, "%llu of %llu completions after 60 s", (unsigned long long)*done,
               (unsigned long long)want);
    }
}

static void post(int rc_first(void *), void *arg, uint64_t *posted, uint64_t *done)
{
    int rc;
    while ((rc = rc_first(arg)) == -EAGAIN)
        reap(done, *done + 1);
    CHECKF(rc == 0, "post: %d (%s)", rc, t_errname(rc));
    ++*posted;
}

struct put_args {
    const uint8_t *src;
    uint64_t len, off, key;
};
static int do_put(void *a)
{
    struct put_args *p = a;
    return uln_put(ep, 1, p->src + p->off, p->len, p->key, p->off, 0, 0);
}

struct nap_args {
    uint8_t buf[128];
    size_t len;
};
static int do_nap(void *a)
{
    struct nap_args *n = a;
    return uln_nap(ep, 1, n->buf, n->len, 0, ULN_INLINE);
}

static void sender(int rounds, uint64_t key)
{
    uint8_t *src = t_xmalloc(REGION);
    pat_fill(src, REGION, pat_seed(0, 31, 0), 0);
    uint64_t rng = SEED, posted = 0, done = 0, seq = 0;
    for (int r = 0; r < rounds; r++) {
        struct put_args p = {.src = src, .key = key};
        put_of(&rng, &p.len, &p.off);
        post(do_put, &p, &posted, &done);
        for (int k = 0; k < NAPS; k++, seq++) {
            struct nap_args n = {.len = nap_len(seq)};
            pat_fill(n.buf, n.len, pat_seed(0, 32, seq), 0);
            memcpy(n.buf, &seq, 8);
            post(do_nap, &n, &posted, &done);
        }
        reap(&done, posted > 64 ? posted - 64 : 0); /* PUT sources stay put: one buffer */
    }
    reap(&done, posted);
    struct nap_args last = {.len = 8}; /* every PUT has completed: the data is there */
    memcpy(last.buf, &seq, 8);
    post(do_nap, &last, &posted, &done);
    reap(&done, posted);
    free(src);
}

static void receiver(int rounds, const uint8_t *region)
{
    uint64_t want = (uint64_t)rounds * NAPS, seq = 0;
    double t0 = t_now();
    while (seq <= want) {
        struct uln_cqe e = t_cq_take1(cq, 60000, "a NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.peer == 0);
        uint64_t got;
        memcpy(&got, e.data, 8);
        CHECKF(got == seq, "NAP %llu came where %llu was due", (unsigned long long)got,
               (unsigned long long)seq);
        if (seq < want) {
            CHECKF(e.len == nap_len(seq), "NAP %llu: %llu bytes", (unsigned long long)seq,
                   (unsigned long long)e.len);
            CHECKF(pat_find_diff((const uint8_t *)e.data + 8, e.len - 8, pat_seed(0, 32, seq), 8) ==
                       SIZE_MAX,
                   "NAP %llu: bytes differ", (unsigned long long)seq);
        }
        t_release(cq, &e);
        seq++;
        CHECK(t_now() - t0 < 120);
    }
    uint64_t rng = SEED;
    for (int r = 0; r < rounds; r++) {
        uint64_t len, off;
        put_of(&rng, &len, &off);
        size_t d = pat_find_diff(region + off, len, pat_seed(0, 31, 0), off);
        CHECKF(d == SIZE_MAX, "PUT %d (%llu B at %llu): byte %zu differs", r,
               (unsigned long long)len, (unsigned long long)off, d);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    t_open(&J, 2);
    CHECK(rounds > 0);
    int peer = 1 - J.rank;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    t_region_new(&J, &reg, 0, REGION, ULN_ACCESS_REMOTE_WRITE);
    pat_poison(reg.buf, REGION, pat_seed(0, 31, 0), 0);
    uint64_t mine = reg.key, all[2];
    t_exchange(&J, ep, cq, &mine, 1, all);
    if (J.rank == 0)
        sender(rounds, all[1]);
    else
        receiver(rounds, reg.buf);
    struct uln_counters before;
    CHECK_OK(uln_counters_get(J.ctx, &before));
    t_barrier(&J);

    struct uln_link_stats ls;
    CHECK_OK(uln_udp_link_stats(ep, &ls));
    struct uln_udp_conn c;
    CHECK_OK(uln_udp_conn_get(ep, peer, &c));
    struct uln_counters n;
    CHECK_OK(uln_counters_get(J.ctx, &n));
    printf("rank %d: link %llu datagrams, %llu of them in %llu UDP_SEGMENT runs; retransmits %llu "
           "(fast %llu, probe %llu, tail %llu, timeout %llu; %llu named spurious by the peer), "
           "duplicates %llu; holes reported (LOSE) "
           "%llu; frames that waited for the socket %llu (gave up %llu), read from it %llu; socket "
           "waited for the ring %llu (gave up %llu); kernel "
           "drops %llu, sends cut short %llu; dropped for want of a buffer %llu, outside the "
           "window %llu; link errors: sent %llu, bad frames %llu, cut short %llu\n",
           J.rank, (unsigned long long)ls.tx_pkts, (unsigned long long)ls.tx_gso_pkts,
           (unsigned long long)ls.tx_gso_msgs, (unsigned long long)n.retransmits,
           (unsigned long long)c.rel.tx_fast, (unsigned long long)c.rel.tx_pto,
           (unsigned long long)c.rel.tx_tlp, (unsigned long long)c.rel.tx_timeout,
           (unsigned long long)c.rel.spurious, (unsigned long long)n.duplicates,
           (unsigned long long)c.rel.lose_sent, (unsigned long long)ls.rx_order_held,
           (unsigned long long)ls.rx_order_gaps, (unsigned long long)ls.rx_sock,
           (unsigned long long)ls.rx_ring_late, (unsigned long long)ls.rx_ring_gaps,
           (unsigned long long)ls.rx_kernel_drops, (unsigned long long)ls.tx_again,
           (unsigned long long)c.rel.rx_dropped, (unsigned long long)c.rel.rx_oow,
           (unsigned long long)ls.tx_err, (unsigned long long)ls.rx_bad_frame,
           (unsigned long long)ls.rx_trunc);
    if (J.rank == 0) {
        CHECKF(ls.tx_gso_msgs > 0, "no run left by the bound socket");
        CHECKF(ls.tx_pkts > ls.tx_gso_pkts, "no frame left by AF_XDP");
    }
    /* Reordering that read as loss would show as a hole reported (LOSE) or
     * a resend after a SACK gap. Resends by the timers (tail probes, the
     * retransmission timer) are not the paths': this body shows a few tens
     * of them over the socket link alone on a loaded machine, too. */
    CHECKF(c.rel.tx_fast == 0 && c.rel.lose_sent == 0,
           "the paths' reordering read as loss: %llu resent after a gap, %llu holes reported",
           (unsigned long long)c.rel.tx_fast, (unsigned long long)c.rel.lose_sent);
    CHECKF(ls.rx_order_gaps == 0, "%llu frames waited for datagrams that never came",
           (unsigned long long)ls.rx_order_gaps);
    /* Duplicates counted before the barrier come from resends the peer made
     * before it left the barrier, so before its count below. */
    uint64_t resent = n.retransmits, peer_resent[2];
    t_exchange(&J, ep, cq, &resent, 1, peer_resent);
    CHECKF(before.duplicates <= peer_resent[peer],
           "%llu packets arrived twice, the peer resent %llu: a path delivered one twice",
           (unsigned long long)before.duplicates, (unsigned long long)peer_resent[peer]);
    t_region_free(&J, &reg);
    return t_finish(&J);
}
