/*
 * iov.h - segment lists: the local side of uln_napv, uln_putv, uln_getv and
 * uln_put_immv, up to ULN_IOV_MAX segments whose concatenation is the
 * operation's bytes. Every path walks them with these few helpers, so the
 * rules live once: a zero-length segment (whose base may be NULL) is skipped
 * and never touched, and a byte position is found by a cursor from the start
 * (at most ULN_IOV_MAX steps: cheaper than keeping a cursor in every
 * send-queue entry and every transport).
 */
#ifndef ULN_IOV_H
#define ULN_IOV_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

/* A byte position in a list: segment i, offset off in it (i == n: the end). */
struct uln_iov_cur {
    const struct iovec *iov;
    int n, i;
    uint64_t off;
};

static inline struct uln_iov_cur uln_iov_seek(const struct iovec *iov, int n, uint64_t pos)
{
    int i = 0;
    while (i < n && pos >= iov[i].iov_len) {
        pos -= iov[i].iov_len;
        i++;
    }
    return (struct uln_iov_cur){.iov = iov, .n = n, .i = i, .off = pos};
}

/* The next piece of at most max bytes from the cursor, which moves past it;
 * 0 (and *at untouched) at the end. */
static inline uint64_t uln_iov_next(struct uln_iov_cur *c, uint64_t max, uint8_t **at)
{
    while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
        c->i++;
        c->off = 0;
    }
    if (c->i == c->n || max == 0) return 0;
    uint64_t k = c->iov[c->i].iov_len - c->off;
    if (k > max) k = max;
    *at = (uint8_t *)c->iov[c->i].iov_base + c->off;
    c->off += k;
    return k;
}

/* The total of a list, false if a segment has a NULL base and a length or
 * the sum overflows. */
static inline bool uln_iov_total(const struct iovec *iov, int n, uint64_t *total)
{
    uint64_t t = 0;
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_base && iov[i].iov_len) return false;
        if (__builtin_add_overflow(t, (uint64_t)iov[i].iov_len, &t)) return false;
    }
    *total = t;
    return true;
}

/* Bytes [pos, pos + len) of the list as at most max nonempty segments in out:
 * their count, or -1 when they take more than max (the list must hold them). */
static inline int uln_iov_slice(const struct iovec *iov, int n, uint64_t pos, uint64_t len,
                                struct iovec *out, int max)
{
    struct uln_iov_cur c = uln_iov_seek(iov, n, pos);
    int k = 0;
    uint8_t *at;
    for (uint64_t got; len && (got = uln_iov_next(&c, len, &at)) != 0; len -= got) {
        if (k == max) return -1;
        out[k++] = (struct iovec){at, got};
    }
    return k;
}

/* Copy bytes [pos, pos + len) of the list into flat (gather). */
static inline void uln_iov_to_flat(void *flat, const struct iovec *iov, int n, uint64_t pos,
                                   uint64_t len)
{
    struct uln_iov_cur c = uln_iov_seek(iov, n, pos);
    uint8_t *d = flat, *at;
    for (uint64_t got; len && (got = uln_iov_next(&c, len, &at)) != 0; len -= got, d += got)
        memcpy(d, at, got);
}

/* Copy len bytes of flat into the list from byte pos on (scatter). */
static inline void uln_iov_from_flat(const struct iovec *iov, int n, uint64_t pos, const void *flat,
                                     uint64_t len)
{
    struct uln_iov_cur c = uln_iov_seek(iov, n, pos);
    const uint8_t *s = flat;
    uint8_t *at;
    for (uint64_t got; len && (got = uln_iov_next(&c, len, &at)) != 0; len -= got, s += got)
        memcpy(at, s, got);
}

/* The whole list into dst (uln_napv). */
static inline void uln_iov_gather(uint8_t *dst, const struct iovec *iov, int n)
{
    for (int i = 0; i < n; i++)
        if (iov[i].iov_len) {
            memcpy(dst, iov[i].iov_base, iov[i].iov_len);
            dst += iov[i].iov_len;
        }
}

/* flat into the whole list, each segment in turn (uln_getv). */
static inline void uln_iov_scatter(const struct iovec *iov, int n, const uint8_t *src)
{
    for (int i = 0; i < n; i++)
        if (iov[i].iov_len) {
            memcpy(iov[i].iov_base, src, iov[i].iov_len);
            src += iov[i].iov_len;
        }
}

#endif
