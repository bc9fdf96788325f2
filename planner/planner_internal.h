/* Private to the planner daemon (the planner/ sources other than the store): the planner
 * and connection structs and the functions the files share. Names with the
 * aa__ prefix are internal but not static, so tests/test_planner.c can
 * reach the pure parts (search, fingerprints, reports) without a socket.
 *
 * Files: server.c (create/run/stop, the limits, listeners, the tick, the
 * dispatch of decoded messages), conn.c (accepting within the caps,
 * frames, deadlines, bounded writes, the input budget, the close queue),
 * admit.c (TCP peers waiting for their hello: sources and who makes room
 * for whom), registry.c (hello,
 * executors, heartbeats, dead peers), jobs.c (submits, the queue, one job's
 * life, results, cancel, waiting clients), search.c (enumeration,
 * exclusions, order, early stop, the calibrated order and stop bound, the
 * re-measures and the verdict), report.c (the JSON of status and query
 * replies), plan.c (`query plan`: predictions from a stored calibration),
 * relay.c (the store of each running gang, kv_set / kv_get), wal.c (the
 * store's WAL truncated after a write error and when idle), calib_io.c
 * (`query calib_export` and calib_import: calibrations as files). */
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
#define AA_PLANNER_PAGE_RUNS 1000     /* runs in one answer to `query runs` (then next_offset) */
#define AA_PLANNER_PAGE_JOBS 100      /* jobs in one answer to `query jobs` */
#define AA_PLANNER_PLANS 1            /* `query plan`s computed at once (plan.c: up to ~200 MiB each) */
/* The largest frame a peer may send before its hello is accepted. A hello
 * holds three strings of at most 255 bytes and a few numbers. */
#define AA_PLANNER_HELLO_FRAME_MAX 4096
/* Connections only the unix socket (mode 0600: the owner) may use, so
 * strangers on TCP cannot lock the owner out. */
#define AA_PLANNER_UNIX_RESERVE 16
/* Descriptors kept for the store, the log, the loop and a moment's accept
 * beyond the connection cap, when the cap is derived from RLIMIT_NOFILE. */
#define AA_PLANNER_FD_RESERVE 32
#define AA_PLANNER_REFUSALS_LOGGED 10 /* refusals logged one by one per second */
/* Jobs the queue holds at most, and submits that may wait for a first
 * executor (each holds its model spec in memory): past them a submit is
 * refused, so no client can grow the planner without bound. */
#define AA_PLANNER_QUEUE_MAX 10000
#define AA_PLANNER_PENDING_MAX 64
/* Frames one connection has acted on before the loop turns to others. */
#define AA_PLANNER_FRAMES_PER_TURN 16
/* Buckets of the table of sources with TCP peers waiting for their hello
 * (admit.c); a chain holds the sources that hash to it. */
#define AA_PLANNER_SOURCE_BUCKETS 256

/* The planner's limits, from aa_planner_opts_t after defaults and the
 * descriptor limit (server.c's table; docs/service.md "Limits"). */
typedef struct aa_planner_limits {
  int max_connections;     /* every connection, the close queue's too */
  int max_unauthenticated; /* TCP connections that have not said hello */
  int hello_timeout_ms;    /* from accept to an accepted hello */
  int frame_timeout_ms;    /* from a frame's first byte to its last */
  size_t write_queue_max;  /* bytes queued to one peer and not yet written */
  size_t input_buffer_max; /* input bytes held for all peers together (conn.c) */
  int placement_timeout_s; /* how long a job may wait for executors that are not connected */
  int max_resumes;         /* how often a job interrupted by a stop resumes */
} aa_planner_limits_t;

/* The process-group backend of CPU gangs (--cpu-backend): auto is shm on
 * one host and gloo across hosts; gloo is gloo always; shm keeps every
 * gang on one host. */
typedef enum { AA_CPU_BACKEND_AUTO = 0, AA_CPU_BACKEND_SHM, AA_CPU_BACKEND_GLOO } aa_cpu_backend_t;

typedef struct aa_planner_job aa_planner_job_t;
typedef struct aa_unrecorded aa_unrecorded_t;
typedef struct aa_relay aa_relay_t;

/* A job's wait for executors that are not connected (a queued job none can
 * take, or a started one parked): shown by status, failed by the tick after
 * placement_timeout_s. */
typedef struct aa_waiting {
  double since;                    /* aa_now() since it waits, 0 = it does not */
  int64_t since_wall;              /* the same as unix seconds, for status */
  char what[AA_STORE_HW_MAX + 192]; /* what it waits for, for status and the failure */
} aa_waiting_t;

/* A queued job, oldest first. A job that cannot be placed (no executor of
 * its hardware connected) does not hold the queue: the ones behind it go
 * first, and it fails once it has waited placement_timeout_s. */
typedef struct aa_queued {
  int64_t id;
  /* A job submitted to this planner process keeps its model as parsed and
   * written at submit, so it is parsed once per process; NULL for a job
   * loaded from the store (parsed when it starts). Owned. */
  aa_model_spec_t *spec;
  char *spec_json;
  aa_waiting_t waiting;                   /* since it could not be placed (since 0: it could be) */
  char hardware[AA_STORE_HW_MAX];         /* its hardware fingerprint, as in the store */
} aa_queued_t;

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
  int tcp;                 /* arrived on the TCP listener (a token is required there) */
  char peer[80];           /* "unix socket" or "tcp HOST:PORT", for the log */
  aa_frame_reader_t reader;
  aa_conn_role_t role;
  uint64_t id; /* executor or client id after hello, 0 before */
  double accepted_at, last_seen;
  double frame_started;  /* aa_now() of the first byte of a frame still incomplete, 0 = none */
  bool has_uid;          /* unix socket: the kernel told the peer's user */
  uid_t uid;
  bool counted_tcp; /* counted in ntcp */
  /* TCP, before hello (admit.c): its source and its places in that
   * source's list and in the planner's list of waiting connections, both
   * oldest first. src is NULL once it said hello or went. */
  struct aa_source *src;
  struct aa_conn *src_prev, *src_next, *wait_prev, *wait_next;
  size_t held;                     /* input bytes it holds (frame reader and stash), counted in input_held */
  size_t writes;                   /* write requests queued and not yet completed */
  /* Bytes of a read that its turn's budget did not reach (conn.c defer):
   * reading stops until the planner's turn handle has used them. */
  char *stash;
  size_t stash_n, stash_off;
  struct aa_conn *turn_next; /* on the planner's list of deferred connections */
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
} aa_conn_t;

/* A submit that arrived while no executor was connected: its hardware is
 * not known, and the store records a job with its hardware, so the job is
 * created (and acked) when an executor says hello. */
typedef struct aa_pending_submit {
  aa_conn_t *conn;
  aa_msg_t msg;          /* the decoded submit, owned */
  aa_model_spec_t *spec; /* its model, parsed (owned) */
  char *spec_json;       /* and written back in canonical form (owned) */
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
  uv_idle_t turn;   /* gives deferred connections their next turn */
  aa_conn_t *turns; /* connections with deferred bytes */
  uv_signal_t sig_int, sig_term, sig_hup;
  bool unix_open, tcp_open, signals_wanted, signals_open, hup_open, loop_ready, handles_closed;
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
  aa_cpu_backend_t cpu_backend;
  aa_planner_limits_t lim;
  FILE *log;
  double started; /* aa_now() at create */
  uint64_t next_executor_id, next_client_id;
  aa_conn_t *conns;   /* every connection until its close callback (dropped ones too) */
  aa_conn_t *close_q; /* connections waiting to be closed */
  int nconns;         /* allocated connections (live, closing or queued) */
  int ntcp;           /* live TCP connections */
  int ntcp_hello;     /* of them, those that have not said hello (admit.c) */
  int nclosing;       /* of nconns, those whose handle is closing (their descriptor is gone) */
  struct aa_source *sources[AA_PLANNER_SOURCE_BUCKETS]; /* sources of waiting TCP peers */
  aa_conn_t *wait_oldest, *wait_newest;                 /* TCP peers before hello, oldest first */
  size_t input_held;     /* input bytes every connection holds (frame readers, stashes) */
  double refusal_window; /* log_refusal's rate limit: start of this second */
  int refusals_logged, refusals_unlogged;
  char rbuf[AA_PLANNER_READ_BUF]; /* every connection reads into it (conn.c on_alloc) */
  aa_queued_t *queue; /* queued jobs, oldest first */
  size_t queue_n, queue_cap;
  aa_planner_job_t *cur;     /* the job being run, NULL = none */
  aa_planner_job_t *parked;  /* started jobs waiting for executors that are gone, oldest first */
  aa_unrecorded_t *unrecorded; /* job ends the store could not take yet (retried by the tick) */
  aa_pending_submit_t *pending;
  int npending;
  aa_waiter_t *waiters;
  volatile int stop_requested;
  bool stopping;
  double stop_started;
  int plans; /* `query plan`s on the thread pool (plan.c); the loop runs until they are done */
  aa_relay_t *relays; /* the stores of the running gangs (relay.c) */
  struct {
    uint64_t failures_seen;   /* aa_store_io_failures when the WAL was last truncated */
    double look_at, retry_at; /* aa_now() before which no idle look, no new try */
    bool complained;          /* a checkpoint that did not complete was logged */
  } wal;                      /* the store's WAL upkeep (wal.c) */
};

/* --- server.c --------------------------------------------------------------- */

/* One line to the planner's log: "2026-01-02T03:04:05Z planner: ...". */
void aa__planner_log(aa_planner_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs the scheduler from the loop soon (not inside the caller). */
void aa__planner_kick(aa_planner_t *p);
/* Acts on one decoded message from c (payload: its bytes, for the log). */
void aa__planner_dispatch(aa_conn_t *c, aa_msg_t *m, const void *payload, size_t n);
/* The stop is over once every connection is closed: closes the planner's
 * own handles then. */
void aa__planner_maybe_finish_stop(aa_planner_t *p);
/* The numeric host of an IPv4 or IPv6 socket address ("127.0.0.1",
 * "::1"; "?" for another family) into out, and its port (0 for another
 * family). */
int aa__planner_numeric_host(const struct sockaddr *sa, char *out, size_t n);

/* --- admit.c ----------------------------------------------------------------- */

/* The waiting slots one source may hold before its newcomers displace its
 * own oldest: max_unauthenticated / 8, at least 2. */
int aa__admit_share(const aa_planner_t *p);
/* The waiting connection a newcomer from address sa displaces: the oldest
 * silent one of its own source when that source holds its share, else the
 * oldest silent one of all when the waiting slots are taken or `full` (the
 * TCP cap) says so. NULL when none is silent or none needs to go: the
 * newcomer comes in, unless `full`, when it is refused. *source_n gets
 * how many its source holds when the victim is of that source, else 0. */
aa_conn_t *aa__admit_make_room(aa_planner_t *p, const struct sockaddr *sa, bool full, int *source_n);
/* Counts c (TCP, just accepted from sa) as waiting for its hello, newest
 * of its source and of all. AA_ENOMEM when a new source cannot be kept. */
int aa__admit_enter(aa_conn_t *c, const struct sockaddr *sa);
/* Takes c off the waiting lists (its hello was accepted, or it went);
 * a no-op for a connection that is not on them. */
void aa__admit_leave(aa_conn_t *c);

/* --- conn.c ------------------------------------------------------------------ */

/* The listeners' connection callback: accepts within the caps (a peer over
 * a cap gets an error frame and is closed, and the log says why). */
void aa__conn_on_connection(uv_stream_t *server, int status);
/* Closes peers past the hello or frame deadline; called by the tick. */
void aa__conn_check_deadlines(aa_planner_t *p, double now);
/* Encodes and queues m on c (strings borrowed); dropped when c is going
 * away. An encode failure is logged. Returns 0 or the encode error. A peer
 * whose unread bytes would pass write_queue_max is closed instead. */
int aa__conn_send(aa_conn_t *c, const aa_msg_t *m);
/* Queues an error frame answering request `id` (0 = unknown). */
void aa__conn_send_error(aa_conn_t *c, uint64_t id, int code, const char *message);
/* Answers request `id` with a reply carrying json (borrowed); an answer
 * that cannot be sent (too large for a frame) becomes an error reply. */
void aa__conn_reply(aa_conn_t *c, uint64_t id, const char *json);
/* Protocol error: one error frame, a sanitized log line, close after the
 * write. `sample` (may be NULL) is logged as hex. */
void aa__conn_fail(aa_conn_t *c, uint64_t id, int code, const char *message, const void *sample, size_t n);
/* Tears c down now (role-specific cleanup with `why` for the log and the
 * record) and puts it on the close queue. */
void aa__conn_drop(aa_conn_t *c, const char *why);
/* The same, closing only once the frames queued on c are written (the
 * error reply of a protocol error, the bye of a stop). */
void aa__conn_drop_after_writes(aa_conn_t *c, const char *why);
/* Puts c on the close queue (no teardown). */
void aa__conn_enqueue_close(aa_conn_t *c);
/* The turn handle's callback: each deferred connection acts on its next
 * AA_PLANNER_FRAMES_PER_TURN frames, and reads again once it has none left. */
void aa__conn_on_turn(uv_idle_t *h);
/* c said an accepted hello: full-size frames from now on. */
void aa__conn_admitted(aa_conn_t *c);
/* "client 3 (unix socket)" for the log, into buf. */
const char *aa__conn_name(const aa_conn_t *c, char *buf, size_t n);

/* --- registry.c -------------------------------------------------------------- */

/* The hardware fingerprint KIND:NAME:MEMORY_MiBxWORLD of a device, with
 * "@HOSTS" after it when the pool spans HOSTS > 1 hosts, the name cut (at a
 * character boundary) so the whole fits AA_STORE_HW_MAX - 1. A job's
 * hardware is its executors' device with WORLD = the pool its search may
 * use (aa__registry_pool: one host's, or every host's when its gangs span
 * hosts) and HOSTS = the hosts that pool is on (aa__registry_pool_hosts),
 * so one topology's answers are not served to another's. */
void aa__planner_pool_fingerprint(const aa_msg_device_t *d, int world, int hosts, char out[AA_STORE_HW_MAX]);
/* The same on one host: KIND:NAME:MEMORY_MiBxWORLD. */
void aa__planner_fingerprint(const aa_msg_device_t *d, int world, char out[AA_STORE_HW_MAX]);
/* The WORLD of a fingerprint, "xWORLD" or "xWORLD@HOSTS" (1 if it names
 * none). */
int aa__planner_hw_world(const char *hardware);
/* The HOSTS of a fingerprint's "xWORLD@HOSTS" (1 if it names none). */
int aa__planner_hw_hosts(const char *hardware);
/* The store's hardware description (JSON text, malloc'd, transferred): the
 * device, the pool's world and its hosts. */
char *aa__planner_hw_description(const aa_msg_device_t *d, int world, int hosts);
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
/* Whether gangs of `hardware` may span hosts: CUDA ones always (NCCL met
 * through a gloo group, "nccl-hosts"), CPU ones unless the planner runs
 * with --cpu-backend shm. */
bool aa__registry_spans(const aa_planner_t *p, const char *hardware);
/* The rendezvous backend of a gang of `kind` on `hosts` hosts: for CUDA
 * "nccl" on one host, "nccl-hosts" across hosts; for CPU "gloo" across
 * hosts or under --cpu-backend gloo, else "shm". Static text. */
const char *aa__registry_backend(const aa_planner_t *p, aa_proto_dev_kind_t kind, int hosts);
/* Live executors with e's device, e included: a new job's pool. On e's
 * host only unless its gangs span hosts (aa__registry_spans): then on every
 * host. */
int aa__registry_pool(aa_planner_t *p, const aa_conn_t *e);
/* The hosts that e's pool (aa__registry_pool) is on: 1 unless its gangs
 * span hosts. */
int aa__registry_pool_hosts(aa_planner_t *p, const aa_conn_t *e);
/* The most live executors of this hardware that one host has. */
int aa__registry_most_on_one_host(aa_planner_t *p, const char *hardware);
/* Whether the executors of `hardware` connected now, idle or busy, can
 * place a gang of `world` ranks whose host groups (the groups of the axes
 * kept inside a host, common/axis.h: the tensor groups) have `unit` ranks
 * each (aa_strategy_host_unit; a unit that does not divide world counts
 * as 1): on one host when gangs do not span hosts, else with every host
 * group inside one host. If not, why (a "not measured: it needs N
 * executors of the job's hardware ..." sentence naming what the hosts
 * have) into why. */
bool aa__registry_placeable(aa_planner_t *p, const char *hardware, int world, int unit, char *why, size_t n);
/* What a job that waits for a gang of `world` ranks in host groups of
 * `unit` needs, for status: "N executors of HW on one host (K connected)",
 * or across hosts "N executors of HW on 1 host x N, or up to G hosts x
 * unit with each tensor-parallel group of unit inside one host (K
 * connected on H hosts)". */
void aa__registry_need(aa_planner_t *p, const char *hardware, int world, int unit, char *out, size_t n);
/* Places a gang on idle executors of `hardware`: out[r] runs rank r.
 * Fewer hosts first: the host with the most idle executors takes the whole
 * gang when it has room (its executors by rank, lowest id first, as
 * before hosts mattered). Otherwise, when gangs span hosts and s is given,
 * the host groups of s's mesh (strategies/layout.h aa_layout_color) go
 * whole to the hosts with the most idle executors, as few hosts as hold
 * them all: the groups of the axes that prefer a host (common/axis.h
 * AA_HOST_PREFER: context) together with those that must keep to one
 * (tensor) when the hosts hold them, else the latter's alone. s NULL (a calibration) is placed on one host
 * only. Returns the hosts used (>= 1), 0 when no placement is possible now (out untouched or partly written),
 * or AA_ENOMEM. */
int aa__registry_place(aa_planner_t *p, const char *hardware, const aa_strategy_t *s, int world,
                       aa_conn_t **out);
/* Places a calibration gang of `world` ranks across hosts: rank r on the
 * next host in turn with an idle executor of `hardware` (oldest first), so
 * consecutive ranks sit on different hosts and every group the
 * calibration splits off (ranks 0..t-1) spans them. Returns the hosts
 * used, 0 when fewer than 2 hosts have idle executors or fewer than world
 * are idle (nothing placed), or AA_ENOMEM. */
int aa__registry_place_across(aa_planner_t *p, const char *hardware, int world, aa_conn_t **out);
/* The executors by host for status: [{"host", "executors": [{"id",
 * "device" (its fingerprint, x1), "state" ("idle"|"busy"), "run" (null
 * when idle)}]}], executors by id (the order they connected) and hosts in
 * the order of their first executor. A new
 * reference (NULL on no memory). */
json_t *aa__registry_hosts_json(aa_planner_t *p);
/* The executor with this id, NULL if gone. */
aa_conn_t *aa__registry_find(aa_planner_t *p, uint64_t id);

/* --- relay.c --------------------------------------------------------------------- */

/* The bounds of one gang run's store (docs/service.md "Relay"): keys
 * AA_RELAY_KEYS_PER_RANK x world + AA_RELAY_KEYS_EXTRA, bytes of keys and
 * values AA_RELAY_BYTES_BASE + world x AA_RELAY_BYTES_PER_RANK up to
 * AA_RELAY_BYTES_MAX, and gets waiting at once per rank. */
#define AA_RELAY_KEYS_PER_RANK 4
#define AA_RELAY_KEYS_EXTRA 16
#define AA_RELAY_BYTES_BASE ((size_t)1 << 20)
#define AA_RELAY_BYTES_PER_RANK ((size_t)256 << 10)
#define AA_RELAY_BYTES_MAX ((size_t)64 << 20)
#define AA_RELAY_PENDING_MAX 16

/* Opens the store of run `run` of job `job`, whose gang is the executors
 * executors[0..world) by rank (copied): only they may set and get its
 * keys. *out (owned by the caller, aa__relay_close) is set only on success;
 * AA_ENOMEM otherwise. */
int aa__relay_open(aa_planner_t *p, int64_t job, int64_t run, int world, const uint64_t *executors,
                   aa_relay_t **out);
/* Opens the store of the job's gang just dispatched (j->ranks, j->world
 * > 1; nothing for a single rank) into j->relay; a failure is logged and
 * leaves j->relay NULL: a gang that needs the store then fails its join. */
void aa__relay_open_gang(aa_planner_t *p, aa_planner_job_t *j);
/* Drops the store and its keys; gets still waiting end unanswered (logged).
 * NULL is a no-op. */
void aa__relay_close(aa_relay_t *r);
/* A kv_set or kv_get from executor c: refused with an error frame (EPERM)
 * unless c is a rank of a run with an open store, or when the store is full
 * or the key already set with another value (EINVAL); a rank with
 * AA_RELAY_PENDING_MAX gets waiting is closed as for a protocol error. */
void aa__relay_on_message(aa_conn_t *c, const aa_msg_t *m);

/* --- jobs.c and job_run.c ---------------------------------------------------------- */

typedef enum { AA_PHASE_SEARCH = 0, AA_PHASE_TRAIN } aa_job_phase_t;

/* jobs.c: the queue, submits, cancel, waiting clients, placement. */
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
/* Starts or advances jobs as executors allow: the current job first, then
 * a parked one whose executors are back, then the oldest queued job that
 * can be placed. */
void aa__jobs_schedule(aa_planner_t *p);
/* Fails jobs that waited past placement_timeout_s, writes job ends the
 * store did not take before and keeps the store's WAL small
 * (aa__wal_tick); called by the tick. */
void aa__jobs_tick(aa_planner_t *p);
/* Loads queued jobs from the store at start-up. */
int aa__jobs_load_queue(aa_planner_t *p);
/* Stop: the running job is interrupted (its run cancelled), and so are
 * parked ones; they resume at the next start (aa_store_recover). */
void aa__jobs_interrupt(aa_planner_t *p);
/* The running job's id, 0 = none. */
int64_t aa__jobs_current_id(const aa_planner_t *p);
/* Adds what the planner knows beyond the store to a JOB object (borrowed,
 * modified): "waiting" {"for", "since"} while it waits for executors, and
 * the status and error of an end the store has not taken yet. */
void aa__jobs_annotate(aa_planner_t *p, json_t *job);
/* The jobs waiting for executors, as [{"job", "for", "since"}] (new reference). */
json_t *aa__jobs_waiting(aa_planner_t *p);
/* Frees the queue, the current and parked jobs, pending submits, waiters
 * and unrecorded ends. */
void aa__jobs_free(aa_planner_t *p);
/* Ends job j (the current or a parked one): records `status` in the store
 * unless `recorded`, answers its waiting clients, frees j. A store that
 * cannot take the end keeps it in p->unrecorded. */
void aa__jobs_end(aa_planner_t *p, aa_planner_job_t *j, aa_store_job_status_t status, const char *error,
                  bool recorded);
/* Keeps an end (and a run result, may be NULL) the store refused. */
void aa__jobs_unrecorded(aa_planner_t *p, int64_t job, aa_store_job_status_t status, int64_t best_run,
                         bool from_store, const char *error, int64_t run, const aa_store_run_result_t *res);
/* Sends m to every client waiting for job `job`. */
void aa__jobs_relay(aa_planner_t *p, int64_t job, const aa_msg_t *m);
/* Sets the current job aside: its next run needs a gang of `world`
 * executors of its hardware in tensor groups of `tp` that the connected
 * hosts cannot place (aa__registry_placeable). */
void aa__jobs_park(aa_planner_t *p, int world, int unit);

/* outdir.c: a submit's out_dir. */
/* Whether a job of user `owner` may name `dir` as its out_dir: an existing
 * directory must belong to owner (any is fine for root); a missing one is
 * fine when the planner, which then makes it, runs as owner or owner is
 * root. AA_EPERM says whose it is. */
int aa__out_dir_check(const char *dir, uid_t owner);
/* Writes s as <out_dir>/strategy.json through a descriptor of the job's
 * out_dir checked to belong to the job's user, never following a symlink. */
int aa__out_dir_write_strategy(const aa_planner_job_t *j, const aa_strategy_t *s);

/* job_run.c: one job's life. */
/* Takes the queued job `row` onto executor e's hardware as p->cur: answers
 * it from the store, or resumes or enumerates its search, and advances it.
 * spec and spec_json (both transferred, may be NULL: then the job's stored
 * options are parsed) are its model as parsed at submit. */
void aa__job_begin(aa_planner_t *p, const aa_store_job_t *row, aa_conn_t *e, aa_model_spec_t *spec,
                   char *spec_json);
/* Moves the current job on as far as it can go now. */
void aa__job_advance(aa_planner_t *p);
/* Ends the current job's running run as `status` with `why` and tells its
 * executors to stop it; they stay busy until they report. */
void aa__job_stop_run(aa_planner_t *p, aa_store_run_status_t status, const char *why);
/* Frees a job object. */
void aa__job_free(aa_planner_job_t *j);

/* --- wal.c ------------------------------------------------------------------------ */

/* A planner with no job running truncates a WAL larger than this (a job
 * writes about 100 to 500 KiB of it), looks at the file once every
 * AA_PLANNER_WAL_EVERY_S at most, and tries a checkpoint that could not
 * complete again that much later. */
#define AA_PLANNER_WAL_IDLE_BYTES (1 << 20)
#define AA_PLANNER_WAL_EVERY_S 5

/* Truncates the store's WAL once a write error has cleared, and while no
 * job runs once it is past AA_PLANNER_WAL_IDLE_BYTES; never waits for
 * other connections. Called by the tick (through aa__jobs_tick). */
void aa__wal_tick(aa_planner_t *p);

/* --- search.c -------------------------------------------------------------------- */

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
  double tokens_per_s; /* measured ok: the mean of its ok measurements */
  int retries; /* dry runs tried again after their executor vanished */
  int tier;    /* --from: its distance from the start (which goes ahead of any prediction); else 0 */
  double predicted; /* the calibrated model's tokens/s before the refit (predict.h), 0 = none */
  double corr, err; /* its refit: the correction its class's (layout and micro-batch) measurements
                       give, else its layout's, else aa_search_t's; the error, widened for a class
                       not yet measured (search.c refit); 1 and 0 before any */
  /* Its measurements (the first dry run and the re-measures in fresh processes): */
  int measures;        /* dry runs of it that ended (ok or not) */
  int oks;             /* of them ok */
  double sum, lo, hi;  /* ok tokens/s: sum, lowest, highest */
  double spread;       /* the largest relative step-time spread of its ok runs */
  int64_t best_run_id; /* the run of its highest ok measurement */
} aa_cand_t;

/* --from: how many knobs a candidate may differ in from the strategy the
 * search starts from. */
#define AA_SEARCH_FROM_RADIUS 2
/* The refit's error, as a share of the corrected prediction, is at least
 * this: with two or more runs measured the spread of their ratios says how
 * far the model is off, but a ratio spread below the step-time noise of one
 * dry run (a few % on a shared CPU) is luck, not accuracy. */
#define AA_SEARCH_ERROR_FLOOR 0.05
/* With one run measured there is no spread of ratios at all: the correction
 * is that one run's ratio, which carries the run's own noise (two
 * measurements of one strategy on the bundled example differ by a median
 * 15 % on one CPU executor: docs/service.md "Jobs" step 4), so the bound
 * allows 25 % and one lucky run cannot stop the search. */
#define AA_SEARCH_ERROR_FLOOR_ONE 0.25
/* Re-measures in fresh processes of each leading candidate at most, and
 * leaders (the best included) re-measured at most. */
#define AA_SEARCH_REMEASURE 2
#define AA_SEARCH_LEADERS_MAX 3

typedef struct aa_search {
  aa_cand_t *c;
  size_t n;
  int nsettings;
  double *setting_best; /* the best ok tokens/s of each setting so far (early stop) */
  double *setting_spread; /* that run's relative step-time spread */
  int *setting_mb;      /* its micro-batch */
  char (*setting_stop)[256]; /* non-empty: the setting stopped, why */
  int dispatched;       /* dry runs sent */
  int valid;            /* candidates that passed resolve */
  int predicted_oom;    /* of them, pruned for memory before any run */
  uint64_t memory;      /* bytes per device, 0 = unknown */
  double peak_flops;    /* per device (hello's peak bf16), 0 = unknown: the peak bound is off */
  double best;          /* the highest ok tokens/s so far */
  aa_arch_t arch;
  int global_batch;     /* the spec's: a candidate's micro-batches a step, for its pipeline bubble */
  bool cuda;            /* the pool's devices are GPUs (the dominance rule) */
  bool exhaustive;
  int max_dryruns;      /* 0 = no limit */
  double deadline;      /* aa_now() seconds, 0 = none */
  int time_limit_s;
  bool calibrated;   /* candidates carry predictions (aa__search_set_prediction) */
  int fitted;        /* ok candidates with a prediction: the refit's sample */
  double correction; /* median of measured / predicted over them (1 before any); a candidate's own
                        (aa_cand_t.corr) is its class's median once its class has runs */
  double error;      /* max |measured / (predicted x its class's correction) - 1| over them, floored;
                        aa_cand_t.err widens it for a class not yet measured */
  int bound_pruned;  /* candidates the stop rule dropped */
} aa_search_t;

/* Enumerates the strategies for the spec on a pool of `devices` executors
 * of kind `dev_kind` (on one host, or on several: the planner prunes what
 * its hosts cannot place, job_run.c) with `memory` bytes each (0 = unknown)
 * in dry-run order, leaving out the `exclude` bits: the space of
 * strategies/space.h, every gang of dp x tp ranks up to `devices` (dp
 * dividing the global batch, sequence parallelism off and on at tp > 1),
 * ZeRO 0-3 at dp > 1 with every precision. Invalid ones
 * (aa_strategy_resolve fails, e.g. a tp that does not divide n_head, or one
 * this engine does not run yet) come back AA_CAND_PRUNED with the rule,
 * and so do those whose predicted bytes per rank (strategies/cost.h, a
 * lower bound) exceed `memory`, with the figures. A setting that misses a
 * method of the `include` set (strategies/space.h aa_space_include_set) is
 * not enumerated, as the excluded ones are not. With `from` (borrowed, a
 * strategy resolved against spec, NULL = none), the candidates are `from`
 * first, then the others at most AA_SEARCH_FROM_RADIUS knobs from it
 * (aa_space_distance), nearest first; the rest are not enumerated. */
int aa__search_enumerate(aa_search_t *s, const aa_model_spec_t *spec, int devices, aa_proto_dev_kind_t dev_kind,
                         uint64_t memory, unsigned exclude, unsigned include, const aa_strategy_t *from);
void aa__search_free(aa_search_t *s);
/* The next candidate to dry-run, or -1 when the search is over. Pending
 * ones the search drops on the way (early stop, a strategy that does at
 * least the work of one measured ok or skipped, one that could not beat
 * the best even at peak_flops, max_dryruns, time limit)
 * become AA_CAND_PRUNED with the reason; the caller records them.
 * Unless exhaustive: then only the limits prune. */
int aa__search_next(aa_search_t *s, double now);
/* The cost model's tokens/s for candidate i, refitted to what was measured:
 * the per-device FLOP rate (tokens/s x aa_cost_flops_per_token / dp, that
 * function counting a rank's FLOPs per token of its replica) of the most
 * similar run measured ok so far (distance: another precision 4, another dp
 * or tp 2 each, another ZeRO stage, checkpointing mode or sequence
 * parallelism 1 each, plus |log2| of the dp, tp and micro-batch ratios; the
 * later of equals), times i's dp over i's FLOPs per token. 0 before any ok
 * run. */
double aa__search_predict(const aa_search_t *s, int i);
/* Gives candidate i the calibrated model's tokens/s (predict.h, > 0):
 * from then on the search dry-runs the highest predicted first (after the
 * --from tiers), refits the model after each ok run (correction and error
 * above) and, unless exhaustive, stops once no pending candidate's
 * optimistic bound predicted x correction x (1 + error) beats the best
 * measured, pruning them with the figures. */
void aa__search_set_prediction(aa_search_t *s, int i, double tokens_per_s);
/* The candidate to measure again in a fresh process once the pass is over
 * (aa__search_next returned -1), or -1 when the winner is decided or the
 * budget (AA_SEARCH_REMEASURE each, max_dryruns, the time limit) is spent.
 * The winner is the ok candidate of highest mean; another is a leader
 * while the winner's mean is not above its mean by more than their noise
 * (aa__search_noise of both, the larger); the winner is decided when no
 * leader is left. An exhaustive search measures each candidate once and
 * re-measures none (its verdict still weighs the noise). The re-measure is
 * dispatched as a dry run and reported with aa__search_done, which adds
 * the measurement to the candidate's mean. */
int aa__search_remeasure_next(aa_search_t *s, double now);
/* A candidate's noise: the larger of its runs' relative step-time spread
 * and the range of its ok measurements over their mean. */
double aa__search_noise(const aa_cand_t *c);
/* The winner (highest mean of ok measurements; -1 = none) and, into out,
 * how sure the search is of it: "best K: 1.07× the runner-up R (beyond
 * the spread of 3 %)" or "best K, within the noise of R (1.01×, spread
 * 4 %): kept the faster mean", or "best K, the only strategy measured ok". */
int aa__search_verdict(const aa_search_t *s, char *out, size_t n);
/* Prunes every pending candidate with `reason`: the search is over. */
void aa__search_stop(aa_search_t *s, const char *reason);
/* Records a finished dry run of candidate i (the early-stop rule): a
 * smaller micro-batch that measured slower than the best of its setting
 * stops the setting, but only when it is slower by more than the larger of
 * the two runs' relative step-time spreads ((max - min) / median of the
 * measured steps; 0 = unknown), and the reason says by how much. */
void aa__search_done(aa_search_t *s, int i, aa_store_run_status_t status, double tokens_per_s, double spread);

/* --- report.c --------------------------------------------------------------------- */

/* RUN (docs/service.md). Returns a new reference, NULL on no memory. */
json_t *aa__report_run(const aa_store_run_t *r);
/* JOB of the store's job `id`; home gives the strategy file path.
 * AA_ENOENT "job N: not found". *out is a new reference. */
int aa__report_job(aa_store_t *st, const char *home, int64_t id, json_t **out);
/* The best run of a job as RUN or json_null(). */
json_t *aa__report_run_or_null(aa_store_t *st, int64_t run_id);
/* The answer to a `query` as JSON text (malloc'd, transferred). AA_EINVAL
 * naming an unknown what, argument or a wrong type. Lists come in pages
 * (AA_PLANNER_PAGE_RUNS, _JOBS rows at most, "next_offset" to go on); rows
 * the store cannot read are named under "unreadable" (runs) or as JOB
 * {"id", "error"} (jobs). p (may be NULL) annotates JOB objects. */
int aa__report_query(aa_store_t *st, const char *home, const char *what, const char *args, char **out,
                     aa_planner_t *p);
/* The planner-wide status (text, malloc'd, transferred). */
int aa__report_status(aa_planner_t *p, char **out);
/* The path of a model's strategy file under home: <home>/strategies/<name>-<hash>.json,
 * the name reduced to [A-Za-z0-9._-]. */
void aa__report_strategy_path(const char *home, const char *name, const char *hash, char *out, size_t n);
/* Dumps a JSON value compactly (malloc'd, transferred; NULL on no memory). */
char *aa__report_dump(const json_t *v);
/* The argument checks of the query handlers (report.c, plan.c), each naming
 * the query `what` in its AA_EINVAL message: every key of args is one of
 * `allowed` (NULL-terminated); a string argument is absent (*out NULL) or
 * non-empty; an integer one absent (*out 0) or in min..max. */
int aa__query_check_keys(const char *what, const json_t *args, const char *const *allowed);
int aa__query_get_str(const char *what, const json_t *args, const char *arg, const char **out);
int aa__query_get_int(const char *what, const json_t *args, const char *arg, long long min, long long max,
                      long long *out);

/* --- plan.c ---------------------------------------------------------------------- */

struct aa_predict;

/* The answer to `query plan` (docs/service.md "Plan"): the best strategies
 * of a pool that need not be connected, predicted from the stored
 * calibration of its kind of device, with no dry run. args (borrowed):
 * {"model": spec object or text, "pool": {"kind": "cpu"|"cuda", "devices":
 * 1..4096}, "device": a device fingerprint (optional), "top": 1..1000
 * (default 5), "separate_hosts": bool}. Fills out (borrowed) with
 * "calibration", "pool", "assumptions", the counts and "strategies".
 * AA_EINVAL for bad arguments, a model the spec rules refuse or a pool of
 * more candidates than a plan predicts, AA_ENOENT when no calibration of
 * the kind (or device) is stored, saying which job measures one. The
 * synchronous form, on the calling thread (tests, aa__report_query); the
 * planner's clients get aa__plan_start's. */
int aa__plan_query(aa_store_t *st, const json_t *args, json_t *out);

/* Answers client c's `query plan` (request req, args JSON text or NULL)
 * without holding up the loop: the arguments and the calibration are read
 * here, the enumeration and the predictions run on libuv's thread pool,
 * and the reply or the error is sent from the loop when they are done, if
 * the client is still connected (it is found again by its id). At most
 * AA_PLANNER_PLANS plans at a time; another is refused at once. Never
 * fails: every error is sent to the client. */
void aa__plan_start(aa_conn_t *c, uint64_t req, const char *args);

/* The step-time model's breakdown of one prediction, as runs.predicted_json
 * holds it (docs/store.md): {"forward_ms", "backward_ms", "tensor_comm_ms",
 * "pipeline_comm_ms", "context_comm_ms", "bubble_ms", "optimizer_ms",
 * "data_comm_ms", "ops_estimated", "links_estimated"}, and "moe_imbalance"
 * when the expert ranks were timed past even routing. A new reference,
 * NULL on no memory. */
json_t *aa__plan_breakdown(const struct aa_predict *p);

/* --- calib_io.c ------------------------------------------------------------------ */

/* The answer to `query calib_export` (docs/service.md "Export and
 * import"): args (borrowed) {"device": a device fingerprint, or "cpu" or
 * "cuda" for the device `query plan` takes for that kind without one}.
 * Fills out (borrowed) with "device", "calibrations" ([{"backend",
 * "measured_at"}]) and "file", the text of the calibration file of every
 * stored row of that device, links between hosts included, in backend
 * order. AA_EINVAL for bad arguments, AA_ENOENT when none is stored. */
int aa__calib_export_query(aa_store_t *st, const json_t *args, json_t *out);

/* Acts on client c's calib_import m: checks the file with
 * aa_calib_file_parse, refuses it whole when it would replace a stored
 * calibration measured later than its own and m is not forced, else
 * stores every entry (aa_store_calib_import) and replies with
 * {"calibrations": [{"device", "backend", "measured_at", "replaced": the
 * replaced row's measured_at or null}], "forced"}. Every refusal is an
 * error echoing m's id, naming the field or the row; nothing is stored
 * then. */
void aa__calib_on_import(aa_conn_t *c, const aa_msg_t *m);

/* --- the jobs' state (after aa_search_t, which a job holds) ----------------------------------- */

/* One rank of the running run's gang. */
typedef struct {
  uint64_t executor;   /* the executor that runs it */
  bool done;           /* its result came, or its executor died */
  int order;           /* 1 for the first rank to end, 2 for the next, ... */
  aa_msg_result_t res; /* its result; res.error and res.calib owned, res.key unused */
} aa_gang_rank_t;

/* A job the planner has started: the current one, or a parked one. */
struct aa_planner_job {
  int64_t id;
  aa_model_spec_t spec;
  char *model_json; /* the spec as sent to executors (aa_spec_to_json) */
  char hash[AA_STORE_HASH_MAX];
  char hardware[AA_STORE_HW_MAX];
  bool train, refresh, exhaustive;
  int time_limit_s, max_dryruns;
  unsigned exclude;
  unsigned include;          /* aa_space_include_set of the submit's include */
  bool has_from;             /* the submit gave a strategy to start from: */
  aa_strategy_t from;        /* it, resolved against spec */
  char out_dir[AA_PATH_MAX]; /* "" = none given */
  bool has_owner;            /* the submitting user is known (out_dir belongs to them) */
  uid_t owner;
  aa_job_phase_t phase;
  aa_search_t search;
  int cand;          /* the candidate being dry-run */
  int64_t run_id;    /* the run being executed, 0 = none */
  char run_key[AA_STRATEGY_KEY_MAX];
  int run_index;     /* dry run index (1-based) of the running one */
  int64_t best_run;
  bool from_store;
  aa_strategy_t best; /* with provenance, for training */
  bool waiting_logged;
  aa_proto_dev_kind_t dev_kind; /* of its executors: the rendezvous backend */
  /* The running run's gang (world ranks, world 1 for one device): results
   * are collected per rank and the run is finished by advance() once all
   * are in, never inside the callback that brought the last one. */
  aa_gang_rank_t *ranks;
  aa_relay_t *relay; /* its store when world > 1 (relay.c), NULL otherwise */
  int world, ndone;
  bool aborted;        /* the ranks still running were told to stop */
  bool lost_executor;  /* a rank ended because its executor vanished, not the strategy */
  bool train_retried;  /* its training run was tried again once already */
  /* The calibrate phase (docs/service.md "Jobs" step 4): before its first
   * dry run the job looks up the calibration of its device and, when that
   * lacks what the model or the pool needs, has its pool measure one. The
   * measuring gang is no run of the store: while it is out, calibrating
   * is set and run_id is calib_run_id (job_run.c). */
  struct aa_calib *calib; /* the calibration the predictions come from (owned), NULL = none */
  bool calib_wanted;      /* the stored one is missing or lacks something: measure */
  bool calib_over;        /* the phase is over (with a calibration or without) */
  bool calibrating;       /* the running gang is the calibration */
  /* MoE: the router load imbalance the model's runs measured
   * (strategies/predict.h aa_predict_imbalance), the mean over moe_runs of
   * them, the store's earlier ones (job_run.c moe_seed) and this job's
   * ok dry runs (moe_observed); the predictions take it in place of
   * AA_PREDICT_MOE_IMBALANCE. 0 = none yet. */
  double moe_imbalance;
  int moe_runs;
  /* Across hosts (a CPU pool whose gangs span hosts): the device's links
   * between hosts, measured by a gang with a rank on every host in turn
   * over gloo and stored as the device's "gloo" calibration. */
  struct aa_calib *calib_inter; /* owned, NULL = none */
  /* A CUDA device the catalogue has a profile of (strategies/profile.h
   * aa_profile_for_device): op shapes and collectives the calibration lacks
   * are timed from it, refitted to the calibration (roofline.h), as `plan
   * --pool PROFILE:N --calib` does. Both owned, NULL = none. */
  struct aa_device_profile *profile;
  struct aa_roofline *roof;
  bool inter_wanted;            /* the pool spans hosts and calib_inter lacks a group size */
  bool calibrating_inter;       /* the running calibration is the one across hosts */
  char calib_what[160];   /* what it measures, for the log */
  double calib_started;   /* aa_now() when it was sent */
  char verdict[512];      /* aa__search_verdict of the search's pick */
  /* Parked: its next run needs executors that are not connected. */
  aa_waiting_t waiting;   /* since 0 = not parked; while its executors are back, since is the last tick */
  int need_world;         /* the gang it waits for: its ranks */
  int need_unit;          /* and their host groups' size (aa__registry_placeable) */
  aa_planner_job_t *next; /* on p->parked */
};

/* A job's end that the store has not taken (a full disk): kept, reported
 * as the truth to clients, and written when the store takes it. */
struct aa_unrecorded {
  int64_t job;
  aa_store_job_status_t status;
  int64_t best_run;
  bool from_store;
  char error[AA_PROTO_TEXT_MAX + 256];
  int64_t run; /* a run whose result was not recorded either, 0 = none */
  aa_store_run_result_t run_result; /* its figures; error and peak_json point into run_error / NULL */
  char run_error[AA_PROTO_TEXT_MAX + 1];
  aa_unrecorded_t *next;
};

#endif
