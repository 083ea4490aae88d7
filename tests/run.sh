#!/usr/bin/env bash
# Build ulnet and pass every test: the normal build (warnings are errors), the
# whole suite again under ASan+UBSan, the multi-threaded parts under TSan, short
# jobs with every rank under valgrind's memcheck, and the installed library
# with pkg-config and the quick-start example.
# Works on a fresh Debian 12 machine as root: it installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

pkgs=(cmake ninja-build gcc make pkg-config libc6-dev procps iproute2 nftables ethtool python3
    valgrind)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

jobs=$(nproc)
step() { echo; echo "== $*"; }

step "build (warnings are errors)"
cmake -S . -B build -G Ninja -DULN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build
step "tests"
# Two at a time (this machine's cores); tests that measure time or wake-ups
# are marked RUN_SERIAL and run alone.
ctest --test-dir build --output-on-failure -j2

step "build with ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DULN_WERROR=ON -DULN_SANITIZE=address \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
ninja -C build-asan
step "tests under ASan+UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j2

step "build with TSan (the parts that run threads)"
cmake -S . -B build-tsan -G Ninja -DULN_WERROR=ON -DULN_SANITIZE=thread \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-tsan # everything, so any test the filter below selects exists
step "threaded tests under TSan: rings, key table, endpoints on several threads, progress thread"
# soak.progress_thread_*: random traffic of every kind while the progress
# thread and the application take turns on the context, over shm and udp.
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure \
    -R '^unit_|^integration\.threads\.|^integration\.(busy_target|passive_target_thread)\.|^soak\.progress_thread_'

step "valgrind memcheck: short jobs, every rank under valgrind (about a minute)"
tests/valgrind.sh build

step "install, pkg-config, quick-start example"
stage=$root/build/stage
rm -rf "$stage"
cmake --install build --prefix "$stage" >/dev/null
export PKG_CONFIG_PATH=$(dirname "$(find "$stage" -name ulnet.pc)")
pkg-config --cflags --libs ulnet
make -s -C examples clean
make -s -C examples hello CFLAGS="-O2 -Wall -Wextra -Werror -Wl,-rpath,$stage/lib"
"$stage/bin/ulnrun" -n 3 --timeout 30 examples/hello
make -s -C examples clean
echo
echo "all test stages passed"
