#!/usr/bin/env bash
# netns.svc_stopped: per-process credit across hosts (docs/service.md,
# "Credit"). Two namespace hosts, one ulnetd each, four ranks (rank r on host
# r % 2): rank 1 on host 1 is stopped with SIGSTOP; rank 0 streams NAPs to it
# (its flow's credit runs out: the service keeps them, no more come), while
# rank 2 streams NAPs to rank 3 on the same host as rank 1, through the same
# two services and the same host pair's stream: every one must arrive, in
# order, data checked, while rank 1 is still stopped, which it stays for at
# least 2 s. After SIGCONT rank 1 gets all of rank 0's, in order, once
# (tests/svc/stopped.c checks). And rank 3 PUTs into rank 0, whose
# acknowledgements must get through while rank 0's own stream to rank 1 is
# held back (stopped.c's "answers"). With --ops-mem SIZE after them (the
# services' quota of what they hold for a process for the wire), rank 0 must
# be held back at that quota (counted) while the others still go on.
# Usage: svc_stopped.sh ULNETD STOPPED [--ops-mem SIZE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2
svc_args=()
[[ ${3:-} != --ops-mem ]] || svc_args=(--svc-arg --ops-mem --svc-arg "$4")
tmp=$(mktemp -d)
r1='' jpid=''
cleanup() {
    [[ -z $r1 ]] || kill -CONT "$r1" 2>/dev/null || true
    [[ -z $jpid ]] || wait "$jpid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "netns.svc_stopped: $*" >&2; cat "$tmp/out" >&2; exit 1; }
"$here/run_job.sh" --hosts 2 --ranks 4 --timeout 150 --svc "$ulnetd" "${svc_args[@]}" -- "$prog" "$tmp/go" answers \
    >"$tmp/out" 2>&1 &
jpid=$!
for _ in $(seq 600); do
    grep -q "rank 1 pid [0-9]* ready" "$tmp/out" && break
    kill -0 "$jpid" 2>/dev/null || break
    sleep 0.05
done
if ! kill -0 "$jpid" 2>/dev/null; then
    rc=0
    wait "$jpid" || rc=$?
    jpid=
    ((rc == 77)) && exit 77 # no namespaces here: skipped
    fail "the job ended before rank 1 was ready (status $rc)"
fi
r1=$(sed -n 's/.*rank 1 pid \([0-9]*\) ready.*/\1/p' "$tmp/out")
[[ -n $r1 ]] || fail "rank 1 did not start"
kill -STOP "$r1"
stopped_at=$SECONDS
touch "$tmp/go"
for _ in $(seq 1400); do
    grep -q "answers done\|exited with status" "$tmp/out" && break
    sleep 0.05
done
grep -q "neighbour done" "$tmp/out" || fail "the neighbour's stream stalled behind the stopped process"
grep -q "answers done" "$tmp/out" || fail "rank 0's answers to rank 3 stalled behind its stream to the stopped process"
if ((${#svc_args[@]})); then # rank 0 held back at its quota now, the others went on
    run=$(sed -n 's/.*rank 1 pid [0-9]* ready (run \([a-z0-9]*\)).*/\1/p' "$tmp/out")
    # Rank 0 gets there at its own pace (a busy machine): what its service
    # holds for it - its out-queue's backlog, what its flow to the stopped
    # rank 1 kept (how much: what it had posted before it saw the held bit)
    # - reaches the quota, and it is held back there, and never holds more.
    at_quota="(held back [1-9]"
    for _ in $(seq 150); do
        "$here/hosts.sh" exec --run "$run" h0 "$ulnetd" --status >"$tmp/status" 2>&1 || true
        grep "rank 0/4" "$tmp/status" | grep "$at_quota" >/dev/null && break
        sleep 0.2
    done
    grep "rank 0/4" "$tmp/status" | grep "$at_quota" >/dev/null ||
        fail "rank 0 is not held back at its quota: $(grep 'rank 0/4' "$tmp/status")"
    held=$(grep "rank 0/4" "$tmp/status" | sed -n 's/.*held for the wire \([0-9]*\) KiB.*/\1/p')
    quota_k=$(($(numfmt --from=iec "$4") >> 10))
    ((held <= quota_k)) || fail "rank 0 holds $held KiB, over its quota of $quota_k KiB"
    echo "netns.svc_stopped: host 0 while rank 1 is stopped: $(grep -o 'rank [02]/4.*held back [0-9]*)' "$tmp/status" | sed 's/ inbox.*held for/: held for/' | tr '\n' ';')"
fi
while ((SECONDS - stopped_at < 3)); do sleep 0.1; done # stopped 2 s at least
[[ $(awk '{print $3}' "/proc/$r1/stat") == T ]] || fail "rank 1 was not stopped all along"
kill -CONT "$r1"
rc=0
wait "$jpid" || rc=$?
jpid=
((rc == 0)) || fail "the job's status $rc"
grep -q "rank 1 got all after SIGCONT" "$tmp/out" || fail "rank 1 did not get its NAPs"
grep -q "waits for credit [1-9]" "$tmp/out" || fail "rank 0's flow never waited for credit"
if ((${#svc_args[@]})); then
    grep -q "held back at it [1-9]" "$tmp/out" || fail "no process was held back at --ops-mem"
fi
echo "netns.svc_stopped: passed"
