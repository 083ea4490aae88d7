/*
 * transports.h - the transports built into ulnet, for the registry
 * (transports.c) and the tests that reach into one.
 */
#ifndef ULN_TRANSPORTS_H
#define ULN_TRANSPORTS_H

#include "core/internal.h"

/* Their places in uln_transports: ctx->tp_ctx[id], ep->tp_ep[id]. */
enum { ULN_TPID_SHM = 0, ULN_TPID_UDP = 1 };

extern const struct uln_transport_ops uln_tp_shm; /* shm.c: processes on one host */
extern const struct uln_transport_ops uln_tp_udp; /* udp/: processes anywhere */

#endif
