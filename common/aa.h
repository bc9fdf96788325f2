/* Common definitions shared by every autoaccel module: error codes, the
 * thread-local last-error message, logging and element types.
 *
 * Convention (see shared STYLE.md): functions return 0 on success or a
 * negative AA_E* code; the human-readable reason goes to the last-error slot
 * via aa_error(), which returns the code so call sites can write
 * `return aa_error(AA_EINVAL, "...")`. */
#ifndef AA_H
#define AA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  AA_OK = 0,
  AA_EINVAL = -1,   /* invalid input: bad value, failed validation rule */
  AA_ENOMEM = -2,   /* host allocation failed */
  AA_EIO = -3,      /* read/write/open failed (errno in the message) */
  AA_EPARSE = -4,   /* syntax error in a text input (JSON) */
  AA_EFORMAT = -5,  /* a binary file is not what it claims (magic, version, size) */
  AA_ENOENT = -6,   /* a named file does not exist */
  AA_ECORRUPT = -7, /* checksum mismatch or internally inconsistent file */
  AA_EOOM = -8,     /* an accounted allocation exceeded the memory limit */
  AA_EUNSUPPORTED = -9,
  AA_EINTERNAL = -10,
  AA_EPERM = -11,      /* refused: wrong or missing token, unsafe file permissions */
  AA_ETIMEOUT = -12,   /* a deadline passed (connect, reply, dry-run time limit) */
  AA_ECANCELLED = -13, /* stopped on request (cancel, abort, signal) */
  AA_ECONN = -14,      /* a connection could not be made or was lost */
  AA_EINPUT = -15,     /* a run's inputs (its data, its initial weights) cannot be used, whatever the strategy */
};

/* Name of an error code ("invalid input", ...). Never NULL. */
const char *aa_strerror(int code);

/* Stores a formatted message in this thread's last-error slot and returns
 * `code`. The message replaces any previous one. */
int aa_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current last-error message with "prefix: " (for adding
 * context such as a file name while an error travels up). Returns `code`. */
int aa_error_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's last-error message; valid until the next aa_error call on
 * this thread. Empty string if none was set. */
const char *aa_last_error(void);

/* Logging to stderr. Level filtering is process-wide. */
typedef enum { AA_LOG_DEBUG = 0, AA_LOG_INFO, AA_LOG_WARN, AA_LOG_ERROR } aa_log_level_t;
void aa_log_set_level(aa_log_level_t level);
void aa_log(aa_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define AA_INFO(...) aa_log(AA_LOG_INFO, __VA_ARGS__)
#define AA_WARN(...) aa_log(AA_LOG_WARN, __VA_ARGS__)
#define AA_DEBUG(...) aa_log(AA_LOG_DEBUG, __VA_ARGS__)

/* Element types of flat buffers. Only F32 is computed on today; BF16/F16
 * storage arrives with mixed precision, so sizes are never assumed. */
typedef enum { AA_F32 = 0, AA_BF16 = 1, AA_F16 = 2 } aa_dtype_t;
size_t aa_dtype_size(aa_dtype_t t);
const char *aa_dtype_name(aa_dtype_t t);

/* mkdir -p: creates dir and any missing parents (mode 0777 less umask);
 * fails if the path exists and is not a directory. */
int aa_mkdirs(const char *dir);

/* Little-endian integer encoding for file headers. */
uint32_t aa_get_le32(const unsigned char *p);
uint64_t aa_get_le64(const unsigned char *p);
void aa_put_le32(unsigned char *p, uint32_t v);
void aa_put_le64(unsigned char *p, uint64_t v);

/* Reads a whole file of at most max bytes into a NUL-terminated malloc'd
 * buffer (transferred to the caller in *out_buf; length in *out_len). A
 * size over the cap is reported from fstat before reading when the file is
 * regular, and from the read itself otherwise (pipes, files that grow); the
 * message names the file and says "<what> may be at most N bytes". */
int aa_read_file(const char *path, size_t max, const char *what, char **out_buf, size_t *out_len);

/* Monotonic clock in seconds. */
double aa_now(void);

/* Whether the signal's disposition is SIG_IGN: what a process started
 * under nohup (SIGHUP) inherited, and should keep rather than handle. */
bool aa_signal_ignored(int signum);

/* FNV-1a 64-bit hash, incremental: start with AA_FNV_INIT. Used for the
 * model's canonical hash and for checkpoint payload checksums. */
#define AA_FNV_INIT 0xcbf29ce484222325ULL
uint64_t aa_fnv1a(uint64_t h, const void *data, size_t n);

/* Deterministic RNG (xorshift64* state + Box-Muller) used for weight init
 * and synthetic data; its state is saved in checkpoints. */
typedef struct {
  uint64_t s;
} aa_rng_t;
void aa_rng_seed(aa_rng_t *r, uint64_t seed);
uint64_t aa_rng_u64(aa_rng_t *r);
float aa_rng_uniform(aa_rng_t *r); /* [0,1) */
float aa_rng_normal(aa_rng_t *r);  /* N(0,1) */

#endif
