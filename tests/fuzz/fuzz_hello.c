/*
 * fuzz_hello.c - fuzz target for the keyer of the host services' sealed wire
 * (tools/ulnetd/wire_seal.c, ulnetd --secure): what arrives there in clear
 * before any key - HELLOs, COOKIEs, garbage - and the stateless cookies it
 * hands out over its token bucket (src/seal/cookie.h).
 *
 * A fresh wire_seal per input (--secure encrypt, no secret) wraps a link of
 * this file: an in-memory table of peers and a queue of datagrams from
 * SOURCES addresses; what the service sends is recorded with the address its
 * id pointed at then (the COOKIE's id moves from source to source). The
 * input is records, each an op byte, a source byte and what the op takes:
 *   op % 4 == 0  raw: a length byte and that many bytes, as they come;
 *   op % 4 == 1  HELLO: flags, key (one of KEYS, made at start), nonce (8),
 *                then the cookie: op bits 2-3 say none, the last cookie the
 *                service sent this source, that one with a bit flipped (the
 *                next byte says which), or 16 bytes of the input;
 *   op % 4 == 2  COOKIE: 16 bytes of cookie; op bit 2: with the nonce of the
 *                service's last HELLO to this source, else 8 of the input;
 *   op % 4 == 3  a datagram of the wire for this source (the gate holds it
 *                until keyed and asks with a HELLO).
 * After each record the service's receive path runs dry. A HELLO record
 * with op bit 4 first empties the bucket (as a flood would), with bit 5 the
 * cookie bucket too, so that few records reach the cookie paths.
 *
 * What must hold, against a model of what the service sent: a cookie is
 * accepted only in a HELLO from the source it was sent to, with the nonce it
 * was made for, byte for byte; a COOKIE is taken (got) only from a source the
 * service asked, for the nonce of its HELLO there; every COOKIE sent goes to
 * the source of the HELLO it answers, echoes that HELLO's nonce, and is
 * COOKIE_LEN long; a HELLO with no cookie, a flipped one or made-up bytes is
 * never accepted. ASan watches every read: a datagram is a copy of exactly
 * its length.
 */
#include <arpa/inet.h>

/* The keyer's own file: the target reaches its buckets and counters. */
#include "wire_seal.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SOURCES 8u
#define KEYS    4u
#define PEERS   256u
#define QUEUE   64u
#define DGRAM   1472u
#define H_LEN   (4u + 2u + ULN_SEAL_PUB_COMPACT + 8u + 8u + 16u) /* wire_seal.c's HELLO */
#define H_NONCE (4u + 2u + ULN_SEAL_PUB_COMPACT + 8u)
#define C_LEN   (6u + 8u + 16u) /* its COOKIE */
#define MAGIC   0x6b6e6c75u

typedef unsigned long long ULL;

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_hello: %s\n", what);
        abort();
    }
}

/* ---- the link below: peers, a queue in, a record out ------------------------ */

struct dgram {
    uint8_t *b; /* exactly len bytes: ASan sees a read past them */
    uint32_t len;
    struct sockaddr_in src;
};

static struct {
    struct uln_link l;
    struct sockaddr_in peer[PEERS];
    int npeers;
    struct dgram q[QUEUE];
    unsigned nq, next;
} L;

/* What the service last sent each source: its HELLO's nonce, a COOKIE. */
static struct {
    bool hello, cookie;
    uint8_t hello_nonce[8];
    uint8_t cookie_nonce[8], cookie_bytes[16];
} sent[SOURCES];

static struct sockaddr_in source(unsigned i)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(7475 + i / 4))};
    a.sin_addr.s_addr = htonl(0x0a000001u + i % 4);
    return a;
}

static int source_of(const struct sockaddr_in *a)
{
    for (unsigned i = 0; i < SOURCES; i++) {
        struct sockaddr_in s = source(i);
        if (s.sin_addr.s_addr == a->sin_addr.s_addr && s.sin_port == a->sin_port) return (int)i;
    }
    return -1;
}

static bool same(const struct sockaddr_in *a, const void *b, socklen_t len)
{
    const struct sockaddr_in *x = b;
    return len == sizeof *x && x->sin_addr.s_addr == a->sin_addr.s_addr &&
           x->sin_port == a->sin_port;
}

static int l_find(const struct uln_link *l, const void *addr, socklen_t len)
{
    for (int i = 0; i < L.npeers; i++)
        if (same(&L.peer[i], addr, len)) return i;
    return -ENOENT;
}

static int l_add(struct uln_link *l, const void *addr, socklen_t len)
{
    if (len != sizeof(struct sockaddr_in)) return -EINVAL;
    if (l_find(l, addr, len) >= 0) return -EEXIST;
    if (L.npeers == PEERS) return -ENOSPC;
    memcpy(&L.peer[L.npeers], addr, len);
    return L.npeers++;
}

static int l_set(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    if (peer < 0 || peer >= L.npeers || len != sizeof(struct sockaddr_in)) return -EINVAL;
    int other = l_find(l, addr, len);
    if (other >= 0 && other != peer) return -EEXIST;
    memcpy(&L.peer[peer], addr, len);
    return 0;
}

/* What the service sends, checked as it goes: a COOKIE to the source of
 * the HELLO it answers (pending), with that HELLO's nonce. */
static struct {
    bool on;
    int src;
    uint8_t nonce[8];
} answering;

static int l_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    for (unsigned k = 0; k < n; k++) {
        uint8_t b[DGRAM];
        uint32_t len = 0, m;
        for (uint32_t i = 0; i < pkts[k].niov; i++) {
            must(len + pkts[k].iov[i].iov_len <= sizeof b, "a datagram over the payload");
            memcpy(b + len, pkts[k].iov[i].iov_base, pkts[k].iov[i].iov_len);
            len += (uint32_t)pkts[k].iov[i].iov_len;
        }
        must(pkts[k].peer >= 0 && pkts[k].peer < L.npeers, "sent to no peer");
        int s = source_of(&L.peer[pkts[k].peer]);
        if (len < 6) continue;
        memcpy(&m, b, 4);
        if (m != MAGIC) continue; /* sealed: not the keyer's */
        if (len == C_LEN) {
            must(b[5] == 0x4, "a COOKIE without its flag");
            must(answering.on && s == answering.src, "a COOKIE to another source");
            must(!memcmp(b + 6, answering.nonce, 8), "a COOKIE for another nonce");
            sent[s].cookie = true;
            memcpy(sent[s].cookie_nonce, b + 6, 8);
            memcpy(sent[s].cookie_bytes, b + 14, 16);
        } else {
            must(len == H_LEN, "a keyer's datagram of another length");
            if (s >= 0 && (b[5] & 0x1)) { /* an ask: its nonce is the one a COOKIE must echo */
                sent[s].hello = true;
                memcpy(sent[s].hello_nonce, b + H_NONCE, 8);
            }
        }
    }
    return (int)n;
}

static int l_flush(struct uln_link *l)
{
    return 0;
}

static int l_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    unsigned n = 0;
    while (n < max && L.next < L.nq) {
        struct dgram *d = &L.q[L.next];
        int id = l_find(l, &d->src, sizeof d->src);
        out[n++] = (struct uln_link_rx){
            .buf = d->b, .len = d->len, .peer = id < 0 ? -1 : id, .handle = L.next++};
    }
    return (int)n;
}

static int l_release(struct uln_link *l, uint32_t h)
{
    return 0;
}

static const void *l_addr(const struct uln_link *l, uint32_t h, socklen_t *len)
{
    if (h >= L.nq) return NULL;
    *len = sizeof L.q[h].src;
    return &L.q[h].src;
}

static int l_fds(const struct uln_link *l, int *fds, int max)
{
    return 0;
}

static int l_wait(struct uln_link *l, int timeout_ms)
{
    return 0;
}

static int l_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    return -ENOTSUP;
}

static void l_info(const struct uln_link *l, struct uln_link_info *info)
{
    memset(info, 0, sizeof *info);
    info->family = AF_INET;
    info->payload_max = DGRAM;
}

static void l_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    memset(st, 0, sizeof *st);
}

static void l_close(struct uln_link *l) {}

static const struct uln_link_ops l_ops = {
    .send = l_send,
    .flush = l_flush,
    .recv = l_recv,
    .rx_release = l_release,
    .rx_addr = l_addr,
    .add_peer = l_add,
    .set_peer = l_set,
    .find_peer = l_find,
    .fds = l_fds,
    .wait = l_wait,
    .local = l_local,
    .info = l_info,
    .stats = l_stats,
    .close = l_close,
};

/* ---- the service's counters ------------------------------------------------- */

struct counts {
    uint64_t sent, accepted, refused, got;
};

static struct counts counts(const struct ulnetd *d)
{
    const struct wire_seal *w = d->wire_seal;
    return (struct counts){w->cookies_sent, w->cookies_accepted, w->cookies_refused,
                           w->cookies_got};
}

/* ---- the input -------------------------------------------------------------- */

static uint8_t keys[KEYS][ULN_SEAL_PUB_COMPACT + 8];

static void setup(void)
{
    enum uln_seal_cipher cipher;
    must(uln_seal_cipher_local(&cipher) == 0, "cipher");
    for (unsigned k = 0; k < KEYS; k++) {
        struct uln_seal_store st;
        struct uln_seal_pub pub;
        must(uln_seal_store_open(&st, ULN_SEAL_ENCRYPT, cipher, NULL, 1, 1) == 0, "store");
        uln_seal_store_publish(&st, &pub);
        must(uln_seal_pub_compact(&pub, keys[k]) == 0, "compact");
        memcpy(keys[k] + ULN_SEAL_PUB_COMPACT, pub.check, 8);
        uln_seal_store_close(&st);
    }
}

static void queue(const uint8_t *b, uint32_t len, unsigned src)
{
    if (L.nq == QUEUE) return;
    struct dgram *d = &L.q[L.nq++];
    d->b = malloc(len ? len : 1);
    must(d->b != NULL, "malloc");
    memcpy(d->b, b, len);
    d->len = len;
    d->src = source(src % SOURCES);
}

static void drain(struct uln_link *gate)
{
    struct uln_link_rx rx[16];
    int n;
    while ((n = uln_link_recv(gate, rx, 16)) > 0)
        for (int i = 0; i < n; i++)
            uln_link_rx_release(gate, rx[i].handle);
}

struct in {
    const uint8_t *p;
    size_t left;
};

static bool take(struct in *in, void *out, size_t n)
{
    if (in->left < n) return false;
    memcpy(out, in->p, n);
    in->p += n;
    in->left -= n;
    return true;
}

/* One HELLO record; what the service must then have counted. */
static bool hello(struct in *in, struct uln_link *gate, struct ulnetd *d, uint8_t op, unsigned src)
{
    uint8_t flags, key, bit = 0, h[H_LEN] = {0};
    uint32_t magic = MAGIC;
    if (!take(in, &flags, 1) || !take(in, &key, 1) || !take(in, h + H_NONCE, 8)) return false;
    memcpy(h, &magic, 4);
    h[4] = 2;
    h[5] = flags & 0x3u;
    memcpy(h + 6, keys[key % KEYS], ULN_SEAL_PUB_COMPACT + 8);
    unsigned how = op >> 2 & 3u;
    bool valid = false;
    if (how == 1 || how == 2) {
        if (!sent[src].cookie) how = 0;
        memcpy(h + H_NONCE + 8, sent[src].cookie_bytes, 16);
        valid = how == 1 && !memcmp(h + H_NONCE, sent[src].cookie_nonce, 8);
        if (how == 2) {
            if (!take(in, &bit, 1)) return false;
            h[H_NONCE + 8 + bit / 8 % 16] ^= (uint8_t)(1u << bit % 8);
        }
    } else if (how == 3 && !take(in, h + H_NONCE + 8, 16)) {
        return false;
    }
    if (how == 0) memset(h + H_NONCE + 8, 0, 16);
    uint64_t later = now_ns() + 10000000000ull; /* no token for 10 s */
    if (op & 0x10) d->wire_seal->keying_tat = later;
    if (op & 0x20) d->wire_seal->cookie_tat = later;
    struct counts before = counts(d);
    answering.on = true;
    answering.src = (int)src;
    memcpy(answering.nonce, h + H_NONCE, 8);
    queue(h, sizeof h, src);
    drain(gate);
    answering.on = false;
    struct counts after = counts(d);
    must(after.accepted == before.accepted || (valid && (h[5] & 0x2)),
         "a cookie accepted that the service never gave this source for this nonce");
    must(after.accepted - before.accepted <= 1, "one cookie accepted twice");
    must(after.refused == before.refused || (h[5] & 0x2 && !valid),
         "a cookie refused that the service gave this source for this nonce");
    return true;
}

static bool cookie(struct in *in, struct uln_link *gate, struct ulnetd *d, uint8_t op, unsigned src)
{
    uint8_t c[C_LEN];
    uint32_t magic = MAGIC;
    memcpy(c, &magic, 4);
    c[4] = 2;
    c[5] = 0x4;
    bool ours = op & 0x4 && sent[src].hello;
    if (ours)
        memcpy(c + 6, sent[src].hello_nonce, 8);
    else if (!take(in, c + 6, 8))
        return false;
    if (!take(in, c + 14, 16)) return false;
    struct counts before = counts(d);
    queue(c, sizeof c, src);
    drain(gate);
    struct counts after = counts(d);
    must(after.got == before.got || (sent[src].hello && !memcmp(c + 6, sent[src].hello_nonce, 8)),
         "a COOKIE taken for a nonce the service never asked with");
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    memset(&L, 0, sizeof L);
    memset(sent, 0, sizeof sent);
    L.l = (struct uln_link){.ops = &l_ops, .payload_max = DGRAM};
    static struct ulnetd d;
    memset(&d, 0, sizeof d);
    d.secure = ULN_SEAL_ENCRYPT;
    struct uln_link *io = &L.l;
    must(wire_seal_wrap(&d, &io) == 0, "wrap");
    struct in in = {data, size};
    uint8_t op, src;
    while (take(&in, &op, 1) && take(&in, &src, 1)) {
        src %= SOURCES;
        if (L.nq == QUEUE) break;
        bool ok = true;
        if (op % 4 == 0) {
            uint8_t len, b[255];
            ok = take(&in, &len, 1) && take(&in, b, len);
            if (ok) queue(b, len, src);
            drain(io);
        } else if (op % 4 == 1) {
            ok = hello(&in, io, &d, op, src);
        } else if (op % 4 == 2) {
            ok = cookie(&in, io, &d, op, src);
        } else {
            struct sockaddr_in a = source(src);
            int id = uln_link_add_peer(io, &a, sizeof a);
            if (id == -EEXIST) id = uln_link_find_peer(io, &a, sizeof a);
            uint8_t b[64] = {0};
            struct uln_link_pkt p = {.peer = id, .niov = 1, .iov = {{b, sizeof b}}};
            if (id >= 0) (void)uln_link_send(io, &p, 1);
            drain(io);
        }
        if (!ok) break;
    }
    if (getenv("FUZZ_HELLO_VERBOSE")) { /* what a seed reached */
        const struct wire_seal *w = d.wire_seal;
        fprintf(stderr,
                "fuzz_hello: cookies sent %llu accepted %llu refused %llu stale %llu got %llu "
                "ignored %llu; keyings %llu limited %llu\n",
                (ULL)w->cookies_sent, (ULL)w->cookies_accepted, (ULL)w->cookies_refused,
                (ULL)w->cookies_stale, (ULL)w->cookies_got, (ULL)w->cookies_ignored,
                (ULL)w->keyings, (ULL)w->hellos_limited);
    }
    uln_link_close(io);
    for (unsigned i = 0; i < L.nq; i++)
        free(L.q[i].b);
    return 0;
}
