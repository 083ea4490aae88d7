/*
 * ulnrun_open_check - the one launcher test that needs the real library: what
 * ulnrun hands a rank must be exactly what uln_open(NULL, ...) reads back.
 */
#include <ulnet.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc)
{
    fprintf(stderr, "ulnrun_open_check: %s: %d (%s)\n", what, rc, uln_strerror(rc));
    return 1;
}

int main(void)
{
    const char *rank_s = getenv("ULN_RANK"), *size_s = getenv("ULN_SIZE"),
               *key_s = getenv("ULN_JOB_KEY");
    if (!rank_s || !size_s || !key_s) {
        fprintf(stderr, "ulnrun_open_check: run me under ulnrun\n");
        return 1;
    }
    int rank = atoi(rank_s), size = atoi(size_s);
    uint64_t key = strtoull(key_s, NULL, 16);

    struct uln_ctx *ctx = NULL;
    int rc = uln_open(NULL, &ctx);
    if (rc != 0) return fail("uln_open", rc);

    int bad = 0;
    if (uln_rank(ctx) != rank) {
        fprintf(stderr, "ulnrun_open_check: uln_rank %d, ULN_RANK %d\n", uln_rank(ctx), rank);
        bad = 1;
    }
    if (uln_size(ctx) != size) {
        fprintf(stderr, "ulnrun_open_check: uln_size %d, ULN_SIZE %d\n", uln_size(ctx), size);
        bad = 1;
    }
    if (uln_job_key(ctx) != key) {
        fprintf(stderr, "ulnrun_open_check: uln_job_key %016" PRIx64 ", ULN_JOB_KEY %s\n",
                uln_job_key(ctx), key_s);
        bad = 1;
    }
    /* Twice: the second barrier proves the generation counter moves on and
     * does not let a rank through on the first one's state. */
    for (int i = 0; i < 2 && !bad; i++) {
        rc = uln_barrier(ctx, 10000);
        if (rc != 0) {
            fail("uln_barrier", rc);
            bad = 1;
        }
    }
    rc = uln_close(ctx);
    if (rc != 0) return fail("uln_close", rc);
    if (bad) return 1;
    printf("OK rank %d of %d\n", rank, size);
    return 0;
}
