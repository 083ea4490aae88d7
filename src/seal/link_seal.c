/*
 * link_seal.c - the sealing link and the context's sealing state
 * (link_seal.h).
 *
 * Sending: each packet gets its trailer (counter and tag) as one more iovec,
 * so the link below still sees packets of equal length where the transport
 * made them (GSO runs stay runs) and bundles stay one datagram. Under auth
 * the packet's own pieces go out as they are, a user's buffer included; under
 * encrypt the cipher writes the ciphertext into this link's scratch in the
 * same pass that reads the plaintext, which is the only write the packet's
 * bytes get. Receiving: each datagram is opened where the link below lent
 * it, in place, and handed up a trailer (26 bytes) shorter.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "seal/link_seal.h"

struct kept_pair { /* a pair and whom it was made for */
    struct uln_seal_pair pair;
    struct uln_seal_pub peer;
    unsigned peer_ep;
};

#define PENDING_MAX 8 /* introductions awaiting their link (seal_link) */
_Static_assert(ULN_SEAL_INTRO == ULN_SEAL_PUB_COMPACT + 2, "an introduction: state, endpoint");

struct seal_peer {              /* a link id's */
    struct uln_seal_pair *pair; /* the store's */
    int rank;
    unsigned peer_ep;
    uint64_t looked_ns; /* when its published state was last looked at */
};

struct seal_link {
    struct uln_link l; /* first: what callers see */
    struct uln_link *below;
    struct uln_seal_store *s;
    unsigned ep;
    _Atomic uint64_t *refused;
    struct seal_peer *by_id; /* link id -> its pair and whom */
    unsigned nids;
    struct uln_link_pkt out[ULN_LINK_BATCH];
    uint8_t trailer[ULN_LINK_BATCH][ULN_SEAL_TRAILER];
    uint8_t *scratch; /* encrypt: ULN_LINK_BATCH datagrams of the payload_max below */
    unsigned stride;
    uint64_t refused_here;                                   /* for stats */
    int (*resolve)(void *arg, const struct uln_link_rx *rx); /* no job: see link_seal.h */
    void *resolve_arg;
    /* No job: introductions. intro is ours (compact state, endpoint index),
     * sent on every datagram to a peer that has not yet shown it has our key
     * (nothing opened from it yet); intro_buf its copies, one per packet. */
    bool introduce;
    uint8_t intro[ULN_SEAL_INTRO];
    uint8_t intro_buf[ULN_LINK_BATCH][ULN_SEAL_INTRO];
    /* Pairs made from introductions of sources not linked yet, kept until the
     * layer above links the source (uln_link_seal_peer adopts its pair, with
     * the counters it accepted) or PENDING_MAX newer ones displace it. */
    struct kept_pair *pending[PENDING_MAX];
    unsigned pending_next;
};

/* ---- the store ------------------------------------------------------------------ */

int uln_seal_store_open(struct uln_seal_store *s, enum uln_seal_mode mode,
                        enum uln_seal_cipher cipher, const char *secret_file, unsigned neps,
                        unsigned npeers)
{
    memset(s, 0, sizeof *s);
    s->mode = mode;
    s->cipher = cipher;
    s->neps = neps;
    s->npeers = npeers;
    int rc = uln_seal_id_open(&s->id, secret_file);
    if (rc) return rc;
    s->epoch = uln_seal_epoch_of(s->id.pub);
    /* Which secret we hold, for the check at start: a hash under a label of
     * its own, so it says nothing of the keys (and nothing at all of a
     * secret of 16 random bytes or more). */
    uint8_t in[16 + ULN_SEAL_SECRET_BYTES], h[32];
    unsigned int hl = 0;
    memcpy(in, "ulnet-seal-check", 16);
    memcpy(in + 16, s->id.secret, ULN_SEAL_SECRET_BYTES);
    if (s->id.has_secret && EVP_Digest(in, sizeof in, h, &hl, EVP_sha256(), NULL))
        memcpy(s->check, h, sizeof s->check);
    s->pairs = calloc((size_t)neps * npeers, sizeof *s->pairs);
    if (!s->pairs) {
        uln_seal_store_close(s);
        return -ENOMEM;
    }
    return 0;
}

void uln_seal_store_close(struct uln_seal_store *s)
{
    if (s->pairs) {
        for (size_t i = 0; i < (size_t)s->neps * s->npeers; i++) {
            if (!s->pairs[i]) continue;
            uln_seal_pair_close(s->pairs[i]);
            free(s->pairs[i]);
        }
        free(s->pairs);
    }
    uln_seal_id_close(&s->id);
    memset(s, 0, sizeof *s);
}

void uln_seal_store_publish(const struct uln_seal_store *s, struct uln_seal_pub *out)
{
    memset(out, 0, sizeof *out);
    out->mode = (uint8_t)s->mode;
    out->cipher = (uint8_t)s->cipher;
    out->has_secret = s->id.has_secret;
    out->epoch = s->epoch;
    memcpy(out->pub, s->id.pub, sizeof out->pub);
    memcpy(out->check, s->check, sizeof out->check);
}

int uln_seal_store_check(const struct uln_seal_store *s, const struct uln_seal_pub *peer, char *why,
                         size_t whylen)
{
    enum uln_seal_mode pm = (enum uln_seal_mode)peer->mode;
    if (peer->mode > ULN_SEAL_ENCRYPT || pm != s->mode) {
        snprintf(why, whylen,
                 "ULN_SECURE=%s there, %s here: every member of a job must have the same",
                 peer->mode > ULN_SEAL_ENCRYPT ? "?" : uln_seal_mode_name(pm),
                 uln_seal_mode_name(s->mode));
        return -EPROTO;
    }
    if (s->mode == ULN_SEAL_OFF) return 0;
    if (peer->has_secret != s->id.has_secret ||
        (!(peer->flags & ULN_SEAL_PUB_NOCHECK) &&
         memcmp(peer->check, s->check, sizeof s->check) != 0)) {
        snprintf(why, whylen, "%s: every member of a job must read the same ULN_SECRET_FILE",
                 !peer->has_secret   ? "no job secret there, one here"
                 : !s->id.has_secret ? "a job secret there, none here"
                                     : "another job secret there");
        return -EPROTO;
    }
    if ((peer->cipher != ULN_SEAL_AES_256_GCM && peer->cipher != ULN_SEAL_CHACHA20_POLY1305) ||
        !peer->epoch) {
        snprintf(why, whylen, "its sealing state is malformed");
        return -EPROTO;
    }
    return 0;
}

uint32_t uln_seal_epoch_of(const uint8_t pub[ULN_SEAL_PUB_BYTES])
{
    uint32_t e =
        (uint32_t)pub[0] | (uint32_t)pub[1] << 8 | (uint32_t)pub[2] << 16 | (uint32_t)pub[3] << 24;
    return e ? e : 1;
}

int uln_seal_pub_compact(const struct uln_seal_pub *pub, uint8_t out[ULN_SEAL_PUB_COMPACT])
{
    if (pub->mode > 3 || pub->cipher > 3 || pub->has_secret > 1 ||
        pub->epoch != uln_seal_epoch_of(pub->pub))
        return -ENOSPC;
    out[0] = (uint8_t)(pub->mode | pub->cipher << 2 | pub->has_secret << 4);
    memcpy(out + 1, pub->pub, ULN_SEAL_PUB_BYTES);
    return 0;
}

int uln_seal_pub_expand(const uint8_t in[ULN_SEAL_PUB_COMPACT], struct uln_seal_pub *out)
{
    if (in[0] >> 5) return -EINVAL;
    memset(out, 0, sizeof *out);
    out->mode = in[0] & 3u;
    out->cipher = in[0] >> 2 & 3u;
    out->has_secret = in[0] >> 4 & 1u;
    out->flags = ULN_SEAL_PUB_NOCHECK;
    memcpy(out->pub, in + 1, ULN_SEAL_PUB_BYTES);
    out->epoch = uln_seal_epoch_of(out->pub);
    return 0;
}

/* Do a and b give the same keys (seal.c's derivation)? The check and the
 * flags do not enter it: a pair made again for them would start its
 * counters again under the same keys, and reuse nonces. */
static bool same_keys(const struct uln_seal_pub *a, const struct uln_seal_pub *b)
{
    return a->mode == b->mode && a->cipher == b->cipher && a->has_secret == b->has_secret &&
           a->epoch == b->epoch && !memcmp(a->pub, b->pub, sizeof a->pub);
}

/* The pair of (ep, peer) for the peer as published: the one kept if it was
 * made for exactly that (an earlier life of this endpoint index), else a new
 * one (a first contact, or the peer restarted: new keys, new counters). */
static struct uln_seal_pair *store_pair(struct uln_seal_store *s, unsigned ep, int peer,
                                        unsigned peer_ep, const struct uln_seal_pub *pub)
{
    struct uln_seal_pair **slot = &s->pairs[(size_t)ep * s->npeers + (unsigned)peer];
    struct kept_pair *k = (struct kept_pair *)*slot; /* pair is its first member */
    if (k && k->peer_ep == peer_ep && same_keys(&k->peer, pub)) return &k->pair;
    struct uln_seal_ends e = {.my_epoch = s->epoch,
                              .peer_epoch = pub->epoch,
                              .my_ep = (uint16_t)ep,
                              .peer_ep = (uint16_t)peer_ep};
    enum uln_seal_cipher c = uln_seal_cipher_pick(s->cipher, (enum uln_seal_cipher)pub->cipher);
    /* The new pair first: if it cannot be made, the old one stays whole
     * (a link may hold it). */
    struct uln_seal_pair fresh;
    if (uln_seal_pair_open(&fresh, &s->id, pub->pub, &e, s->mode, c) != 0) return NULL;
    if (!k && !(k = calloc(1, sizeof *k))) {
        uln_seal_pair_close(&fresh);
        return NULL;
    }
    if (*slot) uln_seal_pair_close(&k->pair);
    k->pair = fresh;
    k->peer = *pub;
    k->peer_ep = peer_ep;
    *slot = &k->pair;
    return &k->pair;
}

/* ---- the link ------------------------------------------------------------------- */

static struct seal_link *sl_of(struct uln_link *l)
{
    return (struct seal_link *)l;
}

static struct uln_seal_pair *pair_of(struct seal_link *sl, int32_t id)
{
    return id >= 0 && (unsigned)id < sl->nids ? sl->by_id[id].pair : NULL;
}

#define LOOK_EVERY_NS 10000000ull /* a peer's board entry, read again at most this often */

/* A datagram of link id `id` did not open: if the peer now publishes other
 * keys (a new life), make its pair anew, so its next datagrams open. */
static void look_again(struct seal_link *sl, int32_t id)
{
    struct seal_peer *sp = &sl->by_id[id];
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    if (!sl->s->republished || (sp->looked_ns && now - sp->looked_ns < LOOK_EVERY_NS)) return;
    sp->looked_ns = now;
    struct uln_seal_pub pub;
    if (sl->s->republished(sl->s->arg, sp->rank, &pub) != 0) return;
    struct kept_pair *k = (struct kept_pair *)sp->pair;
    if (same_keys(&k->peer, &pub)) return; /* the same life: a forgery */
    struct uln_seal_pair *pr = store_pair(sl->s, sl->ep, sp->rank, sp->peer_ep, &pub);
    if (pr) sp->pair = pr;
}

/* No job: a datagram of a source the link below did not know when it read
 * it. Linked since (by an earlier datagram of the same read, or by our own
 * send), or an inserted peer's first (the resolver links it): its pair, and
 * rx->peer its link id. Else NULL. */
static struct uln_seal_pair *pair_of_source(struct seal_link *sl, struct uln_link_rx *rx)
{
    if (!sl->resolve) return NULL;
    socklen_t len;
    const void *a = uln_link_rx_addr(sl->below, rx->handle, &len);
    int id = a ? uln_link_find_peer(sl->below, a, len) : -1;
    struct uln_seal_pair *pr = pair_of(sl, id);
    if (!pr && (id = sl->resolve(sl->resolve_arg, rx)) >= 0) pr = pair_of(sl, id);
    if (pr) rx->peer = id;
    return pr;
}

/* An introduction from a source not linked: the pair its state and
 * endpoint give, kept pending (the same one again for the same
 * introduction, so its window refuses replays); NULL when the state does not
 * fit ours (another mode, a secret on one side only) or no pair can be made.
 * Whether the datagram opens under it is the proof: a forged or altered
 * introduction gives another key. */
static struct uln_seal_pair *pair_of_intro(struct seal_link *sl, const uint8_t *in)
{
    struct uln_seal_pub pub;
    char why[8];
    unsigned peer_ep = (unsigned)in[ULN_SEAL_PUB_COMPACT] | (unsigned)in[ULN_SEAL_PUB_COMPACT + 1]
                                                                << 8;
    if (uln_seal_pub_expand(in, &pub) || uln_seal_store_check(sl->s, &pub, why, sizeof why))
        return NULL;
    for (unsigned i = 0; i < PENDING_MAX; i++) {
        struct kept_pair *k = sl->pending[i];
        if (k && k->peer_ep == peer_ep && same_keys(&k->peer, &pub)) return &k->pair;
    }
    struct uln_seal_ends e = {.my_epoch = sl->s->epoch,
                              .peer_epoch = pub.epoch,
                              .my_ep = (uint16_t)sl->ep,
                              .peer_ep = (uint16_t)peer_ep};
    enum uln_seal_cipher c = uln_seal_cipher_pick(sl->s->cipher, (enum uln_seal_cipher)pub.cipher);
    struct kept_pair *k = calloc(1, sizeof *k);
    if (!k || uln_seal_pair_open(&k->pair, &sl->s->id, pub.pub, &e, sl->s->mode, c) != 0) {
        free(k);
        return NULL;
    }
    k->peer = pub;
    k->peer_ep = peer_ep;
    struct kept_pair **slot = &sl->pending[sl->pending_next++ % PENDING_MAX];
    if (*slot) {
        uln_seal_pair_close(&(*slot)->pair);
        free(*slot);
    }
    *slot = k;
    return &k->pair;
}

/* The pending pair for (pub, peer_ep), taken out of the pending ones, or NULL. */
static struct kept_pair *pending_take(struct seal_link *sl, unsigned peer_ep,
                                      const struct uln_seal_pub *pub)
{
    for (unsigned i = 0; i < PENDING_MAX; i++) {
        struct kept_pair *k = sl->pending[i];
        if (!k || k->peer_ep != peer_ep || !same_keys(&k->peer, pub)) continue;
        sl->pending[i] = NULL;
        return k;
    }
    return NULL;
}

/* Packet p sealed into out: its pieces and the trailer (auth), or the
 * ciphertext in scratch slot i and the trailer after it (encrypt). */
static int seal_one(struct seal_link *sl, const struct uln_link_pkt *p, unsigned i,
                    struct uln_link_pkt *out)
{
    struct uln_seal_pair *pr = pair_of(sl, p->peer);
    if (!pr || p->niov == 0 || p->niov > ULN_LINK_IOV_MAX) return -EINVAL;
    out->peer = p->peer;
    uint32_t len = uln_link_pkt_len(p);
    /* No job: introduced until the peer has shown it has our key, where the
     * datagram has room (else the next one, or a resend, carries it). */
    bool intro = sl->introduce && !pr->rx.top && len + ULN_SEAL_INTRO <= sl->l.payload_max &&
                 (sl->s->mode != ULN_SEAL_AUTH || p->niov + 2 <= ULN_LINK_IOV_WIRE);
    int (*tx)(struct uln_seal_tx *, const struct iovec *, const struct iovec *, int, uint8_t *) =
        intro ? uln_seal_tx_intro : uln_seal_tx;
    if (sl->s->mode == ULN_SEAL_AUTH) {
        int rc = tx(&pr->tx, p->iov, NULL, (int)p->niov, sl->trailer[i]);
        if (rc) return rc;
        memcpy(out->iov, p->iov, p->niov * sizeof *p->iov);
        out->niov = p->niov;
        if (intro) {
            memcpy(sl->intro_buf[i], sl->intro, ULN_SEAL_INTRO);
            out->iov[out->niov++] = (struct iovec){sl->intro_buf[i], ULN_SEAL_INTRO};
        }
        out->iov[out->niov++] = (struct iovec){sl->trailer[i], ULN_SEAL_TRAILER};
        return 0;
    }
    if (len > sl->l.payload_max) return -EMSGSIZE;
    uint8_t *d = sl->scratch + (size_t)i * sl->stride;
    struct iovec dst[ULN_LINK_IOV_MAX];
    size_t at = 0;
    for (uint32_t k = 0; k < p->niov; k++) {
        dst[k] = (struct iovec){d + at, p->iov[k].iov_len};
        at += p->iov[k].iov_len;
    }
    if (intro) memcpy(d + len, sl->intro, ULN_SEAL_INTRO);
    size_t at_trailer = len + (intro ? ULN_SEAL_INTRO : 0);
    int rc = tx(&pr->tx, p->iov, dst, (int)p->niov, d + at_trailer);
    if (rc) return rc;
    out->iov[0] = (struct iovec){d, at_trailer + ULN_SEAL_TRAILER};
    out->niov = 1;
    return 0;
}

static int sl_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct seal_link *sl = sl_of(l);
    if (n > ULN_LINK_BATCH) n = ULN_LINK_BATCH;
    for (unsigned i = 0; i < n; i++) {
        if (uln_link_pkt_len(&pkts[i]) > l->payload_max) return -EMSGSIZE;
        int rc = seal_one(sl, &pkts[i], i, &sl->out[i]);
        if (rc) return rc;
    }
    /* What the link below did not take was sealed for nothing: its counters
     * are spent, and it is sealed again, under new ones, when sent again. */
    return uln_link_send(sl->below, sl->out, n);
}

/* Opens what the link below received; what does not open is given back to
 * it at once and counted, and never reaches the caller. */
static int sl_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct seal_link *sl = sl_of(l);
    for (;;) {
        int n = uln_link_recv(sl->below, out, max), kept = 0;
        if (n <= 0) return n;
        for (int i = 0; i < n; i++) {
            struct uln_seal_pair *pr = pair_of(sl, out[i].peer);
            if (!pr) pr = pair_of_source(sl, &out[i]);
            const uint8_t *in =
                pr || !sl->introduce ? NULL : uln_seal_intro(out[i].buf, out[i].len);
            if (in) pr = pair_of_intro(sl, in); /* opened, it goes up unlinked: a hello */
            long r = pr ? uln_seal_rx(&pr->rx, out[i].buf, out[i].len) : -EBADMSG;
            /* a new life's counters start again: too old or replayed, to the
             * old pair's window, as well as unopened */
            if (r < 0 && pr && !in) look_again(sl, out[i].peer);
            if (r < 0) {
                uln_link_rx_release(sl->below, out[i].handle);
                sl->refused_here++;
                atomic_store_explicit(sl->refused,
                                      atomic_load_explicit(sl->refused, memory_order_relaxed) + 1,
                                      memory_order_relaxed); /* one writer: this endpoint's */
                continue;
            }
            out[i].len = (uint32_t)r;
            out[kept++] = out[i];
        }
        if (kept) return kept; /* else all refused: read on, as if none had come */
    }
}

static int sl_flush(struct uln_link *l)
{
    return uln_link_flush(sl_of(l)->below);
}
static int sl_rx_release(struct uln_link *l, uint32_t h)
{
    return uln_link_rx_release(sl_of(l)->below, h);
}
static const void *sl_rx_addr(const struct uln_link *l, uint32_t h, socklen_t *len)
{
    return uln_link_rx_addr(((const struct seal_link *)l)->below, h, len);
}
#ifdef ULN_TEST_HOOKS
/* A test's bytes are lent as received and opened: they skip the opening. */
static int sl_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                      struct uln_link_rx *out)
{
    return uln_link_rx_lend(sl_of(l)->below, peer, buf, len, out);
}
#endif

static int sl_grow(struct seal_link *sl, int id)
{
    if ((unsigned)id < sl->nids) return 0;
    unsigned n = (unsigned)id + 1 > 2 * sl->nids ? (unsigned)id + 1 : 2 * sl->nids;
    struct seal_peer *b = realloc(sl->by_id, n * sizeof *b);
    if (!b) return -ENOMEM;
    memset(b + sl->nids, 0, (n - sl->nids) * sizeof *b);
    sl->by_id = b;
    sl->nids = n;
    return 0;
}

static int sl_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct seal_link *sl = sl_of(l);
    int id = uln_link_add_peer(sl->below, addr, len);
    if (id >= 0 && sl_grow(sl, id)) return -ENOMEM;
    return id;
}
static int sl_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    return uln_link_set_peer(sl_of(l)->below, peer, addr, len);
}
static int sl_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    return uln_link_find_peer(((const struct seal_link *)l)->below, addr, len);
}
static int sl_fds(const struct uln_link *l, int *fds, int max)
{
    return uln_link_fds(((const struct seal_link *)l)->below, fds, max);
}
static int sl_wait(struct uln_link *l, int timeout_ms)
{
    return uln_link_wait(sl_of(l)->below, timeout_ms);
}
static int sl_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    return uln_link_local(((const struct seal_link *)l)->below, ss, len);
}
static void sl_info(const struct uln_link *l, struct uln_link_info *info)
{
    uln_link_info(((const struct seal_link *)l)->below, info);
    info->payload_max = l->payload_max;
}
static void sl_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    const struct seal_link *sl = (const struct seal_link *)l;
    uln_link_stats(sl->below, st);
    st->rx_refused_auth = sl->refused_here;
}
static void sl_close(struct uln_link *l)
{
    struct seal_link *sl = sl_of(l);
    uln_link_close(sl->below);
    for (unsigned i = 0; i < PENDING_MAX; i++) {
        if (!sl->pending[i]) continue;
        uln_seal_pair_close(&sl->pending[i]->pair);
        free(sl->pending[i]);
    }
    free(sl->by_id);
    free(sl->scratch);
    free(sl);
}

static void sl_one_peer(struct uln_link *l, bool on)
{
    uln_link_one_peer(sl_of(l)->below, on);
}

static const struct uln_link_ops seal_ops = {
    .send = sl_send,
    .flush = sl_flush,
    .recv = sl_recv,
    .rx_release = sl_rx_release,
    .rx_addr = sl_rx_addr,
#ifdef ULN_TEST_HOOKS
    .rx_lend = sl_rx_lend,
#endif
    .add_peer = sl_add_peer,
    .set_peer = sl_set_peer,
    .find_peer = sl_find_peer,
    .fds = sl_fds,
    .wait = sl_wait,
    .local = sl_local,
    .info = sl_info,
    .stats = sl_stats,
    .close = sl_close,
    .one_peer = sl_one_peer,
};

int uln_link_seal_open(struct uln_seal_store *s, unsigned ep, _Atomic uint64_t *refused,
                       struct uln_link **io)
{
    struct seal_link *sl = calloc(1, sizeof *sl);
    if (!sl) return -ENOMEM;
    unsigned below_max = uln_link_payload_max(*io);
    sl->l = (struct uln_link){.ops = &seal_ops, .payload_max = below_max - ULN_SEAL_TRAILER};
    sl->below = *io;
    sl->s = s;
    sl->ep = ep;
    sl->refused = refused;
    if (s->mode == ULN_SEAL_ENCRYPT) {
        sl->stride = (below_max + 63u) & ~63u;
        sl->scratch = aligned_alloc(64, (size_t)ULN_LINK_BATCH * sl->stride);
        if (!sl->scratch) {
            free(sl);
            return -ENOMEM;
        }
    }
    *io = &sl->l;
    return 0;
}

/* A peer first known from its introduction: the pair that opened its
 * first datagrams becomes the store's for (ep, peer), with its window, so
 * those datagrams stay refused if replayed. Not over a pair the store has
 * for the same keys (its counters are the ones in use). */
static void adopt_pending(struct seal_link *sl, int peer, unsigned peer_ep,
                          const struct uln_seal_pub *pub)
{
    struct uln_seal_pair **slot = &sl->s->pairs[(size_t)sl->ep * sl->s->npeers + (unsigned)peer];
    struct kept_pair *had = (struct kept_pair *)*slot;
    if (had && had->peer_ep == peer_ep && same_keys(&had->peer, pub)) return;
    struct kept_pair *k = pending_take(sl, peer_ep, pub);
    if (!k) return;
    if (had) { /* moved into the kept one, in place: links may point at it */
        uln_seal_pair_close(&had->pair);
        *had = *k;
        free(k);
        return;
    }
    *slot = &k->pair;
}

int uln_link_seal_peer(struct uln_link *io, int id, int peer, unsigned peer_ep,
                       const struct uln_seal_pub *pub)
{
    if (io->ops != &seal_ops) return 0; /* not sealing */
    struct seal_link *sl = sl_of(io);
    if (id < 0 || sl_grow(sl, id) || (unsigned)peer >= sl->s->npeers) return -EINVAL;
    adopt_pending(sl, peer, peer_ep, pub);
    struct uln_seal_pair *pr = store_pair(sl->s, sl->ep, peer, peer_ep, pub);
    if (!pr) return -ENOMEM;
    sl->by_id[id] = (struct seal_peer){.pair = pr, .rank = peer, .peer_ep = peer_ep};
    return 0;
}

void uln_link_seal_resolver(struct uln_link *io,
                            int (*resolve)(void *arg, const struct uln_link_rx *rx), void *arg)
{
    if (io->ops != &seal_ops) return;
    struct seal_link *sl = sl_of(io);
    sl->resolve = resolve;
    sl->resolve_arg = arg;
    /* With no job, peers may not know us when we first send: introduce us. */
    struct uln_seal_pub me;
    uln_seal_store_publish(sl->s, &me);
    if (uln_seal_pub_compact(&me, sl->intro) == 0) {
        sl->intro[ULN_SEAL_PUB_COMPACT] = (uint8_t)sl->ep;
        sl->intro[ULN_SEAL_PUB_COMPACT + 1] = (uint8_t)(sl->ep >> 8);
        sl->introduce = true;
    }
}
