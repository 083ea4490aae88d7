/*
 * serve.c - one-sided operations done by the service in the target's stead
 * (docs/service.md, "Who does what"): a PUT fragment placed into the
 * target's memory and the last one acknowledged, a GET answered from it,
 * while the target may sleep in pause().
 *
 * Exactly the target engine's rules (engine.c: place_put_frag, serve_gets):
 * the whole operation is checked against the target's key table, a refused
 * PUT writes nothing and is answered once, a GET is checked again for every
 * piece. We announce ourselves in the hazard slot of the initiator's rank
 * and endpoint, as its engine would over shm, and in the inbox's attached
 * bitmap, so that the owner's uln_mr_dereg waits for us. Our hazard store is
 * seq_cst (the classic Dekker side), right for every owner whether it
 * fences at dereg or not. Refusals are counted in the owner's inbox header,
 * as the direct path counts them.
 *
 * The bytes move through our mapping of the target's uln_mem_alloc memory
 * (mem.c), else with process_vm_writev/readv, which need the right to trace
 * the target (root, or the same uid where Yama allows). Where that is
 * refused, the target's own engine places and serves what is not mapped
 * here (SERVE_ENGINE) as before. Memory from uln_mem_alloc is mapped here (mem.c): its bytes move
 * with memcpy, and atomics on it are applied here; atomics on other memory
 * go to the target's engine (process_vm_* cannot be atomic).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "ulnetd.h"

/* Enter region key of t for src's endpoint ep: the entry's address in t's
 * space for [off, off+len) with rights need, or -errno (counted). The
 * hazard stays set until leave(). */
static int enter(struct client *t, uint32_t src, uint32_t ep, uint64_t key, uint64_t off,
                 uint64_t len, unsigned need, uint64_t *addr)
{
    struct uln_inbox_hdr *live = (struct uln_inbox_hdr *)t->inbox;
    uint64_t idx = key >> ULN_KEY_INDEX_SHIFT;
    int rc = -ENOKEY;
    if (idx < t->hdr.max_regions) {
        if (src < ULN_SVC_GONE_WORDS * 64 && !(t->attached_srcs[src / 64] >> (src % 64) & 1)) {
            /* Before the first hazard: the owner's dereg reads the slots of
             * the ranks in this bitmap only (inbox.h). Seq_cst RMW. */
            uln_inbox_mark(uln_inbox_attached_at(t->inbox, &t->hdr), (int)src);
            t->attached_srcs[src / 64] |= 1ull << (src % 64);
        }
        struct uln_key_entry *e = (struct uln_key_entry *)(t->inbox + t->hdr.keys_off) + idx;
        _Atomic uint32_t *hz = uln_inbox_hazard_at(t->inbox, &t->hdr, (int)src, (int)ep);
        uint64_t live_key = uln_hazard_enter(hz, (uint32_t)idx, false, &e->key);
        struct uln_key_entry copy;
        memcpy(&copy, (const void *)e, sizeof copy); /* the owner's to change: checked once */
        rc = uln_key_check(&copy, live_key, key, &off, len, need);
        if (rc)
            uln_hazard_leave(hz);
        else
            *addr = copy.addr + off;
    }
    if (rc) uln_count_refusal_at(live, rc);
    return rc;
}

static void leave(struct client *t, uint32_t src, uint32_t ep)
{
    uln_hazard_leave(uln_inbox_hazard_at(t->inbox, &t->hdr, (int)src, (int)ep));
}

/* Move n bytes between here and t's address space. 0, -EPERM (we may not:
 * forward from now on), -ECONNRESET (t has just died: its hang-up is on its
 * way to us), or -EFAULT. */
static int vm_copy(struct client *t, bool write, void *here, uint64_t there, uint64_t n)
{
    if (!n) return 0;
    struct iovec l = {here, n}, r = {(void *)(uintptr_t)there, n};
    ssize_t k = write ? process_vm_writev(t->pid, &l, 1, &r, 1, 0)
                      : process_vm_readv(t->pid, &l, 1, &r, 1, 0);
    if (k == (ssize_t)n) return 0;
    if (k < 0 && errno == ESRCH) return -ECONNRESET;
    return k < 0 && (errno == EPERM || errno == ENOSYS) ? -EPERM : -EFAULT;
}

/* ... through our mapping of region key when it is one from uln_mem_alloc
 * (a memcpy on the owner's own pages), else with process_vm_*. Under the
 * hazard: the region stays the owner's until we leave. */
static int copy(struct ulnetd *d, struct client *t, bool write, uint64_t key, void *here,
                uint64_t there, uint64_t n)
{
    uint8_t *p = n && !d->no_map ? mem_at(t, key, there, n) : NULL;
    if (!p && n && t->no_vm) return -EPERM; /* refused before: not asked again */
    if (!p) return vm_copy(t, write, here, there, n);
    if (write)
        memcpy(p, here, n);
    else
        memcpy(here, p, n);
    d->c.mapped_ops++;
    return 0;
}

static int no_vm(struct client *t)
{
    if (!t->no_vm)
        fprintf(stderr,
                "ulnetd: may not reach pid %d's memory (process_vm_*): its engine "
                "places and serves for it\n",
                (int)t->pid);
    t->no_vm = true;
    return SERVE_ENGINE; /* this one (nothing of it done here) and the like */
}

/* Room for an answer of len bytes from t to o, or NULL (not now). */
static void *answer_reserve(struct ulnetd *d, const struct origin *o, struct client *t,
                            uint32_t len)
{
    /* A GET whose data its service (we) places: a piece read here goes
     * straight into the initiator's buffer at commit (place.c), its
     * completion's room in the initiator's ring made sure of first, so the
     * commit always takes the piece. */
    if (o->placed)
        return feed_reserve(o->c, t->rank, o->ep, 0, sizeof(struct uln_get_resp))
                   ? place_bounce(len)
                   : NULL;
    if (o->c) return feed_reserve(o->c, t->rank, o->ep, 0, len);
    return wire_answer_reserve(d, o, t, len);
}

static void answer_commit(struct ulnetd *d, const struct origin *o, struct client *t, uint8_t type,
                          uint32_t len)
{
    if (o->placed) {
        struct uln_msg m = {.type = type, .len = len};
        (void)place_resp(d, o->c, o->ep, t->rank, &m, place_bounce(len)); /* room made sure of */
        return;
    }
    if (o->c)
        feed_commit(o->c, t->rank, o->ep, 0, type, 0, len);
    else
        wire_answer_commit(d, o, t, type, len);
}

int serve_put(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload)
{
    struct uln_put_frag f;
    uint32_t src = o->rank, ep = o->ep;
    if (m->len < sizeof f) {
        d->c.malformed++;
        return SERVE_DONE;
    }
    memcpy(&f, payload, sizeof f);
    uint64_t n = m->len - sizeof f;
    struct feed *tf = feed_of(t, src, ep, 0);
    if (!tf) return SERVE_LATER;
    if (uln_refused_is(&tf->refused, f.op_id, f.key, f.op_offset, f.op_len))
        return SERVE_DONE; /* the rest of a refused PUT: answered already */
    if (f.offset < f.op_offset || f.offset - f.op_offset > f.op_len ||
        n > f.op_len - (f.offset - f.op_offset)) {
        d->c.malformed++;
        return SERVE_DONE;
    }
    bool last = m->flags & ULN_FRAG_LAST, imm = m->flags & ULN_FRAG_IMM;
    /* Room for every answer before anything is placed: a fragment is never
     * placed and then left in the queue to be placed again. The target's
     * ring first: the wire's room is only good until the next send. */
    struct uln_ack *a = NULL;
    struct uln_put_notify *pn = NULL;
    if (last && imm && !(pn = feed_reserve(t, src, ep, 0, sizeof *pn))) return SERVE_LATER;
    if (last && !(a = answer_reserve(d, o, t, sizeof *a))) return SERVE_LATER;
    uint64_t addr = 0;
    int rc = enter(t, src, ep, f.key, f.op_offset, f.op_len, ULN_ACCESS_REMOTE_WRITE, &addr);
    if (!rc) {
        rc = copy(d, t, true, f.key, (void *)(payload + sizeof f), addr + (f.offset - f.op_offset),
                  n);
        leave(t, src, ep);
        if (rc == -EPERM) return no_vm(t);
    }
    if (rc) {
        if (!a && !(a = answer_reserve(d, o, t, sizeof *a))) return SERVE_LATER;
        d->c.refused_ops++;
        tf->refused = (struct uln_refused_put){.valid = true,
                                               .op_id = f.op_id,
                                               .key = f.key,
                                               .op_offset = f.op_offset,
                                               .op_len = f.op_len,
                                               .status = rc};
    }
    if (a) {
        *a = (struct uln_ack){.op_id = f.op_id, .status = rc};
        answer_commit(d, o, t, ULN_MSG_ACK, sizeof *a);
    }
    if (pn && !rc) {
        /* The target's completion (put_imm): waits in its ring for its CQ. */
        *pn = (struct uln_put_notify){.imm = f.imm, .offset = f.op_offset, .len = f.op_len};
        feed_commit(t, src, ep, 0, ULN_MSG_PUT_NOTIFY, 0, sizeof *pn);
    }
    return SERVE_DONE;
}

int serve_get(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload)
{
    struct uln_get_req r;
    uint32_t src = o->rank, ep = o->ep;
    if (m->len != sizeof r) {
        d->c.malformed++;
        return SERVE_DONE;
    }
    memcpy(&r, payload, sizeof r);
    uint64_t piece = o->piece - sizeof(struct uln_get_resp), *sent = o->get_sent;
    for (;;) {
        uint64_t n = r.len - *sent < piece ? r.len - *sent : piece;
        struct uln_get_resp *g = answer_reserve(d, o, t, (uint32_t)(sizeof *g + n));
        if (!g) return SERVE_LATER;
        /* The whole request checked for every piece, as the engine does. */
        uint64_t addr = 0;
        int rc = enter(t, src, ep, r.key, r.offset, r.len, ULN_ACCESS_REMOTE_READ, &addr);
        if (!rc) {
            rc = copy(d, t, false, r.key, g + 1, addr + *sent, n);
            leave(t, src, ep);
            if (rc == -EPERM) {
                if (*sent)
                    rc = -EFAULT; /* cannot be: a region is mapped or not throughout */
                else
                    return no_vm(t); /* nothing committed: forwarded whole */
            }
        }
        if (rc) {
            n = 0;
            d->c.refused_ops++;
        }
        *g = (struct uln_get_resp){.op_id = r.op_id, .op_offset = *sent, .status = rc};
        answer_commit(d, o, t, ULN_MSG_GET_RESP, (uint32_t)(sizeof *g + n));
        *sent += n;
        if (rc || *sent >= r.len) {
            *sent = 0;
            return SERVE_DONE;
        }
    }
}

/* An atomic on a word of t's uln_mem_alloc memory: applied here with
 * atomic.c's table on our mapping of it - one locked instruction on the
 * same physical word the owner's own __atomic ops, its shm peers and its
 * engine use, so atomic against all of them (seq_cst, atomic.c says why).
 * Checked as the engine checks (uln_atomic_serve): op and width, key,
 * range, rights, alignment; refusals counted in t's inbox header. On other
 * memory SERVE_ENGINE: process_vm_* cannot be atomic, t's engine applies. */
int serve_atomic(struct ulnetd *d, const struct origin *o, struct client *t,
                 const struct uln_msg *m, const uint8_t *payload)
{
    struct uln_atomic_req r;
    if (d->no_map || !t->maps) return SERVE_ENGINE; /* nothing of t's is mapped here */
    if (m->len != sizeof r) return SERVE_ENGINE;    /* its engine counts it malformed */
    memcpy(&r, payload, sizeof r);
    struct uln_atomic_resp *a = answer_reserve(d, o, t, sizeof *a);
    if (!a) return SERVE_LATER;
    uint64_t old = 0, addr = 0;
    int rc = -EPROTO;
    if (uln_atomic_valid(r.op, r.width))
        rc = enter(t, o->rank, o->ep, r.key, r.offset, r.width, ULN_ACCESS_REMOTE_ATOMIC, &addr);
    else
        d->c.malformed++;
    if (!rc) {
        uint8_t *w = mem_at(t, r.key, addr, r.width);
        if (!w) {
            leave(t, o->rank, o->ep);
            return SERVE_ENGINE; /* the answer's room reserved, not committed: nothing sent */
        }
        if (addr & (r.width - 1u)) {
            rc = -EDOM;
            uln_count_refusal_at((struct uln_inbox_hdr *)t->inbox, rc);
        } else
            old = uln_atomic_apply(w, &r);
        leave(t, o->rank, o->ep);
    }
    if (rc)
        d->c.refused_ops++;
    else
        d->c.atomics++;
    *a = (struct uln_atomic_resp){.op_id = r.op_id, .old = old, .status = rc};
    answer_commit(d, o, t, ULN_MSG_ATOMIC_RESP, sizeof *a);
    return SERVE_DONE;
}

int serve_one(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload)
{
    int r;
    switch (m->type) {
    case ULN_MSG_PUT_FRAG:
    case ULN_MSG_GET_REQ:
        /* No process_vm_* on t: what is mapped here is still ours to serve. */
        if (t->no_vm && (!t->maps || d->no_map)) return SERVE_ENGINE;
        r = m->type == ULN_MSG_PUT_FRAG ? serve_put(d, o, t, m, payload)
                                        : serve_get(d, o, t, m, payload);
        if (r == SERVE_DONE) d->c.served++;
        return r;
    case ULN_MSG_ATOMIC_REQ:
        return serve_atomic(d, o, t, m, payload);
    default:
        return SERVE_ENGINE;
    }
}
