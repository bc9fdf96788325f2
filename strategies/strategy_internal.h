/* Internal to strategies/: what strategy_file.c (the v1 object form) and
 * strategy_atorch.c (ATorch's list form) share. Not part of the public
 * interface; names carry the aa__ prefix. */
#ifndef AA_STRATEGY_INTERNAL_H
#define AA_STRATEGY_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "strategy.h"

/* Parses ATorch's load_strategy list (a JSON array) into *out, starting
 * from the defaults. origin names the source in errors. *out is written only
 * on success. */
int aa__strategy_from_atorch(aa_strategy_t *out, const json_t *list, const char *origin);

/* Checks every field of s against the rules a v1 file is held to (ranges,
 * choices, provenance text, the rank order against the degrees), so that
 * what resolve accepts and what save writes can always be loaded back.
 * Message: "strategy: <field>: <rule>". */
int aa__strategy_validate(const aa_strategy_t *s);

/* The order that groups the ranks of s's degrees as s->order does, picked
 * canonically: only axes of degree > 1 have an order that matters, so it
 * is the default when those come in the default's order (always when at
 * most one axis is parallel), else those axes in s->order's order followed
 * by the others. The key shows this order, not s->order. */
aa_axis_order_t aa__strategy_effective_order(const aa_strategy_t *s);

/* The axis aa_axis_name calls name ("data", "tensor", "pipeline"), or -1. */
int aa__axis_from_name(const char *name);

/* The order whose axes, fastest first, are the n listed ones (distinct)
 * followed by the others in the default's relative order. */
aa_axis_order_t aa__axis_order_from(const aa_axis_t *listed, int n);

/* Reads a JSON list of global ranks (ATorch's rank_order) into
 * s->rank_order and s->nranks: 1..AA_STRATEGY_WORLD_MAX integers forming
 * a permutation of 0..n-1. Returns 0, or AA_EINVAL with the broken rule in
 * rule (for the caller to prefix), e.g. "rank 1 is given twice (positions
 * 0 and 2); a rank order is a permutation of 0..2". s is written only on
 * success. */
int aa__rank_order_read(aa_strategy_t *s, const json_t *v, char *rule, size_t cap);

/* The rank order of s held to its degrees: none, or a permutation of
 * 0..dp*tp*pp-1. Returns 0, or AA_EINVAL with the rule in rule, e.g.
 * "lists 3 ranks, but data * tensor * pipeline = 2 * 1 * 2 = 4". */
int aa__rank_order_check(const aa_strategy_t *s, char *rule, size_t cap);

#endif
