/*
 * link_xdp.h - the AF_XDP link (link.h's contract): ulnet's datagrams as
 * real Ethernet/IPv4/UDP frames through an AF_XDP socket's rings, the kernel's
 * network stack out of the data path. Built only where libxdp, libbpf and
 * clang were found (ULN_HAVE_XDP); elsewhere open says so and the caller
 * takes the socket link. docs/xdp.md says how it works.
 *
 *   memory    one UMEM per link (per endpoint): rx_bufs + ULN_LINK_XDP_RX_SPARE
 *             receive frames, ULN_LINK_XDP_TX_FRAMES send frames, of
 *             ULN_LINK_XDP_FRAME bytes
 *   send      each packet copied into a send frame behind its headers, IPv4
 *             and UDP checksums computed; the peer's MAC from the kernel's
 *             neighbour table (resolved by the kernel when missing); in
 *             copy mode a run of gso_run or more to one peer goes by the
 *             bound UDP socket as one UDP_SEGMENT send instead
 *   recv      frames the XDP program redirected, lent where they lie; a
 *             release puts the frame back on the fill ring
 *   peers     sockaddr_in, as for the socket link: the MAC is the link's
 *             business
 */
#ifndef ULN_LINK_XDP_H
#define ULN_LINK_XDP_H

#include <netinet/in.h>

#include "link/link.h"

#define ULN_LINK_XDP_FRAME     4096u /* UMEM frame: one page */
#define ULN_LINK_XDP_MTU_MAX   3072u /* a frame holds the XDP headroom and the packet */
#define ULN_LINK_XDP_RX_SPARE  512u  /* receive frames beyond what the caller may keep */
#define ULN_LINK_XDP_TX_FRAMES 512u  /* send frames (and the TX ring's size) */

enum uln_xdp_copy { ULN_XDP_COPY_AUTO = 0, ULN_XDP_COPY_ONLY, ULN_XDP_ZEROCOPY };
enum uln_xdp_hook { ULN_XDP_HOOK_AUTO = 0, ULN_XDP_HOOK_NATIVE, ULN_XDP_HOOK_GENERIC };

struct uln_link_xdp_cfg {
    struct sockaddr_in local; /* our address and port: a specific IPv4 address */
    int fd;                   /* the UDP socket bound there: the link owns it once open
                                 succeeds (it keeps the port ours); untouched on failure */
    unsigned queue;           /* receive queue to bind (ULN_XDP_QUEUE) */
    enum uln_xdp_copy copy;   /* ULN_XDP_MODE=auto|copy|zc */
    enum uln_xdp_hook hook;   /* ULN_XDP_HOOK=auto|native|generic */
    unsigned mtu;             /* 0: the interface's, capped to ULN_LINK_XDP_MTU_MAX */
    unsigned rx_bufs;         /* datagrams the caller may keep; 0: 512 */
    unsigned max_peers;       /* 0: 256 */
    bool busy_poll;           /* the caller spins: SO_PREFER_BUSY_POLL, SO_BUSY_POLL */
    unsigned gso_run;         /* copy mode: runs of this many datagrams or more to one
                                 peer (one size) leave by the bound UDP socket as one
                                 UDP_SEGMENT send; 0: all by AF_XDP (ULN_XDP_GSO_RUN) */
};

/* True if this build has the AF_XDP link. */
bool uln_link_xdp_built(void);

/* ULN_TRANSPORT=auto (docs/xdp.md). iface_of: the interface that owns the
 * local IPv4 address ip (network order): 0, or -ENODEV. auto_verdict: 0 if
 * auto should try AF_XDP on ifname - zero-copy, which its driver can do, or
 * with copy (ULN_XDP_AUTO=copy) copy mode on any Ethernet driver; why says
 * which - or -errno with the one-line reason it keeps the socket link there:
 * -ENOENT when the interface is simply not one for AF_XDP (not Ethernet, a
 * driver without zero-copy such as veth or virtio_net: auto's choice,
 * nothing to fix), -EOPNOTSUPP when it is but this ulnet was built without
 * the link. */
int uln_link_xdp_iface_of(uint32_t ip, char *ifname, size_t len);
int uln_link_xdp_auto_verdict(const char *ifname, bool copy, char *why, size_t whylen);

/* Detach from interface ifindex the XDP programs that ulnet processes now
 * dead left there (killed before they could detach them; a zombie counts as
 * dead): how many, each said on stderr. Every link does it on its first open
 * on an interface; ulnetd's reaper (tools/ulnetd/reaper.c) when the service
 * itself is killed. */
int uln_link_xdp_reap(int ifindex);

/* 0, or -errno with a one-line reason in why (the caller prints it and takes
 * the socket link): -EOPNOTSUPP (not built, not IPv4), -EPERM (no
 * CAP_NET_ADMIN / CAP_BPF), -ENODEV, -EINVAL (no such queue), -EBUSY (queue
 * taken), ... */
int uln_link_xdp_open(const struct uln_link_xdp_cfg *cfg, struct uln_link **out, char *why,
                      size_t whylen);

#endif
