/*
 * select.h - where the link under an endpoint is chosen (select.c), and what
 * a link gives select.c to be chosen: a struct uln_link_kind.
 *
 * Adding a link: its files (src/link/<name>/, the ops of link.h), a kind
 * (name, settings, cost, open) in one of them, and one line in select.c's
 * table. It is then ULN_LINK=<name>, auto weighs it by its cost, and its
 * settings are checked and listed with everyone's.
 */
#ifndef ULN_LINK_SELECT_H
#define ULN_LINK_SELECT_H

#include <stdbool.h>
#include <stddef.h>

struct uln_ctx;
struct uln_link;
struct uln_link_udp_cfg;

struct uln_settings_group;

struct uln_link_kind {
    const char *name; /* ULN_LINK=<name> */
    /* Optional: its settings (core/params.h), read at every uln_open. */
    const struct uln_settings_group *settings;
    /* What auto weighs: it tries the kinds with a cost, cheapest first, and
     * takes the first that opens. 0: only when ULN_LINK names it. */
    unsigned cost;
    /* Open on the endpoint's bound socket (cfg: its fd, which the link owns
     * once this succeeds, and the sizes). asked: ULN_LINK named it; else
     * auto tries it, and may be told no. 0, or -errno with why; *loud: the
     * reason is worth a line on stderr (not auto's own "no"). */
    int (*open)(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg, bool asked,
                struct uln_link **out, char *why, size_t whylen, bool *loud);
};

extern const struct uln_link_kind uln_link_kind_udp; /* udp/kind.c: the socket link */
extern const struct uln_link_kind uln_link_kind_xdp; /* xdp/kind.c: AF_XDP */
#ifdef ULN_TEST_HOOKS
extern const struct uln_link_kind uln_link_kind_loop; /* tests/link/loop.c */
#endif

/* The kind named name ("auto" is none), or NULL. */
const struct uln_link_kind *uln_link_kind_find(const char *name);
/* "auto, udp, xdp, ...": the names ULN_LINK takes, for messages. */
void uln_link_kind_names(char *out, size_t room);

/* ULN_LINK and ULN_FAULT, a settings group (core/params.h) that brings
 * along every kind's: the transports whose packets go over a link name it
 * among theirs. */
struct uln_link_params {
    char link[16];     /* "auto" or a kind's name; ULN_TRANSPORT=xdp: "xdp" */
    const char *fault; /* NULL or the fault injector's spec, checked */
};
extern const struct uln_settings_group uln_link_settings;

/* The link under an endpoint: the one ULN_LINK names (ULN_TRANSPORT=xdp is
 * ULN_LINK=xdp), the socket link when it did not come (one line on stderr
 * says why); with auto under ULN_TRANSPORT=auto, the cheapest kind that
 * opens (AF_XDP where its driver runs it zero-copy: no line when the
 * interface is simply not one for it), else the socket link. Then the fault
 * injector around it as ULN_FAULT says. cfg is the socket link's, its fd
 * the endpoint's bound socket: the link owns it once this succeeds. */
int uln_link_select_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg,
                         struct uln_link **out);

#endif
