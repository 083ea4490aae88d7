/*
 * test_config_query.c - uln_config_query says what uln_open(cfg) would have
 * in force, without opening anything: every limit field equal to uln_query's
 * of a context opened with the same configuration; a field of the
 * configuration over its ULN_* variable; sizes with a K or M suffix; a value
 * uln_open refuses refused with the same errno and the same words on stderr,
 * and without uln_open's pause for launchers (this file's usleep counts the
 * calls: uln_open pauses, the query never does); a query leaves what a later
 * uln_open does alone; threads query at once beside an open context; every
 * numeric setting of the table, the transports' and links' as the core's,
 * checked against its own bounds.
 * One process, contexts of no job or a job of one.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "core/diag.h" /* the settings table, as ulninfo -c lists it */

extern char **environ;

/* ctx.c's pause (uln_open's alone) lands here: counted, not slept. */
static int sleeps;
int usleep(useconds_t us)
{
    (void)us;
    __atomic_fetch_add(&sleeps, 1, __ATOMIC_RELAXED);
    return 0;
}

/* stderr while a call runs, into a memfd, and back. */
static int saved_fd = -1, mem_fd = -1;

static void capture_begin(void)
{
    fflush(stderr);
    mem_fd = memfd_create("stderr", 0);
    saved_fd = dup(2);
    dup2(mem_fd, 2);
}

static void capture_end(char *buf, size_t room)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    ssize_t n = pread(mem_fd, buf, room - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(mem_fd);
}

/* Every ULN_* variable of the environment gone: "nothing set". */
static void clear_settings(void)
{
    for (;;) {
        char name[64] = "";
        for (char **e = environ; e && *e && !name[0]; e++) {
            const char *eq = strchr(*e, '=');
            size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
            if (!strncmp(*e, "ULN_", 4) && len < sizeof name) memcpy(name, *e, len);
        }
        if (!name[0]) return;
        unsetenv(name);
    }
}

static struct uln_config no_job(void)
{
    struct uln_config c;
    uln_config_init(&c);
    c.boot = ULN_BOOT_NONE;
    return c;
}

/* The fields both calls fill alike; shm_cma may only be lower once open
 * (the kernel refused it). Returns how many differ, each said. */
static int differ(const char *what, const struct uln_info *q, const struct uln_info *o)
{
    int bad = 0;
#define FIELD(f)                                                                                   \
    if (q->f != o->f) {                                                                            \
        fprintf(stderr, "%s: %s: query %llu, open %llu\n", what, #f, (unsigned long long)q->f,     \
                (unsigned long long)o->f);                                                         \
        bad++;                                                                                     \
    }
    FIELD(nap_max)
    FIELD(inline_max)
    FIELD(sq_depth)
    FIELD(ring_bytes)
    FIELD(chunk_bytes)
    FIELD(post_copy_max)
    FIELD(max_eps)
    FIELD(max_regions)
    FIELD(shm_direct)
    FIELD(udp_window)
    FIELD(udp_dead_ms)
    FIELD(progress_thread)
#undef FIELD
    if (o->shm_cma > q->shm_cma) {
        fprintf(stderr, "%s: shm_cma: query %d, open %d\n", what, q->shm_cma, o->shm_cma);
        bad++;
    }
    return bad;
}

/* Query, then open with the same configuration: every limit the same. */
static void same_as_open(const char *what, const struct uln_config *c)
{
    struct uln_info q, o;
    struct uln_ctx *ctx;
    int rc = uln_config_query(c, &q);
    CHECK_EQ(rc, 0);
    CHECK_EQ(uln_open(c, &ctx), 0);
    if (rc || !ctx) return;
    CHECK_EQ(uln_query(ctx, &o), 0);
    CHECK_EQ(differ(what, &q, &o), 0);
    CHECK(q.transport == NULL && q.udp_peers == 0);
    if (c && c->boot == ULN_BOOT_NONE) {
        CHECK(q.bootstrap && !strcmp(q.bootstrap, "none") && !strcmp(o.bootstrap, "none"));
        CHECK_EQ(q.max_peers, o.max_peers);
    } else {
        CHECK(q.bootstrap == NULL && q.max_peers == 0);
    }
    uln_close(ctx);
}

/* Nothing set: the defaults, a NULL configuration as uln_config_init's. */
static void test_defaults(void)
{
    struct uln_config c = no_job();
    same_as_open("defaults, no job", &c);
    same_as_open("defaults, NULL", NULL);
    struct uln_info a, b;
    uln_config_init(&c);
    CHECK(uln_config_query(NULL, &a) == 0 && uln_config_query(&c, &b) == 0);
    CHECK_EQ(differ("NULL against uln_config_init", &a, &b), 0);
    CHECK(a.nap_max == 8192 && a.sq_depth == 256 && a.ring_bytes == 131072 && a.max_eps == 16 &&
          a.max_regions == 4096 && a.udp_window == 1024 && a.shm_direct == 1 && a.shm_cma == 1);
    c = no_job();
    CHECK(uln_config_query(&c, &a) == 0 && a.max_peers == 1024);
    CHECK_EQ(uln_config_query(&c, NULL), -EINVAL);
}

/* A field of the configuration wins over its variable; a variable counts
 * where the field is left open; sizes take K and M. */
static void test_precedence(void)
{
    struct uln_config c = no_job();
    struct uln_info q;
    setenv("ULN_SQ_DEPTH", "64", 1);
    setenv("ULN_NAP_MAX", "4k", 1);
    setenv("ULN_RING_BYTES", "1M", 1);
    setenv("ULN_MAX_PEERS", "16", 1);
    setenv("ULN_TRANSPORT", "bogus", 1); /* the field below wins, unread */
    c.sq_depth = 512;
    c.max_regions = 100;
    c.transport = "shm";
    CHECK(uln_config_query(&c, &q) == 0);
    CHECK_EQ(q.sq_depth, 512);
    CHECK_EQ(q.max_regions, 100);
    CHECK_EQ(q.nap_max, 4096);
    CHECK_EQ(q.ring_bytes, 1u << 20);
    CHECK_EQ(q.max_peers, 16);
    same_as_open("fields and variables", &c);
    c.sq_depth = 0; /* the variable's */
    CHECK(uln_config_query(&c, &q) == 0 && q.sq_depth == 64);
    same_as_open("variables", &c);
    setenv("ULN_PROGRESS", "thread", 1);
    setenv("ULN_SHM_DIRECT", "0", 1);
    setenv("ULN_UDP_DEAD_MS", "2500", 1);
    CHECK(uln_config_query(&c, &q) == 0 && q.progress_thread == 1 && q.shm_direct == 0 &&
          q.udp_dead_ms == 2500);
    same_as_open("progress thread", &c);
    clear_settings();
}

/* A value uln_open refuses: the same errno, the same words on stderr (some
 * or none: `says`), and no pause, where uln_open pauses only when `pauses`.
 * name=value in the environment, or (name NULL) a configuration's field. */
static void refused(const char *name, const char *value, const struct uln_config *c, bool says,
                    bool pauses)
{
    char said_q[1024], said_o[1024];
    struct uln_info q;
    struct uln_ctx *ctx = NULL;
    if (name) setenv(name, value, 1);
    int s0 = sleeps;
    capture_begin();
    int rq = uln_config_query(c, &q);
    capture_end(said_q, sizeof said_q);
    int s1 = sleeps;
    capture_begin();
    int ro = uln_open(c, &ctx);
    capture_end(said_o, sizeof said_o);
    int s2 = sleeps;
    if (ro == 0) uln_close(ctx);
    if (name) unsetenv(name);
    printf("%s=%s rank %d: query %d, open %d; said \"%.*s\"\n", name ? name : "config",
           name ? value : "", c ? c->rank : -1, rq, ro, (int)strcspn(said_q, "\n"), said_q);
    CHECK_EQ(rq, -EINVAL);
    CHECK_EQ(ro, -EINVAL);
    CHECK_EQ(s1 - s0, 0); /* the query never pauses */
    CHECK_EQ(s2 - s1, pauses);
    CHECK(!strcmp(said_q, said_o));
    CHECK(says == (said_q[0] != '\0'));
}

static void test_refused(void)
{
    struct uln_config c = no_job();
    refused("ULN_SQ_DEPTH", "0", &c, true, false);
    refused("ULN_RING_BYTES", "5000", &c, true, false); /* not a power of two */
    refused("ULN_NAP_MAX", "65536", &c, true, false);   /* two do not fit the default ring */
    refused("ULN_MAX_EPS", "1k", &c, true, false);      /* no suffix on a count */
    refused("ULN_UDP_WINDOW", "-4", NULL, true, false); /* negative */
    refused("ULN_PROGRESS", "sometimes", &c, true, false);
    /* another rank of a job: silent on a job-wide value, and uln_open
     * alone pauses for rank 0 to say it */
    struct uln_config r1;
    uln_config_init(&r1);
    r1.rank = 1;
    r1.boot = ULN_BOOT_JOB;
    refused("ULN_SQ_DEPTH", "0", &r1, false, true);
    refused("ULN_RING_BYTES", "5000", &r1, false, true);
    refused("ULN_NAP_MAX", "65536", &r1, false, true);
    /* its own value in the configuration: said by every rank, no pause */
    r1.ring_bytes = 5000;
    refused(NULL, NULL, &r1, true, false);
    c.sq_depth = (1u << 20) + 1;
    refused(NULL, NULL, &c, true, false);
    c = no_job();
    c.boot = 7; /* refused without a word, by either */
    refused(NULL, NULL, &c, false, false);
}

/* What a later uln_open does is its own: a query of another configuration,
 * of a refused one, or as another rank, changes none of it. */
static void test_no_trace(void)
{
    struct uln_config c = no_job(), other = no_job();
    struct uln_info q, o;
    struct uln_ctx *ctx;
    setenv("ULN_SQ_DEPTH", "100", 1);
    other.sq_depth = 999;
    CHECK(uln_config_query(&other, &q) == 0 && q.sq_depth == 999);
    other.ring_bytes = 5000;
    CHECK_EQ(uln_config_query(&other, &q), -EINVAL);
    if (uln_open(&c, &ctx) == 0) {
        CHECK(uln_query(ctx, &o) == 0 && o.sq_depth == 100);
        uln_close(ctx);
    } else {
        CHECK(0);
    }
    unsetenv("ULN_SQ_DEPTH");
    /* a query as rank 1 leaves uln_open's rank to its own configuration:
     * rank 0 (unknown here) still says why */
    struct uln_config r1;
    uln_config_init(&r1);
    r1.rank = 1;
    r1.boot = ULN_BOOT_JOB;
    setenv("ULN_SQ_DEPTH", "0", 1);
    char said[1024];
    CHECK_EQ(uln_config_query(&r1, &q), -EINVAL);
    capture_begin();
    CHECK_EQ(uln_open(&c, &ctx), -EINVAL);
    capture_end(said, sizeof said);
    CHECK(strstr(said, "ULN_SQ_DEPTH=0") != NULL);
    unsetenv("ULN_SQ_DEPTH");
}

/* Queries from several threads at once, each its own configuration, while
 * a context is open and another thread opens and closes them. */
enum { THREADS = 4, ROUNDS = 200 };

static void *querier(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    struct uln_config c = no_job();
    c.sq_depth = (uint32_t)(64 * (i + 1));
    long bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        struct uln_info q;
        bad += uln_config_query(&c, &q) != 0 || q.sq_depth != c.sq_depth || q.max_eps != 16;
    }
    return (void *)bad;
}

static void *opener(void *arg)
{
    (void)arg;
    long bad = 0;
    struct uln_config c = no_job();
    for (int r = 0; r < 20; r++) {
        struct uln_ctx *ctx;
        if (uln_open(&c, &ctx) != 0)
            bad++;
        else
            uln_close(ctx);
    }
    return (void *)bad;
}

static void test_threads(void)
{
    struct uln_config c = no_job();
    struct uln_ctx *ctx;
    CHECK_EQ(uln_open(&c, &ctx), 0);
    pthread_t t[THREADS + 1];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, querier, (void *)i);
    pthread_create(&t[THREADS], NULL, opener, NULL);
    for (int i = 0; i <= THREADS; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        CHECK_EQ((long)bad, 0);
    }
    uln_close(ctx);
}

/* The table ulninfo -c lists: every name once, and every number's bounds
 * the ones uln_config_query applies, whoever owns the setting (the core, a
 * transport, a link): its default taken, one past either bound refused with
 * its name said. The transports' and links' groups are all in it. */
static void test_table(void)
{
    unsigned n;
    const struct uln_setting *t = uln_settings(&n);
    static const char *const owned[] = {"ULN_SHM_DIRECT", "ULN_UDP_WINDOW", "ULN_LINK",
                                        "ULN_FAULT",      "ULN_XDP_MODE",   "ULN_SECURE"};
    for (unsigned k = 0; k < sizeof owned / sizeof owned[0]; k++) {
        unsigned found = 0;
        for (unsigned i = 0; i < n; i++)
            found += !strcmp(t[i].name, owned[k]);
        CHECK_EQ(found, 1);
    }
    struct uln_config c = no_job();
    for (unsigned i = 0; i < n; i++) {
        CHECK(!strncmp(t[i].name, "ULN_", 4));
        for (unsigned j = 0; j < i; j++)
            CHECK(strcmp(t[i].name, t[j].name) != 0);
        if (!t[i].hi || !t[i].dflt) continue;
        struct uln_info q;
        char v[32], said[1024], want[64];
        setenv(t[i].name, t[i].dflt, 1);
        CHECK_EQ(uln_config_query(&c, &q), 0);
        snprintf(want, sizeof want, "%s=", t[i].name);
        for (int side = 0; side < 2; side++) {
            if (side == 0 && t[i].lo == 0) continue;
            snprintf(v, sizeof v, "%llu",
                     (unsigned long long)(side == 0 ? t[i].lo - 1 : t[i].hi + 1));
            setenv(t[i].name, v, 1);
            capture_begin();
            int rc = uln_config_query(&c, &q);
            capture_end(said, sizeof said);
            if (rc != -EINVAL || !strstr(said, want))
                fprintf(stderr, "%s=%s: %d, said \"%s\"\n", t[i].name, v, rc, said);
            CHECK_EQ(rc, -EINVAL);
            CHECK(strstr(said, want) != NULL);
        }
        unsetenv(t[i].name);
    }
}

int main(void)
{
    clear_settings();
    /* the once-per-process note on unknown ULN_* variables is behind us */
    struct uln_info q;
    uln_config_query(NULL, &q);
    test_defaults();
    test_precedence();
    test_refused();
    test_no_trace();
    test_threads();
    test_table();
    return summary();
}
