/* The per-rank sizes (strategies/sizes.h) by themselves: the units add up
 * to the model, chunks round up, the activation layout is a packing of
 * 64-byte slices with every buffer in its allocation and none overlapping,
 * and what each checkpointing mode and amp keep. That the engine allocates
 * exactly these sizes is tests/test_cost.c's and tests/test_parallel.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "strategies/sizes.h"

static const aa_arch_t archs[] = {
    {.family = "gpt2", .n_layer = 3, .n_head = 4, .d_model = 32, .d_ff = 64, .seq_len = 16, .vocab_size = 64},
    {.family = "gpt2", .n_layer = 2, .n_head = 3, .d_model = 27, .d_ff = 50, .seq_len = 7, .vocab_size = 11},
};

AA_TEST(units_add_up_to_the_model_and_chunks_round_up) {
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    size_t sum = 0;
    for (int u = 0; u < aa_sizes_units(&archs[a]); u++) sum += aa_sizes_unit_numel(&archs[a], 1, u);
    CHECK(aa_sizes_units(&archs[a]) == archs[a].n_layer + 2 && sum == aa_arch_param_count(&archs[a]));
    CHECK(aa_sizes_slot(&archs[a], 0) == 0 && aa_sizes_slot(&archs[a], 1) == 1 &&
          aa_sizes_slot(&archs[a], archs[a].n_layer + 1) == 2);
  }
  for (size_t n = 1; n < 50; n++)
    for (int dp = 1; dp <= 8; dp++) {
      size_t c = aa_sizes_chunk(n, dp);
      CHECK_MSG(c * (size_t)dp >= n && (c - 1) * (size_t)dp < n, "n %zu dp %d: chunk %zu", n, dp, c);
    }
  /* A group of one stages nothing: the scalars come with a group to reduce over. */
  aa_zero_sizes_t z1, z2;
  aa_sizes_zero(&archs[0], 1, NULL, AA_F32, 0, 1, &z1);
  aa_sizes_zero(&archs[0], 1, NULL, AA_F32, 0, 2, &z2);
  CHECK(z1.scalars.numel == 0 && z2.scalars.numel == 16);
  CHECK(z1.moment.numel == aa_arch_param_count(&archs[0]) && z2.moment.numel == z1.moment.numel);
  /* Over 3 ranks arch 0's block is the widest padded unit (8,544, which 3
   * divides; wte|wpe 2,560 pads to 2,562). Stage 1 gathers the updated
   * parameters into padded; stage 2 into the block's gradient slot, which
   * is idle then; stage 3 lands each 16-bit unit in one buffer of that
   * width. */
  aa_zero_sizes_t z[4];
  for (int st = 0; st < 4; st++)
    aa_sizes_zero(&archs[0], 1, NULL, AA_BF16, st, 3, &z[st]);
  CHECK(z[1].padded.numel == 8544 && z[1].padded_slot == -1 && z[1].gunit[1].numel == 0);
  CHECK(z[2].padded.numel == 0 && z[2].padded_slot == 1 && z[2].gunit[1].numel == 8544);
  CHECK(z[3].padded.numel == 0 && z[3].padded_slot == -1 && z[3].punit16.numel == 0 &&
        z[3].punit16_in_grads && z[3].gunit[1].numel * 4 >= 8544 * 2);
  CHECK(z[0].punit16.numel == 0 && z[2].punit16.numel == 0 && !z[2].punit16_in_grads);
  /* A block too small to take the widest unit in 16 bits: wte 1,004 x 8 =
   * 8,032 elements, a block 4 64 + 2 16 8 + 9 8 + 16 = 600 (2,400 bytes in
   * fp32, the wte in bf16 16,064), so the 16-bit units get their own
   * buffer of the widest. */
  const aa_arch_t wide = {.family = "gpt2",
                          .n_layer = 1,
                          .n_head = 2,
                          .d_model = 8,
                          .d_ff = 16,
                          .seq_len = 4,
                          .vocab_size = 1000};
  aa_zero_sizes_t wz;
  aa_sizes_zero(&wide, 1, NULL, AA_BF16, 3, 2, &wz);
  CHECK_MSG(!wz.punit16_in_grads && wz.punit16.numel == 8032 && wz.gunit[1].numel == 600,
            "punit16 %zu, block %zu", wz.punit16.numel, wz.gunit[1].numel);
  /* An untied head: wte (64 x 32 = 2,048, chunks of 683, 2,049 padded)
   * and lnf|head (65 x 32 = 2,080: 694, 2,082) never hold gradients at
   * once, so from stage 2 they share one buffer, the larger; the block
   * (2 32 + 64 32 + 32 32 + 3 64 32 = 9,280: 3,094, 9,282) keeps its own,
   * and is padded at stage 2. Their parameters keep a slot each. */
  const aa_arch_t llama = {.family = "llama",
                           .n_layer = 2,
                           .n_head = 4,
                           .n_kv_head = 2,
                           .d_model = 32,
                           .d_ff = 64,
                           .seq_len = 16,
                           .vocab_size = 64};
  for (int st = 2; st < 4; st++) {
    aa_zero_sizes_t lz;
    aa_sizes_zero(&llama, 1, NULL, AA_BF16, st, 3, &lz);
    CHECK_MSG(lz.gslot[0] == 0 && lz.gslot[1] == 1 && lz.gslot[2] == 0 && lz.gunit[0].numel == 2082 &&
                  lz.gunit[1].numel == 9282 && lz.gunit[2].numel == 0,
              "stage %d: gradient buffers %zu %zu %zu", st, lz.gunit[0].numel, lz.gunit[1].numel,
              lz.gunit[2].numel);
    CHECK(lz.padded_slot == (st == 2 ? 1 : -1));
    CHECK(st < 3 || (lz.punit[0].numel == 2049 && lz.punit[2].numel == 2082));
  }
  CHECK(z[2].gslot[2] == 2 &&
        z[2].gunit[2].numel > 0); /* gpt2's tied head: wte's gradient spans the backward */
}

typedef struct {
  size_t off, bytes;
  const char *what;
} span_t;

static int by_offset(const void *a, const void *b) {
  size_t x = ((const span_t *)a)->off, y = ((const span_t *)b)->off;
  return (x > y) - (x < y);
}

/* bytes in whole 64-byte slices, as every buffer of a layout takes them. */
static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* The spans of one allocation, sorted, tile [0, total) in 64-byte slices:
 * aligned, each at least its bytes, none overlapping, no gap, no excess. */
static void check_tiling(span_t *s, int n, size_t total, const char *where) {
  qsort(s, (size_t)n, sizeof *s, by_offset);
  size_t end = 0;
  for (int i = 0; i < n; i++) {
    CHECK_MSG(s[i].off == end && s[i].off % 64 == 0, "%s: %s at %zu, expected %zu", where, s[i].what, s[i].off,
              end);
    end = s[i].off + ((s[i].bytes + 63) & ~(size_t)63);
  }
  CHECK_MSG(end == total, "%s: buffers end at %zu, the allocation has %zu", where, end, total);
}

/* Every arch x micro-batch x amp x checkpointing mode x tensor split
 * (tp 1; tp 2 and 3 where they divide n_head and d_ff, with and without
 * sequence parallelism where tp divides B T). */
AA_TEST(the_activation_layout_tiles_its_allocations_by_mode) {
  const aa_dtype_t amps[] = {AA_F32, AA_BF16, AA_F16};
  const struct {
    aa_ckpt_mode_t ckpt;
    int layers;
  } modes[] = {{AA_CKPT_NONE, 0}, {AA_CKPT_SELECTIVE, 0}, {AA_CKPT_FULL, 0}, {AA_CKPT_FULL, 1}};
  int n = 0;
  for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ai++)
    for (int B = 1; B <= 3; B += 2)
      for (int tp = 1; tp <= 3; tp++)
        for (int sp = 0; sp <= (tp > 1); sp++)
          for (int p = 0; p < 3; p++)
            for (int k = 0; k < 4; k++) {
              const aa_arch_t *a = &archs[ai];
              const int T = a->seq_len, L = a->n_layer;
              if (a->n_head % tp || a->d_ff % tp || (sp && (B * T) % tp)) continue;
              /* The rank's dimensions, written out here rather than taken
               * from aa_sizes_tp, which this checks. */
              const size_t N = (size_t)B * T, Ns = sp ? N / tp : N, C = a->d_model, Cl = C / tp;
              const size_t F = (size_t)a->d_ff / tp, V = ((size_t)a->vocab_size + tp - 1) / tp, f4 = 4;
              const size_t es = aa_dtype_size(amps[p]), NH = (size_t)a->n_head / tp;
              const size_t stats = (4 * Ns + NH * N) * f4;
              const size_t wblock = 4 * C * Cl + 2 * F * C + 6 * C + 3 * Cl + F;
              aa_tp_dims_t d;
              aa_sizes_tp(a, tp, &d);
              CHECK(d.Cl == (int)Cl && d.F == (int)F && d.Vl == (int)V && d.NH == (int)NH && d.C == (int)C);
              CHECK(aa_sizes_unit_numel(a, tp, 1) == wblock && aa_sizes_unit_numel(a, tp, 0) == (V + T) * C);
              aa_act_layout_t l;
              aa_act_block_t blocks[3];
              const aa_act_shape_t sh = {.B = B, .T = T, .tp = tp, .sp = sp, .amp = amps[p], .ckpt = modes[k].ckpt,
                                         .ckpt_layers = modes[k].layers};
              aa_sizes_acts(a, &sh, &l, blocks);
              char where[128];
              snprintf(where, sizeof where, "arch %zu B %d tp %d%s %s %s/%d", ai, B, tp, sp ? " sp" : "",
                       aa_dtype_name(amps[p]), aa_ckpt_mode_name(modes[k].ckpt), modes[k].layers);
              const size_t width[AA_ACT_FIELDS] = {Ns * C, 3 * N * Cl, N * Cl, Ns * C, Ns * C, N * F, N * F, Ns * C};
              span_t st[64], ws[64];
              int ns = 0, nw = 0;
              st[ns++] = (span_t){l.encoded, Ns * C * es, "encoded"};
              for (int b = 0; b < L; b++) {
                int full = aa_sizes_block_full(modes[k].ckpt, modes[k].layers, b);
                for (int f = 0; f < AA_ACT_FIELDS; f++) {
                  int keep = full ? f == AA_ACT_RES3 : modes[k].ckpt != AA_CKPT_SELECTIVE || f != AA_ACT_FCHG;
                  CHECK_MSG((blocks[b].field[f] != AA_SIZES_NONE) == keep, "%s: block %d field %d", where, b, f);
                  CHECK_MSG(aa_sizes_field_numel(a, &sh, f) == width[f], "%s: field %d", where, f);
                  if (keep) st[ns++] = (span_t){blocks[b].field[f], width[f] * es, "field"};
                }
                CHECK_MSG((blocks[b].stats == AA_SIZES_NONE) == full, "%s: block %d stats", where, b);
                if (!full) st[ns++] = (span_t){blocks[b].stats, stats, "stats"};
              }
              st[ns++] = (span_t){l.lnf, Ns * C * f4, "lnf"};
              st[ns++] = (span_t){l.lnf_stats, 2 * Ns * f4, "lnf_stats"};
              st[ns++] = (span_t){l.logits, N * V * f4, "logits"};
              st[ns++] = (span_t){l.losses, N * f4, "losses"};
              check_tiling(st, ns, l.acts, where);
              int mixed = amps[p] != AA_F32, any_full = modes[k].ckpt == AA_CKPT_FULL;
              for (int f = 0; f < AA_ACT_FIELDS; f++) {
                /* Staging: under amp every field but the block output; in
                 * fp32 exactly those some block drops. */
                int dropped = any_full ? f != AA_ACT_RES3 : modes[k].ckpt == AA_CKPT_SELECTIVE && f == AA_ACT_FCHG;
                int want = f != AA_ACT_RES3 && (mixed || dropped);
                CHECK_MSG((l.ws_field[f] != AA_SIZES_NONE) == want, "%s: staging of field %d", where, f);
                if (want) ws[nw++] = (span_t){l.ws_field[f], width[f] * f4, "staging"};
              }
              CHECK((l.ws_res[0] != AA_SIZES_NONE) == mixed && (l.wblock != AA_SIZES_NONE) == mixed);
              if (mixed) {
                ws[nw++] = (span_t){l.ws_res[0], Ns * C * f4, "ws_res0"};
                ws[nw++] = (span_t){l.ws_res[1], Ns * C * f4, "ws_res1"};
                ws[nw++] = (span_t){l.wblock, wblock * f4, "wblock"};
                ws[nw++] = (span_t){l.wpre, (V + T) * C * f4, "wpre"};
                ws[nw++] = (span_t){l.wpost, 2 * C * f4, "wpost"};
                /* At ZeRO stage 3 the gathered units are the fp32 weights:
                 * no widened copy, and nothing else moves in size. */
                aa_act_shape_t z3 = sh;
                z3.zero = 3;
                aa_act_layout_t l3;
                aa_sizes_acts(a, &z3, &l3, NULL);
                const size_t widened = round64(wblock * f4) + round64((V + T) * C * f4) + round64(2 * C * f4);
                CHECK_MSG(l3.wblock == AA_SIZES_NONE && l3.wpre == AA_SIZES_NONE &&
                              l3.wpost == AA_SIZES_NONE && l3.acts == l.acts &&
                              l3.workspace == l.workspace - widened,
                          "%s: zero 3 workspace %zu, want %zu", where, l3.workspace, l.workspace - widened);
              }
              CHECK((l.ws_stats != AA_SIZES_NONE) == any_full);
              if (any_full) ws[nw++] = (span_t){l.ws_stats, stats, "ws_stats"};
              ws[nw++] = (span_t){l.dres, Ns * C * f4, "dres"};
              ws[nw++] = (span_t){l.dln, (sp ? Ns : N) * C * f4, "dln"};
              /* The MLP's gradients and the attention's share one region
               * (dead before the other pair is written): the larger pair
               * tiles it, the other lies back to back from its start. */
              span_t mlp[2] = {{l.dfch, N * F * f4, "dfch"}, {l.dfch_gelu, N * F * f4, "dfch_gelu"}};
              span_t att[2] = {{l.dqkv, 3 * N * Cl * f4, "dqkv"}, {l.datty, N * Cl * f4, "datty"}};
              const size_t mlp_bytes = round64(mlp[0].bytes) + round64(mlp[1].bytes);
              const size_t att_bytes = round64(att[0].bytes) + round64(att[1].bytes);
              const span_t *big = mlp_bytes >= att_bytes ? mlp : att, *small = big == mlp ? att : mlp;
              CHECK_MSG(small[0].off == big[0].off &&
                            small[1].off == small[0].off + round64(small[0].bytes) &&
                            big[1].off == big[0].off + round64(big[0].bytes),
                        "%s: activation gradients at %zu %zu / %zu %zu", where, mlp[0].off, mlp[1].off,
                        att[0].off, att[1].off);
              ws[nw++] = big[0];
              ws[nw++] = big[1];
              /* What the tensor group's collectives need. */
              CHECK((l.xent != AA_SIZES_NONE) == (tp > 1) && (l.full != AA_SIZES_NONE) == (sp == 1));
              if (tp > 1) {
                ws[nw++] = (span_t){l.xent, (tp + 1) * 3 * N * f4, "xent"};
                ws[nw++] = (span_t){l.scalars, 16 * f4, "scalars"};
              }
              if (sp) {
                ws[nw++] = (span_t){l.full, N * C * f4, "full"};
                ws[nw++] = (span_t){l.partial, N * C * f4, "partial"};
                ws[nw++] = (span_t){l.lngrad, 4 * C * f4, "lngrad"};
              }
              check_tiling(ws, nw, l.workspace, where);
              n++;
            }
  fprintf(stderr, "  %d layouts tile their allocations\n", n);
}

/* Under pipeline parallelism a rank's activation store holds its pool of
 * slots back to back, each as large as its largest chunk needs (a chunk's
 * blocks' kept buffers tile the slot from its start, the last block's
 * output excepted: it lives in the send buffer, and on the last stage the
 * stash), then on the last stage lnf and the
 * head's buffers, then the input and gradient receive buffers; blocks it
 * does not hold have no buffers. On every schedule, amp and checkpointing
 * mode, over pp 2 and 3 (and vpp 2 interleaved), 6 micro-batches a step. */
AA_TEST(a_pipeline_stage_lays_out_its_slots_and_receive_buffers) {
  const aa_arch_t a = {.family = "gpt2", .n_layer = 6, .n_head = 4, .d_model = 32, .d_ff = 64, .seq_len = 16,
                       .vocab_size = 64};
  const aa_dtype_t amps[] = {AA_F32, AA_BF16};
  const struct {
    aa_ckpt_mode_t ckpt;
    int layers;
  } modes[] = {{AA_CKPT_NONE, 0}, {AA_CKPT_SELECTIVE, 0}, {AA_CKPT_FULL, 0}, {AA_CKPT_FULL, 2}};
  const struct {
    int pp, vpp;
    aa_pp_schedule_t sched;
  } pipes[] = {{2, 1, AA_SCHEDULE_1F1B}, {3, 1, AA_SCHEDULE_GPIPE}, {3, 1, AA_SCHEDULE_1F1B},
               {2, 2, AA_SCHEDULE_INTERLEAVED}, {3, 2, AA_SCHEDULE_INTERLEAVED}};
  const int B = 2, T = a.seq_len, L = a.n_layer, m = 6;
  int n = 0;
  for (size_t pi = 0; pi < sizeof pipes / sizeof pipes[0]; pi++)
    for (int p = 0; p < 2; p++)
      for (int k = 0; k < 4; k++) {
        aa_strategy_t s;
        aa_strategy_default(&s);
        s.degree[AA_AXIS_PIPELINE] = pipes[pi].pp;
        s.vpp = pipes[pi].vpp;
        s.schedule = pipes[pi].sched;
        for (int st = 0; st < s.degree[AA_AXIS_PIPELINE]; st++) {
          aa_pp_place_t pl;
          CHECK_MSG(aa_pp_place(&a, &s, m, st, &pl) == 0, "%s", aa_last_error());
          const aa_act_shape_t sh = {.B = B, .T = T, .tp = 1, .amp = amps[p], .ckpt = modes[k].ckpt,
                                     .ckpt_layers = modes[k].layers, .pipe = &pl};
          aa_act_layout_t l;
          aa_act_block_t blocks[6];
          aa_sizes_acts(&a, &sh, &l, blocks);
          char where[128];
          snprintf(where, sizeof where, "%s pp %d vpp %d stage %d %s %s/%d", aa_pp_schedule_name(s.schedule),
                   s.degree[AA_AXIS_PIPELINE], pl.vpp, st, aa_dtype_name(amps[p]),
                   aa_ckpt_mode_name(modes[k].ckpt), modes[k].layers);
          const size_t N = (size_t)B * T, C = (size_t)a.d_model, es = aa_dtype_size(amps[p]), f4 = 4;
          const size_t stats = (4 * N + (size_t)a.n_head * N) * f4;
          span_t st_spans[512], slot_spans[AA_PP_CHUNKS_MAX][64];
          int ns = 0, nslot[AA_PP_CHUNKS_MAX] = {0};
          CHECK_MSG(l.encoded == AA_SIZES_NONE, "%s: an input buffer replaces encoded", where);
          /* Each chunk's buffers within one slot (the chunks' layouts
           * share the slot), then the slots and the rest of the store. */
          for (int b = 0; b < L; b++) {
            const int c = aa_pp_chunk_of(&pl, b);
            const int full = aa_sizes_block_full(modes[k].ckpt, modes[k].layers, b);
            for (int f = 0; f < AA_ACT_FIELDS; f++) {
              int keep = full ? f == AA_ACT_RES3 : modes[k].ckpt != AA_CKPT_SELECTIVE || f != AA_ACT_FCHG;
              if (c < 0 || (f == AA_ACT_RES3 && b == pl.hi[c] - 1)) keep = 0;
              CHECK_MSG((blocks[b].field[f] != AA_SIZES_NONE) == keep, "%s: block %d field %d", where, b, f);
              if (!keep) continue;
              slot_spans[c][nslot[c]++] = (span_t){blocks[b].field[f], aa_sizes_field_numel(&a, &sh, f) * es, "field"};
            }
            CHECK_MSG((blocks[b].stats != AA_SIZES_NONE) == (c >= 0 && !full), "%s: block %d stats", where, b);
            if (c >= 0 && !full) slot_spans[c][nslot[c]++] = (span_t){blocks[b].stats, stats, "stats"};
          }
          CHECK((l.stash != AA_SIZES_NONE) == pl.last && (l.logits != AA_SIZES_NONE) == pl.last);
          if (pl.last) slot_spans[pl.vpp - 1][nslot[pl.vpp - 1]++] = (span_t){l.stash, N * C * f4, "stash"};
          size_t most = 0;
          for (int c = 0; c < pl.vpp; c++) {
            size_t end = 0;
            for (int i = 0; i < nslot[c]; i++) {
              size_t e = slot_spans[c][i].off + ((slot_spans[c][i].bytes + 63) & ~(size_t)63);
              if (e > end) end = e;
            }
            check_tiling(slot_spans[c], nslot[c], end, where);
            if (end > most) most = end;
          }
          CHECK_MSG(l.slot_bytes == most, "%s: slots of %zu bytes, the largest chunk needs %zu", where, l.slot_bytes,
                    most);
          for (int j = 0; j < pl.slots; j++) st_spans[ns++] = (span_t){(size_t)j * l.slot_bytes, l.slot_bytes, "slot"};
          if (pl.last) {
            st_spans[ns++] = (span_t){l.lnf, N * C * f4, "lnf"};
            st_spans[ns++] = (span_t){l.lnf_stats, 2 * N * f4, "lnf_stats"};
            st_spans[ns++] = (span_t){l.logits, N * (size_t)a.vocab_size * f4, "logits"};
            st_spans[ns++] = (span_t){l.losses, N * f4, "losses"};
          }
          const size_t act = (N * C * es + 63) & ~(size_t)63;
          for (int j = 0; j < pl.act_bufs; j++) st_spans[ns++] = (span_t){l.act_buf + j * act, N * C * es, "act_buf"};
          for (int j = 0; j < pl.grad_bufs; j++)
            st_spans[ns++] = (span_t){l.grad_buf + j * N * C * f4, N * C * f4, "grad_buf"};
          check_tiling(st_spans, ns, l.acts, where);
          /* The send buffer in the workspace; the widened embedding and lnf
           * where the stage holds them (under amp). */
          CHECK(l.send != AA_SIZES_NONE && l.send < l.workspace);
          if (amps[p] != AA_F32)
            CHECK_MSG((l.wpre != AA_SIZES_NONE) == (pl.first || pl.last) &&
                          (l.wpost != AA_SIZES_NONE) == pl.last,
                      "%s: wpre/wpost", where);
          n++;
        }
      }
  fprintf(stderr, "  %d pipeline layouts tile their stores\n", n);
}

/* A tensor rank's vocabulary rows: consecutive slices of ceil(V / tp)
 * rows, the last ones cut at V (a rank may hold none). */
AA_TEST(vocabulary_slices_cover_the_vocabulary_once) {
  const aa_arch_t *a = &archs[1]; /* V = 11 */
  for (int tp = 1; tp <= 12; tp++) {
    int next = 0, rows = (11 + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
      int lo, valid;
      aa_sizes_vocab_rows(a, tp, r, &lo, &valid);
      CHECK_MSG(lo == r * rows && valid >= 0 && valid <= rows, "tp %d rank %d: rows [%d, +%d)", tp, r, lo, valid);
      if (valid) CHECK_MSG(lo == next, "tp %d rank %d starts at %d, not %d", tp, r, lo, next);
      next += valid;
    }
    CHECK_MSG(next == 11, "tp %d: the slices hold %d rows of 11", tp, next);
  }
}

/* An MoE llama (every other layer, shared experts): its units add up to
 * aa_arch_param_count, an MoE block keeps its router, permuted rows and
 * expert activations (N k rows: dropless) in place of the SwiGLU fields,
 * a dense block none of them, the backward's MoE gradients are in the
 * workspace, and the host routing maps are counted. */
AA_TEST(moe_blocks_size_their_experts_and_routed_rows) {
  aa_arch_t a = {.family = "llama",
                 .n_layer = 3,
                 .n_head = 4,
                 .n_kv_head = 2,
                 .d_model = 32,
                 .d_ff = 64,
                 .seq_len = 16,
                 .vocab_size = 64,
                 .rope_theta = 10000,
                 .norm_eps = 1e-5f,
                 .moe = {.experts = 4, .top_k = 2, .d_ff_expert = 24, .shared_experts = 1, .every = 2}};
  size_t sum = 0;
  for (int u = 0; u < aa_sizes_units(&a); u++)
    sum += aa_sizes_unit_numel(&a, 1, u);
  CHECK(sum == aa_arch_param_count(&a));
  /* Block 0 is MoE: the dense block's 3 F C MLP out, the router E C and
   * (E + S) experts of 3 Fe C in. */
  const size_t C = 32, dense = aa_sizes_unit_numel(&a, 1, 2);
  CHECK(aa_sizes_unit_numel(&a, 1, 1) == dense - 3 * 64 * C + 4 * C + 5 * 3 * 24 * C);
  CHECK(aa_sizes_unit_numel(&a, 1, 3) == aa_sizes_unit_numel(&a, 1, 1));
  const int B = 2, T = 16;
  const size_t N = (size_t)B * T, R = 2 * N, f4 = sizeof(float);
  aa_moe_acts_t ma;
  aa_sizes_moe_acts(&a, N, 1, &ma);
  CHECK(ma.bytes == (2 * N * 4 + R * C + R * 48 + R * 24 + R * C + N * 48 + N * 24) * f4);
  CHECK(ma.route_bytes == 16 * R + 4 * 9);
  CHECK(ma.xl == AA_SIZES_NONE && ma.yl == AA_SIZES_NONE && ma.rows == R);
  /* Expert parallelism over 2 ranks: the block holds 2 of the 4 routed
   * experts (router and shared expert whole); the experts compute R rows
   * under even routing (up to 2 R: both ranks' slots), and the buffers
   * hold the even load with the 1.25 margin, Rl = ceil(1.25 R) = 80 rows,
   * kept with their inputs xl and outputs yl; the dispatcher's arrays
   * (route, counts, local and arrival offsets, 4 size_t a rank, the
   * counts as floats) join the host map; the workspace gains the local
   * rows' two gradients. */
  CHECK(aa_sizes_unit_numel_ep(&a, 1, 2, 1) == aa_sizes_unit_numel(&a, 1, 1) - 2 * 3 * 24 * C);
  CHECK(aa_sizes_unit_numel_ep(&a, 1, 2, 2) == dense);
  aa_moe_acts_t me;
  aa_sizes_moe_acts(&a, N, 2, &me);
  const size_t Rl = 80;
  CHECK(AA_MOE_EP_MARGIN == 1.25 && R == 64);
  CHECK(me.rows == Rl && me.xl != AA_SIZES_NONE && me.yl != AA_SIZES_NONE);
  CHECK(me.bytes == ma.bytes + (Rl * 48 + Rl * 24 - R * 48 - R * 24 + 2 * (Rl * C)) * f4);
  CHECK(me.route_bytes == ma.route_bytes + 4 * (3 * 4 + 2 + 3) + 16 * 4 + 32 * 2);
  /* At ep 4 the same room (the expected load does not grow with ep, the
   * worst case 4 R would); it rounds up: top-1 over 3 tokens is R = 3,
   * room ceil(3.75) = 4. */
  aa_moe_acts_t m4;
  aa_sizes_moe_acts(&a, N, 4, &m4);
  CHECK(m4.rows == Rl);
  aa_arch_t a1 = a;
  a1.moe.top_k = 1;
  aa_sizes_moe_acts(&a1, 3, 2, &m4);
  CHECK(m4.rows == 4);
  aa_act_shape_t she = {.B = B, .T = T, .tp = 1, .cp = 1, .ep = 2, .amp = AA_F32, .ckpt = AA_CKPT_NONE};
  aa_act_layout_t le;
  aa_sizes_acts(&a, &she, &le, NULL);
  CHECK(le.moe_dxl != AA_SIZES_NONE && le.moe_dyl != AA_SIZES_NONE && le.host == 2 * me.route_bytes);
  aa_act_shape_t sh = {.B = B, .T = T, .tp = 1, .cp = 1, .amp = AA_F32, .ckpt = AA_CKPT_NONE};
  aa_act_layout_t l;
  aa_act_block_t blocks[3];
  aa_sizes_acts(&a, &sh, &l, blocks);
  for (int b = 0; b < 3; b++) {
    int moe = b % 2 == 0;
    CHECK_MSG((blocks[b].moe != AA_SIZES_NONE) == moe, "block %d", b);
    CHECK_MSG((blocks[b].field[AA_ACT_FCH] == AA_SIZES_NONE) == moe &&
                  (blocks[b].field[AA_ACT_FCHG] == AA_SIZES_NONE) == moe,
              "block %d", b);
    if (moe) CHECK(blocks[b].moe + ma.bytes <= l.acts);
  }
  CHECK(l.moe_dxp != AA_SIZES_NONE && l.moe_dyp != AA_SIZES_NONE && l.moe_dweight != AA_SIZES_NONE &&
        l.moe_dlogits != AA_SIZES_NONE && l.moe_dlogits + N * 4 * f4 <= l.workspace);
  CHECK(l.host == 2 * ma.route_bytes && l.ws_moe == AA_SIZES_NONE);
  /* Full checkpointing keeps nothing of an MoE block: one block's MoE
   * buffers in the workspace serve every recompute. */
  aa_act_shape_t full = sh;
  full.ckpt = AA_CKPT_FULL;
  aa_sizes_acts(&a, &full, &l, blocks);
  CHECK(blocks[0].moe == AA_SIZES_NONE && blocks[2].moe == AA_SIZES_NONE && l.ws_moe != AA_SIZES_NONE &&
        l.ws_moe + ma.bytes <= l.workspace);
  /* A dense model has none of it. */
  aa_arch_t d = a;
  memset(&d.moe, 0, sizeof d.moe);
  aa_sizes_acts(&d, &sh, &l, blocks);
  CHECK(l.host == 0 && l.moe_dxp == AA_SIZES_NONE && blocks[0].moe == AA_SIZES_NONE);
}

/* ZeRO over dp 10 with expert parallelism 2 on the MoE llama above
 * (blocks 0 and 2 MoE), by hand. An MoE block's pieces: its dense head
 * (ln1 32, q|k|v 64 x 32, proj 32 x 32, ln2 32, router 4 x 32: 3,264),
 * its 2 experts' slices (2 x 3 x 24 x 32 = 4,608, over an expert-data
 * group of 10 / 2 = 5) and the shared expert (2,304). Chunks: wte 2,048 ->
 * 205; each MoE block 327 + 922 + 231; the dense block 9,280 -> 928;
 * lnf|head 2,080 -> 208: S = 205 + 2 x 1,480 + 928 + 208 = 4,301. The MoE
 * block's padded extent ends where its shared chunks do, 7,872 + 10 x 231 =
 * 10,182, the blocks' slot; slot 0 serves lnf|head's 2,080 too (untied);
 * the largest padded piece is the dense block's 9,280, which stage 2's
 * padded borrows from the blocks' slot. */
AA_TEST(zero_shards_each_piece_over_the_group_that_holds_it) {
  aa_arch_t a = {.family = "llama",
                 .n_layer = 3,
                 .n_head = 4,
                 .n_kv_head = 2,
                 .d_model = 32,
                 .d_ff = 64,
                 .seq_len = 16,
                 .vocab_size = 64,
                 .rope_theta = 10000,
                 .norm_eps = 1e-5f,
                 .moe = {.experts = 4, .top_k = 2, .d_ff_expert = 24, .shared_experts = 1, .every = 2}};
  aa_sizes_piece_t pc[AA_SIZES_PIECES_MAX];
  CHECK(aa_sizes_unit_pieces(&a, 1, 2, NULL, 1, pc) == 3);
  CHECK(pc[0].off == 0 && pc[0].n == 3264 && !pc[0].expert);
  CHECK(pc[1].off == 3264 && pc[1].n == 4608 && pc[1].expert);
  CHECK(pc[2].off == 7872 && pc[2].n == 2304 && !pc[2].expert);
  CHECK(aa_sizes_piece_ranks(&pc[1], 10, 2) == 5 && aa_sizes_piece_ranks(&pc[0], 10, 2) == 10);
  CHECK(aa_sizes_unit_pieces(&a, 1, 2, NULL, 2, pc) == 1 && pc[0].n == 9280 && !pc[0].expert);
  CHECK(aa_sizes_unit_pieces(&a, 1, 1, NULL, 1, pc) == 1 && pc[0].n == 3264 + 9216 + 2304);
  aa_zero_sizes_t z;
  aa_sizes_zero_ep(&a, 1, 2, NULL, AA_F32, 3, 10, &z);
  CHECK_MSG(z.shard == 4301, "%zu", z.shard);
  CHECK(z.moment.numel == 4301 && z.gshard.numel == 4301 && z.pshard.numel == 4301 && z.piece.numel == 928);
  CHECK(z.punit[0].numel == 2050 && z.punit[1].numel == 10182 && z.punit[2].numel == 2080);
  CHECK(z.gunit[0].numel == 2080 && z.gunit[1].numel == 10182 && z.gunit[2].numel == 0 && z.gslot[2] == 0);
  aa_sizes_zero_ep(&a, 1, 2, NULL, AA_F32, 1, 10, &z);
  CHECK(z.padded.numel == 9280 && z.gshard.numel == 0 && z.moment.numel == 4301);
  aa_sizes_zero_ep(&a, 1, 2, NULL, AA_F32, 2, 10, &z);
  CHECK(z.padded.numel == 0 && z.padded_slot == 1);
}

int main(void) {
  RUN(units_add_up_to_the_model_and_chunks_round_up);
  RUN(the_activation_layout_tiles_its_allocations_by_mode);
  RUN(a_pipeline_stage_lays_out_its_slots_and_receive_buffers);
  RUN(vocabulary_slices_cover_the_vocabulary_once);
  RUN(moe_blocks_size_their_experts_and_routed_rows);
  RUN(zero_shards_each_piece_over_the_group_that_holds_it);
  return aa_test_summary();
}
