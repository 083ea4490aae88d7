# server_client.sh - sourced by the fi_* scripts that run a libfabric server
# and client as two unrelated processes: on this host, or with hosts=--hosts
# on two network-namespace hosts (tests/netns/hosts.sh; the server in h0, the
# client in h1, so the data goes over udp). Before sourcing: hosts, and
# pass (VAR=value words both sides get). After: run_srv, run_cli, srv_addr,
# and work, a directory removed at exit (with the hosts). Exits 77 where
# network namespaces cannot be made.
H=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../netns/hosts.sh
run_srv() { "$@"; }
run_cli() { "$@"; }
srv_addr=127.0.0.1
work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
if [[ $hosts == --hosts ]]; then
    "$H" probe || { echo "cannot make network namespaces: skipped"; exit 77; }
    set -a
    eval "$("$H" up 2)"
    set +a
    trap 'cleanup; "$H" down' EXIT
    run_srv() { "$H" exec h0 env "${pass[@]}" "$@"; }
    run_cli() { "$H" exec h1 env "${pass[@]}" "$@"; }
    srv_addr=$ULNTEST_HOST_0
fi
