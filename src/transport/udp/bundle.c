/*
 * bundle.c - the UDP transport's bundles: small packets to one peer leave in
 * one datagram; a received bundle's buffer is shared by its packets.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "transport/udp/priv.h"

/* ---- bundles' buffers --------------------------------------------------------- */

/* Sending: BUNDLE_BUFS buffers a batch's bundles are copied into. Receiving:
 * a share per buffer the link may have lent us (its pool, and a batch being
 * read), so that a bundle is never refused for want of one. */
int uln_udp_bundles_init(struct uln_udp_ep *ue)
{
    unsigned n = ue->pool_bufs + ULN_LINK_BATCH;
    ue->bundle_mem = malloc((size_t)BUNDLE_BUFS * BUNDLE_MAX);
    ue->shares = malloc(n * sizeof *ue->shares);
    ue->share_free = malloc(n * sizeof *ue->share_free);
    if (!ue->bundle_mem || !ue->shares || !ue->share_free) return -ENOMEM;
    for (unsigned i = 0; i < BUNDLE_BUFS; i++)
        ue->bundle_free[ue->n_bundle_free++] = (uint8_t)(BUNDLE_BUFS - 1 - i);
    for (unsigned i = 0; i < n; i++)
        ue->share_free[ue->n_share_free++] = n - 1 - i;
    for (unsigned i = 0; i < ULN_LINK_BATCH; i++)
        ue->batch_bundle[i] = -1;
    return 0;
}

/* A share of the link buffer handle, counted once for the caller; 0 when
 * none is free. */
uint32_t uln_udp_share_open(struct uln_udp_ep *ue, uint32_t handle)
{
    if (ue->n_share_free == 0) return 0;
    uint32_t i = ue->share_free[--ue->n_share_free];
    ue->shares[i] = (struct rx_share){.handle = handle, .refs = 1};
    return i + 1;
}

void uln_udp_share_put(struct uln_udp_ep *ue, uint32_t sh)
{
    struct rx_share *x = &ue->shares[sh - 1];
    if (--x->refs) return;
    uln_link_rx_release(ue->io, x->handle);
    ue->share_free[ue->n_share_free++] = sh - 1;
}

/* Give back the buffer a receive slot holds: its own, or its count in a
 * bundle's. */
void uln_udp_rx_release(struct uln_udp_ep *ue, struct rx_slot *s)
{
    if (s->share)
        uln_udp_share_put(ue, s->share);
    else
        uln_link_rx_release(ue->io, s->handle);
    s->share = 0;
}

/* Move batch entry from to slot to, its header row (or bundle buffer) with it. */
void uln_udp_batch_move(struct uln_udp_ep *ue, unsigned to, unsigned from)
{
    ue->batch[to] = ue->batch[from];
    ue->batch_region[to] = ue->batch_region[from];
    ue->batch_bundle[to] = ue->batch_bundle[from];
    ue->batch_bundle[from] = -1;
    if (ue->batch_bundle[to] >= 0) return; /* its bytes are in its bundle buffer */
    size_t at = (size_t)((uint8_t *)ue->batch[from].iov[0].iov_base - ue->scratch[from]);
    memcpy(ue->scratch[to], ue->scratch[from], ROW_SPACE);
    ue->batch[to].iov[0].iov_base = ue->scratch[to] + at;
}

/* Is batch entry i a lone ACK (the header alone, no bundle yet)? */
static bool batch_lone_ack(const struct uln_udp_ep *ue, unsigned i)
{
    const struct uln_link_pkt *p = &ue->batch[i];
    const uint8_t *h = p->iov[0].iov_base;
    return p->niov == 1 && p->iov[0].iov_len == sizeof(struct pkt_hdr) && (h[0] & 15) == PKT_ACK &&
           h == ue->scratch[i] + LEAD_SPACE;
}

/* An ACK followed in the batch by another packet to the same peer rides in
 * front of it, in one datagram: a PUT's answer and the application's reply
 * cross the wire (and both kernels) once, not twice. The ACK keeps its own
 * header and seq; PKT_MORE says a packet follows (uln_udp_rx_datagram splits it).
 */
void uln_udp_bundle_answers(struct uln_udp_ep *ue)
{
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch; r++) {
        struct uln_link_pkt *next = &ue->batch[r + 1];
        if (r + 1 < ue->nbatch && batch_lone_ack(ue, r) && next->peer == ue->batch[r].peer &&
            next->iov[0].iov_base == ue->scratch[r + 1] + LEAD_SPACE &&
            LEAD_SPACE + uln_link_pkt_len(next) <= ue->payload_max) {
            uint8_t *lead = ue->scratch[r + 1];
            memcpy(lead, ue->scratch[r] + LEAD_SPACE, LEAD_SPACE);
            lead[1] |= PKT_MORE; /* flags: the second byte */
            next->iov[0].iov_base = lead;
            next->iov[0].iov_len += LEAD_SPACE;
            continue; /* entry r is now part of r + 1 */
        }
        if (w != r) uln_udp_batch_move(ue, w, r);
        w++;
    }
    ue->nbatch = w;
}

/* Batch entry i as it is, not yet in a bundle: its header row, then data. */
static bool batch_plain(const struct uln_udp_ep *ue, unsigned i)
{
    return ue->batch_bundle[i] < 0 && !ue->batch_region[i] &&
           ue->batch[i].iov[0].iov_base == ue->scratch[i] + LEAD_SPACE;
}

/* Copy entries r..e-1 into one datagram in bundle buffer b: every packet
 * but the last marked PKT_MORE. It takes entry r's place. */
static void bundle_make(struct uln_udp_ep *ue, unsigned r, unsigned e, unsigned b)
{
    uint8_t *mem = ue->bundle_mem + (size_t)b * BUNDLE_MAX, *at = mem;
    for (unsigned i = r; i < e; i++) {
        const struct uln_link_pkt *p = &ue->batch[i];
        uint8_t *start = at;
        for (uint32_t k = 0; k < p->niov; k++) {
            memcpy(at, p->iov[k].iov_base, p->iov[k].iov_len);
            at += p->iov[k].iov_len;
        }
        if (i + 1 < e) start[1] |= PKT_MORE; /* flags: the second byte */
    }
    struct uln_link_pkt *d = &ue->batch[r];
    d->niov = 1;
    d->iov[0] = (struct iovec){mem, (size_t)(at - mem)};
    ue->batch_bundle[r] = (int8_t)b;
}

/* Small packets to one peer, next to each other in the batch, leave in one
 * datagram (a bundle). */
void uln_udp_bundle_small(struct uln_udp_ep *ue)
{
    unsigned cap = ue->payload_max < BUNDLE_MAX ? ue->payload_max : BUNDLE_MAX;
    unsigned w = 0;
    for (unsigned r = 0; r < ue->nbatch;) {
        unsigned e = r, bytes = 0;
        while (e < ue->nbatch && batch_plain(ue, e) && ue->batch[e].peer == ue->batch[r].peer) {
            uint32_t len = uln_link_pkt_len(&ue->batch[e]);
            if (len > BUNDLE_PKT_MAX || bytes + len > cap) break;
            bytes += len;
            e++;
        }
        if (e - r >= 2 && ue->n_bundle_free) {
            bundle_make(ue, r, e, ue->bundle_free[--ue->n_bundle_free]);
            if (w != r) uln_udp_batch_move(ue, w, r);
            w++;
            r = e;
            continue;
        }
        if (w != r) uln_udp_batch_move(ue, w, r);
        w++;
        r++;
    }
    ue->nbatch = w;
}

/* Entries 0..n-1 have gone: their bundle buffers are free again. */
void uln_udp_bundles_sent(struct uln_udp_ep *ue, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (ue->batch_bundle[i] >= 0) {
            ue->bundle_free[ue->n_bundle_free++] = (uint8_t)ue->batch_bundle[i];
            ue->batch_bundle[i] = -1;
        }
}
