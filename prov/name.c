/*
 * name.c - an endpoint's name, and the name service's answer that carries
 * one: checked field by field, since both come from outside (an application
 * that copied bytes around; whoever answered on a TCP port).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "names.h"

int ulnfi_name_check(const struct ulnfi_addr *a)
{
    if (a->magic != ULNFI_ADDR_MAGIC || a->version != ULNFI_ADDR_VERSION) return -EADDRNOTAVAIL;
    if (a->ep == ULNFI_EP_ANY || !a->gen || a->flags) return -EADDRNOTAVAIL; /* not an endpoint's */
    if (!a->ulen || a->ulen > sizeof(a->uaddr)) return -EADDRNOTAVAIL;
    /* ulnet's own parser says whether the bytes are an address */
    return uln_addr_str(a->uaddr, a->ulen, NULL, 0) < 0 ? -EADDRNOTAVAIL : 0;
}

int ulnfi_name_parse(const void *buf, size_t n, struct ulnfi_addr *out)
{
    struct ulnfi_names_msg m;
    if (n != sizeof(m)) return -EPROTO;
    memcpy(&m, buf, sizeof(m)); /* buf may be unaligned */
    if (ntohl(m.magic) != ULNFI_NAMES_MAGIC || ntohs(m.version) != ULNFI_NAMES_VERSION ||
        ntohs(m.len) != ulnfi_name_len(&m.name))
        return -EPROTO;
    int rc = ulnfi_name_check(&m.name);
    if (rc) return rc;
    *out = m.name;
    return 0;
}

void ulnfi_name_answer(const struct ulnfi_addr *name, struct ulnfi_names_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->magic = htonl(ULNFI_NAMES_MAGIC);
    m->version = htons(ULNFI_NAMES_VERSION);
    m->name = *name;
    m->len = htons((uint16_t)ulnfi_name_len(name));
}

size_t ulnfi_name_put(const struct ulnfi_addr *a, void *out, size_t room)
{
    size_t n = ulnfi_name_len(a);
    if (room >= n) {
        memcpy(out, a, n);
        return n;
    }
    bool sealed = a->ulen == ULN_ADDR_SHORT_SEALED;
    size_t len = sealed ? ULNFI_NAME_SHORT_SEALED : ULNFI_NAME_SHORT;
    if (room < len || (!sealed && a->ulen > ULNFI_NAME_SHORT - ULNFI_SHORT_HDR)) return 0;
    uint8_t s[ULNFI_NAME_SHORT_SEALED] = {
        (uint8_t)(sealed ? ULNFI_SHORT_SEALED_MARK : ULNFI_SHORT_MARK | a->ulen), a->ep};
    memcpy(s + 2, &a->gen, 2);
    memcpy(s + ULNFI_SHORT_HDR, a->uaddr, a->ulen);
    memcpy(out, s, len);
    return len;
}

/* How long the name at in is: a short one's first byte has
 * ULNFI_SHORT_MARK's top bits, a full one's never does (names.h), and a full
 * one's length follows from its header's ulen (one past ULN_ADDR_MAX is
 * taken as 64 and refused by the check). Reads the first byte, and the
 * fifth of a full name: a name is at least 32 bytes. */
static size_t name_len(const uint8_t *in)
{
    if ((in[0] & 0xe0u) == ULNFI_SHORT_MARK) return ULNFI_NAME_SHORT;
    if (in[0] == ULNFI_SHORT_SEALED_MARK) return ULNFI_NAME_SHORT_SEALED;
    size_t ulen = in[offsetof(struct ulnfi_addr, ulen)];
    if (ulen > ULN_ADDR_MAX || ULNFI_NAME_HDR + ulen < ULNFI_NAME_FULL) return ULNFI_NAME_FULL;
    return ULNFI_NAME_HDR + ulen;
}

int ulnfi_name_get(const void *in, struct ulnfi_addr *out, size_t *stride)
{
    const uint8_t *first = in;
    *stride = name_len(in);
    bool is_short = (*first & 0xe0u) == ULNFI_SHORT_MARK || *first == ULNFI_SHORT_SEALED_MARK;
    if (!is_short) { /* a full name: its bytes, zeros after them */
        memset(out, 0, sizeof(*out));
        memcpy(out, in, *stride);
        return ulnfi_name_check(out);
    }
    /* a short one: only its 32 (sealed: 64) bytes are read; *out all zeros
     * (no name) if refused before it is filled */
    uint8_t s[ULNFI_NAME_SHORT_SEALED];
    memcpy(s, in, *stride);
    memset(out, 0, sizeof(*out));
    unsigned ulen = *stride == ULNFI_NAME_SHORT ? s[0] & 0x1fu : ULN_ADDR_SHORT_SEALED;
    if (ulen > *stride - ULNFI_SHORT_HDR) return -EADDRNOTAVAIL;
    for (unsigned i = ULNFI_SHORT_HDR + ulen; i < *stride; i++)
        if (s[i]) return -EADDRNOTAVAIL; /* the padding is zeros: one name, one spelling */
    out->magic = ULNFI_ADDR_MAGIC;
    out->version = ULNFI_ADDR_VERSION;
    out->ep = s[1];
    memcpy(&out->gen, s + 2, 2);
    out->ulen = (uint8_t)ulen;
    memcpy(out->uaddr, s + ULNFI_SHORT_HDR, ulen);
    return ulnfi_name_check(out);
}

int ulnfi_name_read(const void *in, size_t len, struct ulnfi_addr *out)
{
    /* the length checked before any byte past the first is read */
    if (len < ULNFI_NAME_SHORT || len != name_len(in)) return -EADDRNOTAVAIL;
    size_t stride;
    return ulnfi_name_get(in, out, &stride);
}
