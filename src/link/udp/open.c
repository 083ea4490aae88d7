/*
 * open.c - the socket link (link_udp.h, link.h): its socket and options,
 * memory, the ops table, open and close. send.c and recv.c are its halves.
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

#ifdef ULN_TEST_HOOKS
static unsigned gro_bufs_hook; /* tests: landing buffers of the links opened next */
void uln_link_udp_test_hook_gro_bufs(unsigned n)
{
    gro_bufs_hook = n;
}
#endif

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
    if (!uln_link_udp_sa_key(
            a, a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
            &ka) ||
        !uln_link_udp_sa_key(
            b, b->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
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
    if (io->fd >= 0) {
        uln_link_udp_disconnect(io); /* an adopted socket lives on with its owner */
        close(io->fd);
    }
    if (io->wake_efd >= 0) close(io->wake_efd);
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
    uln_link_udp_sa_key(&io->wake_sa.sa, io->wake_salen, &io->wake_key);
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
    io->gro_cap = io->gro_sock = io->gro;
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
    if (io->wake_efd < 0 || max < 2) return 1;
    fds[1] = io->wake_efd;
    return 2;
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
    info->gro = io->gro_cap;
}

static void udp_stats(const struct uln_link *l, struct uln_link_stats *st)
{
    const struct link_udp *io = (const struct link_udp *)l;
    *st = io->st;
    st->rx_kernel_drops = uln_link_udp_sock_drops(io->fd);
}

uint64_t uln_link_udp_sock_drops(int fd)
{
    uint32_t mi[MEMINFO_VARS];
    socklen_t ml = sizeof(mi);
    memset(mi, 0, sizeof(mi));
    if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mi, &ml) == 0 && ml > MEMINFO_DROPS * 4)
        return mi[MEMINFO_DROPS];
    return 0;
}

/* ------------------------------------------------------------------------- */

static int udp_wait(struct uln_link *l, int timeout_ms)
{
    struct link_udp *io = (struct link_udp *)l;
    if (io->gq_n) return 1; /* datagrams wait in the io */
    struct pollfd p = {.fd = io->fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms); /* (the eventfd wakes only for gq_n, seen above) */
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
    .send = uln_link_udp_send,
    .flush = udp_flush,
    .recv = uln_link_udp_recv,
    .rx_release = uln_link_udp_rx_release,
    .rx_addr = uln_link_udp_rx_addr,
#ifdef ULN_TEST_HOOKS
    .rx_lend = uln_link_udp_rx_lend,
#endif
    .add_peer = uln_link_udp_add_peer,
    .set_peer = uln_link_udp_set_peer,
    .find_peer = uln_link_udp_find_peer,
    .fds = udp_fds,
    .wait = udp_wait,
    .local = udp_local,
    .info = udp_info,
    .stats = udp_stats,
    .close = udp_close,
    .one_peer = uln_link_udp_one_peer,
};

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
    io->wake_efd = io->conn_peer = -1;
    io->one_peer = cfg->one_peer;
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

int uln_link_udp_open(const struct uln_link_udp_cfg *cfg_in, struct uln_link **out)
{
    struct uln_link_udp_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    if (cfg_in) cfg = *cfg_in;
    *out = NULL;
    return open_plain(&cfg, out);
}
