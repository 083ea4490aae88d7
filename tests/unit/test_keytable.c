/*
 * test_keytable.c - regions and keys in one process (a job of one, no
 * launcher): the pure check, key format, stale keys after deregistration,
 * limits, and that deregistration waits for an access in progress.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

#include "check.h"

/* The check with the offset by value; *off's translation is vaddr_check's. */
static int kc(const struct uln_key_entry *e, uint64_t live, uint64_t key, uint64_t off,
              uint64_t len, unsigned need)
{
    return uln_key_check(e, live, key, &off, len, need);
}

static void pure_check(void)
{
    struct uln_key_entry e = {.len = 100, .access = ULN_ACCESS_REMOTE_READ};
    uint64_t k = 5ull << ULN_KEY_INDEX_SHIFT | 77;
    CHECK(kc(&e, k, k, 0, 100, ULN_ACCESS_REMOTE_READ) == 0);
    CHECK(kc(&e, k, k, 100, 0, ULN_ACCESS_REMOTE_READ) == 0); /* empty, at end */
    CHECK(kc(&e, k, k, 1, 100, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, 101, 0, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, 1, UINT64_MAX, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, UINT64_MAX - 3, 8, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, 0, 1, ULN_ACCESS_REMOTE_WRITE) == -EACCES);
    CHECK(kc(&e, k, k ^ 1, 0, 1, ULN_ACCESS_REMOTE_READ) == -ENOKEY);
    CHECK(kc(&e, 0, 0, 0, 1, ULN_ACCESS_REMOTE_READ) == -ENOKEY); /* no region */
    CHECK(kc(&e, k, k, 0, 1, 0) == 0);                            /* local access needs no right */
}

/* ULN_MR_VADDR: the offset is the owner's address, translated in place, with
 * the same bounds on either side of the region and no wrap-around. */
static void vaddr_check(void)
{
    uint64_t base = 0x7f0000001000ull, k = 6ull << ULN_KEY_INDEX_SHIFT | 9;
    struct uln_key_entry e = {
        .addr = base, .len = 100, .access = ULN_ACCESS_REMOTE_READ | ULN_MR_VADDR};
    uint64_t off = base + 10;
    CHECK(uln_key_check(&e, k, k, &off, 90, ULN_ACCESS_REMOTE_READ) == 0 && off == 10);
    off = base + 100;
    CHECK(uln_key_check(&e, k, k, &off, 0, ULN_ACCESS_REMOTE_READ) == 0 && off == 100);
    off = 10; /* an offset is not an address here */
    CHECK(uln_key_check(&e, k, k, &off, 1, ULN_ACCESS_REMOTE_READ) == -ERANGE && off == 10);
    CHECK(kc(&e, k, k, base - 1, 2, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, base + 91, 10, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, base + 1, UINT64_MAX, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, UINT64_MAX, 1, ULN_ACCESS_REMOTE_READ) == -ERANGE);
    CHECK(kc(&e, k, k, base, 1, ULN_ACCESS_REMOTE_WRITE) == -EACCES);
}

struct hold {
    struct uln_ctx *ctx;
    uint64_t key;
    _Atomic int inside; /* 1 once inside the region, -1 if refused */
    _Atomic int left;   /* set just before the holder leaves */
};

static void *hold_region(void *arg)
{
    struct hold *h = arg;
    uint8_t *where;
    struct uln_stats st = {0};
    /* Endpoint index 1's hazard slot: as if a second endpoint were placing data. */
    if (uln_key_enter(h->ctx, 1, h->key, 0, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) == 0) {
        h->inside = 1;
        usleep(200 * 1000);
        memset(where, 0x11, 8);
        atomic_store(&h->left, 1);
        uln_key_leave(h->ctx, 1);
    } else {
        h->inside = -1;
    }
    return NULL;
}

static void with_context(void)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.max_regions = 8;
    struct uln_ctx *ctx;
    int rc = uln_open(&cfg, &ctx);
    CHECK(rc == 0);
    if (rc) return;
    CHECK(uln_size(ctx) == 1 && uln_rank(ctx) == 0 && uln_job_key(ctx) != 0);

    void *mem;
    CHECK(uln_mem_alloc(ctx, 1 << 16, &mem) == 0);
    struct uln_mr *mr[9];
    for (int i = 0; i < 8; i++)
        CHECK(uln_mr_reg(ctx, (uint8_t *)mem + i * 64, 64, ULN_ACCESS_REMOTE_WRITE, &mr[i]) == 0);
    CHECK(uln_mr_reg(ctx, mem, 64, 0, &mr[8]) == -ENOSPC);    /* the limit, enforced */
    CHECK(uln_mr_reg(ctx, mem, 64, 0x80, &mr[8]) == -EINVAL); /* unknown right */
    for (int i = 0; i < 8; i++) {
        uint64_t k = uln_mr_key(mr[i]);
        CHECK((k >> ULN_KEY_INDEX_SHIFT) < 8 && (k & ULN_KEY_MAGIC_MASK) != 0);
        for (int j = 0; j < i; j++)
            CHECK(uln_mr_key(mr[j]) != k);
    }
    CHECK(uln_mem_free(ctx, mem) == -EBUSY); /* regions still point into it */

    /* A deregistered key stays refused, even when its slot is reused. */
    uint64_t old = uln_mr_key(mr[3]);
    CHECK(uln_mr_dereg(mr[3]) == 0);
    uint8_t *where;
    struct uln_stats st = {0};
    CHECK(uln_key_enter(ctx, 0, old, 0, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) == -ENOKEY);
    CHECK(atomic_load(&st.refused_key) == 1);
    CHECK(uln_mr_reg(ctx, (uint8_t *)mem + 3 * 64, 64, ULN_ACCESS_REMOTE_WRITE, &mr[3]) == 0);
    CHECK(uln_mr_key(mr[3]) != old);
    CHECK((uln_mr_key(mr[3]) >> ULN_KEY_INDEX_SHIFT) == (old >> ULN_KEY_INDEX_SHIFT));
    CHECK(uln_key_enter(ctx, 0, old, 0, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) == -ENOKEY);
    CHECK(uln_key_enter(ctx, 0, uln_mr_key(mr[3]), 0, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) ==
          0);
    CHECK(where == (uint8_t *)mem + 3 * 64);
    uln_key_leave(ctx, 0);
    CHECK(uln_key_enter(ctx, 0, uln_mr_key(mr[3]), 60, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) ==
          -ERANGE);
    CHECK(uln_key_enter(ctx, 0, uln_mr_key(mr[3]), 0, 8, ULN_ACCESS_REMOTE_READ, &where, &st) ==
          -EACCES);
    CHECK(uln_key_enter(ctx, 0, 1000ull << ULN_KEY_INDEX_SHIFT | 1, 0, 8, ULN_ACCESS_REMOTE_WRITE,
                        &where, &st) == -ENOKEY); /* index past the table */

    /* Deregistration waits for an access in progress, and nothing enters after. */
    struct hold h = {.ctx = ctx, .key = uln_mr_key(mr[5])};
    pthread_t t;
    pthread_create(&t, NULL, hold_region, &h);
    while (h.inside == 0)
        usleep(1000);
    CHECK(h.inside == 1);
    uint64_t k5 = uln_mr_key(mr[5]);
    CHECK(uln_mr_dereg(mr[5]) == 0);
    CHECK(atomic_load(&h.left) == 1);        /* it really waited for the holder */
    CHECK(((uint8_t *)mem)[5 * 64] == 0x11); /* the holder's write happened before */
    CHECK(uln_key_enter(ctx, 0, k5, 0, 8, ULN_ACCESS_REMOTE_WRITE, &where, &st) == -ENOKEY);
    pthread_join(t, NULL);

    /* Self PUT through an endpoint with a stale key is refused and writes nothing. */
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK(uln_cq_open(ctx, 16, &cq) == 0);
    CHECK(uln_ep_open(ctx, cq, cq, &ep) == 0);
    memset((uint8_t *)mem + 5 * 64, 0x22, 64);
    uint64_t src = 0x9999999999999999ull;
    CHECK(uln_put(ep, 0, &src, 8, k5, 0, 42, 0) == 0);
    struct uln_cqe e;
    int n = 0;
    for (int i = 0; i < 1000000 && n == 0; i++)
        n = uln_cq_poll(cq, &e, 1);
    CHECK(n == 1 && e.status == -ENOKEY && e.user_data == 42 && e.op == ULN_OP_PUT);
    CHECK(((uint8_t *)mem)[5 * 64] == 0x22);
    struct uln_counters c;
    CHECK(uln_counters_get(ctx, &c) == 0 && c.refused_key >= 1);

    CHECK(uln_close(ctx) == 0); /* closes endpoint, CQ memory, regions, memory */
}

int main(void)
{
    pure_check();
    vaddr_check();
    with_context();
    return summary();
}
