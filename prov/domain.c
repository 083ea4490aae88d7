/*
 * domain.c - the domain: the process's ulnet context, progress, and the
 * factory of every object below it.
 *
 * The context joins no job (ULN_BOOT_NONE): libfabric clients connect by
 * address (fi_getname, fi_av_insert), whatever launched them. It is shared
 * by the process's domains and refcounted: the first fi_domain opens it
 * (never fi_getinfo, which must stay cheap and side-effect free), the last
 * close closes it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ulnfi.h"

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uln_ctx *ctx_shared;
static int ctx_refs;
static struct ulnfi_limits ctx_limits; /* ctx_shared's, while it is open */

#define ULNFI_CHUNK_BYTES (1u << 20) /* uln_config.chunk_bytes unless set */

/* A positive FI_ULNET_* number into *field; unset or not positive leaves it. */
static void param_u32(const char *name, uint32_t *field)
{
    int v;
    if (fi_param_get_int(&ulnfi_prov, name, &v) == FI_SUCCESS && v > 0) *field = (uint32_t)v;
}

/* FI_ULNET_* settings go into the configuration; what they leave at 0 (-1,
 * NULL) is taken from the ULN_* variables or the defaults, as uln_open
 * always does. uln_open checks them all. */
static void config_from_params(struct uln_config *cfg)
{
    int v;
    char *str;
    uln_config_init(cfg);
    cfg->boot = ULN_BOOT_NONE;
    param_u32("nap_max", &cfg->nap_max);
    param_u32("sq_depth", &cfg->sq_depth);
    param_u32("ring_bytes", &cfg->ring_bytes);
    param_u32("max_peers", &cfg->max_peers);
    param_u32("max_eps", &cfg->max_eps);
    param_u32("max_regions", &cfg->max_regions);
    param_u32("post_copy_max", &cfg->post_copy_max);
    param_u32("udp_window", &cfg->udp_window);
    param_u32("udp_dead_ms", &cfg->udp_dead_ms);
    if (fi_param_get_int(&ulnfi_prov, "spin_us", &v) == FI_SUCCESS && v >= 0) cfg->spin_us = v;
    if (fi_param_get_bool(&ulnfi_prov, "shm_direct", &v) == FI_SUCCESS) cfg->shm_direct = v != 0;
    /* the environment's string: uln_open reads it at once */
    if (fi_param_get_str(&ulnfi_prov, "transport", &str) == FI_SUCCESS && str && *str)
        cfg->transport = str;
    /* A rendezvous GET moves chunk_bytes per progress pass, and each pass
     * costs a system call (process_vm_readv) and a trip through the client's
     * progress loop: 1 MiB chunks take a 1 MiB GET from ~75 to ~50 us, at the
     * price of endpoints sharing a CQ taking longer turns (docs/provider.md). */
    if (fi_param_get_int(&ulnfi_prov, "chunk_bytes", &v) == FI_SUCCESS && v > 0)
        cfg->chunk_bytes = (uint32_t)v;
    else if (!getenv("ULN_CHUNK_BYTES"))
        cfg->chunk_bytes = ULNFI_CHUNK_BYTES;
    /* A peer's plain memory (every rendezvous buffer of an MPI) is reached
     * through the rings, its owner copying in as we copy out, not by
     * process_vm_readv: two copies on two CPUs beat the kernel's one (1 MiB
     * one-way 42 against 121 us, docs/provider.md). The owner must progress
     * for it, which fi_domain(3) lets a manual-progress provider ask of a
     * target, and FI_PROGRESS_AUTO's thread does. */
    if (fi_param_get_bool(&ulnfi_prov, "shm_cma", &v) == FI_SUCCESS)
        cfg->shm_cma = v != 0;
    else if (!getenv("ULN_SHM_CMA"))
        cfg->shm_cma = 0;
}

/* The limits of a context's uln_info. */
static struct ulnfi_limits limits_of(const struct uln_info *ui)
{
    return (struct ulnfi_limits){.nap_max = ui->nap_max,
                                 .sq_depth = ui->sq_depth,
                                 /* the domain's table of endpoints; ulnet allows no more */
                                 .max_eps = ui->max_eps < ULNFI_MAX_EPS_FI ? ui->max_eps
                                                                           : ULNFI_MAX_EPS_FI,
                                 .max_regions = ui->max_regions};
}

/* The nap_max, send-queue depth, endpoint and region limits endpoints will
 * have: the open context's (every domain shares it), else what uln_open
 * would take with the configuration fi_domain would give it, as ulnet
 * resolves it (uln_config_query: the FI_ULNET_* parameter, the ULN_*
 * variable, then ulnet's default, checked as uln_open checks them).
 * fi_getinfo advertises the limits derived from them without opening
 * anything. -EINVAL: a setting uln_open would refuse (ulnet has said which
 * on stderr); no domain would open. */
int ulnfi_limits(struct ulnfi_limits *l)
{
    pthread_mutex_lock(&ctx_lock);
    *l = ctx_shared ? ctx_limits : (struct ulnfi_limits){0};
    pthread_mutex_unlock(&ctx_lock);
    if (l->nap_max) return 0;
    struct uln_config cfg;
    struct uln_info ui;
    config_from_params(&cfg);
    int rc = uln_config_query(&cfg, &ui);
    if (!rc) *l = limits_of(&ui);
    return rc;
}

static int ctx_get(struct uln_ctx **out)
{
    int rc = 0;
    pthread_mutex_lock(&ctx_lock);
    if (!ctx_shared) {
        struct uln_config cfg;
        config_from_params(&cfg);
        rc = uln_open(&cfg, &ctx_shared);
        bool opened = rc == 0;
        struct uln_info ui;
        if (opened && (rc = uln_query(ctx_shared, &ui)) == 0 && ui.nap_max < ULNFI_NAP_MIN) {
            /* a rendezvous request would not fit in a NAP */
            FI_WARN(&ulnfi_prov, FI_LOG_DOMAIN, "nap_max %u: the provider needs at least %zu\n",
                    ui.nap_max, (size_t)ULNFI_NAP_MIN);
            rc = -EINVAL;
        }
        if (!rc)
            ctx_limits = limits_of(&ui);
        else if (opened)
            uln_close(ctx_shared); /* opened, but not for us (the else below forgets it) */
    }
    if (!rc) {
        ctx_refs++;
        *out = ctx_shared;
    } else {
        ctx_shared = NULL;
        FI_WARN(&ulnfi_prov, FI_LOG_DOMAIN, "uln_open: %s\n", uln_strerror(rc));
    }
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

static void ctx_put(void)
{
    pthread_mutex_lock(&ctx_lock);
    if (--ctx_refs == 0) {
        uln_close(ctx_shared);
        ctx_shared = NULL;
    }
    pthread_mutex_unlock(&ctx_lock);
}

/* A send-side completion: one of an operation's ulnet ops is done. */
static void tx_done(const struct uln_cqe *c)
{
    struct ulnfi_op *op = (struct ulnfi_op *)(uintptr_t)c->user_data;
    if (!op) return; /* silent inject failed: nothing to report to */
    if (c->status && !op->status) op->status = c->status;
    if (c->status && op->kind == ULNFI_OP_RNDV_SEND && op->pending == 2) ulnfi_rndv_send_failed(op);
    if (--op->pending == 0) ulnfi_op_complete(op);
}

/* A peer's fi_writedata landed: a completion on the receive CQ, no buffer. */
static void rx_remote_write(struct ulnfi_ep *ep, const struct uln_cqe *c)
{
    if (ep->rx_cq)
        ulnfi_cq_put(ep->rx_cq, NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, c->len, NULL,
                     c->imm, 0, ep->av ? ulnfi_av_src(ep->av, c->peer) : FI_ADDR_NOTAVAIL);
    ulnfi_cntr_inc(ep->rwr_cntr);
}

static void dispatch(struct ulnfi_domain *d, struct uln_cq *ucq, const struct uln_cqe *c)
{
    struct ulnfi_ep *ep = c->ep < ULNFI_MAX_EPS_FI ? d->eps[c->ep] : NULL;
    switch (c->op) {
    case ULN_OP_NAP_RECV:
        if (ep)
            ulnfi_rx_nap(ep, c, ucq);
        else if (c->flags & ULN_CQE_MUST_RELEASE)
            uln_cqe_release(ucq, c);
        break;
    case ULN_OP_PUT_REMOTE:
        if (ep) rx_remote_write(ep, c);
        break;
    case ULN_OP_NAP:
    case ULN_OP_PUT:
    case ULN_OP_GET:
    case ULN_OP_ATOMIC:
        tx_done(c);
        break;
    default:
        break;
    }
}

static void retry(struct ulnfi_ep *ep)
{
    struct ulnfi_op *op = ep->retry_head;
    ep->retry_head = ep->retry_tail = NULL;
    while (op) {
        struct ulnfi_op *next = op->next;
        op->next = NULL;
        ulnfi_op_advance(op); /* re-queues itself if still short of room */
        op = next;
    }
}

/* Take what one ulnet CQ holds. Each uln_cq_poll is a whole progress pass
 * over the CQ's endpoints, too dear to spend on the empty answer that only
 * confirms the CQ is drained: a short batch says so already. */
static void poll_ucq(struct ulnfi_domain *d, struct uln_cq *ucq)
{
    struct uln_cqe c[16];
    int n;
    do {
        n = uln_cq_poll(ucq, c, 16);
        for (int k = 0; k < n; k++)
            dispatch(d, ucq, &c[k]);
    } while (n == 16);
}

/* Poll every ulnet CQ of the domain that an endpoint reports to; caller
 * holds the domain lock. The endpoints are walked through the dense list of
 * enabled ones: this runs in every fi_cq_read of a polling loop. */
void ulnfi_progress(struct ulnfi_domain *d)
{
    for (int i = 0; i < d->ncqs; i++)
        if (d->cqs[i]->drivers) poll_ucq(d, d->cqs[i]->ucq);
    for (int i = 0; i < d->nlive; i++) {
        struct ulnfi_ep *ep = d->live[i];
        if (ep->own_cq) poll_ucq(d, ep->own_cq);
        if (ep->retry_head) retry(ep);
        if (ep->trig_head) ulnfi_trigger_fire(ep);
        if (ep->held_head) ulnfi_rx_retry(ep);
        if (ep->rndv_out) ulnfi_rndv_watch(ep);
    }
}

/* FI_PROGRESS_AUTO: the provider's own protocol steps (matching a request,
 * posting its GETs, answering with an ACK) need provider code to run, which
 * ulnet's progress thread cannot do; so a thread of ours polls the domain,
 * under the domain lock, every ULNFI_AUTO_US while it is open. */
#define ULNFI_AUTO_US 100
/* Domains whose thread runs. A client that exits without closing them would
 * have libfabric unload us (fi_fini) under running threads: the provider's
 * cleanup stops them first. Under ctx_lock. */
static struct ulnfi_domain *auto_domains;

static void auto_stop_join(struct ulnfi_domain *d)
{
    /* release: the thread's acquire load sees it and leaves */
    atomic_store_explicit(&d->auto_stop, true, memory_order_release);
    pthread_join(d->auto_thread, NULL);
}

void ulnfi_domains_stop(void)
{
    pthread_mutex_lock(&ctx_lock);
    for (struct ulnfi_domain *d = auto_domains; d; d = d->auto_next)
        auto_stop_join(d);
    auto_domains = NULL;
    pthread_mutex_unlock(&ctx_lock);
}

static void auto_start(struct ulnfi_domain *d)
{
    pthread_mutex_lock(&ctx_lock);
    d->auto_next = auto_domains;
    auto_domains = d;
    pthread_mutex_unlock(&ctx_lock);
}

/* A domain is on the list exactly while its thread runs: one that is not
 * was stopped by ulnfi_domains_stop already. */
static void auto_end(struct ulnfi_domain *d)
{
    pthread_mutex_lock(&ctx_lock);
    for (struct ulnfi_domain **p = &auto_domains; *p; p = &(*p)->auto_next)
        if (*p == d) {
            *p = d->auto_next;
            auto_stop_join(d);
            break;
        }
    pthread_mutex_unlock(&ctx_lock);
}

static void *auto_progress(void *arg)
{
    struct ulnfi_domain *d = arg;
    struct timespec nap = {0, ULNFI_AUTO_US * 1000};
    while (!atomic_load_explicit(&d->auto_stop, memory_order_acquire)) {
        pthread_mutex_lock(&d->lock);
        ulnfi_progress(d);
        pthread_mutex_unlock(&d->lock);
        nanosleep(&nap, NULL);
    }
    return NULL;
}

static int domain_close(struct fid *fid)
{
    struct ulnfi_domain *d = ulnfi_container(fid, struct ulnfi_domain, dom.fid);
    if (d->refs) return -FI_EBUSY;
    if (d->progress == FI_PROGRESS_AUTO) auto_end(d);
    pthread_mutex_destroy(&d->lock);
    ctx_put();
    free(d);
    return 0;
}

static struct fi_ops domain_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = domain_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

static int no_coll(struct fid_domain *d, enum fi_collective_op o, struct fi_collective_attr *a,
                   uint64_t f)
{
    return -FI_ENOSYS;
}

static struct fi_ops_domain domain_ops = {
    .size = sizeof(struct fi_ops_domain),
    .av_open = ulnfi_av_open,
    .cq_open = ulnfi_cq_open,
    .endpoint = ulnfi_ep_open,
    .scalable_ep = ulnfi_sep_open,
    .cntr_open = ulnfi_cntr_open,
    .poll_open = ulnfi_poll_open,
    .stx_ctx = ulnfi_stx_open,
    .srx_ctx = ulnfi_srx_open,
    .query_atomic = ulnfi_query_atomic,
    .query_collective = no_coll,
};

int ulnfi_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
                      void *context)
{
    const struct fi_domain_attr *a = info ? info->domain_attr : NULL;
    if (a && a->name && strcmp(a->name, ULNFI_NAME)) return -FI_EINVAL;
    struct ulnfi_domain *d = calloc(1, sizeof(*d));
    if (!d) return -FI_ENOMEM;
    int rc = ctx_get(&d->ctx);
    if (rc) {
        free(d);
        return ulnfi_errno(rc);
    }
    uln_query(d->ctx, &d->uinfo);
    d->size = uln_size(d->ctx); /* peer ids are below it */
    /* FI_MR_BASIC (a pre-1.5 client) means FI_MR_VIRT_ADDR too (fi_mr(3)) */
    d->mr_vaddr = a && (a->mr_mode == FI_MR_BASIC || (a->mr_mode & FI_MR_VIRT_ADDR));
    d->threading = a && a->threading ? a->threading : FI_THREAD_SAFE;
    d->progress =
        a && (a->data_progress == FI_PROGRESS_AUTO || a->control_progress == FI_PROGRESS_AUTO)
            ? FI_PROGRESS_AUTO
            : FI_PROGRESS_MANUAL;
    /* Progress is domain-wide, so only FI_THREAD_DOMAIN without a progress
     * thread of ours lets us skip the lock. */
    d->locking = d->threading != FI_THREAD_DOMAIN || d->progress == FI_PROGRESS_AUTO;
    /* socket addresses: their names are looked up by threads of the AV's,
     * which insert them under the lock (av_sockaddr.c) */
    d->addr_format = info ? info->addr_format : FI_FORMAT_UNSPEC;
    if (ulnfi_sa_format(d->addr_format)) d->locking = true;
    pthread_mutex_init(&d->lock, NULL);
    if (d->progress == FI_PROGRESS_AUTO &&
        pthread_create(&d->auto_thread, NULL, auto_progress, d)) {
        pthread_mutex_destroy(&d->lock);
        ctx_put();
        free(d);
        return -FI_ENOMEM;
    }
    if (d->progress == FI_PROGRESS_AUTO) auto_start(d);
    d->fab = ulnfi_container(fabric, struct ulnfi_fabric, fab);
    d->dom.fid.fclass = FI_CLASS_DOMAIN;
    d->dom.fid.context = context;
    d->dom.fid.ops = &domain_fi_ops;
    d->dom.ops = &domain_ops;
    d->dom.mr = &ulnfi_mr_ops;
    *dom = &d->dom;
    return 0;
}
