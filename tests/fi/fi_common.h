/*
 * fi_common.h - the set-up and tear-down every fi_* test program repeats: two
 * ranks under ulnrun, one RDM endpoint each with an AV and a tagged CQ, names
 * exchanged through files in a directory (ulnet's names are opaque: a test
 * never builds one). What differs on purpose between programs (caps, progress,
 * threading, AV type, CQ size, a counter) is a parameter or a field the
 * program sets; everything else is here once, so each program keeps only what
 * its test is about.
 */
#ifndef ULN_FI_COMMON_H
#define ULN_FI_COMMON_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* This process's rank (ULN_RANK, set by ulnrun); fic_open sets it. */
static int rank;

/* A soft check: say where, count it, go on; a program's exit status says
 * whether any failed. */
static int failures __attribute__((unused));
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__, __LINE__, #c);   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* A libfabric call that must not fail: say where and why, end the rank (ulnrun
 * then ends the job instead of leaving the peer waiting). */
#define OK(call)                                                                                   \
    do {                                                                                           \
        long _r = (long)(call);                                                                    \
        if (_r < 0) {                                                                              \
            fprintf(stderr, "rank %d: %s:%d: %s = %ld (%s)\n", rank, __FILE__, __LINE__, #call,    \
                    _r, fi_strerror((int)-_r));                                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct fic {
    struct fi_info *hints, *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_cntr *cntr;    /* optional: bound by fic_enable, closed by fic_close if set */
    enum fi_wait_obj cq_wait; /* the CQ's wait object: FI_WAIT_NONE (0) unless set */
    struct fid_ep *ep;
    fi_addr_t peer;
    char name[256], pname[256]; /* this rank's name and the peer's, namelen bytes each */
    size_t namelen;
};

static inline double fic_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Hints for an RDM endpoint with caps from provider prov (NULL: ulnet); the
 * caller adds whatever its test is about. */
static inline struct fi_info *fic_hints(uint64_t caps, const char *prov)
{
    struct fi_info *h = fi_allocinfo();
    if (!h) exit(1);
    h->ep_attr->type = FI_EP_RDM;
    h->caps = caps;
    h->fabric_attr->prov_name = strdup(prov ? prov : "ulnet");
    return h;
}

/* fi_getinfo with hints (kept, freed by fic_close), then fabric, domain, AV,
 * tagged CQ (cq_size 0: the provider's default; f->cq_wait its wait object)
 * and an endpoint, not yet bound: a test may look at it first. */
static inline void fic_open(struct fic *f, struct fi_info *hints, enum fi_av_type av_type,
                            size_t cq_size)
{
    rank = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "0");
    f->hints = hints;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &f->info));
    OK(fi_fabric(f->info->fabric_attr, &f->fab, NULL));
    OK(fi_domain(f->fab, f->info, &f->dom, NULL));
    struct fi_av_attr aa = {.type = av_type};
    OK(fi_av_open(f->dom, &aa, &f->av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = cq_size, .wait_obj = f->cq_wait};
    OK(fi_cq_open(f->dom, &ca, &f->cq, NULL));
    OK(fi_endpoint(f->dom, f->info, &f->ep, NULL));
}

/* Bind the AV, the CQ for both directions and the counter if any; enable. */
static inline void fic_enable(struct fic *f)
{
    OK(fi_ep_bind(f->ep, &f->av->fid, 0));
    OK(fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV));
    if (f->cntr) OK(fi_ep_bind(f->ep, &f->cntr->fid, FI_SEND | FI_RECV));
    OK(fi_enable(f->ep));
}

/* Publish this rank's name as DIR/n<rank> (written aside, then renamed: the
 * peer never reads half a name), wait for the peer's, insert it as f->peer.
 * No deadline of its own: ulnrun's --timeout ends a job whose peer never
 * comes. */
static inline void fic_exchange(struct fic *f, const char *dir)
{
    char path[512], fin[512];
    f->namelen = sizeof(f->name);
    OK(fi_getname(&f->ep->fid, f->name, &f->namelen));
    snprintf(path, sizeof(path), "%s/n%d.tmp", dir, rank);
    snprintf(fin, sizeof(fin), "%s/n%d", dir, rank);
    FILE *fp = fopen(path, "w");
    if (!fp || fwrite(f->name, 1, f->namelen, fp) != f->namelen || fclose(fp)) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
        exit(1);
    }
    OK(rename(path, fin));
    snprintf(path, sizeof(path), "%s/n%d", dir, !rank);
    for (;;) {
        fp = fopen(path, "r");
        if (fp) {
            size_t n = fread(f->pname, 1, sizeof(f->pname), fp);
            fclose(fp);
            if (n == f->namelen) break;
        }
        usleep(10000);
    }
    OK(fi_av_insert(f->av, f->pname, 1, &f->peer, 0, NULL));
}

/* Read one completion into *e, polling until fic_now() reaches deadline: 1,
 * or -FI_EAVAIL (an error entry waits: fi_cq_readerr), another -errno of
 * fi_cq_read, or -FI_ETIMEDOUT. A deadline, not a span: a test may start the
 * clock before the operation it waits for. */
static inline ssize_t fic_wait(struct fic *f, struct fi_cq_tagged_entry *e, double deadline)
{
    for (;;) {
        ssize_t n = fi_cq_read(f->cq, e, 1);
        if (n != -FI_EAGAIN) return n;
        if (fic_now() >= deadline) return -FI_ETIMEDOUT;
    }
}

/* For programs that open several endpoints in one process: a fabric and a
 * domain from an info, and an AV of attributes aa (NULL: none). */
struct fic_dom {
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
};
static inline void fic_dom_open(struct fic_dom *d, struct fi_info *fi, struct fi_av_attr *aa)
{
    OK(fi_fabric(fi->fabric_attr, &d->fab, NULL));
    OK(fi_domain(d->fab, fi, &d->dom, NULL));
    d->av = NULL;
    if (aa) OK(fi_av_open(d->dom, aa, &d->av, NULL));
}
static inline void fic_dom_close(struct fic_dom *d)
{
    if (d->av) OK(fi_close(&d->av->fid));
    OK(fi_close(&d->dom->fid));
    OK(fi_close(&d->fab->fid));
}

/* An endpoint with a CQ of its own for both directions (cq NULL: tagged, no
 * wait object), bound to what is given of the rest, then enabled. */
struct fic_ep_cfg {
    struct fi_cq_attr *cq;
    struct fid_av *av;
    struct fid_eq *eq;
    struct fid_cntr *cntr; /* bound with cntr_flags */
    uint64_t cntr_flags;
    struct fid *shared[2]; /* shared contexts (fi_stx_context, fi_srx_context) */
};
static inline void fic_ep_open(struct fid_domain *dom, struct fi_info *fi,
                               const struct fic_ep_cfg *c, struct fid_ep **ep, struct fid_cq **cq)
{
    struct fi_cq_attr tagged = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, c->cq ? c->cq : &tagged, cq, NULL));
    OK(fi_endpoint(dom, fi, ep, NULL));
    OK(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
    if (c->av) OK(fi_ep_bind(*ep, &c->av->fid, 0));
    if (c->eq) OK(fi_ep_bind(*ep, &c->eq->fid, 0));
    if (c->cntr) OK(fi_ep_bind(*ep, &c->cntr->fid, c->cntr_flags));
    for (int i = 0; i < 2; i++)
        if (c->shared[i]) OK(fi_ep_bind(*ep, c->shared[i], 0));
    OK(fi_enable(*ep));
}
static inline void fic_ep_close(struct fid_ep *ep, struct fid_cq *cq)
{
    OK(fi_close(&ep->fid));
    OK(fi_close(&cq->fid));
}
/* ep's name into av: its address there. */
static inline fi_addr_t fic_ep_insert(struct fid_ep *ep, struct fid_av *av)
{
    char name[64];
    size_t nl = sizeof(name);
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    OK(fi_getname(&ep->fid, name, &nl));
    CHECK(fi_av_insert(av, name, 1, &a, 0, NULL) == 1);
    return a;
}

/* Close everything fic_open (and the test: f->cntr) opened, in reverse. */
static inline void fic_close(struct fic *f)
{
    OK(fi_close(&f->ep->fid));
    if (f->cntr) OK(fi_close(&f->cntr->fid));
    OK(fi_close(&f->cq->fid));
    OK(fi_close(&f->av->fid));
    OK(fi_close(&f->dom->fid));
    OK(fi_close(&f->fab->fid));
    fi_freeinfo(f->info);
    fi_freeinfo(f->hints);
}

#endif
