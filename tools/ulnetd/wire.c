/*
 * wire.c - the wire between services (docs/service.md, "Between services"):
 * one UDP socket, one src/rel machine per remote service (a host pair, one
 * sequence space), and per data packet one forwarded ring message behind
 * the wire header below. The sending service stamps the job key and the
 * source rank from the attach (a process names only the destination); the
 * receiving one writes the message into the target's inbox ring for
 * (source rank, endpoint, channel), as it does for a process on its host.
 *
 * Backpressure: a message whose target ring is full waits in the remote's
 * backlog, and its receive buffer is given back to rel only once it is in
 * the ring, so rel's credit stops that host pair (not others) until the
 * target makes room. Per-process credit is next (docs/service.md).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ulnetd.h"
#include "core/wire.h"

#define WIRE_MAGIC   0x756c6e77u /* "ulnw" */
#define WIRE_VERSION 1u
#define WIRE_GONE    0xf0u /* a process ended: job_key, src_rank */
#define WIRE_WINDOW  256u

struct wire_hdr { /* rel's part of a packet */
    uint32_t magic;
    uint16_t version, rflags;
    uint32_t src_epoch, dst_epoch, seq, ack, lose;
    uint16_t sack_off, credit, reorder, pad_;
    uint64_t sack;
};

struct svc_wire { /* one forwarded message, after wire_hdr */
    uint8_t type, ch;
    uint16_t flags;
    uint32_t len;
    uint64_t job_key;
    uint32_t src_rank, dst_rank;
    uint16_t src_ep, dst_ep;
    uint32_t aux;
};

#define WIRE_HDRS (sizeof(struct wire_hdr) + sizeof(struct svc_wire))
#define WIRE_MAX  65507u /* a UDP datagram's payload */

struct pending { /* arrived in order, not yet in its target's ring */
    struct pending *next;
    uint32_t len;
    uint8_t bytes[]; /* struct svc_wire + payload */
};

struct remote {
    struct sockaddr_in sa;
    struct uln_rel rel;
    uint8_t *tx[WIRE_WINDOW]; /* sent, not yet acknowledged: whole packets */
    uint32_t tx_len[WIRE_WINDOW];
    uint8_t *rx[WIRE_WINDOW]; /* arrived ahead of order: struct svc_wire + payload */
    uint32_t rx_len[WIRE_WINDOW];
    struct pending *head, *tail;
    bool dead_said;
};

struct route {
    uint64_t job_key;
    uint32_t rank;
    struct remote *r;
};

struct wire {
    int fd;
    struct remote **remotes;
    unsigned n_remotes;
    struct route *routes;
    unsigned n_routes, cap_routes;
    uint32_t epoch;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int wire_open(struct ulnetd *d, const char *addr)
{
    char host[64];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    unsigned port = ULN_SVC_WIRE_PORT;
    if (colon) {
        *colon = 0;
        port = (unsigned)atoi(colon + 1);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (port == 0 || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "ulnetd: --addr %s: want IPv4[:port]\n", addr);
        return -1;
    }
    struct wire *w = calloc(1, sizeof *w);
    if (!w) return -1;
    w->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int big = 8 << 20;
    setsockopt(w->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(w->fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (w->fd < 0 || bind(w->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        fprintf(stderr, "ulnetd: --addr %s: %s\n", addr, strerror(errno));
        if (w->fd >= 0) close(w->fd);
        free(w);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &d->wire_kind};
    if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, w->fd, &ev) != 0) {
        close(w->fd);
        free(w);
        return -1;
    }
    /* A new life each start: packets of an earlier one are stale to peers. */
    while (getrandom(&w->epoch, sizeof w->epoch, 0) != sizeof w->epoch || !w->epoch)
        ;
    d->wire = w;
    d->wire_ip = sa.sin_addr.s_addr;
    d->wire_port = (uint16_t)port;
    return 0;
}

static struct remote *remote_of(struct ulnetd *d, uint32_t ip, uint16_t port, bool make)
{
    struct wire *w = d->wire;
    for (unsigned i = 0; i < w->n_remotes; i++) {
        struct remote *r = w->remotes[i];
        if (r->sa.sin_addr.s_addr == ip && r->sa.sin_port == htons(port)) return r;
    }
    if (!make) return NULL;
    struct remote **rs = realloc(w->remotes, (w->n_remotes + 1) * sizeof *rs);
    struct remote *r = calloc(1, sizeof *r);
    if (!rs || !r) {
        free(r);
        if (rs) w->remotes = rs;
        return NULL;
    }
    w->remotes = rs;
    r->sa =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
    struct uln_rel_cfg cfg;
    uln_rel_cfg_default(&cfg);
    cfg.window = WIRE_WINDOW;
    cfg.mss = 9000;
    cfg.dead_after = 3000000000ull; /* a silent service: its peers end in 3 s */
    cfg.keepalive = 500000000ull;
    if (uln_rel_init(&r->rel, &cfg, w->epoch, now_ns()) != 0) {
        free(r);
        return NULL;
    }
    w->remotes[w->n_remotes++] = r;
    return r;
}

int wire_route(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t port)
{
    struct wire *w = d->wire;
    if (!w) return -ENETUNREACH;
    if (port == 0 || (ip == d->wire_ip && port == d->wire_port)) return -EINVAL;
    struct remote *r = remote_of(d, ip, port, true);
    if (!r) return -ENOMEM;
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].job_key == job_key && w->routes[i].rank == rank) {
            w->routes[i].r = r;
            return 0;
        }
    if (w->n_routes == w->cap_routes) {
        unsigned cap = w->cap_routes ? 2 * w->cap_routes : 64;
        struct route *rt = realloc(w->routes, cap * sizeof *rt);
        if (!rt) return -ENOMEM;
        w->routes = rt;
        w->cap_routes = cap;
    }
    w->routes[w->n_routes++] = (struct route){job_key, rank, r};
    return 0;
}

static struct remote *route_of(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    const struct wire *w = d->wire;
    for (unsigned i = 0; w && i < w->n_routes; i++)
        if (w->routes[i].job_key == job_key && w->routes[i].rank == rank) return w->routes[i].r;
    return NULL;
}

bool wire_routes(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    return route_of(d, job_key, rank) != NULL;
}

static void hdr_fill(struct wire_hdr *h, const struct uln_rel_pkt *p)
{
    *h = (struct wire_hdr){.magic = WIRE_MAGIC,
                           .version = WIRE_VERSION,
                           .rflags = p->flags,
                           .src_epoch = p->src_epoch,
                           .dst_epoch = p->dst_epoch,
                           .seq = p->seq,
                           .ack = p->fb.ack,
                           .lose = p->fb.lose,
                           .sack_off = p->fb.sack_off,
                           .credit = p->fb.credit,
                           .reorder = p->fb.reorder,
                           .sack = p->fb.sack};
}

static void send_pkt(struct ulnetd *d, struct remote *r, const void *buf, size_t len)
{
    /* Lost when the socket is full: rel recovers it as any loss. */
    (void)!sendto(d->wire->fd, buf, len, MSG_DONTWAIT, (struct sockaddr *)&r->sa, sizeof r->sa);
    d->c.wire_tx++;
}

/* One message to r: false when rel cannot take it now (connecting, window
 * or credit): the queue waits and tries again. */
static bool send_msg(struct ulnetd *d, struct remote *r, const struct svc_wire *m,
                     const uint8_t *payload)
{
    uint64_t now = now_ns();
    size_t len = WIRE_HDRS + m->len;
    uint32_t seq = uln_rel_tx_next_seq(&r->rel);
    uint32_t i = seq & (WIRE_WINDOW - 1);
    if (r->tx[i]) return false; /* its acknowledgement not taken yet */
    uint8_t *b = malloc(len);
    if (!b) return false;
    struct uln_rel_pkt p;
    if (uln_rel_tx_assign(&r->rel, now, (uint32_t)len, &p) != 0) {
        free(b);
        return false;
    }
    hdr_fill((struct wire_hdr *)b, &p);
    memcpy(b + sizeof(struct wire_hdr), m, sizeof *m);
    memcpy(b + WIRE_HDRS, payload, m->len);
    r->tx[i] = b;
    r->tx_len[i] = (uint32_t)len;
    send_pkt(d, r, b, len);
    return true;
}

int wire_forward(struct ulnetd *d, const struct client *c, uint32_t ep, int ch,
                 const struct uln_msg *m, uint32_t dst, const uint8_t *payload)
{
    struct remote *r = route_of(d, c->job_key, dst);
    if (!r) return -EHOSTUNREACH;
    if (uln_rel_state(&r->rel) == ULN_REL_DEAD) return -ECONNRESET;
    if (WIRE_HDRS + m->len > WIRE_MAX) return -EMSGSIZE;
    struct svc_wire w = {.type = m->type,
                         .ch = (uint8_t)ch,
                         .flags = m->flags,
                         .len = m->len,
                         .job_key = c->job_key, /* stamped: the attach's, not the process's word */
                         .src_rank = c->rank,
                         .dst_rank = dst,
                         .src_ep = (uint16_t)ep,
                         .dst_ep = (uint16_t)ep};
    return send_msg(d, r, &w, payload) ? 0 : -EAGAIN;
}

void wire_gone(struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    struct wire *w = d->wire;
    if (!w) return;
    struct svc_wire m = {.type = WIRE_GONE, .job_key = job_key, .src_rank = rank};
    for (unsigned i = 0; i < w->n_remotes; i++) {
        struct remote *r = w->remotes[i];
        bool routed = false; /* only to services where its job has ranks */
        for (unsigned k = 0; k < w->n_routes && !routed; k++)
            routed = w->routes[k].r == r && w->routes[k].job_key == job_key;
        if (routed && !send_msg(d, r, &m, NULL))
            fprintf(stderr, "ulnetd: GONE of rank %u not sent (window full)\n", rank);
    }
}

/* Into its target's ring. False: the ring is full, try again later. */
static bool deliver(struct ulnetd *d, const uint8_t *b, uint32_t len)
{
    struct svc_wire m;
    if (len < sizeof m) return true;
    memcpy(&m, b, sizeof m);
    if (m.len != len - sizeof m) {
        d->c.malformed++;
        return true;
    }
    if (m.type == WIRE_GONE) {
        queues_rank_gone(d, m.job_key, m.src_rank);
        return true;
    }
    struct client *t = find_target(d, m.job_key, m.dst_rank);
    if (!t || !uln_msg_desc(m.type) || m.ch > 1 || m.src_ep >= t->hdr.max_eps ||
        m.src_rank >= t->hdr.size || m.src_rank == m.dst_rank ||
        m.len > uln_ring_max_payload(m.ch ? t->hdr.req_ring_bytes : t->hdr.ring_bytes) / 2) {
        d->c.unroutable++;
        return true;
    }
    if (!feed_put(t, m.src_rank, m.src_ep, m.ch, m.type, (uint8_t)m.flags, b + sizeof m, m.len))
        return false;
    d->c.forwarded++;
    return true;
}

static void backlog_add(struct remote *r, const uint8_t *b, uint32_t len)
{
    struct pending *p = malloc(sizeof *p + len);
    if (!p) return; /* lost for good: the target's peer sees a hole (counted by rel) */
    p->next = NULL;
    p->len = len;
    memcpy(p->bytes, b, len);
    if (r->tail)
        r->tail->next = p;
    else
        r->head = p;
    r->tail = p;
}

/* Deliver in order: the backlog first, and a packet behind it waits there. */
static void take(struct ulnetd *d, struct remote *r, const uint8_t *b, uint32_t len, uint64_t now)
{
    if (!r->head && deliver(d, b, len)) {
        uln_rel_rx_release(&r->rel, 1, now);
        return;
    }
    backlog_add(r, b, len);
}

static bool backlog_drain(struct ulnetd *d, struct remote *r)
{
    bool moved = false;
    while (r->head && deliver(d, r->head->bytes, r->head->len)) {
        struct pending *p = r->head;
        r->head = p->next;
        if (!r->head) r->tail = NULL;
        free(p);
        uln_rel_rx_release(&r->rel, 1, now_ns());
        moved = true;
    }
    return moved;
}

static void void_all(struct remote *r)
{
    for (unsigned i = 0; i < WIRE_WINDOW; i++) {
        free(r->rx[i]);
        r->rx[i] = NULL;
    }
}

static void input(struct ulnetd *d, const uint8_t *buf, size_t n, const struct sockaddr_in *from)
{
    struct wire_hdr h;
    if (n < sizeof h) return;
    memcpy(&h, buf, sizeof h);
    if (h.magic != WIRE_MAGIC || h.version != WIRE_VERSION) {
        d->c.malformed++;
        return;
    }
    bool data = h.rflags & ULN_REL_DATA;
    if (data && n < WIRE_HDRS) {
        d->c.malformed++;
        return;
    }
    struct remote *r = remote_of(d, from->sin_addr.s_addr, ntohs(from->sin_port), true);
    if (!r) return;
    d->c.wire_rx++;
    struct uln_rel_pkt p = {.src_epoch = h.src_epoch,
                            .dst_epoch = h.dst_epoch,
                            .seq = h.seq,
                            .flags = h.rflags,
                            .fb = {.ack = h.ack,
                                   .lose = h.lose,
                                   .sack = h.sack,
                                   .sack_off = h.sack_off,
                                   .credit = h.credit,
                                   .reorder = h.reorder}};
    uint64_t now = now_ns();
    const uint8_t *b = buf + sizeof h;
    uint32_t len = (uint32_t)(n - sizeof h);
    switch (uln_rel_rx(&r->rel, &p, now)) {
    case ULN_REL_RX_DELIVER:
        take(d, r, b, len, now);
        break;
    case ULN_REL_RX_HOLD: {
        uint32_t i = h.seq & (WIRE_WINDOW - 1);
        free(r->rx[i]);
        r->rx[i] = malloc(len);
        if (r->rx[i]) memcpy(r->rx[i], b, len);
        r->rx_len[i] = len;
        break;
    }
    case ULN_REL_RX_RESET:
        void_all(r); /* its new life: what the old one held is void */
        break;
    default:
        break;
    }
    uint32_t seq;
    while (uln_rel_rx_next(&r->rel, &seq)) {
        uint32_t i = seq & (WIRE_WINDOW - 1);
        if (r->rx[i]) {
            take(d, r, r->rx[i], r->rx_len[i], now);
            free(r->rx[i]);
            r->rx[i] = NULL;
        } else
            uln_rel_rx_release(&r->rel, 1, now);
    }
}

bool wire_input(struct ulnetd *d)
{
    static uint8_t buf[65536];
    bool any = false;
    for (int k = 0; d->wire && k < 64; k++) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n =
            recvfrom(d->wire->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0) break;
        if (fl != sizeof from || from.sin_family != AF_INET) continue;
        input(d, buf, (size_t)n, &from);
        any = true;
    }
    return any;
}

/* A remote service stayed silent: every rank routed there is gone for our
 * processes of its job, and what we sent it is void. */
static void remote_dead(struct ulnetd *d, struct remote *r)
{
    struct wire *w = d->wire;
    r->dead_said = true;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &r->sa.sin_addr, ip, sizeof ip);
    fprintf(stderr, "ulnetd: the service at %s:%u is silent: its ranks are gone\n", ip,
            ntohs(r->sa.sin_port));
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].r == r) queues_rank_gone(d, w->routes[i].job_key, w->routes[i].rank);
    d->c.remotes_dead++;
}

uint64_t wire_tick(struct ulnetd *d, bool *moved)
{
    struct wire *w = d->wire;
    uint64_t next = ULN_REL_NEVER, now = now_ns();
    for (unsigned k = 0; w && k < w->n_remotes; k++) {
        struct remote *r = w->remotes[k];
        uln_rel_tick(&r->rel, now);
        if (uln_rel_state(&r->rel) == ULN_REL_DEAD) {
            if (!r->dead_said) remote_dead(d, r);
            continue;
        }
        uint32_t seq;
        while (uln_rel_tx_next_acked(&r->rel, &seq)) {
            uint32_t i = seq & (WIRE_WINDOW - 1);
            free(r->tx[i]);
            r->tx[i] = NULL;
        }
        struct uln_rel_pkt p;
        while (uln_rel_tx_next_resend(&r->rel, now, &p)) {
            uint32_t i = p.seq & (WIRE_WINDOW - 1);
            if (!r->tx[i]) continue;
            hdr_fill((struct wire_hdr *)r->tx[i], &p); /* fresh feedback, the RETX flag */
            send_pkt(d, r, r->tx[i], r->tx_len[i]);
            d->c.wire_resent++;
        }
        if (backlog_drain(d, r)) *moved = true;
        while (uln_rel_ctrl(&r->rel, now, &p)) {
            struct wire_hdr h;
            hdr_fill(&h, &p);
            send_pkt(d, r, &h, sizeof h);
        }
        uint64_t t = uln_rel_next_deadline(&r->rel);
        if (r->head && t > now + 1000000) t = now + 1000000; /* a full target ring: 1 ms */
        if (t < next) next = t;
    }
    return next;
}

/* Milliseconds to the next deadline of the wire (-1: none), for epoll_wait. */
int wire_timeout_ms(uint64_t deadline)
{
    if (deadline == ULN_REL_NEVER) return -1;
    uint64_t now = now_ns();
    if (deadline <= now) return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 1000 ? 1000 : (int)ms;
}

size_t wire_status(const struct ulnetd *d, char *out, size_t room)
{
    const struct wire *w = d->wire;
    if (!w) return (size_t)snprintf(out, room, "wire: none (no --addr): this host only\n");
    char ip[INET_ADDRSTRLEN];
    struct in_addr a = {.s_addr = d->wire_ip};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    int n = snprintf(out, room, "wire: udp %s:%u, %u remote services, %u routes\n", ip,
                     d->wire_port, w->n_remotes, w->n_routes);
    size_t used = n < 0 ? 0 : (size_t)n < room ? (size_t)n : room;
    for (unsigned i = 0; i < w->n_remotes && used < room; i++) {
        const struct remote *r = w->remotes[i];
        inet_ntop(AF_INET, &r->sa.sin_addr, ip, sizeof ip);
        int st = uln_rel_state(&r->rel);
        n = snprintf(
            out + used, room - used, "  remote %s:%u %s: sent %llu resent %llu received %llu\n", ip,
            ntohs(r->sa.sin_port),
            st == ULN_REL_OPEN   ? "open"
            : st == ULN_REL_DEAD ? "dead"
                                 : "connecting",
            (unsigned long long)r->rel.stats.tx_data, (unsigned long long)r->rel.stats.tx_resend,
            (unsigned long long)r->rel.stats.rx_data);
        if (n > 0) used += (size_t)n < room - used ? (size_t)n : room - used;
    }
    return used;
}
