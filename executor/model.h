/* GPT-2-style decoder on the backend op table.
 *
 * Parameters, gradients and optimizer state each live in one flat buffer;
 * a table of tensor descriptors gives each tensor's offset. The layout is
 * layer-major so that a transformer block's parameters are one contiguous
 * slice (ZeRO-3 gathers a block at a time; pipeline stages own a range):
 *
 *   wte (V,C) | wpe (T,C) |
 *   for each layer l:
 *     ln1.w (C) | ln1.b (C) | qkv.w (3C,C) | qkv.b (3C) | proj.w (C,C) | proj.b (C) |
 *     ln2.w (C) | ln2.b (C) | fc.w (F,C) | fc.b (F) | fcproj.w (C,F) | fcproj.b (C)
 *   lnf.w (C) | lnf.b (C)
 *
 * The output projection is tied to wte. Loss is the mean token
 * cross-entropy. */
#ifndef AA_MODEL_H
#define AA_MODEL_H

#include "../common/aa.h"
#include "../common/spec.h"
#include "../kernels/ops.h"

#define AA_TENSORS_PER_LAYER 12

typedef struct aa_tensor_desc {
  char name[32]; /* "wte", "h3.qkv.w", "lnf.b", ... */
  size_t offset; /* in elements, into the flat buffer */
  size_t numel;
  int ndim;      /* 1 or 2 */
  int shape[2];
  int layer;     /* block index, -1 for wte/wpe/lnf */
  int decay;     /* 1 if AdamW weight decay applies (2-D weights) */
} aa_tensor_desc_t;

/* Flat buffer of one element type. */
typedef struct aa_flatbuf {
  aa_dtype_t dtype;
  size_t numel;
  void *data;
} aa_flatbuf_t;

/* Allocates a zeroed, 64-byte-aligned fp32 buffer of n elements into *b
 * (owned by b; release with free(b->data)). */
int aa_flatbuf_alloc(aa_flatbuf_t *b, size_t n);

/* Named views into the activation buffer (one allocation). */
typedef struct aa_acts aa_acts_t;

typedef struct aa_gpt {
  aa_arch_t arch;
  const aa_ops_t *ops; /* borrowed */
  int B, T;            /* micro-batch and sequence length the activations fit */

  int n_tensors;
  aa_tensor_desc_t *tensors; /* owned, n_tensors entries */
  size_t n_params;

  aa_flatbuf_t params, grads; /* owned */
  aa_acts_t *acts;            /* owned */
  size_t act_bytes;           /* size of the activation buffers */

  /* Last forward pass. */
  int32_t *targets; /* copy of the targets (B,T) */
  float loss;       /* mean loss of the last forward with targets */
} aa_gpt_t;

/* Builds the tensor table for arch and allocates parameters, gradients and
 * activations for micro-batch B and sequence length T (T <= seq_len).
 * Parameters are zero until aa_gpt_init_weights or a load. *out owns all
 * memory; free with aa_gpt_free. */
int aa_gpt_create(aa_gpt_t **out, const aa_arch_t *arch, const aa_ops_t *ops, int B, int T);
void aa_gpt_free(aa_gpt_t *m);

/* GPT-2 initialisation from seed: weights N(0, 0.02), the two residual
 * projections (proj.w, fcproj.w) N(0, 0.02/sqrt(2*n_layer)), biases 0,
 * LayerNorm weights 1. */
void aa_gpt_init_weights(aa_gpt_t *m, uint64_t seed);

/* Forward pass on inputs(B,T). With targets (B,T) computes the mean loss
 * into m->loss and returns it via *loss (if non-NULL); with targets NULL
 * only logits are computed. */
int aa_gpt_forward(aa_gpt_t *m, const int32_t *inputs, const int32_t *targets, float *loss);

/* Backward pass of the last forward (which must have had targets).
 * Accumulates into m->grads scaled by grad_scale (1/accumulation steps for
 * micro-batching, 1 otherwise). */
int aa_gpt_backward(aa_gpt_t *m, float grad_scale);

void aa_gpt_zero_grad(aa_gpt_t *m);

/* Logits (B,T,V) of the last forward without targets; borrowed, valid until
 * the next forward. (After a forward with targets the buffer holds
 * probabilities instead.) */
const float *aa_gpt_logits(const aa_gpt_t *m);

/* Finds a tensor by name; NULL if none. */
const aa_tensor_desc_t *aa_gpt_tensor(const aa_gpt_t *m, const char *name);

#endif
