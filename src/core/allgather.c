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

/* What a completion on ep's CQs is to this call. */
enum kind { NOT_OURS, OUR_SEND, OUR_BLOB, OTHER_LEN };

static enum kind kind_of(const struct gather *g, const struct uln_cqe *e)
{
    if (e->ep != g->ep->index) return NOT_OURS; /* another endpoint's, on a shared CQ */
    if (e->op == ULN_OP_NAP && e->user_data == ALLGATHER_TAG) return OUR_SEND;
    if (e->op != ULN_OP_NAP_RECV || e->status) return NOT_OURS;
    /* A received NAP carries no tag: one of the blob's length is taken as a
     * peer's blob (the contract: no other traffic during the call). */
    return e->len == g->len ? OUR_BLOB : OTHER_LEN;
}

/* The CQs' sides of the refusal at entry: every entry waiting must be a
 * peer's blob of this call, already received (a peer that entered first
 * sent it, and a progress pass of ours - in the barrier ending the last
 * call, say - made its completion). Anything else fails the call before it
 * sends or takes anything: -EBUSY, and the completions stay to be polled. */
static int cqs_clear(const struct gather *g, struct uln_cq *const cqs[2], int n_cqs)
{
    for (int i = 0; i < n_cqs; i++) {
        struct uln_cqe e;
        int rc;
        for (uint64_t k = 0; (rc = uln_cq_peek(cqs[i], k, &e)) == 1; k++)
            if (kind_of(g, &e) != OUR_BLOB) return -EBUSY;
        if (rc < 0) return rc;
    }
    return 0;
}

/* Refuse (-EBUSY) an endpoint with operations outstanding - their
 * completions would come during the call - or with completions waiting
 * that are not this call's. Nothing is sent or taken first, so a refusal
 * loses nothing. */
static int admit(const struct gather *g, struct uln_cq *const cqs[2], int n_cqs)
{
    struct uln_ctx *ctx = g->ep->ctx;
    int rc = uln_api_enter(ctx);
    if (rc) return rc;
    /* Under the lock: the progress thread (ULN_PROGRESS=thread) retires
     * entries too. */
    rc = g->ep->closed ? -EBADF : uln_ep_outstanding(g->ep) ? -EBUSY : 0;
    uln_api_unlock(ctx);
    if (rc) return rc;
    return cqs_clear(g, cqs, n_cqs);
}

/* Take the next completion of cq, known to be ours (a send retired, a
 * peer's blob copied out). */
static int take(struct gather *g, struct uln_cq *cq, enum kind kind)
{
    struct uln_cqe e;
    int n = uln_cq_poll(cq, &e, 1); /* the entry uln_cq_peek showed: only we take */
    if (n != 1) return n < 0 ? n : -EIO;
    if (kind == OUR_SEND) {
        if (e.flags & ULN_CQE_MUST_RELEASE) uln_cqe_release(cq, &e);
        if (e.status) return e.status;
        g->sends_left--;
        return 0;
    }
    memcpy(g->all + (size_t)e.peer * g->len, e.data, g->len);
    uln_cqe_release(cq, &e);
    g->recvs_left--;
    return 0;
}

/* Take what the endpoint's CQs hold of ours, after a progress pass; 1 when
 * something was taken. A completion not ours stops the call where it
 * stands (-EBUSY; -EPROTO for a NAP of another length: a rank gave another
 * len) and stays in its CQ: nothing taken that is not ours. */
static int drain(struct gather *g)
{
    struct uln_cq *cqs[2] = {g->ep->send_cq, g->ep->recv_cq};
    int took = 0;
    for (int i = 0; i < (cqs[0] == cqs[1] ? 1 : 2); i++) {
        int n = uln_cq_poll(cqs[i], NULL, 0); /* max 0: a progress pass alone */
        if (n < 0) return n;
        struct uln_cqe e;
        while ((n = uln_cq_peek(cqs[i], 0, &e)) == 1) {
            enum kind kind = kind_of(g, &e);
            if (kind == NOT_OURS) return -EBUSY;
            if (kind == OTHER_LEN) return -EPROTO;
            int rc = take(g, cqs[i], kind);
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
    struct uln_cq *cqs[2] = {ep->send_cq, ep->recv_cq};
    int rc = admit(&g, cqs, cqs[0] == cqs[1] ? 1 : 2);
    if (rc) return rc;
    memmove(g.all + (size_t)me * len, mine, len);
    const void *src = g.all + (size_t)me * len; /* stays put until every send retires */
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
