/*
 * fuzz_seal_open.c - fuzz target for the opening of sealed datagrams
 * (src/seal/, uln_seal_rx), the first thing a received datagram meets under
 * ULN_SECURE=auth or encrypt.
 *
 * The input is a byte of settings (bit 0: encrypt rather than auth, bit 1:
 * ChaCha20-Poly1305 rather than AES-256-GCM) and then records, each an op
 * byte, a u16 length and that many bytes, run in order against one pair of
 * ends (fresh windows and counters per input):
 *   op % 4 == 0  the bytes as a datagram off the wire, opened as they are;
 *   op % 4 == 1  the bytes sealed by the true sender, then altered as the
 *                op's high bits say (a bit flipped at a position the first
 *                two bytes give, cut short, or untouched) and opened;
 *   op % 4 == 2  a datagram sealed earlier in this input sent again (which
 *                one: the first byte), as an attacker replays it;
 *   op % 4 == 3  as 1, and kept back: later records reorder it.
 * What must hold, against a model of the counters accepted so far: no
 * counter is ever accepted twice; a refusal as a replay names an accepted
 * counter; an untouched true datagram opens (unless a replay or too old) to
 * exactly its bytes; an altered one never opens; the length returned is the
 * datagram's less the trailer. ASan watches every read: the datagram is a
 * copy of exactly its length.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seal/seal.h"

#define MAX_KEPT 64
#define MAX_SEEN 512

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_seal_open: %s\n", what);
        abort();
    }
}

struct kept {
    uint8_t *d;
    size_t len;
    int altered;
};

static struct {
    struct uln_seal_id a, b;
    struct uln_seal_pair pa[4], pb[4];
    int ready;
    uint64_t seen[MAX_SEEN]; /* counters accepted in this input */
    int nseen;
    struct kept kept[MAX_KEPT];
    int nkept;
} F;

static void setup(void)
{
    uint8_t ka[32], kb[32];
    for (int i = 0; i < 32; i++)
        ka[i] = (uint8_t)(i + 1), kb[i] = (uint8_t)(0x80 + i);
    must(!uln_seal_id_open_raw(&F.a, ka, (const uint8_t *)"fuzzing secret, 16+", 19), "id a");
    must(!uln_seal_id_open_raw(&F.b, kb, (const uint8_t *)"fuzzing secret, 16+", 19), "id b");
    struct uln_seal_ends ea = {.my_epoch = 7, .peer_epoch = 9, .my_ep = 1, .peer_ep = 2};
    struct uln_seal_ends eb = {.my_epoch = 9, .peer_epoch = 7, .my_ep = 2, .peer_ep = 1};
    for (int s = 0; s < 4; s++) {
        enum uln_seal_mode m = s & 1 ? ULN_SEAL_ENCRYPT : ULN_SEAL_AUTH;
        enum uln_seal_cipher c = s & 2 ? ULN_SEAL_CHACHA20_POLY1305 : ULN_SEAL_AES_256_GCM;
        must(!uln_seal_pair_open(&F.pa[s], &F.a, F.b.pub, &ea, m, c), "pair a");
        must(!uln_seal_pair_open(&F.pb[s], &F.b, F.a.pub, &eb, m, c), "pair b");
    }
    F.ready = 1;
}

static int was_seen(uint64_t c)
{
    for (int i = 0; i < F.nseen; i++)
        if (F.seen[i] == c) return 1;
    return 0;
}

static uint64_t counter_of(const uint8_t *d, size_t len)
{
    uint64_t c = 0;
    for (int i = 7; i >= 0; i--)
        c = c << 8 | d[len - ULN_SEAL_TRAILER + (size_t)i];
    return c;
}

/* Opens a copy of d (len bytes) at B; checks the model; returns the result. */
static long open_checked(struct uln_seal_rx *rx, const uint8_t *d, size_t len, uint8_t **plain)
{
    uint8_t *x = malloc(len ? len : 1);
    must(x != NULL, "malloc");
    memcpy(x, d, len);
    long r = uln_seal_rx(rx, x, len);
    must(r >= 0 || r == -EMSGSIZE || r == -EALREADY || r == -ESTALE || r == -EBADMSG,
         "an error not in seal.h");
    if (r >= 0) {
        must((size_t)r + ULN_SEAL_TRAILER == len,
             "plain length is not the datagram's less its trailer");
        uint64_t c = counter_of(d, len);
        must(!was_seen(c), "a counter accepted twice");
        if (F.nseen < MAX_SEEN) F.seen[F.nseen++] = c;
    }
    if (r == -EALREADY) must(was_seen(counter_of(d, len)), "a replay of a counter never accepted");
    if (plain) {
        *plain = x;
    } else {
        free(x);
    }
    return r;
}

static void keep(const uint8_t *d, size_t len, int altered)
{
    if (F.nkept == MAX_KEPT) return;
    uint8_t *k = malloc(len);
    must(k != NULL, "malloc");
    memcpy(k, d, len);
    F.kept[F.nkept++] = (struct kept){k, len, altered};
}

/* op 1 and 3: the true sender seals p; the op's bits 2-3 say how the wire
 * alters it (0: not at all, 1: one bit flipped, 2: cut short, 3: grown). */
static void sealed(int s, unsigned op, const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n + ULN_SEAL_TRAILER + 1);
    must(d != NULL, "malloc");
    memcpy(d, p, n);
    struct iovec io = {d, n};
    must(!uln_seal_tx(&F.pa[s].tx, &io, NULL, 1, d + n), "seal");
    size_t len = n + ULN_SEAL_TRAILER, pos = n >= 2 ? (size_t)(p[0] | p[1] << 8) % len : 0;
    unsigned how = op >> 2 & 3;
    if (how == 1) d[pos] ^= (uint8_t)(1u << (op >> 4 & 7));
    if (how == 2) len = pos;
    if (how == 3) d[len++] = (uint8_t)op;
    keep(d, len, how != 0);
    if ((op & 3) == 1) {
        uint8_t *x = NULL;
        long r = open_checked(&F.pb[s].rx, d, len, &x);
        if (how == 0) {
            must(r == (long)n, "a true datagram refused");
            must(!memcmp(x, p, n), "opened bytes are not the sent ones");
        } else {
            must(r < 0, "an altered datagram opened");
        }
        free(x);
    }
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!F.ready) setup();
    if (!size) return 0;
    int s = data[0] & 3;
    F.pa[s].tx.next = 0; /* a fresh pair: counters and window from the start */
    F.pb[s].rx.top = 0;
    memset(F.pb[s].rx.seen, 0, sizeof F.pb[s].rx.seen);
    F.nseen = 0;
    for (size_t i = 1; i + 3 <= size;) {
        unsigned op = data[i];
        size_t n = (size_t)(data[i + 1] | data[i + 2] << 8);
        i += 3;
        if (n > size - i) n = size - i;
        const uint8_t *p = data + i;
        i += n;
        switch (op & 3) {
        case 0:
            open_checked(&F.pb[s].rx, p, n, NULL);
            break;
        case 1:
        case 3:
            sealed(s, op, p, n);
            break;
        case 2:
            if (F.nkept) {
                struct kept *k = &F.kept[(n ? p[0] : 0) % F.nkept];
                long r = open_checked(&F.pb[s].rx, k->d, k->len, NULL);
                must(r < 0 || !k->altered, "an altered datagram opened later");
            }
            break;
        }
    }
    for (int k = 0; k < F.nkept; k++)
        free(F.kept[k].d);
    F.nkept = 0;
    return 0;
}
