/*
 * fuzz_udp_rx.c - fuzz target: arbitrary datagrams into the UDP transport's
 * receive path - rx_one (src/transport/udp/recv.c) and everything behind it: the
 * rel state machine, the CTRL handshake, PUT placement, GET requests and GET
 * data, atomic requests and answers, NAP assembly, delivery into the inbox rings and the engine
 * that takes them from there (ACKs, PUT_DONE, serving GETs) - on a real context (see fuzz_common.h)
 * whose peer, rank 1, is reached over UDP.
 *
 * An input is a sequence of records  kind:u8 mods:u8 len:u16le bytes[len]
 * (the last may be cut short by the end of the input):
 *   kind % 6  0  a datagram from rank 1's address, patched as mods say
 *             1  a datagram from an address that is no rank of the job
 *             2  our side starts a new life towards rank 1 (a reconnect);
 *                bytes[0..3]: its epoch (0 or absent: FZ_EPOCH)
 *             3  1 + mods % 8 progress passes
 *             4  post an operation of ours to rank 1 (fz_post)
 *             5  from now on keep NAP_RECV entries (a slow application)
 * mods of a datagram, so that the fuzzer gets past values it cannot guess
 * (random region keys, tags hashed from the job key and both epochs):
 * Each packet of a bundle (packets with MORE in front of another) is patched.
 *   0x01  data: tag := the connection's
 *   0x02  CTRL: key := the job key, rank := 1
 *   0x04  CTRL: dst_epoch := our epoch
 *   0x08  data: seq += the next seq expected in order, ack += our oldest
 *         unacknowledged seq; CTRL: seq (the sender's epoch) += rank 1's
 *         current epoch, ack += our oldest unacknowledged seq
 *   0x10  GET_RESP, ACK, ATOMIC_RESP: key (our op id) += this input's first
 *         op id
 *   0x20  PUT, GET_REQ, ATOMIC_REQ: key := region key (rw, ro, wo,
 *         deregistered)[key % 4]
 *   0x80  a progress pass afterwards
 *
 * Per input: our side starts a fresh life with the fixed epoch FZ_EPOCH (near
 * the 32-bit wrap, so sequence numbers wrap within a few packets); rank 1's
 * life is whatever its hello says. At the end the harness lets the answers we
 * owe rank 1 leave (as a cooperative peer would, with credit and ACKs),
 * restarts our side (our operations fail with -ECONNRESET, held packets are
 * dropped), waits until every operation of ours has completed, and checks
 * memory (fz_memory_check). So the next input starts from the same state.
 */
#include "fuzz_common.h"
#include "udp_wire.h"

#define FZ_EPOCH        0xfffffff0u
#define FZ_SETTLE_EPOCH 0x5e771e00u /* rank 1's life while the harness settles */

static void inject(int rank, const void *p, size_t n)
{
    int rc = uln_udp_rx_inject(F.ep, rank, p, n);
    /* A datagram longer than the MTU never reaches the transport (the
     * socket layer drops it); a full pool is a leak of receive buffers. */
    if (rc == -ENOBUFS) fz_die("no receive buffer free: the transport keeps them all");
    if (rc && rc != -EMSGSIZE) fz_die("uln_udp_rx_inject: %s", uln_strerror(rc));
}

static void patch_one(uint8_t *p, size_t n, unsigned mods)
{
    struct uw_hdr h;
    if (n < sizeof h) return;
    memcpy(&h, p, sizeof h);
    unsigned type = h.vt & 15;
    struct uln_udp_conn c;
    uln_udp_conn_get(F.ep, 1, &c);
    if (type == UW_CTRL) {
        if (mods & 0x02) h.key = F.job;
        if (mods & 0x08) h.seq += c.peer_epoch, h.ack += c.snd_una;
        if (n >= sizeof h + sizeof(struct uw_ctrl)) {
            struct uw_ctrl b;
            memcpy(&b, p + sizeof h, sizeof b);
            if (mods & 0x02) b.rank = 1;
            if (mods & 0x04) b.dst_epoch = c.local_epoch;
            memcpy(p + sizeof h, &b, sizeof b);
        }
    } else {
        if (mods & 0x01) h.tag = c.tag_in;
        if (mods & 0x08) h.seq += c.rcv_next, h.ack += c.snd_una;
        if ((mods & 0x10) && (type == UW_GET_RESP || type == UW_ACK || type == UW_ATOMIC_RESP))
            h.key += F.op_base;
        if ((mods & 0x20) && (type == UW_PUT || type == UW_GET_REQ || type == UW_ATOMIC_REQ))
            h.key = F.keys[h.key % FZ_NREG];
    }
    memcpy(p, &h, sizeof h);
}

/* Every packet of a bundle (packets with UW_MORE, each as long as its
 * header says, then one more) is patched alike, so the fuzzer reaches the
 * packets behind the first. */
static void patch(uint8_t *p, size_t n, unsigned mods)
{
    for (;;) {
        patch_one(p, n, mods);
        if (n < 2 * sizeof(struct uw_hdr) || !(p[1] & UW_MORE)) return;
        size_t len = uw_self_len(p, n);
        if (len == 0 || len + sizeof(struct uw_hdr) > n) return;
        p += len;
        n -= len;
    }
}

static void ctrl_from_rank1(uint32_t src_epoch, uint32_t dst_epoch, unsigned flags, uint32_t ack,
                            uint16_t credit)
{
    struct uw_hdr h = {.vt = uw_vt(UW_CTRL),
                       .flags = (uint8_t)flags,
                       .credit = credit,
                       .seq = src_epoch,
                       .ack = ack,
                       .key = F.job};
    struct uw_ctrl b = {.dst_epoch = dst_epoch, .rank = 1};
    uint8_t pkt[64];
    inject(1, pkt, uw_build(pkt, &h, &b, sizeof b, NULL, 0));
}

/* Let what the engine owes rank 1 (ACKs of its PUTs, GET data) leave: a
 * cooperative rank 1 gives credit and acknowledges everything, until nothing
 * is owed. Otherwise it would go out in the next input's connection. */
static void settle(void)
{
    const struct uln_ep_peer *pp = &F.ep->peers[1];
    for (int i = 0; i < 1000; i++) {
        fz_poll(true);
        if (pp->ack_head == pp->ack_tail && !pp->get_req) return;
        struct uln_udp_conn c;
        uln_udp_conn_get(F.ep, 1, &c);
        if (c.state != ULN_REL_OPEN) {
            uln_udp_peer_restart(F.ep, 1, FZ_EPOCH);      /* also clears rank 1's tombstones */
            ctrl_from_rank1(FZ_SETTLE_EPOCH, 0, 0, 0, 0); /* hello */
            continue;
        }
        ctrl_from_rank1(c.peer_epoch, c.local_epoch, UW_FB, c.snd_nxt, 16);
    }
    fz_die("the engine's answers to rank 1 never left, with credit given");
}

static void begin(void)
{
    if (!F.open) fz_open("udp", 1);
    F.op_base = F.ep->sq_tail;
}

static void end(void)
{
    for (int i = 0; i < 4; i++)
        fz_poll(true);
    fz_release_held();
    settle();
    uln_udp_peer_restart(F.ep, 1, FZ_EPOCH);
    fz_drain_ops(true, "our side restarted");
    fz_poll(true);
    fz_memory_check();
    fz_report();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    begin();
    uint8_t pkt[65536];
    size_t at = 0;
    struct fz_record r;
    while (fz_next_record(data, size, &at, &r)) {
        unsigned kind = r.kind % 6, mods = r.mods;
        const uint8_t *b = r.b;
        size_t n = r.n;
        switch (kind) {
        case 0:
        case 1:
            memcpy(pkt, b, n);
            if (kind == 0) patch(pkt, n, mods);
            inject(kind == 0 ? 1 : -1, pkt, n);
            break;
        case 2: {
            uint32_t e = (uint32_t)fz_le(b, n, 0, 4);
            uln_udp_peer_restart(F.ep, 1, e ? e : FZ_EPOCH);
            break;
        }
        case 3:
            for (unsigned i = 0; i <= mods % 8; i++)
                fz_poll(true);
            break;
        case 4:
            fz_post(b, n);
            break;
        default:
            F.hold_naps = true;
            break;
        }
        if (mods & FZ_M_POLL) fz_poll(true);
    }
    end();
    return 0;
}
