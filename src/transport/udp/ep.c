/*
 * ep.c - the UDP transport's endpoints: open (the link under them, from
 * link/select.c), close (linger until what was sent has arrived), and the
 * link's table of peers' socket addresses.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "link/select.h"
#include "seal/settings.h"
#include "transport/udp/priv.h"

/* ---- endpoint ------------------------------------------------------------------- */

static void peer_sockaddr(const struct udp_addr *a, unsigned ep_index, struct sockaddr_storage *ss,
                          socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, a->ip, 4);
        in->sin_port = htons((uint16_t)(a->port + ep_index));
        *len = sizeof *in;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, a->ip, 16);
        in6->sin6_port = htons((uint16_t)(a->port + ep_index));
        *len = sizeof *in6;
    }
}

/* The socket address of peer's endpoint we talk to. */
void uln_udp_dst_sockaddr(const struct uln_ep *ep, int peer, struct sockaddr_storage *ss,
                          socklen_t *len)
{
    peer_sockaddr(&udp_of(ep->ctx)->addrs[peer], (unsigned)ep->peers[peer].dst_ep, ss, len);
}

/* ULN_SECURE=auth or encrypt: where the first sealed datagram of a read ends,
 * found from the back by the trailers' length fields (uln_seal_len) - under
 * encrypt the headers are ciphertext and say nothing. A run the kernel
 * merged is datagrams of one size but the last: the last one's field says
 * where it starts, and the one before it ends there and says the size. A
 * cut an attacker's fields chose only makes datagrams that do not open
 * (uln_seal_rx refuses a length not its own). */
static uint32_t dgram_len_sealed(const uint8_t *buf, uint32_t avail)
{
    uint32_t last = uln_seal_len(buf, avail);
    if (last == 0 || last == avail) return last;
    return uln_seal_len(buf, avail - last);
}

static uint32_t (*dgram_len_of(int secure))(const uint8_t *, uint32_t)
{
    return secure == ULN_SEAL_OFF ? dgram_len : dgram_len_sealed;
}

/* Put peer into the link's table: its id there. -ENOENT: udp does not
 * reach it (yet: a context with no job learns peers as they are inserted). */
int uln_udp_link_peer(struct uln_ep *ep, int peer)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (ue->id_of_rank[peer] >= 0) return ue->id_of_rank[peer];
    if (!udp_remote(ep->ctx, peer)) return -ENOENT;
    struct sockaddr_storage ss;
    socklen_t len;
    uln_udp_dst_sockaddr(ep, peer, &ss, &len);
    int id = uln_link_add_peer(ue->io, (struct sockaddr *)&ss, len);
    /* With no job: another life at the same socket address (a restart on the
     * same ports, or a forged or stale address). We send through its entry,
     * but what comes from there stays the other's until a packet says it is
     * ours (uln_udp_ctrl_sender). */
    bool shared = id == -EEXIST;
    if (shared) id = uln_link_find_peer(ue->io, (struct sockaddr *)&ss, len);
    if (id < 0) return id;
    int rc = uln_udp_seal_peer(ep->ctx, ue->io, id, peer, (unsigned)ep->peers[peer].dst_ep);
    if (rc) return rc;
    ue->id_of_rank[peer] = id;
    if (!shared) ue->rank_of_id[id] = peer;
    return id;
}

/* Did the datagram come from the socket address of peer's endpoint we talk
 * to (a peer udp reaches)? */
static bool sent_by(struct uln_ep *ep, int peer, const struct uln_link_rx *rx)
{
    socklen_t alen;
    const void *a = uln_link_rx_addr(udp_ep(ep)->io, rx->handle, &alen);
    if (!a || !udp_remote(ep->ctx, peer)) return false;
    struct sockaddr_storage ss;
    socklen_t len;
    uln_udp_dst_sockaddr(ep, peer, &ss, &len);
    return len == alen && !memcmp(&ss, a, len);
}

/* A datagram from a source not in the link's table: with no job, a peer
 * inserted since this endpoint opened, sending before we sent to it. The
 * peers whose endpoint address it is are few; this runs once per peer. */
int uln_udp_link_peer_of(struct uln_ep *ep, const struct uln_link_rx *rx)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!ctx->no_job) return -1;
    for (int p = 1; p < ctx->size; p++)
        if (udp_ep(ep)->id_of_rank[p] < 0 && sent_by(ep, p, rx)) return uln_udp_link_peer(ep, p);
    return -1;
}

/* No job: the socket must hear every source from now on (a second remote
 * peer, or one that came before it was inserted: uln_udp_ep_open). */
void uln_udp_solo_end(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->solo = ue->solo_open = false;
    uln_link_one_peer(ue->io, false);
}

/* A connected socket drops a stranger's datagrams unseen: a peer the
 * application never inserted (Open MPI inserts at first use, and a receive
 * from any source inserts nobody) would never get through while the one
 * peer we know keeps us connected. So the socket hears every source while
 * nothing comes for a while (ULN_UDP_SOLO_QUIET_NS, progress_tx) and
 * while the endpoint sleeps (poll_setup): a stranger's resend then gets
 * in and ends solo for good (hears_strangers). The next datagram of the
 * one peer connects it again (uln_udp_solo_back). */
void uln_udp_solo_open(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->solo_open = true;
    uln_link_one_peer(ue->io, false);
}

void uln_udp_solo_back(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    ue->solo_open = false;
    if (ue->solo) uln_link_one_peer(ue->io, true);
}

/* A peer reached us before we inserted it: this endpoint serves whoever
 * comes (a server, FI_SOURCE), so its socket must hear every source. */
static void hears_strangers(struct uln_ep *ep)
{
    if (udp_ep(ep)->solo) uln_udp_solo_end(ep);
}

/* With no job, a control packet from a source we do not know may carry its
 * sender's address (uln_udp_send_ctrl): a peer that inserted us before we inserted
 * it. If the packet shows our key and the address names its very source,
 * the peer is learnt (peer.c) and gets the id uln_peer_insert will give. */
int uln_udp_link_peer_hello(struct uln_ep *ep, const struct uln_link_rx *rx,
                            const struct pkt_hdr *h)
{
    struct uln_ctx *ctx = ep->ctx;
    size_t at = sizeof *h + sizeof(struct pkt_ctrl_body);
    if (!ctx->no_job || h->key != ctx->job_key || rx->len < at + 2) return -1;
    const uint8_t *hello = rx->buf + at;
    size_t alen = rx->len - at - 1;
    int p = uln_peer_learn_addr(ctx, hello + 1, alen, hello[0]);
    if (p < 0 || !sent_by(ep, p, rx)) return -1; /* not its own address */
    hears_strangers(ep);
    return uln_udp_link_peer(ep, p);
}

/* With no job, a control packet from the socket address of rank r that
 * names another sender (its ident, the low bits of its key): a later life
 * of r at the same ports, inserted (sharing r's link entry, or not linked
 * yet) or saying hello. If it shows our key, it has proved itself: it
 * supersedes r there, and the packet is its. Else r (the caller refuses
 * the packet). */
int uln_udp_ctrl_sender(struct uln_ep *ep, int32_t io_peer, int r, const struct uln_link_rx *rx,
                        const struct pkt_hdr *h, const struct pkt_ctrl_body *b)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!ctx->no_job || r < 0 || b->rank == uln_peer_ident(ctx, r) || h->key != ctx->job_key)
        return r;
    struct uln_udp_ep *ue = udp_ep(ep);
    int p = -1;
    for (int q = 1; q < ctx->size && p < 0; q++)
        if (q != r && uln_peer_ident(ctx, q) == b->rank && udp_remote(ctx, q) &&
            (ue->id_of_rank[q] == io_peer || (ue->id_of_rank[q] < 0 && sent_by(ep, q, rx))))
            p = q;
    size_t at = sizeof *h + sizeof *b;
    if (p < 0 && rx->len >= at + 2) { /* not inserted: learnt from its hello */
        int q = uln_peer_learn_addr(ctx, rx->buf + at + 1, rx->len - at - 1, rx->buf[at]);
        if (q > 0 && q != r && uln_peer_ident(ctx, q) == b->rank && sent_by(ep, q, rx)) p = q;
        if (p > 0) hears_strangers(ep);
    }
    if (p < 0) return r;
    if (ue->id_of_rank[p] < 0) ue->id_of_rank[p] = io_peer;
    uln_udp_supersede_older(ep, p);
    return ue->rank_of_id[io_peer] == p ? p : r;
}

/* Sealed, with no job: the first datagram of a peer inserted since this
 * endpoint opened comes before the sealing link has its pair; the link asks
 * here (link_seal.h) before it opens it. Only a peer the application
 * inserted is linked so (its address and key known); one that would be
 * learnt from its hello is not: the hello cannot be opened before its key
 * is known, so it is refused. */
static int seal_resolve(void *arg, const struct uln_link_rx *rx)
{
    return uln_udp_link_peer_of(arg, rx);
}

int uln_udp_ep_open(struct uln_ep *ep)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_udp *u = udp_of(ctx);
    if (!u || (unsigned)ep->index >= u->nfds || u->fds[ep->index] < 0) return 0;
    struct uln_udp_ep *ue = calloc(1, sizeof *ue);
    if (!ue) return -ENOMEM;
    ep->tp_ep[ULN_TPID_UDP] = ue;
    int n = ctx->size;
    ue->rank_of_id = malloc((size_t)n * sizeof(int));
    ue->id_of_rank = malloc((size_t)n * sizeof(int));
    ue->live = malloc((size_t)n * sizeof(int));
    if (!ue->rank_of_id || !ue->id_of_rank || !ue->live) return -ENOMEM;
    /* The index's socket stays the context's: the link gets its own
     * descriptor of it, so every life of the index has the same port (the
     * one peers know) and a closed life's packets stay refusable there. */
    int fd = fcntl(u->fds[ep->index], F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return -errno;
    /* A job whose other ranks are all on this host but one: that one is the
     * only source this socket ever hears (a job's endpoint talks to the
     * same index only; no hellos from strangers), so it may be connected
     * (link_udp.h, one_peer). With no job, peers come and go: the link
     * connects while its table holds one peer (an MPI pair of ranks, a
     * client of one server) and unconnects at the second (whose datagrams
     * the kernel dropped till then: its rel resends them), seen by the
     * next pass (uln_udp_solo_check). A peer that comes before it is
     * inserted (hears_strangers) ends it for good. */
    int remote = 0;
    for (int p = 0; p < n && !ctx->no_job; p++)
        remote += udp_remote(ctx, p);
    ue->solo = ctx->no_job && udp_params(ctx)->connect && udp_params(ctx)->connect_nojob &&
               atomic_load_explicit(&u->n_remote, memory_order_relaxed) <= 1;
    struct uln_link_udp_cfg cfg = {
        .adopt = true,
        .fd = fd,
        .mtu = udp_params(ctx)->mtu,
        .rx_bufs = 2 * udp_params(ctx)->window < 512 ? 512 : 2 * udp_params(ctx)->window,
        .max_peers = (unsigned)n,
        .no_gro = !udp_params(ctx)->gro,
        .one_peer = ue->solo || (remote == 1 && udp_params(ctx)->connect),
        .dgram_len = dgram_len_of(uln_seal_params(&ctx->p)->mode)};
    int rc = uln_link_select_open(ctx, &cfg, &ue->io); /* AF_XDP or the socket */
    if (rc || (rc = uln_udp_seal_wrap(ctx, (unsigned)ep->index, &ep->stats.refused_auth, &ue->io)))
        return rc; /* ULN_SECURE: sealed before the link sends, opened after it receives */
    if (ctx->no_job) uln_link_seal_resolver(ue->io, seal_resolve, ep);
    ue->pool_bufs = cfg.rx_bufs;
    if (uln_udp_bundles_init(ue) != 0) return -ENOMEM;
    /* uln_ep_open holds the context lock here: the context's generator is ours. */
    u->rng = mix64(u->rng + 0x9e3779b97f4a7c15ull);
    ue->rng = u->rng;
    if (ctx->no_job) {
        size_t alen = ULN_ADDR_MAX;
        if (uln_addr(ctx, ue->hello + 1, &alen) == 0) {
            ue->hello[0] = (uint8_t)ep->index;
            ue->hello_len = (uint32_t)(1 + alen);
        }
    }
    ue->payload_max = uln_link_payload_max(ue->io);
    ue->stride = (ue->payload_max + 63u) & ~63u;
    ue->window = udp_params(ctx)->window;
    for (int p = 0; p < n; p++)
        ue->id_of_rank[p] = ue->rank_of_id[p] = -1;
    for (int p = 0; p < n; p++)
        if ((rc = uln_udp_link_peer(ep, p)) < 0 && rc != -ENOENT) return rc;
    return 0;
}

static void peer_free(struct uln_udp_ep *ue, struct uln_udp_peer *up)
{
    for (uint32_t i = 0; i <= up->mask; i++)
        if (up->rx[i].held) uln_udp_rx_release(ue, &up->rx[i]);
    uln_rel_fini(&up->rel);
    free(up->tx);
    free(up->tx_mem);
    free(up->tx_free);
    free(up->rx);
    free(up);
}

/* Closing: what we sent has completed locally but may not have arrived (a NAP
 * completes when it leaves). Like a TCP close, stay a while to resend until
 * every peer has acknowledged it, and tell every peer what we received so it
 * need not wait for us. Bounded: 2 s or ULN_UDP_DEAD_MS, whichever is less. */
static void linger(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    uint64_t ms = udp_params(ep->ctx)->dead_ms < 2000 ? udp_params(ep->ctx)->dead_ms : 2000;
    uint64_t until = uln_now_ns() + ms * 1000000u;
    for (int i = 0; i < ue->n_live; i++)
        uln_rel_want_fb(&udp_peer(ep, ue->live[i])->rel);
    for (;;) {
        uln_udp_progress_rx(ep);
        uln_udp_progress_tx(ep);
        bool waiting = ue->nbatch > 0;
        for (int i = 0; i < ue->n_live; i++) {
            struct uln_udp_peer *up = udp_peer(ep, ue->live[i]);
            waiting |= !up->dead && uln_rel_state(&up->rel) == ULN_REL_OPEN &&
                       uln_rel_tx_in_flight(&up->rel) > 0;
        }
        if (!waiting || uln_now_ns() >= until) break;
        uln_link_wait(ue->io, 1);
    }
}

void uln_udp_ep_close(struct uln_ep *ep)
{
    struct uln_udp_ep *ue = udp_ep(ep);
    if (!ue) return;
    if (ue->io) linger(ep);
    for (int p = 0; ep->peers && p < ep->ctx->size; p++) {
        struct uln_udp_peer *up = udp_peer(ep, p);
        if (!up) continue;
        /* What we fed the engine and it never took belongs to this life
         * only: the next one starts after it (ep.c). */
        for (int ch = 0; ch < 2; ch++)
            uln_ep_ring_drop(ep, p, ch, up->feed.prod[ch].tail);
        peer_free(ue, up);
        ep->peers[p].tp_peer = NULL;
    }
    uln_link_close(ue->io);
    free(ue->bundle_mem);
    free(ue->shares);
    free(ue->share_free);
    free(ue->rank_of_id);
    free(ue->id_of_rank);
    free(ue->live);
    free(ue);
    ep->tp_ep[ULN_TPID_UDP] = NULL;
}
