/* ATorch's strategy list, the value auto_accelerate(load_strategy=...) takes,
 * written as JSON: an array whose items are a method name, [name, config] or
 * [name, config, tunable]. Each supported method maps onto the same
 * aa_strategy_t as the v1 form. Nothing is dropped in silence: a method
 * autoaccel does not have, and every option of a method's config that it
 * cannot honour exactly, is refused with its name and the item's position,
 * since dropping it would train something other than what the list asks.
 * Mapping table: docs/strategy-format.md. */
#include "strategy.h"

#include "pipeline.h"
#include "strategy_internal.h"

#include "../common/json.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_DEGREE 65536

/* Where in the list we are, for messages: "<origin>: item 2 (amp_native)". */
typedef struct {
  const char *origin;
  size_t pos; /* 1-based */
  const char *name;
  int tp_from;   /* item that set the tensor degree, 0 = none yet */
  int sp_from;   /* item that turned sequence parallelism on, 0 = none */
  int rank_from; /* item that gave a rank order, 0 = none */
  int pp_from;   /* the pipeline_parallel item, 0 = none */
  int nstages;   /* its nstages, 0 = not given */
  bool schedule_given;
  int pp_degree_from; /* item that gave the pipeline degree (parallel_mode), 0 = none */
  int tp_method;      /* the tensor_parallel item, 0 = none */
  int mixed_from;     /* the mixed_parallel item, 0 = none */
} ctx_t;

__attribute__((format(printf, 3, 4))) static int fail(const ctx_t *c, int code, const char *fmt, ...) {
  char rule[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  if (c->name) return aa_error(code, "%s: item %zu (%s): %s", c->origin, c->pos, c->name, rule);
  return aa_error(code, "%s: item %zu: %s", c->origin, c->pos, rule);
}

/* A JSON value as a message shows it: true, 8, "text" (sanitized), or its type. */
static const char *show(char *dst, size_t cap, const json_t *v) {
  char safe[256];
  if (json_is_boolean(v)) snprintf(dst, cap, "%s", json_is_true(v) ? "true" : "false");
  else if (json_is_integer(v)) snprintf(dst, cap, "%lld", (long long)json_integer_value(v));
  else if (json_is_null(v)) snprintf(dst, cap, "null");
  else if (json_is_string(v)) {
    aa_json_sanitize(safe, sizeof safe, json_string_value(v));
    snprintf(dst, cap, "\"%s\"", safe);
  } else {
    const char *t = aa_json_type_name(v);
    snprintf(dst, cap, "%s %s", strchr("aeiou", t[0]) ? "an" : "a", t);
  }
  return dst;
}

/* A value of an option that autoaccel cannot train as asked. */
static int refuse_value(const ctx_t *c, const char *opt, const json_t *v, const char *why, const char *honoured) {
  char got[300];
  return fail(c, AA_EUNSUPPORTED, "option \"%s\": %s is not supported by autoaccel (%s); honoured: %s", opt,
              show(got, sizeof got, v), why, honoured);
}

static int need_bool(const ctx_t *c, const char *opt, const json_t *v) {
  if (json_is_boolean(v)) return 0;
  return fail(c, AA_EINVAL, "%s: must be true or false (got %s)", opt, aa_json_type_name(v));
}

static int degree(const ctx_t *c, const char *what, const json_t *v, int *out) {
  if (!json_is_integer(v))
    return fail(c, AA_EINVAL, "%s: must be an integer (got %s)", what, aa_json_type_name(v));
  long long x = json_integer_value(v);
  if (x < 1 || x > MAX_DEGREE)
    return fail(c, AA_EINVAL, "%s: must be between 1 and %d (got %lld)", what, MAX_DEGREE, x);
  *out = (int)x;
  return 0;
}

/* The tensor degree can come from parallel_mode and from tensor_parallel;
 * both may give it, but not differently. */
static int set_tp(ctx_t *c, aa_strategy_t *s, int tp) {
  if (c->tp_from && s->degree[AA_AXIS_TENSOR] != tp)
    return fail(c, AA_EINVAL, "tensor parallel degree %d conflicts with %d given by item %d", tp,
                s->degree[AA_AXIS_TENSOR], c->tp_from);
  s->degree[AA_AXIS_TENSOR] = tp;
  c->tp_from = (int)c->pos;
  return 0;
}

/* ---- parallel_mode --------------------------------------------------------- */

/* One (group, size); the group's axis is appended to listed[*n]. */
static int set_group(ctx_t *c, aa_strategy_t *s, const char *group, const json_t *size, aa_axis_t *listed,
                     int *n) {
  int a = -1;
  char names[128];
  size_t o = 0;
  for (int b = 0; b < AA_AXES; b++) { /* ATorch's names for the axes it has (common/axis.h) */
    const char *name = aa_axis_info((aa_axis_t)b)->atorch;
    if (!name) continue;
    if (!strcmp(name, group)) a = b;
    o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "", name);
  }
  if (a < 0) {
    char got[256];
    aa_json_sanitize(got, sizeof got, group);
    if (!strcmp(group, "zero"))
      return fail(c, AA_EUNSUPPORTED,
                  "parallel group \"zero\" is not supported by autoaccel (ATorch's zero group shards over "
                  "a subgroup of the data-parallel ranks and replicates across the rest, hybrid sharding; "
                  "autoaccel's ZeRO shards over the whole data-parallel group): give its ranks to "
                  "(\"data\", n) and add zero1, zero2 or fsdp (allowed here: %s)",
                  names);
    int ours = aa_axis_from_name(group);
    if (ours >= 0)
      return fail(c, AA_EUNSUPPORTED,
                  "parallel group \"%s\": ATorch's parallel_mode has no such group; write the v1 form's "
                  "\"parallel\": {\"%s\": N} (allowed here: %s)",
                  got, aa_axis_name((aa_axis_t)ours), names);
    return fail(c, AA_EINVAL, "unknown parallel group \"%s\" (allowed: %s)", got, names);
  }
  for (int k = 0; k < *n; k++)
    if (listed[k] == (aa_axis_t)a) return fail(c, AA_EINVAL, "parallel group \"%s\" is given twice", group);
  listed[(*n)++] = (aa_axis_t)a;
  int d = 0, rc = degree(c, group, size, &d);
  if (rc) return rc;
  if (a == AA_AXIS_TENSOR) return set_tp(c, s, d);
  if (a == AA_AXIS_PIPELINE) c->pp_degree_from = (int)c->pos;
  s->degree[a] = d;
  return 0;
}

/* [["tensor", 4], ["pipeline", 2], ["data", 2]]: the degrees, and the
 * axis order (the first pair varies fastest; groups not listed follow in
 * the default's order). */
static int parse_pairs(ctx_t *c, aa_strategy_t *s, const json_t *pairs) {
  aa_axis_t listed[AA_AXES];
  int n = 0;
  size_t i;
  const json_t *p;
  json_array_foreach(pairs, i, p) {
    if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_string(json_array_get(p, 0)))
      return fail(c, AA_EINVAL, "parallel group %zu: must be a [name, size] pair", i + 1);
    int rc = set_group(c, s, json_string_value(json_array_get(p, 0)), json_array_get(p, 1), listed, &n);
    if (rc) return rc;
  }
  aa_axis_order_from(s->order, listed, n);
  return 0;
}

/* No config: data parallel over the whole world, which the engine infers;
 * dp stays at its default. Otherwise {"data": 2, ...} (no order: a JSON
 * object's keys have none), a list of pairs, or ATorch's own tuple
 * ([pairs], rank_order[, support_multi_parallel_instance]). */
static int apply_parallel_mode(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  if (!cfg || json_is_null(cfg)) return 0;
  if (json_is_object(cfg)) {
    aa_axis_t listed[AA_AXES];
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)cfg, key, v) {
      int rc = set_group(c, s, key, v, listed, &n);
      if (rc) return rc;
    }
    return 0;
  }
  if (!json_is_array(cfg))
    return fail(c, AA_EINVAL,
                "config must be an object of group sizes or a list of [group, size] pairs (got %s)",
                aa_json_type_name(cfg));
  const json_t *first = json_array_get(cfg, 0);
  bool tuple =
      json_is_array(first) && (json_array_size(first) == 0 || json_is_array(json_array_get(first, 0)));
  if (!tuple) return parse_pairs(c, s, cfg);
  if (json_array_size(cfg) > 3) return fail(c, AA_EINVAL, "config must be [[pairs], rank_order]");
  const json_t *multi = json_array_get(cfg, 2);
  if (multi && !json_is_null(multi)) {
    int rc = need_bool(c, "support_multi_parallel_instance (third element)", multi);
    if (rc) return rc;
    if (json_is_true(multi))
      return fail(c, AA_EUNSUPPORTED,
                  "support_multi_parallel_instance: true is not supported by autoaccel (it would run several "
                  "copies of the mesh side by side; the degrees' product must be the world); honoured: false");
  }
  int rc = parse_pairs(c, s, first);
  if (rc) return rc;
  const json_t *order = json_array_get(cfg, 1);
  if (!order || json_is_null(order)) return 0;
  char rule[256];
  if ((rc = aa__rank_order_read(s, order, rule, sizeof rule))) return fail(c, rc, "rank_order: %s", rule);
  c->rank_from = (int)c->pos;
  return 0;
}

/* ---- method options ------------------------------------------------------ */

/* One option of a method's config object: honours its value or refuses it. */
typedef struct {
  const char *name;
  int (*apply)(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v);
} option_t;

/* Options ATorch knows that autoaccel refuses whatever their value, with the reason. */
typedef struct {
  const char *name, *why;
} refusal_t;

static int opt_dtype(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  static const struct {
    const char *name;
    aa_dtype_t dtype;
  } dtypes[] = {{"bf16", AA_BF16}, {"bfloat16", AA_BF16}, {"torch.bfloat16", AA_BF16},
                {"fp16", AA_F16},  {"float16", AA_F16},   {"torch.float16", AA_F16}};
  (void)opt;
  size_t i = 0, n = sizeof dtypes / sizeof dtypes[0];
  while (i < n && !(json_is_string(v) && strcmp(json_string_value(v), dtypes[i].name) == 0))
    i++;
  if (i == n) {
    char got[256];
    aa_json_sanitize(got, sizeof got, json_is_string(v) ? json_string_value(v) : aa_json_type_name(v));
    return fail(c, AA_EINVAL,
                "dtype: must be one of: bf16, bfloat16, torch.bfloat16, fp16, float16, torch.float16 (got %s%s%s)",
                json_is_string(v) ? "\"" : "", got, json_is_string(v) ? "\"" : "");
  }
  s->amp = dtypes[i].dtype;
  return 0;
}

static int opt_skip_nonfinite(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  int rc = need_bool(c, opt, v);
  if (!rc) s->skip_if_nonfinite = json_is_true(v);
  return rc;
}

/* autocast's own switch: ATorch's default config has it true. */
static int opt_enabled(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  int rc = need_bool(c, opt, v);
  if (rc || json_is_true(v)) return rc;
  return refuse_value(c, opt, v, "amp_native that is not enabled trains in fp32; leave amp_native out instead",
                      "true");
}

/* Switches honoured whatever their value. A choice between two libraries
 * that shard the same state the same way (use_ds_zero, not_use_fsdp:
 * fairscale or DeepSpeed for ZeRO-1, FSDP or fairscale for ZeRO-2):
 * autoaccel's own ZeRO does what either does. Settings that change nothing
 * of what autoaccel trains: sync_module_states (every rank starts from the
 * same weights, drawn from the spec's seed), use_orig_params (how PyTorch
 * exposes the parameters), limit_all_gathers (autoaccel has at most one
 * all-gather in flight). */
static int opt_any_bool(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  return need_bool(c, opt, v);
}

static int opt_sharding_strategy(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  static const struct {
    const char *name;
    int zero;
  } stages[] = {{"FULL_SHARD", 3}, {"SHARD_GRAD_OP", 2}, {"NO_SHARD", 0}};
  if (!json_is_string(v)) return fail(c, AA_EINVAL, "%s: must be a string (got %s)", opt, aa_json_type_name(v));
  const char *name = json_string_value(v);
  if (strncmp(name, "ShardingStrategy.", 17) == 0) name += 17;
  bool zero2 = strcmp(c->name, "zero2") == 0;
  for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
    if (strcmp(name, stages[i].name) != 0) continue;
    if (zero2 && stages[i].zero != 2)
      return refuse_value(c, opt, v, "zero2 shards gradients and optimizer states; give fsdp for another stage",
                          "SHARD_GRAD_OP");
    s->zero = stages[i].zero;
    return 0;
  }
  if (strstr(name, "HYBRID"))
    return refuse_value(c, opt, v,
                        "it shards within a host and replicates across hosts; autoaccel shards over the whole "
                        "data-parallel group",
                        zero2 ? "SHARD_GRAD_OP" : "FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2), NO_SHARD (ZeRO-0)");
  char got[300];
  return fail(c, AA_EINVAL, "%s: must be one of: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (got %s)", opt,
              show(got, sizeof got, v));
}

static int opt_cpu_offload(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  int rc = need_bool(c, opt, v);
  if (rc || json_is_false(v)) return rc;
  return refuse_value(c, opt, v, "it would train without offload: autoaccel keeps every state on the device",
                      "false");
}

/* FSDP's prefetches start the next all-gather early, to overlap it with
 * compute: a hint about speed that changes nothing of what is trained.
 * autoaccel takes it and gathers a block when the forward (backward)
 * reaches it, as it always does (docs/strategy-format.md). */
static int opt_forward_prefetch(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  return need_bool(c, opt, v);
}

static int opt_backward_prefetch(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  const char *name = json_is_string(v) ? json_string_value(v) : NULL;
  if (name && !strncmp(name, "BackwardPrefetch.", 17)) name += 17;
  if (json_is_null(v) || (name && (!strcmp(name, "BACKWARD_PRE") || !strcmp(name, "BACKWARD_POST"))))
    return 0;
  char got[300];
  return fail(c, AA_EINVAL, "%s: must be null, \"BACKWARD_PRE\" or \"BACKWARD_POST\" (got %s)", opt,
              show(got, sizeof got, v));
}

/* The transformer block's class in the model families autoaccel trains:
 * Hugging Face's GPT-2 and nanoGPT / llm.c (gpt2), and the decoder layers
 * of the llama family (Llama, Mistral, Qwen2; Mixtral's with its MoE
 * MLP). The class is not held to the model's family: a strategy file
 * names no model. */
#define BLOCK_CLASSES                                                                                        \
  "GPT2Block, Block, LlamaDecoderLayer, MistralDecoderLayer, Qwen2DecoderLayer, MixtralDecoderLayer"
static bool block_class(const char *name) {
  static const char *const blocks[] = {"GPT2Block",         "Block",
                                       "LlamaDecoderLayer", "MistralDecoderLayer",
                                       "Qwen2DecoderLayer", "MixtralDecoderLayer"};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
    if (!strcmp(name, blocks[i])) return true;
  return false;
}

/* Module classes, as ATorch takes them (one name or a list), of which every
 * one must be the block; label is what the message calls them. */
static int block_classes(ctx_t *c, const char *label, const json_t *v, const char *why_other) {
  bool list = json_is_array(v);
  size_t n = list ? json_array_size(v) : 1;
  if ((!list && !json_is_string(v)) || n == 0)
    return fail(c, AA_EINVAL, "%s must be a module name or a list of module names", label);
  for (size_t i = 0; i < n; i++) {
    const json_t *x = list ? json_array_get(v, i) : v;
    if (!json_is_string(x)) return fail(c, AA_EINVAL, "%s must be a module name or a list of module names", label);
    if (block_class(json_string_value(x))) continue;
    const char *name = json_string_value(x), *why = why_other;
    if (strstr(name, "Attention"))
      why = "autoaccel cannot checkpoint or shard attention alone; it never keeps the attention probabilities";
    else if (strstr(name, "MLP"))
      why = "checkpointing the MLP recomputes fc, GELU and proj; autoaccel's selective mode keeps the fc output "
            "and recomputes only the GELU output (v1 form: \"checkpoint\": \"selective\")";
    char got[256];
    aa_json_sanitize(got, sizeof got, name);
    return fail(c, AA_EUNSUPPORTED,
                "%s: module class \"%s\" is not supported by autoaccel (%s); honoured: " BLOCK_CLASSES
                " (the transformer block)",
                label, got, why);
  }
  return 0;
}

static int opt_wrap_class(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  char label[64];
  snprintf(label, sizeof label, "option \"%s\"", opt);
  int rc = block_classes(c, label, v, "not the transformer block; autoaccel checkpoints whole blocks");
  if (!rc) {
    s->ckpt = AA_CKPT_FULL;
    s->ckpt_layers = 0;
  }
  return rc;
}

/* ZeRO-3 gathers one transformer block at a time (engine/optim.h units),
 * which is what wrapping the block class asks of FSDP. */
static int opt_atorch_wrap_cls(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  char label[64];
  snprintf(label, sizeof label, "option \"%s\"", opt);
  return block_classes(c, label, v,
                       "autoaccel's ZeRO units are the transformer blocks, the embeddings and the final norm");
}

static int opt_degree(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  int tp = 0, rc = degree(c, opt, v, &tp);
  return rc ? rc : set_tp(c, s, tp);
}

/* Megatron's sequence_parallel switch, which ATorch's tensor_parallel
 * lacks: without it a list could not say what a v1 file can. Whether the
 * tensor degree allows it is settled once the whole list is read. */
static int opt_sequence_parallel(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  int rc = need_bool(c, opt, v);
  if (rc) return rc;
  s->sp = json_is_true(v);
  c->sp_from = s->sp ? (int)c->pos : 0;
  return 0;
}

/* One micro-batch per step is micro_batch 0 (the whole per-rank batch);
 * another count depends on the global batch, which a list does not know. */
static int opt_chunks(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  int chunks = 0, rc = degree(c, opt, v, &chunks);
  if (rc || chunks == 1) return rc;
  (void)s;
  return refuse_value(c, opt, v,
                      "the micro-batch count follows from micro_batch, which an ATorch list cannot give: write the "
                      "v1 form with \"micro_batch\": global_batch / (data * chunks)",
                      "1 (the whole per-rank batch at once)");
}

/* ATorch's schedule names (PyTorch pipelining's classes), any case. */
static int opt_schedule(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  const char *name = json_is_string(v) ? json_string_value(v) : "";
  if (strcasecmp(name, "1f1b") == 0) s->schedule = AA_SCHEDULE_1F1B;
  else if (strcasecmp(name, "gpipe") == 0) s->schedule = AA_SCHEDULE_GPIPE;
  else if (strcasecmp(name, "interleaved1f1b") == 0)
    s->schedule = AA_SCHEDULE_INTERLEAVED;
  else
    return fail(c, AA_EINVAL, "%s: must be \"1F1B\", \"GPipe\" or \"Interleaved1F1B\"", opt);
  c->schedule_given = true;
  return 0;
}

/* ATorch's nstages: how many stages the model is cut into, over the
 * pipeline ranks of parallel_mode (which may come later in the list); each
 * rank holds nstages / pp of them, autoaccel's virtual_stages, settled in
 * check_list. */
static int opt_nstages(ctx_t *c, aa_strategy_t *s, const char *opt, const json_t *v) {
  (void)s;
  return degree(c, opt, v, &c->nstages);
}

#define END {NULL, NULL}

static const option_t amp_options[] = {
    {"dtype", opt_dtype}, {"skip_if_nonfinite", opt_skip_nonfinite}, {"enabled", opt_enabled}, END};

/* PyTorch's two recomputation implementations (ATorch's no_reentrant,
 * default true): both recompute the same forward and give the same
 * gradients. autoaccel has no autograd to re-enter: it recomputes a block
 * inside its own backward, whichever is given. */
static const option_t checkpoint_options[] = {
    {"wrap_class", opt_wrap_class}, {"no_reentrant", opt_any_bool}, END};

static const option_t zero1_options[] = {{"use_ds_zero", opt_any_bool}, END};

/* zero2 is FSDP's SHARD_GRAD_OP unless another library is chosen, so it
 * takes FSDP's options too. */
#define FSDP_OPTIONS                                                                                         \
  {"sharding_strategy", opt_sharding_strategy}, {"cpu_offload", opt_cpu_offload},                          \
      {"atorch_wrap_cls", opt_atorch_wrap_cls}, {"sync_module_states", opt_any_bool},                      \
      {"use_orig_params", opt_any_bool}, {"limit_all_gathers", opt_any_bool},                              \
      {"forward_prefetch", opt_forward_prefetch}, {"backward_prefetch", opt_backward_prefetch}
static const option_t zero2_options[] = {
    {"use_ds_zero", opt_any_bool}, {"not_use_fsdp", opt_any_bool}, FSDP_OPTIONS, END};
static const option_t fsdp_options[] = {FSDP_OPTIONS, END};

static const option_t tp_options[] = {
    {"degree", opt_degree}, {"sequence_parallel", opt_sequence_parallel}, END};

static const option_t pp_options[] = {{"chunks", opt_chunks},   {"schedule", opt_schedule},
                                      {"sche", opt_schedule},   {"pipe_schedule", opt_schedule},
                                      {"nstages", opt_nstages}, END};

static const refusal_t fsdp_refused[] = {
    {"mixed_precision", "FSDP's own mixed precision; give amp_native for mixed precision"},
    {"auto_wrap_policy",
     "a Python callable; autoaccel's ZeRO units are the transformer blocks (atorch_wrap_cls "
     "with the block class says so)"},
    {"atorch_size_based_min_num_params",
     "it wraps modules by size; autoaccel's ZeRO units are the transformer "
     "blocks"},
    {"atorch_ignored_cls", "it would leave modules unsharded; autoaccel shards every parameter"},
    {"ignored_modules", "it would leave modules unsharded; autoaccel shards every parameter"},
    {"ignored_states", "it would leave parameters unsharded; autoaccel shards every parameter"},
    {"wrap_trainable_outmost",
     "it wraps only the trainable parameters (LoRA); autoaccel trains every parameter"},
    {"fsdp_wrap_params_outmost",
     "ATorch's LoRA hint: it wraps the trainable parameters outmost; autoaccel trains "
     "every parameter"},
    {"param_init_fn", "a Python callable; autoaccel draws the initial weights from the spec's seed"},
    END};

static const refusal_t tp_refused[] = {
    {"shard_planner", "autoaccel splits attention and the MLP as Megatron does and takes no sharding plan"},
    {"replacement_map", "autoaccel splits attention and the MLP as Megatron does and takes no sharding plan"},
    {"tp_ranks", "the tensor groups follow from parallel_mode (its order and rank_order)"},
    END};

static const refusal_t pp_refused[] = {
    {"pipe_ranks", "the pipeline groups follow from parallel_mode (its order and rank_order)"},
    {"insert_before_modules",
     "autoaccel cuts between transformer blocks, evenly (the v1 form's \"partition\" "
     "gives another cut)"},
    {"shard_planner", "autoaccel cuts between transformer blocks, evenly (the v1 form's \"partition\" gives "
                      "another cut)"},
    END};

/* Honours each member of an options object, or refuses the first that
 * cannot be honoured, naming it. */
static int apply_options(ctx_t *c, aa_strategy_t *s, const json_t *cfg, const option_t *opts,
                         const refusal_t *refused) {
  if (!cfg || json_is_null(cfg)) return 0;
  if (!json_is_object(cfg))
    return fail(c, AA_EINVAL, "config must be an object of options (got %s)", aa_json_type_name(cfg));
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)cfg, key, v) {
    const option_t *o = opts;
    while (o->name && strcmp(o->name, key) != 0)
      o++;
    if (o->name) {
      int rc = o->apply(c, s, o->name, v);
      if (rc) return rc;
      continue;
    }
    const refusal_t *r = refused;
    while (r && r->name && strcmp(r->name, key) != 0)
      r++;
    char got[256], list[512];
    size_t n = 0;
    list[0] = '\0';
    for (o = opts; o->name && n < sizeof list; o++)
      n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", o == opts ? "" : ", ", o->name);
    aa_json_sanitize(got, sizeof got, key);
    if (r && r->name)
      return fail(c, AA_EUNSUPPORTED, "option \"%s\" is not supported by autoaccel (%s); supported options: %s",
                  got, r->why, list);
    return fail(c, AA_EUNSUPPORTED, "option \"%s\" is not supported by autoaccel; supported options: %s", got,
                list);
  }
  return 0;
}

/* ---- methods ------------------------------------------------------------- */

static int apply_amp_native(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  s->amp = AA_F16; /* ATorch's default dtype */
  /* ("amp_native", "bf16"): ATorch's own example gives the dtype alone. */
  if (cfg && json_is_string(cfg)) return opt_dtype(c, s, "dtype", cfg);
  return apply_options(c, s, cfg, amp_options, NULL);
}

/* ATorch's config names the module classes to checkpoint: one name, a list,
 * or (here) {"wrap_class": ...}. The block's class is checkpoint "full";
 * no config checkpoints every block too. */
static int apply_checkpoint(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  s->ckpt = AA_CKPT_FULL;
  s->ckpt_layers = 0;
  if (!cfg || json_is_null(cfg)) return 0;
  if (json_is_object(cfg)) return apply_options(c, s, cfg, checkpoint_options, NULL);
  return block_classes(c, "config", cfg, "not the transformer block; autoaccel checkpoints whole blocks");
}

static int apply_zero(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  if (strcmp(c->name, "zero1") == 0) {
    s->zero = 1;
    return apply_options(c, s, cfg, zero1_options, NULL);
  }
  if (strcmp(c->name, "zero2") == 0) {
    s->zero = 2;
    return apply_options(c, s, cfg, zero2_options, fsdp_refused);
  }
  s->zero = 3;
  return apply_options(c, s, cfg, fsdp_options, fsdp_refused);
}

/* The degree, as an integer or {"degree": n} (with Megatron's
 * "sequence_parallel" switch); no degree keeps the one parallel_mode gave. */
static int apply_tensor_parallel(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  c->tp_method = (int)c->pos;
  if (cfg && json_is_integer(cfg)) return opt_degree(c, s, "degree", cfg);
  return apply_options(c, s, cfg, tp_options, tp_refused);
}

/* The pipeline degree comes from parallel_mode; the options give the
 * schedule (one of three spellings), the micro-batch count and nstages
 * (the stages over all pipeline ranks). */
static int apply_pipeline_parallel(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  static const char *const spellings[] = {"schedule", "sche", "pipe_schedule"};
  const char *given = NULL;
  for (size_t i = 0; cfg && json_is_object(cfg) && i < 3; i++) {
    if (!json_object_get(cfg, spellings[i])) continue;
    if (given) return fail(c, AA_EINVAL, "config gives both %s and %s; give one", given, spellings[i]);
    given = spellings[i];
  }
  c->pp_from = (int)c->pos;
  return apply_options(c, s, cfg, pp_options, pp_refused);
}

/* ATorch's mixed_parallel: tensor, pipeline and data parallelism at the
 * degrees parallel_mode gives, which is autoaccel's tensor_parallel and
 * pipeline_parallel together; it takes no options (checked once the whole
 * list is read: some degree must be given). */
static int apply_mixed_parallel(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  c->mixed_from = (int)c->pos;
  static const option_t none[] = {END};
  return apply_options(c, s, cfg, none, NULL);
}

/* ATorch's module_replace swaps modules for faster implementations of the
 * same computation (FlashAttention, FusedLayerNorm): autoaccel's own
 * kernels are of that kind already (attention never keeps its
 * probabilities; LayerNorm and RMSNorm are single kernels), so it changes
 * nothing. A config registers Python modules, which a list cannot carry. */
static int apply_module_replace(ctx_t *c, aa_strategy_t *s, const json_t *cfg) {
  static const option_t none[] = {END};
  return apply_options(c, s, cfg, none, NULL);
}

/* Methods of one group set the same knob, so two of them conflict. */
enum { G_PARALLEL, G_AMP, G_CKPT, G_ZERO, G_TP, G_PP, G_MIXED, G_REPLACE, G_COUNT };

static const struct {
  const char *name;
  int group;
  int (*apply)(ctx_t *c, aa_strategy_t *s, const json_t *cfg);
} methods[] = {
    {"parallel_mode", G_PARALLEL, apply_parallel_mode},
    {"amp_native", G_AMP, apply_amp_native},
    {"checkpoint", G_CKPT, apply_checkpoint},
    {"zero1", G_ZERO, apply_zero},
    {"zero2", G_ZERO, apply_zero},
    {"fsdp", G_ZERO, apply_zero},
    {"tensor_parallel", G_TP, apply_tensor_parallel},
    {"pipeline_parallel", G_PP, apply_pipeline_parallel},
    {"mixed_parallel", G_MIXED, apply_mixed_parallel},
    {"module_replace", G_REPLACE, apply_module_replace},
};
#define NMETHODS (sizeof methods / sizeof methods[0])

/* ATorch's methods that autoaccel does not have: refused with why and
 * what to give instead. */
static const refusal_t methods_refused[] = {
    {"sequence_parallel",
     "ATorch's sequence_parallel is DeepSpeed-Ulysses style: attention split by heads over "
     "its own group, the rest data parallel over the sequence; Megatron's sequence "
     "parallelism, which autoaccel has, is [\"tensor_parallel\", {\"sequence_parallel\": true}]"},
    {"half", "it trains in pure half precision, the weights and optimizer state in 16 bits; autoaccel keeps "
             "fp32 master weights: give [\"amp_native\", \"fp16\"] or [\"amp_native\", \"bf16\"]"},
    {"fp8", "autoaccel has no fp8 GEMMs (ATorch's fp8 uses Transformer Engine on sm 8.9+); give "
            "[\"amp_native\", \"bf16\"] for 16-bit mixed precision"},
    {"amp_apex_o1",
     "NVIDIA Apex's amp; autoaccel's mixed precision is amp_native's (autocast with fp32 master "
     "weights): give [\"amp_native\", \"fp16\"]"},
    {"amp_apex_o2",
     "NVIDIA Apex's amp; autoaccel's mixed precision is amp_native's (autocast with fp32 master "
     "weights): give [\"amp_native\", \"fp16\"]"},
    {"ds_3d_parallel", "DeepSpeed's pipeline engine; autoaccel's own 3D parallelism is mixed_parallel (or "
                       "tensor_parallel and pipeline_parallel) with the degrees in parallel_mode"},
    {"cpu_offload", "autoaccel keeps every state on the device; leave it out (zero1, zero2 or fsdp shard the "
                    "states over the data-parallel ranks instead)"},
    {"paralle_mode", "a misspelling, in ATorch's own document, of parallel_mode: give \"parallel_mode\""},
    END};

/* What only the whole list settles: sequence parallelism needs a tensor
 * degree, which parallel_mode may give before or after; a rank order lists
 * the ranks of the degrees that every item together gave. */
static int check_list(ctx_t *c, aa_strategy_t *s) {
  if (c->pp_from) {
    c->pos = (size_t)c->pp_from;
    c->name = "pipeline_parallel";
    int v = 1;
    if (c->nstages) {
      if (c->nstages % s->degree[AA_AXIS_PIPELINE])
        return fail(
            c, AA_EINVAL,
            "nstages %d must be a multiple of the pipeline degree %d (each pipeline rank holds nstages / "
            "pp stages)",
            c->nstages, s->degree[AA_AXIS_PIPELINE]);
      v = c->nstages / s->degree[AA_AXIS_PIPELINE];
      if (v > 1 && s->degree[AA_AXIS_PIPELINE] == 1)
        return fail(c, AA_EINVAL,
                    "nstages %d needs pipeline parallelism: give (\"pipeline\", n) in parallel_mode with n "
                    "dividing it",
                    c->nstages);
      if (v > AA_PP_CHUNKS_MAX)
        return fail(c, AA_EINVAL, "nstages %d over pipeline degree %d gives each rank %d stages; at most %d",
                    c->nstages, s->degree[AA_AXIS_PIPELINE], v, AA_PP_CHUNKS_MAX);
    }
    /* ATorch's default schedule is Interleaved1F1B, the one that runs
     * several stages per rank; a rank with one stage runs 1F1B. */
    if (v > 1 && !c->schedule_given) s->schedule = AA_SCHEDULE_INTERLEAVED;
    if (v > 1 && s->schedule != AA_SCHEDULE_INTERLEAVED)
      return fail(c, AA_EINVAL,
                  "nstages %d gives each of the %d pipeline ranks %d stages, which only Interleaved1F1B runs "
                  "(schedule is %s)",
                  c->nstages, s->degree[AA_AXIS_PIPELINE], v,
                  s->schedule == AA_SCHEDULE_GPIPE ? "GPipe" : "1F1B");
    if (v == 1 && s->degree[AA_AXIS_PIPELINE] > 1 && s->schedule == AA_SCHEDULE_INTERLEAVED)
      return fail(
          c, AA_EINVAL,
          "Interleaved1F1B needs several stages per pipeline rank: give nstages = k x the pipeline degree %d "
          "with k >= 2 (nstages is %d), or the schedule 1F1B",
          s->degree[AA_AXIS_PIPELINE], c->nstages ? c->nstages : s->degree[AA_AXIS_PIPELINE]);
    s->vpp = v;
  }
  if (s->sp && s->degree[AA_AXIS_TENSOR] < 2) {
    c->pos = (size_t)c->sp_from;
    c->name = "tensor_parallel";
    return fail(
        c, AA_EINVAL,
        "sequence_parallel: needs tensor parallelism (the tensor degree is %d): it splits the sequence "
        "between the tensor ranks; give a degree > 1 here or (\"tensor\", n) in parallel_mode",
        s->degree[AA_AXIS_TENSOR]);
  }
  /* A method whose degree no item gave would train at degree 1 without a
   * word; ATorch takes the degrees from parallel_mode only (the data degree
   * alone fills the world), so each one is asked for. */
  if (c->mixed_from && !c->tp_from && !c->pp_degree_from) {
    c->pos = (size_t)c->mixed_from;
    c->name = "mixed_parallel";
    return fail(
        c, AA_EINVAL,
        "needs the tensor and pipeline degrees: give (\"tensor\", n) and (\"pipeline\", m) in "
        "parallel_mode (ATorch's mixed_parallel takes them there; autoaccel reads it as tensor_parallel "
        "and pipeline_parallel together)");
  }
  if (c->tp_method && !c->tp_from) {
    c->pos = (size_t)c->tp_method;
    c->name = "tensor_parallel";
    return fail(c, AA_EINVAL,
                "needs its degree: give (\"tensor\", n) in parallel_mode, or [\"tensor_parallel\", n] "
                "(without one it would train at tensor degree 1)");
  }
  if (c->pp_from && !c->pp_degree_from) {
    c->pos = (size_t)c->pp_from;
    c->name = "pipeline_parallel";
    return fail(c, AA_EINVAL,
                "needs its degree: give (\"pipeline\", n) in parallel_mode (without one it would train at "
                "pipeline degree 1)");
  }
  char rule[256];
  int rc = aa__rank_order_check(s, rule, sizeof rule);
  if (!rc) return 0;
  c->pos = (size_t)c->rank_from;
  c->name = "parallel_mode";
  return fail(c, rc, "rank_order: %s", rule);
}

int aa__strategy_from_atorch(aa_strategy_t *out, const json_t *list, const char *origin) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  ctx_t c = {.origin = origin};
  size_t group_item[G_COUNT] = {0}; /* item that used each group, 0 = none */
  size_t i;
  const json_t *item;
  json_array_foreach(list, i, item) {
    c.pos = i + 1;
    c.name = NULL;
    const json_t *name = item, *cfg = NULL, *tunable = NULL;
    if (json_is_array(item)) {
      name = json_array_get(item, 0);
      cfg = json_array_get(item, 1);
      tunable = json_array_get(item, 2);
    }
    if (!name || !json_is_string(name) || (json_is_array(item) && json_array_size(item) > 3))
      return fail(&c, AA_EINVAL, "must be a method name, [name, config] or [name, config, tunable] (got %s)",
                  aa_json_type_name(item));
    if (tunable && !json_is_boolean(tunable))
      return fail(&c, AA_EINVAL, "tunable (third element) must be true or false (got %s)",
                  aa_json_type_name(tunable));
    size_t m = 0;
    while (m < NMETHODS && strcmp(methods[m].name, json_string_value(name)) != 0)
      m++;
    if (m == NMETHODS) {
      char got[256], supported[256];
      size_t o = 0;
      for (size_t k = 0; k < NMETHODS; k++)
        o += (size_t)snprintf(supported + o, sizeof supported - o, "%s%s", k ? ", " : "", methods[k].name);
      aa_json_sanitize(got, sizeof got, json_string_value(name));
      const refusal_t *r = methods_refused;
      while (r->name && strcmp(r->name, json_string_value(name)) != 0)
        r++;
      return fail(&c, AA_EUNSUPPORTED, "method \"%s\" is not supported%s%s%s (supported: %s)", got,
                  r->name ? " (" : "", r->name ? r->why : "", r->name ? ")" : "", supported);
    }
    c.name = methods[m].name;
    size_t prev = group_item[methods[m].group];
    if (prev) {
      const json_t *p = json_array_get(list, prev - 1);
      const char *pname = json_string_value(json_is_array(p) ? json_array_get(p, 0) : p);
      if (strcmp(pname, c.name) == 0)
        return fail(&c, AA_EINVAL, "method is given twice (items %zu and %zu)", prev, c.pos);
      return fail(&c, AA_EINVAL, "conflicts with item %zu (%s): a strategy takes one of them", prev, pname);
    }
    group_item[methods[m].group] = c.pos;
    int rc = methods[m].apply(&c, &s, cfg);
    if (rc) return rc;
  }
  int rc = check_list(&c, &s);
  if (rc) return rc;
  *out = s;
  return 0;
}
