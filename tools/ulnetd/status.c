/*
 * status.c - what `ulnetd --status` shows: the service's answer to a STATUS
 * message, and the asking.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ulnetd.h"
#include "transport/svc/proto.h"

struct text {
    char *p;
    size_t n, room;
};

static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->p + t->n, t->room - t->n, fmt, ap);
    va_end(ap);
    if (k > 0) t->n = t->n + (size_t)k < t->room ? t->n + (size_t)k : t->room - 1;
}

/* The service's resident memory (what a forger or a quota would grow). */
static uint64_t resident_kib(void)
{
    unsigned long long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return res * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

size_t status_text(const struct ulnetd *d, char *out, size_t room)
{
    struct text t = {out, 0, room};
    out[0] = 0;
    unsigned n = 0;
    for (unsigned i = 0; i < d->n_clients; i++)
        n += d->clients[i] && d->clients[i]->attached;
    put(&t, "ulnetd pid %d at %s, host %012llx\n", (int)getpid(), d->path,
        (unsigned long long)d->host_id);
    put(&t, "memory: resident %llu KiB\n", (unsigned long long)resident_kib());
    t.n += wire_status(d, t.p + t.n, t.room - t.n);
    t.n += wire_seal_status(d, t.p + t.n, t.room - t.n);
    if (t.n >= t.room) t.n = t.room - 1;
    put(&t,
        "quota: queue memory %llu KiB per process; queues refused past it %llu; held for the "
        "wire %llu KiB per process; held back at it %llu\n",
        (unsigned long long)((d->queue_mem ? d->queue_mem : ULN_SVC_QUEUE_MEM_DEFAULT) >> 10),
        (unsigned long long)d->c.over_quota,
        (unsigned long long)((d->ops_mem ? d->ops_mem : ULN_SVC_OPS_MEM_DEFAULT) >> 10),
        (unsigned long long)d->c.over_ops);
    put(&t,
        "counters: attached %llu, detached %llu, refused %llu, malformed %llu\n"
        "messages: forwarded %llu, unroutable %llu; by address refused %llu; sleeps %llu, woken "
        "by a queue %llu\n"
        "served here: %llu PUT fragments and GETs, %llu refused; %llu atomics, %llu copies "
        "through a mapping%s\n"
        "GET data placed in the initiator's buffer: %llu GETs, %llu bytes; writes failed %llu\n"
        "wire: datagrams sent %llu, received %llu, resent %llu; services dead %llu, restarted "
        "%llu\n"
        "processes: %u attached\n",
        (unsigned long long)d->c.attached, (unsigned long long)d->c.detached,
        (unsigned long long)d->c.refused, (unsigned long long)d->c.malformed,
        (unsigned long long)d->c.forwarded, (unsigned long long)d->c.unroutable,
        (unsigned long long)d->c.byaddr_refused, (unsigned long long)d->c.sleeps,
        (unsigned long long)d->c.wakeups, (unsigned long long)d->c.served,
        (unsigned long long)d->c.refused_ops, (unsigned long long)d->c.atomics,
        (unsigned long long)d->c.mapped_ops, d->no_map ? " (--no-map)" : "",
        (unsigned long long)d->c.placed_gets, (unsigned long long)d->c.placed_bytes,
        (unsigned long long)d->c.place_failed, (unsigned long long)d->c.wire_tx,
        (unsigned long long)d->c.wire_rx, (unsigned long long)d->c.wire_resent,
        (unsigned long long)d->c.remotes_dead, (unsigned long long)d->c.remotes_reset, n);
    put(&t,
        "rank sockets: %s; given %llu, held %llu, not given (descriptors) %llu; other hosts' "
        "ranks known %u, not kept %llu\n",
        d->no_socks ? "off (--no-rank-socket)"
        : d->wire   ? "on"
                    : "none (no wire)",
        (unsigned long long)d->c.socks_given, (unsigned long long)d->socks_open,
        (unsigned long long)d->c.socks_refused, d->n_socks, (unsigned long long)d->c.socks_dropped);
    put(&t, "scheduling: %s%s, runs past the budget %llu, windows past the share %llu\n",
        d->rt_prio ? "SCHED_FIFO while woken" : "SCHED_OTHER",
        d->rt_prio && !d->rt_on ? " (now SCHED_OTHER)" : "", (unsigned long long)d->c.rt_drops,
        (unsigned long long)d->c.rt_over);
    for (unsigned i = 0; i < d->n_clients; i++) {
        const struct client *c = d->clients[i];
        if (!c || !c->attached) continue;
        unsigned nq = 0;
        for (unsigned e = 0; e < ULN_SVC_MAX_EPS; e++)
            nq += c->queues[e] != NULL;
        put(&t,
            "  client %u pid %d uid %u job %016llx rank %u/%u inbox %zu KiB queues %u (%llu KiB, "
            "%llu refused over quota) held for the wire %llu KiB (held back %llu) weight %u "
            "(cgroup %s) moved %llu msgs %llu bytes sockets %u from port %u\n",
            c->id, (int)c->pid, (unsigned)c->uid, (unsigned long long)c->job_key, c->rank, c->size,
            c->inbox_len >> 10, nq, (unsigned long long)(c->queue_bytes >> 10),
            (unsigned long long)c->over_quota, (unsigned long long)(c->wire_held >> 10),
            (unsigned long long)c->over_ops, c->weight, c->cgroup[0] ? c->cgroup : "?",
            (unsigned long long)c->moved_msgs, (unsigned long long)c->moved_bytes, c->n_sock_fds,
            c->sock_port);
    }
    return t.n;
}

int status_ask(const char *path)
{
    struct sockaddr_un sa;
    int salen = uln_svc_sockaddr(path, &sa);
    int fd = salen < 0 ? -1 : socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, (socklen_t)salen) != 0) {
        fprintf(stderr, "ulnetd: no ulnetd at %s (%s)\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    struct uln_svc_hdr h;
    uln_svc_hdr_init(&h, ULN_SVC_STATUS, sizeof h, 0);
    static char buf[ULN_SVC_MSG_MAX + 1];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t n = -1;
    if (send(fd, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h && poll(&p, 1, 5000) == 1)
        n = recv(fd, buf, ULN_SVC_MSG_MAX, 0);
    close(fd);
    memcpy(&h, buf, sizeof h);
    if (n < (ssize_t)sizeof h || h.magic != ULN_SVC_MAGIC || h.type != ULN_SVC_STATUS_TEXT) {
        fprintf(stderr, "ulnetd: the service at %s did not answer\n", path);
        return 1;
    }
    buf[n] = 0;
    fputs(buf + sizeof h, stdout);
    return 0;
}
