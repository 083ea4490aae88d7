#!/usr/bin/env bash
# xdp_link_local.sh - xdp_link_local (an AF_XDP link and a socket link on
# one host, tests/xdp/xdp_link_local.c) on a namespace host of its own
# (tests/netns/hosts.sh).
#
#   xdp_link_local.sh --built 0|1 [--hook native|generic] PROGRAM
#
# Exit 77 (skipped) without the link (--built 0) or namespaces.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_sh=$here/../netns/hosts.sh
built="" hook=native
while [[ $# -gt 0 ]]; do
    case $1 in
    --built) built=$2; shift 2 ;;
    --hook) hook=$2; shift 2 ;;
    *) break ;;
    esac
done
prog=${1:?xdp_link_local.sh: no program given}
[[ $built == 1 ]] || { echo "xdp_link_local.sh: ulnet built without the AF_XDP link: skipped"; exit 77; }
"$hosts_sh" probe >/dev/null 2>&1 || { echo "xdp_link_local.sh: no network namespaces here: skipped"; exit 77; }

set -a
eval "$("$hosts_sh" up 1)"
set +a
trap '"$hosts_sh" down >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
"$hosts_sh" exec h0 timeout 60 "$prog" "$ULNTEST_HOST_0" "$hook"
