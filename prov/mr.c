/*
 * mr.c - memory registration: a ulnet region per fi_mr. The key is ulnet's
 * region key (FI_MR_PROV_KEY). Remote addresses are byte offsets in the
 * region, or with FI_MR_VIRT_ADDR the owner's virtual addresses: the region
 * is registered with ULN_MR_VADDR, and ulnet's key check, which knows the
 * region's base, turns them into offsets. Local buffers need no registration
 * (no FI_MR_LOCAL).
 */
#include <stdlib.h>

#include "ulnfi.h"

static int mr_close(struct fid *fid)
{
    struct ulnfi_mr *m = ulnfi_container(fid, struct ulnfi_mr, mr.fid);
    ulnfi_lock(m->dom);
    int rc = uln_mr_dereg(m->umr);
    m->dom->refs--;
    ulnfi_unlock(m->dom);
    free(m);
    return ulnfi_errno(rc);
}

static int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    return -FI_ENOSYS; /* FI_MR_ENDPOINT is not a mode of ours */
}

static struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = mr_close,
    .bind = mr_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

static int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
                      struct fid_mr **out)
{
    struct ulnfi_domain *d = ulnfi_container(fid, struct ulnfi_domain, dom.fid);
    if (fid->fclass != FI_CLASS_DOMAIN) return -FI_EINVAL;
    if (!attr || attr->iov_count != 1) return -FI_EINVAL; /* mr_iov_limit 1 */
    if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
    if (flags & ~(uint64_t)FI_RMA_EVENT) return -FI_EBADFLAGS;
    if (flags & FI_RMA_EVENT)
        return -FI_ENOSYS;               /* regions' counters: not offered (docs/provider.md) */
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
