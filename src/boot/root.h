/*
 * root.h - joining a job across hosts through rank 0 (ULN_ROOT=ip:port), and
 * what the transports may ask the bootstrap, whichever one ran.
 *
 * boot.c takes this path when ULN_ROOT is set and ULN_BOOT_FD is not:
 *   ULN_RANK, ULN_SIZE   required
 *   ULN_ROOT             rank 0's "ipv4:port" or "[ipv6]:port" (literals, no names)
 *   ULN_JOB_KEY          optional, hex; ranks that give one must agree. Without
 *                        any, rank 0 draws the key and hands it to everybody
 *   ULN_BOOT_TIMEOUT     seconds (default 60): uln_open fails with -ETIMEDOUT,
 *                        naming the missing ranks, rather than wait longer
 */
#ifndef ULN_BOOT_ROOT_H
#define ULN_BOOT_ROOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "boot/boot.h"

/* boot.c's entry points in ULN_ROOT mode (same contracts as uln_boot_*). */
int uln_root_init(struct uln_boot *boot, const char *root, long rank, long size, uint64_t key,
                  int timeout_s);
int uln_root_publish(struct uln_boot *boot, const void *addr, size_t len);
int uln_root_wait_all(struct uln_boot *boot, int timeout_ms);
int uln_root_barrier(struct uln_boot *boot, int timeout_ms);
void uln_root_fini(struct uln_boot *boot);

/* root.c and pmix.c: a board of board.h's layout in this process's private
 * memory, for the table of addresses a bootstrap receives, so uln_boot_peer
 * and the transports work as with ulnrun's shared board. 0 or -errno. */
int uln_boot_private_board(struct uln_boot *boot, unsigned nranks);

/* The bootstrap's own clock: CLOCK_MONOTONIC milliseconds. */
static inline int64_t uln_boot_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds to wait before the next idle pass, bounded by deadline_ms
 * (uln_boot_now_ms; INT64_MAX: none). */
int uln_boot_slice(int64_t deadline_ms);

/* While waiting: let the core move its endpoints (over UDP a peer may need
 * this rank to resend or answer before it can go on), and how long to sleep
 * before the next pass. */
static inline void uln_boot_idle(struct uln_boot *boot)
{
    if (boot->hooks.idle) boot->hooks.idle(boot->hooks.arg);
}
static inline int uln_boot_idle_ms(struct uln_boot *boot)
{
    return boot->hooks.idle_ms ? boot->hooks.idle_ms(boot->hooks.arg) : 1;
}

#endif
