/* Internal to strategies/: what strategy_file.c (the v1 object form) and
 * strategy_atorch.c (ATorch's list form) share. Not part of the public
 * interface; names carry the aa__ prefix. */
#ifndef AA_STRATEGY_INTERNAL_H
#define AA_STRATEGY_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "../common/json.h"
#include "strategy.h"

/* Parses ATorch's load_strategy list (a JSON array) into *out, starting
 * from the defaults. origin names the source in errors. *out is written only
 * on success. */
int aa__strategy_from_atorch(aa_strategy_t *out, const json_t *list, const char *origin);

/* The largest parallel degree a strategy may give. */
#define AA__STRATEGY_DEGREE_MAX 65536

/* aa_strategy_check with the messages in context c (the file being read,
 * or "strategy"). */
int aa__strategy_check(const aa_json_ctx_t *c, const aa_strategy_t *s);

/* The v1 file's fields (strategy_file.c): the ranges and choices that
 * aa__strategy_check holds an in-memory strategy to, as the reader does. */
extern const aa_json_field_t aa__strategy_fields[];
extern const size_t aa__strategy_nfields;

/* The pipeline rules that need no model (aa_pp_bounds holds the rest
 * against n_layer), in context c (strategy_file.c). */
int aa__strategy_check_pipeline(const aa_json_ctx_t *c, const aa_strategy_t *s);

/* "data * tensor * pipeline = 2 * 1 * 2 = 4": the world size as the
 * product of the degrees, into out, for messages. */
void aa__strategy_world_words(const aa_strategy_t *s, char *out, size_t cap);

/* Reads a JSON list of global ranks (ATorch's rank_order) into
 * s->rank_order and s->nranks: 1..AA_STRATEGY_WORLD_MAX integers forming
 * a permutation of 0..n-1. Returns 0, or AA_EINVAL with the broken rule in
 * rule (for the caller to prefix), e.g. "rank 1 is given twice (positions
 * 0 and 2); a rank order is a permutation of 0..2". s is written only on
 * success. */
int aa__rank_order_read(aa_strategy_t *s, const json_t *v, char *rule, size_t cap);

/* The rank order of s held to its degrees: none, or a permutation of
 * 0..world-1. Returns 0, or AA_EINVAL with the rule in rule, e.g.
 * "lists 3 ranks, but data * tensor * pipeline = 2 * 1 * 2 = 4". */
int aa__rank_order_check(const aa_strategy_t *s, char *rule, size_t cap);

/* The most bytes of distinct lists (rank orders, custom cuts) the process
 * keeps for its strategies (strategy_intern.c): 4,096 orders of the
 * largest world. */
#define AA__INTERN_BYTES_MAX (32 << 20)

/* Stores the `bytes` at data once for the life of the process (an equal
 * list already stored is shared) and points *out at the stored copy, which
 * is never changed or freed. Returns 0, AA_ENOMEM, or AA_EINVAL past
 * AA__INTERN_BYTES_MAX, with a message naming `what`. Thread-safe. */
int aa__intern(const void *data, size_t bytes, const char *what, const void **out);

#endif
