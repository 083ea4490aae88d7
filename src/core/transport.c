/*
 * transport.c - the context's transports (transport.h): opened together,
 * and each peer given the one that reaches it best, once, here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

size_t uln_tp_slot_off(unsigned id)
{
    size_t off = 0;
    for (unsigned i = 0; i < id && uln_transports[i]; i++)
        off += (uln_transports[i]->slot_bytes + 7u) & ~(size_t)7u;
    return off;
}

int uln_transports_open(struct uln_ctx *ctx, void *slot, size_t slot_len)
{
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        size_t off = uln_tp_slot_off(id);
        if (t->slot_bytes && off + t->slot_bytes > slot_len) { /* the board slot is too small: a build error */
            fprintf(stderr, "ulnet: the board slot has no room for %s's part\n", t->name);
            return -EINVAL;
        }
        int rc = t->open(ctx, (uint8_t *)slot + off, t->slot_bytes);
        if (rc) return rc;
    }
    return 0;
}

/* uln_query's transport string: the transports that carry some other rank,
 * in the order they are built in ("shm", "udp", "shm+udp"); a job of one
 * names its own. */
static void name_transports(struct uln_ctx *ctx)
{
    char *o = ctx->tp_names;
    size_t room = sizeof ctx->tp_names;
    ctx->tp_names[0] = 0;
    for (unsigned id = 0; uln_transports[id]; id++) {
        bool used = false;
        for (int p = 0; p < ctx->size && !used; p++)
            used = p != ctx->rank && ctx->peer_tp[p] && ctx->peer_tp[p] == uln_transports[id];
        if (!used) continue;
        int n = snprintf(o, room, "%s%s", o == ctx->tp_names ? "" : "+", uln_transports[id]->name);
        if (n < 0 || (size_t)n >= room) break;
        o += n;
        room -= (size_t)n;
    }
    if (!ctx->tp_names[0])
        snprintf(ctx->tp_names, sizeof ctx->tp_names, "%s", ctx->peer_tp[ctx->rank]->name);
}

/* The cheapest transport that reaches p, or the one ULN_TRANSPORT names
 * where it does: each says its own cost (transport.h: reaches). */
int uln_transports_learn(struct uln_ctx *ctx, int p)
{
    int best = 0;
    ctx->peer_tp[p] = NULL;
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        int rc = t->learn ? t->learn(ctx, p) : 0;
        if (rc) return rc;
        int cost = t->reaches(ctx, p);
        if (cost <= 0) continue;
        bool named = uln_tp_named(ctx, t);
        if (!best || named || (cost < best && !uln_tp_named(ctx, ctx->peer_tp[p]))) {
            best = cost;
            ctx->peer_tp[p] = t;
        }
    }
    return best ? 0 : -EHOSTUNREACH;
}

int uln_transports_choose(struct uln_ctx *ctx)
{
    for (unsigned id = 0; uln_transports[id]; id++) {
        int rc = uln_transports[id]->choose(ctx);
        if (rc) return rc;
    }
    ctx->peer_tp = calloc((size_t)ctx->size, sizeof *ctx->peer_tp);
    if (!ctx->peer_tp) return -ENOMEM;
    /* With no job only our own slot is on the board yet (uln_peer_insert
     * fills the others). */
    for (int p = 0; p < (ctx->no_job ? 1 : ctx->size); p++) {
        int rc = uln_transports_learn(ctx, p);
        if (rc == -EHOSTUNREACH)
            fprintf(stderr, "ulnet: rank %d: no transport reaches rank %d\n", ctx->rank, p);
        if (rc) return rc;
    }
    name_transports(ctx);
    return 0;
}

void uln_transports_close(struct uln_ctx *ctx)
{
    for (unsigned id = 0; uln_transports[id]; id++)
        uln_transports[id]->close(ctx);
    free(ctx->peer_tp);
    ctx->peer_tp = NULL;
}
