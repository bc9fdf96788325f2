/* The planner daemon: one libuv loop that listens for executors and clients,
 * keeps the executor registry and the job queue, runs the search for each
 * job, dispatches dry runs and training runs, and records everything in the
 * store. Behaviour on the wire and the JSON of its replies: docs/service.md.
 *
 * `autoaccel planner` runs one in the foreground; `autoaccel auto` embeds
 * one on a thread of its own. Depends on common/, proto/, strategies/ and the
 * store; never on the engine. */
#ifndef AA_PLANNER_H
#define AA_PLANNER_H

#include <stdio.h>

#include "../common/aa.h"

typedef struct aa_planner aa_planner_t;

typedef struct aa_planner_opts {
  const char *home;        /* state directory (created 0700 if missing); NULL = aa_home_dir() */
  const char *socket_path; /* unix socket; NULL = <home>/planner.sock. Created with mode 0600 */
  const char *tcp;         /* "HOST:PORT" to listen on TCP as well, or NULL. Every TCP peer
                            * must present the token; a name must resolve to what it says
                            * (a name that resolves to a wildcard address is refused). */
  const char *token_file;  /* the token TCP peers present (aa_token_load); NULL = <home>/token,
                            * created (mode 0600, random) when TCP is asked for and it is missing */
  const char *store_path;  /* NULL = <home>/store.db */
  int heartbeat_ms;        /* executors send a heartbeat this often; 0 = 1000 */
  int dead_after_ms;       /* a peer silent this long is dead; 0 = 10 * heartbeat_ms */
  int warmup_steps;        /* per dry run; < 0 = default 1 */
  int measured_steps;      /* per dry run; 0 = default 4 */
  int dryrun_time_limit_s; /* per dry run; 0 = default 300 */
  /* Limits (docs/service.md "Limits"); 0 = the default. */
  int max_connections;       /* default 1024, and never more than RLIMIT_NOFILE allows */
  int max_unauthenticated;   /* TCP connections that have not said hello; default 64 */
  int hello_timeout_ms;      /* a connection says hello within this; default 10000 */
  int frame_timeout_ms;      /* a frame arrives whole within this of its first byte; default 30000 */
  long long write_queue_max; /* bytes queued to one peer and not read; default 32 MiB */
  long long input_buffer_max; /* input bytes held for every peer together (partial frames,
                               * deferred reads); past it the largest holder is closed.
                               * Default 64 MiB, at least 17 MiB (one whole frame fits) */
  int placement_timeout_s;   /* a job waits this long for executors not connected; default 3600 */
  int max_resumes;           /* resumes of a job interrupted by a stop; default 3, < 0 = never */
  /* The process-group backend of CPU gangs: "auto" (NULL: shm on one
   * host, gloo when a gang spans hosts), "gloo" (always, one host too) or
   * "shm" (every gang on one host). docs/service.md "Placement across hosts". */
  const char *cpu_backend;
  FILE *log;                 /* one line per event (connections, jobs, runs); NULL = stderr */
} aa_planner_opts_t;

/* Opens the store (running aa_store_recover on it), binds the listening
 * sockets and prepares the loop; nothing is served until aa_planner_run.
 * Ignores SIGPIPE for the whole process: a peer that closes its end makes
 * a write fail, never a signal that kills the daemon.
 * Refuses a unix socket path where a live planner answers (AA_EIO "another
 * planner is listening on PATH") and removes a stale socket file. *out is
 * transferred (aa_planner_destroy) and set only on success. */
int aa_planner_create(aa_planner_t **out, const aa_planner_opts_t *opts);

/* Serves until aa_planner_stop is called (or SIGINT/SIGTERM when
 * handle_signals was set by aa_planner_handle_signals). Returns 0 after an
 * orderly stop: connections closed with `bye`, running jobs marked
 * interrupted, the loop closed with no handle left. */
int aa_planner_run(aa_planner_t *p);

/* Makes aa_planner_run stop soon; safe from any thread and from a signal
 * handler context of the caller's own (it only wakes the loop). */
void aa_planner_stop(aa_planner_t *p);

/* Let aa_planner_run stop on SIGINT and SIGTERM (the daemon; not the
 * embedded planner of `auto`, whose host process handles signals). */
void aa_planner_handle_signals(aa_planner_t *p);

/* The address peers should use ("unix:/path/planner.sock"), valid while p is. */
const char *aa_planner_address(const aa_planner_t *p);

/* Closes the sockets (removing the socket file) and the store and frees p.
 * Call after aa_planner_run has returned, or instead of it. NULL is a no-op. */
void aa_planner_destroy(aa_planner_t *p);

/* --- reading the store with no planner running -------------------------------------- */

/* `query` and `status JOB` answered from a state directory's store when no
 * planner serves it (the CLI's `query` and `report` then): the store opened
 * read-only (AA_STORE_READONLY: no file is changed, a live planner's jobs
 * are not touched), the same JSON as a planner's replies (docs/service.md)
 * by the same code, less what only a running planner knows (a queued job's
 * wait). home NULL = aa_home_dir(). A missing store is AA_ENOENT naming it.
 * *out (transferred; aa_planner_reader_close) is set only on success. */
typedef struct aa_planner_reader aa_planner_reader_t;
int aa_planner_reader_open(aa_planner_reader_t **out, const char *home);
/* The store file read, valid while r is. */
const char *aa_planner_reader_path(const aa_planner_reader_t *r);
/* The answer to `query what` (args JSON text or NULL) or to `status job`
 * (job >= 1): JSON text in *json (malloc'd, transferred). */
int aa_planner_reader_query(aa_planner_reader_t *r, const char *what, const char *args, char **json);
int aa_planner_reader_job(aa_planner_reader_t *r, uint64_t job, char **json);
/* NULL is a no-op. */
void aa_planner_reader_close(aa_planner_reader_t *r);

#endif
