/*
 * forge_queue.c - a process writes garbage into its own queue to the
 * service: the service refuses it (a message of no type: counted
 * unroutable; a header that breaks the ring's rules: the queue is broken,
 * counted malformed, never read again) and nobody else is harmed.
 *
 * Three ranks, ULN_TRANSPORT=svc. Rank 2 maps its endpoint's queue (the
 * memfd named ulnet-svc-queue) and writes there, where its transport would
 * write next: a message of type 0xee to rank 1, then a header of 0 cells.
 * It then creates the file argv[1]; rank 0 streams N NAPs to rank 1, which
 * must get every one, in order, data checked. forge_queue.sh checks the
 * service's counters.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ulnet.h"
#include "core/ring.h"
#include "transport/svc/proto.h"

#define N        5000u
#define LEN      64u
#define DIE(...) (fprintf(stderr, "forge_queue: " __VA_ARGS__), exit(1))

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int find_queue(void)
{
    char link[384], target[256];
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (strstr(target, "memfd:ulnet-svc-queue")) found = open(link, O_RDWR | O_CLOEXEC);
    }
    if (d) closedir(d);
    return found;
}

static void forge(void)
{
    int fd = find_queue();
    if (fd < 0) DIE("no queue\n");
    size_t bytes = ULN_SVC_QUEUE_BYTES(ULN_SVC_RING_BYTES);
    uint8_t *q = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (q == MAP_FAILED) DIE("mmap\n");
    uint8_t *cells = q + 4096 + sizeof(struct uln_ring_ctrl);
    /* At position 0 (nothing sent yet): a type no engine knows, to rank 1;
     * then at 64, a header of 0 cells. Stamps last, as a producer does. */
    struct uln_msg *m = (struct uln_msg *)cells;
    m->cells = 1, m->type = 0xee, m->len = 8, m->aux = 1;
    struct uln_msg *b = (struct uln_msg *)(cells + ULN_CELL);
    b->cells = 0, b->type = 1, b->len = 8, b->aux = 1;
    atomic_store_explicit(&b->stamp, uln_ring_stamp(ULN_CELL), memory_order_release);
    atomic_store_explicit(&m->stamp, uln_ring_stamp(0), memory_order_release);
    munmap(q, bytes);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    struct uln_ctx *ctx;
    struct uln_cq *cq;
    struct uln_ep *ep;
    if (uln_open(NULL, &ctx) || uln_cq_open(ctx, 4096, &cq) || uln_ep_open(ctx, cq, cq, &ep))
        DIE("open\n");
    int r = uln_rank(ctx);
    if (uln_size(ctx) != 3) DIE("run with 3 ranks\n");
    if (r == 2) {
        forge();
        int f = open(argv[1], O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        if (f < 0) DIE("cannot create %s\n", argv[1]);
        close(f);
    } else {
        while (access(argv[1], F_OK) != 0)
            usleep(10000);
    }
    int fails = 0;
    if (r == 0) {
        static uint8_t all[N][LEN]; /* each NAP's buffer kept until its completion */
        uint32_t done = 0;
        for (uint32_t s = 0; s < N;) {
            memset(all[s], (int)(s * 13 + 1), LEN);
            int rc = uln_nap(ep, 1, all[s], LEN, s, 0);
            if (rc == 0)
                s++;
            else if (rc != -EAGAIN)
                DIE("nap: %s\n", uln_strerror(rc));
            struct uln_cqe e[64];
            int n = uln_cq_poll(cq, e, 64);
            for (int i = 0; i < n; i++)
                fails += e[i].status != 0;
            done += (uint32_t)(n > 0 ? n : 0);
        }
        double end = now_s() + 60;
        while (done < N && now_s() < end) {
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) == 1) {
                fails += e.status != 0;
                done++;
            } else
                uln_cq_wait(cq, 10);
        }
        fails += done != N;
    }
    if (r == 1) {
        uint8_t want[LEN];
        double end = now_s() + 60; /* a bound on a hang */
        for (uint32_t s = 0; s < N && now_s() < end;) {
            struct uln_cqe e;
            if (uln_cq_poll(cq, &e, 1) != 1) {
                uln_cq_wait(cq, 10);
                continue;
            }
            memset(want, (int)(s * 13 + 1), LEN);
            if (e.op != ULN_OP_NAP_RECV || e.peer != 0 || e.len != LEN || memcmp(e.data, want, LEN))
                DIE("NAP %u: wrong (op %u peer %d len %llu)\n", s, e.op, e.peer,
                    (unsigned long long)e.len);
            uln_cqe_release(cq, &e);
            s++;
            if (s == N) printf("forge_queue: rank 1 got all %u NAPs of rank 0\n", N);
        }
    }
    /* Rank 2's queue is broken for good: it only waits for the others. */
    if (r == 2) sleep(1);
    uln_ep_close(ep);
    uln_cq_close(cq);
    uln_close(ctx);
    return fails ? 1 : 0;
}
