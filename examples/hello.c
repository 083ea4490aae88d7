/*
 * hello.c - ulnet quick start: the ranks exchange their region keys
 * (uln_allgather), then every rank PUTs a greeting into its right-hand
 * neighbour's buffer with a remote completion, which the neighbour prints.
 *
 *   cc hello.c $(pkg-config --cflags --libs ulnet) -o hello
 *   ulnrun -n 4 ./hello
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ulnet.h>

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s: %s\n", #x, uln_strerror(rc_));                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    struct uln_mr *mr;
    char *inbox;

    TRY(uln_open(NULL, &ctx)); /* rank, size and peers come from ulnrun */
    int me = uln_rank(ctx), n = uln_size(ctx);
    int right = (me + 1) % n;
    TRY(uln_cq_open(ctx, 64, &cq));
    TRY(uln_ep_open(ctx, cq, cq, &ep));

    /* Memory from uln_mem_alloc is mapped by peers: PUTs into it are one memcpy. */
    TRY(uln_mem_alloc(ctx, 4096, (void **)&inbox));
    memset(inbox, 0, 4096);
    TRY(uln_mr_reg(ctx, inbox, 4096, ULN_ACCESS_REMOTE_WRITE, &mr));

    /* Every rank's key to every rank: keys[r] is rank r's region. */
    uint64_t key = uln_mr_key(mr), *keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return 1;
    TRY(uln_allgather(ep, &key, sizeof key, keys, 10000));

    char msg[64];
    snprintf(msg, sizeof msg, "hello from rank %d", me);
    TRY(uln_put_imm(ep, right, msg, strlen(msg) + 1, keys[right], 0, (uint64_t)me, 1, 0));
    int put_done = 0, greeted = 0;
    while (!put_done || !greeted) {
        struct uln_cqe e;
        TRY(uln_cq_wait(cq, 10000));
        while (uln_cq_poll(cq, &e, 1) == 1) {
            TRY(e.status);
            if (e.op == ULN_OP_PUT) {
                put_done = 1;
            } else if (e.op == ULN_OP_PUT_REMOTE) {
                printf("rank %d got \"%s\" (imm %llu)\n", me, inbox, (unsigned long long)e.imm);
                greeted = 1;
            }
        }
    }
    TRY(uln_barrier(ctx, 10000)); /* nobody writes into our buffer any more */
    uln_mr_dereg(mr);
    free(keys);
    uln_close(ctx);
    return 0;
}
