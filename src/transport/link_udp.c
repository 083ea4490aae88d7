/*
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
 * The read after an empty one is a recvfrom, with or without GRO: a spinning
 * caller mostly finds nothing, and recvfrom is the cheapest call to find it
 * with (recv_cold). With GRO that read has no cmsg, so the caller's
 * dgram_len (the protocol's headers) says where the run's datagrams end.
 */
#define _GNU_SOURCE
#include "transport/link_fault.h"
#include "transport/link_udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

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
/* Tests may put a sendmmsg of their own in, to cut sends short at will. */
#ifdef ULN_TEST_HOOKS
static int (*sendmmsg_fn)(int, struct mmsghdr *, unsigned int, int) = sendmmsg;
void uln_link_udp_test_hook_sendmmsg(int (*fn)(int, struct mmsghdr *, unsigned int, int))
{
    sendmmsg_fn = fn ? fn : sendmmsg;
}
#define SENDMMSG    sendmmsg_fn
#define LONE_SENDTO (sendmmsg_fn == sendmmsg) /* a hooked send sees every packet */
static unsigned gro_bufs_hook;
void uln_link_udp_test_hook_gro_bufs(unsigned n)
{
    gro_bufs_hook = n;
}
#else
#define SENDMMSG    sendmmsg
#define LONE_SENDTO true
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
    bool gro;
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
    bool wake_out; /* an empty datagram to itself is on its way */

    /* send scratch, reused by every call */
    uint8_t lone[LONE_COPY_MAX];
    struct mmsghdr smsg[ULN_LINK_BATCH];
    struct iovec siov[ULN_LINK_BATCH * ULN_LINK_IOV_MAX];
    uint32_t spkts[ULN_LINK_BATCH]; /* fast path: packets per message */
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } sctl[ULN_LINK_BATCH];
};

/* ------------------------------------------------------------------------- */
/* Peers                                                                      */
/* ------------------------------------------------------------------------- */

static bool sa_key(const struct sockaddr *sa, socklen_t len, struct peer_key *k)
{
    memset(k, 0, sizeof(*k));
    if (!sa) return false;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        k->a[10] = k->a[11] = 0xff;
        memcpy(k->a + 12, &in->sin_addr, 4);
        k->port = in->sin_port;
        return true;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(k->a, &in6->sin6_addr, 16);
        k->port = in6->sin6_port;
        if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) k->scope = in6->sin6_scope_id;
        return true;
    }
    return false;
}

static bool key_v4(const struct peer_key *k)
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(k->a, pre, 12);
}

static uint32_t key_hash(const struct peer_key *k)
{
    uint64_t w[3];
    memcpy(w, k, sizeof(w));
    uint64_t h = w[0] * 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 29) ^ w[1]) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 32) ^ w[2]) * 0x94d049bb133111ebull;
    return (uint32_t)(h >> 32);
}
_Static_assert(sizeof(struct peer_key) == 24, "key hashes as three words");

static int find_key(const struct link_udp *io, const struct peer_key *k)
{
    for (uint32_t i = key_hash(k) & io->hmask;; i = (i + 1) & io->hmask) {
        int32_t id = io->htab[i];
        if (id < 0) return -1;
        if (!memcmp(&io->peers[id].key, k, sizeof(*k))) return id;
    }
}

static void hash_insert(struct link_udp *io, int32_t id)
{
    uint32_t i = key_hash(&io->peers[id].key) & io->hmask;
    while (io->htab[i] >= 0)
        i = (i + 1) & io->hmask;
    io->htab[i] = id;
}

/* Linear probing without tombstones: after emptying a slot, pull back every
 * later entry of the cluster whose home is not between the hole and itself. */
static void hash_remove(struct link_udp *io, int32_t id)
{
    uint32_t i = key_hash(&io->peers[id].key) & io->hmask;
    while (io->htab[i] != id)
        i = (i + 1) & io->hmask;
    io->htab[i] = -1;
    for (uint32_t j = (i + 1) & io->hmask; io->htab[j] >= 0; j = (j + 1) & io->hmask) {
        uint32_t home = key_hash(&io->peers[io->htab[j]].key) & io->hmask;
        if (((j - home) & io->hmask) >= ((j - i) & io->hmask)) {
            io->htab[i] = io->htab[j];
            io->htab[j] = -1;
            i = j;
        }
    }
}

/* The peer's address as this socket sends to it. */
static int peer_fill(const struct link_udp *io, struct peer *p, const struct sockaddr *sa,
                     socklen_t len)
{
    if (!sa_key(sa, len, &p->key)) return -EINVAL;
    memset(&p->sa, 0, sizeof(p->sa));
    if (io->family == AF_INET) {
        if (!key_v4(&p->key)) return -EAFNOSUPPORT;
        p->sa.in.sin_family = AF_INET;
        p->sa.in.sin_port = p->key.port;
        memcpy(&p->sa.in.sin_addr, p->key.a + 12, 4);
        p->salen = sizeof(p->sa.in);
    } else {
        p->sa.in6.sin6_family = AF_INET6;
        p->sa.in6.sin6_port = p->key.port;
        memcpy(&p->sa.in6.sin6_addr, p->key.a, 16);
        p->sa.in6.sin6_scope_id = p->key.scope;
        if (sa->sa_family == AF_INET6)
            p->sa.in6.sin6_flowinfo = ((const struct sockaddr_in6 *)sa)->sin6_flowinfo;
        p->salen = sizeof(p->sa.in6);
    }
    return 0;
}

static int udp_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct link_udp *io = (struct link_udp *)l;
    const struct sockaddr *sa = addr;
    if (io->npeers == io->max_peers) return -ENOSPC;
    struct peer *p = &io->peers[io->npeers];
    int rc = peer_fill(io, p, sa, len);
    if (rc) return rc;
    if (find_key(io, &p->key) >= 0) return -EEXIST;
    hash_insert(io, (int32_t)io->npeers);
    return (int)io->npeers++;
}

static int udp_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    struct link_udp *io = (struct link_udp *)l;
    const struct sockaddr *sa = addr;
    if (peer < 0 || (unsigned)peer >= io->npeers) return -EINVAL;
    struct peer np;
    int rc = peer_fill(io, &np, sa, len);
    if (rc) return rc;
    int other = find_key(io, &np.key);
    if (other == peer) return 0;
    if (other >= 0) return -EEXIST;
    hash_remove(io, peer);
    io->peers[peer] = np;
    hash_insert(io, peer);
    return 0;
}

static int udp_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    const struct link_udp *io = (const struct link_udp *)l;
    const struct sockaddr *sa = addr;
    struct peer_key k;
    if (!sa_key(sa, len, &k)) return -1;
    return find_key(io, &k);
}

/* ------------------------------------------------------------------------- */
/* Open and close                                                             */
/* ------------------------------------------------------------------------- */

static int if_mtu(int fd, const char *name)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0) return -1;
    return ifr.ifr_mtu;
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
    struct peer_key ka, kb;
    if (!sa_key(a,
                a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
                &ka) ||
        !sa_key(b,
                b->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
                &kb))
        return false;
    return !memcmp(ka.a, kb.a, 16);
}

/* The MTU of the interface that owns the bound address: a loopback address
 * without an exact match belongs to the loopback interface; the wildcard takes
 * the smallest up, non-loopback interface, so that a datagram fits whichever
 * one the route picks. */
static int mtu_from_interfaces(int fd, const union sa_any *bound, bool wildcard, char *ifname)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0) return -1;
    bool loop = false;
    if (!wildcard) {
        if (bound->sa.sa_family == AF_INET)
            loop = (ntohl(bound->in.sin_addr.s_addr) >> 24) == 127;
        else
            loop = IN6_IS_ADDR_LOOPBACK(&bound->in6.sin6_addr) ||
                   (IN6_IS_ADDR_V4MAPPED(&bound->in6.sin6_addr) &&
                    bound->in6.sin6_addr.s6_addr[12] == 127);
    }
    int best = -1, lo = -1;
    char lo_name[IF_NAMESIZE] = "";
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr ||
            (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        bool is_lo = i->ifa_flags & IFF_LOOPBACK;
        if (is_lo && lo < 0) {
            lo = if_mtu(fd, i->ifa_name);
            snprintf(lo_name, sizeof(lo_name), "%s", i->ifa_name);
        }
        if (!wildcard) {
            if (same_addr(i->ifa_addr, &bound->sa)) {
                best = if_mtu(fd, i->ifa_name);
                snprintf(ifname, IF_NAMESIZE, "%s", i->ifa_name);
                break;
            }
            continue;
        }
        if (is_lo || !(i->ifa_flags & IFF_UP)) continue;
        int m = if_mtu(fd, i->ifa_name);
        if (m > 0 && (best < 0 || m < best)) {
            best = m;
            snprintf(ifname, IF_NAMESIZE, "%s", i->ifa_name);
        }
    }
    if (best < 0 && (wildcard || loop) && lo > 0) {
        best = lo;
        snprintf(ifname, IF_NAMESIZE, "%s", lo_name);
    }
    freeifaddrs(ifs);
    return best;
}

int uln_link_udp_sock_buf(int fd, int force_opt, int opt, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) < 0)
        setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
    int got = 0;
    socklen_t gl = sizeof(got);
    getsockopt(fd, SOL_SOCKET, opt, &got, &gl);
    return got;
}

static int open_socket(const struct uln_link_udp_cfg *cfg, union sa_any *bound, bool *wildcard)
{
    memset(bound, 0, sizeof(*bound));
    *wildcard = !cfg->addr;
    if (cfg->addr) {
        struct addrinfo hints, *ai;
        memset(&hints, 0, sizeof(hints));
        hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_DGRAM;
        if (getaddrinfo(cfg->addr, NULL, &hints, &ai) != 0) {
            fprintf(stderr, "ulnet: udp: '%s' is not an IPv4 or IPv6 address\n", cfg->addr);
            return -EINVAL;
        }
        memcpy(bound, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (bound->sa.sa_family == AF_INET) {
            bound->in.sin_port = htons(cfg->port);
            *wildcard = bound->in.sin_addr.s_addr == htonl(INADDR_ANY);
        } else {
            bound->in6.sin6_port = htons(cfg->port);
            *wildcard = IN6_IS_ADDR_UNSPECIFIED(&bound->in6.sin6_addr);
        }
    }
    int fd = -1;
    if (!cfg->addr) {
        /* Dual stack, so one socket reaches IPv4 and IPv6 peers; a host
         * without IPv6 gets an IPv4 socket. */
        fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
        if (fd >= 0) {
            int off = 0;
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
            bound->in6.sin6_family = AF_INET6;
            bound->in6.sin6_addr = in6addr_any;
            bound->in6.sin6_port = htons(cfg->port);
        } else {
            bound->in.sin_family = AF_INET;
            bound->in.sin_addr.s_addr = htonl(INADDR_ANY);
            bound->in.sin_port = htons(cfg->port);
        }
    }
    if (fd < 0)
        fd = socket(bound->sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0) return -errno;
    socklen_t blen = bound->sa.sa_family == AF_INET ? sizeof(bound->in) : sizeof(bound->in6);
    if (bind(fd, &bound->sa, blen) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static void udp_close(struct uln_link *l)
{
    struct link_udp *io = (struct link_udp *)l;
    if (!io) return;
    if (io->fd >= 0) close(io->fd);
    free(io->peers);
    free(io->htab);
    free(io->pool);
    free(io->free_stack);
    free(io->lent);
    free(io->rx_sa);
    free(io->rx_salen);
    free(io->gpool);
    free(io->gb);
    free(io->gsa);
    free(io->gsalen);
    free(io->gfree_stack);
    free(io);
}

/* Where the io sends itself a wake-up: its own address and port (bound
 * now: the port may have been left to the kernel), or loopback when bound to
 * any (the kernel then sends from loopback, so the source it reads is the
 * same address). */
static int wake_addr(struct link_udp *io)
{
    socklen_t l = sizeof(io->wake_sa);
    if (getsockname(io->fd, &io->wake_sa.sa, &l) < 0) return -errno;
    if (io->wake_sa.sa.sa_family == AF_INET) {
        if (io->wake_sa.in.sin_addr.s_addr == htonl(INADDR_ANY))
            io->wake_sa.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        io->wake_salen = sizeof(io->wake_sa.in);
    } else {
        if (IN6_IS_ADDR_UNSPECIFIED(&io->wake_sa.in6.sin6_addr))
            io->wake_sa.in6.sin6_addr = in6addr_loopback;
        io->wake_salen = sizeof(io->wake_sa.in6);
    }
    sa_key(&io->wake_sa.sa, io->wake_salen, &io->wake_key);
    return 0;
}

/* The landing buffers, their state, and the wake-up address. */
static int gro_setup(struct link_udp *io, unsigned nbufs)
{
    size_t small = (size_t)nbufs * io->stride;
    size_t left = small < ULN_LINK_UDP_RX_MEM ? ULN_LINK_UDP_RX_MEM - small : 0;
    size_t nbig = left / ULN_LINK_UDP_GRO_BUF;
    if (nbig < ULN_LINK_UDP_GRO_BUFS_MIN) nbig = ULN_LINK_UDP_GRO_BUFS_MIN;
    if (nbig > GRO_BUFS_MAX) nbig = GRO_BUFS_MAX;

#ifdef ULN_TEST_HOOKS
    if (gro_bufs_hook) nbig = gro_bufs_hook < 2 ? 2 : gro_bufs_hook > 4096 ? 4096 : gro_bufs_hook;
#endif
    io->nbig = io->ngfree = (unsigned)nbig;
    io->glow = io->nbig / 4 ? io->nbig / 4 : 1;
    io->hint = GSO_SEGS_MAX; /* until reads say otherwise, expect full runs */
    io->gpool = aligned_alloc(4096, nbig * ULN_LINK_UDP_GRO_BUF);
    io->gb = calloc(nbig, sizeof(struct gbuf));
    io->gsa = calloc(nbig, sizeof(union sa_any));
    io->gsalen = calloc(nbig, sizeof(socklen_t));
    io->gfree_stack = malloc(nbig * sizeof(uint32_t));
    if (!io->gpool || !io->gb || !io->gsa || !io->gsalen || !io->gfree_stack) return -ENOMEM;
    for (unsigned i = 0; i < io->nbig; i++)
        io->gfree_stack[i] = io->nbig - 1 - i;
    io->info.gro_bufs = io->nbig;
    io->info.rx_mem += nbig * ULN_LINK_UDP_GRO_BUF;
    return wake_addr(io);
}

/* The socket: the caller's (adopt), or one bound here. *bound and *wildcard
 * say where. fd or -errno. */
static int take_socket(const struct uln_link_udp_cfg *cfg, union sa_any *bound, bool *wildcard)
{
    if (!cfg->adopt) return open_socket(cfg, bound, wildcard);
    int fd = cfg->fd;
    socklen_t bl = sizeof(*bound);
    if (fd < 0 || getsockname(fd, &bound->sa, &bl) < 0) return -EINVAL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    *wildcard = bound->sa.sa_family == AF_INET ? bound->in.sin_addr.s_addr == htonl(INADDR_ANY)
                                               : IN6_IS_ADDR_UNSPECIFIED(&bound->in6.sin6_addr);
    return fd;
}

/* The MTU, the largest datagram, and no fragmentation. */
static void size_datagrams(struct link_udp *io, unsigned mtu, const union sa_any *bound,
                           bool wildcard)
{
    int fd = io->fd;
    if (!mtu)
        mtu = uln_link_udp_iface_mtu(mtu_from_interfaces(fd, bound, wildcard, io->info.ifname));
    io->info.mtu = mtu;
    /* An IPv6 socket may carry IPv4 peers too; size for the larger header. */
    io->payload_max = mtu - (io->family == AF_INET6 ? 40u : 20u) - 8u;
    io->info.payload_max = io->payload_max;
    io->base.payload_max = io->payload_max;
    io->stride = (io->payload_max + 63u) & ~63u;

    /* Never let the kernel fragment: a lost fragment loses the whole datagram,
     * so an oversized datagram is better refused (EMSGSIZE) than sent. */
    int pmtu = IP_PMTUDISC_DO;
    setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
    if (io->family == AF_INET6) {
        int pmtu6 = IPV6_PMTUDISC_DO;
        setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu6, sizeof(pmtu6));
    }
}

/* Socket options: buffers, busy polling, GSO and GRO. */
static void set_options(struct link_udp *io, const struct uln_link_udp_cfg *cfg, unsigned nbufs)
{
    int fd = io->fd;
    /* Room in the kernel for a whole pool's worth of datagrams (the kernel
     * doubles the figure for its own overhead), and for a few batches out. */
    uint64_t per = (uint64_t)io->payload_max + 1024u;
    uint64_t rb = per * (nbufs < 256 ? 256 : nbufs), sb = per * 4u * ULN_LINK_BATCH;
    rb = rb > (256u << 20) ? (256u << 20) : rb;
    io->info.rcvbuf = uln_link_udp_sock_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, (int)rb);
    io->info.sndbuf = uln_link_udp_sock_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, (int)sb);

    if (cfg->busy_poll) {
        int us = cfg->busy_poll_us ? (int)cfg->busy_poll_us : 50, one = 1;
        io->info.busy_poll = setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) == 0;
        if (io->info.busy_poll) setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one));
    }
    /* A zero UDP_SEGMENT (no default size) asks the kernel whether it knows
     * the option at all without changing anything. */
    if (!cfg->no_gso) {
        int zero = 0;
        io->gso = setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
    }
    io->info.gso = io->gso;
    /* An adopted socket may have GRO on from before: say which we want. */
    int gro_on = !cfg->no_gro;
    io->gro = setsockopt(fd, SOL_UDP, UDP_GRO, &gro_on, sizeof(gro_on)) == 0 && gro_on;
    io->info.gro = io->gro;
    io->dgram_len = cfg->dgram_len;
}

/* The receive pool and the peer table. 0 or -ENOMEM. */
static int alloc_tables(struct link_udp *io, unsigned nbufs, unsigned max_peers)
{
    io->nbufs = io->nfree = nbufs;
    io->max_peers = max_peers;
    uint32_t hsize = 4;
    while (hsize < 2u * max_peers)
        hsize <<= 1;
    io->hmask = hsize - 1;
    size_t pool_bytes = ((size_t)nbufs * io->stride + 4095u) & ~(size_t)4095u;
    io->pool = aligned_alloc(4096, pool_bytes);
    io->info.rx_mem = pool_bytes;
    io->free_stack = malloc(nbufs * sizeof(uint32_t));
    io->lent = calloc(nbufs, 1);
    io->rx_sa = calloc(nbufs, sizeof(union sa_any));
    io->rx_salen = calloc(nbufs, sizeof(socklen_t));
    io->peers = calloc(max_peers, sizeof(struct peer));
    io->htab = malloc(hsize * sizeof(int32_t));
    if (!io->pool || !io->free_stack || !io->lent || !io->rx_sa || !io->rx_salen || !io->peers ||
        !io->htab)
        return -ENOMEM;
    /* Lowest index on top, so a quiet link keeps using the same few buffers. */
    for (unsigned i = 0; i < nbufs; i++)
        io->free_stack[i] = nbufs - 1 - i;
    for (uint32_t i = 0; i < hsize; i++)
        io->htab[i] = -1;
    return 0;
}

static int udp_fds(const struct uln_link *l, int *fds, int max)
{
    const struct link_udp *io = (const struct link_udp *)l;
    if (max < 1) return 0;
    fds[0] = io->fd;
    return 1;
}

static int udp_local(const struct uln_link *l, struct sockaddr_storage *ss, socklen_t *len)
{
    const struct link_udp *io = (const struct link_udp *)l;
    *len = sizeof(*ss);
    return getsockname(io->fd, (struct sockaddr *)ss, len) < 0 ? -errno : 0;
}

static void udp_info(const struct uln_link *l, struct uln_link_info *info)
{
    const struct link_udp *io = (const struct link_udp *)l;
    *info = io->info;
    info->gso = io->gso;
    info->gro = io->gro;
}

static void udp_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    const struct link_udp *io = (const struct link_udp *)l;
    *st = io->st;
    uint32_t mi[MEMINFO_VARS];
    socklen_t ml = sizeof(mi);
    memset(mi, 0, sizeof(mi));
    if (getsockopt(io->fd, SOL_SOCKET, SO_MEMINFO, mi, &ml) == 0 && ml > MEMINFO_DROPS * 4)
        st->rx_kernel_drops = mi[MEMINFO_DROPS];
}

/* ------------------------------------------------------------------------- */
/* Sending                                                                    */
/* ------------------------------------------------------------------------- */

static bool transient(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EINTR;
}

static void set_msg(struct link_udp *io, struct mmsghdr *m, int32_t peer, struct iovec *iov,
                    size_t niov)
{
    const struct peer *p = &io->peers[peer];
    m->msg_hdr.msg_name = (void *)&p->sa;
    m->msg_hdr.msg_namelen = p->salen;
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
    ssize_t r = sendto(io->fd, buf, len, MSG_DONTWAIT, &pe->sa.sa, pe->salen);
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
        int r = SENDMMSG(io->fd, io->smsg, m, MSG_DONTWAIT);
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

static int udp_send(struct uln_link *l, const struct uln_link_pkt *pkts, unsigned n)
{
    struct link_udp *io = (struct link_udp *)l;
    for (unsigned i = 0; i < n; i++) {
        const struct uln_link_pkt *p = &pkts[i];
        if (p->peer < 0 || (unsigned)p->peer >= io->npeers || p->niov == 0 ||
            p->niov > ULN_LINK_IOV_MAX)
            return -EINVAL;
        if (uln_link_pkt_len(p) > io->payload_max) return -EMSGSIZE;
    }
    return n ? send_plain(io, pkts, n) : 0;
}

/* ------------------------------------------------------------------------- */
/* Receiving                                                                  */
/* ------------------------------------------------------------------------- */

static int32_t lookup(struct link_udp *io, const struct sockaddr *sa, socklen_t len)
{
    struct peer_key k;
    if (!sa_key(sa, len, &k)) return -1;
    int32_t last = io->last_peer;
    if (last >= 0 && !memcmp(&io->peers[last].key, &k, sizeof(k))) return last;
    int32_t id = find_key(io, &k);
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
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) {
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
    io->nfree--;
    io->rprep = 0; /* the free stack changed */
    io->st.rx_cold++;
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
        sa_key(&io->wake_sa.sa, io->wake_salen, &io->wake_key);
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
    if (io->gb[b].len != 0 || !sa_key(&io->gsa[b].sa, io->gsalen[b], &k)) return false;
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
    if (drained) io->wake_out = false;
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
        if (gro_queue(io, b, len, seg > 0 ? (uint32_t)seg : len) && io->gb[b].nseg > most)
            most = io->gb[b].nseg;
    }
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
    if (io->gq_n) gro_wake(io);
    return (int)got;
}

static int udp_recv(struct uln_link *l, struct uln_link_rx *out, unsigned max)
{
    struct link_udp *io = (struct link_udp *)l;
    return io->gro ? recv_gro(io, out, max) : recv_plain(io, out, max);
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

static const void *udp_rx_addr(const struct uln_link *l, uint32_t handle, socklen_t *len)
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

static int udp_rx_release(struct uln_link *l, uint32_t handle)
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
static int udp_rx_lend(struct uln_link *l, int32_t peer, const void *buf, uint32_t len,
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

static int udp_wait(struct uln_link *l, int timeout_ms)
{
    struct link_udp *io = (struct link_udp *)l;
    if (io->gq_n) return 1; /* datagrams wait in the io */
    struct pollfd p = {.fd = io->fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r < 0) return errno == EINTR ? 0 : -errno;
    return r > 0;
}

/* Nothing is ever held back here. */
static int udp_flush(struct uln_link *l)
{
    (void)l;
    return 0;
}

static const struct uln_link_ops udp_ops = {
    .send = udp_send,
    .flush = udp_flush,
    .recv = udp_recv,
    .rx_release = udp_rx_release,
    .rx_addr = udp_rx_addr,
#ifdef ULN_TEST_HOOKS
    .rx_lend = udp_rx_lend,
#endif
    .add_peer = udp_add_peer,
    .set_peer = udp_set_peer,
    .find_peer = udp_find_peer,
    .fds = udp_fds,
    .wait = udp_wait,
    .local = udp_local,
    .info = udp_info,
    .stats = udp_stats,
    .close = udp_close,
};

/* The socket link alone. */
static int open_plain(const struct uln_link_udp_cfg *cfg, struct uln_link **out)
{
    if (cfg->mtu && (cfg->mtu < ULN_LINK_UDP_MTU_MIN || cfg->mtu > ULN_LINK_UDP_MTU_MAX)) {
        fprintf(stderr, "ulnet: udp: MTU %u is outside [%u, %u]\n", cfg->mtu, ULN_LINK_UDP_MTU_MIN,
                ULN_LINK_UDP_MTU_MAX);
        return -EINVAL;
    }
    unsigned nbufs = cfg->rx_bufs ? cfg->rx_bufs : 512;
    unsigned max_peers = cfg->max_peers ? cfg->max_peers : 256;
    if (nbufs > (1u << 20) || max_peers > (1u << 20)) return -EINVAL;

    struct link_udp *io = calloc(1, sizeof(*io));
    if (!io) return -ENOMEM;
    io->base.ops = &udp_ops;
    io->last_peer = -1;
    union sa_any bound;
    bool wildcard = false;
    io->fd = take_socket(cfg, &bound, &wildcard);
    if (io->fd < 0) {
        int rc = io->fd;
        free(io);
        return rc;
    }
    io->family = io->info.family = bound.sa.sa_family;
    size_datagrams(io, cfg->mtu, &bound, wildcard);
    set_options(io, cfg, nbufs);
    int rc = alloc_tables(io, nbufs, max_peers);
    if (!rc && io->gro) rc = gro_setup(io, nbufs);
    if (rc < 0) {
        udp_close(&io->base);
        return rc;
    }
    *out = &io->base;
    return 0;
}

/* With cfg->fault: the socket link wrapped in the fault injector. GSO and GRO
 * stay on: the injector decides each packet's fate before the socket link
 * gathers what survives into GSO runs, so a run carries only packets that
 * were meant to leave, and loss is measured on the path jobs really take. */
int uln_link_udp_open(const struct uln_link_udp_cfg *cfg_in, struct uln_link **out)
{
    struct uln_link_udp_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    if (cfg_in) cfg = *cfg_in;
    *out = NULL;
    struct uln_link_fault f;
    char why[128];
    if (uln_link_fault_parse(cfg.fault, &f, why, sizeof(why)) < 0) {
        fprintf(stderr, "ulnet: fault spec '%s': %s\n", cfg.fault, why);
        return -EINVAL;
    }
    bool fault = uln_link_fault_any(&f);
    struct uln_link *l;
    int rc = open_plain(&cfg, &l);
    if (rc || !fault) {
        if (!rc) *out = l;
        return rc;
    }
    return uln_link_fault_open(l, &f, out);
}
