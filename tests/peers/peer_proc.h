/*
 * peer_proc.h - the peers tests' other processes: this program again, in
 * another role, joined to the caller by two pipes (test_peers.c,
 * peers_mix.c). With ULNTEST_PEER_EXEC (e.g. "hosts.sh exec h1") the child
 * is started through that command, on another namespace host, and inherits
 * the pipes all the same.
 */
#ifndef ULN_TEST_PEER_PROC_H
#define ULN_TEST_PEER_PROC_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ulnet.h"

/* Start this program as `argv0 role IN OUT` (the pipes' descriptors); port,
 * if not 0, becomes its ULN_UDP_PORT. *to writes to it, *from reads it. */
static pid_t peer_proc_start(const char *argv0, const char *role, int port, int *to, int *from)
{
    int a[2], b[2];
    if (pipe(a) || pipe(b)) exit(2);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) exit(2);
    self[sl] = 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(a[1]);
        close(b[0]);
        char in[16], out[16];
        snprintf(in, sizeof in, "%d", a[0]);
        snprintf(out, sizeof out, "%d", b[1]);
        if (port) {
            char p[16];
            snprintf(p, sizeof p, "%d", port);
            setenv("ULN_UDP_PORT", p, 1);
        }
        const char *wrap = getenv("ULNTEST_PEER_EXEC");
        if (wrap && *wrap) {
            char cmd[8192];
            snprintf(cmd, sizeof cmd, "exec %s '%s' %s %s %s", wrap, self, role, in, out);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execl(self, argv0, role, in, out, (char *)NULL);
        }
        _exit(127);
    }
    close(a[0]);
    close(b[1]);
    *to = a[1];
    *from = b[0];
    return pid;
}

/* The child's exit status; 128 + the signal that ended it; -1 on error. */
static int peer_proc_reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A context with no job (ULN_BOOT_NONE: it learns peers by address), as
 * every process of these tests opens one; exits 1 saying why it could not. */
static inline struct uln_ctx *peer_ctx_open(void)
{
    struct uln_config cfg;
    uln_config_init(&cfg);
    cfg.boot = ULN_BOOT_NONE;
    struct uln_ctx *ctx;
    int rc = uln_open(&cfg, &ctx);
    if (rc) {
        fprintf(stderr, "uln_open: %s\n", uln_strerror(rc));
        exit(1);
    }
    return ctx;
}

#endif
