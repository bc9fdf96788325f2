/* Rank processes for the tests of process groups (test_parallel.c,
 * test_tp_ckpt.c, test_pp_ckpt.c): fork a gang, reap it with a deadline,
 * and copy the files its ranks wrote (optionally corrupting one byte).
 *
 *   aa_gang_fork("dp2", 2, rank_fn, &cfg, status, exit_time);
 *   ok = aa_gang_run("test_tp_ckpt", 4, hop_rank, &hop, "B");
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
#include "common/rendezvous.h"

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

/* What aa_gang_run hands each forked rank: the rank's function and its
 * data, and the gang's rendezvous. */
typedef struct {
  int (*fn)(const char *rdv, int rank, const void *data);
  const char *rdv;
  const void *data;
} aa_gang_call_t;

static inline int aa_gang_call(const void *data, int rank) {
  const aa_gang_call_t *g = data;
  return g->fn(g->rdv, rank, g->data);
}

/* Runs fn(rdv, rank, data) in n forked ranks over a fresh shm rendezvous
 * named for tag (aa_gang_fork: reaped, killed after 120 s), checking that
 * each exited with status 0 (failures named by what). Returns 1 when every
 * one did. */
static inline int aa_gang_run(const char *tag, int n, int (*fn)(const char *rdv, int rank, const void *data),
                              const void *data, const char *what) {
  char rdv[AA_RENDEZVOUS_MAX];
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", tag) == 0);
  int status[AA_GANG_MAX], ok = 1;
  double exit_time[AA_GANG_MAX];
  aa_gang_fork(what, n, aa_gang_call, &(aa_gang_call_t){fn, rdv, data}, status, exit_time);
  if (n < 1 || n > AA_GANG_MAX) return 0;
  for (int i = 0; i < n; i++) {
    int good = aa_gang_exited_ok(status[i]);
    CHECK_MSG(good, "%s: rank %d: status %#x", what, i, status[i]);
    ok &= good;
  }
  return ok;
}

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
