/*
 * seal.c - a pair of endpoints' sealing state: the key agreement and
 * derivation, sealing a datagram to send and opening one received (seal.h).
 *
 * A direction's state belongs to whoever sends, or receives, on that
 * endpoint towards that peer; the caller serialises its use (the transport's
 * endpoint lock), so nothing here is shared between threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "seal/seal.h"

#ifdef ULN_HAVE_SODIUM
#include <sodium.h>
#endif

#define NONCE_BYTES 12u
#define LABEL       "ulnet-seal-v1"

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

#define LEN_AT (ULN_SEAL_CTR_BYTES) /* the length field's place in the trailer */
#define TAG_AT (ULN_SEAL_CTR_BYTES + ULN_SEAL_LEN_BYTES)

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void nonce(uint8_t n[NONCE_BYTES], uint32_t epoch, uint64_t ctr)
{
    put_le(n, epoch, 4);
    put_le(n + 4, ctr, 8);
}

/* X25519 of our private key and the peer's public one. -EINVAL when the
 * result is all zero: a low-order point, whose "shared" secret anyone knows. */
static int agree(const struct uln_seal_id *me, const uint8_t peer_pub[32], uint8_t shared[32])
{
    EVP_PKEY *peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_pub, 32);
    EVP_PKEY_CTX *c = peer ? EVP_PKEY_CTX_new(me->pkey, NULL) : NULL;
    size_t n = 32;
    int ok = c && EVP_PKEY_derive_init(c) == 1 && EVP_PKEY_derive_set_peer(c, peer) == 1 &&
             EVP_PKEY_derive(c, shared, &n) == 1 && n == 32;
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(peer);
    uint8_t zero = 0;
    for (int i = 0; i < 32; i++)
        zero |= ok ? shared[i] : 0;
    if (!ok || !zero) return peer ? -EINVAL : -EIO;
    return 0;
}

/* The HKDF info of the direction from sender s to receiver r: everything
 * both sides must agree on, so that any difference gives different keys. */
static size_t dir_info(uint8_t *b, enum uln_seal_mode mode, enum uln_seal_cipher cipher,
                       bool has_secret, const uint8_t *pub_s, const uint8_t *pub_r,
                       uint32_t epoch_s, uint32_t epoch_r, uint16_t ep_s, uint16_t ep_r)
{
    size_t n = sizeof LABEL - 1;
    memcpy(b, LABEL, n);
    b[n++] = (uint8_t)mode;
    b[n++] = (uint8_t)cipher;
    b[n++] = has_secret;
    memcpy(b + n, pub_s, 32);
    memcpy(b + n + 32, pub_r, 32);
    n += 64;
    put_le(b + n, epoch_s, 4);
    put_le(b + n + 4, epoch_r, 4);
    put_le(b + n + 8, ep_s, 2);
    put_le(b + n + 10, ep_r, 2);
    return n + 12;
}

/* HKDF-SHA256: salt the job secret (none: HKDF's zero salt), key material
 * the shared point, info the direction's. */
static int hkdf(const struct uln_seal_id *me, const uint8_t shared[32], const uint8_t *info,
                size_t info_len, uint8_t key[32])
{
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t n = 32;
    int ok = c && EVP_PKEY_derive_init(c) == 1 && EVP_PKEY_CTX_set_hkdf_md(c, EVP_sha256()) == 1 &&
             (!me->has_secret ||
              EVP_PKEY_CTX_set1_hkdf_salt(c, me->secret, ULN_SEAL_SECRET_BYTES) == 1) &&
             EVP_PKEY_CTX_set1_hkdf_key(c, shared, 32) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(c, info, (int)info_len) == 1 &&
             EVP_PKEY_derive(c, key, &n) == 1 && n == 32;
    EVP_PKEY_CTX_free(c);
    return ok ? 0 : -EIO;
}

/* A cipher context keyed once: each datagram then sets only its nonce. */
static void *keyed(enum uln_seal_cipher cipher, const uint8_t key[32], int enc)
{
    const EVP_CIPHER *ci =
        cipher == ULN_SEAL_AES_256_GCM ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (c && EVP_CipherInit_ex(c, ci, NULL, NULL, NULL, enc) == 1 &&
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_IVLEN, NONCE_BYTES, NULL) == 1 &&
        EVP_CipherInit_ex(c, NULL, NULL, key, NULL, enc) == 1)
        return c;
    EVP_CIPHER_CTX_free(c);
    return NULL;
}

/* AES-GCM's receiving side: the nonce's first word (the peer's epoch) fixed
 * once, so that each datagram then gives the rest of its nonce (the counter,
 * as it came) and its tag in one parameter call, where EVP's Init would
 * otherwise cost a call of its own, itself asking the provider the nonce's
 * length (~50 ns of the ~160 an open costs, OpenSSL 3.0). These are the
 * parameters TLS records use (a fixed part, then an explicit part per
 * record); the nonce is the same bytes either way. false: use Init. */
static bool rx_fix_epoch(struct uln_seal_rx *rx)
{
    uint8_t iv[NONCE_BYTES];
    nonce(iv, rx->epoch, 0);
    /* -1: the whole nonce given, the per-datagram part included (a partial
     * fixed part would draw the rest at random). */
    return EVP_CIPHER_CTX_ctrl(rx->cipher, EVP_CTRL_GCM_SET_IV_FIXED, -1, iv) == 1;
}

/* A datagram of this many bytes or fewer, in more than one piece, is gathered
 * into one buffer and sealed with one cipher call: each EVP call costs some
 * 20-30 ns whatever its length, more than copying such a datagram. Such a
 * datagram is also where libsodium, where built in, seals and opens for
 * less than libcrypto: one call of ~60 ns (AES-256-GCM, 44 bytes, auth)
 * against four EVP calls of ~165 (bench/seal_cost.c; docs/security.md). For
 * larger ones OpenSSL's stitched AES-GCM is the faster (1448 bytes under
 * encrypt: ~0.5 us against libsodium 1.0.18's ~0.9), so they stay there.
 * Both are the same AEAD under the same key and nonce: the wire is one. */
#define GATHER_MAX 256u

#ifdef ULN_HAVE_SODIUM
struct small {
    crypto_aead_aes256gcm_state aes; /* AES-256-GCM's expanded key, first: aligned */
    uint8_t key[32];                 /* ChaCha20-Poly1305's */
    bool aes_gcm;
};

/* libsodium's state for key, or NULL where it cannot serve: AES-256-GCM
 * without the CPU's instructions for it (libsodium has no other), or
 * sodium_init failing. */
static void *small_open(enum uln_seal_cipher cipher, const uint8_t key[32])
{
    if (sodium_init() < 0) return NULL; /* thread-safe, once */
    bool aes = cipher == ULN_SEAL_AES_256_GCM;
    if (aes && !crypto_aead_aes256gcm_is_available()) return NULL;
    struct small *sm = aligned_alloc(64, (sizeof *sm + 63) & ~(size_t)63);
    if (!sm) return NULL;
    sm->aes_gcm = aes;
    memcpy(sm->key, key, 32);
    if (aes) crypto_aead_aes256gcm_beforenm(&sm->aes, key);
    return sm;
}

static void small_close(void *p)
{
    if (!p) return;
    sodium_memzero(p, sizeof(struct small));
    free(p);
}

/* One datagram of plen bytes at b (contiguous): under encrypt b becomes
 * ciphertext; the tag into tag. 0 or -EIO. */
static int small_seal(const struct small *sm, bool enc, const uint8_t iv[NONCE_BYTES], uint8_t *b,
                      size_t plen, uint8_t tag[ULN_SEAL_TAG_BYTES])
{
    /* auth: no message, b the additional data; encrypt: b the message, in
     * place. The ciphertext pointer is b either way (libsodium declares it
     * never NULL; with no message nothing is written there). */
    uint8_t *ad = enc ? NULL : b;
    size_t mlen = enc ? plen : 0, adlen = enc ? 0 : plen;
    int rc = sm->aes_gcm ? crypto_aead_aes256gcm_encrypt_detached_afternm(b, tag, NULL, b, mlen, ad,
                                                                          adlen, NULL, iv, &sm->aes)
                         : crypto_aead_chacha20poly1305_ietf_encrypt_detached(
                               b, tag, NULL, b, mlen, ad, adlen, NULL, iv, sm->key);
    return rc ? -EIO : 0;
}

/* Opens plen bytes at b in place; -EBADMSG when the tag does not check out. */
static int small_open_dgram(const struct small *sm, bool enc, const uint8_t iv[NONCE_BYTES],
                            uint8_t *b, size_t plen, const uint8_t tag[ULN_SEAL_TAG_BYTES])
{
    uint8_t *ad = enc ? NULL : b; /* as small_seal */
    size_t clen = enc ? plen : 0, adlen = enc ? 0 : plen;
    int rc = sm->aes_gcm ? crypto_aead_aes256gcm_decrypt_detached_afternm(b, NULL, b, clen, tag, ad,
                                                                          adlen, iv, &sm->aes)
                         : crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                               b, NULL, b, clen, tag, ad, adlen, iv, sm->key);
    return rc ? -EBADMSG : 0;
}
#else
static void *small_open(enum uln_seal_cipher cipher, const uint8_t key[32])
{
    (void)cipher, (void)key;
    return NULL;
}
static void small_close(void *p)
{
    (void)p;
}
static int small_seal(const void *sm, bool enc, const uint8_t *iv, uint8_t *b, size_t plen,
                      uint8_t *tag)
{
    return -EIO; /* never called: no state */
}
static int small_open_dgram(const void *sm, bool enc, const uint8_t *iv, uint8_t *b, size_t plen,
                            const uint8_t *tag)
{
    return -EBADMSG;
}
#endif

int uln_seal_pair_open(struct uln_seal_pair *p, const struct uln_seal_id *me,
                       const uint8_t peer_pub[ULN_SEAL_PUB_BYTES], const struct uln_seal_ends *e,
                       enum uln_seal_mode mode, enum uln_seal_cipher cipher)
{
    memset(p, 0, sizeof *p);
    if (mode == ULN_SEAL_OFF || !e->my_epoch || !e->peer_epoch) return -EINVAL;
    uint8_t shared[32], ktx[32], krx[32], info[128];
    int rc = agree(me, peer_pub, shared);
    size_t n;
    if (!rc) {
        n = dir_info(info, mode, cipher, me->has_secret, me->pub, peer_pub, e->my_epoch,
                     e->peer_epoch, e->my_ep, e->peer_ep);
        rc = hkdf(me, shared, info, n, ktx);
    }
    if (!rc) {
        n = dir_info(info, mode, cipher, me->has_secret, peer_pub, me->pub, e->peer_epoch,
                     e->my_epoch, e->peer_ep, e->my_ep);
        rc = hkdf(me, shared, info, n, krx);
    }
    if (!rc) {
        p->tx = (struct uln_seal_tx){
            .cipher = keyed(cipher, ktx, 1), .epoch = e->my_epoch, .mode = mode};
        p->rx.cipher = keyed(cipher, krx, 0);
        p->rx.epoch = e->peer_epoch;
        p->rx.mode = mode;
        if (!p->tx.cipher || !p->rx.cipher) rc = -ENOMEM;
        p->tx.small = small_open(cipher, ktx); /* NULL: libcrypto seals all */
        p->rx.small = small_open(cipher, krx);
        if (!rc && cipher == ULN_SEAL_AES_256_GCM) p->rx.one_call = rx_fix_epoch(&p->rx);
    }
    OPENSSL_cleanse(shared, sizeof shared);
    OPENSSL_cleanse(ktx, sizeof ktx);
    OPENSSL_cleanse(krx, sizeof krx);
    if (rc) uln_seal_pair_close(p);
    return rc;
}

void uln_seal_pair_close(struct uln_seal_pair *p)
{
    EVP_CIPHER_CTX_free(p->tx.cipher);
    EVP_CIPHER_CTX_free(p->rx.cipher);
    small_close(p->tx.small);
    small_close(p->rx.small);
    memset(p, 0, sizeof *p);
}

/* The tag, read and written through the provider's parameters directly: the
 * EVP_CIPHER_CTX_ctrl round trip builds the same parameter array each time
 * and costs 30 ns more (OpenSSL 3.0, `bench/seal_cost.c`). */
static int tag_param(EVP_CIPHER_CTX *c, uint8_t tag[ULN_SEAL_TAG_BYTES], bool get)
{
    OSSL_PARAM p[2] = {OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, ULN_SEAL_TAG_BYTES),
                       OSSL_PARAM_END};
    return get ? EVP_CIPHER_CTX_get_params(c, p) : EVP_CIPHER_CTX_set_params(c, p);
}

/* The pieces' bytes through the cipher: one Update per piece, or one for all
 * when they are few bytes (GATHER_MAX). */
static int tx_pieces(EVP_CIPHER_CTX *c, bool enc, const struct iovec *in, const struct iovec *out,
                     int n, size_t total)
{
    int outl;
    if (n > 1 && total <= GATHER_MAX) {
        uint8_t b[GATHER_MAX];
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            memcpy(b + at, in[i].iov_base, in[i].iov_len);
            at += in[i].iov_len;
        }
        if (EVP_EncryptUpdate(c, enc ? b : NULL, &outl, b, (int)total) != 1) return -EIO;
        if (!enc) return 0;
        at = 0;
        for (int i = 0; i < n; i++) {
            memcpy(out ? out[i].iov_base : in[i].iov_base, b + at, in[i].iov_len);
            at += in[i].iov_len;
        }
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!in[i].iov_len) continue;
        /* auth: the piece is additional data, read only; encrypt: ciphertext
         * into out (or over the piece itself). */
        uint8_t *dst = enc ? (out ? out[i].iov_base : in[i].iov_base) : NULL;
        if (EVP_EncryptUpdate(c, dst, &outl, in[i].iov_base, (int)in[i].iov_len) != 1) return -EIO;
    }
    return 0;
}

/* A small datagram through libsodium: gathered, sealed (under encrypt the
 * ciphertext goes back into the pieces, or out), one call. */
static int small_tx(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out, int n,
                    size_t plen, const uint8_t iv[NONCE_BYTES], uint8_t tag[ULN_SEAL_TAG_BYTES])
{
    uint8_t b[GATHER_MAX];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].iov_len) memcpy(b + at, in[i].iov_base, in[i].iov_len);
        at += in[i].iov_len;
    }
    bool enc = tx->mode == ULN_SEAL_ENCRYPT;
    int rc = small_seal(tx->small, enc, iv, b, plen, tag);
    if (rc || !enc) return rc;
    at = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].iov_len) memcpy(out ? out[i].iov_base : in[i].iov_base, b + at, in[i].iov_len);
        at += in[i].iov_len;
    }
    return 0;
}

static int seal_tx(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out, int n,
                   size_t intro, uint8_t trailer[ULN_SEAL_TRAILER])
{
    /* ULN_SEAL_INTRO_FLAG - 1 is never sent, so a receiver's "one past the
     * newest" fits below the flag. */
    if (tx->next >= ULN_SEAL_INTRO_FLAG - 1) return -EOVERFLOW;
    if (n < 0 || n > ULN_SEAL_MAX_IOV) return -EINVAL;
    size_t total = ULN_SEAL_TRAILER + intro;
    for (int i = 0; i < n; i++) {
        if (in[i].iov_len > ULN_SEAL_DGRAM_MAX) return -EMSGSIZE;
        total += in[i].iov_len;
    }
    if (total > ULN_SEAL_DGRAM_MAX) return -EMSGSIZE;
    uint64_t ctr = tx->next++; /* spent even if sealing fails: never reused */
    uint8_t iv[NONCE_BYTES], fin[16];
    EVP_CIPHER_CTX *c = tx->cipher;
    int outl;
    nonce(iv, tx->epoch, ctr);
    size_t plen = total - ULN_SEAL_TRAILER - intro;
    if (tx->small && plen <= GATHER_MAX) {
        int rc = small_tx(tx, in, out, n, plen, iv, trailer + TAG_AT);
        if (rc) return rc;
        put_le(trailer, ctr | (intro ? ULN_SEAL_INTRO_FLAG : 0), 8);
        put_le(trailer + LEN_AT, total, 2);
        return 0;
    }
    /* Only the nonce is new: the key schedule stays as keyed() left it. */
    if (EVP_EncryptInit_ex2(c, NULL, NULL, iv, NULL) != 1) return -EIO;
    int rc =
        tx_pieces(c, tx->mode == ULN_SEAL_ENCRYPT, in, out, n, total - ULN_SEAL_TRAILER - intro);
    if (rc) return rc;
    if (EVP_EncryptFinal_ex(c, fin, &outl) != 1) return -EIO;
    put_le(trailer, ctr | (intro ? ULN_SEAL_INTRO_FLAG : 0), 8);
    put_le(trailer + LEN_AT, total, 2);
    if (tag_param(c, trailer + TAG_AT, true) != 1) return -EIO;
    return 0;
}

int uln_seal_tx(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out, int n,
                uint8_t trailer[ULN_SEAL_TRAILER])
{
    return seal_tx(tx, in, out, n, 0, trailer);
}

int uln_seal_tx_intro(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out,
                      int n, uint8_t trailer[ULN_SEAL_TRAILER])
{
    return seal_tx(tx, in, out, n, ULN_SEAL_INTRO, trailer);
}

const uint8_t *uln_seal_intro(const uint8_t *dgram, size_t len)
{
    if (len < ULN_SEAL_TRAILER + ULN_SEAL_INTRO) return NULL;
    const uint8_t *t = dgram + len - ULN_SEAL_TRAILER;
    return t[7] & 0x80u ? t - ULN_SEAL_INTRO : NULL; /* the counter's top bit */
}

/* 0 when counter c may be accepted, before any cipher work. */
static int window_check(const struct uln_seal_rx *rx, uint64_t c)
{
    if (c >= ULN_SEAL_INTRO_FLAG - 1) return -EBADMSG; /* never sent (seal_tx) */
    if (c >= rx->top) return 0;
    if (rx->top - c > ULN_SEAL_WINDOW) return -ESTALE;
    return rx->seen[(c / 64) % (ULN_SEAL_WINDOW / 64)] >> (c % 64) & 1 ? -EALREADY : 0;
}

static void window_bit(struct uln_seal_rx *rx, uint64_t c, bool on)
{
    uint64_t *w = &rx->seen[(c / 64) % (ULN_SEAL_WINDOW / 64)], b = 1ull << (c % 64);
    *w = on ? *w | b : *w & ~b;
}

/* Counter c has authenticated: mark it, and slide the window up to it. The
 * positions between the old top and c held counters a window older, now
 * out of it: clear them. */
static void window_accept(struct uln_seal_rx *rx, uint64_t c)
{
    if (c >= rx->top) {
        if (c - rx->top >= ULN_SEAL_WINDOW) {
            memset(rx->seen, 0, sizeof rx->seen);
        } else {
            for (uint64_t x = rx->top; x < c; x++)
                window_bit(rx, x, false);
        }
        rx->top = c + 1;
    }
    window_bit(rx, c, true);
}

long uln_seal_rx(struct uln_seal_rx *rx, uint8_t *dgram, size_t len)
{
    if (len < ULN_SEAL_TRAILER || len > ULN_SEAL_DGRAM_MAX) return -EMSGSIZE;
    uint8_t *trailer = dgram + len - ULN_SEAL_TRAILER;
    uint64_t ctr = get_le64(trailer);
    size_t intro = ctr & ULN_SEAL_INTRO_FLAG ? ULN_SEAL_INTRO : 0;
    if (len < ULN_SEAL_TRAILER + intro) return -EMSGSIZE;
    size_t plen = len - ULN_SEAL_TRAILER - intro;
    ctr &= ~ULN_SEAL_INTRO_FLAG;
    /* A length not its own: cut or grown on the way, or cut wrongly out of a
     * run (uln_seal_len). No cipher call spent; the tag would fail too,
     * save for a change of the field alone, which this refuses. */
    if (uln_seal_len(dgram, (uint32_t)len) != len) return -EBADMSG;
    int rc = window_check(rx, ctr);
    if (rc) return rc;
    uint8_t iv[NONCE_BYTES], tag[ULN_SEAL_TAG_BYTES], fin[16];
    EVP_CIPHER_CTX *c = rx->cipher;
    int outl;
    memcpy(tag, trailer + TAG_AT, sizeof tag);
    if (rx->small && plen <= GATHER_MAX) {
        nonce(iv, rx->epoch, ctr);
        rc = small_open_dgram(rx->small, rx->mode == ULN_SEAL_ENCRYPT, iv, dgram, plen, tag);
        if (rc) return rc;
        window_accept(rx, ctr);
        return (long)plen;
    }
    if (rx->one_call && !intro) {
        /* the counter's bytes as they came are the nonce's last 8 (nonce()) */
        OSSL_PARAM p[3] = {
            OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_SET_IV_INV, trailer,
                                    ULN_SEAL_CTR_BYTES),
            OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, ULN_SEAL_TAG_BYTES),
            OSSL_PARAM_END};
        if (EVP_CIPHER_CTX_set_params(c, p) != 1) return -EIO;
    } else {
        nonce(iv, rx->epoch, ctr);
        if (EVP_DecryptInit_ex2(c, NULL, NULL, iv, NULL) != 1) return -EIO;
        if (tag_param(c, tag, false) != 1) return -EIO;
    }
    uint8_t *dst = rx->mode == ULN_SEAL_ENCRYPT ? dgram : NULL; /* in place */
    if (plen && EVP_DecryptUpdate(c, dst, &outl, dgram, (int)plen) != 1) return -EBADMSG;
    if (EVP_DecryptFinal_ex(c, fin, &outl) != 1) return -EBADMSG;
    window_accept(rx, ctr);
    return (long)plen;
}

uint32_t uln_seal_len(const uint8_t *buf, uint32_t end)
{
    if (end < ULN_SEAL_TRAILER) return 0;
    const uint8_t *f = buf + end - ULN_SEAL_TRAILER + LEN_AT;
    uint32_t n = (uint32_t)f[0] | (uint32_t)f[1] << 8;
    return n >= ULN_SEAL_TRAILER && n <= end ? n : 0;
}

const char *uln_seal_libraries(void)
{
#ifdef ULN_HAVE_SODIUM
    return "OpenSSL libcrypto; libsodium for datagrams of up to 256 bytes";
#else
    return "OpenSSL libcrypto (built without libsodium)";
#endif
}
