/* Who is connected: the hello of every connection (token check, executor
 * or client), the executors with their devices and hardware fingerprints,
 * heartbeats to executors and the dead-peer check (docs/service.md
 * "Connections"). */
#include "planner_internal.h"

#include <stdlib.h>
#include <string.h>

void aa__planner_fingerprint(const aa_msg_device_t *d, int world, char out[AA_STORE_HW_MAX]) {
  const char *kind = d->kind == AA_PROTO_DEV_CUDA ? "cuda" : "cpu";
  char tail[64];
  snprintf(tail, sizeof tail, ":%lluMiBx%d", (unsigned long long)(d->memory >> 20), world);
  size_t room = AA_STORE_HW_MAX - 1 - strlen(kind) - 1 - strlen(tail);
  const char *name = d->name ? d->name : "";
  size_t n = strlen(name);
  if (n > room) {
    n = room;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80) n--; /* do not split a UTF-8 character */
  }
  snprintf(out, AA_STORE_HW_MAX, "%s:%.*s%s", kind, (int)n, name, tail);
}

char *aa__planner_hw_description(const aa_msg_device_t *d, int world) {
  json_t *dev = json_pack("{s:s, s:s, s:i, s:I, s:s}", "kind", d->kind == AA_PROTO_DEV_CUDA ? "cuda" : "cpu",
                          "name", d->name ? d->name : "", "index", d->index, "memory", (json_int_t)d->memory,
                          "host", d->host ? d->host : "");
  if (dev && d->kind == AA_PROTO_DEV_CUDA) {
    json_object_set_new(dev, "sm_count", json_integer(d->sm_count));
    json_object_set_new(dev, "cc", json_sprintf("%d.%d", d->cc_major, d->cc_minor));
    json_object_set_new(dev, "peak_bf16_flops", json_real(d->peak_bf16_flops));
  }
  json_t *o = json_pack("{s:o, s:i}", "devices", json_pack("[o]", dev), "world", world);
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

aa_conn_t *aa__registry_idle(aa_planner_t *p, const char *fingerprint) {
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped && !c->busy_run &&
        (!fingerprint || !strcmp(c->fingerprint, fingerprint)))
      return c;
  return NULL;
}

aa_conn_t *aa__registry_find(aa_planner_t *p, uint64_t id) {
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped && c->id == id) return c;
  return NULL;
}

/* A token is required on TCP connections when one is configured; the unix
 * socket is protected by its mode (0600) instead. */
static int check_token(aa_conn_t *c, const aa_msg_hello_t *h, uint64_t req) {
  aa_planner_t *p = c->p;
  if (!c->tcp || !p->token_len) return 0;
  if (h->token && aa_proto_token_equal(h->token, strlen(h->token), p->token, p->token_len)) return 0;
  const char *what = h->token ? "wrong token" : "missing token";
  aa__planner_log(p, "%s from %s: connection refused", what, c->peer);
  char msg[96];
  snprintf(msg, sizeof msg, "%s: %s (give the planner's --token-file)", aa_strerror(AA_EPERM), what);
  aa__conn_fail(c, req, AA_EPERM, msg, NULL, 0);
  return -1;
}

void aa__registry_hello(aa_conn_t *c, const aa_msg_t *m) {
  aa_planner_t *p = c->p;
  const aa_msg_hello_t *h = &m->hello;
  if (check_token(c, h, m->id)) return;
  aa_msg_t w = {.type = AA_MSG_WELCOME, .id = m->id};
  if (h->role == AA_PROTO_ROLE_CLIENT) {
    c->role = AA_CONN_CLIENT;
    c->id = ++p->next_client_id;
    w.welcome = (aa_msg_welcome_t){.peer_id = c->id, .heartbeat_ms = p->heartbeat_ms};
    aa__conn_send(c, &w);
    return;
  }
  c->dev = h->device;
  c->dev.name = strdup(h->device.name);
  c->dev.host = strdup(h->device.host);
  if (!c->dev.name || !c->dev.host) {
    aa__conn_fail(c, m->id, AA_ENOMEM, "planner: no memory for the executor's device", NULL, 0);
    return;
  }
  c->role = AA_CONN_EXECUTOR;
  c->id = ++p->next_executor_id;
  aa__planner_fingerprint(&c->dev, 1, c->fingerprint);
  w.welcome = (aa_msg_welcome_t){.peer_id = c->id, .heartbeat_ms = p->heartbeat_ms};
  aa__conn_send(c, &w);
  aa__planner_log(p, "executor %llu connected from %s: %s (host %s, pid %d)", (unsigned long long)c->id, c->peer,
                  c->fingerprint, c->dev.host, c->dev.pid);
  aa__jobs_executor_arrived(p);
  aa__planner_kick(p);
}

void aa__registry_executor_gone(aa_conn_t *c, const char *why) {
  aa_planner_t *p = c->p;
  aa__planner_log(p, "executor %llu %s", (unsigned long long)c->id, why);
  if (c->busy_run) {
    char reason[128];
    snprintf(reason, sizeof reason, "executor %llu %s", (unsigned long long)c->id, why);
    int64_t run = c->busy_run;
    c->busy_run = c->busy_job = 0;
    aa__jobs_run_lost(p, run, reason);
  }
  aa__planner_kick(p);
}

void aa__registry_tick(aa_planner_t *p) {
  double now = aa_now(), dead = p->dead_after_ms / 1000.0;
  aa_msg_t hb = {.type = AA_MSG_HEARTBEAT};
  aa_conn_t *next;
  for (aa_conn_t *c = p->conns; c; c = next) {
    next = c->next;
    if (c->dropped) continue;
    if (now - c->last_seen > dead) {
      const char *who = c->role == AA_CONN_EXECUTOR ? "executor" : c->role == AA_CONN_CLIENT ? "client" : "peer";
      if (c->role != AA_CONN_EXECUTOR)
        aa__planner_log(p, "%s %llu (%s) stopped responding: closed", who, (unsigned long long)c->id, c->peer);
      aa__conn_drop(c, "stopped responding");
      continue;
    }
    if (c->role == AA_CONN_EXECUTOR) aa__conn_send(c, &hb);
  }
}
