#!/usr/bin/env bash
# no_leftovers.sh CMD... - run CMD (a job) with a /dev/shm and a /tmp of its
# own, and fail if it leaves anything in them.
#
# ulnet names no shared-memory object and no file: its segments are memfds,
# its doorbells abstract sockets. So however a job ends - even with a rank
# killed by SIGKILL - nothing may remain. Checking the real /dev/shm would
# race with other tests running alongside; a private mount namespace with
# fresh tmpfs mounts sees only this job.
#
# Exit status: CMD's, or 1 if something was left behind (CMD's status is then
# printed). Without the privilege to make a mount namespace, CMD runs as it
# is and the check is reported skipped on stderr.
set -uo pipefail

if ! unshare --mount --propagation private true 2>/dev/null; then
    echo "no_leftovers: cannot make a mount namespace here; leftover check skipped" >&2
    exec "$@"
fi

# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size=64m ulnet-shm /dev/shm || exit 1
    mount -t tmpfs -o size=64m ulnet-tmp /tmp || exit 1
    "$@"
    rc=$?
    left=$(find /dev/shm /tmp -mindepth 1 2>/dev/null)
    if [[ -n $left ]]; then
        echo "no_leftovers: the job (status $rc) left behind:" >&2
        echo "$left" >&2
        exit 1
    fi
    echo "no_leftovers: nothing left in /dev/shm or /tmp (status $rc)" >&2
    exit $rc
' no_leftovers "$@"
