#!/usr/bin/env python3
"""probe_table.py LOG... - ulnet's own work per bounce, from the stamps of a
build with -DULN_PROBES=ON (src/core/probe.h), written where ULN_PROBE_OUT
says.

A bounce on a rank runs from one send call's return to the next: the wait
for the peer's message (the last empty read, then the read that brought
it), its way up (rel, inbox, CQ, the application's poll) and the reply's
way down (post, packet, send call). The bounces counted are those that pass
the points in the order most of them do (the first tenth, the warm-up, left
out); each step is the time from one point to the next: median and mean in
ns, per log (one per rank)."""
import collections
import statistics
import sys

# point ids of probe.h (enum uln_probe_point, in its order)
NAMES = {0: "datagrams returned", 1: "rel took it", 2: "NAP in the inbox ring",
         3: "CQ entry written", 4: "uln_cq_poll returns", 5: "uln_nap called",
         6: "packet committed", 7: "send call entered", 8: "send call returned",
         9: "read called", 10: "empty read before called", 11: "empty read returned",
         12: "provider's CQ read returns", 13: "provider's send entered"}
RX, SEND_IN, SEND_OUT = 0, 7, 8


def bounces(path):
    with open(path) as f:
        tpn = float(f.readline().split()[1])
        evs = [tuple(map(int, line.split())) for line in f]
    out, cur = [], []
    for p, t in evs:
        cur.append((p, t))
        if p == SEND_OUT:
            out.append(cur)
            cur = []
    out = out[len(out) // 10:]
    order = collections.Counter(tuple(p for p, _ in b) for b in out).most_common(1)[0][0]
    return tpn, order, [[t for _, t in b] for b in out if tuple(p for p, _ in b) == order]


def main():
    for path in sys.argv[1:]:
        tpn, order, bs = bounces(path)
        print("%s: %d bounces" % (path, len(bs)))
        rows = [("%s -> %s" % (NAMES[order[i]], NAMES[order[i + 1]]), i, i + 1)
                for i in range(len(order) - 1)]
        rows.append(("own work: datagrams returned -> send call entered",
                     order.index(RX), order.index(SEND_IN)))
        for name, a, b in rows:
            d = [(x[b] - x[a]) / tpn for x in bs]
            print("  %-52s median %7.1f  mean %8.1f ns" % (name, statistics.median(d),
                                                          statistics.fmean(d)))


main()
