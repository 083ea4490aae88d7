#!/usr/bin/env bash
# svc.death: the service killed (kill -9) under a job: rank 0's atomic on a
# peer reached through it (only that sleeping peer could answer it) ends
# with -ECONNRESET, and so does a later post; nothing hangs. Usage: svc_death.sh ULNETD ULNRUN SVC_DEATH
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" death
# --keep-going: rank 1 sleeps on after rank 0 is done; ulnrun's own timeout
# ends it (its status is not what this test checks: rank 0's is).
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 2 --keep-going --timeout 60 "$prog" >"$tmp/out" 2>&1 &
svc_kill_at_exit $!
for _ in $(seq 600); do grep -q posted "$tmp/out" && break; sleep 0.05; done
grep -q posted "$tmp/out" || { cat "$tmp/out" >&2; exit 1; }
kill -9 "$dpid"
for _ in $(seq 1200); do grep -q "svc_death: the atomic ended\|exited with status" "$tmp/out" && break; sleep 0.05; done
cat "$tmp/out"
grep -q "rank0: svc_death: the atomic ended" "$tmp/out" || grep -q "^svc_death: the atomic ended" "$tmp/out" ||
    { echo "svc.death: rank 0 did not finish" >&2; exit 1; }
if grep -q "rank 0 (pid [0-9]*) exited with status [1-9]" "$tmp/out"; then exit 1; fi
echo "svc.death: passed"
