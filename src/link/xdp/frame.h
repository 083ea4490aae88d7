/*
 * frame.h - the frames the AF_XDP link sends and takes: Ethernet II,
 * IPv4 without options on send (any header length accepted on receive), UDP,
 * with real checksums, so they cross ordinary switches and routers and a
 * peer's kernel socket takes them as well (docs/xdp.md).
 *
 * Kept apart from the link (link.c, which needs libxdp) because the
 * receive side parses bytes from the wire: it builds everywhere, so its unit
 * test and its fuzz target (tests/fuzz/fuzz_xdp_frame.c) run on every build.
 */
#ifndef ULN_XDP_FRAME_H
#define ULN_XDP_FRAME_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/uio.h>

#define ULN_XDP_HDR_LEN 42u /* Ethernet 14 + IPv4 20 + UDP 8, as we send them */

/* Who a frame goes from and to; addresses and ports in network order. */
struct uln_xdp_flow {
    uint8_t src_mac[6], dst_mac[6];
    uint32_t src_ip, dst_ip;
    uint16_t src_port, dst_port;
};

/* Headers and the payload gathered from iov into frame f (room for
 * ULN_XDP_HDR_LEN + the payload, which the caller keeps within the MTU: the
 * frame says "don't fragment"); returns its length on the wire. */
uint32_t uln_xdp_frame_build(uint8_t *f, const struct uln_xdp_flow *fl, uint16_t ip_id,
                             const struct iovec *iov, unsigned niov);

/* Frame p[0..len) if it is an intact, unfragmented UDP datagram to
 * (ip, port): the payload's offset in p, its length in *plen, the sender in
 * *src. 0 for anything else (not IPv4/UDP, another address or port, a bad
 * header checksum or UDP checksum, lengths that disagree with len). Reads
 * nothing outside p[0..len). */
uint32_t uln_xdp_frame_parse(uint32_t ip, uint16_t port, const uint8_t *p, uint32_t len,
                             uint32_t *plen, struct sockaddr_in *src);

#endif
