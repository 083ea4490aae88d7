#!/usr/bin/env bash
# udp_blast on loopback for half a second: the receiver gets the stream and
# both sides print their one line, in the shape bench/peers.py parses.
#   udp_blast_loopback.sh UDP_BLAST
set -euo pipefail
blast=$1
port=$((30000 + RANDOM % 20000))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$blast" recv 127.0.0.1 $port 0.5 >"$out" &
sleep 0.2
sent=$("$blast" send 127.0.0.1 $port 0.5)
wait $!
got=$(<"$out")
re='^sent [0-9]+ bytes ([0-9]+) datagrams in [0-9.]+ s: [0-9.]+ GB/s$'
[[ $sent =~ $re ]] || { echo "FAIL: sender said: $sent" >&2; exit 1; }
n_sent=${BASH_REMATCH[1]}
re='^received [0-9]+ bytes ([0-9]+) datagrams in [0-9.]+ s: [0-9.]+ GB/s lost ([0-9]+)$'
[[ $got =~ $re ]] || { echo "FAIL: receiver said: $got" >&2; exit 1; }
(( BASH_REMATCH[1] > 0 )) || { echo "FAIL: nothing received" >&2; exit 1; }
echo "udp_blast on loopback: $sent / $got (sent $n_sent)"
