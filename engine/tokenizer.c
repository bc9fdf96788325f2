/* Byte-level BPE from a Hugging Face tokenizer.json (see tokenizer.h and
 * docs/data-format.md, "BPE tokenizers"): the reader, GPT-2's and
 * Llama 3's split patterns written out by hand over UTF-8, rank-ordered merging with a
 * heap per piece, decoding, and the shard builder. */
#include "engine/tokenizer.h"
#include "common/aa.h"
#include "common/json.h"
#include "engine/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Text inputs of the shard builder, as for the byte-level one. */
#define TEXT_MAX_BYTES ((size_t)1 << 30)

typedef struct {
  size_t off;
  int len; /* < 0: no token has this id */
} span_t;

/* A merge: the pair (a, b) becomes `merged`; lower rank merges first. */
typedef struct {
  uint64_t key; /* a << 32 | b; EMPTY_KEY when the slot is free */
  int32_t rank, merged;
} pair_slot_t;

#define EMPTY_KEY UINT64_MAX

struct aa_tokenizer {
  int vocab_size;
  span_t *tok;          /* (vocab_size): each id's bytes in `bytes` */
  unsigned char *bytes; /* every token's bytes, back to back */
  size_t n_bytes, cap_bytes;
  int32_t byte_id[256]; /* the token of each single byte */
  int32_t *str_slots;   /* model.vocab bytes -> id + 1 (0: free), open addressing */
  size_t str_mask;
  pair_slot_t *pairs;
  size_t pair_mask;
  int ignore_merges;
  int llama3_split; /* 0: GPT-2's split pattern, 1: Llama 3's */
  int n_added;
  int32_t *added;                 /* (n_added) ids of the added tokens */
  unsigned char added_first[256]; /* 1 where some added token starts with this byte */
};

/* ---- GPT-2's bytes_to_unicode ------------------------------------------
 * The printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
 * themselves; the other 68 bytes, in increasing order, become U+0100
 * onwards. A vocab string is a sequence of these code points. */

#define BL_ALPHABET 324

static int bl_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

/* cp_of[b]: byte b's code point; byte_of[cp]: its byte, -1 outside. */
static void bl_tables(uint32_t cp_of[256], int byte_of[BL_ALPHABET]) {
  int n = 0;
  for (int i = 0; i < BL_ALPHABET; i++)
    byte_of[i] = -1;
  for (int b = 0; b < 256; b++) {
    cp_of[b] = bl_printable(b) ? (uint32_t)b : (uint32_t)(256 + n++);
    byte_of[cp_of[b]] = b;
  }
}

/* ---- UTF-8 and the character classes of the split pattern ---------------- */

#define CP_INVALID UINT32_MAX

/* Decodes the character at s[0..n) (n >= 1) into *cp and returns its
 * length; a byte that does not start a valid, shortest-form sequence is a
 * character of its own (CP_INVALID). */
static size_t u8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned char c = s[0];
  size_t len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    *cp = CP_INVALID;
    return 1;
  }
  if (n < len) {
    *cp = CP_INVALID;
    return 1;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cp = CP_INVALID;
      return 1;
    }
    v = v << 6 | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    *cp = CP_INVALID;
    return 1;
  }
  *cp = v;
  return len;
}

typedef struct {
  uint32_t lo, hi;
} cp_range_t;

/* \p{L} in the blocks this reader covers: ASCII, Latin-1, Latin Extended
 * A/B and Additional, IPA, Greek, Cyrillic, kana, CJK ideographs, Hangul
 * syllables, fullwidth Latin (Unicode 14 categories). Letters of other
 * scripts count as "other" here; docs/data-format.md says so. */
static const cp_range_t letters[] = {
    {0x41, 0x5A},     {0x61, 0x7A},     {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x2EC, 0x2EC},   {0x2EE, 0x2EE},   {0x370, 0x374},   {0x376, 0x377},   {0x37A, 0x37D},
    {0x37F, 0x37F},   {0x386, 0x386},   {0x388, 0x38A},   {0x38C, 0x38C},   {0x38E, 0x3A1},
    {0x3A3, 0x3F5},   {0x3F7, 0x481},   {0x48A, 0x52F},   {0x1E00, 0x1EFF}, {0x3041, 0x3096},
    {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
    {0xAC00, 0xD7A3}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
};

/* \p{N} in the same blocks plus the number forms around them. */
static const cp_range_t numbers[] = {
    {0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x2070, 0x2070},
    {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B},
    {0x24EA, 0x24FF}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A}, {0xFF10, 0xFF19},
};

/* \s: Unicode White_Space, as the regex engines of HF tokenizers read it. */
static const cp_range_t spaces[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

static int in_ranges(uint32_t cp, const cp_range_t *r, size_t n) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid].lo)
      hi = mid;
    else if (cp > r[mid].hi)
      lo = mid + 1;
    else
      return 1;
  }
  return 0;
}

typedef enum { CL_SPACE, CL_LETTER, CL_NUMBER, CL_OTHER } char_class_t;

static char_class_t classify(uint32_t cp) {
  if (cp == CP_INVALID) return CL_OTHER;
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL_LETTER;
    if (cp >= '0' && cp <= '9') return CL_NUMBER;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CL_SPACE;
    return CL_OTHER;
  }
  if (in_ranges(cp, letters, sizeof letters / sizeof *letters)) return CL_LETTER;
  if (in_ranges(cp, numbers, sizeof numbers / sizeof *numbers)) return CL_NUMBER;
  if (in_ranges(cp, spaces, sizeof spaces / sizeof *spaces)) return CL_SPACE;
  return CL_OTHER;
}

/* The class of the character at s[i] (i < n) and its length. */
static char_class_t class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
  uint32_t cp;
  *len = u8_next(s + i, n - i, &cp);
  return classify(cp);
}

/* The end of the run of characters of class `cl` that starts at i. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, char_class_t cl) {
  while (i < n) {
    size_t len;
    if (class_at(s, n, i, &len) != cl) break;
    i += len;
  }
  return i;
}

/* The end of the piece that starts at i < n under GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * taken alternative by alternative, as the regex engine tries them. */
static size_t piece_end(const unsigned char *s, size_t n, size_t i) {
  if (s[i] == '\'' && i + 1 < n) {
    unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  size_t len;
  char_class_t cl = class_at(s, n, i, &len);
  if (s[i] == ' ' && i + 1 < n) {
    size_t len2;
    char_class_t next = class_at(s, n, i + 1, &len2);
    if (next != CL_SPACE) return run_end(s, n, i + 1, next);
  }
  if (cl != CL_SPACE) return run_end(s, n, i, cl);
  /* A whitespace run: all of it at the end of the text; before other text,
   * all but its last character (which then leads the next piece), unless
   * it is a single character. */
  size_t last = i, j = i;
  while (j < n) {
    size_t l;
    if (class_at(s, n, j, &l) != CL_SPACE) break;
    last = j;
    j += l;
  }
  if (j == n || last == i) return j;
  return last;
}

/* Llama 3's pattern, as its tokenizer.json spells it (JSON-decoded). */
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

static unsigned char ascii_lower(unsigned char c) {
  return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* The end of the piece that starts at i < n under Llama 3's pattern
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * alternative by alternative. The contractions fold ASCII case only. */
static size_t piece_end_llama3(const unsigned char *s, size_t n, size_t i) {
  if (s[i] == '\'' && i + 1 < n) {
    unsigned char a = ascii_lower(s[i + 1]), b = i + 2 < n ? ascii_lower(s[i + 2]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  size_t len, l2;
  char_class_t cl = class_at(s, n, i, &len);
  if (cl == CL_LETTER) return run_end(s, n, i, CL_LETTER);
  if (cl != CL_NUMBER && !is_newline(s[i]) && i + len < n && class_at(s, n, i + len, &l2) == CL_LETTER)
    return run_end(s, n, i + len, CL_LETTER);
  if (cl == CL_NUMBER) {
    size_t j = i;
    for (int k = 0; k < 3 && j < n && class_at(s, n, j, &l2) == CL_NUMBER; k++)
      j += l2;
    return j;
  }
  size_t j = i;
  if (s[i] == ' ' && i + 1 < n && class_at(s, n, i + 1, &l2) == CL_OTHER) j = i + 1;
  if (class_at(s, n, j, &l2) == CL_OTHER) {
    j = run_end(s, n, j, CL_OTHER);
    while (j < n && is_newline(s[j]))
      j++;
    return j;
  }
  /* A whitespace run: up to its last \r or \n if it holds one; else as in
   * GPT-2's pattern. */
  size_t last = i, nl_end = 0;
  for (j = i; j < n;) {
    size_t l;
    if (class_at(s, n, j, &l) != CL_SPACE) break;
    if (is_newline(s[j])) nl_end = j + 1;
    last = j;
    j += l;
  }
  if (nl_end) return nl_end;
  if (j == n || last == i) return j;
  return last;
}

/* ---- Hash tables ------------------------------------------------------- */

static uint64_t hash_bytes(const unsigned char *p, size_t n) { return aa_fnv1a(AA_FNV_INIT, p, n); }

static uint64_t hash_pair(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

static size_t table_size(size_t n) {
  size_t s = 16;
  while (s < 2 * n)
    s <<= 1;
  return s;
}

/* The id of the model.vocab token with these bytes, or -1. */
static int32_t str_find(const aa_tokenizer_t *t, const unsigned char *p, size_t n) {
  for (size_t h = hash_bytes(p, n) & t->str_mask;; h = (h + 1) & t->str_mask) {
    int32_t v = t->str_slots[h];
    if (v == 0) return -1;
    const span_t *sp = &t->tok[v - 1];
    if ((size_t)sp->len == n && memcmp(t->bytes + sp->off, p, n) == 0) return v - 1;
  }
}

static void str_insert(aa_tokenizer_t *t, int32_t id) {
  const span_t *sp = &t->tok[id];
  size_t h = hash_bytes(t->bytes + sp->off, (size_t)sp->len) & t->str_mask;
  while (t->str_slots[h] != 0)
    h = (h + 1) & t->str_mask;
  t->str_slots[h] = id + 1;
}

static pair_slot_t *pair_slot(const aa_tokenizer_t *t, uint64_t key) {
  for (size_t h = hash_pair(key) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
    pair_slot_t *s = &t->pairs[h];
    if (s->key == key || s->key == EMPTY_KEY) return s;
  }
}

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* ---- Reading tokenizer.json -------------------------------------------- */

/* Appends n bytes to the token arena and records them as id's. */
static int put_token(aa_tokenizer_t *t, int32_t id, const unsigned char *p, size_t n) {
  if (t->n_bytes + n > t->cap_bytes) {
    size_t cap = t->cap_bytes ? t->cap_bytes : 4096;
    while (cap < t->n_bytes + n)
      cap *= 2;
    unsigned char *b = realloc(t->bytes, cap);
    if (!b) return aa_error(AA_ENOMEM, "out of memory for the tokenizer's tokens");
    t->bytes = b;
    t->cap_bytes = cap;
  }
  memcpy(t->bytes + t->n_bytes, p, n);
  t->tok[id].off = t->n_bytes;
  t->tok[id].len = (int)n;
  t->n_bytes += n;
  return 0;
}

/* Maps a vocab string (n bytes of UTF-8 over the ByteLevel alphabet) to
 * the bytes it stands for, at most cap of them. Returns 0, or -1 with
 * *bad the offending code point (CP_INVALID for bad UTF-8, 0 when the
 * result is longer than cap). */
static int bl_decode(const int byte_of[BL_ALPHABET], const char *s, size_t n, unsigned char *out, size_t cap,
                     size_t *out_n, uint32_t *bad) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += u8_next((const unsigned char *)s + i, n - i, &cp);
    if (cp == CP_INVALID || cp >= BL_ALPHABET || byte_of[cp] < 0) {
      *bad = cp;
      return -1;
    }
    if (o == cap) {
      *bad = 0;
      return -1;
    }
    out[o++] = (unsigned char)byte_of[cp];
  }
  *out_n = o;
  return 0;
}

/* The "type" of a component object, or NULL. */
static const char *type_of(const json_t *v) {
  const json_t *ty = json_is_object(v) ? json_object_get(v, "type") : NULL;
  return json_is_string(ty) ? json_string_value(ty) : NULL;
}

static int type_is(const json_t *v, const char *name) { return type_of(v) && !strcmp(type_of(v), name); }

/* Reads an optional boolean member into *out (def when absent or null). */
static int opt_bool(const aa_json_ctx_t *c, const json_t *obj, const char *key, const char *path, int def,
                    int *out) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_boolean(v)) return aa_json_fail_type(c, path, "a boolean", v);
  *out = json_is_true(v);
  return 0;
}

/* An optional string member that must be absent, null or "". */
static int want_empty_string(const aa_json_ctx_t *c, const json_t *obj, const char *key, const char *path) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0)) return 0;
  return aa_json_fail(c, AA_EUNSUPPORTED, path, "must be null (byte-level BPE has no subword affixes)");
}

/* A ByteLevel pre-tokenizer at path: no prefix space, and its own split
 * (GPT-2's pattern) on or off as `regex` says. */
static int check_byte_level(const aa_json_ctx_t *c, const json_t *v, const char *path, int regex) {
  char p[96];
  int prefix = 0, use_regex = 1;
  snprintf(p, sizeof p, "%s.add_prefix_space", path);
  int rc = opt_bool(c, v, "add_prefix_space", p, 0, &prefix);
  if (rc) return rc;
  if (prefix) return aa_json_fail(c, AA_EUNSUPPORTED, p, "must be false");
  snprintf(p, sizeof p, "%s.use_regex", path);
  if ((rc = opt_bool(c, v, "use_regex", p, 1, &use_regex))) return rc;
  if (use_regex != regex)
    return aa_json_fail(c, AA_EUNSUPPORTED, p, "must be %s here", regex ? "true" : "false");
  return 0;
}

/* Llama 3's pre-tokenizer: [Split by its pattern, isolated; ByteLevel
 * without its own split]. Another pattern is not implemented. */
static int check_llama3_sequence(const aa_json_ctx_t *c, const json_t *pre) {
  const json_t *seq = json_object_get(pre, "pretokenizers");
  if (!json_is_array(seq) || json_array_size(seq) != 2 || !type_is(json_array_get(seq, 0), "Split") ||
      !type_is(json_array_get(seq, 1), "ByteLevel"))
    return aa_json_fail(c, AA_EUNSUPPORTED, "pre_tokenizer.pretokenizers",
                        "must be [Split, ByteLevel] as in Llama 3's tokenizer.json");
  const json_t *split = json_array_get(seq, 0);
  const json_t *pattern = json_object_get(json_object_get(split, "pattern"), "Regex");
  const json_t *behavior = json_object_get(split, "behavior"), *invert = json_object_get(split, "invert");
  if (!json_is_string(pattern) || strcmp(json_string_value(pattern), llama3_pattern) != 0)
    return aa_json_fail(c, AA_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern",
                        "must be Llama 3's Regex (no other split pattern is implemented)");
  if (!json_is_string(behavior) || strcmp(json_string_value(behavior), "Isolated") != 0 ||
      json_is_true(invert))
    return aa_json_fail(c, AA_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0]",
                        "must have behavior \"Isolated\" and invert false");
  return check_byte_level(c, json_array_get(seq, 1), "pre_tokenizer.pretokenizers[1]", 0);
}

/* normalizer, pre_tokenizer and decoder: what GPT-2's and Llama 3's files
 * hold. */
static int check_pipeline(const aa_json_ctx_t *c, const json_t *root, aa_tokenizer_t *t) {
  char safe[64];
  const json_t *norm = json_object_get(root, "normalizer");
  if (norm && !json_is_null(norm)) {
    aa_json_sanitize(safe, sizeof safe, type_of(norm) ? type_of(norm) : "?");
    return aa_json_fail(c, AA_EUNSUPPORTED, "normalizer",
                        "must be null (got a \"%s\" normalizer; normalizers are not implemented)", safe);
  }
  const json_t *pre = json_object_get(root, "pre_tokenizer");
  if (!pre) return aa_json_fail(c, AA_EINVAL, "pre_tokenizer", "required field is missing");
  if (!json_is_object(pre)) return aa_json_fail_type(c, "pre_tokenizer", "an object", pre);
  const char *ty = type_of(pre);
  if (!ty) return aa_json_fail(c, AA_EINVAL, "pre_tokenizer.type", "required string is missing");
  int rc = 0;
  if (!strcmp(ty, "Sequence")) {
    rc = check_llama3_sequence(c, pre);
    t->llama3_split = 1;
  } else if (!strcmp(ty, "ByteLevel")) {
    rc = check_byte_level(c, pre, "pre_tokenizer", 1);
  } else {
    aa_json_sanitize(safe, sizeof safe, ty);
    rc = aa_json_fail(
        c, AA_EUNSUPPORTED, "pre_tokenizer.type",
        "must be \"ByteLevel\" (GPT-2's) or \"Sequence\" (Llama 3's Split + ByteLevel), got \"%s\"", safe);
  }
  if (rc) return rc;
  const json_t *dec = json_object_get(root, "decoder");
  if (dec && !json_is_null(dec) && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel") != 0)) {
    aa_json_sanitize(safe, sizeof safe, type_of(dec) ? type_of(dec) : "?");
    return aa_json_fail(c, AA_EUNSUPPORTED, "decoder", "must be null or ByteLevel (got \"%s\")", safe);
  }
  return 0;
}

/* model.type and the model's options. */
static int check_model(const aa_json_ctx_t *c, const json_t *model, aa_tokenizer_t *t) {
  const json_t *ty = json_object_get(model, "type");
  if (!ty) return aa_json_fail(c, AA_EINVAL, "model.type", "required field is missing");
  if (!json_is_string(ty)) return aa_json_fail_type(c, "model.type", "a string", ty);
  if (strcmp(json_string_value(ty), "BPE") != 0) {
    char safe[64];
    aa_json_sanitize(safe, sizeof safe, json_string_value(ty));
    return aa_json_fail(c, AA_EUNSUPPORTED, "model.type",
                        "must be \"BPE\" (got \"%s\"; only byte-level BPE is implemented)", safe);
  }
  const json_t *drop = json_object_get(model, "dropout");
  if (drop && !json_is_null(drop) && !(json_is_number(drop) && json_number_value(drop) == 0.0))
    return aa_json_fail(c, AA_EUNSUPPORTED, "model.dropout", "must be null (BPE dropout is not implemented)");
  int fallback = 0;
  int rc = want_empty_string(c, model, "continuing_subword_prefix", "model.continuing_subword_prefix");
  if (!rc) rc = want_empty_string(c, model, "end_of_word_suffix", "model.end_of_word_suffix");
  if (!rc) rc = opt_bool(c, model, "byte_fallback", "model.byte_fallback", 0, &fallback);
  if (!rc) rc = opt_bool(c, model, "ignore_merges", "model.ignore_merges", 0, &t->ignore_merges);
  if (rc) return rc;
  if (fallback) return aa_json_fail(c, AA_EUNSUPPORTED, "model.byte_fallback", "must be false");
  return 0;
}

/* Reads one id value at path into *id. */
static int read_id(const aa_json_ctx_t *c, const char *path, const json_t *v, int32_t *id) {
  if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
  json_int_t x = json_integer_value(v);
  if (x < 0 || x >= AA_TOKENIZER_MAX_VOCAB)
    return aa_json_fail(c, AA_EINVAL, path, "must be between 0 and %d (got %lld)", AA_TOKENIZER_MAX_VOCAB - 1,
                        (long long)x);
  *id = (int32_t)x;
  return 0;
}

/* Validates added_tokens and finds the largest id it uses. */
static int scan_added(const aa_json_ctx_t *c, const json_t *added, int32_t *max_id) {
  if (!added || json_is_null(added)) return 0;
  if (!json_is_array(added)) return aa_json_fail_type(c, "added_tokens", "an array", added);
  if (json_array_size(added) > AA_TOKENIZER_MAX_ADDED)
    return aa_json_fail(c, AA_EINVAL, "added_tokens", "holds %zu tokens, at most %d are read",
                        json_array_size(added), AA_TOKENIZER_MAX_ADDED);
  static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
  for (size_t i = 0; i < json_array_size(added); i++) {
    char path[96];
    const json_t *a = json_array_get(added, i);
    snprintf(path, sizeof path, "added_tokens[%zu]", i);
    if (!json_is_object(a)) return aa_json_fail_type(c, path, "an object", a);
    const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
    snprintf(path, sizeof path, "added_tokens[%zu].id", i);
    if (!id) return aa_json_fail(c, AA_EINVAL, path, "required field is missing");
    int32_t v = 0;
    int rc = read_id(c, path, id, &v);
    if (rc) return rc;
    if (v > *max_id) *max_id = v;
    snprintf(path, sizeof path, "added_tokens[%zu].content", i);
    if (!content) return aa_json_fail(c, AA_EINVAL, path, "required field is missing");
    if (!json_is_string(content)) return aa_json_fail_type(c, path, "a string", content);
    size_t n = json_string_length(content);
    if (n < 1 || n > AA_TOKENIZER_MAX_TOKEN_BYTES)
      return aa_json_fail(c, AA_EINVAL, path, "must be 1 to %d bytes long (got %zu)",
                          AA_TOKENIZER_MAX_TOKEN_BYTES, n);
    for (size_t f = 0; f < sizeof flags / sizeof *flags; f++) {
      int on = 0;
      snprintf(path, sizeof path, "added_tokens[%zu].%s", i, flags[f]);
      if ((rc = opt_bool(c, a, flags[f], path, 0, &on))) return rc;
      if (on) return aa_json_fail(c, AA_EUNSUPPORTED, path, "must be false (not implemented)");
    }
  }
  return 0;
}

/* Validates model.vocab's shape and finds the largest id. */
static int scan_vocab(const aa_json_ctx_t *c, const json_t *vocab, int32_t *max_id) {
  if (!vocab) return aa_json_fail(c, AA_EINVAL, "model.vocab", "required field is missing");
  if (!json_is_object(vocab)) return aa_json_fail_type(c, "model.vocab", "an object", vocab);
  size_t n = json_object_size(vocab);
  if (n < 256 || n > AA_TOKENIZER_MAX_VOCAB)
    return aa_json_fail(c, AA_EINVAL, "model.vocab", "holds %zu tokens, must hold 256 (one per byte) to %d",
                        n, AA_TOKENIZER_MAX_VOCAB);
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)vocab, key, v) {
    char path[128], safe[64];
    aa_json_sanitize(safe, sizeof safe, key);
    snprintf(path, sizeof path, "model.vocab.\"%s\"", safe);
    int32_t id = 0;
    int rc = read_id(c, path, v, &id);
    if (rc) return rc;
    if (id > *max_id) *max_id = id;
  }
  return 0;
}

/* Records the added tokens' bytes (as written: they are matched in the raw
 * text, not in the ByteLevel alphabet). */
static int load_added(const aa_json_ctx_t *c, const json_t *added, aa_tokenizer_t *t) {
  size_t n = added && json_is_array(added) ? json_array_size(added) : 0;
  if (n == 0) return 0;
  if (!(t->added = malloc(n * sizeof *t->added)))
    return aa_error(AA_ENOMEM, "out of memory for added tokens");
  for (size_t i = 0; i < n; i++) {
    const json_t *a = json_array_get(added, i);
    int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
    const json_t *content = json_object_get(a, "content");
    if (t->tok[id].len >= 0) {
      char path[64];
      snprintf(path, sizeof path, "added_tokens[%zu].id", i);
      return aa_json_fail(c, AA_EINVAL, path, "id %d is given to two added tokens", id);
    }
    const unsigned char *p = (const unsigned char *)json_string_value(content);
    int rc = put_token(t, id, p, json_string_length(content));
    if (rc) return rc;
    t->added[t->n_added++] = id;
    t->added_first[p[0]] = 1;
  }
  return 0;
}

/* Records model.vocab: each string mapped back to bytes. A string that is
 * not in the ByteLevel alphabet is accepted only as the added token of the
 * same id (GPT-2's "<|endoftext|>" is in both lists). */
static int load_vocab(const aa_json_ctx_t *c, const json_t *vocab, aa_tokenizer_t *t,
                      const int byte_of[BL_ALPHABET]) {
  const char *key;
  const json_t *v;
  unsigned char buf[AA_TOKENIZER_MAX_TOKEN_BYTES];
  json_object_foreach((json_t *)vocab, key, v) {
    int32_t id = (int32_t)json_integer_value(v);
    size_t klen = strlen(key), n = 0;
    uint32_t bad = 0;
    char safe[64];
    aa_json_sanitize(safe, sizeof safe, key);
    span_t *sp = &t->tok[id];
    int decoded = klen > 0 && bl_decode(byte_of, key, klen, buf, sizeof buf, &n, &bad) == 0;
    if (sp->len >= 0) {
      /* Only an added token can hold the id already: vocab keys are unique. */
      int same = (decoded && (size_t)sp->len == n && memcmp(t->bytes + sp->off, buf, n) == 0) ||
                 ((size_t)sp->len == klen && memcmp(t->bytes + sp->off, key, klen) == 0);
      if (!same)
        return aa_json_fail(c, AA_EINVAL, "model.vocab", "id %d is given to \"%s\" and to an added token", id,
                            safe);
      continue;
    }
    if (klen == 0) return aa_json_fail(c, AA_EINVAL, "model.vocab", "a token is the empty string");
    if (!decoded) {
      if (bad == 0)
        return aa_json_fail(c, AA_EINVAL, "model.vocab", "token \"%s\" is longer than %d bytes", safe,
                            AA_TOKENIZER_MAX_TOKEN_BYTES);
      if (bad == CP_INVALID)
        return aa_json_fail(c, AA_EINVAL, "model.vocab", "token \"%s\" is not valid UTF-8", safe);
      return aa_json_fail(c, AA_EINVAL, "model.vocab",
                          "token \"%s\" holds U+%04X, which is not in the ByteLevel alphabet", safe, bad);
    }
    if (str_find(t, buf, n) >= 0)
      return aa_json_fail(c, AA_EINVAL, "model.vocab", "token \"%s\" is given two ids", safe);
    int rc = put_token(t, id, buf, n);
    if (rc) return rc;
    str_insert(t, id);
  }
  return 0;
}

/* Finds the model.vocab id of one side of a merge, naming it if absent. */
static int merge_side(const aa_json_ctx_t *c, aa_tokenizer_t *t, const int byte_of[BL_ALPHABET],
                      const char *path, const char *s, size_t n, unsigned char *buf, size_t *blen,
                      int32_t *id) {
  uint32_t bad;
  char safe[64], tmp[AA_TOKENIZER_MAX_TOKEN_BYTES * 4 + 1];
  size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
  memcpy(tmp, s, k);
  tmp[k] = '\0';
  aa_json_sanitize(safe, sizeof safe, tmp);
  if (n == 0 || bl_decode(byte_of, s, n, buf, AA_TOKENIZER_MAX_TOKEN_BYTES, blen, &bad) != 0 ||
      (*id = str_find(t, buf, *blen)) < 0)
    return aa_json_fail(c, AA_EINVAL, path, "\"%s\" is not a token of model.vocab", safe);
  return 0;
}

/* Reads model.merges: "a b" strings or ["a", "b"] pairs, rank = index. */
static int load_merges(const aa_json_ctx_t *c, const json_t *merges, aa_tokenizer_t *t,
                       const int byte_of[BL_ALPHABET]) {
  if (!merges) return aa_json_fail(c, AA_EINVAL, "model.merges", "required field is missing");
  if (!json_is_array(merges)) return aa_json_fail_type(c, "model.merges", "an array", merges);
  size_t n = json_array_size(merges);
  if (n > AA_TOKENIZER_MAX_MERGES)
    return aa_json_fail(c, AA_EINVAL, "model.merges", "holds %zu merges, at most %d are read", n,
                        AA_TOKENIZER_MAX_MERGES);
  t->pair_mask = table_size(n) - 1;
  if (!(t->pairs = malloc((t->pair_mask + 1) * sizeof *t->pairs)))
    return aa_error(AA_ENOMEM, "out of memory for %zu merges", n);
  for (size_t i = 0; i <= t->pair_mask; i++)
    t->pairs[i].key = EMPTY_KEY;
  unsigned char both[2 * AA_TOKENIZER_MAX_TOKEN_BYTES];
  for (size_t i = 0; i < n; i++) {
    char path[64];
    snprintf(path, sizeof path, "model.merges[%zu]", i);
    const json_t *m = json_array_get(merges, i);
    const char *a, *b;
    size_t na, nb;
    if (json_is_string(m)) {
      a = json_string_value(m);
      const char *sp = memchr(a, ' ', json_string_length(m));
      if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a)))
        return aa_json_fail(c, AA_EINVAL, path, "must be two tokens separated by one space");
      na = (size_t)(sp - a);
      b = sp + 1;
      nb = json_string_length(m) - na - 1;
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0));
      na = json_string_length(json_array_get(m, 0));
      b = json_string_value(json_array_get(m, 1));
      nb = json_string_length(json_array_get(m, 1));
    } else {
      return aa_json_fail_type(c, path, "a string \"a b\" or a pair [\"a\", \"b\"]", m);
    }
    size_t la, lb;
    int32_t ia, ib;
    int rc = merge_side(c, t, byte_of, path, a, na, both, &la, &ia);
    if (!rc) rc = merge_side(c, t, byte_of, path, b, nb, both + la, &lb, &ib);
    if (rc) return rc;
    int32_t merged = str_find(t, both, la + lb);
    if (merged < 0)
      return aa_json_fail(c, AA_EINVAL, path, "the merged token (ids %d and %d) is not in model.vocab", ia,
                          ib);
    pair_slot_t *s = pair_slot(t, pair_key(ia, ib));
    if (s->key != EMPTY_KEY) return aa_json_fail(c, AA_EINVAL, path, "repeats model.merges[%d]", s->rank);
    s->key = pair_key(ia, ib);
    s->rank = (int32_t)i;
    s->merged = merged;
  }
  return 0;
}

static int parse_root(const aa_json_ctx_t *c, const json_t *root, aa_tokenizer_t *t) {
  if (!json_is_object(root)) return aa_json_fail_type(c, "(top level)", "an object", root);
  const json_t *model = json_object_get(root, "model");
  if (!model) return aa_json_fail(c, AA_EINVAL, "model", "required field is missing");
  if (!json_is_object(model)) return aa_json_fail_type(c, "model", "an object", model);
  int rc = check_model(c, model, t);
  if (!rc) rc = check_pipeline(c, root, t);
  if (rc) return rc;
  const json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
  int32_t max_id = -1;
  if ((rc = scan_vocab(c, vocab, &max_id)) || (rc = scan_added(c, added, &max_id))) return rc;
  t->vocab_size = max_id + 1;
  t->str_mask = table_size(json_object_size(vocab)) - 1;
  t->tok = malloc((size_t)t->vocab_size * sizeof *t->tok);
  t->str_slots = calloc(t->str_mask + 1, sizeof *t->str_slots);
  if (!t->tok || !t->str_slots) return aa_error(AA_ENOMEM, "out of memory for %d tokens", t->vocab_size);
  for (int i = 0; i < t->vocab_size; i++)
    t->tok[i].len = -1;
  uint32_t cp_of[256];
  int byte_of[BL_ALPHABET];
  bl_tables(cp_of, byte_of);
  if ((rc = load_added(c, added, t)) || (rc = load_vocab(c, vocab, t, byte_of))) return rc;
  for (int b = 0; b < 256; b++) {
    unsigned char ch = (unsigned char)b;
    if ((t->byte_id[b] = str_find(t, &ch, 1)) < 0)
      return aa_json_fail(c, AA_EINVAL, "model.vocab",
                          "no token for byte 0x%02X (U+%04X in the ByteLevel alphabet); a byte-level vocab "
                          "holds all 256",
                          b, cp_of[b]);
  }
  return load_merges(c, json_object_get(model, "merges"), t, byte_of);
}

int aa_tokenizer_parse(aa_tokenizer_t **out, const char *json, size_t len, const char *origin) {
  json_t *root = NULL;
  int rc = aa_json_parse_text(json, len, AA_TOKENIZER_MAX_FILE_BYTES, origin, "a tokenizer",
                              "a tokenizer.json object", &root);
  if (rc) return rc;
  aa_tokenizer_t *t = calloc(1, sizeof *t);
  if (!t) {
    json_decref(root);
    return aa_error(AA_ENOMEM, "out of memory for a tokenizer");
  }
  aa_json_ctx_t c = {.origin = origin};
  rc = parse_root(&c, root, t);
  json_decref(root);
  if (rc) {
    aa_tokenizer_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

int aa_tokenizer_load(aa_tokenizer_t **out, const char *path) {
  char *buf;
  size_t len;
  int rc = aa_read_file(path, AA_TOKENIZER_MAX_FILE_BYTES, "a tokenizer", &buf, &len);
  if (rc) return rc;
  rc = aa_tokenizer_parse(out, buf, len, path);
  free(buf);
  return rc;
}

void aa_tokenizer_free(aa_tokenizer_t *t) {
  if (!t) return;
  free(t->tok);
  free(t->bytes);
  free(t->str_slots);
  free(t->pairs);
  free(t->added);
  free(t);
}

int aa_tokenizer_vocab_size(const aa_tokenizer_t *t) { return t->vocab_size; }

/* ---- Encoding ---------------------------------------------------------- */

/* A candidate merge of the symbol at pos with the one after it. */
typedef struct {
  int32_t rank;
  size_t pos;
} cand_t;

/* Growable ids plus the scratch of one piece's merging, reused across
 * pieces so an encode allocates O(log) times. */
typedef struct {
  int32_t *ids;
  size_t n, cap;
  int32_t *sym;        /* (piece) the symbol at each starting byte; -1 once merged away */
  size_t *next, *prev; /* SIZE_MAX: none */
  cand_t *heap;
  size_t scratch_cap, heap_n;
} enc_t;

static int push_id(enc_t *e, int32_t id) {
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 1024;
    int32_t *p = realloc(e->ids, cap * sizeof *p);
    if (!p) return aa_error(AA_ENOMEM, "out of memory for %zu token ids", cap);
    e->ids = p;
    e->cap = cap;
  }
  e->ids[e->n++] = id;
  return 0;
}

static int cand_less(cand_t a, cand_t b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(enc_t *e, cand_t x) {
  size_t i = e->heap_n++;
  while (i > 0 && cand_less(x, e->heap[(i - 1) / 2])) {
    e->heap[i] = e->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  e->heap[i] = x;
}

static cand_t heap_pop(enc_t *e) {
  cand_t top = e->heap[0], x = e->heap[--e->heap_n];
  if (e->heap_n == 0) return top;
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, m = SIZE_MAX;
    cand_t best = x;
    if (l < e->heap_n && cand_less(e->heap[l], best)) {
      m = l;
      best = e->heap[l];
    }
    if (l + 1 < e->heap_n && cand_less(e->heap[l + 1], best)) m = l + 1;
    if (m == SIZE_MAX) break;
    e->heap[i] = e->heap[m];
    i = m;
  }
  e->heap[i] = x;
  return top;
}

/* Queues the merge of the symbol at pos with its successor, if one exists. */
static void queue_pair(const aa_tokenizer_t *t, enc_t *e, size_t pos) {
  if (pos == SIZE_MAX || e->next[pos] == SIZE_MAX) return;
  const pair_slot_t *s = pair_slot(t, pair_key(e->sym[pos], e->sym[e->next[pos]]));
  if (s->key != EMPTY_KEY) heap_push(e, (cand_t){s->rank, pos});
}

/* BPE over one piece of n bytes: start from one symbol per byte and apply
 * the lowest-ranked merge present (leftmost first) until none applies.
 * Each merge queues at most two new candidates, so the heap holds at most
 * 3n entries; a stale entry (its pair changed) is skipped when popped. */
static int bpe_piece(const aa_tokenizer_t *t, enc_t *e, const unsigned char *p, size_t n) {
  if (n == 1) return push_id(e, t->byte_id[p[0]]);
  if (t->ignore_merges) {
    int32_t whole = n <= AA_TOKENIZER_MAX_TOKEN_BYTES ? str_find(t, p, n) : -1;
    if (whole >= 0) return push_id(e, whole);
  }
  if (n > e->scratch_cap) {
    size_t cap = e->scratch_cap ? e->scratch_cap : 64;
    while (cap < n)
      cap *= 2;
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    e->sym = malloc(cap * sizeof *e->sym);
    e->next = malloc(cap * sizeof *e->next);
    e->prev = malloc(cap * sizeof *e->prev);
    e->heap = malloc(3 * cap * sizeof *e->heap);
    e->scratch_cap = cap;
    if (!e->sym || !e->next || !e->prev || !e->heap) {
      e->scratch_cap = 0;
      return aa_error(AA_ENOMEM, "out of memory to merge a %zu-byte piece", n);
    }
  }
  for (size_t i = 0; i < n; i++) {
    e->sym[i] = t->byte_id[p[i]];
    e->prev[i] = i == 0 ? SIZE_MAX : i - 1;
    e->next[i] = i + 1 == n ? SIZE_MAX : i + 1;
  }
  e->heap_n = 0;
  for (size_t i = 0; i + 1 < n; i++)
    queue_pair(t, e, i);
  while (e->heap_n > 0) {
    cand_t c = heap_pop(e);
    size_t nx = e->next[c.pos];
    if (e->sym[c.pos] < 0 || nx == SIZE_MAX) continue;
    const pair_slot_t *s = pair_slot(t, pair_key(e->sym[c.pos], e->sym[nx]));
    if (s->key == EMPTY_KEY || s->rank != c.rank) continue;
    e->sym[c.pos] = s->merged;
    e->sym[nx] = -1;
    e->next[c.pos] = e->next[nx];
    if (e->next[nx] != SIZE_MAX) e->prev[e->next[nx]] = c.pos;
    queue_pair(t, e, e->prev[c.pos]);
    queue_pair(t, e, c.pos);
  }
  for (size_t i = 0; i != SIZE_MAX; i = e->next[i]) {
    int rc = push_id(e, e->sym[i]);
    if (rc) return rc;
  }
  return 0;
}

/* Splits text without added tokens into pieces and merges each. */
static int encode_plain(const aa_tokenizer_t *t, enc_t *e, const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t end = t->llama3_split ? piece_end_llama3(s, n, i) : piece_end(s, n, i);
    int rc = bpe_piece(t, e, s + i, end - i);
    if (rc) return rc;
    i = end;
  }
  return 0;
}

/* The longest added token that starts at s[0..n), or -1. */
static int32_t added_at(const aa_tokenizer_t *t, const unsigned char *s, size_t n, size_t *len) {
  int32_t best = -1;
  *len = 0;
  for (int k = 0; k < t->n_added; k++) {
    const span_t *sp = &t->tok[t->added[k]];
    if ((size_t)sp->len <= n && (size_t)sp->len > *len &&
        memcmp(t->bytes + sp->off, s, (size_t)sp->len) == 0) {
      best = t->added[k];
      *len = (size_t)sp->len;
    }
  }
  return best;
}

int aa_tokenizer_encode(const aa_tokenizer_t *t, const unsigned char *text, size_t len, int32_t **out_ids,
                        size_t *out_n) {
  enc_t e = {0};
  int rc = 0;
  size_t start = 0;
  for (size_t i = 0; i < len && !rc;) {
    size_t alen;
    int32_t id = t->added_first[text[i]] ? added_at(t, text + i, len - i, &alen) : -1;
    if (id < 0) {
      i++;
      continue;
    }
    rc = encode_plain(t, &e, text + start, i - start);
    if (!rc) rc = push_id(&e, id);
    i += alen;
    start = i;
  }
  if (!rc) rc = encode_plain(t, &e, text + start, len - start);
  free(e.sym);
  free(e.next);
  free(e.prev);
  free(e.heap);
  if (rc) {
    free(e.ids);
    return rc;
  }
  *out_ids = e.ids;
  *out_n = e.n;
  return 0;
}

int aa_tokenizer_decode(const aa_tokenizer_t *t, const int32_t *ids, size_t n, unsigned char **out,
                        size_t *out_len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab_size || t->tok[ids[i]].len < 0)
      return aa_error(AA_EINVAL, "token id %d at index %zu is not a token of this tokenizer", ids[i], i);
    total += (size_t)t->tok[ids[i]].len;
  }
  unsigned char *buf = malloc(total + 1);
  if (!buf) return aa_error(AA_ENOMEM, "out of memory for %zu decoded bytes", total);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    const span_t *sp = &t->tok[ids[i]];
    memcpy(buf + o, t->bytes + sp->off, (size_t)sp->len);
    o += (size_t)sp->len;
  }
  buf[o] = '\0';
  *out = buf;
  *out_len = o;
  return 0;
}

/* ---- Shards ------------------------------------------------------------ */

/* Appends n ids to the growing array *all (length *len). */
static int append_ids(int32_t **all, size_t *len, const int32_t *ids, size_t n) {
  if (n == 0) return 0;
  int32_t *p = realloc(*all, (*len + n) * sizeof *p);
  if (!p) return aa_error(AA_ENOMEM, "out of memory for %zu token ids", *len + n);
  memcpy(p + *len, ids, n * sizeof *p);
  *all = p;
  *len += n;
  return 0;
}

int aa_tokenizer_build_shards(const aa_tokenizer_t *t, const char *const *inputs, int n_inputs,
                              const char *train_out, const char *val_out, double val_fraction) {
  if (!train_out || !val_out) return aa_error(AA_EINVAL, "train and val output paths are required");
  if (!strcmp(train_out, val_out))
    return aa_error(AA_EINVAL, "train and val outputs are the same file (%s)", train_out);
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    return aa_error(AA_EINVAL, "val_fraction %g is outside [0, 1)", val_fraction);
  if (!inputs || n_inputs < 1) return aa_error(AA_EINVAL, "no input text files");
  int32_t *all = NULL;
  size_t n_all = 0, text_total = 0;
  int rc = 0;
  for (int i = 0; i < n_inputs && !rc; i++) {
    char *text;
    size_t len;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = aa_read_file(inputs[i], TEXT_MAX_BYTES - text_total, "the rest of the text inputs (1 GiB in all)",
                      &text, &len);
    if (rc) break;
    text_total += len;
    rc = aa_tokenizer_encode(t, (const unsigned char *)text, len, &ids, &n);
    free(text);
    if (!rc) rc = append_ids(&all, &n_all, ids, n);
    free(ids);
  }
  if (!rc && n_all == 0) rc = aa_error(AA_EINVAL, "the input files are empty");
  size_t n_val = (size_t)floor((double)n_all * val_fraction);
  if (!rc && n_val >= n_all)
    rc = aa_error(AA_EINVAL, "train split is empty: %zu tokens with val_fraction %g", n_all, val_fraction);
  if (!rc) rc = aa_shard_write(train_out, all, n_all - n_val, t->vocab_size);
  if (!rc) rc = aa_shard_write(val_out, all + (n_all - n_val), n_val, t->vocab_size);
  free(all);
  return rc;
}
