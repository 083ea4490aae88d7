#!/usr/bin/env bash
# ulnet jobs under a real Slurm (Debian's slurm-wlm), started by this script
# and stopped after it (tests/slurm/cluster.sh: munged, slurmctld, slurmd, all
# files in one temporary directory, nothing left behind):
#
#   one node (this host):
#     srun --mpi=pmix -n 4        the ranks join through Slurm's PMIx server:
#                                 boot=pmix, one job key, NAPs among all,
#                                 the barrier; a second step has another key
#     srun -n 4 with ULN_ROOT     Slurm's own variables (SLURM_PROCID,
#                                 SLURM_NTASKS) and a rendezvous: boot=root
#     srun --mpi=pmi2 -n 3        no PMIx: each task a job of one, and task 0
#                                 says so once
#     Open MPI over ulnet         tests/mpi/mpi_p2p direct-launched by srun
#                                 --mpi=pmix on the libfabric provider (cm PML,
#                                 ofi MTL), every byte checked
#     sbatch                      a batch script whose srun --mpi=pmix step
#                                 runs the same probe
#   two nodes (network-namespace hosts, tests/netns/hosts.sh): one slurmd in
#   each, srun --mpi=pmix -N 2 -n 4: shm within a node, udp across.
#
# usage: tests/slurm/run.sh [BUILD_DIR]   (default: build; exit 77: not root)
# Installs Debian's slurmd, slurmctld, slurm-client and munge if missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
me="slurm/run.sh"
[[ $(id -u) == 0 ]] || { echo "$me: needs root (slurmd): skipped"; exit 77; }

missing=()
for p in slurmd slurmctld slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "$me: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

probe=$build/tests/mpirun/pmix_probe
p2p=$build/tests/mpi/mpi_p2p
[[ -x $probe ]] || { echo "$me: no $probe (a build with its tests): skipped"; exit 77; }
grep -q "PMIx bootstrap: built in" <<<"$("$build/ulninfo")" ||
    { echo "$me: $build has no PMIx bootstrap (libpmix-dev): skipped"; exit 77; }

# A launcher's variables from outside would pick another bootstrap.
unset ULN_ROOT ULN_BOOT_FD ULN_RANK ULN_SIZE ULN_JOB_KEY ULN_TRANSPORT SLURM_JOB_ID
tmp=$(mktemp -d /var/tmp/ulnet-slurm.XXXXXX) # jobs' working directory; not /tmp
chmod 755 "$tmp"
cluster=$tmp/cluster
netns=""
cleanup() {
    "$here/cluster.sh" down "$cluster" || true
    [[ -z $netns ]] || "$here/../netns/hosts.sh" down --run "$netns" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "$me: FAILED: $*" >&2
    exit 1
}
cd "$tmp"

# probe_ok OUT N BOOT: N ranks printed their probe line with boot BOOT and one
# key, and every rank's checks passed (pmix_probe: NAPs to every peer).
probe_ok() {
    local out=$1 n=$2 boot=$3
    [[ $(grep -c "^probe: .* boot=$boot " "$out") == "$n" ]] ||
        fail "want $n probe lines with boot=$boot: $(cat "$out")"
    [[ $(grep -o ' key=[0-9a-f]*' "$out" | sort -u | wc -l) == 1 ]] ||
        fail "ranks disagree on the job key: $(cat "$out")"
    [[ $(grep -c '^rank[0-9]*: [0-9]* passed, 0 failed' "$out") == "$n" ]] ||
        fail "not every rank passed: $(cat "$out")"
}
key_of() { grep -o ' key=[0-9a-f]*' "$1" | head -1; }
step() { echo "== slurm: $*"; }

# ---- one node: this host ---------------------------------------------------
up=$("$here/cluster.sh" up "$cluster" n1) || fail "the one-node cluster did not come up"
eval "$up"
srun --version

step "srun --mpi=pmix -n 4: the PMIx bootstrap, the barrier, one key per step"
ULNTEST_IT_EXPECT_BOOT=pmix timeout 60 srun --mpi=pmix -n 4 "$probe" --barrier >pmix1.out 2>&1 ||
    fail "srun --mpi=pmix: $(cat pmix1.out)"
probe_ok pmix1.out 4 pmix
timeout 60 srun --mpi=pmix -n 2 "$probe" >pmix2.out 2>&1 || fail "second step: $(cat pmix2.out)"
probe_ok pmix2.out 2 pmix
[[ $(key_of pmix1.out) != $(key_of pmix2.out) ]] || fail "two steps share a job key"

step "srun -n 4 with Slurm's variables and ULN_ROOT"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
# shellcheck disable=SC2016 # expanded by each task's shell
ULNTEST_IT_EXPECT_BOOT=root timeout 60 srun --mpi=none -n 4 sh -c \
    'ULN_RANK=$SLURM_PROCID ULN_SIZE=$SLURM_NTASKS ULN_ROOT=127.0.0.1:'"$port"' exec "$0"' \
    "$probe" >root.out 2>&1 || fail "srun with ULN_ROOT: $(cat root.out)"
probe_ok root.out 4 root

step "srun --mpi=pmi2 -n 3: jobs of one, said once"
timeout 60 srun --mpi=pmi2 -n 3 "$build/ulninfo" >pmi2.out 2>&1 || fail "srun --mpi=pmi2: $(cat pmi2.out)"
[[ $(grep -c "^in use: *single" pmi2.out) == 3 ]] || fail "pmi2: $(cat pmi2.out)"
[[ $(grep -c "each is a job of one" pmi2.out) == 1 ]] || fail "pmi2: said not once: $(cat pmi2.out)"

if [[ -x $p2p && -f $build/prov/libulnet-fi.so ]]; then
    step "Open MPI over ulnet: srun --mpi=pmix -n 4 mpi_p2p (cm PML, ofi MTL, provider ulnet)"
    OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=ulnet \
        FI_PROVIDER_PATH=$build/prov timeout 120 srun --mpi=pmix -n 4 "$p2p" >mpi.out 2>&1 ||
        fail "Open MPI under srun: $(cat mpi.out)"
    grep -q "^mpi_p2p: 4 ranks, ok" mpi.out || fail "mpi_p2p: $(cat mpi.out)"
else
    echo "$me: no mpi_p2p or provider in $build: Open MPI case left out"
fi

step "sbatch: a batch script's srun --mpi=pmix step"
cat >job.sh <<JOB
#!/bin/sh
#SBATCH -n 4
#SBATCH -o $tmp/batch.out
#SBATCH -t 2
export ULNTEST_IT_EXPECT_BOOT=pmix
srun --mpi=pmix "$probe"
JOB
timeout 90 sbatch --wait job.sh >sbatch.out 2>&1 || fail "sbatch --wait: $(cat sbatch.out batch.out 2>&1)"
probe_ok batch.out 4 pmix
"$here/cluster.sh" down "$cluster"

# ---- two nodes: network-namespace hosts ----------------------------------------
if "$here/../netns/hosts.sh" probe >/dev/null 2>&1; then
    step "two nodes (namespace hosts): srun --mpi=pmix -N 2 -n 4, shm within, udp across"
    hosts=$("$here/../netns/hosts.sh" up 2)
    netns=$(sed -n 's/^ULNTEST_NETNS=//p' <<<"$hosts")
    ns0=$(sed -n 's/^ULNTEST_HOST_0_NS=//p' <<<"$hosts")
    ns1=$(sed -n 's/^ULNTEST_HOST_1_NS=//p' <<<"$hosts")
    up=$("$here/cluster.sh" up "$cluster" "n1@$ns0" "n2@$ns1") ||
        fail "the two-node cluster did not come up"
    eval "$up"
    # srun talks to slurmctld and the nodes from host 0's namespace, as a
    # login node would; 2 tasks per node, so each rank has 1 shm and 2 udp peers.
    ULNTEST_IT_EXPECT_BOOT=pmix ULNTEST_IT_EXPECT_UDP_PEERS=2 timeout 90 \
        nsenter --net="/run/netns/$ns0" srun --mpi=pmix -N 2 -n 4 --ntasks-per-node=2 "$probe" \
        >nodes.out 2>&1 || fail "srun -N 2: $(cat nodes.out)"
    probe_ok nodes.out 4 pmix
    grep -q "transport=shm+udp" nodes.out || fail "srun -N 2: not shm+udp: $(cat nodes.out)"
else
    echo "$me: no network namespaces here: the two-node case left out"
fi
echo "$me: all cases passed"
