/* Calibrations (strategies/calib.h): the JSON text reads back as the same
 * struct, every malformed field is refused with a message naming it, the
 * lookups and the merge find by exact shape, the link fit recovers a
 * line it is given exactly, and the llama family's op kinds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "strategies/calib.h"

static aa_calib_t *sample(void) {
  aa_calib_t *c = calloc(1, sizeof *c);
  c->version = AA_CALIB_VERSION;
  snprintf(c->device, sizeof c->device, "cpu:Test CPU (1 threads):1024MiB");
  snprintf(c->backend, sizeof c->backend, "shm");
  c->threads = 1;
  c->host_cores = 2;
  c->ranks = 2;
  c->measured_s = 12.5;
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_MATMUL, {64, 32, 96, 0}}, AA_F32, 0.125, 0.25};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_ATTENTION, {4, 16, 32, 4}}, AA_BF16, 0.1 / 3, 1.0 / 7};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_ADAMW, {1234, 0, 0, 0}}, AA_F16, 3e-4, 0};
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_REDUCE, 2, 1e-5, 2e9};
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_SEND, 4, 0, 1.0 / 3};
  return c;
}

static int same_calib(const aa_calib_t *a, const aa_calib_t *b) {
  if (a->version != b->version || strcmp(a->device, b->device) || strcmp(a->backend, b->backend) ||
      a->cuda != b->cuda || a->threads != b->threads || a->host_cores != b->host_cores ||
      a->ranks != b->ranks || a->measured_s != b->measured_s || a->n_op != b->n_op || a->n_link != b->n_link)
    return 0;
  for (int i = 0; i < a->n_op; i++)
    if (memcmp(&a->op[i].shape, &b->op[i].shape, sizeof a->op[i].shape) || a->op[i].dtype != b->op[i].dtype ||
        a->op[i].fwd_s != b->op[i].fwd_s || a->op[i].bwd_s != b->op[i].bwd_s)
      return 0;
  for (int i = 0; i < a->n_link; i++)
    if (a->link[i].kind != b->link[i].kind || a->link[i].ranks != b->link[i].ranks ||
        a->link[i].latency_s != b->link[i].latency_s || a->link[i].bytes_per_s != b->link[i].bytes_per_s)
      return 0;
  return 1;
}

AA_TEST(the_json_text_reads_back_as_the_same_calibration) {
  aa_calib_t *c = sample(), *back = calloc(1, sizeof *back);
  char *text = aa_calib_to_json(c);
  CHECK(text != NULL);
  CHECK(strstr(text, "[\"matmul\",[64,32,96,0],\"fp32\",") != NULL);
  CHECK(strstr(text, "[\"send\",4,") != NULL);
  int rc = aa_calib_parse(back, text, "c.json");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(same_calib(c, back));
  free(text);
  free(back);
  free(c);
}

/* Replaces the first occurrence of from in the sample's text by to, parses
 * it and checks the refusal's message holds want. */
static void refused(const char *from, const char *to, const char *want) {
  aa_calib_t *c = sample(), *out = calloc(1, sizeof *out);
  char *text = aa_calib_to_json(c);
  char *at = strstr(text, from);
  CHECK_MSG(at != NULL, "%s not in %s", from, text);
  if (at) {
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *bad = malloc(n);
    snprintf(bad, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    out->n_op = -7;
    int rc = aa_calib_parse(out, bad, "c.json");
    CHECK_MSG(rc == AA_EINVAL || rc == AA_EPARSE, "rc %d for %s", rc, bad);
    CHECK_MSG(strstr(aa_last_error(), want) != NULL, "got \"%s\", want \"%s\"", aa_last_error(), want);
    CHECK(out->n_op == -7); /* untouched */
    free(bad);
  }
  free(text);
  free(out);
  free(c);
}

AA_TEST(every_malformed_field_is_refused_by_name) {
  refused("\"matmul\"", "\"conv\"", "c.json: ops[0].kind: unknown name \"conv\"");
  refused("[64,32,96,0]", "[-64,32,96,0]", "ops[0].dims[0]: must be between 1 and 2^40 for matmul (got -64)");
  refused("[64,32,96,0]", "[64,32,96,5]", "ops[0].dims[3]: must be 0: matmul uses 3 dimensions");
  refused("[4,16,32,4]", "[4,16,32,5]", "ops[1].dims[3]: heads 5 must divide the width 32");
  refused("\"fp32\"", "\"fp8\"", "ops[0].dtype: unknown name \"fp8\"");
  refused("0.125", "-0.125", "ops[0].fwd_s: must be finite and > 0 (got -0.125)");
  refused("0.125", "0", "ops[0].fwd_s: must be finite and > 0 (got 0)");
  refused("0.25", "\"x\"", "ops[0].bwd_s: must be a number");
  refused("\"version\":1", "\"version\":2", "version: version 2 is not supported");
  refused("\"backend\":\"shm\"", "\"backend\":\"tcp\"", "backend: must be one of");
  refused("\"ranks\":2", "\"ranks\":0", "c.json: ranks: must be between 1 and 4096");
  refused("[\"send\",4,", "[\"send\",1,", "links[1].ranks: must be between 2 and 4096 (got 1)");
  refused("[\"send\",4,", "[\"bcast\",4,", "links[1].kind: unknown name \"bcast\"");
  refused("\"cuda\":0", "\"cuda\":0,\"extra\":1", "unknown key");
  refused("[\"send\",4,", "[\"all_reduce\",2,1,1],[\"send\",4,", "links[1]: repeats links[0]");
  /* JSON has no NaN: a time past a double's range is refused by the parser. */
  refused("0.125", "1e999", "c.json");
}

AA_TEST(too_many_ops_are_refused_before_they_are_read) {
  size_t n = (AA_CALIB_OPS_MAX + 1) * 48 + 256, o = 0;
  char *text = malloc(n);
  o += (size_t)snprintf(text + o, n - o,
                        "{\"version\":1,\"device\":\"d\",\"backend\":\"self\",\"cuda\":0,\"threads\":1,"
                        "\"host_cores\":1,\"ranks\":1,\"measured_s\":1,\"links\":[],\"ops\":[");
  for (int i = 0; i <= AA_CALIB_OPS_MAX; i++)
    o += (size_t)snprintf(text + o, n - o, "%s[\"gelu\",[%d,0,0,0],\"fp32\",1,1]", i ? "," : "", i + 1);
  snprintf(text + o, n - o, "]}");
  aa_calib_t *c = calloc(1, sizeof *c);
  CHECK(aa_calib_parse(c, text, "big.json") == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "big.json: ops: must list at most 2048 ops (got 2049)"), "%s",
            aa_last_error());
  free(c);
  free(text);
}

AA_TEST(lookups_find_exact_shapes_and_merge_replaces_them) {
  aa_calib_t *c = sample(), *d = sample();
  aa_op_shape_t mm = {AA_OP_MATMUL, {64, 32, 96, 0}};
  CHECK(aa_calib_find_op(c, &mm, AA_F32) == &c->op[0]);
  CHECK(aa_calib_find_op(c, &mm, AA_BF16) == NULL);
  mm.d[2] = 95;
  CHECK(aa_calib_find_op(c, &mm, AA_F32) == NULL);
  CHECK(aa_calib_find_link(c, AA_COST_ALL_REDUCE, 2) == &c->link[0]);
  CHECK(aa_calib_find_link(c, AA_COST_ALL_REDUCE, 4) == NULL);
  d->op[0].fwd_s = 9;
  d->op[1].shape.d[0] = 8; /* a new shape */
  d->link[0].latency_s = 7;
  snprintf(d->device, sizeof d->device, "other");
  aa_calib_merge(c, d);
  CHECK(c->n_op == 4 && c->op[0].fwd_s == 9 && c->op[3].shape.d[0] == 8);
  CHECK(c->n_link == 2 && c->link[0].latency_s == 7);
  CHECK(!strcmp(c->device, "cpu:Test CPU (1 threads):1024MiB"));
  /* One executor's calibration ("self", 1 rank) merged with a pool of 2's
   * (shm, 2 ranks): the pool's backend and how its ops were timed. */
  snprintf(c->backend, sizeof c->backend, "self");
  c->ranks = 1;
  snprintf(d->backend, sizeof d->backend, "shm");
  d->ranks = 2;
  d->host_cores = 16;
  aa_calib_merge(c, d);
  CHECK(!strcmp(c->backend, "shm") && c->ranks == 2 && c->host_cores == 16);
  /* A calibration without ops or links changes neither. */
  d->n_op = d->n_link = 0;
  d->ranks = 5;
  snprintf(d->backend, sizeof d->backend, "gloo");
  aa_calib_merge(c, d);
  CHECK(!strcmp(c->backend, "shm") && c->ranks == 2);
  free(c);
  free(d);
}

AA_TEST(op_work_is_flops_for_gemms_and_elements_otherwise) {
  aa_op_shape_t mm = {AA_OP_MATMUL, {64, 32, 96, 0}}, at = {AA_OP_ATTENTION, {2, 16, 32, 4}},
                ln = {AA_OP_LAYERNORM, {64, 32, 0, 0}}, g = {AA_OP_GELU, {100, 0, 0, 0}};
  CHECK(aa_op_work(&mm) == 2.0 * 64 * 32 * 96);
  CHECK(aa_op_work(&at) == 2.0 * 4 * 16 * 16 * 8);
  CHECK(aa_op_work(&ln) == 64.0 * 32);
  CHECK(aa_op_work(&g) == 100);
  CHECK(!strcmp(aa_op_kind_name(AA_OP_ADAMW), "adamw") && !strcmp(aa_op_kind_name(AA_OP_KINDS), "?"));
  CHECK(aa_op_kind_parse("xent") == AA_OP_XENT && aa_op_kind_parse("nope") == -1);
}

AA_TEST(the_link_fit_recovers_an_exact_line_and_clamps_the_latency) {
  const double lat = 2.5e-5, bw = 3.2e9;
  double x[5] = {1024, 65536, 1 << 20, 8 << 20, 64 << 20}, t[5], a, b;
  for (int i = 0; i < 5; i++)
    t[i] = lat + x[i] / bw;
  CHECK(aa_calib_fit_link(x, t, 5, &a, &b) == 0);
  CHECK_NEAR(a / lat, 1, 1e-9);
  CHECK_NEAR(b / bw, 1, 1e-9);
  /* A line below the origin: latency 0 and the slope through the origin. */
  double y[2] = {1000, 2000}, u[2] = {1e-6, 3e-6};
  CHECK(aa_calib_fit_link(y, u, 2, &a, &b) == 0);
  CHECK(a == 0);
  /* Weights 1/t^2: slope sum(x t / t^2) / sum(x^2 / t^2). */
  const double w0 = 1 / (1e-6 * 1e-6), w1 = 1 / (3e-6 * 3e-6);
  CHECK_NEAR(b / (1.0 / ((w0 * 1000 * 1e-6 + w1 * 2000 * 3e-6) / (w0 * 1000.0 * 1000 + w1 * 2000.0 * 2000))), 1,
             1e-12);
  /* The fit is on relative error: shm all-reduces measured at 4 KiB .. 4
   * MiB, whose largest message runs slower per byte than the others, keep
   * a latency near the small messages' time (an unweighted fit put it at
   * 0). Weighted least squares by hand: 4.2049 us, 3.2552 GB/s. */
  double sx[4] = {4096, 65536, 524288, 4194304}, st[4] = {5.6e-6, 22.6e-6, 142e-6, 2490e-6};
  CHECK(aa_calib_fit_link(sx, st, 4, &a, &b) == 0);
  CHECK_NEAR(a / 4.204918912e-6, 1, 1e-6);
  CHECK_NEAR(b / 3.255236583e9, 1, 1e-6);
  double same[2] = {4096, 4096};
  CHECK(aa_calib_fit_link(same, u, 2, &a, &b) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "two distinct message sizes") != NULL);
  CHECK(aa_calib_fit_link(x, t, 1, &a, &b) == AA_EINVAL);
  double down[2] = {3e-6, 1e-6};
  CHECK(aa_calib_fit_link(y, down, 2, &a, &b) == AA_EINVAL);
}

/* The llama family's kinds come after the old ones, whose numbers and
 * names stored calibrations hold; they read back, their dimensions are
 * checked as the others', and their work is the arithmetic of the folded
 * grouped-query shape (S = B·NKV groups of G query heads): S·T²·G·HS for
 * attention, as B·NH·T²·HS, and S·T·(G + 1)·HS rotated for RoPE, as
 * B·T·(NH + NKV)·HS. */
AA_TEST(llama_kinds_follow_the_old_ones_and_read_back) {
  CHECK(AA_OP_MATMUL == 0 && AA_OP_ADAMW == 8 && AA_OP_RMSNORM == 9 && AA_OP_GQA == 12);
  const char *names[] = {"rmsnorm", "swiglu", "rope", "gqa"};
  for (int k = 0; k < 4; k++)
    CHECK(aa_op_kind_parse(names[k]) == AA_OP_RMSNORM + k && !strcmp(aa_op_kind_name(AA_OP_RMSNORM + k), names[k]));
  aa_calib_t *c = sample(), *back = calloc(1, sizeof *back);
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_RMSNORM, {64, 32, 0, 0}}, AA_F32, 1e-6, 2e-6};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_SWIGLU, {64, 48, 0, 0}}, AA_F32, 1e-6, 2e-6};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_ROPE, {8, 16, 2, 8}}, AA_F32, 1e-6, 1e-6};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_GQA, {8, 16, 2, 8}}, AA_BF16, 1e-5, 3e-5};
  char *text = aa_calib_to_json(c);
  CHECK(text && strstr(text, "[\"gqa\",[8,16,2,8],\"bf16\","));
  CHECK_MSG(aa_calib_parse(back, text, "c.json") == 0, "%s", aa_last_error());
  CHECK(same_calib(c, back));
  free(text);
  free(back);
  free(c);
  refused("\"matmul\",[64,32,96,0]", "\"swiglu\",[64,32,96,0]",
          "ops[0].dims[2]: must be 0: swiglu uses 2 dimensions");
  refused("\"matmul\",[64,32,96,0]", "\"gqa\",[64,32,96,0]", "ops[0].dims[3]: must be between 1 and 2^40 for gqa");
  const double B = 2, T = 16, NH = 4, NKV = 2, HS = 8;
  const aa_op_shape_t gqa = {AA_OP_GQA, {2 * 2, 16, 2, 8}}, rope = {AA_OP_ROPE, {2 * 2, 16, 2, 8}},
                      rms = {AA_OP_RMSNORM, {64, 32, 0, 0}}, sw = {AA_OP_SWIGLU, {64, 48, 0, 0}};
  CHECK(aa_op_work(&gqa) == B * NH * T * T * HS);
  CHECK(aa_op_work(&rope) == B * T * (NH + NKV) * HS);
  CHECK(aa_op_work(&rms) == 64.0 * 32 && aa_op_work(&sw) == 64.0 * 48);
}

/* Context parallelism's ring kinds come after the llama ones, so every
 * stored calibration keeps its kinds' numbers and names (a text without
 * them reads as before); they read back, their four dimensions are
 * checked, and their work is the folded grouped-query arithmetic at a
 * chunk's Tc: S·Tc²·G·HS, the diagonal's as the full block's. */
AA_TEST(ring_kinds_come_last_and_read_back) {
  CHECK(AA_OP_RING_DIAG == AA_OP_GQA + 1 && AA_OP_RING_BLOCK == AA_OP_KINDS - 1);
  CHECK(aa_op_kind_parse("ring_diag") == AA_OP_RING_DIAG &&
        aa_op_kind_parse("ring_block") == AA_OP_RING_BLOCK);
  CHECK(!strcmp(aa_op_kind_name(AA_OP_RING_BLOCK), "ring_block"));
  aa_calib_t *c = sample(), *back = calloc(1, sizeof *back);
  /* A calibration a build before the ring stored. */
  static const char old[] =
      "{\"version\":1,\"device\":\"cpu:x\",\"backend\":\"shm\",\"cuda\":0,\"threads\":1,\"host_cores\":2,"
      "\"ranks\":2,\"measured_s\":1.5,\"ops\":[[\"gqa\",[8,16,2,8],\"fp32\",1e-05,3e-05],"
      "[\"adamw\",[1234,0,0,0],\"fp32\",0.0003,0]],\"links\":[[\"send\",2,1e-05,2000000000.0]]}";
  CHECK_MSG(aa_calib_parse(back, old, "old.json") == 0, "%s", aa_last_error());
  CHECK(back->n_op == 2 && back->op[0].shape.op == AA_OP_GQA && back->op[1].shape.op == AA_OP_ADAMW &&
        back->n_link == 1 && back->link[0].kind == AA_COST_SEND);
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_RING_DIAG, {16, 4, 1, 8}}, AA_F32, 2e-6, 5e-6};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_RING_BLOCK, {16, 4, 1, 8}}, AA_F32, 3e-6, 6e-6};
  char *text = aa_calib_to_json(c);
  CHECK(text && strstr(text, "[\"ring_diag\",[16,4,1,8],\"fp32\",") &&
        strstr(text, "[\"ring_block\",[16,4,1,8],\"fp32\","));
  CHECK_MSG(aa_calib_parse(back, text, "c.json") == 0, "%s", aa_last_error());
  CHECK(same_calib(c, back));
  free(text);
  free(back);
  free(c);
  refused("\"matmul\",[64,32,96,0]", "\"ring_block\",[64,32,96,0]",
          "ops[0].dims[3]: must be between 1 and 2^40 for ring_block");
  const aa_op_shape_t diag = {AA_OP_RING_DIAG, {16, 4, 1, 8}}, blk = {AA_OP_RING_BLOCK, {8, 4, 2, 8}};
  CHECK(aa_op_work(&diag) == 16.0 * 4 * 4 * 1 * 8 && aa_op_work(&blk) == 8.0 * 4 * 4 * 2 * 8);
}

int main(void) {
  RUN(the_json_text_reads_back_as_the_same_calibration);
  RUN(every_malformed_field_is_refused_by_name);
  RUN(too_many_ops_are_refused_before_they_are_read);
  RUN(lookups_find_exact_shapes_and_merge_replaces_them);
  RUN(op_work_is_flops_for_gemms_and_elements_otherwise);
  RUN(the_link_fit_recovers_an_exact_line_and_clamps_the_latency);
  RUN(llama_kinds_follow_the_old_ones_and_read_back);
  RUN(ring_kinds_come_last_and_read_back);
  return aa_test_summary();
}
