/* The shared tables behind a strategy's variable-length fields (the rank
 * order, a custom pipeline cut): each distinct list is stored once for the
 * life of the process, so a strategy holds a pointer to it and stays a
 * small value that is copied by assignment (a search, a plan and the store
 * hold thousands to millions of them). A list is never changed or freed
 * once stored, so every copy of a strategy may keep pointing at it.
 *
 * The tables are bounded (AA__INTERN_BYTES_MAX): a long-lived planner that
 * peers keep sending new rank orders refuses the one past the bound, with
 * the reason, rather than growing without end. */
#include "strategy_internal.h"

#include "../common/aa.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  struct entry *next;
  uint64_t hash;
  size_t bytes;
  _Alignas(max_align_t) unsigned char data[];
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t **buckets; /* chained by hash; n_buckets a power of two */
static size_t n_buckets, n_entries, held;

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Doubles the bucket array (keeping every entry); false without memory. */
static bool grow(void) {
  size_t n = n_buckets ? n_buckets * 2 : 64;
  entry_t **b = calloc(n, sizeof *b);
  if (!b) return false;
  for (size_t i = 0; i < n_buckets; i++)
    for (entry_t *e = buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  free(buckets);
  buckets = b;
  n_buckets = n;
  return true;
}

int aa__intern(const void *data, size_t bytes, const char *what, const void **out) {
  uint64_t h = fnv1a(data, bytes);
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (entry_t *e = n_buckets ? buckets[h & (n_buckets - 1)] : NULL; e; e = e->next)
    if (e->hash == h && e->bytes == bytes && !memcmp(e->data, data, bytes)) {
      *out = e->data;
      goto done;
    }
  if (held + bytes > AA__INTERN_BYTES_MAX) {
    rc = aa_error(
        AA_EINVAL,
        "%s: this process already holds %zu distinct lists (%zu bytes, the most it keeps is %d MiB); "
        "restart it to start afresh",
        what, n_entries, held, AA__INTERN_BYTES_MAX >> 20);
    goto done;
  }
  if (n_entries >= n_buckets && !grow()) goto oom;
  entry_t *e = malloc(sizeof *e + bytes);
  if (!e) goto oom;
  e->hash = h;
  e->bytes = bytes;
  memcpy(e->data, data, bytes);
  e->next = buckets[h & (n_buckets - 1)];
  buckets[h & (n_buckets - 1)] = e;
  n_entries++;
  held += bytes;
  *out = e->data;
  goto done;
oom:
  rc = aa_error(AA_ENOMEM, "%s: out of memory", what);
done:
  pthread_mutex_unlock(&lock);
  return rc;
}

int aa_strategy_set_rank_order(aa_strategy_t *s, const uint16_t *ranks, int n) {
  if (n == 0) {
    s->nranks = 0;
    s->rank_order = NULL;
    return 0;
  }
  if (n < 0 || n > AA_STRATEGY_WORLD_MAX)
    return aa_error(AA_EINVAL, "parallel.rank_order: must list 1 to %d ranks (got %d)", AA_STRATEGY_WORLD_MAX,
                    n);
  const void *r;
  int rc = aa__intern(ranks, (size_t)n * sizeof *ranks, "parallel.rank_order", &r);
  if (rc) return rc;
  s->rank_order = r;
  s->nranks = n;
  return 0;
}

int aa_strategy_set_bounds(aa_strategy_t *s, const int *bounds, int n) {
  if (n == 0) {
    s->n_bounds = 0;
    s->bounds = NULL;
    return 0;
  }
  if (n < 0 || n > AA_STRATEGY_STAGES_MAX + 1)
    return aa_error(AA_EINVAL, "partition: must list between 2 and %d block boundaries (got %d)",
                    AA_STRATEGY_STAGES_MAX + 1, n);
  const void *b;
  int rc = aa__intern(bounds, (size_t)n * sizeof *bounds, "partition", &b);
  if (rc) return rc;
  s->bounds = b;
  s->n_bounds = n;
  return 0;
}
