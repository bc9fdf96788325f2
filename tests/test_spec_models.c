/* The specs of well-known models in examples/models/ (their sources:
 * examples/models/README.md): every file there parses, has no data (they
 * are made for planning), and has the parameter count its paper or model
 * card publishes, within the rounding the publication used. The count is
 * also worked out here by hand, tensor by tensor, from the published
 * formula or the published checkpoint's tensors, so aa_arch_param_count is
 * checked against something other than itself. */
#include "common/aa.h"
#include "common/spec.h"
#include "tests/aa_test.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src_dir(void) {
  const char *d = getenv("AA_SOURCE_DIR");
  return d && *d ? d : ".";
}

/* One published model: the file, the size its source gives (in units of
 * 1e9 parameters) and how far ours may be from it, in the same units. */
typedef struct {
  const char *file;
  double published_b, tolerance_b;
  const char *source;
} model_t;

/* PTD-P (Narayanan et al., SC21, arXiv 2104.04473) Table 1 gives each
 * size to 0.1 B, so ours must round to it: within 0.05 B. GPT-3 175B
 * (Brown et al. 2020, Table 2.1) says 175.0 B for a shape that holds
 * 174.6 B (Megatron's padded vocabulary of 51,200 included): within 0.5 %.
 * Llama 3: Hugging Face's safetensors "Model size" of Meta's checkpoints,
 * 8.03 B and 70.6 B, to their last digit; 405B is published as 405 B
 * (Meta's model card, the Llama 3 paper): within 0.5 %. Mixtral 8x7B
 * (Jiang et al. 2024, arXiv 2401.04088): 46.7 B, to its last digit (and
 * 12.9 B active, the shapes' test). Qwen1.5-MoE-A2.7B: its model card's
 * "14.3B parameters in total and 2.7B activated", to their last digit. */
static const model_t models[] = {
    {"ptdp-gpt-1.7b.json", 1.7, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-3.6b.json", 3.6, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-7.5b.json", 7.5, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-18.4b.json", 18.4, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-39.1b.json", 39.1, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-76.1b.json", 76.1, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-145.6b.json", 145.6, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-310.1b.json", 310.1, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-529.6b.json", 529.6, 0.05, "PTD-P Table 1"},
    {"ptdp-gpt-1008b.json", 1008.0, 0.05, "PTD-P Table 1"},
    {"gpt3-175b.json", 175.0, 0.875, "GPT-3 Table 2.1"},
    {"llama3-8b.json", 8.03, 0.005, "HF safetensors size"},
    {"llama3-8b-lora.json", 8.03, 0.005, "HF safetensors size (its base)"},
    {"llama3-70b.json", 70.6, 0.05, "HF safetensors size"},
    {"llama3.1-405b.json", 405.0, 2.025, "Meta model card"},
    {"mixtral-8x7b.json", 46.7, 0.05, "Mixtral paper"},
    {"qwen1.5-moe-a2.7b.json", 14.3, 0.05, "Qwen model card"},
};
#define NMODELS (sizeof models / sizeof models[0])

/* GPT (gpt2 family) by PTD-P's formula, section 5.1:
 *   P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h))
 *     = 12 l h^2 + 13 l h + (V + s) h
 * (per layer: q|k|v and the projection 4h^2 + 4h, the MLP 8h^2 + 5h, two
 * LayerNorms 4h; the token and position tables), plus the final
 * LayerNorm's 2h, which the paper leaves out. Needs d_ff = 4h, as the
 * paper's models have. */
static uint64_t ptdp_params(const aa_arch_t *a) {
  const uint64_t l = (uint64_t)a->n_layer, h = (uint64_t)a->d_model;
  return 12 * l * h * h + 13 * l * h + ((uint64_t)a->vocab_size + (uint64_t)a->seq_len) * h + 2 * h;
}

/* Llama by the tensors of Meta's Hugging Face checkpoints (config.json:
 * no biases, untied lm_head): embed_tokens (V, C); each layer q_proj (C,
 * C), k_proj and v_proj (K, C) with K = n_kv_head * C / n_head, o_proj (C,
 * C), gate_proj and up_proj (F, C), down_proj (C, F), input_layernorm and
 * post_attention_layernorm (C); norm (C); lm_head (V, C). Mixtral's
 * (Mistral AI's checkpoint, every layer MoE) has in each layer's MLP place
 * block_sparse_moe.gate (E, C) and per expert w1 and w3 (Fe, C) and w2
 * (C, Fe). Qwen1.5-MoE's (Qwen2MoeForCausalLM) adds q_proj, k_proj and
 * v_proj biases (C, K, K), mlp.shared_expert's gate_proj and up_proj
 * (S Fe, C) and down_proj (C, S Fe), and mlp.shared_expert_gate (1, C). */
static uint64_t llama_params(const aa_arch_t *a) {
  const uint64_t C = (uint64_t)a->d_model, F = (uint64_t)a->d_ff, V = (uint64_t)a->vocab_size;
  const uint64_t K = (uint64_t)a->n_kv_head * C / (uint64_t)a->n_head;
  const uint64_t E = (uint64_t)a->moe.experts, Fe = (uint64_t)a->moe.d_ff_expert;
  const uint64_t Fs = (uint64_t)a->moe.shared_experts * Fe, gate = a->moe.shared_expert_gate ? C : 0;
  const uint64_t mlp = E ? E * C + E * (2 * Fe * C + C * Fe) + 2 * Fs * C + C * Fs + gate : 2 * F * C + C * F;
  const uint64_t bias = a->qkv_bias ? C + 2 * K : 0;
  const uint64_t layer = C * C + 2 * K * C + bias + C * C + mlp + 2 * C;
  return V * C + (uint64_t)a->n_layer * layer + C + V * C;
}

static const model_t *expected(const char *file) {
  for (size_t i = 0; i < NMODELS; i++)
    if (!strcmp(models[i].file, file)) return &models[i];
  return NULL;
}

AA_TEST(every_example_model_parses_without_data_and_has_its_published_size) {
  char dir[AA_PATH_MAX], path[AA_PATH_MAX + 256];
  snprintf(dir, sizeof dir, "%s/examples/models", src_dir());
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "%s: cannot open", dir);
  if (!d) return;
  int seen[NMODELS] = {0}, files = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".json")) continue;
    files++;
    const model_t *m = expected(e->d_name);
    /* A spec shipped without a published size to hold it to is a failure:
     * add its row above and its source to the README. */
    CHECK_MSG(m != NULL, "%s: no published size in this test", e->d_name);
    if (!m) continue;
    seen[m - models] = 1;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    aa_model_spec_t s;
    int rc = aa_spec_load(&s, path);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    if (rc) continue;
    CHECK_MSG(!s.train_data[0] && !s.val_data[0] && !s.init_weights[0], "%s: has data", e->d_name);
    CHECK_MSG(aa_spec_require_data(&s, e->d_name) == AA_EINVAL, "%s", e->d_name);
    char stem[128];
    snprintf(stem, sizeof stem, "%.*s", (int)(n - 5), e->d_name);
    CHECK_MSG(!strcmp(s.name, stem), "%s: name \"%s\" is not the file's stem", e->d_name, s.name);
    const uint64_t ours = aa_arch_param_count(&s.arch);
    const uint64_t by_hand = aa_arch_is_llama(&s.arch) ? llama_params(&s.arch) : ptdp_params(&s.arch);
    if (!aa_arch_is_llama(&s.arch)) CHECK_MSG(s.arch.d_ff == 4 * s.arch.d_model, "%s: d_ff", e->d_name);
    CHECK_MSG(ours == by_hand, "%s: %" PRIu64 " parameters, by hand %" PRIu64, e->d_name, ours, by_hand);
    const double b = (double)ours / 1e9;
    CHECK_MSG(b >= m->published_b - m->tolerance_b && b <= m->published_b + m->tolerance_b,
              "%s: %.4f B parameters, %s gives %.2f B (+- %.3f)", e->d_name, b, m->source, m->published_b,
              m->tolerance_b);
    /* A LoRA example: its adapters are PEFT's count ("trainable params:
     * 41,943,040" for Llama-3 8B at r 16 on all seven linear layers). */
    if (s.arch.lora.r)
      CHECK_MSG((uint64_t)s.arch.n_layer * aa_lora_block_numel(&s.arch, 1) == 41943040u, "%s: adapters",
                e->d_name);
    fprintf(stderr, "  %-22s %16" PRIu64 " parameters = %9.4f B; %s: %.2f B (+- %.3f)\n", e->d_name, ours, b,
            m->source, m->published_b, m->tolerance_b);
  }
  closedir(d);
  for (size_t i = 0; i < NMODELS; i++)
    CHECK_MSG(seen[i], "%s: listed here but not in examples/models", models[i].file);
  CHECK(files == (int)NMODELS);
}

/* The published shapes themselves, so a typo in a file cannot pass by
 * changing the size within the tolerance: each row as its source prints
 * it. */
AA_TEST(example_models_have_the_published_shapes) {
  static const struct {
    const char *file;
    int layers, heads, kv_heads, hidden, ffn, seq, vocab, batch;
  } shapes[] = {
      /* PTD-P Table 1: heads, hidden, layers, global batch; d_ff 4h, V 51,200, s 2,048. */
      {"ptdp-gpt-1.7b.json", 24, 24, 24, 2304, 9216, 2048, 51200, 512},
      {"ptdp-gpt-3.6b.json", 30, 32, 32, 3072, 12288, 2048, 51200, 512},
      {"ptdp-gpt-7.5b.json", 36, 32, 32, 4096, 16384, 2048, 51200, 512},
      {"ptdp-gpt-18.4b.json", 40, 48, 48, 6144, 24576, 2048, 51200, 1024},
      {"ptdp-gpt-39.1b.json", 48, 64, 64, 8192, 32768, 2048, 51200, 1536},
      {"ptdp-gpt-76.1b.json", 60, 80, 80, 10240, 40960, 2048, 51200, 1792},
      {"ptdp-gpt-145.6b.json", 80, 96, 96, 12288, 49152, 2048, 51200, 2304},
      {"ptdp-gpt-310.1b.json", 96, 128, 128, 16384, 65536, 2048, 51200, 2160},
      {"ptdp-gpt-529.6b.json", 105, 128, 128, 20480, 81920, 2048, 51200, 2520},
      {"ptdp-gpt-1008b.json", 128, 160, 160, 25600, 102400, 2048, 51200, 3072},
      /* GPT-3 Table 2.1; Megatron's padded vocabulary; 1,536 x 2,048 = 3.1 M tokens a step. */
      {"gpt3-175b.json", 96, 96, 96, 12288, 49152, 2048, 51200, 1536},
      /* Meta's config.json / sku_list.py. */
      {"llama3-8b.json", 32, 32, 8, 4096, 14336, 8192, 128256, 512},
      {"llama3-70b.json", 80, 64, 8, 8192, 28672, 8192, 128256, 512},
      {"llama3.1-405b.json", 126, 128, 8, 16384, 53248, 8192, 128256, 2048},
      /* Mixtral's Table 1 (dim, n_layers, head_dim 128, hidden_dim, n_heads,
       * n_kv_heads, context_len, vocab_size); the batch is a choice. */
      {"mixtral-8x7b.json", 32, 32, 8, 4096, 14336, 32768, 32000, 128},
      /* Qwen1.5-MoE-A2.7B's config.json (num_hidden_layers, num_attention_heads,
       * num_key_value_heads, hidden_size, intermediate_size,
       * max_position_embeddings, vocab_size); the batch is a choice. */
      {"qwen1.5-moe-a2.7b.json", 24, 16, 16, 2048, 5632, 8192, 151936, 512},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    char path[AA_PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/examples/models/%s", src_dir(), shapes[i].file);
    aa_model_spec_t s;
    int rc = aa_spec_load(&s, path);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    if (rc) continue;
    const aa_arch_t *a = &s.arch;
    CHECK_MSG(a->n_layer == shapes[i].layers && a->n_head == shapes[i].heads &&
                  aa_arch_kv_heads(a) == shapes[i].kv_heads && a->d_model == shapes[i].hidden &&
                  a->d_ff == shapes[i].ffn && a->seq_len == shapes[i].seq &&
                  a->vocab_size == shapes[i].vocab && s.train.global_batch == shapes[i].batch,
              "%s", shapes[i].file);
    /* Llama 3's RoPE base and RMSNorm epsilon (config.json); Mixtral's
     * rope_theta 1e6, 8 experts top-2 of width 14336 in every layer (Table
     * 1), 12.9 B active parameters (its section 2.1: "13B active", Mistral
     * AI's 12.9 B). */
    /* Qwen1.5-MoE-A2.7B: 60 experts of moe_intermediate_size 1408, top-4
     * without renormalisation (norm_topk_prob false), a shared expert of
     * 5632 = 4 x 1408 under its gate, q/k/v biases, rope_theta 1e6,
     * rms_norm_eps 1e-6; "2.7B activated". */
    if (!strcmp(shapes[i].file, "qwen1.5-moe-a2.7b.json")) {
      const double active = (double)aa_arch_active_param_count(a) / 1e9;
      CHECK_MSG(a->rope_theta == 1e6f && a->norm_eps == 1e-6f && a->qkv_bias && a->moe.experts == 60 &&
                    a->moe.top_k == 4 && a->moe.d_ff_expert == 1408 && a->moe.shared_experts == 4 &&
                    a->moe.shared_expert_gate && a->moe.topk_raw && aa_arch_moe_layers(a) == 24 &&
                    active > 2.65 && active < 2.75,
                "%s: %.4f B active", shapes[i].file, active);
    } else if (!strcmp(shapes[i].file, "mixtral-8x7b.json")) {
      const double active = (double)aa_arch_active_param_count(a) / 1e9;
      CHECK_MSG(a->rope_theta == 1e6f && a->norm_eps == 1e-5f && a->moe.experts == 8 && a->moe.top_k == 2 &&
                    a->moe.d_ff_expert == 14336 && a->moe.every == 1 && aa_arch_moe_layers(a) == 32 &&
                    active > 12.85 && active < 12.95,
                "%s: %.4f B active", shapes[i].file, active);
    } else if (aa_arch_is_llama(a)) {
      CHECK_MSG(a->rope_theta == 500000.0f && a->norm_eps == 1e-5f, "%s", shapes[i].file);
    }
  }
}

int main(void) {
  RUN(every_example_model_parses_without_data_and_has_its_published_size);
  RUN(example_models_have_the_published_shapes);
  return aa_test_summary();
}
