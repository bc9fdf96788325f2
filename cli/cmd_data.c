/* `autoaccel data`: make the synthetic corpus, build shards from text files
 * (byte-level, or with a byte-level BPE tokenizer.json), inspect shards and
 * decode them back to text. Formats: docs/data-format.md. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common/aa.h"
#include "engine/data.h"
#include "engine/tokenizer.h"

#define DEFAULT_SYNTH_BYTES 2000000
#define DEFAULT_VAL_FRACTION 0.1
#define DEFAULT_SEED 1234
#define MAX_TEXT_BYTES (1LL << 30)

static void usage_data(FILE *f) {
  fprintf(f, "usage: autoaccel data <subcommand> [options]\n\n"
             "Token shards for training (format: docs/data-format.md).\n\n"
             "subcommands:\n"
             "  synth   write the synthetic English-like corpus as train/val shards\n"
             "  build   tokenize text files into train/val shards (bytes, or a BPE tokenizer.json)\n"
             "  info    check a shard (autoaccel or llm.c format) and print its statistics\n"
             "  decode  print a shard's tokens back as text\n\n"
             "Run 'autoaccel data <subcommand> --help' for its options.\n"
             "Exit codes: 0 success, 1 failure (bad or unreadable file), 2 usage error.\n");
}

static void usage_synth(FILE *f) {
  fprintf(f,
          "usage: autoaccel data synth --out DIR [options]\n\n"
          "Generates English-like text from a small probabilistic grammar (fixed words,\n"
          "a/an and subject-verb agreement, clauses, numbers, line breaks), byte-tokenizes\n"
          "it (vocab 256) and writes DIR/train.bin and DIR/val.bin. The same seed always\n"
          "gives the same bytes.\n\n"
          "options:\n"
          "  --out DIR            output directory, created if missing (required)\n"
          "  --bytes N            corpus size in bytes, train + val (default %d)\n"
          "  --val-fraction F     share of the corpus, taken from its end, for val.bin (default %g)\n"
          "  --seed S             random seed (default %d)\n"
          "  -h, --help           this help\n",
          DEFAULT_SYNTH_BYTES, DEFAULT_VAL_FRACTION, DEFAULT_SEED);
}

static void usage_build(FILE *f) {
  fprintf(f,
          "usage: autoaccel data build --out DIR [options] FILE...\n\n"
          "Tokenizes the text files in order and writes DIR/train.bin and DIR/val.bin;\n"
          "the last F of the token stream becomes val.bin. Without --tokenizer each byte\n"
          "is one token (vocab 256). With --tokenizer each file is encoded on its own by\n"
          "that byte-level BPE (a Hugging Face tokenizer.json as GPT-2's or Llama 3's) and\n"
          "the shards carry its vocab size.\n\n"
          "options:\n"
          "  --out DIR            output directory, created if missing (required)\n"
          "  --tokenizer FILE     byte-level BPE tokenizer.json (default: one token per byte)\n"
          "  --val-fraction F     share of the stream, taken from its end, for val.bin (default %g)\n"
          "  -h, --help           this help\n",
          DEFAULT_VAL_FRACTION);
}

static void usage_decode(FILE *f) {
  fprintf(f, "usage: autoaccel data decode [options] SHARD\n\n"
             "Reads the shard with every check 'info' applies and writes its tokens to stdout\n"
             "as the bytes they stand for, with nothing added. The shard's vocab_size must be\n"
             "the tokenizer's (an llm.c shard, which has none, is taken as it is).\n\n"
             "options:\n"
             "  --tokenizer FILE     byte-level BPE tokenizer.json (default: one token per byte)\n"
             "  --count N            only the first N tokens (default: all)\n"
             "  -h, --help           this help\n");
}

static void usage_info(FILE *f) {
  fprintf(f, "usage: autoaccel data info [options] FILE...\n\n"
             "Reads each shard with every check the trainer applies (header, size, checksum,\n"
             "id range) and prints its format, vocab, token count, id range and unigram entropy.\n\n"
             "options:\n"
             "  --max-vocab N        also require every id < N (a model's vocab_size)\n"
             "  -h, --help           this help\n");
}

/* Prints "autoaccel CMD: <message>" and the usage to stderr; returns the
 * usage exit code. */
__attribute__((format(printf, 3, 4))) static int usage_error(const char *cmd, void (*usage)(FILE *),
                                                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "autoaccel %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputs("\n\n", stderr);
  va_end(ap);
  usage(stderr);
  return AA_EXIT_USAGE;
}

/* Parses a fraction in [0, 1); prints a usage error and returns -1 if the
 * value is not one. */
static double parse_fraction(const char *cmd, const char *opt, const char *val) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (errno || end == val || *end || !(v >= 0.0 && v < 1.0)) {
    fprintf(stderr, "autoaccel %s: %s needs a number in [0, 1), got '%s'\n", cmd, opt, val);
    return -1;
  }
  return v;
}

static int join(char *out, size_t cap, const char *dir, const char *name) {
  size_t n = strlen(dir);
  const char *sep = n > 0 && dir[n - 1] == '/' ? "" : "/";
  if (snprintf(out, cap, "%s%s%s", dir, sep, name) >= (int)cap)
    return aa_error(AA_EINVAL, "%s: path too long", dir);
  return 0;
}

/* Reads back the shards just written (which re-checks them) and prints
 * the one-line summary. */
static int print_written(const char *train, const char *val, int vocab) {
  aa_shard_t t, v;
  int rc = aa_shard_read(&t, train, vocab);
  if (rc) return rc;
  rc = aa_shard_read(&v, val, vocab);
  if (rc) {
    aa_shard_free(&t);
    return rc;
  }
  double h = aa_shard_unigram_entropy(&t);
  printf("wrote %s (%zu tokens) and %s (%zu tokens): vocab %d, unigram entropy %.3f nats (%.3f bits)\n",
         train, t.n_tokens, val, v.n_tokens, vocab, h, h / log(2.0));
  aa_shard_free(&t);
  aa_shard_free(&v);
  return 0;
}

enum { OPT_OUT = 1000, OPT_BYTES, OPT_VAL, OPT_SEED, OPT_MAX_VOCAB, OPT_TOKENIZER, OPT_COUNT };

/* Options of all the subcommands; each offers getopt only its own, so
 * the fields it does not take keep their defaults. */
typedef struct {
  const char *out, *tokenizer;
  long long bytes, seed, max_vocab, count;
  double val_fraction;
} data_opts_t;

/* Returns an exit code to stop with (help shown, usage error), or -1 to
 * go on with the positional arguments from optind. */
static int parse_opts(data_opts_t *o, int argc, char **argv, const struct option *opts, const char *cmd,
                      void (*usage)(FILE *)) {
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case OPT_OUT: o->out = optarg; break;
    case OPT_TOKENIZER: o->tokenizer = optarg; break;
    case OPT_COUNT:
      if ((o->count = aa_cli_parse_int(cmd, "--count", optarg, 0, LLONG_MAX)) < 0) return AA_EXIT_USAGE;
      break;
    case OPT_BYTES:
      if ((o->bytes = aa_cli_parse_int(cmd, "--bytes", optarg, 1, MAX_TEXT_BYTES)) < 0) return AA_EXIT_USAGE;
      break;
    case OPT_SEED:
      if ((o->seed = aa_cli_parse_int(cmd, "--seed", optarg, 0, LLONG_MAX)) < 0) return AA_EXIT_USAGE;
      break;
    case OPT_MAX_VOCAB:
      if ((o->max_vocab = aa_cli_parse_int(cmd, "--max-vocab", optarg, 1, INT_MAX)) < 0) return AA_EXIT_USAGE;
      break;
    case OPT_VAL:
      if ((o->val_fraction = parse_fraction(cmd, "--val-fraction", optarg)) < 0) return AA_EXIT_USAGE;
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return usage_error(cmd, usage, "unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  return -1;
}

static int cmd_synth(int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, 0, OPT_OUT},
                                       {"bytes", required_argument, 0, OPT_BYTES},
                                       {"val-fraction", required_argument, 0, OPT_VAL},
                                       {"seed", required_argument, 0, OPT_SEED},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  data_opts_t o = {.bytes = DEFAULT_SYNTH_BYTES, .seed = DEFAULT_SEED, .val_fraction = DEFAULT_VAL_FRACTION};
  int rc = parse_opts(&o, argc, argv, opts, "data synth", usage_synth);
  if (rc >= 0) return rc;
  if (optind != argc) return usage_error("data synth", usage_synth, "unexpected argument '%s'", argv[optind]);
  if (!o.out) return usage_error("data synth", usage_synth, "--out DIR is required");
  char train[PATH_MAX], val[PATH_MAX];
  if (join(train, sizeof train, o.out, "train.bin") || join(val, sizeof val, o.out, "val.bin") ||
      aa_mkdirs(o.out) || aa_data_synth(train, val, (size_t)o.bytes, o.val_fraction, (uint64_t)o.seed) ||
      print_written(train, val, AA_BYTE_VOCAB))
    return aa_cli_fail("data synth");
  return AA_EXIT_OK;
}

static int cmd_build(int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, 0, OPT_OUT},
                                       {"val-fraction", required_argument, 0, OPT_VAL},
                                       {"tokenizer", required_argument, 0, OPT_TOKENIZER},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  data_opts_t o = {.val_fraction = DEFAULT_VAL_FRACTION};
  int rc = parse_opts(&o, argc, argv, opts, "data build", usage_build);
  if (rc >= 0) return rc;
  if (!o.out) return usage_error("data build", usage_build, "--out DIR is required");
  if (optind >= argc) return usage_error("data build", usage_build, "expected at least one text FILE");
  char train[PATH_MAX], val[PATH_MAX];
  const char *const *inputs = (const char *const *)(argv + optind);
  if (join(train, sizeof train, o.out, "train.bin") || join(val, sizeof val, o.out, "val.bin"))
    return aa_cli_fail("data build");
  if (!o.tokenizer) {
    if (aa_mkdirs(o.out) || aa_data_build_text(inputs, argc - optind, train, val, o.val_fraction) ||
        print_written(train, val, AA_BYTE_VOCAB))
      return aa_cli_fail("data build");
    return AA_EXIT_OK;
  }
  aa_tokenizer_t *tok;
  if (aa_tokenizer_load(&tok, o.tokenizer)) return aa_cli_fail("data build");
  int failed = aa_mkdirs(o.out) ||
               aa_tokenizer_build_shards(tok, inputs, argc - optind, train, val, o.val_fraction) ||
               print_written(train, val, aa_tokenizer_vocab_size(tok));
  aa_tokenizer_free(tok);
  return failed ? aa_cli_fail("data build") : AA_EXIT_OK;
}

/* Writes the first `count` tokens of the shard at path to stdout as bytes:
 * through the tokenizer when there is one, else each id is a byte. */
static int decode_one(const char *path, const aa_tokenizer_t *tok, long long count) {
  int vocab = tok ? aa_tokenizer_vocab_size(tok) : AA_BYTE_VOCAB;
  aa_shard_t s;
  if (aa_shard_read(&s, path, vocab)) return -1;
  int rc = 0;
  unsigned char *text = NULL;
  size_t n = count >= 0 && (unsigned long long)count < s.n_tokens ? (size_t)count : s.n_tokens, len = n;
  if (s.vocab_size != 0 && s.vocab_size != vocab) {
    rc = aa_error(AA_EINVAL, "%s: vocab_size is %d, the %s's is %d (built with another tokenizer?)", path,
                  s.vocab_size, tok ? "tokenizer" : "byte-level tokenizer", vocab);
  } else if (tok) {
    rc = aa_tokenizer_decode(tok, s.tokens, n, &text, &len);
  } else if (!(text = malloc(n + 1))) {
    rc = aa_error(AA_ENOMEM, "out of memory for %zu bytes", n);
  } else {
    for (size_t i = 0; i < n; i++)
      text[i] = (unsigned char)s.tokens[i];
  }
  if (!rc && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0))
    rc = aa_error(AA_EIO, "writing to stdout: %s", strerror(errno));
  free(text);
  aa_shard_free(&s);
  return rc;
}

static int cmd_decode(int argc, char **argv) {
  static const struct option opts[] = {{"tokenizer", required_argument, 0, OPT_TOKENIZER},
                                       {"count", required_argument, 0, OPT_COUNT},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  data_opts_t o = {.count = -1};
  int rc = parse_opts(&o, argc, argv, opts, "data decode", usage_decode);
  if (rc >= 0) return rc;
  if (optind >= argc) return usage_error("data decode", usage_decode, "expected a shard FILE");
  if (optind + 1 < argc)
    return usage_error("data decode", usage_decode, "unexpected argument '%s'", argv[optind + 1]);
  aa_tokenizer_t *tok = NULL;
  if (o.tokenizer && aa_tokenizer_load(&tok, o.tokenizer)) return aa_cli_fail("data decode");
  int failed = decode_one(argv[optind], tok, o.count) != 0;
  aa_tokenizer_free(tok);
  return failed ? aa_cli_fail("data decode") : AA_EXIT_OK;
}

/* Describes the header of a shard that aa_shard_read has already accepted,
 * so only the fields it prints are looked at here. */
static void describe_format(const char *path, char *out, size_t cap) {
  unsigned char h[40] = {0};
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(h, 1, sizeof h, f) : 0;
  if (f) fclose(f);
  if (n >= 40 && memcmp(h, AA_SHARD_MAGIC, 8) == 0) {
    unsigned long long sum = 0;
    for (int i = 7; i >= 0; i--)
      sum = sum << 8 | h[32 + i];
    snprintf(out, cap, "autoaccel shard v%u, uint%d ids, checksum %016llx ok", (unsigned)h[8], h[12] * 8,
             sum);
  } else {
    snprintf(out, cap, "llm.c shard v1, uint16 ids, no checksum");
  }
}

static int info_one(const char *path, int max_vocab) {
  aa_shard_t s;
  if (aa_shard_read(&s, path, max_vocab)) return -1;
  char format[128];
  describe_format(path, format, sizeof format);
  int32_t lo = 0, hi = 0;
  for (size_t i = 0; i < s.n_tokens; i++) {
    if (i == 0 || s.tokens[i] < lo) lo = s.tokens[i];
    if (i == 0 || s.tokens[i] > hi) hi = s.tokens[i];
  }
  double h = aa_shard_unigram_entropy(&s);
  printf("%s\n", path);
  printf("  format:          %s\n", format);
  if (s.vocab_size > 0)
    printf("  vocab_size:      %d\n", s.vocab_size);
  else
    printf("  vocab_size:      unknown (not in the llm.c header)\n");
  printf("  tokens:          %zu\n", s.n_tokens);
  if (s.n_tokens > 0)
    printf("  ids:             min %d, max %d\n", lo, hi);
  else
    printf("  ids:             none\n");
  printf("  unigram entropy: %.3f nats (%.3f bits)\n", h, h / log(2.0));
  aa_shard_free(&s);
  return 0;
}

static int cmd_info(int argc, char **argv) {
  static const struct option opts[] = {
      {"max-vocab", required_argument, 0, OPT_MAX_VOCAB}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  data_opts_t o = {0};
  int rc = parse_opts(&o, argc, argv, opts, "data info", usage_info);
  if (rc >= 0) return rc;
  if (optind >= argc) return usage_error("data info", usage_info, "expected a shard FILE");
  for (int i = optind; i < argc; i++)
    if (info_one(argv[i], (int)o.max_vocab)) return aa_cli_fail("data info");
  return AA_EXIT_OK;
}

int aa_cmd_data(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "autoaccel data: expected a subcommand\n\n");
    usage_data(stderr);
    return AA_EXIT_USAGE;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
    usage_data(stdout);
    return AA_EXIT_OK;
  }
  if (!strcmp(sub, "synth")) return cmd_synth(argc - 1, argv + 1);
  if (!strcmp(sub, "build")) return cmd_build(argc - 1, argv + 1);
  if (!strcmp(sub, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(sub, "decode")) return cmd_decode(argc - 1, argv + 1);
  return usage_error("data", usage_data, "unknown subcommand '%s'", sub);
}
