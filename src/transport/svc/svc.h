/*
 * svc.h - the process's side of the host service (ulnetd), docs/service.md:
 * attaching at uln_open and what the core asks of it.
 */
#ifndef ULN_SVC_H
#define ULN_SVC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/params.h"
#include "transport/svc/proto.h"

struct uln_ctx;

enum uln_svc_mode { ULN_SVC_AUTO = 0, ULN_SVC_OFF, ULN_SVC_REQUIRED };

/* Its settings group (settings.c), brought by the svc transport's ops. */
struct uln_svc_params {
    int mode;         /* enum uln_svc_mode (ULN_SERVICE) */
    const char *path; /* NULL or where ulnetd listens (ULN_SERVICE_PATH) */
    bool local_shm;   /* peers on this host over shm, not through it (ULN_SERVICE_LOCAL) */
    uint32_t weight;  /* ULN_SERVICE_WEIGHT: 1..64, asked at attach */
    bool own_sock;    /* ULN_SERVICE_SOCK: ask for a UDP socket of its own at attach */
};
extern const struct uln_settings_group uln_svc_settings;

static inline const struct uln_svc_params *uln_svc_params(const struct uln_params *p)
{
    return (const struct uln_svc_params *)uln_params_block(p, &uln_svc_settings);
}

/* The attachment: the socket to the service is the process's life line. */
struct uln_svc {
    int fd;
    uint64_t host_id;   /* the service's */
    uint32_t client;    /* its number for us */
    uint32_t wire_ip;   /* where other hosts' services reach it (IPv4, network order) */
    uint16_t wire_port; /* ... 0: it has no wire, it reaches this host only */
    uint16_t secure;    /* how that wire is sealed: enum uln_seal_mode (attach's answer) */
    char link[48];      /* its link to other hosts and the link's mode (attach's answer) */
    char path[ULN_SVC_PATH_MAX + 1];
    pthread_mutex_t lock; /* one request and its answer at a time on fd */
    _Atomic bool lost;    /* it hung up: set once, by whoever sees it first */
    /* The UDP sockets the service bound for us, endpoint i's on port
     * sock_port + i (sock.c; none: n_socks 0), and the peers' as our
     * service told us (by rank; port 0: not known). */
    int sock_fds[ULN_SVC_SOCKS_MAX];
    unsigned n_socks;
    uint16_t sock_port;
    struct uln_svc_peer_sock_at *peer_socks; /* ctx->size of them, made at first use */
    pthread_mutex_t socks_lock;              /* peer_socks, made and filled */
    _Atomic uint64_t src_refused; /* datagrams on sock_fds whose source is not the rank's */
};

/* sock.c: a peer's socket of its own, as its service vouched for it. */
struct uln_svc_peer_sock_at {
    uint32_t ip;          /* network order */
    uint16_t port, count; /* endpoint i's at port + i, i < count */
    bool asked;           /* the answer was "none (yet)": asked again only by refresh */
};
/* Check a socket the service passed: UDP, bound to (ip, port). 0 or -EPROTO. */
int uln_svc_sock_check(int fd, uint32_t ip, uint16_t port);
/* Where rank sends from (ask the service the first time, or again with
 * refresh): 0 and its entry, or -ENOENT (no socket of its own known for
 * it), or the request's failure. */
int uln_svc_peer_sock(struct uln_ctx *ctx, int rank, bool refresh,
                      struct uln_svc_peer_sock_at *out);
/* Rank is gone (its process ended, or its service did): what its service
 * told us is dropped, as the port may be another process's now - a cached
 * entry would take that process's datagrams for rank's. The next ask goes to
 * our service, which has dropped it too. */
void uln_svc_peer_sock_forget(struct uln_ctx *ctx, int rank);
/* A datagram on one of our sockets from src claims to be rank's: the
 * endpoint index of rank's whose socket src is; else -EPERM, counted
 * (src_refused). */
struct sockaddr_in;
int uln_svc_src_ep(struct uln_ctx *ctx, int rank, const struct sockaddr_in *src);

/* uln_open: attach to the host's service as ULN_SERVICE says (ctx->svc, and
 * one line in ctx->svc_why either way). 0, or -ENOTCONN (required, and no
 * service answers), or the service's refusal (required). */
int uln_svc_attach(struct uln_ctx *ctx);
void uln_svc_detach(struct uln_ctx *ctx);
/* Send a request (with nfds descriptors) and wait for its answer, of
 * answer_type and exactly answer_len bytes, into answer. 0, the service's
 * refusal, or -ENOTCONN / -ECONNRESET / -ETIMEDOUT / -EPROTO. */
int uln_svc_request(struct uln_ctx *ctx, const void *msg, size_t len, const int *fds, int nfds,
                    unsigned answer_type, void *answer, size_t answer_len);

#endif
