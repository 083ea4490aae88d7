#!/bin/sh
# NetPIPE for Open MPI (Debian's netpipe-openmpi, NPopenmpi) over the ulnet
# provider, 2 ranks on this host, as tests/mpi/run.sh launches Open MPI: its
# integrity check (-i: every message's bytes compared at the receiver) at
# every size NetPIPE picks from 1 B up to 128 KiB (the last near 96 KiB),
# so across the eager limit and well into rendezvous.
# Usage: netpipe.sh PROVIDER_DIR     (exit 77: no mpirun or no NPopenmpi)
set -eu
provdir=$(cd "$1" && pwd) # the run happens elsewhere
command -v mpirun >/dev/null || { echo "no mpirun (openmpi-bin): skipped"; exit 77; }
command -v NPopenmpi >/dev/null || { echo "no NPopenmpi (netpipe-openmpi): skipped"; exit 77; }
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
export FI_PROVIDER_PATH=$provdir
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" # NetPIPE writes np.out where it runs
st=0
timeout 120 mpirun $root --oversubscribe -np 2 --mca pml cm --mca mtl ofi \
    --mca mtl_ofi_provider_include ulnet NPopenmpi -l 1 -u 131072 -i >out 2>&1 || st=$?
rows=$(grep -c ' bytes .* times -->' out || true)
# Counted on their own: the two ranks' lines interleave, and the first
# size's verdict may land on a line of its own after the other rank's.
passed=$(grep -c 'Integrity check passed' out || true)
largest=$(awk '/ bytes .* times -->/ { if ($2 > m) m = $2 } END { print m + 0 }' out)
if [ "$st" != 0 ] || grep -qi 'fail' out || [ "$rows" -lt 20 ] || [ "$rows" != "$passed" ] ||
    [ "$largest" -lt 65536 ]; then
    cat out
    echo "NetPIPE over ulnet: status $st, $passed of $rows sizes passed"
    exit 1
fi
tail -2 out
echo "NetPIPE over ulnet: $passed sizes up to $largest B, every message checked"
