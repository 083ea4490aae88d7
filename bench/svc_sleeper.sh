#!/usr/bin/env bash
# bench/svc_sleeper.sh: issue 32's figure - one-sided operations into a
# process on another host that sleeps without calling ulnet.
#
#   bench/svc_sleeper.sh [--build DIR] [--secs S] [--rounds N]
#
# Two network-namespace hosts (tests/netns/run_job.sh). Rank 1 (host h1)
# registers 16 MiB of uln_mem_alloc memory and 16 MiB of malloc'd memory,
# then sleeps S seconds (default 6) without a ulnet call. Rank 0 (host h0)
# meanwhile PUTs 16 MiB into the uln_mem_alloc memory, GETs it back and does
# 1000 fetch-adds on one of its words: "figure" is the time of the three
# together (tests/svc/passive.c, every byte and value checked). Then the same
# PUT and GET on the malloc'd memory, CAS and refusals (not in the figure).
# Configurations, interleaved round by round (svc, udp, thread, svc, ...):
#   svc      one ulnetd per host, every peer through them (ULN_TRANSPORT=svc)
#   svc-vm   the same with ulnetd --no-map (process_vm_* for PUT/GET, every
#            atomic by the target's engine)
#   udp      direct udp: the target's engine must do it all, once it wakes
#   thread   direct udp, the target with a progress thread (ULN_PROGRESS=thread)
# Every process pinned: taskset -c 0,1 (this machine has 2 CPUs). Needs root
# (network namespaces). Prints one line per run and the medians.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build secs=6 rounds=3
while (($#)); do
    case $1 in
    --build) build=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "svc_sleeper.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
prog=$build/tests/svc/svc_passive ulnetd=$build/ulnetd
[[ -x $prog && -x $ulnetd ]] || { echo "svc_sleeper.sh: build svc_passive and ulnetd in $build" >&2; exit 2; }
job=$repo/tests/netns/run_job.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # config round
    local args=()
    case $1 in
    svc) args=(--svc "$ulnetd") ;;
    svc-vm) args=(--svc "$ulnetd" --svc-arg --no-map) ;;
    udp) args=(--env ULN_TRANSPORT=udp --env ULN_SERVICE=off) ;;
    thread) args=(--env ULN_TRANSPORT=udp --env ULN_SERVICE=off --env ULN_PROGRESS=thread) ;;
    esac
    local f=$out/$1.$2
    if ! taskset -c 0,1 "$job" --hosts 2 --ranks 2 --timeout $((secs + 120)) "${args[@]}" \
        -- "$prog" "$secs" >"$f" 2>&1; then
        echo "svc_sleeper.sh: $1 round $2 failed:" >&2
        cat "$f" >&2
        exit 1
    fi
    local line
    line=$(grep "passive: uln_mem_alloc:" "$f")
    printf '%-7s round %d: %s\n' "$1" "$2" "${line#passive: }"
    sed -n 's/.*figure \([0-9.]*\) s.*/\1/p' "$f" >>"$out/$1.figures"
}

configs=(svc svc-vm udp thread)
for ((r = 1; r <= rounds; r++)); do
    for c in "${configs[@]}"; do run "$c" "$r"; done
done
echo "figure (PUT 16 MiB + GET 16 MiB + 1000 fetch-adds into a target asleep ${secs} s), median of $rounds:"
for c in "${configs[@]}"; do
    printf '  %-7s %s s\n' "$c" "$(sort -n "$out/$c.figures" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
