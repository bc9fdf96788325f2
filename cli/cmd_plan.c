/* `autoaccel plan MODEL --pool cuda:8`: the best strategies of a pool that
 * need not be connected, predicted by the planner from a calibration it
 * stored earlier (docs/service.md "Plan"). Nothing is dry-run. Also
 * `plan --list-devices` and `plan --show-device NAME|FILE`, the device
 * profiles (cli/profiles.c), which need neither a planner nor a model. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/spec.h"
#include "strategies/roofline.h"

/* The most devices a pool named by a profile may have. */
#define AA_PLAN_PROFILE_DEVICES_MAX 65536

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel plan MODEL --pool KIND:N [--hosts H] [--device FINGERPRINT] [--top K]\n"
          "                      [--separate-hosts] [--json] [--planner ADDR] [--token-file FILE]\n"
          "       autoaccel plan MODEL --pool PROFILE:N [--per-node G] [--subsets] [--fix FILE]\n"
          "                      [--calib FILE] [--attention fused|materialised] [--top K] [--json]\n"
          "                      [--html FILE]\n"
          "       autoaccel plan --list-devices\n"
          "       autoaccel plan --show-device NAME|FILE\n\n"
          "Predicts the fastest strategies for MODEL (a model spec file; it needs no data) on a pool\n"
          "of N devices of one kind. Nothing is dry-run: the figures are predictions, and the\n"
          "assumptions they rest on are listed under the table.\n\n"
          "--pool cpu:N or cuda:N asks the planner, which predicts from the calibration it stored when\n"
          "it last ran a job on that kind of device. --pool PROFILE:N (a device profile: a built-in\n"
          "name from --list-devices, or a profile file) is planned here, without a planner, from the\n"
          "profile's datasheet figures (docs/device-profiles.md): every strategy of all N devices,\n"
          "ranked by predicted tokens/s, with model TFLOP/s per GPU, MFU, memory per GPU against the\n"
          "device's, the bubble's and the collectives' shares of the step.\n\n"
          "options:\n"
          "  --pool KIND:N         the pool: cpu:N or cuda:N (1..4096), or PROFILE:N (1..65536)\n"
          "  --hosts H             the N devices sit on H hosts, N/H each (default 1): tensor groups\n"
          "                        stay inside a host, and a gang larger than a host runs its data\n"
          "                        and pipeline groups across hosts, on the lines a gang spanning\n"
          "                        hosts measured (gloo for CPUs, nccl-hosts for CUDA)\n"
          "  --device FINGERPRINT  the calibration of this device, such as\n"
          "                        'cuda:NVIDIA H100 80GB HBM3:81559MiB' (default: the newest of the kind)\n"
          "  --top K               strategies to show (1..1000, default 5)\n"
          "  --separate-hosts      CPU pools: each executor has cores of its own (default: they share\n"
          "                        the host the calibration ran on, and its cores)\n"
          "  --json                print the reply as JSON (the planner's verbatim for cpu/cuda pools)\n"
          "  --planner ADDR        unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
          "  --token-file FILE     the planner's token (a mode 0600 file; on TCP the default is\n"
          "                        <state dir>/token, where a planner of that state dir keeps it)\n"
          "  --per-node G          PROFILE pools: GPUs per node (default: the profile's); tensor groups\n"
          "                        stay inside a node, collectives run on the links they span\n"
          "  --subsets             PROFILE pools: smaller gangs too (default: all N devices)\n"
          "  --fix FILE            PROFILE pools: only the completions of this partial strategy file\n"
          "                        (any subset of its fields: e.g. {\"parallel\": {\"tensor\": 8}})\n"
          "  --calib FILE          PROFILE pools: a calibration file of the GPU (calib export), which\n"
          "                        wins over the profile wherever it measured\n"
          "  --attention KIND      PROFILE pools: how attention is timed: fused (default; this engine's\n"
          "                        kernel, no s x s scores in memory) or materialised (the scores\n"
          "                        written, softmax and dropout over them, as Megatron-LM did in\n"
          "                        2021: docs/device-profiles.md); not with --calib\n"
          "  --html FILE           PROFILE pools: also a page with MFU against memory per GPU of every\n"
          "                        strategy predicted, the Pareto front and the best\n"
          "  --list-devices        a table of the device profiles built in\n"
          "  --show-device NAME|FILE\n"
          "                        every figure of a built-in profile, or of a profile file of your\n"
          "                        own (a path holding '/' or ending in .json, checked), and its source\n"
          "  -h, --help            this help\n\n"
          "Exit codes: 0 success, 1 failure (no planner, bad model file, no calibration of the kind,\n"
          "unknown or bad device profile), 2 usage.\n");
  aa_cli_set_help(f);
}

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "autoaccel plan: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage(stderr);
  return AA_EXIT_USAGE;
}

/* "cpu:4" or "cuda:8" into kind ("cpu"/"cuda") and n, or PROFILE:N (a
 * built-in device profile's name or a profile file, strategies/profile.h)
 * into kind "profile" and the profile's name or path (into profile, cap
 * bytes); -1 (message printed) when it is none of these. */
static int parse_pool(const char *arg, const char **kind, int *n, char *profile, size_t cap) {
  const char *colon = strrchr(arg, ':');
  size_t k = colon ? (size_t)(colon - arg) : 0;
  long long max = AA_PROTO_WORLD_MAX;
  if (colon && k == 3 && !strncmp(arg, "cpu", 3))
    *kind = "cpu";
  else if (colon && k == 4 && !strncmp(arg, "cuda", 4))
    *kind = "cuda";
  else if (colon && k > 0 && k < cap) {
    *kind = "profile";
    memcpy(profile, arg, k);
    profile[k] = '\0';
    max = AA_PLAN_PROFILE_DEVICES_MAX;
  } else {
    bad_usage("--pool is cpu:N, cuda:N or PROFILE:N (plan --list-devices), not '%s'", arg);
    return -1;
  }
  long long v = aa_cli_parse_int("plan", "--pool's N", colon + 1, 1, max);
  if (v < 0) return -1;
  *n = (int)v;
  return 0;
}

static const char *jstr(const json_t *o, const char *k, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : dflt;
}

static double jnum(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* The table of a plan reply (docs/service.md "Plan"). */
static void print_plan(const json_t *root, const char *pool_arg) {
  json_t *cal = json_object_get(root, "calibration"), *list = json_object_get(root, "strategies");
  /* measured_at: an imported calibration keeps the date it was measured
   * where it came from (updated_at is the import's). */
  time_t at = (time_t)json_integer_value(json_object_get(cal, "measured_at"));
  char when[32] = "?";
  struct tm tm;
  if (gmtime_r(&at, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  json_t *pool = json_object_get(root, "pool");
  long long hosts = json_integer_value(json_object_get(pool, "hosts"));
  char on[32] = "";
  if (hosts > 1) snprintf(on, sizeof on, " on %lld hosts", hosts);
  printf("plan for %s%s from the calibration of %s (%s, measured %s): %lld strategies, %lld predicted out of "
         "memory",
         pool_arg, on, jstr(cal, "device", "?"), jstr(cal, "backend", "?"), when,
         (long long)json_integer_value(json_object_get(root, "valid")),
         (long long)json_integer_value(json_object_get(root, "predicted_oom")));
  if (hosts > 1)
    printf(", %lld with a tensor group wider than a host",
           (long long)json_integer_value(json_object_get(root, "tensor_wider_than_a_host")));
  printf("\n\n");
  size_t i, keyw = 8;
  json_t *s;
  json_array_foreach(list, i, s) {
    size_t n = strlen(jstr(s, "key", "-"));
    if (n > keyw) keyw = n;
  }
  if (!json_array_size(list))
    printf("no strategy fits the pool\n");
  else
    printf("%4s  %-*s %12s %9s %10s\n", "RANK", (int)keyw, "STRATEGY", "PRED TOK/S", "STEP MS", "PEAK/RANK");
  json_array_foreach(list, i, s) {
    char rate[32], peak[32];
    aa_client_fmt_rate(rate, jnum(s, "tokens_per_s"), true);
    aa_client_fmt_bytes(peak, jnum(s, "peak_bytes"), true);
    printf("%4zu  %-*s %12s %9.1f %10s\n", i + 1, (int)keyw, jstr(s, "key", "-"), rate, jnum(s, "step_ms"),
           peak);
  }
  printf("\nassumptions:\n");
  json_array_foreach(json_object_get(root, "assumptions"), i, s) printf("  - %s\n", json_string_value(s));
}

int aa_cmd_plan(int argc, char **argv) {
  static const struct option longopts[] = {{"pool", required_argument, 0, 'P'},
                                           {"device", required_argument, 0, 'd'},
                                           {"top", required_argument, 0, 't'},
                                           {"separate-hosts", no_argument, 0, 's'},
                                           {"hosts", required_argument, 0, 'H'},
                                           {"planner", required_argument, 0, 'p'},
                                           {"token-file", required_argument, 0, 'k'},
                                           {"json", no_argument, 0, 'j'},
                                           {"list-devices", no_argument, 0, 'L'},
                                           {"show-device", required_argument, 0, 'S'},
                                           {"per-node", required_argument, 0, 'G'},
                                           {"subsets", no_argument, 0, 'U'},
                                           {"fix", required_argument, 0, 'F'},
                                           {"calib", required_argument, 0, 'C'},
                                           {"html", required_argument, 0, 'W'},
                                           {"attention", required_argument, 0, 'A'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *planner = NULL, *token_file = NULL, *pool_arg = NULL, *device = NULL, *kind = NULL;
  const char *show_device = NULL, *fix = NULL, *calib = NULL, *html = NULL, *attention_arg = NULL;
  aa_roof_attention_t attention = AA_ROOF_ATTENTION_FUSED;
  char profile[AA_PATH_MAX];
  int per_node = 0;
  bool subsets = false;
  bool list_devices = false;
  long long top = 5;
  int devices = 0, hosts = 1, c;
  bool json = false, separate = false;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, longopts, "plan", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'P':
      if (parse_pool(optarg, &kind, &devices, profile, sizeof profile)) return AA_EXIT_USAGE;
      pool_arg = optarg;
      break;
    case 'd': device = optarg; break;
    case 't':
      if ((top = aa_cli_parse_int("plan", "--top", optarg, 1, 1000)) < 0) return AA_EXIT_USAGE;
      break;
    case 's': separate = true; break;
    case 'H':
      if ((hosts = (int)aa_cli_parse_int("plan", "--hosts", optarg, 1, 4096)) < 0) return AA_EXIT_USAGE;
      break;
    case 'p': planner = optarg; break;
    case 'k': token_file = optarg; break;
    case 'j': json = true; break;
    case 'L': list_devices = true; break;
    case 'S': show_device = optarg; break;
    case 'G':
      if ((per_node = (int)aa_cli_parse_int("plan", "--per-node", optarg, 1, 1024)) < 0) return AA_EXIT_USAGE;
      break;
    case 'U': subsets = true; break;
    case 'F': fix = optarg; break;
    case 'C': calib = optarg; break;
    case 'W': html = optarg; break;
    case 'A':
      if (aa_roof_attention_parse(&attention, optarg))
        return bad_usage("--attention is fused or materialised, not '%s'", optarg);
      attention_arg = optarg;
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return bad_usage("unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  if (list_devices || show_device) {
    if (list_devices && show_device)
      return bad_usage("--list-devices and --show-device go one at a time%s", "");
    if (optind != argc || pool_arg)
      return bad_usage("--list-devices and --show-device take no MODEL and no --pool%s", "");
    return list_devices ? aa_cli_list_devices() : aa_cli_show_device(show_device);
  }
  if (optind != argc - 1) return bad_usage("expected one MODEL spec file%s", "");
  if (!pool_arg) return bad_usage("--pool KIND:N is required (e.g. --pool cuda:8 or h100-80gb:64)%s", "");
  if (!strcmp(kind, "profile")) {
    if (hosts != 1 || device || separate || planner || token_file)
      return bad_usage("a pool named by a device profile is planned here: --hosts (use --per-node), --device, "
                       "--separate-hosts, --planner and --token-file are for cpu:N and cuda:N pools%s",
                       "");
    if (attention != AA_ROOF_ATTENTION_FUSED && calib)
      return bad_usage("--attention %s does not go with --calib: a calibration times this engine's fused "
                       "attention, which it measured",
                       attention_arg);
    aa_model_spec_t spec;
    if (aa_cli_spec_load(&spec, argv[optind], &sets)) return aa_cli_fail("plan");
    const aa_cli_plan_local_t o = {.spec = &spec,
                                   .profile = profile,
                                   .devices = devices,
                                   .per_node = per_node,
                                   .top = (size_t)top,
                                   .json = json,
                                   .subsets = subsets,
                                   .fix = fix,
                                   .calib = calib,
                                   .html = html,
                                   .attention = (int)attention};
    return aa_cli_plan_local(&o);
  }
  if (per_node || subsets || fix || calib || attention_arg)
    return bad_usage(
        "--per-node, --subsets, --fix, --attention and --calib are for a pool named by a device profile "
        "(--pool h100-80gb:N)%s",
        "");
  if (devices % hosts)
    return bad_usage("--hosts must divide the pool's devices evenly (--pool %s)", pool_arg);
  if (device && strncmp(device, kind, strlen(kind)))
    return bad_usage("--device must be a device of the pool's kind, not '%s'", device);
  aa_model_spec_t spec;
  char *model = NULL;
  if (aa_cli_spec_load(&spec, argv[optind], &sets) ||
      aa_spec_require_planned(&spec, !strcmp(kind, "cuda"), argv[optind]) || aa_spec_to_json(&spec, &model))
    return aa_cli_fail("plan");
  json_t *args =
      json_pack("{s:o, s:{s:s, s:i, s:i}, s:I, s:b}", "model", json_loads(model, 0, NULL), "pool", "kind",
                kind, "devices", devices, "hosts", hosts, "top", (json_int_t)top, "separate_hosts", separate);
  free(model);
  if (args && device) json_object_set_new(args, "device", json_string(device));
  char *text = args ? json_dumps(args, JSON_COMPACT) : NULL, *reply = NULL;
  json_decref(args);
  if (!text) {
    aa_error(AA_ENOMEM, "no memory");
    return aa_cli_fail("plan");
  }
  aa_client_t *cl;
  int rc = aa_client_connect(&cl, planner, token_file);
  if (!rc) {
    rc = aa_client_query(cl, "plan", text, &reply);
    aa_client_close(cl);
  }
  free(text);
  if (rc) return aa_cli_fail("plan");
  json_t *root = NULL;
  int code = aa_client_reply_json("plan", reply, json, &root);
  if (code >= 0) return code;
  print_plan(root, pool_arg);
  json_decref(root);
  return AA_EXIT_OK;
}
