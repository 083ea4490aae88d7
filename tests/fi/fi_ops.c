/*
 * fi_ops - the ulnet provider through the fi_* API, two ranks under ulnrun:
 * tagged and untagged messages from 0 B through rendezvous sizes, iov lists,
 * remote CQ data, FI_SOURCE, inject, wildcards and ignore bits, unexpected
 * messages, truncation (FI_ETRUNC with olen), fi_cancel, FI_PEEK/FI_CLAIM,
 * and RMA with its error completions. Every byte is checked.
 *
 * Names are exchanged through files in the directory given as argv[1]
 * (ulnet's names are opaque: the test never builds one).
 * Usage: ulnrun -n 2 fi_ops DIR
 */
#include "fi_common.h"

#include <errno.h>
#include <stdbool.h>
#include <rdma/fi_rma.h>

static struct fic fx;
static fi_addr_t self;
static uint8_t pat(uint64_t seed, size_t i)
{
    return (uint8_t)(seed * 131 + i * 7 + (i >> 9));
}
static void fill(void *b, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)b)[i] = pat(seed, i);
}
static size_t bad_bytes(const void *b, size_t n, uint64_t seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += ((const uint8_t *)b)[i] != pat(seed, i);
    return bad;
}

/* Completions arrive in any order: those not waited for yet wait in a stash. */
struct comp {
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    int err; /* 0, or the FI_E* of an error entry */
    size_t olen;
    int prov_errno;
};
static struct comp stash[64];
static int nstash;

static void poll_one(void)
{
    struct comp c = {0};
    ssize_t n = fi_cq_readfrom(fx.cq, &c.e, 1, &c.src);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        OK(fi_cq_readerr(fx.cq, &err, 0));
        c.e.op_context = err.op_context;
        c.e.flags = err.flags;
        c.e.len = err.len;
        c.e.tag = err.tag;
        c.e.data = err.data;
        c.err = err.err;
        c.olen = err.olen;
        c.prov_errno = err.prov_errno;
        c.src = FI_ADDR_NOTAVAIL;
    } else {
        OK(n);
    }
    if (nstash == 64) {
        fprintf(stderr, "rank %d: stash full\n", rank);
        exit(1);
    }
    stash[nstash++] = c;
}

static struct comp wait_ctx(void *ctx)
{
    for (long spins = 0;; spins++) {
        for (int i = 0; i < nstash; i++)
            if (stash[i].e.op_context == ctx) {
                struct comp c = stash[i];
                stash[i] = stash[--nstash];
                return c;
            }
        poll_one();
        if (spins > 400000000L) {
            fprintf(stderr, "rank %d: no completion for %p\n", rank, ctx);
            exit(1);
        }
    }
}

static struct comp wait_ok(void *ctx)
{
    struct comp c = wait_ctx(ctx);
    if (c.err) {
        fprintf(stderr, "rank %d: error completion %d (%s) prov %d\n", rank, c.err,
                fi_strerror(c.err), c.prov_errno);
        exit(1);
    }
    return c;
}

/* -FI_EAGAIN is fi_msg(3)'s "progress, then try again": every post does so. */
static void tsend(const void *b, size_t n, uint64_t tag, void *ctx)
{
    ssize_t r;
    while ((r = fi_tsend(fx.ep, b, n, NULL, fx.peer, tag, ctx)) == -FI_EAGAIN)
        poll_one();
    OK(r);
}

static void trecv(void *b, size_t n, uint64_t tag, void *ctx)
{
    ssize_t r;
    while ((r = fi_trecv(fx.ep, b, n, NULL, fx.peer, tag, 0, ctx)) == -FI_EAGAIN)
        poll_one();
    OK(r);
}

/* A barrier over the provider itself: a tagged 0-byte exchange. */
#define SYNC_TAG 0x4000000000000000ull
static void sync_peers(void)
{
    static uint64_t n;
    struct fi_context c1, c2;
    trecv(NULL, 0, SYNC_TAG | n, &c1);
    tsend(NULL, 0, SYNC_TAG | n, &c2);
    n++;
    wait_ok(&c1);
    wait_ok(&c2);
}

/* 1. sizes from 0 B through rendezvous, both ways, every byte checked */
static void test_sizes(void)
{
    static const size_t sizes[] = {0,    1,    7,    64,    104,     105,     4096,
                                   8167, 8168, 8169, 65536, 1 << 20, 16 << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        uint8_t *s = malloc(n + 1), *r = malloc(n + 1);
        fill(s, n, 100 + k + rank);
        memset(r, 0, n + 1);
        struct fi_context cs, cr;
        OK(fi_trecv(fx.ep, r, n, NULL, fx.peer, 10 + k, 0, &cr));
        tsend(s, n, 10 + k, &cs);
        struct comp c = wait_ok(&cr);
        CHECK(c.e.len == n);
        CHECK(c.e.tag == 10 + k);
        CHECK((c.e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED));
        CHECK(c.src == fx.peer);
        CHECK(bad_bytes(r, n, 100 + k + !rank) == 0);
        c = wait_ok(&cs);
        CHECK((c.e.flags & (FI_SEND | FI_TAGGED)) == (FI_SEND | FI_TAGGED));
        free(s);
        free(r);
    }
}

/* 2. unexpected messages, wildcards, ignore bits, remote CQ data */
static void test_unexpected(void)
{
    enum { N = 8 };
    static uint8_t big[N][20000];
    struct fi_context cs[N], cr[N];
    if (rank == 1) {
        for (int i = 0; i < N; i++) {
            size_t n = i & 1 ? sizeof(big[i]) : (size_t)(100 + i); /* eager and rendezvous */
            fill(big[i], n, 500 + i);
            ssize_t r;
            while ((r = fi_tsenddata(fx.ep, big[i], n, NULL, 0xd000 + i, fx.peer, 0x7000 + i,
                                     &cs[i])) == -FI_EAGAIN)
                poll_one();
            OK(r);
        }
        sync_peers(); /* rank 0 posts only now: all N arrive unexpected */
        for (int i = 0; i < N; i++)
            wait_ok(&cs[i]);
        sync_peers();
        return;
    }
    sync_peers();
    /* take them in reverse: tag chooses, not arrival order */
    for (int i = N - 1; i >= 2; i--) {
        memset(big[i], 0, sizeof(big[i]));
        OK(fi_trecv(fx.ep, big[i], sizeof(big[i]), NULL, FI_ADDR_UNSPEC, 0x7000 + i, 0, &cr[i]));
        struct comp c = wait_ok(&cr[i]);
        size_t n = i & 1 ? sizeof(big[i]) : (size_t)(100 + i);
        CHECK(c.e.len == n);
        CHECK(c.e.tag == 0x7000u + i);
        CHECK(c.e.flags & FI_REMOTE_CQ_DATA);
        CHECK(c.e.data == 0xd000u + i);
        CHECK(bad_bytes(big[i], n, 500 + i) == 0);
    }
    /* tags 0x7000 and 0x7001 left: ignore bit 0 matches the older first */
    for (int i = 0; i < 2; i++) {
        memset(big[i], 0, sizeof(big[i]));
        OK(fi_trecv(fx.ep, big[i], sizeof(big[i]), NULL, fx.peer, 0x7000, 0x1, &cr[i]));
        struct comp c = wait_ok(&cr[i]);
        CHECK(c.e.tag == 0x7000u + i);
        CHECK(bad_bytes(big[i], c.e.len, 500 + i) == 0);
    }
    sync_peers();
}

/* 3. truncation: eager and rendezvous into a smaller buffer */
static void test_trunc(void)
{
    static uint8_t s[50000], r[50000];
    const size_t sizes[2] = {3000, 50000}, room[2] = {1000, 20000};
    for (int k = 0; k < 2; k++) {
        struct fi_context cs, cr;
        if (rank == 1) {
            fill(s, sizes[k], 900 + k);
            tsend(s, sizes[k], 0x900 + k, &cs);
            wait_ok(&cs);
        } else {
            memset(r, 0, sizeof(r));
            OK(fi_trecv(fx.ep, r, room[k], NULL, fx.peer, 0x900 + k, 0, &cr));
            struct comp c = wait_ctx(&cr);
            CHECK(c.err == FI_ETRUNC);
            CHECK(c.olen == sizes[k] - room[k]);
            CHECK(c.e.len == room[k]);
            CHECK(bad_bytes(r, room[k], 900 + k) == 0);
            CHECK(r[room[k]] == 0);
        }
        sync_peers();
    }
}

/* FI_INJECT as a flag of fi_sendmsg/fi_tsendmsg: the buffer is free on
 * return, and unlike fi_inject the send still completes (fi_msg(3)); an
 * fi_inject before it leaves no entry behind. */
static void test_inject_flag(uint8_t *s, uint8_t *r)
{
    struct fi_context cs[2], cr[2];
    if (rank == 1) {
        ssize_t rc;
        fill(s, 3000, 43);
        while ((rc = fi_inject(fx.ep, s, 100, fx.peer)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        struct iovec iov = {s, 3000};
        struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = fx.peer, .context = &cs[0]};
        while ((rc = fi_sendmsg(fx.ep, &m, FI_INJECT)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        struct fi_msg_tagged t = {
            .msg_iov = &iov, .iov_count = 1, .addr = fx.peer, .tag = 0x4343, .context = &cs[1]};
        while ((rc = fi_tsendmsg(fx.ep, &t, FI_INJECT | FI_COMPLETION)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        memset(s, 0, 3000);
        CHECK((wait_ok(&cs[0]).e.flags & (FI_SEND | FI_MSG)) == (FI_SEND | FI_MSG));
        CHECK((wait_ok(&cs[1]).e.flags & (FI_SEND | FI_TAGGED)) == (FI_SEND | FI_TAGGED));
    } else {
        OK(fi_recv(fx.ep, r, 100, NULL, fx.peer, &cr[0]));
        CHECK(wait_ok(&cr[0]).e.len == 100 && bad_bytes(r, 100, 43) == 0);
        OK(fi_recv(fx.ep, r, 3000, NULL, fx.peer, &cr[0]));
        OK(fi_trecv(fx.ep, r + 3000, 3000, NULL, fx.peer, 0x4343, 0, &cr[1]));
        CHECK(wait_ok(&cr[0]).e.len == 3000 && bad_bytes(r, 3000, 43) == 0);
        CHECK(wait_ok(&cr[1]).e.len == 3000 && bad_bytes(r + 3000, 3000, 43) == 0);
    }
    sync_peers();
    for (int i = 0; i < 1000; i++)
        poll_one();
    CHECK(nstash == 0); /* the fi_inject raised nothing */
}

/* FI_DELIVERY_COMPLETE (fi_cq(3)): a send completes only once its data is in
 * the receive buffer, so not while the receiver has posted no receive for it,
 * even at a size that would go eager; with FI_INJECT its buffer is still free
 * at return. The receiver posts only after the sender has looked. */
static void test_delivery(uint8_t *s, uint8_t *r)
{
    struct fi_context cs[2], cr[2], go;
    if (rank == 1) {
        fill(s, 200, 44);
        struct iovec iov = {s, 200};
        struct fi_msg_tagged t = {
            .msg_iov = &iov, .iov_count = 1, .addr = fx.peer, .tag = 0x4444, .context = &cs[0]};
        ssize_t rc;
        while ((rc = fi_tsendmsg(fx.ep, &t, FI_DELIVERY_COMPLETE)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        /* the first send's buffer is ours again only at its completion */
        memcpy(s + 200, s, 200);
        iov.iov_base = s + 200;
        t.context = &cs[1];
        t.tag = 0x4445;
        while ((rc = fi_tsendmsg(fx.ep, &t, FI_DELIVERY_COMPLETE | FI_INJECT)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        memset(s + 200, 0, 200);
        for (int i = 0; i < 20000; i++)
            poll_one();
        for (int i = 0; i < nstash; i++)
            CHECK(stash[i].e.op_context != &cs[0] && stash[i].e.op_context != &cs[1]);
        tsend(NULL, 0, 0x4446, &go);
        wait_ok(&go);
        wait_ok(&cs[0]);
        wait_ok(&cs[1]);
    } else {
        trecv(NULL, 0, 0x4446, &go);
        wait_ok(&go);
        trecv(r, 200, 0x4444, &cr[0]);
        trecv(r + 200, 200, 0x4445, &cr[1]);
        CHECK(wait_ok(&cr[0]).e.len == 200 && bad_bytes(r, 200, 44) == 0);
        CHECK(wait_ok(&cr[1]).e.len == 200 && bad_bytes(r + 200, 200, 44) == 0);
    }
    sync_peers();
}

/* 4. iov lists on both sides, untagged messages, inject, FI_SOURCE */
static void test_iov_msg(void)
{
    static uint8_t s[30000], r[30000];
    const size_t total[2] = {5000, 30000}; /* eager, rendezvous */
    for (int k = 0; k < 2; k++) {
        size_t n = total[k];
        struct fi_context cs, cr;
        if (rank == 1) {
            fill(s, n, 700 + k);
            struct iovec iov[3] = {{s, 1}, {s + 1, n / 2}, {s + 1 + n / 2, n - 1 - n / 2}};
            ssize_t rc;
            while ((rc = fi_sendv(fx.ep, iov, NULL, 3, fx.peer, &cs)) == -FI_EAGAIN)
                poll_one();
            OK(rc);
            struct comp c = wait_ok(&cs);
            CHECK((c.e.flags & (FI_SEND | FI_MSG)) == (FI_SEND | FI_MSG));
        } else {
            memset(r, 0, sizeof(r));
            struct iovec iov[4] = {{r, 3}, {r + 3, 0}, {r + 3, n / 3}, {r + 3 + n / 3, n}};
            OK(fi_recvv(fx.ep, iov, NULL, 4, FI_ADDR_UNSPEC, &cr));
            struct comp c = wait_ok(&cr);
            CHECK(c.e.len == n);
            CHECK((c.e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG));
            CHECK(c.src == fx.peer);
            CHECK(bad_bytes(r, n, 700 + k) == 0);
        }
        sync_peers();
    }
    /* inject: the buffer is free on return, no completion */
    struct fi_context cr;
    if (rank == 1) {
        fill(s, 4000, 42);
        ssize_t rc;
        while ((rc = fi_tinject(fx.ep, s, 4000, fx.peer, 0x4242)) == -FI_EAGAIN)
            poll_one();
        OK(rc);
        memset(s, 0, 4000);
    } else {
        OK(fi_trecv(fx.ep, r, 4000, NULL, fx.peer, 0x4242, 0, &cr));
        struct comp c = wait_ok(&cr);
        CHECK(c.e.len == 4000 && bad_bytes(r, 4000, 42) == 0);
    }
    sync_peers();
    test_inject_flag(s, r);
    test_delivery(s, r);
}

/* 5. fi_cancel and FI_PEEK/FI_CLAIM */
static void test_cancel_peek(void)
{
    static uint8_t b[256];
    struct fi_context c;
    OK(fi_trecv(fx.ep, b, sizeof(b), NULL, fx.peer, 0xcafe, 0, &c));
    OK(fi_cancel(&fx.ep->fid, &c));
    struct comp e = wait_ctx(&c);
    CHECK(e.err == FI_ECANCELED);
    CHECK(fi_cancel(&fx.ep->fid, &c) == -FI_ENOENT);

    struct fi_context cs, cp, cc;
    if (rank == 1) {
        fill(b, 200, 77);
        tsend(b, 200, 0xbeef, &cs);
        wait_ok(&cs);
        sync_peers();
    } else {
        struct iovec none = {NULL, 0};
        struct fi_msg_tagged m = {.msg_iov = &none,
                                  .iov_count = 0,
                                  .addr = FI_ADDR_UNSPEC,
                                  .tag = 0xbeef,
                                  .ignore = 0,
                                  .context = &cp};
        /* until it arrives, a peek finds nothing (FI_ENOMSG) */
        for (;;) {
            OK(fi_trecvmsg(fx.ep, &m, FI_PEEK | FI_CLAIM));
            e = wait_ctx(&cp);
            if (!e.err) break;
            CHECK(e.err == FI_ENOMSG);
        }
        CHECK(e.e.len == 200 && e.e.tag == 0xbeef);
        /* claimed: a plain receive must not take it */
        struct fi_context cplain;
        OK(fi_trecv(fx.ep, b, sizeof(b), NULL, FI_ADDR_UNSPEC, 0xbeef, 0, &cplain));
        memset(b, 0, sizeof(b));
        struct iovec iov = {b, sizeof(b)};
        struct fi_msg_tagged mc = {
            .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 0xbeef, .context = &cp};
        OK(fi_trecvmsg(fx.ep, &mc, FI_CLAIM));
        e = wait_ok(&cp);
        CHECK(e.e.len == 200 && bad_bytes(b, 200, 77) == 0);
        OK(fi_cancel(&fx.ep->fid, &cplain));
        e = wait_ctx(&cplain);
        CHECK(e.err == FI_ECANCELED);
        (void)cc;
        sync_peers();
    }
}

/* 6. FI_MULTI_RECV: one buffer takes messages until less than
 * FI_OPT_MIN_MULTI_RECV is left; the last one carries FI_MULTI_RECV. */
static void test_multi_recv(void)
{
    enum { N = 12, LEN = 5000, BUF = 65536 };
    static uint8_t b[BUF], s[N][LEN];
    struct fi_context cs[N], cr;
    if (rank == 1) {
        sync_peers();
        for (int i = 0; i < N; i++) {
            fill(s[i], LEN, 1200 + i);
            ssize_t r;
            while ((r = fi_send(fx.ep, s[i], LEN, NULL, fx.peer, &cs[i])) == -FI_EAGAIN)
                poll_one();
            OK(r);
        }
        for (int i = 0; i < N; i++)
            wait_ok(&cs[i]);
    } else {
        size_t min = 8192;
        OK(fi_setopt(&fx.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)));
        struct iovec iov = {b, BUF};
        struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &cr};
        OK(fi_recvmsg(fx.ep, &m, FI_MULTI_RECV));
        sync_peers();
        for (int i = 0; i < N; i++) {
            struct comp c = wait_ok(&cr);
            CHECK(c.e.len == LEN);
            CHECK(c.e.buf == b + (size_t)i * LEN);
            CHECK(!!(c.e.flags & FI_MULTI_RECV) == (i == N - 1));
            if (c.e.buf == b + (size_t)i * LEN) CHECK(bad_bytes(c.e.buf, LEN, 1200 + i) == 0);
        }
    }
    sync_peers();
}

/* 7. fi_cq_sread sleeps until a completion (or its timeout); FI_CLAIM|FI_DISCARD
 * drops a claimed message; counters count. */
static void test_sread_discard(void)
{
    static uint8_t b[512];
    struct fi_context cs, cr, cp;
    struct fi_cq_tagged_entry e;
    if (rank == 1) {
        usleep(100000);
        fill(b, 300, 5);
        tsend(b, 300, 0x5ead, &cs);
        wait_ok(&cs);
        tsend(b, 100, 0xd15c, &cs);
        wait_ok(&cs);
        sync_peers();
        return;
    }
    CHECK(nstash == 0);
    CHECK(fi_cq_sread(fx.cq, &e, 1, NULL, 20) == -FI_EAGAIN); /* nothing yet: times out */
    OK(fi_trecv(fx.ep, b, sizeof(b), NULL, fx.peer, 0x5ead, 0, &cr));
    ssize_t n = fi_cq_sread(fx.cq, &e, 1, NULL, 10000);
    CHECK(n == 1 && e.op_context == &cr && e.len == 300 && bad_bytes(b, 300, 5) == 0);
    struct fi_msg_tagged m = {
        .msg_iov = NULL, .iov_count = 0, .addr = FI_ADDR_UNSPEC, .tag = 0xd15c, .context = &cp};
    for (;;) {
        OK(fi_trecvmsg(fx.ep, &m, FI_PEEK | FI_CLAIM));
        struct comp c = wait_ctx(&cp);
        if (!c.err) break;
        CHECK(c.err == FI_ENOMSG);
    }
    OK(fi_trecvmsg(fx.ep, &m, FI_CLAIM | FI_DISCARD));
    struct comp c = wait_ok(&cp);
    CHECK(c.e.tag == 0xd15c);
    /* gone: a receive for it stays posted until cancelled */
    OK(fi_trecv(fx.ep, b, sizeof(b), NULL, fx.peer, 0xd15c, 0, &cr));
    OK(fi_cancel(&fx.ep->fid, &cr));
    c = wait_ctx(&cr);
    CHECK(c.err == FI_ECANCELED);
    sync_peers();
}

/* 8. A flood of unexpected messages beyond the matcher's pool (16384): none is
 * lost, order is kept; the sender is held back meanwhile. */
static void test_flood(void)
{
    enum { N = 20000 };
    if (rank == 1) {
        for (uint32_t i = 0; i < N; i++) {
            ssize_t r;
            while ((r = fi_tinject(fx.ep, &i, sizeof(i), fx.peer, 0x66000000u + (i & 7))) ==
                   -FI_EAGAIN)
                poll_one();
            OK(r);
        }
        sync_peers();
        return;
    }
    /* take everything in as unexpected (only reading the CQ), then receive */
    for (int k = 0; k < 2000; k++) {
        poll_one();
        usleep(500);
    }
    for (uint32_t i = 0; i < N; i++) {
        uint32_t v = ~0u;
        struct fi_context c;
        /* ignore the low tag bits: messages must come in send order */
        OK(fi_trecv(fx.ep, &v, sizeof(v), NULL, fx.peer, 0x66000000u, 7, &c));
        struct comp e = wait_ok(&c);
        if (v != i || e.e.tag != 0x66000000u + (i & 7)) {
            CHECK(v == i);
            break;
        }
    }
    sync_peers();
}

/* 8b. A peer that sends before the receiver has it in its AV (as Open MPI,
 * which inserts peers at first use): its messages wait unexpected with no
 * source, and once the name goes into the AV, receives directed at it take
 * them, eager and rendezvous, tagged and untagged, in order. Rank 1 sends
 * from a second endpoint whose name rank 0 learns only from the first
 * message. */
#define LATE_TAG 0x5100u
static bool wait_until(void *ctx, double secs, struct comp *out)
{
    double end = fic_now() + secs;
    for (;;) {
        for (int i = 0; i < nstash; i++)
            if (stash[i].e.op_context == ctx) {
                *out = stash[i];
                stash[i] = stash[--nstash];
                return true;
            }
        if (fic_now() > end) return false;
        poll_one();
    }
}

static void late_send(void)
{
    enum { BIG = 1 << 20 };
    struct fid_av *av2;
    struct fid_ep *ep2;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(fx.dom, &aa, &av2, NULL));
    OK(fi_endpoint(fx.dom, fx.info, &ep2, NULL));
    OK(fi_ep_bind(ep2, &av2->fid, 0));
    OK(fi_ep_bind(ep2, &fx.cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep2));
    fi_addr_t to;
    OK(fi_av_insert(av2, fx.pname, 1, &to, 0, NULL));
    char name[256];
    size_t nl = sizeof name;
    OK(fi_getname(&ep2->fid, name, &nl));
    uint8_t *small = malloc(100), *big = malloc(BIG), *un = malloc(64);
    fill(small, 100, 81);
    fill(big, BIG, 82);
    fill(un, 64, 83);
    struct fi_context c[4];
    OK(fi_send(ep2, un, 64, NULL, to, &c[0]));
    OK(fi_tsend(ep2, name, nl, NULL, to, LATE_TAG, &c[1]));
    OK(fi_tsend(ep2, small, 100, NULL, to, LATE_TAG + 1, &c[2]));
    OK(fi_tsend(ep2, big, BIG, NULL, to, LATE_TAG + 2, &c[3]));
    for (int i = 0; i < 4; i++)
        wait_ok(&c[i]); /* the rendezvous one: once rank 0 read it */
    sync_peers();
    /* one more, which rank 0 lets wait while it removes and re-inserts us */
    OK(fi_tsend(ep2, small, 100, NULL, to, LATE_TAG + 3, &c[0]));
    wait_ok(&c[0]);
    sync_peers();
    OK(fi_close(&ep2->fid));
    OK(fi_close(&av2->fid));
    free(small);
    free(big);
    free(un);
}

static void test_late_insert(void)
{
    enum { BIG = 1 << 20 };
    if (rank == 1) {
        late_send();
        return;
    }
    char name[256];
    uint8_t *small = calloc(1, 100), *big = calloc(1, BIG), *un = calloc(1, 64);
    struct fi_context cn, cp, c[3];
    OK(fi_trecv(fx.ep, name, sizeof name, NULL, FI_ADDR_UNSPEC, LATE_TAG, 0, &cn));
    struct comp e = wait_ok(&cn);
    CHECK(e.src == FI_ADDR_NOTAVAIL); /* fi_cq(3): a source not in the AV */
    /* the rest has come once the last one has (one sender: in order) */
    struct fi_msg_tagged m = {.addr = FI_ADDR_UNSPEC, .tag = LATE_TAG + 2, .context = &cp};
    for (;;) {
        OK(fi_trecvmsg(fx.ep, &m, FI_PEEK));
        e = wait_ctx(&cp);
        if (!e.err) break;
        CHECK(e.err == FI_ENOMSG);
    }
    fi_addr_t from;
    OK(fi_av_insert(fx.av, name, 1, &from, 0, NULL));
    OK(fi_trecv(fx.ep, big, BIG, NULL, from, LATE_TAG + 2, 0, &c[0]));
    OK(fi_trecv(fx.ep, small, 100, NULL, from, LATE_TAG + 1, 0, &c[1]));
    OK(fi_recv(fx.ep, un, 64, NULL, from, &c[2]));
    static const size_t len[3] = {BIG, 100, 64};
    static const unsigned seed[3] = {82, 81, 83};
    uint8_t *buf[3] = {big, small, un};
    for (int i = 0; i < 3; i++) {
        bool got = wait_until(&c[i], 10.0, &e);
        CHECK(got);
        if (!got) continue;
        CHECK(!e.err && e.e.len == len[i] && e.src == from);
        CHECK(bad_bytes(buf[i], len[i], seed[i]) == 0);
    }
    sync_peers();
    /* Removed while a message from it waits: that message no longer names
     * the old address, and a receive directed at the re-inserted name takes
     * it, with the new address as its source (which may be the old slot
     * again: removed slots are used again; fi.av_reuse gives the slot to
     * another peer in between). */
    m.tag = LATE_TAG + 3;
    for (;;) {
        OK(fi_trecvmsg(fx.ep, &m, FI_PEEK));
        e = wait_ctx(&cp);
        if (!e.err) break;
        CHECK(e.err == FI_ENOMSG);
    }
    OK(fi_av_remove(fx.av, &from, 1, 0));
    fi_addr_t again;
    OK(fi_av_insert(fx.av, name, 1, &again, 0, NULL));
    memset(small, 0, 100);
    OK(fi_trecv(fx.ep, small, 100, NULL, again, LATE_TAG + 3, 0, &c[1]));
    bool got = wait_until(&c[1], 10.0, &e);
    CHECK(got && !e.err && e.src == again && bad_bytes(small, 100, 81) == 0);
    sync_peers();
    OK(fi_av_remove(fx.av, &again, 1, 0));
    free(small);
    free(big);
    free(un);
}

/* 8c. An ACK behind held messages: rank 1 fills rank 0's unexpected queue
 * past the matcher's pool (16384), so a few wait in ulnet's ring, then
 * receives rank 0's rendezvous message. Rank 0 waits for that send to
 * complete before it posts any receive (a safe program: rank 1's sends are
 * all done): the ACK must not wait behind the held messages. */
static void test_held_ack(void)
{
    enum { N = 16384 + 200, BIG = 1 << 20, TAG = 0x67000000u };
    uint8_t *big = malloc(BIG);
    struct fi_context c;
    if (rank == 1) {
        for (uint32_t i = 0; i < N; i++) {
            ssize_t r;
            while ((r = fi_tinject(fx.ep, &i, sizeof(i), fx.peer, TAG)) == -FI_EAGAIN)
                poll_one();
            OK(r);
        }
        OK(fi_trecv(fx.ep, big, BIG, NULL, fx.peer, TAG + 1, 0, &c));
        wait_ok(&c);
        CHECK(bad_bytes(big, BIG, 91) == 0);
        sync_peers();
        free(big);
        return;
    }
    for (int k = 0; k < 1000; k++) { /* the flood comes in as unexpected */
        poll_one();
        usleep(500);
    }
    fill(big, BIG, 91);
    tsend(big, BIG, TAG + 1, &c);
    struct comp e;
    bool sent = wait_until(&c, 10.0, &e);
    CHECK(sent && !e.err);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t v = ~0u;
        struct fi_context cr;
        OK(fi_trecv(fx.ep, &v, sizeof(v), NULL, fx.peer, TAG, 0, &cr));
        wait_ok(&cr);
        if (v != i) {
            CHECK(v == i);
            break;
        }
    }
    if (!sent) wait_ok(&c);
    sync_peers();
    free(big);
}

/* 9. RMA: write, writedata, read at offsets (addresses: FI_MR_VIRT_ADDR is
 * asked for); bad key and bounds fail */
static void test_rma(void)
{
    enum { REG = 1 << 20 };
    uint8_t *win = calloc(1, REG), *loc = malloc(REG);
    struct fid_mr *mr;
    OK(fi_mr_reg(fx.dom, win, REG, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    uint64_t key[2] = {fi_mr_key(mr), (uintptr_t)win}, pk[2];
    /* keys and windows cross by a message */
    struct fi_context cs, cr, c;
    OK(fi_trecv(fx.ep, pk, 16, NULL, fx.peer, 0x3333, 0, &cr));
    tsend(key, 16, 0x3333, &cs);
    wait_ok(&cr);
    wait_ok(&cs);
    CHECK(fx.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
    uint64_t pkey = pk[0], at = pk[1]; /* remote addresses: the peer's window's */
    if (rank == 1) {
        fill(loc, REG, 31);
        OK(fi_write(fx.ep, loc, 300000, NULL, fx.peer, at + 4096, pkey, &c));
        struct comp e = wait_ok(&c);
        CHECK((e.e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
        OK(fi_writedata(fx.ep, loc + 300000, 1000, NULL, 0x1234, fx.peer, at + 4096 + 300000, pkey,
                        &c));
        wait_ok(&c);
        memset(loc, 0, REG);
        OK(fi_read(fx.ep, loc, 301000, NULL, fx.peer, at + 4096, pkey, &c));
        e = wait_ok(&c);
        CHECK(bad_bytes(loc, 301000, 31) == 0);
        /* FI_INJECT on fi_writemsg completes; fi_inject_write does not */
        struct iovec iov = {loc, 512};
        struct fi_rma_iov ri = {at + 4096, 512, pkey};
        struct fi_msg_rma wm = {.msg_iov = &iov,
                                .iov_count = 1,
                                .addr = fx.peer,
                                .rma_iov = &ri,
                                .rma_iov_count = 1,
                                .context = &c};
        OK(fi_inject_write(fx.ep, loc, 512, fx.peer, at + 4096, pkey));
        OK(fi_writemsg(fx.ep, &wm, FI_INJECT));
        memset(loc, 0xee, 512);
        CHECK((wait_ok(&c).e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
        for (int i = 0; i < 1000; i++)
            poll_one();
        CHECK(nstash == 0);
        memset(loc, 0, 512);
        OK(fi_read(fx.ep, loc, 512, NULL, fx.peer, at + 4096, pkey, &c));
        wait_ok(&c);
        CHECK(bad_bytes(loc, 512, 31) == 0);
        /* out of bounds, and a key that was never given */
        OK(fi_read(fx.ep, loc, 4096, NULL, fx.peer, at + REG - 100, pkey, &c));
        e = wait_ctx(&c);
        CHECK(e.err == FI_EACCES);
        CHECK(e.prov_errno == -ERANGE);
        CHECK(strlen(fi_cq_strerror(fx.cq, e.prov_errno, NULL, NULL, 0)) > 0);
        OK(fi_write(fx.ep, loc, 64, NULL, fx.peer, at, pkey ^ 0x5a5a0000ull, &c));
        e = wait_ctx(&c);
        CHECK(e.err == FI_EKEYREJECTED);
        sync_peers();
    } else {
        /* the writedata raises one completion here */
        struct comp e;
        for (;;) {
            struct fi_cq_tagged_entry t;
            fi_addr_t src;
            ssize_t n = fi_cq_readfrom(fx.cq, &t, 1, &src);
            if (n == 1) {
                e.e = t;
                break;
            }
            CHECK(n == -FI_EAGAIN);
        }
        CHECK(e.e.flags & FI_REMOTE_CQ_DATA);
        CHECK(e.e.flags & FI_REMOTE_WRITE);
        CHECK(e.e.data == 0x1234);
        sync_peers();
        CHECK(bad_bytes(win + 4096, 301000, 31) == 0);
        CHECK(win[4095] == 0 && win[4096 + 301000] == 0);
    }
    sync_peers();
    OK(fi_close(&mr->fid));
    free(win);
    free(loc);
}

/* A completion carrying remote CQ data (an RMA write's, at its target). */
static struct comp wait_remote_data(void)
{
    for (long spins = 0;; spins++) {
        for (int i = 0; i < nstash; i++)
            if (stash[i].e.flags & FI_REMOTE_CQ_DATA) {
                struct comp c = stash[i];
                stash[i] = stash[--nstash];
                return c;
            }
        poll_one();
        if (spins > 400000000L) {
            fprintf(stderr, "rank %d: no remote CQ data\n", rank);
            exit(1);
        }
    }
}

/* 10. RMA with several iov entries: fi_writev/fi_readv/fi_writemsg/
 * fi_readmsg, a zero-length entry among them, every byte checked. Each
 * remote range goes as one ulnet gather operation (uln_putv/uln_getv), so
 * a list reaching past the region is refused whole: no piece of it lands,
 * at the target or (a read) in the local buffers - where one operation per
 * piece would have moved the pieces in bounds first. */
static void test_rmav(void)
{
    enum { REG = 1 << 16 };
    uint8_t *win = calloc(1, REG), *loc = malloc(REG), *back = malloc(REG);
    struct fid_mr *mr;
    OK(fi_mr_reg(fx.dom, win, REG, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    uint64_t key[2] = {fi_mr_key(mr), (uintptr_t)win}, pk[2];
    struct fi_context cs, cr, c;
    OK(fi_trecv(fx.ep, pk, 16, NULL, fx.peer, 0x3334, 0, &cr));
    tsend(key, 16, 0x3334, &cs);
    wait_ok(&cr);
    wait_ok(&cs);
    uint64_t pkey = pk[0], at = pk[1];
    if (rank == 1) {
        fill(loc, REG, 41);
        /* writev: 1000 + 0 + 3000 + 5000 bytes to one range, read back in
         * other pieces by readv */
        struct iovec w[4] = {{loc, 1000}, {NULL, 0}, {loc + 1000, 3000}, {loc + 4000, 5000}};
        OK(fi_writev(fx.ep, w, NULL, 4, fx.peer, at + 100, pkey, &c));
        CHECK((wait_ok(&c).e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
        memset(back, 0, REG);
        struct iovec r[3] = {{back, 2000}, {back + 2000, 4000}, {back + 6000, 3000}};
        OK(fi_readv(fx.ep, r, NULL, 3, fx.peer, at + 100, pkey, &c));
        CHECK((wait_ok(&c).e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ));
        CHECK(bad_bytes(back, 9000, 41) == 0);
        /* writemsg: four local pieces over two remote ranges (one piece
         * split between them), with remote CQ data; readmsg the same way */
        struct iovec m[4] = {{loc, 700}, {loc + 700, 2500}, {NULL, 0}, {loc + 3200, 5800}};
        struct fi_rma_iov ri[2] = {{at + 20000, 2000, pkey}, {at + 40000, 7000, pkey}};
        struct fi_msg_rma msg = {.msg_iov = m,
                                 .iov_count = 4,
                                 .addr = fx.peer,
                                 .rma_iov = ri,
                                 .rma_iov_count = 2,
                                 .context = &c,
                                 .data = 0x5678};
        OK(fi_writemsg(fx.ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
        wait_ok(&c);
        memset(back, 0, REG);
        struct iovec mr2[2] = {{back, 4500}, {back + 4500, 4500}};
        msg.msg_iov = mr2;
        msg.iov_count = 2;
        OK(fi_readmsg(fx.ep, &msg, FI_COMPLETION));
        wait_ok(&c);
        CHECK(bad_bytes(back, 9000, 41) == 0);
        /* refused whole: three pieces of 1000, the last 500 bytes past the
         * region's end */
        struct iovec o[3] = {{loc, 1000}, {loc + 1000, 1000}, {loc + 2000, 1000}};
        OK(fi_writev(fx.ep, o, NULL, 3, fx.peer, at + REG - 2500, pkey, &c));
        struct comp e = wait_ctx(&c);
        CHECK(e.err == FI_EACCES && e.prov_errno == -ERANGE);
        memset(back, 0xee, REG);
        OK(fi_read(fx.ep, back, 2500, NULL, fx.peer, at + REG - 2500, pkey, &c));
        wait_ok(&c);
        size_t landed = 0;
        for (size_t i = 0; i < 2500; i++)
            landed += back[i] != 0;
        CHECK(landed == 0);
        struct iovec ob[3] = {{back, 1000}, {back + 1000, 1000}, {back + 2000, 1000}};
        memset(back, 0xee, 3000);
        OK(fi_readv(fx.ep, ob, NULL, 3, fx.peer, at + REG - 2500, pkey, &c));
        e = wait_ctx(&c);
        CHECK(e.err == FI_EACCES && e.prov_errno == -ERANGE);
        size_t touched = 0;
        for (size_t i = 0; i < 3000; i++)
            touched += back[i] != 0xee;
        CHECK(touched == 0);
        sync_peers();
    } else {
        /* the writemsg's data: one completion here for the two ranges */
        struct comp e = wait_remote_data();
        CHECK(e.e.flags & FI_REMOTE_WRITE);
        CHECK(e.e.data == 0x5678);
        sync_peers();
        for (int i = 0; i < 1000; i++)
            poll_one();
        for (int i = 0; i < nstash; i++)
            CHECK(!(stash[i].e.flags & FI_REMOTE_CQ_DATA)); /* only one */
        /* the writev's 9000 bytes at 100, the writemsg's split at 20000 and
         * 40000, nothing between them, nothing of the refused writev */
        CHECK(bad_bytes(win + 100, 9000, 41) == 0);
        CHECK(win[99] == 0 && win[9100] == 0);
        fill(loc, REG, 41);
        CHECK(memcmp(win + 20000, loc, 2000) == 0 && memcmp(win + 40000, loc + 2000, 7000) == 0);
        CHECK(win[19999] == 0 && win[22000] == 0 && win[47000] == 0);
        size_t landed = 0;
        for (size_t i = REG - 2500; i < REG; i++)
            landed += win[i] != 0;
        CHECK(landed == 0);
    }
    sync_peers();
    OK(fi_close(&mr->fid));
    free(win);
    free(loc);
    free(back);
}

/* Beyond the common exchange: a name cannot be set, this rank's own name
 * inserts, and a name of another job is refused, per fi_av(3). */
static void exchange_names(const char *dir)
{
    fic_exchange(&fx, dir);
    CHECK(fi_setname(&fx.ep->fid, fx.name, fx.namelen) == -FI_ENOSYS);
    OK(fi_av_insert(fx.av, fx.name, 1, &self, 0, NULL));
    char bad[256];
    memcpy(bad, fx.pname, fx.namelen);
    bad[8] ^= 0xff; /* inside the job key */
    fi_addr_t fa = 0;
    CHECK(fi_av_insert(fx.av, bad, 1, &fa, 0, NULL) < 0 || fa == FI_ADDR_NOTAVAIL);
    CHECK(fa == FI_ADDR_NOTAVAIL);
    /* straddr says which process and endpoint a name is; cut to the room
     * given, with the whole length returned */
    char text[256], want[32], small[8];
    size_t tl = sizeof text, sl = sizeof small;
    fi_av_straddr(fx.av, fx.name, text, &tl);
    snprintf(want, sizeof want, " pid %d key ", (int)getpid());
    CHECK(!strncmp(text, "ulnet ep 0, ", 12) && strstr(text, want) != NULL);
    CHECK(tl == strlen(text) + 1);
    fi_av_straddr(fx.av, fx.name, small, &sl);
    CHECK(sl == tl && small[7] == '\0' && !strncmp(small, text, 7));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fi_ops DIR (under ulnrun -n 2)\n");
        return 2;
    }
    struct fi_info *hints =
        fic_hints(FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV | FI_SOURCE | FI_MULTI_RECV, NULL);
    hints->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_ALLOCATED | FI_MR_VIRT_ADDR;
    /* test 7 sleeps in fi_cq_sread: fi_cq(3) forbids that on FI_WAIT_NONE */
    fx.cq_wait = FI_WAIT_UNSPEC;
    fic_open(&fx, hints, FI_AV_TABLE, 128);
    /* a hint the provider cannot meet means no info */
    struct fi_info *h2 = fi_dupinfo(hints), *none = NULL;
    h2->ep_attr->type = FI_EP_SOCK_STREAM;
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA);
    h2->ep_attr->type = FI_EP_RDM;
    h2->caps |= FI_COLLECTIVE; /* not offered */
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA);
    fi_freeinfo(h2);
    char tmp[256];
    size_t tl = sizeof(tmp);
    CHECK(fi_getname(&fx.ep->fid, tmp, &tl) == -FI_EOPBADSTATE);
    struct fi_cntr_attr cta = {.events = FI_CNTR_EVENTS_COMP};
    OK(fi_cntr_open(fx.dom, &cta, &fx.cntr, NULL));
    fic_enable(&fx);
    exchange_names(argv[1]);

    test_sizes();
    test_unexpected();
    test_trunc();
    test_iov_msg();
    test_cancel_peek();
    test_multi_recv();
    test_sread_discard();
    test_flood();
    test_late_insert();
    test_held_ack();
    test_rma();
    test_rmav();

    /* every send and receive above counted; rank 0's truncated receives as errors */
    uint64_t sends_recvs = fi_cntr_read(fx.cntr), errs = fi_cntr_readerr(fx.cntr);
    CHECK(sends_recvs >= 40);
    CHECK(rank == 1 || errs >= 2);
    fic_close(&fx);
    printf("rank %d: fi_ops %s\n", rank, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
