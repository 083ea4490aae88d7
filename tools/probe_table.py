#!/usr/bin/env python3
"""probe_table.py LOG... - ulnet's own work per bounce, from the stamps of a
build with -DULN_PROBES=ON (src/core/probe.h), written where ULN_PROBE_OUT
says.

A bounce on a rank runs from one send call's return to the next: the wait
for the peer's message (the last empty read, then the read that brought
it), its way up (rel, inbox, CQ, the application's poll) and the reply's
way down (post, packet, send call). Only bounces that pass every point once,
in that order, count; the first tenth (warm-up) is left out. Medians and
means in ns, per log (one per rank)."""
import statistics
import sys

# point ids of probe.h, in the order a bounce passes them
RX, REL, FED, CQE, POLL, POST, BUILT, SEND_IN, SEND_OUT, READ, READ_PREV = 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11
ORDER = [READ_PREV, READ, RX, REL, FED, CQE, POLL, POST, BUILT, SEND_IN, SEND_OUT]
STEPS = [("the empty read before (its call to the next's)", READ_PREV, READ),
         ("read: call to datagrams returned", READ, RX),
         ("rx -> rel took it (clock, header, rel)", RX, REL),
         ("rel -> NAP in the inbox ring", REL, FED),
         ("inbox -> CQ entry written", FED, CQE),
         ("CQ entry -> uln_cq_poll returns", CQE, POLL),
         ("poll -> uln_nap called (application)", POLL, POST),
         ("post -> packet committed", POST, BUILT),
         ("committed -> send call entered", BUILT, SEND_IN),
         ("send call (sendto)", SEND_IN, SEND_OUT),
         ("own work: datagrams returned -> send call", RX, SEND_IN)]


def bounces(path):
    with open(path) as f:
        head = f.readline().split()
        tpn = float(head[1])
        evs = [tuple(map(int, line.split())) for line in f]
    out, cur = [], {}
    seq = []
    for p, t in evs:
        seq.append(p)
        cur[p] = t
        if p == SEND_OUT:
            if seq == ORDER:
                out.append(dict(cur))
            seq, cur = [], {}
    return tpn, out


def main():
    for path in sys.argv[1:]:
        tpn, bs = bounces(path)
        bs = bs[len(bs) // 10:]
        if not bs:
            print(path, "no whole bounces")
            continue
        print("%s: %d bounces" % (path, len(bs)))
        for name, a, b in STEPS:
            d = [(x[b] - x[a]) / tpn for x in bs]
            print("  %-48s median %7.1f  mean %7.1f ns" % (name, statistics.median(d),
                                                          statistics.fmean(d)))


main()
