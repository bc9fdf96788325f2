/* Checkpoint retention (engine/ckpt_retain.c, `train --keep-last N`):
 * which files of a run's folder go and which stay, on a folder of
 * stand-in files (retention reads names, never contents). */
#include "common/aa.h"
#include "engine/checkpoint.h"
#include "tests/aa_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void touch(const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs("x", f);
    fclose(f);
  }
}

static int exists(const char *name) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &st) == 0;
}

/* keep 2 after step 5: step 5 (just written) and 4 stay, 1-3 go with
 * their rank files; a later step (another run's), final.ckpt, other names
 * and a folder named like a checkpoint stay; a symlink named like one is
 * removed itself, its target (outside the folder) untouched. */
AA_TEST(keep_last_deletes_older_checkpoints_only) {
  const char *files[] = {"step_000001.ckpt",
                         "step_000002.ckpt.rank0of2",
                         "step_000002.ckpt.rank1of2",
                         "step_000002.ckpt",
                         "step_000003.ckpt.tp0of2.rank0of1",
                         "step_000003.ckpt",
                         "step_000004.ckpt",
                         "step_000005.ckpt",
                         "step_000009.ckpt",
                         "final.ckpt",
                         "step_000001.ckpt.bak",
                         "step_1.ckpt",
                         "notes.txt",
                         "step_000003.ckpt.pp1of2.tp0of1.rank0of1"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    touch(files[i]);
  char p[512], target[512];
  snprintf(p, sizeof p, "%s/step_000000.ckpt", dir);
  CHECK(mkdir(p, 0700) == 0);
  snprintf(target, sizeof target, "%s.outside", dir);
  FILE *f = fopen(target, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  char link[512];
  snprintf(link, sizeof link, "%s/step_000002.ckpt.rank2of2", dir);
  CHECK(symlink(target, link) == 0);

  char *buf = NULL;
  size_t len = 0;
  FILE *log = open_memstream(&buf, &len);
  int rc = aa_ckpt_retain(dir, 2, 5, log);
  fclose(log);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(exists("step_000005.ckpt") && exists("step_000004.ckpt"));
  CHECK(!exists("step_000001.ckpt") && !exists("step_000002.ckpt") && !exists("step_000003.ckpt"));
  CHECK(!exists("step_000002.ckpt.rank0of2") && !exists("step_000002.ckpt.rank1of2"));
  CHECK(!exists("step_000003.ckpt.tp0of2.rank0of1") && !exists("step_000003.ckpt.pp1of2.tp0of1.rank0of1"));
  CHECK(!exists("step_000002.ckpt.rank2of2")); /* the link itself */
  struct stat st;
  CHECK(stat(target, &st) == 0); /* not what it pointed to */
  CHECK(exists("step_000009.ckpt") && exists("final.ckpt") && exists("step_000001.ckpt.bak"));
  CHECK(exists("step_1.ckpt") && exists("notes.txt") && exists("step_000000.ckpt"));
  CHECK_MSG(buf && strstr(buf, "keep-last 2: removed ") && strstr(buf, "step_000002.ckpt (4 files)") &&
                strstr(buf, "step_000001.ckpt (1 file)") && !strstr(buf, "step_000000"),
            "%s", buf ? buf : "");
  free(buf);
  unlink(target);

  /* keep 1: only the newest; nothing older left to count. */
  rc = aa_ckpt_retain(dir, 1, 5, NULL);
  CHECK(rc == 0 && exists("step_000005.ckpt") && !exists("step_000004.ckpt") && exists("step_000009.ckpt"));
  /* keep 0 (all) touches nothing; a missing folder is an error. */
  touch("step_000002.ckpt");
  CHECK(aa_ckpt_retain(dir, 0, 5, NULL) == 0 && exists("step_000002.ckpt"));
  snprintf(p, sizeof p, "%s/none", dir);
  CHECK_ERR(aa_ckpt_retain(p, 2, 5, NULL), AA_EIO, "cannot open the checkpoint folder");
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/aa-retain-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(keep_last_deletes_older_checkpoints_only);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return aa_test_summary();
}
