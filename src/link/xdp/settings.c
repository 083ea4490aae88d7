/*
 * settings.c - the AF_XDP link's settings (settings.h).
 */
#include <errno.h>

#include "link/xdp/settings.h"

/* ULN_XDP_AUTO: 1 copy, 0 zc, -1 neither. Also for ulninfo's interface list,
 * which has no context. */
int uln_link_xdp_auto_copy(void)
{
    static const char *const autos[] = {"zc", "copy", NULL};
    return uln_setting_choice("ULN_XDP_AUTO", autos);
}

static const struct uln_setting xdp_table[] = {
    {"ULN_XDP_MODE", "auto", 0, 0, "auto: zero-copy where the driver can, else copy; copy; zc",
     ULN_SEC_LINK},
    {"ULN_XDP_HOOK", "auto", 0, 0,
     "auto: native XDP where the driver has it, else generic; "
     "native; generic",
     ULN_SEC_LINK},
    {"ULN_XDP_QUEUE", "0", 0, 1023, "the interface's receive queue the AF_XDP sockets bind",
     ULN_SEC_LINK},
    {"ULN_XDP_GSO_RUN", "4", 0, 64,
     "copy mode: runs of this many datagrams or more to one peer leave by the bound UDP socket "
     "as one UDP_SEGMENT send (the kernel builds one skb, not one per frame); 0: all by AF_XDP",
     ULN_SEC_LINK},
    {"ULN_XDP_AUTO", "zc", 0, 0,
     "what ULN_LINK=auto takes AF_XDP for: zc, only a driver that runs it zero-copy (in copy "
     "mode it wins latency but loses bulk bandwidth to the socket link); copy, any Ethernet "
     "driver, copy mode where it has no zero-copy (latency-bound jobs)",
     ULN_SEC_LINK},
};

/* In the order of enum uln_xdp_copy and enum uln_xdp_hook (link_xdp.h). */
static int xdp_resolve(const struct uln_config *cfg, void *block)
{
    (void)cfg;
    struct uln_xdp_params *xp = block;
    static const char *const modes[] = {"auto", "copy", "zc", NULL};
    static const char *const hooks[] = {"auto", "native", "generic", NULL};
    xp->mode = uln_setting_choice("ULN_XDP_MODE", modes);
    xp->hook = uln_setting_choice("ULN_XDP_HOOK", hooks);
    int rc = uln_setting_u32("ULN_XDP_QUEUE", 0, &xp->queue);
    if (!rc) rc = uln_setting_u32("ULN_XDP_GSO_RUN", 0, &xp->gso_run);
    xp->auto_copy = uln_link_xdp_auto_copy();
    return xp->mode < 0 || xp->hook < 0 || xp->auto_copy < 0 ? -EINVAL : rc;
}

const struct uln_settings_group uln_link_xdp_settings = {
    .name = "xdp",
    .table = xdp_table,
    .n = sizeof xdp_table / sizeof xdp_table[0],
    .block_bytes = sizeof(struct uln_xdp_params),
    .resolve = xdp_resolve,
};
