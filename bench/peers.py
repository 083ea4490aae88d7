"""Parsing the output of the peers bench/compare and bench/netpeers run
beside ulnet: ucx_perftest, fi_pingpong (and fi_info), sockperf, iperf3, and
ulnperf's own CSV and failure messages.

Each function takes the text a peer printed and returns plain numbers, so that
tests/bench/ can check them on saved real outputs without running anything.
Units are converted here, once: microseconds, GB/s (10^9 bytes per second) and
millions of messages per second, as in ulnperf's CSV.
"""

import json
import re

# ---------------------------------------------------------------------------
# ucx_perftest (Debian: ucx-utils)
# ---------------------------------------------------------------------------


def parse_ucx_perftest(text):
    """The "Final:" line of ucx_perftest, or None when it has none (the run
    failed or was cut short).

    Columns after "Final:": iterations, then latency (us) 50th percentile,
    average, overall; bandwidth (MB/s) average, overall; message rate (msg/s)
    average, overall. For *_lat tests the latency is one-way (half the round
    trip); for bw tests that column is the per-message overhead. ucx_perftest's
    MB is 2^20 bytes, so GB/s here is recomputed in 10^9 bytes.
    """
    for line in text.splitlines():
        if not line.startswith("Final:"):
            continue
        f = line.split()
        if len(f) < 9:
            return None
        try:
            v = [float(x) for x in f[1:9]]
        except ValueError:
            return None
        return {
            "iters": int(v[0]),
            "lat_p50_us": v[1],
            "lat_avg_us": v[2],
            "lat_overall_us": v[3],
            "bw_avg_GBps": v[4] * 1048576 / 1e9,
            "bw_GBps": v[5] * 1048576 / 1e9,
            "rate_avg_Mmsgps": v[6] / 1e6,
            "rate_Mmsgps": v[7] / 1e6,
        }
    return None


# ---------------------------------------------------------------------------
# fi_pingpong (Debian: libfabric-bin)
# ---------------------------------------------------------------------------

_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _fi_size(s):
    """fi_pingpong's size_str: "64", "4k", "1.5k", "1m" (powers of 1024)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmg]?)", s)
    if not m:
        raise ValueError(s)
    return int(round(float(m.group(1)) * _SUFFIX[m.group(2)]))


def parse_fi_pingpong(text):
    """The result rows of fi_pingpong, one dict per message size.

    Row: bytes, #sent, #ack (=N when all came back, +N/-N otherwise), total,
    time ("0.02s"), MB/sec (10^6 bytes/s over both directions), usec/xfer (the
    elapsed time over 2 x iterations: one-way latency), Mxfers/sec. Rows that
    do not parse (banners, errors) are skipped.
    """
    rows = []
    header = False
    for line in text.splitlines():
        f = line.split()
        if f[:2] == ["bytes", "#sent"]:
            header = True
            continue
        if not header or len(f) != 8:
            continue
        try:
            rows.append(
                {
                    "size": _fi_size(f[0]),
                    "acked_all": f[2].startswith("="),
                    "time_s": float(f[4].rstrip("s")),
                    "MBps": float(f[5]),
                    "lat_us": float(f[6]),
                    "Mxfers": float(f[7]),
                }
            )
        except ValueError:
            continue
    return rows


def fi_pingpong_result(text, size):
    """The row of a `fi_pingpong -S size` run, or None. fi_pingpong prints
    sizes cut to one decimal of k/m (1196 B is "1.1k"), so when the output has
    a single row and no exact match, that row is the one."""
    rows = parse_fi_pingpong(text)
    for r in rows:
        if r["size"] == size:
            return r
    return rows[0] if len(rows) == 1 else None


def fi_providers(fi_info_text):
    """Provider names fi_info lists (e.g. "shm", "tcp;ofi_rxm", "udp")."""
    seen = []
    for line in fi_info_text.splitlines():
        m = re.match(r"\s*provider:\s*(\S+)", line)
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def fi_max_msg_size(fi_info_verbose_text):
    """{(provider, endpoint type): max_msg_size} from `fi_info -v`, e.g.
    {("udp", "dgram"): 1472, ("udp;ofi_rxd", "rdm"): 2**64 - 1}: the largest
    message one fi_pingpong transfer can be on that endpoint. The smallest
    value is kept when a provider lists several domains."""
    out = {}
    for entry in re.split(r"(?m)^---\s*$", fi_info_verbose_text):
        prov = re.search(r"(?m)^\s*prov_name:\s*(\S+)", entry)
        ep = re.search(r"(?m)^\s*type:\s*FI_EP_(\w+)", entry)
        size = re.search(r"(?m)^\s*max_msg_size:\s*([0-9]+)", entry)
        if not (prov and ep and size):
            continue
        key = (prov.group(1), ep.group(1).lower())
        v = int(size.group(1))
        out[key] = min(v, out.get(key, v))
    return out


# ---------------------------------------------------------------------------
# sockperf (Debian: sockperf)
# ---------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_sockperf(text):
    """The statistics a `sockperf ping-pong` client prints, or None when it
    has none (no reply came back, the options were refused, it was cut short).

    sockperf's "latency" is half the round trip: "avg-latency=", "Summary:
    Latency is", and every percentile line are RTT/2 unless the client ran
    with --full-rtt, which prints "avg-rtt=" and "Round trip is" instead.
    Either way the *_us keys here are what it printed (round_trip says which),
    and lat_us / lat_avg_us / lat_p99_us are one-way: the median, mean and
    99th percentile, halved when it printed round trips. Figures are taken
    from the "[Valid Duration]" part of the run (warm-up excluded).
    """
    t = _ANSI.sub("", text)
    m = re.search(r"====> avg-(latency|rtt)=\s*([0-9.]+)\s*\(std-dev=\s*([0-9.]+)\)", t)
    if not m:
        return None
    r = {"round_trip": m.group(1) == "rtt", "avg_us": float(m.group(2)), "std_us": float(m.group(3))}
    pct = {}
    for p, v in re.findall(r"---> percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", t):
        pct[float(p)] = float(v)
    if 50.0 not in pct:
        return None
    r["percentiles"] = pct
    r["p50_us"] = pct[50.0]
    r["p99_us"] = pct.get(99.0)
    mx = re.search(r"<MAX> observation\s*=\s*([0-9.]+)", t)
    mn = re.search(r"<MIN> observation\s*=\s*([0-9.]+)", t)
    r["max_us"] = float(mx.group(1)) if mx else None
    r["min_us"] = float(mn.group(1)) if mn else None
    obs = re.search(r"Total ([0-9]+) observations", t)
    r["observations"] = int(obs.group(1)) if obs else None
    v = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=([0-9]+); ReceivedMessages=([0-9]+)", t)
    if v:
        r["runtime_s"], r["sent"], r["received"] = float(v.group(1)), int(v.group(2)), int(v.group(3))
    d = re.search(r"# dropped messages = ([0-9]+); # duplicated messages = ([0-9]+); "
                  r"# out-of-order messages = ([0-9]+)", t)
    if d:
        r["dropped"], r["duplicated"], r["out_of_order"] = (int(x) for x in d.groups())
    half = 0.5 if r["round_trip"] else 1.0
    r["lat_us"] = r["p50_us"] * half
    r["lat_avg_us"] = r["avg_us"] * half
    r["lat_p99_us"] = r["p99_us"] * half if r["p99_us"] is not None else None
    return r


def parse_sockperf_tp(text):
    """A `sockperf throughput` run, client and server output together: the
    messages the client sent, over how many seconds, and the messages the
    server received (it prints that only when ended by SIGINT). rate_Mmsgps
    is the received count over the client's time: delivered messages, as
    ulnperf's rate counts. None when either count is missing."""
    t = _ANSI.sub("", text)
    sent = re.search(r"Total of ([0-9]+) messages sent in ([0-9.]+) sec", t)
    got = re.search(r"Total ([0-9]+) messages received", t)
    if not sent or not got or float(sent.group(2)) <= 0:
        return None
    secs = float(sent.group(2))
    return {"sent": int(sent.group(1)), "secs": secs, "received": int(got.group(1)),
            "rate_Mmsgps": int(got.group(1)) / secs / 1e6,
            "sent_Mmsgps": int(sent.group(1)) / secs / 1e6}


def sockperf_error(text):
    """Why a sockperf run gave no statistics, in one line, or None."""
    t = _ANSI.sub("", text)
    for pat in (r"sockperf: (No messages were received[^\n]*)", r"sockperf: (No valid observations found)",
                r"sockperf: ('-\w' Invalid [^\n]*)",
                r"sockperf: (ERROR[^\n]*)", r"(sockperf: [^\n]*[Ee]rror[^\n]*)"):
        m = re.search(pat, t)
        if m:
            return m.group(1).strip()
    return None


# ---------------------------------------------------------------------------
# udp_blast (bench/udp_blast.c, built with the tests): one line per side,
#   sent 8377602800 bytes 5984002 datagrams in 2.000 s: 4.189 GB/s
#   received 8377602800 bytes 5984002 datagrams in 2.000 s: 4.189 GB/s lost 0
# ---------------------------------------------------------------------------

_BLAST = re.compile(r"^(sent|received) (\d+) bytes (\d+) datagrams in ([0-9.]+) s: ([0-9.]+) GB/s(?: lost (\d+))?$")


def parse_udp_blast(text):
    """{"bytes", "dgrams", "secs", "GBps"} (and "lost" for the receiver) of
    the side's line, or None when it printed none (it failed)."""
    for line in text.splitlines():
        m = _BLAST.match(line.strip())
        if m:
            r = {"bytes": int(m.group(2)), "dgrams": int(m.group(3)), "secs": float(m.group(4)),
                 "GBps": float(m.group(5))}
            if m.group(6) is not None:
                r["lost"] = int(m.group(6))
            return r
    return None


# ---------------------------------------------------------------------------
# iperf3 (Debian: iperf3), with -J
# ---------------------------------------------------------------------------


def parse_iperf3_json(text):
    """The result of an `iperf3 -c ... -J` client, or None when the JSON says
    it failed (see iperf3_error) or is no iperf3 JSON at all.

    bw_GBps is what the receiver got: end.sum_received bytes over its seconds,
    in 10^9 bytes per second (iperf3's own bits_per_second / 8e9).
    sent_GBps is what the sender pushed. blksize is the -l length (TCP: 128 KiB
    by default; UDP: the datagram payload). TCP runs add retransmits; UDP runs
    add lost_packets, packets and lost_percent as the receiver counted them.
    """
    try:
        d = json.loads(text)
    except ValueError:
        return None
    if not isinstance(d, dict) or d.get("error"):
        return None
    start, end = d.get("start") or {}, d.get("end") or {}
    ts = start.get("test_start") or {}
    rcv = end.get("sum_received") or end.get("sum")
    snd = end.get("sum_sent") or end.get("sum")
    if not rcv or not snd or not rcv.get("seconds"):
        return None
    r = {
        "protocol": ts.get("protocol"),
        "blksize": ts.get("blksize"),
        "duration": ts.get("duration"),
        "streams": ts.get("num_streams"),
        "bytes": rcv["bytes"],
        "seconds": rcv["seconds"],
        "bw_GBps": rcv["bytes"] / rcv["seconds"] / 1e9,
        "sent_GBps": snd["bytes"] / snd["seconds"] / 1e9 if snd.get("seconds") else None,
    }
    if "retransmits" in snd:
        r["retransmits"] = snd["retransmits"]
    if "lost_percent" in rcv:
        r["lost_percent"] = rcv["lost_percent"]
        r["lost_packets"] = rcv.get("lost_packets")
        r["packets"] = rcv.get("packets")
    return r


def iperf3_error(text):
    """iperf3's "error" (with -J), or its "iperf3: error - ..." line, or None."""
    try:
        d = json.loads(text)
        if isinstance(d, dict) and d.get("error"):
            return str(d["error"])
    except ValueError:
        pass
    m = re.search(r"iperf3: error - ([^\n]*)", text)
    return m.group(1).strip() if m else None


# ---------------------------------------------------------------------------
# ulnperf's own CSV
# ---------------------------------------------------------------------------


def parse_ulnperf_csv(text):
    """{(transport, op, test, size): value} from ulnperf's CSV; the platform
    rows (the cache-line floor) under transport "platform"."""
    out = {}
    lines = text.splitlines()
    if not lines or lines[0].strip() != "transport,op,test,size,value,unit":
        raise ValueError("not a ulnperf CSV")
    for line in lines[1:]:
        f = line.strip().split(",")
        if len(f) != 6:
            continue
        out[(f[0], f[1], f[2], int(f[3]))] = float(f[4])
    return out


def ulnperf_csv_rows(text):
    """[(transport, op, test, size, value, unit)] from ulnperf's CSV (or any
    in its columns, as bench/netpeers --csv prints), in its order, without the
    platform rows (the cache-line floor)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "transport,op,test,size,value,unit":
        raise ValueError("not a ulnperf CSV")
    rows = []
    for line in lines[1:]:
        f = line.strip().split(",")
        if len(f) != 6 or f[0] == "platform":
            continue
        rows.append((f[0], f[1], f[2], int(f[3]), float(f[4]), f[5]))
    return rows


def ulnet_failure(text):
    """The one line that says why a ulnperf rank failed: the library's own
    message ("ulnet: ..."), else ulnperf's ("ulnperf: [rank N: ]..."), else
    the last line it printed; None when it printed nothing."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")]
    for prefix in ("ulnet:", "ulnperf:"):
        for l in lines:
            if l.startswith(prefix):
                return re.sub(r"^ulnperf: rank [0-9]+: ", "ulnperf: ", l)
    return lines[-1] if lines else None


# ---------------------------------------------------------------------------
# NetPIPE (NPopenmpi, Debian netpipe-openmpi): one line per size,
#   "  0:       8 bytes   2000 times -->    148.66 Mbps in       0.41 usec"
# the time being one-way (half the best trial's round trip) and "Mbps" 2^20
# bits per second over that one-way time (1 MiB in 3492.83 us prints 2290.41).
# ---------------------------------------------------------------------------

_NETPIPE = re.compile(r"^\s*\d+:\s+(\d+) bytes\s+(\d+) times -->\s+([0-9.]+) Mbps in\s+([0-9.]+) usec\s*$")


def parse_netpipe(text):
    """[{"size", "times", "lat_us", "bw_GBps"}] of every size NetPIPE
    finished, in its order; [] when it printed none (it failed, or MPI did)."""
    out = []
    for line in _ANSI.sub("", text).splitlines():
        m = _NETPIPE.match(line)
        if m:
            size, times, mbps, usec = int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4))
            out.append({"size": size, "times": times, "lat_us": usec, "bw_GBps": mbps * 1048576 / 8 / 1e9})
    return out


def mpi_failure(text):
    """The line that says why an mpirun job gave no figure: Open MPI's own
    explanation (the first line of its '----' box that says something), else
    the last line printed; None when nothing was printed."""
    lines = [l.strip() for l in _ANSI.sub("", text).splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if l.startswith("-----") and i + 1 < len(lines) and not lines[i + 1].startswith("-----"):
            return lines[i + 1]
    return lines[-1] if lines else None


def xdp_fallback(err):
    """Why a ulnet process's measuring endpoint took the socket link where
    the AF_XDP link was asked for (ULN_TRANSPORT=xdp), or None: the first
    "ulnet: xdp: ..." line of its stderr. A second endpoint of the process
    that finds the queue's one AF_XDP socket taken (by the first) prints
    nothing today; an older library said so, and that line is no failure."""
    for line in err.splitlines():
        line = line.strip()
        if line.startswith("ulnet: xdp:") and "has an AF_XDP socket already" not in line:
            return line[len("ulnet: xdp:"):].strip()
    return None


def mpi_ratios_vs_ob1(med, lat_size, bw_size):
    """bench/mpi's one line of the two-host ulnet rows against Open MPI's own
    TCP, from med {(config, "lat"|"bw", size): median}: each row's latency at
    lat_size over ob1tcp-net's (lower is better) and its bandwidth at bw_size
    over ob1tcp-net's (higher is better); "-" where either is missing."""
    def r(c, test, size):
        x, y = med.get((c, test, size)), med.get(("ob1tcp-net", test, size))
        return "%.3f" % (x / y) if x is not None and y else "-"
    return "ratios vs ob1 tcp: " + "; ".join(
        "%s lat %s bw %s" % (c, r(c, "lat", lat_size), r(c, "bw", bw_size)) for c in ("ulnet-net", "ulnetxdp-net"))
