#!/usr/bin/env bash
# Build ulnet and pass every test: the normal build (warnings are errors), a
# checkout under /tmp, a build without PMIx, the memory-handling part of the
# suite again under ASan+UBSan (ctest -L asan), the multi-threaded parts
# under TSan, short jobs with every rank under valgrind's memcheck, the
# installed library with pkg-config, its exported symbols and the quick-start
# example, and a short run of the fuzz targets (tests/fuzz/run.sh, clang with
# libFuzzer).
# Works on a fresh Debian 12 machine as root: it installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# libpmix-dev: the PMIx bootstrap; openmpi-bin: mpirun for tests/mpirun;
# clang, libclang-rt-14-dev: libFuzzer for tests/fuzz; valgrind: memcheck stage.
pkgs=(cmake ninja-build gcc make pkg-config libc6-dev procps iproute2 nftables ethtool python3
    libpmix-dev openmpi-bin clang libclang-rt-14-dev valgrind)
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

# ---- any checkout path --------------------------------------------------------
step "a checkout under /tmp: the cases that mount a fresh /tmp (no_leftovers.sh) still pass"
# no_leftovers.sh covers /tmp with a tmpfs of its own; a checkout or build
# directory living there must stay reachable. A copy of the sources under
# /tmp, built only as far as those cases need (well under a minute).
(
    co=$(mktemp -d /tmp/ulnet-checkout.XXXXXX)
    trap 'rm -rf "$co"' EXIT
    tar -C "$root" --exclude=./.git --exclude='./build*' -cf - . | tar -C "$co" -xf -
    cmake -S "$co" -B "$co/build" -G Ninja -DULN_WERROR=ON >/dev/null
    ninja -C "$co/build" ulnrun it_peer_death it_expect_status
    ctest --test-dir "$co/build" --output-on-failure -R '^integration\.peer_death\.'
)
# ---- end of any checkout path ------------------------------------------------

step "build without PMIx (ULN_PMIX=OFF): unit tests, ranks under mpirun run as before, ulninfo says so"
cmake -S . -B build-nopmix -G Ninja -DULN_WERROR=ON -DULN_PMIX=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-nopmix
ctest --test-dir build-nopmix --output-on-failure -j2 -R '^unit_|^mpirun\.|^tool_ulninfo$'

step "build with ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DULN_WERROR=ON -DULN_SANITIZE=address \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
ninja -C build-asan
# ---- ASan stage: ctest -L asan -------------------------------------------------
step "tests under ASan+UBSan (ctest -L asan: what touches the library's memory handling)"
# The cases labelled asan (tests/CMakeLists.txt says which and why): timing,
# launcher and tool cases add nothing under ASan that the labelled ones miss.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -L asan
# ---- end of ASan stage -----------------------------------------------------------

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
# The static archive with what it needs (pmix, as a private requirement).
# shellcheck disable=SC2046 # pkg-config's flags are meant to be split
cc -O2 examples/hello.c $(pkg-config --cflags ulnet) \
    $(pkg-config --static --libs ulnet | sed "s|-lulnet|$stage/lib/libulnet.a|") \
    -o "$stage/hello-static"
"$stage/bin/ulnrun" -n 2 --timeout 30 "$stage/hello-static"
make -s -C examples clean

# ---- symbols of the installed libraries -------------------------------------
# The shared library exports ulnet's names only (src/ulnet.map; ULNET_0 is the
# version node itself), and neither installed library holds a test hook:
# the names ulnet_test (ULN_TEST_HOOKS) defines beyond the shipped archive.
so=$(find "$stage" -name libulnet.so)
archive=$(find "$stage" -name libulnet.a)
foreign=$(nm -D --defined-only "$so" | awk '$3 !~ /^uln_/ && $3 != "ULNET_0" {print $3}')
if [[ -n $foreign ]]; then
    echo "libulnet.so exports names outside uln_*: ${foreign//$'\n'/ }" >&2
    exit 1
fi
defined() { nm --defined-only "$@" 2>/dev/null | awk 'NF == 3 && $2 ~ /[A-Z]/ {print $3}' | sort -u; }
hooks=$(comm -13 <(defined build/libulnet.a) <(defined build/libulnet_test.a))
[[ -n $hooks ]] || { echo "no test hooks found in build/libulnet_test.a" >&2; exit 1; }
shipped=$(comm -12 <(echo "$hooks") <({ defined "$archive"; nm -D --defined-only "$so" | awk '{print $3}'; } | sort -u))
if [[ -n $shipped ]]; then
    echo "test hooks in the installed libraries: ${shipped//$'\n'/ }" >&2
    exit 1
fi
echo "libulnet.so exports $(nm -D --defined-only "$so" | grep -c ' uln_') uln_* names;" \
    "no test hook ($(echo "$hooks" | wc -l) known) is installed"
# ---- end of symbol checks ---------------------------------------------------

step "fuzz smoke: 30 s per receive path (libFuzzer, ASan+UBSan)"
tests/fuzz/run.sh --seconds 30
echo
echo "all test stages passed"
