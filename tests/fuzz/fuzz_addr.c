/*
 * fuzz_addr.c - fuzz target for the parser of peers' addresses (uln_addr's
 * bytes, which any process may hand us: fi_av_insert, a PMIx key, a file).
 * The input is the address itself. uln_addr_str checks it exactly as
 * uln_peer_insert does (the header, every part's length, each transport's
 * own part) and then prints it; for every input it must either refuse with
 * -EADDRNOTAVAIL or print a terminated text whose length it returns, whatever
 * the room, and never read past the input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ulnet.h>

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_addr: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees any read past the input */
    uint8_t *a = malloc(size ? size : 1);
    if (!a) return 0;
    memcpy(a, data, size);
    char text[512], small[12];
    int n = uln_addr_str(a, size, text, sizeof text);
    must(n == -EADDRNOTAVAIL || n > 0, "neither refused nor printed");
    if (n > 0) {
        must((size_t)n < sizeof text && strlen(text) == (size_t)n, "length is not the text's");
        memset(small, 0x55, sizeof small);
        must(uln_addr_str(a, size, small, sizeof small) == n, "answer depends on the room");
        must(small[sizeof small - 1] == '\0' && !strncmp(small, text, sizeof small - 1),
             "cut text is not the text's start");
        must(uln_addr_str(a, size, NULL, 0) == n, "no room: not the length");
    }
    free(a);
    return 0;
}
