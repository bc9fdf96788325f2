/* A job's out_dir: a directory the submitting client names, where the
 * planner writes the best strategy (and the executors the training). The
 * planner may run as another user than the client (root, or a service
 * account), so it never writes there on a path's word alone: the directory
 * must belong to the user who submitted the job, it is checked on the
 * descriptor the planner then writes through, and files are created under
 * fresh names without following symlinks (common/file.h) before they are
 * renamed into place. */
#include "planner_internal.h"

#include "../common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether a directory owned by `uid` may take a job of `owner`: its own,
 * or any for root (who could write there anyway). */
static bool owned_by(uid_t uid, uid_t owner) { return owner == 0 || uid == owner; }

int aa__out_dir_check(const char *dir, uid_t owner) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT && owned_by(geteuid(), owner)) return 0; /* made by the planner, as that user */
    if (errno == ENOENT)
      return aa_error(AA_EPERM,
                      "out_dir %s does not exist: create it first (the planner creates it only for its "
                      "own user, uid %u, and you are uid %u)",
                      dir, (unsigned)geteuid(), (unsigned)owner);
    return aa_error(AA_EINVAL, "out_dir %s: %s", dir, strerror(errno));
  }
  struct stat st;
  int rc = fstat(fd, &st) ? aa_error(AA_EIO, "out_dir %s: %s", dir, strerror(errno)) : 0;
  close(fd);
  if (!rc && !owned_by(st.st_uid, owner))
    rc = aa_error(AA_EPERM, "out_dir %s belongs to uid %u, not to the submitting user (uid %u)", dir,
                  (unsigned)st.st_uid, (unsigned)owner);
  return rc;
}

/* Opens the job's out_dir (making it when it is missing and the job's
 * user is the planner's) and checks, on the open descriptor, that it
 * still belongs to the job's user. *fd is the caller's to close. */
static int open_out_dir(const aa_planner_job_t *j, int *fd) {
  int d = open(j->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0 && errno == ENOENT && (!j->has_owner || owned_by(geteuid(), j->owner))) {
    int rc = aa_mkdirs(j->out_dir);
    if (rc) return rc;
    d = open(j->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (d < 0) return aa_error(AA_EIO, "out_dir %s: %s", j->out_dir, strerror(errno));
  struct stat st;
  if (fstat(d, &st)) {
    close(d);
    return aa_error(AA_EIO, "out_dir %s: %s", j->out_dir, strerror(errno));
  }
  if (j->has_owner && !owned_by(st.st_uid, j->owner)) {
    close(d);
    return aa_error(AA_EPERM,
                    "out_dir %s belongs to uid %u now, not to the job's user (uid %u): not writing there",
                    j->out_dir, (unsigned)st.st_uid, (unsigned)j->owner);
  }
  *fd = d;
  return 0;
}

int aa__out_dir_write_strategy(aa_planner_t *p, aa_planner_job_t *j, const aa_strategy_t *s) {
  (void)p;
  char *text = NULL;
  int dir = -1, rc = aa_strategy_to_json(s, &text);
  if (!rc) rc = open_out_dir(j, &dir);
  aa_wfile_t w;
  if (!rc) rc = aa_wfile_openat(&w, dir, "strategy.json", 0644);
  if (!rc) {
    size_t n = strlen(text);
    if (fwrite(text, 1, n, w.f) != n)
      rc = aa_error(AA_EIO, "%s/strategy.json: write failed", j->out_dir);
    else if ((rc = aa_wfile_commit(&w)))
      aa_error_wrap(rc, "out_dir %s", j->out_dir);
    aa_wfile_abort(&w);
  }
  if (dir >= 0) close(dir);
  free(text);
  return rc;
}
