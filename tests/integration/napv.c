/*
 * napv - uln_napv: a NAP gathered from up to ULN_IOV_MAX segments arrives as
 * their concatenation, in order with the sender's other NAPs, on every
 * transport.
 *
 * Rank 1 sends COUNT NAPs to rank 0. Message m has a length drawn from
 * (m, seed) up to nap_max and 0..16 segments cut at random places (zero-length
 * ones too), each segment in a buffer of its own, so the gather is real.
 * Small ones go with ULN_INLINE and their buffers are scribbled on at once.
 * The first half is posted one at a time (the post's own fast path), the
 * second in bursts of 3 x sq_depth without polling, so most wait in the send
 * queue with their segments (-EAGAIN is met and retried). Rank 0 checks each
 * payload byte by byte in arrival order. Then the refusals: too many segments,
 * a NULL base, past nap_max, ULN_INLINE past inline_max.
 *
 * usage: napv [count]
 */
#include "common.h"

static struct t_job J;

struct msg {
    size_t len;
    int n;
    struct iovec iov[ULN_IOV_MAX];
};

static size_t msg_len(uint64_t m)
{
    uint64_t h = pat_mix(m ^ 0x5a5a);
    uint32_t max = J.info.nap_max;
    switch (h % 4) {
    case 0:
        return h % (J.info.inline_max + 1); /* small: gathered at post */
    case 1:
        return max;
    default:
        return (h >> 8) % (max + 1);
    }
}

/* Cut message m into segments, each copied into its own buffer at seg. */
static void msg_make(uint64_t m, struct msg *x, uint8_t *seg)
{
    x->len = msg_len(m);
    uint64_t h = pat_mix(m ^ 0x1234);
    x->n = (int)(h % (ULN_IOV_MAX + 1));
    if (x->n == 0 && x->len) x->n = 1;
    uint8_t *whole = t_xmalloc(x->len + 1);
    pat_fill(whole, x->len, pat_seed(1, 9, m), 0);
    size_t off = 0;
    for (int i = 0; i < x->n; i++) {
        size_t left = x->len - off;
        size_t take =
            i == x->n - 1
                ? left
                : (pat_mix(h + (uint64_t)i) % 3 == 0 ? 0 : pat_mix(h ^ (uint64_t)i) % (left + 1));
        uint8_t *b = seg + (size_t)i * (J.info.nap_max + 64); /* apart: a real gather */
        memcpy(b, whole + off, take);
        x->iov[i] = (struct iovec){take ? b : NULL, take};
        off += take;
    }
    free(whole);
}

static void sender(struct uln_ep *ep, struct uln_cq *cq, uint64_t count)
{
    size_t stride = (size_t)ULN_IOV_MAX * (J.info.nap_max + 64);
    uint32_t burst = J.info.sq_depth * 3;
    uint8_t *pool = t_xmalloc(stride * burst);
    struct msg *x = t_xmalloc(sizeof *x * burst);
    uint64_t m = 0, done = 0;
    while (m < count) {
        bool one = m < count / 2;
        uint32_t k = one ? 1 : burst;
        if (m + k > count) k = (uint32_t)(count - m);
        for (uint32_t i = 0; i < k; i++) {
            msg_make(m + i, &x[i], pool + stride * i);
            bool inl = x[i].len <= J.info.inline_max;
            int rc;
            while ((rc = uln_napv(ep, 0, x[i].iov, x[i].n, m + i, inl ? ULN_INLINE : 0)) ==
                   -EAGAIN) {
                struct uln_cqe e;
                if (uln_cq_poll(cq, &e, 1) == 1) {
                    CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
                    done++;
                }
            }
            CHECK_OK(rc);
            if (inl) /* gathered at post: the buffers are ours again */
                for (int s = 0; s < x[i].n; s++)
                    if (x[i].iov[s].iov_len)
                        memset(x[i].iov[s].iov_base, 0xee, x[i].iov[s].iov_len);
        }
        m += k;
        /* The segments of queued NAPs stay untouched until they complete. */
        while (done < m) {
            struct uln_cqe e = t_cq_take1(cq, 30000, "a NAP's completion");
            CHECK_CQE(&e, e.op == ULN_OP_NAP && e.status == 0);
            done++;
        }
    }
    free(pool);
    free(x);
}

static void receiver(struct uln_cq *cq, uint64_t count)
{
    for (uint64_t m = 0; m < count; m++) {
        struct uln_cqe e = t_cq_take1(cq, 30000, "a gathered NAP");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.status == 0 && e.peer == 1);
        CHECKF(e.len == msg_len(m), "NAP %llu: %llu bytes, want %zu", (unsigned long long)m,
               (unsigned long long)e.len, msg_len(m));
        CHECK_PAT(e.data, e.len, pat_seed(1, 9, m), 0, "NAP %llu", (unsigned long long)m);
        t_release(cq, &e);
    }
}

static void refusals(struct uln_ep *ep)
{
    uint8_t b[64] = {0};
    struct iovec iov[ULN_IOV_MAX + 1];
    for (int i = 0; i <= ULN_IOV_MAX; i++)
        iov[i] = (struct iovec){b, 1};
    CHECK_RC(uln_napv(ep, 0, iov, ULN_IOV_MAX + 1, 0, 0), -EINVAL);
    CHECK_RC(uln_napv(ep, 0, iov, -1, 0, 0), -EINVAL);
    struct iovec null_base[2] = {{b, 1}, {NULL, 4}};
    CHECK_RC(uln_napv(ep, 0, null_base, 2, 0, 0), -EINVAL);
    uint8_t *big = t_xmalloc(J.info.nap_max + 1);
    struct iovec over[2] = {{big, J.info.nap_max}, {b, 1}};
    CHECK_RC(uln_napv(ep, 0, over, 2, 0, 0), -EMSGSIZE);
    struct iovec inl[2] = {{big, J.info.inline_max}, {b, 1}};
    CHECK_RC(uln_napv(ep, 0, inl, 2, 0, ULN_INLINE), -EMSGSIZE);
    CHECK_RC(uln_napv(ep, J.size, iov, 1, 0, 0), -EINVAL);
    free(big);
}

int main(int argc, char **argv)
{
    uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 4096, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J);
    if (J.rank == 1) {
        refusals(ep);
        sender(ep, cq, count);
    } else {
        receiver(cq, count);
    }
    t_barrier(&J);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
