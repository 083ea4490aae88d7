#!/usr/bin/env bash
# test_udp_io_netns.sh HOSTS_SH UDP_IO_PEER - the datagram layer between two
# network namespaces joined by veth pairs and a bridge (tests/netns/hosts.sh):
#   1. packets of every batch size and iovec count cross the bridge and come
#      back intact, attributed to the right peer; with UDP_GRO (the default)
#      the source's GSO runs cross veth and bridge whole and the sink reads
#      each as one: a paced stream arrives whole and intact in such reads, and
#      an unpaced one is measured with and without GRO;
#   2. with an nft rule dropping 2 % on one host, a paced stream loses ~2 %,
#      and exactly what the rule's counter says;
#   3. with tc tbf at 1 Gbit/s, a stream's goodput stays below 1.1 Gbit/s;
#   4. hosts.sh down leaves no namespace, veth or nft table behind.
# Skips (exit 77, ctest's SKIP_RETURN_CODE, saying why) where namespaces
# cannot be made: not root, no ip netns.
set -uo pipefail
hosts=$1
peer=$2
passed=0
failed=0

skip() {
    echo "udp_io_netns: SKIPPED: $*"
    echo "0 passed, 0 failed, 1 skipped"
    exit 77
}
check() {
    local what=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok: $what"
    else
        failed=$((failed + 1))
        echo "FAILED: $what"
    fi
}
# The value of key=... in a line of udp_io_peer output.
field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2" | head -1; }
# awk does the float comparisons: fcmp A OP B
fcmp() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }
between() { fcmp "$1" '>=' "$2" && fcmp "$1" '<=' "$3"; }

[[ $(id -u) == 0 ]] || skip "needs root for network namespaces"
why=$("$hosts" probe 2>&1) || skip "$why"

run=ulnt$$
veths_before=$(ip -o link show type veth 2>/dev/null | wc -l)
trap '"$hosts" down --run "$run" >/dev/null 2>&1 || true' EXIT

up() {
    local out
    out=$("$hosts" up 2 --run "$run" "$@") || return 1
    eval "$out"
}
down() { "$hosts" down --run "$run"; }
in_host() {
    local k=$1
    shift
    timeout 30 "$hosts" exec --run "$run" "h$k" "$@"
}
# sink in host 1 (background), source in host 0; sets src and snk output
stream() {
    local sink_args=$1
    shift
    local tmp
    tmp=$(mktemp)
    # shellcheck disable=SC2086
    in_host 1 "$peer" sink --bind "$ULNTEST_HOST_1" --port 9000 --peer "$ULNTEST_HOST_0:9000" \
        --idle-ms 400 --max-ms 8000 $sink_args >"$tmp" 2>/dev/null &
    local sp=$!
    sleep 0.3
    src=$(in_host 0 "$peer" source --bind "$ULNTEST_HOST_0" --port 9000 --peer "$ULNTEST_HOST_1:9000" \
        "$@" 2>/dev/null)
    wait "$sp"
    snk=$(cat "$tmp")
    rm -f "$tmp"
    echo "  source: $(head -1 <<<"$src")"
    echo "  sink:   $(head -1 <<<"$snk")"
}

t0=$SECONDS
# 1. exchange across the bridge
if up; then
    echo "run $run: hosts $ULNTEST_HOST_0, $ULNTEST_HOST_1"
    etmp=$(mktemp)
    in_host 1 "$peer" echo --bind "$ULNTEST_HOST_1" --port 9000 --peer "$ULNTEST_HOST_0:9000" \
        --count 2080 --idle-ms 3000 >"$etmp" 2>/dev/null &
    ep=$!
    sleep 0.3
    ping_out=$(in_host 0 "$peer" ping --bind "$ULNTEST_HOST_0" --port 9000 --peer "$ULNTEST_HOST_1:9000" 2>&1)
    ping_rc=$?
    wait "$ep"
    echo_rc=$?
    echo_out=$(cat "$etmp")
    rm -f "$etmp"
    echo "  ping: $(grep '^sent=' <<<"$ping_out")"
    echo "  echo: $(head -1 <<<"$echo_out")"
    check "batches of 1..64 packets, 1..3 iovecs, cross the bridge and come back intact" \
        test "$ping_rc" = 0 -a "$(field bad "$ping_out")" = 0 -a "$(field missing "$ping_out")" = 0
    check "every packet attributed to its peer on both sides" \
        test "$(field wrong_peer "$ping_out")" = 0 -a "$echo_rc" = 0 \
        -a "$(field foreign "$echo_out")" = 0 -a "$(field echoed "$echo_out")" = 2080
    echo "GRO: a paced stream, every datagram counted and checked:"
    stream "--count 20000" --size 1472 --count 20000 --batch 16 --pace-us 100
    gro_reads=$(field sink_rx_gro_msgs "$snk")
    check "GRO: 20000 datagrams arrive, each once and intact (distinct $(field distinct "$snk"), bad $(field bad "$snk"))" \
        test "$(field distinct "$snk")" = 20000 -a "$(field bad "$snk")" = 0 \
        -a "$(field received "$snk")" = 20000
    check "GRO: ... in reads of several datagrams ($gro_reads reads, $(field sink_rx_gro_segs "$snk") datagrams)" \
        fcmp "${gro_reads:-0}" '>' 0
    echo "unshaped veth stream, for comparison (GRO on the sink, then off):"
    stream "" --size 1472 --ms 500
    free_gbps=$(field gbps "$snk")
    gro_reads=$(field sink_rx_gro_msgs "$snk")
    stream "--no-gro" --size 1472 --ms 500
    nogro_gbps=$(field gbps "$snk")
    echo "  sink goodput: ${free_gbps:-?} Gbit/s with GRO ($gro_reads GRO reads), ${nogro_gbps:-?} without"
    check "GRO off (--no-gro): no GRO reads ($(field sink_rx_gro_msgs "$snk"))" \
        test "$(field sink_rx_gro_msgs "$snk")" = 0 -a "$(field bad "$snk")" = 0
    down
else
    check "hosts.sh up 2" false
fi

# 2. 2 % loss on host 1's veth
if up --drop-pct 2 --drop-on h1; then
    n=20000
    stream "--count $n" --size 1000 --count "$n" --batch 16 --pace-us 200
    got=$(field distinct "$snk")
    kdrops=$(field sink_kernel_drops "$snk")
    lost=$((n - ${got:-0}))
    nft_drops=$(timeout 30 ip netns exec "$run-br" nft list table netdev ulnet_drop |
        awk '/drop_in/ {c = 1} c && /counter packets/ {for (i = 1; i <= NF; i++) if ($i == "packets") {print $(i + 1); exit}}')
    pct=$(awk -v l="$lost" -v n="$n" 'BEGIN { printf "%.2f", 100 * l / n }')
    echo "  lost $lost of $n ($pct %), nft counted $nft_drops, socket dropped $kdrops"
    check "loss with a 2 % drop rule is 1..3.5 % (measured $pct %)" \
        between "$pct" 1.0 3.5
    # Every datagram lost is accounted for: the rule dropped it, or the sink's
    # socket did (counted by the kernel: a sink descheduled on a loaded
    # machine overflows its buffer; seen in a full run at load 12). The rule
    # sees all of host 1's traffic, so it may also have caught the odd packet
    # outside the counted stream (seen once: 393 dropped, 392 lost).
    accounted=$((${nft_drops:-0} + ${kdrops:-0}))
    check "every loss is the rule's or the socket's (nft counter $nft_drops, socket drops $kdrops, lost $lost)" \
        test -n "$kdrops" -a "${nft_drops:-0}" -gt 0 -a "$accounted" -ge "$lost" -a "$accounted" -le $((lost + 2))
    down
else
    check "hosts.sh up 2 --drop-pct 2" false
fi

# 3. a 1 Gbit/s link
if up --rate 1gbit; then
    stream "" --size 1472 --ms 800
    gbps=$(field gbps "$snk")
    echo "  shaped to 1 Gbit/s: ${gbps:-?} Gbit/s goodput (unshaped: ${free_gbps:-?})"
    check "goodput on the tbf 1gbit link is below 1.1 Gbit/s (${gbps:-?})" fcmp "${gbps:-9}" '<' 1.1
    check "... and the link does carry traffic (> 0.5 Gbit/s)" fcmp "${gbps:-0}" '>' 0.5
    down
else
    check "hosts.sh up 2 --rate 1gbit" false
fi

# 4. nothing left behind
left_ns=$(ip netns list | awk '{print $1}' | grep -c "^$run-" || true)
veths_after=$(ip -o link show type veth 2>/dev/null | wc -l)
left_nft=0
if command -v nft >/dev/null 2>&1; then
    left_nft=$(nft list tables 2>/dev/null | grep -c ulnet || true)
fi
check "down leaves no namespace ($left_ns), veth ($veths_before -> $veths_after) or nft table ($left_nft)" \
    test "$left_ns" = 0 -a "$veths_after" = "$veths_before" -a "$left_nft" = 0

echo "($((SECONDS - t0)) s)"
echo "$passed passed, $failed failed"
((failed == 0))
