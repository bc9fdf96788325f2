/* The group of one (comm.h, backend "self"): what a single process trains
 * over, so the engine has one code path whatever the world size.
 *
 * Over one rank every collective is the identity: a reduction of one
 * operand is that operand (a sum of one fp32 value, divided by 1 for AVG,
 * rounded back to its own dtype), a scatter or gather of one slice is the
 * slice, a broadcast from rank 0 is its buffer. So a call copies send to
 * recv when they differ and touches nothing in place; it never waits, and
 * needs no rendezvous. In-place calls therefore serve device memory too; an
 * out-of-place call copies with memcpy, so its buffers must be host memory.
 *
 * A family (the group and every group split from it) shares one abort
 * word, counted by reference since a sub-group may outlive its parent. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

struct aa__self {
  int refs;           /* handles on the family (its users take turns, comm.h) */
  atomic_int aborted; /* set by aa_comm_abort, maybe from a signal handler or another thread */
};

/* A new handle on family f; the caller counts it in f->refs. */
static aa_comm_t *handle(aa__self_t *f) {
  aa_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->world = 1;
  c->self = f;
  return c;
}

int aa_comm_self(aa_comm_t **out) {
  if (!out) return aa_error(AA_EINVAL, "aa_comm_self: NULL argument");
  aa__self_t *f = calloc(1, sizeof *f);
  aa_comm_t *c = f ? handle(f) : NULL;
  if (!c) {
    free(f);
    return aa_error(AA_ENOMEM, "aa_comm_self: out of memory");
  }
  f->refs = 1;
  *out = c;
  return 0;
}

int aa__self_split(aa_comm_t *parent, int color, aa_comm_t **out) {
  if (color < 0) {
    *out = NULL;
    return 0;
  }
  aa_comm_t *c = handle(parent->self);
  if (!c) return aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
  parent->self->refs++;
  *out = c;
  return 0;
}

int aa__self_check(const aa__self_t *f, const char *what) {
  if (!atomic_load(&f->aborted)) return 0;
  return aa_error(AA_ECANCELLED, "%s: rank 0 of 1: the group was aborted (aa_comm_abort)", what);
}

void aa__self_abort(aa__self_t *f) { atomic_store(&f->aborted, 1); }

int aa__self_copy(const void *send, void *recv, size_t bytes) {
  if (send != recv) memcpy(recv, send, bytes);
  return 0;
}

void aa__self_release(aa__self_t *f) {
  if (--f->refs == 0) free(f);
}
