/*
 * probe.h - TSC stamps at points along the path of a lone message, for
 * measuring ulnet's own work per bounce (docs/benchmarks.md, "Measuring
 * it: the probe build"). Built only with -DULN_PROBES=ON; otherwise every
 * ULN_PROBE is nothing, so the normal build pays not even a branch.
 *
 * With ULN_PROBE_OUT=<file> in the environment each stamp is (point,
 * rdtsc) appended to one in-memory log per process (the first 4 M), written
 * to <file>.<pid> at exit with the TSC's rate over the run;
 * tools/probe_table.py turns it into a table of steps. Without it a stamp
 * returns at once. The ping-pong measured drives an endpoint from one
 * thread; with a progress thread both threads' stamps are kept, interleaved.
 */
#ifndef ULN_CORE_PROBE_H
#define ULN_CORE_PROBE_H

#include <stdint.h>

enum uln_probe_point {
    ULN_P_RX,        /* the link's read brought datagrams (progress_rx) */
    ULN_P_REL,       /* rel took a data packet in order (rx_one) */
    ULN_P_FED,       /* a whole NAP written into our inbox ring (deliver_one) */
    ULN_P_CQE,       /* its NAP_RECV entry written in the CQ (take_data) */
    ULN_P_POLL,      /* uln_cq_poll returns entries */
    ULN_P_POST,      /* uln_nap entered */
    ULN_P_BUILT,     /* the transport committed the packet (uln_udp_nap) */
    ULN_P_SEND_IN,   /* the link's send call entered (sendto / sendmmsg) */
    ULN_P_SEND_OUT,  /* ... returned */
    ULN_P_READ,      /* the link's read called: remembered, logged before an RX */
    ULN_P_READ_PREV, /* (logged only: the read before that one) */
    ULN_P_EMPTY,     /* a read found nothing: remembered, logged before an RX */
    ULN_P_FI_CQ,     /* the libfabric provider's CQ read returns entries (prov/cq.c) */
    ULN_P_FI_SEND    /* the provider's send entered (prov/msg.c, ulnfi_send) */
};

#ifdef ULN_PROBES
void uln_probe_hit(enum uln_probe_point p);
#define ULN_PROBE(p) uln_probe_hit(p)
#else
#define ULN_PROBE(p) ((void)0)
#endif

#endif
