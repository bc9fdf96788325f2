/* One rank from device to result (launch.h). */
#include "launch.h"

#include <stdio.h>

#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

int aa_launch_join(const aa_launch_t *l, aa_comm_t **out) {
  int rc = 0;
  if (l->world < 1 || l->rank < 0 || l->rank >= l->world || (l->world > 1 && !l->rendezvous))
    return aa_error(AA_EINVAL, "launch: rank %d of %d%s", l->rank, l->world,
                    l->world > 1 && !l->rendezvous ? " without a rendezvous" : " is out of range");
#ifdef AA_HAVE_CUDA
  /* The engine opens the device itself; only an NCCL join needs it first. */
  if (l->cuda >= 0 && l->world > 1 && (rc = aa_cuda_init(l->cuda)))
    return aa_error_wrap(rc, "device cuda:%d", l->cuda);
#endif
  aa_comm_t *comm = NULL;
  if (l->world > 1 && (rc = aa_comm_init(&comm, l->rendezvous, l->rank, l->world, &l->comm)))
    return aa_error_wrap(rc, "joining the group of %d ranks", l->world);
  *out = comm;
  return 0;
}

int aa_launch_rank(const aa_launch_t *l, aa_train_result_t *res) {
  aa_train_opts_t o = l->opts;
  char device[32];
  if (l->cuda >= 0) {
    snprintf(device, sizeof device, "cuda:%d", l->cuda);
    o.device = device;
  }
  aa_comm_t *comm = NULL;
  int rc = aa_launch_join(l, &comm);
  if (rc) return rc;
  o.comm = comm;
  rc = aa_train(l->spec, &o, res);
  /* A rank that failed on its own (out of memory, a refused strategy)
   * stops its peers now rather than at their next collective's timeout. */
  if (rc && comm) aa_comm_abort(comm);
  aa_comm_destroy(comm);
  return rc;
}
