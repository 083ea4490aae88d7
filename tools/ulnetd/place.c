/*
 * place.c - GET data written straight into the initiator's buffer by the
 * initiator's own service (docs/service.md, "GET data placed"), as udp's
 * receive path places it in the process: no piece goes through the
 * initiator's ring, and neither it nor we wait for it to drain one.
 *
 * The bounds are the process's own: its GET request in its queue carries
 * where the data goes (struct uln_get_dst, after the request); we record
 * that here, per endpoint (queue) and operation, and strip it before the
 * request goes on. An answer from the wire or from a target's engine names
 * only the operation and an offset: it is written only inside what was
 * recorded for that operation and that target, never elsewhere. A process
 * that names a wrong buffer reaches only its own memory.
 *
 * The bytes go through our mapping of the process's uln_mem_alloc memory
 * when the buffer lies in a region it registered with us (mem.c), else
 * with process_vm_writev. A write that fails (the process unmapped the
 * buffer, or died) fails that GET with the error, counted; the rest of its
 * answer is counted and dropped. The completion is one GET_RESP with
 * ULN_RESP_PLACED in the process's ring once every byte is there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "ulnetd.h"
#include "core/wire.h"

/* GETs in flight per endpoint we place for, at most: beyond it a GET's
 * answer takes the ring (the engine's own GET credit bounds it far below). */
#define PLACE_MAX 4096u

struct placing {
    uint64_t op_id;
    uint64_t addr, len; /* the process's buffer, from its own queue */
    uint64_t got;       /* bytes placed, or counted since a write failed */
    uint32_t rank;      /* the target: its answers only */
    int32_t status;     /* a write failed: the GET ends so once all is counted */
};

static struct placing *find(struct queue *q, uint32_t rank, uint64_t op_id)
{
    for (uint32_t i = 0; i < q->n_placing; i++)
        if (q->placing[i].op_id == op_id && q->placing[i].rank == rank) return &q->placing[i];
    return NULL;
}

static void drop(struct queue *q, struct placing *p)
{
    *p = q->placing[--q->n_placing]; /* order does not matter */
}

/* May we write into c at all (process_vm_writev, for memory not mapped
 * here)? Asked once per process, by reading a byte of a buffer it named:
 * the same permission check (ptrace's) as writing. */
static bool vm_allowed(struct client *c, uint64_t addr)
{
    if (!c->vm_probed) {
        uint8_t b;
        struct iovec l = {&b, 1}, r = {(void *)(uintptr_t)addr, 1};
        c->vm_probed = true;
        if (process_vm_readv(c->pid, &l, 1, &r, 1, 0) < 0 && (errno == EPERM || errno == ENOSYS))
            c->no_vm = true;
    }
    return !c->no_vm;
}

bool place_record(struct ulnetd *d, struct client *c, struct queue *q, uint32_t rank,
                  const struct uln_get_req *r, const struct uln_get_dst *dst)
{
    if (!dst->len || dst->len != r->len || dst->addr + dst->len < dst->addr) return false;
    struct placing *p = find(q, rank, r->op_id);
    if (!p) { /* else the request is taken again (its queue waited): the same */
        if (!vm_allowed(c, dst->addr) && (d->no_map || !mem_find(c, dst->addr, dst->len)))
            return false; /* nowhere we could write it: the ring carries it */
        if (q->n_placing == q->cap_placing) {
            uint32_t cap = q->cap_placing ? 2 * q->cap_placing : 8;
            struct placing *n = cap <= PLACE_MAX ? realloc(q->placing, cap * sizeof *n) : NULL;
            if (!n) return false;
            q->placing = n;
            q->cap_placing = cap;
        }
        p = &q->placing[q->n_placing++];
    }
    *p = (struct placing){.op_id = r->op_id, .addr = dst->addr, .len = dst->len, .rank = rank};
    return true;
}

/* n bytes into c at addr: 0, -ECONNRESET (c has just died: its hang-up is
 * on its way to us), or -EFAULT (not there any more). Within a region we
 * map, a memcpy on its own pages. */
static int place_write(struct ulnetd *d, struct client *c, uint64_t addr, const void *data,
                       uint64_t n)
{
    if (!n) return 0;
    uint8_t *p = d->no_map ? NULL : mem_find(c, addr, n);
    if (p) {
        memcpy(p, data, n);
        d->c.mapped_ops++;
        return 0;
    }
    if (c->no_vm) return -EFAULT; /* unmapped since it was recorded */
    struct iovec l = {(void *)data, n}, r = {(void *)(uintptr_t)addr, n};
    ssize_t k = process_vm_writev(c->pid, &l, 1, &r, 1, 0);
    if (k == (ssize_t)n) return 0;
    return k < 0 && errno == ESRCH ? -ECONNRESET : -EFAULT;
}

int place_resp(struct ulnetd *d, struct client *c, uint32_t ep, uint32_t src,
               const struct uln_msg *m, const uint8_t *payload)
{
    struct uln_get_resp g;
    struct queue *q = ep < ULN_SVC_MAX_EPS ? c->queues[ep] : NULL;
    if (!q || !q->n_placing || m->len < sizeof g) return PLACE_NONE;
    memcpy(&g, payload, sizeof g);
    struct placing *p = find(q, src, g.op_id);
    if (!p) return PLACE_NONE;
    uint64_t n = m->len - sizeof g;
    bool bad = g.op_offset > p->len || n > p->len - g.op_offset;
    bool last = g.status || bad || p->got + n >= p->len;
    /* Room for the completion before anything is written: a piece is never
     * placed and then left to be placed (and counted) again. */
    struct uln_get_resp *done = NULL;
    if (last && !(done = feed_reserve(c, src, ep, 0, sizeof *done))) return PLACE_LATER;
    if (bad) {
        d->c.malformed++;
        p->status = -EPROTO;
    } else if (!g.status && !p->status) {
        int rc = place_write(d, c, p->addr + g.op_offset, payload + sizeof g, n);
        if (rc) {
            p->status = rc;
            d->c.place_failed++;
        } else
            d->c.placed_bytes += n;
    }
    p->got += n;
    if (!last) return PLACE_DONE;
    /* Our writes (memcpy, or the kernel's copy in process_vm_writev, done
     * when it returned) come before the commit's release store of the
     * message: the process that sees the completion sees the data. */
    int32_t st = g.status ? g.status : p->status;
    *done = (struct uln_get_resp){.op_id = g.op_id, .op_offset = st ? 0 : p->len, .status = st};
    feed_commit(c, src, ep, 0, ULN_MSG_GET_RESP, ULN_RESP_PLACED, sizeof *done);
    d->c.placed_gets++;
    drop(q, p);
    return PLACE_DONE;
}

void place_cancel(struct queue *q, uint32_t rank, uint64_t op_id)
{
    struct placing *p = find(q, rank, op_id);
    if (p) drop(q, p);
}

void place_forget_rank(struct client *c, uint32_t rank)
{
    for (unsigned e = 0; e < ULN_SVC_MAX_EPS; e++) {
        struct queue *q = c->queues[e];
        for (uint32_t i = 0; q && i < q->n_placing;)
            if (q->placing[i].rank == rank)
                drop(q, &q->placing[i]);
            else
                i++;
    }
}

static uint8_t *bounce;
static uint32_t bounce_len;

void *place_bounce(uint32_t len)
{
    if (len > bounce_len) {
        uint8_t *b = realloc(bounce, len);
        if (!b) return NULL;
        bounce = b;
        bounce_len = len;
    }
    return bounce;
}

void place_free(struct queue *q)
{
    free(q->placing);
    q->placing = NULL;
    q->n_placing = q->cap_placing = 0;
}
