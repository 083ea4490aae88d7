#!/usr/bin/env bash
# netns.svc_nopriv_<hook>: processes with no privilege use AF_XDP through
# their host's service (issue 32: "the processes that use it need no
# privilege"). The services run as root with --link xdp --xdp-hook HOOK; every
# rank runs as USER (default nobody) with every capability set empty and
# no_new_privs (run_job.sh --user checks that in each host first).
#   - ulninfo as USER says it is attached and the link is the service's xdp
#     under that hook, and the service saw USER's uid attach;
#   - 2 hosts x 4 ranks, all pairs: PUT, GET, fetch-add and NAP, data checked
#     (kill_stream rounds), then every operation and size (ops_sizes);
#   - the services attached USER's processes only.
# Usage: svc_nopriv.sh ULNETD ULNINFO KILL_STREAM OPS_SIZES HOOK [USER]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 ulninfo=$2 stream=$3 ops=$4 hook=$5 user=${6:-nobody}
uid=$(id -u "$user")
((uid != 0)) || { echo "svc_nopriv.sh: $user is root" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "netns.svc_nopriv_$hook: $*" >&2; cat "$tmp/out" >&2; exit 1; }
run() {
    local rc=0
    "$here/run_job.sh" --svc "$ulnetd" --svc-link xdp --svc-hook "$hook" --user "$user" "$@" \
        >"$tmp/out" 2>&1 || rc=$?
    ((rc != 77)) || exit 77 # no namespaces here: skipped
    ((rc == 0)) || fail "run_job.sh $* ended with $rc"
    # Every process the services attached was USER's.
    grep -q "attached pid [0-9]* uid $uid " "$tmp/out" || fail "no process of uid $uid attached"
    ! grep "attached pid [0-9]* uid " "$tmp/out" | grep -v " uid $uid " >/dev/null || fail "a process of another uid attached"
}
run --hosts 1 --ranks 1 --timeout 60 -- "$ulninfo"
grep -Eq "^  service +attached to ulnetd at @ulnet/ulnetd \(client [0-9]+\), link xdp $hook, " "$tmp/out" ||
    fail "ulninfo as $user: not the service's xdp link with the $hook hook: $(grep '^  service ' "$tmp/out")"
run --hosts 2 --ranks 4 --timeout 120 -- "$stream" rounds 100
[[ $(grep -c "rank [0-3]: ok" "$tmp/out") == 4 ]] || fail "all pairs: not every rank ok"
run --hosts 2 --ranks 4 --timeout 150 -- "$ops" 18
[[ $(grep -c "passed, 0 failed" "$tmp/out") == 4 ]] || fail "ops_sizes: not every rank passed"
echo "netns.svc_nopriv_$hook: passed (uid $uid)"
