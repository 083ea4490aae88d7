/*
 * fuzz_fi_name.c - fuzz target for the provider's name service answers
 * (prov/name.c): what fi_getinfo(node, service) and fi_av_insertsvc read
 * from whatever answers on a TCP port. The input is the answer. It must be
 * refused with -EPROTO (not an answer of ours) or -EADDRNOTAVAIL (the name
 * inside is malformed), or accepted as a name fi_av_insert would take, which
 * answered again reads back the same; never a read past the input. The same
 * bytes are also read as a name fi_av_insert or fi_getinfo's dest_addr takes
 * (full or short, names.h): refused with -EADDRNOTAVAIL, or accepted as a
 * name that, written again in a room of the input's length, is the input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_fi_name: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees any read past the input */
    uint8_t *a = malloc(size ? size : 1);
    if (!a) return 0;
    memcpy(a, data, size);
    struct ulnfi_addr name;
    int rc = ulnfi_name_parse(a, size, &name);
    must(rc == 0 || rc == -EPROTO || rc == -EADDRNOTAVAIL, "neither accepted nor refused");
    if (rc == 0) {
        must(ulnfi_name_check(&name) == 0, "accepted a name fi_av_insert refuses");
        struct ulnfi_names_msg m;
        struct ulnfi_addr again;
        ulnfi_name_answer(&name, &m);
        must(size == sizeof(m) && !memcmp(&m, a, sizeof(m)), "the answer is not the input");
        must(ulnfi_name_parse(&m, sizeof(m), &again) == 0 && !memcmp(&again, &name, sizeof(name)),
             "an answer of the name reads back another");
    }
    rc = ulnfi_name_read(a, size, &name);
    must(rc == 0 || rc == -EADDRNOTAVAIL, "a name neither accepted nor refused");
    if (rc == 0) {
        uint8_t again[sizeof(struct ulnfi_addr)];
        must(ulnfi_name_put(&name, again, size) == size && !memcmp(again, a, size),
             "a name written again is another");
    }
    free(a);
    return 0;
}
