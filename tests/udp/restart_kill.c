/*
 * restart_kill.c - a peer killed mid-stream and started again as the same
 * rank: nothing the survivor owed its earlier life completes an operation
 * of the new one (docs/protocol.md, "Connection lives").
 *
 *   restart_kill            (no launcher: it is its own)
 *
 * The program is the launcher of a job of two, over udp on one host: it
 * makes the bootstrap board as ulnrun does and starts rank 0, the survivor,
 * and rank 1's first life. That life has a 64 MiB GET of rank 0's memory
 * being served, stops reading until rank 0 has spent its credit on it, puts
 * PUTs with immediate data, small GETs and NAPs in flight behind it (op ids
 * 0..48 in all) and kills itself (SIGKILL). Rank 0 then owes it every kind
 * of answer a restart must drop: the GET being served, the small GETs'
 * requests waiting in its ring, ACKs queued for want of credit, and - its
 * send queue of 4 makes that queue 8 long - PUT_DONEs in its ring behind
 * them. The launcher clears rank 1's slot of the board, as a launcher that
 * restarts ranks would, and starts rank 1 again: a new process on the same
 * ports (ULN_UDP_PORT), whose op ids count from 0 again, and which posts
 * its 49 operations at once (rank 0's key from the launcher), so that a
 * stray answer would find them open. Its hello, from a new epoch, tells
 * rank 0 of the restart (rel's RESET).
 *
 * Each new op is of the kind an old answer with its id would complete (the
 * engine matches op id and kind), with an outcome that answer cannot give:
 * where the old life PUT, a PUT with a wrong key (-ENOKEY; an owed ACK says
 * 0); where it did a GET - op 1 the 64 MiB one - a GET of other bytes;
 * where it sent a NAP, a PUT with immediate data. Every completion is
 * checked: exactly once, status, every byte. Rank 0 checks what it sees of
 * both lives: the old life's NAPs and PUTs at most once, in order, before
 * any of the new life's; the new life's all, exactly once; its own PUTs to
 * the old life end with 0 or -ECONNRESET; its PUTs and GETs to the new life
 * succeed, every byte checked. Each of the four drops in
 * uln_engine_forget_peer, left out, makes this test fail.
 */
#define _GNU_SOURCE
#include "../integration/common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "boot/board.h"
#include "core/internal.h"

#define A_LEN    (64u << 20) /* the old life's large GET */
#define B_OLD    A_LEN       /* small GETs' bytes, old life */
#define B_NEW    (B_OLD + (32u << 10))
#define C_OLD    (B_OLD + (64u << 10)) /* PUT targets */
#define C_NEW    (C_OLD + (64u << 10))
#define REGION   (C_NEW + (64u << 10))
#define NOPS     49          /* op ids 0..48 in each life */
#define SLOT     1024u       /* a PUT's bytes, at k x SLOT */
#define PEER_MEM (64u << 10) /* rank 1's region */
#define S_PUTS   4           /* rank 0's PUTs kept in flight to the old life */
#define S_PUT    (16u << 10)
#define NAPS_NEW 8

enum { P_A = 100, P_BOLD, P_BNEW, P_PUT, P_PEER, P_SPUT }; /* pattern ops */
enum { M_KEY = 1, M_DATA, M_DONE };                        /* what a NAP says */

struct msg {
    uint32_t life, kind, index, pad_;
    uint64_t key;
};

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep;
static int life;

/* What the old life's op k was: 0 the NAP with its key, 1 the large GET,
 * then PUT, GET, NAP in turn. */
static int old_kind(int k)
{
    if (k < 2) return k ? ULN_OP_GET : ULN_OP_NAP;
    return k % 3 == 2 ? ULN_OP_PUT : k % 3 == 0 ? ULN_OP_GET : ULN_OP_NAP;
}

/* The new life's op k, of the kind an answer owed to the old life's op k
 * would complete (the engine matches an answer to its op id and kind), so
 * that such an answer shows: a PUT with a wrong key where the old life PUT
 * (an ACK owed to that PUT would complete it with 0, not -ENOKEY); a GET of
 * other bytes where it did a GET (the old GET's data, owed or being served,
 * would land in this one's buffer); a PUT with immediate data where it sent
 * a NAP (nothing is owed to a NAP). */
static int new_kind(int k)
{
    if (old_kind(k) == ULN_OP_PUT) return -ENOKEY;
    return old_kind(k) == ULN_OP_GET ? ULN_OP_GET : ULN_OP_PUT;
}

static uint64_t imm_of(int l, int k)
{
    return (uint64_t)l << 32 | (uint32_t)k;
}

static void post(int rc, const char *what)
{
    CHECKF(rc == 0, "%s: %s", what, t_errname(rc));
}

static void send_msg(int peer, uint32_t kind, uint32_t index, uint64_t key)
{
    struct msg m = {.life = (uint32_t)life, .kind = kind, .index = index, .key = key};
    post(uln_nap(ep, peer, &m, sizeof m, 0, ULN_INLINE | ULN_SILENT), "uln_nap");
}

static struct msg recv_msg(struct uln_cqe *e)
{
    struct msg m;
    CHECK_CQE(e, e->op == ULN_OP_NAP_RECV && e->len == sizeof m);
    memcpy(&m, e->data, sizeof m);
    t_release(cq, e);
    return m;
}

/* ---- rank 0: the survivor ---------------------------------------------- */

static uint8_t *region;
static uint64_t s_key;

struct seen {
    int naps_old, naps_new;    /* NAPs of each life taken */
    int next_old;              /* the old life's next NAP index at least */
    int puts_old, puts_new;    /* PUTs with immediate data of each life */
    uint8_t put_seen[2][NOPS]; /* by life and op id */
    bool new_began;            /* a message of the new life came */
};
static struct seen sn;

/* A NAP or PUT_REMOTE from rank 1; returns the new life's message, if it
 * is one (kind 0 otherwise). */
static struct msg survivor_take(struct uln_cqe *e)
{
    struct msg none = {0};
    CHECK_CQE(e, e->peer == 1);
    if (e->op == ULN_OP_PUT_REMOTE) {
        int l = (int)(e->imm >> 32), k = (int)(uint32_t)e->imm;
        CHECK_CQE(e, (l == 0 || l == 1) && k >= 0 && k < NOPS &&
                         (l ? new_kind(k) == ULN_OP_PUT : old_kind(k) == ULN_OP_PUT));
        CHECK_CQE(e, !sn.put_seen[l][k]);      /* at most once */
        CHECK_CQE(e, l == 1 || !sn.new_began); /* the old life's before the new one's */
        uint32_t at = (l ? C_NEW : C_OLD) + (uint32_t)k * SLOT;
        CHECK_CQE(e, e->len == SLOT && e->offset == at);
        CHECK_PAT(region + at, SLOT, pat_seed(1, P_PUT + l * 10, (uint64_t)k), 0,
                  "life %d's PUT %d", l, k);
        sn.put_seen[l][k] = 1;
        if (l) {
            sn.puts_new++;
            sn.new_began = true;
        } else {
            sn.puts_old++;
        }
        return none;
    }
    struct msg m = recv_msg(e);
    CHECKF(m.life <= 1 && m.kind >= M_KEY && m.kind <= M_DONE, "a NAP of life %u, kind %u", m.life,
           m.kind);
    if (m.life == 0) {
        /* The old life's NAPs that arrived before it ended are delivered: at
         * most once each, in order, and before anything of the new life. */
        CHECKF(!sn.new_began, "NAP %u of the old life after the new life's first", m.index);
        CHECKF(m.kind == M_DATA && (int)m.index >= sn.next_old && m.index < NOPS &&
                   old_kind((int)m.index) == ULN_OP_NAP,
               "old life's NAP %u (kind %u), expected one from %d on", m.index, m.kind,
               sn.next_old);
        sn.next_old = (int)m.index + 1;
        sn.naps_old++;
        return none;
    }
    sn.new_began = true;
    return m;
}

static uint8_t got[8][4096]; /* our GETs of the new life's bytes */

static void our_op_done(struct uln_cqe x)
{
    CHECK_CQE(&x, x.status == 0 && (x.op == ULN_OP_PUT || x.op == ULN_OP_GET));
    if (x.op == ULN_OP_GET) {
        uint64_t i = x.user_data - 200;
        CHECK_CQE(&x, i < 8 && x.len == 4096);
        CHECK_PAT(got[i], 4096, pat_seed(1, P_PEER + 1, 0), i * 4096,
                  "our GET %" PRIu64 " of the new life's bytes", i);
    }
}

static void survivor(void)
{
    CHECK_OK(uln_mem_alloc(J.ctx, REGION, (void **)&region));
    pat_fill(region, A_LEN, pat_seed(0, P_A, 0), 0);
    pat_fill(region + B_OLD, 32u << 10, pat_seed(0, P_BOLD, 0), 0);
    pat_fill(region + B_NEW, 32u << 10, pat_seed(0, P_BNEW, 0), 0);
    memset(region + C_OLD, 0, 128u << 10);
    struct uln_mr *mr;
    CHECK_OK(
        uln_mr_reg(J.ctx, region, REGION, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mr));
    s_key = uln_mr_key(mr);
    /* The launcher hands our key to rank 1's next life, which so posts its
     * operations before it has heard from us. */
    int kfd = t_env_int("ULNTEST_KEY_FD", -1);
    CHECK(kfd >= 0 && write(kfd, &s_key, sizeof s_key) == (ssize_t)sizeof s_key);
    close(kfd);
    life = 0;
    send_msg(1, M_KEY, 0, s_key);
    struct uln_cqe e = t_cq_take1(cq, 30000, "the old life's key");
    struct msg m = recv_msg(&e);
    CHECK(m.life == 0 && m.kind == M_KEY);
    uint64_t old_key = m.key;
    t_barrier(&J);

    /* PUTs of ours kept in flight to the old life until they fail when the
     * new life's hello resets the connection; meanwhile, and then, all that
     * comes from either life, until the new one says it is done. */
    static uint8_t sput[S_PUTS][S_PUT];
    for (int i = 0; i < S_PUTS; i++)
        pat_fill(sput[i], S_PUT, pat_seed(0, P_SPUT, (uint64_t)i), 0);
    int out = 0, ok = 0, reset = 0, next = 0, naps = 0;
    uint64_t new_key = 0;
    bool done = false;
    double deadline = t_now() + 90;
    while (!done || out > 0) {
        while (!reset && !sn.new_began && out < S_PUTS) {
            int i = next++ % S_PUTS;
            post(uln_put(ep, 1, sput[i], S_PUT, old_key, (uint64_t)i * S_PUT, (uint64_t)i, 0),
                 "uln_put to the old life");
            out++;
        }
        struct uln_cqe x[16];
        int n = uln_cq_poll(cq, x, 16);
        CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
        for (int i = 0; i < n; i++) {
            if (x[i].op == ULN_OP_PUT) {
                CHECK_CQE(&x[i], x[i].status == 0 || x[i].status == -ECONNRESET);
                out--;
                ok += x[i].status == 0;
                reset += x[i].status == -ECONNRESET;
                continue;
            }
            struct msg nm = survivor_take(&x[i]);
            if (nm.kind == M_DATA) {
                CHECKF((int)nm.index == naps, "the new life's NAP %u, expected %d", nm.index, naps);
                naps++;
            } else if (nm.kind == M_KEY) {
                CHECK(new_key == 0 && nm.key != 0);
                new_key = nm.key;
            } else if (nm.kind == M_DONE) {
                done = true;
            }
        }
        if (n == 0) {
            CHECKF(t_now() < deadline,
                   "%d of our PUTs to the old life done, %d failed, %d out; from the new life %d "
                   "PUTs, %d NAPs%s",
                   ok, reset, out, sn.puts_new, naps, done ? ", done" : "");
            uln_cq_wait(cq, 50);
        }
    }
    CHECKF(reset > 0, "none of our PUTs in flight to the old life failed");
    life = 1; /* what we say from now on is for the new life */
    printf("rank0: our PUTs to the old life: %d done, %d failed with -ECONNRESET; from it %d "
           "NAPs and %d PUTs taken\n",
           ok, reset, sn.naps_old, sn.puts_old);
    CHECK(new_key != 0 && naps == NAPS_NEW);
    int want_puts = 0;
    for (int k = 0; k < NOPS; k++)
        want_puts += new_kind(k) == ULN_OP_PUT;
    CHECKF(sn.puts_new == want_puts, "%d PUTs with immediate data of the new life, expected %d",
           sn.puts_new, want_puts);

    /* Ours to the new life: PUTs into its second half, GETs of its first
     * (our send queue holds 4: ULN_SQ_DEPTH, below). */
    memset(got, 0, sizeof got);
    int taken = 0;
    for (int n = 0; n < 16; n++) {
        int i = n / 2, rc;
        while ((rc = n & 1 ? uln_get(ep, 1, got[i], 4096, new_key, (uint64_t)i * 4096,
                                     200 + (uint64_t)i, 0)
                           : uln_put(ep, 1, sput[i % S_PUTS], 4096, new_key,
                                     PEER_MEM / 2 + (uint64_t)i * 4096, 100 + (uint64_t)i, 0)) ==
               -EAGAIN)
            our_op_done(t_cq_take1(cq, 30000, "our operations on the new life")), taken++;
        post(rc, "our operation on the new life");
    }
    for (; taken < 16; taken++)
        our_op_done(t_cq_take1(cq, 30000, "our operations on the new life"));
    send_msg(1, M_DONE, 0, 0);
    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    printf("rank0: the new life's %d operations, %d NAPs and our 16 checked; stale %" PRIu64
           ", malformed %" PRIu64 ", refused_key %" PRIu64 "\n",
           NOPS, naps, c.stale, c.malformed, c.refused_key);
    CHECK_OK(uln_mr_dereg(mr));
}

/* ---- rank 1: each life ----------------------------------------------------- */

static uint8_t *mine;
static struct uln_mr *my_mr;

static void peer_region(void)
{
    CHECK_OK(uln_mem_alloc(J.ctx, PEER_MEM, (void **)&mine));
    pat_fill(mine, PEER_MEM, pat_seed(1, P_PEER + life, 0), 0);
    CHECK_OK(uln_mr_reg(J.ctx, mine, PEER_MEM, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE,
                        &my_mr));
}

static uint64_t wait_key(double secs)
{
    struct uln_cqe e = t_cq_take1(cq, (int)(secs * 1000), "rank 0's key");
    struct msg m = recv_msg(&e);
    CHECKF(m.life == (uint32_t)life && m.kind == M_KEY, "rank 0's key for life %d: life %u kind %u",
           life, m.life, m.kind);
    return m.key;
}

static void old_life(void)
{
    peer_region();
    uint64_t key = wait_key(30);
    CHECK(ep->sq_tail == 0);                  /* the first op id of a process's first endpoint */
    send_msg(0, M_KEY, 0, uln_mr_key(my_mr)); /* op 0 */
    t_barrier(&J);
    uint8_t *big = calloc(1, A_LEN);
    CHECK(big);
    post(uln_get(ep, 0, big, A_LEN, key, 0, 1, 0), "the large GET"); /* op 1 */
    /* Until some of it has come: then it is being served. */
    double deadline = t_now() + 30;
    for (;;) {
        struct uln_cqe e;
        int n = uln_cq_poll(cq, &e, 1);
        CHECKF(n == 0, "the old life got a completion (op %d) before its large GET was part served",
               n > 0 ? e.op : n);
        if (pat_find_diff(big, 4096, pat_seed(0, P_A, 0), 0) == SIZE_MAX) break;
        CHECKF(t_now() < deadline, "the large GET's first bytes never came");
    }
    /* Not reading for a while: rank 0 spends the credit we gave it on the
     * GET's data and then has none left for us - so the ACKs it will owe our
     * PUTs wait in its queue, where a restart must find and drop them. */
    t_sleep_ms(200);
    static uint8_t put[NOPS][SLOT], get[NOPS][SLOT];
    for (int k = 2; k < NOPS; k++) {
        switch (old_kind(k)) {
        case ULN_OP_PUT:
            pat_fill(put[k], SLOT, pat_seed(1, P_PUT, (uint64_t)k), 0);
            post(uln_put_imm(ep, 0, put[k], SLOT, key, C_OLD + (uint64_t)k * SLOT, imm_of(0, k),
                             (uint64_t)k, 0),
                 "old PUT");
            break;
        case ULN_OP_GET:
            post(uln_get(ep, 0, get[k], SLOT, key, B_OLD + (uint64_t)k * 256, (uint64_t)k, 0),
                 "old GET");
            break;
        default: {
            struct msg m = {.life = 0, .kind = M_DATA, .index = (uint32_t)k};
            post(uln_nap(ep, 0, &m, sizeof m, (uint64_t)k, ULN_INLINE), "old NAP");
        }
        }
    }
    CHECK(ep->sq_tail == NOPS);
    /* Out they go without our reading anything (a raw datagram through the
     * test hook sends what is queued first; rank 0 drops it as malformed):
     * read, the GET's data would give rank 0 credit again. Then die with
     * everything in flight. */
    static const uint8_t junk[8];
    CHECK_OK(uln_udp_send_raw(ep, 0, junk, sizeof junk));
    printf("rank1: first life: large GET part served, %d more operations in flight: killing "
           "myself\n",
           NOPS - 2);
    fflush(stdout);
    kill(getpid(), SIGKILL);
}

static void new_life(void)
{
    peer_region();
    /* Rank 0's key from the launcher: our operations go before we have
     * heard anything from rank 0, so that whatever it still owed the old
     * life would find them open. Our first packet's hello tells it of the
     * restart. */
    const char *ks = getenv("ULNTEST_S_KEY");
    CHECK(ks != NULL);
    uint64_t key = strtoull(ks, NULL, 16);
    CHECK(ep->sq_tail == 0); /* op ids from 0 again, as the old life's */
    static uint8_t buf[NOPS][4096], put[NOPS][SLOT];
    for (int k = 0; k < NOPS; k++) {
        pat_poison(buf[k], sizeof buf[k], pat_seed(0, P_BNEW, 0), (uint64_t)k * 256);
        pat_fill(put[k], SLOT, pat_seed(1, P_PUT + 10, (uint64_t)k), 0);
        switch (new_kind(k)) {
        case ULN_OP_GET:
            post(uln_get(ep, 0, buf[k], k == 1 ? 4096 : SLOT, key, B_NEW + (uint64_t)k * 256,
                         (uint64_t)k, 0),
                 "new GET");
            break;
        case ULN_OP_PUT:
            post(uln_put_imm(ep, 0, put[k], SLOT, key, C_NEW + (uint64_t)k * SLOT, imm_of(1, k),
                             (uint64_t)k, 0),
                 "new PUT");
            break;
        default:
            post(uln_put(ep, 0, put[k], SLOT, key ^ 0x5a5a0000ull, C_NEW, (uint64_t)k, 0),
                 "new PUT with a wrong key");
        }
    }
    uint8_t seen[NOPS] = {0};
    for (int n = 0; n < NOPS; n++) {
        struct uln_cqe e = t_cq_take1(cq, 30000, "the new life's operations");
        int k = (int)e.user_data;
        CHECK_CQE(&e, k >= 0 && k < NOPS && !seen[k]);
        seen[k] = 1;
        int kind = new_kind(k), want = kind == -ENOKEY ? -ENOKEY : 0;
        CHECK_CQE(&e, e.op == (kind == ULN_OP_GET ? ULN_OP_GET : ULN_OP_PUT));
        CHECKF(e.status == want,
               "op id %d (the old life's was a %s): status %s, expected %s - an answer owed to "
               "the old life?",
               k, t_opname(old_kind(k)), t_errname(e.status), t_errname(want));
        if (kind == ULN_OP_GET) {
            uint32_t len = k == 1 ? 4096 : SLOT;
            CHECK_CQE(&e, e.len == len);
            CHECK_PAT(buf[k], len, pat_seed(0, P_BNEW, 0), (uint64_t)k * 256,
                      "GET op id %d of the new life (the old life's was a %s)", k,
                      t_opname(old_kind(k)));
        }
    }
    t_cq_expect_empty(cq, 200, "no second completion of any op id");
    for (int i = 0; i < NAPS_NEW; i++)
        send_msg(0, M_DATA, (uint32_t)i, 0);
    send_msg(0, M_KEY, 0, uln_mr_key(my_mr));
    send_msg(0, M_DONE, 0, 0);
    struct uln_cqe e = t_cq_take1(cq, 60000, "rank 0's done");
    struct msg m = recv_msg(&e);
    CHECK(m.life == 1 && m.kind == M_DONE);
    for (int i = 0; i < 8; i++)
        CHECK_PAT(mine + PEER_MEM / 2 + i * 4096, 4096, pat_seed(0, P_SPUT, (uint64_t)(i % S_PUTS)),
                  0, "rank 0's PUT %d into the new life", i);
    printf("rank1: new life: op ids 0..%d again, each completed once by its own answer\n",
           NOPS - 1);
    CHECK_OK(uln_mr_dereg(my_mr));
}

static int rank_main(void)
{
    life = t_env_int("ULNTEST_LIFE", 0);
    t_open(&J, 2);
    CHECKF(J.info.udp_peers == 1, "this test needs ULN_TRANSPORT=udp");
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    if (J.rank == 0)
        survivor();
    else if (life == 0)
        old_life();
    else
        new_life();
    return t_finish(&J);
}

/* ---- the launcher ---------------------------------------------------------- */

static pid_t start(char *self, int rank, int l)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char r[16], lv[16];
        snprintf(r, sizeof r, "%d", rank);
        snprintf(lv, sizeof lv, "%d", l);
        setenv("ULN_RANK", r, 1);
        setenv("ULNTEST_LIFE", lv, 1);
        /* Rank 0's send queue of 4 makes its queue of ACKs to send 8 long:
         * of the old life's 16 PUTs, 8 PUT_DONEs wait in its ring behind
         * them when the new life comes - each must be told from the new
         * life's by the life it carries. */
        if (rank == 0) setenv("ULN_SQ_DEPTH", "4", 1);
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Two consecutive UDP ports nobody holds now, from a start that differs
 * between concurrent runs. */
static int free_ports(void)
{
    for (int base = 20000 + 2 * (getpid() % 10000), tries = 0; tries < 1000; tries++) {
        int fds[2] = {-1, -1}, ok = 1;
        for (int i = 0; i < 2; i++) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(base + i))};
            fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
            ok &= fds[i] >= 0 && bind(fds[i], (struct sockaddr *)&a, sizeof a) == 0;
        }
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0) close(fds[i]);
        if (ok) return base;
        base = base + 2 > 59998 ? 20000 : base + 2;
    }
    CHECKF(0, "no two free UDP ports");
    return -1;
}

static pid_t kids[2];

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "restart_kill: the job still runs after 150 s; ending it\n";
    (void)!write(2, m, sizeof m - 1);
    for (int i = 0; i < 2; i++)
        if (kids[i] > 0) kill(kids[i], SIGKILL);
    _exit(124);
}

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("ULN_RANK")) return rank_main();
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = uln_board_create(2);
    CHECKF(fd >= 0, "uln_board_create: %s", t_errname(fd));
    char v[32];
    snprintf(v, sizeof v, "%d", fd);
    setenv("ULN_BOOT_FD", v, 1);
    setenv("ULN_SIZE", "2", 1);
    uint64_t key = 0;
    CHECK(getentropy(&key, sizeof key) == 0);
    snprintf(v, sizeof v, "%016" PRIx64, key | 1);
    setenv("ULN_JOB_KEY", v, 1);
    setenv("ULN_TRANSPORT", "udp", 1);
    /* The new life must come on the old one's ports (one endpoint each: a
     * port per rank), and be found by its hello, not given up for silence
     * first. Ports free now, so that no other job's socket makes the new
     * life take the next ones. */
    setenv("ULN_MAX_EPS", "1", 1);
    snprintf(v, sizeof v, "%d", free_ports());
    setenv("ULN_UDP_PORT", v, 1);
    setenv("ULN_UDP_DEAD_MS", "60000", 1);
    signal(SIGALRM, on_alarm);
    alarm(150);
    int kp[2];
    CHECK(pipe(kp) == 0);
    snprintf(v, sizeof v, "%d", kp[1]);
    setenv("ULNTEST_KEY_FD", v, 1);

    pid_t survivor_pid = kids[0] = start(argv[0], 0, 0), pid = kids[1] = start(argv[0], 1, 0);
    close(kp[1]);
    uint64_t s_key_got = 0;
    CHECKF(read(kp[0], &s_key_got, sizeof s_key_got) == (ssize_t)sizeof s_key_got,
           "rank 0 did not say its key");
    snprintf(v, sizeof v, "%016" PRIx64, s_key_got);
    setenv("ULNTEST_S_KEY", v, 1);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "rank 1's first life ended with status %d",
           status_of(st));
    /* What a launcher that restarts a rank does: its slot is free again. */
    struct uln_board_hdr *b =
        mmap(NULL, uln_board_bytes(2), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(b != MAP_FAILED);
    atomic_store(&uln_board_slot(b, 1)->ready, 0);
    atomic_fetch_sub(&b->arrived, 1);
    pid = kids[1] = start(argv[0], 1, 1);
    int bad = 0;
    for (int left = 2; left > 0; left--) {
        pid_t p = wait(&st);
        CHECK(p == pid || p == survivor_pid);
        if (status_of(st) != 0) {
            fprintf(stderr, "restart_kill: %s exited with status %d\n",
                    p == pid ? "rank 1's new life" : "rank 0", status_of(st));
            bad = 1;
            kill(p == pid ? survivor_pid : pid, SIGKILL);
        }
    }
    printf("restart_kill: rank 1 killed and started again; %s\n", bad ? "FAILED" : "passed");
    return bad;
}
