/*
 * av_shared.c - named address vectors shared between processes
 * (FI_SHARED_AV, fi_av(3) "name"): the AV that opens a name creates a
 * shared-memory table of the names inserted, slot by slot; a process that
 * opens the same name with FI_READ sees the same fi_addr_t values. ulnet's
 * peer ids are each process's own, so the reader inserts each name into its
 * own context, at the same slot, when it first needs it (the writer may
 * insert after the reader opened). map_addr points at the table's
 * fi_addr_t array, as libfabric's shared AVs do.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ulnfi.h"

#define ULNFI_SAV_MAGIC 0x756c5341u /* "ulSA" */
#define ULNFI_SAV_CAP   1024

struct ulnfi_sav {
    uint32_t magic;
    _Atomic uint32_t count; /* slots published: release after each slot's fields */
    fi_addr_t map[ULNFI_SAV_CAP];
    struct ulnfi_addr name[ULNFI_SAV_CAP];
    uint8_t used[ULNFI_SAV_CAP];
};

static void shm_name(const char *name, char *out, size_t len)
{
    snprintf(out, len, "/ulnet-av-%s", name[0] == '/' ? name + 1 : name);
}

int ulnfi_av_share(struct ulnfi_av *av, struct fi_av_attr *attr)
{
    char path[256];
    shm_name(attr->name, path, sizeof(path));
    if (strchr(path + 1, '/')) return -FI_EINVAL;
    bool reader = attr->flags & FI_READ;
    int fd =
        reader ? shm_open(path, O_RDONLY, 0) : shm_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return reader ? -FI_ENOENT : -FI_EACCES;
    if (!reader && ftruncate(fd, sizeof(struct ulnfi_sav))) {
        close(fd);
        shm_unlink(path);
        return -FI_ENOMEM;
    }
    struct ulnfi_sav *s =
        mmap(NULL, sizeof(*s), reader ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED) return -FI_ENOMEM;
    if (!reader) {
        s->magic = ULNFI_SAV_MAGIC;
    } else if (s->magic != ULNFI_SAV_MAGIC) {
        munmap(s, sizeof(*s));
        return -FI_EINVAL;
    }
    av->sav = s;
    av->sav_reader = reader;
    av->sav_path = strdup(path);
    attr->map_addr = s->map;
    return 0;
}

void ulnfi_av_share_close(struct ulnfi_av *av)
{
    if (!av->sav) return;
    munmap(av->sav, sizeof(struct ulnfi_sav));
    if (!av->sav_reader) shm_unlink(av->sav_path);
    free(av->sav_path);
}

/* The writer, under the domain lock: a name went into slot. */
void ulnfi_av_share_put(struct ulnfi_av *av, size_t slot, const struct ulnfi_addr *name, bool used)
{
    struct ulnfi_sav *s = av->sav;
    if (!s || av->sav_reader || slot >= ULNFI_SAV_CAP) return;
    s->name[slot] = *name;
    s->map[slot] = slot;
    s->used[slot] = used;
    uint32_t n = atomic_load_explicit(&s->count, memory_order_relaxed);
    /* release: a reader that sees the count sees the slot's fields */
    if (slot + 1 > n) atomic_store_explicit(&s->count, (uint32_t)slot + 1, memory_order_release);
}

/* A reader, under the domain lock: the writer's slots it lacks, inserted. */
void ulnfi_av_share_sync(struct ulnfi_av *av)
{
    struct ulnfi_sav *s = av->sav;
    if (!s || !av->sav_reader) return;
    /* acquire: pairs with the writer's release of the count */
    uint32_t n = atomic_load_explicit(&s->count, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (s->used[i] && (i >= av->count || !av->used[i])) {
            struct ulnfi_addr name = s->name[i];
            if (ulnfi_av_insert_at(av, i, &name))
                FI_WARN(&ulnfi_prov, FI_LOG_AV, "shared AV slot %u: name refused\n", i);
        }
}
