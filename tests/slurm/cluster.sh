#!/usr/bin/env bash
# A Slurm cluster of its own for one test run: munged, slurmctld and one
# slurmd per node, every file (configuration, key, sockets, state, logs) in
# one temporary directory, on ports nobody else uses, so runs in parallel do
# not meet and nothing outlives the run.
#
#   eval "$(tests/slurm/cluster.sh up DIR NODES...)"   # exports SLURM_CONF
#   tests/slurm/cluster.sh down DIR                    # stops all, removes DIR
#
# NODES: names, each optionally NAME@NETNS (that slurmd runs in the network
# namespace, its address the namespace's first global IPv4 address) else on
# this host's loopback. Needs root (slurmd runs jobs as their users) and
# Debian's slurmd, slurmctld, slurm-client and munge.
set -euo pipefail

cmd=$1 dir=$2
shift 2

# A free TCP port on every address (bound and released; a race with another
# process is possible but harmless: the daemon then fails to start and says so).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

in_ns() { # in_ns NETNS cmd... (NETNS empty: here)
    local ns=$1
    shift
    # nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the
    # cgroup file system slurmd's cgroup plugin needs.
    if [[ -n $ns ]]; then nsenter --net="/run/netns/$ns" "$@"; else "$@"; fi
}

wait_for() { # wait_for SECONDS description command...
    local t=$1 what=$2
    shift 2
    local end=$((SECONDS + t))
    while ((SECONDS < end)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "slurm cluster: $what did not come up within ${t}s" >&2
    return 1
}

down() {
    local d=$1
    [[ -d $d ]] || return 0
    # Daemons in the order that lets each leave cleanly; SIGKILL after 5 s.
    for f in "$d"/slurmd.*.pid "$d"/slurmctld.pid "$d"/munged.pid; do
        [[ -f $f ]] || continue
        local pid
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || continue
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$d"
}

if [[ $cmd == down ]]; then
    down "$dir"
    exit 0
fi
[[ $cmd == up ]] || { echo "usage: $0 up DIR NODES... | down DIR" >&2; exit 2; }
(($# >= 1)) || { echo "usage: $0 up DIR NODES..." >&2; exit 2; }

mkdir -p "$dir"
chmod 711 "$dir" # the socket reachable by a job's user; nothing listable
# Anything failing below: say what the daemons said, and leave nothing behind.
failed() {
    for f in "$dir"/*.out "$dir"/*.log; do
        [[ -s $f ]] && { echo "--- $f" && tail -n 15 "$f"; } >&2
    done
    down "$dir"
}
trap failed EXIT
trap 'exit 130' INT TERM

# munge: a key of this run's, a socket of its own
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" \
    >"$dir/munged.out" 2>&1
wait_for 10 munged test -S "$dir/munge.sock"

ctld_port=$(free_port)
host=$(hostname -s)
ctld_addr=127.0.0.1
nodes=()
for n in "$@"; do
    name=${n%%@*} ns=
    [[ $n == *@* ]] && ns=${n#*@}
    addr=127.0.0.1
    if [[ -n $ns ]]; then
        addr=$(ip -n "$ns" -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1)
        ((${#nodes[@]})) || ctld_addr=$addr # slurmctld runs beside the first node
    fi
    nodes+=("$name|$ns|$addr|$(free_port)")
done

cat >"$dir/slurm.conf" <<CONF
ClusterName=ulnet$$
SlurmctldHost=$host($ctld_addr)
SlurmctldPort=$ctld_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool.%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
PropagateResourceLimitsExcept=ALL
FirstJobId=$((RANDOM * 1000 + 1000))
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
CONF
for n in "${nodes[@]}"; do
    IFS="|" read -r name ns addr port <<<"$n"
    echo "NodeName=$name NodeAddr=$addr NodeHostname=$host Port=$port CPUs=4 State=UNKNOWN" >>"$dir/slurm.conf"
done
echo "PartitionName=ulnet Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4" >>"$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf
mkdir -p "$dir/ctld"
# The directory under /tmp that holds this checkout, if it lies there.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
tmp_top=
case $here in /tmp/?*) tmp_top=${here#/tmp/} && tmp_top=${tmp_top%%/*} ;; esac

first_ns=$(IFS="|" read -r _ ns _ <<<"${nodes[0]}"; echo "$ns")
in_ns "$first_ns" slurmctld -i >"$dir/slurmctld.out" 2>&1
for n in "${nodes[@]}"; do
    IFS="|" read -r name ns addr port <<<"$n"
    mkdir -p "$dir/spool.$name"
    # Each node its own /tmp, as real nodes have: Slurm's PMIx plugin makes
    # a directory per job step there, named the same on every node. A
    # checkout (and so the programs the jobs run) under /tmp stays reachable:
    # its top directory there is bound back over the new /tmp.
    mkdir -p "$dir/tmp.$name"
    # shellcheck disable=SC2016 # $0.. are expanded by that shell
    in_ns "$ns" unshare --mount --propagation private sh -c \
        'mount --bind /tmp "$1" && mount -t tmpfs -o mode=1777 ulnet-slurm /tmp &&
         if [ -n "$2" ]; then mkdir -p "/tmp/$2" && mount --bind "$1/$2" "/tmp/$2"; fi &&
         exec slurmd -N "$0"' "$name" "$dir/tmp.$name" "$tmp_top" \
        >"$dir/slurmd.$name.out" 2>&1
done
# Asked from the controller's network namespace, where clients run (the
# namespaces' addresses are unreachable from anywhere else).
idle() { [[ $(in_ns "$first_ns" timeout 5 sinfo -h -o '%t' | sort -u) == idle ]]; }
wait_for 30 "every node (idle)" idle || { in_ns "$first_ns" timeout 5 sinfo >&2 || true; exit 1; }
trap - EXIT
echo "export SLURM_CONF=$dir/slurm.conf"
