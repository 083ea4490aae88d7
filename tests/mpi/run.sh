#!/bin/sh
# An MPI program over the ulnet provider: Open MPI's cm PML with the ofi MTL,
# restricted to the provider "ulnet", loaded from the build tree.
# Debian's openmpi-mca-params.conf says "mtl = ^ofi"; a command-line
# "--mca mtl ofi" overrides it (so does OMPI_MCA_mtl=ofi in the environment).
# Usage: run.sh NP PROGRAM PROVIDER_DIR [MPIRUN_ARGS...]  (exit 77: no mpirun or program)
set -eu
np=$1 prog=$2 provdir=$3
shift 3
command -v mpirun >/dev/null || { echo "no mpirun (openmpi-bin): skipped"; exit 77; }
[ -x "$prog" ] || { echo "no $prog (built only where mpicc is found): skipped"; exit 77; }
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# ranks under mpirun join ulnet through PMIx; a provider dir of this build only
export FI_PROVIDER_PATH=$provdir
# Under ASan, Open MPI's own allocations kept until exit would fail every run
# as leaks; the provider's leaks are checked by tests/fi (fi.ops).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
exec timeout 300 mpirun $root --oversubscribe -np "$np" --mca pml cm --mca mtl ofi \
    --mca mtl_ofi_provider_include ulnet "$@" "$prog"
