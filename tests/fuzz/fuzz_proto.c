/* libFuzzer target for the frame reader and the message decoder
 * (tests/cli/test_fuzz.sh builds and runs it with ASan + UBSan).
 *
 * Input: byte 0 picks the path, the rest is the data.
 *   even byte 0: the data is one payload for aa_msg_decode.
 *   odd byte 0:  the data is a byte stream for a frame reader (limit 4 KiB
 *                when bit 1 is set, else AA_FRAME_MAX), fed in chunks of
 *                (byte0 >> 2) + 1 bytes; every frame it yields is decoded.
 * Whatever decodes must encode, decode again, and re-encode to the same
 * bytes; a reader must never hold more than its limit + 4 bytes.
 *
 * With AA_FUZZ_WRITE_SEEDS=DIR the binary writes a seed corpus (every
 * sample message on both paths) into DIR and exits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/msg.h"
#include "tests/proto_samples.h"

static void check_round_trip(const aa_msg_t *m) {
  char *f1 = NULL, *f2 = NULL;
  size_t n1, n2;
  aa_msg_t d;
  if (aa_msg_encode(m, &f1, &n1) != 0) {
    fprintf(stderr, "decoded %s does not encode: %s\n", aa_msg_type_name(m->type), aa_last_error());
    abort();
  }
  if (aa_msg_decode(f1 + AA_FRAME_HEADER, n1 - AA_FRAME_HEADER, &d) != 0) {
    fprintf(stderr, "re-encoded %s does not decode: %s\n", aa_msg_type_name(m->type), aa_last_error());
    abort();
  }
  if (aa_msg_encode(&d, &f2, &n2) != 0 || n1 != n2 || memcmp(f1, f2, n1) != 0) {
    fprintf(stderr, "%s: second encoding differs\n", aa_msg_type_name(m->type));
    abort();
  }
  aa_msg_free(&d);
  free(f1);
  free(f2);
}

static void decode_one(const uint8_t *p, size_t n) {
  aa_msg_t m;
  if (aa_msg_decode(p, n, &m) == 0) {
    check_round_trip(&m);
    aa_msg_free(&m);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t mode = data[0];
  data++, size--;
  if (!(mode & 1)) {
    decode_one(data, size);
    return 0;
  }
  aa_frame_reader_t r;
  size_t max = (mode & 2) ? 4096 : 0;
  if (aa_frame_reader_init(&r, max) != 0) abort();
  size_t chunk = (size_t)(mode >> 2) + 1, off = 0;
  while (off < size) {
    size_t c = size - off < chunk ? size - off : chunk, used;
    const uint8_t *p = data + off;
    const void *pl;
    size_t pn;
    int rc = 0;
    while (c > 0) {
      rc = aa_frame_reader_feed(&r, p, c, &used, &pl, &pn);
      if (aa_frame_reader_held(&r) > r.max + AA_FRAME_HEADER) abort();
      if (rc < 0) break;
      if (used > c || (rc == 0 && used != c)) abort();
      p += used, c -= used, off += used;
      if (rc == 1) decode_one(pl, pn);
    }
    if (rc < 0) break;
  }
  aa_frame_reader_free(&r);
  return 0;
}

static void write_seed(const char *dir, const char *name, uint8_t mode, const char *bytes, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(&mode, 1, 1, f) != 1 || fwrite(bytes, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *dir = getenv("AA_FUZZ_WRITE_SEEDS");
  if (!dir || !*dir) return 0;
  for (int t = AA_MSG_NONE + 1; t < AA_MSG_TYPE_COUNT; t++) {
    aa_msg_t m;
    char *f, name[64];
    size_t n;
    aa_sample_msg((aa_msg_type_t)t, &m);
    if (aa_msg_encode(&m, &f, &n) != 0) {
      fprintf(stderr, "sample %s: %s\n", aa_msg_type_name(m.type), aa_last_error());
      exit(1);
    }
    snprintf(name, sizeof name, "payload-%s", aa_msg_type_name(m.type));
    write_seed(dir, name, 0, f + AA_FRAME_HEADER, n - AA_FRAME_HEADER);
    snprintf(name, sizeof name, "stream-%s", aa_msg_type_name(m.type));
    write_seed(dir, name, (uint8_t)(1 | (t << 2)), f, n);
    free(f);
  }
  exit(0);
}
