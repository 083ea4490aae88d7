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
# netns.svc_hello_flood (hello [RATE [BOUND]]): HELLOs flooded at both
# sealed services (ulnetd --secure encrypt, no --secret-file: a HELLO's
# check is computable), RATE a second each (default 20000) for 6 s, from
# spoofed sources (addresses no host has, random ports: answers and cookies
# go nowhere), with keys of a pool, asking for an answer; one in 8 with a
# made-up cookie, and one in 8 of host 0's a made-up COOKIE as if from host
# 1's service. The job starts after 1 s of it. Host 0's service must have
# waited at most BOUND ms (default 500) for host 1's key (--status: its
# longest wait from a packet held to the keying): over the bucket, host 1
# answers host 0's HELLO with a cookie and takes it back at once
# (wire_seal.c), a round trip. Without cookies its HELLOs wait for a token
# among the flood's: about RATE / 12800 s on average (a geometric wait:
# within 0.5 s at 20000 a second about 1 time in 4; at 100000, 1 in 16).
# Both services are flooded, or host 1 would key host 0 through the answer
# to its own ask (never limited) as soon as it has something to send.
# Host 1's service must have keyed at most its bucket's burst and rate over
# the flood (wire_seal.c, HELLO_KEYINGS_*), counted the rest as rate-limited
# (of those that reached it), sent cookies, accepted host 0's, refused the
# made-up ones, and given again the places beyond the link's 256; host 0's
# must have ignored the made-up COOKIEs (not its nonce) and still keyed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 prog=$2 mode=${3:-}
name=netns.svc_forger job=() args=()
rate=${4:-20000} key_bound=${5:-500}
if [[ $mode == hello ]]; then
    name=netns.svc_hello_flood
    job=(--svc-arg --secure --svc-arg encrypt --env ULN_SECURE=encrypt)
    args=(hello "$rate")
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
    "$prog" "${args[@]}" >"$tmp/out" 2>&1 &
jpid=$!
for _ in $(seq 2400); do
    grep -q "forger: rank 1 done" "$tmp/out" && break
    kill -0 "$jpid" 2>/dev/null || break
    sleep 0.05
done
run=$(sed -n 's/^forger: netns \([a-z0-9]*\)$/\1/p' "$tmp/out")
if grep -q "forger: rank 1 done" "$tmp/out" && [[ -n $run ]]; then
    "$here/hosts.sh" exec --run "$run" h1 "$ulnetd" --status >"$tmp/status" 2>&1 || true
    "$here/hosts.sh" exec --run "$run" h0 "$ulnetd" --status >"$tmp/status0" 2>&1 || true
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
    read -r hin hrefused limited keyings freed < <(echo "$line" |
        sed -n 's/.* hellos in \([0-9]*\), out [0-9]*, refused \([0-9]*\), rate-limited \([0-9]*\); keyings \([0-9]*\); places freed \([0-9]*\);.*/\1 \2 \3 \4 \5/p') || true
    read -r csent caccepted crefused < <(echo "$line" |
        sed -n 's/.* cookies sent \([0-9]*\), accepted \([0-9]*\), refused \([0-9]*\) .*/\1 \2 \3/p') || true
    [[ -n ${freed:-} && -n ${crefused:-} ]] || fail "cannot read: $line"
    first=$(sed -n 's/^forger: rank [13] first NAP in \([0-9.]*\) s$/\1/p' "$tmp/out" | sort -n | head -1)
    wait=$(sed -n 's/^secure: .* waits for a key: longest \([0-9]*\) us.*/\1/p' "$tmp/status0")
    read -r got0 ignored0 < <(sed -n 's/^secure: .* cookies got \([0-9]*\), ignored \([0-9]*\);.*/\1 \2/p' "$tmp/status0") || true
    [[ -n $first && -n $wait ]] || fail "no first NAP time or host 0's wait for a key"
    bound=$((burst + rate * (${took%.*} + 2) + real)) # whole seconds, and a second of slack
    echo "$name: host 1: $line; forger: $sent HELLOs in $took s; host 0 waited $wait us for" \
        "host 1's key, got $got0 cookies, ignored $ignored0; first NAP in $first s;" \
        "keyings bound $bound; $(grep '^memory:' "$tmp/status")"
    ((wait <= key_bound * 1000)) || fail "host 0 waited $wait us for a key, over $key_bound ms"
    ((keyings <= bound)) || fail "$keyings keyings, over the bound $bound"
    ((keyings >= 1)) || fail "no keying at all"
    # What reached the service (the kernel drops what it cannot queue):
    # each HELLO keyed (or answered), refused or limited.
    got=$((hin + hrefused + limited))
    ((got >= sent / 8)) || fail "only $got of $sent HELLOs (half of them its) reached the service"
    ((limited >= got - bound - hrefused)) || fail "only $limited HELLOs rate-limited of $got"
    if ((rate > 0)); then # (0: the measure without a flood)
        ((csent >= 1)) || fail "no cookie sent"
        # (host 0 may win a token of the bucket before it needs a cookie)
        ((got0 == 0 || caccepted >= 1)) || fail "host 0's cookie not accepted"
        ((crefused >= 1)) || fail "no made-up cookie refused"
        ((ignored0 >= 1)) || fail "host 0 took no notice of the made-up COOKIEs"
    fi
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
