/* The calibration file (strategies/calib_file.h), what `autoaccel calib
 * export` writes and `calib import` reads: written and read back it gives
 * the same bytes, every malformed field is refused with its name (the
 * wrapper's, an entry's, the calibration's inside it), a store key must fit
 * its calibration, and a file of tiny values is refused before it is
 * parsed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "common/aa.h"
#include "strategies/calib_file.h"

static aa_calib_t *calib(const char *device, const char *backend, int cuda) {
  aa_calib_t *c = calloc(1, sizeof *c);
  c->version = AA_CALIB_VERSION;
  snprintf(c->device, sizeof c->device, "%s", device);
  snprintf(c->backend, sizeof c->backend, "%s", backend);
  c->cuda = cuda;
  c->threads = cuda ? 0 : 1;
  c->host_cores = 2;
  c->ranks = 2;
  c->measured_s = 41.25;
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_MATMUL, {64, 32, 96, 0}}, AA_F32, 1.9e-5, 4.1e-5};
  c->op[c->n_op++] = (aa_calib_op_t){{AA_OP_ADAMW, {1234, 0, 0, 0}}, AA_F32, 0.1 / 3, 0};
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_REDUCE, 2, 2.1e-5, 3.4e9};
  return c;
}

#define CPU "cpu:Test CPU (1 threads):1024MiB"

/* A file of two entries: a device's row of one host and its row across hosts. */
static void sample(aa_calib_file_t *f) {
  memset(f, 0, sizeof *f);
  f->e[0] = (aa_calib_entry_t){
      .device = CPU, .backend = "shm", .measured_at = 1795000000, .calib = calib(CPU, "shm", 0)};
  f->e[1] = (aa_calib_entry_t){
      .device = CPU, .backend = "gloo", .measured_at = 1795000100, .calib = calib(CPU, "gloo", 0)};
  f->n = 2;
}

AA_TEST(a_file_written_and_read_back_gives_the_same_bytes) {
  aa_calib_file_t f, back;
  sample(&f);
  char *text = aa_calib_file_to_json(&f);
  CHECK(text != NULL);
  const char *head = "{\"format\":\"autoaccel-calibration\",\"version\":1,\"calibrations\":[\n";
  CHECK(text && !strncmp(text, head, strlen(head)));
  CHECK(text &&
        strstr(text, "\"backend\":\"gloo\",\"measured_at\":1795000100,\"calibration\":{\"version\":1,"));
  int rc = text ? aa_calib_file_parse(&back, text, strlen(text), "f.json") : -1;
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc == 0) {
    CHECK(back.n == 2 && !strcmp(back.e[1].device, CPU) && !strcmp(back.e[1].backend, "gloo") &&
          back.e[1].measured_at == 1795000100 && back.e[0].calib->op[0].fwd_s == 1.9e-5 &&
          back.e[0].calib->op[1].fwd_s == 0.1 / 3);
    char *again = aa_calib_file_to_json(&back);
    CHECK(again && !strcmp(again, text));
    free(again);
    aa_calib_file_clear(&back);
    CHECK(back.n == 0);
  }
  free(text);
  aa_calib_file_clear(&f);
}

/* Replaces the first occurrence of from in the sample's text by to and
 * checks that parsing refuses it with a message holding want, leaving the
 * output untouched. */
static void refused(const char *from, const char *to, const char *want) {
  aa_calib_file_t f, out;
  sample(&f);
  char *text = aa_calib_file_to_json(&f);
  aa_calib_file_clear(&f);
  char *at = text ? strstr(text, from) : NULL;
  CHECK_MSG(at != NULL, "%s not in the sample", from);
  if (at) {
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *bad = malloc(n);
    snprintf(bad, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    out.n = -7;
    int rc = aa_calib_file_parse(&out, bad, strlen(bad), "f.json");
    CHECK_MSG(rc == AA_EINVAL || rc == AA_EPARSE, "rc %d for %s", rc, bad);
    CHECK_MSG(strstr(aa_last_error(), want) != NULL, "got \"%s\", want \"%s\"", aa_last_error(), want);
    CHECK(out.n == -7);
    free(bad);
  }
  free(text);
}

AA_TEST(every_malformed_field_is_refused_by_name) {
  refused("autoaccel-calibration", "autoaccel-strategy", "f.json: format: must be \"autoaccel-calibration\"");
  refused("\"version\":1,\"calibrations\"", "\"version\":2,\"calibrations\"",
          "f.json: version: version 2 is not supported (this build reads 1)");
  refused("\"version\":1,\"calibrations\"", "\"version\":1,\"extra\":0,\"calibrations\"",
          "f.json: extra: unknown key (allowed: format, version, calibrations)");
  refused("{\"format\"", "[{\"format\"", "f.json:");
  refused("{\"device\":\"" CPU "\",\"backend\":\"shm\"", "{\"backend\":\"shm\"",
          "f.json: calibrations[0].device: required field is missing");
  refused("\"device\":\"cpu:", "\"device\":\"tpu:", "calibrations[0].device: must be a device fingerprint");
  refused("\"backend\":\"shm\",\"measured_at\"", "\"backend\":\"tcp\",\"measured_at\"",
          "calibrations[0].backend: must be one of: shm, nccl, gloo, self, nccl-hosts");
  refused("\"measured_at\":1795000000", "\"measured_at\":0",
          "calibrations[0].measured_at: must be between 1 and");
  refused("\"measured_at\":1795000000", "\"measured_at\":\"yesterday\"",
          "calibrations[0].measured_at: must be an integer (got string)");
  refused("\"measured_at\":1795000000,", "\"measured_at\":1795000000,\"note\":\"x\",",
          "calibrations[0].note: unknown key");
  /* The calibration inside is read by its own reader, named by its place. */
  refused("1.9000000000000001e-5", "0",
          "f.json: calibrations[0].calibration: ops[0].fwd_s: must be finite and > 0 (got 0)");
  refused("\"backend\":\"shm\",\"cuda\"", "\"backend\":\"shm\",\"cuda\":0,\"x\":1,\"y\"",
          "calibrations[0].calibration: x: unknown key");
  /* Keys that cannot hold their calibration. */
  refused("\"device\":\"cpu:", "\"device\":\"cuda:",
          "calibrations[0]: a cuda device's calibration must have run on a GPU");
  refused("\"backend\":\"shm\",\"measured_at\"", "\"backend\":\"nccl\",\"measured_at\"",
          "calibrations[0]: a cpu device's calibration is stored under shm, gloo or self");
  refused("\"backend\":\"shm\",\"measured_at\"", "\"backend\":\"gloo\",\"measured_at\"",
          "calibrations[0]: the calibration must have run on the backend it is stored under, or on self "
          "(device " CPU ", backend gloo; the calibration: cuda 0, backend shm)");
  refused("\"calibrations\":[\n", "\"calibrations\":[],\"x\":[", "f.json: x: unknown key");
}

/* Refusals of whole texts written out. */
static void refused_text(const char *text, const char *want) {
  aa_calib_file_t out = {.n = -7};
  int rc = aa_calib_file_parse(&out, text, strlen(text), "f.json");
  CHECK_MSG(rc == AA_EINVAL || rc == AA_EPARSE, "rc %d for %s", rc, text);
  CHECK_MSG(strstr(aa_last_error(), want) != NULL, "got \"%s\", want \"%s\"", aa_last_error(), want);
  CHECK(out.n == -7);
}

AA_TEST(whole_values_of_the_wrong_kind_are_refused) {
#define HEAD "{\"format\":\"autoaccel-calibration\",\"version\":1,"
  refused_text(HEAD "\"calibrations\":[{\"device\":\"cpu:X:1MiB\",\"backend\":\"shm\",\"measured_at\":1,"
                    "\"calibration\":[]}]}",
               "f.json: calibrations[0].calibration: must be an object (got array)");
  refused_text(HEAD "\"calibrations\":{}}", "f.json: calibrations: must be an array (got object)");
  refused_text(HEAD "\"calibrations\":[7]}", "f.json: calibrations[0]: must be an object (got integer)");
  refused_text(HEAD "\"calibrations\":[{}]}", "f.json: calibrations[0].device: required field is missing");
  refused_text("[]", "f.json: top level must be a JSON object (got array)");
  refused_text("", "f.json: empty");
  refused_text(HEAD "\"calibrations\":[", "f.json:1:");
#undef HEAD
  /* One key twice: which would the store keep? */
  aa_calib_file_t f, out;
  sample(&f);
  snprintf(f.e[1].backend, sizeof f.e[1].backend, "shm");
  snprintf(f.e[1].calib->backend, sizeof f.e[1].calib->backend, "shm");
  char *text = aa_calib_file_to_json(&f);
  CHECK_ERR(aa_calib_file_parse(&out, text, strlen(text), "f.json"), AA_EINVAL,
            "f.json: calibrations[1]: repeats calibrations[0] (the same device and backend)");
  free(text);
  aa_calib_file_clear(&f);
}

AA_TEST(store_keys_fit_their_calibrations) {
  aa_calib_t *shm = calib(CPU, "shm", 0), *self = calib(CPU, "self", 0),
             *nccl = calib("cuda:G:1MiB", "nccl", 1), *gself = calib("cuda:G:1MiB", "self", 1);
  CHECK(aa_calib_key_rule(CPU, "shm", shm) == NULL);
  CHECK(aa_calib_key_rule(CPU, "shm", self) == NULL); /* a pool of one, stored under its host's backend */
  CHECK(aa_calib_key_rule(CPU, "gloo", self) == NULL);
  CHECK(aa_calib_key_rule(CPU, "self", self) == NULL);
  CHECK(aa_calib_key_rule(CPU, "self", shm) != NULL);
  CHECK(aa_calib_key_rule(CPU, "nccl-hosts", shm) != NULL);
  CHECK(aa_calib_key_rule("cuda:G:1MiB", "nccl", nccl) == NULL);
  CHECK(aa_calib_key_rule("cuda:G:1MiB", "nccl-hosts", nccl) == NULL);
  CHECK(aa_calib_key_rule("cuda:G:1MiB", "nccl", gself) == NULL);
  CHECK(aa_calib_key_rule("cuda:G:1MiB", "nccl-hosts", gself) != NULL); /* measured across hosts: has links */
  CHECK(aa_calib_key_rule("cuda:G:1MiB", "shm", nccl) != NULL);
  CHECK(aa_calib_key_rule(CPU, "nccl", nccl) != NULL);
  free(shm);
  free(self);
  free(nccl);
  free(gself);
}

AA_TEST(entries_are_bounded) {
  aa_calib_file_t f, out;
  memset(&f, 0, sizeof f);
  /* The count is the file's, so a file of none is refused, and one of more
   * than a device can have. */
  const char *none = "{\"format\":\"autoaccel-calibration\",\"version\":1,\"calibrations\":[]}";
  CHECK_ERR(aa_calib_file_parse(&out, none, strlen(none), "f.json"), AA_EINVAL,
            "f.json: calibrations: must list 1 to 8 calibrations (got 0)");
  static const char *const backends[] = {"shm", "gloo", "self"};
  for (int i = 0; i < AA_CALIB_FILE_ENTRIES_MAX; i++) {
    aa_calib_entry_t *e = &f.e[f.n++];
    snprintf(e->device, sizeof e->device, "cpu:CPU %d:1MiB", i / 3);
    snprintf(e->backend, sizeof e->backend, "%s", backends[i % 3]);
    e->measured_at = 1;
    e->calib = calib(e->device, "self", 0);
  }
  char *text = aa_calib_file_to_json(&f);
  int rc = aa_calib_file_parse(&out, text, strlen(text), "eight.json");
  CHECK_MSG(rc == 0 && out.n == 8, "%s", aa_last_error());
  if (rc == 0) aa_calib_file_clear(&out);
  /* A ninth entry: the last one again, of another device. */
  const char *last = strstr(text, "{\"device\":\"cpu:CPU 2:1MiB\",\"backend\":\"gloo\"");
  CHECK(last != NULL);
  size_t keep = strlen(text) - 4, n = strlen(text) + strlen(last) + 8; /* keep: before "\n]}\n" */
  char *nine = malloc(n);
  snprintf(nine, n, "%.*s,\n%s", (int)keep, text, last);
  char *other = strstr(nine + keep, "CPU 2");
  if (other) other[4] = '9';
  CHECK_ERR(aa_calib_file_parse(&out, nine, strlen(nine), "nine.json"), AA_EINVAL,
            "nine.json: calibrations: must list 1 to 8 calibrations (got 9)");
  free(nine);
  free(text);
  aa_calib_file_clear(&f);
}

AA_TEST(a_file_of_tiny_values_is_refused_before_it_is_parsed) {
  /* 2.1 M values in 4 MiB would cost the parser about 100 MiB; the count
   * refuses them from the text alone. */
  size_t n = AA_CALIB_FILE_MAX - 64, o = 0;
  char *text = malloc(n + 1);
  o += (size_t)snprintf(text, n, "{\"format\":\"autoaccel-calibration\",\"version\":1,\"calibrations\":[");
  while (o + 8 < n) {
    memcpy(text + o, "0,", 2);
    o += 2;
  }
  memcpy(text + o, "0]}", 4);
  aa_calib_file_t out;
  char want[96];
  snprintf(want, sizeof want, "tiny.json: more than %d JSON values", AA_CALIB_FILE_VALUES_MAX);
  CHECK_ERR(aa_calib_file_parse(&out, text, strlen(text), "tiny.json"), AA_EINVAL, want);
  /* Commas inside strings are no values. */
  o = (size_t)snprintf(text, n, "{\"format\":\"");
  while (o + 8 < n)
    text[o++] = ',';
  memcpy(text + o, "\"}", 3);
  CHECK_ERR(aa_calib_file_parse(&out, text, strlen(text), "s.json"), AA_EINVAL,
            "s.json: format: must be \"autoaccel-calibration\"");
  /* And past the size, nothing is read at all. */
  CHECK_ERR(aa_calib_file_parse(&out, text, AA_CALIB_FILE_MAX + 1, "big.json"), AA_EINVAL,
            "big.json: too large (4194305 bytes; a calibration file may be at most 4194304 bytes)");
  free(text);
}

int main(void) {
  RUN(a_file_written_and_read_back_gives_the_same_bytes);
  RUN(every_malformed_field_is_refused_by_name);
  RUN(whole_values_of_the_wrong_kind_are_refused);
  RUN(store_keys_fit_their_calibrations);
  RUN(entries_are_bounded);
  RUN(a_file_of_tiny_values_is_refused_before_it_is_parsed);
  return aa_test_summary();
}
