/*
 * transports.c - the registry (transports.h): every transport built in,
 * NULL-terminated, at its id.
 */
#include "transport/transports.h"

_Static_assert(ULN_TP_COUNT <= ULN_TP_MAX, "room for every transport");

#define ULN_TP_ENTRY_(id, ops) [ULN_TPID_##id] = &ops,
const struct uln_transport_ops *const uln_transports[] = {ULN_TRANSPORTS(ULN_TP_ENTRY_) NULL};
