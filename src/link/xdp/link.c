/*
 * link.c - the AF_XDP link (link_xdp.h, link.h): its peers, the UMEM and
 * rings, send and receive, open and close. priv.h says how it works.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"
#ifdef ULN_HAVE_XDP

#include <netinet/udp.h> /* SOL_UDP */

/* ------------------------------------------------------------------------- */
/* Peers                                                                      */
/* ------------------------------------------------------------------------- */

static uint32_t key_hash(uint32_t ip, uint16_t port)
{
    uint64_t h = ((uint64_t)ip << 16 | port) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

int uln_xdp_find_key(const struct link_xdp *x, uint32_t ip, uint16_t port)
{
    for (uint32_t i = key_hash(ip, port) & x->hmask;; i = (i + 1) & x->hmask) {
        int32_t id = x->htab[i];
        if (id < 0) return -1;
        if (x->peers[id].ip == ip && x->peers[id].port == port) return id;
    }
}

static void hash_insert(struct link_xdp *x, int32_t id)
{
    uint32_t i = key_hash(x->peers[id].ip, x->peers[id].port) & x->hmask;
    while (x->htab[i] >= 0)
        i = (i + 1) & x->hmask;
    x->htab[i] = id;
}

/* Linear probing without tombstones: pull back the rest of the cluster. */
static void hash_remove(struct link_xdp *x, int32_t id)
{
    uint32_t i = key_hash(x->peers[id].ip, x->peers[id].port) & x->hmask;
    while (x->htab[i] != id)
        i = (i + 1) & x->hmask;
    x->htab[i] = -1;
    for (uint32_t j = (i + 1) & x->hmask; x->htab[j] >= 0; j = (j + 1) & x->hmask) {
        const struct peer *q = &x->peers[x->htab[j]];
        uint32_t home = key_hash(q->ip, q->port) & x->hmask;
        if (((j - home) & x->hmask) >= ((j - i) & x->hmask)) {
            x->htab[i] = x->htab[j];
            x->htab[j] = -1;
            i = j;
        }
    }
}

/* An IPv4 sockaddr (or IPv4-mapped IPv6) as (ip, port). */
static int sa_v4(const void *addr, socklen_t len, uint32_t *ip, uint16_t *port)
{
    const struct sockaddr *sa = addr;
    if (!sa || len < (socklen_t)sizeof(sa_family_t)) return -EINVAL;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = addr;
        *ip = in->sin_addr.s_addr;
        *port = in->sin_port;
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = addr;
        if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return -EAFNOSUPPORT;
        memcpy(ip, in6->sin6_addr.s6_addr + 12, 4);
        *port = in6->sin6_port;
        return 0;
    }
    return sa->sa_family == AF_INET || sa->sa_family == AF_INET6 ? -EINVAL : -EAFNOSUPPORT;
}

/* A new peer, or one moved (set_peer): its route, maybe local now or no more. */
static void peer_init(struct link_xdp *x, struct peer *p, uint32_t ip, uint16_t port)
{
    x->nlocal -= p->local;
    *p = (struct peer){.ip = ip, .port = port};
    p->err = uln_xdp_route_to(x, p);
    x->nlocal += p->local;
    uln_xdp_peer_resolve(x, p, uln_now_ns());
}

static int xdp_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct link_xdp *x = (struct link_xdp *)l;
    uint32_t ip;
    uint16_t port;
    int rc = sa_v4(addr, len, &ip, &port);
    if (rc) return rc;
    if (x->npeers == x->max_peers) return -ENOSPC;
    if (uln_xdp_find_key(x, ip, port) >= 0) return -EEXIST;
    peer_init(x, &x->peers[x->npeers], ip, port);
    hash_insert(x, (int32_t)x->npeers);
    return (int)x->npeers++;
}

static int xdp_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    struct link_xdp *x = (struct link_xdp *)l;
    uint32_t ip;
    uint16_t port;
    if (peer < 0 || (unsigned)peer >= x->npeers) return -EINVAL;
    int rc = sa_v4(addr, len, &ip, &port);
    if (rc) return rc;
    int other = uln_xdp_find_key(x, ip, port);
    if (other == peer) return 0;
    if (other >= 0) return -EEXIST;
    hash_remove(x, peer);
    peer_init(x, &x->peers[peer], ip, port);
    hash_insert(x, peer);
    return 0;
}

static int xdp_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    const struct link_xdp *x = (const struct link_xdp *)l;
    uint32_t ip;
    uint16_t port;
    if (sa_v4(addr, len, &ip, &port)) return -1;
    return uln_xdp_find_key(x, ip, port);
}

/* ------------------------------------------------------------------------- */
/* Sending                                                                    */
/* ------------------------------------------------------------------------- */

/* Frames the kernel has sent come back to the free stack. */
static void reap_cq(struct link_xdp *x)
{
    uint32_t idx;
    unsigned n = xsk_ring_cons__peek(&x->cq, x->ntx, &idx);
    for (unsigned i = 0; i < n; i++) {
        uint64_t a = *xsk_ring_cons__comp_addr(&x->cq, idx + i);
        x->tx_free[x->ntx_free++] = (uint32_t)(a / ULN_LINK_XDP_FRAME);
    }
    if (n) xsk_ring_cons__release(&x->cq, n);
}

/* Frames on the TX ring the kernel has not taken yet. */
static unsigned tx_queued(const struct link_xdp *x)
{
    return x->tx.size - xsk_prod_nb_free((struct xsk_ring_prod *)&x->tx, x->tx.size);
}

/* Make the kernel send what is on the TX ring, only when it asks to be
 * (need_wakeup: a zero-copy driver that is already draining the ring does
 * not; copy mode always does, it sends only inside sendto). Each sendto
 * moves a bounded batch (the kernel's, 32 frames in copy mode), so kick
 * again while it keeps taking frames. */
static void kick_tx(struct link_xdp *x)
{
    for (unsigned k = 0; k < KICKS_MAX && tx_queued(x); k++) {
        if (!xsk_ring_prod__needs_wakeup(&x->tx)) return;
        unsigned before = tx_queued(x);
        if (sendto(x->xsk_fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 && errno != EAGAIN &&
            errno != EBUSY && errno != ENOBUFS && errno != EINTR) {
            x->st.tx_err++;
            x->st.last_tx_errno = errno;
            return;
        }
        x->st.tx_calls++;
        if (tx_queued(x) >= before) return; /* nothing taken: try at the next call */
    }
}

/* Headers and payload of packet p into frame f; its length on the wire. */
static uint32_t build_frame(struct link_xdp *x, uint8_t *f, const struct peer *pe,
                            const struct uln_link_pkt *p)
{
    struct uln_xdp_flow fl = {
        .src_ip = x->ip, .dst_ip = pe->ip, .src_port = x->port, .dst_port = pe->port};
    memcpy(fl.src_mac, x->mac, 6);
    memcpy(fl.dst_mac, pe->mac, 6);
    return uln_xdp_frame_build(f, &fl, x->ip_id++, p->iov, p->niov);
}

static int check_pkts(const struct link_xdp *x, const struct uln_link_pkt *pkts, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct uln_link_pkt *p = &pkts[i];
        if (p->peer < 0 || (unsigned)p->peer >= x->npeers || p->niov == 0 ||
            p->niov > ULN_LINK_IOV_WIRE)
            return -EINVAL;
        if (uln_link_pkt_len(p) > x->base.payload_max) return -EMSGSIZE;
    }
    return 0;
}

/* The frames built so far onto the TX ring, and the kernel asked to send
 * them: before a send by the bound socket, so that what the caller put
 * first leaves first (copy mode sends inside the kick). */
static void tx_push(struct link_xdp *x)
{
    if (x->tx_put) xsk_ring_prod__submit(&x->tx, x->tx_put);
    x->tx_put = 0;
    kick_tx(x);
}

/* One packet into a send frame on the TX ring (submitted by tx_push). 1:
 * taken (built, or lost for want of the peer's MAC: counted, rel resends
 * it), 0: no free frame or ring slot, send it later. */
static int ring_send(struct link_xdp *x, struct peer *pe, const struct uln_link_pkt *p)
{
    if (!pe->have_mac) uln_xdp_peer_resolve(x, pe, uln_now_ns());
    if (!pe->have_mac) { /* lost, as the contract allows: rel sends it again */
        x->st.tx_err++;
        x->st.last_tx_errno = pe->err ? -pe->err : EHOSTUNREACH;
        return 1;
    }
    uint32_t idx;
    if (!x->ntx_free || xsk_ring_prod__reserve(&x->tx, 1, &idx) != 1) return 0;
    uint32_t fr = x->tx_free[--x->ntx_free];
    uint64_t a = (uint64_t)fr * ULN_LINK_XDP_FRAME;
    uint32_t len = build_frame(x, x->area + a, pe, p);
    struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, idx);
    d->addr = a;
    d->len = len;
    x->tx_put++;
    x->st.tx_pkts++;
    x->st.tx_bytes += len - HDR_LEN;
    return 1;
}

/* Each packet takes the cheaper path (docs/xdp.md, "Two paths"): a run of
 * gso_run or more to one peer is one UDP_SEGMENT send on the bound socket
 * (in copy mode the kernel builds an skb per AF_XDP frame, but one per
 * run); a local peer's go by the socket too; the rest are frames on the TX
 * ring, kicked once at the end. A run no longer than one datagram may be
 * goes as frames: a virtual path (veth) carries a GSO send whole, and a
 * receiver's generic XDP would take one that fits a frame for a single
 * datagram of the run's bytes. */
static int xdp_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct link_xdp *x = (struct link_xdp *)l;
    int rc = check_pkts(x, pkts, n);
    if (rc) return rc;
    reap_cq(x);
    unsigned done = 0;
    while (done < n) {
        const struct uln_link_pkt *p = &pkts[done];
        struct peer *pe = &x->peers[p->peer];
        uint32_t bytes = 0;
        unsigned run = x->gso_run || pe->local ? uln_xdp_gso_run_len(p, n - done, &bytes) : 1;
        if (pe->local || (x->gso_run && run >= x->gso_run && bytes > x->base.payload_max)) {
            tx_push(x);
            /* Frames to this peer still on the ring (the kernel took only a
             * batch per kick, or none): the run would pass them in the
             * kernel, and the receiver see a hole. It goes after them. */
            if (!pe->local && tx_queued(x)) break;
            if (!x->gso_run) run = 1; /* a local peer without GSO: one at a time */
            int k = uln_xdp_sock_send(x, pe, p, run);
            if (k < 0) continue; /* GSO refused: the same run again, otherwise */
            if (k == 0) break;   /* the socket is full: the rest later */
            done += (unsigned)k;
            continue;
        }
        if (!ring_send(x, pe, p)) break; /* the ring is full: the rest later */
        done++;
    }
    if (done < n) x->st.tx_again++;
    tx_push(x);
    return (int)done;
}

static int xdp_flush(struct uln_link *l)
{
    struct link_xdp *x = (struct link_xdp *)l;
    reap_cq(x);
    kick_tx(x);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Receiving                                                                  */
/* ------------------------------------------------------------------------- */

/* Released frames go back to the fill ring in bulk: one producer-index
 * store (a release, libxdp's) per batch, not per frame, so the kernel sees
 * the ring's cache line change once. The fill ring holds every receive frame
 * (its size is at least nrx), so the whole stash always finds a place. */
static void fill_flush(struct link_xdp *x)
{
    uint32_t idx;
    if (!x->nstash || xsk_ring_prod__reserve(&x->fq, x->nstash, &idx) != x->nstash) return;
    for (unsigned i = 0; i < x->nstash; i++)
        *xsk_ring_prod__fill_addr(&x->fq, idx + i) = (uint64_t)x->fq_stash[i] * ULN_LINK_XDP_FRAME;
    xsk_ring_prod__submit(&x->fq, x->nstash);
    x->nstash = 0;
}

/* The stash is flushed before every read of the RX ring, in wait, and when
 * it holds a batch. A caller that sleeps on the fd itself (uln_cq_wait) may
 * leave up to a batch stashed: the spare frames (ULN_LINK_XDP_RX_SPARE, far
 * more) keep the kernel supplied meanwhile. */
static void fill_frame(struct link_xdp *x, uint32_t fr)
{
    x->fq_stash[x->nstash++] = fr;
    if (x->nstash >= ULN_LINK_BATCH) fill_flush(x);
}

/* The frame at UMEM address a, and what passed to the bound socket before
 * it: true when it may go now (uln_xdp_sock_before). Its stamp (struct
 * uln_xdp_meta, just before the frame) is cleared once the frame goes, so a
 * later frame in the same place without one (a program that found no room)
 * is not taken for stamped. */
static bool ring_order(struct link_xdp *x, uint64_t a, struct uln_link_rx *out, unsigned *got,
                       unsigned max)
{
    if (!x->passed || a % ULN_LINK_XDP_FRAME < sizeof(struct uln_xdp_meta)) return true;
    struct uln_xdp_meta *m = (struct uln_xdp_meta *)(x->area + a) - 1;
    if (m->magic != ULN_XDP_META_MAGIC) return true;
    if (!uln_xdp_sock_before(x, m->passed, out, got, max) || *got == max) return false;
    m->magic = 0;
    return true;
}

/* Frames on the RX ring, lent where they lie, each after what the bound
 * socket got before it (ring_order). *drained: it took every frame the ring
 * had (so a frame the ring gets later was redirected after this call began). */
static unsigned ring_recv(struct link_xdp *x, struct uln_link_rx *out, unsigned max, bool *drained)
{
    uint32_t idx;
    unsigned n = xsk_ring_cons__peek(&x->rx, max, &idx);
    x->st.rx_calls++;
    *drained = n < max;
    if (!n) {
        x->st.rx_empty++;
        /* A driver that sleeps (need_wakeup) fills frames only when asked;
         * a busy-polling socket runs the queue's NAPI in this call, on our
         * CPU, instead of waiting for a softirq to do it. */
        if (!x->busy_poll && !xsk_ring_prod__needs_wakeup(&x->fq)) return 0;
        recvfrom(x->xsk_fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
        if (!x->busy_poll || !(n = xsk_ring_cons__peek(&x->rx, max, &idx))) return 0;
    }
    unsigned got = 0, i;
    for (i = 0; i < n && got < max; i++) {
        const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, idx + i);
        uint64_t a = xsk_umem__extract_addr(d->addr);
        uint32_t fr = (uint32_t)(a / ULN_LINK_XDP_FRAME);
        if (fr < x->nrx && !ring_order(x, a, out, &got, max)) break; /* it waits in the ring */
        uint32_t plen = 0;
        uint32_t off = fr < x->nrx ? uln_xdp_frame_parse(x->ip, x->port, x->area + a, d->len, &plen,
                                                         &x->rx_sa[fr])
                                   : 0;
        if (!off || plen > x->base.payload_max) {
            x->st.rx_bad_frame++;
            if (fr < x->nrx) fill_frame(x, fr);
            continue;
        }
        int32_t peer = uln_xdp_find_key(x, x->rx_sa[fr].sin_addr.s_addr, x->rx_sa[fr].sin_port);
        if (peer < 0) x->st.rx_unknown++;
        x->lent[fr] = 1;
        out[got++] =
            (struct uln_link_rx){.buf = x->area + a + off, .len = plen, .peer = peer, .handle = fr};
        x->st.rx_pkts++;
        x->st.rx_bytes += plen;
    }
    if (i < n) *drained = false;
    xsk_ring_cons__cancel(&x->rx, n - i);
    xsk_ring_cons__release(&x->rx, i);
    x->ring_seen += i;
    return got;
}

/* Has the RX ring shown every frame the program had redirected to us when
 * it counted owed? Until it has, a datagram that passed after such a frame
 * may be in the socket while the frame is not yet on the ring (the kernel
 * publishes a batch's frames at its end), and reading the socket would
 * deliver it first. A frame that never comes (the kernel dropped it: a full
 * ring) is waited for RING_WAIT_NS, then taken as lost. The fine clock: a
 * wait is rare, and the coarse one could end it at its next tick, at once. */
static bool ring_caught_up(struct link_xdp *x, uint64_t owed)
{
    if (!x->redirected || (int64_t)(x->ring_seen - owed) >= 0) {
        x->ring_wait = 0;
        return true;
    }
    if (!uln_xdp_wait_over(&x->ring_wait, uln_now_ns(), RING_WAIT_NS, &x->st.rx_ring_late))
        return false;
    x->ring_seen = owed;
    x->st.rx_ring_gaps++;
    return true;
}

/* The ring, each frame after the socket's datagrams that passed the program
 * before it; then, when due, the rest of the socket that passed before the
 * ring was looked at, with a quarter of the room kept for it. Where the
 * ring still holds frames, the socket waits for them: ring_order reads it
 * as far as each one needs, so a ring that always has a batch cannot
 * starve it of what came first. */
static int xdp_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct link_xdp *x = (struct link_xdp *)l;
    if (tx_queued(x)) kick_tx(x); /* copy mode sends only when asked */
    fill_flush(x);
    bool sock = uln_xdp_sock_due(x), drained;
    /* Acquire, before the ring's producer index is read: the program adds
     * to the count (an atomic, a full barrier) for a pass that came after
     * the frames it put on the ring before, so any frame the ring shows
     * only later was stamped with this count or more. */
    uint64_t upto = x->passed ? __atomic_load_n(x->passed, __ATOMIC_ACQUIRE) : 0;
    /* After upto (its acquire orders this load): every frame redirected
     * before a pass upto counts is in this count. */
    uint64_t owed = x->redirected ? __atomic_load_n(x->redirected, __ATOMIC_RELAXED) : 0;
    unsigned got = ring_recv(x, out, sock ? max - max / 4 : max, &drained);
    if (sock && drained && ring_caught_up(x, owed))
        got += uln_xdp_sock_recv(x, upto, out + got, max - got);
    return (int)got;
}

/* Whether handle is lent out: a UMEM frame [0, nrx), an rx_lend buffer
 * [nrx, sock_base) or a landing buffer of the socket [sock_base, +nsock). */
static bool is_lent(const struct link_xdp *x, uint32_t h)
{
    if (h < x->nrx) return x->lent[h];
    if (h < x->sock_base) return x->lend_used[h - x->nrx];
    return h - x->sock_base < x->nsock && x->sock_lent[h - x->sock_base];
}

static int xdp_rx_release(struct uln_link *l, uint32_t handle)
{
    struct link_xdp *x = (struct link_xdp *)l;
    if (!is_lent(x, handle)) {
        x->st.rx_bad_release++;
        return -EINVAL;
    }
    if (handle < x->nrx) {
        x->lent[handle] = 0;
        fill_frame(x, handle);
    } else if (handle < x->sock_base) {
        x->lend_used[handle - x->nrx] = 0;
    } else {
        x->sock_lent[handle - x->sock_base] = 0;
        x->sock_free[x->nsock_free++] = handle - x->sock_base;
    }
    return 0;
}

static const void *xdp_rx_addr(const struct uln_link *l, uint32_t handle, socklen_t *len)
{
    const struct link_xdp *x = (const struct link_xdp *)l;
    if (!is_lent(x, handle)) return NULL;
    if (len) *len = sizeof(struct sockaddr_in);
    return &x->rx_sa[handle];
}

#ifdef ULN_TEST_HOOKS
/* Tests and fuzzing: bytes lent as if received, from buffers of their own
 * (the UMEM's receive frames all belong to the fill ring). */
static int xdp_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                       struct uln_link_rx *out)
{
    struct link_xdp *x = (struct link_xdp *)l;
    if (len > x->base.payload_max) return -EMSGSIZE;
    if (peer < -1 || peer >= (int32_t)x->npeers) return -EINVAL;
    unsigned i = 0;
    while (i < LEND_BUFS && x->lend_used[i])
        i++;
    if (i == LEND_BUFS) {
        x->st.rx_pool_empty++;
        return -ENOBUFS;
    }
    x->lend_used[i] = 1;
    uint32_t h = x->nrx + i;
    memset(&x->rx_sa[h], 0, sizeof(x->rx_sa[h]));
    if (peer >= 0) {
        x->rx_sa[h].sin_family = AF_INET;
        x->rx_sa[h].sin_addr.s_addr = x->peers[peer].ip;
        x->rx_sa[h].sin_port = x->peers[peer].port;
    } else {
        x->st.rx_unknown++;
    }
    uint8_t *dst = x->lend_mem + (size_t)i * ULN_LINK_XDP_FRAME;
    if (len) memcpy(dst, buf, len);
    *out = (struct uln_link_rx){.buf = dst, .len = len, .peer = peer, .handle = h};
    x->st.rx_pkts++;
    x->st.rx_bytes += len;
    return 0;
}
#endif

/* ------------------------------------------------------------------------- */
/* The rest                                                                   */
/* ------------------------------------------------------------------------- */

/* Both sockets, for one poll() (link.h: never kept in an epoll set, where
 * the AF_XDP socket would pay a wake-up callback for every frame). Its poll
 * is also a kick (it sends in copy mode, wakes a zero-copy driver that asked
 * to be woken); recv kicks the same way, and a caller reads before it
 * sleeps, as the UDP transport's progress pass does. */
static int xdp_fds(const struct uln_link *l, int *fds, int max)
{
    const struct link_xdp *x = (const struct link_xdp *)l;
    int n = 0;
    if (n < max) fds[n++] = x->xsk_fd;
    if (n < max) fds[n++] = x->udp_fd;
    return n;
}

/* Polls both sockets itself, for the AF_XDP socket's kick (above). A
 * datagram in the bound socket is read at the next recv, not a tick later. */
static int xdp_wait(struct uln_link *l, int timeout_ms)
{
    struct link_xdp *x = (struct link_xdp *)l;
    if (xsk_cons_nb_avail(&x->rx, 1) || x->gro_off < x->gro_len) return 1; /* no sleep */
    fill_flush(x); /* every frame the kernel's while we sleep */
    struct pollfd p[2] = {{.fd = x->xsk_fd, .events = POLLIN}, {.fd = x->udp_fd, .events = POLLIN}};
    int r = poll(p, 2, timeout_ms);
    if (r < 0) return errno == EINTR ? 0 : -errno;
    if (p[1].revents) x->sock_next = 0;
    return r > 0;
}

static int xdp_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    const struct link_xdp *x = (const struct link_xdp *)l;
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof(*ss));
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = x->ip;
    in->sin_port = x->port;
    *len = sizeof(*in);
    return 0;
}

static void xdp_info(const struct uln_link *l, struct uln_link_info *info)
{
    *info = ((const struct link_xdp *)l)->info;
}

static void xdp_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    const struct link_xdp *x = (const struct link_xdp *)l;
    *st = x->st;
    struct xdp_statistics xs;
    socklen_t sl = sizeof(xs);
    if (getsockopt(x->xsk_fd, SOL_XDP, XDP_STATISTICS, &xs, &sl) == 0)
        st->rx_kernel_drops = xs.rx_dropped + xs.rx_ring_full;
}

static void xdp_close(struct uln_link *l)
{
    struct link_xdp *x = (struct link_xdp *)l;
    if (!x) return;
    if (x->port_in_map) {
        struct uln_xdp_port_key k = {.addr = x->ip, .port = x->port};
        bpf_map_delete_elem(x->xp->ports_fd, &k);
    }
    if (x->xp) {
        bpf_map_delete_elem(x->xp->xsks_fd, &x->slot);
        uln_xdp_prog_put(x->xp, x->slot);
    }
    if (x->xsk) xsk_socket__delete(x->xsk);
    if (x->umem) xsk_umem__delete(x->umem);
    if (x->area) munmap(x->area, x->area_len);
    if (x->nl_fd >= 0) close(x->nl_fd);
    if (x->udp_fd >= 0) close(x->udp_fd);
    free(x->tx_free);
    free(x->fq_stash);
    free(x->lent);
    free(x->rx_sa);
    free(x->lend_mem);
    if (x->sock_mem) munmap(x->sock_mem, (size_t)x->nsock * ULN_LINK_XDP_FRAME);
    free(x->sock_lent);
    free(x->sock_free);
    free(x->gro_buf);
    free(x->peers);
    free(x->htab);
    free(x);
}

static const struct uln_link_ops xdp_ops = {
    .send = xdp_send,
    .flush = xdp_flush,
    .recv = xdp_recv,
    .rx_release = xdp_rx_release,
    .rx_addr = xdp_rx_addr,
#ifdef ULN_TEST_HOOKS
    .rx_lend = xdp_rx_lend,
#endif
    .add_peer = xdp_add_peer,
    .set_peer = xdp_set_peer,
    .find_peer = xdp_find_peer,
    .fds = xdp_fds,
    .wait = xdp_wait,
    .local = xdp_local,
    .info = xdp_info,
    .stats = xdp_stats,
    .close = xdp_close,
};

/* ------------------------------------------------------------------------- */
/* Open                                                                       */
/* ------------------------------------------------------------------------- */

/* The interface that owns our address: its index, name, MAC and MTU. */
static int find_iface(struct link_xdp *x, int fd, char *why, size_t whylen)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0) return -errno;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == x->ip) {
            snprintf(x->info.ifname, sizeof(x->info.ifname), "%s", i->ifa_name);
            break;
        }
    freeifaddrs(ifs);
    char a[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &x->ip, a, sizeof(a));
    if (!x->info.ifname[0]) {
        snprintf(why, whylen, "no interface has address %s", a);
        return -ENODEV;
    }
    x->ifindex = (int)if_nametoindex(x->info.ifname);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", x->info.ifname);
    if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0 || ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
        snprintf(why, whylen, "%s (%s) is not an Ethernet interface", x->info.ifname, a);
        return -EOPNOTSUPP;
    }
    memcpy(x->mac, ifr.ifr_hwaddr.sa_data, 6);
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0) return -errno;
    return ifr.ifr_mtu;
}

/* The UMEM and the AF_XDP socket on it, zero-copy or copy as asked. */
static int open_xsk(struct link_xdp *x, const struct uln_link_xdp_cfg *cfg, char *why,
                    size_t whylen)
{
    unsigned fill = 1;
    while (fill < x->nrx)
        fill <<= 1;
    struct xsk_umem_config uc = {.fill_size = fill,
                                 .comp_size = x->ntx,
                                 .frame_size = ULN_LINK_XDP_FRAME,
                                 .frame_headroom = 0,
                                 .flags = 0};
    int rc = -EINVAL;
    for (int zc = 1; zc >= 0; zc--) {
        if ((zc && cfg->copy == ULN_XDP_COPY_ONLY) || (!zc && cfg->copy == ULN_XDP_ZEROCOPY))
            continue;
        rc = xsk_umem__create(&x->umem, x->area, x->area_len, &x->fq, &x->cq, &uc);
        if (rc) {
            snprintf(why, whylen, "cannot register the UMEM (%zu KiB): %s", x->area_len >> 10,
                     strerror(-rc));
            return rc;
        }
        struct xsk_socket_config sc = {
            .rx_size = RX_RING,
            .tx_size = x->ntx,
            .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
            .bind_flags = (uint16_t)(XDP_USE_NEED_WAKEUP | (zc ? XDP_ZEROCOPY : XDP_COPY))};
        rc = xsk_socket__create(&x->xsk, x->info.ifname, cfg->queue, x->umem, &x->rx, &x->tx, &sc);
        if (!rc) {
            x->zerocopy = zc;
            return 0;
        }
        xsk_umem__delete(x->umem);
        x->umem = NULL;
    }
    /* Zero-copy alone (ULN_XDP_MODE=zc) on a driver without it (veth,
     * virtio_net, ...): the kernel's EOPNOTSUPP, said in the driver's name. */
    char drv[DRV_NAME_LEN];
    if (rc == -EOPNOTSUPP && cfg->copy == ULN_XDP_ZEROCOPY &&
        uln_xdp_driver_of(cfg->fd, x->info.ifname, drv) == 0) {
        snprintf(why, whylen,
                 "cannot bind an AF_XDP socket to %s queue %u in zero-copy mode: its driver (%s) "
                 "has no zero-copy AF_XDP (ULN_XDP_MODE=copy, or auto, runs copy mode)",
                 x->info.ifname, cfg->queue, drv);
        return rc;
    }
    snprintf(why, whylen, "cannot bind an AF_XDP socket to %s queue %u%s: %s", x->info.ifname,
             cfg->queue, cfg->copy == ULN_XDP_ZEROCOPY ? " in zero-copy mode" : "",
             rc == -EINVAL  ? "no such queue, or the mode is not supported"
             : rc == -EBUSY ? "the queue has an AF_XDP socket already"
                            : strerror(-rc));
    return rc;
}

/* A spinning caller polls the socket's queue itself (SO_PREFER_BUSY_POLL):
 * each empty read runs the queue's NAPI for up to BUSY_POLL_US on our CPU,
 * BUSY_POLL_BUDGET frames at a time. Where the interface defers its
 * interrupts (napi_defer_hard_irqs, gro_flush_timeout), that moves the
 * receive work - the XDP program, the copy into the UMEM - off the CPU that
 * raised it (on veth, the sender's) to ours. Refused (no privilege, no
 * busy polling in the kernel): the link works as without. */
static void busy_poll_on(struct link_xdp *x)
{
    int one = 1, us = BUSY_POLL_US, budget = BUSY_POLL_BUDGET;
    x->busy_poll =
        setsockopt(x->xsk_fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one)) == 0 &&
        setsockopt(x->xsk_fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) == 0 &&
        setsockopt(x->xsk_fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof(budget)) == 0;
    x->info.busy_poll = x->busy_poll;
}

/* The socket's landing buffers: as many as the caller may keep, so that it
 * goes on receiving from the socket, too, while it holds all it was
 * promised (link.h). Anonymous memory, touched only as buffers are used. */
static int alloc_sock(struct link_xdp *x, unsigned n)
{
    x->sock_base = x->nrx + LEND_BUFS;
    void *m = mmap(NULL, (size_t)n * ULN_LINK_XDP_FRAME, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -ENOMEM;
    x->sock_mem = m;
    x->nsock = n;
    x->info.rx_mem += (size_t)n * ULN_LINK_XDP_FRAME;
    x->sock_lent = calloc(n, 1);
    x->sock_free = malloc(n * sizeof(uint32_t));
    x->gro_buf = malloc(ULN_LINK_UDP_GRO_BUF);
    if (!x->sock_lent || !x->sock_free || !x->gro_buf) return -ENOMEM;
    x->info.rx_mem += ULN_LINK_UDP_GRO_BUF;
    for (unsigned i = 0; i < n; i++)
        x->sock_free[x->nsock_free++] = n - 1 - i;
    return 0;
}

/* Memory: the UMEM, the per-frame receive state, the peer table. */
static int alloc_link(struct link_xdp *x, unsigned rx_bufs, unsigned max_peers)
{
    x->nrx = rx_bufs + ULN_LINK_XDP_RX_SPARE;
    x->ntx = ULN_LINK_XDP_TX_FRAMES;
    x->area_len = (size_t)(x->nrx + x->ntx) * ULN_LINK_XDP_FRAME;
    void *a = mmap(NULL, x->area_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return -ENOMEM;
    x->area = a;
    x->info.rx_mem = x->area_len;
    if (alloc_sock(x, rx_bufs)) return -ENOMEM;
    x->max_peers = max_peers;
    uint32_t hsize = 4;
    while (hsize < 2u * max_peers)
        hsize <<= 1;
    x->hmask = hsize - 1;
    x->tx_free = malloc(x->ntx * sizeof(uint32_t));
    x->fq_stash = malloc(x->nrx * sizeof(uint32_t)); /* room for every frame: never full */
    x->lent = calloc(x->nrx, 1);
    x->rx_sa = calloc(x->sock_base + x->nsock, sizeof(struct sockaddr_in));
    x->lend_mem = malloc((size_t)LEND_BUFS * ULN_LINK_XDP_FRAME);
    x->peers = calloc(max_peers, sizeof(struct peer));
    x->htab = malloc(hsize * sizeof(int32_t));
    if (!x->tx_free || !x->fq_stash || !x->lent || !x->rx_sa || !x->lend_mem || !x->peers ||
        !x->htab)
        return -ENOMEM;
    for (uint32_t i = 0; i < hsize; i++)
        x->htab[i] = -1;
    for (unsigned i = 0; i < x->ntx; i++)
        x->tx_free[x->ntx_free++] = x->nrx + x->ntx - 1 - i;
    return 0;
}

/* Every receive frame on the fill ring; our socket and port into the
 * program's maps (the port last: from then on frames come). */
static int start(struct link_xdp *x, unsigned queue, char *why, size_t whylen)
{
    uint32_t idx;
    if (xsk_ring_prod__reserve(&x->fq, x->nrx, &idx) != x->nrx) return -ENOMEM;
    for (unsigned i = 0; i < x->nrx; i++)
        *xsk_ring_prod__fill_addr(&x->fq, idx + i) = (uint64_t)i * ULN_LINK_XDP_FRAME;
    xsk_ring_prod__submit(&x->fq, x->nrx);
    int fd = xsk_socket__fd(x->xsk);
    struct uln_xdp_port_key k = {.addr = x->ip, .port = x->port};
    struct uln_xdp_port_val v = {.slot = x->slot, .queue = queue, .frame_max = x->info.mtu + 14};
    if (x->xp->passed) { /* the slot's count so far is an earlier link's */
        x->passed = &x->xp->passed[x->slot];
        x->sock_pos = __atomic_load_n(x->passed, __ATOMIC_RELAXED);
        x->redirected = &x->xp->passed[ULN_XDP_SLOTS + x->slot];
        x->ring_seen = __atomic_load_n(x->redirected, __ATOMIC_RELAXED);
    }
    if (bpf_map_update_elem(x->xp->xsks_fd, &x->slot, &fd, 0) ||
        bpf_map_update_elem(x->xp->ports_fd, &k, &v, BPF_NOEXIST)) {
        int e = errno;
        snprintf(why, whylen, "cannot enter the socket in the XDP program's maps: %s", strerror(e));
        return -e;
    }
    x->port_in_map = true;
    return 0;
}

/* Room in the bound socket for the landing pool's worth of datagrams, as the
 * socket link has for its pool (the kernel doubles the figure for itself):
 * a same-host peer's burst waits there. Set only once the link is open:
 * until then the socket is the caller's, untouched. */
static void size_rcvbuf(struct link_xdp *x)
{
    uint64_t b = ((uint64_t)x->base.payload_max + 1024u) * (x->nsock < 256 ? 256 : x->nsock);
    int bytes = b > (256u << 20) ? (256 << 20) : (int)b;
    x->info.rcvbuf = uln_link_udp_sock_buf(x->udp_fd, SO_RCVBUFFORCE, SO_RCVBUF, bytes);
}

static void describe(struct link_xdp *x, unsigned queue)
{
    snprintf(x->info.kind, sizeof(x->info.kind), "xdp");
    snprintf(x->info.xdp_mode, sizeof(x->info.xdp_mode), "%s, %s, queue %u",
             x->xp->mode == XDP_MODE_NATIVE ? "native" : "generic",
             x->zerocopy ? "zero-copy" : "copy", queue);
    x->info.family = AF_INET;
}

static int open_plain(const struct uln_link_xdp_cfg *cfg, struct link_xdp *x, char *why,
                      size_t whylen)
{
    int m = find_iface(x, cfg->fd, why, whylen);
    if (m < 0) return m;
    unsigned mtu = cfg->mtu ? cfg->mtu : (unsigned)m;
    if (mtu > ULN_LINK_XDP_MTU_MAX) mtu = ULN_LINK_XDP_MTU_MAX;
    if (mtu < 576u) {
        snprintf(why, whylen, "MTU %u is below 576", mtu);
        return -EINVAL;
    }
    x->info.mtu = mtu;
    x->base.payload_max = x->info.payload_max = mtu - 28u;
    x->nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (x->nl_fd < 0) return -errno;
    int rc =
        alloc_link(x, cfg->rx_bufs ? cfg->rx_bufs : 512, cfg->max_peers ? cfg->max_peers : 256);
    if (rc) return rc;
    /* veth with the hook left to us and runs sent by GSO: generic XDP first.
     * A native program on a veth makes its peer cut every GSO run into
     * datagrams before they cross (the kernel turns the peer's segmentation
     * offload off), each an skb and a copy into the UMEM; generic XDP lets
     * a run cross whole and passes it to the bound socket (docs/xdp.md,
     * "Two paths": 1.5-1.9 against 1.0-1.3 us of the sender's CPU a
     * datagram). Small frames cost the same either way. */
    char drv[DRV_NAME_LEN];
    bool generic_first =
        cfg->hook == ULN_XDP_HOOK_AUTO && cfg->gso_run && cfg->copy != ULN_XDP_ZEROCOPY &&
        uln_xdp_driver_of(cfg->fd, x->info.ifname, drv) == 0 && !strcmp(drv, "veth");
    if (!(x->xp = uln_xdp_prog_get(x->ifindex, cfg->hook, generic_first, &x->slot, why, whylen)))
        return -EPERM;
    if ((rc = open_xsk(x, cfg, why, whylen)) != 0) return rc;
    x->xsk_fd = xsk_socket__fd(x->xsk);
    /* Zero-copy frames reach the driver without an skb: nothing for the
     * kernel's GSO to save there (docs/xdp.md, "Two paths"). */
    x->gso_run = x->zerocopy ? 0 : cfg->gso_run;
    x->info.gso = x->gso_run > 0;
    if (cfg->busy_poll) busy_poll_on(x);
    if ((rc = start(x, cfg->queue, why, whylen)) != 0) return rc;
    describe(x, cfg->queue);
    return 0;
}

int uln_link_xdp_open(const struct uln_link_xdp_cfg *cfg, struct uln_link **out, char *why,
                      size_t whylen)
{
    *out = NULL;
    why[0] = '\0';
    if (cfg->local.sin_family != AF_INET || cfg->local.sin_addr.s_addr == htonl(INADDR_ANY) ||
        (ntohl(cfg->local.sin_addr.s_addr) >> 24) == 127) {
        snprintf(why, whylen,
                 "AF_XDP needs a specific IPv4 address on an Ethernet interface "
                 "(ULN_UDP_ADDR, ULN_UDP_IF)");
        return -EOPNOTSUPP;
    }
    /* libxdp and libbpf would print their own view of every failure; the
     * one line the caller prints says it. */
    libxdp_set_print(NULL);
    libbpf_set_print(NULL);
    struct link_xdp *x = calloc(1, sizeof(*x));
    if (!x) return -ENOMEM;
    x->base.ops = &xdp_ops;
    x->udp_fd = x->nl_fd = x->xsk_fd = -1;
    x->ip = cfg->local.sin_addr.s_addr;
    x->port = cfg->local.sin_port;
    x->queue = cfg->queue;
    int rc = open_plain(cfg, x, why, whylen);
    if (rc) {
        if (!why[0]) snprintf(why, whylen, "%s", strerror(-rc));
        xdp_close(&x->base); /* udp_fd is still -1: the caller keeps its socket */
        return rc;
    }
    x->udp_fd = cfg->fd;
    size_rcvbuf(x);
    /* A GSO run the kernel keeps whole comes in one read (sock.c). */
    int one = 1;
    x->info.gro = setsockopt(x->udp_fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
    *out = &x->base;
    return 0;
}

#endif /* ULN_HAVE_XDP */
