/* The directory store (comm.h aa_comm_dir_store): the ranks of a gloo group
 * on one host meet in a private directory. A key is a file "k.<key>" with
 * each '/' of the key written '%' (a character keys never hold). set writes
 * a temporary file (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600) and renames it
 * into place without replacing (RENAME_NOREPLACE), so a reader sees a whole
 * value or none and a key is set once; get polls for the file until the
 * timeout. Every path is opened relative to the directory's descriptor with
 * O_NOFOLLOW, so a link planted in the directory is not followed. */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

typedef struct {
  int dirfd;
  char dir[256]; /* for messages */
} dirstore_t;

/* The file name of key into buf, or AA_EINVAL for a key the store refuses. */
static int file_of(const char *key, char *buf, size_t n) {
  size_t len = key ? strlen(key) : 0;
  if (len < 1 || len > AA_COMM_STORE_KEY_MAX || len + 3 > n)
    return aa_error(AA_EINVAL, "store key '%.64s': 1 to %d bytes", key ? key : "(null)",
                    AA_COMM_STORE_KEY_MAX);
  memcpy(buf, "k.", 2);
  for (size_t i = 0; i < len; i++) {
    char c = key[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
             c == '.' || c == '-' || c == '/';
    if (!ok) return aa_error(AA_EINVAL, "store key '%.64s': only [A-Za-z0-9_./-]", key);
    buf[2 + i] = c == '/' ? '%' : c;
  }
  buf[2 + len] = 0;
  return 0;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int dir_set(void *ctx, const char *key, const void *value, size_t len) {
  dirstore_t *d = ctx;
  char name[AA_COMM_STORE_KEY_MAX + 3], tmp[64];
  int rc = file_of(key, name, sizeof name);
  if (rc) return rc;
  if (len > AA_COMM_STORE_VALUE_MAX || (len && !value))
    return aa_error(AA_EINVAL, "store key %s: a value of %zu bytes (at most %d)", key, len,
                    AA_COMM_STORE_VALUE_MAX);
  static atomic_uint counter;
  snprintf(tmp, sizeof tmp, "t.%ld.%u", (long)getpid(), atomic_fetch_add(&counter, 1));
  int fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return aa_error(AA_EIO, "store %s: creating %s: %s", d->dir, tmp, strerror(errno));
  int bad = write_all(fd, value, len), e = errno;
  if (close(fd) && !bad) bad = -1, e = errno;
  if (!bad && renameat2(d->dirfd, tmp, d->dirfd, name, RENAME_NOREPLACE) == 0) return 0;
  if (!bad) e = errno;
  /* A file system without RENAME_NOREPLACE: a hard link refuses an
   * existing name too, and is as atomic. */
  if (!bad && (e == EINVAL || e == ENOSYS)) {
    if (linkat(d->dirfd, tmp, d->dirfd, name, 0) == 0)
      e = 0;
    else
      e = errno;
  }
  unlinkat(d->dirfd, tmp, 0);
  if (!bad && !e) return 0;
  if (e == EEXIST) return aa_error(AA_EINVAL, "store %s: key %s is already set", d->dir, key);
  return aa_error(AA_EIO, "store %s: writing key %s: %s", d->dir, key, strerror(e));
}

static int dir_get(void *ctx, const char *key, int timeout_ms, void **value, size_t *len) {
  dirstore_t *d = ctx;
  char name[AA_COMM_STORE_KEY_MAX + 3];
  int rc = file_of(key, name, sizeof name);
  if (rc) return rc;
  double deadline = aa_now() + (timeout_ms > 0 ? timeout_ms : 0) * 1e-3;
  long sleep_us = 500;
  int fd;
  while ((fd = openat(d->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    if (errno != ENOENT)
      return aa_error(AA_EIO, "store %s: opening key %s: %s", d->dir, key, strerror(errno));
    if (aa_now() >= deadline)
      return aa_error(AA_ETIMEOUT, "store %s: key %s did not come within %d ms", d->dir, key, timeout_ms);
    struct timespec ts = {0, sleep_us * 1000};
    nanosleep(&ts, NULL);
    if (sleep_us < 20000) sleep_us *= 2; /* quick for peers that are about to set, 20 ms later on */
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > AA_COMM_STORE_VALUE_MAX) {
    close(fd);
    return aa_error(AA_EIO, "store %s: key %s is not a regular file of at most %d bytes", d->dir, key,
                    AA_COMM_STORE_VALUE_MAX);
  }
  size_t n = (size_t)st.st_size, got = 0;
  buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return aa_error(AA_ENOMEM, "store %s: out of memory", d->dir);
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    free(buf);
    return aa_error(AA_EIO, "store %s: reading key %s: short read", d->dir, key);
  }
  *value = buf;
  *len = n;
  return 0;
}

int aa_comm_dir_store(aa_comm_store_t *out, const char *dir) {
  if (!out || !dir) return aa_error(AA_EINVAL, "aa_comm_dir_store: NULL argument");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "aa_comm_dir_store: %s: %s", dir, strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    int e = errno;
    close(fd);
    return aa_error(AA_EIO, "aa_comm_dir_store: %s: %s", dir, strerror(e));
  }
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    close(fd);
    return aa_error(AA_EPERM,
                    "aa_comm_dir_store: %s must be a private directory (owned by this user, not group or "
                    "world writable; mode %03o)",
                    dir, (unsigned)(st.st_mode & 0777));
  }
  dirstore_t *d = calloc(1, sizeof *d);
  if (!d) {
    close(fd);
    return aa_error(AA_ENOMEM, "aa_comm_dir_store: out of memory");
  }
  d->dirfd = fd;
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  *out = (aa_comm_store_t){d, dir_set, dir_get};
  return 0;
}

void aa_comm_dir_store_free(aa_comm_store_t *s) {
  if (!s || !s->ctx) return;
  dirstore_t *d = s->ctx;
  close(d->dirfd);
  free(d);
  s->ctx = NULL;
}

void aa_comm_dir_store_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
  rmdir(dir);
}
