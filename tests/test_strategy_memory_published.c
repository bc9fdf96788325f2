/* What one rank of GPT-3 175B holds, as the cost model counts it
 * (strategies/cost.h, from strategies/sizes.h, which the engine allocates
 * by), against the published formulas, worked out here by hand:
 *
 *   - the activations of one transformer layer, Korthikanti et al. 2022,
 *     "Reducing Activation Recomputation in Large Transformer Models"
 *     (arXiv 2205.05198), Table 2, for s = 2048, b = 1, h = 12288, a = 96
 *     and t = 8, each row;
 *   - the model states (parameters, gradients, optimizer) under ZeRO 0-3,
 *     Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
 *     Trillion Parameter Models" (arXiv 1910.02054), section 3.1 and
 *     Figure 1 (mixed-precision Adam: 2Ψ + 2Ψ + KΨ, K = 12), and
 *     Megatron-LM's distributed optimizer (docs/source/distrib_optimizer.md:
 *     6 + 12/d bytes a parameter with bf16 parameters and fp32 gradients).
 *
 * Where the engine keeps a different set, each difference is one named
 * term below, with why, so the test fails if the engine's figures or the
 * formulas as written here drift. The table of the differences:
 * docs/training-knobs.md "Against the published formulas". */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "aa_test.h"
#include "strategies/cost.h"

/* GPT-3 175B (Brown et al. 2020, Table 2.1; examples/models/gpt3-175b.json). */
static const aa_arch_t gpt3 = {.family = "gpt2",
                               .n_layer = 96,
                               .n_head = 96,
                               .d_model = 12288,
                               .d_ff = 49152,
                               .seq_len = 2048,
                               .vocab_size = 51200};

/* Korthikanti's symbols: sequence, micro-batch, hidden size, heads, tensor
 * parallel degree. */
static const uint64_t s = 2048, b = 1, h = 12288, a = 96, t = 8;

static aa_strategy_t strategy(int tp, int sp, int dp, int zero, aa_ckpt_mode_t ckpt) {
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.degree[AA_AXIS_TENSOR] = tp;
  st.degree[AA_AXIS_DATA] = dp;
  st.sp = sp;
  st.zero = zero;
  st.amp = AA_BF16; /* Korthikanti's and ZeRO's 16-bit training */
  st.ckpt = ckpt;
  st.micro_batch = (int)b;
  return st;
}

/* The bytes one layer adds to a rank's kept activations: GPT-3's shape
 * with two layers less the same with one (the embedding's output and the
 * head's buffers are the same in both). */
static uint64_t engine_layer(int tp, int sp, aa_ckpt_mode_t ckpt) {
  aa_arch_t two = gpt3, one = gpt3;
  two.n_layer = 2;
  one.n_layer = 1;
  const aa_strategy_t st = strategy(tp, sp, 1, 0, ckpt);
  aa_cost_mem_t m2, m1;
  aa_cost_memory(&two, &st, 1, &m2);
  aa_cost_memory(&one, &st, 1, &m1);
  return (uint64_t)m2.bytes[AA_MEM_ACTS] - (uint64_t)m1.bytes[AA_MEM_ACTS];
}

static void report(const char *row, uint64_t korthikanti, uint64_t engine) {
  fprintf(stderr, "  %-28s Korthikanti %13" PRIu64 " B (%7.1f MiB), engine %13" PRIu64 " B (%7.1f MiB)\n",
          row, korthikanti, (double)korthikanti / 1048576.0, engine, (double)engine / 1048576.0);
}

/* Korthikanti's section 4.1 counts, per layer and in bytes, with 16-bit
 * activations and 1-byte dropout masks:
 *   attention 11sbh + 5as²b: the QKV input 2sbh, Q and K 4sbh, the softmax
 *     output 2as²b, its dropout mask as²b, the dropout output 2as²b, V
 *     2sbh, the projection's input 2sbh, the output dropout mask sbh;
 *   MLP 19sbh: the first linear's input 2sbh, the GeLU input 8sbh, the
 *     GeLU output 8sbh, the output dropout mask sbh;
 *   LayerNorms 4sbh: each one's input 2sbh.
 * The engine (sizes.h aa_act_block_t) keeps, in the 16-bit type: ln1's
 * output (the QKV input), q|k|v (Q, K and V), the attention output (the
 * projection's input), the residual after attention (ln2's input), ln2's
 * output (the first linear's input), the GeLU input and output, and the
 * block's output, which is the next block's ln1 input: the same 34sbh less
 * the two dropout masks, each of the same width (split or not) as
 * Korthikanti's. It keeps nothing s x s, and adds fp32 statistics. The
 * terms that differ, in bytes, for a layer whose residual stream a rank
 * holds for sbh / r elements (r = t under sequence parallelism, else 1):
 *   dropout:  the engine has no dropout, so neither mask: 2sbh / r.
 *   scores:   attention is flash-style (kernels/ops.h): none of the 5as²b /
 *             t of the softmax output, its mask and the dropout output.
 *   lse:      instead one fp32 log-sum-exp per query row and head of the
 *             rank, 4asb / t, from which backward recomputes the softmax.
 *   ln stats: each LayerNorm's fp32 mean and rstd per token of the rank's
 *             stream, 16sb / r; Korthikanti leaves them out as small
 *             buffers (section 4.1).
 * Every buffer of the engine is a whole number of 64-byte slices; at this
 * shape each already is, so there is no rounding term. */
AA_TEST(gpt3_layer_activations_are_korthikantis_table_2_with_the_listed_terms) {
  const uint64_t sbh = s * b * h, as2b = a * s * s * b, asb = a * s * b, sb = s * b;
  const uint64_t dropout = 2 * sbh, scores = 5 * as2b, lse = 4 * asb, stats = 16 * sb;

  /* No parallelism: sbh(34 + 5as/h). */
  uint64_t k = sbh * 34 + 5 * as2b, e = engine_layer(1, 0, AA_CKPT_NONE);
  report("no parallelism", k, e);
  CHECK_MSG(e == k - dropout - scores + lse + stats, "%" PRIu64, e);

  /* Tensor parallelism: sbh(10 + 24/t + 5as/(ht)). The 10sbh every rank
   * keeps whole are the LayerNorms' inputs (4), the QKV and first linear's
   * inputs (4) and the two dropout masks (2); the 24sbh split are Q, K, V
   * (6), the projection's input (2) and the GeLU input and output (16). The
   * engine's LayerNorm statistics are whole (the stream is), its
   * log-sum-exp is of the rank's a / t heads. */
  k = sbh * 10 + sbh * 24 / t + 5 * as2b / t;
  e = engine_layer((int)t, 0, AA_CKPT_NONE);
  report("tensor parallel", k, e);
  CHECK_MSG(e == k - dropout - scores / t + lse / t + stats, "%" PRIu64, e);

  /* Tensor and sequence parallelism: (sbh/t)(34 + 5as/h): everything split. */
  k = sbh / t * 34 + 5 * as2b / t;
  e = engine_layer((int)t, 1, AA_CKPT_NONE);
  report("tensor + sequence parallel", k, e);
  CHECK_MSG(e == k - dropout / t - scores / t + lse / t + stats / t, "%" PRIu64, e);

  /* Selective recomputation (with tp and sp): 34sbh/t. Korthikanti's drops
   * the 5as²b/t of the attention core, which the engine never keeps; the
   * engine's selective mode drops the GeLU output instead (8sbh/t,
   * recomputed from the kept GeLU input; docs/training-knobs.md), so
   * besides the terms above it keeps: */
  const uint64_t gelu_out = 8 * sbh / t;
  k = sbh * 34 / t;
  e = engine_layer((int)t, 1, AA_CKPT_SELECTIVE);
  report("selective recomputation", k, e);
  CHECK_MSG(e == k - dropout / t - gelu_out + lse / t + stats / t, "%" PRIu64, e);

  /* Full recomputation: 2sbh, the layer's input. The engine keeps each
   * block's output (the next block's input), whole without sequence
   * parallelism: the same bytes, no statistics. */
  k = 2 * sbh;
  e = engine_layer((int)t, 0, AA_CKPT_FULL);
  report("full recomputation", k, e);
  CHECK_MSG(e == k, "%" PRIu64, e);
  /* With sequence parallelism the kept output is the rank's share: 2sbh/t
   * (Table 2's row is 2sbh whatever the parallelism). */
  e = engine_layer((int)t, 1, AA_CKPT_FULL);
  report("full, sp (2sbh/t, not Table 2)", k / t, e);
  CHECK_MSG(e == k / t, "%" PRIu64, e);
}

/* The model states of one data-parallel rank of GPT-3 175B over d = 64
 * ranks (tp = pp = 1, bf16). Ψ by PTD-P's formula (section 5.1; examples
 * checked by tests/test_spec_models.c), 12lh² + 13lh + (V + s)h, plus the
 * final LayerNorm's 2h. The ZeRO paper's mixed-precision Adam keeps per
 * parameter 2 bytes of 16-bit weights, 2 of 16-bit gradients and K = 12 of
 * fp32 master weights, momentum and variance:
 *   stage 0: 2Ψ + 2Ψ + 12Ψ       stage 2: 2Ψ + (2 + 12)Ψ / d
 *   stage 1: 2Ψ + 2Ψ + 12Ψ / d   stage 3: (2 + 2 + 12)Ψ / d
 * The engine's one difference in the model states: its gradients are fp32
 * (they accumulate over micro-batches in fp32, as Megatron's main_grad
 * does), 4 bytes where ZeRO counts 2: +2Ψ at stages 0-1, +2Ψ/d (the fp32
 * shard) at 2-3. So its stage 0 is Megatron's 18 bytes a parameter (bf16
 * parameters, fp32 gradients) and its stage 1 Megatron's distributed
 * optimizer, 6 + 12/d. ZeRO shards each unit (wte|wpe, a block, lnf) into d
 * chunks of ceil(n / d): here every unit divides by 64, so no padding term.
 * Outside the model states, as ZeRO's own "temporary buffers" are, the
 * engine adds staging (workspace, fp32 unless said): from stage 1 one
 * chunk (piece); at stage 1 one padded unit (the largest, a block) where
 * the updated parameters are gathered, which at stage 2 is the gradient
 * slot of a block, idle by then; from stage 2 one padded unit per slot
 * (gunit: wte|wpe, a block, lnf) for the gradients, and at stage 3 the same
 * again for the parameters (punit), whose bf16 all-gather lands in the
 * blocks' gradient slot (idle during every gather, and large enough), less
 * the fp32 copy of one unit per slot that the lower stages widen the bf16
 * parameters into (wblock, wpre, wpost): at stage 3 the gathered units are
 * that copy. */
AA_TEST(gpt3_model_states_are_zeros_with_fp32_gradients) {
  const uint64_t l = (uint64_t)gpt3.n_layer, V = (uint64_t)gpt3.vocab_size, d = 64;
  const uint64_t wte = (V + s) * h, block = 12 * h * h + 13 * h, lnf = 2 * h;
  const uint64_t psi = wte + l * block + lnf;
  CHECK(psi == UINT64_C(174615846912));
  CHECK(wte % d == 0 && block % d == 0 && lnf % d == 0); /* no padding */
  CHECK(block > wte && block > lnf);                     /* the largest unit */
  const uint64_t want[4][3] = {
      /* params, grads, optimizer: ZeRO's */
      {2 * psi, 2 * psi, 12 * psi},
      {2 * psi, 2 * psi, 12 * psi / d},
      {2 * psi, 2 * psi / d, 12 * psi / d},
      {2 * psi / d, 2 * psi / d, 12 * psi / d},
  };
  /* The engine's fp32 gradients: the term added to ZeRO's gradient bytes. */
  const uint64_t fp32_grads[4] = {2 * psi, 2 * psi, 2 * psi / d, 2 * psi / d};
  /* Its staging over stage 0's (whose one buffer, 16 fp32 scalars, every
   * stage has at d > 1). */
  const uint64_t piece = 4 * block / d, padded = 4 * block, units = 4 * (wte + block + lnf);
  const uint64_t staging[4] = {0, piece + padded, piece + units, piece + units};
  aa_cost_mem_t m[4];
  for (int z = 0; z < 4; z++) {
    const aa_strategy_t st = strategy(1, 0, (int)d, z, AA_CKPT_NONE);
    aa_cost_memory(&gpt3, &st, 1, &m[z]);
    const uint64_t p = m[z].bytes[AA_MEM_PARAMS], g = m[z].bytes[AA_MEM_GRADS], o = m[z].bytes[AA_MEM_OPTIM];
    fprintf(stderr,
            "  ZeRO %d over %" PRIu64 ": ZeRO paper %6.2f GiB (%" PRIu64 " + %" PRIu64 " + %" PRIu64
            "), engine %6.2f GiB (%" PRIu64 " + %" PRIu64 " + %" PRIu64 "), %.3f bytes a parameter\n",
            z, d, (double)(want[z][0] + want[z][1] + want[z][2]) / 1073741824.0, want[z][0], want[z][1],
            want[z][2], (double)(p + g + o) / 1073741824.0, p, g, o, (double)(p + g + o) / (double)psi);
    CHECK_MSG(p == want[z][0], "ZeRO %d params %" PRIu64, z, p);
    CHECK_MSG(g == want[z][1] + fp32_grads[z], "ZeRO %d grads %" PRIu64, z, g);
    CHECK_MSG(o == want[z][2], "ZeRO %d optimizer %" PRIu64, z, o);
    CHECK_MSG(m[z].bytes[AA_MEM_WORKSPACE] - m[0].bytes[AA_MEM_WORKSPACE] == staging[z],
              "ZeRO %d staging %zu", z, m[z].bytes[AA_MEM_WORKSPACE] - m[0].bytes[AA_MEM_WORKSPACE]);
  }
  /* Megatron's table, bytes a parameter: 18 without the distributed
   * optimizer, 6 + 12/d with it (= ZeRO 1 over the data group). */
  CHECK(m[0].bytes[AA_MEM_PARAMS] + m[0].bytes[AA_MEM_GRADS] + m[0].bytes[AA_MEM_OPTIM] == 18 * psi);
  CHECK(m[1].bytes[AA_MEM_PARAMS] + m[1].bytes[AA_MEM_GRADS] + m[1].bytes[AA_MEM_OPTIM] ==
        6 * psi + 12 * psi / d);
}

int main(void) {
  RUN(gpt3_layer_activations_are_korthikantis_table_2_with_the_listed_terms);
  RUN(gpt3_model_states_are_zeros_with_fp32_gradients);
  return aa_test_summary();
}
