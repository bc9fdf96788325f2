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

int aa__planner_hw_world(const char *hardware) {
  const char *x = strrchr(hardware, 'x');
  if (!x || !x[1]) return 1;
  long n = 0;
  for (const char *d = x + 1; *d; d++) {
    if (*d < '0' || *d > '9' || n > AA_PROTO_WORLD_MAX) return 1;
    n = n * 10 + (*d - '0');
  }
  return n >= 1 && n <= AA_PROTO_WORLD_MAX ? (int)n : 1;
}

/* Whether c is a live executor of `hardware`: its device, with the pool
 * size the fingerprint names, gives that very fingerprint (the device name
 * is cut to fit, so comparing the whole text is exact). */
static bool serves(const aa_conn_t *c, const char *hardware) {
  if (c->role != AA_CONN_EXECUTOR || c->dropped) return false;
  if (!hardware) return true;
  char fp[AA_STORE_HW_MAX];
  aa__planner_fingerprint(&c->dev, aa__planner_hw_world(hardware), fp);
  return !strcmp(fp, hardware);
}

aa_conn_t *aa__registry_idle(aa_planner_t *p, const char *hardware) {
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (serves(c, hardware) && !c->busy_run) return c;
  return NULL;
}

int aa__registry_pool(aa_planner_t *p, const aa_conn_t *e) {
  int n = 0;
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped && !strcmp(c->fingerprint, e->fingerprint) &&
        !strcmp(c->dev.host, e->dev.host))
      n++;
  return n;
}

/* Executors of `hardware` on c's host; idle ones only with idle_only. */
static int on_host(aa_planner_t *p, const char *hardware, const aa_conn_t *c, bool idle_only) {
  int n = 0;
  for (aa_conn_t *o = p->conns; o; o = o->next)
    if (serves(o, hardware) && (!idle_only || !o->busy_run) && !strcmp(o->dev.host, c->dev.host)) n++;
  return n;
}

int aa__registry_most_on_one_host(aa_planner_t *p, const char *hardware) {
  int best = 0;
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (!serves(c, hardware)) continue;
    int n = on_host(p, hardware, c, false);
    if (n > best) best = n;
  }
  return best;
}

bool aa__registry_gang(aa_planner_t *p, const char *hardware, int world, aa_conn_t **out) {
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (!serves(c, hardware) || c->busy_run || on_host(p, hardware, c, true) < world) continue;
    /* This host has enough: its idle executors take the ranks oldest first
     * (lowest id), so a gang's rank order does not depend on the list. */
    uint64_t after = 0;
    for (int k = 0; k < world; k++) {
      aa_conn_t *pick = NULL;
      for (aa_conn_t *o = p->conns; o; o = o->next)
        if (serves(o, hardware) && !o->busy_run && !strcmp(o->dev.host, c->dev.host) && o->id > after &&
            (!pick || o->id < pick->id))
          pick = o;
      out[k] = pick;
      after = pick->id;
    }
    return true;
  }
  return false;
}

aa_conn_t *aa__registry_find(aa_planner_t *p, uint64_t id) {
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped && c->id == id) return c;
  return NULL;
}

/* Every TCP connection presents the token (a planner listening on TCP
 * always has one); the unix socket is protected by its mode (0600). */
static int check_token(aa_conn_t *c, const aa_msg_hello_t *h, uint64_t req) {
  aa_planner_t *p = c->p;
  if (!c->tcp) return 0;
  if (h->token && aa_proto_token_equal(h->token, strlen(h->token), p->token, p->token_len)) return 0;
  const char *what = h->token ? "wrong token" : "missing token";
  aa__planner_log(p, "%s from %s: connection refused", what, c->peer);
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s (present the planner's token: --token-file FILE, by default <state dir>/token)",
           aa_strerror(AA_EPERM), what);
  aa__conn_fail(c, req, AA_EPERM, msg, NULL, 0);
  return -1;
}

void aa__registry_hello(aa_conn_t *c, const aa_msg_t *m) {
  aa_planner_t *p = c->p;
  const aa_msg_hello_t *h = &m->hello;
  if (check_token(c, h, m->id)) return;
  aa__conn_admitted(c);
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
    int rank = c->busy_rank;
    c->busy_run = c->busy_job = 0;
    c->busy_rank = 0;
    aa__jobs_rank_lost(p, run, rank, reason);
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
