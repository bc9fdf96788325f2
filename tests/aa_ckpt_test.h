/* The original that the tests of sharded checkpoints (test_tp_ckpt.c,
 * test_pp_ckpt.c) re-shard from layout to layout, and the checks that a
 * model, its moments and its training state still hold it, bit for bit.
 *
 *   aa_ckpt_test_orig(&m, &opt, &arch, 3, NULL);   made
 *   aa_ckpt_test_orig(&m, &opt, &arch, 3, path);   loaded from path
 *
 * Header-only (static inline), like aa_test.h, which it needs. */
#ifndef AA_CKPT_TEST_H
#define AA_CKPT_TEST_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/model.h"
#include "engine/optim.h"

/* Makes a single process's model of arch on the CPU backend, with moments,
 * holding the original: loaded from load when it is set, else weights from
 * seed 11 and moments that name each element (m[i] = i + 0.5, v[i] = -i:
 * exact in fp32 at these sizes, so a misplaced element cannot go
 * unnoticed) at step count t. On success *m and *opt are the caller's to
 * free; on failure nothing is left allocated. */
static inline int aa_ckpt_test_orig(aa_gpt_t **m, aa_adamw_t *opt, const aa_arch_t *arch, int t,
                                    const char *load) {
  int rc = aa_gpt_create(m, arch, aa_ops_cpu(), 1, 16, NULL);
  if (rc) return rc;
  if ((rc = aa_adamw_init(opt, (*m)->n_params, NULL))) {
    aa_gpt_free(*m);
    return rc;
  }
  if (load) {
    aa_train_state_t st;
    rc = aa_ckpt_load(load, *m, opt, &st);
  } else if (!(rc = aa_gpt_init_weights(*m, 11))) {
    float *mm = opt->m.data, *vv = opt->v.data;
    for (size_t i = 0; i < (*m)->n_params; i++) {
      mm[i] = (float)i + 0.5f;
      vv[i] = -(float)i;
    }
    opt->t = t;
  }
  if (rc) {
    aa_adamw_free(opt);
    aa_gpt_free(*m);
  }
  return rc;
}

/* Whether every field of training state st equals want's. */
static inline int aa_ckpt_test_same_state(const aa_train_state_t *st, const aa_train_state_t *want) {
  return st->step == want->step && st->data_pos == want->data_pos && st->rng.s == want->rng.s &&
         st->seed == want->seed && st->loss_scale == want->loss_scale &&
         st->scaler_iter == want->scaler_iter && st->scaler_last_overflow == want->scaler_last_overflow &&
         st->scaler_hysteresis_left == want->scaler_hysteresis_left &&
         st->skipped_steps == want->skipped_steps;
}

/* Loads the checkpoint at path into a fresh single-process model of arch
 * (parameters, first moment and step count cleared first, so that each
 * must come from the file) and checks that its parameters and moments
 * equal the original's, loaded from orig_path, bit for bit (failures named
 * by name). *st and *t receive the training state and the step count
 * loaded (zero where nothing was), for the caller to check. */
static inline void aa_ckpt_test_check_whole(const char *name, const char *path, const aa_arch_t *arch,
                                            const char *orig_path, aa_train_state_t *st, int *t) {
  memset(st, 0, sizeof *st);
  *t = 0;
  aa_gpt_t *ref, *m;
  aa_adamw_t ref_opt, opt;
  int rc = aa_ckpt_test_orig(&ref, &ref_opt, arch, 0, orig_path);
  CHECK_MSG(rc == 0, "%s: the original: %s", name, aa_last_error());
  if (rc) return;
  if ((rc = aa_ckpt_test_orig(&m, &opt, arch, 0, NULL))) {
    CHECK_MSG(0, "%s: a model: %s", name, aa_last_error());
    aa_adamw_free(&ref_opt);
    aa_gpt_free(ref);
    return;
  }
  size_t bytes = m->n_params * sizeof(float);
  memset(m->params.data, 0, bytes);
  /* Everything the load must bring back starts as something else. */
  memset(opt.m.data, 0, bytes);
  memset(opt.v.data, 0x7f, bytes);
  opt.t = 0;
  rc = aa_ckpt_load(path, m, &opt, st);
  CHECK_MSG(rc == 0, "%s: %s", name, aa_last_error());
  CHECK_MSG(!memcmp(m->params.data, ref->params.data, bytes), "%s: the parameters differ", name);
  CHECK_MSG(!memcmp(opt.m.data, ref_opt.m.data, bytes), "%s: the first moment differs", name);
  CHECK_MSG(!memcmp(opt.v.data, ref_opt.v.data, bytes), "%s: the second moment differs", name);
  *t = opt.t;
  aa_adamw_free(&opt);
  aa_gpt_free(m);
  aa_adamw_free(&ref_opt);
  aa_gpt_free(ref);
}

/* What m holds of whole-model buffer whole, in its local layout: each run
 * of each tensor's slice (a pipeline stage's copy of wte|wpe's too), and
 * zeros where no run lands (padding rows). exp has m->n_params elements. */
static inline void aa_ckpt_test_local_view(const aa_gpt_t *m, const float *whole, float *exp) {
  memset(exp, 0, m->n_params * sizeof(float));
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    for (int k = 0; k < d->runs; k++)
      memcpy(exp + d->offset + (size_t)k * d->run_lstride, whole + d->run_global + (size_t)k * d->run_gstride,
             d->run_n * sizeof(float));
  }
}

/* What aa_ckpt_test_check_held found differing: unit 0 of a buffer (on a
 * last pipeline stage, its copy of wte|wpe) or a later unit. */
enum { AA_CKPT_HELD_UNIT0 = 1, AA_CKPT_HELD_LATER = 2 };

/* Checks every element that a rank's model m holds through z of the three
 * buffers (parameters, first and second moments) against the original of
 * arch saved at orig_path, bit for bit, in m's local layout, naming each
 * unit that differs under label. Returns 0 when all match, else the
 * AA_CKPT_HELD_* bits of what differs, or a negative AA_E* code when the
 * original cannot be loaded or scratch memory had. */
static inline int aa_ckpt_test_check_held(const char *label, const aa_gpt_t *m, const aa_zero_t *z,
                                          const aa_arch_t *arch, const char *orig_path) {
  aa_gpt_t *ref;
  aa_adamw_t ref_opt;
  int rc = aa_ckpt_test_orig(&ref, &ref_opt, arch, 0, orig_path);
  if (rc) return rc;
  float *exp = malloc(m->n_params * sizeof(float));
  const float *whole[3] = {ref->params.data, ref_opt.m.data, ref_opt.v.data};
  for (int which = 0; exp && which < 3; which++) {
    aa_ckpt_test_local_view(m, whole[which], exp);
    for (int u = 0; u < z->n_units; u++) {
      aa_zero_range_t r;
      aa_zero_range(z, m, which, u, &r);
      if (r.n && memcmp(r.data, exp + r.offset, r.n * sizeof(float))) {
        fprintf(stderr, "  %s: buffer %d unit %d differs from the original\n", label, which, u);
        rc |= u == 0 ? AA_CKPT_HELD_UNIT0 : AA_CKPT_HELD_LATER;
      }
    }
  }
  if (!exp) rc = AA_ENOMEM;
  free(exp);
  aa_adamw_free(&ref_opt);
  aa_gpt_free(ref);
  return rc;
}

/* Checks that each of the n files names[] is in directory dir. */
static inline void aa_ckpt_test_expect_files(const char *dir, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    CHECK_MSG(access(path, R_OK) == 0, "%s is missing", names[i]);
  }
}

/* Swaps the file and the checksum of entries i and j of a manifest's
 * "files" (root is the manifest), leaving the rest of each entry: each
 * file then stays intact and named with its own checksum, in another
 * rank's place. */
static inline void aa_ckpt_test_swap_files(json_t *root, size_t i, size_t j) {
  json_t *files = json_object_get(root, "files");
  json_t *a = json_array_get(files, i), *b = json_array_get(files, j);
  json_t *fa = json_incref(json_object_get(a, "file")), *ca = json_incref(json_object_get(a, "checksum"));
  json_object_set(a, "file", json_object_get(b, "file"));
  json_object_set(a, "checksum", json_object_get(b, "checksum"));
  json_object_set_new(b, "file", fa);
  json_object_set_new(b, "checksum", ca);
}

/* Sets every parameter of m to v (a mark that a failed load must leave). */
static inline void aa_ckpt_test_fill(aa_gpt_t *m, float v) {
  float *p = m->params.data;
  for (size_t i = 0; i < m->n_params; i++) p[i] = v;
}

/* Whether every parameter of m is still v (aa_ckpt_test_fill). */
static inline int aa_ckpt_test_all(const aa_gpt_t *m, float v) {
  const float *p = m->params.data;
  int all = 1;
  for (size_t i = 0; i < m->n_params; i++)
    all &= p[i] == v;
  return all;
}

#endif
