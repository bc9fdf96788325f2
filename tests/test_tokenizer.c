/* Byte-level BPE (engine/tokenizer.h) against the fixtures of
 * tests/reference/make_tokenizer.py: a tiny tokenizer trained there, in
 * Hugging Face's tokenizer.json layout, and the ids an independent Python
 * encoder gives for English, punctuation, numbers, whitespace runs,
 * contractions, non-ASCII text, emoji and special tokens. Also: decoding
 * inverts encoding for any bytes, malformed files are named errors, and
 * the shard builder writes what the encoder gives. */
#include "aa_test.h"
#include "common/aa.h"
#include "engine/data.h"
#include "engine/tokenizer.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];
static char fixture_dir[512];

static const char *tmp_path(int slot, const char *name) {
  static char buf[4][256];
  if (snprintf(buf[slot], sizeof buf[slot], "%s/%s", tmpdir, name) >= (int)sizeof buf[slot]) abort();
  return buf[slot];
}

static const char *fixture(const char *name) {
  static char buf[640];
  if (snprintf(buf, sizeof buf, "%s/%s", fixture_dir, name) >= (int)sizeof buf) abort();
  return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

/* Reads a fixture whole (NUL-terminated; the caller frees) or exits:
 * without its fixtures the test cannot say anything. */
static char *slurp(const char *path, size_t *len) {
  char *buf;
  if (aa_read_file(path, (size_t)64 << 20, "a fixture", &buf, len)) {
    fprintf(stderr, "%s (set AA_SOURCE_DIR to the source tree)\n", aa_last_error());
    exit(2);
  }
  return buf;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Checks every line of `expected` ("<hex bytes>\t<ids>") against the
 * tokenizer in `file`: the same ids, and decoding them gives the bytes. */
static void check_reference(const char *file, const char *expected) {
  aa_tokenizer_t *t = NULL;
  int rc = aa_tokenizer_load(&t, fixture(file));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  size_t len;
  char *text = slurp(fixture(expected), &len);
  int lines = 0;
  for (char *line = text; *line; lines++) {
    char *nl = strchr(line, '\n'), *tab = strchr(line, '\t');
    CHECK(nl && tab && tab < nl);
    if (!nl || !tab || tab > nl) break;
    *nl = '\0';
    size_t n_bytes = (size_t)(tab - line) / 2;
    unsigned char *want_bytes = malloc(n_bytes + 1);
    for (size_t i = 0; i < n_bytes; i++)
      want_bytes[i] = (unsigned char)(hexval(line[2 * i]) << 4 | hexval(line[2 * i + 1]));
    int32_t want[512];
    size_t n_want = 0;
    for (char *p = tab + 1; *p && n_want < 512;) {
      char *end;
      want[n_want++] = (int32_t)strtol(p, &end, 10);
      p = *end ? end + 1 : end;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = aa_tokenizer_encode(t, want_bytes, n_bytes, &ids, &n);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    int same = rc == 0 && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    CHECK_MSG(same, "%s, line %d (\"%.*s\"): %zu ids, reference has %zu", file, lines + 1, (int)n_bytes,
              (const char *)want_bytes, n, n_want);
    if (!same && rc == 0)
      for (size_t i = 0; i < n || i < n_want; i++)
        fprintf(stderr, "    [%zu] got %d want %d\n", i, i < n ? ids[i] : -1, i < n_want ? want[i] : -1);
    unsigned char *back = NULL;
    size_t n_back = 0;
    if (rc == 0) {
      CHECK(aa_tokenizer_decode(t, ids, n, &back, &n_back) == 0);
      CHECK(n_back == n_bytes && memcmp(back, want_bytes, n_bytes) == 0);
    }
    free(back);
    free(ids);
    free(want_bytes);
    line = nl + 1;
  }
  CHECK(lines >= 20);
  free(text);
  aa_tokenizer_free(t);
}

AA_TEST(encode_matches_python_reference_with_string_merges) {
  check_reference("tokenizer.json", "expected.txt");
}

AA_TEST(encode_matches_python_reference_with_pair_merges) {
  check_reference("tokenizer_pairs.json", "expected.txt");
}

AA_TEST(encode_matches_python_reference_with_llama3_split_and_ignore_merges) {
  check_reference("tokenizer_llama3.json", "expected_llama3.txt");
}

AA_TEST(vocab_size_counts_model_vocab_and_added_tokens) {
  aa_tokenizer_t *t = NULL;
  CHECK(aa_tokenizer_load(&t, fixture("tokenizer.json")) == 0);
  if (!t) return;
  /* 256 bytes + 147 merges + <|endoftext|> in the vocab, <|sep|> added only. */
  CHECK_MSG(aa_tokenizer_vocab_size(t) == 405, "vocab_size %d", aa_tokenizer_vocab_size(t));
  aa_tokenizer_free(t);
}

/* decode(encode(s)) == s for bytes the reference cannot express: invalid
 * UTF-8, every byte value, a long run that makes one big piece. */
static void check_roundtrip(const aa_tokenizer_t *t, const unsigned char *s, size_t n) {
  int32_t *ids = NULL;
  size_t n_ids = 0, n_back = 0;
  unsigned char *back = NULL;
  CHECK(aa_tokenizer_encode(t, s, n, &ids, &n_ids) == 0);
  CHECK(n_ids <= n);
  CHECK(aa_tokenizer_decode(t, ids, n_ids, &back, &n_back) == 0);
  CHECK(n_back == n && (n == 0 || memcmp(back, s, n) == 0));
  free(ids);
  free(back);
}

static void check_roundtrips(const char *file) {
  aa_tokenizer_t *t = NULL;
  CHECK(aa_tokenizer_load(&t, fixture(file)) == 0);
  if (!t) return;
  unsigned char all[256];
  for (int i = 0; i < 256; i++)
    all[i] = (unsigned char)i;
  check_roundtrip(t, all, sizeof all);
  static const char *const odd[] = {"\xff\xfe",
                                    "caf\xc3",
                                    "\xc0\xaf overlong",
                                    "\xed\xa0\x80 surrogate",
                                    "\xf4\x90\x80\x80 too big",
                                    "'",
                                    " ",
                                    "<|endoftext",
                                    "\x80\x80'll",
                                    "\r\n\r\n x",
                                    "'LL\xe2\x80\x8b"};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
    check_roundtrip(t, (const unsigned char *)odd[i], strlen(odd[i]));
  aa_rng_t r;
  aa_rng_seed(&r, 7);
  unsigned char rnd[4096];
  for (size_t i = 0; i < sizeof rnd; i++)
    rnd[i] = (unsigned char)aa_rng_u64(&r);
  check_roundtrip(t, rnd, sizeof rnd);
  size_t big = 200000;
  unsigned char *run = malloc(big);
  for (size_t i = 0; i < big; i++)
    run[i] = (unsigned char)"the"[i % 3];
  check_roundtrip(t, run, big);
  free(run);
  aa_tokenizer_free(t);
}

AA_TEST(decode_inverts_encode_for_any_bytes) {
  check_roundtrips("tokenizer.json");
  check_roundtrips("tokenizer_llama3.json");
}

AA_TEST(decode_rejects_ids_without_a_token) {
  aa_tokenizer_t *t = NULL;
  CHECK(aa_tokenizer_load(&t, fixture("tokenizer.json")) == 0);
  if (!t) return;
  int32_t ids[] = {5, 405};
  unsigned char *out = (unsigned char *)"untouched";
  size_t n = 77;
  CHECK(aa_tokenizer_decode(t, ids, 2, &out, &n) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "token id 405 at index 1") != NULL);
  ids[1] = -1;
  CHECK(aa_tokenizer_decode(t, ids, 2, &out, &n) == AA_EINVAL);
  CHECK(n == 77 && !strcmp((const char *)out, "untouched"));
  aa_tokenizer_free(t);
}

/* Parses the good fixture with the first occurrence of `from` replaced by
 * `to`, expecting failure `code` with `needle` in the message. */
static void expect_bad_in(const char *file, const char *from, const char *to, int code, const char *needle) {
  size_t len;
  char *good = slurp(fixture(file), &len);
  char *at = strstr(good, from);
  CHECK_MSG(at != NULL, "fixture lacks '%s'", from);
  if (!at) {
    free(good);
    return;
  }
  size_t nf = strlen(from), nt = strlen(to), pre = (size_t)(at - good);
  char *bad = malloc(len - nf + nt + 1);
  memcpy(bad, good, pre);
  memcpy(bad + pre, to, nt);
  memcpy(bad + pre + nt, at + nf, len - pre - nf + 1);
  aa_tokenizer_t *t = (aa_tokenizer_t *)&len;
  int rc = aa_tokenizer_parse(&t, bad, len - nf + nt, "tok.json");
  CHECK_MSG(rc == code, "'%s' -> '%s': rc %d (%s), want %d; message: %s", from, to, rc, aa_strerror(rc), code,
            aa_last_error());
  CHECK_MSG(strstr(aa_last_error(), needle) != NULL, "message '%s' lacks '%s'", aa_last_error(), needle);
  CHECK_MSG(strncmp(aa_last_error(), "tok.json", 8) == 0, "message '%s' does not name the file",
            aa_last_error());
  CHECK(t == (aa_tokenizer_t *)&len);
  if (rc == 0) aa_tokenizer_free(t);
  free(bad);
  free(good);
}

static void expect_bad(const char *from, const char *to, int code, const char *needle) {
  expect_bad_in("tokenizer.json", from, to, code, needle);
}

AA_TEST(malformed_files_are_errors_naming_the_field) {
  expect_bad("{", "[", AA_EPARSE, "tok.json:");
  expect_bad("\"model\": {", "\"modal\": {", AA_EINVAL, "tok.json: model: required field is missing");
  expect_bad("\"type\": \"BPE\"", "\"type\": \"WordPiece\"", AA_EUNSUPPORTED,
             "model.type: must be \"BPE\" (got \"WordPiece\"");
  expect_bad("\"type\": \"BPE\"", "\"type\": 3", AA_EINVAL, "model.type: must be a string (got integer)");
  expect_bad("\"merges\": [", "\"merges\": [\"qq zz\", ", AA_EINVAL,
             "model.merges[0]: \"qq\" is not a token of model.vocab");
  expect_bad("\"merges\": [", "\"merges\": [\"Ġ zzq\", ", AA_EINVAL,
             "model.merges[0]: \"zzq\" is not a token of model.vocab");
  expect_bad("\"merges\": [", "\"merges\": [\"x y\", ", AA_EINVAL, "model.merges[0]: the merged token (ids");
  expect_bad("\"merges\": [", "\"merges\": [\"xy\", ", AA_EINVAL, "model.merges[0]: must be two tokens");
  expect_bad("\"merges\": [", "\"merges\": [[\"x\", 2], ", AA_EINVAL, "model.merges[0]: must be a string");
  expect_bad("\"merges\": [\n      \"Ġ t\",", "\"merges\": [\"Ġ t\", \"Ġ t\",", AA_EINVAL,
             "model.merges[1]: repeats model.merges[0]");
  expect_bad("\"merges\": [", "\"mergez\": [", AA_EINVAL, "model.merges: required field is missing");
  expect_bad("\"!\": 0", "\"!\": -1", AA_EINVAL, "model.vocab.\"!\": must be between 0 and");
  expect_bad("\"!\": 0", "\"!\": \"0\"", AA_EINVAL, "model.vocab.\"!\": must be an integer (got string)");
  expect_bad("\"!\": 0,", "\"!!\": 0,", AA_EINVAL, "no token for byte 0x21");
  expect_bad("\"!\": 0,", "\"a b\": 0,", AA_EINVAL,
             "token \"a b\" holds U+0020, which is not in the ByteLevel");
  expect_bad("\"id\": 404", "\"id\": 403", AA_EINVAL,
             "added_tokens[1].id: id 403 is given to two added tokens");
  expect_bad("\"id\": 404", "\"id\": 5", AA_EINVAL, "id 5 is given to");
  expect_bad("\"lstrip\": false", "\"lstrip\": true", AA_EUNSUPPORTED,
             "added_tokens[0].lstrip: must be false");
  expect_bad("\"type\": \"ByteLevel\"", "\"type\": \"Whitespace\"", AA_EUNSUPPORTED,
             "pre_tokenizer.type: must be \"ByteLevel\"");
  expect_bad("\"type\": \"ByteLevel\"", "\"type\": \"Sequence\"", AA_EUNSUPPORTED,
             "pre_tokenizer.pretokenizers: must be [Split, ByteLevel]");
  expect_bad_in("tokenizer_llama3.json", "\\\\p{N}{1,3}", "\\\\p{N}{1,4}", AA_EUNSUPPORTED,
                "pre_tokenizer.pretokenizers[0].pattern: must be Llama 3's Regex");
  expect_bad_in("tokenizer_llama3.json", "\"use_regex\": false", "\"use_regex\": true", AA_EUNSUPPORTED,
                "pre_tokenizer.pretokenizers[1].use_regex: must be false here");
  expect_bad("\"add_prefix_space\": false", "\"add_prefix_space\": true", AA_EUNSUPPORTED,
             "pre_tokenizer.add_prefix_space: must be false");
  expect_bad("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", AA_EUNSUPPORTED,
             "normalizer: must be null (got a \"NFC\" normalizer");
  expect_bad("\"byte_fallback\": false", "\"byte_fallback\": true", AA_EUNSUPPORTED, "model.byte_fallback");
  expect_bad("\"version\"", "\"version\": 1, \"version\"", AA_EPARSE, "duplicate");
}

AA_TEST(load_rejects_missing_and_oversized_files) {
  aa_tokenizer_t *t = NULL;
  CHECK(aa_tokenizer_load(&t, tmp_path(0, "nope.json")) == AA_ENOENT);
  CHECK(t == NULL);
  /* A sparse file one byte over the cap: refused from its size alone. */
  const char *big = tmp_path(0, "big.json");
  write_bytes(big, "{", 1);
  CHECK(truncate(big, (off_t)AA_TOKENIZER_MAX_FILE_BYTES + 1) == 0);
  CHECK(aa_tokenizer_load(&t, big) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "too large") != NULL);
  CHECK(t == NULL);
  remove(big);
}

AA_TEST(build_shards_concatenates_each_files_ids_and_splits_the_tail) {
  aa_tokenizer_t *t = NULL;
  CHECK(aa_tokenizer_load(&t, fixture("tokenizer.json")) == 0);
  if (!t) return;
  static const char *const texts[] = {"The quick brown fox didn't mind.<|endoftext|>",
                                      "Привет, мир! 漢字 and 42 numbers\n\n"};
  const char *inputs[2] = {tmp_path(0, "a.txt"), tmp_path(1, "b.txt")};
  int32_t want[256];
  size_t n_want = 0;
  for (int i = 0; i < 2; i++) {
    write_bytes(inputs[i], texts[i], strlen(texts[i]));
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(aa_tokenizer_encode(t, (const unsigned char *)texts[i], strlen(texts[i]), &ids, &n) == 0);
    memcpy(want + n_want, ids, n * sizeof *ids);
    n_want += n;
    free(ids);
  }
  const char *train = tmp_path(2, "train.bin"), *val = tmp_path(3, "val.bin");
  CHECK_MSG(aa_tokenizer_build_shards(t, inputs, 2, train, val, 0.25) == 0, "%s", aa_last_error());
  aa_shard_t a = {0}, b = {0};
  CHECK(aa_shard_read(&a, train, 0) == 0);
  CHECK(aa_shard_read(&b, val, 0) == 0);
  size_t n_val = (size_t)((double)n_want * 0.25);
  CHECK(a.vocab_size == 405 && b.vocab_size == 405);
  CHECK(a.n_tokens == n_want - n_val && b.n_tokens == n_val);
  if (a.n_tokens + b.n_tokens == n_want) {
    CHECK(memcmp(a.tokens, want, a.n_tokens * sizeof *want) == 0);
    CHECK(memcmp(b.tokens, want + a.n_tokens, b.n_tokens * sizeof *want) == 0);
  }
  aa_shard_free(&a);
  aa_shard_free(&b);
  const char *missing[1] = {tmp_path(0, "missing.txt")};
  CHECK(aa_tokenizer_build_shards(t, missing, 1, train, val, 0.1) == AA_ENOENT);
  write_bytes(inputs[0], "", 0);
  CHECK(aa_tokenizer_build_shards(t, inputs, 1, train, val, 0.1) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "empty") != NULL);
  CHECK(aa_tokenizer_build_shards(t, inputs, 1, train, train, 0.1) == AA_EINVAL);
  remove(inputs[0]);
  remove(inputs[1]);
  remove(train);
  remove(val);
  aa_tokenizer_free(t);
}

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove(tmp_path(0, e->d_name));
  closedir(d);
  rmdir(tmpdir);
}

int main(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  snprintf(fixture_dir, sizeof fixture_dir, "%s/tests/reference/tokenizer", src ? src : ".");
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_tokenizer.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  RUN(encode_matches_python_reference_with_string_merges);
  RUN(encode_matches_python_reference_with_pair_merges);
  RUN(encode_matches_python_reference_with_llama3_split_and_ignore_merges);
  RUN(vocab_size_counts_model_vocab_and_added_tokens);
  RUN(decode_inverts_encode_for_any_bytes);
  RUN(decode_rejects_ids_without_a_token);
  RUN(malformed_files_are_errors_naming_the_field);
  RUN(load_rejects_missing_and_oversized_files);
  RUN(build_shards_concatenates_each_files_ids_and_splits_the_tail);
  remove_tmpdir();
  return aa_test_summary();
}
