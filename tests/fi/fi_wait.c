/*
 * fi_wait.c - FI_WAIT_FD: a CQ's descriptor (fi_control FI_GETWAIT) and
 * fi_trywait, the way an event loop sleeps on libfabric (fi_cq(3),
 * fi_trywait(3)). Rank 0 sleeps in poll() on its CQ's descriptor; rank 1
 * sends after a pause, which must wake rank 0; then the other way round,
 * many times, every byte checked. With a LEN above the eager limit each
 * message is a rendezvous whose GETs the sleeping sender's provider serves
 * through the rings (FI_ULNET_SHM_CMA off): the receiver's requests must
 * wake it through the same descriptor.
 * Usage (under ulnrun -n 2): fi_wait DIR [LEN]
 */
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>

#include "fi_common.h"

enum { ROUNDS = 50 };

/* Read one completion, sleeping on the descriptor between tries. Returns
 * how many times it slept. */
static int wait_fd(struct fic *f, int fd, struct fi_cq_tagged_entry *e)
{
    int slept = 0;
    double deadline = fic_now() + 30;
    for (;;) {
        ssize_t n = fi_cq_read(f->cq, e, 1);
        if (n == 1) return slept;
        if (n != -FI_EAGAIN) OK(n);
        if (fic_now() > deadline) {
            fprintf(stderr, "rank %d: no completion within 30 s\n", rank);
            exit(1);
        }
        struct fid *fids[1] = {&f->cq->fid};
        int rc = fi_trywait(f->fab, fids, 1);
        if (rc == -FI_EAGAIN) continue;
        OK(rc);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        OK(poll(&pf, 1, 10000)); /* the descriptor alone wakes us: a long timeout */
        slept++;
    }
}

/* Round r's payload arrived intact (both sides send the same pattern). */
static bool round_ok(const char *in, size_t len, int r)
{
    for (size_t i = 0; i < len; i++)
        if (in[i] != (char)(r * 7 + i)) {
            fprintf(stderr, "rank %d: round %d byte %zu wrong\n", rank, r, i);
            return false;
        }
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) return 2;
    size_t len = argc == 3 ? strtoul(argv[2], NULL, 0) : 256;
    struct fic f = {0};
    fic_open(&f, fic_hints(FI_TAGGED, NULL), FI_AV_TABLE, 0);
    /* The CQ fic_open made has no wait object: replace it by one with a
     * descriptor. */
    OK(fi_close(&f.cq->fid));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
    OK(fi_cq_open(f.dom, &ca, &f.cq, NULL));
    int fd = -1;
    OK(fi_control(&f.cq->fid, FI_GETWAIT, &fd));
    if (fd < 0) return 1;
    fic_enable(&f);
    fic_exchange(&f, argv[1]);
    char *out = malloc(len), *in = malloc(len);
    if (!out || !in) return 1;
    int slept = 0;
    for (int r = 0; r < ROUNDS; r++) {
        struct fi_cq_tagged_entry e;
        OK(fi_trecv(f.ep, in, len, NULL, f.peer, (uint64_t)r, 0, NULL));
        bool first = (r + rank) % 2 == 0;
        if (!first) {
            int s = wait_fd(&f, fd, &e); /* the receive */
            slept += s;
            if (!round_ok(in, len, r)) return 1;
        } else {
            usleep(20000); /* the peer is asleep on its descriptor by now */
        }
        for (size_t i = 0; i < len; i++)
            out[i] = (char)(r * 7 + i);
        OK(fi_tsend(f.ep, out, len, NULL, f.peer, (uint64_t)r, NULL));
        wait_fd(&f, fd, &e); /* the send */
        if (first) {
            wait_fd(&f, fd, &e); /* the receive */
            if (!round_ok(in, len, r)) return 1;
        }
    }
    /* Half the rounds waited for a peer that paused first: most of them must
     * have slept on the descriptor and been woken through it. */
    if (slept < ROUNDS / 4) {
        fprintf(stderr, "rank %d: slept only %d times in %d rounds\n", rank, slept, ROUNDS);
        return 1;
    }
    printf("rank %d: %d rounds of %zu B, slept %d times on the CQ's descriptor\n", rank, ROUNDS,
           len, slept);
    fic_close(&f);
    free(out);
    free(in);
    return 0;
}
