/*
 * ulnet_xdp.h - what the XDP program (ulnet_xdp.bpf.c) and the link that
 * loads it (program.c) share: the keys and values of its maps.
 */
#ifndef ULN_XDP_SHARED_H
#define ULN_XDP_SHARED_H

#include <linux/types.h>

#define ULN_XDP_SLOTS 64 /* AF_XDP sockets per program instance (ULN_MAX_EPS's limit) */

/* ulnet_ports: which frames are ulnet's. Network byte order, as on the wire. */
struct uln_xdp_port_key {
    __u32 addr; /* destination IPv4 address */
    __u16 port; /* destination UDP port */
    __u16 pad;
};

struct uln_xdp_port_val {
    __u32 slot;      /* the socket's index in ulnet_xsks */
    __u32 queue;     /* the receive queue it is bound to */
    __u32 frame_max; /* the longest frame the link takes: its MTU + Ethernet's 14 */
};

/* Before each frame redirected to an AF_XDP socket, in its metadata (the
 * bytes just before the frame, in the UMEM): the slot's ulnet_passed count
 * when the frame was redirected, so the link knows which of the bytes
 * passed to its bound socket came before it (docs/xdp.md, "Two paths").
 * magic says the program wrote it: the link clears it once read. */
#define ULN_XDP_META_MAGIC 0x756c6e6du /* "ulnm" */
struct uln_xdp_meta {
    __u64 passed; /* UDP payload bytes passed to the kernel for the slot before this frame */
    __u32 magic;
    __u32 pad;
};

#endif
