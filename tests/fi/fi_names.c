/*
 * fi_names.c - a client that knows only its server's host and port, as
 * fabtests' default mode, fi_rdm_stress and Mercury-style clients do; and a
 * name kept after its endpoint closed.
 *
 *   fi_names server PORT        fi_getinfo(NULL, PORT, FI_SOURCE): publish
 *   fi_names client HOST PORT   fi_getinfo(HOST, PORT, 0): dest_addr
 *   fi_names refuse             lookups that must fail, in bounded time
 *
 * Server and client: the client's name travels in its first message; tagged
 * messages both ways, eager and rendezvous sizes, every byte checked; the
 * client's fi_av_insertsvc (and fi_av_insertsym) finds the same name as
 * fi_getinfo. Then the server closes its endpoint and opens another at the
 * same index, publishing on the same port: the client, still holding the old
 * name, sends to it an eager message and a rendezvous one, then to the new
 * name (looked up again) an eager one. The new endpoint must see only the
 * last (NAPs from one endpoint arrive in order, so the stale ones came
 * first), and the stale rendezvous send must fail with FI_ECONNRESET.
 *
 * The client's name in its hello is the short one, 32 bytes, from a 32-byte
 * room, as fi_rdm_stress gets and sends it; the client also checks short
 * names in fi_av_lookup, fi_av_straddr, fi_getinfo's dest_addr and arrays
 * of both lengths, and refuses malformed ones.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "fi_common.h"

enum { T_HELLO = 1, T_PING, T_READY, T_AFTER, T_DONE };
static const size_t sizes[] = {0, 1, 64, 4000, 100000, 1 << 20};
#define BIG (1 << 20)

struct side {
    struct fi_info *hints, *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
};

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

static int same(const uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)(i * 31 + seed * 7 + (i >> 8))) return 0;
    return 1;
}

static void ep_up(struct side *s)
{
    OK(fi_endpoint(s->dom, s->info, &s->ep, NULL));
    OK(fi_ep_bind(s->ep, &s->av->fid, 0));
    OK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(s->ep));
}

static void open_side(struct side *s, const char *node, const char *service, uint64_t flags)
{
    s->hints = fic_hints(FI_TAGGED | FI_MSG, NULL);
    OK(fi_getinfo(FI_VERSION(1, 17), node, service, flags, s->hints, &s->info));
    OK(fi_fabric(s->info->fabric_attr, &s->fab, NULL));
    OK(fi_domain(s->fab, s->info, &s->dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    OK(fi_av_open(s->dom, &aa, &s->av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    OK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
    ep_up(s);
}

/* One completion, or die after 30 s; an error entry is read and returned
 * as -its errno (the caller decides whether it was expected). */
static int wait_cq(struct side *s, struct fi_cq_tagged_entry *e)
{
    double end = fic_now() + 30;
    for (;;) {
        ssize_t n = fi_cq_read(s->cq, e, 1);
        if (n == 1) return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            OK(fi_cq_readerr(s->cq, &err, 0));
            e->op_context = err.op_context;
            e->flags = err.flags;
            return -err.err;
        }
        if (n != -FI_EAGAIN) OK(n);
        REQUIRE(fic_now() < end);
    }
}

/* Wait for the completion of context ctx (others may come between: none
 * is expected here, so they are errors). */
static int wait_for(struct side *s, void *ctx)
{
    struct fi_cq_tagged_entry e;
    int rc = wait_cq(s, &e);
    REQUIRE(e.op_context == ctx);
    return rc;
}

static void send_wait(struct side *s, const void *buf, size_t len, fi_addr_t to, uint64_t tag)
{
    int ctx;
    OK(fi_tsend(s->ep, buf, len, NULL, to, tag, &ctx));
    OK(wait_for(s, &ctx));
}

static size_t recv_wait(struct side *s, void *buf, size_t len, uint64_t tag)
{
    int ctx;
    OK(fi_trecv(s->ep, buf, len, NULL, FI_ADDR_UNSPEC, tag, 0, &ctx));
    struct fi_cq_tagged_entry e;
    OK(wait_cq(s, &e));
    REQUIRE(e.op_context == &ctx && e.tag == tag);
    return e.len;
}

static void close_side(struct side *s)
{
    OK(fi_close(&s->ep->fid));
    OK(fi_close(&s->cq->fid));
    OK(fi_close(&s->av->fid));
    OK(fi_close(&s->dom->fid));
    OK(fi_close(&s->fab->fid));
    fi_freeinfo(s->info);
    fi_freeinfo(s->hints);
}

static int server(const char *port)
{
    struct side s = {0};
    open_side(&s, NULL, port, FI_SOURCE);
    uint8_t *buf = malloc(BIG);
    REQUIRE(buf);
    char name[FI_NAME_MAX];
    REQUIRE(recv_wait(&s, name, sizeof(name), T_HELLO) == 32); /* the client's short name */
    fi_addr_t cli;
    REQUIRE(fi_av_insert(s.av, name, 1, &cli, 0, NULL) == 1);
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        REQUIRE(recv_wait(&s, buf, BIG, T_PING) == sizes[i] && same(buf, sizes[i], 2 * i));
        fill(buf, sizes[i], 2 * i + 1);
        send_wait(&s, buf, sizes[i], cli, T_PING);
    }
    /* A new life of the index, published on the same port. */
    size_t old_index_len = sizeof(name);
    OK(fi_getname(&s.ep->fid, name, &old_index_len));
    OK(fi_close(&s.ep->fid));
    ep_up(&s);
    char now[FI_NAME_MAX];
    size_t nl = sizeof(now);
    OK(fi_getname(&s.ep->fid, now, &nl));
    REQUIRE(nl == 64 && memcmp(name, now, 64)); /* the same index, another life */
    send_wait(&s, "ready", 6, cli, T_READY);
    /* the first T_AFTER to arrive must be the one sent to the new name */
    REQUIRE(recv_wait(&s, buf, BIG, T_AFTER) == 6 && !memcmp(buf, "fresh", 6));
    send_wait(&s, "done", 5, cli, T_DONE);
    /* nothing else for this life: the stale ones were refused, not queued */
    int ctx;
    OK(fi_trecv(s.ep, buf, BIG, NULL, FI_ADDR_UNSPEC, T_AFTER, 0, &ctx));
    struct fi_cq_tagged_entry e;
    double end = fic_now() + 0.5;
    while (fic_now() < end)
        REQUIRE(fi_cq_read(s.cq, &e, 1) == -FI_EAGAIN);
    OK(fi_cancel(&s.ep->fid, &ctx));
    REQUIRE(wait_cq(&s, &e) == -FI_ECANCELED);
    free(buf);
    close_side(&s);
    printf("server: both lives served, the stale messages refused\n");
    return 0;
}

/* Short names (32 bytes) beside full ones: the same peer, the same text;
 * an array of both lengths; fi_getinfo's dest_addr; malformed ones refused.
 * mine: our own short name. */
static void short_names(struct side *s, fi_addr_t srv, const char *mine)
{
    char full[64], t1[256], t2[256];
    size_t fl = sizeof(full), l1 = sizeof(t1), l2 = sizeof(t2);
    OK(fi_getname(&s->ep->fid, full, &fl));
    REQUIRE(fl == 64);
    fi_av_straddr(s->av, full, t1, &l1);
    fi_av_straddr(s->av, mine, t2, &l2);
    REQUIRE(!strcmp(t1, t2) && strstr(t1, "key"));
    /* an array: short, full, short - each as long as it is */
    char arr[32 + 64 + 32];
    memcpy(arr, mine, 32);
    memcpy(arr + 32, full, 64);
    memcpy(arr + 96, mine, 32);
    fi_addr_t fa[3];
    REQUIRE(fi_av_insert(s->av, arr, 3, fa, 0, NULL) == 3);
    for (int i = 0; i < 3; i++) {
        /* in 32 bytes: the short name where one was inserted; a full one
         * (its ulnet address in the long form) only in part, and its length */
        char a[64];
        size_t al = 32;
        OK(fi_av_lookup(s->av, fa[i], a, &al));
        REQUIRE(i == 1 ? al == 64 && !memcmp(a, full, 32) : al == 32 && !memcmp(a, mine, 32));
        OK(fi_av_remove(s->av, &fa[i], 1, 0));
    }
    char a[64];
    size_t al = 32;
    OK(fi_av_lookup(s->av, srv, a, &al));
    REQUIRE(al == 64);
    /* fi_getinfo(3) dest_addr: a short name at its own length, and no other */
    struct fi_info *h = fic_hints(FI_TAGGED | FI_MSG, NULL), *info;
    h->dest_addr = calloc(1, 64);
    memcpy(h->dest_addr, mine, 32);
    h->dest_addrlen = 32;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
    REQUIRE(info->dest_addrlen == 64 && info->dest_addr);
    fi_freeinfo(info);
    h->dest_addrlen = 64;
    REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info) == -FI_ENODATA);
    fi_freeinfo(h);
    /* malformed: a byte in the padding, a length past the room, a key of 0 */
    char bad[32];
    fi_addr_t x;
    memcpy(bad, mine, 32);
    bad[31] = 1;
    REQUIRE(fi_av_insert(s->av, bad, 1, &x, 0, NULL) < 1 && x == FI_ADDR_NOTAVAIL);
    memcpy(bad, mine, 32);
    bad[0] = (char)(0xa0 | 29);
    REQUIRE(fi_av_insert(s->av, bad, 1, &x, 0, NULL) < 1 && x == FI_ADDR_NOTAVAIL);
    l1 = sizeof(t1); /* printed as what it is: nothing read of it */
    fi_av_straddr(s->av, bad, t1, &l1);
    REQUIRE(!strcmp(t1, "ulnet ep 0, not a ulnet address, life 0"));
    memcpy(bad, mine, 32);
    memset(bad + 8, 0, 8);
    REQUIRE(fi_av_insert(s->av, bad, 1, &x, 0, NULL) < 1 && x == FI_ADDR_NOTAVAIL);
}

static int client(const char *host, const char *port)
{
    struct side s = {0};
    open_side(&s, host, port, 0);
    REQUIRE(s.info->dest_addr && s.info->dest_addrlen == 64);
    fi_addr_t srv, again;
    REQUIRE(fi_av_insert(s.av, s.info->dest_addr, 1, &srv, 0, NULL) == 1);
    /* fi_av_insertsvc asks the same name service: the same name */
    REQUIRE(fi_av_insertsvc(s.av, host, port, &again, 0, NULL) == 1);
    char a[64], b[64];
    size_t al = sizeof(a), bl = sizeof(b);
    OK(fi_av_lookup(s.av, srv, a, &al));
    OK(fi_av_lookup(s.av, again, b, &bl));
    REQUIRE(al == 64 && bl == 64 && !memcmp(a, b, 64));
    char name[FI_NAME_MAX];
    size_t nl = 31;
    REQUIRE(fi_getname(&s.ep->fid, name, &nl) == -FI_ETOOSMALL && nl == 64);
    nl = 32;
    OK(fi_getname(&s.ep->fid, name, &nl));
    REQUIRE(nl == 32);
    short_names(&s, srv, name);
    send_wait(&s, name, nl, srv, T_HELLO);
    uint8_t *buf = malloc(BIG);
    REQUIRE(buf);
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        fill(buf, sizes[i], 2 * i);
        send_wait(&s, buf, sizes[i], srv, T_PING);
        REQUIRE(recv_wait(&s, buf, BIG, T_PING) == sizes[i] && same(buf, sizes[i], 2 * i + 1));
    }
    REQUIRE(recv_wait(&s, buf, BIG, T_READY) == 6);
    fi_addr_t fresh;
    REQUIRE(fi_av_insertsvc(s.av, host, port, &fresh, 0, NULL) == 1);
    OK(fi_av_lookup(s.av, fresh, b, &bl));
    REQUIRE(memcmp(a, b, 64)); /* a new life: another name */
    /* fi_av_insertsym: the port and the next (nothing there: refused after
     * the lookup's timeout), one node: one in, one FI_ADDR_NOTAVAIL */
    fi_addr_t sym[2];
    char c[64];
    size_t cl = sizeof(c);
    REQUIRE(fi_av_insertsym(s.av, host, 1, port, 2, sym, 0, NULL) == 1);
    REQUIRE(sym[1] == FI_ADDR_NOTAVAIL);
    OK(fi_av_lookup(s.av, sym[0], c, &cl));
    REQUIRE(!memcmp(b, c, 64));
    /* to the old name: an eager message, dropped; a rendezvous, failed */
    send_wait(&s, "stale", 6, srv, T_AFTER);
    int ctx;
    fill(buf, BIG, 9);
    OK(fi_tsend(s.ep, buf, BIG, NULL, srv, T_AFTER, &ctx));
    int rc = wait_for(&s, &ctx);
    if (rc != -FI_ECONNRESET) {
        fprintf(stderr, "client: a rendezvous to a closed endpoint's name: %d (%s)\n", rc,
                fi_strerror(-rc));
        return 1;
    }
    send_wait(&s, "fresh", 6, fresh, T_AFTER);
    REQUIRE(recv_wait(&s, buf, BIG, T_DONE) == 5);
    free(buf);
    close_side(&s);
    printf("client: name looked up, data checked both ways, stale name refused\n");
    return 0;
}

/* A TCP server that is not a name service: answers garbage (mode 0) or
 * accepts and never answers (mode 1), until the test ends. */
struct fake {
    int fd, mode;
};
static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int c = accept(f->fd, NULL, NULL);
        if (c < 0) return NULL;
        if (f->mode == 0) {
            static const char junk[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
            if (write(c, junk, sizeof(junk) - 1) < 0) perror("fake: write");
            close(c);
        } /* mode 1: keeps c open and silent */
    }
}

static int fake_port(struct fake *f, int mode)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    f->mode = mode;
    REQUIRE(f->fd >= 0 && !bind(f->fd, (struct sockaddr *)&a, l) && !listen(f->fd, 8));
    REQUIRE(!getsockname(f->fd, (struct sockaddr *)&a, &l));
    pthread_t t;
    REQUIRE(!pthread_create(&t, NULL, fake_serve, f));
    pthread_detach(t);
    return ntohs(a.sin_port);
}

/* fi_getinfo(127.0.0.1, port, 0) must fail with -FI_ENODATA within the
 * name timeout (FI_ULNET_NAME_TIMEOUT_MS, set by the caller) and a margin. */
static void refused(int port, double limit, const char *what)
{
    char p[8];
    snprintf(p, sizeof(p), "%d", port);
    struct fi_info *h = fic_hints(FI_TAGGED, NULL), *info = NULL;
    double t0 = fic_now();
    int rc = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", p, 0, h, &info);
    double took = fic_now() - t0;
    printf("refuse: %s: %s after %.2f s\n", what, fi_strerror(-rc), took);
    REQUIRE(rc == -FI_ENODATA && !info && took < limit);
    fi_freeinfo(h);
}

static int refuse(void)
{
    /* a port nobody listens on: a socket bound and closed, so free now */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0 && !bind(fd, (struct sockaddr *)&a, l) && !getsockname(fd, (void *)&a, &l));
    int free_port = ntohs(a.sin_port);
    close(fd);
    const double lim = 0.5 + 2.0; /* FI_ULNET_NAME_TIMEOUT_MS=500, and a loaded machine */
    refused(free_port, lim, "nothing listening");
    struct fake junk, mute;
    refused(fake_port(&junk, 0), lim, "not a name service");
    int mute_port = fake_port(&mute, 1);
    refused(mute_port, lim, "a server that never answers");
    /* A client that did not pick ulnet by name (hints or FI_PROVIDER) gets
     * no lookup at all: its fi_getinfo reaches every provider, and must not
     * wait on, or dial, a port that belongs to another one. The mute server
     * would hold a lookup for the whole timeout. */
    unsetenv("FI_PROVIDER"); /* libfabric read it at its start: ulnet stays the only one */
    char mp[8];
    snprintf(mp, sizeof(mp), "%d", mute_port);
    struct fi_info *h = fic_hints(FI_TAGGED, NULL), *info = NULL;
    free(h->fabric_attr->prov_name);
    h->fabric_attr->prov_name = NULL;
    double t0 = fic_now();
    int rc = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", mp, 0, h, &info);
    double took = fic_now() - t0;
    printf("refuse: ulnet not named: %s after %.3f s\n", fi_strerror(-rc), took);
    REQUIRE(rc == -FI_ENODATA && !info && took < 0.4);
    fi_freeinfo(h);
    setenv("FI_PROVIDER", "ulnet", 1);
    /* fi_av_insertsvc: the same lookups, the AV's failure */
    struct side s = {0};
    open_side(&s, NULL, NULL, 0);
    char p[8];
    snprintf(p, sizeof(p), "%d", free_port);
    fi_addr_t fa = 0;
    REQUIRE(fi_av_insertsvc(s.av, "127.0.0.1", p, &fa, 0, NULL) == 0); /* none inserted */
    REQUIRE(fa == FI_ADDR_NOTAVAIL);
    close_side(&s);
    printf("refuse: every lookup refused in bounded time\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "server")) return server(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "client")) return client(argv[2], argv[3]);
    if (argc == 2 && !strcmp(argv[1], "refuse")) return refuse();
    fprintf(stderr, "usage: fi_names server PORT | client HOST PORT | refuse\n");
    return 2;
}
