/*
 * lifecycle - objects used in the wrong order get a clear status, never touch
 * freed memory, and lose nothing else:
 *
 *   1. deregistering a region while the peer streams PUTs and GETs into it:
 *      every operation completes 0 or -ENOKEY; once one has failed, none
 *      posted later succeeds; and after uln_mr_dereg returns not one byte of
 *      the memory is written (the owner refills it and watches);
 *   2. closing an endpoint with work outstanding: every posted operation
 *      completes exactly once, 0 or -ECANCELED; afterwards posts, flush and
 *      a second close on it return -EBADF;
 *   3. a CQ: closing it while an endpoint is bound is -EBUSY; once closed,
 *      poll, wait, release, close and opening an endpoint on it are -EBADF;
 *   4. a second uln_mr_dereg is -EBADF, and the dead handle's key reads 0;
 *   5. fork() with registered memory: in the child every call on the
 *      parent's context is -EPERM (uln_close too) and changes nothing; the
 *      child's writes reach uln_mem_alloc memory (shared) but not malloc'd
 *      memory (copy on write); the parent's context works on afterwards and
 *      the peer still reads the parent's bytes.
 * Every check runs on both kinds of target memory where it matters.
 */
#include <sys/wait.h>

#include "common.h"

#define RLEN  (256u * 1024)
#define CHUNK 4096u
#define FILL  0xee

static struct t_job J;

/* Tags of the control NAPs between the two ranks. */
enum { MSG_DEREG_NOW = 1, MSG_STOP, MSG_DONE_1, MSG_FORKED };

static void send_ctl(struct uln_ep *ep, int peer, uint8_t tag)
{
    CHECK_OK(uln_nap(ep, peer, &tag, 1, 0, ULN_INLINE | ULN_SILENT));
}

/* Wait for a control NAP with this tag; other entries are not expected. */
static void wait_ctl(struct uln_cq *cq, uint8_t tag)
{
    struct uln_cqe e = t_cq_take1(cq, 60000, "a control NAP");
    CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_NAP_RECV && e.len == 1 &&
                      *(const uint8_t *)e.data == tag);
    t_release(cq, &e);
}

/* 1. Rank 1 deregisters region `kind` while rank 0 keeps PUTs and GETs going. */
static void dereg_in_flight(struct uln_ep *ep, struct uln_cq *cq, int kind)
{
    struct t_region reg = {0};
    uint64_t mine = 0, all[2];
    if (J.rank == 1) {
        t_region_new(&J, &reg, kind, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        memset(reg.buf, 0, RLEN);
        mine = reg.key;
    }
    t_exchange(&J, ep, cq, &mine, 1, all);
    uint64_t key = all[1];

    if (J.rank == 1) {
        wait_ctl(cq, MSG_DEREG_NOW);
        /* Let the stream run a moment (serving it: over the rings and UDP
         * the target's polls place the data). */
        double until = t_now() + 0.05;
        while (t_now() < until) {
            struct uln_cqe e;
            CHECK_RC(uln_cq_poll(cq, &e, 1), 0);
        }
        CHECK_OK(uln_mr_dereg(reg.mr));
        /* From here no peer may write: refill and watch until rank 0 stops. */
        memset(reg.buf, FILL, RLEN);
        wait_ctl(cq, MSG_STOP);
        CHECK_BYTES(reg.buf, RLEN, FILL, "%s region after uln_mr_dereg returned",
                    t_kind_name(kind));
        /* 4. A second dereg of the same handle. */
        CHECK_RC(uln_mr_dereg(reg.mr), -EBADF);
        CHECK(uln_mr_key(reg.mr) == 0);
        CHECK(uln_mr_addr(reg.mr) == NULL);
        reg.mr = NULL; /* t_region_free must not dereg again */
        t_region_free(&J, &reg);
        return;
    }

    uint8_t *src = t_xmalloc(CHUNK), *dst = t_xmalloc((size_t)64 * CHUNK);
    memset(src, 0x5a, CHUNK);
    uint64_t posted = 0, ok = 0, refused = 0, first_fail_post = UINT64_MAX;
    int inflight = 0;
    bool told = false;
    double deadline = t_now() + 30;
    while (refused < 200) {
        CHECKF(t_now() < deadline, "no -ENOKEY after 30 s (%" PRIu64 " ok)", ok);
        /* The dereg is asked for once some operations succeeded: rank 1's
         * moment of serving before it could pass with none of ours on a
         * loaded machine. The NAP follows our PUTs posted so far. */
        if (!told && ok >= 8) {
            send_ctl(ep, 1, MSG_DEREG_NOW);
            told = true;
        }
        while (inflight < 32) {
            uint64_t k = posted, slot = k % 64, off = (k * CHUNK) % RLEN;
            int rc = k % 2 ? uln_get(ep, 1, dst + slot * CHUNK, CHUNK, key, off, k, 0)
                           : uln_put(ep, 1, src, CHUNK, key, off, k, 0);
            if (rc == -EAGAIN) break;
            CHECK_OK(rc);
            posted++;
            inflight++;
        }
        struct uln_cqe ev[32];
        int n = uln_cq_poll(cq, ev, 32);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            CHECK_CQE(&ev[i], ev[i].op == ULN_OP_PUT || ev[i].op == ULN_OP_GET);
            inflight--;
            if (ev[i].status == 0) {
                /* Posted after a failure was seen: the key was already dead. */
                CHECK_CQE(&ev[i], ev[i].user_data < first_fail_post);
                ok++;
            } else {
                CHECK_CQE(&ev[i], ev[i].status == -ENOKEY);
                if (first_fail_post == UINT64_MAX) first_fail_post = posted;
                refused++;
            }
        }
    }
    while (inflight > 0) {
        struct uln_cqe e = t_cq_take1(cq, 30000, "the last PUTs/GETs on the dead key");
        CHECK_CQE(&e, e.status == -ENOKEY || (e.status == 0 && e.user_data < first_fail_post));
        inflight--;
    }
    send_ctl(ep, 1, MSG_STOP);
    printf("rank0: %s: %" PRIu64 " ok before the dereg, %" PRIu64 " refused after\n",
           t_kind_name(kind), ok, refused);
    CHECK(ok > 0);
    free(src);
    free(dst);
}

/* 2 and 3. An endpoint of its own (index 1), closed with work queued. */
static void close_with_work(uint64_t key, size_t klen)
{
    struct uln_cq *cq2;
    struct uln_ep *ep2;
    CHECK_OK(uln_cq_open(J.ctx, 4096, &cq2));
    CHECK_OK(uln_ep_open(J.ctx, cq2, cq2, &ep2));
    CHECK(uln_ep_index(ep2) == 1);
    CHECK_RC(uln_cq_close(cq2), -EBUSY); /* ep2 is bound to it */

    int posted = 0;
    if (J.rank == 0) {
        /* A GET larger than post_copy_max is queued, not done in the post,
         * and everything behind it waits for it. */
        uint8_t *dst = t_xmalloc(klen), *src = t_xmalloc(CHUNK);
        memset(src, 1, CHUNK);
        CHECK_OK(uln_get(ep2, 1, dst, klen, key, 0, 1000, 0));
        posted++;
        for (int i = 0; i < 100; i++) {
            int rc = uln_put(ep2, 1, src, CHUNK, key, (uint64_t)i * CHUNK % RLEN, 2000 + i, 0);
            if (rc == -EAGAIN) break;
            CHECK_OK(rc);
            posted++;
        }
        CHECK_OK(uln_ep_flush(ep2, 3000));
        posted++;
        CHECK_OK(uln_ep_close(ep2));
        /* Exactly one entry per operation, then nothing: 0, -ECANCELED, or
         * -ECONNRESET when rank 1's endpoint 1 (which rank 1 closes at once)
         * was gone first - its index's next life is not the one we were
         * talking to (ulnet.h, uln_ep_close). */
        struct uln_cqe ev[256];
        int got = 0, cancelled = 0, reset = 0;
        for (;;) {
            int n = uln_cq_poll(cq2, ev, 256);
            CHECK(n >= 0);
            if (n == 0) break;
            for (int i = 0; i < n; i++) {
                CHECK_CQE(&ev[i], ev[i].status == 0 || ev[i].status == -ECANCELED ||
                                      ev[i].status == -ECONNRESET);
                cancelled += ev[i].status == -ECANCELED;
                reset += ev[i].status == -ECONNRESET;
            }
            got += n;
        }
        printf("rank0: closed an endpoint with %d operations posted: %d completed, %d of them "
               "-ECANCELED, %d -ECONNRESET\n",
               posted, got, cancelled, reset);
        CHECKF(got == posted, "%d completions for %d operations", got, posted);
        free(dst);
        free(src);
    } else {
        CHECK_OK(uln_ep_close(ep2));
    }
    /* The closed endpoint. */
    uint8_t b = 0;
    CHECK_RC(uln_nap(ep2, 1 - J.rank, &b, 1, 0, 0), -EBADF);
    CHECK_RC(uln_put(ep2, 1 - J.rank, &b, 1, key, 0, 0, 0), -EBADF);
    CHECK_RC(uln_put_imm(ep2, 1 - J.rank, &b, 1, key, 0, 1, 0, 0), -EBADF);
    CHECK_RC(uln_get(ep2, 1 - J.rank, &b, 1, key, 0, 0, 0), -EBADF);
    CHECK_RC(uln_ep_flush(ep2, 0), -EBADF);
    CHECK_RC(uln_ep_close(ep2), -EBADF);
    /* The CQ, once nothing is bound. */
    CHECK_OK(uln_cq_close(cq2));
    struct uln_cqe e = {0};
    CHECK_RC(uln_cq_poll(cq2, &e, 1), -EBADF);
    CHECK_RC(uln_cq_wait(cq2, 10), -EBADF);
    e.flags = ULN_CQE_MUST_RELEASE;
    CHECK_RC(uln_cqe_release(cq2, &e), -EBADF);
    CHECK_RC(uln_cq_close(cq2), -EBADF);
    struct uln_ep *ep3;
    CHECK_RC(uln_ep_open(J.ctx, cq2, cq2, &ep3), -EBADF);
}

/* 5. fork() in a process with registered memory (rank 0 forks). */
static void fork_child(struct uln_ep *ep, struct uln_cq *cq, struct t_region *shared,
                       struct t_region *priv)
{
    int bad = 0;
#define CHILD_RC(call, want)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (want)) {                                                                       \
            fprintf(stderr, "child: %s = %d, want %d\n", #call, rc_, (want));                      \
            bad++;                                                                                 \
        }                                                                                          \
    } while (0)
    uint8_t b = 7;
    struct uln_cqe e;
    struct uln_mr *mr;
    void *p;
    struct uln_cq *cq3;
    CHILD_RC(uln_nap(ep, 1, &b, 1, 0, 0), -EPERM);
    CHILD_RC(uln_put(ep, 1, &b, 1, priv->key, 0, 0, 0), -EPERM);
    CHILD_RC(uln_get(ep, 1, &b, 1, priv->key, 0, 0, 0), -EPERM);
    CHILD_RC(uln_ep_flush(ep, 0), -EPERM);
    CHILD_RC(uln_cq_poll(cq, &e, 1), -EPERM);
    CHILD_RC(uln_cq_wait(cq, 0), -EPERM);
    CHILD_RC(uln_cq_open(J.ctx, 8, &cq3), -EPERM);
    CHILD_RC(uln_mr_reg(J.ctx, &b, 1, 0, &mr), -EPERM);
    CHILD_RC(uln_mr_dereg(priv->mr), -EPERM);
    CHILD_RC(uln_mem_alloc(J.ctx, 4096, &p), -EPERM);
    CHILD_RC(uln_barrier(J.ctx, 0), -EPERM);
    CHILD_RC(uln_ep_close(ep), -EPERM);
    CHILD_RC(uln_close(J.ctx), -EPERM);
    /* Memory: the mapped block is shared with the parent, the heap is not. */
    memset(shared->buf, 0xc1, shared->len);
    memset(priv->buf, 0xc2, priv->len);
    _exit(bad ? 1 : 0);
#undef CHILD_RC
}

static void fork_test(struct uln_ep *ep, struct uln_cq *cq)
{
    struct t_region shared, priv;
    t_region_new(&J, &shared, T_KIND_SHM, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    t_region_new(&J, &priv, T_KIND_MALLOC, RLEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    pat_fill(shared.buf, RLEN, pat_seed(J.rank, 60, 0), 0);
    pat_fill(priv.buf, RLEN, pat_seed(J.rank, 61, 0), 0);
    uint64_t mine[2] = {shared.key, priv.key}, all[4];
    t_exchange(&J, ep, cq, mine, 2, all);

    if (J.rank == 0) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) fork_child(ep, cq, &shared, &priv);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
        CHECK_BYTES(shared.buf, RLEN, 0xc1, "uln_mem_alloc memory after the child wrote it");
        CHECK_PAT(priv.buf, RLEN, pat_seed(0, 61, 0), 0, "malloc'd memory after the child");
        /* The parent's context goes on: rank 1 reads the heap region (the
         * parent's bytes, not the child's) and answers. */
        send_ctl(ep, 1, MSG_FORKED);
        wait_ctl(cq, MSG_DONE_1);
    } else {
        wait_ctl(cq, MSG_FORKED);
        uint8_t *dst = t_xmalloc(RLEN);
        CHECK_OK(uln_get(ep, 0, dst, RLEN, all[1], 0, 1, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "GET from the parent after its fork");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET);
        CHECK_PAT(dst, RLEN, pat_seed(0, 61, 0), 0, "the parent's heap region, read by rank 1");
        CHECK_OK(uln_get(ep, 0, dst, RLEN, all[0], 0, 2, 0));
        e = t_cq_take1(cq, 30000, "GET of the shared block");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET);
        CHECK_BYTES(dst, RLEN, 0xc1, "the parent's mapped block, as the child left it");
        free(dst);
        send_ctl(ep, 0, MSG_DONE_1);
    }
    t_barrier(&J);
    t_region_free(&J, &shared);
    t_region_free(&J, &priv);
}

int main(void)
{
    t_open(&J, 2);
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 1024, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    CHECK_RC(uln_cq_close(cq), -EBUSY);

    for (int kind = 0; kind < T_NKINDS; kind++)
        dereg_in_flight(ep, cq, kind);

    /* A region for the endpoint-close test, on rank 1: larger than
     * post_copy_max, so a GET of all of it is queued rather than done. */
    size_t klen = (size_t)J.info.post_copy_max + RLEN;
    struct t_region reg = {0};
    uint64_t mine = 0, all[2];
    if (J.rank == 1) {
        t_region_new(&J, &reg, T_KIND_SHM, klen, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
        mine = reg.key;
    }
    t_exchange(&J, ep, cq, &mine, 1, all);
    close_with_work(all[1], klen);
    t_barrier(&J);
    if (J.rank == 1) t_region_free(&J, &reg);

    fork_test(ep, cq);

    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
