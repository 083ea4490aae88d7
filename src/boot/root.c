/*
 * root.c - join a job across hosts through rank 0 (ULN_ROOT=ip:port).
 *
 * The board of boot.c only reaches processes on one host that inherit it from
 * ulnrun. With ULN_ROOT any launcher, or a shell script, starts the ranks with
 * environment variables alone: rank 0 listens on ip:port, every other rank
 * connects to it over TCP, and rank 0 is the hub of a star:
 *
 *   uln_boot_init      joiner -> 0  HELLO   {magic, version, rank, size, job key or 0}
 *                      0 -> joiner  REPLY   {verdict, job key}: a refusal at once,
 *                                           the key once every rank has joined
 *   uln_boot_publish   joiner -> 0  SLOT    {pid, address}
 *   uln_boot_wait_all  0 -> joiner  TABLE   {pid, address} for every rank
 *   uln_barrier        joiner -> 0  BARRIER;  0 -> joiner  RELEASE
 *
 * The table lands in a private board with board.h's layout, so uln_boot_peer
 * and the transports need not know which bootstrap ran. The connections stay
 * open for barriers until uln_boot_fini; a peer that goes away shows up as
 * -ECONNRESET.
 *
 * The port is open to anything on the network, so: every wait has a deadline,
 * every length is checked before anything is stored, and a connection that
 * does not speak the protocol is closed without a word (it counts for
 * nothing). Integers travel big-endian: the hosts need not agree on byte order.
 */
#define _GNU_SOURCE
#include "boot/root.h"
#include "boot/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/board.h"

#define ROOT_MAGIC     0x756c6e726f6f7421ull /* "ulnroot!" */
#define ROOT_VERSION   1u
#define HELLO_BYTES    32u /* magic 8, version 4, rank 4, size 4, pad 4, key 8 */
#define REPLY_BYTES    96u /* magic 8, version 4, verdict 4, size 4, missing 4, key 8, 16 x 4 */
#define REPLY_NAMES    16u /* missing ranks a timeout reply names */
#define HDR_BYTES      8u  /* type 4, body length 4 */
#define SLOT_WIRE      ULN_BOARD_SLOT_WIRE /* pid + address: a board slot after `ready` */
#define MAX_PENDING    64u  /* accepted connections that have not yet said who they are */
#define CONNECT_TRY_MS 3000 /* one connect attempt: a lost SYN is retried, not waited out */

enum { MSG_SLOT = 1, MSG_TABLE, MSG_BARRIER, MSG_RELEASE };

/* Rank 0's verdict on a HELLO. */
enum { V_OK = 0, V_VERSION, V_SIZE, V_RANK, V_DUP, V_KEY, V_TIMEOUT };

struct conn {
    int fd;       /* -1: none */
    uint64_t key; /* rank 0: the job key this rank was started with, 0: none */
    uint8_t hdr[HDR_BYTES];
    uint32_t got;      /* bytes of the message being received: header, then body */
    bool slot_in;      /* rank 0: this rank's SLOT has arrived */
    uint64_t barriers; /* rank 0: BARRIER messages received from this rank */
};

struct uln_root {
    int timeout_s;
    int64_t deadline; /* CLOCK_MONOTONIC ms: the bootstrap is over by then */
    char where[96];   /* ULN_ROOT as given, for messages */
    struct sockaddr_storage root;
    socklen_t root_len;
    struct sockaddr_storage route;
    socklen_t route_len;
    int listen_fd;
    struct conn *c; /* rank 0: one per rank (c[0] unused); others: c[0] is the link to 0 */
    bool published, have_table;
    uint64_t bar_done; /* barriers completed */
    uint64_t bar_sent; /* joiner: BARRIER messages sent */
};

/* ---- small helpers --------------------------------------------------------- */

static int ms_left(int64_t deadline)
{
    int64_t d = deadline - uln_boot_now_ms();
    return d < 0 ? 0 : d > INT_MAX ? INT_MAX : (int)d;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* "3, 5-7, 9": the ranks r with miss[r] set, cut short with "..." if long. */
static void ranks_str(const uint8_t *miss, int size, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r < size; r++) {
        if (!miss[r]) continue;
        int e = r;
        while (e + 1 < size && miss[e + 1])
            e++;
        char one[32];
        int k = e == r ? snprintf(one, sizeof one, "%s%d", at ? ", " : "", r)
                       : snprintf(one, sizeof one, "%s%d-%d", at ? ", " : "", r, e);
        if (at + (size_t)k + 5 > n) {
            snprintf(buf + at, n - at, ", ...");
            return;
        }
        memcpy(buf + at, one, (size_t)k + 1);
        at += (size_t)k;
        r = e;
    }
}

/* ---- byte streams with deadlines ------------------------------------------- */

/* Wait until fd is ready for `ev` or the deadline passes. */
static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, ms_left(deadline));
        if (n > 0) return 0; /* also on an error or hangup: the next recv/send says which */
        if (n == 0) return -ETIMEDOUT;
        if (errno != EINTR) return -errno;
    }
}

/* Take what has arrived, up to len (> 0) bytes, without blocking: the count,
 * 0 if nothing is there yet, -ECONNRESET if the peer closed or the link broke. */
static ssize_t recv_some(int fd, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n > 0) return n;
        if (n == 0) return -ECONNRESET;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -ECONNRESET;
    }
}

static int read_full(int fd, void *buf, size_t len, int64_t deadline)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = recv_some(fd, p, len);
        if (n < 0) return (int)n;
        if (n == 0) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc) return rc;
        }
        p += n, len -= (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len, int64_t deadline)
{
    const uint8_t *p = buf;
    while (len) {
        /* MSG_NOSIGNAL: a peer that died must be an error code, not SIGPIPE. */
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n, len -= (size_t)n;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc) return rc;
        } else if (errno != EINTR) {
            return -ECONNRESET;
        }
    }
    return 0;
}

static int send_msg(int fd, uint32_t type, const void *body, uint32_t len, int64_t deadline)
{
    uint8_t m[HDR_BYTES + SLOT_WIRE];
    put32(m, type);
    put32(m + 4, len);
    if (len) memcpy(m + HDR_BYTES, body, len); /* one segment: TCP_NODELAY is on */
    return write_full(fd, m, HDR_BYTES + len, deadline);
}

/* Read what has arrived on c, without blocking, until one whole message is in.
 * Returns its type, 0 while it is incomplete, or -errno (closed, or not the
 * protocol). A SLOT's body goes to `slot` (SLOT_WIRE bytes), accepted only
 * where the caller gives one; BARRIER and RELEASE have no body. The partial
 * state stays in c, so a wait that timed out can be taken up again. */
static int pump(struct conn *c, uint8_t *slot)
{
    for (;;) {
        if (c->got < HDR_BYTES) {
            ssize_t n = recv_some(c->fd, c->hdr + c->got, HDR_BYTES - c->got);
            if (n <= 0) return (int)n;
            c->got += (uint32_t)n;
            if (c->got < HDR_BYTES) continue;
            uint32_t type = get32(c->hdr), len = get32(c->hdr + 4);
            bool ok = type == MSG_SLOT ? slot && len == SLOT_WIRE
                                       : (type == MSG_BARRIER || type == MSG_RELEASE) && len == 0;
            if (!ok) return -EPROTO;
        }
        uint32_t end = HDR_BYTES + get32(c->hdr + 4);
        if (c->got < end) {
            ssize_t n = recv_some(c->fd, slot + (c->got - HDR_BYTES), end - c->got);
            if (n <= 0) return (int)n;
            c->got += (uint32_t)n;
            continue;
        }
        c->got = 0;
        return (int)get32(c->hdr);
    }
}

/* ---- rank 0: accept the others ------------------------------------------- */

struct pending {
    int fd;
    uint64_t seq; /* accept order: the oldest goes first when the table is full */
    uint32_t got;
    uint8_t hello[HELLO_BYTES];
    struct sockaddr_storage from;
    socklen_t from_len;
};

static uint64_t job_key_so_far(struct uln_boot *boot, uint64_t own)
{
    for (int r = 1; !own && r < boot->size; r++)
        if (boot->root->c[r].fd >= 0) own = boot->root->c[r].key;
    return own;
}

static void make_reply(uint8_t *m, uint32_t verdict, int size, uint64_t key, const uint8_t *miss)
{
    memset(m, 0, REPLY_BYTES);
    put64(m, ROOT_MAGIC);
    put32(m + 8, ROOT_VERSION);
    put32(m + 12, verdict);
    put32(m + 16, (uint32_t)size);
    put64(m + 24, key);
    uint32_t n = 0;
    for (int r = 0; miss && r < size; r++)
        if (miss[r]) {
            if (n < REPLY_NAMES) put32(m + 32 + 4 * n, (uint32_t)r);
            n++;
        }
    put32(m + 20, n);
}

static const char *verdict_str(uint32_t v)
{
    switch (v) {
    case V_VERSION:
        return "another bootstrap protocol version";
    case V_SIZE:
        return "another ULN_SIZE";
    case V_RANK:
        return "rank out of range";
    case V_DUP:
        return "that rank has already joined";
    case V_KEY:
        return "another ULN_JOB_KEY";
    default:
        return "timed out";
    }
}

/* A whole HELLO arrived on p. Returns 1 if it joined, 0 if it was refused or
 * dropped (p->fd is closed then). */
static int judge(struct uln_boot *boot, struct pending *p, uint64_t own_key)
{
    struct uln_root *R = boot->root;
    const uint8_t *h = p->hello;
    if (get64(h) != ROOT_MAGIC) {
        close_fd(&p->fd); /* not one of ours: no answer, no message */
        return 0;
    }
    uint32_t version = get32(h + 8), rank = get32(h + 12), size = get32(h + 16);
    uint64_t key = get64(h + 24), job = job_key_so_far(boot, own_key);
    uint32_t v = version != ROOT_VERSION        ? V_VERSION
                 : size != (uint32_t)boot->size ? V_SIZE
                 : rank == 0 || rank >= size    ? V_RANK
                 : R->c[rank].fd >= 0           ? V_DUP
                 : key && job && key != job     ? V_KEY
                                                : V_OK;
    if (v == V_OK) {
        R->c[rank].fd = p->fd;
        R->c[rank].key = key;
        p->fd = -1;
        return 1;
    }
    char from[96];
    fprintf(stderr, "ulnet: rank 0: refused %s as rank %u of %u: %s\n",
            uln_sockaddr_str(&p->from, p->from_len, from, sizeof from), rank, size, verdict_str(v));
    /* The socket is fresh and the reply small: it fits in the send buffer, so a
     * single try is enough; a peer that does not read it loses nothing of ours. */
    uint8_t m[REPLY_BYTES];
    make_reply(m, v, boot->size, 0, NULL);
    (void)send(p->fd, m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    close_fd(&p->fd);
    return 0;
}

static int host_listen(struct uln_boot *boot)
{
    struct uln_root *R = boot->root;
    int fd = socket(R->root.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    R->listen_fd = fd;
    /* A job restarted on the same port must not wait for the last one's
     * connections to leave TIME_WAIT. Two live listeners still conflict, which
     * is how a second rank 0 finds out. */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&R->root, R->root_len) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        fprintf(stderr, "ulnet: rank 0: cannot listen on ULN_ROOT=%s: %s%s\n", R->where,
                strerror(e), e == EADDRINUSE ? " (another rank 0, or the port is taken)" : "");
        return -e;
    }
    return 0;
}

/* Rank 0 while the ranks join: the connections that have not said who they
 * are yet wait in a small table, so one that says nothing holds up nobody. */
struct joining {
    struct pending pend[MAX_PENDING];
    struct pollfd *pf;
    int *who; /* per pf: 0 the listener, 1 + k pending k, -r joined rank r */
    int joined;
    uint64_t seq;
};

/* Everything to wait on: the listener, the pending, the joined. */
static int join_pollset(struct uln_root *R, struct joining *J, int size)
{
    int n = 0;
    J->pf[n] = (struct pollfd){.fd = R->listen_fd, .events = POLLIN};
    J->who[n++] = 0;
    for (unsigned k = 0; k < MAX_PENDING; k++)
        if (J->pend[k].fd >= 0) {
            J->pf[n] = (struct pollfd){.fd = J->pend[k].fd, .events = POLLIN};
            J->who[n++] = 1 + (int)k;
        }
    for (int r = 1; r < size; r++)
        if (R->c[r].fd >= 0) {
            J->pf[n] = (struct pollfd){.fd = R->c[r].fd, .events = POLLIN};
            J->who[n++] = -r;
        }
    return n;
}

/* A joiner sends nothing until it has the key: readable means it closed (or
 * misbehaves). Forget it, so it can come back. */
static void joined_readable(struct uln_root *R, struct joining *J, int r)
{
    struct conn *c = &R->c[r];
    uint8_t b;
    if (recv_some(c->fd, &b, 1) == 0) return;
    fprintf(stderr, "ulnet: rank 0: rank %d left before the job formed\n", r);
    close_fd(&c->fd);
    J->joined--;
}

/* More of a pending connection's HELLO; judged once it is whole. */
static void pending_readable(struct uln_boot *boot, struct joining *J, struct pending *p,
                             uint64_t own_key)
{
    ssize_t got = recv_some(p->fd, p->hello + p->got, HELLO_BYTES - p->got);
    if (got < 0) close_fd(&p->fd);
    if (got <= 0) return;
    p->got += (uint32_t)got;
    if (p->got == HELLO_BYTES) J->joined += judge(boot, p, own_key);
}

/* Take every connection waiting on the listener into the pending table; when
 * it is full, the oldest silent one goes. */
static void accept_new(struct uln_root *R, struct joining *J)
{
    for (;;) {
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        int fd = accept4(R->listen_fd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return; /* drained, or a connection that died in the backlog */
        unsigned slot = 0;
        for (unsigned j = 0; j < MAX_PENDING; j++) {
            if (J->pend[j].fd < 0) {
                slot = j;
                break;
            }
            if (J->pend[j].seq < J->pend[slot].seq) slot = j;
        }
        close_fd(&J->pend[slot].fd);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        J->pend[slot] = (struct pending){.fd = fd, .seq = J->seq++, .from_len = fl};
        memcpy(&J->pend[slot].from, &from, sizeof from);
    }
}

/* Wait until every other rank has said hello, or `until`. */
static int join_loop(struct uln_boot *boot, struct joining *J, uint64_t own_key, int64_t until)
{
    struct uln_root *R = boot->root;
    while (J->joined < boot->size - 1) {
        int n = join_pollset(R, J, boot->size);
        int k = poll(J->pf, (nfds_t)n, ms_left(until));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        if (k == 0) return -ETIMEDOUT;
        for (int i = 0; i < n; i++) {
            if (!J->pf[i].revents) continue;
            if (J->who[i] < 0)
                joined_readable(R, J, -J->who[i]);
            else if (J->who[i] > 0)
                pending_readable(boot, J, &J->pend[J->who[i] - 1], own_key);
            else
                accept_new(R, J);
        }
    }
    return 0;
}

/* Say which ranks are missing, here and to the ones that came, so they fail
 * now and say the same. */
static int join_timed_out(struct uln_boot *boot, int joined)
{
    struct uln_root *R = boot->root;
    int size = boot->size;
    uint8_t *miss = calloc((size_t)size, 1), m[REPLY_BYTES];
    if (!miss) return -ENOMEM;
    char list[200];
    for (int r = 1; r < size; r++)
        miss[r] = R->c[r].fd < 0;
    ranks_str(miss, size, list, sizeof list);
    fprintf(stderr,
            "ulnet: rank 0: bootstrap timed out after %d s on %s: rank%s %s missing (%d of %d "
            "joined)\n",
            R->timeout_s, R->where, size - 1 - joined > 1 ? "s" : "", list, joined + 1, size);
    make_reply(m, V_TIMEOUT, size, 0, miss);
    for (int r = 1; r < size; r++)
        if (R->c[r].fd >= 0) (void)send(R->c[r].fd, m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(miss);
    return -ETIMEDOUT;
}

/* Everybody is in: the job key to all. */
static int hand_out_key(struct uln_boot *boot, uint64_t own_key)
{
    struct uln_root *R = boot->root;
    uint64_t key = job_key_so_far(boot, own_key);
    if (key == 0 && getentropy(&key, sizeof key) != 0) return -errno;
    if (key == 0) key = 1;
    boot->job_key = key;
    uint8_t m[REPLY_BYTES];
    make_reply(m, V_OK, boot->size, key, NULL);
    for (int r = 1; r < boot->size; r++) {
        int rc = write_full(R->c[r].fd, m, sizeof m, R->deadline);
        if (rc) {
            fprintf(stderr, "ulnet: rank 0: lost rank %d while handing out the job key\n", r);
            return rc;
        }
    }
    if (uln_addr_is_any(&R->root)) {
        /* Listening everywhere says nothing about the way out: the interface a
         * peer's connection came in on does. */
        struct sockaddr_storage me;
        socklen_t ml = sizeof me;
        if (getsockname(R->c[1].fd, (struct sockaddr *)&me, &ml) == 0)
            uln_addr_host(&me, &R->route, &R->route_len);
    }
    return 0;
}

/* Rank 0's part of uln_boot_init: take connections until every other rank has
 * said hello, then give them all the job key. */
static int host_accept_all(struct uln_boot *boot, uint64_t own_key)
{
    struct uln_root *R = boot->root;
    int rc = host_listen(boot);
    if (rc) return rc;
    struct joining J = {.pf = calloc(1 + MAX_PENDING + (size_t)boot->size, sizeof *J.pf),
                        .who = calloc(1 + MAX_PENDING + (size_t)boot->size, sizeof *J.who)};
    for (unsigned i = 0; i < MAX_PENDING; i++)
        J.pend[i].fd = -1;
    /* Give up a little before the joiners do (ranks usually start together):
     * then they hear from us which ranks are missing, instead of each timing
     * out on its own and leaving us to count them as missing too. */
    int64_t margin = (int64_t)R->timeout_s * 100,
            until = R->deadline - (margin < 500 ? margin : 500);
    rc = !J.pf || !J.who ? -ENOMEM : join_loop(boot, &J, own_key, until);
    if (rc == -ETIMEDOUT) rc = join_timed_out(boot, J.joined);
    if (!rc) rc = hand_out_key(boot, own_key);
    for (unsigned i = 0; i < MAX_PENDING; i++)
        close_fd(&J.pend[i].fd);
    close_fd(&R->listen_fd); /* everybody is in: a late process gets "refused" */
    free(J.pf);
    free(J.who);
    return rc;
}

/* ---- the other ranks: reach rank 0 ----------------------------------------- */

/* One attempt: a connected socket, or -errno. */
static int connect_once(struct uln_root *R)
{
    int fd = socket(R->root.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&R->root, R->root_len) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
        } else {
            int64_t until = uln_boot_now_ms() + CONNECT_TRY_MS;
            int e = 0;
            socklen_t el = sizeof e;
            rc = wait_fd(fd, POLLOUT, until < R->deadline ? until : R->deadline);
            if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0) e = errno;
            if (!rc && e) rc = -e;
        }
    }
    if (!rc) {
        /* Connecting to a port nobody listens on yet, on this host, can meet
         * itself (TCP simultaneous open when the kernel picks that very port as
         * ours): we would then read our own HELLO. Such a socket has the same
         * address at both ends. */
        struct sockaddr_storage a, b;
        socklen_t al = sizeof a, bl = sizeof b;
        if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
            getpeername(fd, (struct sockaddr *)&b, &bl) == 0 && al == bl && !memcmp(&a, &b, al))
            rc = -ECONNREFUSED;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Say hello to rank 0 and read its reply into m, retrying until it listens
 * (it may start last). 0 or -errno, said on stderr. */
static int hello(struct uln_boot *boot, uint64_t own_key, uint8_t m[REPLY_BYTES])
{
    struct uln_root *R = boot->root;
    struct conn *c = &R->c[0];
    int delay = 10, rc = 0, rank = boot->rank;
    for (;;) {
        int fd = connect_once(R);
        if (fd >= 0) {
            c->fd = fd;
            uint8_t h[HELLO_BYTES] = {0};
            put64(h, ROOT_MAGIC);
            put32(h + 8, ROOT_VERSION);
            put32(h + 12, (uint32_t)rank);
            put32(h + 16, (uint32_t)boot->size);
            put64(h + 24, own_key);
            rc = write_full(fd, h, sizeof h, R->deadline);
            if (!rc) rc = read_full(fd, m, REPLY_BYTES, R->deadline);
            if (!rc) return 0;
            close_fd(&c->fd);
            if (rc == -ETIMEDOUT) {
                fprintf(stderr,
                        "ulnet: rank %d: bootstrap timed out after %d s: rank 0 at %s has not "
                        "heard from all %d ranks\n",
                        rank, R->timeout_s, R->where, boot->size);
                return rc;
            }
            /* Closed before its verdict: rank 0 restarted, or dropped us as the
             * oldest of too many silent connections. Try again. */
        } else {
            rc = fd;
        }
        int left = ms_left(R->deadline);
        if (left == 0) {
            fprintf(stderr,
                    "ulnet: rank %d: bootstrap timed out after %d s: rank 0 missing (ULN_ROOT=%s: "
                    "%s)\n",
                    rank, R->timeout_s, R->where, strerror(-rc));
            return -ETIMEDOUT;
        }
        /* Short at first, since rank 0 is usually just a little late. */
        struct timespec ts = {0, (long)(delay < left ? delay : left) * 1000000};
        nanosleep(&ts, NULL);
        delay = delay * 2 > 500 ? 500 : delay * 2;
    }
}

/* Rank 0 said the job timed out: name the missing ranks it named. */
static int refused_timeout(struct uln_boot *boot, const uint8_t *m)
{
    uint32_t nmiss = get32(m + 20);
    /* Our size, not the reply's: a length from the network sizes nothing. */
    uint8_t *miss = calloc((size_t)boot->size, 1);
    char list[200] = "?";
    for (uint32_t i = 0; miss && i < nmiss && i < REPLY_NAMES; i++)
        if (get32(m + 32 + 4 * i) < (uint32_t)boot->size) miss[get32(m + 32 + 4 * i)] = 1;
    if (miss) ranks_str(miss, boot->size, list, sizeof list);
    free(miss);
    fprintf(stderr,
            "ulnet: rank %d: bootstrap timed out: rank 0 at %s says %u rank%s missing: %s%s\n",
            boot->rank, boot->root->where, nmiss, nmiss == 1 ? "" : "s", list,
            nmiss > REPLY_NAMES ? ", ..." : "");
    return -ETIMEDOUT;
}

/* Rank 0 refused us: say why. */
static int refused(struct uln_boot *boot, const uint8_t *m)
{
    uint32_t v = get32(m + 12), size = get32(m + 16);
    int rank = boot->rank;
    const char *where = boot->root->where;
    if (v == V_TIMEOUT) return refused_timeout(boot, m);
    if (v == V_OK || v > V_TIMEOUT) {
        fprintf(stderr, "ulnet: rank %d: rank 0 at %s answered nonsense\n", rank, where);
        return -EPROTO;
    }
    if (v == V_SIZE)
        fprintf(stderr, "ulnet: rank %d: rank 0 at %s refused us: its ULN_SIZE is %u, ours %d\n",
                rank, where, size, boot->size);
    else if (v == V_VERSION)
        fprintf(stderr,
                "ulnet: rank %d: rank 0 at %s refused us: it speaks bootstrap version %u, we %u\n",
                rank, where, get32(m + 8), ROOT_VERSION);
    else
        fprintf(stderr, "ulnet: rank %d: rank 0 at %s refused us: %s\n", rank, where,
                v == V_DUP   ? "another process already joined with our ULN_RANK"
                : v == V_KEY ? "our ULN_JOB_KEY differs from the job's"
                             : "ULN_RANK out of range");
    return v == V_DUP ? -EADDRINUSE : -EINVAL;
}

/* A joiner's part of uln_boot_init: say hello to rank 0 and take its verdict
 * and the job key. */
static int join(struct uln_boot *boot, uint64_t own_key)
{
    struct uln_root *R = boot->root;
    uint8_t m[REPLY_BYTES];
    int rc = hello(boot, own_key, m);
    if (rc) return rc;
    uint32_t v = get32(m + 12), size = get32(m + 16);
    uint64_t key = get64(m + 24);
    if (get64(m) != ROOT_MAGIC) {
        fprintf(stderr, "ulnet: rank %d: %s does not speak the ulnet bootstrap protocol\n",
                boot->rank, R->where);
        return -EPROTO;
    }
    if (v != V_OK || get32(m + 8) != ROOT_VERSION || size != (uint32_t)boot->size || !key ||
        (own_key && key != own_key))
        return refused(boot, m);
    boot->job_key = key;
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    if (getsockname(R->c[0].fd, (struct sockaddr *)&me, &ml) != 0) return -errno;
    uln_addr_host(&me, &R->route, &R->route_len);
    return 0;
}

/* ---- entry points ------------------------------------------------------------ */

int uln_root_init(struct uln_boot *boot, const char *where, long rank, long size, uint64_t key,
                  int timeout_s)
{
    if (rank < 0 || size <= 0 || rank >= size) {
        fprintf(stderr, "ulnet: ULN_ROOT is set but ULN_RANK/ULN_SIZE are missing or do not fit\n");
        return -EINVAL;
    }
    struct uln_root *R = calloc(1, sizeof *R);
    if (!R) return -ENOMEM;
    boot->root = R;
    R->listen_fd = -1;
    R->timeout_s = timeout_s;
    R->deadline = uln_boot_now_ms() + (int64_t)timeout_s * 1000;
    snprintf(R->where, sizeof R->where, "%s", where);
    if (uln_addr_parse(where, &R->root, &R->root_len) != 0) {
        fprintf(stderr, "ulnet: ULN_ROOT=%s: use ipv4:port or [ipv6]:port (numbers, no names)\n",
                where);
        return -EINVAL;
    }
    uln_addr_host(&R->root, &R->route,
                  &R->route_len); /* rank 0's answer unless it listens on a wildcard */

    /* The table from rank 0 goes in a private board (boot.c). */
    int brc = uln_boot_private_board(boot, (unsigned)size);
    if (brc) return brc;
    boot->rank = (int)rank;
    boot->size = (int)size;

    R->c = calloc(rank == 0 ? (size_t)size : 1, sizeof *R->c);
    if (!R->c) return -ENOMEM;
    for (long r = 0; r < (rank == 0 ? size : 1); r++)
        R->c[r].fd = -1;

    if (rank != 0) return join(boot, key);
    if (size > 1) return host_accept_all(boot, key);
    /* A job of one: nobody to talk to. */
    if (key == 0 && getentropy(&key, sizeof key) != 0) return -errno;
    boot->job_key = key ? key : 1;
    return 0;
}

int uln_root_publish(struct uln_boot *boot, const void *addr, size_t len)
{
    struct uln_root *R = boot->root;
    struct uln_board_slot *s = uln_board_slot(boot->board, boot->rank);
    if (len > sizeof s->addr) return -EINVAL;
    if (R->published) {
        fprintf(stderr, "ulnet: rank %d published twice\n", boot->rank);
        return -EADDRINUSE;
    }
    R->published = true;
    /* The slot in wire form (big-endian pid), as the table would bring it. */
    put32(uln_board_slot_wire(s), (uint32_t)getpid());
    memset(s->addr, 0, sizeof s->addr);
    memcpy(s->addr, addr, len);
    if (boot->rank == 0) {
        uln_board_slot_ready_wire(s);
        R->c[0].slot_in = true;
        return 0;
    }
    /* Joiner: the slot is ours only once it comes back in the table. */
    int rc = send_msg(R->c[0].fd, MSG_SLOT, uln_board_slot_wire(s), SLOT_WIRE, R->deadline);
    if (rc) fprintf(stderr, "ulnet: rank %d: lost rank 0 while publishing\n", boot->rank);
    return rc;
}

/* Rank 0: wait until every joiner has sent its SLOT (slots) or its next
 * BARRIER. On failure *bad is the rank that failed us, or 0 on a timeout with
 * miss[] marking the ranks still awaited. */
static int collect(struct uln_boot *boot, bool slots, int64_t deadline, int *bad, uint8_t *miss)
{
    struct uln_root *R = boot->root;
    struct pollfd *pf = calloc((size_t)boot->size, sizeof *pf);
    int *who = calloc((size_t)boot->size, sizeof *who), rc = 0;
    *bad = 0;
    if (!pf || !who) {
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        int n = 0;
        for (int r = 1; r < boot->size; r++) {
            struct conn *c = &R->c[r];
            bool done = slots ? c->slot_in : c->barriers > R->bar_done;
            if (miss) miss[r] = !done;
            if (done) continue;
            pf[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
            who[n++] = r;
        }
        if (n == 0) break;
        /* In a barrier, keep the endpoints moving while we wait (slices of
         * 1 ms): a peer may need this rank to resend or answer before it can
         * arrive here. Not while joining: no endpoint exists yet. */
        int k = poll(pf, (nfds_t)n, slots ? ms_left(deadline) : uln_boot_slice(deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k == 0 && !slots && uln_boot_now_ms() < deadline) {
            uln_boot_idle(boot);
            continue;
        }
        if (k <= 0) {
            rc = k == 0 ? -ETIMEDOUT : -errno;
            break;
        }
        for (int i = 0; i < n && !rc; i++) {
            if (!pf[i].revents) continue;
            int r = who[i];
            struct conn *c = &R->c[r];
            for (;;) {
                struct uln_board_slot *s = uln_board_slot(boot->board, r);
                int t = pump(c, slots && !c->slot_in ? uln_board_slot_wire(s) : NULL);
                if (t == 0) break;
                if (t == MSG_SLOT) {
                    uln_board_slot_ready_wire(s);
                    c->slot_in = true;
                } else if (t == MSG_BARRIER && !slots) {
                    c->barriers++;
                } else {
                    rc = t < 0 ? t : -EPROTO;
                    *bad = r;
                    break;
                }
            }
        }
        if (rc) break;
    }
out:
    free(pf);
    free(who);
    return rc == -EPROTO ? -ECONNRESET : rc; /* either way that rank is lost to the job */
}

int uln_root_wait_all(struct uln_boot *boot, int timeout_ms)
{
    struct uln_root *R = boot->root;
    if (!R->published) return -EINVAL;
    if (R->have_table) return 0;
    /* Never past ULN_BOOT_TIMEOUT, whatever the caller allows. */
    int64_t deadline = R->deadline;
    if (timeout_ms >= 0 && uln_boot_now_ms() + timeout_ms < deadline)
        deadline = uln_boot_now_ms() + timeout_ms;
    int rc = 0, size = boot->size;

    if (boot->rank != 0) {
        /* The table: exactly size slots, straight into the private board. */
        uint8_t h[HDR_BYTES];
        rc = read_full(R->c[0].fd, h, sizeof h, deadline);
        if (!rc && (get32(h) != MSG_TABLE || get32(h + 4) != (uint32_t)size * SLOT_WIRE))
            rc = -EPROTO;
        for (int r = 0; r < size && !rc; r++)
            rc = read_full(R->c[0].fd, uln_board_slot_wire(uln_board_slot(boot->board, r)),
                           SLOT_WIRE, deadline);
        if (rc == -ETIMEDOUT)
            fprintf(stderr,
                    "ulnet: rank %d: bootstrap timed out after %d s waiting for rank 0's table "
                    "of addresses (a rank has not published)\n",
                    boot->rank, R->timeout_s);
        else if (rc)
            fprintf(stderr, "ulnet: rank %d: lost rank 0 (%s) while waiting for the table\n",
                    boot->rank, R->where);
        if (rc) return rc == -EPROTO ? -ECONNRESET : rc;
        for (int r = 0; r < size; r++)
            uln_board_slot_ready_wire(uln_board_slot(boot->board, r));
        R->have_table = true;
        return 0;
    }

    uint8_t *miss = calloc((size_t)size, 1);
    if (!miss) return -ENOMEM;
    int bad;
    rc = collect(boot, true, deadline, &bad, miss);
    if (rc == -ETIMEDOUT) {
        char list[200];
        ranks_str(miss, size, list, sizeof list);
        fprintf(stderr, "ulnet: rank 0: bootstrap timed out after %d s: no address from ranks %s\n",
                R->timeout_s, list);
    } else if (rc) {
        fprintf(stderr, "ulnet: rank 0: lost rank %d while collecting addresses\n", bad);
    }
    free(miss);
    if (rc) return rc;

    /* Everybody's slot is in; the table is the board's slots in wire form. */
    size_t body = (size_t)size * SLOT_WIRE;
    uint8_t *t = malloc(HDR_BYTES + body);
    if (!t) return -ENOMEM;
    put32(t, MSG_TABLE);
    put32(t + 4, (uint32_t)body);
    for (int r = 0; r < size; r++) {
        struct uln_board_slot *s = uln_board_slot(boot->board, r);
        uint8_t *w = t + HDR_BYTES + (size_t)r * SLOT_WIRE;
        put32(w, (uint32_t)s->pid);
        memcpy(w + 4, s->addr, sizeof s->addr);
    }
    for (int r = 1; r < size && !rc; r++)
        if ((rc = write_full(R->c[r].fd, t, HDR_BYTES + body, deadline)) != 0)
            fprintf(stderr, "ulnet: rank 0: could not send the table to rank %d: %s\n", r,
                    strerror(-rc));
    free(t);
    if (!rc) R->have_table = true;
    return rc;
}

int uln_root_barrier(struct uln_boot *boot, int timeout_ms)
{
    struct uln_root *R = boot->root;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : uln_boot_now_ms() + timeout_ms;
    int rc;
    if (boot->size == 1) return 0;
    if (!R->have_table) return -EINVAL; /* not joined yet (uln_open did not finish) */

    if (boot->rank != 0) {
        struct conn *c = &R->c[0];
        /* Counted, so a call after a timeout waits for the same release instead
         * of entering a second barrier. */
        if (R->bar_sent == R->bar_done) {
            if ((rc = send_msg(c->fd, MSG_BARRIER, NULL, 0, deadline)) != 0) return rc;
            R->bar_sent++;
        }
        for (;;) {
            int t = pump(c, NULL);
            if (t == MSG_RELEASE) break;
            if (t > 0 || t == -EPROTO) return -ECONNRESET;
            if (t < 0) return t;
            /* Keep the endpoints moving meanwhile, as rank 0 does in collect(). */
            while ((rc = wait_fd(c->fd, POLLIN, uln_boot_now_ms() + uln_boot_slice(deadline))) ==
                       -ETIMEDOUT &&
                   uln_boot_now_ms() < deadline)
                uln_boot_idle(boot);
            if (rc) return rc;
        }
        R->bar_done++;
        return 0;
    }

    int bad;
    rc = collect(boot, false, deadline, &bad, NULL);
    if (rc == -ECONNRESET) fprintf(stderr, "ulnet: rank 0: lost rank %d in a barrier\n", bad);
    if (rc) return rc;
    R->bar_done++;
    /* Releases are small and the peers are reading: the deadline only guards
     * against a peer that stopped. */
    for (int r = 1; r < boot->size; r++) {
        int e = send_msg(R->c[r].fd, MSG_RELEASE, NULL, 0, deadline);
        if (e && !rc) rc = e;
    }
    return rc;
}

void uln_root_fini(struct uln_boot *boot)
{
    struct uln_root *R = boot->root;
    if (!R) return;
    close_fd(&R->listen_fd);
    for (int r = 0; R->c && r < (boot->rank == 0 ? boot->size : 1); r++)
        close_fd(&R->c[r].fd);
    free(R->c);
    free(R);
    boot->root = NULL;
}

int uln_boot_route_addr(const struct uln_boot *boot, struct sockaddr_storage *ss, socklen_t *len)
{
    if (!boot->root) return -ENOENT;
    memcpy(ss, &boot->root->route, sizeof *ss);
    *len = boot->root->route_len;
    return 0;
}
