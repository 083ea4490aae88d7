/*
 * mpi_p2p - Open MPI over the ulnet provider (cm PML, ofi MTL): tagged
 * point-to-point with MPI_ANY_SOURCE/MPI_ANY_TAG, unexpected and truncated
 * messages, 0 B to 64 MiB, windows of MPI_Isend, probes (MPI_Iprobe,
 * MPI_Improbe/MPI_Mrecv), and a few collectives.
 * Every byte is checked. Any number of ranks >= 2 (tests/mpi/run.sh).
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__, __LINE__, #c);   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static uint8_t pat(unsigned seed, size_t i)
{
    return (uint8_t)(seed * 151 + i * 13 + (i >> 11));
}
static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(seed, i);
}
static size_t bad(const uint8_t *b, size_t n, unsigned seed)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += b[i] != pat(seed, i);
    return k;
}

/* A peer's first messages arrive before this rank has it in its AV (Open
 * MPI's ofi MTL inserts a peer at first use): rank size-1 sends to rank 0 at
 * once, while rank 0 progresses with rank 1 only, until a wildcard probe
 * (which names no peer) sees both; then rank 0 receives them by source.
 * Must run first: any earlier call naming rank size-1 would insert it. */
static void test_first_contact(void)
{
    enum { BIG = 1 << 20 };
    const int last = size - 1;
    if (size < 3 || (rank != 0 && rank != 1 && rank != last)) return;
    uint8_t *b = malloc(BIG);
    if (rank == last) {
        fill(b, 100, 500);
        MPI_Send(b, 100, MPI_BYTE, 0, 21, MPI_COMM_WORLD);
        fill(b, BIG, 501);
        MPI_Send(b, BIG, MPI_BYTE, 0, 22, MPI_COMM_WORLD); /* rendezvous */
    } else if (rank == 1) {
        for (int go = 1; go;) {
            MPI_Recv(&go, 1, MPI_INT, 0, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&go, 1, MPI_INT, 0, 20, MPI_COMM_WORLD);
        }
    } else {
        int seen = 0, go = 1;
        for (double end = MPI_Wtime() + 60; go;) {
            int f1 = 0, f2 = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &f1, MPI_STATUS_IGNORE);
            MPI_Iprobe(MPI_ANY_SOURCE, 22, MPI_COMM_WORLD, &f2, MPI_STATUS_IGNORE);
            seen = f1 && f2;
            go = !seen && MPI_Wtime() < end;
            MPI_Sendrecv_replace(&go, 1, MPI_INT, 1, 20, 1, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        CHECK(seen);
        MPI_Status st;
        int cnt;
        memset(b, 0, BIG);
        MPI_Recv(b, 100, MPI_BYTE, last, 21, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        CHECK(cnt == 100 && bad(b, 100, 500) == 0);
        MPI_Recv(b, BIG, MPI_BYTE, last, 22, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        CHECK(cnt == BIG && bad(b, BIG, 501) == 0);
    }
    free(b);
}

/* Ring exchange at every size from 0 B to 64 MiB (powers of 4, and odd ones). */
static void test_sizes(void)
{
    const size_t max = 64u << 20;
    uint8_t *s = malloc(max), *r = malloc(max);
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    for (size_t n = 0; n <= max; n = n ? n * 4 : 1) {
        for (int odd = 0; odd < 2; odd++) {
            size_t len = odd && n > 3 ? n - 3 : n;
            if (getenv("MPI_P2P_VERBOSE") && rank == 0) fprintf(stderr, "size %zu\n", len);
            fill(s, len, (unsigned)(rank * 7 + len));
            memset(r, 0, len);
            MPI_Status st;
            MPI_Sendrecv(s, (int)len, MPI_BYTE, to, 11, r, (int)len, MPI_BYTE, from, 11,
                         MPI_COMM_WORLD, &st);
            int cnt;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK((size_t)cnt == len);
            CHECK(bad(r, len, (unsigned)(from * 7 + len)) == 0);
            if ((size_t)cnt != len)
                fprintf(stderr, "rank %d: from %d: %d bytes for %zu\n", rank, from, cnt, len);
        }
    }
    free(s);
    free(r);
}

/* Rank 0 receives from everyone with wildcards, after they all sent:
 * unexpected messages, eager and rendezvous. */
static void test_wildcards(void)
{
    enum { PER = 6 };
    const size_t sizes[PER] = {0, 10, 8000, 9000, 100000, 3 << 20};
    if (rank) {
        uint8_t *b = malloc(sizes[PER - 1]);
        MPI_Request rq[PER];
        uint8_t *bufs[PER];
        for (int i = 0; i < PER; i++) {
            bufs[i] = malloc(sizes[i] + 1);
            fill(bufs[i], sizes[i], (unsigned)(rank * 100 + i));
            MPI_Isend(bufs[i], (int)sizes[i], MPI_BYTE, 0, 100 + i, MPI_COMM_WORLD, &rq[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Waitall(PER, rq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < PER; i++)
            free(bufs[i]);
        free(b);
        return;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* everything is on its way: most arrive unexpected */
    uint8_t *r = malloc(sizes[PER - 1]);
    int seen[64][PER] = {{0}};
    for (int k = 0; k < (size - 1) * PER; k++) {
        MPI_Status st;
        MPI_Recv(r, (int)sizes[PER - 1], MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                 &st);
        int i = st.MPI_TAG - 100, cnt;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        CHECK(i >= 0 && i < PER && st.MPI_SOURCE > 0 && st.MPI_SOURCE < size);
        if (i < 0 || i >= PER || st.MPI_SOURCE <= 0 || st.MPI_SOURCE >= 64) continue;
        /* non-overtaking: from one source, tags arrive in send order */
        for (int j = i + 1; j < PER; j++)
            CHECK(!seen[st.MPI_SOURCE][j]);
        seen[st.MPI_SOURCE][i] = 1;
        CHECK((size_t)cnt == sizes[i]);
        CHECK(bad(r, sizes[i], (unsigned)(st.MPI_SOURCE * 100 + i)) == 0);
    }
    free(r);
}

/* A message larger than the receive: MPI_ERR_TRUNCATE, the rest intact. */
static void test_truncate(void)
{
    const size_t sizes[2] = {5000, 2 << 20};
    for (int k = 0; k < 2; k++) {
        if (rank == 1) {
            uint8_t *s = malloc(sizes[k]);
            fill(s, sizes[k], 300 + k);
            MPI_Send(s, (int)sizes[k], MPI_BYTE, 0, 200 + k, MPI_COMM_WORLD);
            free(s);
        } else if (rank == 0) {
            size_t room = sizes[k] / 2;
            uint8_t *r = calloc(1, sizes[k]);
            MPI_Status st;
            int rc = MPI_Recv(r, (int)room, MPI_BYTE, 1, 200 + k, MPI_COMM_WORLD, &st);
            int cls = -1;
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE);
            CHECK(bad(r, room, 300 + k) == 0);
            CHECK(r[room] == 0);
            free(r);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* Windows of MPI_Isend/MPI_Irecv between pairs, many in flight at once. */
static void test_windows(void)
{
    enum { W = 64 };
    const size_t sizes[3] = {8, 16384, 262144};
    int peer = rank ^ 1;
    if (peer >= size) return;
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        uint8_t *sb = malloc(n * W), *rb = calloc(W, n);
        MPI_Request rq[2 * W];
        for (int i = 0; i < W; i++) {
            fill(sb + i * n, n, (unsigned)(rank * 1000 + i + s));
            MPI_Irecv(rb + i * n, (int)n, MPI_BYTE, peer, 400 + i, MPI_COMM_WORLD, &rq[i]);
        }
        for (int i = 0; i < W; i++)
            MPI_Isend(sb + i * n, (int)n, MPI_BYTE, peer, 400 + i, MPI_COMM_WORLD, &rq[W + i]);
        MPI_Waitall(2 * W, rq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < W; i++)
            CHECK(bad(rb + i * n, n, (unsigned)(peer * 1000 + i + s)) == 0);
        free(sb);
        free(rb);
    }
}

/* MPI_Probe/MPI_Iprobe (FI_PEEK) and MPI_Improbe/MPI_Mrecv (FI_PEEK|FI_CLAIM):
 * the size is learnt before the receive, for eager and rendezvous messages. */
static void test_probe(void)
{
    const size_t sizes[3] = {100, 9000, 1 << 20};
    if (rank == 1) {
        for (int k = 0; k < 3; k++) {
            uint8_t *s = malloc(sizes[k]);
            fill(s, sizes[k], 600 + k);
            MPI_Send(s, (int)sizes[k], MPI_BYTE, 0, 600 + k, MPI_COMM_WORLD);
            MPI_Send(s, (int)sizes[k], MPI_BYTE, 0, 700 + k, MPI_COMM_WORLD);
            free(s);
        }
    } else if (rank == 0) {
        for (int k = 0; k < 3; k++) {
            MPI_Status st;
            int flag = 0, cnt;
            while (!flag)
                MPI_Iprobe(MPI_ANY_SOURCE, 600 + k, MPI_COMM_WORLD, &flag, &st);
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK((size_t)cnt == sizes[k] && st.MPI_SOURCE == 1);
            uint8_t *r = calloc(1, sizes[k]);
            MPI_Recv(r, cnt, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
            CHECK(bad(r, sizes[k], 600 + k) == 0);
            MPI_Message msg;
            flag = 0;
            while (!flag)
                MPI_Improbe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK((size_t)cnt == sizes[k] && st.MPI_TAG == 700 + k);
            memset(r, 0, sizes[k]);
            MPI_Mrecv(r, cnt, MPI_BYTE, &msg, &st);
            CHECK(bad(r, sizes[k], 600 + k) == 0);
            free(r);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_collectives(void)
{
    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (long)size * (size + 1) / 2);
    const size_t n = 1 << 20;
    uint8_t *b = malloc(n);
    if (rank == 0) fill(b, n, 55);
    MPI_Bcast(b, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK(bad(b, n, 55) == 0);
    free(b);
    int *snd = malloc(sizeof(int) * size * 1000), *rcv = malloc(sizeof(int) * size * 1000);
    for (int i = 0; i < size * 1000; i++)
        snd[i] = rank * 1000000 + i;
    MPI_Alltoall(snd, 1000, MPI_INT, rcv, 1000, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 1000; i++)
            CHECK(rcv[p * 1000 + i] == p * 1000000 + rank * 1000 + i);
    free(snd);
    free(rcv);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* MPI_P2P_VERBOSE=1: each rank says which part it starts (where a hang is). */
    bool verbose = getenv("MPI_P2P_VERBOSE") != NULL;
    static const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {{"first contact", test_first_contact},
                 {"sizes", test_sizes},
                 {"wildcards", test_wildcards},
                 {"truncate", test_truncate},
                 {"windows", test_windows},
                 {"probe", test_probe},
                 {"collectives", test_collectives}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (verbose) fprintf(stderr, "rank %d: %s\n", rank, parts[i].name);
        parts[i].run();
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_p2p: %d ranks, %s\n", size, all ? "FAILED" : "ok");
    MPI_Finalize();
    return all ? 1 : 0;
}
