/*
 * link_udp.h - the socket link (link.h's contract): one UDP socket, a receive
 * pool, a peer table; every allocation happens at open, none per packet.
 *
 *   send      each packet's 1..3 iovecs gathered straight from the caller's
 *             memory (no bounce copy), one sendmmsg per 64; runs of
 *             equal-size packets to one peer go as one UDP_SEGMENT (GSO)
 *             message where the kernel takes it
 *   recv      recvmmsg into pool buffers, each datagram lent with its peer id;
 *             with UDP_GRO one read brings a run of datagrams the kernel kept
 *             together, lent one by one from the buffer it landed in
 *   faults    none here: link/select.c wraps whichever link it opens in the
 *             fault injector (link/fault.h), which decides each datagram's
 *             fate before GSO gathers the survivors
 *
 * It reads no settings: whoever opens it (link/select.c, from struct uln_params)
 * passes them in the configuration.
 */
#ifndef ULN_LINK_UDP_H
#define ULN_LINK_UDP_H

#include <netinet/in.h>

#include "link/link.h"

#define ULN_LINK_UDP_MTU_CAP 9000u  /* MTU taken from an interface is capped here (loopback) */
#define ULN_LINK_UDP_MTU_MIN 576u   /* smallest MTU accepted (IPv4's minimum datagram) */
#define ULN_LINK_UDP_MTU_MAX 65535u /* largest: an IP datagram's length field */

/* The MTU a socket takes from its interface (m <= 0: unknown, then 1500),
 * kept within [ULN_LINK_UDP_MTU_MIN, ULN_LINK_UDP_MTU_CAP]. A configured MTU
 * is used as given instead. */
static inline unsigned uln_link_udp_iface_mtu(int m)
{
    unsigned mtu = m > 0 ? (unsigned)m : 1500u;
    return mtu > ULN_LINK_UDP_MTU_CAP   ? ULN_LINK_UDP_MTU_CAP
           : mtu < ULN_LINK_UDP_MTU_MIN ? ULN_LINK_UDP_MTU_MIN
                                        : mtu;
}

struct uln_link_udp_cfg {
    const char *addr;      /* bind address, IPv4 or IPv6 literal ("fe80::1%eth0" too);
                              NULL: any, dual-stack IPv6 where the host has it */
    uint16_t port;         /* 0: ephemeral */
    unsigned mtu;          /* 0: the bound interface's (any: the smallest of the up,
                              non-loopback ones), capped to ULN_LINK_UDP_MTU_CAP */
    unsigned rx_bufs;      /* receive pool, datagrams; 0: 512 */
    unsigned max_peers;    /* peer table size; 0: 256 */
    bool busy_poll;        /* SO_BUSY_POLL (+ prefer) where allowed */
    unsigned busy_poll_us; /* with busy_poll; 0: 50 */
    bool no_gso;           /* never use UDP_SEGMENT */
    bool no_gro;           /* never use UDP_GRO (ULN_UDP_GRO=0) */
    /* The caller hears only the peers it adds (a job's endpoint whose job
     * has one rank on another host; with no job, until uln_link_one_peer
     * says otherwise): while the table holds one peer, the socket is
     * connected to it (peers.c), so a send to it takes the kernel's
     * connected path, with no route lookup per datagram; datagrams from
     * any other source are then dropped by the kernel, unseen and
     * uncounted here. A second peer undoes it. */
    bool one_peer;
    bool adopt; /* use `fd`, a UDP socket already bound by the caller (who
                   reserved its port); addr and port are then ignored */
    int fd;     /* with adopt: the link owns it from then on, and closes it */
    /* Where the datagram at buf ends, as the protocol's headers say (0: they
     * do not say it within avail). With it, a GRO socket that the last read
     * found empty is read next by recvfrom, the cheapest call (recv.c,
     * recv_cold), which gives no segment size: this cuts the run instead.
     * NULL: such reads stay recvmmsg, with the kernel's cmsg. */
    uint32_t (*dgram_len)(const uint8_t *buf, uint32_t avail);
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
 * Memory: gro_bufs = (ULN_LINK_UDP_RX_MEM - rx_bufs x payload_max, rounded up
 * to 64) / ULN_LINK_UDP_GRO_BUF, within [ULN_LINK_UDP_GRO_BUFS_MIN, 128]:
 * with the default 512 pool slots, 8 MiB in all at MTU 1500 or 9000 (116 or
 * 57 landing buffers); a larger rx_bufs gets the minimum on top.
 *
 * A read of more datagrams than recv's max leaves the rest waiting in the
 * link, handed out first by the next recv. While any wait there, the fd is
 * kept readable: the link sends itself an empty datagram (from its own
 * address and port, swallowed when read), so a caller sleeping on the fd is
 * not left asleep with datagrams waiting; uln_link_wait returns at once. */
#define ULN_LINK_UDP_GRO_BUF      65536u     /* the largest UDP payload fits */
#define ULN_LINK_UDP_RX_MEM       (8u << 20) /* receive memory aimed at by default */
#define ULN_LINK_UDP_GRO_BUFS_MIN 16u

/* Returns 0, -EINVAL (bad address or MTU: a message on stderr says which), -ENOMEM, or a socket
 * error (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
int uln_link_udp_open(const struct uln_link_udp_cfg *cfg, struct uln_link **out);

/* Ask for bytes of a socket's buffer (opt SO_RCVBUF or SO_SNDBUF, force_opt
 * its FORCE twin): past the rmem_max/wmem_max limit as root (the FORCE
 * variants need CAP_NET_ADMIN), up to the limit otherwise. Returns what the
 * kernel gave (it doubles the figure for itself), 0 if it would not say. The
 * AF_XDP link sizes its bound UDP socket with it too. */
int uln_link_udp_sock_buf(int fd, int force_opt, int opt, int bytes);

/* Datagrams the kernel dropped for a UDP socket whose receive buffer was full
 * (SK_MEMINFO_DROPS), 0 if it would not say. The AF_XDP link adds its bound
 * socket's to its own. */
uint64_t uln_link_udp_sock_drops(int fd);

#ifdef ULN_TEST_HOOKS
/* Tests only (built with ULN_TEST_HOOKS): send through fn instead of
 * sendmmsg, to cut batches short as a full socket would; NULL: sendmmsg. */
void uln_link_udp_test_hook_sendmmsg(int (*fn)(int, struct mmsghdr *, unsigned int, int));
/* Landing buffers for links opened from now on (at least 2); 0: as documented. */
void uln_link_udp_test_hook_gro_bufs(unsigned n);
#endif

#endif
