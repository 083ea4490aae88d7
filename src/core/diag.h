/*
 * diag.h - what the tools (ulninfo) may ask the library beyond ulnet.h: the
 * settings table, the link under udp and why, limits of the bootstrap and
 * the build. Tools include this and ulnet.h, never the internal headers: the
 * library's objects can change shape without a tool following.
 */
#ifndef ULN_DIAG_H
#define ULN_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ulnet.h"

/* The ULN_* settings uln_open reads: name, default (NULL: none, set by a
 * launcher or derived), bounds of a number (hi 0: not a plain number), and
 * what it does. n: how many, in the order ulninfo lists them. */
struct uln_setting {
    const char *name;
    const char *dflt;
    uint64_t lo, hi;
    const char *doc;
    /* Where the list has it (core/params.h: enum uln_setting_section), and
     * ULN_SETTING_SIZE: a size in bytes that takes K, M or G. */
    unsigned flags;
};
#define ULN_SETTING_SIZE 0x100u
const struct uln_setting *uln_settings(unsigned *n);

/* The link under udp's packets in a context, as far as it knows. */
struct uln_diag_link {
    bool udp;          /* the UDP transport is open in this context */
    bool auto_choice;  /* ULN_LINK=auto under ULN_TRANSPORT=auto: auto weighs the links */
    char asked[16];    /* ULN_LINK: "auto" or a link's name */
    char kind[8];      /* the link the endpoints took: "" before one opened */
    char xdp_mode[32]; /* with xdp: "native|generic, copy|zero-copy, queue Q" */
    char why[160];     /* why the link asked for (or auto's) was not had; "" */
    unsigned udp_mtu;  /* ULN_UDP_MTU as resolved (0: the interface's) */
};
void uln_diag_link(const struct uln_ctx *ctx, struct uln_diag_link *out);

/* The sealing of udp's datagrams in a context (ULN_SECURE). */
struct uln_diag_seal {
    const char *mode;   /* "off", "auth" or "encrypt" */
    int level;          /* 0 off, 1 auth, 2 encrypt */
    const char *cipher; /* the cipher asked for, or the CPU's choice */
    bool cpu_aes;       /* the CPU accelerates AES-GCM */
    bool secret;        /* a job secret is given (ULN_SECRET_FILE) */
    const char *libs;   /* the libraries that seal (uln_seal_libraries) */
};
void uln_diag_seal(const struct uln_ctx *ctx, struct uln_diag_seal *out);

/* The host service (ULN_SERVICE): one line, attached to which, or why not. */
const char *uln_diag_service(const struct uln_ctx *ctx);

/* Whether this build has the AF_XDP link and the PMIx bootstrap. */
bool uln_diag_xdp_built(void);
bool uln_diag_pmix_built(void);
/* auto's verdict on an interface: 0 if it would try AF_XDP there (its
 * driver runs it zero-copy), else -errno and the one-line reason. */
int uln_diag_xdp_verdict(const char *ifname, char *why, size_t whylen);
/* The MTU the socket link takes from an interface's (m <= 0: unknown). */
unsigned uln_diag_iface_mtu(int m);
/* How the context joined its job (as uln_info's bootstrap says it, and
 * "single" for a job of one on its own board), and with ULN_ROOT the address
 * (port 0) of the interface that routes to rank 0 (-ENOENT in other modes). */
const char *uln_diag_boot_mode(const struct uln_ctx *ctx);
int uln_diag_boot_route(const struct uln_ctx *ctx, struct sockaddr_storage *ss, socklen_t *len);
/* Ranks a bootstrap board holds. */
unsigned uln_diag_board_max_ranks(void);

#endif
