/*
 * fi_auto - FI_PROGRESS_AUTO: data moves while the application is away.
 * Rank 0 posts a 4 MiB receive and sleeps 4 s without calling libfabric;
 * rank 1 sends it (rendezvous: request, GETs, ACK all need rank 0's provider
 * to act) and must see its send complete within 3 s, while rank 0 sleeps.
 * Then rank 0 checks every byte. The other way round too: rank 1 sends
 * 4 MiB and sleeps, and rank 0 must receive it all meanwhile - the provider
 * reaches a peer's malloc'd memory through the rings (FI_ULNET_SHM_CMA off),
 * so rank 1's thread serves rank 0's GETs.
 * Usage: ulnrun -n 2 fi_auto DIR
 */
#include <stdbool.h>

#include "fi_common.h"

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    struct fi_info *hints = fic_hints(FI_TAGGED, NULL);
    hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    struct fic fx = {0};
    fic_open(&fx, hints, FI_AV_MAP, 0);
    if (fx.info->domain_attr->data_progress != FI_PROGRESS_AUTO) return 1;
    fic_enable(&fx);
    fic_exchange(&fx, argv[1]);
    enum { LEN = 4 << 20 };
    uint8_t *buf = malloc(LEN);
    struct fi_cq_tagged_entry e;
    if (rank == 0) {
        memset(buf, 0, LEN);
        OK(fi_trecv(fx.ep, buf, LEN, NULL, fx.peer, 9, 0, NULL));
        sleep(4); /* away from libfabric: only the provider's thread can act */
        OK(fic_wait(&fx, &e, fic_now() + 60));
        if (e.len != LEN) return 1;
        for (size_t k = 0; k < LEN; k++)
            if (buf[k] != (uint8_t)(k * 3 + 1)) {
                fprintf(stderr, "rank 0: byte %zu wrong\n", k);
                return 1;
            }
    } else {
        for (size_t k = 0; k < LEN; k++)
            buf[k] = (uint8_t)(k * 3 + 1);
        double t0 = fic_now();
        OK(fi_tsend(fx.ep, buf, LEN, NULL, fx.peer, 9, NULL));
        /* The send completes on rank 0's ACK, after rank 0's GETs: all of it
         * while rank 0 sleeps, if its provider progresses by itself. */
        ssize_t n = fic_wait(&fx, &e, t0 + 3);
        if (n == -FI_ETIMEDOUT) {
            fprintf(stderr, "rank 1: send not complete after 3 s: no progress at rank 0\n");
            return 1;
        }
        OK(n);
        printf("rank 1: 4 MiB sent while the receiver slept\n");
    }
    /* Rank 0 posts its receive, then says go (a small message); rank 1
     * sends on it and sleeps through the time rank 0 is given. */
    uint64_t go = 1;
    if (rank == 1) {
        OK(fi_trecv(fx.ep, &go, sizeof go, NULL, fx.peer, 11, 0, NULL));
        OK(fic_wait(&fx, &e, fic_now() + 60));
        for (size_t k = 0; k < LEN; k++)
            buf[k] = (uint8_t)(k * 7 + 5);
        OK(fi_tsend(fx.ep, buf, LEN, NULL, fx.peer, 10, NULL));
        sleep(4); /* only the provider's thread can serve rank 0's GETs */
        OK(fic_wait(&fx, &e, fic_now() + 60));
    } else {
        memset(buf, 0, LEN);
        OK(fi_trecv(fx.ep, buf, LEN, NULL, fx.peer, 10, 0, NULL));
        double t0 = fic_now();
        OK(fi_tsend(fx.ep, &go, sizeof go, NULL, fx.peer, 11, NULL));
        bool sent = false, got = false;
        while (!got) {
            ssize_t n = fic_wait(&fx, &e, t0 + 3);
            if (n == -FI_ETIMEDOUT) {
                fprintf(stderr, "rank 0: receive not complete after 3 s: no progress at rank 1\n");
                return 1;
            }
            OK(n);
            if (e.flags & FI_SEND) {
                sent = true;
                continue;
            }
            got = true;
        }
        if (e.len != LEN) return 1;
        for (size_t k = 0; k < LEN; k++)
            if (buf[k] != (uint8_t)(k * 7 + 5)) {
                fprintf(stderr, "rank 0: byte %zu wrong\n", k);
                return 1;
            }
        if (!sent) OK(fic_wait(&fx, &e, fic_now() + 60));
        printf("rank 0: 4 MiB received while the sender slept\n");
    }
    fic_close(&fx);
    free(buf);
    return 0;
}
