/* --set KEY.PATH=VALUE: the model-spec overrides every command that reads
 * a spec takes (cli.h). The rules are the spec reader's (common/spec.h
 * aa_spec_load_set); this file only collects the values. */
#include "cli.h"
#include "common/aa.h"
#include "common/spec.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Whether arg ("--name", no '=') is an option of longopts that takes a
 * value in the next argument. */
static int takes_value(const struct option *longopts, const char *arg) {
  if (strncmp(arg, "--", 2) || strchr(arg, '=')) return 0;
  for (const struct option *o = longopts; o && o->name; o++)
    if (!strcmp(o->name, arg + 2)) return o->has_arg == required_argument;
  return 0;
}

int aa_cli_take_sets(int *argc, char **argv, const struct option *longopts, const char *cmd,
                     aa_cli_sets_t *s) {
  int out = 1, i = 1;
  for (; i < *argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) break;
    if (strcmp(a, "--set") && strncmp(a, "--set=", 6)) {
      argv[out++] = argv[i];
      if (takes_value(longopts, a) && i + 1 < *argc) argv[out++] = argv[++i];
      continue;
    }
    const char *v = a[5] == '=' ? a + 6 : i + 1 < *argc ? argv[++i] : NULL;
    if (!v) {
      fprintf(stderr, "autoaccel %s: --set needs KEY.PATH=VALUE (e.g. --set model.n_layer=8)\n", cmd);
      return -1;
    }
    if (s->n == AA_CLI_SETS_MAX) {
      fprintf(stderr, "autoaccel %s: --set: at most %d overrides\n", cmd, AA_CLI_SETS_MAX);
      return -1;
    }
    if (aa_spec_set_check(v)) {
      fprintf(stderr, "autoaccel %s: %s\n", cmd, aa_last_error());
      return -1;
    }
    s->v[s->n++] = v;
  }
  for (; i < *argc; i++)
    argv[out++] = argv[i];
  argv[out] = NULL;
  *argc = out;
  return 0;
}

void aa_cli_set_help(FILE *f) {
  fputs("\nOverrides of the model spec, applied after its \"extends\" (docs/cli.md \"--set\"):\n"
        "  --set KEY.PATH=VALUE  repeatable, e.g. --set model.n_layer=8 --set train.lr=3e-4; VALUE is\n"
        "                        read as JSON when it parses, else as a string, and checked like the\n"
        "                        spec's own fields\n",
        f);
}

int aa_cli_spec_load(aa_model_spec_t *out, const char *path, const aa_cli_sets_t *s) {
  return aa_spec_load_set(out, path, s ? s->v : NULL, s ? (size_t)s->n : 0);
}
