/*
 * test_addr_str.c - uln_addr_str: a context's address as text names its pid,
 * key and parts; the text is cut to the room given (always terminated) while
 * the length returned is the whole text's; bytes that are not an address are
 * refused as uln_peer_insert refuses them.
 */
#include <ulnet.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

int main(void)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    struct uln_ctx *ctx;
    CHECK_EQ(uln_open(&cfg, &ctx), 0);
    unsigned char a[ULN_ADDR_MAX];
    size_t len = sizeof a;
    CHECK_EQ(uln_addr(ctx, a, &len), 0);

    char text[256], want[64];
    int n = uln_addr_str(a, len, text, sizeof text);
    printf("%s\n", text);
    CHECK(n > 0 && (size_t)n == strlen(text));
    snprintf(want, sizeof want, "pid %d key ", (int)getpid());
    CHECK(strncmp(text, want, strlen(want)) == 0);
    CHECK(strstr(text, " shm inbox fd ") != NULL);
    const char *tp = getenv("ULN_TRANSPORT"); /* shm alone: no udp part */
    if (!tp || strcmp(tp, "shm")) CHECK(strstr(text, " udp ") != NULL && strchr(text, ':') != NULL);

    /* cut short: terminated, same answer; no room at all: only the length */
    char small[10];
    memset(small, 'x', sizeof small);
    CHECK_EQ(uln_addr_str(a, len, small, sizeof small), n);
    CHECK(small[9] == '\0' && strncmp(small, text, 9) == 0);
    CHECK_EQ(uln_addr_str(a, len, NULL, 0), n);
    CHECK_EQ(uln_addr_str(a, len, NULL, 4), -EINVAL);

    /* not an address: short, a wrong length byte, a part running past the end */
    CHECK_EQ(uln_addr_str(a, 10, text, sizeof text), -EADDRNOTAVAIL);
    CHECK_EQ(uln_addr_str(a, len - 1, text, sizeof text), -EADDRNOTAVAIL);
    unsigned char bad[ULN_ADDR_MAX];
    memcpy(bad, a, len);
    bad[25] = 200; /* the first part's length */
    CHECK_EQ(uln_addr_str(bad, len, text, sizeof text), -EADDRNOTAVAIL);
    memcpy(bad, a, len);
    bad[0] ^= 1; /* magic */
    CHECK_EQ(uln_addr_str(bad, len, text, sizeof text), -EADDRNOTAVAIL);

    CHECK_EQ(uln_close(ctx), 0);
    return summary();
}
