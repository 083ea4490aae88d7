#!/usr/bin/env bash
# run.sh - ulnet jobs started by Open MPI's mpirun across network-namespace
# "hosts": the ranks find each other through mpirun's PMIx server (boot mode
# "pmix"), not through ulnrun or ULN_ROOT.
#
#   run.sh it PROGRAM ARGS...       an integration test, 4 ranks on 2 hosts (2 per
#                                   host): peers on the same host over shm, the
#                                   others over udp; every rank passes, rank 0
#                                   reports boot=pmix transport=shm+udp
#   run.sh probe PMIX_PROBE ULNRUN  bootstrap facts (pmix_probe.c): one job on 2
#                                   hosts x 2, one on 4 hosts x 1 (all udp), with
#                                   the barrier's contract; separate jobs get
#                                   different job keys; ULN_JOB_KEY overrides;
#                                   the published UDP address follows its rules
#                                   (first interface, default route, ULN_UDP_IF);
#                                   without a PMIx server (ulnrun, alone) the
#                                   same program still runs
#   run.sh ulnperf ULNPERF          a short ulnperf run, one rank on each of 2
#                                   hosts: its CSV parses, transport udp, no zero
#   run.sh ulninfo ULNINFO          ulninfo under mpirun, 4 ranks on 2 hosts: one
#                                   output, showing the pmix bootstrap and peers
#   run.sh mpi MPI_P2P PROVIDER_DIR Open MPI over the libfabric provider (cm PML,
#                                   ofi MTL, provider ulnet), 4 ranks on 2 hosts:
#                                   tests/mpi/mpi_p2p, every byte checked, peers
#                                   on the same host over shm, the others udp
#   run.sh osc MPI_OSC PROVIDER_DIR MPI one-sided (tests/mpi/mpi_osc) through Open
#                                   MPI's osc rdma on its ofi BTL over the provider,
#                                   one rank on each of 2 hosts
#   run.sh nopmix PMIX_PROBE        a build without PMIx under mpirun (this host,
#                                   no namespaces): every rank is a job of one
#                                   and says why
#
# How mpirun reaches the hosts: hosts.sh makes namespaces <run>-h0.. with
# addresses 10.199.0.1.. on a private bridge. mpirun itself runs inside host 0
# and gets a hostfile of those addresses (no names: nothing to resolve, no
# /etc/hosts to touch). It recognises 10.199.0.1 as its own address and starts
# those ranks itself; for every other address it calls its "remote shell",
# rsh_agent.sh, which runs the orted command inside the namespace holding that
# address. The orteds call back to mpirun over TCP on eth0 (oob_tcp_if_include:
# the only link between the namespaces), and each serves PMIx to its ranks.
# Every host has its own TMPDIR for Open MPI's session directories, as every
# node has its own /tmp (rsh_agent.sh says why).
# Ranks are placed ppr:P:node (P per host, in rank order) and not bound to
# cores: every "host" is the same machine, and Open MPI would bind each host's
# first rank to the same core.
#
# Every mpirun is bounded by a timeout; the namespaces, and whatever still runs
# in them, are removed on exit, failure, timeout and interrupt.
# Exit 77 (ctest's "skipped") when this machine cannot make namespaces or has
# no mpirun (Debian: openmpi-bin).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_sh=$here/../netns/hosts.sh
me="mpirun/run.sh"
die() {
    echo "$me: $*" >&2
    exit 1
}
skip() {
    echo "$me: $*: skipped"
    exit 77
}

(($# >= 2)) || die "usage: run.sh it PROGRAM ARGS... | probe PMIX_PROBE ULNRUN | ulnperf ULNPERF |
       mpi MPI_P2P PROVIDER_DIR | osc MPI_OSC PROVIDER_DIR | nopmix PMIX_PROBE"
what=$1
shift
[[ $what == nopmix ]] || "$hosts_sh" probe >/dev/null 2>&1 || skip "no network namespaces here"
command -v mpirun >/dev/null 2>&1 || skip "no mpirun (Debian: openmpi-bin)"
# A launcher's variables from outside would pick another bootstrap.
unset ULN_ROOT ULN_BOOT_FD ULN_RANK ULN_SIZE ULN_JOB_KEY ULN_TRANSPORT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks built with ASan: libpmix's own leftovers are not ulnet's leaks. The
# suppression names the PMIx_Init step that makes them, which only a full
# stack shows (libpmix has no frame pointers for the fast unwinder to follow).
export LSAN_OPTIONS=suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0

tmp=$(mktemp -d)
# Every host's own TMPDIR is under it (rsh_agent.sh): Open MPI's session
# directories go there and are removed with it.
export ULNTEST_MPIRUN_TMP=$tmp
mpirun_pid=""
cleanup() {
    [[ -z $mpirun_pid ]] || kill -KILL "$mpirun_pid" 2>/dev/null || true
    for p in ${svc_pids[@]+"${svc_pids[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
    [[ -z ${ULNTEST_NETNS:-} ]] || "$hosts_sh" down >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hosts_up() {
    set -a
    eval "$("$hosts_sh" up "$1")"
    set +a
}

# One ulnetd ($ULNTEST_SVC) per host of N, on its host's address; stopped
# at exit with the hosts.
svc_pids=()
svc_up() {
    local h v
    for ((h = 0; h < $1; h++)); do
        v=ULNTEST_HOST_$h
        "$hosts_sh" exec "h$h" "$ULNTEST_SVC" --foreground --addr "${!v}" 2>"$tmp/svc$h.log" &
        svc_pids+=($!)
    done
    for ((h = 0; h < $1; h++)); do
        for _ in $(seq 100); do
            "$hosts_sh" exec "h$h" "$ULNTEST_SVC" --status >/dev/null 2>&1 && break
            sleep 0.05
        done
    done
}
# Every service carried messages (the ranks went through them, not around).
svc_forwarded() {
    local h st
    for ((h = 0; h < $1; h++)); do
        st=$("$hosts_sh" exec "h$h" "$ULNTEST_SVC" --status)
        grep -q "forwarded [1-9]" <<<"$st" || die "host $h's service forwarded nothing: $st"
    done
}

# mpi OUT TIMEOUT "HOSTS" PER_HOST [mpirun options] -- PROGRAM ARGS...
# One mpirun job from host 0 on the hosts listed (indices), PER_HOST ranks on
# each; stdout to OUT, stderr to OUT.err, both shown afterwards. Returns
# mpirun's status (124: timed out).
mpi() {
    local out=$1 t=$2 list=$3 per=$4 k n=0
    shift 4
    : >"$tmp/hostfile"
    for k in $list; do
        local a=ULNTEST_HOST_$k
        echo "${!a} slots=$per" >>"$tmp/hostfile"
        n=$((n + per))
    done
    local opts=()
    while [[ $1 != -- ]]; do opts+=("$1"); shift; done
    shift
    local st=0
    # In the background, so a signal to this script is handled at once.
    mkdir -p "$tmp/h0"
    TMPDIR=$tmp/h0 ip netns exec "$ULNTEST_HOST_0_NS" timeout -k 5 "$t" mpirun -np "$n" \
        --hostfile "$tmp/hostfile" --map-by "ppr:$per:node" --bind-to none \
        --mca plm_rsh_agent "$here/rsh_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include eth0 "${opts[@]}" "$@" >"$out" 2>"$out.err" &
    mpirun_pid=$!
    wait "$mpirun_pid" || st=$?
    mpirun_pid=""
    echo "--- mpirun -np $n on hosts $list ($per per host): $* -> status $st"
    cat "$out"
    [[ ! -s $out.err ]] || { echo "--- its stderr:"; cat "$out.err"; }
    if ((st)); then
        [[ $st != 124 ]] || echo "$me: mpirun still running after $t s: ended" >&2
        # What is left on each host (an orted that never called back, a rank
        # stuck in uln_open) says where the job broke.
        for ((k = 0; k < ULNTEST_HOSTS; k++)); do
            local ns=ULNTEST_HOST_${k}_NS pids
            pids=$(ip netns pids "${!ns}" 2>/dev/null | tr '\n' ',')
            [[ -z $pids ]] || { echo "--- left on host $k:"; ps -o pid=,args= -p "${pids%,}" | cut -c1-160; }
        done
    fi
    return "$st"
}

# Every rank of a job ran its checks and none failed: N "rankK: X passed, 0
# failed" lines, one per rank K.
all_passed() {
    local out=$1 n=$2 k
    for ((k = 0; k < n; k++)); do
        grep -Eq "^rank$k: [0-9]+ passed, 0 failed$" "$out" || die "rank $k did not pass (see above)"
    done
}

# The probe lines' field F, one per rank, sorted and made unique.
probe_field() { sed -n "s/^probe: .* $2=\([^ ]*\).*/\1/p" "$1" | sort -u; }

# Give host K a default route that does not lead to the other hosts: a second
# interface, gw0 (one end of a veth pair inside the host, nothing behind it),
# 10.200.0.(K+1)/24, and the default route via 10.200.0.254 on it. Nothing is
# ever sent that way: the hosts' own subnet is on eth0.
fake_default_route() {
    local ns=ULNTEST_HOST_${1}_NS
    ip -n "${!ns}" link add gw0 type veth peer name gw1
    ip -n "${!ns}" addr add "10.200.0.$(($1 + 1))/24" dev gw0
    ip -n "${!ns}" link set gw1 up
    ip -n "${!ns}" link set gw0 up
    ip -n "${!ns}" route add default via 10.200.0.254 dev gw0
}

case $what in
mpi)
    prog=$1 provdir=$2
    [[ -x $prog ]] || skip "no $prog (built only where mpicc is found)"
    # ULN_SECURE, when set, goes to every rank (mpi.p2p_hosts_encrypt): the
    # names Open MPI swaps then carry the public keys (64 bytes, names.h).
    sec=()
    [[ -z ${ULN_SECURE:-} ]] || sec=(-x ULN_SECURE)
    hosts_up 2
    # ULNTEST_SVC=ULNETD (mpi.p2p_hosts_svc): one ulnetd per host, the ranks
    # on the other host reached through the services (the provider and Open
    # MPI unchanged), those on their own host over shm.
    if [[ -n ${ULNTEST_SVC:-} ]]; then
        svc_up 2
        sec+=(-x ULN_SERVICE=required -x ULN_TRANSPORT=svc -x ULN_SERVICE_LOCAL=shm)
    fi
    mpi "$tmp/mpi.out" ${ULNTEST_MPI_TIMEOUT:-240} "0 1" 2 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ulnet \
        -x FI_PROVIDER_PATH="$provdir" -x MPI_P2P_VERBOSE -x ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "${sec[@]}" -- "$prog"
    grep -q "^mpi_p2p: 4 ranks, ok$" "$tmp/mpi.out" || die "mpi_p2p did not pass on 2 hosts"
    [[ -z ${ULNTEST_SVC:-} ]] || svc_forwarded 2
    ;;

osc)
    # One rank per host: with two, Open MPI's osc rdma splits the job by node
    # (MPI_Comm_split_type SHARED), which goes wrong where the namespace hosts
    # share one kernel and host name - the split crashes under ob1 and tcp too.
    prog=$1 provdir=$2
    [[ -x $prog ]] || skip "no $prog (built only where mpicc is found)"
    hosts_up 2
    mpi "$tmp/osc.out" ${ULNTEST_MPI_TIMEOUT:-240} "0 1" 1 --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include ulnet --mca osc rdma --mca btl self,ofi \
        --mca btl_ofi_provider_include ulnet -x FI_PROVIDER_PATH="$provdir" \
        -x ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" -- "$prog"
    grep -q "^mpi_osc: 2 ranks, ok$" "$tmp/osc.out" || die "mpi_osc did not pass on 2 hosts"
    ;;

it)
    hosts_up 2
    mpi "$tmp/it.out" 240 "0 1" 2 -x ULNTEST_IT_EXPECT_UDP_PEERS=2 -x ULNTEST_IT_EXPECT_BOOT=pmix -- "$@"
    all_passed "$tmp/it.out" 4
    grep -Eq "^rank0: size=4 boot=pmix transport=shm\+udp " "$tmp/it.out" ||
        die "rank 0 does not report size=4 boot=pmix transport=shm+udp"
    ;;

probe)
    probe=$1 ulnrun=$2
    hosts_up 4
    # A: 2 hosts x 2: shm and udp peers; the barrier's contract. No default
    # route: each publishes its first interface's address, eth0's.
    mpi "$tmp/a.out" 90 "0 1" 2 -x ULNTEST_IT_EXPECT_UDP_PEERS=2 -x ULNTEST_IT_EXPECT_BOOT=pmix \
        -- "$probe" --barrier
    all_passed "$tmp/a.out" 4
    want="^probe: .* boot=pmix .* transport=shm\+udp udp_peers=2 udp_addr=10\.199\.0\.[12] "
    [[ $(grep -Ec "$want" "$tmp/a.out") == 4 ]] ||
        die "job A: not every rank reports boot=pmix, shm+udp, 2 udp peers, its eth0 address"
    key_a=$(probe_field "$tmp/a.out" key)
    [[ $key_a =~ ^[0-9a-f]{16}$ ]] || die "job A: its ranks have different keys: $key_a"
    # B: 4 hosts x 1: every peer over udp, a separate job, so another key.
    mpi "$tmp/b.out" 90 "0 1 2 3" 1 -x ULNTEST_IT_EXPECT_UDP_PEERS=3 -x ULNTEST_IT_EXPECT_BOOT=pmix \
        -- "$probe" --barrier
    all_passed "$tmp/b.out" 4
    want="^probe: .* boot=pmix .* transport=udp udp_peers=3 udp_addr=10\.199\.0\.[1-4] "
    [[ $(grep -Ec "$want" "$tmp/b.out") == 4 ]] ||
        die "job B: not every rank reports boot=pmix, all 3 peers over udp"
    key_b=$(probe_field "$tmp/b.out" key)
    [[ $key_b =~ ^[0-9a-f]{16}$ ]] || die "job B: its ranks have different keys: $key_b"
    [[ $key_a != "$key_b" ]] || die "two separate mpirun jobs got the same job key $key_a"
    # Hosts 2 and 3 get a default route away from the others.
    fake_default_route 2
    fake_default_route 3
    # C: ULN_JOB_KEY wins over the namespace's key (the probe checks it too);
    # ULN_UDP_IF=eth0 wins over the default route, else the job could not run.
    mpi "$tmp/c.out" 60 "2 3" 1 -x ULN_JOB_KEY=00c0ffee0ddba11 -x ULNTEST_IT_EXPECT_UDP_PEERS=1 \
        -x ULNTEST_IT_EXPECT_BOOT=pmix -x ULN_UDP_IF=eth0 -- "$probe"
    all_passed "$tmp/c.out" 2
    [[ $(probe_field "$tmp/c.out" key) == 000c0ffee0ddba11 ]] || die "job C: ULN_JOB_KEY ignored"
    [[ $(probe_field "$tmp/c.out" udp_addr | tr '\n' ' ') == "10.199.0.3 10.199.0.4 " ]] ||
        die "job C: ULN_UDP_IF=eth0 did not choose eth0's addresses"
    echo "job keys: A $key_a, B $key_b, C (ULN_JOB_KEY) 000c0ffee0ddba11"
    # D: 2 ranks on host 2 over udp: without ULN_UDP_IF they publish the
    # default route's source address.
    mpi "$tmp/d.out" 60 "2" 2 -x ULN_TRANSPORT=udp -x ULNTEST_IT_EXPECT_BOOT=pmix -- "$probe"
    all_passed "$tmp/d.out" 2
    [[ $(probe_field "$tmp/d.out" udp_addr) == 10.200.0.3 ]] ||
        die "job D: not the default route's source address: $(probe_field "$tmp/d.out" udp_addr)"
    # Without a PMIx server the same build runs as before: ulnrun's board...
    ULNTEST_IT_EXPECT_BOOT=ulnrun timeout 60 "$ulnrun" -n 2 --timeout 50 "$probe" --barrier \
        >"$tmp/u.out"
    cat "$tmp/u.out"
    all_passed "$tmp/u.out" 2
    # ...and a job of one.
    ULNTEST_IT_EXPECT_BOOT=single ULN_RANK=0 timeout 30 "$probe" >"$tmp/e.out"
    cat "$tmp/e.out"
    all_passed "$tmp/e.out" 1
    ;;

ulnperf)
    ulnperf=$1
    hosts_up 2
    mpi "$tmp/perf.out" 150 "0 1" 1 -- "$ulnperf" --quick --test lat,bw --op nap,put,get \
        --sizes 8-65536 --csv
    python3 - "$tmp/perf.out" <<'PY'
import csv, math, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
assert rows and rows[0] == ["transport", "op", "test", "size", "value", "unit"], rows[:1]
body = [r for r in rows[1:] if r[0] != "platform"]  # platform: this machine's cache-line floor
assert body, "no measurements"
for r in body:
    assert len(r) == 6, r
    assert r[0] == "udp", ("not over udp", r)
    v = float(r[4])
    assert math.isfinite(v) and v > 0 and int(r[3]) > 0, ("a zero or bad figure", r)
seen = {(r[1], r[2]) for r in body}
for op in ("nap", "put", "get"):
    for t in ("lat", "bw"):
        assert (op, t) in seen, ("missing", op, t, sorted(seen))
bw = [float(r[4]) for r in body if r[2] == "bw" and r[5] == "GB/s"]
assert bw, "no bandwidth rows"
print("ulnperf over mpirun: %d rows, transport udp, bandwidth up to %.3f GB/s" % (len(body), max(bw)))
PY
    ;;

ulninfo)
    # ulninfo under mpirun: rank 0 alone prints, and what it shows is the job's
    # (PMIx bootstrap, 4 ranks on 2 hosts: 1 peer over shm, 2 over udp).
    hosts_up 2
    mpi "$tmp/info.out" 120 "0 1" 2 -- "$1"
    [[ $(grep -c '^# ulnet ' "$tmp/info.out") == 1 ]] || die "not exactly one rank printed"
    grep -q '^in use: *pmix$' "$tmp/info.out" || die "ulninfo does not show the pmix bootstrap"
    grep -q '^PMIx bootstrap: built in' "$tmp/info.out" || die "ulninfo says PMIx is absent"
    grep -q '^ranks: *4 ' "$tmp/info.out" || die "ulninfo does not show the job's 4 ranks"
    grep -q '^peers: *2 over udp, 1 over shm (transport shm+udp)' "$tmp/info.out" ||
        die "ulninfo does not show rank 0's peers per transport"
    ;;

nopmix)
    # ULN_RANK=0: the rank each process will be, alone in its job.
    timeout -k 5 60 mpirun -np 2 --bind-to none --mca orte_tmpdir_base "$tmp" -x ULN_RANK=0 \
        -x ULNTEST_IT_EXPECT_BOOT=single "$1" >"$tmp/n.out" 2>"$tmp/n.err" || {
        cat "$tmp/n.out" "$tmp/n.err"
        die "mpirun failed"
    }
    cat "$tmp/n.out" "$tmp/n.err"
    [[ $(grep -c "^probe: rank=0 size=1 boot=single .* pmix_built=0$" "$tmp/n.out") == 2 ]] ||
        die "not both processes ran as a job of one of a build without PMIx"
    [[ $(grep -c "^rank0: [0-9]* passed, 0 failed$" "$tmp/n.out") == 2 ]] || die "a process failed"
    [[ $(grep -c "started by a PMIx server, but this ulnet was built without PMIx" \
        "$tmp/n.err") == 2 ]] || die "the processes did not say they ignore the PMIx server"
    ;;

*) die "unknown case '$what' (it, probe, ulnperf, ulninfo, nopmix)" ;;
esac
echo "$me $what: all checks passed"
