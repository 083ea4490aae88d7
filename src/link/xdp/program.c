/*
 * program.c - the AF_XDP link's XDP program: attached once per interface
 * and process through libxdp, shared by the links there, reaped when a dead
 * process left it behind.
 */
#define _GNU_SOURCE
#include "link/xdp/priv.h"
#ifdef ULN_HAVE_XDP

/* The programs this process attached, one per interface, shared by its links. */
static struct xprog progs[PROGS_MAX];
static pthread_mutex_t progs_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------- */
/* The XDP program: one per (process, interface)                              */
/* ------------------------------------------------------------------------- */

/* The fd of the map called name among prog_fd's maps, or -1. */
static int prog_map(int prog_fd, const char *name)
{
    uint32_t ids[16];
    struct bpf_prog_info pi;
    memset(&pi, 0, sizeof(pi));
    pi.nr_map_ids = 16;
    pi.map_ids = (uint64_t)(uintptr_t)ids;
    uint32_t pl = sizeof(pi);
    if (bpf_obj_get_info_by_fd(prog_fd, &pi, &pl)) return -1;
    for (uint32_t i = 0; i < pi.nr_map_ids && i < 16; i++) {
        int fd = bpf_map_get_fd_by_id(ids[i]);
        if (fd < 0) continue;
        struct bpf_map_info mi;
        memset(&mi, 0, sizeof(mi));
        uint32_t ml = sizeof(mi);
        if (!bpf_obj_get_info_by_fd(fd, &mi, &ml) && !strcmp(mi.name, name)) return fd;
        close(fd);
    }
    return -1;
}

/* Loaded less than OWNER_WAIT_NS ago (the kernel's load time is boot-time). */
static bool young(int prog_fd)
{
    struct bpf_prog_info pi;
    memset(&pi, 0, sizeof(pi));
    uint32_t pl = sizeof(pi);
    struct timespec ts;
    if (bpf_obj_get_info_by_fd(prog_fd, &pi, &pl) || clock_gettime(CLOCK_BOOTTIME, &ts))
        return false;
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return now - pi.load_time < OWNER_WAIT_NS;
}

/* pid has ended: no such process, or a zombie not reaped yet (it holds no
 * descriptor any more, so nothing of it uses the program). */
static bool pid_gone(pid_t pid)
{
    if (kill(pid, 0) < 0) return errno == ESRCH;
    char path[32], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold anything but ends there */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Ours, and its process is gone (killed before it could detach it). One
 * with no owner yet is being attached by another process starting beside
 * us (the owner is written just after the attach), unless that was long
 * ago: then its process died in between. */
static bool orphan(const struct xdp_program *p)
{
    if (!p || strcmp(xdp_program__name(p), "ulnet_xdp")) return false;
    int fd = prog_map(xdp_program__fd(p), "ulnet_owner");
    if (fd < 0) return false;
    uint32_t k = 0, pid = 0;
    bool gone = !bpf_map_lookup_elem(fd, &k, &pid) &&
                (pid == 0 ? !young(xdp_program__fd(p)) : pid_gone((pid_t)pid));
    close(fd);
    return gone;
}

/* Detach the programs of dead ulnet processes from the interface: how many. */
static unsigned reap_orphans(int ifindex)
{
    struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
    if (!mp || libxdp_get_error(mp)) return 0;
    enum xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
    struct xdp_program *dead[16];
    unsigned n = 0;
    if (xdp_multiprog__is_legacy(mp)) {
        struct xdp_program *p = xdp_multiprog__main_prog(mp);
        if (orphan(p)) dead[n++] = p;
    } else {
        for (struct xdp_program *p = xdp_multiprog__next_prog(NULL, mp); p && n < 16;
             p = xdp_multiprog__next_prog(p, mp))
            if (orphan(p)) dead[n++] = p;
    }
    unsigned removed = 0;
    for (unsigned i = 0; i < n; i++)
        if (xdp_program__detach(dead[i], ifindex, mode, 0) == 0) {
            removed++;
            fprintf(stderr,
                    "ulnet: xdp: removed the XDP program of a dead ulnet process from "
                    "interface %d\n",
                    ifindex);
        }
    xdp_multiprog__close(mp);
    return removed;
}

int uln_link_xdp_reap(int ifindex)
{
    pthread_mutex_lock(&progs_lock);
    unsigned n = reap_orphans(ifindex);
    pthread_mutex_unlock(&progs_lock);
    return (int)n;
}

static int prog_attach(struct xprog *xp, enum uln_xdp_hook hook, bool generic_first, char *why,
                       size_t whylen)
{
    struct bpf_object *obj = bpf_object__open_mem(uln_xdp_obj, uln_xdp_obj_len, NULL);
    if (!obj || libbpf_get_error(obj)) {
        snprintf(why, whylen, "cannot open the XDP program object");
        return -EINVAL;
    }
    DECLARE_LIBXDP_OPTS(xdp_program_opts, o, .obj = obj, .prog_name = "ulnet_xdp");
    struct xdp_program *prog = xdp_program__create(&o);
    long err = libxdp_get_error(prog);
    if (!prog || err) {
        bpf_object__close(obj);
        snprintf(why, whylen, "cannot load the XDP program: %s", strerror((int)-err));
        return err ? (int)err : -EINVAL;
    }
    int rc = -EINVAL;
    enum xdp_attach_mode modes[2] = {XDP_MODE_NATIVE, XDP_MODE_SKB};
    if (generic_first) {
        modes[0] = XDP_MODE_SKB;
        modes[1] = XDP_MODE_NATIVE;
    }
    for (int i = 0; i < 2; i++) {
        if ((hook == ULN_XDP_HOOK_NATIVE && modes[i] != XDP_MODE_NATIVE) ||
            (hook == ULN_XDP_HOOK_GENERIC && modes[i] != XDP_MODE_SKB))
            continue;
        rc = xdp_program__attach(prog, xp->ifindex, modes[i], 0);
        if (!rc) {
            xp->mode = modes[i];
            break;
        }
    }
    if (rc) {
        snprintf(why, whylen, "cannot attach the XDP program (%s): %s",
                 hook == ULN_XDP_HOOK_NATIVE    ? "native"
                 : hook == ULN_XDP_HOOK_GENERIC ? "generic"
                                                : "native or generic",
                 rc == -EPERM ? "no privilege (CAP_NET_ADMIN and CAP_BPF)" : strerror(-rc));
        xdp_program__close(prog);
        bpf_object__close(obj);
        return rc;
    }
    xp->xsks_fd = bpf_object__find_map_fd_by_name(obj, "ulnet_xsks");
    xp->ports_fd = bpf_object__find_map_fd_by_name(obj, "ulnet_ports");
    int owner_fd = bpf_object__find_map_fd_by_name(obj, "ulnet_owner");
    uint32_t k = 0, pid = (uint32_t)getpid();
    if (xp->xsks_fd < 0 || xp->ports_fd < 0 || owner_fd < 0 ||
        bpf_map_update_elem(owner_fd, &k, &pid, 0)) {
        xdp_program__detach(prog, xp->ifindex, xp->mode, 0);
        xdp_program__close(prog);
        bpf_object__close(obj);
        snprintf(why, whylen, "the XDP program's maps are missing");
        return -EINVAL;
    }
    /* Without the count (a kernel that cannot map arrays) the link reads
     * its socket by the tick alone, as before the count existed. */
    int passed_fd = bpf_object__find_map_fd_by_name(obj, "ulnet_passed");
    void *m = passed_fd < 0 ? MAP_FAILED
                            : mmap(NULL, PASSED_MAP_LEN, PROT_READ, MAP_SHARED, passed_fd, 0);
    xp->passed = m == MAP_FAILED ? NULL : m;
    xp->prog = prog;
    xp->obj = obj;
    return 0;
}

static void prog_free(struct xprog *xp)
{
    if (xp->passed) munmap(xp->passed, PASSED_MAP_LEN);
    xdp_program__detach(xp->prog, xp->ifindex, xp->mode, 0);
    xdp_program__close(xp->prog);
    bpf_object__close(xp->obj);
    *xp = (struct xprog){0};
}

/* This process's program on ifindex (attached now if it is the first link
 * there) and a free slot in its XSKMAP. */
struct xprog *uln_xdp_prog_get(int ifindex, enum uln_xdp_hook hook, bool generic_first,
                               uint32_t *slot, char *why, size_t whylen)
{
    pthread_mutex_lock(&progs_lock);
    struct xprog *xp = NULL, *free_xp = NULL;
    for (unsigned i = 0; i < PROGS_MAX; i++) {
        if (progs[i].refs && progs[i].ifindex == ifindex) xp = &progs[i];
        if (!progs[i].refs && !free_xp) free_xp = &progs[i];
    }
    if (xp && ((hook == ULN_XDP_HOOK_NATIVE && xp->mode != XDP_MODE_NATIVE) ||
               (hook == ULN_XDP_HOOK_GENERIC && xp->mode != XDP_MODE_SKB))) {
        snprintf(why, whylen, "the interface's program is attached in the other mode");
        xp = NULL;
        goto out;
    }
    if (!xp && free_xp) {
        reap_orphans(ifindex);
        *free_xp = (struct xprog){.ifindex = ifindex};
        if (prog_attach(free_xp, hook, generic_first, why, whylen) == 0) xp = free_xp;
        if (!xp) goto out;
    } else if (!xp) {
        snprintf(why, whylen, "AF_XDP on more than %u interfaces", PROGS_MAX);
        goto out;
    }
    if (xp->slots == UINT64_MAX) {
        snprintf(why, whylen, "more than %u AF_XDP sockets on one interface", ULN_XDP_SLOTS);
        if (!xp->refs) prog_free(xp);
        xp = NULL;
        goto out;
    }
    *slot = (uint32_t)__builtin_ctzll(~xp->slots);
    xp->slots |= 1ull << *slot;
    xp->refs++;
out:
    pthread_mutex_unlock(&progs_lock);
    return xp;
}

/* The last link on the interface takes the program away. */
void uln_xdp_prog_put(struct xprog *xp, uint32_t slot)
{
    pthread_mutex_lock(&progs_lock);
    xp->slots &= ~(1ull << slot);
    if (--xp->refs == 0) prog_free(xp);
    pthread_mutex_unlock(&progs_lock);
}

#endif /* ULN_HAVE_XDP */
