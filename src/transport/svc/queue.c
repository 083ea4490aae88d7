/*
 * queue.c - an endpoint's queue to the service: made at uln_ep_open (a
 * sealed memfd and an eventfd, passed to the service), written by the
 * engine's sends, and the service woken when it sleeps.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/svc/priv.h"

static struct svc_ep *svc_ep(struct uln_ep *ep)
{
    return ep->tp_ep[ULN_TPID_SVC];
}

static void queue_free(struct svc_ep *q)
{
    if (q->map) munmap(q->map, ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES));
    if (q->memfd >= 0) close(q->memfd);
    if (q->bell >= 0) close(q->bell);
    free(q);
}

int uln_svc_ep_open(struct uln_ep *ep)
{
    struct uln_ctx *ctx = ep->ctx;
    if (!ctx->svc) return 0; /* not attached: this transport reaches nobody */
    struct svc_ep *q = calloc(1, sizeof *q);
    if (!q) return -ENOMEM;
    q->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    q->memfd = memfd_create("ulnet-svc-queue", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    size_t bytes = ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES);
    int rc = 0;
    /* Sealed at its size: the service maps it and must not take SIGBUS. */
    if (q->bell < 0 || q->memfd < 0 || ftruncate(q->memfd, (off_t)bytes) != 0 ||
        fcntl(q->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        rc = -errno;
    if (!rc) {
        q->map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q->memfd, 0);
        if (q->map == MAP_FAILED) q->map = NULL, rc = -errno;
    }
    if (rc) {
        queue_free(q);
        return rc;
    }
    q->qhdr = (struct uln_svc_queue_hdr *)q->map;
    q->qhdr->magic = ULN_SVC_QUEUE_MAGIC;
    q->qhdr->ring_bytes = ULN_SVC_RING_BYTES;
    uln_ring_prod_init(&q->tx, q->map + 4096, ULN_SVC_RING_BYTES);
    struct uln_svc_queue m = {
        .ep = (uint32_t)ep->index, .ring_bytes = ULN_SVC_RING_BYTES, .bytes = bytes};
    uln_svc_hdr_init(&m.h, ULN_SVC_QUEUE, sizeof m, 0);
    int fds[2] = {q->memfd, q->bell};
    struct uln_svc_hdr ok;
    rc = uln_svc_request(ctx, &m, sizeof m, fds, 2, ULN_SVC_QUEUE_OK, &ok, sizeof ok);
    if (rc) {
        queue_free(q);
        return rc;
    }
    ep->tp_ep[ULN_TPID_SVC] = q;
    return 0;
}

void uln_svc_ep_close(struct uln_ep *ep)
{
    struct svc_ep *q = svc_ep(ep);
    if (!q) return;
    ep->tp_ep[ULN_TPID_SVC] = NULL;
    /* The service keeps its own mapping until it has read what is left; the
     * next life of this index makes a new queue (the service replaces the
     * old one when it is drained). */
    queue_free(q);
}

/* The service holds this peer back (proto.h's held bits). */
static bool peer_held(const struct svc_ep *q, int peer, int ch)
{
    return peer < (int)(ULN_SVC_GONE_WORDS * 64) &&
           (atomic_load_explicit(&q->qhdr->held[ch != 0][peer / 64], memory_order_relaxed) >>
                (peer % 64) &
            1);
}

void *uln_svc_reserve(struct uln_ep *ep, int peer, int ch, uint32_t len)
{
    struct svc_ep *q = svc_ep(ep);
    void *d = q && !peer_held(q, peer, ch) ? uln_ring_reserve(&q->tx, len) : NULL;
    if (!d) {
        ep->blocked = true;                /* the service drains it: try on a later pass */
        if (q) uln_ring_want_room(&q->tx); /* ... and rings our doorbell when it has */
    }
    return d;
}

void uln_svc_commit(struct uln_ep *ep, int peer, int ch, uint8_t type, uint8_t flags, uint32_t len)
{
    struct svc_ep *q = svc_ep(ep);
    uln_ring_commit(&q->tx, type, flags, len, (uint32_t)peer | (ch ? ULN_SVC_AUX_CH : 0));
    q->wrote = true;
    q->carried = true;
}

bool uln_svc_nap(struct uln_ep *ep, int peer, const struct iovec *iov, int iovcnt, uint32_t len)
{
    uint8_t *d = uln_svc_reserve(ep, peer, 0, len);
    if (!d) return false;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(d, iov[i].iov_base, iov[i].iov_len);
        d += iov[i].iov_len;
    }
    uln_svc_commit(ep, peer, 0, ULN_MSG_NAP, 0, len);
    uln_svc_kick(ep, peer); /* the engine kicks after commits, not after send_nap */
    return true;
}

/* After the engine wrote: wake the service if it sleeps. Seq_cst fence
 * between our stamps and the load of svc_sleeping, pairing with the
 * service's fence between its store of svc_sleeping and its last look at
 * the ring (Dekker): either it sees our message, or we see it asleep. */
void uln_svc_kick(struct uln_ep *ep, int peer)
{
    (void)peer;
    struct svc_ep *q = svc_ep(ep);
    if (!q || !q->wrote) return;
    q->wrote = false;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&q->qhdr->svc_sleeping, memory_order_relaxed)) {
        uint64_t one = 1;
        (void)!write(q->bell, &one, sizeof one);
    }
}
