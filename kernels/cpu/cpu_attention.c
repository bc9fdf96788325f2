/* Self-attention on the CPU, with its own register-tiled matrix products
 * instead of sgemm: causal multi-head and grouped-query attention, and ring
 * attention's block forward and backward (context parallelism). All of them
 * are one block problem: a head's Tq query rows against Tk keys, every key
 * seen, or key j seen by query i when j <= i (the causal diagonal, Tq ==
 * Tk). Plain causal attention is the diagonal on qkv's slices; a ring block
 * is read where it lies, through row and batch strides. Multi-head
 * attention is grouped-query attention with as many key/value heads as
 * query heads.
 *
 * Each (batch, head) is an independent problem. Every product is cut into
 * micro-tiles of AT_MR rows by AT_NR columns held in registers (at_tile),
 * the B operand's rows contiguous: a thread first copies its head's K^T, V
 * (and in the backward K, V^T, Q, dO) into padded per-thread buffers,
 * AT_VL-float aligned widths. On the diagonal a tile of query rows
 * i0..i0+AT_MR-1 only computes the keys 0..i0+AT_MR-1 it can see, so the
 * masked triangle costs at most one tile edge. The forward does scores,
 * softmax and P V tile by tile while the tile's scores sit in L1 (each
 * output row scaled by its 1 / sum as the tile is stored); the backward
 * works in blocks of AT_ROW_BLOCK query rows (probabilities and their
 * gradient for the block, then the block's dq in chunks of keys, then the
 * key and value gradients of the block's keys, each key tile starting at
 * the first query that sees it), summing a key/value head's gradients in
 * a dense per-thread buffer that is added to the output once.
 *
 * Why not sgemm: per (batch, head) the GEMMs are small (32-256 rows, inner
 * dimension 64), and OpenBLAS repacked K and V at every call (18 % of the
 * sgemm version's time in a profile with its SkylakeX kernels). Measured
 * with bench_attention_cpu, B=8 T=256 NH=8 HS=64, one thread, CPU time,
 * OpenBLAS's Haswell kernels (this machine's default), 5 alternated pairs:
 * forward 9.5 -> 5.0 ms, backward 20.1 -> 10.9 ms; with 2 key/value heads
 * (llama-6l-512) 9.1 -> 4.3 and 19.2 -> 9.2 ms. The tile alone runs at
 * ~250 GFLOP/s on one AVX-512 core with its operands in L1; what is left
 * of the forward is mostly the softmax rows and the first reads of q, k
 * and v. More in bench/README.md (issue 37, steps 6 and 8). The ring
 * blocks ran row blocks of sgemm until step 8.
 *
 * Nothing T x T is kept between the passes (the contract in ops.h): the
 * forward keeps one logsumexp per query row, and the backward recomputes a
 * row block's probabilities from q, k and it, one block at a time in
 * per-thread scratch (AT_ROW_BLOCK x Tk floats, twice).
 *
 * Determinism: every output element is produced by one thread with a fixed
 * sequence of operations, so results do not depend on the thread count, and
 * nothing uses float atomics. */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Vector width (floats) and micro-tile shape per instruction set: AT_MR x
 * AT_NV accumulators plus AT_NV loaded rows of B fit in the 32 (AVX-512) or
 * 16 (AVX, SSE) vector registers. */
#if defined(__AVX512F__)
#define AT_VL 16
#define AT_NV 4
#elif defined(__AVX__)
#define AT_VL 8
#define AT_NV 2
#else
#define AT_VL 4
#define AT_NV 2
#endif
#define AT_MR 6
#define AT_NR (AT_VL * AT_NV)
/* Query rows per backward block: the key and value gradients' inner
 * dimension. Larger blocks cost two AT_ROW_BLOCK x T scratch buffers. */
#define AT_ROW_BLOCK 64
/* Keys per chunk of the backward's dq product (64 rows of K: 16 KiB at
 * head size 64). */
#define AT_KEY_BLOCK 64

typedef float at_v __attribute__((vector_size(AT_VL * sizeof(float))));

static inline at_v at_load(const float *p) {
  at_v v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void at_store(float *p, at_v v) { memcpy(p, &v, sizeof v); }

static inline int at_round(int n) { return (n + AT_VL - 1) / AT_VL * AT_VL; }

/* Row stride of the T-wide buffers (K^T, V^T, probabilities): a whole
 * number of vectors plus one cache line, so that a column walk does not
 * land in a few L1 sets. At T = 256, 1 KiB rows made the K^T copy 10x
 * slower than with 1088-byte ones. */
static inline int at_stride(int T) { return at_round(T) + 16; }

/* c(rows x cols) = or += alpha * a(rows x K) b(K x cols), for rows <= AT_MR
 * and cols <= nv AT_VL, row r scaled by rs[r] too where rs is not NULL:
 * a(i,k) at a[i ars + k acs], b's row k at b + k ldb, readable for nv AT_VL
 * floats. Rows past `rows` recompute the last row (so a is only read in
 * bounds) and are not stored. nv is a constant after inlining, so the
 * accumulators live in registers. */
static inline __attribute__((always_inline)) void at_tile_nv(const int nv, float *c, ptrdiff_t ldc, int rows,
                                                             int cols, const float *a, ptrdiff_t ars,
                                                             ptrdiff_t acs, const float *b, ptrdiff_t ldb,
                                                             int K, float alpha, const float *rs, int add) {
  at_v acc[AT_MR][AT_NV];
  const float *ar[AT_MR];
#pragma GCC unroll 8
  for (int r = 0; r < AT_MR; r++) {
    ar[r] = a + (ptrdiff_t)(r < rows ? r : rows - 1) * ars;
#pragma GCC unroll 8
    for (int v = 0; v < AT_NV; v++)
      acc[r][v] = (at_v){0};
  }
  for (int k = 0; k < K; k++) {
    const float *bk = b + (ptrdiff_t)k * ldb;
    at_v bv[AT_NV];
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++)
      bv[v] = at_load(bk + v * AT_VL);
#pragma GCC unroll 8
    for (int r = 0; r < AT_MR; r++) {
      float x = ar[r][(ptrdiff_t)k * acs];
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++)
        acc[r][v] += bv[v] * x;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < AT_MR; r++) {
    if (r >= rows) break;
    float *cr = c + (ptrdiff_t)r * ldc, f = rs ? alpha * rs[r] : alpha;
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) {
      at_v x = acc[r][v] * f;
      int n = cols - v * AT_VL;
      if (n >= AT_VL) {
        if (add) x += at_load(cr + v * AT_VL);
        at_store(cr + v * AT_VL, x);
      } else {
        float t[AT_VL];
        memcpy(t, &x, sizeof t);
        for (int e = 0; e < n; e++)
          cr[v * AT_VL + e] = add ? cr[v * AT_VL + e] + t[e] : t[e];
      }
    }
  }
}

static void at_tile(float *c, ptrdiff_t ldc, int rows, int cols, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                    const float *b, ptrdiff_t ldb, int K, float alpha, const float *rs, int add) {
  switch ((cols + AT_VL - 1) / AT_VL) {
  case 1: at_tile_nv(1, c, ldc, rows, cols, a, ars, acs, b, ldb, K, alpha, rs, add); break;
  case 2: at_tile_nv(2, c, ldc, rows, cols, a, ars, acs, b, ldb, K, alpha, rs, add); break;
#if AT_NV == 4
  case 3: at_tile_nv(3, c, ldc, rows, cols, a, ars, acs, b, ldb, K, alpha, rs, add); break;
  case 4: at_tile_nv(4, c, ldc, rows, cols, a, ars, acs, b, ldb, K, alpha, rs, add); break;
#endif
  default: break; /* cols is at most AT_NR: at_rows cuts it */
  }
}

/* c(rows x n) = or += alpha * a(rows x K) b(K x n), rows <= AT_MR, in column
 * tiles of AT_NR; b's rows readable for n rounded up to AT_VL floats. */
static void at_rows(float *c, ptrdiff_t ldc, int rows, int n, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                    const float *b, ptrdiff_t ldb, int K, float alpha, const float *rs, int add) {
  for (int j0 = 0; j0 < n; j0 += AT_NR)
    at_tile(c + j0, ldc, rows, aa__cpu_min(AT_NR, n - j0), a, ars, acs, b + j0, ldb, K, alpha, rs, add);
}

/* dst(T x ldd) <- the (T,hs) slice src (rows ld apart), columns hs..ldd-1
 * zeroed: the tiles read whole vectors. */
static void at_pack_rows(float *dst, int ldd, const float *src, int ld, int T, int hs) {
  for (int t = 0; t < T; t++) {
    memcpy(dst + (size_t)t * ldd, src + (size_t)t * ld, (size_t)hs * sizeof(float));
    for (int d = hs; d < ldd; d++)
      dst[(size_t)t * ldd + d] = 0.0f;
  }
}

/* dst(hs x ldd) <- the transpose of the (T,hs) slice src (rows ld apart), 16
 * rows of src at a time: they stay in L1 while each row of dst gets a cache
 * line. The callers pass a packed copy (at_pack_rows) as src: transposing
 * straight from qkv's rows, 6 KiB apart and not yet cached, cost as much as
 * a third of the forward's GEMM time in cache misses. */
static void at_pack_cols(float *dst, int ldd, const float *src, int ld, int T, int hs) {
  for (int t0 = 0; t0 < T; t0 += 16) {
    int t1 = aa__cpu_min(t0 + 16, T);
    for (int d = 0; d < hs; d++)
      for (int t = t0; t < t1; t++)
        dst[(size_t)d * ldd + t] = src[(size_t)t * ld + d];
  }
  for (int d = 0; d < hs; d++)
    for (int t = T; t < ldd; t++)
      dst[(size_t)d * ldd + t] = 0.0f;
}

/* Lane helpers for the softmax rows, which run over whole vectors (to the
 * row's last seen column + 1 rounded up to AT_VL, which the score tiles
 * wrote) with the masked lanes of the last vector selected away. Loops
 * with a scalar remainder per row (and scalar exps in it) took a quarter of
 * the forward. */
typedef int32_t at_vi __attribute__((vector_size(AT_VL * sizeof(float))));

static inline at_v at_splat(float x) { return (at_v){0} + x; }

/* Lanes j0 + e <= t: all ones, the others zero. */
static inline at_vi at_seen(int j0, int t) {
  static const int32_t iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  at_vi lane;
  memcpy(&lane, iota, sizeof lane);
  return lane <= ((at_vi){0} + (t - j0));
}

static inline at_v at_select(at_vi m, at_v a, at_v b) { return (at_v)((m & (at_vi)a) | (~m & (at_vi)b)); }

/* aa__cpu_expf per lane (one vector iteration of a simd loop). */
static inline at_v at_exp(at_v x) {
  float f[AT_VL];
  memcpy(f, &x, sizeof f);
#pragma omp simd
  for (int e = 0; e < AT_VL; e++)
    f[e] = aa__cpu_expf(f[e]);
  return at_load(f);
}

/* The lanes' sum (max 0) or maximum (max 1), in a fixed order: halves folded
 * onto each other. */
static inline float at_fold(at_v v, int max) {
  float f[AT_VL];
  memcpy(f, &v, sizeof f);
#pragma GCC unroll 8
  for (int w = AT_VL / 2; w >= 1; w /= 2)
#pragma GCC unroll 16
    for (int e = 0; e < w; e++)
      f[e] = max ? (f[e + w] > f[e] ? f[e + w] : f[e]) : f[e] + f[e + w];
  return f[0];
}

static inline float at_hsum(at_v v) { return at_fold(v, 0); }

static inline float at_hmax(at_v v) { return at_fold(v, 1); }

/* A block problem: query rows 0..Tq-1 of a head against keys 0..Tk-1, with
 * every key seen (causal 0: a block of ring attention that lies wholly in
 * the queries' past) or key j seen by query i when j <= i (causal 1, Tq ==
 * Tk: the diagonal, which is all of plain causal attention). */

/* Row of the probabilities in place, unnormalised: row[0..last] holds
 * scaled scores and becomes exp(score - max), row[last+1..n-1] is zeroed.
 * Returns the logsumexp and sets *inv to 1 / the row's sum, which the
 * caller applies to the row's output (hs values, not last + 1). Only the
 * last vector of the row has masked lanes. */
static float at_softmax_row(float *row, int last, int n, float *inv) {
  int jf = (last + 1) / AT_VL * AT_VL, jn = at_round(last + 1); /* whole vectors, then the masked one */
  at_v mv = at_splat(-INFINITY), sv = at_splat(0.0f);
  for (int j0 = 0; j0 < jf; j0 += AT_VL)
    mv = at_select(at_load(row + j0) > mv, at_load(row + j0), mv);
  if (jn > jf) {
    at_v x = at_select(at_seen(jf, last), at_load(row + jf), at_splat(-INFINITY));
    mv = at_select(x > mv, x, mv);
  }
  float maxv = at_hmax(mv);
  for (int j0 = 0; j0 < jf; j0 += AT_VL) {
    at_v e = at_exp(at_load(row + j0) - maxv);
    at_store(row + j0, e);
    sv += e;
  }
  if (jn > jf) {
    at_v e = at_select(at_seen(jf, last), at_exp(at_load(row + jf) - maxv), at_splat(0.0f));
    at_store(row + jf, e);
    sv += e;
  }
  float sum = at_hsum(sv);
  *inv = 1.0f / sum;
  for (int j = jn; j < n; j++)
    row[j] = 0.0f;
  return maxv + logf(sum);
}

/* One query head's forward: o(Tq,hs) (rows ldo apart) and lse(Tq) from q
 * (rows ldq apart), kt = K^T (hs x Tkp) and vp = V (Tk x hsp); s is AT_MR x
 * Tkp scratch. Per tile of query rows: scores against the keys the tile
 * sees, softmax, then P V, each output row scaled by its 1 / sum. */
static void at_head_forward(float *o, int ldo, float *lse, const float *q, int ldq, const float *kt,
                            const float *vp, int Tq, int Tk, int Tkp, int hs, int hsp, int causal, float *s) {
  float scale = 1.0f / sqrtf((float)hs), inv[AT_MR];
  for (int i0 = 0; i0 < Tq; i0 += AT_MR) {
    int rows = aa__cpu_min(AT_MR, Tq - i0), n = causal ? i0 + rows : Tk;
    at_rows(s, Tkp, rows, at_round(n), q + (size_t)i0 * ldq, ldq, 1, kt, Tkp, hs, scale, NULL, 0);
    for (int i = 0; i < rows; i++)
      lse[i0 + i] = at_softmax_row(s + (size_t)i * Tkp, causal ? i0 + i : Tk - 1, n, &inv[i]);
    at_rows(o + (size_t)i0 * ldo, ldo, rows, hs, s, Tkp, 1, vp, hsp, n, 1.0f, inv, 0);
  }
}

/* out(B,Tq,NH HS) and lse(B,NH,Tq) of the block problem: q's batch b, row t,
 * head h at q[b bsq + t ldq + h HS], k's and v's (NKV heads) at b bskv + t
 * ldkv + g HS. One query head per thread; a thread packs K^T and V once for
 * consecutive heads of the same key/value head. */
static void at_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq,
                       int Tk, int NH, int NKV, int HS, int ldq, size_t bsq, int ldkv, size_t bskv,
                       int causal) {
  int ldo = NH * HS, group = NH / NKV, Tkp = at_stride(Tk), hsp = at_round(HS);
#pragma omp parallel
  {
    float *kt = aa__cpu_scratch((size_t)HS * Tkp + (size_t)2 * Tk * hsp + (size_t)AT_MR * Tkp, "attention");
    float *vp = kt + (size_t)HS * Tkp, *kp = vp + (size_t)Tk * hsp, *s = kp + (size_t)Tk * hsp;
    int packed = -1; /* b * NKV + g of what kt and vp hold */
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        int g = h / group;
        if (packed != b * NKV + g) {
          size_t kv = b * bskv + (size_t)g * HS;
          at_pack_rows(kp, hsp, k + kv, ldkv, Tk, HS);
          at_pack_cols(kt, Tkp, kp, hsp, Tk, HS);
          at_pack_rows(vp, hsp, v + kv, ldkv, Tk, HS);
          packed = b * NKV + g;
        }
        at_head_forward(out + (size_t)b * Tq * ldo + (size_t)h * HS, ldo, lse + ((size_t)b * NH + h) * Tq,
                        q + b * bsq + (size_t)h * HS, ldq, kt, vp, Tq, Tk, Tkp, HS, hsp, causal, s);
      }
    }
    free(kt);
  }
}

/* A thread's backward buffers: K (Tk x hsp), Q and dO of the current query
 * head (Tq x hsp; qp first holds V's rows, so max(Tq, Tk) rows), K^T and
 * V^T (hs x Tkp), a row block's probabilities p and score gradients ds
 * (AT_ROW_BLOCK x Tkp), the block's dq (AT_ROW_BLOCK x hsp), and the
 * key/value head's gradients dk, dv (Tk x hsp), summed over its query heads
 * before they are added to the output. */
typedef struct {
  float *kp, *qp, *dop, *kt, *vt, *p, *ds, *dq, *dk, *dv;
  int Tq, Tk, Tkp, hs, hsp, causal;
} at_bwd_t;

/* Backward of one query head, row block by row block (the softmax backward):
 *   dP = dO v^T, dS = P * (dP - delta), and with s = 1/sqrt(hs)
 *   dq += s dS k, dk += s dS^T q, dv += P^T dO,
 * where delta is rowsum(P * dP) when the block holds every key the rows see
 * (delta NULL), or the caller's rowsum(dO * O) over all blocks (ring
 * attention). dq (rows lddq apart) and q (ldq) are the head's; dO (ldo) is
 * the head's, packed in w->dop as q is in w->qp; dk, dv go to w->dk, w->dv. */
static void at_head_backward(float *dq, int lddq, const float *q, int ldq, const float *dO, int ldo,
                             const float *lse, const float *delta, const at_bwd_t *w) {
  int Tq = w->Tq, Tk = w->Tk, Tkp = w->Tkp, hs = w->hs, hsp = w->hsp, causal = w->causal;
  float scale = 1.0f / sqrtf((float)hs);
  for (int r0 = 0; r0 < Tq; r0 += AT_ROW_BLOCK) {
    int r1 = aa__cpu_min(r0 + AT_ROW_BLOCK, Tq), m = r1 - r0;
    for (int i0 = 0; i0 < m; i0 += AT_MR) {
      int rows = aa__cpu_min(AT_MR, m - i0), t0 = r0 + i0, n = causal ? t0 + rows : Tk;
      float *p = w->p + (size_t)i0 * Tkp, *ds = w->ds + (size_t)i0 * Tkp;
      at_rows(p, Tkp, rows, at_round(n), q + (size_t)t0 * ldq, ldq, 1, w->kt, Tkp, hs, scale, NULL, 0);
      at_rows(ds, Tkp, rows, at_round(n), dO + (size_t)t0 * ldo, ldo, 1, w->vt, Tkp, hs, 1.0f, NULL, 0);
      for (int i = 0; i < rows; i++) {
        int t = t0 + i, last = causal ? t : Tk - 1;
        int jf = (last + 1) / AT_VL * AT_VL, jn = at_round(last + 1); /* as at_softmax_row */
        float *pr = p + (size_t)i * Tkp, *d = ds + (size_t)i * Tkp, l = lse[t];
        at_v dv = at_splat(0.0f);
        for (int j0 = 0; j0 < jf; j0 += AT_VL) {
          at_v e = at_exp(at_load(pr + j0) - l);
          at_store(pr + j0, e);
          dv += e * at_load(d + j0);
        }
        if (jn > jf) {
          at_v e = at_select(at_seen(jf, last), at_exp(at_load(pr + jf) - l), at_splat(0.0f));
          at_store(pr + jf, e);
          dv += e * at_load(d + jf);
        }
        float dot = delta ? delta[t] : at_hsum(dv);
        for (int j0 = 0; j0 < jn; j0 += AT_VL)
          at_store(d + j0, at_load(pr + j0) * (at_load(d + j0) - dot));
        /* On the diagonal, zeros past the last vector: the tiles read up to
         * AT_MR - 1 columns past t, below r1 (dq's up to n - 1, each key
         * tile's up to its last key; the query rows a key tile reads see its
         * first key). Whole vectors: rows are Tkp >= at_round(Tk) + 16 wide. */
        for (int j0 = jn; causal && j0 < aa__cpu_min(r1, t + AT_MR); j0 += AT_VL) {
          at_store(pr + j0, at_splat(0.0f));
          at_store(d + j0, at_splat(0.0f));
        }
      }
    }
    /* dq of the block, keys in chunks of AT_KEY_BLOCK: a chunk of K stays in
     * L1 while every tile of the block's rows reads it (a tile reading all
     * of K streamed it from L2). Summed in w->dq, added to dq once. */
    const int kend = causal ? r1 : Tk; /* the keys the block's rows see */
    for (int kc = 0; kc < kend; kc += AT_KEY_BLOCK) {
      for (int i0 = 0; i0 < m; i0 += AT_MR) {
        int rows = aa__cpu_min(AT_MR, m - i0), n = causal ? r0 + i0 + rows : Tk;
        if (n > kc)
          at_rows(w->dq + (size_t)i0 * hsp, hsp, rows, hs, w->ds + (size_t)i0 * Tkp + kc, Tkp, 1,
                  w->kp + (size_t)kc * hsp, hsp, aa__cpu_min(AT_KEY_BLOCK, n - kc), scale, NULL, kc > 0);
      }
    }
    for (int i = 0; i < m; i++) {
      float *d = dq + (size_t)(r0 + i) * lddq;
      const float *s = w->dq + (size_t)i * hsp;
#pragma omp simd
      for (int e = 0; e < hs; e++)
        d[e] += s[e];
    }
    /* Keys j0..: the block's queries from lo (on the diagonal max(j0, r0),
     * else r0) on see them. */
    for (int j0 = 0; j0 < kend; j0 += AT_MR) {
      int rows = aa__cpu_min(AT_MR, kend - j0), lo = causal && j0 > r0 ? j0 - r0 : 0;
      at_rows(w->dk + (size_t)j0 * hsp, hsp, rows, hs, w->ds + (size_t)lo * Tkp + j0, 1, Tkp,
              w->qp + (size_t)(r0 + lo) * hsp, hsp, m - lo, scale, NULL, 1);
      at_rows(w->dv + (size_t)j0 * hsp, hsp, rows, hs, w->p + (size_t)lo * Tkp + j0, 1, Tkp,
              w->dop + (size_t)(r0 + lo) * hsp, hsp, m - lo, 1.0f, NULL, 1);
    }
  }
}

/* dq, dk, dv (laid out as q, k, v) += the gradient of at_forward's block
 * problem, from dout (B,Tq,NH HS), lse (B,NH,Tq) and delta (B,NH,Tq, or
 * NULL: see at_head_backward). One thread per (b, key/value head): it owns
 * the head's dk and dv and the dq of its query heads, which it processes in
 * increasing order. */
static void at_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *lse, const float *delta, int B, int Tq, int Tk, int NH,
                        int NKV, int HS, int ldq, size_t bsq, int ldkv, size_t bskv, int causal) {
  int ldo = NH * HS, group = NH / NKV, Tkp = at_stride(Tk), hsp = at_round(HS);
#pragma omp parallel
  {
    size_t nq = (size_t)(Tq > Tk ? Tq : Tk) * hsp, nk = (size_t)Tk * hsp, ncol = (size_t)HS * Tkp;
    size_t nblk = (size_t)AT_ROW_BLOCK * Tkp;
    at_bwd_t w = {.kp = aa__cpu_scratch(2 * nq + 3 * nk + 2 * ncol + 2 * nblk + (size_t)AT_ROW_BLOCK * hsp,
                                        "attention"),
                  .Tq = Tq,
                  .Tk = Tk,
                  .Tkp = Tkp,
                  .hs = HS,
                  .hsp = hsp,
                  .causal = causal};
    w.qp = w.kp + nk;
    w.dop = w.qp + nq;
    w.kt = w.dop + nq;
    w.vt = w.kt + ncol;
    w.p = w.vt + ncol;
    w.ds = w.p + nblk;
    w.dq = w.ds + nblk;
    w.dk = w.dq + (size_t)AT_ROW_BLOCK * hsp;
    w.dv = w.dk + nk;
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int g = 0; g < NKV; g++) {
        size_t kv = b * bskv + (size_t)g * HS;
        at_pack_rows(w.kp, hsp, k + kv, ldkv, Tk, HS);
        at_pack_cols(w.kt, Tkp, w.kp, hsp, Tk, HS);
        at_pack_rows(w.qp, hsp, v + kv, ldkv, Tk, HS); /* V's rows, until the first query head's */
        at_pack_cols(w.vt, Tkp, w.qp, hsp, Tk, HS);
        memset(w.dk, 0, 2 * nk * sizeof(float));
        for (int h = g * group; h < (g + 1) * group; h++) {
          size_t qo = b * bsq + (size_t)h * HS, row = ((size_t)b * NH + h) * Tq;
          const float *dO = dout + (size_t)b * Tq * ldo + (size_t)h * HS;
          at_pack_rows(w.qp, hsp, q + qo, ldq, Tq, HS);
          at_pack_rows(w.dop, hsp, dO, ldo, Tq, HS);
          at_head_backward(dq + qo, ldq, q + qo, ldq, dO, ldo, lse + row, delta ? delta + row : NULL, &w);
        }
        for (int t = 0; t < Tk; t++) {
          float *dkt = dk + kv + (size_t)t * ldkv, *dvt = dv + kv + (size_t)t * ldkv;
          const float *sk = w.dk + (size_t)t * hsp, *sv = w.dv + (size_t)t * hsp;
#pragma omp simd
          for (int d = 0; d < HS; d++) {
            dkt[d] += sk[d];
            dvt[d] += sv[d];
          }
        }
      }
    }
    free(w.kp);
  }
}

/* Plain causal attention is the diagonal block problem on qkv's slices. */
void aa__cpu_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                   int HS) {
  int W = (NH + 2 * NKV) * HS;
  at_forward(out, lse, qkv, qkv + (size_t)NH * HS, qkv + (size_t)(NH + NKV) * HS, B, T, T, NH, NKV, HS, W,
             (size_t)T * W, W, (size_t)T * W, 1);
}

void aa__cpu_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, int HS) {
  int W = (NH + 2 * NKV) * HS;
  at_backward(dqkv, dqkv + (size_t)NH * HS, dqkv + (size_t)(NH + NKV) * HS, dout, qkv, qkv + (size_t)NH * HS,
              qkv + (size_t)(NH + NKV) * HS, lse, NULL, B, T, T, NH, NKV, HS, W, (size_t)T * W, W,
              (size_t)T * W, 1);
}

/* Ring attention's block ops (ops.h attention_block_forward/backward): a
 * block of keys received from another rank is read where it lies. */
void aa__cpu_attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal) {
  at_forward(out, lse, q, k, v, B, Tq, Tk, NH, NKV, HS, ldq, bsq, ldkv, bskv, causal);
}

void aa__cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, const float *delta,
                                      int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                      int ldkv, size_t bskv, int causal) {
  at_backward(dq, dk, dv, dout, q, k, v, lse, delta, B, Tq, Tk, NH, NKV, HS, ldq, bsq, ldkv, bskv, causal);
}

/* ------------------------------------------------------ multi-head attention */

void aa__cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  aa__cpu_attention_gqa_forward(out, lse, qkv, B, T, NH, NH, C / NH);
}

void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                int T, int C, int NH) {
  aa__cpu_attention_gqa_backward(dqkv, dout, qkv, lse, B, T, NH, NH, C / NH);
}
