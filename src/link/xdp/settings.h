/*
 * settings.h - the AF_XDP link's settings (ULN_XDP_*), a settings group
 * (core/params.h) its kind brings along: read at every uln_open, whatever
 * the link, so that a typo fails there.
 */
#ifndef ULN_LINK_XDP_SETTINGS_H
#define ULN_LINK_XDP_SETTINGS_H

#include <stdint.h>

#include "core/params.h"

struct uln_xdp_params {
    int mode;         /* enum uln_xdp_copy (ULN_XDP_MODE) */
    int hook;         /* enum uln_xdp_hook (ULN_XDP_HOOK) */
    uint32_t queue;   /* ULN_XDP_QUEUE */
    uint32_t gso_run; /* ULN_XDP_GSO_RUN */
    int auto_copy;    /* ULN_XDP_AUTO: 0 zc, 1 copy */
};
extern const struct uln_settings_group uln_link_xdp_settings;
int uln_link_xdp_auto_copy(void);

#endif
