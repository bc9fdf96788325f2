/* Checkpoint retention: `train --keep-last N` (Merak's save_total_limit)
 * keeps the N newest step checkpoints of a run's folder
 * (engine/checkpoint.h aa_ckpt_retain). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A folder holding more entries than this is not a run's folder. */
#define ENTRIES_MAX 1000000

typedef struct {
  int step;
  int part; /* 0: the checkpoint itself (a file or a manifest); 1: a rank file it names */
  char *name;
} entry_t;

/* The step of a step checkpoint's name, "step_<digits>.ckpt", or of one of
 * its rank files, "step_<digits>.ckpt.rank..", ".tp..", ".pp.." (*part 1);
 * -1 for any other name. */
static int parse_name(const char *name, int *part) {
  if (strncmp(name, "step_", 5)) return -1;
  const char *p = name + 5;
  long long step = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++)
    step = step * 10 + (*p - '0');
  if (digits < 6 || step > INT_MAX || strncmp(p, ".ckpt", 5)) return -1;
  p += 5;
  if (!*p) {
    *part = 0;
    return (int)step;
  }
  if (*p++ != '.') return -1;
  if ((!strncmp(p, "rank", 4) && p[4] >= '0' && p[4] <= '9') ||
      ((!strncmp(p, "tp", 2) || !strncmp(p, "pp", 2)) && p[2] >= '0' && p[2] <= '9')) {
    *part = 1;
    return (int)step;
  }
  return -1;
}

/* Newest step first; within a step the checkpoint (a manifest) before its
 * rank files, so that an interrupted deletion never leaves a manifest
 * naming files already gone. */
static int by_step_desc(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? 1 : -1;
  if (x->part != y->part) return x->part - y->part;
  return strcmp(x->name, y->name);
}

int aa_ckpt_retain(const char *dir, int keep, int step, FILE *log) {
  if (keep <= 0) return 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return aa_error(AA_EIO, "%s: cannot open the checkpoint folder: %s", dir, strerror(errno));
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return aa_error(AA_EIO, "%s: cannot read the checkpoint folder: %s", dir, strerror(e));
  }
  entry_t *e = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  while (!rc && (errno = 0, de = readdir(d))) {
    int part, s = parse_name(de->d_name, &part);
    /* The one just written and any of a later step (another run's, in
     * the same folder) are neither counted nor deleted. */
    if (s < 0 || s >= step) continue;
    if (n == cap) {
      size_t c = cap ? 2 * cap : 64;
      entry_t *grown = c <= ENTRIES_MAX ? realloc(e, c * sizeof *e) : NULL;
      if (!grown) {
        rc = aa_error(AA_ENOMEM, "%s: too many checkpoint files to sort", dir);
        break;
      }
      e = grown;
      cap = c;
    }
    if (!(e[n].name = strdup(de->d_name))) {
      rc = aa_error(AA_ENOMEM, "out of memory");
      break;
    }
    e[n].step = s;
    e[n++].part = part;
  }
  if (!rc && errno) rc = aa_error(AA_EIO, "%s: reading the checkpoint folder: %s", dir, strerror(errno));
  if (e) qsort(e, n, sizeof *e, by_step_desc);
  /* The new checkpoint is one of the `keep`: keep - 1 older steps stay. */
  int kept = 1;
  for (size_t i = 0, j; i < n && !rc; i = j) {
    for (j = i; j < n && e[j].step == e[i].step; j++)
      continue;
    if (kept < keep) {
      kept++;
      continue;
    }
    int files = 0;
    for (size_t k = i; k < j && !rc; k++) {
      struct stat st;
      /* Never through a symlink (unlinkat removes the link itself), never
       * a folder that happens to be named like a checkpoint. */
      if (fstatat(dirfd(d), e[k].name, &st, AT_SYMLINK_NOFOLLOW)) {
        if (errno != ENOENT) rc = aa_error(AA_EIO, "%s/%s: %s", dir, e[k].name, strerror(errno));
      } else if (!S_ISDIR(st.st_mode)) {
        if (!unlinkat(dirfd(d), e[k].name, 0))
          files++;
        else if (errno != ENOENT)
          rc = aa_error(AA_EIO, "%s/%s: cannot delete: %s", dir, e[k].name, strerror(errno));
      }
    }
    if (files && log)
      fprintf(log, "keep-last %d: removed %s/step_%06d.ckpt (%d file%s)\n", keep, dir, e[i].step, files,
              files == 1 ? "" : "s");
  }
  for (size_t i = 0; i < n; i++)
    free(e[i].name);
  free(e);
  closedir(d);
  return rc;
}
