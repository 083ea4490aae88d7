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
# Any checkout path works: where CMD, its arguments or the working directory
# live under /tmp (a checkout or build directory there), the fresh /tmp would
# hide them, so each such top-level entry of the real /tmp is bind-mounted back
# at its own path. The check then skips those mounts (find -xdev): what the
# job writes into its own build tree is not a leftover of ulnet's, exactly as
# when the checkout lives elsewhere.
#
# Exit status: 1 if something was left behind (CMD's status is printed),
# else CMD's. Without the privilege to make a mount namespace the leftover
# check - this wrapper's whole point - cannot be made: CMD still runs, a
# failure of it is still its status, but a success is reported as a skip
# (77, ctest's SKIP_RETURN_CODE), never as a silent pass.
set -uo pipefail

if ! unshare --mount --propagation private true 2>/dev/null; then
    "$@"
    rc=$?
    ((rc == 0)) || exit $rc
    echo "no_leftovers: SKIPPED: cannot make a mount namespace here; the job passed," \
        "but nothing checked what it left in /dev/shm or /tmp" >&2
    exit 77
fi

# The top-level entries of /tmp the job needs: those its command, arguments
# and working directory go through.
keep=()
for p in "$PWD" "$@"; do
    [[ $p == /tmp/?* ]] || continue
    top=${p#/tmp/}
    top=${top%%/*}
    [[ -e /tmp/$top ]] && keep+=("$top")
done

# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare --mount --propagation private bash -c '
    nkeep=$1
    shift
    keep=("${@:1:nkeep}")
    shift "$nkeep"
    # A handle on the real /tmp, to bind from once the fresh one covers it;
    # --no-canonicalize, or mount would resolve /proc/self/fd/3 to the
    # path "/tmp" - the fresh, empty one.
    exec 3</tmp || exit 1
    mount -t tmpfs -o size=64m ulnet-shm /dev/shm || exit 1
    mount -t tmpfs -o size=64m ulnet-tmp /tmp || exit 1
    for k in "${keep[@]}"; do
        if [[ -d /proc/self/fd/3/$k ]]; then
            mkdir -p "/tmp/$k" || exit 1
        else
            touch "/tmp/$k" || exit 1
        fi
        mount --no-canonicalize --bind "/proc/self/fd/3/$k" "/tmp/$k" || exit 1
    done
    exec 3<&-
    cd "$PWD" || exit 1 # the same directory, now reached through the bind mount
    before=$(find /dev/shm /tmp -xdev -mindepth 1 2>/dev/null | sort)
    "$@"
    rc=$?
    after=$(find /dev/shm /tmp -xdev -mindepth 1 2>/dev/null | sort)
    left=$(comm -13 <(echo "$before") <(echo "$after"))
    if [[ -n $left ]]; then
        echo "no_leftovers: the job (status $rc) left behind:" >&2
        echo "$left" >&2
        exit 1
    fi
    echo "no_leftovers: nothing left in /dev/shm or /tmp (status $rc)" >&2
    exit $rc
' no_leftovers "${#keep[@]}" "${keep[@]}" "$@"
