/* Private to the planner daemon (the planner/ sources other than the store): the planner
 * and connection structs and the functions the files share. Names with the
 * aa__ prefix are internal but not static, so tests/test_planner.c can
 * reach the pure parts (search, fingerprints, reports) without a socket.
 *
 * Files: server.c (create/run/stop, listeners, connections, frames, the
 * close queue, the tick), registry.c (hello, executors, heartbeats, dead
 * peers), jobs.c (submits, the queue, one job's life, results, cancel,
 * waiting clients), search.c (enumeration, exclusions, order, early stop),
 * report.c (the JSON of status and query replies). */
#ifndef AA_PLANNER_INTERNAL_H
#define AA_PLANNER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <uv.h>

#include "../common/aa.h"
#include "../common/spec.h"
#include "../proto/addr.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../strategies/strategy.h"
#include "planner.h"
#include "store.h"

#define AA_PLANNER_VERSION AA_VERSION /* CMakeLists.txt: project(VERSION) */
#define AA_PLANNER_READ_BUF 65536
#define AA_PLANNER_STOP_GRACE_MS 2000 /* how long a stop waits for peers to take their bye */
#define AA_PLANNER_STATUS_JOBS 20     /* jobs in a planner-wide status */

typedef struct aa_planner_job aa_planner_job_t;

typedef enum { AA_CONN_HELLO = 0, AA_CONN_CLIENT, AA_CONN_EXECUTOR } aa_conn_role_t;

/* One accepted connection. Owned by the planner: created on accept, freed
 * in the close callback after it went through the close queue. */
typedef struct aa_conn {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
  } h;
  aa_planner_t *p;
  int tcp;                 /* arrived on the TCP listener (a token is required there if one is set) */
  char peer[80];           /* "unix" or "HOST:PORT", for the log */
  aa_frame_reader_t reader;
  aa_conn_role_t role;
  uint64_t id; /* executor or client id after hello, 0 before */
  double last_seen;
  bool dropped;     /* torn down: no more frames in or out, waiting to be closed */
  bool queued;      /* on the close queue */
  bool shutting;    /* a shutdown (flush, then close) is under way */
  uv_shutdown_t shutdown_req;
  struct aa_conn *next, *prev; /* the planner's list of live connections */
  struct aa_conn *close_next;
  /* Executors: */
  aa_msg_device_t dev; /* name and host owned (strdup) */
  char fingerprint[AA_STORE_HW_MAX]; /* of its device alone (x1) */
  int64_t busy_job, busy_run; /* the run it executes, 0 = idle */
  int busy_rank;              /* its rank in that run's gang */
  char rbuf[AA_PLANNER_READ_BUF];
} aa_conn_t;

/* A submit that arrived while no executor was connected: its hardware is
 * not known, and the store records a job with its hardware, so the job is
 * created (and acked) when an executor says hello. */
typedef struct aa_pending_submit {
  aa_conn_t *conn;
  aa_msg_t msg; /* the decoded submit, owned */
  struct aa_pending_submit *next;
} aa_pending_submit_t;

/* A client waiting (submit --wait) for a job's progress and outcome. */
typedef struct aa_waiter {
  aa_conn_t *conn;
  uint64_t req_id; /* the submit's request id, echoed by the final reply */
  int64_t job;
  struct aa_waiter *next;
} aa_waiter_t;

struct aa_planner {
  uv_loop_t loop;
  uv_pipe_t unix_srv;
  uv_tcp_t tcp_srv;
  uv_timer_t tick; /* heartbeats, dead peers, the stop grace period */
  uv_timer_t kick; /* runs the scheduler soon, outside the callback that asked */
  uv_async_t wake; /* aa_planner_stop from any thread */
  uv_idle_t reaper; /* drains the close queue */
  uv_signal_t sig_int, sig_term;
  bool unix_open, tcp_open, signals_wanted, signals_open, loop_ready, handles_closed;
  aa_store_t *store;
  char home[AA_PATH_MAX];
  char socket_path[AA_ADDR_PATH_MAX];
  char store_path[AA_PATH_MAX];
  char address[AA_ADDR_PATH_MAX + 16];
  char tcp_address[AA_ADDR_HOST_MAX + 16];
  char token[AA_TOKEN_MAX + 1];
  size_t token_len; /* 0 = no token required */
  dev_t sock_dev;
  ino_t sock_ino;
  bool sock_created;
  int heartbeat_ms, dead_after_ms, warmup_steps, measured_steps, dryrun_time_limit_s;
  FILE *log;
  double started; /* aa_now() at create */
  uint64_t next_executor_id, next_client_id;
  aa_conn_t *conns;   /* every connection until its close callback (dropped ones too) */
  aa_conn_t *close_q; /* connections waiting to be closed */
  int nconns;         /* allocated connections (live, closing or queued) */
  int64_t *queue;     /* queued job ids, oldest first */
  size_t queue_n, queue_cap;
  aa_planner_job_t *cur; /* the job being run, NULL = none */
  aa_pending_submit_t *pending;
  aa_waiter_t *waiters;
  int64_t waiting_logged; /* the job whose wait for an executor was logged */
  volatile int stop_requested;
  bool stopping;
  double stop_started;
};

/* --- server.c --------------------------------------------------------------- */

/* One line to the planner's log: "2026-01-02T03:04:05Z planner: ...". */
void aa__planner_log(aa_planner_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Encodes and queues m on c (strings borrowed); dropped when c is going
 * away. An encode failure is logged. Returns 0 or the encode error. */
int aa__conn_send(aa_conn_t *c, const aa_msg_t *m);
/* Queues an error frame answering request `id` (0 = unknown). */
void aa__conn_send_error(aa_conn_t *c, uint64_t id, int code, const char *message);
/* Protocol error: one error frame, a sanitized log line, close after the
 * write. `sample` (may be NULL) is logged as hex. */
void aa__conn_fail(aa_conn_t *c, uint64_t id, int code, const char *message, const void *sample, size_t n);
/* Tears c down now (role-specific cleanup with `why` for the log and the
 * record) and puts it on the close queue. */
void aa__conn_drop(aa_conn_t *c, const char *why);
/* Runs the scheduler from the loop soon (not inside the caller). */
void aa__planner_kick(aa_planner_t *p);

/* --- registry.c -------------------------------------------------------------- */

/* The hardware fingerprint KIND:NAME:MEMORY_MiBxWORLD of a device, the name
 * cut (at a character boundary) so the whole fits AA_STORE_HW_MAX - 1. A
 * job's hardware is its executors' device with WORLD = how many of them
 * one host has (the pool its search may use). */
void aa__planner_fingerprint(const aa_msg_device_t *d, int world, char out[AA_STORE_HW_MAX]);
/* The WORLD of a fingerprint (1 if it names none). */
int aa__planner_hw_world(const char *hardware);
/* The store's hardware description (JSON text, malloc'd, transferred). */
char *aa__planner_hw_description(const aa_msg_device_t *d, int world);
/* hello on a new connection. */
void aa__registry_hello(aa_conn_t *c, const aa_msg_t *m);
/* An executor connection going away: its run is recorded crashed with
 * `why`. */
void aa__registry_executor_gone(aa_conn_t *c, const char *why);
/* Heartbeats to executors and the dead-peer check; called by the tick. */
void aa__registry_tick(aa_planner_t *p);
/* An idle executor of this hardware (a job's fingerprint; NULL: any), NULL
 * if none. */
aa_conn_t *aa__registry_idle(aa_planner_t *p, const char *hardware);
/* Live executors with e's device on e's host, e included: a new job's pool. */
int aa__registry_pool(aa_planner_t *p, const aa_conn_t *e);
/* The most live executors of this hardware that one host has. */
int aa__registry_most_on_one_host(aa_planner_t *p, const char *hardware);
/* A gang: `world` idle executors of this hardware on one host, in out[0..world)
 * by rank (lowest executor id first). false (out untouched) if no host has
 * that many idle now. */
bool aa__registry_gang(aa_planner_t *p, const char *hardware, int world, aa_conn_t **out);
/* The executor with this id, NULL if gone. */
aa_conn_t *aa__registry_find(aa_planner_t *p, uint64_t id);

/* --- jobs.c --------------------------------------------------------------------- */

void aa__jobs_on_submit(aa_conn_t *c, aa_msg_t *m); /* may take m's strings (m is then zeroed) */
void aa__jobs_on_cancel(aa_conn_t *c, const aa_msg_t *m);
void aa__jobs_on_progress(aa_conn_t *c, const aa_msg_t *m);
void aa__jobs_on_result(aa_conn_t *c, const aa_msg_t *m);
/* An executor answered a job frame (id = run id) with an error. */
void aa__jobs_on_executor_error(aa_conn_t *c, const aa_msg_t *m);
/* Rank `rank` of run `run` ended without a result (its executor died):
 * crashed with `why`; the other ranks of the gang are aborted. */
void aa__jobs_rank_lost(aa_planner_t *p, int64_t run, int rank, const char *why);
/* A client connection going away: its waits and pending submits end. */
void aa__jobs_client_gone(aa_conn_t *c);
/* A new executor: submits that waited for one are created now. */
void aa__jobs_executor_arrived(aa_planner_t *p);
/* Starts or advances jobs as executors allow. */
void aa__jobs_schedule(aa_planner_t *p);
/* Loads queued jobs from the store at start-up. */
int aa__jobs_load_queue(aa_planner_t *p);
/* Stop: the running job is interrupted (its run cancelled). */
void aa__jobs_interrupt(aa_planner_t *p);
/* The running job's id, 0 = none. */
int64_t aa__jobs_current_id(const aa_planner_t *p);
/* Frees the queue, the current job, pending submits and waiters. */
void aa__jobs_free(aa_planner_t *p);

/* --- search.c -------------------------------------------------------------------- */

/* The methods `exclude` accepts, as a bit set. */
enum {
  AA_EX_BF16 = 1u << 0,
  AA_EX_FP16 = 1u << 1,
  AA_EX_SELECTIVE = 1u << 2,
  AA_EX_FULL = 1u << 3,
  AA_EX_FP32 = 1u << 4,
  AA_EX_ZERO1 = 1u << 5,
  AA_EX_ZERO2 = 1u << 6,
  AA_EX_ZERO3 = 1u << 7,
  AA_EX_TP = 1u << 8, /* tensor and pipeline parallelism: accepted, nothing to leave out today */
  AA_EX_PP = 1u << 9,
};

/* Maps `exclude` names to a bit set. AA_EINVAL naming the unknown method
 * and the accepted names. */
int aa__search_exclude_mask(const char *const *names, size_t n, unsigned *out);
/* The accepted names, comma-separated (static). */
const char *aa__search_exclude_names(void);

typedef enum {
  AA_CAND_PENDING = 0, /* valid, not yet dry-run */
  AA_CAND_PRUNED,      /* invalid or dropped by the search (reason set) */
  AA_CAND_RUNNING,
  AA_CAND_DONE, /* measured or failed: status set */
} aa_cand_state_t;

typedef struct aa_cand {
  aa_strategy_t s; /* resolved when valid */
  char key[AA_STRATEGY_KEY_MAX];
  int setting; /* index of its (parallel, zero, amp, checkpoint) setting */
  aa_cand_state_t state;
  char reason[512]; /* pruned: the rule or the search's reason */
  bool skipped;     /* pruned by its setting's micro-batch stop */
  uint64_t bytes;   /* valid: the bytes a rank needs at least (strategies/cost.h) */
  bool recorded;    /* its pruned run is in the store */
  int64_t run_id;
  aa_store_run_status_t status;
  double tokens_per_s;
} aa_cand_t;

typedef struct aa_search {
  aa_cand_t *c;
  size_t n;
  int nsettings;
  double *setting_best; /* the last ok tokens/s of each setting (early stop) */
  int *setting_mb;      /* its micro-batch */
  char (*setting_stop)[256]; /* non-empty: the setting stopped, why */
  int dispatched;       /* dry runs sent */
  int valid;            /* candidates that passed resolve */
  int predicted_oom;    /* of them, pruned for memory before any run */
  uint64_t memory;      /* bytes per device, 0 = unknown */
  double peak_flops;    /* per device (hello's peak bf16), 0 = unknown: the peak bound is off */
  double best;          /* the highest ok tokens/s so far */
  aa_arch_t arch;
  bool cuda;            /* the pool's devices are GPUs (the dominance rule) */
  bool exhaustive;
  int max_dryruns;      /* 0 = no limit */
  double deadline;      /* aa_now() seconds, 0 = none */
  int time_limit_s;
} aa_search_t;

/* Enumerates the strategies for the spec on a pool of `devices` executors
 * of kind `dev_kind` (on one host) with `memory` bytes each (0 = unknown)
 * in dry-run order, leaving out the `exclude` bits. Data parallelism takes
 * every degree up to `devices` that divides the global batch, ZeRO 0-3 at
 * dp > 1 with every precision, a candidate's world being its dp. Invalid
 * ones (aa_strategy_resolve fails) come back AA_CAND_PRUNED with the rule,
 * and so do those whose predicted bytes per rank (strategies/cost.h, a
 * lower bound) exceed `memory`, with the figures. */
int aa__search_enumerate(aa_search_t *s, const aa_model_spec_t *spec, int devices, aa_proto_dev_kind_t dev_kind,
                         uint64_t memory, unsigned exclude);
void aa__search_free(aa_search_t *s);
/* The next candidate to dry-run, or -1 when the search is over. Pending
 * ones the search drops on the way (early stop, a strategy that does at
 * least the work of one measured ok or skipped, one that could not beat
 * the best even at peak_flops, max_dryruns, time limit)
 * become AA_CAND_PRUNED with the reason; the caller records them.
 * Unless exhaustive: then only the limits prune. */
int aa__search_next(aa_search_t *s, double now);
/* The cost model's tokens/s for candidate i, refitted to what was measured:
 * the per-device FLOP rate (tokens/s x aa_cost_flops_per_token / devices)
 * of the most similar run measured ok so far (distance: another precision 4,
 * another dp 2, another ZeRO stage or checkpointing mode 1 each, plus
 * |log2| of the dp and micro-batch ratios; the later of equals), times
 * i's devices over i's FLOPs per token. 0 before any ok run. */
double aa__search_predict(const aa_search_t *s, int i);
/* Prunes every pending candidate with `reason`: the search is over. */
void aa__search_stop(aa_search_t *s, const char *reason);
/* Records a finished dry run of candidate i (the early-stop rule). */
void aa__search_done(aa_search_t *s, int i, aa_store_run_status_t status, double tokens_per_s);

/* --- report.c --------------------------------------------------------------------- */

/* RUN (docs/service.md). Returns a new reference, NULL on no memory. */
json_t *aa__report_run(const aa_store_run_t *r);
/* JOB of the store's job `id`; home gives the strategy file path.
 * AA_ENOENT "job N: not found". *out is a new reference. */
int aa__report_job(aa_store_t *st, const char *home, int64_t id, json_t **out);
/* The best run of a job as RUN or json_null(). */
json_t *aa__report_run_or_null(aa_store_t *st, int64_t run_id);
/* The answer to a `query` as JSON text (malloc'd, transferred). AA_EINVAL
 * naming an unknown what, argument or a wrong type. */
int aa__report_query(aa_store_t *st, const char *home, const char *what, const char *args, char **out);
/* The planner-wide status (text, malloc'd, transferred). */
int aa__report_status(aa_planner_t *p, char **out);
/* The path of a model's strategy file under home: <home>/strategies/<name>-<hash>.json,
 * the name reduced to [A-Za-z0-9._-]. */
void aa__report_strategy_path(const char *home, const char *name, const char *hash, char *out, size_t n);
/* Dumps a JSON value compactly (malloc'd, transferred; NULL on no memory). */
char *aa__report_dump(const json_t *v);

#endif
