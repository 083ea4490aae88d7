#!/usr/bin/env bash
# ULN_STATS=1: each rank's uln_close prints one line of its counters that are
# not 0, and they are the traffic that happened: a ping-pong of N NAPs each
# way shows naps_sent and naps_received of at least N on both ranks, over shm
# and over udp (which adds its packet counts); unset, nothing is printed; a
# context with no job is named by its pid, not as rank 0.
#   tool_stats.sh ULNRUN ULNPERF
set -euo pipefail
ulnrun=$1 ulnperf=$2
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
n=500
# stderr only (the counters line), stdout dropped
run() { { "$ulnrun" -n 2 --timeout 60 "$ulnperf" --test lat --op nap --sizes 8 --iters $n >/dev/null; } 2>&1; }

out=$(run)
! grep -q 'counters:' <<<"$out" || fail "counters printed without ULN_STATS"

for tp in shm udp; do
    out=$(ULN_STATS=1 ULN_TRANSPORT=$tp run)
    lines=$(grep 'counters:' <<<"$out" || true)
    [[ $(grep -c . <<<"$lines") == 2 ]] || fail "$tp: want one line per rank, got: $lines"
    for r in 0 1; do
        l=$(grep "^ulnet: rank $r (pid [0-9]*) counters:" <<<"$lines") || fail "$tp: no line for rank $r"
        for f in naps_sent naps_received; do
            v=$(sed -n "s/.* $f=\([0-9]*\).*/\1/p" <<<"$l")
            [[ -n $v && $v -ge $n ]] || fail "$tp: rank $r $f=${v:-absent}, want >= $n: $l"
        done
        if [[ $tp == udp ]]; then
            grep -q ' pkts_sent=[1-9]' <<<"$l" || fail "udp: rank $r shows no packets sent: $l"
        else
            ! grep -q ' pkts_sent=' <<<"$l" || fail "shm: rank $r counts packets: $l"
        fi
        ! grep -q '=0\b' <<<"$l" || fail "$tp: a counter of 0 is printed: $l"
    done
done
# A context with no job (ULN_BOOT=none) has no rank: its line says so, with
# its pid, rather than "rank 0" from every such process.
out=$(ULN_BOOT=none ULN_STATS=1 "$ulnrun" -n 2 --timeout 60 "$(dirname "$ulnperf")/ulninfo" -t 2>&1 >/dev/null)
[[ $(grep -c '^ulnet: pid [0-9]* (no job) counters:' <<<"$out") == 2 ]] ||
    fail "no-job contexts: want 2 lines 'pid N (no job)', got: $out"
! grep -q 'rank 0' <<<"$out" || fail "a context with no job is called rank 0: $out"
echo "ULN_STATS: all checks passed"
