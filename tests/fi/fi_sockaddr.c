/*
 * fi_sockaddr - socket addresses as endpoint names (FI_SOCKADDR_IN,
 * FI_SOCKADDR_IN6, FI_SOCKADDR), per fi_getinfo(3), fi_av(3), fi_endpoint(3):
 *  - fi_getinfo: the format asked for (FI_SOCKADDR: the family's), src_addr
 *    from FI_SOURCE's node (port 0: any), dest_addr node:service's address
 *    without asking anyone there;
 *  - fi_getname: the endpoint's socket address (IPv4 loopback, a port the
 *    system gave, or the one asked for; a port taken twice is refused), and
 *    -FI_ETOOSMALL with the length in too small a room;
 *  - fi_av_insert of socket addresses: each one's endpoint reached - every
 *    message intact, in order, exactly once, its source the peer's fi_addr -
 *    both ways; fi_av_lookup gives the address inserted, fi_av_straddr
 *    "fi_sockaddr_in://ip:port"; fi_av_insertsvc the same endpoint;
 *  - refused: a zero address, port 0, an IPv6 one in an FI_SOCKADDR_IN
 *    domain (0 inserted, FI_ADDR_NOTAVAIL, FI_SYNC_ERR's status); an address
 *    no endpoint answers on is inserted, and a send to it fails with
 *    -FI_EADDRNOTAVAIL once FI_ULNET_NAME_WAIT_MS has passed, not a hang;
 *    an AV closed while a lookup waits closes.
 * One process: endpoints A and B in one domain, each with its AV and CQ.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_sockaddr
 *        (FI_ULNET_NAME_WAIT_MS short: the address nobody answers on)
 */
#include "fi_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>

#define MSGS 200

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;

struct ep {
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct sockaddr_in sin; /* its name */
};

static struct fi_info *sa_hints(uint32_t fmt)
{
    struct fi_info *h = fic_hints(FI_TAGGED | FI_MSG, NULL);
    h->addr_format = fmt;
    return h;
}

static void ep_open(struct ep *e, struct fi_info *fi)
{
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &e->av, NULL));
    struct fic_ep_cfg cfg = {.av = e->av};
    fic_ep_open(dom, fi, &cfg, &e->ep, &e->cq);
    size_t len = sizeof(e->sin);
    OK(fi_getname(&e->ep->fid, &e->sin, &len));
    CHECK(len == sizeof(struct sockaddr_in));
    CHECK(e->sin.sin_family == AF_INET && e->sin.sin_port != 0);
    CHECK(e->sin.sin_addr.s_addr == htonl(INADDR_LOOPBACK)); /* FI_SOURCE's node */
}

static void ep_close(struct ep *e)
{
    fic_ep_close(e->ep, e->cq);
    OK(fi_close(&e->av->fid));
}

/* A send, retried while the provider says -FI_EAGAIN (the peer's name still
 * being looked up, or a full queue) for up to 20 s: its result. */
static ssize_t send_to(struct ep *e, const uint32_t *v, fi_addr_t to, uint64_t tag)
{
    double end = fic_now() + 20;
    ssize_t r;
    while ((r = fi_tinject(e->ep, v, sizeof(*v), to, tag)) == -FI_EAGAIN && fic_now() < end) {
        struct fi_cq_tagged_entry c;
        (void)fi_cq_read(e->cq, &c, 1);
    }
    return r;
}

/* The next receive completion on e (progress is domain-wide: the other
 * endpoint's sends go on too): the value and its source, or exit. */
static uint32_t recv_one(struct ep *e, fi_addr_t *src, uint64_t tag)
{
    uint32_t v = 0;
    struct fi_context ctx;
    OK(fi_trecv(e->ep, &v, sizeof(v), NULL, FI_ADDR_UNSPEC, tag, 0, &ctx));
    double end = fic_now() + 20;
    while (fic_now() < end) {
        struct fi_cq_tagged_entry c;
        ssize_t n = fi_cq_readfrom(e->cq, &c, 1, src);
        if (n == 1) {
            CHECK(c.op_context == &ctx && c.len == sizeof(v) && c.tag == tag);
            return v;
        }
        CHECK(n == -FI_EAGAIN);
    }
    fprintf(stderr, "no message in 20 s\n");
    exit(1);
}

/* fi_getinfo's addresses: the format, src_addr, dest_addr. */
static void test_getinfo(void)
{
    struct fi_info *h = sa_hints(FI_SOCKADDR), *fi;
    OK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &fi));
    CHECK(fi->addr_format == FI_SOCKADDR_IN); /* FI_SOCKADDR: the family's own */
    CHECK(fi->src_addrlen == sizeof(struct sockaddr_in));
    struct sockaddr_in s;
    memcpy(&s, fi->src_addr, sizeof(s));
    CHECK(s.sin_family == AF_INET && s.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && !s.sin_port);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    /* a destination: its address, asked of no one (nothing listens on it) */
    h = sa_hints(FI_SOCKADDR_IN);
    OK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "9", 0, h, &fi));
    CHECK(fi->addr_format == FI_SOCKADDR_IN && fi->dest_addrlen == sizeof(s));
    memcpy(&s, fi->dest_addr, sizeof(s));
    CHECK(s.sin_family == AF_INET && s.sin_port == htons(9));
    CHECK(s.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    for (struct fi_info *i = fi; i; i = i->next) /* connected endpoints speak ulnet names */
        CHECK(i->ep_attr->type != FI_EP_MSG);
    fi_freeinfo(fi);
    /* an IPv6 format with an IPv4 source: nothing */
    fi_freeinfo(h);
    h = sa_hints(FI_SOCKADDR_IN6);
    CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &fi) == -FI_ENODATA);
    fi_freeinfo(h);
}

/* Addresses refused, one by one and beside a good one. */
static void test_refused(struct ep *b, const struct sockaddr_in *good)
{
    struct sockaddr_in zero = {0}, noport = *good;
    noport.sin_port = 0;
    struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
    fi_addr_t fa = 0;
    CHECK(fi_av_insert(b->av, &zero, 1, &fa, 0, NULL) == 0 && fa == FI_ADDR_NOTAVAIL);
    fa = 0;
    CHECK(fi_av_insert(b->av, &noport, 1, &fa, 0, NULL) == 0 && fa == FI_ADDR_NOTAVAIL);
    fa = 0;
    CHECK(fi_av_insert(b->av, &six, 1, &fa, 0, NULL) == 0 && fa == FI_ADDR_NOTAVAIL);
    struct sockaddr_in two[2] = {zero, *good};
    fi_addr_t fa2[2] = {0, FI_ADDR_NOTAVAIL};
    int st[2] = {-1, -1};
    CHECK(fi_av_insert(b->av, two, 2, fa2, FI_SYNC_ERR, st) == 1);
    CHECK(fa2[0] == FI_ADDR_NOTAVAIL && fa2[1] != FI_ADDR_NOTAVAIL);
    CHECK(st[0] == FI_EINVAL && st[1] == 0);
    if (fa2[1] != FI_ADDR_NOTAVAIL) OK(fi_av_remove(b->av, &fa2[1], 1, 0));
}

/* A port nothing listens on: inserted; a send to it an error in bounded time. */
static void test_nobody(struct ep *b)
{
    int s = socket(AF_INET, SOCK_STREAM, 0); /* a free port: bound, never listened on */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    OK(-(bind(s, (struct sockaddr *)&a, sizeof(a)) || getsockname(s, (struct sockaddr *)&a, &al)));
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    CHECK(fi_av_insert(b->av, &a, 1, &fa, 0, NULL) == 1 && fa != FI_ADDR_NOTAVAIL);
    uint32_t v = 1;
    CHECK(send_to(b, &v, fa, 9) == -FI_EADDRNOTAVAIL);
    close(s);
    /* the AV closed while a lookup of it waits (30 s by default) closes */
    struct fid_av *av;
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    OK(fi_av_open(dom, &aa, &av, NULL));
    CHECK(fi_av_insert(av, &a, 1, &fa, 0, NULL) == 1);
    OK(fi_close(&av->fid));
}

int main(void)
{
    test_getinfo();
    struct fi_info *h = sa_hints(FI_SOCKADDR_IN);
    OK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &info));
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct ep a, b;
    ep_open(&a, info);
    ep_open(&b, info);
    CHECK(a.sin.sin_port != b.sin.sin_port);

    /* fi_getname: too small a room */
    struct sockaddr_in tmp;
    size_t len = 4;
    CHECK(fi_getname(&a.ep->fid, &tmp, &len) == -FI_ETOOSMALL && len == sizeof(tmp));

    /* an endpoint at a port asked for: that one; the same port again refused */
    struct fi_info *at = fi_dupinfo(info);
    memcpy(at->src_addr, &a.sin, sizeof(a.sin));
    struct fid_ep *dup;
    OK(fi_endpoint(dom, at, &dup, NULL));
    OK(fi_ep_bind(dup, &a.av->fid, 0));
    OK(fi_ep_bind(dup, &a.cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(dup) == -FI_EADDRINUSE);
    OK(fi_close(&dup->fid));
    fi_freeinfo(at);

    /* each other's address, and the AV's view of it */
    fi_addr_t a2b, b2a, b2a_svc;
    CHECK(fi_av_insert(a.av, &b.sin, 1, &a2b, 0, NULL) == 1);
    CHECK(fi_av_insert(b.av, &a.sin, 1, &b2a, 0, NULL) == 1);
    struct sockaddr_in got = {0};
    len = sizeof(got);
    OK(fi_av_lookup(b.av, b2a, &got, &len));
    CHECK(len == sizeof(got) && !memcmp(&got, &a.sin, sizeof(got)));
    char want[64], str[64];
    snprintf(want, sizeof(want), "fi_sockaddr_in://127.0.0.1:%u", ntohs(a.sin.sin_port));
    len = sizeof(str);
    fi_av_straddr(b.av, &a.sin, str, &len);
    CHECK(!strcmp(str, want) && len == strlen(want) + 1);
    char port[8];
    snprintf(port, sizeof(port), "%u", ntohs(a.sin.sin_port));
    CHECK(fi_av_insertsvc(b.av, "127.0.0.1", port, &b2a_svc, 0, NULL) == 1);

    /* A first sends to B, so that A knows B's name before B's messages come */
    uint32_t v = 0xb0b;
    OK(send_to(&a, &v, a2b, 1));
    fi_addr_t src;
    CHECK(recv_one(&b, &src, 1) == 0xb0b && (src == b2a || src == b2a_svc));
    /* then MSGS each way, alternately through B's two addresses of A */
    for (uint32_t i = 0; i < MSGS; i++) {
        v = i;
        OK(send_to(&b, &v, i % 2 ? b2a_svc : b2a, 2));
        OK(send_to(&a, &v, a2b, 3));
    }
    for (uint32_t i = 0; i < MSGS; i++) {
        CHECK(recv_one(&a, &src, 2) == i && src == a2b);
        CHECK(recv_one(&b, &src, 3) == i && (src == b2a || src == b2a_svc));
    }
    struct fi_cq_tagged_entry e;
    CHECK(fi_cq_read(a.cq, &e, 1) == -FI_EAGAIN && fi_cq_read(b.cq, &e, 1) == -FI_EAGAIN);

    test_refused(&b, &a.sin);
    test_nobody(&b);

    ep_close(&a);
    ep_close(&b);
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(h);
    if (failures)
        fprintf(stderr, "fi_sockaddr: %d checks failed\n", failures);
    else
        printf("fi_sockaddr: passed\n");
    return failures ? 1 : 0;
}
