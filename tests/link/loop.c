/*
 * loop.c - a link that exists only in the tests: datagrams between the links
 * of one process, in memory. It is added as any link is (link/select.h): this
 * file, with its kind, and one line in select.c's table (built into the
 * tests' library only, ULN_TEST_HOOKS). ULN_LINK=loop then puts it under the
 * UDP transport, and tests/link/loop_job.c runs ulnet traffic over it.
 *
 * A link is known to the others by its endpoint's bound socket's address
 * (the one the transport publishes and sends to), which it keeps so the port
 * stays its own. send copies each packet into a free receive slot of the
 * link at the peer's address and queues it there (none free: lost, as a
 * full socket would lose it; rel resends); recv lends queued slots in
 * arrival order. One mutex guards every loop link: a test link, not a fast
 * one. An eventfd per link is what a caller sleeps on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "link/link.h"
#include "link/select.h"
#include "link/udp/link_udp.h"

#define LOOP_PAYLOAD 1472u /* a 1500-byte MTU's UDP payload */
#define LOOP_SPARE   64u   /* slots beyond what the caller may keep */

enum { SLOT_FREE, SLOT_QUEUED, SLOT_LENT };

struct slot {
    int state;
    uint32_t len;
    struct sockaddr_storage src;
    socklen_t srclen;
    uint8_t *buf;
};

struct link_loop {
    struct uln_link base; /* first: a struct uln_link * is one of these */
    int fd, efd;          /* the endpoint's socket (its address), what we sleep on */
    struct sockaddr_storage me;
    socklen_t melen;
    struct slot *slots;
    uint8_t *mem;
    unsigned nslots;
    uint32_t *fifo, *free_stack; /* queued in arrival order (a ring); free */
    unsigned head, nq, nfree;
    struct sockaddr_storage *peers;
    socklen_t *peerlen;
    unsigned npeers, max_peers;
    struct uln_link_stats st;
    struct link_loop *next;
};

static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static struct link_loop *loops; /* every open loop link */
static _Atomic uint64_t loop_moved;

/* Datagrams loop links have delivered in this process (for tests). */
uint64_t uln_link_loop_moved(void);
uint64_t uln_link_loop_moved(void)
{
    return atomic_load(&loop_moved);
}

static bool same_addr(const struct sockaddr_storage *a, const void *b_, socklen_t blen)
{
    const struct sockaddr *b = b_;
    if (blen < sizeof(sa_family_t) || a->ss_family != b->sa_family) return false;
    if (a->ss_family == AF_INET && blen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6 && blen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
    }
    return false;
}

static int find_peer_locked(const struct link_loop *l, const void *addr, socklen_t len)
{
    for (unsigned i = 0; i < l->npeers; i++)
        if (same_addr(&l->peers[i], addr, len)) return (int)i;
    return -1;
}

static struct link_loop *link_at(const struct sockaddr_storage *addr, socklen_t len)
{
    for (struct link_loop *l = loops; l; l = l->next)
        if (same_addr(&l->me, addr, len)) return l;
    return NULL;
}

/* Copy p into a free slot of `to`, queued. False: none free (lost). */
static bool deliver(struct link_loop *from, struct link_loop *to, const struct uln_link_pkt *p)
{
    if (!to->nfree) return false;
    uint32_t i = to->free_stack[--to->nfree];
    struct slot *s = &to->slots[i];
    uint32_t at = 0;
    for (uint32_t k = 0; k < p->niov; k++) {
        memcpy(s->buf + at, p->iov[k].iov_base, p->iov[k].iov_len);
        at += (uint32_t)p->iov[k].iov_len;
    }
    s->len = at;
    s->src = from->me;
    s->srclen = from->melen;
    s->state = SLOT_QUEUED;
    to->fifo[(to->head + to->nq++) % to->nslots] = i;
    if (to->nq == 1) {
        uint64_t one = 1;
        if (write(to->efd, &one, sizeof one) < 0) { /* a full counter is readable anyway */
        }
    }
    return true;
}

static int loop_send(struct uln_link *base, const struct uln_link_pkt *pkts, unsigned n)
{
    struct link_loop *l = (struct link_loop *)base;
    for (unsigned i = 0; i < n; i++) {
        if (pkts[i].niov < 1 || pkts[i].niov > ULN_LINK_IOV_WIRE || pkts[i].peer < 0)
            return -EINVAL;
        if (uln_link_pkt_len(&pkts[i]) > l->base.payload_max) return -EMSGSIZE;
    }
    pthread_mutex_lock(&loop_lock);
    for (unsigned i = 0; i < n; i++) {
        const struct uln_link_pkt *p = &pkts[i];
        if ((unsigned)p->peer >= l->npeers) {
            pthread_mutex_unlock(&loop_lock);
            return i ? (int)i : -EINVAL;
        }
        struct link_loop *to = link_at(&l->peers[p->peer], l->peerlen[p->peer]);
        if (to && deliver(l, to, p)) {
            l->st.tx_pkts++;
            l->st.tx_bytes += uln_link_pkt_len(p);
            atomic_fetch_add(&loop_moved, 1);
        } else {
            l->st.tx_err++; /* nobody there, or its slots are full: lost */
            l->st.last_tx_errno = to ? ENOBUFS : EHOSTUNREACH;
        }
    }
    l->st.tx_calls++;
    pthread_mutex_unlock(&loop_lock);
    return (int)n;
}

static int loop_flush(struct uln_link *base)
{
    (void)base;
    return 0;
}

static int loop_recv(struct uln_link *base, struct uln_link_rx *out, unsigned max)
{
    struct link_loop *l = (struct link_loop *)base;
    unsigned k = 0;
    pthread_mutex_lock(&loop_lock);
    for (; k < max && l->nq; k++) {
        uint32_t i = l->fifo[l->head];
        l->head = (l->head + 1) % l->nslots;
        l->nq--;
        struct slot *s = &l->slots[i];
        s->state = SLOT_LENT;
        out[k] = (struct uln_link_rx){.buf = s->buf,
                                      .len = s->len,
                                      .peer = find_peer_locked(l, &s->src, s->srclen),
                                      .handle = i};
        l->st.rx_pkts++;
        l->st.rx_bytes += s->len;
        l->st.rx_unknown += out[k].peer < 0;
    }
    if (!l->nq) { /* drained: nothing to wake a sleeper for */
        uint64_t v;
        if (read(l->efd, &v, sizeof v) < 0) { /* EAGAIN: it was not set */
        }
    }
    l->st.rx_calls++;
    l->st.rx_empty += k == 0;
    pthread_mutex_unlock(&loop_lock);
    return (int)k;
}

static int loop_rx_release(struct uln_link *base, uint32_t handle)
{
    struct link_loop *l = (struct link_loop *)base;
    int rc = 0;
    pthread_mutex_lock(&loop_lock);
    if (handle >= l->nslots || l->slots[handle].state != SLOT_LENT) {
        l->st.rx_bad_release++;
        rc = -EINVAL;
    } else {
        l->slots[handle].state = SLOT_FREE;
        l->free_stack[l->nfree++] = handle;
    }
    pthread_mutex_unlock(&loop_lock);
    return rc;
}

static const void *loop_rx_addr(const struct uln_link *base, uint32_t handle, socklen_t *len)
{
    const struct link_loop *l = (const struct link_loop *)base;
    if (handle >= l->nslots || l->slots[handle].state != SLOT_LENT) return NULL;
    *len = l->slots[handle].srclen;
    return &l->slots[handle].src;
}

static int loop_rx_lend(struct uln_link *base, int32_t peer, const void *buf, uint32_t len,
                        struct uln_link_rx *out)
{
    struct link_loop *l = (struct link_loop *)base;
    if (len > l->base.payload_max) return -EMSGSIZE;
    pthread_mutex_lock(&loop_lock);
    int rc = 0;
    if (peer >= (int32_t)l->npeers)
        rc = -EINVAL;
    else if (!l->nfree)
        rc = -ENOBUFS;
    if (rc) {
        pthread_mutex_unlock(&loop_lock);
        return rc;
    }
    uint32_t i = l->free_stack[--l->nfree];
    struct slot *s = &l->slots[i];
    memcpy(s->buf, buf, len);
    s->len = len;
    memset(&s->src, 0, sizeof s->src);
    s->srclen = 0;
    if (peer >= 0) s->src = l->peers[peer], s->srclen = l->peerlen[peer];
    s->state = SLOT_LENT;
    *out =
        (struct uln_link_rx){.buf = s->buf, .len = len, .peer = peer < 0 ? -1 : peer, .handle = i};
    pthread_mutex_unlock(&loop_lock);
    return 0;
}

static int loop_add_peer(struct uln_link *base, const void *addr, socklen_t len)
{
    struct link_loop *l = (struct link_loop *)base;
    const struct sockaddr *sa = addr;
    if (len > sizeof(struct sockaddr_storage) || len < sizeof(sa_family_t)) return -EINVAL;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return -EAFNOSUPPORT;
    pthread_mutex_lock(&loop_lock);
    int rc = find_peer_locked(l, addr, len) >= 0 ? -EEXIST
             : l->npeers == l->max_peers         ? -ENOSPC
                                                 : (int)l->npeers;
    if (rc >= 0) {
        memset(&l->peers[rc], 0, sizeof l->peers[rc]);
        memcpy(&l->peers[rc], addr, len);
        l->peerlen[rc] = len;
        l->npeers++;
    }
    pthread_mutex_unlock(&loop_lock);
    return rc;
}

static int loop_set_peer(struct uln_link *base, int peer, const void *addr, socklen_t len)
{
    struct link_loop *l = (struct link_loop *)base;
    if (len > sizeof(struct sockaddr_storage) || peer < 0) return -EINVAL;
    pthread_mutex_lock(&loop_lock);
    int rc = (unsigned)peer < l->npeers ? 0 : -EINVAL;
    if (!rc) {
        memset(&l->peers[peer], 0, sizeof l->peers[peer]);
        memcpy(&l->peers[peer], addr, len);
        l->peerlen[peer] = len;
    }
    pthread_mutex_unlock(&loop_lock);
    return rc;
}

static int loop_find_peer(const struct uln_link *base, const void *addr, socklen_t len)
{
    pthread_mutex_lock(&loop_lock);
    int rc = find_peer_locked((const struct link_loop *)base, addr, len);
    pthread_mutex_unlock(&loop_lock);
    return rc;
}

static int loop_fds(const struct uln_link *base, int *fds, int max)
{
    if (max < 1) return 0;
    fds[0] = ((const struct link_loop *)base)->efd;
    return 1;
}

static int loop_wait(struct uln_link *base, int timeout_ms)
{
    struct link_loop *l = (struct link_loop *)base;
    pthread_mutex_lock(&loop_lock);
    unsigned nq = l->nq;
    pthread_mutex_unlock(&loop_lock);
    if (nq) return 1;
    struct pollfd p = {.fd = l->efd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r < 0) return errno == EINTR ? 0 : -errno;
    return r > 0;
}

static int loop_local(const struct uln_link *base, struct sockaddr_storage *ss, socklen_t *len)
{
    const struct link_loop *l = (const struct link_loop *)base;
    *ss = l->me;
    *len = l->melen;
    return 0;
}

static void loop_info(const struct uln_link *base, struct uln_link_info *info)
{
    const struct link_loop *l = (const struct link_loop *)base;
    memset(info, 0, sizeof *info);
    info->family = l->me.ss_family;
    info->mtu = info->payload_max = l->base.payload_max;
    info->rx_mem = (size_t)l->nslots * l->base.payload_max;
    memcpy(info->kind, "loop", 5);
}

static void loop_stats(const struct uln_link *base, struct uln_link_stats *st)
{
    pthread_mutex_lock(&loop_lock);
    *st = ((const struct link_loop *)base)->st;
    pthread_mutex_unlock(&loop_lock);
}

static void loop_free(struct link_loop *l)
{
    if (l->fd >= 0) close(l->fd);
    if (l->efd >= 0) close(l->efd);
    free(l->slots);
    free(l->mem);
    free(l->fifo);
    free(l->free_stack);
    free(l->peers);
    free(l->peerlen);
    free(l);
}

static void loop_close(struct uln_link *base)
{
    struct link_loop *l = (struct link_loop *)base;
    pthread_mutex_lock(&loop_lock);
    for (struct link_loop **pp = &loops; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    pthread_mutex_unlock(&loop_lock);
    loop_free(l);
}

static const struct uln_link_ops loop_ops = {
    .send = loop_send,
    .flush = loop_flush,
    .recv = loop_recv,
    .rx_release = loop_rx_release,
    .rx_addr = loop_rx_addr,
    .rx_lend = loop_rx_lend,
    .add_peer = loop_add_peer,
    .set_peer = loop_set_peer,
    .find_peer = loop_find_peer,
    .fds = loop_fds,
    .wait = loop_wait,
    .local = loop_local,
    .info = loop_info,
    .stats = loop_stats,
    .close = loop_close,
};

static int loop_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, bool asked,
                     struct uln_link **out, char *why, size_t whylen, bool *loud)
{
    (void)ctx, (void)asked, (void)why, (void)whylen;
    *loud = true;
    struct link_loop *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->fd = l->efd = -1;
    l->melen = sizeof l->me;
    if (getsockname(cfg->fd, (struct sockaddr *)&l->me, &l->melen) < 0) {
        int e = errno;
        free(l);
        return -e;
    }
    l->base = (struct uln_link){.ops = &loop_ops, .payload_max = LOOP_PAYLOAD};
    l->nslots = (cfg->rx_bufs ? cfg->rx_bufs : 512) + LOOP_SPARE;
    l->max_peers = cfg->max_peers ? cfg->max_peers : 256;
    l->slots = calloc(l->nslots, sizeof *l->slots);
    l->mem = malloc((size_t)l->nslots * l->base.payload_max);
    l->fifo = malloc(l->nslots * sizeof *l->fifo);
    l->free_stack = malloc(l->nslots * sizeof *l->free_stack);
    l->peers = calloc(l->max_peers, sizeof *l->peers);
    l->peerlen = calloc(l->max_peers, sizeof *l->peerlen);
    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!l->slots || !l->mem || !l->fifo || !l->free_stack || !l->peers || !l->peerlen ||
        l->efd < 0) {
        loop_free(l); /* fd is still -1: the caller keeps its socket */
        return -ENOMEM;
    }
    for (unsigned i = 0; i < l->nslots; i++) {
        l->slots[i].buf = l->mem + (size_t)i * l->base.payload_max;
        l->free_stack[l->nfree++] = l->nslots - 1 - i;
    }
    l->fd = cfg->fd; /* ours from now on: it keeps the port, and the address peers know */
    pthread_mutex_lock(&loop_lock);
    l->next = loops;
    loops = l;
    pthread_mutex_unlock(&loop_lock);
    *out = &l->base;
    return 0;
}

/* Only when named (ULN_LINK=loop): auto never takes a test's link. */
const struct uln_link_kind uln_link_kind_loop = {.name = "loop", .cost = 0, .open = loop_open};
