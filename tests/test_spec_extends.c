/* A model spec's config tree (common/spec_tree.c through aa_spec_load_set):
 * "extends" chains merged as a JSON merge patch, --set overrides, and the
 * errors of both, each naming the file or the --set that caused it; and
 * Merak's checkpoint names in the train section. Every spec is written
 * to a fresh temporary folder. */
#include "common/aa.h"
#include "common/spec.h"
#include "tests/aa_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* Writes the file dir/name (folders made as needed); returns its path,
 * valid until the next call. */
static const char *put(const char *name, const char *fmt, ...) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char folder[512];
  snprintf(folder, sizeof folder, "%s", path);
  *strrchr(folder, '/') = '\0';
  aa_mkdirs(folder);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
  return path;
}

/* dir/name, valid until the next call. */
static const char *at(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

#define BASE                                                                                                 \
  "{\"name\": \"base\",\n"                                                                                   \
  " \"model\": {\"family\": \"llama\", \"n_layer\": 4, \"n_head\": 4, \"n_kv_head\": 2, \"d_model\": 64,\n"  \
  "           \"seq_len\": 32, \"vocab_size\": 256},\n"                                                      \
  " \"train\": {\"global_batch\": 8, \"steps\": 100, \"lr\": 0.001, \"warmup_steps\": 10},\n"                \
  " \"data\": {\"train\": \"data/train.bin\", \"val\": \"data/val.bin\"}}\n"

static void setup_base(void) { put("lib/base.json", BASE); }

/* The spec is its merged document: the child's fields, the base's
 * elsewhere; the base's data paths still name the base's folder's files;
 * the architecture hash and the canonical text are those of the same
 * spec written out flat, so the store keys both alike. */
AA_TEST(extends_overrides_fields_and_keeps_the_rest) {
  setup_base();
  put("child.json", "{\"extends\": \"lib/base.json\", \"name\": \"child\",\n"
                    " \"model\": {\"n_layer\": 2}, \"train\": {\"lr\": 0.0005}}\n");
  aa_model_spec_t s, flat;
  int rc = aa_spec_load(&s, at("child.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(!strcmp(s.name, "child"));
  CHECK(s.arch.n_layer == 2 && s.arch.n_head == 4 && s.arch.n_kv_head == 2 && s.arch.d_model == 64);
  CHECK(aa_arch_is_llama(&s.arch) && s.arch.seq_len == 32 && s.arch.vocab_size == 256);
  CHECK(s.train.lr == 0.0005f && s.train.steps == 100 && s.train.warmup_steps == 10 &&
        s.train.global_batch == 8);
  /* min_lr's default follows the merged lr, not the base's. */
  CHECK(s.train.min_lr == 0.0005f / 10.0f);
  char want[600];
  snprintf(want, sizeof want, "%s/lib/data/train.bin", dir);
  CHECK_MSG(!strcmp(s.train_data, want), "train %s, want %s", s.train_data, want);
  snprintf(want, sizeof want, "%s/lib/data/val.bin", dir);
  CHECK_MSG(!strcmp(s.val_data, want), "val %s, want %s", s.val_data, want);
  put("flat.json",
      "{\"name\": \"child\", \"model\": {\"family\": \"llama\", \"n_layer\": 2, \"n_head\": 4, "
      "\"n_kv_head\": 2,\n"
      " \"d_model\": 64, \"seq_len\": 32, \"vocab_size\": 256},\n"
      " \"train\": {\"global_batch\": 8, \"steps\": 100, \"lr\": 0.0005, \"warmup_steps\": 10},\n"
      " \"data\": {\"train\": \"%s\", \"val\": \"%s\"}}\n",
      s.train_data, s.val_data);
  rc = aa_spec_load(&flat, at("flat.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  char h1[17], h2[17];
  aa_arch_hash(&s.arch, h1);
  aa_arch_hash(&flat.arch, h2);
  CHECK(!strcmp(h1, h2));
  char *t1 = NULL, *t2 = NULL;
  CHECK(aa_spec_to_json(&s, &t1) == 0 && aa_spec_to_json(&flat, &t2) == 0);
  CHECK_MSG(t1 && t2 && !strcmp(t1, t2), "%s\n%s", t1 ? t1 : "", t2 ? t2 : "");
  free(t1);
  free(t2);
}

/* Objects merge key by key at any depth (model.moe inside model); null
 * removes a key (the base's data section, its MoE object), anything else
 * replaces the base's value whole. */
AA_TEST(extends_merges_nested_objects_and_null_removes) {
  put("moe/base.json",
      "{\"model\": {\"family\": \"llama\", \"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"seq_len\": 16,\n"
      " \"vocab_size\": 64, \"moe\": {\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 48, \"aux_loss_coef\": "
      "0.02}},\n"
      " \"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": 0.01}, \"data\": {\"train\": \"t.bin\"}}\n");
  put("moe/top2.json", "{\"extends\": \"base.json\", \"model\": {\"moe\": {\"top_k\": 1}}}\n");
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, at("moe/top2.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(s.arch.moe.experts == 4 && s.arch.moe.top_k == 1 && s.arch.moe.d_ff_expert == 48);
  CHECK(s.arch.moe.aux_loss_coef == 0.02f && s.arch.n_layer == 2 && !strcmp(s.name, "top2"));
  CHECK(s.train_data[0]);
  put("moe/dense.json", "{\"extends\": \"base.json\", \"model\": {\"moe\": null}, \"data\": null}\n");
  rc = aa_spec_load(&s, at("moe/dense.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(s.arch.moe.experts == 0 && !s.train_data[0] && s.arch.d_model == 32);
  /* null removes only what it patches: a null in the base of a chain (or
   * in a plain file) is refused as ever. */
  put("moe/nullbase.json",
      "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"seq_len\": 16,\n"
      " \"vocab_size\": 64}, \"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": 0.01},\n"
      " \"data\": null}\n");
  CHECK_ERR(aa_spec_load(&s, at("moe/nullbase.json")), AA_EINVAL,
            "nullbase.json: data: must be an object (got null)");
  put("moe/on_null.json", "{\"extends\": \"nullbase.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("moe/on_null.json")), AA_EINVAL, "data is set in ");
}

/* a -> b -> c: each file overrides the ones it extends, paths relative
 * to the file that names them. */
AA_TEST(extends_chains) {
  setup_base();
  put("mid/b.json",
      "{\"extends\": \"../lib/base.json\", \"model\": {\"d_model\": 128}, \"train\": {\"steps\": 7}}\n");
  put("a.json", "{\"extends\": \"mid/b.json\", \"train\": {\"warmup_steps\": 3}}\n");
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, at("a.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(s.arch.d_model == 128 && s.arch.n_layer == 4 && s.train.steps == 7 && s.train.warmup_steps == 3);
  CHECK(!strcmp(s.name, "base")); /* set by the base, which nothing overrides */
  /* 16 files chain; 17 do not. */
  put("deep/f16.json", BASE);
  for (int i = 15; i >= 1; i--) {
    char name[64];
    snprintf(name, sizeof name, "deep/f%d.json", i);
    put(name, "{\"extends\": \"f%d.json\", \"train\": {\"steps\": %d}}\n", i + 1, 100 + i);
  }
  rc = aa_spec_load(&s, at("deep/f1.json"));
  CHECK_MSG(rc == 0 && s.train.steps == 101, "%s", aa_last_error());
  put("deep/f0.json", "{\"extends\": \"f1.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("deep/f0.json")), AA_EINVAL, "extends chains at most 16 files");
  CHECK_ERR(aa_spec_load(&s, at("deep/f0.json")), AA_EINVAL, "deep/f0.json -> ");
}

AA_TEST(extends_cycles_and_missing_bases_are_refused_naming_the_chain) {
  aa_model_spec_t s;
  put("cyc/x.json", "{\"extends\": \"y.json\"}\n");
  put("cyc/y.json", "{\"extends\": \"./x.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("cyc/x.json")), AA_EINVAL, "cyc/x.json -> ");
  CHECK_ERR(aa_spec_load(&s, at("cyc/x.json")), AA_EINVAL, "cyc/y.json -> ");
  CHECK_ERR(aa_spec_load(&s, at("cyc/x.json")), AA_EINVAL, "cyc/./x.json: extends makes a cycle");
  put("cyc/self.json", "{\"extends\": \"self.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("cyc/self.json")), AA_EINVAL, "extends makes a cycle");
  put("miss/a.json", "{\"extends\": \"b.json\"}\n");
  put("miss/b.json", "{\"extends\": \"gone.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("miss/a.json")), AA_ENOENT, "miss/b.json: extends \"gone.json\": ");
  CHECK_ERR(aa_spec_load(&s, at("miss/a.json")), AA_ENOENT, "miss/gone.json: No such file");
  CHECK_ERR(aa_spec_load(&s, at("miss/a.json")), AA_ENOENT, "miss/a.json -> ");
  put("bad/num.json", "{\"extends\": 3}\n");
  CHECK_ERR(aa_spec_load(&s, at("bad/num.json")), AA_EINVAL, "bad/num.json: extends: must be a string");
  put("bad/empty.json", "{\"extends\": \"\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("bad/empty.json")), AA_EINVAL, "extends: must not be empty");
  put("bad/arr.json", "[1]\n");
  put("bad/to_arr.json", "{\"extends\": \"arr.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("bad/to_arr.json")), AA_EINVAL,
            "arr.json: top level must be a JSON object (got array)");
  put("bad/syntax.json", "{\"model\": {,}}\n");
  put("bad/to_syntax.json", "{\"extends\": \"syntax.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("bad/to_syntax.json")), AA_EPARSE, "syntax.json:1:");
}

/* The merged document is validated as a plain file; a failing field
 * names the file that set it. Text specs (the planner's) extend nothing. */
AA_TEST(extends_validates_the_merge_naming_the_file_that_set_a_field) {
  setup_base();
  put("typo/base.json", "{\"extends\": \"../lib/base.json\", \"train\": {\"lr_typo\": 1}}\n");
  put("typo/child.json", "{\"extends\": \"base.json\", \"model\": {\"n_layer\": 1}}\n");
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, at("typo/child.json"));
  CHECK_ERR(rc, AA_EINVAL, "typo/child.json: train.lr_typo: unknown key (allowed: ");
  CHECK_ERR(rc, AA_EINVAL, "; train.lr_typo is set in ");
  CHECK_ERR(rc, AA_EINVAL, "typo/base.json (which ");
  /* A rule between fields: the field the message names. */
  put("typo/heads.json", "{\"extends\": \"../lib/base.json\", \"model\": {\"n_head\": 3}}\n");
  put("typo/leaf.json", "{\"extends\": \"heads.json\"}\n");
  CHECK_ERR(aa_spec_load(&s, at("typo/leaf.json")), AA_EINVAL, "model.n_head: must divide model.d_model");
  CHECK_ERR(aa_spec_load(&s, at("typo/leaf.json")), AA_EINVAL, "model.n_head is set in ");
  /* The file's own field: no note. */
  put("typo/own.json", "{\"extends\": \"../lib/base.json\", \"model\": {\"n_layer\": 0}}\n");
  rc = aa_spec_load(&s, at("typo/own.json"));
  CHECK_ERR(rc, AA_EINVAL, "typo/own.json: model.n_layer: must be between 1 and 256 (got 0)");
  CHECK(!strstr(aa_last_error(), "is set"));
  CHECK(aa_spec_parse(&s, BASE, NULL, "x") == 0);
  CHECK_ERR(aa_spec_parse(&s, "{\"extends\": \"lib/base.json\"}", NULL, "submitted model"), AA_EINVAL,
            "submitted model: extends: only a spec file may extend another");
}

/* --set: JSON values (numbers, booleans, objects, null), strings as
 * they are, nested paths, relative paths from the current directory;
 * applied after extends, in order. */
AA_TEST(set_overrides_after_extends) {
  setup_base();
  put("setc.json", "{\"extends\": \"lib/base.json\", \"model\": {\"n_layer\": 2}}\n");
  const char *sets[] = {"model.n_layer=8",
                        "train.lr=3e-4",
                        "train.weights_only_checkpoints=true",
                        "name=my run",
                        "model.rope_theta=500000",
                        "model.moe={\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 32}",
                        "model.moe.top_k=1",
                        "data.train=shards/x.bin",
                        "data.val=null",
                        "train.steps=50",
                        "train.steps=60"};
  aa_model_spec_t s;
  int rc = aa_spec_load_set(&s, at("setc.json"), sets, sizeof sets / sizeof *sets);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(s.arch.n_layer == 8 && s.train.lr == 3e-4f && s.train.weights_only == 1 && !strcmp(s.name, "my run"));
  CHECK(s.arch.rope_theta == 500000.0f && s.arch.n_head == 4);
  CHECK(s.arch.moe.experts == 4 && s.arch.moe.top_k == 1 && s.arch.moe.d_ff_expert == 32);
  CHECK(s.train.steps == 60 && !s.val_data[0]);
  char cwd[512], want[600];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(want, sizeof want, "%s/shards/x.bin", cwd);
  CHECK_MSG(!strcmp(s.train_data, want), "%s vs %s", s.train_data, want);
  /* A quoted value is a JSON string: "8" is text, not a number. */
  const char *quoted[] = {"model.n_layer=\"8\""};
  CHECK_ERR(aa_spec_load_set(&s, at("setc.json"), quoted, 1), AA_EINVAL,
            "model.n_layer: must be an integer (got string)");
  CHECK_ERR(aa_spec_load_set(&s, at("setc.json"), quoted, 1), AA_EINVAL, "is set by --set model.n_layer=");
  /* An unquoted word is a string. */
  const char *word[] = {"model.family=gpt3"};
  CHECK_ERR(aa_spec_load_set(&s, at("setc.json"), word, 1), AA_EINVAL,
            "model.family: must be one of: gpt2, llama");
}

AA_TEST(set_unknown_paths_and_bad_syntax_are_refused) {
  setup_base();
  aa_model_spec_t s;
  const char *unknown[] = {"model.n_layr=8"};
  int rc = aa_spec_load_set(&s, at("lib/base.json"), unknown, 1);
  CHECK_ERR(rc, AA_EINVAL, "lib/base.json: model.n_layr: unknown key (allowed: family, n_layer");
  CHECK_ERR(rc, AA_EINVAL, "; model.n_layr is set by --set model.n_layr=8");
  const char *top[] = {"optimizer.lr=1"};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), top, 1), AA_EINVAL, "optimizer: unknown key");
  const char *ext[] = {"extends=lib/base.json"};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), ext, 1), AA_EINVAL,
            "extends: only a spec file may extend");
  const char *bad[][2] = {{"model.n_layer", "expected KEY.PATH=VALUE"},
                          {"=8", "no key before '='"},
                          {".n_layer=8", "an empty key"},
                          {"model.=8", "an empty key"},
                          {"model..n_layer=8", "an empty key"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_ERR(aa_spec_set_check(bad[i][0]), AA_EINVAL, bad[i][1]);
    CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), bad[i], 1), AA_EINVAL, bad[i][1]);
  }
  CHECK(aa_spec_set_check("model.n_layer=") == 0 && aa_spec_set_check("a=b=c") == 0);
  /* An empty value is the empty string, which the name refuses. */
  const char *empty[] = {"name="};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), empty, 1), AA_EINVAL, "name: must not be empty");
}

/* Merak's save_total_limit and no_save_optim are keep_last and
 * weights_only_checkpoints, under one name at a time. */
AA_TEST(train_section_takes_merak_checkpoint_names) {
  setup_base();
  aa_model_spec_t s;
  const char *merak[] = {"train.save_total_limit=3", "train.no_save_optim=true"};
  int rc = aa_spec_load_set(&s, at("lib/base.json"), merak, 2);
  CHECK_MSG(rc == 0 && s.train.keep_last == 3 && s.train.weights_only == 1, "%s", aa_last_error());
  const char *all[] = {"train.save_total_limit=-1"};
  rc = aa_spec_load_set(&s, at("lib/base.json"), all, 1);
  CHECK_MSG(rc == 0 && s.train.keep_last == 0 && s.train.weights_only == 0, "%s", aa_last_error());
  const char *ours[] = {"train.keep_last=2", "train.weights_only_checkpoints=false"};
  rc = aa_spec_load_set(&s, at("lib/base.json"), ours, 2);
  CHECK_MSG(rc == 0 && s.train.keep_last == 2 && s.train.weights_only == 0, "%s", aa_last_error());
  const char *zero[] = {"train.save_total_limit=0"};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), zero, 1), AA_EINVAL,
            "train.save_total_limit: must be -1");
  const char *both[] = {"train.save_total_limit=2", "train.keep_last=2"};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), both, 2), AA_EINVAL,
            "Merak's name for train.keep_last");
  const char *optim[] = {"train.no_save_optim=1"};
  CHECK_ERR(aa_spec_load_set(&s, at("lib/base.json"), optim, 1), AA_EINVAL,
            "train.no_save_optim: must be true or false (got integer)");
  /* Both written out and read back (the planner's copy of the spec). */
  rc = aa_spec_load_set(&s, at("lib/base.json"), merak, 2);
  char *text = NULL;
  aa_model_spec_t back;
  CHECK(rc == 0 && aa_spec_to_json(&s, &text) == 0 && aa_spec_parse(&back, text, NULL, "text") == 0);
  CHECK(back.train.keep_last == 3 && back.train.weights_only == 1);
  free(text);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/aa-spec-extends-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(extends_overrides_fields_and_keeps_the_rest);
  RUN(extends_merges_nested_objects_and_null_removes);
  RUN(extends_chains);
  RUN(extends_cycles_and_missing_bases_are_refused_naming_the_chain);
  RUN(extends_validates_the_merge_naming_the_file_that_set_a_field);
  RUN(set_overrides_after_extends);
  RUN(set_unknown_paths_and_bad_syntax_are_refused);
  RUN(train_section_takes_merak_checkpoint_names);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return aa_test_summary();
}
