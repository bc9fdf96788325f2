/* The wire protocol (proto/): frames, the incremental frame reader, and the
 * strict encode/decode of every message. Negative cases start from a valid
 * sample message (tests/proto_samples.h), change one thing with msgpack-c,
 * and check the error code and that the message names the field and rule. */
#include "common/aa.h"
#include "proto/addr.h"
#include "proto/frame.h"
#include "proto/msg.h"
#include "tests/aa_test.h"
#include "tests/proto_samples.h"

#include <math.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- helpers ------------------------------------------------------------- */

/* Encodes m; the payload starts at frame + 4. */
static char *encode_ok(const aa_msg_t *m, size_t *len) {
  char *f = NULL;
  int rc = aa_msg_encode(m, &f, len);
  CHECK_MSG(rc == 0, "encode %s: %s", aa_msg_type_name(m->type), aa_last_error());
  return f;
}

static uint32_t header_len(const char *f) {
  const unsigned char *p = (const unsigned char *)f;
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

enum { V_DROP, V_U, V_I, V_D, V_F32, V_S, V_REP, V_NIL, V_TRUE, V_BIN, V_ARR, V_MAP0 };
typedef struct {
  int k;
  uint64_t u;
  int64_t i;
  double d;
  const char *s;
  size_t n;
} val_t;
#define DROP ((val_t){.k = V_DROP})
#define VU(x) ((val_t){.k = V_U, .u = (x)})
#define VI(x) ((val_t){.k = V_I, .i = (x)})
#define VD(x) ((val_t){.k = V_D, .d = (x)})
#define VF32(x) ((val_t){.k = V_F32, .d = (x)})
#define VS(x) ((val_t){.k = V_S, .s = (x), .n = strlen(x)})
#define VSN(x, len) ((val_t){.k = V_S, .s = (x), .n = (len)})
#define VREP(len) ((val_t){.k = V_REP, .n = (len)}) /* a string of len 'x' bytes */
#define VNIL ((val_t){.k = V_NIL})
#define VTRUE ((val_t){.k = V_TRUE})
#define VBIN ((val_t){.k = V_BIN})
#define VARR(nn) ((val_t){.k = V_ARR, .n = (nn)}) /* array of nn strings "m0", "m1", ... */
#define VMAP0 ((val_t){.k = V_MAP0})

static void put_val(msgpack_packer *pk, val_t v) {
  switch (v.k) {
  case V_U: msgpack_pack_uint64(pk, v.u); break;
  case V_I: msgpack_pack_int64(pk, v.i); break;
  case V_D: msgpack_pack_double(pk, v.d); break;
  case V_F32: msgpack_pack_float(pk, (float)v.d); break;
  case V_S: msgpack_pack_str_with_body(pk, v.s, v.n); break;
  case V_REP: {
    char *s = malloc(v.n ? v.n : 1);
    memset(s, 'x', v.n);
    msgpack_pack_str_with_body(pk, s, v.n);
    free(s);
    break;
  }
  case V_NIL: msgpack_pack_nil(pk); break;
  case V_TRUE: msgpack_pack_true(pk); break;
  case V_BIN: msgpack_pack_bin_with_body(pk, "ab", 2); break;
  case V_ARR:
    msgpack_pack_array(pk, v.n);
    for (size_t j = 0; j < v.n; j++) {
      char s[32];
      snprintf(s, sizeof s, "m%zu", j);
      msgpack_pack_str_with_body(pk, s, strlen(s));
    }
    break;
  case V_MAP0: msgpack_pack_map(pk, 0); break;
  }
}

/* Re-packs map o with the value at path ("a" or "a.b") replaced by v,
 * dropped (DROP) or added when absent. */
static void repack(msgpack_packer *pk, const msgpack_object *o, const char *path, val_t v) {
  const char *dot = strchr(path, '.');
  size_t seg = dot ? (size_t)(dot - path) : strlen(path);
  int found = -1;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object *k = &o->via.map.ptr[i].key;
    if (k->via.str.size == seg && memcmp(k->via.str.ptr, path, seg) == 0) found = (int)i;
  }
  size_t n = o->via.map.size;
  if (!dot && found < 0 && v.k != V_DROP) n++;
  if (!dot && found >= 0 && v.k == V_DROP) n--;
  msgpack_pack_map(pk, n);
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    if ((int)i != found) {
      msgpack_pack_object(pk, kv->key);
      msgpack_pack_object(pk, kv->val);
      continue;
    }
    if (!dot && v.k == V_DROP) continue;
    msgpack_pack_object(pk, kv->key);
    if (dot)
      repack(pk, &kv->val, dot + 1, v);
    else
      put_val(pk, v);
  }
  if (!dot && found < 0 && v.k != V_DROP) {
    msgpack_pack_str_with_body(pk, path, seg);
    put_val(pk, v);
  }
}

/* The payload of sample message t with one change (path NULL: none);
 * *len gets its size. free() the result. */
static char *modified(aa_msg_type_t t, const char *path, val_t v, size_t *len) {
  aa_msg_t m;
  size_t flen;
  aa_sample_msg(t, &m);
  char *f = encode_ok(&m, &flen);
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  msgpack_unpack_next(&up, f + 4, flen - 4, NULL);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (path)
    repack(&pk, &up.data, path, v);
  else
    msgpack_pack_object(&pk, up.data);
  msgpack_unpacked_destroy(&up);
  free(f);
  *len = sb.size;
  return msgpack_sbuffer_release(&sb);
}

/* Checks that rc is `code`, that *out was left untouched, and that the
 * last-error message contains every needle (a NULL-terminated list). */
static void check_error(int line, int rc, int code, const aa_msg_t *out, const char *const *needles) {
  aa_msg_t poison;
  memset(&poison, 0xAB, sizeof poison);
  CHECK_MSG(rc == code, "line %d: rc %d, want %d (%s)", line, rc, code, aa_last_error());
  CHECK_MSG(memcmp(out, &poison, sizeof poison) == 0, "line %d: *out written on failure", line);
  for (; *needles; needles++)
    CHECK_MSG(strstr(aa_last_error(), *needles), "line %d: message \"%s\" lacks \"%s\"", line,
              aa_last_error(), *needles);
}

static int decode_raw(const void *p, size_t n, aa_msg_t *out) {
  memset(out, 0xAB, sizeof *out);
  return aa_msg_decode(p, n, out);
}

/* EXPECT_REJECT(type, path, value, code, needle...) */
#define EXPECT_REJECT(t, path, v, code, ...)                                                                 \
  do {                                                                                                       \
    size_t n_;                                                                                               \
    char *p_ = modified(t, path, v, &n_);                                                                    \
    aa_msg_t m_;                                                                                             \
    int rc_ = decode_raw(p_, n_, &m_);                                                                       \
    check_error(__LINE__, rc_, code, &m_, (const char *const[]){__VA_ARGS__, NULL});                         \
    if (rc_ == 0) aa_msg_free(&m_);                                                                          \
    free(p_);                                                                                                \
  } while (0)

#define EXPECT_RAW_REJECT(bytes, len, code, ...)                                                             \
  do {                                                                                                       \
    aa_msg_t m_;                                                                                             \
    int rc_ = decode_raw(bytes, len, &m_);                                                                   \
    check_error(__LINE__, rc_, code, &m_, (const char *const[]){__VA_ARGS__, NULL});                         \
    if (rc_ == 0) aa_msg_free(&m_);                                                                          \
  } while (0)

/* Decodes the sample of type t changed at path; returns rc (0 frees). */
static int decode_modified(aa_msg_type_t t, const char *path, val_t v, aa_msg_t *out) {
  size_t n;
  char *p = modified(t, path, v, &n);
  int rc = aa_msg_decode(p, n, out);
  free(p);
  return rc;
}

/* --- round trips ----------------------------------------------------------- */

/* Fields a sample carries: each table field counted through the payload's
 * map size, which the encoder writes only for present fields. */
static size_t top_map_size(const char *payload, size_t len) {
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  msgpack_unpack_next(&up, payload, len, NULL);
  size_t n = up.data.type == MSGPACK_OBJECT_MAP ? up.data.via.map.size : 0;
  msgpack_unpacked_destroy(&up);
  return n;
}

AA_TEST(every_message_round_trips_byte_for_byte) {
  /* Keys per type with every field set: v, t, id + the type's fields. */
  static const size_t want_keys[AA_MSG_TYPE_COUNT] = {
      [AA_MSG_HELLO] = 3 + 3,        [AA_MSG_WELCOME] = 3 + 2,   [AA_MSG_HEARTBEAT] = 3 + 1,
      [AA_MSG_BYE] = 3 + 1,          [AA_MSG_SUBMIT] = 3 + 11,   [AA_MSG_ACK] = 3 + 1,
      [AA_MSG_JOB] = 3 + 14,         [AA_MSG_PROGRESS] = 3 + 10, [AA_MSG_RESULT] = 3 + 17,
      [AA_MSG_CANCEL] = 3 + 1,       [AA_MSG_ABORT] = 3 + 3,     [AA_MSG_STATUS] = 3 + 1,
      [AA_MSG_QUERY] = 3 + 2,        [AA_MSG_REPLY] = 3 + 1,     [AA_MSG_ERROR] = 3 + 2,
      [AA_MSG_KV_SET] = 3 + 3,       [AA_MSG_KV_GET] = 3 + 2,    [AA_MSG_KV_VALUE] = 3 + 3,
      [AA_MSG_CALIB_IMPORT] = 3 + 2,
  };
  for (int t = AA_MSG_NONE + 1; t < AA_MSG_TYPE_COUNT; t++) {
    aa_msg_t m, d;
    size_t len, len2;
    aa_sample_msg((aa_msg_type_t)t, &m);
    char *f = encode_ok(&m, &len);
    if (!f) continue;
    CHECK_MSG(header_len(f) == len - 4, "%s: header %u, payload %zu", aa_msg_type_name(m.type), header_len(f),
              len - 4);
    CHECK_MSG(top_map_size(f + 4, len - 4) == want_keys[t], "%s: %zu keys, want %zu",
              aa_msg_type_name(m.type), top_map_size(f + 4, len - 4), want_keys[t]);
    int rc = aa_msg_decode(f + 4, len - 4, &d);
    CHECK_MSG(rc == 0, "decode %s: %s", aa_msg_type_name(m.type), aa_last_error());
    if (rc == 0) {
      CHECK(d.type == m.type);
      CHECK(d.id == m.id);
      /* Every field came back: re-encoding gives the same bytes. */
      char *f2 = encode_ok(&d, &len2);
      CHECK_MSG(f2 && len2 == len && memcmp(f, f2, len) == 0, "%s: re-encoding differs",
                aa_msg_type_name(m.type));
      free(f2);
      aa_msg_free(&d);
      CHECK(d.type == AA_MSG_NONE);
    }
    free(f);
  }
}

/* Decodes the sample of type t unchanged. */
static int decode_sample(aa_msg_type_t t, aa_msg_t *d) { return decode_modified(t, NULL, DROP, d); }

AA_TEST(hello_device_fields_decode_as_sent) {
  aa_msg_t d;
  CHECK(decode_sample(AA_MSG_HELLO, &d) == 0);
  CHECK(d.hello.role == AA_PROTO_ROLE_EXECUTOR && d.hello.has_device);
  CHECK(d.hello.device.kind == AA_PROTO_DEV_CUDA);
  CHECK(strcmp(d.hello.device.name, "NVIDIA H200") == 0 && strcmp(d.hello.device.host, "node-7") == 0);
  CHECK(d.hello.device.index == 3 && d.hello.device.memory == 150754820096ULL && d.hello.device.pid == 4242);
  CHECK(d.hello.device.sm_count == 132 && d.hello.device.cc_major == 9 && d.hello.device.cc_minor == 1);
  CHECK(d.hello.device.peak_bf16_flops == 989.4e12);
  CHECK(strcmp(d.hello.token, "s3cret-token") == 0);
  aa_msg_free(&d);
  /* A GPU whose bf16 rate the executor does not know says nothing rather than guess. */
  CHECK(decode_modified(AA_MSG_HELLO, "device.peak_bf16_flops", DROP, &d) == 0);
  CHECK(d.hello.device.kind == AA_PROTO_DEV_CUDA && d.hello.device.peak_bf16_flops == 0);
  aa_msg_free(&d);
}

AA_TEST(job_and_result_fields_decode_as_sent) {
  aa_msg_t d;
  CHECK(decode_sample(AA_MSG_JOB, &d) == 0);
  CHECK(d.job.job == 56 && d.job.run == 9001 && d.job.kind == AA_PROTO_JOB_TRAIN);
  CHECK(strcmp(d.job.strategy, "{\"format\": \"autoaccel-strategy\"}") == 0);
  CHECK(d.job.warmup_steps == 3 && d.job.measured_steps == 10 && d.job.time_limit_s == 120);
  CHECK(d.job.memory_limit == 8ULL << 30 && d.job.has_owner && d.job.owner == 0);
  CHECK(d.job.rank == 1 && d.job.world == 4 && strcmp(d.job.rendezvous, "/aa-gang-9001") == 0);
  CHECK(strcmp(d.job.out_dir, "/home/user/runs/tiny") == 0);
  aa_msg_free(&d);
  CHECK(decode_sample(AA_MSG_PROGRESS, &d) == 0);
  CHECK(d.progress.index == 3 && d.progress.count == 45 &&
        strcmp(d.progress.key, "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4") == 0);
  aa_msg_free(&d);
  CHECK(decode_sample(AA_MSG_RESULT, &d) == 0);
  CHECK(d.result.status == AA_PROTO_RUN_OOM && d.result.tokens_per_s == 98765.25);
  CHECK(d.result.step_ms_median == 41.5 && d.result.step_ms_spread == 2.75);
  CHECK(d.result.peak.params == 1 && d.result.peak.workspace == 5 && d.result.peak.total == 15);
  CHECK(d.result.has_final_loss && d.result.final_loss == 2.5);
  CHECK(strcmp(d.result.error, "out of memory: acts") == 0);
  CHECK(strcmp(d.result.key, "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4") == 0);
  CHECK(d.result.inputs);
  CHECK(d.result.rank == 7 && d.result.coord[AA_AXIS_DATA] == 1 && d.result.coord[AA_AXIS_TENSOR] == 1 &&
        d.result.coord[AA_AXIS_PIPELINE] == 1);
  CHECK(!strcmp(aa_proto_time_kind_name(AA_PROTO_TIME_FORWARD), "forward") &&
        !strcmp(aa_proto_time_kind_name(AA_PROTO_TIME_PIPELINE_COMM), "pipeline_comm") &&
        !strcmp(aa_proto_time_kind_name(AA_PROTO_TIME_BUBBLE), "bubble") &&
        !strcmp(aa_proto_time_kind_name(AA_PROTO_TIME_ALL_TO_ALL), "all_to_all") &&
        !strcmp(aa_proto_time_kind_name(AA_PROTO_TIME_KINDS), "?"));
  CHECK(d.result.has_times && d.result.times.ms[AA_PROTO_TIME_FORWARD] == 12.5 &&
        d.result.times.ms[AA_PROTO_TIME_BACKWARD] == 25.25 &&
        d.result.times.ms[AA_PROTO_TIME_OPTIMIZER] == 3.0 &&
        d.result.times.ms[AA_PROTO_TIME_PIPELINE_COMM] == 0.75 &&
        d.result.times.ms[AA_PROTO_TIME_BUBBLE] == 0 && d.result.times.ms[AA_PROTO_TIME_ALL_TO_ALL] == 4.5);
  CHECK(d.result.has_moe_max_tokens && d.result.moe_max_tokens == 37.5);
  aa_msg_free(&d);
  CHECK(decode_sample(AA_MSG_SUBMIT, &d) == 0);
  CHECK(d.submit.wait && d.submit.train && d.submit.refresh && d.submit.time_limit_s == 600);
  CHECK(d.submit.exclude.n == 2 && strcmp(d.submit.exclude.v[1], "pipeline") == 0 &&
        d.submit.max_dryruns == 12);
  CHECK(d.submit.exhaustive && strcmp(d.submit.out_dir, "/home/user/runs/tiny") == 0);
  CHECK(d.submit.include.n == 1 && strcmp(d.submit.include.v[0], "zero1") == 0);
  CHECK(d.submit.from && strstr(d.submit.from, "\"dp\": 2"));
  aa_msg_free(&d);
}

/* Whether the n bytes at p hold the text s. */
static bool holds(const char *p, size_t n, const char *s) {
  const size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(p + i, s, k)) return true;
  return false;
}

AA_TEST(optional_fields_may_be_absent) {
  aa_msg_t m, d;
  size_t len;
  memset(&m, 0, sizeof m);
  m.type = AA_MSG_HELLO;
  m.hello.role = AA_PROTO_ROLE_CLIENT;
  char *f = encode_ok(&m, &len);
  CHECK(f && top_map_size(f + 4, len - 4) == 3); /* v, t, role */
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.id == 0 && !d.hello.has_device && !d.hello.token);
  aa_msg_free(&d);
  free(f);

  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.has_final_loss = false;
  m.result.final_loss = NAN; /* not looked at: absent */
  m.result.error = NULL;
  m.result.status = AA_PROTO_RUN_OK;
  m.result.inputs = false;
  f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && !d.result.has_final_loss && !d.result.error &&
        !d.result.inputs);
  aa_msg_free(&d);
  free(f);

  /* A dense model's result (an executor of any build): no all-to-all time
   * and no router figure, neither on the wire (so a planner of an earlier
   * build, which rejects unknown keys, still takes it) nor decoded. */
  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.times.ms[AA_PROTO_TIME_ALL_TO_ALL] = 0;
  m.result.has_moe_max_tokens = false;
  f = encode_ok(&m, &len);
  CHECK(f && !holds(f, len, "all_to_all") && !holds(f, len, "moe_max_tokens"));
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.result.has_times &&
        d.result.times.ms[AA_PROTO_TIME_ALL_TO_ALL] == 0 && !d.result.has_moe_max_tokens);
  aa_msg_free(&d);
  free(f);
  CHECK(decode_modified(AA_MSG_RESULT, "times.all_to_all", DROP, &d) == 0 && d.result.has_times &&
        d.result.times.ms[AA_PROTO_TIME_ALL_TO_ALL] == 0 &&
        d.result.times.ms[AA_PROTO_TIME_BACKWARD] == 25.25);
  aa_msg_free(&d);

  /* A rank that timed nothing (it failed first) sends no breakdown; rank 0
   * of a 1x1x1 mesh sends no coordinates, which read as 0. */
  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.has_times = false;
  m.result.rank = m.result.coord[AA_AXIS_DATA] = m.result.coord[AA_AXIS_TENSOR] =
      m.result.coord[AA_AXIS_PIPELINE] = 0;
  f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && !d.result.has_times && d.result.rank == 0 &&
        d.result.coord[AA_AXIS_DATA] == 0 && d.result.coord[AA_AXIS_PIPELINE] == 0 &&
        d.result.times.ms[AA_PROTO_TIME_FORWARD] == 0);
  aa_msg_free(&d);
  free(f);

  /* A cpu device carries no cuda fields; an idle heartbeat no job. */
  aa_sample_msg(AA_MSG_HELLO, &m);
  m.hello.device =
      (aa_msg_device_t){.kind = AA_PROTO_DEV_CPU, .name = "cpu", .memory = 1 << 30, .host = "h", .pid = 1};
  f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.hello.device.sm_count == 0);
  aa_msg_free(&d);
  free(f);
  CHECK(decode_modified(AA_MSG_HEARTBEAT, "job", DROP, &d) == 0 && d.heartbeat.job == 0);
  aa_msg_free(&d);
  /* Integers are accepted for numbers, float32 too. */
  CHECK(decode_modified(AA_MSG_PROGRESS, "loss", VU(3), &d) == 0 && d.progress.loss == 3.0);
  aa_msg_free(&d);
  CHECK(decode_modified(AA_MSG_PROGRESS, "tokens_per_s", VF32(0.5), &d) == 0 &&
        d.progress.tokens_per_s == 0.5);
  aa_msg_free(&d);
}

/* --- rejections ------------------------------------------------------------ */

AA_TEST(wrong_version_has_its_own_code_and_message) {
  EXPECT_REJECT(AA_MSG_HELLO, "v", VU(2), AA_EUNSUPPORTED, "wrong protocol version 2, this side speaks 1");
  EXPECT_REJECT(AA_MSG_HELLO, "v", VU(0), AA_EUNSUPPORTED, "wrong protocol version 0");
  EXPECT_REJECT(AA_MSG_HELLO, "v", VS("1"), AA_EFORMAT,
                "message.v: expected an unsigned integer, got a string");
  EXPECT_REJECT(AA_MSG_HELLO, "v", DROP, AA_EFORMAT, "missing protocol version \"v\"");
  /* The version is checked before the type: a v2 peer may have new types. */
  size_t n;
  char *p = modified(AA_MSG_HELLO, "v", VU(2), &n);
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  msgpack_unpack_next(&up, p, n, NULL);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  repack(&pk, &up.data, "t", VS("teleport"));
  EXPECT_RAW_REJECT(sb.data, sb.size, AA_EUNSUPPORTED, "wrong protocol version 2");
  msgpack_sbuffer_destroy(&sb);
  msgpack_unpacked_destroy(&up);
  free(p);
}

AA_TEST(unknown_or_missing_type_is_rejected) {
  EXPECT_REJECT(AA_MSG_HELLO, "t", VS("teleport"), AA_EFORMAT, "unknown message type \"teleport\"");
  EXPECT_REJECT(AA_MSG_HELLO, "t", VSN("he\x01\"llo", 7), AA_EFORMAT,
                "unknown message type \"he\\x01\\x22llo\"");
  EXPECT_REJECT(AA_MSG_HELLO, "t", VU(1), AA_EFORMAT, "message.t: expected a string");
  EXPECT_REJECT(AA_MSG_HELLO, "t", DROP, AA_EFORMAT, "missing message type \"t\"");
}

AA_TEST(wrong_field_type_is_rejected) {
  EXPECT_REJECT(AA_MSG_JOB, "run", VS("9001"), AA_EFORMAT,
                "job.run: expected an unsigned integer, got a string");
  EXPECT_REJECT(AA_MSG_JOB, "world", VD(4.0), AA_EFORMAT, "job.world: expected an integer, got a float");
  EXPECT_REJECT(AA_MSG_PROGRESS, "loss", VS("3"), AA_EFORMAT,
                "progress.loss: expected a number, got a string");
  EXPECT_REJECT(AA_MSG_SUBMIT, "wait", VU(1), AA_EFORMAT, "submit.wait: expected a boolean");
  EXPECT_REJECT(AA_MSG_SUBMIT, "model", VBIN, AA_EFORMAT, "submit.model: expected a string, got binary");
  EXPECT_REJECT(AA_MSG_SUBMIT, "exclude", VS("zero3"), AA_EFORMAT,
                "submit.exclude: expected an array of strings");
  EXPECT_REJECT(AA_MSG_SUBMIT, "include", VS("zero1"), AA_EFORMAT,
                "submit.include: expected an array of strings");
  EXPECT_REJECT(AA_MSG_SUBMIT, "from", VU(1), AA_EFORMAT, "submit.from: expected a string");
  EXPECT_REJECT(AA_MSG_SUBMIT, "from", VS(""), AA_EFORMAT, "submit.from: must not be empty");
  EXPECT_REJECT(AA_MSG_HELLO, "device", VS("cuda"), AA_EFORMAT, "hello.device: expected a map, got a string");
  EXPECT_REJECT(AA_MSG_HELLO, "device.memory", VNIL, AA_EFORMAT,
                "hello.device.memory: expected an unsigned integer, got nil");
  EXPECT_REJECT(AA_MSG_HELLO, "role", VU(0), AA_EFORMAT, "hello.role: expected a string");
  EXPECT_REJECT(AA_MSG_HELLO, "role", VS("admin"), AA_EFORMAT,
                "hello.role: \"admin\" is not one of executor, client");
  EXPECT_REJECT(AA_MSG_RESULT, "status", VS("pruned"), AA_EFORMAT,
                "result.status: \"pruned\" is not one of ok, oom, error, timeout, crashed, cancelled");
  EXPECT_REJECT(AA_MSG_RESULT, "peak", VTRUE, AA_EFORMAT, "result.peak: expected a map, got a boolean");
  EXPECT_REJECT(AA_MSG_RESULT, "times", VU(3), AA_EFORMAT,
                "result.times: expected a map, got an unsigned integer");
  EXPECT_REJECT(AA_MSG_RESULT, "times.bubble", VS("1.5"), AA_EFORMAT,
                "result.times.bubble: expected a number, got a string");
  EXPECT_REJECT(AA_MSG_RESULT, "pp_rank", VD(1.0), AA_EFORMAT,
                "result.pp_rank: expected an integer, got a float");
}

AA_TEST(missing_required_field_is_named) {
  EXPECT_REJECT(AA_MSG_JOB, "strategy", DROP, AA_EFORMAT, "job: missing required field \"strategy\"");
  EXPECT_REJECT(AA_MSG_RESULT, "peak.acts", DROP, AA_EFORMAT, "result.peak: missing required field \"acts\"");
  EXPECT_REJECT(AA_MSG_RESULT, "times.pipeline_comm", DROP, AA_EFORMAT,
                "result.times: missing required field \"pipeline_comm\"");
  EXPECT_REJECT(AA_MSG_HELLO, "device.host", DROP, AA_EFORMAT,
                "hello.device: missing required field \"host\"");
  EXPECT_REJECT(AA_MSG_ERROR, "code", DROP, AA_EFORMAT, "error: missing required field \"code\"");
  EXPECT_REJECT(AA_MSG_REPLY, "json", DROP, AA_EFORMAT, "reply: missing required field \"json\"");
}

AA_TEST(unknown_and_duplicate_keys_are_rejected) {
  EXPECT_REJECT(AA_MSG_CANCEL, "force", VTRUE, AA_EFORMAT,
                "cancel: unknown key \"force\" (allowed: v, t, id, job)");
  EXPECT_REJECT(
      AA_MSG_RESULT, "peak.kv_cache", VU(1), AA_EFORMAT,
      "result.peak: unknown key \"kv_cache\" (allowed: params, grads, optim, acts, workspace, total)");
  EXPECT_REJECT(
      AA_MSG_RESULT, "times.idle", VD(1), AA_EFORMAT,
      "result.times: unknown key \"idle\" (allowed: forward, backward, optimizer, pipeline_comm, bubble, "
      "all_to_all)");
  /* Duplicates: a map with "job" twice, and "v" twice. */
  static const unsigned char dup_job[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 't',  0xa6, 'c', 'a', 'n', 'c', 'e',
                                          'l',  0xa3, 'j', 'o',  'b',  0x05, 0xa3, 'j', 'o', 'b', 0x06};
  EXPECT_RAW_REJECT(dup_job, sizeof dup_job, AA_EFORMAT, "cancel: duplicate key \"job\"");
  static const unsigned char dup_v[] = {0x84, 0xa1, 'v',  0x01, 0xa1, 't', 0xa6, 'c',  'a', 'n', 'c',
                                        'e',  'l',  0xa3, 'j',  'o',  'b', 0x05, 0xa1, 'v', 0x01};
  EXPECT_RAW_REJECT(dup_v, sizeof dup_v, AA_EFORMAT, "duplicate key \"v\"");
  /* A key that is not a string. */
  static const unsigned char int_key[] = {0x83, 0xa1, 'v', 0x01, 0xa1, 't',  0xa6, 'c',
                                          'a',  'n',  'c', 'e',  'l',  0x07, 0x05};
  EXPECT_RAW_REJECT(int_key, sizeof int_key, AA_EFORMAT,
                    "cancel: key 3 is an unsigned integer, not a string");
}

AA_TEST(out_of_range_values_are_rejected) {
  EXPECT_REJECT(AA_MSG_JOB, "warmup_steps", VI(-1), AA_EFORMAT,
                "job.warmup_steps: -1 is outside 0..1099511627776");
  EXPECT_REJECT(AA_MSG_JOB, "measured_steps", VU(0), AA_EFORMAT, "job.measured_steps: 0 is outside 1..");
  EXPECT_REJECT(AA_MSG_JOB, "job", VU(0), AA_EFORMAT, "job.job: 0 is outside 1..9223372036854775807");
  EXPECT_REJECT(AA_MSG_JOB, "run", VU(UINT64_MAX), AA_EFORMAT, "job.run: 18446744073709551615 is outside");
  EXPECT_REJECT(AA_MSG_JOB, "world", VU(5000), AA_EFORMAT, "job.world: 5000 is outside 1..4096");
  EXPECT_REJECT(AA_MSG_JOB, "world", VU(UINT64_MAX), AA_EFORMAT,
                "job.world: 18446744073709551615 is outside 1..4096");
  EXPECT_REJECT(AA_MSG_JOB, "rank", VU(4), AA_EFORMAT, "job: rank 4 must be below world 4");
  EXPECT_REJECT(AA_MSG_JOB, "time_limit_s", VI(-5), AA_EFORMAT,
                "job.time_limit_s: -5 is outside 0..31622400");
  EXPECT_REJECT(AA_MSG_JOB, "id", VU(0), AA_EFORMAT, "job.id: 0 is outside 1..");
  EXPECT_REJECT(AA_MSG_PROGRESS, "step", VU(14), AA_EFORMAT, "progress: step 14 is past total 13");
  EXPECT_REJECT(AA_MSG_PROGRESS, "index", VU(46), AA_EFORMAT, "progress: index 46 is past count 45");
  EXPECT_REJECT(AA_MSG_PROGRESS, "loss", VD(NAN), AA_EFORMAT, "progress.loss: must be a finite number");
  EXPECT_REJECT(AA_MSG_PROGRESS, "loss", VF32(INFINITY), AA_EFORMAT,
                "progress.loss: must be a finite number");
  EXPECT_REJECT(AA_MSG_PROGRESS, "tokens_per_s", VD(-1), AA_EFORMAT,
                "progress.tokens_per_s: -1 is outside 0..1e+12");
  EXPECT_REJECT(AA_MSG_RESULT, "step_ms_spread", VD(-0.5), AA_EFORMAT,
                "result.step_ms_spread: -0.5 is outside");
  EXPECT_REJECT(AA_MSG_RESULT, "peak.total", VU(UINT64_MAX), AA_EFORMAT,
                "result.peak.total: 18446744073709551615");
  EXPECT_REJECT(AA_MSG_RESULT, "times.forward", VD(-0.25), AA_EFORMAT,
                "result.times.forward: -0.25 is outside 0..1e+09");
  EXPECT_REJECT(AA_MSG_RESULT, "times.backward", VD(2e9), AA_EFORMAT,
                "result.times.backward: 2e+09 is outside 0..1e+09");
  EXPECT_REJECT(AA_MSG_RESULT, "times.bubble", VD(NAN), AA_EFORMAT,
                "result.times.bubble: must be a finite number");
  EXPECT_REJECT(AA_MSG_RESULT, "times.optimizer", VF32(INFINITY), AA_EFORMAT,
                "result.times.optimizer: must be a finite number");
  EXPECT_REJECT(AA_MSG_RESULT, "times.all_to_all", VD(-1), AA_EFORMAT,
                "result.times.all_to_all: -1 is outside 0..1e+09");
  EXPECT_REJECT(AA_MSG_RESULT, "moe_max_tokens", VD(-2), AA_EFORMAT, "result.moe_max_tokens: -2 is outside");
  EXPECT_REJECT(AA_MSG_RESULT, "moe_max_tokens", VD(NAN), AA_EFORMAT,
                "result.moe_max_tokens: must be a finite number");
  EXPECT_REJECT(AA_MSG_RESULT, "rank", VU(4096), AA_EFORMAT, "result.rank: 4096 is outside 0..4095");
  EXPECT_REJECT(AA_MSG_RESULT, "dp_rank", VI(-1), AA_EFORMAT, "result.dp_rank: -1 is outside 0..4095");
  EXPECT_REJECT(AA_MSG_RESULT, "tp_rank", VU(UINT64_MAX), AA_EFORMAT,
                "result.tp_rank: 18446744073709551615 is outside 0..4095");
  EXPECT_REJECT(AA_MSG_ERROR, "code", VI(0), AA_EFORMAT, "error.code: 0 is outside -1000..-1");
  EXPECT_REJECT(AA_MSG_WELCOME, "heartbeat_ms", VU(10), AA_EFORMAT,
                "welcome.heartbeat_ms: 10 is outside 100..3600000");
  EXPECT_REJECT(AA_MSG_HELLO, "device.cc_major", VU(100), AA_EFORMAT,
                "hello.device.cc_major: 100 is outside 1..99");
  EXPECT_REJECT(AA_MSG_HELLO, "device.pid", VI(-1), AA_EFORMAT,
                "hello.device.pid: -1 is outside 1..2147483647");
}

AA_TEST(rules_between_fields_are_checked) {
  EXPECT_REJECT(AA_MSG_HELLO, "device", DROP, AA_EFORMAT, "hello: an executor must describe its device");
  EXPECT_REJECT(AA_MSG_HELLO, "role", VS("client"), AA_EFORMAT, "hello: a client has no device");
  EXPECT_REJECT(AA_MSG_HELLO, "device.sm_count", DROP, AA_EFORMAT,
                "hello.device: a cuda device needs sm_count and cc_major");
  EXPECT_REJECT(AA_MSG_HELLO, "device.kind", VS("cpu"), AA_EFORMAT,
                "hello.device: a cpu device must not carry");
  /* A gang's ranks meet at the rendezvous; one rank alone needs none. */
  EXPECT_REJECT(AA_MSG_JOB, "rendezvous", DROP, AA_EFORMAT, "job: world 4 needs a rendezvous");
  aa_msg_t m, d;
  size_t len;
  aa_sample_msg(AA_MSG_JOB, &m);
  m.job.rank = 0;
  m.job.world = 1;
  m.job.rendezvous = NULL;
  char *f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.job.world == 1 && !d.job.rendezvous);
  aa_msg_free(&d);
  free(f);
  m.job.world = 2;
  m.job.rendezvous = NULL;
  CHECK(aa_msg_encode(&m, &f, &len) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "world 2 needs a rendezvous"), "%s", aa_last_error());
}

AA_TEST(a_text_cut_inside_a_character_is_trimmed_to_valid_utf8) {
  char s[16];
  snprintf(s, sizeof s, "%s", "abc\xc3\xa9");
  aa_proto_utf8_trim(s);
  CHECK(!strcmp(s, "abc\xc3\xa9")); /* whole: kept */
  snprintf(s, sizeof s, "%s", "abc\xc3");
  aa_proto_utf8_trim(s);
  CHECK(!strcmp(s, "abc"));
  memcpy(s, "abcd\xe2\x82\xac", 6); /* the euro sign cut after 2 of its 3 bytes */
  s[6] = '\0';
  aa_proto_utf8_trim(s);
  CHECK(!strcmp(s, "abcd"));
  snprintf(s, sizeof s, "%s", "\xf0\x9f\x98");
  aa_proto_utf8_trim(s);
  CHECK(!strcmp(s, ""));
  s[0] = '\0';
  aa_proto_utf8_trim(s);
  CHECK(!strcmp(s, ""));
}

AA_TEST(kv_messages_carry_binary_values_within_their_limits) {
  aa_msg_t d;
  CHECK(decode_sample(AA_MSG_KV_SET, &d) == 0);
  CHECK(d.kv_set.run == 9001 && strcmp(d.kv_set.key, "aa-j56r9001-x/rank/1") == 0);
  /* Binary, not text: a NUL and a byte that is no UTF-8 come back as sent. */
  CHECK(d.kv_set.value.n == 16 && memcmp(d.kv_set.value.p, "10.0.0.7:41000\0\xff", 16) == 0);
  aa_msg_free(&d);
  CHECK(decode_sample(AA_MSG_KV_GET, &d) == 0);
  CHECK(d.kv_get.run == 9001 && strcmp(d.kv_get.key, "aa-j56r9001-x/rank/0") == 0 && !d.kv_get.value.p);
  aa_msg_free(&d);
  CHECK(decode_sample(AA_MSG_KV_VALUE, &d) == 0);
  CHECK(d.kv_value.value.n == 14 && memcmp(d.kv_value.value.p, "10.0.0.5:41000", 14) == 0);
  aa_msg_free(&d);
  EXPECT_REJECT(AA_MSG_KV_SET, "value", DROP, AA_EFORMAT, "kv_set: missing required field \"value\"");
  EXPECT_REJECT(AA_MSG_KV_SET, "value", VS("10.0.0.7"), AA_EFORMAT,
                "kv_set.value: expected binary, got a string");
  EXPECT_REJECT(AA_MSG_KV_VALUE, "run", VU(0), AA_EFORMAT, "kv_value.run: 0 is outside 1..");
  EXPECT_REJECT(AA_MSG_KV_GET, "key", DROP, AA_EFORMAT, "kv_get: missing required field \"key\"");
  EXPECT_REJECT(AA_MSG_KV_GET, "key", VS(""), AA_EFORMAT, "kv_get.key: must not be empty");
  EXPECT_REJECT(AA_MSG_KV_GET, "key", VREP(201), AA_EFORMAT,
                "kv_get.key: 201 bytes, longer than the limit 200");
  EXPECT_REJECT(AA_MSG_KV_GET, "key", VS("a key"), AA_EFORMAT, "kv_get.key: byte 0x20 at 1 is not one of");
  EXPECT_REJECT(AA_MSG_KV_GET, "value", VBIN, AA_EFORMAT,
                "kv_get: unknown key \"value\" (allowed: v, t, id, run, key)");
  CHECK(decode_modified(AA_MSG_KV_GET, "key", VREP(200), &d) == 0 && strlen(d.kv_get.key) == 200);
  aa_msg_free(&d);
  /* An empty value is a value; one byte past the limit is not, on either side. */
  aa_msg_t m;
  aa_sample_msg(AA_MSG_KV_SET, &m);
  m.kv_set.value = (aa_msg_bin_t){.p = NULL, .n = 0};
  size_t len;
  char *f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.kv_set.value.n == 0);
  aa_msg_free(&d);
  free(f);
  char *big = calloc(1, AA_PROTO_KV_VALUE_MAX + 1);
  m.kv_set.value = (aa_msg_bin_t){.p = big, .n = AA_PROTO_KV_VALUE_MAX};
  f = encode_ok(&m, &len);
  CHECK(f && aa_msg_decode(f + 4, len - 4, &d) == 0 && d.kv_set.value.n == AA_PROTO_KV_VALUE_MAX);
  aa_msg_free(&d);
  free(f);
  m.kv_set.value.n = AA_PROTO_KV_VALUE_MAX + 1;
  f = NULL;
  CHECK(aa_msg_encode(&m, &f, &len) == AA_EINVAL && !f);
  CHECK(strstr(aa_last_error(), "kv_set.value: 65537 bytes, longer than the limit 65536"));
  /* The decoder refuses it too (a peer that does not use this encoder). */
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 5);
  msgpack_pack_str_with_body(&pk, "v", 1);
  msgpack_pack_uint64(&pk, AA_PROTO_VERSION);
  msgpack_pack_str_with_body(&pk, "t", 1);
  msgpack_pack_str_with_body(&pk, "kv_set", 6);
  msgpack_pack_str_with_body(&pk, "run", 3);
  msgpack_pack_uint64(&pk, 7);
  msgpack_pack_str_with_body(&pk, "key", 3);
  msgpack_pack_str_with_body(&pk, "k", 1);
  msgpack_pack_str_with_body(&pk, "value", 5);
  msgpack_pack_bin_with_body(&pk, big, AA_PROTO_KV_VALUE_MAX + 1);
  EXPECT_RAW_REJECT(sb.data, sb.size, AA_EFORMAT, "kv_set.value: 65537 bytes, longer than the limit 65536");
  msgpack_sbuffer_destroy(&sb);
  free(big);
}

/* A calibration file is the largest text a client sends besides a model:
 * bounded by its own cap, far below the frame's. */
AA_TEST(calib_import_carries_a_file_within_its_cap) {
  aa_msg_t d;
  CHECK(decode_sample(AA_MSG_CALIB_IMPORT, &d) == 0);
  CHECK(d.calib_import.force && strstr(d.calib_import.json, "autoaccel-calibration"));
  aa_msg_free(&d);
  CHECK(decode_modified(AA_MSG_CALIB_IMPORT, "force", DROP, &d) == 0 && !d.calib_import.force);
  aa_msg_free(&d);
  CHECK(decode_modified(AA_MSG_CALIB_IMPORT, "json", VREP(AA_PROTO_CALIB_FILE_MAX), &d) == 0 &&
        strlen(d.calib_import.json) == AA_PROTO_CALIB_FILE_MAX);
  aa_msg_free(&d);
  EXPECT_REJECT(AA_MSG_CALIB_IMPORT, "json", VREP(AA_PROTO_CALIB_FILE_MAX + 1), AA_EFORMAT,
                "calib_import.json: 4194305 bytes, longer than the limit 4194304");
  EXPECT_REJECT(AA_MSG_CALIB_IMPORT, "json", DROP, AA_EFORMAT,
                "calib_import: missing required field \"json\"");
  EXPECT_REJECT(AA_MSG_CALIB_IMPORT, "json", VS(""), AA_EFORMAT, "calib_import.json: must not be empty");
  EXPECT_REJECT(AA_MSG_CALIB_IMPORT, "json", VU(7), AA_EFORMAT, "calib_import.json");
  EXPECT_REJECT(AA_MSG_CALIB_IMPORT, "force", VS("yes"), AA_EFORMAT, "calib_import.force");
}

AA_TEST(abort_names_the_run_of_the_gang) {
  aa_msg_t d;
  CHECK(decode_sample(AA_MSG_ABORT, &d) == 0);
  CHECK(d.abort.job == 56 && d.abort.run == 9001 && strcmp(d.abort.reason, "rank 2 crashed") == 0);
  aa_msg_free(&d);
  CHECK(decode_modified(AA_MSG_ABORT, "reason", DROP, &d) == 0 && !d.abort.reason);
  aa_msg_free(&d);
  EXPECT_REJECT(AA_MSG_ABORT, "run", DROP, AA_EFORMAT, "abort: missing required field \"run\"");
  EXPECT_REJECT(AA_MSG_ABORT, "job", VU(0), AA_EFORMAT, "abort.job: 0 is outside 1..");
  EXPECT_REJECT(AA_MSG_ABORT, "reason", VREP(4097), AA_EFORMAT, "abort.reason");
}

AA_TEST(oversized_and_malformed_strings_are_rejected) {
  EXPECT_REJECT(AA_MSG_ERROR, "message", VREP(4097), AA_EFORMAT,
                "error.message: 4097 bytes, longer than the limit 4096");
  EXPECT_REJECT(AA_MSG_HELLO, "device.name", VREP(256), AA_EFORMAT,
                "hello.device.name: 256 bytes, longer than the limit 255");
  EXPECT_REJECT(AA_MSG_HELLO, "token", VREP(256), AA_EFORMAT, "hello.token: 256 bytes");
  EXPECT_REJECT(AA_MSG_PROGRESS, "phase", VREP(65), AA_EFORMAT,
                "progress.phase: 65 bytes, longer than the limit 64");
  EXPECT_REJECT(AA_MSG_JOB, "model", VS(""), AA_EFORMAT, "job.model: must not be empty");
  EXPECT_REJECT(AA_MSG_QUERY, "what", VSN("ru\0ns", 5), AA_EFORMAT, "query.what: contains a NUL byte");
  EXPECT_REJECT(AA_MSG_REPLY, "json", VSN("\"\xc3\x28\"", 4), AA_EFORMAT, "reply.json: is not valid UTF-8");
  EXPECT_REJECT(AA_MSG_REPLY, "json", VSN("\xed\xa0\x80", 3), AA_EFORMAT,
                "is not valid UTF-8");                                                       /* surrogate */
  EXPECT_REJECT(AA_MSG_REPLY, "json", VSN("\xc0\xaf", 2), AA_EFORMAT, "is not valid UTF-8"); /* overlong */
  EXPECT_REJECT(AA_MSG_SUBMIT, "exclude", VARR(65), AA_EFORMAT,
                "submit.exclude: 65 entries, more than the limit 64");
  aa_msg_t d;
  CHECK(decode_modified(AA_MSG_SUBMIT, "exclude", VARR(64), &d) == 0 &&
        d.submit.exclude.n == 64); /* at the limit */
  aa_msg_free(&d);
  EXPECT_REJECT(AA_MSG_SUBMIT, "include", VARR(65), AA_EFORMAT,
                "submit.include: 65 entries, more than the limit 64");
  CHECK(decode_modified(AA_MSG_SUBMIT, "include", VARR(64), &d) == 0 && d.submit.include.n == 64);
  aa_msg_free(&d);
  CHECK(decode_modified(AA_MSG_REPLY, "json", VS("{\"name\": \"caf\xc3\xa9 \xf0\x9f\x9a\x80\"}"), &d) == 0);
  aa_msg_free(&d);
}

AA_TEST(non_map_truncated_and_trailing_payloads_are_rejected) {
  static const unsigned char arr[] = {0x92, 0x01, 0x02};
  EXPECT_RAW_REJECT(arr, sizeof arr, AA_EFORMAT, "message: expected a map, got an array");
  static const unsigned char str[] = {0xa2, 'h', 'i'};
  EXPECT_RAW_REJECT(str, sizeof str, AA_EFORMAT, "expected a map, got a string");
  EXPECT_RAW_REJECT("", 0, AA_EPARSE, "empty message");
  static const unsigned char reserved[] = {0xc1};
  EXPECT_RAW_REJECT(reserved, sizeof reserved, AA_EPARSE, "invalid msgpack byte 0xc1 at offset 0");

  size_t n;
  char *p = modified(AA_MSG_JOB, NULL, DROP, &n);
  /* Every proper prefix is truncated msgpack. */
  int all_parse = 1;
  for (size_t k = 1; k < n; k++) {
    aa_msg_t m;
    memset(&m, 0xAB, sizeof m);
    int rc = aa_msg_decode(p, k, &m);
    if (rc != AA_EPARSE || !strstr(aa_last_error(), "truncated")) {
      all_parse = 0;
      fprintf(stderr, "  prefix %zu/%zu: rc %d (%s)\n", k, n, rc, aa_last_error());
      break;
    }
  }
  CHECK(all_parse);
  /* One byte more, or a second value, is trailing. */
  char *q = malloc(n + 1);
  memcpy(q, p, n);
  q[n] = 0x00;
  EXPECT_RAW_REJECT(q, n + 1, AA_EPARSE, "1 trailing bytes after the message");
  free(q);
  free(p);
}

AA_TEST(declared_counts_and_nesting_are_bounded_before_allocation) {
  /* Counts the bytes cannot back: msgpack-c would allocate count * 24+
   * bytes for these before noticing. */
  static const unsigned char arr32[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
  EXPECT_RAW_REJECT(arr32, sizeof arr32, AA_EPARSE, "array at offset 0 declares 4294967295 entries");
  static const unsigned char map32[] = {0xdf, 0x10, 0x00, 0x00, 0x00};
  EXPECT_RAW_REJECT(map32, sizeof map32, AA_EPARSE, "map at offset 0 declares 268435456 entries");
  static const unsigned char str32[] = {0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'};
  EXPECT_RAW_REJECT(str32, sizeof str32, AA_EPARSE, "declares 2147483647 bytes, 1 remain");
  /* Enough bytes but over the item budget. */
  size_t big = 1 + 2 + 2000;
  unsigned char *many = calloc(big, 1);
  many[0] = 0xdc, many[1] = 2000 >> 8, many[2] = 2000 & 0xff;
  EXPECT_RAW_REJECT(many, big, AA_EPARSE, "more than the item limit");
  free(many);
  /* Nesting: maps within maps, five deep. */
  static const unsigned char deep[] = {0x81, 0xa1, 'a',  0x81, 0xa1, 'b',  0x81, 0xa1,
                                       'c',  0x81, 0xa1, 'd',  0x81, 0xa1, 'e',  0x01};
  EXPECT_RAW_REJECT(deep, sizeof deep, AA_EPARSE, "nesting deeper than 4");
}

AA_TEST(encoder_refuses_what_the_decoder_would_reject) {
  aa_msg_t m;
  char *out = (char *)0x1;
  size_t len = 77;
  aa_sample_msg(AA_MSG_JOB, &m);
  m.job.strategy = NULL;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "job: missing required field \"strategy\""));
  CHECK(out == (char *)0x1 && len == 77);
  aa_sample_msg(AA_MSG_JOB, &m);
  m.job.rank = 4;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "rank 4 must be below world 4"));
  aa_sample_msg(AA_MSG_PROGRESS, &m);
  m.progress.loss = INFINITY;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "progress.loss: must be a finite"));
  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.status = (aa_proto_run_status_t)17;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "result.status: enum value 17"));
  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.times.ms[AA_PROTO_TIME_BUBBLE] = NAN;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "result.times.bubble: must be a finite"));
  aa_sample_msg(AA_MSG_RESULT, &m);
  m.result.coord[AA_AXIS_PIPELINE] = AA_PROTO_WORLD_MAX;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "result.pp_rank: 4096 is outside"));
  aa_sample_msg(AA_MSG_SUBMIT, &m);
  m.submit.exclude.v[0] = "";
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "submit.exclude[0]: must not be empty"));
  aa_sample_exclude[0] = "zero3";
  aa_sample_msg(AA_MSG_SUBMIT, &m);
  m.submit.include.v[0] = "";
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL &&
        strstr(aa_last_error(), "submit.include[0]: must not be empty"));
  aa_sample_include[0] = "zero1";
  aa_sample_msg(AA_MSG_CANCEL, &m);
  m.id = UINT64_MAX;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL && strstr(aa_last_error(), "cancel.id"));
  m.type = AA_MSG_NONE;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL);
  m.type = AA_MSG_TYPE_COUNT;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL);
  CHECK(out == (char *)0x1 && len == 77);
  /* A JSON text larger than a frame. */
  size_t huge = AA_FRAME_MAX + 1;
  char *s = malloc(huge + 1);
  memset(s, ' ', huge);
  s[huge] = '\0';
  aa_sample_msg(AA_MSG_REPLY, &m);
  m.reply.json = s;
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL && strstr(aa_last_error(), "reply.json: 16777217 bytes"));
  /* Right at the string cap the frame overflows by the envelope. */
  s[AA_FRAME_MAX] = '\0';
  CHECK(aa_msg_encode(&m, &out, &len) == AA_EINVAL && strstr(aa_last_error(), "exceeds the frame maximum"));
  free(s);
}

AA_TEST(error_reply_helper_always_makes_a_valid_frame) {
  char *f;
  size_t len;
  aa_msg_t d;
  CHECK(aa_msg_encode_error(&f, &len, 42, AA_EFORMAT,
                            "hello.role: \"admin\" is not one of executor, client") == 0);
  CHECK(aa_msg_decode(f + 4, len - 4, &d) == 0 && d.type == AA_MSG_ERROR && d.id == 42 &&
        d.error.code == AA_EFORMAT);
  CHECK(strcmp(d.error.message, "hello.role: \"admin\" is not one of executor, client") == 0);
  aa_msg_free(&d);
  free(f);
  /* Invalid UTF-8 becomes '?', a long text is cut at a character. */
  char big[5000];
  memset(big, 'a', sizeof big);
  memcpy(big + 4094, "\xc3\xa9\xc3\xa9", 4);
  big[10] = (char)0xff;
  big[sizeof big - 1] = '\0';
  CHECK(aa_msg_encode_error(&f, &len, 0, 7, big) == 0);
  CHECK(aa_msg_decode(f + 4, len - 4, &d) == 0 && d.error.code == AA_EINTERNAL && d.id == 0);
  CHECK(strlen(d.error.message) == 4096 && d.error.message[10] == '?');
  CHECK(memcmp(d.error.message + 4094, "\xc3\xa9", 2) == 0);
  aa_msg_free(&d);
  free(f);
  CHECK(aa_msg_encode_error(&f, &len, 0, AA_EIO, "") == 0);
  CHECK(aa_msg_decode(f + 4, len - 4, &d) == 0 && strcmp(d.error.message, "i/o error") == 0);
  aa_msg_free(&d);
  free(f);
}

AA_TEST(type_names_and_token_compare) {
  CHECK(strcmp(aa_msg_type_name(AA_MSG_HELLO), "hello") == 0);
  CHECK(strcmp(aa_msg_type_name(AA_MSG_ERROR), "error") == 0);
  CHECK(strcmp(aa_msg_type_name(AA_MSG_NONE), "?") == 0);
  CHECK(strcmp(aa_msg_type_name(AA_MSG_TYPE_COUNT), "?") == 0);
  CHECK(aa_proto_token_equal("abc", 3, "abc", 3) == 1);
  CHECK(aa_proto_token_equal("abd", 3, "abc", 3) == 0);
  CHECK(aa_proto_token_equal("ab", 2, "abc", 3) == 0);
  CHECK(aa_proto_token_equal("abcd", 4, "abc", 3) == 0);
  CHECK(aa_proto_token_equal("", 0, "abc", 3) == 0);
  CHECK(aa_proto_token_equal("", 0, "", 0) == 1);
  CHECK(aa_proto_token_equal("ab\0", 3, "ab", 2) == 0);
}

/* --- frames ----------------------------------------------------------------- */

/* A stream of `count` encoded sample frames (types cycling); *len = size. */
static char *stream_of(int count, size_t *len, size_t *frame_lens) {
  char *s = NULL;
  *len = 0;
  for (int i = 0; i < count; i++) {
    aa_msg_t m;
    size_t n;
    aa_sample_msg((aa_msg_type_t)(1 + i % (AA_MSG_TYPE_COUNT - 1)), &m);
    char *f = encode_ok(&m, &n);
    s = realloc(s, *len + n);
    memcpy(s + *len, f, n);
    *len += n;
    frame_lens[i] = n - 4;
    free(f);
  }
  return s;
}

/* Feeds s in chunks (chunk(i) gives the size of chunk i); checks every
 * frame decodes to the expected type and size; returns frames seen. */
static int feed_all(const char *s, size_t len, size_t (*chunk)(size_t i), const size_t *frame_lens) {
  aa_frame_reader_t r;
  CHECK(aa_frame_reader_init(&r, 0) == 0);
  int frames = 0;
  size_t off = 0;
  for (size_t i = 0; off < len; i++) {
    size_t c = chunk(i);
    if (c > len - off) c = len - off;
    const char *p = s + off;
    size_t left = c;
    while (left > 0) {
      size_t used;
      const void *pl;
      size_t pn;
      int rc = aa_frame_reader_feed(&r, p, left, &used, &pl, &pn);
      CHECK_MSG(rc >= 0, "feed: %s", aa_last_error());
      if (rc < 0) goto done;
      CHECK(used <= left && (rc == 1 || used == left));
      CHECK(aa_frame_reader_held(&r) <= r.max + 4);
      p += used, left -= used;
      if (rc == 1) {
        aa_msg_t m;
        CHECK(pn == frame_lens[frames]);
        CHECK_MSG(aa_msg_decode(pl, pn, &m) == 0, "frame %d: %s", frames, aa_last_error());
        CHECK(m.type == (aa_msg_type_t)(1 + frames % (AA_MSG_TYPE_COUNT - 1)));
        aa_msg_free(&m);
        frames++;
      }
    }
    off += c;
  }
done:
  aa_frame_reader_free(&r);
  return frames;
}

static size_t one_byte(size_t i) {
  (void)i;
  return 1;
}
static size_t everything(size_t i) {
  (void)i;
  return SIZE_MAX;
}
static aa_rng_t chunk_rng;
static size_t random_chunk(size_t i) {
  (void)i;
  return 1 + aa_rng_u64(&chunk_rng) % 97;
}

AA_TEST(frame_reader_reassembles_any_chunking) {
  size_t lens[40], len;
  char *s = stream_of(40, &len, lens);
  CHECK(feed_all(s, len, one_byte, lens) == 40);
  CHECK(feed_all(s, len, everything, lens) == 40); /* several frames in one chunk */
  for (uint64_t seed = 1; seed <= 20; seed++) {
    aa_rng_seed(&chunk_rng, seed);
    CHECK_MSG(feed_all(s, len, random_chunk, lens) == 40, "seed %llu", (unsigned long long)seed);
  }
  free(s);
}

AA_TEST(frame_reader_rejects_bad_lengths_before_allocating) {
  aa_frame_reader_t r;
  size_t used = 99;
  const void *pl = NULL;
  size_t pn = 99;
  /* Declared 16 MiB + 1: refused from the header alone. */
  static const unsigned char over[] = {0x01, 0x00, 0x00, 0x01, 'x'};
  CHECK(aa_frame_reader_init(&r, 0) == 0 && r.max == AA_FRAME_MAX);
  CHECK(aa_frame_reader_feed(&r, over, sizeof over, &used, &pl, &pn) == AA_EFORMAT);
  CHECK(strstr(aa_last_error(), "frame declares length 16777217, above the maximum 16777216"));
  CHECK(r.buf == NULL && r.buf_cap == 0 && used == 99 && pl == NULL && pn == 99);
  /* Sticky: the stream cannot be resynchronised. */
  CHECK(aa_frame_reader_feed(&r, over, 1, &used, &pl, &pn) == AA_EFORMAT);
  aa_frame_reader_free(&r);
  /* A lower limit, the header split over calls. */
  static const unsigned char over_small[] = {0x00, 0x00, 0x01, 0x01};
  CHECK(aa_frame_reader_init(&r, 256) == 0);
  CHECK(aa_frame_reader_feed(&r, over_small, 2, &used, &pl, &pn) == 0 && used == 2);
  CHECK(aa_frame_reader_feed(&r, over_small + 2, 2, &used, &pl, &pn) == AA_EFORMAT);
  CHECK(strstr(aa_last_error(), "length 257, above the maximum 256") && r.buf_cap == 0);
  aa_frame_reader_free(&r);
  static const unsigned char zero[] = {0, 0, 0, 0, 0x80};
  CHECK(aa_frame_reader_init(&r, 0) == 0);
  CHECK(aa_frame_reader_feed(&r, zero, sizeof zero, &used, &pl, &pn) == AA_EFORMAT);
  CHECK(strstr(aa_last_error(), "frame declares length 0") && r.buf_cap == 0);
  aa_frame_reader_free(&r);
  CHECK(aa_frame_reader_init(&r, AA_FRAME_MAX + 1) == AA_EINVAL);
}

AA_TEST(frame_reader_holds_at_most_one_frame_and_releases_large_buffers) {
  aa_frame_reader_t r;
  CHECK(aa_frame_reader_init(&r, 1 << 20) == 0);
  size_t n = 300000;
  char *f = malloc(n + 4);
  aa_frame_put_header((unsigned char *)f, (uint32_t)n);
  memset(f + 4, 0x5a, n);
  size_t off = 0, used, pn;
  const void *pl;
  int rc = 0;
  while (off < n + 4 && rc == 0) {
    size_t c = n + 4 - off < 4096 ? n + 4 - off : 4096;
    rc = aa_frame_reader_feed(&r, f + off, c, &used, &pl, &pn);
    CHECK(aa_frame_reader_held(&r) <= n + 4);
    /* What it holds follows what arrived, not the 300,000 bytes declared. */
    size_t got = off + used - 4;
    if (rc == 0)
      CHECK_MSG(aa_frame_reader_held(&r) <= 2 * got + 4096 + 4, "holds %zu after %zu bytes",
                aa_frame_reader_held(&r), got);
    off += used;
  }
  CHECK(rc == 1 && pn == n && ((const char *)pl)[n - 1] == 0x5a && r.buf_cap == n);
  /* The next call lets the large buffer go. */
  CHECK(aa_frame_reader_feed(&r, f, 2, &used, &pl, &pn) == 0 && r.buf_cap == 0 &&
        aa_frame_reader_held(&r) == 2);
  aa_frame_reader_free(&r);
  free(f);
  /* aa_frame_encode: header + payload, bounds. */
  char *out = NULL;
  size_t olen = 0;
  CHECK(aa_frame_encode(&out, &olen, "abc", 3) == 0 && olen == 7 && header_len(out) == 3 &&
        memcmp(out + 4, "abc", 3) == 0);
  free(out);
  out = (char *)0x1;
  CHECK(aa_frame_encode(&out, &olen, "", 0) == AA_EINVAL && out == (char *)0x1);
  CHECK(aa_frame_encode(&out, &olen, "", (size_t)AA_FRAME_MAX + 1) == AA_EINVAL && out == (char *)0x1);
}

AA_TEST(addresses_parse_and_bad_ones_say_why) {
  aa_addr_t a;
  char buf[300];
  CHECK(aa_addr_parse(&a, "unix:/tmp/x/planner.sock") == 0 && !a.tcp && strcmp(a.path, "/tmp/x/planner.sock") == 0);
  CHECK(aa_addr_parse(&a, "./planner.sock") == 0 && !a.tcp && strcmp(a.path, "./planner.sock") == 0);
  CHECK(aa_addr_parse(&a, "tcp:127.0.0.1:7070") == 0 && a.tcp && strcmp(a.host, "127.0.0.1") == 0 && a.port == 7070);
  CHECK(aa_addr_parse(&a, "node-7:80") == 0 && a.tcp && strcmp(a.host, "node-7") == 0 && a.port == 80);
  CHECK(aa_addr_parse(&a, "tcp:[::1]:9") == 0 && a.tcp && strcmp(a.host, "::1") == 0 && a.port == 9);
  aa_addr_format(&a, buf, sizeof buf);
  CHECK(strcmp(buf, "tcp:[::1]:9") == 0);
  CHECK(aa_addr_parse(&a, "tcp:host") == AA_EINVAL && strstr(aa_last_error(), "HOST:PORT"));
  CHECK(aa_addr_parse(&a, "tcp:host:0") == AA_EINVAL && strstr(aa_last_error(), "1..65535"));
  CHECK(aa_addr_parse(&a, "tcp:host:70000") == AA_EINVAL);
  CHECK(aa_addr_parse(&a, "tcp:::1:80") == AA_EINVAL && strstr(aa_last_error(), "brackets"));
  CHECK(aa_addr_parse(&a, "") == AA_EINVAL);
  memset(buf, 'a', 200);
  memcpy(buf, "unix:/", 6);
  buf[200] = 0;
  CHECK(aa_addr_parse(&a, buf) == AA_EINVAL && strstr(aa_last_error(), "longer than 107"));
  CHECK(aa_addr_is_loopback("127.0.0.1") && aa_addr_is_loopback("::1") && aa_addr_is_loopback("localhost"));
  CHECK(!aa_addr_is_loopback("0.0.0.0") && !aa_addr_is_loopback("10.0.0.1"));
}

AA_TEST(token_files_must_be_private_and_hold_one_line) {
  char dir[] = "/tmp/aa-token-XXXXXX", path[64], tok[AA_TOKEN_MAX + 1];
  size_t n;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/token", dir);
  FILE *f = fopen(path, "w");
  fputs("s3cret\nsecond line ignored\n", f);
  fclose(f);
  chmod(path, 0644);
  CHECK(aa_token_load(path, tok, &n) == AA_EPERM && strstr(aa_last_error(), "chmod 600"));
  chmod(path, 0600);
  CHECK(aa_token_load(path, tok, &n) == 0 && n == 6 && strcmp(tok, "s3cret") == 0);
  f = fopen(path, "w");
  fputs("\n", f);
  fclose(f);
  CHECK(aa_token_load(path, tok, &n) == AA_EINVAL);
  remove(path);
  CHECK(aa_token_load(path, tok, &n) == AA_ENOENT);
  rmdir(dir);
}

/* A FIFO at the token's path would block a blocking open until a writer
 * came (the planner before it listens, a client past its bounds); a link
 * would be followed; a huge file read whole. Each is refused at once. */
AA_TEST(token_files_that_are_not_plain_files_are_refused_at_once) {
  char dir[] = "/tmp/aa-token-XXXXXX", path[64], real[64], tok[AA_TOKEN_MAX + 1];
  size_t n;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/token", dir);
  snprintf(real, sizeof real, "%s/real", dir);
  CHECK(mkfifo(path, 0600) == 0);
  double t0 = aa_now();
  CHECK_ERR(aa_token_load(path, tok, &n), AA_EIO, "is a FIFO; only a regular file will do");
  CHECK_MSG(aa_now() - t0 < 1.0, "refusing the FIFO took %.1f s", aa_now() - t0);
  remove(path);
  FILE *f = fopen(real, "w");
  fputs("s3cret\n", f);
  fclose(f);
  chmod(real, 0600);
  CHECK(symlink(real, path) == 0);
  CHECK_ERR(aa_token_load(path, tok, &n), AA_EIO, "is a symbolic link");
  remove(path);
  CHECK(mkdir(path, 0700) == 0);
  CHECK_ERR(aa_token_load(path, tok, &n), AA_EIO, "is a directory");
  rmdir(path);
  f = fopen(path, "w");
  for (int i = 0; i < 5000; i++)
    fputc('x', f);
  fclose(f);
  chmod(path, 0600);
  CHECK_ERR(aa_token_load(path, tok, &n), AA_EINVAL, "more than 4096 bytes");
  remove(path);
  remove(real);
  rmdir(dir);
}

int main(void) {
  RUN(every_message_round_trips_byte_for_byte);
  RUN(hello_device_fields_decode_as_sent);
  RUN(job_and_result_fields_decode_as_sent);
  RUN(optional_fields_may_be_absent);
  RUN(wrong_version_has_its_own_code_and_message);
  RUN(unknown_or_missing_type_is_rejected);
  RUN(wrong_field_type_is_rejected);
  RUN(missing_required_field_is_named);
  RUN(unknown_and_duplicate_keys_are_rejected);
  RUN(out_of_range_values_are_rejected);
  RUN(rules_between_fields_are_checked);
  RUN(abort_names_the_run_of_the_gang);
  RUN(calib_import_carries_a_file_within_its_cap);
  RUN(kv_messages_carry_binary_values_within_their_limits);
  RUN(a_text_cut_inside_a_character_is_trimmed_to_valid_utf8);
  RUN(oversized_and_malformed_strings_are_rejected);
  RUN(non_map_truncated_and_trailing_payloads_are_rejected);
  RUN(declared_counts_and_nesting_are_bounded_before_allocation);
  RUN(encoder_refuses_what_the_decoder_would_reject);
  RUN(error_reply_helper_always_makes_a_valid_frame);
  RUN(type_names_and_token_compare);
  RUN(frame_reader_reassembles_any_chunking);
  RUN(frame_reader_rejects_bad_lengths_before_allocating);
  RUN(frame_reader_holds_at_most_one_frame_and_releases_large_buffers);
  RUN(addresses_parse_and_bad_ones_say_why);
  RUN(token_files_must_be_private_and_hold_one_line);
  RUN(token_files_that_are_not_plain_files_are_refused_at_once);
  return aa_test_summary();
}
