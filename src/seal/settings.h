/*
 * settings.h - sealing's settings (ULN_SECURE, ULN_SECURE_CIPHER,
 * ULN_SECRET_FILE), a settings group (core/params.h) that the transports
 * sealing their datagrams bring along.
 */
#ifndef ULN_SEAL_SETTINGS_H
#define ULN_SEAL_SETTINGS_H

#include "core/params.h"

struct uln_seal_params {
    int mode;           /* enum uln_seal_mode (ULN_SECURE) */
    int cipher;         /* enum uln_seal_cipher asked for (ULN_SECURE_CIPHER, or the CPU's) */
    const char *secret; /* NULL or the job secret's file (ULN_SECRET_FILE) */
};
extern const struct uln_settings_group uln_seal_settings;

static inline const struct uln_seal_params *uln_seal_params(const struct uln_params *p)
{
    return (const struct uln_seal_params *)uln_params_block(p, &uln_seal_settings);
}

#endif
