/* Symlink-safe file writing (see file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aa.h"

/* Names collide only if someone plants them; a few fresh draws get past
 * any that were guessed without the random bytes. */
#define TMP_TRIES 8
/* Bytes of the final name kept in the temporary's, so that it stays within
 * NAME_MAX (255) with the dot, the 16 hex digits and ".tmp". */
#define TMP_BASE_MAX 200

static void reset(aa_wfile_t *w) {
  w->f = NULL;
  w->dirfd = -1;
  w->path[0] = w->name[0] = w->tmp[0] = '\0';
}

static int create_error(const char *path, int e) {
  return aa_error(e == ENOENT || e == ENOTDIR ? AA_ENOENT : AA_EIO, "%s: cannot create: %s", path,
                  strerror(e));
}

/* Creates the temporary in w->dirfd, which the writer owns. On failure the
 * directory is closed again and no temporary exists. */
static int create_tmp(aa_wfile_t *w, int mode) {
  int e = EEXIST;
  for (int i = 0; i < TMP_TRIES && e == EEXIST; i++) {
    unsigned char r[8];
    ssize_t got;
    do
      got = getrandom(r, sizeof r, 0);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sizeof r) {
      e = got < 0 ? errno : EIO;
      break;
    }
    unsigned long long x = 0;
    for (size_t k = 0; k < sizeof r; k++)
      x = x << 8 | r[k];
    snprintf(w->tmp, sizeof w->tmp, ".%.*s.%016llx.tmp", TMP_BASE_MAX, w->name, x);
    int fd = openat(w->dirfd, w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
      e = errno;
      continue;
    }
    if ((w->f = fdopen(fd, "wb"))) return 0;
    e = errno;
    unlinkat(w->dirfd, w->tmp, 0);
    close(fd);
    break;
  }
  w->tmp[0] = '\0';
  close(w->dirfd);
  w->dirfd = -1;
  return create_error(w->path, e);
}

int aa_wfile_open(aa_wfile_t *w, const char *path, int mode) {
  reset(w);
  if (!path || !*path) return aa_error(AA_EINVAL, "aa_wfile_open: empty path");
  if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path)
    return aa_error(AA_EINVAL, "%s: path too long", path);
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
    return aa_error(AA_EINVAL, "%s: names a directory, not a file", path);
  if (strlen(base) >= sizeof w->name) return aa_error(AA_EINVAL, "%s: file name too long", path);
  memcpy(w->name, base, strlen(base) + 1);
  /* The directory is opened once, so both names below resolve in the same
   * one even if its path is changed while the file is written. */
  char dir[sizeof w->path];
  size_t dlen = slash ? (size_t)(slash - path) : 0;
  if (!slash)
    memcpy(dir, ".", 2);
  else if (dlen == 0)
    memcpy(dir, "/", 2);
  else {
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
  }
  if ((w->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    int e = errno;
    w->dirfd = -1;
    return create_error(path, e);
  }
  return create_tmp(w, mode);
}

int aa_wfile_openat(aa_wfile_t *w, int dirfd, const char *name, int mode) {
  reset(w);
  if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return aa_error(AA_EINVAL, "'%s': not a file name (one path component)", name ? name : "(null)");
  size_t n = strlen(name);
  if (n >= sizeof w->name) return aa_error(AA_EINVAL, "%s: file name too long", name);
  memcpy(w->name, name, n + 1);
  memcpy(w->path, name, n + 1);
  if ((w->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0)) < 0) {
    int e = errno;
    w->dirfd = -1;
    return create_error(name, e);
  }
  return create_tmp(w, mode);
}

int aa_wfile_commit(aa_wfile_t *w) {
  if (!w->f) return aa_error(AA_EINVAL, "%s: not open for writing", w->path);
  int rc = 0;
  if (fflush(w->f) || ferror(w->f))
    rc = aa_error(AA_EIO, "%s: write failed: %s", w->path, strerror(errno));
  else if (fsync(fileno(w->f)))
    rc = aa_error(AA_EIO, "%s: sync failed: %s", w->path, strerror(errno));
  if (fclose(w->f) && !rc) rc = aa_error(AA_EIO, "%s: close failed: %s", w->path, strerror(errno));
  w->f = NULL;
  /* renameat replaces whatever the final name is, a symlink included, and
   * never follows it. */
  if (!rc && renameat(w->dirfd, w->tmp, w->dirfd, w->name))
    rc = aa_error(AA_EIO, "%s: rename failed: %s", w->path, strerror(errno));
  if (rc) unlinkat(w->dirfd, w->tmp, 0);
  w->tmp[0] = '\0';
  close(w->dirfd);
  w->dirfd = -1;
  return rc;
}

void aa_wfile_abort(aa_wfile_t *w) {
  if (w->f) fclose(w->f);
  w->f = NULL;
  if (w->dirfd >= 0) {
    if (w->tmp[0]) unlinkat(w->dirfd, w->tmp, 0);
    close(w->dirfd);
  }
  w->dirfd = -1;
  w->tmp[0] = '\0';
}

int aa_file_open_write(const char *path, bool append, int mode, FILE **out) {
  /* O_NONBLOCK: a FIFO opened for writing would otherwise wait for a reader
   * before it could be refused. O_TRUNC is left out: only a file known to be
   * regular is truncated. */
  int fd =
      open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : 0), mode);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP) return aa_error(AA_EIO, "%s is a symbolic link; refusing to write through it", path);
    return aa_error(e == ENOENT || e == ENOTDIR ? AA_ENOENT : AA_EIO, "%s: cannot write: %s", path,
                    strerror(e));
  }
  struct stat st;
  int rc = 0, flags;
  FILE *f = NULL;
  if (fstat(fd, &st)) rc = aa_error(AA_EIO, "%s: cannot stat: %s", path, strerror(errno));
  /* Callers name /dev/null to write nowhere; no other device is a log. */
  else if (!S_ISREG(st.st_mode) && !(S_ISCHR(st.st_mode) && !strcmp(path, "/dev/null")))
    rc = aa_error(AA_EIO, "%s: not a regular file; refusing to write to it", path);
  else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK))
    rc = aa_error(AA_EIO, "%s: cannot write: %s", path, strerror(errno));
  else if (!append && S_ISREG(st.st_mode) && ftruncate(fd, 0))
    rc = aa_error(AA_EIO, "%s: cannot truncate: %s", path, strerror(errno));
  else if (!(f = fdopen(fd, append ? "a" : "w")))
    rc = aa_error(AA_EIO, "%s: cannot write: %s", path, strerror(errno));
  if (rc) {
    close(fd);
    return rc;
  }
  *out = f;
  return 0;
}

int aa_dir_open_owned(int *fd, uid_t *uid, const char *what, const char *path, uid_t owner, bool create) {
  int d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* A directory this process makes is its own user's: owner's if that is
   * owner, or any for root. */
  if (d < 0 && errno == ENOENT && create && (owner == 0 || owner == geteuid())) {
    int rc = aa_mkdirs(path);
    if (rc) return rc;
    d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (d < 0) {
    int e = errno;
    return aa_error(e == ENOENT ? AA_ENOENT : AA_EINVAL, "%s %s: %s", what, path, strerror(e));
  }
  struct stat st;
  if (fstat(d, &st)) {
    int e = errno;
    close(d);
    return aa_error(AA_EIO, "%s %s: %s", what, path, strerror(e));
  }
  *uid = st.st_uid;
  if (owner != 0 && st.st_uid != owner) {
    close(d);
    return aa_error(AA_EPERM, "%s %s belongs to uid %u, not to uid %u", what, path, (unsigned)st.st_uid,
                    (unsigned)owner);
  }
  if (fd)
    *fd = d;
  else
    close(d);
  return 0;
}

/* A file type in words, for refusals. */
static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

int aa_file_open_regular(int *fd, struct stat *st, const char *what, const char *path, int flags) {
  int d = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (d < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) return aa_error(AA_ENOENT, "%s %s: %s", what, path, strerror(e));
    if (e == ELOOP)
      return aa_error(AA_EIO, "%s %s is a symbolic link, which autoaccel does not follow to its state files",
                      what, path);
    if (e == EACCES || e == EPERM) return aa_error(AA_EPERM, "%s %s: %s", what, path, strerror(e));
    return aa_error(AA_EIO, "%s %s: %s", what, path, strerror(e));
  }
  struct stat sb;
  int fl, rc = 0;
  if (fstat(d, &sb))
    rc = aa_error(AA_EIO, "%s %s: cannot stat: %s", what, path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    rc = aa_error(AA_EIO, "%s %s is %s; only a regular file will do", what, path, file_kind(sb.st_mode));
  else if ((fl = fcntl(d, F_GETFL)) < 0 || fcntl(d, F_SETFL, fl & ~O_NONBLOCK))
    rc = aa_error(AA_EIO, "%s %s: %s", what, path, strerror(errno));
  if (rc) {
    close(d);
    return rc;
  }
  *fd = d;
  *st = sb;
  return 0;
}
