#!/usr/bin/env bash
# A job whose every peer is reached through a ulnetd of its own
# (ULN_TRANSPORT=svc, ULN_SERVICE=required): the service is started on a
# socket named after this run, the job runs under ulnrun, and the service
# must have forwarded the job's messages and seen every process go.
# Usage: job.sh ULNETD ULNRUN NP [--expect-status S] [ULNRUN OPTIONS...] -- PROGRAM ARGS...
# --expect-status: ulnrun's status must be S (a rank killed: 137).
set -euo pipefail
ulnetd=$1 ulnrun=$2 np=$3
shift 3
expect=0
opts=()
while [[ $1 != -- ]]; do
    if [[ $1 == --expect-status ]]; then expect=$2; shift 2; else opts+=("$1"); shift; fi
done
shift
. "$(dirname "$0")/service.sh"
svc_start "$ulnetd" job
rc=0
ULN_SERVICE=required ULN_SERVICE_PATH=$path ULN_TRANSPORT=svc \
    "$ulnrun" -n "$np" "${opts[@]}" "$@" || rc=$?
s=$(svc_status)
if ((rc != expect)); then
    echo "job.sh: ulnrun's status $rc, expected $expect" >&2
    echo "--- ulnetd:" >&2
    cat "$tmp/d.log" >&2
    echo "$s" >&2
    exit 1
fi
# Everything went through the service, and every process is gone from it.
# (A rank killed on purpose leaves messages sent to it after its death
# unroutable: counted, not delivered.)
unroutable='0'
((expect == 0)) || unroutable='[0-9]*'
grep -q "messages: forwarded [1-9][0-9]*, unroutable $unroutable;" <<<"$s" ||
    { echo "job.sh: $s" >&2; exit 1; }
grep -q "processes: 0 attached" <<<"$s" || { echo "job.sh: still attached: $s" >&2; exit 1; }
grep -q "malformed 0" <<<"$s" || { echo "job.sh: $s" >&2; exit 1; }
