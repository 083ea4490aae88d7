/*
 * doorbell.h - sleeping and waking, for every transport.
 *
 * A process about to sleep counts itself in its inbox's `sleepers` and waits
 * on its doorbell, a datagram socket in the abstract namespace (no file to
 * leave behind), and on any sockets its transports name. A producer on this
 * host that publishes a message checks the count and, only if nonzero, rings
 * the doorbell. The doorbell is a socket, not a futex, so that one poll waits
 * for the doorbell and a packet transport's sockets at once.
 */
#ifndef ULN_DOORBELL_H
#define ULN_DOORBELL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

struct uln_ctx;

/* Where rank's doorbell of job is. */
struct uln_bell_addr {
    struct sockaddr_un sa;
    socklen_t len;
};
void uln_doorbell_addr(struct uln_bell_addr *a, uint64_t job, int rank);

/* Bind ours (after uln_inbox_open: the count lives in the inbox header). */
int uln_doorbell_open(struct uln_ctx *ctx);
void uln_doorbell_close(struct uln_ctx *ctx);

/* After publishing messages to a process whose sleepers count is that: ring its
 * doorbell if anybody there sleeps. */
void uln_doorbell_ring(struct uln_ctx *ctx, _Atomic uint32_t *sleepers,
                       const struct uln_bell_addr *a);
/* Wake threads of this process sleeping in uln_cq_wait. */
void uln_doorbell_wake_self(struct uln_ctx *ctx);
void uln_doorbell_sleep_begin(struct uln_ctx *ctx);
/* Sleep on the doorbell and fds (sockets): 0 woken, -ETIMEDOUT. */
int uln_doorbell_sleep(struct uln_ctx *ctx, const int *fds, int n_fds, int timeout_ms);
void uln_doorbell_sleep_end(struct uln_ctx *ctx);

#endif
