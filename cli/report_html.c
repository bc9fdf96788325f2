/* The HTML report of one job: see report_html.h for what it holds. Runs are
 * taken one at a time and only what the page shows of them is kept: counts
 * by status, each chart's points as pairs of doubles (with their keys for
 * the first AA_REPORT_POINTS_MAX only), the prune reasons with their counts
 * and three examples each, and the best run. The page is written straight
 * to a stream once every run is in: its header counts them all and its
 * axes span them all. */
#include "report_html.h"
#include "svg.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/aa.h"
#include "common/axis.h"

/* Pruned runs are grouped by the class of their reason; classes past this
 * many (the planner has a handful) are counted together in a last row. */
#define REASONS_MAX 64
#define EXAMPLES 3 /* example keys shown per reason */

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

/* A run id under k: a number in 0..2^53 (larger ones are not ids, and
 * would not convert exactly), or false. */
static bool jid(const json_t *o, const char *k, long long *id) {
  double v;
  if (!jnum(o, k, &v) || !(v >= 0 && v <= 9007199254740992.0)) return false;
  *id = (long long)v;
  return true;
}

static bool is_dryrun(const json_t *r) {
  return json_is_object(r) && !strcmp(jstr(r, "kind", "dryrun"), "dryrun");
}

/* --- what the page keeps of the runs -------------------------------------- */

typedef struct point {
  double x, y;
} point_t;

/* One chart's points. Keys are kept while the chart can still draw each
 * point with its key in a title; past AA_REPORT_POINTS_MAX it draws
 * densities instead, and they are freed. */
typedef struct series {
  point_t *v;
  char **keys; /* the first AA_REPORT_POINTS_MAX points' keys, owned; NULL past them */
  size_t n, cap;
  double xmax, ymax;
} series_t;

typedef struct reason {
  char *text; /* the class (aa_report_reason_class), owned */
  size_t count;
  char *examples[EXAMPLES]; /* the first keys of the class, owned */
} reason_t;

static const char *const statuses[] = {"ok",     "oom",       "error",  "timeout", "crashed",
                                       "pruned", "cancelled", "queued", "running"};
#define NSTATUSES (sizeof statuses / sizeof statuses[0])

struct aa_report {
  json_t *job, *best; /* copies of the JOB object and of the `query run` answer (NULL: none) */
  long long best_id;  /* the run to mark, -1 = none */
  json_t *best_run;   /* the best run as it came among the runs (a copy), NULL until then */
  size_t runs, counts[NSTATUSES], other;
  series_t pred; /* (predicted, measured) tokens/s of the dry runs with both */
  size_t unpredicted;
  series_t mem;    /* (peak MiB, tokens/s) of the ok dry runs but the best */
  bool best_point; /* the best run is an ok dry run with figures, drawn apart */
  double best_x, best_y;
  char *best_key;
  reason_t reasons[REASONS_MAX];
  size_t nreasons, unlisted; /* classes kept, and pruned runs of classes past them */
};

static void series_free(series_t *s) {
  if (s->keys)
    for (size_t i = 0; i < s->n && i < AA_REPORT_POINTS_MAX; i++)
      free(s->keys[i]);
  free(s->keys);
  free(s->v);
}

static int series_add(series_t *s, double x, double y, const char *key) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    point_t *v = cap <= SIZE_MAX / sizeof *v ? realloc(s->v, cap * sizeof *v) : NULL;
    if (!v) return aa_error(AA_ENOMEM, "report: out of memory for %zu points", cap);
    s->v = v;
    s->cap = cap;
  }
  if (s->n < AA_REPORT_POINTS_MAX) {
    if (!s->keys && !(s->keys = calloc(AA_REPORT_POINTS_MAX, sizeof *s->keys)))
      return aa_error(AA_ENOMEM, "report: out of memory");
    if (!(s->keys[s->n] = strdup(key))) return aa_error(AA_ENOMEM, "report: out of memory");
  } else if (s->keys) {
    for (size_t i = 0; i < AA_REPORT_POINTS_MAX; i++)
      free(s->keys[i]);
    free(s->keys);
    s->keys = NULL;
  }
  s->v[s->n++] = (point_t){x, y};
  s->xmax = fmax(s->xmax, x);
  s->ymax = fmax(s->ymax, y);
  return 0;
}

/* Counts a pruned run under the class of its reason. */
static int add_pruned(aa_report_t *r, const json_t *run) {
  char cls[512];
  aa_report_reason_class(jstr(run, "error", "(no reason recorded)"), cls, sizeof cls);
  reason_t *g = NULL;
  for (size_t i = 0; i < r->nreasons && !g; i++)
    if (!strcmp(r->reasons[i].text, cls)) g = &r->reasons[i];
  if (!g) {
    if (r->nreasons == REASONS_MAX) {
      r->unlisted++;
      return 0;
    }
    g = &r->reasons[r->nreasons];
    if (!(g->text = strdup(cls))) return aa_error(AA_ENOMEM, "report: out of memory");
    r->nreasons++;
  }
  if (g->count < EXAMPLES && !(g->examples[g->count] = strdup(jstr(run, "key", "?"))))
    return aa_error(AA_ENOMEM, "report: out of memory");
  g->count++;
  return 0;
}

int aa_report_new(aa_report_t **out, const json_t *job, const json_t *best) {
  if (!json_is_object(job)) return aa_error(AA_EINVAL, "report: the job is not a JSON object");
  aa_report_t *r = calloc(1, sizeof *r);
  if (!r || !(r->job = json_deep_copy(job)) || (json_is_object(best) && !(r->best = json_deep_copy(best)))) {
    aa_report_free(r);
    return aa_error(AA_ENOMEM, "report: out of memory");
  }
  /* The run to mark: the job's best_run, else the `query run` answer's. */
  if (!jid(job, "best_run", &r->best_id) && !jid(json_object_get(best, "run"), "id", &r->best_id))
    r->best_id = -1;
  *out = r;
  return 0;
}

int aa_report_add_run(aa_report_t *r, const json_t *run) {
  const char *status = jstr(run, "status", "");
  size_t k = 0;
  while (k < NSTATUSES && strcmp(status, statuses[k]))
    k++;
  r->runs++;
  if (k < NSTATUSES)
    r->counts[k]++;
  else
    r->other++;
  long long id;
  double p, m, t, bytes;
  bool best = r->best_id >= 0 && jid(run, "id", &id) && id == r->best_id;
  if (best) {
    json_decref(r->best_run);
    if (!(r->best_run = json_deep_copy(run))) return aa_error(AA_ENOMEM, "report: out of memory");
  }
  int rc = 0;
  const char *key = jstr(run, "key", "?");
  if (is_dryrun(run) && jnum(run, "tokens_per_s", &m)) {
    if (!jnum(run, "predicted_tokens_per_s", &p))
      r->unpredicted++;
    else if ((rc = series_add(&r->pred, p, m, key)))
      return rc;
  }
  if (is_dryrun(run) && !strcmp(status, "ok") && jnum(run, "tokens_per_s", &t) &&
      jnum(run, "peak_bytes", &bytes)) {
    double mib = bytes / (1024.0 * 1024.0);
    if (best) { /* drawn last, over the others */
      free(r->best_key);
      if (!(r->best_key = strdup(key))) return aa_error(AA_ENOMEM, "report: out of memory");
      r->best_point = true;
      r->best_x = mib;
      r->best_y = t;
      r->mem.xmax = fmax(r->mem.xmax, mib);
      r->mem.ymax = fmax(r->mem.ymax, t);
    } else if ((rc = series_add(&r->mem, mib, t, key))) {
      return rc;
    }
  }
  if (!strcmp(status, "pruned")) rc = add_pruned(r, run);
  return rc;
}

size_t aa_report_runs(const aa_report_t *r) { return r->runs; }

void aa_report_free(aa_report_t *r) {
  if (!r) return;
  json_decref(r->job);
  json_decref(r->best);
  json_decref(r->best_run);
  series_free(&r->pred);
  series_free(&r->mem);
  free(r->best_key);
  for (size_t i = 0; i < r->nreasons; i++) {
    free(r->reasons[i].text);
    for (size_t k = 0; k < EXAMPLES; k++)
      free(r->reasons[i].examples[k]);
  }
  free(r);
}

/* --- writing ------------------------------------------------------------ */

/* The page's SVG helpers and chart geometry (cli/svg.h), by the short
 * names this file was written with. */
#define esc aa_svg_esc
#define tick_step aa_svg_tick_step
#define axis_max aa_svg_axis_max
#define sx aa_svg_x
#define sy aa_svg_y
#define svg_open aa_svg_open
#define svg_axes aa_svg_axes
#define cell_of aa_svg_cell
#define W AA_SVG_W
#define H AA_SVG_H
#define ML AA_SVG_ML
#define MT AA_SVG_MT
#define PW AA_SVG_PW
#define PH AA_SVG_PH
#define CELL AA_SVG_CELL
#define COLS AA_SVG_COLS
#define ROWS AA_SVG_ROWS

/* The sentence a chart of n points adds to its text when it draws them as
 * densities. */
static void density_words(FILE *f, bool density, size_t n) {
  if (density)
    fprintf(f,
            " These %zu runs are too many to draw one by one (the page draws up to %d): each square gathers "
            "the runs that fall in it, darker for more, and its title says how many.",
            n, AA_REPORT_POINTS_MAX);
}

/* A chart's points as squares of CELL x CELL user units, each as opaque
 * as the log of the runs in it, with a title that gives its count and its
 * ranges (of the memory chart when `memory`, else of the predicted one).
 * The file grows with the squares that hold runs (at most COLS x ROWS),
 * not with the runs. Returns 0 or AA_ENOMEM. */
static int draw_density(FILE *f, const series_t *s, double xmax, double ymax, bool memory) {
  size_t *count = calloc((size_t)COLS * ROWS, sizeof *count), most = 0;
  if (!count) return aa_error(AA_ENOMEM, "report: out of memory");
  for (size_t i = 0; i < s->n; i++) {
    size_t c = cell_of(s->v[i].x, xmax, PW, COLS), r = cell_of(s->v[i].y, ymax, PH, ROWS);
    size_t n = ++count[r * COLS + c];
    if (n > most) most = n;
  }
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) {
      size_t n = count[(size_t)r * COLS + (size_t)c];
      if (!n) continue;
      int w = PW - c * CELL < CELL ? PW - c * CELL : CELL, h = PH - r * CELL < CELL ? PH - r * CELL : CELL;
      double opacity = 0.15 + 0.85 * log1p((double)n) / log1p((double)most);
      fprintf(f,
              "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#1f77b4\" "
              "fill-opacity=\"%.2f\"><title>",
              ML + c * CELL, MT + PH - r * CELL - h, w, h, opacity);
      double x0 = (double)(c * CELL) / PW * xmax, x1 = (double)(c * CELL + w) / PW * xmax;
      double y0 = (double)(r * CELL) / PH * ymax, y1 = (double)(r * CELL + h) / PH * ymax;
      if (memory)
        fprintf(f, "%zu run%s: %.1f to %.1f MiB, %.0f to %.0f tokens/s", n, n == 1 ? "" : "s", x0, x1, y0,
                y1);
      else
        fprintf(f, "%zu run%s: predicted %.0f to %.0f, measured %.0f to %.0f tokens/s", n, n == 1 ? "" : "s",
                x0, x1, y0, y1);
      fprintf(f, "</title></rect>\n");
    }
  free(count);
  return 0;
}

/* 1. Predicted against measured tokens/s: one point per dry run with both. */
static int chart_predicted(FILE *f, const aa_report_t *r) {
  const series_t *s = &r->pred;
  fprintf(
      f, "<h2>Predicted against measured tokens/s</h2>\n<p>A scatter: one point per measured dry run, the "
         "cost model's prediction across, the measurement up. Points on the dashed y = x line were predicted "
         "exactly; above it the run was faster than predicted.");
  if (r->unpredicted)
    fprintf(f, " %zu measured dry run%s had no prediction and %s not drawn.", r->unpredicted,
            r->unpredicted == 1 ? "" : "s", r->unpredicted == 1 ? "is" : "are");
  density_words(f, s->n > AA_REPORT_POINTS_MAX, s->n);
  fprintf(f, "</p>\n");
  if (!s->n) {
    fprintf(f, "<p class=\"none\" id=\"pred-vs-measured\">No dry run of this job has both a prediction and a "
               "measurement.</p>\n");
    return 0;
  }
  double max = axis_max(fmax(s->xmax, s->ymax)); /* one scale: the y = x line is the diagonal */
  svg_open(f, "pred-vs-measured", "Predicted against measured tokens/s, with the y = x line");
  svg_axes(f, max, "predicted tokens/s", max, "measured tokens/s");
  fprintf(
      f,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\" stroke-dasharray=\"6 4\"/>\n",
      sx(0, max), sy(0, max), sx(max, max), sy(max, max));
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#666666\">y = x</text>\n",
          sx(max, max) - 4, sy(max, max) + 14);
  int rc = 0;
  if (s->keys) {
    for (size_t i = 0; i < s->n; i++) {
      fprintf(f,
              "<circle class=\"run\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\" "
              "fill-opacity=\"0.8\"><title>",
              sx(s->v[i].x, max), sy(s->v[i].y, max));
      esc(f, s->keys[i]);
      fprintf(f, ": predicted %.0f, measured %.0f tokens/s</title></circle>\n", s->v[i].x, s->v[i].y);
    }
  } else {
    rc = draw_density(f, s, max, max, false);
  }
  fprintf(f, "</svg>\n");
  return rc;
}

/* 2. Tokens/s against peak memory of every ok dry run, the best one marked. */
static int chart_memory(FILE *f, const aa_report_t *r) {
  const series_t *s = &r->mem;
  size_t n = s->n + r->best_point;
  fprintf(f, "<h2>Throughput against peak memory</h2>\n<p>One point per ok dry run: its peak memory (the "
             "run's peak_bytes) across, its tokens/s up. The job's chosen strategy is the larger red "
             "point, labelled with its key.");
  density_words(f, s->n > AA_REPORT_POINTS_MAX, n);
  fprintf(f, "</p>\n");
  if (!n) {
    fprintf(f, "<p class=\"none\" id=\"throughput-memory\">No ok dry run with a peak memory and a "
               "throughput.</p>\n");
    return 0;
  }
  double xmax = axis_max(s->xmax), ymax = axis_max(s->ymax);
  svg_open(f, "throughput-memory", "Throughput against peak memory, the chosen strategy marked");
  svg_axes(f, xmax, "peak memory (MiB)", ymax, "tokens/s");
  int rc = 0;
  if (s->keys || !s->n) {
    for (size_t i = 0; i < s->n; i++) {
      fprintf(f,
              "<circle class=\"run\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\" "
              "fill-opacity=\"0.7\"><title>",
              sx(s->v[i].x, xmax), sy(s->v[i].y, ymax));
      esc(f, s->keys[i]);
      fprintf(f, ": %.1f MiB, %.0f tokens/s</title></circle>\n", s->v[i].x, s->v[i].y);
    }
  } else {
    rc = draw_density(f, s, xmax, ymax, true);
  }
  if (r->best_point) {
    double x = sx(r->best_x, xmax), y = sy(r->best_y, ymax);
    fprintf(f,
            "<circle id=\"best-point\" cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"#d62728\" stroke=\"#000000\">"
            "<title>best: ",
            x, y);
    esc(f, r->best_key);
    fprintf(f, ": %.1f MiB, %.0f tokens/s</title></circle>\n", r->best_x, r->best_y);
    /* The label goes to the side with room, below the point near the top. */
    bool left = x > ML + PW / 2;
    fprintf(f,
            "<text id=\"best-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-weight=\"bold\" "
            "fill=\"#d62728\">best: ",
            left ? x - 12 : x + 12, y < MT + 20 ? y + 18 : y - 10, left ? "end" : "start");
    esc(f, r->best_key);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
  return rc;
}

static const struct {
  const char *key, *color;
} phases[] = {{"forward", "#1f77b4"},       {"backward", "#ff7f0e"}, {"optimizer", "#2ca02c"},
              {"pipeline_comm", "#9467bd"}, {"bubble", "#7f7f7f"},   {"all_to_all", "#d62728"}};
#define NPHASES (sizeof phases / sizeof phases[0])

/* 3. The best run's time breakdown: one stacked bar per rank. */
static void chart_ranks(FILE *f, const json_t *best) {
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
  fprintf(f,
          "<h2>Per-rank time breakdown of the best run</h2>\n<p>The mean timed step of each rank of the best "
          "run, in milliseconds, split into forward, backward, optimizer, pipeline communication, "
          "pipeline bubble and the expert all-to-alls; one stacked bar per rank.</p>\n");
  if (!n) {
    fprintf(f, "<p class=\"none\" id=\"rank-breakdown\">No per-rank figures: %s.</p>\n",
            best ? "the best run's ranks timed no step, or the store predates them"
                 : "the job has no best run");
    return;
  }
  max = axis_max(max);
  double row = (double)PH / (double)n, bar = fmin(row * 0.6, 40);
  svg_open(f, "rank-breakdown", "Per-rank time breakdown of the best run (ms)");
  svg_axes(f, max, "milliseconds per step", 0, NULL);
  size_t row_i = 0;
  json_array_foreach(ranks, i, rk) {
    json_t *tm = json_object_get(rk, "times_ms");
    if (!json_is_object(tm)) continue;
    double y = MT + row * (double)row_i + (row - bar) / 2, x = ML, r = 0, coord[AA_AXES];
    jnum(rk, "rank", &r);
    /* "(dp 1, tp 0, pp 0, cp 0)": the rank's coordinates, one per axis
     * (common/axis.h); one the answer leaves out is 0, as on the wire. */
    char coords[24 * AA_AXES + 4] = "";
    size_t co = 0;
    bool any = false;
    for (int a = 0; a < AA_AXES; a++) {
      char name[32];
      snprintf(name, sizeof name, "%s_rank", aa_axis_info((aa_axis_t)a)->key);
      if (jnum(rk, name, &coord[a]))
        any = true;
      else
        coord[a] = 0;
    }
    for (int a = 0; any && a < AA_AXES && co < sizeof coords; a++)
      co += (size_t)snprintf(coords + co, sizeof coords - co, "%s%s %.0f%s", a ? ", " : " (",
                             aa_axis_info((aa_axis_t)a)->key, coord[a], a + 1 == AA_AXES ? ")" : "");
    fprintf(f, "<g class=\"rank\"><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">rank %.0f</text>\n", ML - 6,
            y + bar / 2 + 4, r);
    for (size_t k = 0; k < NPHASES; k++) {
      if (!jnum(tm, phases[k].key, &v) || !(v > 0)) continue;
      double w = v / max * PW;
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>rank %.0f", x,
              y, w, bar, phases[k].color, r);
      fputs(coords, f);
      fprintf(f, ": %s %.2f ms</title></rect>\n", phases[k].key, v);
      x += w;
    }
    fprintf(f, "</g>\n");
    row_i++;
  }
  fprintf(f, "</svg>\n<p class=\"legend\">");
  for (size_t k = 0; k < NPHASES; k++)
    fprintf(f, "<svg width=\"12\" height=\"12\"><rect width=\"12\" height=\"12\" fill=\"%s\"/></svg> %s%s",
            phases[k].color, phases[k].key, k + 1 < NPHASES ? " &#160; " : "");
  fprintf(f, "</p>\n");
}

void aa_report_reason_class(const char *reason, char *out, size_t n) {
  if (strstr(reason, "predicted out of memory")) {
    snprintf(out, n, "predicted out of memory: a rank needs more than the device has");
  } else if (strstr(reason, "does at least the work of")) {
    snprintf(out, n,
             "does at least the work of one measured or skipped (more recompute, a higher ZeRO stage, or "
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
static void table_pruned(FILE *f, const aa_report_t *r) {
  fprintf(f, "<h2>Pruned candidates by reason</h2>\n");
  if (!r->nreasons) {
    fprintf(f, "<p class=\"none\" id=\"pruned\">No candidate was pruned.</p>\n");
    return;
  }
  fprintf(f, "<table id=\"pruned\">\n<thead><tr><th>reason</th><th>count</th><th>examples</th></tr></thead>\n"
             "<tbody>\n");
  for (size_t i = 0; i < r->nreasons; i++) {
    const reason_t *g = &r->reasons[i];
    fprintf(f, "<tr><td>");
    esc(f, g->text);
    fprintf(f, "</td><td class=\"num\">%zu</td><td>", g->count);
    for (size_t k = 0; k < EXAMPLES && k < g->count; k++) {
      fprintf(f, "%s<code>", k ? ", " : "");
      esc(f, g->examples[k]);
      fprintf(f, "</code>");
    }
    if (g->count > EXAMPLES) fprintf(f, ", &#8230;");
    fprintf(f, "</td></tr>\n");
  }
  if (r->unlisted)
    fprintf(
        f,
        "<tr><td>other reasons (the table lists the first %d)</td><td class=\"num\">%zu</td><td></td></tr>\n",
        REASONS_MAX, r->unlisted);
  fprintf(f, "</tbody>\n</table>\n");
}

/* --- the document --------------------------------------------------------- */

static void header(FILE *f, const aa_report_t *r) {
  const json_t *job = r->job, *model = json_object_get(job, "model");
  const json_t *best_run = r->best_run ? r->best_run : json_object_get(r->best, "run");
  if (!json_is_object(best_run)) best_run = NULL;
  double id = 0, t;
  jnum(job, "id", &id);
  fprintf(f, "<h1>autoaccel: job %.0f, ", id);
  esc(f, jstr(model, "name", "?"));
  fprintf(f, "</h1>\n<table id=\"summary\">\n<tbody>\n<tr><th>model</th><td>");
  esc(f, jstr(model, "name", "?"));
  fprintf(f, " (<code>");
  esc(f, jstr(model, "hash", "?"));
  fprintf(f, "</code>)</td></tr>\n<tr><th>job</th><td>%.0f, ", id);
  esc(f, jstr(job, "status", "?"));
  fprintf(f, "</td></tr>\n<tr><th>hardware</th><td>");
  esc(f, jstr(job, "hardware", "not yet known"));
  fprintf(f, "</td></tr>\n<tr><th>best strategy</th><td id=\"best\">");
  if (best_run) {
    fprintf(f, "<code>");
    esc(f, jstr(best_run, "key", "?"));
    fprintf(f, "</code>");
    if (jnum(best_run, "tokens_per_s", &t)) fprintf(f, ", %.0f tokens/s", t);
  } else {
    fprintf(f, "none");
  }
  if (jstr(job, "note", NULL)) { /* the search's verdict on its pick */
    fprintf(f, "</td></tr>\n<tr><th>how sure</th><td id=\"note\">");
    esc(f, jstr(job, "note", ""));
  }
  fprintf(f, "</td></tr>\n<tr><th>runs</th><td id=\"counts\">%zu", r->runs);
  const char *sep = ": ";
  for (size_t k = 0; k < NSTATUSES; k++) {
    if (!r->counts[k]) continue;
    fprintf(f, "%s%zu %s", sep, r->counts[k], statuses[k]);
    sep = ", ";
  }
  if (r->other) fprintf(f, "%s%zu other", sep, r->other);
  fprintf(f, "</td></tr>\n</tbody>\n</table>\n");
}

int aa_report_write(const aa_report_t *r, FILE *f) {
  double id = 0;
  jnum(r->job, "id", &id);
  fprintf(
      f,
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>autoaccel report: job "
      "%.0f</title>\n",
      id);
  /* Inline style only: system fonts, nothing fetched. */
  fprintf(f,
          "<style>body{font-family:sans-serif;margin:2em;max-width:60em;color:#222}"
          "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}"
          "td.num{text-align:right}svg{display:block}p.legend svg{display:inline}p.none{color:#666}</style>\n"
          "</head>\n<body>\n");
  header(f, r);
  int rc = chart_predicted(f, r);
  if (!rc) rc = chart_memory(f, r);
  if (rc) return rc;
  chart_ranks(f, r->best);
  table_pruned(f, r);
  fprintf(f, "</body>\n</html>\n");
  if (fflush(f) || ferror(f)) return aa_error(AA_EIO, "report: cannot write the page");
  return 0;
}

int aa_report_html(char **out, const json_t *job, const json_t *runs, const json_t *best) {
  if (!json_is_object(job)) return aa_error(AA_EINVAL, "report: the job is not a JSON object");
  if (!json_is_array(runs)) return aa_error(AA_EINVAL, "report: the runs are not a JSON array");
  aa_report_t *r = NULL;
  int rc = aa_report_new(&r, job, best);
  size_t i;
  json_t *run;
  json_array_foreach(runs, i, run) {
    if (rc) break;
    rc = aa_report_add_run(r, run);
  }
  char *text = NULL;
  size_t n = 0;
  FILE *f = NULL;
  if (!rc && !(f = open_memstream(&text, &n))) rc = aa_error(AA_ENOMEM, "report: out of memory");
  if (!rc) rc = aa_report_write(r, f);
  if (f && fclose(f) && !rc) rc = aa_error(AA_ENOMEM, "report: out of memory");
  aa_report_free(r);
  if (rc) {
    free(text);
    return rc;
  }
  *out = text;
  return 0;
}
