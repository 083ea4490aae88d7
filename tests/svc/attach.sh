#!/usr/bin/env bash
# svc.attach: a process attaches to ulnetd, --status lists it, kill -9 takes
# it out at once while its neighbour stays; forged attaches are refused and
# counted (forge.c); ULN_SERVICE's modes, as ulninfo reports them.
# Usage: attach.sh ULNETD SLEEPER FORGE ULNINFO
set -euo pipefail
ulnetd=$1 sleeper=$2 forge=$3 ulninfo=$4
path=@ulnet-test-attach-$$-$RANDOM
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "svc.attach: $*" >&2
    echo "--- ulnetd's log:" >&2
    cat "$tmp/d.log" >&2 || true
    exit 1
}
status() { "$ulnetd" --status --path "$path"; }
# Wait (bounded: a hang is a failure, not a long test) until "$@" succeeds.
until_ok() {
    for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    return 1
}
listed() { status | grep " pid $1 " >/dev/null; }
not_listed() { ! status | grep " pid $1 " >/dev/null; }

"$ulnetd" --foreground --path "$path" 2>"$tmp/d.log" &
pids+=($!)
until_ok status || fail "the service did not come up"

# ULN_SERVICE: required/auto attach; auto with nobody there is direct mode;
# required with nobody there fails uln_open; off never asks.
out=$(ULN_SERVICE=required ULN_SERVICE_PATH=$path "$ulninfo")
grep -q "service .*attached to ulnetd at $path" <<<"$out" || fail "required: not attached"
out=$(ULN_SERVICE_PATH=$path "$ulninfo")
grep -q "service .*attached to ulnetd at $path" <<<"$out" || fail "auto: not attached"
out=$(ULN_SERVICE_PATH=@ulnet-nobody-$$ "$ulninfo")
grep -q "service .*none (no ulnetd listening at @ulnet-nobody-$$): direct mode" <<<"$out" ||
    fail "auto without a service: $(grep service <<<"$out")"
if ULN_SERVICE=required ULN_SERVICE_PATH=@ulnet-nobody-$$ "$ulninfo" >/dev/null 2>&1; then
    fail "required without a service opened"
fi
out=$(ULN_SERVICE=off ULN_SERVICE_PATH=$path "$ulninfo")
grep -q "service .*off (ULN_SERVICE=off): direct mode" <<<"$out" || fail "off: $out"

# Two processes attached and asleep: both listed.
for n in a b; do
    ULN_SERVICE=required ULN_SERVICE_PATH=$path "$sleeper" >"$tmp/$n.out" &
    pids+=($!)
    eval "pid_$n=$!"
done
until_ok grep -q attached "$tmp/a.out" || fail "sleeper a did not attach"
until_ok grep -q attached "$tmp/b.out" || fail "sleeper b did not attach"
listed "$pid_a" || fail "a not listed"
listed "$pid_b" || fail "b not listed"

# Forged and malformed attaches, b's inbox among them, and forged memory for
# the service to map: each refused, b unharmed.
"$forge" "$path" "$pid_b" || fail "forge failed"
s=$(status)
grep -q "refused 18, malformed 6" <<<"$s" || fail "counters: $s"
listed "$pid_a" && listed "$pid_b" || fail "a forged attach harmed an attached process"

# kill -9: out of the list at once (the socket's hang-up), the neighbour stays.
kill -9 "$pid_a"
until_ok not_listed "$pid_a" || fail "a killed with -9 is still listed"
listed "$pid_b" || fail "b gone with a"
kill -9 "$pid_b"
until_ok not_listed "$pid_b" || fail "b killed with -9 is still listed"
s=$(status)
# ulninfo twice, a, b and the forger's own attach.
grep -q "attached 5, detached 5" <<<"$s" || fail "counters at the end: $s"
grep -q "processes: 0 attached" <<<"$s" || fail "still attached at the end: $s"
echo "svc.attach: passed"
