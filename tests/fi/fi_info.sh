#!/bin/sh
# libfabric's fi_info (Debian's libfabric-bin) lists the provider from the
# build tree, verbose, with the attributes a client will see; a hint the
# provider cannot meet lists nothing; its settings are listed. fi_info asks
# for every mr_mode bit, so it sees FI_MR_VIRT_ADDR offered.
# Usage: fi_info.sh PROVIDER_DIR [SANITIZER]     (77: no fi_info, or sanitized)
set -eu
command -v fi_info >/dev/null || { echo "no fi_info (libfabric-bin): skipped"; exit 77; }
if [ -n "${2:-}" ]; then
    # Debian's fi_info is not built with the sanitizer the provider is
    echo "provider built with $2: Debian's fi_info cannot load it: skipped"
    exit 77
fi
export FI_PROVIDER_PATH=$1
out=$(fi_info -p ulnet -v)
fi_info -p ulnet | grep -q "provider: ulnet" || { echo "fi_info does not list ulnet"; exit 1; }
for want in "prov_name: ulnet" "type: FI_EP_RDM" "FI_TAGGED" "FI_REMOTE_CQ_DATA" "FI_ATOMIC" \
    "mr_mode: \[ FI_MR_VIRT_ADDR, FI_MR_PROV_KEY \]" "cq_data_size: 8" "inject_size: 8168" \
    "iov_limit: 4" "threading: FI_THREAD_SAFE" "msg_order: \[ FI_ORDER_SAS \]"; do
    echo "$out" | grep -q "$want" || { echo "fi_info -v lacks: $want"; exit 1; }
done
# connected and datagram endpoints; the datagram's largest message is one
# NAP (the eager limit); no utility provider is layered over ulnet
fi_info -p ulnet -t FI_EP_MSG | grep -q "type: FI_EP_MSG" || { echo "no FI_EP_MSG"; exit 1; }
dg=$(fi_info -p ulnet -t FI_EP_DGRAM -v)
echo "$dg" | grep -q "max_msg_size: 8168" || { echo "FI_EP_DGRAM: max_msg_size not 8168"; exit 1; }
if echo "$dg" | grep -q "FI_RMA"; then echo "FI_EP_DGRAM offers FI_RMA"; exit 1; fi
if fi_info | grep -q "ulnet;"; then echo "a utility provider layered over ulnet"; exit 1; fi
# the FI_ULNET_* settings are documented to libfabric
vars=$(fi_info -e)
for v in NAP_MAX SQ_DEPTH RING_BYTES RNDV_MIN CHUNK_BYTES SHM_CMA NAME_TIMEOUT_MS NAME_WAIT_MS MAX_PEERS \
    MAX_EPS MAX_REGIONS POST_COPY_MAX SHM_DIRECT SPIN_US TRANSPORT UDP_WINDOW UDP_DEAD_MS; do
    echo "$vars" | grep -aq "FI_ULNET_$v:" || { echo "fi_info -e lacks FI_ULNET_$v"; exit 1; }
done
echo "fi_info lists ulnet"
