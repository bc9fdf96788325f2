/* Token shards, the llm.c reader, the loader, the byte tokenizer and the
 * synthetic corpus. Corrupt files are built byte by byte here, independent
 * of the writer, so the on-disk layout itself is under test. */
#include "aa_test.h"
#include "common/aa.h"
#include "engine/data.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

/* A path inside the test's temporary directory; valid until the next call
 * with the same slot. */
static const char *tmp_path(int slot, const char *name) {
  static char buf[4][256];
  if (snprintf(buf[slot], sizeof buf[slot], "%s/%s", tmpdir, name) >= (int)sizeof buf[slot]) abort();
  return buf[slot];
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

/* Reads a whole file; the caller frees. */
static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v) {
  le32(p, (uint32_t)v);
  le32(p + 4, (uint32_t)(v >> 32));
}

/* Builds an autoaccel shard image by hand: 64-byte header + uint16 ids,
 * with a correct checksum unless the caller patches it afterwards. */
static unsigned char *make_shard16(const uint16_t *ids, size_t n, uint32_t vocab, size_t *len) {
  *len = 64 + 2 * n;
  unsigned char *p = calloc(1, *len);
  memcpy(p, "AATOKENS", 8);
  le32(p + 8, 1);
  le32(p + 12, 2);
  le32(p + 16, vocab);
  le64(p + 24, n);
  for (size_t i = 0; i < n; i++) {
    p[64 + 2 * i] = (unsigned char)ids[i];
    p[64 + 2 * i + 1] = (unsigned char)(ids[i] >> 8);
  }
  le64(p + 32, aa_fnv1a(AA_FNV_INIT, p + 64, 2 * n));
  return p;
}

/* Builds an llm.c shard image: 256 int32 header, then uint16 ids. */
static unsigned char *make_llmc(const uint16_t *ids, size_t n, int32_t version, size_t *len) {
  *len = 1024 + 2 * n;
  unsigned char *p = calloc(1, *len);
  le32(p, AA_LLMC_MAGIC);
  le32(p + 4, (uint32_t)version);
  le32(p + 8, (uint32_t)n);
  for (size_t i = 0; i < n; i++) {
    p[1024 + 2 * i] = (unsigned char)ids[i];
    p[1024 + 2 * i + 1] = (unsigned char)(ids[i] >> 8);
  }
  return p;
}

/* Reads `path` expecting failure with `code` and a message containing both
 * the file name and `needle`; also checks *out was left untouched. */
static void expect_read_error(const char *path, int max_vocab, int code, const char *needle) {
  aa_shard_t s = {.tokens = (int32_t *)&s, .n_tokens = 12345, .vocab_size = -7};
  int rc = aa_shard_read(&s, path, max_vocab);
  CHECK_MSG(rc == code, "%s: rc %d (%s), want %d; message: %s", path, rc, aa_strerror(rc), code,
            aa_last_error());
  CHECK_MSG(strstr(aa_last_error(), needle) != NULL, "message '%s' lacks '%s'", aa_last_error(), needle);
  CHECK_MSG(strstr(aa_last_error(), path) != NULL, "message '%s' does not name %s", aa_last_error(), path);
  CHECK(s.tokens == (int32_t *)&s && s.n_tokens == 12345 && s.vocab_size == -7);
  if (rc == 0) aa_shard_free(&s);
}

AA_TEST(shard_roundtrip_uint16_has_documented_layout) {
  const char *path = tmp_path(0, "u16.bin");
  int32_t tok[1000];
  for (int i = 0; i < 1000; i++)
    tok[i] = (i * 7919) % 50257;
  CHECK(aa_shard_write(path, tok, 1000, 50257) == 0);
  size_t len;
  unsigned char *p = read_bytes(path, &len);
  CHECK(len == 64 + 2 * 1000);
  CHECK(memcmp(p, "AATOKENS", 8) == 0);
  CHECK(p[8] == 1 && p[9] == 0 && p[12] == 2 && p[16] == (50257 & 0xff) && p[17] == (50257 >> 8));
  CHECK(p[24] == (1000 & 0xff) && p[25] == (1000 >> 8));
  uint64_t sum = 0;
  for (int i = 7; i >= 0; i--)
    sum = sum << 8 | p[32 + i];
  CHECK(sum == aa_fnv1a(AA_FNV_INIT, p + 64, 2000));
  for (int i = 20; i < 24; i++)
    CHECK(p[i] == 0);
  for (int i = 40; i < 64; i++)
    CHECK(p[i] == 0);
  CHECK(p[64 + 2 * 3] == (tok[3] & 0xff) && p[64 + 2 * 3 + 1] == (tok[3] >> 8));
  free(p);

  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 50257) == 0);
  CHECK(s.n_tokens == 1000 && s.vocab_size == 50257);
  CHECK(memcmp(s.tokens, tok, sizeof tok) == 0);
  aa_shard_free(&s);
  CHECK(s.tokens == NULL);
}

AA_TEST(shard_roundtrip_uint32_for_vocab_above_65536) {
  const char *path = tmp_path(0, "u32.bin");
  int32_t tok[300];
  for (int i = 0; i < 300; i++)
    tok[i] = 99999 - i * 333;
  CHECK(aa_shard_write(path, tok, 300, 100000) == 0);
  size_t len;
  unsigned char *p = read_bytes(path, &len);
  CHECK(len == 64 + 4 * 300);
  CHECK(p[12] == 4);
  free(p);
  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 0) == 0);
  CHECK(s.n_tokens == 300 && s.vocab_size == 100000);
  CHECK(memcmp(s.tokens, tok, sizeof tok) == 0);
  aa_shard_free(&s);
  /* 65536 is still the 2-byte width: ids up to 65535 fit. */
  int32_t edge[2] = {0, 65535};
  CHECK(aa_shard_write(path, edge, 2, 65536) == 0);
  CHECK(aa_shard_read(&s, path, 0) == 0);
  CHECK(s.n_tokens == 2 && s.tokens[1] == 65535);
  aa_shard_free(&s);
  p = read_bytes(path, &len);
  CHECK(len == 64 + 4 && p[12] == 2);
  free(p);
}

AA_TEST(shard_empty_roundtrip) {
  const char *path = tmp_path(0, "empty.bin");
  CHECK(aa_shard_write(path, NULL, 0, 256) == 0);
  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 256) == 0);
  CHECK(s.n_tokens == 0 && s.tokens != NULL);
  aa_shard_free(&s);
}

AA_TEST(shard_write_rejects_bad_ids_and_leaves_no_file) {
  const char *path = tmp_path(0, "never.bin");
  int32_t tok[3] = {1, 256, 2};
  CHECK(aa_shard_write(path, tok, 3, 256) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "token id 256 at index 1") != NULL);
  tok[1] = -1;
  CHECK(aa_shard_write(path, tok, 3, 256) == AA_EINVAL);
  CHECK(aa_shard_write(path, tok, 3, 0) == AA_EINVAL);
  CHECK(access(path, F_OK) != 0);
  CHECK(aa_shard_write(tmp_path(0, "no-such-dir/x.bin"), tok, 0, 256) == AA_EIO);
}

/* A symlink planted at a shard's name (or at the old "<name>.tmp.<pid>"
 * temporary) is replaced or left alone, never written through, and the
 * directory holds no temporary afterwards. */
AA_TEST(shard_write_replaces_a_planted_symlink_without_touching_its_target) {
  const char *victim = tmp_path(0, "victim"), *path = tmp_path(1, "linked.bin");
  char old_tmp[300];
  snprintf(old_tmp, sizeof old_tmp, "%s.tmp.%ld", path, (long)getpid());
  write_bytes(victim, "secret", 6);
  CHECK(symlink(victim, path) == 0 && symlink(victim, old_tmp) == 0);
  int32_t tok[3] = {1, 2, 3};
  CHECK_MSG(aa_shard_write(path, tok, 3, 256) == 0, "%s", aa_last_error());
  size_t n = 0;
  unsigned char *got = read_bytes(victim, &n);
  CHECK(got && n == 6 && !memcmp(got, "secret", 6));
  free(got);
  struct stat st;
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(lstat(old_tmp, &st) == 0 && S_ISLNK(st.st_mode));
  aa_shard_t sh;
  CHECK(aa_shard_read(&sh, path, 256) == 0 && sh.n_tokens == 3 && sh.tokens[2] == 3);
  aa_shard_free(&sh);
  DIR *d = opendir(tmpdir);
  for (struct dirent *e; d && (e = readdir(d));)
    CHECK_MSG(strncmp(e->d_name, ".linked.bin.", 12) != 0, "left behind: %s", e->d_name);
  if (d) closedir(d);
  unlink(old_tmp);
  unlink(path);
  unlink(victim);
}

AA_TEST(shard_read_rejects_missing_and_short_files) {
  expect_read_error(tmp_path(1, "missing.bin"), 0, AA_ENOENT, "no such file");
  const char *path = tmp_path(1, "short.bin");
  write_bytes(path, "", 0);
  expect_read_error(path, 0, AA_EFORMAT, "truncated header");
  write_bytes(path, "AATOK", 5);
  expect_read_error(path, 0, AA_EFORMAT, "truncated header");
  size_t len;
  uint16_t ids[4] = {1, 2, 3, 4};
  unsigned char *p = make_shard16(ids, 4, 256, &len);
  write_bytes(path, p, 40);
  expect_read_error(path, 0, AA_EFORMAT, "truncated header");
  free(p);
  unsigned char l[4];
  le32(l, AA_LLMC_MAGIC);
  write_bytes(path, l, 4);
  expect_read_error(path, 0, AA_EFORMAT, "truncated header");
  expect_read_error(tmpdir, 0, AA_EIO, "not a regular file");
}

AA_TEST(shard_read_rejects_size_mismatch_without_trusting_the_count) {
  const char *path = tmp_path(1, "size.bin");
  uint16_t ids[20];
  for (int i = 0; i < 20; i++)
    ids[i] = (uint16_t)i;
  size_t len;
  unsigned char *p = make_shard16(ids, 20, 256, &len);
  write_bytes(path, p, len - 1);
  expect_read_error(path, 0, AA_EFORMAT, "truncated: expected 104 bytes");
  expect_read_error(path, 0, AA_EFORMAT, "file has 103");
  unsigned char *q = calloc(1, len + 3);
  memcpy(q, p, len);
  write_bytes(path, q, len + 3);
  expect_read_error(path, 0, AA_EFORMAT, "3 trailing bytes: expected 104 bytes");
  /* A count near 2^64 must be refused from the size alone, not allocated. */
  le64(p + 24, UINT64_MAX / 2);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "more than any file can hold");
  le64(p + 24, (uint64_t)1 << 40);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "truncated");
  free(q);
  free(p);
}

AA_TEST(shard_read_rejects_bad_header_fields) {
  const char *path = tmp_path(1, "hdr.bin");
  uint16_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  size_t len;
  unsigned char *p = make_shard16(ids, 8, 256, &len);
  memcpy(p, "GIF89a\x01\x02", 8);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "not a token shard (bad magic \"GIF89a\\x01\\x02\"");
  memcpy(p, "AATOKENS", 8);
  le32(p + 8, 2);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "unsupported autoaccel shard version 2");
  le32(p + 8, 1);
  le32(p + 12, 3);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "token_bytes is 3, must be 2 or 4");
  le32(p + 12, 2);
  le32(p + 16, 0);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "vocab_size is 0");
  le32(p + 16, 256);
  le32(p + 20, 9);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "reserved header field is 9");
  le32(p + 20, 0);
  p[50] = 1;
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "header byte 50");
  p[50] = 0;
  write_bytes(path, p, len);
  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 0) == 0);
  aa_shard_free(&s);
  free(p);
}

AA_TEST(shard_read_detects_flipped_payload_byte) {
  const char *path = tmp_path(1, "flip.bin");
  uint16_t ids[32];
  for (int i = 0; i < 32; i++)
    ids[i] = (uint16_t)(i * 3);
  size_t len;
  unsigned char *p = make_shard16(ids, 32, 256, &len);
  p[64 + 21] ^= 0x10;
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_ECORRUPT, "checksum mismatch");
  free(p);
}

AA_TEST(shard_read_rejects_ids_beyond_header_or_model_vocab) {
  const char *path = tmp_path(1, "ids.bin");
  uint16_t ids[32];
  for (int i = 0; i < 32; i++)
    ids[i] = (uint16_t)i;
  ids[17] = 300;
  ids[20] = 400;
  size_t len;
  unsigned char *p = make_shard16(ids, 32, 256, &len);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EINVAL, "token id 300 at index 17 >= vocab_size 256");
  free(p);
  /* Valid for its own vocab of 512, but not for a model with 256 ids. */
  p = make_shard16(ids, 32, 512, &len);
  write_bytes(path, p, len);
  expect_read_error(path, 256, AA_EINVAL, "token id 300 at index 17 >= vocab_size 256 (the model's)");
  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 0) == 0);
  CHECK(s.tokens[17] == 300 && s.vocab_size == 512);
  aa_shard_free(&s);
  CHECK(aa_shard_read(&s, path, 401) == 0);
  aa_shard_free(&s);
  CHECK(aa_shard_read(&s, path, -1) == AA_EINVAL);
  free(p);
}

AA_TEST(llmc_shard_roundtrip) {
  const char *path = tmp_path(1, "llmc.bin");
  uint16_t ids[100];
  for (int i = 0; i < 100; i++)
    ids[i] = (uint16_t)(i * 501);
  size_t len;
  unsigned char *p = make_llmc(ids, 100, 1, &len);
  write_bytes(path, p, len);
  aa_shard_t s;
  CHECK(aa_shard_read(&s, path, 0) == 0);
  CHECK(s.n_tokens == 100 && s.vocab_size == 0);
  for (int i = 0; i < 100; i++)
    CHECK(s.tokens[i] == ids[i]);
  aa_shard_free(&s);
  CHECK(aa_shard_read(&s, path, 50257) == 0);
  aa_shard_free(&s);
  expect_read_error(path, 40000, AA_EINVAL, "token id 40080 at index 80 >= vocab_size 40000");
  free(p);
}

AA_TEST(llmc_shard_errors) {
  const char *path = tmp_path(1, "llmc_bad.bin");
  uint16_t ids[10] = {0};
  size_t len;
  unsigned char *p = make_llmc(ids, 10, 2, &len);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "unsupported llm.c shard version 2");
  le32(p + 4, 1);
  write_bytes(path, p, len - 2);
  expect_read_error(path, 0, AA_EFORMAT, "truncated: expected 1044 bytes");
  unsigned char *q = calloc(1, len + 2);
  memcpy(q, p, len);
  write_bytes(path, q, len + 2);
  expect_read_error(path, 0, AA_EFORMAT, "2 trailing bytes");
  write_bytes(path, p, 500);
  expect_read_error(path, 0, AA_EFORMAT, "truncated header");
  le32(p + 8, (uint32_t)-5);
  write_bytes(path, p, len);
  expect_read_error(path, 0, AA_EFORMAT, "negative token count");
  free(q);
  free(p);
}

static aa_shard_t counting_shard(int32_t *buf, size_t n) {
  for (size_t i = 0; i < n; i++)
    buf[i] = (int32_t)i;
  return (aa_shard_t){.tokens = buf, .n_tokens = n, .vocab_size = 256};
}

AA_TEST(loader_takes_overlapping_sequences_and_wraps) {
  int32_t buf[21];
  aa_shard_t s = counting_shard(buf, 20);
  aa_loader_t l;
  CHECK(aa_loader_init(&l, &s, 2, 4) == 0);
  int32_t in[8], tg[8];
  aa_loader_next(&l, in, tg);
  const int32_t in1[8] = {0, 1, 2, 3, 4, 5, 6, 7}, tg1[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(memcmp(in, in1, sizeof in) == 0 && memcmp(tg, tg1, sizeof tg) == 0);
  CHECK(l.pos == 8);
  aa_loader_next(&l, in, tg);
  const int32_t in2[8] = {8, 9, 10, 11, 12, 13, 14, 15}, tg2[8] = {9, 10, 11, 12, 13, 14, 15, 16};
  CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
  /* pos 16 leaves 4 tokens < T+1: the first sequence wraps to 0. */
  aa_loader_next(&l, in, tg);
  CHECK(memcmp(in, in1, sizeof in) == 0 && memcmp(tg, tg1, sizeof tg) == 0);
  CHECK(l.pos == 8);

  /* With 21 tokens, pos 16 still holds exactly T+1 = 5; the wrap then
   * happens inside the batch, at the second sequence. */
  s = counting_shard(buf, 21);
  CHECK(aa_loader_init(&l, &s, 2, 4) == 0);
  l.pos = 16;
  aa_loader_next(&l, in, tg);
  const int32_t in3[8] = {16, 17, 18, 19, 0, 1, 2, 3}, tg3[8] = {17, 18, 19, 20, 1, 2, 3, 4};
  CHECK(memcmp(in, in3, sizeof in) == 0 && memcmp(tg, tg3, sizeof tg) == 0);
  CHECK(l.pos == 4);

  /* A position past the end (a checkpoint of a longer shard) wraps too. */
  l.pos = 1000;
  aa_loader_next(&l, in, tg);
  CHECK(memcmp(in, in1, sizeof in) == 0);
}

AA_TEST(loader_resumes_exactly_from_a_saved_position) {
  int32_t buf[97];
  aa_shard_t s = counting_shard(buf, 97);
  aa_loader_t a, b;
  CHECK(aa_loader_init(&a, &s, 3, 5) == 0);
  int32_t in[15], tg[15], in2[15], tg2[15];
  for (int i = 0; i < 4; i++)
    aa_loader_next(&a, in, tg);
  uint64_t saved = a.pos;
  CHECK(aa_loader_init(&b, &s, 3, 5) == 0);
  b.pos = saved;
  for (int i = 0; i < 10; i++) {
    aa_loader_next(&a, in, tg);
    aa_loader_next(&b, in2, tg2);
    CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    CHECK(a.pos == b.pos);
  }
  for (int i = 0; i < 15; i++)
    CHECK(tg[i] == in[i] + 1);
}

AA_TEST(loader_init_rejects_short_shards_and_bad_shapes) {
  int32_t buf[8];
  aa_shard_t s = counting_shard(buf, 8);
  aa_loader_t l;
  CHECK(aa_loader_init(&l, &s, 1, 8) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "fewer than one sequence") != NULL);
  CHECK(aa_loader_init(&l, &s, 1, 7) == 0);
  CHECK(aa_loader_init(&l, &s, 0, 4) == AA_EINVAL);
  CHECK(aa_loader_init(&l, &s, 2, 0) == AA_EINVAL);
}

AA_TEST(build_text_concatenates_and_splits_the_tail) {
  const char *a = tmp_path(0, "a.txt"), *b = tmp_path(1, "b.txt");
  const char *train = tmp_path(2, "train.bin"), *val = tmp_path(3, "val.bin");
  write_bytes(a, "hello ", 6);
  write_bytes(b, "world!!!\xff", 9);
  const char *inputs[2] = {a, b};
  CHECK(aa_data_build_text(inputs, 2, train, val, 0.2) == 0);
  aa_shard_t t, v;
  CHECK(aa_shard_read(&t, train, AA_BYTE_VOCAB) == 0);
  CHECK(aa_shard_read(&v, val, AA_BYTE_VOCAB) == 0);
  CHECK(t.n_tokens == 12 && v.n_tokens == 3 && t.vocab_size == 256);
  const char *want = "hello world!!!\xff";
  for (size_t i = 0; i < 12; i++)
    CHECK(t.tokens[i] == (unsigned char)want[i]);
  for (size_t i = 0; i < 3; i++)
    CHECK(v.tokens[i] == (unsigned char)want[12 + i]);
  aa_shard_free(&t);
  aa_shard_free(&v);

  CHECK(aa_data_build_text(inputs, 2, train, val, 0.0) == 0);
  CHECK(aa_shard_read(&v, val, 0) == 0 && v.n_tokens == 0);
  aa_shard_free(&v);
}

AA_TEST(build_text_errors) {
  const char *a = tmp_path(0, "a.txt"), *e = tmp_path(1, "e.txt");
  const char *train = tmp_path(2, "train2.bin"), *val = tmp_path(3, "val2.bin");
  const char *missing[2] = {a, tmp_path(1, "nope.txt")};
  CHECK(aa_data_build_text(missing, 2, train, val, 0.1) == AA_ENOENT);
  CHECK(strstr(aa_last_error(), "nope.txt: no such file") != NULL);
  CHECK(access(train, F_OK) != 0);
  const char *one[1] = {a};
  CHECK(aa_data_build_text(one, 1, train, val, 1.0) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "outside [0, 1)") != NULL);
  CHECK(aa_data_build_text(one, 1, train, val, -0.1) == AA_EINVAL);
  CHECK(aa_data_build_text(one, 1, train, val, NAN) == AA_EINVAL);
  CHECK(aa_data_build_text(one, 1, train, train, 0.1) == AA_EINVAL);
  CHECK(aa_data_build_text(one, 0, train, val, 0.1) == AA_EINVAL);
  write_bytes(e, "", 0);
  const char *empty[1] = {e};
  CHECK(aa_data_build_text(empty, 1, train, val, 0.1) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "empty") != NULL);
  const char *dir[1] = {tmpdir};
  CHECK(aa_data_build_text(dir, 1, train, val, 0.1) == AA_EIO);
}

static unsigned char *synth_train(uint64_t seed, size_t n, size_t *len) {
  const char *train = tmp_path(2, "syn_train.bin"), *val = tmp_path(3, "syn_val.bin");
  if (aa_data_synth(train, val, n, 0.1, seed) != 0) return NULL;
  return read_bytes(train, len);
}

AA_TEST(synth_is_deterministic_in_seed) {
  size_t la, lb, lc;
  unsigned char *a = synth_train(7, 50000, &la), *b = synth_train(7, 50000, &lb),
                *c = synth_train(8, 50000, &lc);
  CHECK(a && b && c);
  CHECK(la == 64 + 2 * 45000 && la == lb && la == lc);
  CHECK(memcmp(a, b, la) == 0);
  CHECK(memcmp(a, c, la) != 0);
  free(a);
  free(b);
  free(c);
  aa_shard_t v;
  CHECK(aa_shard_read(&v, tmp_path(3, "syn_val.bin"), AA_BYTE_VOCAB) == 0);
  CHECK(v.n_tokens == 5000);
  aa_shard_free(&v);
  CHECK(aa_data_synth(tmp_path(2, "x.bin"), tmp_path(3, "y.bin"), 0, 0.1, 1) == AA_EINVAL);
  CHECK(aa_data_synth(tmp_path(2, "x.bin"), tmp_path(3, "y.bin"), 100, 1.5, 1) == AA_EINVAL);
}

/* H(X_t | X_{t-1}) in nats from bigram counts. */
static double bigram_conditional_entropy(const aa_shard_t *s) {
  static double pair[256][256];
  double prev[256] = {0};
  memset(pair, 0, sizeof pair);
  for (size_t i = 1; i < s->n_tokens; i++) {
    pair[s->tokens[i - 1]][s->tokens[i]] += 1;
    prev[s->tokens[i - 1]] += 1;
  }
  double n = (double)(s->n_tokens - 1), H = 0;
  for (int a = 0; a < 256; a++)
    for (int b = 0; b < 256; b++)
      if (pair[a][b] > 0) H -= pair[a][b] / n * log(pair[a][b] / prev[a]);
  return H;
}

AA_TEST(synth_has_structure_below_its_unigram_entropy) {
  const char *train = tmp_path(2, "syn_train.bin"), *val = tmp_path(3, "syn_val.bin");
  CHECK(aa_data_synth(train, val, 300000, 0.1, 1234) == 0);
  aa_shard_t s;
  CHECK(aa_shard_read(&s, train, AA_BYTE_VOCAB) == 0);
  int printable = 1;
  for (size_t i = 0; i < s.n_tokens; i++)
    if (!(s.tokens[i] == '\n' || (s.tokens[i] >= 0x20 && s.tokens[i] < 0x7f))) printable = 0;
  CHECK(printable);
  double h1 = aa_shard_unigram_entropy(&s), h2 = bigram_conditional_entropy(&s);
  fprintf(stderr, "  synth: unigram %.3f nats, bigram conditional %.3f nats\n", h1, h2);
  CHECK(h1 > 2.6 && h1 < 3.3);
  CHECK(h2 < h1 - 0.8);
  aa_shard_free(&s);
}

AA_TEST(unigram_entropy_known_values) {
  int32_t t[6] = {0, 1, 0, 1, 0, 1};
  aa_shard_t s = {.tokens = t, .n_tokens = 6, .vocab_size = 2};
  CHECK_NEAR(aa_shard_unigram_entropy(&s), log(2.0), 1e-12);
  int32_t z[3] = {5, 5, 5};
  s = (aa_shard_t){.tokens = z, .n_tokens = 3, .vocab_size = 6};
  CHECK_NEAR(aa_shard_unigram_entropy(&s), 0.0, 1e-12);
  s.n_tokens = 0;
  CHECK_NEAR(aa_shard_unigram_entropy(&s), 0.0, 0);
  /* Ids too large for a count table take the sorting path. */
  int32_t big[8] = {40000000, 7, 40000000, 7, 123456789, 123456789, 9, 9};
  s = (aa_shard_t){.tokens = big, .n_tokens = 8, .vocab_size = 200000000};
  CHECK_NEAR(aa_shard_unigram_entropy(&s), log(4.0), 1e-12);
}

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove(tmp_path(0, e->d_name));
  closedir(d);
  rmdir(tmpdir);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_data.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  RUN(shard_roundtrip_uint16_has_documented_layout);
  RUN(shard_roundtrip_uint32_for_vocab_above_65536);
  RUN(shard_empty_roundtrip);
  RUN(shard_write_rejects_bad_ids_and_leaves_no_file);
  RUN(shard_write_replaces_a_planted_symlink_without_touching_its_target);
  RUN(shard_read_rejects_missing_and_short_files);
  RUN(shard_read_rejects_size_mismatch_without_trusting_the_count);
  RUN(shard_read_rejects_bad_header_fields);
  RUN(shard_read_detects_flipped_payload_byte);
  RUN(shard_read_rejects_ids_beyond_header_or_model_vocab);
  RUN(llmc_shard_roundtrip);
  RUN(llmc_shard_errors);
  RUN(loader_takes_overlapping_sequences_and_wraps);
  RUN(loader_resumes_exactly_from_a_saved_position);
  RUN(loader_init_rejects_short_shards_and_bad_shapes);
  RUN(build_text_concatenates_and_splits_the_tail);
  RUN(build_text_errors);
  RUN(synth_is_deterministic_in_seed);
  RUN(synth_has_structure_below_its_unigram_entropy);
  RUN(unigram_entropy_known_values);
  remove_tmpdir();
  return aa_test_summary();
}
