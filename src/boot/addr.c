/*
 * addr.c - the one address rule (addr.h): parsing host:port strings and
 * choosing this host's address, for every bootstrap and transport.
 */
#define _GNU_SOURCE
#include "boot/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/root.h"

/* A dotted quad or an IPv6 literal (with an optional %scope), as inet_pton
 * reads them: getaddrinfo alone would also take inet_aton's forms ("10.0.0"
 * as 10.0.0.0, "0x0a.1"), which are more often a typo than meant. */
static bool literal(const char *host, int family)
{
    char h[INET6_ADDRSTRLEN];
    unsigned char bin[16];
    size_t n = strcspn(host, "%");
    if (n >= sizeof h) return false;
    memcpy(h, host, n);
    h[n] = 0;
    if (family != AF_INET6 && host[n] == 0 && inet_pton(AF_INET, h, bin) == 1) return true;
    return family != AF_INET && inet_pton(AF_INET6, h, bin) == 1;
}

static int numeric(const char *host, const char *port, int family, struct sockaddr_storage *ss,
                   socklen_t *len)
{
    if (!literal(host, family)) return -EINVAL;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_family = family,
                             .ai_socktype = SOCK_DGRAM},
                    *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) return -EINVAL;
    memset(ss, 0, sizeof *ss);
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int uln_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
    const char *colon, *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') return -EINVAL;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strchr(s, ':');
        if (!colon || strchr(colon + 1, ':')) return -EINVAL; /* bare IPv6: needs [ ] */
        hl = (size_t)(colon - s);
    }
    const char *port = colon + 1;
    size_t pl = strspn(port, "0123456789");
    if (hl == 0 || hl >= sizeof host || pl == 0 || pl > 5 || port[pl] || atoi(port) == 0 ||
        atoi(port) > 65535)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    return numeric(host, port, s[0] == '[' ? AF_INET6 : AF_INET, ss, len);
}

int uln_addr_parse_ip(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    return numeric(s, "0", AF_UNSPEC, ss, len);
}

void uln_addr_host(const struct sockaddr_storage *ss, struct sockaddr_storage *out, socklen_t *len)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    struct sockaddr_storage o;
    memset(&o, 0, sizeof o);
    if (ss->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&o;
        s4->sin_family = AF_INET;
        memcpy(&s4->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
        *len = sizeof *s4;
    } else if (ss->ss_family == AF_INET6) {
        memcpy(&o, ss, sizeof(struct sockaddr_in6));
        ((struct sockaddr_in6 *)&o)->sin6_port = 0;
        *len = sizeof(struct sockaddr_in6);
    } else {
        memcpy(&o, ss, sizeof(struct sockaddr_in));
        ((struct sockaddr_in *)&o)->sin_port = 0;
        *len = sizeof(struct sockaddr_in);
    }
    *out = o; /* through a copy: out may be ss */
}

bool uln_addr_is_any(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

const char *uln_sockaddr_str(const struct sockaddr_storage *ss, socklen_t len, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 1], port[8]; /* numeric: that is enough */
    if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(buf, n, "?");
    else if (ss->ss_family == AF_INET6)
        snprintf(buf, n, "[%s]:%s", host, port);
    else
        snprintf(buf, n, "%s:%s", host, port);
    return buf;
}

/* An address of interface `name`, or with name NULL of the first interface
 * that is up, running and not loopback (the kernel lists them by index):
 * IPv4 first, else a global IPv6 one (a link-local address would need a scope
 * id, which the published address has no room for). -ENOENT if none. */
static int if_addr(const char *name, struct sockaddr_storage *ss, socklen_t *len)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0) return -errno;
    int rc = -ENOENT;
    for (int pass = 0; pass < 2 && rc; pass++) {
        int fam = pass ? AF_INET6 : AF_INET;
        for (struct ifaddrs *i = all; i && rc; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != fam) continue;
            if (name ? strcmp(i->ifa_name, name) != 0
                     : (i->ifa_flags & (IFF_UP | IFF_RUNNING | IFF_LOOPBACK)) !=
                           (IFF_UP | IFF_RUNNING))
                continue;
            *len = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
            if (fam == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
                continue;
            memset(ss, 0, sizeof *ss);
            memcpy(ss, i->ifa_addr, *len);
            rc = 0;
        }
    }
    freeifaddrs(all);
    return rc;
}

/* The source address the kernel picks towards `to`. connect() on a UDP
 * socket sends nothing: the kernel only picks the route, and with it the
 * source address. */
static int route_src(const struct sockaddr_storage *to, socklen_t tl, struct sockaddr_storage *ss,
                     socklen_t *len)
{
    int fd = socket(to->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 || connect(fd, (const struct sockaddr *)to, tl) < 0 ? -errno : 0;
    *len = sizeof *ss;
    if (!rc && getsockname(fd, (struct sockaddr *)ss, len) < 0) rc = -errno;
    if (fd >= 0) close(fd);
    if (!rc) uln_addr_host(ss, ss, len);
    return rc;
}

/* The IPv4 default route with the lowest metric: its interface and gateway
 * (0: a route straight onto a link). -ENOENT without one. */
static int default_route(char ifn_out[IF_NAMESIZE + 1], unsigned long *gw_out)
{
    FILE *f = fopen("/proc/net/route", "re");
    if (!f) return -ENOENT;
    char line[256], ifn[IF_NAMESIZE + 1];
    unsigned long dst, gw, mask;
    unsigned flags;
    int metric, best = INT_MAX;
    while (fgets(line, sizeof line, f)) {
        /* Iface Destination Gateway Flags RefCnt Use Metric Mask ...; the
         * addresses are the raw network-order words in hex. */
        if (sscanf(line, "%16s %lx %lx %x %*d %*d %d %lx", ifn, &dst, &gw, &flags, &metric,
                   &mask) != 6)
            continue; /* the header line */
        if (dst == 0 && mask == 0 && (flags & RTF_UP) && metric < best) {
            best = metric;
            *gw_out = gw;
            memcpy(ifn_out, ifn, IF_NAMESIZE + 1);
        }
    }
    fclose(f);
    return best == INT_MAX ? -ENOENT : 0;
}

/* The source address of the IPv4 default route: the address this host uses
 * towards the rest of the network. -ENOENT without a default route. */
static int default_route_addr(struct sockaddr_storage *ss, socklen_t *len)
{
    char ifn[IF_NAMESIZE + 1];
    unsigned long gw;
    int rc = default_route(ifn, &gw);
    if (rc) return rc;
    if (!gw) return if_addr(ifn, ss, len);
    struct sockaddr_storage g = {0};
    struct sockaddr_in *g4 = (struct sockaddr_in *)&g;
    g4->sin_family = AF_INET;
    g4->sin_addr.s_addr = (uint32_t)gw;
    return route_src(&g, sizeof *g4, ss, len);
}

static void loopback(struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof *ss);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len = sizeof *in;
}

static int from_setting_addr(const char *a, struct sockaddr_storage *ss, socklen_t *len)
{
    if (uln_addr_parse_ip(a, ss, len) == 0) return 0;
    fprintf(stderr, "ulnet: ULN_UDP_ADDR=%s is not an IP address\n", a);
    return -EINVAL;
}

static int from_setting_if(const char *ifn, struct sockaddr_storage *ss, socklen_t *len)
{
    if (if_addr(ifn, ss, len) == 0) return 0;
    fprintf(stderr, "ulnet: ULN_UDP_IF=%s: no such interface with an IPv4 or global IPv6 address\n",
            ifn);
    return -EINVAL;
}

/* ULN_ROOT mode: the bootstrap's route. A wildcard is left only for a job of
 * one listening everywhere, which has nobody to be reached by: loopback. */
static int from_route(struct uln_boot *boot, struct sockaddr_storage *ss, socklen_t *len)
{
    int rc = uln_boot_route_addr(boot, ss, len);
    if (rc) return rc;
    if (uln_addr_is_any(ss)) loopback(ss, len);
    return 0;
}

int uln_addr_local(struct uln_boot *boot, const char *addr_setting, const char *if_setting,
                   struct sockaddr_storage *ss, socklen_t *len)
{
    if (addr_setting) return from_setting_addr(addr_setting, ss, len);
    if (if_setting) return from_setting_if(if_setting, ss, len);
    if (boot->root) return from_route(boot, ss, len);
    if ((boot->pmix || boot->no_job) &&
        (default_route_addr(ss, len) == 0 || if_addr(NULL, ss, len) == 0))
        return 0;
    loopback(ss, len);
    return 0;
}

static void hash_file(const char *path, bool link, uint64_t *h)
{
    char buf[256];
    ssize_t n;
    if (link) {
        n = readlink(path, buf, sizeof buf);
    } else {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
        if (fd >= 0) close(fd);
    }
    for (ssize_t i = 0; i < n; i++) {
        uint64_t x = (*h ^ (uint8_t)buf[i]) * 0xbf58476d1ce4e5b9ull;
        *h = (x ^ (x >> 31)) + (uint64_t)i;
    }
}

/* Two processes can use shared memory when they run on the same kernel, see
 * the same processes (pidfds, /proc/PID/fd) and - so that network namespaces
 * can stand in for hosts in tests - share a network namespace. */
uint64_t uln_host_id(void)
{
    uint64_t h = 0x756c6e6574ull;
    hash_file("/proc/sys/kernel/random/boot_id", false, &h);
    hash_file("/proc/self/ns/net", true, &h);
    hash_file("/proc/self/ns/pid", true, &h);
    /* 48 bits, so that an address's short form carries it whole (peer.c);
     * two hosts of a job share one by chance about once in 10^8 pairs. */
    h &= 0xffffffffffffull;
    return h ? h : 1;
}
