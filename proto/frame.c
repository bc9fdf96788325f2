#include "frame.h"

#include <stdlib.h>
#include <string.h>

/* A buffer above this size is released after its frame is delivered, so a
 * peer that once sent a large frame does not pin the memory for the life of
 * the connection. */
#define AA_FRAME_KEEP (64u * 1024)
/* The first buffer of a frame split across reads; it doubles from there. */
#define AA_FRAME_GROW (4u * 1024)

void aa_frame_put_header(unsigned char hdr[AA_FRAME_HEADER], uint32_t len) {
  hdr[0] = (unsigned char)(len >> 24);
  hdr[1] = (unsigned char)(len >> 16);
  hdr[2] = (unsigned char)(len >> 8);
  hdr[3] = (unsigned char)len;
}

int aa_frame_encode(char **out, size_t *out_len, const void *payload, size_t len) {
  if (len == 0 || len > AA_FRAME_MAX)
    return aa_error(AA_EINVAL, "frame payload of %zu bytes is outside 1..%u", len, AA_FRAME_MAX);
  char *f = malloc(len + AA_FRAME_HEADER);
  if (!f) return aa_error(AA_ENOMEM, "frame of %zu bytes: out of memory", len);
  aa_frame_put_header((unsigned char *)f, (uint32_t)len);
  memcpy(f + AA_FRAME_HEADER, payload, len);
  *out = f;
  *out_len = len + AA_FRAME_HEADER;
  return 0;
}

int aa_frame_reader_init(aa_frame_reader_t *r, size_t max) {
  if (max > AA_FRAME_MAX)
    return aa_error(AA_EINVAL, "frame limit %zu exceeds the protocol maximum %u", max, AA_FRAME_MAX);
  memset(r, 0, sizeof *r);
  r->max = max ? max : AA_FRAME_MAX;
  return 0;
}

void aa_frame_reader_free(aa_frame_reader_t *r) {
  free(r->buf);
  r->buf = NULL;
  r->buf_n = r->buf_cap = 0;
}

int aa_frame_reader_set_max(aa_frame_reader_t *r, size_t max) {
  if (max > AA_FRAME_MAX)
    return aa_error(AA_EINVAL, "frame limit %zu exceeds the protocol maximum %u", max, AA_FRAME_MAX);
  if (aa_frame_reader_mid_frame(r)) return aa_error(AA_EINVAL, "frame limit: cannot change it inside a frame");
  r->max = max ? max : AA_FRAME_MAX;
  return 0;
}

int aa_frame_reader_mid_frame(const aa_frame_reader_t *r) { return r->hdr_n > 0 || r->need > 0; }

size_t aa_frame_reader_held(const aa_frame_reader_t *r) { return r->buf_cap + r->hdr_n; }

int aa_frame_reader_feed(aa_frame_reader_t *r, const void *data, size_t len, size_t *used,
                         const void **payload, size_t *payload_len) {
  const unsigned char *p = data;
  size_t off = 0;
  if (r->err) return aa_error(r->err, "frame stream already failed; the connection must be closed");
  if (r->delivered) {
    r->delivered = 0;
    r->buf_n = 0;
    if (r->buf_cap > AA_FRAME_KEEP) aa_frame_reader_free(r);
  }
  if (r->need == 0) {
    while (r->hdr_n < AA_FRAME_HEADER && off < len)
      r->hdr[r->hdr_n++] = p[off++];
    if (r->hdr_n < AA_FRAME_HEADER) {
      *used = off;
      return 0;
    }
    uint32_t n = (uint32_t)r->hdr[0] << 24 | (uint32_t)r->hdr[1] << 16 | (uint32_t)r->hdr[2] << 8 | r->hdr[3];
    /* Checked before anything is allocated: the peer's number only says
     * how much we would have to hold, never how much we do. */
    if (n == 0) {
      r->err = AA_EFORMAT;
      return aa_error(AA_EFORMAT, "frame declares length 0 (a frame holds one message)");
    }
    if (n > r->max) {
      r->err = AA_EFORMAT;
      return aa_error(AA_EFORMAT, "frame declares length %u, above the maximum %zu", n, r->max);
    }
    r->need = n;
  }
  size_t avail = len - off;
  if (r->buf_n == 0 && avail >= r->need) {
    /* The whole payload is in this chunk: hand it out without a copy. */
    *payload = p + off;
    *payload_len = r->need;
    *used = off + r->need;
    r->need = 0;
    r->hdr_n = 0;
    return 1;
  }
  size_t take = r->need - r->buf_n;
  if (take > avail) take = avail;
  /* The buffer grows with the bytes that arrived, not with the length the
   * peer declared: a peer that declares 16 MiB and sends a byte makes the
   * reader hold AA_FRAME_GROW, and what readers hold (aa_frame_reader_held)
   * is what their peers sent, within a factor of two. */
  if (r->buf_cap < r->buf_n + take) {
    size_t cap = r->buf_cap ? r->buf_cap : AA_FRAME_GROW;
    while (cap < r->buf_n + take)
      cap *= 2;
    if (cap > r->need) cap = r->need;
    char *nb = realloc(r->buf, cap);
    if (!nb) {
      r->err = AA_ENOMEM;
      return aa_error(AA_ENOMEM, "frame of %zu bytes: out of memory", r->need);
    }
    r->buf = nb;
    r->buf_cap = cap;
  }
  if (take) memcpy(r->buf + r->buf_n, p + off, take);
  r->buf_n += take;
  off += take;
  *used = off;
  if (r->buf_n < r->need) return 0;
  *payload = r->buf;
  *payload_len = r->need;
  r->need = 0;
  r->hdr_n = 0;
  r->delivered = 1;
  return 1;
}
