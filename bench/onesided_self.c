/*
 * onesided_self - what ulnet's one-sided fast path costs, in one process
 * with no launcher: a context of one whose endpoint reaches its own
 * registered memory through the window (struct uln_rkey_win), as a peer's
 * mapped memory is reached over shm. No second process, so no cache line
 * crosses cores and nothing is shared with a peer's scheduling: on a
 * machine too loaded for ulnperf's pinned pairs, the software's own cost
 * still shows. With "mapped" the memory is a second context's in the same
 * process, reached as a peer's is over shm: through the translation cache's
 * mapping of its memfd, the key table and hazard slot in its inbox.
 *
 *   onesided_self time [mapped]
 *       ns per op, the minimum over 300 rounds of 20 (200 for the small
 *       ops), three times: fetch-add + its completion polled, an 8-byte
 *       silent PUT, uln_putv of 16 x 4 KiB beside one 64 KiB uln_put, and
 *       uln_getv beside uln_get likewise.
 *   onesided_self loop OP N [mapped]
 *       N ops of OP (fadd, put8, putv, put64k) in loop(): under
 *       valgrind --tool=callgrind --toggle-collect=loop the instructions per
 *       op are the total / (N + 100), the same run after run however loaded
 *       the machine.
 *
 * Built with the tests, as build/onesided_self; a measurement, not a test:
 * ctest runs it once (bench_onesided_self) only to see that it still runs.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <ulnet.h>

#define REG (1u << 20)

#define OK(x)                                                                                      \
    do {                                                                                           \
        int r_ = (x);                                                                              \
        if (r_ < 0) {                                                                              \
            fprintf(stderr, "%s: %s\n", #x, uln_strerror(r_));                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static struct uln_ep *ep;
static struct uln_cq *cq;
static uint64_t key;
static uint8_t *loc, *tgt;
static struct iovec segs[16];
static int peer; /* 0: ourselves; mapped: the second context */

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The completion of the one op in flight, which must have succeeded. */
static void wait1(void)
{
    struct uln_cqe e;
    int n;
    while ((n = uln_cq_poll(cq, &e, 1)) == 0)
        ;
    OK(n);
    if (e.status) {
        fprintf(stderr, "completion: %s\n", uln_strerror(e.status));
        exit(1);
    }
}

enum op { FADD, PUT8, PUTV, PUT64K, GETV, GET64K, NOPS };
static const char *const names[NOPS] = {"fadd", "put8", "putv", "put64k", "getv", "get64k"};

/* One op, and its completion unless it is silent. */
static void one(enum op op)
{
    switch (op) {
    case FADD:
        OK(uln_atomic(ep, peer, ULN_ATOMIC_ADD, 8, key, 0, 1, 0, loc, 0, 0));
        break;
    case PUT8:
        OK(uln_put(ep, peer, loc, 8, key, 0, 0, ULN_SILENT));
        return;
    case PUTV:
        OK(uln_putv(ep, peer, segs, 16, key, 0, 0, 0));
        break;
    case PUT64K:
        OK(uln_put(ep, peer, loc, 65536, key, 0, 0, 0));
        break;
    case GETV:
        OK(uln_getv(ep, peer, segs, 16, key, 0, 0, 0));
        break;
    default:
        OK(uln_get(ep, peer, loc, 65536, key, 0, 0, 0));
    }
    wait1();
}

/* Not inlined: callgrind's --toggle-collect names it. */
__attribute__((noinline)) void loop(enum op op, long n)
{
    for (long i = 0; i < n; i++)
        one(op);
}

/* ns per op: the fastest of many short rounds (interference only adds). */
static double best_ns(enum op op, int per_round)
{
    double best = 1e18;
    for (int r = 0; r < 300; r++) {
        double t0 = now_ns();
        loop(op, per_round);
        double t = (now_ns() - t0) / per_round;
        if (t < best) best = t;
    }
    return best;
}

/* A second context owning the target memory, and each inserted as the
 * other's peer (endpoint 0 of each). */
static struct uln_ctx *open_owner(struct uln_ctx *ctx, const struct uln_config *c)
{
    struct uln_ctx *own;
    struct uln_cq *ocq;
    struct uln_ep *oep;
    OK(uln_open(c, &own));
    OK(uln_cq_open(own, 64, &ocq));
    OK(uln_ep_open(own, ocq, ocq, &oep));
    char a[256];
    size_t n = sizeof a;
    OK(uln_addr(own, a, &n));
    OK(uln_peer_insert(ctx, a, n, 0, &peer));
    int back;
    n = sizeof a;
    OK(uln_addr(ctx, a, &n));
    OK(uln_peer_insert(own, a, n, 0, &back));
    return own;
}

static void open_self(bool mapped)
{
    struct uln_config c;
    uln_config_init(&c);
    c.boot = ULN_BOOT_NONE;
    struct uln_ctx *ctx;
    OK(uln_open(&c, &ctx));
    OK(uln_cq_open(ctx, 1024, &cq));
    OK(uln_ep_open(ctx, cq, cq, &ep));
    struct uln_ctx *own = mapped ? open_owner(ctx, &c) : ctx;
    OK(uln_mem_alloc(own, REG, (void **)&tgt));
    OK(uln_mem_alloc(ctx, REG, (void **)&loc));
    memset(tgt, 0, REG);
    memset(loc, 1, REG);
    struct uln_mr *mr;
    OK(uln_mr_reg(own, tgt, REG,
                  ULN_ACCESS_REMOTE_WRITE | ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_ATOMIC,
                  &mr));
    key = uln_mr_key(mr);
    /* as ulnperf --iov 16 cuts its buffer: equal segments, one after another */
    for (int s = 0; s < 16; s++)
        segs[s] = (struct iovec){loc + s * 4096, 4096};
}

int main(int argc, char **argv)
{
    bool mapped = argc > 2 && !strcmp(argv[argc - 1], "mapped");
    argc -= mapped;
    if (argc == 4 && !strcmp(argv[1], "loop")) {
        int op = 0;
        while (op < NOPS && strcmp(names[op], argv[2]))
            op++;
        long n = atol(argv[3]);
        if (op == NOPS || op == GETV || op == GET64K || n <= 0) goto usage;
        open_self(mapped);
        loop(op, 100); /* warm: the window filled, the pages touched */
        loop(op, n);
        return 0;
    }
    if (argc != 2 || strcmp(argv[1], "time")) goto usage;
    open_self(mapped);
    for (int k = 0; k < 3; k++) {
        double f = best_ns(FADD, 200), p8 = best_ns(PUT8, 200);
        double pv = best_ns(PUTV, 20), pc = best_ns(PUT64K, 20);
        double gv = best_ns(GETV, 20), gc = best_ns(GET64K, 20);
        printf("fadd+poll %.1f ns  put8 silent %.1f ns  putv16x4K %.0f ns  put64K %.0f ns (%.2fx)"
               "  getv16x4K %.0f ns  get64K %.0f ns (%.2fx)\n",
               f, p8, pv, pc, pc / pv, gv, gc, gc / gv);
    }
    return 0;
usage:
    fprintf(stderr, "usage: onesided_self time [mapped] | "
                    "onesided_self loop fadd|put8|putv|put64k N [mapped]\n");
    return 2;
}
