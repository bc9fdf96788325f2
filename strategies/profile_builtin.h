/* The device profiles built into the binary: the text of each
 * profiles/NAME.json, embedded at build time by
 * scripts/embed_profiles.cmake into a generated C file (CMakeLists.txt),
 * so that `autoaccel plan --list-devices` needs no file beside the binary.
 * Private to strategies/profile.c, which parses them (profile.h). */
#ifndef AA_PROFILE_BUILTIN_H
#define AA_PROFILE_BUILTIN_H

#include <stddef.h>

typedef struct aa__profile_blob {
  const char *name; /* the file's name without .json */
  const char *text; /* its bytes, NUL-terminated */
  size_t len;       /* without the NUL */
} aa__profile_blob_t;

/* Sorted by name; aa__profile_nblobs entries. */
extern const aa__profile_blob_t aa__profile_blobs[];
extern const size_t aa__profile_nblobs;

#endif
