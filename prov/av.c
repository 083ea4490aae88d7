/*
 * av.c - address vectors (FI_AV_MAP and FI_AV_TABLE alike: an fi_addr_t is
 * the slot an address was inserted into, which a map may return too).
 *
 * A removed slot is used again, as fi_av(3) allows ("invalid until it is
 * returned again by a new fi_av_insert"): an address goes into the lowest
 * unused slot, which for FI_AV_TABLE is what fi_av(3) asks, and gives the
 * sequential indices from 0 it promises while nothing was removed. So a
 * client that inserts and removes peers forever keeps an AV the size of the
 * peers it holds at once. A slot's old peer leaves nothing behind that would
 * name the new one: messages still waiting from it lose the address at
 * removal (ulnfi_rx_forget; they take the peer's own again if it is
 * re-inserted, found by its ulnet peer id, which ulnet never gives another
 * peer). Completions already written keep the address they were reported
 * with: fi_av(3) leaves operations on a removed address undefined.
 *
 * An address is an endpoint index and a ulnet context address; inserting
 * it is uln_peer_insert, which gives the peer id every operation uses, from
 * any endpoint. A malformed address, or one no transport reaches, gets
 * FI_ADDR_NOTAVAIL, and is not counted in what fi_av_insert returns.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"

static int av_close(struct fid *fid)
{
    struct ulnfi_av *av = ulnfi_container(fid, struct ulnfi_av, av.fid);
    if (av->refs) return -FI_EBUSY;
    ulnfi_av_sa_close(av); /* first: its lookups insert */
    av->dom->refs--;
    for (size_t i = 0; i < av->count && !av->keep_peers; i++)
        if (av->used[i] && av->peer[i] >= 0) uln_peer_remove(av->dom->ctx, av->peer[i]);
    ulnfi_av_share_close(av);
    for (size_t k = 0; av->xpeer && k < av->xcap * ULNFI_SEP_MAX; k++)
        if (av->xpeer[k] >= 0) uln_peer_remove(av->dom->ctx, av->xpeer[k]);
    free(av->xpeer);
    free(av->tab);
    free(av->peer);
    free(av->used);
    free(av->by_peer);
    free(av->nslots);
    free(av);
    return 0;
}

static int av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    return -FI_ENOSYS;
}

static struct fi_ops av_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = av_close,
    .bind = av_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

static int grow(struct ulnfi_av *av)
{
    size_t cap = av->cap ? av->cap * 2 : 64;
    struct ulnfi_addr *t = realloc(av->tab, cap * sizeof(*t));
    if (!t) return -FI_ENOMEM;
    av->tab = t;
    int *pe = realloc(av->peer, cap * sizeof(*pe));
    if (!pe) return -FI_ENOMEM;
    av->peer = pe;
    uint8_t *u = realloc(av->used, cap);
    if (!u) return -FI_ENOMEM;
    memset(u + av->cap, 0, cap - av->cap);
    av->used = u;
    if (ulnfi_sa_format(av->dom->addr_format)) {
        struct ulnfi_av_sa *sa = realloc(av->sa, cap * sizeof(*sa));
        if (!sa) return -FI_ENOMEM;
        memset(sa + av->cap, 0, (cap - av->cap) * sizeof(*sa));
        av->sa = sa;
    }
    av->cap = cap;
    return 0;
}

/* The slot the next address goes into: the lowest unused one (growing the
 * table when every slot is in use), not taken yet. */
static int free_slot(struct ulnfi_av *av, size_t *slot)
{
    while (av->lowest_free < av->count && av->used[av->lowest_free])
        av->lowest_free++;
    if (av->lowest_free == av->cap && grow(av)) return -ENOMEM;
    *slot = av->lowest_free;
    return 0;
}

/* The ulnet peer id of a name, or a negative errno. */
static int insert_one(struct ulnfi_av *av, const struct ulnfi_addr *a)
{
    int peer, rc;
    rc = uln_peer_insert(av->dom->ctx, a->uaddr, a->ulen, a->ep, &peer);
    return rc ? rc : peer;
}

int ulnfi_av_insert_locked(struct ulnfi_av *av, const struct ulnfi_addr *name, fi_addr_t *fa)
{
    size_t slot = 0;
    int peer = free_slot(av, &slot) ? -ENOMEM : insert_one(av, name);
    if (peer < 0) return ulnfi_errno(peer);
    if (slot == av->count) av->count++;
    av->lowest_free = slot + 1;
    av->tab[slot] = *name;
    av->peer[slot] = peer;
    av->used[slot] = 1;
    av->by_peer[peer] = slot;
    av->nslots[peer]++;
    *fa = slot;
    return 0;
}

int ulnfi_av_resolved(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name)
{
    int peer = insert_one(av, name);
    if (peer < 0) return ulnfi_errno(peer);
    av->tab[slot] = *name;
    av->peer[slot] = peer;
    av->by_peer[peer] = slot;
    av->nslots[peer]++;
    return 0;
}

/* A shared AV's reader: the writer's name at the writer's slot. */
int ulnfi_av_insert_at(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name)
{
    while (slot >= av->cap)
        if (grow(av)) return -FI_ENOMEM;
    int peer = insert_one(av, name);
    if (peer < 0) return ulnfi_errno(peer);
    if (slot >= av->count) av->count = slot + 1;
    av->tab[slot] = *name;
    av->peer[slot] = peer;
    av->used[slot] = 1;
    av->by_peer[peer] = slot;
    av->nslots[peer]++;
    return 0;
}

/* One socket address into a free slot, its lookup started (av_sockaddr.c):
 * the slot, or a negative errno. stride: its length. */
static int insert_sa(struct ulnfi_av *av, const uint8_t *at, size_t *stride, size_t *slot,
                     struct ulnfi_sa_first *first)
{
    socklen_t len = ulnfi_sa_len(at);
    /* an address of no family of ours: as long as the format says */
    *stride = len ? len
                  : (av->dom->addr_format == FI_SOCKADDR_IN6 ? sizeof(struct sockaddr_in6)
                                                             : sizeof(struct sockaddr_in));
    if (!len || (av->dom->addr_format == FI_SOCKADDR_IN && len != sizeof(struct sockaddr_in)) ||
        (av->dom->addr_format == FI_SOCKADDR_IN6 && len != sizeof(struct sockaddr_in6)))
        return -EINVAL;
    if (free_slot(av, slot)) return -ENOMEM;
    av->peer[*slot] = -1; /* until its name is known */
    int rc = ulnfi_av_sa_insert(av, *slot, at, len, first);
    return rc ? (rc == -FI_ENOMEM ? -ENOMEM : -EINVAL) : 0;
}

/* One name, full or short (names.h), each as long as its first byte says. */
static int insert_name(struct ulnfi_av *av, const uint8_t *at, size_t *stride, size_t *slot,
                       struct ulnfi_addr *name)
{
    int peer = ulnfi_name_get(at, name, stride);
    if (!peer) peer = free_slot(av, slot) ? -ENOMEM : insert_one(av, name);
    if (peer < 0) return peer;
    av->tab[*slot] = *name;
    av->peer[*slot] = peer;
    av->by_peer[peer] = *slot;
    av->nslots[peer]++;
    ulnfi_av_share_put(av, *slot, name, true);
    return 0;
}

static int av_insert(struct fid_av *fav, const void *addr, size_t count, fi_addr_t *fi_addr,
                     uint64_t flags, void *context)
{
    struct ulnfi_av *av = ulnfi_container(fav, struct ulnfi_av, av);
    if (flags & ~(uint64_t)(FI_MORE | FI_SYNC_ERR)) return -FI_EBADFLAGS;
    if (count && !addr) return -FI_EINVAL;
    if (av->sav_reader) return -FI_EOPNOTSUPP;          /* opened FI_READ: the writer's to fill */
    int *status = flags & FI_SYNC_ERR ? context : NULL; /* fi_av(3): each address's */
    if (flags & FI_SYNC_ERR && count && !status) return -FI_EINVAL;
    bool sa = ulnfi_sa_format(av->dom->addr_format);
    struct ulnfi_sa_first first = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    const uint8_t *at = addr;
    int ok = 0, bad = 0;
    ulnfi_lock(av->dom);
    for (size_t i = 0; i < count; i++) {
        struct ulnfi_addr name;
        size_t stride, slot = 0;
        int rc = sa ? insert_sa(av, at, &stride, &slot, &first)
                    : insert_name(av, at, &stride, &slot, &name);
        at += stride;
        if (status) status[i] = rc < 0 ? -ulnfi_errno(rc) : 0; /* a positive fi errno */
        if (rc < 0) {
            if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
            FI_WARN(&ulnfi_prov, FI_LOG_AV, "address %zu refused: %s\n", i, uln_strerror(rc));
            bad++;
            continue;
        }
        if (slot == av->count) av->count++;
        av->lowest_free = slot + 1;
        av->used[slot] = 1;
        if (fi_addr) fi_addr[i] = slot;
        ok++;
    }
    for (int i = 0; ok && !sa && i < av->dom->nlive; i++)
        if (av->dom->live[i]->av == av) ulnfi_rx_resolve(av->dom->live[i]);
    ulnfi_unlock(av->dom);
    if (sa) ulnfi_av_sa_wait(&first); /* the lookups' first tries (av_sockaddr.c) */
    /* fi_av(3): synchronous insertion returns the number inserted; each
     * that failed has FI_ADDR_NOTAVAIL (and its error with FI_SYNC_ERR). */
    return ok;
}

/* fi_av(3)'s insertsvc in a domain of socket addresses: node's first. */
static int insertsvc_sa(struct fid_av *fav, const char *node, const char *service,
                        fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    struct ulnfi_av *av = ulnfi_container(fav, struct ulnfi_av, av);
    struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai;
    hints.ai_family = av->dom->addr_format == FI_SOCKADDR_IN    ? AF_INET
                      : av->dom->addr_format == FI_SOCKADDR_IN6 ? AF_INET6
                                                                : AF_UNSPEC;
    if (getaddrinfo(node, service, &hints, &ai)) {
        if (fi_addr) *fi_addr = FI_ADDR_NOTAVAIL;
        return 0; /* none inserted */
    }
    struct sockaddr_storage ss = {0};
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return av_insert(fav, &ss, 1, fi_addr, flags, context);
}

/* fi_av(3): one address, found by the name service at node:service. */
static int av_insertsvc(struct fid_av *fav, const char *node, const char *service,
                        fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    if (flags & ~(uint64_t)FI_MORE) return -FI_EBADFLAGS;
    if (!node || !service) return -FI_EINVAL;
    if (ulnfi_sa_format(ulnfi_container(fav, struct ulnfi_av, av)->dom->addr_format))
        return insertsvc_sa(fav, node, service, fi_addr, flags, context);
    struct ulnfi_addr a;
    if (ulnfi_names_lookup(node, service, &a)) {
        if (fi_addr) *fi_addr = FI_ADDR_NOTAVAIL;
        return 0; /* none inserted */
    }
    return av_insert(fav, &a, 1, fi_addr, flags, context);
}

/* The i-th of a symmetric range: an IPv4 literal counts up its address, a
 * name ending in digits its number, keeping the width (node09, node10). */
static int sym_node(const char *base, size_t i, char *out, size_t n)
{
    struct in_addr ip;
    if (inet_pton(AF_INET, base, &ip) == 1) {
        ip.s_addr = htonl(ntohl(ip.s_addr) + (uint32_t)i);
        return inet_ntop(AF_INET, &ip, out, (socklen_t)n) ? 0 : -FI_EINVAL;
    }
    size_t len = strlen(base), d = len;
    while (d && isdigit((unsigned char)base[d - 1]))
        d--;
    if (d == len) return i ? -FI_EINVAL : (snprintf(out, n, "%s", base) < (int)n ? 0 : -FI_EINVAL);
    unsigned long v = strtoul(base + d, NULL, 10) + i;
    int w = snprintf(out, n, "%.*s%0*lu", (int)d, base, (int)(len - d), v);
    return w > 0 && (size_t)w < n ? 0 : -FI_EINVAL;
}

/* fi_av(3): nodecnt nodes times svccnt services, node-major; each by
 * insertsvc. Returns how many went in. */
static int av_insertsym(struct fid_av *fav, const char *node, size_t nodecnt, const char *service,
                        size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    if (flags & ~(uint64_t)FI_MORE) return -FI_EBADFLAGS;
    if (!node || !service || !nodecnt || !svccnt) return -FI_EINVAL;
    char *end;
    unsigned long port = strtoul(service, &end, 10);
    if (*end || !port || port + svccnt - 1 > 65535) return -FI_EINVAL;
    int ok = 0;
    for (size_t i = 0; i < nodecnt; i++)
        for (size_t k = 0; k < svccnt; k++) {
            char h[256], s[8];
            fi_addr_t *slot = fi_addr ? &fi_addr[i * svccnt + k] : NULL;
            snprintf(s, sizeof(s), "%lu", port + k);
            int rc = sym_node(node, i, h, sizeof(h));
            if (!rc) rc = av_insertsvc(fav, h, s, slot, flags, context);
            if (rc <= 0 && slot) *slot = FI_ADDR_NOTAVAIL;
            ok += rc > 0;
        }
    return ok;
}

/* Another slot holding peer (a duplicate insertion: fi_av(3) leaves those
 * to the provider), for the messages it sends. */
static fi_addr_t other_slot(const struct ulnfi_av *av, int peer)
{
    for (size_t i = av->count; i-- > 0;)
        if (av->used[i] && av->peer[i] == peer) return i;
    return FI_ADDR_NOTAVAIL;
}

static int av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
    struct ulnfi_av *av = ulnfi_container(fav, struct ulnfi_av, av);
    int rc = 0;
    if (av->sav_reader) return -FI_EOPNOTSUPP; /* opened FI_READ */
    ulnfi_lock(av->dom);
    for (size_t i = 0; i < count; i++) {
        fi_addr_t a = fi_addr[i];
        if (a >= av->count || !av->used[a]) {
            rc = -FI_EINVAL;
            continue;
        }
        av->used[a] = 0;
        if (av->sa) av->sa[a].seq++; /* a lookup under way leaves the slot alone */
        if (a < av->lowest_free) av->lowest_free = a;
        while (av->count && !av->used[av->count - 1]) /* the table ends at its last used slot */
            av->count--;
        int peer = av->peer[a];
        if (peer < 0) continue; /* a socket address not resolved: no peer yet */
        ulnfi_av_share_put(av, a, &av->tab[a], false);
        if (--av->nslots[peer] == 0)
            av->by_peer[peer] = FI_ADDR_NOTAVAIL;
        else if (av->by_peer[peer] == a)
            av->by_peer[peer] = other_slot(av, peer);
        uln_peer_remove(av->dom->ctx, peer);
        /* Messages that wait from a no longer name it: the slot may go to
         * another peer. A later insert of the same peer gives them its new
         * address. */
        for (int e = 0; e < av->dom->nlive; e++)
            if (av->dom->live[e]->av == av) ulnfi_rx_forget(av->dom->live[e], a);
    }
    for (int e = 0; e < av->dom->nlive; e++) /* the peer may still be in the AV at another slot */
        if (av->dom->live[e]->av == av) ulnfi_rx_resolve(av->dom->live[e]);
    ulnfi_unlock(av->dom);
    return rc;
}

static int av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
    struct ulnfi_av *av = ulnfi_container(fav, struct ulnfi_av, av);
    if (fi_addr >= av->count || !av->used[fi_addr]) return -FI_ENOENT;
    if (av->sa) { /* the socket address inserted, as much as fits */
        const struct ulnfi_av_sa *s = &av->sa[fi_addr];
        memcpy(addr, &s->sa, *addrlen < s->len ? *addrlen : s->len);
        *addrlen = s->len;
        return 0;
    }
    /* As fi_getname: the full name, or in 32 to 63 bytes the short one where
     * there is one; else, fi_av(3), as much as fits, and the length needed. */
    size_t room = *addrlen, n = ulnfi_name_put(&av->tab[fi_addr], addr, room);
    if (!n) {
        memcpy(addr, &av->tab[fi_addr], room);
        n = ulnfi_name_len(&av->tab[fi_addr]);
    }
    *addrlen = n;
    return 0;
}

static const char *av_straddr(struct fid_av *fav, const void *addr, char *buf, size_t *len)
{
    struct ulnfi_av *av = ulnfi_container(fav, struct ulnfi_av, av);
    char s[200];
    int n;
    if (ulnfi_sa_format(av->dom->addr_format)) {
        n = (int)ulnfi_sa_str(addr, s, sizeof(s));
    } else {
        struct ulnfi_addr a;
        size_t stride;
        char u[160] = "not a ulnet address";
        ulnfi_name_get(addr, &a, &stride);
        if (a.magic == ULNFI_ADDR_MAGIC && a.ulen <= ULN_ADDR_MAX)
            uln_addr_str(a.uaddr, a.ulen, u, sizeof u); /* says what ulnet knows of it */
        n = snprintf(s, sizeof(s), "ulnet ep %u, %s, life %u", (unsigned)a.ep, u, (unsigned)a.gen);
    }
    if (*len) {
        size_t c = (size_t)n < *len - 1 ? (size_t)n : *len - 1;
        memcpy(buf, s, c);
        buf[c] = '\0';
    }
    *len = (size_t)n + 1;
    return buf;
}

static int av_set(struct fid_av *av, struct fi_av_set_attr *attr, struct fid_av_set **set,
                  void *context)
{
    return -FI_ENOSYS;
}

static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av),
    .insert = av_insert,
    .insertsvc = av_insertsvc,
    .insertsym = av_insertsym,
    .remove = av_remove,
    .lookup = av_lookup,
    .straddr = av_straddr,
    .av_set = av_set,
};

int ulnfi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out,
                  void *context)
{
    struct ulnfi_domain *d = ulnfi_container(domain, struct ulnfi_domain, dom);
    if (!attr) return -FI_EINVAL;
    if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
        return -FI_EINVAL;
    if (attr->flags & (FI_EVENT | FI_SYMMETRIC)) return -FI_ENOSYS;
    if ((attr->flags & FI_READ) && !attr->name) return -FI_EINVAL;
    if (attr->name && ulnfi_sa_format(d->addr_format)) return -FI_ENOSYS; /* shares names only */
    if (attr->rx_ctx_bits < 0 || attr->rx_ctx_bits > 8) return -FI_EINVAL;
    struct ulnfi_av *av = calloc(1, sizeof(*av));
    if (!av) return -FI_ENOMEM;
    av->by_peer = malloc(sizeof(fi_addr_t) * (size_t)d->size);
    av->nslots = calloc((size_t)d->size, sizeof(*av->nslots));
    if (!av->by_peer || !av->nslots) {
        free(av->by_peer);
        free(av->nslots);
        free(av);
        return -FI_ENOMEM;
    }
    for (int i = 0; i < d->size; i++)
        av->by_peer[i] = FI_ADDR_NOTAVAIL;
    av->dom = d;
    if (attr->name) { /* FI_SHARED_AV */
        int rc = ulnfi_av_share(av, attr);
        if (rc) {
            free(av->by_peer);
            free(av->nslots);
            free(av);
            return rc;
        }
    }
    av->rx_bits = attr->rx_ctx_bits;
    av->type = attr->type == FI_AV_UNSPEC ? FI_AV_MAP : attr->type;
    attr->type = av->type;
    av->av.fid.fclass = FI_CLASS_AV;
    av->av.fid.context = context;
    av->av.fid.ops = &av_fi_ops;
    av->av.ops = &av_ops;
    d->refs++;
    *out = &av->av;
    return 0;
}

/* The ulnet peer id of a destination (any endpoint may reach any). */
/* fi_rx_addr(slot, i, rx_bits): receive context i of the scalable endpoint
 * named at slot, the ulnet endpoint at its index plus i (sep.c); its peer
 * id inserted at first use, kept until the AV closes. */
static int ctx_peer(struct ulnfi_av *av, fi_addr_t slot, unsigned i, int *peer)
{
    if (i >= ULNFI_SEP_MAX || slot >= av->count || !av->used[slot]) return -FI_EINVAL;
    if (!av->xpeer || av->xcap < av->cap) {
        int *x = realloc(av->xpeer, av->cap * ULNFI_SEP_MAX * sizeof(*x));
        if (!x) return -FI_ENOMEM;
        for (size_t k = av->xcap * ULNFI_SEP_MAX; k < av->cap * ULNFI_SEP_MAX; k++)
            x[k] = -1;
        av->xpeer = x;
        av->xcap = av->cap;
    }
    int *p = &av->xpeer[slot * ULNFI_SEP_MAX + i];
    if (*p < 0) {
        const struct ulnfi_addr *a = &av->tab[slot];
        int rc = uln_peer_insert(av->dom->ctx, a->uaddr, a->ulen, a->ep + (int)i, p);
        if (rc) {
            *p = -1;
            return ulnfi_errno(rc);
        }
    }
    *peer = *p;
    return 0;
}

int ulnfi_av_peer_raw(struct ulnfi_av *av, fi_addr_t addr, int *peer)
{
    if (av && av->rx_bits && addr != FI_ADDR_UNSPEC && addr != FI_ADDR_NOTAVAIL) {
        unsigned i = (unsigned)(addr >> (64 - av->rx_bits));
        addr &= ~(uint64_t)0 >> av->rx_bits;
        if (i && addr < av->count && av->used[addr] && av->peer[addr] < 0)
            return ulnfi_av_sa_use(av, addr); /* the endpoint's name first */
        if (i) return ctx_peer(av, addr, i, peer);
    }
    if (av && av->sav_reader && (addr >= av->count || !av->used[addr])) ulnfi_av_share_sync(av);
    if (!av || addr >= av->count || !av->used[addr]) return -FI_EINVAL;
    if (av->peer[addr] < 0) return ulnfi_av_sa_use(av, addr); /* its name still to be known */
    *peer = av->peer[addr];
    return 0;
}

/* A connected endpoint (FI_EP_MSG) reaches its peer whatever address it is
 * given (fi_msg(3): the address is ignored on connected endpoints). */
int ulnfi_av_peer(struct ulnfi_ep *ep, fi_addr_t addr, int *peer)
{
    if (ep->type == FI_EP_MSG) {
        if (ep->cm_state != ULNFI_CMS_CONNECTED) return -FI_ENOTCONN;
        addr = ep->conn;
    }
    return ulnfi_av_peer_raw(ep->av, addr, peer);
}

uint16_t ulnfi_av_gen(struct ulnfi_ep *ep, fi_addr_t addr)
{
    if (ep->av->rx_bits) addr &= ~(uint64_t)0 >> ep->av->rx_bits; /* contexts share a life */
    return ep->av->tab[ep->type == FI_EP_MSG ? ep->conn : addr].gen;
}

fi_addr_t ulnfi_av_src(struct ulnfi_av *av, int peer)
{
    if (!av || peer < 0 || peer >= av->dom->size) return FI_ADDR_NOTAVAIL;
    return av->by_peer[peer];
}
