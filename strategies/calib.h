/* Calibrations: what one kind of device and one pool of them measured, the
 * inputs of the step-time model (predict.h). Pure data, its JSON form and
 * lookups; the measuring is dryrun/calibrate.h's (the engine's ops and
 * process groups), the storing the planner's (docs/store.md
 * "calibrations"). Rules: docs/service.md "Calibration".
 *
 * Compute is measured per op at the shapes the model's strategies produce
 * (the op inventory of predict.h: GEMMs, attention, LayerNorm, GELU,
 * residual adds, the cross-entropy, the embedding, casts to and from
 * 16-bit storage, the AdamW update; for the llama family RMSNorm, SwiGLU,
 * the rotary embedding and grouped-query attention; under context
 * parallelism the ring attention's blocks), forward and backward, by the engine's
 * own kernels with every rank of the measuring gang computing at once (on
 * a CPU host with fewer cores than the gang's threads, only cores /
 * threads of them: dryrun/calibrate.h).
 * Communication is measured per collective kind and group size on the
 * process-group backend the gang uses, at several message sizes, and kept
 * as a fitted latency + bytes / bandwidth line (alpha-beta). */
#ifndef AA_CALIB_H
#define AA_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/aa.h"
#include "cost.h"

#define AA_CALIB_VERSION 1
#define AA_CALIB_DEVICE_MAX 128 /* the device fingerprint: 1..127 characters + NUL */
#define AA_CALIB_OPS_MAX 2048   /* measured op shapes */
#define AA_CALIB_LINKS_MAX 64   /* fitted collective lines */

/* The engine's op kinds, each with the meaning of its four dimensions:
 *   MATMUL     N, C, OC      out[N x OC] = inp[N x C] W[OC x C]^T + b
 *   ATTENTION  B, T, C, NH   causal self-attention over qkv[B x T x 3C], NH heads
 *   LAYERNORM  N, C
 *   GELU       n             elements
 *   RESIDUAL   n             elements (out = a + b; backward accumulates twice)
 *   XENT       N, V          softmax cross-entropy over V logits
 *   ENCODER    N, C          the token and position lookup
 *   CAST       n             fp32 to and from 16-bit storage (forward: round, backward: widen)
 *   ADAMW      n             parameters updated (forward only: 0 backward)
 * and the llama family's (engine/model.h), added after them so that the
 * names and numbers of the kinds above stay what stored calibrations say:
 *   RMSNORM    N, C
 *   SWIGLU     N, F          [gate | up] (N x 2F) -> (N x F)
 *   ROPE       S, T, G, HS   the rotary embedding of q and k, see below
 *   GQA        S, T, G, HS   causal grouped-query attention, see below
 * and context parallelism's ring attention (engine/model.c ring_forward,
 * ring_backward), after those for the same reason, on one block of a
 * sequence chunk's Tc = seq_len / (2 cp) queries against Tc keys:
 *   RING_DIAG  S, Tc, G, HS  a causal diagonal block; forward
 *                            attention_block_forward, backward
 *                            attention_block_delta + attention_block_backward
 *   RING_BLOCK S, Tc, G, HS  a block of earlier keys, every one seen; forward
 *                            attention_block_forward + attention_block_merge
 *                            into the running result, backward
 *                            attention_block_backward
 * Grouped-query attention over B sequences with NH query and NKV key/value
 * heads of size HS has five dimensions, one more than a shape holds. Its
 * work is that of S = B·NKV independent groups, each of T positions and
 * G = NH / NKV query heads that read one key/value head: the kernel's
 * loops are over (sequence, head) pairs and the groups share nothing, so
 * (S, T, G, HS) names the same arithmetic exactly, and the calibration
 * times the engine's kernel at B = S, NH = G, NKV = 1 (the rows narrower,
 * the same elements touched). Its own kind rather than ATTENTION's, whose
 * kernel reads another qkv layout (3C wide). RoPE rotates the NH + NKV q
 * and k heads of each position by the same table of T x HS/2 angles, so
 * the same folding holds for it (a kind of its own: a kernel in the
 * forward and another, the transposed rotation, in the backward). The
 * ring's block ops take grouped-query heads for both families (gpt2's
 * NKV = NH: G = 1) and loop over (sequence, head) pairs the same way, so
 * their shapes fold alike and the calibration times them at B = S, NH =
 * G, NKV = 1 on q|k|v rows of (G + 2) HS. */
typedef enum {
  AA_OP_MATMUL = 0,
  AA_OP_ATTENTION,
  AA_OP_LAYERNORM,
  AA_OP_GELU,
  AA_OP_RESIDUAL,
  AA_OP_XENT,
  AA_OP_ENCODER,
  AA_OP_CAST,
  AA_OP_ADAMW,
  AA_OP_RMSNORM,
  AA_OP_SWIGLU,
  AA_OP_ROPE,
  AA_OP_GQA,
  AA_OP_RING_DIAG,
  AA_OP_RING_BLOCK,
  AA_OP_KINDS
} aa_op_kind_t;

/* "matmul", "attention", ...; "?" outside the enum. aa_op_kind_parse:
 * the kind of a name, or -1. */
const char *aa_op_kind_name(aa_op_kind_t k);
int aa_op_kind_parse(const char *name);

/* The backend a device's calibration of the links between hosts is stored
 * under: they are measured by a gang with ranks on every host in turn, over
 * gloo for CPUs (AA_CALIB_ACROSS_HOSTS), over NCCL met through gloo for
 * CUDA (AA_CALIB_ACROSS_HOSTS_CUDA, the "nccl-hosts" rendezvous). A pool on
 * one host calibrates on its own backend ("shm", "nccl"); under `planner
 * --cpu-backend gloo` that is "gloo" too, and a later CPU calibration
 * across hosts then replaces its links of the same kind and group size
 * (the ops stay). aa_calib_across_hosts: the one of a device kind. This is
 * the store's key; the calibration's own "backend" stays the process
 * groups its collectives ran on ("gloo", "nccl"). */
#define AA_CALIB_ACROSS_HOSTS "gloo"
#define AA_CALIB_ACROSS_HOSTS_CUDA "nccl-hosts"
#define aa_calib_across_hosts(cuda) ((cuda) ? AA_CALIB_ACROSS_HOSTS_CUDA : AA_CALIB_ACROSS_HOSTS)

typedef struct aa_op_shape {
  aa_op_kind_t op;
  int64_t d[4]; /* as above; unused dimensions 0 */
} aa_op_shape_t;

/* The work of one call of shape s, the unit op rates scale by: 2·N·C·OC
 * for a GEMM, B·NH·T²·(C/NH) for attention, S·G·T²·HS for grouped-query
 * attention and the ring's blocks (S·G·Tc²·HS, the diagonal's too: the
 * ratio between two shapes of a kind is what counts), the elements
 * rotated S·T·(G + 1)·HS for RoPE, the elements
 * otherwise (N·F for SwiGLU: its outputs). */
double aa_op_work(const aa_op_shape_t *s);
/* The same op at the same dimensions (the one equality of shapes the
 * calibration, the model and the measurement use). */
bool aa_op_shape_equal(const aa_op_shape_t *a, const aa_op_shape_t *b);

typedef struct aa_calib_op {
  aa_op_shape_t shape;
  aa_dtype_t dtype; /* the run's storage dtype (GEMM inputs in 16-bit on GPUs; CPUs compute fp32 anyway) */
  double fwd_s;     /* seconds per forward call, median of the timed calls */
  double bwd_s;     /* seconds per backward call (0 for ADAMW) */
} aa_calib_op_t;

/* A collective kind (cost.h's aa_cost_collective_t; AA_COST_SEND stands for
 * a matched send and receive) on groups of `ranks`: a call moving b bytes
 * through each rank's link (cost.h's ring convention) takes
 * latency_s + b / bytes_per_s. */
typedef struct aa_calib_link {
  aa_cost_collective_t kind;
  int ranks;
  double latency_s;
  double bytes_per_s;
} aa_calib_link_t;

typedef struct aa_calib {
  int version;                         /* AA_CALIB_VERSION */
  char device[AA_CALIB_DEVICE_MAX];    /* the device fingerprint without the pool's count, e.g.
                                          "cpu:AMD EPYC 7B13 (1 threads):24000MiB" */
  char backend[8];                     /* the gang's process groups: "shm", "nccl", "gloo"; "self" alone */
  int cuda;                            /* 1: the ops ran on a GPU */
  int threads;                         /* CPU threads per executor (0 on GPUs) */
  int host_cores;                      /* online cores of the measuring host */
  int ranks;                           /* executors computing at once while the ops were timed */
  double measured_s;                   /* wall time the calibration took */
  int n_op;
  aa_calib_op_t op[AA_CALIB_OPS_MAX];
  int n_link;
  aa_calib_link_t link[AA_CALIB_LINKS_MAX];
} aa_calib_t;

/* The calibration as compact JSON text (malloc'd, free with free()):
 * {"version":1,"device":...,"backend":...,"cuda":0,"threads":1,
 *  "host_cores":2,"ranks":2,"measured_s":..,
 *  "ops":[["matmul",[N,C,OC,0],"fp32",fwd_s,bwd_s],...],
 *  "links":[["all_reduce",2,latency_s,bytes_per_s],...]}
 * NULL with AA_ENOMEM set. */
char *aa_calib_to_json(const aa_calib_t *c);

/* Parses that text (origin names it in errors) into *out (heap: the
 * struct is large), checking every field: kinds by name, dimensions >= 0
 * and the ones the kind uses >= 1, times finite and > 0 (bwd_s >= 0),
 * ranks 2..4096, sizes within the maxima. AA_EINVAL naming the field. */
int aa_calib_parse(aa_calib_t *out, const char *json, const char *origin);

/* Merges src into dst: src's ops replace dst's of the same shape and
 * dtype, new ones are added while there is room; links likewise by (kind,
 * ranks). dst keeps its device; it takes src's ranks, threads and
 * host_cores when src has ops (its timings are the newest; ops of other
 * models dst kept are read as if taken the same way), src's backend when
 * src has links or dst's is "self", and src's measured_s. */
void aa_calib_merge(aa_calib_t *dst, const aa_calib_t *src);

/* The measured op of exactly this shape and dtype, or NULL. */
const aa_calib_op_t *aa_calib_find_op(const aa_calib_t *c, const aa_op_shape_t *s, aa_dtype_t dtype);

/* The link of this kind for groups of exactly `ranks`, or NULL. */
const aa_calib_link_t *aa_calib_find_link(const aa_calib_t *c, aa_cost_collective_t kind, int ranks);

/* Fits latency and bandwidth to n (bytes, seconds) measurements by least
 * squares on the relative error (weights 1/t^2) of t = latency + bytes /
 * bandwidth; a negative latency refits the line through the origin.
 * AA_EINVAL for n < 2, no two distinct sizes, or times that do not grow
 * with the size. */
int aa_calib_fit_link(const double *bytes, const double *seconds, int n, double *latency_s, double *bytes_per_s);

#endif
