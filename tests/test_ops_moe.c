/* The CPU mixture-of-experts ops (kernels/cpu/cpu_moe.c, contracts in
 * cpu_moe.h), composed into Mixtral's block as the engine will compose them:
 * against tests/reference/moe_tiny.fixture (float64 PyTorch, made by
 * make_moe_fixture.py: forward, routing, kept and dropped counts, both
 * losses, every gradient) for three cases (one shared expert, none, and a
 * capacity factor that drops slots); against central differences of the C
 * forward itself; the permute/unpermute round trip and the map's ordering on
 * a larger random routing; ties; bad shapes; determinism across thread
 * counts. Every test runs with 1 and with 2 threads. */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/cpu/cpu_moe.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const aa_ops_t *ops;
static int cur_threads = 1;
static aa_rng_t rng;

/* ------------------------------------------------------------------ fixture */

#define FIXTURE_MAX_BYTES (1 << 22)
#define FIXTURE_MAX_CASES 8
#define FIXTURE_MAX_DIM 1024

typedef struct {
  int N, C, E, k, F, S;
  float aux_coef, z_coef, cap;
  float *x, *wr, *w13, *w2, *ws13, *ws2, *dout;          /* inputs */
  int32_t *expert, *kept, dropped;                       /* routing */
  float *weight, *out, aux, z;                           /* forward */
  float *dlogits, *dx, *dwr, *dw13, *dw2, *dws13, *dws2; /* gradients */
} moe_case;

typedef struct {
  unsigned char *buf;
  size_t len, pos;
  int bad;
} cursor;

/* The next n 4-byte values, or NULL (and the cursor marked bad) past the end.
 * The fields are read in place: the file is little-endian like the host
 * (x86-64, aarch64) and every field is 4 bytes, so the buffer from malloc
 * stays aligned. */
static void *take(cursor *c, size_t n) {
  if (c->bad || n > (c->len - c->pos) / 4) {
    c->bad = 1;
    return NULL;
  }
  void *p = c->buf + c->pos;
  c->pos += 4 * n;
  return p;
}

static int fixture_cases;
static moe_case fixture[FIXTURE_MAX_CASES];
static unsigned char *fixture_buf;

/* Loads moe_tiny.fixture from $AA_SOURCE_DIR: every header value bounded
 * before it sizes a read, the file exactly as long as its headers say. */
static int fixture_load(void) {
  const char *dir = getenv("AA_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/reference/moe_tiny.fixture", dir ? dir : ".");
  FILE *fp = fopen(path, "rb");
  if (!fp) return aa_error(AA_ENOENT, "%s: cannot open (set AA_SOURCE_DIR to the source tree)", path);
  long size = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
  if (size < 12 || size > FIXTURE_MAX_BYTES || fseek(fp, 0, SEEK_SET) != 0) {
    fclose(fp);
    return aa_error(AA_EFORMAT, "%s: unreadable, too short or larger than %d bytes", path, FIXTURE_MAX_BYTES);
  }
  cursor c = {malloc((size_t)size), (size_t)size, 8, 0};
  if (!c.buf || fread(c.buf, 1, c.len, fp) != c.len) {
    fclose(fp);
    free(c.buf);
    return aa_error(AA_EIO, "%s: cannot read", path);
  }
  fclose(fp);
  fixture_buf = c.buf;
  if (memcmp(c.buf, "AAFIXM01", 8) != 0) return aa_error(AA_EFORMAT, "%s: bad magic (want AAFIXM01)", path);
  int32_t *nc = take(&c, 1);
  if (!nc || *nc < 1 || *nc > FIXTURE_MAX_CASES) return aa_error(AA_EFORMAT, "%s: bad case count", path);
  fixture_cases = *nc;
  for (int i = 0; i < fixture_cases; i++) {
    moe_case *m = &fixture[i];
    int32_t *d = take(&c, 6);
    float *f = take(&c, 3);
    if (!d || !f) break;
    m->N = d[0], m->C = d[1], m->E = d[2], m->k = d[3], m->F = d[4], m->S = d[5];
    if (m->N < 1 || m->N > FIXTURE_MAX_DIM || m->C < 1 || m->C > FIXTURE_MAX_DIM || m->E < 1 || m->E > 64 ||
        m->k < 1 || m->k > m->E || m->F < 1 || m->F > FIXTURE_MAX_DIM || m->S < 0 || m->S > 8)
      return aa_error(AA_EFORMAT, "%s: case %d: shape out of bounds", path, i);
    m->aux_coef = f[0], m->z_coef = f[1], m->cap = f[2];
    size_t N = m->N, C = m->C, E = m->E, k = m->k, F = m->F, S = m->S;
    size_t nx = N * C, nr = E * C, n13 = E * 2 * F * C, n2 = E * C * F, ns13 = S * 2 * F * C, ns2 = S * C * F;
    m->x = take(&c, nx), m->wr = take(&c, nr), m->w13 = take(&c, n13), m->w2 = take(&c, n2);
    m->ws13 = take(&c, ns13), m->ws2 = take(&c, ns2), m->dout = take(&c, nx);
    m->expert = take(&c, N * k), m->kept = take(&c, E);
    int32_t *dr = take(&c, 1);
    m->weight = take(&c, N * k), m->out = take(&c, nx);
    float *loss = take(&c, 2);
    m->dlogits = take(&c, N * E), m->dx = take(&c, nx), m->dwr = take(&c, nr), m->dw13 = take(&c, n13);
    m->dw2 = take(&c, n2), m->dws13 = take(&c, ns13), m->dws2 = take(&c, ns2);
    if (c.bad) break;
    m->dropped = *dr, m->aux = loss[0], m->z = loss[1];
  }
  if (c.bad || c.pos != c.len) return aa_error(AA_EFORMAT, "%s: length does not match its headers", path);
  return 0;
}

/* -------------------------------------------------------------- the block */

/* One MoE block's tensors: the case's inputs (borrowed) and the forward's
 * activations and the backward's gradients (owned). */
typedef struct {
  const moe_case *m;
  float *x, *wr, *w13, *w2, *ws13, *ws2; /* copies, so finite differences can move them */
  float *logits, *probs, *xp, *h, *a, *yp, *hs, *as, *out, aux, z;
  aa_moe_route_t r;
  aa_moe_stats_t st;
  float *dlogits, *dyp, *dweight, *dxp, *dx, *dwr, *dw13, *dw2, *dws13, *dws2;
} block;

static size_t sz_x(const moe_case *m) { return (size_t)m->N * m->C; }
static size_t sz_13(const moe_case *m, int n) { return (size_t)n * 2 * m->F * m->C; }
static size_t sz_2(const moe_case *m, int n) { return (size_t)n * m->C * m->F; }

static block block_make(const moe_case *m) {
  size_t N = m->N, C = m->C, E = m->E, F = m->F, S = m->S, slots = N * m->k;
  block b = {.m = m};
  b.x = aa_test_fcopy(m->x, N * C), b.wr = aa_test_fcopy(m->wr, E * C);
  b.w13 = aa_test_fcopy(m->w13, sz_13(m, m->E)), b.w2 = aa_test_fcopy(m->w2, sz_2(m, m->E));
  b.ws13 = aa_test_fcopy(m->ws13, sz_13(m, m->S)), b.ws2 = aa_test_fcopy(m->ws2, sz_2(m, m->S));
  b.logits = aa_test_falloc(N * E), b.probs = aa_test_falloc(N * E);
  b.xp = aa_test_falloc(slots * C), b.h = aa_test_falloc(slots * 2 * F), b.a = aa_test_falloc(slots * F);
  b.yp = aa_test_falloc(slots * C), b.hs = aa_test_falloc(S * N * 2 * F), b.as = aa_test_falloc(S * N * F);
  b.out = aa_test_falloc(N * C);
  b.dlogits = aa_test_falloc(N * E), b.dyp = aa_test_falloc(slots * C), b.dweight = aa_test_falloc(slots);
  b.dxp = aa_test_falloc(slots * C), b.dx = aa_test_falloc(N * C), b.dwr = aa_test_falloc(E * C);
  b.dw13 = aa_test_falloc(sz_13(m, m->E)), b.dw2 = aa_test_falloc(sz_2(m, m->E));
  b.dws13 = aa_test_falloc(sz_13(m, m->S)), b.dws2 = aa_test_falloc(sz_2(m, m->S));
  if (aa_cpu_moe_route_alloc(&b.r, m->N, m->E, m->k) != 0) abort();
  return b;
}

static void block_free(block *b) {
  float *all[] = {b->x,   b->wr, b->w13, b->w2,   b->ws13, b->ws2,   b->logits,  b->probs, b->xp,
                  b->h,   b->a,  b->yp,  b->hs,   b->as,   b->out,   b->dlogits, b->dyp,   b->dweight,
                  b->dxp, b->dx, b->dwr, b->dw13, b->dw2,  b->dws13, b->dws2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    free(all[i]);
  aa_cpu_moe_route_free(&b->r);
}

static void block_forward(block *b) {
  const moe_case *m = b->m;
  aa_cpu_moe_router_forward(b->logits, b->probs, b->x, b->wr, m->N, m->C, m->E);
  CHECK(aa_cpu_moe_route(&b->r, &b->st, b->logits, b->probs, m->cap) == 0);
  aa_cpu_moe_permute(b->xp, b->x, &b->r, m->C);
  aa_cpu_moe_experts_forward(b->yp, b->h, b->a, b->xp, b->w13, b->w2, b->r.offsets, m->E, m->C, m->F);
  aa_cpu_moe_unpermute(b->out, b->yp, &b->r, m->C);
  aa_cpu_moe_shared_forward(b->out, b->hs, b->as, b->x, b->ws13, b->ws2, m->S, m->N, m->C, m->F);
  aa_cpu_moe_losses(&b->aux, &b->z, b->logits, b->probs, &b->r, m->aux_coef, m->z_coef);
}

/* The gradients of L = sum(out * dout) + aux + z, accumulated into the
 * parameter and input gradients as they hold (the activation gradients are
 * zeroed first, as the engine does). */
static void block_backward(block *b) {
  const moe_case *m = b->m;
  size_t slots = (size_t)m->N * m->k;
  memset(b->dyp, 0, slots * m->C * sizeof(float));
  memset(b->dxp, 0, slots * m->C * sizeof(float));
  memset(b->dweight, 0, slots * sizeof(float));
  aa_cpu_moe_unpermute_backward(b->dyp, b->dweight, m->dout, b->yp, &b->r, m->C);
  aa_cpu_moe_experts_backward(b->dxp, b->dw13, b->dw2, b->dyp, b->xp, b->h, b->a, b->w13, b->w2, b->r.offsets,
                              m->E, m->C, m->F);
  aa_cpu_moe_permute_backward(b->dx, b->dxp, &b->r, m->C);
  aa_cpu_moe_shared_backward(b->dx, b->dws13, b->dws2, m->dout, b->x, b->hs, b->as, b->ws13, b->ws2, m->S,
                             m->N, m->C, m->F);
  aa_cpu_moe_router_backward(b->dx, b->dwr, b->dlogits, b->dweight, b->x, b->wr, b->logits, b->probs, &b->r,
                             m->C, m->aux_coef, m->z_coef, 1.0f);
}

/* ------------------------------------------------- against the fixture
 *
 * The reference is exact (float64 on the float32 inputs), so the difference
 * is the C ops' float32 rounding. Each output element is a few short dot
 * products (C = 16, F = 12 terms, k = 2 experts, a shared expert) of O(1)
 * values through an exp accurate to 1.4 ulp: ~10 roundings of 6e-8
 * relative on values up to ~6, errors of ~1e-6 absolute; a weight gradient
 * sums over up to N = 24 rows, a few times that. The check is |c - ref| <=
 * TOL_ABS + TOL_REL |ref| with TOL_ABS = 1e-5 and TOL_REL = 2e-5: on the
 * committed fixture the largest error is 2.9e-6 and the printed worst
 * err/tol 0.06, a margin of ~15x for other BLAS kernels and summation
 * orders, while a wrong term (a missed gradient path, a wrong weight, a
 * drop in the wrong place) is the size of the values themselves, 1e-3 to 1.
 * The losses are double sums of float probabilities and logits: relative
 * 1e-5 (they agree to the 7 digits printed). */
#define TOL_ABS 1e-5
#define TOL_REL 2e-5

static void check_close(const char *what, const float *got, const float *ref, size_t n) {
  double worst = 0.0, worst_abs = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - ref[i]);
    double ratio = err / (TOL_ABS + TOL_REL * fabs(ref[i]));
    if (!(ratio <= worst)) worst = ratio == ratio ? ratio : INFINITY, worst_i = i;
    worst_abs = fmax(worst_abs, err == err ? err : INFINITY);
  }
  fprintf(stderr, "    %-8s %5zu elems, max |c-ref| %.2e, max err/tol %.3f\n", what, n, worst_abs, worst);
  CHECK_MSG(worst <= 1.0, "%s[%zu]: %.8g against %.8g", what, worst_i, n ? got[worst_i] : 0.0,
            n ? ref[worst_i] : 0.0);
}

AA_TEST(moe_forward_matches_pytorch) {
  for (int i = 0; i < fixture_cases; i++) {
    const moe_case *m = &fixture[i];
    fprintf(stderr, "  case %d: S %d capacity factor %g\n", i, m->S, m->cap);
    block b = block_make(m);
    block_forward(&b);
    size_t slots = (size_t)m->N * m->k;
    CHECK(memcmp(b.r.expert, m->expert, slots * sizeof(int32_t)) == 0);
    int kept_min = m->kept[0], kept_max = m->kept[0], kept_ok = 1;
    for (int e = 0; e < m->E; e++) {
      kept_ok &= b.r.offsets[e + 1] - b.r.offsets[e] == m->kept[e];
      kept_min = m->kept[e] < kept_min ? m->kept[e] : kept_min;
      kept_max = m->kept[e] > kept_max ? m->kept[e] : kept_max;
    }
    CHECK(kept_ok);
    CHECK(b.st.min_tokens == kept_min && b.st.max_tokens == kept_max);
    CHECK(b.st.dropped == m->dropped);
    CHECK(b.r.rows == (int)slots - m->dropped);
    if (m->cap > 0.0f) CHECK(m->dropped > 0); /* the case must exercise the drop */
    check_close("weight", b.r.weight, m->weight, slots);
    check_close("out", b.out, m->out, sz_x(m));
    CHECK_NEAR(b.aux, m->aux, 1e-5 * m->aux);
    CHECK_NEAR(b.z, m->z, 1e-5 * m->z);
    fprintf(stderr, "    aux %.7g (ref %.7g), z %.7g (ref %.7g), dropped %d\n", b.aux, m->aux, b.z, m->z,
            b.st.dropped);
    block_free(&b);
  }
}

/* The parameter and input gradients start from random values, so the check
 * also proves that the backward ops accumulate (+=) into them. */
AA_TEST(moe_backward_matches_pytorch) {
  for (int i = 0; i < fixture_cases; i++) {
    const moe_case *m = &fixture[i];
    fprintf(stderr, "  case %d: S %d capacity factor %g\n", i, m->S, m->cap);
    block b = block_make(m);
    float **g[] = {&b.dx, &b.dwr, &b.dw13, &b.dw2, &b.dws13, &b.dws2};
    size_t n[] = {sz_x(m), (size_t)m->E * m->C, sz_13(m, m->E), sz_2(m, m->E), sz_13(m, m->S), sz_2(m, m->S)};
    float *pre[6];
    for (int t = 0; t < 6; t++) {
      pre[t] = aa_test_frand(&rng, n[t], -1, 1);
      memcpy(*g[t], pre[t], n[t] * sizeof(float));
    }
    block_forward(&b);
    block_backward(&b);
    for (int t = 0; t < 6; t++)
      for (size_t j = 0; j < n[t]; j++)
        (*g[t])[j] -= pre[t][j];
    check_close("dlogits", b.dlogits, m->dlogits, (size_t)m->N * m->E);
    check_close("dx", b.dx, m->dx, n[0]);
    check_close("dwr", b.dwr, m->dwr, n[1]);
    check_close("dw13", b.dw13, m->dw13, n[2]);
    check_close("dw2", b.dw2, m->dw2, n[3]);
    check_close("dws13", b.dws13, m->dws13, n[4]);
    check_close("dws2", b.dws2, m->dws2, n[5]);
    for (int t = 0; t < 6; t++)
      free(pre[t]);
    block_free(&b);
  }
}

/* --------------------------------------------------- finite differences
 *
 * L = sum(out * dout) + aux + z of the C forward, in double from its float
 * outputs, against the C backward on a few coordinates of every tensor.
 * Routing is piecewise constant: a step that changed a choice would make
 * the difference meaningless, so each loss evaluation checks that the
 * experts chosen are the fixture's (its top-k logits are >= 0.08 apart; a
 * step of h moves a logit by |wr| h <= ~0.01 or |x| h <= ~0.03). Round-off:
 * L sums 384 products of outputs up to ~6 with float32 error ~1e-6 each,
 * so L(x+h) - L(x-h) is off by ~2e-6, 1e-4 after dividing
 * by 2h = 0.02 (observed: 1.2e-4 at worst); FD_ATOL = 5e-4 and FD_RTOL = 5e-3
 * cover that and the h^2 truncation (the SwiGLU's curvature is O(1); worst
 * err/tol printed: 0.08), while a missing or doubled term is as large as
 * the gradient, O(0.1..1). */
#define FD_H 1e-2f
#define FD_ATOL 5e-4
#define FD_RTOL 5e-3
#define FD_COORDS 6

static double block_loss(void *p) {
  block *b = p;
  block_forward(b);
  CHECK(memcmp(b->r.expert, b->m->expert, (size_t)b->m->N * b->m->k * sizeof(int32_t)) == 0);
  return aa_test_dot(b->out, b->m->dout, sz_x(b->m)) + b->aux + b->z;
}

/* FD_COORDS coordinates of x spread over the tensor (first, last, a stride
 * between, off the stride by 0..2 so that they fall in different rows and
 * columns), x restored after each; one line per tensor with the worst. */
static void fd_some(const char *what, block *b, float *x, const float *grad, size_t n) {
  if (n == 0) return;
  double worst = 0.0, worst_abs = 0.0;
  for (int i = 0; i < FD_COORDS; i++) {
    size_t j = i == FD_COORDS - 1 ? n - 1 : (size_t)i * (n / FD_COORDS) + (size_t)i % 3;
    float x0 = x[j];
    x[j] = x0 + FD_H;
    float xp = x[j];
    double lp = block_loss(b);
    x[j] = x0 - FD_H;
    float xm = x[j];
    double lm = block_loss(b);
    x[j] = x0;
    double num = (lp - lm) / ((double)xp - (double)xm), err = fabs(grad[j] - num);
    double ratio = err / (FD_ATOL + FD_RTOL * fmax(fabs(grad[j]), fabs(num)));
    CHECK_MSG(ratio <= 1.0, "%s[%zu]: analytic %.7g numeric %.7g", what, j, grad[j], num);
    worst = fmax(worst, ratio), worst_abs = fmax(worst_abs, err);
  }
  fprintf(stderr, "    %-8s %d coords, max |a-n| %.2e, max err/tol %.3f\n", what, FD_COORDS, worst_abs,
          worst);
}

AA_TEST(moe_backward_matches_finite_differences) {
  for (int i = 0; i < fixture_cases; i++) {
    const moe_case *m = &fixture[i];
    if (i == 1) continue; /* the plain case is the shared case's minus the shared expert */
    fprintf(stderr, "  case %d: S %d capacity factor %g\n", i, m->S, m->cap);
    block b = block_make(m);
    block_forward(&b);
    block_backward(&b);
    block fd = block_make(m);
    fd_some("x", &fd, fd.x, b.dx, sz_x(m));
    fd_some("wr", &fd, fd.wr, b.dwr, (size_t)m->E * m->C);
    fd_some("w13", &fd, fd.w13, b.dw13, sz_13(m, m->E));
    fd_some("w2", &fd, fd.w2, b.dw2, sz_2(m, m->E));
    fd_some("ws13", &fd, fd.ws13, b.dws13, sz_13(m, m->S));
    fd_some("ws2", &fd, fd.ws2, b.dws2, sz_2(m, m->S));
    block_free(&fd);
    block_free(&b);
  }
}

/* --------------------------------------------------------- routing map */

/* A larger random routing (N = 1000 tokens, E = 8, k = 2, rows of C = 40,
 * enough for the parallel paths): every expert's rows hold its slots in
 * token order; permute then unpermute gives back x (the weights of a token
 * sum to 1: 1e-6 for their float rounding); permute then its backward gives
 * k x exactly (k = 2 copies added). */
AA_TEST(moe_permute_unpermute_round_trip) {
  int N = 1000, E = 8, k = 2, C = 40;
  float *x = aa_test_frand(&rng, (size_t)N * C, -2, 2), *wr = aa_test_frand(&rng, (size_t)E * C, -1, 1);
  float *logits = aa_test_falloc((size_t)N * E), *probs = aa_test_falloc((size_t)N * E);
  float *xp = aa_test_falloc((size_t)N * k * C), *back = aa_test_falloc((size_t)N * C);
  float *twice = aa_test_falloc((size_t)N * C);
  aa_moe_route_t r;
  aa_moe_stats_t st;
  CHECK(aa_cpu_moe_route_alloc(&r, N, E, k) == 0);
  aa_cpu_moe_router_forward(logits, probs, x, wr, N, C, E);
  CHECK(aa_cpu_moe_route(&r, &st, logits, probs, 0.0f) == 0);
  CHECK(r.rows == N * k && st.dropped == 0 && r.offsets[E] == N * k);
  int order_ok = 1, sum = 0;
  for (int e = 0; e < E; e++) {
    sum += r.counts[e];
    for (int row = r.offsets[e]; row < r.offsets[e + 1]; row++) {
      order_ok &= r.expert[r.slot[row]] == e && r.row[r.slot[row]] == row;
      if (row > r.offsets[e]) order_ok &= r.slot[row] > r.slot[row - 1];
    }
  }
  CHECK(order_ok);
  CHECK(sum == N * k);
  aa_cpu_moe_permute(xp, x, &r, C);
  aa_cpu_moe_unpermute(back, xp, &r, C);
  double worst = 0.0;
  for (size_t i = 0; i < (size_t)N * C; i++)
    worst = fmax(worst, fabs(back[i] - x[i]) / (1.0 + fabs(x[i])));
  CHECK_NEAR(worst, 0.0, 1e-6);
  aa_cpu_moe_permute_backward(twice, xp, &r, C);
  int exact = 1;
  for (size_t i = 0; i < (size_t)N * C; i++)
    exact &= twice[i] == 2.0f * x[i];
  CHECK(exact);
  aa_cpu_moe_route_free(&r);
  free(x), free(wr), free(logits), free(probs), free(xp), free(back), free(twice);
}

/* Equal logits: the lower expert index wins, and the weights are equal.
 * With capacity factor 0.5 (capacity ceil(0.5 * 6 * 2 / 4) = 2) every token
 * picks experts 0 and 1, which keep tokens 0 and 1 and drop the other 8
 * slots; those tokens' unpermuted output is 0. */
AA_TEST(moe_route_ties_and_capacity) {
  int N = 6, E = 4, k = 2, C = 3;
  float logits[6 * 4], probs[6 * 4], x[6 * 3], xp[12 * 3], out[6 * 3];
  for (int i = 0; i < N * E; i++)
    logits[i] = 0.5f, probs[i] = 0.25f;
  for (int i = 0; i < N * C; i++)
    x[i] = (float)(i + 1);
  aa_moe_route_t r;
  aa_moe_stats_t st;
  CHECK(aa_cpu_moe_route_alloc(&r, N, E, k) == 0);
  CHECK(aa_cpu_moe_route(&r, &st, logits, probs, 0.5f) == 0);
  int ok = 1;
  for (int n = 0; n < N; n++)
    ok &= r.expert[n * k] == 0 && r.expert[n * k + 1] == 1 && r.weight[n * k] == 0.5f;
  CHECK(ok);
  CHECK(r.capacity == 2 && r.rows == 4 && st.dropped == 8 && st.min_tokens == 0 && st.max_tokens == 2);
  CHECK(r.counts[0] == 6 && r.counts[1] == 6 && r.counts[2] == 0);
  aa_cpu_moe_permute(xp, x, &r, C);
  aa_cpu_moe_unpermute(out, xp, &r, C);
  for (int i = 0; i < N * C; i++)
    CHECK(out[i] == (i < 2 * C ? x[i] : 0.0f));
  aa_cpu_moe_route_free(&r);
}

/* A rank holding runs of a larger batch out of order (a context rank's two
 * chunks): tokens 8..11 then 0..3 of 12, each run given the slots of each
 * expert routed before it in the whole batch, counted here by hand from
 * the whole batch's routing. It keeps exactly the slots the whole batch's
 * routing keeps (capacity factor 0.75: ceil(0.75 * 24 / 4) = 5 of the
 * about 6 slots each expert gets), with its own rows per expert in run
 * order; a run count that does not divide N is refused. */
AA_TEST(moe_route_keep_matches_the_whole_batch_from_its_runs) {
  enum { N = 12, E = 4, k = 2, L = 8, RUN_T = 4 };
  float logits[N * E], probs[N * E], ll[L * E], lp[L * E];
  uint32_t s = 7;
  for (int i = 0; i < N * E; i++) {
    s = s * 1664525u + 1013904223u;
    logits[i] = (float)(s >> 8) / (float)(1u << 24);
    probs[i] = 0.25f; /* unused by the choice, which compares logits */
  }
  const int from[2] = {8, 0}; /* each local run's first token in the batch */
  for (int g = 0; g < 2; g++)
    for (int i = 0; i < RUN_T * E; i++)
      ll[g * RUN_T * E + i] = logits[from[g] * E + i], lp[g * RUN_T * E + i] = probs[from[g] * E + i];
  aa_moe_route_t whole, mine;
  aa_moe_stats_t st;
  CHECK(aa_cpu_moe_route_alloc(&whole, N, E, k) == 0 && aa_cpu_moe_route_alloc(&mine, L, E, k) == 0);
  CHECK(aa_cpu_moe_route(&whole, NULL, logits, probs, 0.75f) == 0 && whole.capacity == 5);
  CHECK(aa_cpu_moe_route(&mine, NULL, ll, lp, 0.0f) == 0);
  int32_t before[2 * E] = {0};
  for (int g = 0; g < 2; g++)
    for (int t = 0; t < from[g] * k; t++)
      before[g * E + whole.expert[t]]++;
  CHECK(aa_cpu_moe_route_keep(&mine, &st, whole.capacity, 2, before) == 0);
  int dropped = 0, same = 1;
  for (int g = 0; g < 2; g++)
    for (int t = 0; t < RUN_T * k; t++) {
      const int ws = from[g] * k + t, ms = g * RUN_T * k + t;
      dropped += whole.row[ws] < 0;
      same &= mine.expert[ms] == whole.expert[ws] && (mine.row[ms] < 0) == (whole.row[ws] < 0);
      if (mine.row[ms] >= 0)
        same &= mine.slot[mine.row[ms]] == ms && mine.row[ms] >= mine.offsets[mine.expert[ms]] &&
                mine.row[ms] < mine.offsets[mine.expert[ms] + 1];
    }
  CHECK_MSG(same && st.dropped == dropped && dropped > 0 && mine.rows == L * k - dropped,
            "same %d, dropped %d (the batch's %d), rows %d", same, st.dropped, dropped, mine.rows);
  CHECK(aa_cpu_moe_route_keep(&mine, NULL, 5, 3, NULL) == AA_EINVAL);
  CHECK(aa_cpu_moe_route_keep(&mine, NULL, -1, 1, NULL) == AA_EINVAL);
  aa_cpu_moe_route_free(&whole);
  aa_cpu_moe_route_free(&mine);
}

AA_TEST(moe_route_rejects_bad_shapes) {
  aa_moe_route_t r = {0};
  CHECK(aa_cpu_moe_route_alloc(&r, 4, 4, 5) == AA_EINVAL);
  CHECK(aa_cpu_moe_route_alloc(&r, 0, 4, 1) == AA_EINVAL);
  CHECK(aa_cpu_moe_route_alloc(&r, 4, AA_MOE_MAX_EXPERTS + 1, 1) == AA_EINVAL);
  CHECK(aa_cpu_moe_route_alloc(&r, 1 << 30, 4, 2) == AA_EINVAL);
  CHECK(r.expert == NULL);
  CHECK(aa_cpu_moe_route_alloc(&r, 2, 2, 1) == 0);
  float l[4] = {0, 1, 1, 0}, p[4] = {0.3f, 0.7f, 0.7f, 0.3f};
  CHECK(aa_cpu_moe_route(&r, NULL, l, p, NAN) == AA_EINVAL);
  CHECK(aa_cpu_moe_route(&r, NULL, l, p, 0.0f) == 0);
  CHECK(r.expert[0] == 1 && r.expert[1] == 0 && r.weight[0] == 1.0f);
  aa_cpu_moe_route_free(&r);
  aa_cpu_moe_route_free(&r); /* a freed map is zeroed: freeing it again is a no-op */
}

/* The shared case's forward and backward twice, then with the other thread
 * count: bit-identical (rows are owned by one thread, every sum runs in a
 * fixed order; the GEMMs are OpenBLAS's, deterministic for these shapes). */
AA_TEST(moe_block_is_deterministic) {
  const moe_case *m = &fixture[0];
  block b1 = block_make(m), b2 = block_make(m);
  block_forward(&b1), block_backward(&b1);
  ops->set_threads(cur_threads == 1 ? 2 : 1);
  block_forward(&b2), block_backward(&b2);
  ops->set_threads(cur_threads);
  CHECK(memcmp(b1.out, b2.out, sz_x(m) * sizeof(float)) == 0);
  CHECK(b1.aux == b2.aux && b1.z == b2.z);
  CHECK(memcmp(b1.dx, b2.dx, sz_x(m) * sizeof(float)) == 0);
  CHECK(memcmp(b1.dwr, b2.dwr, (size_t)m->E * m->C * sizeof(float)) == 0);
  CHECK(memcmp(b1.dw13, b2.dw13, sz_13(m, m->E) * sizeof(float)) == 0);
  CHECK(memcmp(b1.dw2, b2.dw2, sz_2(m, m->E) * sizeof(float)) == 0);
  block_free(&b1), block_free(&b2);
}

static void run_all(int threads) {
  cur_threads = threads;
  ops->set_threads(threads);
  aa_rng_seed(&rng, 3301);
  fprintf(stderr, "threads = %d\n", threads);
  RUN(moe_forward_matches_pytorch);
  RUN(moe_backward_matches_pytorch);
  RUN(moe_backward_matches_finite_differences);
  RUN(moe_permute_unpermute_round_trip);
  RUN(moe_route_ties_and_capacity);
  RUN(moe_route_keep_matches_the_whole_batch_from_its_runs);
  RUN(moe_route_rejects_bad_shapes);
  RUN(moe_block_is_deterministic);
}

int main(void) {
  ops = aa_ops_cpu();
  int rc = fixture_load();
  if (rc != 0) {
    fprintf(stderr, "moe fixture: %s\n", aa_last_error());
    free(fixture_buf);
    return 1;
  }
  run_all(1);
  run_all(2);
  free(fixture_buf);
  return aa_test_summary();
}
