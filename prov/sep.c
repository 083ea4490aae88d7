/*
 * sep.c - scalable endpoints (fi_scalable_ep, FI_NAMED_RX_CTX): a scalable
 * endpoint holds up to ULNFI_SEP_MAX transmit and receive contexts, each an
 * endpoint of ours with its own ulnet endpoint, CQs and queues. Receive
 * context i is reached at fi_rx_addr(addr, i, rx_ctx_bits): the AV (av.c)
 * turns that into the ulnet endpoint at the named endpoint's index plus i,
 * so the receive contexts take consecutive ulnet indices, in order, as
 * they are enabled (an enable that cannot is -FI_ENOSPC). The scalable
 * endpoint's name is receive context 0's, the one the name service
 * publishes.
 */
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"

struct ulnfi_sep {
    struct fid_ep ep;
    struct ulnfi_domain *dom;
    struct fi_info *info;
    struct ulnfi_av *av;
    int ntx, nrx;
    struct ulnfi_ep *tx[ULNFI_SEP_MAX], *rx[ULNFI_SEP_MAX];
};

static int sep_close(struct fid *fid)
{
    struct ulnfi_sep *s = ulnfi_container(fid, struct ulnfi_sep, ep.fid);
    for (int i = 0; i < ULNFI_SEP_MAX; i++)
        if (s->tx[i] || s->rx[i]) return -FI_EBUSY; /* its contexts close first */
    if (s->av) s->av->refs--;
    fi_freeinfo(s->info);
    free(s);
    return 0;
}

static int sep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct ulnfi_sep *s = ulnfi_container(fid, struct ulnfi_sep, ep.fid);
    if (bfid->fclass != FI_CLASS_AV) return -FI_EINVAL; /* CQs and counters: per context */
    if (s->av) return -FI_EINVAL;
    s->av = ulnfi_container(bfid, struct ulnfi_av, av.fid);
    if (s->av->dom != s->dom) return -FI_EINVAL;
    s->av->refs++;
    return 0;
}

/* fi_enable of the scalable endpoint: its contexts are enabled one by one. */
static int sep_control(struct fid *fid, int command, void *arg)
{
    struct ulnfi_sep *s = ulnfi_container(fid, struct ulnfi_sep, ep.fid);
    if (command != FI_ENABLE) return -FI_ENOSYS;
    return s->av ? 0 : -FI_ENOAV;
}

static struct fi_ops sep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = sep_close,
    .bind = sep_bind,
    .control = sep_control,
    .ops_open = ulnfi_no_ops_open,
};

/* A context: an endpoint made from the scalable endpoint's info, with one
 * context each way, that publishes its name only as receive context 0. */
static int ctx_open(struct ulnfi_sep *s, int index, bool rx, struct fid_ep **out, void *context)
{
    if (index < 0 || index >= (rx ? s->nrx : s->ntx)) return -FI_EINVAL;
    struct ulnfi_ep **slot = rx ? &s->rx[index] : &s->tx[index];
    if (*slot) return -FI_EBUSY;
    struct fi_info *info = fi_dupinfo(s->info);
    if (!info) return -FI_ENOMEM;
    info->ep_attr->tx_ctx_cnt = 1;
    info->ep_attr->rx_ctx_cnt = 1;
    if (!rx || index) { /* no name service but receive context 0's */
        free(info->src_addr);
        info->src_addr = NULL;
        info->src_addrlen = 0;
    }
    struct fid_ep *fep;
    int rc = ulnfi_ep_open(&s->dom->dom, info, &fep, context);
    fi_freeinfo(info);
    if (rc) return rc;
    struct ulnfi_ep *ep = ulnfi_container(fep, struct ulnfi_ep, ep);
    ep->sep = s;
    ep->sep_index = index;
    ep->sep_rx = rx;
    ep->ep.fid.fclass = rx ? FI_CLASS_RX_CTX : FI_CLASS_TX_CTX;
    *slot = ep;
    *out = fep;
    return 0;
}

static int sep_tx_ctx(struct fid_ep *fep, int index, struct fi_tx_attr *attr, struct fid_ep **out,
                      void *context)
{
    return ctx_open(ulnfi_container(fep, struct ulnfi_sep, ep), index, false, out, context);
}
static int sep_rx_ctx(struct fid_ep *fep, int index, struct fi_rx_attr *attr, struct fid_ep **out,
                      void *context)
{
    return ctx_open(ulnfi_container(fep, struct ulnfi_sep, ep), index, true, out, context);
}

/* Called by a context's enable (ep.c), under the domain lock: the AV it
 * uses, and for receive context i > 0 the check that it sits at receive
 * context 0's index plus i, with context 0's life (names carry one). */
int ulnfi_sep_ctx_enable(struct ulnfi_ep *ep)
{
    struct ulnfi_sep *s = ep->sep;
    if (!ep->av) {
        if (!s->av) return -FI_ENOAV;
        ep->av = s->av;
        s->av->refs++;
    }
    return 0;
}

int ulnfi_sep_ctx_placed(struct ulnfi_ep *ep)
{
    struct ulnfi_sep *s = ep->sep;
    if (!ep->sep_rx || !ep->sep_index) return 0;
    struct ulnfi_ep *r0 = s->rx[0];
    if (!r0 || !r0->enabled || ep->index != r0->index + ep->sep_index) {
        FI_WARN(&ulnfi_prov, FI_LOG_EP_CTRL,
                "receive context %d: ulnet endpoint %d is not receive context 0's plus %d "
                "(enable them in order, none closed between)\n",
                ep->sep_index, ep->index, ep->sep_index);
        return -FI_ENOSPC;
    }
    ep->gen = r0->gen;
    return 0;
}

void ulnfi_sep_ctx_closed(struct ulnfi_ep *ep)
{
    struct ulnfi_sep *s = ep->sep;
    if (ep->sep_rx)
        s->rx[ep->sep_index] = NULL;
    else
        s->tx[ep->sep_index] = NULL;
}

static int sep_getname(fid_t fid, void *addr, size_t *addrlen)
{
    struct ulnfi_sep *s = ulnfi_container(fid, struct ulnfi_sep, ep.fid);
    if (!s->rx[0]) return -FI_EOPBADSTATE;
    return ulnfi_ep_getname(s->rx[0], addr, addrlen);
}

static int sep_no(void)
{
    return -FI_ENOSYS;
}

static struct fi_ops_cm sep_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = (void *)sep_no,
    .getname = sep_getname,
    .getpeer = (void *)sep_no,
    .connect = (void *)sep_no,
    .listen = (void *)sep_no,
    .accept = (void *)sep_no,
    .reject = (void *)sep_no,
    .shutdown = (void *)sep_no,
    .join = (void *)sep_no,
};

static struct fi_ops_ep sep_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = (void *)sep_no,
    .getopt = (void *)sep_no,
    .setopt = (void *)sep_no,
    .tx_ctx = sep_tx_ctx,
    .rx_ctx = sep_rx_ctx,
    .rx_size_left = (void *)sep_no,
    .tx_size_left = (void *)sep_no,
};

int ulnfi_sep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
                   void *context)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    if (!info || !info->ep_attr || info->ep_attr->type != FI_EP_RDM) return -FI_EINVAL;
    size_t ntx = info->ep_attr->tx_ctx_cnt, nrx = info->ep_attr->rx_ctx_cnt;
    if (!ntx || ntx > ULNFI_SEP_MAX || !nrx || nrx > ULNFI_SEP_MAX) return -FI_EINVAL;
    struct ulnfi_sep *s = calloc(1, sizeof(*s));
    if (!s || !(s->info = fi_dupinfo(info))) {
        free(s);
        return -FI_ENOMEM;
    }
    s->dom = d;
    s->ntx = (int)ntx;
    s->nrx = (int)nrx;
    s->ep.fid.fclass = FI_CLASS_SEP;
    s->ep.fid.context = context;
    s->ep.fid.ops = &sep_fi_ops;
    s->ep.ops = &sep_ep_ops;
    s->ep.cm = &sep_cm_ops;
    *out = &s->ep;
    return 0;
}
