/*
 * attach.c - finding the host's service and attaching to it (svc.h).
 *
 * The service listens on a unix socket, abstract by default, so every
 * network namespace (every "host" of the tests) has its own. We send our job
 * key, rank and size, and our inbox memfd (SCM_RIGHTS); the service learns
 * who we are from the socket itself (SO_PEERCRED), maps the inbox, checks
 * that it is ours, and answers. The socket then stays open for our life: its
 * hang-up is how the service learns we are gone, however we die.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/internal.h"
#include "boot/addr.h"
#include "seal/seal.h"
#include "transport/svc/svc.h"

#define ATTACH_TIMEOUT_MS 5000 /* a service that accepted but does not answer */

/* One message with descriptors (SCM_RIGHTS). */
static int send_fds(int fd, const void *msg, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)msg, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        m.msg_control = u.buf;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/* Descriptors passed with an answer (the sockets of its own, attach). */
struct passed {
    int fds[ULN_SVC_SOCKS_MAX];
    unsigned n;
};

static void passed_close(struct passed *p)
{
    for (unsigned i = 0; i < p->n; i++)
        close(p->fds[i]);
    p->n = 0;
}

/* The descriptors of m's SCM_RIGHTS into p (every one, so none leaks). */
static void passed_take(struct msghdr *m, struct passed *p)
{
    p->n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (p->n < ULN_SVC_SOCKS_MAX)
                p->fds[p->n++] = fd;
            else
                close(fd);
        }
    }
}

/* The service's answer: 0 and its bytes in out (want of them), or the
 * refusal, or -ETIMEDOUT / -ECONNRESET / -EPROTO. Descriptors passed with
 * it go to *fds, or are closed when fds is NULL (and on any failure). */
static int recv_answer(int fd, unsigned type, void *out, size_t want, struct passed *fds)
{
    struct passed none;
    if (!fds) fds = &none;
    fds->n = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, ATTACH_TIMEOUT_MS);
    if (n == 0) return -ETIMEDOUT;
    if (n < 0) return -errno;
    _Alignas(8) uint8_t buf[256];
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(ULN_SVC_SOCKS_MAX * sizeof(int))];
    } u;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (r < 0) return -errno;
    if (r == 0) return -ECONNRESET;
    passed_take(&m, fds);
    struct uln_svc_hdr h;
    int rc = 0;
    if ((size_t)r < sizeof h || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) rc = -EPROTO;
    if (!rc) {
        memcpy(&h, buf, sizeof h);
        if (h.magic != ULN_SVC_MAGIC || h.version != ULN_SVC_VERSION)
            rc = -EPROTO;
        else if (h.type == ULN_SVC_REFUSED)
            rc = h.status < 0 ? h.status : -EPROTO;
        else if (h.type != type || (size_t)r != want)
            rc = -EPROTO;
    }
    if (rc || fds == &none) passed_close(fds);
    if (rc) return rc;
    memcpy(out, buf, want);
    return 0;
}

/* The sockets of its own the attach answer passed: as many as it says,
 * each UDP and bound to the service's address, endpoint i's on port + i.
 * 0 (kept in s), or -EPROTO (all closed). */
static int take_socks(struct uln_svc *s, const struct uln_svc_attach_ok *ok, struct passed *p)
{
    int rc = p->n == ok->sock_count && (!p->n || ok->sock_port) ? 0 : -EPROTO;
    for (unsigned i = 0; !rc && i < p->n; i++)
        rc = uln_svc_sock_check(p->fds[i], ok->wire_ip, (uint16_t)(ok->sock_port + i));
    if (rc) {
        passed_close(p);
        return rc;
    }
    memcpy(s->sock_fds, p->fds, p->n * sizeof(int));
    s->n_socks = p->n;
    s->sock_port = p->n ? ok->sock_port : 0;
    return 0;
}

static int send_attach(int fd, const struct uln_ctx *ctx)
{
    struct uln_svc_attach a = {
        .job_key = ctx->job_key,
        .rank = (uint32_t)ctx->rank,
        .size = (uint32_t)ctx->size,
        .max_eps = ctx->p.max_eps,
        .weight = uln_svc_params(&ctx->p)->weight,
        .inbox_bytes = ctx->inbox->len,
        .flags = (ctx->no_job ? ULN_SVC_ATTACH_NO_JOB : 0) |
                 (uln_svc_params(&ctx->p)->own_sock ? 0 : ULN_SVC_ATTACH_NO_SOCK)};
    uln_svc_hdr_init(&a.h, ULN_SVC_ATTACH, sizeof a, 0);
    return send_fds(fd, &a, sizeof a, &ctx->inbox->fd, 1);
}

int uln_svc_request(struct uln_ctx *ctx, const void *msg, size_t len, const int *fds, int nfds,
                    unsigned answer_type, void *answer, size_t answer_len)
{
    struct uln_svc *s = ctx->svc;
    if (!s) return -ENOTCONN;
    pthread_mutex_lock(&s->lock);
    int rc = send_fds(s->fd, msg, len, fds, nfds);
    if (!rc) rc = recv_answer(s->fd, answer_type, answer, answer_len, NULL);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Connect and attach: 0, -ENOTCONN (nobody listens there), or why the
 * attach failed. */
static int try_attach(struct uln_ctx *ctx, const char *path, struct uln_svc *s)
{
    struct sockaddr_un sa;
    int salen = uln_svc_sockaddr(path, &sa);
    if (salen < 0) return salen;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, (struct sockaddr *)&sa, (socklen_t)salen) != 0) {
        int e = errno;
        close(fd);
        return e == ECONNREFUSED || e == ENOENT ? -ENOTCONN : -e;
    }
    struct uln_svc_attach_ok ok;
    struct passed socks;
    int rc = send_attach(fd, ctx);
    if (!rc) rc = recv_answer(fd, ULN_SVC_ATTACH_OK, &ok, sizeof ok, &socks);
    if (!rc) rc = take_socks(s, &ok, &socks);
    if (rc) {
        close(fd);
        return rc;
    }
    s->fd = fd;
    s->host_id = ok.host_id;
    s->client = ok.client;
    s->wire_ip = ok.wire_ip;
    s->wire_port = ok.wire_port;
    /* A mode we do not know is no promise we can hold it to: off. */
    s->secure = ok.secure <= ULN_SEAL_ENCRYPT ? ok.secure : ULN_SEAL_OFF;
    ok.link[sizeof ok.link - 1] = 0;
    snprintf(s->link, sizeof s->link, "%s", ok.link);
    return 0;
}

int uln_svc_attach(struct uln_ctx *ctx)
{
    const struct uln_svc_params *sp = uln_svc_params(&ctx->p);
    const char *path = sp->path ? sp->path : ULN_SVC_DEFAULT_PATH;
    if (sp->mode == ULN_SVC_OFF) {
        snprintf(ctx->svc_why, sizeof ctx->svc_why, "off (ULN_SERVICE=off): direct mode");
        return 0;
    }
    struct uln_svc *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    snprintf(s->path, sizeof s->path, "%s", path);
    int rc = try_attach(ctx, path, s);
    if (rc) {
        free(s);
        snprintf(ctx->svc_why, sizeof ctx->svc_why, "none (%s at %s): direct mode",
                 rc == -ENOTCONN ? "no ulnetd listening" : strerror(-rc), path);
        if (sp->mode != ULN_SVC_REQUIRED) return 0;
        fprintf(stderr, "ulnet: ULN_SERVICE=required: %s at %s\n",
                rc == -ENOTCONN ? "no ulnetd listening" : strerror(-rc), path);
        return rc;
    }
    char sock[48] = "";
    if (s->n_socks)
        snprintf(sock, sizeof sock, ", %u sockets of its own from port %u", s->n_socks,
                 s->sock_port);
    snprintf(ctx->svc_why, sizeof ctx->svc_why, "attached to ulnetd at %s (client %u), link %s%s",
             path, s->client, s->link, sock);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->socks_lock, NULL);
    ctx->svc = s;
    return 0;
}

bool uln_svc_lost(struct uln_ctx *ctx)
{
    struct uln_svc *s = ctx->svc;
    if (!s) return false;
    if (atomic_load_explicit(&s->lost, memory_order_relaxed)) return true;
    /* The service sends nothing unasked: anything readable outside a
     * request is its hang-up (or garbage: the same to us). */
    struct pollfd p = {.fd = s->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) != 1 || pthread_mutex_trylock(&s->lock) != 0) return false;
    char b;
    ssize_t r = recv(s->fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    bool gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    pthread_mutex_unlock(&s->lock);
    if (gone && !atomic_exchange(&s->lost, true))
        fprintf(stderr,
                "ulnet: rank %d: the host's ulnetd (%s) is gone: peers reached through it "
                "are lost (-ECONNRESET)\n",
                ctx->rank, s->path);
    return gone;
}

void uln_svc_detach(struct uln_ctx *ctx)
{
    if (!ctx->svc) return;
    close(ctx->svc->fd); /* the hang-up is the detach */
    for (unsigned i = 0; i < ctx->svc->n_socks; i++)
        close(ctx->svc->sock_fds[i]);
    free(ctx->svc->peer_socks);
    pthread_mutex_destroy(&ctx->svc->lock);
    pthread_mutex_destroy(&ctx->svc->socks_lock);
    free(ctx->svc);
    ctx->svc = NULL;
}
