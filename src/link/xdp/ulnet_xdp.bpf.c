/*
 * ulnet_xdp.bpf.c - the XDP program beneath the AF_XDP link (link.c): it sends to an
 * AF_XDP socket only ulnet's own frames, IPv4 UDP to an (address, port) a
 * link put in ulnet_ports, and arriving on the queue that link's socket is
 * bound to, and no longer than the link's MTU allows; every other frame
 * (ARP, ICMP, ssh, other UDP, fragments, IPv6, GSO runs) goes on to the
 * kernel untouched.
 *
 * Safe when its process is gone: a socket's entry leaves ulnet_xsks when the
 * socket closes (the kernel does that, also for a killed process), and the
 * redirect's fallback action is XDP_PASS, so a frame for a dead link goes to
 * the kernel like any other (which answers with ICMP port unreachable). The
 * next link opened on the interface detaches such orphans (ulnet_owner says
 * whose they were).
 *
 * Loaded through libxdp, so it runs in the multi-program dispatcher beside
 * other XDP programs; XDP_PASS lets the next one see the frame.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>

#include "ulnet_xdp.h"

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, ULN_XDP_SLOTS);
    __type(key, __u32);
    __type(value, __u32);
} ulnet_xsks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, ULN_XDP_SLOTS);
    __type(key, struct uln_xdp_port_key);
    __type(value, struct uln_xdp_port_val);
} ulnet_ports SEC(".maps");

/* Per socket (ulnet_xsks' index): UDP payload bytes of the frames for its
 * port passed to the kernel, which the link reads from its bound UDP socket.
 * Bytes, not frames: the kernel may merge frames (GRO) or cut a run (GSO)
 * between here and the socket, and a read's length still adds up. The link
 * maps this array and looks at it in every receive call (no system call):
 * a change says "read the socket now", not a tick later; and each frame
 * redirected to the socket carries the count it saw (struct uln_xdp_meta),
 * so the link delivers the two paths in the order they passed here.
 * [ULN_XDP_SLOTS + slot]: frames redirected to the socket. The kernel may
 * put a frame on the socket's ring only at the end of the batch it came in
 * (a driver's poll, or generic XDP's backlog: ~100 us measured on veth),
 * after datagrams that passed after it reached the bound socket; the link
 * reads the socket's datagrams only once its ring showed every frame this
 * count had when they passed (ulnet_xdp.h). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2 * ULN_XDP_SLOTS);
    __uint(map_flags, BPF_F_MMAPABLE);
    __type(key, __u32);
    __type(value, __u64);
} ulnet_passed SEC(".maps");

/* [0]: the pid of the process that attached this instance. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} ulnet_owner SEC(".maps");

/* In the dispatcher: after programs of higher priority; XDP_PASS goes on. */
struct {
    __uint(priority, 20);
    __uint(XDP_PASS, 1);
} XDP_RUN_CONFIG(ulnet_xdp);

/* The UDP payload a pass brings the socket: the IP datagram's length (whole
 * for a GSO run or a GRO merge, whose header speaks for all of it) less the
 * headers, at most what the frame holds (a lying length counts no more than
 * is there; Ethernet's padding does not count). */
static __always_inline __u64 udp_payload(struct xdp_md *ctx, const struct iphdr *ip, __u32 ihl)
{
    __u64 frame = ctx->data_end - ctx->data, tot = bpf_ntohs(ip->tot_len);
    __u64 hdrs = sizeof(struct ethhdr) + ihl + sizeof(struct udphdr);
    __u64 in_frame = frame > hdrs ? frame - hdrs : 0;
    __u64 in_ip = tot > ihl + sizeof(struct udphdr) ? tot - ihl - sizeof(struct udphdr) : 0;
    return in_ip < in_frame ? in_ip : in_frame;
}

SEC("xdp")
int ulnet_xdp(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->version != 4 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
    /* Fragments (MF or an offset) only the kernel can put together. */
    if (ip->frag_off & bpf_htons(0x3fff)) return XDP_PASS;
    __u32 ihl = (ip->ihl & 0xf) * 4u;
    if (ihl < sizeof(*ip)) return XDP_PASS;
    struct udphdr *udp = (void *)ip + ihl;
    if ((void *)(udp + 1) > end) return XDP_PASS;
    /* Not set up yet (no owner written): nothing is ours. The lookup also
     * binds the map to the program, where the next open finds it. */
    __u32 zero = 0, *owner = bpf_map_lookup_elem(&ulnet_owner, &zero);
    if (!owner || !*owner) return XDP_PASS;
    struct uln_xdp_port_key k = {.addr = ip->daddr, .port = udp->dest};
    struct uln_xdp_port_val *v = bpf_map_lookup_elem(&ulnet_ports, &k);
    if (!v) return XDP_PASS;
    /* A socket takes frames only from the queue it is bound to; from any
     * other the kernel's UDP socket on that port gets them. Longer than any
     * frame on the link's wire: a sender's GSO run that generic XDP sees
     * whole (a UMEM frame cannot hold it); the kernel gives it to the link's
     * bound UDP socket, whole where that reads with UDP_GRO. Either way the
     * link is told to read that socket. */
    __u32 slot = v->slot;
    __u64 *n = bpf_map_lookup_elem(&ulnet_passed, &slot);
    if (v->queue != ctx->rx_queue_index || ctx->data_end - ctx->data > v->frame_max) {
        if (n) __sync_fetch_and_add(n, udp_payload(ctx, ip, ihl));
        return XDP_PASS;
    }
    /* The count so far, before the frame, for the link's ordering; a
     * driver without metadata room just gets the frame without it. A
     * concurrent pass on another queue may or may not be counted: those are
     * not ordered with this frame anyway. */
    if (n && bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct uln_xdp_meta)) == 0) {
        struct uln_xdp_meta *m = (void *)(long)ctx->data_meta;
        if ((void *)(m + 1) <= (void *)(long)ctx->data) {
            m->passed = *n;
            m->magic = ULN_XDP_META_MAGIC;
            m->pad = 0;
        }
    }
    long act = bpf_redirect_map(&ulnet_xsks, slot, XDP_PASS);
    if (act == XDP_REDIRECT) {
        /* Counted before any later packet's run here (the add is a full
         * barrier): a link that sees a later pass counted sees this too. */
        __u32 r = ULN_XDP_SLOTS + slot;
        __u64 *c = bpf_map_lookup_elem(&ulnet_passed, &r);
        if (c) __sync_fetch_and_add(c, 1);
    }
    return act;
}

char _license[] SEC("license") = "GPL";
