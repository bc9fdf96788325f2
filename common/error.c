#include "aa.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[2048];

const char *aa_strerror(int code) {
  switch (code) {
  case AA_OK: return "ok";
  case AA_EINVAL: return "invalid input";
  case AA_ENOMEM: return "out of host memory";
  case AA_EIO: return "i/o error";
  case AA_EPARSE: return "parse error";
  case AA_EFORMAT: return "bad file format";
  case AA_ENOENT: return "no such file";
  case AA_ECORRUPT: return "corrupt data";
  case AA_EOOM: return "out of memory (limit)";
  case AA_EUNSUPPORTED: return "unsupported";
  case AA_EINTERNAL: return "internal error";
  case AA_EPERM: return "permission denied";
  case AA_ETIMEOUT: return "timed out";
  case AA_ECANCELLED: return "cancelled";
  case AA_ECONN: return "connection failed";
  case AA_EINPUT: return "unusable input";
  default: return "unknown error";
  }
}

int aa_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return code;
}

int aa_error_wrap(int code, const char *fmt, ...) {
  char prefix[512], old[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_error, sizeof old);
  /* A message longer than the slot is cut; the prefix is kept. */
  if (snprintf(last_error, sizeof last_error, "%s: %s", prefix, old) >= (int)sizeof last_error)
    last_error[sizeof last_error - 1] = '\0';
  return code;
}

const char *aa_last_error(void) { return last_error; }
