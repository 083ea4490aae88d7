/*
 * select.c - where the link under an endpoint is chosen (link/select.h):
 * the kinds this ulnet has, the one ULN_LINK names or the cheapest that
 * opens, the socket link when neither comes; then the fault injector around
 * whichever came, once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "link/fault.h"
#include "link/select.h"
#include "link/udp/link_udp.h"
#include "transport/udp/ctx.h"

/* The links. Adding one: a line here (select.h says the rest). */
static const struct uln_link_kind *const kinds[] = {
    &uln_link_kind_xdp, &uln_link_kind_udp,
#ifdef ULN_TEST_HOOKS
    &uln_link_kind_loop, /* tests/link/loop.c: the tests' own link, in memory */
#endif
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

const struct uln_link_kind *uln_link_kind_find(const char *name)
{
    for (unsigned i = 0; i < N_KINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

void uln_link_kind_names(char *out, size_t room)
{
    size_t at = (size_t)snprintf(out, room, "auto");
    for (unsigned i = 0; i < N_KINDS && at < room; i++)
        at += (size_t)snprintf(out + at, room - at, ", %s", kinds[i]->name);
}

/* ---- ULN_LINK ----------------------------------------------------------------- */

static const struct uln_setting link_table[] = {
    {"ULN_LINK", "auto", 0, 0,
     "the link under udp: auto (AF_XDP where the driver runs it zero-copy, under "
     "ULN_TRANSPORT=auto; else udp); udp: sockets; xdp: AF_XDP (docs/xdp.md)",
     ULN_SEC_LINK_CHOICE},
    {"ULN_FAULT", NULL, 0, 0, "tests: drop=P,dup=P,reorder=P,delay=US,seed=N at the socket",
     ULN_SEC_TESTS},
};

/* ULN_LINK: "auto" or a link this ulnet has. ULN_TRANSPORT=xdp (or
 * uln_config.transport "xdp") is ULN_LINK=xdp, and says so if ULN_LINK names
 * another. */
static int link_choice_resolve(const struct uln_config *cfg, struct uln_link_params *lp)
{
    const char *tp = cfg->transport ? cfg->transport : getenv("ULN_TRANSPORT");
    bool xdp_alias = tp && !strcmp(tp, "xdp");
    const char *v = uln_setting_string("ULN_LINK");
    if (!v) v = xdp_alias ? "xdp" : "auto";
    char names[128];
    if (strcmp(v, "auto") && !uln_link_kind_find(v)) {
        uln_link_kind_names(names, sizeof names);
        uln_setting_err("ulnet: ULN_LINK=%s: use %s\n", v, names);
        return -EINVAL;
    }
    if (xdp_alias && strcmp(v, "xdp")) {
        uln_setting_err("ulnet: ULN_TRANSPORT=xdp is ULN_LINK=xdp, but ULN_LINK=%s\n", v);
        return -EINVAL;
    }
    snprintf(lp->link, sizeof lp->link, "%s", v);
    return 0;
}

/* ULN_FAULT: a bad spec fails uln_open, not the first endpoint that would
 * use it. */
static int fault_resolve(struct uln_link_params *lp)
{
    struct uln_link_fault f;
    char why[160];
    lp->fault = uln_setting_string("ULN_FAULT");
    if (lp->fault && uln_link_fault_parse(lp->fault, &f, why, sizeof why) < 0) {
        uln_setting_err("ulnet: ULN_FAULT=%s: %s\n", lp->fault, why);
        return -EINVAL;
    }
    return 0;
}

static int link_resolve(const struct uln_config *cfg, void *block)
{
    int rc = fault_resolve(block);
    return link_choice_resolve(cfg, block) | rc;
}

/* The kinds' settings, of those that have some. */
static const struct uln_settings_group *link_sub(unsigned i)
{
    for (unsigned k = 0; k < N_KINDS; k++)
        if (kinds[k]->settings && i-- == 0) return kinds[k]->settings;
    return NULL;
}

const struct uln_settings_group uln_link_settings = {
    .name = "link",
    .table = link_table,
    .n = sizeof link_table / sizeof link_table[0],
    .block_bytes = sizeof(struct uln_link_params),
    .resolve = link_resolve,
    .sub = link_sub,
};

static const char *link_asked(const struct uln_ctx *ctx)
{
    const struct uln_link_params *lp = uln_params_block(&ctx->p, &uln_link_settings);
    return lp->link;
}

static const char *fault_spec(const struct uln_ctx *ctx)
{
    const struct uln_link_params *lp = uln_params_block(&ctx->p, &uln_link_settings);
    return lp->fault;
}

/* ---- choosing ----------------------------------------------------------------- */

/* auto's next kind to try: the cheapest with a cost above `above` (ties in
 * table order), or NULL. */
static const struct uln_link_kind *cheapest_above(unsigned above, const struct uln_link_kind *after)
{
    const struct uln_link_kind *best = NULL;
    bool passed = after == NULL;
    for (unsigned i = 0; i < N_KINDS; i++) {
        const struct uln_link_kind *k = kinds[i];
        if (k == after) {
            passed = true;
            continue;
        }
        bool later = k->cost > above || (k->cost == above && passed);
        if (k->cost && later && (!best || k->cost < best->cost)) best = k;
    }
    return best;
}

/* The kind asked for (ULN_LINK), or auto's cheapest that opens, into *out;
 * -errno (why: the reason) if none came. The socket link is not tried here:
 * it is what the caller falls back to. */
static int open_chosen(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg,
                       const struct uln_link_kind **got, struct uln_link **out, char *why,
                       size_t whylen, bool *loud)
{
    struct uln_udp *u = udp_of(ctx);
    const struct uln_link_kind *asked = uln_link_kind_find(link_asked(ctx));
    *loud = false;
    if (asked == &uln_link_kind_udp) return -EOPNOTSUPP;
    if (asked) {
        *got = asked;
        return asked->open(ctx, cfg, true, out, why, whylen, loud);
    }
    /* auto, only where the transport is chosen by the library too; and an
     * auto that failed once is not tried again in this context: every
     * endpoint would meet the same obstacle (or a busy queue). */
    if (!uln_tp_auto(ctx) || u->xdp_why[0]) return -EOPNOTSUPP;
    int rc = -EOPNOTSUPP;
    for (const struct uln_link_kind *k = cheapest_above(0, NULL); k && k != &uln_link_kind_udp;
         k = cheapest_above(k->cost, k)) {
        *got = k;
        if ((rc = k->open(ctx, cfg, false, out, why, whylen, loud)) == 0) break;
    }
    return rc;
}

int uln_link_select_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg,
                         struct uln_link **out)
{
    struct uln_udp *u = udp_of(ctx);
    const struct uln_link_kind *got = &uln_link_kind_udp;
    char why[sizeof u->xdp_why];
    bool loud = false;
    int rc = open_chosen(ctx, cfg, &got, out, why, sizeof why, &loud);
    if (rc && got != &uln_link_kind_udp) {
        /* Once per context: every endpoint meets the same obstacle. And none
         * for a queue this context's own AF_XDP endpoint holds (one socket
         * per queue): its further endpoints (a tool's control endpoint, a
         * second endpoint of the job's) take the socket link as documented,
         * which is no alarm. */
        if (rc == -EBUSY && !strcmp(u->link_kind, "xdp")) loud = false;
        if (!u->xdp_why[0] && loud)
            fprintf(stderr, "ulnet: %s: %s; using udp\n",
                    strcmp(link_asked(ctx), "auto") ? got->name : "auto", why);
        snprintf(u->xdp_why, sizeof u->xdp_why, "%s", why);
    }
    if (rc) {
        got = &uln_link_kind_udp;
        if ((rc = got->open(ctx, cfg, false, out, why, sizeof why, &loud)) != 0) return rc;
    }
    struct uln_link_info in;
    uln_link_info(*out, &in);
    /* The first endpoint's link names the context's, for ulninfo: an AF_XDP
     * link once had is not unsaid by a later endpoint's socket link. */
    if (!u->link_kind[0] || strcmp(u->link_kind, "xdp"))
        snprintf(u->link_kind, sizeof u->link_kind, "%s", got->name);
    if (in.xdp_mode[0]) snprintf(u->xdp_mode, sizeof u->xdp_mode, "%s", in.xdp_mode);
    /* The fault injector wraps whichever link came, here and nowhere else
     * (ULN_FAULT: ctx.c checked the spec at uln_open). It decides each
     * packet's fate before the link gathers the survivors into GSO runs, so
     * a run carries only packets meant to leave, and loss is measured on the
     * path jobs really take. */
    rc = uln_link_fault_wrap(fault_spec(ctx), out, why, sizeof why);
    if (rc == -EINVAL) fprintf(stderr, "ulnet: fault spec '%s': %s\n", fault_spec(ctx), why);
    return rc;
}
