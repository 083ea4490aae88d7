/*
 * sched.c - the service's scheduling class (issue 32 item 7, docs/service.md
 * "CPU").
 *
 * On a host with fewer CPUs than busy processes a woken service waits for
 * the CPU a polling rank holds until CFS lets it in (13-20 us measured, at
 * times a slice). With --rt the service runs SCHED_FIFO at a low priority
 * while it is woken: a wake-up preempts a CFS rank at once. It sleeps when
 * idle, so it takes no CPU then; and so that a flood of work can never
 * starve a rank on its CPU, it keeps the real-time class only for a budget
 * of continuous running after each wake-up (--rt-budget-us): past it, it
 * drops to SCHED_OTHER and shares the CPU as any process does, until it
 * sleeps again. A flood of short runs (a packet, a sleep, a packet) never
 * reaches that budget, so it also keeps a share (--rt-share, % of a 10 ms
 * window of its own CPU time): past it, the rest of the window is
 * SCHED_OTHER. The kernel's RT throttle (sched_rt_runtime_us) is a third,
 * coarser bound. --nice N is the milder alternative (CFS weight only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ulnetd.h"

static int set_class(int policy, int prio)
{
    struct sched_param sp = {.sched_priority = prio};
    return sched_setscheduler(0, policy | SCHED_RESET_ON_FORK, &sp) == 0 ? 0 : -errno;
}

/* At start: check that the class can be had, say so once, and take it. */
int sched_setup(struct ulnetd *d)
{
    if (d->nice_set && setpriority(PRIO_PROCESS, 0, d->nice) != 0) {
        fprintf(stderr, "ulnetd: --nice %d: %s\n", d->nice, strerror(errno));
        return -1;
    }
    if (!d->rt_prio) return 0;
    if (d->rt_share < 1 || d->rt_share > 100) {
        fprintf(stderr, "ulnetd: --rt-share %u: want 1..100\n", d->rt_share);
        return -1;
    }
    int lo = sched_get_priority_min(SCHED_FIFO), hi = sched_get_priority_max(SCHED_FIFO);
    if (d->rt_prio < lo || d->rt_prio > hi) {
        fprintf(stderr, "ulnetd: --rt=%d: want %d..%d\n", d->rt_prio, lo, hi);
        return -1;
    }
    int rc = set_class(SCHED_FIFO, d->rt_prio);
    if (rc) {
        /* No CAP_SYS_NICE (or an RT-less cgroup): run as before, say why. */
        fprintf(stderr, "ulnetd: --rt: SCHED_FIFO refused (%s): running SCHED_OTHER\n",
                strerror(-rc));
        d->rt_prio = 0;
        return 0;
    }
    d->rt_on = true;
    return 0;
}

#define RT_WINDOW_NS 10000000u

static uint64_t clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Running since `woke` (ns): past the budget, leave the real-time class. */
void sched_running(struct ulnetd *d, uint64_t woke, uint64_t now)
{
    if (!d->rt_on || now - woke < d->rt_budget_ns) return;
    if (set_class(SCHED_OTHER, 0) == 0) {
        d->rt_on = false;
        d->c.rt_drops++;
    }
}

/* About to sleep: the next wake-up preempts again, unless this window's
 * share is spent. The thread's CPU time is read here only (a system call
 * per sleep, with --rt alone), so a window is judged at its sleeps. */
void sched_sleeping(struct ulnetd *d)
{
    if (!d->rt_prio) return;
    uint64_t now = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (now - d->rt_win_at >= RT_WINDOW_NS) {
        d->rt_win_at = now;
        d->rt_win_cpu = cpu;
        d->rt_over = false;
    } else if (!d->rt_over && (cpu - d->rt_win_cpu) * 100 > (uint64_t)RT_WINDOW_NS * d->rt_share) {
        d->rt_over = true;
        d->c.rt_over++;
    }
    bool want = !d->rt_over;
    if (want == d->rt_on) return;
    if (set_class(want ? SCHED_FIFO : SCHED_OTHER, want ? d->rt_prio : 0) == 0) d->rt_on = want;
}
