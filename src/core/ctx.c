/*
 * ctx.c - the context: settings, joining the job, statistics, error text.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>

#include "core/internal.h"
#include "boot/board.h"
#include "boot/root.h"
#include "boot/addr.h"
#include "link/select.h" /* ULN_LINK and ULN_FAULT are checked at uln_open */
#include "seal/seal.h"   /* ULN_SECURE*, ULN_SECRET_FILE: checked at uln_open */

extern char **environ;

ULN_EXPORT const char *uln_version(int *num)
{
    if (num)
        *num = ULNET_VERSION_NUM(ULNET_VERSION_MAJOR, ULNET_VERSION_MINOR, ULNET_VERSION_PATCH);
    return ULN_VERSION_STRING; /* project(VERSION); the build checks the header agrees */
}

ULN_EXPORT void uln_config_init(struct uln_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->rank = -1;
    cfg->boot_fd = -1;
    cfg->shm_direct = -1;
    cfg->shm_cma = -1;
    cfg->spin_us = -1;
}

/* Every environment variable ulnet reads, in one place: the numeric ones'
 * defaults and bounds are the ones resolve_params applies, and ulninfo prints
 * the whole table (with the values in force). dflt NULL: no default (set by a
 * launcher, or derived as the text says). hi == 0: not a plain number. */
static const struct uln_setting settings_table[] = {
    /* Set by the launcher or bootstrap (docs/running.md). */
    {"ULN_RANK", NULL, 0, 0, "this process's rank, 0..size-1 (launcher)"},
    {"ULN_SIZE", NULL, 0, 0, "ranks in the job (launcher); unset: a job of one"},
    {"ULN_JOB_KEY", NULL, 0, 0, "job key, 16 hex digits: only equal keys talk (launcher)"},
    {"ULN_BOOT_FD", NULL, 0, 0, "descriptor of ulnrun's bootstrap board (ulnrun)"},
    {"ULN_ROOT", NULL, 0, 0, "ip:port of rank 0's TCP rendezvous, for any launcher"},
    {"ULN_BOOT_TIMEOUT", "60", 1, 86400, "seconds uln_open waits for the ranks (ULN_ROOT, PMIx)"},
    {"ULN_BOOT", "auto", 0, 0,
     "none: join no job, peers by address (uln_peer_insert); job or auto: the launcher's job"},
    {"ULN_MAX_PEERS", "1024", 2, ULN_BOARD_MAX_RANKS,
     "with no job: peer ids per context (inbox slots; untouched ones cost no memory)"},
    /* Queues and rings. */
    {"ULN_RING_BYTES", "131072", 4096, 1u << 28, "NAP ring per (peer, endpoint), a power of two"},
    /* A NAP is one ring message, and a message header counts at most 65535
     * cells: a larger nap_max was once accepted and its NAPs never arrived. */
    {"ULN_NAP_MAX", "8192", 0, ULN_RING_MSG_MAX, "largest NAP payload (the ring must hold two)"},
    {"ULN_SQ_DEPTH", "256", 1, 1u << 20, "send-queue entries per endpoint"},
    {"ULN_CHUNK_BYTES", "131072", 4096, 1u << 30,
     "bytes an endpoint moves per engine pass before the next one's turn (fairness)"},
    /* 64 KiB: small PUT/GETs keep the doorbell's latency (one copy inside the
     * call); a larger one is queued: the call copies at most its first chunk
     * and polling moves the rest, so the caller computes meanwhile and the
     * contract is the one the rings and udp give (ulnet.h). */
    {"ULN_POST_COPY_MAX", "65536", 0, 1u << 30,
     "PUT/GET up to this size, with nothing queued, is copied inside the post call"},
    {"ULN_MAX_EPS", "16", 1, 64, "endpoints per process"},
    {"ULN_MAX_REGIONS", "4096", 1, 1u << 24, "registered regions per process"},
    {"ULN_SPIN_US", "50", 0, 1000000, "microseconds uln_cq_wait spins before it sleeps"},
    /* Shared memory. */
    {"ULN_SHM_DIRECT", "1", 0, 1, "0: PUT/GET through the rings, placed by the target"},
    {"ULN_SHM_CMA", "1", 0, 1, "0: never use process_vm_readv/writev"},
    {"ULN_MEMBARRIER", "1", 0, 1,
     "0: direct accesses announce themselves with a fence each, not membarrier at dereg"},
    /* Transports and progress. */
    {"ULN_TRANSPORT", "auto", 0, 0,
     "auto: shm on this host, udp to others; udp; shm; xdp: the same as ULN_TRANSPORT=udp "
     "ULN_LINK=xdp"},
    {"ULN_LINK", "auto", 0, 0,
     "the link under udp: auto (AF_XDP where the driver runs it zero-copy, under "
     "ULN_TRANSPORT=auto; else udp); udp: sockets; xdp: AF_XDP (docs/xdp.md)"},
    {"ULN_PROGRESS", "caller", 0, 0, "thread: a progress thread serves peers in the background"},
    /* UDP. */
    {"ULN_UDP_WINDOW", "1024", 4, 32768,
     "packets in flight per (endpoint, peer), a power of two; buffers taken as used"},
    {"ULN_UDP_MTU", "0", 0, 65535, "datagram size limit; 0: the interface's (capped to 9000)"},
    {"ULN_UDP_DEAD_MS", "10000", 10, 3600000,
     "a peer silent this long while awaited is dead (-ECONNRESET)"},
    {"ULN_UDP_PORT", "0", 0, 65535,
     "first of ULN_MAX_EPS consecutive ports, one per endpoint index, of local rank 0 (rank L: "
     "+ L x ULN_MAX_EPS); 0: any free"},
    {"ULN_LOCAL_RANK", NULL, 0, 0,
     "this rank's place among its host's ranks: ULN_UDP_PORT + it x ULN_MAX_EPS is its first "
     "port; unset: the launcher's (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), ulnrun's rank"},
    {"ULN_UDP_ADDR", NULL, 0, 0,
     "address to publish and bind; unset: ULN_UDP_IF's, the route to ULN_ROOT, under PMIx "
     "the default route's source, else loopback"},
    {"ULN_UDP_IF", NULL, 0, 0,
     "publish and bind this interface's address (one name for every host, e.g. ib0)"},
    {"ULN_UDP_GRO", "1", 0, 0, "0: no UDP_GRO on receive (one datagram per buffer)"},
    /* AF_XDP (ULN_LINK=xdp, docs/xdp.md). */
    {"ULN_XDP_MODE", "auto", 0, 0, "auto: zero-copy where the driver can, else copy; copy; zc"},
    {"ULN_XDP_HOOK", "auto", 0, 0,
     "auto: native XDP where the driver has it, else generic; "
     "native; generic"},
    {"ULN_XDP_QUEUE", "0", 0, 1023, "the interface's receive queue the AF_XDP sockets bind"},
    {"ULN_XDP_GSO_RUN", "4", 0, 64,
     "copy mode: runs of this many datagrams or more to one peer leave by the bound UDP socket "
     "as one UDP_SEGMENT send (the kernel builds one skb, not one per frame); 0: all by AF_XDP"},
    /* Sealed datagrams between hosts (docs/security.md). */
    {"ULN_SECURE", "off", 0, 0,
     "udp datagrams: off; auth: each carries a tag; encrypt: also encrypted (same in a job)"},
    {"ULN_SECRET_FILE", NULL, 0, 0,
     "file of the job secret the keys are bound to (ours, not readable by others)"},
    {"ULN_SECURE_CIPHER", NULL, 0, 0,
     "aes-256-gcm or chacha20-poly1305; unset: AES-GCM where the CPU has AES instructions"},
    /* Diagnostics. */
    {"ULN_STATS", "0", 0, 1,
     "1: uln_close prints the context's counters that are not 0 on stderr, one line"},
    {"ULN_FAULT", NULL, 0, 0, "tests: drop=P,dup=P,reorder=P,delay=US,seed=N at the socket"},
};

const struct uln_setting *uln_settings(unsigned *n)
{
    *n = (unsigned)(sizeof settings_table / sizeof settings_table[0]);
    return settings_table;
}

static const struct uln_setting *setting_of(const char *name)
{
    unsigned n;
    const struct uln_setting *t = uln_settings(&n);
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL; /* a name missing from the table is a bug caught by every test */
}

/* Whether this process reports problems in the job-wide settings. Every rank
 * of a job sees the same environment (ulnrun, mpirun -x, srun pass it to
 * all), so one saying what is wrong is enough: rank 0 (or a process whose
 * rank is not known yet: a job of one). The rank is read the way the
 * bootstrap will read it, before the bootstrap runs. */
/* Thread-local, as own_setting below: two threads may be in uln_open (or
 * uln_config_query) at once (a provider's context beside a job's), each with
 * its own config. */
static _Thread_local int given_rank = -1; /* struct uln_config's, set by check_params */

static bool reports_job_settings(void)
{
    if (given_rank >= 0) return given_rank == 0;
    const char *r = getenv("ULN_RANK");
    if (!r || !*r) r = getenv("PMIX_RANK");
    return !r || !*r || strtol(r, NULL, 10) == 0;
}

/* Set by check_params for the setting() calls it makes: the value is this
 * process's own (given in struct uln_config), so it says what is wrong. */
static _Thread_local bool own_setting;

#define setting_err(...)                                                                           \
    do {                                                                                           \
        if (own_setting || reports_job_settings()) fprintf(stderr, __VA_ARGS__);                   \
    } while (0)

/* Settings in bytes take K, M or G (times 1024, 1024^2, 1024^3). */
static bool is_size(const char *name)
{
    size_t n = strlen(name);
    return (n > 6 && !strcmp(name + n - 6, "_BYTES")) || (n > 4 && !strcmp(name + n - 4, "_MAX")) ||
           !strcmp(name, "ULN_UDP_MTU");
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
static int setting(const char *name, uint64_t given, uint32_t *out)
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
static int switch_setting(const char *name, int given, int *out)
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
static const char *string_setting(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

/* The rank's place among its host's ranks, as ULN_LOCAL_RANK or else its
 * launcher tells: -1 unknown; -EINVAL: ULN_LOCAL_RANK is not one. */
static int local_rank_setting(int *out)
{
    static const char *const names[] = {"ULN_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "SLURM_LOCALID", "MPI_LOCALRANKID"};
    *out = -1;
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *s = string_setting(names[i]);
        char *end;
        long v = s ? strtol(s, &end, 10) : -1;
        if (s && !*end && v >= 0 && v < 65536) {
            *out = (int)v;
            return 0;
        }
        if (s && i == 0) {
            fprintf(stderr, "ulnet: ULN_LOCAL_RANK=%s is not a number in [0, 65535]\n", s);
            return -EINVAL;
        }
    }
    return 0;
}

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
    p->root = string_setting("ULN_ROOT");
    int rc = 0;
    if (cfg->rank < 0 && (rc = env_int("ULN_RANK", 0, ULN_BOARD_MAX_RANKS - 1, &p->boot_rank)) < 0)
        return rc;
    if (cfg->size <= 0 && (rc = env_int("ULN_SIZE", 1, ULN_BOARD_MAX_RANKS, &p->boot_size)) < 0)
        return rc;
    if (cfg->boot_fd < 0 && (rc = env_int("ULN_BOOT_FD", 0, INT_MAX, &p->boot_fd)) < 0) return rc;
    return cfg->job_key == 0 ? env_job_key(&p->job_key) : 0;
}

/* One of names (NULL-terminated) or the first (unset): its index, -1 if none. */
static int choice_setting(const char *name, const char *const *names)
{
    const char *v = string_setting(name);
    if (!v) return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i])) return i;
    setting_err("ulnet: %s=%s: use %s, %s or %s\n", name, v, names[0], names[1], names[2]);
    return -1;
}

/* AF_XDP's: read whatever the transport, so that a typo fails uln_open. */
static int xdp_settings(struct uln_params *p)
{
    static const char *const modes[] = {"auto", "copy", "zc", NULL};
    static const char *const hooks[] = {"auto", "native", "generic", NULL};
    p->xdp_mode = choice_setting("ULN_XDP_MODE", modes);
    p->xdp_hook = choice_setting("ULN_XDP_HOOK", hooks);
    int rc = setting("ULN_XDP_QUEUE", 0, &p->xdp_queue);
    if (!rc) rc = setting("ULN_XDP_GSO_RUN", 0, &p->xdp_gso_run);
    return p->xdp_mode < 0 || p->xdp_hook < 0 ? -EINVAL : rc;
}

/* ULN_LINK: "auto" or a link this ulnet has (link/select.c). xdp_alias:
 * ULN_TRANSPORT=xdp, which is ULN_LINK=xdp (and says so if ULN_LINK names
 * another). */
static int link_setting(struct uln_params *p, bool xdp_alias)
{
    const char *v = string_setting("ULN_LINK");
    if (!v) v = xdp_alias ? "xdp" : "auto";
    char names[128];
    if (strcmp(v, "auto") && !uln_link_kind_find(v)) {
        uln_link_kind_names(names, sizeof names);
        setting_err("ulnet: ULN_LINK=%s: use %s\n", v, names);
        return -EINVAL;
    }
    if (xdp_alias && strcmp(v, "xdp")) {
        setting_err("ulnet: ULN_TRANSPORT=xdp is ULN_LINK=xdp, but ULN_LINK=%s\n", v);
        return -EINVAL;
    }
    snprintf(p->link, sizeof p->link, "%s", v);
    return 0;
}

/* ULN_SECURE, ULN_SECURE_CIPHER, ULN_SECRET_FILE: a secret file that cannot
 * serve (others may read it, too short, missing) fails uln_open here. */
static int secure_settings(struct uln_params *p)
{
    static const char *const modes[] = {"off", "auth", "encrypt", NULL};
    enum uln_seal_cipher c = ULN_SEAL_AES_256_GCM;
    int rc = 0;
    p->secure = choice_setting("ULN_SECURE", modes);
    const char *cs = string_setting("ULN_SECURE_CIPHER");
    if (uln_seal_cipher_local(&c) != 0) {
        setting_err("ulnet: ULN_SECURE_CIPHER=%s: use aes-256-gcm or chacha20-poly1305\n", cs);
        rc = -EINVAL;
    }
    p->secure_cipher = (int)c;
    p->secret = string_setting("ULN_SECRET_FILE");
    uint8_t sec[ULN_SEAL_SECRET_BYTES];
    int src = p->secret ? uln_seal_secret_load(p->secret, sec) : 0;
    explicit_bzero(sec, sizeof sec);
    if (src) {
        setting_err("ulnet: ULN_SECRET_FILE=%s: %s\n", p->secret,
                    src == -EPERM ? "must be a regular file of ours that others can neither read "
                                    "nor write (chmod 600)"
                    : src == -EINVAL ? "must hold 16 bytes to 64 KiB"
                                     : strerror(-src));
        rc = -EINVAL;
    }
    return p->secure < 0 ? -EINVAL : rc;
}

/* The settings that are not numbers, resolved into p and checked here, so
 * that a bad one fails uln_open, not the first endpoint that would use it. */
static int text_settings(struct uln_params *p)
{
    int rc = 0;
    char why[160];
    p->fault = string_setting("ULN_FAULT");
    if (p->fault && uln_link_fault_check(p->fault, why, sizeof why) < 0) {
        setting_err("ulnet: ULN_FAULT=%s: %s\n", p->fault, why);
        rc = -EINVAL;
    }
    struct sockaddr_storage ss;
    socklen_t sslen;
    p->udp_addr = string_setting("ULN_UDP_ADDR");
    if (p->udp_addr && uln_addr_parse_ip(p->udp_addr, &ss, &sslen) != 0) {
        setting_err("ulnet: ULN_UDP_ADDR=%s is not an IP address\n", p->udp_addr);
        rc = -EINVAL;
    }
    p->udp_if = string_setting("ULN_UDP_IF");
    if (p->udp_if && !if_nametoindex(p->udp_if)) {
        setting_err("ulnet: ULN_UDP_IF=%s: no such interface\n", p->udp_if);
        rc = -EINVAL;
    }
    rc |= setting("ULN_BOOT_TIMEOUT", 0, &p->boot_timeout_s);
    rc |= xdp_settings(p);
    rc |= secure_settings(p);
    return rc;
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;

/* ULN_BOOT and uln_config.boot: a job, or none. The config wins. */
static int boot_setting(const struct uln_config *cfg, struct uln_params *p)
{
    p->boot_rank = p->boot_fd = -1;
    if (cfg->boot < ULN_BOOT_AUTO || cfg->boot > ULN_BOOT_NONE) return -EINVAL;
    const char *b = string_setting("ULN_BOOT");
    if (cfg->boot == ULN_BOOT_AUTO && b && strcmp(b, "auto") && strcmp(b, "job") &&
        strcmp(b, "none")) {
        setting_err("ulnet: ULN_BOOT=%s: use auto, job or none\n", b);
        return -EINVAL;
    }
    p->no_job =
        cfg->boot == ULN_BOOT_NONE || (cfg->boot == ULN_BOOT_AUTO && b && !strcmp(b, "none"));
    return setting("ULN_MAX_PEERS", cfg->max_peers, &p->max_peers);
}

/* Every setting resolved into p and checked, each reason said on stderr by
 * whoever reports it: the one path of uln_open and uln_config_query. */
static int check_params(const struct uln_config *cfg, struct uln_params *p)
{
    given_rank = cfg->rank;
    own_setting = false;
    pthread_once(&warn_once, warn_unknown_settings);
    int rc = text_settings(p);
    if (boot_setting(cfg, p) != 0) {
        own_setting = true;
        return -EINVAL;
    }
    if (launcher_settings(cfg, p) < 0) {
        own_setting = true; /* this rank's own value, and it said what is wrong */
        return -EINVAL;
    }
    rc |= setting("ULN_RING_BYTES", cfg->ring_bytes, &p->ring_bytes);
    rc |= setting("ULN_NAP_MAX", cfg->nap_max, &p->nap_max);
    rc |= setting("ULN_SQ_DEPTH", cfg->sq_depth, &p->sq_depth);
    rc |= setting("ULN_CHUNK_BYTES", cfg->chunk_bytes, &p->chunk_bytes);
    rc |= setting("ULN_POST_COPY_MAX", cfg->post_copy_max, &p->post_copy_max);
    rc |= setting("ULN_MAX_EPS", cfg->max_eps, &p->max_eps);
    rc |= setting("ULN_MAX_REGIONS", cfg->max_regions, &p->max_regions);
    /* 0 is a spin time of its own: -1 leaves it to the environment */
    if (cfg->spin_us > 0) {
        rc |= setting("ULN_SPIN_US", (uint64_t)cfg->spin_us, &p->spin_us);
    } else if (cfg->spin_us == 0) {
        p->spin_us = 0;
    } else {
        rc |= setting("ULN_SPIN_US", 0, &p->spin_us);
    }
    rc |= switch_setting("ULN_SHM_DIRECT", cfg->shm_direct, &p->shm_direct);
    rc |= switch_setting("ULN_SHM_CMA", cfg->shm_cma, &p->shm_cma);
    rc |= switch_setting("ULN_MEMBARRIER", -1, &p->membarrier);
    rc |= setting("ULN_UDP_WINDOW", cfg->udp_window, &p->udp_window);
    rc |= setting("ULN_UDP_MTU", 0, &p->udp_mtu);
    rc |= setting("ULN_UDP_DEAD_MS", cfg->udp_dead_ms, &p->udp_dead_ms);
    rc |= setting("ULN_UDP_PORT", 0, &p->udp_port);
    rc |= switch_setting("ULN_UDP_GRO", -1, &p->udp_gro);
    rc |= switch_setting("ULN_STATS", -1, &p->stats);
    rc |= local_rank_setting(&p->local_rank);
    const char *tp = cfg->transport ? cfg->transport : getenv("ULN_TRANSPORT");
    if (!tp || !*tp || !strcmp(tp, "auto"))
        p->transport = ULN_TP_AUTO;
    else if (!strcmp(tp, "shm"))
        p->transport = ULN_TP_SHM;
    else if (!strcmp(tp, "udp"))
        p->transport = ULN_TP_UDP;
    else if (!strcmp(tp, "xdp")) /* an alias: udp everywhere, its packets over AF_XDP */
        p->transport = ULN_TP_UDP;
    else {
        if (cfg->transport) /* this process's own value: always say */
            fprintf(stderr, "ulnet: transport \"%s\": use auto, shm, udp or xdp\n", tp);
        else
            setting_err("ulnet: ULN_TRANSPORT=%s: use auto, shm, udp or xdp\n", tp);
        rc = -EINVAL;
    }
    rc |= link_setting(p, tp && !strcmp(tp, "xdp"));
    const char *pr = getenv("ULN_PROGRESS");
    if (pr && *pr && strcmp(pr, "thread") && strcmp(pr, "caller")) {
        setting_err("ulnet: ULN_PROGRESS=%s: use caller or thread\n", pr);
        rc = -EINVAL;
    }
    p->progress_thread = pr && !strcmp(pr, "thread");
    if (rc) return -EINVAL;
    if (p->udp_window & (p->udp_window - 1)) {
        setting_err("ulnet: ULN_UDP_WINDOW=%u must be a power of two\n", p->udp_window);
        return -EINVAL;
    }
    if (p->udp_mtu && p->udp_mtu < 576) {
        setting_err("ulnet: ULN_UDP_MTU=%u is below 576\n", p->udp_mtu);
        return -EINVAL;
    }
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

/* uln_open's: check_params, and on failure the launcher's pause. */
static int resolve_params(const struct uln_config *cfg, struct uln_params *p)
{
    int rc = check_params(cfg, p);
    /* A launcher ends the job when the first rank fails: a rank that said
     * nothing lets rank 0 say why before its own failure ends the job.
     * uln_config_query joins no job, and so never waits. */
    if (rc && !reports_job_settings() && !own_setting) usleep(500 * 1000);
    return rc;
}

/* cfg, or "everything from the environment" in *dflt when it is NULL. */
static const struct uln_config *config_or_default(const struct uln_config *cfg,
                                                  struct uln_config *dflt)
{
    if (cfg) return cfg;
    uln_config_init(dflt);
    return dflt;
}

/* The part of struct uln_info that the settings alone decide. What only an
 * open context knows stays as uln_config_query documents it: transport
 * NULL, udp_peers 0, bootstrap and max_peers known for no job only, shm_cma
 * as asked (uln_query's transports say whether it works). */
static void info_of_params(const struct uln_params *p, struct uln_info *info)
{
    *info = (struct uln_info){.nap_max = p->nap_max,
                              .inline_max = ULN_INLINE_MAX,
                              .sq_depth = p->sq_depth,
                              .ring_bytes = p->ring_bytes,
                              .chunk_bytes = p->chunk_bytes,
                              .post_copy_max = p->post_copy_max,
                              .max_eps = p->max_eps,
                              .max_regions = p->max_regions,
                              .shm_direct = p->shm_direct,
                              .shm_cma = p->shm_cma,
                              .udp_window = p->udp_window,
                              .udp_dead_ms = p->udp_dead_ms,
                              .progress_thread = p->progress_thread,
                              .bootstrap = p->no_job ? "none" : NULL,
                              .max_peers = p->no_job ? p->max_peers : 0};
}

ULN_EXPORT int uln_config_query(const struct uln_config *cfg_in, struct uln_info *info)
{
    if (!info) return -EINVAL;
    struct uln_config dflt;
    const struct uln_config *cfg = config_or_default(cfg_in, &dflt);
    struct uln_params p = {0};
    int rc = check_params(cfg, &p);
    if (!rc) info_of_params(&p, info);
    return rc;
}

unsigned uln_fork_gen;

static void on_fork_child(void)
{
    uln_fork_gen++; /* every context opened before the fork is the parent's */
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

static void ctx_free(struct uln_ctx *ctx)
{
    uln_progress_stop(ctx); /* first: it walks the endpoints */
    for (unsigned i = 0; ctx->eps && i < ctx->n_eps; i++)
        if (ctx->eps[i]) uln_ep_close(ctx->eps[i]);
    uln_ep_free_closed(ctx);
    uln_cq_close_all(ctx);
    if (ctx->keys) uln_mr_close_all(ctx);
    uln_transports_close(ctx);
    uln_peers_close(ctx);
    uln_doorbell_close(ctx);
    uln_inbox_close(ctx);
    uln_boot_fini(ctx);
    free(ctx->regions);
    free(ctx->eps);
    pthread_mutex_destroy(&ctx->lock);
    pthread_mutex_destroy(&ctx->big_lock);
    free(ctx);
}

/* The asymmetric fence of the hazard protocol (mr.c: uln_mr_dereg): this
 * process registers for membarrier(GLOBAL_EXPEDITED), so that an owner's
 * dereg reaches our threads with it, and makes sure it can issue one itself.
 * Registration is per process and idempotent; a kernel (or a seccomp
 * filter) without the commands leaves every side on seq_cst fences. */
static bool membarrier_setup(void)
{
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    if (cmds < 0 || (cmds & need) != need) return false;
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 &&
           syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

ULN_EXPORT int uln_open(const struct uln_config *cfg_in, struct uln_ctx **out)
{
    struct uln_config dflt;
    const struct uln_config *cfg = config_or_default(cfg_in, &dflt);
    if (!out) return -EINVAL;
    struct uln_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->big_lock, NULL);
    static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
    pthread_once(&fork_once, register_fork_handler);
    ctx->fork_gen = uln_fork_gen;
    ctx->board_fd = -1;
    ctx->bell_fd = -1;
    int rc = resolve_params(cfg, &ctx->p);
    if (!rc) rc = uln_boot_init(ctx, cfg);
    if (rc) goto fail;
    ctx->regions = calloc(ctx->p.max_regions, sizeof *ctx->regions);
    ctx->eps = calloc(ctx->p.max_eps, sizeof *ctx->eps);
    if (!ctx->regions || !ctx->eps) {
        rc = -ENOMEM;
        goto fail;
    }
    uint8_t addr[ULN_BOARD_SLOT_BYTES - 8];
    memset(addr, 0, sizeof addr);
    if ((rc = uln_inbox_open(ctx)) != 0 || (rc = uln_doorbell_open(ctx)) != 0) goto fail;
    /* Before the inbox is published: peers read the flag when they map it. */
    ctx->hz_light = ctx->p.membarrier && membarrier_setup();
    ctx->inbox->hdr->dereg_fence = ctx->hz_light;
    if ((rc = uln_transports_open(ctx, addr, sizeof addr)) != 0) goto fail;
    if ((rc = uln_boot_publish(ctx, addr, sizeof addr)) != 0) goto fail;
    /* Everybody's address must be on the board before anyone sends. */
    /* Root and PMIx modes keep their own deadline (ULN_BOOT_TIMEOUT) and say
     * what is missing. */
    const char *mode = uln_boot_mode(ctx);
    bool own_deadline = !strcmp(mode, "root") || !strcmp(mode, "pmix");
    if ((rc = uln_boot_wait_all(ctx, own_deadline ? -1 : 60000)) != 0) {
        if (own_deadline) goto fail;
        fprintf(stderr, "ulnet: rank %d: not all %d ranks joined within 60 s\n", ctx->rank,
                ctx->size);
        goto fail;
    }
    if ((rc = uln_peers_open(ctx)) != 0 || (rc = uln_transports_choose(ctx)) != 0) goto fail;
    if (ctx->p.progress_thread && (rc = uln_progress_start(ctx)) != 0) goto fail;
    *out = ctx;
    return 0;
fail:
    ctx_free(ctx);
    return rc;
}

static void print_counters(const struct uln_ctx *ctx); /* ULN_STATS, below */

ULN_EXPORT int uln_close(struct uln_ctx *ctx)
{
    if (!ctx) return -EINVAL;
    /* A forked child must not tear down what it shares with the parent (its
     * copy of the memory goes when it exits or execs). */
    if (uln_ctx_forked(ctx)) return -EPERM;
    if (ctx->p.stats) print_counters(ctx); /* before the endpoints, and their counts, go */
    ctx_free(ctx);
    return 0;
}

ULN_EXPORT int uln_rank(const struct uln_ctx *ctx)
{
    return ctx ? ctx->rank : -EINVAL;
}
ULN_EXPORT int uln_size(const struct uln_ctx *ctx)
{
    return ctx ? ctx->size : -EINVAL;
}
ULN_EXPORT uint64_t uln_job_key(const struct uln_ctx *ctx)
{
    return ctx ? ctx->job_key : 0;
}

/* The capability bits of the transports carrying the peers: all of them,
 * and any. A direct path that the settings turned off (ULN_SHM_DIRECT=0) is
 * not one the peers have. */
static void caps_of_peers(const struct uln_ctx *ctx, struct uln_info *info)
{
    uint32_t all = ~0u, any = 0;
    bool some = false;
    for (int p = 0; ctx->peer_tp && p < ctx->size; p++) {
        const struct uln_transport_ops *tp = ctx->peer_tp[p];
        if (p == ctx->rank || !tp) continue;
        all &= tp->caps;
        any |= tp->caps;
        some = true;
    }
    if (!ctx->p.shm_direct) all &= ~ULN_CAP_DIRECT_RMA, any &= ~ULN_CAP_DIRECT_RMA;
    info->caps_all = some ? all : 0;
    info->caps_any = any;
}

ULN_EXPORT int uln_query(const struct uln_ctx *ctx, struct uln_info *info)
{
    if (!ctx || !info) return -EINVAL;
    info_of_params(&ctx->p, info);
    info->transport = ctx->tp_names;
    info->progress_thread = ctx->progress_on;
    info->bootstrap = uln_boot_mode(ctx);
    info->max_peers = (uint32_t)ctx->size;
    for (unsigned id = 0; uln_transports[id]; id++)
        if (uln_transports[id]->query) uln_transports[id]->query(ctx, info);
    caps_of_peers(ctx, info);
    return 0;
}

/* Every field of struct uln_counters, each also one of struct uln_stats.
 * A list clang-format would rewrap on every run: laid out by hand. */
/* clang-format off */
#define ULN_COUNTERS(X)                                                                \
    X(naps_sent) X(naps_received) X(puts) X(gets) X(bytes_put) X(bytes_got)            \
    X(eagain) X(refused_key) X(refused_bounds) X(refused_access) X(refused_job)        \
    X(malformed) X(cache_hits) X(cache_misses) X(sleeps) X(wakeups_sent)               \
    X(pkts_sent) X(pkts_received) X(retransmits) X(duplicates) X(stale)                \
    X(peers_dead) X(pkts_dropped) X(atomics) X(atomics_served) X(refused_align)        \
    X(refused_stale_ep) X(refused_auth)
/* clang-format on */

static void add_stats(struct uln_counters *o, const struct uln_stats *s)
{
#define ADD(f) o->f += atomic_load_explicit(&s->f, memory_order_relaxed);
    ULN_COUNTERS(ADD)
#undef ADD
}

/* ULN_STATS=1: the counters that are not 0, one line on stderr, written
 * whole so that ranks sharing a terminal do not interleave within it. */
static void print_counters(const struct uln_ctx *ctx)
{
    struct uln_counters c;
    if (uln_counters_get(ctx, &c) != 0) return;
    char line[2048];
    /* A context with no job has no rank: every such process is "peer 0" of
     * its own, which would read as rank 0 everywhere. */
    int n = ctx->no_job
                ? snprintf(line, sizeof line, "ulnet: pid %d (no job) counters:", (int)getpid())
                : snprintf(line, sizeof line, "ulnet: rank %d (pid %d) counters:", ctx->rank,
                           (int)getpid());
#define PUT(f)                                                                                     \
    if (c.f && n > 0 && (size_t)n < sizeof line)                                                   \
        n += snprintf(line + n, sizeof line - (size_t)n, " %s=%llu", #f, (unsigned long long)c.f);
    ULN_COUNTERS(PUT)
#undef PUT
    if (n > 0 && (size_t)n < sizeof line) fprintf(stderr, "%s\n", line);
}

ULN_EXPORT int uln_counters_get(const struct uln_ctx *ctx, struct uln_counters *out)
{
    if (!ctx || !out) return -EINVAL;
    memset(out, 0, sizeof *out);
    add_stats(out, &ctx->stats);
    /* Refusals that initiators on this host found on our key table. */
    struct uln_inbox_hdr *h = ctx->inbox->hdr;
    out->refused_key += atomic_load_explicit(&h->refused[0], memory_order_relaxed);
    out->refused_bounds += atomic_load_explicit(&h->refused[1], memory_order_relaxed);
    out->refused_access += atomic_load_explicit(&h->refused[2], memory_order_relaxed);
    out->refused_align += atomic_load_explicit(&h->refused[3], memory_order_relaxed);
    struct uln_ctx *c = (struct uln_ctx *)ctx;
    pthread_mutex_lock(&c->lock);
    for (unsigned i = 0; i < ctx->n_eps; i++)
        if (ctx->eps[i]) add_stats(out, &ctx->eps[i]->stats);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* libc's text for errno e, its first letter in lower case: libc capitalises
 * ("Cannot allocate memory"), ulnet's own texts do not. Per thread, since the
 * caller keeps the pointer as it keeps any uln_strerror text. */
static const char *uln_strerror_libc(int e)
{
    static __thread char buf[128];
    const char *t = strerror_r(e, buf, sizeof buf); /* GNU: buf or a static text */
    if (t != buf) snprintf(buf, sizeof buf, "%s", t);
    if (buf[0] >= 'A' && buf[0] <= 'Z' && buf[1] >= 'a' && buf[1] <= 'z')
        buf[0] = (char)(buf[0] - 'A' + 'a'); /* a word, not "I/O" or "RPC" */
    return buf;
}

ULN_EXPORT const char *uln_strerror(int status)
{
    switch (status) {
    case 0:
        return "success";
    case -EAGAIN:
        return "queue full: poll the completion queue, then post again";
    case -EINVAL:
        return "bad argument, or a setting outside its range";
    case -EMSGSIZE:
        return "message too long (over nap_max, or inline_max with ULN_INLINE)";
    case -ENOKEY:
        return "unknown or stale region key";
    case -ERANGE:
        return "offset and length reach outside the region";
    case -EACCES:
        return "the region does not allow this remote access";
    case -EPERM:
        return "peer or packet of another job, or a context used in a fork()ed child";
    case -ECONNRESET:
        return "peer died or left the job";
    case -ECANCELED:
        return "endpoint closed with the operation outstanding";
    case -ETIMEDOUT:
        return "timed out";
    case -ENOSPC:
        return "no room: a per-process limit (endpoints, regions, peer ids) or the caller's "
               "buffer (uln_addr) is too small";
    case -EFAULT:
        return "memory not mapped (registration) or not reachable";
    case -EMFILE:
        return "no descriptor left to reach a peer: raise the limit (ulimit -Hn)";
    case -EBUSY:
        return "still in use";
    case -EBADF:
        return "the endpoint, CQ or region was already closed";
    case -EDOM:
        return "an atomic's word is not naturally aligned";
    case -EADDRINUSE:
        return "this process has already joined its job (a second uln_open)";
    case -EADDRNOTAVAIL:
        return "not a ulnet address, or an endpoint index the peer cannot have";
    case -EHOSTUNREACH:
        return "no transport of this context reaches that address";
    case -EOPNOTSUPP:
        return "not supported here (a job-only call on a context with no job)";
    case -EPROTO:
        return "the launcher or a rank broke the bootstrap's protocol";
    case -ENOMEM:
        return "out of memory or address space";
    case -ECONNREFUSED:
        return "connection refused: no launcher server (ULN_ROOT, PMIx) answers";
    default:
        /* Any other code in the same style as those above: libc's words, first
         * letter in lower case, so no message mixes the two spellings. */
        return status < 0 ? uln_strerror_libc(-status) : "not a ulnet status";
    }
}
