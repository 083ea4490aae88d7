/*
 * fi_death - a peer that dies does not hang its partner: sends to it
 * complete with an error entry (FI_ECONNRESET, ulnet's reason in
 * prov_errno) instead of never. Rank 1 exits right after the first
 * exchange; rank 0 keeps sending eager messages until its sends queue behind
 * the dead peer's full ring, where ulnet finds the peer gone. (A rendezvous
 * send waiting for its ACK is not covered: docs/provider.md, limits.)
 * Usage: ulnrun -n 2 fi_death DIR
 */
#include <errno.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank;
#define OK(call)                                                                                   \
    do {                                                                                           \
        long _r = (long)(call);                                                                    \
        if (_r < 0) {                                                                              \
            fprintf(stderr, "rank %d: %s = %ld (%s)\n", rank, #call, _r, fi_strerror((int)-_r));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    rank = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "0");
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->fabric_attr->prov_name = strdup("ulnet");
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    OK(fi_fabric(info->fabric_attr, &fab, NULL));
    OK(fi_domain(fab, info, &dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    OK(fi_av_open(dom, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(dom, &ca, &cq, NULL));
    OK(fi_endpoint(dom, info, &ep, NULL));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(ep));
    char name[128], path[512], fin[512];
    size_t len = sizeof(name);
    OK(fi_getname(&ep->fid, name, &len));
    snprintf(path, sizeof(path), "%s/n%d.tmp", argv[1], rank);
    snprintf(fin, sizeof(fin), "%s/n%d", argv[1], rank);
    FILE *f = fopen(path, "w");
    fwrite(name, 1, len, f);
    fclose(f);
    rename(path, fin);
    snprintf(path, sizeof(path), "%s/n%d", argv[1], !rank);
    for (;;) {
        f = fopen(path, "r");
        if (f && fread(name, 1, len, f) == len) break;
        if (f) fclose(f);
        usleep(10000);
    }
    fclose(f);
    fi_addr_t peer;
    OK(fi_av_insert(av, name, 1, &peer, 0, NULL));
    static char buf[1 << 20];
    struct fi_cq_tagged_entry e;
    /* one exchange, so both are up */
    OK(fi_trecv(ep, buf, 8, NULL, peer, 1, 0, NULL));
    OK(fi_tsend(ep, buf, 8, NULL, peer, 1, NULL));
    for (int got = 0; got < 2;) {
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n > 0) got++;
    }
    if (rank == 1) _exit(0); /* no goodbye */
    usleep(300000);
    double t0 = now();
    int errors = 0, sent = 0;
    for (int i = 0; errors < 2 && now() - t0 < 60; i++) {
        size_t n = 4000; /* eager: the dead peer's ring fills, the sends queue */
        if (sent < 1000) {
            ssize_t r = fi_tsend(ep, buf, n, NULL, peer, 2, NULL);
            if (r == 0)
                sent++;
            else if (r != -FI_EAGAIN && r != -FI_ECONNRESET)
                OK(r);
        }
        ssize_t k = fi_cq_read(cq, &e, 1);
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(cq, &err, 0));
            printf("rank 0: error completion %s, ulnet: %s\n", fi_strerror(err.err),
                   fi_cq_strerror(cq, err.prov_errno, NULL, NULL, 0));
            if (err.err != FI_ECONNRESET) return 1;
            errors++;
        } else if (k > 0) {
            sent--;
        }
    }
    printf("rank 0: %d error completions after %.1f s\n", errors, now() - t0);
    OK(fi_close(&ep->fid)); /* with sends still queued for the dead peer */
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&dom->fid));
    OK(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return errors ? 0 : 1;
}
