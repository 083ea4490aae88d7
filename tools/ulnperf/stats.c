/* ulnperf: statistics of the samples. */
#include "perf.h"

#include <math.h>

/* Moves the k-th smallest of a[0..n) to a[k], with only smaller-or-equal
 * values before it (quickselect). O(n): sorting a million samples per point
 * would add a visible pause to every small-message point. */
static uint64_t select_k(uint64_t *a, long n, long k)
{
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        uint64_t pv = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pv)
                i++;
            while (a[j] > pv)
                j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        /* Now a[lo..j] <= pv, a[i..hi] >= pv and anything between equals pv. */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return a[k];
}

/* Median and p99 of n samples (reorders them). */
void med_p99(uint64_t *s, uint64_t n, uint64_t *med, uint64_t *p99)
{
    long i99 = (long)ceil(0.99 * (double)n) - 1;
    if (i99 < 0) i99 = 0;
    /* p99 first: it leaves the i99+1 smallest in front, median among them. */
    *p99 = select_k(s, (long)n, i99);
    *med = select_k(s, i99 + 1, (long)n / 2);
}

/* Jain's fairness index of x[0..n): 1 when all are equal, 1/n when one has all. */
double jain(const double *x, unsigned n)
{
    double s = 0, s2 = 0;
    for (unsigned i = 0; i < n; i++)
        s += x[i], s2 += x[i] * x[i];
    return s2 > 0 ? s * s / ((double)n * s2) : 0;
}
