/*
 * fabric.c - the provider's entry point (fi_prov_ini) and the fabric object.
 */
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"

/* fi_fini, before libfabric unloads us: no thread of ours may outlive the
 * code it runs (a client may exit without closing its domains). */
static void ulnfi_cleanup(void)
{
    ulnfi_domains_stop();
}

struct fi_provider ulnfi_prov = {
    .version = ULNFI_PROV_VER,
    .fi_version = ULNFI_FI_VER,
    .name = ULNFI_NAME,
    .getinfo = ulnfi_getinfo,
    .fabric = ulnfi_fabric_open,
    .cleanup = ulnfi_cleanup,
};

static int fabric_close(struct fid *fid)
{
    free(ulnfi_container(fid, struct ulnfi_fabric, fab.fid));
    return 0;
}

static struct fi_ops fabric_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = fabric_close,
    .bind = ulnfi_no_bind,
    .control = ulnfi_no_control,
    .ops_open = ulnfi_no_ops_open,
};

/* fi_trywait(3): every object must be an FI_WAIT_FD CQ or EQ of ours; the
 * first that has something to read makes it -FI_EAGAIN. */
static int fabric_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
    for (int i = 0; i < count; i++) {
        int rc =
            fids[i]->fclass == FI_CLASS_EQ ? ulnfi_eq_trywait(fids[i]) : ulnfi_cq_trywait(fids[i]);
        if (rc) return rc;
    }
    return 0;
}

static struct fi_ops_fabric fabric_ops = {
    .size = sizeof(struct fi_ops_fabric),
    .domain = ulnfi_domain_open,
    .passive_ep = ulnfi_passive_ep,
    .eq_open = ulnfi_eq_open,
    .wait_open = ulnfi_wait_open,
    .trywait = fabric_trywait,
};

int ulnfi_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    if (attr && attr->name && strcmp(attr->name, ULNFI_NAME)) return -FI_EINVAL;
    struct ulnfi_fabric *f = calloc(1, sizeof(*f));
    if (!f) return -FI_ENOMEM;
    f->fab.fid.fclass = FI_CLASS_FABRIC;
    f->fab.fid.context = context;
    f->fab.fid.ops = &fabric_fi_ops;
    f->fab.ops = &fabric_ops;
    *fabric = &f->fab;
    return 0;
}

/* Settings the provider documents (fi_info -e lists them). They go into the
 * uln_config given to uln_open, so a FI_ULNET_* value wins over the ULN_*
 * variable of the same setting; an unset one leaves that to ULN_* or the
 * default. */
static void define_params(void)
{
    fi_param_define(&ulnfi_prov, "nap_max", FI_PARAM_INT,
                    "largest eager message plus its 24-byte header (ULN_NAP_MAX when unset)");
    fi_param_define(&ulnfi_prov, "sq_depth", FI_PARAM_INT,
                    "send queue entries (ULN_SQ_DEPTH when unset)");
    fi_param_define(&ulnfi_prov, "ring_bytes", FI_PARAM_INT,
                    "NAP ring per peer and endpoint (ULN_RING_BYTES when unset)");
    fi_param_define(&ulnfi_prov, "chunk_bytes", FI_PARAM_INT,
                    "bytes an endpoint copies per progress pass (ULN_CHUNK_BYTES when unset; "
                    "else 1 MiB, not ulnet's 128 KiB: docs/provider.md)");
    fi_param_define(&ulnfi_prov, "shm_cma", FI_PARAM_BOOL,
                    "reach a peer's malloc'd memory on this host with process_vm_readv/writev "
                    "(ULN_SHM_CMA when unset; else off: through the rings, with the peer's "
                    "progress, 2-3x faster here: docs/provider.md)");
    fi_param_define(&ulnfi_prov, "rndv_min", FI_PARAM_SIZE_T,
                    "messages of at least this size go by rendezvous (default: the switch-over "
                    "measured in docs/provider.md, capped by the eager limit)");
    fi_param_define(&ulnfi_prov, "name_timeout_ms", FI_PARAM_SIZE_T,
                    "how long fi_getinfo(node, service) and fi_av_insertsvc wait for a "
                    "listening name service's connect and answer (default 2000)");
    fi_param_define(&ulnfi_prov, "name_wait_ms", FI_PARAM_SIZE_T,
                    "how long they keep trying, pauses doubling from 50 ms to 1 s, while "
                    "nothing listens yet at node:service (a server starting; default 30000)");
    fi_param_define(&ulnfi_prov, "max_peers", FI_PARAM_INT,
                    "peers the process can reach at once: the addresses in its AVs and the "
                    "peers that sent before being inserted, 2..4096 (ULN_MAX_PEERS when unset)");
    fi_param_define(&ulnfi_prov, "max_eps", FI_PARAM_INT,
                    "endpoints per process, counting every one it ever enables, 1..64 "
                    "(ULN_MAX_EPS when unset)");
    fi_param_define(&ulnfi_prov, "max_regions", FI_PARAM_INT,
                    "memory registrations at once, fi_mr_reg's and rendezvous sends' "
                    "(ULN_MAX_REGIONS when unset)");
    fi_param_define(&ulnfi_prov, "post_copy_max", FI_PARAM_INT,
                    "an fi_read/fi_write up to this size, on an endpoint with nothing "
                    "queued, is copied inside the call (ULN_POST_COPY_MAX when unset)");
    fi_param_define(&ulnfi_prov, "shm_direct", FI_PARAM_BOOL,
                    "fi_read/fi_write/atomics on a peer on this host done by the initiator "
                    "on its mapped memory; off: through the rings, placed by the target "
                    "(ULN_SHM_DIRECT when unset)");
    fi_param_define(&ulnfi_prov, "spin_us", FI_PARAM_INT,
                    "microseconds fi_cq_sread polls before it sleeps; 0: no busy polling "
                    "(ULN_SPIN_US when unset)");
    fi_param_define(&ulnfi_prov, "transport", FI_PARAM_STRING,
                    "auto: shm on this host, udp to others; shm; udp; xdp: udp over AF_XDP "
                    "(ULN_TRANSPORT when unset)");
    fi_param_define(&ulnfi_prov, "udp_window", FI_PARAM_INT,
                    "UDP packets in flight per endpoint and peer, a power of two "
                    "(ULN_UDP_WINDOW when unset)");
    fi_param_define(&ulnfi_prov, "udp_dead_ms", FI_PARAM_INT,
                    "a UDP peer silent this long while awaited is dead: its operations "
                    "complete with FI_ECONNRESET (ULN_UDP_DEAD_MS when unset)");
}

FI_EXT_INI
{
    define_params();
    return &ulnfi_prov;
}
