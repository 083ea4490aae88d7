/*
 * peer.c - peer ids: a job's ranks, or, in a context with no job, the peers
 * the application inserts by address (ulnet.h, "Peers by address").
 *
 * A peer id is a slot of our inbox (inbox.h): the rings it writes to us are
 * the slot's, so the engine reads every peer the same way, job or not. With
 * no job a slot is claimed for one (context key, endpoint index) by whoever
 * comes first - our uln_peer_insert, or that endpoint mapping our inbox to
 * send to us - so both sides agree on it without a word between them, in
 * any order. What the transports need to reach the peer goes into the
 * slot's entry of a private board (boot.c), exactly as a launcher's board
 * holds a job's, and each transport learns it from there.
 *
 * The address (uln_addr), little-endian:
 *   0  u8  magic 0xa7        1  u8  version 1
 *   2  u8  total length      3  u8  number of parts
 *   4  u32 pid               8  u64 context key       16 u64 host id
 *   24 parts: u8 transport id, u8 length, that many bytes (the transport's)
 *
 * The short form (ULN_ADDR_SHORT bytes) says the same for the common case
 * in fewer bytes: libfabric clients that keep a name in 32 bytes exist
 * (fabtests' fi_rdm_stress), and the provider adds 4. uln_addr gives it when
 * the room is too small for the full form; read back, it is made full again,
 * so one parser checks both.
 *   0  u8  magic 0xa8        1  u24 pid        4  u64 context key
 *   12 u48 host id           18 the short parts of the transports that have
 *      one (transport.h: short_bytes), in id order, no ids or lengths: today
 *      shm's (u16, our inbox's descriptor) and udp's (u8 port count, u16
 *      first port, an IPv4 address). An address with other parts has none.
 * Under ULN_SECURE the sealed short form (ULN_ADDR_SHORT_SEALED bytes,
 * magic 0xa9) is the same with each part followed by its transport's
 * short_seal_bytes: udp's sealing state, compact (its public key; link_seal.h),
 * so that a sealed address still fits the 64 bytes of a libfabric name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "boot/boot.h"
#include "boot/addr.h"
#include "transport/transports.h"

#define ADDR_MAGIC         0xa7u
#define ADDR_VERSION       1u
#define ADDR_HDR           24u
#define SHORT_MAGIC        0xa8u
#define SHORT_HDR          18u /* magic, pid, key, host: then the transports' short parts */
#define SHORT_SEALED_MAGIC 0xa9u

int uln_peers_open(struct uln_ctx *ctx)
{
    size_t words = ((size_t)ctx->size + 63) / 64;
    ctx->peer_recs = calloc((size_t)ctx->size, sizeof *ctx->peer_recs);
    ctx->peer_live = calloc(words, sizeof *ctx->peer_live);
    if (!ctx->peer_recs || !ctx->peer_live) return -ENOMEM;
    for (int p = 0; p < (ctx->no_job ? 1 : ctx->size); p++) {
        ctx->peer_recs[p] = (struct uln_peer_rec){
            .key = ctx->job_key, .rank = p, .ep = -1, .refs = 1, .state = ULN_PEER_LIVE};
        atomic_fetch_or_explicit(&ctx->peer_live[p / 64], 1ull << (p % 64), memory_order_relaxed);
    }
    return 0;
}

void uln_peers_close(struct uln_ctx *ctx)
{
    free(ctx->peer_recs);
    free(ctx->peer_live);
    ctx->peer_recs = NULL;
    ctx->peer_live = NULL;
}

/* The short form of full address a (n bytes) into out (room bytes): the
 * plain one, or the sealed one when a transport's part carries sealing
 * state. Its length, or -ENOSPC when it has other parts, values too wide for
 * the short fields, or is longer than room. */
static int addr_shorten(const uint8_t *a, size_t n, uint8_t *out, size_t room)
{
    uint8_t s[ULN_ADDR_SHORT_SEALED]; /* out is the caller's: written only whole */
    if (n < ADDR_HDR || a[7] || a[22] || a[23]) return -ENOSPC; /* pid < 2^24; 48-bit hosts */
    size_t off = ADDR_HDR, so = SHORT_HDR;
    unsigned parts = 0;
    bool sealed = false;
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        if (!t->short_bytes) continue;
        /* Every transport with a short part has its part here, in id order. */
        if (parts >= a[3] || off + 2 > n || a[off] != id || off + 2 + a[off + 1] > n ||
            so + t->short_bytes + t->short_seal_bytes > sizeof s)
            return -ENOSPC;
        int k = t->short_pack(a + off + 2, a[off + 1], s + so);
        if (k < 0 || (k != (int)t->short_bytes && k != (int)(t->short_bytes + t->short_seal_bytes)))
            return -ENOSPC;
        sealed |= k != (int)t->short_bytes;
        off += 2u + a[off + 1];
        so += (size_t)k;
        parts++;
    }
    /* Sealed, every part must be in its sealed length (addr_full reads them
     * so): the lengths add up to ULN_ADDR_SHORT_SEALED only then. */
    size_t want = sealed ? ULN_ADDR_SHORT_SEALED : ULN_ADDR_SHORT;
    if (parts != a[3] || off != n || so != want || want > room) return -ENOSPC; /* other parts */
    s[0] = sealed ? SHORT_SEALED_MAGIC : SHORT_MAGIC;
    memcpy(s + 1, a + 4, 3);
    memcpy(s + 4, a + 8, 8);
    memcpy(s + 12, a + 16, 6);
    memcpy(out, s, want);
    return (int)want;
}

/* The full form of address a (len bytes): a itself, or a short one made full
 * in buf; NULL when it is short but not well formed. */
static const uint8_t *addr_full(const uint8_t *a, size_t *len, uint8_t buf[ULN_ADDR_MAX])
{
    if (*len == 0 || (a[0] != SHORT_MAGIC && a[0] != SHORT_SEALED_MAGIC)) return a;
    bool sealed = a[0] == SHORT_SEALED_MAGIC;
    size_t want = sealed ? ULN_ADDR_SHORT_SEALED : ULN_ADDR_SHORT;
    if (*len != want) return NULL;
    memset(buf, 0, ULN_ADDR_MAX);
    size_t off = ADDR_HDR, so = SHORT_HDR;
    unsigned parts = 0;
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        if (!t->short_bytes) continue;
        size_t sb = t->short_bytes + (sealed ? t->short_seal_bytes : 0);
        if (so + sb > want || off + 2 > ULN_ADDR_MAX) return NULL;
        size_t k = t->short_unpack(a + so, sealed, buf + off + 2, ULN_ADDR_MAX - off - 2);
        if (!k || k > 255) return NULL;
        buf[off] = (uint8_t)id;
        buf[off + 1] = (uint8_t)k;
        off += 2 + k;
        so += sb;
        parts++;
    }
    if (so != want) return NULL; /* a build whose short parts do not fill it */
    buf[0] = ADDR_MAGIC;
    buf[1] = ADDR_VERSION;
    buf[2] = (uint8_t)off;
    buf[3] = (uint8_t)parts;
    memcpy(buf + 4, a + 1, 3);
    memcpy(buf + 8, a + 4, 8);
    memcpy(buf + 16, a + 12, 6);
    *len = off;
    return buf;
}

ULN_EXPORT int uln_addr(const struct uln_ctx *ctx, void *addr, size_t *len)
{
    if (!ctx || !addr || !len) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM;
    uint8_t a[ULN_ADDR_MAX];
    uint64_t key = ctx->job_key, host = uln_host_id();
    uint32_t pid = (uint32_t)getpid();
    size_t n = ADDR_HDR;
    unsigned parts = 0;
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        if (!t->addr_pack || n + 2 > sizeof a) continue;
        size_t k = t->addr_pack(ctx, a + n + 2, sizeof a - n - 2);
        if (!k) continue;
        a[n] = (uint8_t)id;
        a[n + 1] = (uint8_t)k;
        n += 2 + k;
        parts++;
    }
    a[0] = ADDR_MAGIC;
    a[1] = ADDR_VERSION;
    a[2] = (uint8_t)n;
    a[3] = (uint8_t)parts;
    memcpy(a + 4, &pid, 4);
    memcpy(a + 8, &key, 8);
    memcpy(a + 16, &host, 8);
    if (*len < n) {
        int k = *len >= ULN_ADDR_SHORT ? addr_shorten(a, n, addr, *len) : -ENOSPC;
        if (k > 0) {
            *len = (size_t)k;
            return 0;
        }
        *len = n;
        return -ENOSPC;
    }
    memcpy(addr, a, n);
    *len = n;
    return 0;
}

/* The transport an address part's id names, or NULL (one we were built
 * without). */
static const struct uln_transport_ops *part_transport(unsigned id)
{
    for (unsigned k = 0; uln_transports[k]; k++)
        if (k == id) return uln_transports[k];
    return NULL;
}

/* An address as the bootstrap's directory holds it: pid + each transport's
 * part at its offset (uln_tp_slot_off). */
struct peer_entry {
    int32_t pid;
    uint8_t addr[ULN_BOOT_ADDR_BYTES];
};

/* An address, read back into a directory entry and its key. Every length is
 * checked against what was given. */
static int addr_parse(const uint8_t *a, size_t len, struct peer_entry *slot, uint64_t *key)
{
    uint8_t full[ULN_ADDR_MAX];
    if (!(a = addr_full(a, &len, full))) return -EADDRNOTAVAIL;
    if (len < ADDR_HDR || len > ULN_ADDR_MAX || a[0] != ADDR_MAGIC || a[1] != ADDR_VERSION ||
        a[2] != len)
        return -EADDRNOTAVAIL;
    uint32_t pid;
    uint64_t host;
    memcpy(&pid, a + 4, 4);
    memcpy(key, a + 8, 8);
    memcpy(&host, a + 16, 8);
    if (*key == 0 || pid == 0 || pid > INT32_MAX) return -EADDRNOTAVAIL;
    memset(slot, 0, sizeof *slot);
    slot->pid = (int32_t)pid;
    size_t off = ADDR_HDR;
    for (unsigned i = 0; i < a[3]; i++) {
        if (off + 2 > len || off + 2 + a[off + 1] > len) return -EADDRNOTAVAIL;
        const struct uln_transport_ops *t = part_transport(a[off]);
        /* A part of a transport we were built without is skipped: the peer
         * may still be reached another way. */
        if (t && t->addr_unpack &&
            t->addr_unpack(a + off + 2, a[off + 1], host, slot->addr + uln_tp_slot_off(t->id),
                           t->slot_bytes) != 0)
            return -EADDRNOTAVAIL;
        off += 2u + a[off + 1];
    }
    return off == len ? 0 : -EADDRNOTAVAIL;
}

/* Text a part at a time; n is what the whole text needs so far. Once the
 * room is used up, snprintf is given none (and no pointer: buf may be NULL). */
#define ADDR_PRINT(...)                                                                            \
    do {                                                                                           \
        int k_ = snprintf(n < size ? buf + n : NULL, n < size ? size - n : 0, __VA_ARGS__);        \
        if (k_ < 0) return -EINVAL;                                                                \
        n += (size_t)k_;                                                                           \
    } while (0)

ULN_EXPORT int uln_addr_str(const void *addr, size_t len, char *buf, size_t size)
{
    struct peer_entry slot;
    uint64_t key, host;
    uint32_t pid;
    if (!addr || (!buf && size)) return -EINVAL;
    int rc = addr_parse(addr, len, &slot, &key); /* every length checked */
    if (rc) return rc;
    uint8_t full[ULN_ADDR_MAX];
    const uint8_t *a = addr_full(addr, &len, full);
    memcpy(&pid, a + 4, 4);
    memcpy(&host, a + 16, 8);
    size_t n = 0;
    if (size) buf[0] = '\0';
    ADDR_PRINT("pid %u key %016llx host %016llx", pid, (unsigned long long)key,
               (unsigned long long)host);
    for (size_t i = 0, off = ADDR_HDR; i < a[3]; i++, off += 2u + a[off + 1]) {
        const struct uln_transport_ops *t = part_transport(a[off]);
        char part[64] = "";
        if (t && t->addr_str) t->addr_str(a + off + 2, a[off + 1], part, sizeof part);
        if (t)
            ADDR_PRINT(" %s%s%s", t->name, part[0] ? " " : "", part);
        else
            ADDR_PRINT(" transport-%u", a[off]); /* not built into this library */
    }
    return n > INT32_MAX ? -EINVAL : (int)n;
}

static void set_live(struct uln_ctx *ctx, int p, bool live)
{
    /* Relaxed: an endpoint driven by another thread reads the bit only to
     * choose which rings to read; the generation's release below publishes
     * the peer's records to it (it acquires the generation first). */
    if (live)
        atomic_fetch_or_explicit(&ctx->peer_live[p / 64], 1ull << (p % 64), memory_order_relaxed);
    else
        atomic_fetch_and_explicit(&ctx->peer_live[p / 64], ~(1ull << (p % 64)),
                                  memory_order_relaxed);
    /* endpoints rebuild their lists of peers to read */
    atomic_fetch_add_explicit(&ctx->peers_gen, 1, memory_order_release);
}

/* Give every open endpoint the peer's transport and the index it names. */
static void eps_learn(struct uln_ctx *ctx, int p)
{
    for (unsigned i = 0; i < ctx->n_eps; i++) {
        struct uln_ep *ep = ctx->eps[i];
        if (!ep) continue;
        ep->peers[p].tp = ctx->peer_tp[p];
        ep->peers[p].dst_ep = ctx->peer_recs[p].ep;
    }
}

/* Fill the slot's board entry and let the transports learn it. */
static int slot_fill(struct uln_ctx *ctx, int p, const struct peer_entry *s, uint64_t key,
                     int ep_index)
{
    /* The directory publishes it with release (uln_boot_slot_set), for the
     * transports' lookups (uln_boot_peer). */
    int rc = uln_boot_slot_set(&ctx->boot, p, s->pid, s->addr, sizeof s->addr);
    if (rc) return rc;
    ctx->peer_recs[p] = (struct uln_peer_rec){.key = key, .rank = 0, .ep = ep_index};
    rc = uln_transports_learn(ctx, p);
    if (rc) {
        uln_boot_slot_set(&ctx->boot, p, 0, NULL, 0);
        return rc;
    }
    eps_learn(ctx, p);
    return 0;
}

/* The id of (address, endpoint): known already, or made now. by_app: the
 * application's uln_peer_insert (counted); else a peer learnt from its own
 * contact (its first message over shm, its hello over udp), known with no
 * count, so the application's later insert gets the same id. */
static int peer_learn(struct uln_ctx *ctx, const void *addr, size_t len, int ep_index, bool by_app)
{
    struct peer_entry s;
    uint64_t key;
    int rc = addr_parse(addr, len, &s, &key);
    if (rc) return rc;
    int p = uln_inbox_claim(ctx->inbox->base, ctx->inbox->hdr, key, ep_index, 0, addr, len);
    if (p < 0) return p;
    struct uln_peer_rec *r = &ctx->peer_recs[p];
    if (r->state != ULN_PEER_FREE && r->key == key && r->ep == ep_index) {
        /* Known before (and maybe removed since): the same id, the same
         * rings, so nothing in flight between us is lost or repeated. A
         * removed peer comes back only by the application's hand. */
        if (r->state == ULN_PEER_REMOVED) {
            if (!by_app) return -EINVAL;
            r->state = ULN_PEER_LIVE;
            r->refs = 0;
            set_live(ctx, p, true);
        }
        r->refs += by_app;
        return p;
    }
    if ((rc = slot_fill(ctx, p, &s, key, ep_index)) != 0) return rc;
    r->refs = by_app;
    r->state = ULN_PEER_LIVE;
    set_live(ctx, p, true);
    return p;
}

int uln_peer_learn_addr(struct uln_ctx *ctx, const void *addr, size_t len, int ep_index)
{
    if (!ctx->no_job || ep_index < 0 || ep_index >= 64) return -EINVAL;
    pthread_mutex_lock(&ctx->lock);
    int rc = peer_learn(ctx, addr, len, ep_index, false);
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int uln_peer_learn_slot(struct uln_ctx *ctx, int slot)
{
    if (!ctx->no_job || slot <= 0 || slot >= ctx->size) return -EINVAL;
    struct uln_inbox_claim *c = uln_inbox_claim_at(ctx->inbox->base, ctx->inbox->hdr, slot);
    /* Acquire: pairs with the claimer's release of ready (inbox.c). */
    if (!atomic_load_explicit(&c->ready, memory_order_acquire)) return -EAGAIN;
    uint8_t addr[ULN_ADDR_MAX];
    size_t len = c->addr_len <= sizeof addr ? c->addr_len : 0;
    memcpy(addr, c->addr, len);
    uint64_t key = 0;
    struct peer_entry parsed;
    if (addr_parse(addr, len, &parsed, &key) != 0) return -EADDRNOTAVAIL;
    int32_t ep = c->ep;
    /* The address must be the claimer's own: the slot it claimed is the one
     * its (key, endpoint) hashes to, else it is refused. */
    if (key != c->key ||
        uln_inbox_ident(key, ep) != atomic_load_explicit(&c->ident, memory_order_relaxed))
        return -EADDRNOTAVAIL;
    int rc = uln_peer_learn_addr(ctx, addr, len, ep);
    return rc < 0 ? rc : rc == slot ? 0 : -EADDRNOTAVAIL;
}

ULN_EXPORT int uln_peer_insert(struct uln_ctx *ctx, const void *addr, size_t len, int ep_index,
                               int *peer)
{
    if (!ctx || !addr || !peer) return -EINVAL;
    if (!ctx->no_job || ep_index < 0 || ep_index >= 64) return -EINVAL;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    pthread_mutex_lock(&ctx->lock);
    rc = peer_learn(ctx, addr, len, ep_index, true);
    pthread_mutex_unlock(&ctx->lock);
    uln_api_unlock(ctx);
    if (rc < 0) return rc;
    *peer = rc;
    return 0;
}

ULN_EXPORT int uln_peer_remove(struct uln_ctx *ctx, int peer)
{
    if (!ctx || !ctx->no_job || peer <= 0 || peer >= ctx->size) return -EINVAL;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    pthread_mutex_lock(&ctx->lock);
    struct uln_peer_rec *r = &ctx->peer_recs[peer];
    if (r->state != ULN_PEER_LIVE || r->refs == 0) { /* never inserted, or removed */
        rc = -EINVAL;
    } else if (--r->refs == 0) {
        r->state = ULN_PEER_REMOVED;
        set_live(ctx, peer, false);
        for (unsigned i = 0; i < ctx->n_eps; i++)
            if (ctx->eps[i]) uln_engine_fail_peer(ctx->eps[i], peer, -ECANCELED);
    }
    pthread_mutex_unlock(&ctx->lock);
    uln_api_unlock(ctx);
    return rc;
}
