/*
 * test_match.c - the provider's tag matcher on its own: first match in order
 * both ways with wildcards and ignore bits, directed and undirected sources,
 * FI_MULTI_RECV slices and their release, FI_PEEK/FI_CLAIM/FI_DISCARD, cancel,
 * full pools, bad input; then 10^5 random operations (fixed seed, argument 1
 * overrides the count, argument 2 the seed) against a small reference model kept in plain arrays,
 * with and without directed receive. Built twice: with the matcher's hash
 * buckets, and with 2 of them so that keys collide all the time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "match.h"

#include "check.h"

#define CTX(i) ((void *)(uintptr_t)(i))
#define ANY    FI_ADDR_UNSPEC
#define NEVER  (~(uintptr_t)0) /* a context never posted */

static char buf[4][256];

static struct ulnfi_match_recv rv(fi_addr_t src, uint64_t tag, uint64_t ignore, uintptr_t ctx,
                                  uint64_t flags, size_t len)
{
    struct ulnfi_match_recv r;
    memset(&r, 0, sizeof(r));
    r.src = src;
    r.tag = tag;
    r.ignore = ignore;
    r.context = CTX(ctx);
    r.flags = flags;
    r.iov[0].iov_base = buf[0];
    r.iov[0].iov_len = len;
    r.iov_count = 1;
    return r;
}

static struct ulnfi_match_msg mg(fi_addr_t src, uint64_t tag, size_t len, uintptr_t id)
{
    struct ulnfi_match_msg g;
    memset(&g, 0, sizeof(g));
    g.src = src;
    g.tag = tag;
    g.len = len;
    g.payload = CTX(id);
    return g;
}

/* Posts a receive that must be queued. */
static void post_q(struct ulnfi_match *m, struct ulnfi_match_recv r)
{
    struct ulnfi_match_hit h;
    CHECK_EQ(ulnfi_match_post(m, &r, &h), ULNFI_MATCH_QUEUED);
    CHECK(h.recv && !h.recv_done && h.recv->context == r.context);
}

/* A message arrives; returns the context of the receive it met (0: none, and
 * then it is queued as unexpected). Frees a receive that is done. */
static uintptr_t arrive(struct ulnfi_match *m, fi_addr_t src, uint64_t tag, size_t len,
                        uintptr_t id)
{
    struct ulnfi_match_msg g = mg(src, tag, len, id), *e;
    struct ulnfi_match_hit h;
    int ret = ulnfi_match_arrive(m, &g, &h);
    if (ret == ULNFI_MATCH_NONE) {
        CHECK_EQ(ulnfi_match_unexp(m, &g, &e), 0);
        CHECK(e && e->payload == CTX(id));
        return 0;
    }
    CHECK_EQ(ret, ULNFI_MATCH_FOUND);
    CHECK(h.msg == NULL);
    if (ret != ULNFI_MATCH_FOUND) return 0;
    uintptr_t ctx = (uintptr_t)h.recv->context;
    if (h.recv_done) CHECK_EQ(ulnfi_match_recv_free(m, h.recv), 0);
    return ctx;
}

/* Posts a plain receive; returns the payload id of the unexpected message it
 * took (0: none, and then it is queued). */
static uintptr_t post(struct ulnfi_match *m, struct ulnfi_match_recv r)
{
    struct ulnfi_match_hit h;
    int ret = ulnfi_match_post(m, &r, &h);
    if (ret == ULNFI_MATCH_QUEUED) return 0;
    CHECK_EQ(ret, ULNFI_MATCH_FOUND);
    CHECK(h.msg_taken && h.recv_done);
    if (ret != ULNFI_MATCH_FOUND) return 0;
    uintptr_t id = (uintptr_t)h.msg->payload;
    CHECK_EQ(ulnfi_match_msg_free(m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(m, h.recv), 0);
    return id;
}

static void drain(struct ulnfi_match *m)
{
    struct ulnfi_match_recv *r;
    struct ulnfi_match_msg *g;
    while ((r = ulnfi_match_recv_pop(m)))
        CHECK_EQ(ulnfi_match_recv_free(m, r), 0);
    while ((g = ulnfi_match_msg_pop(m)))
        CHECK_EQ(ulnfi_match_msg_free(m, g), 0);
    CHECK_EQ(m->n_posted, 0);
    CHECK_EQ(m->n_unexp, 0);
}

static void test_order(void)
{
    struct ulnfi_match m;
    CHECK_EQ(ulnfi_match_init(&m, 16, 16, true, 0), 0);
    /* Arriving messages take posted receives in posting order: a wildcard
     * posted before an exact receive wins over it, and the reverse. */
    post_q(&m, rv(ANY, 0x10, 0x0f, 1, 0, 8)); /* 0x10..0x1f */
    post_q(&m, rv(ANY, 0x15, 0, 2, 0, 8));    /* exactly 0x15 */
    post_q(&m, rv(ANY, 0, ~0ull, 3, 0, 8));   /* anything */
    CHECK_EQ(arrive(&m, 7, 0x15, 4, 100), 1);
    CHECK_EQ(arrive(&m, 7, 0x15, 4, 101), 2);
    CHECK_EQ(arrive(&m, 7, 0x15, 4, 102), 3);
    CHECK_EQ(arrive(&m, 7, 0x15, 4, 103), 0); /* unexpected */
    /* Ignore bits: only the bits outside ignore must be equal. */
    post_q(&m, rv(ANY, 0xf0, 0x0f, 4, 0, 8));
    CHECK_EQ(arrive(&m, 7, 0xe5, 4, 104), 0); /* bit 4 differs */
    CHECK_EQ(arrive(&m, 7, 0xfa, 4, 105), 4);

    /* Posted receives take unexpected messages in arrival order: 103, 104. */
    CHECK_EQ(post(&m, rv(ANY, 0, ~0ull, 5, 0, 8)), 103);
    CHECK_EQ(post(&m, rv(ANY, 0xe5, 0, 6, 0, 8)), 104);
    CHECK_EQ(post(&m, rv(ANY, 0xe5, 0, 7, 0, 8)), 0);
    /* Several unexpected: an exact receive skips the ones before its tag. */
    CHECK_EQ(arrive(&m, 7, 0xe5, 4, 106), 7);
    CHECK_EQ(arrive(&m, 1, 0x1, 4, 107), 0);
    CHECK_EQ(arrive(&m, 2, 0x2, 4, 108), 0);
    CHECK_EQ(arrive(&m, 3, 0x2, 4, 109), 0);
    CHECK_EQ(arrive(&m, 4, 0x1, 4, 110), 0);
    CHECK_EQ(post(&m, rv(ANY, 0x2, 0, 8, 0, 8)), 108);
    CHECK_EQ(post(&m, rv(ANY, 0x0, 0x3, 9, 0, 8)), 107);
    CHECK_EQ(post(&m, rv(ANY, 0x0, 0x3, 10, 0, 8)), 109);
    CHECK_EQ(post(&m, rv(ANY, 0x0, 0x3, 11, 0, 8)), 110);
    CHECK_EQ(m.n_unexp, 0);
    CHECK_EQ(m.n_posted, 0);
    /* Sequence numbers follow posting and arrival order. */
    CHECK_EQ(m.stats.posted, 11);
    CHECK_EQ(m.stats.arrived, 11);
    ulnfi_match_fini(&m);
}

static void test_source(void)
{
    struct ulnfi_match m;
    /* Directed: the source takes part, FI_ADDR_UNSPEC takes any. */
    CHECK_EQ(ulnfi_match_init(&m, 8, 8, true, 0), 0);
    post_q(&m, rv(3, 5, 0, 1, 0, 8));
    post_q(&m, rv(ANY, 5, 0, 2, 0, 8));
    CHECK_EQ(arrive(&m, 4, 5, 0, 100), 2); /* skips the receive for source 3 */
    CHECK_EQ(arrive(&m, 4, 5, 0, 101), 0);
    CHECK_EQ(arrive(&m, 3, 5, 0, 102), 1);
    CHECK_EQ(post(&m, rv(3, 5, 0, 3, 0, 8)), 0); /* 101 is from 4 */
    CHECK_EQ(post(&m, rv(ANY, 5, 0, 4, 0, 8)), 101);
    CHECK_EQ(arrive(&m, 3, 5, 0, 103), 3);
    drain(&m);
    ulnfi_match_fini(&m);

    /* Undirected: a receive's source is ignored. */
    CHECK_EQ(ulnfi_match_init(&m, 8, 8, false, 0), 0);
    post_q(&m, rv(3, 5, 0, 1, 0, 8));
    post_q(&m, rv(ANY, 5, 0, 2, 0, 8));
    CHECK_EQ(arrive(&m, 4, 5, 0, 100), 1);
    CHECK_EQ(arrive(&m, 9, 5, 0, 101), 2);
    CHECK_EQ(arrive(&m, 9, 5, 0, 102), 0);
    CHECK_EQ(post(&m, rv(3, 5, 0, 3, 0, 8)), 102);
    ulnfi_match_fini(&m);
}

/* A peer that sent before it was in the AV: its messages wait with no
 * source (FI_ADDR_NOTAVAIL), which no directed receive matches. Once the AV
 * has it, resolve gives them their source, and they come ahead of that
 * peer's later messages, which had one already. */
static fi_addr_t src_by_id(const struct ulnfi_match_msg *g, void *arg)
{
    uintptr_t id = (uintptr_t)g->payload;
    return id < *(uintptr_t *)arg ? 3 : FI_ADDR_NOTAVAIL; /* the AV knows ids below arg */
}

static void test_resolve(void)
{
    struct ulnfi_match m;
    CHECK_EQ(ulnfi_match_init(&m, 8, 8, true, 0), 0);
    uintptr_t known = 0;
    CHECK_EQ(arrive(&m, FI_ADDR_NOTAVAIL, 5, 0, 100), 0);
    CHECK_EQ(arrive(&m, FI_ADDR_NOTAVAIL, 6, 0, 101), 0);
    CHECK_EQ(arrive(&m, FI_ADDR_NOTAVAIL, 5, 0, 200), 0); /* another unknown peer */
    CHECK_EQ(post(&m, rv(3, 5, 0, 1, 0, 8)), 0);          /* not before the insert */
    CHECK_EQ(ulnfi_match_resolve(&m, src_by_id, &known), 3);
    CHECK_EQ(arrive(&m, 3, 5, 0, 102), 1); /* the queued receive takes a new one */
    CHECK_EQ(arrive(&m, 3, 5, 0, 103), 0);
    known = 200; /* the AV learns the first peer (ids 100..199) */
    CHECK_EQ(ulnfi_match_resolve(&m, src_by_id, &known), 1);
    CHECK_EQ(post(&m, rv(3, 5, 0, 2, 0, 8)), 100); /* arrival order, not resolve order */
    CHECK_EQ(post(&m, rv(3, 5, 0, 3, 0, 8)), 103);
    CHECK_EQ(post(&m, rv(3, 6, 0, 4, 0, 8)), 101);
    CHECK_EQ(post(&m, rv(3, 5, 0, 5, 0, 8)), 0); /* 200 is still nobody's */
    CHECK_EQ(post(&m, rv(ANY, 5, 0, 6, 0, 8)), 200);
    /* fi_av_remove of 3: its waiting message names it no more; inserted
     * again, the peer's messages take the address the AV gives now */
    CHECK_EQ(arrive(&m, 3, 9, 0, 150), 0);
    CHECK_EQ(arrive(&m, 3, 9, 0, 151), 0);
    CHECK_EQ(ulnfi_match_forget(&m, 3), 2);
    CHECK_EQ(ulnfi_match_forget(&m, 3), 0);
    CHECK_EQ(ulnfi_match_resolve(&m, src_by_id, &known), 0);
    CHECK_EQ(post(&m, rv(3, 9, 0, 7, 0, 8)), 150);
    CHECK_EQ(post(&m, rv(3, 9, 0, 8, 0, 8)), 151);
    drain(&m);
    ulnfi_match_fini(&m);
}

/* Exact receives live in hash buckets, wildcards in their own list: the
 * older of the two candidates must still win, both ways. */
static void test_exact_vs_wild(bool dir)
{
    struct ulnfi_match m;
    CHECK_EQ(ulnfi_match_init(&m, 16, 16, dir, 0), 0);
    post_q(&m, rv(2, 9, 0, 1, 0, 8));   /* exact */
    post_q(&m, rv(ANY, 8, 1, 2, 0, 8)); /* wildcard: 8 or 9 */
    post_q(&m, rv(2, 9, 0, 3, 0, 8));   /* exact, same key as 1 */
    post_q(&m, rv(ANY, 0, ~0ull, 4, 0, 8));
    post_q(&m, rv(5, 9, 0, 5, 0, 8)); /* exact, another source */
    CHECK_EQ(arrive(&m, 2, 9, 0, 100), 1);
    CHECK_EQ(arrive(&m, 2, 9, 0, 101), 2);
    CHECK_EQ(arrive(&m, 2, 9, 0, 102), 3);
    CHECK_EQ(arrive(&m, 5, 9, 0, 103), 4); /* older than the exact 5 */
    CHECK_EQ(arrive(&m, 5, 9, 0, 104), 5);
    /* Without directed receive a receive's source is not in its key. */
    post_q(&m, rv(2, 9, 0, 10, 0, 8));
    post_q(&m, rv(ANY, 9, 0, 11, 0, 8));
    CHECK_EQ(arrive(&m, 6, 9, 0, 110), dir ? 11 : 10);
    CHECK_EQ(arrive(&m, 6, 9, 0, 111), dir ? 0 : 11);
    if (dir) CHECK_EQ(post(&m, rv(6, 9, 0, 12, 0, 8)), 111);
    CHECK_EQ(arrive(&m, 2, 9, 0, 112), dir ? 10 : 0);
    if (!dir) CHECK_EQ(post(&m, rv(7, 9, 0, 12, 0, 8)), 112);
    CHECK_EQ(m.n_posted, 0);
    /* Messages: an exact receive takes the oldest of its key, a wildcard the
     * oldest overall. */
    CHECK_EQ(arrive(&m, 3, 7, 0, 105), 0);
    CHECK_EQ(arrive(&m, 2, 9, 0, 106), 0);
    CHECK_EQ(arrive(&m, 3, 9, 0, 107), 0);
    CHECK_EQ(arrive(&m, 2, 9, 0, 108), 0);
    CHECK_EQ(post(&m, rv(3, 9, 0, 6, 0, 8)), dir ? 107 : 106);
    CHECK_EQ(post(&m, rv(ANY, 9, 0, 7, 0, 8)), dir ? 106 : 107);
    CHECK_EQ(post(&m, rv(ANY, 0, ~0ull, 8, 0, 8)), 105);
    CHECK_EQ(post(&m, rv(2, 9, 0, 9, 0, 8)), 108);
    CHECK_EQ(m.n_unexp, 0);
    ulnfi_match_fini(&m);
}

/* A receive that ignores a few bits takes them out of the hash key: queued
 * entries move to their new buckets, in order, and match as before. */
static void test_learn(void)
{
    struct ulnfi_match m;
    CHECK_EQ(ulnfi_match_init(&m, 16, 16, true, 0), 0);
    post_q(&m, rv(1, 0x10, 0, 1, 0, 8)); /* exact under the full key */
    post_q(&m, rv(1, 0x11, 0, 2, 0, 8));
    post_q(&m, rv(1, 0x10, 0, 3, 0, 8));
    CHECK_EQ(arrive(&m, 1, 0x20, 0, 100), 0);
    CHECK_EQ(arrive(&m, 1, 0x21, 0, 101), 0);
    CHECK_EQ(arrive(&m, 1, 0x20, 0, 102), 0);
    CHECK(m.key_mask == ~0ull && m.posted.next != &m.wild);
    /* Ignores bit 0: learned. Posted after the others, it comes last. */
    post_q(&m, rv(1, 0x10, 0x1, 4, 0, 8));
    CHECK_EQ(m.key_mask, ~1ull);
    CHECK_EQ(m.stats.rehash, 1);
    struct ulnfi_match_recv *r = ulnfi_match_cancel(&m, CTX(4));
    CHECK(r && r->exact); /* it was an exact receive under the new key */
    ulnfi_match_recv_free(&m, r);
    /* Too many bits: a wildcard, the key stays. */
    post_q(&m, rv(1, 0, 0x1f, 5, 0, 8));
    CHECK_EQ(m.key_mask, ~1ull);
    CHECK_EQ(arrive(&m, 1, 0x11, 0, 103), 2);
    CHECK_EQ(arrive(&m, 1, 0x10, 0, 104), 1);
    CHECK_EQ(arrive(&m, 1, 0x10, 0, 105), 3);
    CHECK_EQ(arrive(&m, 1, 0x10, 0, 106), 5);
    CHECK_EQ(post(&m, rv(1, 0x21, 0, 6, 0, 8)), 101);
    CHECK_EQ(post(&m, rv(1, 0x20, 0, 7, 0, 8)), 100);
    CHECK_EQ(post(&m, rv(1, 0x20, 0x1, 8, 0, 8)), 102);
    CHECK_EQ(m.n_posted + m.n_unexp, 0);
    ulnfi_match_fini(&m);
}

static void test_multi(void)
{
    struct ulnfi_match m;
    struct ulnfi_match_hit h;
    CHECK_EQ(ulnfi_match_init(&m, 8, 8, false, 32), 0);
    struct ulnfi_match_recv r = rv(ANY, 0, ~0ull, 1, FI_MULTI_RECV, 100);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_QUEUED);
    struct ulnfi_match_recv *mr = h.recv;
    CHECK_EQ(mr->min_multi, 32);
    ulnfi_match_set_min_multi_recv(&m, 0); /* later posts only */
    post_q(&m, rv(ANY, 0, ~0ull, 2, 0, 8));

    struct ulnfi_match_msg g = mg(1, 0, 30, 100);
    CHECK_EQ(ulnfi_match_arrive(&m, &g, &h), ULNFI_MATCH_FOUND);
    CHECK(h.recv == mr && !h.recv_done && h.offset == 0 && h.space == 30);
    g.len = 0; /* zero-length messages take a slice of nothing */
    CHECK_EQ(ulnfi_match_arrive(&m, &g, &h), ULNFI_MATCH_FOUND);
    CHECK(h.recv == mr && !h.recv_done && h.offset == 30 && h.space == 0);
    g.len = 38; /* leaves 32: not below the minimum */
    CHECK_EQ(ulnfi_match_arrive(&m, &g, &h), ULNFI_MATCH_FOUND);
    CHECK(h.recv == mr && !h.recv_done && h.offset == 30 && h.space == 38);
    g.len = 1; /* leaves 31: released */
    CHECK_EQ(ulnfi_match_arrive(&m, &g, &h), ULNFI_MATCH_FOUND);
    CHECK(h.recv == mr && h.recv_done && h.offset == 68 && h.space == 1);
    CHECK_EQ(mr->used, 69);
    CHECK_EQ(ulnfi_match_recv_free(&m, mr), 0);
    CHECK_EQ(arrive(&m, 1, 0, 5, 101), 2); /* the next receive in order */

    /* A multi-receive posted onto unexpected messages takes them in order,
     * truncating the one that does not fit; min 0 releases a full buffer. */
    CHECK_EQ(arrive(&m, 1, 0, 40, 102), 0);
    CHECK_EQ(arrive(&m, 1, 0, 50, 103), 0);
    CHECK_EQ(arrive(&m, 1, 0, 7, 104), 0);
    r = rv(ANY, 0, ~0ull, 3, FI_MULTI_RECV, 64);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    mr = h.recv;
    CHECK(h.msg_taken && h.msg->payload == CTX(102) && !h.recv_done && h.offset == 0 &&
          h.space == 40);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_pull(&m, mr, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(103) && h.recv_done && h.offset == 40 && h.space == 24);
    size_t olen, n = ulnfi_match_trunc(h.msg ? h.msg->len : 0, h.space, &olen);
    CHECK(n == 24 && olen == 26);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_pull(&m, mr, &h), -FI_EINVAL); /* no longer posted */
    CHECK_EQ(ulnfi_match_recv_free(&m, mr), 0);
    CHECK_EQ(m.n_unexp, 1);
    n = ulnfi_match_trunc(7, 8, &olen);
    CHECK(n == 7 && olen == 0);

    /* Pulling with nothing left keeps the buffer posted. */
    r = rv(ANY, 0, ~0ull, 4, FI_MULTI_RECV, 64);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    mr = h.recv;
    CHECK(h.msg && h.msg->payload == CTX(104) && !h.recv_done);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_pull(&m, mr, &h), ULNFI_MATCH_QUEUED);
    CHECK(h.recv == mr && !h.recv_done && h.msg == NULL);
    CHECK_EQ(m.n_posted, 1);
    CHECK_EQ(ulnfi_match_recv_free(&m, mr), -FI_EINVAL); /* still posted */
    CHECK(ulnfi_match_cancel(&m, CTX(4)) == mr);
    CHECK_EQ(ulnfi_match_recv_free(&m, mr), 0);
    ulnfi_match_fini(&m);
}

static void test_peek_claim(void)
{
    struct ulnfi_match m;
    struct ulnfi_match_hit h;
    CHECK_EQ(ulnfi_match_init(&m, 8, 8, true, 0), 0);
    struct ulnfi_match_recv r = rv(ANY, 5, 0, 1, FI_PEEK, 8);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_ENOMSG);
    CHECK_EQ(m.n_posted, 0); /* a peek is never queued */
    CHECK_EQ(arrive(&m, 1, 4, 10, 100), 0);
    CHECK_EQ(arrive(&m, 1, 5, 11, 101), 0);
    CHECK_EQ(arrive(&m, 2, 5, 12, 102), 0);
    CHECK_EQ(arrive(&m, 2, 5, 13, 103), 0);

    /* Peek: sees the first match, leaves it. */
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(101) && !h.msg_taken && h.recv_done && h.msg->len == 11);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    CHECK_EQ(m.n_unexp, 4);
    /* Peek|claim by context 7: 101 becomes invisible to others. */
    r = rv(ANY, 5, 0, 7, FI_PEEK | FI_CLAIM, 8);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(101) && !h.msg_taken && h.msg->claimed == CTX(7));
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    r = rv(ANY, 5, 0, 8, FI_PEEK | FI_CLAIM, 8); /* claims the next: 102 */
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(102));
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    r = rv(1, 5, 0, 9, FI_PEEK, 8); /* source 1 has only the claimed 101 */
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_ENOMSG);
    CHECK_EQ(post(&m, rv(ANY, 5, 0, 10, 0, 8)), 103); /* skips both claimed */
    CHECK_EQ(post(&m, rv(ANY, 5, 0, 11, 0, 8)), 0);
    CHECK_EQ(arrive(&m, 3, 5, 0, 104), 11); /* a posted receive is not a claim */

    /* FI_CLAIM takes exactly the claimed message, whatever its tag says. */
    r = rv(ANY, 999, 0, 8, FI_CLAIM, 8);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(102) && h.msg_taken && h.recv_done);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_ENOMSG); /* once only */
    /* FI_CLAIM|FI_DISCARD drops the one claimed by 7. */
    r = rv(ANY, 5, 0, 7, FI_CLAIM | FI_DISCARD, 0);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(101) && h.msg_taken);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    /* FI_PEEK|FI_DISCARD drops the first match, 100. */
    r = rv(ANY, 0, ~0ull, 12, FI_PEEK | FI_DISCARD, 0);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(100) && h.msg_taken);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    /* FI_PEEK|FI_CLAIM|FI_DISCARD drops too. */
    CHECK_EQ(arrive(&m, 3, 6, 0, 105), 0);
    r = rv(ANY, 6, 0, 13, FI_PEEK | FI_CLAIM | FI_DISCARD, 0);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg && h.msg->payload == CTX(105) && h.msg_taken);
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);
    CHECK_EQ(m.n_unexp, 0);
    CHECK_EQ(m.n_posted, 0);
    /* Every entry went back: the pools are whole again. */
    for (int i = 0; i < 8; i++)
        post_q(&m, rv(ANY, 1, 0, 20 + i, 0, 8));
    drain(&m);
    ulnfi_match_fini(&m);
}

static void test_cancel_full_invalid(void)
{
    struct ulnfi_match m;
    struct ulnfi_match_hit h;
    struct ulnfi_match_msg *e;
    CHECK_EQ(ulnfi_match_init(&m, 0, 4, false, 0), -FI_EINVAL);
    CHECK_EQ(ulnfi_match_init(&m, 3, 2, false, 0), 0);
    post_q(&m, rv(ANY, 1, 0, 1, 0, 8));
    post_q(&m, rv(ANY, 1, 0, 2, 0, 8));
    post_q(&m, rv(ANY, 1, 0, 1, 0, 8)); /* same context twice: oldest first */
    struct ulnfi_match_recv r = rv(ANY, 1, 0, 4, 0, 8);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EAGAIN);
    r.flags = FI_PEEK; /* even a peek needs an entry */
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EAGAIN);
    CHECK_EQ(m.stats.full_recv, 2);
    struct ulnfi_match_recv *c = ulnfi_match_cancel(&m, CTX(1));
    CHECK(c && c->context == CTX(1) && c->seq == 0);
    CHECK(ulnfi_match_cancel(&m, CTX(99)) == NULL);
    CHECK_EQ(arrive(&m, 0, 1, 0, 100), 2); /* cancel kept the order */
    CHECK_EQ(arrive(&m, 0, 1, 0, 101), 1);
    CHECK_EQ(ulnfi_match_recv_free(&m, c), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, c), -FI_EINVAL); /* twice */
    struct ulnfi_match_recv stray;
    CHECK_EQ(ulnfi_match_recv_free(&m, &stray), -FI_EINVAL); /* not ours */

    CHECK_EQ(arrive(&m, 0, 1, 0, 102), 0);
    CHECK_EQ(arrive(&m, 0, 1, 0, 103), 0);
    struct ulnfi_match_msg g = mg(0, 1, 0, 104);
    CHECK_EQ(ulnfi_match_arrive(&m, &g, &h), ULNFI_MATCH_NONE);
    CHECK_EQ(ulnfi_match_unexp(&m, &g, &e), -FI_EAGAIN);
    CHECK(e == NULL);
    CHECK_EQ(m.stats.full_unexp, 1);
    CHECK_EQ(m.n_unexp, 2);
    struct ulnfi_match_msg *q = ulnfi_match_msg_pop(&m);
    CHECK(q && q->payload == CTX(102));
    CHECK_EQ(ulnfi_match_msg_free(&m, q), 0);
    CHECK_EQ(ulnfi_match_msg_free(&m, q), -FI_EINVAL);              /* twice */
    CHECK_EQ(ulnfi_match_msg_free(&m, &m.msg_pool[1]), -FI_EINVAL); /* still queued */

    /* Bad flags and iov lists: -FI_EINVAL, counted, nothing queued. */
    uint64_t before = m.stats.invalid;
    r = rv(ANY, 1, 0, 5, FI_DISCARD, 8);
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r.flags = FI_MULTI_RECV | FI_PEEK;
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r.flags = FI_MULTI_RECV | FI_CLAIM;
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r.flags = FI_PEEK | FI_CLAIM;
    r.context = NULL;
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r = rv(ANY, 1, 0, 5, 0, 8);
    r.iov_count = ULNFI_MATCH_IOV_MAX + 1;
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r.iov_count = 2;
    r.iov[1].iov_len = SIZE_MAX;
    CHECK_EQ(ulnfi_match_post(&m, &r, &h), -FI_EINVAL);
    r = rv(ANY, 1, 0, 5, 0, 8);
    CHECK_EQ(ulnfi_match_pull(&m, &r, &h), -FI_EINVAL); /* not an entry */
    CHECK_EQ(m.stats.invalid - before, 7);
    CHECK_EQ(m.n_posted, 0);

    /* An iov list counts as one buffer. */
    r.iov_count = ULNFI_MATCH_IOV_MAX;
    for (int i = 0; i < ULNFI_MATCH_IOV_MAX; i++) {
        r.iov[i].iov_base = buf[i];
        r.iov[i].iov_len = 10 + (size_t)i;
    }
    CHECK_EQ(post(&m, r), 103);
    drain(&m);
    ulnfi_match_fini(&m);
}

/* ---- the randomized differential test ------------------------------------------------ */

#define CAP_R 48
#define CAP_M 40

struct mrecv {
    uintptr_t ctx;
    fi_addr_t src;
    uint64_t tag, ignore, flags;
    size_t len, used, min;
};
struct mmsg {
    uintptr_t id, claimed;
    fi_addr_t src;
    uint64_t tag;
    size_t len;
};

static struct mrecv mp[CAP_R];
static struct mmsg mu[CAP_M];
static int nmp, nmu;
static struct ulnfi_match_recv *held_r[CAP_R];
static struct ulnfi_match_msg *held_m[CAP_M];
static int nhr, nhm;
static uint64_t rng = 0x243f6a8885a308d3ull;
static int diffs; /* mismatches, reported for the first few only */

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool mmatch(bool directed, const struct mrecv *r, fi_addr_t src, uint64_t tag)
{
    return ((tag ^ r->tag) & ~r->ignore) == 0 && (!directed || r->src == ANY || r->src == src);
}

static void expect(bool ok, long op, const char *what)
{
    CHECK(ok);
    if (!ok && diffs++ < 10) fprintf(stderr, "op %ld: %s\n", op, what);
}

/* The model's multi-receive slice, the same rule as the matcher's. */
static bool mslice(struct mrecv *r, size_t len, size_t *off, size_t *space)
{
    size_t room = r->len - r->used;
    *off = r->used;
    *space = len < room ? len : room;
    r->used += *space;
    room -= *space;
    return room == 0 || room < r->min;
}

static void take_recv(struct ulnfi_match *m, struct ulnfi_match_hit *h)
{
    if (!h->recv_done) return;
    if (rnd() % 4) /* mostly freed at once; some held, as for a rendezvous */
        CHECK_EQ(ulnfi_match_recv_free(m, h->recv), 0);
    else
        held_r[nhr++] = h->recv;
}

static void take_msg(struct ulnfi_match *m, struct ulnfi_match_hit *h)
{
    if (!h->msg_taken) return;
    if (rnd() % 4)
        CHECK_EQ(ulnfi_match_msg_free(m, h->msg), 0);
    else
        held_m[nhm++] = h->msg;
}

static void del_mp(int i)
{
    memmove(&mp[i], &mp[i + 1], (size_t)(nmp - i - 1) * sizeof(mp[0]));
    nmp--;
}

static void del_mu(int i)
{
    memmove(&mu[i], &mu[i + 1], (size_t)(nmu - i - 1) * sizeof(mu[0]));
    nmu--;
}

static void rand_arrive(struct ulnfi_match *m, bool dir, long op, uintptr_t id)
{
    struct ulnfi_match_msg g = mg(rnd() % 3, rnd() % 16, rnd() % 4 ? rnd() % 64 : 0, id);
    struct ulnfi_match_hit h;
    int i = 0;
    while (i < nmp && !mmatch(dir, &mp[i], g.src, g.tag))
        i++;
    int ret = ulnfi_match_arrive(m, &g, &h);
    if (i == nmp) {
        expect(ret == ULNFI_MATCH_NONE, op, "arrive: matched, model did not");
        struct ulnfi_match_msg *e;
        ret = ulnfi_match_unexp(m, &g, &e);
        bool full = nmu + nhm == CAP_M;
        expect(full ? ret == -FI_EAGAIN : ret == 0, op, "unexp: pool");
        if (!full) mu[nmu++] = (struct mmsg){id, 0, g.src, g.tag, g.len};
        return;
    }
    expect(ret == ULNFI_MATCH_FOUND && (uintptr_t)h.recv->context == mp[i].ctx && !h.msg, op,
           "arrive: not the model's receive");
    size_t off = 0, space = mp[i].len;
    bool done = true;
    if (mp[i].flags & FI_MULTI_RECV) done = mslice(&mp[i], g.len, &off, &space);
    expect(h.offset == off && h.space == space && h.recv_done == done, op, "arrive: slice");
    if (done) del_mp(i);
    take_recv(m, &h);
}

static void rand_post(struct ulnfi_match *m, bool dir, long op, uintptr_t ctx, uint64_t flags)
{
    /* Tags use 4 bits. A rare receive ignores one high bit: it does not
     * change what matches, but takes the bit out of the hash key, so the
     * queues are rehashed while they hold entries. */
    static const uint64_t ignores[] = {0, 0, 1, 3, 7, 12, ~0ull};
    fi_addr_t src = rnd() % 4;
    uint64_t ignore = rnd() % 64 ? ignores[rnd() % 7] : 1ull << (4 + rnd() % 60);
    struct ulnfi_match_recv r =
        rv(src == 3 ? ANY : src, rnd() % 16, ignore, ctx, flags, rnd() % 96);
    struct mrecv mr = {ctx, r.src, r.tag, r.ignore, flags, r.iov[0].iov_len, 0, m->min_multi_recv};
    struct ulnfi_match_hit h;
    int ret = ulnfi_match_post(m, &r, &h);
    if (nmp + nhr == CAP_R) {
        expect(ret == -FI_EAGAIN, op, "post: pool full");
        return;
    }
    int i = 0;
    while (i < nmu && (mu[i].claimed || !mmatch(dir, &mr, mu[i].src, mu[i].tag)))
        i++;
    if (flags & FI_PEEK) {
        if (i == nmu) {
            expect(ret == -FI_ENOMSG, op, "peek: found, model did not");
            return;
        }
        expect(ret == ULNFI_MATCH_FOUND && (uintptr_t)h.msg->payload == mu[i].id, op, "peek");
        bool drop = flags & FI_DISCARD;
        expect(h.msg_taken == drop && h.recv_done, op, "peek: ownership");
        if (drop)
            del_mu(i);
        else if (flags & FI_CLAIM)
            mu[i].claimed = ctx;
        take_msg(m, &h);
        take_recv(m, &h);
        return;
    }
    if (i == nmu) {
        expect(ret == ULNFI_MATCH_QUEUED && !h.recv_done, op, "post: not queued");
        mp[nmp++] = mr;
        return;
    }
    expect(ret == ULNFI_MATCH_FOUND && h.msg_taken && (uintptr_t)h.msg->payload == mu[i].id, op,
           "post: not the model's message");
    if (!(flags & FI_MULTI_RECV)) {
        del_mu(i);
        expect(h.recv_done && h.space == mr.len, op, "post: done");
        take_msg(m, &h);
        take_recv(m, &h);
        return;
    }
    /* A multi-receive: pulls every match until released or none is left. */
    mp[nmp++] = mr;
    struct ulnfi_match_recv *e = h.recv;
    for (;;) {
        size_t off, space;
        bool done = mslice(&mp[nmp - 1], mu[i].len, &off, &space);
        expect(h.offset == off && h.space == space && h.recv_done == done, op, "multi: slice");
        del_mu(i);
        take_msg(m, &h);
        if (done) {
            nmp--;
            take_recv(m, &h);
            return;
        }
        while (i < nmu && (mu[i].claimed || !mmatch(dir, &mr, mu[i].src, mu[i].tag)))
            i++;
        ret = ulnfi_match_pull(m, e, &h);
        if (i == nmu) {
            expect(ret == ULNFI_MATCH_QUEUED && !h.recv_done, op, "pull: none");
            return;
        }
        expect(ret == ULNFI_MATCH_FOUND && (uintptr_t)h.msg->payload == mu[i].id, op, "pull");
    }
}

/* FI_CLAIM (and |FI_DISCARD) for a context that claimed, or for one that did not. */
static void rand_claim(struct ulnfi_match *m, long op, uintptr_t fresh)
{
    int i = nmu ? (int)(rnd() % (uint64_t)nmu) : 0;
    uintptr_t ctx = i < nmu && mu[i].claimed ? mu[i].claimed : fresh;
    struct ulnfi_match_recv r = rv(ANY, 0, 0, ctx, FI_CLAIM | (rnd() % 2 ? FI_DISCARD : 0), 64);
    struct ulnfi_match_hit h;
    int ret = ulnfi_match_post(m, &r, &h);
    if (nmp + nhr == CAP_R) {
        expect(ret == -FI_EAGAIN, op, "claim: pool full");
        return;
    }
    if (ctx == fresh) {
        expect(ret == -FI_ENOMSG, op, "claim: found an unclaimed message");
        return;
    }
    expect(ret == ULNFI_MATCH_FOUND && h.msg_taken && (uintptr_t)h.msg->payload == mu[i].id, op,
           "claim");
    del_mu(i);
    take_msg(m, &h);
    take_recv(m, &h);
}

static void rand_cancel(struct ulnfi_match *m, long op)
{
    int i = nmp ? (int)(rnd() % (uint64_t)nmp) : 0;
    uintptr_t ctx = i < nmp && rnd() % 4 ? mp[i].ctx : NEVER;
    struct ulnfi_match_recv *r = ulnfi_match_cancel(m, CTX(ctx));
    if (ctx == NEVER) {
        expect(r == NULL, op, "cancel: found a context never posted");
        return;
    }
    /* Contexts are unique here, so the model's i is the one. */
    expect(r && (uintptr_t)r->context == ctx && r->used == mp[i].used, op, "cancel");
    del_mp(i);
    if (r) CHECK_EQ(ulnfi_match_recv_free(m, r), 0);
}

static void rand_release(struct ulnfi_match *m)
{
    if (nhr) {
        int i = (int)(rnd() % (uint64_t)nhr);
        CHECK_EQ(ulnfi_match_recv_free(m, held_r[i]), 0);
        held_r[i] = held_r[--nhr];
    }
    if (nhm) {
        int i = (int)(rnd() % (uint64_t)nhm);
        CHECK_EQ(ulnfi_match_msg_free(m, held_m[i]), 0);
        held_m[i] = held_m[--nhm];
    }
}

/* The matcher's queues, walked, against the model's arrays. */
static void compare_queues(struct ulnfi_match *m, long op)
{
    bool same = m->n_posted == (size_t)nmp && m->n_unexp == (size_t)nmu;
    int i = 0;
    for (struct ulnfi_match_link *l = m->posted.next; same && l != &m->posted; l = l->next) {
        const struct ulnfi_match_recv *r =
            (const void *)((char *)l - offsetof(struct ulnfi_match_recv, link));
        same = i < nmp && (uintptr_t)r->context == mp[i].ctx && r->used == mp[i].used;
        i++;
    }
    i = 0;
    for (struct ulnfi_match_link *l = m->unexp.next; same && l != &m->unexp; l = l->next) {
        const struct ulnfi_match_msg *g =
            (const void *)((char *)l - offsetof(struct ulnfi_match_msg, link));
        same =
            i < nmu && (uintptr_t)g->payload == mu[i].id && (uintptr_t)g->claimed == mu[i].claimed;
        i++;
    }
    expect(same, op, "queues differ from the model");
}

static void test_random(long n_ops, bool dir)
{
    struct ulnfi_match m;
    CHECK_EQ(ulnfi_match_init(&m, CAP_R, CAP_M, dir, 16), 0);
    nmp = nmu = nhr = nhm = 0;
    uintptr_t next = 1;
    int failed_before = failed;
    for (long op = 0; op < n_ops && failed - failed_before < 20; op++) {
        /* Phases that favour receives, then arrivals, so each queue gets
         * long in turn (and pools fill) instead of both staying short. */
        unsigned k = (unsigned)(rnd() % 100);
        if ((op / 400) % 2 == 0 && k >= 20 && k < 35) k = 40;
        if ((op / 400) % 2 == 1 && k >= 35 && k < 50) k = 0;
        if (k < 35)
            rand_arrive(&m, dir, op, next++);
        else if (k < 57)
            rand_post(&m, dir, op, next++, rnd() % 8 ? 0 : FI_COMPLETION);
        else if (k < 61)
            rand_post(&m, dir, op, next++, FI_MULTI_RECV);
        else if (k < 69) {
            static const uint64_t peeks[] = {FI_PEEK, FI_PEEK | FI_CLAIM, FI_PEEK | FI_CLAIM,
                                             FI_PEEK | FI_DISCARD, FI_PEEK | FI_CLAIM | FI_DISCARD};
            rand_post(&m, dir, op, next++, peeks[rnd() % 5]);
        } else if (k < 74)
            rand_claim(&m, op, next++);
        else if (k < 83)
            rand_cancel(&m, op);
        else if (k < 84)
            ulnfi_match_set_min_multi_recv(&m, rnd() % 40);
        else
            rand_release(&m);
        if (op % 64 == 0) compare_queues(&m, op);
    }
    compare_queues(&m, n_ops);
    /* Close: the drains return the queues in order, then every entry is back. */
    for (int i = 0; i < nmp; i++) {
        struct ulnfi_match_recv *r = ulnfi_match_recv_pop(&m);
        CHECK(r && (uintptr_t)r->context == mp[i].ctx);
        if (r) CHECK_EQ(ulnfi_match_recv_free(&m, r), 0);
    }
    for (int i = 0; i < nmu; i++) {
        struct ulnfi_match_msg *g = ulnfi_match_msg_pop(&m);
        CHECK(g && (uintptr_t)g->payload == mu[i].id);
        if (g) CHECK_EQ(ulnfi_match_msg_free(&m, g), 0);
    }
    CHECK(ulnfi_match_recv_pop(&m) == NULL && ulnfi_match_msg_pop(&m) == NULL);
    while (nhr)
        CHECK_EQ(ulnfi_match_recv_free(&m, held_r[--nhr]), 0);
    while (nhm)
        CHECK_EQ(ulnfi_match_msg_free(&m, held_m[--nhm]), 0);
    size_t nfree = 0;
    for (struct ulnfi_match_recv *r = m.recv_free; r;
         r = r->link.next ? (void *)((char *)r->link.next - offsetof(struct ulnfi_match_recv, link))
                          : NULL)
        nfree++;
    CHECK_EQ(nfree, CAP_R);
    CHECK_EQ(m.stats.invalid, 0);
    CHECK(m.stats.rehash > 10);
    printf("random (%s): %ld ops, %llu posted, %llu arrived, %llu unexpected, %llu+%llu full, "
           "%llu rehash\n",
           dir ? "directed" : "undirected", n_ops, (unsigned long long)m.stats.posted,
           (unsigned long long)m.stats.arrived, (unsigned long long)m.stats.unexpected,
           (unsigned long long)m.stats.full_recv, (unsigned long long)m.stats.full_unexp,
           (unsigned long long)m.stats.rehash);
    ulnfi_match_fini(&m);
}

/* ulnfi_match_recv_alloc + ulnfi_match_post_entry (the provider's way):
 * the same results as ulnfi_match_post; an entry refused goes back to the
 * pool; an entry not taken from it, or posted already, is refused. */
static void test_post_entry(void)
{
    struct ulnfi_match m;
    struct ulnfi_match_hit h;
    CHECK_EQ(ulnfi_match_init(&m, 2, 2, true, 0), 0);
    struct ulnfi_match_recv *r = ulnfi_match_recv_alloc(&m), r0 = rv(3, 7, 0, 1, 0, 8);
    CHECK(r != NULL);
    if (!r) return;
    memcpy(r, &r0, offsetof(struct ulnfi_match_recv, len)); /* the public fields */
    CHECK_EQ(ulnfi_match_post_entry(&m, r, &h), ULNFI_MATCH_QUEUED);
    CHECK(h.recv == r && !h.recv_done);
    CHECK_EQ(ulnfi_match_post_entry(&m, r, &h), -FI_EINVAL); /* posted already */
    CHECK_EQ(m.n_posted, 1);
    CHECK_EQ(arrive(&m, 3, 7, 8, 100), 1);

    /* a message waiting: the entry takes it */
    CHECK_EQ(arrive(&m, 3, 9, 8, 101), 0);
    r = ulnfi_match_recv_alloc(&m);
    CHECK(r != NULL);
    if (!r) return;
    r0 = rv(3, 9, 0, 2, 0, 8);
    memcpy(r, &r0, offsetof(struct ulnfi_match_recv, len));
    CHECK_EQ(ulnfi_match_post_entry(&m, r, &h), ULNFI_MATCH_FOUND);
    CHECK(h.msg_taken && h.recv_done && h.msg && h.msg->payload == CTX(101));
    CHECK_EQ(ulnfi_match_msg_free(&m, h.msg), 0);
    CHECK_EQ(ulnfi_match_recv_free(&m, h.recv), 0);

    /* refused: bad flags; the entry is the pool's again (both fit) */
    uint64_t before = m.stats.invalid;
    r = ulnfi_match_recv_alloc(&m);
    CHECK(r != NULL);
    if (!r) return;
    r0 = rv(ANY, 1, 0, 3, FI_DISCARD, 8);
    memcpy(r, &r0, offsetof(struct ulnfi_match_recv, len));
    CHECK_EQ(ulnfi_match_post_entry(&m, r, &h), -FI_EINVAL);
    CHECK(h.recv == NULL);
    struct ulnfi_match_recv *a = ulnfi_match_recv_alloc(&m), *b = ulnfi_match_recv_alloc(&m);
    CHECK(a && b && ulnfi_match_recv_alloc(&m) == NULL);
    if (!a || !b) return;
    r0 = rv(ANY, 1, 0, 4, 0, 8);
    memcpy(a, &r0, offsetof(struct ulnfi_match_recv, len));
    memcpy(b, &r0, offsetof(struct ulnfi_match_recv, len));
    CHECK_EQ(ulnfi_match_post_entry(&m, a, &h), ULNFI_MATCH_QUEUED);
    CHECK_EQ(ulnfi_match_post_entry(&m, b, &h), ULNFI_MATCH_QUEUED);
    struct ulnfi_match_recv stray = r0;
    CHECK_EQ(ulnfi_match_post_entry(&m, &stray, &h), -FI_EINVAL); /* not from the pool */
    CHECK_EQ(m.stats.invalid - before, 2);
    drain(&m);
    ulnfi_match_fini(&m);
}

int main(int argc, char **argv)
{
    long n_ops = argc > 1 ? strtol(argv[1], NULL, 0) : 100000;
    if (argc > 2) rng = strtoull(argv[2], NULL, 0) | 1; /* another seed; never 0 */
    test_order();
    test_source();
    test_resolve();
    test_exact_vs_wild(true);
    test_exact_vs_wild(false);
    test_learn();
    test_multi();
    test_peek_claim();
    test_cancel_full_invalid();
    test_post_entry();
    test_random(n_ops, true);
    test_random(n_ops, false);
    return summary();
}
