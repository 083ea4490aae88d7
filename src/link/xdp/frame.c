/*
 * frame.c - Ethernet/IPv4/UDP frames of the AF_XDP link (frame.h).
 *
 * Checksums (RFC 1071) are 16-bit one's complement sums kept in host order:
 * summing the bytes as they lie in memory and storing the folded result back
 * the same way gives the right bytes on the wire on either byte order.
 */
#include "link/xdp/frame.h"

#include <arpa/inet.h>
#include <string.h>

/* Sixteen bytes per step as two 64-bit words into a 128-bit sum (add with
 * carry): the one's complement sum of 16-bit words in any grouping, since
 * 2^64 is 1 modulo 2^16 - 1. At a datagram's length this runs at several
 * bytes per cycle, where 32-bit words ran at one: the receive side sums every
 * payload byte. A tail shorter than 16 bytes is summed from a zero-padded
 * copy (an odd last byte pads as the RFC says). */
static uint64_t csum_add(uint64_t sum, const uint8_t *p, size_t n)
{
    unsigned __int128 acc = sum;
    for (; n >= 16; p += 16, n -= 16) {
        uint64_t w[2];
        memcpy(w, p, 16);
        acc += w[0];
        acc += w[1];
    }
    if (n) {
        uint64_t w[2] = {0, 0};
        memcpy(w, p, n);
        acc += w[0];
        acc += w[1];
    }
    uint64_t lo = (uint64_t)acc, hi = (uint64_t)(acc >> 64);
    lo += hi;
    return lo < hi ? lo + 1 : lo; /* the end-around carry */
}

static uint16_t csum_fold(uint64_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* The pseudo-header's part of a UDP checksum. */
static uint64_t csum_pseudo(uint32_t src, uint32_t dst, uint16_t udp_len)
{
    uint8_t ph[12];
    memcpy(ph, &src, 4);
    memcpy(ph + 4, &dst, 4);
    ph[8] = 0;
    ph[9] = IPPROTO_UDP;
    uint16_t l = htons(udp_len);
    memcpy(ph + 10, &l, 2);
    return csum_add(0, ph, sizeof(ph));
}

uint32_t uln_xdp_frame_build(uint8_t *f, const struct uln_xdp_flow *fl, uint16_t ip_id,
                             const struct iovec *iov, unsigned niov)
{
    uint32_t plen = 0;
    for (unsigned j = 0; j < niov; j++) {
        if (iov[j].iov_len) memcpy(f + ULN_XDP_HDR_LEN + plen, iov[j].iov_base, iov[j].iov_len);
        plen += (uint32_t)iov[j].iov_len;
    }
    memcpy(f, fl->dst_mac, 6);
    memcpy(f + 6, fl->src_mac, 6);
    f[12] = 0x08, f[13] = 0x00; /* IPv4 */
    uint8_t *ip = f + 14;
    uint16_t tot = htons((uint16_t)(20 + 8 + plen)), id = htons(ip_id),
             df = htons(0x4000); /* never fragmented: the link's payload_max fits the MTU */
    ip[0] = 0x45, ip[1] = 0;
    memcpy(ip + 2, &tot, 2);
    memcpy(ip + 4, &id, 2);
    memcpy(ip + 6, &df, 2);
    ip[8] = 64, ip[9] = IPPROTO_UDP, ip[10] = ip[11] = 0;
    memcpy(ip + 12, &fl->src_ip, 4);
    memcpy(ip + 16, &fl->dst_ip, 4);
    uint16_t c = (uint16_t)~csum_fold(csum_add(0, ip, 20));
    memcpy(ip + 10, &c, 2);
    uint8_t *udp = ip + 20;
    uint16_t ulen = htons((uint16_t)(8 + plen));
    memcpy(udp, &fl->src_port, 2);
    memcpy(udp + 2, &fl->dst_port, 2);
    memcpy(udp + 4, &ulen, 2);
    udp[6] = udp[7] = 0;
    c = (uint16_t)~csum_fold(
        csum_add(csum_pseudo(fl->src_ip, fl->dst_ip, (uint16_t)(8 + plen)), udp, 8 + plen));
    if (c == 0) c = 0xffff; /* 0 would say "no checksum" */
    memcpy(udp + 6, &c, 2);
    return ULN_XDP_HDR_LEN + plen;
}

/* A datagram's UDP checksum is right, or was left for an offload to finish
 * (CHECKSUM_PARTIAL: the field holds the pseudo-header's sum) by a kernel
 * sender on a virtual path (veth) where nothing finishes it, as a real NIC
 * would on the wire: that much trust the kernel's own stack gives such
 * datagrams too. */
static int udp_csum_ok(uint32_t src, uint32_t dst, const uint8_t *udp, uint16_t ulen, uint16_t ucs)
{
    uint64_t ph = csum_pseudo(src, dst, ulen);
    return csum_fold(csum_add(ph, udp, ulen)) == 0xffff || ucs == csum_fold(ph);
}

uint32_t uln_xdp_frame_parse(uint32_t my_ip, uint16_t my_port, const uint8_t *p, uint32_t len,
                             uint32_t *plen, struct sockaddr_in *src)
{
    if (len < ULN_XDP_HDR_LEN || p[12] != 0x08 || p[13] != 0x00) return 0;
    const uint8_t *ip = p + 14;
    uint32_t ihl = (ip[0] & 0xfu) * 4u;
    if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != IPPROTO_UDP || 14 + ihl + 8 > len) return 0;
    uint16_t tot, frag, ulen, ucs;
    memcpy(&tot, ip + 2, 2);
    memcpy(&frag, ip + 6, 2);
    tot = ntohs(tot);
    /* The IP length bounds everything after it; a frame may be longer
     * (Ethernet pads short ones), never shorter. */
    if (tot < ihl + 8 || 14u + tot > len || (ntohs(frag) & 0x3fff)) return 0;
    if (memcmp(ip + 16, &my_ip, 4) || csum_fold(csum_add(0, ip, ihl)) != 0xffff) return 0;
    const uint8_t *udp = ip + ihl;
    memcpy(&ulen, udp + 4, 2);
    memcpy(&ucs, udp + 6, 2);
    ulen = ntohs(ulen);
    if (ulen < 8 || ulen > tot - ihl || memcmp(udp + 2, &my_port, 2)) return 0;
    uint32_t from;
    memcpy(&from, ip + 12, 4);
    if (ucs && !udp_csum_ok(from, my_ip, udp, ulen, ucs)) return 0;
    memset(src, 0, sizeof(*src));
    src->sin_family = AF_INET;
    src->sin_addr.s_addr = from;
    memcpy(&src->sin_port, udp, 2);
    *plen = ulen - 8u;
    return 14u + ihl + 8u;
}
