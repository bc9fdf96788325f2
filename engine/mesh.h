/* The device mesh of one rank: its coordinates along each axis
 * (strategies/axis.h) and the process group of each axis, built once per
 * rank from the strategy and the world group. A single process is a mesh of ones
 * over a group of one (comm.h aa_comm_self), so the training loop has one
 * path. ZeRO shards over the data group, the tensor group serves the
 * tensor-parallel layers (model.h) and the pipeline group the stages'
 * sends and receives (train.c).
 *
 * The arithmetic (which rank sits where, the split colors and keys: ATorch's
 * parallel_mode semantics with the strategy's axis order and rank order) is
 * strategies/layout.h's; this file only turns it into groups. */
#ifndef AA_MESH_H
#define AA_MESH_H

#include "../comm/comm.h"
#include "../strategies/layout.h"
#include "../strategies/strategy.h"

typedef struct aa_mesh {
  aa_layout_t at;            /* this rank's place: coordinates, degrees (layout.h) */
  aa_comm_t *group[AA_AXES]; /* by aa_axis_t: the rank's group along each axis */
  unsigned owned;            /* bit a set: the mesh made group[a] and destroys it */
  /* The group over data x context (Megatron's data-parallel group with
   * context parallelism): the ranks holding the same model slice, over
   * which gradients are averaged and ZeRO shards. group[AA_AXIS_DATA]
   * itself at context degree 1. */
  aa_comm_t *replicas;
  bool replicas_owned;
  /* Expert parallelism (s->ep > 1; strategies/layout.h aa_layout_expert):
   * the expert group, ep replicas of consecutive keys that split every MoE
   * layer's experts and exchange tokens by all-to-all, ranked by the expert
   * slice they hold; and the expert-data group, the replicas holding the
   * same slice, over which its gradients are reduced. Both NULL at ep 1;
   * else owned by the mesh (a group of one is aa_comm_self). */
  aa_comm_t *expert, *expert_data;
} aa_mesh_t;

/* Builds this rank's mesh for strategy s (borrowed for the call) over
 * world (borrowed; must outlive the mesh), whose size must be
 * aa_strategy_world(s) (else AA_EINVAL saying both). The rank's place is
 * aa_layout_of(s, rank in world), and group[a] holds the ranks whose place
 * differs only along axis a, ranked by their coordinate on it:
 *   - an axis of degree 1 is a group of one (aa_comm_self): it never
 *     waits, so it needs no share in the world's family;
 *   - an axis that spans the whole world in rank order is the world group
 *     itself (not a copy: no second shm region or NCCL communicator);
 *   - any other is split from the world (aa_comm_split), in the world's
 *     family, so a failure anywhere fails it too.
 * replicas is the group of the data and context axes together, made the
 * same way (ranked by aa_layout_key). At s->ep > 1 the expert and
 * expert-data groups are split from the world with aa_layout_expert's
 * colors and keys.
 * A collective over world: every rank calls it with the same strategy.
 * On failure nothing is left allocated and *m is zeroed. */
int aa_mesh_init(aa_mesh_t *m, const aa_strategy_t *s, aa_comm_t *world);

/* Destroys the groups the mesh made (never the world). A zeroed or freed
 * mesh is a no-op. */
void aa_mesh_free(aa_mesh_t *m);

#endif
