/*
 * names.c - the provider's name service: how a client that knows only a
 * host and a port (fi_getinfo(node, service, 0), fi_av_insertsvc) gets the
 * ulnet name of the endpoint there.
 *
 * ulnet's names are opaque - they carry the key a peer's packets must show -
 * so a host:port cannot be turned into one by arithmetic. An endpoint made
 * from fi_getinfo(node|NULL, service, FI_SOURCE)'s info instead answers on
 * that TCP port with its name (what fi_getname returns), from a small thread
 * of its own that sleeps in poll(): the data path never waits on it. A client
 * connects, reads one answer (magic, version, length: name.c checks it) and
 * closes; the whole lookup is bounded by FI_ULNET_NAME_TIMEOUT_MS.
 * docs/security.md says what publishing a name grants.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ulnfi.h"

#define ULNFI_NAME_TIMEOUT_MS 2000  /* a connect, and a listening server's answer */
#define ULNFI_NAME_WAIT_MS    30000 /* a server not listening yet: how long to try again */
#define ULNFI_NAME_RETRY_MS   50    /* the first pause between connects refused, */
#define ULNFI_NAME_RETRY_MAX  1000  /* doubled up to this */

struct ulnfi_names {
    int lfd, stop; /* the listening socket; an eventfd that ends the thread */
    pthread_t thread;
    struct ulnfi_names_msg answer;
    struct sockaddr_storage bound; /* where it listens (port 0 asked: the one given) */
    socklen_t bound_len;
};

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- the server ------------------------------------------------------------------------ */

static void *serve(void *arg)
{
    struct ulnfi_names *n = arg;
    struct pollfd p[2] = {{.fd = n->lfd, .events = POLLIN}, {.fd = n->stop, .events = POLLIN}};
    for (;;) {
        p[0].revents = p[1].revents = 0; /* poll leaves them as they were when interrupted */
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        int c = accept4(n->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) continue; /* the client left already, or no descriptor: it times out */
        /* 144 bytes into a new connection's empty send buffer: never blocks,
         * so one client that does not read cannot hold up the next. */
        ssize_t w = send(c, &n->answer, sizeof(n->answer), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w != (ssize_t)sizeof(n->answer))
            FI_INFO(&ulnfi_prov, FI_LOG_EP_CTRL, "name service: answer not sent\n");
        close(c);
    }
    return NULL;
}

static socklen_t svc_sockaddr(const struct ulnfi_svc *s, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (s->family == 6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = s->port;
        memcpy(&a->sin6_addr, s->ip, 16);
        return sizeof(*a);
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = s->port;
    memcpy(&a->sin_addr, s->ip, 4);
    return sizeof(*a);
}

static int listen_on(const struct sockaddr *sa, socklen_t len)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1; /* a server restarted at once reuses its port (TIME_WAIT) */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, sa, len) < 0 || listen(fd, 64) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* Publish name at sa, from a thread of its own. */
static int publish(struct ulnfi_ep *ep, const struct sockaddr *sa, socklen_t len,
                   const struct ulnfi_addr *name)
{
    struct ulnfi_names *n = calloc(1, sizeof(*n));
    if (!n) return -FI_ENOMEM;
    ulnfi_name_answer(name, &n->answer);
    n->lfd = listen_on(sa, len);
    if (n->lfd < 0) {
        int e = n->lfd;
        free(n);
        return e;
    }
    n->bound_len = sizeof(n->bound);
    getsockname(n->lfd, (struct sockaddr *)&n->bound, &n->bound_len);
    n->stop = eventfd(0, EFD_CLOEXEC);
    if (n->stop < 0 || pthread_create(&n->thread, NULL, serve, n)) {
        if (n->stop >= 0) close(n->stop);
        close(n->lfd);
        free(n);
        return -ENOMEM;
    }
    FI_INFO(&ulnfi_prov, FI_LOG_EP_CTRL, "endpoint %d: name published on port %u\n", ep->index,
            ntohs(((struct sockaddr_in *)&n->bound)->sin_port)); /* sin6_port is there too */
    ep->names = n;
    return 0;
}

/* Publish name at src's service. A port that cannot be had is said and
 * skipped, not fatal: fabtests' -E mode has both sides ask for the same
 * default port, and exchanges names itself. */
int ulnfi_names_start(struct ulnfi_ep *ep, const struct ulnfi_addr *src,
                      const struct ulnfi_addr *name)
{
    struct ulnfi_svc s;
    memcpy(&s, src->uaddr, sizeof(s));
    struct sockaddr_storage ss;
    socklen_t len = svc_sockaddr(&s, &ss);
    int rc = publish(ep, (struct sockaddr *)&ss, len, name);
    if (rc == -ENOMEM) return -FI_ENOMEM;
    if (rc)
        FI_WARN(&ulnfi_prov, FI_LOG_EP_CTRL, "name service on port %u: %s; name not published\n",
                ntohs(s.port), strerror(-rc));
    return 0;
}

/* An endpoint named by a socket address (FI_SOCKADDR_IN*) is that address:
 * one it cannot listen on is an error, not a name unpublished. */
int ulnfi_names_start_sa(struct ulnfi_ep *ep, const struct sockaddr *sa, socklen_t len,
                         const struct ulnfi_addr *name)
{
    int rc = publish(ep, sa, len, name);
    if (rc == -ENOMEM) return -FI_ENOMEM;
    if (rc) {
        FI_WARN(&ulnfi_prov, FI_LOG_EP_CTRL, "endpoint's socket address: %s\n", strerror(-rc));
        return -FI_EADDRINUSE;
    }
    return 0;
}

/* Where the endpoint's name service listens, as fi_getname(3) gives an
 * address: the length needed in *len, -FI_ETOOSMALL when more than room. */
int ulnfi_names_bound(const struct ulnfi_ep *ep, void *addr, size_t *len)
{
    const struct ulnfi_names *n = ep->names;
    if (!n) return -FI_EOPBADSTATE;
    size_t room = *len;
    *len = n->bound_len;
    if (room < n->bound_len) return -FI_ETOOSMALL;
    memcpy(addr, &n->bound, n->bound_len);
    return 0;
}

void ulnfi_names_stop(struct ulnfi_ep *ep)
{
    struct ulnfi_names *n = ep->names;
    if (!n) return;
    uint64_t one = 1;
    if (write(n->stop, &one, sizeof(one)) != sizeof(one)) abort(); /* an eventfd cannot refuse 1 */
    pthread_join(n->thread, NULL);
    close(n->lfd);
    close(n->stop);
    free(n);
    ep->names = NULL;
}

/* ---- the source: where an endpoint will publish ------------------------------------------ */

int ulnfi_names_source(const char *node, const char *service, struct ulnfi_addr *src)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM},
                    *ai;
    int rc = getaddrinfo(node, service, &hints, &ai);
    if (rc) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "source %s:%s: %s\n", node ? node : "*", service,
                gai_strerror(rc));
        return -FI_ENODATA;
    }
    struct ulnfi_svc s = {0};
    if (ai->ai_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ai->ai_addr;
        s.family = 6;
        s.port = a->sin6_port;
        memcpy(s.ip, &a->sin6_addr, 16);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;
        s.family = 4;
        s.port = a->sin_port;
        memcpy(s.ip, &a->sin_addr, 4);
    }
    freeaddrinfo(ai);
    memcpy(src->uaddr, &s, sizeof(s));
    src->flags |= ULNFI_AF_SVC;
    return 0;
}

/* ---- the client -------------------------------------------------------------------------- */

/* Wait for events on fd until the deadline: 1 ready, 0 timed out. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 0;
    }
}

/* One connect, completed or failed by the deadline: the socket, or -errno. */
static int dial(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    int e = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        e = errno == EINPROGRESS ? 0 : errno;
        if (!e && !wait_fd(fd, POLLOUT, deadline)) e = ETIMEDOUT;
        socklen_t el = sizeof(e);
        if (!e) getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
    }
    if (e) {
        close(fd);
        return -e;
    }
    return fd;
}

/* Read the whole answer (the server closes after it) into m. */
static int read_answer(int fd, struct ulnfi_names_msg *m, size_t *got, int64_t deadline)
{
    uint8_t buf[sizeof(*m) + 1]; /* one more: an answer too long is refused, not cut */
    *got = 0;
    for (;;) {
        if (!wait_fd(fd, POLLIN, deadline)) return -ETIMEDOUT;
        ssize_t r = recv(fd, buf + *got, sizeof(buf) - *got, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r < 0) return -errno;
        if (r == 0 || (*got += (size_t)r) == sizeof(buf)) break;
    }
    memcpy(m, buf, *got < sizeof(*m) ? *got : sizeof(*m));
    return 0;
}

static int lookup_one(const struct addrinfo *ai, int64_t deadline, struct ulnfi_addr *out)
{
    int fd = dial(ai, deadline);
    if (fd < 0) return fd;
    struct ulnfi_names_msg m;
    size_t got;
    int rc = read_answer(fd, &m, &got, deadline);
    close(fd);
    return rc ? rc : ulnfi_name_parse(&m, got, out);
}

/* Each address of the node in turn; while every one refuses (nothing
 * listens yet: a server may be starting, as a job launcher starts clients
 * beside it), again after a pause that doubles, until wait_ms have passed
 * (a connect refusing, like a TCP connect's retries). Each try - a connect
 * and the answer - is bounded by timeout_ms. */
static int lookup_all(const struct addrinfo *ai, int64_t timeout_ms, int64_t wait_ms,
                      const _Atomic bool *stop, struct ulnfi_addr *out)
{
    int64_t until = now_ms() + wait_ms, pause = ULNFI_NAME_RETRY_MS;
    for (;;) {
        bool refused = true;
        int rc = -EHOSTUNREACH;
        for (const struct addrinfo *a = ai; a; a = a->ai_next) {
            rc = lookup_one(a, now_ms() + timeout_ms, out);
            if (!rc) return 0;
            if (rc != -ECONNREFUSED) refused = false;
        }
        int64_t left = until - now_ms();
        if (!refused || left <= 0 || (stop && *stop)) return rc;
        usleep((useconds_t)(pause < left ? pause : left) * 1000);
        pause = pause * 2 < ULNFI_NAME_RETRY_MAX ? pause * 2 : ULNFI_NAME_RETRY_MAX;
    }
}

static const char *why(int rc)
{
    switch (rc) {
    case -EPROTO:
        return "the answer is not a ulnet name";
    case -EADDRNOTAVAIL:
        return "the name in the answer is malformed";
    case -ETIMEDOUT:
        return "timed out";
    case -ECONNREFUSED:
        return "nothing listening";
    default:
        return strerror(-rc);
    }
}

/* The bounds of a lookup: each try's, and how long to try again. */
static void bounds(int64_t *timeout_ms, int64_t *wait_ms)
{
    size_t ms = ULNFI_NAME_TIMEOUT_MS;
    if (fi_param_get_size_t(&ulnfi_prov, "name_timeout_ms", &ms) != FI_SUCCESS || !ms)
        ms = ULNFI_NAME_TIMEOUT_MS;
    size_t wait = ULNFI_NAME_WAIT_MS;
    if (fi_param_get_size_t(&ulnfi_prov, "name_wait_ms", &wait) != FI_SUCCESS)
        wait = ULNFI_NAME_WAIT_MS;
    *timeout_ms = (int64_t)ms;
    *wait_ms = (int64_t)wait;
}

int ulnfi_names_lookup(const char *node, const char *service, struct ulnfi_addr *out)
{
    if (!service) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "node %s without a service: no name to ask for\n",
                node ? node : "(null)");
        return -FI_ENODATA;
    }
    struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai;
    int g = getaddrinfo(node, service, &hints, &ai);
    if (g) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "name of %s:%s: %s\n", node ? node : "localhost", service,
                gai_strerror(g));
        return -FI_ENODATA;
    }
    int64_t ms, wait;
    bounds(&ms, &wait);
    int rc = lookup_all(ai, ms, wait, NULL, out);
    freeaddrinfo(ai);
    if (rc) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "name of %s:%s: %s\n", node ? node : "localhost", service,
                why(rc));
        return -FI_ENODATA;
    }
    return 0;
}

int ulnfi_names_lookup_sa(const struct sockaddr *sa, socklen_t len, bool once,
                          const _Atomic bool *stop, struct ulnfi_addr *out)
{
    struct addrinfo ai = {.ai_family = sa->sa_family,
                          .ai_socktype = SOCK_STREAM,
                          .ai_addrlen = len,
                          .ai_addr = (struct sockaddr *)sa};
    int64_t ms, wait;
    bounds(&ms, &wait);
    int rc = lookup_all(&ai, ms, once ? 0 : wait, stop, out);
    if (rc) {
        char s[ULNFI_SA_STRLEN];
        ulnfi_sa_str(sa, s, sizeof(s));
        FI_INFO(&ulnfi_prov, FI_LOG_AV, "name of %s: %s\n", s, why(rc));
        return -FI_EADDRNOTAVAIL;
    }
    return 0;
}
