/*
 * sock.c - the AF_XDP link's bound UDP socket (priv.h, docs/xdp.md "Two
 * paths"): what AF_XDP does not carry goes and comes here. Sending: packets
 * to same-host peers, and runs of datagrams to one peer that leave as one
 * UDP_SEGMENT send (in copy mode an AF_XDP frame costs an skb each, a run
 * one). Receiving: same-host peers' datagrams and what the XDP program
 * passes to the kernel for our port (GSO runs generic XDP sees whole,
 * frames from another queue), read with UDP_GRO into gro_buf and copied
 * into landing buffers, lent like frames; the program's pass count for our
 * socket (ulnet_passed, mapped) says when to read.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"
#ifdef ULN_HAVE_XDP

#include <netinet/udp.h>

/* How many of pkts[0..n) go as one UDP_SEGMENT send: a run to one peer of
 * datagrams of one size (the last may be shorter), at most
 * ULN_LINK_BATCH of them and one IP datagram's worth of payload, whose
 * bytes *total gets. */
unsigned uln_xdp_gso_run_len(const struct uln_link_pkt *pkts, unsigned n, uint32_t *bytes)
{
    uint32_t seg = uln_link_pkt_len(&pkts[0]), total = seg;
    unsigned k = 1;
    while (k < n && k < ULN_LINK_BATCH && pkts[k].peer == pkts[0].peer) {
        uint32_t len = uln_link_pkt_len(&pkts[k]);
        if (len > seg || total + len > UDP_GSO_PAYLOAD_MAX) break;
        total += len;
        k++;
        if (len < seg) break; /* a shorter one ends the run */
    }
    *bytes = total;
    return k;
}

/* pkts[0..n) to one peer by the bound socket: one datagram, or (n > 1) one
 * UDP_SEGMENT send that the kernel cuts into n (gso_run_len). Returns n
 * (sent, or refused for good: lost and counted), 0 (the socket is full: send
 * them later), or -1: the kernel refuses UDP_SEGMENT here (gso_off), send
 * them otherwise. */
int uln_xdp_sock_send(struct link_xdp *x, const struct peer *pe, const struct uln_link_pkt *pkts,
                      unsigned n)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = pe->port};
    to.sin_addr.s_addr = pe->ip;
    struct iovec iov[ULN_LINK_BATCH * ULN_LINK_IOV_MAX];
    size_t niov = 0;
    for (unsigned i = 0; i < n; i++)
        for (uint32_t j = 0; j < pkts[i].niov; j++)
            iov[niov++] = pkts[i].iov[j];
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } c;
    struct msghdr m = {
        .msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = iov, .msg_iovlen = niov};
    if (n > 1) {
        m.msg_control = c.buf;
        m.msg_controllen = sizeof(c.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)uln_link_pkt_len(&pkts[0]);
        memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    }
    ssize_t r = sendmsg(x->udp_fd, &m, MSG_DONTWAIT);
    x->st.tx_calls++;
    if (r >= 0) {
        x->st.tx_pkts += n;
        x->st.tx_bytes += (uint64_t)r;
        if (n > 1) {
            x->st.tx_gso_msgs++;
            x->st.tx_gso_pkts += n;
        }
        return (int)n;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == EINTR) return 0;
    if (n > 1 && (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP)) {
        x->st.gso_off = 1; /* no UDP_SEGMENT on this socket: AF_XDP takes the runs */
        x->gso_run = 0;
        return -1;
    }
    x->st.tx_err += n;
    x->st.last_tx_errno = errno;
    return (int)n;
}

/* a before b in the program's byte count (which wraps in theory only). */
static bool pos_before(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

/* Bytes the program passed that no read has brought: is the wait for them
 * over? The first call starts it (rx_order_held); a tick of the coarse clock
 * later the kernel has dropped them (a full receive buffer, a bad checksum)
 * or never will give them: they count as read (rx_order_gaps), up to upto. */
static bool pass_wait_over(struct link_xdp *x, uint64_t upto)
{
    if (!uln_xdp_wait_over(&x->pass_wait, uln_coarse_ns(), SOCK_READ_NS, &x->st.rx_order_held))
        return false;
    if (pos_before(x->sock_pos, upto)) {
        x->sock_pos = upto;
        x->st.rx_order_gaps++;
    }
    return true;
}

/* Whether to read the bound socket in this call: always while a peer is
 * local or the last read left datagrams; while the XDP program's count of
 * bytes passed for us is ahead of what the socket gave (a load from the
 * map, no system call; a tick at most, pass_wait_over); else once per
 * SOCK_READ_NS of the coarse clock (a read of the vDSO's data). */
bool uln_xdp_sock_due(struct link_xdp *x)
{
    if (x->nlocal || x->gro_off < x->gro_len) return true;
    /* Relaxed: the count only says "read now"; the socket read is what
     * hands the datagrams over, with the kernel's own ordering. */
    if (x->passed && pos_before(x->sock_pos, __atomic_load_n(x->passed, __ATOMIC_RELAXED)))
        return true;
    uint64_t now = uln_coarse_ns();
    if (now < x->sock_next) return false;
    x->sock_next = now + SOCK_READ_NS;
    return true;
}

/* Whether a datagram from sa came through the XDP program, and so counts in
 * its bytes passed: not one from this host, which comes by lo. */
static bool via_program(const struct link_xdp *x, const struct sockaddr_in *sa)
{
    uint32_t a = sa->sin_addr.s_addr;
    if (a == x->ip || (ntohl(a) >> 24) == 127) return false;
    int32_t id = uln_xdp_find_key(x, a, sa->sin_port);
    return id < 0 || !x->peers[id].local;
}

/* A read of n bytes (the datagram's whole length, cut short or not): where
 * it lies in the program's count. One the count does not hold (it came
 * before our port was in the program's map, or by another interface) is
 * ordered with nothing: sock_pos never runs ahead of the count, or a read
 * could wait in gro_buf for passes that never come. */
static void sock_count(struct link_xdp *x, uint64_t n)
{
    x->gro_counted = x->passed && via_program(x, &x->gro_sa);
    if (!x->gro_counted) return;
    /* Relaxed: the program added a pass's bytes before the kernel queued it
     * on the socket, and the read that got it is a system call since. */
    if (pos_before(__atomic_load_n(x->passed, __ATOMIC_RELAXED), x->sock_pos + n)) {
        x->gro_counted = false;
        return;
    }
    x->gro_pos = x->sock_pos;
    x->sock_pos += n;
    x->pass_wait = 0; /* they come: wait afresh for any still missing */
}

/* One read of the bound socket into gro_buf: the datagrams' bytes, their
 * size (the last may be shorter) and source. 0: nothing (or an empty
 * datagram: nothing either), -1: an error or a read cut short (counted). */
static int sock_read(struct link_xdp *x)
{
    struct iovec iov = {.iov_base = x->gro_buf, .iov_len = ULN_LINK_UDP_GRO_BUF};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct msghdr m = {.msg_name = &x->gro_sa,
                       .msg_namelen = sizeof(x->gro_sa),
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = c.buf,
                       .msg_controllen = sizeof(c.buf)};
    /* MSG_TRUNC: the datagram's whole length, even of one cut short, which
     * the program's count holds whole. */
    ssize_t n = recvmsg(x->udp_fd, &m, MSG_DONTWAIT | MSG_TRUNC);
    x->st.rx_calls++;
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) x->st.rx_err++;
        x->st.rx_empty++;
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    }
    if ((m.msg_flags & MSG_TRUNC) || x->gro_sa.sin_family != AF_INET) {
        if (x->gro_sa.sin_family == AF_INET) sock_count(x, (uint64_t)n);
        x->st.rx_trunc++;
        return -1;
    }
    sock_count(x, (uint64_t)n);
    uint32_t seg = (uint32_t)n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(cm), sizeof(v));
            if (v > 0 && (uint32_t)v < seg) seg = (uint32_t)v;
        }
    if (seg < (uint32_t)n) {
        x->st.rx_gro_msgs++;
        x->st.rx_gro_segs += ((uint32_t)n + seg - 1) / seg;
    }
    x->gro_len = (uint32_t)n;
    x->gro_off = 0;
    x->gro_seg = seg ? seg : 1;
    return 1; /* an empty datagram (our own wake-up, below) lends nothing */
}

/* Datagrams of the last read, each copied into a landing buffer and lent
 * from there (a copy of at most the MTU, against the system calls the run
 * saves). A longer one than payload_max is dropped (rx_trunc). */
static unsigned sock_lend(struct link_xdp *x, struct uln_link_rx *out, unsigned max)
{
    unsigned got = 0;
    int32_t peer = uln_xdp_find_key(x, x->gro_sa.sin_addr.s_addr, x->gro_sa.sin_port);
    while (got < max && x->gro_off < x->gro_len) {
        uint32_t len = x->gro_len - x->gro_off;
        if (len > x->gro_seg) len = x->gro_seg;
        if (len > x->base.payload_max) {
            x->st.rx_trunc++;
            x->gro_off += len;
            continue;
        }
        if (!x->nsock_free) {
            x->st.rx_pool_empty++;
            break;
        }
        uint32_t i = x->sock_free[--x->nsock_free], h = x->sock_base + i;
        uint8_t *buf = x->sock_mem + (size_t)i * ULN_LINK_XDP_FRAME;
        memcpy(buf, x->gro_buf + x->gro_off, len);
        x->gro_off += len;
        x->rx_sa[h] = x->gro_sa;
        if (peer < 0) x->st.rx_unknown++;
        x->sock_lent[i] = 1;
        out[got++] = (struct uln_link_rx){.buf = buf, .len = len, .peer = peer, .handle = h};
        x->st.rx_sock++;
        x->st.rx_pkts++;
        x->st.rx_bytes += len;
    }
    return got;
}

/* The socket's datagrams that passed the XDP program before its count said
 * stamp (all of them with drain: the trailing read of a recv call, which
 * goes on past stamp), into out[*got..max): what is left of the last read
 * first, then reads. Datagrams from this host (by lo, not the program) are
 * ordered with nothing and go whenever read; one that passed at stamp or
 * after stops the reading and waits in gro_buf. True: nothing before stamp
 * is left. False: out is full, or the bytes
 * are still on their way through the kernel's stack (generic XDP runs
 * before it, and the stack may queue a pass in a batch while the frames
 * after it reach the ring) until a tick says they are lost. With every
 * landing buffer lent it says true: the frame goes first. */
static bool sock_upto(struct link_xdp *x, uint64_t stamp, bool drain, struct uln_link_rx *out,
                      unsigned *got, unsigned max)
{
    for (unsigned errs = 0;;) {
        /* Every landing buffer lent: the caller may keep them all (link.h),
         * maybe for the very frame that would let it give one back (a hole
         * it fills). The frame goes, out of the order it came in. */
        if (!x->nsock_free) return true;
        if (x->gro_off < x->gro_len) {
            if (x->gro_counted && !pos_before(x->gro_pos, stamp)) return true;
            if (*got == max) return false;
            *got += sock_lend(x, out + *got, max - *got);
            x->sock_next = 0; /* a stream (GSO runs): read again until it is dry */
            continue;
        }
        if (!drain && !pos_before(x->sock_pos, stamp)) return true;
        if (*got == max) return false;
        int r = sock_read(x);
        if (r > 0 || (r < 0 && ++errs < ULN_LINK_BATCH)) continue;
        return !pos_before(x->sock_pos, stamp) || pass_wait_over(x, stamp);
    }
}

bool uln_xdp_sock_before(struct link_xdp *x, uint64_t stamp, struct uln_link_rx *out, unsigned *got,
                         unsigned max)
{
    return sock_upto(x, stamp, false, out, got, max);
}

/* What waits in the bound socket, up to what passed the program before its
 * count said upto (loaded before the ring was read: what passed since may
 * come after a frame the ring has by now), and all from this host. */
unsigned uln_xdp_sock_recv(struct link_xdp *x, uint64_t upto, struct uln_link_rx *out, unsigned max)
{
    if (!x->nsock_free) { /* every landing buffer lent: the caller releases first */
        x->st.rx_pool_empty++;
        return 0;
    }
    unsigned got = 0;
    sock_upto(x, upto, true, out, &got, max);
    /* Datagrams left in gro_buf are not in the socket any more: an empty
     * datagram to ourselves keeps its fd readable, so that a caller that
     * sleeps on it (xdp_fds) is not left asleep with them waiting. */
    if (x->gro_off < x->gro_len) {
        struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = x->port};
        me.sin_addr.s_addr = x->ip;
        if (sendto(x->udp_fd, NULL, 0, MSG_DONTWAIT, (struct sockaddr *)&me, sizeof(me)) == 0)
            x->st.rx_wakes++;
    }
    return got;
}

#endif /* ULN_HAVE_XDP */
