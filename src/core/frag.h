/*
 * frag.h - the fragment cursor: one operation walked in pieces of a
 * transport's fragment size, within a pass's byte budget. Every segmenting
 * loop (ring-path PUT fragments, GET answers, a packet transport's PUT) uses
 * it, so the rules live once: no piece larger than the fragment size, none
 * larger than what is left of a nonzero budget (a zero budget limits
 * nothing: the caller stops the loop), and the last piece is the one that
 * reaches the end. The progress counter is the operation's own (it outlives
 * the pass); the cursor only points at it.
 */
#ifndef ULN_FRAG_H
#define ULN_FRAG_H

#include <stdbool.h>
#include <stdint.h>

struct uln_frag {
    uint64_t *done;   /* bytes already handed on: the operation's counter */
    uint64_t len;     /* the whole operation */
    uint32_t max;     /* the transport's fragment size */
    uint32_t *budget; /* bytes this pass may still move */
};

static inline struct uln_frag uln_frag_start(uint64_t *done, uint64_t len, uint32_t max,
                                             uint32_t *budget)
{
    return (struct uln_frag){.done = done, .len = len, .max = max, .budget = budget};
}

/* The size of the next piece (0 only when nothing is left). */
static inline uint32_t uln_frag_next(const struct uln_frag *f)
{
    uint64_t n = f->len - *f->done;
    if (n > f->max) n = f->max;
    if (n > *f->budget && *f->budget > 0) n = *f->budget;
    return (uint32_t)n;
}

/* Is a piece of n bytes from here the operation's last? */
static inline bool uln_frag_last(const struct uln_frag *f, uint32_t n)
{
    return *f->done + n == f->len;
}

/* n bytes went: advance, and charge them to the budget. */
static inline void uln_frag_take(struct uln_frag *f, uint32_t n)
{
    *f->done += n;
    *f->budget = n >= *f->budget ? 0 : *f->budget - n;
}

#endif
