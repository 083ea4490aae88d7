#!/usr/bin/env bash
# The main benchmark job: build ulnet (Release) into build-bench/ and run the
# default ulnperf suite on two ranks pinned to distinct CPUs: every op, lat and
# bw, 1 B - 16 MiB. The table goes to stdout and the CSV to build-bench/ulnperf.csv.
#
#   bench/run.sh                          # the full suite (well under 2 minutes)
#   bench/run.sh --quick --sizes 1-4096   # smoke test, a few seconds (used by tests)
#   bench/run.sh --mem malloc             # any other ulnperf options are passed on
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$repo/build-bench"

# A fresh Debian 12 machine has none of the tools; install only what is missing
# so that a prepared machine needs neither root nor the network.
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "run.sh: missing ${missing[*]}; install them or run as root" >&2
        exit 1
    fi
    echo "run.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # With recommends: gcc only recommends libc6-dev, and nothing compiles without it.
    apt-get install -y -q "${missing[@]}"
fi

# Tests are not built: only the two tools are needed, and that keeps the job short.
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$build" ulnrun ulnperf

echo "run.sh: ulnperf on 2 ranks, each pinned to its own CPU (see the '# pinned' line)" >&2
"$build/ulnrun" -n 2 --timeout 300 "$build/ulnperf" --csv="$build/ulnperf.csv" "$@"
echo "run.sh: CSV saved to $build/ulnperf.csv" >&2
