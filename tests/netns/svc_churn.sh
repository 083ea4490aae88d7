#!/usr/bin/env bash
# netns.svc_churn: a service serving short-lived processes in turn keeps what
# its live ones need, not every one it ever served (docs/service.md, "Ranks
# that end"). Two namespace hosts, one ulnetd each; JOBS jobs one after the
# other, each a fresh job of two ranks (one per host) running PROG through
# the services (NAP, PUT, GET, atomics across the wire, data checked). After
# each tenth job and at the end, every service's --status: once the jobs are
# gone its wire keeps no flow and no route, it counts the ranks it freed,
# and its resident memory after the last job is within 8 MiB of what it was
# after the tenth (not under ASan, whose quarantine keeps freed memory).
# Before, every job's flows and routes stayed until the
# service ended. Usage: svc_churn.sh ULNETD PROG [JOBS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 jobs=${3:-200}
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "netns.svc_churn: no network namespaces: skipped"; exit 77; }
me=netns.svc_churn
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"
tmp=$(mktemp -d)
svc_logs=$tmp
cleanup() {
    hosts_end
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hosts_up 2
fail() {
    echo "netns.svc_churn: $*" >&2
    for h in 0 1; do
        echo "--- h$h:" >&2
        svc_status "$h" >&2 2>&1 || true
        tail -5 "$tmp/svc$h.log" >&2 || true
    done
    exit 1
}
svc_start "$ulnetd"

# A service's --status figure: the first number after the text given.
figure() { # host text
    svc_status "$1" 2>&1 | sed -n "s/.*$2 \([0-9][0-9]*\).*/\1/p" | head -1
}

# Once its processes are gone, a service's wire keeps no flow and no route
# (the ranks' state goes at its next pass: a second at most, its timers').
settled() { # host
    local out
    for _ in $(seq 40); do
        out=$(svc_status "$1" 2>&1)
        grep -q "processes: 0 attached" <<<"$out" && grep -q " 0 routes;" <<<"$out" &&
            grep -q "credit: 0 flows out, 0 in;" <<<"$out" && return 0
        sleep 0.1
    done
    fail "host $1 keeps state of processes that ended: $(grep -E 'routes|credit|processes' <<<"$out" | tr '\n' ' ')"
}

asan=0
ldd "$ulnetd" 2>/dev/null | grep libasan >/dev/null && asan=1
declare -A rss10=()
for ((j = 1; j <= jobs; j++)); do
    port=$((20000 + RANDOM % 20000))
    key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
    pids=()
    for r in 0 1; do
        "$here/hosts.sh" exec "h$r" env ULN_RANK=$r ULN_SIZE=2 ULN_ROOT="$ULNTEST_HOST_0:$port" \
            ULN_JOB_KEY="$key" ULN_SERVICE=required ULN_TRANSPORT=svc ULNTEST_IT_EXPECT_UDP_PEERS=0 \
            timeout 60 "$prog" 4 >"$tmp/job.$r" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { cat "$tmp/job.$r" >&2; fail "job $j: rank $r failed"; }
    done
    if ((j % 10 == 0)); then
        for h in 0 1; do
            settled "$h"
            ((j == 10)) && rss10[$h]=$(figure "$h" "resident")
        done
    fi
done
for h in 0 1; do
    settled "$h"
    rss=$(figure "$h" "resident")
    freed=$(figure "$h" "ranks ended, their flows and routes freed")
    echo "netns.svc_churn: host $h after $jobs jobs: resident ${rss} KiB (after 10: ${rss10[$h]:-?} KiB), ranks freed $freed"
    ((freed >= jobs)) || fail "host $h freed the state of $freed ranks, fewer than its $jobs"
    # Under ASan freed memory waits in its quarantine: the counts say it there.
    ((asan)) || [[ -z ${rss10[$h]:-} ]] || ((rss <= rss10[$h] + 8192)) ||
        fail "host $h grew from ${rss10[$h]} to $rss KiB resident over $jobs short jobs"
done
svc_stop || fail "a service did not stop cleanly"
echo "netns.svc_churn: passed"
