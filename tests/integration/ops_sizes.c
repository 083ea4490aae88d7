/*
 * ops_sizes - every operation (NAP, NAP with ULN_INLINE, PUT, PUT with
 * immediate, GET) at every size where a copy loop, a ring wrap or a chunking
 * rule can be off by one: 0, 1, 63..65, 4095..4097 and 2^k-1, 2^k, 2^k+1 up to
 * 2^max_log2 (NAPs up to nap_max, ULN_INLINE up to inline_max).
 *
 * Each transfer is checked byte for byte at the destination against a pattern
 * derived from (source rank, job, offset), and the destination range is first
 * poisoned with the complement of the expected bytes, so a byte left unwritten
 * never passes. The bytes around the destination (a page each side) must keep
 * their canary value: a copy that runs long or starts early is caught even
 * when the data itself is right. Targets are both kinds of memory
 * (uln_mem_alloc and malloc + uln_mr_reg), since they travel by different
 * mechanisms. With N ranks, N-1 rounds make every rank initiator towards every
 * other rank while it is the target of a third one.
 *
 * Protocol: endpoint 0 carries initiator -> target traffic (data NAPs, PUTs,
 * GETs, "check" NAPs), endpoint 1 carries target -> initiator acks, so neither
 * side can confuse its peer's data with an ack. The initiator moves to job j+1
 * only after the target has checked job j and restored its canaries.
 *
 * usage: ops_sizes [max_log2 (default 26 = 64 MiB)]
 */
#include "common.h"

#define GUARD  4096 /* canary bytes checked on each side of a destination range */
#define CANARY 0xa5

#define MSG_CHECK 0x434845434bu /* "check job j": PUT data is placed */
#define MSG_ACK   0x41434bu     /* "job j checked at the target" */
#define MSG_DONE  0x444f4e45u   /* "no more jobs" */

enum { J_NAP, J_NAP_INLINE, J_PUT, J_PUT_IMM, J_GET };
static const char *jname[] = {"nap", "nap_inline", "put", "put_imm", "get"};

struct job {
    int op;
    int kind;
    size_t size;
};

struct msg {
    uint64_t magic;
    uint64_t j;
};

static struct job *jobs;
static int njobs;
static size_t max_size;

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void build_jobs(const struct uln_info *info)
{
    size_t sizes[256];
    int n = 0;
    const size_t fixed[] = {0, 1, 63, 64, 65, 4095, 4096, 4097};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i] <= max_size) sizes[n++] = fixed[i];
    for (int k = 1; ((size_t)1 << k) - 1 <= max_size; k++)
        for (int d = -1; d <= 1; d++) {
            size_t s = ((size_t)1 << k) + (size_t)(ptrdiff_t)d;
            if (s <= max_size) sizes[n++] = s;
        }
    qsort(sizes, (size_t)n, sizeof sizes[0], cmp_size);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || sizes[u - 1] != sizes[i]) sizes[u++] = sizes[i];
    jobs = calloc((size_t)u * 8, sizeof *jobs);
    CHECK(jobs != NULL);
    for (int i = 0; i < u; i++) {
        size_t s = sizes[i];
        if (s <= info->nap_max) jobs[njobs++] = (struct job){J_NAP, 0, s};
        if (s <= info->inline_max && s <= info->nap_max)
            jobs[njobs++] = (struct job){J_NAP_INLINE, 0, s};
        for (int k = 0; k < T_NKINDS; k++) {
            jobs[njobs++] = (struct job){J_PUT, k, s};
            jobs[njobs++] = (struct job){J_PUT_IMM, k, s};
            jobs[njobs++] = (struct job){J_GET, k, s};
        }
    }
}

/* Where job j lands: some page-aligned, some misaligned by 1..7 bytes. */
static size_t dst_off(int j)
{
    return GUARD + (j % 5 == 0 ? 0 : (size_t)(j * 3) % 8);
}
/* Where a GET reads from in the source region. */
static size_t get_off(int j)
{
    return (size_t)(j * 7) % 4096;
}

static uint64_t data_seed(int src, int dst, int j)
{
    return pat_seed(src, jobs[j].op + 1, ((uint64_t)dst << 32) | (uint64_t)j);
}
static uint64_t get_seed(int owner, int kind)
{
    return pat_seed(owner, 100 + kind, 0);
}
static uint64_t imm_of(int src, int j)
{
    return pat_seed(src, 99, (uint64_t)j);
}

static struct t_job J;
static struct uln_cq *cq;
static struct uln_ep *ep0, *ep1;
static struct t_region tgt[T_NKINDS];  /* PUT targets, canary-filled */
static struct t_region gsrc[T_NKINDS]; /* GET sources, pattern-filled */
static uint8_t *src;                   /* local PUT / NAP source */
static uint8_t *gdst;                  /* local GET destination, canary-filled */
static uint64_t *keys;                 /* keys[p * 4 + i]: tgt[0], tgt[1], gsrc[0], gsrc[1] */
static size_t tgt_len, gsrc_len, gdst_len;

static bool verbose; /* ULNTEST_IT_VERBOSE=1: time every job of 1 MiB or more */

static bool is_target_job(int op)
{
    return op == J_PUT || op == J_PUT_IMM;
}

/* Check [0, off) and [off + size, +GUARD) still hold the canary. */
static void check_canaries(const uint8_t *buf, size_t buflen, size_t off, size_t size,
                           const char *what, int j)
{
    CHECK_BYTES(buf, off, CANARY, "%s: before job %d (%s %s size %zu)", what, j, jname[jobs[j].op],
                t_kind_name(jobs[j].kind), jobs[j].size);
    size_t end = off + size, tail = buflen - end < GUARD ? buflen - end : GUARD;
    CHECK_BYTES(buf + end, tail, CANARY, "%s: after job %d (%s %s size %zu)", what, j,
                jname[jobs[j].op], t_kind_name(jobs[j].kind), jobs[j].size);
}

/* Target: poison the destination range of the next PUT-type job from `from`
 * with the complement of its data, before acking the job before it. */
static void target_prepare(int j, int from)
{
    for (; j < njobs; j++) {
        if (is_target_job(jobs[j].op)) {
            pat_poison((uint8_t *)tgt[jobs[j].kind].buf + dst_off(j), jobs[j].size,
                       data_seed(from, J.rank, j), 0);
            return;
        }
    }
}

/* Target: the data of PUT job j from `from` must be in place, nothing around
 * it touched; then the range goes back to canary. */
static void target_verify_put(int j, int from)
{
    struct t_region *r = &tgt[jobs[j].kind];
    uint8_t *b = r->buf;
    size_t off = dst_off(j);
    CHECK_PAT(b + off, jobs[j].size, data_seed(from, J.rank, j), 0,
              "target rank %d: job %d %s into %s size %zu from rank %d", J.rank, j,
              jname[jobs[j].op], t_kind_name(jobs[j].kind), jobs[j].size, from);
    check_canaries(b, r->len, off, jobs[j].size, "target region", j);
    memset(b + off, CANARY, jobs[j].size);
}

struct side {
    /* initiator */
    int to;
    int j;          /* current job */
    int pending;    /* local completions still expected for job j */
    bool need_ack;  /* waiting for the target's ack of job j */
    bool started;   /* job j has been posted */
    bool done_sent; /* MSG_DONE posted */
    bool init_done;
    struct msg out[4];
    /* target */
    int from;
    int tj;       /* next job expected from `from` (GET jobs skipped) */
    int acks_out; /* ack NAPs not completed yet */
    bool targ_done;
    struct msg acks[64];
    unsigned ack_slot;
    double last_event;
    double job_t0;
};

static int skip_gets(int j)
{
    while (j < njobs && jobs[j].op == J_GET)
        j++;
    return j;
}

static void post_job(struct side *s)
{
    int j = s->j;
    struct job *jb = &jobs[j];
    uint64_t seed = data_seed(J.rank, s->to, j);
    uint64_t ud = ((uint64_t)j << 8);
    s->started = true;
    s->pending = 1;
    s->need_ack = jb->op != J_GET;
    switch (jb->op) {
    case J_NAP:
        pat_fill(src, jb->size, seed, 0);
        CHECK_OK(uln_nap(ep0, s->to, src, jb->size, ud | 1, 0));
        break;
    case J_NAP_INLINE:
        pat_fill(src, jb->size, seed, 0);
        CHECK_OK(uln_nap(ep0, s->to, src, jb->size, ud | 1, ULN_INLINE));
        /* ULN_INLINE: the buffer is ours again on return. */
        pat_poison(src, jb->size, seed, 0);
        break;
    case J_PUT:
        pat_fill(src, jb->size, seed, 0);
        CHECK_OK(
            uln_put(ep0, s->to, src, jb->size, keys[s->to * 4 + jb->kind], dst_off(j), ud | 2, 0));
        /* No wait for the PUT: a NAP posted after a PUT to the same peer is
         * delivered only after the PUT's data is placed. */
        s->out[0] = (struct msg){MSG_CHECK, (uint64_t)j};
        CHECK_OK(uln_nap(ep0, s->to, &s->out[0], sizeof s->out[0], ud | 3, 0));
        s->pending = 2;
        break;
    case J_PUT_IMM:
        pat_fill(src, jb->size, seed, 0);
        CHECK_OK(uln_put_imm(ep0, s->to, src, jb->size, keys[s->to * 4 + jb->kind], dst_off(j),
                             imm_of(J.rank, j), ud | 4, 0));
        break;
    case J_GET:
        pat_poison(gdst + dst_off(j), jb->size, get_seed(s->to, jb->kind), get_off(j));
        CHECK_OK(uln_get(ep0, s->to, gdst + dst_off(j), jb->size, keys[s->to * 4 + 2 + jb->kind],
                         get_off(j), ud | 5, 0));
        break;
    }
}

static void finish_get(struct side *s)
{
    int j = s->j;
    struct job *jb = &jobs[j];
    CHECK_PAT(gdst + dst_off(j), jb->size, get_seed(s->to, jb->kind), get_off(j),
              "rank %d: job %d get from %s of rank %d size %zu", J.rank, j, t_kind_name(jb->kind),
              s->to, jb->size);
    check_canaries(gdst, gdst_len, dst_off(j), jb->size, "get destination", j);
    memset(gdst + dst_off(j), CANARY, jb->size);
}

static void initiator_advance(struct side *s)
{
    for (;;) {
        if (s->init_done) return;
        if (s->j >= njobs) {
            if (!s->done_sent) {
                s->out[1] = (struct msg){MSG_DONE, (uint64_t)njobs};
                CHECK_OK(uln_nap(ep0, s->to, &s->out[1], sizeof s->out[1], 0xd0e, 0));
                s->done_sent = true;
                s->pending = 1;
            }
            if (s->pending == 0) s->init_done = true;
            return;
        }
        if (!s->started) {
            post_job(s);
            return;
        }
        if (s->pending || s->need_ack) return;
        if (jobs[s->j].op == J_GET) finish_get(s);
        if (verbose && jobs[s->j].size >= (1u << 20))
            printf("rank%d: job %d %s %s size %zu: %.1f ms\n", J.rank, s->j, jname[jobs[s->j].op],
                   t_kind_name(jobs[s->j].kind), jobs[s->j].size, (t_now() - s->job_t0) * 1e3);
        s->j++;
        s->job_t0 = t_now();
        s->started = false;
    }
}

static void send_ack(struct side *s, uint64_t j)
{
    struct msg *m = &s->acks[s->ack_slot++ % 64];
    *m = (struct msg){MSG_ACK, j};
    CHECK_OK(uln_nap(ep1, s->from, m, sizeof *m, 0xac0000 + j, 0));
    s->acks_out++;
}

static void target_done_with(struct side *s, int j)
{
    s->tj = skip_gets(j + 1);
    target_prepare(s->tj, s->from);
    send_ack(s, (uint64_t)j);
}

static void on_nap_recv(struct side *s, const struct uln_cqe *e)
{
    if (e->ep == 1) {
        /* an ack for our current job */
        struct msg m;
        CHECK_CQE(e, e->peer == s->to && e->len == sizeof m);
        memcpy(&m, e->data, sizeof m);
        CHECKF(m.magic == MSG_ACK && m.j == (uint64_t)s->j && s->need_ack,
               "ack magic %#" PRIx64 " for job %" PRIu64 ", current job %d (need_ack %d)", m.magic,
               m.j, s->j, s->need_ack);
        s->need_ack = false;
        return;
    }
    CHECK_CQE(e, e->ep == 0 && e->peer == s->from);
    int j = s->tj;
    if (j >= njobs) {
        struct msg m;
        CHECK_CQE(e, e->len == sizeof m);
        memcpy(&m, e->data, sizeof m);
        CHECKF(m.magic == MSG_DONE && m.j == (uint64_t)njobs, "expected DONE, got %#" PRIx64,
               m.magic);
        s->targ_done = true;
        return;
    }
    struct job *jb = &jobs[j];
    if (jb->op == J_NAP || jb->op == J_NAP_INLINE) {
        CHECKF(e->len == jb->size, "job %d %s: NAP_RECV len %" PRIu64 ", sent %zu", j,
               jname[jb->op], e->len, jb->size);
        if (jb->size) CHECK(e->data != NULL);
        CHECK_PAT(e->data, jb->size, data_seed(s->from, J.rank, j), 0,
                  "rank %d: job %d %s size %zu from rank %d", J.rank, j, jname[jb->op], jb->size,
                  s->from);
        target_done_with(s, j);
    } else if (jb->op == J_PUT) {
        struct msg m;
        CHECK_CQE(e, e->len == sizeof m);
        memcpy(&m, e->data, sizeof m);
        CHECKF(m.magic == MSG_CHECK && m.j == (uint64_t)j,
               "expected CHECK for job %d, got magic %#" PRIx64 " job %" PRIu64, j, m.magic, m.j);
        target_verify_put(j, s->from);
        target_done_with(s, j);
    } else {
        t_print_cqe(stderr, "unexpected: ", e);
        t_fail(__FILE__, __LINE__, "NAP_RECV expected", "target expects job %d (%s), got a NAP", j,
               jname[jb->op]);
    }
}

static void on_put_remote(struct side *s, const struct uln_cqe *e)
{
    int j = s->tj;
    CHECKF(j < njobs && jobs[j].op == J_PUT_IMM, "PUT_REMOTE while expecting job %d (%s)", j,
           j < njobs ? jname[jobs[j].op] : "done");
    CHECK_CQE(e, e->ep == 0 && e->peer == s->from);
    CHECK_CQE(e, e->imm == imm_of(s->from, j));
    CHECK_CQE(e, e->offset == dst_off(j));
    CHECK_CQE(e, e->len == jobs[j].size);
    /* The data must be visible the moment the entry is seen. */
    target_verify_put(j, s->from);
    target_done_with(s, j);
}

static void on_local(struct side *s, const struct uln_cqe *e)
{
    if (e->ep == 1) {
        CHECK_CQE(e, e->op == ULN_OP_NAP && e->peer == s->from);
        CHECK(s->acks_out > 0);
        s->acks_out--;
        return;
    }
    CHECK_CQE(e, e->peer == s->to);
    if (e->user_data == 0xd0e) {
        CHECK_CQE(e, e->op == ULN_OP_NAP && s->done_sent && s->pending == 1);
        s->pending = 0;
        return;
    }
    int j = (int)(e->user_data >> 8), kind = (int)(e->user_data & 0xff);
    CHECKF(j == s->j && s->started && s->pending > 0,
           "completion for job %d while at job %d (pending %d)", j, s->j, s->pending);
    struct job *jb = &jobs[j];
    static const int want_op[] = {0, ULN_OP_NAP, ULN_OP_PUT, ULN_OP_NAP, ULN_OP_PUT, ULN_OP_GET};
    CHECK_CQE(e, kind >= 1 && kind <= 5 && e->op == want_op[kind]);
    CHECK_CQE(e, e->len == (kind == 3 ? sizeof(struct msg) : jb->size));
    s->pending--;
}

static void run_round(int round)
{
    struct side s = {0};
    s.to = (J.rank + round) % J.size;
    s.from = (J.rank - round + J.size) % J.size;
    s.tj = skip_gets(0);
    target_prepare(s.tj, s.from);
    t_barrier(&J); /* every target is prepared before any initiator posts */
    s.last_event = s.job_t0 = t_now();
    double t0 = t_now();
    while (!(s.init_done && s.targ_done && s.acks_out == 0)) {
        initiator_advance(&s);
        struct uln_cqe ev[16];
        int n = uln_cq_poll(cq, ev, 16);
        CHECKF(n >= 0, "uln_cq_poll: %d (%s)", n, t_errname(n));
        if (n == 0) {
            if (t_now() - s.last_event > 30)
                t_fail(__FILE__, __LINE__, "progress",
                       "round %d: nothing for 30 s; initiator at job %d/%d (%s %s size %zu, "
                       "pending %d, need_ack %d), target expects job %d from rank %d",
                       round, s.j, njobs, s.j < njobs ? jname[jobs[s.j].op] : "-",
                       s.j < njobs ? t_kind_name(jobs[s.j].kind) : "-",
                       s.j < njobs ? jobs[s.j].size : 0, s.pending, s.need_ack, s.tj, s.from);
            int w = uln_cq_wait(cq, 20);
            CHECKF(w == 0 || w == -ETIMEDOUT, "uln_cq_wait: %d (%s)", w, t_errname(w));
            continue;
        }
        s.last_event = t_now();
        for (int i = 0; i < n; i++) {
            struct uln_cqe *e = &ev[i];
            CHECK_CQE(e, e->status == 0);
            switch (e->op) {
            case ULN_OP_NAP_RECV:
                on_nap_recv(&s, e);
                t_release(cq, e);
                break;
            case ULN_OP_PUT_REMOTE:
                CHECK_CQE(e, e->user_data == 0);
                on_put_remote(&s, e);
                break;
            default:
                on_local(&s, e);
                break;
            }
        }
    }
    if (J.rank == 0)
        printf("rank0: round %d (to rank %d, from rank %d): %d jobs in %.2f s\n", round, s.to,
               s.from, njobs, t_now() - t0);
}

int main(int argc, char **argv)
{
    int max_log2 = argc > 1 ? atoi(argv[1]) : 26;
    max_size = ((size_t)1 << max_log2) + 1;
    t_open(&J, 0);
    verbose = t_env_int("ULNTEST_IT_VERBOSE", 0) != 0;
    CHECK(J.size >= 2);
    build_jobs(&J.info);

    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep0));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep1));
    CHECK(uln_ep_index(ep0) == 0 && uln_ep_index(ep1) == 1);

    tgt_len = GUARD + 8 + max_size + GUARD;
    gsrc_len = max_size + 4096;
    gdst_len = tgt_len;
    uint64_t mine[4];
    for (int k = 0; k < T_NKINDS; k++) {
        t_region_new(&J, &tgt[k], k, tgt_len, ULN_ACCESS_REMOTE_WRITE);
        memset(tgt[k].buf, CANARY, tgt_len);
        t_region_new(&J, &gsrc[k], k, gsrc_len, ULN_ACCESS_REMOTE_READ);
        pat_fill(gsrc[k].buf, gsrc_len, get_seed(J.rank, k), 0);
        mine[k] = tgt[k].key;
        mine[2 + k] = gsrc[k].key;
    }
    src = t_xmalloc(max_size);
    gdst = t_xmalloc(gdst_len);
    memset(gdst, CANARY, gdst_len);
    keys = calloc((size_t)J.size * 4, sizeof *keys);
    CHECK(keys != NULL);
    t_exchange(&J, ep0, cq, mine, 4, keys);

    if (J.rank == 0) printf("rank0: %d jobs per round, sizes up to %zu\n", njobs, max_size);
    double t0 = t_now();
    for (int round = 1; round < J.size; round++)
        run_round(round);

    /* The GET sources were only read: they must be intact. */
    for (int k = 0; k < T_NKINDS; k++)
        CHECK_PAT(gsrc[k].buf, gsrc_len, get_seed(J.rank, k), 0, "GET source %s after all",
                  t_kind_name(k));
    t_barrier(&J);
    if (J.rank == 0) printf("rank0: all rounds in %.2f s\n", t_now() - t0);
    for (int k = 0; k < T_NKINDS; k++) {
        t_region_free(&J, &tgt[k]);
        t_region_free(&J, &gsrc[k]);
    }
    CHECK_OK(uln_ep_close(ep0));
    CHECK_OK(uln_ep_close(ep1));
    CHECK_OK(uln_cq_close(cq));
    free(src);
    free(gdst);
    free(keys);
    free(jobs);
    return t_finish(&J);
}
