/* The header the two LoRA fixtures share after their magic
 * (tests/reference/make_lora_fixture.py "AAFIXR01" and
 * make_peft_fixture.py "AAFIXP01"): llama_tiny's shapes and batch as int32
 * n_layer, n_head, d_model, d_ff, seq_len, vocab, B, T; int32 n_kv_head,
 * float rope_theta, norm_eps; int32 r, float alpha, int32 target mask. 60
 * bytes, little-endian as the scripts pack them. */
#ifndef AA_LORA_FIXTURE_H
#define AA_LORA_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/spec.h"

#define AA_LORA_FIXTURE_HEADER 60

/* Fills *a (a llama with adapters) and *B, *T from the header at p;
 * returns the byte after it. */
static inline const char *aa_lora_fixture_header(const char *p, aa_arch_t *a, int *B, int *T) {
  int32_t h[8], kv, r, mask;
  float th[2], alpha;
  memcpy(h, p, 32), p += 32;
  memcpy(&kv, p, 4), p += 4;
  memcpy(th, p, 8), p += 8;
  memcpy(&r, p, 4), p += 4;
  memcpy(&alpha, p, 4), p += 4;
  memcpy(&mask, p, 4), p += 4;
  memset(a, 0, sizeof *a);
  snprintf(a->family, sizeof a->family, "llama");
  a->n_layer = h[0], a->n_head = h[1], a->d_model = h[2], a->d_ff = h[3], a->seq_len = h[4];
  a->vocab_size = h[5], a->n_kv_head = kv, a->rope_theta = th[0], a->norm_eps = th[1];
  a->lora = (aa_lora_t){.r = r, .alpha = alpha, .targets = mask};
  *B = h[6], *T = h[7];
  return p;
}

#endif
