/*
 * fi_cm.c - the provider's endpoint types and contexts beyond RDM, in one
 * process (ulnet's shm loopback): what a user of each relies on.
 *   msg:    FI_EP_MSG. A passive endpoint found by host and port; a request
 *           rejected with data (FI_ECONNREFUSED and the data by
 *           fi_eq_readerr); one accepted (data both ways); messages in order
 *           both ways, eager and rendezvous, tagged, fi_write/fi_read and an
 *           atomic; FI_RMA_EVENT: the server's remote-write counter and
 *           counters bound to regions; fi_shutdown seen on both sides; sends
 *           after it refused.
 *           The server's EQ is FI_WAIT_FD, slept on with poll().
 *   dgram:  FI_EP_DGRAM: a datagram of max_msg_size arrives intact, a larger
 *           one is refused (-FI_EMSGSIZE).
 *   event:  FI_RMA_EVENT: the target's remote-write counter counts writes;
 *           counters bound to regions (fi_mr_bind) count those that target
 *           them, writes and reads, and no others.
 *   srx:    a shared receive context: two endpoints' messages taken by its
 *           receives, reported to each endpoint's CQ.
 *   waitset: fi_wait wakes for a completion, times out with none.
 *   sep:    scalable endpoints: receive context i reached by fi_rx_addr.
 *   trigger: FI_TRIGGER: RMA and an atomic fired when their counters reach
 *           the thresholds (one moved by the application, one by the
 *           provider), in order, with their triggered contexts; sends and
 *           tagged sends (eager, injected, rendezvous) likewise; an alias
 *           endpoint (fi_ep_alias) whose transmit default is FI_TRIGGER.
 *   sav:    FI_SHARED_AV: a child process opens the AV by name (FI_READ) and
 *           sends to the parent's fi_addr_t from map_addr.
 *   msg_fd: a client process connects while the server sleeps in poll() on
 *           its EQ's FI_WAIT_FD descriptor: the request wakes it.
 *   msg_death: the same, and the client dies connected: FI_SHUTDOWN.
 *   msg_sockaddr: FI_EP_MSG named by socket addresses (FI_SOCKADDR_IN), as
 *           fabtests' fi_msg_sockets uses them: fi_setname on a passive
 *           endpoint (port 0: one picked, which fi_getname gives; another
 *           family refused; once only; an address taken refused), a client
 *           endpoint taking over its pep's address (the hints' handle), a
 *           connect to an address nobody listens on refused by an event,
 *           then a connection: the accepted endpoint is at the listener's
 *           address, messages both ways checked.
 * Usage: fi_cm msg|msg_fd|msg_death|msg_sockaddr|dgram|event|srx|waitset|sav|sep|trigger
 */
#include "fi_common.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_trigger.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
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
    struct fid_cntr *cntr; /* a connected side's counter, if it asked for one */
};

/* A connected endpoint's side: a domain of its own, its EQ, and a counter
 * bound with cntr_flags unless they are 0. */
static void side_open(struct fid_fabric *fab, struct fi_info *fi, struct fid_eq *eq,
                      uint64_t cntr_flags, struct side *s)
{
    struct fi_cntr_attr na = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    OK(fi_domain(fab, fi, &s->dom, NULL));
    s->cntr = NULL;
    if (cntr_flags) OK(fi_cntr_open(s->dom, &na, &s->cntr, NULL));
    struct fic_ep_cfg cfg = {.eq = eq, .cntr = s->cntr, .cntr_flags = cntr_flags};
    fic_ep_open(s->dom, fi, &cfg, &s->ep, &s->cq);
}

static void side_close(struct side *s)
{
    fic_ep_close(s->ep, s->cq);
    if (s->cntr) OK(fi_close(&s->cntr->fid));
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

static void region_counters(struct fid_domain *dom, struct fid_ep *ep, struct fid_cq *cq,
                            fi_addr_t dest, struct fid_cntr *epc, uint64_t epc_n);

static int test_msg(void)
{
    char port[8];
    snprintf(port, sizeof(port), "%d", 20000 + (int)(getpid() % 20000));
    struct fi_info *h = hints_of(FI_EP_MSG, FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT),
                   *sfi, *cfi;
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
        side_open(fab, cfi, ceq, 0, &cli);
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
        side_open(fab, req, seq, FI_REMOTE_WRITE, &srv);
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
    /* FI_RMA_EVENT on the connection: the write above counted, then regions' counters */
    OK(fi_cntr_wait(srv.cntr, 1, 30000));
    region_counters(srv.dom, cli.ep, cli.cq, 0, srv.cntr, 1);
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

/* Two endpoints of one domain, each in the other's AV (RDM or DGRAM); with
 * rcntr, the second's remote writes counted by cntr. */
struct pair {
    struct fi_info *fi;
    struct fic_dom d;
    struct fid_cntr *cntr;
    struct side s[2];
    fi_addr_t addr[2];
};

static void pair_open(struct pair *p, struct fi_info *h, bool rcntr)
{
    OK(fi_getinfo(V, NULL, NULL, 0, h, &p->fi));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    fic_dom_open(&p->d, p->fi, &aa);
    struct fi_cntr_attr na = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    p->cntr = NULL;
    if (rcntr) OK(fi_cntr_open(p->d.dom, &na, &p->cntr, NULL));
    for (int i = 0; i < 2; i++) {
        struct fic_ep_cfg cfg = {.av = p->d.av};
        if (i == 1) cfg.cntr = p->cntr, cfg.cntr_flags = FI_REMOTE_WRITE;
        p->s[i].dom = p->d.dom;
        fic_ep_open(p->d.dom, p->fi, &cfg, &p->s[i].ep, &p->s[i].cq);
        p->addr[i] = fic_ep_insert(p->s[i].ep, p->d.av);
    }
}

static void pair_close(struct pair *p)
{
    for (int i = 0; i < 2; i++)
        if (p->s[i].ep) fic_ep_close(p->s[i].ep, p->s[i].cq); /* a test may close one first */
    if (p->cntr) OK(fi_close(&p->cntr->fid));
    fic_dom_close(&p->d);
    fi_freeinfo(p->fi);
}

static int test_dgram(void)
{
    struct fi_info *h = hints_of(FI_EP_DGRAM, FI_MSG);
    struct pair p;
    pair_open(&p, h, false);
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

/* Counters bound to regions (fi_mr_bind): from ep (its CQ cq) to dest,
 * writes and reads of region a move a's counters and the target endpoint's
 * remote-write counter epc (at epc_n before), a write to region b (no
 * counter) moves only epc; rebinding a's write counter to another replaces
 * it; a bound counter cannot close. */
static void region_counters(struct fid_domain *dom, struct fid_ep *ep, struct fid_cq *cq,
                            fi_addr_t dest, struct fid_cntr *epc, uint64_t epc_n)
{
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    struct fid_cntr *wr, *rd, *wr2;
    OK(fi_cntr_open(dom, &ca, &wr, NULL));
    OK(fi_cntr_open(dom, &ca, &rd, NULL));
    OK(fi_cntr_open(dom, &ca, &wr2, NULL));
    uint64_t a[16] = {0}, b[16] = {0}, v[16], back[16];
    struct fid_mr *ma, *mb;
    uint64_t acc = FI_REMOTE_WRITE | FI_REMOTE_READ;
    OK(fi_mr_reg(dom, a, sizeof(a), acc, 0, 0, FI_RMA_EVENT, &ma, NULL));
    OK(fi_mr_reg(dom, b, sizeof(b), acc, 0, 0, 0, &mb, NULL));
    CHECK(fi_mr_bind(ma, &wr->fid, FI_SEND) == -FI_EBADFLAGS);
    OK(fi_mr_bind(ma, &wr->fid, FI_REMOTE_WRITE));
    OK(fi_mr_bind(ma, &rd->fid, FI_REMOTE_READ));
    OK(fi_mr_enable(ma));
    CHECK(fi_close(&wr->fid) == -FI_EBUSY);
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < 16; i++)
        v[i] = 7000 + (uint64_t)i;
    for (int i = 0; i < 4; i++) { /* 4 writes to a, 1 to b, 2 reads of a */
        OK(fi_write(ep, &v[i], 8, NULL, dest, (uint64_t)i * 8, fi_mr_key(ma), NULL));
        CHECK(cq_wait1(cq, &e) == 0);
    }
    OK(fi_write(ep, v, 64, NULL, dest, 0, fi_mr_key(mb), NULL));
    CHECK(cq_wait1(cq, &e) == 0);
    for (int i = 0; i < 2; i++) {
        OK(fi_read(ep, back, 32, NULL, dest, 0, fi_mr_key(ma), NULL));
        CHECK(cq_wait1(cq, &e) == 0);
    }
    OK(fi_cntr_wait(epc, epc_n + 5, 30000)); /* every notice here: 4 + 1 writes */
    OK(fi_cntr_wait(rd, 2, 30000));
    CHECK(fi_cntr_read(wr) == 4 && fi_cntr_read(rd) == 2 && fi_cntr_read(epc) == epc_n + 5);
    CHECK(!memcmp(a, v, 32) && !memcmp(b, v, 64) && !memcmp(back, v, 32));
    /* rebound: the next write moves the new counter only */
    OK(fi_mr_bind(ma, &wr2->fid, FI_REMOTE_WRITE));
    OK(fi_write(ep, &v[5], 8, NULL, dest, 40, fi_mr_key(ma), NULL));
    CHECK(cq_wait1(cq, &e) == 0);
    OK(fi_cntr_wait(wr2, 1, 30000));
    CHECK(fi_cntr_read(wr) == 4 && a[5] == v[5]);
    OK(fi_close(&wr->fid)); /* no longer bound */
    OK(fi_close(&ma->fid));
    OK(fi_close(&mb->fid));
    OK(fi_close(&rd->fid));
    OK(fi_close(&wr2->fid));
}

static int test_event(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG | FI_RMA | FI_RMA_EVENT);
    struct pair p;
    pair_open(&p, h, true);
    CHECK(p.fi->caps & FI_RMA_EVENT);
    struct fid_cntr *cntr = p.cntr;
    uint64_t region[64] = {0}, src[64];
    struct fid_mr *mr;
    OK(fi_mr_reg(p.d.dom, region, sizeof(region), FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < 3; i++) {
        src[i] = 100 + (uint64_t)i;
        OK(fi_write(p.s[0].ep, &src[i], 8, NULL, p.addr[1], (uint64_t)i * 8, fi_mr_key(mr), NULL));
        CHECK(cq_wait1(p.s[0].cq, &e) == 0);
    }
    /* the notices arrive after the data: the counter, once 3, shows all */
    OK(fi_cntr_wait(cntr, 3, 30000));
    CHECK(fi_cntr_read(cntr) == 3 && region[0] == 100 && region[2] == 102);
    region_counters(p.d.dom, p.s[0].ep, p.s[0].cq, p.addr[1], cntr, 3);
    OK(fi_close(&mr->fid));
    pair_close(&p);
    fi_freeinfo(h);
    printf("event: remote writes counted at the target, by endpoint and by region\n");
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
    struct fic_dom d;
    struct fid_ep *srx, *ep[3];
    struct fid_stx *stx;
    struct fid_cq *cq[3];
    fi_addr_t addr[3];
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    fic_dom_open(&d, fi, &aa);
    OK(fi_srx_context(d.dom, fi->rx_attr, &srx, NULL));
    OK(fi_stx_context(d.dom, fi->tx_attr, &stx, NULL));
    for (int i = 0; i < 3; i++) {
        /* endpoints 1 and 2 share the receive context */
        struct fic_ep_cfg cfg = {.av = d.av, .shared = {&stx->fid, i ? &srx->fid : NULL}};
        fic_ep_open(d.dom, fi, &cfg, &ep[i], &cq[i]);
        addr[i] = fic_ep_insert(ep[i], d.av);
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
    for (int i = 0; i < 3; i++)
        fic_ep_close(ep[i], cq[i]);
    OK(fi_close(&srx->fid));
    OK(fi_close(&stx->fid));
    fic_dom_close(&d);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("srx: messages to two endpoints taken by the shared receives, one unexpected\n");
    return 0;
}

static int test_waitset(void)
{
    struct fi_info *h = hints_of(FI_EP_RDM, FI_MSG), *fi;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    struct fic_dom d;
    struct fid_wait *ws;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    fic_dom_open(&d, fi, &aa);
    struct fi_wait_attr wa = {.wait_obj = FI_WAIT_UNSPEC};
    OK(fi_wait_open(d.fab, &wa, &ws));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_SET, .wait_set = ws};
    struct fic_ep_cfg cfg = {.cq = &ca, .av = d.av};
    fic_ep_open(d.dom, fi, &cfg, &ep, &cq);
    char rx[8] = {0};
    fi_addr_t self = fic_ep_insert(ep, d.av);
    CHECK(fi_wait(ws, 10) == -FI_ETIMEDOUT); /* nothing there */
    OK(fi_recv(ep, rx, sizeof(rx), NULL, FI_ADDR_UNSPEC, rx));
    OK(fi_send(ep, "ping", 5, NULL, self, NULL));
    OK(fi_wait(ws, 30000));
    struct fi_cq_tagged_entry e;
    CHECK(fi_cq_read(cq, &e, 1) == 1);
    CHECK(cq_wait1(cq, &e) == 0 && !strcmp(rx, "ping"));
    CHECK(fi_close(&ws->fid) == -FI_EBUSY); /* its CQ first */
    fic_ep_close(ep, cq);
    OK(fi_close(&ws->fid));
    fic_dom_close(&d);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("waitset: timed out empty, woke for completions\n");
    return 0;
}

/* FI_TRIGGER: RMA and atomics parked until their counter reaches the
 * threshold, then posted in order, completing with the triggered context;
 * a counter the application moves, and one the provider moves (the
 * target's remote writes); messages refused; an endpoint closed with one
 * still parked. */
/* Triggered messages: a send (FI_INJECT: its buffer reused at once), a
 * tagged send and a rendezvous-sized tagged send wait for tc's next count;
 * a plain send made meanwhile arrives first; then all three arrive, data
 * intact, each completing with its triggered context. */
static void trigger_sends(struct pair *p, struct fid_cntr *tc)
{
    const size_t big = 1 << 20;
    uint64_t at = fi_cntr_read(tc) + 1;
    struct fi_triggered_context ts[3];
    for (int i = 0; i < 3; i++) {
        ts[i] = (struct fi_triggered_context){.event_type = FI_TRIGGER_THRESHOLD};
        ts[i].trigger.threshold.cntr = tc, ts[i].trigger.threshold.threshold = at;
    }
    char rplain[16] = {0}, rsend[16] = {0}, rtag[16] = {0}, msg[16] = "triggered";
    char tagmsg[16] = "triggered tag", plain[16] = "plain";
    uint8_t *tx = malloc(big), *rx = calloc(1, big);
    fill(tx, big, 4);
    struct fid_ep *a = p->s[0].ep, *b = p->s[1].ep;
    OK(fi_recv(b, rplain, 16, NULL, FI_ADDR_UNSPEC, rplain));
    OK(fi_recv(b, rsend, 16, NULL, FI_ADDR_UNSPEC, rsend));
    OK(fi_trecv(b, rtag, 16, NULL, FI_ADDR_UNSPEC, 7, 0, rtag));
    OK(fi_trecv(b, rx, big, NULL, FI_ADDR_UNSPEC, 8, 0, rx));
    struct iovec im = {msg, 16}, it = {tagmsg, 16}, ib = {tx, big};
    struct fi_msg sm = {.msg_iov = &im, .iov_count = 1, .addr = p->addr[1], .context = &ts[0]};
    OK(fi_sendmsg(a, &sm, FI_TRIGGER | FI_INJECT));
    memset(msg, 'x', sizeof(msg)); /* injected: the copy goes */
    struct fi_msg_tagged tm = {
        .msg_iov = &it, .iov_count = 1, .addr = p->addr[1], .tag = 7, .context = &ts[1]};
    OK(fi_tsendmsg(a, &tm, FI_TRIGGER));
    tm.msg_iov = &ib, tm.tag = 8, tm.context = &ts[2];
    OK(fi_tsendmsg(a, &tm, FI_TRIGGER));
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < 100; i++) /* nothing goes below the threshold */
        CHECK(fi_cq_read(p->s[1].cq, &e, 1) == -FI_EAGAIN);
    OK(fi_send(a, plain, 16, NULL, p->addr[1], plain));
    CHECK(cq_wait1(p->s[1].cq, &e) == 0 && e.op_context == rplain && !strcmp(rplain, "plain"));
    CHECK(cq_wait1(p->s[0].cq, &e) == 0 && e.op_context == plain);
    CHECK(fi_cq_read(p->s[1].cq, &e, 1) == -FI_EAGAIN);
    OK(fi_cntr_add(tc, 1));
    int rx_seen = 0, tx_seen = 0;
    for (int i = 0; i < 3; i++) {
        CHECK(cq_wait1(p->s[1].cq, &e) == 0);
        rx_seen |= e.op_context == rsend  ? 1
                   : e.op_context == rtag ? 2
                   : e.op_context == rx   ? 4
                                          : 8;
        CHECK(cq_wait1(p->s[0].cq, &e) == 0);
        tx_seen |= e.op_context == &ts[0]   ? 1
                   : e.op_context == &ts[1] ? 2
                   : e.op_context == &ts[2] ? 4
                                            : 8;
    }
    CHECK(rx_seen == 7 && tx_seen == 7);
    CHECK(!strcmp(rsend, "triggered") && !strcmp(rtag, "triggered tag") && same(rx, big, 4));
    free(tx);
    free(rx);
}

static int test_trigger(void)
{
    struct fi_info *h =
        hints_of(FI_EP_RDM, FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_TRIGGER);
    struct pair p;
    pair_open(&p, h, true); /* p.cntr: side 1's remote writes */
    CHECK(p.fi->caps & FI_TRIGGER);
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    struct fid_cntr *tc;
    OK(fi_cntr_open(p.d.dom, &ca, &tc, NULL));
    uint64_t region[4] = {0}, v[4] = {11, 22, 33, 5};
    struct fid_mr *mr;
    OK(fi_mr_reg(p.d.dom, region, sizeof(region), FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr,
                 NULL));
    uint64_t key = fi_mr_key(mr);
    struct fi_triggered_context t[5];
    for (int i = 0; i < 5; i++)
        t[i] = (struct fi_triggered_context){.event_type = FI_TRIGGER_THRESHOLD};
    t[0].trigger.threshold.cntr = tc, t[0].trigger.threshold.threshold = 2;
    t[1].trigger.threshold.cntr = tc, t[1].trigger.threshold.threshold = 1;
    t[2].trigger.threshold.cntr = tc, t[2].trigger.threshold.threshold = 2;
    t[3].trigger.threshold.cntr = p.cntr, t[3].trigger.threshold.threshold = 1;
    t[4].trigger.threshold.cntr = tc, t[4].trigger.threshold.threshold = 100;
    struct fi_rma_iov r[3] = {{0, 8, key}, {8, 8, key}, {16, 8, key}};
    struct iovec iv[3] = {{&v[0], 8}, {&v[1], 8}, {&v[2], 8}};
    struct fi_msg_rma m0 = {.msg_iov = &iv[0],
                            .iov_count = 1,
                            .addr = p.addr[1],
                            .rma_iov = &r[0],
                            .rma_iov_count = 1,
                            .context = &t[0]};
    struct fi_msg_rma m1 = m0, m3 = m0;
    m1.msg_iov = &iv[1], m1.rma_iov = &r[1], m1.context = &t[1];
    m3.msg_iov = &iv[2], m3.rma_iov = &r[2], m3.context = &t[3];
    OK(fi_writemsg(p.s[0].ep, &m0, FI_TRIGGER));
    OK(fi_writemsg(p.s[0].ep, &m1, FI_TRIGGER));
    struct fi_ioc ioc = {&v[3], 1};
    struct fi_rma_ioc rioc = {24, 1, key};
    struct fi_msg_atomic am = {.msg_iov = &ioc,
                               .iov_count = 1,
                               .addr = p.addr[1],
                               .rma_iov = &rioc,
                               .rma_iov_count = 1,
                               .datatype = FI_UINT64,
                               .op = FI_SUM,
                               .context = &t[2]};
    OK(fi_atomicmsg(p.s[0].ep, &am, FI_TRIGGER));
    OK(fi_writemsg(p.s[0].ep, &m3, FI_TRIGGER)); /* on side 1's remote-write counter */
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < 100; i++) /* progress: nothing fires below its threshold */
        CHECK(fi_cq_read(p.s[0].cq, &e, 1) == -FI_EAGAIN);
    CHECK(!region[0] && !region[1] && !region[2] && !region[3]);
    OK(fi_cntr_add(tc, 1)); /* t[1] */
    CHECK(cq_wait1(p.s[0].cq, &e) == 0 && e.op_context == &t[1] && region[1] == 22);
    CHECK(!region[0] && !region[3]);
    /* t[1]'s write moved side 1's remote-write counter: t[3] fires too */
    CHECK(cq_wait1(p.s[0].cq, &e) == 0 && e.op_context == &t[3] && region[2] == 33);
    OK(fi_cntr_add(tc, 1)); /* t[0] and t[2] (posted in that order; they complete in either) */
    void *done[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CHECK(cq_wait1(p.s[0].cq, &e) == 0 && (done[i] = e.op_context));
    CHECK((done[0] == &t[0] && done[1] == &t[2]) || (done[0] == &t[2] && done[1] == &t[0]));
    CHECK(region[0] == 11 && region[3] == 5);
    trigger_sends(&p, tc);
    /* refused: another event type */
    struct fi_triggered_context other = {.event_type = FI_TRIGGER_XPU};
    m0.context = &other;
    CHECK(fi_writemsg(p.s[0].ep, &m0, FI_TRIGGER) == -FI_ENOSYS);
    /* an alias whose transmit default is FI_TRIGGER (fi_ep_alias): its plain
     * fi_write is triggered, the endpoint's own is not */
    struct fid_ep *alias = NULL;
    OK(fi_ep_alias(p.s[0].ep, &alias, FI_TRANSMIT | FI_TRIGGER));
    uint64_t fl = FI_TRANSMIT;
    OK(fi_control(&alias->fid, FI_GETOPSFLAG, &fl));
    CHECK(fl == FI_TRIGGER);
    struct fi_triggered_context ta = {.event_type = FI_TRIGGER_THRESHOLD};
    ta.trigger.threshold.cntr = tc, ta.trigger.threshold.threshold = fi_cntr_read(tc) + 1;
    uint64_t nine = 9, eight = 8;
    OK(fi_write(alias, &nine, 8, NULL, p.addr[1], 0, key, &ta));
    OK(fi_write(p.s[0].ep, &eight, 8, NULL, p.addr[1], 8, key, &e));
    CHECK(cq_wait1(p.s[0].cq, &e) == 0 && region[1] == 8 && region[0] == 11);
    CHECK(fi_close(&p.s[0].ep->fid) == -FI_EBUSY); /* its alias first */
    OK(fi_cntr_add(tc, 1));
    CHECK(cq_wait1(p.s[0].cq, &e) == 0 && e.op_context == &ta && region[0] == 9);
    OK(fi_close(&alias->fid));
    /* one left parked: its counter stays bound until the endpoint closes */
    m0.context = &t[4];
    OK(fi_writemsg(p.s[0].ep, &m0, FI_TRIGGER));
    CHECK(fi_close(&tc->fid) == -FI_EBUSY);
    fic_ep_close(p.s[0].ep, p.s[0].cq);
    p.s[0].ep = NULL;
    OK(fi_close(&tc->fid));
    OK(fi_close(&mr->fid));
    pair_close(&p);
    fi_freeinfo(h);
    printf("trigger: RMA and an atomic fired at their thresholds\n");
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
    struct fic_dom d;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .name = avname, .flags = FI_READ};
    fic_dom_open(&d, fi, &aa);
    CHECK(aa.map_addr != NULL);
    fi_addr_t parent = ((fi_addr_t *)aa.map_addr)[0];
    struct fic_ep_cfg cfg = {.av = d.av};
    fic_ep_open(d.dom, fi, &cfg, &ep, &cq);
    OK(fi_send(ep, "from the child", 15, NULL, parent, NULL));
    struct fi_cq_tagged_entry e;
    CHECK(cq_wait1(cq, &e) == 0);
    fic_ep_close(ep, cq);
    fic_dom_close(&d);
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
    struct fic_dom d;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .name = avname};
    fic_dom_open(&d, fi, &aa);
    struct fic_ep_cfg cfg = {.av = d.av};
    fic_ep_open(d.dom, fi, &cfg, &ep, &cq);
    char rx[16] = {0};
    CHECK(fic_ep_insert(ep, d.av) == 0);
    OK(fi_recv(ep, rx, sizeof(rx), NULL, FI_ADDR_UNSPEC, rx));
    CHECK(write(p[1], "g", 1) == 1);
    struct fi_cq_tagged_entry e;
    CHECK(cq_wait1(cq, &e) == 0 && !strcmp(rx, "from the child"));
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    fic_ep_close(ep, cq);
    fic_dom_close(&d);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    printf("sav: the child sent through the parent's named AV\n");
    return 0;
}

/* FI_WAIT_FD across processes: the server sleeps in poll() on its EQ's
 * descriptor while a client process (started before, looking the server up
 * by port) connects; the request must wake it. */
/* A loopback port nothing listens on: one the system gave and took back. */
static uint16_t free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, l) &&
          !getsockname(fd, (struct sockaddr *)&a, &l));
    close(fd);
    return a.sin_port;
}

static int test_msg_sockaddr(void)
{
    struct fi_info *h = hints_of(FI_EP_MSG, FI_MSG | FI_TAGGED), *sfi, *cfi;
    h->addr_format = FI_SOCKADDR_IN;
    OK(fi_getinfo(V, "127.0.0.1", NULL, FI_SOURCE, h, &sfi));
    CHECK(sfi->ep_attr->type == FI_EP_MSG && sfi->addr_format == FI_SOCKADDR_IN);
    struct fid_fabric *fab;
    struct fid_eq *seq, *ceq;
    struct fid_pep *pep, *other, *cpep;
    struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
    OK(fi_fabric(sfi->fabric_attr, &fab, NULL));
    OK(fi_eq_open(fab, &ea, &seq, NULL));
    OK(fi_eq_open(fab, &ea, &ceq, NULL));
    free(sfi->src_addr); /* as fi_msg_sockets: no source, fi_setname gives it */
    sfi->src_addr = NULL;
    sfi->src_addrlen = 0;
    OK(fi_passive_ep(fab, sfi, &pep, NULL));
    struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    CHECK(fi_setname(&pep->fid, &six, sizeof(six)) == -FI_EINVAL);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in bound = {0}, got = {0};
    size_t bl = sizeof(bound), gl = sizeof(got);
    OK(fi_setname(&pep->fid, &any, sizeof(any)));
    OK(fi_getname(&pep->fid, &bound, &bl));
    CHECK(bl == sizeof(bound) && bound.sin_family == AF_INET && bound.sin_port != 0 &&
          bound.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(fi_setname(&pep->fid, &any, sizeof(any)) == -FI_EOPBADSTATE);
    OK(fi_pep_bind(pep, &seq->fid, 0));
    OK(fi_listen(pep));
    OK(fi_passive_ep(fab, sfi, &other, NULL)); /* the same address twice: refused */
    CHECK(fi_setname(&other->fid, &bound, sizeof(bound)) == -FI_EADDRINUSE);
    OK(fi_close(&other->fid));

    /* the client: a pep of its own gives its endpoint's address (fi_endpoint(3)) */
    struct sockaddr_in cbound = {0};
    size_t cl = sizeof(cbound);
    OK(fi_passive_ep(fab, sfi, &cpep, NULL));
    OK(fi_setname(&cpep->fid, &any, sizeof(any)));
    OK(fi_getname(&cpep->fid, &cbound, &cl));
    char port[8];
    snprintf(port, sizeof(port), "%u", ntohs(bound.sin_port));
    h->handle = &cpep->fid;
    OK(fi_getinfo(V, "127.0.0.1", port, 0, h, &cfi));
    h->handle = NULL;
    CHECK(cfi->handle == &cpep->fid && cfi->dest_addrlen == sizeof(bound) &&
          !memcmp(cfi->dest_addr, &bound, sizeof(bound)));

    uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    struct fi_eq_cm_entry *ent = (void *)buf;
    uint32_t ev;
    struct side cli, srv;
    side_open(fab, cfi, ceq, 0, &cli);
    OK(fi_close(&cpep->fid)); /* its address is the endpoint's now */
    OK(fi_getname(&cli.ep->fid, &got, &gl));
    CHECK(gl == sizeof(got) && !memcmp(&got, &cbound, sizeof(got)));
    /* nobody at an address: refused, as an event */
    struct sockaddr_in none = any;
    none.sin_port = free_port();
    OK(fi_connect(cli.ep, &none, NULL, 0));
    CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == -FI_EAVAIL);
    struct fi_eq_err_entry err = {0};
    CHECK(fi_eq_readerr(ceq, &err, 0) == sizeof(err));
    CHECK(err.err == FI_ECONNREFUSED && err.fid == &cli.ep->fid);
    side_close(&cli);

    cfi->handle = NULL; /* that pep is closed: the next endpoint has no address of its own */
    side_open(fab, cfi, ceq, 0, &cli);
    OK(fi_connect(cli.ep, cfi->dest_addr, "hi", 3));
    CHECK(eq_wait(seq, &ev, buf, sizeof(buf)) == (ssize_t)(sizeof(*ent) + 3));
    CHECK(ev == FI_CONNREQ && ent->fid == &pep->fid && !strcmp((char *)ent->data, "hi"));
    struct fi_info *req = ent->info;
    CHECK(req->addr_format == FI_SOCKADDR_IN && req->src_addrlen == sizeof(bound) &&
          !memcmp(req->src_addr, &bound, sizeof(bound)));
    side_open(fab, req, seq, 0, &srv);
    OK(fi_accept(srv.ep, NULL, 0));
    fi_freeinfo(req);
    CHECK(eq_wait(seq, &ev, buf, sizeof(buf)) == sizeof(*ent));
    CHECK(ev == FI_CONNECTED && ent->fid == &srv.ep->fid);
    CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == sizeof(*ent));
    CHECK(ev == FI_CONNECTED && ent->fid == &cli.ep->fid);
    /* the accepted endpoint is found at its listener's address */
    gl = sizeof(got);
    OK(fi_getname(&srv.ep->fid, &got, &gl));
    CHECK(gl == sizeof(got) && !memcmp(&got, &bound, sizeof(got)));
    size_t sizes[] = {0, 1, 4000, 1 << 20};
    for (unsigned i = 0; i < 4; i++) {
        xfer(&cli, &srv, sizes[i], i, 0);
        xfer(&srv, &cli, sizes[i], i + 10, 1);
    }
    OK(fi_shutdown(cli.ep, 0));
    CHECK(eq_wait(ceq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_SHUTDOWN);
    CHECK(eq_wait(seq, &ev, buf, sizeof(buf)) == sizeof(*ent) && ev == FI_SHUTDOWN);
    side_close(&cli);
    side_close(&srv);
    OK(fi_close(&pep->fid));
    OK(fi_close(&seq->fid));
    OK(fi_close(&ceq->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(cfi);
    fi_freeinfo(sfi);
    fi_freeinfo(h);
    printf("msg_sockaddr: listener at 127.0.0.1:%s, connected, data checked both ways\n", port);
    return 0;
}

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
        side_open(fab, fi, eq, 0, &c);
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
    side_open(fab, ent->info, eq, 0, &s);
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
    int rc = !strcmp(t, "msg")            ? test_msg()
             : !strcmp(t, "msg_fd")       ? test_msg_fd(0)
             : !strcmp(t, "msg_death")    ? test_msg_fd(1)
             : !strcmp(t, "msg_sockaddr") ? test_msg_sockaddr()
             : !strcmp(t, "dgram")        ? test_dgram()
             : !strcmp(t, "event")        ? test_event()
             : !strcmp(t, "srx")          ? test_srx()
             : !strcmp(t, "waitset")      ? test_waitset()
             : !strcmp(t, "sav")          ? test_sav()
             : !strcmp(t, "sep")          ? test_sep()
             : !strcmp(t, "trigger")      ? test_trigger()
                                          : 2;
    if (rc || failures) {
        fprintf(stderr, "fi_cm %s FAILED\n", t);
        return 1;
    }
    return 0;
}
