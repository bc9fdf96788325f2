/* Where the planner listens and how peers find it: address strings, the
 * state directory, and token files. Shared by the planner, the executors and
 * the CLI; strings in, structs out, no sockets here.
 *
 * Address forms (docs/service.md):
 *   unix:PATH           a unix socket
 *   PATH                the same, when PATH contains a '/'
 *   tcp:HOST:PORT       TCP; HOST is an IPv4 address or a name, [v6] in brackets
 *   HOST:PORT           the same, when the text has no '/' */
#ifndef AA_ADDR_H
#define AA_ADDR_H

#include <stddef.h>

#include "../common/aa.h"

#define AA_ADDR_PATH_MAX 108 /* sun_path, including the NUL */
#define AA_ADDR_HOST_MAX 256
#define AA_TOKEN_MAX 255 /* bytes of a token (AA_PROTO_NAME_MAX) */

typedef struct aa_addr {
  int tcp;                     /* 0: unix socket at path; 1: TCP host:port */
  char path[AA_ADDR_PATH_MAX]; /* unix */
  char host[AA_ADDR_HOST_MAX]; /* tcp, without brackets */
  int port;                    /* tcp, 1..65535 */
} aa_addr_t;

/* Parses an address string. AA_EINVAL names the problem ("tcp:host needs
 * a port", "unix socket path is 120 bytes, longer than 107"). *out is
 * written only on success. */
int aa_addr_parse(aa_addr_t *out, const char *text);

/* Writes the address back as text ("unix:/x/planner.sock", "tcp:127.0.0.1:7070"). */
void aa_addr_format(const aa_addr_t *a, char *buf, size_t n);

/* 1 when a TCP host is a loopback address (127.0.0.0/8, ::1, "localhost"). */
int aa_addr_is_loopback(const char *host);

/* The state directory: $AUTOACCEL_HOME if set and non-empty, else
 * $HOME/.autoaccel. AA_EINVAL if neither variable is usable or the result
 * does not fit in n bytes. Does not create it. */
int aa_home_dir(char *out, size_t n);

/* The default planner address: unix:<home>/planner.sock. */
int aa_default_planner_addr(char *out, size_t n);

/* The token file a TCP peer presents when it is given none: <home>/token,
 * where a planner with the same state directory keeps its token. Writes
 * the path when that file exists (returns 1), returns 0 when it does not
 * (out untouched), or an error if the state directory is unusable. */
int aa_default_token_file(char *out, size_t n);

/* Reads a token file: the first line, without its line ending, must be
 * 1..AA_TOKEN_MAX bytes with no NUL, in a file of at most 4 KiB. The file
 * must be a regular file, reached without following a symbolic link at
 * its last component and opened without blocking, so a FIFO or a link
 * planted there is refused at once (aa_file_open_regular), and it must not
 * be readable or writable by group or others (AA_EPERM says so and shows
 * chmod 600). Writes the token and its length into out (AA_TOKEN_MAX + 1
 * bytes). */
int aa_token_load(const char *path, char out[AA_TOKEN_MAX + 1], size_t *len);

#endif
