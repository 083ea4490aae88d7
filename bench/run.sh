#!/usr/bin/env bash
# The main benchmark job: build ulnet (Release) into build-bench/ and run the
# ulnperf suite over shared memory, then over UDP on loopback (ULN_TRANSPORT=udp:
# ulnet's own reliable protocol through the kernel's UDP stack), then print a
# summary table of the key figures per primitive and transport. UDP between
# network-namespace hosts, beside sockperf and iperf3: bench/netpeers.
#
#   bench/run.sh                          # the default suite, under 2 minutes
#   bench/run.sh --full                   # longer points, more sizes and loads
#   bench/run.sh --plot DIR               # also PNG/SVG plots into DIR (bench/plot: gnuplot)
#   bench/run.sh --quick --sizes 1-4096   # smoke test, a few seconds
#   bench/run.sh --mem malloc             # other options go to ulnperf as they are
#
# Two ulnperf jobs per transport (udp: one, lat/bw/rate up to 1 MiB, unless
# --full): 2 ranks for lat, bw, bibw, rate, cache and
# fair (each rank pinned to its own CPU), then 4 ranks for load (3 senders into
# one receiver; on a 2-CPU machine the senders share the second CPU, which the
# load section of the output says). The load job is separate so that the
# 2-rank figures are taken with no idle third rank attached to the receiver's
# rings. Then incast on 4 ranks (3 senders stream NAPs of 64 B and 1 KiB into
# rank 0, every one checked), over both transports, and over UDP once more with
# 5 % of the packets dropped (ULN_FAULT; rows incast_drop5): the issue's
# yardstick is the lossy rate against the lossless one.
# CSVs: build-bench/ulnperf.<transport>.csv, ...load<N>.csv, ...incast.csv.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$repo/build-bench"

usage() {
    cat <<'EOF_USAGE'
Usage: bench/run.sh [--full] [--plot DIR] [ulnperf options...]
Build ulnet (Release, into build-bench/) and run the ulnperf suite over shared
memory, then over UDP on loopback, then print a summary table.
  --full        longer points, more sizes and load levels (several minutes)
  --plot DIR    also PNG/SVG plots into DIR (needs gnuplot)
  -h, --help    this text (nothing is built or run)
Any other option goes to every ulnperf run as it is, e.g. --quick,
--sizes 1-4096, --mem malloc (ulnperf --help lists them).
CSVs are saved to build-bench/ulnperf.<transport>.csv and ...load<N>.csv.
EOF_USAGE
}

full=0 plot="" pass=()
while (($#)); do
    case $1 in
    -h | --help)
        usage
        exit 0
        ;;
    --full) full=1 ;;
    --plot)
        [[ $# -ge 2 ]] || { echo "run.sh: --plot needs a directory" >&2; exit 2; }
        plot=$2
        shift
        ;;
    *) pass+=("$1") ;;
    esac
    shift
done

# A fresh Debian 12 machine has none of the tools; install only what is missing
# so that a prepared machine needs neither root nor the network.
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v python3 >/dev/null 2>&1 || missing+=(python3) # the summary table
# libcrypto: the library seals datagrams between hosts (ULN_SECURE) with it
pkg-config --exists libcrypto 2>/dev/null || missing+=(libssl-dev)
# libsodium: small sealed datagrams (optional to the build; the figures use it)
pkg-config --exists libsodium 2>/dev/null || missing+=(libsodium-dev)
[[ -n $plot ]] && ! command -v gnuplot >/dev/null 2>&1 && missing+=(gnuplot-nox)
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
ninja -j2 -C "$build" ulnrun ulnperf

# Shared-memory latency is sensitive to anything else running: name what is.
# Not this script, nor the ps and awk of the check itself (children of the
# subshell; a process that just started shows a high %CPU, so ps always did).
busy=$(
    sub=$BASHPID # this subshell: ps and awk are its children
    ps -eo pid=,ppid=,pcpu=,comm= --sort=-pcpu | awk -v me=$$ -v sh="$sub" '$1 != me && $1 != sh &&
        $2 != sh && $3 >= 20 { printf "%s%s (pid %s, %s%% CPU)", n++ ? ", " : "", $4, $1, $3 }'
)
if [[ -n $busy ]]; then
    echo "run.sh: WARNING: the machine is busy: $busy; the figures will be noisy" >&2
fi

opts=()
if ((full)); then
    # Longer points, small-message rate up to 4 KiB, finer load steps.
    opts=(--point-ms 300 --rate-max 4K --load-levels 5,10,15,20,25,30,35,40,45,50,55,60,65,70,75,80,85,90,95,100)
fi
tests2=lat,bw,bibw,rate,cache,fair
load_ranks=(4)
((full)) && load_ranks=(2 4 8)

# incast TRANSPORT FAULT NAME: 3 senders into rank 0 for a fixed time; with
# FAULT, ULN_FAULT drops packets and the rows are renamed NAME so that they sit
# beside the lossless ones in one summary.
incast() {
    local tr=$1 fault=$2 name=$3 iout="$build/ulnperf.$1.$3.csv"
    echo "run.sh: [$tr] $name: ulnperf on 4 ranks (3 senders into rank 0)${fault:+, ULN_FAULT=$fault}" >&2
    ULN_FAULT=$fault "$build/ulnrun" -n 4 --timeout 600 "$build/ulnperf" --transport "$tr" \
        --test incast --sizes 64,1K --csv="$iout" "${opts[@]}" "${pass[@]}"
    [[ $name == incast ]] || sed -i "s/^$tr,nap,incast,/$tr,nap,$name,/" "$iout"
    csvs+=("$iout")
}

csvs=()
for tr in shm udp; do
    out="$build/ulnperf.$tr.csv"
    if [[ $tr != shm ]]; then
        # The library picks its transport from ULN_TRANSPORT; ulnperf says
        # plainly when it runs another one. Ask once, quickly.
        if ! why=$("$build/ulnrun" -n 2 --timeout 30 "$build/ulnperf" --transport "$tr" --quick \
            --test lat --op nap --sizes 8 --csv 2>&1 >/dev/null); then
            echo "run.sh: $tr: not measured: $(grep -m1 transport <<<"$why" || echo "$why" | tail -1)" >&2
            continue
        fi
    fi
    echo "run.sh: [$tr] ulnperf on 2 ranks, each pinned to its own CPU (see the '# pinned' line)" >&2
    t=$tests2 sizes=()
    if [[ $tr == udp ]] && ((!full)); then
        # UDP on loopback, within the 2-minute budget: latency, bandwidth and
        # message rate up to 1 MiB; --full runs every scenario.
        t=lat,bw,rate sizes=(--sizes 1-1M)
    fi
    "$build/ulnrun" -n 2 --timeout 600 "$build/ulnperf" --transport "$tr" --test "$t" \
        "${sizes[@]}" --csv="$out" "${opts[@]}" "${pass[@]}"
    csvs+=("$out")
    incast "$tr" "" incast
    [[ $tr == udp ]] && incast "$tr" "drop=0.05,seed=7" incast_drop5
    [[ $tr == udp ]] && ((!full)) && continue
    for n in "${load_ranks[@]}"; do
        lout="$build/ulnperf.$tr.load$n.csv"
        echo "run.sh: [$tr] load: ulnperf on $n ranks ($((n - 1)) senders into rank 0)" >&2
        "$build/ulnrun" -n "$n" --timeout 600 "$build/ulnperf" --transport "$tr" --test load \
            --csv="$lout" "${opts[@]}" "${pass[@]}"
        csvs+=("$lout")
    done
done

echo
python3 "$repo/bench/summary" "${csvs[@]}"
if [[ -n $plot ]]; then
    python3 "$repo/bench/plot" "$plot" "${csvs[@]}"
fi
echo "run.sh: CSV saved to ${csvs[*]}" >&2
