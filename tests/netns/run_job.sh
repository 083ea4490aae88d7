#!/usr/bin/env bash
# run_job.sh - run one ulnet job across network-namespace "hosts": the way a
# cluster launcher would, with nothing but environment variables (ULN_RANK,
# ULN_SIZE, ULN_ROOT, ULN_JOB_KEY), and without ulnrun.
#
#   run_job.sh [--hosts H] [--ranks N] [--timeout S] [--expect-status X]
#              [--rate R] [--drop-pct P --drop-on hostK] [--env VAR=value]...
#              [--root-any] [--svc ULNETD [--svc-link KIND] [--svc-hook HOOK] [--svc-arg A]...]
#              [--pin-hosts] [--user USER]
#              -- PROGRAM ARGS...
#
# Makes H hosts with hosts.sh (default 2), places rank r on host r % H (so
# with N > H some peers share a host and talk over shared memory, the others
# over UDP), runs the job, and removes the hosts afterwards, also when the job
# fails, hangs (--timeout, default 120 s: exit 124) or the script is
# interrupted. The first rank to fail ends the job; its status is ours.
# --expect-status X: succeed iff some rank exited with X and none failed
# otherwise (e.g. 137 for a rank that kills itself).
# Each rank also gets ULNTEST_IT_EXPECT_UDP_PEERS: how many of its peers are on
# other hosts, which the integration tests check against uln_query.
# --root-any: rank 0 listens on ULN_ROOT=0.0.0.0:port (the others still reach
# it at its host's address), so it must publish the address its route says.
# --svc ULNETD: one ulnetd per host (--addr its host's address), every rank
# attached to its host's (ULN_SERVICE=required) and every peer reached through
# the services (ULN_TRANSPORT=svc); their --status is printed at the end.
# --svc-link KIND: the services' --link (udp, xdp, auto); with udp or xdp the
# job fails unless every service's --status says it runs on that link.
# --svc-hook HOOK: the services' --xdp-hook (native, generic); the job fails
# unless every service's --status says its AF_XDP program hooks in there.
# --svc-arg ARG: one more option for every ulnetd (repeatable; e.g. --no-map).
# --user USER: every rank runs as USER (its own group, no supplementary ones)
# with no capabilities at all, not even in its bounding set, and no way to
# gain any (setpriv); checked in each host before the job. The program is
# copied where USER may run it when it may not where it is.
# --pin-hosts: everything of host h (its service, its ranks) on CPU h % ncpu
# (taskset), as one CPU per host would be: bench/svc measures so.
# Exit 77 (ctest's "skipped") when this machine cannot make namespaces.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts=2 ranks=0 timeout=120 expect="" up_args=() envs=() root_any=0 svc='' svc_link='' svc_args=() pin=0
svc_hook='' user=
while [[ $# -gt 0 ]]; do
    case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --expect-status) expect=$2; shift 2 ;;
    --rate) up_args+=(--rate "$2"); shift 2 ;;
    --drop-pct) up_args+=(--drop-pct "$2"); shift 2 ;;
    --drop-on) up_args+=(--drop-on "$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --root-any) root_any=1; shift ;;
    --svc) svc=$2; shift 2 ;;
    --svc-link) svc_link=$2; shift 2 ;;
    --svc-hook) svc_hook=$2; svc_args+=(--xdp-hook "$2"); shift 2 ;;
    --svc-arg) svc_args+=("$2"); shift 2 ;;
    --user) user=$2; shift 2 ;;
    --pin-hosts) pin=1; shift ;;
    --) shift; break ;;
    *) echo "run_job.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $# -gt 0 ]] || { echo "run_job.sh: no program" >&2; exit 2; }
((ranks > 0)) || ranks=$hosts
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "run_job.sh: no network namespaces here: skipped"; exit 77; }
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"

pids=()
svc_logs=$(mktemp -d)
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    [[ -z $svc ]] || svc_report
    hosts_end
    rm -rf "$svc_logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hosts_up "$hosts" "${up_args[@]}"

# The command prefix that places a process of host h (--pin-hosts).
on_cpu() { if ((pin)); then echo "taskset -c $(($1 % $(nproc)))"; fi; }

svc_report() {
    for h in "${!svc_pid[@]}"; do
        echo "--- h$h:"
        svc_status "$h" 2>&1 || true
        cat "$svc_logs/svc$h.log" 2>/dev/null || true
    done
}
if [[ -n $svc ]]; then
    # --svc-link udp or xdp, --svc-hook: every service's --status says so.
    line=''
    [[ $svc_link != udp && $svc_link != xdp ]] || line="^link: $svc_link "
    [[ -z $svc_hook ]] || line="^link: xdp $svc_hook,"
    svc_opts=(--expect "$line")
    ((pin == 0)) || svc_opts+=(--pin)
    svc_start "${svc_opts[@]}" "$svc" ${svc_link:+--link "$svc_link"} "${svc_args[@]}"
    envs+=(ULN_SERVICE=required ULN_TRANSPORT=svc)
fi

# --user: the ranks' prefix, and proof in every host that it leaves them no
# privilege (uid and gid USER's, every capability set empty, no_new_privs).
as_user=()
if [[ -n $user ]]; then
    uid=$(id -u "$user") gid=$(id -g "$user")
    as_user=(setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all
        --bounding-set=-all --no-new-privs --)
    for ((h = 0; h < hosts; h++)); do
        st=$("$here/hosts.sh" exec "h$h" "${as_user[@]}" cat /proc/self/status)
        bad=$(awk -v u="$uid" -v g="$gid" '
            /^Uid:/ && ($2 != u || $3 != u || $4 != u || $5 != u) { print }
            /^Gid:/ && ($2 != g || $3 != g || $4 != g || $5 != g) { print }
            /^Groups:/ && NF > 1 && !(NF == 2 && $2 == g) { print }
            /^Cap(Inh|Prm|Eff|Bnd|Amb):/ && $2 !~ /^0+$/ { print }
            /^NoNewPrivs:/ && $2 != 1 { print }' <<<"$st")
        [[ -z $bad ]] || { echo "run_job.sh: --user $user keeps privilege: $bad" >&2; exit 1; }
    done
    prog=$1
    if ! "${as_user[@]}" test -x "$prog"; then
        chmod 755 "$svc_logs"
        cp "$prog" "$svc_logs/" && chmod 755 "$svc_logs/$(basename "$prog")"
        prog=$svc_logs/$(basename "$prog")
    fi
    shift
    set -- "$prog" "$@"
fi

root_var=ULNTEST_HOST_0
port=$((20000 + RANDOM % 20000))
key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
for ((r = 0; r < ranks; r++)); do
    h=$((r % hosts))
    # Ranks of other hosts: all but those placed on host h.
    same=$(((ranks - 1 - h) / hosts + 1))
    remote=$((ranks - same))
    [[ -z $svc ]] || remote=0 # every peer through the services, none on udp
    root="${!root_var}:$port"
    ((r == 0 && root_any)) && root="0.0.0.0:$port"
    # shellcheck disable=SC2046 # on_cpu's words
    "$here/hosts.sh" exec "h$h" $(on_cpu "$h") "${as_user[@]}" env ULN_RANK=$r ULN_SIZE=$ranks ULN_ROOT="$root" \
        ULN_JOB_KEY="$key" ULNTEST_IT_EXPECT_UDP_PEERS=$remote "${envs[@]}" "$@" &
    pids+=($!)
done

# Wait for every rank; the first failure (or the deadline) ends the job.
deadline=$((SECONDS + timeout))
status=0 seen_expect=0 left=${#pids[@]}
declare -A done_pid=()
while ((left > 0)); do
    for p in "${pids[@]}"; do
        [[ -n ${done_pid[$p]:-} ]] && continue
        kill -0 "$p" 2>/dev/null && continue
        st=0
        wait "$p" || st=$?
        done_pid[$p]=1
        left=$((left - 1))
        if [[ -n $expect && $st == "$expect" ]]; then
            seen_expect=1
        elif ((st != 0 && status == 0)); then
            status=$st
            echo "run_job.sh: a rank exited with status $st; ending the job" >&2
            for q in "${pids[@]}"; do kill -TERM "$q" 2>/dev/null || true; done
        fi
    done
    if ((left > 0 && SECONDS >= deadline)); then
        echo "run_job.sh: job still running after ${timeout} s; ending it" >&2
        status=124
        for q in "${pids[@]}"; do kill -KILL "$q" 2>/dev/null || true; done
        deadline=$((SECONDS + 3600))
    fi
    sleep 0.05
done
if [[ -n $expect ]]; then
    if ((status == 0 && !seen_expect)); then
        echo "run_job.sh: expected a rank to exit with $expect (status $status, seen $seen_expect)" >&2
        status=1
    fi
fi
# The services stop as systemd stops them (SIGTERM): each must exit 0, so a
# service that crashes, or leaks under ASan, fails the job.
if [[ -n $svc ]]; then
    svc_report
    svc_stop || ((status)) || status=1
    svc=''
fi
exit $status
