/*
 * ulnrun_helper - a rank program for testing ulnrun without the library.
 *
 *   ulnrun_helper env
 *       Check what ulnrun handed this rank (environment, board descriptor,
 *       signal state) and print one line of key=value pairs for the test script
 *       to compare across ranks and runs. Exit 1 on anything wrong.
 *
 *   ulnrun_helper job DIR ACTOR ACTION OTHERS
 *       Write this rank's pid to DIR/pid.RANK (so the script knows every pid
 *       before anything happens), wait until all ULN_SIZE ranks have done so,
 *       then: rank ACTOR (-1: none) does ACTION, every other rank does OTHERS.
 *       ACTION/OTHERS: exit:N | signal:N | abort | sleep | ignore-term | pause:MS
 *       (ignore-term: sleep with SIGTERM ignored, so only SIGKILL ends it;
 *       pause:MS: sleep MS milliseconds, then exit 0).
 *
 * Only the board layout (board.h, header-only) is used, not the library, so
 * these tests run while the library is still being written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "boot/board.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "ulnrun_helper: check failed: " __VA_ARGS__);                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static long env_long(const char *name, int base)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "ulnrun_helper: %s is not set\n", name);
        exit(1);
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, base);
    if (errno || *end) {
        fprintf(stderr, "ulnrun_helper: %s='%s' is not a number\n", name, v);
        exit(1);
    }
    return x;
}

static int do_env(void)
{
    long rank = env_long("ULN_RANK", 10);
    long size = env_long("ULN_SIZE", 10);
    long fd = env_long("ULN_BOOT_FD", 10);
    const char *key = getenv("ULN_JOB_KEY");

    CHECK(size >= 1 && size <= (long)ULN_BOARD_MAX_RANKS, "ULN_SIZE=%ld out of range", size);
    CHECK(rank >= 0 && rank < size, "ULN_RANK=%ld not in 0..%ld", rank, size - 1);

    /* 16 lowercase hex digits, not all zero (0 means "no key"). */
    int key_ok =
        key && strlen(key) == 16 && strspn(key, "0123456789abcdef") == 16 && strspn(key, "0") != 16;
    CHECK(key_ok, "ULN_JOB_KEY='%s' is not 16 lowercase hex digits, nonzero", key ? key : "");

    /* The descriptor must have survived exec (so: no close-on-exec), be a
     * memfd, have the board's size and carry the header ulnrun wrote. */
    int flags = fcntl((int)fd, F_GETFD);
    CHECK(flags >= 0, "ULN_BOOT_FD=%ld is not open", fd);
    CHECK(fd > STDERR_FILENO, "ULN_BOOT_FD=%ld is a standard descriptor", fd);
    char link[64], target[256] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len > 0) target[len] = '\0';
    int is_memfd = strncmp(target, "/memfd:", 7) == 0;
    CHECK(is_memfd, "ULN_BOOT_FD=%ld is '%s', not a memfd", fd, target);

    struct stat st = {0};
    size_t want = uln_board_bytes((unsigned)size);
    CHECK(fstat((int)fd, &st) == 0 && (size_t)st.st_size == want, "board is %jd bytes, want %zu",
          (intmax_t)st.st_size, want);

    int hdr_ok = 0;
    if ((size_t)st.st_size == want) {
        const struct uln_board_hdr *h = mmap(NULL, want, PROT_READ, MAP_SHARED, (int)fd, 0);
        CHECK(h != MAP_FAILED, "cannot map the board: %s", strerror(errno));
        if (h != MAP_FAILED) {
            hdr_ok = h->magic == ULN_BOARD_MAGIC && h->nranks == (uint32_t)size &&
                     h->slot_bytes == ULN_BOARD_SLOT_BYTES;
            CHECK(hdr_ok, "board header: magic %" PRIx64 " nranks %u slot_bytes %u", h->magic,
                  h->nranks, h->slot_bytes);
            munmap((void *)h, want);
        }
    }

    /* A rank must not be able to shrink the board under the others. */
    int sealed = ftruncate((int)fd, 0) != 0 && errno == EPERM;
    CHECK(sealed, "the board can be truncated");

    /* ulnrun blocks signals and the test launches it in the background (where
     * bash ignores SIGINT); the rank must still start with the defaults. */
    sigset_t mask;
    sigprocmask(SIG_SETMASK, NULL, &mask);
    int mask_empty = 1;
    for (int s = 1; s < NSIG; s++)
        if (sigismember(&mask, s) == 1) mask_empty = 0;
    CHECK(mask_empty, "signal mask not empty");
    int dfl = 1;
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        sigaction(sigs[i], NULL, &sa);
        if (sa.sa_handler != SIG_DFL) {
            CHECK(0, "signal %d is not SIG_DFL", sigs[i]);
            dfl = 0;
        }
    }

    printf("rank=%ld size=%ld key=%s fd=%ld memfd=%d bytes=%jd hdr=%d sealed=%d mask_empty=%d "
           "sig_dfl=%d\n",
           rank, size, key ? key : "", fd, is_memfd, (intmax_t)st.st_size, hdr_ok, sealed,
           mask_empty, dfl);
    return failures ? 1 : 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void act(const char *what)
{
    if (strncmp(what, "exit:", 5) == 0) exit(atoi(what + 5));
    if (strncmp(what, "signal:", 7) == 0) {
        int sig = atoi(what + 7);
        signal(sig, SIG_DFL);
        kill(getpid(), sig);
        sleep_ms(5000); /* a blocked or ignored signal: fall through visibly */
        exit(99);
    }
    if (strcmp(what, "abort") == 0) abort();
    if (strncmp(what, "pause:", 6) == 0) {
        sleep_ms(atol(what + 6));
        exit(0);
    }
    if (strcmp(what, "sleep") == 0 || strcmp(what, "ignore-term") == 0) {
        /* Long enough to outlive any test; ulnrun has to end it. */
        sleep_ms(60000);
        exit(0);
    }
    fprintf(stderr, "ulnrun_helper: unknown action '%s'\n", what);
    exit(98);
}

static int do_job(const char *dir, int actor, const char *action, const char *others)
{
    long rank = env_long("ULN_RANK", 10);
    long size = env_long("ULN_SIZE", 10);
    const char *mine = rank == actor ? action : others;

    /* abort() should not leave core files around or spend time writing them. */
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    /* Set up before announcing the pid: once the script sees all pids it may
     * start sending signals. */
    if (strcmp(mine, "ignore-term") == 0) signal(SIGTERM, SIG_IGN);

    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/.pid.%ld", dir, rank);
    snprintf(path, sizeof path, "%s/pid.%ld", dir, rank);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "ulnrun_helper: %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "%ld\n", (long)getpid());
    /* rename: the script never reads a half-written pid. */
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "ulnrun_helper: %s: %s\n", path, strerror(errno));
        return 1;
    }

    /* Wait (bounded) until every rank has announced itself. */
    for (int waited = 0;; waited += 5) {
        long n = 0;
        for (long r = 0; r < size; r++) {
            snprintf(path, sizeof path, "%s/pid.%ld", dir, r);
            n += access(path, F_OK) == 0;
        }
        if (n == size) break;
        if (waited > 30000) {
            fprintf(stderr, "ulnrun_helper: rank %ld: only %ld of %ld ranks started\n", rank, n,
                    size);
            return 1;
        }
        sleep_ms(5);
    }
    act(mine);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "env") == 0) return do_env();
    if (argc == 6 && strcmp(argv[1], "job") == 0)
        return do_job(argv[2], atoi(argv[3]), argv[4], argv[5]);
    fprintf(stderr, "usage: ulnrun_helper env | job DIR ACTOR ACTION OTHERS\n");
    return 2;
}
