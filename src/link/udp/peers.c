/*
 * peers.c - the socket link's peer table: socket addresses by id, and an
 * open-addressing index from address to id.
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
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Peers                                                                      */
/* ------------------------------------------------------------------------- */

bool uln_link_udp_sa_key(const struct sockaddr *sa, socklen_t len, struct peer_key *k)
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

int uln_link_udp_find_key(const struct link_udp *io, const struct peer_key *k)
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
    if (!uln_link_udp_sa_key(sa, len, &p->key)) return -EINVAL;
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

/* cfg's one_peer: the socket connected to the table's only peer, so that a
 * send to it takes the kernel's connected path. An unconnected sendto looks
 * the route up for every datagram: between two namespace hosts, CPU time
 * per 56-byte sendto 5.04-5.95 us against 4.63-5.61 us connected (six
 * interleaved pairs of 200000). A second peer undoes it (connect AF_UNSPEC).
 * With GRO, the wake-up cannot be a datagram to ourselves any more (the
 * connected socket refuses it): an eventfd first, or no connect. */
static void conn_update(struct link_udp *io)
{
    if (!io->one_peer) {
        uln_link_udp_disconnect(io);
        return;
    }
    if (io->npeers == 1) {
        if (io->gro_cap && io->wake_efd < 0 &&
            (io->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
            return;
        const struct peer *p = &io->peers[0];
        io->conn_peer = connect(io->fd, &p->sa.sa, p->salen) == 0 ? 0 : -1;
    } else if (io->conn_peer >= 0) {
        struct sockaddr un = {.sa_family = AF_UNSPEC};
        if (connect(io->fd, &un, sizeof(un)) == 0) io->conn_peer = -1;
    }
}

/* Undo conn_update (the link closes; its socket may live on elsewhere). */
void uln_link_udp_disconnect(struct link_udp *io)
{
    if (io->conn_peer < 0) return;
    struct sockaddr un = {.sa_family = AF_UNSPEC};
    if (connect(io->fd, &un, sizeof(un)) == 0) io->conn_peer = -1;
}

/* The caller says whether it hears only the peers it adds (link.h): a
 * context with no job connects while it has one peer, and stops for good
 * once it learns a peer from its first datagram (a server). */
void uln_link_udp_one_peer(struct uln_link *l, bool on)
{
    struct link_udp *io = (struct link_udp *)l;
    io->one_peer = on;
    conn_update(io);
}

int uln_link_udp_add_peer(struct uln_link *l, const void *addr, socklen_t len)
{
    struct link_udp *io = (struct link_udp *)l;
    const struct sockaddr *sa = addr;
    if (io->npeers == io->max_peers) return -ENOSPC;
    struct peer *p = &io->peers[io->npeers];
    int rc = peer_fill(io, p, sa, len);
    if (rc) return rc;
    if (uln_link_udp_find_key(io, &p->key) >= 0) return -EEXIST;
    hash_insert(io, (int32_t)io->npeers);
    int id = (int)io->npeers++;
    conn_update(io);
    return id;
}

int uln_link_udp_set_peer(struct uln_link *l, int peer, const void *addr, socklen_t len)
{
    struct link_udp *io = (struct link_udp *)l;
    const struct sockaddr *sa = addr;
    if (peer < 0 || (unsigned)peer >= io->npeers) return -EINVAL;
    struct peer np;
    int rc = peer_fill(io, &np, sa, len);
    if (rc) return rc;
    int other = uln_link_udp_find_key(io, &np.key);
    if (other == peer) return 0;
    if (other >= 0) return -EEXIST;
    hash_remove(io, peer);
    io->peers[peer] = np;
    hash_insert(io, peer);
    conn_update(io); /* connected: to the peer's new address */
    return 0;
}

int uln_link_udp_find_peer(const struct uln_link *l, const void *addr, socklen_t len)
{
    const struct link_udp *io = (const struct link_udp *)l;
    const struct sockaddr *sa = addr;
    struct peer_key k;
    if (!uln_link_udp_sa_key(sa, len, &k)) return -1;
    return uln_link_udp_find_key(io, &k);
}

/* ------------------------------------------------------------------------- */
