/*
 * byaddr.c - processes with no job (ULN_BOOT=none: the libfabric provider,
 * Open MPI over it) reached through the services (docs/service.md, "By
 * address").
 *
 * Such a process is known to other hosts by its context key and the id its
 * service gave it at attach (client.id), which its address carries in the
 * svc part. A sender's service stamps both on what it sends (wire.c: the
 * process names only the peer id it inserted); the receiving service
 * delivers to the attached process of that id and key, into the rings of
 * the slot its inbox gives the sender's (key, endpoint) - the slot a peer on
 * its host would claim there (inbox.h), claimed by us if the process has
 * not inserted the sender: its engine then learns the sender from the
 * address we write in the claim, as it learns a udp peer from its hello.
 * Either way the slot's address must name the service the message came
 * from and the sender's id there, so no process reaches another's slot by
 * naming its key: only its own.
 */
#include <errno.h>
#include <string.h>

#include "ulnetd.h"
#include "transport/transports.h"

#define ADDR_MAGIC 0xa7u /* peer.c's full form */
#define ADDR_HDR   24u
#define SVC_PART   10u /* svc/ops.c: u32 client, u32 IPv4, u16 port */

struct client *byaddr_target(struct ulnetd *d, uint32_t id, uint32_t key_lo)
{
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        if (c && c->id == id)
            return c->attached && c->no_job && (uint32_t)c->job_key == key_lo ? c : NULL;
    }
    return NULL;
}

/* The svc part of a full address a (len bytes) of key: 0 and its fields,
 * or -1 (another key, malformed, no svc part: the short form has none). */
static int svc_part(const uint8_t *a, size_t len, uint64_t key, uint32_t *id, uint32_t *ip,
                    uint16_t *port)
{
    uint64_t k;
    if (len < ADDR_HDR || a[0] != ADDR_MAGIC || a[2] != len) return -1;
    memcpy(&k, a + 8, 8);
    if (k != key) return -1;
    for (size_t off = ADDR_HDR, i = 0; i < a[3] && off + 2 <= len; i++, off += 2u + a[off + 1]) {
        if (a[off] != ULN_TPID_SVC) continue;
        if (a[off + 1] != SVC_PART || off + 2 + SVC_PART > len) return -1;
        memcpy(id, a + off + 2, 4);
        memcpy(ip, a + off + 6, 4);
        memcpy(port, a + off + 10, 2);
        return 0;
    }
    return -1;
}

/* The address we vouch for: the sender's key and host, and a svc part
 * naming its service and id - all a peer needs to answer through us. The
 * pid field (never 0 in an address) holds the id: the sender's pid is its
 * service's to know. */
static size_t addr_make(uint8_t *a, uint64_t key, uint32_t id, uint64_t host, uint32_t ip,
                        uint16_t port)
{
    uint32_t pid = id & 0x7fffffffu ? id & 0x7fffffffu : 1;
    memset(a, 0, ADDR_HDR + 2 + SVC_PART);
    a[0] = ADDR_MAGIC;
    a[1] = 1;
    a[2] = ADDR_HDR + 2 + SVC_PART;
    a[3] = 1;
    memcpy(a + 4, &pid, 4);
    memcpy(a + 8, &key, 8);
    memcpy(a + 16, &host, 8);
    a[ADDR_HDR] = ULN_TPID_SVC;
    a[ADDR_HDR + 1] = SVC_PART;
    memcpy(a + ADDR_HDR + 2, &id, 4);
    memcpy(a + ADDR_HDR + 6, &ip, 4);
    memcpy(a + ADDR_HDR + 10, &port, 2);
    return ADDR_HDR + 2 + SVC_PART;
}

int byaddr_slot(struct ulnetd *d, struct client *t, uint64_t key, uint32_t ep, uint32_t id,
                uint64_t host, uint32_t ip, uint16_t port)
{
    if (!key || !id || ep >= t->hdr.max_eps || key == t->job_key) goto refused;
    uint8_t a[ULN_ADDR_MAX];
    size_t n = addr_make(a, key, id, host, ip, port);
    /* The inbox's claims are in t's memory: whatever t wrote there is read
     * once (the copy below) and checked; its layout is from the header
     * checked at attach. */
    int slot = uln_inbox_claim(t->inbox, &t->hdr, key, (int)ep, 0, a, n);
    if (slot < 0) goto refused;
    struct uln_inbox_claim *c = uln_inbox_claim_at(t->inbox, &t->hdr, slot);
    /* Acquire: pairs with the claimer's release of ready (inbox.c). */
    if (!atomic_load_explicit(&c->ready, memory_order_acquire)) return -EAGAIN;
    uint8_t have[ULN_ADDR_MAX];
    size_t len = c->addr_len;
    if (len > sizeof have) goto refused;
    memcpy(have, c->addr, len);
    uint32_t h_id, h_ip;
    uint16_t h_port;
    if (svc_part(have, len, key, &h_id, &h_ip, &h_port) != 0 || h_id != id || h_ip != ip ||
        h_port != port)
        goto refused;
    return slot;
refused:
    d->c.byaddr_refused++;
    return -EPERM;
}
