/*
 * send.c - the socket link's send half: batches as sendmmsg, GSO runs,
 * a lone packet as one sendto.
 */
#define _GNU_SOURCE
#include "link/udp/priv.h"
#include "core/probe.h"

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

/* Tests may put a sendmmsg of their own in, to cut sends short at will. */
#ifdef ULN_TEST_HOOKS
static int (*sendmmsg_fn)(int, struct mmsghdr *, unsigned int, int) = sendmmsg;
void uln_link_udp_test_hook_sendmmsg(int (*fn)(int, struct mmsghdr *, unsigned int, int))
{
    sendmmsg_fn = fn ? fn : sendmmsg;
}
#define SENDMMSG    sendmmsg_fn
#define LONE_SENDTO (sendmmsg_fn == sendmmsg) /* a hooked send sees every packet */
#else
#define SENDMMSG    sendmmsg
#define LONE_SENDTO true
#endif

/* Sending                                                                    */
/* ------------------------------------------------------------------------- */

static bool transient(int e)
{
    /* ECONNREFUSED (a connected socket, one_peer): an earlier datagram's
     * ICMP error, reported instead of sending this one; the next try sends. */
    return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EINTR || e == ECONNREFUSED;
}

static void set_msg(struct link_udp *io, struct mmsghdr *m, int32_t peer, struct iovec *iov,
                    size_t niov)
{
    const struct peer *p = &io->peers[peer];
    /* No address to the peer the socket is connected to: the kernel's
     * connected path (peers.c, conn_update). */
    bool conn = peer == io->conn_peer;
    m->msg_hdr.msg_name = conn ? NULL : (void *)&p->sa;
    m->msg_hdr.msg_namelen = conn ? 0 : p->salen;
    m->msg_hdr.msg_iov = iov;
    m->msg_hdr.msg_iovlen = niov;
    m->msg_hdr.msg_control = NULL;
    m->msg_hdr.msg_controllen = 0;
    m->msg_hdr.msg_flags = 0;
    m->msg_len = 0;
}

/* Messages for up to a batch of packets; runs of equal-size packets to one
 * peer (the last may be shorter: the kernel allows that) become one GSO
 * message. Returns the number of messages; spkts[i] says how many packets
 * message i carries. */
static unsigned build_plain(struct link_udp *io, const struct uln_link_pkt *pkts, unsigned n,
                            bool gso)
{
    unsigned m = 0, v = 0, i = 0;
    if (n > ULN_LINK_BATCH) n = ULN_LINK_BATCH;
    while (i < n) {
        unsigned run = 1;
        uint32_t seg = uln_link_pkt_len(&pkts[i]);
        if (gso && seg > 0) {
            uint32_t total = seg;
            while (i + run < n && run < GSO_SEGS_MAX && pkts[i + run].peer == pkts[i].peer) {
                uint32_t l = uln_link_pkt_len(&pkts[i + run]);
                if (l > seg || l == 0 || total + l > GSO_BYTES_MAX) break;
                total += l;
                run++;
                if (l < seg) break;
            }
        }
        struct iovec *iov = &io->siov[v];
        for (unsigned k = 0; k < run; k++)
            for (uint32_t j = 0; j < pkts[i + k].niov; j++)
                io->siov[v++] = pkts[i + k].iov[j];
        struct mmsghdr *msg = &io->smsg[m];
        set_msg(io, msg, pkts[i].peer, iov, (size_t)(&io->siov[v] - iov));
        if (run > 1) {
            msg->msg_hdr.msg_control = io->sctl[m].buf;
            msg->msg_hdr.msg_controllen = sizeof(io->sctl[m].buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg->msg_hdr);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t s16 = (uint16_t)seg;
            memcpy(CMSG_DATA(c), &s16, sizeof(s16));
        }
        io->spkts[m++] = run;
        i += run;
    }
    return m;
}

/* A packet alone goes by sendto, the kernel's cheapest send: no msghdr or
 * iovec array to copy in. Measured in a VM over loopback, send + receive of
 * one 56-byte datagram: sendmmsg 7.44 us, sendmsg 7.18, sendto of a copy 6.88
 * - so a small packet's pieces are copied into one buffer (a few ns) to get
 * it. This is the latency path: one message, nothing else to send. */
static int send_lone(struct link_udp *io, const struct uln_link_pkt *p)
{
    const void *buf = p->iov[0].iov_base;
    size_t len = p->iov[0].iov_len;
    if (p->niov > 1) {
        len = 0;
        for (uint32_t j = 0; j < p->niov; j++) {
            memcpy(io->lone + len, p->iov[j].iov_base, p->iov[j].iov_len);
            len += p->iov[j].iov_len;
        }
        buf = io->lone;
    }
    const struct peer *pe = &io->peers[p->peer];
    ULN_PROBE(ULN_P_SEND_IN);
    ssize_t r = p->peer == io->conn_peer
                    ? send(io->fd, buf, len, MSG_DONTWAIT)
                    : sendto(io->fd, buf, len, MSG_DONTWAIT, &pe->sa.sa, pe->salen);
    ULN_PROBE(ULN_P_SEND_OUT);
    io->st.tx_calls++;
    io->st.tx_lone++;
    if (r >= 0) {
        io->st.tx_pkts++;
        io->st.tx_bytes += (uint64_t)r;
        return 1;
    }
    int e = errno;
    if (transient(e)) {
        io->st.tx_again++;
        return 0;
    }
    io->st.tx_err++;
    io->st.last_tx_errno = e;
    return 1; /* as send_plain: a packet the kernel refuses is gone */
}

static int send_plain(struct link_udp *io, const struct uln_link_pkt *pkts, unsigned n)
{
    if (n == 1 && LONE_SENDTO && (pkts[0].niov == 1 || uln_link_pkt_len(&pkts[0]) <= LONE_COPY_MAX))
        return send_lone(io, &pkts[0]);
    unsigned done = 0;
    bool gso = io->gso;
    while (done < n) {
        unsigned m = build_plain(io, pkts + done, n - done, gso);
        ULN_PROBE(ULN_P_SEND_IN);
        int r = SENDMMSG(io->fd, io->smsg, m, MSG_DONTWAIT);
        ULN_PROBE(ULN_P_SEND_OUT);
        io->st.tx_calls++;
        if (r > 0) {
            for (int k = 0; k < r; k++) {
                io->st.tx_pkts += io->spkts[k];
                io->st.tx_bytes += io->smsg[k].msg_len;
                if (io->spkts[k] > 1) {
                    io->st.tx_gso_msgs++;
                    io->st.tx_gso_pkts += io->spkts[k];
                }
                done += io->spkts[k];
            }
            continue; /* a short count: the next call tells why */
        }
        int e = errno;
        if (transient(e)) {
            io->st.tx_again++;
            break;
        }
        if (io->spkts[0] > 1) {
            /* The kernel refused a GSO run: send it again as plain datagrams.
             * EIO or an unknown option means this socket cannot do GSO at all
             * (no checksum offload on the route, an old kernel): stop trying. */
            if (e == EIO || e == ENOPROTOOPT || e == EOPNOTSUPP) {
                io->gso = false;
                io->st.gso_off = 1;
            }
            gso = false;
            continue;
        }
        io->st.tx_err++;
        io->st.last_tx_errno = e;
        done++;
    }
    return (int)done;
}

int uln_link_udp_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct link_udp *io = (struct link_udp *)l;
    for (unsigned i = 0; i < n; i++) {
        const struct uln_link_pkt *p = &pkts[i];
        if (p->peer < 0 || (unsigned)p->peer >= io->npeers || p->niov == 0 ||
            p->niov > ULN_LINK_IOV_WIRE)
            return -EINVAL;
        if (uln_link_pkt_len(p) > io->payload_max) return -EMSGSIZE;
    }
    return n ? send_plain(io, pkts, n) : 0;
}

/* ------------------------------------------------------------------------- */
