/* Address strings, the state directory and token files. */
#include "addr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/file.h"

/* The most bytes a token file may hold. */
#define TOKEN_FILE_MAX 4096

static int parse_port(const char *text, const char *p, int *port) {
  char *end;
  errno = 0;
  long v = *p ? strtol(p, &end, 10) : -1;
  if (!*p || errno || *end || v < 1 || v > 65535)
    return aa_error(AA_EINVAL, "address '%s': the port must be a number in 1..65535", text);
  *port = (int)v;
  return 0;
}

int aa_addr_parse(aa_addr_t *out, const char *text) {
  aa_addr_t a = {0};
  if (!text || !*text) return aa_error(AA_EINVAL, "empty planner address");
  const char *p = text;
  int tcp;
  if (!strncmp(p, "unix:", 5)) {
    tcp = 0;
    p += 5;
  } else if (!strncmp(p, "tcp:", 4)) {
    tcp = 1;
    p += 4;
  } else {
    tcp = strchr(p, '/') == NULL;
  }
  if (!tcp) {
    size_t n = strlen(p);
    if (!n) return aa_error(AA_EINVAL, "address '%s': the unix socket path is empty", text);
    if (n >= AA_ADDR_PATH_MAX)
      return aa_error(AA_EINVAL, "address '%s': the unix socket path is %zu bytes, longer than %d", text, n,
                      AA_ADDR_PATH_MAX - 1);
    memcpy(a.path, p, n + 1);
    *out = a;
    return 0;
  }
  const char *colon;
  if (*p == '[') {
    const char *close = strchr(p, ']');
    if (!close || close[1] != ':') return aa_error(AA_EINVAL, "address '%s': expected [IPv6]:PORT", text);
    size_t n = (size_t)(close - p - 1);
    if (!n || n >= AA_ADDR_HOST_MAX) return aa_error(AA_EINVAL, "address '%s': bad host", text);
    memcpy(a.host, p + 1, n);
    colon = close + 1;
  } else {
    colon = strrchr(p, ':');
    if (!colon) return aa_error(AA_EINVAL, "address '%s': a TCP address needs HOST:PORT", text);
    size_t n = (size_t)(colon - p);
    if (!n || n >= AA_ADDR_HOST_MAX) return aa_error(AA_EINVAL, "address '%s': bad host", text);
    if (memchr(p, ':', n))
      return aa_error(AA_EINVAL, "address '%s': write an IPv6 host in brackets, [::1]:PORT", text);
    memcpy(a.host, p, n);
  }
  int rc = parse_port(text, colon + 1, &a.port);
  if (rc) return rc;
  a.tcp = 1;
  *out = a;
  return 0;
}

void aa_addr_format(const aa_addr_t *a, char *buf, size_t n) {
  if (!a->tcp) snprintf(buf, n, "unix:%s", a->path);
  else if (strchr(a->host, ':')) snprintf(buf, n, "tcp:[%s]:%d", a->host, a->port);
  else snprintf(buf, n, "tcp:%s:%d", a->host, a->port);
}

int aa_addr_is_loopback(const char *host) {
  return !strcmp(host, "localhost") || !strcmp(host, "::1") || !strncmp(host, "127.", 4);
}

int aa_home_dir(char *out, size_t n) {
  const char *home = getenv("AUTOACCEL_HOME");
  int len;
  if (home && *home) len = snprintf(out, n, "%s", home);
  else if ((home = getenv("HOME")) && *home) len = snprintf(out, n, "%s/.autoaccel", home);
  else return aa_error(AA_EINVAL, "neither AUTOACCEL_HOME nor HOME is set: pass --home DIR");
  if (len < 0 || (size_t)len >= n) return aa_error(AA_EINVAL, "state directory path '%s' is too long", home);
  return 0;
}

int aa_default_planner_addr(char *out, size_t n) {
  char home[AA_ADDR_PATH_MAX];
  int rc = aa_home_dir(home, sizeof home);
  if (rc) return rc;
  int len = snprintf(out, n, "unix:%s/planner.sock", home);
  if (len < 0 || (size_t)len >= n || strlen(home) + sizeof "/planner.sock" > AA_ADDR_PATH_MAX)
    return aa_error(AA_EINVAL, "state directory '%s' is too long for a unix socket path (at most %d bytes)",
                    home, AA_ADDR_PATH_MAX - 1);
  return 0;
}

int aa_default_token_file(char *out, size_t n) {
  char home[4096];
  int rc = aa_home_dir(home, sizeof home);
  if (rc) return rc;
  char path[4096 + 16];
  snprintf(path, sizeof path, "%.4080s/token", home);
  struct stat st;
  if (lstat(path, &st)) return 0;
  if ((size_t)snprintf(out, n, "%s", path) >= n) return aa_error(AA_EINVAL, "token path %s is too long", path);
  return 1;
}

int aa_token_load(const char *path, char out[AA_TOKEN_MAX + 1], size_t *len) {
  /* Opened without following a link and without blocking, then checked to
   * be a regular file: a FIFO planted at the token's path must not hang a
   * planner before it listens, nor a client past its time bounds. */
  int fd;
  struct stat st;
  int rc = aa_file_open_regular(&fd, &st, "token file", path, O_RDONLY);
  if (rc) return rc;
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    close(fd);
    return aa_error(AA_EPERM, "token file %s is accessible by other users (mode %03o): run chmod 600 %s", path,
                    (unsigned)(st.st_mode & 0777), path);
  }
  /* A token file holds one line; more than a page of it is a wrong file. */
  char buf[TOKEN_FILE_MAX + 1];
  size_t n = 0;
  while (n < sizeof buf) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return aa_error(AA_EIO, "token file %s: %s", path, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (n > TOKEN_FILE_MAX)
    return aa_error(AA_EINVAL, "token file %s: more than %d bytes; a token file holds one line", path,
                    TOKEN_FILE_MAX);
  size_t line = 0;
  while (line < n && buf[line] != '\n' && buf[line] != '\r') line++;
  if (!line || line > AA_TOKEN_MAX || memchr(buf, '\0', line))
    return aa_error(AA_EINVAL, "token file %s: the first line must be 1..%d bytes without NUL", path,
                    AA_TOKEN_MAX);
  memcpy(out, buf, line);
  out[line] = '\0';
  *len = line;
  return 0;
}
