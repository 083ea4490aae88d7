/*
 * tagged.c - FI_TAGGED: the same sends and receives as FI_MSG (msg.c), with
 * a tag and ignore bits, matched by the tag matcher (match.c).
 */
#include "ulnfi.h"

#define EP(fep) ulnfi_ep_of(fep) /* itself, or what an alias stands for */

static ssize_t t_recv(struct fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t src,
                      uint64_t tag, uint64_t ignore, void *context)
{
    struct iovec iov = {buf, len};
    return ulnfi_recv(EP(fep), &iov, 1, src, tag, ignore, context, ulnfi_rx_flags(fep), true);
}
static ssize_t t_recvv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
    return ulnfi_recv(EP(fep), iov, count, src, tag, ignore, context, ulnfi_rx_flags(fep), true);
}
static ssize_t t_recvmsg(struct fid_ep *fep, const struct fi_msg_tagged *m, uint64_t flags)
{
    return ulnfi_recv(EP(fep), m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore, m->context,
                      flags & ~ULNFI_INJECT_CALL, true);
}
static ssize_t t_send(struct fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                      uint64_t tag, void *context)
{
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(EP(fep), &iov, 1, dest, tag, 0, context, ulnfi_tx_flags(fep), true);
}
static ssize_t t_sendv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t dest, uint64_t tag, void *context)
{
    return ulnfi_send(EP(fep), iov, count, dest, tag, 0, context, ulnfi_tx_flags(fep), true);
}
static ssize_t t_sendmsg(struct fid_ep *fep, const struct fi_msg_tagged *m, uint64_t flags)
{
    return ulnfi_send(EP(fep), m->msg_iov, m->iov_count, m->addr, m->tag, m->data, m->context,
                      flags & ~ULNFI_INJECT_CALL, true);
}
static ssize_t t_inject(struct fid_ep *fep, const void *buf, size_t len, fi_addr_t dest,
                        uint64_t tag)
{
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(EP(fep), &iov, 1, dest, tag, 0, NULL, FI_INJECT | ULNFI_INJECT_CALL, true);
}
static ssize_t t_senddata(struct fid_ep *fep, const void *buf, size_t len, void *desc,
                          uint64_t data, fi_addr_t dest, uint64_t tag, void *context)
{
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(EP(fep), &iov, 1, dest, tag, data, context,
                      ulnfi_tx_flags(fep) | FI_REMOTE_CQ_DATA, true);
}
static ssize_t t_injectdata(struct fid_ep *fep, const void *buf, size_t len, uint64_t data,
                            fi_addr_t dest, uint64_t tag)
{
    struct iovec iov = {(void *)buf, len};
    return ulnfi_send(EP(fep), &iov, 1, dest, tag, data, NULL,
                      FI_INJECT | ULNFI_INJECT_CALL | FI_REMOTE_CQ_DATA, true);
}

struct fi_ops_tagged ulnfi_tagged_ops = {
    .size = sizeof(struct fi_ops_tagged),
    .recv = t_recv,
    .recvv = t_recvv,
    .recvmsg = t_recvmsg,
    .send = t_send,
    .sendv = t_sendv,
    .sendmsg = t_sendmsg,
    .inject = t_inject,
    .senddata = t_senddata,
    .injectdata = t_injectdata,
};
