#!/bin/sh
# A provider test program under ulnrun -n 2 with the provider from the build
# tree; ARGS after the directory the names are exchanged in.
# Usage: run_fi_ops.sh ULNRUN PROGRAM PROVIDER_DIR [ARGS...]
set -eu
ulnrun=$1 prog=$2 prov=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
FI_PROVIDER_PATH=$prov FI_PROVIDER=ulnet "$ulnrun" -n 2 --timeout 100 "$prog" "$dir" "$@"
