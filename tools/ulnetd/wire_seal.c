/*
 * wire_seal.c - the sealed wire (ulnetd --secure auth|encrypt, issue 33):
 * the services seal their processes' traffic between hosts on their behalf,
 * as a NIC with PSP would. src/seal's sealing link goes around the wire's
 * link, with a layer on each side of it:
 *
 *   wire.c -> gate -> sealing link (seals, opens, refuses, counts) -> keyer -> link
 *
 * Keys. Each service draws an X25519 key pair at start (uln_seal_store_open);
 * two services agree one key per direction by X25519 + HKDF (seal.h), bound
 * to --secret-file's secret when given (a file only the service's user may
 * read). The public keys travel in the wire's first packets: a HELLO, in
 * clear, says a service's mode, cipher, public key and which secret it holds.
 * The keyer takes HELLOs out of what the link receives (they never reach
 * the sealing link, where they would be refusals), links their sender's
 * pair (uln_link_seal_peer) and answers the ones that ask. The gate holds
 * back a packet to a service whose key is not known yet - to rel that is a
 * loss, resent once the answer came - and sends a HELLO that asks instead.
 *
 * A HELLO is not authenticated: without a secret an attacker in the middle
 * of the first packets can put its own key there (docs/security.md says
 * so); with one, a key it put there opens nothing, and its packets are
 * refused and counted. Once a service is keyed, a HELLO with another key
 * (a restarted service: a new life draws a new key) is taken only after its
 * pair has opened nothing for REKEY_QUIET_NS, so a forged HELLO cannot
 * break a live pair.
 *
 * A HELLO that would key a source costs a link place (one of WSEAL_PEERS)
 * and a key agreement before anything proves the source, and without a
 * secret its check is computable by anyone. So such keyings are bounded by
 * a token bucket (HELLO_KEYINGS_PER_S, HELLO_KEYINGS_BURST); over it the
 * HELLO is refused and counted (hellos rate-limited). Not limited: a HELLO
 * of a service keyed under the same key (only answered), and the answer of
 * a service we asked within HELLO_ASKED_NS (our own routes ask, so those are
 * bounded by what our processes reach). A real service whose HELLO was
 * limited asks again with the next packet rel resends (HELLO_EVERY_NS at
 * most), so it is keyed once it wins a token.
 *
 * Places. A link cannot remove a peer, and the wire's link has few places
 * (udp: 256); a HELLO's source took one for good, so a forger filled them in
 * seconds and then no new service, nor a route of wire.c, got one. A place
 * a HELLO took whose id wire.c never learnt (nothing opened from it, wire.c
 * never added, found or sent to it) is given again (uln_link_set_peer) once
 * PLACE_QUIET_NS old, when the link is full: so unproven sources hold at
 * most HELLO_KEYINGS_BURST + HELLO_KEYINGS_PER_S * PLACE_QUIET_NS places.
 * Places wire.c learnt stay taken (wire.c frees its remotes, not their ids).
 *
 * Cookies. Over the bucket, a real service's HELLO would wait its turn
 * among a flood's (each ask wins about HELLO_KEYINGS_PER_S / the flood's
 * rate of a token). So a HELLO the bucket cannot take is answered with a
 * COOKIE (seal/cookie.h: a MAC of its source's address and port and its
 * nonce under a secret that rotates), keeping no state and no place: the
 * answer goes out through cookie_peer, pointed at the source for that one
 * datagram. A service that asked takes a COOKIE only for its own nonce from
 * the service it asked, and asks again at once with it; a HELLO with a valid
 * cookie comes from where it says, and is keyed from its own, larger bucket
 * (HELLO_COOKIE_KEYINGS_*), not the flood's. A cookie that does not check
 * (forged, stale, another source's) is refused and counted, and the HELLO
 * goes on as one without (a fresh cookie if the bucket is still empty). A
 * COOKIE is smaller than the HELLO it answers: no amplification. Not
 * bounded: a flood from addresses that can receive (they get cookies too)
 * shares the cookie bucket with the real services.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <netinet/in.h>

#include "ulnetd.h"
#include "link/link.h"
#include "seal/cookie.h"
#include "seal/link_seal.h"

#define HELLO_MAGIC    0x6b6e6c75u /* "ulnk", little-endian */
#define HELLO_VERSION  2u          /* 2: a nonce and a cookie; and COOKIE */
#define HELLO_ASK      0x1u        /* answer with your HELLO */
#define HELLO_COOKIE   0x2u        /* it carries a cookie */
#define HELLO_COOKIE_R 0x4u        /* a COOKIE: the answer to a HELLO over the bucket */
/* HELLO: magic, version, flags, compact key, check, nonce, cookie (zeros
 * without HELLO_COOKIE). COOKIE: magic, version, flags, the nonce of the
 * HELLO it answers, the cookie. */
#define HELLO_AT_CHECK  (6u + ULN_SEAL_PUB_COMPACT)
#define HELLO_AT_NONCE  (HELLO_AT_CHECK + 8u)
#define HELLO_AT_COOKIE (HELLO_AT_NONCE + ULN_COOKIE_NONCE_BYTES)
#define HELLO_LEN       (HELLO_AT_COOKIE + ULN_COOKIE_BYTES)
#define COOKIE_LEN      (6u + ULN_COOKIE_NONCE_BYTES + ULN_COOKIE_BYTES)
#define HELLO_EVERY_NS  5000000ull    /* a HELLO that asks, at most this often a service */
#define REKEY_QUIET_NS  1000000000ull /* a keyed pair's silence before another key is taken */
#define WSEAL_PEERS     4096u         /* remote services (link ids) */
/* Keyings of sources not proven yet: 64 a second after a burst of 64 - far
 * above what a cluster's services need (one each per life, and a restart
 * costs a second of quiet anyway), far below what one core could key (tens
 * of microseconds each), and 4096 places last a forger over a minute. */
#define HELLO_KEYINGS_PER_S 64u
#define HELLO_KEYINGS_BURST 64u
#define HELLO_ASKED_NS      1000000000ull /* an answer to our ask within this is not limited */
/* Keyings of sources a cookie proved: four times the unproven rate, since
 * only what can receive at its address gets here; still a bounded share of
 * a core (a key agreement each) and of the link's places. */
#define HELLO_COOKIE_KEYINGS_PER_S 256u
#define HELLO_COOKIE_KEYINGS_BURST 64u
/* A real service opens a datagram within a round trip or two of its keying
 * (rel resends what the gate held): 2 s unused is a source that never
 * sealed anything; 64 + 128 = 192 such places at most, of udp's 256. */
#define PLACE_QUIET_NS 2000000000ull
/* A service whose key we wait for is asked every HELLO_EVERY_NS for this
 * long after the last packet held for it, not only when rel sends: rel backs
 * off, and under a flood of HELLOs our ask must win one of the few tokens
 * of the far side's bucket (each ask has about 64 / the flood's rate of a
 * chance a second), so it asks often while it waits. */
#define HELLO_ASKING_NS 3000000000ull

struct wpeer {
    bool keyed;
    uint8_t pub[ULN_SEAL_PUB_BYTES]; /* its key, as linked */
    uint64_t asked_ns;               /* our last HELLO that asked */
    uint64_t held_ns;                /* the last packet the gate held for its key */
    uint64_t heard_ns;               /* its last datagram that opened, or its keying */
    bool ours;                       /* its place taken by a HELLO of an unknown source */
    bool used;                       /* wire.c learnt its id: its place stays taken */
    uint64_t wants_ns;               /* the first packet held for its key, till keyed */
    bool has_nonce, has_cookie;      /* our asks' nonce drawn; its COOKIE for it came */
    uint8_t nonce[ULN_COOKIE_NONCE_BYTES];
    uint8_t cookie[ULN_COOKIE_BYTES];
};

struct wire_seal {
    struct uln_link gate;  /* first: what wire.c holds */
    struct uln_link keyer; /* what the sealing link wraps */
    struct uln_link *sealer, *raw;
    struct uln_seal_store store;
    _Atomic uint64_t refused;                             /* datagrams the sealing link refused */
    struct wpeer *peers;                                  /* by link id, WSEAL_PEERS */
    uint64_t hellos_in, hellos_out, hellos_refused, held; /* for --status */
    uint64_t hellos_limited, keyings, places_freed;       /* for --status */
    uint64_t cookies_sent, cookies_accepted, cookies_refused, cookies_stale; /* as responder */
    uint64_t cookies_got, cookies_ignored;                                   /* as asker */
    uint64_t wait_max_ns, wait_last_ns; /* a held packet's wait for its service's key */
    uint64_t keying_tat;                /* the bucket's next token time (GCRA), ns */
    uint64_t cookie_tat;                /* the cookie bucket's */
    struct uln_cookie cookie;
    int cookie_peer;  /* a link id pointed at a source for one COOKIE, else at none */
    uint64_t asks_ns; /* the last round of asks for held packets */
    unsigned waiting; /* places with packets held for a key, lately */
    int top;          /* the highest place id seen + 1 */
    bool said_refused;
    uint8_t me[HELLO_LEN]; /* our HELLO, flags 0 */
    uint8_t hello[HELLO_LEN];
    struct uln_link_pkt out[ULN_LINK_BATCH];
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static struct wire_seal *of_gate(const struct uln_link *l)
{
    return (struct wire_seal *)l;
}

static struct wire_seal *of_keyer(const struct uln_link *l)
{
    return (struct wire_seal *)((const uint8_t *)l - offsetof(struct wire_seal, keyer));
}

static struct wpeer *peer_of(struct wire_seal *w, int id)
{
    return id >= 0 && (unsigned)id < WSEAL_PEERS ? &w->peers[id] : NULL;
}

/* ---- HELLO ------------------------------------------------------------------ */

/* A HELLO or a COOKIE (the keyer's, never the sealing link's). */
static bool is_keying(const uint8_t *b, uint32_t len)
{
    uint32_t m;
    if (len != HELLO_LEN && len != COOKIE_LEN) return false;
    memcpy(&m, b, 4);
    return m == HELLO_MAGIC;
}

/* Our HELLO to link id (asking for theirs, or not), in clear, below the
 * sealing link; with the nonce of our asks to it, and its cookie for that
 * nonce if one came. */
static void hello_send(struct wire_seal *w, int id, bool ask)
{
    struct wpeer *p = peer_of(w, id);
    memcpy(w->hello, w->me, HELLO_LEN);
    w->hello[5] = ask ? HELLO_ASK : 0;
    if (p) {
        while (!p->has_nonce && getrandom(p->nonce, sizeof p->nonce, 0) == sizeof p->nonce)
            p->has_nonce = true;
        memcpy(w->hello + HELLO_AT_NONCE, p->nonce, sizeof p->nonce);
        if (ask && p->has_cookie) {
            w->hello[5] |= HELLO_COOKIE;
            memcpy(w->hello + HELLO_AT_COOKIE, p->cookie, sizeof p->cookie);
        }
    }
    struct uln_link_pkt pkt = {.peer = id, .niov = 1, .iov = {{w->hello, HELLO_LEN}}};
    if (uln_link_send(w->raw, &pkt, 1) == 1) w->hellos_out++;
    (void)uln_link_flush(w->raw);
}

static void hello_refused(struct wire_seal *w, const char *why)
{
    w->hellos_refused++;
    if (w->said_refused) return;
    w->said_refused = true; /* once: a forger must not fill the log */
    fprintf(stderr,
            "ulnetd: --secure: a service's HELLO refused (%s): every service of the cluster "
            "needs the same --secure and --secret-file; counted in --status\n",
            why);
}

/* A token for a keying of a source not proven yet, or false: the bucket as
 * a next-token time (GCRA), so no timer and no float. */
static bool token(uint64_t *tat, uint64_t now, unsigned per_s, unsigned burst)
{
    const uint64_t every = 1000000000ull / per_s;
    if (*tat > now + (uint64_t)(burst - 1u) * every) return false;
    *tat = (*tat > now ? *tat : now) + every;
    return true;
}

static bool keying_token(struct wire_seal *w, uint64_t now)
{
    return token(&w->keying_tat, now, HELLO_KEYINGS_PER_S, HELLO_KEYINGS_BURST);
}

/* A COOKIE for the HELLO b from the source at a, through its own id if the
 * link has one, else through cookie_peer for this datagram alone (pointed
 * back at none after: no place kept, and no datagram of that source finds
 * that id later). */
static void cookie_send(struct wire_seal *w, int id, const void *a, socklen_t len, const uint8_t *b,
                        uint64_t now)
{
    uint8_t m[COOKIE_LEN];
    memcpy(m, b, 4);
    m[4] = HELLO_VERSION;
    m[5] = HELLO_COOKIE_R;
    memcpy(m + 6, b + HELLO_AT_NONCE, ULN_COOKIE_NONCE_BYTES);
    if (uln_cookie_make(&w->cookie, now, a, len, b + HELLO_AT_NONCE,
                        m + 6 + ULN_COOKIE_NONCE_BYTES) != 0)
        return;
    bool lent = id < 0;
    if (lent && (w->cookie_peer < 0 || uln_link_set_peer(w->raw, w->cookie_peer, a, len) != 0))
        return;
    struct uln_link_pkt p = {.peer = lent ? w->cookie_peer : id, .niov = 1, .iov = {{m, sizeof m}}};
    if (uln_link_send(w->raw, &p, 1) == 1) w->cookies_sent++;
    (void)uln_link_flush(w->raw); /* m is on the stack, and the id moves on */
    if (lent) {
        struct sockaddr_in none = {.sin_family = AF_INET, .sin_port = htons(10)};
        (void)uln_link_set_peer(w->raw, w->cookie_peer, &none, sizeof none);
    }
}

/* May the HELLO b from rx's source (id, or -1) key it? With a valid cookie,
 * from the cookie bucket; else from the bucket; over both, no: counted, and
 * a source that brought no valid cookie gets one. */
static bool keying_admit(struct wire_seal *w, const struct uln_link_rx *rx, int id,
                         const uint8_t *b, uint64_t now)
{
    socklen_t len = 0;
    const void *a = uln_link_rx_addr(w->raw, rx->handle, &len);
    bool proven = false;
    if (b[5] & HELLO_COOKIE) {
        int rc = a ? uln_cookie_check(&w->cookie, now, a, len, b + HELLO_AT_NONCE,
                                      b + HELLO_AT_COOKIE, ULN_COOKIE_BYTES)
                   : -EAFNOSUPPORT;
        proven = rc == 0;
        w->cookies_accepted += proven;
        w->cookies_refused += !proven;
        w->cookies_stale += rc == -ESTALE;
    }
    if (proven &&
        token(&w->cookie_tat, now, HELLO_COOKIE_KEYINGS_PER_S, HELLO_COOKIE_KEYINGS_BURST))
        return true;
    if (keying_token(w, now)) return true;
    w->hellos_limited++; /* its source, if real, asks again (HELLO_EVERY_NS) */
    if (!proven && a) cookie_send(w, id, a, len, b, now);
    return false;
}

/* A place to give again when the link is full: the oldest a HELLO took whose
 * id wire.c never learnt, PLACE_QUIET_NS old; its state forgotten (the
 * sealing link's pair for it is replaced at its next keying and used by
 * nothing before: the gate sends to keyed places only). Or -ENOSPC. */
static int place_reuse(struct wire_seal *w, uint64_t now)
{
    int best = -ENOSPC;
    for (unsigned i = 0; i < WSEAL_PEERS; i++) {
        const struct wpeer *p = &w->peers[i];
        if (p->ours && !p->used && now - p->heard_ns >= PLACE_QUIET_NS &&
            (best < 0 || p->heard_ns < w->peers[best].heard_ns))
            best = (int)i;
    }
    if (best >= 0) {
        w->peers[best] = (struct wpeer){0};
        w->places_freed++;
    }
    return best;
}

/* A place for a source not met yet at addr: a new one, or one given again. */
static int place_take(struct wire_seal *w, struct uln_link *via, const void *addr, socklen_t len,
                      uint64_t now)
{
    int id = uln_link_add_peer(via, addr, len);
    if (id != -ENOSPC) return id;
    id = place_reuse(w, now);
    if (id >= 0 && uln_link_set_peer(via, id, addr, len) != 0) return -ENOSPC;
    return id;
}

/* A HELLO from rx's source: link its key, answer if asked. */
static void hello_in(struct wire_seal *w, const struct uln_link_rx *rx)
{
    const uint8_t *b = rx->buf;
    struct uln_seal_pub pub;
    char why[160];
    if (b[4] != HELLO_VERSION || uln_seal_pub_expand(b + 6, &pub) != 0)
        return hello_refused(w, "malformed");
    memcpy(pub.check, b + HELLO_AT_CHECK, sizeof pub.check);
    pub.flags = 0; /* the check came along: which secret it holds is checked */
    if (pub.mode != w->store.mode) {
        snprintf(why, sizeof why, "it seals with --secure %s, this one with %s",
                 pub.mode > ULN_SEAL_ENCRYPT ? "?"
                                             : uln_seal_mode_name((enum uln_seal_mode)pub.mode),
                 uln_seal_mode_name(w->store.mode));
        return hello_refused(w, why);
    }
    if (uln_seal_store_check(&w->store, &pub, why, sizeof why) != 0) return hello_refused(w, why);
    int id = rx->peer == w->cookie_peer ? -1 : rx->peer;
    uint64_t now = now_ns();
    struct wpeer *p = peer_of(w, id);
    bool same = p && p->keyed && !memcmp(p->pub, pub.pub, sizeof p->pub);
    bool asked = p && !p->keyed && p->asked_ns && now - p->asked_ns < HELLO_ASKED_NS;
    if (!same && !asked && !(p && p->keyed) && !keying_admit(w, rx, id, b, now)) return;
    if (id < 0) { /* a service not met yet: its link id, so we can answer */
        socklen_t len = 0;
        const void *a = uln_link_rx_addr(w->raw, rx->handle, &len);
        id = a ? place_take(w, w->raw, a, len, now) : -EINVAL;
        if (id == -EEXIST) id = uln_link_find_peer(w->raw, a, len);
        if ((p = peer_of(w, id)) && !p->keyed) p->ours = true;
    }
    p = peer_of(w, id);
    if (!p) return hello_refused(w, "no room for another service");
    same = p->keyed && !memcmp(p->pub, pub.pub, sizeof p->pub);
    if (p->keyed && !same) {
        if (now - p->heard_ns < REKEY_QUIET_NS)
            return hello_refused(w, "another key for a live service");
        if (!keying_admit(w, rx, id, b, now)) return; /* a restarted service: limited as well */
    }
    if (!same) {
        w->keyings++;
        if (p->wants_ns) { /* what a user waited for: the keying time under a flood */
            w->wait_last_ns = now - p->wants_ns;
            if (w->wait_last_ns > w->wait_max_ns) w->wait_max_ns = w->wait_last_ns;
            p->wants_ns = 0;
        }
        if (p->held_ns) w->waiting--;
        p->held_ns = 0;
        if (uln_link_seal_peer(w->sealer, id, id, 0, &pub) != 0)
            return hello_refused(w, "no pair could be made");
        p->keyed = true;
        memcpy(p->pub, pub.pub, sizeof p->pub);
        p->heard_ns = now;
    }
    w->hellos_in++;
    if (b[5] & HELLO_ASK) hello_send(w, id, false);
}

/* A COOKIE from rx's source: taken if we asked it lately and it answers our
 * nonce (no one off the path knows it), and our HELLO goes again at once
 * with it - unless it is the cookie we had (that one did not check there:
 * the next ask brings it, no round trip spent on a loop). */
static void cookie_in(struct wire_seal *w, const struct uln_link_rx *rx)
{
    const uint8_t *b = rx->buf;
    struct wpeer *p = rx->peer == w->cookie_peer ? NULL : peer_of(w, rx->peer);
    uint64_t now = now_ns();
    if (b[4] != HELLO_VERSION || b[5] != HELLO_COOKIE_R || !p || p->keyed || !p->has_nonce ||
        !p->asked_ns || now - p->asked_ns >= HELLO_ASKED_NS ||
        memcmp(b + 6, p->nonce, sizeof p->nonce)) {
        w->cookies_ignored++;
        return;
    }
    const uint8_t *c = b + 6 + ULN_COOKIE_NONCE_BYTES;
    w->cookies_got++;
    if (p->has_cookie && !memcmp(p->cookie, c, sizeof p->cookie)) return;
    memcpy(p->cookie, c, sizeof p->cookie);
    p->has_cookie = true;
    p->asked_ns = now;
    hello_send(w, rx->peer, true);
}

/* ---- the keyer: below the sealing link -------------------------------------- */

static int keyer_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    return uln_link_send(of_keyer(l)->raw, pkts, n);
}
static int keyer_flush(struct uln_link *l)
{
    return uln_link_flush(of_keyer(l)->raw);
}

/* What the link received, HELLOs taken out (and released). */
static int keyer_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct wire_seal *w = of_keyer(l);
    for (;;) {
        int n = uln_link_recv(w->raw, out, max), kept = 0;
        if (n <= 0) return n;
        for (int i = 0; i < n; i++) {
            if (!is_keying(out[i].buf, out[i].len)) {
                out[kept++] = out[i];
                continue;
            }
            if (out[i].len == HELLO_LEN)
                hello_in(w, &out[i]);
            else
                cookie_in(w, &out[i]);
            uln_link_rx_release(w->raw, out[i].handle);
        }
        if (kept) return kept;
    }
}

static int keyer_rx_release(struct uln_link *l, uint32_t h)
{
    return uln_link_rx_release(of_keyer(l)->raw, h);
}
static const void *keyer_rx_addr(const struct uln_link *l, uint32_t h, socklen_t *len)
{
    return uln_link_rx_addr(of_keyer(l)->raw, h, len);
}
static int keyer_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    return uln_link_add_peer(of_keyer(l)->raw, addr, len);
}
static int keyer_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    return uln_link_set_peer(of_keyer(l)->raw, peer, addr, len);
}
static int keyer_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    return uln_link_find_peer(of_keyer(l)->raw, addr, len);
}
static int keyer_fds(const struct uln_link *l, int *fds, int max)
{
    return uln_link_fds(of_keyer(l)->raw, fds, max);
}
static int keyer_wait(struct uln_link *l, int timeout_ms)
{
    return uln_link_wait(of_keyer(l)->raw, timeout_ms);
}
static int keyer_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    return uln_link_local(of_keyer(l)->raw, ss, len);
}
static void keyer_info(const struct uln_link *l, struct uln_link_info *info)
{
    uln_link_info(of_keyer(l)->raw, info);
}
static void keyer_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    uln_link_stats(of_keyer(l)->raw, st);
}
static void keyer_close(struct uln_link *l)
{
    uln_link_close(of_keyer(l)->raw); /* the gate frees the rest */
}

static const struct uln_link_ops keyer_ops = {
    .send = keyer_send,
    .flush = keyer_flush,
    .recv = keyer_recv,
    .rx_release = keyer_rx_release,
    .rx_addr = keyer_rx_addr,
    .add_peer = keyer_add_peer,
    .set_peer = keyer_set_peer,
    .find_peer = keyer_find_peer,
    .fds = keyer_fds,
    .wait = keyer_wait,
    .local = keyer_local,
    .info = keyer_info,
    .stats = keyer_stats,
    .close = keyer_close,
};

/* ---- the gate: above the sealing link --------------------------------------- */

/* Packets to keyed services go on; one to a service not keyed yet is taken
 * and dropped (rel resends it) and a HELLO asks for its key. What the
 * sealing link does not take is given back from the first such packet. */
static int gate_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct wire_seal *w = of_gate(l);
    if (n > ULN_LINK_BATCH) n = ULN_LINK_BATCH;
    unsigned m = 0, at[ULN_LINK_BATCH];
    uint64_t now = 0;
    for (unsigned i = 0; i < n; i++) {
        struct wpeer *p = peer_of(w, pkts[i].peer);
        if (!p) return -EINVAL;
        p->used = true;
        if (p->keyed) {
            w->out[m] = pkts[i];
            at[m++] = i;
            continue;
        }
        w->held++;
        if (!now) now = now_ns();
        if (!p->held_ns) w->waiting++;
        p->held_ns = now;
        if (!p->wants_ns) p->wants_ns = now;
        if (pkts[i].peer >= w->top) w->top = pkts[i].peer + 1;
        if (now - p->asked_ns >= HELLO_EVERY_NS) {
            p->asked_ns = now;
            hello_send(w, pkts[i].peer, true);
        }
    }
    if (!m) return (int)n;
    int rc = uln_link_send(w->sealer, w->out, m);
    if (rc < 0 || (unsigned)rc == m) return rc < 0 ? rc : (int)n;
    return (int)at[rc];
}

static int gate_flush(struct uln_link *l)
{
    return uln_link_flush(of_gate(l)->sealer);
}

/* Asks again, every HELLO_EVERY_NS, the services we hold packets for (for
 * HELLO_ASKING_NS after the last one held). */
static void asks_again(struct wire_seal *w)
{
    uint64_t now = now_ns();
    if (now - w->asks_ns < HELLO_EVERY_NS) return;
    w->asks_ns = now;
    for (int id = 0; id < w->top && w->waiting; id++) {
        struct wpeer *p = &w->peers[id];
        if (!p->held_ns || p->keyed) continue;
        if (now - p->held_ns >= HELLO_ASKING_NS) {
            p->held_ns = 0; /* given up: rel's own resends ask again */
            w->waiting--;
        } else if (now - p->asked_ns >= HELLO_EVERY_NS) {
            p->asked_ns = now;
            hello_send(w, id, true);
        }
    }
}

/* What opened: its service is alive under its key (REKEY_QUIET_NS). */
static int gate_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct wire_seal *w = of_gate(l);
    if (w->waiting) asks_again(w);
    int n = uln_link_recv(w->sealer, out, max);
    if (n > 0) {
        uint64_t now = now_ns();
        for (int i = 0; i < n; i++) {
            struct wpeer *p = peer_of(w, out[i].peer);
            if (p) {
                p->heard_ns = now;
                p->used = true; /* wire.c learns its id now */
            }
        }
    }
    return n;
}

static int gate_rx_release(struct uln_link *l, uint32_t h)
{
    return uln_link_rx_release(of_gate(l)->sealer, h);
}
static const void *gate_rx_addr(const struct uln_link *l, uint32_t h, socklen_t *len)
{
    return uln_link_rx_addr(of_gate(l)->sealer, h, len);
}
/* wire.c's ids: their places stay taken (place_reuse). */
static int gate_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct wire_seal *w = of_gate(l);
    int id = place_take(w, w->sealer, addr, len, now_ns());
    struct wpeer *p = peer_of(w, id);
    if (id >= 0 && !p) return -ENOSPC;
    if (p) p->used = true;
    return id;
}
/* wire.c points a spare id at another service: what we knew of the one
 * before (its key) is not this one's, which is asked for its own. */
static int gate_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    struct wire_seal *w = of_gate(l);
    bool moved = uln_link_find_peer(w->sealer, addr, len) != peer;
    int rc = uln_link_set_peer(w->sealer, peer, addr, len);
    struct wpeer *p = peer_of(w, peer);
    if (rc == 0 && moved && p) {
        if (p->held_ns) w->waiting--;
        *p = (struct wpeer){.used = true};
    }
    return rc;
}
static int gate_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    struct wire_seal *w = of_gate(l);
    int id = uln_link_find_peer(w->sealer, addr, len);
    struct wpeer *p = peer_of(w, id);
    if (p) p->used = true; /* wire.c holds this id now: its place is kept */
    return id;
}
static int gate_fds(const struct uln_link *l, int *fds, int max)
{
    return uln_link_fds(of_gate(l)->sealer, fds, max);
}
static int gate_wait(struct uln_link *l, int timeout_ms)
{
    return uln_link_wait(of_gate(l)->sealer, timeout_ms);
}
static int gate_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    return uln_link_local(of_gate(l)->sealer, ss, len);
}
static void gate_info(const struct uln_link *l, struct uln_link_info *info)
{
    uln_link_info(of_gate(l)->sealer, info);
}
static void gate_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    uln_link_stats(of_gate(l)->sealer, st);
}
static void gate_close(struct uln_link *l)
{
    struct wire_seal *w = of_gate(l);
    uln_link_close(w->sealer); /* and the keyer, and the link */
    uln_seal_store_close(&w->store);
    uln_cookie_close(&w->cookie);
    free(w->peers);
    free(w);
}

static const struct uln_link_ops gate_ops = {
    .send = gate_send,
    .flush = gate_flush,
    .recv = gate_recv,
    .rx_release = gate_rx_release,
    .rx_addr = gate_rx_addr,
    .add_peer = gate_add_peer,
    .set_peer = gate_set_peer,
    .find_peer = gate_find_peer,
    .fds = gate_fds,
    .wait = gate_wait,
    .local = gate_local,
    .info = gate_info,
    .stats = gate_stats,
    .close = gate_close,
};

int wire_seal_wrap(struct ulnetd *d, struct uln_link **io)
{
    enum uln_seal_cipher cipher;
    if (uln_seal_cipher_local(&cipher) != 0) {
        fprintf(stderr, "ulnetd: ULN_SECURE_CIPHER: not a cipher it knows\n");
        return -EINVAL;
    }
    struct wire_seal *w = calloc(1, sizeof *w);
    if (!w || !(w->peers = calloc(WSEAL_PEERS, sizeof *w->peers))) {
        free(w);
        return -ENOMEM;
    }
    int rc = uln_cookie_open(&w->cookie, now_ns());
    if (rc) {
        free(w->peers);
        free(w);
        return rc;
    }
    rc = uln_seal_store_open(&w->store, (enum uln_seal_mode)d->secure, cipher, d->secret_file, 1,
                             WSEAL_PEERS);
    if (rc) {
        uln_cookie_close(&w->cookie);
        fprintf(stderr, "ulnetd: --secure: %s%s%s\n", strerror(-rc),
                d->secret_file ? ": --secret-file " : "", d->secret_file ? d->secret_file : "");
        free(w->peers);
        free(w);
        return rc;
    }
    struct uln_seal_pub me;
    uln_seal_store_publish(&w->store, &me);
    uint32_t magic = HELLO_MAGIC;
    memcpy(w->me, &magic, 4);
    w->me[4] = HELLO_VERSION;
    if (uln_seal_pub_compact(&me, w->me + 6) != 0) {
        uln_seal_store_close(&w->store);
        uln_cookie_close(&w->cookie);
        free(w->peers);
        free(w);
        return -EINVAL;
    }
    memcpy(w->me + HELLO_AT_CHECK, me.check, sizeof me.check);
    unsigned max = uln_link_payload_max(*io);
    w->raw = *io;
    /* The id COOKIEs go out through; at rest pointed at an address no one
     * sends from (not wire.c's: each id its own). Never keyed, never given. */
    struct sockaddr_in none = {.sin_family = AF_INET, .sin_port = htons(10)};
    w->cookie_peer = uln_link_add_peer(w->raw, &none, sizeof none);
    if (peer_of(w, w->cookie_peer)) w->peers[w->cookie_peer].used = true;
    w->keyer = (struct uln_link){.ops = &keyer_ops, .payload_max = max};
    w->sealer = &w->keyer;
    rc = uln_link_seal_open(&w->store, 0, &w->refused, &w->sealer);
    if (rc) {
        uln_seal_store_close(&w->store);
        uln_cookie_close(&w->cookie);
        free(w->peers);
        free(w);
        return rc; /* *io is still the caller's */
    }
    w->gate = (struct uln_link){.ops = &gate_ops, .payload_max = uln_link_payload_max(w->sealer)};
    d->wire_seal = w;
    *io = &w->gate;
    return 0;
}

size_t wire_seal_status(const struct ulnetd *d, char *out, size_t room)
{
    const struct wire_seal *w = d->wire_seal;
    int n;
    if (!d->secure)
        n = snprintf(out, room, "secure: off (the wire between hosts in clear)\n");
    else if (!w)
        n = snprintf(out, room, "secure: %s (no wire)\n",
                     uln_seal_mode_name((enum uln_seal_mode)d->secure));
    else
        n = snprintf(
            out, room,
            "secure: %s, %s, secret %s; refused_auth %llu; hellos in %llu, out %llu, "
            "refused %llu, rate-limited %llu; keyings %llu; places freed %llu; packets "
            "held for a key %llu; cookies sent %llu, accepted %llu, refused %llu "
            "(stale %llu); cookies got %llu, ignored %llu; waits for a key: longest %llu "
            "us, last %llu us\n",
            uln_seal_mode_name((enum uln_seal_mode)d->secure),
            uln_seal_cipher_name(w->store.cipher), w->store.id.has_secret ? "given" : "none",
            (unsigned long long)atomic_load_explicit(&w->refused, memory_order_relaxed),
            (unsigned long long)w->hellos_in, (unsigned long long)w->hellos_out,
            (unsigned long long)w->hellos_refused, (unsigned long long)w->hellos_limited,
            (unsigned long long)w->keyings, (unsigned long long)w->places_freed,
            (unsigned long long)w->held, (unsigned long long)w->cookies_sent,
            (unsigned long long)w->cookies_accepted, (unsigned long long)w->cookies_refused,
            (unsigned long long)w->cookies_stale, (unsigned long long)w->cookies_got,
            (unsigned long long)w->cookies_ignored, (unsigned long long)(w->wait_max_ns / 1000u),
            (unsigned long long)(w->wait_last_ns / 1000u));
    return n < 0 ? 0 : (size_t)n < room ? (size_t)n : room;
}
