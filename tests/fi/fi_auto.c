/*
 * fi_auto - FI_PROGRESS_AUTO: data moves while the application is away.
 * Rank 0 posts a 4 MiB receive and sleeps 4 s without calling libfabric;
 * rank 1 sends it (rendezvous: request, GETs, ACK all need rank 0's provider
 * to act) and must see its send complete within 3 s, while rank 0 sleeps.
 * Then rank 0 checks every byte.
 * Usage: ulnrun -n 2 fi_auto DIR
 */
#include <errno.h>
#include <stdint.h>
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

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    rank = atoi(getenv("ULN_RANK") ? getenv("ULN_RANK") : "0");
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup("ulnet");
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    if (info->domain_attr->data_progress != FI_PROGRESS_AUTO) return 1;
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
    enum { LEN = 4 << 20 };
    uint8_t *buf = malloc(LEN);
    struct fi_cq_tagged_entry e;
    ssize_t n;
    if (rank == 0) {
        memset(buf, 0, LEN);
        OK(fi_trecv(ep, buf, LEN, NULL, peer, 9, 0, NULL));
        sleep(4); /* away from libfabric: only the provider's thread can act */
        while ((n = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
            continue;
        OK(n);
        if (e.len != LEN) return 1;
        for (size_t k = 0; k < LEN; k++)
            if (buf[k] != (uint8_t)(k * 3 + 1)) {
                fprintf(stderr, "rank 0: byte %zu wrong\n", k);
                return 1;
            }
    } else {
        for (size_t k = 0; k < LEN; k++)
            buf[k] = (uint8_t)(k * 3 + 1);
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        OK(fi_tsend(ep, buf, LEN, NULL, peer, 9, NULL));
        /* The send completes on rank 0's ACK, after rank 0's GETs: all of it
         * while rank 0 sleeps, if its provider progresses by itself. */
        for (;;) {
            n = fi_cq_read(cq, &e, 1);
            if (n != -FI_EAGAIN) break;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec >= 3) {
                fprintf(stderr, "rank 1: send not complete after 3 s: no progress at rank 0\n");
                return 1;
            }
        }
        OK(n);
        printf("rank 1: 4 MiB sent while the receiver slept\n");
    }
    fi_close(&ep->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    free(buf);
    return 0;
}
