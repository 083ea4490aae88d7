/*
 * test_query_key.c - each transport's facts by key (uln_query_key,
 * uln_query_keys): every key once, "<transport>.<name>", each one's value
 * the one uln_query_key gives; the facts that struct uln_info also has agree
 * with it (udp.window, udp.dead_ms, shm.direct) and follow the settings; a
 * key nobody has is -ENOENT; a value too long for the buffer is cut, with
 * the length it needs returned (snprintf's contract). One process, contexts
 * of no job.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static struct uln_ctx *open_ctx(void)
{
    struct uln_config c;
    uln_config_init(&c);
    c.boot = ULN_BOOT_NONE;
    struct uln_ctx *ctx = NULL;
    CHECK_EQ(uln_open(&c, &ctx), 0);
    return ctx;
}

static long num(const struct uln_ctx *ctx, const char *key)
{
    char v[64];
    if (uln_query_key(ctx, key, v, sizeof v) < 0) return -1;
    return strtol(v, NULL, 10);
}

static void test_keys(void)
{
    struct uln_ctx *ctx = open_ctx();
    if (!ctx) return;
    char k[80], v[256], again[256], seen[64][80];
    unsigned n = 0;
    for (unsigned i = 0; uln_query_keys(ctx, i, k, sizeof k, v, sizeof v) == 0; i++) {
        CHECK(strchr(k, '.') != NULL && k[0] != '.');
        for (unsigned j = 0; j < n && j < 64; j++)
            CHECK(strcmp(seen[j], k) != 0);
        if (n < 64) snprintf(seen[n], sizeof seen[n], "%s", k);
        n++;
        CHECK(uln_query_key(ctx, k, again, sizeof again) >= 0 && !strcmp(again, v));
    }
    CHECK(n >= 6);
    struct uln_info in;
    CHECK_EQ(uln_query(ctx, &in), 0);
    CHECK_EQ(num(ctx, "udp.window"), in.udp_window);
    CHECK_EQ(num(ctx, "udp.dead_ms"), in.udp_dead_ms);
    CHECK_EQ(num(ctx, "shm.direct"), in.shm_direct);
    CHECK_EQ(num(ctx, "udp.peers"), in.udp_peers);
    CHECK_EQ(uln_query_key(ctx, "udp.nosuch", v, sizeof v), -ENOENT);
    CHECK_EQ(uln_query_key(ctx, "window", v, sizeof v), -ENOENT); /* the transport's name first */
    CHECK_EQ(uln_query_keys(ctx, n, k, sizeof k, v, sizeof v), -ENOENT);
    /* cut to the room, and the length it needs said */
    char small[3];
    CHECK_EQ(uln_query_key(ctx, "udp.dead_ms", small, sizeof small), 5);
    CHECK(!strcmp(small, "10"));
    CHECK_EQ(uln_query_key(NULL, "udp.window", v, sizeof v), -EINVAL);
    uln_close(ctx);
}

/* The settings in force, as the transport reads them. */
static void test_follow_settings(void)
{
    setenv("ULN_UDP_WINDOW", "64", 1);
    setenv("ULN_SHM_DIRECT", "0", 1);
    struct uln_ctx *ctx = open_ctx();
    unsetenv("ULN_UDP_WINDOW");
    unsetenv("ULN_SHM_DIRECT");
    if (!ctx) return;
    CHECK_EQ(num(ctx, "udp.window"), 64);
    CHECK_EQ(num(ctx, "shm.direct"), 0);
    uln_close(ctx);
}

int main(void)
{
    test_keys();
    test_follow_settings();
    return summary();
}
