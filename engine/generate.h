/* Text generation from a loaded model: one token at a time with per-layer
 * key/value caches (the decoding step of ops.h's attention_decode), or,
 * for comparison and as the tests' oracle, by recomputing the whole prefix
 * through aa_gpt_forward for every token. Both families: gpt2 (LayerNorm,
 * GELU, learned positions, tied head) and llama (RMSNorm, SwiGLU, RoPE,
 * grouped-query attention, untied head), on any backend: every tensor
 * operation goes through the model's op table, the host only uploads a
 * token id and downloads a row of logits per step. A llama's
 * mixture-of-experts blocks (router, top-k, the chosen and the shared
 * experts) decode on the CPU backend only, through kernels/cpu/cpu_moe.h's
 * ops with one token, dropless.
 *
 * The decoder borrows an fp32 whole model (tensor and pipeline degree 1,
 * fp32 parameters allocated) and reads its parameters by name from its
 * tensor table. The prompt is fed through the same one-token step as the
 * generated tokens (no batched prefill): P prompt tokens cost P steps. */
#ifndef AA_GENERATE_H
#define AA_GENERATE_H

#include <stdint.h>

#include "model.h"

/* How the next token is chosen from a row of logits. */
typedef struct aa_sampler {
  float temperature; /* 0 = greedy (argmax, lowest id on ties); > 0: softmax(logits / T) */
  int top_k;         /* keep the k most likely ids (0 = all) */
  float top_p; /* then the smallest prefix, most likely first, whose mass reaches p; in (0,1], 1 = all */
} aa_sampler_t;

/* Checks a sampler's fields: AA_EINVAL naming the first bad one. */
int aa_sampler_validate(const aa_sampler_t *s);

/* Picks the next token from logits(V) (host memory, borrowed) into *out.
 * Greedy at temperature 0 (no draw from rng). Otherwise the ids are ranked
 * by logit (ties by id), cut to the top_k first, the probabilities
 * softmax(logits / T) renormalised over them and cut again to the
 * smallest prefix whose mass reaches top_p (at least one id), and one id
 * is drawn from what is left with aa_rng_uniform(rng): deterministic for
 * an rng state. work holds V ints of scratch (host, borrowed). So top_k 1,
 * or a top_p below the largest probability, is the greedy choice. */
int aa_sample(int32_t *out, const float *logits, int V, const aa_sampler_t *s, aa_rng_t *rng, int32_t *work);

typedef struct aa_decoder aa_decoder_t;

/* A decoder of m for sequences of up to max_len tokens (1 <= max_len <=
 * the model's seq_len, else AA_EINVAL saying so): K and V caches of
 * n_layer x max_len x n_kv_head x head_size floats each and the one-token
 * activations, in m's backend memory. m is borrowed and must outlive the
 * decoder; it must be a whole fp32 model (tp 1, pp 1, params allocated)
 * and its backend must implement the decoding ops (attention_decode; for
 * llama also rmsnorm, rope and swiglu), and be the cpu backend for a
 * model with MoE layers: AA_EUNSUPPORTED otherwise. *out
 * is set only on success; free with aa_decoder_free. */
int aa_decoder_create(aa_decoder_t **out, aa_gpt_t *m, int max_len);
void aa_decoder_free(aa_decoder_t *d);

/* Starts a new sequence: the next step is position 0. */
void aa_decoder_reset(aa_decoder_t *d);

/* Feeds token (< vocab_size) at the next position, keeping its keys and
 * values in the caches, and writes the logits (V, host) of the token that
 * follows into logits. Past max_len positions it is AA_EINVAL and nothing
 * changes. A backend failure is returned as its code. */
int aa_decoder_step(aa_decoder_t *d, int32_t token, float *logits);

/* Positions fed since the last reset. */
int aa_decoder_pos(const aa_decoder_t *d);

/* The no-cache path: the logits (V, host) of the token that follows
 * ids[0..n) (host, borrowed), from one aa_gpt_forward of the whole prefix
 * padded with id 0 to m->T (n <= m->T, else AA_EINVAL): the attention is
 * causal, so what follows position n - 1 does not change its logits.
 * Every row of the micro-batch holds the same sequence. */
int aa_logits_nocache(aa_gpt_t *m, const int32_t *ids, int n, float *logits);

/* What aa_generate did. */
typedef struct aa_gen_stats {
  int prompt_tokens;
  int new_tokens;
  double seconds; /* from the first prompt token fed to the last token chosen */
} aa_gen_stats_t;

/* Called with each generated token as soon as it is chosen; a non-zero
 * return stops generation and is returned by aa_generate. */
typedef int (*aa_gen_token_fn)(int32_t token, void *data);

/* Generates max_tokens tokens after prompt[0..n_prompt) (host, borrowed,
 * n_prompt >= 1, every id < vocab_size) with sampler s and an RNG seeded
 * with seed, into out (max_tokens ids, host, caller's) and on_token (may
 * be NULL). With kv_cache the decoder's steps, else aa_logits_nocache for
 * every token (m->T must then hold n_prompt + max_tokens - 1). n_prompt +
 * max_tokens must not exceed the model's seq_len: AA_EINVAL naming the
 * three numbers, checked before anything is allocated or computed. *stats
 * (may be NULL) is written on success. */
int aa_generate(aa_gpt_t *m, const int32_t *prompt, int n_prompt, int max_tokens, const aa_sampler_t *s,
                uint64_t seed, int kv_cache, int32_t *out, aa_gen_token_fn on_token, void *data,
                aa_gen_stats_t *stats);

#endif
