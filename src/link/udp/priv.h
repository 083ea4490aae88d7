/*
 * priv.h - the socket link's private header (link_udp.h is its contract):
 * its state and the functions its files share. peers.c: the peer table;
 * open.c: the socket, its options, the ops; send.c and recv.c: the halves.
 *
 * link_udp.c - the socket link (link_udp.h, link.h): one UDP socket.
 *
 * Sending gathers each packet's iovecs straight from the caller's memory into
 * one sendmmsg per ULN_LINK_BATCH packets (a packet alone: one sendto). Runs
 * of equal-size packets to one peer become one UDP_SEGMENT message: the
 * kernel builds one big skb and cuts it into datagrams as late as it can (on
 * veth and loopback: only at the receiving socket), so the stack's
 * per-datagram cost is paid once per run. Measured between two namespaces
 * over veth + bridge, one stream of 1472-byte datagrams: 1.26 Gbit/s without
 * GSO, 8.1 with; 64-byte: 123k -> 560k datagrams/s. Without GSO the batch size hardly matters
 * (sendmmsg of 1, 8, 64: 1.21, 1.28, 1.26 Gbit/s): the stack, not the system call, costs. A kernel
 * that refuses GSO turns it off for good; one that refuses a single message gets the run again as
 * plain datagrams.
 *
 * Receiving lends pool buffers: recvmmsg fills the top of a LIFO free stack
 * (the buffers touched last are still in cache), and buffers come back in any
 * order, because the transport keeps some (packets ahead of order, NAPs
 * delivered in place) while it hands others straight back.
 *
 * GSO saves the sender's stack, but without UDP_GRO the receiving socket cuts
 * the run up again (udp_queue_rcv_skb), and every datagram is queued, read and
 * freed on its own. With UDP_GRO the run stays one skb, read whole into a
 * 64 KiB landing buffer with a cmsg giving the segment size, and its datagrams
 * are lent from there: a refcount per landing buffer and a bit per lent
 * datagram, the handle naming both. Keeping one datagram holds the whole
 * buffer, though, and the transport keeps some for as long as a lost packet
 * takes to come again: a caller that keeps one datagram out of each of
 * nbig reads would starve the socket. So datagrams that came alone, and all
 * of them when few landing buffers are free, are copied into the ordinary
 * pool, whose size is the caller's promise (rx_bufs datagrams kept, still
 * receiving). A read is sized to fit the caller's max by the run length seen
 * lately; what does not fit waits in the io, and an empty datagram to itself
 * keeps the fd readable meanwhile, because callers sleep on the fd.
 *
 * GRO costs a lone datagram, though: with UDP_GRO on, the kernel holds each
 * one in its GRO layer before the socket (measured between two namespaces,
 * NAP 8 B ping-pong: 0.15-0.2 us one-way more, the socket's option alone,
 * ulnet's read path aside). So after GRO_OFF_LONE reads in a row that brought
 * one datagram each, the option goes off; reads stay on the landing buffers
 * (cut by the protocol's headers, as a cold read is) until the socket has
 * been found empty, since runs queued before may still be there, and then
 * go to the pool. A read of GRO_ON_BURST datagrams or more turns it on again
 * (the kernel now cuts every run at the socket): bulk traffic is back.
 *
 * The read after an empty one is a recvfrom, with or without GRO: a spinning
 * caller mostly finds nothing, and recvfrom is the cheapest call to find it
 * with (recv_cold). With GRO that read has no cmsg, so the caller's
 * dgram_len (the protocol's headers) says where the run's datagrams end.
 */
#ifndef ULN_LINK_UDP_PRIV_H
#define ULN_LINK_UDP_PRIV_H

#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "link/udp/link_udp.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SO_MEMINFO
#define SO_MEMINFO 55
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif

#define MEMINFO_VARS  9 /* SK_MEMINFO_VARS as of Linux 4.12+ */
#define MEMINFO_DROPS 8 /* SK_MEMINFO_DROPS */

/* A GSO run: the kernel takes up to 64 segments (older kernels' limit) and one
 * IP datagram's worth of bytes; stay clear of both. */
#define GSO_SEGS_MAX  64u
#define GSO_BYTES_MAX 65000u

/* A lone packet up to this size is copied whole and sent with sendto. */
#define LONE_COPY_MAX 512u

/* GRO: a handle with the top bit set names datagram `seg` of landing buffer
 * `buf` as (buf << SEG_BITS) | seg. The kernel puts at most 64 datagrams in
 * one GRO skb (UDP_GRO_CNT_MAX) and a GSO skb that reaches the socket whole
 * has at most UDP_MAX_SEGMENTS (64, 128 in newer kernels); SEG_CAP leaves
 * room. A read of more, which no kernel makes, is dropped as truncated. */
#define GRO_HANDLE   0x80000000u
#define SEG_BITS     8u
#define SEG_CAP      (1u << SEG_BITS)
#define GRO_BUFS_MAX 128u
#define GRO_CTL      128u /* cmsg room per read: UDP_GRO's int, and some slack */
#define GRO_ITER_MAX 4u   /* reads per recv call at most */

union sa_any {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* A peer address in one form whatever the family: IPv4 as ::ffff:a.b.c.d,
 * the scope only for link-local IPv6 (the only addresses it tells apart). */
struct peer_key {
    uint8_t a[16];
    uint32_t scope;
    uint16_t port;
    uint16_t pad_;
};

struct peer {
    union sa_any sa; /* in the socket's family, ready for msg_name */
    socklen_t salen;
    struct peer_key key;
};

/* A landing buffer and the read in it. */
struct gbuf {
    uint32_t len;    /* bytes the read brought */
    uint32_t seg;    /* datagram size: the GRO cmsg's, or len for a lone datagram */
    uint16_t nseg;   /* datagrams in it */
    uint16_t handed; /* ... handed out (lent, copied or dropped), in order */
    uint16_t refs;   /* ... lent from here and not released */
    bool copy;       /* hand its datagrams out as copies where the pool allows */
    int32_t peer;
    uint64_t lent[SEG_CAP / 64];
};

struct link_udp {
    struct uln_link base; /* first: a struct uln_link * is one of these */
    int fd;
    int family;
    unsigned payload_max, stride;
    bool gso;
    bool gro;            /* reads go through the landing buffers (recv_gro) */
    bool gro_cap;        /* GRO asked for and the kernel has it: landing buffers exist */
    bool gro_sock;       /* UDP_GRO is on on the socket now */
    unsigned lone_reads; /* reads in a row that brought one lone datagram */
    struct uln_link_info info;
    struct uln_link_stats st;

    /* peers: dense array, open-addressing index by address */
    struct peer *peers;
    unsigned npeers, max_peers;
    int32_t *htab;
    uint32_t hmask;
    int32_t last_peer; /* a stream comes from one peer: try it first */

    /* receive pool */
    uint8_t *pool;
    unsigned nbufs, nfree;
    uint32_t *free_stack;
    uint8_t *lent;
    union sa_any *rx_sa;
    socklen_t *rx_salen;
    struct mmsghdr rmsg[ULN_LINK_BATCH];
    struct iovec riov[ULN_LINK_BATCH];
    uint32_t rbufs[ULN_LINK_BATCH]; /* the buffers rmsg/riov are set up for */
    unsigned rprep;                 /* how many; 0: set up again */
    bool cold;                      /* the last read found the socket empty */
    uint32_t (*dgram_len)(const uint8_t *buf, uint32_t avail); /* cfg's */

    /* GRO landing buffers */
    uint8_t *gpool;
    struct gbuf *gb;
    union sa_any *gsa;
    socklen_t *gsalen;
    uint32_t *gfree_stack;
    unsigned nbig, ngfree;
    unsigned npinned;            /* landing buffers with refs > 0 */
    unsigned glow;               /* copy while at most this many are free of lent datagrams */
    uint32_t gq[ULN_LINK_BATCH]; /* read, not all handed out yet, in arrival order */
    unsigned gq_n, gq_i;
    unsigned hint; /* datagrams per read lately: sizes the next read */
    union {
        char buf[GRO_CTL];
        struct cmsghdr align;
    } rctl[ULN_LINK_BATCH];
    union sa_any wake_sa; /* its own address (loopback when bound to any) */
    socklen_t wake_salen;
    struct peer_key wake_key;
    bool wake_out; /* an empty datagram to itself is on its way (with wake_efd: the
                      eventfd is readable) */
    /* A connected socket takes no datagram from itself: its wake-up is an
     * eventfd instead, beside the socket in the fds to poll; -1: none. */
    int wake_efd;

    /* cfg's one_peer: the socket is connected to peer conn_peer (-1: not) */
    bool one_peer;
    int32_t conn_peer;

    /* send scratch, reused by every call */
    uint8_t lone[LONE_COPY_MAX];
    struct mmsghdr smsg[ULN_LINK_BATCH];
    struct iovec siov[ULN_LINK_BATCH * ULN_LINK_IOV_WIRE];
    uint32_t spkts[ULN_LINK_BATCH]; /* fast path: packets per message */
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } sctl[ULN_LINK_BATCH];
};

/* peers.c: the peer table */
bool uln_link_udp_sa_key(const struct sockaddr *sa, socklen_t len, struct peer_key *k);
int uln_link_udp_find_key(const struct link_udp *io, const struct peer_key *k);
int uln_link_udp_add_peer(struct uln_link *l, const void *addr, socklen_t len);
int uln_link_udp_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len);
int uln_link_udp_find_peer(const struct uln_link *l, const void *addr, socklen_t len);
void uln_link_udp_disconnect(struct link_udp *io);
void uln_link_udp_one_peer(struct uln_link *l, bool on);

/* send.c: the send half */
int uln_link_udp_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n);

/* recv.c: the receive half */
int uln_link_udp_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max);
const void *uln_link_udp_rx_addr(const struct uln_link *l, uint32_t handle, socklen_t *len);
int uln_link_udp_rx_release(struct uln_link *l, uint32_t handle);
int uln_link_udp_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                         struct uln_link_rx *out);

#endif
