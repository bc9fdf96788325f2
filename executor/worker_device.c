/* The executor's device: "cpu" or "cuda:N", and what hello says about it.
 *
 * A CUDA device is queried in a probe child process, never in the executor
 * itself: a process that has initialised the CUDA runtime must not fork
 * (the child inherits a context it cannot use), and every job runs in a
 * forked runner child. So the parent stays CUDA-free, as the runner
 * children's parent must, and each runner initialises its device itself. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker.h"
#include "worker_internal.h"

#ifdef AA_HAVE_CUDA
#include "../kernels/cuda/cuda_backend.h"
#endif

/* How long the probe child may take (a driver that loads slowly, a GPU
 * being reset) before it is killed and the device refused. */
#define PROBE_TIMEOUT_MS 60000

#ifdef AA_HAVE_CUDA
/* What the probe child writes: its return code, the answer, its message. */
typedef struct {
  int rc;
  int count;
  aa_cuda_device_info_t info;
  char error[512];
} probe_reply_t;

/* index < 0: count the devices; otherwise describe device `index`. */
static void probe_child(int fd, int index) {
  probe_reply_t r;
  memset(&r, 0, sizeof r);
  r.rc = index < 0 ? aa_cuda_device_count(&r.count) : aa_cuda_device_info(index, &r.info);
  if (r.rc) snprintf(r.error, sizeof r.error, "%s", aa_last_error());
  const char *p = (const char *)&r;
  for (size_t off = 0; off < sizeof r;) {
    ssize_t n = write(fd, p + off, sizeof r - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(2);
    off += (size_t)n;
  }
  _exit(0);
}

/* Reads the reply from fd within the probe's time limit; 0 or an error. */
static int probe_read(int fd, probe_reply_t *r) {
  char *p = (char *)r;
  size_t off = 0;
  double deadline = aa_now() + PROBE_TIMEOUT_MS / 1e3;
  while (off < sizeof *r) {
    int left_ms = (int)((deadline - aa_now()) * 1e3);
    if (left_ms <= 0) return aa_error(AA_ETIMEOUT, "no answer from the CUDA driver in %d s", PROBE_TIMEOUT_MS / 1000);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int k = poll(&pfd, 1, left_ms);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return aa_error(AA_EIO, "poll: %s", strerror(errno));
    if (k == 0) continue;
    ssize_t n = read(fd, p + off, sizeof *r - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return aa_error(AA_EINTERNAL, "the CUDA probe process died before answering");
    off += (size_t)n;
  }
  return 0;
}

/* Runs probe_child(index) in a child process and returns its reply: 0 with
 * *r filled (r->rc is the CUDA call's own code), or the probe's failure. */
static int probe(int index, probe_reply_t *r) {
  pid_t pid;
  int fd, rc;
  if ((rc = aa_worker__fork_channel(&pid, &fd))) return rc;
  if (pid == 0) probe_child(fd, index);
  rc = probe_read(fd, r);
  close(fd);
  if (rc) kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  return rc;
}
#endif

int aa_worker_cuda_devices(int *count) {
  *count = 0;
#ifndef AA_HAVE_CUDA
  return aa_error(AA_EUNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
#else
  probe_reply_t r;
  int rc = probe(-1, &r);
  if (rc) return rc;
  if (r.rc) return aa_error(r.rc, "%s", r.error);
  if (r.count <= 0) return aa_error(AA_EUNSUPPORTED, "no CUDA device is visible");
  *count = r.count;
  return 0;
#endif
}

int aa_worker__probe_device(int cuda, aa_worker_device_t *out) {
  memset(out, 0, sizeof *out);
  out->cuda = cuda;
  if (cuda < 0) return 0;
#ifndef AA_HAVE_CUDA
  return aa_error(AA_EUNSUPPORTED, "--device cuda:%d: this build has no CUDA backend (nvcc was not found at configure time)",
                  cuda);
#else
  probe_reply_t r;
  int rc = probe(cuda, &r);
  if (rc) return aa_error_wrap(rc, "--device cuda:%d", cuda);
  if (r.rc) return aa_error(r.rc, "--device cuda:%d: %s", cuda, r.error);
  snprintf(out->name, sizeof out->name, "%s", r.info.name);
  out->memory = r.info.total_mem;
  out->sm_count = r.info.sm_count;
  out->cc_major = r.info.cc_major;
  out->cc_minor = r.info.cc_minor;
  out->peak_bf16_flops = r.info.peak_bf16_flops;
  return 0;
#endif
}
