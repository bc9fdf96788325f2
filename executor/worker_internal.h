/* Shared by the executor's files (worker.c: planner connection;
 * worker_runner.c: the runner child seen from the parent; worker_child.c:
 * the child itself). Not a public interface. */
#ifndef AA_WORKER_INTERNAL_H
#define AA_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "../comm/comm.h"
#include "../proto/addr.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../strategies/calib.h"
#include "../strategies/strategy.h"
#include "worker.h"

/* The parent's view of one runner child. Active from fork until its
 * channel handle is closed; the executor is busy while it is. The channel
 * is a socketpair: the child writes progress, its result and its store
 * requests (kv_set, kv_get, relayed to the planner), the parent writes the
 * planner's answers (kv_value, error) back. */
typedef struct aa_runner {
  bool active;
  pid_t pid;                        /* 0 once reaped */
  int wstatus;                      /* waitpid status, valid once reaped */
  bool reaped, eof;                 /* both are needed before the run is over */
  bool orphaned;                    /* the planner that sent it is gone: nobody gets its result */
  aa_proto_run_status_t killed_for; /* TIMEOUT or CANCELLED when we killed it; OK = not killed */
  /* Why the planner aborted the run (another rank of its gang failed); empty if it did not. */
  char abort_reason[AA_PROTO_TEXT_MAX + 1];
  uint64_t job, run;
  int rank; /* in the gang: the result the parent makes for a dead runner names it */
  int coord[AA_AXES]; /* and its place in the mesh (aa_worker__coords of the job's strategy) */
  uv_pipe_t pipe; /* the channel to the child */
  size_t writes;  /* answers queued to the child and not yet written */
  uv_timer_t timer; /* time limit */
  aa_frame_reader_t reader;
  bool have_result;
  aa_msg_t result; /* the child's result frame, decoded (owned) */
  char read_buf[65536];
} aa_runner_t;

typedef struct aa_conn aa_conn_t;

#define AA_WORKER_ADDRESS_MAX 64 /* a numeric IPv6 address and its NUL fit */

/* The device an executor serves (worker_device.c). */
typedef struct aa_worker_device {
  int cuda; /* the CUDA ordinal, or -1 for the CPU */
  /* CUDA only, from the probe: */
  char name[256];
  uint64_t memory; /* bytes */
  int sm_count, cc_major, cc_minor;
  double peak_bf16_flops; /* 0 = unknown architecture */
} aa_worker_device_t;

/* Fills *out for the device: for CUDA, asks the driver in a probe child
 * process so this process never initialises CUDA (it forks the runners).
 * AA_EUNSUPPORTED without a CUDA build or device, AA_EINVAL for an ordinal
 * that does not exist, AA_ETIMEOUT if the driver does not answer in 60 s;
 * the message names the device. */
int aa_worker__probe_device(int cuda, aa_worker_device_t *out);

/* socketpair + fork for a child that talks with this process: *pid = the
 * child (0 in the child itself), *fd = this process's end of a two-way
 * stream socket (the other end closed in each; both close-on-exec). stdio
 * is flushed first. 0, or AA_EIO with no child. */
int aa_worker__fork_channel(pid_t *pid, int *fd);

struct aa_worker {
  uv_loop_t loop;
  aa_addr_t addr;
  char addr_text[AA_ADDR_PATH_MAX + 16];
  char token[AA_TOKEN_MAX + 1];
  size_t token_len;
  char name[AA_PROTO_NAME_MAX + 1];
  char host[AA_PROTO_NAME_MAX + 1]; /* reported in hello: --host or gethostname() */
  /* The numeric address its gangs' ranks listen on (comm.h
   * aa_comm_opts_t.address): --address, else the local address of the
   * live TCP connection to the planner ("127.0.0.1" over a unix socket),
   * set at each connect. */
  char address[AA_WORKER_ADDRESS_MAX];
  bool address_given;
  int threads;
  aa_worker_device_t dev;
  size_t memory_limit;
  uint64_t memory; /* reported device memory */
  FILE *log;
  uv_timer_t retry; /* reconnect backoff */
  int backoff_ms;
  uv_signal_t sigchld, sigint, sigterm, sighup;
  bool hup; /* sighup is open */
  bool signals;
  uv_async_t wake; /* aa_worker_stop */
  volatile int stop_requested;
  bool stopping;
  int fatal; /* AA_EPERM once the planner refused us */
  char fatal_msg[AA_PROTO_TEXT_MAX + 128];
  aa_conn_t *conn; /* the live connection, or NULL */
  aa_runner_t runner;
};

/* Log one line (prefixed "executor: ") to the worker's log. */
void aa_worker__log(aa_worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sends m to the planner if connected and welcomed; otherwise drops it
 * (a result nobody can receive). m is borrowed. */
void aa_worker__send(aa_worker_t *w, const aa_msg_t *m);

/* Forwards a frame from the planner that answers the runner's store
 * request (kv_value for the runner's run, or an error with a request id)
 * to the runner child; dropped when no runner is active. m is borrowed. */
void aa_worker__runner_answer(aa_worker_t *w, const aa_msg_t *m);

/* Runner, parent side (worker_runner.c). */
int aa_worker__runner_start(aa_worker_t *w, const aa_msg_job_t *job);
/* Kills the runner (SIGKILL) and reports the run as `why` (TIMEOUT or
 * CANCELLED; OK = report how it died), unless it had already died on its
 * own: a runner found dead is reported as it died. */
void aa_worker__runner_kill(aa_worker_t *w, aa_proto_run_status_t why);
void aa_worker__runner_sigchld(aa_worker_t *w);
/* Kills and reaps synchronously and closes the pipe (shutdown). */
void aa_worker__runner_shutdown(aa_worker_t *w);

/* Runner, child side (worker_child.c): runs the job on the CPU (cuda < 0)
 * or on CUDA device `cuda`, writes progress and result frames to fd (the
 * channel to the parent), then exits the process. A rank of a gang joins
 * it with the store of aa_worker__child_store on fd and listens on
 * `address`. fingerprint (borrowed) names the device in a calibration's
 * result: aa_worker__fingerprint's. Never returns. */
void aa_worker__child_main(const aa_msg_job_t *job, int fd, int threads, int cuda, size_t memory_limit,
                           const char *fingerprint, const char *address) __attribute__((noreturn));

/* The store a runner's ranks meet through (comm.h aa_comm_store_t),
 * relayed by its parent executor to the planner: set writes a kv_set for
 * `run` on fd and does not wait; get writes a kv_get and waits (poll) up
 * to its timeout for the kv_value that answers it, AA_ETIMEOUT naming the
 * key when none came, AA_ECONN when the channel ended, the planner's code
 * and message when it refused this or an earlier request. ctx is
 * allocated (aa_worker__child_store_free); fd is borrowed. AA_ENOMEM. */
int aa_worker__child_store(int fd, uint64_t run, aa_comm_store_t *out);
void aa_worker__child_store_free(aa_comm_store_t *s);

/* The executor's device fingerprint without the pool's count,
 * "<kind>:<name>:<MiB>MiB" (the planner's hardware fingerprint, e.g.
 * "cpu:AMD EPYC 7B13 (2 threads):24000MiBx2", without its "x<N>"; the
 * name cut to fit 127 bytes at a character boundary), into out. */
void aa_worker__fingerprint(const aa_worker_t *w, char out[AA_CALIB_DEVICE_MAX]);

/* Rank `rank`'s place in the mesh of strategy st (NULL: none) into coord
 * (by aa_axis_t): the layout's numbers, the ones the engine's mesh is
 * split by (strategies/layout.h), so a rank that fails before its mesh
 * exists, or whose runner dies, still says where it was. 0s for a
 * strategy that does not lay out (the engine then fails with the reason). */
void aa_worker__coords(const aa_strategy_t *st, int rank, int coord[AA_AXES]);

#endif
