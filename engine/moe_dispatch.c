/* Expert parallelism's token dispatcher (moe_dispatch.h). */
#include "moe_dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "../common/aa.h"
#include "../kernels/cpu/cpu_moe.h"

int aa_moe_dispatch_init(aa_moe_dispatch_t *d, aa_comm_t *group, int E, int cap) {
  memset(d, 0, sizeof *d);
  const int ep = aa_comm_world(group);
  if (E < 1 || E > AA_MOE_MAX_EXPERTS || ep < 1 || E % ep)
    return aa_error(AA_EINVAL, "moe dispatch: %d experts over an expert group of %d ranks", E, ep);
  if (cap < 0 || cap > AA_MOE_MAX_SLOTS) return aa_error(AA_EINVAL, "moe dispatch: room for %d rows", cap);
  d->cap = cap;
  d->group = group;
  d->ep = ep;
  d->me = aa_comm_rank(group);
  d->E = E;
  d->El = E / ep;
  d->route = malloc(sizeof(int32_t) * (size_t)(E + 1));
  d->counts = malloc(sizeof(int32_t) * (size_t)E);
  d->offsets = malloc(sizeof(int32_t) * (size_t)(d->El + 1));
  d->scratch = malloc(sizeof(size_t) * 4 * (size_t)ep);
  if (!d->route || !d->counts || !d->offsets || !d->scratch) {
    aa_moe_dispatch_free(d);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  return 0;
}

void aa_moe_dispatch_free(aa_moe_dispatch_t *d) {
  free(d->route);
  free(d->counts);
  free(d->offsets);
  free(d->scratch);
  memset(d, 0, sizeof *d);
}

int aa_moe_dispatch_plan(aa_moe_dispatch_t *d, const int32_t *offsets) {
  const int ep = d->ep, El = d->El;
  size_t *send = d->scratch, *recv = d->scratch + ep;
  memcpy(d->route, offsets, sizeof(int32_t) * (size_t)(d->E + 1));
  d->sent = offsets[d->E] - offsets[0];
  /* One counts exchange per local expert: the API moves one size_t per
   * peer, and El of them per layer cost little beside the rows. */
  for (int j = 0; j < El; j++) {
    for (int p = 0; p < ep; p++)
      send[p] = (size_t)(offsets[p * El + j + 1] - offsets[p * El + j]);
    int rc = aa_comm_all_to_all_counts(d->group, send, recv);
    if (rc) return aa_error_wrap(rc, "moe dispatch: the counts of local expert %d", j);
    for (int s = 0; s < ep; s++) {
      /* A peer's count: bounded before it places any row. */
      if (recv[s] > AA_MOE_MAX_SLOTS)
        return aa_error(AA_EINVAL, "moe dispatch: rank %d sends %zu rows to expert %d", s, recv[s],
                        d->me * El + j);
      d->counts[s * El + j] = (int32_t)recv[s];
    }
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
  d->rows = (int)rows;
  return 0;
}

/* One move per local expert j: the route's rows of expert p El + j (to or
 * from peer p) against the rows of local expert j from each source s,
 * which sit in xl in source order from offsets[j]. */
static int move(aa_moe_dispatch_t *d, float *out, const float *in, int C, int to_experts) {
  const int ep = d->ep, El = d->El;
  size_t *rc_ = d->scratch, *ro = d->scratch + ep, *lc = d->scratch + 2 * ep, *lo = d->scratch + 3 * ep;
  for (int j = 0; j < El; j++) {
    size_t at = (size_t)d->offsets[j];
    for (int p = 0; p < ep; p++) {
      const int e = p * El + j;
      rc_[p] = (size_t)(d->route[e + 1] - d->route[e]) * (size_t)C;
      ro[p] = (size_t)(d->route[e] - d->route[0]) * (size_t)C;
      lc[p] = (size_t)d->counts[p * El + j] * (size_t)C;
      lo[p] = at * (size_t)C;
      at += (size_t)d->counts[p * El + j];
    }
    int rc = to_experts ? aa_comm_all_to_all_v(d->group, in, rc_, ro, out, lc, lo, AA_F32)
                        : aa_comm_all_to_all_v(d->group, in, lc, lo, out, rc_, ro, AA_F32);
    if (rc) return aa_error_wrap(rc, "moe %s: local expert %d", to_experts ? "dispatch" : "combine", j);
  }
  return 0;
}

int aa_moe_dispatch(aa_moe_dispatch_t *d, float *xl, const float *xp, int C) { return move(d, xl, xp, C, 1); }

int aa_moe_combine(aa_moe_dispatch_t *d, float *yp, const float *yl, int C) { return move(d, yp, yl, C, 0); }
