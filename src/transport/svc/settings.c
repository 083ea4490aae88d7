/*
 * settings.c - the host service's settings (svc.h): whether uln_open
 * attaches to the host's ulnetd, and where it listens.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/un.h>

#include "seal/settings.h"
#include "transport/svc/svc.h"

static const struct uln_setting svc_table[] = {
    {"ULN_SERVICE", "auto", 0, 0,
     "auto: through the host's ulnetd if one runs (docs/service.md); off; required",
     ULN_SEC_LINK_CHOICE},
    {"ULN_SERVICE_PATH", NULL, 0, 0,
     "where ulnetd listens: @name (abstract socket) or a path; unset: @ulnet/ulnetd",
     ULN_SEC_LINK_CHOICE},
    {"ULN_SERVICE_LOCAL", "svc", 0, 0,
     "with ULN_TRANSPORT=svc, peers on this host: svc (through the service) or shm (direct)",
     ULN_SEC_LINK_CHOICE},
    {"ULN_SERVICE_WEIGHT", "1", 1, 64,
     "this process's share of the service's work against other processes' (weighted round "
     "robin); the service caps it per uid (ulnetd --weight)",
     ULN_SEC_LINK_CHOICE},
    {"ULN_SERVICE_SOCK", "1", 0, 1,
     "1: take the UDP socket of its own the service binds for this process at attach (the "
     "source it vouches for to other hosts); 0: none",
     ULN_SEC_LINK_CHOICE},
};

static int svc_resolve(const struct uln_config *cfg, void *block)
{
    (void)cfg;
    struct uln_svc_params *sp = block;
    static const char *const modes[] = {"auto", "off", "required", NULL};
    sp->mode = uln_setting_choice("ULN_SERVICE", modes);
    sp->path = uln_setting_string("ULN_SERVICE_PATH");
    static const char *const locals[] = {"svc", "shm", NULL};
    int local = uln_setting_choice("ULN_SERVICE_LOCAL", locals);
    if (local < 0) return -EINVAL;
    sp->local_shm = local == 1;
    struct sockaddr_un sa;
    if (sp->path && uln_svc_sockaddr(sp->path, &sa) < 0) {
        uln_setting_err("ulnet: ULN_SERVICE_PATH=%s: use @name or a path of at most %u bytes\n",
                        sp->path, ULN_SVC_PATH_MAX);
        return -EINVAL;
    }
    if (uln_setting_u32("ULN_SERVICE_WEIGHT", 0, &sp->weight) != 0) return -EINVAL;
    uint32_t own = 1;
    if (uln_setting_u32("ULN_SERVICE_SOCK", 0, &own) != 0) return -EINVAL;
    sp->own_sock = own != 0;
    return sp->mode < 0 ? -EINVAL : 0;
}

/* ULN_SECURE binds the service's wire too (ops.c): its settings come along
 * (once, whoever else brings them). */
static const struct uln_settings_group *svc_sub(unsigned i)
{
    return i == 0 ? &uln_seal_settings : NULL;
}

const struct uln_settings_group uln_svc_settings = {
    .name = "svc",
    .table = svc_table,
    .n = sizeof svc_table / sizeof svc_table[0],
    .block_bytes = sizeof(struct uln_svc_params),
    .resolve = svc_resolve,
    .sub = svc_sub,
};
