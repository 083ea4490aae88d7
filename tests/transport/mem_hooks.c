/*
 * mem_hooks.c - the seam's memory hooks (core/transport.h: mem_reg,
 * mem_dereg) through the tests' own transport (probe.c): every region
 * registered is told to the transports open in the context before its key
 * is live, with its address, length, rights, key and the uln_mem_alloc
 * block it lies in; every region's end after its key is gone, with the
 * transport's own state back; a refusal fails uln_mr_reg with the
 * transport's error and leaves nothing behind (no key live, no table entry
 * taken); uln_close ends the regions left. A context opened while the probe
 * is not armed has it closed: its hooks are never called.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "probe.h"

static struct uln_ctx *open_ctx(uint32_t max_regions)
{
    struct uln_config c;
    uln_config_init(&c);
    c.boot = ULN_BOOT_NONE;
    c.max_regions = max_regions;
    struct uln_ctx *ctx = NULL;
    CHECK_EQ(uln_open(&c, &ctx), 0);
    return ctx;
}

/* Is any entry of ctx's key table live with key? */
static bool key_anywhere(const struct uln_ctx *ctx, uint64_t key)
{
    for (uint32_t i = 0; i < ctx->p.max_regions; i++)
        if (atomic_load(&ctx->keys[i].key) == key) return true;
    return false;
}

static void test_told(void)
{
    const struct uln_probe_log *l = uln_probe_log();
    uln_probe_arm(true);
    struct uln_ctx *ctx = open_ctx(2);
    uln_probe_arm(false);
    if (!ctx) return;
    CHECK_EQ(l->opens, 1);

    /* Plain memory. */
    static char plain[4096];
    struct uln_mr *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_EQ(uln_mr_reg(ctx, plain + 8, 100, ULN_ACCESS_REMOTE_READ, &a), 0);
    CHECK_EQ(l->regs, 1);
    CHECK(l->last_reg.addr == plain + 8 && l->last_reg.len == 100);
    CHECK_EQ(l->last_reg.access, ULN_ACCESS_REMOTE_READ);
    CHECK_EQ(l->last_reg.key, uln_mr_key(a));
    CHECK_EQ(l->last_reg.index, uln_mr_key(a) >> ULN_KEY_INDEX_SHIFT);
    CHECK_EQ(l->last_reg.memfd, -1);

    /* A refusal: uln_mr_reg fails with it; its key is never live, and the
     * table entry it had is free again (the table holds two: the next two
     * registrations take the entry left and that one). */
    uln_probe_refuse_next(-EMFILE);
    CHECK_EQ(uln_mr_reg(ctx, plain, 10, ULN_ACCESS_REMOTE_WRITE, &c), -EMFILE);
    CHECK(c == NULL);
    CHECK_EQ(l->regs, 1);

    /* uln_mem_alloc memory: its block, and where in it. */
    void *mem = NULL;
    CHECK_EQ(uln_mem_alloc(ctx, 3 * 4096, &mem), 0);
    CHECK_EQ(uln_mr_reg(ctx, (char *)mem + 4096, 8192,
                        ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC, &b),
             0);
    CHECK_EQ(l->regs, 2);
    CHECK(l->last_reg.memfd >= 0);
    CHECK_EQ(l->last_reg.memfd_off, 4096);
    CHECK_EQ(l->last_reg.memfd_len, 3 * 4096);
    CHECK_EQ(uln_mr_reg(ctx, plain, 1, ULN_ACCESS_REMOTE_READ, &d), -ENOSPC); /* full */

    /* The end of one: its key gone first, the transport's state back. */
    uint64_t ka = uln_mr_key(a);
    CHECK_EQ(uln_mr_dereg(a), 0);
    CHECK_EQ(l->deregs, 1);
    CHECK_EQ(l->last_dereg.key, ka);
    CHECK(l->last_dereg.addr == plain + 8 && l->last_dereg.len == 100);
    CHECK(!key_anywhere(ctx, ka));
    CHECK_EQ(uln_mr_reg(ctx, plain, 1, ULN_ACCESS_REMOTE_READ, &d), 0);
    CHECK_EQ(l->regs, 3);

    /* What the hooks saw: never a live key at mem_reg or mem_dereg. */
    CHECK_EQ(l->live_at_reg, 0);
    CHECK_EQ(l->live_at_dereg, 0);
    CHECK_EQ(l->state_mismatch, 0);

    /* uln_close: the regions left end before the transport closes. */
    CHECK_EQ(uln_close(ctx), 0);
    CHECK_EQ(l->deregs, 3);
    CHECK_EQ(l->closes, 1);
    CHECK_EQ(l->regions_at_close, 0);
    CHECK_EQ(l->state_mismatch, 0);
}

/* Refused again and again in a table of one entry: the entry stays free
 * (no key live in it) and the next registration takes it. */
static void test_refused_leaves_nothing(void)
{
    const struct uln_probe_log *l = uln_probe_log();
    uln_probe_arm(true);
    struct uln_ctx *ctx = open_ctx(1);
    uln_probe_arm(false);
    if (!ctx) return;
    static char buf[64];
    struct uln_mr *m = NULL;
    unsigned regs = l->regs;
    for (int i = 0; i < 100; i++) {
        uln_probe_refuse_next(-EIO);
        CHECK_EQ(uln_mr_reg(ctx, buf, sizeof buf, ULN_ACCESS_REMOTE_READ, &m), -EIO);
        CHECK(!atomic_load(&ctx->keys[0].key));
    }
    CHECK_EQ(l->regs, regs);
    CHECK_EQ(uln_mr_reg(ctx, buf, sizeof buf, ULN_ACCESS_REMOTE_READ, &m), 0); /* the one entry */
    CHECK(key_anywhere(ctx, uln_mr_key(m)));
    CHECK_EQ(uln_close(ctx), 0);
    CHECK_EQ(l->regions_at_close, 0);
}

/* Not armed: the probe is not open in the context, and no hook runs. */
static void test_closed_transport_untold(void)
{
    const struct uln_probe_log *l = uln_probe_log();
    unsigned regs = l->regs, deregs = l->deregs, opens = l->opens;
    struct uln_ctx *ctx = open_ctx(4);
    if (!ctx) return;
    static char buf[64];
    struct uln_mr *m = NULL;
    uln_probe_refuse_next(-EIO); /* would refuse, were it asked */
    CHECK_EQ(uln_mr_reg(ctx, buf, sizeof buf, ULN_ACCESS_REMOTE_READ, &m), 0);
    CHECK_EQ(uln_mr_dereg(m), 0);
    CHECK_EQ(uln_close(ctx), 0);
    uln_probe_refuse_next(0);
    CHECK_EQ(l->regs, regs);
    CHECK_EQ(l->deregs, deregs);
    CHECK_EQ(l->opens, opens);
}

int main(void)
{
    test_told();
    test_refused_leaves_nothing();
    test_closed_transport_untold();
    return summary();
}
