/*
 * frame_sums.h - checksums of Ethernet/IPv4/UDP frames, the tests' own (not
 * the library's): the xdp frame test and fuzz target change a frame and make
 * its checksums right again, so that what the parser refuses is the change.
 */
#ifndef ULN_TEST_FRAME_SUMS_H
#define ULN_TEST_FRAME_SUMS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One's complement sum over p[0..n) in network order, added to s, folded. */
static inline uint16_t frame_sum16(const uint8_t *p, size_t n, uint32_t s)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1) s += (uint32_t)p[n - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)s;
}

/* Both checksums of frame f[0..len) right again, as far as its header and
 * UDP lengths say (which must lie inside len: the caller checks). */
static inline void frame_fix_sums(uint8_t *f)
{
    uint8_t *ip = f + 14;
    unsigned ihl = (ip[0] & 15u) * 4u;
    ip[10] = ip[11] = 0;
    uint16_t c = (uint16_t)~frame_sum16(ip, ihl, 0);
    ip[10] = (uint8_t)(c >> 8), ip[11] = (uint8_t)c;
    uint8_t *udp = ip + ihl;
    unsigned ulen = (unsigned)udp[4] << 8 | udp[5];
    uint8_t ph[12];
    memcpy(ph, ip + 12, 8);
    ph[8] = 0, ph[9] = ip[9], ph[10] = udp[4], ph[11] = udp[5];
    udp[6] = udp[7] = 0;
    c = (uint16_t)~frame_sum16(udp, ulen, frame_sum16(ph, 12, 0));
    if (c == 0) c = 0xffff;
    udp[6] = (uint8_t)(c >> 8), udp[7] = (uint8_t)c;
}

#endif
