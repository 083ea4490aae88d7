/*
 * udp_wire.h - the UDP transport's packets as docs/protocol.md ("The UDP
 * transport's packets") specifies them, written from that text for the
 * tests: the fuzz seeds, the fuzz target's patching, the forged-packet test.
 * Deliberately not shared with src/transport/udp/proto.h: a test that took the
 * layout from the code under test would agree with it whatever it says.
 * Little-endian, like the wire (the structs are used on little-endian hosts).
 */
#ifndef ULN_TEST_UDP_WIRE_H
#define ULN_TEST_UDP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "udp_wire.h lays packets out in host order: little-endian hosts only"
#endif

#define UW_VERSION 2u
enum {
    UW_NAP = 1,
    UW_PUT = 2,
    UW_GET_REQ = 4,
    UW_GET_RESP = 5,
    UW_ACK = 6,
    UW_CTRL = 7,
    UW_ATOMIC_REQ = 8,
    UW_ATOMIC_RESP = 9
};

/* flags: the reliability layer's five, then the message's own */
#define UW_DATA  0x01u
#define UW_FB    0x02u
#define UW_LOSE  0x04u
#define UW_PROBE 0x08u
#define UW_RETX  0x10u
#define UW_LAST  0x20u
#define UW_IMM   0x40u
#define UW_MORE  0x80u /* another packet follows in the datagram (a bundle), len bytes on */

struct uw_hdr {
    uint8_t vt; /* version << 4 | type */
    uint8_t flags;
    uint16_t credit;
    uint32_t tag;
    uint32_t seq; /* CTRL: the sender's epoch */
    uint32_t ack;
    uint64_t key;
    uint64_t offset;
    uint32_t len; /* the packet's bytes, header included (uw_build writes it) */
} __attribute__((packed));
_Static_assert(sizeof(struct uw_hdr) == 36, "the header is 36 bytes");

struct uw_put_ext { /* 24 bytes, 32 with UW_IMM */
    uint64_t op_id, op_offset, op_len, imm;
};
struct uw_get_req_ext {
    uint64_t len, op_id;
};
struct uw_get_resp_ext {
    int32_t status;
    uint32_t pad;
};
struct uw_atomic_req_ext { /* 32 bytes */
    uint64_t op_id, operand, compare;
    uint8_t op, width;
    uint8_t pad[6];
};
struct uw_atomic_resp_ext {
    int32_t status;
    uint32_t pad;
};
struct uw_ctrl {
    uint32_t dst_epoch, lose;
    uint16_t sack_off, reorder;
    int32_t rank;
};
_Static_assert(sizeof(struct uw_ctrl) == 16, "the CTRL body is 16 bytes");

static inline uint8_t uw_vt(unsigned type)
{
    return (uint8_t)(UW_VERSION << 4 | type);
}

/* Extension bytes a type carries (-1: not a type). */
static inline int uw_ext_len(unsigned type, unsigned flags)
{
    switch (type) {
    case UW_NAP:
    case UW_ACK:
        return 0;
    case UW_PUT:
        return (flags & UW_IMM) ? 32 : 24;
    case UW_GET_REQ:
        return 16;
    case UW_GET_RESP:
    case UW_ATOMIC_RESP:
        return 8;
    case UW_ATOMIC_REQ:
        return 32;
    case UW_CTRL:
        return 16;
    default:
        return -1;
    }
}

/* The length of the packet at p (n bytes there) as its header says, if
 * that is at least a header and within the n bytes; else 0. */
static inline size_t uw_self_len(const uint8_t *p, size_t n)
{
    struct uw_hdr h;
    if (n < sizeof h) return 0;
    memcpy(&h, p, sizeof h);
    return h.len >= sizeof h && h.len <= n ? h.len : 0;
}

/* Header (its len set to the packet's), extension, payload into out;
 * returns the length. */
static inline size_t uw_build(uint8_t *out, const struct uw_hdr *h, const void *ext, size_t elen,
                              const void *payload, size_t plen)
{
    struct uw_hdr hl = *h;
    hl.len = (uint32_t)(sizeof hl + elen + plen);
    memcpy(out, &hl, sizeof hl);
    if (elen) memcpy(out + sizeof hl, ext, elen);
    if (plen) memcpy(out + sizeof hl + elen, payload, plen);
    return sizeof hl + elen + plen;
}

#endif
