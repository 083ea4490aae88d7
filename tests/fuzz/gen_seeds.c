/*
 * gen_seeds.c - writes the fuzz targets' seed inputs: small, valid
 * conversations in each target's record format (see the targets' headers),
 * built from the packet format of docs/protocol.md (udp_wire.h) and the ring
 * messages of src/core/wire.h. Seeds start the fuzzer inside the protocol
 * instead of at its front door.
 *
 *   fuzz_seeds DIR   writes DIR/<target>/seed-* for each target
 *
 * tests/fuzz/run.sh --seeds regenerates tests/fuzz/corpus/ with it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ring.h"
#include "core/wire.h"
#include "udp_wire.h"
#include "../frame_sums.h"
#include "names.h"

/* Record modifiers, as the targets define them. */
#define M_TAG   0x01u
#define M_JOB   0x02u
#define M_EPOCH 0x04u
#define M_SEQ   0x08u
#define M_OPID  0x10u
#define M_RKEY  0x20u
#define M_POLL  0x80u

/* fuzz_udp_rx kinds */
enum { U_DGRAM, U_STRANGER, U_RESTART, U_POLL, U_POST, U_HOLD };
/* fuzz_engine_rx kinds */
enum { E_CH0, E_CH1, E_POLL, E_POST, E_HOLD };
/* fz_post's first byte */
enum { P_NAP, P_PUT, P_PUT_IMM, P_GET, P_FLUSH, P_ATOMIC };

#define PEER_EPOCH 0x70000000u /* rank 1's life in the seeds */
#define REG_RW     0u          /* with M_RKEY: key % 4 picks the region */
#define REG_RO     1u
#define REG_WO     2u
#define REG_STALE  3u

static uint8_t in[1 << 16];
static size_t in_len;
static const char *dir;

static void rec(unsigned kind, unsigned mods, const void *b, size_t n)
{
    in[in_len++] = (uint8_t)kind;
    in[in_len++] = (uint8_t)mods;
    in[in_len++] = (uint8_t)n;
    in[in_len++] = (uint8_t)(n >> 8);
    memcpy(in + in_len, b, n);
    in_len += n;
}

/* The input built so far, as DIR/target/file. */
static void save_as(const char *target, const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, file);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(in, 1, in_len, f) != in_len || fclose(f) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        exit(1);
    }
    in_len = 0;
}

static void save(const char *target, const char *name)
{
    char file[256];
    snprintf(file, sizeof file, "seed-%s", name);
    save_as(target, file);
}

/* ---- fuzz_udp_rx ---------------------------------------------------------------- */

static uint8_t pkt[2048];
static uint8_t payload[4096];

static void dgram(unsigned mods, const struct uw_hdr *h, const void *ext, size_t elen,
                  const void *p, size_t plen)
{
    rec(U_DGRAM, mods, pkt, uw_build(pkt, h, ext, elen, p, plen));
}

static void ctrl(unsigned mods, uint32_t epoch, unsigned flags, uint32_t ack, uint16_t credit,
                 uint64_t sack, uint32_t lose)
{
    struct uw_hdr h = {.vt = uw_vt(UW_CTRL),
                       .flags = (uint8_t)flags,
                       .credit = credit,
                       .seq = epoch,
                       .ack = ack,
                       .offset = sack};
    struct uw_ctrl b = {.lose = lose, .rank = 1};
    dgram(mods | M_JOB, &h, &b, sizeof b, NULL, 0);
}

/* Rank 1 says hello, we answer (poll), rank 1 gives us credit. */
static void handshake(void)
{
    ctrl(M_POLL, PEER_EPOCH, 0, 0, 0, 0, 0);
    ctrl(M_EPOCH | M_SEQ | M_POLL, 0, UW_FB, 0, 16, 0, 0);
}

/* A data packet from rank 1, next in order (seq 0 relative to it). */
static void data(unsigned type, unsigned flags, uint64_t key, uint64_t off, const void *ext,
                 size_t elen, const void *p, size_t plen, unsigned mods)
{
    struct uw_hdr h = {
        .vt = uw_vt(type), .flags = (uint8_t)(UW_DATA | flags), .key = key, .offset = off};
    dgram(M_TAG | M_SEQ | M_POLL | mods, &h, ext, elen, p, plen);
}

static void put(uint64_t reg, uint64_t op_id, uint64_t op_off, uint64_t op_len, uint64_t frag_off,
                size_t n, unsigned flags)
{
    struct uw_put_ext x = {.op_id = op_id, .op_offset = op_off, .op_len = op_len, .imm = 0x1d};
    data(UW_PUT, flags, reg, frag_off, &x, (size_t)uw_ext_len(UW_PUT, flags), payload, n, M_RKEY);
}

/* segs: 0 for the plain call, else 1 + the list's segment count (b[19]). */
static void post_segs(unsigned op, uint16_t len, uint64_t roff, uint64_t rkey, unsigned segs)
{
    uint8_t b[20];
    b[0] = (uint8_t)op;
    memcpy(b + 1, &len, 2);
    memcpy(b + 3, &roff, 8);
    memcpy(b + 11, &rkey, 8);
    b[19] = (uint8_t)(segs - 1);
    rec(U_POST, M_POLL, b, segs ? 20 : 19);
}

static void post(unsigned op, uint16_t len, uint64_t roff, uint64_t rkey)
{
    post_segs(op, len, roff, rkey, 0);
}

static void udp_seeds(void)
{
    const char *T = "fuzz_udp_rx";
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i * 13 + 5);

    handshake();
    save(T, "handshake");

    handshake();
    data(UW_NAP, UW_LAST, 100, 0, NULL, 0, payload, 100, 0);
    save(T, "nap");

    /* A NAP of three packets, the second arriving last. */
    handshake();
    data(UW_NAP, 0, 3000, 0, NULL, 0, payload, 1400, 0);
    {
        struct uw_hdr h = {
            .vt = uw_vt(UW_NAP), .flags = UW_DATA | UW_LAST, .seq = 1, .key = 3000, .offset = 2800};
        dgram(M_TAG | M_SEQ | M_POLL, &h, NULL, 0, payload + 2800, 200);
    }
    data(UW_NAP, 0, 3000, 1400, NULL, 0, payload + 1400, 1400, 0);
    save(T, "nap-3-packets");

    handshake();
    put(REG_RW, 7, 100, 2000, 100, 1000, 0);
    put(REG_RW, 7, 100, 2000, 1100, 1000, UW_LAST | UW_IMM);
    save(T, "put");

    handshake();
    put(REG_RO, 8, 0, 64, 0, 64, UW_LAST);                          /* no write right */
    put(REG_STALE, 9, 0, 64, 0, 64, UW_LAST);                       /* deregistered */
    put(REG_RW, 10, 4096, 8, 4096, 8, UW_LAST);                     /* past the end */
    put(REG_RW, 11, UINT64_MAX - 3, 8, UINT64_MAX - 3, 4, UW_LAST); /* wraps */
    put(REG_RW, 12, 0, 64, 100, 8, UW_LAST);                        /* fragment outside its op */
    save(T, "put-refused");

    handshake();
    {
        struct uw_get_req_ext g = {.len = 1000, .op_id = 21};
        data(UW_GET_REQ, 0, REG_RW, 100, &g, sizeof g, NULL, 0, M_RKEY);
        ctrl(M_EPOCH | M_SEQ | M_POLL, 0, UW_FB, 1, 16, 0, 0); /* ack our answer */
        g = (struct uw_get_req_ext){.len = 64, .op_id = 22};
        data(UW_GET_REQ, 0, REG_WO, 0, &g, sizeof g, NULL, 0, M_RKEY); /* no read right */
    }
    save(T, "get-req");

    post(P_GET, 1000, 0, 0x1234);
    handshake();
    {
        struct uw_get_resp_ext r = {0};
        data(UW_GET_RESP, 0, 0, 0, &r, sizeof r, payload, 600, M_OPID);
        data(UW_GET_RESP, 0, 0, 600, &r, sizeof r, payload, 400, M_OPID);
    }
    save(T, "get-resp");

    post(P_PUT, 100, 0, 0x1234);
    post(P_PUT_IMM, 3000, 0, 0x1234);
    handshake();
    rec(U_POLL, 3, NULL, 0);
    data(UW_ACK, 0, 0, 0, NULL, 0, NULL, 0, M_OPID);
    data(UW_ACK, 0, 1, (uint64_t)(int64_t)-ENOKEY, NULL, 0, NULL, 0, M_OPID);
    save(T, "put-ack");

    /* Lists: a GET scattered into 5 segments as its answer's pieces come,
     * a PUT gathered from 16 and one from none, acknowledged. */
    post_segs(P_GET, 1000, 0, 0x1234, 1 + 5);
    handshake();
    {
        struct uw_get_resp_ext r = {0};
        data(UW_GET_RESP, 0, 0, 0, &r, sizeof r, payload, 600, M_OPID);
        data(UW_GET_RESP, 0, 0, 600, &r, sizeof r, payload, 400, M_OPID);
    }
    save(T, "getv-resp");
    post_segs(P_PUT, 3000, 0, 0x1234, 1 + 16);
    post_segs(P_PUT_IMM, 0, 0, 0x1234, 1 + 0);
    post_segs(P_NAP, 300, 0, 0, 1 + 3);
    handshake();
    rec(U_POLL, 3, NULL, 0);
    data(UW_ACK, 0, 0, 0, NULL, 0, NULL, 0, M_OPID);
    data(UW_ACK, 0, 1, 0, NULL, 0, NULL, 0, M_OPID);
    save(T, "putv-ack");

    /* The ACK of our PUT riding in front of rank 1's reply (a bundle). */
    post(P_PUT, 100, 0, 0x1234);
    handshake();
    rec(U_POLL, 3, NULL, 0);
    {
        struct uw_hdr a = {.vt = uw_vt(UW_ACK), .flags = UW_DATA | UW_MORE};
        struct uw_hdr n = {.vt = uw_vt(UW_NAP), .flags = UW_DATA | UW_LAST, .seq = 1, .key = 8};
        size_t len = uw_build(pkt, &a, NULL, 0, NULL, 0);
        len += uw_build(pkt + len, &n, NULL, 0, payload, 8);
        rec(U_DGRAM, M_TAG | M_SEQ | M_OPID | M_POLL, pkt, len);
    }
    save(T, "put-ack-bundled");

    /* Three of rank 1's NAPs in one datagram (a bundle of small packets). */
    handshake();
    {
        size_t len = 0;
        for (unsigned i = 0; i < 3; i++) {
            struct uw_hdr n = {.vt = uw_vt(UW_NAP),
                               .flags = (uint8_t)(UW_DATA | UW_LAST | (i < 2 ? UW_MORE : 0)),
                               .seq = i,
                               .key = 8 + i};
            len += uw_build(pkt + len, &n, NULL, 0, payload, 8 + i);
        }
        rec(U_DGRAM, M_TAG | M_SEQ | M_POLL, pkt, len);
    }
    save(T, "nap-bundle");

    /* Rank 1's two small PUTs, then a NAP, in one datagram. */
    handshake();
    {
        size_t len = 0;
        for (unsigned i = 0; i < 2; i++) {
            struct uw_hdr h = {.vt = uw_vt(UW_PUT),
                               .flags = UW_DATA | UW_LAST | UW_MORE,
                               .seq = i,
                               .key = REG_RW,
                               .offset = 8 * i};
            struct uw_put_ext x = {.op_id = 40 + i, .op_offset = 8 * i, .op_len = 8};
            len += uw_build(pkt + len, &h, &x, 24, payload, 8);
        }
        struct uw_hdr n = {.vt = uw_vt(UW_NAP), .flags = UW_DATA | UW_LAST, .seq = 2, .key = 8};
        len += uw_build(pkt + len, &n, NULL, 0, payload, 8);
        rec(U_DGRAM, M_TAG | M_SEQ | M_RKEY | M_POLL, pkt, len);
    }
    save(T, "put-bundle");

    /* Rank 1's atomics on our regions: applied, misaligned, bounds, no
     * right, an unknown op; then an answer to an atomic of ours (len 2:
     * CSWAP, 8 bytes). */
    handshake();
    {
        struct uw_atomic_req_ext x = {.op_id = 31, .operand = 5, .op = 1, .width = 8};
        data(UW_ATOMIC_REQ, 0, REG_RW, 64, &x, sizeof x, NULL, 0, M_RKEY);
        ctrl(M_EPOCH | M_SEQ | M_POLL, 0, UW_FB, 1, 16, 0, 0); /* ack our answer */
        x.op_id = 32, x.width = 4;
        data(UW_ATOMIC_REQ, 0, REG_RW, 66, &x, sizeof x, NULL, 0, M_RKEY);
        x.op_id = 33;
        data(UW_ATOMIC_REQ, 0, REG_RW, 4096, &x, sizeof x, NULL, 0, M_RKEY);
        x.op_id = 34, x.op = 3;
        data(UW_ATOMIC_REQ, 0, REG_RO, 0, &x, sizeof x, NULL, 0, M_RKEY);
        x.op_id = 35, x.op = 99;
        data(UW_ATOMIC_REQ, 0, REG_RW, 0, &x, sizeof x, NULL, 0, M_RKEY);
    }
    save(T, "atomic-req");

    post(P_ATOMIC, 2, 8, 0x1234);
    handshake();
    {
        struct uw_atomic_resp_ext r = {0};
        data(UW_ATOMIC_RESP, 0, 0, 0x1122334455667788ull, &r, sizeof r, NULL, 0, M_OPID);
    }
    save(T, "atomic-resp");

    /* Our NAPs in flight; rank 1's feedback acknowledges some, reports one
     * lost (SACK + LOSE), then probes. */
    handshake();
    for (int i = 0; i < 4; i++)
        post(P_NAP, 200, 0, 0);
    ctrl(M_EPOCH | M_SEQ | M_POLL, 0, UW_FB | UW_LOSE, 1, 16, 0x3, 1);
    ctrl(M_EPOCH | M_SEQ | M_POLL, 0, UW_PROBE, 0, 0, 0, 0);
    save(T, "feedback");

    /* Rank 1 restarts (a hello from a new life), and we do too. */
    handshake();
    data(UW_NAP, UW_LAST, 10, 0, NULL, 0, payload, 10, 0);
    ctrl(M_POLL, PEER_EPOCH + 77, 0, 0, 0, 0, 0);
    rec(U_RESTART, M_POLL, NULL, 0);
    ctrl(M_POLL, PEER_EPOCH + 78, 0, 0, 0, 0, 0);
    save(T, "restart");

    /* Refused at the door. */
    handshake();
    rec(U_STRANGER, M_POLL, pkt,
        uw_build(pkt, &(struct uw_hdr){.vt = uw_vt(UW_CTRL)}, NULL, 0, NULL, 0));
    {
        struct uw_hdr h = {.vt = uw_vt(UW_CTRL), .seq = PEER_EPOCH, .key = 0x5ca1ab1e};
        struct uw_ctrl b = {.rank = 1};
        rec(U_DGRAM, M_POLL, pkt, uw_build(pkt, &h, &b, sizeof b, NULL, 0)); /* job key */
        h = (struct uw_hdr){
            .vt = uw_vt(UW_NAP), .flags = UW_DATA | UW_LAST, .tag = 0xbad, .key = 1};
        rec(U_DGRAM, M_SEQ | M_POLL, pkt, uw_build(pkt, &h, NULL, 0, payload, 1)); /* tag */
        rec(U_DGRAM, M_POLL, pkt, 20);                                             /* short */
        h.vt = 2 << 4 | UW_NAP;
        rec(U_DGRAM, M_TAG | M_SEQ | M_POLL, pkt, uw_build(pkt, &h, NULL, 0, NULL, 0));
        h.vt = uw_vt(11); /* no such type */
        rec(U_DGRAM, M_TAG | M_SEQ | M_POLL, pkt, uw_build(pkt, &h, NULL, 0, NULL, 0));
        h = (struct uw_hdr){.vt = uw_vt(UW_PUT), .flags = UW_DATA};
        rec(U_DGRAM, M_TAG | M_SEQ | M_POLL, pkt, sizeof h + 10); /* extension cut short */
    }
    save(T, "refused");
}

/* Inputs that once broke a check (regress-*), written by hand where the
 * fuzzer's own input is less clear. */
static void udp_regressions(void)
{
    const char *T = "fuzz_udp_rx";
    /* op id 2^64 - 1: "op_id + 1" was 0, which the refusal memory took for
     * "the PUT refused last": placed without any check, PUT_REMOTE raised
     * for a range outside every region. */
    handshake();
    put(REG_RO, UINT64_MAX, 1ull << 40, 1ull << 20, 1ull << 40, 0, UW_LAST | UW_IMM);
    save_as(T, "regress-put-op-id-max");

    /* A status that is no negative errno, in GET data and in an ACK: it
     * reached the application's completion as it was. */
    post(P_GET, 100, 0, 0x1234);
    post(P_PUT, 100, 0, 0x1234);
    handshake();
    {
        struct uw_get_resp_ext r = {.status = 117032567};
        data(UW_GET_RESP, 0, 0, 0, &r, sizeof r, NULL, 0, M_OPID);
        data(UW_ACK, 0, 1, 5, NULL, 0, NULL, 0, M_OPID);
    }
    save_as(T, "regress-answer-status");
}

/* ---- fuzz_engine_rx --------------------------------------------------------------- */

static void msg(unsigned ch, unsigned mods, uint8_t type, uint8_t flags, const void *p, size_t n)
{
    uint8_t b[8192];
    b[0] = type;
    b[1] = flags;
    memcpy(b + 2, p, n);
    rec(ch, mods | M_POLL, b, n + 2);
}

static void frag(uint64_t reg, uint64_t op_id, uint64_t op_off, uint64_t op_len, uint64_t off,
                 size_t n, uint8_t flags)
{
    uint8_t b[8192];
    struct uln_put_frag f = {.key = reg,
                             .offset = off,
                             .op_id = op_id,
                             .imm = 0x1d,
                             .op_offset = op_off,
                             .op_len = op_len};
    memcpy(b, &f, sizeof f);
    memcpy(b + sizeof f, payload, n);
    msg(E_CH0, M_RKEY, ULN_MSG_PUT_FRAG, flags, b, sizeof f + n);
}

/* segs as post_segs. */
static void engine_post_segs(unsigned op, uint16_t len, unsigned segs)
{
    uint8_t b[20] = {(uint8_t)op};
    memcpy(b + 1, &len, 2);
    b[19] = (uint8_t)(segs - 1);
    rec(E_POST, M_POLL, b, segs ? 20 : 19);
}

static void engine_post(unsigned op, uint16_t len)
{
    engine_post_segs(op, len, 0);
}

/* The answer to our 1000-byte GET in two pieces, 600 and 400 bytes. */
static void engine_get_answer(void)
{
    uint8_t b[2048];
    struct uln_get_resp r = {.op_id = 0, .op_offset = 0};
    memcpy(b, &r, sizeof r);
    memcpy(b + sizeof r, payload, 600);
    msg(E_CH0, M_OPID, ULN_MSG_GET_RESP, 0, b, sizeof r + 600);
    r.op_offset = 600;
    memcpy(b, &r, sizeof r);
    msg(E_CH0, M_OPID, ULN_MSG_GET_RESP, 0, b, sizeof r + 400);
}

static void engine_seeds(void)
{
    const char *T = "fuzz_engine_rx";

    msg(E_CH0, 0, ULN_MSG_NAP, 0, payload, 100);
    msg(E_CH0, 0, ULN_MSG_NAP, 0, payload, 4096);
    msg(E_CH0, 0, ULN_MSG_NAP, 0, payload, 0);
    save(T, "nap");

    frag(REG_RW, 5, 64, 3000, 64, 2000, 0);
    frag(REG_RW, 5, 64, 3000, 2064, 1000, ULN_FRAG_LAST | ULN_FRAG_IMM);
    save(T, "put-frag");

    frag(REG_RO, 6, 0, 64, 0, 64, ULN_FRAG_LAST);
    frag(REG_STALE, 7, 0, 64, 0, 64, ULN_FRAG_LAST);
    frag(REG_RW, 8, 4000, 200, 4000, 200, ULN_FRAG_LAST);
    frag(REG_RW, 9, UINT64_MAX - 3, 8, UINT64_MAX - 3, 4, ULN_FRAG_LAST);
    frag(REG_RW, 10, 0, 64, 60, 8, ULN_FRAG_LAST);
    save(T, "put-frag-refused");

    {
        struct uln_put_notify n = {.imm = 3, .offset = 8, .len = 16};
        msg(E_CH0, 0, ULN_MSG_PUT_NOTIFY, 0, &n, sizeof n);
    }
    save(T, "put-notify");

    engine_post(P_GET, 1000);
    engine_get_answer();
    save(T, "get-resp");

    engine_post_segs(P_GET, 1000, 1 + 7);
    engine_get_answer();
    save(T, "getv-resp");

    engine_post(P_PUT, 500);
    engine_post(P_PUT_IMM, 20);
    {
        struct uln_ack a = {.op_id = 0};
        msg(E_CH0, M_OPID, ULN_MSG_ACK, 0, &a, sizeof a);
        a = (struct uln_ack){.op_id = 1, .status = -EACCES};
        msg(E_CH0, M_OPID, ULN_MSG_ACK, 0, &a, sizeof a);
    }
    save(T, "ack");

    {
        struct uln_get_req g = {.key = REG_RW, .offset = 10, .len = 3000, .op_id = 4};
        msg(E_CH1, M_RKEY, ULN_MSG_GET_REQ, 0, &g, sizeof g);
        g = (struct uln_get_req){.key = REG_WO, .offset = 0, .len = 8, .op_id = 5};
        msg(E_CH1, M_RKEY, ULN_MSG_GET_REQ, 0, &g, sizeof g);
        g = (struct uln_get_req){.key = REG_RW, .offset = 8, .len = UINT64_MAX - 4, .op_id = 6};
        msg(E_CH1, M_RKEY, ULN_MSG_GET_REQ, 0, &g, sizeof g);
        msg(E_CH1, M_RKEY, ULN_MSG_GET_REQ, 0, &g, sizeof g - 8); /* short */
    }
    save(T, "get-req");

    {
        struct uln_atomic_req a = {
            .key = REG_RW, .offset = 16, .op_id = 7, .operand = 9, .op = 1, .width = 8};
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        a.offset = 20, a.width = 4, a.op = 10, a.op_id = 8; /* signed max, 32 bits */
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        a.offset = 4, a.width = 8, a.op_id = 9; /* misaligned */
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        a.offset = 4092, a.op_id = 10; /* half outside */
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        a.key = REG_WO, a.offset = 0, a.op_id = 11; /* no atomic right */
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        a.key = REG_RW, a.op = 0, a.op_id = 12; /* no such op */
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a);
        msg(E_CH1, M_RKEY, ULN_MSG_ATOMIC_REQ, 0, &a, sizeof a - 8); /* short */
    }
    save(T, "atomic-req");

    engine_post(P_ATOMIC, 2);
    engine_post(P_ATOMIC, 0x104); /* 32-bit AND */
    {
        struct uln_atomic_resp r = {.op_id = 0, .old = 0x1122334455667788ull};
        msg(E_CH0, M_OPID, ULN_MSG_ATOMIC_RESP, 0, &r, sizeof r);
        r = (struct uln_atomic_resp){.op_id = 1, .status = -EDOM};
        msg(E_CH0, M_OPID, ULN_MSG_ATOMIC_RESP, 0, &r, sizeof r);
        msg(E_CH0, M_OPID, ULN_MSG_ATOMIC_RESP, 0, &r, sizeof r - 8); /* short */
    }
    save(T, "atomic-resp");

    {
        struct uln_put_done d = {.op_id = 1, .flags = ULN_FRAG_IMM};
        msg(E_CH0, 0, ULN_MSG_PUT_DONE, 0, &d, sizeof d); /* only our UDP path writes these */
        msg(E_CH0, 0, 0x42, 0, payload, 30);
        msg(E_CH0, 0, ULN_MSG_GET_REQ, 0, payload, 32); /* on the wrong channel */
        msg(E_CH1, 0, ULN_MSG_NAP, 0, payload, 32);
        rec(E_HOLD, 0, NULL, 0);
        for (int i = 0; i < 8; i++)
            msg(E_CH0, 0, ULN_MSG_NAP, 0, payload, 4000);
    }
    save(T, "odd");

    /* Regression: statuses that are no negative errno (see udp's). */
    engine_post(P_GET, 100);
    engine_post(P_PUT, 100);
    {
        struct uln_get_resp r = {.op_id = 0, .status = INT32_MIN};
        msg(E_CH0, M_OPID, ULN_MSG_GET_RESP, 0, &r, sizeof r);
        struct uln_ack a = {.op_id = 1, .status = 5};
        msg(E_CH0, M_OPID, ULN_MSG_ACK, 0, &a, sizeof a);
    }
    save_as(T, "regress-answer-status");
}

/* ---- fuzz_addr ------------------------------------------------------------------- */

/* An address as peer.c lays it out (0xa7, version 1, length, parts; pid,
 * key, host), with the parts given: shm's inbox descriptor, udp's family,
 * port count, first port and IP. */
static void address(const char *name, bool shm, int family)
{
    uint8_t *a = in;
    uint32_t pid = 4242, fd = 7;
    uint64_t key = 0x9c0e5a11d00df1edull, host = 0x2b7f00c0ffee0008ull;
    uint16_t port = 40000;
    size_t n = 24;
    a[3] = 0;
    if (shm) {
        a[n] = 0; /* ULN_TPID_SHM */
        a[n + 1] = 4;
        memcpy(a + n + 2, &fd, 4);
        n += 6;
        a[3]++;
    }
    if (family) {
        size_t ip = family == 4 ? 4 : 16;
        a[n] = 1; /* ULN_TPID_UDP */
        a[n + 1] = (uint8_t)(4 + ip);
        a[n + 2] = (uint8_t)family;
        a[n + 3] = 4; /* ports */
        memcpy(a + n + 4, &port, 2);
        for (size_t i = 0; i < ip; i++)
            a[n + 6 + i] = (uint8_t)(family == 4 ? 10 + i : i);
        n += 6 + ip;
        a[3]++;
    }
    a[0] = 0xa7;
    a[1] = 1;
    a[2] = (uint8_t)n;
    memcpy(a + 4, &pid, 4);
    memcpy(a + 8, &key, 8);
    memcpy(a + 16, &host, 8);
    in_len = n;
    save("fuzz_addr", name);
}

/* The short form of address("shm-udp4") (peer.c): magic 0xa8, a 24-bit pid,
 * key, 48-bit host, a 16-bit inbox descriptor, udp's part without its family. */
static void short_address(void)
{
    uint8_t *a = in;
    uint32_t pid = 4242;
    uint16_t fd = 7, port = 40000;
    uint64_t key = 0x9c0e5a11d00df1edull, host = 0x7f00c0ffee0008ull;
    memset(a, 0, ULN_ADDR_SHORT);
    a[0] = 0xa8;
    memcpy(a + 1, &pid, 3);
    memcpy(a + 4, &key, 8);
    memcpy(a + 12, &host, 6);
    memcpy(a + 18, &fd, 2);
    a[20] = 4; /* ports */
    memcpy(a + 21, &port, 2);
    for (int i = 0; i < 4; i++)
        a[23 + i] = (uint8_t)(10 + i);
    in_len = ULN_ADDR_SHORT;
}

static void addr_seeds(void)
{
    short_address();
    save("fuzz_addr", "short");
    address("shm-udp4", true, 4);
    address("shm-udp6", true, 6);
    address("shm", true, 0);
    address("udp4", false, 4);
}

/* ---- fuzz_fi_name ---------------------------------------------------------------- */

/* A name service answer (prov/names.h) around the address address() made
 * last (still in `in`), of endpoint ep in its life gen; cut to len bytes. */
static void name_answer(const char *name, uint8_t ep, uint16_t gen, uint8_t flags, size_t len)
{
    struct ulnfi_names_msg m = {.magic = htonl(ULNFI_NAMES_MAGIC),
                                .version = htons(ULNFI_NAMES_VERSION),
                                .name = {.magic = ULNFI_ADDR_MAGIC,
                                         .version = ULNFI_ADDR_VERSION,
                                         .ep = ep,
                                         .flags = flags,
                                         .gen = gen}};
    if (ep != ULNFI_EP_ANY) {
        m.name.ulen = (uint8_t)in[2];
        memcpy(m.name.uaddr, in, in[2]);
    }
    m.len = htons((uint16_t)ulnfi_name_len(&m.name));
    memcpy(in, &m, sizeof(m));
    in_len = len;
    save("fuzz_fi_name", name);
}

static void name_seeds(void)
{
    address("shm-udp4", true, 4);
    name_answer("shm-udp4", 0, 1, 0, sizeof(struct ulnfi_names_msg));
    address("shm-udp6", true, 6);
    name_answer("shm-udp6", 3, 7, 0, sizeof(struct ulnfi_names_msg));
    address("udp4", false, 4);
    name_answer("udp4", 63, 65535, 0, sizeof(struct ulnfi_names_msg));
    /* refused: a source (fi_getinfo's src_addr) is no endpoint's name; cut short */
    name_answer("source-name", ULNFI_EP_ANY, 0, ULNFI_AF_SVC, sizeof(struct ulnfi_names_msg));
    name_answer("short", ULNFI_EP_ANY, 0, ULNFI_AF_SVC, 28);
    /* names as fi_av_insert takes them: a full one, and a short one (32 bytes) */
    address("shm-udp4", true, 4);
    name_answer("answer-ep2", 2, 9, 0, sizeof(struct ulnfi_names_msg));
    memmove(in, in + offsetof(struct ulnfi_names_msg, name), ULNFI_NAME_FULL);
    in_len = ULNFI_NAME_FULL;
    save("fuzz_fi_name", "full-name");
    short_address();
    uint8_t n[ULNFI_NAME_SHORT] = {ULNFI_SHORT_MARK | ULN_ADDR_SHORT, 2, 9, 0};
    memcpy(n + ULNFI_SHORT_HDR, in, ULN_ADDR_SHORT);
    memcpy(in, n, sizeof(n));
    in_len = sizeof(n);
    save("fuzz_fi_name", "short-name");
}

/* ---- fuzz_xdp_frame -------------------------------------------------------------- */

/* mods, then an Ethernet/IPv4/UDP frame from 10.0.0.1:4660 to the target's
 * 10.0.0.2:22136 with a payload of n bytes: ihl 5 words (or more, options
 * of NOPs), a UDP checksum or none, pad bytes after the datagram. */
static void frame(const char *name, unsigned mods, unsigned ihl_words, size_t n, bool udp_sum,
                  size_t pad)
{
    uint8_t *f = in + 1;
    size_t ihl = ihl_words * 4u, len = 14 + ihl + 8 + n;
    memset(f, 0, len + pad);
    memcpy(f, "\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00", 14);
    uint8_t *ip = f + 14, *udp = ip + ihl;
    ip[0] = (uint8_t)(0x40 | ihl_words);
    ip[2] = (uint8_t)((ihl + 8 + n) >> 8), ip[3] = (uint8_t)(ihl + 8 + n);
    ip[6] = 0x40; /* don't fragment */
    ip[8] = 64, ip[9] = 17;
    memcpy(ip + 12, "\x0a\0\0\x01\x0a\0\0\x02", 8);
    memset(ip + 20, 1, ihl - 20);
    udp[0] = 0x12, udp[1] = 0x34, udp[2] = 0x56, udp[3] = 0x78;
    udp[4] = (uint8_t)((8 + n) >> 8), udp[5] = (uint8_t)(8 + n);
    for (size_t i = 0; i < n; i++)
        udp[8 + i] = (uint8_t)(i * 13 + 1);
    frame_fix_sums(f);
    if (!udp_sum) udp[6] = udp[7] = 0;
    in[0] = (uint8_t)mods;
    in_len = 1 + len + pad;
    save("fuzz_xdp_frame", name);
}

static void frame_seeds(void)
{
    frame("datagram", 0, 5, 40, true, 0);
    frame("empty-padded", 0, 5, 0, true, 18);
    frame("options", 0, 7, 100, true, 0);
    frame("no-udp-sum", 0, 5, 1, false, 0);
    frame("fixed-by-mods", 3, 5, 1200, true, 0);
}

/* ---- fuzz_seal_open --------------------------------------------------------------- */

/* A record of fuzz_seal_open: op, u16 length, bytes. */
static void seal_rec(unsigned op, const void *b, size_t n)
{
    in[in_len++] = (uint8_t)op;
    in[in_len++] = (uint8_t)n;
    in[in_len++] = (uint8_t)(n >> 8);
    memcpy(in + in_len, b, n);
    in_len += n;
}

/* One input per setting (auth/encrypt x AES-GCM/ChaCha20-Poly1305): true
 * datagrams of a NAP's and an MTU's size, one kept back and replayed (a
 * reorder, then a replay), one with a bit flipped, one cut short, one grown,
 * and a datagram off the wire. */
static void seal_seeds(void)
{
    static const char *const names[] = {"auth-gcm", "encrypt-gcm", "auth-chacha", "encrypt-chacha"};
    uint8_t small[44], big[1448], wire[60];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 13 + 5);
    memcpy(small, big, sizeof small);
    memset(wire, 0x5a, sizeof wire);
    for (unsigned s = 0; s < 4; s++) {
        in[in_len++] = (uint8_t)s;
        seal_rec(1, small, sizeof small);                   /* true */
        seal_rec(3, big, sizeof big);                       /* kept back */
        seal_rec(1, big, sizeof big);                       /* true, a later counter */
        seal_rec(2, (uint8_t[]){1}, 1);                     /* the kept one: reordered, opens */
        seal_rec(2, (uint8_t[]){1}, 1);                     /* again: a replay */
        seal_rec(1 | 1 << 2 | 3 << 4, small, sizeof small); /* a bit flipped */
        seal_rec(1 | 2 << 2, big, sizeof big);              /* cut short */
        seal_rec(1 | 3 << 2, small, sizeof small);          /* grown */
        seal_rec(0, wire, sizeof wire);                     /* forged */
        save("fuzz_seal_open", names[s]);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    mkdir(dir, 0755);
    udp_seeds();
    udp_regressions();
    engine_seeds();
    addr_seeds();
    name_seeds();
    frame_seeds();
    seal_seeds();
    return 0;
}
