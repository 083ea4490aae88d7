/*
 * internal.h - the objects behind the public handles, shared by src/ files.
 *
 * Reading order for a newcomer: ring.h (the shared-memory queue), wire.h (what
 * travels in it), inbox.h (where the rings live), this file, ep.c (posting),
 * engine.c (progress: the "NIC"), transport.h (the seam every transport plugs
 * into; transport/shm.c is the first), mr.c (regions and keys), cq.c, ctx.c.
 */
#ifndef ULN_INTERNAL_H
#define ULN_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <time.h>

#include "ulnet.h"
#include "core/clock.h"
#include "core/diag.h"
#include "core/doorbell.h"
#include "core/frag.h"
#include "core/inbox.h"
#include "core/iov.h"
#include "core/params.h"
#include "core/ring.h"
#include "core/transport.h"
#include "core/wire.h"

#include "core/base.h"
#include "core/mr.h"
#include "core/ctx.h"
#include "core/ep.h"

/* The objects, each in its header: base.h (hints, limits, statistics),
 * params.h (settings), mr.h (keys, regions), ctx.h (the context, peers,
 * bootstrap), ep.h (endpoints, CQs, the engine). This file includes them
 * all, and the test hooks. */

#ifdef ULN_TEST_HOOKS
#include "rel/rel.h"
/* src/transport/udp/hooks.c, for tests and fuzzing only (the library never calls them; built only
 * with ULN_TEST_HOOKS): crafted bytes through the real receive path, crafted
 * packets from a rank's real socket. */
struct uln_udp_conn {
    int state; /* enum uln_rel_state */
    bool dead;
    uint32_t local_epoch, peer_epoch;
    uint32_t tag_in;   /* the tag the peer's data packets to us must carry */
    uint32_t tag_out;  /* ... ours to it */
    uint32_t rcv_next; /* the next seq from the peer in order */
    uint32_t snd_una, snd_nxt;
    uint32_t snd_edge; /* the peer takes our seqs before this: its credit */
    uint32_t rx_limit; /* the share of our receive pool it may fill (pool_share) */
    uint32_t rcv_edge; /* it may send seqs before this: the credit we gave it */
    /* rel's counters for this peer: how each lost packet was found (tx_fast,
     * tx_pto, tx_timeout), what held the sender back (blk_*), ... */
    struct uln_rel_stats rel;
};
/* Run one datagram through the receive path as if the endpoint's socket had
 * received it from rank (a rank not reached over UDP, or -1: from an address
 * that is not a member). 0, or -errno if it could not be lent a buffer. */
int uln_udp_rx_inject(struct uln_ep *ep, int rank, const void *buf, size_t len);
/* The connection with rank as it stands: -ENOENT before any contact. */
int uln_udp_conn_get(struct uln_ep *ep, int rank, struct uln_udp_conn *c);
/* The counters of the link under ep (link.h: what each path carried). */
struct uln_link_stats;
int uln_udp_link_stats(struct uln_ep *ep, struct uln_link_stats *st);
/* Start a new life of ours towards rank (epoch 0: a random one), as the
 * protocol's reconnect does: what was in flight is void, ops fail with
 * -ECONNRESET, the peer sees a restart. */
int uln_udp_peer_restart(struct uln_ep *ep, int rank, uint32_t epoch);
/* How long after a post an endpoint holds its answers for the next one
 * (ulnet.h, "When packets leave"); 0: the library's own 200 us. Process-wide. */
void uln_udp_test_answer_hold(uint64_t ns);
/* The UDP address of rank's endpoint of this index (our own: where it is
 * bound). */
int uln_udp_ep_addr(struct uln_ep *ep, int rank, struct sockaddr_storage *ss, socklen_t *len);
/* Send buf as one datagram from the endpoint's socket to rank's, outside the
 * sequence space (no seq, tag or feedback is filled in). */
int uln_udp_send_raw(struct uln_ep *ep, int rank, const void *buf, size_t len);
/* Send buf (a whole packet: header, extension, payload) as the next data
 * packet of the stream to rank: seq, tag, rel's flags and feedback are filled
 * in, the rest is sent as given, and resent until acknowledged. */
int uln_udp_send_seq(struct uln_ep *ep, int rank, const void *buf, size_t len);
#endif

#endif
