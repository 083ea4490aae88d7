/*
 * transports.c - the registry: every transport built in, in the order they
 * are opened and named. Which one carries a peer is their reachability's
 * choice (core/transport.c), not this order.
 */
#include "transport/transports.h"

_Static_assert(ULN_TPID_UDP < ULN_TP_MAX, "room for every transport");

const struct uln_transport_ops *const uln_transports[] = {
    [ULN_TPID_SHM] = &uln_tp_shm,
    [ULN_TPID_UDP] = &uln_tp_udp,
    NULL,
};
