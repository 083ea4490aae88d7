/*
 * socks.c - a UDP socket of its own for each attached process, and the
 * table of which (address, port) is which (job, rank) (docs/service.md, "A
 * socket of its own").
 *
 * At attach the service binds a UDP socket to its own wire address and a
 * port the kernel picks, and passes it to the process (SCM_RIGHTS). The
 * process cannot bind it elsewhere (a bound socket is bound for good) and
 * no one else can bind that port (the service sets no SO_REUSEADDR or
 * SO_REUSEPORT), so every datagram sent on it carries, stamped by the
 * kernel, the source the service chose for that rank. The service tells the
 * services of the other hosts its job reaches (WIRE_SOCK, wire.c), and
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
#include <sys/socket.h>
#include <unistd.h>

#include "ulnetd.h"

/* Remote ranks' sockets kept, at most: 16 jobs' worth of the largest job
 * (ULN_BOOT_MAX_RANKS). Beyond, a SOCK is dropped and counted: those ranks
 * then go through the services, as ranks with no socket do. */
#define SOCKS_MAX 65536u

int socks_give(struct ulnetd *d, struct client *c, bool asked)
{
    if (d->no_socks || !d->wire || c->no_job || !asked) return -1;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = d->wire_ip};
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || !sa.sin_port) {
        fprintf(stderr, "ulnetd: no socket of its own for pid %d: %m\n", (int)c->pid);
        close(fd);
        return -1;
    }
    c->sock_fd = fd;
    c->sock_port = ntohs(sa.sin_port);
    d->c.socks_given++;
    return fd;
}

void socks_close(struct client *c)
{
    if (c->sock_fd >= 0) close(c->sock_fd);
    c->sock_fd = -1;
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
                 uint16_t port)
{
    if (!port) { /* that rank has no socket (any more): through the services */
        socks_forget(d, job_key, rank);
        return;
    }
    struct sock_entry e = {
        .job_key = job_key, .rank = rank, .ip = ip, .wire_port = wire_port, .port = port};
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
               uint16_t *port)
{
    int i = sock_index(d, job_key, rank);
    if (i < 0) return -ENOENT;
    *ip = d->socks[i].ip;
    *port = d->socks[i].port;
    return 0;
}

void socks_free(struct ulnetd *d)
{
    free(d->socks);
    d->socks = NULL;
    d->n_socks = d->cap_socks = 0;
}
