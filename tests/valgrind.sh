#!/usr/bin/env bash
# The valgrind stage of tests/run.sh: short jobs with every rank under
# memcheck — invalid accesses, uninitialised values in conditions and system
# calls, and definite leaks are errors — over shared memory in its three
# modes, with the progress thread, and over UDP with loss. Each job is
# bounded by ulnrun's --timeout; the stage takes about a minute.
#
#   tests/valgrind.sh BUILD_DIR
#
# tests/valgrind.supp holds the suppressions, each a false positive with its
# reason. Under valgrind 3.19 pidfd_open is an unhandled system call: ranks
# then cannot notice a dead peer early, which these jobs do not need. Not run
# here: `limits sizes` (valgrind cannot map the 1 TiB region; UBSan covers it).
set -euo pipefail
build=$(cd "${1:?usage: tests/valgrind.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --suppressions="$root/tests/valgrind.supp")
it=$build/tests/integration
soak=$build/tests/soak/uln_soak
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0

# run "ENV=x ..." RANKS PROGRAM ARGS...
run() {
    local env=$1 np=$2
    shift 2
    local t0=$SECONDS rc=0
    # shellcheck disable=SC2086 # env is a list of VAR=value words
    env $env "$build/ulnrun" -n "$np" --timeout 180 "${vg[@]}" "$@" >"$log" 2>&1 || rc=$?
    printf '  %-70s %3d s  %s\n' "${env:+$env }$(basename "$1") ${*:2}" $((SECONDS - t0)) \
        "$( ((rc == 0)) && echo ok || echo "FAILED (status $rc)")"
    if ((rc != 0)); then
        grep -v '^--[0-9]*-- ' "$log" | tail -60
        failed=1
    fi
}

run "" 2 "$it/it_ops_sizes" 16
run "ULN_SHM_CMA=0" 2 "$it/it_ops_sizes" 18
run "ULN_SHM_DIRECT=0" 2 "$it/it_ops_sizes" 16
run "ULN_TRANSPORT=udp" 2 "$it/it_ops_sizes" 12
run "" 2 "$it/it_protection"
run "" 2 "$it/it_limits" regions
run "ULN_SHM_DIRECT=0" 2 "$it/it_limits" queues
run "" 3 "$soak" --seconds 3 --max-size 65536 --seed 21
run "ULN_PROGRESS=thread" 2 "$soak" --seconds 3 --max-size 65536 --seed 22
run "ULN_TRANSPORT=udp ULN_FAULT=drop=0.02,dup=0.01,reorder=0.02,seed=9" 2 "$soak" --seconds 3 \
    --max-size 65536 --seed 23
exit $failed
