/*
 * settings.c - sealing's settings (settings.h): read and checked at every
 * uln_open, so that a secret file that cannot serve (others may read it,
 * too short, missing) fails there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "seal/seal.h"
#include "seal/settings.h"

static const struct uln_setting seal_table[] = {
    {"ULN_SECURE", "off", 0, 0,
     "udp datagrams: off; auth: each carries a tag; encrypt: also encrypted (same in a job)",
     ULN_SEC_SECURITY},
    {"ULN_SECRET_FILE", NULL, 0, 0,
     "file of the job secret the keys are bound to (ours, not readable by others)",
     ULN_SEC_SECURITY},
    {"ULN_SECURE_CIPHER", NULL, 0, 0,
     "aes-256-gcm or chacha20-poly1305; unset: AES-GCM where the CPU has AES instructions",
     ULN_SEC_SECURITY},
};

static int seal_resolve(const struct uln_config *cfg, void *block)
{
    (void)cfg;
    struct uln_seal_params *sp = block;
    static const char *const modes[] = {"off", "auth", "encrypt", NULL};
    enum uln_seal_cipher c = ULN_SEAL_AES_256_GCM;
    int rc = 0;
    sp->mode = uln_setting_choice("ULN_SECURE", modes);
    const char *cs = uln_setting_string("ULN_SECURE_CIPHER");
    if (uln_seal_cipher_local(&c) != 0) {
        uln_setting_err("ulnet: ULN_SECURE_CIPHER=%s: use aes-256-gcm or chacha20-poly1305\n", cs);
        rc = -EINVAL;
    }
    sp->cipher = (int)c;
    sp->secret = uln_setting_string("ULN_SECRET_FILE");
    uint8_t sec[ULN_SEAL_SECRET_BYTES];
    int src = sp->secret ? uln_seal_secret_load(sp->secret, sec) : 0;
    explicit_bzero(sec, sizeof sec);
    if (src) {
        uln_setting_err("ulnet: ULN_SECRET_FILE=%s: %s\n", sp->secret,
                        src == -EPERM    ? "must be a regular file of ours that others can neither "
                                           "read nor write (chmod 600)"
                        : src == -EINVAL ? "must hold 16 bytes to 64 KiB"
                                         : strerror(-src));
        rc = -EINVAL;
    }
    return sp->mode < 0 ? -EINVAL : rc;
}

const struct uln_settings_group uln_seal_settings = {
    .name = "seal",
    .table = seal_table,
    .n = sizeof seal_table / sizeof seal_table[0],
    .block_bytes = sizeof(struct uln_seal_params),
    .resolve = seal_resolve,
};
