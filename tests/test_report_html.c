/* The job report's HTML writer (cli/report_html.c), fed the fixture
 * tests/report/job.json (a job of 8 runs: ok with and without predictions,
 * an oom, 3 pruned for 2 reasons, a key holding <script>, a best run with 2
 * ranks' times) without a planner: the page is well-formed, holds its four
 * parts, escapes every string and refers to nothing outside itself; and
 * built run by run, past the charts' point limit it draws densities that
 * count every run, and past 64 prune reasons it counts the rest in one
 * row. The rendering in a real browser is tests/cli/test_report_html.sh,
 * a job of 100,160 runs from a live planner tests/cli/test_report_large.sh. */
#define _GNU_SOURCE /* strcasestr */
#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "aa_test.h"
#include "cli/report_html.h"
#include "common/aa.h"

static json_t *fixture(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/report/job.json", src ? src : ".");
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fprintf(stderr, "  cannot load %s: %s\n", path, err.text);
  return root;
}

static char *render(const json_t *root) {
  char *html = NULL;
  int rc = aa_report_html(&html, json_object_get(root, "job"), json_object_get(root, "runs"),
                          json_object_get(root, "best"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return html;
}

/* Every tag is closed in order (void elements written <x/>), every '&'
 * starts an entity, and the document is one <html> element after the
 * doctype. Returns NULL or what is wrong (a static string). */
static const char *check_tags(const char *s) {
  static char why[200];
  char stack[64][32];
  int depth = 0, roots = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '&') {
      const char *q = p + 1;
      if (*q == '#') q++;
      while (isalnum((unsigned char)*q))
        q++;
      if (*q != ';' || q == p + 1) return "a bare '&'";
      continue;
    }
    if (*p == '>') return "a bare '>' outside a tag";
    if (*p != '<') continue;
    const char *end = strchr(p, '>');
    if (!end) return "an unterminated tag";
    if (p[1] == '!') { /* the doctype */
      p = end;
      continue;
    }
    bool closing = p[1] == '/', self = end[-1] == '/';
    const char *name = p + 1 + closing;
    size_t n = strcspn(name, " \t\n/>");
    if (!n || n >= sizeof stack[0]) return "a tag without a name";
    for (const char *a = name + n; a < end; a++) /* attribute values hold no markup */
      if (*a == '<') return "a '<' inside a tag";
    if (closing) {
      if (!depth || strlen(stack[depth - 1]) != n || strncmp(stack[depth - 1], name, n)) {
        snprintf(why, sizeof why, "</%.*s> closes %s", (int)n, name, depth ? stack[depth - 1] : "nothing");
        return why;
      }
      depth--;
    } else if (!self) {
      if (depth == 64) return "nested too deep";
      if (!depth) roots++;
      memcpy(stack[depth], name, n);
      stack[depth++][n] = '\0';
    }
    p = end;
  }
  if (depth) {
    snprintf(why, sizeof why, "<%s> is never closed", stack[depth - 1]);
    return why;
  }
  return roots == 1 ? NULL : "not one root element";
}

static size_t count(const char *s, const char *needle) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* The text between the start of the element with id `id` and its </tag>. */
static char *part(const char *html, const char *id, const char *tag) {
  char open[64], close[32];
  snprintf(open, sizeof open, "id=\"%s\"", id);
  snprintf(close, sizeof close, "</%s>", tag);
  const char *a = strstr(html, open), *b = a ? strstr(a, close) : NULL;
  return b ? strndup(a, (size_t)(b - a)) : strdup("");
}

AA_TEST(page_is_well_formed) {
  json_t *root = fixture();
  CHECK(root);
  char *html = render(root);
  if (html) {
    const char *why = check_tags(html);
    CHECK_MSG(!why, "%s", why);
    CHECK(!strncmp(html, "<!DOCTYPE html>", 15));
    CHECK(check_tags("<p>a<b>c</p></b>") != NULL); /* the checker itself catches a misnested tag */
    CHECK(check_tags("<p>a & b</p>") != NULL);
  }
  free(html);
  json_decref(root);
}

AA_TEST(page_holds_the_header_and_the_four_parts) {
  json_t *root = fixture();
  char *html = render(root);
  if (!html) goto out;
  /* The header: model, job, hardware, the best strategy and its rate, counts. */
  CHECK(strstr(html, "<title>autoaccel report: job 7</title>"));
  CHECK(strstr(html, "tiny-synth"));
  CHECK(strstr(html, "f75588f44838cacd"));
  CHECK(strstr(html, "cpu:test-x2"));
  CHECK(strstr(html, "<td id=\"best\"><code>dp1.tp1.pp2.z0.fp32.ckpt-none.mb4</code>, 24000 tokens/s</td>"));
  CHECK(strstr(html, "<td id=\"counts\">8: 4 ok, 1 oom, 3 pruned</td>"));
  CHECK(strstr(html, "<td id=\"note\">best dp1.tp1.pp2.z0.fp32.ckpt-none.mb4: 1.20× the runner-up "
                     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb4, spread 3 % &amp; &lt;1 %&gt;</td>"));
  /* 1: a point for each of the 3 dry runs with a prediction and a
   * measurement, the y = x line, and a word on the one without prediction. */
  char *p = part(html, "pred-vs-measured", "svg");
  CHECK(strstr(p, "<title>Predicted against measured tokens/s"));
  CHECK_MSG(count(p, "<circle class=\"run\"") == 3, "%zu points", count(p, "<circle class=\"run\""));
  CHECK(strstr(p, "stroke-dasharray") && strstr(p, "y = x"));
  CHECK(strstr(p, "dp2.tp1.pp1.z0.fp32.ckpt-none.mb4: predicted 18000, measured 20000 tokens/s"));
  CHECK(strstr(html, "1 measured dry run had no prediction"));
  free(p);
  /* 2: the 4 ok runs, the best one marked and labelled. */
  p = part(html, "throughput-memory", "svg");
  CHECK(strstr(p, "<title>Throughput against peak memory"));
  CHECK(count(p, "<circle class=\"run\"") == 3);
  CHECK(count(p, "<circle id=\"best-point\"") == 1);
  CHECK(strstr(p, ">best: dp1.tp1.pp2.z0.fp32.ckpt-none.mb4</text>"));
  CHECK(strstr(p, "40.0 MiB, 24000 tokens/s"));
  free(p);
  /* 3: two ranks, five phases each. */
  p = part(html, "rank-breakdown", "svg");
  CHECK(strstr(p, "<title>Per-rank time breakdown"));
  CHECK(count(p, "<g class=\"rank\">") == 2);
  CHECK(count(p, "<rect ") == 1 + 10); /* the background and 2 x 5 segments */
  CHECK(strstr(p, "rank 1 (dp 0, tp 0, pp 1, cp 0): bubble 9.50 ms"));
  free(p);
  /* 4: two classes of reason, the first with two runs whose reasons differ
   * only in their figures. */
  p = part(html, "pruned", "table");
  CHECK(count(p, "<tr>") == 3);
  CHECK(strstr(p, "<td>predicted out of memory: a rank needs more than the device has</td><td class=\"num\">2</td>"));
  CHECK(strstr(p, "<code>dp2.tp1.pp1.z0.fp32.ckpt-none.mb32</code>"));
  free(p);
out:
  free(html);
  json_decref(root);
}

AA_TEST(every_string_is_escaped_and_nothing_is_fetched) {
  json_t *root = fixture();
  char *html = render(root);
  if (!html) goto out;
  CHECK(strstr(html, "dp1.&lt;script&gt;alert(1)&lt;/script&gt;"));
  CHECK(strstr(html, "zero 3 &amp; tp 2: &quot;not supported&quot; &lt;yet&gt;"));
  CHECK(!strcasestr(html, "<script"));
  CHECK(!strcasestr(html, "http"));
  CHECK(!strcasestr(html, "src="));
  CHECK(!strcasestr(html, "href"));
  CHECK(!strcasestr(html, "url("));
  CHECK(!strcasestr(html, "@import"));
out:
  free(html);
  json_decref(root);
}

AA_TEST(a_job_without_figures_says_so_in_words) {
  json_t *job = json_pack("{sIs{ssss}ss}", "id", (json_int_t)9, "model", "name", "m", "hash",
                          "0123456789abcdef", "status", "failed");
  json_t *runs =
      json_pack("[{sIssssss}]", "id", (json_int_t)1, "kind", "dryrun", "key", "dp1", "status", "error");
  char *html = NULL;
  CHECK(aa_report_html(&html, job, runs, NULL) == 0);
  if (html) {
    const char *why = check_tags(html);
    CHECK_MSG(!why, "%s", why);
    CHECK(strstr(html, "No dry run of this job has both a prediction and a measurement."));
    CHECK(strstr(html, "No ok dry run"));
    CHECK(strstr(html, "the job has no best run"));
    CHECK(strstr(html, "No candidate was pruned."));
    CHECK(strstr(html, "<td id=\"best\">none</td>"));
    CHECK(!strstr(html, "<svg id="));
  }
  free(html);
  json_decref(job);
  json_decref(runs);
}

AA_TEST(input_of_the_wrong_shape_is_refused) {
  json_t *job = json_object(), *runs = json_array();
  char *html = NULL;
  CHECK(aa_report_html(&html, job, job, NULL) == AA_EINVAL);
  CHECK(aa_report_html(&html, runs, runs, NULL) == AA_EINVAL);
  CHECK(html == NULL);
  json_decref(job);
  json_decref(runs);
}

/* Sums the N of every "<title>N run" in text: the runs a density chart's
 * squares hold. */
static size_t runs_in_titles(const char *text) {
  size_t sum = 0;
  for (const char *p = text; (p = strstr(p, "<title>")); p += 7) {
    char *end;
    unsigned long n = strtoul(p + 7, &end, 10);
    if (end != p + 7 && !strncmp(end, " run", 4)) sum += n;
  }
  return sum;
}

/* A report built run by run, as `autoaccel report` feeds it the pages. */
static char *stream(const json_t *job, const json_t *runs) {
  aa_report_t *r = NULL;
  char *text = NULL;
  size_t n = 0, i;
  json_t *run;
  CHECK(aa_report_new(&r, job, NULL) == 0);
  if (!r) return NULL;
  json_array_foreach(runs, i, run) CHECK(aa_report_add_run(r, run) == 0);
  CHECK(aa_report_runs(r) == json_array_size(runs));
  FILE *f = open_memstream(&text, &n);
  CHECK(f && aa_report_write(r, f) == 0);
  if (f) fclose(f);
  aa_report_free(r);
  return text;
}

/* n ok dry runs with a prediction and a peak; run 1 is the best. */
static json_t *many_runs(int n) {
  json_t *runs = json_array();
  for (int i = 1; i <= n; i++)
    json_array_append_new(runs,
                          json_pack("{sisssssssfsfsi}", "id", i, "kind", "dryrun", "key", "dp1.k", "status",
                                    "ok", "tokens_per_s", 1000.0 + i, "predicted_tokens_per_s",
                                    900.0 + (i % 97), "peak_bytes", 1048576 * (1 + i % 50)));
  return runs;
}

AA_TEST(a_chart_of_more_than_its_limit_draws_densities_and_counts_every_run) {
  json_t *job = json_pack("{sisIs{ss}}", "id", 5, "best_run", (json_int_t)1, "model", "name", "m");
  json_t *runs = many_runs(AA_REPORT_POINTS_MAX + 2);
  char *html = stream(job, runs);
  if (!html) goto out;
  const char *why = check_tags(html);
  CHECK_MSG(!why, "%s", why);
  char *p = part(html, "pred-vs-measured", "svg");
  CHECK(count(p, "<circle class=\"run\"") == 0);
  CHECK(count(p, "<rect class=\"cell\"") > 10);
  CHECK_MSG(runs_in_titles(p) == AA_REPORT_POINTS_MAX + 2, "%zu runs in the squares", runs_in_titles(p));
  free(p);
  p = part(html, "throughput-memory", "svg"); /* the best is drawn apart */
  CHECK(count(p, "<circle class=\"run\"") == 0);
  CHECK(runs_in_titles(p) == AA_REPORT_POINTS_MAX + 1);
  CHECK(count(p, "<circle id=\"best-point\"") == 1);
  free(p);
  char words[96];
  snprintf(words, sizeof words, "These %d runs are too many to draw one by one", AA_REPORT_POINTS_MAX + 2);
  CHECK(count(html, words) == 2);
  free(html);
  json_decref(runs);
  /* At the limit every point is drawn, with its key. */
  runs = many_runs(AA_REPORT_POINTS_MAX);
  html = stream(job, runs);
  if (!html) goto out;
  p = part(html, "pred-vs-measured", "svg");
  CHECK(count(p, "<circle class=\"run\"") == AA_REPORT_POINTS_MAX && !strstr(p, "class=\"cell\""));
  CHECK(!strstr(html, "too many to draw"));
  free(p);
out:
  free(html);
  json_decref(job);
  json_decref(runs);
}

AA_TEST(reasons_past_the_table_limit_share_one_row_and_odd_entries_count_as_other) {
  json_t *job = json_pack("{si}", "id", 6), *runs = json_array();
  char why[32];
  for (int i = 0; i < 70; i++) {
    snprintf(why, sizeof why, "reason %d", i);
    json_array_append_new(runs, json_pack("{ssssss}", "key", "k", "status", "pruned", "error", why));
  }
  json_array_append_new(runs, json_string("not a run"));
  char *html = stream(job, runs);
  if (html) {
    char *p = part(html, "pruned", "table");
    CHECK(count(p, "<tr>") == 1 + 64 + 1);
    CHECK(strstr(p, "<td>other reasons (the table lists the first 64)</td><td class=\"num\">6</td>"));
    free(p);
    CHECK(strstr(html, "<td id=\"counts\">71: 70 pruned, 1 other</td>"));
  }
  free(html);
  json_decref(job);
  json_decref(runs);
}

int main(void) {
  RUN(page_is_well_formed);
  RUN(page_holds_the_header_and_the_four_parts);
  RUN(every_string_is_escaped_and_nothing_is_fetched);
  RUN(a_job_without_figures_says_so_in_words);
  RUN(input_of_the_wrong_shape_is_refused);
  RUN(a_chart_of_more_than_its_limit_draws_densities_and_counts_every_run);
  RUN(reasons_past_the_table_limit_share_one_row_and_odd_entries_count_as_other);
  return aa_test_summary();
}
