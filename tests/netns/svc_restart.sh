#!/usr/bin/env bash
# netns.svc_restart: a service killed with -9 and started again at once,
# while the other host's ranks have operations in flight to its ranks. The
# new life answers host 0's service at once, so the wire is never silent
# (its "services dead" stays 0): what was in flight to the old life must
# still end. Two namespace hosts, one ulnetd each, four ranks (rank r on host
# r % 2) running tests/svc/kill_stream.c (PUT, GET, fetch-add, NAP, all
# pairs, data checked):
#   1. "until 2 1": once all stream, host 1's service is killed and started
#      again. Every operation of ranks 0 and 2 on ranks 1 and 3 completes OK
#      (before the kill) or with -ECONNRESET - none hangs (kill_stream's own
#      bound, and this script's) - and 0 and 2 go on with each other; host 0's
#      service counts the new life (--status: "restarted 1"). Beside them a
#      stream of 1 MiB PUTs (ulnperf bw, 32 outstanding) from host 0 to a
#      sink on host 1, killed with host 1's service (the host's crash): its
#      PUTs end -ECONNRESET (ulnperf exits 1 saying so), none hangs, and of
#      what host 0's service still had for host 1 - queued, and a message
#      half in packets - nothing reaches the new life (whose --status
#      counts nothing malformed: a message's later chunks alone would be).
#   2. A new job through both services: the restarted host's new ranks are
#      reached, every operation's data checked.
# Usage: svc_restart.sh ULNETD KILL_STREAM ULNPERF. Exit 77 without namespaces.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 perf=$3
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "svc_restart.sh: no network namespaces here: skipped"; exit 77; }
me=netns.svc_restart
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"
tmp=$(mktemp -d)
svc_logs=$tmp
declare -a pids=() bpids=()
cleanup() {
    local p
    for p in "${pids[@]}" "${bpids[@]}"; do [[ -z $p ]] || kill -KILL "$p" 2>/dev/null || true; done
    hosts_end
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "$me: $* (at ${SECONDS} s)" >&2
    for f in "$tmp"/*.log "$tmp"/*.out; do [[ -f $f ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    exit 1
}
hosts_up 2
svc_up() { svc_start --hosts "$1" "$ulnetd" --link udp || fail "host $1's service did not start"; }

port=$((20000 + RANDOM % 20000))

svc_up "0 1"
# 1. Host 1's service killed mid-stream and started again at once.
svc_job "$prog" until 2 1
svc_job_streaming "restart"
bkey=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
for r in 0 1; do
    "$here/hosts.sh" exec "h$r" env ULN_RANK=$r ULN_SIZE=2 ULN_ROOT="$ULNTEST_HOST_0:$((port + 1000))" \
        ULN_JOB_KEY="$bkey" ULN_SERVICE=required ULN_TRANSPORT=svc \
        "$perf" --test bw --op put --sizes 1M --iters 1000000 >"$tmp/b$r.out" 2>&1 &
    bpids+=($!)
done
until grep -q "put bw" "$tmp/b0.out"; do
    kill -0 "${bpids[0]}" 2>/dev/null || fail "the stream ended before it began"
    sleep 0.05
done
sleep 1 # mid-stream
killed_at=$SECONDS
kill -KILL "${svc_pid[1]}" "${bpids[1]}"
wait "${svc_pid[1]}" "${bpids[1]}" 2>/dev/null || true
svc_up 1
timeout 70 tail --pid="${bpids[0]}" -f /dev/null || fail "the stream's PUTs hang"
st=0
wait "${bpids[0]}" || st=$?
bpids=()
if ((st != 1)) || ! grep -q "PUT completion failed: .*status -104" "$tmp/b0.out"; then
    fail "the stream to the restarted host exited $st, not 1 for -ECONNRESET"
fi
svc_job_wait "host 1's service restarted" 90
for r in 0 2; do
    for p in 1 3; do
        grep -q "rank $r: peer $p reset" "$tmp/r$r.out" ||
            fail "restart: rank $r's operations on rank $p did not end -ECONNRESET"
    done
    grep -q "rank $r: ok" "$tmp/r$r.out" || fail "restart: rank $r did not go on with the other"
done
echo "$me: every rank done $((SECONDS - killed_at)) s after the kill"
grep -h "reset after" "$tmp"/r*.out
st=$(svc_status 0 2>&1)
grep -q "services dead 0, restarted 1$" <<<"$st" ||
    fail "host 0's service did not take the new life as a restart: $(grep '^wire: ' <<<"$st")"
st=$(svc_status 1 2>&1)
grep -q "malformed 0$" <<<"$st" ||
    fail "the new life got what was left of the old one's messages: $(grep '^counters: ' <<<"$st")"

# 2. A new job through the restarted service.
svc_job "$prog" rounds 50
svc_job_wait "a job after the restart" 90
for r in 0 1 2 3; do grep -q "rank $r: ok" "$tmp/r$r.out" || fail "after the restart: rank $r"; done
svc_stop || fail "a service did not stop cleanly"
echo "$me: passed"
