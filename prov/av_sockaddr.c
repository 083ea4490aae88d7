/*
 * av_sockaddr.c - socket addresses as endpoint names (FI_SOCKADDR,
 * FI_SOCKADDR_IN, FI_SOCKADDR_IN6): an IP address and a port naming an
 * endpoint, as fi_getinfo(3) describes them.
 *
 * A domain opened with such an info names its endpoints so: each endpoint
 * publishes its ulnet name through the name service (names.c) on its socket
 * address, which fi_getname gives, and fi_av_insert takes socket addresses.
 * ulnet's names are opaque (they carry a key), so an inserted address is
 * resolved by asking its name service - from a thread of its own, started at
 * insertion. fi_av_insert waits for each lookup's first try (all at once,
 * each bounded by FI_ULNET_NAME_TIMEOUT_MS): an endpoint that is there is
 * known when the call returns, so the messages it sends next carry its
 * fi_addr. One that is not there yet (nothing listens: a server starting) is
 * inserted all the same - fi_av(3) without FI_EVENT inserts addresses, it
 * does not reach them; the tcp provider connects on first use - and its
 * lookup goes on, tried again until FI_ULNET_NAME_WAIT_MS. Until the answer, an operation to the
 * address returns -FI_EAGAIN, which the caller retries as for a full queue; a lookup that failed
 * (nothing answered within FI_ULNET_NAME_WAIT_MS, or not a ulnet name) fails the operation with
 * -FI_EADDRNOTAVAIL, and the next use asks again.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ulnfi.h"

/* One lookup: its thread, and what it resolves. */
struct ulnfi_sa_job {
    struct ulnfi_sa_job *next;
    struct ulnfi_av *av;
    size_t slot;
    uint32_t seq; /* the slot's insertion it serves: a slot removed meanwhile is left alone */
    pthread_t thread;
    _Atomic bool done;            /* the thread has finished: joining it does not wait */
    struct ulnfi_sa_first *first; /* told after the first try, then forgotten */
    struct sockaddr_storage sa;
    socklen_t len;
};

bool ulnfi_sa_format(uint32_t fmt)
{
    return fmt == FI_SOCKADDR || fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6;
}

socklen_t ulnfi_sa_len(const void *addr)
{
    struct sockaddr_storage ss;
    memcpy(&ss, addr, sizeof(struct sockaddr_in)); /* the family, and an IPv4 address's all */
    if (ss.ss_family == AF_INET) return sizeof(struct sockaddr_in);
    if (ss.ss_family == AF_INET6) return sizeof(struct sockaddr_in6);
    return 0;
}

/* The port of a socket address whose family ulnfi_sa_len knew. */
static uint16_t sa_port(const void *addr)
{
    struct sockaddr_in6 a; /* sin_port and sin6_port share their place */
    memcpy(&a, addr, sizeof(struct sockaddr_in));
    return ntohs(a.sin6_port);
}

size_t ulnfi_sa_str(const void *addr, char *buf, size_t n)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    socklen_t len = ulnfi_sa_len(addr);
    int w;
    if (len == sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof(a));
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
        w = snprintf(buf, n, "fi_sockaddr_in://%s:%u", ip, ntohs(a.sin_port));
    } else if (len) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof(a));
        inet_ntop(AF_INET6, &a.sin6_addr, ip, sizeof(ip));
        w = snprintf(buf, n, "fi_sockaddr_in6://[%s]:%u", ip, ntohs(a.sin6_port));
    } else {
        w = snprintf(buf, n, "not a socket address");
    }
    return w < 0 ? 0 : (size_t)w;
}

/* ---- resolution ------------------------------------------------------------------------ */

/* The slot's lookup ended: its name inserted as any other, or the slot
 * marked failed. Under the domain lock. */
static void finish(struct ulnfi_av *av, size_t slot, int rc, const struct ulnfi_addr *name)
{
    struct ulnfi_av_sa *s = &av->sa[slot];
    if (!rc) rc = ulnfi_av_resolved(av, slot, name);
    if (rc) {
        s->state = ULNFI_SA_FAILED;
        return;
    }
    s->state = ULNFI_SA_DONE;
    for (int i = 0; i < av->dom->nlive; i++) /* messages already here from it get its address */
        if (av->dom->live[i]->av == av) ulnfi_rx_resolve(av->dom->live[i]);
}

static void tell_more(struct ulnfi_sa_first *f, int n)
{
    pthread_mutex_lock(&f->lock);
    f->left += n;
    pthread_mutex_unlock(&f->lock);
}

static void tell_first(struct ulnfi_sa_first *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->lock);
    f->left--;
    pthread_cond_signal(&f->done);
    pthread_mutex_unlock(&f->lock); /* f may be gone from here on */
}

static void commit(struct ulnfi_sa_job *j, int rc, const struct ulnfi_addr *name)
{
    struct ulnfi_av *av = j->av;
    ulnfi_lock(av->dom);
    if (av->used[j->slot] && av->sa[j->slot].seq == j->seq) finish(av, j->slot, rc, name);
    ulnfi_unlock(av->dom);
}

static void *resolve(void *arg)
{
    struct ulnfi_sa_job *j = arg;
    struct ulnfi_addr name;
    const struct sockaddr *sa = (struct sockaddr *)&j->sa;
    int rc = ulnfi_names_lookup_sa(sa, j->len, true, &j->av->sa_stop, &name);
    if (!rc) commit(j, rc, &name); /* before fi_av_insert returns */
    tell_first(j->first);
    if (rc) commit(j, ulnfi_names_lookup_sa(sa, j->len, false, &j->av->sa_stop, &name), &name);
    j->done = true;
    return NULL;
}

void ulnfi_av_sa_wait(struct ulnfi_sa_first *f)
{
    pthread_mutex_lock(&f->lock);
    while (f->left) /* each first try is bounded (names.c): so is this */
        pthread_cond_wait(&f->done, &f->lock);
    pthread_mutex_unlock(&f->lock);
}

/* Join the lookups that have ended. Under the domain lock. */
static void reap(struct ulnfi_av *av)
{
    for (struct ulnfi_sa_job **p = &av->sa_jobs; *p;) {
        struct ulnfi_sa_job *j = *p;
        if (!j->done) {
            p = &j->next;
            continue;
        }
        pthread_join(j->thread, NULL);
        *p = j->next;
        free(j);
    }
}

/* Ask the slot's name service, from a new thread; first (NULL: none) told
 * after its first try. Under the domain lock. */
static int start(struct ulnfi_av *av, size_t slot, struct ulnfi_sa_first *first)
{
    reap(av);
    struct ulnfi_av_sa *s = &av->sa[slot];
    struct ulnfi_sa_job *j = calloc(1, sizeof(*j));
    if (!j) return -FI_ENOMEM;
    *j =
        (struct ulnfi_sa_job){.av = av, .slot = slot, .seq = s->seq, .len = s->len, .first = first};
    memcpy(&j->sa, &s->sa, s->len);
    s->state = ULNFI_SA_PENDING;
    if (first) tell_more(first, 1); /* before the thread can tell it */
    if (pthread_create(&j->thread, NULL, resolve, j)) {
        if (first) tell_more(first, -1);
        free(j);
        s->state = ULNFI_SA_FAILED;
        return -FI_ENOMEM;
    }
    j->next = av->sa_jobs;
    av->sa_jobs = j;
    return 0;
}

int ulnfi_av_sa_insert(struct ulnfi_av *av, size_t slot, const void *addr, socklen_t len,
                       struct ulnfi_sa_first *first)
{
    if (!len || !sa_port(addr)) return -FI_EINVAL; /* no family of ours, or no port to ask */
    struct ulnfi_av_sa *s = &av->sa[slot];
    memcpy(&s->sa, addr, len);
    s->len = len;
    s->seq++;
    return start(av, slot, first);
}

int ulnfi_av_sa_use(struct ulnfi_av *av, size_t slot)
{
    struct ulnfi_av_sa *s = &av->sa[slot];
    switch (s->state) {
    case ULNFI_SA_PENDING:
        return -FI_EAGAIN;
    case ULNFI_SA_FAILED: /* said once; the next use asks again */
        s->seq++;
        start(av, slot, NULL);
        return -FI_EADDRNOTAVAIL;
    default:
        return -FI_EINVAL; /* not a socket address's slot: a caller's bug */
    }
}

void ulnfi_av_sa_close(struct ulnfi_av *av)
{
    av->sa_stop = true; /* lookups give up at their next pause */
    while (av->sa_jobs) {
        struct ulnfi_sa_job *j = av->sa_jobs;
        pthread_join(j->thread, NULL); /* not under the lock: the thread takes it to end */
        av->sa_jobs = j->next;
        free(j);
    }
    free(av->sa);
}
