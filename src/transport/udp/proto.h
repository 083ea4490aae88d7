/*
 * proto.h - the UDP transport's wire format (docs/protocol.md): the packet
 * header, the extensions, bundles, and the connection tag.
 */
#ifndef ULN_TRANSPORT_UDP_PROTO_H
#define ULN_TRANSPORT_UDP_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/wire.h"
#include "transport/udp/ctx.h"

/* ---- wire format (docs/protocol.md) -------------------------------------- */

#define PKT_VERSION 2u /* 2: every header says its packet's length */
/* A packet's type is its engine message's (wire.h's table); PUT carries
 * PUT_FRAG's. CTRL is rel's own and never reaches the engine. */
enum {
    PKT_NAP = ULN_MSG_NAP,
    PKT_PUT = ULN_MSG_PUT_FRAG,
    PKT_GET_REQ = ULN_MSG_GET_REQ,
    PKT_GET_RESP = ULN_MSG_GET_RESP,
    PKT_ACK = ULN_MSG_ACK,
    PKT_CTRL = 7,
    PKT_ATOMIC_REQ = ULN_MSG_ATOMIC_REQ,
    PKT_ATOMIC_RESP = ULN_MSG_ATOMIC_RESP,
};
_Static_assert(PKT_NAP == 1 && PKT_PUT == 2 && PKT_GET_REQ == 4 && PKT_GET_RESP == 5 &&
                   PKT_ACK == 6 && PKT_ATOMIC_REQ == 8 && PKT_ATOMIC_RESP == 9,
               "the wire's type numbers (docs/protocol.md)");
/* flags: the low five bits are rel's (ULN_REL_DATA, FB, LOSE, PROBE, RETX) */
#define PKT_LAST 0x20u /* NAP, PUT: last packet of the message */
#define PKT_IMM  0x40u /* PUT with LAST: raise PUT_REMOTE with imm at the target */
/* MORE: another packet follows in the same datagram (a bundle), at len */
#define PKT_MORE 0x80u

/* Every packet starts with these 36 bytes, little-endian. */
struct pkt_hdr {
    uint8_t vt;            /* version << 4 | type */
    uint8_t flags;         /* PKT_* and ULN_REL_* */
    uint16_t credit;       /* piggybacked (ULN_REL_FB): receiver takes seqs before ack + credit */
    uint32_t tag;          /* data: job key and both lives, hashed; ctrl: rel's fb.dup
                              (1 + a seq that arrived twice, by a resend; 0: none) */
    uint32_t seq;          /* data: sequence number; ctrl: the sender's epoch */
    uint32_t ack;          /* with ULN_REL_FB: every seq before it arrived */
    uint64_t key;          /* PUT, GET_REQ, ATOMIC_REQ: region key; NAP: message length;
                              GET_RESP, ACK, ATOMIC_RESP: the initiator's op id; ctrl: the
                              job key */
    uint64_t offset;       /* PUT, GET_REQ, ATOMIC_REQ: offset in the region; NAP, GET_RESP:
                              offset in the message; ACK: status; ATOMIC_RESP: the old
                              value; ctrl: SACK bitmap */
    uint32_t len;          /* this packet's bytes: header, extension, data. Where the
                              next packet of a bundle starts, and where a datagram ends
                              in a GRO run read without the kernel's segment size */
} __attribute__((packed)); /* 36, not 40: a bundle of 8 B NAPs holds 33 of them in
                              a 1500-byte MTU rather than 30. Always copied in and
                              out with memcpy, so alignment never matters. */
_Static_assert(sizeof(struct pkt_hdr) == 36, "the header is 36 bytes");

struct pkt_put_ext { /* PUT: the whole operation, for the all-or-nothing check */
    uint64_t op_id, op_offset, op_len;
    uint64_t imm; /* only with PKT_IMM */
};
struct pkt_get_req_ext {
    uint64_t len, op_id;
};
struct pkt_get_resp_ext {
    int32_t status; /* nonzero: refused, no data */
    uint32_t pad_;
};
struct pkt_atomic_req_ext {
    uint64_t op_id, operand, compare;
    uint8_t op, width; /* enum uln_atomic_op; 4 or 8 */
    uint8_t pad_[6];
};
struct pkt_atomic_resp_ext {
    int32_t status; /* nonzero: refused, the word was not touched */
    uint32_t pad_;
};
struct pkt_ctrl_body { /* hello, feedback, probe */
    uint32_t dst_epoch;
    uint32_t lose;
    uint16_t sack_off, reorder;
    int32_t rank; /* the sender's rank, checked against its address */
};

#define EXT_MAX   32u
#define HDR_SPACE 68u /* header + the largest extension */
/* A batch entry's header room: an ACK that rides in front of the packet
 * (bundle_answers), then the packet's own header and extension. */
#define LEAD_SPACE ((unsigned)sizeof(struct pkt_hdr))
#define ROW_SPACE  (LEAD_SPACE + HDR_SPACE)

_Static_assert(sizeof(struct pkt_put_ext) == 32 && offsetof(struct pkt_put_ext, imm) == 24,
               "PUT's extension as wire.h's table has it");
_Static_assert(sizeof(struct pkt_get_req_ext) == 16 && sizeof(struct pkt_get_resp_ext) == 8,
               "GET's extensions as wire.h's table has them");
_Static_assert(sizeof(struct pkt_atomic_req_ext) == 32 && sizeof(struct pkt_atomic_resp_ext) == 8,
               "the atomics' extensions as wire.h's table has them");

/* The extension a packet of this type and flags carries; -1: no such type. */
static inline int ext_len(unsigned type, unsigned flags)
{
    if (type == PKT_CTRL) return (int)sizeof(struct pkt_ctrl_body);
    const struct uln_msg_desc *d = uln_msg_packet(type);
    if (!d) return -1;
    return (flags & PKT_IMM) ? d->ext_imm : d->ext;
}

/* Bundles: small packets to one peer, next to each other in a batch, leave
 * in one datagram, each whole with its own header and seq; all but the last
 * carry PKT_MORE, and each header's len says where the next one starts.
 * Per datagram, not per packet, is what a link and both kernels pay (an
 * AF_XDP frame on veth ~3 us). */
#define BUNDLE_PKT_MAX 256u  /* a packet this small may join a bundle (it is copied) */
#define BUNDLE_MAX     2048u /* a bundle's bytes at most (and the link's payload_max) */
#define BUNDLE_BUFS    32u   /* bundles per endpoint at once: a batch of 64 makes 32 */

/* Where the datagram at buf (avail bytes, maybe a GRO run of several) ends,
 * as its headers say: the packets of a bundle, each len long, to the first
 * without PKT_MORE. 0 if they do not say it within avail. The socket link
 * cuts a run read without the kernel's segment size by it (link_udp.h). */
static inline uint32_t dgram_len(const uint8_t *buf, uint32_t avail)
{
    uint32_t at = 0;
    for (;;) {
        struct pkt_hdr h;
        if (avail - at < sizeof h) return 0;
        memcpy(&h, buf + at, sizeof h);
        if (h.len < sizeof h || h.len > avail - at) return 0;
        at += h.len;
        if (!(h.flags & PKT_MORE)) return at;
    }
}

/* A data packet names its connection in 32 bits: the job key and both lives.
 * A packet of another job, or of an earlier life of either side, fails it. */
static inline uint32_t conn_tag(uint64_t job, uint32_t src_epoch, uint32_t dst_epoch)
{
    return (uint32_t)mix64(job ^ ((uint64_t)src_epoch << 32 | dst_epoch));
}

#endif
