/* `autoaccel import` and `autoaccel export`: GPT-2 and Llama weights from
 * Hugging Face safetensors (GPT-2's also from llm.c) into an autoaccel
 * checkpoint, and back out as safetensors (engine/import.h;
 * docs/checkpoint-format.md "Import and export"). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/import.h"
#include "engine/lora.h"
#include "engine/lora_peft.h"

static void usage_import(FILE *f) {
  fprintf(f, "usage: autoaccel import SRC --model MODEL.json --out CKPT\n\n"
             "Reads GPT-2, Llama, Qwen2, Mixtral or Qwen2-MoE weights (the spec's family, qkv_bias\n"
             "and moe) and writes them as an autoaccel checkpoint (weights only), which a model\n"
             "spec's init_weights and 'autoaccel train' start from. SRC is:\n"
             "  a Hugging Face model.safetensors (GPT-2 names, with or without 'transformer.';\n"
             "    Llama names, with or without 'model.', Qwen2's q/k/v biases with qkv_bias; with\n"
             "    model.moe Mixtral's expert names, or Qwen2-MoE's (its shared experts' gate with\n"
             "    moe.shared_expert_gate));\n"
             "  a sharded checkpoint's model.safetensors.index.json (its weight_map's files);\n"
             "  a directory holding either of them;\n"
             "  gpt2 only: an llm.c checkpoint (gpt2_124M.bin: magic 20240326, version 3 fp32\n"
             "    or 5 bf16).\n"
             "F32, BF16 and F16 tensors become the fp32 master weights. Every tensor's name and\n"
             "shape must be the model's: a missing, unexpected or misshapen tensor is an error\n"
             "naming it. gpt2: lm_head.weight is accepted when it equals wte.weight (tied).\n"
             "llama: without lm_head.weight the head is a copy of embed_tokens (tied).\n"
             "With a spec that has \"lora\", SRC is Hugging Face PEFT adapters instead (a directory\n"
             "holding adapter_model.safetensors and adapter_config.json, or that .safetensors\n"
             "with the config beside it), written as the spec's adapter checkpoint (AALORA01):\n"
             "r, lora_alpha and target_modules must be the spec's.\n\n"
             "options:\n"
             "  --model MODEL.json   the model spec whose architecture the weights must have (required)\n"
             "  --out CKPT           the checkpoint to write (required)\n"
             "  -h, --help           this help\n"
             "Exit codes: 0 success, 1 failure (bad or mismatched weights, i/o), 2 usage error.\n");
  aa_cli_set_help(f);
}

static void usage_export(FILE *f) {
  fprintf(f, "usage: autoaccel export CKPT --model MODEL.json --out FILE.safetensors [--dtype f32|bf16|f16] "
             "[--merge | --peft]\n\n"
             "Writes a checkpoint's weights (a single file or a sharded checkpoint's manifest) as\n"
             "one Hugging Face safetensors file with the family's names and layout (GPT-2's,\n"
             "Llama's and Qwen2's, or Mixtral's and Qwen2-MoE's for a model with MoE layers), which\n"
             "'autoaccel import' and Hugging Face's models read. An f32 export imports back bit for\n"
             "bit; bf16 and f16 round to nearest even. With a spec that has \"lora\", CKPT is its\n"
             "adapter checkpoint and --merge or --peft says what to write.\n\n"
             "options:\n"
             "  --model MODEL.json   the model spec of the checkpoint (required)\n"
             "  --out FILE           the safetensors file to write (required)\n"
             "  --dtype T            f32 (default), bf16 or f16\n"
             "  --merge              MODEL.json has \"lora\" and CKPT is its adapter checkpoint: writes its\n"
             "                       base (init_weights) with the adapters folded in, W + (alpha / r) B A\n"
             "  --peft               MODEL.json has \"lora\" and CKPT is its adapter checkpoint: writes the\n"
             "                       adapters alone as Hugging Face PEFT's adapter_model.safetensors and\n"
             "                       adapter_config.json into the directory --out\n"
             "  -h, --help           this help\n"
             "Exit codes: 0 success, 1 failure (bad checkpoint, i/o), 2 usage error.\n");
  aa_cli_set_help(f);
}

typedef struct {
  const char *src, *model, *out;
  aa_dtype_t dtype;
  int merge;          /* export --merge: CKPT is a LoRA adapter checkpoint */
  int peft;           /* export --peft: the same, written as PEFT's adapter files */
  aa_cli_sets_t sets; /* --set overrides of the model spec */
} args_t;

/* Parses SRC --model M --out O [--dtype T]: 0, or an exit code to return
 * (-1 for --help, answered). */
static int parse(const char *cmd, int argc, char **argv, void (*usage)(FILE *), int with_dtype, args_t *a) {
  /* import has no --dtype: the tables differ in that entry only. */
  static const struct option export_opts[] = {{"model", required_argument, 0, 'm'},
                                              {"out", required_argument, 0, 'o'},
                                              {"help", no_argument, 0, 'h'},
                                              {"dtype", required_argument, 0, 'd'},
                                              {"merge", no_argument, 0, 'M'},
                                              {"peft", no_argument, 0, 'P'},
                                              {0, 0, 0, 0}};
  static const struct option import_opts[] = {{"model", required_argument, 0, 'm'},
                                              {"out", required_argument, 0, 'o'},
                                              {"help", no_argument, 0, 'h'},
                                              {0, 0, 0, 0}};
  const struct option *longopts = with_dtype ? export_opts : import_opts;
  int c;
  optind = 1;
  opterr = 0;
  a->dtype = AA_F32;
  if (aa_cli_take_sets(&argc, argv, longopts, cmd, &a->sets)) return AA_EXIT_USAGE;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': a->model = optarg; break;
    case 'o': a->out = optarg; break;
    case 'd':
      if (!strcmp(optarg, "f32"))
        a->dtype = AA_F32;
      else if (!strcmp(optarg, "bf16"))
        a->dtype = AA_BF16;
      else if (!strcmp(optarg, "f16"))
        a->dtype = AA_F16;
      else {
        fprintf(stderr, "autoaccel %s: --dtype: expected f32, bf16 or f16, got '%s'\n", cmd, optarg);
        return AA_EXIT_USAGE;
      }
      break;
    case 'M': a->merge = 1; break;
    case 'P': a->peft = 1; break;
    case 'h': usage(stdout); return -1;
    default:
      fprintf(stderr, "autoaccel %s: unknown option or missing value: '%s'\n", cmd, argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  const char *missing = optind != argc - 1
                            ? (with_dtype ? "expected exactly one CKPT" : "expected exactly one SRC")
                        : !a->model           ? "--model MODEL.json is required"
                        : !a->out             ? "--out is required"
                        : a->merge && a->peft ? "--merge and --peft exclude each other"
                                              : NULL;
  if (missing) {
    fprintf(stderr, "autoaccel %s: %s\n\n", cmd, missing);
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  a->src = argv[optind];
  return 0;
}

/* A whole fp32 model of the spec's architecture (at path) with no
 * gradients (ZeRO stage 2's allocation: parameters only) and the smallest
 * activations; a sequence longer than the engine builds is refused naming
 * the file. */
static int make_model(const aa_model_spec_t *spec, const char *path, aa_gpt_t **m) {
  aa_gpt_opts_t o = {.zero = 2, .amp = AA_F32};
  int rc = aa_arch_require_engine(&spec->arch, path);
  return rc ? rc : aa_gpt_create(m, &spec->arch, aa_ops_cpu(), 1, 1, &o);
}

static const char *format_name(aa_import_format_t f) {
  return f == AA_IMPORT_LLMC ? "llm.c" : f == AA_IMPORT_SHARDED ? "sharded safetensors" : "safetensors";
}

/* import with a LoRA spec: PEFT adapters (engine/lora_peft.h) into the
 * spec's adapter checkpoint. */
static int import_peft(const args_t *a, const aa_model_spec_t *spec) {
  float *ad = NULL;
  aa_peft_info_t info;
  if (aa_peft_import(a->src, &spec->arch, &ad, &info) || aa_peft_save_checkpoint(a->out, &spec->arch, ad)) {
    free(ad);
    return aa_cli_fail("import");
  }
  free(ad);
  printf("imported %llu adapter parameters (r %d, alpha %g; %d tensors of %s) from %s into %s\n",
         (unsigned long long)spec->arch.n_layer * aa_lora_block_numel(&spec->arch, 1), spec->arch.lora.r,
         (double)spec->arch.lora.alpha, info.tensors, info.dtypes, info.model, a->out);
  return AA_EXIT_OK;
}

int aa_cmd_import(int argc, char **argv) {
  args_t a = {0};
  int rc = parse("import", argc, argv, usage_import, 0, &a);
  if (rc) return rc < 0 ? AA_EXIT_OK : rc;
  aa_model_spec_t spec;
  aa_gpt_t *m = NULL;
  aa_import_info_t info;
  if (aa_cli_spec_load(&spec, a.model, &a.sets)) return aa_cli_fail("import");
  if (spec.arch.lora.r) return import_peft(&a, &spec);
  if (make_model(&spec, a.model, &m) || aa_import_weights(m, a.src, &info) ||
      aa_ckpt_save(a.out, m, NULL, NULL)) {
    aa_gpt_free(m);
    return aa_cli_fail("import");
  }
  printf("imported %zu parameters from %s (%s, %d file%s, %d tensors of %s%s%s) into %s\n", m->n_params,
         a.src, format_name(info.format), info.files, info.files == 1 ? "" : "s", info.tensors, info.dtypes,
         info.ignored && !aa_arch_is_llama(&spec.arch) ? ", buffers and the tied head skipped"
         : info.ignored                                ? ", buffers skipped"
                                                       : "",
         info.tied_head ? "; no lm_head.weight: the head is a copy of embed_tokens (tied)" : "", a.out);
  aa_gpt_free(m);
  return AA_EXIT_OK;
}

/* export --peft: the adapter checkpoint a->src as PEFT's files in the
 * directory a->out (engine/lora_peft.h). */
static int export_peft(const args_t *a, const aa_model_spec_t *spec) {
  float *ad = NULL;
  int step = 0;
  if (aa_lora_load(a->src, &spec->arch, &ad, &step) ||
      aa_peft_export(a->out, &spec->arch, ad, a->dtype, spec->init_weights)) {
    free(ad);
    return aa_cli_fail("export");
  }
  free(ad);
  printf("exported %llu adapter parameters of %s (step %d, r %d, alpha %g; %d tensors, %s) to %s/"
         "adapter_model.safetensors and adapter_config.json\n",
         (unsigned long long)spec->arch.n_layer * aa_lora_block_numel(&spec->arch, 1), a->src, step,
         spec->arch.lora.r, (double)spec->arch.lora.alpha,
         2 * spec->arch.n_layer * aa_lora_n_targets(&spec->arch),
         a->dtype == AA_F32    ? "F32"
         : a->dtype == AA_BF16 ? "BF16"
                               : "F16",
         a->out);
  return AA_EXIT_OK;
}

/* export --merge: the spec's base (init_weights) with the adapter
 * checkpoint a->src folded in (engine/lora.h). */
static int export_merged(const args_t *a, const aa_model_spec_t *spec) {
  if (!spec->arch.lora.r) {
    aa_error(AA_EINVAL, "%s: %s has no \"lora\" section", a->peft ? "--peft" : "--merge", a->model);
    return aa_cli_fail("export");
  }
  if (!a->merge && !a->peft) {
    aa_error(AA_EINVAL,
             "%s fine-tunes LoRA adapters: --merge writes its base with them folded in, --peft the adapters "
             "alone as Hugging Face PEFT's files",
             a->model);
    return aa_cli_fail("export");
  }
  if (a->peft) return export_peft(a, spec);
  if (!spec->init_weights[0]) {
    aa_error(AA_EINVAL, "--merge: %s names no init_weights, the base the adapters apply to", a->model);
    return aa_cli_fail("export");
  }
  aa_model_spec_t bs = *spec;
  memset(&bs.arch.lora, 0, sizeof bs.arch.lora);
  aa_gpt_t *m = NULL;
  float *ad = NULL;
  int step = 0;
  if (make_model(&bs, a->model, &m) || aa_ckpt_load(spec->init_weights, m, NULL, NULL) ||
      aa_lora_load(a->src, &spec->arch, &ad, &step) || aa_lora_merge(m, &spec->arch, ad) ||
      aa_export_weights(m, a->out, a->dtype)) {
    free(ad);
    aa_gpt_free(m);
    return aa_cli_fail("export");
  }
  printf("exported %zu parameters of %s with the adapters of %s (step %d, r %d, alpha %g) merged to %s\n",
         m->n_params, spec->init_weights, a->src, step, spec->arch.lora.r, (double)spec->arch.lora.alpha,
         a->out);
  free(ad);
  aa_gpt_free(m);
  return AA_EXIT_OK;
}

int aa_cmd_export(int argc, char **argv) {
  args_t a = {0};
  int rc = parse("export", argc, argv, usage_export, 1, &a);
  if (rc) return rc < 0 ? AA_EXIT_OK : rc;
  aa_model_spec_t spec;
  aa_gpt_t *m = NULL;
  if (aa_cli_spec_load(&spec, a.model, &a.sets)) return aa_cli_fail("export");
  if (spec.arch.lora.r || a.merge || a.peft) return export_merged(&a, &spec);
  if (make_model(&spec, a.model, &m) || aa_ckpt_load(a.src, m, NULL, NULL) ||
      aa_export_weights(m, a.out, a.dtype)) {
    aa_gpt_free(m);
    return aa_cli_fail("export");
  }
  printf("exported %zu parameters from %s to %s (%d tensors, %s)\n", m->n_params, a.src, a.out,
         aa_export_tensors(m),
         a.dtype == AA_F32    ? "F32"
         : a.dtype == AA_BF16 ? "BF16"
                              : "F16");
  aa_gpt_free(m);
  return AA_EXIT_OK;
}
