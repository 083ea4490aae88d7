#!/usr/bin/env bash
# hosts.sh - make N test "hosts" as network namespaces joined by a bridge, for
# running ulnet ranks on separate network stacks on one machine.
#
#   hosts.sh up N [--rate 1gbit] [--drop-pct P --drop-on hostK [--drop-dir in|out|both]]
#                 [--subnet 10.199.0] [--run NAME] [--owner PID]
#       Prints, on stdout and nothing else, lines to eval:
#         ULNTEST_NETNS=<run>  ULNTEST_HOSTS=N  ULNTEST_HOST_<k>=<address>  ULNTEST_HOST_<k>_NS=<namespace>
#       e.g.  set -a; eval "$(hosts.sh up 2)"; set +a   (exported, so exec
#             and down find the run)
#   hosts.sh exec [--run NAME] hostK CMD...   run CMD inside host K (hostK, hK or K)
#   hosts.sh down [--run NAME]      remove everything the run made
#   hosts.sh list                   runs present on this machine
#   hosts.sh reap                   remove the runs whose owner is gone
#   hosts.sh probe                  exit 0 if this machine can make namespaces
#
# The run is named by --run, else $ULNTEST_NETNS, else (up) a fresh "uln<4 hex>".
# Its namespaces are <run>-h0 .. <run>-h(N-1) and <run>-br, so parallel runs
# and leftovers of dead ones never collide.
#
# A run's owner is the process that made it (--owner, default: the one that
# ran "hosts.sh up", i.e. the script whose $(...) it is), recorded with its
# start time in the alias of the bridge namespace's br0, so the record goes
# with the run. A test killed with SIGKILL (ctest's timeout) cannot remove its
# run; "hosts.sh reap" (the ctest fixture netns.reap, after the tests that
# make hosts) removes every run whose owner no longer lives, and only those.
# "down" and "reap" end every process in a run (SIGTERM, SIGKILL 5 s later)
# before they remove its namespaces, so no service, rank, veth or XDP
# program of it stays behind.
#
# Layout: every host namespace has eth0 (veth) whose peer hK sits in the
# bridge namespace <run>-br, enslaved to br0. Both veth ends are created
# directly inside their namespaces, so nothing of a run ever appears in the
# initial namespace, and all traffic stays between namespaces this script
# made: the hosts' 10.x addresses exist only there. Neighbour entries are
# static, so no ARP is needed (or lost to the drop rule, or delays a first
# packet).
#   --rate R       tc tbf on each host's eth0 (egress): the host's link speed
#   --drop-pct P   an nft rule dropping P % (numgen random) of the IP packets
#                  host K receives (in), sends (out) or both (default); it sits
#                  on the bridge end of host K's veth, in table netdev
#                  ulnet_drop of <run>-br (chains drop_in, drop_out, with
#                  counters). Segmentation offloads are turned off on every
#                  veth of such a run, so each datagram is one packet there.
#
# Needs root, iproute2 (ip, tc) and, for --drop-pct, nftables and ethtool;
# installs the missing ones with apt-get on Debian.
set -euo pipefail

me=$(basename "$0")
die() {
    echo "$me: $*" >&2
    exit 1
}
log() { echo "$me: $*" >&2; }

need_root() { [[ $(id -u) == 0 ]] || die "needs root (network namespaces)"; }

# Install a Debian package if a command it provides is missing.
need_cmd() {
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || die "'$cmd' missing; install $pkg"
    log "installing $pkg (for $cmd)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "$pkg" >/dev/null
    command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' still missing after installing $pkg"
}

run_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${1}-(h[0-9]+|br)$" || true; }

# The processes in a run's namespaces.
run_pids() {
    local ns
    for ns in $(run_ns "$1"); do ip netns pids "$ns" 2>/dev/null || true; done
}

# End every process of a run: SIGTERM (and SIGCONT, for a stopped one), and
# SIGKILL to those still there 5 s later. A process left in a namespace keeps
# it, its veth and the XDP program on it alive after "ip netns del".
end_processes() {
    local run=$1 pids _
    mapfile -t pids < <(run_pids "$run")
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    kill -CONT "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        [[ -n $(run_pids "$run") ]] || return 0
        sleep 0.1
    done
    mapfile -t pids < <(run_pids "$run")
    ((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        [[ -n $(run_pids "$run") ]] || return 0
        sleep 0.1
    done
}

# Remove every namespace of a run; veths, qdiscs and nft tables live inside
# them and go with them. Hosts first, so their veth peers leave the bridge
# before the bridge namespace goes.
teardown() {
    local run=$1 ns
    end_processes "$run"
    for ns in $(run_ns "$run" | sort -r); do
        ip netns del "$ns" 2>/dev/null || true
    done
    [[ -z $(run_ns "$run") ]]
}

# A process's start time (clock ticks since boot): with its pid, it names
# the process, a pid being reused.
start_time() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) } # after the command's name, which may hold spaces
    awk '{print $20}' <<<"$stat"
}

# The owner a run records: "PID START", or nothing (a run made before runs
# recorded one: never reaped).
run_owner() {
    ip -n "$1-br" -o link show br0 2>/dev/null | sed -n 's/.* alias ulnet-hosts owner \([0-9]* [0-9]*\).*/\1/p'
}

host_index() {
    local h=${1#host}
    h=${h#h}
    [[ $h =~ ^[0-9]+$ ]] || die "'$1' is not a host (hostK, hK or K)"
    echo "$h"
}

cmd_up() {
    local n="" rate="" drop_pct="" drop_on="" drop_dir=both subnet=10.199.0 burst="" owner=$PPID
    run=${ULNTEST_NETNS:-}
    while (($#)); do
        case $1 in
        --rate) rate=$2; shift 2 ;;
        --burst) burst=$2; shift 2 ;;
        --drop-pct) drop_pct=$2; shift 2 ;;
        --drop-on) drop_on=$(host_index "$2"); shift 2 ;;
        --drop-dir) drop_dir=$2; shift 2 ;;
        --subnet) subnet=$2; shift 2 ;;
        --run) run=$2; shift 2 ;;
        --owner) owner=$2; shift 2 ;;
        -*) die "unknown option $1" ;;
        *) [[ -z $n ]] || die "one host count only"; n=$1; shift ;;
        esac
    done
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 200)); then die "up N: N hosts, 1..200"; fi
    if ! [[ $subnet =~ ^10\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
        ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255)); then
        die "--subnet: 10.x.y (the hosts get .1, .2, ...)"
    fi
    if [[ -n $drop_pct ]]; then
        if ! [[ $drop_pct =~ ^[0-9]+$ ]] || ((drop_pct > 100)); then die "--drop-pct: 0..100"; fi
        [[ -n $drop_on ]] || die "--drop-pct needs --drop-on hostK"
        ((drop_on < n)) || die "--drop-on: no host $drop_on of $n"
        [[ $drop_dir =~ ^(in|out|both)$ ]] || die "--drop-dir: in, out or both"
    fi
    local owner_start
    owner_start=$(start_time "$owner") || die "--owner $owner: no such process"
    [[ -z $rate || $rate =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die "--rate: e.g. 1gbit"
    need_root
    need_cmd ip iproute2
    [[ -z $rate ]] || need_cmd tc iproute2
    [[ -z $drop_pct ]] || need_cmd nft nftables
    [[ -z $drop_pct ]] || need_cmd ethtool ethtool

    if [[ -z $run ]]; then
        run=uln$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
        while [[ -n $(run_ns "$run") ]]; do run=uln$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n'); done
    fi
    [[ $run =~ ^[A-Za-z0-9_]{1,20}$ ]] || die "--run: letters, digits, _ (at most 20)"
    [[ -z $(run_ns "$run") ]] || die "run $run exists already (hosts.sh down --run $run)"

    # Half-made runs are removed whatever stops us.
    trap 'rc=$?; if ((rc)); then log "up failed, removing run $run"; teardown "$run" || true; fi' EXIT
    trap 'exit 130' INT TERM

    local br=$run-br k ns
    ip netns add "$br"
    ip -n "$br" link set lo up
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 alias "ulnet-hosts owner $owner $owner_start"
    # No IPv6 chatter (router solicitations, MLD) on the test link.
    ip netns exec "$br" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip netns exec "$br" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    ip -n "$br" link set br0 up
    local -a macs=()
    for ((k = 0; k < n; k++)); do
        ns=$run-h$k
        ip netns add "$ns"
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
        ip -n "$ns" link set lo up
        ip -n "$ns" link add eth0 type veth peer name "h$k" netns "$br"
        ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$br" link set "h$k" master br0
        ip -n "$br" link set "h$k" up
        macs[k]=$(ip -n "$ns" -o link show eth0 | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
        if [[ -n $rate ]]; then
            # burst: at least one 64 KiB GSO skb, so tbf never has to split one
            ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
                burst "${burst:-128kb}" latency 20ms
        fi
    done
    local j
    for ((k = 0; k < n; k++)); do
        for ((j = 0; j < n; j++)); do
            ((j == k)) || ip -n "$run-h$k" neigh replace "$subnet.$((j + 1))" \
                lladdr "${macs[j]}" dev eth0 nud permanent
        done
    done
    if [[ -n $drop_pct ]]; then
        # A veth passes GSO/TSO super-packets (up to 64 KiB, dozens of
        # datagrams) as one skb, so a rule would drop whole bursts. A NIC cuts
        # them up before the wire; do the same on every veth end, so the rule
        # sees one datagram per packet, as on a real lossy link.
        for ((k = 0; k < n; k++)); do
            ip netns exec "$run-h$k" ethtool -K eth0 tso off gso off tx-udp-segmentation off >/dev/null
            ip netns exec "$br" ethtool -K "h$k" tso off gso off tx-udp-segmentation off >/dev/null
        done
        # The rule sits on the bridge end of host K's veth: its ingress is
        # what host K sends, its egress what host K receives.
        local rule="meta protocol { ip, ip6 } numgen random mod 100 < $drop_pct counter drop"
        local chains=""
        [[ $drop_dir == in ]] || chains+="chain drop_out { type filter hook ingress device \"h$drop_on\" priority 0; $rule; }; "
        [[ $drop_dir == out ]] || chains+="chain drop_in { type filter hook egress device \"h$drop_on\" priority 0; $rule; }; "
        ip netns exec "$br" nft "add table netdev ulnet_drop; table netdev ulnet_drop { $chains}"
    fi

    trap - EXIT INT TERM
    log "run $run: $n hosts on $subnet.0/24${rate:+, tbf $rate}${drop_pct:+, dropping $drop_pct % on host $drop_on ($drop_dir)}"
    echo "ULNTEST_NETNS=$run"
    echo "ULNTEST_HOSTS=$n"
    for ((k = 0; k < n; k++)); do
        echo "ULNTEST_HOST_$k=$subnet.$((k + 1))"
        echo "ULNTEST_HOST_${k}_NS=$run-h$k"
    done
}

cmd_down() {
    run=${ULNTEST_NETNS:-}
    while (($#)); do
        case $1 in
        --run) run=$2; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    [[ -n $run ]] || die "down: which run? (--run NAME or ULNTEST_NETNS; 'hosts.sh list' shows them)"
    need_root
    teardown "$run" || die "could not remove all of run $run: $(run_ns "$run" | tr '\n' ' ')"
    log "run $run removed"
}

# Remove the runs whose owner no longer lives (by pid and start time).
cmd_reap() {
    local r owner n=0
    [[ $(id -u) == 0 ]] || { log "not root: nothing reaped"; return 0; }
    for r in $(cmd_list); do
        owner=$(run_owner "$r")
        [[ -n $owner ]] || continue
        [[ $(start_time "${owner% *}" || true) != "${owner#* }" ]] || continue
        if teardown "$r"; then
            log "run $r removed: its owner (pid ${owner% *}) is gone"
            n=$((n + 1))
        else
            log "run $r: its owner (pid ${owner% *}) is gone, but could not remove $(run_ns "$r" | tr '\n' ' ')"
            return 1
        fi
    done
    log "$n runs reaped"
}

cmd_exec() {
    (($# >= 2)) || die "exec hostK CMD..."
    local k
    k=$(host_index "$1")
    shift
    [[ -n $run ]] || die "exec: which run? (--run NAME or ULNTEST_NETNS)"
    ip netns list | awk '{print $1}' | grep -x "$run-h$k" >/dev/null || die "no host $k in run $run"
    exec ip netns exec "$run-h$k" "$@"
}

cmd_list() {
    ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^\(.*\)-br$/\1/p'
}

cmd_probe() {
    [[ $(id -u) == 0 ]] || { echo "not root"; exit 1; }
    command -v ip >/dev/null 2>&1 || { echo "no ip command (iproute2)"; exit 1; }
    local p=ulnprobe$$
    if ! ip netns add "$p" 2>/dev/null; then
        echo "ip netns add is not permitted here"
        exit 1
    fi
    local ok=1
    ip -n "$p" link add probe0 type veth peer name probe1 2>/dev/null || ok=0
    ip netns del "$p"
    ((ok)) || { echo "no veth support"; exit 1; }
}

run=${ULNTEST_NETNS:-}
(($#)) || die "usage: $me up N [options] | exec hostK CMD... | down | list | reap | probe"
verb=$1
shift
if [[ $verb == exec && ${1:-} == --run ]]; then
    run=$2
    shift 2
fi
case $verb in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
exec) cmd_exec "$@" ;;
list) cmd_list ;;
reap) cmd_reap ;;
probe) cmd_probe ;;
*) die "unknown command '$verb' (up, exec, down, list, reap, probe)" ;;
esac
