/* ulnperf's options: parsed once, into one struct perf_opts. */
#include "perf.h"

#include <stdlib.h>

const char *const op_names[NOPS] = {"nap", "nap-inline", "put", "get", "atomic"};
const char *const test_names[NTESTS] = {"lat",   "bw",   "bibw", "rate",
                                        "cache", "fair", "load", "incast"};

void perf_usage(FILE *f)
{
    fprintf(f, "usage: ulnrun -n N [--timeout S] ulnperf [options]     (N >= 2)\n"
               "Measures ulnet's primitives (NAP, NAP inline, PUT, GET, atomic) on this host.\n"
               "  --test LIST     lat,bw,bibw,rate,cache,fair,load,incast or all (default all)\n"
               "                    lat   one-way latency (median, p99), ranks 0 and 1\n"
               "                    bw    bandwidth rank 0 -> 1, --window outstanding\n"
               "                    bibw  both ranks stream at each other at once\n"
               "                    rate  message rate with 1..W outstanding (--windows)\n"
               "                    cache PUT/GET to a region never touched (translation\n"
               "                          cache miss: open + mmap + page faults) vs warm\n"
               "                    fair  --fair-eps endpoints of rank 0 share the interface;\n"
               "                          each one's share over time, Jain's index\n"
               "                    load  ranks 1..N-1 send paced NAPs to rank 0: latency\n"
               "                          vs offered load (run with ulnrun -n 4 or more)\n"
               "                    incast ranks 1..N-1 stream NAPs of --sizes (8 B and up)\n"
               "                          into rank 0 for --incast-ms: aggregate msg/s,\n"
               "                          each sender's count; every NAP's sender and\n"
               "                          sequence checked (loss or duplication fails)\n"
               "  --op LIST       nap,nap-inline,put,get,atomic or all (default all);\n"
               "                  atomic: 8-byte fetch-add, in lat and rate only\n"
               "  --sizes SPEC    a-b: a, the powers of two between, b; or a list a,b,c\n"
               "                  (K/M/G suffixes; default 1-16M; nap stops at nap_max,\n"
               "                  nap-inline at inline_max)\n"
               "  --iters N       measured iterations per point (default: adapt so each\n"
               "                  point takes ~100 ms)\n"
               "  --window W      operations outstanding in bw/bibw/fair (default 32)\n"
               "  --windows LIST  rate: outstanding operations (default 1,2,4,8,64)\n"
               "  --silent        bw, rate: post ULN_SILENT with a uln_ep_flush per half\n"
               "                  window (a completion per batch, as ucp_put_nbi + flush;\n"
               "                  tests named *_silent in the CSV)\n"
               "  --now           lat of get and atomic: post with ULN_NOW, so an op done\n"
               "                  in the call is timed without a completion (UCX's immediate\n"
               "                  completion; tests named lat_now, lat_now_p99 in the CSV)\n"
               "  --rate-max S    rate: largest message size (default 64)\n"
               "  --load-size S   load: NAP payload (default 64, at least 16)\n"
               "  --load-levels L load: offered load in %% of the measured peak\n"
               "                  (default 10,20,...,100)\n"
               "  --fair-eps N    fair: endpoints (default 8)\n"
               "  --fair-size S   fair: message size (default 64K; NAP: at most nap_max)\n"
               "  --fair-ms T     fair: length of the run (default 10 points)\n"
               "  --incast-ms T   incast: length of each size's run (default 3 points)\n"
               "  --iov N         put, get: uln_putv/uln_getv with the payload in N equal\n"
               "                  segments (1..16; in lat, bw, bibw and rate)\n"
               "  --mem KIND      ulnet: PUT/GET buffers from uln_mem_alloc (peers map them)\n"
               "                  malloc: aligned_alloc + uln_mr_reg (peers use CMA)\n"
               "  --transport T   ask the library for transport T (sets ULN_TRANSPORT) and\n"
               "                  fail plainly if it runs another\n"
               "  --quick         a few ms per point (smoke test)\n"
               "  --point-ms T    time budget of one point, ms\n"
               "  --csv           CSV on stdout instead of the table\n"
               "  --csv=FILE      table on stdout and CSV into FILE\n"
               "  -V, --version   the library's version\n"
               "  -h, --help      this text\n"
               "Latency: nap, nap-inline and put report one-way time (RTT/2, ping-pong);\n"
               "get and atomic report the full operation time, a round trip by nature.\n"
               "CSV columns: transport,op,test,size,value,unit (man ulnperf).\n"
               "Plots (PNG, SVG) from such CSVs: bench/plot DIR CSV... in ulnet's sources.\n");
}

/* "16M", "4K", "100" -> bytes; 0 on a malformed number. */
static size_t parse_size(const char *s, const char **end)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || e == s) return 0;
    if (*e == 'K' || *e == 'k')
        v <<= 10, e++;
    else if (*e == 'M' || *e == 'm')
        v <<= 20, e++;
    else if (*e == 'G' || *e == 'g')
        v <<= 30, e++;
    *end = e;
    return (size_t)v;
}

static int add_size(struct perf_opts *o, size_t s)
{
    if (o->nsizes >= MAX_SIZES) return -1;
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] == s) return 0;
    o->sizes[o->nsizes++] = s;
    return 0;
}

static int parse_sizes(struct perf_opts *o, const char *spec)
{
    const char *p = spec, *e;
    size_t a = parse_size(p, &e);
    if (a && *e == '-') {
        size_t b = parse_size(e + 1, &e);
        if (!b || *e || b < a) return -1;
        if (add_size(o, a)) return -1;
        for (size_t s = 1; s < b; s <<= 1)
            if (s > a && add_size(o, s)) return -1;
        return add_size(o, b);
    }
    for (;;) {
        size_t s = parse_size(p, &e);
        if (!s || (*e && *e != ',') || add_size(o, s)) return -1;
        if (!*e) break;
        p = e + 1;
    }
    return 0;
}

/* "1,2,4" -> numbers in [lo, hi]; returns the count or -1. */
static int parse_uints(const char *spec, unsigned *out, int max, unsigned lo, unsigned hi)
{
    int n = 0;
    const char *p = spec;
    for (;;) {
        char *e;
        errno = 0;
        unsigned long v = strtoul(p, &e, 10);
        if (errno || e == p || v < lo || v > hi || n == max || (*e && *e != ',')) return -1;
        out[n++] = (unsigned)v;
        if (!*e) return n;
        p = e + 1;
    }
}

static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_uint(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;
    return a < b ? -1 : a > b;
}

/* Comma list of names -> bit mask; "all" selects everything. */
static int parse_list(const char *arg, const char *const *names, int n, unsigned *mask)
{
    char buf[256];
    if (strlen(arg) >= sizeof buf) return -1;
    strcpy(buf, arg);
    *mask = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "all")) {
            *mask = (1u << n) - 1;
            continue;
        }
        int i = 0;
        while (i < n && strcmp(t, names[i]))
            i++;
        if (i == n) return -1;
        *mask |= 1u << i;
    }
    return *mask ? 0 : -1;
}

/* The options of one scenario: 0, or -1 when a is none of them or v is bad. */
static int parse_scenario_opt(struct perf_opts *o, const char *a, const char *v)
{
    const char *e;
    char *x;
    if (!strcmp(a, "--windows")) {
        if ((o->nwindows = parse_uints(v, o->windows, MAX_WINDOWS, 1, 65536)) < 0) return -1;
    } else if (!strcmp(a, "--rate-max")) {
        if (!(o->rate_max = parse_size(v, &e)) || *e) return -1;
    } else if (!strcmp(a, "--load-size")) {
        if ((o->load_size = parse_size(v, &e)) < 16 || *e) return -1;
    } else if (!strcmp(a, "--load-levels")) {
        if ((o->nlevels = parse_uints(v, o->levels, MAX_LEVELS, 1, 100)) < 0) return -1;
    } else if (!strcmp(a, "--fair-eps")) {
        if (parse_uints(v, &o->fair_eps, 1, 1, MAX_FAIR) != 1) return -1;
    } else if (!strcmp(a, "--fair-size")) {
        if (!(o->fair_size = parse_size(v, &e)) || *e) return -1;
    } else if (!strcmp(a, "--fair-ms")) {
        o->fair_ms = strtod(v, &x);
        if (*x || !(o->fair_ms >= 1)) return -1;
    } else if (!strcmp(a, "--incast-ms")) {
        o->incast_ms = strtod(v, &x);
        if (*x || !(o->incast_ms >= 1)) return -1;
    } else {
        return -1;
    }
    return 0;
}

/* An option with a value v: 0, or -1 when a is unknown or v is bad. */
static int parse_valued(struct perf_opts *o, const char *a, const char *v)
{
    char *x;
    if (!strcmp(a, "--op")) return parse_list(v, op_names, NOPS, &o->ops);
    if (!strcmp(a, "--test")) return parse_list(v, test_names, NTESTS, &o->tests);
    if (!strcmp(a, "--sizes")) {
        o->nsizes = 0;
        return parse_sizes(o, v);
    }
    if (!strcmp(a, "--iters")) {
        o->iters = strtoull(v, &x, 10);
        return *x || !o->iters ? -1 : 0;
    }
    if (!strcmp(a, "--window")) {
        unsigned w;
        if (parse_uints(v, &w, 1, 1, 65536) != 1) return -1;
        o->window = w;
        return 0;
    }
    if (!strcmp(a, "--iov")) return parse_uints(v, &o->iov, 1, 1, ULN_IOV_MAX) == 1 ? 0 : -1;
    if (!strcmp(a, "--point-ms")) {
        o->point_ms = strtod(v, &x);
        return *x || !(o->point_ms > 0) ? -1 : 0;
    }
    if (!strcmp(a, "--mem")) {
        if (!strcmp(v, "malloc")) o->malloc_mem = true;
        return !strcmp(v, "malloc") || !strcmp(v, "ulnet") ? 0 : -1;
    }
    if (!strcmp(a, "--transport")) {
        o->transport = v;
        return 0;
    }
    return parse_scenario_opt(o, a, v);
}

/* The defaults of the lists left unset, each list in order. */
static void parse_finish(struct perf_opts *o)
{
    if (!o->nsizes) parse_sizes(o, "1-16M");
    qsort(o->sizes, (size_t)o->nsizes, sizeof o->sizes[0], cmp_size);
    if (!o->nwindows) o->nwindows = parse_uints("1,2,4,8,64", o->windows, MAX_WINDOWS, 1, 64);
    qsort(o->windows, (size_t)o->nwindows, sizeof o->windows[0], cmp_uint);
    if (!o->nlevels)
        o->nlevels = parse_uints("10,20,30,40,50,60,70,80,90,100", o->levels, MAX_LEVELS, 1, 100);
    qsort(o->levels, (size_t)o->nlevels, sizeof o->levels[0], cmp_uint);
}

/* Returns 0 to go on, 1 to exit successfully (help), 2 for --version, -1 on
 * a usage error, said on stderr only when report is set: one rank per job
 * reports (main.c), not every rank the same line. */
int perf_parse_args(struct perf_opts *o, int argc, char **argv, const char *who, bool report)
{
    *o = (struct perf_opts){.ops = (1u << NOPS) - 1,
                            .tests = (1u << NTESTS) - 1,
                            .window = 32,
                            .rate_max = 64,
                            .load_size = 64,
                            .fair_eps = 8,
                            .fair_size = 65536};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool used_v = false;
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        else if (!strcmp(a, "-V") || !strcmp(a, "--version"))
            return 2;
        else if (!strcmp(a, "--quick"))
            o->quick = true;
        else if (!strcmp(a, "--silent"))
            o->silent = true;
        else if (!strcmp(a, "--now"))
            o->now = true;
        else if (!strcmp(a, "--csv"))
            o->csv_stdout = true;
        else if (!strncmp(a, "--csv=", 6) && a[6])
            o->csv_path = a + 6;
        else if (!strcmp(a, "--plot") || !strcmp(a, "--peer-csv"))
            rc = -2;
        else
            used_v = true, rc = v ? parse_valued(o, a, v) : -1;
        if (!report)
            ;              /* another rank says it */
        else if (rc == -2) /* Plots are made from the CSVs, by a script beside the suite. */
            fprintf(stderr, "ulnperf: %s%s: plots are bench/plot's (bench/plot DIR CSV...)\n", who,
                    a);
        else if (rc)
            fprintf(stderr, "ulnperf: %sbad option or value: %s%s%s (ulnperf -h for help)\n", who,
                    a, v && used_v ? " " : "", v && used_v ? v : "");
        if (rc) return -1;
        i += used_v;
    }
    parse_finish(o);
    return 0;
}
