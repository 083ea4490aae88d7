/*
 * udp_io.h - the datagram layer under the UDP transport: it moves packets
 * between one UDP socket and a small table of peers, and knows nothing of
 * keys, CQs or reliability (src/rel does that, the transport glues them).
 *
 *   open      one non-blocking socket, a receive pool, a peer table; every
 *             allocation happens here, none per packet afterwards
 *   send      a batch of packets, each 1..3 iovecs gathered straight from the
 *             caller's memory (header + payload pieces, no bounce copy), in
 *             one sendmmsg per 64; runs of equal-size packets to one peer go
 *             as one UDP_SEGMENT (GSO) message where the kernel takes it
 *   recv      recvmmsg into pool buffers; each datagram is lent to the caller
 *             with its peer id until uln_udp_io_rx_release, in any order; with
 *             UDP_GRO (GRO) one read brings a run of datagrams the kernel kept
 *             together, lent one by one from the buffer it landed in
 *   sleep     poll/epoll on uln_udp_io_fd, or uln_udp_io_wait
 *   faults    drop / duplicate / reorder outgoing packets, seeded, from
 *             ULN_FAULT="drop=P,dup=P,reorder=P,delay=US,seed=N"
 *
 * Errors are negative errno values. One thread per io object.
 */
#ifndef ULN_UDP_IO_H
#define ULN_UDP_IO_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define ULN_UDP_IO_IOV_MAX 3u     /* iovecs per packet: header + two payload pieces */
#define ULN_UDP_IO_BATCH   64u    /* datagrams per sendmmsg/recvmmsg */
#define ULN_UDP_IO_MTU_CAP 9000u  /* MTU taken from an interface is capped here (loopback) */
#define ULN_UDP_IO_MTU_MIN 576u   /* smallest MTU accepted (IPv4's minimum datagram) */
#define ULN_UDP_IO_MTU_MAX 65535u /* largest: an IP datagram's length field */

/* The MTU a socket takes from its interface (m <= 0: unknown, then 1500),
 * kept within [ULN_UDP_IO_MTU_MIN, ULN_UDP_IO_MTU_CAP]. A configured MTU is
 * used as given instead. */
static inline unsigned uln_udp_io_iface_mtu(int m)
{
    unsigned mtu = m > 0 ? (unsigned)m : 1500u;
    return mtu > ULN_UDP_IO_MTU_CAP   ? ULN_UDP_IO_MTU_CAP
           : mtu < ULN_UDP_IO_MTU_MIN ? ULN_UDP_IO_MTU_MIN
                                      : mtu;
}

struct uln_udp_io; /* opaque */

struct uln_udp_io_cfg {
    const char *addr;      /* bind address, IPv4 or IPv6 literal ("fe80::1%eth0" too);
                              NULL: any, dual-stack IPv6 where the host has it */
    uint16_t port;         /* 0: ephemeral */
    unsigned mtu;          /* 0: the bound interface's (any: the smallest of the up,
                              non-loopback ones), capped to ULN_UDP_IO_MTU_CAP */
    unsigned rx_bufs;      /* receive pool, datagrams; 0: 512 */
    unsigned max_peers;    /* peer table size; 0: 256 */
    bool busy_poll;        /* SO_BUSY_POLL (+ prefer) where allowed */
    unsigned busy_poll_us; /* with busy_poll; 0: 50 */
    bool no_gso;           /* never use UDP_SEGMENT */
    bool no_gro;           /* never use UDP_GRO; when false, ULN_UDP_GRO=0 in the
                              environment turns it off too (=1: on, the default;
                              anything else: open fails with -EINVAL) */
    const char *fault;     /* fault spec; NULL: getenv("ULN_FAULT"); "": none */
    bool adopt;            /* use `fd`, a UDP socket already bound by the caller (who
                              reserved its port); addr and port are then ignored */
    int fd;                /* with adopt: the io owns it from then on, and closes it */
};

/* The datagram layer's view of the socket after open. */
struct uln_udp_io_info {
    int family;           /* AF_INET or AF_INET6 (dual-stack when bound to any) */
    unsigned mtu;         /* in use */
    unsigned payload_max; /* mtu - IP header - UDP header: the largest datagram */
    int rcvbuf, sndbuf;   /* what the kernel granted (it doubles requests) */
    bool gso;             /* UDP_SEGMENT is used (cleared if the kernel refuses it) */
    bool gro;             /* UDP_GRO is on (not with faults, no_gro, ULN_UDP_GRO=0) */
    unsigned gro_bufs;    /* with gro: landing buffers of ULN_UDP_IO_GRO_BUF bytes */
    size_t rx_mem;        /* receive memory: rx_bufs pool slots + the landing buffers */
    bool busy_poll;       /* SO_BUSY_POLL was accepted */
    bool fault;           /* fault injection is on */
    char ifname[16];      /* where the MTU came from; "" when configured */
};

/* One outgoing datagram: its bytes are iov[0..niov) concatenated. */
struct uln_udp_io_pkt {
    int32_t peer;  /* from uln_udp_io_add_peer */
    uint32_t niov; /* 1..ULN_UDP_IO_IOV_MAX */
    struct iovec iov[ULN_UDP_IO_IOV_MAX];
};

/* Receiving with GRO. A read can hold up to 64 KiB: several datagrams of
 * one size back to back (the last may be shorter), all from one source. It
 * lands in one of gro_bufs landing buffers, and each datagram is lent from
 * there where it lies (no copy); the buffer is read into again once every one
 * of them is released. A datagram that came alone is copied into a pool slot
 * instead (it would hold 64 KiB for a few bytes), and so is every datagram
 * while at most a quarter of the landing buffers are free of lent ones, so
 * that a caller keeping datagrams (out of order, waiting for their turn) can
 * always keep rx_bufs of them and still receive. When the pool slots are
 * gone too, datagrams are lent from landing buffers regardless.
 *
 * Memory: gro_bufs = (ULN_UDP_IO_RX_MEM - rx_bufs x payload_max, rounded up
 * to 64) / ULN_UDP_IO_GRO_BUF, within [ULN_UDP_IO_GRO_BUFS_MIN, 128]: with
 * the default 512 pool slots, 8 MiB in all at MTU 1500 or 9000 (116 or 57
 * landing buffers); a larger rx_bufs gets the minimum on top.
 *
 * A read of more datagrams than recv's max leaves the rest waiting in the io,
 * handed out first by the next recv. While any wait there, the fd is kept
 * readable: the io sends itself an empty datagram (from its own address and
 * port, swallowed when read), so a caller sleeping on the fd is not left
 * asleep with datagrams waiting; uln_udp_io_wait returns at once. */
#define ULN_UDP_IO_GRO_BUF      65536u     /* the largest UDP payload fits */
#define ULN_UDP_IO_RX_MEM       (8u << 20) /* receive memory aimed at by default */
#define ULN_UDP_IO_GRO_BUFS_MIN 16u

/* One received datagram, lent to the caller until uln_udp_io_rx_release. */
struct uln_udp_io_rx {
    uint8_t *buf; /* len bytes are the datagram; write only to those: with GRO
                     the bytes after them may be the next datagram */
    uint32_t len;
    int32_t peer;    /* -1: a source not in the peer table (see uln_udp_io_rx_addr) */
    uint32_t handle; /* give it back with uln_udp_io_rx_release */
};

/* Everything moved, refused or dropped. Kernel-side drops (socket buffer
 * full) are read from the socket when the counters are fetched. */
struct uln_udp_io_stats {
    /* sending */
    uint64_t tx_pkts; /* datagrams handed to the kernel (faulty copies included) */
    uint64_t tx_bytes;
    uint64_t tx_calls;    /* sendmmsg system calls */
    uint64_t tx_gso_msgs; /* ... messages that were a GSO run of several datagrams */
    uint64_t tx_gso_pkts; /* ... datagrams they carried */
    uint64_t tx_again;    /* sends cut short by a full socket (EAGAIN/ENOBUFS/EINTR) */
    uint64_t tx_err;      /* datagrams the kernel refused for good; taken as lost */
    int last_tx_errno;    /* the errno of the latest such refusal */
    uint32_t gso_off;     /* 1: the kernel refused GSO; the io went on without */
    /* fault injection (sending side) */
    uint64_t fault_drop;    /* datagrams not sent */
    uint64_t fault_dup;     /* extra copies sent */
    uint64_t fault_reorder; /* datagrams held back and sent after a later one */
    uint64_t fault_late;    /* ... of which released by the delay bound, not by a later one */
    uint64_t fault_nohold;  /* reorder picked but every hold slot was taken: sent in order */
    /* receiving */
    uint64_t rx_pkts; /* datagrams given to the caller (unknown sources included) */
    uint64_t rx_bytes;
    uint64_t rx_calls;        /* recvmmsg system calls */
    uint64_t rx_empty;        /* ... that found nothing */
    uint64_t rx_gro_msgs;     /* reads that brought several datagrams (GRO) */
    uint64_t rx_gro_segs;     /* ... datagrams they brought */
    uint64_t rx_copied;       /* datagrams copied out of a landing buffer (GRO) */
    uint64_t rx_wakes;        /* empty datagrams sent to itself to keep the fd readable */
    uint64_t rx_pool_empty;   /* recv calls refused: every buffer is lent out */
    uint64_t rx_trunc;        /* datagrams longer than payload_max, or GRO reads
                                 cut short (counted as one): dropped */
    uint64_t rx_unknown;      /* datagrams from sources not in the peer table */
    uint64_t rx_err;          /* recvmmsg errors other than EAGAIN */
    uint64_t rx_bad_release;  /* handles released twice or never lent */
    uint64_t rx_kernel_drops; /* the socket's own drop count (receive buffer full) */
};

/* Spec of the fault injector, parsed from "drop=P,dup=P,reorder=P,delay=US,seed=N":
 * P is a probability in [0, 1] ("0.02") or a percentage ("2%"); each key at
 * most once, in any order; "" means no faults. delay is the longest a held-back
 * (reordered) datagram waits for a later one to the same peer, in us (default
 * 1000); seed makes the decisions (default 1): the same seed and the same
 * sequence of packets give the same faults, however the sends are cut short.
 * At most 16 datagrams are held at once (a slot freed while a send call runs
 * is taken again from the next call); past that, reorder picks count in
 * fault_nohold and go in order. */
struct uln_udp_fault {
    double drop, dup, reorder;
    uint64_t delay_us;
    uint64_t seed;
};

/* 0, or -EINVAL with a one-line reason in err (if errlen > 0). */
int uln_udp_fault_parse(const char *spec, struct uln_udp_fault *f, char *err, size_t errlen);

/* Returns 0, -EINVAL (bad address, MTU or fault spec: a message on stderr says
 * which), -ENOMEM, or a socket error (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
int uln_udp_io_open(const struct uln_udp_io_cfg *cfg, struct uln_udp_io **out);
void uln_udp_io_close(struct uln_udp_io *io);

int uln_udp_io_fd(const struct uln_udp_io *io);
int uln_udp_io_local(const struct uln_udp_io *io, struct sockaddr_storage *ss, socklen_t *len);
unsigned uln_udp_io_payload_max(const struct uln_udp_io *io);
void uln_udp_io_info(const struct uln_udp_io *io, struct uln_udp_io_info *info);
void uln_udp_io_stats(const struct uln_udp_io *io, struct uln_udp_io_stats *st);

/* Peers. add: the next id (0, 1, ...), -EEXIST (that address has an id),
 * -ENOSPC (table full), -EAFNOSUPPORT (IPv6 peer on an IPv4 socket) or -EINVAL.
 * set: point an existing id at a new address (a peer restarted elsewhere).
 * IPv4 peers of a dual-stack socket may be given either way (1.2.3.4 or
 * ::ffff:1.2.3.4): they are the same peer. */
int uln_udp_io_add_peer(struct uln_udp_io *io, const struct sockaddr *sa, socklen_t len);
int uln_udp_io_set_peer(struct uln_udp_io *io, int peer, const struct sockaddr *sa, socklen_t len);
/* The id of a source address, or -1. */
int uln_udp_io_find_peer(const struct uln_udp_io *io, const struct sockaddr *sa, socklen_t len);

/* Send pkts[0..n) in order. Returns how many were consumed from the front:
 * sent, or refused for good by the kernel (counted in tx_err and lost, as the
 * reliability layer expects of a lossy link), or taken by the fault injector.
 * Fewer than n (maybe 0): the socket is full (EAGAIN/ENOBUFS); send the rest
 * later (POLLOUT on the fd says when). Nothing is sent and -EINVAL (bad peer
 * id or niov) or -EMSGSIZE (longer than payload_max) is returned if any packet
 * is malformed. The caller's memory may be reused as soon as this returns. */
int uln_udp_io_send(struct uln_udp_io *io, const struct uln_udp_io_pkt *pkts, unsigned n);

/* Receive up to max datagrams without blocking; returns how many (0: nothing
 * waiting, or every pool buffer is lent out - with GRO: every landing buffer
 * holds lent datagrams - rx_pool_empty counts that; the socket then stays
 * readable, so release buffers before sleeping on the fd). Datagrams come in
 * the order the socket got them. Truncated datagrams are dropped and counted,
 * never returned. */
int uln_udp_io_recv(struct uln_udp_io *io, struct uln_udp_io_rx *out, unsigned max);

/* The source address of a received datagram, valid until it is released: to
 * add_peer an unknown source (peer -1), e.g. a rank saying hello. */
const struct sockaddr *uln_udp_io_rx_addr(const struct uln_udp_io *io, uint32_t handle,
                                          socklen_t *len);

/* Give a datagram back, in any order (with GRO: each datagram of a read on
 * its own). 0, or -EINVAL if it is not lent out. */
int uln_udp_io_rx_release(struct uln_udp_io *io, uint32_t handle);

#ifdef ULN_TEST_HOOKS
/* For tests and fuzzing only (ULN_TEST_HOOKS): lend a pool buffer holding a copy of buf[0..len)
 * as if the socket had brought it from peer (-1: a source not in the table),
 * so a test can run any bytes through the receive path above this layer.
 * Released with uln_udp_io_rx_release like any datagram. 0, -EMSGSIZE (longer
 * than payload_max), -EINVAL (no such peer) or -ENOBUFS (every buffer lent). */
int uln_udp_io_rx_lend(struct uln_udp_io *io, int32_t peer, const void *buf, uint32_t len,
                       struct uln_udp_io_rx *out);
#endif

/* Sleep until the socket is readable or timeout_ms passes (-1: no limit).
 * Returns 1 (readable, or datagrams wait in the io), 0 (timeout) or -errno.
 * With datagrams held back by the fault injector the sleep is cut to their
 * delay bound. */
int uln_udp_io_wait(struct uln_udp_io *io, int timeout_ms);

/* Send the fault injector's held-back datagrams whose delay bound has passed
 * (send and recv do this too); returns how many are still held. */
int uln_udp_io_flush(struct uln_udp_io *io);

#ifdef ULN_TEST_HOOKS
/* Tests only (built with ULN_TEST_HOOKS): send through fn instead of
 * sendmmsg, to cut batches short as a full socket would; NULL: sendmmsg. */
void uln_udp_io_test_hook_sendmmsg(int (*fn)(int, struct mmsghdr *, unsigned int, int));
/* Landing buffers for ios opened from now on (at least 2); 0: as documented. */
void uln_udp_io_test_hook_gro_bufs(unsigned n);
#endif

#endif
