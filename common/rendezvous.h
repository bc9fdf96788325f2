/* Rendezvous text of a process group (comm/comm.h): the planner makes
 * one per parallel run and sends it to every rank in its job message; the
 * ranks build the group from the text alone. It lives in common/ because
 * the planner mints it and never links the engine.
 *
 *   "shm:/aa-<tag>-<nonce>"   CPU ranks on one host: the POSIX shared-memory
 *                             segment the group meets in.
 *   "nccl:/aa-<tag>-<nonce>"  CUDA ranks on one host: the same kind of shm
 *                             segment bootstraps the group (rank 0 makes
 *                             the NCCL unique id and hands it over there).
 *   "gloo:/aa-<tag>-<nonce>"  CPU ranks on any hosts: the name prefixes the
 *                             keys the ranks exchange their addresses under
 *                             in a store (comm.h aa_comm_store_t).
 *   "nccl-hosts:/aa-<tag>-<nonce>"
 *                             CUDA ranks on any hosts: a gloo group of that
 *                             name (met through the store, as above)
 *                             bootstraps NCCL in place of the shm segment.
 *
 * <tag> is the caller's label with anything but [A-Za-z0-9_] turned into
 * '_' (at most 40 bytes kept), so the name is readable in /dev/shm; the
 * nonce is 16 random hex digits, so names never collide. */
#ifndef AA_RENDEZVOUS_H
#define AA_RENDEZVOUS_H

#include <stddef.h>

#define AA_RENDEZVOUS_MAX 255 /* bytes with the NUL, = AA_PROTO_NAME_MAX */

/* Writes a fresh rendezvous for `backend` ("shm", "nccl", "gloo" or
 * "nccl-hosts") into out (n
 * bytes). Creates nothing. AA_EINVAL for another backend or a too small
 * buffer, AA_EIO if no random bytes could be had. */
int aa_rendezvous_new(char *out, size_t n, const char *backend, const char *tag);

/* Splits a rendezvous into its backend ("shm"/"nccl"/"gloo"/"nccl-hosts", static)
 * and name (the shm segment, or gloo's key prefix) (a pointer into text). AA_EINVAL, with the reason, for
 * anything aa_rendezvous_new cannot have made. */
int aa_rendezvous_parse(const char *text, const char **backend, const char **shm_name);

#endif
