/*
 * pmix.h - joining a job through a PMIx server (mpirun of Open MPI, srun
 * --mpi=pmix of Slurm, PRRTE), and what tools may ask about it.
 *
 * boot.c takes this path when the process was started by a PMIx server
 * (uln_pmix_started) and neither ULN_BOOT_FD nor ULN_ROOT is set:
 *   rank, size    PMIx's rank and PMIX_JOB_SIZE (ULN_RANK/ULN_SIZE, if given,
 *                 must agree)
 *   job key       a 64-bit hash of the job's PMIx namespace, so ranks of one
 *                 job agree on it without talking, and separate jobs (separate
 *                 namespaces) never accept each other's packets; ULN_JOB_KEY
 *                 overrides it
 *   addresses     every rank PMIx_Puts its board slot (pid + address, the bytes
 *                 the other bootstraps publish), one PMIx_Fence with
 *                 PMIX_COLLECT_DATA spreads them, a PMIx_Get per peer fills a
 *                 private board (board.h's layout) as root.c does, so the
 *                 transports need not know which bootstrap ran
 *   barrier       PMIx_Fence_nb without data, progress driven while it runs
 *   ULN_BOOT_TIMEOUT  seconds (default 60) the address exchange may take
 *
 * Built with PMIx only when CMake found it (ULN_HAVE_PMIX, option ULN_PMIX);
 * otherwise the entry points below are stubs and uln_pmix_built() is false.
 */
#ifndef ULN_BOOT_PMIX_H
#define ULN_BOOT_PMIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct uln_boot;

/* Whether this library was built with PMIx support (tools such as ulninfo
 * report it next to uln_boot_mode). */
bool uln_pmix_built(void);

/* Whether this process was started by a PMIx server: the server hands every
 * client its identity in PMIX_NAMESPACE and PMIX_RANK. True also when the
 * library was built without PMIx (boot.c then says so). */
bool uln_pmix_started(void);

/* The job key of a PMIx namespace: a 64-bit hash, never 0. The same in every
 * build, so it is testable without a PMIx server. */
uint64_t uln_pmix_job_key(const char *nspace);

/* boot.c's entry points in PMIx mode (same contracts as uln_boot_*). rank and
 * size: from the configuration or ULN_RANK/ULN_SIZE (-1 / 0: not given); key:
 * ULN_JOB_KEY or the configuration's (0: derive it from the namespace).
 * Without PMIx support uln_pmix_init fails with -ENOTSUP. */
int uln_pmix_init(struct uln_boot *boot, long rank, long size, uint64_t key, int timeout_s);
int uln_pmix_publish(struct uln_boot *boot, const void *addr, size_t len);
int uln_pmix_wait_all(struct uln_boot *boot, int timeout_ms);
int uln_pmix_barrier(struct uln_boot *boot, int timeout_ms);
void uln_pmix_fini(struct uln_boot *boot);

#endif
