/*
 * ulnrun - start an ulnet job on this host and supervise it.
 *
 *   ulnrun -n N [--timeout S] [--keep-going] [--] prog args...
 *
 * Starts N copies of prog (ranks 0..N-1) with ULN_RANK, ULN_SIZE, ULN_JOB_KEY
 * and ULN_BOOT_FD set, then waits. The job ends as a whole: when one rank fails
 * (non-zero exit or signal), when the timeout expires, or when ulnrun itself is
 * asked to stop, the other ranks get SIGTERM, then SIGKILL after a grace period.
 * With --keep-going a failing rank does not end the job: the others run on
 * (they see the dead rank as -ECONNRESET) until they all exit or the timeout.
 * The status is then the failures' common status, or 1 if they differ.
 * If ulnrun is killed outright, the kernel kills the ranks (PR_SET_PDEATHSIG).
 *
 * Exit status: 0 if every rank exited 0; otherwise the first failing rank's
 * status (exit code, or 128+signal); 124 on timeout; 128+signo when ulnrun was
 * stopped by SIGINT/SIGTERM/SIGHUP; 2 on a usage error; 1 if the job could not
 * be set up.
 *
 * ulnrun creates no named object: the bootstrap board is an anonymous memfd,
 * so however the job ends nothing is left in /dev/shm or the file system.
 *
 * ulnrun is single-threaded, which is what makes the fork-then-exec path and
 * the signalfd-based supervision simple and race-free.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* execvpe, signalfd, ppoll, getopt_long, PR_SET_PDEATHSIG */
#endif

#include "boot/board.h"
#include "ulnet.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define GRACE_NS     (2 * 1000000000LL) /* SIGTERM -> SIGKILL */
#define EXIT_USAGE   2
#define EXIT_SETUP   1
#define EXIT_TIMEOUT 124
#define EXIT_EXEC    127

static const char *prog_name = "ulnrun";

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: %s -n N [--timeout S] [--keep-going] [--] prog [args...]\n"
            "Start N ranks of an ulnet job on this host and supervise them.\n"
            "\n"
            "  -n N           number of ranks (1..%u); also -np N, --np N (as mpirun)\n"
            "  --timeout S    end the job after S seconds (fractions allowed); exit 124\n"
            "  --keep-going   a failing rank does not end the job: the others run on;\n"
            "                 the status is the failures' own, or 1 if they differ\n"
            "  -V, --version  the version of ulnet it comes with\n"
            "  -h, --help     show this help\n"
            "\n"
            "Each rank gets ULN_RANK, ULN_SIZE, ULN_JOB_KEY and ULN_BOOT_FD.\n"
            "If a rank fails, the others get SIGTERM (SIGKILL 2 s later) and ulnrun\n"
            "exits with the failing rank's status (128+signal if it was killed).\n",
            prog_name, ULN_BOARD_MAX_RANKS);
}

static _Noreturn __attribute__((format(printf, 1, 2))) void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog_name);
    va_end(ap);
    exit(EXIT_USAGE);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char *signame(int sig)
{
    switch (sig) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    default:
        return "signal";
    }
}

/* ------------------------------------------------------------------------- */
/* Job state                                                                  */
/* ------------------------------------------------------------------------- */

struct job {
    unsigned n;
    pid_t *pids;      /* pid of rank r, 0 once reaped (or never started) */
    unsigned running; /* started and not yet reaped */
    bool ending;      /* SIGTERM sent; waiting for the ranks to go */
    bool killed;      /* SIGKILL sent */
    bool signalled;   /* ulnrun itself was told to stop (SIGINT/SIGTERM/SIGHUP) */
    bool keep_going;  /* --keep-going: a rank's failure is reported, not acted on */
    int64_t kill_at;  /* when ending: monotonic deadline for SIGKILL */
    int exit_code;    /* decided by the first event that ends the job */
    double timeout_s; /* --timeout, 0 if none */
    int64_t stop_at;  /* --timeout's monotonic deadline, set once the ranks exist */
};

static void signal_all(struct job *job, int sig)
{
    /* Only unreaped pids are signalled: a child we have not waited for cannot
     * have its pid reused, so this never hits an unrelated process. */
    for (unsigned r = 0; r < job->n; r++)
        if (job->pids[r] > 0) kill(job->pids[r], sig);
}

static void end_job(struct job *job, int exit_code)
{
    if (job->ending) return;
    job->ending = true;
    job->exit_code = exit_code;
    job->kill_at = now_ns() + GRACE_NS;
    signal_all(job, SIGTERM);
}

static int find_rank(const struct job *job, pid_t pid)
{
    for (unsigned r = 0; r < job->n; r++)
        if (job->pids[r] == pid) return (int)r;
    return -1;
}

/* --keep-going: the survivors are meant to notice the death themselves (that
 * is what the job tests); only remember the failure for the status. */
static void note_keep_going(struct job *job, int r, pid_t pid, int st)
{
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 0) return;
    fprintf(stderr, "%s: rank %d (pid %ld) %s %d; the others go on (--keep-going)\n", prog_name, r,
            (long)pid, WIFEXITED(st) ? "exited with status" : "killed by signal",
            WIFEXITED(st) ? code : WTERMSIG(st));
    /* One failure, or several alike: that status. Failures that differ (a
     * survivor failing after a rank was killed) must not hide behind the
     * first one: then the status is 1. */
    if (job->exit_code == 0)
        job->exit_code = code;
    else if (code != job->exit_code)
        job->exit_code = EXIT_SETUP;
}

/* Without --keep-going a failing rank ends the job with its own status. */
static void note_exit(struct job *job, int r, pid_t pid, int st)
{
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s: rank %d (pid %ld) exited with status %d; ending the job\n", prog_name,
                r, (long)pid, WEXITSTATUS(st));
        end_job(job, WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        fprintf(stderr, "%s: rank %d (pid %ld) killed by signal %d; ending the job\n", prog_name, r,
                (long)pid, WTERMSIG(st));
        end_job(job, 128 + WTERMSIG(st));
    }
}

/* Reap every child that has terminated. SIGCHLD is a standard signal and
 * coalesces, so one notification may stand for several exits: always drain. */
static void reap(struct job *job)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid == 0) return;
        if (pid < 0) {
            if (errno == EINTR) continue;
            return; /* ECHILD: nothing left */
        }
        int r = find_rank(job, pid);
        if (r < 0) continue; /* not ours (cannot happen unless inherited); just reaped */
        job->pids[r] = 0;
        job->running--;
        if (job->ending) continue; /* the job is already ending: deaths are expected now */
        if (job->keep_going)
            note_keep_going(job, r, pid, st);
        else
            note_exit(job, r, pid, st);
    }
}

/* ------------------------------------------------------------------------- */
/* Starting the ranks                                                         */
/* ------------------------------------------------------------------------- */

static bool is_uln_var(const char *e)
{
    static const char *const ours[] = {"ULN_RANK=", "ULN_SIZE=", "ULN_JOB_KEY=", "ULN_BOOT_FD="};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (strncmp(e, ours[i], strlen(ours[i])) == 0) return true;
    return false;
}

/* Runs in the child between fork and exec. */
static _Noreturn void start_rank(unsigned rank, pid_t parent, char **argv, char **envp,
                                 bool keep_hup_ignored)
{
    /* If ulnrun dies for any reason, even SIGKILL, take this rank with it. The
     * parent may already have died before prctl took effect; then getppid no
     * longer names it and the rank must not start as an orphan. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(EXIT_EXEC);

    /* Hand the program a clean signal state: ulnrun blocks signals for its
     * signalfd, and a background launch from a non-interactive shell leaves
     * SIGINT/SIGQUIT ignored; both survive exec. SIGHUP stays ignored if it was
     * ignored when ulnrun started (nohup): that was the user's explicit wish. */
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || (sig == SIGHUP && keep_hup_ignored)) continue;
        signal(sig, SIG_DFL); /* fails harmlessly for libc-reserved signals */
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    execvpe(argv[0], argv, envp);
    fprintf(stderr, "%s: rank %u: cannot run '%s': %s\n", prog_name, rank, argv[0],
            strerror(errno));
    _exit(EXIT_EXEC);
}

/* ------------------------------------------------------------------------- */

/* mpirun's "-np N" is what MPI users type; getopt would read it as "-n p".
 * Rewrite it to "-n" among ulnrun's own options (before the program). */
static void accept_np(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !strcmp(a, "--")) return; /* the program starts here */
        if (!strcmp(a, "-np"))
            argv[i] = "-n";
        else if (!strcmp(a, "-n") || !strcmp(a, "--np") || !strcmp(a, "--timeout"))
            i++; /* skip the option's value */
    }
}

struct options {
    unsigned n;       /* -n: number of ranks */
    double timeout_s; /* --timeout, 0 if none */
    bool keep_going;  /* --keep-going */
    char **prog_argv; /* the program and its arguments */
};

static unsigned parse_ranks(const char *arg)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    /* strtoul accepts "-1" and wraps it; refuse any sign explicitly. */
    if (errno || end == arg || *end || strchr(arg, '-') || v == 0 || v > ULN_BOARD_MAX_RANKS)
        usage_error("-n wants a number of ranks from 1 to %u, not '%s'", ULN_BOARD_MAX_RANKS, arg);
    return (unsigned)v;
}

static double parse_timeout(const char *arg)
{
    char *end;
    errno = 0;
    double s = strtod(arg, &end);
    /* Upper bound keeps the nanosecond deadline far from overflow. */
    if (errno || end == arg || *end || !isfinite(s) || s <= 0 || s > 1e9)
        usage_error("--timeout wants a positive number of seconds, not '%s'", arg);
    return s;
}

/* Fills *o from the command line. Returns -1 to go on, or the status to exit
 * with at once (0 after --help, EXIT_USAGE on a bad option). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},       {"timeout", required_argument, NULL, 't'},
        {"keep-going", no_argument, NULL, 'k'}, {"np", required_argument, NULL, 'n'},
        {"version", no_argument, NULL, 'V'},    {NULL, 0, NULL, 0},
    };
    *o = (struct options){0};
    accept_np(argc, argv);
    int opt;
    /* '+': stop at the first non-option, so prog's own options are left alone. */
    while ((opt = getopt_long(argc, argv, "+hVn:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("ulnrun (ulnet) %s\n", uln_version(NULL));
            return 0;
        case 'n':
            o->n = parse_ranks(optarg);
            break;
        case 't':
            o->timeout_s = parse_timeout(optarg);
            break;
        case 'k':
            o->keep_going = true;
            break;
        default: /* getopt_long already said what was wrong */
            fprintf(stderr, "Try '%s --help'.\n", prog_name);
            return EXIT_USAGE;
        }
    }
    if (o->n == 0) usage_error("missing -n N (the number of ranks)");
    if (optind >= argc) usage_error("missing the program to run");
    o->prog_argv = argv + optind;
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Setting the job up                                                         */
/* ------------------------------------------------------------------------- */

/* A random job key, never 0: 0 means "unset" to uln_config. */
static int make_job_key(uint64_t *key)
{
    *key = 0;
    while (*key == 0) {
        ssize_t got = getrandom(key, sizeof *key, 0);
        if (got < 0 && errno != EINTR) {
            fprintf(stderr, "%s: getrandom: %s\n", prog_name, strerror(errno));
            return -1;
        }
        if (got != (ssize_t)sizeof *key) *key = 0;
    }
    return 0;
}

/* The bootstrap board for n ranks, as a descriptor the ranks inherit; -1 on
 * failure (reported). */
static int open_board(unsigned n)
{
    int board = uln_board_create(n);
    if (board < 0) {
        fprintf(stderr, "%s: cannot create the bootstrap board: %s\n", prog_name, strerror(-board));
        return -1;
    }
    if (board > STDERR_FILENO) return board;
    /* Started with a standard descriptor closed: do not let a rank find the
     * board on its stdin/stdout/stderr. F_DUPFD leaves close-on-exec off. */
    int moved = fcntl(board, F_DUPFD, STDERR_FILENO + 1);
    if (moved < 0) {
        fprintf(stderr, "%s: fcntl: %s\n", prog_name, strerror(errno));
        return -1;
    }
    close(board);
    return moved;
}

/* Blocks the signals ulnrun acts on and returns a signalfd that reads them;
 * -1 on failure (reported). *hup_ignored says whether SIGHUP was ignored by
 * whoever started us (nohup): then it is honoured, left ignored, not watched. */
static int watch_signals(bool *hup_ignored)
{
    struct sigaction old_hup;
    sigaction(SIGHUP, NULL, &old_hup);
    *hup_ignored = old_hup.sa_handler == SIG_IGN;

    /* Every signal we act on is blocked and read from a signalfd before the
     * first fork, so none can be lost or arrive "between" checks: a child that
     * exits at once still leaves SIGCHLD pending for the wait loop. */
    sigset_t watched;
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    if (!*hup_ignored) sigaddset(&watched, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &watched, NULL) != 0) {
        fprintf(stderr, "%s: sigprocmask: %s\n", prog_name, strerror(errno));
        return -1;
    }
    /* A shell starting us in the background leaves SIGINT ignored, and POSIX
     * lets a system discard an ignored signal even while it is blocked (Linux
     * happens to queue it). ulnrun must end the job when told to, so make the
     * dispositions plain defaults; being blocked, they never act. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    if (!*hup_ignored) sigaction(SIGHUP, &dfl, NULL);
    /* SIGCHLD must not be SIG_IGN either: that would make the kernel reap the
     * ranks itself and waitpid could not report their status. */
    sigaction(SIGCHLD, &dfl, NULL);

    int sfd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) fprintf(stderr, "%s: signalfd: %s\n", prog_name, strerror(errno));
    return sfd;
}

/* The ranks' environment and the job variables' storage it points into. */
struct rank_env {
    char **envp;
    char rank_var[32], size_var[32], key_var[48], fd_var[32];
};

/* The environment for the ranks: ours, minus stale ULN_* job variables (e.g.
 * when ulnrun is started from inside a rank), plus the job's. ULN_RANK is left
 * empty for start_ranks to write before each fork. envp[] is calloc'ed and
 * sized exactly: our environment plus the four job variables and the NULL. */
static void fill_env(struct rank_env *env, unsigned n, uint64_t job_key, int board)
{
    size_t k = 0;
    for (size_t i = 0; environ[i]; i++)
        if (!is_uln_var(environ[i])) env->envp[k++] = environ[i];
    snprintf(env->size_var, sizeof env->size_var, "ULN_SIZE=%u", n);
    snprintf(env->key_var, sizeof env->key_var, "ULN_JOB_KEY=%016" PRIx64, job_key);
    snprintf(env->fd_var, sizeof env->fd_var, "ULN_BOOT_FD=%d", board);
    env->rank_var[0] = '\0';
    env->envp[k++] = env->rank_var;
    env->envp[k++] = env->size_var;
    env->envp[k++] = env->key_var;
    env->envp[k++] = env->fd_var;
    env->envp[k] = NULL;
}

/* Allocates the ranks' environment and the job's pid table; false (reported,
 * nothing left allocated) when out of memory. */
static bool alloc_job(struct job *job, struct rank_env *env, unsigned n)
{
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    env->envp = calloc(nenv + 5, sizeof *env->envp);
    job->pids = calloc(n, sizeof *job->pids);
    if (env->envp && job->pids) return true;
    fprintf(stderr, "%s: out of memory\n", prog_name);
    free(env->envp);
    free(job->pids);
    return false;
}

/* Forks and execs every rank. If one cannot be started, the job is ended. */
static void start_ranks(struct job *job, struct rank_env *env, char **prog_argv, bool hup_ignored)
{
    pid_t self = getpid();
    fflush(NULL); /* nothing buffered may be written twice by the children */
    for (unsigned r = 0; r < job->n; r++) {
        snprintf(env->rank_var, sizeof env->rank_var, "ULN_RANK=%u", r);
        pid_t pid = fork();
        if (pid == 0) start_rank(r, self, prog_argv, env->envp, hup_ignored);
        if (pid < 0) {
            /* The ranks already started would wait forever for the missing
             * ones: end the job the usual way. */
            fprintf(stderr, "%s: cannot start rank %u: %s; ending the job\n", prog_name, r,
                    strerror(errno));
            end_job(job, EXIT_SETUP);
            return;
        }
        job->pids[r] = pid;
        job->running++;
    }
}

/* ------------------------------------------------------------------------- */
/* Supervising the ranks                                                      */
/* ------------------------------------------------------------------------- */

/* Acts on the deadlines that have passed: --timeout ends the job, the grace
 * period after SIGTERM running out brings SIGKILL. */
static void check_deadlines(struct job *job, int64_t now)
{
    if (!job->ending && job->timeout_s > 0 && now >= job->stop_at) {
        fprintf(stderr, "%s: timeout after %g s; ending the job\n", prog_name, job->timeout_s);
        end_job(job, EXIT_TIMEOUT);
    }
    if (job->ending && !job->killed && now >= job->kill_at) {
        fprintf(stderr, "%s: %u rank(s) still running %g s after SIGTERM; sending SIGKILL\n",
                prog_name, job->running, GRACE_NS / 1e9);
        signal_all(job, SIGKILL);
        job->killed = true;
    }
}

/* Sleeps until a signal arrives on sfd or the next deadline passes. */
static void wait_event(const struct job *job, int sfd, int64_t now)
{
    int64_t until = -1;
    if (job->ending && !job->killed)
        until = job->kill_at;
    else if (!job->ending && job->timeout_s > 0)
        until = job->stop_at;
    struct timespec ts, *tsp = NULL;
    if (until >= 0) {
        int64_t d = until > now ? until - now : 0;
        ts.tv_sec = (time_t)(d / 1000000000LL);
        ts.tv_nsec = (long)(d % 1000000000LL);
        tsp = &ts;
    }
    struct pollfd pfd = {.fd = sfd, .events = POLLIN};
    if (ppoll(&pfd, 1, tsp, NULL) < 0 && errno != EINTR) {
        /* Cannot happen with one valid fd short of ENOMEM. Degrade to
         * polling rather than spin or abandon the ranks. */
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

/* Acts on the signals read from sfd: the first request to stop ends the job,
 * a second one kills the ranks outright. SIGCHLD only wakes the loop. */
static void handle_signals(struct job *job, int sfd)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) continue; /* reap() at the top of the wait loop */
        if (!job->signalled) {
            /* The job may already be ending: Ctrl-C reaches the ranks as
             * well, and one of their deaths can be reaped before this
             * signal is read. Either way the ranks keep their grace. */
            job->signalled = true;
            if (!job->ending) {
                fprintf(stderr, "%s: caught %s; ending the job\n", prog_name, signame(sig));
                end_job(job, 128 + sig);
            }
        } else if (!job->killed) {
            /* Asked a second time (Ctrl-C again): stop waiting for them. */
            fprintf(stderr, "%s: caught %s again; sending SIGKILL\n", prog_name, signame(sig));
            signal_all(job, SIGKILL);
            job->killed = true;
        }
    }
}

/* Waits until every started rank has been reaped. */
static void supervise(struct job *job, int sfd)
{
    /* The timeout counts from the moment the ranks exist. */
    if (job->timeout_s > 0) job->stop_at = now_ns() + (int64_t)(job->timeout_s * 1e9);
    while (job->running > 0) {
        reap(job);
        if (job->running == 0) break;
        int64_t now = now_ns();
        check_deadlines(job, now);
        wait_event(job, sfd, now);
        handle_signals(job, sfd);
    }
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;

    uint64_t job_key;
    if (make_job_key(&job_key) < 0) return EXIT_SETUP;
    int board = open_board(o.n);
    if (board < 0) return EXIT_SETUP;
    bool hup_ignored;
    int sfd = watch_signals(&hup_ignored);
    if (sfd < 0) return EXIT_SETUP;

    struct job job = {.n = o.n, .keep_going = o.keep_going, .timeout_s = o.timeout_s};
    struct rank_env env;
    if (!alloc_job(&job, &env, o.n)) return EXIT_SETUP;
    fill_env(&env, o.n, job_key, board);

    start_ranks(&job, &env, o.prog_argv, hup_ignored);
    supervise(&job, sfd);

    close(sfd);
    close(board);
    free(job.pids);
    free(env.envp);
    return job.exit_code;
}
