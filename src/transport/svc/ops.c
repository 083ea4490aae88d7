/*
 * ops.c - the svc transport's ops (core/transport.h) and its context part.
 *
 * It carries a peer when this process and the peer are both attached to a
 * service: with ULN_TRANSPORT=svc every other rank (one host is enough to
 * run every path through the service), otherwise none yet - peers on other
 * hosts come with the wire between services (docs/service.md, "next").
 * Capabilities: none of the bits. PUT, GET and atomics take the ring path
 * through the queue; the target's service places, serves and applies them
 * in the target's stead (its engine only for atomics on memory not from
 * uln_mem_alloc), told of our uln_mem_alloc regions at registration (mem.c).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "seal/seal.h"
#include "seal/settings.h"
#include "transport/svc/priv.h"

static int uln_svc_open(struct uln_ctx *ctx, void *slot, size_t slot_len)
{
    struct svc_addr a = {0};
    if (ctx->svc)
        a = (struct svc_addr){.host = ctx->svc->host_id,
                              .client = ctx->svc->client,
                              .wire_ip = ctx->svc->wire_ip,
                              .wire_port = ctx->svc->wire_port};
    if (slot_len < sizeof a) return -EINVAL;
    memcpy(slot, &a, sizeof a);
    /* Kept state: the attachment. So mr.c tells us of regions (mem.c). */
    ctx->tp_ctx[ULN_TPID_SVC] = ctx->svc;
    return 0;
}

static int uln_svc_choose(struct uln_ctx *ctx)
{
    (void)ctx;
    return 0;
}

static void uln_svc_close(struct uln_ctx *ctx)
{
    ctx->tp_ctx[ULN_TPID_SVC] =
        NULL; /* the attachment is the context's (attach.c), closed after us */
}

static const struct svc_addr *peer_addr(const struct uln_ctx *ctx, int peer)
{
    int32_t pid;
    return uln_tp_part(uln_boot_peer(&ctx->boot, peer, &pid), ULN_TPID_SVC);
}

/* Is peer on another host, reached over the services' wire? */
static bool over_wire(const struct uln_ctx *ctx, int peer)
{
    const struct svc_addr *a = peer_addr(ctx, peer);
    return a && a->host && a->host != ctx->svc->host_id && a->wire_port && ctx->svc->wire_port;
}

/* ULN_SECURE is the user's word that their traffic crosses the network
 * sealed at least so strongly: a service whose wire seals less (off, or auth
 * against encrypt) must not carry their peers on other hosts, or it would
 * go in clear - the one thing that must never happen silently (issue 33).
 * Peers on this host never touch the wire: the service writes into their
 * mapped rings, which the kernel isolates as it does shm's. */
static bool wire_too_weak(const struct uln_ctx *ctx)
{
    return ctx->svc && uln_seal_params(&ctx->p)->mode > (int)ctx->svc->secure;
}

/* With ULN_TRANSPORT=svc, where every peer must go through the service, a
 * peer it may not carry for that reason fails uln_open (or
 * uln_peer_insert) with the reason, naming both settings; under
 * ULN_TRANSPORT=auto reaches() leaves such a peer to udp, which seals its
 * datagrams itself. */
static int uln_svc_learn(struct uln_ctx *ctx, int peer)
{
    if (!uln_tp_named(ctx, &uln_tp_svc) || !wire_too_weak(ctx) || uln_peer_is_self(ctx, peer) ||
        !over_wire(ctx, peer))
        return 0;
    const char *want = uln_seal_mode_name((enum uln_seal_mode)uln_seal_params(&ctx->p)->mode);
    fprintf(stderr,
            "ulnet: rank %d: ULN_TRANSPORT=svc with ULN_SECURE=%s: the host's ulnetd seals its "
            "wire to other hosts only '%s', so the traffic to rank %d would cross the network "
            "less protected than asked: start the services with ulnetd --secure %s, or let "
            "ULN_TRANSPORT choose (udp seals its datagrams itself)\n",
            ctx->rank, want, uln_seal_mode_name((enum uln_seal_mode)ctx->svc->secure), peer, want);
    return -EPROTO;
}

/* Only when ULN_TRANSPORT=svc names it, for now. On this host shm is
 * direct (the service's hop costs a second store and a wake-up); on another
 * host, where both services have a wire, the service is meant to be the
 * host's engine (one reliable stream per host pair, one-sided operations
 * without the target's CPU), but today every message through it wakes two
 * services (docs/service.md: NAP 8 B 104-385 us against udp's 7-9 us), so a
 * job that merely finds a service running keeps its direct paths until the
 * service is faster than they are. */
static int uln_svc_reaches(const struct uln_ctx *ctx, int peer)
{
    if (!ctx->svc || uln_peer_is_self(ctx, peer) || !uln_tp_named(ctx, &uln_tp_svc)) return 0;
    const struct svc_addr *a = peer_addr(ctx, peer);
    if (!a || !a->host) return 0;
    if (a->host == ctx->svc->host_id)
        return uln_svc_params(&ctx->p)->local_shm ? 0 : 2 * ULN_TP_COST_MEMORY;
    return over_wire(ctx, peer) && !wire_too_weak(ctx) ? ULN_TP_COST_NETWORK - ULN_TP_COST_MEMORY
                                                       : 0;
}

/* Its facts (uln_query_key "svc.*"): attached or not, the one line saying
 * so (or why not), and the peers it carries. */
static int uln_svc_info(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen, char *val,
                        size_t vlen)
{
    int peers = 0, n;
    for (int p = 0; ctx->peer_tp && p < ctx->size; p++)
        peers += ctx->peer_tp[p] == &uln_tp_svc;
    switch (i) {
    case 0:
        snprintf(key, klen, "attached");
        n = snprintf(val, vlen, "%d", ctx->svc != NULL);
        break;
    case 1:
        snprintf(key, klen, "service");
        n = snprintf(val, vlen, "%s", ctx->svc_why);
        break;
    case 2:
        snprintf(key, klen, "peers");
        n = snprintf(val, vlen, "%d", peers);
        break;
    case 3: /* how its wire is sealed, and whether that is enough for us */
        snprintf(key, klen, "wire_sealed");
        n = !ctx->svc ? snprintf(val, vlen, "-")
            : !wire_too_weak(ctx)
                ? snprintf(val, vlen, "%s",
                           uln_seal_mode_name((enum uln_seal_mode)ctx->svc->secure))
                : snprintf(val, vlen,
                           "%s, less than ULN_SECURE=%s: peers on other hosts not through it",
                           uln_seal_mode_name((enum uln_seal_mode)ctx->svc->secure),
                           uln_seal_mode_name((enum uln_seal_mode)uln_seal_params(&ctx->p)->mode));
        break;
    case 4: /* the UDP sockets of its own the service bound for it: endpoint 0's port */
        snprintf(key, klen, "sock_port");
        n = snprintf(val, vlen, "%u", ctx->svc ? ctx->svc->sock_port : 0);
        break;
    case 5: /* datagrams on it whose source is not the rank they claim */
        snprintf(key, klen, "src_refused");
        n = snprintf(val, vlen, "%llu",
                     ctx->svc ? (unsigned long long)atomic_load_explicit(&ctx->svc->src_refused,
                                                                         memory_order_relaxed)
                              : 0ull);
        break;
    default:
        return -ENOENT;
    }
    return n < 0 ? -EINVAL : 0;
}

static struct svc_ep *svc_ep(const struct uln_ep *ep)
{
    return ep->tp_ep[ULN_TPID_SVC];
}

static bool peer_gone(const struct svc_ep *q, int peer)
{
    return peer < (int)(ULN_SVC_GONE_WORDS * 64) &&
           (atomic_load_explicit(&q->qhdr->gone[peer / 64], memory_order_acquire) >> (peer % 64) &
            1);
}

static int uln_svc_connect(struct uln_ep *ep, int peer)
{
    struct svc_ep *q = svc_ep(ep);
    if (!q) return -EHOSTUNREACH;
    if (uln_svc_lost(ep->ctx) || peer_gone(q, peer)) return -ECONNRESET;
    /* On another host: tell our service where that peer's service is. */
    const struct svc_addr *a = peer_addr(ep->ctx, peer);
    if (!a || a->host == ep->ctx->svc->host_id) return 0;
    struct uln_svc_route m = {.rank = (uint32_t)peer, .ip = a->wire_ip, .port = a->wire_port};
    if (ep->ctx->no_job) { /* inserted by address: the peer is its service's client */
        const struct uln_peer_rec *r = &ep->ctx->peer_recs[peer];
        if (!a->client || r->ep < 0) return -EHOSTUNREACH;
        m.client = a->client;
        m.key = r->key;
        m.ep = (uint32_t)r->ep;
    }
    uln_svc_hdr_init(&m.h, ULN_SVC_ROUTE, sizeof m, 0);
    struct uln_svc_hdr ok;
    return uln_svc_request(ep->ctx, &m, sizeof m, NULL, 0, ULN_SVC_ROUTE_OK, &ok, sizeof ok);
}

/* Its process ended (the service said so), or the service itself did. */
static bool uln_svc_peer_dead(struct uln_ctx *ctx, struct uln_ep *ep, int peer)
{
    if (uln_svc_lost(ctx)) return true;
    struct svc_ep *q = ep ? svc_ep(ep) : NULL;
    return q && peer_gone(q, peer);
}

/* Fewer CPUs than busy processes (issue 32 item 7): a polling process
 * must not hold the CPU its service needs. While the service has not taken
 * what we posted, every pass gives the CPU up (sched_yield), so a service
 * woken on our CPU runs now, not at the end of our time slice (ms). Where
 * the service has a CPU of its own this is rare (it takes a message within
 * a microsecond). Not on every pass, nor every few us of polling: on a
 * machine with other work a yield hands the CPU to that work, and
 * bench/svc measured NAP rate 0.06-0.16 Mmsg/s with a yield every 20 us
 * against 0.6-1.1 without. The relaxed load is a hint; the ring's own
 * ordering is has_room's. */
static void yield_to_service(struct uln_ep *ep, struct svc_ep *q)
{
    if (q->tx.tail == atomic_load_explicit(&q->tx.ctrl->head, memory_order_relaxed)) {
        /* Nothing of ours waits in the queue, but the service is awake: it
         * is working (it sleeps as soon as it has nothing to do), maybe for
         * us - placing a stream's data, serving a GET of our memory - and
         * maybe waiting for this very CPU, which a polling rank would keep
         * for its whole slice. Give it up; on a quiet pass only (one in
         * ULN_QUIET_PASSES), so a rank with work of its own rarely yields. */
        if (atomic_load_explicit(&q->qhdr->svc_sleeping, memory_order_relaxed)) return;
        sched_yield();
        return;
    }
    uln_tp_busy(ep, &uln_tp_svc); /* look again next pass, not 64 passes later */
    sched_yield();
}

/* One load per call (and a call on one pass in 64: we stay quiet): when
 * the service marked peers gone, their operations end now, not when the
 * endpoint has stalled long enough to look (check_peers). */
static void uln_svc_progress_rx(struct uln_ep *ep)
{
    struct svc_ep *q = svc_ep(ep);
    uln_tp_quiet(ep, &uln_tp_svc);
    if (q->carried) yield_to_service(ep, q);
    /* Acquire: pairs with the service's bump after the bits (proto.h). */
    uint32_t g = atomic_load_explicit(&q->qhdr->gone_gen, memory_order_acquire);
    if (ULN_LIKELY(g == q->gone_seen)) return;
    q->gone_seen = g;
    for (int p = 0; p < ep->ctx->size; p++) {
        uint64_t bit = 1ull << (p % 64);
        if (ep->ctx->peer_tp[p] != &uln_tp_svc || !peer_gone(q, p) || (q->gone_known[p / 64] & bit))
            continue;
        q->gone_known[p / 64] |= bit;
        ULN_COUNT(&ep->stats, peers_dead, 1);
        ep->peers[p].out_ready = false; /* later posts fail at connect */
        uln_svc_peer_sock_forget(ep->ctx, p);
        uln_engine_fail_peer(ep, p, -ECONNRESET);
    }
}

/* The service found one of our rings full and waits for room: wake it. */
static void uln_svc_room(struct uln_ep *ep, int peer)
{
    (void)peer;
    struct svc_ep *q = svc_ep(ep);
    uint64_t one = 1;
    if (q) (void)!write(q->bell, &one, sizeof one);
}

static void uln_svc_progress_tx(struct uln_ep *ep)
{
    (void)ep;
}

static bool uln_svc_busy(const struct uln_ep *ep)
{
    (void)ep;
    return false;
}

/* A sleeper also wakes when the service hangs up (it died): its next
 * passes find the peers dead (peer_dead) instead of sleeping on. */
static int uln_svc_wait_fds(struct uln_ep *ep, int *fds, int max, int *timeout_ms)
{
    (void)timeout_ms;
    if (max < 1 || !ep->ctx->svc) return 0;
    fds[0] = ep->ctx->svc->fd;
    return 1;
}

/* uln_addr's part (peer.c), when attached: the id our service gave us
 * and where other hosts' services reach it, so that a peer that inserts
 * our address reaches us through its service and ours (docs/service.md,
 * "By address"), when ULN_TRANSPORT names the service. The service's host id is the address's own
 * (the service runs in our namespace: uln_host_id is the same), so it is not repeated. */
#define SVC_PART_BYTES 10u /* u32 client, u32 IPv4 (network order), u16 port */

static size_t uln_svc_addr_pack(const struct uln_ctx *ctx, uint8_t *out, size_t room)
{
    const struct uln_svc *s = ctx->svc;
    /* Only where the service may carry our peers (uln_svc_reaches: when
     * ULN_TRANSPORT names it): elsewhere the part would cost the short
     * form (peer.c) for nothing. */
    if (!s || !ctx->no_job || !uln_tp_named(ctx, &uln_tp_svc) || room < SVC_PART_BYTES) return 0;
    memcpy(out, &s->client, 4);
    memcpy(out + 4, &s->wire_ip, 4);
    memcpy(out + 8, &s->wire_port, 2);
    return SVC_PART_BYTES;
}

static int uln_svc_addr_unpack(const uint8_t *in, size_t len, uint64_t host, void *slot,
                               size_t slot_len)
{
    struct svc_addr a = {.host = host};
    if (len != SVC_PART_BYTES || slot_len < sizeof a || !host) return -EADDRNOTAVAIL;
    memcpy(&a.client, in, 4);
    memcpy(&a.wire_ip, in + 4, 4);
    memcpy(&a.wire_port, in + 8, 2);
    if (!a.client) return -EADDRNOTAVAIL;
    memcpy(slot, &a, sizeof a);
    return 0;
}

static int uln_svc_addr_str(const uint8_t *in, size_t len, char *out, size_t room)
{
    uint32_t client, ip;
    uint16_t port;
    (void)len;
    memcpy(&client, in, 4);
    memcpy(&ip, in + 4, 4);
    memcpy(&port, in + 8, 2);
    const uint8_t *b = (const uint8_t *)&ip;
    return snprintf(out, room, "client %u at %u.%u.%u.%u:%u", client, b[0], b[1], b[2], b[3], port);
}

/* Never directly: every PUT and GET takes the ring path through the queue. */
static int uln_svc_direct(struct uln_ep *ep, int peer, bool write, const struct iovec *local,
                          int nlocal, uint64_t len, uint64_t span, uint64_t rkey, uint64_t roff)
{
    (void)ep, (void)peer, (void)write, (void)local, (void)nlocal, (void)len, (void)span;
    (void)rkey, (void)roff;
    return ULN_NO_DIRECT;
}

static uint32_t uln_svc_frag_max(struct uln_ep *ep, int peer)
{
    (void)peer;
    return ep->ctx->p.frag_max;
}

const struct uln_transport_ops uln_tp_svc = {
    .name = "svc",
    .caps = 0,
    .get_placed = true, /* its service writes GET data into our buffer */
    .slot_bytes = sizeof(struct svc_addr),
    .id = ULN_TPID_SVC,
    .settings = &uln_svc_settings,
    .open = uln_svc_open,
    .choose = uln_svc_choose,
    .learn = uln_svc_learn,
    .close = uln_svc_close,
    .reaches = uln_svc_reaches,
    .addr_pack = uln_svc_addr_pack,
    .addr_unpack = uln_svc_addr_unpack,
    .addr_str = uln_svc_addr_str,
    .info = uln_svc_info,
    .ep_open = uln_svc_ep_open,
    .ep_close = uln_svc_ep_close,
    .connect = uln_svc_connect,
    .reserve = uln_svc_reserve,
    .commit = uln_svc_commit,
    .send_nap = uln_svc_nap,
    .direct = uln_svc_direct,
    .room = uln_svc_room,
    .kick = uln_svc_kick,
    .peer_dead = uln_svc_peer_dead,
    .mem_reg = uln_svc_mem_reg,
    .mem_dereg = uln_svc_mem_dereg,
    .frag_max = uln_svc_frag_max,
    .progress_rx = uln_svc_progress_rx,
    .progress_tx = uln_svc_progress_tx,
    .busy = uln_svc_busy,
    .wait_fds = uln_svc_wait_fds,
};
