/*
 * util.c - small helpers shared by the provider's objects: ulnet status to
 * libfabric error, iov copies, and the "not supported" entry points
 * (libfabric's own fi_no_* are internal to libfabric, not exported).
 */
#include <errno.h>
#include <string.h>

#include "ulnfi.h"

/* fi_errno(3) values are the errno ones. Two ulnet causes have no libfabric
 * twin: an unknown or stale region key is a rejected key (FI_EKEYREJECTED),
 * and an access outside the region is an access error (FI_EACCES). The exact
 * ulnet cause stays in the error entry's prov_errno (fi_cq_strerror). */
int ulnfi_errno(int s)
{
    switch (s) {
    case 0:
        return 0;
    case -ENOKEY:
        return -FI_EKEYREJECTED;
    case -ERANGE:
        return -FI_EACCES;
    case -EDOM: /* an atomic's word not naturally aligned: a bad address */
        return -FI_EINVAL;
    case -EACCES:
        return -FI_EACCES;
    case -ECONNRESET:
        return -FI_ECONNRESET;
    case -ECANCELED:
        return -FI_ECANCELED;
    case -EPERM:
        return -FI_EPERM;
    case -EMSGSIZE:
        return -FI_EMSGSIZE;
    case -EAGAIN:
        return -FI_EAGAIN;
    case -ENOSPC:
        return -FI_ENOSPC;
    case -ENOMEM:
        return -FI_ENOMEM;
    case -EFAULT:
        return -FI_EFAULT;
    case -EBADF:
        return -FI_EBADF;
    case -EINVAL:
        return -FI_EINVAL;
    case -ETIMEDOUT:
        return -FI_ETIMEDOUT;
    default:
        return -FI_EIO;
    }
}

/* fi_cq_strerror and fi_eq_strerror: an entry's prov_errno is ulnet's
 * -errno (either sign accepted), said in ulnet's words. */
const char *ulnfi_strerror(int prov_errno, char *buf, size_t len)
{
    const char *s = uln_strerror(-(prov_errno < 0 ? -prov_errno : prov_errno));
    if (!buf || !len) return s;
    strncpy(buf, s, len - 1);
    buf[len - 1] = '\0';
    return buf;
}

size_t ulnfi_iov_len(const struct iovec *iov, size_t count)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        n += iov[i].iov_len;
    return n;
}

/* Copy len bytes of src to byte off of the iov list seen as one range. */
size_t ulnfi_copy_to_iov(const struct iovec *iov, size_t count, size_t off, const void *src,
                         size_t len)
{
    const uint8_t *s = src;
    size_t done = 0;
    for (size_t i = 0; i < count && done < len; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t n = iov[i].iov_len - off;
        if (n > len - done) n = len - done;
        memcpy((uint8_t *)iov[i].iov_base + off, s + done, n);
        done += n;
        off = 0;
    }
    return done;
}

size_t ulnfi_copy_from_iov(void *dst, const struct iovec *iov, size_t count, size_t len)
{
    uint8_t *d = dst;
    size_t done = 0;
    for (size_t i = 0; i < count && done < len; i++) {
        size_t n = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;
        if (n) memcpy(d + done, iov[i].iov_base, n);
        done += n;
    }
    return done;
}

int ulnfi_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    return -FI_ENOSYS;
}
int ulnfi_no_control(struct fid *fid, int command, void *arg)
{
    return -FI_ENOSYS;
}
int ulnfi_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
    return -FI_ENOSYS;
}
int ulnfi_no_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep,
                        void *context)
{
    return -FI_ENOSYS;
}
int ulnfi_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
                       struct fid_wait **waitset)
{
    return -FI_ENOSYS;
}
