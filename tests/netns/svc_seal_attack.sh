#!/usr/bin/env bash
# svc_seal_attack.sh MODE ULNETD VICTIM - the services' sealed wire (ulnetd
# --secure MODE, issue 33) against an attacker on the path: seal_attack.sh's
# job and attacker, with every peer through the services.
#
# Three namespace hosts on one bridge that floods every frame to every port;
# a ulnetd on hosts 0 and 1 (--secure MODE; encrypt also with --secret-file),
# ranks 0 and 1 of VICTIM (seal_victim.c) attached to them with
# ULN_SECURE=MODE and ULN_TRANSPORT=svc; seal_attacker.py on host 2 captures
# the services' datagrams during the traffic, then replays them, flips bits
# in header and payload, cuts them and reorders them, from the services' own
# addresses and ports. Then: both ranks succeed (every round's data intact,
# before the attack and after it), the services refused and counted
# (refused_auth in --status) exactly the datagrams injected, and under
# encrypt neither the marked payload nor rank 1's region key appears
# anywhere in the capture. Exit 77 where this machine cannot make namespaces.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=$1 ulnetd=$2 victim=$3
"$here/hosts.sh" probe >/dev/null 2>&1 || { echo "svc_seal_attack.sh: no namespaces: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "svc_seal_attack.sh: no python3: skipped"; exit 77; }

set -a
eval "$("$here/hosts.sh" up 3)"
set +a
dir=$(mktemp -d)
pids=() svcs=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${svcs[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$here/hosts.sh" down >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "svc_seal_attack.sh ($mode): $*" >&2
    for f in "$dir"/rank*.out "$dir"/attacker.out "$dir"/attack_done "$dir"/svc*.log "$dir"/status*; do
        [[ -f $f ]] && { echo "--- $(basename "$f")"; tail -20 "$f"; } >&2
    done
    exit 1
}

br=$ULNTEST_NETNS-br
ip netns exec "$br" ip link set br0 type bridge ageing_time 0
for k in 0 1 2; do
    ip netns exec "$ULNTEST_NETNS-h$k" ethtool -K eth0 tso off gso off tx-udp-segmentation off \
        >/dev/null 2>&1 || true
    ip netns exec "$br" ethtool -K "h$k" tso off gso off tx-udp-segmentation off >/dev/null 2>&1 ||
        true
done

secret=()
if [[ $mode == encrypt ]]; then
    printf 'the cluster secret of the services' >"$dir/secret"
    chmod 600 "$dir/secret"
    secret=(--secret-file "$dir/secret")
fi
for h in 0 1; do
    v=ULNTEST_HOST_$h
    "$here/hosts.sh" exec "h$h" "$ulnetd" --foreground --addr "${!v}" --link udp --secure "$mode" \
        "${secret[@]}" 2>"$dir/svc$h.log" &
    svcs+=($!)
done
for h in 0 1; do
    for _ in $(seq 100); do
        "$here/hosts.sh" exec "h$h" "$ulnetd" --status >/dev/null 2>&1 && break
        sleep 0.05
    done
done

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
        ULN_JOB_KEY="$key" ULNTEST_IT_EXPECT_UDP_PEERS=0 ULN_SECURE="$mode" \
        ULN_SERVICE=required ULN_TRANSPORT=svc "$victim" "$dir" 50 >"$dir/rank$r.out" 2>&1 &
    pids+=($!)
done
st0=0 st1=0 sta=0
wait "${pids[2]}" || st1=$?
wait "${pids[1]}" || st0=$?
wait "$attacker" || sta=$?
for h in 0 1; do "$here/hosts.sh" exec "h$h" "$ulnetd" --status >"$dir/status$h" 2>&1 || true; done
((sta == 0)) || fail "the attacker failed ($sta)"
((st0 == 0 && st1 == 0)) || fail "a rank failed (rank 0: $st0, rank 1: $st1)"
injected=$(sed -n 's/^injected //p' "$dir/attack_done")
((injected > 100)) || fail "only $injected datagrams injected"
refused=$(sed -n 's/^secure: .* refused_auth \([0-9]*\);.*/\1/p' "$dir"/status0 "$dir"/status1 |
    awk '{s += $1} END {print s + 0}')
((refused == injected)) || fail "$injected datagrams injected, $refused refused by the services"
rkey=$(sed -n 's/^key rank1 //p' "$dir/rank1.out")
[[ -n $rkey ]] || fail "rank 1 did not say its key"
rkey_le=$(echo "$rkey" | sed 's/../& /g' | awk '{for (i = NF; i > 0; i--) printf "%s", $i}')
in_capture() { od -An -v -tx1 "$dir/capture.bin" | tr -d ' \n' | grep -q "$1"; }
mark_hex=$(printf 'ULNET-SEAL-MARK.' | od -An -tx1 | tr -d ' \n')
if [[ $mode == encrypt ]]; then
    in_capture "$mark_hex" && fail "the marked payload is readable in the capture"
    in_capture "$rkey_le" && fail "rank 1's region key is readable in the capture"
else
    in_capture "$mark_hex" || fail "auth: the mark should be readable in the capture (is it the job's?)"
fi
echo "svc_seal_attack.sh ($mode): $injected injected ($(grep -v injected "$dir/attack_done" |
    tr '\n' ' ')), $refused refused by the services, data intact before and after$(
    [[ $mode == encrypt ]] && echo ", neither mark nor key in the capture")"
