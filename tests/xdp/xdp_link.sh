#!/usr/bin/env bash
# xdp_link.sh - the AF_XDP link alone, below the protocol, between two
# namespace hosts (tests/netns/hosts.sh): xdp_link_peer streams numbered
# datagrams from host 0 to host 1 and pings host 1's echo.
#
#   xdp_link.sh --built 0|1 [--hook native|generic] PEER
#
# Checked:
#   - every datagram that arrives is intact, in order and once (the sink
#     fails on anything else); the kernel may drop a few on the way (its
#     queues overflow on a loaded machine), at most 1 %; all come by AF_XDP,
#     none by the link's bound socket (rx_sock);
#   - the batch path: the source's sends of 64 go to the kernel in few kicks
#     (sendto on the AF_XDP socket): at least 16 datagrams per kick on
#     average, where one kick per datagram would be 1;
#   - 2000 ping-pongs of one datagram each come back intact;
#   - a source on the socket link (GSO runs of 64 datagrams) to the AF_XDP
#     sink: all arrive (at most 1 % lost); with generic XDP, which sees each
#     run whole, by the link's bound socket (the XDP program passes a frame
#     longer than the MTU to the kernel, which cuts it up).
# Exit 77 (skipped) without the link (--built 0) or namespaces.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_sh=$here/../netns/hosts.sh
built="" hook=native
while [[ $# -gt 0 ]]; do
    case $1 in
    --built) built=$2; shift 2 ;;
    --hook) hook=$2; shift 2 ;;
    *) break ;;
    esac
done
peer=${1:?xdp_link.sh: no xdp_link_peer given}
[[ $built == 1 ]] || { echo "xdp_link.sh: ulnet built without the AF_XDP link: skipped"; exit 77; }
"$hosts_sh" probe >/dev/null 2>&1 || { echo "xdp_link.sh: no network namespaces here: skipped"; exit 77; }

logs=$(mktemp -d)
set -a
eval "$("$hosts_sh" up 2)"
set +a
server=""
cleanup() {
    [[ -n $server ]] && kill -KILL "$server" 2>/dev/null
    wait 2>/dev/null || true
    "$hosts_sh" down >/dev/null 2>&1 || true
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "xdp_link.sh: FAIL: $*" >&2
    for f in "$logs"/*; do [[ -s $f ]] && { echo "--- ${f##*/}:"; tail -n 5 "$f"; } >&2; done
    exit 1
}

a=$ULNTEST_HOST_0 b=$ULNTEST_HOST_1
pa=$((20000 + RANDOM % 20000)) pb=$((pa + 1))
common=(--link xdp --hook "$hook")
client=("${common[@]}")

# One pair: the server (echo or sink) on host 1, ready before the client on
# host 0 starts; both must exit 0.
# The server on h1. The kernel lets go of the last pair's AF_XDP socket a
# moment after its process is gone: until then the queue is taken, so a
# side that says so is started again (the client too, below).
start_server() {
    local smode=$1
    shift
    for ((try = 0; try < 20; try++)); do
        rm -f "$logs/$smode.out" # an earlier pair's "ready" is not this server's
        "$hosts_sh" exec h1 "$peer" "${common[@]}" --bind "$b" --port $pb --peer "$a:$pa" "$smode" \
            --idle-ms 3000 "$@" >"$logs/$smode.out" 2>"$logs/$smode.err" &
        server=$!
        for ((t = 0; t < 200; t++)); do
            grep -q ready "$logs/$smode.out" 2>/dev/null && return 0
            kill -0 $server 2>/dev/null || break
            sleep 0.05
        done
        grep -q ready "$logs/$smode.out" 2>/dev/null && return 0
        kill -0 $server 2>/dev/null && return 0 # alive, not ready: said below
        wait $server 2>/dev/null || true
        server=""
        grep -q "has an AF_XDP socket already" "$logs/$smode.err" || break
        sleep 0.1
    done
    fail "$smode did not start: $(cat "$logs/$smode.err")"
}

pair() {
    local smode=$1 cmode=$2
    shift 2
    start_server "$smode" "$@"
    grep -q ready "$logs/$smode.out" || fail "$smode not ready after 10 s: $(cat "$logs/$smode.err")"
    for ((try = 0; ; try++)); do # the same wait for the queue as the server's
        "$hosts_sh" exec h0 timeout 120 "$peer" "${client[@]}" --bind "$a" --port $pa \
            --peer "$b:$pb" "$cmode" "$@" >"$logs/$cmode.out" 2>"$logs/$cmode.err" && break
        ((try < 20)) && grep -q "has an AF_XDP socket already" "$logs/$cmode.err" ||
            fail "$cmode failed"
        sleep 0.1
    done
    wait $server || fail "$smode failed"
    server=""
}

val() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$logs/$1.out" | tail -n 1; }

pair sink source --count 100000 --size 64 --batch 64 --window 256
lost=$(val sink lost) pkts=$(val source tx_pkts) kicks=$(val source tx_calls)
((lost * 100 <= 100000)) || fail "$lost of 100000 datagrams lost"
[[ $(val sink rx_sock) == 0 ]] || fail "$(val sink rx_sock) datagrams came by the bound socket"
((kicks > 0 && pkts >= 16 * kicks)) || fail "$pkts datagrams in $kicks kicks: not batched"
echo "xdp_link.sh: stream: $(grep -v ready "$logs/sink.out")"
echo "xdp_link.sh: source: $pkts datagrams in $kicks kicks"

pa=$((pa + 2)) pb=$((pb + 2))
pair echo ping --count 2000 --size 200
echo "xdp_link.sh: ping: $(grep -v ready "$logs/ping.out")"

pa=$((pa + 2)) pb=$((pb + 2)) client=(--link udp)
pair sink source --count 20000 --size 1400 --batch 64 --window 256
lost=$(val sink lost) sock=$(val sink rx_sock)
((lost * 100 <= 20000)) || fail "socket-link source: $lost of 20000 datagrams lost"
[[ $hook != generic ]] || ((sock > 0)) || fail "generic: no GSO run came by the bound socket"
echo "xdp_link.sh: from the socket link: $(grep -v ready "$logs/sink.out")"
echo "xdp_link.sh: passed"
