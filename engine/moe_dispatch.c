/* Expert parallelism's token dispatcher (moe_dispatch.h). */
#include "moe_dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "../common/aa.h"
#include "../kernels/cpu/cpu_moe.h"

int aa_moe_dispatch_init(aa_moe_dispatch_t *d, aa_comm_t *group, int E, int cap, int room, size_t row_floats,
                         aa_mem_t *mem) {
  memset(d, 0, sizeof *d);
  const int ep = aa_comm_world(group);
  if (E < 1 || E > AA_MOE_MAX_EXPERTS || ep < 1 || E % ep)
    return aa_error(AA_EINVAL, "moe dispatch: %d experts over an expert group of %d ranks", E, ep);
  if (cap < 0 || cap > AA_MOE_MAX_SLOTS || room < 0 || room > cap)
    return aa_error(AA_EINVAL, "moe dispatch: room for %d rows of at most %d", room, cap);
  d->cap = cap;
  d->room = room;
  d->row_floats = row_floats;
  d->mem = mem;
  d->group = group;
  d->ep = ep;
  d->me = aa_comm_rank(group);
  d->E = E;
  d->El = E / ep;
  d->route = malloc(sizeof(int32_t) * (size_t)(E + 1));
  d->counts = malloc(sizeof(int32_t) * (size_t)E);
  d->offsets = malloc(sizeof(int32_t) * (size_t)(d->El + 1));
  d->src = malloc(sizeof(int32_t) * (size_t)(E + 1));
  d->scratch = malloc(sizeof(size_t) * 4 * (size_t)ep);
  d->fcounts = malloc(sizeof(float) * 4 * (size_t)E);
  if (!d->route || !d->counts || !d->offsets || !d->src || !d->scratch || !d->fcounts) {
    aa_moe_dispatch_free(d);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  return 0;
}

int aa_moe_dispatch_backend(aa_moe_dispatch_t *d, const aa_ops_t *ops) {
  if (!ops || ops == aa_ops_cpu() || d->ops) return 0;
  int rc = ops->alloc((void **)&d->dcounts, sizeof(float) * 4 * (size_t)d->E);
  if (rc) return aa_error_wrap(rc, "moe dispatch: the counts' buffer on %s", ops->name);
  d->ops = ops;
  return 0;
}

void aa_moe_dispatch_free(aa_moe_dispatch_t *d) {
  free(d->route);
  free(d->counts);
  free(d->offsets);
  free(d->src);
  free(d->scratch);
  free(d->fcounts);
  if (d->ops) d->ops->free(d->dcounts);
  if (d->over) {
    if (d->ops)
      d->ops->free(d->over);
    else
      free(d->over);
    aa_mem_uncharge(d->mem, AA_MEM_ACTS, (size_t)d->over_rows * d->row_floats * sizeof(float));
  }
  memset(d, 0, sizeof *d);
}

/* Grows the overflow to rows rows (rows > room), charged as activations. */
static int grow(aa_moe_dispatch_t *d, int rows) {
  if (rows <= d->over_rows) return 0;
  const size_t old = (size_t)d->over_rows * d->row_floats * sizeof(float);
  const size_t bytes = (size_t)rows * d->row_floats * sizeof(float);
  int rc = aa_mem_check(d->mem, AA_MEM_ACTS, bytes - old);
  if (rc) return aa_error_wrap(rc, "moe dispatch: %d rows arrive, room for %d", rows, d->room);
  float *p = NULL;
  if (d->ops) {
    if ((rc = d->ops->alloc((void **)&p, bytes)))
      return aa_error_wrap(rc, "moe dispatch: %d rows arrive, room for %d", rows, d->room);
    d->ops->free(d->over);
  } else {
    if (!(p = malloc(bytes ? bytes : 1)))
      return aa_error(AA_ENOMEM, "moe dispatch: out of memory for %d rows", rows);
    free(d->over);
  }
  d->over = p;
  d->over_rows = rows;
  d->grown++;
  aa_mem_charge(d->mem, AA_MEM_ACTS, bytes - old);
  return 0;
}

int aa_moe_dispatch_plan(aa_moe_dispatch_t *d, const int32_t *offsets) {
  const int ep = d->ep, El = d->El;
  size_t *sc = d->scratch, *so = d->scratch + ep, *rc_ = d->scratch + 2 * ep, *ro = d->scratch + 3 * ep;
  float *send = d->fcounts, *recv = d->fcounts + 2 * d->E;
  memcpy(d->route, offsets, sizeof(int32_t) * (size_t)(d->E + 1));
  d->sent = offsets[d->E] - offsets[0];
  /* One exchange of every local expert's count: peer p gets the counts of
   * its experts [p El, (p + 1) El), each as its low and high 16 bits (floats
   * hold both exactly), so one all_to_all_v of the rows' own type moves them. */
  for (int e = 0; e < d->E; e++) {
    const int32_t n = offsets[e + 1] - offsets[e];
    send[2 * e] = (float)(n & 0xffff);
    send[2 * e + 1] = (float)(n >> 16);
  }
  for (int p = 0; p < ep; p++) {
    sc[p] = rc_[p] = 2 * (size_t)El;
    so[p] = ro[p] = 2 * (size_t)El * (size_t)p;
  }
  double t0 = aa_now();
  int rc;
  if (d->ops) {
    /* Through the backend's memory (an NCCL group takes device pointers). */
    float *dsend = d->dcounts, *drecv = d->dcounts + 2 * d->E;
    rc = d->ops->upload(dsend, send, sizeof(float) * 2 * (size_t)d->E);
    if (!rc) rc = d->ops->sync();
    if (!rc) rc = aa_comm_all_to_all_v(d->group, dsend, sc, so, drecv, rc_, ro, AA_F32);
    if (!rc) rc = d->ops->download(recv, drecv, sizeof(float) * 2 * (size_t)d->E);
  } else {
    rc = aa_comm_all_to_all_v(d->group, send, sc, so, recv, rc_, ro, AA_F32);
  }
  d->seconds += aa_now() - t0;
  if (rc) return aa_error_wrap(rc, "moe dispatch: the counts");
  for (int s = 0; s < ep; s++)
    for (int j = 0; j < El; j++) {
      /* A peer's count: bounded before it places any row. */
      const float lo = recv[2 * (s * El + j)], hi = recv[2 * (s * El + j) + 1];
      if (!(lo >= 0 && lo < 65536 && hi >= 0 && hi <= (float)(AA_MOE_MAX_SLOTS >> 16)) ||
          lo != (float)(int)lo || hi != (float)(int)hi ||
          (int64_t)hi * 65536 + (int64_t)lo > AA_MOE_MAX_SLOTS)
        return aa_error(AA_EINVAL, "moe dispatch: rank %d sends a bad row count (%g, %g) to expert %d", s, lo,
                        hi, d->me * El + j);
      d->counts[s * El + j] = (int32_t)hi * 65536 + (int32_t)lo;
    }
  long long rows = 0;
  for (int j = 0; j < El; j++) {
    d->offsets[j] = (int32_t)rows;
    for (int s = 0; s < ep; s++)
      rows += d->counts[s * El + j];
    if (rows > d->cap)
      return aa_error(AA_EINVAL, "moe dispatch: the expert group sends %lld rows, room for %d", rows, d->cap);
  }
  d->offsets[El] = (int32_t)rows;
  /* Where each (source, local expert) run sits in arrival order. */
  int32_t at = 0;
  for (int s = 0; s < ep; s++)
    for (int j = 0; j < El; j++) {
      d->src[s * El + j] = at;
      at += d->counts[s * El + j];
    }
  d->src[ep * El] = at;
  d->rows = (int)rows;
  return d->rows > d->room ? grow(d, d->rows) : 0;
}

float *aa_moe_dispatch_overflow(const aa_moe_dispatch_t *d) { return d->rows > d->room ? d->over : NULL; }

/* The local copy between arrival order (stage) and expert-major order (xl):
 * to_sorted set copies stage -> xl, else xl -> stage. */
static void sort_rows(const aa_moe_dispatch_t *d, const float *xl_in, float *xl_out, float *stage, int C,
                      int to_sorted) {
  const int ep = d->ep, El = d->El;
  for (int j = 0; j < El; j++) {
    size_t at = (size_t)d->offsets[j];
    for (int s = 0; s < ep; s++) {
      const size_t n = (size_t)d->counts[s * El + j] * (size_t)C,
                   from = (size_t)d->src[s * El + j] * (size_t)C;
      const size_t rows = (size_t)d->counts[s * El + j];
      if (n && d->ops) {
        if (to_sorted)
          d->ops->rows_copy(xl_out + at * (size_t)C, (size_t)C, stage + from, (size_t)C, rows, (size_t)C);
        else
          d->ops->rows_copy(stage + from, (size_t)C, xl_in + at * (size_t)C, (size_t)C, rows, (size_t)C);
      } else if (n) {
        if (to_sorted)
          memcpy(xl_out + at * (size_t)C, stage + from, n * sizeof(float));
        else
          memcpy(stage + from, xl_in + at * (size_t)C, n * sizeof(float));
      }
      at += rows;
    }
  }
}

/* The counts and offsets of a move's one all_to_all_v: the route's rows of
 * experts [p El, (p + 1) El) (to or from peer p, contiguous in the route's
 * order) in rc/ro, peer p's rows in arrival order (stage) in lc/lo. */
static void move_counts(aa_moe_dispatch_t *d, int C) {
  const int ep = d->ep, El = d->El;
  size_t *rc_ = d->scratch, *ro = d->scratch + ep, *lc = d->scratch + 2 * ep, *lo = d->scratch + 3 * ep;
  for (int p = 0; p < ep; p++) {
    rc_[p] = (size_t)(d->route[(p + 1) * El] - d->route[p * El]) * (size_t)C;
    ro[p] = (size_t)(d->route[p * El] - d->route[0]) * (size_t)C;
    lc[p] = (size_t)(d->src[(p + 1) * El] - d->src[p * El]) * (size_t)C;
    lo[p] = (size_t)d->src[p * El] * (size_t)C;
  }
}

/* The backend's ops that wrote what a move sends have finished (its
 * collectives run on their own stream or threads). */
static int backend_sync(const aa_moe_dispatch_t *d) { return d->ops ? d->ops->sync() : 0; }

int aa_moe_dispatch(aa_moe_dispatch_t *d, float *xl, const float *xp, int C, float *stage) {
  const size_t *s = d->scratch;
  move_counts(d, C);
  double t0 = aa_now();
  int rc = backend_sync(d);
  if (!rc) rc = aa_comm_all_to_all_v(d->group, xp, s, s + d->ep, stage, s + 2 * d->ep, s + 3 * d->ep, AA_F32);
  d->seconds += aa_now() - t0;
  if (rc) return aa_error_wrap(rc, "moe dispatch");
  sort_rows(d, NULL, xl, stage, C, 1);
  return 0;
}

int aa_moe_combine(aa_moe_dispatch_t *d, float *yp, const float *yl, int C, float *stage) {
  const size_t *s = d->scratch;
  sort_rows(d, yl, NULL, stage, C, 0);
  move_counts(d, C);
  double t0 = aa_now();
  int rc = backend_sync(d);
  if (!rc) rc = aa_comm_all_to_all_v(d->group, stage, s + 2 * d->ep, s + 3 * d->ep, yp, s, s + d->ep, AA_F32);
  d->seconds += aa_now() - t0;
  return rc ? aa_error_wrap(rc, "moe combine") : 0;
}
