#!/usr/bin/env bash
# svc.quota: a process's queue memory past ulnetd --queue-mem is refused at
# uln_ep_open (-EDQUOT), counted, harms nobody; reopened endpoints do not
# eat the quota or the service's descriptors (quota.c).
# Usage: quota.sh ULNETD ULNRUN QUOTA
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" quota --queue-mem 2M
fail() { echo "svc.quota: $*" >&2; cat "$tmp/out" "$tmp/d.log" >&2; exit 1; }
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 2 --timeout 100 "$prog" "$tmp/go" >"$tmp/out" 2>&1 &
jpid=$!
svc_kill_at_exit "$jpid"
for _ in $(seq 1200); do grep -q "churned\|exited with status" "$tmp/out" && break; sleep 0.05; done
grep -q "churned" "$tmp/out" || fail "rank 0 did not get through its endpoints"
# Listening, epoll, signals, doorbells, the two processes' sockets and live
# queues' doorbells: a handful. Each replaced queue kept would add one.
nfd=$(ls "/proc/$dpid/fd" | wc -l)
((nfd < 16)) || fail "the service holds $nfd descriptors after the endpoints' churn"
s=$(svc_status)
grep -q "queues refused past it 2" <<<"$s" || fail "not counted: $s"
grep -q "queue memory 2048 KiB per process" <<<"$s" || fail "$s"
touch "$tmp/go"
rc=0
wait "$jpid" || rc=$?
svc_pids=("$dpid")
((rc == 0)) || fail "ulnrun's status $rc"
grep -q "rank 1 got all" "$tmp/out" || fail "rank 1 did not get its NAPs"
echo "svc.quota: passed ($nfd descriptors in the service after the churn)"
