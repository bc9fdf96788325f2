/* The seeds' own words, as written: every strategy example and option the
 * seed pages (/work/shared/seeds/, kept in the repository's issue 34 and
 * docs/strategy-format.md "Seed names") show, read by the strategy parser.
 * Each is either accepted with its meaning (the parsed strategy's fields,
 * through its key and the fields the key leaves out) or refused with an
 * error code and a message that names why and what to use instead.
 *
 * The pages, and the section each case comes from:
 *   ATorch    atorch-auto-accelerate-api.md, "Supported Optimization Methods"
 *             and its subsections (parallel_mode, amp_native, half, fp8,
 *             module_replace, zero1, zero2, fsdp, checkpoint,
 *             tensor_parallel, pipeline_parallel, mixed_parallel,
 *             ds_3d_parallel)
 *   Merak     merak-api-doc-source.md, "Merak.init" and "MerakArguments"
 *   Megatron  megatron-core-model-parallel-config.txt, ModelParallelConfig
 *   wrap      megatron-wrap-readme.txt, the config tree's parallel override
 * ATorch's Python tuples are JSON lists here, torch.bfloat16 a string. */
#include "aa_test.h"

#include "common/aa.h"
#include "common/spec.h"
#include "strategies/pipeline.h"
#include "strategies/strategy.h"

#include <string.h>

#define V1 "\"format\": \"autoaccel-strategy\", \"version\": 1"

/* An extra field check for what the key does not show. */
enum { X_NONE, X_SKIP_NONFINITE, X_LOSS_SCALE };

typedef struct {
  const char *seed; /* page and section */
  const char *json;
  int code;            /* 0: accepted */
  const char *key;     /* accepted: the key it must give */
  int extra;           /* accepted: a further field check */
  const char *why;     /* refused: the message names the reason ... */
  const char *instead; /* ... and what to give instead */
} seed_case_t;

/* An accepted case leaves the refusal's fields out, a refused one gives 0
 * for the key's and extra's: each entry names only what it checks. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const seed_case_t cases[] = {
    /* ---- ATorch: parallel_mode -------------------------------------------- */
    {"ATorch parallel_mode: the default, data parallel over the world", "[\"parallel_mode\"]", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"ATorch parallel_mode: ([(\"tensor\", 4), (\"pipeline\", 2), (\"data\", 2)], None)",
     "[[\"parallel_mode\", [[[\"tensor\", 4], [\"pipeline\", 2], [\"data\", 2]], null]]]", 0,
     "dp2.tp4.pp2.z0.fp32.ckpt-none.mb0.1f1b.order-tpd"},
    {"ATorch parallel_mode: ([(\"data\", 8)], None)", "[[\"parallel_mode\", [[[\"data\", 8]], null]]]", 0,
     "dp8.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"ATorch parallel_mode: a rank order",
     "[[\"parallel_mode\", [[[\"tensor\", 2], [\"data\", 2]], [3, 2, 1, 0]]]]", 0,
     "dp2.tp2.pp1.z0.fp32.ckpt-none.mb0.ranks-"},
    {"ATorch parallel_mode: the zero group", "[[\"parallel_mode\", [[\"zero\", 4]]]]", AA_EUNSUPPORTED, NULL,
     0, "hybrid sharding", "give its ranks to (\"data\", n) and add zero1, zero2 or fsdp"},
    {"ATorch Supported Optimization Methods: load_strategy = [\"paralle_mode\", ...] (its misspelling)",
     "[\"paralle_mode\", [\"amp_native\", \"bf16\"]]", AA_EUNSUPPORTED, NULL, 0, "a misspelling",
     "give \"parallel_mode\""},
    /* ---- ATorch: amp_native ----------------------------------------------- */
    {"ATorch Supported Optimization Methods: (\"amp_native\", \"bf16\")",
     "[\"parallel_mode\", [\"amp_native\", \"bf16\"]]", 0, "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0"},
    {"ATorch amp_native: the default {\"dtype\": torch.float16}", "[\"amp_native\"]", 0,
     "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
    {"ATorch amp_native: {\"dtype\": torch.bfloat16}", "[[\"amp_native\", {\"dtype\": \"torch.bfloat16\"}]]",
     0, "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0"},
    {"ATorch amp_native: {\"dtype\": torch.bfloat16, \"skip_if_nonfinite\": True}",
     "[[\"amp_native\", {\"dtype\": \"torch.bfloat16\", \"skip_if_nonfinite\": true}]]", 0,
     "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0", X_SKIP_NONFINITE},
    /* ---- ATorch: half, fp8, module_replace --------------------------------- */
    {"ATorch half: default \"fp16\"", "[\"half\"]", AA_EUNSUPPORTED, NULL, 0, "pure half precision",
     "[\"amp_native\", \"fp16\"] or [\"amp_native\", \"bf16\"]"},
    {"ATorch half: \"bf16\"", "[[\"half\", \"bf16\"]]", AA_EUNSUPPORTED, NULL, 0, "fp32 master weights",
     "[\"amp_native\", \"bf16\"]"},
    {"ATorch fp8: default config", "[[\"fp8\", {\"include\": null, \"exclude\": null, \"margin\": 0}]]",
     AA_EUNSUPPORTED, NULL, 0, "no fp8 GEMMs", "give [\"amp_native\", \"bf16\"]"},
    {"ATorch fp8: Example {\"include\": (\"layers\",)}",
     "[\"amp_native\", [\"fp8\", {\"include\": [\"layers\"]}]]", AA_EUNSUPPORTED, NULL, 0, "no fp8 GEMMs",
     "[\"amp_native\", \"bf16\"]"},
    {"ATorch module_replace: FlashAttention, FusedLayerNorm", "[\"amp_native\", \"module_replace\"]", 0,
     "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
    {"ATorch module_replace: register_replace_pair (Python modules)",
     "[[\"module_replace\", {\"my_optimized_module\": true}]]", AA_EUNSUPPORTED, NULL, 0,
     "option \"my_optimized_module\" is not supported", "supported options: "},
    /* ---- ATorch: zero1, zero2, fsdp --------------------------------------- */
    {"ATorch zero1: fairscale (default)", "[\"zero1\"]", 0, "dp1.tp1.pp1.z1.fp32.ckpt-none.mb0"},
    {"ATorch zero1: {\"use_ds_zero\": True}", "[[\"zero1\", {\"use_ds_zero\": true}]]", 0,
     "dp1.tp1.pp1.z1.fp32.ckpt-none.mb0"},
    {"ATorch zero2: FSDP SHARD_GRAD_OP (default)", "[\"zero2\"]", 0, "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
    {"ATorch zero2: {\"not_use_fsdp\": True}", "[[\"zero2\", {\"not_use_fsdp\": true}]]", 0,
     "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
    {"ATorch zero2: {\"use_ds_zero\": True}", "[[\"zero2\", {\"use_ds_zero\": true}]]", 0,
     "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
    {"ATorch fsdp: Recommended configurations, atorch_wrap_cls the main submodules (GPT-2)",
     "[[\"fsdp\", {\"forward_prefetch\": true, \"limit_all_gathers\": true, \"sync_module_states\": true, "
     "\"atorch_wrap_cls\": [\"GPT2Block\"]}]]",
     0, "dp1.tp1.pp1.z3.fp32.ckpt-none.mb0"},
    {"ATorch fsdp: Recommended configurations, atorch_wrap_cls the main submodules (Llama)",
     "[\"amp_native\", [\"fsdp\", {\"forward_prefetch\": true, \"limit_all_gathers\": true, "
     "\"sync_module_states\": true, \"atorch_wrap_cls\": [\"LlamaDecoderLayer\"]}]]",
     0, "dp1.tp1.pp1.z3.fp16.ckpt-none.mb0"},
    {"ATorch fsdp: Add {\"use_orig_params\": True}", "[[\"fsdp\", {\"use_orig_params\": true}]]", 0,
     "dp1.tp1.pp1.z3.fp32.ckpt-none.mb0"},
    {"ATorch fsdp: Try {\"fsdp_wrap_params_outmost\": True} for LORA",
     "[[\"fsdp\", {\"fsdp_wrap_params_outmost\": true}]]", AA_EUNSUPPORTED, NULL, 0, "LoRA",
     "every parameter"},
    {"ATorch fsdp: atorch_size_based_min_num_params",
     "[[\"fsdp\", {\"atorch_size_based_min_num_params\": 1000}]]", AA_EUNSUPPORTED, NULL, 0,
     "wraps modules by size", "transformer blocks"},
    {"ATorch fsdp: atorch_ignored_cls", "[[\"fsdp\", {\"atorch_ignored_cls\": [\"Embedding\"]}]]",
     AA_EUNSUPPORTED, NULL, 0, "unsharded", "shards every parameter"},
    {"ATorch fsdp: wrap_trainable_outmost", "[[\"fsdp\", {\"wrap_trainable_outmost\": true}]]",
     AA_EUNSUPPORTED, NULL, 0, "trainable parameters (LoRA)", "trains every parameter"},
    {"ATorch fsdp: all FSDP arguments, backward_prefetch",
     "[[\"fsdp\", {\"backward_prefetch\": \"BACKWARD_PRE\"}]]", 0, "dp1.tp1.pp1.z3.fp32.ckpt-none.mb0"},
    {"ATorch fsdp: all FSDP arguments, cpu_offload", "[[\"fsdp\", {\"cpu_offload\": true}]]", AA_EUNSUPPORTED,
     NULL, 0, "keeps every state on the device", "honoured: false"},
    /* ---- ATorch: checkpoint ----------------------------------------------- */
    {"ATorch checkpoint: (GPT2Attention, GPT2MLP)", "[[\"checkpoint\", [\"GPT2Attention\", \"GPT2MLP\"]]]",
     AA_EUNSUPPORTED, NULL, 0, "cannot checkpoint or shard attention alone", "honoured: GPT2Block"},
    {"ATorch checkpoint: {\"wrap_class\": (GPT2Attention, GPT2MLP), \"no_reentrant\": False}",
     "[[\"checkpoint\", {\"wrap_class\": [\"GPT2Attention\", \"GPT2MLP\"], \"no_reentrant\": false}]]",
     AA_EUNSUPPORTED, NULL, 0, "attention alone", "(the transformer block)"},
    {"ATorch checkpoint: the block with no_reentrant False (reentrant)",
     "[[\"checkpoint\", {\"wrap_class\": [\"GPT2Block\"], \"no_reentrant\": false}]]", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"ATorch checkpoint: the block with no_reentrant True",
     "[[\"checkpoint\", {\"wrap_class\": \"LlamaDecoderLayer\", \"no_reentrant\": true}]]", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"ATorch checkpoint: LlamaDecoderLayer (fp8's example names it)",
     "[[\"checkpoint\", [\"LlamaDecoderLayer\"]]]", 0, "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"ATorch checkpoint: Qwen2DecoderLayer", "[[\"checkpoint\", \"Qwen2DecoderLayer\"]]", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"ATorch checkpoint: MixtralDecoderLayer", "[[\"checkpoint\", \"MixtralDecoderLayer\"]]", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"ATorch checkpoint: LlamaMLP", "[[\"checkpoint\", [\"LlamaMLP\"]]]", AA_EUNSUPPORTED, NULL, 0,
     "checkpointing the MLP", "\"checkpoint\": \"selective\""},
    {"ATorch checkpoint: no_reentrant must be a boolean", "[[\"checkpoint\", {\"no_reentrant\": \"no\"}]]",
     AA_EINVAL, NULL, 0, "no_reentrant: must be true or false", "(got string)"},
    /* ---- ATorch: tensor_parallel, pipeline_parallel, mixed_parallel ------- */
    {"ATorch tensor_parallel: degree in parallel_mode, (\"tensor\", 8)",
     "[[\"parallel_mode\", [[\"tensor\", 8]]], \"tensor_parallel\"]", 0, "dp1.tp8.pp1.z0.fp32.ckpt-none.mb0"},
    {"ATorch tensor_parallel: no degree anywhere", "[\"tensor_parallel\"]", AA_EINVAL, NULL, 0,
     "needs its degree", "give (\"tensor\", n) in parallel_mode, or [\"tensor_parallel\", n]"},
    {"ATorch pipeline_parallel: degree in parallel_mode, (\"pipeline\", 4)",
     "[[\"parallel_mode\", [[\"pipeline\", 4]]], \"pipeline_parallel\"]", 0,
     "dp1.tp1.pp4.z0.fp32.ckpt-none.mb0.1f1b"},
    {"ATorch pipeline_parallel: {\"schedule\": \"GPipe\"} with no degree",
     "[[\"pipeline_parallel\", {\"schedule\": \"GPipe\"}]]", AA_EINVAL, NULL, 0, "needs its degree",
     "give (\"pipeline\", n) in parallel_mode"},
    {"ATorch pipeline_parallel: {\"schedule\": \"GPipe\"}",
     "[[\"parallel_mode\", [[\"pipeline\", 2]]], [\"pipeline_parallel\", {\"schedule\": \"GPipe\"}]]", 0,
     "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.gpipe"},
    {"ATorch pipeline_parallel: nstages, Interleaved1F1B by default",
     "[[\"parallel_mode\", [[\"pipeline\", 2]]], [\"pipeline_parallel\", {\"nstages\": 4}]]", 0,
     "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v2"},
    {"ATorch pipeline_parallel: chunks",
     "[[\"parallel_mode\", [[\"pipeline\", 2]]], [\"pipeline_parallel\", "
     "{\"chunks\": 4}]]",
     AA_EUNSUPPORTED, NULL, 0, "the micro-batch count follows from micro_batch",
     "\"micro_batch\": global_batch / (data * chunks)"},
    {"ATorch mixed_parallel: ([(\"tensor\", 8), (\"pipeline\", 2), (\"data\", 2)])",
     "[[\"parallel_mode\", [[\"tensor\", 8], [\"pipeline\", 2], [\"data\", 2]]], \"mixed_parallel\"]", 0,
     "dp2.tp8.pp2.z0.fp32.ckpt-none.mb0.1f1b.order-tpd"},
    {"ATorch mixed_parallel: no degrees", "[\"mixed_parallel\"]", AA_EINVAL, NULL, 0,
     "needs the tensor and pipeline degrees", "in parallel_mode"},
    {"ATorch ds_3d_parallel", "[\"ds_3d_parallel\"]", AA_EUNSUPPORTED, NULL, 0, "DeepSpeed's pipeline engine",
     "mixed_parallel (or tensor_parallel and pipeline_parallel)"},
    {"ATorch sequence_parallel (Ulysses)", "[\"sequence_parallel\"]", AA_EUNSUPPORTED, NULL, 0,
     "DeepSpeed-Ulysses", "[\"tensor_parallel\", {\"sequence_parallel\": true}]"},

    /* ---- Merak: Merak.init, MerakArguments --------------------------------- */
    {"Merak Merak.init(dp, tp, pp)", "{" V1 ", \"parallel\": {\"dp\": 2, \"tp\": 2, \"pp\": 2}}", 0,
     "dp2.tp2.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
    {"Merak train_schedule '1f1b'", "{" V1 ", \"parallel\": {\"pipeline\": 2}, \"train_schedule\": \"1f1b\"}",
     0, "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
    {"Merak train_schedule 'pre_recompute_1f1b'",
     "{" V1 ", \"parallel\": {\"pipeline\": 2}, \"train_schedule\": \"pre_recompute_1f1b\"}", AA_EUNSUPPORTED,
     NULL, 0, "recomputes ahead of the backward", "give \"1f1b\""},
    {"Merak train_schedule 'ds_default'", "{" V1 ", \"train_schedule\": \"ds_default\"}", AA_EUNSUPPORTED,
     NULL, 0, "DeepSpeed's own TrainSchedule", "give \"1f1b\""},
    {"Merak train_schedule 'last_no_recompute_1f1b'",
     "{" V1 ", \"train_schedule\": \"last_no_recompute_1f1b\"}", AA_EUNSUPPORTED, NULL, 0,
     "skips recomputation on the last stage", "give \"1f1b\""},
    {"Merak train_schedule 'shifted_critical_path'",
     "{" V1 ", \"train_schedule\": \"shifted_critical_path\"}", AA_EUNSUPPORTED, NULL, 0,
     "shifted critical-path", "give \"1f1b\""},
    {"Merak zero_stage (defaults to 1)", "{" V1 ", \"parallel\": {\"data\": 2}, \"zero_stage\": 1}", 0,
     "dp2.tp1.pp1.z1.fp32.ckpt-none.mb0"},
    {"Merak zero_stage given with zero", "{" V1 ", \"zero\": 1, \"zero_stage\": 2}", AA_EINVAL, NULL, 0,
     "gives zero again", "give one of them"},
    {"Merak partition_method 'uniform'",
     "{" V1 ", \"parallel\": {\"pipeline\": 2}, \"partition_method\": \"uniform\"}", 0,
     "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
    {"Merak partition_method 'uniform_floor'",
     "{" V1 ", \"parallel\": {\"pipeline\": 2}, \"partition_method\": \"uniform_floor\"}", 0,
     "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
    {"Merak partition_method 'parameters'",
     "{" V1 ", \"parallel\": {\"pipeline\": 2}, \"partition_method\": \"parameters\"}", 0,
     "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b.part-params"},
    {"Merak custom_partition [0, 6, 12, ...]",
     "{" V1 ", \"parallel\": {\"pipeline\": 3}, \"custom_partition\": [0, 6, 12, 18]}", 0,
     "dp1.tp1.pp3.z0.fp32.ckpt-none.mb0.1f1b.part-0-6-12-18"},
    {"Merak activation_checkpointing (defaults to True)", "{" V1 ", \"activation_checkpointing\": true}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"Merak activation_checkpointing False", "{" V1 ", \"activation_checkpointing\": false}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Merak checkpoint_num_layers (defaults to 1)",
     "{" V1 ", \"activation_checkpointing\": true, \"checkpoint_num_layers\": 1}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
    {"Merak checkpoint_num_layers 2", "{" V1 ", \"checkpoint\": \"full\", \"checkpoint_num_layers\": 2}",
     AA_EUNSUPPORTED, NULL, 0, "recomputes one block at a time", "give 1, and \"checkpoint_layers\": k"},
    {"Merak checkpoint_num_layers without checkpointing", "{" V1 ", \"checkpoint_num_layers\": 1}", AA_EINVAL,
     NULL, 0, "applies with activation checkpointing only", "give \"checkpoint\": \"full\""},
    {"Merak activation_checkpoint_ratio", "{" V1 ", \"activation_checkpoint_ratio\": 0.5}", AA_EUNSUPPORTED,
     NULL, 0, "a fraction of the first stage's layers", "\"checkpoint_layers\": k"},
    {"Merak sequence_parallel (when TMP > 1)",
     "{" V1 ", \"parallel\": {\"tp\": 2}, \"sequence_parallel\": true}", 0,
     "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb0"},
    {"Merak fp16 loss-scale knobs: loss_scale, initial_scale_power, loss_scale_window, hysteresis, "
     "min_loss_scale",
     "{" V1
     ", \"amp\": \"fp16\", \"loss_scale\": 0, \"initial_scale_power\": 32, \"loss_scale_window\": 500, "
     "\"hysteresis\": 3, \"min_loss_scale\": 2}",
     0, "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0", X_LOSS_SCALE},
    {"Merak loss_scale given twice", "{" V1 ", \"loss_scale\": 8, \"loss_scaling\": {\"loss_scale\": 4}}",
     AA_EINVAL, NULL, 0, "gives loss_scaling.loss_scale again", "give one of them"},
    {"Merak no_save_optim False (the default)", "{" V1 ", \"no_save_optim\": false}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Merak num_layers", "{" V1 ", \"num_layers\": 24}", AA_EUNSUPPORTED, NULL, 0,
     "belongs to the model spec", "give model.n_layer there"},
    {"Merak seq_length", "{" V1 ", \"seq_length\": 1024}", AA_EUNSUPPORTED, NULL, 0,
     "belongs to the model spec", "model.seq_len"},
    {"Merak split_method", "{" V1 ", \"split_method\": \"layer_split\"}", AA_EUNSUPPORTED, NULL, 0,
     "traced PyTorch graph", "give \"partition\""},
    {"Merak zero_allgather_bucket_size", "{" V1 ", \"zero_allgather_bucket_size\": 500000000}",
     AA_EUNSUPPORTED, NULL, 0, "communication buckets", "leave it out"},
    {"Merak tp_overlapping_level 0", "{" V1 ", \"tp_overlapping_level\": 0}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Merak tp_overlapping_level 2", "{" V1 ", \"tp_overlapping_level\": 2}", AA_EUNSUPPORTED, NULL, 0,
     "does not overlap tensor-parallel communication", "give 0 or leave it out"},
    {"Merak parallel_vocab", "{" V1 ", \"parallel\": {\"tp\": 2}, \"parallel_vocab\": true}", 0,
     "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0"},
    {"Merak parallel_vocab False", "{" V1 ", \"parallel_vocab\": false}", AA_EUNSUPPORTED, NULL, 0,
     "always splits the vocabulary", "give true or leave it out"},
    {"Merak wall_clock_breakdown", "{" V1 ", \"wall_clock_breakdown\": true}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Megatron cpu_offloading", "{" V1 ", \"cpu_offloading\": true}", AA_EUNSUPPORTED, NULL, 0,
     "keeps every activation and state on the device", "give false or leave it out"},
    {"Megatron tp_comm_overlap False", "{" V1 ", \"tp_comm_overlap\": false}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Merak save_total_limit", "{" V1 ", \"save_total_limit\": 3}", AA_EUNSUPPORTED, NULL, 0,
     "checkpoint retention is a training option", "autoaccel train --keep-last N"},
    {"Merak no_save_optim", "{" V1 ", \"no_save_optim\": true}", AA_EUNSUPPORTED, NULL, 0, "not a strategy",
     "autoaccel train --weights-only-checkpoints"},
    {"Merak no_save_rng", "{" V1 ", \"no_save_rng\": true}", AA_EUNSUPPORTED, NULL, 0, "not a strategy",
     "autoaccel train --weights-only-checkpoints"},

    /* ---- Megatron Core: ModelParallelConfig -------------------------------- */
    {"Megatron tensor_model_parallel_size, pipeline_model_parallel_size (flat)",
     "{" V1 ", \"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 2}", 0,
     "dp1.tp2.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
    {"Megatron tensor_model_parallel_size in parallel",
     "{" V1 ", \"parallel\": {\"tensor_model_parallel_size\": 4}}", 0, "dp1.tp4.pp1.z0.fp32.ckpt-none.mb0"},
    {"Megatron virtual_pipeline_model_parallel_size",
     "{" V1 ", \"pipeline_model_parallel_size\": 2, \"virtual_pipeline_model_parallel_size\": 2, "
     "\"schedule\": \"interleaved\", \"micro_batch\": 2}",
     0, "dp1.tp1.pp2.z0.fp32.ckpt-none.mb2.interleaved-v2"},
    {"Megatron sequence_parallel", "{" V1 ", \"tensor_model_parallel_size\": 2, \"sequence_parallel\": true}",
     0, "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb0"},
    {"Megatron context_parallel_size", "{" V1 ", \"context_parallel_size\": 2}", 0,
     "dp1.tp1.pp1.cp2.z0.fp32.ckpt-none.mb0"},
    {"Megatron expert_model_parallel_size",
     "{" V1 ", \"parallel\": {\"data\": 4}, \"expert_model_parallel_size\": 2}", 0,
     "dp4.tp1.pp1.z0.fp32.ckpt-none.mb0.ep2"},
    {"Megatron expert_tensor_parallel_size 1", "{" V1 ", \"expert_tensor_parallel_size\": 1}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Megatron expert_tensor_parallel_size = tp",
     "{" V1 ", \"tensor_model_parallel_size\": 2, "
     "\"expert_tensor_parallel_size\": 2}",
     0, "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0.etp2"},
    {"Megatron expert_tensor_parallel_size below tp",
     "{" V1 ", \"tensor_model_parallel_size\": 4, "
     "\"expert_tensor_parallel_size\": 2}",
     AA_EUNSUPPORTED, NULL, 0, "must be 1 or the tensor degree 4 (got 2)", "not over a subgroup"},
    {"Megatron expert_tensor_parallel_size and expert_tensor",
     "{" V1 ", \"tensor_model_parallel_size\": 2, "
     "\"parallel\": {\"expert_tensor\": 2, \"expert_tensor_parallel_size\": 2}}",
     AA_EINVAL, NULL, 0, "parallel.expert_tensor_parallel_size", "give one of them"},
    {"Megatron moe_extended_tp False", "{" V1 ", \"moe_extended_tp\": false}", 0,
     "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
    {"Megatron moe_extended_tp True", "{" V1 ", \"moe_extended_tp\": true}", AA_EUNSUPPORTED, NULL, 0,
     "deprecated since Megatron Core 0.10", "equal to the tensor degree"},
    {"Megatron hierarchical_context_parallel_sizes",
     "{" V1 ", \"hierarchical_context_parallel_sizes\": [2, 2]}", AA_EUNSUPPORTED, NULL, 0, "one ring",
     "give parallel.context alone"},
    {"Megatron fp16", "{" V1 ", \"fp16\": true}", 0, "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
    {"Megatron bf16", "{" V1 ", \"bf16\": true, \"fp16\": false}", 0, "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0"},
    {"Megatron fp16 and bf16", "{" V1 ", \"bf16\": true, \"fp16\": true}", AA_EINVAL, NULL, 0,
     "conflicts with fp16 true", "give one of them"},
    {"Megatron bf16 against amp", "{" V1 ", \"bf16\": true, \"amp\": \"fp16\"}", AA_EINVAL, NULL, 0,
     "conflicts with amp \"fp16\"", "give one of them"},
    {"Megatron tensor degree given twice",
     "{" V1 ", \"tensor_model_parallel_size\": 2, \"parallel\": "
     "{\"tensor\": 2}}",
     AA_EINVAL, NULL, 0, "gives parallel.tensor again", "give one of them"},

    /* ---- megatron-wrap: configs/nest/megatron_lm/model/parallel override --- */
    {"megatron-wrap parallel __override__ and train common micro_batch_size",
     "{" V1 ", \"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 2, "
     "\"context_parallel_size\": 2, \"micro_batch_size\": 4}",
     0, "dp1.tp2.pp2.cp2.z0.fp32.ckpt-none.mb4.1f1b"},
    {"megatron-wrap train common global_batch_size", "{" V1 ", \"global_batch_size\": 128}", AA_EUNSUPPORTED,
     NULL, 0, "belongs to the model spec", "train.global_batch"},
};
#pragma GCC diagnostic pop

AA_TEST(every_seed_example_is_accepted_with_its_meaning_or_refused_with_why) {
  int accepted = 0, refused = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const seed_case_t *k = &cases[i];
    aa_strategy_t s;
    memset(&s, 0x5a, sizeof s);
    int rc = aa_strategy_parse(&s, k->json, "seed.json");
    if (!k->code) {
      CHECK_MSG(rc == 0, "%s: %s: refused: %s", k->seed, k->json, aa_last_error());
      if (rc) continue;
      accepted++;
      char key[AA_STRATEGY_KEY_MAX];
      aa_strategy_key(&s, key);
      CHECK_MSG(!strncmp(key, k->key, strlen(k->key)), "%s: key %s, want %s", k->seed, key, k->key);
      if (k->extra == X_SKIP_NONFINITE) CHECK_MSG(s.skip_if_nonfinite == 1, "%s", k->seed);
      if (k->extra == X_LOSS_SCALE)
        CHECK_MSG(s.loss_scale.loss_scale == 0.0f && s.loss_scale.initial_scale_power == 32 &&
                      s.loss_scale.window == 500 && s.loss_scale.hysteresis == 3 &&
                      s.loss_scale.min_scale == 2.0f,
                  "%s: loss scaling not as given", k->seed);
      /* What is accepted is a strategy: written, it reads back the same. */
      char *text = NULL;
      aa_strategy_t back;
      CHECK_MSG(aa_strategy_to_json(&s, &text) == 0 && aa_strategy_parse(&back, text, "back.json") == 0,
                "%s: does not round-trip: %s", k->seed, aa_last_error());
      free(text);
    } else {
      CHECK_MSG(rc == k->code, "%s: %s: rc %d, want %d (%s)", k->seed, k->json, rc, k->code,
                rc ? aa_last_error() : "accepted");
      if (rc != k->code) continue;
      refused++;
      CHECK_MSG(strstr(aa_last_error(), "seed.json: ") == aa_last_error(), "%s: no origin: %s", k->seed,
                aa_last_error());
      CHECK_MSG(strstr(aa_last_error(), k->why), "%s: message \"%s\" lacks the reason \"%s\"", k->seed,
                aa_last_error(), k->why);
      CHECK_MSG(strstr(aa_last_error(), k->instead), "%s: message \"%s\" lacks what to give instead \"%s\"",
                k->seed, aa_last_error(), k->instead);
    }
  }
  fprintf(stderr, "  %d seed examples accepted with their meaning, %d refused with the reason\n", accepted,
          refused);
}

/* Merak's uniform_floor is autoaccel's uniform cut, block for block:
 * floor(n_layer / stages) each, the remainder one each to the stages
 * after the first (Merak's partition_uniform(use_ceil=False)), here on
 * 10 blocks over 4 stages: 2, 3, 3, 2. */
AA_TEST(merak_uniform_floor_cuts_as_merak_does) {
  aa_strategy_t s;
  CHECK(aa_strategy_parse(
            &s, "{" V1 ", \"parallel\": {\"pipeline\": 4}, \"partition_method\": \"uniform_floor\"}",
            "s.json") == 0);
  aa_model_spec_t spec;
  CHECK(
      aa_spec_parse(&spec,
                    "{\"name\": \"ten\", \"model\": {\"n_layer\": 10, \"n_head\": 4, \"d_model\": 128, "
                    "\"seq_len\": 64, \"vocab_size\": 256}, \"train\": {\"global_batch\": 16, \"steps\": 10, "
                    "\"lr\": 0.003}}",
                    NULL, "ten.json") == 0);
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  /* Merak: chunk = 10 // 4 = 2, remainder 2; parts[p] = 2p + min(2, max(0, p - 1)). */
  const int merak[] = {0, 2, 5, 8, 10};
  CHECK(aa_pp_bounds(&spec.arch, &s, bounds) == 0);
  for (int k = 0; k <= 4; k++)
    CHECK_MSG(bounds[k] == merak[k], "boundary %d: %d, Merak %d", k, bounds[k], merak[k]);
}

/* ATorch's parallel_mode rule, which `train` and `strategy check --world`
 * share (aa_strategy_rescale): "If set config as ([("tensor", 2),
 * ("pipeline", 2), ("data", 2)], None), it will be automatically changed to
 * ([("tensor", 2), ("pipeline", 2), ("data", 4)], None)" on 16 ranks; and
 * ([("data", 8)], None) becomes ([("data", 16)], None). */
AA_TEST(atorch_data_degree_fills_the_world) {
  aa_strategy_t s;
  char note[160];
  CHECK(aa_strategy_parse(
            &s, "[[\"parallel_mode\", [[[\"tensor\", 2], [\"pipeline\", 2], [\"data\", 2]], null]]]",
            "s.json") == 0);
  CHECK(aa_strategy_rescale(&s, 16, note, sizeof note) == 0);
  CHECK(s.degree[AA_AXIS_DATA] == 4 && s.degree[AA_AXIS_TENSOR] == 2 && s.degree[AA_AXIS_PIPELINE] == 2);
  CHECK_MSG(!strcmp(note, "dp2 rescaled to dp4 for 16 ranks"), "note: %s", note);
  CHECK(aa_strategy_parse(&s, "[[\"parallel_mode\", [[[\"data\", 8]], null]], \"zero1\"]", "s.json") == 0);
  CHECK(aa_strategy_rescale(&s, 16, note, sizeof note) == 0 && s.degree[AA_AXIS_DATA] == 16 && s.zero == 1);
  /* Already the world's size: nothing said, nothing changed. */
  CHECK(aa_strategy_rescale(&s, 16, note, sizeof note) == 0 && note[0] == '\0' &&
        s.degree[AA_AXIS_DATA] == 16);
  /* One rank left over: ZeRO has nothing to shard over. */
  CHECK(aa_strategy_rescale(&s, 1, note, sizeof note) == 0 && s.degree[AA_AXIS_DATA] == 1 && s.zero == 0);
  CHECK_MSG(strstr(note, "ZeRO dropped"), "note: %s", note);
  /* tp 2 x pp 2 does not divide 6 ranks: refused, s unchanged. */
  CHECK(aa_strategy_parse(&s, "[[\"parallel_mode\", {\"tensor\": 2, \"pipeline\": 2}]]", "s.json") == 0);
  CHECK_ERR(aa_strategy_rescale(&s, 6, note, sizeof note), AA_EINVAL,
            "strategy: tp * pp * cp = 4 does not divide the 6 ranks (the world size 6");
  CHECK(s.degree[AA_AXIS_DATA] == 1);
}

int main(void) {
  RUN(every_seed_example_is_accepted_with_its_meaning_or_refused_with_why);
  RUN(merak_uniform_floor_cuts_as_merak_does);
  RUN(atorch_data_degree_fills_the_world);
  return aa_test_summary();
}
