/*
 * flows.h - the wire's per-process credit (docs/service.md, "Credit"): a
 * flow is one (job, source rank, destination rank, endpoint, channel)
 * across a host pair. The sending service lets a flow have at most
 * FLOW_CREDIT bytes of messages (payload + 16) outstanding: sent, and not
 * yet taken by the receiving service into the target's ring (or placed).
 * The receiving service keeps what a target's full ring cannot take in that
 * flow's own backlog - never in the host pair's stream - and gives credit
 * back (a CREDIT message) as it takes bytes. So a stopped or slow process
 * holds back only the flows to it: the stream between the hosts, and every
 * other process's traffic, go on. The receiver's memory per flow is bounded
 * by the credit.
 *
 * Shares (docs/service.md, "Fair shares"): the sending service stamps each
 * message with its process's weight, and the receiving service takes the
 * flows' backlogs by weighted turns (flows_pump: start-time fair queueing),
 * so the flows into one full target get its room - and their credit back -
 * in proportion to their weights, and a credit-bound sender its share.
 */
#ifndef ULNETD_FLOWS_H
#define ULNETD_FLOWS_H

#include <stdbool.h>
#include <stdint.h>

#define FLOW_CREDIT    (2u << 20)              /* outstanding bytes per flow of weight 1 */
#define FLOW_COST(len) ((uint64_t)(len) + 16u) /* a message's bytes in credit */

/* Weights above this get no more credit (a flow's receiver holds up to
 * twice its credit for a stopped target: 32 MiB at most). */
#define FLOW_CREDIT_WMAX 8u

struct remote;

/* The credit of a flow of weight w: FLOW_CREDIT per unit, so flows that
 * are credit-bound through one bottleneck (the same round trip) move bytes
 * by weight, as DRR shares the service's own work; weight 1 keeps what
 * every flow had before weights. */
static inline uint64_t flow_credit(unsigned w)
{
    w = w < 1 ? 1 : w > FLOW_CREDIT_WMAX ? FLOW_CREDIT_WMAX : w;
    return (uint64_t)FLOW_CREDIT * w;
}

struct pending { /* a whole message waiting: struct svc_wire + payload */
    struct pending *next;
    uint32_t len;
    uint32_t owed; /* rel receive buffers to give back once it is taken */
    uint64_t cost; /* in a flow's backlog: its bytes in credit */
    uint8_t bytes[];
};

struct flow {
    struct flow *next;      /* in its hash bucket */
    struct flow *next_busy; /* in flows.busy, while listed */
    uint64_t job_key;
    uint32_t src, dst;
    uint16_t ep;
    uint8_t ch;
    bool listed;
    bool stuck;       /* flows_pump: its head was refused in this call */
    uint8_t weight;   /* its process's weight (receiving side: as stamped), 1..64 */
    struct remote *r; /* the remote service on the other side */
    /* sending side */
    uint64_t sent;   /* bytes sent */
    uint64_t credit; /* bytes the receiver said it took */
    /* The process that posted what it keeps (our id for it; its weight is
     * the flow's): released, those messages join that process's out-queue
     * (wire.c) behind its earlier ones - also after it ended, its queue
     * draining. */
    uint32_t client;
    /* receiving side */
    uint64_t taken;    /* bytes taken into the ring (or placed, or dropped) */
    uint64_t said;     /* taken as of the last CREDIT sent */
    uint64_t held;     /* bytes in the backlog */
    uint64_t get_sent; /* of a GET at its head, served here: bytes answered (serve.c) */
    uint64_t tag;      /* its virtual time: bytes taken / weight (flow_charge) */
    struct pending *head, *tail;
};

struct flows {
    struct flow **b; /* buckets */
    unsigned nb, n;
    struct flow *busy; /* flows with a backlog */
    uint64_t vtime;    /* the tag of the message taken last (flow_charge) */
};

/* flows_pump's hand: take b[0..len) (a held message of f) into its target
 * now, true, or not now, false. */
typedef bool flow_take_fn(void *arg, struct flow *f, const uint8_t *b, uint32_t len);

/* The flow of that key; made (zero) if make, NULL if none or no memory. */
struct flow *flow_get(struct flows *fs, uint64_t job_key, uint32_t src, uint32_t dst, uint16_t ep,
                      uint8_t ch, bool make);
/* Its backlog gets a copy of b[0..len): false if no memory. */
bool flow_hold(struct flows *fs, struct flow *f, const uint8_t *b, uint32_t len, uint64_t cost);
/* f's message of cost bytes is taken (from its backlog or straight in): its
 * turn is paid, cost / weight on its virtual time. */
void flow_charge(struct flows *fs, struct flow *f, uint64_t cost);
/* The backlogs into their targets by weighted turns: always the listed
 * flow of the least virtual time whose target takes its head (one that
 * refuses is passed over for this call, keeping its place). True if any
 * moved. */
bool flows_pump(struct flows *fs, flow_take_fn *take, void *arg);
/* r restarted or died: every flow over it starts again from nothing. */
void flows_forget(struct flows *fs, const struct remote *r);
/* r is freed: every flow over it goes (backlog and entry). */
void flows_drop(struct flows *fs, const struct remote *r);
/* job's rank ended: every flow from it (src) or to it (!src) goes. */
void flows_drop_rank(struct flows *fs, uint64_t job_key, uint32_t rank, bool src);
void flows_free(struct flows *fs);

#endif
