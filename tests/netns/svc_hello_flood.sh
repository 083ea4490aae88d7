#!/usr/bin/env bash
# netns.svc_hello_flood: HELLOs sprayed at a sealed service (ulnetd --secure
# encrypt, no --secret-file: a HELLO's check is computable). Two namespace
# hosts, one ulnetd each, four ranks; on host 0 a forger (tests/svc/forger.c
# hello) sends 4000 HELLOs, each from a fresh port with a fresh X25519 key,
# asking for an answer, 1 ms apart; after 2500 (more keyings than the udp
# link has places) ranks 0 and 2 stream NAPs to ranks 1 and 3 on host 1
# through the services while it goes on. The job must pass (every NAP, in
# order, data checked): host 0's service must still find a place at host 1's
# (without the places given again it finds none and the job dies). Host 1's
# service must have keyed at most its bucket's burst and rate over the spray
# (wire_seal.c, HELLO_KEYINGS_*), counted the rest as rate-limited, and given
# again the places beyond the link's 256. Without the bucket it keys ~780,
# over the bound (~520).
# Usage: svc_hello_flood.sh ULNETD FORGER
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2
burst=64 rate=64 real=4 # wire_seal.c's bucket; host 0's service (and a spare)
places=256              # the udp link's
tmp=$(mktemp -d)
jpid=''
cleanup() {
    [[ -z $jpid ]] || { kill "$jpid" 2>/dev/null || true; wait "$jpid" 2>/dev/null || true; }
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "netns.svc_hello_flood: $*" >&2; cat "$tmp/out" "$tmp/status" >&2 2>/dev/null; exit 1; }
"$here/run_job.sh" --hosts 2 --ranks 4 --timeout 150 --svc "$ulnetd" --svc-arg --secure \
    --svc-arg encrypt --env ULN_SECURE=encrypt -- "$prog" hello >"$tmp/out" 2>&1 &
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
line=$(grep "^secure: " "$tmp/status") || fail "no secure line in --status"
read -r sent took < <(sed -n 's/^forger: hellos \([0-9]*\) in \([0-9.]*\) s$/\1 \2/p' "$tmp/out") || true
[[ -n ${took:-} ]] || fail "the forger did not finish its HELLOs before the job's end"
read -r limited keyings freed < <(echo "$line" |
    sed -n 's/.* rate-limited \([0-9]*\); keyings \([0-9]*\); places freed \([0-9]*\);.*/\1 \2 \3/p') || true
[[ -n ${freed:-} ]] || fail "cannot read: $line"
bound=$((burst + rate * (${took%.*} + 2) + real)) # whole seconds, and a second of slack
echo "netns.svc_hello_flood: host 1: $line; forger: $sent HELLOs in $took s; keyings bound $bound;" \
    "$(grep '^memory:' "$tmp/status")"
((keyings <= bound)) || fail "$keyings keyings, over the bound $bound"
((keyings >= 1)) || fail "no keying at all"
((limited >= sent - bound)) || fail "only $limited HELLOs rate-limited of $sent"
((keyings <= places || freed >= 1)) || fail "$keyings keyings beyond $places places, none freed"
echo "netns.svc_hello_flood: passed"
