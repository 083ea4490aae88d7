/*
 * mr.c - memory: blocks peers can map (uln_mem_alloc), registered regions and
 * their keys.
 *
 * A key is (table index << 40) | 40 random bits. The table entry lives in this
 * process's shared inbox, where peers read it: they check keys, bounds and
 * rights themselves before touching a byte (the direct path), and we check the
 * same entry when we place data for them (ring path). Either way the same pure
 * function, uln_key_check, decides.
 *
 * Deregistration clears the key first, then waits until no peer's hazard slot
 * names the region: after that, nobody is inside it and nobody can enter.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>

#include "core/internal.h"

ULN_EXPORT int uln_mem_alloc(struct uln_ctx *ctx, size_t len, void **ptr)
{
    if (!ctx || !ptr || len == 0) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rlen = (len + page - 1) & ~(page - 1);
    struct uln_mem *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->fd = memfd_create("ulnet-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m->fd < 0) goto fail;
    /* The size never shrinks afterwards, so a peer's mapping can never
     * fault: sealed, because the host service (which maps it too) trusts
     * the seal, not our word. */
    if (ftruncate(m->fd, (off_t)rlen) != 0 ||
        fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        goto fail;
    m->base = mmap(NULL, rlen, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    if (m->base == MAP_FAILED) goto fail;
    m->len = rlen;
    pthread_mutex_lock(&ctx->lock);
    m->next = ctx->mems;
    ctx->mems = m;
    pthread_mutex_unlock(&ctx->lock);
    *ptr = m->base;
    return 0;
fail:;
    int e = errno;
    if (m->fd >= 0) close(m->fd);
    free(m);
    return -e;
}

static bool mem_in_use(struct uln_ctx *ctx, struct uln_mem *m)
{
    for (uint32_t i = 0; i < ctx->p.max_regions; i++) {
        struct uln_mr *r = ctx->regions[i];
        if (r && (uint8_t *)r->addr >= (uint8_t *)m->base &&
            (uint8_t *)r->addr < (uint8_t *)m->base + m->len)
            return true;
    }
    return false;
}

ULN_EXPORT int uln_mem_free(struct uln_ctx *ctx, void *ptr)
{
    if (!ctx || !ptr) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM;
    pthread_mutex_lock(&ctx->lock);
    struct uln_mem **pm = &ctx->mems;
    while (*pm && (*pm)->base != ptr)
        pm = &(*pm)->next;
    struct uln_mem *m = *pm;
    if (!m) {
        pthread_mutex_unlock(&ctx->lock);
        return -EINVAL;
    }
    if (mem_in_use(ctx, m)) { /* a registered region still points into it */
        pthread_mutex_unlock(&ctx->lock);
        return -EBUSY;
    }
    *pm = m->next;
    pthread_mutex_unlock(&ctx->lock);
    munmap(m->base, m->len);
    close(m->fd);
    free(m);
    return 0;
}

/* Caller holds ctx->lock. */
int uln_mem_lookup(struct uln_ctx *ctx, const void *addr, size_t len, int *fd, uint64_t *off,
                   uint64_t *fd_len)
{
    for (struct uln_mem *m = ctx->mems; m; m = m->next) {
        const uint8_t *b = m->base, *a = addr;
        if (a >= b && a < b + m->len && len <= (size_t)(b + m->len - a)) {
            *fd = m->fd;
            *off = (uint64_t)(a - b);
            *fd_len = m->len;
            return 0;
        }
    }
    return -ENOENT;
}

/* A key's random part, drawn from the kernel 256 bytes at a time: one system
 * call per 32 registrations, not one each (a rendezvous registers per
 * message, and in a VM a system call is where a loaded host deschedules us).
 * Bytes from getentropy are as unpredictable when kept a while; the pool is
 * the context's, used under its lock, and never seen by a fork, where the
 * context refuses every call. */
static uint64_t random_magic(struct uln_ctx *ctx)
{
    uint64_t v = 0;
    while ((v & ULN_KEY_MAGIC_MASK) == 0) {
        if (ctx->key_rand_left == 0 && getentropy(ctx->key_rand, sizeof ctx->key_rand) == 0)
            ctx->key_rand_left = sizeof ctx->key_rand / sizeof ctx->key_rand[0];
        if (ctx->key_rand_left) {
            v = ctx->key_rand[--ctx->key_rand_left];
            ctx->key_rand[ctx->key_rand_left] = 0; /* used once */
        } else {
            v = (uint64_t)rand() << 20 ^ (uint64_t)rand();
        }
    }
    return v & ULN_KEY_MAGIC_MASK;
}

/* Is [addr, addr+len) memory this process has mapped? Peers' PUTs and GETs
 * are copied into and out of it by this process (the ring path, UDP) or by
 * the kernel (process_vm_*): a region reaching into unmapped memory would
 * let a peer's valid access crash us. msync(MS_ASYNC) only walks the
 * mappings (one system call at any size) and fails with ENOMEM on a hole. */
static int range_mapped(void *addr, size_t len)
{
    if (len == 0) return 0;
    uintptr_t a = (uintptr_t)addr, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (a + len < a) return -EINVAL; /* wraps around the address space */
    uintptr_t start = a & ~(page - 1);
    if (msync((void *)start, a + len - start, MS_ASYNC) != 0)
        return errno == ENOMEM ? -EFAULT : -errno;
    return 0;
}

/* Region mr (entry e) as the transports' memory hooks see it. */
static struct uln_tp_region tp_region(const struct uln_mr *mr, const struct uln_key_entry *e,
                                      uint64_t key)
{
    return (struct uln_tp_region){.addr = mr->addr,
                                  .len = mr->len,
                                  .access = mr->access,
                                  .key = key,
                                  .index = mr->index,
                                  .memfd = e->memfd,
                                  .memfd_off = e->memfd_off,
                                  .memfd_len = e->memfd_len};
}

/* The transports open in ctx (transport.h: mem_reg) told of region mr,
 * before its key is live; one refusing it undoes those that took it. Under
 * the context lock. 0 or the refusal. */
static int tp_mem_reg(struct uln_ctx *ctx, struct uln_mr *mr, const struct uln_tp_region *r)
{
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        if (!t->mem_reg || !ctx->tp_ctx[id]) continue;
        int rc = t->mem_reg(ctx, r, &mr->tp_state[id]);
        if (rc == 0) continue;
        while (id-- > 0)
            if (uln_transports[id]->mem_reg && ctx->tp_ctx[id] && uln_transports[id]->mem_dereg)
                uln_transports[id]->mem_dereg(ctx, r, mr->tp_state[id]);
        return rc < 0 ? rc : -EIO;
    }
    return 0;
}

/* ... and of its end, in reverse order, once nobody is inside it. */
static void tp_mem_dereg(struct uln_ctx *ctx, struct uln_mr *mr, const struct uln_tp_region *r)
{
    unsigned n = 0;
    while (uln_transports[n])
        n++;
    while (n-- > 0) {
        const struct uln_transport_ops *t = uln_transports[n];
        if (t->mem_reg && ctx->tp_ctx[n] && t->mem_dereg) t->mem_dereg(ctx, r, mr->tp_state[n]);
        mr->tp_state[n] = NULL;
    }
}

ULN_EXPORT int uln_mr_reg(struct uln_ctx *ctx, void *addr, size_t len, unsigned access,
                          struct uln_mr **out)
{
    if (!ctx || !out || (!addr && len)) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM;
    if (access & ~(ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC |
                   ULN_MR_VADDR | ULN_MR_TRANSIENT))
        return -EINVAL;
    int rc = range_mapped(addr, len);
    if (rc) return rc;
    struct uln_mr *mr = calloc(1, sizeof *mr);
    if (!mr) return -ENOMEM;

    pthread_mutex_lock(&ctx->lock);
    uint32_t n = ctx->p.max_regions, idx = n;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (ctx->region_hint + k) % n;
        if (!ctx->regions[i]) {
            idx = i;
            break;
        }
    }
    if (idx == n) {
        pthread_mutex_unlock(&ctx->lock);
        free(mr);
        return -ENOSPC;
    }
    ctx->region_hint = idx + 1;
    struct uln_key_entry *e = &ctx->keys[idx];
    int fd = -1;
    uint64_t off = 0, fd_len = 0;
    uln_mem_lookup(ctx, addr, len, &fd, &off, &fd_len);
    e->addr = (uint64_t)(uintptr_t)addr;
    e->len = len;
    e->access = access;
    e->memfd = fd;
    e->memfd_off = off;
    e->memfd_len = fd_len;
    mr->ctx = ctx;
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    mr->index = idx;
    mr->key = ((uint64_t)idx << ULN_KEY_INDEX_SHIFT) | random_magic(ctx);
    /* The transports first: the entry's key is still 0 (a cleared entry's),
     * so nobody can use the region before all of them have it. */
    struct uln_tp_region r = tp_region(mr, e, mr->key);
    if ((rc = tp_mem_reg(ctx, mr, &r)) != 0) {
        pthread_mutex_unlock(&ctx->lock);
        free(mr);
        return rc;
    }
    ctx->regions[idx] = mr;
    /* Release: the entry's fields are visible before a peer can match the key. */
    atomic_store_explicit(&e->key, mr->key, memory_order_release);
    pthread_mutex_unlock(&ctx->lock);
    *out = mr;
    return 0;
}

/* Wait until no hazard slot names region idx. A dead peer's slot may be stuck
 * on it forever: it cannot touch memory any more, so it does not count. Only
 * this process and the peers that have mapped our inbox can be inside a
 * region: their slots are the only ones read, so a dereg costs O(peers that
 * ever came near us), not O(ranks), and touches no page nobody wrote. */
/* Has the process behind our inbox slot src died? A job's member, or a
 * peer with no job we inserted: its transport knows; a slot claimed by a
 * process we never inserted: the pid it claimed with. */
static bool src_dead(struct uln_ctx *ctx, int src)
{
    if (ctx->peer_tp[src] && ctx->peer_recs[src].state != ULN_PEER_FREE)
        return ctx->peer_tp[src]->peer_dead(ctx, NULL, src);
    int32_t pid = uln_inbox_claim_at(ctx->inbox->base, ctx->inbox->hdr, src)->pid;
    return pid <= 0 || kill(pid, 0) != 0;
}

static void wait_src(struct uln_ctx *ctx, uint32_t idx, int src)
{
    for (uint32_t ep = 0; ep < ctx->p.max_eps; ep++) {
        _Atomic uint32_t *hz = uln_inbox_hazard(ctx, src, (int)ep);
        unsigned spins = 0;
        /* Seq_cst: pairs with the initiator's seq_cst store of the slot, or
         * reads a plain one made visible by dereg_fence (uln_mr_dereg). */
        while (atomic_load_explicit(hz, memory_order_seq_cst) == idx + 1) {
            if (++spins % 1024 == 0) {
                if (src != ctx->rank && src_dead(ctx, src)) break;
                sched_yield();
            }
        }
    }
}

static void wait_hazards(struct uln_ctx *ctx, uint32_t idx)
{
    wait_src(ctx, idx, ctx->rank);
    _Atomic uint64_t *att = uln_inbox_attached(ctx);
    for (int w = 0; w < (ctx->size + 63) / 64; w++) {
        /* Seq_cst, after the key was cleared: pairs with the peer's RMW of
         * its bit before its first hazard store (a transport's connect). */
        uint64_t bits = atomic_load_explicit(&att[w], memory_order_seq_cst);
        while (bits) {
            int src = w * 64 + __builtin_ctzll(bits);
            bits &= bits - 1;
            if (src != ctx->rank) wait_src(ctx, idx, src);
        }
    }
}

/* Why nobody touches a region once uln_mr_dereg returns. An accessor (a
 * peer's direct path, or our own engine placing data) does
 *     H: store idx + 1 to its hazard slot;  K: load the entry's live key;
 *        copy only if the key is the one it holds;  store 0 to the slot
 * and the owner does
 *     C: store 0 to the live key;  F;  R: read every hazard slot that may
 *        be in use, waiting while one names the region.
 * Classic Dekker: if both H->K and C->R are ordered (each side a full
 * fence between its store and its load), at least one side sees the other:
 * the owner sees the hazard and waits for the copy, or the accessor sees
 * the key gone and copies nothing. A seq_cst store is such a fence, but a
 * locked instruction per PUT is a large part of an 8-byte PUT's cost.
 *
 * So the fence moves to the rare side (an asymmetric fence): with
 * hdr->dereg_fence set, F is membarrier(GLOBAL_EXPEDITED), which returns
 * only after every running thread of every registered process has executed
 * a full memory barrier (and a thread not running passed one when it was
 * switched out). An accessor whose process registered (ctx.c) does H as a
 * plain store with only a compiler barrier before K. Take the point B where
 * the accessor's thread executes that barrier: if B comes before H, then C
 * (before F began) is visible at B and K, after B, reads 0; if B comes
 * after H, H is visible to all once F returns, and R sees it. Either way
 * one of the two sees the other. An accessor whose process could not
 * register, or an owner that cannot fence, keeps the seq_cst store (the
 * owner's F is then nothing; its C is seq_cst either way). The bit a peer
 * sets in our attached map before its first H (a seq_cst RMW, shm.c) is
 * read by R after F as well, so the same argument covers it.
 *
 * The fence costs the owner a system call that interrupts every CPU running
 * a registered thread (tens of microseconds in a VM): too much for a region
 * registered per message (a rendezvous buffer). A ULN_MR_TRANSIENT region
 * skips F, and its accessors make H seq_cst again (uln_hazard_light reads
 * the flag from the entry before H: if that is a later registration's, the
 * key it holds is gone and K refuses whatever the mode). */
static void dereg_fence(struct uln_ctx *ctx)
{
    if (!ctx->inbox->hdr->dereg_fence) return;
    /* uln_open issued one already: the kernel refuses only a command it
     * does not know, which this is not. Should it ever fail, say so: the
     * protocol would then rest on the accessor's store draining alone. */
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) != 0)
        fprintf(stderr, "ulnet: membarrier failed: %s\n", strerror(errno));
}

/* A deregistered handle is not freed at once but marked dead and kept in a
 * FIFO of ULN_MR_GRAVE handles: a second uln_mr_dereg (or uln_mr_key...) on
 * it then finds it dead and gets -EBADF, as long as fewer than ULN_MR_GRAVE
 * regions were deregistered in between. Past that, a stale handle is as
 * undefined as a pointer freed twice; the FIFO bounds the memory kept. */
#define ULN_MR_GRAVE 1024u

static void bury(struct uln_ctx *ctx, struct uln_mr *mr)
{
    if (!ctx->mr_grave) ctx->mr_grave = calloc(ULN_MR_GRAVE, sizeof *ctx->mr_grave);
    if (!ctx->mr_grave) {
        free(mr); /* no memory to keep it: the check is lost, nothing else */
        return;
    }
    uint32_t slot = (ctx->grave_head + ctx->grave_n) % ULN_MR_GRAVE;
    if (ctx->grave_n == ULN_MR_GRAVE) {
        free(ctx->mr_grave[ctx->grave_head]); /* the oldest goes for good */
        ctx->grave_head = (ctx->grave_head + 1) % ULN_MR_GRAVE;
    } else {
        ctx->grave_n++;
    }
    ctx->mr_grave[slot] = mr;
}

ULN_EXPORT int uln_mr_dereg(struct uln_mr *mr)
{
    if (!mr) return -EINVAL;
    struct uln_ctx *ctx = mr->ctx;
    if (uln_ctx_forked(ctx)) return -EPERM;
    pthread_mutex_lock(&ctx->lock);
    if (mr->dead) {
        pthread_mutex_unlock(&ctx->lock);
        return -EBADF;
    }
    struct uln_key_entry *e = &ctx->keys[mr->index];
    /* Seq_cst: the key is gone before we read the hazard slots (see below). */
    atomic_store_explicit(&e->key, 0, memory_order_seq_cst);
    /* A transient region's accessors announce with a seq_cst store (uln_hazard_light):
     * the classic Dekker pair, no fence needed here. */
    if (!(e->access & ULN_MR_TRANSIENT)) dereg_fence(ctx);
    wait_hazards(ctx, mr->index);
    struct uln_tp_region r = tp_region(mr, e, mr->key);
    tp_mem_dereg(ctx, mr, &r);
    ctx->regions[mr->index] = NULL;
    mr->dead = true;
    mr->key = 0;
    bury(ctx, mr);
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

void uln_mr_close_all(struct uln_ctx *ctx)
{
    for (uint32_t i = 0; ctx->regions && i < ctx->p.max_regions; i++)
        if (ctx->regions[i]) uln_mr_dereg(ctx->regions[i]);
    for (uint32_t k = 0; k < ctx->grave_n; k++)
        free(ctx->mr_grave[(ctx->grave_head + k) % ULN_MR_GRAVE]);
    free(ctx->mr_grave);
    ctx->mr_grave = NULL;
    ctx->grave_n = 0;
    while (ctx->mems)
        uln_mem_free(ctx, ctx->mems->base);
}

ULN_EXPORT uint64_t uln_mr_key(const struct uln_mr *mr)
{
    return mr ? mr->key : 0; /* 0 once deregistered */
}
ULN_EXPORT void *uln_mr_addr(const struct uln_mr *mr)
{
    return mr && !mr->dead ? mr->addr : NULL;
}
ULN_EXPORT size_t uln_mr_len(const struct uln_mr *mr)
{
    return mr && !mr->dead ? mr->len : 0;
}

int uln_key_enter(struct uln_ctx *ctx, int ep_index, uint64_t key, uint64_t off, uint64_t len,
                  unsigned need, uint8_t **where, struct uln_stats *st)
{
    uint64_t idx = key >> ULN_KEY_INDEX_SHIFT;
    int rc;
    if (idx >= ctx->p.max_regions) {
        rc = -ENOKEY;
        uln_count_refusal(st, rc);
        return rc;
    }
    struct uln_key_entry *e = &ctx->keys[idx];
    _Atomic uint32_t *hz = uln_inbox_hazard(ctx, ctx->rank, ep_index);
    /* Same protocol as a peer's direct access (a transport's direct path): announce, then check. */
    uint64_t live =
        uln_hazard_enter(hz, (uint32_t)idx, uln_hazard_light(ctx->hz_light, e), &e->key);
    rc = uln_key_check(e, live, key, &off, len, need);
    if (rc) {
        uln_hazard_leave(hz);
        uln_count_refusal(st, rc);
        return rc;
    }
    *where = (uint8_t *)(uintptr_t)e->addr + off;
    return 0;
}

void uln_key_leave(struct uln_ctx *ctx, int ep_index)
{
    /* Release: our copy into or out of the region is complete before dereg may
     * return to the owner. */
    atomic_store_explicit(uln_inbox_hazard(ctx, ctx->rank, ep_index), 0, memory_order_release);
}
