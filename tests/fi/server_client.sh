# server_client.sh - sourced by the fi_* scripts that run a libfabric server
# and client as two unrelated processes: on this host, or with hosts=--hosts
# on two network-namespace hosts (tests/netns/hosts.sh; the server in h0, the
# client in h1, so the data goes over udp). Before sourcing: hosts, and
# pass (VAR=value words both sides get), and svc: empty, or an ulnetd to run
# on each host (--hosts only), every peer then reached through the services
# (ULN_SERVICE=required, ULN_TRANSPORT=svc). After: run_srv, run_cli,
# srv_addr, svc_forwarded (fails unless both services forwarded messages),
# and work, a directory removed at exit (with the hosts and services). Exits
# 77 where network namespaces cannot be made.
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
    if [[ -n ${svc:-} ]]; then
        svc_pids=()
        for h in 0 1; do
            v=ULNTEST_HOST_$h
            "$H" exec "h$h" "$svc" --foreground --addr "${!v}" 2>"$work/svc$h.log" &
            svc_pids+=($!)
        done
        trap 'kill ${svc_pids[*]} 2>/dev/null || true; wait; cleanup; "$H" down' EXIT
        for h in 0 1; do
            for _ in $(seq 100); do
                "$H" exec "h$h" "$svc" --status >/dev/null 2>&1 && break
                sleep 0.05
            done
        done
        pass+=(ULN_SERVICE=required ULN_TRANSPORT=svc)
    fi
    run_srv() { "$H" exec h0 env "${pass[@]}" "$@"; }
    run_cli() { "$H" exec h1 env "${pass[@]}" "$@"; }
    srv_addr=$ULNTEST_HOST_0
fi
svc_forwarded() {
    local h st
    for h in 0 1; do
        st=$("$H" exec "h$h" "$svc" --status)
        grep -q "forwarded [1-9]" <<<"$st" || { echo "host $h's service forwarded nothing:"; echo "$st"; return 1; }
    done
}
