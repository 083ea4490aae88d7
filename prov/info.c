/*
 * info.c - fi_getinfo: what the ulnet provider offers, filtered by the hints
 * as fi_getinfo(3) says: a hint the provider cannot honour means no fi_info
 * (-FI_ENODATA), never one that silently does less.
 *
 * Nothing here opens ulnet: fi_getinfo may be called by any process, in or out
 * of a job, as often as a client likes. The eager limit and inject_size come
 * from the nap_max endpoints will have (the open context's, else what
 * uln_config_query says uln_open would take: ulnfi_limits), so what is
 * advertised is what an inject may carry; tx_attr->size is the send queue's
 * depth, found the same way. Settings uln_open would refuse: no info.
 */
#include <stdlib.h>
#include <netdb.h>
#include <string.h>

#include "ulnfi.h"

#define ULNFI_PRIMARY                                                                              \
    (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND | FI_RECV |            \
     FI_REMOTE_READ | FI_REMOTE_WRITE | FI_DIRECTED_RECV | FI_NAMED_RX_CTX)
/* What needs registered memory and so the client's mr_mode (prov/atomic.c) */
#define ULNFI_MR_CAPS (FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define ULNFI_SECONDARY                                                                            \
    (FI_SOURCE | FI_REMOTE_CQ_DATA | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_MULTI_RECV | FI_SHARED_AV)
/* FI_RMA_EVENT costs a NAP after every RMA (mr.c), FI_TRIGGER (trigger.c)
 * refuses triggered messages: each given only when asked */
#define ULNFI_ASKED (FI_RMA_EVENT | FI_TRIGGER)
#define ULNFI_CAPS  (ULNFI_PRIMARY | ULNFI_SECONDARY | ULNFI_ASKED)
/* Of those, what fi_endpoint(3) says applies to a transmit or a receive
 * context: a secondary capability such as FI_REMOTE_CQ_DATA or FI_LOCAL_COMM
 * belongs to fi_info::caps only. */
#define ULNFI_TX_CAPS                                                                              \
    (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND | FI_NAMED_RX_CTX |    \
     FI_TRIGGER)
#define ULNFI_RX_CAPS                                                                              \
    (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE |        \
     FI_DIRECTED_RECV | FI_SOURCE | FI_MULTI_RECV | FI_RMA_EVENT)
#define ULNFI_MSG_ORDER (FI_ORDER_SAS)
/* Default op flags a client may ask for. FI_DELIVERY_COMPLETE: a send so
 * flagged goes by rendezvous, whose ACK comes once the data is in the receive
 * buffer (msg.c); RMA and atomics complete at the target anyway. */
#define ULNFI_OP_FLAGS                                                                             \
    (FI_INJECT | FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |                       \
     FI_DELIVERY_COMPLETE | FI_MULTI_RECV)
#define ULNFI_MAX_MSG        (1ULL << 40)
#define ULNFI_CORE_PROV_ONLY (1ULL << 59) /* libfabric's internal flag, ofi.h */
/* What each endpoint type offers. FI_EP_MSG: one peer, so no directed
 * receives or sources. FI_EP_DGRAM: messages of
 * one NAP, no RMA or atomics (fi_endpoint(3): datagram endpoints carry messages). */
#define ULNFI_MSG_EP_CAPS (ULNFI_CAPS & ~(uint64_t)(FI_DIRECTED_RECV | FI_SOURCE | FI_NAMED_RX_CTX))
#define ULNFI_DGRAM_CAPS                                                                           \
    (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA |   \
     FI_LOCAL_COMM | FI_REMOTE_COMM | FI_MULTI_RECV)

static uint64_t type_caps(enum fi_ep_type type)
{
    return type == FI_EP_MSG     ? ULNFI_MSG_EP_CAPS
           : type == FI_EP_DGRAM ? ULNFI_DGRAM_CAPS
                                 : ULNFI_CAPS;
}

static bool subset(uint64_t want, uint64_t have)
{
    return (want & ~have) == 0;
}

static bool check_fabric(const struct fi_fabric_attr *h)
{
    if (!h) return true;
    if (h->name && strcmp(h->name, ULNFI_NAME)) return false;
    if (h->prov_name && strcmp(h->prov_name, ULNFI_NAME)) return false;
    return true;
}

static bool check_domain(const struct fi_domain_attr *h, uint64_t caps, uint32_t version,
                         const struct ulnfi_limits *lim)
{
    if (!h) return true;
    if (h->name && strcmp(h->name, ULNFI_NAME)) return false;
    if (h->av_type != FI_AV_UNSPEC && h->av_type != FI_AV_MAP && h->av_type != FI_AV_TABLE)
        return false;
    if (h->cq_data_size > 8 || h->mr_key_size > 8) return false;
    /* tx/rx_ctx_cnt count the domain's contexts, one per endpoint; the
     * per-endpoint limits are max_ep_*_ctx. */
    if (h->tx_ctx_cnt > lim->max_eps || h->rx_ctx_cnt > lim->max_eps ||
        h->max_ep_tx_ctx > ULNFI_SEP_MAX || h->max_ep_rx_ctx > ULNFI_SEP_MAX)
        return false;
    if (h->ep_cnt > lim->max_eps || h->cq_cnt > ULNFI_MAX_EPS_FI * 2) return false;
    if (h->mr_cnt > lim->max_regions) return false;
    if (h->max_ep_stx_ctx > 1 || h->max_ep_srx_ctx > 1) return false;
    if (h->caps && !subset(h->caps, FI_LOCAL_COMM | FI_REMOTE_COMM)) return false;
    /* Memory registration: keys are chosen by ulnet (FI_MR_PROV_KEY; FI_MR_BASIC
     * includes it). That matters only to a client that does RMA or atomics. */
    bool mr = caps & (FI_RMA | FI_ATOMIC), v15 = FI_VERSION_GE(version, FI_VERSION(1, 5));
    if (mr && v15 && h->mr_mode != FI_MR_UNSPEC && h->mr_mode != FI_MR_BASIC &&
        !(h->mr_mode & FI_MR_PROV_KEY))
        return false;
    if (mr && v15 && h->mr_mode == FI_MR_UNSPEC)
        return false; /* 0 from a >= 1.5 client: it supports no mode bit */
    if (mr && !v15 && h->mr_mode == FI_MR_SCALABLE)
        return false; /* a pre-1.5 client's own keys: ours are chosen by ulnet */
    return true;
}

static bool check_ep(const struct fi_ep_attr *h)
{
    if (!h) return true;
    if (h->type != FI_EP_UNSPEC && h->type != FI_EP_RDM && h->type != FI_EP_MSG &&
        h->type != FI_EP_DGRAM)
        return false;
    if (h->protocol != FI_PROTO_UNSPEC) return false;
    if (h->max_msg_size > ULNFI_MAX_MSG) return false;
    if (h->msg_prefix_size) return false;
    /* one context each, or shared ones (fi_stx_context, fi_srx_context) */
    if ((h->tx_ctx_cnt > ULNFI_SEP_MAX && h->tx_ctx_cnt != FI_SHARED_CONTEXT) ||
        (h->rx_ctx_cnt > ULNFI_SEP_MAX && h->rx_ctx_cnt != FI_SHARED_CONTEXT))
        return false; /* more than one: a scalable endpoint's (sep.c) */
    return true;
}

/* The eager limit: one NAP less the header. 0 when nap_max is below what
 * the provider needs (fi_domain refuses it, fi_getinfo offers nothing). */
static size_t inject_size(uint32_t nap_max)
{
    return nap_max >= ULNFI_NAP_MIN ? nap_max - sizeof(struct ulnfi_hdr) : 0;
}

static bool check_tx(const struct fi_tx_attr *h, size_t inject, uint32_t sq_depth)
{
    if (!h) return true;
    if (h->caps && !subset(h->caps, ULNFI_TX_CAPS | ULNFI_SECONDARY)) return false;
    if (!subset(h->msg_order, ULNFI_MSG_ORDER)) return false;
    if (h->comp_order & ~(uint64_t)FI_ORDER_NONE) return false;
    if (!subset(h->op_flags, ULNFI_OP_FLAGS)) return false;
    if (h->inject_size > inject) return false;
    if (h->size > sq_depth) return false; /* the context's queue, set when it opens */
    if (h->iov_limit > ULNFI_IOV_LIMIT || h->rma_iov_limit > ULNFI_IOV_LIMIT) return false;
    return true;
}

static bool check_rx(const struct fi_rx_attr *h)
{
    if (!h) return true;
    if (h->caps && !subset(h->caps, ULNFI_RX_CAPS | ULNFI_SECONDARY)) return false;
    if (!subset(h->msg_order, ULNFI_MSG_ORDER)) return false;
    if (h->comp_order & ~(uint64_t)FI_ORDER_NONE) return false;
    if (!subset(h->op_flags, ULNFI_OP_FLAGS)) return false;
    if (h->size > (1u << 20)) return false;
    if (h->iov_limit > ULNFI_IOV_LIMIT) return false;
    return true;
}

/* A socket address given in hints: one of its format's family. */
static bool sa_ok(const struct fi_info *h, const void *a, size_t len)
{
    if (len < sizeof(struct sockaddr_in)) return false;
    socklen_t n = ulnfi_sa_len(a);
    if (!n || n > len) return false;
    if (h->addr_format == FI_SOCKADDR_IN) return n == sizeof(struct sockaddr_in);
    if (h->addr_format == FI_SOCKADDR_IN6) return n == sizeof(struct sockaddr_in6);
    return true;
}

static bool check_addr(const struct fi_info *h)
{
    if (ulnfi_sa_format(h->addr_format)) /* socket addresses (av_sockaddr.c) */
        return (!h->src_addr || sa_ok(h, h->src_addr, h->src_addrlen)) &&
               (!h->dest_addr || sa_ok(h, h->dest_addr, h->dest_addrlen));
    if (h->addr_format != FI_FORMAT_UNSPEC) return false;
    if (h->src_addr && h->src_addrlen != ULNFI_NAME_FULL) return false; /* fill_addrs' */
    struct ulnfi_addr a; /* a name, full or short (names.h), of its own length */
    if (h->dest_addr && ulnfi_name_read(h->dest_addr, h->dest_addrlen, &a)) return false;
    return true;
}

/* The capabilities to return: the primary ones asked for (all when none are),
 * the secondary ones ulnet gives anyway. */
static uint64_t pick_caps(const struct fi_info *h)
{
    if (!h || !(h->caps & ULNFI_PRIMARY)) {
        uint64_t c = ULNFI_CAPS;
        /* a client with no mr_mode cannot use our keys: no RMA, no atomics then */
        if (h && h->domain_attr && h->domain_attr->mr_mode == FI_MR_UNSPEC) c &= ~ULNFI_MR_CAPS;
        c &= ~(uint64_t)ULNFI_ASKED | (h ? h->caps : 0);
        return c;
    }
    uint64_t c = h->caps & ULNFI_PRIMARY;
    if (c & (FI_RMA | FI_ATOMIC) && !(c & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
        c |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (c & (FI_MSG | FI_TAGGED) && !(c & (FI_SEND | FI_RECV))) c |= FI_SEND | FI_RECV;
    return c | ULNFI_SECONDARY | (h->caps & ULNFI_ASKED);
}

/* The modes a client of RMA or atomics must follow: our keys, and remote
 * addresses as the target's virtual addresses when it asked for that
 * (FI_MR_VIRT_ADDR, or FI_MR_BASIC, which includes it), else offsets. */
static int mr_mode(const struct fi_domain_attr *hd, uint64_t caps, uint32_t version)
{
    if (!(caps & (FI_RMA | FI_ATOMIC))) return 0;
    /* a pre-1.5 client knows only BASIC and SCALABLE (fi_getinfo(3)): ours is BASIC */
    if (!FI_VERSION_GE(version, FI_VERSION(1, 5))) return FI_MR_BASIC;
    if (hd && hd->mr_mode == FI_MR_BASIC) return FI_MR_BASIC;
    if (hd && (hd->mr_mode & FI_MR_VIRT_ADDR)) return FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    return FI_MR_PROV_KEY;
}

static int fill(struct fi_info *fi, const struct fi_info *h, uint64_t caps, uint32_t version,
                size_t inject, const struct ulnfi_limits *lim, enum fi_ep_type type)
{
    fi->caps = caps;
    fi->mode = 0;
    fi->addr_format = FI_FORMAT_UNSPEC;
    /* fi_getinfo(3): a passive endpoint given as the hints' handle comes
     * back in the info, for fi_endpoint to take over its address */
    fi->handle = h && h->handle && h->handle->fclass == FI_CLASS_PEP ? h->handle : NULL;

    struct fi_tx_attr *tx = fi->tx_attr;
    tx->caps = caps & ULNFI_TX_CAPS;
    tx->op_flags = h && h->tx_attr ? h->tx_attr->op_flags : 0;
    tx->msg_order = ULNFI_MSG_ORDER;
    tx->comp_order = FI_ORDER_NONE;
    tx->inject_size = inject;
    tx->size = lim->sq_depth;
    tx->iov_limit = ULNFI_IOV_LIMIT;
    tx->rma_iov_limit = ULNFI_IOV_LIMIT;

    struct fi_rx_attr *rx = fi->rx_attr;
    rx->caps = caps & ULNFI_RX_CAPS;
    rx->op_flags = h && h->rx_attr ? h->rx_attr->op_flags : 0;
    rx->msg_order = ULNFI_MSG_ORDER;
    rx->comp_order = FI_ORDER_NONE;
    rx->total_buffered_recv = 0;
    rx->size = 4096;
    rx->iov_limit = ULNFI_IOV_LIMIT;

    struct fi_ep_attr *ep = fi->ep_attr;
    ep->type = type;
    ep->protocol = FI_PROTO_UNSPEC;
    ep->protocol_version = 1;
    /* a datagram is one NAP: no rendezvous behind it */
    ep->max_msg_size = type == FI_EP_DGRAM ? inject : ULNFI_MAX_MSG;
    ep->max_order_raw_size = 0;
    ep->max_order_war_size = 0;
    ep->max_order_waw_size = 0;
    ep->mem_tag_format = 0xAAAAAAAAAAAAAAAAull; /* 64 tag bits, no structure */
    if (h && h->ep_attr && h->ep_attr->mem_tag_format)
        ep->mem_tag_format = h->ep_attr->mem_tag_format;
    const struct fi_ep_attr *he = h ? h->ep_attr : NULL;
    ep->tx_ctx_cnt = he && he->tx_ctx_cnt ? he->tx_ctx_cnt : 1; /* shared, or a scalable */
    ep->rx_ctx_cnt = he && he->rx_ctx_cnt ? he->rx_ctx_cnt : 1; /* endpoint's (sep.c) */

    const struct fi_domain_attr *hd = h ? h->domain_attr : NULL;
    struct fi_domain_attr *d = fi->domain_attr;
    d->name = strdup(ULNFI_NAME);
    d->threading = hd && hd->threading ? hd->threading : FI_THREAD_SAFE;
    /* MANUAL unless asked: AUTO costs a thread that polls (domain.c) */
    d->control_progress =
        hd && hd->control_progress == FI_PROGRESS_AUTO ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
    d->data_progress =
        hd && hd->data_progress == FI_PROGRESS_AUTO ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
    d->resource_mgmt = FI_RM_ENABLED;
    d->av_type = hd ? hd->av_type : FI_AV_UNSPEC;
    d->mr_mode = mr_mode(hd, caps, version);
    d->mr_key_size = 8;
    d->cq_data_size = 8;
    /* fi_domain(3): cq_cnt, the domain's CQs (its table's size); ep_cnt, the
     * endpoints it supports: ulnet's max_eps (FI_ULNET_MAX_EPS, ULN_MAX_EPS),
     * which every domain of the process shares as they share the context,
     * and one transmit and receive context each; mr_cnt, the regions
     * (max_regions), which rendezvous sends share while they wait. */
    d->cq_cnt = ULNFI_MAX_EPS_FI * 2;
    d->ep_cnt = lim->max_eps;
    d->tx_ctx_cnt = lim->max_eps;
    d->rx_ctx_cnt = lim->max_eps;
    /* a scalable endpoint's contexts (sep.c), offered to a client that names
     * receive contexts: one that does not (Open MPI's ofi BTL) would build
     * scalable endpoints for nothing, enabling transmit and receive contexts
     * in turn, which ulnet's consecutive receive indices cannot follow */
    d->max_ep_tx_ctx = caps & FI_NAMED_RX_CTX ? ULNFI_SEP_MAX : 1;
    d->max_ep_rx_ctx = caps & FI_NAMED_RX_CTX ? ULNFI_SEP_MAX : 1;
    d->max_ep_stx_ctx = 1; /* shared contexts: one of each per endpoint */
    d->max_ep_srx_ctx = 1;
    d->mr_iov_limit = 1;
    d->mr_cnt = lim->max_regions;
    d->cntr_cnt = 1024;
    d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
    d->max_err_data = 0;

    struct fi_fabric_attr *f = fi->fabric_attr;
    f->name = strdup(ULNFI_NAME);
    f->prov_version = ULNFI_PROV_VER;
    f->api_version = ULNFI_FI_VER;
    if (!d->name || !f->name) return -FI_ENOMEM;
    return 0;
}

/* Where the addresses come from: node and service when given (fi_getinfo(3):
 * they take precedence over the hints'), else the hints'. */
struct addrs {
    struct ulnfi_addr src, dest;
    bool has_dest;
    /* or socket addresses (av_sockaddr.c): the format, and either one's
     * length when there is one */
    uint32_t fmt;
    struct sockaddr_storage ssrc, sdest;
    socklen_t ssrc_len, sdest_len;
};

/* src_addr: "this process, the endpoint fi_endpoint will give": a name of
 * ours whose context part is still empty (ulen 0), which no AV accepts, and
 * which may say where the endpoint is to publish its name (names.c). The
 * real one is fi_getname's once the endpoint is enabled; the context that
 * knows it opens only at fi_domain. dest_addr: a name, looked up or given. */
static int fill_sa(struct fi_info *fi, const struct addrs *ad)
{
    fi->addr_format = ad->fmt;
    if (ad->ssrc_len) {
        if (!(fi->src_addr = malloc(ad->ssrc_len))) return -FI_ENOMEM;
        memcpy(fi->src_addr, &ad->ssrc, ad->ssrc_len);
        fi->src_addrlen = ad->ssrc_len;
    }
    if (ad->sdest_len) {
        if (!(fi->dest_addr = malloc(ad->sdest_len))) return -FI_ENOMEM;
        memcpy(fi->dest_addr, &ad->sdest, ad->sdest_len);
        fi->dest_addrlen = ad->sdest_len;
    }
    return 0;
}

static int fill_addrs(struct fi_info *fi, const struct addrs *ad)
{
    if (ad->fmt != FI_FORMAT_UNSPEC) return fill_sa(fi, ad);
    struct ulnfi_addr *a = malloc(sizeof(*a));
    if (!a) return -FI_ENOMEM;
    *a = ad->src;
    fi->src_addr = a;
    fi->src_addrlen = ULNFI_NAME_FULL; /* no ulnet address yet: ulen 0 */
    if (ad->has_dest) {
        fi->dest_addr = malloc(sizeof(struct ulnfi_addr));
        if (!fi->dest_addr) return -FI_ENOMEM;
        memcpy(fi->dest_addr, &ad->dest, sizeof(struct ulnfi_addr));
        fi->dest_addrlen = ulnfi_name_len(&ad->dest);
    }
    return 0;
}

/* fi_getinfo(3): with FI_SOURCE, node and service name the source, which
 * for ulnet means where the endpoint publishes its name; without it, the
 * destination, whose name the name service there gives (-FI_ENODATA when
 * none answers: an info without the dest_addr asked for would silently do
 * less). A source node alone publishes nothing: names come from fi_getname. */
/* Did the caller pick ulnet, in its hints or in FI_PROVIDER? A lookup asks
 * the node's TCP port for a ulnet name: a client of another provider (whose
 * fi_getinfo reaches every provider) must not pay a connect, maybe a wait for
 * an answer that never comes, or have its own server's port dialled. */
static bool chosen_by_name(const struct fi_info *h)
{
    if (h && h->fabric_attr && h->fabric_attr->prov_name &&
        strstr(h->fabric_attr->prov_name, ULNFI_NAME))
        return true;
    const char *env = getenv("FI_PROVIDER");
    return env && env[0] != '^' && strstr(env, ULNFI_NAME);
}

/* fi_getinfo(3) takes a node without a service. A ulnet name is not made
 * from a host, and with no port there is no name service to ask, so the
 * info carries no dest_addr (the client exchanges names itself, as fabtests'
 * fi_multi_ep does); the node must still be a host, as with every provider:
 * one that does not resolve is -FI_ENODATA. */
static int node_resolves(const char *node)
{
    struct addrinfo *res = NULL, hint = {.ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(node, NULL, &hint, &res);
    if (res) freeaddrinfo(res);
    if (!rc) return 0;
    FI_INFO(&ulnfi_prov, FI_LOG_CORE, "%s: %s\n", node, gai_strerror(rc));
    return -FI_ENODATA;
}

/* node:service as a socket address of family (AF_UNSPEC: either) into ss. */
static int sa_of(const char *node, const char *service, bool passive, int family,
                 struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hint = {.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
                            .ai_family = family,
                            .ai_socktype = SOCK_STREAM},
                    *ai;
    int rc = getaddrinfo(node, service ? service : "0", &hint, &ai);
    if (rc) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "%s:%s: %s\n", node ? node : "*", service ? service : "",
                gai_strerror(rc));
        return -FI_ENODATA;
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* fi_getinfo(3) with a socket address format: node and service are the
 * source's (FI_SOURCE) or the destination's socket address, looked up by
 * the system's resolver only: an endpoint's ulnet name is asked for when an
 * AV gets its address (av_sockaddr.c). The format returned is the family's. */
static int resolve_sa(const char *node, const char *service, uint64_t flags,
                      const struct fi_info *h, struct addrs *ad)
{
    int family = h->addr_format == FI_SOCKADDR_IN    ? AF_INET
                 : h->addr_format == FI_SOCKADDR_IN6 ? AF_INET6
                                                     : AF_UNSPEC;
    if (h->src_addr) {
        ad->ssrc_len = ulnfi_sa_len(h->src_addr);
        memcpy(&ad->ssrc, h->src_addr, ad->ssrc_len);
    }
    if (h->dest_addr) {
        ad->sdest_len = ulnfi_sa_len(h->dest_addr);
        memcpy(&ad->sdest, h->dest_addr, ad->sdest_len);
    }
    int rc = 0;
    if (flags & FI_SOURCE && (node || service))
        rc = sa_of(node, service, true, family, &ad->ssrc, &ad->ssrc_len);
    else if (!(flags & FI_SOURCE) && node && service)
        rc = sa_of(node, service, false, family, &ad->sdest, &ad->sdest_len);
    else if (!(flags & FI_SOURCE) && node)
        rc = node_resolves(node); /* no port: no endpoint named */
    if (rc) return rc;
    if (family == AF_UNSPEC) /* FI_SOCKADDR: the family of the address there is */
        family = ad->ssrc_len ? ad->ssrc.ss_family : ad->sdest_len ? ad->sdest.ss_family : AF_INET;
    ad->fmt = family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
    if ((ad->ssrc_len && ad->ssrc.ss_family != family) ||
        (ad->sdest_len && ad->sdest.ss_family != family))
        return -FI_ENODATA; /* a source and a destination of different families */
    return 0;
}

static int resolve(const char *node, const char *service, uint64_t flags, const struct fi_info *h,
                   struct addrs *ad)
{
    memset(ad, 0, sizeof(*ad));
    if (h && ulnfi_sa_format(h->addr_format)) return resolve_sa(node, service, flags, h, ad);
    if (h && h->src_addr) {
        memset(&ad->src, 0, sizeof(ad->src));
        memcpy(&ad->src, h->src_addr, ULNFI_NAME_FULL);
    } else {
        ad->src.magic = ULNFI_ADDR_MAGIC;
        ad->src.version = ULNFI_ADDR_VERSION;
        ad->src.ep = ULNFI_EP_ANY;
    }
    if (h && h->dest_addr) { /* check_addr made sure it is one of ours */
        ulnfi_name_read(h->dest_addr, h->dest_addrlen, &ad->dest); /* as a full name */
        ad->has_dest = true;
    }
    if (flags & FI_SOURCE) return service ? ulnfi_names_source(node, service, &ad->src) : 0;
    if (!node && !service) return 0;
    if (!service) return node_resolves(node); /* no port to ask: no dest_addr */
    if (!chosen_by_name(h)) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE,
                "%s:%s: no name lookup unless ulnet is asked for by name\n", node ? node : "",
                service ? service : "");
        return -FI_ENODATA;
    }
    ad->has_dest = true;
    return ulnfi_names_lookup(node, service, &ad->dest);
}

/* The first hint the provider cannot meet whatever its limits, or NULL.
 * Checked before ulnet is asked for the limits: libfabric's utility
 * providers ask every provider for endpoint types we do not have, several
 * times per fi_getinfo, and ulnet would say again on stderr why it refuses
 * its settings each time. */
static const char *unmet_always(const struct fi_info *hints)
{
    if (hints->caps && !subset(hints->caps, ULNFI_CAPS)) return "caps";
    if (!check_addr(hints)) return "addr_format or address";
    if (!check_fabric(hints->fabric_attr)) return "fabric_attr";
    if (!check_ep(hints->ep_attr)) return "ep_attr";
    if (!check_rx(hints->rx_attr)) return "rx_attr";
    return hints->nic ? "nic" : NULL;
}

/* ... and the first one the limits endpoints will have cannot meet. */
static const char *unmet_by_limits(const struct fi_info *hints, uint64_t caps, uint32_t version,
                                   const struct ulnfi_limits *lim, size_t inject)
{
    if (!check_domain(hints->domain_attr, caps, version, lim)) return "domain_attr";
    if (!check_tx(hints->tx_attr, inject, lim->sq_depth)) return "tx_attr";
    return NULL;
}

static int not_supported(const char *why)
{
    FI_INFO(&ulnfi_prov, FI_LOG_CORE, "hints not supported: %s\n", why);
    return -FI_ENODATA;
}

int ulnfi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                  const struct fi_info *hints, struct fi_info **info)
{
    *info = NULL;
    /* libfabric's utility providers (rxm over MSG, rxd over DGRAM) ask their
     * cores with this flag (ofi.h's OFI_CORE_PROV_ONLY): ulnet offers RDM
     * itself, and being layered would only list "ulnet;ofi_rxm" beside it
     * (and have ulnet say on stderr, once per utility provider, why it
     * refuses settings). */
    if (flags & ULNFI_CORE_PROV_ONLY) return -FI_ENODATA;
    uint64_t caps = pick_caps(hints);
    const char *why = hints ? unmet_always(hints) : NULL;
    if (why) return not_supported(why);
    struct ulnfi_limits lim;
    int rc = ulnfi_limits(&lim);
    if (rc) {
        /* no domain would open: offer nothing, as for too small a nap_max */
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "ulnet refuses its settings (%s): see stderr\n",
                uln_strerror(rc));
        return -FI_ENODATA;
    }
    size_t inject = inject_size(lim.nap_max);
    if (!inject) {
        FI_INFO(&ulnfi_prov, FI_LOG_CORE, "nap_max %u: the provider needs at least %zu\n",
                lim.nap_max, (size_t)ULNFI_NAP_MIN);
        return -FI_ENODATA;
    }
    why = hints ? unmet_by_limits(hints, caps, version, &lim, inject) : NULL;
    if (why) return not_supported(why);
    struct addrs ad;
    rc = resolve(node, service, flags, hints, &ad);
    if (rc) return rc;

    /* One info per endpoint type the hints allow, RDM first (what most
     * clients want when they name no type). */
    static const enum fi_ep_type types[] = {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM};
    enum fi_ep_type want = hints && hints->ep_attr ? hints->ep_attr->type : FI_EP_UNSPEC;
    struct fi_info *head = NULL, **tail = &head;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        enum fi_ep_type t = types[i];
        if (want != FI_EP_UNSPEC && want != t) continue;
        if (hints && hints->caps && !subset(hints->caps, type_caps(t))) continue;
        if (t == FI_EP_DGRAM && hints && hints->ep_attr && hints->ep_attr->max_msg_size > inject)
            continue;
        struct fi_info *fi = fi_allocinfo();
        if (!fi) rc = -FI_ENOMEM;
        if (!rc) rc = fill(fi, hints, caps & type_caps(t), version, inject, &lim, t);
        if (!rc) rc = fill_addrs(fi, &ad);
        if (rc) {
            fi_freeinfo(fi);
            fi_freeinfo(head);
            return rc;
        }
        *tail = fi;
        tail = &fi->next;
    }
    if (!head) return not_supported("caps for the endpoint type");
    *info = head;
    return 0;
}
