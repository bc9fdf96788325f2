/* libFuzzer target for the readers of the files a user hands autoaccel
 * (tests/cli/test_fuzz.sh builds and runs it with ASan + UBSan).
 *
 * Input: byte 0 picks the reader, the rest is the file.
 *   0: a model spec (aa_spec_parse). What parses must write back as JSON
 *      (aa_spec_to_json) that parses again to the same text.
 *   1: a strategy file (aa_strategy_parse), object or ATorch list form.
 *      What parses must pass aa_strategy_check, have a key, and write back
 *      (aa_strategy_to_json) to text that parses again to the same text.
 *   2: a safetensors file (aa_st_open on a temporary copy). What opens must
 *      have its tensors inside the data section, and every tensor of a
 *      dtype that converts, up to 1 MiB, must read (aa_st_read_f32).
 *   3: a token shard (aa_shard_read on a temporary copy, ids below 65,536).
 *      What reads must hold only ids in range.
 *   4: a calibration file (aa_calib_file_parse). What parses must write
 *      back (aa_calib_file_to_json) to text that parses again to the same
 *      text.
 *   5: a tokenizer.json (aa_tokenizer_parse). What parses must encode a
 *      sample text and decode it back to the same bytes.
 *   6, 7: text, any bytes, encoded with the GPT-2 (6) or Llama 3 (7) test
 *      tokenizer of AA_FUZZ_TOKENIZERS (tests/reference/tokenizer; skipped
 *      when unset): byte-level BPE must decode every encoding back to the
 *      same bytes.
 *   8: a device profile (aa_profile_parse), as `plan --pool FILE:N` reads
 *      one. What parses must write back (aa_profile_to_json) to JSON that
 *      parses again and writes the same text.
 * Any other failure must be a clean error: a negative code and a message.
 * The seeds (the bundled specs, strategy files, profiles and a
 * calibration, small safetensors files and shards, the test tokenizers,
 * texts) are written by tests/cli/test_fuzz.sh. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/aa.h"
#include "common/spec.h"
#include "engine/data.h"
#include "engine/safetensors.h"
#include "engine/tokenizer.h"
#include "strategies/calib_file.h"
#include "strategies/profile.h"
#include "strategies/profile_builtin.h"
#include "strategies/strategy.h"

#define N_READERS 9

/* No built-in profiles: the build embeds them (scripts/embed_profiles.cmake);
 * the fuzzer reads profile text only. */
const aa__profile_blob_t aa__profile_blobs[1] = {{"", "", 0}};
const size_t aa__profile_nblobs = 0;

static void need(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "%s (last error: %s)\n", what, aa_last_error());
    abort();
  }
}

/* A failure must come with a message; with AA_FUZZ_SEEDS_MUST_PARSE set
 * (the script's first pass over its seeds) it must not happen at all. */
static void clean_error(int rc, const char *reader) {
  if (rc >= 0) return;
  if (getenv("AA_FUZZ_SEEDS_MUST_PARSE")) {
    fprintf(stderr, "a seed fails %s: %s\n", reader, aa_last_error());
    abort();
  }
  const char *msg = aa_last_error();
  if (!msg || !*msg) {
    fprintf(stderr, "%s failed with %d and no message\n", reader, rc);
    abort();
  }
}

/* What was read, written, read again and written again must be the same
 * text both times; frees both. */
static void same_writing(const char *what, char *first, char *second) {
  if (strcmp(first, second)) {
    fprintf(stderr, "%s: the second writing differs:\n%s\n---\n%s\n", what, first, second);
    abort();
  }
  free(first);
  free(second);
}

static void fuzz_spec(const char *json) {
  aa_model_spec_t s, t;
  char *j1 = NULL, *j2 = NULL;
  int rc = aa_spec_parse(&s, json, "/", "fuzz.json");
  clean_error(rc, "aa_spec_parse");
  if (rc) return;
  need(aa_spec_to_json(&s, &j1) == 0, "a parsed spec does not write back");
  need(aa_spec_parse(&t, j1, "/", "written.json") == 0, "a written spec does not parse");
  need(aa_spec_to_json(&t, &j2) == 0, "a re-parsed spec does not write back");
  same_writing("spec", j1, j2);
}

static void fuzz_strategy(const char *json) {
  aa_strategy_t s, t;
  char key[AA_STRATEGY_KEY_MAX], *j1 = NULL, *j2 = NULL;
  int rc = aa_strategy_parse(&s, json, "fuzz.json");
  clean_error(rc, "aa_strategy_parse");
  if (rc) return;
  need(aa_strategy_check(&s) == 0, "a parsed strategy fails aa_strategy_check");
  aa_strategy_key(&s, key);
  need(key[0] != '\0', "a parsed strategy has no key");
  need(aa_strategy_to_json(&s, &j1) == 0, "a parsed strategy does not write back");
  need(aa_strategy_parse(&t, j1, "written.json") == 0, "a written strategy does not parse");
  need(aa_strategy_to_json(&t, &j2) == 0, "a re-parsed strategy does not write back");
  same_writing("strategy", j1, j2);
}

static void fuzz_calib(const char *text, size_t n) {
  aa_calib_file_t f, g;
  int rc = aa_calib_file_parse(&f, text, n, "fuzz.json");
  clean_error(rc, "aa_calib_file_parse");
  if (rc) return;
  char *j1 = aa_calib_file_to_json(&f), *j2;
  need(j1 != NULL, "a parsed calibration file does not write back");
  need(aa_calib_file_parse(&g, j1, strlen(j1), "written.json") == 0,
       "a written calibration file does not parse");
  j2 = aa_calib_file_to_json(&g);
  need(j2 != NULL, "a re-parsed calibration file does not write back");
  same_writing("calibration", j1, j2);
  aa_calib_file_clear(&f);
  aa_calib_file_clear(&g);
}

/* The profile's JSON text (aa_profile_to_json, keys sorted). */
static char *profile_text(const aa_device_profile_t *p) {
  json_t *j = NULL;
  need(aa_profile_to_json(p, &j) == 0, "a parsed profile does not write back");
  char *t = json_dumps(j, JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  need(t != NULL, "no memory");
  json_decref(j);
  return t;
}

static void fuzz_profile(const char *text, size_t n) {
  aa_device_profile_t p, q;
  int rc = aa_profile_parse(&p, text, n, "fuzz");
  clean_error(rc, "aa_profile_parse");
  if (rc) return;
  char *t1 = profile_text(&p), *t2;
  need(aa_profile_parse(&q, t1, strlen(t1), "written") == 0, "a written profile does not parse");
  t2 = profile_text(&q);
  same_writing("profile", t1, t2);
}

/* decode(encode(text)) must give text back. */
static void round_trip(const aa_tokenizer_t *t, const unsigned char *text, size_t n) {
  int32_t *ids = NULL;
  unsigned char *back = NULL;
  size_t n_ids = 0, n_back = 0;
  need(aa_tokenizer_encode(t, text, n, &ids, &n_ids) == 0, "a text does not encode");
  for (size_t i = 0; i < n_ids; i++)
    need(ids[i] >= 0 && ids[i] < aa_tokenizer_vocab_size(t), "an encoding holds an id out of the vocab");
  need(aa_tokenizer_decode(t, ids, n_ids, &back, &n_back) == 0, "an encoding does not decode");
  if (n_back != n || memcmp(back, text, n)) {
    fprintf(stderr, "tokenizer: %zu bytes encode to %zu ids that decode to %zu other bytes\n", n, n_ids,
            n_back);
    abort();
  }
  free(ids);
  free(back);
}

static void fuzz_tokenizer(const char *json, size_t n) {
  static const char sample[] = "Hello, world! It's 2026:\n\tcaf\xc3\xa9 \xe2\x82\xac"
                               "12 \xff\xfe  done.";
  aa_tokenizer_t *t = NULL;
  int rc = aa_tokenizer_parse(&t, json, n, "tokenizer.json");
  clean_error(rc, "aa_tokenizer_parse");
  if (rc) return;
  round_trip(t, (const unsigned char *)sample, sizeof sample - 1);
  aa_tokenizer_free(t);
}

/* Test tokenizer i (0 GPT-2's pattern, 1 Llama 3's), loaded once; NULL
 * when AA_FUZZ_TOKENIZERS is not set. */
static const aa_tokenizer_t *test_tokenizer(int i) {
  static aa_tokenizer_t *t[2];
  static const char *const files[2] = {"tokenizer.json", "tokenizer_llama3.json"};
  const char *dir = getenv("AA_FUZZ_TOKENIZERS");
  if (!dir) return NULL;
  if (!t[i]) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    need(aa_tokenizer_load(&t[i], path) == 0, "cannot load a test tokenizer");
  }
  return t[i];
}

/* The input as a file, at a path of this process's own. */
static const char *as_file(const uint8_t *d, size_t n) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/aa-fuzz-files-%d", (int)getpid());
  FILE *f = fopen(path, "wb");
  need(f && fwrite(d, 1, n, f) == n && fclose(f) == 0, "cannot write the temporary file");
  return path;
}

static void fuzz_shard(const uint8_t *d, size_t n) {
  const char *path = as_file(d, n);
  aa_shard_t s;
  int rc = aa_shard_read(&s, path, 65536);
  clean_error(rc, "aa_shard_read");
  if (rc == 0) {
    for (size_t i = 0; i < s.n_tokens; i++)
      need(s.tokens[i] >= 0 && s.tokens[i] < 65536, "a shard read an id out of range");
    aa_shard_free(&s);
  }
  unlink(path);
}

static void fuzz_safetensors(const uint8_t *d, size_t n) {
  const char *path = as_file(d, n);
  aa_st_file_t *st = NULL;
  int rc = aa_st_open(&st, path);
  clean_error(rc, "aa_st_open");
  if (rc == 0) {
    for (int i = 0; i < st->n; i++) {
      const aa_st_tensor_t *t = &st->tensors[i];
      need(t->begin <= t->end && st->data_start + t->end <= n, "a tensor lies outside the file");
      if ((t->dtype != AA_ST_F32 && t->dtype != AA_ST_BF16 && t->dtype != AA_ST_F16) || t->numel > (1u << 18))
        continue;
      float *buf = malloc((t->numel ? t->numel : 1) * sizeof(float));
      need(buf != NULL, "no memory");
      need(aa_st_read_f32(st, t, buf) == 0, "a validated tensor does not read");
      free(buf);
    }
    aa_st_close(st);
  }
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int which = data[0] % N_READERS;
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  if (which == 2) {
    fuzz_safetensors(d, n);
    return 0;
  }
  if (which == 3) {
    fuzz_shard(d, n);
    return 0;
  }
  if (which == 6 || which == 7) {
    const aa_tokenizer_t *t = test_tokenizer(which - 6);
    if (t) round_trip(t, d, n);
    return 0;
  }
  char *text = malloc(n + 1);
  need(text != NULL, "no memory");
  memcpy(text, d, n);
  text[n] = '\0';
  if (which == 0)
    fuzz_spec(text);
  else if (which == 1)
    fuzz_strategy(text);
  else if (which == 4)
    fuzz_calib(text, n);
  else if (which == 5)
    fuzz_tokenizer(text, n);
  else
    fuzz_profile(text, n);
  free(text);
  return 0;
}
