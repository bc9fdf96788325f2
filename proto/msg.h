/* Protocol messages: one msgpack map per frame carrying `v` (protocol
 * version), `t` (type name), an optional request id `id`, and the fields of
 * the type. docs/protocol.md lists every message, field, type and range.
 *
 * Decoding is strict: the payload must be exactly one map, `v` must be
 * AA_PROTO_VERSION, `t` a known type, every field of the right msgpack type
 * and within its range, strings valid UTF-8 without NUL and within their cap,
 * required fields present, no unknown or duplicate keys, no trailing bytes.
 * Unknown keys are rejected rather than ignored: a peer that sends a field
 * we do not know expects behaviour we would silently not give, so a change
 * of fields is a change of AA_PROTO_VERSION. Encoding applies the same rules,
 * so a message that encodes is a message the peer accepts.
 *
 * Depends on common/ and msgpack-c only (no libuv): bytes in, bytes out. */
#ifndef AA_MSG_H
#define AA_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/axis.h"
#include "frame.h"

/* Limits (bytes for strings, entries for lists). */
#define AA_PROTO_NAME_MAX 255          /* device name, host, query name, rendezvous, token */
#define AA_PROTO_PHASE_MAX 64          /* progress phase */
#define AA_PROTO_TEXT_MAX 4096         /* error message, error text, reasons */
#define AA_PROTO_JSON_MAX AA_FRAME_MAX /* model spec, strategy, query args, reply */
#define AA_PROTO_PATH_MAX 4096         /* submit.out_dir, job.out_dir */
#define AA_PROTO_KEY_MAX 127           /* strategy key (progress.key, result.key) */
#define AA_PROTO_EXCLUDE_MAX 64        /* submit.exclude and submit.include entries */
#define AA_PROTO_METHOD_MAX 64         /* bytes per submit.exclude or submit.include entry */
#define AA_PROTO_ID_MAX INT64_MAX      /* ids are 1..2^63-1 so they fit an SQLite integer */
#define AA_PROTO_BYTES_MAX INT64_MAX
#define AA_PROTO_STEPS_MAX (UINT64_C(1) << 40)
#define AA_PROTO_TIME_LIMIT_MAX (366 * 24 * 3600) /* seconds */
#define AA_PROTO_WORLD_MAX 4096
#define AA_PROTO_DEVICE_INDEX_MAX 1023 /* device.index: the CUDA ordinal */

/* A device as an executor's --device and the CLI's --devices name it:
 * "cpu" (or NULL) is *cuda = -1, "cuda:N" (N = 0..AA_PROTO_DEVICE_INDEX_MAX)
 * is N; anything else AA_EINVAL, naming the forms. */
int aa_proto_parse_device(const char *device, int *cuda);
#define AA_PROTO_DEPTH_MAX 4    /* nesting of maps/arrays, the top map is depth 1 */
#define AA_PROTO_ITEMS_MAX 1024 /* values in one message (keys, values, list entries) */
/* kv_set, kv_get, kv_value: the store a gang's ranks meet through (comm/comm.h
 * AA_COMM_STORE_KEY_MAX and AA_COMM_STORE_VALUE_MAX; the executor asserts
 * they agree). Keys are 1..200 bytes of [A-Za-z0-9_./-]. */
#define AA_PROTO_KV_KEY_MAX 200
#define AA_PROTO_KV_VALUE_MAX 65536
/* calib_import.json: a calibration file (strategies/calib_file.h
 * AA_CALIB_FILE_MAX; the planner asserts they agree). */
#define AA_PROTO_CALIB_FILE_MAX (4u << 20)

typedef enum {
  AA_MSG_NONE = 0,
  AA_MSG_HELLO,     /* peer -> planner: role, device, token */
  AA_MSG_WELCOME,   /* planner -> peer: accepted, assigned peer id */
  AA_MSG_HEARTBEAT, /* either way: still alive (executor: the job it runs) */
  AA_MSG_BYE,       /* either way: orderly close */
  AA_MSG_SUBMIT,    /* client -> planner: a model to search (and train) */
  AA_MSG_ACK,       /* planner -> client: request accepted (submit: the job id) */
  AA_MSG_JOB,       /* planner -> executor: one dry run or training run (one rank of a gang) */
  AA_MSG_PROGRESS,  /* executor -> planner -> client: step progress of a run */
  AA_MSG_RESULT,    /* executor -> planner: outcome of a run */
  AA_MSG_CANCEL,    /* client -> planner, planner -> executor: stop a job */
  AA_MSG_ABORT,     /* planner -> executors of a gang: a rank failed, stop this run now */
  AA_MSG_STATUS,    /* client -> planner: planner or job status (reply: REPLY) */
  AA_MSG_QUERY,     /* client -> planner: named query with JSON arguments (reply: REPLY) */
  AA_MSG_REPLY,     /* planner -> client: JSON text answering `id` */
  AA_MSG_ERROR,     /* either way: code + message; after a bad frame the sender closes */
  AA_MSG_KV_SET,    /* executor -> planner: a rank of a gang stores a key of its run's store */
  AA_MSG_KV_GET,    /* executor -> planner: a rank asks for a key (answered by KV_VALUE once set) */
  AA_MSG_KV_VALUE,  /* planner -> executor: the value of a key a KV_GET asked for */
  /* client -> planner: calibrations another planner exported, to store (reply: REPLY) */
  AA_MSG_CALIB_IMPORT,
  AA_MSG_TYPE_COUNT
} aa_msg_type_t;

typedef enum { AA_PROTO_ROLE_EXECUTOR = 0, AA_PROTO_ROLE_CLIENT = 1 } aa_proto_role_t;
typedef enum { AA_PROTO_DEV_CPU = 0, AA_PROTO_DEV_CUDA = 1 } aa_proto_dev_kind_t;
/* calibrate: time the model's ops and the gang's collectives (dryrun/calibrate.h);
 * the job's strategy is the default one, its steps unused. */
typedef enum { AA_PROTO_JOB_DRYRUN = 0, AA_PROTO_JOB_TRAIN = 1, AA_PROTO_JOB_CALIBRATE = 2 } aa_proto_job_kind_t;
typedef enum {
  AA_PROTO_RUN_OK = 0,
  AA_PROTO_RUN_OOM,
  AA_PROTO_RUN_ERROR,
  AA_PROTO_RUN_TIMEOUT,
  AA_PROTO_RUN_CRASHED,
  AA_PROTO_RUN_CANCELLED,
} aa_proto_run_status_t;

/* In every struct below, strings are NUL-terminated. In a decoded message
 * they are owned by the message (aa_msg_free); in a message built for
 * aa_msg_encode they are borrowed. Optional fields: NULL string, 0 number,
 * false bool or empty list means absent, except where a has_* flag says. */

typedef struct aa_msg_strlist {
  char **v;
  size_t n;
} aa_msg_strlist_t;

typedef struct aa_msg_device {
  aa_proto_dev_kind_t kind; /* "cpu" | "cuda" */
  char *name;               /* 1..255 bytes, e.g. "NVIDIA H200" */
  int index;                /* device ordinal (cuda:N), 0..1023 */
  uint64_t memory;          /* bytes, 1..2^63-1 */
  char *host;               /* 1..255 bytes */
  int pid;                  /* executor process id, 1..2^31-1 */
  /* cuda only: required for cuda, absent for cpu */
  int sm_count;           /* 1..65535 */
  int cc_major, cc_minor; /* compute capability, 1..99 and 0..99 */
  double peak_bf16_flops; /* 1..1e20; 0 = absent: the executor does not know the architecture's rate */
} aa_msg_device_t;

typedef struct aa_msg_hello {
  aa_proto_role_t role; /* "executor" | "client" */
  bool has_device;      /* required for executors, absent for clients */
  aa_msg_device_t device;
  char *token; /* optional, 1..255 bytes; compare with aa_proto_token_equal */
} aa_msg_hello_t;

typedef struct aa_msg_welcome {
  uint64_t peer_id; /* 1..2^63-1: the executor or client id the planner assigned */
  int heartbeat_ms; /* 100..3600000: send a heartbeat at least this often */
} aa_msg_welcome_t;

typedef struct aa_msg_heartbeat {
  uint64_t job; /* optional: the job the executor is running */
} aa_msg_heartbeat_t;

typedef struct aa_msg_bye {
  char *reason; /* optional, <= 4096 bytes */
} aa_msg_bye_t;

typedef struct aa_msg_submit {
  char *model;              /* model spec JSON text, 1..AA_PROTO_JSON_MAX bytes */
  bool wait;                /* reply with the outcome when the job ends */
  bool train;               /* train with the best strategy after the search */
  bool refresh;             /* measure again even if the store has results */
  int time_limit_s;         /* search time limit, 0 = none, <= AA_PROTO_TIME_LIMIT_MAX */
  aa_msg_strlist_t exclude; /* methods not to search, <= 64 entries of 1..64 bytes */
  int max_dryruns;          /* 0 = no limit, <= 1000000 */
  bool exhaustive;          /* measure every valid strategy, no search shortcuts */
  char *out_dir;            /* optional absolute directory for the strategy file and training outputs */
  aa_msg_strlist_t include; /* methods every candidate must use, <= 64 entries of 1..64 bytes */
  char *from;               /* optional strategy JSON (aa_strategy_to_json) whose neighbourhood to search first,
                               1..AA_PROTO_JSON_MAX bytes */
} aa_msg_submit_t;

typedef struct aa_msg_ack {
  uint64_t job; /* optional: the job id a submit created */
} aa_msg_ack_t;

typedef struct aa_msg_job {
  uint64_t job, run;        /* 1..2^63-1 */
  aa_proto_job_kind_t kind; /* "dryrun" | "train" | "calibrate" */
  char *model;              /* model spec JSON text */
  char *strategy;           /* strategy JSON text (aa_strategy_to_json / aa_strategy_parse) */
  uint64_t warmup_steps;    /* 0..2^40 */
  uint64_t measured_steps;  /* 1..2^40 (train: the training steps) */
  int time_limit_s;         /* 0 = none */
  uint64_t memory_limit;    /* bytes, 0 = none */
  int rank, world;          /* this executor's rank in the gang, 0..world-1; world 1..4096 */
  char *rendezvous;         /* <= 255 bytes: where the gang meets; required when world > 1 */
  char *out_dir;            /* optional, <= 4096 bytes: train jobs write checkpoints and logs here */
  bool has_owner;           /* owner is given */
  uint64_t owner;           /* optional, 0..2^32-2: the uid that must own out_dir (the submitter) */
} aa_msg_job_t;

typedef struct aa_msg_progress {
  uint64_t job, run;
  uint64_t step, total; /* 0..total, total 1..2^40 */
  double tokens_per_s;  /* 0..1e12 */
  double loss;          /* finite */
  char *phase;          /* 1..64 bytes: "warmup", "measure", "train", ... */
  /* Filled by the planner when it relays progress to a client: */
  char *key;             /* optional, <= 127 bytes: the strategy key of the run */
  uint64_t index, count; /* optional: dry run `index` (1-based) of `count`; 0 = absent */
} aa_msg_progress_t;

typedef struct aa_msg_peak {
  uint64_t params, grads, optim, acts, workspace, total; /* bytes, 0..2^63-1 */
} aa_msg_peak_t;

/* Where one rank's step time goes, in milliseconds (the engine's
 * aa_time_kind_t, engine/train.h, in the same order; the planner, which
 * never includes the engine, names them from here): forward, backward,
 * optimizer, pipeline communication, pipeline wait (the bubble) and the
 * expert group's all-to-alls. The last is optional on the wire (absent =
 * 0, and omitted when 0): an executor of an earlier build folds it into
 * forward and backward, and a planner of an earlier build still takes a
 * dense model's results. */
typedef enum {
  AA_PROTO_TIME_FORWARD = 0,
  AA_PROTO_TIME_BACKWARD,
  AA_PROTO_TIME_OPTIMIZER,
  AA_PROTO_TIME_PIPELINE_COMM,
  AA_PROTO_TIME_BUBBLE,
  AA_PROTO_TIME_ALL_TO_ALL,
  AA_PROTO_TIME_KINDS
} aa_proto_time_kind_t;

/* The wire key of a kind ("forward", "backward", "optimizer",
 * "pipeline_comm", "bubble", "all_to_all"); "?" for a value outside the
 * enum. */
const char *aa_proto_time_kind_name(aa_proto_time_kind_t k);

typedef struct aa_msg_times {
  double ms[AA_PROTO_TIME_KINDS]; /* each 0..1e9: the rank's mean over its timed steps */
} aa_msg_times_t;

typedef struct aa_msg_result {
  uint64_t job, run;
  aa_proto_run_status_t status; /* ok|oom|error|timeout|crashed|cancelled */
  double tokens_per_s;          /* 0..1e12 */
  double step_ms_median;        /* 0..1e9 */
  double step_ms_spread;        /* 0..1e9: spread of the measured step times */
  aa_msg_peak_t peak;           /* peak bytes by kind, per rank */
  bool has_final_loss;
  double final_loss; /* finite, present when a step completed */
  char *error;       /* optional, <= 4096 bytes */
  char *key;         /* optional, <= 127 bytes: the strategy key (set when relayed to a client) */
  bool inputs;       /* error: the run's inputs (data, initial weights) cannot be used, whatever the strategy */
  /* The reporting rank: its place in the gang and in the mesh (coord, by
   * aa_axis_t: common/axis.h; on the wire "<axis key>_rank": dp_rank,
   * tp_rank, pp_rank), each 0..AA_PROTO_WORLD_MAX-1 (0 may be omitted),
   * and its own step time breakdown when it timed steps (has_times). */
  int rank, coord[AA_AXES];
  bool has_times;
  aa_msg_times_t times;
  char *calib; /* optional, 1..AA_PROTO_JSON_MAX bytes: a calibrate job's measurements
                  (strategies/calib.h aa_calib_to_json), sent by the gang's rank 0 */
  /* Optional, 0..2^31: an MoE run's most tokens an expert got from one
   * rank's micro-batch, over the gang (engine/train.h moe_max_tokens);
   * the planner turns it into the router's load imbalance. */
  bool has_moe_max_tokens;
  double moe_max_tokens;
} aa_msg_result_t;

typedef struct aa_msg_cancel {
  uint64_t job;
} aa_msg_cancel_t;

typedef struct aa_msg_abort {
  uint64_t job, run;
  char *reason; /* optional, <= 4096 bytes */
} aa_msg_abort_t;

typedef struct aa_msg_status {
  uint64_t job; /* optional: one job; absent = the whole planner */
} aa_msg_status_t;

typedef struct aa_msg_query {
  char *what; /* 1..255 bytes: the query's name, e.g. "runs", "best" */
  char *args; /* optional JSON text */
} aa_msg_query_t;

typedef struct aa_msg_reply {
  char *json; /* JSON text produced by the planner */
} aa_msg_reply_t;

typedef struct aa_msg_error {
  int code;      /* an AA_E* code, -1000..-1 */
  char *message; /* 1..4096 bytes */
} aa_msg_error_t;

/* Bytes that need not be text (a key-value store's value): p holds n
 * bytes (n may be 0; p may then be NULL when encoding). */
typedef struct aa_msg_bin {
  void *p;
  size_t n;
} aa_msg_bin_t;

/* kv_set {run, key, value}, kv_get {run, key} (value unused, absent),
 * kv_value {run, key, value}: one key of the store of run `run`'s gang,
 * relayed by the planner between the gang's executors (docs/service.md
 * "Relay"). */
typedef struct aa_msg_kv {
  uint64_t run;       /* 1..2^63-1 */
  char *key;          /* 1..AA_PROTO_KV_KEY_MAX bytes of [A-Za-z0-9_./-] */
  aa_msg_bin_t value; /* 0..AA_PROTO_KV_VALUE_MAX bytes */
} aa_msg_kv_t;

/* calib_import {json, force}: the text of a calibration file (`autoaccel
 * calib export`), which the planner checks whole and stores (docs/service.md
 * "Export and import"). */
typedef struct aa_msg_calib_import {
  char *json; /* 1..AA_PROTO_CALIB_FILE_MAX bytes */
  bool force; /* replace stored calibrations measured after the file's */
} aa_msg_calib_import_t;

typedef struct aa_msg {
  aa_msg_type_t type;
  uint64_t id; /* optional request id, 1..2^63-1; replies echo it */
  union {
    aa_msg_hello_t hello;
    aa_msg_welcome_t welcome;
    aa_msg_heartbeat_t heartbeat;
    aa_msg_bye_t bye;
    aa_msg_submit_t submit;
    aa_msg_ack_t ack;
    aa_msg_job_t job;
    aa_msg_progress_t progress;
    aa_msg_result_t result;
    aa_msg_cancel_t cancel;
    aa_msg_abort_t abort;
    aa_msg_status_t status;
    aa_msg_query_t query;
    aa_msg_reply_t reply;
    aa_msg_error_t error;
    aa_msg_kv_t kv_set;
    aa_msg_kv_t kv_get;
    aa_msg_kv_t kv_value;
    aa_msg_calib_import_t calib_import;
  };
} aa_msg_t;

/* Encodes m as one complete frame (header + payload) after checking it by
 * the decoder's rules. *out is malloc'd to the frame's size and transferred
 * (free with free()); m is borrowed. Returns AA_EINVAL naming the field and
 * the rule, or AA_ENOMEM. Outputs are set only on success. */
int aa_msg_encode(const aa_msg_t *m, char **out, size_t *out_len);

/* Decodes one payload (the bytes after a frame header) strictly. On success
 * *out owns its strings (release with aa_msg_free). Errors, with an
 * aa_error() message naming the field and the rule, fit for an error reply:
 *   AA_EPARSE       not one well-formed msgpack value (truncated, trailing
 *                   bytes, reserved byte, nesting or item count over limits)
 *   AA_EUNSUPPORTED `v` is not AA_PROTO_VERSION
 *   AA_EFORMAT      well-formed but not a valid message (not a map, unknown
 *                   type, missing/unknown/duplicate key, wrong type, range)
 *   AA_ENOMEM
 * *out is written only on success. */
int aa_msg_decode(const void *payload, size_t len, aa_msg_t *out);

/* Frees the strings of a decoded message and zeroes it. Not for messages
 * whose strings are borrowed. NULL is allowed. */
void aa_msg_free(aa_msg_t *m);

/* "hello", "job", ...; "?" for a value outside the enum. */
const char *aa_msg_type_name(aa_msg_type_t t);

/* Builds an error frame (code, message, request id 0 = none) for answering
 * a bad frame or request. The message is cut to AA_PROTO_TEXT_MAX bytes at a
 * character boundary and bytes that are not valid UTF-8 become '?'; an
 * empty message becomes aa_strerror(code). code outside -1000..-1 becomes
 * AA_EINTERNAL. *out is transferred as for aa_msg_encode. */
int aa_msg_encode_error(char **out, size_t *out_len, uint64_t id, int code, const char *message);

/* Drops a trailing UTF-8 sequence that is incomplete, as snprintf leaves
 * one when it cuts a longer text to a buffer, so a text made of valid
 * UTF-8 pieces and cut to fit stays fit for a frame. */
void aa_proto_utf8_trim(char *s);

/* Compares a presented token (a, alen bytes) with the expected one (b,
 * blen bytes) in time that depends only on blen, never on where they
 * differ. Returns 1 when equal, 0 otherwise. */
int aa_proto_token_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
