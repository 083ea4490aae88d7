/*
 * check.h - the counting CHECK of the in-process tests (unit/, rel/): a failed
 * check is reported and counted, the test goes on, and main ends with the
 * summary line "N passed, N failed" that CI reads.
 */
#ifndef ULN_TEST_CHECK_H
#define ULN_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (c) {                                                                                   \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                  \
        }                                                                                          \
    } while (0)

/* Same, with the values that differ printed. */
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b);           \
        if (va_ == vb_) {                                                                          \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%llu != %llu)\n", __FILE__, __LINE__,  \
                    #a, #b, va_, vb_);                                                             \
        }                                                                                          \
    } while (0)

static int summary(void)
{
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
