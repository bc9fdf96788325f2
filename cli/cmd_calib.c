/* `autoaccel calib export DEVICE >file.json` and `autoaccel calib import
 * FILE`: a calibration measured on one node of a cluster, carried to a
 * planner anywhere else (docs/service.md "Export and import"). The file
 * is strategies/calib_file.h's; import checks it here with the reader the
 * planner uses again before it stores anything. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "strategies/calib_file.h"

static void usage(FILE *f) {
  fprintf(
      f, "usage: autoaccel calib export DEVICE [--planner ADDR] [--token-file FILE] >FILE.json\n"
         "       autoaccel calib import FILE.json [--force] [--json] [--planner ADDR] [--token-file FILE]\n\n"
         "Moves a calibration between planners: one measured on one node of a cluster plans anywhere\n"
         "else. export writes every calibration the planner stored for DEVICE (the links between\n"
         "hosts too) to stdout as a calibration file; import checks a file, then has the planner\n"
         "store it, each calibration keeping the date it was measured.\n\n"
         "  DEVICE               a device fingerprint, as `autoaccel plan` shows it (such as\n"
         "                       'cuda:NVIDIA H100 80GB HBM3:81559MiB'), or cpu or cuda: the device\n"
         "                       whose calibration `plan --pool KIND:N` takes without --device\n"
         "                       (the most recently stored of that kind)\n\n"
         "options:\n"
         "  --force              import: replace stored calibrations measured after the file's\n"
         "                       (without it, such an import is refused and nothing is stored)\n"
         "  --json               import: print the planner's reply JSON verbatim\n"
         "  --planner ADDR       unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
         "  --token-file FILE    the planner's token (a mode 0600 file; on TCP the default is\n"
         "                       <state dir>/token, where a planner of that state dir keeps it)\n"
         "  -h, --help           this help\n\n"
         "Exit codes: 0 success, 1 failure (no planner, no calibration of DEVICE, a file the reader\n"
         "refuses, an import refused by the planner), 2 usage.\n");
}

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "autoaccel calib: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage(stderr);
  return AA_EXIT_USAGE;
}

static void fmt_time(long long t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  snprintf(out, 32, "?");
  if (gmtime_r(&tt, &tm)) strftime(out, 32, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static int do_export(const char *device, const char *planner, const char *token_file) {
  json_t *args = json_pack("{s:s}", "device", device);
  char *text = args ? json_dumps(args, JSON_COMPACT) : NULL, *reply = NULL;
  json_decref(args);
  if (!text) {
    aa_error(AA_ENOMEM, "no memory");
    return aa_cli_fail("calib export");
  }
  aa_client_t *cl;
  int rc = aa_client_connect(&cl, planner, token_file);
  if (!rc) {
    rc = aa_client_query(cl, "calib_export", text, &reply);
    aa_client_close(cl);
  }
  free(text);
  if (rc) return aa_cli_fail("calib export");
  json_t *root = NULL;
  int code = aa_client_reply_json("calib export", reply, false, &root);
  if (code >= 0) return code;
  const char *file = json_string_value(json_object_get(root, "file"));
  if (!file) {
    json_decref(root);
    fprintf(stderr, "autoaccel calib export: the planner's reply holds no file\n");
    return AA_EXIT_FAIL;
  }
  size_t n = strlen(file);
  if (fwrite(file, 1, n, stdout) != n || fflush(stdout)) {
    json_decref(root);
    fprintf(stderr, "autoaccel calib export: cannot write the file to stdout\n");
    return AA_EXIT_FAIL;
  }
  size_t i;
  json_t *r;
  fprintf(stderr, "autoaccel calib export: %s:", json_string_value(json_object_get(root, "device")));
  json_array_foreach(json_object_get(root, "calibrations"), i, r) {
    char when[32];
    fmt_time(json_integer_value(json_object_get(r, "measured_at")), when);
    fprintf(stderr, "%s %s (measured %s)", i ? "," : "", json_string_value(json_object_get(r, "backend")),
            when);
  }
  fprintf(stderr, "\n");
  json_decref(root);
  return AA_EXIT_OK;
}

/* One line per stored calibration of an import's reply. */
static void print_import(const json_t *root) {
  size_t i;
  json_t *r;
  json_array_foreach(json_object_get(root, "calibrations"), i, r) {
    long long at = json_integer_value(json_object_get(r, "measured_at"));
    json_t *rep = json_object_get(r, "replaced");
    char when[32], was[32], what[96] = "new on this planner";
    fmt_time(at, when);
    if (json_is_integer(rep)) {
      long long old = json_integer_value(rep);
      fmt_time(old, was);
      snprintf(what, sizeof what, "replaced one measured %s (%s)", was,
               old < at    ? "older"
               : old == at ? "the same date"
                           : "newer: --force");
    }
    printf("stored %s (%s), measured %s: %s\n", json_string_value(json_object_get(r, "device")),
           json_string_value(json_object_get(r, "backend")), when, what);
  }
}

static int do_import(const char *path, bool force, bool raw, const char *planner, const char *token_file) {
  char *text = NULL;
  size_t len = 0;
  aa_calib_file_t f;
  if (aa_read_file(path, AA_CALIB_FILE_MAX, "a calibration file", &text, &len) ||
      aa_calib_file_parse(&f, text, len, path)) {
    free(text);
    return aa_cli_fail("calib import");
  }
  aa_calib_file_clear(&f);
  aa_msg_t req = {.type = AA_MSG_CALIB_IMPORT, .calib_import = {.json = text, .force = force}};
  char *reply = NULL;
  aa_client_t *cl;
  int rc = aa_client_connect(&cl, planner, token_file);
  if (!rc) {
    rc = aa_client_request_json(cl, &req, &reply);
    aa_client_close(cl);
  }
  free(text);
  if (rc) return aa_cli_fail("calib import");
  json_t *root = NULL;
  int code = aa_client_reply_json("calib import", reply, raw, &root);
  if (code >= 0) return code;
  print_import(root);
  json_decref(root);
  return AA_EXIT_OK;
}

int aa_cmd_calib(int argc, char **argv) {
  static const struct option longopts[] = {
      {"force", no_argument, 0, 'f'},         {"json", no_argument, 0, 'j'},
      {"planner", required_argument, 0, 'p'}, {"token-file", required_argument, 0, 'k'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  const char *planner = NULL, *token_file = NULL;
  bool force = false, raw = false;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'f': force = true; break;
    case 'j': raw = true; break;
    case 'p': planner = optarg; break;
    case 'k': token_file = optarg; break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return bad_usage("unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  if (optind >= argc) return bad_usage("expected export DEVICE or import FILE%s", "");
  const char *verb = argv[optind];
  bool is_export = !strcmp(verb, "export");
  if (!is_export && strcmp(verb, "import"))
    return bad_usage("unknown subcommand '%s' (export or import)", verb);
  if (optind + 2 != argc)
    return bad_usage(is_export ? "export takes one DEVICE%s" : "import takes one FILE%s", "");
  if (is_export && (force || raw)) return bad_usage("--force and --json are options of import%s", "");
  const char *arg = argv[optind + 1];
  if (is_export && strcmp(arg, "cpu") && strcmp(arg, "cuda") && strncmp(arg, "cpu:", 4) &&
      strncmp(arg, "cuda:", 5))
    return bad_usage("DEVICE is a device fingerprint ('cpu:...' or 'cuda:...'), cpu or cuda, not '%s'", arg);
  return is_export ? do_export(arg, planner, token_file) : do_import(arg, force, raw, planner, token_file);
}
