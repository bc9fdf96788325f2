/* Op and collective times from a device profile (roofline.h). The
 * constants are docs/device-profiles.md's, each with its source there. */
#include "roofline.h"

#include "../common/aa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Achieved fractions of the peak, and the floor of a kernel (the sources
 * are docs/device-profiles.md "Op times from a profile"):
 * - GEMM: cuBLAS bf16 on B200 (pyptx.dev/performance: 1,006, 1,532 and
 *   1,610 of 2,250 dense TFLOP/s at 2048^3, 4096^3 and 8192^3) fits
 *   time = work / (0.73 peak) + 6.6 us within 1.5 % at all three;
 * - attention: FlashAttention-2 (Dao 2023, arXiv 2307.08691) reaches
 *   50-73 % of an A100's peak; the low end, as the backward and causal
 *   masks sit there;
 * - memory: an H100 SXM5's device-to-device copy, 2,903 of 3,350 GB/s
 *   (Voltage Park / Georgia Tech H100 cluster benchmark, aigatech
 *   vpbenchmarking): 0.867;
 * - links: nccl-tests' all_reduce_perf bus bandwidth on 8 A100 SXM4 over
 *   NVLink, 230-250 of 300 GB/s (0.8; an H100's NVLink SHARP goes past the
 *   ring's bound, which a ring model does not count); across nodes, 331
 *   GB/s bus bandwidth on 4 nodes of 8 H100s with 400 Gb/s per GPU
 *   (vpbenchmarking), 0.83 of 8 x 50 GB/s. */
#define GEMM_EFF 0.73
#define ATTENTION_EFF 0.50
#define MEMORY_EFF 0.867
#define FIXED_S 6.6e-6
#define INTRA_EFF 0.80
#define INTER_EFF 0.83

const char *aa_roof_attention_name(aa_roof_attention_t a) {
  static const char *names[] = {"fused", "materialised"};
  return (unsigned)a < AA_ROOF_ATTENTION_KINDS ? names[a] : "?";
}

int aa_roof_attention_parse(aa_roof_attention_t *out, const char *name) {
  for (int a = 0; a < AA_ROOF_ATTENTION_KINDS; a++)
    if (name && !strcmp(name, aa_roof_attention_name((aa_roof_attention_t)a))) {
      *out = (aa_roof_attention_t)a;
      return 0;
    }
  return aa_error(AA_EINVAL, "an attention implementation is fused or materialised, not '%s'",
                  name ? name : "");
}

const char *aa_roof_class_name(aa_roof_class_t c) {
  static const char *names[] = {"gemm", "attention", "memory"};
  return (unsigned)c < AA_ROOF_CLASSES ? names[c] : "?";
}

aa_roof_class_t aa_roof_class_of(aa_op_kind_t k) {
  switch (k) {
  case AA_OP_MATMUL: return AA_ROOF_GEMM;
  case AA_OP_ATTENTION:
  case AA_OP_GQA:
  case AA_OP_RING_DIAG:
  case AA_OP_RING_BLOCK: return AA_ROOF_ATTENTION;
  default: return AA_ROOF_MEMORY;
  }
}

static double dtype_bytes(aa_dtype_t dt) { return dt == AA_F32 ? 4 : 2; }

void aa_roofline_op_cost(const aa_op_shape_t *s, aa_dtype_t dt, double flops[2], double bytes[2]) {
  const double a = (double)s->d[0], b = (double)s->d[1], c = (double)s->d[2], d = (double)s->d[3];
  const double e = dtype_bytes(dt);
  flops[0] = flops[1] = bytes[0] = bytes[1] = 0;
  switch (s->op) {
  case AA_OP_MATMUL: /* (N, C, OC): forward one product, backward two (dX and dW) */
    flops[0] = 2 * a * b * c;
    flops[1] = 4 * a * b * c;
    bytes[0] = e * (a * b + b * c + a * c);
    bytes[1] = e * 2 * (a * c + a * b + b * c);
    break;
  case AA_OP_ATTENTION: /* (B, T, C, NH), causal: QK^T and PV over half the T^2 pairs */
    flops[0] = 2 * a * b * b * c;
    flops[1] = 2.5 * flops[0]; /* dQ, dK, dV, dP and the recomputed P */
    bytes[0] = e * a * b * 4 * c;
    bytes[1] = e * a * b * 8 * c;
    break;
  case AA_OP_GQA:        /* (S, T, G, HS), causal */
  case AA_OP_RING_DIAG:  /* (S, Tc, G, HS), the causal diagonal block */
  case AA_OP_RING_BLOCK: /* every key seen: twice the causal work */
    flops[0] = (s->op == AA_OP_RING_BLOCK ? 4 : 2) * a * c * b * b * d;
    flops[1] = 2.5 * flops[0];
    bytes[0] = e * a * b * d * (2 * c + 2);
    bytes[1] = e * a * b * d * (4 * c + 4);
    break;
  case AA_OP_LAYERNORM: /* (N, C): read x, write y; backward read x and dy, write dx */
  case AA_OP_RMSNORM:
    bytes[0] = e * 2 * a * b;
    bytes[1] = e * 3 * a * b;
    flops[0] = 5 * a * b;
    flops[1] = 8 * a * b;
    break;
  case AA_OP_GELU: /* n elements */
    bytes[0] = e * 2 * a;
    bytes[1] = e * 3 * a;
    break;
  case AA_OP_RESIDUAL: /* n: a + b; backward accumulates twice */
    bytes[0] = e * 3 * a;
    bytes[1] = e * 6 * a;
    break;
  case AA_OP_XENT: /* (N, V): the softmax reads the logits; backward writes their gradient */
    bytes[0] = e * a * b;
    bytes[1] = e * 2 * a * b;
    flops[0] = 4 * a * b;
    flops[1] = 2 * a * b;
    break;
  case AA_OP_ENCODER: /* (N, C): rows read and written; backward adds into fp32 gradients */
    bytes[0] = e * 3 * a * b;
    bytes[1] = (e + 8) * a * b;
    break;
  case AA_OP_CAST: /* n: 4 bytes read and 2 written, or the other way */ bytes[0] = bytes[1] = 6 * a; break;
  case AA_OP_ADAMW: /* n fp32 parameters: p, g, m, v read, p, m, v written */
    bytes[0] = 28 * a;
    flops[0] = 12 * a;
    break;
  case AA_OP_SWIGLU: /* (N, F): gate and up read, the product written */
    bytes[0] = e * 3 * a * b;
    bytes[1] = e * 5 * a * b;
    break;
  case AA_OP_ROPE: /* (S, T, G, HS): S·T·(G + 1)·HS elements rotated in place */
    bytes[0] = bytes[1] = e * 2 * a * b * (c + 1) * d;
    break;
  default: break;
  }
}

void aa_roofline_init(aa_roofline_t *r, const aa_device_profile_t *p) {
  memset(r, 0, sizeof *r);
  r->profile = p;
  if (p) {
    r->eff[AA_ROOF_GEMM] = GEMM_EFF;
    r->eff[AA_ROOF_ATTENTION] = ATTENTION_EFF;
    r->eff[AA_ROOF_MEMORY] = MEMORY_EFF;
    r->fixed_s = FIXED_S;
    r->intra_eff = INTRA_EFF;
    r->inter_eff = INTER_EFF;
  } else {
    for (int c = 0; c < AA_ROOF_CLASSES; c++)
      r->eff[c] = 1;
  }
  for (int c = 0; c < AA_ROOF_CLASSES; c++)
    for (int d = 0; d < 3; d++)
      r->scale[c][d] = 1;
}

/* The peak FLOP/s of dt: the profile's tensor-core rate for 16-bit, the
 * vector rate for fp32 (the engine runs fp32 GEMMs without TF32 unless
 * asked); 1 without a profile (a unit roofline). */
static double peak_flops(const aa_roofline_t *r, aa_dtype_t dt) {
  if (!r->profile) return 1;
  const double *f = r->profile->dense_flop_per_s;
  double v = dt == AA_BF16 ? f[AA_PROFILE_BF16] : dt == AA_F16 ? f[AA_PROFILE_FP16] : f[AA_PROFILE_FP32];
  return v > 0 ? v : f[AA_PROFILE_FP32];
}

/* The time of one call before the calibration's scale. */
static double model_time(const aa_roofline_t *r, aa_roof_class_t cls, aa_dtype_t dt, double flops,
                         double bytes) {
  if (flops == 0 && bytes == 0) return 0;
  if (!r->profile) /* a unit roofline: the class's work measure */
    return cls == AA_ROOF_MEMORY ? bytes : flops;
  double t_c = flops / (peak_flops(r, dt) * r->eff[cls]);
  double t_m = bytes / (r->profile->hbm_bytes_per_s * r->eff[AA_ROOF_MEMORY]);
  return r->fixed_s + (t_c > t_m ? t_c : t_m);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void aa_roofline_fit(aa_roofline_t *r, const aa_calib_t *c) {
  if (!c || c->n_op == 0) return;
  double *v = malloc(sizeof *v * 2 * (size_t)c->n_op);
  if (!v) return; /* the scales stay 1: the profile's own level */
  for (int cls = 0; cls < AA_ROOF_CLASSES; cls++) {
    int all = 0;
    for (int dt = 0; dt < 3; dt++) {
      int n = 0;
      for (int i = 0; i < c->n_op; i++) {
        const aa_calib_op_t *o = &c->op[i];
        if ((int)aa_roof_class_of(o->shape.op) != cls || (int)o->dtype != dt) continue;
        double fl[2], by[2];
        aa_roofline_op_cost(&o->shape, o->dtype, fl, by);
        for (int k = 0; k < 2; k++) {
          double m = model_time(r, (aa_roof_class_t)cls, o->dtype, fl[k], by[k]);
          double t = k ? o->bwd_s : o->fwd_s;
          if (m > 0 && t > 0) v[n++] = t / m;
        }
      }
      r->fitted[cls][dt] = n;
      if (n) r->scale[cls][dt] = median(v, n);
      all += n;
    }
    if (!all) continue;
    /* A dtype the calibration did not run takes the others' median. */
    int n = 0;
    for (int dt = 0; dt < 3; dt++)
      if (r->fitted[cls][dt]) v[n++] = r->scale[cls][dt];
    double m = median(v, n);
    for (int dt = 0; dt < 3; dt++)
      if (!r->fitted[cls][dt]) r->scale[cls][dt] = m;
  }
  free(v);
}

bool aa_roofline_knows(const aa_roofline_t *r, aa_roof_class_t cls) {
  if (r->profile) return true;
  for (int d = 0; d < 3; d++)
    if (r->fitted[cls][d]) return true;
  return false;
}

/* One kernel's seconds: its class's roofline times the calibration's
 * scale (an op, or one kernel of a materialised attention). */
static double kernel(const aa_roofline_t *r, aa_roof_class_t cls, aa_dtype_t dt, double flops, double bytes) {
  return r->scale[cls][(unsigned)dt < 3 ? dt : 0] * model_time(r, cls, dt, flops, bytes);
}

/* Attention that materialises the scores: Megatron-LM's ParallelAttention
 * as PTD-P ran it (megatron/model/transformer.py and fused_softmax.py at
 * commit e270f68, April 2021: a GPT's causal mask, the fused
 * scaled-upper-triangular softmax, torch.nn.Dropout on the probabilities).
 * With BH = batch x heads, T the sequence and hn the head size, E = BH T^2
 * score elements and X = BH T hn elements in each of q, k, v and the
 * context, e bytes an element of the storage dtype, 1 byte a dropout mask
 * element (PyTorch's uint8 mask), and g = 2 BH T^2 hn FLOPs in one
 * product over the full square (cuBLAS computes the masked half too):
 *   forward
 *     baddbmm QK^T (beta 0: the output is not read)  g FLOPs, e (2X + E) bytes
 *     causal softmax: the T(T+1)/2 ~ E/2 entries at or below the
 *       diagonal read, the whole square written        e (E/2 + E)
 *     dropout: read, written, its mask written         2e E + E
 *     bmm P V: P and v read, the context written       g, e (E + 2X)
 *   backward
 *     dP = dctx v^T: dctx and v read, dP written       g, e (2X + E)
 *     dv = P^T dctx: P and dctx read, dv written       g, e (E + 2X)
 *     dropout backward: dP and the mask read, written  2e E + E
 *     softmax backward: the lower triangles of the
 *       gradient and the output read, the square written  e (E/2 + E/2 + E)
 *     dq = dS k and dk = dS^T q: dS and k (q) read,
 *       dq (dk) written                                2 x (g, e (E + 2X))
 * Each kernel is its own roofline (max of its FLOPs at the GEMM rate and
 * its bytes at the HBM's) with the kernel floor; their times add. O(T hn)
 * passes outside the square (baddbmm's backward scaling of dq by alpha)
 * are left out. GQA's shape (S, T, G, HS) reads as BH = S G, hn = HS, its
 * keys and values repeated to every query head. */
static void materialised(const aa_roofline_t *r, const aa_op_shape_t *s, aa_dtype_t dt, double *fwd_s,
                         double *bwd_s) {
  const bool gqa = s->op == AA_OP_GQA;
  const double BH = (double)s->d[0] * (double)(gqa ? s->d[2] : s->d[3]), T = (double)s->d[1],
               hn = gqa ? (double)s->d[3] : (double)s->d[2] / (double)s->d[3];
  const double e = dtype_bytes(dt), E = BH * T * T, X = BH * T * hn, g = 2 * BH * T * T * hn;
  const aa_roof_class_t G = AA_ROOF_GEMM, M = AA_ROOF_MEMORY;
  *fwd_s = kernel(r, G, dt, g, e * (2 * X + E)) + kernel(r, M, dt, 0, e * (E / 2 + E)) +
           kernel(r, M, dt, 0, 2 * e * E + E) + kernel(r, G, dt, g, e * (E + 2 * X));
  *bwd_s = kernel(r, G, dt, g, e * (2 * X + E)) + kernel(r, G, dt, g, e * (E + 2 * X)) +
           kernel(r, M, dt, 0, 2 * e * E + E) + kernel(r, M, dt, 0, e * (E / 2 + E / 2 + E)) +
           2 * kernel(r, G, dt, g, e * (E + 2 * X));
}

void aa_roofline_op(const aa_roofline_t *r, const aa_op_shape_t *s, aa_dtype_t dt, double *fwd_s,
                    double *bwd_s) {
  if (r->attention == AA_ROOF_ATTENTION_MATERIALISED && r->profile &&
      (s->op == AA_OP_ATTENTION || s->op == AA_OP_GQA) && s->d[3] > 0) {
    materialised(r, s, dt, fwd_s, bwd_s);
    return;
  }
  double fl[2], by[2];
  aa_roofline_op_cost(s, dt, fl, by);
  const aa_roof_class_t cls = aa_roof_class_of(s->op);
  *fwd_s = kernel(r, cls, dt, fl[0], by[0]);
  *bwd_s = kernel(r, cls, dt, fl[1], by[1]);
}

void aa_roofline_link(const aa_roofline_t *r, aa_cost_collective_t k, int ranks, int per_node,
                      double *latency_s, double *bytes_per_s) {
  const aa_device_profile_t *p = r->profile;
  const bool p2p = k == AA_COST_SEND || k == AA_COST_RECV;
  if (per_node < 1) per_node = 1;
  if (per_node > ranks) per_node = ranks;
  const int nodes = (ranks + per_node - 1) / per_node;
  const double intra = p->intra_node.bytes_per_s * r->intra_eff,
               inter = per_node * p->inter_node.bytes_per_s * r->inter_eff;
  if (p2p) {
    /* One message between two ranks: on the link between them. */
    const bool across = nodes > 1;
    *latency_s = across ? p->inter_node.latency_s : p->intra_node.latency_s;
    *bytes_per_s = across ? p->inter_node.bytes_per_s * r->inter_eff : intra;
    return;
  }
  if (k == AA_COST_ALL_TO_ALL) {
    /* Every rank sends 1/t of its buffer to each of the t - 1 others at
     * once (NCCL's grouped sends): per_node - 1 shares to its node's peers
     * over the node's link, ranks - per_node shares to other nodes through
     * its own network adapter, the two in parallel; one round per peer,
     * each paying its link's latency. As a line over the (t - 1)/t of the
     * buffer that leaves the rank: (t - 1) / max((k - 1) / intra, (t - k) / nic). */
    const double nic = p->inter_node.bytes_per_s * r->inter_eff;
    const double in_s = (per_node - 1) / intra, out_s = (ranks - per_node) / nic;
    *latency_s = (per_node - 1) * p->intra_node.latency_s + (ranks - per_node) * p->inter_node.latency_s;
    *bytes_per_s = (ranks - 1) / (in_s > out_s ? in_s : out_s);
    return;
  }
  /* A ring pass of t - 1 steps, nodes - 1 of them between nodes (every
   * node's ranks are neighbours on the ring). An all-reduce is two passes. */
  const double passes = k == AA_COST_ALL_REDUCE ? 2 : 1;
  *latency_s = passes * ((ranks - nodes) * p->intra_node.latency_s + (nodes - 1) * p->inter_node.latency_s);
  *bytes_per_s = nodes > 1 ? (inter < intra ? inter : intra) : intra;
}
