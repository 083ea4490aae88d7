/*
 * fi_exit - a client that exits without closing anything. libfabric unloads
 * its providers when the process exits (fi_fini); a FI_PROGRESS_AUTO
 * domain's thread still running then would run unmapped code. Each of
 * RUNS children opens an auto-progress domain, an endpoint and a CQ, posts a
 * receive (so the thread has work to look at), and returns from main; every
 * one must exit with status 0, not a signal. Before the provider's cleanup
 * stopped its threads, about 3 runs in 8 died of SIGSEGV.
 * Usage: fi_exit (FI_PROVIDER_PATH at the provider)
 */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { RUNS = 20 };

static int child(void)
{
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->caps = FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("ulnet");
    hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
    if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info)) return 3;
    if (info->domain_attr->data_progress != FI_PROGRESS_AUTO) return 4;
    struct fid_fabric *fabric;
    struct fid_domain *dom;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    if (fi_fabric(info->fabric_attr, &fabric, NULL) || fi_domain(fabric, info, &dom, NULL) ||
        fi_endpoint(dom, info, &ep, NULL) || fi_av_open(dom, &aa, &av, NULL) ||
        fi_cq_open(dom, &ca, &cq, NULL) || fi_ep_bind(ep, &av->fid, 0) ||
        fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) || fi_enable(ep))
        return 5;
    static char buf[64];
    if (fi_trecv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 1, 0, NULL)) return 6;
    return 0; /* nothing closed: libfabric's fi_fini runs at exit */
}

int main(void)
{
    int bad = 0;
    for (int i = 0; i < RUNS; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) exit(child());
        int st;
        if (waitpid(pid, &st, 0) != pid) return 2;
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "run %d: killed by signal %d at exit\n", i, WTERMSIG(st));
            bad++;
        } else if (WEXITSTATUS(st)) {
            fprintf(stderr, "run %d: exit status %d (set-up failed)\n", i, WEXITSTATUS(st));
            bad++;
        }
    }
    printf("%d of %d runs exited cleanly without closing\n", RUNS - bad, RUNS);
    return bad ? 1 : 0;
}
