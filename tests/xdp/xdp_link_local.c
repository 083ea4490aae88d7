/*
 * xdp_link_local.c - the AF_XDP link and a peer on its own host (src/link/xdp,
 * "Same-host peers"), below the protocol: an AF_XDP link and a socket link
 * bound to the same address of one namespace host, in one process. Run by
 * xdp_link_local.sh on such a host:
 *
 *   xdp_link_local ADDR [native|generic]
 *
 * Checked:
 *   - a datagram from a local sender the link does not know yet lands in its
 *     bound socket: the link's fd and wait wake for it, and recv lends it
 *     (peer -1, its source address, rx_sock, rx_unknown), also without the
 *     wait (the periodic read);
 *   - once that sender is a peer, the link's sends reach it by the socket
 *     (1 to 3 iovecs gathered, in order, intact), and its sends reach the
 *     link attributed to it, GSO runs included;
 *   - the landing buffers: as many as rx_bufs; all held, recv lends no more
 *     (rx_pool_empty) and each release lets one more in; handles apart from
 *     rx_lend's; a double release refused; a datagram longer than
 *     payload_max dropped (rx_trunc).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"

#define XPORT   31001 /* the AF_XDP link's */
#define SPORT   31002 /* the socket link's */
#define RX_BUFS 16u   /* the AF_XDP link's: its landing buffers too */
#define N       300u  /* datagrams each way */

static struct sockaddr_in addr_of(const char *ip, uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void fill(uint8_t *b, uint32_t len, uint32_t seq)
{
    for (uint32_t i = 0; i < len; i++)
        b[i] = (uint8_t)(seq * 7u + i);
}

static bool intact(const struct uln_link_rx *rx, uint32_t len, uint32_t seq)
{
    if (rx->len != len) return false;
    for (uint32_t i = 0; i < len; i++)
        if (rx->buf[i] != (uint8_t)(seq * 7u + i)) return false;
    return true;
}

/* Up to max datagrams within ms, spinning (no wait: the periodic read). */
static int recv_within(struct uln_link *l, struct uln_link_rx *rx, unsigned max, unsigned ms)
{
    uint64_t end = now_ms() + ms;
    int got = 0;
    while (got < (int)max && now_ms() < end) {
        int r = uln_link_recv(l, rx + got, max - (unsigned)got);
        if (r < 0) return r;
        got += r;
    }
    return got;
}

static int open_xdp(const char *ip, const char *hook, struct uln_link **x)
{
    struct sockaddr_in me = addr_of(ip, XPORT);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) return -errno;
    struct uln_link_xdp_cfg c = {.local = me, .fd = fd, .rx_bufs = RX_BUFS};
    c.hook = !strcmp(hook, "generic") ? ULN_XDP_HOOK_GENERIC : ULN_XDP_HOOK_NATIVE;
    char why[256];
    int rc = uln_link_xdp_open(&c, x, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "xdp_link_local: AF_XDP link: %s\n", why);
        close(fd);
    }
    return rc;
}

/* A sender the link does not know: woken for, lent with its address. */
static void unknown_sender(struct uln_link *x, struct uln_link *s)
{
    uint8_t b[100];
    fill(b, sizeof(b), 1);
    struct uln_link_pkt p = {.peer = 0, .niov = 1, .iov = {{b, sizeof(b)}}};
    CHECK_EQ(uln_link_send(s, &p, 1), 1);
    /* The fds (the UDP transport sleeps on them): the bound socket's among them. */
    int fds[ULN_LINK_FDS_MAX];
    int nfds = uln_link_fds(x, fds, ULN_LINK_FDS_MAX);
    struct pollfd pf[ULN_LINK_FDS_MAX];
    for (int i = 0; i < nfds; i++)
        pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    CHECK_EQ(poll(pf, (nfds_t)nfds, 2000), 1);
    CHECK_EQ(uln_link_wait(x, 2000), 1);
    struct uln_link_rx rx[4];
    CHECK_EQ(uln_link_recv(x, rx, 4), 1); /* after the wait: at once */
    CHECK_EQ(rx[0].peer, -1);
    CHECK(intact(&rx[0], sizeof(b), 1));
    socklen_t len = 0;
    const struct sockaddr_in *from = uln_link_rx_addr(x, rx[0].handle, &len);
    CHECK(from && len == sizeof(*from) && ntohs(from->sin_port) == SPORT);
    CHECK_EQ(uln_link_rx_release(x, rx[0].handle), 0);
    CHECK(uln_link_rx_addr(x, rx[0].handle, &len) == NULL);
    /* Without the wait: the read once a millisecond finds it. */
    CHECK_EQ(uln_link_send(s, &p, 1), 1);
    CHECK_EQ(recv_within(x, rx, 1, 2000), 1);
    CHECK_EQ(rx[0].peer, -1);
    uln_link_rx_release(x, rx[0].handle);
    struct uln_link_stats st;
    uln_link_stats(x, &st);
    CHECK_EQ(st.rx_sock, 2);
    CHECK_EQ(st.rx_unknown, 2);
}

/* Datagram seq's length: all of one (a socket link sends such runs as one
 * GSO message), or of many. */
static uint32_t len_of(uint32_t seq, uint32_t fixed)
{
    return fixed ? fixed : 1 + seq * 37u % 599u;
}

/* Send n numbered datagrams of 1 to 3 iovecs from a to its peer 0. */
static void send_n(struct uln_link *a, uint32_t n, uint32_t fixed)
{
    static uint8_t b[N][600];
    struct uln_link_pkt p[ULN_LINK_BATCH];
    for (uint32_t done = 0; done < n;) {
        unsigned k = 0;
        for (; k < ULN_LINK_BATCH && done + k < n; k++) {
            uint32_t seq = done + k, len = len_of(seq, fixed), niov = 1 + seq % 3u;
            fill(b[seq], len, seq);
            p[k] = (struct uln_link_pkt){.peer = 0, .niov = niov};
            for (uint32_t i = 0; i < niov; i++) {
                uint32_t from = len * i / niov, to = len * (i + 1) / niov;
                p[k].iov[i] = (struct iovec){b[seq] + from, to - from};
            }
        }
        int r = uln_link_send(a, p, k);
        CHECK(r >= 0);
        if (r < 0) return;
        done += (unsigned)r;
        if ((unsigned)r < k) uln_link_flush(a);
    }
}

/* Receive n of them at b, from its peer 0, in order and intact. */
static void recv_n(struct uln_link *b, uint32_t n, uint32_t fixed)
{
    struct uln_link_rx rx[ULN_LINK_BATCH];
    uint32_t next = 0, bad = 0;
    uint64_t end = now_ms() + 5000;
    while (next < n && now_ms() < end) {
        int r = uln_link_recv(b, rx, ULN_LINK_BATCH);
        if (r == 0) uln_link_wait(b, 10);
        for (int i = 0; i < r; i++, next++) {
            bad += rx[i].peer != 0 || !intact(&rx[i], len_of(next, fixed), next);
            uln_link_rx_release(b, rx[i].handle);
        }
    }
    CHECK_EQ(next, n);
    CHECK_EQ(bad, 0);
}

/* Both ways, once each is the other's peer. */
static void both_ways(struct uln_link *x, struct uln_link *s, const char *ip)
{
    struct sockaddr_in sa = addr_of(ip, SPORT);
    CHECK_EQ(uln_link_add_peer(x, &sa, sizeof(sa)), 0);
    struct uln_link_stats before, after;
    uln_link_stats(x, &before);
    send_n(x, N, 0);
    recv_n(s, N, 0);
    send_n(s, N, 0);
    recv_n(x, N, 0);
    send_n(s, N, 500);
    recv_n(x, N, 500);
    uln_link_stats(x, &after);
    CHECK_EQ(after.tx_pkts - before.tx_pkts, N);
    CHECK_EQ(after.tx_err, 0);
    CHECK_EQ(after.rx_sock - before.rx_sock, 2 * N);
    CHECK_EQ(after.rx_unknown, before.rx_unknown);
}

/* Every landing buffer held: no more lent until one comes back. */
static void pool_limits(struct uln_link *x, struct uln_link *s, const char *ip)
{
    static struct uln_link_rx rx[RX_BUFS + 8];
    send_n(s, RX_BUFS + 4, 0);
    CHECK_EQ(recv_within(x, rx, RX_BUFS + 8, 500), RX_BUFS);
    struct uln_link_stats st;
    uln_link_stats(x, &st);
    uint64_t dry = st.rx_pool_empty;
    CHECK_EQ(uln_link_recv(x, rx + RX_BUFS, 8), 0);
    uln_link_stats(x, &st);
    CHECK(st.rx_pool_empty > dry);
    bool apart = true;
    for (unsigned i = 0; i < RX_BUFS; i++)
        for (unsigned j = 0; j < i; j++)
            apart &= rx[i].handle != rx[j].handle;
    CHECK(apart);
    struct uln_link_rx lent;
    uint8_t one = 1;
    CHECK_EQ(uln_link_rx_lend(x, 0, &one, 1, &lent), 0); /* rx_lend's own buffers */
    for (unsigned i = 0; i < RX_BUFS; i++)
        apart &= lent.handle != rx[i].handle;
    CHECK(apart);
    CHECK_EQ(uln_link_rx_release(x, lent.handle), 0);
    CHECK_EQ(uln_link_rx_release(x, rx[0].handle), 0);
    CHECK_EQ(uln_link_rx_release(x, rx[0].handle), -EINVAL);
    CHECK_EQ(recv_within(x, rx + RX_BUFS, 8, 500), 1);
    CHECK(intact(&rx[RX_BUFS], len_of(RX_BUFS, 0), RX_BUFS));
    for (unsigned i = 1; i <= RX_BUFS; i++)
        CHECK_EQ(uln_link_rx_release(x, rx[i].handle), 0);
    CHECK_EQ(recv_within(x, rx, 8, 500), 3);
    for (unsigned i = 0; i < 3; i++)
        uln_link_rx_release(x, rx[i].handle);
    /* Longer than payload_max, from a plain socket: dropped, counted. */
    static uint8_t big[4000];
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in xa = addr_of(ip, XPORT);
    CHECK_EQ(sendto(fd, big, sizeof(big), 0, (struct sockaddr *)&xa, sizeof(xa)), sizeof(big));
    close(fd);
    uln_link_stats(x, &st);
    uint64_t trunc = st.rx_trunc;
    CHECK_EQ(recv_within(x, rx, 1, 200), 0);
    uln_link_stats(x, &st);
    CHECK_EQ(st.rx_trunc, trunc + 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: xdp_link_local ADDR [native|generic]\n");
        return 2;
    }
    const char *ip = argv[1], *hook = argc > 2 ? argv[2] : "native";
    struct uln_link *x, *s;
    int rc = open_xdp(ip, hook, &x);
    if (rc) return rc == -EOPNOTSUPP || rc == -EPERM ? 77 : 1;
    struct uln_link_udp_cfg sc = {.addr = ip, .port = SPORT};
    CHECK_EQ(uln_link_udp_open(&sc, &s), 0);
    struct sockaddr_in xa = addr_of(ip, XPORT);
    CHECK_EQ(uln_link_add_peer(s, &xa, sizeof(xa)), 0);
    unknown_sender(x, s);
    both_ways(x, s, ip);
    pool_limits(x, s, ip);
    uln_link_close(s);
    uln_link_close(x);
    return summary();
}
