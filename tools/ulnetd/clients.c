/*
 * clients.c - processes attaching to the service and leaving it.
 *
 * Everything a process sends is untrusted: one parser (uln_svc_parse)
 * checks each message, the identity comes from SO_PEERCRED, and the inbox
 * it passes must be its own (the pid in its header is the socket's, from the
 * kernel, and its job key, rank and size are those claimed), sealed against
 * shrinking (so
 * that the service never takes SIGBUS from it), and laid out so that every
 * address computed from its header stays inside it. A refusal is counted
 * and ends that connection alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ulnetd.h"
#include "core/inbox.h"
#include "transport/svc/proto.h"

#define MAX_FDS 4 /* descriptors taken from one message; more: malformed */

static int client_slot(struct ulnetd *d)
{
    for (unsigned i = 0; i < d->n_clients; i++)
        if (!d->clients[i]) return (int)i;
    if (d->n_clients == d->cap_clients) {
        unsigned cap = d->cap_clients ? 2 * d->cap_clients : 16;
        struct client **c = realloc(d->clients, cap * sizeof *c);
        if (!c) return -1;
        d->clients = c;
        d->cap_clients = cap;
    }
    d->clients[d->n_clients] = NULL;
    return (int)d->n_clients++;
}

struct client *client_add(struct ulnetd *d, int fd)
{
    struct ucred cr;
    socklen_t crl = sizeof cr;
    int slot = client_slot(d);
    struct client *c = slot < 0 ? NULL : calloc(1, sizeof *c);
    if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) != 0) {
        free(c);
        close(fd);
        return NULL;
    }
    *c = (struct client){
        .kind = KIND_CLIENT, .fd = fd, .id = d->next_id++, .pid = cr.pid, .uid = cr.uid};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(c);
        close(fd);
        return NULL;
    }
    d->clients[slot] = c;
    return c;
}

int clients_accept(struct ulnetd *d)
{
    for (;;) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return errno == EAGAIN ? 0 : -errno;
        client_add(d, fd);
    }
}

static void send_answer(struct client *c, const void *buf, size_t len)
{
    /* A process that does not read its answers loses only its own. */
    (void)!send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ... with descriptors (SCM_RIGHTS); n 0: none. */
static void send_answer_fds(struct client *c, const void *buf, size_t len, const int *fds,
                            unsigned n)
{
    if (!n) {
        send_answer(c, buf, len);
        return;
    }
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(ULN_SVC_MAX_EPS * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)buf, len};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = u.b,
                       .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(h), fds, n * sizeof(int));
    (void)!sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void refuse(struct ulnetd *d, struct client *c, int status, const char *why)
{
    struct uln_svc_hdr h;
    uln_svc_hdr_init(&h, ULN_SVC_REFUSED, sizeof h, status);
    send_answer(c, &h, sizeof h);
    d->c.refused++;
    fprintf(stderr, "ulnetd: pid %d uid %u refused: %s\n", (int)c->pid, (unsigned)c->uid, why);
}

/* Is fd an inbox we can keep mapped: sealed, of the size said, with a
 * header that is this process's? 0, or -errno and why. */
static int inbox_check(struct client *c, const struct uln_svc_attach *a, int fd, const char **why)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != a->inbox_bytes ||
        st.st_size < 4096) {
        *why = "the inbox descriptor is not a memory object of the size said";
        return -EINVAL;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why = "the inbox may shrink (not sealed)";
        return -EPERM;
    }
    struct uln_inbox_hdr h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
        !uln_inbox_layout_ok(&h, (size_t)st.st_size)) {
        *why = "the inbox's header is not a valid inbox of this version";
        return -EINVAL;
    }
    if (h.pid != c->pid || h.job_key != a->job_key || h.rank != a->rank || h.size != a->size ||
        a->rank >= a->size) {
        *why = "the inbox is not this process's (pid, job key, rank or size)";
        return -EPERM;
    }
    c->hdr = h; /* what we compute addresses from from now on */
    return 0;
}

static void attach(struct ulnetd *d, struct client *c, const struct uln_svc_attach *a, int fd)
{
    const char *why = "";
    if (c->attached) {
        refuse(d, c, -EALREADY, "attached already");
        return;
    }
    int rc = inbox_check(c, a, fd, &why);
    if (rc) {
        refuse(d, c, rc, why);
        return;
    }
    /* A context with no job is known to other hosts by its key and our id
     * for it (byaddr.c): one attachment per key, so no process takes
     * another's by attaching with its key. */
    bool no_job = (a->flags & ULN_SVC_ATTACH_NO_JOB) != 0;
    if (no_job && (a->rank != 0 || find_target(d, a->job_key, 0))) {
        refuse(d, c, -EADDRINUSE, "a context with no job of that key is attached already");
        return;
    }
    void *m = mmap(NULL, a->inbox_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        refuse(d, c, -errno, "cannot map its inbox");
        return;
    }
    c->inbox = m;
    c->inbox_len = a->inbox_bytes;
    c->job_key = a->job_key;
    c->rank = a->rank;
    c->size = a->size;
    c->no_job = no_job;
    arbiter_cgroup_of(c->pid, c->cgroup, sizeof c->cgroup);
    c->weight = arbiter_weight(d, c->uid, c->cgroup, a->weight);
    c->attached = true;
    c->was_attached = true;
    d->c.attached++;
    unsigned nsock = socks_give(d, c, c->hdr.max_eps, !(a->flags & ULN_SVC_ATTACH_NO_SOCK));
    struct uln_svc_attach_ok ok = {
        .host_id = d->host_id,
        .client = c->id,
        .wire_ip = d->wire_ip,
        .wire_port = d->wire_port,
        .secure = (uint16_t)d->secure, /* a process sealed more refuses the wire */
        .sock_port = c->sock_port,
        .sock_count = (uint16_t)nsock};
    snprintf(ok.link, sizeof ok.link, "%s", d->link_desc);
    uln_svc_hdr_init(&ok.h, ULN_SVC_ATTACH_OK, sizeof ok, 0);
    /* The process gets its own descriptors of the sockets (the kernel's
     * copies); ours stay, and close when the process goes (client_drop). */
    send_answer_fds(c, &ok, sizeof ok, c->sock_fds, nsock);
    fprintf(stderr,
            "ulnetd: attached pid %d uid %u job %016llx rank %u/%u weight %u (client %u), "
            "sockets %u from port %u\n",
            (int)c->pid, (unsigned)c->uid, (unsigned long long)c->job_key, c->rank, c->size,
            c->weight, c->id, c->n_sock_fds, c->sock_port);
}

static void status(struct ulnetd *d, struct client *c)
{
    static char buf[ULN_SVC_MSG_MAX];
    size_t n = sizeof(struct uln_svc_hdr);
    n += status_text(d, buf + n, sizeof buf - n);
    struct uln_svc_hdr h;
    uln_svc_hdr_init(&h, ULN_SVC_STATUS_TEXT, (uint32_t)n, 0);
    memcpy(buf, &h, sizeof h);
    send_answer(c, buf, n);
}

/* Where q.rank of c's own job sends from: a rank on another host as its
 * service said, or one attached here. Only for c's job: a process learns
 * nothing of another job's. */
static void peer_sock(struct ulnetd *d, struct client *c, struct uln_svc_peer_sock *q)
{
    const struct client *t = NULL;
    int rc = -ENOENT;
    if (!c->attached || c->no_job || q->rank >= c->size || q->rank == c->rank)
        rc = -EINVAL;
    else if ((t = find_target(d, c->job_key, q->rank)) != NULL) {
        if (t->n_sock_fds) {
            q->ip = d->wire_ip;
            q->port = t->sock_port;
            q->count = (uint16_t)t->n_sock_fds;
            rc = 0;
        }
    } else
        rc = socks_find(d, c->job_key, q->rank, &q->ip, &q->port, &q->count);
    if (rc == -EINVAL) {
        refuse(d, c, rc, "a socket asked of no peer of its job");
        return;
    }
    uln_svc_hdr_init(&q->h, ULN_SVC_PEER_SOCK_OK, sizeof *q, rc);
    if (rc) q->ip = q->port = q->count = 0;
    send_answer(c, q, sizeof *q);
}

/* One message from c: checked, then served; a malformed one ends c. */
void client_input(struct ulnetd *d, struct client *c)
{
    _Alignas(8) uint8_t buf[256];
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(MAX_FDS * sizeof(int))];
    } u;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    ssize_t n = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
        client_gone(c, n == 0 ? "hang-up" : "receive error");
        return;
    }
    int fds[MAX_FDS], nfds = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
        int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
            if (nfds < MAX_FDS)
                fds[nfds++] = fd;
            else
                close(fd);
        }
    }
    bool trunc = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    int type = uln_svc_parse(buf, (size_t)n, trunc, nfds);
    if (type == ULN_SVC_ATTACH) {
        struct uln_svc_attach a;
        memcpy(&a, buf, sizeof a);
        attach(d, c, &a, fds[0]);
    } else if (type == ULN_SVC_STATUS)
        status(d, c);
    else if (type == ULN_SVC_QUEUE) {
        struct uln_svc_queue q;
        memcpy(&q, buf, sizeof q);
        const char *why;
        int rc = queue_add(d, c, &q, fds[0], fds[1], &why);
        if (rc)
            refuse(d, c, rc, why);
        else {
            struct uln_svc_hdr ok;
            uln_svc_hdr_init(&ok, ULN_SVC_QUEUE_OK, sizeof ok, 0);
            send_answer(c, &ok, sizeof ok);
        }
    } else if (type == ULN_SVC_ROUTE) {
        struct uln_svc_route r;
        memcpy(&r, buf, sizeof r);
        /* Routes only for the process's own job, and its ranks; with no
         * job, for the peer ids of its inbox (what it inserted: it reaches
         * nothing else, and is stamped as itself on all of it). */
        int rc =
            !c->attached || r.rank >= c->size || r.rank == c->rank || (r.client != 0) != c->no_job
                ? -EINVAL
            : c->no_job
                ? wire_route_addr(d, c->job_key, r.rank, r.ip, r.port, r.client, r.key, r.ep)
                : wire_route(d, c->job_key, r.rank, r.ip, r.port);
        if (rc)
            refuse(d, c, rc, "no route to that rank's service");
        else {
            if (!c->no_job) wire_sock_tell(d, c, r.rank);
            struct uln_svc_hdr ok;
            uln_svc_hdr_init(&ok, ULN_SVC_ROUTE_OK, sizeof ok, 0);
            send_answer(c, &ok, sizeof ok);
        }
    } else if (type == ULN_SVC_PEER_SOCK) {
        struct uln_svc_peer_sock q;
        memcpy(&q, buf, sizeof q);
        peer_sock(d, c, &q);
    } else if (type == ULN_SVC_MEM || type == ULN_SVC_MEM_DEL) {
        struct uln_svc_mem r;
        memcpy(&r, buf, sizeof r);
        const char *why = "";
        int rc = 0;
        if (type == ULN_SVC_MEM_DEL)
            mem_del(c, &r);
        else if (!d->no_map)
            rc = mem_add(c, &r, fds[0], &why);
        if (rc)
            refuse(d, c, rc, why);
        else {
            struct uln_svc_hdr ok;
            uln_svc_hdr_init(&ok, ULN_SVC_MEM_OK, sizeof ok, 0);
            send_answer(c, &ok, sizeof ok);
        }
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]); /* a mapping needs no descriptor */
    if (type < 0) {
        d->c.malformed++;
        refuse(d, c, -EPROTO, "malformed message");
        client_gone(c, "malformed message");
    }
}

void client_gone(struct client *c, const char *why)
{
    if (!c->gone) c->gone = why;
}

/* The queues an endpoint's new life replaced: unmapped once the event
 * batch that may name them is over, so that a process reopening endpoints
 * holds no more of the service's memory and descriptors than its live
 * queues (which the quota counts). */
static void client_free_retired(struct ulnetd *d, struct client *c)
{
    for (struct queue *q = c->retired, *n; q; q = n) {
        n = q->next_retired;
        queue_free(d, q);
    }
    c->retired = NULL;
}

static void client_free(struct ulnetd *d, struct client *c)
{
    /* What the wire keeps for it (flows, its job's routes) goes too, now
     * that nothing of it is left to drain. */
    if (c->was_attached) wire_rank_ended(d, c->job_key, c->rank, ENDED_HERE);
    for (unsigned i = 0; i < d->n_clients; i++)
        if (d->clients[i] == c) d->clients[i] = NULL;
    for (unsigned e = 0; e < ULN_SVC_MAX_EPS; e++)
        if (c->queues[e]) queue_free(d, c->queues[e]);
    client_free_retired(d, c);
    free(c);
}

/* Its end: unreachable at once (its inbox unmapped, every process of its
 * job told), but what it sent before it ended still goes out - a NAP that
 * completed at its sender is delivered, as over shm where it already sits
 * in the peer's ring - unless force (the service stops). */
static void client_drop(struct ulnetd *d, struct client *c, const char *why, bool force)
{
    if (c->attached) {
        queues_peer_gone(d, c);
        /* Nothing of ours is inside its memory between two messages (the
         * service holds no hazard across a sleep), so it goes at once. */
        munmap(c->inbox, c->inbox_len);
        c->inbox = NULL;
        mem_drop_all(c);   /* its regions: unreachable at once */
        socks_close(d, c); /* its port free: nothing sends as it any more */
        free(c->feeds);
        c->feeds = NULL;
        c->attached = false;
        d->c.detached++;
        fprintf(stderr, "ulnetd: detached pid %d (client %u): %s\n", (int)c->pid, c->id, why);
    }
    if (c->fd >= 0) {
        epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    c->gone = NULL;
    c->draining = !force && !queues_empty(c);
    if (!c->draining) client_free(d, c);
}

void clients_reap(struct ulnetd *d)
{
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        if (c && c->draining && queues_empty(c)) client_free(d, c);
    }
}

void clients_sweep(struct ulnetd *d)
{
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        if (c) client_free_retired(d, c);
        if (c && c->gone) client_drop(d, c, c->gone, false);
    }
}

void clients_drop_all(struct ulnetd *d)
{
    for (unsigned i = 0; i < d->n_clients; i++)
        if (d->clients[i]) client_drop(d, d->clients[i], "service stopping", true);
    free(d->clients);
}
