#!/usr/bin/env bash
# seal_attack.sh [--svc ULNETD] MODE VICTIM - ULN_SECURE=MODE against an
# attacker on the path.
#
# Three namespace hosts on one bridge, which floods every frame to every port
# (ageing 0: a hub, as a shared segment or a mirrored port is). Ranks 0 and 1
# of VICTIM (seal_victim.c) run on hosts 0 and 1; seal_attacker.py on host 2
# captures their datagrams during the traffic, then replays them, flips bits,
# cuts them, reorders them and forges a PUT, while the ranks read on. Then:
#   auth, encrypt  both ranks succeed (every round's data intact, before and
#                  after), and the refusals counted (refused_auth) are
#                  exactly the datagrams injected: every one refused, none
#                  taken. encrypt: neither the marked payload nor rank 1's
#                  region key appears anywhere in the capture.
#   off            the mark and the region key are in the capture, and the
#                  forged PUT lands in rank 1's region (it says FORGED): the
#                  attacker sends it again until rank 1 has seen it
#                  (DIR/forged_seen), before its other datagrams.
# --svc ULNETD: the services' sealed wire instead (ulnetd --secure MODE, auth
# or encrypt, encrypt also with --secret-file; issue 33): a ulnetd on hosts 0
# and 1, the ranks attached with ULN_TRANSPORT=svc, the attacker at the
# services' datagrams from their own addresses and ports; the refusals are
# the services' (refused_auth in --status).
# Exit 77 where this machine cannot make namespaces.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ulnetd=
if [[ ${1:-} == --svc ]]; then
    ulnetd=$2
    shift 2
fi
mode=$1 victim=$2
me="seal_attack.sh${ulnetd:+ --svc}"
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "$me: no namespaces: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "$me: no python3: skipped"; exit 77; }
# shellcheck source=hosts_lib.sh
. "$here/hosts_lib.sh"

dir=$(mktemp -d)
svc_logs=$dir
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    hosts_end
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hosts_up 3
fail() {
    echo "$me ($mode): $*" >&2
    for f in "$dir"/rank*.out "$dir"/attacker.out "$dir"/attack_done "$dir"/forged_seen \
        "$dir"/svc*.log "$dir"/status*; do
        [[ -f $f ]] && { echo "--- $(basename "$f")"; tail -20 "$f"; } >&2
    done
    exit 1
}

br=$ULNTEST_NETNS-br
ip netns exec "$br" ip link set br0 type bridge ageing_time 0
# Each datagram one frame, as a NIC puts it on the wire.
for k in 0 1 2; do
    ip netns exec "$ULNTEST_NETNS-h$k" ethtool -K eth0 tso off gso off tx-udp-segmentation off \
        >/dev/null 2>&1 || true
    ip netns exec "$br" ethtool -K "h$k" tso off gso off tx-udp-segmentation off >/dev/null 2>&1 ||
        true
done

# The services, sealing their wire; the ranks reach each other through them.
svc_env=(ULNTEST_IT_EXPECT_UDP_PEERS=1)
if [[ -n $ulnetd ]]; then
    [[ $mode != off ]] || fail "--svc tests auth and encrypt"
    secret=()
    if [[ $mode == encrypt ]]; then
        printf 'the cluster secret of the services' >"$dir/secret"
        chmod 600 "$dir/secret"
        secret=(--secret-file "$dir/secret")
    fi
    svc_start --hosts "0 1" "$ulnetd" --link udp --secure "$mode" "${secret[@]}" ||
        fail "the services did not start"
    svc_env=(ULNTEST_IT_EXPECT_UDP_PEERS=0 ULN_SERVICE=required ULN_TRANSPORT=svc)
fi

"$here/hosts.sh" exec h2 python3 "$here/seal_attacker.py" "$dir" "$mode" "$ULNTEST_HOST_0" \
    "$ULNTEST_HOST_1" >"$dir/attacker.out" 2>&1 &
attacker=$!
pids+=("$attacker")
for ((i = 0; i < 100; i++)); do [[ -e $dir/capturing ]] && break; sleep 0.1; done
[[ -e $dir/capturing ]] || fail "the attacker did not start capturing"

port=$((20000 + RANDOM % 20000))
key=$(printf '%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)
for r in 0 1; do
    "$here/hosts.sh" exec "h$r" env ULN_RANK=$r ULN_SIZE=2 ULN_ROOT="$ULNTEST_HOST_0:$port" \
        ULN_JOB_KEY="$key" ULN_SECURE="$mode" "${svc_env[@]}" \
        "$victim" "$dir" 50 >"$dir/rank$r.out" 2>&1 &
    pids+=($!)
done
st0=0 st1=0 sta=0
wait "${pids[2]}" || st1=$?
if [[ $mode == off ]]; then
    kill -KILL "${pids[1]}" 2>/dev/null || true # rank 0 waits for what the forgery displaced
fi
wait "${pids[1]}" || st0=$?
wait "$attacker" || sta=$?
if [[ -n $ulnetd ]]; then
    for h in 0 1; do svc_status "$h" >"$dir/status$h" 2>&1 || true; done
    svc_stop || fail "a service did not stop cleanly"
fi
((sta == 0)) || fail "the attacker failed ($sta)"
injected=$(sed -n 's/^injected //p' "$dir/attack_done")
((injected > 100)) || fail "only $injected datagrams injected"
if [[ -z $ulnetd ]]; then
    forged=$(sed -n 's/^forge //p' "$dir/attack_done")
    ((forged >= 1)) || fail "no forgery was made"
fi
rkey=$(sed -n 's/^key rank1 //p' "$dir/rank1.out")
[[ -n $rkey ]] || fail "rank 1 did not say its key"
# the key as it travels: 8 bytes little-endian
rkey_le=$(echo "$rkey" | sed 's/../& /g' | awk '{for (i = NF; i > 0; i--) printf "%s", $i}')
in_capture() { od -An -v -tx1 "$dir/capture.bin" | tr -d ' \n' | grep "$1" >/dev/null; }
mark_hex=$(printf 'ULNET-SEAL-MARK.' | od -An -tx1 | tr -d ' \n')

if [[ $mode == off ]]; then
    # The forged PUT lands (the attacker sends it until rank 1 sees it), and
    # rank 1 says so and stops (3).
    [[ -e $dir/forged_seen ]] && grep -q '^FORGED: ' "$dir/rank1.out" && ((st1 == 3)) ||
        fail "no forged write landed (rank 1: status $st1)"
    in_capture "$mark_hex" || fail "the mark is not in the capture"
    in_capture "$rkey_le" || fail "rank 1's region key is not in the capture"
    echo "$me (off): the mark and the region key read on the path;" \
        "$(sed -n 's/^forge //p' "$dir/attack_done") forged PUTs sent;" \
        "$(sed -n 's/^FORGED: //p' "$dir/rank1.out")"
    exit 0
fi
((st0 == 0 && st1 == 0)) || fail "a rank failed (rank 0: $st0, rank 1: $st1)"
if [[ -n $ulnetd ]]; then # the services refused them, each counting its own
    refused=$(sed -n 's/^secure: .* refused_auth \([0-9]*\);.*/\1/p' "$dir"/status0 "$dir"/status1 |
        awk '{s += $1} END {print s + 0}')
else
    refused=$(sed -n 's/^counters rank=[01] refused_auth=\([0-9]*\) .*/\1/p' "$dir"/rank*.out |
        awk '{s += $1} END {print s + 0}')
fi
((refused == injected)) || fail "$injected datagrams injected, $refused refused"
if [[ $mode == encrypt ]]; then
    in_capture "$mark_hex" && fail "the marked payload is readable in the capture"
    in_capture "$rkey_le" && fail "rank 1's region key is readable in the capture"
else
    in_capture "$mark_hex" || fail "auth: the mark should be readable in the capture (is it the job's?)"
fi
echo "$me ($mode): $injected injected ($(grep -v injected "$dir/attack_done" |
    tr '\n' ' ')), $refused refused, data intact before and after$([[ $mode == encrypt ]] &&
    echo ", neither mark nor key in the capture")"
