/*
 * netlink.c - the AF_XDP link's view of the kernel's routes and
 * neighbours (rtnetlink): the next hop and its MAC for each peer.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"
#ifdef ULN_HAVE_XDP

/* ------------------------------------------------------------------------- */
/* Netlink: the route to a peer and its next hop's MAC                        */
/* ------------------------------------------------------------------------- */

/* Send one request and walk the answers: fn is called for each message of
 * type `want` until it returns nonzero (its value is ours) or the answer ends
 * (0). -errno on a netlink error. */
static int nl_ask(int fd, void *req, size_t len, uint16_t want,
                  int (*fn)(const struct nlmsghdr *, void *), void *arg)
{
    static uint32_t seq;
    struct nlmsghdr *rh = req;
    rh->nlmsg_seq = ++seq;
    if (send(fd, req, len, 0) < 0) return -errno;
    uint32_t buf[4096];
    int found = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) return errno == EINTR ? found : -errno;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != rh->nlmsg_seq) continue;
            if (h->nlmsg_type == NLMSG_DONE) return found;
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                return e->error ? e->error : found;
            }
            if (h->nlmsg_type == want && !found) found = fn(h, arg);
            if (!(h->nlmsg_flags & NLM_F_MULTI)) return found;
        }
    }
}

struct route_ans {
    int oif;
    uint32_t gw;
    unsigned char type; /* RTN_UNICAST, RTN_LOCAL, ... */
};

static int route_msg(const struct nlmsghdr *h, void *arg)
{
    struct route_ans *a = arg;
    const struct rtmsg *rt = NLMSG_DATA(h);
    int len = (int)RTM_PAYLOAD(h);
    a->type = rt->rtm_type;
    for (const struct rtattr *at = RTM_RTA(rt); RTA_OK(at, len); at = RTA_NEXT(at, len)) {
        if (at->rta_type == RTA_OIF && RTA_PAYLOAD(at) >= 4) memcpy(&a->oif, RTA_DATA(at), 4);
        if (at->rta_type == RTA_GATEWAY && RTA_PAYLOAD(at) == 4) memcpy(&a->gw, RTA_DATA(at), 4);
    }
    return 1;
}

/* The peer's next hop, and whether our interface leads there; or that the
 * peer is on this host (local: the bound socket reaches it). */
int uln_xdp_route_to(struct link_xdp *x, struct peer *p)
{
    struct {
        struct nlmsghdr h;
        struct rtmsg r;
        char attrs[32];
    } req;
    memset(&req, 0, sizeof(req));
    req.h.nlmsg_type = RTM_GETROUTE;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.r.rtm_family = AF_INET;
    req.r.rtm_dst_len = 32;
    struct rtattr *at = (struct rtattr *)req.attrs;
    at->rta_type = RTA_DST;
    at->rta_len = RTA_LENGTH(4);
    memcpy(RTA_DATA(at), &p->ip, 4);
    req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.r)) + RTA_ALIGN(at->rta_len);
    struct route_ans a = {0};
    int rc = nl_ask(x->nl_fd, &req, req.h.nlmsg_len, RTM_NEWROUTE, route_msg, &a);
    if (rc < 0) return rc;
    if (rc == 0) return -ENETUNREACH;
    if (a.type == RTN_LOCAL) {
        p->local = true;
        return 0;
    }
    if (a.oif != x->ifindex) return -ENETUNREACH; /* another interface: not this link's */
    p->nh = a.gw ? a.gw : p->ip;
    return 0;
}

struct neigh_ask {
    int ifindex;
    uint32_t ip;
    uint8_t *mac;
};

static int neigh_msg(const struct nlmsghdr *h, void *arg)
{
    const struct neigh_ask *q = arg;
    const struct ndmsg *nd = NLMSG_DATA(h);
    if (nd->ndm_ifindex != q->ifindex || (nd->ndm_state & (NUD_INCOMPLETE | NUD_FAILED)) ||
        nd->ndm_state == NUD_NONE)
        return 0;
    int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*nd)));
    bool match = false;
    const uint8_t *ll = NULL;
    for (const struct rtattr *at =
             (const struct rtattr *)((const char *)nd + NLMSG_ALIGN(sizeof(*nd)));
         RTA_OK(at, len); at = RTA_NEXT(at, len)) {
        if (at->rta_type == NDA_DST && RTA_PAYLOAD(at) == 4)
            match = !memcmp(RTA_DATA(at), &q->ip, 4);
        if (at->rta_type == NDA_LLADDR && RTA_PAYLOAD(at) == 6) ll = RTA_DATA(at);
    }
    if (!match || !ll) return 0;
    memcpy(q->mac, ll, 6);
    return 1;
}

/* The next hop's MAC from the neighbour table: 1 found, 0 not (yet). */
static int neigh_lookup(struct link_xdp *x, struct peer *p)
{
    struct {
        struct nlmsghdr h;
        struct ndmsg n;
    } req;
    memset(&req, 0, sizeof(req));
    req.h.nlmsg_len = sizeof(req);
    req.h.nlmsg_type = RTM_GETNEIGH;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.n.ndm_family = AF_INET;
    req.n.ndm_ifindex = x->ifindex;
    struct neigh_ask q = {.ifindex = x->ifindex, .ip = p->nh, .mac = p->mac};
    int rc = nl_ask(x->nl_fd, &req, sizeof(req), RTM_NEWNEIGH, neigh_msg, &q);
    return rc > 0;
}

/* Find the peer's MAC, or have the kernel find it: an empty datagram from
 * our port to the peer's discard port goes through the kernel's neighbour
 * resolution (the XDP program passes the answer, ICMP, to the kernel). */
void uln_xdp_peer_resolve(struct link_xdp *x, struct peer *p, uint64_t now)
{
    if (p->err || p->local || p->have_mac || now < p->next_lookup) return;
    p->next_lookup = now + NEIGH_RETRY_NS;
    if (neigh_lookup(x, p)) {
        p->have_mac = true;
        return;
    }
    if (now < p->next_probe) return;
    p->next_probe = now + NEIGH_PROBE_NS;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(DISCARD_PORT)};
    to.sin_addr.s_addr = p->ip;
    sendto(x->udp_fd, "", 0, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to));
}

#endif /* ULN_HAVE_XDP */
