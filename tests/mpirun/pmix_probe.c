/*
 * pmix_probe - what a launcher led ulnet to: bootstrap, job key, transports,
 * and the barrier of that bootstrap (tests/mpirun/run.sh).
 *
 * Every rank opens the job (common.h's t_open checks the rank the launcher
 * gave, ULNTEST_IT_EXPECT_BOOT and ULNTEST_IT_EXPECT_UDP_PEERS), prints one line
 *
 *   probe: rank=R size=S boot=B key=K transport=T udp_peers=U udp_addr=A pmix_built=P
 *
 * (A: the IPv4 address its UDP sockets are bound to, which is the address it
 * published; "none" without UDP) for the script to compare across ranks and
 * jobs, and sends its job key to
 * every peer: all must agree (and the NAPs cross both transports). With
 * --barrier it also checks the barrier's contract: it waits for the last rank
 * (never returns before rank 0 arrives) and, in pmix and root mode, honours
 * its timeout (-ETIMEDOUT while rank 0 is still away) and, called again after
 * a timeout, completes the same barrier rather than starting another.
 *
 * usage: pmix_probe [--barrier]
 */
#include "common.h"

#include "boot/pmix.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define LATE_MS 1500 /* how long rank 0 stays away from a barrier */

/* The address of this process's first bound IPv4 datagram socket: ulnet binds
 * its UDP sockets to the address it publishes, and nothing else in this
 * program opens one. */
static void udp_addr(char *buf, size_t len)
{
    snprintf(buf, len, "none");
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        int type;
        socklen_t tl = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM) continue;
        if (getsockname(fd, (struct sockaddr *)&a, &al) != 0 || a.sin_family != AF_INET ||
            a.sin_port == 0)
            continue;
        inet_ntop(AF_INET, &a.sin_addr, buf, (socklen_t)len);
        return;
    }
}

static void probe_barrier(struct t_job *J)
{
    /* Waits for the last rank. */
    t_barrier(J);
    double t0 = t_now();
    if (J->rank == 0) usleep(LATE_MS * 1000);
    CHECK_OK(uln_barrier(J->ctx, 60000));
    if (J->rank != 0)
        CHECKF(t_now() - t0 > LATE_MS * 0.8e-3,
               "the barrier let rank %d through after %.3f s, before rank 0 arrived (%d ms)",
               J->rank, t_now() - t0, LATE_MS);

    /* The timeout is honoured, and a second call finishes the same barrier:
     * rank 0 enters it only once, late. The bootstraps that count their
     * barriers (pmix, root) promise that; ulnrun's board takes a timed-out
     * barrier as the end of the job. */
    const char *mode = J->info.bootstrap;
    if (strcmp(mode, "pmix") && strcmp(mode, "root")) return;
    t_barrier(J);
    t0 = t_now();
    if (J->rank == 0) {
        usleep(LATE_MS * 1000);
        CHECK_OK(uln_barrier(J->ctx, 60000));
    } else {
        CHECK_RC(uln_barrier(J->ctx, 100), -ETIMEDOUT);
        double waited = t_now() - t0;
        CHECKF(waited >= 0.09 && waited < LATE_MS * 1e-3, "a 100 ms barrier returned after %.3f s",
               waited);
        CHECK_OK(uln_barrier(J->ctx, 60000));
    }
}

int main(int argc, char **argv)
{
    bool barrier = argc > 1 && !strcmp(argv[1], "--barrier");
    if (argc > 2 || (argc == 2 && !barrier)) {
        fprintf(stderr, "usage: pmix_probe [--barrier]\n");
        return 2;
    }
    struct t_job J;
    t_open(&J, 0);
    uint64_t key = uln_job_key(J.ctx);
    char addr[INET_ADDRSTRLEN];
    udp_addr(addr, sizeof addr);
    printf("probe: rank=%d size=%d boot=%s key=%016llx transport=%s udp_peers=%d udp_addr=%s "
           "pmix_built=%d\n",
           J.rank, J.size, J.info.bootstrap, (unsigned long long)key, J.info.transport,
           J.info.udp_peers, addr, (int)uln_pmix_built());
    CHECK(key != 0);
    const char *want = getenv("ULN_JOB_KEY");
    if (want && *want)
        CHECKF(key == strtoull(want, NULL, 16), "ULN_JOB_KEY=%s but the key is %016llx", want,
               (unsigned long long)key);
    if (!strcmp(J.info.bootstrap, "pmix")) CHECK(uln_pmix_built());

    struct uln_cq *cq;
    struct uln_ep *ep;
    CHECK_OK(uln_cq_open(J.ctx, 256, &cq));
    CHECK_OK(uln_ep_open(J.ctx, cq, cq, &ep));
    t_barrier(&J); /* every endpoint is open before the first NAP */
    uint64_t *all = t_xmalloc((size_t)J.size * 8);
    t_exchange(&J, ep, cq, &key, 1, all);
    for (int p = 0; p < J.size; p++)
        CHECKF(all[p] == key, "rank %d has job key %016llx, we %016llx", p,
               (unsigned long long)all[p], (unsigned long long)key);
    free(all);

    if (barrier && J.size > 1) probe_barrier(&J);
    CHECK_OK(uln_ep_close(ep));
    CHECK_OK(uln_cq_close(cq));
    return t_finish(&J);
}
