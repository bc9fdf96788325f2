/* The byte-level tokenizer: text files to train/val shards, and the
 * synthetic English-like corpus the bundled example trains on.
 * docs/data-format.md describes the grammar and the split. */
#include "common/aa.h"
#include "engine/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Text inputs are held in memory as bytes and once more as int32 ids, so
 * their total is capped well below what a small machine can hold. */
#define TEXT_MAX_BYTES ((size_t)1 << 30)

static int check_split_args(const char *train_out, const char *val_out, double val_fraction) {
  if (!train_out || !val_out) return aa_error(AA_EINVAL, "train and val output paths are required");
  if (!strcmp(train_out, val_out))
    return aa_error(AA_EINVAL, "train and val outputs are the same file (%s)", train_out);
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    return aa_error(AA_EINVAL, "val_fraction %g is outside [0, 1)", val_fraction);
  return 0;
}

/* Byte-tokenizes text[0..n) and writes the first n - floor(n*f) bytes to
 * train_out and the rest to val_out. Fails if the train part is empty. */
static int write_split(const unsigned char *text, size_t n, const char *train_out, const char *val_out,
                       double val_fraction) {
  size_t n_val = (size_t)floor((double)n * val_fraction);
  if (n_val > n) n_val = n;
  size_t n_train = n - n_val;
  if (n_train == 0)
    return aa_error(AA_EINVAL, "train split is empty: %zu bytes of text with val_fraction %g", n,
                    val_fraction);
  int32_t *ids = malloc(n * sizeof *ids);
  if (!ids) return aa_error(AA_ENOMEM, "out of memory for %zu tokens", n);
  for (size_t i = 0; i < n; i++)
    ids[i] = text[i];
  int rc = aa_shard_write(train_out, ids, n_train, AA_BYTE_VOCAB);
  if (!rc) rc = aa_shard_write(val_out, ids + n_train, n_val, AA_BYTE_VOCAB);
  free(ids);
  return rc;
}

/* Appends the whole of `path` to *buf (length *len), growing it. The read
 * is bounded by the size fstat reports, so a file that grows while it is
 * read cannot overrun the buffer; the running total is capped. */
static int append_file(unsigned char **buf, size_t *len, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return aa_error(AA_ENOENT, "%s: no such file", path);
    return aa_error(AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat st;
  int rc = 0;
  unsigned char *grown = NULL;
  if (fstat(fileno(f), &st) != 0) {
    rc = aa_error(AA_EIO, "%s: cannot stat: %s", path, strerror(errno));
    goto cleanup;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = aa_error(AA_EIO, "%s: not a regular file", path);
    goto cleanup;
  }
  size_t size = (size_t)st.st_size;
  if ((uint64_t)st.st_size > TEXT_MAX_BYTES || size > TEXT_MAX_BYTES - *len) {
    rc = aa_error(AA_EINVAL, "%s: inputs total more than %zu bytes; build shards from smaller parts", path,
                  TEXT_MAX_BYTES);
    goto cleanup;
  }
  grown = realloc(*buf, *len + size + 1);
  if (!grown) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory for %zu bytes", path, *len + size);
    goto cleanup;
  }
  *buf = grown;
  if (fread(*buf + *len, 1, size, f) != size) {
    rc = ferror(f) ? aa_error(AA_EIO, "%s: read failed: %s", path, strerror(errno))
                   : aa_error(AA_EIO, "%s: file shrank while being read", path);
    goto cleanup;
  }
  *len += size;
cleanup:
  fclose(f);
  return rc;
}

int aa_data_build_text(const char *const *inputs, int n_inputs, const char *train_out, const char *val_out,
                       double val_fraction) {
  int rc = check_split_args(train_out, val_out, val_fraction);
  if (rc) return rc;
  if (!inputs || n_inputs < 1) return aa_error(AA_EINVAL, "no input text files");
  unsigned char *text = NULL;
  size_t len = 0;
  for (int i = 0; i < n_inputs && !rc; i++)
    rc = append_file(&text, &len, inputs[i]);
  if (!rc && len == 0) rc = aa_error(AA_EINVAL, "the input files are empty");
  if (!rc) rc = write_split(text, len, train_out, val_out, val_fraction);
  free(text);
  return rc;
}

/* ---- synthetic corpus ------------------------------------------------
 * A small probabilistic grammar over fixed words. The structure a model
 * can learn: the words themselves, a/an before vowels, subject-verb
 * agreement (the cat sees / the cats see / does the cat see?), plural
 * forms after numbers, "eats" taking only food, a capital letter after a
 * sentence end. All choices use integer arithmetic on aa_rng_u64, so the
 * bytes are the same on every platform for a given seed. */

typedef struct {
  const char *sg, *pl;
} word_pair_t;

static const word_pair_t animates[] = {
    {"cat", "cats"},     {"dog", "dogs"},           {"bird", "birds"},     {"fox", "foxes"},
    {"owl", "owls"},     {"child", "children"},     {"farmer", "farmers"}, {"teacher", "teachers"},
    {"robot", "robots"}, {"elephant", "elephants"},
};
static const word_pair_t things[] = {
    {"ball", "balls"}, {"box", "boxes"}, {"hat", "hats"}, {"book", "books"}, {"umbrella", "umbrellas"},
};
static const word_pair_t foods[] = {{"apple", "apples"}, {"egg", "eggs"}, {"cake", "cakes"}};
/* Verbs as {third person singular, base form}. */
static const word_pair_t transitive[] = {
    {"sees", "see"},      {"likes", "like"},    {"chases", "chase"}, {"finds", "find"},
    {"carries", "carry"}, {"watches", "watch"}, {"wants", "want"},
};
static const word_pair_t intransitive[] = {
    {"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"}, {"waits", "wait"}};
static const char *const adjectives[] = {"small", "big", "red", "old", "happy", "quiet", "orange", "angry"};
static const char *const places[] = {"in the park",    "near the river", "on the hill",
                                     "under the tree", "at home",        "in the garden"};
static const char *const number_words[] = {"two", "three", "four", "five", "six", "seven"};
static const char *const connectors[] = {", and ", " because ", ", but ", ", so "};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SENTENCE_MAX 512

typedef struct {
  char s[SENTENCE_MAX];
  size_t n;
} sentence_t;

/* The longest sentence the grammar makes is about 200 bytes; a longer one
 * would be cut, never overrun. */
static void put(sentence_t *b, const char *w) {
  size_t k = strlen(w);
  if (k > SENTENCE_MAX - 1 - b->n) k = SENTENCE_MAX - 1 - b->n;
  memcpy(b->s + b->n, w, k);
  b->n += k;
  b->s[b->n] = '\0';
}

static unsigned pick(aa_rng_t *r, unsigned n) { return (unsigned)(aa_rng_u64(r) % n); }

/* Skewed toward low indices (the min of two uniform draws), so the first
 * words of each list are common and the last rare, as in real text. */
static unsigned pick_skewed(aa_rng_t *r, unsigned n) {
  unsigned a = pick(r, n), b = pick(r, n);
  return a < b ? a : b;
}

static int chance(aa_rng_t *r, unsigned percent) { return pick(r, 100) < percent; }

static int starts_with_vowel(const char *w) { return strchr("aeiou", w[0]) != NULL; }

typedef enum { NP_ANIMATE, NP_OBJECT, NP_FOOD } np_kind_t;

/* Appends a noun phrase: determiner or number, optional adjective, noun.
 * An indefinite phrase ("there is a ...") never takes "the", "this" or
 * "every". Returns 1 if the phrase is plural. */
static int noun_phrase(sentence_t *b, aa_rng_t *r, np_kind_t kind, int indefinite) {
  const word_pair_t *noun;
  if (kind == NP_FOOD) {
    noun = &foods[pick_skewed(r, COUNT(foods))];
  } else if (kind == NP_OBJECT && chance(r, 50)) {
    noun = &things[pick_skewed(r, COUNT(things))];
  } else {
    noun = &animates[pick_skewed(r, COUNT(animates))];
  }
  const char *adj = chance(r, 35) ? adjectives[pick_skewed(r, COUNT(adjectives))] : NULL;
  const char *first = adj ? adj : noun->sg;
  int plural = chance(r, 30);
  if (!plural) {
    unsigned d = indefinite ? 60 : pick(r, 100);
    put(b, d < 55   ? "the "
           : d < 85 ? (starts_with_vowel(first) ? "an " : "a ")
           : d < 95 ? "this "
                    : "every ");
  } else {
    unsigned d = indefinite ? 40 + pick(r, 60) : pick(r, 100);
    if (d < 40) {
      put(b, "the ");
    } else if (d < 60) {
      put(b, "some ");
    } else if (d < 70) {
      put(b, "many ");
    } else if (d < 90) {
      put(b, number_words[pick(r, COUNT(number_words))]);
      put(b, " ");
    } else {
      char digit[3] = {(char)('2' + pick(r, 8)), ' ', '\0'};
      put(b, digit);
    }
  }
  if (adj) {
    put(b, adj);
    put(b, " ");
  }
  put(b, plural ? noun->pl : noun->sg);
  return plural;
}

/* One clause without a final punctuation mark. */
static void clause(sentence_t *b, aa_rng_t *r) {
  unsigned form = pick(r, 100);
  if (form < 55) { /* the small cat sees a red ball [in the park] */
    int pl = noun_phrase(b, r, NP_ANIMATE, 0);
    unsigned v = pick_skewed(r, COUNT(transitive) + 1);
    put(b, " ");
    if (v == COUNT(transitive)) {
      put(b, pl ? "eat " : "eats ");
      noun_phrase(b, r, NP_FOOD, 0);
    } else {
      put(b, pl ? transitive[v].pl : transitive[v].sg);
      put(b, " ");
      noun_phrase(b, r, NP_OBJECT, 0);
    }
    if (chance(r, 25)) {
      put(b, " ");
      put(b, places[pick_skewed(r, COUNT(places))]);
    }
  } else if (form < 75) { /* the owls sleep near the river */
    int pl = noun_phrase(b, r, NP_ANIMATE, 0);
    const word_pair_t *v = &intransitive[pick_skewed(r, COUNT(intransitive))];
    put(b, " ");
    put(b, pl ? v->pl : v->sg);
    if (chance(r, 60)) {
      put(b, " ");
      put(b, places[pick_skewed(r, COUNT(places))]);
    }
  } else if (form < 90) { /* the dogs are happy */
    int pl = noun_phrase(b, r, NP_ANIMATE, 0);
    put(b, pl ? " are " : " is ");
    put(b, adjectives[pick_skewed(r, COUNT(adjectives))]);
  } else { /* there are 3 eggs in the box */
    sentence_t np = {.n = 0};
    int pl = noun_phrase(&np, r, chance(r, 50) ? NP_FOOD : NP_OBJECT, 1);
    put(b, pl ? "there are " : "there is ");
    put(b, np.s);
    put(b, " ");
    put(b, places[pick_skewed(r, COUNT(places))]);
  }
}

/* One sentence with its capital letter, end mark and trailing separator. */
static void sentence(sentence_t *b, aa_rng_t *r) {
  b->n = 0;
  b->s[0] = '\0';
  if (chance(r, 10)) { /* does the cat see the ball? / do the cats see ...? */
    sentence_t np = {.n = 0};
    int pl = noun_phrase(&np, r, NP_ANIMATE, 0);
    put(b, pl ? "do " : "does ");
    put(b, np.s);
    put(b, " ");
    put(b, transitive[pick_skewed(r, COUNT(transitive))].pl);
    put(b, " ");
    noun_phrase(b, r, NP_OBJECT, 0);
    put(b, "?");
  } else {
    clause(b, r);
    if (chance(r, 25)) {
      put(b, connectors[pick(r, COUNT(connectors))]);
      clause(b, r);
    }
    put(b, ".");
  }
  if (b->s[0] >= 'a' && b->s[0] <= 'z') b->s[0] = (char)(b->s[0] - 'a' + 'A');
  unsigned sep = pick(r, 100);
  put(b, sep < 3 ? "\n\n" : sep < 20 ? "\n" : " ");
}

int aa_data_synth(const char *train_out, const char *val_out, size_t n_bytes, double val_fraction,
                  uint64_t seed) {
  int rc = check_split_args(train_out, val_out, val_fraction);
  if (rc) return rc;
  if (n_bytes < 1 || n_bytes > TEXT_MAX_BYTES)
    return aa_error(AA_EINVAL, "synthetic corpus size %zu bytes is outside [1, %zu]", n_bytes,
                    TEXT_MAX_BYTES);
  unsigned char *text = malloc(n_bytes);
  if (!text) return aa_error(AA_ENOMEM, "out of memory for %zu bytes of synthetic text", n_bytes);
  aa_rng_t r;
  aa_rng_seed(&r, seed);
  sentence_t s;
  for (size_t len = 0; len < n_bytes;) {
    sentence(&s, &r);
    size_t k = s.n < n_bytes - len ? s.n : n_bytes - len;
    memcpy(text + len, s.s, k);
    len += k;
  }
  rc = write_split(text, n_bytes, train_out, val_out, val_fraction);
  free(text);
  return rc;
}
