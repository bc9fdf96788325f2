/* The CPU attention kernel (kernels/cpu/cpu_attention.c) at the shapes its
 * register tiles are cut for, against a double-precision reference of the
 * forward and of the analytic backward: head sizes of a whole tile (64), a
 * tile and a part (80) and two tiles (128), grouped-query heads (4 query
 * heads on one key/value head), sequences over several of the backward's
 * 64-row blocks and not a multiple of the 6-row tiles. test_ops.c and
 * test_ops_llama.c check the same kernel with finite differences at small
 * head sizes; this file checks the large-tile paths they do not reach, and
 * that the thread count does not change a bit of the result; and ring
 * attention's non-causal block (every key seen, Tq != Tk, strided), which
 * runs the same kernel. */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

static aa_rng_t rng;

typedef struct {
  int B, T, NH, NKV, HS;
} shape_t;

static size_t width(const shape_t *s) { return (size_t)(s->NH + 2 * s->NKV) * s->HS; }

/* Causal grouped-query attention in double for qkv(B,T,W): out(B,T,NH HS),
 * lse(B,NH,T), and with dout the gradient dqkv(B,T,W) (assigned):
 *   P = softmax(q k^T / sqrt(HS)), dP = dO v^T, dS = P (dP - rowsum(P dP)),
 *   dq = dS k / sqrt(HS), dk = dS^T q / sqrt(HS), dv = P^T dO,
 * key/value head h / (NH / NKV) for query head h. */
static void reference(double *out, double *lse, double *dqkv, const float *qkv, const float *dout,
                      const shape_t *s) {
  const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS;
  const size_t W = width(s), ldo = (size_t)NH * HS;
  double *p = aa_test_dalloc((size_t)T * T), *ds = aa_test_dalloc((size_t)T * T), scale = 1.0 / sqrt(HS);
  memset(dqkv, 0, (size_t)B * T * W * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const int g = h / (NH / NKV);
      const float *q = qkv + (size_t)b * T * W + (size_t)h * HS,
                  *k = qkv + (size_t)b * T * W + (size_t)(NH + g) * HS;
      const float *v = k + (size_t)NKV * HS, *dO = dout + (size_t)b * T * ldo + (size_t)h * HS;
      double *dq = dqkv + (size_t)b * T * W + (size_t)h * HS,
             *dk = dqkv + (size_t)b * T * W + (size_t)(NH + g) * HS;
      double *dv = dk + (size_t)NKV * HS;
      for (int t = 0; t < T; t++) {
        double *row = p + (size_t)t * T, maxv = -INFINITY, sum = 0.0, dot = 0.0;
        for (int u = 0; u <= t; u++) {
          row[u] = 0.0;
          for (int i = 0; i < HS; i++)
            row[u] += (double)q[(size_t)t * W + i] * k[(size_t)u * W + i];
          row[u] *= scale;
          maxv = fmax(maxv, row[u]);
        }
        for (int u = 0; u <= t; u++)
          sum += row[u] = exp(row[u] - maxv);
        lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
        for (int u = 0; u <= t; u++)
          row[u] /= sum;
        for (int i = 0; i < HS; i++) {
          double o = 0.0;
          for (int u = 0; u <= t; u++)
            o += row[u] * v[(size_t)u * W + i];
          out[((size_t)b * T + t) * ldo + (size_t)h * HS + i] = o;
        }
        for (int u = 0; u <= t; u++) {
          double dp = 0.0;
          for (int i = 0; i < HS; i++)
            dp += (double)dO[(size_t)t * ldo + i] * v[(size_t)u * W + i];
          ds[(size_t)t * T + u] = dp;
          dot += row[u] * dp;
        }
        for (int u = 0; u <= t; u++)
          ds[(size_t)t * T + u] = row[u] * (ds[(size_t)t * T + u] - dot);
      }
      for (int t = 0; t < T; t++)
        for (int u = 0; u <= t; u++) {
          const double d = ds[(size_t)t * T + u] * scale, pr = p[(size_t)t * T + u];
          for (int i = 0; i < HS; i++) {
            dq[(size_t)t * W + i] += d * k[(size_t)u * W + i];
            dk[(size_t)u * W + i] += d * q[(size_t)t * W + i];
            dv[(size_t)u * W + i] += pr * dO[(size_t)t * ldo + i];
          }
        }
    }
  free(p);
  free(ds);
}

/* Forward and backward of one shape against the reference. The gradient
 * buffer starts random in [-1, 1], so the check also proves the backward
 * accumulates (+=). Inputs uniform in [-1.5, 1.5] as in test_ops.c.
 * Tolerances, all absolute: out and lse 1e-5, as attention_forward's in
 * test_ops.c (fp32 dot products of 64-128 terms and sums of up to 256 fp32
 * products; observed <= 5.1e-7); dqkv 1e-5: the gradients reach 3.3 here,
 * 4.3 with the random start, where one fp32 ulp is 4.8e-7, and the observed
 * error is 9.6e-7 (2 ulp), so 1e-5 leaves 10x. A wrong mask, block edge or
 * tile edge gives errors of 0.1-0.3 (checked by breaking the key tiles'
 * first query row). */
static void check_shape(const shape_t *s) {
  const aa_ops_t *ops = aa_ops_cpu();
  const size_t nq = (size_t)s->B * s->T * width(s), no = (size_t)s->B * s->T * s->NH * s->HS;
  const size_t nl = (size_t)s->B * s->NH * s->T;
  float *qkv = aa_test_frand(&rng, nq, -1.5f, 1.5f), *dout = aa_test_frand(&rng, no, -1, 1);
  float *out = aa_test_falloc(no), *lse = aa_test_falloc(nl), *pre = aa_test_frand(&rng, nq, -1, 1);
  float *dqkv = aa_test_fcopy(pre, nq);
  double *rout = aa_test_dalloc(no), *rlse = aa_test_dalloc(nl), *rd = aa_test_dalloc(nq);
  ops->attention_gqa_forward(out, lse, qkv, s->B, s->T, s->NH, s->NKV, s->HS);
  ops->attention_gqa_backward(dqkv, dout, qkv, lse, s->B, s->T, s->NH, s->NKV, s->HS);
  reference(rout, rlse, rd, qkv, dout, s);
  double gmax = 0.0;
  for (size_t i = 0; i < nq; i++) {
    gmax = fmax(gmax, fabs(rd[i]));
    rd[i] += pre[i];
  }
  const double eo = aa_test_max_abs_diff(out, rout, no), el = aa_test_max_abs_diff(lse, rlse, nl);
  const double eg = aa_test_max_abs_diff(dqkv, rd, nq);
  fprintf(stderr, "  B %d T %3d NH %d NKV %d HS %3d: out %.1e lse %.1e dqkv %.1e (largest gradient %.1f)\n",
          s->B, s->T, s->NH, s->NKV, s->HS, eo, el, eg, gmax);
  CHECK_MSG(eo <= 1e-5 && el <= 1e-5, "out %.2e lse %.2e", eo, el);
  CHECK_MSG(eg <= 1e-5, "dqkv %.2e", eg);
  free(qkv), free(dout), free(out), free(lse), free(pre), free(dqkv), free(rout), free(rlse), free(rd);
}

AA_TEST(attention_matches_double_reference_at_tile_sized_heads) {
  const shape_t shapes[] = {
      {1, 256, 4, 1, 64}, /* llama-6l-512's head size and group of 4, T = 256: four full row blocks */
      {2, 97, 2, 2, 80},  /* multi-head; 80 = a 64-wide tile and a 16-wide one; a partial row block */
      {1, 70, 2, 1, 128}, /* two 64-wide column tiles; 70 = 11 tiles of 6 rows and one of 4 */
      {1, 13, 3, 1, 64},  /* shorter than one row block */
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    check_shape(&shapes[i]);
}

/* Each (batch, head) is one thread's, in a fixed order: 1 and 3 threads give
 * the same bits (3 does not divide the 2 x 4 heads, so the split moves). */
AA_TEST(attention_bits_do_not_depend_on_the_thread_count) {
  const aa_ops_t *ops = aa_ops_cpu();
  const shape_t s = {2, 100, 4, 2, 64};
  const size_t nq = (size_t)s.B * s.T * width(&s), no = (size_t)s.B * s.T * s.NH * s.HS;
  const size_t nl = (size_t)s.B * s.NH * s.T;
  float *qkv = aa_test_frand(&rng, nq, -1.5f, 1.5f), *dout = aa_test_frand(&rng, no, -1, 1);
  float *out[2], *lse[2], *d[2];
  for (int r = 0; r < 2; r++) {
    ops->set_threads(r == 0 ? 1 : 3);
    out[r] = aa_test_falloc(no), lse[r] = aa_test_falloc(nl), d[r] = aa_test_falloc(nq);
    ops->attention_gqa_forward(out[r], lse[r], qkv, s.B, s.T, s.NH, s.NKV, s.HS);
    ops->attention_gqa_backward(d[r], dout, qkv, lse[r], s.B, s.T, s.NH, s.NKV, s.HS);
  }
  CHECK(memcmp(out[0], out[1], no * sizeof(float)) == 0);
  CHECK(memcmp(lse[0], lse[1], nl * sizeof(float)) == 0);
  CHECK(memcmp(d[0], d[1], nq * sizeof(float)) == 0);
  for (int r = 0; r < 2; r++)
    free(out[r]), free(lse[r]), free(d[r]);
  free(qkv), free(dout);
}

/* Ring attention's block op with every key seen (a block of earlier
 * positions), Tq != Tk, through padded row and batch strides, as the ring
 * reads a rank's queries in its q|k|v rows and a received k|v block:
 * against the double reference of attention over all Tk keys, with
 * delta = rowsum(dout * out) (attention_block_delta, of this block's out,
 * which here is the final one). test_ops_ring.c checks the decomposition
 * at Tq == Tk against the whole-sequence op; this is the kernel's
 * non-causal path on its own, at head sizes of whole and partial tiles.
 * Tolerances as check_shape's (sums of up to 90 terms here). */
static void check_block(int B, int Tq, int Tk, int NH, int NKV, int HS) {
  const aa_ops_t *ops = aa_ops_cpu();
  const int ldq = NH * HS + 8, ldkv = 2 * NKV * HS, ldo = NH * HS;
  const size_t bsq = (size_t)Tq * ldq, bskv = (size_t)Tk * ldkv, no = (size_t)B * Tq * ldo;
  const size_t nq = (size_t)B * bsq, nkv = (size_t)B * bskv, nl = (size_t)B * NH * Tq;
  float *q = aa_test_frand(&rng, nq, -1.5f, 1.5f), *kv = aa_test_frand(&rng, nkv, -1.5f, 1.5f);
  float *dout = aa_test_frand(&rng, no, -1, 1), *out = aa_test_falloc(no), *lse = aa_test_falloc(nl);
  float *delta = aa_test_falloc(nl), *dq0 = aa_test_frand(&rng, nq, -1, 1),
        *dkv0 = aa_test_frand(&rng, nkv, -1, 1);
  float *dq = aa_test_fcopy(dq0, nq), *dkv = aa_test_fcopy(dkv0, nkv);
  ops->attention_block_forward(out, lse, q, kv, kv + NKV * HS, B, Tq, Tk, NH, NKV, HS, ldq, bsq, ldkv, bskv,
                               0);
  ops->attention_block_delta(delta, dout, out, B, Tq, NH, HS);
  ops->attention_block_backward(dq, dkv, dkv + NKV * HS, dout, q, kv, kv + NKV * HS, lse, delta, B, Tq, Tk,
                                NH, NKV, HS, ldq, bsq, ldkv, bskv, 0);
  double eo = 0, el = 0, eg = 0, scale = 1.0 / sqrt(HS);
  double *p = aa_test_dalloc((size_t)Tq * Tk), *ds = aa_test_dalloc((size_t)Tq * Tk);
  double *rdq = aa_test_dalloc(nq), *rdkv = aa_test_dalloc(nkv);
  for (size_t i = 0; i < nq; i++)
    rdq[i] = dq0[i];
  for (size_t i = 0; i < nkv; i++)
    rdkv[i] = dkv0[i];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const int g = h / (NH / NKV);
      const float *qh = q + b * bsq + (size_t)h * HS, *k = kv + b * bskv + (size_t)g * HS, *v = k + NKV * HS;
      const float *dO = dout + (size_t)b * Tq * ldo + (size_t)h * HS;
      double *dqh = rdq + b * bsq + (size_t)h * HS, *dk = rdkv + b * bskv + (size_t)g * HS,
             *dv = dk + NKV * HS;
      for (int t = 0; t < Tq; t++) {
        double *row = p + (size_t)t * Tk, maxv = -INFINITY, sum = 0, dot = 0;
        for (int u = 0; u < Tk; u++) {
          row[u] = 0;
          for (int i = 0; i < HS; i++)
            row[u] += (double)qh[(size_t)t * ldq + i] * k[(size_t)u * ldkv + i];
          row[u] *= scale;
          maxv = fmax(maxv, row[u]);
        }
        for (int u = 0; u < Tk; u++)
          sum += row[u] = exp(row[u] - maxv);
        el = fmax(el, fabs(maxv + log(sum) - lse[((size_t)b * NH + h) * Tq + t]));
        for (int u = 0; u < Tk; u++)
          row[u] /= sum;
        for (int i = 0; i < HS; i++) {
          double o = 0;
          for (int u = 0; u < Tk; u++)
            o += row[u] * v[(size_t)u * ldkv + i];
          eo = fmax(eo, fabs(o - out[((size_t)b * Tq + t) * ldo + (size_t)h * HS + i]));
        }
        for (int u = 0; u < Tk; u++) {
          double dp = 0;
          for (int i = 0; i < HS; i++)
            dp += (double)dO[(size_t)t * ldo + i] * v[(size_t)u * ldkv + i];
          ds[(size_t)t * Tk + u] = dp;
          dot += row[u] * dp;
        }
        for (int u = 0; u < Tk; u++)
          ds[(size_t)t * Tk + u] = row[u] * (ds[(size_t)t * Tk + u] - dot) * scale;
      }
      for (int t = 0; t < Tq; t++)
        for (int u = 0; u < Tk; u++)
          for (int i = 0; i < HS; i++) {
            dqh[(size_t)t * ldq + i] += ds[(size_t)t * Tk + u] * k[(size_t)u * ldkv + i];
            dk[(size_t)u * ldkv + i] += ds[(size_t)t * Tk + u] * qh[(size_t)t * ldq + i];
            dv[(size_t)u * ldkv + i] += p[(size_t)t * Tk + u] * dO[(size_t)t * ldo + i];
          }
    }
  /* Whole buffers: the padding past NH HS in q's rows must be left as it was. */
  eg = fmax(aa_test_max_abs_diff(dq, rdq, nq), aa_test_max_abs_diff(dkv, rdkv, nkv));
  fprintf(stderr, "  block B %d Tq %3d Tk %3d NH %d NKV %d HS %3d: out %.1e lse %.1e grads %.1e\n", B, Tq, Tk,
          NH, NKV, HS, eo, el, eg);
  CHECK_MSG(eo <= 1e-5 && el <= 1e-5, "out %.2e lse %.2e", eo, el);
  CHECK_MSG(eg <= 1e-5, "dq, dk, dv %.2e", eg);
  free(q), free(kv), free(dout), free(out), free(lse), free(delta), free(dq0), free(dkv0), free(dq),
      free(dkv);
  free(p), free(ds), free(rdq), free(rdkv);
}

AA_TEST(attention_block_with_every_key_matches_double_reference) {
  check_block(2, 37, 90, 4, 2, 64);  /* fewer queries than keys, grouped-query, a whole tile */
  check_block(1, 100, 20, 2, 1, 80); /* more queries than keys: two row blocks, a tile and a part */
  check_block(1, 7, 13, 3, 3, 16);   /* multi-head, a part tile only */
}

int main(void) {
  aa_rng_seed(&rng, 37);
  aa_ops_cpu()->set_threads(2);
  RUN(attention_matches_double_reference_at_tile_sized_heads);
  RUN(attention_bits_do_not_depend_on_the_thread_count);
  RUN(attention_block_with_every_key_matches_double_reference);
  return aa_test_summary();
}
