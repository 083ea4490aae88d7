/*
 * fi_auto - FI_PROGRESS_AUTO: data moves while the application is away.
 * Rank 0 posts a 4 MiB receive and sleeps 4 s without calling libfabric;
 * rank 1 sends it (rendezvous: request, GETs, ACK all need rank 0's provider
 * to act) and must see its send complete within 3 s, while rank 0 sleeps.
 * Then rank 0 checks every byte.
 * Usage: ulnrun -n 2 fi_auto DIR
 */
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
    fic_close(&fx);
    free(buf);
    return 0;
}
