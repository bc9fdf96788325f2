/* `autoaccel plan --list-devices` and `plan --show-device NAME|FILE`: the
 * device profiles (strategies/profile.h, docs/device-profiles.md) for
 * people. Neither needs a planner or a model. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/json.h"
#include "strategies/profile.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

int aa_cli_list_devices(void) {
  int rc = AA_EXIT_OK;
  printf("%-16s %8s %9s %13s %12s %10s %10s %9s\n", "NAME", "MEMORY", "HBM TB/s", "BF16 TFLOP/s",
         "FP8 TFLOP/s", "GPUS/NODE", "NODE GB/s", "NET GB/s");
  for (size_t i = 0; i < aa_profile_builtin_count(); i++) {
    aa_device_profile_t p;
    if (aa_profile_builtin(&p, i)) {
      /* A broken file shipped is this build's fault: say so and go on. */
      fprintf(stderr, "autoaccel plan: %s\n", aa_last_error());
      rc = AA_EXIT_FAIL;
      continue;
    }
    char mem[32], fp8[32];
    snprintf(mem, sizeof mem, "%.4g GiB", (double)p.memory_bytes / GIB);
    double f8 = p.dense_flop_per_s[AA_PROFILE_FP8];
    if (f8 > 0)
      snprintf(fp8, sizeof fp8, "%.1f", f8 / 1e12);
    else
      snprintf(fp8, sizeof fp8, "-"); /* null: no fp8 tensor cores */
    printf("%-16s %8s %9.4g %13.1f %12s %10d %10.0f %9.0f\n", p.name, mem, p.hbm_bytes_per_s / 1e12,
           p.dense_flop_per_s[AA_PROFILE_BF16] / 1e12, fp8, p.gpus_per_node, p.intra_node.bytes_per_s / 1e9,
           p.inter_node.bytes_per_s / 1e9);
  }
  printf("\nDense figures (no sparsity), from the vendors' datasheets. NODE is a GPU's link to the other\n"
         "GPUs of its node (NVLink), NET its share of the network between nodes, both in each\n"
         "direction. Every figure and its source: autoaccel plan --show-device NAME. Not yet used by\n"
         "plan's predictions (docs/device-profiles.md).\n");
  return rc;
}

/* x > 0 in SI units: "3.35 TB/s". */
static void si(char buf[48], double x, const char *unit) {
  static const char *const prefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int k = 0;
  for (; k < 6 && x >= 1000; k++)
    x /= 1000;
  snprintf(buf, 48, "%.4g %s%s", x, prefix[k], unit);
}

/* A figure's value with its unit, for people. */
static void describe(char buf[48], const aa_device_profile_t *p, int f) {
  double x = aa_profile_field_value(p, f);
  if (f == AA_PROFILE_MEMORY)
    snprintf(buf, 48, "%.4g GiB", x / GIB);
  else if (f == AA_PROFILE_GPUS_PER_NODE)
    snprintf(buf, 48, "GPUs");
  else if (f == AA_PROFILE_INTRA_LATENCY || f == AA_PROFILE_INTER_LATENCY)
    snprintf(buf, 48, "%.4g us", x * 1e6);
  else if (x == 0)
    snprintf(buf, 48, "the device has no such unit");
  else if (f == AA_PROFILE_HBM)
    si(buf, x, "B/s");
  else if (f == AA_PROFILE_INTRA_BYTES || f == AA_PROFILE_INTER_BYTES)
    si(buf, x, "B/s each way");
  else
    si(buf, x, "FLOP/s");
}

int aa_cli_show_device(const char *name_or_path) {
  aa_device_profile_t p;
  if (aa_profile_find(&p, name_or_path)) return aa_cli_fail("plan");
  printf("%s: %s\n", p.name, p.description);
  printf("  %s\n", aa_profile_is_path(name_or_path) ? name_or_path : "built in");
  printf("  inside a node:  %s\n  between nodes:  %s\n\n", p.intra_node.link, p.inter_node.link);
  for (int f = 0; f < AA_PROFILE_FIELDS; f++) {
    char exact[32], human[48];
    double x = aa_profile_field_value(&p, f);
    /* The file's value, exactly: null for a unit the device lacks. */
    if (f == AA_PROFILE_MEMORY || f == AA_PROFILE_GPUS_PER_NODE)
      snprintf(exact, sizeof exact, "%.0f", x);
    else if (x == 0)
      snprintf(exact, sizeof exact, "null");
    else
      aa_json_fmt_num(exact, x, false);
    describe(human, &p, f);
    printf("%-24s %-14s %s\n    source: %s\n", aa_profile_field_path(f), exact, human, p.source[f]);
  }
  return AA_EXIT_OK;
}
