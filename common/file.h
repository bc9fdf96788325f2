/* Writing files into directories that someone else may control (a run's
 * output directory, a shared state directory) without ever following a
 * symbolic link planted there.
 *
 * Two ways to write:
 * - aa_wfile_*: a whole file replaced atomically. The content goes to a
 *   temporary file with a fresh unpredictable name, created with O_EXCL and
 *   O_NOFOLLOW in the final name's directory, which is then fsynced and
 *   renamed over the final name. A reader sees the old file or the new one,
 *   never half of one, and a symlink at the final name is replaced itself,
 *   never its target.
 * - aa_file_open_write: a file streamed as it grows (logs, loss files),
 *   opened with O_NOFOLLOW and refused unless it is a regular file.
 *
 * Functions return 0 or a negative AA_E* code with a message naming the
 * path in the last-error slot (aa.h). Libc only. */
#ifndef AA_FILE_H
#define AA_FILE_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

/* A file being written under a temporary name. Fields other than f are the
 * writer's own; the caller writes through f and never closes it. */
typedef struct aa_wfile {
  FILE *f;         /* the temporary, open for writing; NULL once committed or aborted */
  int dirfd;       /* the directory both names live in; -1 once closed */
  char path[4096]; /* the final path as the caller named it, for messages */
  char name[256];  /* the final name, relative to dirfd */
  char tmp[256];   /* the temporary's name, relative to dirfd; empty when none exists */
} aa_wfile_t;

/* Starts writing `path`: opens its parent directory once and creates in it
 * a temporary named ".<basename>.<16 random hex digits>.tmp" with
 * O_CREAT | O_EXCL | O_NOFOLLOW and `mode` (less the umask). On success w->f
 * is open for writing; finish with aa_wfile_commit or aa_wfile_abort. On
 * failure nothing exists on disk and aa_wfile_abort(w) is a no-op. `path` is
 * borrowed (copied). A path ending in '/' or naming no file is AA_EINVAL; a
 * missing directory is AA_ENOENT; other failures are AA_EIO. */
int aa_wfile_open(aa_wfile_t *w, const char *path, int mode);

/* As aa_wfile_open, for `name` (one path component, no '/') in the directory
 * open as dirfd. dirfd stays the caller's: the writer keeps a duplicate.
 * Messages name `name`. */
int aa_wfile_openat(aa_wfile_t *w, int dirfd, const char *name, int mode);

/* Flushes w->f, fsyncs and closes it, and renames the temporary over the
 * final name within the same directory (which replaces a symlink there,
 * never what it points to). On any failure the temporary is removed and the
 * result is AA_EIO naming the final path. Either way w->f is closed and
 * aa_wfile_abort(w) becomes a no-op. Committing a writer that is not open
 * is AA_EINVAL. */
int aa_wfile_commit(aa_wfile_t *w);

/* Closes w->f and removes the temporary, leaving the final name as it was.
 * Safe after a failed open, after commit and twice: it then does nothing. */
void aa_wfile_abort(aa_wfile_t *w);

/* Opens `path` for streamed writing: created with `mode` (less the umask)
 * if missing, else appended to (append) or truncated. A symbolic link at
 * path is refused ("PATH is a symbolic link; refusing to write through
 * it"), and so is anything but a regular file, except exactly "/dev/null".
 * A regular file is truncated only once it is known to be one. On success
 * *out is a stream the caller owns and closes with fclose; on failure *out
 * is untouched. A missing directory is AA_ENOENT; other failures are AA_EIO. */
int aa_file_open_write(const char *path, bool append, int mode, FILE **out);

/* Opens the directory `path` that a job of user `owner` writes into (a
 * submit's out_dir, which a planner or an executor running as root or as
 * another user writes on that user's behalf). When it is missing and
 * `create` is set it is made first (aa_mkdirs), but only where it would be
 * owner's: this process runs as owner, or owner is root. It is then opened
 * with O_DIRECTORY (following symbolic links, as any path would) and its
 * owner is read from that descriptor, so the check and the writes through
 * the descriptor concern the same directory. It is owner's when it belongs
 * to owner; for root (owner 0) any directory is, since root could write
 * there anyway. Returns 0 with *uid its owner and, when fd is not NULL,
 * *fd open (the caller closes it); AA_EPERM when another user owns it
 * (*uid says who); AA_ENOENT when it is missing and was not made;
 * aa_mkdirs's error; AA_EINVAL when `path` cannot be opened as a
 * directory; AA_EIO when it cannot be examined. Nothing stays open on
 * failure. Messages: "<what> <path>: <reason>", or "<what> <path> belongs
 * to uid U, not to uid O"; callers may say it in their own words. */
int aa_dir_open_owned(int *fd, uid_t *uid, const char *what, const char *path, uid_t owner, bool create);

/* Opens the existing file `path` (a state file: a store, its journals, a
 * token) with `flags` (O_RDONLY or O_RDWR, no O_CREAT) without following a
 * symbolic link at its last component and without blocking (a FIFO would
 * otherwise wait for a writer), then refuses anything but a regular file.
 * The descriptor is blocking again when it is returned. On success *fd is
 * the caller's to close and *st describes that very file, so a check of
 * *st and a change through *fd (fchmod) concern the same one. AA_ENOENT
 * when it does not exist; AA_EIO for a link ("<what> PATH is a symbolic
 * link, which autoaccel does not follow to its state files"), a FIFO ("is
 * a FIFO; only a regular file will do"), a socket, a directory, a device
 * and other failures; AA_EPERM when the open is denied (EACCES, EPERM).
 * *fd and *st are set only on success. */
int aa_file_open_regular(int *fd, struct stat *st, const char *what, const char *path, int flags);

#endif
