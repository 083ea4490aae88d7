/*
 * fi_death - a fx.peer that dies does not hang its partner: sends to it
 * complete with an error entry (FI_ECONNRESET, ulnet's reason in
 * prov_errno) instead of never. Rank 1 exits right after the first
 * exchange; rank 0 keeps sending eager messages until its sends queue behind
 * the dead fx.peer's full ring, where ulnet finds the fx.peer gone. (A rendezvous
 * send waiting for its ACK is not covered: docs/provider.md, limits.)
 * Usage: ulnrun -n 2 fi_death DIR
 */
#include "fi_common.h"

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    struct fic fx = {0};
    fic_open(&fx, fic_hints(FI_TAGGED, NULL), FI_AV_MAP, 0);
    fic_enable(&fx);
    fic_exchange(&fx, argv[1]);
    static char buf[1 << 20];
    struct fi_cq_tagged_entry e;
    /* one exchange, so both are up */
    OK(fi_trecv(fx.ep, buf, 8, NULL, fx.peer, 1, 0, NULL));
    OK(fi_tsend(fx.ep, buf, 8, NULL, fx.peer, 1, NULL));
    for (int got = 0; got < 2; got++)
        OK(fic_wait(&fx, &e, fic_now() + 30));
    if (rank == 1) _exit(0); /* no goodbye */
    usleep(300000);
    double t0 = fic_now();
    int errors = 0, sent = 0;
    for (int i = 0; errors < 2 && fic_now() - t0 < 60; i++) {
        size_t n = 4000; /* eager: the dead fx.peer's ring fills, the sends queue */
        if (sent < 1000) {
            ssize_t r = fi_tsend(fx.ep, buf, n, NULL, fx.peer, 2, NULL);
            if (r == 0)
                sent++;
            else if (r != -FI_EAGAIN && r != -FI_ECONNRESET)
                OK(r);
        }
        ssize_t k = fi_cq_read(fx.cq, &e, 1);
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(fx.cq, &err, 0));
            printf("rank 0: error completion %s, ulnet: %s\n", fi_strerror(err.err),
                   fi_cq_strerror(fx.cq, err.prov_errno, NULL, NULL, 0));
            if (err.err != FI_ECONNRESET) return 1;
            errors++;
        } else if (k > 0) {
            sent--;
        }
    }
    printf("rank 0: %d error completions after %.1f s\n", errors, fic_now() - t0);
    fic_close(&fx); /* with sends still queued for the dead fx.peer */
    return errors ? 0 : 1;
}
