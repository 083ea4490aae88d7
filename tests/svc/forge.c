/*
 * forge.c - forged and malformed attach messages against a running ulnetd
 * (argv[1]: its socket, argv[2]: the pid of another process attached to it,
 * whose inbox we try to pass as ours). Each case on its own connection must
 * be refused with its reason, and a malformed one must end that connection
 * alone; a well-formed attach of our own inbox is taken, once. Then, on
 * that attachment, forged MEM messages (memory for the service to map): an
 * unsealed block, a region outside its block, a block of another size than
 * said, a key index past the table; each refused, the connection kept; a
 * sealed one taken and forgotten (MEM_DEL); one without its descriptor
 * malformed, the connection ended. The script
 * (attach.sh) then checks the service's counters and that the other
 * process stayed attached.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ulnet.h"
#include "check.h"
#include "core/inbox.h"
#include "core/internal.h"
#include "transport/svc/proto.h"

static const char *path;

static int dial(void)
{
    struct sockaddr_un sa;
    int salen = uln_svc_sockaddr(path, &sa);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, (socklen_t)salen) != 0) {
        perror("forge: connect");
        exit(1);
    }
    return fd;
}

static void send_fds(int s, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)buf, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        m.msg_control = u.b;
        m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    if (sendmsg(s, &m, MSG_NOSIGNAL) != (ssize_t)len) perror("forge: sendmsg");
}

/* The answer's type and status. */
static int answer(int s, int *status)
{
    static char buf[ULN_SVC_MSG_MAX];
    struct uln_svc_hdr h;
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1) return -1; /* a bound on a hang, not a timing */
    ssize_t n = recv(s, buf, sizeof buf, 0);
    /* The service hung up: the end of the stream, or a reset when our
     * STATUS was still unread in its socket as it closed. */
    if (n < (ssize_t)sizeof h) return n == 0 || (n < 0 && errno == ECONNRESET) ? 0 : -1;
    memcpy(&h, buf, sizeof h);
    *status = h.status;
    return h.type;
}

/* Did the service end this connection (1), or does it still answer (0)? */
static int closed(int s)
{
    struct uln_svc_hdr h;
    int st;
    uln_svc_hdr_init(&h, ULN_SVC_STATUS, sizeof h, 0);
    if (send(s, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) return 1;
    int t = answer(s, &st);
    return t == ULN_SVC_STATUS_TEXT ? 0 : t == 0 ? 1 : -1;
}

/* Our own inbox's descriptor: the memfd named ulnet-inbox. */
static int find_inbox(int pid)
{
    char dir[64], link[384], target[256];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    int found = -1;
    for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (strstr(target, "memfd:ulnet-inbox")) found = open(link, O_RDWR | O_CLOEXEC);
    }
    if (d) closedir(d);
    return found;
}

static struct uln_svc_attach attach_of(int fd)
{
    struct uln_inbox_hdr h;
    struct uln_svc_attach a = {0};
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h)
        a = (struct uln_svc_attach){.job_key = h.job_key,
                                    .rank = h.rank,
                                    .size = h.size,
                                    .max_eps = h.max_eps,
                                    .inbox_bytes = h.total};
    uln_svc_hdr_init(&a.h, ULN_SVC_ATTACH, sizeof a, 0);
    return a;
}

/* One forged attach on a new connection: refused with want, and whether the
 * service hangs up on it (malformed). */
static void expect(const char *what, const void *msg, size_t len, const int *fds, int nfds,
                   int want, int want_closed)
{
    int s = dial(), st = 0;
    send_fds(s, msg, len, fds, nfds);
    int type = answer(s, &st), gone = closed(s);
    if (type != ULN_SVC_REFUSED || st != want || gone != want_closed)
        fprintf(stderr, "forge: %s: answer %d status %d closed %d\n", what, type, st, gone);
    CHECK_EQ(type, ULN_SVC_REFUSED);
    CHECK_EQ(st, want);
    CHECK_EQ(gone, want_closed);
    close(s);
}

/* One MEM on attachment s, with the block fd: refused with want (0: taken,
 * MEM_OK), the connection kept either way. */
static void mem_expect(int s, const char *what, const struct uln_svc_mem *m, int fd, int want)
{
    int st = 0;
    send_fds(s, m, sizeof *m, &fd, 1);
    int type = answer(s, &st);
    if (type != (want ? ULN_SVC_REFUSED : ULN_SVC_MEM_OK) || st != want)
        fprintf(stderr, "forge: %s: answer %d status %d\n", what, type, st);
    CHECK_EQ(type, want ? ULN_SVC_REFUSED : ULN_SVC_MEM_OK);
    CHECK_EQ(st, want);
    CHECK_EQ(closed(s), 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) return 2;
    path = argv[1];
    int victim = atoi(argv[2]);
    struct uln_ctx *ctx; /* our own inbox, not attached (ULN_SERVICE=off) */
    setenv("ULN_SERVICE", "off", 1);
    if (uln_open(NULL, &ctx) != 0) return 1;
    int own = find_inbox(getpid()), other = find_inbox(victim);
    CHECK(own >= 0 && other >= 0);
    struct uln_svc_attach a = attach_of(own), bad;

    bad = a;
    bad.h.magic ^= 1;
    expect("bad magic", &bad, sizeof bad, &own, 1, -EPROTO, 1);
    expect("no descriptor", &a, sizeof a, NULL, 0, -EPROTO, 1);
    int two[2] = {own, own};
    expect("two descriptors", &a, sizeof a, two, 2, -EPROTO, 1);
    expect("short", &a, sizeof a - 8, &own, 1, -EPROTO, 1);
    bad = a;
    bad.h.type = ULN_SVC_ATTACH_OK; /* an answer's type, from a process */
    expect("answer type", &bad, sizeof bad, &own, 1, -EPROTO, 1);

    int plain = memfd_create("not-sealed", MFD_CLOEXEC);
    CHECK(plain >= 0 && ftruncate(plain, (off_t)a.inbox_bytes) == 0);
    expect("unsealed memfd", &a, sizeof a, &plain, 1, -EPERM, 0);
    int sealed = memfd_create("garbage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(sealed >= 0 && ftruncate(sealed, (off_t)a.inbox_bytes) == 0 &&
          fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    expect("not an inbox", &a, sizeof a, &sealed, 1, -EINVAL, 0);
    bad = a;
    bad.inbox_bytes += 4096;
    expect("wrong size", &bad, sizeof bad, &own, 1, -EINVAL, 0);
    bad = a;
    bad.rank = (a.rank + 1) % 2;
    bad.size = 2;
    expect("another rank", &bad, sizeof bad, &own, 1, -EPERM, 0);
    bad = a;
    bad.job_key ^= 1;
    expect("another job", &bad, sizeof bad, &own, 1, -EPERM, 0);
    struct uln_svc_attach theirs = attach_of(other);
    expect("another process's inbox", &theirs, sizeof theirs, &other, 1, -EPERM, 0);

    /* Our own, well-formed: taken once, then refused on the same connection. */
    int s = dial(), st = 0;
    send_fds(s, &a, sizeof a, &own, 1);
    struct uln_svc_attach_ok ok;
    struct pollfd p = {.fd = s, .events = POLLIN};
    CHECK(poll(&p, 1, 10000) == 1 && recv(s, &ok, sizeof ok, 0) == (ssize_t)sizeof ok);
    CHECK_EQ(ok.h.type, ULN_SVC_ATTACH_OK);
    send_fds(s, &a, sizeof a, &own, 1);
    CHECK_EQ(answer(s, &st), ULN_SVC_REFUSED);
    CHECK_EQ(st, -EALREADY);
    CHECK_EQ(closed(s), 0);

    /* Memory for the service to map, on our attachment. */
    struct uln_inbox_hdr ih;
    CHECK(pread(own, &ih, sizeof ih, 0) == (ssize_t)sizeof ih);
    int blk = memfd_create("block", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(blk >= 0 && ftruncate(blk, 1 << 20) == 0 &&
          fcntl(blk, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    struct uln_svc_mem m = {.index = 1,
                            .key = (1ull << ULN_KEY_INDEX_SHIFT) | 0x1234,
                            .addr = 0x10000000,
                            .len = 8192,
                            .memfd_off = 4096,
                            .memfd_len = 1 << 20};
    uln_svc_hdr_init(&m.h, ULN_SVC_MEM, sizeof m, 0);
    struct uln_svc_mem bm = m;
    mem_expect(s, "unsealed block", &m, plain, -EINVAL);
    bm.memfd_off = (1 << 20) - 4096;
    mem_expect(s, "a region past its block", &bm, blk, -EINVAL);
    bm = m;
    bm.memfd_len = 2 << 20;
    mem_expect(s, "a block of another size", &bm, blk, -EINVAL);
    bm = m;
    bm.index = ih.max_regions;
    mem_expect(s, "a key index past the table", &bm, blk, -EINVAL);
    mem_expect(s, "a sealed block", &m, blk, 0);
    bm = m;
    uln_svc_hdr_init(&bm.h, ULN_SVC_MEM_DEL, sizeof bm, 0);
    send_fds(s, &bm, sizeof bm, NULL, 0);
    CHECK_EQ(answer(s, &st), ULN_SVC_MEM_OK);
    send_fds(s, &m, sizeof m, NULL, 0); /* MEM without its descriptor */
    CHECK_EQ(answer(s, &st), ULN_SVC_REFUSED);
    CHECK_EQ(st, -EPROTO);
    CHECK_EQ(closed(s), 1);
    close(s);
    /* Memory from a connection that has not attached. */
    s = dial();
    mem_expect(s, "memory before attaching", &m, blk, -EINVAL);
    close(s);
    uln_close(ctx);
    return summary();
}
