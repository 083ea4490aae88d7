/*
 * match.c - the provider's tag matcher (see match.h for the contracts and
 * match.md for the design).
 *
 * Order without a full scan. Every entry is in its queue's global list
 * (posting or arrival order) and also in a second list:
 *   - a message in the bucket of its (source, tag);
 *   - an exact receive (no ignore bit in the key, and a source if directed)
 *     in the bucket of its (source, tag); any other in the wildcard list.
 * Each second list is in order too. A new exact receive can only match
 * messages of its bucket, so the first match there is the first overall; a
 * wildcard receive scans all messages. An arriving message takes the first
 * match of its receive bucket and the first match of the wildcard list,
 * whichever was posted first (lower seq): the same receive a single list
 * would give, and O(1) when receives are exact, as MPI's mostly are (UCX's
 * tag matching works the same way). The source is in the key only with
 * directed receive: without it, a receive's source does not take part.
 *
 * The key is (tag & key_mask). Callers such as Open MPI ignore a few protocol
 * bits in every receive (its synchronous-send bit), which would make every
 * receive a wildcard; so a receive that ignores few bits (at most
 * ULNFI_MATCH_LEARN_BITS) takes them out of the key for good, and the queues
 * are rehashed, in order, once per bit learned: at most 64 times.
 */
#include <stdlib.h>
#include <string.h>

#include "match.h"

/* Where an entry is: in its pool's free list, in the matcher's queue, or
 * handed out to the provider. Checked by the free functions. */
enum { ENTRY_FREE = 0, ENTRY_QUEUED, ENTRY_OUT, ENTRY_NEW /* ulnfi_match_recv_alloc's */ };

#define RECV_OF(l)                                                                                 \
    ((struct ulnfi_match_recv *)((char *)(l)-offsetof(struct ulnfi_match_recv, link)))
#define MSG_OF(l) ((struct ulnfi_match_msg *)((char *)(l)-offsetof(struct ulnfi_match_msg, link)))
#define RECV_OF_B(l)                                                                               \
    ((struct ulnfi_match_recv *)((char *)(l)-offsetof(struct ulnfi_match_recv, blink)))
#define MSG_OF_B(l)                                                                                \
    ((struct ulnfi_match_msg *)((char *)(l)-offsetof(struct ulnfi_match_msg, blink)))

_Static_assert((ULNFI_MATCH_BUCKETS & (ULNFI_MATCH_BUCKETS - 1)) == 0, "buckets: a power of two");

static void list_init(struct ulnfi_match_link *h)
{
    h->prev = h->next = h;
}

static void list_append(struct ulnfi_match_link *h, struct ulnfi_match_link *l)
{
    l->prev = h->prev;
    l->next = h;
    h->prev->next = l;
    h->prev = l;
}

static void list_remove(struct ulnfi_match_link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

int ulnfi_match_init(struct ulnfi_match *m, size_t max_recv, size_t max_unexp, bool directed,
                     size_t min_multi_recv)
{
    memset(m, 0, sizeof(*m));
    if (max_recv == 0 || max_unexp == 0) return -FI_EINVAL;
    m->recv_pool = calloc(max_recv, sizeof(*m->recv_pool));
    m->msg_pool = calloc(max_unexp, sizeof(*m->msg_pool));
    if (!m->recv_pool || !m->msg_pool) {
        ulnfi_match_fini(m);
        return -FI_ENOMEM;
    }
    m->max_recv = max_recv;
    m->max_unexp = max_unexp;
    /* Free lists chained through link.next, lowest entry first (so a fresh
     * matcher reuses the same few cache lines). */
    for (size_t i = max_recv; i-- > 0;) {
        m->recv_pool[i].link.next = m->recv_free ? &m->recv_free->link : NULL;
        m->recv_free = &m->recv_pool[i];
    }
    for (size_t i = max_unexp; i-- > 0;) {
        m->msg_pool[i].link.next = m->msg_free ? &m->msg_free->link : NULL;
        m->msg_free = &m->msg_pool[i];
    }
    list_init(&m->posted);
    list_init(&m->unexp);
    list_init(&m->wild);
    for (size_t i = 0; i < ULNFI_MATCH_BUCKETS; i++) {
        list_init(&m->rbucket[i]);
        list_init(&m->ubucket[i]);
    }
    m->directed = directed;
    m->min_multi_recv = min_multi_recv;
    m->key_mask = ~0ull;
    return 0;
}

void ulnfi_match_fini(struct ulnfi_match *m)
{
    free(m->recv_pool);
    free(m->msg_pool);
    memset(m, 0, sizeof(*m));
}

void ulnfi_match_set_min_multi_recv(struct ulnfi_match *m, size_t min)
{
    m->min_multi_recv = min;
}

static struct ulnfi_match_recv *recv_get(struct ulnfi_match *m)
{
    struct ulnfi_match_recv *r = m->recv_free;
    if (!r) {
        m->stats.full_recv++;
        return NULL;
    }
    m->recv_free = r->link.next ? RECV_OF(r->link.next) : NULL;
    return r;
}

static void recv_put(struct ulnfi_match *m, struct ulnfi_match_recv *r)
{
    r->state = ENTRY_FREE;
    r->link.prev = NULL;
    r->link.next = m->recv_free ? &m->recv_free->link : NULL;
    m->recv_free = r;
}

/* Is p one of pool's n entries? Compared as integers: p may be any pointer. */
static bool in_pool(const void *p, const void *pool, size_t n, size_t size)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)pool;
    return a >= b && a < b + n * size && (a - b) % size == 0;
}

int ulnfi_match_recv_free(struct ulnfi_match *m, struct ulnfi_match_recv *r)
{
    if (!in_pool(r, m->recv_pool, m->max_recv, sizeof(*r)) || r->state != ENTRY_OUT) {
        m->stats.invalid++;
        return -FI_EINVAL;
    }
    recv_put(m, r);
    return 0;
}

int ulnfi_match_msg_free(struct ulnfi_match *m, struct ulnfi_match_msg *msg)
{
    if (!in_pool(msg, m->msg_pool, m->max_unexp, sizeof(*msg)) || msg->state != ENTRY_OUT) {
        m->stats.invalid++;
        return -FI_EINVAL;
    }
    msg->state = ENTRY_FREE;
    msg->link.prev = NULL;
    msg->link.next = m->msg_free ? &m->msg_free->link : NULL;
    m->msg_free = msg;
    return 0;
}

/* The bucket of (src, tag): mixed by a multiply, top bits taken (they are
 * the well-mixed ones). Without directed receive the source stays out. */
static size_t bucket(const struct ulnfi_match *m, fi_addr_t src, uint64_t tag)
{
    uint64_t k = (tag & m->key_mask) ^ (m->directed ? (src + 1) * 0x9e3779b97f4a7c15ull : 0);
    k *= 0xff51afd7ed558ccdull;
    return (size_t)(k >> 32) & (ULNFI_MATCH_BUCKETS - 1);
}

static bool recv_exact(const struct ulnfi_match *m, const struct ulnfi_match_recv *r)
{
    return (r->ignore & m->key_mask) == 0 && (!m->directed || r->src != FI_ADDR_UNSPEC);
}

/* Puts every queued entry back into its bucket (or the wildcard list) under
 * the current key. Walking the global lists re-appends in order. */
static void rehash(struct ulnfi_match *m)
{
    list_init(&m->wild);
    for (size_t i = 0; i < ULNFI_MATCH_BUCKETS; i++) {
        list_init(&m->rbucket[i]);
        list_init(&m->ubucket[i]);
    }
    for (struct ulnfi_match_link *l = m->posted.next; l != &m->posted; l = l->next) {
        struct ulnfi_match_recv *r = RECV_OF(l);
        r->exact = recv_exact(m, r);
        list_append(r->exact ? &m->rbucket[bucket(m, r->src, r->tag)] : &m->wild, &r->blink);
    }
    for (struct ulnfi_match_link *l = m->unexp.next; l != &m->unexp; l = l->next) {
        struct ulnfi_match_msg *msg = MSG_OF(l);
        list_append(&m->ubucket[bucket(m, msg->src, msg->tag)], &msg->blink);
    }
}

/* A receive ignoring a few bits still in the key takes them out of it. */
static void learn(struct ulnfi_match *m, uint64_t ignore)
{
    uint64_t extra = ignore & m->key_mask;
    if (!extra || __builtin_popcountll(ignore) > ULNFI_MATCH_LEARN_BITS) return;
    m->key_mask &= ~extra;
    m->stats.rehash++;
    rehash(m);
}

static void recv_queue(struct ulnfi_match *m, struct ulnfi_match_recv *r)
{
    list_append(&m->posted, &r->link);
    list_append(r->exact ? &m->rbucket[bucket(m, r->src, r->tag)] : &m->wild, &r->blink);
    r->state = ENTRY_QUEUED;
    m->n_posted++;
}

/* Takes a queued receive out of the posted queue and hands it to the provider. */
static void recv_take(struct ulnfi_match *m, struct ulnfi_match_recv *r)
{
    list_remove(&r->link);
    list_remove(&r->blink);
    r->state = ENTRY_OUT;
    m->n_posted--;
}

static void msg_take(struct ulnfi_match *m, struct ulnfi_match_msg *msg)
{
    list_remove(&msg->link);
    list_remove(&msg->blink);
    msg->state = ENTRY_OUT;
    m->n_unexp--;
}

/* The first unclaimed unexpected message, in arrival order, that r matches:
 * for an exact receive, the first of its bucket. */
static struct ulnfi_match_msg *unexp_find(struct ulnfi_match *m, const struct ulnfi_match_recv *r)
{
    if (!m->n_unexp) return NULL; /* the common case of a receive posted ahead: no hashing */
    if (r->exact) {
        struct ulnfi_match_link *h = &m->ubucket[bucket(m, r->src, r->tag)];
        for (struct ulnfi_match_link *l = h->next; l != h; l = l->next) {
            struct ulnfi_match_msg *msg = MSG_OF_B(l);
            if (!msg->claimed && ulnfi_match_test(m, r, msg->src, msg->tag)) return msg;
        }
        return NULL;
    }
    for (struct ulnfi_match_link *l = m->unexp.next; l != &m->unexp; l = l->next) {
        struct ulnfi_match_msg *msg = MSG_OF(l);
        if (!msg->claimed && ulnfi_match_test(m, r, msg->src, msg->tag)) return msg;
    }
    return NULL;
}

static struct ulnfi_match_msg *unexp_find_claimed(struct ulnfi_match *m, const void *context)
{
    for (struct ulnfi_match_link *l = m->unexp.next; l != &m->unexp; l = l->next) {
        struct ulnfi_match_msg *msg = MSG_OF(l);
        if (msg->claimed == context) return msg;
    }
    return NULL;
}

/*
 * The next slice of a posted FI_MULTI_RECV buffer for a message of len bytes.
 * The buffer goes back to the provider once the room left is below the
 * minimum it was posted with, or is gone (with min_multi_recv 0, a full buffer
 * must still be released: zero-length messages alone would never fill it).
 */
static void multi_slice(struct ulnfi_match *m, struct ulnfi_match_recv *r, size_t len,
                        struct ulnfi_match_hit *hit)
{
    size_t room = r->len - r->used;
    hit->offset = r->used;
    hit->space = len < room ? len : room;
    r->used += hit->space;
    room -= hit->space;
    hit->recv_done = room == 0 || room < r->min_multi;
    if (hit->recv_done) recv_take(m, r);
}

static void hit_init(struct ulnfi_match_hit *hit, struct ulnfi_match_recv *r)
{
    hit->recv = r;
    hit->msg = NULL;
    hit->offset = 0;
    hit->space = r ? r->len : 0;
    hit->recv_done = true;
    hit->msg_taken = false;
}

/* The flag combinations fi_tagged(3) allows, and an iov list we can hold. */
static int recv_check(const struct ulnfi_match_recv *r, size_t *len)
{
    uint64_t f = r->flags;
    if (r->iov_count > ULNFI_MATCH_IOV_MAX) return -FI_EINVAL;
    if ((f & FI_DISCARD) && !(f & (FI_PEEK | FI_CLAIM))) return -FI_EINVAL;
    if ((f & FI_MULTI_RECV) && (f & (FI_PEEK | FI_CLAIM))) return -FI_EINVAL;
    /* A NULL context cannot tell a claimed message from an unclaimed one. */
    if ((f & FI_CLAIM) && !r->context) return -FI_EINVAL;
    size_t sum = 0;
    for (size_t i = 0; i < r->iov_count; i++) {
        if (r->iov[i].iov_len > SIZE_MAX - sum) return -FI_EINVAL;
        sum += r->iov[i].iov_len;
    }
    *len = sum;
    return 0;
}

/* FI_PEEK, FI_CLAIM and FI_DISCARD: look at or take one message; never queued. */
static int post_peek_claim(struct ulnfi_match *m, struct ulnfi_match_recv *e,
                           struct ulnfi_match_hit *hit)
{
    uint64_t f = e->flags;
    struct ulnfi_match_msg *msg =
        (f & FI_PEEK) ? unexp_find(m, e) : unexp_find_claimed(m, e->context);
    if (!msg) {
        recv_put(m, e);
        hit_init(hit, NULL);
        return -FI_ENOMSG;
    }
    hit->msg = msg;
    if (!(f & FI_PEEK) || (f & FI_DISCARD)) {
        msg_take(m, msg);
        hit->msg_taken = true;
    } else if (f & FI_CLAIM) {
        msg->claimed = e->context;
    }
    return ULNFI_MATCH_FOUND;
}

/* The public fields of r, and of its iov only the entries in use: a receive
 * is posted for every message, and the whole struct is four cache lines. */
static void recv_copy(struct ulnfi_match_recv *e, const struct ulnfi_match_recv *r)
{
    e->src = r->src;
    e->tag = r->tag;
    e->ignore = r->ignore;
    e->context = r->context;
    e->flags = r->flags;
    e->iov_count = r->iov_count;
    e->owner = r->owner;
    /* One buffer, the common case, by hand: gcc turns the loop into two
     * calls to memmove (e and r might overlap, for all it knows). */
    if (r->iov_count == 1) {
        e->iov[0] = r->iov[0];
        e->desc[0] = r->desc[0];
        return;
    }
    for (size_t i = 0; i < r->iov_count; i++) {
        e->iov[i] = r->iov[i];
        e->desc[i] = r->desc[i];
    }
}

/* A checked entry with its public fields set: match it or queue it. */
static int post_entry(struct ulnfi_match *m, struct ulnfi_match_recv *e, size_t len,
                      struct ulnfi_match_hit *hit)
{
    learn(m, e->ignore);
    e->len = len;
    e->used = 0;
    e->min_multi = m->min_multi_recv;
    e->seq = m->recv_seq++;
    e->exact = recv_exact(m, e);
    e->state = ENTRY_OUT;
    m->stats.posted++;
    hit_init(hit, e);
    if (e->flags & (FI_PEEK | FI_CLAIM)) return post_peek_claim(m, e, hit);

    /* A receive posted ahead of its message, the common case, finds the
     * unexpected queue empty: tested here, without the call. */
    struct ulnfi_match_msg *msg = m->n_unexp ? unexp_find(m, e) : NULL;
    if (msg && !(e->flags & FI_MULTI_RECV)) {
        msg_take(m, msg);
        hit->msg = msg;
        hit->msg_taken = true;
        return ULNFI_MATCH_FOUND;
    }
    /* Not matched, or a multi-receive buffer, which is posted before it takes
     * its first message: then recv_take and ulnfi_match_pull see it queued. */
    recv_queue(m, e);
    hit->recv_done = false;
    if (!msg) return ULNFI_MATCH_QUEUED;
    return ulnfi_match_pull(m, e, hit);
}

int ulnfi_match_post(struct ulnfi_match *m, const struct ulnfi_match_recv *r,
                     struct ulnfi_match_hit *hit)
{
    size_t len;
    int ret = recv_check(r, &len);
    hit_init(hit, NULL);
    if (ret) {
        m->stats.invalid++;
        return ret;
    }
    struct ulnfi_match_recv *e = recv_get(m);
    if (!e) return -FI_EAGAIN;
    recv_copy(e, r);
    return post_entry(m, e, len, hit);
}

struct ulnfi_match_recv *ulnfi_match_recv_alloc(struct ulnfi_match *m)
{
    struct ulnfi_match_recv *e = recv_get(m);
    if (e) e->state = ENTRY_NEW;
    return e;
}

int ulnfi_match_post_entry(struct ulnfi_match *m, struct ulnfi_match_recv *e,
                           struct ulnfi_match_hit *hit)
{
    size_t len;
    /* The state ulnfi_match_recv_alloc set (ulnfi_match_recv_free's pool
     * test, a division, would cost more than the rest of this check on the
     * path of every receive; the provider is the only caller). */
    bool ours = e->state == ENTRY_NEW;
    int ret = ours ? recv_check(e, &len) : -FI_EINVAL;
    if (ret) {
        m->stats.invalid++;
        if (ours) recv_put(m, e);
        hit_init(hit, NULL);
        return ret;
    }
    return post_entry(m, e, len, hit);
}

int ulnfi_match_pull(struct ulnfi_match *m, struct ulnfi_match_recv *r, struct ulnfi_match_hit *hit)
{
    hit_init(hit, NULL);
    if (!in_pool(r, m->recv_pool, m->max_recv, sizeof(*r)) || r->state != ENTRY_QUEUED ||
        !(r->flags & FI_MULTI_RECV)) {
        m->stats.invalid++;
        return -FI_EINVAL;
    }
    hit_init(hit, r);
    hit->recv_done = false;
    struct ulnfi_match_msg *msg = unexp_find(m, r);
    if (!msg) return ULNFI_MATCH_QUEUED;
    msg_take(m, msg);
    hit->msg = msg;
    hit->msg_taken = true;
    multi_slice(m, r, msg->len, hit);
    return ULNFI_MATCH_FOUND;
}

/* The first receive in posting order that (src, tag) matches: the first
 * match of its bucket or of the wildcard list, whichever is older. */
static struct ulnfi_match_recv *posted_find(struct ulnfi_match *m, fi_addr_t src, uint64_t tag)
{
    struct ulnfi_match_recv *best = NULL;
    if (!m->n_posted) return NULL; /* unexpected: no hashing */
    struct ulnfi_match_link *h = &m->rbucket[bucket(m, src, tag)];
    for (struct ulnfi_match_link *l = h->next; l != h; l = l->next) {
        struct ulnfi_match_recv *r = RECV_OF_B(l);
        if (ulnfi_match_test(m, r, src, tag)) {
            best = r;
            break;
        }
    }
    for (struct ulnfi_match_link *l = m->wild.next; l != &m->wild; l = l->next) {
        struct ulnfi_match_recv *r = RECV_OF_B(l);
        if (best && r->seq > best->seq) break;
        if (ulnfi_match_test(m, r, src, tag)) return r;
    }
    return best;
}

int ulnfi_match_arrive(struct ulnfi_match *m, const struct ulnfi_match_msg *msg,
                       struct ulnfi_match_hit *hit)
{
    m->stats.arrived++;
    hit_init(hit, NULL);
    struct ulnfi_match_recv *r = posted_find(m, msg->src, msg->tag);
    if (!r) return ULNFI_MATCH_NONE;
    hit_init(hit, r);
    if (r->flags & FI_MULTI_RECV)
        multi_slice(m, r, msg->len, hit);
    else
        recv_take(m, r);
    return ULNFI_MATCH_FOUND;
}

int ulnfi_match_unexp(struct ulnfi_match *m, const struct ulnfi_match_msg *msg,
                      struct ulnfi_match_msg **out)
{
    struct ulnfi_match_msg *e = m->msg_free;
    *out = NULL;
    if (!e) {
        m->stats.full_unexp++;
        return -FI_EAGAIN;
    }
    m->msg_free = e->link.next ? MSG_OF(e->link.next) : NULL;
    *e = *msg;
    e->seq = m->msg_seq++;
    e->claimed = NULL;
    e->state = ENTRY_QUEUED;
    list_append(&m->unexp, &e->link);
    list_append(&m->ubucket[bucket(m, e->src, e->tag)], &e->blink);
    m->n_unexp++;
    m->stats.unexpected++;
    *out = e;
    return 0;
}

size_t ulnfi_match_resolve(struct ulnfi_match *m,
                           fi_addr_t (*src_of)(const struct ulnfi_match_msg *msg, void *arg),
                           void *arg)
{
    size_t moved = 0, left = 0;
    for (struct ulnfi_match_link *l = m->unexp.next; l != &m->unexp; l = l->next) {
        struct ulnfi_match_msg *msg = MSG_OF(l);
        if (msg->src != FI_ADDR_NOTAVAIL) continue;
        msg->src = src_of(msg, arg);
        if (msg->src == FI_ADDR_NOTAVAIL)
            left++;
        else
            moved++;
    }
    /* The source is part of a message's bucket: rebuilding them all from the
     * arrival-ordered queue puts each where exact receives look, ahead of
     * the same peer's later messages. Rare (a peer inserted after it sent),
     * so the plain way. */
    if (moved && m->directed) rehash(m);
    return left;
}

size_t ulnfi_match_forget(struct ulnfi_match *m, fi_addr_t src)
{
    size_t n = 0;
    for (struct ulnfi_match_link *l = m->unexp.next; l != &m->unexp; l = l->next) {
        struct ulnfi_match_msg *msg = MSG_OF(l);
        if (msg->src != src) continue;
        msg->src = FI_ADDR_NOTAVAIL;
        n++;
    }
    if (n && m->directed) rehash(m); /* the source is part of the bucket */
    return n;
}

struct ulnfi_match_recv *ulnfi_match_cancel(struct ulnfi_match *m, void *context)
{
    for (struct ulnfi_match_link *l = m->posted.next; l != &m->posted; l = l->next) {
        struct ulnfi_match_recv *r = RECV_OF(l);
        if (r->context != context) continue;
        recv_take(m, r);
        return r;
    }
    return NULL;
}

struct ulnfi_match_recv *ulnfi_match_recv_pop(struct ulnfi_match *m)
{
    if (m->posted.next == &m->posted) return NULL;
    struct ulnfi_match_recv *r = RECV_OF(m->posted.next);
    recv_take(m, r);
    return r;
}

struct ulnfi_match_msg *ulnfi_match_msg_pop(struct ulnfi_match *m)
{
    if (m->unexp.next == &m->unexp) return NULL;
    struct ulnfi_match_msg *msg = MSG_OF(m->unexp.next);
    msg_take(m, msg);
    return msg;
}
