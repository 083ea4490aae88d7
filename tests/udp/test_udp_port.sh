#!/usr/bin/env bash
# test_udp_port.sh ULNRUN PROG ARGS... - ULN_UDP_PORT: ranks on one host take blocks
# of ULN_MAX_EPS ports one after the other (offset by local rank), a block
# that would pass 65535 is refused naming its ports, and a port that cannot
# be bound is named with the cause. PROG ARGS: a test body for any number of
# ranks (it runs its checks over udp here).
set -uo pipefail
ulnrun=$1
shift
prog=("$@")
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

expect() { # expect WHAT STATUS(0|fail) PATTERN -- ENV... -- ULNRUN-ARGS...
    local what=$1 want=$2 pat=$3
    shift 3
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$ulnrun" --timeout 60 "$@" "${prog[@]}" >"$out" 2>&1
    local st=$? bad=0
    [[ $want == 0 && $st != 0 ]] && bad=1
    [[ $want == fail && $st == 0 ]] && bad=1
    [[ -n $pat ]] && ! grep -qE "$pat" "$out" && bad=1
    if ((bad)); then
        echo "FAIL: $what (status $st, wanted $want, pattern '$pat'):"
        sed 's/^/    /' "$out"
        fails=$((fails + 1))
    else
        echo "ok: $what (status $st)"
        sed 's/^/    /' "$out" | grep -E "ulnet|passed" | head -5
    fi
}

# A base picked per run, so parallel runs rarely meet; 3 x 16 ports.
base=$((30000 + RANDOM % 20000))
expect "3 ranks on one host, ULN_UDP_PORT=$base" 0 "" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=$base -- -n 3
# Local rank 0 gets 65520..65535; local rank 1 would need 65536.. : refused.
expect "a block past 65535 is refused" fail \
    "ULN_UDP_PORT=65520: local rank 1 needs ports 65536\.\.65551 \(16 per rank" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=65520 -- -n 2
expect "ULN_UDP_PORT=65530 with 16 ports is refused" fail \
    "ULN_UDP_PORT=65530: local rank 0 needs ports 65530\.\.65545 .*past 65535" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=65530 -- -n 1
# An address of no interface here: the port and the cause are named.
expect "a bind error names the port and the cause" fail \
    "ULN_UDP_PORT=$base: cannot bind port $base \(local rank 0, ports $base\.\.$((base + 15)), 16 per rank\): Cannot assign requested address" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=$base ULN_UDP_ADDR=192.0.2.1 -- -n 1
# ULN_LOCAL_RANK says where a rank's block is; nonsense in it is refused.
expect "ULN_LOCAL_RANK moves the block" fail \
    "ULN_UDP_PORT=65500: local rank 2 needs ports 65532\.\.65547" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=65500 ULN_LOCAL_RANK=2 -- -n 1
expect "a bad ULN_LOCAL_RANK is refused" fail "ULN_LOCAL_RANK=x1 is not a number" \
    ULN_TRANSPORT=udp ULN_UDP_PORT=65500 ULN_LOCAL_RANK=x1 -- -n 1

# Without ulnrun (ULN_ROOT, every rank on this host, no launcher telling local
# ranks): the ranks find free blocks one after the other.
base=$((30000 + RANDOM % 20000)) root=$((20000 + RANDOM % 10000))
pids=()
for r in 0 1 2; do
    env ULN_RANK=$r ULN_SIZE=3 ULN_ROOT=127.0.0.1:$root ULN_BOOT_TIMEOUT=60 ULN_TRANSPORT=udp \
        ULN_UDP_PORT=$base timeout 90 "${prog[@]}" >"$out.$r" 2>&1 &
    pids+=($!)
done
st=0
for p in "${pids[@]}"; do wait "$p" || st=1; done
if ((st)); then
    echo "FAIL: 3 ranks over ULN_ROOT on one host, ULN_UDP_PORT=$base:"
    cat "$out".? | sed 's/^/    /'
    fails=$((fails + 1))
else
    echo "ok: 3 ranks over ULN_ROOT on one host, ULN_UDP_PORT=$base"
fi
rm -f "$out".?

((fails == 0)) || exit 1
