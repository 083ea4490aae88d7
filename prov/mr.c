/*
 * mr.c - memory registration: a ulnet region per fi_mr. The key is ulnet's
 * region key (FI_MR_PROV_KEY). Remote addresses are byte offsets in the
 * region, or with FI_MR_VIRT_ADDR the owner's virtual addresses: the region
 * is registered with ULN_MR_VADDR, and ulnet's key check, which knows the
 * region's base, turns them into offsets. Local buffers need no registration
 * (no FI_MR_LOCAL).
 *
 * Counters bound to a region (fi_mr_bind, FI_REMOTE_WRITE/FI_REMOTE_READ)
 * count the RMA and atomics that target it: ulnet places the data without
 * the target's provider seeing it, so they move on the initiator's
 * FI_RMA_EVENT notice (rma.c), which names the region's key. Both sides ask
 * for FI_RMA_EVENT, as for the endpoint's remote counters.
 */
#include <stdlib.h>

#include "ulnfi.h"

/* Take m off the domain's list of regions with counters, and let its
 * counters go. Under the domain lock. */
static void unbind_all(struct ulnfi_mr *m)
{
    for (struct ulnfi_mr **p = &m->dom->ev_mrs; *p; p = &(*p)->ev_next)
        if (*p == m) {
            *p = m->ev_next;
            break;
        }
    if (m->rwr_cntr) m->rwr_cntr->refs--;
    if (m->rrd_cntr) m->rrd_cntr->refs--;
    m->rwr_cntr = m->rrd_cntr = NULL;
}

void ulnfi_mr_event(struct ulnfi_domain *d, uint64_t key, uint32_t what)
{
    for (struct ulnfi_mr *m = d->ev_mrs; m; m = m->ev_next)
        if (m->mr.key == key) {
            if (what & ULNFI_EV_WRITE) ulnfi_cntr_inc(m->rwr_cntr);
            if (what & ULNFI_EV_READ) ulnfi_cntr_inc(m->rrd_cntr);
            return;
        }
}

static int mr_close(struct fid *fid)
{
    struct ulnfi_mr *m = ulnfi_container(fid, struct ulnfi_mr, mr.fid);
    ulnfi_lock(m->dom);
    unbind_all(m);
    int rc = uln_mr_dereg(m->umr);
    m->dom->refs--;
    ulnfi_unlock(m->dom);
    free(m);
    return ulnfi_errno(rc);
}

/* fi_mr(3): a counter of the remote writes (FI_REMOTE_WRITE) or reads
 * (FI_REMOTE_READ) that target the region; binding again replaces it. An
 * endpoint is no object to bind (FI_MR_ENDPOINT is not a mode of ours). */
static int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct ulnfi_mr *m = ulnfi_container(fid, struct ulnfi_mr, mr.fid);
    if (!bfid || bfid->fclass != FI_CLASS_CNTR) return -FI_EINVAL;
    if (!flags || flags & ~(uint64_t)(FI_REMOTE_WRITE | FI_REMOTE_READ)) return -FI_EBADFLAGS;
    struct ulnfi_cntr *c = ulnfi_container(bfid, struct ulnfi_cntr, cntr.fid);
    if (c->dom != m->dom) return -FI_EINVAL;
    ulnfi_lock(m->dom);
    struct ulnfi_cntr **slot[2] = {flags & FI_REMOTE_WRITE ? &m->rwr_cntr : NULL,
                                   flags & FI_REMOTE_READ ? &m->rrd_cntr : NULL};
    for (int i = 0; i < 2; i++) {
        if (!slot[i]) continue;
        if (*slot[i]) (*slot[i])->refs--;
        *slot[i] = c;
        c->refs++;
    }
    bool listed = false;
    for (struct ulnfi_mr *e = m->dom->ev_mrs; e && !listed; e = e->ev_next)
        listed = e == m;
    if (!listed) {
        m->ev_next = m->dom->ev_mrs;
        m->dom->ev_mrs = m;
    }
    ulnfi_unlock(m->dom);
    return 0;
}

/* fi_mr(3)'s fi_mr_enable: a region counts from its binding on, so there is
 * nothing to enable (FI_MR_RMA_EVENT is not a mode we ask for). */
static int mr_control(struct fid *fid, int command, void *arg)
{
    return command == FI_ENABLE ? 0 : -FI_ENOSYS;
}

static struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = mr_close,
    .bind = mr_bind,
    .control = mr_control,
    .ops_open = ulnfi_no_ops_open,
};

static int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
                      struct fid_mr **out)
{
    struct ulnfi_domain *d = ulnfi_container(fid, struct ulnfi_domain, dom.fid);
    if (fid->fclass != FI_CLASS_DOMAIN) return -FI_EINVAL;
    if (!attr || attr->iov_count != 1) return -FI_EINVAL; /* mr_iov_limit 1 */
    if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
    /* FI_RMA_EVENT: counters will be bound (mr_bind); nothing to do before */
    if (flags & ~(uint64_t)FI_RMA_EVENT) return -FI_EBADFLAGS;
    if (attr->offset) return -FI_EINVAL; /* offsets start at the region's first byte */
    unsigned acc = 0;
    if (attr->access & FI_REMOTE_READ) acc |= ULN_ACCESS_REMOTE_READ;
    /* fi_mr(3): FI_REMOTE_WRITE makes the buffer "the target buffer of an RMA
     * write or atomic operation"; ulnet has one right for every atomic, so a
     * fetching atomic on a region without FI_REMOTE_READ is not refused
     * (docs/provider.md). */
    if (attr->access & FI_REMOTE_WRITE) acc |= ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_ATOMIC;
    if (d->mr_vaddr) acc |= ULN_MR_VADDR;
    struct ulnfi_mr *m = calloc(1, sizeof(*m));
    if (!m) return -FI_ENOMEM;
    ulnfi_lock(d);
    int rc = uln_mr_reg(d->ctx, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, acc, &m->umr);
    if (!rc) d->refs++;
    ulnfi_unlock(d);
    if (rc) {
        free(m);
        return ulnfi_errno(rc);
    }
    m->dom = d;
    m->access = attr->access;
    m->mr.fid.fclass = FI_CLASS_MR;
    m->mr.fid.context = attr->context;
    m->mr.fid.ops = &mr_fi_ops;
    m->mr.mem_desc = m;
    m->mr.key = uln_mr_key(m->umr);
    *out = &m->mr;
    return 0;
}

static int mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
                   uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
                   void *context)
{
    struct fi_mr_attr a = {.mr_iov = iov,
                           .iov_count = count,
                           .access = access,
                           .offset = offset,
                           .requested_key = requested_key,
                           .context = context,
                           .iface = FI_HMEM_SYSTEM};
    return mr_regattr(fid, &a, flags, mr);
}

static int mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
                  uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return mr_regv(fid, &iov, 1, access, offset, requested_key, flags, mr, context);
}

struct fi_ops_mr ulnfi_mr_ops = {
    .size = sizeof(struct fi_ops_mr),
    .reg = mr_reg,
    .regv = mr_regv,
    .regattr = mr_regattr,
};
