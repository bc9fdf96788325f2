/* Rank processes for the tests of process groups (test_parallel.c,
 * test_tp_ckpt.c): fork a gang, reap it with a deadline, and copy the
 * files its ranks wrote (optionally corrupting one byte).
 *
 *   aa_gang_fork("dp2", 2, rank_fn, &cfg, status, exit_time);
 *
 * Header-only, like aa_test.h, which it needs. */
#ifndef AA_GANG_H
#define AA_GANG_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"

#define AA_GANG_MAX 8 /* ranks a gang of these tests has at most (dp 2 x tp 2 x pp 2) */

/* Forks n ranks (n <= AA_GANG_MAX), each exiting with rank_fn(data, rank),
 * and reaps them into status[rank] and exit_time[rank] (aa_now() when
 * reaped; a rank never reaped keeps status -1, which is no exit), killing
 * all after 120 s so a hang fails the test, named by what, instead of
 * stalling it. Ranks end with exit(), not _exit(), so the sanitizer's leak
 * check runs in each. */
static inline void aa_gang_fork(const char *what, int n, int (*rank_fn)(const void *data, int rank),
                                const void *data, int *status, double *exit_time) {
  pid_t pids[AA_GANG_MAX];
  CHECK_MSG(n >= 1 && n <= AA_GANG_MAX, "%s: %d ranks", what, n);
  if (n < 1 || n > AA_GANG_MAX) return;
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    status[i] = -1;
    pids[i] = fork();
    if (pids[i] == 0) exit(rank_fn(data, i));
  }
  double deadline = aa_now() + 120;
  for (int left = n; left > 0;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int i = 0; i < n; i++)
        if (pids[i] == pid) {
          status[i] = st;
          exit_time[i] = aa_now();
          left--;
        }
      continue;
    }
    if (pid < 0 && errno != EINTR) {
      CHECK_MSG(0, "%s: waitpid: %s", what, strerror(errno));
      break;
    }
    if (aa_now() > deadline) {
      CHECK_MSG(0, "%s: ranks still running after 120 s; killing them", what);
      for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
      deadline = INFINITY;
    }
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  }
}

/* Whether a reaped rank exited with status 0. */
static inline int aa_gang_exited_ok(int status) { return status != -1 && WIFEXITED(status) && !WEXITSTATUS(status); }

/* Copies src to dst, optionally flipping one byte at offset flip (-1 none). */
static inline int aa_gang_copy_file(const char *src, const char *dst, long flip) {
  FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
  int c, ok = a && b;
  for (long i = 0; ok && (c = fgetc(a)) != EOF; i++) fputc(i == flip ? c ^ 0x5a : c, b);
  if (a) fclose(a);
  if (b) fclose(b);
  return ok ? 0 : -1;
}

#endif
