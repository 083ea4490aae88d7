/*
 * udp_ctx.h - the UDP transport's part of a context (udp_ctx.c): the ports
 * bound before the job forms, the address a rank publishes, and which peers
 * are reached over UDP. udp.c, the packet transport, reads what is here.
 */
#ifndef ULN_TRANSPORT_UDP_CTX_H
#define ULN_TRANSPORT_UDP_CTX_H

#include <stdint.h>

/* A 64-bit mixer (murmur3's finalizer): hashes and the transports' draws. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

#define UDP_ADDR_OFF   64u /* where our part of the board slot starts (shm has 0..63) */
#define UDP_ADDR_MAGIC 0x31706475u

struct udp_addr { /* what a rank publishes */
    uint32_t magic;
    uint16_t family, port; /* port of endpoint 0; endpoint i is port + i */
    uint16_t nports, pad_;
    uint8_t host_id[16]; /* equal ids: the same host, reachable over shm */
    uint8_t ip[16];
};

struct uln_udp {
    int *fds; /* one bound socket per endpoint index, until its endpoint opens */
    unsigned nfds;
    struct udp_addr me;
    struct udp_addr *addrs; /* by rank */
    uint64_t rng;
};

#endif
