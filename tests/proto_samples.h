/* One message of each type with every field populated (optional ones too),
 * shared by tests/test_proto.c and the fuzzer's seed corpus. Strings are
 * borrowed literals: never aa_msg_free a sample. */
#ifndef AA_PROTO_SAMPLES_H
#define AA_PROTO_SAMPLES_H

#include <string.h>

#include "proto/msg.h"

static char *aa_sample_exclude[] = {"zero3", "pipeline"};
static char *aa_sample_include[] = {"zero1"};

static void aa_sample_msg(aa_msg_type_t t, aa_msg_t *m) {
  memset(m, 0, sizeof *m);
  m->type = t;
  m->id = 1000 + (uint64_t)t;
  switch (t) {
  case AA_MSG_HELLO:
    m->hello.role = AA_PROTO_ROLE_EXECUTOR;
    m->hello.has_device = true;
    m->hello.device = (aa_msg_device_t){.kind = AA_PROTO_DEV_CUDA,
                                        .name = "NVIDIA H200",
                                        .index = 3,
                                        .memory = 150754820096ULL,
                                        .host = "node-7",
                                        .pid = 4242,
                                        .sm_count = 132,
                                        .cc_major = 9,
                                        .cc_minor = 1,
                                        .peak_bf16_flops = 989.4e12};
    m->hello.token = "s3cret-token";
    break;
  case AA_MSG_WELCOME: m->welcome = (aa_msg_welcome_t){.peer_id = 17, .heartbeat_ms = 2000}; break;
  case AA_MSG_HEARTBEAT: m->heartbeat.job = 55; break;
  case AA_MSG_BYE: m->bye.reason = "shutting down (SIGTERM)"; break;
  case AA_MSG_SUBMIT:
    m->submit = (aa_msg_submit_t){.model = "{\"model\": {\"n_layer\": 2}}",
                                  .wait = true,
                                  .train = true,
                                  .refresh = true,
                                  .time_limit_s = 600,
                                  .exclude = {.v = aa_sample_exclude, .n = 2},
                                  .max_dryruns = 12,
                                  .exhaustive = true,
                                  .out_dir = "/home/user/runs/tiny",
                                  .include = {.v = aa_sample_include, .n = 1},
                                  .from = "{\"format\": \"autoaccel-strategy\", \"dp\": 2}"};
    break;
  case AA_MSG_ACK: m->ack.job = 56; break;
  case AA_MSG_JOB:
    m->job = (aa_msg_job_t){.job = 56,
                            .run = 9001,
                            .kind = AA_PROTO_JOB_TRAIN,
                            .model = "{\"model\": {\"n_layer\": 2}}",
                            .strategy = "{\"format\": \"autoaccel-strategy\"}",
                            .warmup_steps = 3,
                            .measured_steps = 10,
                            .time_limit_s = 120,
                            .memory_limit = 8ULL << 30,
                            .rank = 1,
                            .world = 4,
                            .rendezvous = "/aa-gang-9001",
                            .out_dir = "/home/user/runs/tiny",
                            .has_owner = true,
                            .owner = 0}; /* root: a value that "0 = absent" would lose */
    break;
  case AA_MSG_PROGRESS:
    m->progress = (aa_msg_progress_t){.job = 56,
                                      .run = 9001,
                                      .step = 7,
                                      .total = 13,
                                      .tokens_per_s = 123456.5,
                                      .loss = 3.25,
                                      .phase = "measure",
                                      .key = "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4",
                                      .index = 3,
                                      .count = 45};
    break;
  case AA_MSG_RESULT:
    m->result = (aa_msg_result_t){
        .job = 56,
        .run = 9001,
        .status = AA_PROTO_RUN_OOM,
        .tokens_per_s = 98765.25,
        .step_ms_median = 41.5,
        .step_ms_spread = 2.75,
        .peak = {.params = 1, .grads = 2, .optim = 3, .acts = 4, .workspace = 5, .total = 15},
        .has_final_loss = true,
        .final_loss = 2.5,
        .error = "out of memory: acts",
        .key = "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4",
        .inputs = true,
        .rank = 7,
        .coord[AA_AXIS_DATA] = 1,
        .coord[AA_AXIS_TENSOR] = 1,
        .coord[AA_AXIS_PIPELINE] = 1,
        .has_times = true,
        .times = {.ms = {12.5, 25.25, 3.0, 0.75, 0.0, 4.5}},
        .has_moe_max_tokens = true,
        .moe_max_tokens = 37.5};
    break;
  case AA_MSG_CANCEL: m->cancel.job = 56; break;
  case AA_MSG_ABORT: m->abort = (aa_msg_abort_t){.job = 56, .run = 9001, .reason = "rank 2 crashed"}; break;
  case AA_MSG_STATUS: m->status.job = 56; break;
  case AA_MSG_QUERY:
    m->query = (aa_msg_query_t){.what = "runs", .args = "{\"model\": \"f75588f44838cacd\"}"};
    break;
  case AA_MSG_REPLY: m->reply.json = "{\"executors\": []}"; break;
  case AA_MSG_ERROR: m->error = (aa_msg_error_t){.code = AA_EFORMAT, .message = "hello.role: bad"}; break;
  case AA_MSG_KV_SET:
    m->kv_set = (aa_msg_kv_t){
        .run = 9001, .key = "aa-j56r9001-x/rank/1", .value = {.p = (void *)"10.0.0.7:41000\0\xff", .n = 16}};
    break;
  case AA_MSG_KV_GET: m->kv_get = (aa_msg_kv_t){.run = 9001, .key = "aa-j56r9001-x/rank/0"}; break;
  case AA_MSG_KV_VALUE:
    m->kv_value = (aa_msg_kv_t){
        .run = 9001, .key = "aa-j56r9001-x/rank/0", .value = {.p = (void *)"10.0.0.5:41000", .n = 14}};
    break;
  case AA_MSG_CALIB_IMPORT:
    m->calib_import = (aa_msg_calib_import_t){
        .json = "{\"format\":\"autoaccel-calibration\",\"version\":1,\"calibrations\":[]}", .force = true};
    break;
  default: break;
  }
}

#endif
