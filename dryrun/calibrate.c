/* Calibrations: the op pass and the collective pass (calibrate.h). */
#include "calibrate.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/ops.h"
#include "../strategies/predict.h"

#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

/* A sample is as many calls as take about this long, so that a call of a
 * few microseconds is not lost in the clock's and the loop's noise; three
 * samples make an op's figure (their median) and at least a millisecond. */
#define SAMPLE_S 0.4e-3
#define SAMPLES 3
#define REPS_MAX (1 << 20)
#define MSG_SIZES 4
#define BUFS_MAX 16
/* The times of a shape that did not fit in memory: negative, also as the
 * ranks' mean, so a shape any rank left out is left out. */
#define SKIPPED (-1e30)

/* Smallest and largest first: past the budget only those two are
 * measured, and their spread is what the fit needs most. */
static const size_t msg_bytes[MSG_SIZES] = {4 << 10, 4 << 20, 64 << 10, 512 << 10};
#define MSG_MOST (4 << 20)
static const aa_cost_collective_t link_kinds[] = {AA_COST_ALL_REDUCE, AA_COST_ALL_GATHER,
                                                  AA_COST_REDUCE_SCATTER, AA_COST_SEND, AA_COST_ALL_TO_ALL};
#define LINK_KINDS ((int)(sizeof link_kinds / sizeof link_kinds[0]))

typedef struct {
  const aa_ops_t *ops;
  int cuda; /* 1: ops is the CUDA table */
  aa_comm_t *comm;
  int rank, world;
  int timers; /* ranks 0..timers-1 time the ops at once, the rest wait (calib.h "ranks") */
  double start, budget_s;
  size_t mem_limit; /* bytes of one shape's buffers; 0 = as much as the backend gives */
  const aa_model_spec_t *spec;
  uint64_t rng;
  int done, total; /* progress items */
  const aa_calibrate_opts_t *o;
} cal_t;

static void progress(cal_t *c) {
  c->done++;
  if (c->o->on_progress) c->o->on_progress(c->done, c->total, c->o->progress_data);
}

static double elapsed(const cal_t *c) { return aa_now() - c->start; }

/* ---- buffers --------------------------------------------------------------------------- */

/* The backend buffers of one op shape, freed together. */
typedef struct {
  const aa_ops_t *ops;
  void *p[BUFS_MAX];
  int n;
  size_t bytes, limit; /* taken so far, and at most (0 = no limit) */
} bufs_t;

static void bufs_free(bufs_t *b) {
  for (int i = 0; i < b->n; i++)
    b->ops->free(b->p[i]);
  b->n = 0;
}

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

enum { FILL_ZERO, FILL_RAND, FILL_TOKENS };

/* *out = a backend buffer of n 4-byte elements (at least one): zeros, small
 * random floats in (-0.1, 0.1), or token ids below `vocab`. The random
 * values are a block of FILL_BLOCK repeated: timing needs no more, and a
 * large buffer fills at memcpy's speed. */
#define FILL_BLOCK 4096
static int take(cal_t *c, bufs_t *b, void **out, size_t n, int fill, int vocab) {
  if (n == 0) n = 1;
  if (b->n == BUFS_MAX) return aa_error(AA_EINTERNAL, "calibration: too many buffers for one op");
  if (b->limit && (n > b->limit / 4 || b->bytes + n * 4 > b->limit))
    return aa_error(AA_EOOM, "calibration: an op's buffers past %zu bytes", b->limit);
  void *p = NULL;
  int rc = b->ops->alloc(&p, n * 4);
  if (rc) return rc;
  b->p[b->n++] = p;
  b->bytes += n * 4;
  if (fill != FILL_ZERO) {
    size_t block = n < FILL_BLOCK ? n : FILL_BLOCK;
    uint32_t *host = malloc(n * 4);
    if (!host) return aa_error(AA_ENOMEM, "calibration: out of host memory for %zu bytes", n * 4);
    for (size_t i = 0; i < block; i++) {
      uint64_t r = next_rand(&c->rng);
      float x = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.2f;
      if (fill == FILL_TOKENS)
        host[i] = (uint32_t)(r % (uint64_t)vocab);
      else
        memcpy(&host[i], &x, 4);
    }
    for (size_t i = block; i < n; i += block)
      memcpy(host + i, host, (n - i < block ? n - i : block) * 4);
    rc = b->ops->upload(p, host, n * 4);
    free(host);
    if (rc) return rc;
  }
  *out = p;
  return 0;
}

/* ---- one op shape ---------------------------------------------------------------------- */

/* The buffers of one shape and how to call its kernels. */
typedef struct {
  const aa_ops_t *ops;
  aa_op_kind_t kind;
  aa_dtype_t dtype;
  int a, b, c, d; /* the shape's dimensions as the kernels take them */
  size_t n;       /* elementwise ops */
  int lo, valid, R, vocab;
  int no_wpe;        /* the embedding without a position table (llama) */
  float eps, theta; /* RMSNorm's epsilon, RoPE's base (the model's) */
  void *p[12];  /* buffers, float unless a comment says otherwise */
  int32_t *tok; /* token ids, where the kind takes them */
  int step;
} shape_t;

/* One forward (backward = 0) or backward call of the shape's kernels. */
static void call(shape_t *s, int backward) {
  const aa_ops_t *op = s->ops;
  float *x[12];
  for (int i = 0; i < 12; i++)
    x[i] = s->p[i];
  switch (s->kind) {
  case AA_OP_MATMUL: /* inp x0 (N,C), weight x1 (OC,C), bias x2 (OC), out x3 (N,OC); grads x4..x7 */
    if (!backward)
      op->matmul_forward(x[3], x[0], x[1], x[2], s->a, s->b, s->c);
    else
      op->matmul_backward(x[4], x[5], x[6], x[7], x[0], x[1], s->a, s->b, s->c);
    break;
  case AA_OP_ATTENTION: /* qkv x0 (B,T,3C), out x1 (B,T,C), lse x2 (B,NH,T); dout x3, dqkv x4 */
    if (!backward)
      op->attention_forward(x[1], x[2], x[0], s->a, s->b, s->c, s->d);
    else
      op->attention_backward(x[4], x[3], x[0], x[2], s->a, s->b, s->c, s->d);
    break;
  case AA_OP_LAYERNORM: /* inp x0 (N,C), w x1, b x2, out x3, mean x4, rstd x5; dout x6, dinp x7, dw x8, db x9
                         */
    if (!backward)
      op->layernorm_forward(x[3], x[4], x[5], x[0], x[1], x[2], s->a, s->b);
    else
      op->layernorm_backward(x[7], x[8], x[9], x[6], x[0], x[1], x[4], x[5], s->a, s->b);
    break;
  case AA_OP_GELU: /* inp x0, out x1; dout x2, dinp x3 */
    if (!backward)
      op->gelu_forward(x[1], x[0], s->n);
    else
      op->gelu_backward(x[3], x[0], x[2], s->n);
    break;
  case AA_OP_RESIDUAL: /* a x0, b x1, out x2; dout x3, da x4, db x5 */
    if (!backward) {
      op->residual_forward(x[2], x[0], x[1], s->n);
    } else {
      op->accumulate(x[4], x[3], s->n);
      op->accumulate(x[5], x[3], s->n);
    }
    break;
  case AA_OP_XENT: /* logits x0 (N,V), losses x1 (N), probs x2 (N,V), parts x3 (R,N,3); dlogits x4 */
    if (backward)
      op->xent_vocab_backward(x[4], x[2], s->tok, s->lo, s->valid, 1.0f / (float)s->a, s->a, s->b);
    else if (s->R == 1)
      op->crossentropy_forward(x[1], x[2], x[0], s->tok, s->a, s->b);
    else {
      /* This rank's part goes to its slot; the other slots keep what the
       * setup put there, as an all-gather would leave them. */
      op->xent_vocab_partial(x[3], x[0], s->tok, s->lo, s->valid, s->a, s->b);
      op->xent_vocab_forward(x[1], x[2], x[0], x[3], s->R, s->valid, s->a, s->b);
    }
    break;
  case AA_OP_ENCODER: /* wte x0 (V,C), wpe x1 (T,C), out x2 (B,T,C); dout x3, dwte x4, dwpe x5 */
    if (!backward)
      op->encoder_forward_vocab(x[2], s->tok, x[0], s->no_wpe ? NULL : x[1], 0, s->vocab, s->a, s->b, s->c);
    else
      op->encoder_backward_vocab(x[4], s->no_wpe ? NULL : x[5], x[3], s->tok, 0, s->vocab, s->a, s->b, s->c);
    break;
  case AA_OP_RMSNORM: /* inp x0 (N,C), w x1, out x2, rstd x3; dout x4, dinp x5, dw x6 */
    if (!backward)
      op->rmsnorm_forward(x[2], x[3], x[0], x[1], s->a, s->b, s->eps);
    else
      op->rmsnorm_backward(x[5], x[6], x[4], x[0], x[1], x[3], s->a, s->b);
    break;
  case AA_OP_SWIGLU: /* inp x0 (N,2F), out x1 (N,F); dout x2, dinp x3 (N,2F) */
    if (!backward)
      op->swiglu_forward(x[1], x[0], s->a, s->b);
    else
      op->swiglu_backward(x[3], x[0], x[2], s->a, s->b);
    break;
  case AA_OP_ROPE: /* qkv x0 (S,T,(G+2)HS), rotated in place either way */
    if (!backward)
      op->rope_forward(x[0], s->a, s->b, s->c, 1, s->d, 0, s->theta);
    else
      op->rope_backward(x[0], s->a, s->b, s->c, 1, s->d, 0, s->theta);
    break;
  case AA_OP_GQA: /* qkv x0 (S,T,(G+2)HS), out x1 (S,T,G HS), lse x2 (S,G,T); dout x3, dqkv x4 */
    if (!backward)
      op->attention_gqa_forward(x[1], x[2], x[0], s->a, s->b, s->c, 1, s->d);
    else
      op->attention_gqa_backward(x[4], x[3], x[0], x[2], s->a, s->b, s->c, 1, s->d);
    break;
  case AA_OP_RING_DIAG:
  case AA_OP_RING_BLOCK: {
    /* q|k|v x0 (S,Tc,W) with W = (G+2)HS, out x1 (S,Tc,G HS) and lse x2
     * (S,G,Tc) (the running result, merged into), dout x3, delta x4
     * (S,G,Tc), dq|dk|dv x5 (S,Tc,W), a block's own out x6 and lse x7.
     * A block of earlier keys reads them from x0 too: the same arithmetic
     * as another chunk's. */
    const int G = s->c, HS = s->d, W = (G + 2) * HS;
    const size_t bs = (size_t)s->b * W;
    const float *q = x[0], *k = x[0] + G * HS, *v = x[0] + (G + 1) * HS;
    float *dq = x[5], *dk = x[5] + G * HS, *dv = x[5] + (G + 1) * HS;
    const int diag = s->kind == AA_OP_RING_DIAG;
    float *out = diag ? x[1] : x[6], *lse = diag ? x[2] : x[7];
    if (!backward) {
      op->attention_block_forward(out, lse, q, k, v, s->a, s->b, s->b, G, 1, HS, W, bs, W, bs, diag);
      if (!diag) op->attention_block_merge(x[1], x[2], x[6], x[7], s->a, s->b, G, HS);
    } else {
      /* The diagonal's backward also finds delta from the final output;
       * every block's backward reads it with the final lse. */
      if (diag) op->attention_block_delta(x[4], x[3], x[1], s->a, s->b, G, HS);
      op->attention_block_backward(dq, dk, dv, x[3], q, k, v, lse, x[4], s->a, s->b, s->b, G, 1, HS, W, bs, W,
                                   bs, diag);
    }
    break;
  }
  case AA_OP_CAST: /* fp32 x0 (n), 16-bit x1 (n, half the bytes used) */
    if (!backward)
      op->cast_from_f32(x[1], s->dtype, x[0], s->n);
    else
      op->cast_to_f32(x[0], x[1], s->dtype, s->n);
    break;
  case AA_OP_ADAMW: /* params x0, grads x1, m x2, v x3 */
    op->adamw_update(x[0], x[1], x[2], x[3], s->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++s->step);
    break;
  default: break;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Seconds per call of one direction of s: one untimed call, then the median
 * of SAMPLES samples of as many calls as take about SAMPLE_S (a sample that
 * came out much shorter, because the untimed call was slow, is taken again
 * with more calls). Past the op pass's share of the budget: the one call's
 * time alone. */
static int time_calls(cal_t *c, shape_t *s, int backward, double *out) {
  const aa_ops_t *op = c->ops;
  double t0 = aa_now();
  call(s, backward);
  int rc = op->sync();
  if (rc) return rc;
  double once = aa_now() - t0;
  if (elapsed(c) > 0.75 * c->budget_s) {
    *out = once > 1e-9 ? once : 1e-9;
    return 0;
  }
  long reps = once > 0 ? (long)ceil(SAMPLE_S / once) : REPS_MAX;
  if (reps < 1) reps = 1;
  if (reps > REPS_MAX) reps = REPS_MAX;
  double sample[SAMPLES];
  for (int i = 0, retries = 0; i < SAMPLES;) {
    t0 = aa_now();
    for (long r = 0; r < reps; r++)
      call(s, backward);
    if ((rc = op->sync())) return rc;
    double took = aa_now() - t0;
    if (took < SAMPLE_S / 4 && reps < REPS_MAX && retries++ < 4) {
      long more = took > 0 ? (long)ceil((double)reps * SAMPLE_S / took) : reps * 16;
      reps = more < REPS_MAX ? more : REPS_MAX;
      continue;
    }
    sample[i++] = took / (double)reps;
  }
  qsort(sample, SAMPLES, sizeof sample[0], cmp_double);
  *out = sample[SAMPLES / 2] > 1e-9 ? sample[SAMPLES / 2] : 1e-9;
  return 0;
}

static int fits_int(int64_t v) { return v >= 1 && v <= 0x7fffffff; }

/* Whether the backend has kind k's kernels: the llama family's are not in
 * every op table yet (a NULL entry). */
static int has_kernels(const aa_ops_t *op, aa_op_kind_t k) {
  switch (k) {
  case AA_OP_RMSNORM: return op->rmsnorm_forward && op->rmsnorm_backward;
  case AA_OP_SWIGLU: return op->swiglu_forward && op->swiglu_backward;
  case AA_OP_ROPE: return op->rope_forward && op->rope_backward;
  case AA_OP_GQA: return op->attention_gqa_forward && op->attention_gqa_backward;
  case AA_OP_RING_DIAG:
  case AA_OP_RING_BLOCK:
    return op->attention_block_forward && op->attention_block_merge && op->attention_block_delta &&
           op->attention_block_backward;
  default: return 1;
  }
}

/* Allocates and fills the buffers of op shape w into s (its buffers in b). */
static int setup(cal_t *c, const aa_calib_op_t *w, shape_t *s, bufs_t *b) {
  const int64_t *d = w->shape.d;
  const aa_arch_t *arch = &c->spec->arch;
  void **x = s->p;
  int rc = 0;
  *s = (shape_t){.ops = c->ops, .kind = w->shape.op, .dtype = w->dtype, .vocab = arch->vocab_size};
  if (!has_kernels(c->ops, w->shape.op))
    return aa_error(AA_EUNSUPPORTED, "calibration: the %s backend has no %s kernels", c->cuda ? "CUDA" : "CPU",
                    aa_op_kind_name(w->shape.op));
  switch (w->shape.op) {
  case AA_OP_MATMUL: {
    if (!fits_int(d[0]) || !fits_int(d[1]) || !fits_int(d[2])) break;
    size_t N = (size_t)d[0], C = (size_t)d[1], OC = (size_t)d[2];
    s->a = (int)N, s->b = (int)C, s->c = (int)OC;
    if ((rc = take(c, b, &x[0], N * C, FILL_RAND, 0)) || (rc = take(c, b, &x[1], OC * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[2], OC, FILL_RAND, 0)) || (rc = take(c, b, &x[3], N * OC, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[4], N * C, FILL_ZERO, 0)) || (rc = take(c, b, &x[5], OC * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[6], OC, FILL_ZERO, 0)) || (rc = take(c, b, &x[7], N * OC, FILL_RAND, 0)))
      return rc;
    if (w->dtype != AA_F32) {
      /* The 16-bit promise of set_gemm_inputs: every operand representable. */
      c->ops->round_store(NULL, x[0], w->dtype, N * C);
      c->ops->round_store(NULL, x[1], w->dtype, OC * C);
      c->ops->round_store(NULL, x[7], w->dtype, N * OC);
    }
    return 0;
  }
  case AA_OP_ATTENTION: {
    if (!fits_int(d[0]) || !fits_int(d[1]) || !fits_int(d[2]) || !fits_int(d[3]) || d[2] % d[3]) break;
    size_t B = (size_t)d[0], T = (size_t)d[1], C = (size_t)d[2], NH = (size_t)d[3];
    s->a = (int)B, s->b = (int)T, s->c = (int)C, s->d = (int)NH;
    if ((rc = take(c, b, &x[0], B * T * 3 * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[1], B * T * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[2], B * NH * T, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[3], B * T * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[4], B * T * 3 * C, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_LAYERNORM: {
    if (!fits_int(d[0]) || !fits_int(d[1])) break;
    size_t N = (size_t)d[0], C = (size_t)d[1];
    s->a = (int)N, s->b = (int)C;
    if ((rc = take(c, b, &x[0], N * C, FILL_RAND, 0)) || (rc = take(c, b, &x[1], C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[2], C, FILL_RAND, 0)) || (rc = take(c, b, &x[3], N * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[4], N, FILL_ZERO, 0)) || (rc = take(c, b, &x[5], N, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[6], N * C, FILL_RAND, 0)) || (rc = take(c, b, &x[7], N * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[8], C, FILL_ZERO, 0)) || (rc = take(c, b, &x[9], C, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_RMSNORM: {
    if (!fits_int(d[0]) || !fits_int(d[1])) break;
    size_t N = (size_t)d[0], C = (size_t)d[1];
    s->a = (int)N, s->b = (int)C, s->eps = arch->norm_eps > 0 ? arch->norm_eps : 1e-5f;
    if ((rc = take(c, b, &x[0], N * C, FILL_RAND, 0)) || (rc = take(c, b, &x[1], C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[2], N * C, FILL_ZERO, 0)) || (rc = take(c, b, &x[3], N, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[4], N * C, FILL_RAND, 0)) || (rc = take(c, b, &x[5], N * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[6], C, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_SWIGLU: {
    if (!fits_int(d[0]) || !fits_int(d[1]) || d[1] > 0x3fffffff) break;
    size_t N = (size_t)d[0], F = (size_t)d[1];
    s->a = (int)N, s->b = (int)F;
    if ((rc = take(c, b, &x[0], N * 2 * F, FILL_RAND, 0)) || (rc = take(c, b, &x[1], N * F, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[2], N * F, FILL_RAND, 0)) || (rc = take(c, b, &x[3], N * 2 * F, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_ROPE:
  case AA_OP_GQA: {
    /* (S, T, G, HS): S groups of T positions, G query heads and one
     * key/value head of HS each (calib.h); the kernels at B = S, NH = G,
     * NKV = 1. */
    if (!fits_int(d[0]) || !fits_int(d[1]) || !fits_int(d[2]) || !fits_int(d[3]) || d[3] % 2 ||
        d[2] > 0x3fffffff / d[3])
      break;
    size_t S = (size_t)d[0], T = (size_t)d[1], G = (size_t)d[2], HS = (size_t)d[3], W = (G + 2) * HS;
    s->a = (int)S, s->b = (int)T, s->c = (int)G, s->d = (int)HS;
    s->theta = arch->rope_theta > 0 ? arch->rope_theta : 10000.0f;
    if ((rc = take(c, b, &x[0], S * T * W, FILL_RAND, 0))) return rc;
    if (w->shape.op == AA_OP_ROPE) return 0;
    if ((rc = take(c, b, &x[1], S * T * G * HS, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[2], S * G * T, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[3], S * T * G * HS, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[4], S * T * W, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_RING_DIAG:
  case AA_OP_RING_BLOCK: {
    /* (S, Tc, G, HS): S (sequence, key/value head) pairs of a chunk of Tc
     * queries against Tc keys, G query heads each (calib.h); the kernels
     * at B = S, NH = G, NKV = 1. */
    if (!fits_int(d[0]) || !fits_int(d[1]) || !fits_int(d[2]) || !fits_int(d[3]) ||
        d[3] > 0x3fffffff / (d[2] + 2))
      break;
    size_t S = (size_t)d[0], Tc = (size_t)d[1], G = (size_t)d[2], HS = (size_t)d[3], W = (G + 2) * HS;
    s->a = (int)S, s->b = (int)Tc, s->c = (int)G, s->d = (int)HS;
    if ((rc = take(c, b, &x[0], S * Tc * W, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[1], S * Tc * G * HS, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[2], S * G * Tc, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[3], S * Tc * G * HS, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[4], S * G * Tc, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[5], S * Tc * W, FILL_ZERO, 0)))
      return rc;
    if (w->shape.op == AA_OP_RING_DIAG) return 0;
    if ((rc = take(c, b, &x[6], S * Tc * G * HS, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[7], S * G * Tc, FILL_ZERO, 0)))
      return rc;
    return 0;
  }
  case AA_OP_GELU:
  case AA_OP_RESIDUAL:
  case AA_OP_CAST:
  case AA_OP_ADAMW: {
    if (d[0] < 1 || (uint64_t)d[0] > SIZE_MAX / 8) break;
    size_t n = s->n = (size_t)d[0];
    int bufs = w->shape.op == AA_OP_GELU       ? 4
               : w->shape.op == AA_OP_RESIDUAL ? 6
               : w->shape.op == AA_OP_CAST     ? 2
                                               : 4;
    for (int i = 0; i < bufs && !rc; i++) {
      /* The AdamW's moments start at 0, its second one must stay >= 0. */
      int fill = w->shape.op == AA_OP_ADAMW && i >= 2 ? FILL_ZERO : FILL_RAND;
      rc = take(c, b, &x[i], n, fill, 0);
    }
    if (w->shape.op == AA_OP_CAST && s->dtype == AA_F32) s->dtype = AA_BF16; /* a cast must go somewhere */
    return rc;
  }
  case AA_OP_XENT: {
    if (!fits_int(d[0]) || !fits_int(d[1])) break;
    size_t N = (size_t)d[0], V = (size_t)d[1];
    s->a = (int)N, s->b = (int)V;
    /* A slice narrower than the vocabulary is a tensor rank's (the
     * vocab-parallel cross-entropy over R ranks); else one rank's whole. */
    s->R = (int64_t)V >= arch->vocab_size ? 1 : (int)((arch->vocab_size + (int64_t)V - 1) / (int64_t)V);
    s->valid = s->R == 1 ? arch->vocab_size : (int)V;
    s->lo = 0;
    if ((rc = take(c, b, &x[0], N * V, FILL_RAND, 0)) || (rc = take(c, b, &x[1], N, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[2], N * V, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[3], (size_t)s->R * N * 3, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[4], N * V, FILL_ZERO, 0)) || (rc = take(c, b, &x[11], N, FILL_TOKENS, s->valid)))
      return rc;
    s->tok = x[11];
    for (int r = 0; r < s->R && s->R > 1; r++)
      c->ops->xent_vocab_partial((float *)x[3] + (size_t)r * N * 3, x[0], s->tok, 0, s->valid, s->a, s->b);
    return 0;
  }
  case AA_OP_ENCODER: {
    if (!fits_int(d[0]) || !fits_int(d[1])) break;
    /* N tokens as sequences of the model's length where they divide. */
    int64_t T = d[0] % arch->seq_len == 0 ? arch->seq_len : d[0];
    size_t B = (size_t)(d[0] / T), C = (size_t)d[1], V = (size_t)arch->vocab_size;
    s->a = (int)B, s->b = (int)T, s->c = (int)C;
    s->no_wpe = aa_arch_is_llama(arch); /* the lookup alone: llama has no position table */
    if ((rc = take(c, b, &x[0], V * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[1], (size_t)T * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[2], B * (size_t)T * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[3], B * (size_t)T * C, FILL_RAND, 0)) ||
        (rc = take(c, b, &x[4], V * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[5], (size_t)T * C, FILL_ZERO, 0)) ||
        (rc = take(c, b, &x[11], B * (size_t)T, FILL_TOKENS, (int)V)))
      return rc;
    s->tok = x[11];
    return 0;
  }
  default: break;
  }
  return aa_error(AA_EINVAL, "calibration: %s [%lld,%lld,%lld,%lld]: a shape the kernels cannot take",
                  aa_op_kind_name(w->shape.op), (long long)d[0], (long long)d[1], (long long)d[2],
                  (long long)d[3]);
}

/* Whether the kernels of kind k run the same whatever the storage dtype:
 * everything but the GEMMs (set_gemm_inputs) and the casts computes fp32. */
static int dtype_blind(aa_op_kind_t k) { return k != AA_OP_MATMUL && k != AA_OP_CAST; }

/* Times op shape w into its fwd_s and bwd_s; both SKIPPED when its
 * buffers do not fit in memory. */
static int measure_op(cal_t *c, aa_calib_op_t *w) {
  bufs_t b = {.ops = c->ops, .limit = c->mem_limit};
  shape_t s;
  int rc = setup(c, w, &s, &b);
  if (rc == AA_EOOM || rc == AA_ENOMEM) {
    bufs_free(&b);
    w->fwd_s = w->bwd_s = SKIPPED;
    return 0;
  }
  if (!rc) rc = c->ops->sync();
  if (!rc && s.kind == AA_OP_MATMUL) c->ops->set_gemm_inputs(s.dtype);
  if (!rc) rc = time_calls(c, &s, 0, &w->fwd_s);
  if (!rc && s.kind != AA_OP_ADAMW) rc = time_calls(c, &s, 1, &w->bwd_s);
  if (s.kind == AA_OP_MATMUL) c->ops->set_gemm_inputs(AA_F32);
  if (s.kind == AA_OP_ADAMW) w->bwd_s = 0;
  /* Buffers are released after the ops that use them have finished. */
  int sync = c->ops->sync();
  if (!rc) rc = sync;
  bufs_free(&b);
  if (rc)
    return aa_error_wrap(rc, "calibration: %s [%lld,%lld,%lld,%lld] %s", aa_op_kind_name(w->shape.op),
                         (long long)w->shape.d[0], (long long)w->shape.d[1], (long long)w->shape.d[2],
                         (long long)w->shape.d[3], aa_dtype_name(w->dtype));
  return 0;
}

/* ---- host values over the group (device buffers under NCCL) ---------------------------- */

static int dev_buffer(cal_t *c, void **out, size_t bytes) {
  int rc = c->ops->alloc(out, bytes);
  return rc ? aa_error_wrap(rc, "calibration: %zu bytes for the group", bytes) : 0;
}

/* x(n) = the ranks' mean of x, in fp32 (the group's sums are fp32; a
 * SKIPPED value keeps the mean negative). */
static int mean_over_ranks(cal_t *c, double *x, size_t n) {
  float *host = malloc(n * sizeof *host);
  void *dev = NULL;
  if (!host) return aa_error(AA_ENOMEM, "calibration: out of host memory");
  for (size_t i = 0; i < n; i++)
    host[i] = (float)x[i];
  int rc = dev_buffer(c, &dev, n * sizeof *host);
  if (!rc) rc = c->ops->upload(dev, host, n * sizeof *host);
  if (!rc) rc = aa_comm_all_reduce(c->comm, dev, dev, n, AA_F32, AA_COMM_AVG);
  if (!rc) rc = c->ops->download(host, dev, n * sizeof *host);
  for (size_t i = 0; !rc && i < n; i++)
    x[i] = host[i];
  c->ops->free(dev);
  free(host);
  return rc;
}

/* bytes (a multiple of 4) of host memory p = rank 0's, bit for bit: a
 * broadcast copies, whatever the dtype says. */
static int broadcast_bytes(cal_t *c, aa_comm_t *g, void *p, size_t bytes) {
  void *dev = NULL;
  int rc = dev_buffer(c, &dev, bytes);
  if (!rc) rc = c->ops->upload(dev, p, bytes);
  if (!rc) rc = aa_comm_broadcast(g, dev, dev, bytes / 4, AA_F32, 0);
  if (!rc) rc = c->ops->download(p, dev, bytes);
  c->ops->free(dev);
  return rc;
}

/* ---- the op pass ----------------------------------------------------------------------- */

static int op_pass(cal_t *c, aa_calib_t *out) {
  for (int i = 0; i < out->n_op; i++) {
    aa_calib_op_t *w = &out->op[i];
    int rc = 0, same = -1;
    for (int j = 0; j < i && same < 0 && dtype_blind(w->shape.op); j++)
      if (aa_op_shape_equal(&out->op[j].shape, &w->shape)) same = j;
    /* Every rank times the same shape at the same time. */
    if (c->world > 1 && (rc = aa_comm_barrier(c->comm))) return aa_error_wrap(rc, "calibration: the op pass");
    if (c->rank >= c->timers) { /* sits out: 0 adds nothing to the timers' sum */
      w->fwd_s = w->bwd_s = 0;
    } else if (same >= 0) {
      w->fwd_s = out->op[same].fwd_s;
      w->bwd_s = out->op[same].bwd_s;
    } else if ((rc = measure_op(c, w))) {
      return rc;
    }
    progress(c);
  }
  if (c->world > 1) {
    size_t n = 2 * (size_t)(out->n_op > 0 ? out->n_op : 0); /* n_op <= AA_CALIB_OPS_MAX */
    double *t = malloc(n * sizeof *t + 1);
    if (!t) return aa_error(AA_ENOMEM, "calibration: out of host memory");
    for (int i = 0; i < out->n_op; i++)
      t[2 * i] = out->op[i].fwd_s, t[2 * i + 1] = out->op[i].bwd_s;
    int rc = mean_over_ranks(c, t, n);
    /* The mean over the world, of which only the timers added anything. */
    const double scale = (double)c->world / c->timers;
    for (int i = 0; !rc && i < out->n_op; i++)
      out->op[i].fwd_s = t[2 * i] * scale, out->op[i].bwd_s = t[2 * i + 1] * scale;
    free(t);
    if (rc) return aa_error_wrap(rc, "calibration: the ranks' op times");
  }
  /* The shapes that did not fit (on any rank) are left out: the model
   * takes them from their measured neighbours. */
  int kept = 0;
  for (int i = 0; i < out->n_op; i++) {
    aa_calib_op_t o = out->op[i];
    if (o.fwd_s < 0) continue;
    o.fwd_s = o.fwd_s > 1e-9 ? o.fwd_s : 1e-9;
    o.bwd_s = o.shape.op == AA_OP_ADAMW ? 0 : o.bwd_s > 1e-9 ? o.bwd_s : 1e-9;
    out->op[kept++] = o;
  }
  if (kept == 0)
    return aa_error(AA_EOOM, "calibration: none of the model's %d op shapes fits in memory%s", out->n_op,
                    c->mem_limit ? " (the limit)" : "");
  out->n_op = kept;
  return 0;
}

/* ---- the collective pass --------------------------------------------------------------- */

/* One call of kind k on group g of t ranks with n fp32 elements per rank (a
 * send: one round trip with the rank's partner). */
static int collective(aa_comm_t *g, aa_cost_collective_t k, void *a, void *b, size_t n) {
  int me = aa_comm_rank(g), rc;
  switch (k) {
  case AA_COST_ALL_REDUCE: return aa_comm_all_reduce(g, a, b, n, AA_F32, AA_COMM_SUM);
  case AA_COST_ALL_GATHER: return aa_comm_all_gather(g, a, b, n, AA_F32);
  case AA_COST_REDUCE_SCATTER: return aa_comm_reduce_scatter(g, a, b, n, AA_F32, AA_COMM_SUM);
  case AA_COST_ALL_TO_ALL: { /* n elements to each rank, from a buffer of t n (an even token exchange) */
    int t = aa_comm_world(g);
    size_t *cnt = malloc(2 * (size_t)t * sizeof *cnt);
    if (!cnt) return aa_error(AA_ENOMEM, "calibration: out of memory");
    for (int i = 0; i < t; i++) {
      cnt[i] = n;
      cnt[t + i] = (size_t)i * n;
    }
    rc = aa_comm_all_to_all_v(g, a, cnt, cnt + t, b, cnt, cnt + t, AA_F32);
    free(cnt);
    return rc;
  }
  default:
    if (me % 2 == 0) {
      if (!(rc = aa_comm_send(g, a, n, AA_F32, me + 1))) rc = aa_comm_recv(g, b, n, AA_F32, me + 1);
    } else {
      if (!(rc = aa_comm_recv(g, b, n, AA_F32, me - 1))) rc = aa_comm_send(g, a, n, AA_F32, me - 1);
    }
    return rc;
  }
}

/* Times kind k at message size `msg` (cost.h's message) on group g of t
 * ranks: *link = the bytes through each rank's link, *secs = rank's median
 * seconds per call (a send: half the round trip). The group's rank 0 picks
 * the repetitions from its untimed call and whether to go on at all
 * (*skipped: past the budget), so that every rank makes the same calls. */
static int measure_link(cal_t *c, aa_comm_t *g, aa_cost_collective_t k, size_t msg, int may_skip, void *a,
                        void *b, double *link, double *secs, int *skipped) {
  int t = aa_comm_world(g), rc;
  size_t n = k == AA_COST_ALL_REDUCE || k == AA_COST_SEND ? msg / 4 : msg / 4 / (size_t)t;
  if (n == 0) n = 1;
  double ring = k == AA_COST_ALL_REDUCE ? 2.0 * (t - 1) / t * 4.0 * (double)n
                : k == AA_COST_SEND     ? 4.0 * (double)n
                                        : (double)(t - 1) * 4.0 * (double)n;
  double t0 = aa_now();
  if ((rc = collective(g, k, a, b, n))) return rc;
  float plan[2] = {0, 0}; /* repetitions, skip */
  double once = aa_now() - t0;
  if (aa_comm_rank(g) == 0) {
    double reps = once > 0 ? ceil(SAMPLE_S / once) : 1000;
    plan[0] = (float)(reps < 1 ? 1 : reps > 1000 ? 1000 : reps);
    plan[1] = may_skip && elapsed(c) > c->budget_s;
  }
  if ((rc = broadcast_bytes(c, g, plan, sizeof plan))) return rc;
  *skipped = plan[1] != 0;
  if (*skipped) return 0;
  long reps = (long)plan[0];
  double sample[SAMPLES];
  for (int i = 0; i < SAMPLES; i++) {
    /* Each sample starts together, so a rank's lateness is not timed. */
    if ((rc = aa_comm_barrier(g))) return rc;
    t0 = aa_now();
    for (long r = 0; r < reps && !rc; r++)
      rc = collective(g, k, a, b, n);
    if (rc) return rc;
    sample[i] = (aa_now() - t0) / (double)reps / (k == AA_COST_SEND ? 2 : 1);
  }
  qsort(sample, SAMPLES, sizeof sample[0], cmp_double);
  *link = ring;
  *secs = sample[SAMPLES / 2];
  return 0;
}

static const char *collective_name(aa_cost_collective_t k) {
  return k == AA_COST_ALL_REDUCE       ? "all-reduce"
         : k == AA_COST_ALL_GATHER     ? "all-gather"
         : k == AA_COST_REDUCE_SCATTER ? "reduce-scatter"
         : k == AA_COST_ALL_TO_ALL     ? "all-to-all"
                                       : "send/recv";
}

/* The kinds on one group of t ranks (this rank's block; rank 0 fits). */
static int measure_group(cal_t *c, aa_comm_t *g, void *a, void *b, aa_calib_t *out) {
  int t = aa_comm_world(g);
  for (int ki = 0; ki < LINK_KINDS; ki++) {
    aa_cost_collective_t k = link_kinds[ki];
    double bytes[MSG_SIZES], secs[MSG_SIZES];
    int n = 0, rc = 0;
    for (int s = 0; s < MSG_SIZES; s++) {
      int skipped = 0;
      rc = measure_link(c, g, k, msg_bytes[s], n >= 2, a, b, &bytes[n], &secs[n], &skipped);
      if (rc)
        return aa_error_wrap(rc, "calibration: %s of %zu bytes on %d ranks", collective_name(k), msg_bytes[s],
                             t);
      if (!skipped) n++;
      progress(c);
    }
    if (c->rank != 0) continue;
    if (out->n_link >= AA_CALIB_LINKS_MAX)
      return aa_error(AA_EINVAL, "calibration: more than %d links", AA_CALIB_LINKS_MAX);
    aa_calib_link_t *l = &out->link[out->n_link];
    if (aa_calib_fit_link(bytes, secs, n, &l->latency_s, &l->bytes_per_s)) {
      /* Noise (a loaded host) made the times not grow with the size: the
       * smallest message's time stands for the latency and the largest's
       * rate for the bandwidth, rather than no line at all. */
      int lo = 0, hi = 0;
      for (int i = 1; i < n; i++) {
        if (bytes[i] < bytes[lo]) lo = i;
        if (bytes[i] > bytes[hi]) hi = i;
      }
      l->latency_s = secs[lo];
      l->bytes_per_s = bytes[hi] / (secs[hi] > 1e-9 ? secs[hi] : 1e-9);
    }
    l->kind = k;
    l->ranks = t;
    out->n_link++;
  }
  return 0;
}

/* Every group size t = 2, 4, ... up to the world: blocks of t consecutive
 * ranks measure at once, the rest sit out (every rank splits alike). Rank
 * 0's lines then go to every rank. */
static int comm_pass(cal_t *c, aa_calib_t *out) {
  void *a = NULL, *b = NULL;
  size_t most = MSG_MOST;
  int rc = dev_buffer(c, &a, most);
  if (!rc) rc = dev_buffer(c, &b, most);
  for (int t = 2; !rc && t <= c->world; t *= 2) {
    int blocks = c->world / t;
    int color = c->rank < blocks * t ? c->rank / t : -1;
    aa_comm_t *g = NULL;
    if ((rc = aa_comm_split(c->comm, color, c->rank, &g))) {
      rc = aa_error_wrap(rc, "calibration: groups of %d ranks", t);
      break;
    }
    if (g) rc = measure_group(c, g, a, b, out);
    aa_comm_destroy(g);
  }
  c->ops->free(a);
  c->ops->free(b);
  if (rc) return rc;
  /* n_link, then each line's kind, ranks, latency and bandwidth. */
  double wire[1 + 4 * AA_CALIB_LINKS_MAX] = {0};
  wire[0] = out->n_link;
  for (int i = 0; i < out->n_link; i++) {
    wire[1 + 4 * i] = out->link[i].kind;
    wire[2 + 4 * i] = out->link[i].ranks;
    wire[3 + 4 * i] = out->link[i].latency_s;
    wire[4 + 4 * i] = out->link[i].bytes_per_s;
  }
  if ((rc = broadcast_bytes(c, c->comm, wire, sizeof wire)))
    return aa_error_wrap(rc, "calibration: sharing the links");
  out->n_link = (int)wire[0];
  for (int i = 0; i < out->n_link; i++)
    out->link[i] = (aa_calib_link_t){.kind = (aa_cost_collective_t)wire[1 + 4 * i],
                                     .ranks = (int)wire[2 + 4 * i],
                                     .latency_s = wire[3 + 4 * i],
                                     .bytes_per_s = wire[4 + 4 * i]};
  return 0;
}

/* ---- driver ---------------------------------------------------------------------------- */

/* The op table of "cpu" or "cuda:N", the device made current. */
static int open_device(const char *device, const aa_ops_t **ops, int *cuda) {
  *ops = aa_ops_cpu();
  *cuda = 0;
  if (!device || !strcmp(device, "cpu")) return 0;
  char *end = NULL;
  long n = -1;
  if (!strcmp(device, "cuda"))
    n = 0;
  else if (!strncmp(device, "cuda:", 5) && isdigit((unsigned char)device[5]))
    n = strtol(device + 5, &end, 10);
  if (n < 0 || n > 4096 || (end && *end))
    return aa_error(AA_EINVAL, "calibration: unknown device '%s' (expected cpu or cuda:N)", device);
#ifdef AA_HAVE_CUDA
  aa_cuda_clear_error();
  int rc = aa_cuda_init((int)n);
  if (rc) return aa_error_wrap(rc, "calibration: device %s", device);
  *ops = aa_ops_cuda();
  *cuda = 1;
  return 0;
#else
  return aa_error(AA_EUNSUPPORTED, "calibration: device %s: this build has no CUDA backend", device);
#endif
}

static int calibrate(cal_t *c, const aa_calibrate_opts_t *o, aa_calib_t *out) {
  int rc = open_device(o->device, &c->ops, &c->cuda);
  if (rc) return rc;
  const char *backend = c->comm ? aa_comm_backend(c->comm) : "self";
  if (c->world > 1 && (!strcmp(backend, "nccl")) != c->cuda)
    return aa_error(AA_EINVAL, "calibration: a %s group for ops on %s", backend,
                    c->cuda ? "a GPU" : "the CPU");
  int host_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  int threads = o->threads > 0 ? o->threads : host_cores;
  aa_ops_cpu()->set_threads(threads);
  /* On a CPU host with fewer cores than the gang's threads, only as many
   * ranks as the cores hold time the ops at once: an op timed while the
   * scheduler slices it with others is as slow as its slices fall (a small
   * op fits in one slice and looks uncontended, a large one does not), and
   * the step-time model scales clean figures by the pool's core share
   * instead (predict.h). GPUs each have their own. */
  c->timers = c->world;
  if (!c->cuda && c->world * threads > host_cores) c->timers = host_cores / threads > 1 ? host_cores / threads : 1;
  /* One shape's buffers take at most the limit; on the CPU, where an
   * allocation rarely fails but touching it may end the process, half the
   * host's memory shared by the ranks when there is no limit. */
  c->mem_limit = o->memory_limit;
  if (!c->mem_limit && !c->cuda)
    c->mem_limit = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) / 2 / (size_t)c->world;
  int devices = o->max_devices > c->world ? o->max_devices : c->world;
  if (devices < AA_CALIBRATE_DEVICES_MIN) devices = AA_CALIBRATE_DEVICES_MIN;
  memset(out, 0, sizeof *out);
  out->version = AA_CALIB_VERSION;
  if (o->ops) {
    /* Each (shape, dtype) once, as the calibration's readers require. */
    for (int i = 0; i < o->n_ops; i++)
      if (!aa_calib_find_op(out, &o->ops[i].shape, o->ops[i].dtype))
        out->op[out->n_op++] = (aa_calib_op_t){.shape = o->ops[i].shape, .dtype = o->ops[i].dtype};
  } else {
    size_t wanted = aa_predict_wanted(c->spec, devices, c->cuda, out->op, AA_CALIB_OPS_MAX);
    /* Each (shape, dtype) once (predict.h; tests/test_predict.c holds it). */
    out->n_op = wanted < AA_CALIB_OPS_MAX ? (int)wanted : AA_CALIB_OPS_MAX;
  }
  if (out->n_op == 0) return aa_error(AA_EINVAL, "calibration: the model has no op shapes to measure");
  int nt = 0;
  for (int t = 2; t <= c->world; t *= 2)
    nt++;
  c->total = out->n_op + nt * LINK_KINDS * MSG_SIZES;
  if ((rc = op_pass(c, out))) return rc;
  if (c->world > 1 && (rc = comm_pass(c, out))) return rc;
  const char *fp = o->fingerprint ? o->fingerprint : o->device ? o->device : "cpu";
  /* Cut to fit at a character boundary (JSON text is UTF-8); the
   * calibration's readers refuse control characters in the name. */
  size_t n = strlen(fp);
  if (n >= sizeof out->device) {
    n = sizeof out->device - 1;
    while (n > 0 && ((unsigned char)fp[n] & 0xC0) == 0x80)
      n--;
  }
  snprintf(out->device, sizeof out->device, "%.*s", (int)n, n ? fp : "?");
  for (char *p = out->device; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  snprintf(out->backend, sizeof out->backend, "%s", c->world > 1 ? backend : "self");
  out->cuda = c->cuda;
  out->threads = c->cuda ? 0 : threads;
  out->host_cores = host_cores;
  out->ranks = c->timers;
  out->measured_s = elapsed(c);
  return 0;
}

int aa_calibrate(const aa_model_spec_t *spec, const aa_calibrate_opts_t *o, aa_calib_t *out) {
  static const aa_calibrate_opts_t none = {0};
  if (!o) o = &none;
  if (!spec || !out) return aa_error(AA_EINVAL, "calibration: no model or no output");
  if (o->threads < 0 || o->max_devices < 0 || !(o->budget_s >= 0))
    return aa_error(AA_EINVAL, "calibration: negative threads, devices or budget");
  if (o->ops && (o->n_ops < 1 || o->n_ops > AA_CALIB_OPS_MAX))
    return aa_error(AA_EINVAL, "calibration: %d op shapes given (1..%d)", o->n_ops, AA_CALIB_OPS_MAX);
  for (int i = 0; o->ops && i < o->n_ops; i++)
    if ((unsigned)o->ops[i].shape.op >= AA_OP_KINDS || (unsigned)o->ops[i].dtype > AA_F16)
      return aa_error(AA_EINVAL, "calibration: op shape %d: no such kind or dtype", i);
  cal_t c = {.comm = o->comm,
             .rank = o->comm ? aa_comm_rank(o->comm) : 0,
             .world = o->comm ? aa_comm_world(o->comm) : 1,
             .start = aa_now(),
             .budget_s = o->budget_s > 0 ? o->budget_s : AA_CALIBRATE_BUDGET_DEFAULT,
             .spec = spec,
             .rng = 0x9E3779B97F4A7C15ULL,
             .o = o};
  /* The result is written only on success: it is built on the heap. */
  aa_calib_t *tmp = malloc(sizeof *tmp);
  int rc = tmp ? calibrate(&c, o, tmp) : aa_error(AA_ENOMEM, "calibration: out of host memory");
  if (!rc) memcpy(out, tmp, sizeof *out);
  free(tmp);
  /* A rank that failed on its own stops its peers now, not at their timeout. */
  if (rc && c.world > 1) aa_comm_abort(o->comm);
  return rc;
}
