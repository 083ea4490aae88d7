/*
 * test_fi_names.c - the provider's endpoint names (prov/names.h) with
 * ulnet addresses of every length up to ULN_ADDR_MAX: a name whose address
 * fits 56 bytes is 64 bytes, as it always was (FI_NAME_MAX, what Open MPI
 * allocates); a longer address (a third part) makes a longer name, written
 * only where there is room for it, read back whole and alike, alone or in
 * an array of names of mixed lengths (fi_av_insert's); a length that lies is
 * refused, never read past; the name service's answer carries either. A
 * sealed short address takes the sealed short name (64 bytes).
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "names.h"

/* A ulnet address of len bytes (24 to ULN_ADDR_MAX) that ulnet's parser
 * takes: the header and one part of a transport this build does not have
 * (skipped by the parser, as a newer peer's would be). */
static void ulnet_addr(uint8_t *a, size_t len, uint8_t salt)
{
    memset(a, 0, len);
    a[0] = 0xa7;
    a[1] = 1;
    a[2] = (uint8_t)len;
    a[3] = len > 24;
    uint32_t pid = 4242;
    uint64_t key = 0x1234567890abcdefull ^ salt, host = 0x66ceb6c415cull;
    memcpy(a + 4, &pid, 4);
    memcpy(a + 8, &key, 8);
    memcpy(a + 16, &host, 8);
    if (len > 24) {
        a[24] = 7; /* no transport of this build */
        a[25] = (uint8_t)(len - 26);
        for (size_t i = 26; i < len; i++)
            a[i] = (uint8_t)(i * 3u + salt);
    }
}

static struct ulnfi_addr name_of(size_t ulen, uint8_t salt)
{
    struct ulnfi_addr n = {.magic = ULNFI_ADDR_MAGIC,
                           .version = ULNFI_ADDR_VERSION,
                           .ep = 3,
                           .ulen = (uint8_t)ulen,
                           .gen = 9};
    ulnet_addr(n.uaddr, ulen, salt);
    return n;
}

static void test_lengths(void)
{
    static const size_t lens[] = {26, 40, 56, 57, 92, ULN_ADDR_MAX};
    for (unsigned k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        struct ulnfi_addr n = name_of(lens[k], (uint8_t)k), back;
        CHECK_EQ(ulnfi_name_check(&n), 0);
        size_t want = lens[k] <= 56 ? 64 : 8 + lens[k];
        CHECK_EQ(ulnfi_name_len(&n), want);
        uint8_t buf[ULNFI_NAME_MAX + 16];
        memset(buf, 0xee, sizeof buf);
        /* too small: nothing, or the short name where the address is short enough */
        CHECK_EQ(ulnfi_name_put(&n, buf, want - 1), lens[k] <= 28 ? ULNFI_NAME_SHORT : 0);
        CHECK_EQ(ulnfi_name_put(&n, buf, sizeof buf), want);
        CHECK_EQ(buf[want], 0xee); /* not a byte past it */
        if (want == 64)            /* the name version 3 gave: the struct's first 64 bytes */
            CHECK(!memcmp(buf, &n, 64));
        size_t stride = 0;
        CHECK_EQ(ulnfi_name_get(buf, &back, &stride), 0);
        CHECK_EQ(stride, want);
        CHECK(!memcmp(&back, &n, sizeof n));
        CHECK_EQ(ulnfi_name_read(buf, want, &back), 0);
        CHECK_EQ(ulnfi_name_read(buf, want - 1, &back), -EADDRNOTAVAIL);
        CHECK_EQ(ulnfi_name_read(buf, want + 1, &back), -EADDRNOTAVAIL);
    }
}

/* fi_av_insert's array: names one after the other, each its own length. */
static void test_array(void)
{
    uint8_t arr[3 * ULNFI_NAME_MAX];
    struct ulnfi_addr n[3] = {name_of(100, 1), name_of(40, 2), name_of(ULN_ADDR_MAX, 3)};
    size_t at = 0;
    for (int i = 0; i < 3; i++)
        at += ulnfi_name_put(&n[i], arr + at, sizeof arr - at);
    CHECK_EQ(at, 108 + 64 + 136);
    at = 0;
    for (int i = 0; i < 3; i++) {
        struct ulnfi_addr back;
        size_t stride;
        CHECK_EQ(ulnfi_name_get(arr + at, &back, &stride), 0);
        CHECK(!memcmp(&back, &n[i], sizeof back));
        at += stride;
    }
    CHECK_EQ(at, 108 + 64 + 136);
}

/* A header that claims more than ULN_ADDR_MAX is refused as a 64-byte name:
 * nothing past that is read (the buffer here is exactly 64 bytes). */
static void test_lies(void)
{
    uint8_t *b = malloc(64);
    struct ulnfi_addr n = name_of(40, 4), back;
    memcpy(b, &n, 64);
    b[offsetof(struct ulnfi_addr, ulen)] = ULN_ADDR_MAX + 1;
    size_t stride;
    CHECK_EQ(ulnfi_name_get(b, &back, &stride), -EADDRNOTAVAIL);
    CHECK_EQ(stride, 64);
    CHECK_EQ(ulnfi_name_read(b, 64, &back), -EADDRNOTAVAIL);
    /* ulen that does not match the ulnet address's own length */
    memcpy(b, &n, 64);
    b[offsetof(struct ulnfi_addr, ulen)] = 39;
    CHECK_EQ(ulnfi_name_get(b, &back, &stride), -EADDRNOTAVAIL);
    free(b);
}

/* The name service's answer, with either length of name. */
static void test_answer(void)
{
    for (size_t ulen = 40; ulen <= ULN_ADDR_MAX; ulen += 88) {
        struct ulnfi_addr n = name_of(ulen, 5), back;
        struct ulnfi_names_msg m;
        ulnfi_name_answer(&n, &m);
        CHECK_EQ(ulnfi_name_parse(&m, sizeof m, &back), 0);
        CHECK(!memcmp(&back, &n, sizeof n));
        CHECK_EQ(ulnfi_name_parse(&m, sizeof m - 1, &back), -EPROTO);
    }
}

/* The sealed short name: an address of ULN_ADDR_SHORT_SEALED bytes (ulnet's
 * sealed short form, which carries a public key) in FI_NAME_MAX, Open MPI's
 * 64 bytes, where its full name (68) does not fit; read back alike, alone
 * and in an array after a full name. */
static void test_sealed_short(void)
{
    struct ulnfi_addr n = name_of(ULN_ADDR_SHORT_SEALED, 5), back;
    CHECK_EQ(ulnfi_name_len(&n), 8u + ULN_ADDR_SHORT_SEALED);
    uint8_t buf[2 * ULNFI_NAME_MAX];
    memset(buf, 0xee, sizeof buf);
    CHECK_EQ(ulnfi_name_put(&n, buf, 63), 0);
    CHECK_EQ(ulnfi_name_put(&n, buf, 64), (size_t)64);
    CHECK_EQ(buf[0], ULNFI_SHORT_SEALED_MARK);
    CHECK_EQ(buf[64], 0xee);
    size_t stride = 0;
    CHECK_EQ(ulnfi_name_get(buf, &back, &stride), 0);
    CHECK_EQ(stride, (size_t)64);
    CHECK(!memcmp(&back, &n, sizeof n));
    CHECK_EQ(ulnfi_name_read(buf, 64, &back), 0);
    CHECK_EQ(ulnfi_name_read(buf, 65, &back), -EADDRNOTAVAIL);
    /* a full name, then the sealed short one */
    struct ulnfi_addr f = name_of(40, 6);
    size_t k = ulnfi_name_put(&f, buf, sizeof buf);
    CHECK_EQ(k, (size_t)64);
    CHECK_EQ(ulnfi_name_put(&n, buf + k, 64), (size_t)64);
    CHECK_EQ(ulnfi_name_get(buf, &back, &stride), 0);
    CHECK_EQ(stride, k);
    CHECK_EQ(ulnfi_name_get(buf + stride, &back, &stride), 0);
    CHECK(!memcmp(&back, &n, sizeof n));
}

int main(void)
{
    test_lengths();
    test_sealed_short();
    test_array();
    test_lies();
    test_answer();
    return summary();
}
