#!/usr/bin/env bash
# udp_blast on loopback for half a second, in each shape (one buffer per send;
# SPREAD: a header and a payload iovec per datagram): the receiver gets the
# stream and both sides print their one line, in the shape bench/peers.py
# parses.
#   udp_blast_loopback.sh UDP_BLAST
set -euo pipefail
blast=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for shape in "" "64400 1400 1048576"; do
    port=$((30000 + RANDOM % 20000))
    # shellcheck disable=SC2086 # the shape is several arguments
    "$blast" recv 127.0.0.1 $port 0.5 $shape >"$out" &
    sleep 0.2
    # shellcheck disable=SC2086
    sent=$("$blast" send 127.0.0.1 $port 0.5 $shape)
    wait $!
    got=$(<"$out")
    re='^sent [0-9]+ bytes [0-9]+ datagrams in [0-9.]+ s: [0-9.]+ GB/s$'
    [[ $sent =~ $re ]] || { echo "FAIL [$shape]: sender said: $sent" >&2; exit 1; }
    re='^received [0-9]+ bytes ([0-9]+) datagrams in [0-9.]+ s: [0-9.]+ GB/s lost [0-9]+$'
    [[ $got =~ $re ]] || { echo "FAIL [$shape]: receiver said: $got" >&2; exit 1; }
    ((BASH_REMATCH[1] > 0)) || { echo "FAIL [$shape]: nothing received" >&2; exit 1; }
    echo "udp_blast [${shape:-one buffer}] on loopback: $sent / $got"
done
