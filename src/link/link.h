/*
 * link.h - the seam under the UDP transport: a link moves datagrams between
 * this endpoint and a small table of peers, and knows nothing of keys, CQs or
 * reliability (src/rel does that, src/transport/udp glues them). The UDP
 * transport speaks only this interface, so another link slots in below it
 * with no change above.
 *
 *   udp/       one UDP socket: sendmmsg/recvmmsg, GSO and GRO
 *   xdp/       an AF_XDP socket: UMEM frames, Ethernet/IPv4/UDP built here
 *   fault.c    drops, duplicates and reorders what it sends, seeded; wraps
 *              whichever link select.c chose (when ULN_FAULT is set)
 *   select.c   where the link under an endpoint is chosen
 *
 * The contract every link keeps:
 *
 *   peers     added by an opaque address blob: a sockaddr for link_udp; an
 *             AF_XDP link would take MAC + IP + port. Ids are dense, 0, 1, ...
 *   send      a batch of packets, each 1..ULN_LINK_IOV_MAX iovecs (one more
 *             below a sealing link: ULN_LINK_IOV_WIRE) gathered
 *             from the caller's memory. It returns how many packets it took
 *             from the front (sent, or lost for good and counted: the link is
 *             lossy, rel recovers); fewer than asked means "full, try later"
 *             (POLLOUT on the fd, or the next progress pass). The caller's
 *             memory is its own again when send returns: a link that must
 *             place the bytes in memory of its own (AF_XDP's UMEM frames)
 *             copies them inside send - the one copy such a link cannot avoid
 *             with a gather interface; building packets in link-owned frames
 *             would be a reserve/commit pair added next to send, not a change
 *             to it.
 *   receive   received datagrams are LENT, never copied out: recv hands out
 *             {buf, len, peer, handle} pointing into the link's memory, and
 *             the caller gives each back with rx_release, in any order, when
 *             it is done - maybe much later (rel keeps packets that came
 *             ahead of their turn). That is exactly AF_XDP's model: a lent
 *             buffer is a UMEM frame on the fill ring's side of the fence, the
 *             release puts it back. A link must keep receiving while the
 *             caller holds up to the rx_bufs it was opened with.
 *   sleeping  fds are what to poll for input (one descriptor, or a few:
 *             the AF_XDP link also has its bound UDP socket), handed out
 *             for a poll() that lasts one sleep, never for an epoll set to
 *             keep: a socket in an epoll set costs every packet it receives
 *             a wake-up callback in the kernel (~0.25 us a NAP one-way over
 *             AF_XDP). wait sleeps on them, shortened by anything the link
 *             itself must do in time (held-back packets).
 *   numbers   payload_max is the largest datagram; info and stats say what
 *             the link is and did, in the fields that apply to it.
 *
 * Errors are negative errno values. One thread per link.
 */
#ifndef ULN_LINK_H
#define ULN_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define ULN_LINK_IOV_MAX 3u /* iovecs per packet: header + two payload pieces */
/* What a link below a sealing link (seal/link_seal.h) takes: one more, the
 * trailer. Every link accepts this many; callers above give at most
 * ULN_LINK_IOV_MAX. */
#define ULN_LINK_IOV_WIRE (ULN_LINK_IOV_MAX + 1u)
#define ULN_LINK_BATCH    64u /* packets a link moves per system call at most */

/* One outgoing datagram: its bytes are iov[0..niov) concatenated. */
struct uln_link_pkt {
    int32_t peer;  /* from uln_link_add_peer */
    uint32_t niov; /* 1..ULN_LINK_IOV_MAX (..ULN_LINK_IOV_WIRE below a sealing link) */
    struct iovec iov[ULN_LINK_IOV_WIRE];
};

/* The datagram's length (saturated: a packet that long is refused anyway). */
static inline uint32_t uln_link_pkt_len(const struct uln_link_pkt *p)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->niov; i++)
        n += p->iov[i].iov_len;
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* One received datagram, lent to the caller until uln_link_rx_release. */
struct uln_link_rx {
    uint8_t *buf; /* len bytes are the datagram; write only to those: the bytes
                     after them may be the next datagram (GRO) */
    uint32_t len;
    int32_t peer;    /* -1: a source not in the peer table (see uln_link_rx_addr) */
    uint32_t handle; /* give it back with uln_link_rx_release */
};

/* What a link is, after open. */
struct uln_link_info {
    int family;           /* AF_INET or AF_INET6 (dual-stack when bound to any) */
    unsigned mtu;         /* in use */
    unsigned payload_max; /* the largest datagram */
    int rcvbuf, sndbuf;   /* what the kernel granted (it doubles requests) */
    bool gso;             /* UDP_SEGMENT is used (cleared if the kernel refuses it) */
    bool gro;             /* UDP_GRO is on */
    unsigned gro_bufs;    /* with gro: landing buffers of ULN_LINK_UDP_GRO_BUF bytes */
    size_t rx_mem;        /* receive memory: pool slots + landing buffers */
    bool busy_poll;       /* SO_BUSY_POLL was accepted */
    bool fault;           /* a fault injector wraps the link */
    char ifname[16];      /* where the MTU came from; "" when configured */
    char kind[8];         /* "udp" or "xdp" ("" from a link that does not say: udp) */
    char xdp_mode[32];    /* with xdp: "native|generic, copy|zero-copy, queue Q" */
};

/* Everything moved, refused or dropped. Kernel-side drops (socket buffer
 * full) are read from the socket when the counters are fetched. */
struct uln_link_stats {
    /* sending */
    uint64_t tx_pkts; /* datagrams handed to the kernel (faulty copies included) */
    uint64_t tx_bytes;
    uint64_t tx_calls;    /* send system calls (sendmmsg; sendto for a lone packet) */
    uint64_t tx_lone;     /* ... sendto of one packet sent alone */
    uint64_t tx_gso_msgs; /* ... messages that were a GSO run of several datagrams */
    uint64_t tx_gso_pkts; /* ... datagrams they carried */
    uint64_t tx_again;    /* sends cut short by a full socket (EAGAIN/ENOBUFS/EINTR) */
    uint64_t tx_err;      /* datagrams the kernel refused for good; taken as lost */
    int last_tx_errno;    /* the errno of the latest such refusal */
    uint32_t gso_off;     /* 1: the kernel refused GSO; the link went on without */
    /* fault injection (sending side; fault.c) */
    uint64_t fault_drop;    /* datagrams not sent */
    uint64_t fault_dup;     /* extra copies sent */
    uint64_t fault_reorder; /* datagrams held back and sent after a later one */
    uint64_t fault_late;    /* ... of which released by the delay bound, not by a later one */
    uint64_t fault_nohold;  /* reorder picked but every hold slot was taken: sent in order */
    /* receiving */
    uint64_t rx_pkts; /* datagrams given to the caller (unknown sources included) */
    uint64_t rx_bytes;
    uint64_t rx_calls;        /* read system calls (recvmmsg; recvfrom when cold) */
    uint64_t rx_empty;        /* ... that found nothing */
    uint64_t rx_cold;         /* reads by recvfrom, the read after an empty one */
    uint64_t rx_gro_msgs;     /* reads that brought several datagrams (GRO) */
    uint64_t rx_gro_segs;     /* ... datagrams they brought */
    uint64_t rx_copied;       /* datagrams copied out of a landing buffer (GRO) */
    uint64_t rx_gro_off;      /* times the socket's UDP_GRO went off for lone traffic */
    uint64_t rx_gro_on;       /* ... and on again for a burst */
    uint64_t rx_wakes;        /* empty datagrams sent to itself to keep the fd readable */
    uint64_t rx_pool_empty;   /* recv calls refused: every buffer is lent out */
    uint64_t rx_trunc;        /* datagrams longer than payload_max, or GRO reads
                                 cut short (counted as one): dropped */
    uint64_t rx_unknown;      /* datagrams from sources not in the peer table */
    uint64_t rx_err;          /* recvmmsg errors other than EAGAIN */
    uint64_t rx_bad_release;  /* handles released twice or never lent */
    uint64_t rx_kernel_drops; /* the sockets' own drop counts (receive buffer or ring full) */
    uint64_t rx_bad_frame;    /* AF_XDP: frames that were not a whole, intact ulnet
                                 datagram for us (headers, lengths, checksums): dropped */
    uint64_t rx_sock;         /* AF_XDP: datagrams read from the link's bound UDP socket
                                 (same-host peers, what the XDP program passed) */
    uint64_t rx_refused_auth; /* sealing link: datagrams that did not open (forged,
                                 altered, replayed, too old): dropped */
    uint64_t rx_order_held;   /* AF_XDP: times a frame waited for datagrams the XDP
                                 program passed to the bound socket before it */
    uint64_t rx_order_gaps;   /* ... of which the datagrams never came (the kernel
                                 dropped them): the frame went on after a tick */
    uint64_t rx_ring_late;    /* AF_XDP: times the bound socket's datagrams waited for
                                 frames redirected before them, not yet on the ring */
    uint64_t rx_ring_gaps;    /* ... of which the frames never came (the kernel
                                 dropped them): the datagrams went on after a tick */
};

struct uln_link;

/* What a link does; the wrappers below say the contract of each. */
struct uln_link_ops {
    int (*send)(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n);
    int (*flush)(struct uln_link *l);
    int (*recv)(struct uln_link *l, struct uln_link_rx *out, unsigned max);
    int (*rx_release)(struct uln_link *l, uint32_t handle);
    const void *(*rx_addr)(const struct uln_link *l, uint32_t handle, socklen_t *len);
    /* The tests' library only (CMakeLists.txt); NULL in the shipped ones. The
     * member is there in every build: files with and without ULN_TEST_HOOKS
     * meet in the tests' library, and must agree on this table's layout. */
    int (*rx_lend)(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                   struct uln_link_rx *out);
    int (*add_peer)(struct uln_link *l, const void *addr, socklen_t len);
    int (*set_peer)(struct uln_link *l, int peer, const void *addr, socklen_t len);
    int (*find_peer)(const struct uln_link *l, const void *addr, socklen_t len);
    int (*fds)(const struct uln_link *l, int *fds, int max);
    int (*wait)(struct uln_link *l, int timeout_ms);
    int (*local)(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len);
    void (*info)(const struct uln_link *l, struct uln_link_info *info);
    void (*stats)(const struct uln_link *l, struct uln_link_stats *st);
    void (*close)(struct uln_link *l);
    /* NULL: the link has no connected path (uln_link_one_peer) */
    void (*one_peer)(struct uln_link *l, bool on);
};

/* Every link starts with this; the rest of it is the link's own. */
struct uln_link {
    const struct uln_link_ops *ops;
    unsigned payload_max;
};

/* Send pkts[0..n) in order. Returns how many were consumed from the front:
 * sent, refused for good (counted in tx_err and lost, as the reliability
 * layer expects of a lossy link), or taken by a fault injector. Fewer than n
 * (maybe 0): the link is full; send the rest later. Nothing is sent and
 * -EINVAL (bad peer id or niov) or -EMSGSIZE (longer than payload_max) is
 * returned if any packet is malformed. The caller's memory may be reused as
 * soon as this returns. */
static inline int uln_link_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    return l->ops->send(l, pkts, n);
}

/* Send what the link holds back (a fault injector's reordered packets) whose
 * time has come; returns how many are still held (0 for most links). */
static inline int uln_link_flush(struct uln_link *l)
{
    return l->ops->flush(l);
}

/* Receive up to max datagrams without blocking; returns how many (0: nothing
 * waiting, or every buffer is lent out - rx_pool_empty counts that; then
 * release buffers before sleeping on the fd). Datagrams come in the order the
 * link got them; truncated ones are dropped and counted, never returned. */
static inline int uln_link_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    return l->ops->recv(l, out, max);
}

/* Give a datagram back, in any order. 0, or -EINVAL if it is not lent out. */
static inline int uln_link_rx_release(struct uln_link *l, uint32_t handle)
{
    return l->ops->rx_release(l, handle);
}

/* The source address blob of a received datagram, valid until it is
 * released: to add_peer an unknown source (peer -1), e.g. a rank saying hello. */
static inline const void *uln_link_rx_addr(const struct uln_link *l, uint32_t handle,
                                           socklen_t *len)
{
    return l->ops->rx_addr(l, handle, len);
}

#ifdef ULN_TEST_HOOKS
/* For tests and fuzzing only: lend a buffer holding a copy of buf[0..len) as
 * if it had come from peer (-1: a source not in the table), so a test can run
 * any bytes through the receive path above the link. Released like any
 * datagram. 0, -EMSGSIZE, -EINVAL (no such peer) or -ENOBUFS (all lent). */
static inline int uln_link_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
                                   struct uln_link_rx *out)
{
    return l->ops->rx_lend(l, peer, buf, len, out);
}
#endif

/* Peers. add: the next id (0, 1, ...), -EEXIST (that address has an id),
 * -ENOSPC (table full), -EAFNOSUPPORT (a family the link cannot reach) or
 * -EINVAL. set: point an existing id at a new address (a peer restarted
 * elsewhere). find: the id of a source address, or -1. */
static inline int uln_link_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    return l->ops->add_peer(l, addr, len);
}
static inline int uln_link_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    return l->ops->set_peer(l, peer, addr, len);
}
static inline int uln_link_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    return l->ops->find_peer(l, addr, len);
}

/* Whether the caller hears only the peers it adds (on), so the link may
 * connect its socket while its table holds one peer (link_udp.h,
 * one_peer), or may hear strangers (off: unconnect, and stay so). A link
 * without a connected path ignores it. */
static inline void uln_link_one_peer(struct uln_link *l, bool on)
{
    if (l->ops->one_peer) l->ops->one_peer(l, on);
}

/* The descriptors to poll for input, up to max (ULN_LINK_FDS_MAX is room
 * for every link's) into fds: how many. */
#define ULN_LINK_FDS_MAX 2
static inline int uln_link_fds(const struct uln_link *l, int *fds, int max)
{
    return l->ops->fds(l, fds, max);
}

/* The first of them: the socket packets are sent and received on. */
static inline int uln_link_fd(const struct uln_link *l)
{
    int fds[ULN_LINK_FDS_MAX];
    return uln_link_fds(l, fds, ULN_LINK_FDS_MAX) > 0 ? fds[0] : -1;
}

/* Sleep until input is waiting or timeout_ms passes (-1: no limit). Returns
 * 1 (input, or datagrams wait in the link), 0 (timeout) or -errno. */
static inline int uln_link_wait(struct uln_link *l, int timeout_ms)
{
    return l->ops->wait(l, timeout_ms);
}

/* The link's own address (a sockaddr for link_udp). */
static inline int uln_link_local(const struct uln_link *l, struct sockaddr_storage *ss,
                                 socklen_t *len)
{
    return l->ops->local(l, ss, len);
}

static inline unsigned uln_link_payload_max(const struct uln_link *l)
{
    return l->payload_max;
}

static inline void uln_link_info(const struct uln_link *l, struct uln_link_info *info)
{
    l->ops->info(l, info);
}

static inline void uln_link_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    l->ops->stats(l, st);
}

static inline void uln_link_close(struct uln_link *l)
{
    if (l) l->ops->close(l);
}

#endif
