/*
 * seal_cost.c - what sealing costs one CPU per datagram (src/seal/): the
 * thread's CPU time (not wall time, so other load on the machine disturbs it
 * less) of uln_seal_tx and of uln_seal_rx, for each mode and cipher, at the
 * datagram sizes the udp transport makes: an 8 B NAP (36 + 8 bytes), a full
 * datagram at MTU 1500 (1448 bytes sealed) and at MTU 9000 (8948). Also the
 * sealing rate in GB/s at the full sizes, beside `openssl speed -evp`.
 *
 *   seal_cost [ITERS]     (default 200000 per point; pin it: taskset -c 0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seal/seal.h"

#define BATCH 1024

static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    iters = (iters + BATCH - 1) / BATCH * BATCH;
    static const size_t sizes[] = {44, 1448, 8948};
    static const enum uln_seal_cipher ciphers[] = {ULN_SEAL_AES_256_GCM,
                                                   ULN_SEAL_CHACHA20_POLY1305};
    static uint8_t buf[8948 + ULN_SEAL_TRAILER];
    uint8_t *batch = malloc((size_t)BATCH * sizeof buf);
    if (!batch) return 1;
    uint8_t ka[32], kb[32];
    for (int i = 0; i < 32; i++)
        ka[i] = (uint8_t)(i * 7 + 1), kb[i] = (uint8_t)(i * 11 + 3);
    struct uln_seal_id a, b;
    if (uln_seal_id_open_raw(&a, ka, NULL, 0) || uln_seal_id_open_raw(&b, kb, NULL, 0)) return 1;
    struct uln_seal_ends ea = {.my_epoch = 1, .peer_epoch = 2},
                         eb = {.my_epoch = 2, .peer_epoch = 1};
    printf("%-18s %-8s %6s %12s %12s %12s\n", "cipher", "mode", "bytes", "seal ns", "open ns",
           "seal GB/s");
    for (int c = 0; c < 2; c++) {
        for (int m = ULN_SEAL_AUTH; m <= ULN_SEAL_ENCRYPT; m++) {
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                size_t n = sizes[k];
                struct uln_seal_pair pa, pb;
                if (uln_seal_pair_open(&pa, &a, b.pub, &ea, m, ciphers[c]) ||
                    uln_seal_pair_open(&pb, &b, a.pub, &eb, m, ciphers[c]))
                    return 1;
                memset(buf, 0x5a, n);
                struct iovec io = {buf, n};
                double t0 = cpu_ns();
                for (long i = 0; i < iters; i++)
                    uln_seal_tx(&pa.tx, &io, NULL, 1, buf + n);
                double t1 = cpu_ns();
                /* open: batches of BATCH datagrams sealed first, then opened
                 * (timed), each with its own counter */
                double topen = 0;
                size_t len = n + ULN_SEAL_TRAILER;
                for (long i = 0; i < iters; i += BATCH) {
                    for (int j = 0; j < BATCH; j++) {
                        uint8_t *d = batch + (size_t)j * len;
                        memset(d, 0x5a, n);
                        struct iovec v = {d, n};
                        uln_seal_tx(&pa.tx, &v, NULL, 1, d + n);
                    }
                    double s = cpu_ns();
                    for (int j = 0; j < BATCH; j++)
                        if (uln_seal_rx(&pb.rx, batch + (size_t)j * len, len) != (long)n) return 2;
                    topen += cpu_ns() - s;
                }
                double tseal = (t1 - t0) / iters;
                printf("%-18s %-8s %6zu %12.1f %12.1f %12.2f\n", uln_seal_cipher_name(ciphers[c]),
                       uln_seal_mode_name(m), n, tseal, topen / (double)iters, n / tseal);
                uln_seal_pair_close(&pa);
                uln_seal_pair_close(&pb);
            }
        }
    }
    uln_seal_id_close(&a);
    uln_seal_id_close(&b);
    free(batch);
    return 0;
}
