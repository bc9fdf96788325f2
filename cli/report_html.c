/* The HTML report of one job: see report_html.h for what it holds. */
#include "report_html.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/aa.h"

/* --- a growing string; the first failed allocation sticks ---------------- */

typedef struct sb {
  char *p;
  size_t n, cap;
  bool oom;
} sb_t;

static void sb_grow(sb_t *b, size_t more) {
  if (b->oom || b->n + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->n + more + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void sb_put(sb_t *b, const char *s, size_t n) {
  sb_grow(b, n);
  if (b->oom) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sb_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  sb_grow(b, (size_t)n);
  if (b->oom) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)n;
}

/* Text from the input, escaped for element content and attribute values. */
static void sb_esc(sb_t *b, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': sb_put(b, "&amp;", 5); break;
    case '<': sb_put(b, "&lt;", 4); break;
    case '>': sb_put(b, "&gt;", 4); break;
    case '"': sb_put(b, "&quot;", 6); break;
    case '\'': sb_put(b, "&#39;", 5); break;
    default: sb_put(b, s, 1);
    }
  }
}

/* --- reading the planner's JSON ------------------------------------------ */

static const char *jstr(const json_t *o, const char *k, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : dflt;
}

/* A finite number under k, or false. */
static bool jnum(const json_t *o, const char *k, double *v) {
  json_t *x = json_object_get(o, k);
  if (!json_is_number(x) || !isfinite(json_number_value(x))) return false;
  *v = json_number_value(x);
  return true;
}

static bool is_dryrun(const json_t *r) {
  return json_is_object(r) && !strcmp(jstr(r, "kind", "dryrun"), "dryrun");
}

/* --- charts --------------------------------------------------------------- */

/* Every chart is W x H user units with the plot inside the margins. */
enum { W = 720, H = 420, ML = 80, MR = 30, MT = 20, MB = 56 };
#define PW (W - ML - MR)
#define PH (H - MT - MB)

/* A round tick step giving about 5 ticks up to max (> 0). */
static double tick_step(double max) {
  double raw = max / 5, p = pow(10, floor(log10(raw))), f = raw / p;
  return p * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

/* The axis top: a little over max (so no point sits on the frame), rounded
 * up to a whole tick; 1 when nothing is positive. */
static double axis_max(double max) {
  if (!(max > 0)) return 1;
  max *= 1.04;
  double s = tick_step(max);
  return ceil(max / s) * s;
}

static double sx(double v, double max) { return ML + v / max * PW; }
static double sy(double v, double max) { return MT + PH - v / max * PH; }

static void svg_open(sb_t *b, const char *id, const char *title) {
  sb_printf(b, "<svg id=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" ", id, W, H, W, H);
  sb_printf(b, "role=\"img\" font-family=\"sans-serif\" font-size=\"12\"><title>%s</title>\n", title);
  sb_printf(b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
}

/* Axes with ticks and grid lines; ymax = 0 draws no y ticks (the rank chart
 * labels its rows itself). */
static void svg_axes(sb_t *b, double xmax, const char *xlabel, double ymax, const char *ylabel) {
  double st = tick_step(xmax);
  for (double v = 0; v <= xmax * (1 + 1e-9); v += st) {
    double x = sx(v, xmax);
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>\n", x, MT, x,
              MT + PH);
    sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, MT + PH + 16, v);
  }
  if (ymax > 0) {
    st = tick_step(ymax);
    for (double v = 0; v <= ymax * (1 + 1e-9); v += st) {
      double y = sy(v, ymax);
      sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", ML, y, ML + PW,
                y);
      sb_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4, v);
    }
  }
  sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", ML, MT + PH, ML + PW,
            MT + PH);
  sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", ML, MT, ML, MT + PH);
  sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", ML + PW / 2, H - 12, xlabel);
  if (ylabel)
    sb_printf(b, "<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
              MT + PH / 2, ylabel);
}

/* 1. Predicted against measured tokens/s: one point per dry run with both. */
static void chart_predicted(sb_t *b, const json_t *runs) {
  double max = 0, p, m;
  size_t i, n = 0, unpredicted = 0;
  json_t *r;
  json_array_foreach(runs, i, r) {
    if (!is_dryrun(r) || !jnum(r, "tokens_per_s", &m)) continue;
    if (!jnum(r, "predicted_tokens_per_s", &p)) {
      unpredicted++;
      continue;
    }
    n++;
    max = fmax(max, fmax(p, m));
  }
  sb_printf(
      b, "<h2>Predicted against measured tokens/s</h2>\n<p>A scatter: one point per measured dry run, the "
         "cost model's prediction across, the measurement up. Points on the dashed y = x line were predicted "
         "exactly; above it the run was faster than predicted.");
  if (unpredicted)
    sb_printf(b, " %zu measured dry run%s had no prediction and %s not drawn.", unpredicted,
              unpredicted == 1 ? "" : "s", unpredicted == 1 ? "is" : "are");
  sb_printf(b, "</p>\n");
  if (!n) {
    sb_printf(b,
              "<p class=\"none\" id=\"pred-vs-measured\">No dry run of this job has both a prediction and a "
              "measurement.</p>\n");
    return;
  }
  max = axis_max(max);
  svg_open(b, "pred-vs-measured", "Predicted against measured tokens/s, with the y = x line");
  svg_axes(b, max, "predicted tokens/s", max, "measured tokens/s");
  sb_printf(
      b,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\" stroke-dasharray=\"6 4\"/>\n",
      sx(0, max), sy(0, max), sx(max, max), sy(max, max));
  sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#666666\">y = x</text>\n",
            sx(max, max) - 4, sy(max, max) + 14);
  json_array_foreach(runs, i, r) {
    if (!is_dryrun(r) || !jnum(r, "tokens_per_s", &m) || !jnum(r, "predicted_tokens_per_s", &p)) continue;
    sb_printf(
        b,
        "<circle class=\"run\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\" fill-opacity=\"0.8\"><title>",
        sx(p, max), sy(m, max));
    sb_esc(b, jstr(r, "key", "?"));
    sb_printf(b, ": predicted %.0f, measured %.0f tokens/s</title></circle>\n", p, m);
  }
  sb_printf(b, "</svg>\n");
}

/* 2. Tokens/s against peak memory of every ok dry run, the best one marked. */
static void chart_memory(sb_t *b, const json_t *runs, long long best_id) {
  const double mib = 1024.0 * 1024.0;
  double xmax = 0, ymax = 0, t, m, id;
  size_t i, n = 0;
  json_t *r;
  json_array_foreach(runs, i, r) {
    if (!is_dryrun(r) || strcmp(jstr(r, "status", ""), "ok") || !jnum(r, "tokens_per_s", &t) ||
        !jnum(r, "peak_bytes", &m))
      continue;
    n++;
    xmax = fmax(xmax, m / mib);
    ymax = fmax(ymax, t);
  }
  sb_printf(b, "<h2>Throughput against peak memory</h2>\n<p>One point per ok dry run: its peak memory (the "
               "run's peak_bytes) across, its tokens/s up. The job's chosen strategy is the larger red "
               "point, labelled "
               "with its key.</p>\n");
  if (!n) {
    sb_printf(b, "<p class=\"none\" id=\"throughput-memory\">No ok dry run with a peak memory and a "
                 "throughput.</p>\n");
    return;
  }
  xmax = axis_max(xmax);
  ymax = axis_max(ymax);
  svg_open(b, "throughput-memory", "Throughput against peak memory, the chosen strategy marked");
  svg_axes(b, xmax, "peak memory (MiB)", ymax, "tokens/s");
  const json_t *best = NULL;
  json_array_foreach(runs, i, r) {
    if (!is_dryrun(r) || strcmp(jstr(r, "status", ""), "ok") || !jnum(r, "tokens_per_s", &t) ||
        !jnum(r, "peak_bytes", &m))
      continue;
    if (jnum(r, "id", &id) && (long long)id == best_id) {
      best = r; /* drawn last, over the others */
      continue;
    }
    sb_printf(
        b,
        "<circle class=\"run\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\" fill-opacity=\"0.7\"><title>",
        sx(m / mib, xmax), sy(t, ymax));
    sb_esc(b, jstr(r, "key", "?"));
    sb_printf(b, ": %.1f MiB, %.0f tokens/s</title></circle>\n", m / mib, t);
  }
  if (best) {
    jnum(best, "tokens_per_s", &t);
    jnum(best, "peak_bytes", &m);
    double x = sx(m / mib, xmax), y = sy(t, ymax);
    sb_printf(b,
              "<circle id=\"best-point\" cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"#d62728\" stroke=\"#000000\">"
              "<title>best: ",
              x, y);
    sb_esc(b, jstr(best, "key", "?"));
    sb_printf(b, ": %.1f MiB, %.0f tokens/s</title></circle>\n", m / mib, t);
    /* The label goes to the side with room, below the point near the top. */
    bool left = x > ML + PW / 2;
    sb_printf(b,
              "<text id=\"best-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-weight=\"bold\" "
              "fill=\"#d62728\">best: ",
              left ? x - 12 : x + 12, y < MT + 20 ? y + 18 : y - 10, left ? "end" : "start");
    sb_esc(b, jstr(best, "key", "?"));
    sb_printf(b, "</text>\n");
  }
  sb_printf(b, "</svg>\n");
}

static const struct {
  const char *key, *color;
} phases[] = {{"forward", "#1f77b4"},
              {"backward", "#ff7f0e"},
              {"optimizer", "#2ca02c"},
              {"pipeline_comm", "#9467bd"},
              {"bubble", "#7f7f7f"}};
#define NPHASES (sizeof phases / sizeof phases[0])

/* 3. The best run's time breakdown: one stacked bar per rank. */
static void chart_ranks(sb_t *b, const json_t *best) {
  const json_t *ranks = json_object_get(best, "ranks");
  size_t i, n = 0;
  json_t *rk;
  double max = 0, v;
  json_array_foreach(ranks, i, rk) {
    json_t *tm = json_object_get(rk, "times_ms");
    if (!json_is_object(tm)) continue;
    double sum = 0;
    for (size_t k = 0; k < NPHASES; k++)
      if (jnum(tm, phases[k].key, &v) && v > 0) sum += v;
    n++;
    max = fmax(max, sum);
  }
  sb_printf(
      b, "<h2>Per-rank time breakdown of the best run</h2>\n<p>The mean timed step of each rank of the best "
         "run, in milliseconds, split into forward, backward, optimizer, pipeline communication and "
         "pipeline bubble; one stacked bar per rank.</p>\n");
  if (!n) {
    sb_printf(b, "<p class=\"none\" id=\"rank-breakdown\">No per-rank figures: %s.</p>\n",
              best ? "the best run's ranks timed no step, or the store predates them"
                   : "the job has no best run");
    return;
  }
  max = axis_max(max);
  double row = (double)PH / (double)n, bar = fmin(row * 0.6, 40);
  svg_open(b, "rank-breakdown", "Per-rank time breakdown of the best run (ms)");
  svg_axes(b, max, "milliseconds per step", 0, NULL);
  size_t row_i = 0;
  json_array_foreach(ranks, i, rk) {
    json_t *tm = json_object_get(rk, "times_ms");
    if (!json_is_object(tm)) continue;
    double y = MT + row * (double)row_i + (row - bar) / 2, x = ML, r = 0, d = 0, t = 0, p = 0;
    jnum(rk, "rank", &r);
    bool coords = jnum(rk, "dp_rank", &d) && jnum(rk, "tp_rank", &t) && jnum(rk, "pp_rank", &p);
    sb_printf(b, "<g class=\"rank\"><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">rank %.0f</text>\n", ML - 6,
              y + bar / 2 + 4, r);
    for (size_t k = 0; k < NPHASES; k++) {
      if (!jnum(tm, phases[k].key, &v) || !(v > 0)) continue;
      double w = v / max * PW;
      sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>rank %.0f",
                x, y, w, bar, phases[k].color, r);
      if (coords) sb_printf(b, " (dp %.0f, tp %.0f, pp %.0f)", d, t, p);
      sb_printf(b, ": %s %.2f ms</title></rect>\n", phases[k].key, v);
      x += w;
    }
    sb_printf(b, "</g>\n");
    row_i++;
  }
  sb_printf(b, "</svg>\n<p class=\"legend\">");
  for (size_t k = 0; k < NPHASES; k++)
    sb_printf(b, "<svg width=\"12\" height=\"12\"><rect width=\"12\" height=\"12\" fill=\"%s\"/></svg> %s%s",
              phases[k].color, phases[k].key, k + 1 < NPHASES ? " &#160; " : "");
  sb_printf(b, "</p>\n");
}

void aa_report_reason_class(const char *reason, char *out, size_t n) {
  if (strstr(reason, "predicted out of memory")) {
    snprintf(out, n, "predicted out of memory: a rank needs more than the device has");
  } else if (strstr(reason, "does at least the work of")) {
    snprintf(out, n, "does at least the work of one measured or skipped (more recompute, a higher ZeRO stage, or "
                     "16-bit storage on a CPU)");
  } else if (!strncmp(reason, "skipped: micro_batch ", 21)) {
    snprintf(out, n, "a larger micro-batch of the same setting measured faster, beyond the runs' spread");
  } else if (strstr(reason, "below the best measured")) {
    snprintf(out, n, "the calibrated prediction, plus the error so far, stays below the best measured run");
  } else if (strstr(reason, "at the devices' peak")) {
    snprintf(out, n, "could not beat the best measured run even at the devices' peak");
  } else if (!strncmp(reason, "not measured: it needs ", 23) &&
             strstr(reason, "executors of the job's hardware")) {
    snprintf(out, n,
             "the connected hosts cannot place its gang (each tensor-parallel group inside one host; "
             "--cpu-backend shm gangs on one host)");
  } else {
    snprintf(out, n, "%s", !strncmp(reason, "not measured: ", 14) ? reason + 14 : reason);
  }
}

/* 4. Pruned runs grouped by the class of their reason, in order of first appearance. */
static void table_pruned(sb_t *b, const json_t *runs) {
  json_t *groups = json_object(), *order = json_array();
  size_t i;
  json_t *r;
  if (!groups || !order) {
    b->oom = true;
    goto cleanup;
  }
  json_array_foreach(runs, i, r) {
    if (!json_is_object(r) || strcmp(jstr(r, "status", ""), "pruned")) continue;
    char reason[512];
    aa_report_reason_class(jstr(r, "error", "(no reason recorded)"), reason, sizeof reason);
    json_t *keys = json_object_get(groups, reason);
    if (!keys) {
      keys = json_array();
      if (!keys || json_object_set_new(groups, reason, keys) ||
          json_array_append_new(order, json_string(reason))) {
        b->oom = true;
        goto cleanup;
      }
    }
    json_array_append_new(keys, json_string(jstr(r, "key", "?")));
  }
  sb_printf(b, "<h2>Pruned candidates by reason</h2>\n");
  if (!json_array_size(order)) {
    sb_printf(b, "<p class=\"none\" id=\"pruned\">No candidate was pruned.</p>\n");
    goto cleanup;
  }
  sb_printf(b,
            "<table id=\"pruned\">\n<thead><tr><th>reason</th><th>count</th><th>examples</th></tr></thead>\n"
            "<tbody>\n");
  json_t *reason;
  json_array_foreach(order, i, reason) {
    json_t *keys = json_object_get(groups, json_string_value(reason)), *k;
    size_t j;
    sb_printf(b, "<tr><td>");
    sb_esc(b, json_string_value(reason));
    sb_printf(b, "</td><td class=\"num\">%zu</td><td>", json_array_size(keys));
    json_array_foreach(keys, j, k) {
      if (j == 3) break;
      if (j) sb_printf(b, ", ");
      sb_printf(b, "<code>");
      sb_esc(b, json_string_value(k) ? json_string_value(k) : "?");
      sb_printf(b, "</code>");
    }
    if (json_array_size(keys) > 3) sb_printf(b, ", &#8230;");
    sb_printf(b, "</td></tr>\n");
  }
  sb_printf(b, "</tbody>\n</table>\n");
cleanup:
  json_decref(groups);
  json_decref(order);
}

/* --- the document --------------------------------------------------------- */

static void header(sb_t *b, const json_t *job, const json_t *runs, const json_t *best_run) {
  static const char *statuses[] = {"ok",     "oom",       "error",  "timeout", "crashed",
                                   "pruned", "cancelled", "queued", "running"};
  const json_t *model = json_object_get(job, "model");
  double id = 0, t;
  jnum(job, "id", &id);
  sb_printf(b, "<h1>autoaccel: job %.0f, ", id);
  sb_esc(b, jstr(model, "name", "?"));
  sb_printf(b, "</h1>\n<table id=\"summary\">\n<tbody>\n<tr><th>model</th><td>");
  sb_esc(b, jstr(model, "name", "?"));
  sb_printf(b, " (<code>");
  sb_esc(b, jstr(model, "hash", "?"));
  sb_printf(b, "</code>)</td></tr>\n<tr><th>job</th><td>%.0f, ", id);
  sb_esc(b, jstr(job, "status", "?"));
  sb_printf(b, "</td></tr>\n<tr><th>hardware</th><td>");
  sb_esc(b, jstr(job, "hardware", "not yet known"));
  sb_printf(b, "</td></tr>\n<tr><th>best strategy</th><td id=\"best\">");
  if (best_run) {
    sb_printf(b, "<code>");
    sb_esc(b, jstr(best_run, "key", "?"));
    sb_printf(b, "</code>");
    if (jnum(best_run, "tokens_per_s", &t)) sb_printf(b, ", %.0f tokens/s", t);
  } else {
    sb_printf(b, "none");
  }
  if (jstr(job, "note", NULL)) { /* the search's verdict on its pick */
    sb_printf(b, "</td></tr>\n<tr><th>how sure</th><td id=\"note\">");
    sb_esc(b, jstr(job, "note", ""));
  }
  sb_printf(b, "</td></tr>\n<tr><th>runs</th><td id=\"counts\">%zu", json_array_size(runs));
  size_t i, other = 0;
  json_t *r;
  json_array_foreach(runs, i, r) {
    bool known = false;
    for (size_t k = 0; k < sizeof statuses / sizeof statuses[0]; k++)
      known |= !strcmp(jstr(r, "status", ""), statuses[k]);
    other += !known;
  }
  const char *sep = ": ";
  for (size_t k = 0; k < sizeof statuses / sizeof statuses[0]; k++) {
    size_t n = 0;
    json_array_foreach(runs, i, r) n += !strcmp(jstr(r, "status", ""), statuses[k]);
    if (!n) continue;
    sb_printf(b, "%s%zu %s", sep, n, statuses[k]);
    sep = ", ";
  }
  if (other) sb_printf(b, "%s%zu other", sep, other);
  sb_printf(b, "</td></tr>\n</tbody>\n</table>\n");
}

int aa_report_html(char **out, const json_t *job, const json_t *runs, const json_t *best) {
  if (!json_is_object(job)) return aa_error(AA_EINVAL, "report: the job is not a JSON object");
  if (!json_is_array(runs)) return aa_error(AA_EINVAL, "report: the runs are not a JSON array");
  /* The run to mark: the job's best_run, found among the runs, else the
   * `query run` answer's own run. */
  double v;
  long long best_id = jnum(job, "best_run", &v) ? (long long)v : -1;
  const json_t *best_run = NULL, *r;
  size_t i;
  json_array_foreach(runs, i, r) if (best_id >= 0 && jnum(r, "id", &v) && (long long)v == best_id) best_run =
      r;
  if (!best_run && json_is_object(json_object_get(best, "run"))) best_run = json_object_get(best, "run");

  sb_t b = {0};
  double id = 0;
  jnum(job, "id", &id);
  sb_printf(
      &b,
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>autoaccel report: job "
      "%.0f</title>\n",
      id);
  /* Inline style only: system fonts, nothing fetched. */
  sb_printf(
      &b, "<style>body{font-family:sans-serif;margin:2em;max-width:60em;color:#222}"
          "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}"
          "td.num{text-align:right}svg{display:block}p.legend svg{display:inline}p.none{color:#666}</style>\n"
          "</head>\n<body>\n");
  header(&b, job, runs, best_run);
  chart_predicted(&b, runs);
  chart_memory(&b, runs, best_run && jnum(best_run, "id", &v) ? (long long)v : -1);
  chart_ranks(&b, best);
  table_pruned(&b, runs);
  sb_printf(&b, "</body>\n</html>\n");
  if (b.oom) {
    free(b.p);
    return aa_error(AA_ENOMEM, "report: out of memory");
  }
  *out = b.p;
  return 0;
}
