/*
 * wire.c - the wire between services (docs/service.md, "Between services"):
 * a link of src/link (link.c opens it), one src/rel machine per remote
 * service (a host pair, one sequence space), and in each rel packet a run of
 * chunks of forwarded ring messages, each message a struct svc_wire and its
 * payload. The sending service stamps the job key and the source rank from
 * the attach (a process names only the destination); the receiving one
 * writes the message into the target's inbox ring for (source rank,
 * endpoint, channel), as it does for a process on its host.
 *
 * Packets are the link's size, never IP fragments: a message larger than a
 * packet goes as consecutive chunks (FIRST ... LAST) of consecutive packets,
 * which rel delivers in order, so the receiver joins them with one buffer
 * per remote. Messages waiting for one remote leave bundled: as many whole
 * ones in a packet as fit. A batch of packets goes to the link at once, so
 * the socket link sends a run of equal ones as one GSO send.
 *
 * Unknown sources: state only for the services a ROUTE names and a bounded
 * number of others that proved their address (source_of).
 *
 * Backpressure: a message whose target ring is full waits in the remote's
 * backlog, and the receive buffers of the packets it came in are given back
 * to rel only once it is in the ring, so rel's credit stops that host pair
 * (not others) until the target makes room. Per-process credit is next
 * (docs/service.md). On the sending side a remote takes WIRE_OUT_MAX bytes
 * of messages ahead of rel's window; beyond that the queue waits.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ulnetd.h"
#include "flows.h"
#include "core/wire.h"
#include "link/link.h"

#define WIRE_MAGIC   0x756c6e77u /* "ulnw" */
#define WIRE_VERSION 3u          /* 2: chunks in packets; 3: by address (ids, host) */
#define WIRE_GONE    0xf0u       /* a process ended: job_key, src_rank */
/* A process that ended: its last message to us has gone (job_key, src_rank;
 * after all of them in rel's order), so its flows here may go. */
#define WIRE_FLOWS_END 0xf2u
#define WIRE_CREDIT    0xf1u /* a flow's bytes taken (u64); flows.h: its key as sent */
/* A rank's sockets of its own (socks.c): job_key, src_rank, aux = endpoint
 * 0's port on the sending service's address (0: it has none) | how many
 * (endpoint i at port + i) << 16. flags WIRE_F_ASK: the receiver answers
 * with its own ranks' of that job. */
#define WIRE_SOCK  0xf3u
#define WIRE_F_ASK 1u
/* svc_wire.flags (above the ring message's own 8): an answer the target's
 * service made (serve.c: ACK, GET_RESP, ATOMIC_RESP). It rides its flow, in
 * order, but outside credit: the requester's credit bounded it already, and
 * the answering service's flow towards us never counted it as sent. */
#define WIRE_F_ANSWER 0x8000u
/* svc_wire.flags: the sending process's weight (1..64; 0 from a service
 * before weights: 1), so the receiving service serves the flows into one
 * target by weight (flows.h). */
#define WIRE_F_WEIGHT_SHIFT 8u
#define WIRE_F_WEIGHT       0x7f00u
/* svc_wire.flags of a GET request (whose own ring flags are 0): the
 * initiator's service places its data (place.c), so the answer may come in
 * pieces of any size up to WIRE_GET_PIECE, not only what the initiator's
 * ring takes. Taken off before the request goes into a ring. */
#define WIRE_F_PLACED 0x0080u
/* A placed GET's pieces: large enough that the wire's batches, not our
 * passes, bound it; small enough to sit in WIRE_OUT_MAX twice. */
#define WIRE_GET_PIECE PLACE_PIECE
#define WIRE_WINDOW    1024u        /* packets in flight per remote (a 1 MiB PUT at 1500 B) */
#define WIRE_OUT_MAX   (512u << 10) /* bytes queued per remote ahead of the window */
/* The processes' messages for a remote wait in a queue per process, taken
 * into the packets' list (out_head) in weighted turns of WIRE_QUANTUM bytes
 * per weight, while that list holds under WIRE_STAGE: so one process that
 * fills its share never delays another's message by more than a turn. */
#define WIRE_QUANTUM (16u << 10)
#define WIRE_STAGE   (16u << 10)
#define WIRE_MSG_MAX (16u << 20) /* a message joined from chunks, at most */
/* Remote services no ROUTE names (they reached us first: a target's service
 * learns of its initiators' services so), at most; beyond, an unknown
 * source is refused until a silent one is freed. */
#define WIRE_STRANGERS_MAX 32u

struct wire_hdr { /* rel's part of a packet */
    uint32_t magic;
    uint16_t version, rflags;
    uint32_t src_epoch, dst_epoch, seq, ack, lose;
    uint16_t sack_off, credit, reorder, wflags;
    uint64_t sack;
};
/* wire_hdr.wflags: a service's answer to a source it keeps no state for
 * (source_of): never answered in turn, so two services that know nothing of
 * each other (one datagram forged with the other's address) cannot keep
 * answering each other. */
#define WIRE_H_ANSWER 1u

/* A piece of one message in a packet: len bytes follow. FIRST: the message
 * starts here (with its struct svc_wire); LAST: it ends here. */
struct wire_chunk {
    uint32_t len;
    uint16_t flags;
    uint16_t pad_;
};
#define CHUNK_FIRST 1u
#define CHUNK_LAST  2u

struct svc_wire { /* one forwarded message */
    uint8_t type, ch;
    uint16_t flags;
    uint32_t len;
    uint64_t job_key;
    uint32_t src_rank, dst_rank;
    uint16_t src_ep, dst_ep;
    uint32_t aux; /* by address: the low 32 bits of the target's context key */
    /* By address (byaddr.c; 0 for a job's ranks): the sender's id at its
     * service (stamped there) and its host; the target's id at ours. Then
     * job_key is the sender's context key, src_rank 0, dst_rank the peer id
     * the sender gave the target (its flow's, for credit). */
    uint32_t src_id, dst_id;
    uint64_t src_host;
};

struct outmsg { /* taken from a queue, not yet all in packets */
    struct outmsg *next;
    uint32_t len, off; /* off: bytes already in packets */
    uint8_t bytes[];   /* struct svc_wire + payload */
};

/* One process's messages for a remote, waiting for their turn. */
struct outq {
    uint32_t client, weight;
    struct outmsg *head, *tail;
    uint64_t bytes;
    int64_t deficit;
};

struct remote {
    struct sockaddr_in sa;
    int peer; /* the link's id for it */
    struct uln_rel rel;
    uint8_t *tx[WIRE_WINDOW]; /* sent, not yet acknowledged: whole packets */
    uint32_t tx_len[WIRE_WINDOW];
    uint8_t *rx[WIRE_WINDOW]; /* arrived ahead of order: the chunks */
    uint32_t rx_len[WIRE_WINDOW];
    struct pending *head, *tail;        /* the host pair's backlog: a flow over its credit */
    struct outmsg *out_head, *out_tail; /* going into packets, in order */
    size_t out_bytes;
    struct outq *qs; /* the processes' messages waiting for a turn (stage) */
    unsigned n_qs, next_q;
    bool turn_begun;   /* qs[next_q] got its turn's quantum */
    uint64_t qs_bytes; /* in all of qs */
    uint8_t *join;     /* a message arriving in chunks: join_have of join_len */
    uint32_t join_len, join_have;
    uint64_t get_sent; /* of a GET at the head of its backlog, out of any flow (serve.c) */
    bool dead_said;
};

/* A link peer id whose remote was freed: used again for the next remote. */
struct spare_peer {
    int id;
    struct sockaddr_in sa; /* the address the link still maps to it */
};

struct route {
    uint64_t job_key;
    uint32_t rank;
    struct remote *r;
    /* By address: the peer is this client of that service, key, endpoint. */
    uint32_t client, ep;
    uint64_t key;
};

/* A rank that ended (wire_rank_ended): here (its process freed), behind a
 * remote service (GONE, or the service fell silent), or a remote's word that
 * nothing more of the rank's comes (FLOWS_END). */
struct ended {
    uint64_t job_key;
    uint32_t rank;
    uint8_t kind;
    bool said;   /* HERE: FLOWS_END sent, its routes looked at */
    uint64_t at; /* HERE: when (its entry lingers for late messages to it) */
};
/* How long the flows to a rank that ended here are looked for again: other
 * services send to it until our GONE reaches them (a round trip), and at
 * most until rel finds us dead. */
#define WIRE_ENDED_LINGER 4000000000ull

struct wire {
    struct uln_link *link;
    unsigned pkt_max; /* the link's datagram */
    struct remote **remotes;
    unsigned n_remotes;
    struct remote **by_peer; /* by the link's peer id */
    unsigned n_by_peer;
    struct route *routes;
    unsigned n_routes, cap_routes;
    uint8_t secret[32]; /* this life's: our epoch towards each address (cookie) */
    int reply_peer;     /* a link id pointed at an unknown source to answer it */
    struct spare_peer *spare;
    unsigned n_spare;
    uint64_t refused;       /* datagrams from unknown sources not taken (no state made) */
    uint64_t strangers_out; /* remotes no route named, freed once silent */
    struct uln_link_pkt batch[ULN_LINK_BATCH]; /* to the link at the next flush */
    unsigned n_batch;
    uint64_t tx_short;   /* packets the link did not take (full): rel resends them */
    struct flows tx, rx; /* per-process credit (flows.h): as sender, as receiver */
    struct ended *ended; /* ranks that ended: their state goes at the next tick */
    unsigned n_ended, cap_ended;
    uint64_t credit_waits; /* messages a queue held back for want of its flow's credit */
    uint64_t ended_freed;  /* ranks that ended whose state went (ended_sweep) */
    /* Packet buffers acknowledged, kept for the next packets: a stream
     * sends ~700 packets a MiB, and a malloc and free of each cost more
     * than filling it (heap growth and trimming at every burst). At most a
     * window's worth (pkt_max each) stays. */
    uint8_t *pkt_free[WIRE_WINDOW];
    unsigned n_pkt_free;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A packet buffer of pkt_max bytes: a kept one, else a new one. */
static uint8_t *pkt_get(struct wire *w)
{
    return w->n_pkt_free ? w->pkt_free[--w->n_pkt_free] : malloc(w->pkt_max);
}

/* b (acknowledged, or never sent) back: kept for the next packet. */
static void pkt_put(struct wire *w, uint8_t *b)
{
    if (b && w->n_pkt_free < WIRE_WINDOW)
        w->pkt_free[w->n_pkt_free++] = b;
    else
        free(b);
}

/* Where the answering id points between answers: an address nobody sends from. */
static struct sockaddr_in reply_none(void)
{
    return (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(9)};
}

int wire_open(struct ulnetd *d, const char *addr)
{
    char host[64];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    unsigned port = ULN_SVC_WIRE_PORT;
    if (colon) {
        *colon = 0;
        port = (unsigned)atoi(colon + 1);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (port == 0 || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "ulnetd: --addr %s: want IPv4[:port]\n", addr);
        return -1;
    }
    struct wire *w = calloc(1, sizeof *w);
    if (!w) return -1;
    int rc = wire_link_open(d, &sa, &w->link);
    if (rc) {
        if (rc != -EINVAL) fprintf(stderr, "ulnetd: --addr %s: %s\n", addr, strerror(-rc));
        free(w);
        return -1;
    }
    w->pkt_max = uln_link_payload_max(w->link);
    struct uln_link_info li;
    uln_link_info(w->link, &li);
    snprintf(d->link_desc, sizeof d->link_desc, "%s%s%s", d->link_kind, li.xdp_mode[0] ? " " : "",
             li.xdp_mode);
    /* A new life each start: packets of an earlier one are stale to peers. */
    while (getrandom(w->secret, sizeof w->secret, 0) != sizeof w->secret)
        ;
    /* The id we answer unknown sources through (pointed at each in turn);
     * its first address is one nobody sends from. */
    struct sockaddr_in none = reply_none();
    w->reply_peer = uln_link_add_peer(w->link, &none, sizeof none);
    d->wire = w;
    d->wire_ip = sa.sin_addr.s_addr;
    d->wire_port = (uint16_t)port;
    return 0;
}

int wire_fds(const struct ulnetd *d, int *fds, int max)
{
    return d->wire ? uln_link_fds(d->wire->link, fds, max) : 0;
}

static bool by_peer_set(struct wire *w, int peer, struct remote *r)
{
    if ((unsigned)peer >= w->n_by_peer) {
        unsigned n = (unsigned)peer + 16;
        struct remote **bp = realloc(w->by_peer, n * sizeof *bp);
        if (!bp) return false;
        memset(bp + w->n_by_peer, 0, (n - w->n_by_peer) * sizeof *bp);
        w->by_peer = bp;
        w->n_by_peer = n;
    }
    w->by_peer[peer] = r;
    return true;
}

/* Our life's epoch towards (ip, port): a keyed hash of the address, so a
 * source learns it only by receiving our answer at that address (a SYN
 * cookie's idea). A datagram addressed to it proves its source is where it
 * says; one that is not makes no state here (source_of). Never 0 (a hello). */
static uint32_t cookie(const struct wire *w, uint32_t ip, uint16_t port)
{
    uint8_t in[6], out[EVP_MAX_MD_SIZE];
    size_t n = 0;
    memcpy(in, &ip, 4);
    memcpy(in + 4, &port, 2);
    uint32_t e = 0;
    if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, w->secret, sizeof w->secret, in, sizeof in,
                  out, sizeof out, &n) &&
        n >= 4)
        memcpy(&e, out, 4);
    else /* no HMAC (never seen): the secret's own bytes, still this life's */
        memcpy(&e, w->secret, 4);
    return e ? e : 1;
}

static bool routed(const struct wire *w, const struct remote *r)
{
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].r == r) return true;
    return false;
}

static unsigned strangers(const struct wire *w)
{
    unsigned n = 0;
    for (unsigned i = 0; i < w->n_remotes; i++)
        n += !routed(w, w->remotes[i]);
    return n;
}

/* A link id for sa: the one the link has for it already, a spare one
 * pointed at it, or a new one. Negative: none (the link's table is full). */
/* id (the link still maps sa to it) is free: by_peer forgets it, and the
 * next remote uses it again (the link's peer table is bounded). */
static void peer_spare(struct wire *w, int id, const struct sockaddr_in *sa)
{
    if ((unsigned)id < w->n_by_peer) w->by_peer[id] = NULL;
    struct spare_peer *sp = realloc(w->spare, (w->n_spare + 1) * sizeof *sp);
    if (!sp) return; /* the id is lost to reuse; nothing else */
    w->spare = sp;
    w->spare[w->n_spare++] = (struct spare_peer){id, *sa};
}

static int peer_id(struct wire *w, const struct sockaddr_in *sa)
{
    int id = uln_link_find_peer(w->link, sa, sizeof *sa);
    if (id >= 0 && id == w->reply_peer) { /* we answered it last: take it back */
        struct sockaddr_in none = reply_none();
        if (uln_link_set_peer(w->link, id, &none, sizeof none) != 0) return -EBUSY;
        id = -1;
    }
    for (unsigned i = 0; i < w->n_spare; i++)
        if (w->spare[i].id == id ||
            (id < 0 && uln_link_set_peer(w->link, w->spare[i].id, sa, sizeof *sa) == 0)) {
            id = w->spare[i].id;
            w->spare[i] = w->spare[--w->n_spare];
            return id;
        }
    return id >= 0 ? id : uln_link_add_peer(w->link, sa, sizeof *sa);
}

static struct remote *remote_find(const struct wire *w, uint32_t ip, uint16_t port)
{
    for (unsigned i = 0; i < w->n_remotes; i++) {
        struct remote *r = w->remotes[i];
        if (r->sa.sin_addr.s_addr == ip && r->sa.sin_port == htons(port)) return r;
    }
    return NULL;
}

static struct remote *remote_of(struct ulnetd *d, uint32_t ip, uint16_t port)
{
    struct wire *w = d->wire;
    struct remote *r = remote_find(w, ip, port);
    if (r) return r;
    struct remote **rs = realloc(w->remotes, (w->n_remotes + 1) * sizeof *rs);
    r = calloc(1, sizeof *r);
    if (!rs || !r) {
        free(r);
        if (rs) w->remotes = rs;
        return NULL;
    }
    w->remotes = rs;
    r->sa =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
    r->peer = peer_id(w, &r->sa);
    struct uln_rel_cfg cfg;
    uln_rel_cfg_default(&cfg);
    cfg.window = WIRE_WINDOW;
    cfg.rx_bufs = WIRE_WINDOW;
    cfg.mss = w->pkt_max;
    /* A resend only after 1 ms: the services' round trip is a few tens of
     * us, but on a host with fewer CPUs than busy processes a service waits
     * for one now and then (bench/svc saw resends of packets that were not
     * lost at rel's 0.2 ms); a real loss is repaired sooner, by SACK/LOSE. */
    cfg.rto_min = 1000000;
    cfg.dead_after = 3000000000ull; /* a silent service: its peers end in 3 s */
    cfg.keepalive = 500000000ull;
    if (r->peer < 0 || !by_peer_set(w, r->peer, r) ||
        uln_rel_init(&r->rel, &cfg, cookie(w, ip, port), now_ns()) != 0) {
        if (r->peer >= 0) peer_spare(w, r->peer, &r->sa);
        free(r);
        return NULL;
    }
    w->remotes[w->n_remotes++] = r;
    return r;
}

static int route_set(struct ulnetd *d, const struct route *nr, uint32_t ip, uint16_t port)
{
    uint64_t job_key = nr->job_key;
    uint32_t rank = nr->rank;
    struct wire *w = d->wire;
    if (!w) return -ENETUNREACH;
    if (port == 0 || (ip == d->wire_ip && port == d->wire_port)) return -EINVAL;
    struct remote *r = remote_of(d, ip, port);
    if (!r) return -ENOMEM;
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].job_key == job_key && w->routes[i].rank == rank) {
            w->routes[i] = *nr;
            w->routes[i].r = r;
            return 0;
        }
    if (w->n_routes == w->cap_routes) {
        unsigned cap = w->cap_routes ? 2 * w->cap_routes : 64;
        struct route *rt = realloc(w->routes, cap * sizeof *rt);
        if (!rt) return -ENOMEM;
        w->routes = rt;
        w->cap_routes = cap;
    }
    w->routes[w->n_routes] = *nr;
    w->routes[w->n_routes++].r = r;
    return 0;
}

int wire_route(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t port)
{
    return route_set(d, &(struct route){.job_key = job_key, .rank = rank}, ip, port);
}

int wire_route_addr(struct ulnetd *d, uint64_t job_key, uint32_t rank, uint32_t ip, uint16_t port,
                    uint32_t client, uint64_t key, uint32_t ep)
{
    if (!client || !key || ep >= ULN_SVC_MAX_EPS) return -EINVAL;
    struct route nr = {.job_key = job_key, .rank = rank, .client = client, .ep = ep, .key = key};
    return route_set(d, &nr, ip, port);
}

static const struct route *route_get(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    const struct wire *w = d->wire;
    for (unsigned i = 0; w && i < w->n_routes; i++)
        if (w->routes[i].job_key == job_key && w->routes[i].rank == rank) return &w->routes[i];
    return NULL;
}

static void sock_in(struct ulnetd *d, struct remote *r, const struct svc_wire *m);
static bool job_here(const struct ulnetd *d, uint64_t job_key);

static struct remote *route_of(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    const struct route *rt = route_get(d, job_key, rank);
    return rt ? rt->r : NULL;
}

bool wire_routes(const struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    return route_of(d, job_key, rank) != NULL;
}

static void hdr_fill(struct wire_hdr *h, const struct uln_rel_pkt *p)
{
    *h = (struct wire_hdr){.magic = WIRE_MAGIC,
                           .version = WIRE_VERSION,
                           .rflags = p->flags,
                           .src_epoch = p->src_epoch,
                           .dst_epoch = p->dst_epoch,
                           .seq = p->seq,
                           .ack = p->fb.ack,
                           .lose = p->fb.lose,
                           .sack_off = p->fb.sack_off,
                           .credit = p->fb.credit,
                           .reorder = p->fb.reorder,
                           .sack = p->fb.sack};
}

/* Hand the batch to the link. What it does not take (its socket is full)
 * counts as lost: rel sends it again, as any loss. */
static void flush(struct ulnetd *d)
{
    struct wire *w = d->wire;
    if (!w->n_batch) return;
    int n = uln_link_send(w->link, w->batch, w->n_batch);
    if (n < 0) n = 0;
    d->c.wire_tx += (unsigned)n;
    w->tx_short += w->n_batch - (unsigned)n;
    w->n_batch = 0;
}

/* buf (kept by the caller until the link has it: the batch is flushed before
 * buf is freed or reused) to r. */
static void send_to(struct ulnetd *d, int peer, const void *buf, size_t len)
{
    struct wire *w = d->wire;
    if (w->n_batch == ULN_LINK_BATCH) flush(d);
    w->batch[w->n_batch++] = (struct uln_link_pkt){
        .peer = peer, .niov = 1, .iov = {{.iov_base = (void *)buf, .iov_len = len}}};
}

static void send_pkt(struct ulnetd *d, struct remote *r, const void *buf, size_t len)
{
    send_to(d, r->peer, buf, len);
}

/* Fill a packet's body (room bytes at b) with chunks of r's waiting
 * messages, from the first on: its length. *last, *off: where the next
 * packet starts. A message that would fit whole in a packet of its own is
 * not cut: it goes whole in the next one. */
static uint32_t pack(struct remote *r, uint8_t *b, uint32_t room, struct outmsg **last,
                     uint32_t *off)
{
    uint32_t used = 0;
    struct outmsg *m = r->out_head;
    uint32_t at = m ? m->off : 0;
    while (m && room - used > sizeof(struct wire_chunk)) {
        uint32_t left = m->len - at, space = room - used - (uint32_t)sizeof(struct wire_chunk);
        if (left > space && used && left <= room - sizeof(struct wire_chunk)) break;
        if (at == 0 && space < sizeof(struct svc_wire)) break; /* FIRST holds the header */
        uint32_t n = left < space ? left : space;
        struct wire_chunk c = {
            .len = n,
            .flags = (uint16_t)((at == 0 ? CHUNK_FIRST : 0) | (at + n == m->len ? CHUNK_LAST : 0))};
        memcpy(b + used, &c, sizeof c);
        memcpy(b + used + sizeof c, m->bytes + at, n);
        used += (uint32_t)sizeof c + n;
        at += n;
        if (at == m->len) {
            m = m->next;
            at = 0;
        }
    }
    *last = m;
    *off = at;
    return used;
}

/* Drop the messages pack() put in packets entirely; the next one from off. */
static void unqueue(struct remote *r, struct outmsg *upto, uint32_t off)
{
    while (r->out_head != upto) {
        struct outmsg *m = r->out_head;
        r->out_head = m->next;
        r->out_bytes -= m->len;
        free(m);
    }
    if (!r->out_head) r->out_tail = NULL;
    if (upto) upto->off = off;
}

static void out_append(struct remote *r, struct outmsg *m)
{
    m->next = NULL;
    if (r->out_tail)
        r->out_tail->next = m;
    else
        r->out_head = m;
    r->out_tail = m;
    r->out_bytes += m->len;
}

/* The attached process of that id, or NULL (it ended). */
static struct client *client_by_id(const struct ulnetd *d, uint32_t id)
{
    for (unsigned i = 0; i < d->n_clients; i++)
        if (d->clients[i] && d->clients[i]->id == id) return d->clients[i];
    return NULL;
}

/* c's messages of cost bytes (FLOW_COST) no longer held here for the wire
 * (in packets now, or dropped): its --ops-mem count. */
static void held_less(struct client *c, uint64_t cost)
{
    if (c) c->wire_held = c->wire_held > cost ? c->wire_held - cost : 0;
}

/* The cost of an outmsg (struct svc_wire + payload) in FLOW_COST bytes. */
static uint64_t out_cost(const struct outmsg *m)
{
    return FLOW_COST(m->len - sizeof(struct svc_wire));
}

/* Move the processes' messages into the packets' list in weighted turns
 * (deficit round robin) while it holds under WIRE_STAGE. A queue found empty
 * leaves the table (its process's next message makes it again). */
static void stage(struct ulnetd *d, struct remote *r)
{
    while (r->qs_bytes && r->out_bytes < WIRE_STAGE) {
        if (r->next_q >= r->n_qs) r->next_q = 0;
        struct outq *q = &r->qs[r->next_q];
        if (!q->head) {
            r->qs[r->next_q] = r->qs[--r->n_qs];
            r->turn_begun = false;
            continue;
        }
        if (!r->turn_begun) {
            q->deficit += (int64_t)q->weight * WIRE_QUANTUM;
            r->turn_begun = true;
        }
        if (q->deficit >= (int64_t)q->head->len) {
            struct outmsg *m = q->head;
            q->head = m->next;
            if (!q->head) q->tail = NULL;
            q->bytes -= m->len;
            r->qs_bytes -= m->len;
            q->deficit -= m->len;
            held_less(client_by_id(d, q->client), out_cost(m));
            out_append(r, m);
            continue;
        }
        r->next_q++;
        r->turn_begun = false;
    }
}

/* Put r's waiting messages into packets while rel's windows take them. */
static void send_out(struct ulnetd *d, struct remote *r, uint64_t now)
{
    struct wire *w = d->wire;
    for (stage(d, r); r->out_head; stage(d, r)) {
        uint32_t seq = uln_rel_tx_next_seq(&r->rel);
        uint32_t i = seq & (WIRE_WINDOW - 1);
        if (r->tx[i] || !uln_rel_tx_ready(&r->rel, now, 1)) return;
        uint8_t *b = pkt_get(w);
        if (!b) return;
        struct outmsg *upto;
        uint32_t off;
        uint32_t len = (uint32_t)sizeof(struct wire_hdr) +
                       pack(r, b + sizeof(struct wire_hdr),
                            w->pkt_max - (uint32_t)sizeof(struct wire_hdr), &upto, &off);
        struct uln_rel_pkt p;
        if (uln_rel_tx_assign(&r->rel, now, len, &p) != 0) {
            pkt_put(w, b);
            return;
        }
        unqueue(r, upto, off);
        hdr_fill((struct wire_hdr *)b, &p);
        r->tx[i] = b;
        r->tx_len[i] = len;
        send_pkt(d, r, b, len);
    }
}

/* m as the last of q. */
static void outq_append(struct remote *r, struct outq *q, struct outmsg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->bytes += m->len;
    r->qs_bytes += m->len;
}

/* One message (copied) as the next of q (NULL: the service's own - GONE,
 * CREDIT - straight into the packets' list). */
static bool queue_msg_of(struct remote *r, struct outq *q, const struct svc_wire *m,
                         const uint8_t *payload)
{
    uint32_t len = (uint32_t)sizeof *m + m->len;
    struct outmsg *o = malloc(sizeof *o + len);
    if (!o) return false;
    o->next = NULL;
    o->len = len;
    o->off = 0;
    memcpy(o->bytes, m, sizeof *m);
    if (m->len && payload) memcpy(o->bytes + sizeof *m, payload, m->len);
    if (q)
        outq_append(r, q, o);
    else
        out_append(r, o);
    return true;
}

static bool queue_msg(struct remote *r, const struct svc_wire *m, const uint8_t *payload)
{
    return queue_msg_of(r, NULL, m, payload);
}

/* The queue of process client (of weight) at r; made if missing. NULL: no
 * memory. */
static struct outq *outq_of(struct remote *r, uint32_t client, uint32_t weight)
{
    for (unsigned i = 0; i < r->n_qs; i++)
        if (r->qs[i].client == client) return &r->qs[i];
    struct outq *qs = realloc(r->qs, (r->n_qs + 1) * sizeof *qs);
    if (!qs) return NULL;
    r->qs = qs;
    qs[r->n_qs] = (struct outq){.client = client, .weight = weight ? weight : 1};
    return &qs[r->n_qs++];
}

/* May q's process queue len more bytes for r? Its share of WIRE_OUT_MAX
 * among the processes with bytes waiting there, by weight; one with none
 * waiting always may (so no message is too large, and a process is never
 * held back by another's backlog). */
static bool share_ok(const struct remote *r, const struct outq *q, uint32_t len)
{
    if (!q->bytes) return true;
    uint64_t wsum = 0;
    for (unsigned i = 0; i < r->n_qs; i++)
        if (r->qs[i].bytes) wsum += r->qs[i].weight;
    return q->bytes + len <= (uint64_t)WIRE_OUT_MAX * q->weight / wsum;
}

static void outqs_free(struct ulnetd *d, struct remote *r)
{
    for (unsigned i = 0; i < r->n_qs; i++)
        while (r->qs[i].head) {
            struct outmsg *m = r->qs[i].head;
            r->qs[i].head = m->next;
            held_less(client_by_id(d, r->qs[i].client), out_cost(m));
            free(m);
        }
    free(r->qs);
    r->qs = NULL;
    r->n_qs = 0;
    r->qs_bytes = 0;
}

/* The held bit of (dst, ch) in c's queue ep's header (proto.h): set or
 * cleared. Seq_cst, the gone bits' way; the process reads it relaxed. */
static void held_set(const struct client *c, uint32_t ep, int ch, uint32_t dst, bool on)
{
    struct queue *q = ep < ULN_SVC_MAX_EPS ? c->queues[ep] : NULL;
    if (!q || dst >= ULN_SVC_GONE_WORDS * 64) return;
    _Atomic uint64_t *w = &q->qhdr->held[ch != 0][dst / 64];
    uint64_t bit = 1ull << (dst % 64);
    if (on)
        atomic_fetch_or(w, bit);
    else
        atomic_fetch_and(w, ~bit);
}

/* Flow f is out of credit: keep m (in order behind what it keeps already)
 * and tell the process to hold that peer back, so the rest of its queue -
 * its other peers, its answers to them - goes on. What it keeps is what
 * the process had posted before it saw the bit: at most its queue's ring,
 * twice that from a process that ignores the bit (then its queue waits). */
static int flow_keep(struct ulnetd *d, const struct client *c, struct flow *f,
                     const struct svc_wire *m, const uint8_t *payload, uint64_t cost)
{
    if (f->held + cost > 2ull * ULN_SVC_RING_BYTES) return -EAGAIN;
    uint32_t len = (uint32_t)sizeof *m + m->len;
    uint8_t *b = malloc(len);
    if (!b) return -EAGAIN;
    memcpy(b, m, sizeof *m);
    if (m->len) memcpy(b + sizeof *m, payload, m->len);
    bool ok = flow_hold(&d->wire->tx, f, b, len, cost);
    free(b);
    if (!ok) return -EAGAIN;
    d->wire->credit_waits++;
    held_set(c, f->ep, f->ch, f->dst, true);
    return 0;
}

/* Credit came back to flow f: send what it keeps while the credit lasts;
 * all sent, its process may post to that peer again (and is woken). */
static void flow_release(struct ulnetd *d, struct flow *f)
{
    while (f->head) {
        struct pending *p = f->head;
        uint64_t cost = FLOW_COST(p->len - sizeof(struct svc_wire));
        if (f->sent != f->credit && f->sent - f->credit + cost > flow_credit(f->weight)) return;
        struct svc_wire m;
        memcpy(&m, p->bytes, sizeof m);
        /* Into its process's out-queue by the id the flow kept, not by
         * looking the process up: one that ended is no longer found, yet
         * its earlier messages still wait in that queue, and this one must
         * not overtake them (it did: netns.svc_stopped saw NAPs out of
         * order from a sender that ended while its flow waited for credit). */
        struct outq *q = outq_of(f->r, f->client, f->weight);
        if (!q || !queue_msg_of(f->r, q, &m, p->bytes + sizeof m)) return;
        f->sent += cost;
        f->held -= cost;
        f->head = p->next;
        if (!f->head) f->tail = NULL;
        free(p);
    }
    struct client *c = find_target(d, f->job_key, f->src);
    if (!c) return;
    held_set(c, f->ep, f->ch, f->dst, false);
    c->wrote = true; /* its doorbell, if it sleeps */
}

/* c's quota of messages held here for the wire (--ops-mem): false, and
 * counted once per time it reaches it, when cost more would pass it. A
 * process holding nothing always may (no message is too large). */
static bool ops_quota_ok(struct ulnetd *d, struct client *c, uint64_t cost)
{
    uint64_t quota = d->ops_mem ? d->ops_mem : ULN_SVC_OPS_MEM_DEFAULT;
    if (!c->wire_held || c->wire_held + cost <= quota) {
        c->at_ops_quota = false;
        return true;
    }
    if (!c->at_ops_quota) {
        c->at_ops_quota = true;
        c->over_ops++;
        d->c.over_ops++;
    }
    return false;
}

static int forward(struct ulnetd *d, struct client *c, uint32_t ep, int ch, const struct uln_msg *m,
                   uint32_t dst, const uint8_t *payload, uint16_t wflags)
{
    const struct route *rt = route_get(d, c->job_key, dst);
    if (!rt) return -EHOSTUNREACH;
    struct remote *r = rt->r;
    if (uln_rel_state(&r->rel) == ULN_REL_DEAD) return -ECONNRESET;
    if (m->len > WIRE_MSG_MAX) return -EMSGSIZE;
    /* Bounded ahead of the window: beyond its share of it the process's
     * queue waits (a queue of many messages still fills packets: the bound
     * is bytes), and only its own. */
    struct outq *q = outq_of(r, c->id, c->weight);
    uint64_t len = sizeof(struct svc_wire) + m->len;
    if (!q || !share_ok(r, q, (uint32_t)len)) return -EAGAIN;
    /* What the service holds for this process, all remotes together: past
     * its quota, its queue waits (the arbiter serves the others). */
    if (!ops_quota_ok(d, c, FLOW_COST(m->len))) return -EAGAIN;
    /* The flow's credit: what the receiving service has room for (flows.h).
     * A flow with nothing outstanding always may send, so no message is
     * too large for it. */
    struct flow *f =
        flow_get(&d->wire->tx, c->job_key, c->rank, dst, (uint16_t)ep, (uint8_t)ch, true);
    if (!f) return -EAGAIN;
    uint64_t cost = FLOW_COST(m->len);
    uint32_t weight = c->weight ? c->weight : 1;
    struct svc_wire w = {.type = m->type,
                         .ch = (uint8_t)ch,
                         .flags = (uint16_t)(m->flags | wflags | weight << WIRE_F_WEIGHT_SHIFT),
                         .len = m->len,
                         .job_key = c->job_key, /* stamped: the attach's, not the process's word */
                         .src_rank = c->rank,
                         .dst_rank = dst,
                         .src_ep = (uint16_t)ep,
                         .dst_ep = (uint16_t)ep};
    if (rt->client) { /* by address: to that client only, stamped with our id for c */
        w.dst_ep = (uint16_t)rt->ep;
        w.aux = (uint32_t)rt->key;
        w.src_id = c->id;
        w.dst_id = rt->client;
        w.src_host = d->host_id;
    }
    f->r = r;
    if (!f->head) { /* what it keeps is one process's (a new life's waits behind) */
        f->client = c->id;
        f->weight = (uint8_t)weight;
    }
    if (f->head || (f->sent != f->credit && f->sent - f->credit + cost > flow_credit(weight))) {
        int rc = flow_keep(d, c, f, &w, payload, cost);
        if (rc == 0) c->wire_held += cost;
        return rc;
    }
    if (!queue_msg_of(r, q, &w, payload)) return -EAGAIN;
    c->wire_held += cost;
    f->sent += cost;
    return 0;
}

int wire_forward(struct ulnetd *d, struct client *c, uint32_t ep, int ch, const struct uln_msg *m,
                 uint32_t dst, const uint8_t *payload)
{
    return forward(d, c, ep, ch, m, dst, payload, 0);
}

int wire_forward_get(struct ulnetd *d, struct client *c, uint32_t ep, const struct uln_msg *m,
                     uint32_t dst, const uint8_t *payload)
{
    return forward(d, c, ep, 1, m, dst, payload, WIRE_F_PLACED);
}

void wire_gone(struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    struct wire *w = d->wire;
    if (!w) return;
    struct svc_wire m = {.type = WIRE_GONE, .job_key = job_key, .src_rank = rank};
    for (unsigned i = 0; i < w->n_remotes; i++) {
        struct remote *r = w->remotes[i];
        bool routed = false; /* only to services where its job has ranks */
        for (unsigned k = 0; k < w->n_routes && !routed; k++)
            routed = w->routes[k].r == r && w->routes[k].job_key == job_key;
        if (routed && !queue_msg(r, &m, NULL))
            fprintf(stderr, "ulnetd: GONE of rank %u not sent (no memory)\n", rank);
    }
}

void wire_gone_id(struct ulnetd *d, uint64_t key, uint32_t id)
{
    struct wire *w = d->wire;
    if (!w) return;
    /* To every service: which ones reach it by address is theirs to know
     * (a process learnt from its first message has no route back here). */
    struct svc_wire m = {.type = WIRE_GONE, .job_key = key, .src_id = id};
    for (unsigned i = 0; i < w->n_remotes; i++)
        if (!queue_msg(w->remotes[i], &m, NULL))
            fprintf(stderr, "ulnetd: GONE of client %u not sent (no memory)\n", id);
}

/* GONE of a process with no job behind r: every peer id that names it. */
static void gone_id(struct ulnetd *d, const struct remote *r, uint64_t key, uint32_t id)
{
    const struct wire *w = d->wire;
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].r == r && w->routes[i].client == id && w->routes[i].key == key) {
            queues_rank_gone(d, w->routes[i].job_key, w->routes[i].rank);
            wire_rank_ended(d, w->routes[i].job_key, w->routes[i].rank, ENDED_REMOTE);
        }
}

uint32_t wire_msg_max(void)
{
    return WIRE_MSG_MAX;
}

/* An answer being written (serve.c), one at a time: queued whole at commit,
 * so its payload is written once, where it leaves from. */
static struct outmsg *answer;
static uint32_t answer_room;

void *wire_answer_reserve(struct ulnetd *d, const struct origin *o, struct client *t, uint32_t len)
{
    struct remote *r = o->peer;
    if (len > WIRE_MSG_MAX) return NULL;
    /* t's own message to r: its out-queue's share and its quota bound it,
     * as its posts are (an answer is work the service does for t - a GET's
     * data is t's memory going out); past them the request waits in its
     * flow, holding back that initiator's flow to t and nothing else.
     * Dead: the answer goes nowhere (commit drops it), its ranks are gone. */
    if (uln_rel_state(&r->rel) != ULN_REL_DEAD) {
        struct outq *q = outq_of(r, t->id, t->weight);
        if (!q || !share_ok(r, q, (uint32_t)sizeof(struct svc_wire) + len) ||
            !ops_quota_ok(d, t, FLOW_COST(len)))
            return NULL;
    }
    if (!answer || answer_room < len) {
        free(answer);
        answer_room = 0;
        if (!(answer = malloc(sizeof *answer + sizeof(struct svc_wire) + len))) return NULL;
        answer_room = len;
    }
    return answer->bytes + sizeof(struct svc_wire);
}

void wire_answer_commit(struct ulnetd *d, const struct origin *o, struct client *t, uint8_t type,
                        uint32_t len)
{
    struct remote *r = o->peer;
    if (uln_rel_state(&r->rel) == ULN_REL_DEAD) return;
    struct outq *q = outq_of(r, t->id, t->weight); /* reserve made it: no stage() since */
    if (!q) return;
    struct svc_wire w = {.type = type,
                         .flags = WIRE_F_ANSWER,
                         .len = len,
                         .job_key = o->job_key,
                         .src_rank = t->rank,
                         .dst_rank = o->rank,
                         .src_ep = (uint16_t)o->ep,
                         .dst_ep = (uint16_t)o->ep};
    if (o->id) { /* by address: from the target (here) to the initiator's id */
        w = (struct svc_wire){.type = type,
                              .flags = WIRE_F_ANSWER,
                              .len = len,
                              .job_key = o->t_key,
                              .src_ep = o->t_ep,
                              .dst_ep = o->id_ep,
                              .aux = (uint32_t)o->job_key,
                              .src_id = o->t_id,
                              .dst_id = o->id,
                              .src_host = d->host_id};
    }
    struct outmsg *m = answer;
    answer = NULL;
    answer_room = 0;
    memcpy(m->bytes, &w, sizeof w);
    *m = (struct outmsg){.len = (uint32_t)sizeof w + len};
    outq_append(r, q, m);
    t->wire_held += FLOW_COST(len); /* stage() takes it off */
    d->c.forwarded++;
}

/* A PUT fragment, GET or atomic from r's side for t: placed, answered or
 * applied here, its answers back over the wire (serve.c). SERVE_ENGINE:
 * for t's engine, through its ring. */
static int serve_remote(struct ulnetd *d, struct remote *r, uint64_t *get_sent, struct client *t,
                        const struct svc_wire *w, const uint8_t *payload)
{
    /* GET pieces: what fits the initiator's ring with room to spare (its
     * size taken as the target's: one job's), unless its service places
     * them in its buffer itself: then large ones, the wire's to cut. */
    uint64_t piece = w->type == ULN_MSG_GET_REQ && (w->flags & WIRE_F_PLACED)
                         ? WIRE_GET_PIECE + sizeof(struct uln_get_resp)
                         : uln_ring_max_payload(t->hdr.ring_bytes) / 4;
    struct origin o = {.peer = r,
                       .job_key = w->job_key,
                       .rank = w->src_rank,
                       .ep = w->src_ep,
                       .get_sent = get_sent,
                       .piece = piece < wire_msg_max() ? piece : wire_msg_max()};
    if (w->src_id) {      /* by address: deliver() made src_rank t's slot for it */
        o.ep = w->dst_ep; /* the rings and hazard slot of (slot, t's endpoint) */
        o.id = w->src_id;
        o.id_ep = w->src_ep;
        o.t_id = t->id;
        o.t_ep = w->dst_ep;
        o.t_key = t->job_key;
    }
    struct uln_msg m = {.type = w->type, .flags = (uint8_t)w->flags, .len = w->len};
    return serve_one(d, &o, t, &m, payload);
}

/* Into its target's ring, or placed for it. False: not now, try again later.
 * get_sent: the progress of a GET at the head of the stream b came in (its
 * flow's, or the host pair's), since a GET is answered in pieces across
 * calls and flows go on in any order between them. */
static bool deliver(struct ulnetd *d, struct remote *r, uint64_t *get_sent, const uint8_t *b,
                    uint32_t len)
{
    struct svc_wire m;
    if (len < sizeof m) return true;
    memcpy(&m, b, sizeof m);
    if (m.len != len - sizeof m) {
        d->c.malformed++;
        return true;
    }
    if (m.type == WIRE_GONE) {
        if (m.src_id) {
            gone_id(d, r, m.job_key, m.src_id);
        } else {
            queues_rank_gone(d, m.job_key, m.src_rank);
            wire_rank_ended(d, m.job_key, m.src_rank, ENDED_REMOTE);
            socks_forget(d, m.job_key, m.src_rank); /* its port may be another's now */
        }
        return true;
    }
    struct client *t;
    uint32_t ring_ep = m.src_ep; /* a job's endpoint i writes our endpoint i */
    if (m.dst_id) {              /* by address (byaddr.c): to that id only, from its slot there */
        t = byaddr_target(d, m.dst_id, m.aux);
        if (!t || m.dst_ep >= t->hdr.max_eps) {
            d->c.unroutable++;
            return true;
        }
        int slot = byaddr_slot(d, t, m.job_key, m.src_ep, m.src_id, m.src_host,
                               r->sa.sin_addr.s_addr, ntohs(r->sa.sin_port));
        if (slot == -EAGAIN) return false;
        if (slot < 0) return true; /* counted: not the sender the slot names */
        m.src_rank = (uint32_t)slot;
        m.dst_rank = 0;
        ring_ep = m.dst_ep;
    } else {
        t = find_target(d, m.job_key, m.dst_rank);
    }
    if (!t || !uln_msg_desc(m.type) || m.ch > 1 || ring_ep >= t->hdr.max_eps ||
        m.src_rank >= t->hdr.size || m.src_rank == m.dst_rank) {
        d->c.unroutable++;
        return true;
    }
    if (m.type == ULN_MSG_GET_RESP) m.flags &= (uint16_t)~ULN_RESP_PLACED; /* ours to say */
    if (m.type == ULN_MSG_GET_RESP && !m.ch) { /* GET data for t: its buffer, if we place it */
        struct uln_msg g = {.type = m.type, .len = m.len};
        int pr = place_resp(d, t, ring_ep, m.src_rank, &g, b + sizeof m);
        if (pr == PLACE_LATER) return false;
        if (pr == PLACE_DONE) return true;
    }
    if (m.len > uln_ring_max_payload(m.ch ? t->hdr.req_ring_bytes : t->hdr.ring_bytes) / 2) {
        d->c.unroutable++;
        return true;
    }
    int rc = serve_remote(d, r, get_sent, t, &m, b + sizeof m);
    if (rc == SERVE_LATER) return false;
    if (rc == SERVE_DONE) return true; /* else its engine's: below */
    if (m.type == ULN_MSG_GET_REQ) m.flags &= (uint16_t)~WIRE_F_PLACED; /* ours, not the engine's */
    if (!feed_put(t, m.src_rank, ring_ep, m.ch, m.type, (uint8_t)m.flags, b + sizeof m, m.len))
        return false;
    d->c.forwarded++;
    return true;
}

static void backlog_add(struct remote *r, const uint8_t *b, uint32_t len)
{
    struct pending *p = malloc(sizeof *p + len);
    if (!p) return; /* lost for good: the target's peer sees a hole (counted by rel) */
    p->next = NULL;
    p->len = len;
    p->owed = 0;
    memcpy(p->bytes, b, len);
    if (r->tail)
        r->tail->next = p;
    else
        r->head = p;
    r->tail = p;
}

/* Bytes of flow f taken: credit goes back once a quarter of it is due (a
 * CREDIT per message would cost the sender's service a wake-up each; what
 * stays unsaid is under a quarter, so a sender never waits on it alone). */
static void flow_taken(struct flow *f, uint64_t cost)
{
    f->taken += cost;
    if (f->taken - f->said < FLOW_CREDIT / 4 || !f->r) return;
    struct svc_wire m = {.type = WIRE_CREDIT,
                         .ch = f->ch,
                         .len = sizeof f->taken,
                         .job_key = f->job_key,
                         .src_rank = f->src,
                         .dst_rank = f->dst,
                         .src_ep = f->ep,
                         .dst_ep = f->ep};
    if (queue_msg(f->r, &m, (const uint8_t *)&f->taken)) f->said = f->taken;
}

/* CREDIT from the receiving service: our flow's bytes it took. */
static void credit_in(struct ulnetd *d, const struct svc_wire *m, const uint8_t *payload)
{
    uint64_t taken;
    if (m->len != sizeof taken) {
        d->c.malformed++;
        return;
    }
    memcpy(&taken, payload, sizeof taken);
    struct flow *f =
        flow_get(&d->wire->tx, m->job_key, m->src_rank, m->dst_rank, m->src_ep, m->ch, false);
    if (!f || taken <= f->credit || taken > f->sent) return;
    f->credit = taken;
    if (f->head) flow_release(d, f);
}

/* A whole message, in order, into its flow: its target's ring now, else the
 * flow's backlog. False: the flow is over its credit (a sending service
 * that does not keep to it): the host pair's backlog takes it, as before
 * credit. */
static bool flow_take(struct ulnetd *d, struct remote *r, const uint8_t *b, uint32_t len)
{
    struct svc_wire m;
    if (len < sizeof m) return deliver(d, r, &r->get_sent, b, len);
    memcpy(&m, b, sizeof m);
    if (m.type == WIRE_CREDIT) {
        if (m.len == len - sizeof m) credit_in(d, &m, b + sizeof m);
        return true;
    }
    if (m.type == WIRE_SOCK) {
        sock_in(d, r, &m);
        return true;
    }
    if (m.type == WIRE_FLOWS_END) { /* after the rank's last message: its flows may go */
        wire_rank_ended(d, m.job_key, m.src_rank, ENDED_FLOWS);
        return true;
    }
    if (m.type == WIRE_GONE || m.len != len - sizeof m) return deliver(d, r, &r->get_sent, b, len);
    struct flow *f =
        flow_get(&d->wire->rx, m.job_key, m.src_rank, m.dst_rank, m.src_ep, m.ch, true);
    if (!f) return deliver(d, r, &r->get_sent, b, len);
    f->r = r;
    unsigned weight = (m.flags & WIRE_F_WEIGHT) >> WIRE_F_WEIGHT_SHIFT;
    if (weight) f->weight = (uint8_t)weight; /* answers carry none: the flow keeps its own */
    uint64_t cost = FLOW_COST(m.len);
    if (!f->head && deliver(d, r, &f->get_sent, b, len)) {
        flow_charge(&d->wire->rx, f, cost); /* straight in is a turn too */
        if (!(m.flags & WIRE_F_ANSWER)) flow_taken(f, cost);
        return true;
    }
    if (f->held + cost > 2 * flow_credit(f->weight)) return false;
    return flow_hold(&d->wire->rx, f, b, len, cost);
}

/* c's socket to r (ask: and r's ranks of its job in turn). */
static void sock_send(struct remote *r, const struct client *c, bool ask)
{
    struct svc_wire m = {.type = WIRE_SOCK,
                         .flags = ask ? WIRE_F_ASK : 0,
                         .job_key = c->job_key,
                         .src_rank = c->rank,
                         .aux = c->sock_port | (uint32_t)c->n_sock_fds << 16};
    if (!queue_msg(r, &m, NULL))
        fprintf(stderr, "ulnetd: the socket of rank %u not told (no memory)\n", c->rank);
}

void wire_sock_tell(struct ulnetd *d, const struct client *c, uint32_t rank)
{
    struct remote *r = d->wire ? route_of(d, c->job_key, rank) : NULL;
    if (r) sock_send(r, c, true);
}

/* WIRE_SOCK from r: kept with r's own address (a service vouches for its
 * ports only), for a job that has ranks here (the others' are no one's
 * business here); asked, our ranks of that job answer. */
static void sock_in(struct ulnetd *d, struct remote *r, const struct svc_wire *m)
{
    if (m->len || !job_here(d, m->job_key)) return;
    socks_learn(d, m->job_key, m->src_rank, r->sa.sin_addr.s_addr, ntohs(r->sa.sin_port),
                (uint16_t)m->aux, (uint16_t)(m->aux >> 16));
    if (!(m->flags & WIRE_F_ASK)) return;
    for (unsigned i = 0; i < d->n_clients; i++) {
        const struct client *c = d->clients[i];
        if (c && c->attached && !c->no_job && c->job_key == m->job_key) sock_send(r, c, false);
    }
}

/* flows_pump's hand: a held message of f into its target, and its credit. */
static bool flow_deliver(void *arg, struct flow *f, const uint8_t *b, uint32_t len)
{
    struct ulnetd *d = arg;
    if (!deliver(d, f->r, &f->get_sent, b, len)) return false;
    struct svc_wire m;
    memcpy(&m, b, sizeof m);
    if (!(m.flags & WIRE_F_ANSWER)) flow_taken(f, FLOW_COST(m.len));
    return true;
}

/* A whole message: into its flow, or behind the host pair's backlog. */
static void complete(struct ulnetd *d, struct remote *r, const uint8_t *b, uint32_t len)
{
    if (!r->head && flow_take(d, r, b, len)) return;
    backlog_add(r, b, len);
}

static void join_drop(struct remote *r)
{
    free(r->join);
    r->join = NULL;
    r->join_len = r->join_have = 0;
}

/* One chunk of a packet, in order. False: malformed (the rest of the packet
 * is not read). */
static bool chunk(struct ulnetd *d, struct remote *r, const struct wire_chunk *c, const uint8_t *b)
{
    bool first = c->flags & CHUNK_FIRST, last = c->flags & CHUNK_LAST;
    if (first) {
        if (r->join) join_drop(r); /* its sender lost the rest in a restart */
        if (last) {
            complete(d, r, b, c->len); /* whole: from the link's buffer */
            return true;
        }
        struct svc_wire m;
        if (c->len < sizeof m) return false;
        memcpy(&m, b, sizeof m);
        if (m.len > WIRE_MSG_MAX || sizeof m + m.len <= c->len) return false;
        r->join_len = (uint32_t)sizeof m + m.len;
        if (!(r->join = malloc(r->join_len))) {
            r->join_len = 0;
            return false;
        }
    } else if (!r->join)
        return false;
    if (c->len > r->join_len - r->join_have) {
        join_drop(r);
        return false;
    }
    memcpy(r->join + r->join_have, b, c->len);
    r->join_have += c->len;
    if (last) {
        bool whole = r->join_have == r->join_len;
        if (whole) complete(d, r, r->join, r->join_len);
        join_drop(r);
        return whole;
    }
    return true;
}

/* The body of data packet (in order): its chunks, and its rel receive
 * buffer given back once its messages are in their rings. */
static void take(struct ulnetd *d, struct remote *r, const uint8_t *b, uint32_t len, uint64_t now)
{
    uint32_t at = 0;
    while (len - at >= sizeof(struct wire_chunk)) {
        struct wire_chunk c;
        memcpy(&c, b + at, sizeof c);
        at += (uint32_t)sizeof c;
        if (c.len > len - at || !chunk(d, r, &c, b + at)) {
            d->c.malformed++;
            break;
        }
        at += c.len;
    }
    if (r->tail)
        r->tail->owed++;
    else
        uln_rel_rx_release(&r->rel, 1, now);
}

static bool backlog_drain(struct ulnetd *d, struct remote *r)
{
    bool moved = false;
    while (r->head && flow_take(d, r, r->head->bytes, r->head->len)) {
        struct pending *p = r->head;
        r->head = p->next;
        if (!r->head) r->tail = NULL;
        if (p->owed) uln_rel_rx_release(&r->rel, p->owed, now_ns());
        free(p);
        moved = true;
    }
    return moved;
}

/* The peer's new life: what the old one held is void, both ways. rel forgot
 * the packets in flight (its restart clears its slots: rel.h), so their
 * buffers go too: one left in r->tx made send_out stop for good once the new
 * sequence, which starts again at our epoch, reached its slot - a packet in
 * flight when the peer died stalled the next job through its new life
 * (netns.svc_seal_restart, now and then). */
static void void_all(struct ulnetd *d, struct remote *r)
{
    flush(d); /* nothing in the batch may point at what is freed */
    for (unsigned i = 0; i < WIRE_WINDOW; i++) {
        free(r->rx[i]);
        r->rx[i] = NULL;
        free(r->tx[i]);
        r->tx[i] = NULL;
    }
    join_drop(r);
}

/* The peer's new life, for our processes: every operation they had in
 * flight to its old life is void (rel.h), so each rank routed there is gone
 * for them - their operations on it end -ECONNRESET now (the gone bits:
 * ops.c fails and counts them), not at their own timeout or never, as the
 * new life answers and rel never finds it silent (remote_dead). What they
 * still had queued for it goes too, and with it the rest of a message half
 * in packets: its first chunks went to the old life, and a LAST chunk
 * alone would be malformed at the new one, taking the rest of its packet
 * with it. A route made after the restart but before its word came here is
 * gone as well: what went on it went to the old life's epoch (stale there).
 * The service's own messages (type WIRE_GONE and up) still go. */
static void old_life_gone(struct ulnetd *d, struct remote *r)
{
    struct wire *w = d->wire;
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].r == r) {
            queues_rank_gone(d, w->routes[i].job_key, w->routes[i].rank);
            wire_rank_ended(d, w->routes[i].job_key, w->routes[i].rank, ENDED_REMOTE);
        }
    socks_forget_at(d, r->sa.sin_addr.s_addr, ntohs(r->sa.sin_port));
    outqs_free(d, r);
    r->turn_begun = false;
    if (r->out_head && r->out_head->off) unqueue(r, r->out_head->next, 0);
    for (struct outmsg **p = &r->out_head; *p;) {
        struct outmsg *m = *p;
        if (m->bytes[0] >= WIRE_GONE) { /* struct svc_wire's type */
            p = &m->next;
            continue;
        }
        *p = m->next;
        r->out_bytes -= m->len;
        free(m);
    }
    r->out_tail = NULL;
    for (struct outmsg *m = r->out_head; m; m = m->next)
        r->out_tail = m;
    d->c.remotes_reset++;
}

/* The flows from our processes over r are about to lose what they kept:
 * their senders may post to those peers again, and hold that much less. */
static void tx_flows_void(struct ulnetd *d, const struct remote *r)
{
    struct wire *w = d->wire;
    for (unsigned i = 0; i < w->tx.nb; i++)
        for (struct flow *f = w->tx.b[i]; f; f = f->next) {
            struct client *c = f->r == r && f->head ? find_target(d, f->job_key, f->src) : NULL;
            if (!c) continue;
            held_set(c, f->ep, f->ch, f->dst, false);
            held_less(c, f->held);
        }
}

static void input(struct ulnetd *d, struct remote *r, const uint8_t *buf, size_t n)
{
    struct wire_hdr h;
    if (n < sizeof h) return;
    memcpy(&h, buf, sizeof h);
    if (h.magic != WIRE_MAGIC || h.version != WIRE_VERSION) {
        d->c.malformed++;
        return;
    }
    d->c.wire_rx++;
    struct uln_rel_pkt p = {.src_epoch = h.src_epoch,
                            .dst_epoch = h.dst_epoch,
                            .seq = h.seq,
                            .flags = h.rflags,
                            .fb = {.ack = h.ack,
                                   .lose = h.lose,
                                   .sack = h.sack,
                                   .sack_off = h.sack_off,
                                   .credit = h.credit,
                                   .reorder = h.reorder}};
    uint64_t now = now_ns();
    const uint8_t *b = buf + sizeof h;
    uint32_t len = (uint32_t)(n - sizeof h);
    switch (uln_rel_rx(&r->rel, &p, now)) {
    case ULN_REL_RX_DELIVER:
        take(d, r, b, len, now);
        break;
    case ULN_REL_RX_HOLD: {
        uint32_t i = h.seq & (WIRE_WINDOW - 1);
        free(r->rx[i]);
        r->rx[i] = malloc(len ? len : 1);
        if (r->rx[i]) memcpy(r->rx[i], b, len);
        r->rx_len[i] = len;
        break;
    }
    case ULN_REL_RX_RESET:
        void_all(d, r);
        old_life_gone(d, r);
        tx_flows_void(d, r);
        flows_forget(&d->wire->tx, r);
        flows_forget(&d->wire->rx, r);
        break;
    default:
        break;
    }
    uint32_t seq;
    while (uln_rel_rx_next(&r->rel, &seq)) {
        uint32_t i = seq & (WIRE_WINDOW - 1);
        if (r->rx[i]) {
            take(d, r, r->rx[i], r->rx_len[i], now);
            free(r->rx[i]);
            r->rx[i] = NULL;
        } else
            uln_rel_rx_release(&r->rel, 1, now);
    }
}

static void remote_free(struct ulnetd *d, unsigned k);

/* Room for one more stranger: under the bound, or made by freeing the
 * oldest one that never carried data (a source that proved its address and
 * then said nothing cannot keep a real service out). */
static bool stranger_room(struct ulnetd *d)
{
    struct wire *w = d->wire;
    if (strangers(w) < WIRE_STRANGERS_MAX) return true;
    for (unsigned k = 0; k < w->n_remotes; k++) {
        struct remote *r = w->remotes[k];
        if (!routed(w, r) && r->rel.stats.rx_data == 0) {
            remote_free(d, k);
            return true;
        }
    }
    return false;
}

/* Answer a source we keep no state for with a hello from our life towards
 * it (epoch e): a service's first contact then addresses e, and a service
 * that knew an earlier life of ours starts over. Through the answering id,
 * pointed at the source for this one packet (flushed at once). */
static void answer_hello(struct ulnetd *d, const struct sockaddr_in *to, int peer, uint32_t e)
{
    struct wire *w = d->wire;
    flush(d); /* what is in the batch goes before the id moves on */
    /* A source the link knows already (--secure: keyed by its HELLO, and
     * only such a peer's datagrams open there) is answered through its own
     * id, which the sealing link can seal to; any other through the spare
     * id pointed at its address. */
    if (peer < 0) {
        if (w->reply_peer < 0 || uln_link_set_peer(w->link, w->reply_peer, to, sizeof *to) != 0)
            return;
        peer = w->reply_peer;
    }
    struct wire_hdr h = {
        .magic = WIRE_MAGIC, .version = WIRE_VERSION, .src_epoch = e, .wflags = WIRE_H_ANSWER};
    send_to(d, peer, &h, sizeof h);
    flush(d); /* h is on the stack */
}

/* The remote a datagram came from (x's link id names it). A source with no
 * remote gets one only when the datagram is addressed to our epoch for its
 * address - it got our answer there, so it is not forging its address - and
 * the strangers (remotes no ROUTE names) are under their bound. Anything
 * else makes no state: counted, and answered with a hello (unless it is an
 * answer itself), so a real service's first packet costs it a round trip. */
static struct remote *source_of(struct ulnetd *d, const struct uln_link_rx *x)
{
    struct wire *w = d->wire;
    if (x->peer >= 0 && (unsigned)x->peer < w->n_by_peer && w->by_peer[x->peer])
        return w->by_peer[x->peer];
    /* Else by its address: the link may know a source we do not (--secure:
     * its HELLO made it a peer there, wire_seal.c). */
    socklen_t len = 0;
    const struct sockaddr_in *from = uln_link_rx_addr(w->link, x->handle, &len);
    if (!from || len != sizeof *from || from->sin_family != AF_INET) return NULL;
    struct wire_hdr h;
    if (x->len < sizeof h) return NULL;
    memcpy(&h, x->buf, sizeof h);
    if (h.magic != WIRE_MAGIC || h.version != WIRE_VERSION) {
        d->c.malformed++;
        return NULL;
    }
    uint32_t ip = from->sin_addr.s_addr;
    uint16_t port = ntohs(from->sin_port);
    struct remote *r = remote_find(w, ip, port);
    if (r) return r;
    uint32_t e = cookie(w, ip, port);
    if (h.dst_epoch == e && stranger_room(d) && (r = remote_of(d, ip, port))) return r;
    w->refused++;
    if (h.dst_epoch != e && !(h.wflags & WIRE_H_ANSWER) && port != 0)
        answer_hello(d, from, x->peer, e);
    return NULL;
}

bool wire_input(struct ulnetd *d)
{
    struct wire *w = d->wire;
    if (!w) return false;
    bool any = false;
    for (int k = 0; k < 4; k++) {
        struct uln_link_rx x[ULN_LINK_BATCH];
        int n = uln_link_recv(w->link, x, ULN_LINK_BATCH);
        for (int i = 0; i < n; i++) {
            struct remote *r = source_of(d, &x[i]);
            if (r) input(d, r, x[i].buf, x[i].len);
            uln_link_rx_release(w->link, x[i].handle);
        }
        if (n <= 0) break;
        any = true;
    }
    flush(d); /* feedback and answers the input made */
    /* What we wrote into sleepers' rings (messages, answers) wakes them
     * now, not at their next timed look. */
    if (any) queues_wake(d);
    return any;
}

/* A remote service stayed silent: every rank routed there is gone for our
 * processes of its job, and what we sent it is void. */
static void remote_dead(struct ulnetd *d, struct remote *r)
{
    struct wire *w = d->wire;
    r->dead_said = true;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &r->sa.sin_addr, ip, sizeof ip);
    fprintf(stderr, "ulnetd: the service at %s:%u is silent: its ranks are gone\n", ip,
            ntohs(r->sa.sin_port));
    for (unsigned i = 0; i < w->n_routes; i++)
        if (w->routes[i].r == r) {
            queues_rank_gone(d, w->routes[i].job_key, w->routes[i].rank);
            wire_rank_ended(d, w->routes[i].job_key, w->routes[i].rank, ENDED_REMOTE);
        }
    socks_forget_at(d, r->sa.sin_addr.s_addr, ntohs(r->sa.sin_port));
    d->c.remotes_dead++;
}

/* Everything r holds, freed; its link id spare (the caller has flushed the
 * batch, which may point at its packets). */
static void remote_release(struct ulnetd *d, struct remote *r)
{
    struct wire *w = d->wire;
    for (unsigned i = 0; i < WIRE_WINDOW; i++) {
        free(r->tx[i]);
        free(r->rx[i]);
    }
    while (r->head) {
        struct pending *p = r->head;
        r->head = p->next;
        free(p);
    }
    unqueue(r, NULL, 0);
    outqs_free(d, r);
    join_drop(r);
    uln_rel_fini(&r->rel);
    peer_spare(w, r->peer, &r->sa);
    free(r);
}

/* Remote k, dead and named by no route (a stranger that fell silent, or a
 * forger that proved its address once), freed with its flows: the
 * service's memory is bounded by the remotes its routes name and
 * WIRE_STRANGERS_MAX others. */
static void remote_free(struct ulnetd *d, unsigned k)
{
    struct wire *w = d->wire;
    struct remote *r = w->remotes[k];
    flush(d);
    tx_flows_void(d, r);
    flows_drop(&w->tx, r);
    flows_drop(&w->rx, r);
    w->remotes[k] = w->remotes[--w->n_remotes];
    socks_forget_at(d, r->sa.sin_addr.s_addr, ntohs(r->sa.sin_port));
    remote_release(d, r);
    w->strangers_out++;
}

void wire_rank_ended(struct ulnetd *d, uint64_t job_key, uint32_t rank, int kind)
{
    struct wire *w = d->wire;
    if (!w) return;
    for (unsigned i = 0; i < w->n_ended; i++)
        if (w->ended[i].job_key == job_key && w->ended[i].rank == rank && w->ended[i].kind == kind)
            return;
    if (w->n_ended == w->cap_ended) {
        unsigned cap = w->cap_ended ? 2 * w->cap_ended : 16;
        struct ended *e = realloc(w->ended, cap * sizeof *e);
        if (!e) return; /* its state stays until the service ends: nothing lost */
        w->ended = e;
        w->cap_ended = cap;
    }
    w->ended[w->n_ended++] =
        (struct ended){.job_key = job_key, .rank = rank, .kind = (uint8_t)kind, .at = now_ns()};
}

/* Routes of job (every rank's, or rank's only) go. */
static void routes_drop(struct wire *w, uint64_t job_key, bool every, uint32_t rank)
{
    for (unsigned i = 0; i < w->n_routes;)
        if (w->routes[i].job_key == job_key && (every || w->routes[i].rank == rank))
            w->routes[i] = w->routes[--w->n_routes];
        else
            i++;
}

/* Does any process of job remain here (attached, or still draining)? */
static bool job_here(const struct ulnetd *d, uint64_t job_key)
{
    for (unsigned i = 0; i < d->n_clients; i++)
        if (d->clients[i] && d->clients[i]->job_key == job_key) return true;
    return false;
}

/* Does a flow of job's rank (from it: src) still keep messages? */
static bool keeps(const struct flows *fs, uint64_t job_key, uint32_t rank, bool src)
{
    for (const struct flow *f = fs->busy; f; f = f->next_busy)
        if (f->head && f->job_key == job_key && (src ? f->src : f->dst) == rank) return true;
    return false;
}

/* A rank here ended: the flows to it go (what they keep was for it). Its
 * own flows out go once they have sent what they keep (what it sent before
 * it ended still goes out), each remote told then (FLOWS_END, after its
 * last message) so that it drops its side; and its job's routes once none
 * of its processes is left. True: done with it. */
static bool ended_here(struct ulnetd *d, struct ended *e, uint64_t now)
{
    struct wire *w = d->wire;
    flows_drop_rank(&w->rx, e->job_key, e->rank, false);
    if (!e->said) {
        bool kept = false;
        for (unsigned i = 0; i < w->tx.nb && !kept; i++)
            for (struct flow *f = w->tx.b[i]; f && !kept; f = f->next)
                kept = f->head && f->job_key == e->job_key && f->src == e->rank;
        if (kept) return false;
        struct svc_wire m = {.type = WIRE_FLOWS_END, .job_key = e->job_key, .src_rank = e->rank};
        for (unsigned k = 0; k < w->n_remotes; k++) {
            struct remote *r = w->remotes[k];
            bool used = false;
            for (unsigned i = 0; i < w->tx.nb && !used; i++)
                for (struct flow *f = w->tx.b[i]; f && !used; f = f->next)
                    used = f->r == r && f->job_key == e->job_key && f->src == e->rank;
            if (used && uln_rel_state(&r->rel) != ULN_REL_DEAD) (void)queue_msg(r, &m, NULL);
        }
        flows_drop_rank(&w->tx, e->job_key, e->rank, true);
        if (!job_here(d, e->job_key)) routes_drop(w, e->job_key, true, 0);
        e->said = true;
        w->ended_freed++; /* its state is gone; the entry lingers for stragglers */
    }
    return now - e->at > WIRE_ENDED_LINGER;
}

/* The state of the ranks that ended goes (flows.h: a flow per rank pair;
 * routes): a service serving processes in turn keeps what its live ones
 * need, not every one it ever served. Here, between passes, as nothing
 * walks the flows or routes now. A rank behind a remote: the flows to it
 * go (a sender held back towards it goes on: its operations there end
 * anyway) and its route; a remote no route names any more is freed once
 * silent (wire_tick). Its flows to us go once its service says nothing
 * more comes (FLOWS_END) and they have handed on what they keep. */
static void ended_sweep(struct ulnetd *d)
{
    struct wire *w = d->wire;
    uint64_t now = now_ns();
    unsigned kept = 0;
    for (unsigned k = 0; k < w->n_ended; k++) {
        struct ended *e = &w->ended[k];
        bool done = true;
        if (e->kind == ENDED_HERE) {
            done = ended_here(d, e, now);
        } else if (e->kind == ENDED_REMOTE) {
            for (unsigned i = 0; i < w->tx.nb; i++)
                for (struct flow *f = w->tx.b[i]; f; f = f->next) {
                    struct client *c = f->head && f->job_key == e->job_key && f->dst == e->rank
                                           ? find_target(d, f->job_key, f->src)
                                           : NULL;
                    if (!c) continue;
                    held_set(c, f->ep, f->ch, f->dst, false);
                    held_less(c, f->held); /* its --ops-mem count: what it kept goes */
                }
            flows_drop_rank(&w->tx, e->job_key, e->rank, false);
            routes_drop(w, e->job_key, false, e->rank);
        } else if (keeps(&w->rx, e->job_key, e->rank, true)) {
            done = false; /* FLOWS_END: what they keep goes into the rings first */
        } else {
            flows_drop_rank(&w->rx, e->job_key, e->rank, true);
        }
        if (done && e->kind != ENDED_HERE)
            w->ended_freed++; /* a rank here counted when its state went */
        else if (!done)
            w->ended[kept++] = *e;
    }
    w->n_ended = kept;
}

uint64_t wire_tick(struct ulnetd *d, bool *moved)
{
    struct wire *w = d->wire;
    uint64_t next = ULN_REL_NEVER, now = now_ns();
    if (w && w->n_ended) ended_sweep(d);
    for (unsigned k = 0; w && k < w->n_remotes; k++) {
        struct remote *r = w->remotes[k];
        uln_rel_tick(&r->rel, now);
        if (uln_rel_state(&r->rel) == ULN_REL_DEAD) {
            if (!routed(w, r))
                remote_free(d, k--); /* no rank behind it; the last one is at k now */
            else if (!r->dead_said)
                remote_dead(d, r);
            continue;
        }
        uint32_t seq;
        bool freed = false;
        while (uln_rel_tx_next_acked(&r->rel, &seq)) {
            uint32_t i = seq & (WIRE_WINDOW - 1);
            if (!freed) flush(d); /* nothing in the batch may point at what is freed */
            freed = true;
            pkt_put(w, r->tx[i]);
            r->tx[i] = NULL;
        }
        struct uln_rel_pkt p;
        while (uln_rel_tx_next_resend(&r->rel, now, &p)) {
            uint32_t i = p.seq & (WIRE_WINDOW - 1);
            if (!r->tx[i]) continue;
            hdr_fill((struct wire_hdr *)r->tx[i], &p); /* fresh feedback, the RETX flag */
            send_pkt(d, r, r->tx[i], r->tx_len[i]);
            d->c.wire_resent++;
        }
        /* What moved into sleepers' rings wakes them now, not at their next
         * timed look. */
        bool drained = backlog_drain(d, r);
        if (k == 0 && flows_pump(&d->wire->rx, flow_deliver, d)) drained = true;
        if (drained) {
            *moved = true;
            queues_wake(d);
        }
        send_out(d, r, now);
        while (uln_rel_ctrl(&r->rel, now, &p)) {
            struct wire_hdr h;
            hdr_fill(&h, &p);
            send_pkt(d, r, &h, sizeof h);
            flush(d); /* h is on the stack */
        }
        uint64_t t = uln_rel_next_deadline(&r->rel);
        if ((r->head || w->rx.busy) && t > now + 1000000)
            t = now + 1000000; /* a full target ring: 1 ms */
        if (t < next) next = t;
    }
    if (w) {
        flush(d);
        uln_link_flush(w->link);
    }
    return next;
}

size_t wire_status(const struct ulnetd *d, char *out, size_t room)
{
    const struct wire *w = d->wire;
    if (!w) return (size_t)snprintf(out, room, "wire: none (no --addr): this host only\n");
    char ip[INET_ADDRSTRLEN];
    struct in_addr a = {.s_addr = d->wire_ip};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    struct uln_link_info li;
    uln_link_info(w->link, &li);
    struct uln_link_stats st;
    uln_link_stats(w->link, &st);
    int n =
        snprintf(out, room,
                 "wire: %s:%u, %u remote services (%u no route names), %u routes; unknown "
                 "sources refused %llu, silent ones freed %llu\n"
                 "link: %s%s%s%s%s (--link %s), mtu %u, packets of %u B%s%s; sent %llu in %llu "
                 "calls (gso runs %llu), received %llu (gro reads %llu), not taken %llu\n",
                 ip, d->wire_port, w->n_remotes, strangers(w), w->n_routes,
                 (unsigned long long)w->refused, (unsigned long long)w->strangers_out, d->link_kind,
                 li.xdp_mode[0] ? " " : "", li.xdp_mode, li.ifname[0] ? " on " : "", li.ifname,
                 d->link, li.mtu, li.payload_max, li.gso ? ", gso" : "", li.gro ? ", gro" : "",
                 (unsigned long long)st.tx_pkts, (unsigned long long)st.tx_calls,
                 (unsigned long long)st.tx_gso_msgs, (unsigned long long)st.rx_pkts,
                 (unsigned long long)st.rx_gro_msgs, (unsigned long long)w->tx_short);
    size_t used = n < 0 ? 0 : (size_t)n < room ? (size_t)n : room;
    uint64_t held = 0;
    for (const struct flow *f = w->rx.busy; f; f = f->next_busy)
        held += f->held;
    if (used < room) {
        n = snprintf(out + used, room - used,
                     "credit: %u flows out, %u in; held for full rings %llu B; waits for credit "
                     "%llu; ranks ended, their flows and routes freed %llu\n",
                     w->tx.n, w->rx.n, (unsigned long long)held,
                     (unsigned long long)w->credit_waits, (unsigned long long)w->ended_freed);
        if (n > 0) used += (size_t)n < room - used ? (size_t)n : room - used;
    }
    if (d->link_why[0] && used < room) {
        n = snprintf(out + used, room - used, "  not xdp: %s\n", d->link_why);
        if (n > 0) used += (size_t)n < room - used ? (size_t)n : room - used;
    }
    for (unsigned i = 0; i < w->n_remotes && used < room; i++) {
        const struct remote *r = w->remotes[i];
        inet_ntop(AF_INET, &r->sa.sin_addr, ip, sizeof ip);
        int st_ = uln_rel_state(&r->rel);
        n = snprintf(
            out + used, room - used,
            "  remote %s:%u %s: sent %llu resent %llu received %llu; held back by the congestion "
            "window %llu, the window %llu, its credit %llu; window cuts %llu\n",
            ip, ntohs(r->sa.sin_port),
            st_ == ULN_REL_OPEN   ? "open"
            : st_ == ULN_REL_DEAD ? "dead"
                                  : "connecting",
            (unsigned long long)r->rel.stats.tx_data, (unsigned long long)r->rel.stats.tx_resend,
            (unsigned long long)r->rel.stats.rx_data, (unsigned long long)r->rel.stats.blk_cwnd,
            (unsigned long long)r->rel.stats.blk_window,
            (unsigned long long)r->rel.stats.blk_credit,
            (unsigned long long)r->rel.stats.cwnd_cuts);
        if (n > 0) used += (size_t)n < room - used ? (size_t)n : room - used;
    }
    return used;
}

void wire_close(struct ulnetd *d)
{
    struct wire *w = d->wire;
    if (!w) return;
    flush(d);
    for (unsigned k = 0; k < w->n_remotes; k++)
        remote_release(d, w->remotes[k]);
    free(w->spare);
    while (w->n_pkt_free)
        free(w->pkt_free[--w->n_pkt_free]);
    flows_free(&w->tx);
    flows_free(&w->rx);
    free(w->ended);
    free(w->remotes);
    free(w->by_peer);
    free(w->routes);
    uln_link_close(w->link);
    free(w);
    d->wire = NULL;
}
