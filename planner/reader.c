/* The store read with no planner running (planner.h "reading the store"):
 * `query` and `status JOB` answered by report.c's code on a read-only
 * store, so the CLI's `query` and `report` print the same thing with or
 * without a planner. */
#include "planner_internal.h"

#include <stdlib.h>
#include <string.h>

struct aa_planner_reader {
  aa_store_t *store;
  char home[AA_PATH_MAX];
  char path[AA_PATH_MAX + 16];
};

int aa_planner_reader_open(aa_planner_reader_t **out, const char *home) {
  aa_planner_reader_t *r = calloc(1, sizeof *r);
  if (!r) return aa_error(AA_ENOMEM, "out of memory");
  int rc = 0;
  if (home) {
    if (strlen(home) >= sizeof r->home)
      rc = aa_error(AA_EINVAL, "state directory path too long: %s", home);
    else
      snprintf(r->home, sizeof r->home, "%s", home);
  } else {
    rc = aa_home_dir(r->home, sizeof r->home);
  }
  if (!rc) {
    snprintf(r->path, sizeof r->path, "%s/store.db", r->home);
    rc = aa_store_open(&r->store, r->path, AA_STORE_READONLY);
  }
  if (rc) {
    free(r);
    return rc;
  }
  *out = r;
  return 0;
}

const char *aa_planner_reader_path(const aa_planner_reader_t *r) { return r->path; }

int aa_planner_reader_query(aa_planner_reader_t *r, const char *what, const char *args, char **json) {
  return aa__report_query(r->store, r->home, what, args, json, NULL);
}

int aa_planner_reader_job(aa_planner_reader_t *r, uint64_t job, char **json) {
  if (job < 1 || job > INT64_MAX)
    return aa_error(AA_EINVAL, "status: job %llu: not a job id", (unsigned long long)job);
  json_t *j;
  int rc = aa__report_job(r->store, r->home, (int64_t)job, &j);
  if (rc) return rc;
  json_object_set_new(j, "waiting", json_null()); /* as aa__jobs_annotate says of a job nothing waits for */
  json_t *o = json_pack("{s:o}", "job", j);
  if (!o || !(*json = aa__report_dump(o))) rc = aa_error(AA_ENOMEM, "status: no memory");
  json_decref(o);
  return rc;
}

void aa_planner_reader_close(aa_planner_reader_t *r) {
  if (!r) return;
  aa_store_close(r->store);
  free(r);
}
