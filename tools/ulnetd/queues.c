/*
 * queues.c - the endpoints' queues to the service, and the way their
 * messages go into other processes' inboxes (docs/service.md).
 *
 * A queue's ring is written by an untrusted process while we read it, so we
 * read it with our own consumer: each header is copied once and checked, and
 * what we give back is counted by that copy, never by a second read of the
 * shared header (the ring.h consumer re-reads `cells` when it gives back,
 * which a hostile producer could change in between). The source of every
 * message is the queue's owner, as the kernel told us at attach: a process
 * names only the destination rank, within its own job.
 *
 * Into a target's inbox we write as its peer of that rank would over shm:
 * the ring for (source rank, endpoint, channel), a life mark first
 * (uln_inbox_feed's rule), its active bit, and its doorbell if it sleeps.
 * Addresses come from the copy of its header taken at attach, never from
 * the live one, which the target could change.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ulnetd.h"
#include "core/doorbell.h"
#include "core/inbox.h"
#include "core/wire.h"

struct feed *feed_of(struct client *t, uint32_t src, uint32_t ep, int ch)
{
    const struct uln_inbox_hdr *h = &t->hdr;
    if (!t->feeds) {
        t->feeds = calloc((size_t)h->size * h->max_eps * 2, sizeof *t->feeds);
        if (!t->feeds) return NULL;
    }
    struct feed *f = &t->feeds[((size_t)src * h->max_eps + ep) * 2 + (size_t)ch];
    if (!f->open) {
        void *ring = uln_inbox_ring_at(t->inbox, h, (int)src, (int)ep, ch);
        uln_ring_prod_init(&f->prod, ring, ch == 0 ? h->ring_bytes : h->req_ring_bytes);
        f->open = true;
    }
    return f;
}

void *feed_reserve(struct client *t, uint32_t src, uint32_t ep, int ch, uint32_t len)
{
    struct feed *f = feed_of(t, src, ep, ch);
    if (!f) return NULL;
    struct uln_inbox_hdr *live = (struct uln_inbox_hdr *)t->inbox;
    /* Acquire: pairs with the owner's release at uln_ep_close (engine.c's
     * out_reserve reads it the same way). */
    uint32_t life = atomic_load_explicit(&live->ep_life[ep], memory_order_acquire);
    if (!f->marked || life != f->life) {
        if (!uln_ring_reserve(&f->prod, 0)) {
            uln_ring_want_room(&f->prod);
            return NULL;
        }
        uln_ring_commit(&f->prod, ULN_MSG_LIFE, 0, 0, life);
        f->life = life;
    }
    void *d = uln_ring_reserve(&f->prod, len);
    /* Its engine writes our queue's eventfd when it gives room back (the
     * svc transport's room op); until then the caller waits. */
    if (!d) uln_ring_want_room(&f->prod);
    return d;
}

void feed_commit(struct client *t, uint32_t src, uint32_t ep, int ch, uint8_t type, uint8_t flags,
                 uint32_t len)
{
    struct feed *f = feed_of(t, src, ep, ch);
    struct uln_inbox_hdr *live = (struct uln_inbox_hdr *)t->inbox;
    uln_ring_commit(&f->prod, type, flags, len, 0);
    if (!f->marked) {
        uln_inbox_mark_active(uln_inbox_active_at(t->inbox, &t->hdr, ch, (int)ep), &live->act_gen,
                              (int)src);
        f->marked = true;
    }
    t->wrote = true;
}

bool feed_put(struct client *t, uint32_t src, uint32_t ep, int ch, uint8_t type, uint8_t flags,
              const uint8_t *payload, uint32_t len)
{
    void *d = feed_reserve(t, src, ep, ch, len);
    if (!d) return false;
    memcpy(d, payload, len);
    feed_commit(t, src, ep, ch, type, flags, len);
    return true;
}

struct client *find_target(struct ulnetd *d, uint64_t job, uint32_t rank)
{
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        if (c && c->attached && c->job_key == job && c->rank == rank) return c;
    }
    return NULL;
}

/* The next message of q, copied and checked: its header in *m and its
 * payload's place, or NULL (none, or a broken producer: q->bad). */
static const uint8_t *queue_peek(struct queue *q, struct uln_msg *m, uint64_t *cells_bytes)
{
    struct uln_ring_cons *c = &q->cons;
    for (;;) {
        struct uln_msg *s = uln_ring_at(c->cells, c->mask, c->read);
        /* Acquire: pairs with the producer's release in commit. */
        if (atomic_load_explicit(&s->stamp, memory_order_acquire) != uln_ring_stamp(c->read))
            return NULL;
        memcpy(m, s, sizeof *m); /* once: what we check is what we use */
        uint64_t room = (c->mask + 1) - (c->read & c->mask);
        uint64_t bytes = (uint64_t)m->cells * ULN_CELL;
        if (m->cells == 0 || bytes > room ||
            (m->type != ULN_MSG_PAD && ULN_MSG_HDR + (uint64_t)m->len > bytes)) {
            q->bad = true;
            return NULL;
        }
        *cells_bytes = bytes;
        if (m->type != ULN_MSG_PAD) return (const uint8_t *)s + ULN_MSG_HDR;
        c->read += bytes;
        queue_give_back(q, bytes);
    }
}

void queue_give_back(struct queue *q, uint64_t bytes)
{
    struct uln_ring_cons *c = &q->cons;
    /* Zero the first word of every cell (ring.h: no stale stamp), by our
     * own count; then hand the space back (release: our reads of it first). */
    for (uint64_t off = 0; off < bytes; off += ULN_CELL)
        atomic_store_explicit(&uln_ring_at(c->cells, c->mask, c->head + off)->stamp, 0,
                              memory_order_relaxed);
    c->head += bytes;
    atomic_store_explicit(&c->ctrl->head, c->head, memory_order_release);
    /* The process found its queue full and waits for room: ring its
     * doorbell with the others (queues_wake). As in uln_ring_release, no
     * fence between the store and this load: the process's sleep is in
     * bounded slices when blocked, which covers the rare miss. */
    if (atomic_load_explicit(&c->ctrl->prod_waiting, memory_order_relaxed)) {
        atomic_store_explicit(&c->ctrl->prod_waiting, 0, memory_order_relaxed);
        q->client->wrote = true;
    }
}

/* The work a GET request asks (its length, bounded: the request is the
 * process's word), 0 if m is no GET request. */
static uint64_t get_work(const struct uln_msg *m, const uint8_t *payload)
{
    struct uln_get_req r;
    if (m->type != ULN_MSG_GET_REQ || m->len < sizeof r) return 0;
    memcpy(&r, payload, sizeof r);
    return r.len < ULN_SVC_RING_BYTES ? r.len : ULN_SVC_RING_BYTES;
}

uint64_t queue_step(struct ulnetd *d, struct client *c, struct queue *q, bool *blocked)
{
    struct uln_msg m;
    uint64_t bytes, work = 0;
    const uint8_t *payload;
    for (;;) {
        if (q->bad || !(payload = queue_peek(q, &m, &bytes))) break;
        uint32_t dst = m.aux & ~ULN_SVC_AUX_CH;
        int ch = (m.aux & ULN_SVC_AUX_CH) != 0;
        struct client *t = dst < c->size ? find_target(d, c->job_key, dst) : NULL;
        /* A GET request with its destination (place.c): the destination is
         * ours to keep, never passed on. */
        struct uln_get_dst gd;
        bool with_dst =
            m.type == ULN_MSG_GET_REQ && ch && m.len == sizeof(struct uln_get_req) + sizeof gd;
        if (with_dst) {
            memcpy(&gd, payload + sizeof(struct uln_get_req), sizeof gd);
            m.len = sizeof(struct uln_get_req);
        }
        /* Only a service says a GET's data is placed (its engine believes
         * it from us alone): never a process of another's answer. */
        if (m.type == ULN_MSG_GET_RESP) m.flags &= (uint8_t)~ULN_RESP_PLACED;
        if (!t && dst < c->size && dst != c->rank && uln_msg_desc(m.type) &&
            wire_routes(d, c->job_key, dst)) {
            /* On another host: its service places it (wire.c), and ours
             * places the GET data that comes back, if it may. */
            struct uln_get_req gr;
            if (with_dst) memcpy(&gr, payload, sizeof gr);
            bool placed = with_dst && place_record(d, c, q, dst, &gr, &gd);
            int r = placed ? wire_forward_get(d, c, q->ep, &m, dst, payload)
                           : wire_forward(d, c, q->ep, ch, &m, dst, payload);
            if (placed && r && r != -EAGAIN) place_cancel(q, dst, gr.op_id);
            if (r == -EAGAIN) {
                *blocked = true;
                break;
            }
            if (r)
                d->c.unroutable++;
            else
                d->c.forwarded++;
        } else if (!uln_msg_desc(m.type) || !t || q->ep >= t->hdr.max_eps ||
                   c->rank >= t->hdr.size ||
                   m.len >
                       uln_ring_max_payload(ch ? t->hdr.req_ring_bytes : t->hdr.ring_bytes) / 2) {
            d->c.unroutable++; /* counted; the sender's own business */
        } else {
            /* PUT, GET and atomics placed, answered, applied here, the
             * target's CPU not needed; GET pieces fit the initiator's ring
             * with room to spare. */
            struct origin o = {.c = c,
                               .job_key = c->job_key,
                               .rank = c->rank,
                               .ep = q->ep,
                               .get_sent = &q->get_sent,
                               .piece = uln_ring_max_payload(c->hdr.ring_bytes) / 4};
            if (with_dst && c->attached) { /* its data placed by us: in large pieces */
                struct uln_get_req gr;
                memcpy(&gr, payload, sizeof gr);
                o.placed = place_record(d, c, q, dst, &gr, &gd);
                if (o.placed) o.piece = PLACE_PIECE + sizeof(struct uln_get_resp);
            }
            uint64_t sent = q->get_sent;
            int r = c->attached ? serve_one(d, &o, t, &m, payload) : SERVE_ENGINE;
            if (r == SERVE_LATER) {
                /* A GET answered in part until c's ring filled counts what
                 * it answered (c is woken to drain it). */
                work = q->get_sent > sent ? q->get_sent - sent : 0;
                *blocked = true;
                break;
            }
            /* A GET's data from the target's engine, for a GET of t's we
             * place (t's service is us: the request came through here). */
            int pr = m.type == ULN_MSG_GET_RESP && !ch && t->attached
                         ? place_resp(d, t, q->ep, c->rank, &m, payload)
                         : PLACE_NONE;
            if (pr == PLACE_LATER) {
                *blocked = true;
                break;
            }
            if (pr == PLACE_DONE) {
                d->c.forwarded++;
            } else if (r == SERVE_ENGINE) {
                if (!feed_put(t, c->rank, q->ep, ch, m.type, m.flags, payload, m.len)) {
                    *blocked = true; /* its ring is full: this queue waits, no other */
                    break;
                }
                d->c.forwarded++;
            } else {
                uint64_t asked = get_work(&m, payload);
                work = asked > sent ? asked - sent : 0;
            }
        }
        q->cons.read += bytes;
        queue_give_back(q, bytes);
        work += bytes;
        break;
    }
    if (q->bad && !q->bad_said) {
        q->bad_said = true;
        d->c.malformed++;
        fprintf(stderr, "ulnetd: pid %d: endpoint %u's queue is broken: not read any more\n",
                (int)c->pid, q->ep);
    }
    return work;
}

/* Ring the doorbells of the targets we wrote to, if they sleep. */
void queues_wake(struct ulnetd *d)
{
    /* Full fence: our ring stores before the loads of sleepers, pairing with
     * the fence in uln_doorbell_sleep_begin (doorbell.c's Dekker). */
    atomic_thread_fence(memory_order_seq_cst);
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *t = d->clients[i];
        if (!t || !t->wrote || !t->attached) continue; /* an ended one: nobody to wake */
        t->wrote = false;
        struct uln_inbox_hdr *live = (struct uln_inbox_hdr *)t->inbox;
        if (!atomic_load_explicit(&live->sleepers, memory_order_relaxed)) continue;
        struct uln_bell_addr a;
        uln_doorbell_addr(&a, t->job_key, (int)t->rank);
        char b = 1;
        (void)!sendto(d->bell_fd, &b, 1, MSG_DONTWAIT, (const struct sockaddr *)&a.sa, a.len);
    }
}

bool queues_empty(const struct client *c)
{
    for (unsigned e = 0; e < ULN_SVC_MAX_EPS; e++) {
        const struct queue *q = c->queues[e];
        if (!q || q->bad) continue;
        const struct uln_msg *s = uln_ring_at(q->cons.cells, q->cons.mask, q->cons.read);
        /* Acquire: as queue_peek's. */
        if (atomic_load_explicit(&s->stamp, memory_order_acquire) == uln_ring_stamp(q->cons.read))
            return false;
    }
    return true;
}

bool queues_pump(struct ulnetd *d, bool *blocked)
{
    *blocked = false;
    bool moved = arbiter_round(d, blocked);
    if (moved) queues_wake(d);
    clients_reap(d);
    return moved;
}

void queues_sleeping(struct ulnetd *d, uint32_t v)
{
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        for (unsigned e = 0; c && e < ULN_SVC_MAX_EPS; e++)
            if (c->queues[e])
                atomic_store_explicit(&c->queues[e]->qhdr->svc_sleeping, v, memory_order_relaxed);
    }
    /* Seq_cst fence: the store above before our last look at the rings
     * (queues_pump after this), pairing with the process's fence in
     * uln_svc_kick between its message and its load of svc_sleeping. */
    atomic_thread_fence(memory_order_seq_cst);
}

void queues_rank_gone(struct ulnetd *d, uint64_t job_key, uint32_t rank)
{
    if (rank >= ULN_SVC_GONE_WORDS * 64) return;
    for (unsigned i = 0; i < d->n_clients; i++) {
        struct client *c = d->clients[i];
        if (!c || c->rank == rank || !c->attached || c->job_key != job_key) continue;
        for (unsigned e = 0; e < ULN_SVC_MAX_EPS; e++) {
            struct queue *q = c->queues[e];
            if (!q) continue;
            /* The bit, then the generation: seq_cst RMWs, so a process
             * that sees the new generation (acquire) sees the bit. */
            atomic_fetch_or(&q->qhdr->gone[rank / 64], 1ull << (rank % 64));
            atomic_fetch_add(&q->qhdr->gone_gen, 1);
        }
        /* Its GETs end at c (-ECONNRESET) and their buffers are c's again:
         * nothing is placed there any more. */
        place_forget_rank(c, rank);
        c->wrote = true; /* its doorbell, if it sleeps: its operations end now */
    }
    queues_wake(d);
}

void queues_peer_gone(struct ulnetd *d, const struct client *gone)
{
    if (gone->no_job) { /* its peers here reach it through shm, not us */
        wire_gone_id(d, gone->job_key, gone->id);
        return;
    }
    queues_rank_gone(d, gone->job_key, gone->rank);
    wire_gone(d, gone->job_key, gone->rank);
}

void queue_free(struct ulnetd *d, struct queue *q)
{
    place_free(q);
    epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, q->bell, NULL);
    close(q->bell);
    munmap(q->map, q->bytes);
    free(q);
}

/* ULN_SVC_QUEUE: the endpoint's queue memfd and its eventfd. 0, or -errno
 * and why. */
int queue_add(struct ulnetd *d, struct client *c, const struct uln_svc_queue *m, int memfd,
              int bell, const char **why)
{
    struct stat st;
    *why = "";
    if (!c->attached || m->ep >= c->hdr.max_eps || m->ep >= ULN_SVC_MAX_EPS) {
        *why = "a queue for no endpoint of an attached process";
        return -EINVAL;
    }
    int seals = fcntl(memfd, F_GET_SEALS);
    if (m->ring_bytes != ULN_SVC_RING_BYTES || m->bytes != ULN_SVC_QUEUE_BYTES(m->ring_bytes) ||
        fstat(memfd, &st) != 0 || (uint64_t)st.st_size != m->bytes || seals < 0 ||
        !(seals & F_SEAL_SHRINK)) {
        *why = "the queue is not a sealed memory object of the size said";
        return -EINVAL;
    }
    /* The quota counts what stays mapped here: an endpoint's new life
     * replaces its earlier queue, whose memory then goes. */
    uint64_t replaced = c->queues[m->ep] ? c->queues[m->ep]->bytes : 0;
    uint64_t quota = d->queue_mem ? d->queue_mem : ULN_SVC_QUEUE_MEM_DEFAULT;
    if (c->queue_bytes - replaced + m->bytes > quota) {
        c->over_quota++;
        d->c.over_quota++;
        *why = "its queues' memory would pass the quota (--queue-mem)";
        return -EDQUOT;
    }
    uint64_t v;
    if (read(bell, &v, sizeof v) < 0 && errno != EAGAIN) {
        *why = "the queue's doorbell is not an eventfd";
        return -EINVAL;
    }
    struct queue *q = calloc(1, sizeof *q);
    if (!q) return -ENOMEM;
    q->kind = KIND_QUEUE;
    q->client = c;
    q->ep = m->ep;
    q->bytes = m->bytes;
    q->map = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (q->map == MAP_FAILED) {
        free(q);
        *why = "cannot map the queue";
        return -ENOMEM;
    }
    q->qhdr = (struct uln_svc_queue_hdr *)q->map;
    uln_ring_cons_init(&q->cons, q->map + 4096, m->ring_bytes);
    q->bell = fcntl(bell, F_DUPFD_CLOEXEC, 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
    if (q->bell < 0 || epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, q->bell, &ev) != 0) {
        if (q->bell >= 0) close(q->bell);
        munmap(q->map, q->bytes);
        free(q);
        *why = "cannot watch the queue's doorbell";
        return -ENOMEM;
    }
    /* A new life of the endpoint index: its earlier queue goes (what it
     * still held is the earlier life's, which the target refuses anyway). */
    if (c->queues[m->ep]) {
        struct queue *old = c->queues[m->ep];
        epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, old->bell, NULL);
        old->next_retired = c->retired;
        c->retired = old;
        c->queue_bytes -= old->bytes;
    }
    c->queues[m->ep] = q;
    c->queue_bytes += q->bytes;
    return 0;
}
