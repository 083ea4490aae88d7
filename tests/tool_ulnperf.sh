#!/usr/bin/env bash
# ulnperf itself: every scenario runs at tiny sizes, in both memory modes, and
# its CSV has the documented columns, one row per (op, test, size) and a number
# in each; every test --help names runs alone and yields its own rows (the
# dispatch to its family); load runs with 3 ranks; incast with 3, over shm and
# udp; bench/plot writes its
# scripts (and, with gnuplot installed, PNG and SVG files) from saved CSVs; a
# transport the library does not run is refused plainly. Quick points
# throughout: the whole script takes a few seconds (well under a minute on a
# loaded 2-core machine).
set -euo pipefail
ulnrun=$1 ulnperf=$2
plot="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bench/plot"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check CSV TESTS...: well-formed, and every listed (op, test) present.
check() {
    python3 - "$@" <<'PY'
import csv, math, os, sys
path, want = sys.argv[1], sys.argv[2:]
want_tr = os.environ.get("CHECK_TRANSPORT", "shm")
rows = list(csv.reader(open(path)))
assert rows[0] == ["transport", "op", "test", "size", "value", "unit"], rows[0]
seen, keys = set(), set()
for r in rows[1:]:
    assert len(r) == 6, r
    t, op, test, size, value, unit = r
    v = float(value)
    assert math.isfinite(v) and int(size) > 0, r
    if t == "platform":
        assert op == "cacheline" and test in ("lat", "lat_end") and v > 0, r
        continue
    assert t == want_tr, r
    assert (t, op, test, size) not in keys, ("duplicate row", r)
    keys.add((t, op, test, size))
    # Miss rates and shares may be 0; everything else is a positive figure.
    if unit in ("miss/op", "share"):
        assert v >= 0, r
    else:
        assert v > 0, r
    assert unit in ("us", "GB/s", "Mmsg/s", "msg/s", "miss/op", "jain", "share"), r
    if unit == "jain":
        assert 0 < v <= 1.000001, r
    seen.add((op, test))
for w in want:
    op, test = w.split(":")
    assert (op, test) in seen, (w, sorted(seen))
print(path, len(rows) - 1, "rows")
PY
}

# --version, as every tool has, the same version as ulnrun's; a bad option
# under ulnrun -n 3 is said once for the job, not once per rank, and fails it.
v=$("$ulnperf" --version)
[[ $v =~ ^ulnperf\ \(ulnet\)\ [0-9]+[.][0-9]+[.][0-9]+$ ]] || { echo "ulnperf --version: $v" >&2; exit 1; }
[[ ${v#ulnperf } == "$("$ulnrun" --version | sed 's/^ulnrun //')" ]] ||
    { echo "ulnperf and ulnrun disagree on the version" >&2; exit 1; }
st=0
"$ulnrun" -n 3 --timeout 30 "$ulnperf" --no-such-option 1 >/dev/null 2>"$tmp/bad.err" || st=$?
[[ $st == 2 && $(grep -c "bad option" "$tmp/bad.err") == 1 ]] ||
    { echo "ulnrun -n 3 ulnperf --no-such-option: status $st, stderr:" >&2; cat "$tmp/bad.err" >&2; exit 1; }

all2="lat,bw,bibw,rate,cache,fair"
every_op() { # op:test for every op and the tests every op has
    local out=()
    for op in nap nap-inline put get; do
        for t in lat lat_p99 lat_avg bw bibw rate_w1 rate_w8; do out+=("$op:$t"); done
    done
    for t in lat lat_p99 lat_avg rate_w1 rate_w8; do out+=("atomic:$t"); done # 8 B, lat and rate only
    echo "${out[@]}"
}

# Dispatch: every test --help lists runs alone, at one tiny size, and its CSV
# has the header and rows of that test only (lat: lat*, rate: rate_w*, ...).
tests=$("$ulnperf" --help | sed -n 's/^ *--test LIST *\([a-z,]*\) or all.*/\1/p')
[[ $tests == *lat*load* ]] || { echo "no test list in ulnperf --help: '$tests'" >&2; exit 1; }
for t in ${tests//,/ }; do
    "$ulnrun" -n 2 --timeout 60 "$ulnperf" --quick --test "$t" --sizes 64 --windows 2 \
        --fair-eps 2 --fair-size 4K --fair-ms 2 --load-levels 50 --csv >"$tmp/one.csv"
    python3 - "$tmp/one.csv" "$t" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
t = {"rate": "rate_w"}.get(sys.argv[2], sys.argv[2])
assert rows and rows[0] == ["transport", "op", "test", "size", "value", "unit"], rows[:1]
body = [r for r in rows[1:] if r[0] != "platform"]
assert body, ("no rows", sys.argv[2])
assert all(r[2].startswith(t) for r in body), (sys.argv[2], sorted({r[2] for r in body}))
PY
done
# --plot is bench/plot's now: a pointer to it, not a silent run.
if "$ulnperf" --plot "$tmp/x" 2>"$tmp/plotopt.err"; then
    echo "ulnperf accepted --plot" >&2
    exit 1
fi
grep -q "bench/plot" "$tmp/plotopt.err"

# ulnet memory: every 2-rank scenario; cold/warm translation cache confirmed
# by the library's counters (one miss per operation cold, none warm).
"$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --sizes 1-4096 --test "$all2" --windows 1,8 \
    --fair-eps 4 --fair-size 4K --csv >"$tmp/ulnet.csv"
# shellcheck disable=SC2046
check "$tmp/ulnet.csv" $(every_op) put:cache_cold get:cache_warm put:cache_cold_miss \
    nap:fair put:fair get:fair put:fair_ep3 put:fair_jain
python3 - "$tmp/ulnet.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
for r in rows:
    if r["test"].endswith("_miss"):
        want = 1.0 if r["test"] == "cache_cold_miss" else 0.0
        assert float(r["value"]) == want, r
# Shares of one sample add up to 1.
by_t = {}
for r in rows:
    if r["test"].startswith("fair_ep") and r["op"] == "put":
        by_t[r["size"]] = by_t.get(r["size"], 0) + float(r["value"])
assert by_t and all(abs(s - 1) < 1e-3 for s in by_t.values()), by_t
PY

# malloc memory (peers use CMA): cache is skipped with the reason, the rest runs.
"$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --sizes 1-4096 --test "$all2" --windows 2 \
    --fair-eps 2 --fair-size 4K --mem malloc --csv >"$tmp/malloc.csv" 2>"$tmp/malloc.err"
grep -q "cache: skipped (--mem malloc" "$tmp/malloc.err"
check "$tmp/malloc.csv" nap:lat put:bw get:bibw put:rate_w2 put:fair

# --silent: bw and rate with ULN_SILENT posts and a flush per half window,
# under their own test names (bibw keeps its own); every op still checked.
"$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --sizes 8,4096 --test bw,rate,bibw --windows 1,8 \
    --silent --csv >"$tmp/silent.csv"
check "$tmp/silent.csv" nap:bw_silent put:bw_silent get:bw_silent put:bw_rate_silent \
    put:rate_w1_silent get:rate_w8_silent nap-inline:rate_w8_silent put:bibw

# --iov: PUT/GET as uln_putv/uln_getv of 3 segments, named putv3/getv3 (the
# data marks still checked); cache and fair say they are skipped; 17 refused.
"$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --iov 3 --op put,get --sizes 1-4096 --windows 2 \
    --test lat,bw,bibw,rate,cache --csv >"$tmp/iov.csv" 2>"$tmp/iov.err"
check "$tmp/iov.csv" putv3:lat getv3:lat putv3:bw getv3:bw putv3:bibw getv3:rate_w2
grep -q "cache: skipped (--iov" "$tmp/iov.err"
if "$ulnperf" --iov 17 2>/dev/null; then
    echo "ulnperf accepted --iov 17" >&2
    exit 1
fi

# load: 2 senders into rank 0, the table and its CPU note. 40 ms per level,
# not --quick's 4: on a loaded machine the senders may not run at all in 4 ms,
# and an accepted rate of 0 fails the check.
"$ulnrun" -n 3 --timeout 90 "$ulnperf" --quick --point-ms 20 --test load --load-levels 20,60 \
    --csv="$tmp/load.csv" >"$tmp/load.txt"
check "$tmp/load.csv" nap-2s:load nap-2s:load_p99 nap-2s:load_peak nap-2s:load_offered \
    nap-2s:load_accepted
grep -q "^# load: 2 senders" "$tmp/load.txt"
grep -q "^peak " "$tmp/load.txt"
grep -q "^60% " "$tmp/load.txt"
# A NAP above inline_max takes the senders' buffer pool instead.
"$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --point-ms 20 --test load --load-levels 50 --load-size 1K \
    --csv="$tmp/load1k.csv" >/dev/null
check "$tmp/load1k.csv" nap-1s:load

# incast: 2 senders stream into rank 0, over shm and over udp; the table
# names each sender's count, the CSV has one aggregate msg/s row per size.
for tr in shm udp; do
    ULN_TRANSPORT=$tr "$ulnrun" -n 3 --timeout 90 "$ulnperf" --transport "$tr" --test incast \
        --sizes 8,1K --incast-ms 20 --csv="$tmp/incast.$tr.csv" >"$tmp/incast.$tr.txt"
    CHECK_TRANSPORT=$tr check "$tmp/incast.$tr.csv" nap:incast
    grep -q "^# incast: 2 senders (ranks 1..2) -> rank 0" "$tmp/incast.$tr.txt"
    # A row per size: size, senders, seconds, msg/s, GB/s, total, then
    # rank:count for ranks 1 and 2, adding up to the total.
    python3 - "$tmp/incast.$tr.txt" "$tmp/incast.$tr.csv" <<'PY'
import csv, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0] in ("8", "1K")]
assert len(rows) == 2, rows
for r in rows:
    per = dict(x.split(":") for x in r[6:])
    assert sorted(per) == ["1", "2"], r
    assert sum(int(v) for v in per.values()) == int(r[5]) and all(int(v) > 0 for v in per.values()), r
body = [r for r in csv.reader(open(sys.argv[2])) if r[1] == "nap"]
assert sorted((r[2], r[3], r[5]) for r in body) == [("incast", "1024", "msg/s"), ("incast", "8", "msg/s")], body
PY
done
# Sizes the stamp does not fit in are left out, and said so.
"$ulnrun" -n 2 --timeout 60 "$ulnperf" --quick --test incast --sizes 4 --csv >"$tmp/inc4.csv" \
    2>"$tmp/inc4.err"
grep -q "incast: skipped, no size" "$tmp/inc4.err"

# Plots from saved CSVs: scripts always, images when gnuplot is here.
python3 "$plot" "$tmp/plots" "$tmp/ulnet.csv" "$tmp/load.csv" >"$tmp/plot.out" 2>"$tmp/plot.err"
for p in latency bandwidth rate load cache fair_shm_put; do
    test -s "$tmp/plots/$p.gp"
    if command -v gnuplot >/dev/null; then
        test -s "$tmp/plots/$p.png" && test -s "$tmp/plots/$p.svg"
    fi
done
command -v gnuplot >/dev/null || grep -q "gnuplot is not installed" "$tmp/plot.err"
# Their titles and legends name only what has a row, and the floor of the run.
python3 "$(dirname "$plot")/../tests/bench/plot_titles.py" "$tmp/plots" "$tmp/ulnet.csv" "$tmp/load.csv" >/dev/null

# Over UDP (loopback): the same CSV, with the transport column saying udp.
ULN_TRANSPORT=udp "$ulnrun" -n 2 --timeout 90 "$ulnperf" --transport udp --quick --sizes 1-4096 \
    --test lat,bw,rate --windows 1,8 --csv >"$tmp/udp.csv"
python3 - "$tmp/udp.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert rows[0] == ["transport", "op", "test", "size", "value", "unit"], rows[0]
body = [r for r in rows[1:] if r[0] != "platform"]  # platform: the cache-line floor
assert body and all(r[0] == "udp" for r in body), set(r[0] for r in body)
assert {r[2] for r in body} >= {"lat", "bw"}, {r[2] for r in body}
assert all(float(r[4]) > 0 for r in body if r[2] == "bw"), "a zero bandwidth"
PY

# A transport the library does not run: a plain refusal, not numbers.
if "$ulnrun" -n 2 --timeout 30 "$ulnperf" --transport no-such --quick --test lat --op nap \
    --sizes 8 >/dev/null 2>"$tmp/tr.err"; then
    echo "ulnperf accepted --transport no-such" >&2
    exit 1
fi
grep -qE "asked for transport no-such|uln_open" "$tmp/tr.err"
echo "tool_ulnperf: all checks passed"
