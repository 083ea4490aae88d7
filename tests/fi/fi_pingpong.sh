#!/usr/bin/env bash
# libfabric's own fi_pingpong (Debian's libfabric-bin) over the ulnet
# provider, server and client as two unrelated processes that find each other
# through fi_pingpong's own control socket: every size, both transmit modes,
# data checked (-c), on RDM, connected (FI_EP_MSG) and datagram endpoints. With --hosts, the server and the client run on two
# network-namespace hosts (tests/netns/hosts.sh), so the data goes over udp;
# with --hosts ULNETD, through one ulnetd per host (the provider unchanged:
# ULN_TRANSPORT=svc), and both services must have forwarded it.
# Usage: fi_pingpong.sh PROVIDER_DIR [--hosts [ULNETD]]  (77: no fi_pingpong, no netns)
set -euo pipefail
command -v fi_pingpong >/dev/null || { echo "no fi_pingpong (libfabric-bin): skipped"; exit 77; }
export FI_PROVIDER_PATH=$1
hosts=${2:-}
svc=${3:-}
pass=(FI_PROVIDER_PATH="$FI_PROVIDER_PATH")
. "$(dirname "$0")/server_client.sh"
cd "$work"
port=$((20000 + RANDOM % 20000))
# endpoint type and mode: RDM both ways; a connected (FI_EP_MSG) endpoint, a
# datagram one (FI_EP_DGRAM: sizes up to its max_msg_size, one NAP); the
# largest size each must reach
runs=("rdm msg 1m" "rdm tagged 1m" "msg msg 1m" "dgram msg 4k")
# ULN_SECURE sealed (both sides: their addresses say so, docs/security.md):
# RDM, where each side inserts the other's name before data flows, and a
# connected endpoint, whose server learns its client from its first
# datagrams: their introduction (docs/security.md) carries the client's key.
if [[ ${ULN_SECURE:-off} != off ]]; then
    pass+=(ULN_SECURE="$ULN_SECURE")
    runs=("rdm msg 1m" "rdm tagged 1m" "msg msg 1m")
fi
for run in "${runs[@]}"; do
    read -r ep mode last <<<"$run"
    # -S all: 0 B to the largest size it tries (eager and rendezvous); -c: every byte checked
    run_srv timeout 120 fi_pingpong -p ulnet -e "$ep" -m "$mode" -B "$port" -S all -I 10 -c \
        >srv.out 2>&1 &
    srv=$!
    sleep 0.5
    if ! run_cli timeout 120 fi_pingpong -p ulnet -e "$ep" -m "$mode" -P "$port" -S all -I 10 -c \
        "$srv_addr" >cli.out 2>&1; then
        echo "client failed ($ep $mode):"; cat cli.out; echo "server:"; cat srv.out
        kill $srv 2>/dev/null || true
        exit 1
    fi
    wait $srv || { echo "server failed ($ep $mode):"; cat srv.out; exit 1; }
    grep -q "^$last " cli.out || { echo "no $last row ($ep $mode):"; cat cli.out; exit 1; }
    port=$((port + 1))
done
tail -3 cli.out
if [[ -n $svc ]]; then
    svc_forwarded
    echo "fi_pingpong over ulnet through the hosts' services: every size, rdm (msg, tagged), msg and dgram endpoints, data checked"
    exit 0
fi
if [[ ${ULN_SECURE:-off} != off ]]; then
    echo "fi_pingpong over ulnet, ULN_SECURE=$ULN_SECURE: every size, rdm (msg, tagged), msg endpoints, data checked"
else
    echo "fi_pingpong over ulnet: every size, rdm (msg, tagged), msg and dgram endpoints, data checked"
fi
