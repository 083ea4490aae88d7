/*
 * seal_victim.c - the job an attacker on the path goes after
 * (seal_attack.sh): two ranks on two namespace hosts, rank 0 writing into
 * rank 1's memory.
 *
 *   seal_victim DIR ROUNDS
 *
 * Traffic: ROUNDS rounds; in round i rank 0 PUTs 64 bytes and then 16 KiB
 * (a GSO run) of round i's marked bytes ("ULNET-SEAL-MARK." and the round)
 * into rank 1's region, then NAPs the same marked 64 bytes; rank 1 takes the
 * NAP, checks the NAP and the region hold round i's bytes exactly, and
 * answers with a NAP. Then rank 0 writes DIR/traffic_done, and both ranks
 * keep reading what arrives (their CQs polled) until DIR/attack_done
 * appears: the attacker's turn. Rank 1 then checks the forgery never showed
 * in its region and it still holds the last round's bytes (else it says
 * FORGED and exits 3), and ROUNDS more rounds show the job goes on.
 * Each rank ends with a line of its counters, and rank 1 prints its region
 * key at the start (the attacker looks for it in what it captured).
 */
#include "../integration/common.h"

#include <sys/stat.h>

#define REGION  65536u
#define SMALL   64u
#define BIG     16384u
#define MARK    "ULNET-SEAL-MARK."
#define FORGERY "FORGED BY THE PATH!!" /* what seal_attacker.py writes */

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static char dir[512];

static void marked(uint8_t *b, size_t n, unsigned round)
{
    char unit[32];
    snprintf(unit, sizeof unit, MARK "%08x", round); /* 24 bytes */
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)unit[i % 24];
}

static bool exists(const char *name)
{
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static void touch(const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECKF(f != NULL, "cannot create %s", p);
    fclose(f);
}

/* The next completion of op on the CQ (sends complete on it too). */
static struct uln_cqe take(int op, const char *what)
{
    for (;;) {
        struct uln_cqe e = t_cq_take1(cq, 30000, what);
        CHECK_CQE(&e, e.status == 0);
        if (e.op == op) return e;
        CHECK_CQE(&e, e.op == ULN_OP_PUT || e.op == ULN_OP_NAP);
    }
}

static void rounds(unsigned first, unsigned n, uint64_t rkey, uint8_t *region)
{
    static uint8_t small[SMALL], big[BIG];
    for (unsigned r = first; r < first + n; r++) {
        marked(small, SMALL, r);
        marked(big, BIG, r);
        if (J.rank == 0) {
            CHECK_OK(uln_put(ep, 1, small, SMALL, rkey, 0, r, 0));
            CHECK_OK(uln_put(ep, 1, big, BIG, rkey, 4096, r, 0));
            take(ULN_OP_PUT, "the small PUT");
            take(ULN_OP_PUT, "the big PUT"); /* both visible at rank 1 now */
            CHECK_OK(uln_nap(ep, 1, small, SMALL, r, 0));
            struct uln_cqe e = take(ULN_OP_NAP_RECV, "rank 1's answer");
            CHECK_CQE(&e, e.len == SMALL && !memcmp(e.data, small, SMALL));
            t_release(cq, &e);
        } else {
            struct uln_cqe e = take(ULN_OP_NAP_RECV, "rank 0's round");
            CHECKF(e.len == SMALL && !memcmp(e.data, small, SMALL), "round %u: NAP not as sent", r);
            t_release(cq, &e);
            CHECKF(!memcmp(region, small, SMALL) && !memcmp(region + 4096, big, BIG),
                   "round %u: region not as rank 0 wrote it", r);
            CHECK_OK(uln_nap(ep, 0, small, SMALL, r, 0));
        }
    }
}

/* Read what arrives until the attacker is done (its packets meet the
 * transport here). Rank 1 says as soon as the forgery is in its region
 * (DIR/forged_seen): under off the attacker sends it until then. Sealed, no
 * completion may come of the attack; under off a replayed or flipped NAP is
 * delivered (corrupted, perhaps): that is what off allows, so it is taken and
 * released, not judged. */
static bool wait_attack(const uint8_t *region, bool sealed)
{
    double deadline = t_now() + 120;
    bool seen = false;
    while (!exists("attack_done")) {
        if (J.rank == 1 && !seen && !memcmp(region, FORGERY, sizeof FORGERY - 1)) {
            touch("forged_seen");
            seen = true;
        }
        struct uln_cqe e;
        int r = uln_cq_poll(cq, &e, 1);
        CHECK(r >= 0);
        if (r > 0) {
            if (sealed)
                CHECK_CQE(&e, e.status == 0 && (e.op == ULN_OP_PUT || e.op == ULN_OP_NAP));
            else if (e.op == ULN_OP_NAP_RECV)
                t_release(cq, &e);
            continue;
        }
        CHECKF(t_now() < deadline, "no attack_done in %s", dir);
        uln_cq_wait(cq, 20);
    }
    return seen;
}

int main(int argc, char **argv)
{
    CHECKF(argc == 3, "usage: seal_victim DIR ROUNDS");
    snprintf(dir, sizeof dir, "%s", argv[1]);
    unsigned n = (unsigned)atoi(argv[2]);
    t_open(&J, 2);
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region reg;
    t_region_new(&J, &reg, T_KIND_MALLOC, REGION, ULN_ACCESS_REMOTE_WRITE);
    memset(reg.buf, 0, REGION);
    uint64_t keys[2];
    t_exchange(&J, ep, cq, &reg.key, 1, keys);
    if (J.rank == 1) printf("key rank1 %016llx\n", (unsigned long long)reg.key);

    rounds(0, n, keys[1], reg.buf);
    if (J.rank == 0) touch("traffic_done");
    const char *mode = getenv("ULN_SECURE");
    bool forged = wait_attack(reg.buf, !(mode && !strcmp(mode, "off")));
    if (J.rank == 1) {
        uint8_t last[SMALL];
        marked(last, SMALL, n - 1);
        if (forged || memcmp(reg.buf, last, SMALL) != 0) {
            struct uln_counters c;
            CHECK_OK(uln_counters_get(J.ctx, &c));
            printf("FORGED: rank 1's region was written by someone not in the job%s: now %.24s "
                   "(duplicates %llu, stale %llu, malformed %llu)\n",
                   forged ? " (" FORGERY " seen)" : "", (char *)reg.buf,
                   (unsigned long long)c.duplicates, (unsigned long long)c.stale,
                   (unsigned long long)c.malformed);
            fflush(stdout);
            _exit(3);
        }
    }
    t_barrier(&J); /* rank 0 writes on only once rank 1 has looked */
    rounds(n, n, keys[1], reg.buf);
    t_barrier(&J);
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    printf("counters rank=%d refused_auth=%llu stale=%llu duplicates=%llu malformed=%llu "
           "refused_job=%llu pkts_received=%llu\n",
           J.rank, (unsigned long long)c.refused_auth, (unsigned long long)c.stale,
           (unsigned long long)c.duplicates, (unsigned long long)c.malformed,
           (unsigned long long)c.refused_job, (unsigned long long)c.pkts_received);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    t_region_free(&J, &reg);
    return t_finish(&J);
}
