"""Parsing the output of the peers bench/compare runs beside ulnet.

Each function takes the text a peer printed and returns plain numbers, so that
tests/bench/ can check them on saved real outputs without running anything.
Units are converted here, once: microseconds, GB/s (10^9 bytes per second) and
millions of messages per second, as in ulnperf's CSV.
"""

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


def fi_providers(fi_info_text):
    """Provider names fi_info lists (e.g. "shm", "tcp;ofi_rxm", "udp")."""
    seen = []
    for line in fi_info_text.splitlines():
        m = re.match(r"\s*provider:\s*(\S+)", line)
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


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
