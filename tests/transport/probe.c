/*
 * probe.c - a transport that exists only in the tests: it reaches no peer
 * and carries nothing, and says what the seam told it (probe.h). It is added
 * as any transport is (transport/transports.h): this file, with its ops,
 * and one line in the registry (built into the tests' library only,
 * ULN_TEST_HOOKS). tests/transport/mem_hooks.c drives the memory hooks with
 * it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"
#include "transport/transports.h"
#include "probe.h"

/* Tests drive it from one thread; the library calls it under the context
 * lock. */
static bool armed;
static int refuse_rc;
static struct uln_probe_log plog;

void uln_probe_arm(bool on)
{
    armed = on;
}

void uln_probe_refuse_next(int rc)
{
    refuse_rc = rc;
}

const struct uln_probe_log *uln_probe_log(void)
{
    return &plog;
}

struct probe_ctx {
    unsigned regions; /* taken and not given back */
};

/* Unarmed it keeps no state: then it is not open, and nothing calls it but
 * choose, reaches and close. */
static int probe_open(struct uln_ctx *ctx, void *slot, size_t slot_len)
{
    (void)slot, (void)slot_len;
    if (!armed) return 0;
    if (!(ctx->tp_ctx[ULN_TPID_PROBE] = calloc(1, sizeof(struct probe_ctx)))) return -ENOMEM;
    plog.opens++;
    return 0;
}

static int probe_choose(struct uln_ctx *ctx)
{
    (void)ctx;
    return 0;
}

static void probe_close(struct uln_ctx *ctx)
{
    struct probe_ctx *p = ctx->tp_ctx[ULN_TPID_PROBE];
    if (!p) return;
    plog.closes++;
    plog.regions_at_close += p->regions;
    free(p);
    ctx->tp_ctx[ULN_TPID_PROBE] = NULL;
}

static int probe_reaches(const struct uln_ctx *ctx, int peer)
{
    (void)ctx, (void)peer;
    return 0;
}

static bool key_live(const struct uln_ctx *ctx, const struct uln_tp_region *r)
{
    return atomic_load(&ctx->keys[r->index].key) == r->key;
}

static int probe_mem_reg(struct uln_ctx *ctx, const struct uln_tp_region *r, void **state)
{
    struct probe_ctx *p = ctx->tp_ctx[ULN_TPID_PROBE];
    plog.live_at_reg += key_live(ctx, r);
    if (refuse_rc) {
        int rc = refuse_rc;
        refuse_rc = 0;
        return rc;
    }
    plog.regs++;
    plog.last_reg = *r;
    p->regions++;
    /* A state of its own per region, to be handed back. */
    uint64_t *s = malloc(sizeof *s);
    if (!s) return -ENOMEM;
    *s = r->key;
    *state = s;
    return 0;
}

static void probe_mem_dereg(struct uln_ctx *ctx, const struct uln_tp_region *r, void *state)
{
    struct probe_ctx *p = ctx->tp_ctx[ULN_TPID_PROBE];
    plog.live_at_dereg += key_live(ctx, r);
    plog.state_mismatch += !state || *(uint64_t *)state != r->key;
    plog.deregs++;
    plog.last_dereg = *r;
    p->regions--;
    free(state);
}

const struct uln_transport_ops uln_tp_probe = {
    .name = "probe",
    .caps = ULN_TP_CAP_TARGET_CPU,
    .id = ULN_TPID_PROBE,
    .open = probe_open,
    .choose = probe_choose,
    .close = probe_close,
    .reaches = probe_reaches,
    .mem_reg = probe_mem_reg,
    .mem_dereg = probe_mem_dereg,
};
