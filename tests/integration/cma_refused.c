/*
 * cma_refused.c - the kernel refuses process_vm_readv/writev (as container
 * runtimes' seccomp profiles do): PUT and GET to malloc'd registered memory
 * must still work, through the rings, and ulnet must say so once, clearly.
 *
 * Each rank installs a seccomp filter that makes both system calls fail with
 * EPERM - the very answer such a runtime gives.
 */
#include "common.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#define LEN (1u << 20)

static void refuse_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* other arch: leave alone */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
    /* The filter works: */
    char a = 0, b = 0;
    struct iovec l = {&a, 1}, r = {&b, 1};
    CHECK(syscall(__NR_process_vm_readv, getpid(), &l, 1, &r, 1, 0) == -1 && errno == EPERM);
}

int main(void)
{
    struct t_job J;
    t_open(&J, 2);
    refuse_cma();
    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    struct t_region r;
    t_region_new(&J, &r, T_KIND_MALLOC, LEN, ULN_ACCESS_REMOTE_READ | ULN_ACCESS_REMOTE_WRITE);
    memset(r.buf, 0, LEN);
    uint64_t keys[2];
    t_exchange(&J, ep, cq, &r.key, 1, keys);

    if (J.rank == 0) {
        /* Catch what the library says on stderr. */
        int cap = memfd_create("stderr", 0), saved = dup(2);
        CHECK(cap >= 0 && saved >= 0);
        fflush(stderr);
        dup2(cap, 2);
        uint8_t *src = t_xmalloc(LEN), *dst = t_xmalloc(LEN);
        pat_fill(src, LEN, pat_seed(0, 77, 1), 0);
        memset(dst, 0, LEN);
        CHECK_OK(uln_put(ep, 1, src, LEN, keys[1], 0, 1, 0));
        struct uln_cqe e = t_cq_take1(cq, 30000, "PUT with process_vm_writev refused");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_PUT);
        CHECK_OK(uln_get(ep, 1, dst, LEN, keys[1], 0, 2, 0));
        e = t_cq_take1(cq, 30000, "GET with process_vm_readv refused");
        CHECK_CQE(&e, e.status == 0 && e.op == ULN_OP_GET);
        CHECK_PAT(dst, LEN, pat_seed(0, 77, 1), 0, "data through the rings");
        /* Said once, clearly, and reflected in uln_query. */
        fflush(stderr);
        dup2(saved, 2);
        char text[4096] = {0};
        CHECK(pread(cap, text, sizeof text - 1, 0) >= 0);
        CHECKF(strstr(text, "refuses process_vm") && strstr(text, "through the rings"),
               "stderr was: %s", text);
        char *first = strstr(text, "refuses process_vm");
        CHECKF(strstr(first + 1, "refuses process_vm") == NULL, "said more than once: %s", text);
        struct uln_info info;
        CHECK_OK(uln_query(J.ctx, &info));
        CHECK(info.shm_cma == 0);
        printf("rank0: ulnet said: %s", text);
        CHECK_OK(uln_nap(ep, 1, "done", 4, 3, 0));
        e = t_cq_take1(cq, 30000, "NAP send");
        free(src);
        free(dst);
    } else {
        /* The ring path needs the target's progress: serve until told done. */
        struct uln_cqe e = t_cq_take1(cq, 60000, "rank 0's done");
        CHECK_CQE(&e, e.op == ULN_OP_NAP_RECV && e.len == 4);
        t_release(cq, &e);
        CHECK_PAT(r.buf, LEN, pat_seed(0, 77, 1), 0, "PUT data in the target's malloc region");
    }
    t_barrier(&J);
    t_region_free(&J, &r);
    return t_finish(&J);
}
