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
 * sleeps again. The kernel's RT throttle (sched_rt_runtime_us) is a second,
 * coarser bound. --nice N is the milder alternative (CFS weight only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

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

/* Running since `woke` (ns): past the budget, leave the real-time class. */
void sched_running(struct ulnetd *d, uint64_t woke, uint64_t now)
{
    if (!d->rt_on || now - woke < d->rt_budget_ns) return;
    if (set_class(SCHED_OTHER, 0) == 0) {
        d->rt_on = false;
        d->c.rt_drops++;
    }
}

/* About to sleep: the next wake-up preempts again. */
void sched_sleeping(struct ulnetd *d)
{
    if (d->rt_prio && !d->rt_on && set_class(SCHED_FIFO, d->rt_prio) == 0) d->rt_on = true;
}
