/* ulnperf: the clock of its measurements, the TSC where it is one. */
#include "perf.h"

#if HAVE_TSC

/* A (clock, TSC) pair read close together: a preemption between the two reads
 * would skew the calibration, so retry until the TSC reads around the clock
 * are near (2000 cycles is < 1 us at any plausible rate), and take their mean. */
static void tsc_pair(uint64_t *ns, uint64_t *tsc)
{
    for (int i = 0;; i++) {
        uint64_t a = __rdtsc();
        *ns = mono_ns();
        uint64_t b = __rdtsc();
        *tsc = a + (b - a) / 2;
        if (b - a < 2000 || i == 100) return;
    }
}
#endif

/* The TSC is only a clock if its rate is constant (constant_tsc); otherwise
 * fall back to clock_gettime, which costs ~20 ns a call through the vDSO. */
void timer_init(struct perf *pf, unsigned calib_ms)
{
#if HAVE_TSC
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    bool constant = false;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            constant = strstr(line, " constant_tsc") != NULL;
            break;
        }
    if (f) fclose(f);
    if (!constant) return;
    uint64_t n0, c0, n1, c1;
    tsc_pair(&n0, &c0);
    do
        tsc_pair(&n1, &c1);
    while (n1 - n0 < (uint64_t)calib_ms * 1000000u);
    double r = (double)(c1 - c0) / (double)(n1 - n0);
    if (r > 0.05 && r < 100) { /* a plausible 50 MHz .. 100 GHz */
        pf->tm.ticks_per_ns = r;
        pf->tm.use_tsc = true;
    }
#else
    (void)calib_ms;
#endif
}
