# shellcheck shell=bash
# hosts_lib.sh - sourced (bash) by the scripts that make hosts.sh's hosts and
# run a ulnetd on them, so that every one starts, waits for and stops the
# services the same way.
#
#   hosts_up N [hosts.sh up options]
#       hosts.sh up, owned by this script ($$: hosts.sh reap removes the run
#       once it is gone), its ULNTEST_* variables exported here.
#   hosts_down
#       The run removed (every process in it ended first); quiet, never fails:
#       for cleanup traps.
#   hosts_end
#       For a cleanup trap: every service killed, every child waited for,
#       the run removed.
#   svc_start [--hosts "H..."] [--pin] [--expect REGEX] ULNETD [OPTION...]
#       On each host (default: all of the run), ULNETD --foreground --addr
#       <the host's address> OPTION..., its stderr appended to
#       $svc_logs/svc<H>.log, its pid in svc_pid[H]. Then waits until each
#       answers --status (SVC_START_S seconds, default 60) and, with
#       --expect, until that output has a line matching REGEX (e.g. the link
#       asked for). Returns 1 saying which service did not and printing its
#       log (and whether it exited). --pin: host H's service on CPU H % ncpu.
#   svc_stop [H...]
#       SIGTERM to each service (default: every one started), as systemd
#       stops it; each must exit 0 within SVC_STOP_S (default 10) seconds, so
#       a service that crashes or leaks under ASan is a failure: returns 1,
#       saying which and printing its log.
#   svc_status H
#       Host H's service's --status (its exit status is --status's).
#   svc_kill_all
#       SIGKILL to every service still running, waited for: for cleanup.
#   svc_job PROG [ARG...]
#       A job of four ranks through the services of hosts 0 and 1 (rank r on
#       host r % 2, a fresh key, the next port after $port): PROG ARG... each,
#       its output in $tmp/rN.out, their pids in pids. The caller defines
#       port, tmp and fail.
#   svc_job_streaming LABEL
#       Until every rank printed "rank R streaming" (60 s at most), then half
#       a second more: mid-stream. A rank that ended first fails.
#   svc_job_wait LABEL SECONDS
#       Every rank of the job ended within SECONDS with its want[r] (0 where
#       want has none), else fail: a hang or a wrong end.
#
# svc_logs: the folder for the services' logs (set it before svc_start).
# The messages start with $me (default: the script's name).

hosts_sh=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/hosts.sh
me=${me:-$(basename "$0")}
declare -a svc_pid=()
svc_bin=''

hosts_up() {
    local out
    out=$("$hosts_sh" up --owner $$ "$@") || return 1
    set -a
    eval "$out"
    set +a
}

hosts_down() {
    [[ -z ${ULNTEST_NETNS:-} ]] || "$hosts_sh" down >/dev/null 2>&1 || true
}

hosts_end() {
    svc_kill_all
    wait 2>/dev/null || true
    hosts_down
}

svc_status() {
    "$hosts_sh" exec "h$1" "$svc_bin" --status
}

svc_start() {
    local on='' pin=0 expect='' h v cpu
    while (($#)); do
        case $1 in
        --hosts) on=$2; shift 2 ;;
        --pin) pin=1; shift ;;
        --expect) expect=$2; shift 2 ;;
        *) break ;;
        esac
    done
    svc_bin=$1
    shift
    [[ -n ${svc_logs:-} && -d $svc_logs ]] || { echo "$me: svc_start: set svc_logs to a folder" >&2; return 1; }
    [[ -n $on ]] || on=$(seq 0 $((ULNTEST_HOSTS - 1)))
    for h in $on; do
        v=ULNTEST_HOST_$h
        cpu=()
        ((pin == 0)) || cpu=(taskset -c $((h % $(nproc))))
        "$hosts_sh" exec "h$h" "${cpu[@]}" "$svc_bin" --foreground --addr "${!v}" "$@" \
            2>>"$svc_logs/svc$h.log" &
        svc_pid[h]=$!
    done
    for h in $on; do svc_wait "$h" "$expect" || return 1; done
}

# Until host H's service answers --status (with a line matching REGEX).
svc_wait() {
    local h=$1 expect=$2 out='' st=0 end=$((SECONDS + ${SVC_START_S:-60}))
    while ((SECONDS < end)); do
        if ! kill -0 "${svc_pid[h]}" 2>/dev/null; then
            wait "${svc_pid[h]}" || st=$?
            svc_pid[h]=''
            svc_fail "$h" "exited with status $st before it answered --status"
            return 1
        fi
        if out=$(svc_status "$h" 2>&1); then
            [[ -z $expect ]] || grep -Eq -- "$expect" <<<"$out" || {
                svc_fail "$h" "answers --status, but no line of it matches '$expect':" "$out"
                return 1
            }
            return 0
        fi
        sleep 0.05
    done
    svc_fail "$h" "did not answer --status within ${SVC_START_S:-60} s:" "$out"
    return 1
}

# What went wrong with host H's service, and its log.
svc_fail() {
    local h=$1
    echo "$me: the service of host $h ${*:2}" >&2
    echo "--- svc$h.log:" >&2
    cat "$svc_logs/svc$h.log" >&2 2>/dev/null || true
}

svc_stop() {
    local h st rc=0 which=("$@")
    ((${#which[@]})) || which=("${!svc_pid[@]}")
    for h in "${which[@]}"; do [[ -z ${svc_pid[h]:-} ]] || kill -TERM "${svc_pid[h]}" 2>/dev/null || true; done
    for h in "${which[@]}"; do
        [[ -n ${svc_pid[h]:-} ]] || continue
        for _ in $(seq $((${SVC_STOP_S:-10} * 20))); do
            kill -0 "${svc_pid[h]}" 2>/dev/null || break
            sleep 0.05
        done
        if kill -0 "${svc_pid[h]}" 2>/dev/null; then
            echo "$me: the service of host $h did not stop within ${SVC_STOP_S:-10} s of SIGTERM" >&2
            kill -KILL "${svc_pid[h]}" 2>/dev/null || true
        fi
        st=0
        wait "${svc_pid[h]}" || st=$?
        svc_pid[h]=''
        if ((st != 0)); then
            svc_fail "$h" "exited with status $st"
            rc=1
        fi
    done
    return $rc
}

svc_kill_all() {
    local p
    for p in "${svc_pid[@]}"; do [[ -z $p ]] || kill -KILL "$p" 2>/dev/null || true; done
    for p in "${svc_pid[@]}"; do [[ -z $p ]] || wait "$p" 2>/dev/null || true; done
    svc_pid=()
}

# shellcheck disable=SC2154 # tmp, port, pids, want: the caller's (above)
svc_job() {
    local key r
    key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
    port=$((port + 1))
    pids=()
    for r in 0 1 2 3; do
        "$hosts_sh" exec "h$((r % 2))" env ULN_RANK=$r ULN_SIZE=4 ULN_ROOT="$ULNTEST_HOST_0:$port" \
            ULN_JOB_KEY="$key" ULN_SERVICE=required ULN_TRANSPORT=svc "$@" >"$tmp/r$r.out" 2>&1 &
        pids+=($!)
    done
}

svc_job_streaming() {
    local r end=$((SECONDS + 60))
    for r in 0 1 2 3; do
        until grep -q "rank $r streaming" "$tmp/r$r.out"; do
            kill -0 "${pids[r]}" 2>/dev/null || fail "$1: rank $r ended before streaming"
            ((SECONDS < end)) || fail "$1: rank $r not streaming after 60 s"
            sleep 0.05
        done
    done
    sleep 0.5 # mid-stream
}

svc_job_wait() {
    local r st end=$((SECONDS + $2))
    for r in 0 1 2 3; do
        while kill -0 "${pids[r]}" 2>/dev/null; do
            ((SECONDS < end)) || fail "$1: rank $r still runs after $2 s: a hang"
            sleep 0.1
        done
        st=0
        wait "${pids[r]}" || st=$?
        [[ $st == "${want[r]:-0}" ]] || fail "$1: rank $r exited with $st, not ${want[r]:-0}"
    done
}
