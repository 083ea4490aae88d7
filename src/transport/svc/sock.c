/*
 * sock.c - the UDP socket of its own the service binds for a process at
 * attach, and its peers' (svc.h; docs/service.md, "A socket of its own").
 *
 * The service bound the socket to its wire address and a port it chose
 * before passing it: the kernel stamps that source on everything we send
 * on it, and we cannot bind it elsewhere. What a datagram claims (a rank)
 * is believed only when its source is the one that rank's service told
 * ours (over the wire, between services) and ours told us: a process that
 * sends from a socket of its own making, or from another rank's port on a
 * host it does not share, is not taken for that rank.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/internal.h"
#include "transport/svc/svc.h"

int uln_svc_sock_check(int fd, uint32_t ip, uint16_t port)
{
    int type = 0;
    socklen_t tl = sizeof type;
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || sl != sizeof sa ||
        sa.sin_family != AF_INET || sa.sin_addr.s_addr != ip || ntohs(sa.sin_port) != port)
        return -EPROTO;
    return 0;
}

/* The table, made at first use (most processes never ask). Under socks_lock. */
static struct uln_svc_peer_sock_at *table(struct uln_ctx *ctx)
{
    struct uln_svc *s = ctx->svc;
    if (!s->peer_socks && ctx->size > 0)
        s->peer_socks = calloc((size_t)ctx->size, sizeof *s->peer_socks);
    return s->peer_socks;
}

int uln_svc_peer_sock(struct uln_ctx *ctx, int rank, bool refresh, struct uln_svc_peer_sock_at *out)
{
    struct uln_svc *s = ctx->svc;
    if (!s || ctx->no_job) return -ENOTCONN;
    if (rank < 0 || rank >= ctx->size || rank == ctx->rank) return -EINVAL;
    pthread_mutex_lock(&s->socks_lock);
    struct uln_svc_peer_sock_at *t = table(ctx);
    int rc = 0;
    if (!t)
        rc = -ENOMEM;
    else if (!t[rank].port && (refresh || !t[rank].asked)) {
        /* Asked of our service, which has it from the rank's service (or
         * has the rank itself): the process's word is never taken. */
        struct uln_svc_peer_sock q = {.rank = (uint32_t)rank}, a;
        uln_svc_hdr_init(&q.h, ULN_SVC_PEER_SOCK, sizeof q, 0);
        rc = uln_svc_request(ctx, &q, sizeof q, NULL, 0, ULN_SVC_PEER_SOCK_OK, &a, sizeof a);
        if (!rc) rc = a.rank == (uint32_t)rank ? a.h.status : -EPROTO;
        if (!rc && (!a.port || !a.count || a.count > ULN_SVC_SOCKS_MAX ||
                    a.port + a.count - 1u > UINT16_MAX))
            rc = -EPROTO;
        if (!rc)
            t[rank] = (struct uln_svc_peer_sock_at){.ip = a.ip, .port = a.port, .count = a.count};
        if (rc == -ENOENT) t[rank].asked = true;
    }
    if (!rc && t && !t[rank].port) rc = -ENOENT;
    if (!rc) *out = t[rank];
    pthread_mutex_unlock(&s->socks_lock);
    return rc;
}

void uln_svc_peer_sock_forget(struct uln_ctx *ctx, int rank)
{
    struct uln_svc *s = ctx->svc;
    if (!s || rank < 0 || rank >= ctx->size) return;
    pthread_mutex_lock(&s->socks_lock);
    if (s->peer_socks) s->peer_socks[rank] = (struct uln_svc_peer_sock_at){0};
    pthread_mutex_unlock(&s->socks_lock);
}

int uln_svc_src_ep(struct uln_ctx *ctx, int rank, const struct sockaddr_in *src)
{
    /* Not known yet: asked again (its service's word may have come since);
     * known: compared, no request (a forger costs no round trip). */
    struct uln_svc_peer_sock_at at;
    unsigned port = ntohs(src->sin_port);
    if (src->sin_family == AF_INET && uln_svc_peer_sock(ctx, rank, true, &at) == 0 &&
        src->sin_addr.s_addr == at.ip && port >= at.port && port < (unsigned)at.port + at.count)
        return (int)(port - at.port);
    if (ctx->svc) atomic_fetch_add_explicit(&ctx->svc->src_refused, 1, memory_order_relaxed);
    return -EPERM;
}
