/* The CLI's side of the planner protocol: a small blocking client on plain
 * POSIX sockets (no event loop), and the pieces the client commands share
 * (submit, status, cancel, query, auto). Behaviour of the planner and the
 * JSON of its replies: docs/service.md; the frames: docs/protocol.md.
 *
 * Every function returns 0 or a negative AA_E* code with an aa_error()
 * message fit to print after "autoaccel <cmd>: ". */
#ifndef AA_CLI_CLIENT_H
#define AA_CLI_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/spec.h"
#include "proto/msg.h"

/* How long a connect, the hello and a plain request may take. */
#define AA_CLIENT_CONNECT_MS 5000
#define AA_CLIENT_REQUEST_MS 30000

typedef struct aa_client aa_client_t;

/* Connects to the planner at `addr` (aa_addr_parse forms; NULL = the
 * default unix:<state dir>/planner.sock), sends hello as a client with the
 * token of token_file (NULL = none) and waits for welcome. A refused or
 * missing socket is AA_ECONN "no planner at ADDR: is `autoaccel planner`
 * running?"; a planner that wants a token is AA_EPERM. *out is transferred
 * (aa_client_close) and set only on success; strings are borrowed. */
int aa_client_connect(aa_client_t **out, const char *addr, const char *token_file);

/* aa_client_connect, and when addr is NULL (the default planner) and
 * nothing listens there, the state directory's store opened read-only
 * instead (planner.h aa_planner_reader_*): aa_client_query and
 * aa_client_status of a job answer from it, with the planner's JSON; every
 * other request fails. Says so on stderr ("autoaccel CMD: no planner
 * running: read the store PATH directly"). For commands that only read. */
int aa_client_connect_or_store(aa_client_t **out, const char *cmd, const char *addr, const char *token_file);
/* c reads the store (no planner). */
bool aa_client_is_store(const aa_client_t *c);

/* The address connected to, as text ("unix:/x/planner.sock"); valid while c is. */
const char *aa_client_address(const aa_client_t *c);

/* Sends m, giving it the next request id when m->id is 0 (m->id is then
 * set). m's strings are borrowed. */
int aa_client_send(aa_client_t *c, aa_msg_t *m);

/* Reads the next frame other than a heartbeat, waiting at most timeout_ms
 * (< 0 = no limit; heartbeats are sent meanwhile so the planner does not
 * take a waiting client for dead). *out owns its strings (aa_msg_free).
 * An `error` frame is returned as a message, not as a failure. Errors:
 * AA_ETIMEOUT, AA_ECONN (the planner closed the connection), AA_ECANCELLED
 * (a signal caught after aa_client_catch_signals), decode errors. */
int aa_client_recv(aa_client_t *c, aa_msg_t *out, int timeout_ms);

/* Sends req (a fresh id) and reads until the frame that answers it (`ack`,
 * `reply` or `error` with its id, or an error with id 0). An `error` answer
 * becomes its code and message. *reply owns its strings on success. */
int aa_client_request(aa_client_t *c, aa_msg_t *req, aa_msg_t *reply);

/* aa_client_request for a request answered with `reply`: its JSON text in
 * *json (malloc'd, transferred). Another answer is AA_EFORMAT. */
int aa_client_request_json(aa_client_t *c, aa_msg_t *req, char **json);

/* Turns a received `error` frame into its code (AA_EINTERNAL when out of
 * range) and its message in the last-error slot; frees m's strings. */
int aa_client_error(aa_msg_t *m);

/* Sends `bye` (best effort), closes the socket and frees c. NULL is a no-op. */
void aa_client_close(aa_client_t *c);

/* Makes SIGINT, SIGTERM and SIGHUP (unless SIGHUP is ignored, as under
 * nohup) set a flag (instead of killing the process) that aa_client_recv
 * and aa_client_interrupted report, so a command can clean up: `auto`
 * whose terminal closes stops its planner and executors in order. Installed
 * without SA_RESTART, so blocking calls return EINTR. */
void aa_client_catch_signals(void);

/* The signal caught since aa_client_catch_signals, or 0. */
int aa_client_interrupted(void);

/* --- shared by the commands ---------------------------------------------- */

/* Sends one query (`what` with args JSON text, NULL = none) or status (job 0
 * = the planner) and returns the reply's JSON text in *json (malloc'd,
 * transferred). */
int aa_client_query(aa_client_t *c, const char *what, const char *args, char **json);
/* Called per row of a paged answer with the row (borrowed: valid until it
 * returns; json_incref to keep it). Non-zero stops the walk with that
 * value. */
typedef int (*aa_client_row_cb)(json_t *row, void *data);
/* A query whose answer comes in pages ("next_offset"): asks page after
 * page with `args` (borrowed; "offset" from the second page and "limit"
 * when one is given are set here) until the last page or `limit` rows (0 =
 * all), calls `row` for each row under `list` and `bad` (may be NULL) for
 * each of the page's "unreadable" entries, then frees the page: one page
 * is held at a time, however many rows the answer has. Returns 0, a
 * request error, or the callbacks' non-zero value (the rest of that page
 * is passed over and no further page asked for). */
int aa_client_query_each(aa_client_t *c, const char *what, const json_t *args, long long limit,
                         const char *list, aa_client_row_cb row, aa_client_row_cb bad, void *data);
/* aa_client_query_each gathered into one object: the rows of every page
 * under `list`, and every page's "unreadable" rows merged. *out is a new
 * reference (json_decref). */
int aa_client_query_pages(aa_client_t *c, const char *what, const json_t *args, long long limit, const char *list,
                          json_t **out);
int aa_client_status(aa_client_t *c, uint64_t job, char **json);

/* What `submit` (and `auto`) send and how they wait. Strings borrowed. */
typedef struct aa_submit_opts {
  const aa_model_spec_t *spec; /* the model, loaded once by the caller (aa_spec_load) */
  bool wait, train, refresh, exhaustive;
  const char *exclude; /* "m1,m2" or NULL */
  const char *include; /* "m1,m2" or NULL: methods every candidate must use */
  const char *from;    /* a strategy file whose neighbourhood to search first, or NULL */
  int max_dryruns;     /* 0 = no limit */
  int time_limit_s;    /* 0 = none */
  const char *out_dir; /* NULL = the planner's default; made absolute here */
  bool json;           /* print the final reply JSON instead of the summary */
  bool runs_table;     /* print every run of the job as a table before the summary (auto) */
  bool embedded;       /* the planner lives in this process (auto): a signal ends the job with it */
  /* Called about twice a second while waiting; a non-zero return (an AA_E*
   * code with an aa_error message) stops the wait with that error. */
  int (*tick)(void *data);
  void *tick_data;
} aa_submit_opts_t;

/* Validates the spec locally, submits it and, with wait, relays progress
 * and results to stdout until the job ends, then prints the summary (or the
 * reply JSON). *job receives the job id when one was created (may be NULL);
 * *reply the final reply JSON when waited (malloc'd, transferred; may be
 * NULL). Returns the process exit code (0 done, 1 failed; errors printed as
 * "autoaccel <cmd>: ..."). */
int aa_client_submit(aa_client_t *c, const char *cmd, const aa_submit_opts_t *o, uint64_t *job, char **reply);
/* Reads the strategy file `path` for --from and checks that it resolves
 * against spec (borrowed), so a strategy that cannot run on the model is an
 * error before anything is sent. *json (malloc'd, transferred; set only on
 * success) is the file's strategy as aa_strategy_to_json writes it. */
int aa_client_load_from(const char *path, const aa_model_spec_t *spec, char **json);

/* Splits "a,b,c" into at most AA_PROTO_EXCLUDE_MAX entries of
 * 1..AA_PROTO_METHOD_MAX bytes; AA_EINVAL names a bad one. out->v and the
 * strings are malloc'd (aa_client_strlist_free). */
int aa_client_split_list(const char *text, const char *opt, aa_msg_strlist_t *out);
void aa_client_strlist_free(aa_msg_strlist_t *l);
/* Checks --exclude and --include (either may be NULL) as the planner will:
 * lists of known method names (strategies/space.h), no method both
 * included and excluded. AA_EINVAL naming the first fault. */
int aa_client_check_methods(const char *exclude, const char *include);

/* Resolves a --model value: a spec file (its architecture's hash) or a
 * 16-hex-digit hash, written lowercase into hash. A value that is neither a
 * path (contains '/' or ends in .json) nor a hash is AA_EINVAL; a bad spec
 * file is its load error. */
int aa_client_model_hash(const char *value, char hash[17]);
/* The same, with a spec file's --set overrides (cli.h aa_cli_take_sets)
 * applied before hashing; with a hash, any override is refused. */
int aa_client_model_hash_set(const char *value, const char *const *sets, size_t n_sets, char hash[17]);

/* Absolute form of path (cwd-joined when relative) into out. */
int aa_client_abspath(const char *path, char *out, size_t n);

/* Prints RUN objects (docs/service.md) as an aligned table: kind, strategy
 * key, status, tokens/s, step ms (median±spread), peak memory, note (error,
 * prune reason or final loss); with_job adds the run and job ids. runs is
 * borrowed. Defined in cmd_query.c. */
void aa_client_print_runs(FILE *f, const json_t *runs, bool with_job);

/* `report JOB --html PATH` on a connected client (or one reading the store):
 * job `id`'s page written to path (replaced atomically); *runs (may be
 * NULL) gets how many runs it holds. A job without runs is AA_EINVAL.
 * Defined in cmd_report.c; `auto` writes OUT/report.html with it. */
int aa_client_report_html(aa_client_t *c, long long id, const char *path, size_t *runs);

/* The common end of `status` and `query`: with raw, prints the planner's
 * reply text as it came (for scripts) and returns AA_EXIT_OK; otherwise
 * parses it into *root (transferred; json_decref) and returns -1 so the
 * caller prints it, or prints why it is not a JSON object and returns
 * AA_EXIT_FAIL. text is consumed (freed) in every case. */
int aa_client_reply_json(const char *cmd, char *text, bool raw, json_t **root);

/* Helpers for tables: tokens/s ("23378"), bytes ("51.6 MiB"), "-" for null. */
const char *aa_client_fmt_rate(char buf[32], double v, bool present);
const char *aa_client_fmt_bytes(char buf[32], double v, bool present);

#endif
