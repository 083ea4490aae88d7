#!/usr/bin/env bash
# peers_hosts.sh - a peers test program across two network-namespace hosts
# (tests/netns/hosts.sh): the program runs in h0 and starts its unrelated
# peer processes in h1 through ULNTEST_PEER_EXEC, handing them pipes as on
# one host; the peers reach each other over udp, the contexts of the h0
# process each other over shm. Not an SPMD job: addresses travel over the
# pipes, as a client and server would carry them.
# Usage: peers_hosts.sh PROGRAM [ARGS...]      (77: no network namespaces)
set -euo pipefail
H=$(cd "$(dirname "$0")/../netns" && pwd)/hosts.sh
"$H" probe >/dev/null 2>&1 || { echo "cannot make network namespaces: skipped"; exit 77; }
set -a
eval "$("$H" up 2)"
set +a
trap '"$H" down >/dev/null 2>&1 || true' EXIT
"$H" exec h0 env ULNTEST_PEER_EXEC="$H exec h1" timeout 100 "$@"
