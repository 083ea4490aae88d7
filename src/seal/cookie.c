/*
 * cookie.c - the stateless address cookie (cookie.h): HMAC-SHA256 from
 * libcrypto over a source's address, port and nonce, under a secret that
 * rotates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "seal/cookie.h"

#define KEY_BYTES 32u
#define TAG_BYTES (ULN_COOKIE_BYTES - 1u) /* after the generation byte */
/* What the MAC covers: generation, family, port, address (v6: and scope),
 * nonce. */
#define INPUT_MAX (1u + 2u + 2u + 16u + 4u + ULN_COOKIE_NONCE_BYTES)

/* A MAC context keyed with a fresh random secret, into *slot (freeing what
 * was there: that generation is over). The key itself is not kept. */
static int secret_draw(void **slot)
{
    uint8_t key[KEY_BYTES];
    EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = m ? EVP_MAC_CTX_new(m) : NULL;
    EVP_MAC_free(m); /* the context holds its own reference */
    if (!ctx) return -ENOMEM;
    OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                      OSSL_PARAM_construct_end()};
    int ok = RAND_bytes(key, sizeof key) == 1 && EVP_MAC_init(ctx, key, sizeof key, p) == 1;
    OPENSSL_cleanse(key, sizeof key);
    if (!ok) {
        EVP_MAC_CTX_free(ctx);
        return -EIO;
    }
    EVP_MAC_CTX_free(*slot);
    *slot = ctx;
    return 0;
}

int uln_cookie_open(struct uln_cookie *c, uint64_t now_ns)
{
    *c = (struct uln_cookie){.since_ns = now_ns};
    int rc = secret_draw(&c->mac[0]);
    if (!rc) rc = secret_draw(&c->mac[1]); /* "previous": made nothing, so nothing matches */
    if (rc) uln_cookie_close(c);
    return rc;
}

void uln_cookie_close(struct uln_cookie *c)
{
    EVP_MAC_CTX_free(c->mac[0]);
    EVP_MAC_CTX_free(c->mac[1]);
    c->mac[0] = c->mac[1] = NULL;
}

/* The secret goes on every ULN_COOKIE_ROTATE_NS: one step, the previous
 * one still valid; two or more (a long quiet), both new. */
static int rotate(struct uln_cookie *c, uint64_t now_ns)
{
    if (now_ns - c->since_ns < ULN_COOKIE_ROTATE_NS) return 0;
    uint64_t steps = (now_ns - c->since_ns) / ULN_COOKIE_ROTATE_NS;
    c->since_ns += steps * ULN_COOKIE_ROTATE_NS;
    int rc = 0;
    for (uint64_t i = 0; i < (steps < 2 ? steps : 2) && !rc; i++) {
        c->gen++;
        rc = secret_draw(&c->mac[c->gen & 1u]);
    }
    return rc;
}

/* The bytes the MAC covers, into in; their count, or 0 (not an address of
 * a kind we know). Only the fields that name a source: sin_zero and
 * sin6_flowinfo say nothing of where an answer goes. */
static size_t input_of(uint8_t gen, const void *addr, socklen_t len,
                       const uint8_t nonce[ULN_COOKIE_NONCE_BYTES], uint8_t in[INPUT_MAX])
{
    sa_family_t fam;
    size_t n = 0;
    if (!addr || len < (socklen_t)sizeof fam) return 0;
    memcpy(&fam, addr, sizeof fam);
    in[n++] = gen;
    memcpy(in + n, &fam, 2);
    n += 2;
    if (fam == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        memcpy(in + n, &a.sin_port, 2);
        memcpy(in + n + 2, &a.sin_addr, 4);
        n += 6;
    } else if (fam == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        memcpy(in + n, &a.sin6_port, 2);
        memcpy(in + n + 2, &a.sin6_addr, 16);
        memcpy(in + n + 18, &a.sin6_scope_id, 4);
        n += 22;
    } else {
        return 0;
    }
    memcpy(in + n, nonce, ULN_COOKIE_NONCE_BYTES);
    return n + ULN_COOKIE_NONCE_BYTES;
}

/* The tag of generation gen (current or previous) over in. */
static int tag_of(struct uln_cookie *c, uint8_t gen, const uint8_t *in, size_t n,
                  uint8_t tag[TAG_BYTES])
{
    uint8_t full[32];
    size_t got = 0;
    EVP_MAC_CTX *ctx = c->mac[gen & 1u];
    /* A NULL key starts over with the key set at the draw (HMAC keeps its
     * padded key's state): no allocation per cookie. */
    if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1 || EVP_MAC_update(ctx, in, n) != 1 ||
        EVP_MAC_final(ctx, full, &got, sizeof full) != 1 || got != sizeof full)
        return -EIO;
    memcpy(tag, full, TAG_BYTES);
    return 0;
}

int uln_cookie_make(struct uln_cookie *c, uint64_t now_ns, const void *addr, socklen_t len,
                    const uint8_t nonce[ULN_COOKIE_NONCE_BYTES], uint8_t out[ULN_COOKIE_BYTES])
{
    uint8_t in[INPUT_MAX];
    if (rotate(c, now_ns)) return -EIO;
    size_t n = input_of(c->gen, addr, len, nonce, in);
    if (!n) return -EAFNOSUPPORT;
    out[0] = c->gen;
    return tag_of(c, c->gen, in, n, out + 1);
}

int uln_cookie_check(struct uln_cookie *c, uint64_t now_ns, const void *addr, socklen_t len,
                     const uint8_t nonce[ULN_COOKIE_NONCE_BYTES], const uint8_t *cookie, size_t n)
{
    uint8_t in[INPUT_MAX], tag[TAG_BYTES];
    if (!cookie || n != ULN_COOKIE_BYTES) return -EBADMSG;
    if (rotate(c, now_ns)) return -EIO;
    uint8_t gen = cookie[0];
    if (gen != c->gen && gen != (uint8_t)(c->gen - 1u)) return -ESTALE;
    size_t m = input_of(gen, addr, len, nonce, in);
    if (!m) return -EAFNOSUPPORT;
    int rc = tag_of(c, gen, in, m, tag);
    if (rc) return rc;
    return CRYPTO_memcmp(tag, cookie + 1, TAG_BYTES) ? -EBADMSG : 0;
}
