/*
 * select.c - where the link under an endpoint is chosen (link/select.h):
 * the kinds this ulnet has, the one ULN_LINK names or the cheapest that
 * opens, the socket link when neither comes; then the fault injector around
 * whichever came, once.
 */
#define _GNU_SOURCE
#include <errno.h>
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

int uln_link_fault_check(const char *spec, char *err, size_t errlen)
{
    struct uln_link_fault f;
    return uln_link_fault_parse(spec, &f, err, errlen);
}

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
    const struct uln_link_kind *asked = uln_link_kind_find(ctx->p.link);
    *loud = false;
    if (asked == &uln_link_kind_udp) return -EOPNOTSUPP;
    if (asked) {
        *got = asked;
        return asked->open(ctx, cfg, true, out, why, whylen, loud);
    }
    /* auto, only where the transport is chosen by the library too; and an
     * auto that failed once is not tried again in this context: every
     * endpoint would meet the same obstacle (or a busy queue). */
    if (ctx->p.transport != ULN_TP_AUTO || u->xdp_why[0]) return -EOPNOTSUPP;
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
                    strcmp(ctx->p.link, "auto") ? got->name : "auto", why);
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
    rc = uln_link_fault_wrap(ctx->p.fault, out, why, sizeof why);
    if (rc == -EINVAL) fprintf(stderr, "ulnet: fault spec '%s': %s\n", ctx->p.fault, why);
    return rc;
}
