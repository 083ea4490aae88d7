/*
 * test_ring.c - the shared-memory ring on its own: a producer thread and a
 * consumer thread move 10^7 variable-length messages (argument 1 overrides the
 * count, for the slower TSan build); every message must arrive once, in order,
 * intact, including across wrap-around, while the consumer gives messages back
 * out of order. Plus single-threaded edge cases: full ring, largest message,
 * pad on wrap, a corrupt header.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ring.h"

#include "check.h"

#define RING_BYTES 16384u
static uint8_t *ring_mem;
static uint64_t n_msgs = 10000000;

static uint32_t size_of(uint64_t seq)
{
    /* Mostly small (one cell), sometimes several cells, now and then large,
     * so wrap-around and padding happen often. */
    uint64_t h = seq * 0x9e3779b97f4a7c15ull;
    unsigned r = (unsigned)(h >> 58);
    if (r < 48) return (uint32_t)(h >> 40) % 48 + 8;
    if (r < 62) return (uint32_t)(h >> 40) % 600 + 8;
    return (uint32_t)(h >> 40) % 3000 + 8;
}

static uint8_t byte_of(uint64_t seq, uint32_t i)
{
    return (uint8_t)(seq * 31 + i * 7);
}

static void *producer(void *arg)
{
    (void)arg;
    struct uln_ring_prod p;
    uln_ring_prod_init(&p, ring_mem, RING_BYTES);
    for (uint64_t seq = 0; seq < n_msgs; seq++) {
        uint32_t len = size_of(seq);
        uint8_t *d;
        while (!(d = uln_ring_reserve(&p, len))) {
        }
        memcpy(d, &seq, 8);
        for (uint32_t i = 8; i < len; i++)
            d[i] = byte_of(seq, i);
        uln_ring_commit(&p, 1, 0, len, (uint32_t)seq);
    }
    return NULL;
}

static int concurrent(void)
{
    pthread_t t;
    pthread_create(&t, NULL, producer, NULL);
    struct uln_ring_cons c;
    uln_ring_cons_init(&c, ring_mem, RING_BYTES);
    struct uln_msg *held[4];
    int n_held = 0, bad = 0, errors = 0;
    uint64_t expect = 0, rnd = 12345;
    while (expect < n_msgs) {
        struct uln_msg *m = uln_ring_peek(&c, &bad);
        if (bad) {
            errors++;
            break;
        }
        if (!m) continue;
        uint64_t seq;
        const uint8_t *d = (const uint8_t *)(m + 1);
        memcpy(&seq, d, 8);
        uint32_t len = size_of(expect);
        if (seq != expect || m->len != len || m->aux != (uint32_t)expect) {
            if (errors++ < 5)
                fprintf(stderr, "got seq %llu len %u, expected %llu len %u\n",
                        (unsigned long long)seq, m->len, (unsigned long long)expect, len);
        } else {
            for (uint32_t i = 8; i < len; i++)
                if (d[i] != byte_of(seq, i)) {
                    if (errors++ < 5)
                        fprintf(stderr, "seq %llu byte %u corrupt\n", (unsigned long long)seq, i);
                    break;
                }
        }
        expect++;
        /* Hold a few messages and give them back in a shuffled order, as users
         * releasing NAP completions out of order do. */
        held[n_held++] = m;
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        if (n_held == 4 || (rnd >> 62) == 0) {
            while (n_held) {
                rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
                int k = (int)((rnd >> 33) % (uint64_t)n_held);
                uln_ring_release(&c, held[k]);
                held[k] = held[--n_held];
            }
        }
    }
    while (n_held)
        uln_ring_release(&c, held[--n_held]);
    pthread_join(t, NULL);
    CHECK(errors == 0);
    CHECK(expect == n_msgs);
    CHECK(atomic_load(&c.ctrl->head) == c.read); /* everything given back */
    return errors;
}

static void edge_cases(void)
{
    static _Alignas(64) uint8_t mem[64 + 4096];
    memset(mem, 0, sizeof mem);
    struct uln_ring_prod p;
    struct uln_ring_cons c;
    uln_ring_prod_init(&p, mem, 4096);
    uln_ring_cons_init(&c, mem, 4096);
    int bad = 0;

    CHECK(uln_ring_peek(&c, &bad) == NULL && !bad); /* empty */
    /* Largest message fills the ring exactly; one more byte does not fit. */
    uint32_t maxp = uln_ring_max_payload(4096);
    CHECK(maxp == 4096 - 16);
    CHECK(uln_ring_reserve(&p, maxp + 1) == NULL);
    uint8_t *d = uln_ring_reserve(&p, maxp);
    CHECK(d != NULL);
    memset(d, 0xab, maxp);
    uln_ring_commit(&p, 7, 3, maxp, 99);
    CHECK(uln_ring_reserve(&p, 0) == NULL); /* full */
    struct uln_msg *m = uln_ring_peek(&c, &bad);
    CHECK(m && m->type == 7 && m->flags == 3 && m->len == maxp && m->aux == 99);
    CHECK(uln_ring_peek(&c, &bad) == NULL); /* handed out, not yet back */
    CHECK(uln_ring_reserve(&p, 0) == NULL); /* still full until released */
    uln_ring_release(&c, m);
    CHECK(uln_ring_reserve(&p, 0) != NULL);
    uln_ring_commit(&p, 1, 0, 0, 0);
    m = uln_ring_peek(&c, &bad);
    CHECK(m && m->len == 0);
    uln_ring_release(&c, m);

    /* Wrap: fill to 3 cells before the end, then a 4-cell message must be padded
     * over to the start and arrive whole. */
    uint64_t used = p.tail & p.mask;
    uint32_t fill_cells = (uint32_t)((4096 - used) / 64) - 3;
    d = uln_ring_reserve(&p, fill_cells * 64 - 16);
    CHECK(d != NULL);
    uln_ring_commit(&p, 2, 0, fill_cells * 64 - 16, 0);
    m = uln_ring_peek(&c, &bad);
    CHECK(m && m->type == 2);
    uln_ring_release(&c, m);
    d = uln_ring_reserve(&p, 200);
    CHECK(d != NULL && d == mem + 64 + 16); /* placed at the start */
    memset(d, 0x5c, 200);
    uln_ring_commit(&p, 3, 0, 200, 0);
    m = uln_ring_peek(&c, &bad);
    CHECK(m && m->type == 3 && m->len == 200 && ((uint8_t *)(m + 1))[199] == 0x5c);
    uln_ring_release(&c, m);
    CHECK(atomic_load(&c.ctrl->head) == p.tail);

    /* A header claiming more cells than the ring has left is refused, not
     * followed off the end of the ring. */
    d = uln_ring_reserve(&p, 8);
    struct uln_msg *h = (struct uln_msg *)(d - 16);
    uln_ring_commit(&p, 1, 0, 8, 0);
    h->cells = 60000;
    bad = 0;
    CHECK(uln_ring_peek(&c, &bad) == NULL && bad == 1);
}

int main(int argc, char **argv)
{
    if (argc > 1) n_msgs = strtoull(argv[1], NULL, 0);
    ring_mem = aligned_alloc(64, 64 + RING_BYTES);
    memset(ring_mem, 0, 64 + RING_BYTES);
    edge_cases();
    concurrent();
    free(ring_mem);
    printf("test_ring: %llu messages\n", (unsigned long long)n_msgs);
    return summary();
}
