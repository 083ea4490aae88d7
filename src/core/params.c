/*
 * params.c - the settings a context runs with (params.h): the core's table
 * and its checks, the transports' and links' settings groups found from the
 * transports built in, and the helpers every group reads its settings with.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "boot/boot.h" /* ULN_BOOT_MAX_RANKS */

extern char **environ;

/* The core's settings, in the order ulninfo lists them; a marker (name
 * NULL) places there the transports' and links' settings of its section. dflt
 * NULL: no default (set by a launcher, or derived as the text says). hi ==
 * 0: not a plain number. */
#define SECTION(s)                                                                                 \
    {                                                                                              \
        .name = NULL, .flags = (s)                                                                 \
    }
static const struct uln_setting core_table[] = {
    /* Set by the launcher or bootstrap (docs/running.md). */
    {"ULN_RANK", NULL, 0, 0, "this process's rank, 0..size-1 (launcher)", ULN_SEC_CORE},
    {"ULN_SIZE", NULL, 0, 0, "ranks in the job (launcher); unset: a job of one", ULN_SEC_CORE},
    {"ULN_JOB_KEY", NULL, 0, 0, "job key, 16 hex digits: only equal keys talk (launcher)",
     ULN_SEC_CORE},
    {"ULN_BOOT_FD", NULL, 0, 0, "descriptor of ulnrun's bootstrap board (ulnrun)", ULN_SEC_CORE},
    {"ULN_ROOT", NULL, 0, 0, "ip:port of rank 0's TCP rendezvous, for any launcher", ULN_SEC_CORE},
    {"ULN_BOOT_TIMEOUT", "60", 1, 86400, "seconds uln_open waits for the ranks (ULN_ROOT, PMIx)",
     ULN_SEC_CORE},
    {"ULN_BOOT", "auto", 0, 0,
     "none: join no job, peers by address (uln_peer_insert); job or auto: the launcher's job",
     ULN_SEC_CORE},
    {"ULN_MAX_PEERS", "1024", 2, ULN_BOOT_MAX_RANKS,
     "with no job: peer ids per context (inbox slots; untouched ones cost no memory)",
     ULN_SEC_CORE},
    /* Queues and rings. */
    {"ULN_RING_BYTES", "131072", 4096, 1u << 28, "NAP ring per (peer, endpoint), a power of two",
     ULN_SEC_CORE},
    /* A NAP is one ring message, and a message header counts at most 65535
     * cells: a larger nap_max was once accepted and its NAPs never arrived. */
    {"ULN_NAP_MAX", "8192", 0, ULN_RING_MSG_MAX, "largest NAP payload (the ring must hold two)",
     ULN_SEC_CORE},
    {"ULN_SQ_DEPTH", "256", 1, 1u << 20, "send-queue entries per endpoint", ULN_SEC_CORE},
    {"ULN_CHUNK_BYTES", "131072", 4096, 1u << 30,
     "bytes an endpoint moves per engine pass before the next one's turn (fairness)", ULN_SEC_CORE},
    /* 64 KiB: small PUT/GETs keep the doorbell's latency (one copy inside the
     * call); a larger one is queued: the call copies at most its first chunk
     * and polling moves the rest, so the caller computes meanwhile and the
     * contract is the one the rings and udp give (ulnet.h). */
    {"ULN_POST_COPY_MAX", "65536", 0, 1u << 30,
     "PUT/GET up to this size, with nothing queued, is copied inside the post call", ULN_SEC_CORE},
    {"ULN_MAX_EPS", "16", 1, 64, "endpoints per process", ULN_SEC_CORE},
    {"ULN_MAX_REGIONS", "4096", 1, 1u << 24, "registered regions per process", ULN_SEC_CORE},
    {"ULN_SPIN_US", "50", 0, 1000000, "microseconds uln_cq_wait spins before it sleeps",
     ULN_SEC_CORE},
    SECTION(ULN_SEC_MEMORY),
    {"ULN_MEMBARRIER", "1", 0, 1,
     "0: direct accesses announce themselves with a fence each, not membarrier at dereg",
     ULN_SEC_CORE},
    /* Transports and progress. */
    {"ULN_TRANSPORT", "auto", 0, 0,
     "auto: shm on this host, udp to others; udp; shm; svc: every peer through the host's "
     "ulnetd; xdp: the same as ULN_TRANSPORT=udp ULN_LINK=xdp",
     ULN_SEC_CORE},
    SECTION(ULN_SEC_LINK_CHOICE),
    {"ULN_PROGRESS", "caller", 0, 0, "thread: a progress thread serves peers in the background",
     ULN_SEC_CORE},
    SECTION(ULN_SEC_NETWORK),
    SECTION(ULN_SEC_LINK),
    SECTION(ULN_SEC_SECURITY),
    /* Diagnostics. */
    {"ULN_STATS", "0", 0, 1,
     "1: uln_close prints the context's counters that are not 0 on stderr, one line", ULN_SEC_CORE},
    SECTION(ULN_SEC_TESTS),
    SECTION(ULN_SEC_CORE),
};
#define N_CORE (sizeof core_table / sizeof core_table[0])

/* ---- the groups: found once, from the transports built in ------------------ */

#define MAX_GROUPS   16
#define MAX_SETTINGS 128

static struct {
    const struct uln_settings_group *group[MAX_GROUPS];
    size_t off[MAX_GROUPS]; /* its block's place in uln_params.blocks */
    unsigned n;
    struct uln_setting all[MAX_SETTINGS]; /* the core's and the groups', as listed */
    unsigned n_all;
} reg;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static bool reg_has(const struct uln_settings_group *g)
{
    for (unsigned i = 0; i < reg.n; i++)
        if (reg.group[i] == g) return true;
    return false;
}

/* Depth first: a group, then those it brings along. A registry that
 * outgrows these bounds is a build's mistake, said at once. */
static void reg_add(const struct uln_settings_group *g)
{
    if (!g || reg_has(g)) return;
    size_t off = reg.n ? reg.off[reg.n - 1] + ((reg.group[reg.n - 1]->block_bytes + 15) & ~15u) : 0;
    if (reg.n == MAX_GROUPS || off + g->block_bytes > ULN_PARAMS_BLOCKS_BYTES) {
        fprintf(stderr, "ulnet: internal: no room for the settings of %s\n", g->name);
        abort();
    }
    reg.group[reg.n] = g;
    reg.off[reg.n++] = off;
    for (unsigned i = 0; g->sub && g->sub(i); i++)
        reg_add(g->sub(i));
}

static void reg_list(const struct uln_setting *s)
{
    if (reg.n_all == MAX_SETTINGS) {
        fprintf(stderr, "ulnet: internal: more than %u settings\n", MAX_SETTINGS);
        abort();
    }
    reg.all[reg.n_all++] = *s;
}

static void reg_build(void)
{
    for (unsigned id = 0; uln_transports[id]; id++)
        reg_add(uln_transports[id]->settings);
    for (unsigned i = 0; i < N_CORE; i++) {
        if (core_table[i].name) {
            reg_list(&core_table[i]);
            continue;
        }
        for (unsigned g = 0; g < reg.n; g++)
            for (unsigned j = 0; j < reg.group[g]->n; j++)
                if (ULN_SETTING_SECTION(reg.group[g]->table[j].flags) == core_table[i].flags)
                    reg_list(&reg.group[g]->table[j]);
    }
}

const struct uln_setting *uln_settings(unsigned *n)
{
    pthread_once(&reg_once, reg_build);
    *n = reg.n_all;
    return reg.all;
}

const void *uln_params_block(const struct uln_params *p, const struct uln_settings_group *g)
{
    pthread_once(&reg_once, reg_build);
    for (unsigned i = 0; i < reg.n; i++)
        if (reg.group[i] == g) return p->blocks + reg.off[i];
    fprintf(stderr, "ulnet: internal: the settings of %s are not registered\n", g->name);
    abort();
}

static void *block_of(struct uln_params *p, unsigned i)
{
    return p->blocks + reg.off[i];
}

static const struct uln_setting *setting_of(const char *name)
{
    unsigned n;
    const struct uln_setting *t = uln_settings(&n);
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL; /* a name missing from the table is a bug caught by every test */
}

/* ---- reading one setting ------------------------------------------------------ */

/* Whether this process reports problems in the job-wide settings. Every rank
 * of a job sees the same environment (ulnrun, mpirun -x, srun pass it to
 * all), so one saying what is wrong is enough: rank 0 (or a process whose
 * rank is not known yet: a job of one). The rank is read the way the
 * bootstrap will read it, before the bootstrap runs. */
/* Thread-local, as own_setting below: two threads may be in uln_open (or
 * uln_config_query) at once (a provider's context beside a job's), each with
 * its own config. */
static _Thread_local int given_rank = -1; /* struct uln_config's, set by uln_params_check */

static bool reports_job_settings(void)
{
    if (given_rank >= 0) return given_rank == 0;
    const char *r = getenv("ULN_RANK");
    if (!r || !*r) r = getenv("PMIX_RANK");
    return !r || !*r || strtol(r, NULL, 10) == 0;
}

/* Set by uln_params_check for the setting() calls it makes: the value is this
 * process's own (given in struct uln_config), so it says what is wrong. */
static _Thread_local bool own_setting;

void uln_setting_err(const char *fmt, ...)
{
    if (!own_setting && !reports_job_settings()) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}
#define setting_err uln_setting_err

/* Settings in bytes take K, M or G (times 1024, 1024^2, 1024^3). */
static bool is_size(const char *name)
{
    size_t n = strlen(name);
    const struct uln_setting *d = setting_of(name);
    return (n > 6 && !strcmp(name + n - 6, "_BYTES")) || (n > 4 && !strcmp(name + n - 4, "_MAX")) ||
           (d && (d->flags & ULN_SETTING_SIZE));
}

/* A number as a user writes it: decimal (or 0x hex), no sign, and for sizes
 * one K/M/G suffix. strtoull alone would take "-1" as 2^64-1. */
static int parse_number(const char *name, const char *s, uint64_t *out)
{
    const char *p = s;
    while (isspace((unsigned char)*p))
        p++;
    char range[64] = ""; /* the valid range, as an out-of-range value is told */
    const struct uln_setting *d = setting_of(name);
    if (d && d->hi)
        snprintf(range, sizeof range, " in [%llu, %llu]", (unsigned long long)d->lo,
                 (unsigned long long)d->hi);
    if (*p == '-') {
        setting_err("ulnet: %s=%s: negative values are not allowed (use a number%s)\n", name, s,
                    range);
        return -EINVAL;
    }
    if (!isdigit((unsigned char)*p)) goto bad;
    char *end;
    errno = 0;
    uint64_t v = strtoull(p, &end, 0);
    if (errno) goto bad;
    unsigned shift = 0;
    if (*end && is_size(name) && strchr("kKmMgG", *end)) {
        shift = *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 30;
        end++;
    }
    if (*end) goto bad;
    if (shift && v > (UINT64_MAX >> shift)) goto bad;
    *out = v << shift;
    return 0;
bad:
    setting_err("ulnet: %s=%s is not a %s%s\n", name, s,
                is_size(name) ? "size (bytes, K, M or G after it)" : "number", range);
    return -EINVAL;
}

/* A setting: the configuration's value if set, else the environment's, else
 * the table's default; checked against the table's [lo, hi]. */
int uln_setting_u32(const char *name, uint64_t given, uint32_t *out)
{
    const struct uln_setting *d = setting_of(name);
    if (!d || !d->dflt || d->hi == 0) {
        fprintf(stderr, "ulnet: internal: %s has no numeric entry in the settings table\n", name);
        return -EINVAL;
    }
    uint64_t v = given ? given : strtoull(d->dflt, NULL, 0), lo = d->lo, hi = d->hi;
    const char *s = getenv(name);
    if (!given && s && *s && parse_number(name, s, &v)) return -EINVAL;
    if (v < lo || v > hi) {
        /* A value given in struct uln_config is this process's own: always say. */
        if (given || reports_job_settings())
            fprintf(stderr, "ulnet: %s=%llu is outside [%llu, %llu]\n", name, (unsigned long long)v,
                    (unsigned long long)lo, (unsigned long long)hi);
        return -EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

/* An on/off switch: the configuration's value if set (>= 0), else the
 * environment's (0 or 1), else the table's default. */
int uln_setting_switch(const char *name, int given, int *out)
{
    const char *s = getenv(name);
    if (given >= 0) {
        *out = given != 0;
    } else if (s && *s) {
        if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0) {
            setting_err("ulnet: %s=%s: use 0 or 1\n", name, s);
            return -EINVAL;
        }
        *out = s[0] == '1';
    } else {
        const struct uln_setting *t = setting_of(name); /* the table's default */
        *out = !t || !t->dflt || t->dflt[0] != '0';
    }
    return 0;
}

/* Levenshtein distance of two short names (settings are < 32 characters). */
static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    unsigned row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* A ULN_* variable that is no setting is most often a typo (ULN_RNG_BYTES)
 * whose value would be silently ignored: name it, with the closest setting.
 * Once per process (a program may open several contexts in turn). */
static void warn_unknown_settings(void)
{
    unsigned n;
    const struct uln_setting *t = uln_settings(&n);
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len < 5 || strncmp(*e, "ULN_", 4) != 0 || len > 63) continue;
        char name[64];
        memcpy(name, *e, len);
        name[len] = '\0';
        if (setting_of(name)) continue;
        const char *best = NULL;
        unsigned bd = ~0u;
        for (unsigned i = 0; i < n; i++) {
            unsigned d = edit_distance(name, t[i].name);
            if (d < bd) bd = d, best = t[i].name;
        }
        /* Close enough to be that setting misspelt: at most a third of it. */
        if (!reports_job_settings()) return;
        if (best && bd <= strlen(best) / 3)
            fprintf(stderr, "ulnet: %s is not a ulnet setting (ignored): did you mean %s?\n", name,
                    best);
        else
            fprintf(stderr, "ulnet: %s is not a ulnet setting (ignored; ulninfo -c lists them)\n",
                    name);
    }
}

/* A string setting from the environment: NULL when unset or empty. */
const char *uln_setting_string(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

int uln_setting_choice(const char *name, const char *const *names)
{
    const char *v = uln_setting_string(name);
    if (!v) return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i])) return i;
    setting_err("ulnet: %s=%s: use %s, %s or %s\n", name, v, names[0], names[1], names[2]);
    return -1;
}

/* ---- the core's settings ------------------------------------------------------ */

/* A launcher's number: 0 and *out untouched when unset, 1 when read. */
static int env_int(const char *name, long lo, long hi, long *out)
{
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "ulnet: %s=%s is not a number in [%ld, %ld]\n", name, s, lo, hi);
        return -EINVAL;
    }
    *out = v;
    return 1;
}

/* ULN_JOB_KEY: exactly 1..16 hex digits - no sign, spaces, 0x or overflow.
 * 0 and *key untouched when unset. */
static int env_job_key(uint64_t *key)
{
    const char *s = getenv("ULN_JOB_KEY");
    if (!s || !*s) return 0;
    size_t n = strspn(s, "0123456789abcdefABCDEF");
    *key = n >= 1 && n <= 16 && !s[n] ? strtoull(s, NULL, 16) : 0;
    if (*key) return 0;
    fprintf(stderr, "ulnet: ULN_JOB_KEY=%s is not a nonzero hex number\n", s);
    return -EINVAL;
}

/* Who we are, as the launcher says: read only where struct uln_config leaves
 * it open, so a program that names its own rank is not failed by a stale
 * variable. Each rank's own values: every rank says what is wrong with its. */
static int launcher_settings(const struct uln_config *cfg, struct uln_params *p)
{
    if (p->no_job) return 0; /* no job: nothing a launcher says applies */
    p->boot_rank = p->boot_fd = -1;
    p->boot_size = 0;
    p->job_key = 0;
    p->root = uln_setting_string("ULN_ROOT");
    int rc = 0;
    if (cfg->rank < 0 && (rc = env_int("ULN_RANK", 0, ULN_BOOT_MAX_RANKS - 1, &p->boot_rank)) < 0)
        return rc;
    if (cfg->size <= 0 && (rc = env_int("ULN_SIZE", 1, ULN_BOOT_MAX_RANKS, &p->boot_size)) < 0)
        return rc;
    if (cfg->boot_fd < 0 && (rc = env_int("ULN_BOOT_FD", 0, INT_MAX, &p->boot_fd)) < 0) return rc;
    return cfg->job_key == 0 ? env_job_key(&p->job_key) : 0;
}

/* ULN_BOOT and uln_config.boot: a job, or none. The config wins. */
static int boot_setting(const struct uln_config *cfg, struct uln_params *p)
{
    p->boot_rank = p->boot_fd = -1;
    if (cfg->boot < ULN_BOOT_AUTO || cfg->boot > ULN_BOOT_NONE) return -EINVAL;
    const char *b = uln_setting_string("ULN_BOOT");
    if (cfg->boot == ULN_BOOT_AUTO && b && strcmp(b, "auto") && strcmp(b, "job") &&
        strcmp(b, "none")) {
        setting_err("ulnet: ULN_BOOT=%s: use auto, job or none\n", b);
        return -EINVAL;
    }
    p->no_job =
        cfg->boot == ULN_BOOT_NONE || (cfg->boot == ULN_BOOT_AUTO && b && !strcmp(b, "none"));
    return uln_setting_u32("ULN_MAX_PEERS", cfg->max_peers, &p->max_peers);
}

/* Does transport t answer to name (its own, or one of its aliases)? */
static bool tp_called(const struct uln_transport_ops *t, const char *name)
{
    if (!strcmp(t->name, name)) return true;
    for (unsigned i = 0; t->aliases && t->aliases[i]; i++)
        if (!strcmp(t->aliases[i], name)) return true;
    return false;
}

/* "auto, shm, udp or xdp": the names ULN_TRANSPORT takes, for messages. */
static void tp_names(char *out, size_t room)
{
    const char *names[16];
    unsigned n = 0;
    names[n++] = "auto";
    for (unsigned id = 0; uln_transports[id]; id++)
        if (n < 16) names[n++] = uln_transports[id]->name;
    for (unsigned id = 0; uln_transports[id]; id++)
        for (unsigned i = 0; uln_transports[id]->aliases && uln_transports[id]->aliases[i]; i++)
            if (n < 16) names[n++] = uln_transports[id]->aliases[i];
    size_t at = 0;
    out[0] = 0;
    for (unsigned i = 0; i < n && at < room; i++)
        at += (size_t)snprintf(out + at, room - at, "%s%s",
                               i == 0       ? ""
                               : i + 1 == n ? " or "
                                            : ", ",
                               names[i]);
}

/* ULN_TRANSPORT, or uln_config.transport: auto, or the transport that is to
 * carry every peer it reaches (by its name or an alias). */
static int transport_setting(const struct uln_config *cfg, struct uln_params *p)
{
    const char *tp = cfg->transport ? cfg->transport : getenv("ULN_TRANSPORT");
    p->transport = -1;
    if (!tp || !*tp || !strcmp(tp, "auto")) return 0;
    for (unsigned id = 0; uln_transports[id]; id++)
        if (tp_called(uln_transports[id], tp)) {
            p->transport = (int)id;
            return 0;
        }
    char names[128];
    tp_names(names, sizeof names);
    if (cfg->transport) /* this process's own value: always say */
        fprintf(stderr, "ulnet: transport \"%s\": use %s\n", tp, names);
    else
        setting_err("ulnet: ULN_TRANSPORT=%s: use %s\n", tp, names);
    return -EINVAL;
}

/* The core's numbers and switches. */
static int core_settings(const struct uln_config *cfg, struct uln_params *p)
{
    int rc = 0;
    rc |= uln_setting_u32("ULN_RING_BYTES", cfg->ring_bytes, &p->ring_bytes);
    rc |= uln_setting_u32("ULN_NAP_MAX", cfg->nap_max, &p->nap_max);
    rc |= uln_setting_u32("ULN_SQ_DEPTH", cfg->sq_depth, &p->sq_depth);
    rc |= uln_setting_u32("ULN_CHUNK_BYTES", cfg->chunk_bytes, &p->chunk_bytes);
    rc |= uln_setting_u32("ULN_POST_COPY_MAX", cfg->post_copy_max, &p->post_copy_max);
    rc |= uln_setting_u32("ULN_MAX_EPS", cfg->max_eps, &p->max_eps);
    rc |= uln_setting_u32("ULN_MAX_REGIONS", cfg->max_regions, &p->max_regions);
    /* 0 is a spin time of its own: -1 leaves it to the environment */
    if (cfg->spin_us > 0) {
        rc |= uln_setting_u32("ULN_SPIN_US", (uint64_t)cfg->spin_us, &p->spin_us);
    } else if (cfg->spin_us == 0) {
        p->spin_us = 0;
    } else {
        rc |= uln_setting_u32("ULN_SPIN_US", 0, &p->spin_us);
    }
    rc |= uln_setting_switch("ULN_MEMBARRIER", -1, &p->membarrier);
    rc |= uln_setting_switch("ULN_STATS", -1, &p->stats);
    rc |= transport_setting(cfg, p);
    const char *pr = getenv("ULN_PROGRESS");
    if (pr && *pr && strcmp(pr, "thread") && strcmp(pr, "caller")) {
        setting_err("ulnet: ULN_PROGRESS=%s: use caller or thread\n", pr);
        rc = -EINVAL;
    }
    p->progress_thread = pr && !strcmp(pr, "thread");
    return rc;
}

/* The rings' sizes, one against the other. */
static int ring_check(const struct uln_config *cfg, struct uln_params *p)
{
    /* ring_bytes and nap_max may come from this process's struct uln_config. */
    own_setting = cfg->ring_bytes || cfg->nap_max;
    if (p->ring_bytes & (p->ring_bytes - 1)) {
        setting_err("ulnet: ULN_RING_BYTES=%u must be a power of two\n", p->ring_bytes);
        return -EINVAL;
    }
    /* A ring must hold at least two of the largest NAPs, so one in use by the
     * receiver never stops the sender completely. */
    uint64_t need = (uint64_t)uln_ring_cells_for(p->nap_max) * ULN_CELL * 2;
    if (need > p->ring_bytes) {
        setting_err("ulnet: ULN_NAP_MAX=%u needs ULN_RING_BYTES of at least %llu\n", p->nap_max,
                    (unsigned long long)need);
        return -EINVAL;
    }
    /* Ring-path fragments: a quarter ring, whole cells after the 64-byte header. */
    uint32_t f = p->ring_bytes / 4;
    if (f > 65536) f = 65536;
    p->frag_max = f - ULN_MSG_HDR - (uint32_t)sizeof(struct uln_put_frag);
    return 0;
}

/* Every group's settings into its block, whatever the transport in use, so
 * that a typo fails uln_open. */
static int groups_resolve(const struct uln_config *cfg, struct uln_params *p)
{
    int rc = 0;
    for (unsigned i = 0; i < reg.n; i++) {
        memset(block_of(p, i), 0, reg.group[i]->block_bytes);
        if (reg.group[i]->resolve(cfg, block_of(p, i)) != 0) rc = -EINVAL;
    }
    return rc;
}

static int groups_check(struct uln_params *p)
{
    for (unsigned i = 0; i < reg.n; i++)
        if (reg.group[i]->check && reg.group[i]->check(block_of(p, i)) != 0) return -EINVAL;
    return 0;
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;

/* Every setting resolved into p and checked, each reason said on stderr by
 * whoever reports it: the one path of uln_open and uln_config_query. */
int uln_params_check(const struct uln_config *cfg, struct uln_params *p)
{
    pthread_once(&reg_once, reg_build);
    given_rank = cfg->rank;
    own_setting = false;
    pthread_once(&warn_once, warn_unknown_settings);
    int rc = groups_resolve(cfg, p);
    rc |= uln_setting_u32("ULN_BOOT_TIMEOUT", 0, &p->boot_timeout_s);
    if (boot_setting(cfg, p) != 0) {
        own_setting = true;
        return -EINVAL;
    }
    if (launcher_settings(cfg, p) < 0) {
        own_setting = true; /* this rank's own value, and it said what is wrong */
        return -EINVAL;
    }
    rc |= core_settings(cfg, p);
    if (rc || groups_check(p) != 0) return -EINVAL;
    return ring_check(cfg, p);
}

int uln_params_resolve(const struct uln_config *cfg, struct uln_params *p)
{
    int rc = uln_params_check(cfg, p);
    /* A launcher ends the job when the first rank fails: a rank that said
     * nothing lets rank 0 say why before its own failure ends the job.
     * uln_config_query joins no job, and so never waits. */
    if (rc && !reports_job_settings() && !own_setting) usleep(500 * 1000);
    return rc;
}

/* What only an open context knows stays as uln_config_query documents it:
 * transport NULL, udp_peers 0, bootstrap and max_peers known for no job
 * only, shm_cma as asked (uln_query's transports say whether it works). */
void uln_params_info(const struct uln_params *p, struct uln_info *info)
{
    *info = (struct uln_info){.nap_max = p->nap_max,
                              .inline_max = ULN_INLINE_MAX,
                              .sq_depth = p->sq_depth,
                              .ring_bytes = p->ring_bytes,
                              .chunk_bytes = p->chunk_bytes,
                              .post_copy_max = p->post_copy_max,
                              .max_eps = p->max_eps,
                              .max_regions = p->max_regions,
                              .progress_thread = p->progress_thread,
                              .bootstrap = p->no_job ? "none" : NULL,
                              .max_peers = p->no_job ? p->max_peers : 0};
    for (unsigned i = 0; i < reg.n; i++)
        if (reg.group[i]->info) reg.group[i]->info(p->blocks + reg.off[i], info);
}
