#!/usr/bin/env bash
# netns.svc_forger: unknown sources on the wire between services
# (docs/service.md, "Between services"). Two namespace hosts, one ulnetd
# each, four ranks; on host 0 a forger (tests/svc/forger.c) sends wire
# datagrams with the right magic to host 1's service from thousands of fresh
# ports, proves 64 addresses by answering the service's hellos and keeps
# spraying while ranks 0 and 2 stream NAPs to ranks 1 and 3 on host 1. The
# job must pass (every NAP, in order, data checked), and host 1's service
# must have refused and counted the forged datagrams, kept at most its bound
# of remotes no route names, and freed the proven ones once they fell
# silent. Usage: svc_forger.sh ULNETD FORGER
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2
tmp=$(mktemp -d)
jpid=''
cleanup() {
    [[ -z $jpid ]] || { kill "$jpid" 2>/dev/null || true; wait "$jpid" 2>/dev/null || true; }
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "netns.svc_forger: $*" >&2; cat "$tmp/out" "$tmp/status" >&2 2>/dev/null; exit 1; }
"$here/run_job.sh" --hosts 2 --ranks 4 --timeout 150 --svc "$ulnetd" -- "$prog" >"$tmp/out" 2>&1 &
jpid=$!
for _ in $(seq 2400); do
    grep -q "forger: rank 1 done" "$tmp/out" && break
    kill -0 "$jpid" 2>/dev/null || break
    sleep 0.05
done
run=$(sed -n 's/^forger: netns \([a-z0-9]*\)$/\1/p' "$tmp/out")
if grep -q "forger: rank 1 done" "$tmp/out" && [[ -n $run ]]; then
    "$here/hosts.sh" exec --run "$run" h1 "$ulnetd" --status >"$tmp/status" 2>&1 || true
fi
rc=0
wait "$jpid" || rc=$?
jpid=
((rc == 77)) && exit 77 # no namespaces here: skipped
((rc == 0)) || fail "the job's status $rc"
(($(grep -c "forger: rank [0-3] stream done" "$tmp/out") == 4)) || fail "a stream did not end"
[[ -s $tmp/status ]] || fail "no --status from host 1's service"
proved=$(sed -n 's/^forger: blind [0-9]* proved \([0-9]*\) of.*/\1/p' "$tmp/out")
line=$(grep "^wire: .* remote services" "$tmp/status") || fail "no wire line in --status"
read -r remotes strangers refused freed < <(echo "$line" |
    sed -n 's/.*, \([0-9]*\) remote services (\([0-9]*\) no route names).*refused \([0-9]*\), silent ones freed \([0-9]*\).*/\1 \2 \3 \4/p')
[[ -n ${freed:-} ]] || fail "cannot read: $line"
echo "netns.svc_forger: host 1: $line; forger proved $proved; $(grep '^memory:' "$tmp/status")"
((proved >= 1)) || fail "the service answered none of the forger's hellos"
((refused >= 3000)) || fail "only $refused forged datagrams refused"
((strangers <= 32 && remotes <= 34)) || fail "$remotes remotes, $strangers unnamed: over the bound"
((freed >= proved)) || fail "$freed freed, $proved proven sources"
echo "netns.svc_forger: passed"
