#!/bin/sh
# fi_ops under ulnrun -n 2 with the provider from the build tree.
# Usage: run_fi_ops.sh ULNRUN FI_OPS PROVIDER_DIR
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
FI_PROVIDER_PATH=$3 FI_PROVIDER=ulnet "$1" -n 2 --timeout 100 "$2" "$dir"
