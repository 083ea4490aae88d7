/*
 * wire.h - the engine's messages, as they travel between two endpoints.
 *
 * Every message is a ring message (struct uln_msg: stamp, cells, type, flags,
 * len, aux) followed by a type-specific fixed part and then data. The fixed
 * parts carry everything a target needs to place data itself, so the same
 * messages serve the shared-memory rings when the initiator cannot reach the
 * target's memory (ULN_SHM_DIRECT=0, or the kernel refuses process_vm_*) and,
 * later, packet transports.
 *
 * Channels: each (initiator endpoint, target endpoint) pair has two rings.
 *   channel 0 (data):    NAP, PUT_FRAG, PUT_NOTIFY, GET_RESP, ACK, ATOMIC_RESP
 *   channel 1 (request): GET_REQ, ATOMIC_REQ
 * Requests have their own channel because serving one makes the target
 * send; if requests queued behind data, two ranks GETting from each other with
 * full data rings would each wait for the other forever (cHPP's virtual channel).
 */
#ifndef ULN_WIRE_H
#define ULN_WIRE_H

#include <stdbool.h>
#include <stdint.h>

enum uln_msg_type {
    ULN_MSG_NAP = 1,     /* payload = user data */
    ULN_MSG_PUT_FRAG,    /* struct uln_put_frag + data: place at (key, offset) */
    ULN_MSG_PUT_NOTIFY,  /* struct uln_put_notify: a direct PUT landed, raise a CQE */
    ULN_MSG_GET_REQ,     /* struct uln_get_req (channel 1) */
    ULN_MSG_GET_RESP,    /* struct uln_get_resp + data */
    ULN_MSG_ACK,         /* struct uln_ack: a ring-path PUT is placed, or refused */
    ULN_MSG_PUT_DONE,    /* struct uln_put_done: packet transports only, written by the
                            receive path into our own ring when a PUT's last fragment
                            comes up in order (its data was placed on arrival) */
    ULN_MSG_ATOMIC_REQ,  /* struct uln_atomic_req (channel 1): apply it, answer */
    ULN_MSG_ATOMIC_RESP, /* struct uln_atomic_resp: the old value, or the refusal */
};

/* One table says what each type is, for every transport, so none translates
 * by hand. On a packet transport each message that travels is one packet
 * type (docs/protocol.md: the same number), whose header carries two 64-bit
 * fields and whose extension the rest of the fixed part. */
struct uln_msg_desc {
    uint8_t channel; /* the ring it travels in (above) */
    bool ordered;    /* must reach the engine in order (NAP, ACK, GET_REQ, a PUT's
                        last piece); else placed the moment it arrives */
    bool packet;     /* travels as a packet (PUT_FRAG: as PUT); else ring only */
    uint8_t ext;     /* its packet extension, bytes */
    uint8_t ext_imm; /* ... when it carries immediate data (PUT with IMM) */
};

#define ULN_MSG_TYPES 10 /* types are below this */

/* A ring-only mark (never a packet, outside the table): the producer writes
 * it, aux = the consumer endpoint's life it writes for, before its first
 * message to that life. Messages after a mark for another life are an
 * earlier life's: refused (ep.c, engine.c). */
#define ULN_MSG_LIFE 0xfdu

static const struct uln_msg_desc uln_msg_table[ULN_MSG_TYPES] = {
    [ULN_MSG_NAP] = {.channel = 0, .ordered = true, .packet = true},
    [ULN_MSG_PUT_FRAG] = {.channel = 0, .ordered = false, .packet = true, .ext = 24, .ext_imm = 32},
    [ULN_MSG_PUT_NOTIFY] = {.channel = 0, .ordered = true},
    [ULN_MSG_GET_REQ] = {.channel = 1, .ordered = true, .packet = true, .ext = 16, .ext_imm = 16},
    [ULN_MSG_GET_RESP] = {.channel = 0, .ordered = false, .packet = true, .ext = 8, .ext_imm = 8},
    [ULN_MSG_ACK] = {.channel = 0, .ordered = true, .packet = true},
    [ULN_MSG_PUT_DONE] = {.channel = 0, .ordered = true},
    /* An atomic is applied once, when its request comes up in order: a
     * resent or duplicated packet never reaches the engine twice (rel). */
    [ULN_MSG_ATOMIC_REQ] =
        {.channel = 1, .ordered = true, .packet = true, .ext = 32, .ext_imm = 32},
    [ULN_MSG_ATOMIC_RESP] = {.channel = 0, .ordered = true, .packet = true, .ext = 8, .ext_imm = 8},
};

/* The description of type, or NULL for a type that is none of the above. */
static inline const struct uln_msg_desc *uln_msg_desc(unsigned type)
{
    return type < ULN_MSG_TYPES && type != 0 ? &uln_msg_table[type] : (const void *)0;
}

/* ... of a packet's type: NULL when no engine message travels as it. */
static inline const struct uln_msg_desc *uln_msg_packet(unsigned type)
{
    const struct uln_msg_desc *d = uln_msg_desc(type);
    return d && d->packet ? d : (const void *)0;
}

/* flags of PUT_FRAG */
#define ULN_FRAG_LAST 0x1u /* last fragment of the operation: answer with an ACK */
#define ULN_FRAG_IMM  0x2u /* with LAST: raise PUT_REMOTE carrying imm at the target */

struct uln_put_frag {
    uint64_t key;
    uint64_t offset;    /* where this fragment's data goes in the region */
    uint64_t op_id;     /* the initiator's operation, echoed in the ACK */
    uint64_t imm;       /* with ULN_FRAG_IMM */
    uint64_t op_offset; /* offset of the operation's first byte (for PUT_REMOTE) */
    uint64_t op_len;    /* whole operation length (for PUT_REMOTE) */
};

struct uln_put_notify {
    uint64_t imm;
    uint64_t offset;
    uint64_t len;
};

struct uln_get_req {
    uint64_t key;
    uint64_t offset;
    uint64_t len;
    uint64_t op_id;
};

struct uln_get_resp {
    uint64_t op_id;
    uint64_t op_offset; /* where this piece goes in the initiator's buffer;
                           ULN_RESP_PLACED: the bytes placed, all of them */
    int32_t status;     /* nonzero: the GET is refused, no data follows */
    uint32_t pad_;
};

/* A GET request to a transport whose host service places the answer
 * (uln_transport_ops.get_placed: svc) carries where it goes after its
 * struct uln_get_req: the initiator's own buffer, as the initiator posted
 * it. The service records it from the process's own queue and strips it;
 * the request never travels with it, and no answer from the wire can move
 * those bounds (docs/service.md, "GET data placed"). */
struct uln_get_dst {
    uint64_t addr; /* the first byte of what is asked, in the initiator's space */
    uint64_t len;  /* = the request's len */
};
/* flags of GET_RESP: the data is in the initiator's buffer already (its
 * host service wrote it there); no data follows, op_offset is the count.
 * Taken only from a peer whose transport is get_placed. */
#define ULN_RESP_PLACED 0x1u

struct uln_put_done {
    uint64_t op_id;
    uint64_t imm;
    uint64_t op_offset;
    uint64_t op_len;
    int32_t status; /* nonzero: the PUT was refused */
    uint32_t flags; /* ULN_FRAG_IMM: raise PUT_REMOTE */
    uint32_t life;  /* the peer's life it came from (uln_ep_peer.life) */
    uint32_t pad_;
};

/* An atomic (ulnet.h: uln_atomic) for the target to apply; also what the
 * engine hands a transport that applies one itself (ops->atomic). */
struct uln_atomic_req {
    uint64_t key;
    uint64_t offset;
    uint64_t op_id;
    uint64_t operand;
    uint64_t compare; /* ULN_ATOMIC_CSWAP */
    uint8_t op;       /* enum uln_atomic_op */
    uint8_t width;    /* 4 or 8 */
    uint8_t pad_[6];
};

struct uln_atomic_resp {
    uint64_t op_id;
    uint64_t old;   /* the word before the op (width 4: the low 32 bits) */
    int32_t status; /* nonzero: refused, nothing was written */
    uint32_t pad_;
};

struct uln_ack {
    uint64_t op_id;
    int32_t status;
    uint32_t pad_;
};

#endif
