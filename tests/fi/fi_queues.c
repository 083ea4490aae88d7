/*
 * fi_queues - completion and event queues field by field, as fi_cq(3) and
 * fi_eq(3) define them:
 *  - FI_CQ_FORMAT_CONTEXT, _MSG and _DATA: each entry of its own size (a read
 *    of several writes no byte past the entries it returns), op_context,
 *    flags (FI_SEND/FI_RECV with FI_MSG/FI_TAGGED, FI_REMOTE_CQ_DATA), len
 *    (receives), buf (FI_MULTI_RECV receives only, NULL otherwise), data (with
 *    FI_REMOTE_CQ_DATA); an error entry (truncation) behind -FI_EAVAIL;
 *  - fi_cq_sreadfrom: the source of each receive, -FI_EAGAIN after the timeout
 *    with nothing there, at once after fi_cq_signal, -FI_EAVAIL for an error;
 *    fi_cq_sread/sreadfrom/signal refused (-FI_EINVAL) on FI_WAIT_NONE;
 *    fi_cq_signal from another thread waking a sleeper in fi_cq_sread
 *    (FI_THREAD_DOMAIN, timeout 10 s and infinite) and an FI_WAIT_FD
 *    descriptor;
 *  - the EQ: empty reads (-FI_EAGAIN from fi_eq_read, fi_eq_readerr, and
 *    fi_eq_sread after its timeout), a user event written and read back
 *    whole (FI_PEEK leaves it, a short buffer is refused and leaves it), an
 *    EQ bound to an endpoint does not close (-FI_EBUSY), an AV cannot be
 *    bound to one (FI_EVENT AVs are not offered: -FI_ENOSYS).
 * One process, no job: each endpoint sends to itself.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_queues
 */
#include "fi_common.h"

#include <poll.h>
#include <pthread.h>
#include <rdma/fi_eq.h>
#include <stdbool.h>

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;

struct ep {
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t self;
};

/* An endpoint whose CQ (both directions) has the given format and wait
 * object, with its own name in the AV. */
static struct ep ep_open(enum fi_cq_format format, enum fi_wait_obj wait)
{
    struct ep e;
    struct fi_cq_attr ca = {.format = format, .wait_obj = wait};
    OK(fi_cq_open(dom, &ca, &e.cq, NULL));
    OK(fi_endpoint(dom, info, &e.ep, NULL));
    OK(fi_ep_bind(e.ep, &av->fid, 0));
    OK(fi_ep_bind(e.ep, &e.cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(e.ep));
    char name[256];
    size_t nl = sizeof(name);
    OK(fi_getname(&e.ep->fid, name, &nl));
    OK(fi_av_insert(av, name, 1, &e.self, 0, NULL));
    return e;
}

static void ep_close(struct ep *e)
{
    OK(fi_close(&e->ep->fid));
    OK(fi_close(&e->cq->fid));
}

/* Read `want` entries of `size` bytes into out, at most 4 per call into a
 * scratch array: every call must leave the entries after those it returns
 * as they were (each entry is of its format's size). */
static void read_entries(struct fid_cq *cq, void *out, size_t size, int want)
{
    uint8_t scratch[4 * 64];
    double end = fic_now() + 10;
    for (int got = 0; got < want;) {
        memset(scratch, 0xa5, sizeof(scratch));
        ssize_t n = fi_cq_read(cq, scratch, (size_t)(want - got < 4 ? want - got : 4));
        if (n == -FI_EAGAIN) {
            if (fic_now() > end) {
                fprintf(stderr, "%d of %d completions in 10 s\n", got, want);
                exit(1);
            }
            continue;
        }
        OK(n);
        size_t untouched = 0;
        for (size_t i = (size_t)n * size; i < sizeof(scratch); i++)
            untouched += scratch[i] == 0xa5;
        CHECK(untouched == sizeof(scratch) - (size_t)n * size);
        memcpy((uint8_t *)out + (size_t)got * size, scratch, (size_t)n * size);
        got += (int)n;
    }
}

static void fill(uint8_t *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(seed + i);
}
static bool same(const uint8_t *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)(seed + i)) return false;
    return true;
}

/* FI_CQ_FORMAT_CONTEXT: the context alone. */
static void test_context(void)
{
    struct ep e = ep_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE);
    uint8_t s[32], r[32];
    struct fi_context cs, cr;
    fill(s, sizeof(s), 1);
    OK(fi_recv(e.ep, r, sizeof(r), NULL, e.self, &cr));
    OK(fi_send(e.ep, s, sizeof(s), NULL, e.self, &cs));
    struct fi_cq_entry got[2];
    read_entries(e.cq, got, sizeof(got[0]), 2);
    CHECK((got[0].op_context == &cs && got[1].op_context == &cr) ||
          (got[0].op_context == &cr && got[1].op_context == &cs));
    CHECK(same(r, sizeof(r), 1));
    ep_close(&e);
}

/* The entry of ctx among n. */
#define FIND(arr, n, ctx, out)                                                                     \
    do {                                                                                           \
        out = NULL;                                                                                \
        for (int i_ = 0; i_ < (n); i_++)                                                           \
            if ((arr)[i_].op_context == (ctx)) out = &(arr)[i_];                                   \
        CHECK(out != NULL);                                                                        \
    } while (0)

/* FI_CQ_FORMAT_MSG: op_context, flags, len. */
static void test_msg(void)
{
    struct ep e = ep_open(FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
    uint8_t s[100], r[100];
    struct fi_context cs[2], cr[2];
    fill(s, sizeof(s), 2);
    OK(fi_recv(e.ep, r, sizeof(r), NULL, e.self, &cr[0]));
    OK(fi_send(e.ep, s, 40, NULL, e.self, &cs[0]));
    OK(fi_trecv(e.ep, r + 50, 50, NULL, e.self, 0x77, 0, &cr[1]));
    OK(fi_tsend(e.ep, s, 30, NULL, e.self, 0x77, &cs[1]));
    struct fi_cq_msg_entry got[4], *x;
    read_entries(e.cq, got, sizeof(got[0]), 4);
    FIND(got, 4, &cs[0], x);
    CHECK(x && x->flags == (FI_SEND | FI_MSG));
    FIND(got, 4, &cs[1], x);
    CHECK(x && x->flags == (FI_SEND | FI_TAGGED));
    FIND(got, 4, &cr[0], x);
    CHECK(x && x->flags == (FI_RECV | FI_MSG) && x->len == 40);
    FIND(got, 4, &cr[1], x);
    CHECK(x && x->flags == (FI_RECV | FI_TAGGED) && x->len == 30);
    CHECK(same(r, 40, 2) && same(r + 50, 30, 2));

    /* truncated: an error entry behind -FI_EAVAIL, the send completes */
    OK(fi_recv(e.ep, r, 10, NULL, e.self, &cr[0]));
    OK(fi_send(e.ep, s, 40, NULL, e.self, &cs[0]));
    bool err = false, sent = false;
    double end = fic_now() + 10;
    while ((!err || !sent) && fic_now() < end) {
        struct fi_cq_msg_entry m;
        ssize_t n = fi_cq_read(e.cq, &m, 1);
        if (n == 1) {
            CHECK(m.op_context == &cs[0] && m.flags == (FI_SEND | FI_MSG));
            sent = true;
        } else if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            OK(fi_cq_readerr(e.cq, &ee, 0));
            CHECK(ee.op_context == &cr[0] && ee.err == FI_ETRUNC && ee.olen == 30 && ee.len == 10 &&
                  ee.flags == (FI_RECV | FI_MSG));
            err = true;
        } else {
            CHECK(n == -FI_EAGAIN);
        }
    }
    CHECK(err && sent);
    struct fi_cq_err_entry ee;
    CHECK(fi_cq_readerr(e.cq, &ee, 0) == -FI_EAGAIN);
    ep_close(&e);
}

/* FI_CQ_FORMAT_DATA: and buf (FI_MULTI_RECV), data (FI_REMOTE_CQ_DATA). */
static void test_data(void)
{
    struct ep e = ep_open(FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    uint8_t s[101], r[100];
    struct fi_context cs[2], cr[2];
    fill(s, sizeof(s), 3);
    OK(fi_recv(e.ep, r, sizeof(r), NULL, e.self, &cr[0]));
    OK(fi_senddata(e.ep, s, 24, NULL, 0x1234abcd5678ull, e.self, &cs[0]));
    OK(fi_trecv(e.ep, r + 50, 50, NULL, e.self, 0x78, 0, &cr[1]));
    OK(fi_tsend(e.ep, s, 20, NULL, e.self, 0x78, &cs[1]));
    struct fi_cq_data_entry got[4], *x;
    read_entries(e.cq, got, sizeof(got[0]), 4);
    FIND(got, 4, &cs[0], x);
    CHECK(x && x->flags == (FI_SEND | FI_MSG));
    FIND(got, 4, &cs[1], x);
    CHECK(x && x->flags == (FI_SEND | FI_TAGGED));
    FIND(got, 4, &cr[0], x);
    CHECK(x && x->flags == (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA) && x->len == 24 &&
          x->data == 0x1234abcd5678ull && x->buf == NULL);
    FIND(got, 4, &cr[1], x);
    CHECK(x && x->flags == (FI_RECV | FI_TAGGED) && x->len == 20 && x->buf == NULL);
    CHECK(same(r, 24, 3) && same(r + 50, 20, 3));

    /* FI_MULTI_RECV: buf is where each message went; the last one to fit
     * releases the buffer (less than FI_OPT_MIN_MULTI_RECV left) */
    static uint8_t mb[256];
    size_t min = 64;
    OK(fi_setopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)));
    struct iovec iov = {mb, sizeof(mb)};
    struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &cr[0]};
    OK(fi_recvmsg(e.ep, &m, FI_MULTI_RECV));
    OK(fi_send(e.ep, s, 100, NULL, e.self, &cs[0]));
    OK(fi_senddata(e.ep, s + 1, 100, NULL, 9, e.self, &cs[1]));
    read_entries(e.cq, got, sizeof(got[0]), 4);
    struct fi_cq_data_entry *first = NULL, *second = NULL;
    for (int i = 0; i < 4; i++) {
        if (got[i].op_context != &cr[0]) continue;
        if (got[i].buf == mb) first = &got[i];
        if (got[i].buf == mb + 100) second = &got[i];
    }
    CHECK(first && first->len == 100 && first->flags == (FI_RECV | FI_MSG));
    CHECK(second && second->len == 100 && second->data == 9 &&
          second->flags == (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA | FI_MULTI_RECV));
    CHECK(same(mb, 100, 3) && same(mb + 100, 100, 4));
    ep_close(&e);
}

/* fi_cq_sreadfrom on a CQ that may be waited on. */
static void test_sreadfrom(void)
{
    struct ep e = ep_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    struct fi_cq_tagged_entry t[2];
    fi_addr_t src[2];
    /* nothing there: -FI_EAGAIN once the timeout has passed */
    double t0 = fic_now();
    CHECK(fi_cq_sreadfrom(e.cq, t, 1, src, NULL, 100) == -FI_EAGAIN);
    double waited = fic_now() - t0;
    CHECK(waited >= 0.095 && waited < 5);
    /* signaled: back at once, with nothing */
    OK(fi_cq_signal(e.cq));
    t0 = fic_now();
    CHECK(fi_cq_sreadfrom(e.cq, t, 1, src, NULL, 5000) == -FI_EAGAIN);
    CHECK(fic_now() - t0 < 1);
    /* a receive's source is the sender's address; both entries come */
    uint8_t s[16] = {5}, r[16];
    struct fi_context cs, cr;
    OK(fi_trecv(e.ep, r, sizeof(r), NULL, FI_ADDR_UNSPEC, 0x99, 0, &cr));
    OK(fi_tsend(e.ep, s, sizeof(s), NULL, e.self, 0x99, &cs));
    bool got_r = false, got_s = false;
    for (int k = 0; k < 10 && !(got_r && got_s); k++) {
        src[0] = src[1] = 12345;
        ssize_t n = fi_cq_sreadfrom(e.cq, t, 2, src, NULL, 1000);
        if (n == -FI_EAGAIN) continue;
        CHECK(n == 1 || n == 2);
        for (ssize_t i = 0; i < n; i++) {
            if (t[i].op_context == &cr) {
                CHECK(src[i] == e.self);
                CHECK(t[i].flags == (FI_RECV | FI_TAGGED) && t[i].len == 16 && t[i].tag == 0x99);
                got_r = true;
            } else {
                CHECK(t[i].op_context == &cs && t[i].flags == (FI_SEND | FI_TAGGED));
                got_s = true;
            }
        }
        if (n == 1) CHECK(src[1] == 12345); /* one entry: one source written */
    }
    CHECK(got_r && got_s && r[0] == 5);
    /* an error entry waiting: -FI_EAVAIL, then fi_cq_readerr */
    OK(fi_trecv(e.ep, r, 4, NULL, FI_ADDR_UNSPEC, 0x9a, 0, &cr));
    OK(fi_tsend(e.ep, s, sizeof(s), NULL, e.self, 0x9a, &cs));
    bool err = false, sent = false;
    for (int k = 0; k < 10 && !(err && sent); k++) {
        ssize_t n = fi_cq_sreadfrom(e.cq, t, 1, src, NULL, 1000);
        if (n == 1) {
            CHECK(t[0].op_context == &cs);
            sent = true;
        } else if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee = {0};
            OK(fi_cq_readerr(e.cq, &ee, 0));
            CHECK(ee.op_context == &cr && ee.err == FI_ETRUNC && ee.olen == 12);
            err = true;
        } else {
            CHECK(n == -FI_EAGAIN);
        }
    }
    CHECK(err && sent);
    ep_close(&e);
}

/* fi_cq(3): fi_cq_sread and fi_cq_sreadfrom are invalid on a CQ with
 * FI_WAIT_NONE, and fi_cq_signal needs a wait object: each refused at once
 * (-FI_EINVAL), not a sleep; the CQ is read as usual. */
static void test_wait_none(void)
{
    struct ep e = ep_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE);
    struct fi_cq_tagged_entry t;
    fi_addr_t src;
    double t0 = fic_now();
    CHECK(fi_cq_sread(e.cq, &t, 1, NULL, 3000) == -FI_EINVAL);
    CHECK(fi_cq_sreadfrom(e.cq, &t, 1, &src, NULL, 3000) == -FI_EINVAL);
    CHECK(fi_cq_signal(e.cq) == -FI_EINVAL);
    CHECK(fic_now() - t0 < 1);
    uint8_t s[8] = {7}, r[8] = {0};
    struct fi_context cs, cr;
    OK(fi_trecv(e.ep, r, sizeof(r), NULL, FI_ADDR_UNSPEC, 0x77, 0, &cr));
    OK(fi_tsend(e.ep, s, sizeof(s), NULL, e.self, 0x77, &cs));
    int got = 0;
    for (double end = fic_now() + 10; got < 2 && fic_now() < end;) {
        ssize_t n = fi_cq_read(e.cq, &t, 1);
        if (n == 1)
            got++;
        else
            CHECK(n == -FI_EAGAIN);
    }
    CHECK(got == 2 && r[0] == 7);
    ep_close(&e);
}

/* fi_cq_signal from another thread wakes a thread asleep in fi_cq_sread, as
 * fi_cq(3) says, "even if the timeout ... was specified as infinite": in a
 * FI_THREAD_DOMAIN domain of one CQ (the sleeper then waits in ulnet without
 * slices), and on an FI_WAIT_FD CQ's descriptor. */
struct sleeper {
    struct fid_cq *cq;
    int timeout;
    ssize_t rc;
    double woke;
};
static void *sleep_in_sread(void *arg)
{
    struct sleeper *z = arg;
    struct fi_cq_tagged_entry t;
    z->rc = fi_cq_sread(z->cq, &t, 1, NULL, z->timeout);
    z->woke = fic_now();
    return NULL;
}

static void test_signal_wakes(void)
{
    struct fi_info *h = fic_hints(FI_MSG | FI_TAGGED, NULL), *fi = NULL;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi));
    CHECK(fi->domain_attr->threading == FI_THREAD_DOMAIN);
    struct fid_domain *d;
    struct fid_av *a;
    struct fid_cq *cq;
    struct fid_ep *ep;
    OK(fi_domain(fab, fi, &d, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(d, &aa, &a, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
    OK(fi_cq_open(d, &ca, &cq, NULL));
    OK(fi_endpoint(d, fi, &ep, NULL));
    OK(fi_ep_bind(ep, &a->fid, 0));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep));
    static const int timeouts[] = {10000, -1};
    for (int k = 0; k < 2; k++) {
        struct sleeper z = {.cq = cq, .timeout = timeouts[k], .rc = 1};
        pthread_t th;
        double t0 = fic_now();
        OK(-pthread_create(&th, NULL, sleep_in_sread, &z));
        usleep(200000); /* asleep by now (it spins 50 us first) */
        double sig = fic_now();
        OK(fi_cq_signal(cq));
        pthread_join(th, NULL);
        printf("sread (timeout %d) woken %.1f ms after fi_cq_signal\n", timeouts[k],
               (z.woke - sig) * 1e3);
        CHECK(z.rc == -FI_EAGAIN);
        CHECK(z.woke - t0 >= 0.19); /* it slept until signaled, */
        CHECK(z.woke - sig < 1);    /* and no longer */
    }
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&a->fid));
    OK(fi_close(&d->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);

    /* FI_WAIT_FD: armed by fi_trywait, the descriptor becomes readable */
    struct ep e = ep_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_FD);
    int fd = -1;
    OK(fi_control(&e.cq->fid, FI_GETWAIT, &fd));
    struct fid *f = &e.cq->fid;
    int tw = -FI_EAGAIN;
    for (int i = 0; i < 100 && tw == -FI_EAGAIN; i++)
        tw = fi_trywait(fab, &f, 1);
    CHECK(tw == 0);
    OK(fi_cq_signal(e.cq));
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    CHECK(poll(&pf, 1, 1000) == 1);
    ep_close(&e);
}

/* The EQ: what eq.c implements, field by field. */
static void test_eq(void)
{
    struct fid_eq *eq;
    struct fi_eq_attr ea = {.size = 16, .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC};
    OK(fi_eq_open(fab, &ea, &eq, NULL));
    uint32_t ev = 0;
    struct fi_eq_entry ent, in;
    struct fi_eq_err_entry err;
    /* empty */
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent), 0) == -FI_EAGAIN);
    memset(&err, 0, sizeof(err));
    CHECK(fi_eq_readerr(eq, &err, 0) == -FI_EAGAIN);
    double t0 = fic_now();
    CHECK(fi_eq_sread(eq, &ev, &ent, sizeof(ent), 50, 0) == -FI_EAGAIN);
    double waited = fic_now() - t0;
    CHECK(waited >= 0.045 && waited < 5);
    /* a user event: written whole, read back whole */
    int mine;
    in = (struct fi_eq_entry){.fid = &eq->fid, .context = &mine, .data = 42};
    CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0) == (ssize_t)sizeof(in));
    /* not an error: readerr finds none and leaves it */
    CHECK(fi_eq_readerr(eq, &err, 0) == -FI_EAGAIN);
    /* too small a buffer: refused, the event stays */
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent) - 1, 0) < 0);
    memset(&ent, 0, sizeof(ent));
    ev = 0;
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent), FI_PEEK) == (ssize_t)sizeof(ent));
    CHECK(ev == FI_NOTIFY && ent.fid == &eq->fid && ent.context == &mine && ent.data == 42);
    memset(&ent, 0, sizeof(ent));
    ev = 0;
    CHECK(fi_eq_sread(eq, &ev, &ent, sizeof(ent), 1000, 0) == (ssize_t)sizeof(ent));
    CHECK(ev == FI_NOTIFY && ent.fid == &eq->fid && ent.context == &mine && ent.data == 42);
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent), 0) == -FI_EAGAIN);
    /* two, in the order written */
    in.data = 1;
    CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0) == (ssize_t)sizeof(in));
    in.data = 2;
    CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0) == (ssize_t)sizeof(in));
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent), 0) == (ssize_t)sizeof(ent) && ent.data == 1);
    CHECK(fi_eq_read(eq, &ev, &ent, sizeof(ent), 0) == (ssize_t)sizeof(ent) && ent.data == 2);
    CHECK(fi_eq_strerror(eq, 0, NULL, NULL, 0) != NULL);
    /* bound to an endpoint, it does not close */
    struct fid_ep *ep;
    OK(fi_endpoint(dom, info, &ep, NULL));
    OK(fi_ep_bind(ep, &eq->fid, 0));
    CHECK(fi_close(&eq->fid) == -FI_EBUSY);
    OK(fi_close(&ep->fid));
    /* an AV cannot report to an EQ: FI_EVENT is not offered */
    struct fid_av *eav;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .flags = FI_EVENT};
    CHECK(fi_av_open(dom, &aa, &eav, NULL) == -FI_ENOSYS);
    CHECK(fi_av_bind(av, &eq->fid, 0) == -FI_ENOSYS);
    /* events left in it are dropped at close */
    CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0) == (ssize_t)sizeof(in));
    OK(fi_close(&eq->fid));
}

int main(void)
{
    struct fi_info *hints =
        fic_hints(FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE | FI_MULTI_RECV, NULL);
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &av, NULL));

    test_context();
    test_msg();
    test_data();
    test_sreadfrom();
    test_wait_none();
    test_signal_wakes();
    test_eq();

    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("fi_queues %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
