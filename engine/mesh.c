/* A rank's device mesh (mesh.h): layout.h's arithmetic turned into groups. */
#include "mesh.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* One expert group (data false) or expert-data group of layout.h's
 * aa_layout_expert into *out: split from the world, or a group of one. */
static int expert_group(aa_comm_t **out, const aa_layout_expert_t *e, aa_comm_t *world, bool data) {
  const int size = data ? e->data_size : e->size, key = data ? e->data_key : e->key;
  const char *what = data ? "expert-data" : "expert";
  int rc = size == 1 ? aa_comm_self(out) : aa_comm_split(world, data ? e->data_color : e->color, key, out);
  if (rc) return aa_error_wrap(rc, "mesh: the %s groups", what);
  if (aa_comm_rank(*out) != key || aa_comm_world(*out) != size)
    return aa_error(AA_EINTERNAL, "mesh: %s group: rank %d of %d, the layout says %d of %d", what,
                    aa_comm_rank(*out), aa_comm_world(*out), key, size);
  return 0;
}

/* The expert and expert-data groups (every rank makes both splits, in the
 * same order, so the world's split calls match). */
static int expert_groups(aa_mesh_t *m, const aa_strategy_t *s, aa_comm_t *world) {
  aa_layout_expert_t e;
  aa_layout_expert(&m->at, s, &e);
  int rc = expert_group(&m->expert, &e, world, false);
  return rc ? rc : expert_group(&m->expert_data, &e, world, true);
}

int aa_mesh_init(aa_mesh_t *m, const aa_strategy_t *s, aa_comm_t *world) {
  memset(m, 0, sizeof *m);
  int n = aa_comm_world(world), rc;
  if (!world || aa_strategy_world(s) != n) {
    char degrees[16 * AA_AXES];
    size_t o = 0;
    for (int a = 0; a < AA_AXES; a++)
      o += (size_t)snprintf(degrees + o, sizeof degrees - o, "%s%s %d", a ? " x " : "",
                            aa_axis_info((aa_axis_t)a)->key, s->degree[a]);
    return aa_error(AA_EINVAL, "mesh: the strategy's %s = %lld ranks, the world group %d", degrees,
                    aa_strategy_world(s), n);
  }
  if ((rc = aa_layout_of(&m->at, s, aa_comm_rank(world)))) return aa_error_wrap(rc, "mesh");
  /* An axis's groups are the world group as it is when the axis spans the
   * whole world and no rank order moves a rank off its own position (then
   * its coordinate is its world rank). The same answer on every rank, so
   * every rank makes the same split calls. */
  const bool in_order = aa_strategy_rank_order_is_identity(s);
  for (int a = 0; a < AA_AXES && !rc; a++) {
    if (in_order && m->at.size[a] == m->at.world) {
      m->group[a] = world;
      continue;
    }
    if (m->at.size[a] == 1) rc = aa_comm_self(&m->group[a]);
    else rc = aa_comm_split(world, m->at.color[a], m->at.coord[a], &m->group[a]);
    if (rc) {
      aa_error_wrap(rc, "mesh: the %s groups", aa_axis_name((aa_axis_t)a));
      break;
    }
    m->owned |= 1u << a;
    /* The split orders a group by key, the coordinate: the rank's place in
     * its group is its coordinate, or the arithmetic and the groups differ. */
    if (aa_comm_rank(m->group[a]) != m->at.coord[a] || aa_comm_world(m->group[a]) != m->at.size[a])
      rc = aa_error(AA_EINTERNAL, "mesh: %s group: rank %d of %d, the layout says %d of %d",
                    aa_axis_name((aa_axis_t)a), aa_comm_rank(m->group[a]), aa_comm_world(m->group[a]),
                    m->at.coord[a], m->at.size[a]);
  }
  /* The replicas: data x context; the data group itself without context. */
  const unsigned mask = 1u << AA_AXIS_DATA | 1u << AA_AXIS_CONTEXT;
  if (!rc && m->at.size[AA_AXIS_CONTEXT] == 1) {
    m->replicas = m->group[AA_AXIS_DATA];
  } else if (!rc) {
    int size = m->at.size[AA_AXIS_DATA] * m->at.size[AA_AXIS_CONTEXT], key = aa_layout_key(&m->at, mask);
    if (in_order && size == m->at.world) {
      m->replicas = world;
    } else if ((rc = aa_comm_split(world, aa_layout_color(&m->at, mask), key, &m->replicas))) {
      aa_error_wrap(rc, "mesh: the data x context groups");
    } else {
      m->replicas_owned = true;
      if (aa_comm_rank(m->replicas) != key || aa_comm_world(m->replicas) != size)
        rc = aa_error(AA_EINTERNAL, "mesh: data x context group: rank %d of %d, the layout says %d of %d",
                      aa_comm_rank(m->replicas), aa_comm_world(m->replicas), key, size);
    }
  }
  if (!rc && s->ep > 1) rc = expert_groups(m, s, world);
  if (rc) aa_mesh_free(m);
  return rc;
}

void aa_mesh_free(aa_mesh_t *m) {
  aa_comm_destroy(m->expert);
  aa_comm_destroy(m->expert_data);
  if (m->replicas_owned) aa_comm_destroy(m->replicas);
  for (int a = 0; a < AA_AXES; a++)
    if (m->owned & 1u << a) aa_comm_destroy(m->group[a]);
  memset(m, 0, sizeof *m);
}
