#include "aa.h"

#include <errno.h>
#include <unistd.h>
#include <stdlib.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static aa_log_level_t log_level = AA_LOG_INFO;

void aa_log_set_level(aa_log_level_t level) { log_level = level; }

void aa_log(aa_log_level_t level, const char *fmt, ...) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  if (level < log_level) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] ", names[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

size_t aa_dtype_size(aa_dtype_t t) { return t == AA_F32 ? 4 : 2; }

const char *aa_dtype_name(aa_dtype_t t) {
  switch (t) {
  case AA_F32: return "fp32";
  case AA_BF16: return "bf16";
  case AA_F16: return "fp16";
  }
  return "?";
}

bool aa_signal_ignored(int signum) {
  struct sigaction sa;
  return sigaction(signum, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_IGN;
}

double aa_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t aa_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

void aa_rng_seed(aa_rng_t *r, uint64_t seed) {
  /* splitmix64 scramble so that small seeds give unrelated streams and the
   * state is never zero (xorshift's fixed point). */
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  r->s = z ? z : 0x2545f4914f6cdd1dULL;
}

uint64_t aa_rng_u64(aa_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

float aa_rng_uniform(aa_rng_t *r) { return (float)(aa_rng_u64(r) >> 40) / 16777216.0f; }

float aa_rng_normal(aa_rng_t *r) {
  /* Box-Muller; one draw per call keeps the state a single word, which
   * makes checkpointing the RNG trivial. */
  float u1 = aa_rng_uniform(r), u2 = aa_rng_uniform(r);
  if (u1 < 1e-7f) u1 = 1e-7f;
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

int aa_mkdirs(const char *dir) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return aa_error(AA_EINVAL, "%s: path too long", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return aa_error(AA_EIO, "cannot create directory %s: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return aa_error(AA_EIO, "cannot create directory %s: %s", buf, strerror(errno));
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return aa_error(AA_EIO, "%s: not a directory", buf);
  return 0;
}

uint32_t aa_get_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t aa_get_le64(const unsigned char *p) { return (uint64_t)aa_get_le32(p) | (uint64_t)aa_get_le32(p + 4) << 32; }

void aa_put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

void aa_put_le64(unsigned char *p, uint64_t v) {
  aa_put_le32(p, (uint32_t)v);
  aa_put_le32(p + 4, (uint32_t)(v >> 32));
}

int aa_read_file(const char *path, size_t max, const char *what, char **out_buf, size_t *out_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return aa_error((e == ENOENT || e == ENOTDIR) ? AA_ENOENT : AA_EIO, "%s: %s", path, strerror(e));
  }
  char *buf = NULL;
  int rc = 0;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = aa_error(AA_EIO, "%s: %s", path, strerror(errno));
    goto cleanup;
  }
  if (S_ISDIR(st.st_mode)) {
    rc = aa_error(AA_EIO, "%s: %s", path, strerror(EISDIR));
    goto cleanup;
  }
  if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > max) {
    rc = aa_error(AA_EINVAL, "%s: too large (%lld bytes; %s may be at most %zu bytes)", path,
                  (long long)st.st_size, what, max);
    goto cleanup;
  }
  size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 4096, len = 0;
  if (cap > max + 1) cap = max + 1;
  if (!(buf = malloc(cap + 1))) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
    goto cleanup;
  }
  for (;;) {
    if (len == cap) {
      if (cap == max + 1) break;
      size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
      char *nbuf = realloc(buf, ncap + 1);
      if (!nbuf) {
        rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
        goto cleanup;
      }
      buf = nbuf;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = aa_error(AA_EIO, "%s: %s", path, strerror(errno));
      goto cleanup;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  if (len > max) {
    rc = aa_error(AA_EINVAL, "%s: too large (more than %zu bytes; %s may be at most %zu bytes)", path, max,
                  what, max);
    goto cleanup;
  }
  buf[len] = '\0';
  *out_buf = buf;
  *out_len = len;
  buf = NULL;

cleanup:
  free(buf);
  close(fd);
  return rc;
}
