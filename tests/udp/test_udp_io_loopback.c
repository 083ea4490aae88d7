/*
 * test_udp_io_loopback.c - the socket link (src/link/udp, src/link/fault.c) over
 * real sockets on 127.0.0.1 (and ::1 where the host has it): batches of 1..64
 * packets of 1..3 iovecs arrive intact and attributed to their sender, with
 * and without GSO; the receive pool runs dry and takes buffers back in any
 * order; truncated datagrams and unknown sources are counted; the peer table
 * keeps one id per address; malformed fault specs are refused; and the fault
 * injector's drop/dup/reorder rates over 10^5 packets match the spec and
 * repeat exactly with the same seed. With UDP_GRO (on by default): GSO runs
 * arrive as one read and are lent datagram by datagram from it, exactly once,
 * in order, in any max per call; a landing buffer is read into again only
 * when all its datagrams are back; lone datagrams and those that come while
 * landing buffers run short are copied; no_gro / ULN_UDP_GRO=0 is the old io;
 * the socket's UDP_GRO goes off for lone traffic and on again at a burst.
 *
 * Loopback hands a datagram to the receiving socket within the sendmmsg that
 * sends it, so every loss here is one the test or the injector made: the
 * counts are checked exactly, not statistically, where they can be.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "link/fault.h"
#include "link/udp/link_udp.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define MAGIC 0x756c6e75u

/* Every test packet starts with this; the rest is pattern[off..off+len). */
struct thdr {
    uint32_t magic;
    uint32_t seq;
    uint32_t len; /* whole datagram */
    uint32_t off; /* where in the pattern the payload starts */
};

static uint8_t pattern[1 << 17];

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct uln_link *open_io2(const char *addr, unsigned mtu, unsigned rx_bufs, bool no_gso,
                                 const char *fault, bool no_gro)
{
    struct uln_link_udp_cfg c = {
        .addr = addr, .mtu = mtu, .rx_bufs = rx_bufs, .no_gso = no_gso, .no_gro = no_gro};
    struct uln_link *io = NULL;
    char why[128];
    int rc = uln_link_udp_open(&c, &io);
    if (!rc) rc = uln_link_fault_wrap(fault, &io, why, sizeof(why));
    CHECK_EQ(rc, 0);
    return rc ? NULL : io;
}

static struct uln_link *open_io(const char *addr, unsigned mtu, unsigned rx_bufs, bool no_gso,
                                const char *fault)
{
    return open_io2(addr, mtu, rx_bufs, no_gso, fault, false);
}

/* Make each the other's peer; returns the id `to` has in `from`. */
static int link_to(struct uln_link *from, struct uln_link *to)
{
    struct sockaddr_storage ss;
    socklen_t l;
    CHECK_EQ(uln_link_local(to, &ss, &l), 0);
    return uln_link_add_peer(from, (struct sockaddr *)&ss, l);
}

/* Send all of pkts, waiting for room if the socket fills. */
static void send_all(struct uln_link *io, const struct uln_link_pkt *pkts, unsigned n)
{
    unsigned done = 0;
    uint64_t t0 = now_ms();
    while (done < n && now_ms() - t0 < 5000) {
        int r = uln_link_send(io, pkts + done, n - done);
        if (r < 0) {
            CHECK(r >= 0);
            return;
        }
        done += (unsigned)r;
        if (done < n) {
            struct pollfd p = {.fd = uln_link_fd(io), .events = POLLOUT};
            poll(&p, 1, 10);
        }
    }
    CHECK_EQ(done, n);
}

/* A sendmmsg that acts as if the socket kept filling: every fifth call finds
 * it full, the others take 1..4 messages. */
static unsigned cut_calls;
static int cut_sendmmsg(int fd, struct mmsghdr *m, unsigned vlen, int flags)
{
    unsigned allow = cut_calls++ % 5;
    if (allow == 0) {
        errno = EAGAIN;
        return -1;
    }
    return sendmmsg(fd, m, vlen < allow ? vlen : allow, flags);
}

/* Receive until want datagrams or timeout_ms of silence. */
static unsigned recv_n(struct uln_link *io, struct uln_link_rx *out, unsigned want, int timeout_ms)
{
    unsigned got = 0;
    struct uln_link_stats st;
    uln_link_stats(io, &st);
    uint64_t dry = st.rx_pool_empty;
    while (got < want) {
        int r = uln_link_recv(io, out + got, want - got);
        CHECK(r >= 0);
        if (r < 0) break;
        got += (unsigned)r;
        if (r > 0) continue;
        /* A dry pool leaves the socket readable: waiting would not block. */
        uln_link_stats(io, &st);
        if (st.rx_pool_empty != dry || uln_link_wait(io, timeout_ms) == 0) break;
    }
    return got;
}

/* Fill one packet: header in hdr, payload from the pattern, split over niov
 * iovecs (niov 1: the header and payload copied together into flat). */
static void make_pkt(struct uln_link_pkt *p, int peer, struct thdr *hdr, uint8_t *flat,
                     uint32_t seq, uint32_t len, uint32_t niov)
{
    hdr->magic = MAGIC;
    hdr->seq = seq;
    hdr->len = len;
    hdr->off = (seq * 7919u) % (sizeof(pattern) - 65536u);
    uint32_t plen = len - (uint32_t)sizeof(*hdr);
    p->peer = peer;
    if (niov == 1) {
        memcpy(flat, hdr, sizeof(*hdr));
        memcpy(flat + sizeof(*hdr), pattern + hdr->off, plen);
        p->niov = 1;
        p->iov[0] = (struct iovec){flat, len};
        return;
    }
    p->iov[0] = (struct iovec){hdr, sizeof(*hdr)};
    if (niov == 2) {
        p->niov = 2;
        p->iov[1] = (struct iovec){pattern + hdr->off, plen};
        return;
    }
    uint32_t a = plen / 3;
    p->niov = 3;
    p->iov[1] = (struct iovec){pattern + hdr->off, a};
    p->iov[2] = (struct iovec){pattern + hdr->off + a, plen - a};
}

static bool pkt_ok(const struct uln_link_rx *rx, struct thdr *out)
{
    struct thdr h;
    if (rx->len < sizeof(h)) return false;
    memcpy(&h, rx->buf, sizeof(h));
    if (out) *out = h;
    return h.magic == MAGIC && h.len == rx->len &&
           !memcmp(rx->buf + sizeof(h), pattern + h.off, rx->len - sizeof(h));
}

/* ------------------------------------------------------------------------- */

/* Batches 1..64 from two senders to one receiver, interleaved, every size
 * pattern: equal sizes (GSO runs), ragged sizes, 1..3 iovecs. */
static void test_batches(bool no_gso)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 1024, no_gso, NULL);
    struct uln_link *c = open_io("127.0.0.1", 0, 64, no_gso, NULL);
    struct uln_link *b = open_io("127.0.0.1", 0, 1024, no_gso, NULL);
    if (!a || !b || !c) return;
    struct uln_link_info info;
    uln_link_info(a, &info);
    CHECK_EQ(info.mtu, ULN_LINK_UDP_MTU_CAP); /* loopback's 65536, capped */
    CHECK(!strcmp(info.ifname, "lo"));
    CHECK_EQ(info.payload_max, ULN_LINK_UDP_MTU_CAP - 28u);
    CHECK_EQ(info.gso, !no_gso);
    int b_in_a = link_to(a, b), b_in_c = link_to(c, b);
    CHECK_EQ(b_in_a, 0);
    CHECK_EQ(b_in_c, 0);
    CHECK_EQ(link_to(b, a), 0);
    CHECK_EQ(link_to(b, c), 1);
    unsigned pmax = uln_link_payload_max(a);

    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][ULN_LINK_UDP_MTU_CAP];
    static struct uln_link_rx rx[128];
    uint32_t seq = 0;
    unsigned bad = 0, wrong_peer = 0, missing = 0;
    for (unsigned n = 1; n <= 64; n++) {
        for (int who = 0; who < 2; who++) {
            struct uln_link *s = who ? c : a;
            /* sizes: all equal (one GSO run), ragged, equal then a short tail */
            uint32_t shape = n % 3, base = 16u + (n * 131u) % (pmax - 16u);
            for (unsigned i = 0; i < n; i++) {
                uint32_t len = base;
                if (shape == 1)
                    len = 16u + ((seq + i) * 2654435761u) % (pmax - 15u);
                else if (shape == 2 && i == n - 1)
                    len = 16u + base / 2;
                make_pkt(&pkts[i], who ? b_in_c : b_in_a, &hdrs[i], flat[i], seq + i, len,
                         1 + (seq + i) % 3);
            }
            send_all(s, pkts, n);
            unsigned got = recv_n(b, rx, n, 1000);
            missing += n - got;
            for (unsigned i = 0; i < got; i++) {
                struct thdr h;
                if (!pkt_ok(&rx[i], &h) || h.seq != seq + i) bad++;
                if (rx[i].peer != who) wrong_peer++;
                CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
            }
            seq += n;
        }
    }
    CHECK_EQ(missing, 0);
    CHECK_EQ(bad, 0);
    CHECK_EQ(wrong_peer, 0);
    struct uln_link_stats sa, sb, sc;
    uln_link_stats(a, &sa);
    uln_link_stats(b, &sb);
    uln_link_stats(c, &sc);
    CHECK_EQ(sa.tx_pkts, 64u * 65u / 2u);
    CHECK_EQ(sa.tx_err, 0);
    CHECK_EQ(sb.rx_pkts, 64u * 65u);
    CHECK_EQ(sb.rx_unknown, 0);
    CHECK_EQ(sb.rx_trunc, 0);
    CHECK_EQ(sb.rx_kernel_drops, 0);
    if (no_gso)
        CHECK_EQ(sa.tx_gso_msgs, 0);
    else
        CHECK(sa.tx_gso_msgs > 0 && sa.gso_off == 0);
    /* b reads with GRO: what went as a GSO run came as one read */
    uln_link_info(b, &info);
    CHECK(info.gro);
    CHECK_EQ(sb.rx_gro_msgs, sa.tx_gso_msgs + sc.tx_gso_msgs);
    CHECK_EQ(sb.rx_gro_segs, sa.tx_gso_pkts + sc.tx_gso_pkts);
    if (!no_gso) CHECK(sb.rx_gro_msgs > 0);
    printf("batches (%s): %llu datagrams in %llu sendmmsg calls, %llu GSO messages; "
           "received in %llu recvmmsg calls, %llu GRO reads of %llu datagrams, %llu copied\n",
           no_gso ? "no GSO" : "GSO", (unsigned long long)sa.tx_pkts,
           (unsigned long long)sa.tx_calls, (unsigned long long)sa.tx_gso_msgs,
           (unsigned long long)sb.rx_calls, (unsigned long long)sb.rx_gro_msgs,
           (unsigned long long)sb.rx_gro_segs, (unsigned long long)sb.rx_copied);
    uln_link_close(a);
    uln_link_close(b);
    uln_link_close(c);
}

/* Sends cut short anywhere (GSO runs too): send returns what went, the rest
 * goes on the next call, nothing is lost, duplicated or reordered. */
static void test_partial(bool no_gso)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, no_gso, NULL);
    struct uln_link *b = open_io("127.0.0.1", 0, 1024, no_gso, NULL);
    if (!a || !b) return;
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][2048];
    static struct uln_link_rx rx[64];
    uint32_t seq = 0;
    unsigned bad = 0, missing = 0, calls = 0, partial = 0;
    uln_link_udp_test_hook_sendmmsg(cut_sendmmsg);
    for (unsigned n = 1; n <= 64; n++) {
        for (unsigned i = 0; i < n; i++)
            make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, n % 2 ? 1000 : 200 + i % 3,
                     1 + i % 3);
        unsigned done = 0;
        while (done < n && calls < 10000) {
            int r = uln_link_send(a, pkts + done, n - done);
            CHECK(r >= 0);
            calls++;
            partial += r >= 0 && (unsigned)r < n - done;
            done += r > 0 ? (unsigned)r : 0;
        }
        unsigned got = recv_n(b, rx, n, 1000);
        missing += n - got;
        for (unsigned i = 0; i < got; i++) {
            struct thdr h;
            if (!pkt_ok(&rx[i], &h) || h.seq != seq + i || rx[i].peer != 0) bad++;
            uln_link_rx_release(b, rx[i].handle);
        }
        seq += n;
    }
    uln_link_udp_test_hook_sendmmsg(NULL);
    CHECK_EQ(missing, 0);
    CHECK_EQ(bad, 0);
    CHECK(partial > 0);
    struct uln_link_stats st;
    uln_link_stats(a, &st);
    CHECK(st.tx_again > 0);
    CHECK_EQ(st.tx_pkts, 64u * 65u / 2u);
    CHECK_EQ(recv_n(b, rx, 1, 20), 0); /* nothing extra */
    uln_link_close(a);
    uln_link_close(b);
}

/* A datagram the kernel refuses for good (here: to port 0) is consumed,
 * counted and lost, as on a lossy link; the rest of the batch goes. A GSO run
 * the kernel refuses goes again datagram by datagram. */
static void test_refused(bool no_gso)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, no_gso, NULL);
    struct uln_link *b = open_io("127.0.0.1", 0, 0, no_gso, NULL);
    if (!a || !b) return;
    int good = link_to(a, b);
    struct sockaddr_in dead = {
        .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int bad = uln_link_add_peer(a, (struct sockaddr *)&dead, sizeof(dead));
    CHECK_EQ(bad, 1);
    int to[9] = {good, bad, good, bad, bad, bad, bad, bad, good};
    struct uln_link_pkt pkts[9];
    struct thdr hdrs[9];
    static uint8_t flat[9][512];
    for (unsigned i = 0; i < 9; i++)
        make_pkt(&pkts[i], to[i], &hdrs[i], flat[i], i, 300, 2);
    CHECK_EQ(uln_link_send(a, pkts, 9), 9);
    struct uln_link_rx rx[9];
    CHECK_EQ(recv_n(b, rx, 9, 50), 3);
    struct thdr h;
    CHECK(pkt_ok(&rx[0], &h) && h.seq == 0);
    CHECK(pkt_ok(&rx[1], &h) && h.seq == 2);
    CHECK(pkt_ok(&rx[2], &h) && h.seq == 8);
    struct uln_link_stats st;
    uln_link_stats(a, &st);
    CHECK_EQ(st.tx_err, 6);
    CHECK_EQ(st.last_tx_errno, EINVAL);
    CHECK_EQ(st.tx_pkts, 3);
    CHECK_EQ(st.gso_off, 0); /* refusing one message says nothing about GSO */
    uln_link_close(a);
    uln_link_close(b);
}

/* A pool of 8 without GRO (with GRO, see test_gro_pool): it runs dry, takes
 * buffers back in any order, lent buffers stay untouched while others are
 * reused, bad releases are refused. */
static void test_pool(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link *b = open_io2("127.0.0.1", 0, 8, false, NULL, true);
    if (!a || !b) return;
    struct uln_link_info info;
    uln_link_info(b, &info);
    CHECK(!info.gro && info.gro_bufs == 0);
    int peer = link_to(a, b);
    struct uln_link_pkt pkts[12];
    struct thdr hdrs[12];
    static uint8_t flat[12][256];
    for (unsigned i = 0; i < 12; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], i, 100 + i, 2);
    send_all(a, pkts, 12);

    struct uln_link_rx rx[16];
    unsigned got = recv_n(b, rx, 16, 200);
    CHECK_EQ(got, 8);
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    uint64_t empty0 = st.rx_pool_empty;
    CHECK(empty0 >= 1);
    CHECK_EQ(uln_link_recv(b, rx + 8, 8), 0);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_pool_empty, empty0 + 1);

    /* Out of order: 5, 1, 6. The rest stay lent and must stay intact. */
    unsigned order[3] = {5, 1, 6};
    for (unsigned i = 0; i < 3; i++)
        CHECK_EQ(uln_link_rx_release(b, rx[order[i]].handle), 0);
    CHECK_EQ(uln_link_rx_release(b, rx[5].handle), -EINVAL); /* twice */
    CHECK_EQ(uln_link_rx_release(b, 9999), -EINVAL);         /* never lent */
    unsigned more = recv_n(b, rx + 8, 8, 200);
    CHECK_EQ(more, 3);
    for (unsigned i = 8; i < 8 + more; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h));
        CHECK_EQ(h.seq, i);
        CHECK(rx[i].handle == rx[5].handle || rx[i].handle == rx[1].handle ||
              rx[i].handle == rx[6].handle);
    }
    for (unsigned i = 0; i < 8; i++) {
        if (i == 5 || i == 1 || i == 6) continue;
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h)); /* untouched while lent */
        CHECK_EQ(h.seq, i);
    }
    /* Give everything back; the 12th datagram still waits in the socket. */
    for (unsigned i = 0; i < 11; i++)
        if (i != 5 && i != 1 && i != 6) CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
    CHECK_EQ(recv_n(b, rx, 8, 200), 1);
    CHECK(pkt_ok(&rx[0], NULL));
    CHECK_EQ(uln_link_rx_release(b, rx[0].handle), 0);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_bad_release, 2);
    CHECK_EQ(st.rx_pkts, 12);
    uln_link_close(a);
    uln_link_close(b);
}

/* A receiver with a 1000-byte MTU drops what does not fit and counts it. */
static void test_trunc(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link *b = open_io("127.0.0.1", 1000, 0, false, NULL);
    if (!a || !b) return;
    unsigned pmax = uln_link_payload_max(b);
    CHECK_EQ(pmax, 1000u - 28u);
    int peer = link_to(a, b);
    uint32_t lens[4] = {2000, pmax + 1, pmax, 100};
    struct uln_link_pkt pkts[4];
    struct thdr hdrs[4];
    static uint8_t flat[4][4096];
    for (unsigned i = 0; i < 4; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], i, lens[i], 2);
    send_all(a, pkts, 4);
    struct uln_link_rx rx[4];
    unsigned got = recv_n(b, rx, 4, 200);
    CHECK_EQ(got, 2);
    for (unsigned i = 0; i < got; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h));
        CHECK_EQ(h.seq, i + 2);
        uln_link_rx_release(b, rx[i].handle);
    }
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_trunc, 2);
    CHECK_EQ(st.rx_pkts, 2);
    /* ... and the sender refuses what does not fit its own MTU up front. */
    make_pkt(&pkts[0], peer, &hdrs[0], flat[0], 0, 100, 2);
    pkts[0].iov[1].iov_len = uln_link_payload_max(a);
    CHECK_EQ(uln_link_send(a, pkts, 1), -EMSGSIZE);
    uln_link_close(a);
    uln_link_close(b);
}

/* Unknown sources: delivered as peer -1 with their address, counted; the
 * peer table: one id per address in any spelling, set_peer, full table. */
static void test_peers(void)
{
    struct uln_link_udp_cfg cfg = {.addr = "127.0.0.1", .max_peers = 3};
    struct uln_link *b;
    CHECK_EQ(uln_link_udp_open(&cfg, &b), 0);
    struct sockaddr_in bsa;
    socklen_t bl = sizeof(bsa);
    CHECK_EQ(uln_link_local(b, (struct sockaddr_storage *)&bsa, &bl), 0);
    int s1 = socket(AF_INET, SOCK_DGRAM, 0), s2 = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(s1, (struct sockaddr *)&lo, sizeof(lo)), 0);
    CHECK_EQ(bind(s2, (struct sockaddr *)&lo, sizeof(lo)), 0);
    struct sockaddr_in a1, a2;
    socklen_t l1 = sizeof(a1), l2 = sizeof(a2);
    getsockname(s1, (struct sockaddr *)&a1, &l1);
    getsockname(s2, (struct sockaddr *)&a2, &l2);

    CHECK_EQ(sendto(s1, "hello", 5, 0, (struct sockaddr *)&bsa, bl), 5);
    struct uln_link_rx rx[2];
    CHECK_EQ(recv_n(b, rx, 1, 500), 1);
    CHECK_EQ(rx[0].peer, -1);
    CHECK(rx[0].len == 5 && !memcmp(rx[0].buf, "hello", 5));
    socklen_t al;
    const struct sockaddr *src = uln_link_rx_addr(b, rx[0].handle, &al);
    CHECK(src && src->sa_family == AF_INET &&
          ((const struct sockaddr_in *)src)->sin_port == a1.sin_port);
    /* a hello from a new rank: the transport learns its address */
    int id = uln_link_add_peer(b, src, al);
    CHECK_EQ(id, 0);
    CHECK_EQ(uln_link_rx_release(b, rx[0].handle), 0);
    CHECK(uln_link_rx_addr(b, rx[0].handle, &al) == NULL);
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_unknown, 1);

    CHECK_EQ(sendto(s1, "again", 5, 0, (struct sockaddr *)&bsa, bl), 5);
    CHECK_EQ(recv_n(b, rx, 1, 500), 1);
    CHECK_EQ(rx[0].peer, 0);
    uln_link_rx_release(b, rx[0].handle);

    /* the same address, spelt as IPv4-mapped IPv6: the same peer */
    struct sockaddr_in6 m = {.sin6_family = AF_INET6, .sin6_port = a1.sin_port};
    m.sin6_addr.s6_addr[10] = m.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&m.sin6_addr.s6_addr[12], &a1.sin_addr, 4);
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&m, sizeof(m)), -EEXIST);
    CHECK_EQ(uln_link_find_peer(b, (struct sockaddr *)&m, sizeof(m)), 0);
    struct sockaddr_in6 v6 = {
        .sin6_family = AF_INET6, .sin6_addr = in6addr_loopback, .sin6_port = htons(9)};
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&v6, sizeof(v6)), -EAFNOSUPPORT);
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&a1, 3), -EINVAL);

    /* s1's rank restarted as s2: point id 0 there; s1 is unknown again */
    CHECK_EQ(uln_link_set_peer(b, 0, (struct sockaddr *)&a2, l2), 0);
    CHECK_EQ(uln_link_find_peer(b, (struct sockaddr *)&a1, l1), -1);
    CHECK_EQ(uln_link_find_peer(b, (struct sockaddr *)&a2, l2), 0);
    CHECK_EQ(sendto(s2, "s2", 2, 0, (struct sockaddr *)&bsa, bl), 2);
    CHECK_EQ(sendto(s1, "s1", 2, 0, (struct sockaddr *)&bsa, bl), 2);
    CHECK_EQ(recv_n(b, rx, 2, 500), 2);
    CHECK_EQ(rx[0].peer, 0);
    CHECK_EQ(rx[1].peer, -1);
    uln_link_rx_release(b, rx[0].handle);
    uln_link_rx_release(b, rx[1].handle);

    /* fill the table (3), many ports: ids dense, lookups all right */
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&a1, l1), 1);
    struct sockaddr_in x = a1;
    x.sin_port = htons(ntohs(a1.sin_port) ^ 0x5555);
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&x, sizeof(x)), 2);
    x.sin_port = htons(1);
    CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&x, sizeof(x)), -ENOSPC);
    CHECK_EQ(uln_link_find_peer(b, (struct sockaddr *)&a1, l1), 1);
    CHECK_EQ(uln_link_find_peer(b, (struct sockaddr *)&a2, l2), 0);
    CHECK_EQ(uln_link_set_peer(b, 1, (struct sockaddr *)&a2, l2), -EEXIST);
    CHECK_EQ(uln_link_set_peer(b, 7, (struct sockaddr *)&a2, l2), -EINVAL);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_unknown, 2);
    close(s1);
    close(s2);
    uln_link_close(b);

    /* a larger table, churned through set_peer: the index stays consistent */
    struct uln_link_udp_cfg c2 = {.addr = "127.0.0.1", .max_peers = 200};
    CHECK_EQ(uln_link_udp_open(&c2, &b), 0);
    struct sockaddr_in p = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    for (unsigned i = 0; i < 200; i++) {
        p.sin_port = htons((uint16_t)(1000 + i));
        CHECK_EQ(uln_link_add_peer(b, (struct sockaddr *)&p, sizeof(p)), (int)i);
    }
    unsigned wrong = 0;
    for (unsigned i = 0; i < 200; i += 3) {
        p.sin_port = htons((uint16_t)(5000 + i));
        if (uln_link_set_peer(b, (int)i, (struct sockaddr *)&p, sizeof(p))) wrong++;
    }
    for (unsigned i = 0; i < 200; i++) {
        p.sin_port = htons((uint16_t)((i % 3 ? 1000 : 5000) + i));
        if (uln_link_find_peer(b, (struct sockaddr *)&p, sizeof(p)) != (int)i) wrong++;
        p.sin_port = htons((uint16_t)((i % 3 ? 5000 : 1000) + i));
        if (uln_link_find_peer(b, (struct sockaddr *)&p, sizeof(p)) != -1) wrong++;
    }
    CHECK_EQ(wrong, 0);
    uln_link_close(b);
}

/* Configuration refused up front; ids and iovec counts checked. */
static void test_config(void)
{
    struct uln_link *io = NULL;
    struct uln_link_udp_cfg c = {.addr = "300.1.2.3"};
    CHECK_EQ(uln_link_udp_open(&c, &io), -EINVAL);
    c.addr = "127.0.0.1";
    c.mtu = 100;
    CHECK_EQ(uln_link_udp_open(&c, &io), -EINVAL);
    c.mtu = 1500;
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    CHECK_EQ(uln_link_payload_max(io), 1472);
    struct uln_link_info info;
    uln_link_info(io, &info);
    CHECK(info.ifname[0] == '\0'); /* configured, not looked up */
    CHECK(info.rcvbuf > 0 && info.sndbuf > 0);
    struct uln_link_pkt p = {.peer = 0, .niov = 1, .iov = {{pattern, 10}}};
    CHECK_EQ(uln_link_send(io, &p, 1), -EINVAL); /* no peer 0 yet */
    CHECK(link_to(io, io) == 0);                 /* itself */
    p.niov = 0;
    CHECK_EQ(uln_link_send(io, &p, 1), -EINVAL);
    p.niov = ULN_LINK_IOV_WIRE + 1; /* the callers' 3 and a seal's trailer at most */
    CHECK_EQ(uln_link_send(io, &p, 1), -EINVAL);
    p.niov = 1;
    p.peer = -1;
    CHECK_EQ(uln_link_send(io, &p, 1), -EINVAL);
    p.peer = 0;
    CHECK_EQ(uln_link_send(io, &p, 0), 0);
    CHECK_EQ(uln_link_send(io, &p, 1), 1);
    struct uln_link_rx rx;
    CHECK_EQ(recv_n(io, &rx, 1, 500), 1);
    CHECK_EQ(rx.peer, 0);
    uln_link_rx_release(io, rx.handle);
    uln_link_close(io);

    /* busy polling: taken where allowed (raising it needs CAP_NET_ADMIN),
     * never a reason to fail */
    struct uln_link_udp_cfg bp = {.addr = "127.0.0.1", .busy_poll = true};
    CHECK_EQ(uln_link_udp_open(&bp, &io), 0);
    uln_link_info(io, &info);
    printf("busy poll: %s\n", info.busy_poll ? "on" : "refused (not privileged)");
    uln_link_close(io);

    /* the wildcard: dual-stack where there is IPv6, MTU of a real interface */
    struct uln_link_udp_cfg w = {0};
    CHECK_EQ(uln_link_udp_open(&w, &io), 0);
    uln_link_info(io, &info);
    printf("wildcard: family %s, mtu %u from '%s', payload_max %u\n",
           info.family == AF_INET6 ? "IPv6 (dual-stack)" : "IPv4", info.mtu, info.ifname,
           info.payload_max);
    CHECK(info.mtu >= ULN_LINK_UDP_MTU_MIN && info.mtu <= ULN_LINK_UDP_MTU_CAP);
    uln_link_close(io);
}

/* ::1, and a dual-stack socket talking to an IPv4 one (IPv4-mapped peers). */
static void test_ipv6(void)
{
    struct uln_link_udp_cfg c6 = {.addr = "::1"};
    struct uln_link *a, *b;
    int rc = uln_link_udp_open(&c6, &a);
    if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT) {
        printf("ipv6: no ::1 on this host (%s), skipped\n", strerror(-rc));
        return;
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(uln_link_udp_open(&c6, &b), 0);
    CHECK_EQ(uln_link_payload_max(a), ULN_LINK_UDP_MTU_CAP - 48u);
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    struct uln_link_pkt pkts[16];
    struct thdr hdrs[16];
    static uint8_t flat[16][2048];
    for (unsigned i = 0; i < 16; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], i, 1200, 1 + i % 3);
    send_all(a, pkts, 16);
    struct uln_link_rx rx[16];
    CHECK_EQ(recv_n(b, rx, 16, 500), 16);
    for (unsigned i = 0; i < 16; i++) {
        CHECK(pkt_ok(&rx[i], NULL) && rx[i].peer == 0);
        uln_link_rx_release(b, rx[i].handle);
    }
    uln_link_close(a);
    uln_link_close(b);

    struct uln_link_udp_cfg cd = {0}, c4 = {.addr = "127.0.0.1"};
    struct uln_link *d, *v4;
    CHECK_EQ(uln_link_udp_open(&cd, &d), 0);
    CHECK_EQ(uln_link_udp_open(&c4, &v4), 0);
    struct uln_link_info info;
    uln_link_info(d, &info);
    if (info.family != AF_INET6) {
        uln_link_close(d);
        uln_link_close(v4);
        return;
    }
    struct sockaddr_in6 dl;
    socklen_t dlen = sizeof(dl);
    uln_link_local(d, (struct sockaddr_storage *)&dl, &dlen);
    struct sockaddr_in to_d = {
        .sin_family = AF_INET, .sin_port = dl.sin6_port, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(uln_link_add_peer(v4, (struct sockaddr *)&to_d, sizeof(to_d)), 0);
    CHECK_EQ(link_to(d, v4), 0); /* given as plain IPv4 */
    make_pkt(&pkts[0], 0, &hdrs[0], flat[0], 1, 500, 2);
    send_all(d, pkts, 1);
    CHECK_EQ(recv_n(v4, rx, 1, 500), 1);
    CHECK(pkt_ok(&rx[0], NULL));
    CHECK_EQ(rx[0].peer, 0); /* d sends from 127.0.0.1:its port */
    uln_link_rx_release(v4, rx[0].handle);
    send_all(v4, pkts, 1);
    CHECK_EQ(recv_n(d, rx, 1, 500), 1);
    CHECK(pkt_ok(&rx[0], NULL));
    CHECK_EQ(rx[0].peer, 0); /* arrives as ::ffff:127.0.0.1, found as 127.0.0.1 */
    uln_link_rx_release(d, rx[0].handle);
    /* a GSO run through the dual-stack socket to an IPv4 peer */
    for (unsigned i = 0; i < 16; i++)
        make_pkt(&pkts[i], 0, &hdrs[i], flat[i], i, 1000, 2);
    send_all(d, pkts, 16);
    CHECK_EQ(recv_n(v4, rx, 16, 500), 16);
    for (unsigned i = 0; i < 16; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == i);
        uln_link_rx_release(v4, rx[i].handle);
    }
    struct uln_link_stats st;
    uln_link_stats(d, &st);
    CHECK(!info.gso || st.tx_gso_msgs == 1);
    uln_link_close(d);
    uln_link_close(v4);
}

static void test_fault_specs(void)
{
    static const char *bad[] = {
        "drop",           "drop=",        "drop=abc",
        "drop=1.5",       "drop=-0.1",    "drop=0.1x",
        "drop=150%",      "bogus=0.1",    "drop=0.1,,dup=0.1",
        ",drop=0.1",      "drop=0.1,",    "drop=0.1,drop=0.2",
        "seed=x",         "seed=-1",      "delay=1e3",
        "delay=99999999", "reorder= 0.1", "DROP=0.1",
        "dup=nan",
    };
    char why[128];
    struct uln_link_fault f;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = uln_link_fault_parse(bad[i], &f, why, sizeof(why));
        CHECK_EQ(rc, -EINVAL);
        if (rc == -EINVAL) CHECK(why[0] != '\0');
    }
    CHECK_EQ(uln_link_fault_parse("drop=0.1,,dup=0.1", &f, why, sizeof(why)), -EINVAL);
    printf("a refused spec says: %s\n", why);
    CHECK_EQ(uln_link_fault_parse("", &f, why, sizeof(why)), 0);
    CHECK(f.drop == 0 && f.dup == 0 && f.reorder == 0 && f.seed == 1 && f.delay_us == 1000);
    CHECK_EQ(uln_link_fault_parse("seed=0x10,reorder=10%,dup=0.5,delay=250,drop=2%", &f, why,
                                  sizeof(why)),
             0);
    CHECK(fabs(f.drop - 0.02) < 1e-12 && f.dup == 0.5 && fabs(f.reorder - 0.1) < 1e-12);
    CHECK(f.seed == 16 && f.delay_us == 250);
    CHECK_EQ(uln_link_fault_parse("drop=1,dup=0", &f, why, sizeof(why)), 0);

    /* from the configuration (ULN_FAULT, resolved by ctx.c): the wrap that
     * link/select.c puts on whichever link it opens refuses a bad one, saying
     * why, and closes the link */
    struct uln_link *io = NULL;
    struct uln_link_udp_cfg c = {.addr = "127.0.0.1"};
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    why[0] = '\0';
    CHECK_EQ(uln_link_fault_wrap("drop=2", &io, why, sizeof(why)), -EINVAL);
    CHECK(io == NULL && why[0]);
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    CHECK_EQ(uln_link_fault_wrap("", &io, why, sizeof(why)), 0);
    struct uln_link_info plain;
    uln_link_info(io, &plain);
    CHECK(!plain.fault); /* "" leaves the link as it is */
    uln_link_close(io);
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    CHECK_EQ(uln_link_fault_wrap("drop=0.02,seed=3", &io, why, sizeof(why)), 0);
    struct uln_link_info info;
    uln_link_info(io, &info);
    CHECK(info.fault && info.gso); /* the injector keeps the offloads */
    uln_link_close(io);
}

/* ------------------------------------------------------------------------- */
/* Fault rates                                                                */
/* ------------------------------------------------------------------------- */

struct fault_run {
    uint64_t drop, dup, late;     /* measured at the receiver */
    uint64_t order_hash;          /* of the arrival sequence */
    struct uln_link_stats st;     /* when the last packet was sent */
    struct uln_link_stats st_end; /* after the sentinels */
};

#define NPKT 100000u

/* Send NPKT numbered packets through a faulty sender, in batches of 1..64,
 * draining the receiver as it goes; measure what arrived. */
static void fault_run(const char *spec, struct fault_run *out, bool cut)
{
    memset(out, 0, sizeof(*out));
    /* The cut run sends datagram by datagram, so that sends are cut short
     * inside what would be one GSO run; the others keep GSO, as jobs do. */
    struct uln_link *a = open_io("127.0.0.1", 0, 0, cut, spec);
    struct uln_link *b = open_io("127.0.0.1", 0, 1024, false, NULL);
    if (!a || !b) return;
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    uint8_t *seen = calloc(NPKT, 1);
    uint32_t hdr[64][2];
    struct uln_link_pkt pkts[64];
    static struct uln_link_rx rx[256];
    uint64_t arrivals = 0, distinct = 0, hash = 1469598103934665603ull;
    int64_t top = -1;
    uint32_t seq = 0, n = 1, sentinels = 0;
    uint64_t t0 = now_ms();
    bool quiet = false;
    if (cut) uln_link_udp_test_hook_sendmmsg(cut_sendmmsg);
    while (!quiet) {
        if (seq < NPKT) {
            uint32_t k = n < NPKT - seq ? n : NPKT - seq;
            for (uint32_t i = 0; i < k; i++) {
                hdr[i][0] = MAGIC;
                hdr[i][1] = seq + i;
                pkts[i].peer = peer;
                pkts[i].niov = 2;
                pkts[i].iov[0] = (struct iovec){hdr[i], sizeof(hdr[i])};
                pkts[i].iov[1] = (struct iovec){pattern, 24};
            }
            send_all(a, pkts, k);
            seq += k;
            n = n % 64 + 1;
            if (seq == NPKT) uln_link_stats(a, &out->st); /* before the sentinels */
        } else if (uln_link_flush(a) > 0) {
            /* Held packets wait for a later one: send sentinels (not counted)
             * rather than wait for the delay bound, which a preempted test
             * would reach at a different point each run. */
            hdr[0][0] = MAGIC;
            hdr[0][1] = NPKT + sentinels++;
            pkts[0].iov[0] = (struct iovec){hdr[0], sizeof(hdr[0])};
            send_all(a, pkts, 1);
        } else if (uln_link_wait(b, 100) == 0) {
            quiet = true;
        }
        int r;
        while ((r = uln_link_recv(b, rx, 256)) > 0) {
            for (int i = 0; i < r; i++) {
                uint32_t h[2];
                memcpy(h, rx[i].buf, sizeof(h));
                if (rx[i].len == 32 && h[0] == MAGIC && h[1] >= NPKT && rx[i].peer == 0) {
                    /* a sentinel */
                } else if (rx[i].len != 32 || h[0] != MAGIC || rx[i].peer != 0) {
                    CHECK(!"a fault-injected packet arrived damaged");
                } else {
                    arrivals++;
                    hash = (hash ^ h[1]) * 1099511628211ull;
                    if (!seen[h[1]]++) {
                        distinct++;
                        if ((int64_t)h[1] < top)
                            out->late++;
                        else
                            top = h[1];
                    }
                }
                uln_link_rx_release(b, rx[i].handle);
            }
        }
        if (now_ms() - t0 > 60000) {
            CHECK(!"fault run took over a minute");
            break;
        }
    }
    uln_link_udp_test_hook_sendmmsg(NULL);
    out->drop = NPKT - distinct;
    out->dup = arrivals - distinct;
    out->order_hash = hash;
    uln_link_stats(a, &out->st_end);
    struct uln_link_stats sb;
    uln_link_stats(b, &sb);
    CHECK_EQ(sb.rx_kernel_drops, 0); /* every loss is the injector's */
    free(seen);
    uln_link_close(a);
    uln_link_close(b);
}

/* |measured - expected| within 5 standard deviations of a binomial. */
static bool near(uint64_t k, double n, double p)
{
    double sd = sqrt(n * p * (1 - p));
    return fabs((double)k - n * p) <= 5 * sd + 1;
}

static void test_fault_rates(void)
{
    const double pd = 0.05, pu = 0.03, pr = 0.04;
    /* A delay bound no run reaches: every held packet goes after a later one,
     * so the outcome depends on the sequence of packets alone. */
    const char *spec = "drop=0.05,dup=3%,reorder=0.04,seed=7,delay=10000000";
    struct fault_run r1, r2, r3;
    uint64_t t0 = now_ms();
    fault_run(spec, &r1, false);
    printf("faults %s over %u packets: dropped %llu (%.3f%%), duplicated %llu (%.3f%%), "
           "reordered %llu (%.3f%%), %llu ms\n",
           spec, NPKT, (unsigned long long)r1.drop, 100.0 * r1.drop / NPKT,
           (unsigned long long)r1.dup, 100.0 * r1.dup / NPKT, (unsigned long long)r1.late,
           100.0 * r1.late / NPKT, (unsigned long long)(now_ms() - t0));
    /* The receiver sees exactly what the injector says it did. */
    CHECK_EQ(r1.drop, r1.st.fault_drop);
    CHECK_EQ(r1.late, r1.st.fault_reorder);
    /* duplicates of held packets leave when they do, maybe with the sentinels */
    CHECK(r1.dup >= r1.st.fault_dup && r1.dup <= r1.st_end.fault_dup);
    CHECK_EQ(r1.st_end.fault_late, 0);
    CHECK_EQ(r1.st_end.fault_nohold, 0);
    CHECK(r1.st_end.tx_pkts >= NPKT - r1.drop + r1.dup);
    /* ... and that is what the spec asked for. */
    double kept = NPKT * (1 - pd);
    CHECK(near(r1.drop, NPKT, pd));
    CHECK(near(r1.dup, kept, pu));
    CHECK(near(r1.st.fault_reorder, kept, pr));

    /* Same seed: the same faults, the same arrival order. */
    fault_run(spec, &r2, false);
    CHECK_EQ(r2.drop, r1.drop);
    CHECK_EQ(r2.dup, r1.dup);
    CHECK_EQ(r2.late, r1.late);
    CHECK_EQ(r2.order_hash, r1.order_hash);
    /* Another seed: other faults. */
    fault_run("drop=0.05,dup=3%,reorder=0.04,seed=8,delay=10000000", &r3, false);
    CHECK(r3.order_hash != r1.order_hash);
    CHECK(near(r3.drop, NPKT, pd));
    /* Same seed, sends cut short all the time and without GSO: still the
     * same faults and the same sequence on the wire (decisions are undone and
     * replayed; GSO runs keep their packets' order). */
    struct fault_run r4;
    fault_run(spec, &r4, true);
    CHECK(r4.st_end.tx_again > 1000);
    CHECK_EQ(r4.drop, r1.drop);
    CHECK_EQ(r4.dup, r1.dup);
    CHECK_EQ(r4.late, r1.late);
    CHECK_EQ(r4.st.fault_reorder, r1.st.fault_reorder);
    CHECK_EQ(r4.st_end.fault_dup, r1.st_end.fault_dup);
    CHECK_EQ(r4.order_hash, r1.order_hash);
    printf("cut short %llu times: same faults, same order: %s\n",
           (unsigned long long)r4.st_end.tx_again, r4.order_hash == r1.order_hash ? "yes" : "NO");
}

/* Reorder's delay bound and its hold slots. */
static void test_fault_hold(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, "reorder=1,delay=200000");
    struct uln_link *b = open_io("127.0.0.1", 0, 0, false, NULL);
    if (!a || !b) return;
    int peer = link_to(a, b);
    uint32_t v[20];
    struct uln_link_pkt pkts[20];
    for (uint32_t i = 0; i < 20; i++) {
        v[i] = i;
        pkts[i] = (struct uln_link_pkt){.peer = peer, .niov = 1, .iov = {{&v[i], 4}}};
    }
    /* Every packet is picked for reordering: 0..15 fill the hold slots, 16
     * finds none free, goes, and takes the held ones with it (they were
     * waiting for a later packet to that peer). Their slots are free again
     * only from the next batch on (the batch's messages point into them), so
     * 17..19 go in order too. */
    send_all(a, pkts, 20);
    struct uln_link_rx rx[20];
    unsigned got = recv_n(b, rx, 20, 5);
    CHECK_EQ(got, 20);
    for (unsigned i = 0; i < got; i++) {
        uint32_t x;
        memcpy(&x, rx[i].buf, 4);
        CHECK_EQ(x, i == 0 ? 16 : i <= 16 ? i - 1 : i);
        uln_link_rx_release(b, rx[i].handle);
    }
    struct uln_link_stats st;
    uln_link_stats(a, &st);
    CHECK_EQ(st.fault_reorder, 16);
    CHECK_EQ(st.fault_nohold, 4);
    CHECK_EQ(st.fault_late, 0);

    /* Nothing later to that peer: held packets leave at the delay bound
     * (200 ms: far beyond any hiccup between the send and the checks). */
    uint64_t t0 = now_ms();
    send_all(a, pkts, 3);
    CHECK_EQ(uln_link_flush(a), 3); /* not yet due */
    CHECK_EQ(recv_n(b, rx, 3, 5), 0);
    got = 0;
    while (got < 3 && now_ms() - t0 < 3000) {
        uln_link_wait(a, 1000); /* wakes at the bound, releases */
        got += recv_n(b, rx + got, 3 - got, 1);
    }
    uint64_t waited = now_ms() - t0;
    CHECK_EQ(got, 3);
    CHECK(waited >= 200 && waited < 2000);
    for (unsigned i = 0; i < got; i++) {
        uint32_t x;
        memcpy(&x, rx[i].buf, 4);
        CHECK_EQ(x, i); /* released oldest first */
        uln_link_rx_release(b, rx[i].handle);
    }
    uln_link_stats(a, &st);
    CHECK_EQ(st.fault_reorder, 19);
    CHECK_EQ(st.fault_late, 3);
    CHECK_EQ(uln_link_flush(a), 0);
    uln_link_close(a);
    uln_link_close(b);

    /* drop=1 sends nothing and says so */
    a = open_io("127.0.0.1", 0, 0, false, "drop=100%");
    b = open_io("127.0.0.1", 0, 0, false, NULL);
    peer = link_to(a, b);
    CHECK_EQ(uln_link_send(a, pkts, 20), 20);
    CHECK_EQ(recv_n(b, rx, 20, 20), 0);
    uln_link_stats(a, &st);
    CHECK(st.fault_drop == 20 && st.tx_pkts == 0);
    uln_link_close(a);
    uln_link_close(b);
}

/* ------------------------------------------------------------------------- */
/* Receiving with GRO                                                         */
/* ------------------------------------------------------------------------- */

/* Would a sleeper on the link's descriptors (all of them, as uln_cq_wait
 * polls them) wake now? */
static bool readable(struct uln_link *io)
{
    int fds[ULN_LINK_FDS_MAX];
    struct pollfd p[ULN_LINK_FDS_MAX];
    int n = uln_link_fds(io, fds, ULN_LINK_FDS_MAX);
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    return n > 0 && poll(p, (nfds_t)n, 0) >= 1;
}

/* Receive n datagrams asking for at most m per call; false if they did not
 * all come within a second. */
static bool recv_by(struct uln_link *io, struct uln_link_rx *rx, unsigned n, unsigned m)
{
    unsigned got = 0;
    uint64_t t0 = now_ms();
    while (got < n && now_ms() - t0 < 1000) {
        int r = uln_link_recv(io, rx + got, n - got < m ? n - got : m);
        CHECK(r >= 0 && (unsigned)r <= m);
        if (r < 0) return false;
        got += (unsigned)r;
        if (r == 0) uln_link_wait(io, 10);
    }
    CHECK_EQ(got, n);
    return got == n;
}

/* GSO runs of every size, read with every max per call: each run is one
 * read, its datagrams lent where they lie (back to back in one buffer), in
 * order, intact, each once; what does not fit max waits for the next call,
 * and the fd stays readable meanwhile. one_peer: the same with b's socket
 * connected to a (cfg one_peer), whose wake-up is then an eventfd among its
 * fds - and a stranger's datagram never reaches it. */
static void test_gro_runs(bool one_peer)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link_udp_cfg cb = {.addr = "127.0.0.1", .one_peer = one_peer};
    struct uln_link *b = NULL;
    CHECK_EQ(uln_link_udp_open(&cb, &b), 0);
    if (!a || !b) return;
    struct uln_link_info info;
    uln_link_info(b, &info);
    CHECK(info.gro && info.gso);
    CHECK(info.gro_bufs >= ULN_LINK_UDP_GRO_BUFS_MIN);
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    int bfds[ULN_LINK_FDS_MAX];
    CHECK_EQ(uln_link_fds(b, bfds, ULN_LINK_FDS_MAX), one_peer ? 2 : 1);
    unsigned pmax = uln_link_payload_max(b);
    const uint32_t sizes[] = {16, 17, 100, 999, 1472, 4000, 8000, pmax};
    const unsigned maxes[] = {64, 1, 3, 7, 2, 33, 64, 5};
    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][ULN_LINK_UDP_MTU_CAP];
    static struct uln_link_rx rx[64];
    uint32_t seq = 0;
    unsigned runs = 0, segs = 0, bad = 0, apart = 0;
    for (unsigned z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        for (int tail = 0; tail < 2; tail++) {
            uint32_t size = sizes[z];
            unsigned n = 65000u / size < 64 ? 65000u / size : 64;
            for (unsigned i = 0; i < n; i++)
                make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i,
                         tail && i == n - 1 ? size / 2 + 8 : size, 1 + i % 3);
            send_all(a, pkts, n);
            unsigned m = maxes[(z + tail) % 8];
            if (!recv_by(b, rx, n, m)) break;
            for (unsigned i = 0; i < n; i++) {
                struct thdr h;
                if (!pkt_ok(&rx[i], &h) || h.seq != seq + i || rx[i].peer != 0) bad++;
                /* lent from the read's buffer, not copied */
                if (i && rx[i].buf != rx[i - 1].buf + size) apart++;
            }
            if (m < n) {
                /* Datagrams waited in the io: the socket was kept readable,
                 * and is not once they are all out and the wake-up is read. */
                CHECK_EQ(recv_n(b, rx + n, 1, 0), 0);
                CHECK(!readable(b));
            }
            for (unsigned i = n; i-- > 0;)
                CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
            runs += n > 1;
            segs += n;
            seq += n;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(apart, 0);
    /* max 1 on a run of 64: each call hands out one, the fd stays readable */
    for (unsigned i = 0; i < 64; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 500, 2);
    send_all(a, pkts, 64);
    CHECK(readable(b));
    unsigned got = 0, sleepy = 0;
    for (unsigned i = 0; i < 64; i++) {
        if (!readable(b)) sleepy++;
        int r = uln_link_recv(b, rx + i, 1);
        CHECK_EQ(r, 1);
        if (r != 1) break;
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == seq + i);
        got++;
    }
    CHECK_EQ(sleepy, 0);
    CHECK_EQ(uln_link_recv(b, rx + 63, 1), 0);
    CHECK(!readable(b));
    for (unsigned i = 0; i < got; i++)
        CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
    runs++;
    segs += 64;
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_msgs, runs);
    CHECK_EQ(st.rx_gro_segs, segs);
    CHECK_EQ(st.rx_pkts, segs);
    CHECK_EQ(st.rx_copied, 0);
    CHECK(st.rx_wakes >= 1);
    CHECK_EQ(st.rx_trunc + st.rx_bad_release + st.rx_unknown + st.rx_kernel_drops, 0);
    if (one_peer) {
        /* From a socket b is not connected to: the kernel drops it. */
        struct sockaddr_storage ss;
        socklen_t l;
        CHECK_EQ(uln_link_local(b, &ss, &l), 0);
        int s = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        CHECK(s >= 0 && sendto(s, "stranger", 8, 0, (struct sockaddr *)&ss, l) == 8);
        close(s);
        CHECK_EQ(recv_n(b, rx, 1, 50), 0);
        CHECK(!readable(b));
    }
    printf("gro runs%s: %u datagrams in %llu reads (%llu recvmmsg calls), %llu wake-ups\n",
           one_peer ? " (connected)" : "", segs, (unsigned long long)st.rx_gro_msgs,
           (unsigned long long)st.rx_calls, (unsigned long long)st.rx_wakes);
    uln_link_close(a);
    uln_link_close(b);
}

/* Four landing buffers (glow 1) and a pool of 2: datagrams of a read are
 * released in any order, and its buffer is read into again only when the last
 * is back; lending stops while one buffer is left, then copies fill the pool,
 * then lending goes on regardless until none is left; bad releases refused. */
static void test_gro_pool(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    uln_link_udp_test_hook_gro_bufs(4);
    struct uln_link *b = open_io("127.0.0.1", 0, 2, false, NULL);
    uln_link_udp_test_hook_gro_bufs(0);
    if (!a || !b) return;
    struct uln_link_info info;
    uln_link_info(b, &info);
    CHECK(info.gro && info.gro_bufs == 4);
    int peer = link_to(a, b);
    struct sockaddr_storage as;
    socklen_t al;
    uln_link_local(a, &as, &al);
    static struct uln_link_pkt pkts[10];
    static struct thdr hdrs[10];
    static uint8_t flat[10][1024];
    static struct uln_link_rx rx[80];
    uint32_t seq = 0;
    /* runs A, B, C, D of 10 x 1000 */
    for (unsigned r = 0; r < 4; r++) {
        for (unsigned i = 0; i < 10; i++)
            make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 1000, 2);
        send_all(a, pkts, 10);
        seq += 10;
    }
    if (!recv_by(b, rx, 40, 64)) return;
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_msgs, 4);
    CHECK_EQ(st.rx_copied, 2); /* D: copies while the pool lasts, then lent */
    for (unsigned i = 0; i < 40; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == i);
        bool copied = i == 30 || i == 31;
        if (i % 10 && !copied && i != 32) CHECK(rx[i].buf == rx[i - 1].buf + 1000);
    }
    /* E: no landing buffer is free */
    for (unsigned i = 0; i < 10; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 1000, 2);
    send_all(a, pkts, 10);
    CHECK_EQ(uln_link_recv(b, rx + 40, 10), 0);
    uln_link_stats(b, &st);
    uint64_t dry = st.rx_pool_empty;
    CHECK(dry >= 1);
    /* A's datagrams back out of order, all but #4: still nothing to read into */
    const unsigned order[9] = {7, 2, 9, 0, 5, 3, 8, 1, 6};
    for (unsigned i = 0; i < 9; i++) {
        CHECK_EQ(uln_link_rx_release(b, rx[order[i]].handle), 0);
        CHECK(uln_link_rx_addr(b, rx[order[i]].handle, NULL) == NULL);
        CHECK_EQ(uln_link_recv(b, rx + 40, 10), 0);
    }
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_pool_empty, dry + 9);
    CHECK_EQ(uln_link_rx_release(b, rx[7].handle), -EINVAL); /* twice */
    socklen_t sl;
    const struct sockaddr *src = uln_link_rx_addr(b, rx[4].handle, &sl);
    CHECK(src && sl == al &&
          ((const struct sockaddr_in *)src)->sin_port ==
              ((const struct sockaddr_in *)&as)->sin_port);
    /* what is still lent is untouched */
    for (unsigned i = 10; i < 40; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == i);
    }
    CHECK(pkt_ok(&rx[4], NULL));
    /* the last of A: its buffer takes E */
    uint8_t *a_buf = rx[0].buf;
    CHECK_EQ(uln_link_rx_release(b, rx[4].handle), 0);
    if (!recv_by(b, rx + 40, 10, 10)) return;
    CHECK(rx[40].buf == a_buf);
    for (unsigned i = 40; i < 50; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == i);
    }
    /* everything back, in reverse; then bad handles of every kind */
    for (unsigned i = 50; i-- > 10;)
        CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
    CHECK_EQ(uln_link_rx_release(b, rx[43].handle), -EINVAL);
    CHECK_EQ(uln_link_rx_release(b, rx[30].handle), -EINVAL); /* a copy, twice */
    CHECK_EQ(uln_link_rx_release(b, 0x80000000u | (999u << 8)), -EINVAL);
    CHECK_EQ(uln_link_rx_release(b, 0x80000000u | (1u << 8) | 200u), -EINVAL);
    CHECK_EQ(uln_link_rx_release(b, 9999), -EINVAL);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_bad_release, 6);
    /* the pool is whole again: the same four runs go the same way */
    uint64_t copied = st.rx_copied;
    seq = 50;
    for (unsigned r = 0; r < 4; r++) {
        for (unsigned i = 0; i < 10; i++)
            make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 1000, 2);
        send_all(a, pkts, 10);
        seq += 10;
    }
    if (!recv_by(b, rx, 40, 7)) return;
    for (unsigned i = 0; i < 40; i++) {
        struct thdr h;
        CHECK(pkt_ok(&rx[i], &h) && h.seq == 50 + i);
        CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
    }
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_copied, copied + 2);
    CHECK_EQ(st.rx_pkts, 90);
    CHECK_EQ(st.rx_gro_msgs, 9);
    uln_link_close(a);
    uln_link_close(b);
}

/* xorshift for the mixed stream */
static uint32_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

/* Two senders, runs and lone datagrams of every size mixed, random max per
 * call, and the receiver keeping up to 300 datagrams for a while, as the
 * transport keeps packets ahead of order: with 8 landing buffers that forces
 * copies and pool-dry spells. Every datagram arrives once, in order, and is
 * intact when it is finally released. */
static void test_gro_mixed(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link *c = open_io("127.0.0.1", 0, 0, false, NULL);
    uln_link_udp_test_hook_gro_bufs(8);
    struct uln_link *b = open_io("127.0.0.1", 0, 256, false, NULL);
    uln_link_udp_test_hook_gro_bufs(0);
    if (!a || !b || !c) return;
    int pa = link_to(a, b), pc = link_to(c, b);
    CHECK_EQ(link_to(b, a), 0);
    CHECK_EQ(link_to(b, c), 1);
    unsigned pmax = uln_link_payload_max(b);
    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][ULN_LINK_UDP_MTU_CAP];
    static struct uln_link_rx rx[64], kept[300];
    unsigned nkept = 0, bad = 0, missing = 0, dry_spells = 0;
    uint64_t r = 88172645463325252ull, total = 0;
    uint32_t seq = 0;
    for (unsigned it = 0; it < 1500; it++) {
        bool from_c = it % 2;
        unsigned n = 1 + rnd(&r) % 64, i = 0;
        while (i < n) {
            /* a run of 1..20 of one size, maybe a shorter tail */
            unsigned run = 1 + rnd(&r) % 20;
            uint32_t size = 16 + rnd(&r) % (rnd(&r) % 4 ? 1500 : pmax - 16);
            for (unsigned k = 0; k < run && i < n; k++, i++) {
                uint32_t len = k == run - 1 && rnd(&r) % 2 ? 16 + size / 3 : size;
                make_pkt(&pkts[i], from_c ? pc : pa, &hdrs[i], flat[i], seq + i, len,
                         1 + rnd(&r) % 3);
            }
        }
        send_all(from_c ? c : a, pkts, n);
        unsigned got = 0;
        uint64_t t0 = now_ms();
        while (got < n && now_ms() - t0 < 2000) {
            unsigned m = 1 + rnd(&r) % 64;
            int k = uln_link_recv(b, rx, m < n - got ? m : n - got);
            CHECK(k >= 0);
            if (k < 0) break;
            if (k == 0) {
                struct uln_link_stats st;
                uln_link_stats(b, &st);
                if (nkept && st.rx_pool_empty > dry_spells) {
                    /* dry: give back the oldest kept half, as a transport
                     * would once the gap before them is filled */
                    dry_spells = (unsigned)st.rx_pool_empty;
                    unsigned h = (nkept + 1) / 2;
                    for (unsigned j = 0; j < h; j++) {
                        if (!pkt_ok(&kept[j], NULL)) bad++;
                        CHECK_EQ(uln_link_rx_release(b, kept[j].handle), 0);
                    }
                    memmove(kept, kept + h, (nkept - h) * sizeof(kept[0]));
                    nkept -= h;
                } else {
                    uln_link_wait(b, 10);
                }
                continue;
            }
            for (int j = 0; j < k; j++) {
                struct thdr h;
                if (!pkt_ok(&rx[j], &h) || h.seq != seq + got + (unsigned)j ||
                    rx[j].peer != (from_c ? 1 : 0))
                    bad++;
                if (nkept < 300 && rnd(&r) % 3 == 0) {
                    kept[nkept++] = rx[j];
                } else {
                    CHECK_EQ(uln_link_rx_release(b, rx[j].handle), 0);
                }
            }
            got += (unsigned)k;
        }
        missing += n - got;
        seq += n;
        total += n;
        /* now and then the kept ones go back, in random order */
        if (rnd(&r) % 8 == 0) {
            while (nkept) {
                unsigned j = rnd(&r) % nkept;
                if (!pkt_ok(&kept[j], NULL)) bad++;
                CHECK_EQ(uln_link_rx_release(b, kept[j].handle), 0);
                kept[j] = kept[--nkept];
            }
        }
    }
    for (unsigned j = 0; j < nkept; j++) {
        if (!pkt_ok(&kept[j], NULL)) bad++;
        CHECK_EQ(uln_link_rx_release(b, kept[j].handle), 0);
    }
    CHECK_EQ(missing, 0);
    CHECK_EQ(bad, 0);
    CHECK_EQ(recv_n(b, rx, 1, 20), 0); /* nothing extra */
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_pkts, total);
    CHECK(st.rx_gro_msgs > 0 && st.rx_copied > 0);
    CHECK_EQ(st.rx_trunc + st.rx_bad_release + st.rx_kernel_drops, 0);
    printf("gro mixed: %llu datagrams, %llu GRO reads of %llu, %llu copied, %llu dry spells, "
           "%llu wake-ups\n",
           (unsigned long long)total, (unsigned long long)st.rx_gro_msgs,
           (unsigned long long)st.rx_gro_segs, (unsigned long long)st.rx_copied,
           (unsigned long long)st.rx_pool_empty, (unsigned long long)st.rx_wakes);
    uln_link_close(a);
    uln_link_close(b);
    uln_link_close(c);
}

/* A GSO run from a plain socket not in the peer table: each datagram has its
 * source; a run whose segment size is over payload_max loses the datagrams
 * that are, not a shorter last one. */
static void test_gro_edges(void)
{
    struct uln_link *b = open_io("127.0.0.1", 1000, 0, false, NULL);
    if (!b) return;
    struct sockaddr_in bsa;
    socklen_t bl = sizeof(bsa);
    uln_link_local(b, (struct sockaddr_storage *)&bsa, &bl);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(s, (struct sockaddr *)&lo, sizeof(lo)), 0);
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    getsockname(s, (struct sockaddr *)&me, &ml);
    static uint8_t buf[8192];
    for (unsigned i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i / 300 + 1);
    /* (segment size, total): 5 x 300; 2000 + 2000 + 500 */
    const uint16_t segsz[2] = {300, 2000};
    const size_t tot[2] = {1500, 4500};
    for (int k = 0; k < 2; k++) {
        struct iovec iov = {buf, tot[k]};
        union {
            char b[CMSG_SPACE(sizeof(uint16_t))];
            struct cmsghdr align;
        } ctl;
        struct msghdr m = {.msg_name = &bsa,
                           .msg_namelen = bl,
                           .msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl.b,
                           .msg_controllen = sizeof(ctl.b)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        memcpy(CMSG_DATA(cm), &segsz[k], sizeof(segsz[k]));
        CHECK_EQ(sendmsg(s, &m, 0), (ssize_t)tot[k]);
    }
    struct uln_link_rx rx[8];
    if (!recv_by(b, rx, 6, 8)) return;
    for (unsigned i = 0; i < 6; i++) {
        uint32_t want = i < 5 ? 300 : 500;
        CHECK_EQ(rx[i].len, want);
        CHECK_EQ(rx[i].peer, -1);
        uint32_t off = i < 5 ? i * 300 : 4000; /* where it was in the sender's buffer */
        CHECK(rx[i].buf[0] == buf[off] && rx[i].buf[want - 1] == buf[off + want - 1]);
        socklen_t l;
        const struct sockaddr_in *src =
            (const struct sockaddr_in *)uln_link_rx_addr(b, rx[i].handle, &l);
        CHECK(src && l == sizeof(me) && src->sin_port == me.sin_port);
    }
    for (unsigned i = 0; i < 6; i++)
        CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
    CHECK(uln_link_rx_addr(b, rx[2].handle, NULL) == NULL);
    CHECK_EQ(recv_n(b, rx, 1, 20), 0);
    struct uln_link_stats st;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_trunc, 2);
    CHECK_EQ(st.rx_unknown, 6);
    CHECK_EQ(st.rx_gro_msgs, 2);
    CHECK_EQ(st.rx_gro_segs, 8);
    close(s);
    uln_link_close(b);
}

/* The latency path (src/link/udp: send_lone, recv_cold): a packet sent alone
 * goes by sendto, gathered from its pieces (up to LONE_COPY_MAX) or straight
 * from one; a plain socket found empty is read next by recvfrom, one
 * datagram, and a burst after it by recvmmsg again. Alone or in bursts, cut
 * (too long: counted, dropped) or whole, every datagram comes intact, in
 * order, once, with its source. */
static void test_lone(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link *b = open_io2("127.0.0.1", 1000, 0, false, NULL, true);
    if (!a || !b) return;
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    unsigned pmax = uln_link_payload_max(b);
    static struct uln_link_pkt pkts[40];
    static struct thdr hdrs[40];
    static uint8_t flat[40][2048];
    static struct uln_link_rx rx[40];
    uint32_t seq = 0;
    unsigned bad = 0, sent = 0, cut = 0, lone = 0, bursts = 0;
    struct uln_link_stats sa0, sa, sb;
    uln_link_stats(a, &sa0);
    for (unsigned round = 0; round < 24; round++) {
        /* alone: one to three pieces, small or up to the largest, or too long */
        uint32_t len = round % 6 == 5 ? pmax + 1 + round : round % 3 == 2 ? pmax : 20 + round;
        make_pkt(&pkts[0], peer, &hdrs[0], flat[0], seq, len, 1 + round % 3);
        send_all(a, pkts, 1);
        sent++;
        lone += pkts[0].niov == 1 || len <= 512; /* else gathered by sendmmsg */
        if (len > pmax) {                        /* b drops it; the next alone one comes */
            cut++;
            seq++;
            continue;
        }
        if (!recv_by(b, rx, 1, 1)) return;
        struct thdr h;
        if (!pkt_ok(&rx[0], &h) || h.seq != seq || rx[0].peer != 0 || rx[0].len != len) bad++;
        socklen_t l;
        CHECK(uln_link_rx_addr(b, rx[0].handle, &l) != NULL && l > 0);
        CHECK_EQ(uln_link_rx_release(b, rx[0].handle), 0);
        seq++;
        if (round % 4 != 3) continue;
        /* a burst after it: all of it, in order */
        CHECK_EQ(recv_n(b, rx, 1, 0), 0); /* empty: the next read is the cheap one */
        for (unsigned i = 0; i < 40; i++)
            make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 100 + i, 1 + i % 3);
        send_all(a, pkts, 40);
        sent += 40;
        bursts++;
        if (!recv_by(b, rx, 40, 40)) return;
        for (unsigned i = 0; i < 40; i++) {
            if (!pkt_ok(&rx[i], &h) || h.seq != seq + i) bad++;
            CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
        }
        seq += 40;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(recv_n(b, rx, 1, 20), 0);
    uln_link_stats(a, &sa);
    uln_link_stats(b, &sb);
    CHECK_EQ(sa.tx_pkts - sa0.tx_pkts, sent);
    CHECK_EQ(sa.tx_lone - sa0.tx_lone, lone);
    /* each burst's first datagram at least came by the read after an empty one */
    CHECK(sb.rx_cold >= bursts && sb.rx_cold < sent - cut);
    CHECK_EQ(sb.rx_pkts, sent - cut);
    CHECK_EQ(sb.rx_trunc, cut);
    CHECK_EQ(sb.rx_unknown + sb.rx_bad_release + sb.rx_kernel_drops + sa.tx_err, 0);
    uln_link_close(a);
    uln_link_close(b);
}

/* The test packets' own word on a datagram's length (struct thdr's len), as
 * the UDP transport's headers give theirs: what cuts a GRO run read by recvfrom. */
static uint32_t thdr_len(const uint8_t *buf, uint32_t avail)
{
    struct thdr h;
    if (avail < sizeof h) return 0;
    memcpy(&h, buf, sizeof h);
    return h.magic == MAGIC && h.len >= sizeof h && h.len <= avail ? h.len : 0;
}

/* A run of n datagrams of size bytes (the last tail bytes; 0: size), one GSO
 * message when it fits 64 KiB, sent to a socket whose last read found it
 * empty. */
static void cold_run(struct uln_link *a, int peer, struct uln_link *b, uint32_t seq, unsigned n,
                     uint32_t size, uint32_t tail)
{
    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][ULN_LINK_UDP_MTU_CAP];
    struct uln_link_rx rx[1];
    CHECK_EQ(uln_link_recv(b, rx, 1), 0); /* empty: the next read is recvfrom */
    for (unsigned i = 0; i < n; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, tail && i == n - 1 ? tail : size,
                 1 + i % 3);
    send_all(a, pkts, n);
}

/* n datagrams of size bytes, datagram liar's header saying says, to a cold
 * socket: they come as one datagram of n x size bytes, uncut. */
static void cold_liar(struct uln_link *a, int peer, struct uln_link *b, uint32_t seq, unsigned n,
                      uint32_t size, unsigned liar, uint32_t says)
{
    static struct uln_link_pkt p[4];
    static struct thdr hd[4];
    static uint8_t fl[4][600];
    struct uln_link_rx rx[1];
    CHECK_EQ(uln_link_recv(b, rx, 1), 0);
    for (unsigned i = 0; i < n; i++)
        make_pkt(&p[i], peer, &hd[i], fl[i], seq + i, size, 1);
    hd[liar].len = says;
    memcpy(fl[liar], &hd[liar], sizeof hd[liar]);
    send_all(a, p, n);
    if (recv_by(b, rx, 1, 64)) {
        CHECK_EQ(rx[0].len, n * size);
        CHECK_EQ(uln_link_rx_release(b, rx[0].handle), 0);
    }
}

/* With the caller's dgram_len, the read after an empty one is a recvfrom
 * even with GRO on: runs cut where the headers say, each datagram intact, in
 * order, lent where it lies; a datagram whose header says less than it
 * holds, or a run one of whose datagrams does, is handed over whole and
 * never cut into a packet and a runt. */
static void test_gro_cold(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link_udp_cfg c = {.addr = "127.0.0.1", .dgram_len = thdr_len};
    struct uln_link *b = NULL;
    CHECK_EQ(uln_link_udp_open(&c, &b), 0);
    if (!a || !b) return;
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    static struct uln_link_rx rx[64];
    struct uln_link_stats s0, st;
    uln_link_stats(b, &s0);
    const uint32_t sizes[] = {16, 100, 1472, 4000};
    uint32_t seq = 0;
    unsigned bad = 0, apart = 0, runs = 0, reads = 0;
    for (unsigned z = 0; z < 4; z++)
        for (unsigned n = 1; n <= 40 && n * sizes[z] <= 65000u; n += 13) {
            uint32_t tail = n > 1 && z % 2 ? sizes[z] / 2 + 8 : 0;
            cold_run(a, peer, b, seq, n, sizes[z], tail);
            if (!recv_by(b, rx, n, 64)) break;
            for (unsigned i = 0; i < n; i++) {
                struct thdr h;
                if (!pkt_ok(&rx[i], &h) || h.seq != seq + i || rx[i].peer != 0) bad++;
                if (i && rx[i].buf != rx[i - 1].buf + sizes[z]) apart++;
            }
            for (unsigned i = 0; i < n; i++)
                CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
            runs += n > 1;
            reads++;
            seq += n;
        }
    CHECK_EQ(bad, 0);
    CHECK_EQ(apart, 0);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_cold - s0.rx_cold, reads);
    CHECK_EQ(st.rx_gro_msgs - s0.rx_gro_msgs, runs);

    /* A lone 200-byte datagram whose header says 100: one datagram of 200. */
    cold_liar(a, peer, b, seq, 1, 200, 0, 100);
    /* A run of four 500-byte datagrams, the third saying 400: one of 2000. */
    cold_liar(a, peer, b, seq + 1, 4, 500, 2, 400);
    CHECK_EQ(recv_n(b, rx, 1, 20), 0);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_trunc + st.rx_bad_release + st.rx_unknown + st.rx_kernel_drops, 0);
    printf("gro cold: %u reads by recvfrom, %u of them runs\n", reads, runs);
    uln_link_close(a);
    uln_link_close(b);
}

/* GRO off: by no_gro (ULN_UDP_GRO=0), or faults; then a GSO run comes as
 * datagrams each in its own pool buffer, as before GRO. Receive memory as
 * documented. */
static void test_gro_off(void)
{
    struct uln_link_info info;
    struct uln_link *io;
    struct uln_link_udp_cfg c = {.addr = "127.0.0.1", .mtu = 1500};
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    uln_link_info(io, &info);
    CHECK(info.gro && info.gro_bufs == 116);
    CHECK(info.rx_mem <= ULN_LINK_UDP_RX_MEM &&
          info.rx_mem > ULN_LINK_UDP_RX_MEM - (1u << 16) - 4096);
    uln_link_close(io);
    c.mtu = 0; /* loopback: 9000 */
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    uln_link_info(io, &info);
    CHECK(info.gro && info.gro_bufs == 57 && info.rx_mem <= ULN_LINK_UDP_RX_MEM);
    uln_link_close(io);
    c.rx_bufs = 4096; /* a pool past the aim: the fewest landing buffers on top */
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    uln_link_info(io, &info);
    CHECK(info.gro && info.gro_bufs == ULN_LINK_UDP_GRO_BUFS_MIN);
    uln_link_close(io);
    c.rx_bufs = 0;

    c.no_gro = true;
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    uln_link_info(io, &info);
    CHECK(!info.gro);
    uln_link_close(io);
    c.no_gro = false;
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    uln_link_info(io, &info);
    CHECK(info.gro);
    uln_link_close(io);
    char why[128];
    CHECK_EQ(uln_link_udp_open(&c, &io), 0);
    CHECK_EQ(uln_link_fault_wrap("drop=0.01", &io, why, sizeof(why)), 0);
    uln_link_info(io, &info);
    CHECK(info.fault && info.gro && info.gso && info.gro_bufs > 0); /* faults keep offloads */
    uln_link_close(io);
    c.no_gro = true;
    struct uln_link *b;
    CHECK_EQ(uln_link_udp_open(&c, &b), 0);
    c.no_gro = false;
    uln_link_info(b, &info);
    CHECK(!info.gro && info.gro_bufs == 0);
    CHECK_EQ(info.rx_mem, (512u * ((info.payload_max + 63u) & ~63u) + 4095u) & ~4095u);

    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    if (!a) return;
    int peer = link_to(a, b);
    static struct uln_link_pkt pkts[40];
    static struct thdr hdrs[40];
    static uint8_t flat[40][1024];
    for (unsigned i = 0; i < 40; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], i, 1000, 2);
    send_all(a, pkts, 40);
    static struct uln_link_rx rx[40];
    if (recv_by(b, rx, 40, 64)) {
        unsigned pmax = uln_link_payload_max(b);
        for (unsigned i = 0; i < 40; i++) {
            struct thdr h;
            CHECK(pkt_ok(&rx[i], &h) && h.seq == i);
            /* each has a pool buffer of payload_max to itself */
            for (unsigned j = 0; j < i; j++)
                CHECK(rx[i].buf >= rx[j].buf + pmax || rx[j].buf >= rx[i].buf + pmax);
            CHECK(rx[i].handle < 512);
            CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
        }
    }
    struct uln_link_stats sa, sb;
    uln_link_stats(a, &sa);
    uln_link_stats(b, &sb);
    CHECK_EQ(sa.tx_gso_msgs, 1);
    CHECK_EQ(sb.rx_gro_msgs + sb.rx_gro_segs + sb.rx_copied + sb.rx_wakes, 0);
    CHECK_EQ(sb.rx_pkts, 40);
    uln_link_close(a);
    uln_link_close(b);
}

/* n datagrams of size bytes from a to b (one GSO run where they fit) and
 * back out of b asking for up to m a call: each intact, in order, once. */
static unsigned switch_run(struct uln_link *a, int peer, struct uln_link *b, uint32_t *seq,
                           unsigned n, uint32_t size, unsigned m)
{
    static struct uln_link_pkt pkts[64];
    static struct thdr hdrs[64];
    static uint8_t flat[64][ULN_LINK_UDP_MTU_CAP];
    static struct uln_link_rx rx[64];
    for (unsigned i = 0; i < n; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], *seq + i, size, 1 + i % 3);
    send_all(a, pkts, n);
    unsigned bad = 0;
    if (recv_by(b, rx, n, m))
        for (unsigned i = 0; i < n; i++) {
            struct thdr h;
            if (!pkt_ok(&rx[i], &h) || h.seq != *seq + i || rx[i].peer != 0) bad++;
            CHECK_EQ(uln_link_rx_release(b, rx[i].handle), 0);
        }
    *seq += n;
    return bad;
}

/* UDP_GRO goes off on the socket after a long row of lone datagrams (it
 * costs each one latency in the kernel) and on again at a burst: lone
 * datagrams, then a run, then runs again, all intact, in order, once; a run
 * queued while the option was on and read after it went off is cut by the
 * headers, not lost. */
static void test_gro_switch(void)
{
    struct uln_link *a = open_io("127.0.0.1", 0, 0, false, NULL);
    struct uln_link_udp_cfg c = {.addr = "127.0.0.1", .dgram_len = thdr_len};
    struct uln_link *b = NULL;
    CHECK_EQ(uln_link_udp_open(&c, &b), 0);
    if (!a || !b) return;
    int peer = link_to(a, b);
    CHECK_EQ(link_to(b, a), 0);
    struct uln_link_stats st;
    static struct uln_link_rx rx[1];
    uint32_t seq = 0;
    unsigned bad = 0;
    for (unsigned i = 0; i < 300; i++)
        bad += switch_run(a, peer, b, &seq, 1, 100, 64);
    CHECK_EQ(uln_link_recv(b, rx, 1), 0); /* found empty: reads leave the landing buffers */
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_off, 1);
    CHECK_EQ(st.rx_gro_on, 0);
    /* A run: the kernel cuts it at the socket now; the burst turns GRO on. */
    bad += switch_run(a, peer, b, &seq, 40, 1000, 64);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_on, 1);
    uint64_t runs = st.rx_gro_msgs;
    bad += switch_run(a, peer, b, &seq, 40, 1000, 64);
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_msgs, runs + 1); /* one read again */

    /* Off while a run waits in the socket, read whole without the kernel's
     * segment size: 255 lone reads, then one lone datagram and a run sent
     * before the read that turns the option off. */
    for (unsigned i = 0; i < 255; i++)
        bad += switch_run(a, peer, b, &seq, 1, 100, 64);
    static struct uln_link_pkt pkts[41];
    static struct thdr hdrs[41];
    static uint8_t flat[41][ULN_LINK_UDP_MTU_CAP];
    static struct uln_link_rx rr[41];
    make_pkt(&pkts[0], peer, &hdrs[0], flat[0], seq, 100, 1);
    send_all(a, pkts, 1);
    for (unsigned i = 1; i < 41; i++)
        make_pkt(&pkts[i], peer, &hdrs[i], flat[i], seq + i, 1000, 1);
    send_all(a, pkts + 1, 40);
    if (recv_by(b, rr, 41, 1))
        for (unsigned i = 0; i < 41; i++) {
            struct thdr h;
            if (!pkt_ok(&rr[i], &h) || h.seq != seq + i) bad++;
            CHECK_EQ(uln_link_rx_release(b, rr[i].handle), 0);
        }
    seq += 41;
    uln_link_stats(b, &st);
    CHECK_EQ(st.rx_gro_off, 2);
    CHECK_EQ(bad, 0);
    CHECK_EQ(st.rx_pkts, seq);
    CHECK_EQ(st.rx_trunc + st.rx_bad_release + st.rx_unknown + st.rx_kernel_drops, 0);
    printf("gro switch: %u datagrams, GRO off %llu times, on %llu\n", seq,
           (unsigned long long)st.rx_gro_off, (unsigned long long)st.rx_gro_on);
    uln_link_close(a);
    uln_link_close(b);
}

int main(int argc, char **argv)
{
    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (uint8_t)(i * 131u + (i >> 8) * 7u + 1u);
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they happen, under ctest too */
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name, call)                                                                            \
    do {                                                                                           \
        if (!only || !strcmp(only, name)) {                                                        \
            uint64_t t_ = now_ms();                                                                \
            int f_ = failed;                                                                       \
            call;                                                                                  \
            printf("%-12s %s (%llu ms)\n", name, failed == f_ ? "ok" : "FAILED",                   \
                   (unsigned long long)(now_ms() - t_));                                           \
        }                                                                                          \
    } while (0)
    RUN("batches", test_batches(false));
    RUN("batches", test_batches(true));
    RUN("partial", test_partial(false));
    RUN("partial", test_partial(true));
    RUN("refused", test_refused(false));
    RUN("refused", test_refused(true));
    RUN("pool", test_pool());
    RUN("trunc", test_trunc());
    RUN("peers", test_peers());
    RUN("config", test_config());
    RUN("ipv6", test_ipv6());
    RUN("specs", test_fault_specs());
    RUN("hold", test_fault_hold());
    RUN("rates", test_fault_rates());
    RUN("gro_runs", test_gro_runs(false));
    RUN("gro_runs_connected", test_gro_runs(true));
    RUN("gro_pool", test_gro_pool());
    RUN("gro_mixed", test_gro_mixed());
    RUN("gro_edges", test_gro_edges());
    RUN("gro_off", test_gro_off());
    RUN("lone", test_lone());
    RUN("gro_cold", test_gro_cold());
    RUN("gro_switch", test_gro_switch());
    return summary();
}
