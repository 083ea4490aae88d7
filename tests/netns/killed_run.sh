#!/usr/bin/env bash
# netns.killed_run: a test killed mid-run leaves nothing of its hosts behind.
# run_job.sh with the services (--svc; on the AF_XDP link with LINK xdp),
# four ranks of kill_stream streaming through them on two hosts, is killed:
#   1. with SIGTERM (its trap ends the ranks and the services, hosts.sh down
#      removes the run): once it exited, no namespace of its run is named,
#      none of its processes (services, ranks, the services' reapers) lives,
#      and nothing on the machine holds one of the run's network namespaces
#      (a process in it, an open handle): so they are freed, and with them
#      their veths and the XDP programs on those.
#   2. with SIGKILL, as ctest's timeout kills: no trap runs, the run and
#      its processes stay (checked: the case is real), until "hosts.sh reap"
#      (the fixture netns.reap) removes it, its owner being gone; then the
#      same checks. A run whose owner lives (this script's) is not reaped.
# Usage: killed_run.sh ULNETD KILL_STREAM [udp|xdp]     (77: no namespaces)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 link=${3:-udp}
me=netns.killed_run
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "$me: no network namespaces: skipped"; exit 77; }
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"
tmp=$(mktemp -d)
job=''
cleanup() {
    [[ -z $job ]] || kill -KILL "$job" 2>/dev/null || true
    hosts_end
    "$hosts_sh" reap >/dev/null 2>&1 || true # what case 2 left, if it failed
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "$me: $*" >&2
    tail -30 "$tmp/out" >&2 || true
    exit 1
}

job_args=(--svc "$ulnetd")
[[ $link != xdp ]] || job_args+=(--svc-link xdp --svc-hook generic)

# A job streaming; sets job (run_job.sh's pid), run, and what the run has:
# ns (its namespaces' inodes) and procs ("pid:comm" of each process in it).
# The ranks stream (kill_stream) until killed.
start() {
    : >"$tmp/out"
    "$here/run_job.sh" --hosts 2 --ranks 4 --timeout 200 "${job_args[@]}" -- \
        "$prog" rounds 1000000000 >"$tmp/out" 2>&1 &
    job=$!
    local end=$((SECONDS + 120))
    until (($(grep -c "^rank [0-3] streaming" "$tmp/out") == 4)); do
        kill -0 "$job" 2>/dev/null || fail "$1: the job ended before every rank streamed"
        ((SECONDS < end)) || fail "$1: not every rank streaming after 120 s"
        sleep 0.1
    done
    run=$(sed -n 's/^hosts\.sh: run \([A-Za-z0-9_]*\): .*/\1/p' "$tmp/out" | head -1)
    [[ -n $run ]] || fail "$1: which run?"
    local n p
    ns=() procs=()
    for n in $(ip netns list | awk '{print $1}' | grep -E "^$run-(h[0-9]+|br)$"); do
        ns+=("$(stat -L -c %i "/run/netns/$n")")
        for p in $(ip netns pids "$n"); do procs+=("$p:$(cat "/proc/$p/comm" 2>/dev/null)"); done
    done
    ((${#ns[@]} == 3)) || fail "$1: run $run has ${#ns[@]} namespaces, not 3"
    local what="${procs[*]}"
    [[ $what =~ :ulnetd\ .*:ulnetd ]] || fail "$1: not two services in run $run: $what"
    (($(grep -o ":svc_kill_stream" <<<"$what" | wc -l) == 4)) || fail "$1: not four ranks in run $run: $what"
}

# Nothing of the run: no name, no process of it, nothing holding its
# namespaces (a process's own, or an open handle).
gone() {
    local what=$1 left p _
    for _ in $(seq 50); do
        left=''
        [[ -z $(ip netns list | awk '{print $1}' | grep -E "^$run-(h[0-9]+|br)$") ]] || left+="names "
        for p in "${procs[@]}"; do
            [[ $(cat "/proc/${p%%:*}/comm" 2>/dev/null) != "${p#*:}" ]] || left+="$p "
        done
        for p in "${ns[@]}"; do
            # shellcheck disable=SC2010 # readlink's targets, not file names
            ! { ls -l /proc/[0-9]*/ns/net /proc/[0-9]*/fd 2>/dev/null || true; } | grep "net:\[$p\]" >/dev/null ||
                left+="netns:$p "
        done
        [[ -n $left ]] || return 0
        sleep 0.1
    done
    fail "$what: run $run left behind: $left"
}

# 1. SIGTERM
start "SIGTERM"
kill -TERM "$job"
timeout 60 tail --pid="$job" -f /dev/null || fail "SIGTERM: run_job.sh still runs 60 s later"
wait "$job" || true
job=''
gone "SIGTERM"
echo "$me: SIGTERM: run $run removed (${#procs[@]} processes ended)"

# 2. SIGKILL, then hosts.sh reap; a live owner's run (made after the job's:
# run_job.sh would take ULNTEST_NETNS for its own) stays.
start "SIGKILL"
hosts_up 1
mine=$ULNTEST_NETNS
kill -KILL "$job"
wait "$job" 2>/dev/null || true
job=''
sleep 1
[[ -n $(ip netns list | awk '{print $1}' | grep -E "^$run-br$") ]] ||
    fail "SIGKILL: the run went without reap: the case tests nothing"
"$hosts_sh" reap 2>&1 | tee -a "$tmp/out" | grep "run $run removed" >/dev/null || fail "SIGKILL: reap did not remove run $run"
gone "SIGKILL, then hosts.sh reap"
[[ -n $(ip netns list | awk '{print $1}' | grep -E "^$mine-h0$") ]] || fail "reap removed run $mine, whose owner lives"
echo "$me: SIGKILL: run $run removed by hosts.sh reap (${#procs[@]} processes ended); run $mine (owner alive) kept"
echo "$me: passed"
