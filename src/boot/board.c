/*
 * board.c - create the bootstrap board (see board.h for the contract).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS: -std=gnu11 alone does not expose them */
#endif

#include "boot/board.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

int uln_board_create(unsigned nranks)
{
    if (nranks == 0 || nranks > ULN_BOARD_MAX_RANKS) return -EINVAL;

    /* No MFD_CLOEXEC: the whole point is that the ranks inherit the descriptor
     * across exec. Sealing is allowed so the size can be frozen below. */
    int fd = memfd_create("ulnet-board", MFD_ALLOW_SEALING);
    if (fd < 0) return -errno;

    size_t bytes = uln_board_bytes(nranks);
    int err = 0;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        err = errno;
        goto fail;
    }

    /* Every rank maps the whole board; if one of them (buggy or hostile) could
     * shrink it, all the others would take SIGBUS. Freeze the size. Best
     * effort: a kernel or seccomp policy refusing seals is not worth failing
     * the job for. */
    (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

    struct uln_board_hdr *hdr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (hdr == MAP_FAILED) {
        err = errno;
        goto fail;
    }
    /* ftruncate gave zeroes, so the counters and all slots start at 0. */
    hdr->magic = ULN_BOARD_MAGIC;
    hdr->nranks = nranks;
    hdr->slot_bytes = ULN_BOARD_SLOT_BYTES;
    /* munmap does not lose the stores: the pages belong to the memfd. */
    munmap(hdr, bytes);
    return fd;

fail:
    close(fd);
    return -err;
}
