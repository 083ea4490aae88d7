#!/usr/bin/env bash
# mismatch.sh ULNRUN PROG - a job whose members disagree on ULN_SECURE or on
# the job secret fails at start, every member saying why; a secret file
# others may read is refused with its reason; members that agree run.
#   PROG: any program that opens a context and closes it (ulninfo).
set -euo pipefail
ulnrun=$1 prog=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
    echo "mismatch.sh: $*" >&2
    exit 1
}
printf 'the secret of job one, 32 bytes.' >"$dir/s1"
printf 'the secret of job two, 32 bytes.' >"$dir/s2"
chmod 600 "$dir/s1" "$dir/s2"
export ULN_TRANSPORT=udp

# run ENV_FOR_RANK_1... : rank 0 with the environment as it is, rank 1 with
# the assignments given; stdout+stderr in $out, status in $rc.
run() {
    rc=0
    # shellcheck disable=SC2016 # expanded by the rank's shell, not this one
    out=$("$ulnrun" -n 2 --timeout 60 env RANK1_ENV="$*" bash -c \
        '[[ $ULN_RANK == 1 && -n $RANK1_ENV ]] && export $RANK1_ENV; exec "$0"' "$prog" 2>&1) ||
        rc=$?
}

run
((rc == 0)) || fail "two ranks that agree (off) failed: $out"
ULN_SECURE=auth run
((rc == 0)) || fail "two ranks that agree (auth) failed: $out"
ULN_SECURE=encrypt ULN_SECRET_FILE=$dir/s1 run
((rc == 0)) || fail "two ranks that agree (encrypt, one secret) failed: $out"

ULN_SECURE=auth run ULN_SECURE=encrypt
((rc != 0)) || fail "auth and encrypt in one job ran"
# Whichever rank finds out first says it (the launcher then ends the other).
grep -q 'ULN_SECURE=\(encrypt there, auth\|auth there, encrypt\) here: every member of a job must have the same' \
    <<<"$out" ||
    fail "no clear reason for auth against encrypt: $out"
ULN_SECURE=off run ULN_SECURE=auth
((rc != 0)) || fail "off and auth in one job ran"
grep -q 'ULN_SECURE=\(auth there, off\|off there, auth\) here' <<<"$out" ||
    fail "no clear reason for off/auth: $out"

ULN_SECURE=auth ULN_SECRET_FILE=$dir/s1 run "ULN_SECRET_FILE=$dir/s2"
((rc != 0)) || fail "two secrets in one job ran"
grep -q 'another job secret there: every member of a job must read the same ULN_SECRET_FILE' \
    <<<"$out" || fail "no clear reason for two secrets: $out"
ULN_SECURE=auth ULN_SECRET_FILE=$dir/s1 run ULN_SECRET_FILE=
((rc != 0)) || fail "a secret on one member only ran"
grep -q 'no job secret there, one here\|a job secret there, none here' <<<"$out" ||
    fail "no clear reason for a missing secret: $out"

chmod 640 "$dir/s1"
ULN_SECURE=auth ULN_SECRET_FILE=$dir/s1 run
((rc != 0)) || fail "a secret file the group may read was taken"
grep -q "ULN_SECRET_FILE=$dir/s1: must be a regular file of ours that others can neither read" \
    <<<"$out" || fail "no clear reason for a readable secret file: $out"
echo "mismatch.sh: every disagreement refused at start, with its reason"
