/*
 * fi_poll - poll sets (fi_poll(3)) in one process: an endpoint that sends to
 * itself, its CQ and a counter in a set. fi_poll names a CQ while it holds
 * an entry and a counter once per move of its counts (not after the
 * application set or added to it); members cannot close while in a set;
 * wrong members and flags are refused.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_poll
 */
#include "fi_common.h"

#include <rdma/fi_eq.h>
#include <stdbool.h>

static int cq_ctx, cntr_ctx;

/* fi_poll until it names something or 5 s pass; returns how many it named. */
static int poll_some(struct fid_poll *ps, void **ctx, int max)
{
    double end = fic_now() + 5;
    int n;
    while ((n = fi_poll(ps, ctx, max)) == 0 && fic_now() < end)
        ;
    return n;
}

static bool named(void **ctx, int n, void *which)
{
    for (int i = 0; i < n; i++)
        if (ctx[i] == which) return true;
    return false;
}

int main(void)
{
    struct fic f = {0};
    struct fi_info *h = fic_hints(FI_MSG | FI_TAGGED, NULL);
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &f.info));
    f.hints = h;
    OK(fi_fabric(f.info->fabric_attr, &f.fab, NULL));
    OK(fi_domain(f.fab, f.info, &f.dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(f.dom, &aa, &f.av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(f.dom, &ca, &f.cq, &cq_ctx));
    struct fi_cntr_attr cta = {.events = FI_CNTR_EVENTS_COMP};
    OK(fi_cntr_open(f.dom, &cta, &f.cntr, &cntr_ctx));
    OK(fi_endpoint(f.dom, f.info, &f.ep, NULL));
    fic_enable(&f);
    f.namelen = sizeof f.name;
    OK(fi_getname(&f.ep->fid, f.name, &f.namelen));
    OK(fi_av_insert(f.av, f.name, 1, &f.peer, 0, NULL));

    struct fid_poll *ps;
    struct fi_poll_attr pa = {.flags = 1};
    CHECK(fi_poll_open(f.dom, &pa, &ps) == -FI_EINVAL);
    pa.flags = 0;
    OK(fi_poll_open(f.dom, &pa, &ps));
    OK(fi_poll_add(ps, &f.cq->fid, 0));
    OK(fi_poll_add(ps, &f.cntr->fid, 0));
    CHECK(fi_poll_add(ps, &f.cq->fid, 0) == -FI_EALREADY);
    CHECK(fi_poll_add(ps, &f.av->fid, 0) == -FI_EINVAL); /* not a CQ or counter */
    CHECK(fi_close(&f.cq->fid) == -FI_EBUSY);            /* in the set */
    void *ctx[4];
    CHECK(fi_poll(ps, ctx, 4) == 0); /* nothing yet */

    char out[16] = "poll sets", in[16] = "";
    struct fi_context cs, cr;
    OK(fi_trecv(f.ep, in, sizeof in, NULL, f.peer, 7, 0, &cr));
    OK(fi_tsend(f.ep, out, sizeof out, NULL, f.peer, 7, &cs));
    int n = poll_some(ps, ctx, 4);
    CHECK(n >= 1 && named(ctx, n, &cq_ctx));
    bool cntr_named = named(ctx, n, &cntr_ctx);
    /* both completions in the CQ: it is named while they wait */
    struct fi_cq_tagged_entry e[2];
    int got = 0;
    for (double end = fic_now() + 5; got < 2 && fic_now() < end;) {
        ssize_t r = fi_cq_read(f.cq, e + got, 2 - got);
        if (r > 0) got += (int)r;
    }
    CHECK(got == 2 && !strcmp(in, "poll sets"));
    /* the counter moved (send and receive): named by the first fi_poll or
     * this one, as it moved on; then no more; the CQ is empty now */
    n = fi_poll(ps, ctx, 4);
    CHECK((cntr_named || named(ctx, n, &cntr_ctx)) && !named(ctx, n, &cq_ctx));
    CHECK(fi_cntr_read(f.cntr) == 2);
    n = fi_poll(ps, ctx, 4);
    CHECK(n == 0);
    /* the application's own add is no event */
    OK(fi_cntr_add(f.cntr, 5));
    CHECK(fi_poll(ps, ctx, 4) == 0);
    /* a count of 1 names the first member with an event, the rest wait */
    OK(fi_trecv(f.ep, in, sizeof in, NULL, f.peer, 8, 0, &cr));
    OK(fi_tsend(f.ep, out, sizeof out, NULL, f.peer, 8, &cs));
    for (double end = fic_now() + 5; fi_cntr_read(f.cntr) < 9 && fic_now() < end;)
        ;
    CHECK(fi_poll(ps, ctx, 1) == 1 && ctx[0] == &cq_ctx);
    n = fi_poll(ps, ctx, 4);
    CHECK(n == 2 && ctx[0] == &cq_ctx && ctx[1] == &cntr_ctx);
    got = 0;
    for (double end = fic_now() + 5; got < 2 && fic_now() < end;) {
        ssize_t r = fi_cq_read(f.cq, e + got, 2 - got);
        if (r > 0) got += (int)r;
    }
    CHECK(got == 2);

    OK(fi_poll_del(ps, &f.cq->fid, 0));
    CHECK(fi_poll_del(ps, &f.cq->fid, 0) == -FI_EINVAL); /* not in it any more */
    OK(fi_close(&ps->fid));                              /* the counter leaves with it */
    fic_close(&f);
    printf("fi_poll %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
