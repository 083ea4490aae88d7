/*
 * boot.h - the bootstrap's face to the core: how a process joins its job
 * (boot.c: the board ulnrun made; root.c: ULN_ROOT; pmix.c: a PMIx server;
 * or alone), publishes its address, finds the others' and waits in barriers.
 *
 * The bootstrap keeps its own state (struct uln_boot) and knows nothing of
 * the context: the core says what it asks for (struct uln_boot_want), hands
 * it an idle callback to keep endpoints moving while it waits, and reads the
 * members' addresses through the directory calls (uln_boot_peer,
 * uln_boot_slot_set) - the board's layout stays behind board.h.
 */
#ifndef ULN_BOOT_BOOT_H
#define ULN_BOOT_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct uln_board_hdr;
struct uln_root;
struct uln_pmix;

/* What the core asks for: the configuration's values, else the launcher's
 * variables (rank, size, board fd, job key; -1 / 0: not given). */
struct uln_boot_want {
    long rank, size, fd;
    uint64_t key;
    bool no_job;        /* ULN_BOOT=none: no job, peers are inserted one by one */
    unsigned max_peers; /* ... and how many they may be */
    const char *root;   /* ULN_ROOT, or NULL */
    int timeout_s;      /* ULN_BOOT_TIMEOUT */
};

/* The core's part while the bootstrap waits (a barrier, the rendezvous). */
struct uln_boot_hooks {
    void *arg;
    void (*idle)(void *arg);                /* one pass over the endpoints */
    int (*idle_ms)(void *arg);              /* how long to sleep before the next pass */
    void (*peer_dead)(void *arg, int rank); /* a member's process is gone */
};

struct uln_boot {
    /* What the job is, once uln_boot_init succeeded. */
    int rank, size;
    uint64_t job_key;
    bool no_job;
    /* The directory: a board of board.h's layout (shared with the other
     * ranks of this host, or private in root, PMIx and no-job modes). */
    struct uln_board_hdr *board;
    size_t board_len;
    int board_fd;          /* open only on a board we made ourselves */
    struct uln_root *root; /* root.c: the TCP rendezvous when ULN_ROOT is set */
    struct uln_pmix *pmix; /* pmix.c: started by a PMIx server (mpirun, srun) */
    bool bar_broken;       /* a board barrier saw a member dead: every later one fails */
    struct uln_boot_hooks hooks;
};

/* Join the job (b zeroed but for b->hooks). 0 or -errno, with a message. */
int uln_boot_init(struct uln_boot *b, const struct uln_boot_want *w);
/* Our address, len bytes, for every member to read. */
int uln_boot_publish(struct uln_boot *b, const void *addr, size_t len);
/* Until every member has published (timeout_ms < 0: the bootstrap's own). */
int uln_boot_wait_all(struct uln_boot *b, int timeout_ms);
/* The job's barrier; -ECONNRESET once a member died. */
int uln_boot_barrier(struct uln_boot *b, int timeout_ms);
void uln_boot_fini(struct uln_boot *b);

/* The directory: member peer's published address and pid, NULL until it
 * published. Acquire: what it published is visible once this returns it. */
const void *uln_boot_peer(const struct uln_boot *b, int peer, int32_t *pid);
/* No job: fill peer's entry from an address learnt otherwise (uln_peer_insert). */
int uln_boot_slot_set(struct uln_boot *b, int peer, int32_t pid, const void *addr, size_t len);
/* The bytes an address in the directory may have, and the most members. */
#define ULN_BOOT_ADDR_BYTES 248u
#define ULN_BOOT_MAX_RANKS  4096u

/* "ulnrun" (board inherited from the launcher), "root" (ULN_ROOT), "pmix"
 * (a PMIx server), "single" (a job of one on its own board), "none". */
const char *uln_boot_mode(const struct uln_boot *b);
/* ULN_ROOT mode: this rank's IP address (port 0) on the interface that routes
 * to rank 0; -ENOENT in other modes. */
int uln_boot_route_addr(const struct uln_boot *b, struct sockaddr_storage *ss, socklen_t *len);

#endif
