/*
 * allgather.c - uln_allgather: every rank's small blob to every rank of the
 * job, the key exchange every program otherwise writes by hand (a NAP to
 * each peer, the receives, the releases, a barrier).
 *
 * Over the caller's endpoint, with the job's own primitives, so it works the
 * same under every bootstrap and transport: one NAP to each peer, tagged
 * with user_data ALLGATHER_TAG so its send completions are told from others;
 * every peer's NAP received and copied out; then a uln_barrier, so no rank
 * leaves (and sends traffic of its own) while a peer still waits for blobs
 * on the same endpoint.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

#define ALLGATHER_TAG 0x756c6e6167617468ull /* "ulngath": this call's own sends */

struct gather {
    struct uln_ep *ep;
    size_t len;
    unsigned char *all;
    int sends_left, recvs_left;
    struct timespec end;
    bool forever;
};

static int ms_left(const struct gather *g)
{
    if (g->forever) return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (g->end.tv_sec - now.tv_sec) * 1000 + (g->end.tv_nsec - now.tv_nsec) / 1000000;
    return ms > 0 ? (int)ms : 0;
}

/* One completion: ours (a send retired, a peer's blob copied out), or not. */
static int take(struct gather *g, struct uln_cq *cq, const struct uln_cqe *e)
{
    if (e->status) {
        if (e->flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(cq, e);
        return e->status;
    }
    if (e->op == ULN_OP_NAP && e->user_data == ALLGATHER_TAG) {
        g->sends_left--;
        return 0;
    }
    if (e->op != ULN_OP_NAP_RECV) return -EBUSY; /* another operation's completion */
    int rc = 0;
    if (e->len != g->len)
        rc = -EPROTO; /* a rank gave another length (or sent a NAP of its own) */
    else
        memcpy(g->all + (size_t)e->peer * g->len, e->data, g->len);
    uln_cqe_release(cq, e);
    if (!rc) g->recvs_left--;
    return rc;
}

/* Take what the endpoint's CQs hold; 1 when something was taken. */
static int drain(struct gather *g)
{
    struct uln_cq *cqs[2] = {g->ep->send_cq, g->ep->recv_cq};
    int took = 0;
    for (int i = 0; i < (cqs[0] == cqs[1] ? 1 : 2); i++) {
        struct uln_cqe e;
        int n;
        while ((n = uln_cq_poll(cqs[i], &e, 1)) == 1) {
            int rc = take(g, cqs[i], &e);
            if (rc) return rc;
            took = 1;
        }
        if (n < 0) return n;
    }
    return took;
}

/* Wait for the next completion on either CQ, within the time left. */
static int await(struct gather *g)
{
    int ms = ms_left(g);
    if (ms == 0) return -ETIMEDOUT;
    /* Sends still to retire: short waits on the send CQ as well, since a
     * wait on the receive CQ alone would sleep through them. */
    struct uln_cq *cq = g->recvs_left ? g->ep->recv_cq : g->ep->send_cq;
    int slice = g->sends_left && g->ep->send_cq != g->ep->recv_cq ? 1 : 100;
    int rc = uln_cq_wait(cq, ms < 0 || ms > slice ? slice : ms);
    return rc == -ETIMEDOUT ? 0 : rc;
}

ULN_EXPORT int uln_allgather(struct uln_ep *ep, const void *mine, size_t len, void *all,
                             int timeout_ms)
{
    if (!ep || !mine || !all || len == 0) return -EINVAL;
    struct uln_ctx *ctx = ep->ctx;
    if (ctx->no_job) return -EOPNOTSUPP;
    int me = uln_rank(ctx), n = uln_size(ctx);
    struct gather g = {.ep = ep,
                       .len = len,
                       .all = all,
                       .sends_left = n - 1,
                       .recvs_left = n - 1,
                       .forever = timeout_ms < 0};
    clock_gettime(CLOCK_MONOTONIC, &g.end);
    if (!g.forever) {
        g.end.tv_sec += timeout_ms / 1000;
        g.end.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (g.end.tv_nsec >= 1000000000) g.end.tv_sec++, g.end.tv_nsec -= 1000000000;
    }
    memmove(g.all + (size_t)me * len, mine, len);
    const void *src = g.all + (size_t)me * len; /* stays put until every send retires */
    int rc = 0;
    /* Peers in the order me+1, me+2, ...: not every rank at rank 0 first. */
    for (int k = 1; k < n && !rc; k++) {
        int peer = (me + k) % n;
        while ((rc = uln_nap(ep, peer, src, len, ALLGATHER_TAG, 0)) == -EAGAIN) {
            rc = drain(&g);
            if (rc == 0) rc = await(&g);
            if (rc < 0) break;
        }
    }
    while (!rc && (g.sends_left || g.recvs_left)) {
        rc = drain(&g);
        if (rc == 0) rc = await(&g);
        if (rc > 0) rc = 0;
    }
    if (rc) return rc;
    /* Nobody leaves before every rank has every blob (see the top). */
    int ms = ms_left(&g);
    if (ms == 0) return -ETIMEDOUT;
    return uln_barrier(ctx, ms);
}
