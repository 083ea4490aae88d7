/*
 * test_strerror.c - ulnet.h stands alone and uln_strerror speaks one style.
 *
 * The header is included first and ETIMEDOUT used before any other header: a
 * program that tests for -ETIMEDOUT with only <ulnet.h> must compile (the
 * header's statuses are negative errno values, so it brings <errno.h>).
 * Every status the header lists has ulnet's own text; every text, ulnet's or
 * libc's, is lower case with no final period.
 */
#include <ulnet.h>

static const int timed_out = -ETIMEDOUT; /* compiles only if ulnet.h brings errno.h */

#include <ctype.h>
#include <string.h>

#include "check.h"

/* The statuses include/ulnet.h lists under "Status codes". */
static const int listed[] = {
    -EAGAIN,       -EINVAL,     -EMSGSIZE,  -ENOSPC,       -EFAULT,     -ENOKEY,
    -ERANGE,       -EACCES,     -EPERM,     -EBADF,        -ECONNRESET, -EMFILE,
    -ENOMEM,       -ECANCELED,  -ETIMEDOUT, -EBUSY,        -EADDRINUSE, -EADDRNOTAVAIL,
    -EHOSTUNREACH, -EOPNOTSUPP, -EDOM,      -ECONNREFUSED, -EPROTO,
};

static void check_style(int status)
{
    const char *t = uln_strerror(status);
    CHECK(t != NULL && t[0] != '\0');
    if (!t || !t[0]) return;
    size_t n = strlen(t);
    int lower_start = !(isupper((unsigned char)t[0]) && islower((unsigned char)t[1]));
    if (!lower_start || t[n - 1] == '.')
        fprintf(stderr, "status %d: \"%s\" is not in ulnet's style\n", status, t);
    CHECK(lower_start);
    CHECK(t[n - 1] != '.');
}

int main(void)
{
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++) {
        int s = listed[i];
        check_style(s);
        /* ulnet's own wording, never libc's text in any case */
        const char *t = uln_strerror(s), *libc = strerror(-s);
        if (strcasecmp(t, libc) == 0) fprintf(stderr, "status %d: libc's text \"%s\"\n", s, t);
        CHECK(strcasecmp(t, libc) != 0);
    }
    /* -ENOSPC covers a too-small uln_addr buffer as well as the limits */
    CHECK(strstr(uln_strerror(-ENOSPC), "limit") != NULL);
    CHECK(strstr(uln_strerror(-ENOSPC), "buffer") != NULL);
    CHECK(strcmp(uln_strerror(timed_out), "timed out") == 0);

    /* Any other errno: libc's words in the same style, acronyms left alone */
    for (int e = 1; e < 134; e++)
        check_style(-e);
    CHECK(strcmp(uln_strerror(-ENOENT), "no such file or directory") == 0);
    CHECK(strcmp(uln_strerror(-EIO), "input/output error") == 0);
    CHECK(strcmp(uln_strerror(0), "success") == 0);
    CHECK(strcmp(uln_strerror(5), "not a ulnet status") == 0);

    return summary();
}
