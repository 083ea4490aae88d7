/*
 * name.c - an endpoint's name, and the name service's answer that carries
 * one: checked field by field, since both come from outside (an application
 * that copied bytes around; whoever answered on a TCP port).
 */
#include <arpa/inet.h>
#include <errno.h>
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
        ntohs(m.len) != sizeof(m.name))
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
    m->len = htons(sizeof(m->name));
    m->name = *name;
}
