/*
 * fi_limits - the sizes fi_getinfo advertises are what the provider accepts
 * (fi_getinfo(3): an application may rely on them). tx_attr->inject_size
 * follows the eager limit, nap_max less the provider's header, whatever set
 * nap_max (FI_ULNET_NAP_MAX, ULN_NAP_MAX, the default): fi_inject,
 * fi_tinject, fi_injectdata, fi_tinjectdata and fi_inject_write take exactly
 * that many bytes and refuse one more with -FI_EINVAL; a hint asking for one
 * more gets no info. tx_attr->size is the send queue's depth (FI_LIMITS_SQ,
 * else 256: what FI_ULNET_SQ_DEPTH or ULN_SQ_DEPTH set), and a hint of one
 * more gets no info. With REGIONS, FI_ULNET_MAX_REGIONS is in force: that
 * many registrations succeed and the next is refused, and mr_cnt says so.
 * The domain's ep_cnt is what endpoints may be enabled (test_ep_cnt).
 * One process, no job: the endpoint sends to itself.
 * "fi_limits refused": the environment holds a setting uln_open refuses, and
 * fi_getinfo offers nothing, with hints or without.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_limits INJECT [REGIONS]
 *        FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_limits refused
 */
#include "fi_common.h"

#include <rdma/fi_rma.h>
#include <stdbool.h>

#define V FI_VERSION(1, 17)

static struct fi_info *hints_for(void)
{
    struct fi_info *h = fic_hints(FI_MSG | FI_TAGGED | FI_RMA, NULL);
    h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
    return h;
}

/* fi_getinfo's inject_size, and whether a hint of `ask` bytes is met. */
static size_t advertised(void)
{
    struct fi_info *h = hints_for(), *fi = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    size_t n = fi->tx_attr->inject_size;
    fi_freeinfo(fi);
    fi_freeinfo(h);
    return n;
}
static int ask(size_t inject)
{
    struct fi_info *h = hints_for(), *fi = NULL;
    h->tx_attr->inject_size = inject;
    int rc = fi_getinfo(V, NULL, NULL, 0, h, &fi);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    return rc;
}

/* tx_attr->size as advertised, and whether a hint of `want` is met. */
static void test_tx_size(void)
{
    const char *e = getenv("FI_LIMITS_SQ");
    size_t want = e ? strtoul(e, NULL, 0) : 256;
    struct fi_info *h = hints_for(), *fi = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    CHECK(fi->tx_attr->size == want);
    fi_freeinfo(fi);
    fi = NULL;
    h->tx_attr->size = want;
    CHECK(fi_getinfo(V, NULL, NULL, 0, h, &fi) == 0);
    fi_freeinfo(fi);
    fi = NULL;
    h->tx_attr->size = want + 1;
    CHECK(fi_getinfo(V, NULL, NULL, 0, h, &fi) == -FI_ENODATA);
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

/* fi_domain(3)'s ep_cnt (and tx/rx_ctx_cnt, one context per endpoint) is
 * what the provider allows: FI_LIMITS_EPS, else ulnet's max_eps default of
 * 16. A hint of that many is met, one more gets no info; that many
 * endpoints open and enable, and talk (the first to the last, data
 * checked); one more is refused cleanly at fi_enable (-FI_ENOSPC), and once
 * one closes, a new one takes its place. Run before any domain is open (the
 * advertised value comes from the settings), then checked again with it
 * open (the context's). */
static void test_ep_cnt(void)
{
    const char *env = getenv("FI_LIMITS_EPS");
    size_t want = env ? strtoul(env, NULL, 0) : 16;
    struct fi_info *h = hints_for(), *fi = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    printf("ep_cnt %zu tx_ctx_cnt %zu rx_ctx_cnt %zu mr_cnt %zu (expected ep_cnt %zu)\n",
           fi->domain_attr->ep_cnt, fi->domain_attr->tx_ctx_cnt, fi->domain_attr->rx_ctx_cnt,
           fi->domain_attr->mr_cnt, want);
    CHECK(fi->domain_attr->ep_cnt == want);
    CHECK(fi->domain_attr->tx_ctx_cnt == want && fi->domain_attr->rx_ctx_cnt == want);
    struct fi_info *h2 = fi_dupinfo(h), *none = NULL;
    h2->domain_attr->ep_cnt = want;
    CHECK(fi_getinfo(V, NULL, NULL, 0, h2, &none) == 0);
    fi_freeinfo(none);
    none = NULL;
    h2->domain_attr->ep_cnt = want + 1;
    CHECK(fi_getinfo(V, NULL, NULL, 0, h2, &none) == -FI_ENODATA);
    fi_freeinfo(h2);

    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    OK(fi_fabric(fi->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, fi, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    struct fid_ep **ep = calloc(want + 1, sizeof(*ep));
    size_t enabled = 0;
    for (size_t i = 0; i <= want; i++) {
        OK(fi_endpoint(dom, fi, &ep[i], NULL));
        OK(fi_ep_bind(ep[i], &av->fid, 0));
        OK(fi_ep_bind(ep[i], &cq->fid, FI_TRANSMIT | FI_RECV));
        int rc = fi_enable(ep[i]);
        if (i < want) {
            CHECK(rc == 0);
            enabled += rc == 0;
        } else {
            printf("endpoint %zu: %s\n", i + 1, rc ? fi_strerror(-rc) : "enabled");
            CHECK(rc == -FI_ENOSPC);
            OK(fi_close(&ep[i]->fid));
        }
    }
    CHECK(enabled == want);
    /* the domain open: the context's value, the same */
    struct fi_info *again = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &again));
    CHECK(again->domain_attr->ep_cnt == want);
    fi_freeinfo(again);
    /* one closes: a new endpoint takes its place and talks to the first */
    OK(fi_close(&ep[want - 1]->fid));
    OK(fi_endpoint(dom, fi, &ep[want - 1], NULL));
    OK(fi_ep_bind(ep[want - 1], &av->fid, 0));
    OK(fi_ep_bind(ep[want - 1], &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep[want - 1]));
    char name[256];
    size_t nl = sizeof(name);
    fi_addr_t last;
    OK(fi_getname(&ep[want - 1]->fid, name, &nl));
    OK(fi_av_insert(av, name, 1, &last, 0, NULL));
    char s[32] = "to the last endpoint", r[32] = {0};
    struct fi_context cs, cr;
    OK(fi_trecv(ep[want - 1], r, sizeof(r), NULL, FI_ADDR_UNSPEC, 3, 0, &cr));
    OK(fi_tsend(ep[0], s, sizeof(s), NULL, last, 3, &cs));
    int got = 0;
    for (double end = fic_now() + 10; got < 2 && fic_now() < end;) {
        struct fi_cq_tagged_entry e;
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n == 1)
            got++;
        else
            CHECK(n == -FI_EAGAIN);
    }
    CHECK(got == 2 && !strcmp(r, s));
    for (size_t i = 0; i < want; i++)
        OK(fi_close(&ep[i]->fid));
    free(ep);
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

static struct fic fx;

static void drain(void)
{
    struct fi_cq_tagged_entry e;
    while (fi_cq_read(fx.cq, &e, 1) > 0)
        ;
}

/* A receive of up to n bytes that must complete with len bytes of seed. */
static void expect(bool tagged, uint8_t *b, size_t n, size_t len, uint8_t seed)
{
    struct fi_context c;
    memset(b, 0, n);
    if (tagged)
        OK(fi_trecv(fx.ep, b, n, NULL, fx.peer, 7, 0, &c));
    else
        OK(fi_recv(fx.ep, b, n, NULL, fx.peer, &c));
    struct fi_cq_tagged_entry e;
    double end = fic_now() + 10;
    ssize_t r;
    do
        r = fic_wait(&fx, &e, end);
    while (r == 1 && e.op_context != &c);
    CHECK(r == 1);
    if (r != 1) return;
    CHECK(e.len == len);
    size_t bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += b[i] != (uint8_t)(seed + i);
    CHECK(bad == 0);
}

static void test_inject(size_t want)
{
    size_t n = advertised();
    printf("inject_size %zu (expected %zu)\n", n, want);
    CHECK(n == want);
    CHECK(ask(n) == 0);
    CHECK(ask(n + 1) == -FI_ENODATA);

    fic_open(&fx, hints_for(), FI_AV_TABLE, 0);
    fic_enable(&fx);
    fx.namelen = sizeof(fx.name);
    OK(fi_getname(&fx.ep->fid, fx.name, &fx.namelen));
    OK(fi_av_insert(fx.av, fx.name, 1, &fx.peer, 0, NULL));
    /* the open context's value: the same */
    CHECK(advertised() == n);

    uint8_t *s = malloc(n + 1), *r = malloc(n + 1);
    for (size_t i = 0; i <= n; i++)
        s[i] = (uint8_t)(1 + i);
    /* one more than advertised is refused by every inject call */
    CHECK(fi_inject(fx.ep, s, n + 1, fx.peer) == -FI_EINVAL);
    CHECK(fi_tinject(fx.ep, s, n + 1, fx.peer, 7) == -FI_EINVAL);
    CHECK(fi_injectdata(fx.ep, s, n + 1, 5, fx.peer) == -FI_EINVAL);
    CHECK(fi_tinjectdata(fx.ep, s, n + 1, 5, fx.peer, 7) == -FI_EINVAL);
    /* exactly the advertised size goes, and arrives whole */
    CHECK(fi_inject(fx.ep, s, n, fx.peer) == 0);
    expect(false, r, n + 1, n, 1);
    CHECK(fi_tinject(fx.ep, s, n, fx.peer, 7) == 0);
    expect(true, r, n + 1, n, 1);
    CHECK(fi_injectdata(fx.ep, s, n, 5, fx.peer) == 0);
    expect(false, r, n + 1, n, 1);
    CHECK(fi_tinjectdata(fx.ep, s, n, 5, fx.peer, 7) == 0);
    expect(true, r, n + 1, n, 1);

    /* RMA: fi_inject_write of the advertised size lands; one more is refused */
    struct fid_mr *mr;
    memset(r, 0, n + 1);
    OK(fi_mr_reg(fx.dom, r, n + 1, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr, NULL));
    uint64_t key = fi_mr_key(mr), at = (uintptr_t)r;
    CHECK(fi_inject_write(fx.ep, s, n + 1, fx.peer, at, key) == -FI_EINVAL);
    CHECK(fi_inject_write(fx.ep, s, n, fx.peer, at, key) == 0);
    /* then a read behind it: once it completes, the write has landed */
    uint8_t one = 0;
    struct fi_context c;
    OK(fi_read(fx.ep, &one, 1, NULL, fx.peer, at + n - 1, key, &c));
    struct fi_cq_tagged_entry e;
    CHECK(fic_wait(&fx, &e, fic_now() + 10) == 1 && e.op_context == &c);
    CHECK(one == (uint8_t)(1 + n - 1));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += r[i] != (uint8_t)(1 + i);
    CHECK(bad == 0 && r[n] == 0);
    drain();
    OK(fi_close(&mr->fid));
    free(s);
    free(r);
}

/* FI_ULNET_MAX_REGIONS in force (over any ULN_MAX_REGIONS): that many
 * registrations, then -FI_ENOSPC. */
static void test_regions(int regions)
{
    struct fid_mr **mr = calloc((size_t)regions + 1, sizeof(*mr));
    static uint8_t buf[64];
    int ok = 0;
    for (int i = 0; i <= regions; i++) {
        int rc = fi_mr_reg(fx.dom, buf, sizeof(buf), FI_REMOTE_READ, 0, 0, 0, &mr[i], NULL);
        if (rc) {
            printf("registration %d: %s\n", i + 1, fi_strerror(-rc));
            CHECK(rc == -FI_ENOSPC);
            break;
        }
        ok++;
    }
    printf("%d registrations with FI_ULNET_MAX_REGIONS=%d\n", ok, regions);
    CHECK(ok == regions);
    /* and fi_getinfo's mr_cnt says so */
    struct fi_info *h = hints_for(), *fi = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    CHECK(fi->domain_attr->mr_cnt == (size_t)regions);
    fi_freeinfo(fi);
    fi_freeinfo(h);
    for (int i = 0; i < ok; i++)
        OK(fi_close(&mr[i]->fid));
    free(mr);
}

/* fi_getinfo(hints) with stderr into a pipe; what it said into buf. */
static int getinfo_said(const struct fi_info *h, char *buf, size_t room)
{
    int p[2], saved = dup(2);
    struct fi_info *fi = NULL;
    OK(pipe(p));
    fflush(stderr);
    dup2(p[1], 2);
    close(p[1]);
    int rc = fi_getinfo(V, NULL, NULL, 0, (struct fi_info *)h, &fi);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = read(p[0], buf, room - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(p[0]);
    CHECK(fi == NULL || rc == 0);
    fi_freeinfo(fi);
    return rc;
}

/* A setting uln_open refuses: no domain would open, so no info is offered.
 * The provider asks ulnet, which says why on stderr once per fi_getinfo
 * (not once more for each of libfabric's utility providers asking). */
static void test_refused(void)
{
    struct fi_info *h = hints_for();
    char said[4096];
    int rc = getinfo_said(h, said, sizeof said); /* libfabric loads its providers */
    printf("fi_getinfo with hints: %s\n", rc ? fi_strerror(-rc) : "an info");
    CHECK(rc == -FI_ENODATA);
    rc = getinfo_said(NULL, said, sizeof said);
    printf("fi_getinfo without hints: %s; said: %s", rc ? fi_strerror(-rc) : "an info", said);
    CHECK(rc == -FI_ENODATA);
    const char *nl = strchr(said, '\n');
    CHECK(!strncmp(said, "ulnet: ", 7) && nl && nl[1] == '\0'); /* one line, ulnet's */
    fi_freeinfo(h);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: fi_limits INJECT [REGIONS] | fi_limits refused\n");
        return 2;
    }
    if (!strcmp(argv[1], "refused")) {
        test_refused();
        printf("fi_limits %s\n", failures ? "FAILED" : "ok");
        return failures ? 1 : 0;
    }
    test_tx_size();
    test_ep_cnt();
    test_inject(strtoul(argv[1], NULL, 0));
    if (argc == 3) test_regions(atoi(argv[2]));
    fic_close(&fx);
    printf("fi_limits %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
