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
 * us streamed, 2.39 not), so only an operation of ULN_COPY_STREAM_MIN or
 * more streams, every chunk of it (the caller tracks which: shm.c; its
 * last 128 KiB copied with ordinary stores cost a 1 MiB GET 5 %).
 *
 * Streaming stores are weakly ordered, even on x86: a later ordinary store
 * (a completion entry, the ACK a peer reads, the hazard word a deregistering
 * owner waits on) can become visible before them. So whoever streamed must
 * uln_copy_fence before anything that announces the data or gives the
 * memory back; the caller decides when (shm.c: a PUT after every chunk, a
 * GET once per operation).
 */
#ifndef ULN_COPY_H
#define ULN_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Operations at least this long stream. */
#define ULN_COPY_STREAM_MIN (256u * 1024u)

/* Copy len bytes, with streaming stores if stream (and len is worth it).
 * True if it streamed: the caller owes a uln_copy_fence. */
static inline bool uln_copy_big(void *dst, const void *src, size_t len, bool stream)
{
#if defined(__x86_64__)
    if (stream && len >= 256) {
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
        return true;
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, len);
    return false;
}

/* Order every streaming store before this thread's later stores. It waits
 * for them to reach memory (~0.2 us measured after a 128 KiB copy), so it
 * is paid once per operation where the caller can. */
static inline void uln_copy_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

#endif
