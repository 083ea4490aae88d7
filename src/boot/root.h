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

struct uln_ctx;

/* boot.c's entry points in ULN_ROOT mode (same contracts as uln_boot_*). */
int uln_root_init(struct uln_ctx *ctx, const char *root, long rank, long size, uint64_t key,
                  int timeout_s);
int uln_root_publish(struct uln_ctx *ctx, const void *addr, size_t len);
int uln_root_wait_all(struct uln_ctx *ctx, int timeout_ms);
int uln_root_barrier(struct uln_ctx *ctx, int timeout_ms);
void uln_root_fini(struct uln_ctx *ctx);

/* root.c and pmix.c: a board of board.h's layout in this process's private
 * memory, for the table of addresses a bootstrap receives, so uln_boot_peer
 * and the transports work as with ulnrun's shared board. 0 or -errno. */
int uln_boot_private_board(struct uln_ctx *ctx, unsigned nranks);

/* "ulnrun" (board inherited from the launcher), "root" (ULN_ROOT), "pmix"
 * (started by a PMIx server: pmix.h) or "single" (a job of one that made its
 * own board). */
const char *uln_boot_mode(const struct uln_ctx *ctx);

#endif
