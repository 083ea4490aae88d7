/*
 * socks.c - a UDP socket of its own for each attached process, and the
 * table of which (address, port) is which (job, rank) (docs/service.md, "A
 * socket of its own").
 *
 * At attach the service binds UDP sockets to its own wire address, one per
 * endpoint index the process may open, on consecutive ports (the udp
 * transport's layout: endpoint i at base + i), and passes them to the
 * process (SCM_RIGHTS). The process cannot bind them elsewhere (a bound socket is bound for good)
 * and no one else can bind that port (the service sets no SO_REUSEADDR or SO_REUSEPORT), so every
 * datagram sent on it carries, stamped by the kernel, the source the service chose for that rank.
 * The service tells the services of the other hosts its job reaches (WIRE_SOCK, wire.c), and
 * answers its processes' questions (PEER_SOCK): a datagram that claims to
 * be rank r's and comes from any other source is not r's.
 *
 * A service vouches only for ports on its own address: what a remote
 * service says is kept with that remote's address, never one it names. The
 * service keeps its copy of each socket (to watch it for a rank that
 * sleeps, later) and closes it when the process ends, however it ends.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ulnetd.h"

/* Remote ranks' sockets kept, at most: 16 jobs' worth of the largest job
 * (ULN_BOOT_MAX_RANKS). Beyond, a SOCK is dropped and counted: those ranks
 * then go through the services, as ranks with no socket do. */
#define SOCKS_MAX 65536u

/* Bind c's block: n sockets on ports base .. base + n - 1 of our address
 * (the udp transport finds a rank's endpoint i at base + i). True if all. */
static bool bind_block(struct ulnetd *d, struct client *c, unsigned base, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)(base + i)),
                                 .sin_addr.s_addr = d->wire_ip};
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            if (fd >= 0) close(fd);
            for (unsigned k = 0; k < c->n_sock_fds; k++)
                close(c->sock_fds[k]);
            c->n_sock_fds = 0;
            return false;
        }
        c->sock_fds[c->n_sock_fds++] = fd;
    }
    c->sock_port = (uint16_t)base;
    return true;
}

/* Descriptors the rank sockets may hold, at most: half of what the service
 * may open (its soft limit, raised to the hard one), so that processes
 * attaching, their queues and memory are never refused for want of a
 * descriptor because of them. */
static uint64_t socks_fd_budget(void)
{
    static uint64_t budget;
    if (!budget) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        budget = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                     ? rl.rlim_cur / 2
                     : 1u << 20;
    }
    return budget;
}

int socks_give(struct ulnetd *d, struct client *c, unsigned n, bool asked)
{
    if (d->no_socks || !d->wire || c->no_job || !asked || !n || n > ULN_SVC_MAX_EPS) return 0;
    if (d->socks_open + n > socks_fd_budget()) {
        d->c.socks_refused++; /* that process goes through the service only */
        return 0;
    }
    /* A block drawn from [20000, 60000) as the udp transport draws its own,
     * another while one is taken. */
    uint64_t rng = d->host_id ^ ((uint64_t)c->pid << 32) ^ c->id;
    for (int attempt = 0; attempt < 64; attempt++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned base = 20000u + (unsigned)((rng >> 33) % (40000u - n));
        if (bind_block(d, c, base, n)) {
            d->c.socks_given++;
            d->socks_open += n;
            return (int)n;
        }
    }
    fprintf(stderr, "ulnetd: no %u sockets of their own for pid %d: %m\n", n, (int)c->pid);
    return 0;
}

void socks_close(struct ulnetd *d, struct client *c)
{
    for (unsigned i = 0; i < c->n_sock_fds; i++)
        close(c->sock_fds[i]);
    d->socks_open -= c->n_sock_fds;
    c->n_sock_fds = 0;
    c->sock_port = 0;
}

static int sock_index(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    for (unsigned i = 0; i < d->n_socks; i++)
        if (d->socks[i].job_key == job_key && d->socks[i].rank == rank) return (int)i;
    return -1;
}

void socks_forget(struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    int i = sock_index(d, job_key, rank);
    if (i >= 0) d->socks[i] = d->socks[--d->n_socks];
}

void socks_forget_at(struct ulnetd *d, uint32_t ip, uint16_t wire_port)
{
    for (unsigned i = 0; i < d->n_socks;)
        if (d->socks[i].ip == ip && d->socks[i].wire_port == wire_port)
            d->socks[i] = d->socks[--d->n_socks];
        else
            i++;
}

void socks_learn(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t wire_port,
                 uint16_t port, uint16_t count)
{
    /* No socket (any more), or none that fits: that rank through the services. */
    if (!port || !count || count > ULN_SVC_MAX_EPS || port + count - 1u > UINT16_MAX) {
        socks_forget(d, job_key, rank);
        return;
    }
    struct sock_entry e = {.job_key = job_key,
                           .rank = rank,
                           .ip = ip,
                           .wire_port = wire_port,
                           .port = port,
                           .count = count};
    int i = sock_index(d, job_key, rank);
    if (i >= 0) {
        d->socks[i] = e;
        return;
    }
    if (d->n_socks == d->cap_socks) {
        unsigned cap = d->cap_socks ? 2 * d->cap_socks : 64;
        struct sock_entry *s = cap > SOCKS_MAX ? NULL : realloc(d->socks, cap * sizeof *s);
        if (!s) {
            d->c.socks_dropped++;
            return;
        }
        d->socks = s;
        d->cap_socks = cap;
    }
    d->socks[d->n_socks++] = e;
}

int socks_find(const struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t *ip,
               uint16_t *port, uint16_t *count)
{
    int i = sock_index(d, job_key, rank);
    if (i < 0) return -ENOENT;
    *ip = d->socks[i].ip;
    *port = d->socks[i].port;
    *count = d->socks[i].count;
    return 0;
}

void socks_free(struct ulnetd *d)
{
    free(d->socks);
    d->socks = NULL;
    d->n_socks = d->cap_socks = 0;
}
