#!/usr/bin/env bash
# svc.passive: PUT, GET, atomics and refusals into a process asleep in
# pause() the whole time, served by the service (passive.c); the refusals
# are counted, and the target used (almost) no CPU. Usage: passive.sh ULNETD ULNRUN PASSIVE
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" passive
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 2 --keep-going --timeout 120 "$prog" >"$tmp/out" 2>&1 &
svc_kill_at_exit $!
for _ in $(seq 2400); do grep -q "passive: ok\|exited with status [1-9]\|passive: .*expected" "$tmp/out" && break; sleep 0.05; done
cat "$tmp/out"
s=$(svc_status)
echo "$s"
grep -q "passive: ok" "$tmp/out" || { cat "$tmp/d.log" >&2; exit 1; }
# Rank 0's own end (its leak check under ASan comes at exit): bounded.
initiator=$(sed -n 's/.*initiator pid \([0-9]*\).*/\1/p' "$tmp/out")
for _ in $(seq 600); do [[ -d /proc/$initiator ]] || break; sleep 0.05; done
sleep 0.2 # ulnrun's word on it, if it failed
if grep -q "rank 0 (pid [0-9]*) exited with status [1-9]" "$tmp/out"; then cat "$tmp/out" >&2; exit 1; fi
# Every PUT fragment, GET and atomic was done by the service (1000
# fetch-adds and 2 CAS applied, through its mapping), 5 refused (and counted
# in the target's refusal counters, which it cannot report asleep).
grep -q "served here: [1-9][0-9]* PUT fragments and GETs, 5 refused; 1002 atomics, [1-9][0-9]* copies through a mapping" <<<"$s" || exit 1
echo "svc.passive: passed"
