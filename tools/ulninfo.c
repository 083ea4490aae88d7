/*
 * ulninfo - what ulnet can do here, and with which settings.
 *
 *   ulninfo            everything: build, transports, bootstrap, limits, settings
 *   ulninfo -c         only the settings (ULN_* variables: value, default, meaning),
 *                      and whether uln_open would take them
 *   ulninfo -t         only the transports and their limits
 *   ulninfo --version  the library's version (uln_version), and nothing else
 *
 * It joins a job like any program (uln_open): started alone it is a job of
 * one; under ulnrun, mpirun or with ULN_ROOT every rank joins and rank 0
 * prints, so the bootstrap and transports shown are the ones a program
 * started the same way would get. -c opens nothing: it asks the library
 * whether uln_open would take the settings (uln_config_query). Help,
 * version, build and usage errors, said before joining, come from rank 0
 * alone under a launcher (reports_for_job).
 *
 * Exit status: 0; 1 if the context cannot be opened (a bad setting, a
 * bootstrap that fails: the library says why on stderr); 2 on a usage error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/diag.h" /* the library beyond ulnet.h: settings, the link, the build */
#include "ulnet.h"

/* Bytes of a datagram that are not ulnet payload: IPv4 or IPv6 header, UDP
 * header, ulnet's 32-byte packet header (docs/protocol.md). */
#define ULN_PKT_HDR 32u

/* Under a launcher every rank runs ulninfo with the same arguments: what is
 * said before joining the job (help, version, build, a usage error) comes
 * once per job, from the process the launcher made rank 0 (ULN_RANK, or
 * PMIX_RANK under mpirun), as ulnperf does. Alone, it reports. */
static bool reports_for_job(void)
{
    const char *re = getenv("ULN_RANK");
    if (!re || !*re) re = getenv("PMIX_RANK");
    return !re || !*re || atoi(re) == 0;
}

static void usage(FILE *f);

/* A usage error: said by the reporting rank; the others stay silent and
 * wait half a second before failing, so a launcher that ends the job at the
 * first failure does not cut the report short. */
static int usage_error(bool report)
{
    if (report)
        usage(stderr);
    else
        usleep(500 * 1000);
    return 2;
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: ulninfo [-c | -t | -b | -V]\n"
               "Print what ulnet offers on this machine and the settings in force.\n"
               "  -c, --config      only the ULN_* settings: value, default, meaning;\n"
               "                    fails as uln_open would on a setting it refuses\n"
               "  -t, --transports  only the transports and their limits\n"
               "  -V, --version     the library's version\n"
               "  -b, --build       how this ulnet was built: PMIx, AF_XDP, the libfabric\n"
               "                    provider and where it installs, build type, prefix\n"
               "  -h, --help        this text\n"
               "Started under a launcher (ulnrun, mpirun, ULN_ROOT), every rank joins\n"
               "and rank 0 prints.\n");
}

static void print_settings(void)
{
    unsigned n;
    const struct uln_setting *t = uln_settings(&n);
    printf("# Settings: the value in force, then the default and what it does.\n");
    printf("# A value given in the environment is marked (set).\n");
    for (unsigned i = 0; i < n; i++) {
        const char *v = getenv(t[i].name);
        bool set = v && *v;
        char left[160];
        snprintf(left, sizeof left, "%s=%s", t[i].name, set ? v : t[i].dflt ? t[i].dflt : "");
        printf("%-28s # %s%s%s: %s\n", left, set ? "(set) " : "", t[i].dflt ? "default " : "",
               t[i].dflt ? t[i].dflt : "no default", t[i].doc);
    }
}

/* Does the kernel take this UDP socket option? (segmentation/coalescing
 * offloads that the udp transport uses when present) */
static const char *udp_opt(int opt, int val)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "unknown";
    int rc = setsockopt(fd, IPPROTO_UDP, opt, &val, sizeof val);
    close(fd);
    return rc == 0 ? "yes" : "no";
}

/* What ULN_TRANSPORT=auto takes on an interface, and why. */
static void print_auto(const char *ifname)
{
    char why[160];
    if (uln_diag_xdp_verdict(ifname, why, sizeof why) == 0)
        printf("  %-10s auto link: xdp (%s)\n", "", why);
    else
        printf("  %-10s auto link: udp (%s)\n", "", why);
}

static void print_interfaces(uint32_t mtu_setting)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0) {
        printf("  interfaces: cannot list (%s)\n", strerror(errno));
        return;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
        int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        char addr[INET6_ADDRSTRLEN] = "?";
        const void *a = fam == AF_INET
                            ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        inet_ntop(fam, a, addr, sizeof addr);
        struct ifreq r = {0};
        snprintf(r.ifr_name, sizeof r.ifr_name, "%s", i->ifa_name);
        int mtu = fd >= 0 && ioctl(fd, SIOCGIFMTU, &r) == 0 ? r.ifr_mtu : 0;
        /* What the udp transport would use: the setting, else the interface's
         * within the socket link's bounds. */
        unsigned use = mtu_setting ? mtu_setting : uln_diag_iface_mtu(mtu);
        unsigned ip = fam == AF_INET ? 20 : 40;
        printf("  %-10s %-40s mtu %-6d payload per packet %u B\n", i->ifa_name, addr, mtu,
               use > ip + 8 + ULN_PKT_HDR ? use - ip - 8 - ULN_PKT_HDR : 0);
        if (fam == AF_INET && !(i->ifa_flags & IFF_LOOPBACK)) print_auto(i->ifa_name);
    }
    if (fd >= 0) close(fd);
    freeifaddrs(ifs);
}

/* The link under udp's packets. Links open with endpoints, so where udp
 * carries peers (or ULN_LINK asks for a link) one endpoint is
 * opened to see what the link gives here: AF_XDP's mode, or why the socket
 * link took over. */
static void print_link(struct uln_ctx *ctx)
{
    printf("  AF_XDP link                      %s\n",
           uln_diag_xdp_built() ? "built in (ULN_LINK=xdp; auto where zero-copy)"
                                : "absent (built without libxdp/libbpf/clang)");
    struct uln_diag_link l;
    uln_diag_link(ctx, &l);
    bool asked = strcmp(l.asked, "auto") != 0;
    if (!l.udp || !strcmp(l.asked, "udp") || (!asked && !l.auto_choice)) {
        printf("  link in use                      %s\n",
               l.udp ? "udp (a socket)" : "none (no udp)");
        return;
    }
    struct uln_cq *cq = NULL;
    struct uln_ep *ep = NULL;
    int rc = uln_cq_open(ctx, 64, &cq);
    if (!rc) rc = uln_ep_open(ctx, cq, cq, &ep);
    uln_diag_link(ctx, &l); /* what the endpoint's link was */
    if (rc)
        printf("  link in use                      unknown: uln_ep_open: %s\n", uln_strerror(rc));
    else if (!strcmp(l.kind, "xdp"))
        printf("  link in use                      xdp (%s)\n", l.xdp_mode);
    else if (asked && !strcmp(l.kind, l.asked))
        printf("  link in use                      %s (asked for)\n", l.kind);
    else
        printf("  link in use                      %s (%s%s: %s)\n", l.kind,
               asked ? l.asked : "auto", asked ? " asked for" : "", l.why[0] ? l.why : "?");
    if (ep) uln_ep_close(ep);
    if (cq) uln_cq_close(cq);
}

/* ULN_SECURE: the mode, the cipher asked for (a pair whose other side has
 * no AES instructions uses ChaCha20-Poly1305), and what the CPU does for it. */
static void print_seal(const struct uln_ctx *ctx)
{
    struct uln_diag_seal s;
    uln_diag_seal(ctx, &s);
    printf("  sealed datagrams (ULN_SECURE)    %s%s\n", s.mode,
           s.level == 0   ? ": in clear, keys and data readable on the path"
           : s.level == 1 ? ": a tag on each, forgeries refused"
                          : ": encrypted and tagged");
    printf("  cipher                           %s%s\n", s.cipher,
           getenv("ULN_SECURE_CIPHER") ? " (ULN_SECURE_CIPHER)" : "");
    printf("  sealed by                        %s\n", s.libs);
    printf("  CPU accelerates AES-GCM          %s\n",
           s.cpu_aes ? "yes (AES and carry-less multiply instructions)"
                     : "no (ChaCha20-Poly1305 chosen: faster in software)");
    printf("  job secret (ULN_SECRET_FILE)     %s\n",
           s.secret ? "given: keys bound to it" : "none: keys from the exchange alone");
}

/* A transport's fact by key (uln_query_key), or "?" when it has none. */
static const char *fact(const struct uln_ctx *ctx, const char *key, char *buf, size_t len)
{
    return uln_query_key(ctx, key, buf, len) >= 0 ? buf : "?";
}

/* Every transport's facts, as each reports them (uln_query_keys). */
static void print_facts(const struct uln_ctx *ctx)
{
    char k[80], v[256];
    printf("transport facts (uln_query_key):\n");
    for (unsigned i = 0; uln_query_keys(ctx, i, k, sizeof k, v, sizeof v) == 0; i++)
        printf("  %-32s %s\n", k, v[0] ? v : "-");
}

static void print_transports(struct uln_ctx *ctx, const struct uln_info *in)
{
    char buf[128];
    printf("# Transports\n");
    printf("shm: available (every peer on this host)\n");
    printf("  PUT/GET to uln_mem_alloc memory  direct loads/stores on a shared mapping%s\n",
           in->shm_direct ? "" : " (off: ULN_SHM_DIRECT=0)");
    printf("  PUT/GET to other memory          %s\n",
           in->shm_cma && in->shm_direct ? "process_vm_readv/writev"
                                         : "through the rings, placed by the target");
    printf("  NAP ring per (peer, endpoint)    %" PRIu32 " B\n", in->ring_bytes);
    printf("udp: available (peers on other hosts; ULN_TRANSPORT=udp: every peer)\n");
    printf("  window per (endpoint, peer)      %s packets\n",
           fact(ctx, "udp.window", buf, sizeof buf));
    printf("  dead after silence of            %s ms\n", fact(ctx, "udp.dead_ms", buf, sizeof buf));
    printf("  UDP_SEGMENT (send offload)       %s\n", udp_opt(UDP_SEGMENT, 1400));
    printf("  UDP_GRO (receive offload)        %s\n", udp_opt(UDP_GRO, 1));
    struct uln_diag_link l;
    uln_diag_link(ctx, &l);
    print_interfaces(l.udp_mtu); /* ULN_UDP_MTU as the library resolved it */
    print_link(ctx);
    print_seal(ctx);
    printf("svc: the host's ulnetd (ULN_SERVICE; docs/service.md)\n");
    printf("  service                          %s\n", uln_diag_service(ctx));
    /* ULN_SECURE binds the service's wire too: a weaker one carries no peer
     * on another host (svc/ops.c). */
    printf("  its wire to other hosts sealed   %s\n",
           fact(ctx, "svc.wire_sealed", buf, sizeof buf));
    print_facts(ctx);
    printf("\n# Limits\n");
    printf("nap_max        %10" PRIu32 "  largest NAP payload, bytes\n", in->nap_max);
    printf("inline_max     %10" PRIu32 "  largest ULN_INLINE payload\n", in->inline_max);
    printf("sq_depth       %10" PRIu32 "  send-queue entries per endpoint\n", in->sq_depth);
    printf("cq entries     %10u  largest uln_cq_open\n", 1u << 24);
    printf("max_eps        %10" PRIu32 "  endpoints per process\n", in->max_eps);
    printf("max_regions    %10" PRIu32 "  registered regions per process\n", in->max_regions);
    printf("chunk_bytes    %10" PRIu32 "  per endpoint per engine pass\n", in->chunk_bytes);
    printf("post_copy_max  %10" PRIu32 "  PUT/GET copied inside the post call\n",
           in->post_copy_max);
    printf("ranks          %10u  per job (bootstrap board)\n", uln_diag_board_max_ranks());
}

#ifndef ULN_BUILD_FABRIC /* prov/ defines them where libfabric is found */
#define ULN_BUILD_FABRIC ""
#define ULN_BUILD_FI_DIR ""
#endif

/* How this ulnet was built, as `ucx_info -b` says of UCX: what is in it, and
 * where an install puts what. */
static void print_build(void)
{
    printf("# Build\n");
    printf("PMIx bootstrap: %s%s%s\n",
           uln_diag_pmix_built() ? "built in (used when started under a PMIx server)"
                                 : "absent (built without libpmix)",
           ULN_BUILD_PMIX[0] ? "; pmix " : "", ULN_BUILD_PMIX);
    printf("AF_XDP link:    %s\n", uln_diag_xdp_built()
                                       ? "built in (libxdp, libbpf)"
                                       : "absent (built without libxdp/libbpf/clang)");
    if (ULN_BUILD_FABRIC[0])
        printf("libfabric provider: built (libfabric %s); installs into %s\n", ULN_BUILD_FABRIC,
               ULN_BUILD_FI_DIR);
    else
        printf("libfabric provider: absent (built without libfabric-dev)\n");
    printf("build type:     %s, %s\n", ULN_BUILD_TYPE, ULN_BUILD_CC);
    printf("install prefix: %s\n", ULN_BUILD_PREFIX);
}

int main(int argc, char **argv)
{
    bool only_config = false, only_transports = false;
    static const struct option opts[] = {
        {"config", no_argument, NULL, 'c'}, {"version", no_argument, NULL, 'V'},
        {"build", no_argument, NULL, 'b'},  {"transports", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},   {NULL, 0, NULL, 0}};
    bool report = reports_for_job();
    opterr = report; /* getopt's own "unrecognized option" line too */
    int o;
    while ((o = getopt_long(argc, argv, "cthVb", opts, NULL)) != -1) {
        switch (o) {
        case 'b':
            if (!report) return 0;
            printf("# ulnet %s\n", uln_version(NULL));
            print_build(); /* this build's facts: no context, no job */
            return 0;
        case 'c':
            only_config = true;
            break;
        case 't':
            only_transports = true;
            break;
        case 'h':
            if (report) usage(stdout);
            return 0;
        case 'V':
            if (report) printf("ulninfo (ulnet) %s\n", uln_version(NULL));
            return 0;
        default:
            return usage_error(report);
        }
    }
    if (optind < argc || (only_config && only_transports)) return usage_error(report);
    if (only_config) {
        print_settings();
        /* Checked by the library's own code, so the verdict is uln_open's
         * (which has said on stderr what is wrong). */
        struct uln_info in;
        int rc = uln_config_query(NULL, &in);
        if (rc) {
            fprintf(stderr, "ulninfo: uln_open would refuse these settings: %s\n",
                    uln_strerror(rc));
            return 1;
        }
        printf("# uln_open takes these settings: nap_max %u, sq_depth %u, ring %u B\n", in.nap_max,
               in.sq_depth, in.ring_bytes);
        return 0;
    }

    struct uln_ctx *ctx;
    int rc = uln_open(NULL, &ctx);
    if (rc) {
        fprintf(stderr, "ulninfo: uln_open: %s\n", uln_strerror(rc));
        return 1;
    }
    struct uln_info in;
    uln_query(ctx, &in);
    if (uln_rank(ctx) == 0) {
        if (!only_transports) {
            printf("# ulnet %s\n", uln_version(NULL));
            print_build();
            printf("\n# Bootstrap\n");
            printf("in use:      %s\n", in.bootstrap);
            printf("ranks:       %d (this is rank %d)\n", uln_size(ctx), uln_rank(ctx));
            printf("job key:     %016" PRIx64 "\n", uln_job_key(ctx));
            printf("peers:       %d over udp, %d over shm (transport %s)\n", in.udp_peers,
                   uln_size(ctx) - 1 - in.udp_peers, in.transport);
            printf("progress:    %s\n\n", in.progress_thread
                                              ? "a progress thread (ULN_PROGRESS=thread)"
                                              : "in the caller's polls (ULN_PROGRESS=caller)");
        }
        print_transports(ctx, &in);
        if (!only_transports) {
            printf("\n");
            print_settings();
        }
        fflush(stdout);
    }
    /* Every rank stays until rank 0 has looked at the job. */
    if (uln_size(ctx) > 1) uln_barrier(ctx, 60000);
    uln_close(ctx);
    return 0;
}
