/*
 * cm.c - FI_EP_MSG: passive endpoints and connections (fi_cm(3)) over
 * ulnet's dynamic peers.
 *
 * A connected endpoint is an RDM endpoint of ours with an AV of its own that
 * holds its one peer; every data call goes to that peer whatever address it
 * is given. Connection management is a few NAPs of type ULNFI_PKT_CM on the
 * endpoints themselves, in order with the data:
 *   client endpoint  --REQ (its name, cookie, data)-->    passive endpoint
 *   server endpoint  --ACCEPT (its name, cookie, data)--> client endpoint
 *   passive endpoint --REJECT (cookie, data)-->           client endpoint
 *   either           --SHUTDOWN-->                        the other
 * A passive endpoint is an internal endpoint of an internal domain; its name
 * is what fi_getname gives and, with a service in fi_getinfo, what the name
 * service publishes (names.c), so fi_getinfo(node, service) gives clients the
 * dest_addr fi_connect takes.
 *
 * Events: progress runs under the domain lock, where the EQ's lock must not
 * be taken (an EQ reader takes the EQ lock, then the domain's). So arriving
 * CM messages leave events on their endpoint, and reading the EQ moves them
 * in after a progress pass of each bound endpoint's domain.
 */
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "ulnfi.h"

struct ulnfi_pep {
    struct fid_pep pep;
    struct fid_fabric *fabric;
    struct fi_info *info;
    struct fid_domain *dom;
    struct fid_cq *cq;
    struct fid_ep *iep; /* the internal endpoint that takes requests */
    struct ulnfi_eq *eq;
    bool listening;
};

/* fi_info::handle of an FI_CONNREQ: whom fi_accept or fi_reject answers.
 * Held by the application (until it answers, or the unread event goes) and
 * by an endpoint opened from the info (until accept or close). */
struct ulnfi_connreq {
    struct fid fid;
    struct ulnfi_pep *pep; /* answers come from it (cm_accept says why) */
    struct ulnfi_addr client;
    uint64_t cookie;
    _Atomic int refs;
    _Atomic bool answered;
};

void ulnfi_connreq_hold(void *h)
{
    struct ulnfi_connreq *cr = h;
    atomic_fetch_add_explicit(&cr->refs, 1, memory_order_relaxed);
}

/* acq_rel: the last holder sees every other holder's writes before it frees */
void ulnfi_connreq_put(void *h)
{
    struct ulnfi_connreq *cr = h;
    if (cr && atomic_fetch_sub_explicit(&cr->refs, 1, memory_order_acq_rel) == 1) free(cr);
}

/* The application's answer, once: false when it answered already. */
static bool answer(struct ulnfi_connreq *cr)
{
    return !atomic_exchange_explicit(&cr->answered, true, memory_order_relaxed);
}

static _Atomic uint64_t cookies;

static struct ulnfi_ep *pep_ep(struct ulnfi_pep *p)
{
    return ulnfi_container(p->iep, struct ulnfi_ep, ep);
}

/* ---- events ------------------------------------------------------------------------------- */

static void shut(struct ulnfi_ep *ep);

static struct ulnfi_cmev *ev_new(uint32_t event, int err, const void *data, size_t len)
{
    struct ulnfi_cmev *e = calloc(1, sizeof(*e) + len);
    if (!e) return NULL;
    e->event = event;
    e->err = err;
    e->len = len;
    if (len) memcpy(e->data, data, len);
    return e;
}

/* Under the domain lock. */
static void ev_add(struct ulnfi_ep *ep, struct ulnfi_cmev *e)
{
    if (!e) {
        FI_WARN(&ulnfi_prov, FI_LOG_EP_CTRL, "no memory for a connection event: lost\n");
        return;
    }
    if (ep->cm_tail)
        ep->cm_tail->next = e;
    else
        ep->cm_head = e;
    ep->cm_tail = e;
}

static fid_t ev_fid(struct ulnfi_ep *ep)
{
    return ep->pep ? &ep->pep->pep.fid : &ep->ep.fid;
}

#define ULNFI_CM_WATCH_MS 200  /* how often a connection looks at its peer while its EQ is read */
#define ULNFI_CM_PING_MS  1000 /* and pings it, so that udp watches it too */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Under the domain lock: a connected peer that died ends the connection
 * (FI_SHUTDOWN, fi_cm(3)): ulnet says so (shm: the peer's pidfd; udp: once
 * a packet to it went unanswered, so a silent connection is pinged). */
static void watch_peer(struct ulnfi_ep *ep)
{
    uint64_t now = now_ns();
    if (ep->cm_state != ULNFI_CMS_CONNECTED || now < ep->cm_watch_at) return;
    ep->cm_watch_at = now + ULNFI_CM_WATCH_MS * 1000000ull;
    if (uln_peer_alive(ep->uep, ep->cm_peer) == -ECONNRESET) {
        FI_INFO(&ulnfi_prov, FI_LOG_EP_CTRL, "endpoint %d: the connected peer died\n", ep->index);
        shut(ep);
        return;
    }
    if (now < ep->cm_ping_at) return;
    ep->cm_ping_at = now + ULNFI_CM_PING_MS * 1000000ull;
    struct ulnfi_hdr p = {.pkt = ULNFI_PKT_PING, .seq = ep->tx_seq[ep->cm_peer]};
    if (uln_nap(ep->uep, ep->cm_peer, &p, sizeof(p), 0, ULN_INLINE | ULN_SILENT) == 0)
        ep->tx_seq[ep->cm_peer]++;
}

void ulnfi_cm_poll(struct ulnfi_eq *eq)
{
    for (int i = 0; i < eq->ncm; i++) {
        struct ulnfi_ep *ep = eq->cm_eps[i];
        ulnfi_lock(ep->dom);
        if (ep->enabled) ulnfi_progress(ep->dom);
        if (ep->enabled && ep->uep) watch_peer(ep);
        struct ulnfi_cmev *e = ep->cm_head;
        ep->cm_head = ep->cm_tail = NULL;
        ulnfi_unlock(ep->dom);
        while (e) {
            struct ulnfi_cmev *next = e->next;
            if (e->err) {
                ulnfi_eq_post_err(eq, ev_fid(ep), e->err, e->data, e->len);
            } else {
                struct fi_eq_cm_entry *ent = calloc(1, sizeof(*ent) + e->len);
                if (ent) {
                    ent->fid = ev_fid(ep);
                    ent->info = e->info;
                    memcpy(ent->data, e->data, e->len);
                    ulnfi_eq_post(eq, e->event, ent, sizeof(*ent) + e->len);
                    free(ent);
                }
            }
            free(e);
            e = next;
        }
    }
}

int ulnfi_cm_bind(struct ulnfi_ep *ep, struct ulnfi_eq *eq)
{
    pthread_mutex_lock(&eq->lock);
    int rc = eq->ncm < ULNFI_MAX_EPS_FI ? 0 : -FI_ENOSPC;
    if (!rc) eq->cm_eps[eq->ncm++] = ep;
    pthread_mutex_unlock(&eq->lock);
    return rc;
}

void ulnfi_cm_unbind(struct ulnfi_ep *ep)
{
    struct ulnfi_eq *eq = ep->eq;
    if (!eq) return;
    pthread_mutex_lock(&eq->lock);
    for (int i = 0; i < eq->ncm; i++)
        if (eq->cm_eps[i] == ep) eq->cm_eps[i] = eq->cm_eps[--eq->ncm];
    pthread_mutex_unlock(&eq->lock);
    while (ep->cm_head) {
        struct ulnfi_cmev *e = ep->cm_head;
        ep->cm_head = e->next;
        fi_freeinfo(e->info);
        free(e);
    }
}

/* ---- the messages ---------------------------------------------------------------------------- */

/* Under the domain lock. A NAP of its own: the operation completes silently. */
static int cm_send(struct ulnfi_ep *ep, int peer, uint16_t dgen, int kind, uint64_t cookie,
                   const struct ulnfi_addr *name, const void *data, size_t len)
{
    size_t total = sizeof(struct ulnfi_hdr) + sizeof(struct ulnfi_cm) + len;
    struct ulnfi_op *op = ulnfi_op_get(ep, total);
    if (!op) return -FI_ENOMEM;
    op->kind = ULNFI_OP_CM;
    op->pending = 1;
    struct ulnfi_hdr h = {.pkt = ULNFI_PKT_CM,
                          .dgen = dgen,
                          .seq = ep->tx_seq[peer],
                          .tag = (uint64_t)kind,
                          .data = cookie};
    struct ulnfi_cm cm = {.len = (uint32_t)len};
    if (name) cm.name = *name;
    memcpy(op->buf, &h, sizeof(h));
    memcpy(op->buf + sizeof(h), &cm, sizeof(cm));
    if (len) memcpy(op->buf + sizeof(h) + sizeof(cm), data, len);
    FI_INFO(&ulnfi_prov, FI_LOG_EP_CTRL, "endpoint %d: cm %d to peer %d (life %u)\n", ep->index,
            kind, peer, (unsigned)dgen);
    int rc = uln_nap(ep->uep, peer, op->buf, total, (uintptr_t)op, 0);
    if (rc == -EAGAIN) {
        ulnfi_progress(ep->dom);
        rc = uln_nap(ep->uep, peer, op->buf, total, (uintptr_t)op, 0);
    }
    if (rc) {
        ulnfi_op_put(op);
        return ulnfi_errno(rc);
    }
    ep->tx_seq[peer]++;
    return 0;
}

/* A request at a passive endpoint's internal endpoint: an FI_CONNREQ whose
 * info names the client (dest_addr) and carries the handle to answer. */
static void on_req(struct ulnfi_ep *ep, const struct ulnfi_hdr *h, const struct ulnfi_cm *cm,
                   const void *data)
{
    struct ulnfi_pep *p = ep->pep;
    if (!p || !p->listening || ulnfi_name_check(&cm->name)) return;
    struct ulnfi_connreq *cr = calloc(1, sizeof(*cr));
    struct fi_info *info = fi_dupinfo(p->info);
    struct ulnfi_cmev *e = ev_new(FI_CONNREQ, 0, data, cm->len);
    struct ulnfi_addr *dest = malloc(sizeof(*dest));
    if (!cr || !info || !e || !dest) {
        free(cr);
        fi_freeinfo(info);
        free(e);
        free(dest);
        FI_WARN(&ulnfi_prov, FI_LOG_EP_CTRL, "no memory for a connection request: dropped\n");
        return;
    }
    cr->fid.fclass = FI_CLASS_CONNREQ;
    atomic_init(&cr->refs, 1);
    cr->client = cm->name;
    cr->cookie = h->data;
    cr->pep = p;
    /* the endpoint made from it is a new one: no source to publish at */
    free(info->src_addr);
    info->src_addr = NULL;
    info->src_addrlen = 0;
    free(info->dest_addr);
    *dest = cm->name;
    info->dest_addr = dest;
    info->dest_addrlen = ulnfi_name_len(dest);
    if (ulnfi_sa_format(info->addr_format)) {
        /* socket addresses: the endpoint is found at the passive endpoint's
         * address, as an accepted TCP socket is at its listener's; the
         * client has no socket address of ours to name it by */
        info->dest_addr = NULL;
        info->dest_addrlen = 0;
        free(dest);
        struct sockaddr_storage ss;
        size_t len = sizeof(ss);
        if (!ulnfi_names_bound(ep, &ss, &len) && (info->src_addr = malloc(len))) {
            memcpy(info->src_addr, &ss, len);
            info->src_addrlen = len;
        }
    }
    info->handle = &cr->fid;
    e->info = info;
    ev_add(ep, e);
}

static int add_peer(struct ulnfi_ep *ep, const struct ulnfi_addr *name, fi_addr_t *fa)
{
    /* the AV takes the domain lock itself: the caller holds it (recursive
     * only where the domain locks), so insert through uln_peer_insert's
     * caller in av.c without it */
    return ulnfi_av_insert_locked(ep->av, name, fa);
}

static void on_accept(struct ulnfi_ep *ep, const struct ulnfi_hdr *h, const struct ulnfi_cm *cm,
                      const void *data)
{
    if (ep->cm_state != ULNFI_CMS_CONNECTING || h->data != ep->cm_cookie) return;
    fi_addr_t fa;
    if (ulnfi_name_check(&cm->name) || add_peer(ep, &cm->name, &fa)) {
        ep->cm_state = ULNFI_CMS_SHUT;
        ev_add(ep, ev_new(0, FI_ECONNREFUSED, NULL, 0));
        return;
    }
    ep->conn = fa;
    ulnfi_av_peer_raw(ep->av, fa, &ep->cm_peer);
    ep->cm_gen = cm->name.gen;
    ep->cm_state = ULNFI_CMS_CONNECTED;
    ulnfi_rx_resolve(ep);
    ev_add(ep, ev_new(FI_CONNECTED, 0, data, cm->len));
}

static void on_reject(struct ulnfi_ep *ep, const struct ulnfi_hdr *h, const struct ulnfi_cm *cm,
                      const void *data)
{
    if (ep->cm_state != ULNFI_CMS_CONNECTING || h->data != ep->cm_cookie) return;
    ep->cm_state = ULNFI_CMS_SHUT;
    ev_add(ep, ev_new(0, FI_ECONNREFUSED, data, cm->len));
}

static void shut(struct ulnfi_ep *ep)
{
    if (ep->cm_state == ULNFI_CMS_SHUT) return;
    ep->cm_state = ULNFI_CMS_SHUT;
    ev_add(ep, ev_new(FI_SHUTDOWN, 0, NULL, 0));
}

void ulnfi_cm_rx(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h, const void *p,
                 size_t plen)
{
    struct ulnfi_cm cm;
    if (plen < sizeof(cm)) return;
    memcpy(&cm, p, sizeof(cm));
    if (cm.len > ULNFI_CM_DATA_MAX || cm.len > plen - sizeof(cm)) return;
    const void *data = (const uint8_t *)p + sizeof(cm);
    FI_INFO(&ulnfi_prov, FI_LOG_EP_CTRL,
            "endpoint %d (life %u): cm %u from peer %d (for life %u)\n", ep->index,
            (unsigned)ep->gen, (unsigned)h->tag, peer, (unsigned)h->dgen);
    if (h->dgen != ep->gen) return; /* for an earlier life of the index */
    switch (h->tag) {
    case ULNFI_CM_REQ:
        on_req(ep, h, &cm, data);
        break;
    case ULNFI_CM_ACCEPT:
        on_accept(ep, h, &cm, data);
        break;
    case ULNFI_CM_REJECT:
        on_reject(ep, h, &cm, data);
        break;
    case ULNFI_CM_SHUTDOWN:
        if (ep->cm_state == ULNFI_CMS_CONNECTED && peer == ep->cm_peer) shut(ep);
        break;
    default:
        break;
    }
}

/* ---- fi_ops_cm of active endpoints --------------------------------------------------------------
 */

static struct ulnfi_ep *msg_ep(struct fid_ep *fep)
{
    struct ulnfi_ep *ep = ulnfi_container(fep, struct ulnfi_ep, ep);
    return ep->type == FI_EP_MSG ? ep : NULL;
}

static int lookup_pep(const void *addr, struct ulnfi_addr *name)
{
    static const _Atomic bool never = false;
    return ulnfi_names_lookup_sa(addr, ulnfi_sa_len(addr), true, &never, name);
}

static int cm_connect(struct fid_ep *fep, const void *addr, const void *param, size_t len)
{
    struct ulnfi_ep *ep = msg_ep(fep);
    if (!ep) return -FI_EOPNOTSUPP;
    if (len > ULNFI_CM_DATA_MAX || (len && !param) || !addr) return -FI_EINVAL;
    struct ulnfi_addr name;
    size_t stride;
    bool sa = ulnfi_sa_format(ep->info->addr_format);
    if (sa ? !ulnfi_sa_len(addr) : ulnfi_name_get(addr, &name, &stride)) return -FI_EINVAL;
    if (!ep->eq) return -FI_ENOEQ;
    int rc = ulnfi_ep_enable(ep);
    if (rc) return rc;
    /* a socket address names a passive endpoint's name service: asked now,
     * once (bounded by FI_ULNET_NAME_TIMEOUT_MS); nothing there is refused,
     * as a TCP connect is, with an FI_ECONNREFUSED event */
    int found = sa ? lookup_pep(addr, &name) : 0;
    ulnfi_lock(ep->dom);
    if (ep->cm_state != ULNFI_CMS_IDLE) {
        ulnfi_unlock(ep->dom);
        return -FI_EOPBADSTATE; /* fi_cm(3): once in an endpoint's life */
    }
    if (found) {
        ep->cm_state = ULNFI_CMS_SHUT;
        ev_add(ep, ev_new(0, FI_ECONNREFUSED, NULL, 0));
        ulnfi_unlock(ep->dom);
        return 0;
    }
    fi_addr_t fa;
    rc = add_peer(ep, &name, &fa);
    if (!rc) rc = ulnfi_av_peer_raw(ep->av, fa, &ep->cm_peer);
    if (!rc) {
        struct ulnfi_addr me;
        ep->cm_cookie = atomic_fetch_add_explicit(&cookies, 1, memory_order_relaxed) << 16 |
                        ep->gen; /* relaxed: only distinctness matters */
        rc = ulnfi_ep_name(ep, &me);
        if (!rc)
            rc = cm_send(ep, ep->cm_peer, name.gen, ULNFI_CM_REQ, ep->cm_cookie, &me, param, len);
    }
    if (!rc) ep->cm_state = ULNFI_CMS_CONNECTING;
    ulnfi_unlock(ep->dom);
    return rc;
}

/* The ACCEPT goes from the passive endpoint, not from the new endpoint: the
 * client inserted the passive endpoint's name to connect, and learns the new
 * endpoint's from the ACCEPT. Traffic from a peer it has not inserted waits
 * unread until it does (ulnet.h; over udp, a new endpoint's first packets
 * would wait for the very ACCEPT they carry). The server's data that
 * overtakes the ACCEPT waits the same way, then is read in order. */
static int cm_accept(struct fid_ep *fep, const void *param, size_t len)
{
    struct ulnfi_ep *ep = msg_ep(fep);
    if (!ep) return -FI_EOPNOTSUPP;
    if (len > ULNFI_CM_DATA_MAX || (len && !param)) return -FI_EINVAL;
    struct ulnfi_connreq *cr = ep->connreq;
    if (!cr || atomic_load_explicit(&cr->answered, memory_order_relaxed)) return -FI_EOPBADSTATE;
    if (!ep->eq) return -FI_ENOEQ;
    int rc = ulnfi_ep_enable(ep);
    if (rc) return rc;
    ulnfi_lock(ep->dom);
    if (ep->cm_state != ULNFI_CMS_IDLE) {
        ulnfi_unlock(ep->dom);
        return -FI_EOPBADSTATE;
    }
    fi_addr_t fa;
    struct ulnfi_addr me;
    rc = add_peer(ep, &cr->client, &fa);
    if (!rc) rc = ulnfi_av_peer_raw(ep->av, fa, &ep->cm_peer);
    if (!rc) rc = ulnfi_ep_name(ep, &me);
    ulnfi_unlock(ep->dom);
    if (rc) return rc;
    /* the passive endpoint's domain is its own: one lock at a time */
    struct ulnfi_ep *pe = pep_ep(cr->pep);
    int peer;
    ulnfi_lock(pe->dom);
    rc = add_peer(pe, &cr->client, &fa);
    fi_addr_t pfa = fa;
    if (!rc) rc = ulnfi_av_peer_raw(pe->av, pfa, &peer);
    if (!rc) rc = cm_send(pe, peer, cr->client.gen, ULNFI_CM_ACCEPT, cr->cookie, &me, param, len);
    ulnfi_unlock(pe->dom);
    if (rc) return rc;
    ulnfi_lock(ep->dom);
    ep->conn = ulnfi_av_src(ep->av, ep->cm_peer);
    ep->cm_gen = cr->client.gen;
    ep->cm_state = ULNFI_CMS_CONNECTED;
    ulnfi_rx_resolve(ep);
    ev_add(ep, ev_new(FI_CONNECTED, 0, NULL, 0));
    ep->connreq = NULL;
    if (answer(cr)) ulnfi_connreq_put(cr); /* the application's */
    ulnfi_connreq_put(cr);                 /* the endpoint's */
    ulnfi_unlock(ep->dom);
    return rc;
}

static int cm_shutdown(struct fid_ep *fep, uint64_t flags)
{
    struct ulnfi_ep *ep = msg_ep(fep);
    if (!ep) return -FI_EOPNOTSUPP;
    ulnfi_lock(ep->dom);
    int rc = 0;
    if (ep->cm_state == ULNFI_CMS_CONNECTED) {
        rc = cm_send(ep, ep->cm_peer, ep->cm_gen, ULNFI_CM_SHUTDOWN, 0, NULL, NULL, 0);
        shut(ep); /* fi_cm(3): both sides see FI_SHUTDOWN */
    } else if (ep->cm_state != ULNFI_CMS_SHUT) {
        rc = -FI_ENOTCONN;
    }
    ulnfi_unlock(ep->dom);
    return rc;
}

static int cm_getpeer(struct fid_ep *fep, void *addr, size_t *addrlen)
{
    struct ulnfi_ep *ep = msg_ep(fep);
    if (!ep) return -FI_ENOSYS;
    if (ep->cm_state != ULNFI_CMS_CONNECTED) return -FI_ENOTCONN;
    size_t room = *addrlen;
    ulnfi_lock(ep->dom);
    const struct ulnfi_addr *a = &ep->av->tab[ep->conn];
    *addrlen = ulnfi_name_len(a);
    if (room >= *addrlen) memcpy(addr, a, *addrlen);
    ulnfi_unlock(ep->dom);
    return room >= *addrlen ? 0 : -FI_ETOOSMALL;
}

static int ep_setname(fid_t fid, void *addr, size_t addrlen)
{
    return ulnfi_ep_setname(ulnfi_container(fid, struct ulnfi_ep, ep.fid), addr, addrlen);
}
static int no_listen(struct fid_pep *pep)
{
    return -FI_EOPNOTSUPP;
}
static int no_reject(struct fid_pep *pep, fid_t h, const void *param, size_t len)
{
    return -FI_EOPNOTSUPP;
}
static int no_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc,
                   void *context)
{
    return -FI_ENOSYS;
}

static int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
    return ulnfi_ep_getname(ulnfi_container(fid, struct ulnfi_ep, ep.fid), addr, addrlen);
}

struct fi_ops_cm ulnfi_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = ep_setname,
    .getname = ep_getname,
    .getpeer = cm_getpeer,
    .connect = cm_connect,
    .listen = no_listen,
    .accept = cm_accept,
    .reject = no_reject,
    .shutdown = cm_shutdown,
    .join = no_join,
};

int ulnfi_cm_getopt(struct ulnfi_ep *ep, int optname, void *optval, size_t *optlen)
{
    if (optname != FI_OPT_CM_DATA_SIZE) return -FI_ENOPROTOOPT;
    if (*optlen < sizeof(size_t)) return -FI_ETOOSMALL;
    *(size_t *)optval = ULNFI_CM_DATA_MAX;
    *optlen = sizeof(size_t);
    return 0;
}

/* ---- passive endpoints
 * ---------------------------------------------------------------------------- */

static int pep_close(struct fid *fid)
{
    struct ulnfi_pep *p = ulnfi_container(fid, struct ulnfi_pep, pep.fid);
    if (p->iep) fi_close(&p->iep->fid);
    if (p->cq) fi_close(&p->cq->fid);
    if (p->dom) fi_close(&p->dom->fid);
    fi_freeinfo(p->info);
    free(p);
    return 0;
}

static int pep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    struct ulnfi_pep *p = ulnfi_container(fid, struct ulnfi_pep, pep.fid);
    if (bfid->fclass != FI_CLASS_EQ) return -FI_EINVAL;
    if (p->eq) return -FI_EINVAL;
    int rc = fi_ep_bind(p->iep, bfid, 0);
    if (!rc) p->eq = ulnfi_container(bfid, struct ulnfi_eq, eq.fid);
    return rc;
}

static struct fi_ops pep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = pep_close,
    .bind = pep_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

static int pep_listen(struct fid_pep *fpep)
{
    struct ulnfi_pep *p = ulnfi_container(fpep, struct ulnfi_pep, pep);
    if (!p->eq) return -FI_ENOEQ;
    int rc = fi_enable(p->iep);
    if (!rc) p->listening = true;
    return rc;
}

static int pep_reject(struct fid_pep *fpep, fid_t handle, const void *param, size_t len)
{
    struct ulnfi_pep *p = ulnfi_container(fpep, struct ulnfi_pep, pep);
    if (!handle || handle->fclass != FI_CLASS_CONNREQ) return -FI_EINVAL;
    if (len > ULNFI_CM_DATA_MAX || (len && !param)) return -FI_EINVAL;
    struct ulnfi_connreq *cr = ulnfi_container(handle, struct ulnfi_connreq, fid);
    if (!answer(cr)) return -FI_EINVAL; /* accepted or rejected already */
    struct ulnfi_ep *ep = pep_ep(p);
    ulnfi_lock(ep->dom);
    fi_addr_t fa;
    int peer;
    int rc = add_peer(ep, &cr->client, &fa);
    if (!rc) rc = ulnfi_av_peer_raw(ep->av, fa, &peer);
    if (!rc) rc = cm_send(ep, peer, cr->client.gen, ULNFI_CM_REJECT, cr->cookie, NULL, param, len);
    ulnfi_unlock(ep->dom);
    ulnfi_connreq_put(cr);
    return rc;
}

static int pep_getname(fid_t fid, void *addr, size_t *addrlen)
{
    struct ulnfi_pep *p = ulnfi_container(fid, struct ulnfi_pep, pep.fid);
    return ulnfi_ep_getname(pep_ep(p), addr, addrlen);
}

/* fi_setname(3) on a passive endpoint: where it listens (socket addresses
 * only), taken at once - port 0 is one the system picks, which fi_getname
 * then gives - and kept until the pep closes. Before fi_listen; requests
 * that come before it are not taken (on_req). */
static int pep_setname(fid_t fid, void *addr, size_t addrlen)
{
    struct ulnfi_pep *p = ulnfi_container(fid, struct ulnfi_pep, pep.fid);
    int rc = ulnfi_ep_setname(pep_ep(p), addr, addrlen);
    return rc ? rc : fi_enable(p->iep);
}

static struct fi_ops_cm pep_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = pep_setname,
    .getname = pep_getname,
    .getpeer = (void *)cm_getpeer,
    .connect = (void *)cm_connect,
    .listen = pep_listen,
    .accept = (void *)cm_accept,
    .reject = pep_reject,
    .shutdown = (void *)cm_shutdown,
    .join = no_join,
};

static int pep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
    if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
    return ulnfi_cm_getopt(NULL, optname, optval, optlen);
}
static int pep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
    return -FI_ENOPROTOOPT;
}

static ssize_t pep_cancel(fid_t fid, void *context)
{
    return -FI_ENOENT;
}
static int pep_ctx(struct fid_ep *sep, int index, void *attr, struct fid_ep **out, void *context)
{
    return -FI_ENOSYS;
}
static ssize_t pep_left(struct fid_ep *ep)
{
    return -FI_ENOSYS;
}

static struct fi_ops_ep pep_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = pep_cancel,
    .getopt = pep_getopt,
    .setopt = pep_setopt,
    .tx_ctx = (void *)pep_ctx,
    .rx_ctx = (void *)pep_ctx,
    .rx_size_left = pep_left,
    .tx_size_left = pep_left,
};

int ulnfi_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **out,
                     void *context)
{
    if (!info || !info->ep_attr || info->ep_attr->type != FI_EP_MSG) return -FI_EINVAL;
    struct ulnfi_pep *p = calloc(1, sizeof(*p));
    if (!p) return -FI_ENOMEM;
    p->fabric = fabric;
    p->info = fi_dupinfo(info);
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE, .size = 64};
    int rc = p->info ? 0 : -FI_ENOMEM;
    if (!rc) rc = fi_domain(fabric, p->info, &p->dom, NULL);
    if (!rc) rc = fi_cq_open(p->dom, &ca, &p->cq, NULL);
    if (!rc) rc = fi_endpoint(p->dom, p->info, &p->iep, NULL);
    if (!rc) rc = fi_ep_bind(p->iep, &p->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc) {
        pep_close(&p->pep.fid);
        return rc;
    }
    pep_ep(p)->pep = p;
    p->pep.fid.fclass = FI_CLASS_PEP;
    p->pep.fid.context = context;
    p->pep.fid.ops = &pep_fi_ops;
    p->pep.ops = &pep_ep_ops;
    p->pep.cm = &pep_cm_ops;
    *out = &p->pep;
    return 0;
}
