/* Weights in and out for the GPT-2 and Llama families: Hugging Face
 * safetensors checkpoints (one file, or shards named by
 * model.safetensors.index.json) and llm.c's gpt2_*.bin, into a model's fp32
 * parameters; and a model's parameters out as one safetensors file with
 * Hugging Face's names. The names come from the model's tensor table
 * (engine/model.h), one map per family. Formats and the name maps:
 * docs/checkpoint-format.md "Import and export". */
#ifndef AA_IMPORT_H
#define AA_IMPORT_H

#include "model.h"

#define AA_LLMC_MAGIC 20240326
#define AA_IMPORT_INDEX_MAX (16u << 20) /* bytes of a shard index */
#define AA_IMPORT_MAX_SHARDS 4096

typedef enum { AA_IMPORT_SAFETENSORS = 0, AA_IMPORT_SHARDED = 1, AA_IMPORT_LLMC = 2 } aa_import_format_t;

/* What an import read. */
typedef struct aa_import_info {
  aa_import_format_t format;
  int files;       /* safetensors files read (1 for llm.c) */
  int tensors;     /* tensors imported (llm.c: its 16 parameter arrays) */
  int ignored;     /* tensors skipped: GPT-2's attention mask buffers and tied lm_head,
                      Llama's rotary_emb.inv_freq buffers */
  int tied_head;   /* llama: the source has no lm_head.weight, so the head is a copy of
                      embed_tokens (a tied checkpoint); tensors does not count it */
  char dtypes[32]; /* the source element types seen, e.g. "F32", "BF16+F16" */
} aa_import_info_t;

/* Reads the weights at src into m's fp32 parameters. src is:
 *  - a safetensors file with Hugging Face's names for m's family (GPT-2's,
 *    optionally under "transformer."; Llama's, optionally under "model.",
 *    lm_head.weight never);
 *  - a shard index (a file whose name ends in ".json": {"weight_map":
 *    {tensor: file}}, each file a plain name in the index's directory);
 *  - a directory holding model.safetensors.index.json or model.safetensors;
 *  - for gpt2 only, an llm.c checkpoint (int32 magic 20240326 first;
 *    version 3 fp32 or 5 bf16), whose header must describe m's
 *    architecture (d_ff = 4 d_model, the padded vocabulary's extra rows
 *    dropped).
 * m must be a whole "gpt2" or "llama" model (tensor and pipeline degree 1)
 * with its fp32 parameters allocated. Every file's header and every
 * tensor's name, shape and dtype are checked before any value is read, so
 * a missing, unexpected or misshapen tensor (AA_EINVAL naming it, and both
 * shapes) or a file that is not what it claims (AA_EFORMAT) leaves m as it
 * was; a read that fails after that (AA_EIO) leaves m's parameters partly
 * written. BF16 and F16 widen exactly.
 * gpt2: Conv1D weights ([in, out]) are transposed to the engine's (out,
 * in); lm_head.weight is accepted only when it equals wte.weight (a tied
 * head); the attention buffers attn.bias and attn.masked_bias are skipped.
 * llama: linear weights are (out, in) as the engine's, q_proj and k_proj
 * used as they are (the engine's RoPE is Hugging Face's rotate_half);
 * without lm_head.weight the head is a copy of embed_tokens (info->tied_head);
 * self_attn.rotary_emb.inv_freq buffers are skipped; with arch.qkv_bias
 * (Qwen2) self_attn.q_proj/k_proj/v_proj.bias too, and without it such a
 * bias is refused naming the option.
 * llama with MoE layers (arch.moe): Mixtral's names, each MoE block's
 * block_sparse_moe.gate.weight (the router) and per expert e
 * experts.<e>.w1/w3/w2.weight sliced into the stacked experts.w13 and
 * experts.w2 (shared experts: shared_experts.<s>.*, autoaccel's names);
 * Qwen-MoE's mlp.gate and mlp.experts.<e>.gate_proj/up_proj/down_proj read
 * as Mixtral's, and its mlp.shared_expert_gate.weight is refused (AA_EINVAL
 * naming it and the spec options it needs). With moe.shared_expert_gate
 * the names are Qwen2-MoE's: mlp.gate, mlp.experts.<e>.*_proj, the one
 * shared expert mlp.shared_expert.*_proj of width S Fe spread over the S
 * engine shared experts, and mlp.shared_expert_gate as shared.gate.
 * info->tensors counts the file's tensors, one per expert and projection.
 * info (may be NULL) says what was read. */
int aa_import_weights(aa_gpt_t *m, const char *src, aa_import_info_t *info);

/* Writes m's parameters (a whole gpt2 or llama model) to path as one
 * safetensors file with Hugging Face's names (gpt2: no prefix, Conv1D
 * layout, no lm_head; llama: "model." names and lm_head.weight) in dtype
 * (AA_F32, AA_BF16, AA_F16: rounded to nearest even), written through a
 * temporary renamed over path. Importing an F32 export gives back m's
 * parameters bit for bit. An MoE llama's experts are written one tensor
 * per expert and projection under Mixtral's names, or Qwen2-MoE's with
 * moe.shared_expert_gate (aa_import_weights). */
int aa_export_weights(const aa_gpt_t *m, const char *path, aa_dtype_t dtype);
/* How many tensors aa_export_weights writes for m: its table's, with an
 * MoE block's stacked expert tensors counted per expert and projection. */
int aa_export_tensors(const aa_gpt_t *m);

#endif
