/*
 * sleeper.c - a process attached to the host service (ULN_SERVICE=required)
 * that then sleeps in pause() until killed: what --status must list, and
 * what a kill -9 must take out of the list.
 */
#include <stdio.h>
#include <unistd.h>

#include "ulnet.h"

int main(void)
{
    struct uln_ctx *ctx;
    int rc = uln_open(NULL, &ctx);
    if (rc) {
        fprintf(stderr, "sleeper: uln_open: %s\n", uln_strerror(rc));
        return 1;
    }
    printf("attached %d\n", (int)getpid());
    fflush(stdout);
    pause();
    return 0;
}
