/*
 * proto.c - the service protocol's one parser and its addresses (proto.h).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "transport/svc/proto.h"

/* Exact size of each request a process may send, and its descriptors. */
static const struct {
    uint32_t len;
    int nfds;
} requests[ULN_SVC_TYPES] = {
    [ULN_SVC_ATTACH] = {sizeof(struct uln_svc_attach), 1},
    [ULN_SVC_STATUS] = {sizeof(struct uln_svc_hdr), 0},
    [ULN_SVC_QUEUE] = {sizeof(struct uln_svc_queue), 2},
    [ULN_SVC_ROUTE] = {sizeof(struct uln_svc_route), 0},
    [ULN_SVC_MEM] = {sizeof(struct uln_svc_mem), 1},
    [ULN_SVC_MEM_DEL] = {sizeof(struct uln_svc_mem), 0},
    [ULN_SVC_PEER_SOCK] = {sizeof(struct uln_svc_peer_sock), 0},
};

int uln_svc_parse(const void *buf, size_t len, int truncated, int nfds)
{
    struct uln_svc_hdr h;
    if (truncated || len < sizeof h) return -EPROTO;
    memcpy(&h, buf, sizeof h);
    if (h.magic != ULN_SVC_MAGIC || h.version != ULN_SVC_VERSION || h.type >= ULN_SVC_TYPES ||
        !requests[h.type].len)
        return -EPROTO;
    if (h.len != len || len != requests[h.type].len || nfds != requests[h.type].nfds)
        return -EPROTO;
    return h.type;
}

void uln_svc_hdr_init(struct uln_svc_hdr *h, unsigned type, uint32_t len, int32_t status)
{
    *h = (struct uln_svc_hdr){.magic = ULN_SVC_MAGIC,
                              .version = ULN_SVC_VERSION,
                              .type = (uint16_t)type,
                              .len = len,
                              .status = status};
}

int uln_svc_sockaddr(const char *path, struct sockaddr_un *sa)
{
    if (!path || !*path) path = ULN_SVC_DEFAULT_PATH;
    size_t n = strlen(path);
    if (n > ULN_SVC_PATH_MAX) return -ENAMETOOLONG;
    if (n == 1 && path[0] == '@') return -EINVAL;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, n);
    /* Abstract: the name is the bytes after a 0, exactly n - 1 of them (no
     * terminator counts), so the length says where it ends. */
    if (path[0] == '@') {
        sa->sun_path[0] = 0;
        return (int)(offsetof(struct sockaddr_un, sun_path) + n);
    }
    return (int)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}
