/*
 * forged.c - forged and malformed packets against a rank over UDP.
 *
 * Two real ranks under ulnrun, ULN_TRANSPORT=udp (loopback) and
 * ULN_SHM_DIRECT=0. Rank 1 attacks, rank 0 is attacked. Each case is one
 * packet, sent from rank 1's real endpoint socket (so it comes from a job
 * member's address), or from a socket of its own (an address outside the
 * job): raw, outside the sequence space, when it must be refused before the
 * reliability layer looks at it, or as the next data packet of rank 1's real
 * stream (uln_udp_send_seq) when it must get past everything but the check
 * under test. Rank 0 then asserts that
 *   - the packet was dropped and counted in exactly the expected counter of
 *     struct uln_counters (malformed, stale, refused_key, refused_bounds,
 *     refused_access, refused_job), the others unchanged;
 *   - its target region, the guard bytes around it, and a deregistered
 *     region are byte for byte as they were;
 *   - NAP, PUT and GET between the ranks still work and arrive intact.
 * The last two cases answer rank 0's own operations from a peer they did not
 * go to: rank 0 PUTs to and GETs from itself (through its rings: that is what
 * ULN_SHM_DIRECT=0 is for) and rank 1 forges the answers; they must be
 * ignored (and counted as malformed), and the operations complete with the
 * real result.
 *
 * The packets are built from docs/protocol.md (tests/fuzz/udp_wire.h).
 * Cases are synchronised with NAPs on endpoint 0: rank 1 prepares ("ready"),
 * rank 0 takes its counters ("go"), rank 1 forges and says "done" - a NAP
 * that arrives after the forged packet (same socket, same stream).
 */
#include "../integration/common.h"
#include "../fuzz/udp_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/internal.h"
#include "rel/rel.h"

#define RLEN   4096u  /* the attacked region */
#define GUARD  256u   /* guard bytes either side of it */
#define GLEN   65536u /* the region for normal traffic, on each rank */
#define SELF_N 256u   /* the self operations of the last cases */
/* The op id of every forged request: none of rank 1's own. All forged PUTs
 * share it, and each must still be checked and counted on its own: only
 * more fragments of the same operation (op id, key and range) are not. */
#define FOREIGN_OP (1ull << 60)

enum { C_MALFORMED, C_STALE, C_KEY, C_BOUNDS, C_ACCESS, C_JOB, NC };
static const char *cname[NC + 1] = {"malformed",
                                    "stale",
                                    "refused_key",
                                    "refused_bounds",
                                    "refused_access",
                                    "refused_job",
                                    "none (the kernel dropped it)"};

static struct t_job J;
static struct uln_cq *cq[2];
static struct uln_ep *ep[2];
/* rank 0 */
static uint8_t *target_mem, *target_ref; /* guard, region, guard */
static uint8_t *stale_mem, *stale_ref;
static struct uln_mr *target_mr, *stale_mr;
static uint8_t *good;
/* both: keys[0] target, [1] deregistered, [2] rank 0's good region, [3] rank 1's */
static uint64_t keys[4];
static uint64_t mine[4], all_keys[8];
/* rank 1 */
static struct uln_udp_conn old_life; /* case "earlier life": before its restart */

/* ---- synchronisation ----------------------------------------------------------- */

enum { S_READY = 1, S_GO, S_DONE, S_ROUND, S_ACK };
struct ctl {
    uint32_t magic, what, k, pad_;
    uint64_t arg;
};

static void ctl_send(uint32_t what, int k, uint64_t arg)
{
    struct ctl m = {.magic = 0xf0f6ed, .what = what, .k = (uint32_t)k, .arg = arg};
    int rc;
    while ((rc = uln_nap(ep[0], 1 - J.rank, &m, sizeof m, 0, ULN_INLINE | ULN_SILENT)) == -EAGAIN)
        uln_cq_poll(cq[0], NULL, 0);
    CHECK_OK(rc);
}

static uint64_t ctl_wait(uint32_t what, int k)
{
    struct uln_cqe e = t_cq_take1(cq[0], 20000, "a control NAP");
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.len == sizeof(struct ctl));
    struct ctl m;
    memcpy(&m, e.data, sizeof m);
    t_release(cq[0], &e);
    CHECKF(m.magic == 0xf0f6ed && m.what == what && m.k == (uint32_t)k,
           "expected control %u of case %d, got %u of case %u", what, k, m.what, m.k);
    return m.arg;
}

/* ---- rank 1: sending ------------------------------------------------------------ */

static struct uln_udp_conn conn(int e)
{
    struct uln_udp_conn c;
    CHECK_OK(uln_udp_conn_get(ep[e], 0, &c));
    CHECK(c.state == ULN_REL_OPEN);
    return c;
}

static void send_raw(int e, const void *p, size_t n)
{
    CHECK_OK(uln_udp_send_raw(ep[e], 0, p, n));
}

/* As the next data packet of the stream: only the check under test refuses it. */
static void send_seq(int e, const void *p, size_t n)
{
    int rc;
    double deadline = t_now() + 20;
    while ((rc = uln_udp_send_seq(ep[e], 0, p, n)) == -EAGAIN && t_now() < deadline)
        uln_cq_poll(cq[e], NULL, 0); /* credit from rank 0 */
    CHECK_OK(rc);
}

static uint8_t pkt[2048], junk[1024];

static void put_pkt(uint64_t key, uint64_t op_off, uint64_t op_len, uint64_t frag_off, size_t n)
{
    struct uw_hdr h = {.vt = uw_vt(UW_PUT), .flags = UW_LAST, .key = key, .offset = frag_off};
    struct uw_put_ext x = {.op_id = FOREIGN_OP, .op_offset = op_off, .op_len = op_len};
    send_seq(0, pkt, uw_build(pkt, &h, &x, 24, junk, n));
}

static void get_req_pkt(uint64_t key, uint64_t off, uint64_t len)
{
    struct uw_hdr h = {.vt = uw_vt(UW_GET_REQ), .key = key, .offset = off};
    struct uw_get_req_ext x = {.len = len, .op_id = FOREIGN_OP};
    send_seq(0, pkt, uw_build(pkt, &h, &x, sizeof x, NULL, 0));
}

/* A data packet as rank 1 would send it now, but raw: for cases refused
 * before the reliability layer. */
static size_t data_pkt(unsigned vt, unsigned flags, uint32_t tag, size_t payload)
{
    struct uln_udp_conn c = conn(0);
    struct uw_hdr h = {.vt = (uint8_t)vt,
                       .flags = (uint8_t)(UW_DATA | flags),
                       .tag = tag,
                       .seq = c.snd_nxt,
                       .key = payload};
    return uw_build(pkt, &h, NULL, 0, junk, payload);
}

/* Feedback as rank 1 would send it now; dst_epoch 0 makes it a hello (no
 * feedback then). */
static size_t ctrl_pkt(uint64_t job, uint32_t src_epoch, uint32_t dst_epoch, int32_t rank)
{
    struct uln_udp_conn c = conn(0);
    struct uw_hdr h = {.vt = uw_vt(UW_CTRL), .seq = src_epoch, .key = job};
    if (dst_epoch) h.flags = UW_FB, h.credit = 16, h.ack = c.rcv_next;
    struct uw_ctrl b = {.dst_epoch = dst_epoch, .rank = rank};
    return uw_build(pkt, &h, &b, sizeof b, NULL, 0);
}

/* From a socket of our own: an address that is no rank of the job. */
static void send_stranger(const void *p, size_t n)
{
    struct sockaddr_storage to;
    socklen_t tolen;
    CHECK_OK(uln_udp_ep_addr(ep[0], 0, &to, &tolen));
    int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(sendto(fd, p, n, 0, (struct sockaddr *)&to, tolen) == (ssize_t)n);
    close(fd);
}

/* ---- the cases ----------------------------------------------------------------- */

static uint64_t job(void)
{
    return uln_job_key(J.ctx);
}

static void f_ctrl_job(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    send_raw(0, pkt, ctrl_pkt(job() ^ 0x100, c.local_epoch, c.peer_epoch, 1));
}

static void f_ctrl_rank(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    send_raw(0, pkt, ctrl_pkt(job(), c.local_epoch, c.peer_epoch, 0)); /* "I am rank 0" */
}

/* Before: a new life of rank 1's side (the protocol's reconnect). */
static void p_new_life(void)
{
    old_life = conn(0);
    CHECK_OK(uln_udp_peer_restart(ep[0], 0, 0));
}

static void f_old_tag(uint64_t arg)
{
    send_raw(0, pkt, data_pkt(uw_vt(UW_NAP), UW_LAST, old_life.tag_out, 8));
}

static void f_old_hello(uint64_t arg)
{
    send_raw(0, pkt, ctrl_pkt(job(), old_life.local_epoch, 0, 1));
}

static void f_put_guess(uint64_t arg)
{
    put_pkt(keys[0] ^ 0x5a5a5a5au, 0, 64, 0, 64);
}
static void f_get_guess(uint64_t arg)
{
    get_req_pkt(keys[0] ^ 0xa5a5a5a5u, 0, 64);
}
static void f_put_stale(uint64_t arg)
{
    put_pkt(keys[1], 0, 64, 0, 64);
}
static void f_get_stale(uint64_t arg)
{
    get_req_pkt(keys[1], 0, 64);
}
static void f_put_past(uint64_t arg)
{
    put_pkt(keys[0], RLEN, 8, RLEN, 8);
}
static void f_put_straddle(uint64_t arg)
{
    put_pkt(keys[0], RLEN - 4, 8, RLEN - 4, 8);
}
static void f_get_past(uint64_t arg)
{
    get_req_pkt(keys[0], RLEN + 64, 8);
}
static void f_put_wrap_len(uint64_t arg)
{
    put_pkt(keys[0], 16, UINT64_MAX - 8, 16, 8); /* 16 + (2^64 - 9) wraps to 7 */
}
static void f_put_wrap_off(uint64_t arg)
{
    put_pkt(keys[0], UINT64_MAX - 3, 8, UINT64_MAX - 3, 4);
}
static void f_get_wrap_len(uint64_t arg)
{
    get_req_pkt(keys[0], 16, UINT64_MAX - 8);
}
static void f_put_outside_op(uint64_t arg)
{
    put_pkt(keys[0], 0, 64, 60, 8); /* in the region, but past its own operation */
}

static void f_truncated(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    data_pkt(uw_vt(UW_NAP), UW_LAST, c.tag_out, 8);
    send_raw(0, pkt, 20);
}

static void f_ext_short(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    struct uw_hdr h = {.vt = uw_vt(UW_PUT),
                       .flags = UW_DATA | UW_LAST,
                       .tag = c.tag_out,
                       .seq = c.snd_nxt,
                       .key = keys[0]};
    struct uw_put_ext x = {.op_id = FOREIGN_OP, .op_len = 8};
    uw_build(pkt, &h, &x, sizeof x, NULL, 0);
    send_raw(0, pkt, sizeof h + 10); /* 10 of the extension's 24 bytes */
}

/* Each packet's header says its length (len): a datagram must end where
 * its last packet does, and MORE (a bundle: another packet follows) needs a
 * whole header after the length. */
static void f_more_nap(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    send_raw(0, pkt, data_pkt(uw_vt(UW_NAP), UW_LAST | UW_MORE, c.tag_out, 40));
}

/* A whole 8-byte NAP whose len is off by delta from its datagram: bytes
 * after it, or its length past the datagram's end. */
static void f_len_off(uint64_t delta)
{
    struct uln_udp_conn c = conn(0);
    size_t n = data_pkt(uw_vt(UW_NAP), UW_LAST, c.tag_out, 8);
    struct uw_hdr h;
    memcpy(&h, pkt, sizeof h);
    h.len += (uint32_t)delta;
    memcpy(pkt, &h, sizeof h);
    send_raw(0, pkt, n);
}

/* A NAP leading a bundle whose len (arg) is shorter than a header. */
static void f_more_tiny(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    size_t n = data_pkt(uw_vt(UW_NAP), UW_LAST | UW_MORE, c.tag_out, 40);
    struct uw_hdr h;
    memcpy(&h, pkt, sizeof h);
    h.len = (uint32_t)arg;
    memcpy(pkt, &h, sizeof h);
    struct uw_hdr next = {.vt = uw_vt(UW_NAP),
                          .flags = UW_DATA | UW_LAST,
                          .tag = c.tag_out,
                          .seq = c.snd_nxt + 1,
                          .key = 8};
    send_raw(0, pkt, n + uw_build(pkt + n, &next, NULL, 0, junk, 8));
}

/* A whole NAP with MORE whose len runs past the datagram. */
static void f_more_long(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    data_pkt(uw_vt(UW_NAP), UW_LAST | UW_MORE, c.tag_out, 40);
    struct uw_hdr h;
    memcpy(&h, pkt, sizeof h);
    h.len = 200; /* a whole header follows its 80 bytes, but not 200 */
    memcpy(pkt, &h, sizeof h);
    send_raw(0, pkt, sizeof h + 40 + sizeof h);
}

static void f_more_alone(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    data_pkt(uw_vt(UW_ACK), UW_MORE, c.tag_out, 0);
    send_raw(0, pkt, sizeof(struct uw_hdr) + (size_t)arg); /* arg: bytes of a next header */
}

static void f_beyond_credit(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    data_pkt(uw_vt(UW_NAP), UW_LAST, c.tag_out, 8);
    struct uw_hdr h;
    memcpy(&h, pkt, sizeof h);
    h.seq += 5000; /* the window is 256: far past any credit rank 0 gave */
    memcpy(pkt, &h, sizeof h);
    send_raw(0, pkt, sizeof h + 8);
}

static void f_type(uint64_t type)
{
    struct uln_udp_conn c = conn(0);
    send_raw(0, pkt, data_pkt(uw_vt((unsigned)type), UW_LAST, c.tag_out, 8));
}

static void f_version(uint64_t version)
{
    struct uln_udp_conn c = conn(0);
    send_raw(0, pkt, data_pkt((unsigned)version << 4 | UW_NAP, UW_LAST, c.tag_out, 8));
}

static void f_stranger_ctrl(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    send_stranger(pkt, ctrl_pkt(job(), c.local_epoch, c.peer_epoch, 1));
}

static void f_stranger_data(uint64_t arg)
{
    struct uln_udp_conn c = conn(0);
    send_stranger(pkt, data_pkt(uw_vt(UW_NAP), UW_LAST, c.tag_out, 8));
}

/* arg: the op id rank 0's next operation on endpoint 1 will have. */
static void f_foreign_get_resp(uint64_t op_id)
{
    struct uw_hdr h = {.vt = uw_vt(UW_GET_RESP), .key = op_id, .offset = 0};
    struct uw_get_resp_ext x = {0};
    memset(junk, 0x5f, sizeof junk);
    int rc;
    while ((rc = uln_udp_send_seq(ep[1], 0, pkt, uw_build(pkt, &h, &x, sizeof x, junk, SELF_N))) ==
           -EAGAIN)
        uln_cq_poll(cq[1], NULL, 0);
    CHECK_OK(rc);
}

static void ack_on_ep1(uint64_t op_id, int64_t status)
{
    struct uw_hdr h = {.vt = uw_vt(UW_ACK), .key = op_id, .offset = (uint64_t)status};
    int rc;
    while ((rc = uln_udp_send_seq(ep[1], 0, pkt, uw_build(pkt, &h, NULL, 0, NULL, 0))) == -EAGAIN)
        uln_cq_poll(cq[1], NULL, 0);
    CHECK_OK(rc);
}

static void f_foreign_ack(uint64_t op_id)
{
    ack_on_ep1(op_id, -EACCES);
}

static void f_status_ack(uint64_t op_id)
{
    ack_on_ep1(op_id, 5); /* from the peer the PUT went to, but no errno */
}

enum { SELF_NONE, SELF_GET, SELF_PUT, PEER_PUT };
struct fcase {
    const char *name;
    int expect;            /* the counter that must count it */
    void (*prepare)(void); /* rank 1, before "ready" */
    void (*forge)(uint64_t arg);
    uint64_t arg;
    int self; /* rank 0 runs a self operation the forged packet answers */
};

static const struct fcase cases[] = {
    {"CTRL with another job's key", C_JOB, NULL, f_ctrl_job, 0, 0},
    {"CTRL naming another rank than its address", C_MALFORMED, NULL, f_ctrl_rank, 0, 0},
    {"data tagged for rank 1's earlier life", C_STALE, p_new_life, f_old_tag, 0, 0},
    {"hello from rank 1's earlier life", C_STALE, NULL, f_old_hello, 0, 0},
    {"PUT with a guessed key", C_KEY, NULL, f_put_guess, 0, 0},
    {"GET request with a guessed key", C_KEY, NULL, f_get_guess, 0, 0},
    {"PUT with a deregistered key", C_KEY, NULL, f_put_stale, 0, 0},
    {"GET request with a deregistered key", C_KEY, NULL, f_get_stale, 0, 0},
    {"PUT past the end of the region", C_BOUNDS, NULL, f_put_past, 0, 0},
    {"PUT across the end of the region", C_BOUNDS, NULL, f_put_straddle, 0, 0},
    {"GET request past the end of the region", C_BOUNDS, NULL, f_get_past, 0, 0},
    {"PUT whose offset + length wraps 2^64", C_BOUNDS, NULL, f_put_wrap_len, 0, 0},
    {"PUT at offset 2^64 - 4", C_BOUNDS, NULL, f_put_wrap_off, 0, 0},
    {"GET request whose offset + length wraps 2^64", C_BOUNDS, NULL, f_get_wrap_len, 0, 0},
    {"PUT fragment outside its own operation", C_MALFORMED, NULL, f_put_outside_op, 0, 0},
    {"data beyond the credit rank 0 gave", C_MALFORMED, NULL, f_beyond_credit, 0, 0},
    {"header cut short (20 bytes)", C_MALFORMED, NULL, f_truncated, 0, 0},
    {"PUT whose extension is cut short", C_MALFORMED, NULL, f_ext_short, 0, 0},
    {"whole NAP leading a bundle, with nothing after it", C_MALFORMED, NULL, f_more_nap, 0, 0},
    {"NAP whose len falls short of its datagram", C_MALFORMED, NULL, f_len_off, (uint64_t)-4, 0},
    {"NAP whose len runs past its datagram", C_MALFORMED, NULL, f_len_off, 4, 0},
    {"NAP whose len is zero", C_MALFORMED, NULL, f_len_off,
     (uint64_t) - (int64_t)(sizeof(struct uw_hdr) + 8), 0},
    {"NAP leading a bundle, its len shorter than a header", C_MALFORMED, NULL, f_more_tiny, 16, 0},
    {"whole NAP leading a bundle, its length past the datagram", C_MALFORMED, NULL, f_more_long, 0,
     0},
    {"ACK leading a bundle, with nothing after it", C_MALFORMED, NULL, f_more_alone, 0, 0},
    {"ACK leading a bundle, with half a header after it", C_MALFORMED, NULL, f_more_alone, 16, 0},
    {"unknown type 3", C_MALFORMED, NULL, f_type, 3, 0},
    {"unknown type 15", C_MALFORMED, NULL, f_type, 15, 0},
    {"version 1 (no len)", C_MALFORMED, NULL, f_version, 1, 0},
    {"version 3", C_MALFORMED, NULL, f_version, 3, 0},
    {"version 0", C_MALFORMED, NULL, f_version, 0, 0},
    {"CTRL from an address outside the job", C_JOB, NULL, f_stranger_ctrl, 0, 0},
    {"data from an address outside the job", C_JOB, NULL, f_stranger_data, 0, 0},
    {"GET data from a peer the GET did not go to", C_MALFORMED, NULL, f_foreign_get_resp, 0,
     SELF_GET},
    {"ACK from a peer the PUT did not go to", C_MALFORMED, NULL, f_foreign_ack, 0, SELF_PUT},
    {"ACK whose status is no negative errno", C_MALFORMED, NULL, f_status_ack, 0, PEER_PUT},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The counter case k must count in, NC for none. A job of two ranks on two
 * "hosts" (ULN_TRANSPORT=udp) has its endpoints' sockets connected to the
 * other rank unless ULN_UDP_CONNECT=0 (link_udp.h, one_peer): a datagram
 * from outside the job then never reaches ulnet - the kernel drops it, and
 * nothing may count it or change for it. */
static int expect_of(int k)
{
    const char *s = getenv("ULN_UDP_CONNECT");
    bool connected = !s || strcmp(s, "0") != 0;
    bool stranger = cases[k].forge == f_stranger_ctrl || cases[k].forge == f_stranger_data;
    return connected && stranger ? NC : cases[k].expect;
}

/* ---- rank 0: checking ------------------------------------------------------------ */

static void counters(uint64_t c[NC])
{
    struct uln_counters u;
    if (uln_counters_get(J.ctx, &u)) t_fail(__FILE__, __LINE__, "uln_counters_get", NULL);
    c[C_MALFORMED] = u.malformed;
    c[C_STALE] = u.stale;
    c[C_KEY] = u.refused_key;
    c[C_BOUNDS] = u.refused_bounds;
    c[C_ACCESS] = u.refused_access;
    c[C_JOB] = u.refused_job;
}

static void memory_check(int k)
{
    size_t all = RLEN + 2 * GUARD;
    CHECKF(!memcmp(target_mem, target_ref, all),
           "case %d (%s): the target region or its guard bytes changed", k, cases[k].name);
    CHECKF(!memcmp(stale_mem, stale_ref, all), "case %d (%s): the deregistered region changed", k,
           cases[k].name);
}

/* Rank 0's own PUT or GET to itself (or a PUT to rank 1) on endpoint 1,
 * which the forged packet (already in its socket) tries to answer. */
static void self_op(int k, int kind)
{
    if (kind == PEER_PUT) {
        CHECK_OK(uln_put(ep[1], 1, good, SELF_N, keys[3], 0, 0x5e1f, 0));
        struct uln_cqe e = t_cq_take1(cq[1], 20000, "the PUT to rank 1");
        CHECK_CQE(&e, e.user_data == 0x5e1f);
        CHECKF(e.status == -EPROTO, "case %d (%s): the PUT completed with %d, not -EPROTO", k,
               cases[k].name, e.status);
        return;
    }
    uint64_t seed = pat_seed(0, 7, (uint64_t)k);
    uint64_t off = 8192 + (uint64_t)k * SELF_N;
    uint8_t *buf = t_xmalloc(SELF_N);
    if (kind == SELF_GET) {
        pat_fill(good + off, SELF_N, seed, 0);
        memset(buf, 0, SELF_N);
        CHECK_OK(uln_get(ep[1], 0, buf, SELF_N, keys[2], off, 0x5e1f, 0));
    } else {
        pat_fill(buf, SELF_N, seed, 0);
        memset(good + off, 0, SELF_N);
        CHECK_OK(uln_put(ep[1], 0, buf, SELF_N, keys[2], off, 0x5e1f, 0));
    }
    struct uln_cqe e = t_cq_take1(cq[1], 20000, "the self operation");
    CHECK_CQE(&e, e.user_data == 0x5e1f);
    CHECKF(e.status == 0, "case %d (%s): the operation completed with %s (the forged answer)", k,
           cases[k].name, t_errname(e.status));
    CHECK_PAT(kind == SELF_GET ? buf : good + off, SELF_N, seed, 0, "case %d (%s)", k,
              cases[k].name);
    free(buf);
}

static void wait_counted(int k, const uint64_t before[NC])
{
    uint64_t now[NC];
    double deadline = t_now() + 10;
    int x = expect_of(k);
    if (x == NC) return; /* dropped in the kernel, before rank 1 said DONE */
    for (;;) {
        counters(now);
        if (now[x] != before[x] || t_now() > deadline) break;
        uln_cq_wait(cq[0], 5); /* progress: a refused GET request is counted when served */
    }
}

static void counts_check(int k, const uint64_t before[NC], const char *when)
{
    uint64_t now[NC];
    counters(now);
    for (int c = 0; c < NC; c++) {
        uint64_t want = before[c] + (c == expect_of(k));
        CHECKF(now[c] == want, "case %d (%s), %s: %s went from %llu to %llu, expected %llu", k,
               cases[k].name, when, cname[c], (unsigned long long)before[c],
               (unsigned long long)now[c], (unsigned long long)want);
    }
}

/* ---- normal traffic after each case ---------------------------------------------- */

static void put_get_check(int peer, uint64_t key, int k)
{
    uint64_t seed = pat_seed(J.rank, 1, (uint64_t)k);
    uint64_t off = ((uint64_t)k * 1237) % (GLEN - 1000 - 16384) + 16384;
    uint8_t *src = t_xmalloc(1000), *back = t_xmalloc(1000);
    pat_fill(src, 1000, seed, 0);
    memset(back, 0, 1000);
    CHECK_OK(uln_put(ep[0], peer, src, 1000, key, off, 0x1, 0));
    CHECK_OK(uln_get(ep[0], peer, back, 1000, key, off, 0x2, 0));
    struct uln_cqe e[2];
    t_cq_take(cq[0], e, 2, 20000, "a PUT and a GET after a forged packet");
    for (int i = 0; i < 2; i++)
        CHECK_CQE(&e[i], e[i].status == 0 && e[i].user_data == (uint64_t)i + 1);
    CHECK_PAT(back, 1000, seed, 0, "case %d: GET of what was PUT", k);
    free(src);
    free(back);
}

static void nap_pattern(int k)
{
    uint8_t m[300];
    pat_fill(m, sizeof m, pat_seed(J.rank, 2, (uint64_t)k), 0);
    CHECK_OK(uln_nap(ep[0], 1 - J.rank, m, sizeof m, 0x3, 0));
    struct uln_cqe e = t_cq_take1(cq[0], 20000, "a NAP's send completion");
    CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
}

static void nap_pattern_recv(int k)
{
    struct uln_cqe e = t_cq_take1(cq[0], 20000, "a NAP after a forged packet");
    CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.len == 300);
    CHECK_PAT(e.data, 300, pat_seed(1 - J.rank, 2, (uint64_t)k), 0, "case %d: NAP payload", k);
    t_release(cq[0], &e);
}

/* ---- main ------------------------------------------------------------------------ */

static uint8_t *guarded(size_t len, uint8_t **ref, int tag)
{
    uint8_t *m = t_xmalloc(len + 2 * GUARD);
    *ref = t_xmalloc(len + 2 * GUARD);
    memset(*ref, 0xee, len + 2 * GUARD);
    pat_fill(*ref + GUARD, len, pat_seed(0, 9, (uint64_t)tag), 0);
    memcpy(m, *ref, len + 2 * GUARD);
    return m;
}

int main(void)
{
    t_open(&J, 2);
    CHECKF(J.info.udp_peers == 1, "run with ULN_TRANSPORT=udp");
    CHECKF(J.info.shm_direct == 0, "run with ULN_SHM_DIRECT=0 (self operations through rings)");
    for (int i = 0; i < 2; i++) {
        CHECK_OK(uln_cq_open(J.ctx, 64, &cq[i]));
        CHECK_OK(uln_ep_open(J.ctx, cq[i], cq[i], &ep[i]));
    }
    struct uln_mr *good_mr;
    good = t_xmalloc(GLEN);
    memset(good, 0, GLEN);
    unsigned rw = ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE;
    CHECK_OK(uln_mr_reg(J.ctx, good, GLEN, rw, &good_mr));
    if (J.rank == 0) {
        target_mem = guarded(RLEN, &target_ref, 1);
        stale_mem = guarded(RLEN, &stale_ref, 2);
        CHECK_OK(uln_mr_reg(J.ctx, target_mem + GUARD, RLEN, rw, &target_mr));
        CHECK_OK(uln_mr_reg(J.ctx, stale_mem + GUARD, RLEN, rw, &stale_mr));
        mine[0] = uln_mr_key(target_mr);
        mine[1] = uln_mr_key(stale_mr);
        mine[2] = uln_mr_key(good_mr);
    } else {
        mine[3] = uln_mr_key(good_mr);
    }
    t_exchange(&J, ep[0], cq[0], mine, 4, all_keys);
    t_exchange(&J, ep[1], cq[1], mine, 4, all_keys); /* endpoint 1's connection is up too */
    for (int i = 0; i < 4; i++)
        keys[i] = all_keys[i] | all_keys[4 + i];
    if (J.rank == 0) {
        CHECK_OK(uln_mr_dereg(stale_mr)); /* rank 1 keeps a key that was good once */
        stale_mr = NULL;
    }
    t_barrier(&J);

    for (int k = 0; k < NCASES; k++) {
        const struct fcase *c = &cases[k];
        uint64_t before[NC];
        if (J.rank == 1) {
            if (c->prepare) c->prepare();
            ctl_send(S_READY, k, 0);
            uint64_t arg = ctl_wait(S_GO, k);
            c->forge(c->self ? arg : c->arg);
            ctl_send(S_DONE, k, 0);
            /* rank 1 PUTs and GETs rank 0's good region, then NAPs */
            put_get_check(0, keys[2], k);
            nap_pattern(k);
            nap_pattern_recv(k);
            ctl_wait(S_ACK, k);
        } else {
            ctl_wait(S_READY, k);
            counters(before);
            ctl_send(S_GO, k, ep[1]->sq_tail); /* the op id of our next op on endpoint 1 */
            ctl_wait(S_DONE, k);
            if (c->self) self_op(k, c->self);
            wait_counted(k, before);
            counts_check(k, before, "after the forged packet");
            memory_check(k);
            nap_pattern_recv(k);
            put_get_check(1, keys[3], k);
            nap_pattern(k);
            counts_check(k, before, "after normal traffic");
            memory_check(k);
            ctl_send(S_ACK, k, 0);
            printf("rank0: case %2d: %-48s dropped, counted in %s\n", k, c->name,
                   cname[expect_of(k)]);
        }
    }
    t_barrier(&J);
    if (J.rank == 0) CHECK_OK(uln_mr_dereg(target_mr));
    CHECK_OK(uln_mr_dereg(good_mr));
    int rc = t_finish(&J);
    free(good);
    free(target_mem), free(target_ref), free(stale_mem), free(stale_ref);
    return rc;
}
