/*
 * cookie.h - a stateless address cookie (ulnetd --secure's HELLOs under a
 * flood, tools/ulnetd/wire_seal.c): proof that a source can receive at the
 * address and port it sends from, at the cost of one round trip and with no
 * state kept for the source, as DTLS's HelloVerifyRequest, IKEv2's COOKIE
 * and WireGuard's cookie reply do.
 *
 * A cookie is the generation of the secret it was made under (one byte) and
 * HMAC-SHA256(that secret, generation, source address and port, the HELLO's
 * nonce) cut to 15 bytes. The secret is drawn at random and drawn again
 * every ULN_COOKIE_ROTATE_NS; a cookie of the current or the previous
 * secret is valid, so one lives between one and two rotations. An old
 * generation is stale, any other cookie forged; both refused.
 *
 * The caller passes the time (monotonic ns), so a test can age a cookie
 * without waiting. Not thread-safe: one thread makes and checks (a MAC
 * context per secret, reset for each cookie rather than made anew).
 */
#ifndef ULN_SEAL_COOKIE_H
#define ULN_SEAL_COOKIE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define ULN_COOKIE_BYTES       16u
#define ULN_COOKIE_NONCE_BYTES 8u
#define ULN_COOKIE_ROTATE_NS   (120ull * 1000000000ull)

struct uln_cookie {
    void *mac[2];      /* EVP_MAC_CTX for generation g in mac[g & 1] */
    uint8_t gen;       /* the current secret's generation */
    uint64_t since_ns; /* when the current secret was drawn */
};

/* Draws the secrets. 0, or -ENOMEM / -EIO (the library failed). */
int uln_cookie_open(struct uln_cookie *c, uint64_t now_ns);
void uln_cookie_close(struct uln_cookie *c);

/* The cookie for a source (a sockaddr_in or sockaddr_in6 of len bytes) and
 * its HELLO's nonce. 0, -EAFNOSUPPORT (another kind of address, or len
 * short of its kind) or -EIO. */
int uln_cookie_make(struct uln_cookie *c, uint64_t now_ns, const void *addr, socklen_t len,
                    const uint8_t nonce[ULN_COOKIE_NONCE_BYTES], uint8_t out[ULN_COOKIE_BYTES]);

/* 0 if cookie (n bytes) is one uln_cookie_make gave this source and nonce
 * under a secret still valid; -ESTALE: of an older generation (or one never
 * drawn); -EBADMSG: not ULN_COOKIE_BYTES long, or not this source's, this
 * nonce's or this secret's; -EAFNOSUPPORT, -EIO as uln_cookie_make. */
int uln_cookie_check(struct uln_cookie *c, uint64_t now_ns, const void *addr, socklen_t len,
                     const uint8_t nonce[ULN_COOKIE_NONCE_BYTES], const uint8_t *cookie, size_t n);

#endif
