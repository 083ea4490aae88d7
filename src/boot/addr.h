/*
 * addr.h - the one address rule: how a host:port string is read, and which of
 * this host's addresses the transports bind and publish. Every bootstrap and
 * every transport asks here, so they cannot disagree (once, rank 0 with
 * ULN_ROOT=0.0.0.0:P published 127.0.0.1 while its route to the others said
 * another address).
 */
#ifndef ULN_BOOT_ADDR_H
#define ULN_BOOT_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct uln_boot;

/* "ipv4:port" or "[ipv6]:port", port 1..65535, numeric literals only: a
 * bootstrap that waits on DNS has one more way to hang, and a job's launcher
 * knows its addresses. 0 or -EINVAL. */
int uln_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* A bare IPv4 or IPv6 literal ("fe80::1%eth0" too), port 0. 0 or -EINVAL. */
int uln_addr_parse_ip(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* ss as an address to publish: port 0, an IPv4-mapped IPv6 address as
 * AF_INET (what a dual-stack socket reports for an IPv4 peer). */
void uln_addr_host(const struct sockaddr_storage *ss, struct sockaddr_storage *out, socklen_t *len);

/* 0.0.0.0 or :: - listening everywhere, which says nothing about the way out. */
bool uln_addr_is_any(const struct sockaddr_storage *ss);

/* "1.2.3.4:5" or "[::1]:5", for messages. */
const char *uln_sockaddr_str(const struct sockaddr_storage *ss, socklen_t len, char *buf, size_t n);

/* The address this process binds and publishes (port 0), the first that applies:
 *   addr_setting   as given (ULN_UDP_ADDR; NULL: none);
 *   if_setting     that interface's address (ULN_UDP_IF; NULL: none) (the same name on every host,
 * so one setting serves a whole job under mpirun or srun); ULN_ROOT mode  the bootstrap's route
 * (uln_boot_route_addr): the local end of the connection to rank 0, or for rank 0 the address the
 *                  other ranks reached it at - never the wildcard it listens on;
 *   PMIx mode      no address of the other hosts is known before we publish
 *                  ours, so: the source address of the default route (on a
 *                  cluster node, the interface towards the other nodes), else
 *                  the first interface that is up and not loopback (hosts
 *                  with no default route, such as tests/netns's);
 *   otherwise      loopback (every rank on this host).
 * 0 or -EINVAL (a setting names no usable address: a message says which). */
int uln_addr_local(struct uln_boot *boot, const char *addr_setting, const char *if_setting,
                   struct sockaddr_storage *ss, socklen_t *len);

/* This host, as far as shared memory reaches: equal ids can map each other's
 * inboxes (same kernel, pid and network namespace). Never 0. */
uint64_t uln_host_id(void);

#endif
