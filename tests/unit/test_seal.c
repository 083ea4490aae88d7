/*
 * test_seal.c - sealed datagrams (src/seal/): the key agreement against RFC
 * 7748's vectors, the documented derivation recomputed here on its own and
 * checked against what the module seals and opens (both ciphers, both modes,
 * with and without a job secret), round trips of every shape, and the
 * refusals a user relies on: every bit flipped, every truncation, replays
 * inside and outside the window, another life's or another pair's keys, a
 * reflected datagram, a secret file others can read, a low-order peer key.
 * Nonces: a resend of the same bytes gets a new counter, and no counter is
 * ever used twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "seal/seal.h"

#include "check.h"

static void unhex(const char *h, uint8_t *out)
{
    for (size_t i = 0; h[2 * i]; i++)
        sscanf(h + 2 * i, "%2hhx", &out[i]);
}

/* RFC 7748, section 6.1. */
static const char *const A_PRIV =
    "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
static const char *const A_PUB = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
static const char *const B_PRIV =
    "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb";
static const char *const B_PUB = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
static const char *const SHARED =
    "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";

static const struct uln_seal_ends A_ENDS = {
    .my_epoch = 0x11111111, .peer_epoch = 0x22222222, .my_ep = 0, .peer_ep = 3};
static const struct uln_seal_ends B_ENDS = {
    .my_epoch = 0x22222222, .peer_epoch = 0x11111111, .my_ep = 3, .peer_ep = 0};

static const char SECRET[] = "a job secret of the test, 32+ bytes";

struct two {
    struct uln_seal_id a, b;
    struct uln_seal_pair pa, pb;
};

static int two_open(struct two *t, enum uln_seal_mode mode, enum uln_seal_cipher cipher,
                    bool secret)
{
    uint8_t ka[32], kb[32];
    unhex(A_PRIV, ka);
    unhex(B_PRIV, kb);
    const uint8_t *s = secret ? (const uint8_t *)SECRET : NULL;
    if (uln_seal_id_open_raw(&t->a, ka, s, sizeof SECRET - 1) ||
        uln_seal_id_open_raw(&t->b, kb, s, sizeof SECRET - 1))
        return -1;
    if (uln_seal_pair_open(&t->pa, &t->a, t->b.pub, &A_ENDS, mode, cipher) ||
        uln_seal_pair_open(&t->pb, &t->b, t->a.pub, &B_ENDS, mode, cipher))
        return -1;
    return 0;
}

static void two_close(struct two *t)
{
    uln_seal_pair_close(&t->pa);
    uln_seal_pair_close(&t->pb);
    uln_seal_id_close(&t->a);
    uln_seal_id_close(&t->b);
}

/* Seals plain (n bytes) from A to B into d (room for the trailer). */
static void seal_ab(struct two *t, const uint8_t *plain, size_t n, uint8_t *d)
{
    memcpy(d, plain, n);
    struct iovec io = {d, n};
    CHECK_EQ(uln_seal_tx(&t->pa.tx, &io, NULL, 1, d + n), 0);
}

static void test_x25519_vectors(void)
{
    uint8_t pa[32], pb[32];
    unhex(A_PUB, pa);
    unhex(B_PUB, pb);
    struct two t;
    CHECK_EQ(two_open(&t, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM, false), 0);
    CHECK(!memcmp(t.a.pub, pa, 32));
    CHECK(!memcmp(t.b.pub, pb, 32));
    two_close(&t);
}

/* The derivation as seal.h documents it, written out again here with
 * another libcrypto interface (EVP_KDF): the key of the direction s -> r. */
static void direction_key(enum uln_seal_mode mode, enum uln_seal_cipher cipher, bool secret,
                          const char *pub_s, const char *pub_r, const struct uln_seal_ends *s_ends,
                          uint8_t key[32])
{
    uint8_t info[128], shared[32], salt[32];
    size_t n = 0;
    memcpy(info, "ulnet-seal-v1", 13);
    n = 13;
    info[n++] = (uint8_t)mode;
    info[n++] = (uint8_t)cipher;
    info[n++] = secret;
    unhex(pub_s, info + n);
    unhex(pub_r, info + n + 32);
    n += 64;
    for (int i = 0; i < 4; i++)
        info[n + i] = (uint8_t)(s_ends->my_epoch >> (8 * i));
    for (int i = 0; i < 4; i++)
        info[n + 4 + i] = (uint8_t)(s_ends->peer_epoch >> (8 * i));
    info[n + 8] = (uint8_t)s_ends->my_ep;
    info[n + 9] = (uint8_t)(s_ends->my_ep >> 8);
    info[n + 10] = (uint8_t)s_ends->peer_ep;
    info[n + 11] = (uint8_t)(s_ends->peer_ep >> 8);
    n += 12;
    unhex(SHARED, shared);
    unsigned int sl = 0;
    EVP_Digest(SECRET, sizeof SECRET - 1, salt, &sl, EVP_sha256(), NULL);
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kc = EVP_KDF_CTX_new(kdf);
    OSSL_PARAM p[5], *q = p;
    *q++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0);
    *q++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, shared, 32);
    *q++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
    if (secret) *q++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt, 32);
    *q = OSSL_PARAM_construct_end();
    CHECK_EQ(EVP_KDF_derive(kc, key, 32, p), 1);
    EVP_KDF_CTX_free(kc);
    EVP_KDF_free(kdf);
}

/* One AEAD operation with a raw key, as a peer that is not ulnet would do it:
 * enc 1 seals d[0..n) (AAD under auth) and writes the tag; enc 0 opens. */
static int raw_aead(enum uln_seal_mode mode, enum uln_seal_cipher cipher, const uint8_t key[32],
                    uint32_t epoch, uint64_t ctr, uint8_t *d, int n, uint8_t tag[16], int enc)
{
    uint8_t iv[12], fin[16];
    for (int i = 0; i < 4; i++)
        iv[i] = (uint8_t)(epoch >> (8 * i));
    for (int i = 0; i < 8; i++)
        iv[4 + i] = (uint8_t)(ctr >> (8 * i));
    const EVP_CIPHER *ci =
        cipher == ULN_SEAL_AES_256_GCM ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int l, ok = EVP_CipherInit_ex(c, ci, NULL, key, iv, enc) == 1;
    if (!enc) ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag) == 1;
    ok = ok && EVP_CipherUpdate(c, mode == ULN_SEAL_ENCRYPT ? d : NULL, &l, d, n) == 1;
    ok = ok && EVP_CipherFinal_ex(c, fin, &l) == 1;
    if (enc) ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

/* What A seals opens with the recomputed key, and what a raw sealer makes
 * with the recomputed key B opens: the construction is the documented one. */
static void test_known_answer(enum uln_seal_mode mode, enum uln_seal_cipher cipher, bool secret)
{
    struct two t;
    CHECK_EQ(two_open(&t, mode, cipher, secret), 0);
    uint8_t kab[32], kba[32];
    direction_key(mode, cipher, secret, A_PUB, B_PUB, &A_ENDS, kab);
    direction_key(mode, cipher, secret, B_PUB, A_PUB, &B_ENDS, kba);
    const char msg[] = "ulnet's known answer: a datagram";
    int n = (int)sizeof msg;
    uint8_t d[128];
    t.pa.tx.next = 0x0102030405060708ull; /* every byte of the counter matters */
    seal_ab(&t, (const uint8_t *)msg, (size_t)n, d);
    uint64_t ctr = 0;
    for (int i = 7; i >= 0; i--)
        ctr = ctr << 8 | d[n + i];
    CHECK_EQ(ctr, 0x0102030405060708ull);
    /* the length field: the whole sealed datagram's, little-endian */
    CHECK_EQ(d[n + 8] | d[n + 9] << 8, n + (int)ULN_SEAL_TRAILER);
    CHECK_EQ(memcmp(d, msg, (size_t)n) != 0, mode == ULN_SEAL_ENCRYPT);
    CHECK_EQ(raw_aead(mode, cipher, kab, A_ENDS.my_epoch, ctr, d, n, d + n + 10, 0), 0);
    CHECK(!memcmp(d, msg, (size_t)n));

    /* B -> A by a raw sealer with kba, counter 5: A opens it. */
    memcpy(d, msg, (size_t)n);
    for (int i = 0; i < 8; i++)
        d[n + i] = (uint8_t)(UINT64_C(5) >> (8 * i));
    d[n + 8] = (uint8_t)(n + (int)ULN_SEAL_TRAILER);
    d[n + 9] = (uint8_t)((n + (int)ULN_SEAL_TRAILER) >> 8);
    CHECK_EQ(raw_aead(mode, cipher, kba, B_ENDS.my_epoch, 5, d, n, d + n + 10, 1), 0);
    CHECK_EQ(uln_seal_rx(&t.pa.rx, d, (size_t)n + ULN_SEAL_TRAILER), n);
    CHECK(!memcmp(d, msg, (size_t)n));
    two_close(&t);
}

/* Pieces of many lengths, in place and out of place, open to the bytes.
 * mix 1: sealed by libcrypto alone, 2: opened by it alone (where libsodium
 * is built in it takes the small datagrams otherwise: the same AEAD, so
 * either side may be either library). */
static void round_trips(enum uln_seal_mode mode, enum uln_seal_cipher cipher, int mix)
{
    struct two t;
    CHECK_EQ(two_open(&t, mode, cipher, true), 0);
    void *tx_small = t.pa.tx.small, *rx_small = t.pb.rx.small;
    if (mix == 1) t.pa.tx.small = NULL;
    if (mix == 2) t.pb.rx.small = NULL;
    static const size_t lens[] = {0, 1, 15, 16, 17, 36, 64, 255, 1000, 1448, 8952, 65000};
    static uint8_t src[65536], dst[65536 + ULN_SEAL_TRAILER];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    int bad = 0;
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        size_t n = lens[k];
        /* three pieces: a header, a payload and the rest, out of place (the
         * payload as if gathered from a user's buffer the sealer must not
         * touch) */
        size_t h = n < 36 ? n : 36, m = (n - h) / 2;
        struct iovec in[3] = {{src, h}, {src + h, m}, {src + h + m, n - h - m}};
        struct iovec out[3] = {{dst, h}, {dst + h, m}, {dst + h + m, n - h - m}};
        if (mode == ULN_SEAL_AUTH) memcpy(dst, src, n); /* auth sends the bytes as they are */
        uint8_t keep = src[n / 2];
        CHECK_EQ(uln_seal_tx(&t.pa.tx, in, out, 3, dst + n), 0);
        CHECK_EQ(src[n / 2], keep);
        bad += uln_seal_rx(&t.pb.rx, dst, n + ULN_SEAL_TRAILER) != (long)n;
        bad += memcmp(dst, src, n) != 0;
    }
    CHECK_EQ(bad, 0);
    t.pa.tx.small = tx_small;
    t.pb.rx.small = rx_small;
    two_close(&t);
}

static void test_round_trips(enum uln_seal_mode mode, enum uln_seal_cipher cipher)
{
    for (int mix = 0; mix < 3; mix++)
        round_trips(mode, cipher, mix);
}

/* A run of sealed datagrams read as one (the kernel's GRO, read without its
 * segment size) is cut where they end by the length fields, from the back;
 * every piece then opens to its bytes. A datagram longer than the length
 * field reaches is refused at sealing. */
static void test_run_cut(enum uln_seal_mode mode)
{
    struct two t;
    CHECK_EQ(two_open(&t, mode, ULN_SEAL_AES_256_GCM, false), 0);
    static const size_t lens[] = {1000, 1000, 1000, 300};
    enum { NRUN = 4 };
    static uint8_t run[4 * (1000 + ULN_SEAL_TRAILER)];
    uint8_t plain[1000];
    size_t at = 0, starts[NRUN];
    for (int k = 0; k < NRUN; k++) {
        memset(plain, 'a' + k, sizeof plain);
        starts[k] = at;
        seal_ab(&t, plain, lens[k], run + at);
        at += lens[k] + ULN_SEAL_TRAILER;
    }
    uint32_t end = (uint32_t)at;
    for (int k = NRUN - 1; k >= 0; k--) {
        uint32_t n = uln_seal_len(run, end);
        CHECK_EQ(n, lens[k] + ULN_SEAL_TRAILER);
        CHECK_EQ(end - n, starts[k]);
        CHECK_EQ(uln_seal_rx(&t.pb.rx, run + end - n, n), (long)lens[k]);
        CHECK_EQ(run[end - n], (uint8_t)('a' + k));
        end -= n;
    }
    CHECK_EQ(end, 0);
    CHECK_EQ(uln_seal_len(run, ULN_SEAL_TRAILER - 1), 0); /* no room for a trailer */
    static uint8_t big[ULN_SEAL_DGRAM_MAX + 1];
    struct iovec io = {big, ULN_SEAL_DGRAM_MAX - ULN_SEAL_TRAILER + 1};
    CHECK_EQ(uln_seal_tx(&t.pa.tx, &io, NULL, 1, big + io.iov_len - ULN_SEAL_TRAILER), -EMSGSIZE);
    two_close(&t);
}

/* Every bit of a datagram, flipped alone, is refused; so is every shorter
 * length and a datagram with bytes appended. None moves the window: the
 * untouched datagram still opens afterwards, once. */
static void test_tamper(enum uln_seal_mode mode, enum uln_seal_cipher cipher)
{
    struct two t;
    CHECK_EQ(two_open(&t, mode, cipher, false), 0);
    uint8_t plain[100], d[100 + ULN_SEAL_TRAILER + 8], x[sizeof d];
    for (size_t i = 0; i < sizeof plain; i++)
        plain[i] = (uint8_t)i;
    size_t n = sizeof plain + ULN_SEAL_TRAILER;
    seal_ab(&t, plain, sizeof plain, d);
    int opened = 0;
    for (size_t bit = 0; bit < 8 * n; bit++) {
        memcpy(x, d, n);
        x[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        opened += uln_seal_rx(&t.pb.rx, x, n) >= 0;
    }
    for (size_t len = 0; len < n; len++) {
        memcpy(x, d, n);
        opened += uln_seal_rx(&t.pb.rx, x, len) >= 0;
    }
    memcpy(x, d, n);
    memset(x + n, 0, 8);
    opened += uln_seal_rx(&t.pb.rx, x, n + 8) >= 0;
    CHECK_EQ(opened, 0);
    CHECK_EQ(t.pb.rx.top, 0); /* no refusal moved the window */
    memcpy(x, d, n);
    CHECK_EQ(uln_seal_rx(&t.pb.rx, x, n), (long)sizeof plain);
    CHECK(!memcmp(x, plain, sizeof plain));
    memcpy(x, d, n);
    CHECK_EQ(uln_seal_rx(&t.pb.rx, x, n), -EALREADY);
    two_close(&t);
}

/* Replays inside the window are refused, reordering inside it is accepted,
 * and anything a window behind the newest is refused as stale. */
static void test_replay_window(void)
{
    struct two t;
    CHECK_EQ(two_open(&t, ULN_SEAL_ENCRYPT, ULN_SEAL_AES_256_GCM, true), 0);
    enum { N = ULN_SEAL_WINDOW + 200 };
    static uint8_t d[N][8 + ULN_SEAL_TRAILER], x[8 + ULN_SEAL_TRAILER];
    size_t n = sizeof x;
    for (int i = 0; i < N; i++) {
        uint8_t p[8];
        memcpy(p, &i, sizeof i);
        memset(p + 4, 0xee, 4);
        seal_ab(&t, p, 8, d[i]);
    }
    /* 0..99 backwards (reordered): all accepted, then each replayed: refused */
    int ok = 0, replay = 0;
    for (int i = 99; i >= 0; i--) {
        memcpy(x, d[i], n);
        ok += uln_seal_rx(&t.pb.rx, x, n) == 8 && !memcmp(x, &i, sizeof i);
    }
    for (int i = 0; i < 100; i++) {
        memcpy(x, d[i], n);
        replay += uln_seal_rx(&t.pb.rx, x, n) == -EALREADY;
    }
    CHECK_EQ(ok, 100);
    CHECK_EQ(replay, 100);
    /* a jump to the last: 0..199 now sit more than a window behind */
    memcpy(x, d[N - 1], n);
    CHECK_EQ(uln_seal_rx(&t.pb.rx, x, n), 8);
    int stale = 0, late_ok = 0;
    for (int i = 0; i < N - (int)ULN_SEAL_WINDOW; i++) {
        memcpy(x, d[i], n);
        stale += uln_seal_rx(&t.pb.rx, x, n) == -ESTALE;
    }
    /* the oldest still inside the window (never seen) opens, once */
    for (int i = N - (int)ULN_SEAL_WINDOW; i < N - 1; i++) {
        memcpy(x, d[i], n);
        late_ok += uln_seal_rx(&t.pb.rx, x, n) == 8;
    }
    CHECK_EQ(stale, N - (int)ULN_SEAL_WINDOW);
    CHECK_EQ(late_ok, (int)ULN_SEAL_WINDOW - 1);
    memcpy(x, d[N - 2], n);
    CHECK_EQ(uln_seal_rx(&t.pb.rx, x, n), -EALREADY);
    two_close(&t);
}

/* A resend of the same bytes gets a new counter and another tag; 100000
 * datagrams use 100000 distinct counters; a spent counter space refuses. */
static void test_nonces(void)
{
    struct two t;
    CHECK_EQ(two_open(&t, ULN_SEAL_ENCRYPT, ULN_SEAL_CHACHA20_POLY1305, false), 0);
    uint8_t p[32] = {1, 2, 3}, d1[32 + ULN_SEAL_TRAILER], d2[sizeof d1];
    seal_ab(&t, p, sizeof p, d1);
    seal_ab(&t, p, sizeof p, d2);             /* the resend */
    CHECK(memcmp(d1 + 32, d2 + 32, 8) != 0);  /* counters */
    CHECK(memcmp(d1 + 40, d2 + 40, 16) != 0); /* tags */
    CHECK(memcmp(d1, d2, 32) != 0);           /* ciphertexts */
    CHECK_EQ(uln_seal_rx(&t.pb.rx, d2, sizeof d2), 32);
    CHECK_EQ(uln_seal_rx(&t.pb.rx, d1, sizeof d1), 32); /* both arrive: both open */
    uint64_t prev = 1, dup = 0;
    for (int i = 0; i < 100000; i++) {
        uint8_t tr[ULN_SEAL_TRAILER];
        struct iovec io = {p, 0};
        CHECK_EQ(uln_seal_tx(&t.pa.tx, &io, NULL, 1, tr) == 0, 1);
        uint64_t c = 0;
        for (int k = 7; k >= 0; k--)
            c = c << 8 | tr[k];
        dup += c <= prev; /* strictly increasing: never one twice */
        prev = c;
    }
    CHECK_EQ(dup, 0);
    t.pa.tx.next = UINT64_MAX;
    uint8_t tr[ULN_SEAL_TRAILER];
    struct iovec io = {p, 8};
    CHECK_EQ(uln_seal_tx(&t.pa.tx, &io, NULL, 1, tr), -EOVERFLOW);
    two_close(&t);
}

/* Whatever differs between the ends gives other keys: the datagram is
 * refused. A is sealed for B (epochs 1111/2222, endpoints 0 -> 3). */
static void test_other_keys(void)
{
    struct two t;
    CHECK_EQ(two_open(&t, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM, true), 0);
    uint8_t p[48] = {9}, d[48 + ULN_SEAL_TRAILER], x[sizeof d];
    seal_ab(&t, p, sizeof p, d);
    struct uln_seal_pair q;
    struct uln_seal_ends e = B_ENDS;
    int refused = 0, tried = 0;
    /* a restarted A (new epoch), a restarted B, other endpoints on either side */
    uint32_t *ep32[] = {&e.peer_epoch, &e.my_epoch};
    for (int k = 0; k < 2; k++) {
        e = B_ENDS;
        *ep32[k] ^= 0x40;
        CHECK_EQ(uln_seal_pair_open(&q, &t.b, t.a.pub, &e, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM), 0);
        memcpy(x, d, sizeof d);
        refused += uln_seal_rx(&q.rx, x, sizeof x) == -EBADMSG, tried++;
        uln_seal_pair_close(&q);
    }
    uint16_t *ep16[] = {&e.my_ep, &e.peer_ep};
    for (int k = 0; k < 2; k++) {
        e = B_ENDS;
        *ep16[k] += 1;
        CHECK_EQ(uln_seal_pair_open(&q, &t.b, t.a.pub, &e, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM), 0);
        memcpy(x, d, sizeof d);
        refused += uln_seal_rx(&q.rx, x, sizeof x) == -EBADMSG, tried++;
        uln_seal_pair_close(&q);
    }
    /* the other mode, the other cipher: */
    CHECK_EQ(uln_seal_pair_open(&q, &t.b, t.a.pub, &B_ENDS, ULN_SEAL_ENCRYPT, ULN_SEAL_AES_256_GCM),
             0);
    memcpy(x, d, sizeof d);
    refused += uln_seal_rx(&q.rx, x, sizeof x) == -EBADMSG, tried++;
    uln_seal_pair_close(&q);
    CHECK_EQ(
        uln_seal_pair_open(&q, &t.b, t.a.pub, &B_ENDS, ULN_SEAL_AUTH, ULN_SEAL_CHACHA20_POLY1305),
        0);
    memcpy(x, d, sizeof d);
    refused += uln_seal_rx(&q.rx, x, sizeof x) == -EBADMSG, tried++;
    uln_seal_pair_close(&q);
    /* B without the job secret, or with another one */
    struct uln_seal_id b2;
    uint8_t kb[32];
    unhex(B_PRIV, kb);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(
            uln_seal_id_open_raw(&b2, kb, k ? (const uint8_t *)"another secret, 16+" : NULL, 19),
            0);
        CHECK_EQ(uln_seal_pair_open(&q, &b2, t.a.pub, &B_ENDS, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM),
                 0);
        memcpy(x, d, sizeof d);
        refused += uln_seal_rx(&q.rx, x, sizeof x) == -EBADMSG, tried++;
        uln_seal_pair_close(&q);
        uln_seal_id_close(&b2);
    }
    /* reflected: A's own datagram back to A */
    memcpy(x, d, sizeof d);
    refused += uln_seal_rx(&t.pa.rx, x, sizeof x) == -EBADMSG, tried++;
    CHECK_EQ(refused, tried);
    /* and the right pair still opens it */
    CHECK_EQ(uln_seal_rx(&t.pb.rx, d, sizeof d), 48);
    /* no pair: mode off, a zero epoch, a low-order peer key */
    uint8_t zero[32] = {0};
    CHECK_EQ(uln_seal_pair_open(&q, &t.b, t.a.pub, &B_ENDS, ULN_SEAL_OFF, ULN_SEAL_AES_256_GCM),
             -EINVAL);
    e = B_ENDS;
    e.peer_epoch = 0;
    CHECK_EQ(uln_seal_pair_open(&q, &t.b, t.a.pub, &e, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM),
             -EINVAL);
    CHECK_EQ(uln_seal_pair_open(&q, &t.b, zero, &B_ENDS, ULN_SEAL_AUTH, ULN_SEAL_AES_256_GCM),
             -EINVAL);
    two_close(&t);
}

/* Fresh identities: two uln_seal_id_open never draw the same key. */
static void test_fresh_ids(void)
{
    struct uln_seal_id a, b;
    CHECK_EQ(uln_seal_id_open(&a, NULL), 0);
    CHECK_EQ(uln_seal_id_open(&b, NULL), 0);
    CHECK(memcmp(a.pub, b.pub, 32) != 0);
    CHECK(!a.has_secret);
    uln_seal_id_close(&a);
    uln_seal_id_close(&b);
}

static void write_file(const char *path, const char *s, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, s, strlen(s)), strlen(s));
    CHECK_EQ(fchmod(fd, mode), 0);
    close(fd);
}

/* ULN_SECRET_FILE: ours and private, or refused with a reason. */
static void test_secret_file(void)
{
    char dir[] = "test_seal.XXXXXX", f[64], l[64]; /* in the working directory */
    CHECK(mkdtemp(dir) != NULL);
    snprintf(f, sizeof f, "%s/secret", dir);
    snprintf(l, sizeof l, "%s/link", dir);
    uint8_t s1[32], s2[32];
    write_file(f, "0123456789abcdef0123", 0600);
    CHECK_EQ(uln_seal_secret_load(f, s1), 0);
    CHECK_EQ(uln_seal_secret_load(f, s2), 0);
    CHECK(!memcmp(s1, s2, 32));
    struct uln_seal_id id;
    CHECK_EQ(uln_seal_id_open(&id, f), 0);
    CHECK(id.has_secret && !memcmp(id.secret, s1, 32));
    uln_seal_id_close(&id);
    static const mode_t open_to_others[] = {0640, 0604, 0620, 0602, 0644};
    for (size_t k = 0; k < sizeof open_to_others / sizeof *open_to_others; k++) {
        CHECK_EQ(chmod(f, open_to_others[k]), 0);
        CHECK_EQ(uln_seal_secret_load(f, s2), -EPERM);
        CHECK_EQ(uln_seal_id_open(&id, f), -EPERM);
    }
    CHECK_EQ(chmod(f, 0400), 0);
    CHECK_EQ(uln_seal_secret_load(f, s2), 0);
    write_file(f, "too short", 0600);
    CHECK_EQ(uln_seal_secret_load(f, s2), -EINVAL);
    write_file(f, "", 0600);
    CHECK_EQ(uln_seal_secret_load(f, s2), -EINVAL);
    write_file(f, "0123456789abcdef0123", 0600);
    CHECK_EQ(symlink(f, l), 0);
    CHECK_EQ(uln_seal_secret_load(l, s2), -ELOOP); /* not followed */
    CHECK_EQ(uln_seal_secret_load(dir, s2), -EPERM);
    unlink(l);
    unlink(f);
    CHECK_EQ(uln_seal_secret_load(f, s2), -ENOENT);
    rmdir(dir);
}

static void test_names(void)
{
    enum uln_seal_mode m;
    enum uln_seal_cipher c;
    CHECK(!uln_seal_mode_parse("encrypt", &m) && m == ULN_SEAL_ENCRYPT);
    CHECK(!uln_seal_mode_parse("auth", &m) && m == ULN_SEAL_AUTH);
    CHECK(!uln_seal_mode_parse("off", &m) && m == ULN_SEAL_OFF);
    CHECK_EQ(uln_seal_mode_parse("on", &m), -EINVAL);
    CHECK(!uln_seal_cipher_parse("chacha20-poly1305", &c) && c == ULN_SEAL_CHACHA20_POLY1305);
    CHECK_EQ(uln_seal_cipher_parse("aes", &c), -EINVAL);
    CHECK_EQ(uln_seal_cipher_pick(ULN_SEAL_AES_256_GCM, ULN_SEAL_AES_256_GCM),
             ULN_SEAL_AES_256_GCM);
    CHECK_EQ(uln_seal_cipher_pick(ULN_SEAL_AES_256_GCM, ULN_SEAL_CHACHA20_POLY1305),
             ULN_SEAL_CHACHA20_POLY1305);
    CHECK_EQ(uln_seal_cipher_pick(ULN_SEAL_CHACHA20_POLY1305, ULN_SEAL_AES_256_GCM),
             ULN_SEAL_CHACHA20_POLY1305);
    setenv("ULN_SECURE_CIPHER", "chacha20-poly1305", 1);
    CHECK(!uln_seal_cipher_local(&c) && c == ULN_SEAL_CHACHA20_POLY1305);
    setenv("ULN_SECURE_CIPHER", "rot13", 1);
    CHECK_EQ(uln_seal_cipher_local(&c), -EINVAL);
    unsetenv("ULN_SECURE_CIPHER");
    CHECK(!uln_seal_cipher_local(&c));
    CHECK_EQ(c, uln_seal_cpu_aes() ? ULN_SEAL_AES_256_GCM : ULN_SEAL_CHACHA20_POLY1305);
}

int main(void)
{
    static const enum uln_seal_cipher ciphers[] = {ULN_SEAL_AES_256_GCM,
                                                   ULN_SEAL_CHACHA20_POLY1305};
    test_x25519_vectors();
    for (int c = 0; c < 2; c++) {
        for (int m = ULN_SEAL_AUTH; m <= ULN_SEAL_ENCRYPT; m++) {
            test_known_answer((enum uln_seal_mode)m, ciphers[c], false);
            test_known_answer((enum uln_seal_mode)m, ciphers[c], true);
            test_round_trips((enum uln_seal_mode)m, ciphers[c]);
            test_tamper((enum uln_seal_mode)m, ciphers[c]);
        }
    }
    test_run_cut(ULN_SEAL_AUTH);
    test_run_cut(ULN_SEAL_ENCRYPT);
    test_replay_window();
    test_nonces();
    test_other_keys();
    test_fresh_ids();
    test_secret_file();
    test_names();
    return summary();
}
