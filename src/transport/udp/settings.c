/*
 * settings.c - the UDP transport's settings (ULN_UDP_*, ULN_LOCAL_RANK) and,
 * through them, those of the links under it and of sealing: read into its
 * block of struct uln_params (core/params.h) at uln_open.
 */
#define _GNU_SOURCE
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/internal.h"
#include "boot/addr.h"
#include "link/select.h"
#include "seal/settings.h"
#include "transport/udp/ctx.h"

static const struct uln_setting udp_table[] = {
    {"ULN_UDP_WINDOW", "1024", 4, 32768,
     "packets in flight per (endpoint, peer), a power of two; buffers taken as used",
     ULN_SEC_NETWORK},
    {"ULN_UDP_MTU", "0", 0, 65535, "datagram size limit; 0: the interface's (capped to 9000)",
     ULN_SEC_NETWORK | ULN_SETTING_SIZE},
    {"ULN_UDP_DEAD_MS", "10000", 10, 3600000,
     "a peer silent this long while awaited is dead (-ECONNRESET)", ULN_SEC_NETWORK},
    {"ULN_UDP_PORT", "0", 0, 65535,
     "first of ULN_MAX_EPS consecutive ports, one per endpoint index, of local rank 0 (rank L: "
     "+ L x ULN_MAX_EPS); 0: any free",
     ULN_SEC_NETWORK},
    {"ULN_LOCAL_RANK", NULL, 0, 0,
     "this rank's place among its host's ranks: ULN_UDP_PORT + it x ULN_MAX_EPS is its first "
     "port; unset: the launcher's (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), ulnrun's rank",
     ULN_SEC_NETWORK},
    {"ULN_UDP_ADDR", NULL, 0, 0,
     "address to publish and bind; unset: ULN_UDP_IF's, the route to ULN_ROOT, under PMIx "
     "the default route's source, else loopback",
     ULN_SEC_NETWORK},
    {"ULN_UDP_IF", NULL, 0, 0,
     "publish and bind this interface's address (one name for every host, e.g. ib0)",
     ULN_SEC_NETWORK},
    {"ULN_UDP_GRO", "1", 0, 0,
     "0: no UDP_GRO on receive (one datagram per buffer); 1: on while runs come, off for lone "
     "traffic",
     ULN_SEC_NETWORK},
    {"ULN_UDP_CONNECT", "1", 0, 0,
     "1: an endpoint whose job has one rank on another host connects its socket to that rank "
     "(sends skip the kernel's route lookup; datagrams from elsewhere are dropped by the "
     "kernel, uncounted); 0: never",
     ULN_SEC_NETWORK},
    {"ULN_UDP_CONNECT_NOJOB", "0", 0, 0,
     "1: with no job too, while one peer is inserted and talks, until a second is or a peer "
     "comes uninserted; a peer not inserted is heard only when nothing came for 1 ms or the "
     "endpoint sleeps, so a stream that never pauses can starve it until it calls us dead "
     "(docs/running.md); 0: not with no job",
     ULN_SEC_NETWORK},
};

/* The rank's place among its host's ranks, as ULN_LOCAL_RANK or else its
 * launcher tells: -1 unknown; -EINVAL: ULN_LOCAL_RANK is not one. */
static int local_rank_setting(int *out)
{
    static const char *const names[] = {"ULN_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "SLURM_LOCALID", "MPI_LOCALRANKID"};
    *out = -1;
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *s = uln_setting_string(names[i]);
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

/* ULN_UDP_ADDR and ULN_UDP_IF: checked here, so that a bad one fails
 * uln_open, not the first endpoint that would use it. */
static int where_settings(struct uln_udp_params *up)
{
    int rc = 0;
    struct sockaddr_storage ss;
    socklen_t sslen;
    up->addr = uln_setting_string("ULN_UDP_ADDR");
    if (up->addr && uln_addr_parse_ip(up->addr, &ss, &sslen) != 0) {
        uln_setting_err("ulnet: ULN_UDP_ADDR=%s is not an IP address\n", up->addr);
        rc = -EINVAL;
    }
    up->ifname = uln_setting_string("ULN_UDP_IF");
    if (up->ifname && !if_nametoindex(up->ifname)) {
        uln_setting_err("ulnet: ULN_UDP_IF=%s: no such interface\n", up->ifname);
        rc = -EINVAL;
    }
    return rc;
}

static int udp_resolve(const struct uln_config *cfg, void *block)
{
    struct uln_udp_params *up = block;
    int rc = where_settings(up);
    rc |= uln_setting_u32("ULN_UDP_WINDOW", cfg->udp_window, &up->window);
    rc |= uln_setting_u32("ULN_UDP_MTU", 0, &up->mtu);
    rc |= uln_setting_u32("ULN_UDP_DEAD_MS", cfg->udp_dead_ms, &up->dead_ms);
    rc |= uln_setting_u32("ULN_UDP_PORT", 0, &up->port);
    rc |= uln_setting_switch("ULN_UDP_GRO", -1, &up->gro);
    rc |= uln_setting_switch("ULN_UDP_CONNECT", -1, &up->connect);
    rc |= uln_setting_switch("ULN_UDP_CONNECT_NOJOB", -1, &up->connect_nojob);
    rc |= local_rank_setting(&up->local_rank);
    return rc;
}

static int udp_check(const void *block)
{
    const struct uln_udp_params *up = block;
    if (up->window & (up->window - 1)) {
        uln_setting_err("ulnet: ULN_UDP_WINDOW=%u must be a power of two\n", up->window);
        return -EINVAL;
    }
    if (up->mtu && up->mtu < 576) {
        uln_setting_err("ulnet: ULN_UDP_MTU=%u is below 576\n", up->mtu);
        return -EINVAL;
    }
    return 0;
}

static void udp_info(const void *block, struct uln_info *info)
{
    const struct uln_udp_params *up = block;
    info->udp_window = up->window;
    info->udp_dead_ms = up->dead_ms;
}

/* The links under udp's packets (and their fault injector), and sealing. */
static const struct uln_settings_group *udp_sub(unsigned i)
{
    return i == 0 ? &uln_link_settings : i == 1 ? &uln_seal_settings : NULL;
}

const struct uln_settings_group uln_udp_settings = {
    .name = "udp",
    .table = udp_table,
    .n = sizeof udp_table / sizeof udp_table[0],
    .block_bytes = sizeof(struct uln_udp_params),
    .resolve = udp_resolve,
    .check = udp_check,
    .info = udp_info,
    .sub = udp_sub,
};
