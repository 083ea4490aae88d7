/*
 * ulnetd - ulnet's host service (docs/service.md, ulnetd(8)).
 *
 *   ulnetd [--foreground] [--if IFACE] [--link xdp|udp|auto] [--path P]
 *   ulnetd --status [--path P]
 *
 * One per host (per network namespace): processes attach to it at uln_open
 * (ULN_SERVICE=auto|required) over a unix socket, abstract by default
 * (@ulnet/ulnetd; ULN_SERVICE_PATH or --path name another). It knows each by
 * its socket's credentials, maps its inbox, and notices its end at once (the
 * socket's hang-up). One thread: it sleeps in epoll_wait when there is
 * nothing to do, so an idle service costs no CPU.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ulnetd.h"
#include "boot/addr.h"
#include "link/link.h"
#include "link/select.h"
#include "seal/seal.h"
#include "transport/svc/proto.h"

/* --spin-us. 0: sleep as soon as a pass finds nothing. Measured across two
 * namespace hosts on 2 CPUs (bench/svc, docs/service.md): spinning costs
 * the ranks beside the service their CPU, and a packet that arrives while
 * the service spins behind a polling rank waits for the scheduler's slice,
 * while one that wakes it from ppoll preempts the rank at once. */
#define SPIN_NS_DEFAULT 0u

/* --rt-budget-us: how long a woken service keeps SCHED_FIFO (sched.c). A
 * message's work is a few us; a millisecond of continuous work is a flood,
 * which then shares the CPU under CFS like any other process. */
#define RT_BUDGET_NS_DEFAULT 1000000u
/* --rt-share: at most half of each 10 ms of CPU in that class (sched.c). */
#define RT_SHARE_DEFAULT 50u

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ulnetd [--foreground] [--addr IP[:PORT]] [--if IFACE] [--link xdp|udp|auto]\n"
            "              [--xdp-hook auto|native|generic]\n"
            "              [--path P] [--spin-us US] [--no-map] [--no-rank-socket]\n"
            "              [--weight UID:W|/CGROUP:W|*:W ...]\n"
            "              [--queue-mem SIZE] [--ops-mem SIZE]\n"
            "              [--secure off|auth|encrypt [--secret-file F]]\n"
            "              [--rt[=PRIO]] [--rt-budget-us US] [--rt-share PCT] [--nice N]\n"
            "       ulnetd --status [--path P]\n"
            "  --addr    where other hosts' services reach this one (UDP, IPv4; port %u);\n"
            "            without it the service serves this host only\n"
            "  --link    the link to other hosts: udp (sockets), xdp (AF_XDP), auto\n"
            "            (AF_XDP where the driver runs it zero-copy, else udp); default auto\n"
            "  --xdp-hook  where AF_XDP's program hooks in: native (the driver's),\n"
            "            generic (the kernel's, any driver), auto (native where the driver\n"
            "            has it); default auto\n"
            "  --if      the interface --addr must be on\n"
            "  --path P  where to listen: @name (abstract socket) or a file path;\n"
            "            default: $ULN_SERVICE_PATH, else %s\n"
            "  --spin-us how long to poll after the last work before sleeping (%u)\n"
            "  --no-map  never map processes' uln_mem_alloc memory: PUT and GET with\n"
            "            process_vm_*, atomics by the owner's engine (to compare)\n"
            "  --no-rank-socket  pass no process a UDP socket of its own at attach\n"
            "            (docs/service.md, \"A socket of its own\")\n"
            "  --weight UID:W  the largest share (1..%u) uid's processes may ask with\n"
            "            ULN_SERVICE_WEIGHT; /CGROUP:W for processes in that cgroup (v2)\n"
            "            or under it; *:W for the rest (repeatable)\n"
            "  --queue-mem SIZE  a process's queues' memory at most (K, M, G; %llu M):\n"
            "            an endpoint past it fails to open with -EDQUOT\n"
            "  --ops-mem SIZE  a process's messages the service holds for other hosts\n"
            "            (queued for the wire, kept for credit) at most (%llu M): past\n"
            "            it that process's queue waits, no other's\n"
            "  --secure  seal the wire to other hosts' services: auth (a tag on every\n"
            "            packet) or encrypt (and its bytes encrypted); processes whose\n"
            "            ULN_SECURE asks more take no peer on another host through it\n"
            "  --secret-file F  bind the wire's keys to the secret in F (every service\n"
            "            of the cluster the same; a file only this user may read)\n"
            "  --rt[=PRIO]  SCHED_FIFO while woken (default off; ulnetd(8): the budget\n"
            "            --rt-budget-us and the share --rt-share bound it); --nice N\n",
            ULN_SVC_WIRE_PORT, ULN_SVC_DEFAULT_PATH, SPIN_NS_DEFAULT / 1000u, ULN_SVC_WEIGHT_MAX,
            ULN_SVC_QUEUE_MEM_DEFAULT >> 20, ULN_SVC_OPS_MEM_DEFAULT >> 20);
}

/* Listen at d->path. A second service on one path is refused by the
 * kernel (abstract) or by finding the first one answering (a file). */
static int listen_at(struct ulnetd *d)
{
    struct sockaddr_un sa;
    int salen = uln_svc_sockaddr(d->path, &sa);
    if (salen < 0) {
        fprintf(stderr, "ulnetd: %s: not a usable socket name\n", d->path);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (d->path[0] != '@') {
        int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, (socklen_t)salen) == 0) {
            close(probe);
            close(fd);
            fprintf(stderr, "ulnetd: another ulnetd listens at %s\n", d->path);
            return -1;
        }
        if (probe >= 0) close(probe);
        unlink(d->path); /* a dead service's socket file */
    }
    if (bind(fd, (struct sockaddr *)&sa, (socklen_t)salen) != 0 || listen(fd, 64) != 0) {
        fprintf(stderr, "ulnetd: %s: %s%s\n", d->path, strerror(errno),
                errno == EADDRINUSE ? " (another ulnetd runs here)" : "");
        close(fd);
        return -1;
    }
    d->listen_fd = fd;
    return 0;
}

static int setup(struct ulnetd *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    d->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (d->signal_fd < 0 || d->epoll_fd < 0 || listen_at(d) != 0) return -1;
    struct epoll_event l = {.events = EPOLLIN, .data.ptr = &d->listen_fd};
    struct epoll_event s = {.events = EPOLLIN, .data.ptr = &d->signal_fd};
    if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->listen_fd, &l) != 0 ||
        epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->signal_fd, &s) != 0)
        return -1;
    d->host_id = uln_host_id();
    d->bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    return d->bell_fd < 0 ? -1 : 0;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Sleep until a socket, a doorbell or the link has something, or until
 * deadline (ns; ULN_REL_NEVER: no limit, but a second at most). The link's
 * descriptors are polled for this sleep only, never kept in the epoll set
 * (link.h: that would cost every packet a wake-up callback in the kernel);
 * ppoll's timeout is in ns, so a rel timer of 200 us is not a millisecond. */
static void sleep_until(struct ulnetd *d, uint64_t deadline)
{
    struct pollfd p[1 + ULN_LINK_FDS_MAX] = {{.fd = d->epoll_fd, .events = POLLIN}};
    int fds[ULN_LINK_FDS_MAX];
    int n = wire_fds(d, fds, ULN_LINK_FDS_MAX);
    for (int i = 0; i < n; i++)
        p[1 + i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    uint64_t now = now_ns(), wait = deadline <= now ? 0 : deadline - now;
    if (wait > 1000000000u) wait = 1000000000u;
    struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000u),
                          .tv_nsec = (long)(wait % 1000000000u)};
    (void)ppoll(p, (nfds_t)(1 + n), &ts, NULL);
}

/* One batch of events: new connections, messages, hang-ups, doorbells.
 * False: a signal asked us to stop. */
static bool events(struct ulnetd *d)
{
    struct epoll_event ev[32];
    int n = epoll_wait(d->epoll_fd, ev, 32, 0);
    if (n < 0 && errno != EINTR) {
        perror("ulnetd: epoll_wait");
        return false;
    }
    for (int i = 0; i < n; i++) {
        void *p = ev[i].data.ptr;
        if (p == &d->signal_fd) return false;
        if (p == &d->listen_fd) {
            clients_accept(d);
        } else if (*(int *)p == KIND_QUEUE) {
            uint64_t v;
            (void)!read(((struct queue *)p)->bell, &v, sizeof v);
            d->c.wakeups++;
        } else if (ev[i].events & EPOLLIN)
            client_input(d, p); /* a hang-up with input pending: reads 0 there */
        else
            client_gone(p, "hang-up");
    }
    clients_sweep(d); /* after the batch: nothing in it names a freed client */
    return true;
}

/* Forward while there is work (busy-polling the queues and the link,
 * --spin-us after the last message, 0 by default), then sleep until a socket, a queue's
 * eventfd or the link has something: idle, the service costs no CPU. A
 * target's full ring is looked at again every millisecond (its consumer has
 * no way yet to wake us: docs/service.md). */
static void run(struct ulnetd *d)
{
    uint64_t busy_at = now_ns(), woke = busy_at;
    for (;;) {
        bool blocked, moved = wire_input(d);
        moved |= queues_pump(d, &blocked);
        uint64_t deadline = wire_tick(d, &moved);
        uint64_t now = now_ns();
        if (moved) busy_at = now;
        sched_running(d, woke, now);
        bool slept = false;
        if (now - busy_at >= d->spin_ns) {
            queues_sleeping(d, 1);
            if (queues_pump(d, &blocked)) { /* a message came as we went to sleep */
                queues_sleeping(d, 0);
                busy_at = now_ns();
                continue;
            }
            if (blocked && deadline > now + 1000000) deadline = now + 1000000;
            if (deadline > now) {
                sched_sleeping(d);
                d->c.sleeps++;
                sleep_until(d, deadline);
                slept = true;
            }
        }
        bool go_on = events(d);
        if (slept) {
            queues_sleeping(d, 0);
            busy_at = woke = now_ns();
        }
        if (!go_on) return;
    }
}

int main(int argc, char **argv)
{
    struct ulnetd d = {.listen_fd = -1,
                       .epoll_fd = -1,
                       .signal_fd = -1,
                       .bell_fd = -1,
                       .reaper_fd = -1,
                       .next_id = 1,
                       .spin_ns = SPIN_NS_DEFAULT,
                       .rt_budget_ns = RT_BUDGET_NS_DEFAULT,
                       .rt_share = RT_SHARE_DEFAULT};
    const char *env = getenv("ULN_SERVICE_PATH");
    snprintf(d.path, sizeof d.path, "%s", env && *env ? env : ULN_SVC_DEFAULT_PATH);
    snprintf(d.link, sizeof d.link, "auto");
    snprintf(d.link_desc, sizeof d.link_desc, "none (no --addr: this host only)");
    bool status = false;
    const char *addr = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--foreground") || !strcmp(a, "-f"))
            ; /* the only way it runs so far: systemd (Type=simple) wants it so */
        else if (!strcmp(a, "--status"))
            status = true;
        else if (!strcmp(a, "--path") && more)
            snprintf(d.path, sizeof d.path, "%s", argv[++i]);
        else if (!strcmp(a, "--no-map"))
            d.no_map = true;
        else if (!strcmp(a, "--no-rank-socket"))
            d.no_socks = true;
        else if (!strcmp(a, "--addr") && more)
            addr = argv[++i];
        else if (!strcmp(a, "--secure") && more) {
            enum uln_seal_mode m;
            if (uln_seal_mode_parse(argv[++i], &m) != 0) {
                fprintf(stderr, "ulnetd: --secure %s: use off, auth or encrypt\n", argv[i]);
                return 2;
            }
            d.secure = (int)m;
        } else if (!strcmp(a, "--secret-file") && more)
            d.secret_file = argv[++i];
        else if (!strcmp(a, "--spin-us") && more)
            d.spin_ns = strtoull(argv[++i], NULL, 10) * 1000u;
        else if (!strcmp(a, "--rt"))
            d.rt_prio = 1;
        else if (!strncmp(a, "--rt=", 5))
            d.rt_prio = atoi(a + 5);
        else if (!strcmp(a, "--rt-budget-us") && more)
            d.rt_budget_ns = strtoull(argv[++i], NULL, 10) * 1000u;
        else if (!strcmp(a, "--rt-share") && more)
            d.rt_share = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(a, "--nice") && more) {
            d.nice_set = true;
            d.nice = atoi(argv[++i]);
        } else if ((!strcmp(a, "--queue-mem") || !strcmp(a, "--ops-mem")) && more) {
            char *end;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            int sh = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
            if (sh) end++;
            if (*end || v == 0 || v > (1ull << 40) >> sh) {
                fprintf(stderr, "ulnetd: %s %s: want a size (K, M or G)\n", a, argv[i]);
                return 2;
            }
            *(!strcmp(a, "--ops-mem") ? &d.ops_mem : &d.queue_mem) = v << sh;
        } else if (!strcmp(a, "--weight") && more) {
            if (arbiter_rule(&d, argv[++i]) != 0) return 2;
        } else if (!strcmp(a, "--if") && more)
            snprintf(d.iface, sizeof d.iface, "%s", argv[++i]);
        else if (!strcmp(a, "--link") && more) {
            const char *l = argv[++i];
            if (strcmp(l, "auto") && !uln_link_kind_find(l)) {
                char names[128];
                uln_link_kind_names(names, sizeof names);
                fprintf(stderr, "ulnetd: --link %s: use auto or %s\n", l, names);
                return 2;
            }
            snprintf(d.link, sizeof d.link, "%s", l);
        } else if (!strcmp(a, "--xdp-hook") && more) {
            static const char *const hooks[] = {"auto", "native", "generic"}; /* enum order */
            const char *h = argv[++i];
            d.xdp_hook = -1;
            for (int k = 0; k < 3; k++)
                if (!strcmp(h, hooks[k])) d.xdp_hook = k;
            if (d.xdp_hook < 0) {
                fprintf(stderr, "ulnetd: --xdp-hook %s: use auto, native or generic\n", h);
                return 2;
            }
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (status) return status_ask(d.path);
    if (d.secret_file && !d.secure) {
        fprintf(stderr, "ulnetd: --secret-file without --secure auth|encrypt\n");
        return 2;
    }
    if (setup(&d) != 0 || sched_setup(&d) != 0) return 1;
    if (addr && wire_open(&d, addr) != 0) return 1;
    fprintf(stderr, "ulnetd: pid %d listening at %s\n", (int)getpid(), d.path);
    run(&d);
    clients_drop_all(&d);
    wire_close(&d);
    socks_free(&d);
    reaper_stop(&d); /* after the link detached its program */
    if (d.path[0] != '@') unlink(d.path);
    return 0;
}
