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

#include <unistd.h>

int aa__out_dir_check(const char *dir, uid_t owner) {
  uid_t uid;
  int rc = aa_dir_open_owned(NULL, &uid, "out_dir", dir, owner, false);
  if (rc == AA_ENOENT && (owner == 0 || owner == geteuid())) return 0; /* made by the planner, as that user */
  if (rc == AA_ENOENT)
    return aa_error(AA_EPERM,
                    "out_dir %s does not exist: create it first (the planner creates it only for its "
                    "own user, uid %u, and you are uid %u)",
                    dir, (unsigned)geteuid(), (unsigned)owner);
  if (rc == AA_EPERM)
    return aa_error(AA_EPERM, "out_dir %s belongs to uid %u, not to the submitting user (uid %u)", dir,
                    (unsigned)uid, (unsigned)owner);
  return rc;
}

int aa__out_dir_write_strategy(const aa_planner_job_t *j, const aa_strategy_t *s) {
  /* The job's out_dir, made when it is missing and the job's user is the
   * planner's, and checked on the open descriptor to belong to that user
   * still. */
  uid_t uid;
  int dir = -1, rc = aa_dir_open_owned(&dir, &uid, "out_dir", j->out_dir, j->has_owner ? j->owner : 0, true);
  if (rc == AA_EPERM)
    return aa_error(AA_EPERM,
                    "out_dir %s belongs to uid %u now, not to the job's user (uid %u): not writing there",
                    j->out_dir, (unsigned)uid, (unsigned)j->owner);
  if (rc) return rc;
  if ((rc = aa_strategy_save_at(s, dir, "strategy.json", 0644))) aa_error_wrap(rc, "out_dir %s", j->out_dir);
  close(dir);
  return rc;
}
