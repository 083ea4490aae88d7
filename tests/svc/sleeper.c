/*
 * sleeper.c - a process attached to the host service (ULN_SERVICE=required)
 * that then sleeps until killed: what --status must list, and what a kill
 * -9 must take out of the list. "sleeper" sleeps in pause(); "sleeper wait"
 * opens an endpoint and sleeps in uln_cq_wait, as an idle rank of a job
 * waits for its next message (bench/svc_idle measures the service's CPU
 * beside both).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ulnet.h"

int main(int argc, char **argv)
{
    struct uln_ctx *ctx;
    int rc = uln_open(NULL, &ctx);
    if (rc) {
        fprintf(stderr, "sleeper: uln_open: %s\n", uln_strerror(rc));
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "wait")) {
        struct uln_cq *cq;
        struct uln_ep *ep;
        if ((rc = uln_cq_open(ctx, 64, &cq)) || (rc = uln_ep_open(ctx, cq, cq, &ep))) {
            fprintf(stderr, "sleeper: endpoint: %s\n", uln_strerror(rc));
            return 1;
        }
        printf("attached %d, waiting\n", (int)getpid());
        fflush(stdout);
        for (;;)
            if ((rc = uln_cq_wait(cq, -1)) && rc != -EINTR && rc != -ETIMEDOUT) {
                fprintf(stderr, "sleeper: uln_cq_wait: %s\n", uln_strerror(rc));
                return 1;
            }
    }
    printf("attached %d\n", (int)getpid());
    fflush(stdout);
    pause();
    return 0;
}
