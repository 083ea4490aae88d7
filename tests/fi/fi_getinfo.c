/*
 * fi_getinfo - what the ulnet provider's fi_getinfo answers, per fi_getinfo(3)
 * and fi_endpoint(3), in the cases libfabric's own conformance programs
 * (fabtests: fi_getinfo_test, fi_multi_ep, the negative fi_rdm g00n13s) found
 * wrong: an info given back as hints, the transmit and receive capabilities,
 * the source address, a node name to resolve, and a pre-1.5 client's mr_mode
 * and error entries.
 * One process, no job: the provider needs no launcher.
 * Usage: FI_PROVIDER_PATH=<build>/prov FI_PROVIDER=ulnet fi_getinfo
 */
#include "fi_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_rma.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define V FI_VERSION(1, 17)

/* fi_endpoint(3): the capabilities that apply to a transmit / receive context */
#define TX_CAPS                                                                                    \
    (FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND | FI_HMEM |            \
     FI_TRIGGER | FI_FENCE | FI_MULTICAST | FI_RMA_PMEM | FI_NAMED_RX_CTX | FI_COLLECTIVE)
#define RX_CAPS                                                                                    \
    (FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RECV |        \
     FI_HMEM | FI_TRIGGER | FI_RMA_PMEM | FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_MULTI_RECV |     \
     FI_SOURCE | FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE)

static struct fi_info *hints_for(uint64_t caps)
{
    struct fi_info *h = fi_allocinfo();
    if (!h) exit(1);
    h->caps = caps;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
    h->fabric_attr->prov_name = strdup("ulnet");
    return h;
}

/* Every info: context caps within fi_endpoint(3)'s lists and the info's caps;
 * a source address. */
static void check_info(const struct fi_info *fi)
{
    CHECK((fi->tx_attr->caps & ~TX_CAPS) == 0);
    CHECK((fi->rx_attr->caps & ~RX_CAPS) == 0);
    CHECK((fi->tx_attr->caps & ~fi->caps) == 0 && (fi->rx_attr->caps & ~fi->caps) == 0);
    CHECK(fi->src_addr && fi->src_addrlen > 0);
}

/* What fi_getinfo_test and fi_multi_ep do: no hints at all, and an info of
 * ours (with or without its source address) given back as hints. */
static void test_roundtrip(void)
{
    struct fi_info *fi = NULL, *again = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, NULL, &fi));
    for (struct fi_info *p = fi; p; p = p->next)
        if (!strcmp(p->fabric_attr->prov_name, "ulnet")) check_info(p);
    fi_freeinfo(fi);

    struct fi_info *h = hints_for(FI_MSG | FI_TAGGED | FI_RMA);
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    check_info(fi);
    struct fi_info *back = fi_dupinfo(fi);
    CHECK(fi_getinfo(V, NULL, NULL, 0, back, &again) == 0);
    if (again) check_info(again);
    fi_freeinfo(again);
    again = NULL;
    free(back->src_addr);
    back->src_addr = NULL;
    back->src_addrlen = 0;
    CHECK(fi_getinfo(V, NULL, NULL, 0, back, &again) == 0);
    fi_freeinfo(again);
    fi_freeinfo(back);
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

/* A node and a port where no ulnet name service answers: no info (after
 * FI_ULNET_NAME_WAIT_MS, set short by the test). A local node or service is
 * accepted. */
static void test_node(void)
{
    struct fi_info *h = hints_for(FI_MSG), *fi = NULL;
    /* a port free now (bound, then closed): not fabtests' 9228, which a
     * ulnet server of another run may hold */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, al) && !getsockname(fd, (void *)&a, &al));
    char port[8];
    snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
    close(fd);
    CHECK(fi_getinfo(V, "127.0.0.1", port, 0, h, &fi) == -FI_ENODATA && !fi);
    CHECK(fi_getinfo(V, "g00n13s", NULL, 0, h, &fi) == -FI_ENODATA && !fi);
    /* a node with no service: no port to ask a name at, no dest_addr */
    CHECK(fi_getinfo(V, "127.0.0.1", NULL, 0, h, &fi) == 0 && fi && !fi->dest_addr);
    fi_freeinfo(fi);
    fi = NULL;
    CHECK(fi_getinfo(V, "localhost", "9228", FI_SOURCE, h, &fi) == 0);
    if (fi) check_info(fi);
    fi_freeinfo(fi);
    fi = NULL;
    CHECK(fi_getinfo(V, NULL, "9228", FI_SOURCE, h, &fi) == 0);
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

/* fi_getinfo(3): a pre-1.5 client knows FI_MR_BASIC and FI_MR_SCALABLE only;
 * ours is BASIC (ulnet chooses keys), SCALABLE cannot be met. */
static void test_mr_v1_0(void)
{
    struct fi_info *h = hints_for(FI_RMA), *fi = NULL;
    h->domain_attr->mr_mode = FI_MR_UNSPEC;
    CHECK(fi_getinfo(FI_VERSION(1, 0), NULL, NULL, 0, h, &fi) == 0);
    CHECK(fi && fi->domain_attr->mr_mode == FI_MR_BASIC);
    fi_freeinfo(fi);
    fi = NULL;
    h->domain_attr->mr_mode = FI_MR_SCALABLE;
    CHECK(fi_getinfo(FI_VERSION(1, 0), NULL, NULL, 0, h, &fi) == -FI_ENODATA && !fi);
    fi_freeinfo(h);
}

/* The source address fi_getinfo gives names no endpoint yet: an endpoint
 * opens with it, and no AV takes it for a peer. */
static void test_src_addr(void)
{
    struct fi_info *h = hints_for(FI_MSG | FI_TAGGED), *fi = NULL;
    OK(fi_getinfo(V, NULL, NULL, 0, h, &fi));
    struct fic_dom d;
    struct fid_ep *ep;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    fic_dom_open(&d, fi, &aa);
    OK(fi_endpoint(d.dom, fi, &ep, NULL));
    fi_addr_t fa = 0;
    CHECK(fi_av_insert(d.av, fi->src_addr, 1, &fa, 0, NULL) == 0); /* none inserted */
    CHECK(fa == FI_ADDR_NOTAVAIL);
    OK(fi_close(&ep->fid));
    fic_dom_close(&d);
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

/* fi_cq(3): err_data_size came with API 1.5; an older client's error entry
 * ends before it, so fi_cq_readerr must not write there (it would be past
 * the caller's struct), and err_data is the provider's (none: NULL). A 1.5
 * client gets err_data_size 0 and its own err_data pointer back. */
static void readerr_as(uint32_t version)
{
    struct fi_info *h = hints_for(FI_MSG | FI_TAGGED), *fi = NULL;
    h->domain_attr->mr_mode = version < FI_VERSION(1, 5) ? FI_MR_UNSPEC : 0;
    OK(fi_getinfo(version, NULL, NULL, 0, h, &fi));
    struct fic_dom d;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    fic_dom_open(&d, fi, &aa);
    struct fic_ep_cfg cfg = {.av = d.av};
    fic_ep_open(d.dom, fi, &cfg, &ep, &cq);
    char b[8], mine[4];
    struct fi_context c;
    OK(fi_trecv(ep, b, sizeof b, NULL, FI_ADDR_UNSPEC, 1, 0, &c));
    OK(fi_cancel(&ep->fid, &c));
    struct fi_cq_tagged_entry e;
    for (double end = fic_now() + 5; fi_cq_read(cq, &e, 1) != -FI_EAVAIL && fic_now() < end;)
        ;
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof err);
    err.err_data = mine;
    err.err_data_size = 0x5a5a;
    CHECK(fi_cq_readerr(cq, &err, 0) == 1);
    CHECK(err.op_context == &c && err.err == FI_ECANCELED);
    if (version < FI_VERSION(1, 5))
        CHECK(err.err_data_size == 0x5a5a && err.err_data == NULL);
    else
        CHECK(err.err_data_size == 0 && err.err_data == mine);
    fic_ep_close(ep, cq);
    fic_dom_close(&d);
    fi_freeinfo(fi);
    fi_freeinfo(h);
}

static void test_readerr_versions(void)
{
    readerr_as(FI_VERSION(1, 4));
    readerr_as(V);
}

int main(void)
{
    test_roundtrip();
    test_node();
    test_mr_v1_0();
    test_src_addr();
    test_readerr_versions();
    printf("fi_getinfo %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
