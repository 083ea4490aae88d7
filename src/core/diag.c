/*
 * diag.c - the tools' window on the library (diag.h).
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "boot/boot.h"
#include "boot/pmix.h"
#include "link/select.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"
#include "link/xdp/settings.h"
#include "seal/seal.h"
#include "seal/settings.h"
#include "transport/udp/ctx.h"

const char *uln_diag_service(const struct uln_ctx *ctx)
{
    return ctx->svc_why;
}

void uln_diag_link(const struct uln_ctx *ctx, struct uln_diag_link *out)
{
    memset(out, 0, sizeof *out);
    const struct uln_udp *u = udp_of(ctx);
    out->udp = u != NULL;
    const struct uln_link_params *lp = uln_params_block(&ctx->p, &uln_link_settings);
    out->auto_choice = !strcmp(lp->link, "auto") && uln_tp_auto(ctx);
    out->udp_mtu = udp_params(ctx)->mtu;
    snprintf(out->asked, sizeof out->asked, "%s", lp->link);
    if (!u) return;
    snprintf(out->kind, sizeof out->kind, "%s", u->link_kind);
    snprintf(out->xdp_mode, sizeof out->xdp_mode, "%s", u->xdp_mode);
    snprintf(out->why, sizeof out->why, "%s", u->xdp_why);
}

void uln_diag_seal(const struct uln_ctx *ctx, struct uln_diag_seal *out)
{
    const struct uln_seal_params *sp = uln_seal_params(&ctx->p);
    enum uln_seal_mode m = (enum uln_seal_mode)sp->mode;
    *out = (struct uln_diag_seal){.mode = uln_seal_mode_name(m),
                                  .level = m == ULN_SEAL_OFF    ? 0
                                           : m == ULN_SEAL_AUTH ? 1
                                                                : 2,
                                  .cipher = uln_seal_cipher_name((enum uln_seal_cipher)sp->cipher),
                                  .cpu_aes = uln_seal_cpu_aes(),
                                  .secret = sp->secret != NULL,
                                  .libs = uln_seal_libraries()};
}

bool uln_diag_xdp_built(void)
{
    return uln_link_xdp_built();
}

bool uln_diag_pmix_built(void)
{
    return uln_pmix_built();
}

int uln_diag_xdp_verdict(const char *ifname, char *why, size_t whylen)
{
    return uln_link_xdp_auto_verdict(ifname, uln_link_xdp_auto_copy() == 1, why, whylen);
}

unsigned uln_diag_iface_mtu(int m)
{
    return uln_link_udp_iface_mtu(m);
}

const char *uln_diag_boot_mode(const struct uln_ctx *ctx)
{
    return uln_boot_mode(&ctx->boot);
}

int uln_diag_boot_route(const struct uln_ctx *ctx, struct sockaddr_storage *ss, socklen_t *len)
{
    return uln_boot_route_addr(&ctx->boot, ss, len);
}

unsigned uln_diag_board_max_ranks(void)
{
    return ULN_BOOT_MAX_RANKS;
}
