/*
 * probe.h - the tests' own transport (probe.c), as a test drives it: armed,
 * the contexts opened afterwards have it (it reaches no peer) and it logs
 * what the seam's memory hooks tell it; it can refuse a registration.
 */
#ifndef ULN_TEST_PROBE_H
#define ULN_TEST_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/transport.h"

struct uln_probe_log {
    unsigned opens, closes, regs, deregs;
    struct uln_tp_region last_reg, last_dereg;
    /* What the hooks saw of the key table: the region's entry live already
     * at mem_reg (it must not be), still live at mem_dereg (it must not be). */
    unsigned live_at_reg, live_at_dereg;
    /* mem_dereg handed a state other than the one its mem_reg returned. */
    unsigned state_mismatch;
    unsigned regions_at_close; /* regions mem_reg took and mem_dereg did not give back */
};

/* Process-wide: contexts opened while armed have the probe. */
void uln_probe_arm(bool on);
/* Contexts opened from now on (armed) add a part of len bytes to their
 * uln_addr (0: none), a pattern probe.c's unpack checks. */
void uln_probe_addr_part(unsigned len);
/* The next mem_reg refuses with rc (0: none). */
void uln_probe_refuse_next(int rc);
const struct uln_probe_log *uln_probe_log(void);

#endif
