/*
 * test_pmix_boot.c - the parts of the PMIx bootstrap that need no PMIx server
 * (tests/mpirun/ runs real jobs under mpirun):
 *   - uln_pmix_built() says what CMake decided (T_EXPECT_PMIX);
 *   - the job key of a namespace: never 0, the same every time, different
 *     for different namespaces (separate jobs must not accept each other's
 *     packets);
 *   - uln_pmix_started() follows PMIX_NAMESPACE / PMIX_RANK;
 *   - PMIx variables without a server (inherited from a launcher further up):
 *     with PMIx, uln_open fails at once and says why; without PMIx, it is a
 *     job of one, with a warning;
 *   - ULN_ROOT and ULN_BOOT_FD win over the PMIx variables.
 * uln_open runs in forked children, so the PMIx client library's state never
 * outlives one case.
 */
#define _GNU_SOURCE
#include <ulnet.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/board.h"
#include "boot/pmix.h"
#include "core/diag.h"
#include "check.h"

#define MODE_SINGLE 200 /* exit statuses of a child whose uln_open succeeded */
#define MODE_ROOT   201
#define MODE_ULNRUN 202
#define MODE_PMIX   203
#define MODE_OTHER  204

static void clear_env(void)
{
    const char *vars[] = {"PMIX_NAMESPACE", "PMIX_RANK", "ULN_ROOT",   "ULN_BOOT_FD",
                          "ULN_RANK",       "ULN_SIZE",  "ULN_JOB_KEY"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
}

/* uln_open in a child with the environment given as NAME=value strings (NULL
 * ends them); returns MODE_* on success, the errno it failed with, or -1 if the
 * child died or took longer than 20 s. */
static int open_in_child(const char *const *env)
{
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        clear_env();
        for (; env && *env; env++)
            putenv((char *)*env);
        struct uln_ctx *ctx;
        int rc = uln_open(NULL, &ctx);
        if (rc) _exit(-rc < 200 ? -rc : 199);
        const char *m = uln_diag_boot_mode(ctx);
        int st = !strcmp(m, "single")   ? MODE_SINGLE
                 : !strcmp(m, "root")   ? MODE_ROOT
                 : !strcmp(m, "ulnrun") ? MODE_ULNRUN
                 : !strcmp(m, "pmix")   ? MODE_PMIX
                                        : MODE_OTHER;
        uln_close(ctx);
        _exit(st);
    }
    int ws;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) return -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void case_built(void)
{
    CHECK_EQ(uln_pmix_built(), T_EXPECT_PMIX);
}

static void case_job_key(void)
{
    /* Namespaces as launchers make them: Open MPI numbers jobs, Slurm steps. */
    enum { N = 2000 };
    static uint64_t keys[2 * N];
    char ns[64];
    for (int i = 0; i < N; i++) {
        snprintf(ns, sizeof ns, "%u", 633536513u + (unsigned)i * 65536u);
        keys[i] = uln_pmix_job_key(ns);
        snprintf(ns, sizeof ns, "slurm.pmix.%d.0", 1000 + i);
        keys[N + i] = uln_pmix_job_key(ns);
    }
    int zero = 0, same = 0;
    for (int i = 0; i < 2 * N; i++) {
        zero += keys[i] == 0;
        for (int j = i + 1; j < 2 * N; j++)
            same += keys[i] == keys[j];
    }
    CHECK_EQ(zero, 0);
    CHECK_EQ(same, 0);
    CHECK(uln_pmix_job_key("slurm.pmix.1000.0") == keys[N]); /* stable */
    CHECK(uln_pmix_job_key("") != 0);
    /* One character apart: about half the bits differ, not a few. */
    int bits = __builtin_popcountll(uln_pmix_job_key("1234") ^ uln_pmix_job_key("1235"));
    CHECK(bits > 12 && bits < 52);
}

static void case_started(void)
{
    clear_env();
    CHECK(!uln_pmix_started());
    setenv("PMIX_NAMESPACE", "", 1);
    CHECK(!uln_pmix_started()); /* empty: not set */
    setenv("PMIX_NAMESPACE", "job7", 1);
    CHECK(uln_pmix_started());
    clear_env();
    setenv("PMIX_RANK", "3", 1);
    CHECK(uln_pmix_started());
    clear_env();
}

static void case_no_server(void)
{
    const char *env[] = {"PMIX_NAMESPACE=no-such-job", "PMIX_RANK=0", NULL};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int st = open_in_child(env);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (T_EXPECT_PMIX)
        CHECK_EQ(st, ECONNREFUSED); /* not a job of one that ignores its launcher */
    else
        CHECK_EQ(st, MODE_SINGLE); /* as before PMIx support existed, with a warning */
    CHECK(b.tv_sec - a.tv_sec < 10);
    /* Without the PMIx variables nothing changes. */
    CHECK_EQ(open_in_child(NULL), MODE_SINGLE);
}

static void case_precedence(void)
{
    /* ULN_ROOT is set on purpose; PMIx's variables may be inherited. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    char root[64];
    snprintf(root, sizeof root, "ULN_ROOT=127.0.0.1:%d", ntohs(a.sin_port));
    const char *env[] = {
        "PMIX_NAMESPACE=no-such-job", "PMIX_RANK=0", root, "ULN_RANK=0", "ULN_SIZE=1", NULL};
    CHECK_EQ(open_in_child(env), MODE_ROOT);

    /* ulnrun's board, cheaper on one host, wins too. */
    int board = uln_board_create(1);
    CHECK(board >= 0);
    char fdv[32];
    snprintf(fdv, sizeof fdv, "ULN_BOOT_FD=%d", board);
    const char *env2[] = {"PMIX_NAMESPACE=no-such-job",
                          "PMIX_RANK=0",
                          fdv,
                          "ULN_RANK=0",
                          "ULN_SIZE=1",
                          "ULN_JOB_KEY=5",
                          NULL};
    CHECK_EQ(open_in_child(env2), MODE_ULNRUN);
    close(board);
}

int main(void)
{
    case_built();
    case_job_key();
    case_started();
    case_no_server();
    case_precedence();
    return summary();
}
