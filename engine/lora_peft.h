/* LoRA adapters in and out as Hugging Face PEFT writes them: a directory
 * holding adapter_model.safetensors (every target's lora_A.weight (r, in)
 * and lora_B.weight (out, r), named for the module they adapt) and
 * adapter_config.json (r, lora_alpha, target_modules, ...). The names and
 * the config: docs/checkpoint-format.md "PEFT adapters". The adapters are
 * engine/model.h aa_gpt_lora_offset's layout (engine/lora.h aa_lora_load's
 * array); every target adapts one whole engine tensor whose rows and
 * columns are the Hugging Face module's (llama's q/k/v/o/gate/up/down are
 * separate tensors as in Hugging Face; gpt2's qkv is c_attn's output
 * columns q, k, v in order, only transposed), so A and B copy unchanged. */
#ifndef AA_LORA_PEFT_H
#define AA_LORA_PEFT_H

#include "../common/spec.h"
#include "model.h"

#define AA_PEFT_CONFIG_MAX (1u << 20) /* bytes of an adapter_config.json */
#define AA_PEFT_MODULES_MAX 1024      /* names in its target_modules */

/* What an import read. */
typedef struct aa_peft_info {
  int tensors;                  /* lora_A and lora_B tensors read */
  char dtypes[32];              /* their element types, e.g. "F32", "BF16" */
  char model[AA_PATH_MAX + 64]; /* the adapter_model.safetensors read */
} aa_peft_info_t;

/* Writes a's adapters (borrowed, aa_lora_load's layout) to the directory
 * dir (created when missing; its parent must exist) as PEFT's
 * adapter_model.safetensors in dtype (AA_F32, AA_BF16, AA_F16: rounded to
 * nearest even) and adapter_config.json: r, lora_alpha, target_modules
 * (llama: q_proj ... down_proj; gpt2: c_attn, c_fc, and c_proj, or
 * attn.c_proj / mlp.c_proj when only one of them is a target), bias
 * "none", fan_in_fan_out (true for gpt2's Conv1D), task_type "CAUSAL_LM"
 * and base_model_name_or_path = base (may be NULL or empty: null). Both
 * files are written through temporaries renamed over the final names. */
int aa_peft_export(const char *dir, const aa_arch_t *a, const float *adapters, aa_dtype_t dtype,
                   const char *base);

/* Reads PEFT adapters for the fine-tune a (its lora set) from src: a
 * directory holding adapter_model.safetensors and adapter_config.json, or
 * the .safetensors file itself with the config beside it. The config must
 * agree with a: r and lora_alpha equal, target_modules (a list of module
 * names matched as PEFT matches them, or "all-linear") adapting exactly
 * a's targets in every block; use_rslora, use_dora, a bias other than
 * "none", rank_pattern, alpha_pattern, layers_to_transform and
 * modules_to_save are refused as unsupported. Every expected tensor must
 * be present with its shape and dtype F32, BF16 or F16 (widened exactly),
 * and no other tensor may be: each refusal names the field or tensor
 * (AA_EINVAL, AA_EUNSUPPORTED; AA_EFORMAT for a file that is not what it
 * claims), checked before any value is read. On success *out is the
 * adapters (malloc'd, n_layer x aa_lora_block_numel(a, 1) floats; the
 * caller frees); info (may be NULL) says what was read. */
int aa_peft_import(const char *src, const aa_arch_t *a, float **out, aa_peft_info_t *info);

/* Writes adapters (borrowed) as an adapter checkpoint of a (AALORA01 at
 * step 0, no optimizer state: engine/lora.h aa_lora_save), which `train
 * --resume`, `export --merge` and `generate` read. */
int aa_peft_save_checkpoint(const char *path, const aa_arch_t *a, const float *adapters);

#endif
