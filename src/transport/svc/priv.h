/*
 * priv.h - the svc transport's state (docs/service.md): peers reached
 * through the host's service, ulnetd. Files: ops.c (the ops, the context's
 * part), queue.c (an endpoint's queue to the service: made, passed, written),
 * mem.c (registered memory told to the service).
 *
 * Sending: the engine's ring messages, exactly as it would write them into
 * a peer's own rings, go into the endpoint's queue to the service (one
 * ring), addressed by rank and channel; the service writes them into the
 * peer's inbox rings. Receiving: nothing of our own - the service writes
 * what comes for us into our inbox rings, as a peer on this host would, so
 * the engine reads them as it reads any peer's.
 */
#ifndef ULN_TRANSPORT_SVC_PRIV_H
#define ULN_TRANSPORT_SVC_PRIV_H

#include "core/internal.h"
#include "transport/transports.h"
#include "transport/svc/svc.h"

/* What a rank publishes: whether it is attached, and to which service. */
struct svc_addr {
    uint64_t host; /* the service's uln_host_id; 0: not attached */
    uint32_t client;
    uint32_t wire_ip; /* the service's wire address (svc.h); port 0: none */
    uint16_t wire_port, pad_[3];
};

struct svc_ep {                              /* ep->tp_ep[ULN_TPID_SVC] */
    int memfd, bell;                         /* the queue and the service's eventfd */
    uint8_t *map;                            /* the queue, mapped */
    struct uln_svc_queue_hdr *qhdr;          /* its header page */
    struct uln_ring_prod tx;                 /* to the service */
    bool wrote;                              /* since the last kick */
    bool carried;                            /* it has carried a message */
    uint32_t gone_seen;                      /* the queue's gone_gen at our last look */
    uint64_t gone_known[ULN_SVC_GONE_WORDS]; /* peers already failed and counted */
};

int uln_svc_ep_open(struct uln_ep *ep);
void uln_svc_ep_close(struct uln_ep *ep);
void *uln_svc_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len);
void uln_svc_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags, uint32_t len);
bool uln_svc_nap(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint32_t len);
void uln_svc_kick(struct uln_ep *ep, int peer);
/* mem.c: the memory hooks (core/transport.h). */
int uln_svc_mem_reg(struct uln_ctx *ctx, const struct uln_tp_region *r, void **state);
void uln_svc_mem_dereg(struct uln_ctx *ctx, const struct uln_tp_region *r, void *state);
/* Has the service hung up (it died)? Looks at the socket once it may have. */
bool uln_svc_lost(struct uln_ctx *ctx);

#endif
