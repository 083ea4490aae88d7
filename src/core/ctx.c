/*
 * ctx.c - the context: joining the job, statistics, error text (its
 * settings: params.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/un.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>

#include "core/internal.h"
#include "transport/svc/svc.h"

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

/* cfg, or "everything from the environment" in *dflt when it is NULL. */
static const struct uln_config *config_or_default(const struct uln_config *cfg,
                                                  struct uln_config *dflt)
{
    if (cfg) return cfg;
    uln_config_init(dflt);
    return dflt;
}

ULN_EXPORT int uln_config_query(const struct uln_config *cfg_in, struct uln_info *info)
{
    if (!info) return -EINVAL;
    struct uln_config dflt;
    const struct uln_config *cfg = config_or_default(cfg_in, &dflt);
    struct uln_params p = {0};
    int rc = uln_params_check(cfg, &p);
    if (!rc) uln_params_info(&p, info);
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
    uln_svc_detach(ctx); /* before the inbox it shares goes */
    uln_inbox_close(ctx);
    uln_boot_fini(&ctx->boot);
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

/* The core's part in the bootstrap's waits (boot.h's hooks). */
static void boot_idle(void *arg)
{
    uln_progress_idle(arg);
}

static int boot_idle_ms(void *arg)
{
    return uln_progress_idle_ms(arg);
}

/* A member's process is gone: the transport reaching it marks it dead
 * (shm: counted in peers_dead, once). */
static void boot_peer_dead(void *arg, int rank)
{
    struct uln_ctx *ctx = arg;
    if (ctx->peer_tp && ctx->peer_tp[rank]->peer_dead)
        ctx->peer_tp[rank]->peer_dead(ctx, NULL, rank);
}

/* Join the job: the configuration's values, else the launcher's variables. */
static int boot_join(struct uln_ctx *ctx, const struct uln_config *cfg)
{
    const struct uln_params *p = &ctx->p;
    struct uln_boot_want w = {.rank = cfg->rank >= 0 ? cfg->rank : p->boot_rank,
                              .size = cfg->size > 0 ? cfg->size : p->boot_size,
                              .fd = cfg->boot_fd >= 0 ? cfg->boot_fd : p->boot_fd,
                              .key = cfg->job_key ? cfg->job_key : p->job_key,
                              .no_job = p->no_job,
                              .max_peers = p->max_peers,
                              .root = p->root,
                              .timeout_s = (int)p->boot_timeout_s};
    ctx->boot.hooks = (struct uln_boot_hooks){
        .arg = ctx, .idle = boot_idle, .idle_ms = boot_idle_ms, .peer_dead = boot_peer_dead};
    int rc = uln_boot_init(&ctx->boot, &w);
    if (rc) return rc;
    ctx->rank = ctx->boot.rank;
    ctx->size = ctx->boot.size;
    ctx->job_key = ctx->boot.job_key;
    ctx->no_job = ctx->boot.no_job;
    return 0;
}

ULN_EXPORT int uln_barrier(struct uln_ctx *ctx, int timeout_ms)
{
    if (!ctx) return -EINVAL;
    if (uln_ctx_forked(ctx)) return -EPERM; /* the parent's, not ours */
    return uln_boot_barrier(&ctx->boot, timeout_ms);
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
    ctx->boot.board_fd = -1;
    ctx->bell_fd = -1;
    int rc = uln_params_resolve(cfg, &ctx->p);
    if (!rc) rc = boot_join(ctx, cfg);
    if (rc) goto fail;
    ctx->regions = calloc(ctx->p.max_regions, sizeof *ctx->regions);
    ctx->eps = calloc(ctx->p.max_eps, sizeof *ctx->eps);
    if (!ctx->regions || !ctx->eps) {
        rc = -ENOMEM;
        goto fail;
    }
    uint8_t addr[ULN_BOOT_ADDR_BYTES];
    memset(addr, 0, sizeof addr);
    if ((rc = uln_inbox_open(ctx)) != 0 || (rc = uln_doorbell_open(ctx)) != 0) goto fail;
    /* Before the inbox is published: peers read the flag when they map it. */
    ctx->hz_light = ctx->p.membarrier && membarrier_setup();
    ctx->inbox->hdr->dereg_fence = ctx->hz_light;
    /* After the inbox header is whole: the service checks it at attach. */
    if ((rc = uln_svc_attach(ctx)) != 0) goto fail;
    if ((rc = uln_transports_open(ctx, addr, sizeof addr)) != 0) goto fail;
    if ((rc = uln_boot_publish(&ctx->boot, addr, sizeof addr)) != 0) goto fail;
    /* Everybody's address must be on the board before anyone sends. */
    /* Root and PMIx modes keep their own deadline (ULN_BOOT_TIMEOUT) and say
     * what is missing. */
    const char *mode = uln_boot_mode(&ctx->boot);
    bool own_deadline = !strcmp(mode, "root") || !strcmp(mode, "pmix");
    if ((rc = uln_boot_wait_all(&ctx->boot, own_deadline ? -1 : 60000)) != 0) {
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
 * and any. A path that the settings turned off (ULN_SHM_DIRECT=0) is not one
 * the peers have: each transport says what its settings leave it. */
static void caps_of_peers(const struct uln_ctx *ctx, struct uln_info *info)
{
    uint32_t all = ~0u, any = 0;
    bool some = false;
    for (int p = 0; ctx->peer_tp && p < ctx->size; p++) {
        const struct uln_transport_ops *tp = ctx->peer_tp[p];
        if (p == ctx->rank || !tp) continue;
        unsigned caps = tp->caps_in_force ? tp->caps_in_force(ctx) : tp->caps;
        all &= caps;
        any |= caps;
        some = true;
    }
    info->caps_all = some ? all : 0;
    info->caps_any = any;
}

ULN_EXPORT int uln_query(const struct uln_ctx *ctx, struct uln_info *info)
{
    if (!ctx || !info) return -EINVAL;
    uln_params_info(&ctx->p, info);
    info->transport = ctx->tp_names;
    info->progress_thread = ctx->progress_on;
    info->bootstrap = uln_boot_mode(&ctx->boot);
    info->max_peers = (uint32_t)ctx->size;
    for (unsigned id = 0; uln_transports[id]; id++)
        if (uln_transports[id]->query) uln_transports[id]->query(ctx, info);
    caps_of_peers(ctx, info);
    return 0;
}

ULN_EXPORT int uln_query_keys(const struct uln_ctx *ctx, unsigned i, char *key, size_t klen,
                              char *val, size_t vlen)
{
    if (!ctx || (!key && klen) || (!val && vlen)) return -EINVAL;
    for (unsigned id = 0; uln_transports[id]; id++) {
        const struct uln_transport_ops *t = uln_transports[id];
        char k[64];
        for (unsigned j = 0; t->info && t->info(ctx, j, k, sizeof k, val, vlen) == 0; j++)
            if (i-- == 0) return snprintf(key, klen, "%s.%s", t->name, k) < 0 ? -EINVAL : 0;
    }
    return -ENOENT;
}

ULN_EXPORT int uln_query_key(const struct uln_ctx *ctx, const char *key, char *buf, size_t len)
{
    if (!ctx || !key || (!buf && len)) return -EINVAL;
    char k[80], v[256];
    for (unsigned i = 0; uln_query_keys(ctx, i, k, sizeof k, v, sizeof v) == 0; i++)
        if (!strcmp(k, key)) return snprintf(buf, len, "%s", v);
    return -ENOENT;
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
    case -EDQUOT:
        return "over the host service's quota for this process (ulnetd --queue-mem)";
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
