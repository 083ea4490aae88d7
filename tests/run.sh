#!/usr/bin/env bash
# Build ulnet and pass every test: the normal build (warnings are errors), a
# checkout under /tmp, a build without PMIx, the memory-handling part of the
# suite again under ASan+UBSan (ctest -L asan), the multi-threaded parts
# under TSan, short jobs with every rank under valgrind's memcheck, the
# installed library (the README's build line, pkg-config, the CMake package,
# man pages, static links, its exported symbols, the provider where libfabric
# finds it), an install by an ordinary user into $HOME, Slurm (srun, sbatch) on
# a cluster of its own, a user's build without the tests, and a short run of the fuzz targets (tests/fuzz/run.sh, clang with
# libFuzzer).
# Works on a fresh Debian 12 machine as root: it installs what is missing.
#
# tests/run.sh --list prints the stages; tests/run.sh STAGE... runs those only
# (in the order given); with no argument every stage runs, in the order below.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# The stages: name, what it proves (--list), and the function that runs it.
stages=(build tests checkout nopmix asan tsan valgrind install home slurm user fuzz)
declare -A what=(
    [build]="the normal build (warnings are errors)"
    [tests]="every ctest case of the normal build, two at a time"
    [checkout]="a checkout under /tmp: the cases that mount a fresh /tmp"
    [nopmix]="a build without PMIx: unit tests, mpirun ranks, ulninfo"
    [asan]="ctest -L asan under ASan+UBSan"
    [tsan]="the threaded tests under TSan"
    [valgrind]="short jobs, every rank under valgrind memcheck"
    [install]="the installed library: README build line, pkg-config, CMake, man pages, static links, provider, exported symbols"
    [home]="an unprivileged user's install into \$HOME: every file in the prefix, FI_PROVIDER_PATH, uninstall"
    [slurm]="srun (PMIx, Slurm's variables, pmi2), Open MPI under srun, sbatch, two nodes, on a Slurm of its own"
    [user]="a user's build (BUILD_TESTING=OFF, no PMIx) and a fully static program"
    [fuzz]="30 s of libFuzzer per receive path"
)

case ${1:-} in
--list)
    for s in "${stages[@]}"; do printf '%-9s %s\n' "$s" "${what[$s]}"; done
    exit 0
    ;;
-h | --help)
    echo "usage: tests/run.sh [--list | STAGE...]   (no STAGE: all of them; --list names them)"
    exit 0
    ;;
esac
chosen=("$@")
((${#chosen[@]})) || chosen=("${stages[@]}")
for s in "${chosen[@]}"; do
    [[ -v "what[$s]" ]] || { echo "tests/run.sh: no stage '$s' (tests/run.sh --list)" >&2; exit 2; }
done

# libpmix-dev: the PMIx bootstrap; openmpi-bin: mpirun for tests/mpirun;
# clang, libclang-rt-14-dev: libFuzzer for tests/fuzz; valgrind: memcheck stage;
# man-db, groff-base: the installed man pages are checked; file: the static link;
# libfabric-dev, libfabric-bin, libopenmpi-dev, netpipe-openmpi: the libfabric
# provider (prov/) and its clients (tests/fi, tests/mpi); libxdp-dev,
# libbpf-dev, xdp-tools: the AF_XDP link and its XDP program (clang builds it);
# iputils-ping: tests/xdp checks the interface still answers; slurmd, slurmctld,
# slurm-client, munge: tests/slurm starts a Slurm cluster of its own; libssl-dev:
# libcrypto, the ciphers and key agreement of sealed datagrams (src/seal/);
# libsodium-dev: small sealed datagrams (src/seal/seal.c).
pkgs=(cmake ninja-build gcc make pkg-config libc6-dev libssl-dev libsodium-dev procps iproute2 nftables ethtool python3
    libpmix-dev openmpi-bin clang libclang-rt-14-dev valgrind man-db groff-base file
    libfabric-dev libfabric-bin libopenmpi-dev netpipe-openmpi libxdp-dev libbpf-dev xdp-tools
    iputils-ping slurmd slurmctld slurm-client munge)
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

version=$(sed -n 's/^project(ulnet VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
step() { echo; echo "== $*"; }

# Stages that use the normal build make it first, once per run.
main_built=0
need_build() { if ((main_built == 0)); then stage_build; fi; }

stage_build() {
    step "build (warnings are errors)"
    cmake -S . -B build -G Ninja -DULN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    ninja -C build
    main_built=1
}

stage_tests() {
    need_build
    step "tests"
    # Two at a time (this machine's cores); tests that measure time or wake-ups
    # are marked RUN_SERIAL and run alone.
    ctest --test-dir build --output-on-failure -j2
}

stage_checkout() {
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
}

stage_nopmix() {
    step "build without PMIx (ULN_PMIX=OFF): unit tests, ranks under mpirun run as before, ulninfo says so"
    cmake -S . -B build-nopmix -G Ninja -DULN_WERROR=ON -DULN_PMIX=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    ninja -C build-nopmix
    ctest --test-dir build-nopmix --output-on-failure -j2 -R '^unit_|^mpirun\.|^tool_ulninfo$'
}

stage_asan() {
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
}

stage_tsan() {
    step "build with TSan (the parts that run threads)"
    cmake -S . -B build-tsan -G Ninja -DULN_WERROR=ON -DULN_SANITIZE=thread \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    ninja -C build-tsan # everything, so any test the filter below selects exists
    step "threaded tests under TSan: rings, key table, endpoints on several threads, progress thread"
    # soak.progress_thread_*: random traffic of every kind while the progress
    # thread and the application take turns on the context, over shm and udp.
    # fi.thread_safe, fi.progress_auto: the provider's domain lock and its progress thread.
    # fi.sockaddr*: socket addresses looked up by threads that insert under that lock.
    # svc.*, netns.svc_*_thread: those threads through the host service, and a
    # service killed under them (ulnetd runs one thread: built with TSan here too).
    TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure \
        -R '^unit_|^integration\.threads\.|^integration\.(busy_target|passive_target_thread)\.|^soak\.progress_thread_|^fi\.(thread_safe|progress_auto|sockaddr|sockaddr_udp)$|^svc\.(threads|threads_progress|ops_sizes_progress)$|^netns\.svc_(all_pairs_thread|kill_udp_thread)$'
}

stage_valgrind() {
    need_build
    step "valgrind memcheck: short jobs, every rank under valgrind (about a minute)"
    tests/valgrind.sh build
}

stage_install() {
    need_build
    step "install: the README's build line runs as is, pkg-config, CMake package, man pages, static links, the provider"
    stage=$root/build/stage
    rm -rf "$stage"
    cmake --install build --prefix "$stage" >"$root/build/install.log"
    # Every file inside the prefix, the provider too (prov/CMakeLists.txt):
    # libfabric finds it with FI_PROVIDER_PATH, as the install says.
    outside=$(grep -v "^$stage/" build/install_manifest.txt || true)
    [[ -z $outside ]] || { echo "installed outside the prefix $stage: $outside"; exit 1; }
    if [[ -f build/prov/libulnet-fi.so ]]; then
        grep -q "FI_PROVIDER_PATH=$stage/lib/libfabric\$" "$root/build/install.log" ||
            { echo "the install does not say FI_PROVIDER_PATH:"; cat "$root/build/install.log"; exit 1; }
        out=$(env -u FI_PROVIDER FI_PROVIDER_PATH="$stage/lib/libfabric" fi_info -p ulnet 2>&1) || true
        grep -q "provider: ulnet" <<<"$out" ||
            { echo "fi_info -p ulnet with FI_PROVIDER_PATH after install: $out"; exit 1; }
        # Installed with libfabric's own prefix (a distribution's package, staged
        # with DESTDIR), it goes into libfabric's provider directory, found with
        # no setting; ninja uninstall with the same DESTDIR removes every file.
        local fi_prefix fi_provdir sys left
        fi_prefix=$(pkg-config --variable=prefix libfabric)
        fi_provdir=$(pkg-config --variable=libdir libfabric)/libfabric
        sys=$root/build/stage-sys
        rm -rf "$sys"
        DESTDIR=$sys cmake --install build --prefix "$fi_prefix" >/dev/null
        [[ -f $sys$fi_provdir/libulnet-fi.so ]] ||
            { echo "prefix $fi_prefix: no provider in libfabric's $fi_provdir (under DESTDIR)"; exit 1; }
        DESTDIR=$sys ninja -C build uninstall >/dev/null
        left=$(find "$sys" -type f)
        [[ -z $left ]] || { echo "left after DESTDIR uninstall: $left"; exit 1; }
        rm -rf "$sys"
    fi
    export PKG_CONFIG_PATH=$stage/lib/pkgconfig
    # ulnet.pc stands alone: found with only its own directory searched (no pmix.pc
    # needed), and no PMIx include path leaks into a user's flags.
    PKG_CONFIG_LIBDIR=$stage/lib/pkgconfig pkg-config --cflags --libs ulnet
    if pkg-config --cflags --libs ulnet | grep -q pmix; then echo "ulnet.pc leaks PMIx"; exit 1; fi
    # One version: pkg-config's, CMake's and the library's are the project's.
    [[ $(pkg-config --modversion ulnet) == "$version" ]]
    [[ $("$stage/bin/ulninfo" --version) == "ulninfo (ulnet) $version" ]]
    grep -q "PACKAGE_VERSION \"$version\"" "$stage/lib/cmake/ulnet/ulnetConfigVersion.cmake"
    # The README's own build line, word for word, in a fresh directory; the
    # program then runs with no LD_LIBRARY_PATH (ulnet.pc's rpath finds the library).
    line=$(grep -m1 '^cc examples/hello.c ' README.md)
    mkdir -p "$stage/user/examples"
    cp examples/hello.c "$stage/user/examples/"
    (cd "$stage/user" && env -u LD_LIBRARY_PATH bash -euc "$line" &&
        env -u LD_LIBRARY_PATH "$stage/bin/ulnrun" -n 3 --timeout 30 ./hello)
    # The examples as a user's CMake project: find_package(ulnet), ulnet::ulnet.
    cmake -S examples -B "$stage/examples-build" -G Ninja -DCMAKE_PREFIX_PATH="$stage" >/dev/null
    ninja -C "$stage/examples-build"
    env -u LD_LIBRARY_PATH "$stage/bin/ulnrun" -n 2 --timeout 30 "$stage/examples-build/hello"
    # The static archive with what pkg-config --static says it needs (libpmix
    # stays shared: its own dependencies ship no static archives).
    # shellcheck disable=SC2046 # pkg-config's flags are meant to be split
    cc -O2 examples/hello.c $(pkg-config --cflags ulnet) \
        $(pkg-config --static --libs ulnet | sed "s|-lulnet|$stage/lib/libulnet.a|") \
        -o "$stage/hello-static"
    "$stage/bin/ulnrun" -n 2 --timeout 30 "$stage/hello-static"
    # Man pages: found by man after install, and clean under groff's warnings.
    for page in uln_open uln_put uln_get uln_nap uln_cq_poll uln_mr_reg ulnrun ulninfo ulnperf ulnetd; do
        MANPATH=$stage/share/man man -w "$page" >/dev/null
    done
    # From share/man: the pages of functions documented together are ".so" links.
    for f in $(cd "$stage/share/man" && echo man[138]/*); do
        out=$(cd "$stage/share/man" && groff -man -z -ww -t "$f" 2>&1) || out="groff failed: $out"
        [[ -z $out ]] || { echo "$f: $out"; exit 1; }
        out=$(cd "$stage/share/man" && MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
        [[ -z $out ]] || { echo "$f: $out"; exit 1; }
    done

    # ulnetd's systemd unit: inside the prefix, starting the installed ulnetd,
    # and valid to systemd where its checker runs (not in every container).
    unit=$stage/lib/systemd/system/ulnetd.service
    grep -q "^ExecStart=$stage/bin/ulnetd --foreground" "$unit" ||
        { echo "ulnetd.service: no ExecStart of the installed ulnetd"; cat "$unit"; exit 1; }
    grep -q "^Type=simple" "$unit" && grep -q "^Restart=on-failure" "$unit" ||
        { echo "ulnetd.service: not Type=simple with Restart=on-failure"; exit 1; }
    if command -v systemd-analyze >/dev/null; then
        # (man ulnetd(8) is in the stage only: not systemd's to find.)
        out=$(systemd-analyze verify "$unit" 2>&1 | grep -v "man ulnetd(8)" || true)
        [[ -z $out ]] || { echo "systemd-analyze verify ulnetd.service: $out"; exit 1; }
    fi

    # bench/run.sh --help: its own options, at once, with nothing built or run.
    out=$(bench/run.sh --help)
    grep -q '^Usage: bench/run.sh' <<<"$out" || { echo "bench/run.sh --help: $out"; exit 1; }

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
}

stage_home() {
    step "install as an ordinary user into \$HOME: every file inside the prefix, FI_PROVIDER_PATH, uninstall"
    # A user of its own, made for the run and removed after it.
    tests/install/user.sh
}

stage_slurm() {
    need_build
    step "Slurm: srun (PMIx, Slurm's variables, pmi2), Open MPI under srun, sbatch, two nodes"
    # A cluster of its own (munged, slurmctld, a slurmd per node), stopped after.
    tests/slurm/run.sh build
}

stage_user() {
    step "a user's build (BUILD_TESTING=OFF, without PMIx): only the library and tools; a fully static program"
    rm -rf build-user
    # ULN_FI_PROVIDER_DIR relative: the provider installs there under the prefix.
    cmake -S . -B build-user -G Ninja -DULN_WERROR=ON -DULN_PMIX=OFF -DBUILD_TESTING=OFF \
        -DULN_FI_PROVIDER_DIR=lib/libfabric >/dev/null
    ninja -C build-user
    built=$(find build-user -type f \( -name '*.so*' -o -name '*.a' -o -perm -u+x \) \
        ! -path '*/CMakeFiles/*' -printf '%f\n' | sort | tr '\n' ' ')
    # The libfabric provider is a user's too (a library, installed), where libfabric is.
    fi_so=$(pkg-config --exists libfabric && echo "libulnet-fi.so " || true)
    [[ $built == "${fi_so}libulnet.a libulnet.so.$version ulnetd ulninfo ulnperf ulnrun " ]] ||
        { echo "BUILD_TESTING=OFF built: $built"; exit 1; }
    ustage=$root/build-user/stage
    cmake --install build-user --prefix "$ustage" >/dev/null
    [[ -z $fi_so || -f $ustage/lib/libfabric/libulnet-fi.so ]] ||
        { echo "ULN_FI_PROVIDER_DIR=lib/libfabric: no provider under $ustage/lib/libfabric"; exit 1; }
    # shellcheck disable=SC2046 # pkg-config's flags are meant to be split
    cc -static -O2 examples/hello.c $(PKG_CONFIG_PATH=$ustage/lib/pkgconfig pkg-config --cflags ulnet) \
        $(PKG_CONFIG_PATH=$ustage/lib/pkgconfig pkg-config --static --libs ulnet) \
        -o "$ustage/hello-static" 2> >(grep -v "statically linked applications requires at runtime" >&2)
    file "$ustage/hello-static" | grep -q 'statically linked'
    "$ustage/bin/ulnrun" -n 2 --timeout 30 "$ustage/hello-static"
}

stage_fuzz() {
    step "fuzz smoke: 30 s per receive path (libFuzzer, ASan+UBSan)"
    tests/fuzz/run.sh --seconds 30
}

for s in "${chosen[@]}"; do
    "stage_$s"
done
echo
if ((${#chosen[@]} == ${#stages[@]})); then echo "all test stages passed"; else echo "test stages passed: ${chosen[*]}"; fi
