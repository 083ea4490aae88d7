/*
 * link_seal.h - ULN_SECURE on the UDP transport: a context's sealing state
 * (struct uln_seal_store), and a link (transport/link.h) that wraps the
 * endpoint's own: it seals every datagram right before the link below sends
 * it and opens every one right after the link below received it, before the
 * reliability layer sees a byte. A datagram that does not open is released
 * there and counted (refused_auth): never delivered, never acknowledged, and
 * it cannot reset a peer, since the layers that could never see it.
 *
 * A datagram from a peer that does not open may come from a new life of it
 * (restarted as the same rank, with a new key pair): the sealing link then
 * looks at what the peer publishes now (at most every 10 ms a peer), and if
 * that changed - and fits the job - makes the pair anew. Only the board can
 * change keys; a forger's datagrams change nothing but cost that look.
 *
 * Pairs (seal.h) are kept by the context per (endpoint index, peer), not by
 * the link: an endpoint index closed and opened again goes on with the same
 * counters and windows, so no nonce is used twice under one key and the old
 * life's datagrams stay refused.
 */
#ifndef ULN_SEAL_LINK_SEAL_H
#define ULN_SEAL_LINK_SEAL_H

#include <stdatomic.h>

#include "seal/seal.h"
#include "link/link.h"

struct uln_seal_pub;

struct uln_seal_store {
    enum uln_seal_mode mode;
    enum uln_seal_cipher cipher; /* what we ask for (uln_seal_cipher_local) */
    uint32_t epoch;              /* this context's life, drawn at open */
    struct uln_seal_id id;
    uint8_t check[8]; /* says which job secret we hold (uln_seal_store_open) */
    unsigned neps, npeers;
    struct uln_seal_pair **pairs; /* [ep * npeers + peer], made as peers are linked */
    /* A peer's state as published now (a restarted peer publishes a new
     * one where its launcher keeps the board): 0 and *out, or -errno. */
    int (*republished)(void *arg, int peer, struct uln_seal_pub *out);
    void *arg;
};

/* What a context publishes with its address, and checks of its peers'. */
struct uln_seal_pub {
    uint8_t mode, cipher, has_secret;
    uint8_t flags;  /* ULN_SEAL_PUB_NOCHECK */
    uint32_t epoch; /* uln_seal_epoch_of(pub) */
    uint8_t pub[ULN_SEAL_PUB_BYTES];
    uint8_t check[8];
};
/* The state came in the compact form, which has no room for check: which
 * secret the peer holds is not known, and not checked at insert. A peer with
 * another secret agrees other keys: its datagrams are refused and counted. */
#define ULN_SEAL_PUB_NOCHECK 0x1u

/* The compact form of a published state, for short addresses (ulnet.h,
 * ULN_ADDR_SHORT_SEALED): one byte of mode (bits 0-1), cipher (bits 2-3)
 * and whether there is a secret (bit 4), then the public key. The epoch
 * follows from the key (uln_seal_epoch_of) and the check is left out. */
#define ULN_SEAL_PUB_COMPACT (1u + ULN_SEAL_PUB_BYTES)
/* 0, or -ENOSPC when pub has no compact form (an epoch not its key's). */
int uln_seal_pub_compact(const struct uln_seal_pub *pub, uint8_t out[ULN_SEAL_PUB_COMPACT]);
/* The compact form back, flagged ULN_SEAL_PUB_NOCHECK; -EINVAL when its
 * first byte is not one compact_pub writes. */
int uln_seal_pub_expand(const uint8_t in[ULN_SEAL_PUB_COMPACT], struct uln_seal_pub *out);
/* A context's epoch, from its public key: a new life draws a new key, and
 * so has a new epoch (but for a 2^-32 chance, which changes no key: both
 * public keys go into every key derived). Never 0. */
uint32_t uln_seal_epoch_of(const uint8_t pub[ULN_SEAL_PUB_BYTES]);

/* Draws this context's key pair and epoch, loads the secret (secret_file, or
 * NULL). -errno (the secret file's: -EPERM when others may read it). */
int uln_seal_store_open(struct uln_seal_store *s, enum uln_seal_mode mode,
                        enum uln_seal_cipher cipher, const char *secret_file, unsigned neps,
                        unsigned npeers);
void uln_seal_store_close(struct uln_seal_store *s);
void uln_seal_store_publish(const struct uln_seal_store *s, struct uln_seal_pub *out);
/* 0 when a peer's published state fits ours; else -EPROTO with why. */
int uln_seal_store_check(const struct uln_seal_store *s, const struct uln_seal_pub *peer, char *why,
                         size_t whylen);

/* Wraps *io (which it then owns) in a sealing link for endpoint index ep;
 * refusals are counted in *refused. 0 or -ENOMEM. */
int uln_link_seal_open(struct uln_seal_store *s, unsigned ep, _Atomic uint64_t *refused,
                       struct uln_link **io);
/* Link id `id` of the sealing link io is the peer (rank) whose published
 * state is pub, endpoint peer_ep: its pair is made (or found, if the index
 * had it in an earlier life). 0 or -errno. */
int uln_link_seal_peer(struct uln_link *io, int id, int peer, unsigned peer_ep,
                       const struct uln_seal_pub *pub);
/* A context with no job links peers as they first send: a datagram of a
 * source the sealing link has no pair for is first given to resolve, which
 * links it (uln_link_seal_peer) if it is a peer the context has inserted, and
 * returns its link id, or -1 (the datagram is then refused). It must not
 * open the datagram or read it: it is not opened yet. */
void uln_link_seal_resolver(struct uln_link *io,
                            int (*resolve)(void *arg, const struct uln_link_rx *rx), void *arg);

#endif
