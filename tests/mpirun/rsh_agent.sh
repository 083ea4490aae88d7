#!/usr/bin/env bash
# rsh_agent.sh - Open MPI's "remote shell" (plm_rsh_agent) for network-namespace
# hosts: mpirun calls it as `rsh_agent.sh HOST CMD...` to start its orted
# daemon on HOST, as it would call ssh. HOST is one of the addresses the
# hostfile lists (hosts.sh's ULNTEST_HOST_k); the command runs inside that host's
# namespace (ULNTEST_HOST_k_NS), through sh -c like ssh's remote shell.
#
# mpirun runs this on the one real machine, so the command inherits mpirun's
# environment (ULNTEST_NETNS, ULNTEST_HOSTS, ULNTEST_HOST_k* exported by run.sh): no name
# resolution, no /etc/hosts, no sshd.
#
# Each host gets its own TMPDIR, $ULNTEST_MPIRUN_TMP/hK, as each node of a cluster
# has its own /tmp: Open MPI names its session directories after the host name
# (the same for every namespace here) and the job, and orteds of one job
# creating them side by side in one /tmp fail now and then ("mkdir: File
# exists").
set -euo pipefail
# Options ssh would take before the host (Open MPI passes none by default).
while [[ ${1:-} == -* ]]; do shift; done
host=${1:?usage: rsh_agent.sh HOST CMD...}
shift
for ((k = 0; k < ${ULNTEST_HOSTS:-0}; k++)); do
    addr=ULNTEST_HOST_$k ns=ULNTEST_HOST_${k}_NS
    if [[ ${!addr} == "$host" ]]; then
        tmp=${ULNTEST_MPIRUN_TMP:?run.sh sets ULNTEST_MPIRUN_TMP}/h$k
        mkdir -p "$tmp"
        TMPDIR=$tmp exec ip netns exec "${!ns}" /bin/sh -c "$*"
    fi
done
echo "rsh_agent.sh: $host is not a host of run ${ULNTEST_NETNS:-?}" >&2
exit 255
