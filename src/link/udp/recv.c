/*
 * recv.c - the socket link's receive half: recvmmsg into the pool, GRO
 * runs in landing buffers lent datagram by datagram, the cold read.
 */
#define _GNU_SOURCE
#include "link/udp/priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* Receiving                                                                  */
/* ------------------------------------------------------------------------- */

#define GRO_OFF_LONE 256u /* lone reads in a row that turn the socket's UDP_GRO off */
#define GRO_ON_BURST 8u   /* datagrams in one read without it that turn it on again */

static int32_t lookup(struct link_udp *io, const struct sockaddr *sa, socklen_t len)
{
    struct peer_key k;
    if (!uln_link_udp_sa_key(sa, len, &k)) return -1;
    int32_t last = io->last_peer;
    if (last >= 0 && !memcmp(&io->peers[last].key, &k, sizeof(k))) return last;
    int32_t id = uln_link_udp_find_key(io, &k);
    if (id >= 0) io->last_peer = id;
    return id;
}

/* Set up receive header j for a read into buf (len bytes), the source address
 * into sa, ancillary data (GRO's segment size) into ctl. */
static void rx_entry(struct link_udp *io, unsigned j, void *buf, size_t len, union sa_any *sa,
                     void *ctl, size_t ctllen)
{
    io->riov[j].iov_base = buf;
    io->riov[j].iov_len = len;
    struct msghdr *h = &io->rmsg[j].msg_hdr;
    h->msg_name = sa;
    h->msg_namelen = sizeof(union sa_any);
    h->msg_iov = &io->riov[j];
    h->msg_iovlen = 1;
    h->msg_control = ctl;
    h->msg_controllen = ctllen;
    h->msg_flags = 0;
}

/* A read that brought nothing, with errno e (EAGAIN for recvmmsg's 0): 0,
 * counted as empty, when the socket was empty or a signal came; else -e. */
static int rx_none(struct link_udp *io, int e)
{
    /* ECONNREFUSED: a connected socket's report of an ICMP "port
     * unreachable" for something it sent (the peer not up yet, or gone):
     * the datagram is lost, as any, and rel deals with that. */
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || (e == ECONNREFUSED && io->one_peer)) {
        io->st.rx_empty++;
        return 0;
    }
    io->st.rx_err++;
    return -e;
}

/* One recvmmsg into the k headers set up: how many came, 0 when none (or a
 * signal), or -errno. *drained: the socket said EAGAIN. */
static int rx_mmsg(struct link_udp *io, unsigned k, bool *drained)
{
    int r = recvmmsg(io->fd, io->rmsg, k, MSG_DONTWAIT, NULL);
    int e = r < 0 ? errno : EAGAIN;
    io->st.rx_calls++;
    *drained = r <= 0 && (e == EAGAIN || e == EWOULDBLOCK);
    /* Headers written by the kernel, or an odd error: set up again. An empty
     * call leaves them as they were. */
    if (r > 0 || (r < 0 && !*drained)) io->rprep = 0;
    return r > 0 ? r : rx_none(io, e);
}

/* An empty datagram from our own address: a GRO wake-up (gro_wake) that
 * landed after the reads left the landing buffers. */
static bool plain_wake(const struct link_udp *io, uint32_t b, uint32_t len)
{
    struct peer_key k;
    if (len != 0 || !io->gro_cap || !uln_link_udp_sa_key(&io->rx_sa[b].sa, io->rx_salen[b], &k))
        return false;
    return k.port == io->wake_key.port && !memcmp(k.a, io->wake_key.a, 16);
}

/* Hand out pool slot b, which a read filled with len bytes from rx_sa[b]. */
static void rx_lend(struct link_udp *io, uint32_t b, uint32_t len, struct uln_link_rx *out)
{
    int32_t peer = lookup(io, &io->rx_sa[b].sa, io->rx_salen[b]);
    if (peer < 0) io->st.rx_unknown++;
    io->lent[b] = 1;
    out->buf = io->pool + (size_t)b * io->stride;
    out->len = len;
    out->peer = peer;
    out->handle = b;
    io->st.rx_pkts++;
    io->st.rx_bytes += len;
}

/* The read of a socket that was empty last time: one datagram by recvfrom,
 * which costs a spinning caller least when nothing is there (measured in a
 * VM, empty reads: recvfrom 0.54 us, recvmsg 0.78, recvmmsg 0.81 - no
 * msghdr or iovec to copy in) and brings a lone message soonest. The next
 * read, after a datagram came, is a recvmmsg again: a burst may follow. */
static int recv_cold(struct link_udp *io, struct uln_link_rx *out)
{
    uint32_t b = io->free_stack[io->nfree - 1];
    io->rx_salen[b] = sizeof(io->rx_sa[b]);
    /* MSG_TRUNC: the datagram's real length, so a cut one is seen. */
    ssize_t r = recvfrom(io->fd, io->pool + (size_t)b * io->stride, io->payload_max,
                         MSG_DONTWAIT | MSG_TRUNC, &io->rx_sa[b].sa, &io->rx_salen[b]);
    io->st.rx_calls++;
    if (r < 0) return rx_none(io, errno);
    io->cold = false;
    if ((size_t)r > io->payload_max) {
        io->st.rx_trunc++;
        return 0;
    }
    io->st.rx_cold++;
    if (plain_wake(io, b, (uint32_t)r)) return 0;
    io->nfree--;
    io->rprep = 0; /* the free stack changed */
    rx_lend(io, b, (uint32_t)r, out);
    return 1;
}

/* Without GRO: one datagram per read, straight into pool slots. */
static int recv_plain(struct link_udp *io, struct uln_link_rx *out, unsigned max)
{
    unsigned k = max < ULN_LINK_BATCH ? max : ULN_LINK_BATCH;
    if (k > io->nfree) k = io->nfree;
    if (k == 0) {
        if (max) io->st.rx_pool_empty++;
        return 0;
    }
    if (io->cold) return recv_cold(io, out);
    uint32_t *bufs = io->rbufs;
    /* A busy-polling caller mostly finds nothing. An empty call leaves the
     * headers as they were, and they stay right while the free stack is
     * unchanged (rprep is cleared whenever it changes), so only a call after
     * a receive or a release pays for the set-up loop. */
    if (io->rprep != k) {
        for (unsigned j = 0; j < k; j++) {
            uint32_t b = io->free_stack[io->nfree - 1 - j];
            bufs[j] = b;
            rx_entry(io, j, io->pool + (size_t)b * io->stride, io->payload_max, &io->rx_sa[b], NULL,
                     0);
        }
        io->rprep = k;
    }
    bool drained;
    int r = rx_mmsg(io, k, &drained);
    io->cold = r == 0 && drained;
    if (r <= 0) return r;
    io->nfree -= (unsigned)r;
    unsigned got = 0;
    for (int j = 0; j < r; j++) {
        uint32_t b = bufs[j];
        const struct mmsghdr *m = &io->rmsg[j];
        if (m->msg_hdr.msg_flags & MSG_TRUNC) {
            io->st.rx_trunc++;
            io->free_stack[io->nfree++] = b;
            continue;
        }
        io->rx_salen[b] = m->msg_hdr.msg_namelen;
        if (plain_wake(io, b, m->msg_len)) {
            io->free_stack[io->nfree++] = b;
            continue;
        }
        rx_lend(io, b, m->msg_len, &out[got++]);
    }
    return (int)got;
}

/* ---- with GRO ---- */

static uint8_t *gbuf_mem(const struct link_udp *io, uint32_t b)
{
    return io->gpool + (size_t)b * ULN_LINK_UDP_GRO_BUF;
}

static void gbuf_free(struct link_udp *io, uint32_t b)
{
    io->gfree_stack[io->ngfree++] = b;
    io->rprep = 0; /* the free stack changed */
}

/* The empty datagram that keeps the fd readable while datagrams wait here. A
 * host without ::1 (IPv6 off on lo) takes the dual-stack socket's IPv4 one. */
static void gro_wake(struct link_udp *io)
{
    if (io->wake_out) return;
    if (io->wake_efd >= 0) {
        uint64_t one = 1;
        if (write(io->wake_efd, &one, sizeof(one)) == (ssize_t)sizeof(one)) {
            io->wake_out = true;
            io->st.rx_wakes++;
        }
        return;
    }
    for (int tries = 0; tries < 2; tries++) {
        if (sendto(io->fd, "", 0, MSG_DONTWAIT, &io->wake_sa.sa, io->wake_salen) == 0) {
            io->wake_out = true;
            io->st.rx_wakes++;
            return;
        }
        if (io->wake_sa.sa.sa_family != AF_INET6 ||
            !IN6_IS_ADDR_LOOPBACK(&io->wake_sa.in6.sin6_addr))
            return; /* the next recv that leaves datagrams behind tries again */
        static const uint8_t v4lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
        memcpy(&io->wake_sa.in6.sin6_addr, v4lo, 16);
        uln_link_udp_sa_key(&io->wake_sa.sa, io->wake_salen, &io->wake_key);
    }
}

/* Our own wake-up: empty, from our address and port. The scope is not
 * compared: a link-local address sent to itself comes back through lo. Not
 * only while wake_out says one is on its way: loopback queues a datagram to
 * the socket later, in a softirq, so a read may find the socket drained (and
 * clear wake_out) before the wake-up lands. Nobody else sends from our port,
 * so an empty datagram from it is always ours. */
static bool is_wake(const struct link_udp *io, uint32_t b)
{
    struct peer_key k;
    if (io->gb[b].len != 0 || !uln_link_udp_sa_key(&io->gsa[b].sa, io->gsalen[b], &k)) return false;
    return k.port == io->wake_key.port && !memcmp(k.a, io->wake_key.a, 16);
}

/* The segment size from the read's UDP_GRO cmsg: 0 if there is none (a lone
 * datagram), -1 if the cmsgs were cut short and it may have been lost. */
static int gro_seg(const struct msghdr *h)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR((struct msghdr *)h, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int seg;
            memcpy(&seg, CMSG_DATA(c), sizeof(seg));
            return seg > 0 ? seg : 0;
        }
    return (h->msg_flags & MSG_CTRUNC) ? -1 : 0;
}

/* Hand out up to max waiting datagrams, oldest read first. */
static unsigned gro_drain(struct link_udp *io, struct uln_link_rx *out, unsigned max)
{
    unsigned got = 0;
    while (got < max && io->gq_i < io->gq_n) {
        uint32_t b = io->gq[io->gq_i];
        struct gbuf *g = &io->gb[b];
        if (g->handed == 0) {
            /* Copy a lone datagram (it would hold 64 KiB), and every one while
             * lending would leave too few landing buffers to read into. */
            g->copy = g->nseg == 1 || io->nbig - io->npinned <= io->glow;
        }
        while (got < max && g->handed < g->nseg) {
            uint32_t s = g->handed++, off = s * g->seg;
            uint32_t len = g->len - off < g->seg ? g->len - off : g->seg;
            if (len > io->payload_max) {
                io->st.rx_trunc++;
                continue;
            }
            uint8_t *src = gbuf_mem(io, b) + off;
            struct uln_link_rx *rx = &out[got++];
            rx->len = len;
            rx->peer = g->peer;
            if (g->copy && io->nfree) {
                uint32_t slot = io->free_stack[--io->nfree];
                rx->buf = io->pool + (size_t)slot * io->stride;
                memcpy(rx->buf, src, len);
                io->rx_sa[slot] = io->gsa[b];
                io->rx_salen[slot] = io->gsalen[b];
                io->lent[slot] = 1;
                rx->handle = slot;
                io->st.rx_copied++;
            } else {
                rx->buf = src;
                rx->handle = GRO_HANDLE | (b << SEG_BITS) | s;
                g->lent[s / 64] |= 1ull << (s % 64);
                if (g->refs++ == 0) io->npinned++;
            }
            if (g->peer < 0) io->st.rx_unknown++;
            io->st.rx_pkts++;
            io->st.rx_bytes += len;
        }
        if (g->handed < g->nseg) break;
        if (g->refs == 0) gbuf_free(io, b);
        io->gq_i++;
    }
    if (io->gq_i == io->gq_n) io->gq_i = io->gq_n = 0;
    return got;
}

/* A landing buffer's read of len bytes, datagrams of seg bytes (the last
 * may be shorter): queued for gro_drain. False if it was dropped (cut short,
 * more datagrams than a handle can name, or our own wake-up). */
static bool gro_queue(struct link_udp *io, uint32_t b, uint32_t len, uint32_t seg)
{
    struct gbuf *g = &io->gb[b];
    uint32_t nseg = seg > 0 && len > seg ? (len + seg - 1) / seg : 1;
    if (nseg > SEG_CAP) {
        io->st.rx_trunc++;
        gbuf_free(io, b);
        return false;
    }
    *g = (struct gbuf){.len = len, .seg = nseg > 1 ? seg : len, .nseg = (uint16_t)nseg, .peer = -1};
    if (is_wake(io, b)) {
        io->wake_out = false;
        gbuf_free(io, b);
        return false;
    }
    g->peer = lookup(io, &io->gsa[b].sa, io->gsalen[b]);
    if (nseg > 1) {
        io->st.rx_gro_msgs++;
        io->st.rx_gro_segs += nseg;
    }
    io->gq[io->gq_n++] = b;
    return true;
}

/* The datagram size of a read of len bytes at m that came without the
 * kernel's cmsg: where the protocol's headers say the first datagram ends,
 * if every datagram of the run is then as long as its own headers say (a
 * run's datagrams are all that long but the last, which may be shorter).
 * Else len: the read is one datagram, which the protocol checks and refuses
 * if its headers disagree with it - a datagram with bytes after its last
 * packet is never cut into a packet and a runt. */
static uint32_t cold_seg(const struct link_udp *io, const uint8_t *m, uint32_t len)
{
    uint32_t seg = io->dgram_len(m, len);
    if (seg == 0 || seg >= len) return len;
    for (uint32_t at = seg; at < len; at += seg) {
        uint32_t n = len - at < seg ? len - at : seg;
        if (io->dgram_len(m + at, n) != n) return len;
    }
    return seg;
}

/* recv_cold with GRO on: recvfrom into a landing buffer (a run may come, up
 * to 64 KiB), cut by cold_seg. 1 if a read is queued, 0 if none came, or
 * -errno. */
static int gro_cold(struct link_udp *io)
{
    uint32_t b = io->gfree_stack[io->ngfree - 1];
    io->gsalen[b] = sizeof(io->gsa[b]);
    ssize_t r = recvfrom(io->fd, gbuf_mem(io, b), ULN_LINK_UDP_GRO_BUF, MSG_DONTWAIT | MSG_TRUNC,
                         &io->gsa[b].sa, &io->gsalen[b]);
    io->st.rx_calls++;
    if (r < 0) return rx_none(io, errno);
    io->cold = false;
    if ((size_t)r > ULN_LINK_UDP_GRO_BUF) { /* cut: the buffer stays free */
        io->st.rx_trunc++;
        return 0;
    }
    io->ngfree--;
    io->rprep = 0; /* the free stack changed */
    uint32_t len = (uint32_t)r;
    if (!gro_queue(io, b, len, len ? cold_seg(io, gbuf_mem(io, b), len) : 0)) return 0;
    io->lone_reads = io->gb[b].nseg == 1 ? io->lone_reads + 1 : 0;
    io->st.rx_cold++;
    return 1;
}

/* One recvmmsg of up to k reads into landing buffers, queued for gro_drain.
 * Returns how many reads came (0: none waiting) or -errno. */
static int gro_read(struct link_udp *io, unsigned k)
{
    uint32_t *bufs = io->rbufs;
    /* As in recv_plain: set up only after a receive or a change of the stack. */
    if (io->rprep != k) {
        for (unsigned j = 0; j < k; j++) {
            uint32_t b = io->gfree_stack[io->ngfree - 1 - j];
            bufs[j] = b;
            rx_entry(io, j, gbuf_mem(io, b), ULN_LINK_UDP_GRO_BUF, &io->gsa[b], io->rctl[j].buf,
                     sizeof(io->rctl[j].buf));
        }
        io->rprep = k;
    }
    bool drained;
    int r = rx_mmsg(io, k, &drained);
    io->cold = r == 0 && drained;
    /* Drained: our wake-up is not in there: read, or dropped by a full socket
     * (which was readable then). Either way the next one may go. */
    if (drained && io->wake_efd < 0) io->wake_out = false;
    if (r <= 0) return r;
    io->ngfree -= (unsigned)r;
    unsigned most = 1;
    for (int j = 0; j < r; j++) {
        uint32_t b = bufs[j];
        const struct msghdr *h = &io->rmsg[j].msg_hdr;
        uint32_t len = io->rmsg[j].msg_len;
        int seg = gro_seg(h);
        if ((h->msg_flags & MSG_TRUNC) || seg < 0) {
            io->st.rx_trunc++;
            gbuf_free(io, b);
            continue;
        }
        io->gsalen[b] = h->msg_namelen;
        /* With the option off, a run queued before comes without its cmsg. */
        uint32_t s = seg > 0                                 ? (uint32_t)seg
                     : !io->gro_sock && io->dgram_len && len ? cold_seg(io, gbuf_mem(io, b), len)
                                                             : len;
        if (gro_queue(io, b, len, s) && io->gb[b].nseg > most) most = io->gb[b].nseg;
    }
    io->lone_reads = r == 1 && most == 1 ? io->lone_reads + 1 : 0;
    /* Runs seen lately size the next read: a long one at once, a short one
     * only after reads have shown it. */
    io->hint = most > io->hint / 2 ? most : io->hint / 2;
    if (io->hint == 0) io->hint = 1;
    return r;
}

/* Reads sized so that their datagrams are likely to fit in what is left of
 * out, after got datagrams already there: the new total, or -errno when the
 * first read failed with none. */
static int gro_reads(struct link_udp *io, struct uln_link_rx *out, unsigned got, unsigned max)
{
    for (unsigned it = 0; got < max && it < GRO_ITER_MAX; it++) {
        unsigned room = max - got;
        if (got && room < io->hint) break; /* would leave datagrams behind */
        unsigned k = room / io->hint;
        if (k == 0) k = 1;
        if (k > ULN_LINK_BATCH) k = ULN_LINK_BATCH;
        if (k > io->ngfree) k = io->ngfree;
        if (k == 0) {
            if (!got) io->st.rx_pool_empty++;
            break;
        }
        int r = gro_read(io, k);
        if (r < 0 && !got) return r;
        if (r <= 0) break;
        got += gro_drain(io, out + got, room);
        /* Fewer reads than asked for: the socket is empty, and asking again
         * would cost a system call on the way to an answer. */
        if ((unsigned)r < k) break;
    }
    return (int)got;
}

/* Datagrams left from the last read go first; then, after a read that
 * found the socket empty, one recvfrom (gro_cold: the cheap call, as
 * recv_plain's recv_cold), else gro_reads. */
static int recv_gro(struct link_udp *io, struct uln_link_rx *out, unsigned max)
{
    unsigned got = gro_drain(io, out, max);
    if (!got && io->cold && io->dgram_len && io->ngfree && max) {
        int r = gro_cold(io);
        if (r < 0) return r;
        if (r > 0) got = gro_drain(io, out, max);
    } else {
        int r = gro_reads(io, out, got, max);
        if (r < 0) return r;
        got = (unsigned)r;
    }
    if (io->gq_n) {
        gro_wake(io);
    } else if (io->wake_out && io->wake_efd >= 0) {
        /* Nothing waits here any more: the eventfd unreadable again. */
        uint64_t v;
        if (read(io->wake_efd, &v, sizeof(v)) < 0) { /* EAGAIN: already read */
        }
        io->wake_out = false;
    }
    return (int)got;
}

/* The socket's UDP_GRO on or off; false if the kernel said no (nothing
 * changed then). */
static bool gro_set(struct link_udp *io, bool on)
{
    int v = on;
    if (setsockopt(io->fd, SOL_UDP, UDP_GRO, &v, sizeof(v))) return false;
    io->gro_sock = on;
    io->lone_reads = 0;
    io->rprep = 0; /* the other path's headers */
    if (on) {
        io->gro = true; /* at once: the next read may bring a run */
        io->st.rx_gro_on++;
    } else {
        io->cold = false; /* the path changes after a read finds the socket empty */
        io->st.rx_gro_off++;
    }
    return true;
}

int uln_link_udp_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct link_udp *io = (struct link_udp *)l;
    if (!io->gro) {
        int r = recv_plain(io, out, max);
        if (r >= (int)GRO_ON_BURST && io->gro_cap) gro_set(io, true);
        return r;
    }
    int r = recv_gro(io, out, max);
    if (io->gro_sock) {
        /* Off only where a run can still be told by the protocol's headers. */
        if (io->lone_reads >= GRO_OFF_LONE && io->gq_n == 0 && io->dgram_len) gro_set(io, false);
    } else if (io->cold && io->gq_n == 0) {
        /* Found empty since the option went off: every run queued before it
         * has been read, and the kernel cuts the later ones. */
        io->gro = false;
        io->rprep = 0;
    }
    return r;
}

/* The landing buffer and datagram of a GRO handle, if it is lent out. */
static struct gbuf *gro_lent(const struct link_udp *io, uint32_t handle, uint32_t *b, uint32_t *s)
{
    if (!(handle & GRO_HANDLE)) return NULL;
    *b = (handle & ~GRO_HANDLE) >> SEG_BITS;
    *s = handle & (SEG_CAP - 1);
    if (*b >= io->nbig) return NULL;
    struct gbuf *g = &io->gb[*b];
    return (g->lent[*s / 64] >> (*s % 64)) & 1 ? g : NULL;
}

const void *uln_link_udp_rx_addr(const struct uln_link *l, uint32_t handle, socklen_t *len)
{
    const struct link_udp *io = (const struct link_udp *)l;
    uint32_t b, s;
    if (gro_lent(io, handle, &b, &s)) {
        if (len) *len = io->gsalen[b];
        return &io->gsa[b].sa;
    }
    if (handle >= io->nbufs || !io->lent[handle]) return NULL;
    if (len) *len = io->rx_salen[handle];
    return &io->rx_sa[handle].sa;
}

int uln_link_udp_rx_release(struct uln_link *l, uint32_t handle)
{
    struct link_udp *io = (struct link_udp *)l;
    uint32_t b, s;
    struct gbuf *g = gro_lent(io, handle, &b, &s);
    if (g) {
        g->lent[s / 64] &= ~(1ull << (s % 64));
        if (--g->refs == 0) {
            io->npinned--;
            /* Not while it still has datagrams to hand out: drain frees it. */
            if (g->handed == g->nseg) gbuf_free(io, b);
        }
        return 0;
    }
    if (handle >= io->nbufs || !io->lent[handle]) {
        io->st.rx_bad_release++;
        return -EINVAL;
    }
    io->lent[handle] = 0;
    io->free_stack[io->nfree++] = handle;
    io->rprep = 0; /* the free stack changed */
    return 0;
}

#ifdef ULN_TEST_HOOKS
/* For tests and fuzzing only: a datagram that did not come from the socket,
 * lent like one (from the same pool, released the same way), so everything
 * above the socket runs as it would for a received one. */
int uln_link_udp_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                         struct uln_link_rx *out)
{
    struct link_udp *io = (struct link_udp *)l;
    if (len > io->payload_max) return -EMSGSIZE;
    if (peer < -1 || peer >= (int32_t)io->npeers) return -EINVAL;
    if (io->nfree == 0) {
        io->st.rx_pool_empty++;
        return -ENOBUFS;
    }
    uint32_t b = io->free_stack[--io->nfree];
    io->rprep = 0; /* the free stack changed */
    io->lent[b] = 1;
    if (peer >= 0) {
        io->rx_sa[b] = io->peers[peer].sa;
        io->rx_salen[b] = io->peers[peer].salen;
    } else {
        memset(&io->rx_sa[b], 0, sizeof(io->rx_sa[b]));
        io->rx_salen[b] = 0;
        io->st.rx_unknown++;
    }
    uint8_t *dst = io->pool + (size_t)b * io->stride;
    if (len) memcpy(dst, buf, len);
    *out = (struct uln_link_rx){.buf = dst, .len = len, .peer = peer, .handle = b};
    io->st.rx_pkts++;
    io->st.rx_bytes += len;
    return 0;
}
#endif /* ULN_TEST_HOOKS */
