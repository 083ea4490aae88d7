/*
 * trigger.c - triggered operations (fi_trigger(3)): an RMA or atomic posted
 * with FI_TRIGGER and a struct fi_triggered_context of event type
 * FI_TRIGGER_THRESHOLD as its context is built at once - its arguments are
 * the caller's only during the call - and parked on its endpoint until the
 * counter reaches the threshold; progress then posts it as if just issued,
 * and it completes with the triggered context as its context. Parked
 * operations of one endpoint fire in the order they were posted among those
 * whose counters are ready. The counter may move by completions or by the
 * application (fi_cntr_add/set); either is seen at the next progress pass.
 * Triggered messages (send, tagged: msg.c) park their arguments instead of
 * a built operation, and are sent when they fire, with the header and
 * sequence number of that moment: a send goes in order with the sends
 * around it as they are made, not as they were parked. One that finds no
 * room yet stays first in line for the next pass; one that fails completes
 * with the error, as if just issued.
 */
#include <rdma/fi_trigger.h>
#include <stdlib.h>

#include "ulnfi.h"

int ulnfi_trigger_of(struct ulnfi_ep *ep, void *context, uint64_t flags, struct ulnfi_cntr **c,
                     uint64_t *at)
{
    *c = NULL;
    if (!(flags & FI_TRIGGER)) return 0;
    if (!(ep->info->caps & FI_TRIGGER)) return -FI_EINVAL; /* fi_trigger(3): the capability */
    const struct fi_triggered_context *t = context;
    if (!t) return -FI_EINVAL;
    if (t->event_type != FI_TRIGGER_THRESHOLD) return -FI_ENOSYS; /* the only event ours */
    struct fid_cntr *fc = t->trigger.threshold.cntr;
    if (!fc || fc->fid.fclass != FI_CLASS_CNTR) return -FI_EINVAL;
    struct ulnfi_cntr *cn = ulnfi_container(fc, struct ulnfi_cntr, cntr);
    if (cn->dom != ep->dom) return -FI_EINVAL;
    *c = cn;
    *at = t->trigger.threshold.threshold;
    return 0;
}

void ulnfi_trigger_park(struct ulnfi_op *op, struct ulnfi_cntr *c, uint64_t at)
{
    struct ulnfi_ep *ep = op->ep;
    op->trig_cntr = c;
    op->trig_at = at;
    c->refs++; /* it must outlive what waits on it */
    op->next = NULL;
    if (ep->trig_tail)
        ep->trig_tail->next = op;
    else
        ep->trig_head = op;
    ep->trig_tail = op;
}

/* A ready triggered send, sent now. No room: it and the ready ones after it
 * go back to the front of the parked, in order (true). An error completes
 * it with that error, as a send that failed (fi_trigger(3): the operation
 * is issued as if just posted, and reports as such). */
static bool send_fire(struct ulnfi_ep *ep, struct ulnfi_op *f, struct ulnfi_op *ready)
{
    ssize_t rc = ulnfi_send_fire(f);
    if (rc == -FI_EAGAIN) {
        struct ulnfi_op *last = ready;
        while (last->next)
            last = last->next;
        last->next = ep->trig_head;
        if (!ep->trig_head) ep->trig_tail = last;
        ep->trig_head = ready;
        return true;
    }
    if (rc) {
        uint64_t cls = f->trig_tagged ? FI_TAGGED : FI_MSG;
        if (ep->tx_cq)
            ulnfi_cq_put_err(ep->tx_cq, f->context, FI_SEND | cls, 0, 0, f->tag, 0, (int)-rc, 0,
                             FI_ADDR_NOTAVAIL);
        ulnfi_cntr_inc_err(ep->tx_cntr);
    }
    return false;
}

void ulnfi_trigger_fire(struct ulnfi_ep *ep)
{
    /* Take the ready ones off first: firing one may complete it at once,
     * which moves counters and may make others ready (the next pass). */
    struct ulnfi_op *ready = NULL, **rt = &ready, *op = ep->trig_head;
    ep->trig_head = ep->trig_tail = NULL;
    while (op) {
        struct ulnfi_op *next = op->next;
        op->next = NULL;
        if (op->trig_cntr->value >= op->trig_at) {
            *rt = op;
            rt = &op->next;
        } else { /* back, in order */
            if (ep->trig_tail)
                ep->trig_tail->next = op;
            else
                ep->trig_head = op;
            ep->trig_tail = op;
        }
        op = next;
    }
    while (ready) {
        struct ulnfi_op *f = ready;
        if (f->kind == ULNFI_OP_TSEND && send_fire(ep, f, ready)) return; /* no room: later */
        ready = f->next;
        f->next = NULL;
        f->trig_cntr->refs--;
        f->trig_cntr = NULL;
        if (f->kind == ULNFI_OP_TSEND)
            ulnfi_op_put(f); /* its send is an operation of its own now */
        else
            ulnfi_op_advance(f); /* posted now; completes, or waits for room (retry) */
    }
}

void ulnfi_trigger_drop(struct ulnfi_ep *ep)
{
    while (ep->trig_head) {
        struct ulnfi_op *op = ep->trig_head;
        ep->trig_head = op->next;
        op->trig_cntr->refs--;
        free(op->buf);
        free(op);
    }
    ep->trig_tail = NULL;
}
