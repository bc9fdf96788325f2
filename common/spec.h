/* Model spec: the JSON file a user submits. It holds the architecture
 * (which the canonical hash identifies), the training settings and,
 * optionally, the data: planning a model needs no data, training it does
 * (aa_spec_require_data).
 * Lives in common/ because both the engine and the planner read it; the
 * planner must never link the engine. Format: docs/model-spec.md. */
#ifndef AA_SPEC_H
#define AA_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AA_PATH_MAX 4096

/* A spec's seq_len may be up to AA_SEQ_LEN_MAX (2^20) tokens: plan and
 * strategy check only do arithmetic on it, in 64 bits or doubles. The
 * engine indexes activations with int and trains at most
 * AA_SEQ_LEN_ENGINE_MAX; aa_spec_require_data and the model's constructor
 * refuse more. */
#define AA_SEQ_LEN_MAX (1 << 20)
#define AA_SEQ_LEN_ENGINE_MAX 65536

/* Mixture-of-experts layers (llama family only; docs/model-spec.md "moe"):
 * a linear router over `experts` SwiGLU experts of width d_ff_expert, the
 * top_k chosen per token with their softmax probabilities renormalised
 * (Mixtral), plus shared_experts experts of the same width every token
 * passes through. experts = 0: a dense model (no "moe" object). */
typedef struct aa_moe {
  int experts;           /* E, 0 (dense) or 1..1024 */
  int top_k;             /* k, 1..E */
  int d_ff_expert;       /* F, 1..262144 */
  int shared_experts;    /* S, 0..64, default 0 */
  int every;             /* layer i (from 0) is an MoE layer when i % every == 0 (Megatron's
                            moe_layer_freq); 1..n_layer, default 1 */
  float aux_loss_coef;   /* load-balancing loss weight (Switch/GShard form), >= 0, default 0.01 */
  float z_loss_coef;     /* router z-loss weight (ST-MoE), >= 0, default 0 */
  float capacity_factor; /* 0 = dropless (default); > 0: ceil(c * tokens * k / E) slots an expert */
  int shared_expert_gate; /* 0/1: the shared experts' summed output times sigmoid(x wg), wg (1,C) one
                             gate a layer (Qwen-MoE's shared_expert_gate); needs shared_experts >= 1 */
  int topk_raw;           /* 1: the k chosen probabilities weigh their experts as they are (the spec's
                             "norm_topk_prob": false, Qwen-MoE's); 0 (default): renormalised to sum 1 */
  int etp;                /* not the model's: never read, written or hashed. The strategy's
                             expert_tensor_parallel_size where a trainer or the cost model sets it
                             on its copy (strategies/sizes.h aa_sizes_set_etp): > 1 cuts every
                             expert's width d_ff_expert over that many tensor ranks (= tp), so
                             that the per-rank sizes and the tensor table follow; 0 or 1: whole */
} aa_moe_t;

/* LoRA fine-tuning (docs/model-spec.md "lora"): every targeted linear
 * layer W (out x in) of every block gets A (r x in) and B (out x r) and
 * computes W x + (alpha / r) B A x; only A and B train, the base is
 * frozen. r 0: no adapters (no "lora" object). targets is a mask of
 * aa_lora_target_t bits, each of the family's layers (llama: q, k, v, o,
 * gate, up, down; gpt2: qkv, proj, fc, fcproj). */
typedef enum {
  AA_LORA_Q,
  AA_LORA_K,
  AA_LORA_V,
  AA_LORA_O,
  AA_LORA_GATE,
  AA_LORA_UP,
  AA_LORA_DOWN,
  AA_LORA_QKV,
  AA_LORA_PROJ,
  AA_LORA_FC,
  AA_LORA_FCPROJ,
  AA_LORA_NTARGETS
} aa_lora_target_t;
typedef struct aa_lora {
  int r;       /* rank, 0 (none) or 1..4096 */
  float alpha; /* scale numerator, > 0; default r (scale 1) */
  int targets; /* mask of 1 << aa_lora_target_t */
  int init;    /* 0: "default" (PEFT's: A Kaiming-uniform, a = sqrt(5); B zeros) */
} aa_lora_t;

typedef struct aa_arch {
  char family[16]; /* "gpt2" or "llama" */
  int n_layer;     /* 1..256 */
  int n_head;      /* 1..256, divides d_model */
  int d_model;     /* 1..65536 */
  int d_ff;        /* 1..262144 */
  int seq_len;     /* 1..AA_SEQ_LEN_MAX: context length (gpt2: the position table's size) */
  int vocab_size;  /* 2..1048576 */
  /* llama only (gpt2 ignores them; n_kv_head 0 means n_head): */
  int n_kv_head;    /* key/value heads of grouped-query attention, dividing n_head */
  float rope_theta; /* base of the rotary position embedding, default 10000 */
  float norm_eps;   /* RMSNorm epsilon, default 1e-5 */
  int qkv_bias;     /* 0/1: q, k and v projections have biases (Qwen2), o none; default 0 */
  aa_moe_t moe;     /* llama only; moe.experts 0: dense */
  aa_lora_t lora;   /* the spec's top-level "lora"; lora.r 0: full training */
} aa_arch_t;

/* Whether a is the llama family (RMSNorm, SwiGLU, RoPE, GQA, untied head,
 * no biases but q/k/v's under qkv_bias, no position table); else GPT-2. */
int aa_arch_is_llama(const aa_arch_t *a);
/* Key/value heads: n_kv_head, or n_head where it is 0 (and always for gpt2). */
int aa_arch_kv_heads(const aa_arch_t *a);
/* Whether block l (0-based) of a is an MoE layer (a->moe.experts > 0 and
 * l % a->moe.every == 0); the number of such blocks. */
int aa_arch_is_moe_layer(const aa_arch_t *a, int l);
int aa_arch_moe_layers(const aa_arch_t *a);
/* Parameters one token's forward touches (the dense ones, the router, and
 * of each MoE layer only its k routed and S shared experts): the count
 * FLOP formulas use (6 x active x tokens). aa_arch_param_count for a
 * dense model. */
uint64_t aa_arch_active_param_count(const aa_arch_t *a);
/* One MoE layer's feed-forward weights counting `routed` of its experts:
 * the router (E C), the routed and shared experts (3 F_e C each, gate,
 * up and down) and the shared experts' gate (C, with shared_expert_gate). routed = experts: what the layer
 * holds; routed = top_k: the matrices one token multiplies by, which the FLOP counts use. */
uint64_t aa_arch_moe_mlp_params(const aa_arch_t *a, int routed);

/* The name of LoRA target t ("q", ..., "fcproj"). */
const char *aa_lora_target_name(int t);
/* Target t's shape in block l of a on one of tp tensor ranks: in and out
 * features of its base layer, and whether it is row-parallel (o, down;
 * proj, fcproj: A split by input columns, B whole) or column-parallel (B
 * split by output rows, A whole). */
void aa_lora_shape(const aa_arch_t *a, int t, int tp, int *in, int *out, int *row);
/* A and B elements a block holds on one of tp tensor ranks (0 without
 * LoRA): sum over targets of r (in + out), with the split dimension / tp. */
uint64_t aa_lora_block_numel(const aa_arch_t *a, int tp);
/* Targets a block has (popcount of lora.targets). */
int aa_lora_n_targets(const aa_arch_t *a);

typedef enum { AA_SCHED_COSINE = 0, AA_SCHED_CONSTANT = 1 } aa_lr_schedule_t;

typedef struct aa_train_cfg {
  int global_batch;      /* sequences per optimizer step, >= 1 */
  int steps;             /* optimizer steps, >= 1 */
  float lr;              /* peak learning rate, > 0 */
  float min_lr;          /* floor of the cosine decay, 0 <= min_lr <= lr; default lr/10 */
  int warmup_steps;      /* linear warm-up, 0 <= warmup_steps <= steps; default 0 */
  aa_lr_schedule_t schedule; /* "cosine" (default) or "constant" */
  float weight_decay;    /* >= 0, default 0.1; applied to 2-D weights only */
  float beta1, beta2;    /* in [0,1), defaults 0.9, 0.95 */
  float eps;             /* > 0, default 1e-8 */
  float grad_clip;       /* global-norm clip, 0 = off, default 1.0 */
  uint64_t seed;         /* default 1234 */
  int eval_every;        /* steps between validation passes, 0 = only at end; default 100 */
  int eval_batches;      /* batches per validation pass, default 8 */
  int checkpoint_every;  /* steps between checkpoints, 0 = none; default 0 */
  int keep_last;         /* step checkpoints kept, the newest (Merak's save_total_limit); 0 = all, default */
  int weights_only;      /* checkpoints without optimizer state (Merak's no_save_optim); default 0 */
} aa_train_cfg_t;

typedef struct aa_model_spec {
  char name[128];            /* optional "name", default: file stem */
  aa_arch_t arch;
  aa_train_cfg_t train;
  char train_data[AA_PATH_MAX]; /* resolved relative to the spec file's directory; empty: no data section */
  char val_data[AA_PATH_MAX];   /* may be empty: no validation */
  char init_weights[AA_PATH_MAX]; /* optional checkpoint to start from; may be empty */
} aa_model_spec_t;

/* Parses and validates a spec from a JSON file. On failure returns a
 * negative code and the last-error message names the file and either the
 * line/column (syntax) or the field path and the rule that failed, e.g.
 *   "model.json: model.n_head: must divide model.d_model (768 % 5 != 0)".
 * *out is written only on success. */
int aa_spec_load(aa_model_spec_t *out, const char *path);

/* aa_spec_load with the config tree (docs/model-spec.md "extends"): the
 * file may name a base spec with "extends" (relative to it; chains of up
 * to 16 files), whose fields its own override, merged key by key for
 * objects (a JSON merge patch, RFC 7396: null removes a key, arrays and
 * other values replace); then the nsets "KEY.PATH=VALUE" overrides
 * (borrowed; a command's --set) are applied in order the same way, VALUE
 * read as JSON when it is JSON text, else as a string. The merged
 * document is validated exactly as a plain file (unknown keys refused),
 * and the message of a field that fails names the layer that set it when
 * that is not the file itself ("...; model.foo is set in base.json (which
 * a.json extends)", "...; model.foo is set by --set model.foo=1"). A
 * base's data and init_weights paths are relative to the base's
 * directory, a --set's to the current directory. What the spec means is
 * the merged document: its hash (aa_arch_hash) and aa_spec_to_json do not
 * depend on how the tree spelled it. *out is written only on success. */
int aa_spec_load_set(aa_model_spec_t *out, const char *path, const char *const *sets, size_t nsets);

/* Whether set is a well-formed override "KEY.PATH=VALUE" (non-empty keys
 * separated by '.'): 0, or AA_EINVAL with "--set 'x': <rule>". Which keys
 * exist is the validator's to say, when the spec is loaded. */
int aa_spec_set_check(const char *set);

/* Same, from a NUL-terminated JSON string; relative data paths are resolved
 * against base_dir (may be NULL = current directory); `origin` names the
 * source in error messages. */
int aa_spec_parse(aa_model_spec_t *out, const char *json, const char *base_dir, const char *origin);

/* Writes a parsed spec back as JSON text with every field present (defaults
 * filled in) and the data and init paths made absolute against the current
 * directory, so that another process (the planner, an executor's runner)
 * reads the same model and data from the text alone: parsing the text gives
 * back *s, up to those paths. *out is malloc'd and transferred to the caller
 * (free with free()); set only on success. */
int aa_spec_to_json(const aa_model_spec_t *s, char **out);

/* Whether the spec can be trained on: 0 when it names data.train and the
 * engine can run its architecture (aa_arch_require_engine), else AA_EINVAL
 * with the last-error message
 *   "<what>: <name> has no training data: data.train is required to ..."
 * or aa_arch_require_engine's. A spec without a data section, or longer
 * sequences than the engine trains, is a model to plan (plan, strategy
 * check); everything that reads tokens (train, a dry run, a search)
 * refuses it through this one check. */
int aa_spec_require_data(const aa_model_spec_t *s, const char *what);

/* Whether the engine can build a model of architecture a: 0 when its
 * seq_len is at most AA_SEQ_LEN_ENGINE_MAX, else AA_EINVAL with the
 * last-error message
 *   "<what>: seq_len 131072: the engine trains at most 65,536 tokens per
 *    sequence; plan and strategy check accept up to 1,048,576". */
int aa_arch_require_engine(const aa_arch_t *a, const char *what);

/* Whether autoaccel can measure the spec's model on a pool of GPUs (cuda)
 * or CPUs: 0, or AA_EUNSUPPORTED for LoRA adapters on GPUs, which the cuda
 * backend does not train yet. (MoE models pass since the cuda engine
 * computes them; the measured GPU pools leave expert parallelism out of
 * their search: planner/search.c.) auto, plan on a cpu:N or cuda:N pool, the
 * planner's plan query and its submit (against the executor a job would
 * run on) call it. */
int aa_spec_require_planned(const aa_model_spec_t *s, bool cuda, const char *what);

/* Validates an architecture alone (ranges, divisibility). */
int aa_arch_validate(const aa_arch_t *a);

/* Canonical hash of the architecture: FNV-1a 64 over the canonical text
 * "family=gpt2;n_layer=..;n_head=..;d_model=..;d_ff=..;seq_len=..;vocab_size=.."
 * (llama appends ";n_kv_head=..;rope_theta=..;norm_eps=..", %.9g, and
 * ";qkv_bias=1" when set; an MoE model then ";moe=E,k,F,S,every,capacity,aux,z",
 * and ";shared_expert_gate=1", ";norm_topk_prob=0" when set): the texts, and so the hashes, of
 * architectures without the two options are what they were before them.
 * written as 16 lowercase hex digits + NUL into out (17 bytes). The same
 * architecture always gives the same hash whatever the JSON key order,
 * spacing or training settings. */
void aa_arch_hash(const aa_arch_t *a, char out[17]);

/* Number of trainable parameters of the architecture. */
uint64_t aa_arch_param_count(const aa_arch_t *a);

/* Learning rate at step (0-based) under the spec's schedule:
 * warm-up: lr*(step+1)/warmup for step < warmup; then cosine from lr down
 * to min_lr over the remaining steps (or constant lr). */
float aa_lr_at(const aa_train_cfg_t *t, int step);

#endif
