/*
 * ulnetd.h - the host service's state (docs/service.md), shared by its files:
 * main.c (options, the loop), clients.c (attach, detach), status.c
 * (--status, and the text the service answers it with), queues.c (queues,
 * feeding inboxes), serve.c (one-sided operations in a target's stead),
 * mem.c (processes' memory mapped here), wire.c (other hosts' services).
 */
#ifndef ULNETD_H
#define ULNETD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/internal.h"
#include "core/inbox.h"
#include "core/ring.h"
#include "rel/rel.h"
#include "transport/svc/proto.h"

#define ULN_SVC_MAX_EPS 64 /* endpoints per process (ULN_MAX_EPS's bound) */
_Static_assert(ULN_SVC_MAX_EPS == ULN_SVC_SOCKS_MAX, "a socket per endpoint index");
#define ULN_SVC_CGROUP_MAX 128u /* a cgroup path we keep (longer: unknown) */
/* --queue-mem's default: 64 endpoints' queues nearly (each 1 MiB + a page). */
#define ULN_SVC_QUEUE_MEM_DEFAULT (64ull << 20)
/* --ops-mem's default: a process's messages the service holds for the wire
 * (queued for it, kept for want of credit): 4 flows' worth of credit. */
#define ULN_SVC_OPS_MEM_DEFAULT (8ull << 20)

/* What an epoll event's pointer points at: each such struct starts so. */
enum { KIND_CLIENT = 1, KIND_QUEUE };

struct client;
struct mapped;

/* One ring of a target's inbox that we produce into (queues.c), and what we
 * serve there in the target's stead for that (source, endpoint) (serve.c). */
struct feed {
    struct uln_ring_prod prod;
    uint32_t life;
    bool open, marked;
    struct uln_refused_put refused; /* channel 0's: the PUT refused last */
};

/* An endpoint's queue to us (queues.c). */
struct queue {
    int kind; /* KIND_QUEUE */
    struct client *client;
    uint32_t ep;
    int bell; /* the process's eventfd: it writes when we sleep */
    uint8_t *map;
    size_t bytes;
    struct uln_svc_queue_hdr *qhdr;
    struct uln_ring_cons cons;
    bool bad, bad_said;      /* its producer broke the ring's rules: not read any more */
    uint64_t get_sent;       /* of the GET request at its head: bytes answered (serve.c) */
    struct placing *placing; /* its GETs whose data we place (place.c) */
    uint32_t n_placing, cap_placing;
    struct queue *next_retired; /* replaced by a later life's: freed after the event batch */
};

/* An attached process (or a connection that has not attached yet). */
struct client {
    int kind; /* KIND_CLIENT */
    int fd;
    uint32_t id;
    pid_t pid; /* SO_PEERCRED: the kernel's word, not the process's */
    uid_t uid;
    bool attached;
    bool was_attached; /* once: its flows and routes go when it is freed */
    uint64_t job_key;
    uint32_t rank, size;
    bool no_job;    /* its peers are inserted by address (byaddr.c) */
    uint8_t *inbox; /* its inbox, mapped shared */
    size_t inbox_len;
    struct uln_inbox_hdr hdr; /* its header as checked at attach: every address from this */
    struct feed *feeds;       /* the rings of its inbox we write (queues.c), lazily */
    bool wrote;               /* since its doorbell was last considered */
    bool no_vm; /* process_vm_* refused on it: its engine places and serves what is not mapped */
    bool vm_probed;      /* place.c asked whether process_vm_* may reach it */
    struct mapped *maps; /* its uln_mem_alloc regions mapped here, by key index (mem.c) */
    uint64_t attached_srcs[ULN_SVC_GONE_WORDS]; /* ranks we marked in its attached bitmap */
    struct queue *queues[ULN_SVC_MAX_EPS];
    struct queue *retired;
    const char *gone; /* why it is to be dropped after this event batch; NULL: not */
    bool draining;    /* it ended; its queues still hold what it sent before */
    /* Its share (arbiter.c): weight asked at attach, capped for its uid. */
    uint32_t weight;
    char cgroup[ULN_SVC_CGROUP_MAX]; /* its cgroup (v2 path) at attach; "" unknown */
    int64_t deficit;                 /* bytes of work it may still take this round */
    /* Its turn began (the quantum given) and was cut short: it goes on with it. */
    bool in_turn;
    unsigned next_ep;                 /* the endpoint the round robin among its own looks at next */
    uint64_t moved_msgs, moved_bytes; /* its messages and their work, taken so far */
    uint64_t queue_bytes;             /* its queues' memory mapped here (--queue-mem) */
    uint64_t over_quota;              /* its queues refused for it */
    uint64_t wire_held;               /* its messages held here for the wire (--ops-mem) */
    bool at_ops_quota;                /* its queue waits: wire_held at the quota */
    uint64_t over_ops;                /* times it was held back so */
    int sock_fds[ULN_SVC_MAX_EPS];    /* socks.c: the UDP sockets bound for it, by endpoint */
    unsigned n_sock_fds;              /* ... how many (0: none) */
    uint16_t sock_port;               /* ... endpoint 0's port (on the service's wire address) */
};

struct counters {
    uint64_t attached, detached, refused, malformed;
    uint64_t forwarded, unroutable; /* messages between processes; no such destination */
    uint64_t sleeps, wakeups;       /* epoll_wait with nothing to do; woken by a queue */
    uint64_t served, refused_ops;   /* PUT fragments and GETs done here; refused (key, range) */
    uint64_t atomics, mapped_ops;   /* atomics applied here; operations through a mapping */
    uint64_t wire_tx, wire_rx, wire_resent; /* datagrams to and from other services */
    uint64_t remotes_dead;                  /* other services that fell silent */
    uint64_t remotes_reset;  /* ... that came back in a new life (in flight to the old: failed) */
    uint64_t over_quota;     /* queues refused past --queue-mem */
    uint64_t over_ops;       /* processes held back at --ops-mem */
    uint64_t rt_drops;       /* --rt: runs past the budget, finished as SCHED_OTHER */
    uint64_t rt_over;        /* --rt: windows past the share, finished as SCHED_OTHER */
    uint64_t byaddr_refused; /* by address: the sender not the one its peer id names */
    uint64_t placed_gets, placed_bytes; /* GETs whose data we wrote into the initiator's buffer */
    uint64_t place_failed;              /* ... a write that failed (unmapped, died): an error */
    uint64_t socks_given;               /* sockets of their own passed to processes */
    uint64_t socks_dropped;             /* remote ranks' sockets not kept (the table full) */
    uint64_t socks_refused;             /* processes given none: the descriptors' budget spent */
};

/* socks.c: a remote rank's socket, as its service said (WIRE_SOCK). */
struct sock_entry {
    uint64_t job_key;
    uint32_t rank;
    uint32_t ip;        /* the remote service's address: the only one it vouches for */
    uint16_t wire_port; /* ... its wire port (which remote said it) */
    uint16_t port;      /* the rank's endpoint 0's socket's port there */
    uint16_t count;     /* ... endpoint i's at port + i, i < count */
};

struct wire;

/* --weight: the largest share a uid's processes may ask (arbiter.c). */
#define ULN_SVC_WEIGHT_MAX   64u
#define ULN_SVC_WEIGHT_RULES 32u
#define ULN_SVC_CGROUP_MAX   128u
struct weight_rule {
    bool any; /* "*": every uid without a rule of its own */
    uid_t uid;
    char cgroup[ULN_SVC_CGROUP_MAX]; /* "/...": processes in that cgroup (v2) or under it */
    uint32_t max;
};

struct ulnetd {
    int listen_fd, epoll_fd, signal_fd;
    int bell_fd; /* to ring processes' doorbells */
    char path[128];
    char link[16];  /* --link: auto, udp or xdp */
    char iface[32]; /* --if, "" unset */
    int xdp_hook;   /* --xdp-hook: enum uln_xdp_hook (0: auto, native where the driver has it) */
    int reaper_fd;  /* reaper.c: the pipe to the reaper, -1 none */
    uint64_t host_id;
    struct wire *wire;  /* wire.c: to other hosts' services; NULL: none (no --addr) */
    char link_kind[8];  /* the link it runs on: "udp" or "xdp" (link.c) */
    char link_desc[48]; /* ... and its mode, for attach answers (ulninfo) */
    char link_why[256]; /* why not AF_XDP, when --link asked for it or auto weighed it */
    uint64_t spin_ns;   /* --spin-us: polling this long after the last work, then sleep */
    uint32_t wire_ip;   /* where we are reached (network order) */
    uint16_t wire_port;
    struct client **clients; /* by slot; NULL: free */
    unsigned n_clients, cap_clients;
    uint32_t next_id;
    bool no_map; /* --no-map: never map processes' memory (process_vm_* only) */
    struct counters c;
    struct weight_rule weights[ULN_SVC_WEIGHT_RULES];
    unsigned n_weights;
    unsigned arb_next;       /* the client the next round starts at */
    uint64_t arb_batch;      /* work per queues_pump, in rounds (0: arbiter.c's; tests: 1) */
    uint64_t queue_mem;      /* --queue-mem: a process's queues' memory, at most (0: default) */
    uint64_t ops_mem;        /* --ops-mem: its messages held for the wire, at most (0: default) */
    int secure;              /* --secure: enum uln_seal_mode of the wire (0: off) */
    const char *secret_file; /* --secret-file, or NULL */
    struct wire_seal *wire_seal; /* wire_seal.c: the sealing around the wire's link */
    bool no_socks;               /* --no-rank-socket: no process gets a socket of its own */
    struct sock_entry *socks;    /* socks.c: remote ranks' sockets */
    unsigned n_socks, cap_socks;
    uint64_t socks_open; /* rank sockets held here (socks.c: within a budget of descriptors) */

    /* Scheduling (sched.c) */
    int rt_prio;                    /* --rt: SCHED_FIFO priority while woken; 0: off (sched.c) */
    bool rt_on;                     /* ... and it has that class now */
    uint64_t rt_budget_ns;          /* --rt-budget-us: continuous running in it, at most */
    unsigned rt_share;              /* --rt-share: % of a window's CPU time in that class */
    uint64_t rt_win_at, rt_win_cpu; /* the window's start, and our CPU time then */
    bool rt_over;                   /* its share is spent: SCHED_OTHER until it ends */
    bool nice_set;                  /* --nice given */
    int nice;
};

/* sched.c */
int sched_setup(struct ulnetd *d);
void sched_running(struct ulnetd *d, uint64_t woke, uint64_t now);
void sched_sleeping(struct ulnetd *d);

/* clients.c */
int clients_accept(struct ulnetd *d);
/* A connection fd (nonblocking) as a new client, known by its SO_PEERCRED;
 * NULL (fd closed) if it cannot be. */
struct client *client_add(struct ulnetd *d, int fd);
void client_input(struct ulnetd *d, struct client *c);
/* Mark c to go (freed by clients_sweep, after the event batch that may
 * still name it or its queues). */
void client_gone(struct client *c, const char *why);
void clients_sweep(struct ulnetd *d);
/* Free the ended clients whose queues are empty now. */
void clients_reap(struct ulnetd *d);
void clients_drop_all(struct ulnetd *d);

/* queues.c: the rings of t's inbox we write for src's endpoint ep. */
struct feed *feed_of(struct client *t, uint32_t src, uint32_t ep, int ch);
void *feed_reserve(struct client *t, uint32_t src, uint32_t ep, int ch, uint32_t len);
void feed_commit(struct client *t, uint32_t src, uint32_t ep, int ch, uint8_t type, uint8_t flags,
                 uint32_t len);

/* Write one message for t from src's endpoint ep. False: no room now. */
bool feed_put(struct client *t, uint32_t src, uint32_t ep, int ch, uint8_t type, uint8_t flags,
              const uint8_t *payload, uint32_t len);
/* The attached process of job's rank on this host, or NULL. */
struct client *find_target(struct ulnetd *d, uint64_t job, uint32_t rank);

/* socks.c: n UDP sockets of its own for c on consecutive ports, bound here
 * (asked: the process did not turn it off): how many (c->sock_fds; the
 * service keeps them), or 0 (none: no wire, no job, --no-rank-socket, or
 * no ports). */
int socks_give(struct ulnetd *d, struct client *c, unsigned n, bool asked);
void socks_close(struct ulnetd *d, struct client *c);
/* The service at (ip, wire_port) says job's rank's endpoint i sends from
 * (ip, port + i), i < count; port 0: it has no socket. */
void socks_learn(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t wire_port,
                 uint16_t port, uint16_t count);
void socks_forget(struct ulnetd *d, uint64_t job_key, uint32_t rank);
/* Everything the service at (ip, wire_port) said (it was freed). */
void socks_forget_at(struct ulnetd *d, uint32_t ip, uint16_t wire_port);
/* job's rank on another host: 0 and where it sends from, or -ENOENT. */
int socks_find(const struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t *ip,
               uint16_t *port, uint16_t *count);
void socks_free(struct ulnetd *d);

/* mem.c: processes' uln_mem_alloc memory mapped here (MEM, MEM_DEL). */
int mem_add(struct client *c, const struct uln_svc_mem *r, int fd, const char **why);
void mem_del(struct client *c, const struct uln_svc_mem *r);
void mem_drop_all(struct client *c);
/* Where [addr, addr + n) of t's region key (addresses in t's space) is
 * here, or NULL: not mapped (other memory, or not that region's key). */
uint8_t *mem_at(const struct client *t, uint64_t key, uint64_t addr, uint64_t n);
/* ... of whichever region of t's mapped here holds all of [addr, addr + n),
 * or NULL (place.c: a GET's destination, named by the process itself). */
uint8_t *mem_find(const struct client *t, uint64_t addr, uint64_t n);

/* place.c: GET data written straight into the initiator's buffer. */
struct uln_get_req;
struct uln_get_dst;
/* c's endpoint (queue q) asked rank for r, its data to go to dst: recorded
 * (true), or not (false: the answer comes through c's ring). Taking the
 * same request again records it again, once. */
bool place_record(struct ulnetd *d, struct client *c, struct queue *q, uint32_t rank,
                  const struct uln_get_req *r, const struct uln_get_dst *dst);
/* GET_RESP m from src for c's endpoint ep: placed (DONE), not one we place
 * (NONE: into its ring as it is), or LATER (no room for the completion). */
enum { PLACE_NONE = 0, PLACE_DONE, PLACE_LATER };
int place_resp(struct ulnetd *d, struct client *c, uint32_t ep, uint32_t src,
               const struct uln_msg *m, const uint8_t *payload);
/* The request was not sent after all (unroutable): its record goes. */
void place_cancel(struct queue *q, uint32_t rank, uint64_t op_id);
/* rank is gone: its GETs end at c with -ECONNRESET, nothing placed after. */
void place_forget_rank(struct client *c, uint32_t rank);
/* A buffer of len bytes for a piece read here on its way into the
 * initiator's (serve.c), kept from one piece to the next; NULL: no memory. */
void *place_bounce(uint32_t len);
/* A placed GET's pieces, at most (the wire's, and a local one's). */
#define PLACE_PIECE (256u << 10)
void place_free(struct queue *q);

/* wire.c: the wire to other hosts' services (docs/service.md). */
int wire_open(struct ulnetd *d, const char *addr); /* --addr IPv4[:port]; 0 or -1 (said) */
/* link.c: the link on sa as --link and --if say, into *out (d->link_kind
 * names it): 0 or -errno. */
struct sockaddr_in;
struct uln_link;
int wire_link_open(struct ulnetd *d, const struct sockaddr_in *sa, struct uln_link **out);

/* reaper.c: a child that detaches the service's XDP program if the service
 * dies without doing it. start: forked before AF_XDP opens (0 or -errno);
 * armed: the program is on ifindex; stop: the link took it away itself, or
 * there is none. */
int reaper_start(struct ulnetd *d);
void reaper_armed(struct ulnetd *d, int ifindex);
void reaper_stop(struct ulnetd *d);
/* wire_seal.c: --secure: the sealing link of src/seal around *io (which it
 * then owns), keys agreed with each remote service in the wire's first
 * packets. 0 or -errno (said; *io unchanged). */
int wire_seal_wrap(struct ulnetd *d, struct uln_link **io);
/* Its line of --status (the mode, refusals counted). */
size_t wire_seal_status(const struct ulnetd *d, char *out, size_t room);
/* At the end: everything the wire holds is freed, the link closed. */
void wire_close(struct ulnetd *d);
/* The link's descriptors to poll while the service sleeps: how many. */
int wire_fds(const struct ulnetd *d, int *fds, int max);
/* c routed to rank behind a remote service: tell that service c's socket
 * (WIRE_SOCK, asking for its job's in turn). */
void wire_sock_tell(struct ulnetd *d, const struct client *c, uint32_t rank);
/* job's rank lives behind the service at (ip, port): 0 or -errno. */
int wire_route(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t port);
bool wire_routes(const struct ulnetd *d, uint64_t job_key, uint32_t rank);
/* A process of no job (key job_key) names peer id rank for the process the
 * service at (ip, port) knows as client, of context key and endpoint ep. */
int wire_route_addr(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t port,
                    uint32_t client, uint64_t key, uint32_t ep);
/* m from c's endpoint ep to rank dst of its job on another host: 0,
 * -EAGAIN (not now: the queue waits), or another -errno (unroutable). */
int wire_forward(struct ulnetd *d, struct client *c, uint32_t ep, int ch, const struct uln_msg *m,
                 uint32_t dst, const uint8_t *payload);
/* ... a GET request whose answer we place (place.c): the target's service
 * may answer it in pieces larger than c's ring takes. */
int wire_forward_get(struct ulnetd *d, struct client *c, uint32_t ep, const struct uln_msg *m,
                     uint32_t dst, const uint8_t *payload);
/* job's rank ended here (its process freed), behind a remote service (GONE,
 * or the service fell silent), or its service said nothing more of it comes
 * (FLOWS_END): its flows and routes go from the next wire_tick on. */
enum { ENDED_HERE, ENDED_REMOTE, ENDED_FLOWS };
void wire_rank_ended(struct ulnetd *d, uint64_t job_key, uint32_t rank, int kind);
/* A process of job ended here: tell the services its job reaches. */
void wire_gone(struct ulnetd *d, uint64_t job_key, uint32_t rank);
/* ... a process with no job (key, our id for it): tell every service. */
void wire_gone_id(struct ulnetd *d, uint64_t key, uint32_t id);
/* Take what arrived: true if anything did. */
bool wire_input(struct ulnetd *d);
/* Timers, resends, acknowledgements, the backlog: the next deadline (ns,
 * ULN_REL_NEVER: none); *moved set when a backlog moved. */
uint64_t wire_tick(struct ulnetd *d, bool *moved);
size_t wire_status(const struct ulnetd *d, char *out, size_t room);

/* serve.c: a PUT fragment placed, a GET answered, in the target's stead.
 * The origin is who asked: a process here (answers go into its inbox ring)
 * or a rank behind another service (answers go back over the wire). */
struct origin {
    struct client *c; /* the process here; NULL: behind the wire's peer */
    /* By address (a context with no job behind the wire, byaddr.c): the
     * wire's stamps for the answers, the initiator's and the target's. 0
     * id: a rank of the target's job. */
    uint32_t id, t_id;    /* the initiator's id at its service; the target's at ours */
    uint16_t id_ep, t_ep; /* the initiator's endpoint; the target's */
    uint64_t t_key;       /* the target's context key */
    void *peer;           /* wire.c's remote it came from (c NULL) */
    uint64_t job_key;     /* the attach's (here) or the sending service's stamp */
    uint32_t rank, ep;    /* the initiator */
    uint64_t *get_sent;   /* of the GET at the head of its stream: bytes answered */
    uint64_t piece;       /* the largest GET_RESP payload it takes */
    bool placed;          /* a GET of c's whose data we place (place.c): pieces go there */
};
/* ENGINE: this one to the target's engine, through its ring (an atomic
 * on memory not mapped here, a PUT or GET on it where process_vm_* is
 * refused). */
enum { SERVE_DONE = 0, SERVE_LATER, SERVE_ENGINE };
int serve_put(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload);
int serve_get(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload);
int serve_atomic(struct ulnetd *d, const struct origin *o, struct client *t,
                 const struct uln_msg *m, const uint8_t *payload);
/* Whichever of those m is: SERVE_ENGINE for what the service does not do
 * (NAP, answers, ...): the caller writes it into t's ring. */
int serve_one(struct ulnetd *d, const struct origin *o, struct client *t, const struct uln_msg *m,
              const uint8_t *payload);

/* wire.c, for serve.c: an answer from t to o over the wire, t's own
 * message there (its out-queue, its share, its --ops-mem). Reserve gives
 * room for len payload bytes (NULL: the wire cannot take it now, t is at
 * its share or quota, or the peer is dead); commit sends what was written
 * there. */
void *wire_answer_reserve(struct ulnetd *d, const struct origin *o, struct client *t, uint32_t len);
void wire_answer_commit(struct ulnetd *d, const struct origin *o, struct client *t, uint8_t type,
                        uint32_t len);
/* The largest message payload the wire carries. */
uint32_t wire_msg_max(void);

/* byaddr.c: a message from a context with no job behind the wire, for t
 * here: the peer id t knows the sender by (its inbox's slot for the
 * sender's key and endpoint, claimed now if t has not inserted it: t's
 * engine learns the sender from the address we write there), once the
 * slot's address names the sender's service and id; -EAGAIN: t is claiming
 * it (try later); -EPERM: another sender's (counted). ip, port: the wire
 * address of the service it came from; host its host id. */
int byaddr_slot(struct ulnetd *d, struct client *t, uint64_t key, uint32_t ep, uint32_t id,
                uint64_t host, uint32_t ip, uint16_t port);
/* The attached process of no job that we know as id, of a key whose low 32
 * bits are key_lo; NULL: none (ended, or a stale id). */
struct client *byaddr_target(struct ulnetd *d, uint32_t id, uint32_t key_lo);

/* queues.c */
int queue_add(struct ulnetd *d, struct client *c, const struct uln_svc_queue *m, int memfd,
              int bell, const char **why);
void queue_free(struct ulnetd *d, struct queue *q);
/* gone's process ended: tell every process of its job (their operations to
 * it end with -ECONNRESET). */
void queues_peer_gone(struct ulnetd *d, const struct client *gone);
/* ... or job's rank on another host (its service said so, or fell silent). */
void queues_rank_gone(struct ulnetd *d, uint64_t job_key, uint32_t rank);
void queue_give_back(struct queue *q, uint64_t bytes);
/* Move every queue's messages on; true if any moved; *blocked: a target's
 * ring was full (try again soon). */
bool queues_pump(struct ulnetd *d, bool *blocked);
/* Ring the doorbells of the processes we wrote to (client.wrote) that
 * sleep: after a batch of queue messages, or of what came over the wire. */
void queues_wake(struct ulnetd *d);
/* Take q's next message (forward, place or serve it): the work it was in
 * bytes, 0 when nothing moved (q empty, broken, or *blocked: a target's
 * ring or the wire is full). */
uint64_t queue_step(struct ulnetd *d, struct client *c, struct queue *q, bool *blocked);
/* Nothing left to read in any of c's queues (or they are broken). */
bool queues_empty(const struct client *c);
/* Tell every queue's process we sleep (1) or not (0). */
void queues_sleeping(struct ulnetd *d, uint32_t v);

/* arbiter.c: weighted deficit round robin between processes, then between
 * a process's endpoints, over queue_step. */
/* --weight UID:W, /CGROUP:W or *:W: 0, or -1 (said). */
int arbiter_rule(struct ulnetd *d, const char *spec);
/* pid's cgroup (the v2 line of /proc/PID/cgroup) into out; "" if unknown. */
void arbiter_cgroup_of(pid_t pid, char *out, size_t room);
/* The weight a process of uid in cgroup gets for asked (0: 1): within
 * 1..ULN_SVC_WEIGHT_MAX and the rule that applies to it. */
uint32_t arbiter_weight(const struct ulnetd *d, uid_t uid, const char *cgroup, uint32_t asked);
/* One round: every process with work takes its weight's worth. True if
 * anything moved. */
bool arbiter_round(struct ulnetd *d, bool *blocked);

/* status.c: the text of a STATUS answer into out (at most room bytes, NUL
 * included): its length. And --status: ask the service at path, print. */
size_t status_text(const struct ulnetd *d, char *out, size_t room);
int status_ask(const char *path);

#endif
