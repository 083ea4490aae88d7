#!/usr/bin/env bash
# svc.forge_queue: garbage a process writes into its own queue is refused and
# counted by the service, and harms no one else (forge_queue.c).
# Usage: forge_queue.sh ULNETD ULNRUN FORGE_QUEUE
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" forge-queue
rc=0
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 3 --timeout 90 "$prog" "$tmp/go" >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
s=$(svc_status)
echo "$s"
((rc == 0)) || { cat "$tmp/d.log" >&2; exit 1; }
grep -q "rank 1 got all" "$tmp/out" || exit 1
# The message of no type: unroutable; the broken header: the queue malformed.
grep -q "refused 0, malformed 1$" <<<"$s" || exit 1
grep -q "unroutable 1;" <<<"$s" || exit 1
grep -q "broken: not read any more" "$tmp/d.log" || exit 1
echo "svc.forge_queue: passed"
