/* Wire frames: a 4-byte big-endian payload length, then the payload (one
 * msgpack map, see msg.h and docs/protocol.md).
 *
 * This file works on byte buffers only; the planner, executors and CLI own
 * their sockets (libuv) and hand the bytes they read to aa_frame_reader_feed
 * in whatever chunks the kernel gave them. */
#ifndef AA_FRAME_H
#define AA_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "../common/aa.h"

#define AA_PROTO_VERSION 1
#define AA_FRAME_HEADER 4
/* The largest payload a peer may declare (16 MiB, the default and the
 * ceiling of every reader). A model spec or a report is far below it. */
#define AA_FRAME_MAX (16u * 1024 * 1024)

/* Writes the header of a payload of len bytes (big-endian). */
void aa_frame_put_header(unsigned char hdr[AA_FRAME_HEADER], uint32_t len);

/* Builds header + payload into one malloc'd buffer: *out is transferred to
 * the caller (free with free()), *out_len = len + 4. len must be
 * 1..AA_FRAME_MAX (AA_EINVAL otherwise). Outputs are set only on success. */
int aa_frame_encode(char **out, size_t *out_len, const void *payload, size_t len);

/* Incremental frame reader, one per connection. The declared length is
 * checked (1..max) before any byte of the payload is buffered, so a peer
 * can make a reader hold at most max + 4 bytes, and the buffer grows with
 * the bytes received (doubling from 4 KiB), never to the declared length
 * ahead of them. Fields are private. */
typedef struct aa_frame_reader {
  size_t max;                         /* largest accepted payload */
  unsigned char hdr[AA_FRAME_HEADER]; /* header bytes received so far */
  size_t hdr_n;
  size_t need; /* declared length of the frame being read; 0 while in the header */
  char *buf;   /* payload bytes of a frame split across chunks */
  size_t buf_n, buf_cap;
  int delivered; /* the last call returned buf to the caller */
  int err;       /* sticky: once a frame is bad the stream is unusable */
} aa_frame_reader_t;

/* Initialises r with a payload limit: max = 0 means AA_FRAME_MAX; a max
 * above AA_FRAME_MAX is AA_EINVAL. */
int aa_frame_reader_init(aa_frame_reader_t *r, size_t max);

/* Consumes bytes of data until one frame is complete or data runs out.
 * Returns 1 when a frame is complete: *payload / *payload_len describe it
 * and *used says how many bytes of data were consumed (call again with the
 * rest). Returns 0 when every byte was consumed without completing a frame
 * (*used = len). *payload points into data or into the reader; it is valid
 * until the next call on r and, in the first case, while data is.
 * Returns AA_EFORMAT (declared length 0 or above max) and AA_ENOMEM with an
 * aa_error() message; the error is sticky, every later call returns it, and
 * the caller should send an error reply and close the connection. Outputs
 * are set only when the return is 0 or 1. */
int aa_frame_reader_feed(aa_frame_reader_t *r, const void *data, size_t len, size_t *used,
                         const void **payload, size_t *payload_len);

/* Changes the payload limit (0 = AA_FRAME_MAX) between frames: the
 * planner reads a small hello first and allows full frames after it.
 * AA_EINVAL above AA_FRAME_MAX or while a frame is partly read. */
int aa_frame_reader_set_max(aa_frame_reader_t *r, size_t max);

/* Whether some bytes of a frame have arrived and the frame is not yet
 * complete (for a deadline on slow senders). */
int aa_frame_reader_mid_frame(const aa_frame_reader_t *r);

/* Bytes of memory the reader holds now (buffer capacity + header): at most
 * twice the payload bytes received of the current frame, or 4 KiB, and
 * never more than max + 4. */
size_t aa_frame_reader_held(const aa_frame_reader_t *r);

/* Frees the reader's buffer; r may be initialised again. */
void aa_frame_reader_free(aa_frame_reader_t *r);

#endif
