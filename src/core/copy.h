/*
 * copy.h - the copy of a large PUT or GET between this process and a peer's
 * mapped memory (shm.c's direct path), with stores that go around the cache.
 *
 * Why not memcpy: glibc switches to non-temporal stores only above a
 * threshold it derives from the cache sizes the CPU reports, and under a
 * hypervisor those can be anything (240 MiB on the VMs ulnet is measured
 * on), so a copy of a large operation, which the engine moves in chunks of
 * ULN_CHUNK_BYTES (128 KiB) anyway, is done with ordinary stores: every
 * destination line is first read in (a read for ownership) and the copy
 * evicts what the cache held. Streaming stores skip both. Measured on shm,
 * ulnperf, three interleaved rounds: PUT/GET 4 MiB bandwidth 42.0-44.3 /
 * 43.2-44.0 -> 46.2-46.7 / 45.7-46.1 GB/s, PUT 4 MiB one-way 95.7-96.6 ->
 * 88.6-88.8 us, 1 MiB 2-3 % better, 256 KiB and below unchanged. An
 * operation that stays in cache loses (a 128 KiB PUT ping-pong took 2.58
 * us streamed, 2.39 not), so only what is left of an operation of
 * ULN_COPY_STREAM_MIN or more streams.
 */
#ifndef ULN_COPY_H
#define ULN_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Operations at least this long (what is left of them) stream. */
#define ULN_COPY_STREAM_MIN (256u * 1024u)

/* Copy len bytes; streaming stores when op_left (the bytes the operation
 * still has to move, this copy's included) is ULN_COPY_STREAM_MIN or more. */
static inline void uln_copy_big(void *dst, const void *src, size_t len, uint64_t op_left)
{
#if defined(__x86_64__)
    if (op_left >= ULN_COPY_STREAM_MIN && len >= 256) {
        uint8_t *d = dst;
        const uint8_t *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* streaming stores need 16-byte alignment */
        memcpy(d, s, head);
        d += head, s += head, len -= head;
        for (size_t n = len / 64; n > 0; n--, d += 64, s += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
            _mm_stream_si128((__m128i *)(void *)d, a);
            _mm_stream_si128((__m128i *)(void *)(d + 16), b);
            _mm_stream_si128((__m128i *)(void *)(d + 32), c);
            _mm_stream_si128((__m128i *)(void *)(d + 48), e);
        }
        memcpy(d, s, len % 64);
        /* Streaming stores are weakly ordered, even on x86: without this
         * fence a completion written after the copy (a CQ entry, the ACK a
         * peer reads) could become visible before the data it announces. */
        _mm_sfence();
        return;
    }
#else
    (void)op_left;
#endif
    memcpy(dst, src, len);
}

#endif
