/* ulnperf: the data buffers, the marks that check what arrived in them, and
 * posting operations from them. */
#include "perf.h"

#include <stdlib.h>

const uint16_t done_op[NOPS] = {ULN_OP_NAP, ULN_OP_NAP, ULN_OP_PUT, ULN_OP_GET, ULN_OP_ATOMIC};

/* Bandwidth data check: the first and last 8 bytes of a message carry bytes
 * derived from a per-phase pattern. Checking 16 bytes per point costs nothing
 * and still catches wrong offsets, stale data and truncation. */
static inline uint8_t mark_byte(uint64_t pat, size_t j)
{
    return (uint8_t)((pat >> (8 * (j & 7))) ^ (j * 0x9d));
}

void marks_set(uint8_t *b, size_t size, uint64_t pat, bool inverted)
{
    size_t k = size < 8 ? size : 8;
    for (size_t j = 0; j < k; j++) {
        b[j] = (uint8_t)(mark_byte(pat, j) ^ (inverted ? 0xff : 0));
        size_t t = size - k + j;
        b[t] = (uint8_t)(mark_byte(pat, t) ^ (inverted ? 0xff : 0));
    }
}

/* Returns the offset of the first wrong byte, or -1. */
long marks_check(const uint8_t *b, size_t size, uint64_t pat)
{
    size_t k = size < 8 ? size : 8;
    for (size_t j = 0; j < k; j++) {
        if (b[j] != mark_byte(pat, j)) return (long)j;
        size_t t = size - k + j;
        if (b[t] != mark_byte(pat, t)) return (long)t;
    }
    return -1;
}

uint64_t next_pattern(struct perf *pf)
{
    uint64_t z = (pf->pattern_seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void *buf_alloc(struct perf *pf, size_t len)
{
    void *p = NULL;
    if (pf->opt->malloc_mem) {
        p = aligned_alloc(4096, len);
        if (!p) die(pf, "aligned_alloc(%zu): out of memory", len);
    } else {
        int rc = uln_mem_alloc(pf->ctx, len, &p);
        if (rc) die(pf, "uln_mem_alloc(%zu): %s", len, uln_strerror(rc));
    }
    /* Fault the pages in now rather than inside the first measured phase. */
    memset(p, 0, len);
    return p;
}

void buf_free(struct perf *pf, void *p)
{
    if (!p) return;
    if (pf->opt->malloc_mem)
        free(p);
    else
        uln_mem_free(pf->ctx, p);
}

/* --iov: a message of size bytes from (into) pf->loc as opt->iov segments
 * of equal size, the last taking the remainder: one after the other in the
 * buffer, so the bytes land where a contiguous PUT/GET puts them (the data
 * checks hold) and only the per-segment cost differs. */
const struct iovec *iov_cut(struct perf *pf, size_t size)
{
    unsigned n = pf->opt->iov;
    size_t each = size / n;
    for (unsigned i = 0; i < n; i++)
        pf->iov[i] = (struct iovec){(uint8_t *)pf->loc + i * each,
                                    i + 1 == n ? size - (size_t)(n - 1) * each : each};
    pf->iov_size = size;
    return pf->iov;
}

/* Post, polling while a queue is full. Only for loops where nothing but errors
 * and control traffic can complete in the meantime. 1: done in the call (with
 * ULN_NOW: no completion comes), 0: posted. */
int post_retry(struct perf *pf, int op, size_t size, uint64_t ud, unsigned flags)
{
    struct stall st = {.what = "room in the send queue"};
    for (;;) {
        int rc = post(pf, op, size, ud, flags);
        if (rc == 0 || (rc == 1 && (flags & ULN_NOW))) return rc;
        if (rc != -EAGAIN) die(pf, "posting %s of %zu B: %s", op_names[op], size, uln_strerror(rc));
        if (!pump(pf)) stall_tick(pf, &st);
    }
}
