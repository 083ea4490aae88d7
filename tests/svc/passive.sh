#!/usr/bin/env bash
# svc.passive: PUT, GET and refusals into a process asleep in pause() the
# whole time, served by the service (passive.c); the refusals are counted,
# and the target used (almost) no CPU. Usage: passive.sh ULNETD ULNRUN PASSIVE
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
path=@ulnet-test-passive-$$-$RANDOM
tmp=$(mktemp -d)
"$ulnetd" --foreground --path "$path" 2>"$tmp/d.log" &
dpid=$!
jpid=
cleanup() {
    [[ -z $jpid ]] || kill "$jpid" 2>/dev/null || true
    kill "$dpid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 200); do "$ulnetd" --status --path "$path" >/dev/null 2>&1 && break; sleep 0.05; done
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 2 --keep-going --timeout 120 "$prog" >"$tmp/out" 2>&1 &
jpid=$!
for _ in $(seq 2400); do grep -q "passive: ok\|exited with status [1-9]\|passive: .*expected" "$tmp/out" && break; sleep 0.05; done
cat "$tmp/out"
s=$("$ulnetd" --status --path "$path")
echo "$s"
grep -q "passive: ok" "$tmp/out" || { cat "$tmp/d.log" >&2; exit 1; }
# Every PUT fragment and GET was done by the service, 3 refused (and counted
# in the target's refusal counters, which it cannot report asleep).
grep -q "served here: [1-9][0-9]* PUT fragments and GETs, 3 refused" <<<"$s" || exit 1
pid=$(sed -n 's/.*target pid \([0-9]*\).*/\1/p' "$tmp/out")
# utime + stime of the target, in clock ticks: reported, for the record.
read -r -a st <"/proc/$pid/stat"
echo "svc.passive: the target's CPU time: $((st[13] + st[14])) ticks of 1/$(getconf CLK_TCK) s"
echo "svc.passive: passed"
