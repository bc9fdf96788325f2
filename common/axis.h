/* The parallel axes of the device mesh, as one table (Megatron's
 * RankGenerator keeps them as name -> size with an order string; here a
 * row each). Everything that names, reads, writes, orders, places or
 * reports an axis loops over this table: the strategy key and files,
 * ATorch's parallel_mode groups, the mesh and its groups (layout.h), the
 * rank orders (every permutation of the axes), the search space's
 * factorisations, placement, the protocol's and the store's rank
 * coordinates, `query run` and the report. A new axis is a row here, the
 * layer that uses it, its cost terms, and a collective if it needs one
 * (docs/strategy-format.md "Adding an axis").
 *
 * It lives in common/ rather than strategies/ because the protocol
 * (proto/, which may not include strategies/) names the coordinates of a
 * rank by it too. Depends on nothing. */
#ifndef AA_AXIS_H
#define AA_AXIS_H

#include <stdbool.h>
#include <stddef.h>

/* X(ID, name, key, letter, atorch, megatron, merak, method, default_pos, search, host, always):
 *   name         the v1 file's `parallel` field and the store's and
 *                protocol's coordinate name
 *   key          its degree's prefix in the strategy key ("tp2")
 *   letter       its letter in an axis order's name ("tdp")
 *   atorch       ATorch's parallel_mode group (NULL: ATorch has none)
 *   megatron     Megatron Core's ModelParallelConfig field (NULL: none)
 *   merak        Merak's argument (NULL: none)
 *   method       the search's --exclude / --include name for its degree > 1
 *                (NULL: not a method of its own)
 *   default_pos  its place in the default axis order, fastest first
 *                (Megatron's tp-cp-ep-dp-pp: tensor fastest, then context,
 *                data, pipeline slowest)
 *   search       its loop in the search's factorisation of a gang's ranks
 *                (space.h), outermost 0; -1 for the one axis that takes the
 *                ranks left (data)
 *   host         where placement puts its groups when a gang spans hosts:
 *                AA_HOST_KEEP inside one host, always (a strategy that
 *                cannot is not placeable); AA_HOST_PREFER inside one host
 *                when the hosts can hold every such group beside the KEEP
 *                axes' (else anywhere); AA_HOST_ANY anywhere
 *   always       the key, a written file and an order's name show its degree
 *                even at 1; else only above 1, so that the axes added after
 *                the first three leave every existing key and file as it was
 * The row order is the order of the axes' ids, of the v1 file's fields,
 * of keys, of coordinates and of products in messages. */
#define AA_AXIS_LIST(X)                                                                                      \
  X(DATA, "data", "dp", 'd', "data", NULL, "dp", NULL, 2, -1, AA_HOST_ANY, true)                             \
  X(TENSOR, "tensor", "tp", 't', "tensor", "tensor_model_parallel_size", "tp", "tensor_parallel", 0, 2,      \
    AA_HOST_KEEP, true)                                                                                      \
  X(PIPELINE, "pipeline", "pp", 'p', "pipeline", "pipeline_model_parallel_size", "pp", "pipeline_parallel",  \
    3, 0, AA_HOST_ANY, true)                                                                                 \
  X(CONTEXT, "context", "cp", 'c', NULL, "context_parallel_size", NULL, "context_parallel", 1, 1,            \
    AA_HOST_PREFER, false)

/* Where placement puts an axis's groups (the table's host column). */
typedef enum { AA_HOST_ANY, AA_HOST_PREFER, AA_HOST_KEEP } aa_axis_host_t;

typedef enum {
#define AA_AXIS_ENUM_(id, ...) AA_AXIS_##id,
  AA_AXIS_LIST(AA_AXIS_ENUM_)
#undef AA_AXIS_ENUM_
      AA_AXES /* the number of axes */
} aa_axis_t;

/* One row of the table. */
typedef struct aa_axis_info {
  const char *name, *key;
  char letter;
  const char *atorch, *megatron, *merak, *method;
  int default_pos, search;
  aa_axis_host_t host;
  bool always;
} aa_axis_info_t;

/* The row of axis a; NULL for a value that is not an axis. */
const aa_axis_info_t *aa_axis_info(aa_axis_t a);

/* "data", "tensor", "pipeline"; "?" for a value that is not an axis. */
const char *aa_axis_name(aa_axis_t a);

/* The axis whose name is `name` ("tensor"), or -1. */
int aa_axis_from_name(const char *name);

/* The axis whose letter is c ('t'), or -1. */
int aa_axis_from_letter(char c);

/* The axes whose groups placement keeps inside one host (AA_HOST_KEEP),
 * as a mask: bit a for axis a. */
unsigned aa_axis_host_mask(void);
/* The axes whose groups placement keeps inside one host when it can
 * (AA_HOST_KEEP and AA_HOST_PREFER), as a mask. */
unsigned aa_axis_host_mask_preferred(void);

/* Those axes in words for messages: "tensor-parallel" (their names joined
 * by " x ", then "-parallel"), into out. */
const char *aa_axis_host_words(char *out, size_t cap);

/* The default axis order, fastest first, into out. */
void aa_axis_default_order(aa_axis_t out[AA_AXES]);

/* Whether order[0..AA_AXES) names every axis once. */
bool aa_axis_order_valid(const aa_axis_t order[AA_AXES]);

/* The order that lists the n distinct axes of `listed` first, in that
 * order, then the others in the default order's relative order. */
void aa_axis_order_from(aa_axis_t out[AA_AXES], const aa_axis_t *listed, int n);

/* The order's letters, fastest first ("tdp"), into out (AA_AXES + 1
 * bytes); "?" when it is not valid. */
const char *aa_axis_order_name(const aa_axis_t order[AA_AXES], char out[AA_AXES + 1]);

/* The order whose letters, fastest first, are `letters` ("tpd": the
 * letter of each of the first three axes once, and of a later one where
 * it goes; one left out goes where aa_axis_order_from puts it) into out;
 * false, out untouched, for other text. */
bool aa_axis_order_parse(aa_axis_t out[AA_AXES], const char *letters);

/* Whether the axes `letters` names come in `order` in that order (letters
 * as aa_axis_order_parse takes them): "tdp" for the default order. */
bool aa_axis_order_is(const aa_axis_t order[AA_AXES], const char *letters);

/* The k-th permutation of the axes (k = 0, 1, ..., AA_AXES! - 1, in
 * lexicographic order of their ids), for walking every order: for (k = 0;
 * aa_axis_order_nth(o, k); k++). False when k is past the last. */
bool aa_axis_order_nth(aa_axis_t out[AA_AXES], int k);

#endif
