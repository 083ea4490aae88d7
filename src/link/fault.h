/*
 * fault.h - a link that wraps any other link (link.h) and drops,
 * duplicates and reorders the packets sent through it, seeded, so that tests
 * can make loss the reliability layer must recover from. Receiving, peers and
 * the rest pass straight through to the inner link.
 */
#ifndef ULN_LINK_FAULT_H
#define ULN_LINK_FAULT_H

#include "link/link.h"

/* Spec of the fault injector, parsed from "drop=P,dup=P,reorder=P,delay=US,seed=N":
 * P is a probability in [0, 1] ("0.02") or a percentage ("2%"); each key at
 * most once, in any order; "" means no faults. delay is the longest a held-back
 * (reordered) datagram waits for a later one to the same peer, in us (default
 * 1000); seed makes the decisions (default 1): the same seed and the same
 * sequence of packets give the same faults, however the sends are cut short.
 * At most 16 datagrams are held at once (a slot freed while a send call runs
 * is taken again from the next call); past that, reorder picks count in
 * fault_nohold and go in order. */
struct uln_link_fault {
    double drop, dup, reorder;
    uint64_t delay_us;
    uint64_t seed;
};

/* 0, or -EINVAL with a one-line reason in err (if errlen > 0). */
int uln_link_fault_parse(const char *spec, struct uln_link_fault *f, char *err, size_t errlen);

/* True if f does anything at all. */
static inline bool uln_link_fault_any(const struct uln_link_fault *f)
{
    return f->drop > 0 || f->dup > 0 || f->reorder > 0;
}

/* Wrap inner; from then on the fault link owns it (closes it). 0 or -ENOMEM
 * (inner is closed then too). */
int uln_link_fault_open(struct uln_link *inner, const struct uln_link_fault *f,
                        struct uln_link **out);

/* *link wrapped as spec says (NULL or "": left as it is). This is where the
 * injector goes on a link, once, whichever link it is (link/select.c). 0, or
 * -EINVAL (a bad spec: the reason in err) or -ENOMEM; on failure *link is
 * closed and NULL. */
int uln_link_fault_wrap(const char *spec, struct uln_link **link, char *err, size_t errlen);

#endif
