/*
 * proto.h - the messages between a process and its host's service (ulnetd),
 * over the service's unix socket (SOCK_SEQPACKET: one message per record).
 * docs/service.md has the design.
 *
 * Shared by the library (attach.c) and the service (tools/ulnetd), and
 * checked by one parser (proto.c) on the service's side: whatever a process
 * sends is untrusted. A process's identity is never in a message: the
 * service takes it from the socket (SO_PEERCRED).
 */
#ifndef ULN_SVC_PROTO_H
#define ULN_SVC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define ULN_SVC_MAGIC        0x756c6e64u /* "ulnd" */
#define ULN_SVC_VERSION      6u          /* 6: a socket of its own at attach, PEER_SOCK */
#define ULN_SVC_DEFAULT_PATH "@ulnet/ulnetd"
#define ULN_SVC_PATH_MAX     107u /* sun_path less its terminating byte */
#define ULN_SVC_MSG_MAX      65536u
#define ULN_SVC_WIRE_PORT    7475u /* the services' UDP port, unless ulnetd --addr says */
#define ULN_SVC_SOCKS_MAX    64u   /* sockets of its own per process: ULN_MAX_EPS's bound */

enum uln_svc_type {
    ULN_SVC_ATTACH = 1,   /* process -> service: struct uln_svc_attach + inbox memfd */
    ULN_SVC_ATTACH_OK,    /* service -> process: struct uln_svc_attach_ok */
    ULN_SVC_REFUSED,      /* service -> process: hdr.status says why */
    ULN_SVC_STATUS,       /* anyone -> service: the status, please */
    ULN_SVC_STATUS_TEXT,  /* service -> asker: hdr + text lines */
    ULN_SVC_QUEUE,        /* process -> service: struct uln_svc_queue + queue memfd + eventfd */
    ULN_SVC_QUEUE_OK,     /* service -> process: hdr (status 0) */
    ULN_SVC_ROUTE,        /* process -> service: struct uln_svc_route */
    ULN_SVC_ROUTE_OK,     /* service -> process: hdr (status 0) */
    ULN_SVC_MEM,          /* process -> service: struct uln_svc_mem + the block's memfd */
    ULN_SVC_MEM_DEL,      /* process -> service: struct uln_svc_mem, no descriptor */
    ULN_SVC_MEM_OK,       /* service -> process: hdr (status 0) */
    ULN_SVC_PEER_SOCK,    /* process -> service: struct uln_svc_peer_sock (rank) */
    ULN_SVC_PEER_SOCK_OK, /* service -> process: struct uln_svc_peer_sock (ip, port) */
    ULN_SVC_TYPES
};

struct uln_svc_hdr {
    uint32_t magic;
    uint16_t version, type;
    uint32_t len;   /* bytes of the whole message, this header included */
    int32_t status; /* answers: 0 or -errno */
};

struct uln_svc_attach {
    struct uln_svc_hdr h;
    uint64_t job_key;
    uint32_t rank, size, max_eps;
    uint32_t weight;      /* share asked (ULN_SERVICE_WEIGHT, 1..64; 0: 1), capped per uid */
    uint64_t inbox_bytes; /* the memfd's size: checked against fstat */
    uint32_t flags;       /* ULN_SVC_ATTACH_NO_JOB, ULN_SVC_ATTACH_NO_SOCK */
    uint32_t pad_;
};
/* A context with no job (ULN_BOOT=none): its peers are inserted by address,
 * and it is reached by the id the service gives it (attach_ok.client),
 * carried in the svc part of its address (docs/service.md, "By address"). */
#define ULN_SVC_ATTACH_NO_JOB 1u
/* The process wants no UDP socket of its own (ULN_SERVICE_SOCK=0). */
#define ULN_SVC_ATTACH_NO_SOCK 2u

struct uln_svc_attach_ok {
    struct uln_svc_hdr h;
    uint64_t host_id; /* uln_host_id of the service */
    uint32_t client;  /* the service's number for this attachment */
    uint32_t wire_ip; /* where other services reach it (IPv4, network order); 0: no wire */
    uint16_t wire_port;
    /* How its wire to other hosts is sealed (enum uln_seal_mode: 0 off, 1
     * auth, 2 encrypt; ulnetd --secure). A service that does not seal leaves
     * it 0, so a process never takes a wire in clear for a sealed one. */
    uint16_t secure;
    /* The UDP sockets of its own the service bound for it on wire_ip, one
     * per endpoint index (max_eps of them, passed with this answer by
     * SCM_RIGHTS in that order; docs/service.md, "A socket of its own"):
     * endpoint i's on port sock_port + i. 0, 0: none (no wire, no job, or
     * turned off). */
    uint16_t sock_port, sock_count;
    char link[48]; /* its link to other hosts, as --status names it: "udp", "xdp
                      native, zero-copy, queue 0", "none (no wire)" */
};

/* A rank of the process's own job lives on another host, whose service is
 * at (ip, port): the process learnt it from the job's board. The service
 * sends that rank's messages there, stamped with the process's own job key
 * and rank (the process names only the destination).
 * By address (a context with no job, client != 0): rank is the peer id the
 * process gave a peer it inserted, and that peer is the process the service
 * at (ip, port) knows as client, of context key key, endpoint ep. The
 * service stamps the process's own key and id on what it sends there; the
 * receiving service delivers it to that client only (wire.c, byaddr.c). */
struct uln_svc_route {
    struct uln_svc_hdr h;
    uint32_t rank;
    uint32_t ip; /* IPv4, network order */
    uint16_t port, pad_[3];
    uint32_t client; /* 0: a rank of our job; else the peer's id at its service */
    uint32_t ep;     /* by address: the peer's endpoint index */
    uint64_t key;    /* by address: the peer's context key */
};

/* A region in memory from uln_mem_alloc, told at registration (MEM, with
 * the block's memfd, sealed against shrinking) and at its end (MEM_DEL):
 * the service maps it and places, serves and applies atomics on the same
 * physical memory as the owner's own accesses (docs/service.md). The
 * service uses the mapping only for operations the owner's key table
 * admits with this key, within [addr, addr + len). */
struct uln_svc_mem {
    struct uln_svc_hdr h;
    uint32_t index, pad_; /* its entry in the key table */
    uint64_t key;         /* what peers name it by (live once registered) */
    uint64_t addr, len;   /* where it is in the owner's address space */
    uint64_t memfd_off;   /* where it starts in the block */
    uint64_t memfd_len;   /* the block's size */
};

/* Where a rank of the process's own job on another host sends from: the
 * (ip, port + i) of endpoint i's socket its service bound for it, as that service told
 * ours over the wire (asked: rank; answered: rank, ip, port; status -ENOENT:
 * not known (yet), or that rank has none). A datagram on a socket of our
 * own that claims to come from rank is that rank's only if its source is
 * this (ip, port): the kernel stamps the source, and only the rank's
 * service could bind that port for it. */
struct uln_svc_peer_sock {
    struct uln_svc_hdr h;
    uint32_t rank;
    uint32_t ip;    /* IPv4, network order */
    uint16_t port;  /* its endpoint 0's; endpoint i's is port + i */
    uint16_t count; /* ... i < count */
    uint16_t pad_[2];
};

/* An endpoint's queue to the service (docs/service.md, "Queues"): one
 * memfd, sealed, of ULN_SVC_QUEUE_BYTES(ring_bytes): this header page, then
 * the tx ring (the process produces, the service consumes). Each message in
 * it is the engine's ring message as it would go into the peer's own ring,
 * with aux = the destination rank | channel << 31. */
#define ULN_SVC_QUEUE_MAGIC    0x756c6e71u /* "ulnq" */
#define ULN_SVC_RING_BYTES     (1u << 20)
#define ULN_SVC_QUEUE_BYTES(r) (4096u + 64u + (r))
#define ULN_SVC_AUX_CH         (1u << 31)
#define ULN_SVC_GONE_WORDS     64u /* a bit per rank: a job's 4096 (ULN_BOOT_MAX_RANKS) */

struct uln_svc_queue_hdr {
    uint32_t magic, ring_bytes;
    /* The service is about to sleep, or sleeps (1): a producer that wrote
     * must then write the eventfd. Dekker with the service's own check of
     * the ring after setting it: seq_cst on both sides (svc/send.c,
     * ulnetd's queues.c). */
    _Alignas(64) _Atomic uint32_t svc_sleeping;
    /* Peers gone (their process ended): the service sets rank's bit, then
     * bumps gone_gen (both seq_cst RMWs); the process reads gone_gen
     * (acquire) and, when it moved, the bits: operations to those peers end
     * with -ECONNRESET (svc/ops.c). */
    _Alignas(64) _Atomic uint32_t gone_gen;
    _Alignas(64) _Atomic uint64_t gone[ULN_SVC_GONE_WORDS];
    /* Peers held back (per channel, a bit per rank): the flow to that rank
     * on another host is out of credit (docs/service.md, "Credit"), and the
     * service keeps what the process sent it beyond. The service sets the
     * bit, clears it once the flow's credit has come back and the kept
     * messages are sent, and rings the doorbell; the process's reserve for
     * that peer and channel finds no room while it is set (relaxed loads: a
     * stale view costs at most one message more kept by the service, or
     * one pass of waiting). Its other peers, and its answers to them, go on. */
    _Alignas(64) _Atomic uint64_t held[2][ULN_SVC_GONE_WORDS];
};
_Static_assert(sizeof(struct uln_svc_queue_hdr) <= 4096, "the queue header fits its page");

struct uln_svc_queue {
    struct uln_svc_hdr h;
    uint32_t ep, ring_bytes;
    uint64_t bytes;
};

/* A message from a process, checked: its type, or -EPROTO (malformed: bad
 * magic, version, type or length, or the wrong number of descriptors
 * nfds for its type). len: bytes received; truncated: the kernel cut it. */
int uln_svc_parse(const void *buf, size_t len, int truncated, int nfds);

/* Fill h for a message of type and len bytes. */
void uln_svc_hdr_init(struct uln_svc_hdr *h, unsigned type, uint32_t len, int32_t status);

/* The socket address of path ("@name": abstract; else a file path; NULL or
 * "": the default). The address's length, or -ENAMETOOLONG / -EINVAL. */
struct sockaddr_un;
int uln_svc_sockaddr(const char *path, struct sockaddr_un *sa);

#endif
