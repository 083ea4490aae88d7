/*
 * byaddr_check.c - the service's check on a message from a context with no
 * job behind the wire (tools/ulnetd/byaddr.c), on the service's own code
 * and a real inbox: the first sender of a (key, endpoint) gets a slot with
 * an address the service vouches for; a second sender with that
 * key - another id, or the same id at another service - is refused and
 * counted, as is one whose slot the owner gave a peer reached another way,
 * and one naming the target's own key or an endpoint it has not. The
 * target is found by id and key only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ulnet.h"
#include "check.h"
#include "core/internal.h"
#include "ulnetd.h"

static struct ulnetd D;

static struct uln_ctx *open_nojob(void)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    struct uln_ctx *ctx = NULL;
    CHECK_EQ(uln_open(&cfg, &ctx), 0);
    if (!ctx) exit(1);
    return ctx;
}

int main(void)
{
    setenv("ULN_SERVICE", "off", 1); /* the service here is the code under test */
    struct uln_ctx *ctx = open_nojob();
    struct client t = {.kind = KIND_CLIENT,
                       .id = 7,
                       .attached = true,
                       .no_job = true,
                       .job_key = uln_job_key(ctx),
                       .inbox = ctx->inbox->base,
                       .hdr = *ctx->inbox->hdr};
    struct client *all[] = {&t};
    D.clients = all;
    D.n_clients = 1;
    const uint64_t kx = 0x1234567890abcdefull, host = 0xabcdef;
    const uint32_t ip_a = inet_addr("10.0.0.1"), ip_c = inet_addr("10.0.0.3");

    int s = byaddr_slot(&D, &t, kx, 0, 5, host, ip_a, 7475);
    CHECK(s > 0);
    CHECK_EQ(byaddr_slot(&D, &t, kx, 0, 5, host, ip_a, 7475), s); /* the same, again */
    CHECK_EQ(D.c.byaddr_refused, 0);
    CHECK_EQ(byaddr_slot(&D, &t, kx, 0, 6, host, ip_a, 7475), -EPERM); /* X's key, other id */
    CHECK_EQ(byaddr_slot(&D, &t, kx, 0, 5, host, ip_c, 7475), -EPERM); /* another service */
    CHECK_EQ(byaddr_slot(&D, &t, kx, 0, 5, host, ip_a, 7476), -EPERM);
    CHECK_EQ(D.c.byaddr_refused, 3);
    CHECK(byaddr_slot(&D, &t, kx, 1, 5, host, ip_a, 7475) > 0); /* its other endpoint */

    /* The address the service wrote there is one the owner's engine reads
     * (it learns the sender from it: netns.svc_byaddr, where a transport
     * reaches it). */
    struct uln_inbox_claim *c = uln_inbox_claim_at(t.inbox, &t.hdr, s);
    char str[256];
    CHECK(uln_addr_str(c->addr, c->addr_len, str, sizeof str) > 0);
    CHECK(strstr(str, "svc client 5 at 10.0.0.1:7475") != NULL);

    /* A peer the owner inserted by an address that names no service (not
     * attached): a sender through a service with its key is not it. */
    struct uln_ctx *z = open_nojob();
    uint8_t za[ULN_ADDR_MAX];
    size_t zlen = sizeof za;
    CHECK_EQ(uln_addr(z, za, &zlen), 0);
    int pz = -1;
    CHECK_EQ(uln_peer_insert(ctx, za, zlen, 0, &pz), 0);
    CHECK_EQ(byaddr_slot(&D, &t, uln_job_key(z), 0, 9, host, ip_a, 7475), -EPERM);
    /* Its own key; an endpoint it has not. */
    CHECK_EQ(byaddr_slot(&D, &t, t.job_key, 0, 5, host, ip_a, 7475), -EPERM);
    CHECK_EQ(byaddr_slot(&D, &t, kx ^ 1, t.hdr.max_eps, 5, host, ip_a, 7475), -EPERM);
    CHECK_EQ(D.c.byaddr_refused, 6);

    /* The target: by our id for it and its key, nothing else. */
    CHECK(byaddr_target(&D, 7, (uint32_t)t.job_key) == &t);
    CHECK(byaddr_target(&D, 7, (uint32_t)t.job_key ^ 1) == NULL);
    CHECK(byaddr_target(&D, 8, (uint32_t)t.job_key) == NULL);
    t.no_job = false;
    CHECK(byaddr_target(&D, 7, (uint32_t)t.job_key) == NULL); /* a job's rank: by rank only */

    CHECK_EQ(uln_close(z), 0);
    CHECK_EQ(uln_close(ctx), 0);
    return summary();
}
