#!/usr/bin/env bash
# ulnperf runs every op and test at small sizes, in both memory modes, and its
# CSV has the documented columns with one row per (op, test, size) and a
# positive number in each.
set -euo pipefail
ulnrun=$1 ulnperf=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for mem in ulnet malloc; do
    "$ulnrun" -n 2 --timeout 90 "$ulnperf" --quick --sizes 1-4096 --mem $mem --csv >"$tmp/$mem.csv"
    python3 - "$tmp/$mem.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert rows[0] == ["transport", "op", "test", "size", "value", "unit"], rows[0]
seen = set()
for r in rows[1:]:
    assert len(r) == 6, r
    t, op, test, size, value, unit = r
    assert float(value) > 0 and int(size) > 0, r
    if t == "platform":
        continue
    assert t == "shm" and unit in ("us", "GB/s", "Mmsg/s"), r
    seen.add((op, test.split("_")[0].split("(")[0]))
for op in ("nap", "nap-inline", "put", "get"):
    for test in ("lat", "bw"):
        assert (op, test) in seen, (op, test, sorted(seen))
print(sys.argv[1], len(rows) - 1, "rows")
PY
done
