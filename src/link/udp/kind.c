/*
 * kind.c - the socket link as select.c knows it (link/select.h): the link
 * every endpoint can have, so the one auto ends with and the one a link that
 * did not come falls back to.
 */
#include <stdbool.h>
#include <stddef.h>

#include "link/select.h"
#include "link/udp/link_udp.h"

static int udp_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, bool asked,
                    struct uln_link **out, char *why, size_t whylen, bool *loud)
{
    (void)ctx, (void)asked, (void)why, (void)whylen;
    *loud = true;
    return uln_link_udp_open(cfg, out);
}

const struct uln_link_kind uln_link_kind_udp = {.name = "udp", .cost = 100, .open = udp_open};
