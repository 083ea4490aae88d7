#!/usr/bin/env bash
# byaddr_hosts.sh - a program with no job (ULN_BOOT=none, peers inserted by
# address) across network-namespace hosts, every peer through the hosts'
# services: one ulnetd per host (--addr its host's address), the program in
# h0, its peer processes started in h1 (ULNTEST_PEER_EXEC), or in the last
# host with ULNTEST_PEER_EXEC2. Every service's --status is printed
# at the end, and the counters named by EXPECT ("h1:by address refused 1")
# must read so.
# Usage: byaddr_hosts.sh ULNETD HOSTS [EXPECT...] -- PROGRAM [ARGS...]
#        (77: no network namespaces)
set -euo pipefail
ulnetd=$1 hosts=$2
shift 2
expect=()
while [[ $1 != -- ]]; do
    expect+=("$1")
    shift
done
shift
H=$(cd "$(dirname "$0")/../netns" && pwd)/hosts.sh
"$H" probe >/dev/null 2>&1 || { echo "cannot make network namespaces: skipped"; exit 77; }
set -a
eval "$("$H" up "$hosts")"
set +a
logs=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$H" down >/dev/null 2>&1 || true
    rm -rf "$logs"
}
trap cleanup EXIT
for ((h = 0; h < hosts; h++)); do
    v=ULNTEST_HOST_$h
    "$H" exec "h$h" "$ulnetd" --foreground --addr "${!v}" 2>"$logs/h$h.log" &
    pids+=($!)
done
for ((h = 0; h < hosts; h++)); do
    for _ in $(seq 100); do
        "$H" exec "h$h" "$ulnetd" --status >/dev/null 2>&1 && break
        sleep 0.05
    done
done
rc=0
"$H" exec h0 env ULN_BOOT=none ULN_SERVICE=required ULN_TRANSPORT=svc \
    ULNTEST_PEER_EXEC="$H exec h1" ULNTEST_PEER_EXEC2="$H exec h$((hosts - 1))" \
    timeout 100 "$@" || rc=$?
for ((h = 0; h < hosts; h++)); do
    s=$("$H" exec "h$h" "$ulnetd" --status 2>&1 || true)
    echo "== h$h"
    echo "$s"
    cat "$logs/h$h.log"
    for e in "${expect[@]}"; do
        [[ ${e%%:*} == "h$h" ]] || continue
        if ! grep -q -- "${e#*:}" <<<"$s"; then
            echo "byaddr_hosts.sh: h$h's status does not say '${e#*:}'" >&2
            rc=1
        fi
    done
done
exit "$rc"
