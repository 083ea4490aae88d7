/*
 * xdp_link_peer.c - one end of a link-level exchange between two namespace
 * hosts, over the AF_XDP link or the socket link (link.h), below the
 * protocol: for tests/xdp/xdp_link.sh and for measuring what each link costs
 * per packet, by hand. Every mode prints one line of key=value results.
 *
 *   xdp_link_peer --link xdp|udp --bind A --port P --peer B:Q MODE [options]
 *
 *   echo    send every datagram back where it came from, a received batch as
 *           one send, until --idle-ms passes with nothing after the first
 *   ping    --count N round trips of one --size S datagram; the median and
 *           mean one-way time (half the round trip)
 *   source  --count N numbered datagrams of --size S in sends of --batch B,
 *           at most --window W ahead of the sink's credit
 *   sink    counts the source's datagrams, checks their numbers and bytes, and
 *           gives credit every 64; the packet rate from the first to the last.
 *           A datagram lost on the way is counted (lost=, a lost tail too), one corrupt, out
 *           of order or twice is bad (bad=, exit 1)
 *
 * Options: --hook native|generic (xdp), --copy (xdp: copy mode),
 * --busy-poll (spin: SO_BUSY_POLL on the socket), --spin (never sleep),
 * --gso-run N (xdp, copy mode: runs of N or more go by the bound socket as
 * UDP_SEGMENT sends; default 0, every datagram by AF_XDP),
 * --no-gso (udp: one datagram per system-call message and per read, as
 * AF_XDP's copy mode moves them: the path's own per-packet cost).
 * Each end reports its CPU time per packet (user + system, getrusage: on this
 * kernel the softirq work a system call triggers is charged to the caller,
 * so for a sender that includes the virtual path's own per-packet cost) and
 * the link's counters: kicks (tx_calls), reads, empty reads.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"

#define MAGIC          0x786c6e75u
#define CREDIT_EACH    64u
#define CREDIT_WAIT_MS 10000u /* source: the sink resends its credit every 20 ms */
#define START_MS       30000u /* echo, sink: the first datagram may take this long (a loaded host) */

struct opts {
    const char *link, *bind, *peer, *mode, *hook;
    unsigned port, size, batch, window, idle_ms, gso_run;
    unsigned long long count;
    bool copy, busy_poll, spin, no_gso, no_gro;
};

/* A data datagram's first 16 bytes; a credit is the same with kind 1. */
struct hdr {
    uint32_t magic, kind;
    uint64_t seq; /* data: its number; credit: datagrams received so far */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: xdp_link_peer --link xdp|udp --bind A --port P --peer B:Q "
            "echo|ping|source|sink [--count N] [--size S] [--batch B] [--window W] "
            "[--idle-ms T] [--hook native|generic] [--copy] [--busy-poll] [--spin] [--no-gso]\n"
            "       [--gso-run N]\n");
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.size = 64, .batch = 64, .window = 1024, .idle_ms = 2000, .count = 100000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool val = true;
        if (!strcmp(a, "--link") && v)
            o->link = v;
        else if (!strcmp(a, "--bind") && v)
            o->bind = v;
        else if (!strcmp(a, "--peer") && v)
            o->peer = v;
        else if (!strcmp(a, "--hook") && v)
            o->hook = v;
        else if (!strcmp(a, "--port") && v)
            o->port = (unsigned)atoi(v);
        else if (!strcmp(a, "--size") && v)
            o->size = (unsigned)atoi(v);
        else if (!strcmp(a, "--batch") && v)
            o->batch = (unsigned)atoi(v);
        else if (!strcmp(a, "--gso-run") && v)
            o->gso_run = (unsigned)atoi(v);
        else if (!strcmp(a, "--window") && v)
            o->window = (unsigned)atoi(v);
        else if (!strcmp(a, "--idle-ms") && v)
            o->idle_ms = (unsigned)atoi(v);
        else if (!strcmp(a, "--count") && v)
            o->count = strtoull(v, NULL, 10);
        else {
            val = false;
            if (!strcmp(a, "--copy"))
                o->copy = true;
            else if (!strcmp(a, "--busy-poll"))
                o->busy_poll = true;
            else if (!strcmp(a, "--spin"))
                o->spin = true;
            else if (!strcmp(a, "--no-gso"))
                o->no_gso = o->no_gro = true;
            else if (a[0] != '-' && !o->mode)
                o->mode = a;
            else
                usage();
        }
        i += val;
    }
    if (!o->link || !o->bind || !o->peer || !o->mode || !o->port || o->size < sizeof(struct hdr) ||
        !o->batch || o->batch > ULN_LINK_BATCH || o->window < o->batch)
        usage();
}

static int open_link(const struct opts *o, struct uln_link **out)
{
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->bind, &me.sin_addr) != 1) usage();
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
        fprintf(stderr, "xdp_link_peer: bind %s:%u: %s\n", o->bind, o->port, strerror(errno));
        return -errno;
    }
    if (!strcmp(o->link, "udp")) {
        struct uln_link_udp_cfg c = {.adopt = true,
                                     .fd = fd,
                                     .busy_poll = o->busy_poll,
                                     .no_gso = o->no_gso,
                                     .no_gro = o->no_gro};
        return uln_link_udp_open(&c, out);
    }
    struct uln_link_xdp_cfg c = {.local = me,
                                 .fd = fd,
                                 .copy = o->copy ? ULN_XDP_COPY_ONLY : ULN_XDP_COPY_AUTO,
                                 .busy_poll = o->busy_poll,
                                 .gso_run = o->gso_run};
    if (o->hook) c.hook = !strcmp(o->hook, "generic") ? ULN_XDP_HOOK_GENERIC : ULN_XDP_HOOK_NATIVE;
    char why[256];
    int rc = uln_link_xdp_open(&c, out, why, sizeof(why));
    if (rc) fprintf(stderr, "xdp_link_peer: AF_XDP link: %s\n", why);
    return rc;
}

static int add_peer(struct uln_link *l, const char *s)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host)) usage();
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    struct sockaddr_in p = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &p.sin_addr) != 1) usage();
    return uln_link_add_peer(l, &p, sizeof(p));
}

/* Send all of pkts, waiting while the link is full. */
static int send_all(struct uln_link *l, struct uln_link_pkt *pkts, unsigned n)
{
    for (unsigned done = 0; done < n;) {
        int r = uln_link_send(l, pkts + done, n - done);
        if (r < 0) return r;
        done += (unsigned)r;
        if (done < n) uln_link_flush(l);
    }
    return 0;
}

/* Up to max datagrams, waiting at most ms (spinning with --spin). */
static int recv_some(struct uln_link *l, const struct opts *o, struct uln_link_rx *rx, unsigned max,
                     unsigned ms)
{
    uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        int r = uln_link_recv(l, rx, max);
        if (r != 0 || now_ns() > end) return r;
        if (!o->spin) uln_link_wait(l, 10);
    }
}

static uint8_t pattern[1 << 16];

static bool data_ok(const struct uln_link_rx *rx, uint64_t seq, unsigned size)
{
    struct hdr h;
    if (rx->len != size) return false;
    memcpy(&h, rx->buf, sizeof(h));
    return h.magic == MAGIC && h.kind == 0 && h.seq == seq &&
           !memcmp(rx->buf + sizeof(h), pattern + seq % 251, size - sizeof(h));
}

static void print_stats(struct uln_link *l, const struct opts *o, unsigned long long pkts,
                        uint64_t wall, uint64_t cpu)
{
    struct uln_link_stats st;
    uln_link_stats(l, &st);
    struct uln_link_info in;
    uln_link_info(l, &in);
    double p = pkts ? (double)pkts : 1.0;
    printf("mode=%s link=%s %s%s pkts=%llu wall_ns_per_pkt=%.1f cpu_ns_per_pkt=%.1f "
           "tx_pkts=%llu tx_calls=%llu tx_again=%llu tx_err=%llu rx_pkts=%llu rx_calls=%llu "
           "rx_empty=%llu rx_bad_frame=%llu rx_sock=%llu kernel_drops=%llu busy_poll=%d\n",
           o->mode, in.kind[0] ? in.kind : "udp", in.xdp_mode[0] ? "mode=" : "",
           in.xdp_mode[0] ? in.xdp_mode : "", pkts, (double)wall / p, (double)cpu / p,
           (unsigned long long)st.tx_pkts, (unsigned long long)st.tx_calls,
           (unsigned long long)st.tx_again, (unsigned long long)st.tx_err,
           (unsigned long long)st.rx_pkts, (unsigned long long)st.rx_calls,
           (unsigned long long)st.rx_empty, (unsigned long long)st.rx_bad_frame,
           (unsigned long long)st.rx_sock, (unsigned long long)st.rx_kernel_drops, in.busy_poll);
}

static int run_echo(struct uln_link *l, const struct opts *o)
{
    static struct uln_link_rx rx[ULN_LINK_BATCH];
    static struct uln_link_pkt out[ULN_LINK_BATCH];
    unsigned long long n = 0;
    uint64_t t0 = 0, c0 = 0;
    for (;;) {
        int r = recv_some(l, o, rx, ULN_LINK_BATCH, t0 ? o->idle_ms : START_MS);
        if (r <= 0) break;
        if (!t0) t0 = now_ns(), c0 = cpu_ns();
        for (int i = 0; i < r; i++)
            out[i] = (struct uln_link_pkt){.peer = 0, .niov = 1, .iov = {{rx[i].buf, rx[i].len}}};
        if (send_all(l, out, (unsigned)r)) return 1;
        for (int i = 0; i < r; i++)
            uln_link_rx_release(l, rx[i].handle);
        n += (unsigned)r;
    }
    print_stats(l, o, n, t0 ? now_ns() - t0 : 0, t0 ? cpu_ns() - c0 : 0);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int run_ping(struct uln_link *l, const struct opts *o)
{
    uint64_t *rtt = calloc(o->count, sizeof(uint64_t));
    uint8_t buf[ULN_LINK_XDP_FRAME];
    struct uln_link_rx rx[4];
    if (!rtt || o->size > sizeof(buf)) return 1;
    uint64_t c0 = cpu_ns(), t0 = now_ns(), sum = 0;
    for (unsigned long long i = 0; i < o->count; i++) {
        struct hdr h = {MAGIC, 0, i};
        memcpy(buf, &h, sizeof(h));
        memcpy(buf + sizeof(h), pattern + i % 251, o->size - sizeof(h));
        struct uln_link_pkt p = {.peer = 0, .niov = 1, .iov = {{buf, o->size}}};
        uint64_t s = now_ns();
        if (send_all(l, &p, 1)) return 1;
        int r = recv_some(l, o, rx, 1, 1000);
        rtt[i] = now_ns() - s;
        if (r != 1 || !data_ok(&rx[0], i, o->size)) {
            fprintf(stderr, "xdp_link_peer: ping %llu: %s\n", i,
                    r == 1 ? "wrong answer" : "no answer");
            return 1;
        }
        uln_link_rx_release(l, rx[0].handle);
        sum += rtt[i];
    }
    uint64_t wall = now_ns() - t0, cpu = cpu_ns() - c0;
    qsort(rtt, o->count, sizeof(uint64_t), cmp_u64);
    printf("lat_us=%.3f lat_avg_us=%.3f ", (double)rtt[o->count / 2] / 2000.0,
           (double)sum / (double)o->count / 2000.0);
    print_stats(l, o, o->count, wall, cpu);
    free(rtt);
    return 0;
}

/* The sink's latest credit, if one came. */
static void take_credit(struct uln_link *l, const struct opts *o, uint64_t *credit, unsigned ms)
{
    struct uln_link_rx rx[ULN_LINK_BATCH];
    int r = ms ? recv_some(l, o, rx, ULN_LINK_BATCH, ms) : uln_link_recv(l, rx, ULN_LINK_BATCH);
    for (int i = 0; i < r; i++) {
        struct hdr h;
        memcpy(&h, rx[i].buf, sizeof(h));
        if (rx[i].len == sizeof(h) && h.magic == MAGIC && h.kind == 1 && h.seq > *credit)
            *credit = h.seq;
        uln_link_rx_release(l, rx[i].handle);
    }
}

static int run_source(struct uln_link *l, const struct opts *o)
{
    static struct uln_link_pkt pkts[ULN_LINK_BATCH];
    static struct hdr hdrs[ULN_LINK_BATCH];
    uint64_t credit = 0, seq = 0, c0 = cpu_ns(), t0 = now_ns();
    while (seq < o->count) {
        unsigned n = 0;
        while (n < o->batch && seq + n < o->count && seq + n - credit < o->window) {
            hdrs[n] = (struct hdr){MAGIC, 0, seq + n};
            pkts[n] = (struct uln_link_pkt){.peer = 0, .niov = 2};
            pkts[n].iov[0] = (struct iovec){&hdrs[n], sizeof(struct hdr)};
            pkts[n].iov[1] =
                (struct iovec){pattern + (seq + n) % 251, o->size - sizeof(struct hdr)};
            n++;
        }
        if (n && send_all(l, pkts, n)) return 1;
        seq += n;
        uint64_t before = credit;
        take_credit(l, o, &credit, n ? 0 : CREDIT_WAIT_MS);
        if (!n && credit == before) {
            fprintf(stderr, "xdp_link_peer: no credit for %u s at %llu of %llu sent\n",
                    CREDIT_WAIT_MS / 1000, (unsigned long long)credit, (unsigned long long)seq);
            print_stats(l, o, seq, now_ns() - t0, cpu_ns() - c0);
            return 1;
        }
    }
    print_stats(l, o, seq, now_ns() - t0, cpu_ns() - c0);
    return 0;
}

static int send_credit(struct uln_link *l, uint64_t got)
{
    struct hdr h = {MAGIC, 1, got};
    struct uln_link_pkt p = {.peer = 0, .niov = 1, .iov = {{&h, sizeof(h)}}};
    return send_all(l, &p, 1);
}

/* The number of a data datagram of ours that is intact, else -1. */
static int64_t data_seq(const struct uln_link_rx *rx, unsigned size)
{
    struct hdr h;
    if (rx->len != size) return -1;
    memcpy(&h, rx->buf, sizeof(h));
    if (h.magic != MAGIC || h.kind != 0 || h.seq > INT64_MAX) return -1;
    return data_ok(rx, h.seq, size) ? (int64_t)h.seq : -1;
}

/* The link may lose datagrams (the kernel drops when a queue overflows on
 * the way), never corrupt, reorder or duplicate them: a gap is counted as
 * lost, anything else as bad. Credit is the next number expected, sent every
 * CREDIT_EACH and again while the source seems stalled (a lost credit). */
static int run_sink(struct uln_link *l, const struct opts *o)
{
    struct uln_link_rx rx[ULN_LINK_BATCH];
    unsigned long long got = 0, bad = 0, lost = 0;
    uint64_t next = 0, t0 = 0, c0 = 0, t1 = 0;
    while (next < o->count) {
        int r = recv_some(l, o, rx, ULN_LINK_BATCH, t0 ? 20 : START_MS);
        if (r < 0 || (r == 0 && (!t0 || now_ns() - t1 > (uint64_t)o->idle_ms * 1000000u))) break;
        if (r == 0) {
            send_credit(l, next);
            continue;
        }
        if (!t0) t0 = now_ns(), c0 = cpu_ns();
        uint64_t before = next;
        for (int i = 0; i < r; i++) {
            int64_t q = data_seq(&rx[i], o->size);
            if (q < 0 || (uint64_t)q < next) {
                bad++;
            } else {
                lost += (uint64_t)q - next;
                next = (uint64_t)q + 1;
                got++;
            }
            uln_link_rx_release(l, rx[i].handle);
        }
        t1 = now_ns();
        if (next / CREDIT_EACH != before / CREDIT_EACH || next == o->count) send_credit(l, next);
    }
    uint64_t cpu = t0 ? cpu_ns() - c0 : 0;
    if (got) lost += o->count - next; /* the tail that never came */
    printf("got=%llu lost=%llu bad=%llu mpps=%.4f ", got, lost, bad,
           t1 > t0 ? (double)got / (double)(t1 - t0) * 1e3 : 0.0);
    print_stats(l, o, got, t1 - t0, cpu);
    return got && !bad ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (uint8_t)(i * 131u + 7u);
    struct uln_link *l;
    int rc = open_link(&o, &l);
    if (rc) {
        fprintf(stderr, "xdp_link_peer: cannot open the %s link: %s\n", o.link, strerror(-rc));
        return rc == -EOPNOTSUPP || rc == -EPERM ? 77 : 1;
    }
    if (add_peer(l, o.peer) != 0) {
        fprintf(stderr, "xdp_link_peer: bad peer %s\n", o.peer);
        return 1;
    }
    printf("ready\n"); /* the XDP program takes our frames from now on */
    fflush(stdout);
    if (!strcmp(o.mode, "echo"))
        rc = run_echo(l, &o);
    else if (!strcmp(o.mode, "ping"))
        rc = run_ping(l, &o);
    else if (!strcmp(o.mode, "source"))
        rc = run_source(l, &o);
    else if (!strcmp(o.mode, "sink"))
        rc = run_sink(l, &o);
    else
        usage();
    uln_link_close(l);
    return rc;
}
