/*
 * keys.c - a context's sealing identity: its X25519 key pair, the job
 * secret, and the names and choice of modes and ciphers (seal.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include <openssl/evp.h>

#include "seal/seal.h"

#define SECRET_MIN 16u
#define SECRET_MAX 65536u

int uln_seal_mode_parse(const char *s, enum uln_seal_mode *mode)
{
    static const char *const names[] = {"off", "auth", "encrypt"};
    for (int m = 0; m < 3; m++) {
        if (!strcmp(s, names[m])) {
            *mode = (enum uln_seal_mode)m;
            return 0;
        }
    }
    return -EINVAL;
}

const char *uln_seal_mode_name(enum uln_seal_mode mode)
{
    return mode == ULN_SEAL_ENCRYPT ? "encrypt" : mode == ULN_SEAL_AUTH ? "auth" : "off";
}

int uln_seal_cipher_parse(const char *s, enum uln_seal_cipher *cipher)
{
    if (!strcmp(s, "aes-256-gcm")) {
        *cipher = ULN_SEAL_AES_256_GCM;
        return 0;
    }
    if (!strcmp(s, "chacha20-poly1305")) {
        *cipher = ULN_SEAL_CHACHA20_POLY1305;
        return 0;
    }
    return -EINVAL;
}

const char *uln_seal_cipher_name(enum uln_seal_cipher cipher)
{
    return cipher == ULN_SEAL_AES_256_GCM ? "aes-256-gcm" : "chacha20-poly1305";
}

bool uln_seal_cpu_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* GCM needs both: AES rounds and the carry-less multiply of GHASH. */
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#elif defined(__aarch64__)
    unsigned long hw = getauxval(AT_HWCAP);
    return (hw & (1ul << 3)) && (hw & (1ul << 4)); /* HWCAP_AES, HWCAP_PMULL */
#else
    return false;
#endif
}

int uln_seal_cipher_local(enum uln_seal_cipher *cipher)
{
    const char *s = getenv("ULN_SECURE_CIPHER");
    if (s && *s) return uln_seal_cipher_parse(s, cipher);
    *cipher = uln_seal_cpu_aes() ? ULN_SEAL_AES_256_GCM : ULN_SEAL_CHACHA20_POLY1305;
    return 0;
}

enum uln_seal_cipher uln_seal_cipher_pick(enum uln_seal_cipher a, enum uln_seal_cipher b)
{
    return a == ULN_SEAL_AES_256_GCM && b == ULN_SEAL_AES_256_GCM ? ULN_SEAL_AES_256_GCM
                                                                  : ULN_SEAL_CHACHA20_POLY1305;
}

/* SHA-256 of n bytes into out. */
static int sha256(const uint8_t *in, size_t n, uint8_t out[32])
{
    unsigned int len = 0;
    if (!EVP_Digest(in, n, out, &len, EVP_sha256(), NULL) || len != 32) return -EIO;
    return 0;
}

int uln_seal_secret_load(const char *path, uint8_t out[ULN_SEAL_SECRET_BYTES])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0) return -errno;
    struct stat st;
    int rc = 0;
    uint8_t *buf = NULL;
    if (fstat(fd, &st)) {
        rc = -errno;
    } else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        rc = -EPERM; /* a secret others can read (or replace) is no secret */
    } else if (st.st_size < (off_t)SECRET_MIN || st.st_size > (off_t)SECRET_MAX) {
        rc = -EINVAL;
    } else if (!(buf = malloc((size_t)st.st_size))) {
        rc = -ENOMEM;
    } else {
        size_t got = 0, want = (size_t)st.st_size;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                rc = r < 0 ? -errno : -EINVAL; /* shrank under us */
                break;
            }
            got += (size_t)r;
        }
        if (!rc) rc = sha256(buf, want, out);
        OPENSSL_cleanse(buf, want);
    }
    free(buf);
    close(fd);
    return rc;
}

static int id_publish(struct uln_seal_id *id)
{
    size_t n = ULN_SEAL_PUB_BYTES;
    if (EVP_PKEY_get_raw_public_key(id->pkey, id->pub, &n) != 1 || n != ULN_SEAL_PUB_BYTES) {
        uln_seal_id_close(id);
        return -EIO;
    }
    return 0;
}

int uln_seal_id_open(struct uln_seal_id *id, const char *secret_file)
{
    memset(id, 0, sizeof *id);
    if (secret_file) {
        int rc = uln_seal_secret_load(secret_file, id->secret);
        if (rc) return rc;
        id->has_secret = true;
    }
    EVP_PKEY_CTX *kc = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
    EVP_PKEY *pk = NULL;
    int ok = kc && EVP_PKEY_keygen_init(kc) == 1 && EVP_PKEY_keygen(kc, &pk) == 1;
    EVP_PKEY_CTX_free(kc);
    if (!ok) {
        uln_seal_id_close(id);
        return -EIO;
    }
    id->pkey = pk;
    return id_publish(id);
}

int uln_seal_id_open_raw(struct uln_seal_id *id, const uint8_t priv[32], const uint8_t *secret,
                         size_t secret_len)
{
    memset(id, 0, sizeof *id);
    if (secret) {
        if (sha256(secret, secret_len, id->secret)) return -EIO;
        id->has_secret = true;
    }
    id->pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, 32);
    if (!id->pkey) return -EIO;
    return id_publish(id);
}

void uln_seal_id_close(struct uln_seal_id *id)
{
    EVP_PKEY_free(id->pkey);
    OPENSSL_cleanse(id, sizeof *id);
}
