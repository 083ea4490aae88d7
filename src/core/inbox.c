/*
 * inbox.c - the process's inbox (inbox.h): its making, its layout, and the
 * way packet transports feed its rings.
 *
 * It has no name, so nothing is left behind however a process dies, and a
 * dead peer's memory stays valid while anyone maps it (no SIGBUS: nobody
 * ever shrinks it).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/internal.h"
#include "boot/boot.h"

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) & ~(a - 1);
}

static size_t active_words(int size)
{
    return ((size_t)size + 63) / 64;
}

uint32_t uln_inbox_ring_bytes(int ch, const struct uln_params *p)
{
    return ch == 0 ? p->ring_bytes : ULN_REQ_RING_BYTES;
}

int uln_inbox_open(struct uln_ctx *ctx)
{
    const struct uln_params *p = &ctx->p;
    struct uln_inbox *ib = calloc(1, sizeof *ib);
    if (!ib) return -ENOMEM;
    ib->fd = -1;
    ctx->inbox = ib;

    size_t keys_off = 4096;
    size_t hazards_off = align_up(keys_off + (size_t)p->max_regions * 64, 4096);
    size_t active_off = align_up(hazards_off + (size_t)ctx->size * p->max_eps * 64, 4096);
    size_t active_len = (2 * (size_t)p->max_eps + 1) * active_words(ctx->size) * 8;
    size_t claims_off = align_up(active_off + active_len, 64);
    size_t rings_off =
        align_up(claims_off + (size_t)ctx->size * sizeof(struct uln_inbox_claim), 4096);
    size_t stride =
        align_up(uln_ring_footprint(p->ring_bytes) + uln_ring_footprint(ULN_REQ_RING_BYTES), 4096);
    size_t total = rings_off + stride * (size_t)ctx->size * p->max_eps;

    ib->fd = memfd_create("ulnet-inbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (ib->fd < 0) return -errno;
    /* Sparse: pages cost memory only once a peer actually uses a ring. */
    if (ftruncate(ib->fd, (off_t)total) != 0) return -errno;
    /* Its size is final: whoever maps it (the host service, which must not
     * take SIGBUS from a process that shrinks its own inbox) can rely on it. */
    if (fcntl(ib->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return -errno;
    ib->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, ib->fd, 0);
    if (ib->base == MAP_FAILED) {
        ib->base = NULL;
        return -errno;
    }
    ib->len = total;
    ib->hdr = (struct uln_inbox_hdr *)ib->base;
    *ib->hdr = (struct uln_inbox_hdr){.magic = ULN_INBOX_MAGIC,
                                      .job_key = ctx->job_key,
                                      .version = ULN_INBOX_VERSION,
                                      .rank = (uint32_t)ctx->rank,
                                      .size = (uint32_t)ctx->size,
                                      .max_eps = p->max_eps,
                                      .ring_bytes = p->ring_bytes,
                                      .req_ring_bytes = ULN_REQ_RING_BYTES,
                                      .max_regions = p->max_regions,
                                      .keys_off = keys_off,
                                      .hazards_off = hazards_off,
                                      .active_off = active_off,
                                      .rings_off = rings_off,
                                      .claims_off = claims_off,
                                      .pair_stride = stride,
                                      .total = total,
                                      .pid = getpid()};
    ctx->keys = (struct uln_key_entry *)(ib->base + keys_off);
    return 0;
}

void uln_inbox_close(struct uln_ctx *ctx)
{
    struct uln_inbox *ib = ctx->inbox;
    if (!ib) return;
    if (ib->base) munmap(ib->base, ib->len);
    if (ib->fd >= 0) close(ib->fd);
    free(ib);
    ctx->inbox = NULL;
    ctx->keys = NULL;
}

bool uln_inbox_layout_ok(const struct uln_inbox_hdr *h, size_t len)
{
    /* Everything we will compute addresses from must stay inside the mapping. */
    uint64_t want_stride =
        uln_ring_footprint(h->ring_bytes) + uln_ring_footprint(ULN_REQ_RING_BYTES);
    bool layout_ok =
        h->keys_off >= sizeof *h && h->max_regions <= (1u << 24) && h->max_eps <= 64 &&
        h->size <= ULN_BOOT_MAX_RANKS && h->ring_bytes >= 4096 && h->ring_bytes <= (1u << 28) &&
        !(h->ring_bytes & (h->ring_bytes - 1)) &&
        h->keys_off + (uint64_t)h->max_regions * 64 <= h->hazards_off &&
        h->hazards_off + (uint64_t)h->size * h->max_eps * 64 <= h->active_off &&
        h->active_off + 8ull * (2ull * h->max_eps + 1) * active_words((int)h->size) <=
            h->claims_off &&
        h->claims_off % 64 == 0 &&
        h->claims_off + (uint64_t)h->size * sizeof(struct uln_inbox_claim) <= h->rings_off &&
        h->pair_stride >= want_stride &&
        h->rings_off + h->pair_stride * h->size * h->max_eps <= h->total &&
        h->req_ring_bytes == ULN_REQ_RING_BYTES && h->keys_off % 4096 == 0 &&
        h->hazards_off % 4096 == 0;
    return h->magic == ULN_INBOX_MAGIC && h->version == ULN_INBOX_VERSION && h->total == len &&
           layout_ok;
}

bool uln_inbox_hdr_ok(const struct uln_ctx *ctx, const struct uln_inbox_hdr *h, int rank,
                      size_t len)
{
    /* In a job every member has the job's size and settings; a context with
     * no job only needs the ring size to match (our rings there are written
     * with our ring_bytes), and any size up to a job's limit. */
    bool size_ok = ctx->no_job ? h->size >= 2 && h->size <= ULN_BOOT_MAX_RANKS
                               : h->size == (uint32_t)ctx->size && h->max_eps >= ctx->p.max_eps;
    return uln_inbox_layout_ok(h, len) && h->rank == (uint32_t)rank && size_ok &&
           h->ring_bytes == ctx->p.ring_bytes;
}

struct uln_inbox_claim *uln_inbox_claim_at(uint8_t *base, const struct uln_inbox_hdr *h, int slot)
{
    return (struct uln_inbox_claim *)(base + h->claims_off) + slot;
}

int uln_inbox_claim(uint8_t *base, const struct uln_inbox_hdr *h, uint64_t key, int ep, int pid,
                    const void *addr, size_t addr_len)
{
    uint64_t id = uln_inbox_ident(key, ep);
    uint32_t n = h->size - 1; /* slots 1..size-1 */
    /* Linear probing from a start both sides compute alike. Slots are never
     * freed while the inbox lives, so a probe that meets a free slot knows
     * the ident is nowhere further on: the first free slot is taken by CAS,
     * and a racer for the same ident that loses the CAS finds it there. */
    for (uint32_t i = 0; i < n; i++) {
        int slot = 1 + (int)((id / 2 + i) % n);
        struct uln_inbox_claim *c = uln_inbox_claim_at(base, h, slot);
        /* Acquire: the slot's other fields, written after the CAS below, are
         * not read here; acquire only orders our later ring accesses after
         * seeing the claim (the ring is the slot's, whoever claimed it). */
        uint64_t cur = atomic_load_explicit(&c->ident, memory_order_acquire);
        if (cur == 0 && atomic_compare_exchange_strong(&c->ident, &cur, id)) {
            c->key = key;
            c->ep = ep;
            c->pid = pid;
            c->addr_len = (uint8_t)(addr_len <= sizeof c->addr ? addr_len : 0);
            memcpy(c->addr, addr, c->addr_len);
            /* Release: the fields above are visible to whoever sees ready. */
            atomic_store_explicit(&c->ready, 1, memory_order_release);
            return slot;
        }
        if (cur == id) return slot;
    }
    return -ENOSPC;
}

void *uln_inbox_ring_at(uint8_t *base, const struct uln_inbox_hdr *h, int src, int ep, int ch)
{
    uint8_t *b = base + h->rings_off + h->pair_stride * ((size_t)src * h->max_eps + (size_t)ep);
    return ch == 0 ? b : b + uln_ring_footprint(h->ring_bytes);
}

_Atomic uint32_t *uln_inbox_hazard_at(uint8_t *base, const struct uln_inbox_hdr *h, int src, int ep)
{
    return (_Atomic uint32_t *)(base + h->hazards_off +
                                64 * ((size_t)src * h->max_eps + (size_t)ep));
}

_Atomic uint64_t *uln_inbox_active_at(uint8_t *base, const struct uln_inbox_hdr *h, int ch, int ep)
{
    return (_Atomic uint64_t *)(base + h->active_off) +
           ((size_t)ch * h->max_eps + (size_t)ep) * active_words((int)h->size);
}

/* The attached bitmap sits where a third channel's first map would. */
_Atomic uint64_t *uln_inbox_attached_at(uint8_t *base, const struct uln_inbox_hdr *h)
{
    return uln_inbox_active_at(base, h, 2, 0);
}

void *uln_inbox_ring_in(struct uln_ctx *ctx, int src, int ep, int ch)
{
    return uln_inbox_ring_at(ctx->inbox->base, ctx->inbox->hdr, src, ep, ch);
}

_Atomic uint32_t *uln_inbox_hazard(struct uln_ctx *ctx, int src, int ep)
{
    return uln_inbox_hazard_at(ctx->inbox->base, ctx->inbox->hdr, src, ep);
}

_Atomic uint64_t *uln_inbox_active(struct uln_ctx *ctx, int ch, int ep)
{
    return uln_inbox_active_at(ctx->inbox->base, ctx->inbox->hdr, ch, ep);
}

_Atomic uint64_t *uln_inbox_attached(struct uln_ctx *ctx)
{
    return uln_inbox_attached_at(ctx->inbox->base, ctx->inbox->hdr);
}

void uln_inbox_feed_init(struct uln_inbox_feed *f, struct uln_ctx *ctx, int src, int ep)
{
    *f = (struct uln_inbox_feed){
        .src = src, .act_gen = &ctx->inbox->hdr->act_gen, .life = ctx->ep_slots[ep].life};
    for (int ch = 0; ch < 2; ch++) {
        uln_ring_prod_init(&f->prod[ch], uln_inbox_ring_in(ctx, src, ep, ch),
                           uln_inbox_ring_bytes(ch, &ctx->p));
        f->active[ch] = uln_inbox_active(ctx, ch, ep);
    }
}
