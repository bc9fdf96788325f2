/* Device profiles: what a kind of GPU and the node it comes in can do, as
 * its vendor publishes it, so that a pool can be planned without owning one
 * (../docs/device-profiles.md). A profile is a JSON file, one per device;
 * the catalogue in profiles/ at the top of the source tree is built into
 * the binary, and a user's own file of the same format is read the same
 * way. Every figure carries its source, and the reader refuses one
 * without.
 *
 * Figures are per GPU and in SI units (bytes, bytes per second, FLOP per
 * second, seconds): no unit is implied by a name's absence. Links count
 * the bytes one GPU moves in each direction at once (a ring collective
 * sends and receives together), so NVIDIA's "600 GB/s" NVLink, which adds
 * both directions, is 300e9 here.
 *
 * What is to come (issue 32), and what this type is shaped for: op times
 * from a profile (a roofline of dense_flop_per_s and hbm_bytes_per_s with
 * an achieved-efficiency curve per op class), collectives predicted on the
 * links a group spans (intra_node inside a node of gpus_per_node GPUs,
 * inter_node across nodes, each a latency_s per ring step plus bytes over
 * bytes_per_s), memory pruning against memory_bytes, and `plan --pool
 * NAME:N`. None of that reads a profile yet; a measured calibration
 * (calib.h) will always win over one. */
#ifndef AA_PROFILE_H
#define AA_PROFILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define AA_PROFILE_VERSION 1
#define AA_PROFILE_MAX_BYTES 65536 /* a profile file */
#define AA_PROFILE_NAME_MAX 64     /* 1..63 bytes + NUL */
#define AA_PROFILE_TEXT_MAX 256    /* description and link names: 1..255 bytes */
#define AA_PROFILE_SOURCE_MAX 512  /* a figure's source: 1..511 bytes */

/* The precisions a profile gives dense FLOP/s for (no structured
 * sparsity). */
typedef enum {
  AA_PROFILE_FP32 = 0,
  AA_PROFILE_TF32,
  AA_PROFILE_BF16,
  AA_PROFILE_FP16,
  AA_PROFILE_FP8,
  AA_PROFILE_PRECISIONS
} aa_profile_precision_t;

/* "fp32", "tf32", ...; "?" outside the enum. */
const char *aa_profile_precision_name(aa_profile_precision_t p);

/* The figures of a profile, each with a source, in file order: the index
 * of aa_device_profile_t.source. */
typedef enum {
  AA_PROFILE_MEMORY = 0, /* memory_bytes */
  AA_PROFILE_HBM,        /* hbm_bytes_per_s */
  AA_PROFILE_FLOP_FP32,  /* dense_flop_per_s.fp32, then one per precision in enum order */
  AA_PROFILE_GPUS_PER_NODE = AA_PROFILE_FLOP_FP32 + AA_PROFILE_PRECISIONS,
  AA_PROFILE_INTRA_BYTES,   /* intra_node.bytes_per_s */
  AA_PROFILE_INTRA_LATENCY, /* intra_node.latency_s */
  AA_PROFILE_INTER_BYTES,   /* inter_node.bytes_per_s */
  AA_PROFILE_INTER_LATENCY, /* inter_node.latency_s */
  AA_PROFILE_FIELDS
} aa_profile_field_t;

/* A link between GPUs: every GPU to every other inside a node (NVLink
 * through NVSwitches), or a GPU's share of the network between nodes. */
typedef struct aa_profile_link {
  char link[AA_PROFILE_TEXT_MAX]; /* what it is, for people ("one 400 Gb/s NDR adapter per GPU") */
  double bytes_per_s;             /* per GPU, in each direction */
  double latency_s;               /* one step of a ring collective on this link, whatever its size */
} aa_profile_link_t;

typedef struct aa_device_profile {
  int version;                           /* AA_PROFILE_VERSION */
  char name[AA_PROFILE_NAME_MAX];        /* "h100-80gb": what --pool and --show-device name */
  char description[AA_PROFILE_TEXT_MAX]; /* for people */
  int64_t memory_bytes;                  /* the datasheet's capacity (binary: 80 GB is 80 GiB) */
  double hbm_bytes_per_s;                /* peak memory bandwidth */
  /* Peak dense FLOP/s per precision: the vector units' for fp32, the
   * tensor cores' for the others; 0 where the device has no such unit
   * (null in the file: fp8 on an A100). fp32 is never 0. */
  double dense_flop_per_s[AA_PROFILE_PRECISIONS];
  int gpus_per_node;            /* the GPUs that share intra_node */
  aa_profile_link_t intra_node; /* inside a node */
  aa_profile_link_t inter_node; /* between nodes */
  /* Where each figure comes from, indexed by aa_profile_field_t: the
   * document and what it says (and how the figure follows from it). */
  char source[AA_PROFILE_FIELDS][AA_PROFILE_SOURCE_MAX];
} aa_device_profile_t;

/* A figure's dotted path in the file ("dense_flop_per_s.fp8"); "?"
 * outside the enum. */
const char *aa_profile_field_path(aa_profile_field_t f);

/* A figure's value as a double (memory_bytes and gpus_per_node
 * converted), 0 for a precision the device lacks; 0 outside the enum. */
double aa_profile_field_value(const aa_device_profile_t *p, aa_profile_field_t f);

/* Parses len bytes of profile JSON (the format of docs/device-profiles.md)
 * into *out, which is written only on success. origin names the text in
 * messages ("<string>" when NULL); when it ends in ".json", the profile's
 * name must be that file's name without it. Refuses, naming the field:
 * an unknown or missing key, a wrong type, a figure out of its sane range
 * (non-positive, or absurd), a figure without a source or with an empty
 * one, null for a figure that may not be missing, a version other than
 * AA_PROFILE_VERSION, a name that does not match the file. Errors:
 * AA_EPARSE (JSON syntax), AA_EINVAL, AA_ENOMEM; the message is
 * "<origin>: <field.path>: <rule> (got ...)". */
int aa_profile_parse(aa_device_profile_t *out, const char *text, size_t len, const char *origin);

/* Reads the profile file at path (at most AA_PROFILE_MAX_BYTES) as
 * aa_profile_parse does, path being the origin. */
int aa_profile_load(aa_device_profile_t *out, const char *path);

/* The catalogue built into the binary from the files profiles/NAME.json,
 * sorted by name. aa_profile_builtin_name: the i-th name (static), NULL past the
 * end. aa_profile_builtin: parses the i-th into *out (AA_EINVAL past the
 * end); the build checks nothing, so a bad file shipped is refused here
 * with its field named, as a user's would be. */
size_t aa_profile_builtin_count(void);
const char *aa_profile_builtin_name(size_t i);
int aa_profile_builtin(aa_device_profile_t *out, size_t i);

/* Whether arg names a file rather than a built-in profile: it holds a '/'
 * or ends in ".json" (names hold neither). */
int aa_profile_is_path(const char *arg);

/* A profile by built-in name ("h100-80gb") or by file path (see
 * aa_profile_is_path). An unknown name is AA_ENOENT with the names
 * there are; a file is read by aa_profile_load. */
int aa_profile_find(aa_device_profile_t *out, const char *name_or_path);

/* The built-in profile of a CUDA device fingerprint (KIND:NAME:MEMORY_MiB,
 * as executors report it: "cuda:NVIDIA H100 80GB HBM3:81559MiB"): the one
 * whose name's model ("h100" of "h100-80gb") NAME holds, ignoring case,
 * and whose memory is within 10 % of MEMORY. A PCIe board matches none
 * (the catalogue's are SXM). AA_ENOENT when none matches. */
int aa_profile_for_device(aa_device_profile_t *out, const char *device);

/* The profile as a JSON object of the file format (sources included), so
 * that aa_profile_parse reads it back as the same profile. *out is
 * transferred (json_decref it); AA_ENOMEM. */
int aa_profile_to_json(const aa_device_profile_t *p, json_t **out);

#endif
