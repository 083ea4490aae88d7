/*
 * mem.c - registered memory the service may reach (docs/service.md, "Who
 * does what"): a region in a block from uln_mem_alloc is told to the
 * service with the block's memfd, so that it maps the same physical memory
 * and places PUTs, answers GETs and applies atomics there with no help from
 * us (we may sleep). Other memory it reaches with process_vm_* (no atomics:
 * those it leaves to our engine).
 *
 * Both are requests with an answer, under the context lock (mr.c): the
 * service has the mapping before the key goes live, and forgets it before
 * the region's memory is the user's again. The service never uses a
 * mapping on its own word: every operation is checked against our key
 * table first, under a hazard slot that uln_mr_dereg waits for.
 */
#include <stdio.h>

#include "transport/svc/priv.h"

static void fill(struct uln_svc_mem *m, unsigned type, const struct uln_tp_region *r)
{
    *m = (struct uln_svc_mem){.index = r->index,
                              .key = r->key,
                              .addr = (uint64_t)(uintptr_t)r->addr,
                              .len = r->len,
                              .memfd_off = r->memfd_off,
                              .memfd_len = r->memfd_len};
    uln_svc_hdr_init(&m->h, type, sizeof *m, 0);
}

int uln_svc_mem_reg(struct uln_ctx *ctx, const struct uln_tp_region *r, void **state)
{
    *state = NULL;
    if (r->memfd < 0 || r->len == 0 || !ctx->svc) return 0; /* process_vm_* then */
    struct uln_svc_mem m;
    struct uln_svc_hdr ok;
    fill(&m, ULN_SVC_MEM, r);
    int rc = uln_svc_request(ctx, &m, sizeof m, &r->memfd, 1, ULN_SVC_MEM_OK, &ok, sizeof ok);
    /* Refused (or the service is gone): the region is still ours to use;
     * the service reaches it as other memory, or not at all. */
    if (rc == 0) *state = ctx->svc;
    return 0;
}

void uln_svc_mem_dereg(struct uln_ctx *ctx, const struct uln_tp_region *r, void *state)
{
    if (!state || !ctx->svc) return;
    struct uln_svc_mem m;
    struct uln_svc_hdr ok;
    fill(&m, ULN_SVC_MEM_DEL, r);
    /* Whatever the answer: the key is dead already, and the service checks
     * it before every use of the mapping (a gone service holds nothing). */
    (void)uln_svc_request(ctx, &m, sizeof m, NULL, 0, ULN_SVC_MEM_OK, &ok, sizeof ok);
}
