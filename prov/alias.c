/*
 * alias.c - fi_ep_alias (fi_endpoint(3)): another fid_ep for an endpoint,
 * with default op flags of its own for the directions named (FI_TRANSMIT,
 * FI_RECV); the other direction keeps the endpoint's. Data operations on it
 * are the endpoint's (msg.c, tagged.c, rma.c and atomic.c find it through
 * ulnfi_ep_of), and so are cancel, options and names: it forwards them. It
 * binds nothing, and closes before its endpoint.
 */
#include <stdlib.h>

#include "ulnfi.h"

#define OF(fid) (((struct ulnfi_alias *)(fid))->of)

static int alias_close(struct fid *fid)
{
    struct ulnfi_alias *a = (struct ulnfi_alias *)fid;
    ulnfi_lock(a->of->dom);
    a->of->aliases--;
    ulnfi_unlock(a->of->dom);
    free(a);
    return 0;
}

static int alias_control(struct fid *fid, int command, void *arg)
{
    struct ulnfi_alias *a = (struct ulnfi_alias *)fid;
    uint64_t *f = arg;
    if (command != FI_GETOPSFLAG && command != FI_SETOPSFLAG) return -FI_ENOSYS;
    uint64_t *mine = *f & FI_TRANSMIT ? &a->tx_op_flags : *f & FI_RECV ? &a->rx_op_flags : NULL;
    if (!mine) return -FI_EINVAL;
    if (command == FI_GETOPSFLAG)
        *f = *mine;
    else
        *mine = *f & ~(uint64_t)(FI_TRANSMIT | FI_RECV);
    return 0;
}

struct fi_ops ulnfi_alias_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = alias_close,
    .bind = ulnfi_no_bind,
    .control = alias_control,
    .ops_open = ulnfi_no_ops_open,
};

/* ---- what it forwards to its endpoint ------------------------------------------------- */

static ssize_t a_cancel(fid_t fid, void *context)
{
    return OF(fid)->ep.ops->cancel(&OF(fid)->ep.fid, context);
}
static int a_getopt(fid_t fid, int level, int name, void *val, size_t *len)
{
    return OF(fid)->ep.ops->getopt(&OF(fid)->ep.fid, level, name, val, len);
}
static int a_setopt(fid_t fid, int level, int name, const void *val, size_t len)
{
    return OF(fid)->ep.ops->setopt(&OF(fid)->ep.fid, level, name, val, len);
}
static int a_no_ctx(struct fid_ep *sep, int index, void *attr, struct fid_ep **ep, void *context)
{
    return -FI_ENOSYS; /* an alias has no contexts of its own */
}
static ssize_t a_rx_left(struct fid_ep *fep)
{
    return OF(fep)->ep.ops->rx_size_left(&OF(fep)->ep);
}
static ssize_t a_tx_left(struct fid_ep *fep)
{
    return OF(fep)->ep.ops->tx_size_left(&OF(fep)->ep);
}

static struct fi_ops_ep alias_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = a_cancel,
    .getopt = a_getopt,
    .setopt = a_setopt,
    .tx_ctx = (void *)a_no_ctx,
    .rx_ctx = (void *)a_no_ctx,
    .rx_size_left = a_rx_left,
    .tx_size_left = a_tx_left,
};

static int a_setname(fid_t fid, void *addr, size_t len)
{
    return OF(fid)->ep.cm->setname(&OF(fid)->ep.fid, addr, len);
}
static int a_getname(fid_t fid, void *addr, size_t *len)
{
    return OF(fid)->ep.cm->getname(&OF(fid)->ep.fid, addr, len);
}
static int a_getpeer(struct fid_ep *fep, void *addr, size_t *len)
{
    return OF(fep)->ep.cm->getpeer(&OF(fep)->ep, addr, len);
}
static int a_connect(struct fid_ep *fep, const void *addr, const void *param, size_t len)
{
    return OF(fep)->ep.cm->connect(&OF(fep)->ep, addr, param, len);
}
static int a_accept(struct fid_ep *fep, const void *param, size_t len)
{
    return OF(fep)->ep.cm->accept(&OF(fep)->ep, param, len);
}
static int a_shutdown(struct fid_ep *fep, uint64_t flags)
{
    return OF(fep)->ep.cm->shutdown(&OF(fep)->ep, flags);
}
static int a_listen(struct fid_pep *pep)
{
    return -FI_EINVAL; /* not a passive endpoint */
}
static int a_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t len)
{
    return -FI_EINVAL;
}
static int a_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc,
                  void *context)
{
    return -FI_ENOSYS;
}

static struct fi_ops_cm alias_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = a_setname,
    .getname = a_getname,
    .getpeer = a_getpeer,
    .connect = a_connect,
    .listen = a_listen,
    .accept = a_accept,
    .reject = a_reject,
    .shutdown = a_shutdown,
    .join = a_join,
};

int ulnfi_alias_open(struct ulnfi_ep *ep, struct fi_alias *al)
{
    if (!al || !al->fid) return -FI_EINVAL;
    uint64_t dirs = al->flags & (FI_TRANSMIT | FI_RECV);
    if (!dirs) return -FI_EINVAL; /* fi_endpoint(3): a direction, at least */
    struct ulnfi_alias *a = calloc(1, sizeof(*a));
    if (!a) return -FI_ENOMEM;
    uint64_t f = al->flags & ~(uint64_t)(FI_TRANSMIT | FI_RECV);
    a->of = ep;
    a->tx_op_flags = dirs & FI_TRANSMIT ? f : ep->tx_op_flags;
    a->rx_op_flags = dirs & FI_RECV ? f : ep->rx_op_flags;
    a->ep = ep->ep; /* the endpoint's data operation tables, which find it through the alias */
    a->ep.fid.ops = &ulnfi_alias_fi_ops;
    a->ep.ops = &alias_ep_ops;
    a->ep.cm = &alias_cm_ops;
    ulnfi_lock(ep->dom);
    ep->aliases++;
    ulnfi_unlock(ep->dom);
    *al->fid = &a->ep.fid;
    return 0;
}
