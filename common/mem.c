/* Memory accounting (contract in mem.h). */
#include "mem.h"

#include "aa.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEM_ALIGN 64

static const char *const kind_names[AA_MEM_NKINDS] = {"params", "grads", "optim", "acts", "workspace"};

/* The longer names used in error messages ("12.0 MiB of activations"). */
static const char *const kind_nouns[AA_MEM_NKINDS] = {"parameters", "gradients", "optimizer state",
                                                      "activations", "workspace"};

void aa_mem_init(aa_mem_t *mem, size_t limit) {
  memset(mem, 0, sizeof *mem);
  mem->limit = limit;
}

const char *aa_mem_kind_name(aa_mem_kind_t kind) {
  return (unsigned)kind < AA_MEM_NKINDS ? kind_names[kind] : "?";
}

int aa_mem_check(const aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes) {
  if ((unsigned)kind >= AA_MEM_NKINDS) return aa_error(AA_EINVAL, "invalid memory kind %d", (int)kind);
  char req[32], lim[32], used[32];
  /* total + bytes <= limit, written without overflow. */
  if (mem && bytes && mem->limit && (bytes > mem->limit || mem->total > mem->limit - bytes))
    return aa_error(AA_EOOM, "out of memory: %s of %s would exceed the memory limit of %s (in use: %s)",
                    aa_mem_fmt(req, bytes), kind_nouns[kind], aa_mem_fmt(lim, mem->limit),
                    aa_mem_fmt(used, mem->total));
  return 0;
}

int aa_mem_charge(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes) {
  int rc = aa_mem_check(mem, kind, bytes);
  if (rc || !mem) return rc;
  mem->cur[kind] += bytes;
  mem->total += bytes;
  if (mem->cur[kind] > mem->peak[kind]) mem->peak[kind] = mem->cur[kind];
  if (mem->total > mem->peak_total) mem->peak_total = mem->total;
  return 0;
}

/* Releasing more than was charged is a caller bug (wrong size or kind),
 * hence asserts rather than errors. */
void aa_mem_uncharge(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes) {
  if (!mem) return;
  assert((unsigned)kind < AA_MEM_NKINDS);
  assert(mem->cur[kind] >= bytes && mem->total >= bytes);
  mem->cur[kind] -= bytes;
  mem->total -= bytes;
}

/* Refuses before allocating: the limit is checked on the requested bytes
 * (the accounted size). The allocation itself is rounded up to a multiple
 * of the alignment, which C11's aligned_alloc requires. */
int aa_mem_alloc(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void **out) {
  if ((unsigned)kind >= AA_MEM_NKINDS)
    return aa_error(AA_EINVAL, "aa_mem_alloc: invalid memory kind %d", (int)kind);
  if (bytes == 0) {
    *out = NULL;
    return 0;
  }
  int rc = aa_mem_check(mem, kind, bytes);
  if (rc) return rc;
  void *p = NULL;
  if (bytes <= SIZE_MAX - (MEM_ALIGN - 1)) {
    size_t rounded = (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
    p = aligned_alloc(MEM_ALIGN, rounded);
    if (p) memset(p, 0, rounded);
  }
  if (!p) {
    char req[32];
    return aa_error(AA_ENOMEM, "out of host memory: could not allocate %s of %s", aa_mem_fmt(req, bytes),
                    kind_nouns[kind]);
  }
  aa_mem_charge(mem, kind, bytes); /* within the limit: checked above */
  *out = p;
  return 0;
}

void aa_mem_free(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void *p) {
  free(p);
  if (p) aa_mem_uncharge(mem, kind, bytes);
}

/* Whole bytes below 1 KiB, else one decimal in the largest binary unit
 * that keeps the printed number below 1024 ("1023.96 KiB" would print as
 * "1024.0 KiB", so that moves up to "1.0 MiB"). */
const char *aa_mem_fmt(char buf[32], size_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, 32, "%zu B", bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  size_t u = 0;
  while (v >= 1023.95 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, 32, "%.1f %s", v, units[u]);
  return buf;
}

/* Digits first (at least one, no sign, no spaces), then exactly one of the
 * suffixes in the table or nothing. */
int aa_mem_parse_bytes(const char *s, size_t *out) {
  static const struct {
    const char *suffix;
    size_t base;
    int power;
  } suffixes[] = {
      {"", 1, 0},       {"K", 1024, 1},   {"M", 1024, 2},   {"G", 1024, 3},   {"T", 1024, 4},
      {"KiB", 1024, 1}, {"MiB", 1024, 2}, {"GiB", 1024, 3}, {"TiB", 1024, 4}, {"KB", 1000, 1},
      {"MB", 1000, 2},  {"GB", 1000, 3},  {"TB", 1000, 4},
  };
  if (!s) return aa_error(AA_EINVAL, "byte count: missing");
  const char *p = s;
  size_t v = 0;
  if (*p < '0' || *p > '9') return aa_error(AA_EINVAL, "byte count '%s': expected a non-negative integer", s);
  for (; *p >= '0' && *p <= '9'; p++) {
    size_t d = (size_t)(*p - '0');
    if (v > (SIZE_MAX - d) / 10) return aa_error(AA_EINVAL, "byte count '%s': too large", s);
    v = v * 10 + d;
  }
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    if (strcmp(p, suffixes[i].suffix) != 0) continue;
    for (int k = 0; k < suffixes[i].power; k++) {
      if (v > SIZE_MAX / suffixes[i].base) return aa_error(AA_EINVAL, "byte count '%s': too large", s);
      v *= suffixes[i].base;
    }
    *out = v;
    return 0;
  }
  return aa_error(AA_EINVAL,
                  "byte count '%s': unknown suffix '%s' (K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB or TB)",
                  s, p);
}
