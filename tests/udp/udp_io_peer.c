/*
 * udp_io_peer.c - one end of a datagram-layer exchange, for the tests that
 * run between network namespaces (test_udp_io_netns.sh) and for measuring
 * the layer by hand. Every mode prints one line of key=value results.
 *
 *   echo   --bind A --port P --peer B:Q [--count N] [--idle-ms T]
 *          send every datagram back to where it came from, straight out of
 *          the receive buffer; datagrams not from the peer are counted
 *   ping   --bind A --port P --peer B:Q
 *          batches of 1..64 packets of 1..3 iovecs; each must come back
 *          intact, in order, attributed to the peer
 *   source --bind A --port P --peer B:Q --size S (--count N | --ms T)
 *          [--batch B] [--pace-us U] [--no-gso] [--fault SPEC]
 *          numbered packets as fast as the socket takes them, or B every U us
 *   sink   --bind A --port P --peer B:Q [--count N] [--idle-ms T] [--max-ms T]
 *          count distinct numbered packets and the goodput from the first
 *          to the last, checking each one's bytes; --busy: spin on recv
 *          instead of sleeping in poll
 * Every mode takes --no-gro: receive without UDP_GRO.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "link/fault.h"
#include "link/udp/link_udp.h"

#define MAGIC 0x756c6e75u

struct opts {
    const char *mode, *bind, *peer, *fault;
    unsigned port, size, batch, pace_us, idle_ms, max_ms, ms;
    unsigned long long count;
    bool no_gso, no_gro, busy;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
    fprintf(stderr, "usage: udp_io_peer echo|ping|source|sink --bind A --port P --peer B:Q "
                    "[--size S] [--count N] [--ms T] [--batch B] [--pace-us U] [--idle-ms T] "
                    "[--max-ms T] [--no-gso] [--no-gro] [--busy] [--fault SPEC]\n");
    exit(2);
}

/* "1.2.3.4:5" or "[::1]:5" */
static int parse_peer(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host)) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    unsigned port = (unsigned)atoi(colon + 1);
    memset(ss, 0, sizeof(*ss));
    if (host[0] == '[') {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        size_t l = strlen(host);
        if (l < 3 || host[l - 1] != ']') return -1;
        host[l - 1] = '\0';
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*in6);
        return inet_pton(AF_INET6, host + 1, &in6->sin6_addr) == 1 ? 0 : -1;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    *len = sizeof(*in);
    return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -1;
}

static void print_stats(const char *who, struct uln_link *io)
{
    struct uln_link_stats st;
    uln_link_stats(io, &st);
    printf("%s_tx_pkts=%llu %s_tx_calls=%llu %s_tx_gso_msgs=%llu %s_tx_again=%llu %s_tx_err=%llu "
           "%s_rx_pkts=%llu %s_rx_calls=%llu %s_rx_unknown=%llu %s_rx_trunc=%llu "
           "%s_rx_pool_empty=%llu %s_kernel_drops=%llu %s_rx_gro_msgs=%llu %s_rx_gro_segs=%llu "
           "%s_rx_copied=%llu %s_rx_wakes=%llu\n",
           who, (unsigned long long)st.tx_pkts, who, (unsigned long long)st.tx_calls, who,
           (unsigned long long)st.tx_gso_msgs, who, (unsigned long long)st.tx_again, who,
           (unsigned long long)st.tx_err, who, (unsigned long long)st.rx_pkts, who,
           (unsigned long long)st.rx_calls, who, (unsigned long long)st.rx_unknown, who,
           (unsigned long long)st.rx_trunc, who, (unsigned long long)st.rx_pool_empty, who,
           (unsigned long long)st.rx_kernel_drops, who, (unsigned long long)st.rx_gro_msgs, who,
           (unsigned long long)st.rx_gro_segs, who, (unsigned long long)st.rx_copied, who,
           (unsigned long long)st.rx_wakes);
}

/* Send all of pkts, sleeping on POLLOUT while the socket is full. */
static bool send_all(struct uln_link *io, struct uln_link_pkt *pkts, unsigned n)
{
    unsigned done = 0;
    while (done < n) {
        int r = uln_link_send(io, pkts + done, n - done);
        if (r < 0) {
            fprintf(stderr, "udp_io_peer: send: %s\n", strerror(-r));
            return false;
        }
        done += (unsigned)r;
        if (done < n) {
            struct pollfd p = {.fd = uln_link_fd(io), .events = POLLOUT};
            poll(&p, 1, 100);
        }
    }
    return true;
}

static int run_echo(struct uln_link *io, const struct opts *o)
{
    static struct uln_link_rx rx[ULN_LINK_BATCH];
    static struct uln_link_pkt out[ULN_LINK_BATCH];
    unsigned long long echoed = 0, foreign = 0;
    uint64_t last = now_ns();
    while (!o->count || echoed < o->count) {
        int r = uln_link_recv(io, rx, ULN_LINK_BATCH);
        if (r < 0) return 1;
        if (r == 0) {
            if (now_ns() - last > (uint64_t)o->idle_ms * 1000000u) break;
            uln_link_wait(io, 50);
            continue;
        }
        last = now_ns();
        unsigned n = 0;
        for (int i = 0; i < r; i++) {
            if (rx[i].peer != 0) {
                foreign++;
                continue;
            }
            /* Sent straight from the receive buffer: no copy. */
            out[n] = (struct uln_link_pkt){.peer = 0, .niov = 1, .iov = {{rx[i].buf, rx[i].len}}};
            n++;
        }
        if (!send_all(io, out, n)) return 1;
        echoed += n;
        for (int i = 0; i < r; i++)
            uln_link_rx_release(io, rx[i].handle);
    }
    printf("echoed=%llu foreign=%llu\n", echoed, foreign);
    print_stats("echo", io);
    return 0;
}

static uint8_t pattern[1 << 16];

static int run_ping(struct uln_link *io, const struct opts *o)
{
    static struct uln_link_pkt pkts[64];
    static uint32_t hdr[64][4];
    static struct uln_link_rx rx[64];
    unsigned pmax = uln_link_payload_max(io);
    unsigned long long sent = 0, ok = 0, bad = 0, missing = 0, wrong_peer = 0;
    uint32_t seq = 0;
    for (unsigned n = 1; n <= 64; n++) {
        for (unsigned i = 0; i < n; i++) {
            uint32_t len = n % 2 ? 16u + ((seq + i) * 2654435761u) % (pmax - 15u)
                                 : 16u + (n * 97u) % (pmax - 15u);
            uint32_t plen = len - 16u, off = ((seq + i) * 7919u) % (sizeof(pattern) - 16384u);
            hdr[i][0] = MAGIC;
            hdr[i][1] = seq + i;
            hdr[i][2] = len;
            hdr[i][3] = off;
            uint32_t niov = 1 + (seq + i) % 3, a = plen / 2;
            pkts[i].peer = 0;
            pkts[i].niov = niov;
            pkts[i].iov[0] = (struct iovec){hdr[i], 16};
            if (niov == 1) {
                pkts[i].iov[0].iov_len = 16; /* header only: a control packet */
                hdr[i][2] = 16;
            } else if (niov == 2) {
                pkts[i].iov[1] = (struct iovec){pattern + off, plen};
            } else {
                pkts[i].iov[1] = (struct iovec){pattern + off, a};
                pkts[i].iov[2] = (struct iovec){pattern + off + a, plen - a};
            }
        }
        if (!send_all(io, pkts, n)) return 1;
        sent += n;
        unsigned got = 0;
        uint64_t t0 = now_ns();
        while (got < n && now_ns() - t0 < 1000000000ull) {
            int r = uln_link_recv(io, rx + got, n - got);
            if (r < 0) return 1;
            if (r == 0) uln_link_wait(io, 20);
            got += (unsigned)(r > 0 ? r : 0);
        }
        missing += n - got;
        for (unsigned i = 0; i < got; i++) {
            uint32_t h[4];
            memcpy(h, rx[i].buf, 16);
            bool good = rx[i].len >= 16 && h[0] == MAGIC && h[1] == seq + i && h[2] == rx[i].len &&
                        !memcmp(rx[i].buf + 16, pattern + h[3], rx[i].len - 16);
            good ? ok++ : bad++;
            wrong_peer += rx[i].peer != 0;
            uln_link_rx_release(io, rx[i].handle);
        }
        seq += n;
    }
    printf("sent=%llu ok=%llu bad=%llu missing=%llu wrong_peer=%llu\n", sent, ok, bad, missing,
           wrong_peer);
    print_stats("ping", io);
    return ok == sent && !wrong_peer ? 0 : 1;
}

static int run_source(struct uln_link *io, const struct opts *o)
{
    unsigned size = o->size ? o->size : uln_link_payload_max(io);
    unsigned batch = o->batch ? o->batch : 64;
    if (size < 8 || size > uln_link_payload_max(io) || batch > 1024) {
        fprintf(stderr, "udp_io_peer: bad --size or --batch\n");
        return 2;
    }
    struct uln_link_pkt *pkts = calloc(batch, sizeof(*pkts));
    uint32_t(*hdr)[2] = calloc(batch, sizeof(*hdr));
    uint64_t t0 = now_ns(), stop = o->ms ? t0 + (uint64_t)o->ms * 1000000u : UINT64_MAX;
    unsigned long long seq = 0, limit = o->count ? o->count : ~0ull;
    while (seq < limit && now_ns() < stop) {
        unsigned n = limit - seq < batch ? (unsigned)(limit - seq) : batch;
        for (unsigned i = 0; i < n; i++) {
            hdr[i][0] = MAGIC;
            hdr[i][1] = (uint32_t)(seq + i);
            pkts[i] = (struct uln_link_pkt){
                .peer = 0, .niov = 2, .iov = {{hdr[i], 8}, {pattern, size - 8}}};
        }
        if (!send_all(io, pkts, n)) return 1;
        seq += n;
        if (o->pace_us) {
            struct timespec ts = {0, (long)o->pace_us * 1000l};
            nanosleep(&ts, NULL);
        }
    }
    /* Let the fault injector's held packets go. */
    while (uln_link_flush(io) > 0)
        uln_link_wait(io, 1);
    double secs = (double)(now_ns() - t0) / 1e9;
    printf("sent=%llu size=%u secs=%.3f offered_gbps=%.3f\n", seq, size, secs,
           (double)seq * size * 8 / secs / 1e9);
    print_stats("source", io);
    free(pkts);
    free(hdr);
    return 0;
}

static int run_sink(struct uln_link *io, const struct opts *o)
{
    static struct uln_link_rx rx[ULN_LINK_BATCH];
    size_t cap = 1u << 24;
    uint8_t *seen = calloc(cap, 1);
    unsigned long long arrivals = 0, distinct = 0, bytes = 0, foreign = 0, bad = 0;
    uint64_t first = 0, last = 0, start = now_ns();
    uint64_t max_ns = (uint64_t)(o->max_ms ? o->max_ms : 10000) * 1000000u;
    while (!o->count || distinct < o->count) {
        uint64_t now = now_ns();
        if (now - start > max_ns) break;
        int r = uln_link_recv(io, rx, ULN_LINK_BATCH);
        if (r < 0) return 1;
        if (r == 0) {
            if (first && now - last > (uint64_t)o->idle_ms * 1000000u) break;
            if (!o->busy) uln_link_wait(io, 20);
            continue;
        }
        last = now_ns();
        if (!first) first = last;
        for (int i = 0; i < r; i++) {
            uint32_t h[2];
            if (rx[i].peer != 0 || rx[i].len < 8) {
                foreign++;
            } else {
                memcpy(h, rx[i].buf, 8);
                arrivals++;
                bytes += rx[i].len;
                /* the source's bytes after the header: the pattern's start */
                if (h[0] != MAGIC || memcmp(rx[i].buf + 8, pattern, rx[i].len - 8))
                    bad++;
                else if (h[1] < cap && !seen[h[1]]++)
                    distinct++;
            }
            uln_link_rx_release(io, rx[i].handle);
        }
    }
    double secs = first && last > first ? (double)(last - first) / 1e9 : 0;
    printf("received=%llu distinct=%llu foreign=%llu bad=%llu bytes=%llu secs=%.3f gbps=%.3f\n",
           arrivals, distinct, foreign, bad, bytes, secs,
           secs > 0 ? (double)bytes * 8 / secs / 1e9 : 0.0);
    print_stats("sink", io);
    free(seen);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.idle_ms = 1000};
    if (argc < 2) usage();
    o.mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-gso")) {
            o.no_gso = true;
            continue;
        }
        if (!strcmp(a, "--no-gro")) {
            o.no_gro = true;
            continue;
        }
        if (!strcmp(a, "--busy")) {
            o.busy = true;
            continue;
        }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--bind"))
            o.bind = v;
        else if (!strcmp(a, "--peer"))
            o.peer = v;
        else if (!strcmp(a, "--fault"))
            o.fault = v;
        else if (!strcmp(a, "--port"))
            o.port = (unsigned)atoi(v);
        else if (!strcmp(a, "--size"))
            o.size = (unsigned)atoi(v);
        else if (!strcmp(a, "--batch"))
            o.batch = (unsigned)atoi(v);
        else if (!strcmp(a, "--pace-us"))
            o.pace_us = (unsigned)atoi(v);
        else if (!strcmp(a, "--idle-ms"))
            o.idle_ms = (unsigned)atoi(v);
        else if (!strcmp(a, "--max-ms"))
            o.max_ms = (unsigned)atoi(v);
        else if (!strcmp(a, "--ms"))
            o.ms = (unsigned)atoi(v);
        else if (!strcmp(a, "--count"))
            o.count = strtoull(v, NULL, 10);
        else
            usage();
    }
    if (!o.peer) usage();
    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (uint8_t)(i * 131u + (i >> 8) * 7u + 1u);

    struct uln_link_udp_cfg cfg = {.addr = o.bind,
                                   .port = (uint16_t)o.port,
                                   .no_gso = o.no_gso,
                                   .no_gro = o.no_gro,
                                   .rx_bufs = 1024,
                                   .busy_poll = o.busy};
    struct uln_link *io;
    char why[128] = "";
    int rc = uln_link_udp_open(&cfg, &io);
    if (!rc) rc = uln_link_fault_wrap(o.fault, &io, why, sizeof(why));
    if (rc == -EINVAL && why[0]) fprintf(stderr, "udp_io_peer: fault spec: %s\n", why);
    if (rc) {
        fprintf(stderr, "udp_io_peer: open %s:%u: %s\n", o.bind ? o.bind : "*", o.port,
                strerror(-rc));
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_peer(o.peer, &ss, &sl) < 0 ||
        uln_link_add_peer(io, (struct sockaddr *)&ss, sl) != 0) {
        fprintf(stderr, "udp_io_peer: bad peer '%s'\n", o.peer);
        return 2;
    }
    struct uln_link_info info;
    uln_link_info(io, &info);
    fprintf(stderr,
            "udp_io_peer %s: mtu %u (%s) payload_max %u gso %d gro %d (%u bufs) fault %d "
            "rcvbuf %d\n",
            o.mode, info.mtu, info.ifname[0] ? info.ifname : "configured", info.payload_max,
            info.gso, info.gro, info.gro_bufs, info.fault, info.rcvbuf);
    if (!strcmp(o.mode, "echo"))
        rc = run_echo(io, &o);
    else if (!strcmp(o.mode, "ping"))
        rc = run_ping(io, &o);
    else if (!strcmp(o.mode, "source"))
        rc = run_source(io, &o);
    else if (!strcmp(o.mode, "sink"))
        rc = run_sink(io, &o);
    else
        usage();
    fflush(stdout);
    uln_link_close(io);
    return rc;
}
