#!/usr/bin/env python3
"""plot_titles.py DIR CSV...: checks the scripts bench/plot wrote into DIR
from CSV... say only what they draw.

A title or legend naming an op (NAP, PUT, GET, fetch-add), a kind of row (bidirectional,
p99, first touch, warm, Jain's index) or a peer (UCX, fi_pingpong, NetPIPE,
sockperf, iperf3) must have a row of that kind among the tests the plot draws;
every title carries the cache-line floor of the CSVs (or says there is none);
no legend keeps ulnperf's shorthand (nap-3s). Exit status 1 on the first
failure, with what failed."""
import glob
import os
import re
import sys

# Which tests each plot draws (bench/plot's specs).
DRAWS = {"latency": lambda t: t == "lat", "bandwidth": lambda t: t in ("bw", "bibw"),
         "rate": lambda t: t.startswith("rate_w"), "load": lambda t: t in ("load", "load_p99"),
         "cache": lambda t: t.startswith("cache_"), "fair": lambda t: t.startswith("fair_")}
# A word in a title or legend, and the rows that must exist for it.
WORDS = [
    (r"\bNAP\b", lambda r: r[1].startswith("nap")),
    (r"\bPUT\b", lambda r: r[1] == "put"),
    (r"\bGET\b", lambda r: r[1] == "get"),
    (r"fetch-add", lambda r: r[1] == "atomic"),
    (r"bidirectional|\bbibw\b", lambda r: r[2] == "bibw"),
    (r"\bp99\b", lambda r: r[2].endswith("_p99")),
    (r"first touch", lambda r: r[2] == "cache_cold"),
    (r"\bwarm\b", lambda r: r[2] == "cache_warm"),
    (r"Jain", lambda r: r[2] == "fair_jain"),
    (r"\bUCX\b", lambda r: r[0] == "ucx"),
    (r"fi_pingpong", lambda r: r[0].startswith("fi-")),
    (r"NetPIPE", lambda r: r[0].startswith("mpi-")),
    (r"sockperf", lambda r: r[0].startswith("sockperf")),
    (r"iperf3", lambda r: r[0].startswith("iperf3")),
    (r"\bshm\b", lambda r: r[0] in ("shm", "fi-shm")),
    (r"\budp\b", lambda r: "udp" in r[0]),
]


def rows_of(paths):
    rows, floor = [], False
    for p in paths:
        for line in open(p):
            f = line.strip().split(",")
            if len(f) != 6 or f[0] == "transport":
                continue
            if f[0] == "platform":
                floor = True
            else:
                rows.append(f)
    return rows, floor


def check(d, paths):
    rows, floor = rows_of(paths)
    gps = sorted(glob.glob(os.path.join(d, "*.gp")))
    if not gps:
        return "no .gp script in %s" % d
    for gp in gps:
        name = os.path.basename(gp)[:-3]
        draws = DRAWS[name.split("_")[0]]
        mine = [r for r in rows if draws(r[2])]
        if name.startswith("fair_"):
            mine = [r for r in mine if "fair_%s_%s" % (r[0], r[1]) == name]
        text = open(gp).read()
        title = re.search(r'^set title ["\'](.*)["\']$', text, re.M)
        if not title:
            return "%s: no title" % gp
        legends = re.findall(r" title '([^']*)'", text)
        said = title.group(1) + "\n" + "\n".join(legends)
        for word, need in WORDS:
            if re.search(word, said) and not any(need(r) for r in mine):
                return "%s names %s but draws no such row: %s" % (gp, word, said)
        want = "cache-line floor " if floor else "placement unknown"
        if want not in title.group(1):
            return "%s: title without '%s': %s" % (gp, want, title.group(1))
        if re.search(r"\b(nap|put|get)-\d+s\b", said):
            return "%s: ulnperf's shorthand in a legend: %s" % (gp, said)
    return None


if __name__ == "__main__":
    err = check(sys.argv[1], sys.argv[2:])
    if err:
        sys.stderr.write("plot_titles: %s\n" % err)
        sys.exit(1)
    print("plot_titles: %s: every title and legend names only what is drawn" % sys.argv[1])
