/*
 * transports.h - the registry of the transports built into ulnet: one line
 * each in ULN_TRANSPORTS, which gives each its id (its place: the order they
 * are opened and named in, ctx->tp_ctx[id], ep->tp_ep[id]) and makes
 * uln_transports (transports.c). Which one carries a peer is their
 * reachability's choice (core/transport.c), not this order.
 *
 * Adding a transport: its files, and one line here.
 */
#ifndef ULN_TRANSPORTS_H
#define ULN_TRANSPORTS_H

#include "core/internal.h"

#ifdef ULN_TEST_HOOKS
/* tests/transport/probe.c: the tests' own transport, reaching nobody */
#define ULN_TRANSPORTS_OF_TESTS(X) X(PROBE, uln_tp_probe)
#else
#define ULN_TRANSPORTS_OF_TESTS(X)
#endif

/* X(ID, ops): the transport whose ops are `ops`, id ULN_TPID_<ID>. */
#define ULN_TRANSPORTS(X)                                                                          \
    X(SHM, uln_tp_shm) /* shm.c: processes on one host */                                          \
    X(UDP, uln_tp_udp) /* udp/: processes anywhere */                                              \
    X(SVC, uln_tp_svc) /* svc/: through the host's ulnetd (docs/service.md) */                     \
    ULN_TRANSPORTS_OF_TESTS(X)

#define ULN_TP_ID_(id, ops) ULN_TPID_##id,
enum { ULN_TRANSPORTS(ULN_TP_ID_) ULN_TP_COUNT };
#undef ULN_TP_ID_

#define ULN_TP_EXTERN_(id, ops) extern const struct uln_transport_ops ops;
ULN_TRANSPORTS(ULN_TP_EXTERN_)
#undef ULN_TP_EXTERN_

#endif
