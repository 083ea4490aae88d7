/*
 * diag.c - the tools' window on the library (diag.h).
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "boot/board.h"
#include "boot/pmix.h"
#include "link/udp/link_udp.h"
#include "link/xdp/link_xdp.h"
#include "seal/seal.h"
#include "transport/udp/ctx.h"

void uln_diag_link(const struct uln_ctx *ctx, struct uln_diag_link *out)
{
    memset(out, 0, sizeof *out);
    const struct uln_udp *u = udp_of(ctx);
    out->udp = u != NULL;
    out->auto_choice = !strcmp(ctx->p.link, "auto") && ctx->p.transport == ULN_TP_AUTO;
    out->udp_mtu = ctx->p.udp_mtu;
    snprintf(out->asked, sizeof out->asked, "%s", ctx->p.link);
    if (!u) return;
    snprintf(out->kind, sizeof out->kind, "%s", u->link_kind);
    snprintf(out->xdp_mode, sizeof out->xdp_mode, "%s", u->xdp_mode);
    snprintf(out->why, sizeof out->why, "%s", u->xdp_why);
}

void uln_diag_seal(const struct uln_ctx *ctx, struct uln_diag_seal *out)
{
    enum uln_seal_mode m = (enum uln_seal_mode)ctx->p.secure;
    *out = (struct uln_diag_seal){
        .mode = uln_seal_mode_name(m),
        .level = m == ULN_SEAL_OFF    ? 0
                 : m == ULN_SEAL_AUTH ? 1
                                      : 2,
        .cipher = uln_seal_cipher_name((enum uln_seal_cipher)ctx->p.secure_cipher),
        .cpu_aes = uln_seal_cpu_aes(),
        .secret = ctx->p.secret != NULL};
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
    return uln_link_xdp_auto_verdict(ifname, why, whylen);
}

unsigned uln_diag_iface_mtu(int m)
{
    return uln_link_udp_iface_mtu(m);
}

unsigned uln_diag_board_max_ranks(void)
{
    return ULN_BOARD_MAX_RANKS;
}
