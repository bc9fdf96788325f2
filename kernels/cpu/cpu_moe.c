/* The mixture-of-experts layer's ops (contracts and the block's math in
 * cpu_moe.h): router, top-k routing with the expert-ordered map, permute and
 * unpermute, the grouped expert SwiGLU GEMMs, shared experts, and the
 * load-balancing and z losses.
 *
 * GEMMs go to the backend's matmul (OpenBLAS sgemm, one call per expert
 * over its contiguous rows) and the SwiGLU to cpu_llama.c's. Everything else
 * is row-parallel under OpenMP with each row's sums in a fixed order, or a
 * short sequential pass (the counting sort, the losses), so results do not
 * depend on the thread count. */
#include "cpu_moe.h"

#include "../../common/aa.h"
#include "../moe_topk.h"
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- routing map */

int aa_cpu_moe_route_alloc(aa_moe_route_t *out, int N, int E, int k) {
  if (N < 1 || E < 1 || E > AA_MOE_MAX_EXPERTS || k < 1 || k > E || (long long)N * k > AA_MOE_MAX_SLOTS)
    return aa_error(AA_EINVAL, "moe routing: N %d, E %d, k %d out of bounds (1 <= k <= E <= %d, N k <= %d)",
                    N, E, k, AA_MOE_MAX_EXPERTS, AA_MOE_MAX_SLOTS);
  size_t slots = (size_t)N * k;
  aa_moe_route_t r = {.N = N, .E = E, .k = k};
  r.expert = malloc(slots * sizeof(int32_t));
  r.weight = malloc(slots * sizeof(float));
  r.row = malloc(slots * sizeof(int32_t));
  r.slot = malloc(slots * sizeof(int32_t));
  r.counts = malloc((size_t)E * sizeof(int32_t));
  r.offsets = malloc((size_t)(E + 1) * sizeof(int32_t));
  if (!r.expert || !r.weight || !r.row || !r.slot || !r.counts || !r.offsets) {
    aa_cpu_moe_route_free(&r);
    return aa_error(AA_ENOMEM, "moe routing: out of memory for %zu slots", slots);
  }
  *out = r;
  return 0;
}

void aa_cpu_moe_route_free(aa_moe_route_t *r) {
  free(r->expert), free(r->weight), free(r->row), free(r->slot), free(r->counts), free(r->offsets);
  memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------------ router */

/* Rows are independent; each row's max and sum run in expert order. */
void aa_cpu_moe_router_forward(float *logits, float *probs, const float *x, const float *wr, int N, int C,
                               int E) {
  aa__cpu_matmul_forward(logits, x, wr, NULL, N, C, E);
#pragma omp parallel for schedule(static) if ((size_t)N * E >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * E; // (E)
    float *p = probs + (size_t)n * E;        // (E)
    float m = l[0], sum = 0.0f;
    for (int e = 1; e < E; e++)
      m = l[e] > m ? l[e] : m;
    for (int e = 0; e < E; e++) {
      p[e] = aa__cpu_expf(l[e] - m);
      sum += p[e];
    }
    float inv = 1.0f / sum;
    for (int e = 0; e < E; e++)
      p[e] *= inv;
  }
}

/* Per token (in parallel): k passes of an argmax over the experts not yet
 * chosen, strict > so that the lower index wins a tie, then the weights
 * renormalised over the k choices; then aa_cpu_moe_route_keep over the
 * whole batch as one segment. */
int aa_cpu_moe_route(aa_moe_route_t *r, aa_moe_stats_t *stats, const float *logits, const float *probs,
                     float capacity_factor) {
  if (isnan(capacity_factor)) return aa_error(AA_EINVAL, "moe routing: capacity factor is NaN");
  int N = r->N, E = r->E, k = r->k;
  size_t slots = (size_t)N * k;
#pragma omp parallel for schedule(static) if (slots * E >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * E, *p = probs + (size_t)n * E; // (E), (E)
    int32_t *ex = r->expert + (size_t)n * k;                             // (k)
    float *w = r->weight + (size_t)n * k;                                // (k)
    aa_moe_topk(ex, w, l, p, E, k);
    if (r->raw)
      for (int j = 0; j < k; j++)
        w[j] = p[ex[j]];
  }
  return aa_cpu_moe_route_keep(r, stats, aa_cpu_moe_capacity(capacity_factor, (long long)slots, E), 1, NULL);
}

int aa_cpu_moe_capacity(float capacity_factor, long long slots, int E) {
  if (!(capacity_factor > 0.0f)) return (int)slots;
  double c = ceil((double)capacity_factor * (double)slots / E);
  return c < (double)slots ? (int)c : (int)slots;
}

/* Sequential: counts per expert; a walk over each segment's slots in
 * token order that keeps a slot while its expert's slots before the
 * segment plus those seen in it stay under the capacity, numbering each
 * expert's kept slots; the kept counts' prefix sums as offsets; a second
 * walk that moves each kept slot's number to its expert's rows. A token
 * never picks an expert twice, so token order is the stable (expert,
 * token) order. */
int aa_cpu_moe_route_keep(aa_moe_route_t *r, aa_moe_stats_t *stats, int capacity, int segments,
                          const int32_t *before) {
  const int N = r->N, E = r->E, k = r->k;
  if (capacity < 0 || segments < 1 || N % segments)
    return aa_error(AA_EINVAL, "moe routing: capacity %d, %d segments of %d tokens", capacity, segments, N);
  const size_t per = (size_t)N / segments * k;
  memset(r->counts, 0, (size_t)E * sizeof(int32_t));
  int32_t kept[AA_MOE_MAX_EXPERTS] = {0}, seen[AA_MOE_MAX_EXPERTS];
  int dropped = 0;
  for (int g = 0; g < segments; g++) {
    memset(seen, 0, (size_t)E * sizeof(int32_t));
    const int32_t *b = before ? before + (size_t)g * E : NULL; // (E)
    for (size_t s = (size_t)g * per; s < (size_t)(g + 1) * per; s++) {
      const int e = r->expert[s];
      r->counts[e]++;
      if ((b ? (long long)b[e] : 0) + seen[e]++ < capacity) {
        r->row[s] = kept[e]++;
      } else {
        r->row[s] = -1;
        dropped++;
      }
    }
  }
  r->offsets[0] = 0;
  for (int e = 0; e < E; e++)
    r->offsets[e + 1] = r->offsets[e] + kept[e];
  for (size_t s = 0; s < (size_t)N * k; s++)
    if (r->row[s] >= 0) {
      r->row[s] += r->offsets[r->expert[s]];
      r->slot[r->row[s]] = (int32_t)s;
    }
  r->capacity = capacity;
  r->rows = r->offsets[E];
  if (stats) {
    stats->min_tokens = stats->max_tokens = kept[0];
    for (int e = 1; e < E; e++) {
      stats->min_tokens = aa__cpu_min(stats->min_tokens, kept[e]);
      stats->max_tokens = kept[e] > stats->max_tokens ? kept[e] : stats->max_tokens;
    }
    stats->dropped = dropped;
  }
  return 0;
}

/* ------------------------------------------------------ permute/unpermute */

void aa_cpu_moe_permute(float *xp, const float *x, const aa_moe_route_t *r, int C) {
#pragma omp parallel for schedule(static) if ((size_t)r->rows * C >= AA__CPU_PAR_MIN)
  for (int row = 0; row < r->rows; row++) {
    int n = r->slot[row] / r->k;
    memcpy(xp + (size_t)row * C, x + (size_t)n * C, (size_t)C * sizeof(float));
  }
}

/* One token per iteration, its slots in order: no two threads write a row. */
void aa_cpu_moe_permute_backward(float *dx, const float *dxp, const aa_moe_route_t *r, int C) {
  int N = r->N, k = r->k;
#pragma omp parallel for schedule(static) if ((size_t)N * k * C >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    float *d = dx + (size_t)n * C; // (C)
    for (int j = 0; j < k; j++) {
      int row = r->row[(size_t)n * k + j];
      if (row < 0) continue;
      const float *g = dxp + (size_t)row * C; // (C)
#pragma omp simd
      for (int c = 0; c < C; c++)
        d[c] += g[c];
    }
  }
}

void aa_cpu_moe_unpermute(float *out, const float *yp, const aa_moe_route_t *r, int C) {
  int N = r->N, k = r->k;
#pragma omp parallel for schedule(static) if ((size_t)N * k * C >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * C; // (C)
    memset(o, 0, (size_t)C * sizeof(float));
    for (int j = 0; j < k; j++) {
      size_t s = (size_t)n * k + j;
      if (r->row[s] < 0) continue;
      const float *y = yp + (size_t)r->row[s] * C; // (C)
      float w = r->weight[s];
#pragma omp simd
      for (int c = 0; c < C; c++)
        o[c] += w * y[c];
    }
  }
}

/* Each kept row belongs to exactly one slot, so the per-token loop writes
 * disjoint rows of dyp and its own entries of dweight. */
void aa_cpu_moe_unpermute_backward(float *dyp, float *dweight, const float *dout, const float *yp,
                                   const aa_moe_route_t *r, int C) {
  int N = r->N, k = r->k;
#pragma omp parallel for schedule(static) if ((size_t)N * k * C >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * C; // (C)
    for (int j = 0; j < k; j++) {
      size_t s = (size_t)n * k + j;
      if (r->row[s] < 0) continue;
      const float *y = yp + (size_t)r->row[s] * C; // (C)
      float *dy = dyp + (size_t)r->row[s] * C;     // (C)
      float w = r->weight[s], dw = 0.0f;
#pragma omp simd reduction(+ : dw)
      for (int c = 0; c < C; c++) {
        dy[c] += w * d[c];
        dw += d[c] * y[c];
      }
      dweight[s] += dw;
    }
  }
}

/* ------------------------------------------------------- expert SwiGLU GEMMs */

/* One SwiGLU expert on M rows: h(M,2F) = x w13^T, a(M,F) = swiglu(h),
 * y(M,C) = a w2^T. */
static void expert_forward(float *y, float *h, float *a, const float *x, const float *w13, const float *w2,
                           int M, int C, int F) {
  aa__cpu_matmul_forward(h, x, w13, NULL, M, C, 2 * F);
  aa__cpu_swiglu_forward(a, h, M, F);
  aa__cpu_matmul_forward(y, a, w2, NULL, M, F, C);
}

/* Its backward with scratch da(M,F) and dh(M,2F), zeroed here: dx, dw13 and
 * dw2 accumulate. */
static void expert_backward(float *dx, float *dw13, float *dw2, const float *dy, const float *x,
                            const float *h, const float *a, const float *w13, const float *w2, float *da,
                            float *dh, int M, int C, int F) {
  memset(da, 0, (size_t)M * F * sizeof(float));
  memset(dh, 0, (size_t)M * 2 * F * sizeof(float));
  aa__cpu_matmul_backward(da, dw2, NULL, dy, a, w2, M, F, C);
  aa__cpu_swiglu_backward(dh, h, da, M, F);
  aa__cpu_matmul_backward(dx, dw13, NULL, dh, x, w13, M, C, 2 * F);
}

void aa_cpu_moe_experts_forward(float *yp, float *h, float *a, const float *xp, const float *w13,
                                const float *w2, const int32_t *offsets, int E, int C, int F) {
  for (int e = 0; e < E; e++) {
    size_t r0 = (size_t)offsets[e];
    int M = offsets[e + 1] - offsets[e];
    if (M == 0) continue;
    expert_forward(yp + r0 * C, h + r0 * 2 * F, a + r0 * F, xp + r0 * C, w13 + (size_t)e * 2 * F * C,
                   w2 + (size_t)e * C * F, M, C, F);
  }
}

void aa_cpu_moe_experts_backward(float *dxp, float *dw13, float *dw2, const float *dyp, const float *xp,
                                 const float *h, const float *a, const float *w13, const float *w2,
                                 const int32_t *offsets, int E, int C, int F) {
  size_t rows = (size_t)offsets[E];
  float *scratch = aa__cpu_scratch(rows * 3 * F, "moe experts"); // da (rows,F) then dh (rows,2F)
  for (int e = 0; e < E; e++) {
    size_t r0 = (size_t)offsets[e];
    int M = offsets[e + 1] - offsets[e];
    if (M == 0) continue;
    expert_backward(dxp + r0 * C, dw13 + (size_t)e * 2 * F * C, dw2 + (size_t)e * C * F, dyp + r0 * C,
                    xp + r0 * C, h + r0 * 2 * F, a + r0 * F, w13 + (size_t)e * 2 * F * C,
                    w2 + (size_t)e * C * F, scratch, scratch + (size_t)M * F, M, C, F);
  }
  free(scratch);
}

/* ---------------------------------------------------------- shared experts */

void aa_cpu_moe_shared_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                               const float *ws2, int S, int N, int C, int F) {
  if (S == 0) return;
  float *y = aa__cpu_scratch((size_t)N * C, "moe shared");
  for (int s = 0; s < S; s++) {
    expert_forward(y, hs + (size_t)s * N * 2 * F, as + (size_t)s * N * F, x, ws13 + (size_t)s * 2 * F * C,
                   ws2 + (size_t)s * C * F, N, C, F);
    aa__cpu_accumulate(out, y, (size_t)N * C);
  }
  free(y);
}

void aa_cpu_moe_shared_backward(float *dx, float *dws13, float *dws2, const float *dout, const float *x,
                                const float *hs, const float *as, const float *ws13, const float *ws2, int S,
                                int N, int C, int F) {
  if (S == 0) return;
  float *scratch = aa__cpu_scratch((size_t)N * 3 * F, "moe shared");
  for (int s = 0; s < S; s++)
    expert_backward(dx, dws13 + (size_t)s * 2 * F * C, dws2 + (size_t)s * C * F, dout, x,
                    hs + (size_t)s * N * 2 * F, as + (size_t)s * N * F, ws13 + (size_t)s * 2 * F * C,
                    ws2 + (size_t)s * C * F, scratch, scratch + (size_t)N * F, N, C, F);
  free(scratch);
}

/* The gate of each token, g[n] = sigmoid(x[n] . wg) (the dot in double),
 * the same in the forward and the backward. */
static void shared_gate(float *g, const float *x, const float *wg, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *xn = x + (size_t)n * C; // (C)
    double z = 0.0;
    for (int c = 0; c < C; c++)
      z += (double)xn[c] * wg[c];
    g[n] = (float)(1.0 / (1.0 + exp(-z)));
  }
}

void aa_cpu_moe_shared_gate_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                                    const float *ws2, const float *wg, int S, int N, int C, int F) {
  if (S == 0) return;
  const size_t NC = (size_t)N * C;
  float *y = aa__cpu_scratch(NC + (size_t)N, "moe shared gate"), *g = y + NC;
  memset(y, 0, NC * sizeof(float));
  aa_cpu_moe_shared_forward(y, hs, as, x, ws13, ws2, S, N, C, F); // (N,C) the shared experts' sum
  shared_gate(g, x, wg, N, C);
#pragma omp parallel for schedule(static) if (NC >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * C;
    const float *yn = y + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      o[c] += g[n] * yn[c];
  }
  free(y);
}

/* With y = the shared experts' sum (recomputed from the kept as: a w2^T
 * for each) and g the gate: dy = g dout into the experts' backward, and
 * through the sigmoid dz[n] = g (1 - g) (dout[n] . y[n]), so dx[n] += dz[n]
 * wg and dwg += sum_n dz[n] x[n] (summed in token order: deterministic). */
void aa_cpu_moe_shared_gate_backward(float *dx, float *dws13, float *dws2, float *dwg, const float *dout,
                                     const float *x, const float *hs, const float *as, const float *ws13,
                                     const float *ws2, const float *wg, int S, int N, int C, int F) {
  if (S == 0) return;
  const size_t NC = (size_t)N * C;
  float *y = aa__cpu_scratch(2 * NC + (size_t)N, "moe shared gate"), *dy = y + NC, *g = dy + NC;
  memset(y, 0, NC * sizeof(float));
  for (int s = 0; s < S; s++) {
    aa__cpu_matmul_forward(dy, as + (size_t)s * N * F, ws2 + (size_t)s * C * F, NULL, N, F, C);
    aa__cpu_accumulate(y, dy, NC);
  }
  shared_gate(g, x, wg, N, C);
#pragma omp parallel for schedule(static) if (NC >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * C, *yn = y + (size_t)n * C; // (C), (C)
    float *dyn = dy + (size_t)n * C, *dxn = dx + (size_t)n * C;     // (C), (C)
    double dot = 0.0;
    for (int c = 0; c < C; c++) {
      dot += (double)d[c] * yn[c];
      dyn[c] = g[n] * d[c];
    }
    float dz = (float)(g[n] * (1.0 - g[n]) * dot);
    for (int c = 0; c < C; c++)
      dxn[c] += dz * wg[c];
    g[n] = dz; /* the gate's value is not needed any more */
  }
  for (int n = 0; n < N; n++) {
    const float *xn = x + (size_t)n * C;
    const float dz = g[n];
#pragma omp simd
    for (int c = 0; c < C; c++)
      dwg[c] += dz * xn[c];
  }
  aa_cpu_moe_shared_backward(dx, dws13, dws2, dy, x, hs, as, ws13, ws2, S, N, C, F);
  free(y);
}

/* ------------------------------------------------------------------ losses */

/* logsumexp of a row of E logits, in double. */
static double row_lse(const float *l, int E) {
  double m = l[0], s = 0.0;
  for (int e = 1; e < E; e++)
    m = l[e] > m ? l[e] : m;
  for (int e = 0; e < E; e++)
    s += exp(l[e] - m);
  return m + log(s);
}

void aa_cpu_moe_losses(float *aux, float *z, const float *logits, const float *probs, const aa_moe_route_t *r,
                       float aux_coef, float z_coef) {
  int N = r->N, E = r->E;
  double bal = 0.0, zs = 0.0;
  for (int e = 0; e < E; e++) {
    double P = 0.0;
    for (int n = 0; n < N; n++)
      P += probs[(size_t)n * E + e];
    bal += (double)r->counts[e] / N * (P / N);
  }
  for (int n = 0; n < N; n++) {
    double lse = row_lse(logits + (size_t)n * E, E);
    zs += lse * lse;
  }
  *aux = (float)((double)aux_coef * E * bal);
  *z = (float)((double)z_coef * zs / N);
}

/* Per token, with p = probs, s = the sum of the chosen p, w_j = p_j / s:
 *   dp_e  = [e chosen as j] (dw_j - sum_i dw_i w_i) / s     renormalisation
 *           (dw_j itself when r->raw: the weight is p_e)
 *         + dloss aux_coef E c_e / N^2                      aux, via P_e
 *   dl_e  = p_e (dp_e - sum_i p_i dp_i)                     softmax
 *         + dloss z_coef 2 lse / N p_e                      z-loss
 * then the router's GEMM backward. */
void aa_cpu_moe_router_backward(float *dx, float *dwr, float *dlogits, const float *dweight, const float *x,
                                const float *wr, const float *logits, const float *probs,
                                const aa_moe_route_t *r, int C, float aux_coef, float z_coef, float dloss) {
  int N = r->N, E = r->E, k = r->k;
  float aux_scale = (float)((double)dloss * aux_coef * E / ((double)N * N));
  float z_scale = (float)(2.0 * dloss * z_coef / N);
#pragma omp parallel if ((size_t)N * E >= AA__CPU_PAR_MIN)
  {
    float *dp = aa__cpu_scratch((size_t)E, "moe router");
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float *p = probs + (size_t)n * E; // (E)
      const int32_t *ex = r->expert + (size_t)n * k;
      const float *w = r->weight + (size_t)n * k, *dw = dweight + (size_t)n * k; // (k), (k)
      float *dl = dlogits + (size_t)n * E;                                       // (E)
      float s = 0.0f, wdw = 0.0f;
      for (int j = 0; j < k; j++) {
        s += p[ex[j]];
        wdw += w[j] * dw[j];
      }
      for (int e = 0; e < E; e++)
        dp[e] = aux_scale * (float)r->counts[e];
      for (int j = 0; j < k; j++)
        dp[ex[j]] += r->raw ? dw[j] : (dw[j] - wdw) / s;
      float pdp = 0.0f;
      for (int e = 0; e < E; e++)
        pdp += p[e] * dp[e];
      float zl = z_scale * (float)row_lse(logits + (size_t)n * E, E);
      for (int e = 0; e < E; e++)
        dl[e] = p[e] * (dp[e] - pdp) + zl * p[e];
    }
    free(dp);
  }
  aa__cpu_matmul_backward(dx, dwr, NULL, dlogits, x, wr, N, C, E);
}
