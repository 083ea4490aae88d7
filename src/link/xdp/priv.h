/*
 * priv.h - the AF_XDP link's private header (link_xdp.h is its contract):
 * its state and the functions its files share. link.c: the link (peers,
 * rings, send, receive, open); netlink.c: routes and neighbours; program.c:
 * the XDP program's lifecycle; verdict.c: where auto tries AF_XDP; frame.c:
 * the frames. Only with ULN_HAVE_XDP.
 *
 * link_xdp.c - the AF_XDP link (link_xdp.h, link.h).
 *
 * One AF_XDP socket per link, bound to one receive queue of the interface
 * that owns the link's address, with a UMEM of its own: receive frames live
 * on the fill ring until the kernel fills one, then are lent to the caller
 * where they lie (buf points past the frame's headers) and go back to the
 * fill ring when released, in any order; send frames sit on a free stack,
 * are built and put on the TX ring by send, and come back through the
 * completion ring. libxdp's ring helpers carry the memory ordering the rings
 * need (a release store of each producer index, an acquire load of the
 * other side's), so the code here only touches descriptors between a
 * reserve/peek and the submit/release that publishes them.
 *
 * Which frames come here is the XDP program's choice (xdp/ulnet_xdp.bpf.c):
 * it is attached once per interface and process, through libxdp so other
 * programs keep running beside it, and each link puts its (address, port) and
 * its socket into the program's maps. The program goes when the last link on
 * the interface closes; a killed process's program passes everything (its
 * sockets left the XSKMAP with the process), and the next open removes it.
 *
 * Frames are ordinary Ethernet/IPv4/UDP with valid checksums: they cross
 * switches and routers and reach a peer on the socket link as well. The
 * next hop's MAC comes from the kernel's neighbour table (netlink); when it
 * has none, an empty datagram to the peer's discard port makes the kernel
 * resolve it, and packets to the peer are lost meanwhile (tx_err, last_tx_errno
 * EHOSTUNREACH): the reliability layer sends them again.
 *
 * Same-host peers. A peer at one of this host's addresses (the kernel's
 * route to it is RTN_LOCAL: out by lo, where no AF_XDP socket is and no XDP
 * program runs) is "local": its packets go by sendmsg on the bound UDP
 * socket (udp_fd), gathered from the caller's iovecs, and its packets to us
 * arrive there too. So does whatever the XDP program passes to the kernel
 * for our (address, port): a frame that came on another receive queue, a
 * sender's GSO run (longer than the MTU: generic XDP sees it whole). recv
 * reads the socket into landing buffers of the link's own, lent like
 * frames (rx_sock counts them): in every call while the link has a local
 * peer or the last read found something, else at most once per millisecond
 * of the coarse clock, so that a spinning caller with no local peer pays no
 * system call for it in between and such a datagram comes a tick late
 * instead of never. Callers sleep on both sockets (xdp_fds: a poll() per
 * sleep, never an epoll set, link.h); one asleep while such a datagram
 * waits for its tick is woken again at once until then: a short spin, for a
 */
#ifndef ULN_LINK_XDP_PRIV_H
#define ULN_LINK_XDP_PRIV_H

#include <net/if.h> /* before the linux/ headers, which define the same */
#include <errno.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/if_arp.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* verdict.c: the driver of interface ifname (ETHTOOL_GDRVINFO on fd): 0 or -errno. */
#define DRV_NAME_LEN 32
int uln_xdp_driver_of(int fd, const char *ifname, char drv[DRV_NAME_LEN]);

#ifdef ULN_HAVE_XDP

#include "link/xdp/link_xdp.h"
#include "core/clock.h"
#include "link/udp/link_udp.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include "link/xdp/ulnet_xdp.h"
#include "link/xdp/frame.h"

/* The XDP program's object file, built by clang and embedded (CMakeLists.txt). */
extern const unsigned char uln_xdp_obj[];
extern const size_t uln_xdp_obj_len;

#define HDR_LEN ULN_XDP_HDR_LEN
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define UDP_GSO_PAYLOAD_MAX 65507u /* an IPv4 datagram's 65535 less IP and UDP headers */
/* A bounded wait for what the kernel owes: false while it lasts (the first
 * call starts it, until now + len, and counts it in *started), true once it
 * is over (then it is reset for the next). */
static inline bool uln_xdp_wait_over(uint64_t *until, uint64_t now, uint64_t len, uint64_t *started)
{
    if (!*until) {
        *until = now + len;
        (*started)++;
        return false;
    }
    if (now < *until) return false;
    *until = 0;
    return true;
}

/* ulnet_passed's mapping: ULN_XDP_SLOTS byte counts, then as many frame
 * counts, a page at least. */
#define PASSED_MAP_LEN   ((2 * ULN_XDP_SLOTS * sizeof(uint64_t) + 4095u) & ~(size_t)4095u)
#define RX_RING          2048u
#define LEND_BUFS        64u          /* rx_lend's own buffers (tests) */
#define NEIGH_RETRY_NS   2000000ull   /* look a missing MAC up again after 2 ms */
#define NEIGH_PROBE_NS   200000000ull /* and make the kernel resolve it every 200 ms */
#define DISCARD_PORT     9u
#define OWNER_WAIT_NS    10000000000ull /* an attach writes its owner within this */
#define SOCK_READ_NS     1000000ull     /* the bound socket is read this often at least */
#define RING_WAIT_NS     2000000ull     /* the socket waits this long for a frame owed the ring */
#define KICKS_MAX        8u             /* sendto kicks per send call while the TX ring drains */
#define PROGS_MAX        8u             /* interfaces with our program, per process */
#define BUSY_POLL_US     20             /* SO_BUSY_POLL: how long an empty read polls the queue */
#define BUSY_POLL_BUDGET 64             /* SO_BUSY_POLL_BUDGET: frames per poll (a batch) */
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

struct peer {
    uint32_t ip;   /* network order */
    uint16_t port; /* network order */
    bool have_mac;
    bool local; /* an address of this host: AF_XDP cannot reach it (the route leaves
                   by lo), the bound socket does (see the top) */
    uint8_t mac[6];
    uint32_t nh;          /* next hop: the peer or its gateway */
    int err;              /* why it cannot be reached, 0: it can (once the MAC is known) */
    uint64_t next_lookup; /* when to look for the MAC again */
    uint64_t next_probe;  /* when to ask the kernel to resolve it again */
};
/* With 8 to 16 bytes of the index (htab: a power of two at least twice the
 * peers), what a peer costs the link: docs/limits.md and docs/xdp.md say so. */
_Static_assert(sizeof(struct peer) == 40, "the docs give a peer's entry as 40 bytes");

/* The program attached to one interface by this process. */
struct xprog {
    int ifindex;
    struct xdp_program *prog;
    struct bpf_object *obj; /* prog's: libxdp does not own an object it was given */
    enum xdp_attach_mode mode;
    int xsks_fd, ports_fd;
    uint64_t *passed; /* ulnet_passed, mapped: each link's count at its slot */
    unsigned refs;
    uint64_t slots; /* ulnet_xsks entries taken */
};

struct link_xdp {
    struct uln_link base; /* first: a struct uln_link * is one of these */
    int udp_fd;           /* the bound UDP socket: keeps the port, resolves MACs */
    int nl_fd;            /* netlink: routes and neighbours */
    int ifindex;
    unsigned queue;
    uint32_t ip;   /* ours, network order */
    uint16_t port; /* ours, network order */
    uint8_t mac[6];
    uint16_t ip_id;
    struct uln_link_info info;
    struct uln_link_stats st;

    /* AF_XDP */
    struct xsk_umem *umem;
    struct xsk_socket *xsk;
    int xsk_fd;
    struct xsk_ring_prod fq, tx;
    struct xsk_ring_cons cq, rx;
    uint8_t *area;
    size_t area_len;
    unsigned nrx, ntx; /* frames [0, nrx) receive, [nrx, nrx + ntx) send */
    uint32_t *tx_free;
    unsigned ntx_free;
    bool zerocopy;
    bool busy_poll;     /* the caller spins: empty reads drive the queue's NAPI */
    unsigned gso_run;   /* runs this long or longer leave by the bound socket as
                           UDP_SEGMENT sends (sock.c); 0: never */
    unsigned tx_put;    /* frames built on the TX ring, not yet submitted */
    uint32_t *fq_stash; /* released frames waiting to go back to the fill ring */
    unsigned nstash;

    /* the program and our entries in it */
    struct xprog *xp;
    uint32_t slot;
    bool port_in_map;

    /* receive: per frame, lent or not, and the source it came from */
    uint8_t *lent;
    struct sockaddr_in *rx_sa;
    uint8_t *lend_mem; /* rx_lend: handles nrx + i */
    uint8_t lend_used[LEND_BUFS];

    /* the bound socket's datagrams: handles sock_base + i, one landing buffer
     * of a frame's size each, as many as the caller may keep (link.h); a LIFO
     * free stack, so only the pages of the most ever held at once are
     * touched */
    uint32_t sock_base; /* nrx + LEND_BUFS */
    unsigned nsock, nsock_free;
    uint8_t *sock_mem;
    uint8_t *sock_lent;
    uint32_t *sock_free;
    uint64_t sock_next; /* when to read the socket next (coarse clock) */
    unsigned nlocal;    /* local peers: while there is one, read it every call */
    /* With UDP_GRO a read brings a run of datagrams from one source (a GSO
     * send the kernel kept whole, or segments it put back together): it
     * lands in gro_buf and each datagram is copied into a landing buffer;
     * those that found none wait there, from gro_off on, for the next recv. */
    uint8_t *gro_buf;
    uint32_t gro_len, gro_off, gro_seg;
    struct sockaddr_in gro_sa;
    /* UDP payload bytes the XDP program passed to the kernel for our port
     * (the program's count in a map we share, ulnet_passed): ahead of
     * sock_pos, the bound socket has, or is about to have, datagrams.
     * sock_pos: how far in that count the socket's reads have come (or a
     * wait for bytes that never came gave up, pass_wait: until when, coarse
     * clock); gro_pos: where gro_buf's read starts in it, if gro_counted
     * (the read came through the program, not from this host). Each frame
     * on the RX ring carries the count when it was redirected (struct
     * uln_xdp_meta): the socket's datagrams before it are delivered first,
     * so the protocol sees the order the program saw. */
    const uint64_t *passed;
    uint64_t sock_pos, gro_pos, pass_wait;
    bool gro_counted;
    /* Frames the program redirected to our socket (its count beside
     * ulnet_passed), and how many our RX ring has shown (ring_seen). The
     * kernel may put a frame on the ring only at the end of its batch, after
     * datagrams that passed after it are in the bound socket: the socket is
     * read only once the ring showed every frame the count had (ring_wait:
     * until when that is waited for; then it is taken as lost,
     * rx_ring_gaps). */
    const uint64_t *redirected;
    uint64_t ring_seen, ring_wait;

    /* peers: dense array, open-addressing index by (ip, port) */
    struct peer *peers;
    unsigned npeers, max_peers;
    int32_t *htab;
    uint32_t hmask;
};

/* netlink.c: routes and neighbours */
int uln_xdp_route_to(struct link_xdp *x, struct peer *p);
void uln_xdp_peer_resolve(struct link_xdp *x, struct peer *p, uint64_t now);

/* program.c: the XDP program's lifecycle. generic_first: with the hook
 * left to auto, try generic XDP before native (link.c says when). */
struct xprog *uln_xdp_prog_get(int ifindex, enum uln_xdp_hook hook, bool generic_first,
                               uint32_t *slot, char *why, size_t whylen);
void uln_xdp_prog_put(struct xprog *xp, uint32_t slot);

/* link.c: a peer's id by its address, or -1 */
int uln_xdp_find_key(const struct link_xdp *x, uint32_t ip, uint16_t port);

/* sock.c: the bound UDP socket's side of the link (same-host peers, runs
 * sent by UDP_SEGMENT, what the program passed, read with UDP_GRO). */
unsigned uln_xdp_gso_run_len(const struct uln_link_pkt *pkts, unsigned n, uint32_t *bytes);
int uln_xdp_sock_send(struct link_xdp *x, const struct peer *pe, const struct uln_link_pkt *pkts,
                      unsigned n);
bool uln_xdp_sock_due(struct link_xdp *x);
bool uln_xdp_sock_before(struct link_xdp *x, uint64_t stamp, struct uln_link_rx *out, unsigned *got,
                         unsigned max);
unsigned uln_xdp_sock_recv(struct link_xdp *x, uint64_t upto, struct uln_link_rx *out,
                           unsigned max);

#endif /* ULN_HAVE_XDP */
#endif
