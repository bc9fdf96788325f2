/* The calibration file: the stored calibrations of a device as `autoaccel
 * calib export` writes them and `calib import` reads them, so that a
 * calibration measured on one node of a cluster plans anywhere else
 * (docs/service.md "Export and import"). The CLI checks a file with this
 * reader before it sends it and the planner checks it again before it
 * stores anything: one reader, one set of rules.
 *
 *   {"format":"autoaccel-calibration","version":1,"calibrations":[
 *   {"device":"cpu:AMD EPYC 7B13 (1 threads):24000MiB","backend":"shm",
 *    "measured_at":1795000000,"calibration":{ calib.h's JSON }},
 *   ...]}
 *
 * Each entry is one row of the store's `calibrations` table: its key
 * (device fingerprint and store backend: "nccl-hosts" holds a CUDA
 * device's links between hosts, whose calibration says "nccl"), the time
 * it was measured, and the calibration itself, read by aa_calib_parse. */
#ifndef AA_CALIB_FILE_H
#define AA_CALIB_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "calib.h"

#define AA_CALIB_FILE_FORMAT "autoaccel-calibration"
#define AA_CALIB_FILE_VERSION 1
/* A device has at most one calibration per store backend (shm, nccl,
 * gloo, self, nccl-hosts), and one at its maxima (calib.h) is about 300
 * KiB as written: 4 MiB leaves room for a file written by hand with
 * indentation, and bounds what a reader parses. */
#define AA_CALIB_FILE_MAX (4u << 20)
#define AA_CALIB_FILE_ENTRIES_MAX 8
#define AA_CALIB_FILE_BACKEND_MAX 16                 /* "nccl-hosts" + NUL, with room */
#define AA_CALIB_FILE_TIME_MAX INT64_C(253402300799) /* measured_at at most 9999-12-31T23:59:59Z */
/* The most JSON values a file may hold (the entries at calib.h's maxima:
 * 10 values an op, 5 a link, a few more an entry), counted before the
 * text is parsed, so a file of tiny values cannot make the parser hold
 * millions of them: about 12 MiB of parsed values at most. */
#define AA_CALIB_FILE_VALUES_MAX                                                                             \
  (AA_CALIB_FILE_ENTRIES_MAX * (10 * AA_CALIB_OPS_MAX + 5 * AA_CALIB_LINKS_MAX + 64))

typedef struct aa_calib_entry {
  char device[AA_CALIB_DEVICE_MAX];        /* the store's key: "cpu:..." or "cuda:...", 1..127 bytes */
  char backend[AA_CALIB_FILE_BACKEND_MAX]; /* the store's key: shm, nccl, gloo, self or nccl-hosts */
  int64_t measured_at;                     /* unix seconds, 1..AA_CALIB_FILE_TIME_MAX */
  aa_calib_t *calib;                       /* owned (large: on the heap) */
} aa_calib_entry_t;

typedef struct aa_calib_file {
  int n;
  aa_calib_entry_t e[AA_CALIB_FILE_ENTRIES_MAX];
} aa_calib_file_t;

/* Whether a store key may hold calibration c; NULL when it may, else the
 * rule it breaks (a static string). The device names its kind ("cpu:" or
 * "cuda:", as c->cuda says), the backend is one of that kind's (cpu: shm,
 * gloo, self; cuda: nccl, nccl-hosts, self), and the calibration's own
 * backend is the key's ("nccl" under "nccl-hosts") or "self" (a pool of
 * one, which measured no links) under a backend of one host. */
const char *aa_calib_key_rule(const char *device, const char *backend, const aa_calib_t *c);

/* Parses len bytes of file text (origin names it in errors) into *out,
 * checking everything: the size (AA_CALIB_FILE_MAX) and the count of
 * values before the text is parsed, "format" and "version", 1..
 * AA_CALIB_FILE_ENTRIES_MAX entries with no unknown key, each key by
 * aa_calib_key_rule, no key twice, and each calibration by
 * aa_calib_parse. AA_EINVAL (AA_EPARSE for text that is not JSON) naming
 * the field: "x.json: calibrations[1].calibration: ops[3].fwd_s: must be
 * finite and > 0 (got 0)". On success *out owns its calibrations
 * (aa_calib_file_clear); on failure it is untouched. */
int aa_calib_file_parse(aa_calib_file_t *out, const char *text, size_t len, const char *origin);

/* The file's text, one entry a line, each calibration as aa_calib_to_json
 * writes it (so writing what was read gives the same bytes), ending in a
 * newline. malloc'd (free()); NULL with AA_ENOMEM or AA_EINVAL (an entry
 * without a calibration) set. */
char *aa_calib_file_to_json(const aa_calib_file_t *f);

/* Frees the calibrations and zeroes f. NULL is a no-op. */
void aa_calib_file_clear(aa_calib_file_t *f);

#endif
