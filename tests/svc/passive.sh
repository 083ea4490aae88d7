#!/usr/bin/env bash
# svc.passive: PUT, GET, atomics and refusals into a process asleep in
# pause() the whole time, served by the service (passive.c); the refusals
# are counted, and the target used (almost) no CPU.
# Usage: passive.sh ULNETD ULNRUN PASSIVE [nopriv]
# nopriv (svc.passive_nopriv, as root only): the service runs as nobody, so
# the kernel refuses it process_vm_* on the ranks (root's): it still serves
# everything in uln_mem_alloc memory through its mappings, and forwards the
# rest to the target's engine - which the target, sleeping 2 s and then
# waiting in ulnet, does once awake.
set -euo pipefail
ulnetd=$1 ulnrun=$2 prog=$3 mode=${4:-}
. "$(dirname "$0")/service.sh"
args=()
if [[ $mode == nopriv ]]; then
    if [[ $(id -u) != 0 ]] || ! command -v setpriv >/dev/null; then
        echo "svc.passive_nopriv: needs root and setpriv: skipped"
        exit 77
    fi
    wrap=$(mktemp -d)
    chmod 755 "$wrap"
    printf '#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "%s" "$@"\n' \
        "$ulnetd" >"$wrap/ulnetd"
    chmod 755 "$wrap/ulnetd"
    args=(2)
fi
start=$ulnetd
[[ -z ${wrap:-} ]] || start=$wrap/ulnetd
svc_start "$start" passive
if [[ -n ${wrap:-} ]]; then
    svc_ulnetd=$ulnetd # --status as ourselves
    rm -rf "$wrap"     # the service runs: its wrapper is done
fi
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n 2 --keep-going --timeout 120 "$prog" "${args[@]}" >"$tmp/out" 2>&1 &
svc_kill_at_exit $!
for _ in $(seq 2400); do grep -q "passive: ok\|exited with status [1-9]\|passive: .*expected" "$tmp/out" && break; sleep 0.05; done
cat "$tmp/out"
s=$(svc_status)
echo "$s"
grep -q "passive: ok" "$tmp/out" || { cat "$tmp/d.log" >&2; exit 1; }
# Rank 0's own end (its leak check under ASan comes at exit): bounded.
initiator=$(sed -n 's/.*initiator pid \([0-9]*\).*/\1/p' "$tmp/out")
for _ in $(seq 600); do [[ -d /proc/$initiator ]] || break; sleep 0.05; done
sleep 0.2 # ulnrun's word on it, if it failed
if grep -q "rank 0 (pid [0-9]*) exited with status [1-9]" "$tmp/out"; then cat "$tmp/out" >&2; exit 1; fi
# Every PUT fragment, GET and atomic was done by the service (1000
# fetch-adds and 2 CAS applied, through its mapping), 5 refused (and counted
# in the target's refusal counters, which it cannot report asleep).
grep -q "served here: [1-9][0-9]* PUT fragments and GETs, 5 refused; 1002 atomics, [1-9][0-9]* copies through a mapping" <<<"$s" || exit 1
if [[ $mode == nopriv ]]; then
    # The kernel did refuse it, and the malloc'd region's PUT and GET went
    # to the target's engine: every fragment and GET served here was mapped.
    grep -q "may not reach pid" "$tmp/d.log" || { echo "process_vm_* was not refused"; exit 1; }
    served=$(sed -n 's/.*served here: \([0-9]*\) PUT.*/\1/p' <<<"$s")
    mapped=$(sed -n 's/.* \([0-9]*\) copies through a mapping.*/\1/p' <<<"$s")
    ((served > 0 && served <= mapped)) || { echo "served $served, through a mapping $mapped"; exit 1; }
fi
echo "svc.passive${mode:+_$mode}: passed"
