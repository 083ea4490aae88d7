/*
 * own_sock - the UDP socket of its own a service binds for each attached
 * process (docs/service.md, "A socket of its own"), two ranks on two
 * namespace hosts, each attached to its host's ulnetd (tests/netns/run_job.sh
 * --svc):
 *   - each rank has a socket per endpoint index (ULN_MAX_EPS) from its
 *     service, bound to that service's address on consecutive ports
 *     (endpoint i's at the first + i, the udp transport's layout), and
 *     cannot bind one elsewhere (EINVAL), nor can another socket take its
 *     port (EADDRINUSE);
 *   - once the ranks have met (a NAP each way through the services), each
 *     learns from its own service where the other sends from, as the other's
 *     service told it over the wire: the other service's address, the port
 *     the other rank's socket has there;
 *   - rank 1 sends one datagram on its endpoint 0's socket, one on its last
 *     endpoint's, and one from a socket of its own making, all claiming to
 *     be rank 1: rank 0 takes the first two as rank 1's (and from which of
 *     its endpoints), refuses the third and counts it (svc.src_refused 1);
 *   - the service refuses to say where the asker itself sends from (only
 *     its job's other ranks are asked for);
 *   - rank 1 ends: once rank 0 finds it gone (its service's GONE), what it
 *     had cached of rank 1's sockets is dropped, and a datagram from rank
 *     1's old source - a port another process may hold now - is no longer
 *     taken for rank 1's (-EPERM).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "core/internal.h"
#include "transport/svc/svc.h"

static struct t_job J;

static uint64_t src_refused(void)
{
    char v[32];
    CHECK(uln_query_key(J.ctx, "svc.src_refused", v, sizeof v) > 0);
    return strtoull(v, NULL, 10);
}

/* Rank 1: two datagrams as itself, one from a socket the service never saw. */
static void send_all(const struct uln_svc *s, uint32_t ip, uint16_t port)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
    CHECK(sendto(s->sock_fds[0], "rank 1", 6, 0, (struct sockaddr *)&to, sizeof to) == 6);
    CHECK(sendto(s->sock_fds[s->n_socks - 1], "rank 1", 6, 0, (struct sockaddr *)&to, sizeof to) ==
          6);
    int f = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(f >= 0);
    /* Its port taken: refused (the service set no SO_REUSEADDR). */
    int one = 1;
    CHECK(setsockopt(f, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in mine = {.sin_family = AF_INET,
                               .sin_port = htons(s->sock_port + s->n_socks - 1),
                               .sin_addr.s_addr = s->wire_ip};
    CHECK(bind(f, (struct sockaddr *)&mine, sizeof mine) == -1 && errno == EADDRINUSE);
    mine.sin_port = 0; /* the same address, any other port: the forger's best */
    CHECK(bind(f, (struct sockaddr *)&mine, sizeof mine) == 0);
    CHECK(sendto(f, "rank 1", 6, 0, (struct sockaddr *)&to, sizeof to) == 6);
    close(f);
}

/* Rank 0: the three datagrams, each judged by its source. */
static void judge_all(const struct uln_svc *s, unsigned peer_socks)
{
    int refused = 0;
    bool from[2] = {false, false}; /* rank 1's endpoint 0, its last */
    uint64_t before = src_refused();
    for (int i = 0; i < 3; i++) {
        struct pollfd p = {.fd = s->sock_fds[0], .events = POLLIN};
        CHECKF(poll(&p, 1, 10000) == 1, "datagram %d of rank 1 did not come", i);
        char b[16];
        struct sockaddr_in src;
        socklen_t sl = sizeof src;
        ssize_t n = recvfrom(s->sock_fds[0], b, sizeof b, 0, (struct sockaddr *)&src, &sl);
        CHECK(n == 6 && !memcmp(b, "rank 1", 6));
        int ep = uln_svc_src_ep(J.ctx, 1, &src);
        if (ep < 0)
            refused++;
        else if (ep == 0)
            from[0] = true;
        else
            CHECKF(ep == (int)peer_socks - 1 && (from[1] = true), "taken as endpoint %d", ep);
    }
    CHECKF(from[0] && from[1] && refused == 1,
           "rank 1's datagrams: endpoint 0's %s, the last's %s, %d refused (want 1)",
           from[0] ? "taken" : "not taken", from[1] ? "taken" : "not taken", refused);
    CHECKF(src_refused() == before + 1, "svc.src_refused %llu, not %llu",
           (unsigned long long)src_refused(), (unsigned long long)before + 1);
}

/* Rank 0: rank 1 ended; once it is found gone, its old source is refused. */
static void peer_gone_forgotten(struct uln_cq *cq, const struct uln_svc_peer_sock_at *at)
{
    struct sockaddr_in old = {
        .sin_family = AF_INET, .sin_port = htons(at->port), .sin_addr.s_addr = at->ip};
    CHECKF(uln_svc_src_ep(J.ctx, 1, &old) == 0, "rank 1's source not taken while it lives");
    struct uln_counters c = {0};
    double until = t_now() + 20;
    struct uln_cqe e[8];
    while (c.peers_dead == 0 && t_now() < until) {
        (void)uln_cq_poll(cq, e, 8); /* progress: the gone bits are looked at */
        CHECK_OK(uln_counters_get(J.ctx, &c));
        if (c.peers_dead == 0) t_sleep_ms(5);
    }
    CHECKF(c.peers_dead == 1, "rank 1 ended and was not found gone within 20 s");
    int rc = uln_svc_src_ep(J.ctx, 1, &old);
    CHECKF(rc == -EPERM, "rank 1's old source still taken for rank 1's after it ended (%d)", rc);
    printf("rank 0: rank 1 gone, its old source refused\n");
}

int main(void)
{
    t_open(&J, 2);
    const struct uln_svc *s = J.ctx->svc;
    CHECKF(s != NULL, "not attached to a service");
    CHECKF(s->n_socks == J.ctx->p.max_eps && s->sock_port != 0,
           "%u sockets of its own from the service, not ULN_MAX_EPS %u", s->n_socks,
           J.ctx->p.max_eps);
    for (unsigned i = 0; i < s->n_socks; i++) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        CHECK(getsockname(s->sock_fds[i], (struct sockaddr *)&sa, &sl) == 0);
        CHECK(sa.sin_addr.s_addr == s->wire_ip && ntohs(sa.sin_port) == s->sock_port + i);
        struct sockaddr_in any = {.sin_family = AF_INET};
        CHECK(bind(s->sock_fds[i], (struct sockaddr *)&any, sizeof any) == -1 && errno == EINVAL);
    }

    /* Meet: a NAP each way through the services routes each to the other. */
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 64, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    uint64_t mine = (uint64_t)J.rank, all[2];
    t_exchange(&J, ep, cq, &mine, 1, all);

    int peer = 1 - J.rank;
    struct uln_svc_peer_sock_at at;
    double until = t_now() + 10;
    int rc;
    while ((rc = uln_svc_peer_sock(J.ctx, peer, true, &at)) == -ENOENT && t_now() < until)
        t_sleep_ms(20);
    CHECKF(rc == 0, "rank %d's socket not known here: %s", peer, t_errname(rc));
    CHECKF(at.ip != s->wire_ip && at.port != 0, "rank %d's sockets said to be on our own service",
           peer);
    CHECKF(at.count == J.ctx->p.max_eps, "rank %d has %u sockets, not ULN_MAX_EPS", peer, at.count);
    struct uln_svc_peer_sock q = {.rank = (uint32_t)J.rank}, a;
    uln_svc_hdr_init(&q.h, ULN_SVC_PEER_SOCK, sizeof q, 0);
    CHECK(uln_svc_request(J.ctx, &q, sizeof q, NULL, 0, ULN_SVC_PEER_SOCK_OK, &a, sizeof a) ==
          -EINVAL);
    printf("rank %d: rank %d sends from its service's address, ports %u..%u\n", J.rank, peer,
           (unsigned)at.port, (unsigned)at.port + at.count - 1);

    t_barrier(&J);
    if (J.rank == 1)
        send_all(s, at.ip, at.port);
    else
        judge_all(s, at.count);
    t_barrier(&J);
    if (J.rank == 1) { /* ends: its service tells rank 0's (GONE) */
        CHECK_OK(uln_ep_close(ep));
        CHECK_OK(uln_cq_close(cq));
        CHECK_OK(uln_close(J.ctx));
        t_summary(t_failed);
        return t_failed ? 1 : 0;
    }
    peer_gone_forgotten(cq, &at);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    CHECK_OK(uln_close(J.ctx));
    t_summary(t_failed);
    return t_failed ? 1 : 0;
}
