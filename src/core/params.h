/*
 * params.h - the settings a context runs with (params.c): the core's own in
 * struct uln_params, and a block per settings group for each transport and
 * link that has settings of its own.
 *
 * Adding a setting to a transport or a link is an edit of its own files: an
 * entry in its group's table and a line in its resolve. A new transport
 * brings its group with its ops (uln_transport_ops.settings); a new link
 * kind with its kind (uln_link_kind.settings). The core finds every group
 * from the transports it has built in (each group may bring others: sub), so
 * uln_open and uln_config_query check them all, whatever the transport in
 * use, and ulninfo -c lists them.
 */
#ifndef ULN_PARAMS_H
#define ULN_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h" /* struct uln_setting */

/* Where ulninfo -c lists a setting (the low bits of struct
 * uln_setting.flags): the core's table places each section among its own
 * settings (params.c), so the list reads by topic whoever owns the setting. */
enum uln_setting_section {
    ULN_SEC_CORE = 0,    /* the core's own; a group's: after everything */
    ULN_SEC_MEMORY,      /* how peers on one host reach each other's memory */
    ULN_SEC_LINK_CHOICE, /* which link carries a transport's packets */
    ULN_SEC_NETWORK,     /* packets between hosts: addresses, ports, windows */
    ULN_SEC_LINK,        /* a link's own */
    ULN_SEC_SECURITY,    /* sealed datagrams */
    ULN_SEC_TESTS,       /* test aids */
};
#define ULN_SETTING_SECTION(flags) ((flags)&0xffu)

/* A transport's or link's settings: its table, its parameter block (in every
 * struct uln_params, zeroed before resolve) and how to fill it. */
struct uln_settings_group {
    const char *name; /* whose: "udp", "xdp", ... */
    const struct uln_setting *table;
    unsigned n;
    size_t block_bytes; /* at most ULN_PARAMS_BLOCKS_BYTES for all groups */
    /* Read every setting of the table into block, each checked on its own
     * (uln_setting_*: the environment's value, or cfg's where struct
     * uln_config has a field for it): 0, or -EINVAL having said why. */
    int (*resolve)(const struct uln_config *cfg, void *block);
    /* Optional: once every setting of every group read well, the checks of
     * one setting against another. 0, or -EINVAL having said why. */
    int (*check)(const void *block);
    /* Optional: its part of struct uln_info that the settings alone decide
     * (uln_config_query; uln_query starts from it). */
    void (*info)(const void *block, struct uln_info *info);
    /* Optional: the groups it brings along (the links under a transport),
     * the i-th or NULL past the last. */
    const struct uln_settings_group *(*sub)(unsigned i);
};

#define ULN_PARAMS_BLOCKS_BYTES 512u

struct uln_params {
    uint32_t ring_bytes, nap_max, sq_depth, chunk_bytes, max_eps, max_regions, frag_max;
    uint32_t post_copy_max; /* largest PUT/GET copied inside the post call */
    uint32_t spin_us;
    int membarrier;      /* 0: no asymmetric fence for the hazards (ULN_MEMBARRIER) */
    int transport;       /* ULN_TRANSPORT: -1 auto, else the id of the transport named */
    int stats;           /* 1: uln_close prints the counters (ULN_STATS) */
    int progress_thread; /* ULN_PROGRESS=thread */
    bool no_job;         /* ULN_BOOT=none or uln_config.boot: no launcher, no job */
    uint32_t max_peers;  /* with no job: peer ids (ULN_MAX_PEERS) */
    /* Who we are, as the launcher says (ULN_RANK, ULN_SIZE, ULN_BOOT_FD,
     * ULN_JOB_KEY, ULN_ROOT, ULN_BOOT_TIMEOUT), read only where struct
     * uln_config leaves it open: -1, 0 or NULL where unset (boot.c). */
    long boot_rank, boot_size, boot_fd;
    uint64_t job_key;
    const char *root;
    uint32_t boot_timeout_s;
    /* The settings groups' blocks, each where uln_params_block says. */
    _Alignas(16) unsigned char blocks[ULN_PARAMS_BLOCKS_BYTES];
};

/* Group g's block in p (g must be one the transports bring: a bug
 * otherwise, caught by every test). Not for a fast path: a transport keeps
 * what it reads there per packet in its own state. */
const void *uln_params_block(const struct uln_params *p, const struct uln_settings_group *g);

/* For a group's resolve and check: a setting of its table, from cfg's value
 * when given (nonzero; >= 0 for a switch), else the environment's, else
 * the table's default; checked against the table's bounds, and what is
 * wrong said on stderr by whoever reports it (uln_setting_err). 0 or
 * -EINVAL. */
int uln_setting_u32(const char *name, uint64_t given, uint32_t *out);
int uln_setting_switch(const char *name, int given, int *out);
/* One of names (NULL-terminated, at least three) or the first when unset:
 * its index; -1 (having said so) for another. */
int uln_setting_choice(const char *name, const char *const *names);
/* A text setting from the environment: NULL when unset or empty. */
const char *uln_setting_string(const char *name);
/* Say what is wrong with a setting, on stderr: where the value is this
 * process's own (given in struct uln_config), or where this process speaks
 * for the job (rank 0): every rank sees the same environment. */
void uln_setting_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ctx.c's: every setting resolved into p and checked (0 or -EINVAL, each
 * reason said); uln_open's form waits half a second on a rank that said
 * nothing, so rank 0 says why before a launcher ends the job. */
int uln_params_check(const struct uln_config *cfg, struct uln_params *p);
int uln_params_resolve(const struct uln_config *cfg, struct uln_params *p);
/* The part of struct uln_info that the settings alone decide. */
void uln_params_info(const struct uln_params *p, struct uln_info *info);

#endif
