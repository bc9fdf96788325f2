/* Pipeline arithmetic (pipeline.h): partitions, a rank's place and the
 * simulated plan of a schedule. */
#include "pipeline.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>

#include "sizes.h"

int aa_pp_stages(const aa_strategy_t *s) { return s->degree[AA_AXIS_PIPELINE] * (s->vpp > 1 ? s->vpp : 1); }

const char *aa_pp_schedule_name(aa_pp_schedule_t s) {
  switch (s) {
  case AA_SCHEDULE_1F1B: return "1f1b";
  case AA_SCHEDULE_GPIPE: return "gpipe";
  case AA_SCHEDULE_INTERLEAVED: return "interleaved";
  }
  return "?";
}

const char *aa_pp_partition_name(aa_pp_partition_t p) {
  switch (p) {
  case AA_PARTITION_UNIFORM: return "uniform";
  case AA_PARTITION_PARAMETERS: return "parameters";
  case AA_PARTITION_CUSTOM: return "custom";
  }
  return "?";
}

/* The cut of L equal blocks of pb parameters into S stages that minimises
 * the largest stage, stage 0 carrying e0 more and stage S - 1 eL more: the
 * smallest bound M any cut meets (each stage then takes at most (M -
 * extra) / pb blocks, at least one), then blocks taken one at a time from
 * the heaviest stage until they add up to L. */
static void balance(int L, int S, double pb, double e0, double eL, int *n) {
  double best = -1;
  for (int blocks = 1; blocks <= L; blocks++) {
    for (int k = 0; k < 4; k++) {
      double M = blocks * pb + (k & 1 ? e0 : 0) + (k & 2 ? eL : 0);
      if (best >= 0 && M >= best) continue;
      long total = 0;
      int ok = 1;
      for (int s = 0; s < S && ok; s++) {
        double extra = (s == 0 ? e0 : 0) + (s == S - 1 ? eL : 0);
        long cap = (long)((M - extra) / pb + 1e-9);
        if (cap < 1) ok = 0;
        total += cap > L ? L : cap;
      }
      if (ok && total >= L) best = M;
    }
  }
  long total = 0;
  for (int s = 0; s < S; s++) {
    double extra = (s == 0 ? e0 : 0) + (s == S - 1 ? eL : 0);
    long cap = (long)((best - extra) / pb + 1e-9);
    n[s] = (int)(cap > L ? L : cap);
    total += n[s];
  }
  for (; total > L; total--) {
    int h = -1;
    double most = -1;
    for (int s = 0; s < S; s++) {
      double load = n[s] * pb + (s == 0 ? e0 : 0) + (s == S - 1 ? eL : 0);
      if (n[s] > 1 && load >= most) most = load, h = s;
    }
    n[h]--;
  }
}

int aa_pp_bounds(const aa_arch_t *a, const aa_strategy_t *s, int bounds[AA_STRATEGY_STAGES_MAX + 1]) {
  const int L = a->n_layer, v = s->vpp > 1 ? s->vpp : 1, S = aa_pp_stages(s);
  if (s->degree[AA_AXIS_PIPELINE] < 1)
    return aa_error(AA_EINVAL, "pipeline parallel degree %d must be at least 1", s->degree[AA_AXIS_PIPELINE]);
  if (v > AA_PP_CHUNKS_MAX)
    return aa_error(AA_EINVAL, "virtual_stages %d: at most %d virtual stages per pipeline rank", v,
                    AA_PP_CHUNKS_MAX);
  if (v > 1 && s->schedule != AA_SCHEDULE_INTERLEAVED)
    return aa_error(AA_EINVAL, "virtual_stages %d needs the interleaved schedule (schedule is %s)", v,
                    aa_pp_schedule_name(s->schedule));
  if (s->degree[AA_AXIS_PIPELINE] > 1 && v == 1 && s->schedule == AA_SCHEDULE_INTERLEAVED)
    return aa_error(AA_EINVAL,
                    "the interleaved schedule needs virtual_stages >= 2 (each rank holds several chunks)");
  if (S > L || S > AA_STRATEGY_STAGES_MAX)
    return aa_error(
        AA_EINVAL,
        "pipeline parallel degree %d x virtual_stages %d = %d stages: more than n_layer %d (every stage "
        "holds at least one block)",
        s->degree[AA_AXIS_PIPELINE], v, S, L);
  if (s->partition == AA_PARTITION_CUSTOM && s->degree[AA_AXIS_PIPELINE] > 1) {
    if (s->n_bounds != S + 1)
      return aa_error(AA_EINVAL,
                      "custom partition lists %d boundaries; %d stages need %d (0, ..., n_layer %d)",
                      s->n_bounds, S, S + 1, L);
    if (s->bounds[0] != 0 || s->bounds[S] != L)
      return aa_error(AA_EINVAL,
                      "custom partition must start at 0 and end at n_layer %d (it runs from %d to %d)", L,
                      s->bounds[0], s->bounds[S]);
    for (int k = 0; k < S; k++)
      if (s->bounds[k + 1] <= s->bounds[k])
        return aa_error(
            AA_EINVAL,
            "custom partition boundaries must increase (stage %d would hold blocks [%d, %d): every "
            "stage holds at least one block)",
            k, s->bounds[k], s->bounds[k + 1]);
    memcpy(bounds, s->bounds, (size_t)(S + 1) * sizeof *bounds);
    return 0;
  }
  int n[AA_STRATEGY_STAGES_MAX];
  if (s->partition == AA_PARTITION_PARAMETERS && S > 1) {
    const double pb = (double)aa_sizes_unit_numel(a, s->degree[AA_AXIS_TENSOR], 1),
                 u0 = (double)aa_sizes_unit_numel(a, s->degree[AA_AXIS_TENSOR], 0);
    balance(L, S, pb, u0, u0 + 2.0 * a->d_model, n);
  } else {
    /* Uniform: the remainder one block each to the stages after the first,
     * which alone also holds the embedding. */
    for (int k = 0; k < S; k++)
      n[k] = L / S + (k >= 1 && k <= L % S);
    if (S == 1) n[0] = L;
  }
  bounds[0] = 0;
  for (int k = 0; k < S; k++)
    bounds[k + 1] = bounds[k] + n[k];
  return 0;
}

/* What aa_pp_place takes from a schedule's plan: each rank's buffers. A
 * plan simulates the whole schedule (m x vpp events a rank, sorted), and a
 * planner asks for the same few hundred schedules (sched, pp, vpp, m) for
 * every rank of millions of candidates, so they are kept: one table for
 * the process (plans run on the planner's thread pool too, hence the
 * lock), open addressing, emptied when full. Entries stay reachable from
 * the table, which lives as long as the process. */
typedef struct {
  int sched, pp, v, m;
  int *slots, *act_bufs, *grad_bufs; /* [pp] each, one allocation */
} schedule_bufs_t;

#define SCHEDULE_MEMO 32768 /* slots; emptied at half full */

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static schedule_bufs_t memo[SCHEDULE_MEMO];
static int memo_used;

static unsigned memo_hash(int sched, int pp, int v, int m) {
  unsigned h = 2166136261u;
  const int k[4] = {sched, pp, v, m};
  for (int i = 0; i < 4; i++)
    h = (h ^ (unsigned)k[i]) * 16777619u;
  return h % SCHEDULE_MEMO;
}

static int schedule_bufs_exact(aa_pp_schedule_t sched, int pp, int v, int m, int stage, int out[3]);

/* Rank `stage`'s buffers of the schedule into *out; 0, or the plan's
 * error. Past 2 pp micro-batches every rank's buffers grow by the same
 * amount with each further step of the micro-batch count (1, or pp for
 * the interleaved schedule, whose counts are multiples of pp): by 0 under
 * 1f1b and the interleaved schedule (in flight is bounded by the
 * warm-up), by 1 under GPipe (every forward before any backward). So a
 * count m past that is read off the two plans at m0 and m0 + step, m0 =
 * 2 pp, rather than simulated whole (a 64-stage schedule of 3,072
 * micro-batches has 400,000 events); tests/test_pipeline.c holds this
 * against the full simulation. */
static int schedule_bufs(aa_pp_schedule_t sched, int pp, int v, int m, int stage, int out[3]) {
  const int step = sched == AA_SCHEDULE_INTERLEAVED ? pp : 1, m0 = 2 * pp;
  if (m <= m0 + step || (m - m0) % step) return schedule_bufs_exact(sched, pp, v, m, stage, out);
  int a[3], b[3], rc;
  if ((rc = schedule_bufs_exact(sched, pp, v, m0, stage, a)) ||
      (rc = schedule_bufs_exact(sched, pp, v, m0 + step, stage, b)))
    return rc;
  const int k = (m - m0) / step;
  for (int i = 0; i < 3; i++)
    out[i] = a[i] + k * (b[i] - a[i]);
  return 0;
}

static int schedule_bufs_exact(aa_pp_schedule_t sched, int pp, int v, int m, int stage, int out[3]) {
  pthread_mutex_lock(&memo_lock);
  unsigned i = memo_hash((int)sched, pp, v, m);
  for (; memo[i].slots; i = (i + 1) % SCHEDULE_MEMO) {
    const schedule_bufs_t *e = &memo[i];
    if (e->sched == (int)sched && e->pp == pp && e->v == v && e->m == m) {
      out[0] = e->slots[stage], out[1] = e->act_bufs[stage], out[2] = e->grad_bufs[stage];
      pthread_mutex_unlock(&memo_lock);
      return 0;
    }
  }
  pthread_mutex_unlock(&memo_lock);
  aa_pp_plan_t p;
  int rc = aa_pp_plan(sched, pp, v, m, &p);
  if (rc) return rc;
  out[0] = p.slots[stage], out[1] = p.act_bufs[stage], out[2] = p.grad_bufs[stage];
  int *bufs = malloc(sizeof *bufs * 3 * (size_t)pp);
  if (bufs) {
    for (int r = 0; r < pp; r++)
      bufs[r] = p.slots[r], bufs[pp + r] = p.act_bufs[r], bufs[2 * pp + r] = p.grad_bufs[r];
    pthread_mutex_lock(&memo_lock);
    if (memo_used >= SCHEDULE_MEMO / 2) {
      for (int k = 0; k < SCHEDULE_MEMO; k++)
        free(memo[k].slots);
      memset(memo, 0, sizeof memo);
      memo_used = 0;
    }
    unsigned j = memo_hash((int)sched, pp, v, m);
    while (memo[j].slots &&
           !(memo[j].sched == (int)sched && memo[j].pp == pp && memo[j].v == v && memo[j].m == m))
      j = (j + 1) % SCHEDULE_MEMO;
    if (memo[j].slots) { /* another thread put it meanwhile */
      free(bufs);
    } else {
      memo[j] = (schedule_bufs_t){(int)sched, pp, v, m, bufs, bufs + pp, bufs + 2 * pp};
      memo_used++;
    }
    pthread_mutex_unlock(&memo_lock);
  }
  aa_pp_plan_free(&p);
  return 0;
}

int aa_pp_place(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, aa_pp_place_t *out) {
  int bounds[AA_STRATEGY_STAGES_MAX + 1], rc = aa_pp_bounds(a, s, bounds);
  if (rc) return rc;
  const int v = s->vpp > 1 ? s->vpp : 1, S = aa_pp_stages(s);
  if (stage < 0 || stage >= s->degree[AA_AXIS_PIPELINE])
    return aa_error(AA_EINVAL, "pipeline stage %d outside 0..%d", stage, s->degree[AA_AXIS_PIPELINE] - 1);
  memset(out, 0, sizeof *out);
  out->pp = s->degree[AA_AXIS_PIPELINE];
  out->vpp = v;
  out->stage = stage;
  for (int c = 0; c < v; c++) {
    out->lo[c] = bounds[c * s->degree[AA_AXIS_PIPELINE] + stage];
    out->hi[c] = bounds[c * s->degree[AA_AXIS_PIPELINE] + stage + 1];
  }
  out->slots = 1;
  out->first = stage == 0;
  out->last = stage == (S - 1) % s->degree[AA_AXIS_PIPELINE];
  if (s->degree[AA_AXIS_PIPELINE] == 1 || m <= 0) return 0;
  int bufs[3];
  if ((rc = schedule_bufs(s->schedule, s->degree[AA_AXIS_PIPELINE], v, m, stage, bufs))) return rc;
  out->slots = bufs[0];
  out->act_bufs = bufs[1];
  out->grad_bufs = bufs[2];
  return 0;
}

int aa_pp_chunk_of(const aa_pp_place_t *p, int l) {
  for (int c = 0; c < p->vpp; c++)
    if (l >= p->lo[c] && l < p->hi[c]) return c;
  return -1;
}

int aa_pp_holds_unit(const aa_pp_place_t *p, const aa_arch_t *a, int u) {
  if (!p || p->pp <= 1) return 1;
  if (u == 0) return p->first || (p->last && !aa_arch_is_llama(a)); /* gpt2's last stage: the tied head */
  if (u == a->n_layer + 1) return p->last;
  return aa_pp_chunk_of(p, u - 1) >= 0;
}

int aa_pp_unit0_is_copy(const aa_pp_place_t *p, const aa_arch_t *a) {
  return p && p->pp > 1 && p->last && !p->first && !aa_arch_is_llama(a);
}

double aa_pp_bubble(aa_pp_schedule_t sched, int pp, int vpp, int m) {
  if (pp <= 1 || m < 1) return 0;
  const int v = sched == AA_SCHEDULE_INTERLEAVED && vpp > 1 ? vpp : 1;
  return (double)(pp - 1) / (double)(v * m + pp - 1);
}

/* --- the plan ---------------------------------------------------------------------------- */

typedef struct {
  int fwd, chunk, mb;
} step_t;

/* Rank r's computations in the schedule's order (Megatron's
 * forward_backward_pipelining_* and GPipe), into out (2 m vpp entries). */
static void order(aa_pp_schedule_t sched, int pp, int v, int m, int r, step_t *out) {
  int n = 0;
  if (sched == AA_SCHEDULE_GPIPE) {
    for (int i = 0; i < m; i++)
      out[n++] = (step_t){1, 0, i};
    for (int i = 0; i < m; i++)
      out[n++] = (step_t){0, 0, i};
    return;
  }
  /* Virtual micro-batch k of a rank: micro-batches go through the chunks
   * in groups of pp (Megatron's get_model_chunk_id). */
  const int total = m * v;
  int warm = sched == AA_SCHEDULE_INTERLEAVED ? (pp - r - 1) * 2 + (v - 1) * pp : pp - r - 1;
  if (warm > total) warm = total;
#define VCHUNK(k) (((k) % (pp * v)) / pp)
#define VMB(k) (((k) / (pp * v)) * pp + (k) % pp)
  for (int k = 0; k < warm; k++)
    out[n++] = (step_t){1, VCHUNK(k), VMB(k)};
  for (int i = 0; i < total - warm; i++) {
    int f = warm + i;
    out[n++] = (step_t){1, VCHUNK(f), VMB(f)};
    out[n++] = (step_t){0, v - 1 - VCHUNK(i), VMB(i)};
  }
  for (int k = total - warm; k < total; k++)
    out[n++] = (step_t){0, v - 1 - VCHUNK(k), VMB(k)};
#undef VCHUNK
#undef VMB
}

/* One event of the simulation: a computation starting, or a transfer
 * (one event on both ranks' lists). */
typedef struct {
  double t;
  int cls;     /* 0 transfer, 1 computation: at equal times transfers go first */
  long seq;    /* creation order */
  int rank;    /* computation: its rank; transfer: the sender */
  int to;      /* transfer: the receiver */
  step_t what; /* the computation, or the one whose output moves */
} event_t;

static int cmp_event(const void *x, const void *y) {
  const event_t *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if (a->cls != b->cls) return a->cls - b->cls;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

/* Lowest free index of used (which has one free), marked used; *most
 * counts the indices ever used. */
static int take_free(unsigned char *used, int *most) {
  int i = 0;
  while (used[i])
    i++;
  used[i] = 1;
  if (i + 1 > *most) *most = i + 1;
  return i;
}

int aa_pp_plan(aa_pp_schedule_t sched, int pp, int v, int m, aa_pp_plan_t *out) {
  memset(out, 0, sizeof *out);
  if (pp < 2 || m < 1 || v < 1 || v > AA_PP_CHUNKS_MAX)
    return aa_error(AA_EINVAL, "pipeline plan: %d ranks, %d chunks, %d micro-batches", pp, v, m);
  if ((sched == AA_SCHEDULE_INTERLEAVED) != (v > 1))
    return aa_error(AA_EINVAL, "the %s schedule runs %s", aa_pp_schedule_name(sched),
                    v > 1 ? "one chunk per rank (virtual_stages 1)"
                          : "several chunks per rank (virtual_stages >= 2)");
  if (sched == AA_SCHEDULE_INTERLEAVED && m % pp)
    return aa_error(
        AA_EINVAL,
        "the interleaved schedule needs the micro-batches per step (%d) to be a multiple of the pipeline "
        "degree %d",
        m, pp);
  const int S = pp * v, per = 2 * m * v;
  step_t *steps = malloc(sizeof *steps * (size_t)pp * per);
  double *act_t = malloc(sizeof(double) * (size_t)S * m * 2), *grad_t = act_t + (size_t)S * m;
  event_t *ev = malloc(sizeof *ev * (size_t)pp * per * 2);
  int *next = calloc((size_t)pp, sizeof *next);
  double *clock = calloc((size_t)pp, sizeof *clock);
  out->pp = pp, out->vpp = v, out->m = m;
  out->n_ops = calloc((size_t)pp, sizeof *out->n_ops);
  out->ops = calloc((size_t)pp, sizeof *out->ops);
  out->slots = calloc((size_t)pp, sizeof *out->slots);
  out->act_bufs = calloc((size_t)pp, sizeof(int));
  out->grad_bufs = calloc((size_t)pp, sizeof(int));
  out->busy = calloc((size_t)pp, sizeof(double));
  unsigned char *used = malloc((size_t)per * 2 + 1);
  int rc = 0;
  if (!steps || !act_t || !ev || !next || !clock || !out->n_ops || !out->ops || !out->slots ||
      !out->act_bufs || !out->grad_bufs || !out->busy || !used) {
    rc = aa_error(AA_ENOMEM, "out of memory planning the pipeline");
    goto done;
  }
  for (int r = 0; r < pp; r++)
    order(sched, pp, v, m, r, steps + (size_t)r * per);
  for (size_t i = 0; i < (size_t)S * m * 2; i++)
    act_t[i] = -1;
  /* Run the computations: each time, the one that can start earliest. */
  long nev = 0;
  for (int done = 0; done < pp * per; done++) {
    int best = -1;
    double start = 0;
    for (int r = 0; r < pp; r++) {
      if (next[r] == per) continue;
      step_t s = steps[(size_t)r * per + next[r]];
      int vs = s.chunk * pp + r;
      double dep = 0;
      if (s.fwd && vs > 0) dep = act_t[(size_t)(vs - 1) * m + s.mb];
      if (!s.fwd) dep = vs < S - 1 ? grad_t[(size_t)(vs + 1) * m + s.mb] : act_t[(size_t)vs * m + s.mb];
      if (dep < 0) continue;
      double t = dep > clock[r] ? dep : clock[r];
      if (best < 0 || t < start) best = r, start = t;
    }
    if (best < 0) {
      rc = aa_error(AA_EINVAL, "pipeline plan: the %s schedule stalls (%d ranks, %d micro-batches)",
                    aa_pp_schedule_name(sched), pp, m);
      goto done;
    }
    step_t s = steps[(size_t)best * per + next[best]++];
    int vs = s.chunk * pp + best;
    double cost = s.fwd ? 1 : 2, end = start + cost;
    clock[best] = end;
    out->busy[best] += cost;
    if (end > out->span) out->span = end;
    (s.fwd ? act_t : grad_t)[(size_t)vs * m + s.mb] = end;
    ev[nev] = (event_t){start, 1, nev, best, best, s};
    nev++;
    int dst = s.fwd ? vs + 1 : vs - 1;
    if (dst >= 0 && dst < S) {
      ev[nev] = (event_t){end, 0, nev, best, dst % pp, s};
      nev++;
    }
  }
  qsort(ev, (size_t)nev, sizeof *ev, cmp_event);
  /* Each rank's list, in the one global order, with its buffers. */
  for (int r = 0; r < pp; r++) {
    aa_pp_op_t *ops = out->ops[r] =
        malloc(sizeof *ops * (size_t)per * 3); /* each computation, its send, its input's receive */
    if (!ops) {
      rc = aa_error(AA_ENOMEM, "out of memory planning the pipeline");
      goto done;
    }
    /* Which buffer holds (chunk, mb)'s input (from its receive or its
     * embedding to its backward) and output gradient (from its receive to
     * its backward), and which slot its activations (forward to backward). */
    int *abuf = malloc(sizeof(int) * (size_t)v * m * 3), *gbuf = abuf + v * m, *slot = gbuf + v * m;
    unsigned char *sused = calloc((size_t)v * m + 1, 1); /* the rank's pool of slots */
    if (!abuf || !sused) {
      free(abuf);
      free(sused);
      rc = aa_error(AA_ENOMEM, "out of memory planning the pipeline");
      goto done;
    }
    unsigned char *aused = used, *gused = used + per;
    memset(used, 0, (size_t)per * 2 + 1);
    int n = 0, pend_g = -1, pend_slot = -1; /* what the last backward's send still reads */
    for (long i = 0; i < nev; i++) {
      const event_t *e = &ev[i];
      const step_t s = e->what;
      if (e->cls == 0 && e->rank == r) {
        ops[n++] = (aa_pp_op_t){s.fwd ? AA_PP_SEND_ACT : AA_PP_SEND_GRAD, s.chunk, s.mb, -1, -1, -1, e->to};
        /* The backward's input gradient is sent from where it was
         * computed: the gradient buffer it arrived in, or (on the last
         * virtual stage) the slot's stash. Both stay taken until the send:
         * a receive at the same moment must not land in them. */
        if (!s.fwd) {
          if (pend_g >= 0) gused[pend_g] = 0;
          if (pend_slot >= 0) sused[pend_slot] = 0;
          pend_g = pend_slot = -1;
        }
      } else if (e->cls == 0 && e->to == r) {
        /* The receiving chunk: the next virtual stage's (forward) or the
         * previous one's (backward). */
        int vs = s.chunk * pp + e->rank + (s.fwd ? 1 : -1), c = vs / pp, k = c * m + s.mb;
        int b = s.fwd ? (abuf[k] = take_free(aused, &out->act_bufs[r]))
                      : (gbuf[k] = take_free(gused, &out->grad_bufs[r]));
        ops[n++] = (aa_pp_op_t){
            s.fwd ? AA_PP_RECV_ACT : AA_PP_RECV_GRAD, c, s.mb, -1, s.fwd ? b : -1, s.fwd ? -1 : b, e->rank};
      } else if (e->cls == 1 && e->rank == r) {
        int k = s.chunk * m + s.mb, vs = s.chunk * pp + r;
        if (s.fwd) {
          /* The first virtual stage's input is the embedding, computed
           * into a buffer of its own. At most m v in flight (GPipe: m). */
          if (vs == 0) abuf[k] = take_free(aused, &out->act_bufs[r]);
          int sl = take_free(sused, &out->slots[r]);
          slot[k] = sl;
          ops[n++] = (aa_pp_op_t){AA_PP_FORWARD, s.chunk, s.mb, sl, abuf[k], -1, -1};
        } else {
          int g = vs < S - 1 ? gbuf[k] : -1;
          aused[abuf[k]] = 0;
          if (vs > 0) {
            pend_g = g;
            pend_slot = slot[k];
          } else {
            if (g >= 0) gused[g] = 0;
            sused[slot[k]] = 0;
          }
          ops[n++] = (aa_pp_op_t){AA_PP_BACKWARD, s.chunk, s.mb, slot[k], abuf[k], g, -1};
        }
      }
    }
    free(abuf);
    free(sused);
    out->n_ops[r] = n;
  }
done:
  free(steps);
  free(act_t);
  free(ev);
  free(next);
  free(clock);
  free(used);
  if (rc) aa_pp_plan_free(out);
  return rc;
}

void aa_pp_plan_free(aa_pp_plan_t *p) {
  if (p->ops)
    for (int r = 0; r < p->pp; r++)
      free(p->ops[r]);
  free(p->ops);
  free(p->n_ops);
  free(p->slots);
  free(p->act_bufs);
  free(p->grad_bufs);
  free(p->busy);
  memset(p, 0, sizeof *p);
}
