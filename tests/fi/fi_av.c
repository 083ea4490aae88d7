/*
 * fi_av - address vector slots after fi_av_remove, as fi_av(3) says:
 *  - FI_AV_TABLE: indices from 0 in insertion order, across calls; an
 *    address goes into the lowest unused slot, so a removed one is used
 *    again;
 *  - FI_AV_MAP and FI_AV_TABLE: CYCLES insert/remove cycles of one peer keep
 *    the AV at a few slots (a client that meets and forgets peers forever
 *    does not grow it), and the peer inserted after them is reached, and
 *    its messages carry its address;
 *  - a message still waiting from a removed peer is not attributed to the
 *    peer that got its slot: it waits with no source (FI_ADDR_NOTAVAIL), a
 *    receive directed at the new peer does not take it, and once the old
 *    peer is inserted again a receive directed at its new address does.
 * One process, no job: endpoint A receives, B and C (one AV holding A's
 * name) send to it.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_av [CYCLES]
 */
#include "fi_common.h"

#include <stdbool.h>

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_cq *cqa, *cqs; /* A's; B's and C's */
static struct fid_av *avs;       /* B's and C's: A's name */

struct ep {
    struct fid_ep *ep;
    char name[256];
    size_t namelen;
    fi_addr_t to_a; /* B and C: A in avs */
};
static struct ep b, c;

static void ep_open(struct ep *e, struct fid_av *av, struct fid_cq *cq)
{
    OK(fi_endpoint(dom, info, &e->ep, NULL));
    OK(fi_ep_bind(e->ep, &av->fid, 0));
    OK(fi_ep_bind(e->ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(e->ep));
    e->namelen = sizeof(e->name);
    OK(fi_getname(&e->ep->fid, e->name, &e->namelen));
}

/* One completion for ctx from cq (the other CQ is progressed with it, the
 * provider's progress being domain-wide): 0 and its source, or the FI_E*
 * of its error entry. */
static int wait_ctx(struct fid_cq *cq, void *ctx, struct fi_cq_tagged_entry *out, fi_addr_t *src)
{
    double end = fic_now() + 10;
    while (fic_now() < end) {
        ssize_t n = fi_cq_readfrom(cq, out, 1, src);
        if (n == 1) {
            CHECK(out->op_context == ctx);
            return 0;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(cq, &err, 0));
            CHECK(err.op_context == ctx);
            return err.err;
        }
        CHECK(n == -FI_EAGAIN);
    }
    fprintf(stderr, "no completion in 10 s\n");
    exit(1);
}

static void inject(struct ep *from, uint64_t tag, uint32_t what)
{
    ssize_t r;
    while ((r = fi_tinject(from->ep, &what, sizeof(what), from->to_a, tag)) == -FI_EAGAIN) {
        struct fi_cq_tagged_entry e;
        (void)fi_cq_read(cqs, &e, 1);
    }
    OK(r);
}

/* A's receive of tag from src: the value sent, and where it came from. */
static uint32_t recv_a(struct fid_ep *a, fi_addr_t src, uint64_t tag, fi_addr_t *from)
{
    uint32_t v = 0;
    struct fi_context ctx;
    struct fi_cq_tagged_entry e;
    OK(fi_trecv(a, &v, sizeof(v), NULL, src, tag, 0, &ctx));
    CHECK(wait_ctx(cqa, &ctx, &e, from) == 0);
    CHECK(e.len == sizeof(v) && e.tag == tag);
    return v;
}

/* A peek at tag from src: whether a message is there, and its source. */
static bool peek_a(struct fid_ep *a, fi_addr_t src, uint64_t tag, fi_addr_t *from)
{
    struct fi_context ctx;
    struct fi_msg_tagged m = {.addr = src, .tag = tag, .context = &ctx};
    struct fi_cq_tagged_entry e;
    OK(fi_trecvmsg(a, &m, FI_PEEK));
    int err = wait_ctx(cqa, &ctx, &e, from);
    CHECK(err == 0 || err == FI_ENOMSG);
    return err == 0;
}

/* A, with an AV of the given type, gets A's name into avs. */
static struct fid_ep *open_a(enum fi_av_type type, struct fid_av **ava)
{
    struct fi_av_attr aa = {.type = type};
    OK(fi_av_open(dom, &aa, ava, NULL));
    struct ep a;
    ep_open(&a, *ava, cqa);
    fi_addr_t at;
    OK(fi_av_insert(avs, a.name, 1, &at, 0, NULL));
    b.to_a = c.to_a = at;
    return a.ep;
}

/* fi_av(3)'s FI_AV_TABLE: "inserted at the lowest index that corresponds to
 * an unused table location", indices from 0, sequential across calls. */
static void test_table_order(void)
{
    struct fid_av *av;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &av, NULL));
    char two[512];
    memcpy(two, b.name, b.namelen);
    memcpy(two + b.namelen, c.name, c.namelen);
    fi_addr_t f[2], g;
    CHECK(fi_av_insert(av, two, 2, f, 0, NULL) == 2 && f[0] == 0 && f[1] == 1);
    CHECK(fi_av_insert(av, b.name, 1, &g, 0, NULL) == 1 && g == 2);
    OK(fi_av_remove(av, &f[0], 1, 0));
    CHECK(fi_av_insert(av, c.name, 1, &g, 0, NULL) == 1 && g == 0); /* the hole first */
    CHECK(fi_av_insert(av, c.name, 1, &g, 0, NULL) == 1 && g == 3); /* then the end */
    /* the removed slot names nothing until given again */
    OK(fi_av_remove(av, &f[1], 1, 0));
    char back[256];
    size_t bl = sizeof(back);
    CHECK(fi_av_lookup(av, f[1], back, &bl) == -FI_ENOENT);
    CHECK(fi_av_remove(av, &f[1], 1, 0) == -FI_EINVAL);
    CHECK(fi_av_insert(av, b.name, 1, &g, 0, NULL) == 1 && g == 1);
    bl = sizeof(back);
    OK(fi_av_lookup(av, g, back, &bl));
    CHECK(bl == b.namelen && !memcmp(back, b.name, bl));
    OK(fi_close(&av->fid));
}

/* CYCLES insert/remove cycles of B, then traffic both ways through the
 * address it has at the end. */
static void test_cycles(enum fi_av_type type, long cycles)
{
    struct fid_av *ava;
    struct fid_ep *a = open_a(type, &ava);
    fi_addr_t f, most = 0;
    double t0 = fic_now();
    for (long i = 0; i < cycles; i++) {
        OK(fi_av_insert(ava, b.name, 1, &f, 0, NULL));
        if (f > most) most = f;
        OK(fi_av_remove(ava, &f, 1, 0));
    }
    printf("%s: %ld insert/remove cycles in %.2f s, highest fi_addr %llu\n",
           type == FI_AV_MAP ? "FI_AV_MAP" : "FI_AV_TABLE", cycles, fic_now() - t0,
           (unsigned long long)most);
    CHECK(most < 4);
    OK(fi_av_insert(ava, b.name, 1, &f, 0, NULL));
    /* B to A: directed at f, and reported from f */
    fi_addr_t from = FI_ADDR_UNSPEC;
    inject(&b, 0x10, 77);
    CHECK(recv_a(a, f, 0x10, &from) == 77);
    CHECK(from == f);
    /* A to B, through f */
    uint32_t v = 0, w = 88;
    struct fi_context ctx;
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    OK(fi_trecv(b.ep, &v, sizeof(v), NULL, FI_ADDR_UNSPEC, 0x11, 0, &ctx));
    OK(fi_tinject(a, &w, sizeof(w), f, 0x11));
    CHECK(wait_ctx(cqs, &ctx, &e, &src) == 0);
    CHECK(v == 88 && src == b.to_a);
    OK(fi_av_remove(ava, &f, 1, 0));
    OK(fi_close(&a->fid));
    OK(fi_close(&ava->fid));
    OK(fi_av_remove(avs, &b.to_a, 1, 0));
}

/* B's message waits at A while A removes B and gives B's slot to C. */
static void test_no_misattribution(enum fi_av_type type)
{
    enum { TAG = 0x20 };
    struct fid_av *ava;
    struct fid_ep *a = open_a(type, &ava);
    fi_addr_t fb, fc, fb2, from;
    OK(fi_av_insert(ava, b.name, 1, &fb, 0, NULL));
    inject(&b, TAG, 1);
    while (!peek_a(a, FI_ADDR_UNSPEC, TAG, &from)) /* until it is there, unexpected */
        ;
    CHECK(from == fb);
    OK(fi_av_remove(ava, &fb, 1, 0));
    OK(fi_av_insert(ava, c.name, 1, &fc, 0, NULL));
    CHECK(fc == fb); /* the slot is used again: C has B's old address */
    /* B's message: no source now, and not C's */
    CHECK(peek_a(a, FI_ADDR_UNSPEC, TAG, &from));
    CHECK(from == FI_ADDR_NOTAVAIL);
    CHECK(!peek_a(a, fc, TAG, &from));
    /* C's own message: a receive directed at C takes it, not B's older one */
    inject(&c, TAG, 2);
    CHECK(recv_a(a, fc, TAG, &from) == 2);
    CHECK(from == fc);
    /* B back, at another slot: its message now comes from there */
    OK(fi_av_insert(ava, b.name, 1, &fb2, 0, NULL));
    CHECK(fb2 != fc);
    CHECK(recv_a(a, fb2, TAG, &from) == 1);
    CHECK(from == fb2);
    fi_addr_t rm[2] = {fc, fb2};
    OK(fi_av_remove(ava, rm, 2, 0));
    OK(fi_close(&a->fid));
    OK(fi_close(&ava->fid));
    OK(fi_av_remove(avs, &b.to_a, 1, 0));
}

int main(int argc, char **argv)
{
    long cycles = argc > 1 ? atol(argv[1]) : 100000;
    struct fi_info *hints = fic_hints(FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE, NULL);
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cqa, NULL));
    OK(fi_cq_open(dom, &ca, &cqs, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(dom, &aa, &avs, NULL));
    ep_open(&b, avs, cqs);
    ep_open(&c, avs, cqs);

    test_table_order();
    test_cycles(FI_AV_TABLE, cycles);
    test_cycles(FI_AV_MAP, cycles);
    test_no_misattribution(FI_AV_TABLE);
    test_no_misattribution(FI_AV_MAP);

    OK(fi_close(&b.ep->fid));
    OK(fi_close(&c.ep->fid));
    OK(fi_close(&avs->fid));
    OK(fi_close(&cqa->fid));
    OK(fi_close(&cqs->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("fi_av %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
