/*
 * mpi_osc.c - MPI one-sided communication over the provider: Open MPI's osc
 * rdma component on its ofi BTL, which drives the provider's FI_RMA and
 * FI_ATOMIC (fi_write/fi_read, fi_fetch_atomic, fi_compare_atomic) against
 * windows registered with fi_mr_reg. Every rank:
 *
 *   - fence epoch: MPI_Put of 1 Mi words to the next rank, all checked;
 *   - passive target: MPI_Get of them back, all checked;
 *   - MPI_Fetch_and_op(SUM) of 1 on a counter of rank 0, 2000 times, each
 *     fetched value above the last one this rank saw; the total exact;
 *   - MPI_Accumulate(SUM) of rank+1 to a word of rank 0, 100 times: exact;
 *   - a lock made of MPI_Compare_and_swap around a read-modify-write done
 *     with MPI_Get and MPI_Put: the counter it guards exact.
 *
 * Prints "mpi_osc: N ranks, ok" from rank 0 when everything held.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORDS (1 << 20)
#define FOPS  2000
#define ACCS  100
#define LOCKS 200

static int rank, size;
static int64_t *base; /* this rank's window */
static MPI_Win win;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "mpi_osc: rank %d: ", rank);                                               \
        fprintf(stderr, __VA_ARGS__);                                                              \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    } while (0)

/* Put to the next rank in a fence epoch, then get it back under a lock. */
static void put_get(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int64_t *loc = malloc(WORDS * sizeof(int64_t)), *got = calloc(WORDS, sizeof(int64_t));
    if (!loc || !got) FAIL("out of memory\n");
    for (int i = 0; i < WORDS; i++) {
        base[i] = -1;
        loc[i] = (int64_t)rank * WORDS + i;
    }
    MPI_Win_fence(0, win);
    MPI_Put(loc, WORDS, MPI_INT64_T, next, 0, WORDS, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < WORDS; i++)
        if (base[i] != (int64_t)prev * WORDS + i) FAIL("put: word %d is %ld\n", i, (long)base[i]);
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    MPI_Get(got, WORDS, MPI_INT64_T, next, 0, WORDS, MPI_INT64_T, win);
    MPI_Win_unlock(next, win);
    for (int i = 0; i < WORDS; i++)
        if (got[i] != loc[i]) FAIL("get: word %d is %ld\n", i, (long)got[i]);
    free(loc);
    free(got);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Words 0..3 of rank 0 zeroed by rank 0, seen by all after the barrier. */
static void zero_counters(void)
{
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    if (rank == 0) base[0] = base[1] = base[2] = base[3] = 0;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void fetch_and_op(void)
{
    int64_t one = 1, old, last = -1;
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < FOPS; i++) {
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 0, MPI_SUM, win);
        MPI_Win_flush(0, win);
        if (old <= last) FAIL("fetch_and_op fetched %ld after %ld\n", (long)old, (long)last);
        last = old;
    }
    int64_t v = rank + 1;
    for (int i = 0; i < ACCS; i++)
        MPI_Accumulate(&v, 1, MPI_INT64_T, 0, 1, 1, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A lock in word 2 of rank 0 (0: free, else the holder's rank + 1) guarding
 * a counter in word 3 that is read and written back non-atomically. */
static void cas_lock(void)
{
    int64_t me = rank + 1, zero = 0, res, c;
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < LOCKS; i++) {
        do {
            MPI_Compare_and_swap(&me, &zero, &res, MPI_INT64_T, 0, 2, win);
            MPI_Win_flush(0, win);
        } while (res != 0);
        MPI_Get(&c, 1, MPI_INT64_T, 0, 3, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        c++;
        MPI_Put(&c, 1, MPI_INT64_T, 0, 3, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        MPI_Compare_and_swap(&zero, &me, &res, MPI_INT64_T, 0, 2, win);
        MPI_Win_flush(0, win);
        if (res != me) FAIL("released a lock held by %ld\n", (long)res);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Win_allocate(WORDS * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                     &win);
    put_get();
    zero_counters();
    fetch_and_op();
    cas_lock();
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win); /* rank 0 reads its own words */
    if (rank == 0) {
        if (base[0] != (int64_t)FOPS * size) FAIL("fetch_and_op total %ld\n", (long)base[0]);
        if (base[1] != (int64_t)ACCS * size * (size + 1) / 2)
            FAIL("accumulate total %ld\n", (long)base[1]);
        if (base[3] != (int64_t)LOCKS * size) FAIL("locked counter %ld\n", (long)base[3]);
    }
    MPI_Win_unlock(rank, win);
    MPI_Win_free(&win);
    if (rank == 0) printf("mpi_osc: %d ranks, ok\n", size);
    MPI_Finalize();
    return 0;
}
