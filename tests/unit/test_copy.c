/*
 * test_copy.c - uln_copy_big (src/core/copy.h) against memcpy: every byte of
 * the destination right and not one byte around it touched, for lengths
 * around its edges (0, below and above 256 and 64-byte multiples, chunk
 * sizes) at every alignment of source and destination within 64 bytes, with
 * and without the streaming path (op_left below and above the threshold).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/copy.h"

#include "check.h"

#define GUARD  64u
#define MAXLEN (ULN_COPY_STREAM_MIN + 1000u)
#define ROOM   (MAXLEN + 3 * GUARD) /* guard, offset, copy, guard */

static uint8_t byte_at(size_t i)
{
    return (uint8_t)(i * 131u + (i >> 8) * 7u + 1u);
}

int main(void)
{
    static const size_t lens[] = {0,
                                  1,
                                  15,
                                  16,
                                  17,
                                  63,
                                  64,
                                  255,
                                  256,
                                  257,
                                  300,
                                  1023,
                                  4096,
                                  65536,
                                  131072,
                                  131073,
                                  ULN_COPY_STREAM_MIN - 1,
                                  ULN_COPY_STREAM_MIN,
                                  MAXLEN};
    uint8_t *src = malloc(ROOM), *dst = malloc(ROOM);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < ROOM; i++)
        src[i] = byte_at(i);
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t len = lens[k];
        for (unsigned so = 0; so<GUARD; so += len> 70000 ? 13 : 1) {
            for (unsigned dof = 0; dof<GUARD; dof += len> 70000 ? 11 : 1) {
                for (int stream = 0; stream < 2; stream++) {
                    size_t span = len + 2 * GUARD + GUARD; /* all a copy could reach */
                    memset(dst, 0xcc, span);
                    if (uln_copy_big(dst + GUARD + dof, src + so, len, stream)) uln_copy_fence();
                    int bad = memcmp(dst + GUARD + dof, src + so, len) != 0;
                    for (size_t i = 0; i < GUARD + dof && !bad; i++)
                        bad = dst[i] != 0xcc;
                    for (size_t i = GUARD + dof + len; i < span && !bad; i++)
                        bad = dst[i] != 0xcc;
                    if (bad)
                        fprintf(stderr, "len %zu, source +%u, destination +%u, stream %d\n", len,
                                so, dof, stream);
                    CHECK(!bad);
                }
            }
        }
    }
    free(src);
    free(dst);
    return summary();
}
