/*
 * fuzz_xdp_frame.c - fuzz target for the AF_XDP link's frame parser
 * (uln_xdp_frame_parse, src/link/xdp/frame.c): the bytes the NIC hands
 * the link from the wire, before anything else of ulnet looks at them. What
 * it accepts goes on to the packet protocol as a udp datagram does, which
 * fuzz_udp_rx covers.
 *
 * An input is  mods:u8 frame[...]:
 *   0x01  the frame's destination address and port := ours (so that the
 *         fuzzer gets past the address filter it cannot guess)
 *   0x02  both checksums made right (where the header and UDP lengths lie
 *         inside the frame), so that the fuzzer gets past them too
 * For every input the parser either refuses (0) or names a payload that
 * lies inside the frame, after headers at least as long as ours, as long as
 * the UDP length says, from the source the header names; and the same
 * payload sent back through uln_xdp_frame_build parses to itself. ASan sees
 * any read outside the frame (a copy of exactly its length).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frame_sums.h"
#include "link/xdp/frame.h"

#define OUR_IP   0x0200000au /* 10.0.0.2 in network order (little-endian host) */
#define OUR_PORT 0x7856u

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_xdp_frame: %s\n", what);
        abort();
    }
}

static void apply_mods(uint8_t *f, size_t n, unsigned mods)
{
    if (n < ULN_XDP_HDR_LEN) return;
    unsigned ihl = (f[14] & 15u) * 4u;
    if (ihl < 20 || 14 + ihl + 8 > n) return;
    if (mods & 0x01) {
        uint32_t ip = OUR_IP;
        uint16_t port = OUR_PORT;
        memcpy(f + 14 + 16, &ip, 4);
        memcpy(f + 14 + ihl + 2, &port, 2);
    }
    unsigned ulen = (unsigned)f[14 + ihl + 4] << 8 | f[14 + ihl + 5];
    if ((mods & 0x02) && ulen >= 8 && 14 + ihl + ulen <= n) frame_fix_sums(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536) return 0;
    size_t n = size - 1;
    uint8_t *f = malloc(n ? n : 1);
    if (!f) return 0;
    memcpy(f, data + 1, n);
    apply_mods(f, n, data[0]);
    uint32_t plen = 0;
    struct sockaddr_in src;
    uint32_t off = uln_xdp_frame_parse(OUR_IP, OUR_PORT, f, (uint32_t)n, &plen, &src);
    if (off) {
        must(off >= ULN_XDP_HDR_LEN && (uint64_t)off + plen <= n, "payload outside the frame");
        unsigned ihl = (f[14] & 15u) * 4u;
        must(off == 14 + ihl + 8, "payload not right after the UDP header");
        must(plen + 8 == ((unsigned)f[off - 4] << 8 | f[off - 3]), "length not the UDP length's");
        must(src.sin_family == AF_INET && !memcmp(&src.sin_addr, f + 14 + 12, 4) &&
                 !memcmp(&src.sin_port, f + off - 8, 2),
             "source not the header's");
        /* The payload, answered back to its sender, comes back whole. */
        if (plen <= 9000) {
            static uint8_t back[ULN_XDP_HDR_LEN + 9000];
            struct uln_xdp_flow fl = {.src_ip = src.sin_addr.s_addr,
                                      .dst_ip = OUR_IP,
                                      .src_port = src.sin_port,
                                      .dst_port = OUR_PORT};
            struct iovec v = {f + off, plen};
            uint32_t len = uln_xdp_frame_build(back, &fl, 7, &v, 1), plen2 = 0;
            struct sockaddr_in src2;
            must(uln_xdp_frame_parse(OUR_IP, OUR_PORT, back, len, &plen2, &src2) ==
                         ULN_XDP_HDR_LEN &&
                     plen2 == plen && !memcmp(back + ULN_XDP_HDR_LEN, f + off, plen),
                 "a frame we built does not parse back");
        }
    }
    free(f);
    return 0;
}
