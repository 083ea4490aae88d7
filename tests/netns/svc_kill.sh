#!/usr/bin/env bash
# netns.svc_kill_<hook>: kill -9 of a process and of a service mid-stream on
# the services' AF_XDP link (ulnetd --link xdp --xdp-hook HOOK), and nothing
# left behind. Two namespace hosts, one ulnetd each, four ranks (rank r on
# host r % 2) running tests/svc/kill_stream.c: PUT, GET, fetch-add and NAP,
# all pairs, data checked, through the services.
#   1. A clean job (kill_stream rounds).
#   2. Rank 3 (host 1) killed with -9 mid-stream: every other rank's
#      operations on it end -ECONNRESET, they go on with each other, exit 0.
#   3. Host 0's service killed with -9 mid-stream: every operation of ranks
#      0 and 2 ends -ECONNRESET, so do ranks 1 and 3's on them (the wire's
#      silence), never a hang; 1 and 3 go on with each other. Then a context
#      on host 0 with ULN_SERVICE=auto runs in direct mode (ulninfo says so).
# While they run, each rank holds the UDP sockets of its own its service
# bound for it (one per endpoint index). After each: no rank process left, every service
# that lives holds no memfd (mapped or open), no unix socket and no UDP
# socket beyond its own at start (a killed rank's socket closed with it),
# nothing pinned in a bpffs. After 3, host 0 has no process and
# no unix socket, and no XDP program on eth0 (attached through netlink, the
# killed service's would outlive it: its reaper, tools/ulnetd/reaper.c,
# detached it). After both services stop: no XDP program on either
# interface, no process.
# HOOK udp: the services on the udp link instead (the XDP checks left out).
# Usage: svc_kill.sh ULNETD KILL_STREAM ULNINFO HOOK|udp
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 ulninfo=$3 hook=$4
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "svc_kill.sh: no network namespaces here: skipped"; exit 77; }
me=netns.svc_kill_$hook
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"
tmp=$(mktemp -d)
svc_logs=$tmp
declare -a pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do [[ -z $p ]] || kill -KILL "$p" 2>/dev/null || true; done
    hosts_end
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "netns.svc_kill_$hook: $* (at ${SECONDS} s)" >&2
    for f in "$tmp"/*.log "$tmp"/*.out; do [[ -f $f ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    exit 1
}
hosts_up 2
# (Not for what runs in the background: $! must be the process itself.)
on() { local h=$1; shift; "$here/hosts.sh" exec "h$h" "$@"; }
ns() { local v=ULNTEST_HOST_${1}_NS; echo "${!v}"; }

link=(--link xdp --xdp-hook "$hook") link_line="^link: xdp $hook,"
[[ $hook != udp ]] || link=(--link udp) link_line="^link: udp "
svc_up() { # host: a service on the link (and hook) asked for
    svc_start --hosts "$1" --expect "$link_line" "$ulnetd" "${link[@]}" ||
        fail "host $1: the service is not on ${link[*]}"
}
# The unix sockets in host h's namespace (the kernel's list is per namespace).
unix_sockets() { on "$1" tail -n +2 /proc/net/unix | wc -l; }
# ... and its UDP sockets (the services' wire, the ranks' own sockets).
udp_sockets() { on "$1" tail -n +2 /proc/net/udp | wc -l; }
# A process's memfds: open, or mapped.
memfds() {
    local f n=0
    for f in "/proc/$1/fd/"*; do [[ $(readlink "$f" 2>/dev/null) != /memfd:* ]] || n=$((n + 1)); done
    echo "$n"
    { grep -c 'memfd:' "/proc/$1/maps" 2>/dev/null || true; } | head -1
}
xdp_prog() {
    [[ $hook != udp ]] || return 0
    on "$1" ip -d link show eth0 2>/dev/null | tr '\n' ' ' | grep -o 'prog/xdp[^ ]* id [0-9]*.*name [a-z_]*' || true
}

port=$((20000 + RANDOM % 20000))
# Nothing of the job left on host h: no process but its service, the
# service attached to none and holding no memfd, its unix sockets those it
# had at start.
# Host h's processes but its service and the service's reaper (reaper.c).
strays() {
    local p
    for p in $(ip netns pids "$(ns "$1")"); do
        [[ $p == "${svc_pid[$1]:-none}" ]] && continue
        [[ -n ${svc_pid[$1]:-} && $(ps -o ppid= -p "$p" | tr -d ' ') == "${svc_pid[$1]}" &&
            $(cat "/proc/$p/comm" 2>/dev/null) == ulnetd-reaper ]] && continue
        echo -n "$p "
    done
}
left_alone() {
    local h=$1 what=$2 p s m
    for _ in $(seq 40); do [[ -z $(strays "$h") ]] && break; sleep 0.05; done
    p=$(strays "$h")
    [[ -z $p ]] || fail "$what: host $h still runs $p: $(ps -o pid,args -p "${p// /,}" 2>/dev/null || true)"
    if [[ -n ${svc_pid[h]:-} ]]; then
        s=$(svc_status "$h" 2>&1)
        grep -q "^processes: 0 attached" <<<"$s" || fail "$what: host $h's service still has processes: $s"
        # (--status just now: its connection may take a moment to go)
        for _ in $(seq 40); do (($(unix_sockets "$h") <= base_unix[h])) && break; sleep 0.05; done
        (($(unix_sockets "$h") <= base_unix[h])) ||
            fail "$what: host $h has $(unix_sockets "$h") unix sockets, ${base_unix[h]} with its service alone"
        m=$(memfds "${svc_pid[h]}" | tr '\n' ' ')
        [[ $m == "0 0 " ]] || fail "$what: host $h's service holds memfds (open, mapped): $m"
        (($(udp_sockets "$h") == base_udp[h])) ||
            fail "$what: host $h has $(udp_sockets "$h") UDP sockets, ${base_udp[h]} with its service alone: $(on "$h" cat /proc/net/udp)"
    else
        [[ $(udp_sockets "$h") == 0 ]] || fail "$what: host $h has UDP sockets and no service: $(on "$h" cat /proc/net/udp)"
        [[ $(unix_sockets "$h") == 0 ]] || fail "$what: host $h has unix sockets and no service: $(on "$h" cat /proc/net/unix)"
    fi
    # (ulnet's shared memory is memfds only, which live as long as a process
    # holds them: the ranks are gone, the services are checked above. /dev/shm
    # is the machine's, shared with whatever else runs: not looked at.)
    # Pinned programs or maps: in any bpffs the host's namespace sees.
    # shellcheck disable=SC2016 # awk's own $3
    for m in $(on "$h" awk '$3 == "bpf" {print $2}' /proc/mounts); do
        [[ -z $(on "$h" find "$m" -iname '*uln*' -o -iname "dispatch-*") ]] || fail "$what: pinned in $m"
    done
}

svc_up "0 1"
# The service's own unix sockets at rest: the least of a few looks, as a
# --status connection of svc_up's may not be closed yet at the first.
base_sockets() {
    local n m _
    n=$(unix_sockets "$1")
    for _ in $(seq 10); do
        sleep 0.05
        m=$(unix_sockets "$1")
        ((m >= n)) || n=$m
    done
    echo "$n"
}
declare -a base_unix=("$(base_sockets 0)" "$(base_sockets 1)")
declare -a base_udp=("$(udp_sockets 0)" "$(udp_sockets 1)")
for h in 0 1; do
    m=$(memfds "${svc_pid[h]}" | tr '\n' ' ')
    [[ $m == "0 0 " ]] || fail "host $h's service holds memfds before any process: $m"
    [[ $hook == udp || -n $(xdp_prog "$h") ]] || fail "host $h: no XDP program on eth0 under the service"
    [[ $hook == udp || $(ps -o comm= --ppid "${svc_pid[h]}") == ulnetd-reaper ]] ||
        fail "host $h: the service has no reaper"
done

# 1. A clean job.
want=(0 0 0 0)
svc_job "$prog" rounds 100
svc_job_wait "clean job" 120
for r in 0 1 2 3; do grep -q "rank $r: ok" "$tmp/r$r.out" || fail "clean job: rank $r"; done
left_alone 0 "after a clean job"
left_alone 1 "after a clean job"

# 2. A process killed mid-stream.
want=(0 0 0 137)
svc_job "$prog" until 2 -1 3
svc_job_streaming "process kill"
# Each rank's sockets of its own (one per endpoint index): two ranks per
# host, each in its service's list, every one open on the host.
for h in 0 1; do
    st=$(on "$h" "$ulnetd" --status 2>&1)
    n=$(grep -c " sockets [1-9][0-9]* from port [1-9]" <<<"$st" || true)
    ((n == 2)) || fail "ranks streaming: host $h's service lists $n ranks with sockets of their own, not 2"
    k=$(grep -o " sockets [0-9]* from port" <<<"$st" | awk '{s += $2} END {print s}')
    (($(udp_sockets "$h") == base_udp[h] + k)) ||
        fail "ranks streaming: host $h has $(udp_sockets "$h") UDP sockets, not ${base_udp[h]} + the ranks' $k"
done
kill -KILL "${pids[3]}"
svc_job_wait "rank 3 killed" 120
for r in 0 1 2; do
    grep -q "rank $r: peer 3 reset" "$tmp/r$r.out" || fail "rank 3 killed: rank $r saw no reset for it"
    grep -q "rank $r: ok" "$tmp/r$r.out" || fail "rank 3 killed: rank $r did not go on"
done
left_alone 0 "after kill -9 of a process"
left_alone 1 "after kill -9 of a process"

# 3. A service killed mid-stream.
want=(0 0 0 0)
svc_job "$prog" until 2 0
svc_job_streaming "service kill"
killed_at=$SECONDS
kill -KILL "${svc_pid[0]}"
wait "${svc_pid[0]}" 2>/dev/null || true
svc_pid[0]=''
svc_job_wait "host 0's service killed" 120
for r in 0 1 2 3; do
    for p in 0 1 2 3; do
        ((p == r)) && continue
        if ((r % 2 == 0 || p % 2 == 0)); then
            grep -q "rank $r: peer $p reset" "$tmp/r$r.out" ||
                fail "service killed: rank $r's operations on rank $p did not end -ECONNRESET"
        fi
    done
    grep -q "rank $r: ok" "$tmp/r$r.out" || fail "service killed: rank $r"
done
echo "netns.svc_kill_$hook: every rank done $((SECONDS - killed_at)) s after the service's death"
grep -h "reset after" "$tmp"/r*.out
# ULN_SERVICE=auto with nobody listening: direct mode, and ulninfo says why.
out=$(on 0 env ULN_SERVICE=auto "$ulninfo" 2>&1) || fail "ulninfo after the service's death: $out"
grep -q "^  service  *none (no ulnetd listening at @ulnet/ulnetd): direct mode" <<<"$out" ||
    fail "ULN_SERVICE=auto after the service's death: $(grep -m1 '^  service ' <<<"$out")"
# ... and a job there runs so: rank 0 on host 0 (no service) and rank 1 on
# host 1 (attached to its service, which carries nothing: ULN_TRANSPORT is
# auto) reach each other over udp, every operation checked.
port=$((port + 1))
dpids=() dkey=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
for r in 0 1; do
    "$here/hosts.sh" exec "h$r" env ULN_RANK=$r ULN_SIZE=2 ULN_ROOT="$ULNTEST_HOST_0:$port" \
        ULN_JOB_KEY="$dkey" ULN_SERVICE=auto "$prog" rounds 20 \
        >"$tmp/d$r.out" 2>&1 &
    dpids+=($!)
done
pids=("${dpids[@]}")
for r in 0 1; do
    st=0
    timeout 60 tail --pid="${dpids[r]}" -f /dev/null || fail "direct job: rank $r hangs"
    wait "${dpids[r]}" || st=$?
    ((st == 0)) || fail "direct job after the service's death: rank $r exited with $st: $(cat "$tmp/d$r.out")"
done
pids=()
left_alone 0 "after kill -9 of host 0's service"
left_alone 1 "after kill -9 of host 0's service"
if [[ $hook != udp ]]; then
    # The service's reaper took the dead service's program away.
    for _ in $(seq 100); do [[ -z $(xdp_prog 0) ]] && break; sleep 0.05; done
    grep -q "removed the XDP program of a dead ulnet process" "$tmp/svc0.log" ||
        fail "nothing removed the killed service's XDP program"
    [[ -z $(xdp_prog 0) ]] || fail "an XDP program left on host 0 after its service's kill -9: $(xdp_prog 0)"
fi
# A service again on host 0, then both stop: nothing left.
svc_up 0
for h in 0 1; do
    svc_stop "$h" || fail "host $h's service did not stop cleanly"
    [[ -z $(xdp_prog "$h") ]] || fail "an XDP program left on host $h after its service stopped: $(xdp_prog "$h")"
    left_alone "$h" "after the services stopped"
done
echo "netns.svc_kill_$hook: passed"
