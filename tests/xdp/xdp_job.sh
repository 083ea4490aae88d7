#!/usr/bin/env bash
# xdp_job.sh - one ulnet job of 2 ranks (or --ranks N) on 2 network-namespace
# hosts (or --hosts H; tests/netns/hosts.sh) over the AF_XDP link, and the
# interface's health around it.
#
#   xdp_job.sh --built 0|1 [--hook native|generic] [--env VAR=value]...
#              [--fallback REGEX] [--drop-caps] [--kill] [--mixed] [--forge]
#              [--auto [--quiet]] [--expect-out REGEX] [--expect-err REGEX]
#              [--own-eps] [--hosts H] [--ranks N]
#              [--expect-status X] [--no-neigh] [--ulninfo REGEX] [--timeout S]
#              -- PROGRAM ARGS...
#
# Each rank runs with ULN_TRANSPORT=xdp and ULN_XDP_HOOK=hook. Checked:
#   - while the job runs: each host's eth0 has ulnet's XDP program attached
#     in the mode asked for, and still answers ping and other UDP (a UDP echo
#     on another port);
#   - the job passes, every rank's stderr has no "ulnet: xdp:" fallback line,
#     and the kernel's stack saw no UDP of the job (an nft counter at each
#     eth0's ingress, after XDP): AF_XDP carried it all. --more-eps: the body
#     opens several endpoints, and those beyond the first (one AF_XDP socket
#     per queue) may take the socket link: their fallback lines and UDP are
#     allowed. --fallback REGEX: every rank says why (REGEX) and the socket
#     link carries the job; --own-eps: like --more-eps, but those further
#     endpoints print nothing (the queue is this process's own: ulnperf's
#     control endpoint), so no fallback line at all is allowed;
#   - native: host 0's veth (with --ranks N > 2, either host's) counted frames
#     redirected to the AF_XDP sockets;
#   - --hosts H (default 2), --ranks N (default H): rank r runs on host
#     r % H, as tests/netns/run_job.sh places them, so with N > H ranks share
#     a host. One AF_XDP socket per queue:
#     one rank per host gets it, the others say why not (the queue is
#     taken, or the interface has the other process's program) and take the
#     socket link, and the AF_XDP rank reaches them through its bound UDP
#     socket; their fallback lines and the kernel's UDP are allowed, as with
#     --more-eps;
#   - --mixed: rank 1 runs the socket link (ULN_TRANSPORT=udp): the two
#     links must understand each other; only host 0 is checked for AF_XDP;
#   - --forge: while the job runs, host 0 sends host 1's endpoint thousands of
#     malformed and forged frames as if from rank 0 (forge.py);
#   - --drop-caps: the ranks run without CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN
#     and CAP_PERFMON (setpriv), as an unprivileged user would;
#   - --auto: the ranks run with ULN_TRANSPORT=auto, which must keep the
#     socket link on veth (no zero-copy AF_XDP): no program is ever attached
#     and the kernel's stack carries the job; with --quiet, no rank prints
#     an auto line (veth is auto's choice, not a failure; ulninfo says why).
#     Runs also where the link is not built;
#   - --tp auto: the ranks (and ulninfo) run with ULN_TRANSPORT=auto, all
#     else as for xdp: AF_XDP must carry the job all the same (with
#     ULN_XDP_AUTO=copy on veth), or, with --fallback, say why not;
#   - --expect-out REGEX (repeatable): rank 0's output must match each;
#     --expect-err REGEX (repeatable): and its stderr;
#   - --ulninfo REGEX (repeatable): after the job, `ulninfo -t` on host 1
#     with the ranks' settings (ULN_TRANSPORT=xdp, the hook, --env) must
#     match each, on its stdout or stderr;
#   - --kill: both ranks get SIGKILL mid-job; the interfaces still answer ping
#     and UDP with the dead process's program attached, and the next ulnet
#     process on the host removes it (and its own when it closes).
#   - --expect-status X: the job passes iff some rank exits with X (137: it
#     killed itself, mid-stream) and every other rank exits 0. A dead rank's
#     host keeps its program (an orphan that passes everything): the kernel
#     there may see the survivors' last packets, and the next ulnet process
#     on it (ulninfo) must remove the orphan;
#   - --no-neigh: the hosts' neighbour entries for each other's addresses
#     (hosts.sh makes them static) are deleted before the job, and the
#     bootstrap (ULN_ROOT) goes over second addresses on eth0, so nothing
#     but ulnet resolves the job's addresses: the AF_XDP link must have the
#     kernel resolve them (docs/xdp.md, "Addresses"). Afterwards every host
#     has a learned (not permanent) entry for each other host. No ping or
#     echo during the job (they would resolve them first).
# Exit 77 (ctest's "skipped") when ulnet was built without the AF_XDP link
# (--built 0) or this machine cannot make namespaces.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_sh=$here/../netns/hosts.sh
built="" hook=native fallback="" kill=0 timeout=120 envs=() prefix=() more_eps=0 mixed=0 forge=0
tp_all=xdp auto=0 quiet=0 expect_out=() expect_err=() own_eps=0 info_out=() ranks=0 hosts=2 expect_status="" no_neigh=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --built) built=$2; shift 2 ;;
    --hook) hook=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --fallback) fallback=$2; shift 2 ;;
    --kill) kill=1; shift ;;
    --more-eps) more_eps=1; shift ;;
    --own-eps) own_eps=1; shift ;;
    --mixed) mixed=1; shift ;;
    --auto) auto=1; shift ;;
    --tp) tp_all=$2; shift 2 ;;
    --quiet) quiet=1; shift ;;
    --expect-out) expect_out+=("$2"); shift 2 ;;
    --expect-err) expect_err+=("$2"); shift 2 ;;
    --ulninfo) info_out+=("$2"); shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --expect-status) expect_status=$2; shift 2 ;;
    --no-neigh) no_neigh=1; shift ;;
    --forge) forge=1; envs+=(ULN_UDP_PORT=30000); shift ;; # endpoint 0 on port 30000
    --drop-caps)
        caps=-net_admin,-bpf,-sys_admin,-perfmon
        prefix=(setpriv --inh-caps="$caps" --bounding-set="$caps")
        shift
        ;;
    --timeout) timeout=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "xdp_job.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
(($# > 0)) || { echo "xdp_job.sh: no program" >&2; exit 2; }
((hosts >= 2)) || { echo "xdp_job.sh: --hosts: 2 or more" >&2; exit 2; }
((ranks > 0)) || ranks=$hosts
((ranks >= hosts)) || { echo "xdp_job.sh: --ranks: at least one per host" >&2; exit 2; }
# Fallback lines a rank may print when ranks or endpoints share a host's queue.
shared_why="has an AF_XDP socket already"
((ranks > hosts)) && shared_why+="|cannot attach the XDP program .*: Device or resource busy"
shared=$((more_eps || own_eps || ranks > hosts))
[[ $built == 1 || $auto == 1 ]] || { echo "xdp_job.sh: ulnet built without the AF_XDP link: skipped"; exit 77; }
"$hosts_sh" probe >/dev/null 2>&1 || { echo "xdp_job.sh: no network namespaces here: skipped"; exit 77; }
ulninfo=$(dirname "$1")/../../ulninfo # the build tree's tools

fail() {
    echo "xdp_job.sh: FAIL: $*" >&2
    for f in "$logs"/*; do [[ -s $f ]] && { echo "--- ${f##*/}:"; tail -n 5 "$f"; } >&2; done
    exit 1
}

logs=$(mktemp -d)
set -a
eval "$("$hosts_sh" up "$hosts")"
set +a
pids=() echo_pid=""
cleanup() {
    for p in "${pids[@]}" $echo_pid; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true # quietly: no "Killed" notices
    "$hosts_sh" down >/dev/null 2>&1 || true
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

on() { local h=$1; shift; "$hosts_sh" exec "h$h" "$@"; }

# Count the UDP (but the echo's) each host's stack receives on eth0: XDP runs
# before the netdev ingress hook, so what AF_XDP takes is never counted.
all_hosts=()
for ((h = 0; h < hosts; h++)); do all_hosts+=("$h"); done
for h in "${all_hosts[@]}"; do
    on $h nft "add table netdev ulnxdp; table netdev ulnxdp { chain in { type filter hook ingress device \"eth0\" priority 0; udp sport != 7 udp dport != 7 meta length <= 1500 counter; udp sport != 7 udp dport != 7 meta length > 1500 counter; }; }"
done
# Datagrams the kernel's stack took one by one (a frame AF_XDP could have
# taken), and GSO runs longer than the MTU: a sender's UDP_SEGMENT send that
# generic XDP sees whole and passes to the link's bound socket by design
# (docs/xdp.md, "Two paths"); those are not held against AF_XDP.
kernel_udp() { on "$1" nft list chain netdev ulnxdp in | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -n 1; }
kernel_runs() { on "$1" nft list chain netdev ulnxdp in | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | tail -n 1; }

# A UDP echo on host 1, port 7 (not ulnet's): other UDP must keep working.
"$hosts_sh" exec h1 python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)' &
echo_pid=$!

udp_echo() {
    on 0 python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
for i in range(5):
    s.sendto(b"ping %d" % i, (sys.argv[1], 7))
    try:
        if s.recvfrom(2048)[0] == b"ping %d" % i: sys.exit(0)
    except socket.timeout:
        pass
sys.exit(1)' "$ULNTEST_HOST_1"
}

# The interface answers: ping both ways, and the UDP echo.
healthy() {
    on 0 ping -c 2 -i 0.2 -W 1 -q "$ULNTEST_HOST_1" >/dev/null || fail "$1: no ping reply from host 1"
    on 1 ping -c 2 -i 0.2 -W 1 -q "$ULNTEST_HOST_0" >/dev/null || fail "$1: no ping reply from host 0"
    udp_echo || fail "$1: no UDP echo from host 1 (port 7)"
}

# ip's view of host h's eth0 if ulnet's program is attached there, else nothing.
prog_on() {
    local s
    s=$(on "$1" ip -d link show eth0 | tr '\n' ' ')
    [[ $s == *"name ulnet_xdp"* ]] && echo "$s" || true
}

port=$((20000 + RANDOM % 20000))
key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
xdp_hosts=("${all_hosts[@]}")
((mixed)) && xdp_hosts=(0)

host_ip() { local v=ULNTEST_HOST_$1; echo "${!v}"; }
root_ip=$ULNTEST_HOST_0
if ((no_neigh)); then
    # The bootstrap's TCP over other addresses (10.a.b.k -> 10.a.128.k): its
    # ARP fills in entries for those, not for the job's. Each rank's endpoint
    # is on its host's own address (ULN_UDP_ADDR).
    alt_ip() { local a; a=$(host_ip "$1"); echo "${a%.*.*}.128.${a##*.}"; }
    for h in "${all_hosts[@]}"; do
        on $h ip addr add "$(alt_ip $h)/24" dev eth0
        for j in "${all_hosts[@]}"; do
            ((j == h)) || on $h ip neigh del "$(host_ip $j)" dev eth0
        done
    done
    root_ip=$(alt_ip 0)
    for h in "${all_hosts[@]}"; do
        for j in "${all_hosts[@]}"; do
            ((j == h)) || [[ -z $(on $h ip neigh show "$(host_ip $j)" dev eth0) ]] ||
                fail "host $h still has a neighbour entry for host $j: $(on $h ip neigh show dev eth0)"
        done
    done
fi

for ((r = 0; r < ranks; r++)); do
    h=$((r % hosts))
    tp=$tp_all
    ((mixed && r == 1)) && tp=udp
    # udp (AF_XDP or not) to every other rank; auto: to the other hosts'
    # (shm on the same host), all but the (ranks - 1 - h) / hosts + 1 on host h.
    udp_peers=$((ranks - 1))
    ((auto)) && tp=auto
    [[ $tp != auto ]] || udp_peers=$((ranks - ((ranks - 1 - h) / hosts + 1)))
    addr=()
    ((no_neigh)) && addr=(ULN_UDP_ADDR="$(host_ip $h)")
    # hosts.sh directly (it execs the rank), so $! is the rank itself.
    "$hosts_sh" exec "h$h" "${prefix[@]}" env ULN_RANK=$r ULN_SIZE=$ranks ULN_ROOT="$root_ip:$port" \
        ULN_JOB_KEY="$key" ULN_TRANSPORT=$tp ULN_XDP_HOOK="$hook" ULNTEST_IT_EXPECT_UDP_PEERS=$udp_peers \
        "${addr[@]}" "${envs[@]}" "$@" >"$logs/r$r.out" 2>"$logs/r$r.err" &
    pids+=($!)
done

# While it runs (the program is attached once the endpoints open).
# ip's first line names the hook: "mtu 1500 xdp " (native) or "xdpgeneric".
want=$([[ $hook == generic ]] && echo " xdpgeneric " || echo " xdp ")
# Forged frames all along the job, from its first moments (a short job is
# over before the checks below are).
forge_pid=""
if ((forge)); then
    mac1=$(on 1 cat /sys/class/net/eth0/address)
    (
        for ((round = 0; round < 40; round++)); do
            kill -0 "${pids[1]}" 2>/dev/null || break
            on 0 python3 "$here/forge.py" eth0 "$ULNTEST_HOST_0" "$ULNTEST_HOST_1" "$mac1" 30000 1000 \
                >>"$logs/forge.out" || exit 1
        done
    ) &
    forge_pid=$!
fi

# Each AF_XDP host's program must be seen in the mode asked for, unless its
# rank is over first (a short job; then the counters below are the proof).
declare -A seen=()
for ((t = 0; !${#fallback} && !auto && t < 200 && ${#seen[@]} < ${#xdp_hosts[@]}; t++)); do
    for h in "${xdp_hosts[@]}"; do
        [[ -n ${seen[$h]:-} ]] && continue
        v=$(prog_on $h)
        if [[ -n $v ]]; then
            [[ $v == *"$want"* ]] || fail "host $h: ulnet_xdp attached, but not as ${want// /}: $v"
            seen[$h]=1
        elif ! kill -0 "${pids[h]}" 2>/dev/null; then
            seen[$h]=over
        fi
    done
    sleep 0.1
done
# auto on veth: never a program, from the first endpoint to the last.
for ((t = 0; auto && t < 50; t++)); do
    for h in "${all_hosts[@]}"; do
        [[ -z $(prog_on $h) ]] || fail "auto: host $h has ulnet_xdp attached on veth: $(prog_on $h)"
    done
    kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || break
    sleep 0.1
done
if ((auto)); then
    healthy "during the job"
elif [[ -z $fallback ]]; then
    for h in "${xdp_hosts[@]}"; do
        [[ -n ${seen[$h]:-} ]] ||
            fail "host $h: ulnet_xdp not attached while the job runs: $(on $h ip -d link show eth0 | tr '\n' ' ')"
    done
    ((no_neigh)) || ! kill -0 "${pids[0]}" 2>/dev/null || ! kill -0 "${pids[1]}" 2>/dev/null ||
        healthy "during the job"
fi

if ((kill)); then
    sleep 0.5
    kill -KILL "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    pids=()
    [[ -n $(prog_on 1) ]] || fail "after kill -9: the dead process's program is gone already?"
    healthy "after kill -9, the dead process's program attached"
    # The next ulnet process on host 1 removes the orphan, and its own at exit.
    on 1 env ULN_TRANSPORT=xdp ULN_XDP_HOOK="$hook" ULN_UDP_IF=eth0 "$ulninfo" -t >"$logs/info.out" 2>"$logs/info.err" ||
        fail "ulninfo after kill -9: $(cat "$logs/info.err")"
    grep -q "removed the XDP program of a dead ulnet process" "$logs/info.err" ||
        fail "the next process did not remove the orphan: $(cat "$logs/info.err")"
    grep -q "link in use *xdp" "$logs/info.out" || fail "ulninfo: $(grep 'link in use' "$logs/info.out")"
    [[ -z $(prog_on 1) ]] || fail "a program is left on host 1 after the last ulnet process: $(prog_on 1)"
    healthy "after the cleanup"
    echo "xdp_job.sh: kill -9 mid-job: interface healthy throughout, orphan removed"
    exit 0
fi

# Wait for the ranks. When the last rank of a host is gone, the UDP its
# stack has received so far is what came while the job ran there: after
# that, a peer still closing resends its last packets into the closed port
# (more of them with ULN_FAULT's losses), and the kernel takes those.
deadline=$((SECONDS + timeout))
declare -A dead_hosts=() done_rank=() udp_while=()
left=$ranks
while ((left > 0)); do
    for ((r = 0; r < ranks; r++)); do
        [[ -z ${done_rank[$r]:-} ]] && ! kill -0 "${pids[r]}" 2>/dev/null || continue
        st=0
        wait "${pids[r]}" || st=$?
        done_rank[$r]=1 left=$((left - 1))
        if [[ -n $expect_status && $st == "$expect_status" ]]; then
            dead_hosts[$((r % hosts))]=1
            echo "xdp_job.sh: rank $r exited with $st, as expected"
        elif ((st)); then
            cat "$logs/r$r.out" "$logs/r$r.err" >&2
            fail "rank $r exited with $st"
        fi
    done
    for h in "${all_hosts[@]}"; do
        [[ -z ${udp_while[$h]:-} ]] || continue
        for ((r = h; r < ranks; r += hosts)); do [[ -n ${done_rank[$r]:-} ]] || continue 2; done
        udp_while[$h]=$(kernel_udp "$h")
    done
    ((left == 0)) && break
    ((SECONDS < deadline)) || fail "job still running after $timeout s"
    sleep 0.1
done
pids=()
[[ -z $expect_status || ${#dead_hosts[@]} -gt 0 ]] || fail "no rank exited with $expect_status"
if [[ -n $forge_pid ]]; then
    wait "$forge_pid" || fail "forge.py failed"
    n=$(awk '{s += $3} END {print s + 0}' "$logs/forge.out")
    ((n > 0)) || fail "no forged frame was sent"
    echo "xdp_job.sh: $n forged frames sent to host 1's endpoint while the job ran"
fi
for ((r = 0; r < ranks; r++)); do
    tail -n 2 "$logs/r$r.out"
    for re in "${expect_out[@]}"; do
        ((r == 0)) && ! grep -Eq -- "$re" "$logs/r0.out" &&
            fail "rank 0's output does not match '$re': $(cat "$logs/r0.out")"
    done
    for re in "${expect_err[@]}"; do
        ((r == 0)) && ! grep -Eq -- "$re" "$logs/r0.err" &&
            fail "rank 0's stderr does not match '$re': $(cat "$logs/r0.err")"
    done
    if ((quiet)) && grep "ulnet: auto:" "$logs/r$r.err"; then
        fail "rank $r: auto printed a line where it only chose the socket link"
    fi
    if [[ -n $fallback ]]; then
        grep -Eq "ulnet: (xdp|auto): .*$fallback" "$logs/r$r.err" || fail "rank $r: no fallback line matching '$fallback': $(cat "$logs/r$r.err")"
    elif ((shared && !own_eps)); then
        ! grep "ulnet: xdp:" "$logs/r$r.err" | grep -Ev "$shared_why" ||
            fail "rank $r fell back to udp"
    elif grep "ulnet: xdp:" "$logs/r$r.err"; then
        fail "rank $r fell back to udp"
    fi
done
for r in "${all_hosts[@]}"; do
    # After the receiver closed, its peers' last resends: the kernel answers
    # those with ICMP, and that is all they can be. Checked: those that came
    # while the host's ranks ran (udp_while).
    n=$(kernel_udp $r) nw=${udp_while[$r]}
    # A dead rank's host: its orphaned program passes the survivors'
    # packets to it (resends until they give it up) to the kernel.
    if [[ -n ${dead_hosts[$r]:-} ]]; then
        echo "xdp_job.sh: host $r (a rank died there): its stack received $n UDP packets"
        continue
    fi
    # (Forged fragments and cut headers are the kernel's: host 1 is not checked.)
    if ((auto && n == 0)); then
        fail "auto: host $r's stack received no UDP of the job: what carried it?"
    fi
    # A peer that opened its endpoint first may reach one whose AF_XDP
    # socket is not in the program's map yet (the bound socket takes those),
    # and the last may come in the moment before udp_while was read: a few
    # per peer on another host. A fault injector duplicates and resends
    # those early ones too (seen: 10 from one peer on a loaded machine), so
    # it gets four times as many; a link that carried the job itself would
    # show thousands.
    remote=$((ranks - ((ranks - 1 - r) / hosts + 1)))
    early=8
    [[ " ${envs[*]} " == *" ULN_FAULT="* ]] && early=32
    if [[ -z $fallback ]] && ((!auto && !shared && nw > early * remote && (!forge || r == 0))) &&
        [[ " ${xdp_hosts[*]} " == *" $r "* ]]; then
        fail "host $r's stack received $nw UDP packets of the job while it ran: not all went to AF_XDP"
    fi
    echo "xdp_job.sh: host $r's stack received $nw UDP packets of the job while it ran, $n in all," \
        "and $(kernel_runs $r) GSO runs"
done
# A rank that died leaves its program: the next ulnet process on the host
# removes it (and its own when it closes), as after --kill.
for h in "${!dead_hosts[@]}"; do
    [[ -n $(prog_on $h) ]] || continue
    on $h env ULN_TRANSPORT=xdp ULN_XDP_HOOK="$hook" ULN_UDP_IF=eth0 "$ulninfo" -t >"$logs/info$h.out" \
        2>"$logs/info$h.err" || fail "ulninfo on host $h after the death: $(cat "$logs/info$h.err")"
    grep -q "removed the XDP program of a dead ulnet process" "$logs/info$h.err" ||
        fail "host $h: the next process did not remove the dead rank's program: $(cat "$logs/info$h.err")"
    echo "xdp_job.sh: host $h: the dead rank's program removed by the next process"
done
for h in "${all_hosts[@]}"; do
    [[ -z $(prog_on $h) ]] || fail "host $h: a program is left after the job: $(prog_on $h)"
done
# ulninfo with the job's settings says what the ranks got, and why.
if ((${#info_out[@]})); then
    on 1 "${prefix[@]}" env ULN_TRANSPORT=$tp_all ULN_XDP_HOOK="$hook" ULN_UDP_IF=eth0 "${envs[@]}" "$ulninfo" -t \
        >"$logs/info.out" 2>&1 || fail "ulninfo -t on host 1: $(cat "$logs/info.out")"
    for re in "${info_out[@]}"; do
        grep -Eq -- "$re" "$logs/info.out" || fail "ulninfo -t does not match '$re': $(cat "$logs/info.out")"
    done
    grep -E "link in use|^ulnet:" "$logs/info.out"
fi
# --no-neigh: the kernel resolved every host's peers (for ulnet: nothing
# else sent to those addresses), learned entries, not static ones.
if ((no_neigh)); then
    for h in "${all_hosts[@]}"; do
        for j in "${all_hosts[@]}"; do
            ((j == h)) && continue
            e=$(on $h ip neigh show "$(host_ip $j)" dev eth0)
            [[ $e == *lladdr* && $e != *PERMANENT* ]] ||
                fail "host $h: no learned neighbour entry for host $j after the job: '$e'"
            echo "xdp_job.sh: host $h resolved host $j: $e"
        done
    done
fi
# Host 0's, or with ranks sharing a host either host's: the AF_XDP rank of
# host 0 may be one that only hears from its own host (nap_order's senders
# on host 0 when rank 0 took the socket link).
if [[ $hook == native && -z $fallback ]] && ((!auto)); then
    redirect_hosts=(0)
    ((ranks > hosts)) && redirect_hosts=(0 1)
    n=0
    for h in "${redirect_hosts[@]}"; do
        n=$((n + $(on $h ethtool -S eth0 | awk '/xdp_redirect/ {s += $2} END {print s + 0}')))
    done
    ((n > 0)) || fail "host ${redirect_hosts[*]}'s veth redirected no frames to AF_XDP"
    echo "xdp_job.sh: host ${redirect_hosts[*]}'s veth redirected $n frames to AF_XDP"
fi
healthy "after the job"
echo "xdp_job.sh: passed"
