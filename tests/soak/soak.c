/*
 * soak - random operations between every pair of ranks for a while, every
 * byte checked; bench/soak runs it for minutes, ctest for seconds.
 *
 *   ulnrun -n N soak [--seconds S] [--seed X] [--max-size BYTES] [--quiet]
 *
 * Each rank opens three endpoints (0 and 1 share a CQ, 2 has a send and a
 * receive CQ of its own) and two kinds of target memory (uln_mem_alloc and
 * malloc'd, registered). Until the time is up it posts, at random, to random
 * peers and endpoints, with sizes from 0 up to --max-size (log-uniform, so
 * mostly small):
 *   NAP      header (source, endpoint, sequence) and a pattern of (source,
 *            target, endpoint, sequence); the receiver checks order and bytes
 *   PUT      into the target's slot for (source, endpoint, kind); when it
 *            completes, a GET of the same range checks that the data is there
 *   put_imm  into another such slot; the target checks the bytes when
 *            PUT_REMOTE arrives, then gives the slot back with a CREDIT NAP
 *   GET      of a random range of the target's read area (a fixed pattern)
 *   flush    on one endpoint: every operation posted there before it must
 *            have completed when its completion arrives
 * Waits are mixed: polls of every CQ, and uln_cq_wait on one of them with a
 * short timeout. Sources are malloc'd or uln_mem_alloc'd, some NAPs and small
 * PUTs ULN_INLINE. At the end each rank sends END on every endpoint to every
 * peer (the number of NAPs it sent there: the receiver must have taken
 * exactly those), then its statistics to rank 0, which prints the job's
 * totals. Any bad byte, status, order or count is an error: reported (the
 * first few in detail), counted, and the exit status is non-zero.
 */
#include "../integration/common.h"

#include <getopt.h>
#include <math.h>

#define NEPS       3
#define MAX_OPS    96 /* outstanding operations per rank */
#define HDR_MAGIC  0x534f414bu
#define SEED_BASE  0x50a6000000000000ull
#define QUIET_ERRS 10

enum { K_SHM, K_HEAP, NKINDS };
enum { M_DATA = 1, M_CREDIT, M_END, M_STATS };
enum { O_NAP, O_PUT, O_PUT_IMM, O_GET, O_FLUSH, O_VERIFY, O_CTL, NOPS };
static const char *op_names[NOPS] = {"nap", "put", "put_imm", "get", "flush", "verify", "ctl"};

struct hdr { /* at the start of every NAP */
    uint32_t magic;
    uint16_t type, ep;
    int32_t src;
    uint32_t kind;
    uint64_t seq, len;
};
_Static_assert(sizeof(struct hdr) == 32, "32-byte NAP header");

struct stats {
    uint64_t ops[NOPS], bytes[NOPS];
    uint64_t naps_received, nap_bytes_received, imm_checked, imm_bytes_checked;
    uint64_t errors, eagain, retransmits, waits, polls;
};

struct op {
    int kind; /* O_* */
    int ep, peer, mkind;
    uint64_t len, roff, seq;
    uint8_t *buf;    /* malloc'd source or destination, or NULL */
    bool shm_buf;    /* buf is from uln_mem_alloc */
    int slot;        /* PUT / put_imm: the slot it holds (index into busy[]) */
    uint64_t marker; /* flush: operations on ep posted before it */
    bool pending;    /* verify: its GET is still to be posted (queue was full) */
    bool used;
};

static struct t_job J;
static int N, me;
static uint64_t max_size = 2u << 20, rng;
static bool quiet;
static struct uln_cq *cqs[3]; /* 0: eps 0 and 1; 1: ep 2 send; 2: ep 2 receive */
static struct uln_ep *eps[NEPS];
static struct op ops[MAX_OPS];
static int n_out;
static struct stats st;
static uint64_t posted[NEPS], done[NEPS];

/* Target memory, per kind: read area, then a PUT slot and a put_imm slot for
 * each (source, endpoint). */
static uint8_t *mem[NKINDS];
static size_t mem_len;
static struct uln_mr *mrs[NKINDS];
static uint64_t *keys; /* [rank * NKINDS + kind] */
static size_t read_len;

/* Slots this rank writes at its peers: busy until verified / credited. */
static uint8_t *busy;                      /* [(peer * NEPS + ep) * NKINDS + kind] * 2 + imm */
static uint64_t *nap_seq_out, *nap_seq_in; /* [peer * NEPS + ep] */
static uint64_t put_seq;
static int *ended; /* [peer * NEPS + ep]: END received */
static int ends_got, stats_got;
static struct stats total;
static uint64_t last_progress_ns;

/* Pending control NAPs (credits), sent when the queue has room. */
struct ctl {
    int ep, peer;
    struct hdr h;
};
static struct ctl *ctlq;
static int ctl_head, ctl_tail, ctl_cap;

static uint64_t rnd(void)
{
    return t_rand(&rng);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* 0..max, log-uniform: as many sizes under 64 B as between 1 and 2 MiB. */
static uint64_t rnd_size(uint64_t max)
{
    if (max == 0) return 0;
    int bits = 64 - __builtin_clzll(max);
    int b = (int)(rnd() % (uint64_t)(bits + 1));
    if (b == 0) return 0;
    uint64_t lim = b >= 63 ? max : (1ull << b);
    if (lim > max) lim = max;
    return rnd() % (lim + 1);
}

static void err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void err(const char *fmt, ...)
{
    st.errors++;
    if (st.errors > QUIET_ERRS) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: soak error: ", me);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t seed_of(int src, int dst, int ep, int what, uint64_t seq)
{
    return pat_mix(SEED_BASE ^ ((uint64_t)(uint32_t)src << 40) ^ ((uint64_t)(uint32_t)dst << 20) ^
                   ((uint64_t)ep << 16) ^ ((uint64_t)what << 12) ^ pat_mix(seq));
}

static uint64_t read_seed(int owner, int kind)
{
    return seed_of(owner, owner, 0, 15, (uint64_t)kind);
}

static size_t slot_off(int src, int ep, bool imm)
{
    return read_len + (((size_t)src * NEPS + (size_t)ep) * 2 + imm) * max_size;
}

static int slot_index(int peer, int ep, int kind, bool imm)
{
    return (((peer * NEPS) + ep) * NKINDS + kind) * 2 + imm;
}

/* Compare with the pattern bytes base..base+len of seed. */
static void check_pat(const uint8_t *p, uint64_t len, uint64_t seed, uint64_t base,
                      const char *what, int peer, uint64_t seq)
{
    size_t d = pat_find_diff(p, len, seed, base);
    if (d != SIZE_MAX)
        err("%s (peer %d, seq %" PRIu64 ", %" PRIu64 " bytes): byte %zu is %#x, expected %#x", what,
            peer, seq, len, d, p[d], pat_byte(seed, base + d));
}

/* ---- buffers -------------------------------------------------------------- */

static uint8_t *buf_get(uint64_t len, bool *shm)
{
    /* A third of the larger sources come from uln_mem_alloc. */
    *shm = len >= 4096 && rnd() % 3 == 0;
    void *p = NULL;
    if (*shm) {
        CHECK_OK(uln_mem_alloc(J.ctx, len, &p));
    } else {
        p = malloc(len ? len : 1);
        CHECK(p != NULL);
    }
    return p;
}

static void buf_put(uint8_t *p, bool shm)
{
    if (!p) return;
    if (shm)
        CHECK_OK(uln_mem_free(J.ctx, p));
    else
        free(p);
}

static struct op *op_new(int kind, int ep, int peer)
{
    for (int i = 0; i < MAX_OPS; i++)
        if (!ops[i].used) {
            ops[i] = (struct op){.kind = kind, .ep = ep, .peer = peer, .used = true, .slot = -1};
            n_out++;
            return &ops[i];
        }
    return NULL;
}

static void op_free(struct op *o)
{
    buf_put(o->buf, o->shm_buf);
    o->buf = NULL;
    o->used = false;
    n_out--;
}

static uint64_t ud_of(const struct op *o)
{
    return (uint64_t)(o - ops) + 1;
}

/* ---- posting ---------------------------------------------------------------- */

static int post_nap_hdr(int ep, int peer, const struct hdr *h, const void *payload, uint64_t plen,
                        struct op *o, bool inl)
{
    uint64_t len = sizeof *h + plen;
    uint8_t *b;
    if (inl) {
        uint8_t tmp[256];
        memcpy(tmp, h, sizeof *h);
        if (plen) memcpy(tmp + sizeof *h, payload, plen);
        return uln_nap(eps[ep], peer, tmp, len, ud_of(o), ULN_INLINE);
    }
    b = o->buf;
    memcpy(b, h, sizeof *h);
    return uln_nap(eps[ep], peer, b, len, ud_of(o), 0);
}

/* What a post returned: -EAGAIN gives the entry back (and is counted), 0
 * counts the operation as posted on its endpoint, moving `bytes`. True when
 * it was posted. */
static bool post_taken(struct op *o, int rc, uint64_t bytes)
{
    if (rc == -EAGAIN) {
        op_free(o);
        st.eagain++;
        return false;
    }
    CHECK_OK(rc);
    posted[o->ep]++;
    st.ops[o->kind]++;
    st.bytes[o->kind] += bytes;
    return true;
}

static bool post_nap(int ep, int peer)
{
    uint32_t cap = J.info.nap_max;
    uint64_t plen = rnd_size(cap - sizeof(struct hdr));
    bool inl = sizeof(struct hdr) + plen <= J.info.inline_max && rnd() % 2;
    struct op *o = op_new(O_NAP, ep, peer);
    if (!o) return false;
    uint64_t seq = nap_seq_out[peer * NEPS + ep];
    struct hdr h = {
        .magic = HDR_MAGIC, .type = M_DATA, .ep = (uint16_t)ep, .src = me, .seq = seq, .len = plen};
    o->len = sizeof h + plen;
    o->buf = buf_get(o->len, &o->shm_buf);
    pat_fill(o->buf + sizeof h, plen, seed_of(me, peer, ep, M_DATA, seq), 0);
    if (!post_taken(o, post_nap_hdr(ep, peer, &h, o->buf + sizeof h, plen, o, inl), plen))
        return false;
    if (inl) { /* the buffer is free at once */
        buf_put(o->buf, o->shm_buf);
        o->buf = NULL;
    }
    nap_seq_out[peer * NEPS + ep]++;
    return true;
}

static bool post_put(int ep, int peer, bool imm)
{
    int mk = (int)(rnd() % NKINDS), slot = slot_index(peer, ep, mk, imm);
    if (busy[slot]) return false;
    struct op *o = op_new(imm ? O_PUT_IMM : O_PUT, ep, peer);
    if (!o) return false;
    uint64_t len = rnd_size(max_size), seq = ++put_seq;
    o->mkind = mk;
    o->len = len;
    o->seq = seq;
    o->roff = slot_off(me, ep, imm) + rnd() % (max_size - len + 1);
    o->buf = buf_get(len, &o->shm_buf);
    pat_fill(o->buf, len, seed_of(me, peer, ep, imm ? O_PUT_IMM : O_PUT, seq), 0);
    uint64_t key = keys[peer * NKINDS + mk];
    bool inl = !imm && len <= J.info.inline_max && rnd() % 2;
    int rc =
        imm ? uln_put_imm(eps[ep], peer, o->buf, len, key, o->roff, seq << 8 | (uint64_t)mk,
                          ud_of(o), 0)
            : uln_put(eps[ep], peer, o->buf, len, key, o->roff, ud_of(o), inl ? ULN_INLINE : 0);
    if (!post_taken(o, rc, len)) return false;
    o->slot = slot;
    busy[slot] = 1;
    return true;
}

static bool post_get(int ep, int peer)
{
    int mk = (int)(rnd() % NKINDS);
    struct op *o = op_new(O_GET, ep, peer);
    if (!o) return false;
    uint64_t len = rnd_size(read_len);
    o->mkind = mk;
    o->len = len;
    o->roff = rnd() % (read_len - len + 1);
    o->buf = buf_get(len, &o->shm_buf);
    pat_poison(o->buf, len, read_seed(peer, mk), o->roff);
    return post_taken(
        o, uln_get(eps[ep], peer, o->buf, len, keys[peer * NKINDS + mk], o->roff, ud_of(o), 0),
        len);
}

/* After a PUT completed (its data is visible at the target), the same
 * operation entry reads the range back; the slot stays ours until then. */
static void try_verify(struct op *o)
{
    int rc = uln_get(eps[o->ep], o->peer, o->buf, o->len, keys[o->peer * NKINDS + o->mkind],
                     o->roff, ud_of(o), 0);
    if (rc == -EAGAIN) {
        o->pending = true;
        st.eagain++;
        return;
    }
    CHECK_OK(rc);
    o->pending = false;
    posted[o->ep]++;
    st.ops[O_VERIFY]++;
    st.bytes[O_VERIFY] += o->len;
}

static void start_verify(struct op *o)
{
    buf_put(o->buf, o->shm_buf);
    o->kind = O_VERIFY;
    o->buf = buf_get(o->len, &o->shm_buf);
    pat_poison(o->buf, o->len, seed_of(me, o->peer, o->ep, O_PUT, o->seq), 0);
    try_verify(o);
}

static bool post_flush(int ep)
{
    struct op *o = op_new(O_FLUSH, ep, me);
    if (!o) return false;
    o->marker = posted[ep];
    return post_taken(o, uln_ep_flush(eps[ep], ud_of(o)), 0);
}

static void ctl_push(int ep, int peer, struct hdr h)
{
    if (ctl_tail - ctl_head == ctl_cap) {
        int cap = ctl_cap ? ctl_cap * 2 : 64;
        struct ctl *q = calloc((size_t)cap, sizeof *q);
        CHECK(q != NULL);
        for (int i = 0; i < ctl_tail - ctl_head; i++)
            q[i] = ctlq[(ctl_head + i) % ctl_cap];
        ctl_tail -= ctl_head;
        ctl_head = 0;
        free(ctlq);
        ctlq = q;
        ctl_cap = cap;
    }
    ctlq[ctl_tail++ % ctl_cap] = (struct ctl){.ep = ep, .peer = peer, .h = h};
}

/* Control NAPs (header only, ULN_INLINE) go out in order, when there is room. */
static void ctl_send(void)
{
    while (ctl_head != ctl_tail) {
        struct ctl *c = &ctlq[ctl_head % ctl_cap];
        struct op *o = op_new(O_CTL, c->ep, c->peer);
        if (!o) return;
        if (!post_taken(o, post_nap_hdr(c->ep, c->peer, &c->h, NULL, 0, o, true), 0)) return;
        ctl_head++;
    }
}

/* ---- completions -------------------------------------------------------------- */

static void on_send(const struct uln_cqe *e)
{
    if (e->user_data == 0 || e->user_data > MAX_OPS || !ops[e->user_data - 1].used) {
        err("completion of an unknown operation (user_data %" PRIu64 ")", e->user_data);
        return;
    }
    struct op *o = &ops[e->user_data - 1];
    if (e->ep != o->ep)
        err("%s completed on endpoint %u, posted on %d", op_names[o->kind], e->ep, o->ep);
    done[o->ep]++;
    if (e->status != 0) {
        err("%s to rank %d (%" PRIu64 " bytes) failed: %s", op_names[o->kind], o->peer, o->len,
            t_errname(e->status));
        if (o->slot >= 0) busy[o->slot] = 0;
        op_free(o);
        return;
    }
    switch (o->kind) {
    case O_PUT:
        start_verify(o); /* the entry lives on as the read-back */
        return;
    case O_PUT_IMM:
        break; /* the slot stays busy until the target's CREDIT */
    case O_GET:
        check_pat(o->buf, o->len, read_seed(o->peer, o->mkind), o->roff, "GET", o->peer, 0);
        break;
    case O_VERIFY:
        check_pat(o->buf, o->len, seed_of(me, o->peer, o->ep, O_PUT, o->seq), 0, "PUT read back",
                  o->peer, o->seq);
        busy[o->slot] = 0;
        break;
    case O_FLUSH:
        /* Completions of one endpoint arrive in posting order: all before
         * the flush are in already. */
        if (done[o->ep] - 1 != o->marker)
            err("flush on endpoint %d completed with %" PRIu64 " of %" PRIu64
                " earlier operations done",
                o->ep, done[o->ep] - 1, o->marker);
        break;
    default:
        break;
    }
    op_free(o);
}

static void on_nap(struct uln_cq *cq, const struct uln_cqe *e)
{
    struct hdr h;
    if (e->len < sizeof h) {
        err("NAP of %" PRIu64 " bytes from rank %d: shorter than its header", e->len, e->peer);
        t_release(cq, e);
        return;
    }
    memcpy(&h, e->data, sizeof h);
    int src = e->peer, ep = e->ep;
    if (h.magic != HDR_MAGIC || h.src != src || h.ep != ep || h.len != e->len - sizeof h) {
        err("NAP header from rank %d on endpoint %d: magic %#x src %d ep %u len %" PRIu64, src, ep,
            h.magic, h.src, h.ep, h.len);
        t_release(cq, e);
        return;
    }
    uint64_t *next = &nap_seq_in[src * NEPS + ep];
    switch (h.type) {
    case M_DATA:
        st.naps_received++;
        if (h.seq != *next)
            err("NAP from rank %d on endpoint %d: sequence %" PRIu64 ", expected %" PRIu64, src, ep,
                h.seq, *next);
        *next = h.seq + 1;
        check_pat((const uint8_t *)e->data + sizeof h, h.len, seed_of(src, me, ep, M_DATA, h.seq),
                  0, "NAP", src, h.seq);
        st.nap_bytes_received += h.len;
        break;
    case M_CREDIT: {
        int slot = slot_index(src, ep, (int)h.kind, true);
        if (!busy[slot]) err("CREDIT from rank %d for a slot not in use", src);
        busy[slot] = 0;
        break;
    }
    case M_END:
        if (h.seq != *next)
            err("END from rank %d on endpoint %d: it sent %" PRIu64 " NAPs, %" PRIu64 " arrived",
                src, ep, h.seq, *next);
        if (ended[src * NEPS + ep]++) err("two ENDs from rank %d on endpoint %d", src, ep);
        ends_got++;
        break;
    case M_STATS: {
        struct stats s;
        if (me != 0 || h.len != sizeof s) {
            err("statistics of %" PRIu64 " bytes from rank %d", h.len, src);
            break;
        }
        memcpy(&s, (const uint8_t *)e->data + sizeof h, sizeof s);
        for (int i = 0; i < NOPS; i++) {
            total.ops[i] += s.ops[i];
            total.bytes[i] += s.bytes[i];
        }
        total.naps_received += s.naps_received;
        total.nap_bytes_received += s.nap_bytes_received;
        total.imm_checked += s.imm_checked;
        total.imm_bytes_checked += s.imm_bytes_checked;
        total.errors += s.errors;
        total.eagain += s.eagain;
        total.retransmits += s.retransmits;
        total.waits += s.waits;
        total.polls += s.polls;
        stats_got++;
        break;
    }
    default:
        err("NAP of unknown type %u from rank %d", h.type, src);
    }
    t_release(cq, e);
}

static void on_put_remote(const struct uln_cqe *e)
{
    int mk = (int)(e->imm & 0xff), src = e->peer, ep = e->ep;
    uint64_t seq = e->imm >> 8;
    size_t lo = slot_off(src, ep, true);
    if (mk >= NKINDS || e->offset < lo || e->offset + e->len > lo + max_size) {
        err("PUT_REMOTE from rank %d: kind %d, %" PRIu64 " bytes at %" PRIu64 " outside its slot",
            src, mk, e->len, e->offset);
        return;
    }
    check_pat(mem[mk] + e->offset, e->len, seed_of(src, me, ep, O_PUT_IMM, seq), 0, "put_imm", src,
              seq);
    st.imm_checked++;
    st.imm_bytes_checked += e->len;
    ctl_push(ep, src,
             (struct hdr){.magic = HDR_MAGIC,
                          .type = M_CREDIT,
                          .ep = (uint16_t)ep,
                          .src = me,
                          .kind = (uint32_t)mk,
                          .seq = seq});
}

static int take(struct uln_cq *cq)
{
    struct uln_cqe e[16];
    int n = uln_cq_poll(cq, e, 16);
    CHECKF(n >= 0, "uln_cq_poll: %s", t_errname(n));
    for (int i = 0; i < n; i++) {
        switch (e[i].op) {
        case ULN_OP_NAP_RECV:
            on_nap(cq, &e[i]);
            break;
        case ULN_OP_PUT_REMOTE:
            if (e[i].status) err("PUT_REMOTE with status %s", t_errname(e[i].status));
            on_put_remote(&e[i]);
            break;
        default:
            on_send(&e[i]);
        }
    }
    if (n) last_progress_ns = now_ns();
    return n;
}

/* Read-backs that found the send queue full when their PUT completed. */
static void retry_verifies(void)
{
    for (int i = 0; i < MAX_OPS; i++)
        if (ops[i].used && ops[i].pending) try_verify(&ops[i]);
}

static void progress(bool may_block)
{
    int got = 0;
    for (int c = 0; c < 3; c++)
        got += take(cqs[c]);
    st.polls++;
    ctl_send();
    retry_verifies();
    if (may_block) {
        /* Wait on one CQ (returns at once if it has an entry, else spins,
         * then sleeps on the doorbell): the others wait meanwhile. */
        int c = (int)(rnd() % 3);
        int w = uln_cq_wait(cqs[c], 1 + (int)(rnd() % 5));
        CHECKF(w == 0 || w == -ETIMEDOUT, "uln_cq_wait: %s", t_errname(w));
        st.waits++;
    }
    CHECKF(now_ns() - last_progress_ns < 60ull * 1000000000u,
           "no completion for 60 s: %d operations outstanding, %d ENDs", n_out, ends_got);
}

static void random_op(void)
{
    int ep = (int)(rnd() % NEPS), peer = (int)(rnd() % (uint64_t)N);
    uint64_t r = rnd() % 100;
    if (r < 40)
        post_nap(ep, peer);
    else if (r < 60)
        post_put(ep, peer, false);
    else if (r < 75)
        post_put(ep, peer, true);
    else if (r < 97)
        post_get(ep, peer);
    else
        post_flush(ep);
}

int main(int argc, char **argv)
{
    double seconds = 10;
    uint64_t seed = 1;
    static const struct option lo[] = {{"seconds", required_argument, 0, 's'},
                                       {"seed", required_argument, 0, 'r'},
                                       {"max-size", required_argument, 0, 'm'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "s:r:m:q", lo, NULL)) != -1;) {
        if (c == 's')
            seconds = atof(optarg);
        else if (c == 'r')
            seed = strtoull(optarg, NULL, 0);
        else if (c == 'm')
            max_size = strtoull(optarg, NULL, 0);
        else if (c == 'q')
            quiet = true;
        else
            return 2;
    }
    t_open(&J, 0);
    N = J.size;
    me = J.rank;
    rng = pat_mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)me + 1);
    CHECK_OK(uln_cq_open(J.ctx, 64, &cqs[0]));
    CHECK_OK(uln_cq_open(J.ctx, 32, &cqs[1]));
    CHECK_OK(uln_cq_open(J.ctx, 32, &cqs[2]));
    CHECK_OK(uln_ep_open(J.ctx, cqs[0], cqs[0], &eps[0]));
    CHECK_OK(uln_ep_open(J.ctx, cqs[0], cqs[0], &eps[1]));
    CHECK_OK(uln_ep_open(J.ctx, cqs[1], cqs[2], &eps[2]));

    read_len = max_size;
    mem_len = slot_off(N, 0, false);
    CHECK_OK(uln_mem_alloc(J.ctx, mem_len, (void **)&mem[K_SHM]));
    mem[K_HEAP] = t_xmalloc(mem_len);
    /* Peers write this memory with process_vm_writev, which valgrind cannot
     * see: give it defined contents first, as real targets have. */
    memset(mem[K_HEAP], 0, mem_len);
    for (int k = 0; k < NKINDS; k++) {
        pat_fill(mem[k], read_len, read_seed(me, k), 0);
        CHECK_OK(uln_mr_reg(J.ctx, mem[k], mem_len,
                            ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE, &mrs[k]));
    }
    uint64_t mine[NKINDS];
    keys = calloc((size_t)N * NKINDS, 8);
    busy = calloc((size_t)N * NEPS * NKINDS * 2, 1);
    nap_seq_out = calloc((size_t)N * NEPS, 8);
    nap_seq_in = calloc((size_t)N * NEPS, 8);
    ended = calloc((size_t)N * NEPS, sizeof *ended);
    CHECK(keys && busy && nap_seq_out && nap_seq_in && ended);
    for (int k = 0; k < NKINDS; k++)
        mine[k] = uln_mr_key(mrs[k]);
    t_exchange(&J, eps[0], cqs[0], mine, NKINDS, keys);

    double t0 = t_now(), until = t0 + seconds;
    last_progress_ns = now_ns();
    while (t_now() < until) {
        for (int k = 0; k < 4 && n_out < MAX_OPS - 8; k++)
            random_op();
        progress(rnd() % 4 == 0);
    }
    double t_ops = t_now();
    /* Drain: everything of ours done and credited. */
    for (;;) {
        bool slots_busy = false;
        for (size_t i = 0; i < (size_t)N * NEPS * NKINDS * 2; i++)
            slots_busy |= busy[i] != 0;
        if (n_out == 0 && !slots_busy && ctl_head == ctl_tail) break;
        progress(true);
    }
    /* END on every endpoint to every rank (ourselves too), after our NAPs. */
    for (int p = 0; p < N; p++)
        for (int ep = 0; ep < NEPS; ep++)
            ctl_push(ep, p,
                     (struct hdr){.magic = HDR_MAGIC,
                                  .type = M_END,
                                  .ep = (uint16_t)ep,
                                  .src = me,
                                  .seq = nap_seq_out[p * NEPS + ep]});
    while (ends_got < N * NEPS || n_out > 0 || ctl_head != ctl_tail)
        progress(true);

    struct uln_counters c;
    CHECK_OK(uln_counters_get(J.ctx, &c));
    st.retransmits = c.retransmits;
    /* Statistics to rank 0: a NAP of header + struct (not inline). */
    {
        struct op *o;
        while (!(o = op_new(O_CTL, 0, 0)))
            progress(true);
        o->len = sizeof(struct hdr) + sizeof st;
        o->buf = malloc(o->len);
        CHECK(o->buf != NULL);
        struct hdr h = {.magic = HDR_MAGIC, .type = M_STATS, .ep = 0, .src = me, .len = sizeof st};
        memcpy(o->buf + sizeof h, &st, sizeof st);
        int rc;
        while ((rc = post_nap_hdr(0, 0, &h, o->buf + sizeof h, sizeof st, o, false)) == -EAGAIN)
            progress(true);
        CHECK_OK(rc);
        posted[0]++;
    }
    while (n_out > 0 || (me == 0 && stats_got < N))
        progress(true);
    double t_end = t_now();

    if (me == 0) {
        /* Everything sent arrived, once: the job's totals must agree. */
        if (total.naps_received != total.ops[O_NAP])
            err("%" PRIu64 " NAPs sent, %" PRIu64 " received", total.ops[O_NAP],
                total.naps_received);
        if (total.imm_checked != total.ops[O_PUT_IMM])
            err("%" PRIu64 " put_imm sent, %" PRIu64 " arrived", total.ops[O_PUT_IMM],
                total.imm_checked);
        if (total.ops[O_VERIFY] != total.ops[O_PUT])
            err("%" PRIu64 " PUTs, %" PRIu64 " read back", total.ops[O_PUT], total.ops[O_VERIFY]);
        const char *tp = J.info.transport;
        const char *fault = getenv("ULN_FAULT");
        printf("soak: %d ranks, transport %s%s%s, %.1f s of random operations (%.1f s draining), "
               "max size %" PRIu64 " B\n",
               N, tp, fault ? ", ULN_FAULT=" : "", fault ? fault : "", t_ops - t0, t_end - t_ops,
               max_size);
        uint64_t all = 0;
        for (int i = 0; i < NOPS; i++) {
            printf("soak:   %-8s %10" PRIu64 " ops %14" PRIu64 " bytes\n", op_names[i],
                   total.ops[i], total.bytes[i]);
            all += total.ops[i];
        }
        printf("soak:   checked on arrival: %" PRIu64 " NAPs (%" PRIu64 " bytes), %" PRIu64
               " put_imm (%" PRIu64 " bytes)\n",
               total.naps_received, total.nap_bytes_received, total.imm_checked,
               total.imm_bytes_checked);
        printf("soak:   %" PRIu64 " operations, %.0f per second; -EAGAIN %" PRIu64
               ", waits %" PRIu64 ", polls %" PRIu64 ", udp retransmits %" PRIu64 "\n",
               all, (double)all / (t_ops - t0), total.eagain, total.waits, total.polls,
               total.retransmits);
        printf("soak: errors %" PRIu64 "\n", total.errors);
    }
    bool bad = st.errors != 0 || (me == 0 && total.errors != 0);
    t_barrier(&J);
    for (int k = 0; k < NKINDS; k++)
        CHECK_OK(uln_mr_dereg(mrs[k]));
    CHECK_OK(uln_mem_free(J.ctx, mem[K_SHM]));
    free(mem[K_HEAP]);
    for (int i = 0; i < NEPS; i++)
        CHECK_OK(uln_ep_close(eps[i]));
    int rc = t_finish(&J);
    return bad ? 1 : rc;
}
