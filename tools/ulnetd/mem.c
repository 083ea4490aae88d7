/*
 * mem.c - processes' registered memory from uln_mem_alloc, mapped here
 * (docs/service.md, "Who does what"): a MEM message at registration brings
 * the block's memfd; we map the region's pages shared, so that PUTs, GETs
 * and atomics we do for the process touch the very physical memory its own
 * loads, stores and __atomic ops touch (and its shm peers').
 *
 * The process is untrusted: the block must be sealed against shrinking (no
 * SIGBUS for us, ever), of the size said, and the region inside it. What we
 * record (the key, where the region is in the owner's space) is ours from
 * then on; a use is allowed only for the key the owner's table admitted
 * under our hazard slot (serve.c) and within the range recorded here, so an
 * owner that rewrites its key table afterwards reaches only its own memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ulnetd.h"

struct mapped {
    uint64_t key;       /* 0: none */
    uint64_t addr, len; /* the region in the owner's space */
    uint8_t *map;       /* its pages here */
    size_t map_len;
    uint8_t *base; /* the region's first byte here */
};

static void unmap(struct mapped *m)
{
    if (m->key) munmap(m->map, m->map_len);
    *m = (struct mapped){0};
}

int mem_add(struct client *c, const struct uln_svc_mem *r, int fd, const char **why)
{
    *why = "";
    if (!c->attached || r->index >= c->hdr.max_regions || !r->key || !r->len) {
        *why = "memory for no region of an attached process";
        return -EINVAL;
    }
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != r->memfd_len ||
        r->memfd_off > r->memfd_len || r->len > r->memfd_len - r->memfd_off || seals < 0 ||
        !(seals & F_SEAL_SHRINK)) {
        *why = "the memory is not a sealed block holding the region said";
        return -EINVAL;
    }
    if (r->addr + r->len < r->addr) {
        *why = "the region wraps around";
        return -EINVAL;
    }
    if (!c->maps && !(c->maps = calloc(c->hdr.max_regions, sizeof *c->maps))) return -ENOMEM;
    uint64_t page = 4096, start = r->memfd_off & ~(page - 1);
    size_t len = (size_t)(r->memfd_off + r->len - start);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (p == MAP_FAILED) {
        *why = "cannot map the memory";
        return -ENOMEM;
    }
    struct mapped *m = &c->maps[r->index];
    unmap(m); /* an earlier region at that index whose MEM_DEL never came */
    *m = (struct mapped){.key = r->key,
                         .addr = r->addr,
                         .len = r->len,
                         .map = p,
                         .map_len = len,
                         .base = (uint8_t *)p + (r->memfd_off - start)};
    return 0;
}

void mem_del(struct client *c, const struct uln_svc_mem *r)
{
    if (c->maps && r->index < c->hdr.max_regions && c->maps[r->index].key == r->key)
        unmap(&c->maps[r->index]);
}

void mem_drop_all(struct client *c)
{
    for (uint32_t i = 0; c->maps && i < c->hdr.max_regions; i++)
        unmap(&c->maps[i]);
    free(c->maps);
    c->maps = NULL;
}

uint8_t *mem_at(const struct client *t, uint64_t key, uint64_t addr, uint64_t n)
{
    uint64_t idx = key >> ULN_KEY_INDEX_SHIFT;
    if (!t->maps || idx >= t->hdr.max_regions) return NULL;
    const struct mapped *m = &t->maps[idx];
    if (m->key != key || addr < m->addr || addr - m->addr > m->len || n > m->len - (addr - m->addr))
        return NULL;
    return m->base + (addr - m->addr);
}

uint8_t *mem_find(const struct client *t, uint64_t addr, uint64_t n)
{
    for (uint32_t i = 0; t->maps && i < t->hdr.max_regions; i++) {
        const struct mapped *m = &t->maps[i];
        if (m->key && addr >= m->addr && addr - m->addr <= m->len && n <= m->len - (addr - m->addr))
            return m->base + (addr - m->addr);
    }
    return NULL;
}
