#!/usr/bin/env bash
# netns.svc_secure: ULN_SECURE binds the services' wire too (issue 33). Two
# namespace hosts, one ulnetd each, whose wire is not sealed (at first):
#   ULN_SECURE=encrypt or auth with ULN_TRANSPORT=svc and a peer on the other
#       host: every rank fails at uln_open, saying why with both settings
#       named, and no datagram crossed the services' wire;
#   ULN_SECURE=off: the same job runs (so the refusal is the setting's);
#   ULN_SECURE=encrypt with every peer on this host: runs (the service writes
#       into mapped rings there; no wire carries them);
#   ulninfo under ULN_SECURE=encrypt says the wire is weaker than asked;
#   services with --secure auth: ULN_SECURE=encrypt refused, auth runs.
# Usage: svc_secure.sh ULNETD JOB ULNINFO
#   JOB: an integration body that passes against two ranks (it_remote_completion).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=$1 job=$2 ulninfo=$3
fail() {
    echo "netns.svc_secure: $*" >&2
    echo "$out" >&2
    exit 1
}

# run ARGS...: run_job.sh ARGS with the services; output in $out, status in $rc.
run() {
    rc=0
    out=$("$here/run_job.sh" --timeout 60 --svc "$ulnetd" "$@" 2>&1) || rc=$?
    ((rc != 77)) || exit 77 # no namespaces here: skipped
}

for mode in encrypt auth; do
    run --hosts 2 --ranks 2 --env ULN_SECURE=$mode -- "$job"
    ((rc != 0)) || fail "ULN_SECURE=$mode ran through a wire in clear"
    for r in 0 1; do
        grep -q "rank $r: ULN_TRANSPORT=svc with ULN_SECURE=$mode: the host's ulnetd seals its wire to other hosts only 'off'" <<<"$out" ||
            fail "rank $r did not say why under ULN_SECURE=$mode"
    done
    grep -q 'returned -71 (-EPROTO)' <<<"$out" || fail "uln_open did not fail with -EPROTO"
    # Both services' --status: nothing sent over the wire, nothing received.
    [[ $(grep -c '^wire: datagrams sent 0, received 0' <<<"$out") == 2 ]] ||
        fail "the services' wire carried datagrams under ULN_SECURE=$mode"
done

run --hosts 2 --ranks 2 --env ULN_SECURE=off -- "$job"
((rc == 0)) || fail "ULN_SECURE=off through the services failed"

run --hosts 1 --ranks 2 --env ULN_SECURE=encrypt -- "$job"
((rc == 0)) || fail "ULN_SECURE=encrypt with every peer on one host failed"

run --hosts 1 --ranks 1 --env ULN_SECURE=encrypt -- "$ulninfo"
((rc == 0)) || fail "ulninfo failed"
grep -q 'its wire to other hosts sealed *off, less than ULN_SECURE=encrypt: peers on other hosts not through it' \
    <<<"$out" || fail "ulninfo does not say the wire is weaker than ULN_SECURE"
run --hosts 1 --ranks 1 -- "$ulninfo"
grep -q 'its wire to other hosts sealed *off$' <<<"$out" || fail "ulninfo: the wire's mode under off"
# A service sealing with auth: enough for ULN_SECURE=auth, not for encrypt.
run --hosts 2 --ranks 2 --svc-arg --secure --svc-arg auth --env ULN_SECURE=encrypt -- "$job"
((rc != 0)) || fail "ULN_SECURE=encrypt ran through a wire sealed with auth only"
grep -q "ULN_TRANSPORT=svc with ULN_SECURE=encrypt: the host's ulnetd seals its wire to other hosts only 'auth'" \
    <<<"$out" || fail "no reason for encrypt against the service's auth"
run --hosts 2 --ranks 2 --svc-arg --secure --svc-arg auth --env ULN_SECURE=auth -- "$job"
((rc == 0)) || fail "ULN_SECURE=auth through services sealing with auth failed"
echo "netns.svc_secure: passed"
