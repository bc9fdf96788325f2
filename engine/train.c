/* Training loop, one rank of a mesh (see train.h): a single process is a
 * 1x1x1 mesh over a group of one, so there is one path. */
#include "train.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/resource.h>

#include "checkpoint.h"
#include "common/file.h"
#include "data.h"
#include "lora.h"
#include "loss_scale.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "strategies/sizes.h"

#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

typedef struct {
  const aa_model_spec_t *spec;
  const aa_train_opts_t *opts;
  FILE *log;
  aa_gpt_t *model;
  aa_shard_t train, val;
  aa_loader_t loader;
  aa_train_state_t state;
  aa_strategy_t strat; /* resolved */
  int accum;           /* micro-batches per optimizer step */
  aa_mem_t mem;
  aa_loss_scaler_t scaler; /* fp16 only */
  /* MoE models: over the last step's micro-batches on this rank, the
   * fewest and most rows an expert of any MoE layer computed in one
   * micro-batch, and the slots dropped in all. */
  aa_moe_stats_t moe;
  int32_t *inputs, *targets;
  char out_dir[AA_PATH_MAX];
  double *step_times;
  const aa_ops_t *ops; /* the backend the model lives on */
  int cuda_device;     /* -1 on the CPU */
  char device_line[400];
  double peak_flops;   /* CUDA: dense bf16 FLOP/s estimate, 0 unknown */
  /* The mesh, built over world_group: the caller's group or, in a single
   * process, self (a group of one, owned). ZeRO (zero, which holds the
   * optimizer) runs over comm, the mesh's data x context group (its
   * replicas), in which this process is rank `rank` of `world`; the data
   * comes by its data coordinate, data_rank of data_world, and under
   * context parallelism (cp ranks, this one at cp_rank) each rank takes its
   * chunks of every sequence (model.h). full_inputs, full_targets: a
   * micro-batch of whole sequences before that. */
  aa_comm_t *world_group, *self;
  aa_mesh_t mesh;
  aa_comm_t *comm;
  int rank, world, data_rank, data_world, cp, cp_rank;
  int32_t *full_inputs, *full_targets;
  aa_zero_t zero;
  int lora;           /* the spec's lora: the adapters train (lopt), the base is frozen */
  aa_lora_opt_t lopt; /* their AdamW (engine/lora.h) */
  FILE *devnull; /* the log of ranks other than 0, and of a dry run given none */
  /* Pipeline parallelism (pp > 1): this rank's stage, place and plan, the
   * embedding group (the first and last stage, which both hold wte|wpe
   * for the tied head; NULL elsewhere), and a step's tokens, every
   * micro-batch's, read before the schedule runs. */
  int pp, stage;
  aa_pp_place_t place;
  aa_pp_plan_t plan;
  aa_comm_t *embed;
  int32_t *step_inputs, *step_targets;
  /* Where the step's time went (train.h), and the sum over timed steps. */
  double step_time[AA_TIME_KINDS], time_sum[AA_TIME_KINDS];
  double a2a_forward, a2a_forward_sum; /* the step's all-to-all time in forward passes, and its sum */
} trainer_t;

const char *aa_time_kind_name(aa_time_kind_t k) {
  static const char *const names[AA_TIME_KINDS] = {"forward",       "backward", "optimizer",
                                                   "pipeline_comm", "bubble",   "all_to_all"};
  return (unsigned)k < AA_TIME_KINDS ? names[k] : "?";
}

/* Moves the loader to this rank's part of the next global batch of
 * accum * dp micro-batches (before = 1) or past the rest of it (before = 0):
 * over a group of one, nothing to skip. */
static void loader_slice(const trainer_t *t, aa_loader_t *l, int before) {
  uint64_t per_rank = (uint64_t)t->accum * (uint64_t)t->strat.micro_batch;
  aa_loader_skip(l, per_rank * (uint64_t)(before ? t->data_rank : t->data_world - 1 - t->data_rank));
}

/* The next micro-batch of the rank into inputs and targets (B T of the
 * model's tokens each): the loader's B sequences, or under context
 * parallelism this rank's two chunks of each, chunk-major (model.h). */
static void next_micro_batch(trainer_t *t, aa_loader_t *l, int32_t *inputs, int32_t *targets) {
  if (t->cp == 1) {
    aa_loader_next(l, inputs, targets);
    return;
  }
  const int B = t->strat.micro_batch, T = t->spec->arch.seq_len, Tc = T / (2 * t->cp);
  int pos0[2];
  aa_loader_next(l, t->full_inputs, t->full_targets);
  aa_gpt_cp_positions(T, t->cp, t->cp_rank, pos0);
  for (int k = 0; k < 2; k++)
    for (int b = 0; b < B; b++) {
      size_t to = ((size_t)k * B + b) * Tc, from = (size_t)b * T + pos0[k];
      memcpy(inputs + to, t->full_inputs + from, sizeof(int32_t) * Tc);
      memcpy(targets + to, t->full_targets + from, sizeof(int32_t) * Tc);
    }
}

/* The mean over the data group of x (identical on every rank). */
static int global_mean(trainer_t *t, float *x) {
  if (t->lora) { /* no ZeRO state: straight over the data group (host memory: the cpu backend) */
    int rc = t->world > 1 ? aa_comm_all_reduce(t->comm, x, x, 1, AA_F32, AA_COMM_AVG) : 0;
    return rc ? aa_error_wrap(rc, "averaging the loss over %d ranks", t->world) : 0;
  }
  int rc = aa_zero_all_reduce_host(&t->zero, x, 1, AA_COMM_AVG);
  return rc ? aa_error_wrap(rc, "averaging the loss over %d ranks", t->world) : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Mean loss over the first eval_batches global batches of the validation
 * shard (always the same sequences whatever the micro-batch, so successive
 * figures and different strategies are comparable). setup() has checked
 * that the shard holds them all (check_eval_batches). */
/* One validation micro-batch through the pipeline: each of the rank's
 * chunks receives its input, runs forward and sends its output on, in
 * micro-batch then virtual-stage order, the one order every rank's
 * transfers follow. The loss is the last stage's (0 elsewhere). */
static int pipeline_eval(trainer_t *t, float *loss) {
  aa_gpt_t *m = t->model;
  aa_comm_t *pg = t->mesh.group[AA_AXIS_PIPELINE];
  const int pp = t->pp, S = pp * t->place.vpp;
  const size_t n = aa_gpt_stream_numel(m);
  int rc = 0;
  *loss = 0;
  for (int c = 0; c < t->place.vpp && !rc; c++) {
    int vs = c * pp + t->stage;
    float l = 0;
    if (vs > 0 && (rc = aa_comm_recv(pg, aa_gpt_stage_input(m, 0), n, t->strat.amp, (vs - 1) % pp))) break;
    if ((rc = aa_gpt_stage_forward(m, c, 0, 0, t->inputs, t->targets, 0, 0, &l))) break;
    if (vs < S - 1) rc = aa_comm_send(pg, aa_gpt_send_buf(m), n, t->strat.amp, (vs + 1) % pp);
    *loss += vs == S - 1 ? l : m->moe_loss; /* every chunk's MoE losses, as in pipeline_step */
  }
  return rc ? aa_error_wrap(rc, "validation through the pipeline") : 0;
}

static int evaluate(trainer_t *t, float *out) {
  aa_loader_t l;
  int rc = aa_loader_init(&l, &t->val, t->model->B, t->spec->arch.seq_len);
  if (rc) return aa_error_wrap(rc, "validation data");
  double sum = 0;
  uint64_t accum = (uint64_t)t->accum, n = (uint64_t)t->spec->train.eval_batches * accum;
  for (uint64_t i = 0; i < n; i++) {
    float loss;
    if (i % accum == 0) loader_slice(t, &l, 1);
    next_micro_batch(t, &l, t->inputs, t->targets);
    if ((rc = t->pp > 1 ? pipeline_eval(t, &loss) : aa_gpt_forward(t->model, t->inputs, t->targets, &loss)))
      return rc;
    sum += loss;
    if (i % accum == accum - 1) loader_slice(t, &l, 0);
  }
  *out = (float)(sum / (double)n);
  /* Only the last pipeline stage saw the token losses; each stage its MoE blocks'. */
  if (t->pp > 1 && (rc = aa_gpt_pipeline_sum(t->model, out, 1))) return rc;
  return global_mean(t, out);
}

/* A validation pass reads eval_batches global batches of accum x world
 * micro-batches of B sequences each. The loader takes sequence k at
 * tokens [k*T, k*T + T] (one token of shift), so N sequences fit without
 * wrapping back to the start in N*T + 1 tokens. More batches than that
 * would only read the same sequences again, and an absurd count would run
 * until killed, so a spec asking for more is refused before training. All
 * products are 64-bit and checked: the spec's fields may each be INT_MAX. */
static int check_eval_batches(const trainer_t *t, int B, int T) {
  uint64_t seqs = (uint64_t)t->accum * (uint64_t)B * (uint64_t)t->data_world, per_batch, need;
  uint64_t have = t->val.n_tokens, want = (uint64_t)t->spec->train.eval_batches;
  int big = __builtin_mul_overflow(seqs, (uint64_t)T, &per_batch);
  uint64_t room = big ? 0 : (have - 1) / per_batch;
  if (want <= room) return 0;
  char need_s[32];
  if (big || __builtin_mul_overflow(per_batch, want, &need) || need == UINT64_MAX)
    snprintf(need_s, sizeof need_s, "more than %llu", (unsigned long long)UINT64_MAX);
  else snprintf(need_s, sizeof need_s, "%llu", (unsigned long long)need + 1);
  return aa_error(AA_EINVAL,
                  "train.eval_batches %d needs %s tokens of validation data; %s has %llu tokens (room for at most "
                  "%llu batch%s)",
                  t->spec->train.eval_batches, need_s, t->spec->val_data, (unsigned long long)have,
                  (unsigned long long)room, room == 1 ? "" : "es");
}

static int save_checkpoint(trainer_t *t, const char *name) {
  char path[AA_PATH_MAX + 64];
  if (snprintf(path, sizeof path, "%s/%s", t->out_dir, name) >= (int)sizeof path)
    return aa_error(AA_EINVAL, "checkpoint path too long");
  t->state.data_pos = t->loader.pos;
  t->state.loss_scale = t->strat.amp == AA_F16 ? t->scaler.scale : 0;
  t->state.scaler_iter = t->scaler.iter;
  t->state.scaler_last_overflow = t->scaler.last_overflow;
  t->state.scaler_hysteresis_left = t->scaler.hysteresis_left;
  t->state.skipped_steps = t->scaler.skipped;
  if (t->lora) { /* the adapters alone (lora.h), whole: replica 0's ranks write, the moments gathered */
    const int w = t->spec->train.weights_only;
    int rc = aa_lora_save(path, t->model, w ? NULL : &t->lopt, &t->state, t->rank == 0);
    if (!rc && !t->rank)
      fprintf(t->log, "checkpoint %s (step %d, LoRA adapters%s)\n", path, t->state.step,
              w ? ", weights only" : "");
    return rc;
  }
  const int weights = t->spec->train.weights_only;
  int rc = (weights ? aa_ckpt_save_weights : aa_ckpt_save_pipe)(path, t->model, &t->zero,
                                                                t->mesh.group[AA_AXIS_PIPELINE], &t->state);
  if (rc) return rc;
  fprintf(t->log, "checkpoint %s (step %d%s)\n", path, t->state.step, weights ? ", weights only" : "");
  /* Only now that every rank's part is written may older ones go, by one
   * rank; a failed deletion costs disk, not the run. */
  const int keep = t->spec->train.keep_last;
  if (keep && strncmp(name, "final", 5) && aa_comm_rank(t->world_group) == 0 &&
      aa_ckpt_retain(t->out_dir, keep, t->state.step, t->log))
    fprintf(t->log, "warning: keep-last %d: %s\n", keep, aa_last_error());
  return 0;
}

/* Picks the backend opts->device names and initialises it. */
static int open_device(trainer_t *t) {
  const char *d = t->opts->device;
  t->ops = aa_ops_cpu();
  t->cuda_device = -1;
  if (!d || !strcmp(d, "cpu")) {
    /* Which GEMM kernels run can halve a step (aa_cpu_blas_core). */
    snprintf(t->device_line, sizeof t->device_line, "device cpu: OpenBLAS %s kernels\n", aa_cpu_blas_core());
    return 0;
  }
  char *end = NULL;
  long n = -1;
  if (!strcmp(d, "cuda")) n = 0;
  else if (!strncmp(d, "cuda:", 5) && isdigit((unsigned char)d[5])) n = strtol(d + 5, &end, 10);
  if (n < 0 || n > 4096 || (end && *end))
    return aa_error(AA_EINVAL, "unknown device '%s' (expected cpu or cuda:N)", d);
#ifdef AA_HAVE_CUDA
  aa_cuda_device_info_t info;
  int rc = aa_cuda_device_info((int)n, &info);
  if (rc) return aa_error_wrap(rc, "device %s", d);
  /* A failure left over from an earlier run in this process is not ours. */
  aa_cuda_clear_error();
  if ((rc = aa_cuda_init((int)n))) return aa_error_wrap(rc, "device %s", d);
  aa_cuda_set_tf32(t->opts->tf32);
  t->ops = aa_ops_cuda();
  t->cuda_device = (int)n;
  t->peak_flops = info.peak_bf16_flops;
  char mem[32];
  snprintf(t->device_line, sizeof t->device_line,
           "device cuda:%d: %s, %s, %d SMs, sm_%d%d, peak bf16 %.1f TFLOP/s, %s GEMMs\n", (int)n, info.name,
           aa_mem_fmt(mem, info.total_mem), info.sm_count, info.cc_major, info.cc_minor, info.peak_bf16_flops / 1e12,
           t->opts->tf32 ? "TF32" : "fp32");
  return 0;
#else
  return aa_error(AA_EUNSUPPORTED, "device %s: this build has no CUDA backend (nvcc was not found at configure time)",
                  d);
#endif
}

static int setup(trainer_t *t) {
  const aa_model_spec_t *s = t->spec;
  int rc, T = s->arch.seq_len;
  /* A spec made for planning has no data: every rank refuses it here, the
   * same way and before any collective, so no peer waits on it. */
  if ((t->opts->dryrun &&
       aa_spec_require_planned(s, t->opts->device && !strncmp(t->opts->device, "cuda", 4), "dry run")) ||
      aa_spec_require_data(s, t->opts->dryrun ? "dry run" : "training"))
    return AA_EINPUT;
  t->lora = s->arch.lora.r > 0;
  if (t->opts->strategy) t->strat = *t->opts->strategy;
  else aa_strategy_default(&t->strat);
  if ((rc = aa_strategy_resolve(&t->strat, s, aa_comm_world(t->world_group))))
    return aa_error_wrap(rc, "strategy");
  t->accum = aa_strategy_accum_steps(&t->strat, s);
  int B = t->strat.micro_batch;
  aa_mem_init(&t->mem, t->opts->memory_limit);
  aa_loss_scaler_init(&t->scaler, &t->strat.loss_scale);
  if ((rc = open_device(t))) return rc;
  /* Collectives read and write the model's buffers where they live: host
   * memory through shm, device memory through NCCL. A group of one moves
   * nothing, so it serves either. */
  const char *backend = aa_comm_backend(t->world_group);
  if (strcmp(backend, "self") && (t->cuda_device >= 0) != !strcmp(backend, "nccl"))
    return aa_error(AA_EINVAL, "a %s process group cannot serve ranks on %s (%s ranks meet in %s groups)", backend,
                    t->cuda_device >= 0 ? "a CUDA device" : "the CPU", t->cuda_device >= 0 ? "CUDA" : "CPU",
                    t->cuda_device >= 0 ? "nccl" : "shm");
  /* LoRA on CUDA: one process so far (the adapters' loss mean and state
   * reductions read host memory, which an nccl group does not); every rank
   * refuses here, before any collective. */
  if (t->lora && t->cuda_device >= 0 && aa_comm_world(t->world_group) > 1)
    return aa_error(AA_EUNSUPPORTED,
                    "lora: LoRA adapters train on the cuda backend in one process so far; %d ranks on CUDA "
                    "devices are not supported yet (docs/training-knobs.md \"LoRA\")",
                    aa_comm_world(t->world_group));
  /* ZeRO shards over the ranks holding the same slice of the model: the
   * data group times the context group (Megatron's). */
  if ((rc = aa_mesh_init(&t->mesh, &t->strat, t->world_group))) return rc;
  t->comm = t->mesh.replicas;
  t->rank = aa_comm_rank(t->comm);
  t->world = aa_comm_world(t->comm);
  t->data_rank = aa_comm_rank(t->mesh.group[AA_AXIS_DATA]);
  t->data_world = aa_comm_world(t->mesh.group[AA_AXIS_DATA]);
  t->cp = aa_comm_world(t->mesh.group[AA_AXIS_CONTEXT]);
  t->cp_rank = aa_comm_rank(t->mesh.group[AA_AXIS_CONTEXT]);
  const int Tm = T / t->cp; /* the model's tokens a sequence: a context rank's two chunks */
  aa_comm_t *pg = t->mesh.group[AA_AXIS_PIPELINE];
  t->pp = aa_comm_world(pg);
  t->stage = aa_comm_rank(pg);
  if (t->pp > 1) {
    /* ZeRO-2/3 reduce or gather every micro-batch, which a pipeline
     * interleaves across stages (docs/strategy-format.md). */
    if (aa_sizes_zero_stage(t->strat.zero, t->world) >= 2)
      return aa_error(AA_EINVAL, "ZeRO stage %d with pipeline parallelism: use ZeRO 0 or 1", t->strat.zero);
    if ((rc = aa_pp_place(&s->arch, &t->strat, t->accum, t->stage, &t->place)) ||
        (rc = aa_pp_plan(t->strat.schedule, t->pp, t->place.vpp, t->accum, &t->plan)))
      return rc;
    /* Megatron's embedding group: the stages holding wte|wpe (gpt2's tied
     * head; llama's head is its own, and only the first stage holds wte). */
    int holds = !aa_arch_is_llama(&s->arch) && (t->stage == 0 || t->stage == t->pp - 1);
    if ((rc = aa_comm_split(pg, holds ? 0 : -1, t->stage, &t->embed)))
      return aa_error_wrap(rc, "the embedding group");
    t->step_inputs = malloc(sizeof(int32_t) * B * Tm * t->accum);
    t->step_targets = malloc(sizeof(int32_t) * B * Tm * t->accum);
    if (!t->step_inputs || !t->step_targets) return aa_error(AA_ENOMEM, "out of memory");
  }
  /* A failure to read the inputs is AA_EINPUT: no strategy would do
   * better, so the planner stops a search on it (docs/service.md). */
  if ((rc = aa_shard_read(&t->train, s->train_data, s->arch.vocab_size)))
    return aa_error_wrap(AA_EINPUT, "training data");
  /* A dry run never validates, so it does not pay for reading the shard. */
  if (s->val_data[0] && !t->opts->dryrun && (rc = aa_shard_read(&t->val, s->val_data, s->arch.vocab_size)))
    return aa_error_wrap(AA_EINPUT, "validation data");
  if ((rc = aa_loader_init(&t->loader, &t->train, B, T))) return aa_error_wrap(AA_EINPUT, "training data");
  /* An empty validation shard means no validation, as no shard does. */
  if (t->val.n_tokens && (rc = check_eval_batches(t, B, T))) return rc;
  int zero = aa_sizes_zero_stage(t->strat.zero, t->world);
  aa_gpt_opts_t mo = {.amp = t->strat.amp,
                      .ckpt = t->strat.ckpt,
                      .ckpt_layers = t->strat.ckpt_layers,
                      .mem = &t->mem,
                      .zero = zero,
                      .tensor = t->mesh.group[AA_AXIS_TENSOR],
                      .sp = t->strat.sp,
                      .pipe = t->pp > 1 ? &t->place : NULL,
                      .pipeline = t->pp > 1 ? pg : NULL,
                      .context = t->cp > 1 ? t->mesh.group[AA_AXIS_CONTEXT] : NULL,
                      .expert = t->mesh.expert,
                      .etp = t->strat.etp};
  /* LoRA: AdamW over the adapters (lora.h), ZeRO over them alone: the frozen base stays whole. */
  if ((rc = aa_gpt_create(&t->model, &s->arch, t->ops, B, Tm, &mo)) ||
      (rc = t->lora ? aa_lora_opt_init_zero(&t->lopt, t->model, t->comm, zero, &t->mem)
                    : aa_zero_init_ep(&t->zero, t->model, t->comm, t->mesh.expert_data, zero, &t->mem)))
    return rc;
  t->inputs = malloc(sizeof(int32_t) * B * Tm);
  t->targets = malloc(sizeof(int32_t) * B * Tm);
  if (t->cp > 1) {
    t->full_inputs = malloc(sizeof(int32_t) * B * T);
    t->full_targets = malloc(sizeof(int32_t) * B * T);
    if (!t->full_inputs || !t->full_targets) return aa_error(AA_ENOMEM, "out of memory");
  }
  t->step_times = calloc(s->train.steps + 1, sizeof(double));
  if (!t->inputs || !t->targets || !t->step_times) return aa_error(AA_ENOMEM, "out of memory");
  t->state.seed = s->train.seed;
  aa_rng_seed(&t->state.rng, s->train.seed);
  if (t->opts->resume) {
    bool moments = false;
    if (t->lora) { /* the base from init_weights, the adapters and their state from the checkpoint */
      if ((rc = aa_gpt_lora_load_base(t->model, s->init_weights)))
        return aa_error_wrap(rc == AA_ENOMEM ? rc : AA_EINPUT, "init_weights");
      if ((rc = aa_lora_resume(t->opts->resume, t->model, &t->lopt, &t->state, &moments))) return rc;
    } else if ((rc = aa_ckpt_load_resume(t->opts->resume, t->model, &t->zero, &t->state, &moments)) ||
               (rc = aa_zero_publish(&t->zero, t->model))) {
      return rc;
    }
    if (!moments)
      fprintf(t->log,
              "resume: %s holds no optimizer state (a weights-only checkpoint): the optimizer restarts "
              "(AdamW moments zero, bias correction from its first step) at step %d\n",
              t->opts->resume, t->state.step);
    t->loader.pos = t->state.data_pos;
    t->scaler.skipped = t->state.skipped_steps;
    if (t->strat.amp == AA_F16 && t->state.loss_scale > 0) {
      t->scaler.scale = t->state.loss_scale;
      t->scaler.iter = t->state.scaler_iter;
      t->scaler.last_overflow = t->state.scaler_last_overflow;
      t->scaler.hysteresis_left = t->state.scaler_hysteresis_left;
    }
    if (t->state.step > s->train.steps)
      return aa_error(AA_EINVAL, "%s: checkpoint is at step %d, past the run's %d steps", t->opts->resume,
                      t->state.step, s->train.steps);
  } else if (t->lora) {
    /* The base from init_weights (required: aa_spec_require_data), the
     * adapters PEFT's from the trainer RNG. */
    rc = aa_gpt_lora_load_base(t->model, s->init_weights);
    int file = rc == AA_ENOENT || rc == AA_EIO || rc == AA_EFORMAT || rc == AA_ECORRUPT || rc == AA_EINVAL;
    if (rc) return aa_error_wrap(file ? AA_EINPUT : rc, "init_weights");
    if ((rc = aa_gpt_lora_init(t->model, aa_rng_u64(&t->state.rng))) ||
        (rc = aa_lora_opt_take(&t->lopt, t->model)))
      return rc;
  } else if (s->init_weights[0]) {
    rc = aa_ckpt_load_zero(s->init_weights, t->model, &t->zero, NULL);
    /* The file's faults are the input's; a group's or the memory limit's stay theirs. */
    int file = rc == AA_ENOENT || rc == AA_EIO || rc == AA_EFORMAT || rc == AA_ECORRUPT || rc == AA_EINVAL;
    if (rc) return aa_error_wrap(file ? AA_EINPUT : rc, "init_weights");
    if ((rc = aa_zero_publish(&t->zero, t->model))) return rc;
  } else {
    /* Weight init consumes the trainer RNG, so its saved state continues
     * the same stream after a resume. */
    uint64_t seed = aa_rng_u64(&t->state.rng);
    if ((rc = aa_zero_init_weights(&t->zero, t->model, seed))) return rc;
  }
  int n = t->opts->out_dir ? snprintf(t->out_dir, sizeof t->out_dir, "%s", t->opts->out_dir)
                           : snprintf(t->out_dir, sizeof t->out_dir, "runs/%s", s->name);
  if (n >= (int)sizeof t->out_dir) return aa_error(AA_EINVAL, "output directory path too long");
  return t->opts->dryrun ? 0 : aa_mkdirs(t->out_dir);
}

static void trainer_free(trainer_t *t) {
  aa_zero_free(&t->zero, t->model);
  aa_lora_opt_free(&t->lopt);
  aa_gpt_free(t->model);
  aa_comm_destroy(t->embed);
  aa_pp_plan_free(&t->plan);
  free(t->step_inputs);
  free(t->step_targets);
  aa_mesh_free(&t->mesh);
  aa_comm_destroy(t->self);
  if (t->devnull) fclose(t->devnull);
  aa_shard_free(&t->train);
  aa_shard_free(&t->val);
  free(t->inputs);
  free(t->targets);
  free(t->full_inputs);
  free(t->full_targets);
  free(t->step_times);
#ifdef AA_HAVE_CUDA
  if (t->cuda_device >= 0) aa_cuda_shutdown();
#endif
}

/* Training FLOPs per token for MFU, as llm.c estimates them: 6N for the
 * weight GEMMs, forward and backward (N = all parameters), plus 6*L*C*T for
 * attention's scores and weighted sums (PaLM's 12*L*C*T halved: a causal
 * mask leaves half the products to do). */
static double flops_per_token(const trainer_t *t) {
  const aa_arch_t *a = &t->spec->arch;
  return 6.0 * (double)t->model->n_params + 6.0 * a->n_layer * (double)a->d_model * a->seq_len;
}

/* What the summary lists of every rank of the group: its place, its time
 * breakdown and its peak bytes. */
enum { RF_RANK, RF_COORD, RF_TIME = RF_COORD + AA_AXES, RF_PEAK = RF_TIME + AA_TIME_KINDS, RF_ACTS, RF_N };

/* The summary replaces any earlier one whole, through a fresh temporary
 * (common/file.h): the output directory may be shared, and a symlink
 * planted at the summary's name is replaced, never written through. */
static int write_summary(const trainer_t *t, const aa_train_result_t *r, int threads, const double *ranks,
                         int nranks) {
  aa_wfile_t w;
  int rc = aa_wfile_open(&w, t->opts->summary_json, 0666);
  if (rc) return rc;
  FILE *f = w.f;
  char hash[17];
  aa_arch_hash(&t->spec->arch, hash);
  fprintf(f,
          "{\"model\": \"%s\", \"model_hash\": \"%s\", \"params\": %zu, \"rank_params\": %zu, \"strategy\": "
          "\"%s\", \"steps\": %d, "
          "\"global_batch\": %d, \"micro_batch\": %d, \"accum_steps\": %d, \"seq_len\": %d, \"threads\": %d, "
          "\"tokens_per_s\": %.3f, \"step_ms_median\": %.4f, \"final_loss\": %.6f, ",
          t->spec->name, hash, (size_t)aa_arch_param_count(&t->spec->arch), t->model->n_params, r->key,
          r->steps_done, t->spec->train.global_batch, t->model->B, t->accum, t->spec->arch.seq_len, threads,
          r->tokens_per_s, r->step_ms_median, r->final_loss);
  if (isnan(r->val_loss)) fprintf(f, "\"val_loss\": null, ");
  else fprintf(f, "\"val_loss\": %.6f, ", r->val_loss);
  fprintf(f, "\"unigram_entropy\": %.6f, \"skipped_steps\": %lld, \"loss_scale\": %.17g, \"peak_bytes\": {",
          r->train_entropy, (long long)r->skipped_steps, r->loss_scale);
  for (int k = 0; k < AA_MEM_NKINDS; k++) fprintf(f, "\"%s\": %zu, ", aa_mem_kind_name(k), r->mem.peak[k]);
  struct rusage ru;
  long maxrss = getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_maxrss;
  fprintf(f, "\"total\": %zu}, \"max_rss_bytes\": %lld", r->mem.peak_total, (long long)maxrss * 1024);
  /* Every rank's place, breakdown (ms a step) and peak bytes. */
  fprintf(f, ", \"ranks\": [");
  for (int i = 0; i < nranks; i++) {
    const double *x = ranks + (size_t)i * RF_N;
    fprintf(f, "%s{\"rank\": %d", i ? ", " : "", (int)x[RF_RANK]);
    for (int a = 0; a < AA_AXES; a++) /* "dp_rank", ...: the protocol's names (common/axis.h) */
      fprintf(f, ", \"%s_rank\": %d", aa_axis_info((aa_axis_t)a)->key, (int)x[RF_COORD + a]);
    fprintf(f, ", \"time_ms\": {");
    for (int k = 0; k < AA_TIME_KINDS; k++)
      fprintf(f, "%s\"%s\": %.4f", k ? ", " : "", aa_time_kind_name(k), x[RF_TIME + k]);
    fprintf(f, "}, \"peak_bytes\": %.0f, \"peak_acts_bytes\": %.0f}", x[RF_PEAK], x[RF_ACTS]);
  }
  fprintf(f, "]");
  /* MoE fields only for MoE models, so dense summaries stay as they were. */
  if (t->spec->arch.moe.experts) fprintf(f, ", \"moe_max_tokens\": %.3f", r->moe_max_tokens);
  /* Device fields only off the CPU, so CPU summaries stay as they were. */
  if (t->cuda_device >= 0)
    fprintf(f, ", \"device\": \"cuda:%d\", \"tf32\": %s, \"flops_per_token\": %.6g, \"peak_flops\": %.6g, \"mfu\": %.6f",
            t->cuda_device, t->opts->tf32 ? "true" : "false", flops_per_token(t), t->peak_flops,
            t->peak_flops > 0 ? r->tokens_per_s * flops_per_token(t) / t->peak_flops : 0.0);
  fprintf(f, "}\n");
  return aa_wfile_commit(&w);
}

/* Every rank's `bytes` of host data mine, gathered in rank order into all
 * (world x bytes, host), through the backend's memory (NCCL gathers device
 * buffers). The payload moves as floats: a gather only copies, so any
 * bytes (a multiple of 4) survive. A collective over c. */
static int all_gather_host(aa_comm_t *c, const aa_ops_t *ops, const void *mine, void *all, size_t bytes) {
  const size_t world = (size_t)aa_comm_world(c);
  void *dev = NULL;
  int rc = ops->alloc(&dev, bytes * (world + 1));
  if (!rc) rc = ops->upload(dev, mine, bytes);
  if (!rc) rc = aa_comm_all_gather(c, dev, (char *)dev + bytes, bytes / sizeof(float), AA_F32);
  if (!rc) rc = ops->download(all, (char *)dev + bytes, bytes * world);
  ops->free(dev);
  return rc;
}

/* Every rank's figures (RF_N doubles each, world of them) into *out
 * (malloc'd): an all-gather over the world group. A collective. */
static int gather_ranks(const trainer_t *t, const aa_train_result_t *r, double **out, int *n) {
  aa_comm_t *w = t->world_group;
  const int world = aa_comm_world(w);
  double mine[RF_N] = {[RF_RANK] = r->rank,
                       [RF_PEAK] = (double)r->mem.peak_total,
                       [RF_ACTS] = (double)r->mem.peak[AA_MEM_ACTS]};
  for (int a = 0; a < AA_AXES; a++)
    mine[RF_COORD + a] = r->coord[a];
  for (int k = 0; k < AA_TIME_KINDS; k++) mine[RF_TIME + k] = r->time_ms[k];
  double *all = malloc(sizeof mine * world);
  if (!all) return aa_error(AA_ENOMEM, "out of memory");
  int rc = all_gather_host(w, t->ops, mine, all, sizeof mine);
  if (rc) {
    free(all);
    return aa_error_wrap(rc, "gathering every rank's figures");
  }
  *out = all;
  *n = world;
  return 0;
}

/* One line of accounted memory by kind. */
static void print_memory(FILE *f, const aa_mem_t *mem) {
  char b[32];
  fprintf(f, "memory:");
  for (int k = 0; k < AA_MEM_NKINDS; k++) fprintf(f, " %s %s,", aa_mem_kind_name(k), aa_mem_fmt(b, mem->peak[k]));
  fprintf(f, " peak total %s\n", aa_mem_fmt(b, mem->peak_total));
}

/* The rows and bytes the model's expert dispatchers grew past their room. */
static int overflow_rows(const aa_gpt_t *m, size_t *bytes) {
  int rows = 0;
  *bytes = 0;
  for (int l = 0; m->dispatch && l < m->arch.n_layer * m->route_sets; l++) {
    rows += m->dispatch[l].over_rows;
    *bytes += (size_t)m->dispatch[l].over_rows * m->dispatch[l].row_floats * sizeof(float);
  }
  return rows;
}

/* The time the model's expert dispatchers spent in all-to-alls since the
 * last take (engine/moe_dispatch.h), reset. */
static double a2a_take(aa_gpt_t *m) {
  double s = 0;
  for (int l = 0; m->dispatch && l < m->arch.n_layer * m->route_sets; l++) {
    s += m->dispatch[l].seconds;
    m->dispatch[l].seconds = 0;
  }
  return s;
}

/* Moves the all-to-all time of a pass that took dt seconds (forward set:
 * a forward) from its kind to the all-to-all's. */
static void a2a_split(trainer_t *t, aa_time_kind_t kind, double dt, int forward) {
  const double a = a2a_take(t->model);
  t->step_time[kind] += dt - a;
  t->step_time[AA_TIME_ALL_TO_ALL] += a;
  if (forward) t->a2a_forward += a;
}

/* Adds a micro-batch's MoE statistics into the step's (first: the step's
 * first, which starts them). */
static void moe_stats_add(aa_moe_stats_t *step, const aa_moe_stats_t *mb, int first) {
  if (first) {
    *step = *mb;
    return;
  }
  if (mb->min_tokens < step->min_tokens) step->min_tokens = mb->min_tokens;
  if (mb->max_tokens > step->max_tokens) step->max_tokens = mb->max_tokens;
  step->dropped += mb->dropped;
}

/* The pipeline's part of a step (pp > 1): the plan's operations in its
 * order, micro-batch mb's tokens at step_inputs/step_targets + mb B T;
 * then the tied embedding's two copies get the sum of their gradients,
 * and every stage the mean loss: the last one's token losses plus every
 * stage's MoE aux and z losses (the statistics in t->moe are the rank's
 * own MoE blocks'). Time
 * goes to the kinds of train.h: a send's to the pipeline's communication;
 * a receive's is left to the bubble, the step's remainder. */
static int pipeline_step(trainer_t *t, double scale, float *loss) {
  aa_gpt_t *m = t->model;
  aa_comm_t *pg = t->mesh.group[AA_AXIS_PIPELINE];
  const int N = m->B * m->T, S = t->pp * t->place.vpp, nops = t->plan.n_ops[t->stage];
  const aa_pp_op_t *ops = t->plan.ops[t->stage];
  const size_t n = aa_gpt_stream_numel(m);
  const float grad_scale = (float)(scale / t->accum);
  double sum = 0;
  int rc = 0, i, forwards = 0;
  /* A receive's time is not counted here: the bubble is what the step
   * spends in none of the kinds (aa_train), and it is mostly receives. */
  static const int kind_of[] = {[AA_PP_RECV_ACT] = -1, [AA_PP_FORWARD] = AA_TIME_FORWARD,
                                [AA_PP_SEND_ACT] = AA_TIME_PIPELINE_COMM, [AA_PP_RECV_GRAD] = -1,
                                [AA_PP_BACKWARD] = AA_TIME_BACKWARD, [AA_PP_SEND_GRAD] = AA_TIME_PIPELINE_COMM};
  for (i = 0; i < nops && !rc; i++) {
    const aa_pp_op_t *o = &ops[i];
    double t0 = aa_now();
    float l = 0;
    switch (o->kind) {
    case AA_PP_RECV_ACT: rc = aa_comm_recv(pg, aa_gpt_stage_input(m, o->in), n, t->strat.amp, o->peer); break;
    case AA_PP_FORWARD:
      rc = aa_gpt_stage_forward(m, o->chunk, o->slot, o->in, t->step_inputs + (size_t)o->mb * N,
                                t->step_targets + (size_t)o->mb * N, 1, grad_scale, &l);
      /* The last chunk's loss has its MoE blocks' aux and z losses in it;
       * every other chunk adds its own (0 for a dense model). */
      sum += o->chunk * t->pp + t->stage == S - 1 ? l : m->moe_loss;
      if (!rc && m->arch.moe.experts) moe_stats_add(&t->moe, &m->moe_stats, !forwards++);
      break;
    case AA_PP_SEND_ACT: rc = aa_comm_send(pg, aa_gpt_send_buf(m), n, t->strat.amp, o->peer); break;
    case AA_PP_RECV_GRAD: rc = aa_comm_recv(pg, aa_gpt_grad_buf(m, o->gin), n, AA_F32, o->peer); break;
    case AA_PP_BACKWARD: rc = aa_gpt_stage_backward(m, o->chunk, o->slot, o->in, o->gin); break;
    case AA_PP_SEND_GRAD: rc = aa_comm_send(pg, aa_gpt_stage_dinput(m), n, AA_F32, o->peer); break;
    }
    if (kind_of[o->kind] >= 0)
      a2a_split(t, (aa_time_kind_t)kind_of[o->kind], aa_now() - t0, o->kind == AA_PP_FORWARD);
  }
  if (rc) {
    static const char *const what[] = {"receiving the input", "forward", "sending the output",
                                       "receiving the gradient", "backward", "sending the gradient"};
    const aa_pp_op_t *o = &ops[i - 1];
    return aa_error_wrap(rc, "pipeline stage %d: %s of micro-batch %d (chunk %d)", t->stage, what[o->kind], o->mb,
                         o->chunk);
  }
  double t0 = aa_now();
  if (t->embed && aa_comm_world(t->embed) > 1 && !t->lora) { /* LoRA: the embedding is frozen */
    size_t off, cnt;
    aa_gpt_unit(m, 0, &off, &cnt);
    float *g = (float *)m->grads.data + off;
    if ((rc = m->ops->sync()) || (rc = aa_comm_all_reduce(t->embed, g, g, cnt, AA_F32, AA_COMM_SUM)))
      return aa_error_wrap(rc, "summing the tied embedding's gradients of the first and last stage");
  }
  *loss = (float)(sum / t->accum);
  rc = aa_gpt_pipeline_sum(m, loss, 1);
  t->step_time[AA_TIME_PIPELINE_COMM] += aa_now() - t0;
  return rc;
}

/* The first and last pipeline stage hold the tied wte|wpe each: they get
 * the same gradients and updates, so they must be the same bits. Checked
 * at the end of a run (a 64-bit hash of each copy, exchanged through the
 * embedding group), so a drift is an error rather than a silent fork of
 * the model. A collective over the embedding group; nothing elsewhere. */
static int check_tied_copies(trainer_t *t) {
  if (!t->embed || aa_comm_world(t->embed) < 2) return 0;
  aa_gpt_t *m = t->model;
  size_t off, n;
  aa_gpt_unit(m, 0, &off, &n);
  /* What the forward reads: the fp32 parameters, or under amp with
   * sharded masters the 16-bit copy. */
  const aa_flatbuf_t *b = m->params.data ? &m->params : &m->params16;
  size_t es = aa_dtype_size(b->dtype), bytes = n * es;
  unsigned char *host = malloc(bytes ? bytes : 1);
  if (!host) return aa_error(AA_ENOMEM, "out of memory");
  int rc = m->ops->download(host, (const char *)b->data + off * es, bytes);
  uint64_t h = rc ? 0 : aa_fnv1a(AA_FNV_INIT, host, bytes), all[2] = {0, 0};
  free(host);
  if (!rc) rc = all_gather_host(t->embed, m->ops, &h, all, sizeof h);
  if (rc) return aa_error_wrap(rc, "comparing the tied embedding's copies");
  if (all[0] != all[1])
    return aa_error(AA_EINTERNAL, "the tied embedding's copies on the first and last pipeline stage differ (hashes "
                                  "%016llx and %016llx)", (unsigned long long)all[0], (unsigned long long)all[1]);
  fprintf(t->log, "tied embedding: the first and last stage's copies are identical (%zu parameters)\n", n);
  return 0;
}

/* The step's MoE statistics over every rank of the world (a collective:
 * every rank calls it at the same steps): the fewest and most tokens an
 * expert got in any rank's micro-batch, the drops summed. Each value goes
 * as two floats (its low and high 16 bits, exact) in the rank's own slot
 * of a sum, which is a gather. A rank that routed nothing (min_tokens < 0:
 * a pipeline stage with no MoE block) is left out of the min. *over: the
 * most local rows any rank's dispatchers hold past sizes.h's room. */
static int moe_stats_world(trainer_t *t, aa_moe_stats_t *out, int *over) {
  const int n = aa_comm_world(t->world_group), me = aa_comm_rank(t->world_group);
  float *v = calloc((size_t)n * 8, sizeof(float));
  if (!v) return aa_error(AA_ENOMEM, "out of memory");
  size_t bytes;
  const int mine[4] = {t->moe.min_tokens, t->moe.max_tokens, t->moe.dropped, overflow_rows(t->model, &bytes)};
  for (int i = 0; i < 4; i++) {
    const unsigned u = (unsigned)mine[i]; /* -1 (none) travels as 0xffffffff */
    v[8 * me + 2 * i] = (float)(u & 0xffff);
    v[8 * me + 2 * i + 1] = (float)(u >> 16);
  }
  int rc = n > 1 ? aa_comm_all_reduce(t->world_group, v, v, (size_t)n * 8, AA_F32, AA_COMM_SUM) : 0;
  *out = (aa_moe_stats_t){.min_tokens = -1};
  *over = 0;
  for (int r = 0; !rc && r < n; r++) {
    int x[4];
    for (int i = 0; i < 4; i++)
      x[i] = (int)((unsigned)v[8 * r + 2 * i] | (unsigned)v[8 * r + 2 * i + 1] << 16);
    if (x[0] >= 0 && (out->min_tokens < 0 || x[0] < out->min_tokens)) out->min_tokens = x[0];
    if (x[1] > out->max_tokens) out->max_tokens = x[1];
    out->dropped += x[2];
    if (x[3] > *over) *over = x[3];
  }
  free(v);
  return rc ? aa_error_wrap(rc, "summing the MoE statistics over the ranks") : 0;
}

/* One optimizer step: accum micro-batches of forward + backward with
 * gradients accumulated in fp32 (through the pipeline's schedule at pp >
 * 1), then the update. Sets *loss to the mean micro-batch loss and
 * *skipped when non-finite gradients skipped it. */
static int train_step(trainer_t *t, float lr, float *loss, float *norm, int *skipped) {
  aa_gpt_t *m = t->model;
  int fp16 = t->strat.amp == AA_F16, rc;
  double scale = fp16 ? t->scaler.scale : 1.0, sum = 0, *tm = t->step_time;
  memset(t->step_time, 0, sizeof t->step_time);
  t->a2a_forward = 0;
  a2a_take(m); /* an evaluation's all-to-alls are no step's */
  if (t->lora)
    aa_lora_zero_grad(&t->lopt, m);
  else
    aa_zero_zero_grad(&t->zero, m);
  loader_slice(t, &t->loader, 1);
  if (t->pp > 1) {
    const size_t N = (size_t)m->B * m->T;
    for (int k = 0; k < t->accum; k++)
      next_micro_batch(t, &t->loader, t->step_inputs + k * N, t->step_targets + k * N);
    loader_slice(t, &t->loader, 0);
    /* No gradient is reduced over the data group during the schedule. */
    t->zero.last_micro = 0;
    if ((rc = pipeline_step(t, scale, loss)) || (t->lora && (rc = aa_lora_reduce(&t->lopt, m, 1)))) return rc;
  } else {
    for (int k = 0; k < t->accum; k++) {
      float l;
      t->zero.last_micro = k == t->accum - 1;
      next_micro_batch(t, &t->loader, t->inputs, t->targets);
      double t0 = aa_now();
      if ((rc = aa_gpt_forward(m, t->inputs, t->targets, &l))) return rc;
      double t1 = aa_now();
      a2a_split(t, AA_TIME_FORWARD, t1 - t0, 1);
      moe_stats_add(&t->moe, &m->moe_stats, k == 0);
      if ((rc = aa_gpt_backward(m, (float)(scale / t->accum))) ||
          (t->lora && (rc = aa_lora_reduce(&t->lopt, m, k == t->accum - 1))))
        return rc;
      a2a_split(t, AA_TIME_BACKWARD, aa_now() - t1, 0);
      sum += l;
    }
    loader_slice(t, &t->loader, 0);
    *loss = (float)(sum / t->accum);
  }
  double t0 = aa_now();
  /* LoRA: the adapters' gradient was summed over the tensor group and
   * averaged over the data group by aa_lora_reduce; no ZeRO hooks. */
  if ((t->pp > 1 && !t->lora && (rc = aa_zero_reduce_grads(&t->zero, m))) || (rc = global_mean(t, loss)))
    return rc;
  int skip = fp16 || t->strat.skip_if_nonfinite;
  if ((rc = t->lora ? aa_lora_step(&t->lopt, m, &t->spec->train, lr, scale, skip, norm)
                    : aa_zero_step(&t->zero, m, &t->spec->train, lr, scale, skip, norm)) < 0)
    return rc;
  tm[AA_TIME_OPTIMIZER] += aa_now() - t0;
  *skipped = rc == 1;
  if (fp16) aa_loss_scaler_update(&t->scaler, *skipped);
  else t->scaler.skipped += *skipped;
  return 0;
}

int aa_train(const aa_model_spec_t *spec, const aa_train_opts_t *opts, aa_train_result_t *res) {
  trainer_t t = {.spec = spec, .opts = opts, .log = opts->log ? opts->log : stdout, .world = 1};
  aa_train_result_t r = {.val_loss = NAN};
  FILE *losses = NULL;
  /* A single process is a group of one: everything below runs it as it
   * runs a rank of a gang. */
  int rc = opts->comm ? 0 : aa_comm_self(&t.self);
  if (rc) goto cleanup;
  t.world_group = opts->comm ? opts->comm : t.self;
  /* Only rank 0 speaks; the others compute the same figures silently. A
   * dry run speaks only when given a log. */
  int speaks = aa_comm_rank(t.world_group) == 0;
  if ((!speaks || (opts->dryrun && !opts->log)) && !(t.log = t.devnull = fopen("/dev/null", "w"))) {
    rc = aa_error(AA_EIO, "/dev/null: cannot open: %s", strerror(errno));
    goto cleanup;
  }
  int threads = opts->threads > 0 ? opts->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  aa_ops_cpu()->set_threads(threads);
  aa_model_spec_t run_spec = *spec;
  if (opts->steps > 0) {
    run_spec.train.steps = opts->steps;
    if (run_spec.train.warmup_steps > opts->steps) run_spec.train.warmup_steps = opts->steps;
  }
  if (opts->checkpoint_every >= 0) run_spec.train.checkpoint_every = opts->checkpoint_every;
  if (opts->keep_last) run_spec.train.keep_last = opts->keep_last < 0 ? 0 : opts->keep_last;
  if (opts->weights_only) run_spec.train.weights_only = 1;
  t.spec = &run_spec;
  const aa_train_cfg_t *cfg = &run_spec.train;
  if ((rc = setup(&t))) goto cleanup;
  /* The losses file grows as training goes, so it cannot be swapped in by a
   * rename; it is opened without following a symlink instead. */
  if (opts->losses_path && speaks &&
      (rc = aa_file_open_write(opts->losses_path, opts->resume != NULL, 0666, &losses)))
    goto cleanup;
  aa_gpt_t *m = t.model;
  /* Tokens per step of the whole group. */
  double step_tokens = (double)m->B * m->T * t.accum * t.world;
  int B = m->B, T = m->T, log_every = opts->log_every > 0 ? opts->log_every : 1;
  char hash[17];
  aa_arch_hash(&spec->arch, hash);
  r.train_entropy = aa_shard_unigram_entropy(&t.train);
  /* The whole model's count; a tensor or pipeline rank holds its part. */
  const size_t whole = (size_t)aa_arch_param_count(&spec->arch);
  fprintf(t.log, "model %s (%s): %zu parameters, %d layers, d_model %d, %d heads, seq_len %d, vocab %d", spec->name,
          hash, whole, spec->arch.n_layer, spec->arch.d_model, spec->arch.n_head, T, spec->arch.vocab_size);
  if (m->n_params != whole) fprintf(t.log, "; rank 0 holds %zu", m->n_params);
  fprintf(t.log, "\n");
  fprintf(t.log, "data: %zu train tokens, %zu val tokens; unigram entropy %.4f nats\n", t.train.n_tokens,
          t.val.n_tokens, r.train_entropy);
  fputs(t.device_line, t.log);
  aa_strategy_key(&t.strat, r.key);
  fprintf(t.log, "strategy %s: batch %d x %d tokens as %d micro-batch%s of %d, %d threads, %d steps%s\n", r.key,
          cfg->global_batch, T, t.accum, t.accum == 1 ? "" : "es", B, threads, cfg->steps,
          t.state.step ? " (resumed)" : "");
  if (t.world > 1)
    fprintf(t.log, "data parallel: %d ranks (%s), ZeRO stage %d, each rank %d micro-batch%s per step\n", t.world,
            aa_comm_backend(t.comm), t.zero.stage, t.accum, t.accum == 1 ? "" : "es");
  if (t.pp > 1) {
    fprintf(t.log, "pipeline parallel: %d stages (%s), %s schedule, %d micro-batch%s a step, predicted bubble %.1f%%; blocks",
            t.pp, aa_comm_backend(t.mesh.group[AA_AXIS_PIPELINE]), aa_pp_schedule_name(t.strat.schedule), t.accum,
            t.accum == 1 ? "" : "es", 100 * aa_pp_bubble(t.strat.schedule, t.pp, t.place.vpp, t.accum));
    int bounds[AA_STRATEGY_STAGES_MAX + 1], S = aa_pp_stages(&t.strat);
    if (!aa_pp_bounds(&spec->arch, &t.strat, bounds))
      for (int k = 0; k < S; k++) fprintf(t.log, "%s [%d, %d)", k ? "," : "", bounds[k], bounds[k + 1]);
    fprintf(t.log, "\n");
  }
  if (t.strat.ep > 1)
    fprintf(t.log,
            "expert parallel: %d ranks an expert group (%s), each holding %d of the %d experts of every MoE "
            "layer; %d expert groups\n",
            t.strat.ep, aa_comm_backend(t.mesh.expert), spec->arch.moe.experts / t.strat.ep,
            spec->arch.moe.experts, t.world / t.strat.ep);
  if (m->tp > 1)
    fprintf(t.log, "tensor parallel: %d ranks (%s), each %d of %d heads, %d of %d MLP columns, %d of %d vocabulary rows%s\n",
            m->tp, aa_comm_backend(t.mesh.group[AA_AXIS_TENSOR]), m->d.NH, spec->arch.n_head, m->d.F, spec->arch.d_ff,
            m->d.Vl, spec->arch.vocab_size, m->sp ? "; sequence parallel" : "");
  int first = t.state.step, timed = 0, untimed = opts->dryrun ? opts->untimed_steps : 1;
  int moe_logged = 0; /* steps with a `moe` line, whose max_tokens r.moe_max_tokens averages */
  for (int step = first; step < cfg->steps; step++) {
    double t0 = aa_now(), scale_before = t.scaler.scale;
    float loss, norm = 0, lr = aa_lr_at(cfg, step);
    int skipped;
    if ((rc = train_step(&t, lr, &loss, &norm, &skipped))) {
      /* A failing peer or backend is not a divergence: only a non-finite
       * gradient norm is. */
      rc = aa_error_wrap(rc, "step %d%s", step + 1, isfinite(norm) ? "" : ": training diverged");
      goto cleanup;
    }
    double dt = aa_now() - t0, *tm = t.step_time, busy = 0;
    /* The bubble is the rest of the step: mostly receives waiting for a
     * stage still computing. */
    for (int k = 0; k < AA_TIME_KINDS; k++)
      if (k != AA_TIME_BUBBLE) busy += tm[k];
    tm[AA_TIME_BUBBLE] = dt > busy ? dt - busy : 0;
    /* The first step of a process warms caches and thread pools; it is
     * timed only when it is the only one. A dry run says how many to skip. */
    int warm = step - first < untimed;
    if (!warm || (!opts->dryrun && step + 1 == cfg->steps)) {
      t.step_times[timed++] = dt;
      for (int k = 0; k < AA_TIME_KINDS; k++) t.time_sum[k] += tm[k];
      t.a2a_forward_sum += t.a2a_forward;
    }
    t.state.step = step + 1;
    r.final_loss = loss;
    r.steps_done++;
    if (losses) fprintf(losses, "%d %.9g\n", step + 1, loss);
    if (step == first) print_memory(t.log, &t.mem);
    if (skipped)
      fprintf(t.log, "step %5d/%d | loss %.4f | skipped: non-finite gradients (%lld skipped so far)\n", step + 1,
              cfg->steps, loss, (long long)t.scaler.skipped);
    if (skipped && t.strat.amp == AA_F16 && t.scaler.scale != scale_before)
      fprintf(t.log, "loss scale %g -> %g\n", scale_before, t.scaler.scale);
    if (step == first || step + 1 == cfg->steps || (step + 1) % log_every == 0)
    {
      fprintf(t.log, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms\n", step + 1,
              cfg->steps, loss, lr, norm, step_tokens / dt, dt * 1e3);
      fprintf(t.log,
              "time %5d/%d | rank 0: forward %.1f, backward %.1f, optimizer %.1f, pipeline comm %.1f, bubble "
              "%.1f, "
              "all-to-all %.1f ms\n",
              step + 1, cfg->steps, tm[AA_TIME_FORWARD] * 1e3, tm[AA_TIME_BACKWARD] * 1e3,
              tm[AA_TIME_OPTIMIZER] * 1e3, tm[AA_TIME_PIPELINE_COMM] * 1e3, tm[AA_TIME_BUBBLE] * 1e3,
              tm[AA_TIME_ALL_TO_ALL] * 1e3);
      aa_moe_stats_t ms = {0};
      int over = 0;
      if (spec->arch.moe.experts && (rc = moe_stats_world(&t, &ms, &over))) goto cleanup;
      if (spec->arch.moe.experts) {
        r.moe_max_tokens += (ms.max_tokens - r.moe_max_tokens) / ++moe_logged;
        fprintf(t.log,
                "moe  %5d/%d | %d rank%s: tokens per expert min %d, max %d (over %d experts x %d MoE layers, "
                "per micro-batch of %d tokens a %s) | dropped %d | grown past the room: %d rows\n",
                step + 1, cfg->steps, aa_comm_world(t.world_group),
                aa_comm_world(t.world_group) > 1 ? "s" : "", ms.min_tokens, ms.max_tokens,
                spec->arch.moe.experts, aa_arch_moe_layers(&spec->arch), m->B * m->T * m->cp,
                m->cp > 1 ? "context group" : "rank", ms.dropped, over);
      }
    }
    int last = step + 1 == cfg->steps;
    if (t.val.n_tokens && (last || (cfg->eval_every && (step + 1) % cfg->eval_every == 0))) {
      if ((rc = evaluate(&t, &r.val_loss))) goto cleanup;
      fprintf(t.log, "val  %5d/%d | val loss %.4f | unigram entropy %.4f\n", step + 1, cfg->steps, r.val_loss,
              r.train_entropy);
    }
    if (!opts->dryrun && cfg->checkpoint_every && (step + 1) % cfg->checkpoint_every == 0 && !last) {
      char name[64];
      snprintf(name, sizeof name, "step_%06d.ckpt", step + 1);
      if ((rc = save_checkpoint(&t, name))) goto cleanup;
    }
    fflush(t.log);
    if (opts->on_step) {
      aa_train_step_info_t info = {.step = step + 1, .total = cfg->steps, .loss = loss,
                                   .tokens_per_s = step_tokens / dt, .step_ms = dt * 1e3,
                                   .phase = !opts->dryrun ? "train" : warm ? "warmup" : "measure"};
      for (int k = 0; k < AA_TIME_KINDS; k++) info.time_ms[k] = tm[k] * 1e3;
      opts->on_step(&info, opts->step_data);
    }
  }
  if (timed) {
    qsort(t.step_times, timed, sizeof(double), cmp_double);
    double med = timed % 2 ? t.step_times[timed / 2] : 0.5 * (t.step_times[timed / 2 - 1] + t.step_times[timed / 2]);
    r.step_ms_median = med * 1e3;
    r.step_ms_spread = (t.step_times[timed - 1] - t.step_times[0]) * 1e3;
    r.tokens_per_s = step_tokens / med;
    for (int k = 0; k < AA_TIME_KINDS; k++) r.time_ms[k] = t.time_sum[k] / timed * 1e3;
    r.all_to_all_forward_ms = t.a2a_forward_sum / timed * 1e3;
  }
  r.rank = aa_comm_rank(t.world_group);
  memcpy(r.coord, t.mesh.at.coord, sizeof r.coord);
  r.skipped_steps = t.scaler.skipped;
  r.loss_scale = t.strat.amp == AA_F16 ? t.scaler.scale : 0;
  r.mem = t.mem;
  r.moe_overflow_rows = overflow_rows(t.model, &r.moe_overflow_bytes);
  r.peak_flops = t.peak_flops;
  if ((rc = check_tied_copies(&t))) goto cleanup;
  if (!opts->dryrun && (rc = save_checkpoint(&t, "final.ckpt"))) goto cleanup;
  fprintf(t.log, "done: %d steps, final loss %.4f", r.steps_done, r.final_loss);
  if (!isnan(r.val_loss)) fprintf(t.log, ", val loss %.4f", r.val_loss);
  fprintf(t.log, ", %.0f tok/s (median step %.1f ms)", r.tokens_per_s, r.step_ms_median);
  if (r.skipped_steps) fprintf(t.log, ", %lld skipped steps", (long long)r.skipped_steps);
  fprintf(t.log, "\n");
  if (t.cuda_device >= 0 && t.peak_flops > 0)
    fprintf(t.log, "mfu %.2f%% (%.3g FLOP/token x %.0f tok/s of %.1f TFLOP/s peak bf16)\n",
            100.0 * r.tokens_per_s * flops_per_token(&t) / t.peak_flops, flops_per_token(&t), r.tokens_per_s,
            t.peak_flops / 1e12);
  if (opts->summary_json) {
    /* Every rank takes part in the gather; rank 0 writes. */
    double *ranks = NULL;
    int nranks = 0;
    if ((rc = gather_ranks(&t, &r, &ranks, &nranks))) goto cleanup;
    if (speaks) rc = write_summary(&t, &r, threads, ranks, nranks);
    free(ranks);
    if (rc) goto cleanup;
  }
  if (res) *res = r;
cleanup:
  if (losses && fclose(losses) && !rc) rc = aa_error(AA_EIO, "%s: write failed", opts->losses_path);
  /* A rank process may end with _exit, which flushes nothing. */
  fflush(t.log);
  trainer_free(&t);
  return rc;
}
