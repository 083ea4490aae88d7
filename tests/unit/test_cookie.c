/*
 * test_cookie.c - the stateless address cookie (src/seal/cookie.h) that
 * ulnetd --secure's HELLOs carry under a flood: a cookie made for a source
 * and nonce is taken back for exactly them while its secret is valid (one
 * rotation on, still; two, stale), and refused for another address, port,
 * family or nonce, with any bit flipped, cut short or too long, and by
 * another service (another secret). The time is passed in: no waiting.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "seal/cookie.h"

#include "check.h"

#define S      1000000000ull
#define ROTATE ULN_COOKIE_ROTATE_NS

static struct sockaddr_in v4(const char *ip, uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static struct sockaddr_in6 v6(const char *ip, uint16_t port)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

static const uint8_t nonce[ULN_COOKIE_NONCE_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8};

static int check4(struct uln_cookie *c, uint64_t now, const struct sockaddr_in *a, const uint8_t *n,
                  const uint8_t *ck, size_t len)
{
    return uln_cookie_check(c, now, a, sizeof *a, n, ck, len);
}

/* Made and taken back; every other source, nonce, bit and length refused. */
static void exact(void)
{
    struct uln_cookie c;
    uint64_t t = 5 * S;
    CHECK(uln_cookie_open(&c, t) == 0);
    struct sockaddr_in a = v4("10.1.2.3", 7475);
    uint8_t ck[ULN_COOKIE_BYTES], other[ULN_COOKIE_BYTES];
    CHECK(uln_cookie_make(&c, t, &a, sizeof a, nonce, ck) == 0);
    CHECK(check4(&c, t, &a, nonce, ck, sizeof ck) == 0);
    CHECK(check4(&c, t + 3 * S, &a, nonce, ck, sizeof ck) == 0); /* again: no state used up */

    /* Deterministic for one secret: the same source and nonce, the same cookie. */
    CHECK(uln_cookie_make(&c, t + S, &a, sizeof a, nonce, other) == 0);
    CHECK(!memcmp(ck, other, sizeof ck));

    /* Another port, address, nonce. */
    struct sockaddr_in b = v4("10.1.2.3", 7476);
    CHECK(check4(&c, t, &b, nonce, ck, sizeof ck) == -EBADMSG);
    b = v4("10.1.2.4", 7475);
    CHECK(check4(&c, t, &b, nonce, ck, sizeof ck) == -EBADMSG);
    uint8_t n2[ULN_COOKIE_NONCE_BYTES];
    for (unsigned i = 0; i < sizeof n2; i++) {
        memcpy(n2, nonce, sizeof n2);
        n2[i] ^= 0x10;
        CHECK(check4(&c, t, &a, n2, ck, sizeof ck) == -EBADMSG);
    }
    /* sin_zero says nothing of where an answer goes: the same source. */
    b = a;
    memset(b.sin_zero, 0xee, sizeof b.sin_zero);
    CHECK(check4(&c, t, &b, nonce, ck, sizeof ck) == 0);

    /* Every bit of the tag flipped: forged; of the generation byte: stale
     * (no secret of that generation exists) or, one back, not its tag. */
    for (unsigned bit = 8; bit < 8 * ULN_COOKIE_BYTES; bit++) {
        memcpy(other, ck, sizeof ck);
        other[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK(check4(&c, t, &a, nonce, other, sizeof other) == -EBADMSG);
    }
    for (unsigned bit = 0; bit < 8; bit++) {
        memcpy(other, ck, sizeof ck);
        other[0] ^= (uint8_t)(1u << bit);
        int rc = check4(&c, t, &a, nonce, other, sizeof other);
        CHECK(rc == (other[0] == (uint8_t)(ck[0] - 1u) ? -EBADMSG : -ESTALE));
    }
    /* Cut short at every length, one byte too long, none at all. */
    for (size_t len = 0; len < sizeof ck; len++)
        CHECK(check4(&c, t, &a, nonce, ck, len) == -EBADMSG);
    uint8_t longer[ULN_COOKIE_BYTES + 1];
    memcpy(longer, ck, sizeof ck);
    longer[sizeof ck] = 0;
    CHECK(check4(&c, t, &a, nonce, longer, sizeof longer) == -EBADMSG);
    CHECK(check4(&c, t, &a, nonce, NULL, sizeof ck) == -EBADMSG);

    /* Another service's secret: its cookie is not ours. */
    struct uln_cookie d;
    CHECK(uln_cookie_open(&d, t) == 0);
    CHECK(uln_cookie_check(&d, t, &a, sizeof a, nonce, ck, sizeof ck) == -EBADMSG);
    uln_cookie_close(&d);
    uln_cookie_close(&c);
}

/* Valid through the next rotation, stale after the one after; a long quiet
 * makes both secrets new. */
static void rotation(void)
{
    struct uln_cookie c;
    uint64_t t = 1000 * S;
    CHECK(uln_cookie_open(&c, t) == 0);
    struct sockaddr_in a = v4("192.168.7.1", 40000);
    uint8_t ck[ULN_COOKIE_BYTES], ck2[ULN_COOKIE_BYTES], ck3[ULN_COOKIE_BYTES];
    CHECK(uln_cookie_make(&c, t, &a, sizeof a, nonce, ck) == 0);
    CHECK(check4(&c, t + ROTATE - 1, &a, nonce, ck, sizeof ck) == 0);
    CHECK(check4(&c, t + ROTATE, &a, nonce, ck, sizeof ck) == 0); /* previous: still valid */
    CHECK(uln_cookie_make(&c, t + ROTATE, &a, sizeof a, nonce, ck2) == 0);
    CHECK(ck2[0] == (uint8_t)(ck[0] + 1u));
    CHECK(memcmp(ck, ck2, sizeof ck) != 0); /* a new secret: another cookie */
    CHECK(check4(&c, t + 2 * ROTATE - 1, &a, nonce, ck, sizeof ck) == 0);
    CHECK(check4(&c, t + 2 * ROTATE, &a, nonce, ck, sizeof ck) == -ESTALE);
    CHECK(check4(&c, t + 2 * ROTATE, &a, nonce, ck2, sizeof ck2) == 0);
    /* Ten rotations of quiet: both secrets drawn anew. */
    CHECK(check4(&c, t + 12 * ROTATE, &a, nonce, ck2, sizeof ck2) == -ESTALE);
    CHECK(uln_cookie_make(&c, t + 12 * ROTATE, &a, sizeof a, nonce, ck3) == 0);
    CHECK(check4(&c, t + 12 * ROTATE, &a, nonce, ck3, sizeof ck3) == 0);
    /* The previous generation's byte with a made-up tag: not stale, forged. */
    memcpy(ck2, ck3, sizeof ck3);
    ck2[0] = (uint8_t)(ck3[0] - 1u);
    CHECK(check4(&c, t + 12 * ROTATE, &a, nonce, ck2, sizeof ck2) == -EBADMSG);
    uln_cookie_close(&c);
}

/* IPv6 sources (port, address, scope); addresses of no kind it knows. */
static void families(void)
{
    struct uln_cookie c;
    CHECK(uln_cookie_open(&c, 0) == 0);
    struct sockaddr_in6 a = v6("fd00::1", 7475), b = a;
    uint8_t ck[ULN_COOKIE_BYTES];
    CHECK(uln_cookie_make(&c, 1, &a, sizeof a, nonce, ck) == 0);
    CHECK(uln_cookie_check(&c, 1, &a, sizeof a, nonce, ck, sizeof ck) == 0);
    b.sin6_scope_id = 2;
    CHECK(uln_cookie_check(&c, 1, &b, sizeof b, nonce, ck, sizeof ck) == -EBADMSG);
    b = v6("fd00::2", 7475);
    CHECK(uln_cookie_check(&c, 1, &b, sizeof b, nonce, ck, sizeof ck) == -EBADMSG);
    /* A v4 address whose bytes begin like the v6 one's: not the same source. */
    struct sockaddr_in four = v4("0.0.0.0", 7475);
    CHECK(uln_cookie_check(&c, 1, &four, sizeof four, nonce, ck, sizeof ck) == -EBADMSG);
    /* Short of its kind, another family, none. */
    CHECK(uln_cookie_check(&c, 1, &a, sizeof a - 1, nonce, ck, sizeof ck) == -EAFNOSUPPORT);
    CHECK(uln_cookie_make(&c, 1, &four, sizeof four - 1, nonce, ck) == -EAFNOSUPPORT);
    struct sockaddr un = {.sa_family = AF_UNIX};
    CHECK(uln_cookie_make(&c, 1, &un, sizeof un, nonce, ck) == -EAFNOSUPPORT);
    CHECK(uln_cookie_make(&c, 1, NULL, 0, nonce, ck) == -EAFNOSUPPORT);
    uln_cookie_close(&c);
}

/* Many sources and nonces: each cookie is its own (no two alike), and none
 * is taken back for its neighbour's source. */
static void many(void)
{
    enum { K = 2000 };
    struct uln_cookie c;
    CHECK(uln_cookie_open(&c, 7) == 0);
    static uint8_t cks[K][ULN_COOKIE_BYTES];
    unsigned bad = 0, alike = 0;
    for (unsigned i = 0; i < K; i++) {
        struct sockaddr_in a = v4("10.0.0.1", 0);
        a.sin_addr.s_addr = htonl(0x0a000000u + i / 7);
        a.sin_port = htons((uint16_t)(1024 + i % 7));
        uint8_t n[ULN_COOKIE_NONCE_BYTES] = {(uint8_t)i, (uint8_t)(i >> 8)};
        bad += uln_cookie_make(&c, 7, &a, sizeof a, n, cks[i]) != 0;
        bad += check4(&c, 7, &a, n, cks[i], ULN_COOKIE_BYTES) != 0;
        if (i) {
            bad += check4(&c, 7, &a, n, cks[i - 1], ULN_COOKIE_BYTES) != -EBADMSG;
            alike += !memcmp(cks[i] + 1, cks[i - 1] + 1, ULN_COOKIE_BYTES - 1);
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(alike, 0);
    uln_cookie_close(&c);
}

int main(void)
{
    exact();
    rotation();
    families();
    many();
    return summary();
}
