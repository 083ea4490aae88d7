# Sourced by tests/svc's scripts: a ulnetd of the test's own, on a socket
# named after the run (so cases run in parallel, and beside a real ulnetd),
# and what to undo at the end whatever happens.
#   svc_start ULNETD NAME [OPTIONS...] -> $path, $tmp (with d.log, the service's
#                          stderr), $dpid; OPTIONS go to ulnetd
#   svc_status             -> the service's --status
#   svc_kill_at_exit PID   -> PID is killed at the end too (a job, a rank)
svc_pids=()
svc_cleanup() {
    local p
    for p in "${svc_pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    for p in "${svc_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ -z ${tmp:-} ]] || rm -rf "$tmp"
}
svc_kill_at_exit() { svc_pids+=("$1"); }
svc_status() { "$svc_ulnetd" --status --path "$path"; }
svc_start() {
    svc_ulnetd=$1
    path=@ulnet-test-$2-$$-$RANDOM
    tmp=$(mktemp -d)
    trap svc_cleanup EXIT
    "$svc_ulnetd" --foreground --path "$path" "${@:3}" 2>"$tmp/d.log" &
    dpid=$!
    svc_kill_at_exit "$dpid"
    local _
    for _ in $(seq 200); do svc_status >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "the service did not come up" >&2
    cat "$tmp/d.log" >&2
    return 1
}
