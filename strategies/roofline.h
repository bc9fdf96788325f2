/* Op and collective times from a device profile (profile.h), for a pool
 * nobody has measured: a roofline per op class with an achieved
 * efficiency, and ring collectives on the links a group spans. A measured
 * calibration (calib.h) always wins where it has the shape; where it has
 * other shapes of a class, it refits the class's efficiency. Rules, every
 * constant and its source: docs/device-profiles.md "Op times from a
 * profile".
 *
 * An op of shape s (calib.h) in dtype dt moves bytes and does FLOPs
 * (aa_roofline_op_cost), forward and backward. Its time on a device is
 *   fixed_s + max(flops / (peak[dt] x eff[class]), bytes / (hbm x mem_eff))
 * with three classes: GEMMs (peak: the dtype's dense tensor-core rate, the
 * vector rate for fp32), attention (the same peaks, its own efficiency:
 * its kernels reach less of the peak than a GEMM), and memory-bound ops
 * (every other kind: norms, activations, residual adds, the embedding,
 * the cross-entropy, casts, the optimizer). fixed_s is what any kernel
 * costs however small its work (launch and ramp).
 *
 * A collective of kind k over a group of t ranks with k_node of them in
 * each node (t / k_node nodes) is a ring: inside one node on the node's
 * link, across nodes hierarchically, the node's k_node GPUs each driving
 * their own network adapter, so the ring's bytes per rank flow at
 * min(intra x intra_eff, k_node x inter x inter_eff), and its steps pay
 * the latency of the link each hop takes.
 *
 * Attention (its ATTENTION and GQA kinds) is modelled one of two ways
 * (aa_roof_attention_t): this engine's fused kernel (log-sum-exp, no
 * s x s scores kept: the roofline above), or an implementation that
 * materialises the scores, as the Megatron-LM of 2021 did: the QK^T and
 * PV products as batched GEMMs over the full square plus a scaled causal
 * softmax and a dropout over the stored scores, each kernel its own
 * roofline (docs/device-profiles.md "Attention that materialises the
 * scores", every pass counted there). Context parallelism's ring blocks
 * are always the engine's fused kernels. */
#ifndef AA_ROOFLINE_H
#define AA_ROOFLINE_H

#include "calib.h"
#include "cost.h"
#include "profile.h"

typedef enum { AA_ROOF_GEMM = 0, AA_ROOF_ATTENTION, AA_ROOF_MEMORY, AA_ROOF_CLASSES } aa_roof_class_t;

/* How the attention ops are implemented on the modelled device. */
typedef enum {
  AA_ROOF_ATTENTION_FUSED = 0,    /* this engine's: log-sum-exp, no s x s scores in memory */
  AA_ROOF_ATTENTION_MATERIALISED, /* Megatron-LM 2021's: scores written, softmax, dropout */
  AA_ROOF_ATTENTION_KINDS
} aa_roof_attention_t;

/* "fused", "materialised". */
const char *aa_roof_attention_name(aa_roof_attention_t a);
/* The kind named `name` into *out; AA_EINVAL (last error naming the
 * choices) for any other string. *out is set only on success. */
int aa_roof_attention_parse(aa_roof_attention_t *out, const char *name);

/* "gemm", "attention", "memory". */
const char *aa_roof_class_name(aa_roof_class_t c);
aa_roof_class_t aa_roof_class_of(aa_op_kind_t k);

/* The FLOPs and the bytes of HBM traffic of one call of shape s in dtype
 * dt: [0] forward, [1] backward (0 where the kind has none). */
void aa_roofline_op_cost(const aa_op_shape_t *s, aa_dtype_t dt, double flops[2], double bytes[2]);

/* The model of one device: its profile (borrowed; NULL for a model fitted
 * from a calibration alone, see aa_roofline_fit) and the efficiencies. */
typedef struct aa_roofline {
  const aa_device_profile_t *profile;
  double eff[AA_ROOF_CLASSES]; /* achieved fraction of the peak FLOP/s (memory: of the HBM's bytes/s) */
  double fixed_s;              /* every kernel's floor */
  double intra_eff, inter_eff; /* achieved fraction of a link's bytes/s in a ring collective */
  /* Measured over roofline, per class and dtype, from aa_roofline_fit
   * (1 where nothing was measured): the calibration's correction. */
  double scale[AA_ROOF_CLASSES][3];
  int fitted[AA_ROOF_CLASSES][3]; /* ops of each class and dtype the fit saw */
  /* The attention implementation timed (fused unless the caller sets it);
   * materialised needs a profile: without one attention stays fused. */
  aa_roof_attention_t attention;
} aa_roofline_t;

/* The defaults of docs/device-profiles.md for profile p (borrowed, may be
 * NULL: then only aa_roofline_fit's rates exist). */
void aa_roofline_init(aa_roofline_t *r, const aa_device_profile_t *p);

/* Refits each class's scale to the ops calibration c measured: the median
 * of measured / modelled time over its ops of the class and dtype, so that
 * the profile's shape curve keeps its form and the calibration sets its
 * level. Without a profile the model is a unit roofline (1 FLOP/s, 1
 * byte/s, no fixed cost) and the scales become the calibration's
 * achieved rates: a kind the calibration lacks is timed at its class's
 * measured rate. A class and dtype with no measured op takes the class's
 * median over the other dtypes, then stays 1. */
void aa_roofline_fit(aa_roofline_t *r, const aa_calib_t *c);

/* Whether the model can time a class, in any dtype: with a profile always
 * (a precision it lacks falls back to fp32's peak), without one when the
 * fit saw an op of the class in some dtype (the others take its level). */
bool aa_roofline_knows(const aa_roofline_t *r, aa_roof_class_t cls);

/* Seconds of one call of s in dt, forward and backward. Under
 * AA_ROOF_ATTENTION_MATERIALISED (with a profile) an ATTENTION or GQA op
 * is the sum of its kernels' times, each at its class's roofline and
 * scale (GEMM or memory-bound); every other op, and every op under fused,
 * as above. */
void aa_roofline_op(const aa_roofline_t *r, const aa_op_shape_t *s, aa_dtype_t dt, double *fwd_s,
                    double *bwd_s);

/* The alpha-beta line (predict.h's group_time convention: a call moving b
 * bytes through each rank's link takes latency_s + b / bytes_per_s) of
 * collective kind k over `ranks` ranks, `per_node` of them in each node
 * (per_node >= ranks: all in one node). Needs a profile. */
void aa_roofline_link(const aa_roofline_t *r, aa_cost_collective_t k, int ranks, int per_node,
                      double *latency_s, double *bytes_per_s);

#endif
