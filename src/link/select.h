/*
 * select.h - where the link under an endpoint is chosen (select.c).
 */
#ifndef ULN_LINK_SELECT_H
#define ULN_LINK_SELECT_H

struct uln_ctx;
/* The link under an endpoint: AF_XDP where ULN_TRANSPORT=xdp asks for it
 * and it can be had, or where ULN_TRANSPORT=auto finds a driver that runs it
 * zero-copy; else (one line on stderr says why, unless the endpoint is on
 * loopback or any address under auto) the socket link; then the fault
 * injector around it as ULN_FAULT says. cfg is
 * the socket link's, its fd the endpoint's bound socket: either link owns it
 * once this succeeds. */
struct uln_link;
struct uln_link_udp_cfg;
int uln_link_select_open(struct uln_ctx *ctx, const struct uln_link_udp_cfg *cfg,
                         struct uln_link **out);

#endif
