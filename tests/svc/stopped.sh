#!/usr/bin/env bash
# svc.stopped: a process stopped with SIGSTOP does not stall its neighbour's
# stream through the same service (stopped.c). Usage: stopped.sh ULNETD ULNRUN STOPPED
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" stopped
fail() { echo "svc.stopped: $*" >&2; cat "$tmp/out" "$tmp/d.log" >&2; exit 1; }
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 4 --timeout 150 "$prog" "$tmp/go" >"$tmp/out" 2>&1 &
jpid=$!
svc_kill_at_exit "$jpid"
for _ in $(seq 600); do grep -q "rank 1 pid [0-9]* ready" "$tmp/out" && break; sleep 0.05; done
r1=$(sed -n 's/.*rank 1 pid \([0-9]*\) ready.*/\1/p' "$tmp/out")
[[ -n $r1 ]] || fail "rank 1 did not start"
svc_kill_at_exit "$r1" # continued, then ended, whatever happens
kill -STOP "$r1"
touch "$tmp/go"
# The neighbour's stream must finish while rank 1 is stopped (stopped.c's
# own bound is 60 s; this wait only ends early).
for _ in $(seq 1400); do grep -q "neighbour done\|exited with status" "$tmp/out" && break; sleep 0.05; done
grep -q "neighbour done" "$tmp/out" || fail "the neighbour's stream stalled behind the stopped process"
[[ $(awk '{print $3}' "/proc/$r1/stat") == T ]] || fail "rank 1 was not stopped all along"
kill -CONT "$r1"
rc=0
wait "$jpid" || rc=$?
svc_pids=("$dpid") # the job and its ranks are gone (reaped): nothing of theirs to end
((rc == 0)) || fail "ulnrun's status $rc"
grep -q "rank 1 got all after SIGCONT" "$tmp/out" || fail "rank 1 did not get its NAPs"
echo "svc.stopped: passed"
