#!/usr/bin/env bash
# svc_seal_restart.sh ULNETD JOB - a service of the sealed wire (ulnetd
# --secure encrypt) killed with -9 and started again draws a new key pair:
# the other service takes its new key (its HELLO, once the old pair has been
# silent a second) and a new job through both runs, its data checked; what
# the old pair still sent is refused and counted. Three such restarts, the
# last two after a pause of a second (as a supervisor's restart delay): a
# packet host 0's service had in flight to the dead one (a GONE of a rank
# that just ended) stalled the next job through the new life when the new
# sequence reached its slot, now and then, more often after a pause (wire.c,
# void_all). JOB: an integration body for two ranks (it_remote_completion).
# Exit 77 without namespaces.
#
# With FORGER RATE [BOUND] (netns.svc_seal_restart_flood): one restart; from
# 1 s before the second job, FORGER (svc_forger flood) floods host 0's service with
# RATE HELLOs a second from spoofed sources. The restarted service must be
# keyed again within BOUND ms (default 500) of its first packet held for
# the key (its --status, waits for a key: longest): host 0 still holds the
# old key, so nothing but the new service's HELLO keys them - no ask of
# host 0's comes to help - and over host 0's bucket that HELLO gets a cookie
# and comes back with it at once (tools/ulnetd/wire_seal.c). Without
# cookies it waited its turn among the flood's for one of 64 tokens a
# second: about RATE / 12800 s (within 0.5 s at 20000 a second about 1
# time in 4).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 forger=${3:-} rate=${4:-0} bound=${5:-500}
fpid=
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "svc_seal_restart.sh: no namespaces: skipped"; exit 77; }
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"
dir=$(mktemp -d)
svc_logs=$dir
cleanup() {
    [[ -z $fpid ]] || kill -KILL "$fpid" 2>/dev/null || true
    hosts_end
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hosts_up 2
fail() {
    echo "svc_seal_restart.sh: $*" >&2
    for f in "$dir"/*; do { echo "--- $(basename "$f")"; tail -15 "$f"; } >&2; done
    exit 1
}
# service H: start host H's ulnetd and wait until it answers.
service() {
    svc_start --hosts "$1" "$ulnetd" --link udp --secure encrypt || fail "the service of host $1 did not start"
}
# job N: a job of two ranks, one on each host, through the services.
job() {
    local port=$((20000 + RANDOM % 20000)) key pids=() st=0
    key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
    for r in 0 1; do
        "$here/hosts.sh" exec "h$r" env ULN_RANK=$r ULN_SIZE=2 ULN_ROOT="$ULNTEST_HOST_0:$port" \
            ULN_JOB_KEY="$key" ULN_SECURE=encrypt ULN_SERVICE=required ULN_TRANSPORT=svc \
            ULNTEST_IT_EXPECT_UDP_PEERS=0 timeout 60 "$prog" >"$dir/job$1.rank$r" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || st=$?; done
    ((st == 0)) || fail "job $1 failed ($st)"
}
service 0
service 1
job 1
pauses=(0 1 1) # the restarts: the pause between kill and start, s
[[ -z $forger ]] || pauses=(0)
n=1
for pause in "${pauses[@]}"; do
    kill -KILL "${svc_pid[1]}"
    wait "${svc_pid[1]}" 2>/dev/null || true
    sleep "$pause"
    service 1
    if [[ -n $forger ]]; then
        "$here/hosts.sh" exec h1 "$forger" flood "$rate" 6 "$ULNTEST_HOST_0" >"$dir/flood" 2>&1 &
        fpid=$!
        sleep 1
    fi
    job $((++n))
done
svc_status 0 >"$dir/status0" 2>&1
if [[ -n $forger ]]; then
    svc_status 1 >"$dir/status1" 2>&1
    wait "$fpid" || fail "the flood failed"
    fpid=
    line0=$(grep "^secure: " "$dir/status0") line1=$(grep "^secure: " "$dir/status1")
    read -r csent caccepted < <(echo "$line0" |
        sed -n 's/.* cookies sent \([0-9]*\), accepted \([0-9]*\),.*/\1 \2/p') || true
    read -r got1 wait1 < <(echo "$line1" |
        sed -n 's/.* cookies got \([0-9]*\),.* waits for a key: longest \([0-9]*\) us.*/\1 \2/p') || true
    [[ -n ${caccepted:-} && -n ${wait1:-} ]] || fail "cannot read: $line0 / $line1"
    echo "svc_seal_restart.sh: $(cat "$dir/flood") at host 0; host 0: $line0"
    echo "svc_seal_restart.sh: the restarted service waited $wait1 us for host 0's key, got $got1 cookies"
    ((wait1 <= bound * 1000)) || fail "the restarted service waited $wait1 us for a key, over $bound ms"
    if ((rate > 0)); then
        ((csent >= 1)) || fail "host 0 sent no cookie under the flood"
        ((got1 == 0 || caccepted >= 1)) || fail "the restarted service's cookie not accepted"
    fi
fi
hellos=$(sed -n 's/^secure: .* hellos in \([0-9]*\),.*/\1/p' "$dir/status0")
((hellos >= n)) || fail "host 0's service took $hellos HELLOs: not each new life's key"
svc_stop || fail "a service did not stop cleanly"
echo "svc_seal_restart.sh: a service restarted ${#pauses[@]} times keyed again each time ($hellos HELLOs taken), every job passed"
