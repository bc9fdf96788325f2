/* `autoaccel generate`: text from a checkpoint, one token at a time with a
 * KV cache (engine/generate.h), greedy or sampled, with the rate it ran at. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/data.h"
#include "engine/generate.h"
#include "engine/lora.h"
#include "engine/tokenizer.h"
#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#define DEFAULT_MAX_TOKENS 64
#define DEFAULT_SEED 1234

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel generate CKPT --model MODEL.json --prompt TEXT [options]\n\n"
          "Continues TEXT with the checkpoint's model (gpt2 or llama), one token at a time\n"
          "with a key/value cache, and writes the prompt and what follows it to stdout; to\n"
          "stderr, how many tokens it generated and how fast. The prompt and the new tokens\n"
          "together must fit the model's seq_len.\n\n"
          "options:\n"
          "  --model MODEL.json   the model spec of the checkpoint (required)\n"
          "  --prompt TEXT        the text to continue (required, not empty)\n"
          "  --tokenizer FILE     byte-level BPE tokenizer.json (default: one token per byte, as\n"
          "                       'data build' without --tokenizer)\n"
          "  --max-tokens N       tokens to generate (default %d, or fewer where the seq_len ends first)\n"
          "  --temperature T      0 = greedy (default); > 0 samples from softmax(logits / T)\n"
          "  --top-k K            sample among the K most likely tokens only (default 0 = all)\n"
          "  --top-p P            then among the most likely whose mass reaches P, in (0, 1] (default 1)\n"
          "  --seed S             seed of the sampling draws (default %d); the same seed, the same text\n"
          "  --no-kv-cache        recompute the whole prefix for every token (slower; for comparison)\n"
          "  --device DEV         cpu (default) or cuda:N\n"
          "  --threads N          CPU worker threads (default: all cores)\n"
          "  -h, --help           this help\n"
          "Exit codes: 0 success, 1 failure (bad checkpoint, tokenizer or prompt), 2 usage error.\n",
          DEFAULT_MAX_TOKENS, DEFAULT_SEED);
  aa_cli_set_help(f);
}

typedef struct {
  const char *ckpt, *model, *prompt, *tokenizer, *device;
  aa_cli_sets_t sets; /* --set overrides of the model spec */
  int max_tokens, max_tokens_given, kv_cache, threads;
  uint64_t seed;
  aa_sampler_t s;
} args_t;

/* A float option value in [lo, hi] (lo_open: lo excluded); -1 after a
 * usage error naming it. */
static int parse_float(const char *opt, const char *val, double lo, int lo_open, double hi, float *out) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (errno || end == val || *end || !isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) {
    fprintf(stderr, "autoaccel generate: %s needs a number in %s%g, %g], got '%s'\n", opt,
            lo_open ? "(" : "[", lo, hi, val);
    return -1;
  }
  *out = (float)v;
  return 0;
}

/* 0, or an exit code (-1 for --help, answered). */
static int parse(int argc, char **argv, args_t *a) {
  enum {
    O_MODEL = 1000,
    O_PROMPT,
    O_TOK,
    O_MAX,
    O_TEMP,
    O_TOPK,
    O_TOPP,
    O_SEED,
    O_NOKV,
    O_DEVICE,
    O_THREADS
  };
  static const struct option longopts[] = {{"model", required_argument, 0, O_MODEL},
                                           {"prompt", required_argument, 0, O_PROMPT},
                                           {"tokenizer", required_argument, 0, O_TOK},
                                           {"max-tokens", required_argument, 0, O_MAX},
                                           {"temperature", required_argument, 0, O_TEMP},
                                           {"top-k", required_argument, 0, O_TOPK},
                                           {"top-p", required_argument, 0, O_TOPP},
                                           {"seed", required_argument, 0, O_SEED},
                                           {"no-kv-cache", no_argument, 0, O_NOKV},
                                           {"device", required_argument, 0, O_DEVICE},
                                           {"threads", required_argument, 0, O_THREADS},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  *a = (args_t){.max_tokens = DEFAULT_MAX_TOKENS, .kv_cache = 1, .seed = DEFAULT_SEED, .s = {0.0f, 0, 1.0f}};
  if (aa_cli_take_sets(&argc, argv, longopts, "generate", &a->sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  int c;
  long long v;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_MODEL: a->model = optarg; break;
    case O_PROMPT: a->prompt = optarg; break;
    case O_TOK: a->tokenizer = optarg; break;
    case O_DEVICE: a->device = optarg; break;
    case O_NOKV: a->kv_cache = 0; break;
    case O_MAX:
      if ((v = aa_cli_parse_int("generate", "--max-tokens", optarg, 0, 1 << 20)) < 0) return AA_EXIT_USAGE;
      a->max_tokens = (int)v;
      a->max_tokens_given = 1;
      break;
    case O_THREADS:
      if ((v = aa_cli_parse_int("generate", "--threads", optarg, 1, 1024)) < 0) return AA_EXIT_USAGE;
      a->threads = (int)v;
      break;
    case O_TOPK:
      if ((v = aa_cli_parse_int("generate", "--top-k", optarg, 0, 1 << 24)) < 0) return AA_EXIT_USAGE;
      a->s.top_k = (int)v;
      break;
    case O_SEED:
      if ((v = aa_cli_parse_int("generate", "--seed", optarg, 0, (long long)(~0ULL >> 1))) < 0)
        return AA_EXIT_USAGE;
      a->seed = (uint64_t)v;
      break;
    case O_TEMP:
      if (parse_float("--temperature", optarg, 0.0, 0, 1e6, &a->s.temperature)) return AA_EXIT_USAGE;
      break;
    case O_TOPP:
      if (parse_float("--top-p", optarg, 0.0, 1, 1.0, &a->s.top_p)) return AA_EXIT_USAGE;
      break;
    case 'h': usage(stdout); return -1;
    default:
      fprintf(stderr, "autoaccel generate: unknown option or missing value: '%s'\n", argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  const char *missing = optind != argc - 1 ? "expected exactly one CKPT"
                        : !a->model        ? "--model MODEL.json is required"
                        : !a->prompt       ? "--prompt TEXT is required"
                        : !a->prompt[0]    ? "--prompt is empty: generation needs at least one token"
                                           : NULL;
  if (missing) {
    fprintf(stderr, "autoaccel generate: %s\n\n", missing);
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  a->ckpt = argv[optind];
  return 0;
}

/* The backend `dev` names ("cpu", "cuda", "cuda:N"), initialised; *cuda
 * is the device opened (-1 on the CPU). */
static int open_device(const char *dev, const aa_ops_t **ops, int *cuda) {
  *ops = aa_ops_cpu();
  *cuda = -1;
  if (!dev || !strcmp(dev, "cpu")) return 0;
  char *end = NULL;
  long n = -1;
  if (!strcmp(dev, "cuda"))
    n = 0;
  else if (!strncmp(dev, "cuda:", 5) && isdigit((unsigned char)dev[5]))
    n = strtol(dev + 5, &end, 10);
  if (n < 0 || n > 4096 || (end && *end))
    return aa_error(AA_EINVAL, "unknown device '%s' (expected cpu or cuda:N)", dev);
#ifdef AA_HAVE_CUDA
  int rc = aa_cuda_init((int)n);
  if (rc) return aa_error_wrap(rc, "device %s", dev);
  *ops = aa_ops_cuda();
  *cuda = (int)n;
  return 0;
#else
  return aa_error(AA_EUNSUPPORTED,
                  "device %s: this build has no CUDA backend (nvcc was not found at configure time)", dev);
#endif
}

/* The prompt's ids: the tokenizer's, or one per byte. *ids transferred. */
static int encode(const aa_tokenizer_t *tok, const char *text, int vocab, int32_t **ids, size_t *n) {
  size_t len = strlen(text);
  if (tok) {
    int rc = aa_tokenizer_encode(tok, (const unsigned char *)text, len, ids, n);
    if (rc) return rc;
  } else {
    if (!(*ids = malloc(sizeof **ids * len))) return aa_error(AA_ENOMEM, "out of memory");
    for (size_t i = 0; i < len; i++)
      (*ids)[i] = (unsigned char)text[i];
    *n = len;
  }
  for (size_t i = 0; i < *n; i++) {
    if ((*ids)[i] >= vocab) {
      int id = (*ids)[i];
      free(*ids);
      *ids = NULL;
      return aa_error(
          AA_EINVAL, "prompt token %zu is id %d, outside the model's vocab_size %d%s", i, id, vocab,
          tok ? " (is --tokenizer the model's?)" : " (a byte: without --tokenizer each byte is one token)");
    }
  }
  return 0;
}

typedef struct {
  const aa_tokenizer_t *tok;
} printer_t;

/* Writes one generated token's text to stdout as soon as it is chosen. */
static int print_token(int32_t id, void *data) {
  const printer_t *p = data;
  if (!p->tok) {
    if (id > 255)
      return aa_error(AA_EINVAL,
                      "generated id %d is not a byte: without --tokenizer the text is one byte per id", id);
    putchar(id);
  } else {
    unsigned char *bytes;
    size_t n;
    int rc = aa_tokenizer_decode(p->tok, &id, 1, &bytes, &n);
    if (rc) return rc;
    fwrite(bytes, 1, n, stdout);
    free(bytes);
  }
  fflush(stdout);
  return 0;
}

int aa_cmd_generate(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, &a);
  if (rc) return rc < 0 ? AA_EXIT_OK : rc;
  aa_model_spec_t spec;
  aa_tokenizer_t *tok = NULL;
  aa_gpt_t *m = NULL;
  int32_t *ids = NULL, *out = NULL;
  size_t n = 0;
  const aa_ops_t *ops;
  int cuda = -1;
  if ((rc = aa_cli_spec_load(&spec, a.model, &a.sets)) ||
      (rc = aa_arch_require_engine(&spec.arch, a.model)) ||
      (a.tokenizer && (rc = aa_tokenizer_load(&tok, a.tokenizer))) ||
      (rc = encode(tok, a.prompt, spec.arch.vocab_size, &ids, &n)))
    goto cleanup;
  /* The default shrinks to what the context holds; an explicit count
   * past it is the caller's mistake. */
  if (!a.max_tokens_given && (long long)n + a.max_tokens > spec.arch.seq_len)
    a.max_tokens = spec.arch.seq_len - (int)n;
  if ((long long)n >= spec.arch.seq_len) {
    rc = aa_error(AA_EINVAL, "the prompt is %zu tokens: the model's seq_len %d leaves no room for a new one",
                  n, spec.arch.seq_len);
    goto cleanup;
  }
  if ((long long)n + a.max_tokens > spec.arch.seq_len) {
    rc = aa_error(AA_EINVAL, "the prompt (%zu tokens) and --max-tokens %d exceed the model's seq_len %d", n,
                  a.max_tokens, spec.arch.seq_len);
    goto cleanup;
  }
  /* Parameters only (ZeRO stage 2's allocation: no gradients); the no-cache
   * path needs activations for the whole prefix, the cache one row. */
  aa_gpt_opts_t o = {.zero = 2, .amp = AA_F32};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  aa_ops_cpu()->set_threads(a.threads > 0 ? a.threads : cores > 0 ? (int)cores : 1);
  /* A LoRA spec: CKPT is its adapter checkpoint, folded into the base
   * (init_weights) before generating (engine/lora.h aa_lora_merge): W +
   * (alpha / r) B A computes what W x + (alpha / r) B A x does. */
  aa_arch_t arch = spec.arch;
  memset(&arch.lora, 0, sizeof arch.lora);
  if (spec.arch.lora.r && !spec.init_weights[0]) {
    rc = aa_error(AA_EINVAL, "%s fine-tunes LoRA adapters: init_weights must name the base they apply to",
                  a.model);
    goto cleanup;
  }
  if ((rc = open_device(a.device, &ops, &cuda))) goto cleanup;
  if (spec.arch.lora.r && ops != aa_ops_cpu()) {
    rc = aa_error(AA_EUNSUPPORTED, "generate with LoRA adapters runs on the cpu device so far");
    goto cleanup;
  }
  if ((rc = aa_gpt_create(&m, &arch, ops, 1, a.kv_cache ? 1 : spec.arch.seq_len, &o))) goto cleanup;
  if (spec.arch.lora.r) {
    float *ad = NULL;
    if (!(rc = aa_ckpt_load(spec.init_weights, m, NULL, NULL)) &&
        !(rc = aa_lora_load(a.ckpt, &spec.arch, &ad, NULL)))
      rc = aa_lora_merge(m, &spec.arch, ad);
    free(ad);
  } else {
    rc = aa_ckpt_load(a.ckpt, m, NULL, NULL);
  }
  if (rc) goto cleanup;
  if (!(out = malloc(sizeof *out * (a.max_tokens ? a.max_tokens : 1)))) {
    rc = aa_error(AA_ENOMEM, "out of memory");
    goto cleanup;
  }
  fputs(a.prompt, stdout);
  fflush(stdout);
  printer_t p = {tok};
  aa_gen_stats_t st;
  rc = aa_generate(m, ids, (int)n, a.max_tokens, &a.s, a.seed, a.kv_cache, out, print_token, &p, &st);
  putchar('\n');
  fflush(stdout); /* the text's end before the rate line on stderr */
  if (!rc)
    fprintf(stderr, "generated %d token%s in %.3f s: %.1f tokens/s (prompt %d token%s, KV cache %s)\n",
            st.new_tokens, st.new_tokens == 1 ? "" : "s", st.seconds,
            st.seconds > 0 ? st.new_tokens / st.seconds : 0.0, st.prompt_tokens,
            st.prompt_tokens == 1 ? "" : "s", a.kv_cache ? "on" : "off");
cleanup:
  free(out);
  free(ids);
  aa_gpt_free(m);
  aa_tokenizer_free(tok);
#ifdef AA_HAVE_CUDA
  if (cuda >= 0) aa_cuda_shutdown();
#endif
  return rc ? aa_cli_fail("generate") : AA_EXIT_OK;
}
