/*
 * ctx.h - the UDP transport's part of a context (ctx.c): the ports
 * bound before the job forms, the address a rank publishes, and which peers
 * are reached over UDP. the packet transport (its other files) reads what is here.
 */
#ifndef ULN_TRANSPORT_UDP_CTX_H
#define ULN_TRANSPORT_UDP_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "seal/link_seal.h"
#include "transport/transports.h"

/* A 64-bit mixer (murmur3's finalizer): hashes and the transports' draws. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

#define UDP_ADDR_MAGIC 0x31706475u

struct udp_addr { /* what a rank publishes */
    uint32_t magic;
    uint16_t family, port; /* port of endpoint 0; endpoint i is port + i */
    uint16_t nports, pad_;
    uint8_t host_id[16]; /* equal ids: the same host, reachable over shm */
    uint8_t ip[16];
    struct uln_seal_pub seal; /* ULN_SECURE: mode, public key, life, which secret */
};

struct uln_udp { /* ctx->tp_ctx[ULN_TPID_UDP] */
    int *fds;    /* one bound socket per endpoint index, until its endpoint opens */
    unsigned nfds;
    struct udp_addr me;
    struct udp_addr *addrs; /* by rank */
    uint8_t *remote;        /* by rank: UDP_REMOTE = reached over UDP (uln_udp_learn) */
    /* Ranks ever marked UDP_REMOTE: written under the context lock by
     * uln_udp_learn, read by endpoints with no job to see a second peer
     * (uln_udp_solo_check); it only grows. */
    _Atomic unsigned n_remote;
    uint64_t rng;
    /* The link the endpoints took (uln_link_select_open), for ulninfo: "udp" or
     * "xdp", AF_XDP's mode, and why AF_XDP was asked for (xdp) or
     * considered (auto) but not had. */
    char link_kind[8];
    char xdp_mode[32];
    char xdp_why[160];
    struct uln_seal_store *seal; /* ULN_SECURE=auth|encrypt: keys and pairs; else NULL */
};

static inline struct uln_udp *udp_of(const struct uln_ctx *ctx)
{
    return ctx->tp_ctx[ULN_TPID_UDP];
}

/* The transport's settings (settings.c), read at uln_open whether udp is
 * used or not. */
struct uln_udp_params {
    uint32_t window;    /* packets in flight per (endpoint, peer) (ULN_UDP_WINDOW) */
    uint32_t mtu;       /* 0: the interface's (ULN_UDP_MTU) */
    uint32_t dead_ms;   /* a silent peer is dead after this (ULN_UDP_DEAD_MS) */
    uint32_t port;      /* first port, 0: random (ULN_UDP_PORT) */
    int local_rank;     /* place among this host's ranks, -1: unknown (ULN_LOCAL_RANK) */
    int gro;            /* 0: no UDP_GRO (ULN_UDP_GRO) */
    int connect;        /* 0: never connect the socket to a lone peer (ULN_UDP_CONNECT) */
    int connect_nojob;  /* 1: with no job too (ULN_UDP_CONNECT_NOJOB) */
    const char *addr;   /* NULL or the address to publish and bind (ULN_UDP_ADDR) */
    const char *ifname; /* NULL or the interface to take it from (ULN_UDP_IF) */
};
extern const struct uln_settings_group uln_udp_settings;

static inline const struct uln_udp_params *udp_params(const struct uln_ctx *ctx)
{
    return uln_params_block(&ctx->p, &uln_udp_settings);
}

/* The transport's context ops (uln_tp_udp): bind the ports and publish our
 * address; once every rank's is known, learn which peers UDP reaches. */
int uln_udp_open(struct uln_ctx *ctx, void *slot_addr, size_t slot_len);
int uln_udp_choose(struct uln_ctx *ctx);
int uln_udp_learn(struct uln_ctx *ctx, int peer);
enum { UDP_REMOTE = 1, UDP_SUPERSEDED = 2 }; /* uln_udp.remote[] besides 0 */
/* peer.c: peer `now` is a later life of `old` on the same ports, as ep found
 * (its packets): `old` is dead there, and ep's link entry for that address
 * is `now`'s. */
struct uln_ep;
void uln_udp_supersede(struct uln_ep *ep, int old, int now);
/* ctx.c: the same for every older life at now's address. */
void uln_udp_supersede_older(struct uln_ep *ep, int now);
size_t uln_udp_addr_pack(const struct uln_ctx *ctx, uint8_t *out, size_t room);
int uln_udp_addr_unpack(const uint8_t *in, size_t len, uint64_t host, void *slot, size_t slot_len);
int uln_udp_addr_str(const uint8_t *in, size_t len, char *out, size_t room);
int uln_udp_short_pack(const uint8_t *part, size_t len, uint8_t *out);
size_t uln_udp_short_unpack(const uint8_t *in, bool sealed, uint8_t *out, size_t room);
void uln_udp_close(struct uln_ctx *ctx);
/* ULN_SECURE: wrap endpoint ep_index's link in a sealing one (refusals
 * counted in *refused; on failure *io is closed), and tell it the pair of
 * its link id `id`: peer's endpoint dst_ep. Both do nothing when off. */
struct uln_link;
int uln_udp_seal_wrap(struct uln_ctx *ctx, unsigned ep_index, _Atomic uint64_t *refused,
                      struct uln_link **io);
int uln_udp_seal_peer(struct uln_ctx *ctx, struct uln_link *io, int id, int peer, unsigned dst_ep);
#endif
