/*
 * ulnfi.h - private header of the ulnet libfabric provider (libulnet-fi.so).
 *
 * The provider is built on ulnet's public API only. One uln_ctx per process
 * (ulnet joins one job per process), opened at the first fi_domain and shared,
 * refcounted, by every domain. Each fi_cq owns a uln_cq; an endpoint's ulnet
 * endpoint sends its completions to its transmit CQ's uln_cq and its receptions
 * to its receive CQ's. Progress is domain-wide: reading any CQ or counter polls
 * every uln_cq of the domain, so a rendezvous GET completing on the transmit
 * side moves on even when the application only reads its receive CQ.
 */
#ifndef ULNFI_H
#define ULNFI_H

#include <pthread.h>
#include <stdatomic.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "match.h"
#include "ulnet.h"

#define ULNFI_NAME       "ulnet"
#define ULNFI_PROV_VER   FI_VERSION(0, 1)
#define ULNFI_FI_VER     FI_VERSION(1, 17)
#define ULNFI_IOV_LIMIT  4
#define ULNFI_CQ_DEFAULT 1024
#define ULNFI_MAX_EPS_FI 64
#define ULNFI_RNDV_SEGS  ULNFI_IOV_LIMIT

extern struct fi_provider ulnfi_prov;

#define ulnfi_container(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

/* ---- address: what fi_getname returns and fi_av_insert takes (names.h) ------------- */
#include "names.h"

/* ---- the header in front of every NAP the provider sends ----------------------------- */
enum ulnfi_pkt {
    ULNFI_PKT_EAGER = 1, /* payload follows */
    ULNFI_PKT_RTS,       /* rendezvous request: struct ulnfi_rts follows */
    ULNFI_PKT_ACK,       /* rendezvous done: hdr.data is the sender's cookie */
    ULNFI_PKT_PING,      /* nothing: a sender waiting for an ACK makes ulnet watch the peer */
    ULNFI_PKT_CM,        /* FI_EP_MSG connection management: struct ulnfi_cm follows (cm.c) */
    ULNFI_PKT_RMA_EV,    /* FI_RMA_EVENT: an RMA onto the receiver ended; struct ulnfi_rma_ev */
};
#define ULNFI_HF_TAGGED 0x1u
#define ULNFI_HF_DATA   0x2u /* hdr.data is remote CQ data */
#define ULNFI_HF_ERR    0x4u /* ACK: the receiver could not read the data */
#define ULNFI_HF_STALE  0x8u /* ACK: with ERR, the request named an earlier life of the endpoint */
struct ulnfi_hdr {
    uint8_t pkt;
    uint8_t flags;
    uint16_t dgen; /* EAGER, RTS: the destination endpoint's life (ulnfi_addr.gen), checked */
    uint32_t seq;  /* per (endpoint, peer), checked by the receiver: NAPs are ordered */
    uint64_t tag;
    uint64_t data;
};
struct ulnfi_rts {
    uint64_t cookie; /* the sender's operation, echoed in the ACK */
    uint64_t len;    /* total bytes */
    uint32_t nseg, resv;
    struct {
        uint64_t key, len;
    } seg[ULNFI_RNDV_SEGS];
};

/* Connection management (cm.c): hdr.tag is the ULNFI_CM_* kind, hdr.data
 * the connecting endpoint's cookie, echoed in the answer. */
enum ulnfi_cm_kind {
    ULNFI_CM_REQ = 1, /* client endpoint -> passive endpoint: name is the client's */
    ULNFI_CM_ACCEPT,  /* server endpoint -> client: name is the server endpoint's */
    ULNFI_CM_REJECT,  /* passive endpoint -> client */
    ULNFI_CM_SHUTDOWN,
};
#define ULNFI_CM_DATA_MAX 256 /* FI_OPT_CM_DATA_SIZE */
struct ulnfi_cm {
    struct ulnfi_addr name;
    uint32_t len; /* connection data that follows */
    uint32_t resv;
};

/* FI_RMA_EVENT: what the initiator's RMA did at the target (mr.c), sent after
 * it: a write's NAP arrives after its data is placed (ulnet orders a NAP after
 * the PUTs before it), a read's once the GET completed. */
#define ULNFI_EV_WRITE   0x1u
#define ULNFI_EV_READ    0x2u
#define ULNFI_EV_COUNTED 0x4u /* the endpoint's counter was bumped already (a write with data) */
struct ulnfi_rma_ev {
    uint32_t what, resv;
    uint64_t key; /* the region of its first remote piece: counters bound to it (mr.c) */
};

/* The least nap_max the provider works with: a rendezvous request with all
 * its segments must fit in one NAP. The eager limit, and so inject_size, is
 * nap_max less the header. */
#define ULNFI_NAP_MIN (sizeof(struct ulnfi_hdr) + sizeof(struct ulnfi_rts))

/* What an unexpected message's payload points to. */
struct ulnfi_unexp {
    uint8_t pkt; /* EAGER or RTS */
    int peer;
    int ep_index;         /* the endpoint it arrived at (a shared receive context's matcher */
    uint16_t ep_gen;      /* holds several endpoints' messages), and its life */
    struct ulnfi_rts rts; /* RTS */
    uint8_t bytes[];      /* EAGER */
};

/* ---- objects ---------------------------------------------------------------------------- */
struct ulnfi_fabric {
    struct fid_fabric fab;
};

struct ulnfi_ep;
struct ulnfi_cq;
struct ulnfi_cntr;

struct ulnfi_domain {
    struct fid_domain dom;
    struct ulnfi_fabric *fab;
    struct uln_ctx *ctx;
    struct uln_info uinfo;
    int size; /* peer ids are below it */
    int threading;
    int progress;
    bool mr_vaddr;        /* FI_MR_VIRT_ADDR: peers name our memory by address (mr.c) */
    uint32_t addr_format; /* its info's: FI_FORMAT_UNSPEC (ulnet names) or a socket address's */
    int refs;             /* objects opened on it */
    bool locking;
    pthread_t auto_thread; /* FI_PROGRESS_AUTO */
    _Atomic bool auto_stop;
    struct ulnfi_domain *auto_next; /* domains whose thread runs (domain.c) */
    pthread_mutex_t lock;
    struct ulnfi_ep *eps[ULNFI_MAX_EPS_FI];  /* by ulnet endpoint index */
    struct ulnfi_ep *live[ULNFI_MAX_EPS_FI]; /* the enabled ones, dense, for progress */
    int nlive;
    struct ulnfi_cq *cqs[ULNFI_MAX_EPS_FI * 2];
    int ncqs;
    struct ulnfi_mr *ev_mrs; /* regions with counters bound (fi_mr_bind) */
};

static inline void ulnfi_lock(struct ulnfi_domain *d)
{
    if (d->locking) pthread_mutex_lock(&d->lock);
}
static inline void ulnfi_unlock(struct ulnfi_domain *d)
{
    if (d->locking) pthread_mutex_unlock(&d->lock);
}

/* A slot of an AV of socket addresses: the address, and its ulnet name's
 * lookup (av_sockaddr.c). */
enum { ULNFI_SA_NONE, ULNFI_SA_PENDING, ULNFI_SA_DONE, ULNFI_SA_FAILED };
struct ulnfi_av_sa {
    struct sockaddr_storage sa;
    socklen_t len;
    int state;    /* ULNFI_SA_* */
    uint32_t seq; /* the slot's insertion, or lookup: a lookup for an earlier one is dropped */
};

struct ulnfi_av {
    struct fid_av av;
    struct ulnfi_domain *dom;
    enum fi_av_type type;
    size_t count, cap;  /* slots up to the last used one; allocated */
    size_t lowest_free; /* no unused slot below it (av.c: removed slots are used again) */
    struct ulnfi_addr *tab;
    int *peer; /* by fi_addr: the ulnet peer id uln_peer_insert gave */
    uint8_t *used;
    fi_addr_t *by_peer; /* peer id -> fi_addr of the last inserted name, for FI_SOURCE */
    uint32_t *nslots;   /* peer id -> slots holding it (more than one: duplicates) */
    int refs;
    bool keep_peers; /* an FI_EP_MSG endpoint's own: its peers stay inserted at close (cm.c) */
    int rx_bits;     /* fi_av_attr.rx_ctx_bits: an fi_addr_t's top bits name a receive context */
    int *xpeer;      /* by slot * ULNFI_SEP_MAX + context: peer ids of contexts 1.. (sep.c) */
    size_t xcap;     /* slots xpeer covers */
    struct ulnfi_sav *sav; /* a named AV's shared table (av_shared.c) */
    bool sav_reader;       /* opened with FI_READ: the table is another process's */
    char *sav_path;
    struct ulnfi_av_sa *sa;       /* by slot, in a domain of socket addresses (av_sockaddr.c) */
    struct ulnfi_sa_job *sa_jobs; /* its lookups under way or not yet joined */
    _Atomic bool sa_stop;         /* closing: lookups give up */
};
/* av.c: a slot's name found (av_sockaddr.c): inserted. 0 or -FI_*. */
int ulnfi_av_resolved(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name);
/* av_sockaddr.c: under the domain lock but for close */
bool ulnfi_sa_format(uint32_t fmt);
socklen_t ulnfi_sa_len(const void *addr); /* of an IPv4 or IPv6 address, else 0 */
#define ULNFI_SA_STRLEN 80
size_t ulnfi_sa_str(const void *addr, char *buf, size_t n); /* what fi_av_straddr gives */
/* The first tries of a call's lookups, which fi_av_insert waits for. */
struct ulnfi_sa_first {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int left;
};
int ulnfi_av_sa_insert(struct ulnfi_av *av, size_t slot, const void *addr, socklen_t len,
                       struct ulnfi_sa_first *first);
void ulnfi_av_sa_wait(struct ulnfi_sa_first *first);   /* not under the domain lock */
int ulnfi_av_sa_use(struct ulnfi_av *av, size_t slot); /* -FI_EAGAIN while resolving */
void ulnfi_av_sa_close(struct ulnfi_av *av);
/* av_shared.c */
int ulnfi_av_share(struct ulnfi_av *av, struct fi_av_attr *attr);
void ulnfi_av_share_close(struct ulnfi_av *av);
void ulnfi_av_share_put(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name, bool used);
void ulnfi_av_share_sync(struct ulnfi_av *av);
int ulnfi_av_insert_at(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name);

/* One completion waiting in a CQ (enough for every format and readfrom). */
struct ulnfi_cqent {
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
};
struct ulnfi_cqerr {
    struct ulnfi_cqerr *next;
    struct fi_cq_err_entry e;
    fi_addr_t src;
};

struct ulnfi_cq {
    struct fid_cq cq;
    struct ulnfi_domain *dom;
    struct uln_cq *ucq;
    enum fi_cq_format format;
    enum fi_wait_obj wait_obj;
    int fd;                    /* FI_WAIT_FD: uln_cq_fd */
    struct fid_wait *wait_set; /* FI_WAIT_SET: the set it is in (wait.c) */
    size_t cap, head, count;   /* ring of entries */
    struct ulnfi_cqent *ring;
    struct ulnfi_cqerr *err_head, *err_tail;
    size_t overflow; /* entries dropped because the ring was full (never should be) */
    int refs;
    int drivers; /* enabled endpoints whose ulnet endpoint reports to ucq: polled only if > 0 */
};

struct ulnfi_cntr {
    struct fid_cntr cntr;
    struct ulnfi_domain *dom;
    uint64_t value, err;
    uint64_t seen_value, seen_err; /* as fi_poll last named it, or set/add left it */
    int refs;
};

struct ulnfi_eq {
    struct fid_eq eq;
    struct ulnfi_fabric *fab;
    pthread_mutex_t lock; /* recursive: reading progresses bound endpoints, which report here */
    enum fi_wait_obj wait_obj;
    int fd;                                    /* FI_WAIT_FD: an epoll set (eq.c) */
    int efd;                                   /* in it: an eventfd written as events are queued */
    struct ulnfi_ep *cm_eps[ULNFI_MAX_EPS_FI]; /* FI_EP_MSG endpoints bound: their events come
                                                  in as the EQ is read (cm.c) */
    int ncm;
    void *err_data; /* the last error event's, when the reader gave no buffer */
    int refs;       /* endpoints bound to it (under lock): fi_close is -FI_EBUSY meanwhile */
    struct ulnfi_eqev *head, *tail;
    struct ulnfi_eqev *err;
};
struct ulnfi_eqev {
    struct ulnfi_eqev *next;
    uint32_t event;
    size_t len;
    bool is_err;
    struct fi_eq_err_entry errent;
    uint8_t data[];
};
/* An event into eq (its lock taken inside, recursively): entry is len bytes. */
int ulnfi_eq_post(struct ulnfi_eq *eq, uint32_t event, const void *entry, size_t len);
int ulnfi_eq_post_err(struct ulnfi_eq *eq, fid_t fid, int err, const void *data, size_t len);

struct ulnfi_mr {
    struct fid_mr mr;
    struct ulnfi_domain *dom;
    struct uln_mr *umr;
    uint64_t access;
    /* fi_mr_bind: counters of the RMA that targets the region, known by the
     * initiator's FI_RMA_EVENT notices (rma.c); listed in the domain */
    struct ulnfi_cntr *rwr_cntr, *rrd_cntr;
    struct ulnfi_mr *ev_next;
};
/* mr.c: an RMA onto the region of key ended (ULNFI_EV_*): its counters */
void ulnfi_mr_event(struct ulnfi_domain *d, uint64_t key, uint32_t what);

/* An operation in flight. Its address is the user_data of the ulnet ops it
 * posts; pending counts those not completed yet. Transfers made of several
 * ulnet PUTs/GETs (RMA, a rendezvous receive) walk a cursor over the remote
 * segments and the local iov, and go on in progress when the send queue was
 * full (the retry list). */
enum ulnfi_op_kind {
    ULNFI_OP_SEND = 1, /* eager send; buf holds header and payload */
    ULNFI_OP_RNDV_SEND,
    ULNFI_OP_RNDV_RECV,
    ULNFI_OP_READ,
    ULNFI_OP_WRITE,
    ULNFI_OP_ATOMIC, /* its elements, one ulnet atomic each (atomic.c) */
    ULNFI_OP_CM,     /* a connection-management NAP (cm.c): completes silently */
    ULNFI_OP_TSEND,  /* a triggered send's arguments, parked until it fires (trigger.c) */
};
struct ulnfi_rseg {
    uint64_t key, off, len;
};
struct ulnfi_op {
    struct ulnfi_op *next; /* free list, or the retry list */
    struct ulnfi_ep *ep;
    uint8_t kind;
    bool report;  /* write a CQ entry on success */
    bool acked;   /* rendezvous receive: the ACK went out */
    bool has_imm; /* write: the last piece carries remote CQ data */
    int status;   /* first error (negative ulnet errno) */
    int pending;  /* ulnet ops outstanding */
    int peer;
    void *context;  /* the application's */
    uint64_t flags; /* FI_* completion flags */
    uint64_t tag, data, len;
    fi_addr_t src;
    /* the cursor: remote segments against the local iov */
    struct ulnfi_rseg rseg[ULNFI_IOV_LIMIT];
    uint32_t nrseg, cur_seg;
    struct iovec liov[ULNFI_IOV_LIMIT];
    uint32_t nliov;
    uint64_t loff; /* where the transfer starts in the local iov */
    uint64_t done; /* bytes posted so far */
    uint64_t cur_soff;
    /* rendezvous receive: the matched receive */
    struct ulnfi_match *m;
    struct ulnfi_match_recv *mrecv;
    bool recv_done;
    uint64_t olen, cookie;
    /* rendezvous send: the registrations peers read from */
    struct uln_mr *mrs[ULNFI_RNDV_SEGS];
    uint32_t nmr, slot;
    uint64_t ping_at; /* rendezvous send: when to ping its peer next (ns) */
    /* FI_TRIGGER: parked on its endpoint until trig_cntr reaches trig_at */
    struct ulnfi_cntr *trig_cntr;
    uint64_t trig_at;
    uint64_t trig_flags; /* a triggered send's own flags (src: its destination) */
    bool trig_tagged;
    /* atomic: len elements of width bytes, done of them posted; operands (and
     * compares after them) copied into buf, results into the caller's res */
    uint8_t aop, awidth;
    bool afence; /* FI_FENCE: the first element waits for what came before */
    struct iovec res[ULNFI_IOV_LIMIT];
    uint32_t nres;
    /* eager send buffer (owned) */
    size_t buf_len;
    uint8_t *buf;
};

#define ULNFI_RNDV_SLOTS 1024

/* A received NAP kept in the ring while the unexpected queue is full. */
struct ulnfi_held {
    struct ulnfi_held *next;
    struct uln_cqe c;
    struct uln_cq *ucq;
    bool taken; /* an ACK or PING acted on at arrival: only its place is kept */
};

struct ulnfi_ep {
    struct fid_ep ep;
    struct ulnfi_domain *dom;
    struct fi_info *info;
    struct ulnfi_av *av;
    struct ulnfi_eq *eq; /* bound, raising nothing: an RDM endpoint has no events */
    struct ulnfi_cq *tx_cq, *rx_cq;
    struct ulnfi_cntr *tx_cntr, *rx_cntr, *rd_cntr, *wr_cntr, *rrd_cntr, *rwr_cntr;
    bool tx_selective, rx_selective;
    uint64_t tx_op_flags, rx_op_flags;
    int aliases; /* fi_ep_alias objects open on it (alias.c): they close first */
    struct uln_ep *uep;
    struct uln_cq *own_cq;            /* when a direction has no fi_cq bound */
    struct ulnfi_cq *utx_cq, *urx_cq; /* whose ucq the ulnet endpoint reports to */
    int index;
    bool enabled;
    uint32_t *tx_seq, *rx_seq;     /* per peer */
    struct ulnfi_match mtag, mmsg; /* tagged and untagged matchers */
    struct ulnfi_match *mt, *mm;   /* in use: these, or a shared receive context's */
    struct ulnfi_ep *srx;          /* the shared receive context bound (ep.c) */
    bool is_srx;                   /* this is one: receives only, no ulnet endpoint */
    int srx_refs;                  /* endpoints bound to it */
    struct fid_stx *stx;           /* the shared transmit context bound */
    struct ulnfi_op *free_ops;
    struct ulnfi_op *retry_head, *retry_tail; /* receives with GETs or an ACK to post */
    struct ulnfi_op *trig_head, *trig_tail;   /* FI_TRIGGER: waiting for their counters */
    size_t eager_max, inline_max, rndv_min;
    uint64_t seq_errors, unexp_held;
    size_t unexp_unknown; /* queued messages from peers not in the AV (at most: some taken since) */
    struct ulnfi_held *held_head, *held_tail; /* in arrival order */
    /* rendezvous sends waiting for their ACK; cookie = slot | generation << 32 */
    struct ulnfi_op *rndv_slot[ULNFI_RNDV_SLOTS];
    uint32_t rndv_out;      /* slots in use: sends waiting for their ACK */
    uint64_t rndv_watch_at; /* next look at their peers (ns, ulnfi_rndv_watch) */
    uint32_t rndv_gen[ULNFI_RNDV_SLOTS];
    uint32_t rndv_next;
    uint16_t gen;              /* this life of the index: names carry it, arrivals must show it */
    uint64_t stale_refused;    /* messages for an earlier life of the index (ulnfi_ep_stale) */
    struct ulnfi_names *names; /* the name service, when the endpoint publishes its name */
    /* FI_EP_MSG and FI_EP_DGRAM (cm.c) */
    enum fi_ep_type type;
    bool own_av;        /* av is the endpoint's own (FI_EP_MSG: its peer, its server) */
    int cm_state;       /* ULNFI_CMS_* */
    fi_addr_t conn;     /* the connected peer in av */
    uint64_t cm_cookie; /* this connection attempt */
    int cm_peer;        /* where CM messages go: the passive endpoint, then the peer */
    uint16_t cm_gen;    /* their endpoint's life */
    struct ulnfi_cmev *cm_head, *cm_tail; /* events for the EQ, moved there when it is read */
    void *connreq;                        /* fi_info handle it was opened from (accept) */
    struct ulnfi_pep *pep;                /* the passive endpoint this one serves, if internal */
    uint64_t cm_watch_at, cm_ping_at;     /* connected: when to look at the peer next (ns) */
    struct ulnfi_sep *sep;                /* a scalable endpoint's context (sep.c) */
    int sep_index;
    bool sep_rx;
};

/* fi_ep_alias (alias.c): another fid_ep for an endpoint, with default op
 * flags of its own; data operations given either go to the endpoint. */
struct ulnfi_alias {
    struct fid_ep ep;
    struct ulnfi_ep *of;
    uint64_t tx_op_flags, rx_op_flags;
};
extern struct fi_ops ulnfi_alias_fi_ops;
int ulnfi_alias_open(struct ulnfi_ep *ep, struct fi_alias *al);

/* The endpoint a data operation's fid_ep names - itself, or the one an
 * alias stands for - and the default op flags it gives. */
static inline struct ulnfi_ep *ulnfi_ep_of(struct fid_ep *fep)
{
    if (fep->fid.ops == &ulnfi_alias_fi_ops) return ((struct ulnfi_alias *)fep)->of;
    return ulnfi_container(fep, struct ulnfi_ep, ep);
}
static inline uint64_t ulnfi_tx_flags(struct fid_ep *fep)
{
    if (fep->fid.ops == &ulnfi_alias_fi_ops) return ((struct ulnfi_alias *)fep)->tx_op_flags;
    return ulnfi_container(fep, struct ulnfi_ep, ep)->tx_op_flags;
}
static inline uint64_t ulnfi_rx_flags(struct fid_ep *fep)
{
    if (fep->fid.ops == &ulnfi_alias_fi_ops) return ((struct ulnfi_alias *)fep)->rx_op_flags;
    return ulnfi_container(fep, struct ulnfi_ep, ep)->rx_op_flags;
}
enum { ULNFI_CMS_IDLE, ULNFI_CMS_CONNECTING, ULNFI_CMS_CONNECTED, ULNFI_CMS_SHUT };
struct ulnfi_cmev {
    struct ulnfi_cmev *next;
    uint32_t event; /* FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN; 0: an error (err) */
    int err;
    struct fi_info *info; /* FI_CONNREQ */
    size_t len;
    uint8_t data[];
};

/* Flag of the fi_inject* calls, which complete with no CQ entry (fi_msg(3)).
 * FI_INJECT alone (fi_sendmsg, default op_flags) only means the buffer is
 * the caller's again at return: such a send still reports its completion.
 * Bits 60-63 of a flag word are the provider's (fabric.h); stripped from
 * callers' flags. */
#define ULNFI_INJECT_CALL (1ULL << 63)

/* ---- cross-file helpers ------------------------------------------------------------------ */
int ulnfi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                  const struct fi_info *hints, struct fi_info **info);
int ulnfi_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
void ulnfi_domains_stop(void);
/* domain.c: what endpoints will have, context open or not: inject_size and
 * the eager limit come from nap_max, tx_attr->size is sq_depth, the
 * domain's ep_cnt (and tx/rx_ctx_cnt) max_eps, its mr_cnt max_regions. */
struct ulnfi_limits {
    uint32_t nap_max, sq_depth, max_eps, max_regions;
};
int ulnfi_limits(struct ulnfi_limits *l); /* 0, or -EINVAL: uln_open would refuse */
int ulnfi_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
                      void *context);
int ulnfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq,
                  void *context);
void ulnfi_eq_ref(struct ulnfi_eq *eq, int delta); /* an endpoint binds (1) or lets go (-1) */
int ulnfi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
                  void *context);
int ulnfi_cq_trywait(struct fid *fid); /* fi_trywait on one CQ (FI_WAIT_FD) */
int ulnfi_eq_trywait(struct fid *fid); /* ... and on one EQ */
int ulnfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
                  void *context);
int ulnfi_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **out);
int ulnfi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr,
                    void *context);
int ulnfi_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
                  void *context);
int ulnfi_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep,
                   void *context);
int ulnfi_stx_open(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx,
                   void *context);
extern struct fi_ops_mr ulnfi_mr_ops;
extern struct fi_ops_msg ulnfi_msg_ops;
extern struct fi_ops_tagged ulnfi_tagged_ops;
extern struct fi_ops_rma ulnfi_rma_ops;
extern struct fi_ops_atomic ulnfi_atomic_ops;
int ulnfi_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
                       struct fi_atomic_attr *attr, uint64_t flags);

int ulnfi_errno(int uln_status); /* ulnet -errno -> -FI_E* */

/* sep.c: scalable endpoints */
#define ULNFI_SEP_MAX 8 /* contexts each way; fi_rx_addr's index reaches ulnet index + i */
int ulnfi_sep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
                   void *context);
int ulnfi_sep_ctx_enable(struct ulnfi_ep *ep); /* before: the scalable endpoint's AV */
int ulnfi_sep_ctx_placed(struct ulnfi_ep *ep); /* after: receive context i at 0's index + i */
void ulnfi_sep_ctx_closed(struct ulnfi_ep *ep);

/* wait.c: wait sets; a CQ opened with one is its member until it closes */
int ulnfi_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **out);
int ulnfi_wait_add(struct fid_wait *w, struct ulnfi_cq *cq);
void ulnfi_wait_del(struct fid_wait *w, struct ulnfi_cq *cq);

/* rma.c: FI_RMA_EVENT at the target, and the initiator's notice */
void ulnfi_rma_event_rx(struct ulnfi_ep *ep, const void *p, size_t plen);
void ulnfi_rma_event_tx(struct ulnfi_op *op);

/* cm.c: passive endpoints and connections */
int ulnfi_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep,
                     void *context);
extern struct fi_ops_cm ulnfi_cm_ops;
void ulnfi_connreq_hold(void *handle);
void ulnfi_connreq_put(void *handle); /* NULL: nothing */
void ulnfi_cm_rx(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h, const void *p,
                 size_t plen);
/* Events of the endpoints bound to eq, into it (eq's lock held). */
void ulnfi_cm_poll(struct ulnfi_eq *eq);
int ulnfi_cm_bind(struct ulnfi_ep *ep, struct ulnfi_eq *eq);
void ulnfi_cm_unbind(struct ulnfi_ep *ep);
int ulnfi_cm_getopt(struct ulnfi_ep *ep, int optname, void *optval, size_t *optlen);
void ulnfi_progress(struct ulnfi_domain *d);

/* av.c */
/* An endpoint's own AV (FI_EP_MSG): a name in, the domain lock held. */
int ulnfi_av_insert_locked(struct ulnfi_av *av, const struct ulnfi_addr *name, fi_addr_t *fa);
int ulnfi_av_peer_raw(struct ulnfi_av *av, fi_addr_t addr, int *peer);
int ulnfi_av_peer(struct ulnfi_ep *ep, fi_addr_t addr, int *rank);
uint16_t ulnfi_av_gen(struct ulnfi_ep *ep, fi_addr_t addr); /* after ulnfi_av_peer succeeded */
fi_addr_t ulnfi_av_src(struct ulnfi_av *av, int rank);

/* cq.c / cntr.c */
int ulnfi_cq_grow(struct ulnfi_cq *cq); /* -FI_ENOMEM: counted in overflow */
/* A completion into cq's ring. Inline: it runs for every completion, and a
 * call cost more than its few stores. */
static inline void ulnfi_cq_put(struct ulnfi_cq *cq, void *context, uint64_t flags, size_t len,
                                void *buf, uint64_t data, uint64_t tag, fi_addr_t src)
{
    if (cq->count == cq->cap && ulnfi_cq_grow(cq)) return;
    /* head < cap and count < cap here: one wrap at most, no division (cap
     * need not be a power of two) */
    size_t at = cq->head + cq->count++;
    struct ulnfi_cqent *e = &cq->ring[at < cq->cap ? at : at - cq->cap];
    e->e.op_context = context;
    e->e.flags = flags;
    e->e.len = len;
    e->e.buf = buf;
    e->e.data = data;
    e->e.tag = tag;
    e->src = src;
}
void ulnfi_cq_put_err(struct ulnfi_cq *cq, void *context, uint64_t flags, size_t len, uint64_t data,
                      uint64_t tag, size_t olen, int fi_err, int prov_errno, fi_addr_t src);
void ulnfi_cntr_inc(struct ulnfi_cntr *c);
void ulnfi_cntr_inc_err(struct ulnfi_cntr *c);

/* ep.c: enabling (the domain lock taken inside), names */
int ulnfi_ep_enable(struct ulnfi_ep *ep);
int ulnfi_ep_name(struct ulnfi_ep *ep, struct ulnfi_addr *a); /* the full name */
int ulnfi_ep_getname(struct ulnfi_ep *ep, void *addr, size_t *addrlen);
int ulnfi_ep_setname(struct ulnfi_ep *ep, const void *addr, size_t addrlen);
/* a connected endpoint's socket address (FI_SOCKADDR_IN*): its info's source */
int ulnfi_sa_src(const struct ulnfi_ep *ep, void *addr, size_t *addrlen);

/* ep.c: operations and their completion */
struct ulnfi_op *ulnfi_op_get(struct ulnfi_ep *ep, size_t buf_len);
/* How an operation to dest begins: the domain lock taken, dest's peer
 * resolved and an op with buf_len bytes of buffer. 0 with the lock held, or
 * -FI_* (-FI_EOPBADSTATE before fi_enable) with it released. */
/* op's local pieces: the caller's iovecs, or with inject (the caller's buffer
 * is free on return) one piece of our copy in op->buf (ulnfi_op_begin's
 * buf_len bytes). */
void ulnfi_op_set_local(struct ulnfi_op *op, const struct iovec *iov, size_t count, size_t len,
                        bool inject);
ssize_t ulnfi_op_begin(struct ulnfi_ep *ep, fi_addr_t dest, size_t buf_len, int *peer,
                       struct ulnfi_op **op);
void ulnfi_op_put(struct ulnfi_op *op);
void ulnfi_op_complete(struct ulnfi_op *op);
void ulnfi_recv_report(struct ulnfi_ep *ep, const struct ulnfi_match_recv *r, uint64_t flags,
                       size_t len, size_t olen, uint64_t data, uint64_t tag, fi_addr_t src,
                       void *buf, int status);
void ulnfi_retry_add(struct ulnfi_ep *ep, struct ulnfi_op *op);
/* trigger.c (FI_TRIGGER), under the domain lock: the counter and threshold
 * of a triggered operation's context (*c NULL: not triggered), or -FI_*;
 * parking a built operation; posting those whose counter is there
 * (progress); dropping an endpoint's at its close. */
int ulnfi_trigger_of(struct ulnfi_ep *ep, void *context, uint64_t flags, struct ulnfi_cntr **c,
                     uint64_t *at);
void ulnfi_trigger_park(struct ulnfi_op *op, struct ulnfi_cntr *c, uint64_t at);
void ulnfi_trigger_fire(struct ulnfi_ep *ep);
void ulnfi_trigger_drop(struct ulnfi_ep *ep);
/* msg.c: a parked triggered send (ULNFI_OP_TSEND) posted now, under the
 * domain lock: 0, -FI_EAGAIN (no room yet: it stays parked) or an error */
ssize_t ulnfi_send_fire(struct ulnfi_op *op);
/* A message (EAGER or RTS) for an earlier life of the endpoint's index: true
 * when refused (counted; a rendezvous sender is told by an error ACK). */
bool ulnfi_ep_stale(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *h, const void *p,
                    size_t plen);

/* names.c: the name service (fi_getinfo with a service, fi_av_insertsvc) */
int ulnfi_names_start(struct ulnfi_ep *ep, const struct ulnfi_addr *src,
                      const struct ulnfi_addr *name);
void ulnfi_names_stop(struct ulnfi_ep *ep);
/* The name published at node:service (node NULL: this host), or -FI_ENODATA
 * with an FI_INFO line saying why. */
int ulnfi_names_lookup(const char *node, const char *service, struct ulnfi_addr *out);
/* A source to publish at: node (NULL: every address) and service into src. */
int ulnfi_names_source(const char *node, const char *service, struct ulnfi_addr *src);
/* An endpoint named by a socket address (av_sockaddr.c) publishes there,
 * or fails; ulnfi_names_bound gives that address, as fi_getname does. */
int ulnfi_names_start_sa(struct ulnfi_ep *ep, const struct sockaddr *sa, socklen_t len,
                         const struct ulnfi_addr *name);
int ulnfi_names_bound(const struct ulnfi_ep *ep, void *addr, size_t *len);
/* The name published at sa: one try (once), or tried again while nothing
 * listens, as ulnfi_names_lookup; stop: give up early. 0 or
 * -FI_EADDRNOTAVAIL. */
int ulnfi_names_lookup_sa(const struct sockaddr *sa, socklen_t len, bool once,
                          const _Atomic bool *stop, struct ulnfi_addr *out);

/* msg.c / tagged.c */
ssize_t ulnfi_send(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, fi_addr_t dest,
                   uint64_t tag, uint64_t data, void *context, uint64_t flags, bool tagged);
ssize_t ulnfi_recv(struct ulnfi_ep *ep, const struct iovec *iov, size_t count, fi_addr_t src,
                   uint64_t tag, uint64_t ignore, void *context, uint64_t flags, bool tagged);
void ulnfi_rx_nap(struct ulnfi_ep *ep, const struct uln_cqe *cqe, struct uln_cq *ucq);
void ulnfi_rx_retry(struct ulnfi_ep *ep);
/* The AV learnt addresses: unexpected messages from peers it lacked take theirs. */
void ulnfi_rx_resolve(struct ulnfi_ep *ep);
void ulnfi_rx_forget(struct ulnfi_ep *ep, fi_addr_t src); /* fi_av_remove of src */

/* rndv.c */
ssize_t ulnfi_rndv_send(struct ulnfi_ep *ep, int peer, const struct iovec *iov, size_t count,
                        struct ulnfi_hdr *hdr, struct ulnfi_op *op);
void ulnfi_rndv_recv(struct ulnfi_ep *ep, struct ulnfi_op *op);
void ulnfi_rndv_send_failed(struct ulnfi_op *op);
void ulnfi_rndv_ack(struct ulnfi_ep *ep, int peer, const struct ulnfi_hdr *hdr);
/* Sends waiting for an ACK from a peer that died complete with
 * -FI_ECONNRESET (progress calls it; it looks every ULNFI_WATCH_MS). */
void ulnfi_rndv_watch(struct ulnfi_ep *ep);
/* rma.c: post the next pieces of a multi-piece transfer; -FI_EAGAIN when not
 * even one could be posted and nothing is outstanding yet */
int ulnfi_xfer_advance(struct ulnfi_op *op);
void ulnfi_op_advance(struct ulnfi_op *op);
/* atomic.c: post the next elements of an atomic; -FI_EAGAIN as above */
int ulnfi_atomic_advance(struct ulnfi_op *op);

const char *ulnfi_strerror(int prov_errno, char *buf, size_t len);
size_t ulnfi_iov_len(const struct iovec *iov, size_t count);
size_t ulnfi_copy_to_iov(const struct iovec *iov, size_t count, size_t off, const void *src,
                         size_t len);
size_t ulnfi_copy_from_iov(void *dst, const struct iovec *iov, size_t count, size_t len);

/* util.c: the "not supported" answers the man pages ask for */
int ulnfi_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int ulnfi_no_control(struct fid *fid, int command, void *arg);
int ulnfi_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context);
int ulnfi_no_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep,
                        void *context);
int ulnfi_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
                       struct fid_wait **waitset);

#endif /* ULNFI_H */
