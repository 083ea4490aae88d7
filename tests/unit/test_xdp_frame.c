/*
 * test_xdp_frame.c - the AF_XDP link's frames (src/link/xdp/frame.c):
 * what it builds it takes back intact, and it refuses every frame that is
 * not an intact, unfragmented IPv4/UDP datagram to our address and port -
 * each property broken alone, with the checksums made right again, so the
 * refusal is for that property and not for a checksum.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frame_sums.h"
#include "link/xdp/frame.h"

#define FRAME_MAX 2048u

static const struct uln_xdp_flow flow = {
    .src_mac = {0x02, 0, 0, 0, 0, 1},
    .dst_mac = {0x02, 0, 0, 0, 0, 2},
    .src_ip = 0x0100000a, /* 10.0.0.1, network order on a little-endian host */
    .dst_ip = 0x0200000a,
    .src_port = 0x3412,
    .dst_port = 0x7856,
};

static uint32_t build(uint8_t *f, size_t plen)
{
    static uint8_t pay[FRAME_MAX];
    for (size_t i = 0; i < plen; i++)
        pay[i] = (uint8_t)(i * 7 + 3);
    /* Three segments, one of them empty, cut unevenly. */
    struct iovec v[3] = {{pay, plen / 3}, {NULL, 0}, {pay + plen / 3, plen - plen / 3}};
    memset(f, 0xee, FRAME_MAX);
    return uln_xdp_frame_build(f, &flow, 0x1234, v, 3);
}

static uint32_t parse(const uint8_t *f, uint32_t len, uint32_t *plen, struct sockaddr_in *sa)
{
    /* A copy of exactly len bytes on the heap, so ASan sees any read past it. */
    uint8_t *c = malloc(len ? len : 1);
    memcpy(c, f, len);
    uint32_t off = uln_xdp_frame_parse(flow.dst_ip, flow.dst_port, c, len, plen, sa);
    free(c);
    return off;
}

static void roundtrip(void)
{
    static const size_t sizes[] = {0, 1, 2, 3, 7, 18, 1000, 1471, 1472};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint8_t f[FRAME_MAX];
        uint32_t len = build(f, sizes[k]), plen = 99;
        CHECK_EQ(len, ULN_XDP_HDR_LEN + sizes[k]);
        CHECK_EQ(frame_sum16(f + 14, 20, 0), 0xffff); /* the IPv4 header's sum, by our count */
        struct sockaddr_in sa;
        uint32_t off = parse(f, len, &plen, &sa);
        CHECK_EQ(off, ULN_XDP_HDR_LEN);
        CHECK_EQ(plen, sizes[k]);
        CHECK_EQ(sa.sin_addr.s_addr, flow.src_ip);
        CHECK_EQ(sa.sin_port, flow.src_port);
        CHECK(!memcmp(f, flow.dst_mac, 6) && !memcmp(f + 6, flow.src_mac, 6));
        int same = 1;
        for (size_t i = 0; i < sizes[k]; i++)
            same &= f[off + i] == (uint8_t)(i * 7 + 3);
        CHECK(same);
        /* Ethernet pads short frames: a longer frame is the same datagram. */
        CHECK_EQ(parse(f, len + 20, &plen, &sa), ULN_XDP_HDR_LEN);
        CHECK_EQ(plen, sizes[k]);
        /* Every shorter length is refused. */
        int refused = 1;
        for (uint32_t n = 0; n < len; n++)
            refused &= parse(f, n, &plen, &sa) == 0;
        CHECK(refused);
    }
}

/* Every single bit flipped in what the checksums cover is refused (the
 * Ethernet addresses are not checked: the NIC filtered them). */
static void bit_flips(void)
{
    uint8_t f[FRAME_MAX];
    uint32_t len = build(f, 33), plen;
    struct sockaddr_in sa;
    unsigned taken = 0;
    for (uint32_t i = 12; i < len; i++)
        for (int b = 0; b < 8; b++) {
            if (i == 40 || i == 41) continue; /* the UDP checksum itself: below */
            f[i] ^= (uint8_t)(1u << b);
            taken += parse(f, len, &plen, &sa) != 0;
            f[i] ^= (uint8_t)(1u << b);
        }
    CHECK_EQ(taken, 0);
    CHECK_EQ(parse(f, len, &plen, &sa), ULN_XDP_HDR_LEN);
}

struct breakage {
    const char *what;
    void (*apply)(uint8_t *f);
};
static void b_vlan(uint8_t *f)
{
    f[12] = 0x81, f[13] = 0x00;
}
static void b_ipv6(uint8_t *f)
{
    f[14] = 0x65;
}
static void b_short_ihl(uint8_t *f)
{
    f[14] = 0x44;
}
static void b_tcp(uint8_t *f)
{
    f[14 + 9] = IPPROTO_TCP;
}
static void b_more_frags(uint8_t *f)
{
    f[14 + 6] |= 0x20;
}
static void b_frag_offset(uint8_t *f)
{
    f[14 + 7] = 1;
}
static void b_other_ip(uint8_t *f)
{
    f[14 + 19] ^= 1;
}
static void b_other_port(uint8_t *f)
{
    f[14 + 20 + 3] ^= 1;
}
static void b_ulen_short(uint8_t *f)
{
    f[14 + 20 + 5] = 7;
}
static void b_ulen_long(uint8_t *f)
{
    f[14 + 20 + 5] += 1;
}
static void b_tot_short(uint8_t *f)
{
    f[14 + 3] = 27;
}
static void b_tot_long(uint8_t *f)
{
    f[14 + 3] += 1;
}

static void each_breakage(void)
{
    static const struct breakage bs[] = {
        {"VLAN tag", b_vlan},
        {"IPv6", b_ipv6},
        {"ihl 4", b_short_ihl},
        {"TCP", b_tcp},
        {"more fragments", b_more_frags},
        {"a fragment's offset", b_frag_offset},
        {"another address", b_other_ip},
        {"another port", b_other_port},
        {"UDP length < 8", b_ulen_short},
        {"UDP length past the IP length", b_ulen_long},
        {"IP length < headers", b_tot_short},
        {"IP length past the frame", b_tot_long},
    };
    for (size_t k = 0; k < sizeof bs / sizeof bs[0]; k++) {
        uint8_t f[FRAME_MAX];
        uint32_t len = build(f, 40), plen;
        struct sockaddr_in sa;
        bs[k].apply(f);
        if ((f[14] & 15) >= 5) frame_fix_sums(f); /* only this property is wrong */
        uint32_t off = parse(f, len, &plen, &sa);
        if (off) fprintf(stderr, "taken: %s\n", bs[k].what);
        CHECK_EQ(off, 0);
    }
}

/* What a kernel sender's datagram may carry: no UDP checksum at all, a
 * partial one (CHECKSUM_PARTIAL on a veth), IP options. */
static void kernel_senders(void)
{
    uint8_t f[FRAME_MAX];
    struct sockaddr_in sa;
    uint32_t len = build(f, 50), plen;
    f[40] = f[41] = 0; /* no checksum */
    CHECK_EQ(parse(f, len, &plen, &sa), ULN_XDP_HDR_LEN);
    uint8_t ph[12];
    memcpy(ph, f + 14 + 12, 8);
    ph[8] = 0, ph[9] = IPPROTO_UDP, ph[10] = f[38], ph[11] = f[39];
    uint16_t partial = frame_sum16(ph, 12, 0);
    f[40] = (uint8_t)(partial >> 8), f[41] = (uint8_t)partial;
    CHECK_EQ(parse(f, len, &plen, &sa), ULN_XDP_HDR_LEN);
    f[41] ^= 4; /* neither right nor partial */
    CHECK_EQ(parse(f, len, &plen, &sa), 0);

    /* One option word (ihl 6): the payload starts 4 bytes later. */
    len = build(f, 50);
    memmove(f + 14 + 24, f + 14 + 20, 8 + 50);
    memset(f + 14 + 20, 1, 4); /* four NOPs */
    f[14] = 0x46;
    f[14 + 3] += 4;
    frame_fix_sums(f);
    CHECK_EQ(parse(f, len + 4, &plen, &sa), ULN_XDP_HDR_LEN + 4);
    CHECK_EQ(plen, 50);
}

int main(void)
{
    roundtrip();
    bit_flips();
    each_breakage();
    kernel_senders();
    return summary();
}
