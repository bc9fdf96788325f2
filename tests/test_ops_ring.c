/* Ring attention's block ops (kernels/ops.h attention_block_*), the pieces
 * of context parallelism: a causal grouped-query attention over T positions
 * cut into 2c chunks and computed block by block, as a context group of c
 * ranks computes it (each chunk's queries against the diagonal block and
 * every earlier chunk, merged through the log-sum-exp; the backward's
 * shares summed), gives what the whole-sequence op gives, whose own tests
 * hold it to a double reference and to finite differences
 * (test_ops_llama.c). The blocks are read in place through their strides,
 * as the engine reads a qkv buffer and a block received from another rank.
 * On the CPU the whole-sequence op is the block kernel's causal diagonal,
 * so what this adds there is the decomposition: blocks of earlier keys
 * (every key seen), strides, the merge and delta.
 *
 * Tolerances: fp32, the same terms summed in another order (a row's
 * softmax is split across blocks and merged): 2e-5 absolute on outputs of
 * magnitude ~1, 1e-4 on gradients (sums over T keys of products of
 * O(1) values). The merge's own formula is checked against a double
 * reference to 1e-6 relative. */
#include "common/aa.h"
#include "kernels/ops.h"
#include "tests/aa_ops_test.h"

#include <math.h>
#include <string.h>

static aa_rng_t rng;

/* A problem: qkv(B,T,(NH + 2 NKV) HS) and the whole-sequence reference. */
typedef struct {
  int B, T, NH, NKV, HS, W, c; /* c: the chunks are 2c */
  float *qkv, *out, *lse, *dout, *dqkv;
} prob_t;

static void prob_make(prob_t *p, int B, int T, int NH, int NKV, int HS, int c) {
  const aa_ops_t *ops = aa_ops_cpu();
  *p = (prob_t){.B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .W = (NH + 2 * NKV) * HS, .c = c};
  p->qkv = aa_test_frand(&rng, (size_t)B * T * p->W, -1.0f, 1.0f);
  p->out = aa_test_falloc((size_t)B * T * NH * HS);
  p->lse = aa_test_falloc((size_t)B * NH * T);
  p->dout = aa_test_frand(&rng, (size_t)B * T * NH * HS, -1.0f, 1.0f);
  p->dqkv = aa_test_falloc((size_t)B * T * p->W);
  ops->attention_gqa_forward(p->out, p->lse, p->qkv, B, T, NH, NKV, HS);
  ops->attention_gqa_backward(p->dqkv, p->dout, p->qkv, p->lse, B, T, NH, NKV, HS);
}

static void prob_free(prob_t *p) {
  free(p->qkv);
  free(p->out);
  free(p->lse);
  free(p->dout);
  free(p->dqkv);
}

/* The largest |a - b| over n floats. */
static double max_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* Copies rows [t0, t0 + n) of every batch of x (B,T,w) into out (B,n,w). */
static void take_rows(float *out, const float *x, int B, int T, int w, int t0, int n) {
  for (int b = 0; b < B; b++)
    memcpy(out + (size_t)b * n * w, x + ((size_t)b * T + t0) * w, (size_t)n * w * sizeof(float));
}

/* Chunk by chunk, as a context group computes it: the queries of chunk qi
 * (read in place in qkv) against the diagonal, then every earlier chunk
 * kj < qi (keys and values copied out to a buffer of their own, as a
 * received block is), merged; then the backward's shares into dqkv, the
 * earlier chunks' key/value gradients through a copy added back. */
static void ring(const prob_t *p, float *out, float *lse, float *dqkv) {
  const aa_ops_t *ops = aa_ops_cpu();
  const int B = p->B, T = p->T, NH = p->NH, NKV = p->NKV, HS = p->HS, W = p->W, Tc = T / (2 * p->c);
  const int kvw = 2 * NKV * HS, ldo = NH * HS;
  float *o = aa_test_falloc((size_t)B * Tc * ldo), *l = aa_test_falloc((size_t)B * NH * Tc);
  float *ob = aa_test_falloc((size_t)B * Tc * ldo), *lb = aa_test_falloc((size_t)B * NH * Tc);
  float *kv = aa_test_falloc((size_t)B * Tc * kvw), *dkv = aa_test_falloc((size_t)B * Tc * kvw);
  float *d = aa_test_falloc((size_t)B * NH * Tc), *dO = aa_test_falloc((size_t)B * Tc * ldo);
  const size_t bs = (size_t)T * W;
  for (int qi = 0; qi < 2 * p->c; qi++) {
    const float *q = p->qkv + (size_t)qi * Tc * W;
    ops->attention_block_forward(o, l, q, q + NH * HS, q + (NH + NKV) * HS, B, Tc, Tc, NH, NKV, HS, W, bs, W,
                                 bs, 1);
    for (int kj = 0; kj < qi; kj++) {
      /* A block of another rank: keys and values only, (B,Tc,2 NKV HS). */
      for (int b = 0; b < B; b++)
        for (int t = 0; t < Tc; t++)
          memcpy(kv + ((size_t)b * Tc + t) * kvw, p->qkv + ((size_t)b * T + kj * Tc + t) * W + NH * HS,
                 (size_t)kvw * sizeof(float));
      ops->attention_block_forward(ob, lb, q, kv, kv + NKV * HS, B, Tc, Tc, NH, NKV, HS, W, bs, kvw,
                                   (size_t)Tc * kvw, 0);
      ops->attention_block_merge(o, l, ob, lb, B, Tc, NH, HS);
    }
    take_rows(ob, o, B, Tc, ldo, 0, Tc);
    for (int b = 0; b < B; b++) /* out, lse of the whole sequence, chunk qi */
      memcpy(out + ((size_t)b * T + qi * Tc) * ldo, ob + (size_t)b * Tc * ldo,
             (size_t)Tc * ldo * sizeof(float));
    for (int bh = 0; bh < B * NH; bh++)
      memcpy(lse + (size_t)bh * T + qi * Tc, l + (size_t)bh * Tc, (size_t)Tc * sizeof(float));
    /* Backward: the chunk's dout, delta from the final out. */
    take_rows(dO, p->dout, B, T, ldo, qi * Tc, Tc);
    ops->attention_block_delta(d, dO, o, B, Tc, NH, HS);
    float *dq = dqkv + (size_t)qi * Tc * W;
    ops->attention_block_backward(dq, dq + NH * HS, dq + (NH + NKV) * HS, dO, q, q + NH * HS,
                                  q + (NH + NKV) * HS, l, d, B, Tc, Tc, NH, NKV, HS, W, bs, W, bs, 1);
    for (int kj = 0; kj < qi; kj++) {
      for (int b = 0; b < B; b++)
        for (int t = 0; t < Tc; t++)
          memcpy(kv + ((size_t)b * Tc + t) * kvw, p->qkv + ((size_t)b * T + kj * Tc + t) * W + NH * HS,
                 (size_t)kvw * sizeof(float));
      memset(dkv, 0, (size_t)B * Tc * kvw * sizeof(float));
      ops->attention_block_backward(dq, dkv, dkv + NKV * HS, dO, q, kv, kv + NKV * HS, l, d, B, Tc, Tc, NH,
                                    NKV, HS, W, bs, kvw, (size_t)Tc * kvw, 0);
      for (int b = 0; b < B; b++) /* the owner adds what came back */
        for (int t = 0; t < Tc; t++)
          for (int x = 0; x < kvw; x++)
            dqkv[((size_t)b * T + kj * Tc + t) * W + NH * HS + x] += dkv[((size_t)b * Tc + t) * kvw + x];
    }
  }
  free(o);
  free(l);
  free(ob);
  free(lb);
  free(kv);
  free(dkv);
  free(d);
  free(dO);
}

static void expect_ring_equals_whole(int B, int T, int NH, int NKV, int HS, int c) {
  prob_t p;
  prob_make(&p, B, T, NH, NKV, HS, c);
  float *out = aa_test_falloc((size_t)B * T * NH * HS), *lse = aa_test_falloc((size_t)B * NH * T);
  float *dqkv = aa_test_falloc((size_t)B * T * p.W);
  ring(&p, out, lse, dqkv);
  double eo = max_diff(out, p.out, (size_t)B * T * NH * HS), el = max_diff(lse, p.lse, (size_t)B * NH * T);
  double eg = max_diff(dqkv, p.dqkv, (size_t)B * T * p.W);
  CHECK_MSG(eo < 2e-5 && el < 2e-5, "B %d T %d NH %d NKV %d HS %d c %d: out %.2e lse %.2e", B, T, NH, NKV, HS,
            c, eo, el);
  CHECK_MSG(eg < 1e-4, "B %d T %d NH %d NKV %d HS %d c %d: dqkv %.2e", B, T, NH, NKV, HS, c, eg);
  free(out);
  free(lse);
  free(dqkv);
  prob_free(&p);
}

AA_TEST(ring_blocks_give_the_whole_sequence_attention_and_its_gradient) {
  expect_ring_equals_whole(2, 16, 2, 2, 8, 1);  /* two chunks: the diagonal and one earlier block */
  expect_ring_equals_whole(2, 32, 4, 2, 8, 2);  /* grouped-query, four chunks */
  expect_ring_equals_whole(1, 96, 4, 1, 16, 3); /* one key/value head, 32-row chunks: a full row block */
  expect_ring_equals_whole(3, 80, 2, 2, 4, 4);  /* odd batch, 10-row chunks */
  expect_ring_equals_whole(1, 160, 2, 1, 8, 1); /* 80-row chunks: several row blocks per chunk */
  expect_ring_equals_whole(1, 200, 2, 1, 64, 2); /* 50-row chunks, head size 64: whole vector tiles */
}

/* The merge is log(e^a + e^b) and the weighted outputs, in double. */
AA_TEST(merge_matches_the_log_sum_exp_formula) {
  const aa_ops_t *ops = aa_ops_cpu();
  const int B = 2, T = 5, NH = 3, HS = 4, n = B * T * NH * HS, m = B * NH * T;
  float *o = aa_test_frand(&rng, n, -2, 2), *ob = aa_test_frand(&rng, n, -2, 2);
  float *l = aa_test_frand(&rng, m, -30, 30), *lb = aa_test_frand(&rng, m, -30, 30);
  float *o0 = aa_test_fcopy(o, n), *l0 = aa_test_fcopy(l, m);
  ops->attention_block_merge(o, l, ob, lb, B, T, NH, HS);
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        int li = (b * NH + h) * T + t;
        double a = l0[li], c = lb[li], mx = fmax(a, c), L = mx + log(exp(a - mx) + exp(c - mx));
        worst = fmax(worst, fabs(L - l[li]) / fmax(1.0, fabs(L)));
        for (int x = 0; x < HS; x++) {
          int oi = ((b * T + t) * NH + h) * HS + x;
          double want = exp(a - L) * o0[oi] + exp(c - L) * ob[oi];
          worst = fmax(worst, fabs(want - o[oi]) / fmax(1.0, fabs(want)));
        }
      }
  CHECK_MSG(worst < 1e-6, "merge off by %.2e", worst);
  free(o);
  free(ob);
  free(l);
  free(lb);
  free(o0);
  free(l0);
}

/* The ring's packing of k|v columns and the return of their gradient:
 * exact copies and fp32 adds of the block's elements only; everything
 * outside it (the q columns, the padding of a wider destination) is left
 * as it was. */
AA_TEST(rows_copy_and_accumulate_move_one_block_of_columns) {
  const aa_ops_t *ops = aa_ops_cpu();
  const size_t rows = 37, lds = 24, ldd = 19, cols = 16, off = 8;
  float *src = aa_test_frand(&rng, rows * lds, -2, 2), *dst = aa_test_frand(&rng, rows * ldd, -2, 2);
  float *dst0 = aa_test_fcopy(dst, rows * ldd);
  ops->rows_copy(dst, ldd, src + off, lds, rows, cols);
  int bad = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < ldd; j++)
      bad += dst[r * ldd + j] != (j < cols ? src[r * lds + off + j] : dst0[r * ldd + j]);
  CHECK_MSG(bad == 0, "rows_copy: %d elements wrong", bad);
  float *acc = aa_test_fcopy(src, rows * lds);
  ops->rows_accumulate(acc + off, lds, dst0, ldd, rows, cols);
  bad = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < lds; j++) {
      const int in = j >= off && j < off + cols;
      bad += acc[r * lds + j] != (in ? src[r * lds + j] + dst0[r * ldd + j - off] : src[r * lds + j]);
    }
  CHECK_MSG(bad == 0, "rows_accumulate: %d elements wrong", bad);
  free(src);
  free(dst);
  free(dst0);
  free(acc);
}

int main(void) {
  aa_rng_seed(&rng, 31);
  RUN(ring_blocks_give_the_whole_sequence_attention_and_its_gradient);
  RUN(merge_matches_the_log_sum_exp_formula);
  RUN(rows_copy_and_accumulate_move_one_block_of_columns);
  return aa_test_summary();
}
