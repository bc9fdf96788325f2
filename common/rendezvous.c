/* Rendezvous texts (see rendezvous.h). */
#include "rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "aa.h"

#define TAG_MAX 40

static const char *const backends[] = {"shm", "nccl", "gloo", "nccl-hosts"};
#define N_BACKENDS (sizeof backends / sizeof backends[0])

int aa_rendezvous_new(char *out, size_t n, const char *backend, const char *tag) {
  size_t b = 0;
  while (backend && b < N_BACKENDS && strcmp(backend, backends[b]))
    b++;
  if (!backend || b == N_BACKENDS)
    return aa_error(AA_EINVAL, "process group backend '%s': expected shm, nccl, gloo or nccl-hosts",
                    backend ? backend : "(null)");
  char clean[TAG_MAX + 1];
  size_t k = 0;
  for (const char *p = tag ? tag : ""; *p && k < TAG_MAX; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    clean[k++] = ok ? c : '_';
  }
  clean[k] = 0;
  unsigned char r[8];
  ssize_t got;
  do got = getrandom(r, sizeof r, 0);
  while (got < 0 && errno == EINTR);
  if (got != (ssize_t)sizeof r) return aa_error(AA_EIO, "rendezvous: no random bytes: %s", strerror(errno));
  int w = snprintf(out, n, "%s:/aa-%s-%02x%02x%02x%02x%02x%02x%02x%02x", backend, clean, r[0], r[1], r[2], r[3], r[4],
                   r[5], r[6], r[7]);
  if (w < 0 || (size_t)w >= n) return aa_error(AA_EINVAL, "rendezvous: buffer of %zu bytes is too small", n);
  return 0;
}

int aa_rendezvous_parse(const char *text, const char **backend, const char **shm_name) {
  const char *name = NULL;
  for (size_t b = 0; b < N_BACKENDS && !name; b++) {
    size_t k = strlen(backends[b]);
    if (!strncmp(text, backends[b], k) && text[k] == ':') {
      *backend = backends[b];
      name = text + k + 1;
    }
  }
  if (!name)
    return aa_error(AA_EINVAL,
                    "rendezvous '%.64s': expected shm:/NAME, nccl:/NAME, gloo:/NAME or nccl-hosts:/NAME",
                    text);
  size_t len = strlen(name);
  if (len < 2 || len > 200 || name[0] != '/' || strchr(name + 1, '/'))
    return aa_error(AA_EINVAL, "rendezvous '%.64s': the segment name must be /NAME (1-199 bytes, no other '/')",
                    text);
  *shm_name = name;
  return 0;
}
