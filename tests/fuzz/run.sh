#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ULN_FUZZ=ON, ASan+UBSan) into build-fuzz
# and run each one, one after the other.
#
#   tests/fuzz/run.sh              smoke: 30 s per target (the CI stage)
#   tests/fuzz/run.sh --seconds S  S seconds per target
#   tests/fuzz/run.sh --runs N     N executions per target
#   tests/fuzz/run.sh --long       10^7 executions per target (about an hour
#                                  each on this machine: not for CI)
#   tests/fuzz/run.sh --seeds      rewrite tests/fuzz/corpus/*/seed-* from gen_seeds.c
#   ... [target ...]               only these targets (fuzz_udp_rx, fuzz_engine_rx,
#                                  fuzz_addr, fuzz_xdp_frame, fuzz_fi_name,
#                                  fuzz_seal_open, fuzz_svc, fuzz_hello)
#
# Each target starts from its committed corpus (tests/fuzz/corpus/<target>:
# seeds and regression inputs, read only) plus what earlier runs found
# (build-fuzz/corpus/<target>, where new inputs go). An input that breaks a
# check is saved under build-fuzz/crashes/<target>/ and the script fails;
# replay it with build-fuzz/tests/fuzz/<target> FILE, and once the bug is
# fixed copy it into tests/fuzz/corpus/<target>/ as a regression input (the
# normal test suite replays that directory: ctest -R fuzz_replay).
# At the end: executions, executions per second and coverage per target.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

mode=(-max_total_time=30)
label="30 s"
targets=()
seeds=0
while (($#)); do
    case $1 in
    --seconds) mode=(-max_total_time="$2"); label="$2 s"; shift ;;
    --runs) mode=(-runs="$2"); label="$2 runs"; shift ;;
    --long) mode=(-runs=10000000); label="10^7 runs" ;;
    --seeds) seeds=1 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    fuzz_*) targets+=("$1") ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
((${#targets[@]})) || targets=(fuzz_udp_rx fuzz_engine_rx fuzz_addr fuzz_xdp_frame fuzz_fi_name
    fuzz_seal_open fuzz_svc fuzz_hello)

build=$root/build-fuzz
CC=clang cmake -S . -B "$build" -G Ninja -DULN_FUZZ=ON -DULN_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j2 fuzz_seeds "${targets[@]}"
if ((seeds)); then
    rm -f tests/fuzz/corpus/*/seed-*
    "$build/tests/fuzz/fuzz_seeds" tests/fuzz/corpus
    echo "seeds written to tests/fuzz/corpus"
    exit 0
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
summary=()
for t in "${targets[@]}"; do
    mkdir -p "$build/corpus/$t" "$build/crashes/$t"
    log=$build/$t.log
    echo "== $t: $label"
    start=$(date +%s)
    status=0
    # -max_len: a few records of up to an MTU-sized datagram each.
    "$build/tests/fuzz/$t" "${mode[@]}" -max_len=6000 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/crashes/$t/" \
        "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || status=$?
    secs=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    line="$t: ${execs:-?} execs in ${secs} s, ${rate:-?} exec/s, ${cov:-cov: ?}"
    echo "   $line"
    summary+=("$line")
    if ((status)); then
        echo "$t FAILED (status $status); the end of its log ($log):" >&2
        tail -40 "$log" >&2
        ls -1 "$build/crashes/$t/" >&2
        exit 1
    fi
done
echo
printf '%s\n' "${summary[@]}"
echo "fuzzing passed"
