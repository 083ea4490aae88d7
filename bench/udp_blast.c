/*
 * udp_blast - the kernel's UDP path at full speed with nothing of ulnet's:
 * the ceiling any UDP sender has on a link, beside which ulnet's UDP
 * transport is judged (bench/netpeers, row kernel-udp-gso).
 *
 *   udp_blast recv|send ADDR PORT [SECONDS] [RUN] [SEGMENT] [SPREAD]
 *
 * The sender writes RUN bytes (default 64400) per send, cut by the kernel
 * into datagrams of SEGMENT bytes (default 1400; UDP_SEGMENT, as ulnet's
 * batches leave), for SECONDS (default 3), each datagram's first 8 bytes its
 * number. With SPREAD (bytes, > 0) each datagram goes as ulnet's do: a 32-byte
 * header (the number in it) and the payload, drawn in turn from SPREAD bytes
 * of memory, each its own iovec - the shape of ulnet's sends of a region's
 * bytes, which it does not copy first. The receiver reads with UDP_GRO (as ulnet does) until 0.5 s
 * pass with nothing, or SECONDS + 5. Nothing is resent, nothing paces the sender: what the receiver
 * got is what the path carries, and the numbers it did not see are the datagrams lost. Both sides
 * are given the same arguments (the receiver cuts its reads by SEGMENT); the receiver binds ADDR.
 *
 * Each side prints one line, "sent|received BYTES bytes DGRAMS datagrams in
 * SECS s: GBPS GB/s", the receiver "... lost LOST" as well (bench/peers.py
 * parses it). Exit 0, or 1 with the reason on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RUN_MAX  65000 /* a UDP_SEGMENT send is one IP datagram's worth at most */
#define READ_MAX (1 << 18)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int fail(const char *what)
{
    fprintf(stderr, "udp_blast: %s: %s\n", what, strerror(errno));
    return 1;
}

static int open_socket(const char *addr, const char *port, struct sockaddr_in *sa)
{
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (inet_pton(AF_INET, addr, &sa->sin_addr) != 1) {
        errno = EINVAL;
        return -1;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    /* Large buffers, as ulnet asks for: a drop must be the path's, not a
     * default buffer's (FORCE as root; the plain call otherwise). */
    int big = 32 << 20;
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) != 0)
        setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) != 0)
        setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    return s;
}

#define HDR 32 /* ulnet's packet header (docs/protocol.md) */

/* One run as ulnet sends it: per datagram a header iovec and a payload iovec
 * from the next bytes of spread (wrapping). */
static ssize_t send_spread(int s, int run, int seg, uint64_t *seq, uint8_t *spread, size_t len,
                           size_t *at)
{
    static uint8_t hdr[64][HDR];
    struct iovec iov[128];
    int k = 0;
    for (int off = 0; off < run; off += seg, (*seq)++) {
        size_t pay = (size_t)(run - off < seg ? run - off : seg) - HDR;
        if (*at + pay > len) *at = 0;
        uint8_t *h = hdr[k / 2];
        memcpy(h, seq, sizeof *seq);
        iov[k++] = (struct iovec){h, HDR};
        iov[k++] = (struct iovec){spread + *at, pay};
        *at += pay;
    }
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
    return sendmsg(s, &m, 0);
}

static int blast(int s, double seconds, int run, int seg, size_t spread_len)
{
    static uint8_t buf[RUN_MAX];
    uint8_t *spread = spread_len ? malloc(spread_len) : NULL;
    size_t at = 0;
    if (spread_len && !spread) return fail("malloc");
    if (spread) memset(spread, 0x5a, spread_len); /* touched, as a region's memory is */
    if (setsockopt(s, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) return fail("UDP_SEGMENT");
    uint64_t seq = 0, bytes = 0, dgrams = 0;
    double t0 = now_s(), end = t0 + seconds, t = t0;
    while (t < end) {
        ssize_t n;
        if (spread) {
            n = send_spread(s, run, seg, &seq, spread, spread_len, &at);
        } else {
            for (int off = 0; off < run; off += seg, seq++)
                memcpy(buf + off, &seq, sizeof seq);
            n = send(s, buf, (size_t)run, 0);
        }
        if (n < 0 && errno != ENOBUFS && errno != EAGAIN) return fail("send");
        if (n > 0) {
            bytes += (uint64_t)n;
            dgrams += (uint64_t)(n + seg - 1) / (uint64_t)seg;
        } else {
            seq -= (uint64_t)(run + seg - 1) / (uint64_t)seg; /* not sent: not lost */
        }
        t = now_s();
    }
    printf("sent %llu bytes %llu datagrams in %.3f s: %.3f GB/s\n", (unsigned long long)bytes,
           (unsigned long long)dgrams, t - t0, (double)bytes / (t - t0) / 1e9);
    return 0;
}

static int drain(int s, double seconds, int seg)
{
    static uint8_t buf[READ_MAX];
    int on = 1;
    if (setsockopt(s, SOL_UDP, UDP_GRO, &on, sizeof on) != 0) return fail("UDP_GRO");
    struct timeval tv = {0, 100000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint64_t bytes = 0, dgrams = 0, top = 0;
    double start = now_s(), first = 0, last = 0;
    for (;;) {
        ssize_t n = recv(s, buf, sizeof buf, 0);
        double t = now_s();
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) return fail("recv");
            if ((first && t - last > 0.5) || t - start > seconds + 5) break;
            continue;
        }
        if (!first) first = t;
        last = t;
        bytes += (uint64_t)n;
        /* A GRO read holds several datagrams of one size back to back; a
         * shorter last one ends it. Each starts with its number. */
        for (ssize_t off = 0; off + 8 <= n; off += seg) {
            uint64_t seq;
            memcpy(&seq, buf + off, sizeof seq);
            if (seq + 1 > top) top = seq + 1;
            dgrams++;
        }
    }
    if (!bytes) {
        fprintf(stderr, "udp_blast: nothing received in %.0f s\n", seconds + 5);
        return 1;
    }
    double secs = last > first ? last - first : 0;
    printf("received %llu bytes %llu datagrams in %.3f s: %.3f GB/s lost %llu\n",
           (unsigned long long)bytes, (unsigned long long)dgrams, secs,
           secs > 0 ? (double)bytes / secs / 1e9 : 0.0,
           (unsigned long long)(top > dgrams ? top - dgrams : 0));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "send") && strcmp(argv[1], "recv"))) {
        fprintf(stderr,
                "usage: udp_blast recv|send ADDR PORT [SECONDS] [RUN] [SEGMENT] [SPREAD]\n");
        return 2;
    }
    double seconds = argc > 4 ? atof(argv[4]) : 3;
    int run = argc > 5 ? atoi(argv[5]) : 64400, seg = argc > 6 ? atoi(argv[6]) : 1400;
    long long spread = argc > 7 ? atoll(argv[7]) : 0;
    if (seconds <= 0 || seg <= HDR || run < seg || run > RUN_MAX || run / seg > 63 || spread < 0 ||
        (spread && spread < seg)) {
        fprintf(stderr,
                "udp_blast: SECONDS > 0, %d < SEGMENT <= RUN <= %d, RUN/SEGMENT < 64, "
                "SPREAD 0 or >= SEGMENT\n",
                HDR, RUN_MAX);
        return 2;
    }
    struct sockaddr_in sa;
    int s = open_socket(argv[2], argv[3], &sa);
    if (s < 0) return fail(argv[2]);
    if (!strcmp(argv[1], "send")) {
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) return fail("connect");
        return blast(s, seconds, run, seg, (size_t)spread);
    }
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0) return fail("bind");
    return drain(s, seconds, seg);
}
