/* The search space (see space.h): the method names of `exclude` and what
 * exists for a pool, in the order the search tries it. */
#include "space.h"

#include "../common/json.h"
#include "pipeline.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* ATorch's names where they mean the same (amp_native, checkpoint, zero1,
 * zero2, fsdp, tensor_parallel, pipeline_parallel: the methods of its list,
 * strategy_atorch.c), Megatron's sequence_parallel (ATorch's method of that
 * name is another scheme, which autoaccel does not have), and autoaccel's
 * own for the finer choices. One list makes both the table and the joined
 * names, at compile time. */
#define METHODS(X)                                                                                           \
  X("amp", AA_SPACE_EX_BF16 | AA_SPACE_EX_FP16)                                                              \
  X("amp_native", AA_SPACE_EX_BF16 | AA_SPACE_EX_FP16)                                                       \
  X("bf16", AA_SPACE_EX_BF16)                                                                                \
  X("fp16", AA_SPACE_EX_FP16)                                                                                \
  X("fp32", AA_SPACE_EX_FP32)                                                                                \
  X("checkpoint", AA_SPACE_EX_SELECTIVE | AA_SPACE_EX_FULL)                                                  \
  X("selective", AA_SPACE_EX_SELECTIVE)                                                                      \
  X("full", AA_SPACE_EX_FULL)                                                                                \
  X("zero", AA_SPACE_EX_ZERO1 | AA_SPACE_EX_ZERO2 | AA_SPACE_EX_ZERO3)                                       \
  X("zero1", AA_SPACE_EX_ZERO1)                                                                              \
  X("zero2", AA_SPACE_EX_ZERO2)                                                                              \
  X("zero3", AA_SPACE_EX_ZERO3)                                                                              \
  X("fsdp", AA_SPACE_EX_ZERO3)                                                                               \
  X("tensor_parallel", AA_SPACE_EX_TP)                                                                       \
  X("sequence_parallel", AA_SPACE_EX_SP)                                                                     \
  X("pipeline_parallel", AA_SPACE_EX_PP)                                                                     \
  X("context_parallel", AA_SPACE_EX_CP)                                                                      \
  X("expert_parallel", AA_SPACE_EX_EP)

#define ENTRY(name_, bits_) {name_, bits_},
#define JOINED(name_, bits_) ", " name_

static const struct {
  const char *name;
  unsigned bits;
} methods[] = {METHODS(ENTRY)};
#define NMETHODS (sizeof methods / sizeof methods[0])

/* ", amp, amp_native, ...": the names start after the first ", ". */
static const char joined[] = METHODS(JOINED);

const char *aa_space_exclude_names(void) { return joined + 2; }

/* The index of name in the table, or NMETHODS with the error, for the
 * option `what` ("exclude", "include"), naming the accepted ones. */
static size_t method_find(const char *what, const char *name) {
  size_t k = 0;
  while (k < NMETHODS && strcmp(name, methods[k].name) != 0)
    k++;
  if (k == NMETHODS) {
    char got[64];
    aa_json_sanitize(got, sizeof got, name);
    aa_error(AA_EINVAL, "%s: unknown method \"%s\" (accepted: %s)", what, got, aa_space_exclude_names());
  }
  return k;
}

int aa_space_exclude_mask(const char *const *names, size_t n, unsigned *out) {
  unsigned mask = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = method_find("exclude", names[i]);
    if (k == NMETHODS) return AA_EINVAL;
    mask |= methods[k].bits;
  }
  *out = mask;
  return 0;
}

/* The table has fewer entries than an unsigned has bits. */
_Static_assert(NMETHODS <= 32, "an include set is one bit per method name");

int aa_space_include_set(const char *const *names, size_t n, unsigned exclude, unsigned *out) {
  unsigned set = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = method_find("include", names[i]);
    if (k == NMETHODS) return AA_EINVAL;
    if (!(methods[k].bits & ~exclude)) {
      char ex[160];
      return aa_error(AA_EINVAL, "include: method \"%s\" is also excluded (exclude leaves out %s)",
                      methods[k].name, aa_space_method_names(ex, sizeof ex, exclude & methods[k].bits));
    }
    set |= 1u << k;
  }
  *out = set;
  return 0;
}

unsigned aa_space_include_unmet(unsigned methods_used, unsigned include) {
  unsigned unmet = 0;
  for (size_t k = 0; k < NMETHODS; k++)
    if ((include & (1u << k)) && !(methods_used & methods[k].bits)) unmet |= 1u << k;
  return unmet;
}

const char *aa_space_include_names(char *buf, size_t cap, unsigned include) {
  size_t o = 0;
  if (cap == 0) return buf;
  buf[0] = '\0';
  for (size_t k = 0; k < NMETHODS && o < cap; k++)
    if (include & (1u << k)) o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", methods[k].name);
  return buf;
}

/* The bit of each ZeRO stage (0 has none) and of each precision. */
static const unsigned zero_bit[] = {0, AA_SPACE_EX_ZERO1, AA_SPACE_EX_ZERO2, AA_SPACE_EX_ZERO3};

static unsigned precision_bit(aa_dtype_t t) {
  return t == AA_BF16 ? AA_SPACE_EX_BF16 : t == AA_F16 ? AA_SPACE_EX_FP16 : AA_SPACE_EX_FP32;
}

/* The AA_SPACE_EX_* bit of axis a's method (axis.h), 0 when it has none. */
static unsigned axis_bit(aa_axis_t a) {
  const char *m = aa_axis_info(a)->method;
  for (size_t k = 0; m && k < NMETHODS; k++)
    if (strcmp(methods[k].name, m) == 0) return methods[k].bits;
  return 0;
}

unsigned aa_space_methods_of(const aa_strategy_t *s) {
  unsigned m = precision_bit(s->amp);
  if (s->ckpt == AA_CKPT_SELECTIVE) m |= AA_SPACE_EX_SELECTIVE;
  if (s->ckpt == AA_CKPT_FULL) m |= AA_SPACE_EX_FULL;
  if (s->zero >= 1 && s->zero <= 3) m |= zero_bit[s->zero];
  for (int a = 0; a < AA_AXES; a++)
    if (s->degree[a] > 1) m |= axis_bit((aa_axis_t)a);
  if (s->sp) m |= AA_SPACE_EX_SP;
  if (s->ep > 1) m |= AA_SPACE_EX_EP;
  return m;
}

/* Each bit by the first name of the table that means it alone (so zero3,
 * not fsdp), in table order. */
const char *aa_space_method_names(char *buf, size_t cap, unsigned bits) {
  unsigned done = 0;
  size_t o = 0;
  if (cap == 0) return buf;
  buf[0] = '\0';
  for (size_t i = 0; i < NMETHODS && o < cap; i++) {
    unsigned b = methods[i].bits;
    if ((b & (b - 1)) || !(bits & b) || (done & b)) continue; /* several bits, not asked, or named */
    done |= b;
    o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", methods[i].name);
  }
  return buf;
}

/* Appends x to out when there is room; counts it either way. */
#define PUT(out, cap, n, x)                                                                                  \
  do {                                                                                                       \
    if ((n) < (cap)) (out)[n] = (x);                                                                         \
    (n)++;                                                                                                   \
  } while (0)

/* Where layout_next is: the gang's world, each searched axis's degree (the
 * innermost 0 before the first layout) and sp. */
typedef struct {
  int world, sp;
  int degree[AA_AXES];
} cursor_t;

/* The searched axes, outermost loop first (the table's `search` column),
 * into nest; their count. The axis with search -1 takes the ranks left. */
static int nest_axes(aa_axis_t nest[AA_AXES]) {
  int n = 0;
  for (int pos = 0; pos < AA_AXES; pos++)
    for (int a = 0; a < AA_AXES; a++)
      if (aa_axis_info((aa_axis_t)a)->search == pos) nest[n++] = (aa_axis_t)a;
  return n;
}

static aa_axis_t rest_axis(void) {
  for (int a = 0; a < AA_AXES; a++)
    if (aa_axis_info((aa_axis_t)a)->search < 0) return (aa_axis_t)a;
  return AA_AXIS_DATA;
}

/* The methods the pool leaves out: the caller's, and what the engine does
 * not run for the model: nothing so far. MoE layers it runs at every
 * layout (on GPU pools the planner's search leaves out what has not run
 * on GPUs: planner/search.c); LoRA adapters at every layout, precision
 * and ZeRO stage (docs/model-spec.md "moe", "lora"). */
static unsigned excluded(const aa_space_pool_t *p) {
  unsigned ex = p->exclude;
  return ex;
}

/* The largest degree axis a may take in a world of the pool: 1 when its
 * method is excluded; a pipeline at most n_layer (a stage holds a block
 * at least), a context group at most seq_len / 2 (two chunks of a
 * sequence a rank), and neither without the model; no context group for
 * a model with MoE layers. */
static int axis_max(const aa_space_pool_t *p, aa_axis_t a, int world) {
  if (excluded(p) & axis_bit(a)) return 1;
  if (a == AA_AXIS_PIPELINE) return !p->arch ? 1 : world < p->arch->n_layer ? world : p->arch->n_layer;
  if (a == AA_AXIS_CONTEXT) return !p->arch ? 1 : world < p->arch->seq_len / 2 ? world : p->arch->seq_len / 2;
  return world;
}

/* Whether axis a may take degree d (at most axis_max): a context group
 * cuts every sequence into 2d chunks (aa_strategy_resolve's rule). */
static bool axis_fits(const aa_space_pool_t *p, aa_axis_t a, int d) {
  return a != AA_AXIS_CONTEXT || d == 1 || (p->arch && p->arch->seq_len % (2 * d) == 0);
}

static cursor_t cursor_start(const aa_space_pool_t *p) {
  cursor_t c = {.world = p->devices};
  aa_axis_t nest[AA_AXES];
  int n = nest_axes(nest);
  for (int a = 0; a < AA_AXES; a++)
    c.degree[a] = 1;
  if (n) c.degree[nest[n - 1]] = 0;
  return c;
}

/* Steps c to the next layout of the pool in the order of aa_space_layouts
 * and writes it to *out; false when there is none left: an odometer over
 * the searched axes, innermost fastest, each up to the ranks its outer
 * ones leave, then the next smaller world. Sequence parallelism is the
 * tensor axis's own innermost choice. The walk is polynomial in the
 * devices, which the protocol bounds (AA_PROTO_WORLD_MAX). */
static bool layout_next(cursor_t *c, const aa_space_pool_t *p, aa_space_layout_t *out) {
  if (p->global_batch < 1) return false;
  aa_axis_t nest[AA_AXES], rest = rest_axis();
  const int n = nest_axes(nest);
  for (;;) {
    if (c->sp == 0 && c->degree[AA_AXIS_TENSOR] > 1 && !(excluded(p) & AA_SPACE_EX_SP)) {
      c->sp = 1;
    } else {
      c->sp = 0;
      for (int i = n - 1; i >= 0; i--) {
        int outer = 1;
        for (int k = 0; k < i; k++)
          outer *= c->degree[nest[k]];
        int lim = axis_max(p, nest[i], c->world);
        if (lim > c->world / outer) lim = c->world / outer;
        if (++c->degree[nest[i]] <= lim) break;
        c->degree[nest[i]] = 1;
        if (i == 0 && (p->whole || --c->world < 1)) return false;
      }
    }
    long long prod = 1;
    for (int i = 0; i < n; i++)
      prod *= c->degree[nest[i]];
    if (c->world % prod) continue;
    bool fits = true;
    for (int i = 0; i < n; i++)
      fits = fits && axis_fits(p, nest[i], c->degree[nest[i]]);
    if (!fits) continue;
    const int rest_degree = c->world / (int)prod;
    if (rest == AA_AXIS_DATA && p->global_batch % rest_degree) continue;
    *out = (aa_space_layout_t){.sp = c->sp};
    for (int i = 0; i < n; i++)
      out->degree[nest[i]] = c->degree[nest[i]];
    out->degree[rest] = rest_degree;
    return true;
  }
}

size_t aa_space_layouts(aa_space_layout_t *out, size_t cap, const aa_space_pool_t *pool) {
  cursor_t c = cursor_start(pool);
  aa_space_layout_t l;
  size_t n = 0;
  while (layout_next(&c, pool, &l))
    PUT(out, cap, n, l);
  return n;
}

size_t aa_space_zero_stages(int *out, size_t cap, int dp, unsigned exclude) {
  size_t n = 0;
  for (int zero = 0; zero <= (dp > 1 ? 3 : 0); zero++)
    if (!(exclude & zero_bit[zero])) PUT(out, cap, n, zero);
  return n;
}

size_t aa_space_precisions(aa_dtype_t *out, size_t cap, bool cuda, unsigned exclude) {
  static const aa_dtype_t gpu[] = {AA_BF16, AA_F16, AA_F32};
  static const aa_dtype_t cpu[] = {AA_F32, AA_BF16, AA_F16};
  const aa_dtype_t *order = cuda ? gpu : cpu;
  size_t n = 0;
  for (int i = 0; i < 3; i++)
    if (!(exclude & precision_bit(order[i]))) PUT(out, cap, n, order[i]);
  return n;
}

size_t aa_space_ckpt_modes(aa_ckpt_mode_t *out, size_t cap, unsigned exclude) {
  size_t n = 0;
  PUT(out, cap, n, AA_CKPT_NONE);
  if (!(exclude & AA_SPACE_EX_SELECTIVE)) PUT(out, cap, n, AA_CKPT_SELECTIVE);
  if (!(exclude & AA_SPACE_EX_FULL)) PUT(out, cap, n, AA_CKPT_FULL);
  return n;
}

size_t aa_space_experts(int *out, size_t cap, const aa_arch_t *arch, int replicas, unsigned exclude) {
  size_t n = 0;
  PUT(out, cap, n, 1);
  if (!arch || arch->moe.experts < 1 || (exclude & AA_SPACE_EX_EP)) return n;
  for (int e = 2; e <= replicas; e++)
    if (replicas % e == 0 && arch->moe.experts % e == 0) PUT(out, cap, n, e);
  return n;
}

size_t aa_space_micro_batches(int *out, size_t cap, int per_rank) {
  size_t n = 0;
  for (int mb = per_rank; mb >= 1; mb--)
    if (per_rank % mb == 0) PUT(out, cap, n, mb);
  return n;
}

/* The expert-parallel degrees of a layout: divisors of a model's experts
 * (at most 1,024, strategy.h), of which 1,024 has 11. */
#define MAX_EXPERT_DEGREES 32
/* No int has more divisors than 2095133040 (1600; the next number with
 * more exceeds INT_MAX), so any per-rank batch's micro-batches fit. */
#define MAX_DIVISORS 1600
/* 1f1b, interleaved at 2, 4, ... up to AA_SPACE_VPP_MAX virtual stages,
 * and gpipe, each uniform and by parameters. */
#define MAX_SHAPES (2 * (2 + AA_SPACE_VPP_STEPS))

/* The pipeline shapes of layout l (see aa_space_enumerate) into out, as
 * strategies with the layout set; returns how many. */
static size_t pipeline_shapes(aa_strategy_t out[MAX_SHAPES], const aa_space_layout_t *l,
                              const aa_space_pool_t *p) {
  static const aa_pp_schedule_t schedules[] = {AA_SCHEDULE_1F1B, AA_SCHEDULE_INTERLEAVED, AA_SCHEDULE_GPIPE};
  aa_strategy_t s;
  aa_strategy_default(&s);
  memcpy(s.degree, l->degree, sizeof s.degree);
  s.sp = l->sp;
  if (l->degree[AA_AXIS_PIPELINE] == 1) {
    out[0] = s;
    return 1;
  }
  size_t n = 0;
  const int vmax = p->vpp_max > AA_SPACE_VPP_MAX ? AA_SPACE_VPP_MAX : p->vpp_max > 2 ? p->vpp_max : 2;
  for (size_t k = 0; k < sizeof schedules / sizeof schedules[0]; k++)
    for (int v = 2; v <= (schedules[k] == AA_SCHEDULE_INTERLEAVED ? vmax : 2); v *= 2) {
      s.schedule = schedules[k];
      s.vpp = s.schedule == AA_SCHEDULE_INTERLEAVED ? v : 1;
      s.partition = AA_PARTITION_UNIFORM;
      int uniform[AA_STRATEGY_STAGES_MAX + 1], params[AA_STRATEGY_STAGES_MAX + 1];
      if (aa_pp_bounds(p->arch, &s, uniform)) continue; /* more stages than blocks */
      out[n++] = s;
      s.partition = AA_PARTITION_PARAMETERS;
      if (!aa_pp_bounds(p->arch, &s, params) &&
          memcmp(uniform, params, sizeof uniform[0] * (size_t)(aa_pp_stages(&s) + 1)) != 0)
        out[n++] = s;
    }
  return n;
}

size_t aa_space_each(const aa_space_pool_t *pool, aa_space_visit_fn visit, void *ctx) {
  if (pool->devices < 1 || pool->global_batch < 1) return 0;
  int divisors[MAX_DIVISORS], mbs[MAX_DIVISORS], zeros[4];
  aa_dtype_t amps[3];
  aa_ckpt_mode_t ckpts[3];
  aa_strategy_t shapes[MAX_SHAPES];
  size_t n = 0, nsettings = 0;
  const unsigned exclude = excluded(pool);
  size_t nckpt = aa_space_ckpt_modes(ckpts, 3, exclude);
  size_t namp = aa_space_precisions(amps, 3, pool->cuda, exclude);
  cursor_t cur = cursor_start(pool);
  aa_space_layout_t l;
  while (layout_next(&cur, pool, &l)) {
    const int dp = l.degree[AA_AXIS_DATA], pp = l.degree[AA_AXIS_PIPELINE],
              per_rank = pool->global_batch / dp;
    size_t ndiv = aa_space_micro_batches(divisors, MAX_DIVISORS, per_rank);
    assert(ndiv <= MAX_DIVISORS);
    /* ZeRO shards over the data x context ranks (sizes.h). */
    size_t nzero = aa_space_zero_stages(zeros, 4, dp * l.degree[AA_AXIS_CONTEXT], exclude);
    /* Expert degrees divide the data x context ranks, like ZeRO's shards. */
    int eps[MAX_EXPERT_DEGREES];
    const size_t nep =
        aa_space_experts(eps, MAX_EXPERT_DEGREES, pool->arch, dp * l.degree[AA_AXIS_CONTEXT], exclude);
    /* An MoE model's experts whole on every tensor rank, or (tp > 1, the
     * tensor degree dividing their width) split over the tensor ranks. */
    const int tp = l.degree[AA_AXIS_TENSOR];
    const int etps[2] = {1, tp};
    const size_t netp =
        pool->arch && pool->arch->moe.experts && tp > 1 && pool->arch->moe.d_ff_expert % tp == 0 ? 2 : 1;
    if (pp > 1)
      while (nzero > 0 && zeros[nzero - 1] >= 2)
        nzero--;
    size_t nshape = pipeline_shapes(shapes, &l, pool);
    for (size_t h = 0; h < nshape; h++) {
      const bool interleaved = shapes[h].schedule == AA_SCHEDULE_INTERLEAVED;
      size_t nmb = 0;
      for (size_t b = 0; b < ndiv; b++) {
        const int m = per_rank / divisors[b];
        if (pp == 1 || (m >= pp && (!interleaved || m % pp == 0))) mbs[nmb++] = divisors[b];
      }
      if (nmb == 0) continue;
      for (size_t z = 0; z < nzero; z++) {
        for (size_t e = 0; e < nep && e < MAX_EXPERT_DEGREES; e++)
          for (size_t x = 0; x < netp; x++)
            for (size_t a = 0; a < namp; a++)
              for (size_t k = 0; k < nckpt; k++) {
                /* A setting decides every method, so one that misses an
                 * included method is left out whole, as an excluded one is. */
                aa_strategy_t t = shapes[h];
                t.zero = zeros[z];
                t.ep = eps[e];
                t.etp = etps[x] > 1 ? etps[x] : 0;
                t.amp = amps[a];
                t.ckpt = ckpts[k];
                if (aa_space_include_unmet(aa_space_methods_of(&t), pool->include)) continue;
                for (size_t b = 0; b < nmb; b++) {
                  t.micro_batch = mbs[b];
                  if (visit && visit(ctx, n, (int)nsettings, &t)) return n + 1;
                  n++;
                }
                nsettings++;
              }
      }
    }
  }
  return n;
}

/* aa_space_enumerate's visitor: the first cap candidates into an array. */
typedef struct {
  aa_strategy_t *out;
  int *setting;
  size_t cap;
} fill_t;

static int fill(void *ctx, size_t i, int setting, const aa_strategy_t *s) {
  fill_t *f = ctx;
  if (i < f->cap) {
    f->out[i] = *s;
    if (f->setting) f->setting[i] = setting;
  }
  return 0;
}

size_t aa_space_enumerate(aa_strategy_t *out, int *setting, size_t cap, const aa_space_pool_t *pool) {
  fill_t f = {out, setting, cap};
  return aa_space_each(pool, out || setting ? fill : NULL, &f);
}

/* Whether a and b cut the model into the same pipeline stages and run them
 * in the same schedule (one knob: the pipeline's shape). */
static bool same_shape(const aa_strategy_t *a, const aa_strategy_t *b) {
  if (a->degree[AA_AXIS_PIPELINE] == 1 && b->degree[AA_AXIS_PIPELINE] == 1) return true;
  const int va = a->vpp > 1 ? a->vpp : 1, vb = b->vpp > 1 ? b->vpp : 1;
  return a->schedule == b->schedule && va == vb && a->partition == b->partition &&
         a->bounds == b->bounds; /* one stored copy per distinct cut (aa_strategy_set_bounds) */
}

int aa_space_distance(const aa_strategy_t *a, const aa_strategy_t *b) {
  int d = (a->sp != b->sp) + (a->zero != b->zero) + (a->amp != b->amp) + (a->ckpt != b->ckpt) +
          (a->micro_batch != b->micro_batch) + !same_shape(a, b) +
          ((a->ep > 1 ? a->ep : 1) != (b->ep > 1 ? b->ep : 1)) +
          ((a->etp > 1 ? a->etp : 1) != (b->etp > 1 ? b->etp : 1));
  for (int x = 0; x < AA_AXES; x++)
    d += a->degree[x] != b->degree[x];
  return d;
}
