#!/usr/bin/env bash
# svc_forger.sh ULNETD FORGER [hello] - a forger on the wire between services
# (docs/service.md, "Between services"). Two namespace hosts, one ulnetd
# each, four ranks; a forger (tests/svc/forger.c) on host 0 sprays at host 1's
# service while ranks 0 and 2 stream NAPs to ranks 1 and 3 on host 1. The job
# must pass (every NAP, in order, data checked) in both modes.
#
# netns.svc_forger (no mode): wire datagrams with the right magic from
# thousands of fresh ports; the forger proves 64 addresses by answering the
# service's hellos and keeps spraying. Host 1's service must have refused and
# counted the forged datagrams, kept at most its bound of remotes no route
# names, and freed the proven ones once they fell silent.
#
# netns.svc_hello_flood (hello): HELLOs sprayed at a sealed service (ulnetd
# --secure encrypt, no --secret-file: a HELLO's check is computable): 4000,
# each from a fresh port with a fresh X25519 key, asking for an answer, 1 ms
# apart; the stream starts after 2500 (more keyings than the udp link has
# places): host 0's service must still find a place at host 1's (without the
# places given again it finds none and the job dies). Host 1's service must
# have keyed at most its bucket's burst and rate over the spray (wire_seal.c,
# HELLO_KEYINGS_*), counted the rest as rate-limited, and given again the
# places beyond the link's 256. Without the bucket it keys ~780, over the
# bound (~520).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 mode=${3:-}
name=netns.svc_forger job=()
if [[ $mode == hello ]]; then
    name=netns.svc_hello_flood
    job=(--svc-arg --secure --svc-arg encrypt --env ULN_SECURE=encrypt)
fi
tmp=$(mktemp -d)
jpid=''
cleanup() {
    [[ -z $jpid ]] || { kill "$jpid" 2>/dev/null || true; wait "$jpid" 2>/dev/null || true; }
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "$name: $*" >&2; cat "$tmp/out" "$tmp/status" >&2 2>/dev/null; exit 1; }
"$here/run_job.sh" --hosts 2 --ranks 4 --timeout 150 --svc "$ulnetd" "${job[@]}" -- \
    "$prog" ${mode:+"$mode"} >"$tmp/out" 2>&1 &
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
if [[ $mode == hello ]]; then
    burst=64 rate=64 real=4 # wire_seal.c's bucket; host 0's service (and a spare)
    places=256              # the udp link's
    line=$(grep "^secure: " "$tmp/status") || fail "no secure line in --status"
    read -r sent took < <(sed -n 's/^forger: hellos \([0-9]*\) in \([0-9.]*\) s$/\1 \2/p' "$tmp/out") || true
    [[ -n ${took:-} ]] || fail "the forger did not finish its HELLOs before the job's end"
    read -r limited keyings freed < <(echo "$line" |
        sed -n 's/.* rate-limited \([0-9]*\); keyings \([0-9]*\); places freed \([0-9]*\);.*/\1 \2 \3/p') || true
    [[ -n ${freed:-} ]] || fail "cannot read: $line"
    bound=$((burst + rate * (${took%.*} + 2) + real)) # whole seconds, and a second of slack
    echo "$name: host 1: $line; forger: $sent HELLOs in $took s; keyings bound $bound;" \
        "$(grep '^memory:' "$tmp/status")"
    ((keyings <= bound)) || fail "$keyings keyings, over the bound $bound"
    ((keyings >= 1)) || fail "no keying at all"
    ((limited >= sent - bound)) || fail "only $limited HELLOs rate-limited of $sent"
    ((keyings <= places || freed >= 1)) || fail "$keyings keyings beyond $places places, none freed"
    echo "$name: passed"
    exit 0
fi
proved=$(sed -n 's/^forger: blind [0-9]* proved \([0-9]*\) of.*/\1/p' "$tmp/out")
line=$(grep "^wire: .* remote services" "$tmp/status") || fail "no wire line in --status"
read -r remotes strangers refused freed < <(echo "$line" |
    sed -n 's/.*, \([0-9]*\) remote services (\([0-9]*\) no route names).*refused \([0-9]*\), silent ones freed \([0-9]*\).*/\1 \2 \3 \4/p')
[[ -n ${freed:-} ]] || fail "cannot read: $line"
echo "$name: host 1: $line; forger proved $proved; $(grep '^memory:' "$tmp/status")"
((proved >= 1)) || fail "the service answered none of the forger's hellos"
((refused >= 3000)) || fail "only $refused forged datagrams refused"
((strangers <= 32 && remotes <= 34)) || fail "$remotes remotes, $strangers unnamed: over the bound"
((freed >= proved)) || fail "$freed freed, $proved proven sources"
echo "$name: passed"
