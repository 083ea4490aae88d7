/*
 * fi_exit - a client that exits without closing anything. libfabric unloads
 * its providers when the process exits (fi_fini); a FI_PROGRESS_AUTO
 * domain's thread still running then would run unmapped code. Each of
 * RUNS children opens an auto-progress domain, an endpoint and a CQ, posts a
 * receive (so the thread has work to look at), and returns from main; every
 * one must exit with status 0, not a signal. Before the provider's cleanup
 * stopped its threads, about 3 runs in 8 died of SIGSEGV.
 * Usage: fi_exit (FI_PROVIDER_PATH at the provider)
 */
#include <sys/wait.h>

#include "fi_common.h"

enum { RUNS = 20 };

/* The set-up fails by exit(1) (fi_common.h's OK); done, it returns. */
static int child(void)
{
    struct fi_info *hints = fic_hints(FI_TAGGED, NULL);
    hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
    struct fic f = {0};
    fic_open(&f, hints, FI_AV_MAP, 0);
    if (f.info->domain_attr->data_progress != FI_PROGRESS_AUTO) return 4;
    fic_enable(&f);
    static char buf[64];
    OK(fi_trecv(f.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 1, 0, NULL));
    return 0; /* nothing closed: libfabric's fi_fini runs at exit */
}

int main(void)
{
    int bad = 0;
    for (int i = 0; i < RUNS; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) exit(child());
        int st;
        if (waitpid(pid, &st, 0) != pid) return 2;
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "run %d: killed by signal %d at exit\n", i, WTERMSIG(st));
            bad++;
        } else if (WEXITSTATUS(st)) {
            fprintf(stderr, "run %d: exit status %d (set-up failed)\n", i, WEXITSTATUS(st));
            bad++;
        }
    }
    printf("%d of %d runs exited cleanly without closing\n", RUNS - bad, RUNS);
    return bad ? 1 : 0;
}
