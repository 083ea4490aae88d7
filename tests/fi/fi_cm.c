/*
 * fi_cm.c - the provider's endpoint types and contexts beyond RDM, in one
 * process (ulnet's shm loopback): what a user of each relies on.
 *   msg:    FI_EP_MSG. A passive endpoint found by host and port; a request
 *           rejected with data (FI_ECONNREFUSED and the data by
 *           fi_eq_readerr); one accepted (data both ways); messages in order
 *           both ways, eager and rendezvous, tagged, fi_write/fi_read and an
 *           atomic; fi_shutdown seen on both sides; sends after it refused.
 *           The server's EQ is FI_WAIT_FD, slept on with poll().
 *   dgram:  FI_EP_DGRAM: a datagram of max_msg_size arrives intact, a larger
 *           one is refused (-FI_EMSGSIZE).
 *   event:  FI_RMA_EVENT: the target's remote-write counter counts writes.
 *   srx:    a shared receive context: two endpoints' messages taken by its
 *           receives, reported to each endpoint's CQ.
 *   waitset: fi_wait wakes for a completion, times out with none.
 *   sep:    scalable endpoints: receive context i reached by fi_rx_addr.
 *   sav:    FI_SHARED_AV: a child process opens the AV by name (FI_READ) and
 *           sends to the parent's fi_addr_t from map_addr.
 *   msg_fd: a client process connects while the server sleeps in poll() on
 *           its EQ's FI_WAIT_FD descriptor: the request wakes it.
 *   msg_death: the same, and the client dies connected: FI_SHUTDOWN.
 * Usage: fi_cm msg|msg_fd|msg_death|dgram|event|srx|waitset|sav|sep
 */
#include "fi_common.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#define V FI_VERSION(1, 17)

static struct fi_info *hints_of(enum fi_ep_type type, uint64_t caps)
{
    struct fi_info *h = fic_hints(caps, NULL);
    h->ep_attr->type = type;
    h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    return h;
}

/* Until one completion (or error) in cq; bounded so a bug fails, not hangs. */
static ssize_t cq_wait1(struct fid_cq *cq, struct fi_cq_tagged_entry *e)
{
    double end = fic_now() + 30;
    for (;;) {
        ssize_t n = fi_cq_read(cq, e, 1);
        if (n == 1) return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(cq, &err, 0));
            return -err.err;
        }
        if (n != -FI_EAGAIN) OK(n);
        if (fic_now() > end) {
            fprintf(stderr, "no completion in 30 s\n");
            exit(1);
        }
    }
}

/* One EQ event, its entry into buf (len bytes room); the progress of the
 * endpoints bound to the EQ happens in the read. */
static ssize_t eq_wait(struct fid_eq *eq, uint32_t *ev, void *buf, size_t len)
{
    return fi_eq_sread(eq, ev, buf, len, 30000, 0);
}

/* The same, sleeping in poll() on the EQ's FI_WAIT_FD descriptor between
 * fi_trywait and the read, as an event loop does. */
static int fd_wakes; /* poll() returned with the descriptor readable */
static ssize_t eq_wait_fd(struct fid_fabric *fab, struct fid_eq *eq, uint32_t *ev, void *buf,
                          size_t len)
{
    int fd = -1;
    OK(fi_control(&eq->fid, FI_GETWAIT, &fd));
    double end = fic_now() + 30;
    struct fid *f = &eq->fid;
    for (;;) {
        ssize_t n = fi_eq_read(eq, ev, buf, len, 0);
        if (n != -FI_EAGAIN) return n;
        if (fi_trywait(fab, &f, 1) == 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, 30000);
            CHECK(r >= 0);
            fd_wakes += r > 0;
        }
        if (fic_now() > end) return -FI_ETIMEDOUT;
    }
}

struct side {
    struct fid_domain *dom;
    struct fid_ep *ep;
    struct fid_cq *cq;
};

static void side_open(struct fid_fabric *fab, struct fi_info *fi, struct fid_eq *eq, struct side *s)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    OK(fi_domain(fab, fi, &s->dom, NULL));
    OK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
    OK(fi_endpoint(s->dom, fi, &s->ep, NULL));
    OK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(s->ep, &eq->fid, 0));
    OK(fi_enable(s->ep));
}

static void side_close(struct side *s)
{
    OK(fi_close(&s->ep->fid));
    OK(fi_close(&s->cq->fid));
    OK(fi_close(&s->dom->fid));
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 31 + i * 7);
}
static int same(const uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(seed * 31 + i * 7)) return 0;
    return 1;
}

/* a -> b: n bytes, sent and received, data checked */
static void xfer(struct side *a, struct side *b, size_t n, unsigned seed, int tagged)
{
    uint8_t *tx = malloc(n + 1), *rx = calloc(1, n + 1);
    struct fi_cq_tagged_entry e;
    fill(tx, n, seed);
    if (tagged) {
        OK(fi_trecv(b->ep, rx, n, NULL, 0, seed, 0, rx));
        OK(fi_tsend(a->ep, tx, n, NULL, 0, seed, tx));
    } else {
        OK(fi_recv(b->ep, rx, n, NULL, 0, rx));
        OK(fi_send(a->ep, tx, n, NULL, 0, tx));
    }
    CHECK(cq_wait1(b->cq, &e) == 0 && e.op_context == rx && e.len == n);
    CHECK(cq_wait1(a->cq, &e) == 0 && e.op_context == tx);
    CHECK(same(rx, n, seed));
    free(tx);
    free(rx);
}

static int test_msg(void)
{
    char port[8];
    snprintf(port, sizeof(port), "%d", 20000 + (int)(getpid() % 20000));
    struct fi_info *h = hints_of(FI_EP_MSG, FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC), *sfi, *cfi;
    OK(fi_getinfo(V, NULL, port, FI_SOURCE, h, &sfi));
    CHECK(sfi->ep_attr->type == FI_EP_MSG);
    struct fid_fabric *fab;
    struct fid_eq *seq, *ceq;
    struct fid_pep *pep;
    struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC}, fa = {.wait_obj = FI_WAIT_FD};
    OK(fi_fabric(sfi->fabric_attr, &fab, NULL));
    OK(fi_eq_open(fab, &fa, &seq, NULL)); /* the server sleeps on a descriptor */
    OK(fi_eq_open(fab, &ea, &ceq, NULL));
    OK(fi_passive_ep(fab, sfi, &pep, NULL));
    OK(fi_pep_bind(pep, &seq->fid, 0));
    OK(fi_listen(pep));
    size_t cmsz = 0, ol = sizeof(cmsz);
    OK(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cmsz, &ol));
    CHECK(cmsz >= 32);
    /* the client finds the passive endpoint by host and port */
    OK(fi_getinfo(V, "127.0.0.1", port, 0, h, &cfi));
    CHECK(cfi->dest_addr != NULL);

    uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    struct fi_eq_cm_entry *ent = (void *)buf;
    uint32_t ev;
    struct side cli, srv;
    char data[32];
    for (int round = 0; round < 2; round++) { /* 0: rejected, 1: accepted */
        side_open(fab, cfi, ceq, &cli);
        snprintf(data, sizeof(data), "request %d", round);
        CHECK(fi_connect(cli.ep, cfi->dest_addr, data, cmsz + 1) == -FI_EINVAL);
        OK(fi_connect(cli.ep, cfi->dest_addr, data, sizeof(data)));
        CHECK(eq_wait_fd(fab, seq, &ev, buf, sizeof(buf)) ==
              (ssize_t)(sizeof(*ent) + sizeof(data)));
        CHECK(ev == FI_CONNREQ && ent->fid == &pep->fid && !strcmp((char *)ent->data, data));
        struct fi_info *req = ent->info;
        if (round == 0) {
            OK(fi_reject(pep, req->handle, "no", 3));
            fi_freeinfo(req);
            CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == -FI_EAVAIL);
            struct fi_eq_err_entry err = {0};
            CHECK(fi_eq_readerr(ceq, &err, 0) == sizeof(err));
            CHECK(err.err == FI_ECONNREFUSED && err.fid == &cli.ep->fid);
            CHECK(err.err_data_size == 3 && !memcmp(err.err_data, "no", 3));
            side_close(&cli);
            continue;
        }
        side_open(fab, req, seq, &srv);
        OK(fi_accept(srv.ep, "yes", 4));
        fi_freeinfo(req);
        CHECK(eq_wait(seq, &ev, buf, sizeof(buf)) == sizeof(*ent));
        CHECK(ev == FI_CONNECTED && ent->fid == &srv.ep->fid);
        CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == (ssize_t)(sizeof(*ent) + 4));
        CHECK(ev == FI_CONNECTED && ent->fid == &cli.ep->fid && !strcmp((char *)ent->data, "yes"));
    }
    /* messages both ways, in order: eager and rendezvous, untagged and tagged */
    size_t sizes[] = {0, 1, 4000, 65536, 1 << 20};
    for (unsigned i = 0; i < 5; i++) {
        xfer(&cli, &srv, sizes[i], i, 0);
        xfer(&srv, &cli, sizes[i], i + 10, 1);
    }
    /* RMA and an atomic on the connection (the address given is ignored) */
    uint64_t *region = calloc(512, 8), src[512], back[512], one = 5, old = 0;
    struct fid_mr *mr;
    OK(fi_mr_reg(srv.dom, region, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    for (int i = 0; i < 512; i++)
        src[i] = (uint64_t)i * 977;
    struct fi_cq_tagged_entry e;
    OK(fi_write(cli.ep, src, 4096, NULL, 0, 0, fi_mr_key(mr), NULL));
    CHECK(cq_wait1(cli.cq, &e) == 0);
    OK(fi_read(cli.ep, back, 4096, NULL, 0, 0, fi_mr_key(mr), NULL));
    CHECK(cq_wait1(cli.cq, &e) == 0);
    CHECK(!memcmp(region, src, 4096) && !memcmp(back, src, 4096));
    OK(fi_fetch_atomic(cli.ep, &one, 1, NULL, &old, NULL, 0, 8, fi_mr_key(mr), FI_UINT64, FI_SUM,
                       NULL));
    CHECK(cq_wait1(cli.cq, &e) == 0);
    CHECK(old == 977 && region[1] == 982);
    /* shutdown: both sides see it; the connection carries nothing more */
    OK(fi_shutdown(cli.ep, 0));
    CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_SHUTDOWN);
    CHECK(eq_wait(seq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_SHUTDOWN &&
          ent->fid == &srv.ep->fid);
    CHECK(fi_send(cli.ep, src, 8, NULL, 0, NULL) == -FI_ENOTCONN);
    CHECK(fi_eq_read(seq, &ev, buf, sizeof(buf), 0) == -FI_EAGAIN); /* exactly one each */
    OK(fi_close(&mr->fid));
    free(region);
    side_close(&cli);
    side_close(&srv);
    OK(fi_close(&pep->fid));
    OK(fi_close(&seq->fid));
    OK(fi_close(&ceq->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(cfi);
    fi_freeinfo(sfi);
    fi_freeinfo(h);
    printf("msg: rejected with data, accepted with data, messages/RMA/atomic checked, shut down\n");
    return 0;
}

/* Two endpoints of one domain, each in the other's AV (RDM or DGRAM). */
struct pair {
    struct fi_info *fi;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct side s[2];
    fi_addr_t addr[2];
};

static void pair_open(struct pair *p, struct fi_info *h)
{
    OK(fi_getinfo(V, NULL, NULL, 0, h, &p->fi));
    OK(fi_fabric(p->fi->fabric_attr, &p->fab, NULL));
    OK(fi_domain(p->fab, p->fi, &p->dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(p->dom, &aa, &p->av, NULL));
    for (int i = 0; i < 2; i++) {
        struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
        struct side *s = &p->s[i];
        s->dom = p->dom;
        OK(fi_cq_open(p->dom, &ca, &s->cq, NULL));
        OK(fi_endpoint(p->dom, p->fi, &s->ep, NULL));
        OK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
        OK(fi_ep_bind(s->ep, &p->av->fid, 0));
        OK(fi_enable(s->ep));
        char name[64];
        size_t nl = sizeof(name);
        OK(fi_getname(&s->ep->fid, name, &nl));
        CHECK(fi_av_insert(p->av, name, 1, &p->addr[i], 0, NULL) == 1);
    }
}

static void pair_close(struct pair *p)
{
    for (int i = 0; i < 2; i++) {
        OK(fi_close(&p->s[i].ep->fid));
        OK(fi_close(&p->s[i].cq->fid));
    }
    OK(fi_close(&p->av->fid));
    OK(fi_close(&p->dom->fid));
    OK(fi_close(&p->fab->fid));
    fi_freeinfo(p->fi);
}

static int test_dgram(void)
{
    struct fi_info *h = hints_of(FI_EP_DGRAM, FI_MSG);
    struct pair p;
    pair_open(&p, h);
    size_t max = p.fi->ep_attr->max_msg_size;
    CHECK(max >= 1024 && max == p.fi->tx_attr->inject_size);
    uint8_t *tx = malloc(max + 1), *rx = calloc(1, max + 1);
    fill(tx, max, 3);
    struct fi_cq_tagged_entry e;
    OK(fi_recv(p.s[1].ep, rx, max, NULL, FI_ADDR_UNSPEC, rx));
    OK(fi_send(p.s[0].ep, tx, max, NULL, p.addr[1], tx));
    CHECK(cq_wait1(p.s[1].cq, &e) == 0 && e.len == max && same(rx, max, 3));
    CHECK(cq_wait1(p.s[0].cq, &e) == 0);
    CHECK(fi_send(p.s[0].ep, tx, max + 1, NULL, p.addr[1], tx) == -FI_EMSGSIZE);
    free(tx);
    free(rx);
    pair_close(&p);
    fi_freeinfo(h);
    printf("dgram: %zu bytes intact, %zu refused\n", max, max + 1);
    return 0;
}

static int test_event(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG | FI_RMA | FI_RMA_EVENT);
    struct pair p;
    struct fid_cntr *cntr;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    struct fi_info *h2 = fi_dupinfo(h);
    memset(&p, 0, sizeof(p));
    OK(fi_getinfo(V, NULL, NULL, 0, h2, &p.fi));
    OK(fi_fabric(p.fi->fabric_attr, &p.fab, NULL));
    CHECK(p.fi->caps & FI_RMA_EVENT);
    OK(fi_domain(p.fab, p.fi, &p.dom, NULL));
    OK(fi_cntr_open(p.dom, &ca, &cntr, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(p.dom, &aa, &p.av, NULL));
    for (int i = 0; i < 2; i++) {
        struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
        struct side *s = &p.s[i];
        OK(fi_cq_open(p.dom, &cqa, &s->cq, NULL));
        OK(fi_endpoint(p.dom, p.fi, &s->ep, NULL));
        OK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
        OK(fi_ep_bind(s->ep, &p.av->fid, 0));
        if (i == 1) OK(fi_ep_bind(s->ep, &cntr->fid, FI_REMOTE_WRITE));
        OK(fi_enable(s->ep));
        char name[64];
        size_t nl = sizeof(name);
        OK(fi_getname(&s->ep->fid, name, &nl));
        CHECK(fi_av_insert(p.av, name, 1, &p.addr[i], 0, NULL) == 1);
    }
    uint64_t region[64] = {0}, src[64];
    struct fid_mr *mr;
    OK(fi_mr_reg(p.dom, region, sizeof(region), FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < 3; i++) {
        src[i] = 100 + (uint64_t)i;
        OK(fi_write(p.s[0].ep, &src[i], 8, NULL, p.addr[1], (uint64_t)i * 8, fi_mr_key(mr), NULL));
        CHECK(cq_wait1(p.s[0].cq, &e) == 0);
    }
    /* the notices arrive after the data: the counter, once 3, shows all */
    OK(fi_cntr_wait(cntr, 3, 30000));
    CHECK(fi_cntr_read(cntr) == 3 && region[0] == 100 && region[2] == 102);
    OK(fi_close(&mr->fid));
    for (int i = 0; i < 2; i++) {
        OK(fi_close(&p.s[i].ep->fid));
        OK(fi_close(&p.s[i].cq->fid));
    }
    OK(fi_close(&cntr->fid));
    OK(fi_close(&p.av->fid));
    OK(fi_close(&p.dom->fid));
    OK(fi_close(&p.fab->fid));
    fi_freeinfo(p.fi);
    fi_freeinfo(h2);
    fi_freeinfo(h);
    printf("event: 3 remote writes counted at the target\n");
    return 0;
}

static int test_srx(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG);
    h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
    struct fi_info *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    CHECK(fi->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT);
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *srx, *ep[3];
    struct fid_stx *stx;
    struct fid_cq *cq[3];
    fi_addr_t addr[3];
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, fi, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &av, NULL));
    OK(fi_srx_context(dom, fi->rx_attr, &srx, NULL));
    OK(fi_stx_context(dom, fi->tx_attr, &stx, NULL));
    for (int i = 0; i < 3; i++) {
        struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
        OK(fi_cq_open(dom, &ca, &cq[i], NULL));
        OK(fi_endpoint(dom, fi, &ep[i], NULL));
        OK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
        OK(fi_ep_bind(ep[i], &av->fid, 0));
        OK(fi_ep_bind(ep[i], &stx->fid, 0));
        if (i) OK(fi_ep_bind(ep[i], &srx->fid, 0)); /* endpoints 1 and 2 share it */
        OK(fi_enable(ep[i]));
        char name[64];
        size_t nl = sizeof(name);
        OK(fi_getname(&ep[i]->fid, name, &nl));
        CHECK(fi_av_insert(av, name, 1, &addr[i], 0, NULL) == 1);
    }
    CHECK(fi_close(&srx->fid) == -FI_EBUSY);
    /* one message to each sharer: both taken by the receives on srx, in order
     * of posting (the first arrival takes the first receive), each reported to
     * the CQ of the endpoint it arrived at; one sent before any receive waits */
    char rx[3][16] = {{0}}, tx[3][16] = {"to one", "to two", "early"};
    struct fi_cq_tagged_entry e;
    OK(fi_send(ep[0], tx[2], 16, NULL, addr[2], NULL));
    CHECK(cq_wait1(cq[0], &e) == 0);
    OK(fi_recv(srx, rx[2], 16, NULL, FI_ADDR_UNSPEC, rx[2]));
    CHECK(cq_wait1(cq[2], &e) == 0 && e.op_context == rx[2] && !strcmp(rx[2], "early"));
    for (int i = 0; i < 2; i++)
        OK(fi_recv(srx, rx[i], 16, NULL, FI_ADDR_UNSPEC, rx[i]));
    OK(fi_send(ep[0], tx[0], 16, NULL, addr[1], NULL));
    CHECK(cq_wait1(cq[0], &e) == 0);
    CHECK(cq_wait1(cq[1], &e) == 0 && e.op_context == rx[0] && !strcmp(rx[0], "to one"));
    OK(fi_send(ep[0], tx[1], 16, NULL, addr[2], NULL));
    CHECK(cq_wait1(cq[0], &e) == 0);
    CHECK(cq_wait1(cq[2], &e) == 0 && e.op_context == rx[1] && !strcmp(rx[1], "to two"));
    for (int i = 0; i < 3; i++) {
        OK(fi_close(&ep[i]->fid));
        OK(fi_close(&cq[i]->fid));
    }
    OK(fi_close(&srx->fid));
    OK(fi_close(&stx->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("srx: messages to two endpoints taken by the shared receives, one unexpected\n");
    return 0;
}

static int test_waitset(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG), *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_wait *ws;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_cq *cq;
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    struct fi_wait_attr wa = {.wait_obj = FI_WAIT_UNSPEC};
    OK(fi_wait_open(fab, &wa, &ws));
    OK(fi_domain(fab, fi, &dom, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_SET, .wait_set = ws};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &av, NULL));
    OK(fi_endpoint(dom, fi, &ep, NULL));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_enable(ep));
    char name[64], rx[8] = {0};
    size_t nl = sizeof(name);
    fi_addr_t self;
    OK(fi_getname(&ep->fid, name, &nl));
    CHECK(fi_av_insert(av, name, 1, &self, 0, NULL) == 1);
    CHECK(fi_wait(ws, 10) == -FI_ETIMEDOUT); /* nothing there */
    OK(fi_recv(ep, rx, sizeof(rx), NULL, FI_ADDR_UNSPEC, rx));
    OK(fi_send(ep, "ping", 5, NULL, self, NULL));
    OK(fi_wait(ws, 30000));
    struct fi_cq_tagged_entry e;
    CHECK(fi_cq_read(cq, &e, 1) == 1);
    CHECK(cq_wait1(cq, &e) == 0 && !strcmp(rx, "ping"));
    CHECK(fi_close(&ws->fid) == -FI_EBUSY); /* its CQ first */
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&ws->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("waitset: timed out empty, woke for completions\n");
    return 0;
}

/* The child: opens the parent's AV by name, read-only, and sends to the
 * fi_addr_t the parent's table holds for the parent's endpoint. */
static int sav_child(const char *avname, int ready_fd)
{
    char c;
    if (read(ready_fd, &c, 1) != 1) return 1;
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG | FI_SHARED_AV), *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_cq *cq;
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, fi, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .name = avname, .flags = FI_READ};
    OK(fi_av_open(dom, &aa, &av, NULL));
    CHECK(aa.map_addr != NULL);
    fi_addr_t parent = ((fi_addr_t *)aa.map_addr)[0];
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    OK(fi_endpoint(dom, fi, &ep, NULL));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_enable(ep));
    OK(fi_send(ep, "from the child", 15, NULL, parent, NULL));
    struct fi_cq_tagged_entry e;
    CHECK(cq_wait1(cq, &e) == 0);
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    return failures ? 1 : 0;
}

static int test_sav(void)
{
    char avname[64];
    snprintf(avname, sizeof(avname), "fi_cm_%d", (int)getpid());
    int p[2];
    OK(pipe(p) ? -1 : 0);
    pid_t pid = fork(); /* before any context: the child opens its own */
    if (pid == 0) _exit(sav_child(avname, p[0]));
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG | FI_SHARED_AV), *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    CHECK(fi->caps & FI_SHARED_AV);
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_cq *cq;
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, fi, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .name = avname};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    OK(fi_endpoint(dom, fi, &ep, NULL));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_enable(ep));
    char name[64], rx[16] = {0};
    size_t nl = sizeof(name);
    fi_addr_t self;
    OK(fi_getname(&ep->fid, name, &nl));
    CHECK(fi_av_insert(av, name, 1, &self, 0, NULL) == 1 && self == 0);
    OK(fi_recv(ep, rx, sizeof(rx), NULL, FI_ADDR_UNSPEC, rx));
    CHECK(write(p[1], "g", 1) == 1);
    struct fi_cq_tagged_entry e;
    CHECK(cq_wait1(cq, &e) == 0 && !strcmp(rx, "from the child"));
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("sav: the child sent through the parent's named AV\n");
    return 0;
}

/* FI_WAIT_FD across processes: the server sleeps in poll() on its EQ's
 * descriptor while a client process (started before, looking the server up
 * by port) connects; the request must wake it. */
static int test_msg_fd(int die)
{
    char port[8];
    snprintf(port, sizeof(port), "%d", 20000 + (int)((getpid() + 7) % 20000));
    pid_t pid = fork(); /* the client, before any context */
    if (pid == 0) {
        struct fi_info *h = hints_of(FI_EP_MSG, FI_MSG), *fi;
        OK(fi_getinfo(V, "127.0.0.1", port, 0, h, &fi)); /* waits for the server */
        struct fid_fabric *fab;
        struct fid_eq *eq;
        struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
        OK(fi_fabric(fi->fabric_attr, &fab, NULL));
        OK(fi_eq_open(fab, &ea, &eq, NULL));
        struct side c;
        side_open(fab, fi, eq, &c);
        OK(fi_connect(c.ep, fi->dest_addr, NULL, 0));
        uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
        uint32_t ev;
        CHECK(eq_wait(eq, &ev, buf, sizeof(buf)) > 0 && ev == FI_CONNECTED);
        struct fi_cq_tagged_entry e;
        OK(fi_send(c.ep, "over", 5, NULL, 0, NULL));
        CHECK(cq_wait1(c.cq, &e) == 0);
        if (die) raise(SIGKILL); /* connected, and gone without a word */
        CHECK(eq_wait(eq, &ev, buf, sizeof(buf)) > 0 && ev == FI_SHUTDOWN); /* the server's */
        side_close(&c);
        OK(fi_close(&eq->fid));
        OK(fi_close(&fab->fid));
        fi_freeinfo(fi);
        fi_freeinfo(h);
        _exit(failures ? 1 : 0);
    }
    struct fi_info *h = hints_of(FI_EP_MSG, FI_MSG), *fi;
    OK(fi_getinfo(V, NULL, port, FI_SOURCE, h, &fi));
    struct fid_fabric *fab;
    struct fid_eq *eq;
    struct fid_pep *pep;
    struct fi_eq_attr fa = {.wait_obj = FI_WAIT_FD};
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_eq_open(fab, &fa, &eq, NULL));
    OK(fi_passive_ep(fab, fi, &pep, NULL));
    OK(fi_pep_bind(pep, &eq->fid, 0));
    OK(fi_listen(pep)); /* publishes: the client's lookup ends, it connects */
    uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
    struct fi_eq_cm_entry *ent = (void *)buf;
    uint32_t ev;
    CHECK(eq_wait_fd(fab, eq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_CONNREQ);
    CHECK(fd_wakes >= 1); /* it slept, and the request woke it */
    struct side s;
    side_open(fab, ent->info, eq, &s);
    char rx[8] = {0};
    OK(fi_recv(s.ep, rx, sizeof(rx), NULL, 0, rx));
    OK(fi_accept(s.ep, NULL, 0));
    fi_freeinfo(ent->info);
    CHECK(eq_wait_fd(fab, eq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_CONNECTED);
    struct fi_cq_tagged_entry e;
    CHECK(cq_wait1(s.cq, &e) == 0 && !strcmp(rx, "over"));
    if (!die) OK(fi_shutdown(s.ep, 0));
    /* shut down by us, or the client died: FI_SHUTDOWN either way, once */
    CHECK(eq_wait_fd(fab, eq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_SHUTDOWN &&
          ent->fid == &s.ep->fid);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(die ? WIFSIGNALED(st) : WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (die) CHECK(fi_send(s.ep, "x", 1, NULL, 0, NULL) == -FI_ENOTCONN);
    side_close(&s);
    OK(fi_close(&pep->fid));
    OK(fi_close(&eq->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("msg_%s: the server slept on its EQ's descriptor; %d wake(s)\n", die ? "death" : "fd",
           fd_wakes);
    return 0;
}

/* Scalable endpoints: two of 4 contexts each; a message from transmit
 * context i to receive context i of the other (fi_rx_addr) lands in that
 * context's CQ and no other. */
#define NCTX 4
struct sep {
    struct fid_ep *sep, *tx[NCTX], *rx[NCTX];
    struct fid_cq *txcq[NCTX], *rxcq[NCTX];
};

static void sep_open(struct fid_domain *dom, struct fi_info *fi, struct fid_av *av, struct sep *e)
{
    OK(fi_scalable_ep(dom, fi, &e->sep, NULL));
    OK(fi_scalable_ep_bind(e->sep, &av->fid, 0));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    for (int i = 0; i < NCTX; i++) {
        OK(fi_tx_context(e->sep, i, NULL, &e->tx[i], NULL));
        OK(fi_cq_open(dom, &ca, &e->txcq[i], NULL));
        OK(fi_ep_bind(e->tx[i], &e->txcq[i]->fid, FI_SEND));
        OK(fi_enable(e->tx[i]));
    }
    for (int i = 0; i < NCTX; i++) {
        OK(fi_rx_context(e->sep, i, NULL, &e->rx[i], NULL));
        OK(fi_cq_open(dom, &ca, &e->rxcq[i], NULL));
        OK(fi_ep_bind(e->rx[i], &e->rxcq[i]->fid, FI_RECV));
        OK(fi_enable(e->rx[i]));
    }
    OK(fi_enable(e->sep));
}

static void sep_close(struct sep *e)
{
    CHECK(fi_close(&e->sep->fid) == -FI_EBUSY); /* contexts first */
    for (int i = 0; i < NCTX; i++) {
        OK(fi_close(&e->tx[i]->fid));
        OK(fi_close(&e->rx[i]->fid));
        OK(fi_close(&e->txcq[i]->fid));
        OK(fi_close(&e->rxcq[i]->fid));
    }
    OK(fi_close(&e->sep->fid));
}

static int test_sep(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG | FI_NAMED_RX_CTX), *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    CHECK(fi->domain_attr->max_ep_rx_ctx >= NCTX);
    fi->ep_attr->tx_ctx_cnt = NCTX;
    fi->ep_attr->rx_ctx_cnt = NCTX;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, fi, &dom, NULL));
    int bits = 0;
    while (NCTX >> ++bits)
        ;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .rx_ctx_bits = bits};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct sep a, b;
    sep_open(dom, fi, av, &a);
    sep_open(dom, fi, av, &b);
    char name[64];
    size_t nl = sizeof(name);
    fi_addr_t bb;
    OK(fi_getname(&b.sep->fid, name, &nl));
    CHECK(fi_av_insert(av, name, 1, &bb, 0, NULL) == 1);
    char rx[NCTX][16];
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < NCTX; i++)
        OK(fi_recv(b.rx[i], rx[i], 16, NULL, FI_ADDR_UNSPEC, rx[i]));
    for (int i = NCTX; i-- > 0;) { /* in reverse: each must find its own context */
        char tx[24]; /* 16 sent: room for any int keeps -Wformat-truncation (Debug, ASan) quiet */
        snprintf(tx, sizeof(tx), "to context %d", i);
        OK(fi_send(a.tx[i], tx, 16, NULL, fi_rx_addr(bb, i, bits), NULL));
        CHECK(cq_wait1(a.txcq[i], &e) == 0);
        CHECK(cq_wait1(b.rxcq[i], &e) == 0 && e.op_context == rx[i]);
        CHECK(!strcmp(rx[i], tx));
    }
    for (int i = 0; i < NCTX; i++) /* nothing anywhere else */
        CHECK(fi_cq_read(b.rxcq[i], &e, 1) == -FI_EAGAIN);
    sep_close(&a);
    sep_close(&b);
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("sep: %d receive contexts each reached by fi_rx_addr\n", NCTX);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    const char *t = argv[1];
    int rc = !strcmp(t, "msg")         ? test_msg()
             : !strcmp(t, "msg_fd")    ? test_msg_fd(0)
             : !strcmp(t, "msg_death") ? test_msg_fd(1)
             : !strcmp(t, "dgram")     ? test_dgram()
             : !strcmp(t, "event")     ? test_event()
             : !strcmp(t, "srx")       ? test_srx()
             : !strcmp(t, "waitset")   ? test_waitset()
             : !strcmp(t, "sav")       ? test_sav()
             : !strcmp(t, "sep")       ? test_sep()
                                       : 2;
    if (rc || failures) {
        fprintf(stderr, "fi_cm %s FAILED\n", t);
        return 1;
    }
    return 0;
}
