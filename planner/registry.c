/* Who is connected: the hello of every connection (token check, executor
 * or client), the executors with their devices and hardware fingerprints,
 * heartbeats to executors and the dead-peer check (docs/service.md
 * "Connections"). */
#include "planner_internal.h"

#include "../strategies/layout.h"

#include <stdlib.h>
#include <string.h>

void aa__planner_pool_fingerprint(const aa_msg_device_t *d, int world, int hosts, char out[AA_STORE_HW_MAX]) {
  const char *kind = d->kind == AA_PROTO_DEV_CUDA ? "cuda" : "cpu";
  char tail[64];
  int k = snprintf(tail, sizeof tail, ":%lluMiBx%d", (unsigned long long)(d->memory >> 20), world);
  if (hosts > 1) snprintf(tail + k, sizeof tail - (size_t)k, "@%d", hosts);
  size_t room = AA_STORE_HW_MAX - 1 - strlen(kind) - 1 - strlen(tail);
  const char *name = d->name ? d->name : "";
  size_t n = strlen(name);
  if (n > room) {
    n = room;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
      n--; /* do not split a UTF-8 character */
  }
  snprintf(out, AA_STORE_HW_MAX, "%s:%.*s%s", kind, (int)n, name, tail);
}

void aa__planner_fingerprint(const aa_msg_device_t *d, int world, char out[AA_STORE_HW_MAX]) {
  aa__planner_pool_fingerprint(d, world, 1, out);
}

char *aa__planner_hw_description(const aa_msg_device_t *d, int world, int hosts) {
  json_t *dev = json_pack("{s:s, s:s, s:i, s:I, s:s}", "kind", d->kind == AA_PROTO_DEV_CUDA ? "cuda" : "cpu",
                          "name", d->name ? d->name : "", "index", d->index, "memory", (json_int_t)d->memory,
                          "host", d->host ? d->host : "");
  if (dev && d->kind == AA_PROTO_DEV_CUDA) {
    json_object_set_new(dev, "sm_count", json_integer(d->sm_count));
    json_object_set_new(dev, "cc", json_sprintf("%d.%d", d->cc_major, d->cc_minor));
    json_object_set_new(dev, "peak_bf16_flops", json_real(d->peak_bf16_flops));
  }
  json_t *o = json_pack("{s:o, s:i, s:i}", "devices", json_pack("[o]", dev), "world", world, "hosts", hosts);
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

/* The count 1..AA_PROTO_WORLD_MAX that ends s[0..*len), *len moved to
 * before its digits; 0 (and *len kept) when s ends in no such count. */
static int trailing_count(const char *s, size_t *len) {
  size_t i = *len;
  while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9')
    i--;
  long n = 0;
  for (size_t k = i; k < *len && n <= AA_PROTO_WORLD_MAX; k++)
    n = n * 10 + (s[k] - '0');
  if (n < 1 || n > AA_PROTO_WORLD_MAX) return 0;
  *len = i;
  return (int)n;
}

/* The pool that ends a job's hardware: "xN" (one host) or "xN@H" into
 * *world and *hosts; 1 and 1 when it ends in neither. */
static void hw_pool(const char *hardware, int *world, int *hosts) {
  size_t len = strlen(hardware);
  int n = trailing_count(hardware, &len), h = 1;
  *world = *hosts = 1;
  if (n && len > 0 && hardware[len - 1] == '@') {
    h = n;
    len--;
    n = trailing_count(hardware, &len);
  }
  if (n && len > 0 && hardware[len - 1] == 'x') {
    *world = n;
    *hosts = h;
  }
}

int aa__planner_hw_world(const char *hardware) {
  int world, hosts;
  hw_pool(hardware, &world, &hosts);
  return world;
}

int aa__planner_hw_hosts(const char *hardware) {
  int world, hosts;
  hw_pool(hardware, &world, &hosts);
  return hosts;
}

/* Whether c is a live executor of `hardware`: its device, with the pool
 * the fingerprint names (its size and hosts), gives that very fingerprint
 * (the device name is cut to fit the whole, so comparing texts is exact). */
static bool serves(const aa_conn_t *c, const char *hardware) {
  if (c->role != AA_CONN_EXECUTOR || c->dropped) return false;
  if (!hardware) return true;
  char fp[AA_STORE_HW_MAX];
  int world, hosts;
  hw_pool(hardware, &world, &hosts);
  aa__planner_pool_fingerprint(&c->dev, world, hosts, fp);
  return !strcmp(fp, hardware);
}

aa_conn_t *aa__registry_idle(aa_planner_t *p, const char *hardware) {
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (serves(c, hardware) && !c->busy_run) return c;
  return NULL;
}

bool aa__registry_spans(const aa_planner_t *p, const char *hardware) {
  return strncmp(hardware, "cpu:", 4) || p->cpu_backend != AA_CPU_BACKEND_SHM;
}

const char *aa__registry_backend(const aa_planner_t *p, aa_proto_dev_kind_t kind, int hosts) {
  if (kind == AA_PROTO_DEV_CUDA) return hosts > 1 ? "nccl-hosts" : "nccl";
  if (p->cpu_backend == AA_CPU_BACKEND_GLOO || hosts > 1) return "gloo";
  return "shm";
}

/* Whether c is in the pool of executor e: a live executor of e's device,
 * on e's host unless `across`. */
static bool in_pool(const aa_conn_t *c, const aa_conn_t *e, bool across) {
  return c->role == AA_CONN_EXECUTOR && !c->dropped && !strcmp(c->fingerprint, e->fingerprint) &&
         (across || !strcmp(c->dev.host, e->dev.host));
}

int aa__registry_pool(aa_planner_t *p, const aa_conn_t *e) {
  bool across = aa__registry_spans(p, e->fingerprint);
  int n = 0;
  for (aa_conn_t *c = p->conns; c; c = c->next)
    n += in_pool(c, e, across);
  return n;
}

int aa__registry_pool_hosts(aa_planner_t *p, const aa_conn_t *e) {
  bool across = aa__registry_spans(p, e->fingerprint);
  int n = 0;
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (!in_pool(c, e, across)) continue;
    /* A host counts at its first executor in the list. */
    const aa_conn_t *b = p->conns;
    while (b != c && !(in_pool(b, e, across) && !strcmp(b->dev.host, c->dev.host)))
      b = b->next;
    n += b == c;
  }
  return n;
}

/* One host's executors of a hardware: how many, how many idle, and the
 * lowest id among them (the hosts' order when their counts tie). */
typedef struct {
  const char *host; /* borrowed from an executor's device */
  int n, idle;
  uint64_t first;
} host_t;

/* The hosts with executors of `hardware` into *out (malloc'd, to free;
 * NULL when none), largest first: by idle executors with idle_first, else
 * by all of them; ties by the lowest executor id. Returns how many, or
 * AA_ENOMEM. */
static int hosts_of(aa_planner_t *p, const char *hardware, bool idle_first, host_t **out) {
  int cap = 0, n = 0;
  *out = NULL;
  for (aa_conn_t *c = p->conns; c; c = c->next)
    cap += serves(c, hardware);
  if (!cap) return 0;
  host_t *h = calloc((size_t)cap, sizeof *h);
  if (!h) return aa_error(AA_ENOMEM, "planner: no memory for the hosts of %d executors", cap);
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (!serves(c, hardware)) continue;
    int k = 0;
    while (k < n && strcmp(h[k].host, c->dev.host))
      k++;
    if (k == n) h[n++] = (host_t){.host = c->dev.host, .first = c->id};
    h[k].n++;
    h[k].idle += !c->busy_run;
    if (c->id < h[k].first) h[k].first = c->id;
  }
  /* Insertion sort: a planner has at most max_connections executors. */
  for (int i = 1; i < n; i++) {
    host_t x = h[i];
    int k = i;
    for (; k > 0; k--) {
      int a = idle_first ? x.idle : x.n, b = idle_first ? h[k - 1].idle : h[k - 1].n;
      if (a < b || (a == b && x.first > h[k - 1].first)) break;
      h[k] = h[k - 1];
    }
    h[k] = x;
  }
  *out = h;
  return n;
}

int aa__registry_most_on_one_host(aa_planner_t *p, const char *hardware) {
  int best = 0;
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (!serves(c, hardware)) continue;
    int n = 0;
    for (aa_conn_t *o = p->conns; o; o = o->next)
      n += serves(o, hardware) && !strcmp(o->dev.host, c->dev.host);
    if (n > best) best = n;
  }
  return best;
}

/* How many host groups of `unit` ranks (the groups of the axes kept
 * inside a host: the tensor groups) the hosts h[0..n) hold (idle executors
 * with idle, else all), and how many of the hosts, largest first, it takes
 * to hold `groups` of them (*used; n + 1 when they cannot). */
static int groups_held(const host_t *h, int n, int unit, bool idle, int groups, int *used) {
  int held = 0;
  *used = n + 1;
  for (int k = 0; k < n; k++) {
    held += (idle ? h[k].idle : h[k].n) / unit;
    if (held >= groups && *used > n) *used = k + 1;
  }
  return held;
}

bool aa__registry_placeable(aa_planner_t *p, const char *hardware, int world, int unit, char *why, size_t n) {
  if (unit < 1 || world % unit) unit = 1;
  char words[64];
  aa_axis_host_words(words, sizeof words);
  host_t *h;
  int nh = hosts_of(p, hardware, false, &h);
  if (nh < 0) {
    snprintf(why, n, "not measured: %s", aa_last_error());
    return false;
  }
  int largest = nh ? h[0].n : 0, total = 0, used;
  for (int k = 0; k < nh; k++)
    total += h[k].n;
  bool ok;
  if (!aa__registry_spans(p, hardware)) {
    ok = world <= largest;
    if (!ok)
      snprintf(why, n,
               "not measured: it needs %d executors of the job's hardware on one host, %d %s connected (the "
               "planner's --cpu-backend shm does not span hosts)",
               world, largest, largest == 1 ? "is" : "are");
  } else if (unit > 1 && unit > largest) {
    ok = false;
    snprintf(why, n,
             "not measured: it needs %d executors of the job's hardware with each %s group of %d "
             "inside one host, and the largest of the %d connected host%s has %d",
             world, words, unit, nh, nh == 1 ? "" : "s", largest);
  } else {
    int held = groups_held(h, nh, unit, false, world / unit, &used);
    ok = held >= world / unit;
    if (!ok && unit == 1)
      snprintf(why, n,
               "not measured: it needs %d executors of the job's hardware, and the %d connected host%s %s %d",
               world, nh, nh == 1 ? "" : "s", nh == 1 ? "has" : "have", total);
    else if (!ok)
      snprintf(why, n,
               "not measured: it needs %d executors of the job's hardware in %d %s groups of %d, "
               "each inside one host, and the %d connected host%s (%d executors) hold %d such group%s",
               world, world / unit, words, unit, nh, nh == 1 ? "" : "s", total, held, held == 1 ? "" : "s");
  }
  free(h);
  return ok;
}

void aa__registry_need(aa_planner_t *p, const char *hardware, int world, int unit, char *out, size_t n) {
  if (unit < 1 || world % unit) unit = 1;
  char words[64];
  aa_axis_host_words(words, sizeof words);
  host_t *h;
  int nh = hosts_of(p, hardware, false, &h), total = 0;
  for (int k = 0; k < nh; k++)
    total += h[k].n;
  free(h);
  if (nh < 0) nh = 0;
  if (world <= 1 || !aa__registry_spans(p, hardware)) {
    snprintf(out, n, "%d executor%s of %s on one host (%d connected)", world, world > 1 ? "s" : "", hardware,
             aa__registry_most_on_one_host(p, hardware));
    return;
  }
  /* Fewest hosts: one of world executors; most: one host group on each. */
  char groups[128] = "";
  if (unit > 1) snprintf(groups, sizeof groups, " with each %s group of %d inside one host", words, unit);
  snprintf(out, n, "%d executors of %s on 1 host x %d, or up to %d hosts x %d%s (%d connected on %d host%s)",
           world, hardware, world, world / unit, unit, groups, total, nh, nh == 1 ? "" : "s");
}

/* The idle executors of `hardware` on `host`, lowest id first, into
 * out[0..k) (k at most n); returns k. */
static int idle_on(aa_planner_t *p, const char *hardware, const char *host, aa_conn_t **out, int n) {
  uint64_t after = 0;
  int k = 0;
  for (; k < n; k++) {
    aa_conn_t *pick = NULL;
    for (aa_conn_t *o = p->conns; o; o = o->next)
      if (serves(o, hardware) && !o->busy_run && !strcmp(o->dev.host, host) && o->id > after &&
          (!pick || o->id < pick->id))
        pick = o;
    if (!pick) break;
    out[k] = pick;
    after = pick->id;
  }
  return k;
}

/* The ranks of one group of the axes of mask in s: the product of their
 * degrees. */
static int mask_unit(const aa_strategy_t *s, unsigned mask) {
  int unit = 1;
  for (int a = 0; a < AA_AXES; a++)
    if (mask & 1u << a) unit *= s->degree[a];
  return unit;
}

/* Spreads the gang of s over the hosts h[0..used): host group g (the
 * group of the axes of mask, `unit` ranks, its color in the mesh:
 * strategies/layout.h) goes to the first host with room for a whole group,
 * and within a host the ranks take its idle executors in rank order,
 * lowest id first. */
static int spread(aa_planner_t *p, const char *hardware, const aa_strategy_t *s, int world, unsigned mask,
                  int unit, const host_t *h, int used, aa_conn_t **out) {
  int groups = world / unit, rc = 0, n = 0;
  for (int k = 0; k < used; k++)
    n += h[k].idle;
  /* Each host's idle executors, listed once: host k's start at at[k]. */
  int *host_of = malloc((size_t)groups * sizeof *host_of), *at = calloc((size_t)used, sizeof *at),
      *taken = calloc((size_t)used, sizeof *taken);
  aa_conn_t **idle = malloc((size_t)n * sizeof *idle);
  if (!host_of || !at || !taken || !idle) {
    rc = aa_error(AA_ENOMEM, "planner: no memory to place a gang of %d", world);
    goto cleanup;
  }
  for (int k = 0, o = 0; k < used; o += h[k].idle, k++) {
    at[k] = o;
    if (idle_on(p, hardware, h[k].host, idle + o, h[k].idle) != h[k].idle) {
      rc = aa_error(AA_EINVAL, "planner: host %s has fewer idle executors than counted", h[k].host);
      goto cleanup;
    }
  }
  for (int g = 0, k = 0, room = h[0].idle / unit; g < groups; g++) {
    while (!room)
      room = h[++k].idle / unit;
    host_of[g] = k;
    room--;
  }
  for (int r = 0; r < world; r++) {
    aa_layout_t lay;
    if ((rc = aa_layout_of(&lay, s, r))) goto cleanup;
    int k = host_of[aa_layout_color(&lay, mask)];
    out[r] = idle[at[k] + taken[k]++];
  }
cleanup:
  free(host_of);
  free(at);
  free(taken);
  free(idle);
  return rc;
}

int aa__registry_place(aa_planner_t *p, const char *hardware, const aa_strategy_t *s, int world,
                       aa_conn_t **out) {
  host_t *h;
  int nh = hosts_of(p, hardware, true, &h), rc = 0;
  if (nh <= 0) return nh;
  if (h[0].idle >= world) {
    /* One host has enough: its idle executors take the ranks oldest first
     * (lowest id), so a gang's rank order does not depend on the list. */
    idle_on(p, hardware, h[0].host, out, world);
    rc = 1;
  } else if (s && world > 1 && aa__registry_spans(p, hardware) && world % aa_strategy_host_unit(s) == 0) {
    /* The groups of the axes kept inside a host when they can be (the
     * context axis: its ring passes a block every step) beside those that
     * always are (the tensor axis), else those alone. */
    const unsigned masks[2] = {aa_axis_host_mask_preferred(), aa_axis_host_mask()};
    for (int k = 0; k < 2 && !rc; k++) {
      int used, unit = mask_unit(s, masks[k]);
      if (world % unit || groups_held(h, nh, unit, true, world / unit, &used) < world / unit) continue;
      int err = spread(p, hardware, s, world, masks[k], unit, h, used, out);
      rc = err ? err : used;
    }
  }
  free(h);
  return rc;
}

int aa__registry_place_across(aa_planner_t *p, const char *hardware, int world, aa_conn_t **out) {
  host_t *h;
  int nh = hosts_of(p, hardware, true, &h);
  if (nh <= 0) return nh;
  int have = 0, hosts = 0;
  for (int k = 0; k < nh; k++) {
    have += h[k].idle;
    hosts += h[k].idle > 0;
  }
  int rc = 0;
  if (hosts >= 2 && have >= world) {
    /* Each host's idle executors, oldest first; rank r from the r-th host
     * in turn that still has one, so ranks 0 and 1 (and every pair and
     * quadruple the calibration splits off) sit on different hosts. */
    aa_conn_t **each = malloc((size_t)nh * (size_t)world * sizeof *each);
    int *got = calloc((size_t)nh, sizeof *got), *next = calloc((size_t)nh, sizeof *next);
    if (!each || !got || !next) {
      rc = aa_error(AA_ENOMEM, "planner: no memory to place a gang of %d", world);
    } else {
      for (int k = 0; k < nh; k++)
        got[k] = idle_on(p, hardware, h[k].host, each + (size_t)k * (size_t)world,
                         h[k].idle < world ? h[k].idle : world);
      int r = 0, used = 0;
      for (int k = 0; r < world; k = (k + 1) % nh)
        if (next[k] < got[k]) {
          used += next[k] == 0;
          out[r++] = each[(size_t)k * (size_t)world + (size_t)next[k]++];
        }
      rc = used;
    }
    free(each);
    free(got);
    free(next);
  }
  free(h);
  return rc;
}

json_t *aa__registry_hosts_json(aa_planner_t *p) {
  json_t *hosts = json_array();
  /* Executors by id (the order they connected), each under its host. */
  for (uint64_t after = 0; hosts;) {
    aa_conn_t *c = NULL;
    for (aa_conn_t *o = p->conns; o; o = o->next)
      if (o->role == AA_CONN_EXECUTOR && !o->dropped && o->id > after && (!c || o->id < c->id)) c = o;
    if (!c) break;
    after = c->id;
    json_t *h = NULL, *v;
    size_t i;
    json_array_foreach(hosts, i, v) {
      if (!strcmp(json_string_value(json_object_get(v, "host")), c->dev.host)) h = v;
    }
    if (!h) {
      h = json_pack("{s:s, s:[]}", "host", c->dev.host, "executors");
      if (!h || json_array_append_new(hosts, h)) break;
    }
    json_t *e = json_pack("{s:I, s:s, s:s, s:o}", "id", (json_int_t)c->id, "device", c->fingerprint, "state",
                          c->busy_run ? "busy" : "idle", "run",
                          c->busy_run ? json_integer(c->busy_run) : json_null());
    json_array_append_new(json_object_get(h, "executors"), e);
  }
  return hosts;
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
  snprintf(msg, sizeof msg,
           "%s: %s (present the planner's token: --token-file FILE, by default <state dir>/token)",
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
  aa__planner_log(p, "executor %llu connected from %s: %s (host %s, pid %d)", (unsigned long long)c->id,
                  c->peer, c->fingerprint, c->dev.host, c->dev.pid);
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
      const char *who = c->role == AA_CONN_EXECUTOR ? "executor"
                        : c->role == AA_CONN_CLIENT ? "client"
                                                    : "peer";
      if (c->role != AA_CONN_EXECUTOR)
        aa__planner_log(p, "%s %llu (%s) stopped responding: closed", who, (unsigned long long)c->id,
                        c->peer);
      aa__conn_drop(c, "stopped responding");
      continue;
    }
    if (c->role == AA_CONN_EXECUTOR) aa__conn_send(c, &hb);
  }
}
