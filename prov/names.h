/*
 * names.h - the provider's endpoint name (what fi_getname returns and
 * fi_av_insert takes) and the answer of its name service (names.c), which
 * carries one name to a client that knows a host and a port. Needs neither
 * libfabric nor a context: the fuzz target tests/fuzz/fuzz_fi_name feeds
 * ulnfi_name_parse what a network peer could send.
 */
#ifndef ULNFI_NAMES_H
#define ULNFI_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "ulnet.h"

/* Versioned and opaque to clients: the endpoint index and its life (gen),
 * and the context's ulnet address (uln_addr: how to reach the process, its
 * key, its life). Version 3 added gen, which took two bytes of the magic.
 * On the wire a name is the struct's first ulnfi_name_len bytes: 64,
 * FI_NAME_MAX, what clients such as Open MPI allocate, while the ulnet
 * address fits in 56 bytes (shm and udp, IPv4 or IPv6, do); a longer one (a
 * third part: a service, a public key) makes a longer name, up to
 * ULNFI_NAME_MAX, which only a client that asks fi_getname for the length
 * can hold. A name of up to 56 bytes of address is the very name version 3
 * always gave. */
#define ULNFI_NAME_HDR     8
#define ULNFI_NAME_FULL    64
#define ULNFI_NAME_MAX     (ULNFI_NAME_HDR + ULN_ADDR_MAX)
#define ULNFI_ADDR_MAGIC   0x6675u /* "uf" */
#define ULNFI_ADDR_VERSION 3
struct ulnfi_addr {
    uint16_t magic;
    uint8_t version;
    uint8_t ep;    /* ulnet endpoint index */
    uint8_t ulen;  /* bytes of uaddr in use */
    uint8_t flags; /* ULNFI_AF_* */
    uint16_t gen;  /* the endpoint's life: never 0 in a name of an endpoint */
    uint8_t uaddr[ULN_ADDR_MAX];
};
_Static_assert(offsetof(struct ulnfi_addr, uaddr) == ULNFI_NAME_HDR &&
                   sizeof(struct ulnfi_addr) == ULNFI_NAME_MAX,
               "a name is its header and the ulnet address");

/* How many bytes of a name are on the wire. */
static inline size_t ulnfi_name_len(const struct ulnfi_addr *a)
{
    size_t n = ULNFI_NAME_HDR + a->ulen;
    return n < ULNFI_NAME_FULL ? ULNFI_NAME_FULL : n;
}
#define ULNFI_EP_ANY 0xff /* fi_getinfo's src_addr: no endpoint yet (info.c) */

/* fi_getinfo(node, service, FI_SOURCE)'s src_addr: no endpoint yet (ep
 * ULNFI_EP_ANY, ulen 0), and uaddr holds where the endpoint made from it
 * publishes its name (names.c): a port and an address (all zero: any). */
#define ULNFI_AF_SVC 0x1u
struct ulnfi_svc {
    uint16_t port;  /* network order */
    uint8_t family; /* 4 or 6 */
    uint8_t resv;
    uint8_t ip[16];
};
_Static_assert(sizeof(struct ulnfi_svc) <= ULN_ADDR_MAX, "a service fits a name's uaddr");

/* The name service's answer: a magic, a version, the name's length, the
 * name; then the server closes the connection. Integers in network order. */
#define ULNFI_NAMES_MAGIC   0x554c4e53u /* "ULNS" */
#define ULNFI_NAMES_VERSION 2           /* 2: room for ULNFI_NAME_MAX */
struct ulnfi_names_msg {
    uint32_t magic;
    uint16_t version;
    uint16_t len; /* ulnfi_name_len(&name); the rest of name is zeros */
    struct ulnfi_addr name;
};

/* The short name, for clients that keep a name in 32 bytes (fabtests'
 * fi_rdm_stress does): fi_getname and fi_av_lookup give it when the room is
 * 32 to 63 bytes and the context's ulnet address has a short form (uln_addr:
 * this host's shm and IPv4 udp), and fi_av_insert takes either, a short one
 * known by its first byte (a full name's is 0x75, its magic's low byte).
 *   0 u8 0xa0 | ulen   1 u8 ep   2 u16 gen   4 ulen bytes of the ulnet
 *   address, then zeros to 32 */
#define ULNFI_NAME_SHORT 32
#define ULNFI_SHORT_HDR  4
#define ULNFI_SHORT_MARK 0xa0u /* the top three bits; the low five are ulen */
_Static_assert(ULN_ADDR_SHORT <= ULNFI_NAME_SHORT - ULNFI_SHORT_HDR, "ulnet's short form fits");
/* The sealed short name, for clients that keep a name in FI_NAME_MAX (64)
 * bytes, as Open MPI's mtl ofi does, when the context seals (ULN_SECURE) and
 * its full name is longer: the same header with first byte exactly
 * ULNFI_SHORT_SEALED_MARK, then ulnet's sealed short address
 * (ULN_ADDR_SHORT_SEALED bytes: it carries the public key). */
#define ULNFI_SHORT_SEALED_MARK 0xc0u
#define ULNFI_NAME_SHORT_SEALED (ULNFI_SHORT_HDR + ULN_ADDR_SHORT_SEALED)
_Static_assert(ULNFI_NAME_SHORT_SEALED == ULNFI_NAME_FULL, "a sealed short name is FI_NAME_MAX");
_Static_assert((ULNFI_ADDR_MAGIC & 0xe0u) != ULNFI_SHORT_MARK, "a short name is told apart");

/* Writes a's name into room bytes at out: the full name where it fits, else
 * the short one where a's ulnet address is short enough (the sealed short
 * one for a sealed short address). Returns the length
 * written, 0 when neither fits. */
size_t ulnfi_name_put(const struct ulnfi_addr *a, void *out, size_t room);
/* The name at in - full or short, as its first byte says - into *out as a
 * full one, and checked: 0 or -EADDRNOTAVAIL. *stride: its length (where the
 * next of an array of names starts), and *out, set even for a malformed one
 * (zeros for a short one refused before it is read). */
int ulnfi_name_get(const void *in, struct ulnfi_addr *out, size_t *stride);
/* The same of a name that must be exactly len bytes (fi_info's dest_addr). */
int ulnfi_name_read(const void *in, size_t len, struct ulnfi_addr *out);

/* Is a an endpoint's name, well formed (what fi_av_insert accepts)? */
int ulnfi_name_check(const struct ulnfi_addr *a);
/* An answer of n bytes into *out: 0, or -EPROTO (not a ulnet name service,
 * another version, a length that is not a name's) or -EADDRNOTAVAIL (the
 * name inside is malformed). */
int ulnfi_name_parse(const void *buf, size_t n, struct ulnfi_addr *out);
/* The answer that carries name. */
void ulnfi_name_answer(const struct ulnfi_addr *name, struct ulnfi_names_msg *m);

#endif /* ULNFI_NAMES_H */
