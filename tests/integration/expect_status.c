/*
 * expect_status - run a command and require one exact exit status, in time.
 *
 *   expect_status STATUS MAX_SECONDS cmd [args...]
 *
 * Used for jobs that are supposed to fail in a particular way (a rank killed
 * by SIGKILL must make ulnrun exit 137, not 1, 124 or "killed"): WILL_FAIL
 * would accept any failure, including a hang ended by ctest's timeout. The
 * command must also finish within MAX_SECONDS (less than ulnrun's own
 * --timeout, so ulnrun's timeout path does not count as success), and no
 * process it started may outlive it: this process is a child subreaper, so
 * orphaned ranks are reparented here and are seen.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: expect_status STATUS MAX_SECONDS cmd [args...]\n");
        return 2;
    }
    int want = atoi(argv[1]);
    double max_s = atof(argv[2]);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) perror("expect_status: PR_SET_CHILD_SUBREAPER");
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        execvp(argv[3], argv + 3);
        perror("expect_status: exec");
        _exit(127);
    }
    setpgid(pid, pid);
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            return 1;
        }
        if (now() - t0 > max_s) {
            fprintf(stderr, "expect_status: FAIL: %s still running after %.0f s; killing it\n",
                    argv[3], max_s);
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            printf("0 passed, 1 failed\n");
            return 1;
        }
        nap_ms(10);
    }
    double dt = now() - t0;
    int failed = 0;
    if (WIFEXITED(st)) {
        printf("expect_status: %s exited with status %d after %.2f s (want %d)\n", argv[3],
               WEXITSTATUS(st), dt, want);
        if (WEXITSTATUS(st) != want) failed++;
    } else {
        printf("expect_status: %s was killed by signal %d after %.2f s (want exit status %d)\n",
               argv[3], WIFSIGNALED(st) ? WTERMSIG(st) : -1, dt, want);
        failed++;
    }
    /* Every process the command started must be gone (reaped here if orphaned). */
    double t1 = now();
    int left = 0;
    for (;;) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r < 0 && errno == ECHILD) break;
        if (r > 0) continue;
        if (now() - t1 > 3) {
            left = 1;
            break;
        }
        nap_ms(10);
    }
    if (left) {
        fprintf(stderr, "expect_status: FAIL: processes of the job outlived it by 3 s\n");
        kill(-pid, SIGKILL);
        failed++;
        while (waitpid(-1, NULL, 0) > 0) {
        }
    }
    printf("%d passed, %d failed\n", 2 - failed, failed);
    return failed ? 1 : 0;
}
