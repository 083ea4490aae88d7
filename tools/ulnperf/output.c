/* ulnperf's output (rank 0): the table, the CSV rows and the progress line. */
#include "perf.h"

void progress_clear(struct perf *pf)
{
    if (pf->out.shown) {
        fputs("\r\033[K", stderr);
        pf->out.shown = false;
    }
}

/* label: this point; group: its scenario/op, printed once per group when
 * stderr is not a terminal (a log), rather than once per point. */
void progress(struct perf *pf, int done, int total, const char *label, const char *group)
{
    if (pf->out.tty) {
        fprintf(stderr, "\r\033[K[%3d/%d] %s", done + 1, total, label);
        pf->out.shown = true;
    } else if (group) {
        fprintf(stderr, "ulnperf: [%3d/%d] %s\n", done + 1, total, group);
    }
    fflush(stderr);
}

const char *size_str(size_t s, char *buf, size_t n)
{
    if (s >= (1u << 20) && !(s & ((1u << 20) - 1)))
        snprintf(buf, n, "%zuM", s >> 20);
    else if (s >= 1024 && !(s & 1023))
        snprintf(buf, n, "%zuK", s >> 10);
    else
        snprintf(buf, n, "%zu", s);
    return buf;
}

void csv_row_s(struct perf *pf, const char *op, const char *test, uint64_t size, double value,
               const char *unit)
{
    if (pf->out.csv) {
        fprintf(pf->out.csv, "%s,%s,%s,%" PRIu64 ",%.6g,%s\n", pf->csv_tp, op, test, size, value,
                unit);
        fflush(pf->out.csv);
    }
}

/* An op's name in the output: put and get with --iov N are putv/getv, with N. */
static const char *op_label(const struct perf *pf, int op, char *buf, size_t n)
{
    if (!pf->opt->iov || (op != OP_PUT && op != OP_GET)) return op_names[op];
    snprintf(buf, n, "%sv%u", op_names[op], pf->opt->iov);
    return buf;
}

void csv_row(struct perf *pf, int op, const char *test, size_t size, double value, const char *unit)
{
    char l[16];
    csv_row_s(pf, op_label(pf, op, l, sizeof l), test, size, value, unit);
}

void table_head(struct perf *pf)
{
    if (pf->opt->csv_stdout) return;
    progress_clear(pf);
    printf("%-10s %-10s %6s %12s %12s %10s %10s %10s  %s\n", "op", "test", "size", "median_us",
           "p99_us", "GB/s", "Mmsg/s", "iters", "note");
}

void table_row(struct perf *pf, int op, const char *test, size_t size, double med, double p99,
               double gbs, double mmsg, uint64_t iters, const char *note)
{
    if (pf->opt->csv_stdout) return;
    char sz[32], a[16] = "", b[16] = "", c[16] = "", d[16] = "";
    if (med > 0) snprintf(a, sizeof a, "%.3f", med);
    if (p99 > 0) snprintf(b, sizeof b, "%.3f", p99);
    if (gbs > 0) snprintf(c, sizeof c, "%.3f", gbs);
    if (mmsg > 0) snprintf(d, sizeof d, "%.3f", mmsg);
    progress_clear(pf);
    char l[16];
    printf("%-10s %-10s %6s %12s %12s %10s %10s %10" PRIu64 "  %s\n", op_label(pf, op, l, sizeof l),
           test, size_str(size, sz, sizeof sz), a, b, c, d, iters, note ? note : "");
    fflush(stdout);
}
