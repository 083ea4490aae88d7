/*
 * reaper.c - the service's XDP program does not outlive the service.
 *
 * An XDP program attached through netlink stays on its interface when the
 * process that attached it dies: a link's close detaches it, but a service
 * killed with -9 closes nothing, and until then the next ulnet process on the
 * interface removed it (the orphan check of src/link/xdp/program.c). So
 * before it opens AF_XDP the service forks a reaper that keeps nothing of it
 * but the read end of a pipe whose write end only the service holds. The
 * service writes the interface's index once its program is there, and 0 when
 * it ends cleanly (its link detached the program itself). End of file with
 * an index and no 0 is the service's death, however it came: the reaper
 * detaches the programs whose owner is dead (uln_link_xdp_reap: never a live
 * process's) and exits. Forked before the link opens, it maps none of the
 * link's memory and no process's: it delays no one's cleanup.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "ulnetd.h"
#include "link/xdp/link_xdp.h"

/* How long the reaper looks for the dead service's program: its death closes
 * the pipe just before the kernel marks the process dead (a zombie). */
#define REAP_TRIES    100
#define REAP_PAUSE_NS 10000000L

static int32_t next_word(int fd, bool *eof)
{
    int32_t v;
    ssize_t n;
    while ((n = read(fd, &v, sizeof v)) < 0 && errno == EINTR)
        ;
    *eof = n != (ssize_t)sizeof v;
    return *eof ? 0 : v;
}

static void reaper_main(int fd)
{
    /* systemd stops what is left of the unit with SIGTERM once the service
     * died: the detach comes first (a few ms). */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    prctl(PR_SET_NAME, "ulnetd-reaper");
    bool eof;
    int32_t ifindex = next_word(fd, &eof);
    if (eof || ifindex <= 0) _exit(0); /* no AF_XDP, or ended before it */
    (void)next_word(fd, &eof);
    if (!eof) _exit(0); /* the clean end: the link detached its program */
    struct timespec pause = {0, REAP_PAUSE_NS};
    for (int i = 0; i < REAP_TRIES && uln_link_xdp_reap(ifindex) == 0; i++)
        nanosleep(&pause, NULL);
    _exit(0);
}

int reaper_start(struct ulnetd *d)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(p[0]);
        close(p[1]);
        return e;
    }
    if (pid == 0) {
        /* Nothing of the service but the pipe's read end and stderr. */
        int fd = p[0];
        close(p[1]);
        if (fd > 3) close_range(3, (unsigned)fd - 1, 0);
        close_range(fd >= 3 ? (unsigned)fd + 1 : 3u, ~0u, 0);
        reaper_main(fd);
    }
    close(p[0]);
    d->reaper_fd = p[1];
    return 0;
}

static void say(struct ulnetd *d, int32_t v)
{
    if (d->reaper_fd < 0) return;
    if (write(d->reaper_fd, &v, sizeof v) != (ssize_t)sizeof v) {
        close(d->reaper_fd); /* a reaper gone: the next ulnet process reaps */
        d->reaper_fd = -1;
    }
}

void reaper_armed(struct ulnetd *d, int ifindex)
{
    say(d, ifindex);
}

void reaper_stop(struct ulnetd *d)
{
    say(d, 0);
    if (d->reaper_fd >= 0) close(d->reaper_fd);
    d->reaper_fd = -1;
}
