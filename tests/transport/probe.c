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
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"
#include "transport/transports.h"
#include "probe.h"

/* Tests drive it from one thread; the library calls it under the context
 * lock. */
static bool armed;
static unsigned part_len;
static int refuse_rc;
static struct uln_probe_log plog;

void uln_probe_arm(bool on)
{
    armed = on;
}

void uln_probe_addr_part(unsigned len)
{
    part_len = len;
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
    unsigned regions;  /* taken and not given back */
    unsigned part_len; /* its part of uln_addr */
};

/* Unarmed it keeps no state: then it is not open, and nothing calls it but
 * choose, reaches and close. */
static int probe_open(struct uln_ctx *ctx, void *slot, size_t slot_len)
{
    (void)slot, (void)slot_len;
    if (!armed) return 0;
    struct probe_ctx *p = calloc(1, sizeof *p);
    if (!(ctx->tp_ctx[ULN_TPID_PROBE] = p)) return -ENOMEM;
    p->part_len = part_len;
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
    return 0; /* nobody */
}

/* uln_addr's part: part_len bytes of a pattern, which unpack checks. */
static uint8_t part_byte(size_t i)
{
    return (uint8_t)(i * 13u + 7u);
}

static size_t probe_addr_pack(const struct uln_ctx *ctx, uint8_t *out, size_t room)
{
    const struct probe_ctx *p = ctx->tp_ctx[ULN_TPID_PROBE];
    if (!p || !p->part_len || room < p->part_len) return 0;
    for (size_t i = 0; i < p->part_len; i++)
        out[i] = part_byte(i);
    return p->part_len;
}

static int probe_addr_unpack(const uint8_t *in, size_t len, uint64_t host, void *slot,
                             size_t slot_len)
{
    (void)host, (void)slot, (void)slot_len;
    for (size_t i = 0; i < len; i++)
        if (in[i] != part_byte(i)) return -EADDRNOTAVAIL;
    return 0;
}

static int probe_addr_str(const uint8_t *in, size_t len, char *out, size_t room)
{
    (void)in;
    return snprintf(out, room, "%zu B", len);
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
    .addr_pack = probe_addr_pack,
    .addr_unpack = probe_addr_unpack,
    .addr_str = probe_addr_str,
    .close = probe_close,
    .reaches = probe_reaches,
    .mem_reg = probe_mem_reg,
    .mem_dereg = probe_mem_dereg,
};
