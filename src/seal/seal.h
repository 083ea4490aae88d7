/*
 * seal.h - sealed datagrams between two contexts (ULN_SECURE, issue 33):
 * every datagram over a network link carries an AEAD tag, and under
 * `encrypt` its bytes are ciphertext too.
 *
 * Keys. Each context draws an X25519 key pair at uln_open (struct
 * uln_seal_id) and publishes the public half with its address. Two contexts
 * agree on a shared point, and HKDF-SHA256 turns it into one key per
 * direction and per pair of endpoints, bound to the job secret when there is
 * one (ULN_SECRET_FILE), to the mode and cipher, to both public keys and to
 * both sides' epochs: a restarted peer (a new life, a new epoch) gets new
 * keys, and old packets of either life fail their tag.
 *
 * The trailer. A sealed datagram is the plain one with 26 bytes appended:
 *
 *    [ datagram: header(s) and payload, ciphertext under encrypt ]
 *    [ counter: u64 little-endian ][ length: u16 little-endian ][ tag: 16 bytes ]
 *
 * The length is the sealed datagram's, trailer included: a receiver that
 * read a run of datagrams the kernel merged (GRO) without its segment size
 * finds where each ends from the back (uln_seal_len), also under encrypt,
 * where the headers are ciphertext. The receiver refuses a datagram whose
 * length is not its own, so the field is as good as authenticated.
 *
 * The nonce is the sender's epoch (u32) and the counter (u64), 96 bits: the
 * counter is drawn afresh for every datagram sent, a resend included, so a
 * nonce is never used twice under one key. The receiver refuses a counter it
 * has already accepted, or one older than its window (ULN_SEAL_WINDOW
 * counters behind the newest), before it spends a cipher call on it, and
 * moves its window only once the tag has checked out: a forger cannot move
 * it.
 *
 * The cipher is AES-256-GCM when both sides' CPUs have AES and carry-less
 * multiply instructions, ChaCha20-Poly1305 otherwise (OpenSSL's libcrypto,
 * and libsodium for datagrams of up to 256 bytes where it is built in; no
 * cipher code of ulnet's own).
 */
#ifndef ULN_SEAL_H
#define ULN_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define ULN_SEAL_PUB_BYTES    32u /* an X25519 public key */
#define ULN_SEAL_SECRET_BYTES 32u /* the job secret, hashed */
#define ULN_SEAL_CTR_BYTES    8u
#define ULN_SEAL_LEN_BYTES    2u
#define ULN_SEAL_TAG_BYTES    16u
#define ULN_SEAL_TRAILER      (ULN_SEAL_CTR_BYTES + ULN_SEAL_LEN_BYTES + ULN_SEAL_TAG_BYTES)
#define ULN_SEAL_DGRAM_MAX    65535u /* the length field's reach; UDP's is less */
/* How far behind the newest accepted counter a datagram may still arrive.
 * Reordering on a path is a few datagrams; a GSO burst of 64 and a window of
 * resends stay well inside. Older ones are refused; the sender resends their
 * packets under new counters. */
#define ULN_SEAL_WINDOW  4096u
#define ULN_SEAL_MAX_IOV 64 /* pieces of one datagram given to uln_seal_tx */

enum uln_seal_mode { ULN_SEAL_OFF = 0, ULN_SEAL_AUTH = 1, ULN_SEAL_ENCRYPT = 2 };
enum uln_seal_cipher { ULN_SEAL_AES_256_GCM = 1, ULN_SEAL_CHACHA20_POLY1305 = 2 };

/* ---- names and choices (keys.c) ---- */

/* "off", "auth", "encrypt" into *mode; -EINVAL for anything else. */
int uln_seal_mode_parse(const char *s, enum uln_seal_mode *mode);
const char *uln_seal_mode_name(enum uln_seal_mode mode);
/* "aes-256-gcm", "chacha20-poly1305"; -EINVAL for anything else. */
int uln_seal_cipher_parse(const char *s, enum uln_seal_cipher *cipher);
const char *uln_seal_cipher_name(enum uln_seal_cipher cipher);
/* Whether this CPU runs AES-GCM in hardware (x86: AES-NI and PCLMULQDQ;
 * arm64: the AES and PMULL extensions). */
bool uln_seal_cpu_aes(void);
/* Which libraries seal and open, in one line for ulninfo: libcrypto always,
 * libsodium for small datagrams where built in. */
const char *uln_seal_libraries(void);
/* The cipher this context asks for: ULN_SECURE_CIPHER if set (refused with
 * -EINVAL when not a name above), else AES-256-GCM where the CPU accelerates
 * it and ChaCha20-Poly1305 where it does not. */
int uln_seal_cipher_local(enum uln_seal_cipher *cipher);
/* The cipher two contexts use: AES-256-GCM only if both ask for it, since a
 * side without AES instructions would run it several times slower. */
enum uln_seal_cipher uln_seal_cipher_pick(enum uln_seal_cipher a, enum uln_seal_cipher b);

/* ---- a context's identity (keys.c) ---- */

struct uln_seal_id {
    void *pkey; /* EVP_PKEY: our X25519 pair, drawn at open */
    uint8_t pub[ULN_SEAL_PUB_BYTES];
    uint8_t secret[ULN_SEAL_SECRET_BYTES]; /* SHA-256 of the job secret */
    bool has_secret;
};

/* Draws a new X25519 key pair, and loads the job secret from secret_file when
 * it is not NULL (see uln_seal_secret_load). -ENOMEM, -EIO when libcrypto
 * fails, or the secret's errors. */
int uln_seal_id_open(struct uln_seal_id *id, const char *secret_file);
/* As uln_seal_id_open, from a given private key (known-answer tests, fuzzing). */
int uln_seal_id_open_raw(struct uln_seal_id *id, const uint8_t priv[32], const uint8_t *secret,
                         size_t secret_len);
void uln_seal_id_close(struct uln_seal_id *id);

/* The job secret from path into out (its SHA-256, so any length of 16 bytes
 * or more serves). The file must be a regular file of ours that neither
 * group nor others may read or write: -EPERM otherwise, -EINVAL when it
 * holds fewer than 16 bytes or more than 64 KiB, -errno when it cannot be
 * read. */
int uln_seal_secret_load(const char *path, uint8_t out[ULN_SEAL_SECRET_BYTES]);

/* ---- a pair of endpoints: one direction each way (seal.c) ---- */

struct uln_seal_ends {
    uint32_t my_epoch, peer_epoch; /* both sides' lives (nonzero) */
    uint16_t my_ep, peer_ep;       /* endpoint indexes at either end */
};

struct uln_seal_tx {
    void *cipher;   /* EVP_CIPHER_CTX, keyed once */
    void *small;    /* libsodium's keyed state for small datagrams (seal.c), or NULL */
    uint64_t next;  /* the next datagram's counter */
    uint32_t epoch; /* ours: the nonce's first word */
    enum uln_seal_mode mode;
};

struct uln_seal_rx {
    void *cipher;
    void *small;    /* as uln_seal_tx's */
    uint64_t top;   /* one past the newest counter accepted (0: none yet) */
    uint32_t epoch; /* the peer's */
    enum uln_seal_mode mode;
    bool one_call; /* AES-GCM: nonce and tag given in one parameter call (seal.c) */
    uint64_t seen[ULN_SEAL_WINDOW / 64]; /* bit c % WINDOW: counter c accepted */
};

struct uln_seal_pair {
    struct uln_seal_tx tx;
    struct uln_seal_rx rx;
};

/* Agrees keys with peer_pub and keys both directions. -EINVAL for a mode of
 * off, a zero epoch or a peer key that gives no shared secret (a low-order
 * point), -ENOMEM or -EIO from libcrypto. */
int uln_seal_pair_open(struct uln_seal_pair *p, const struct uln_seal_id *me,
                       const uint8_t peer_pub[ULN_SEAL_PUB_BYTES], const struct uln_seal_ends *ends,
                       enum uln_seal_mode mode, enum uln_seal_cipher cipher);
void uln_seal_pair_close(struct uln_seal_pair *p);

/* Seals one datagram given as n pieces (n <= ULN_SEAL_MAX_IOV) and writes its
 * trailer; the pieces with the trailer are at most ULN_SEAL_DGRAM_MAX bytes. Under auth the pieces
 * are read only (they may be a user's buffer). Under encrypt each piece in[i] is encrypted into
 * out[i], which has in[i]'s length and may be the same memory (in place) - or out may be NULL for
 * in place throughout. -EOVERFLOW once the counter is spent (never in practice: 2^64 datagrams),
 * -EMSGSIZE for a datagram too long, -EIO if libcrypto fails. */
int uln_seal_tx(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out, int n,
                uint8_t trailer[ULN_SEAL_TRAILER]);

/* An introduction (link_seal.h): ULN_SEAL_INTRO bytes in clear between the
 * sealed bytes and the trailer, said by the counter field's top bit (never a
 * counter's: 2^63 datagrams). The length field counts them; the tag does not
 * cover them, the key does: what they say (the sender's public key and
 * endpoint) goes into the key the receiver derives, so altered they give
 * another key and the tag fails. */
#define ULN_SEAL_INTRO      35u
#define ULN_SEAL_INTRO_FLAG (1ull << 63)

/* As uln_seal_tx for a datagram whose introduction the caller sends between
 * the pieces and the trailer. */
int uln_seal_tx_intro(struct uln_seal_tx *tx, const struct iovec *in, const struct iovec *out,
                      int n, uint8_t trailer[ULN_SEAL_TRAILER]);

/* The introduction of a sealed datagram of len bytes (trailer included), or
 * NULL when it carries none. Unchecked until the datagram is opened. */
const uint8_t *uln_seal_intro(const uint8_t *dgram, size_t len);

/* Opens one received datagram of len bytes, trailer included, in place.
 * Returns the plain length (len - ULN_SEAL_TRAILER, and less an introduction
 * where it carries one), or: -EMSGSIZE shorter
 * than a trailer, -EALREADY a counter already accepted (a replay), -ESTALE a
 * counter older than the window, -EBADMSG a length field not len or a tag
 * that does not check out (forged, altered, truncated, another key). On any error nothing was
 * accepted and the window is unchanged; under encrypt the bytes may have
 * been overwritten and must be dropped. */
long uln_seal_rx(struct uln_seal_rx *rx, uint8_t *dgram, size_t len);

/* The length field of the sealed datagram that ends at buf + end: where it
 * says the datagram starts is buf + end - the result. 0 when end is shorter
 * than a trailer, or the field says less than a trailer or more than end.
 * Unchecked until the datagram is opened. */
uint32_t uln_seal_len(const uint8_t *buf, uint32_t end);

#endif
