/* The executor process: serves one device to a planner. It connects (unix
 * socket or TCP), says hello with its device, sends heartbeats, and runs each
 * `job` frame in a forked runner child that streams progress and one result
 * back over a pipe; the parent relays them. The parent never runs the model,
 * so a runner that crashes, runs out of memory or is killed cannot take the
 * executor down. A lost planner is reconnected with exponential backoff
 * (0.1 s doubling to 5 s, forever). Behaviour: docs/service.md. */
#ifndef AA_WORKER_H
#define AA_WORKER_H

#include <stddef.h>
#include <stdio.h>

#include "../common/aa.h"

#define AA_WORKER_BACKOFF_MIN_MS 100
#define AA_WORKER_BACKOFF_MAX_MS 5000
#define AA_WORKER_DEAD_BEATS 10 /* a planner silent this many heartbeats is lost */

typedef struct aa_worker aa_worker_t;

typedef struct aa_worker_opts {
  const char *planner;    /* planner address (aa_addr_parse forms); NULL = aa_default_planner_addr */
  const char *token_file; /* token to present in hello (aa_token_load); NULL = none */
  const char *device;     /* "cpu" (NULL = "cpu") or "cuda:N" (proto/msg.h aa_proto_parse_device) */
  int threads;            /* runner threads; 0 = all online cores */
  size_t memory_limit;    /* bytes; 0 = none. Reported as the device memory and applied to every run */
  const char *name;       /* device name to report; NULL = the CPU model + " (N threads)" */
  const char *host;       /* host name to report in hello, 1..255 bytes; NULL = gethostname() */
  /* The numeric IPv4 or IPv6 address the ranks of its gangs listen on
   * (aa_worker_parse_address); NULL = the local address of its TCP
   * connection to the planner, 127.0.0.1 over a unix socket. */
  const char *address;
  FILE *log;              /* one line per event; NULL = stderr */
} aa_worker_opts_t;

/* A numeric IPv4 or IPv6 address ("10.0.0.5", "fe80::1"), nothing else
 * (no host name, no port); anything else is AA_EINVAL saying so. */
int aa_worker_parse_address(const char *address);

/* How many CUDA devices this process could use (CUDA_VISIBLE_DEVICES
 * applies), asked in a probe child so this process stays CUDA-free.
 * AA_EUNSUPPORTED with the reason when there is none (no CUDA build, no
 * driver, no device). */
int aa_worker_cuda_devices(int *count);

/* Checks the options (address, device, token file) and prepares the loop;
 * nothing connects until aa_worker_run. A CUDA device is queried in a probe
 * child process (this process never initialises CUDA: it forks the runners)
 * and must exist: AA_EUNSUPPORTED without a CUDA build, driver or device,
 * AA_EINVAL for an ordinal past the last device. Strings in opts are copied. *out is
 * transferred (aa_worker_destroy) and set only on success. Ignores SIGPIPE
 * for the whole process: a planner that goes away is a failed write. */
int aa_worker_create(aa_worker_t **out, const aa_worker_opts_t *opts);

/* Serves until aa_worker_stop (or SIGINT/SIGTERM after
 * aa_worker_handle_signals): sends `bye`, kills a running runner and closes
 * every handle. Returns 0 after such a stop, or AA_EPERM when the planner
 * refused the token (the message says so): retrying cannot help. */
int aa_worker_run(aa_worker_t *w);

/* Makes aa_worker_run stop soon; safe from any thread. */
void aa_worker_stop(aa_worker_t *w);

/* Let aa_worker_run stop on SIGINT and SIGTERM (the `executor` command;
 * not a worker embedded in a process that handles signals itself). */
void aa_worker_handle_signals(aa_worker_t *w);

/* The device name the worker reports (after create); valid while w is. */
const char *aa_worker_device_name(const aa_worker_t *w);

/* Frees w; call after aa_worker_run has returned, or instead of it. NULL is a no-op. */
void aa_worker_destroy(aa_worker_t *w);

#endif
