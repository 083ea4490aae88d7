/*
 * fi_death - a peer that dies does not hang its partner: sends to it
 * complete with an error entry (FI_ECONNRESET, ulnet's reason in
 * prov_errno) instead of never. Rank 1 exits right after the first
 * exchange; rank 0 keeps sending eager messages until its sends queue behind
 * the dead peer's full ring, where ulnet finds the peer gone.
 * With "rndv": rank 0 sends one message above the eager limit; rank 1 lets
 * its request arrive unmatched and dies, so the send waits for an ACK that
 * never comes, with nothing of ulnet's outstanding: it must still fail.
 * Usage: ulnrun -n 2 fi_death DIR [rndv]
 */
#include "fi_common.h"

/* Rank 0's rendezvous send to a receiver that dies before it matches. */
static int rndv_death(struct fic *fx, char *buf, size_t len)
{
    struct fi_cq_tagged_entry e;
    if (rank == 1) {
        usleep(300000); /* the request arrives, unmatched */
        _exit(0);
    }
    double t0 = fic_now();
    OK(fi_tsend(fx->ep, buf, len, NULL, fx->peer, 3, NULL));
    for (;;) {
        ssize_t k = fi_cq_read(fx->cq, &e, 1);
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(fx->cq, &err, 0));
            printf("rank 0: rendezvous send failed after %.1f s: %s\n", fic_now() - t0,
                   fi_strerror(err.err));
            return err.err == FI_ECONNRESET ? 0 : 1;
        }
        if (k > 0) {
            fprintf(stderr, "rank 0: the send to a dead receiver succeeded\n");
            return 1;
        }
        if (fic_now() - t0 > 60) {
            fprintf(stderr, "rank 0: the send to a dead receiver is still waiting after 60 s\n");
            return 1;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) return 2;
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
    if (argc == 3) {
        int rc = rndv_death(&fx, buf, sizeof buf);
        fic_close(&fx);
        return rc;
    }
    if (rank == 1) _exit(0); /* no goodbye */
    usleep(300000);
    double t0 = fic_now();
    int errors = 0, sent = 0;
    for (int i = 0; errors < 2 && fic_now() - t0 < 60; i++) {
        size_t n = 4000; /* eager: the dead peer's ring fills, the sends queue */
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
    fic_close(&fx); /* with sends still queued for the dead peer */
    return errors ? 0 : 1;
}
