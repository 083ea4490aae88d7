/*
 * ctx.c - the UDP transport's part of a context: before the job forms,
 * bind one socket per endpoint index on consecutive ports and publish this
 * rank's address (boot/addr.h decides which); once every rank has published,
 * choose which peers are reached over UDP.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/internal.h"
#include "boot/addr.h"
#include "boot/root.h"
#include "seal/settings.h"
#include "transport/udp/ctx.h"

/* ---- context: sockets and addresses ---------------------------------------- */

static void set_port(struct sockaddr_storage *ss, unsigned port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
}

static void close_fds(struct uln_udp *u)
{
    for (unsigned i = 0; i < u->nfds; i++)
        if (u->fds[i] >= 0) close(u->fds[i]), u->fds[i] = -1;
}

/* Bind one socket per endpoint index on ports base .. base + nfds - 1, so a
 * peer finds endpoint i at base + i without asking. 0, or -errno with *bad the
 * port that failed. */
static int bind_block(struct uln_udp *u, struct sockaddr_storage *ss, socklen_t len, unsigned base,
                      unsigned *bad)
{
    for (unsigned i = 0; i < u->nfds; i++) {
        *bad = base + i;
        int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return -errno;
        set_port(ss, base + i);
        if (bind(fd, (struct sockaddr *)ss, len) < 0) {
            int e = errno;
            close(fd);
            close_fds(u);
            return -e;
        }
        u->fds[i] = fd;
    }
    return 0;
}

/* No ULN_UDP_PORT: a random block in [20000, 60000), another one while the
 * one drawn is taken. Returns the base or -errno. */
static int bind_random(struct uln_udp *u, struct sockaddr_storage *ss, socklen_t len)
{
    int rc = -EADDRINUSE;
    unsigned bad = 0;
    for (int attempt = 0; attempt < 64 && rc == -EADDRINUSE; attempt++) {
        u->rng = mix64(u->rng + 0x9e3779b97f4a7c15ull);
        unsigned base = 20000u + (unsigned)(u->rng % (60000u - 20000u - u->nfds));
        if ((rc = bind_block(u, ss, len, base, &bad)) == 0) return (int)base;
    }
    fprintf(stderr, "ulnet: udp: cannot bind %u ports (last tried: port %u): %s\n", u->nfds, bad,
            strerror(-rc));
    return rc;
}

/* This rank's place among the ranks of its host: what ULN_LOCAL_RANK or the
 * launcher said; else under ulnrun (every rank on this host) the rank; else 0. */
static unsigned local_rank(const struct uln_ctx *ctx)
{
    if (udp_params(ctx)->local_rank >= 0) return (unsigned)udp_params(ctx)->local_rank;
    return !strcmp(uln_boot_mode(&ctx->boot), "ulnrun") ? (unsigned)ctx->rank : 0;
}

/* ULN_UDP_PORT=P: local rank L takes the block P + L x nfds, so ranks on one
 * host never collide. A block taken (by a rank whose local rank we could not
 * know, or by another program) moves us to the next; past 65535 nothing
 * wraps: the open fails and says which ports. Returns the base or -errno. */
static int bind_fixed(struct uln_udp *u, struct sockaddr_storage *ss, socklen_t len, unsigned port,
                      unsigned lrank)
{
    unsigned first = port + lrank * u->nfds, base = first, bad = 0;
    int rc = -EINVAL;
    for (; base + u->nfds - 1 <= 65535u; base += u->nfds)
        if ((rc = bind_block(u, ss, len, base, &bad)) != -EADDRINUSE) break;
    if (!rc) return (int)base;
    if (first + u->nfds - 1 > 65535u)
        fprintf(stderr,
                "ulnet: udp: ULN_UDP_PORT=%u: local rank %u needs ports %u..%u (%u per rank, "
                "ULN_MAX_EPS), past 65535\n",
                port, lrank, first, first + u->nfds - 1, u->nfds);
    else
        fprintf(stderr,
                "ulnet: udp: ULN_UDP_PORT=%u: cannot bind port %u (local rank %u, ports "
                "%u..%u, %u per rank): %s%s\n",
                port, bad, lrank, first, first + u->nfds - 1, u->nfds, strerror(-rc),
                rc == -EADDRINUSE ? "; every block of ports up to 65535 is taken" : "");
    return rc;
}

/* Across hosts (ULN_ROOT or PMIx mode) a peer may be anywhere, and the
 * sockets must be bound before the address is published. */
static bool udp_needed(const struct uln_ctx *ctx)
{
    return uln_tp_named(ctx, &uln_tp_udp) ||
           (uln_tp_auto(ctx) &&
            (((ctx->boot.root || ctx->boot.pmix) && ctx->size > 1) || ctx->no_job));
}

static void publish(struct uln_udp *u, const struct sockaddr_storage *ss, int base, void *slot_addr)
{
    struct udp_addr *me = &u->me;
    me->magic = UDP_ADDR_MAGIC;
    me->family = ss->ss_family;
    me->port = (uint16_t)base;
    me->nports = (uint16_t)u->nfds;
    uint64_t host = uln_host_id();
    memset(me->host_id, 0, sizeof me->host_id);
    memcpy(me->host_id, &host, 8);
    if (ss->ss_family == AF_INET)
        memcpy(me->ip, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    else
        memcpy(me->ip, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    if (u->seal) uln_seal_store_publish(u->seal, &me->seal);
    memcpy(slot_addr, me, sizeof *me);
}

static int seal_check(const struct uln_udp *u, const struct udp_addr *a, char *why, size_t len);

/* What peer p publishes now, for the sealing links (link_seal.h): a rank
 * restarted where its launcher keeps the board has new keys there. Taken
 * only if it fits the job (mode, secret), and kept as p's address. */
static int seal_republished(void *arg, int p, struct uln_seal_pub *out)
{
    struct uln_ctx *ctx = arg;
    struct uln_udp *u = udp_of(ctx);
    int32_t pid;
    const uint8_t *slot = uln_boot_peer(&ctx->boot, p, &pid);
    struct udp_addr a;
    char why[160];
    if (!slot) return -ENOENT;
    memcpy(&a, uln_tp_part(slot, ULN_TPID_UDP), sizeof a);
    if (a.magic != UDP_ADDR_MAGIC || seal_check(u, &a, why, sizeof why)) return -EPROTO;
    u->addrs[p].seal = a.seal;
    *out = a.seal;
    return 0;
}

/* ULN_SECURE=auth|encrypt: this context's keys, drawn now, published with
 * the address (a job's board, or with no job uln_addr's UDP part). */
static int seal_open(struct uln_ctx *ctx, struct uln_udp *u)
{
    const struct uln_seal_params *sp = uln_seal_params(&ctx->p);
    if (sp->mode == ULN_SEAL_OFF) return 0;
    if (!(u->seal = malloc(sizeof *u->seal))) return -ENOMEM;
    int rc =
        uln_seal_store_open(u->seal, (enum uln_seal_mode)sp->mode, (enum uln_seal_cipher)sp->cipher,
                            sp->secret, u->nfds, (unsigned)ctx->size);
    if (rc) {
        free(u->seal);
        u->seal = NULL;
        fprintf(stderr, "ulnet: ULN_SECURE: cannot draw keys: %s\n", strerror(-rc));
        return rc;
    }
    u->seal->republished = seal_republished;
    u->seal->arg = ctx;
    return 0;
}

/* Ports are taken now, not at uln_ep_open, so nobody else can take them in
 * between. */
int uln_udp_open(struct uln_ctx *ctx, void *slot_addr, size_t slot_len)
{
    if (!udp_needed(ctx)) return 0;
    if (slot_len < sizeof(struct udp_addr)) return -EINVAL;
    struct uln_udp *u = calloc(1, sizeof *u);
    if (!u) return -ENOMEM;
    ctx->tp_ctx[ULN_TPID_UDP] = u;
    u->nfds = ctx->p.max_eps;
    u->fds = malloc(u->nfds * sizeof(int));
    if (!u->fds) return -ENOMEM;
    for (unsigned i = 0; i < u->nfds; i++)
        u->fds[i] = -1;
    if (getentropy(&u->rng, sizeof u->rng) != 0) u->rng = (uint64_t)getpid() * 0x9e3779b9u;

    struct sockaddr_storage ss;
    socklen_t len;
    int rc = uln_addr_local(&ctx->boot, udp_params(ctx)->addr, udp_params(ctx)->ifname, &ss, &len);
    if (rc) return rc;
    int base = udp_params(ctx)->port
                   ? bind_fixed(u, &ss, len, udp_params(ctx)->port, local_rank(ctx))
                   : bind_random(u, &ss, len);
    if (base < 0) return base;
    if ((rc = seal_open(ctx, u)) != 0) return rc;
    publish(u, &ss, base, slot_addr);
    return 0;
}

int uln_udp_choose(struct uln_ctx *ctx)
{
    struct uln_udp *u = udp_of(ctx);
    if (!u) return 0;
    u->addrs = calloc((size_t)ctx->size, sizeof *u->addrs);
    u->remote = calloc((size_t)ctx->size, 1);
    if (!u->addrs || !u->remote) return -ENOMEM;
    return 0;
}

/* With no job, a process that restarts on the same ports (ULN_UDP_PORT) is
 * a new peer with a new key at an address an inserted peer has: once that
 * new life has spoken from there (ep.c, uln_udp_ctrl_sender), the older one is an
 * earlier life, gone, for endpoint ep. Not when the new address is merely
 * inserted: an address is only a claim (a forged or stale one names the
 * same ports), and taking it for proof let it end a live peer. */
void uln_udp_supersede_older(struct uln_ep *ep, int p)
{
    struct uln_ctx *ctx = ep->ctx;
    struct uln_udp *u = udp_of(ctx);
    const struct udp_addr *a = &u->addrs[p];
    for (int q = 1; q < ctx->size; q++) {
        const struct udp_addr *b = &u->addrs[q];
        if (q == p || u->remote[q] == 0 || ctx->peer_recs[q].key == ctx->peer_recs[p].key) continue;
        if (b->family == a->family && b->port == a->port && !memcmp(b->ip, a->ip, 16)) {
            uln_udp_supersede(ep, q, p);
            u->remote[q] = UDP_SUPERSEDED;
        }
    }
}

/* A member's sealing state against ours: a job seals all or nothing, with
 * one secret. 0, or -EPROTO with why. */
static int seal_check(const struct uln_udp *u, const struct udp_addr *a, char *why, size_t len)
{
    struct uln_seal_store off = {.mode = ULN_SEAL_OFF};
    return uln_seal_store_check(u->seal ? u->seal : &off, &a->seal, why, len);
}

int uln_udp_learn(struct uln_ctx *ctx, int p)
{
    struct uln_udp *u = udp_of(ctx);
    if (!u) return 0;
    int32_t pid;
    const uint8_t *slot = uln_boot_peer(&ctx->boot, p, &pid);
    bool was_remote = u->remote[p] == UDP_REMOTE;
    u->remote[p] = 0;
    memset(&u->addrs[p], 0, sizeof u->addrs[p]);
    /* Ourselves: no datagrams to our own sockets (another transport, or
     * none, carries us). */
    if (!slot || uln_peer_is_self(ctx, p)) return 0;
    memcpy(&u->addrs[p], uln_tp_part(slot, ULN_TPID_UDP), sizeof u->addrs[p]);
    const struct udp_addr *a = &u->addrs[p];
    char why[160];
    if (a->magic == UDP_ADDR_MAGIC && seal_check(u, a, why, sizeof why)) {
        if (ctx->no_job)
            fprintf(stderr, "ulnet: a peer's address refused: %s\n", why);
        else
            fprintf(stderr, "ulnet: rank %d: rank %d: %s\n", ctx->rank, p, why);
        return -EPROTO;
    }
    /* A job's members all have max_eps ports; a peer with no job has its
     * own number, and the endpoint the id names must be one of them. */
    int32_t ep = ctx->peer_recs[p].ep;
    bool ports_ok = ctx->no_job ? ep >= 0 && ep < a->nports : a->nports >= ctx->p.max_eps;
    if (a->magic != UDP_ADDR_MAGIC || !ports_ok) return 0;
    /* On this host too: it reaches it, at its cost; whether it carries it
     * is the core's choice (udp_remote). */
    u->remote[p] = UDP_REMOTE;
    /* Relaxed: a count the endpoints read as a hint (uln_udp_solo_check);
     * a datagram the kernel drops before they see it is sent again. */
    if (!was_remote) atomic_fetch_add_explicit(&u->n_remote, 1, memory_order_relaxed);
    return 0;
}

/* uln_addr's part: family, first port, port count, IP (4 or 16 bytes), and
 * under ULN_SECURE the sealing state a job's member publishes on the board
 * (struct uln_seal_pub, 48 bytes), said by ADDR_SEALED in the family byte. */
#define ADDR_SEALED 0x80u
size_t uln_udp_addr_pack(const struct uln_ctx *ctx, uint8_t *out, size_t room)
{
    const struct uln_udp *u = udp_of(ctx);
    if (!u) return 0;
    size_t iplen = u->me.family == AF_INET ? 4 : 16;
    size_t seal = u->seal ? sizeof u->me.seal : 0;
    if (room < 4 + iplen + seal) return 0;
    out[0] = (uint8_t)((u->me.family == AF_INET ? 4 : 6) | (seal ? ADDR_SEALED : 0));
    out[1] = (uint8_t)u->me.nports;
    memcpy(out + 2, &u->me.port, 2);
    memcpy(out + 4, u->me.ip, iplen);
    memcpy(out + 4 + iplen, &u->me.seal, seal);
    return 4 + iplen + seal;
}

int uln_udp_addr_unpack(const uint8_t *in, size_t len, uint64_t host, void *slot, size_t slot_len)
{
    struct udp_addr a = {.magic = UDP_ADDR_MAGIC};
    if (slot_len < sizeof a || len < 4) return -EADDRNOTAVAIL;
    uint8_t fam = in[0] & (uint8_t)~ADDR_SEALED;
    size_t iplen = fam == 4 ? 4 : fam == 6 ? 16 : 0;
    size_t seal = in[0] & ADDR_SEALED ? sizeof a.seal : 0; /* else zero: ULN_SECURE=off */
    if (!iplen || len != 4 + iplen + seal || in[1] == 0) return -EADDRNOTAVAIL;
    a.family = fam == 4 ? AF_INET : AF_INET6;
    memcpy(&a.seal, in + 4 + iplen, seal);
    a.nports = in[1];
    memcpy(&a.port, in + 2, 2);
    if (a.port == 0 || a.port + a.nports - 1u > 65535u) return -EADDRNOTAVAIL;
    memcpy(a.ip, in + 4, iplen);
    memcpy(a.host_id, &host, 8);
    memcpy(slot, &a, sizeof a);
    return 0;
}

/* The short form's part: an IPv4 address only, without its family byte
 * (port count, first port, the address); under ULN_SECURE then the sealing
 * state's compact form (link_seal.h: the public key, no check). */
int uln_udp_short_pack(const uint8_t *part, size_t len, uint8_t *out)
{
    struct uln_seal_pub pub;
    if (part[0] == 4 && len == 8) {
        memcpy(out, part + 1, 7);
        return 7;
    }
    if (part[0] != (4 | ADDR_SEALED) || len != 8 + sizeof pub) return -ENOSPC;
    memcpy(&pub, part + 8, sizeof pub);
    if (uln_seal_pub_compact(&pub, out + 7)) return -ENOSPC;
    memcpy(out, part + 1, 7);
    return 7 + ULN_SEAL_PUB_COMPACT;
}

size_t uln_udp_short_unpack(const uint8_t *in, bool sealed, uint8_t *out, size_t room)
{
    struct uln_seal_pub pub;
    if (room < 8 + (sealed ? sizeof pub : 0)) return 0;
    out[0] = 4;
    memcpy(out + 1, in, 7);
    if (!sealed) return 8;
    if (uln_seal_pub_expand(in + 7, &pub)) return 0;
    out[0] |= ADDR_SEALED;
    memcpy(out + 8, &pub, sizeof pub);
    return 8 + sizeof pub;
}

int uln_udp_addr_str(const uint8_t *in, size_t len, char *out, size_t room)
{
    char ip[INET6_ADDRSTRLEN];
    uint16_t port;
    memcpy(&port, in + 2, 2);
    uint8_t fam = in[0] & (uint8_t)~ADDR_SEALED;
    if (!inet_ntop(fam == 4 ? AF_INET : AF_INET6, in + 4, ip, sizeof ip)) return -EINVAL;
    /* IPv6 in brackets, as in a URL, so the port stands apart */
    return snprintf(out, room, fam == 4 ? "%s:%u+%u%s" : "[%s]:%u+%u%s", ip, port, in[1],
                    in[0] & ADDR_SEALED ? " sealed" : "");
}

void uln_udp_close(struct uln_ctx *ctx)
{
    struct uln_udp *u = udp_of(ctx);
    if (!u) return;
    if (u->fds) close_fds(u);
    if (u->seal) uln_seal_store_close(u->seal);
    free(u->seal);
    free(u->fds);
    free(u->addrs);
    free(u->remote);
    free(u);
    ctx->tp_ctx[ULN_TPID_UDP] = NULL;
}

/* ---- sealing (ULN_SECURE) ------------------------------------------------------ */

int uln_udp_seal_wrap(struct uln_ctx *ctx, unsigned ep_index, _Atomic uint64_t *refused,
                      struct uln_link **io)
{
    struct uln_udp *u = udp_of(ctx);
    if (!u->seal) return 0;
    int rc = uln_link_seal_open(u->seal, ep_index, refused, io);
    if (rc) uln_link_close(*io);
    return rc;
}

int uln_udp_seal_peer(struct uln_ctx *ctx, struct uln_link *io, int id, int peer, unsigned dst_ep)
{
    struct uln_udp *u = udp_of(ctx);
    return u->seal ? uln_link_seal_peer(io, id, peer, dst_ep, &u->addrs[peer].seal) : 0;
}
