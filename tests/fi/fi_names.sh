#!/usr/bin/env bash
# fi_names (fi_names.c): a server that publishes its name on a TCP port and a
# client that finds it by host and port, as two unrelated processes; then a
# stale name refused; then lookups that must fail in bounded time. With
# --hosts, server and client run on two network-namespace hosts
# (tests/netns/hosts.sh), so the data goes over udp. With --late the client
# starts 5 s before the server, whose name it waits for (the lookup retries
# with backoff while nothing listens, FI_ULNET_NAME_WAIT_MS). ULN_TRANSPORT
# from the environment reaches both sides.
# Usage: fi_names.sh PROGRAM PROVIDER_DIR [--hosts|--late]      (77: no netns)
set -euo pipefail
prog=$1
export FI_PROVIDER_PATH=$2 FI_PROVIDER=ulnet
hosts=${3:-}
# the client's look-up of a port with nothing behind it (fi_av_insertsym's
# next port) waits this long; --late: 12 s, the 5 s head start and a margin
wait_ms=5000
[[ $hosts == --late ]] && wait_ms=12000
pass=(FI_PROVIDER_PATH="$FI_PROVIDER_PATH" FI_PROVIDER=ulnet FI_ULNET_NAME_WAIT_MS=$wait_ms)
export FI_ULNET_NAME_WAIT_MS=$wait_ms
[[ -n ${ULN_TRANSPORT:-} ]] && pass+=(ULN_TRANSPORT="$ULN_TRANSPORT")
. "$(dirname "$0")/server_client.sh"
port=$((20000 + RANDOM % 20000))
if [[ $hosts == --late ]]; then
    # the client first: its fi_getinfo(host, port) waits for the server
    run_cli timeout 120 "$prog" client "$srv_addr" "$port" >"$work/cli.out" 2>&1 &
    cli=$!
    sleep 5
    kill -0 $cli 2>/dev/null || { echo "client gave up before the server started:"; cat "$work/cli.out"; exit 1; }
    run_srv timeout 120 "$prog" server "$port" >"$work/srv.out" 2>&1 &
    srv=$!
    wait $cli || { echo "client failed:"; cat "$work/cli.out"; echo "server:"; cat "$work/srv.out"; kill $srv 2>/dev/null; exit 1; }
else
    run_srv timeout 120 "$prog" server "$port" >"$work/srv.out" 2>&1 &
    srv=$!
    # no sleep: the client's lookup retries while nothing listens yet
    if ! run_cli timeout 120 "$prog" client "$srv_addr" "$port" >"$work/cli.out" 2>&1; then
        echo "client failed:"; cat "$work/cli.out"; echo "server:"; cat "$work/srv.out"
        kill $srv 2>/dev/null || true
        exit 1
    fi
fi
wait $srv || { echo "server failed:"; cat "$work/srv.out"; exit 1; }
cat "$work/srv.out" "$work/cli.out"
if [[ -z $hosts ]]; then
    FI_ULNET_NAME_TIMEOUT_MS=500 FI_ULNET_NAME_WAIT_MS=500 timeout 60 "$prog" refuse
fi
